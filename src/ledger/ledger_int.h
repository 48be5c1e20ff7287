/* What the ledger's two stores share: the handle, one run's column values,
 * the entry helpers (ledger_entry.c, which calls neither store) and the
 * PostgreSQL store's entry points (ledger_pg.c). The SQLite store and the
 * store-independent logic live in ledger.c. docs/schema/ledger.md. */
#ifndef DG_LEDGER_INT_H
#define DG_LEDGER_INT_H

#include "core/core.h"
#include "core/json.h"

#include <sqlite3.h>
#include <sys/types.h>

/* PRAGMA application_id of a devgate ledger, and the app_id column of a team
 * ledger's devgate_ledger table: "DGV1". */
#define DG_LEDGER_APP_ID 0x44475631
/* The schema version both stores are migrated to. */
#define DG_LEDGER_SCHEMA 2
#define DG_LEDGER_ID_RETRIES 64

struct lg_pg;

struct dg_ledger {
    sqlite3 *db;       /* the SQLite store, or NULL */
    struct lg_pg *pg;  /* the PostgreSQL store, or NULL */
    char *path;        /* as given (a team URI may hold a password: never shown) */
    char *shown;       /* for messages: control characters replaced, no password */
    char *secret;      /* a team URI's password, scrubbed from libpq's messages */
    char *pending_for; /* fallback: the team ledger (shown form) runs wait for */
    int timeout_ms;
};

/* One run's values as they go into a store. */
typedef struct lg_fields {
    char id[48];
    char started[24];
    const char *verb, *state, *host, *commit, *version, *record, *pending, *node;
    int exit_status;
    bool exact; /* the id is given (push): a taken id is reported, never redrawn */
} lg_fields;

/* Replaces the random part of f->id (the stamp is kept). */
void dg_lg_draw_id(lg_fields *f);

/* The runs table after its sequence column, and its index: schema version 1
 * in both stores' words (only the sequence differs). */
#define LG_RUNS_COLUMNS                                                                            \
    " id TEXT UNIQUE NOT NULL,"                                                                    \
    " verb TEXT NOT NULL,"                                                                         \
    " started_at TEXT NOT NULL,"                                                                   \
    " exit_status INTEGER NOT NULL,"                                                               \
    " state TEXT NOT NULL DEFAULT 'complete' CHECK (state IN ('complete', 'interrupted')),"        \
    " host TEXT,"                                                                                  \
    " git_commit TEXT,"                                                                            \
    " devgate_version TEXT,"                                                                       \
    " record TEXT NOT NULL);"                                                                      \
    "CREATE INDEX runs_started_at ON runs(started_at);"

/* The migrations, in both stores' words (only the sequence column differs):
 * entry i brings schema version i to i + 1, and runs inside one transaction
 * with the version bump. Append only. 1 -> 2: the remote node a run ran on;
 * the team ledger a run waits for. */
#define LG_MIGRATIONS(seq_column)                                                                  \
    {                                                                                              \
        "CREATE TABLE runs(" seq_column "," LG_RUNS_COLUMNS,                                       \
            "ALTER TABLE runs ADD COLUMN node TEXT;"                                               \
            "ALTER TABLE runs ADD COLUMN pending TEXT;",                                           \
    }

/* Columns of an entry, in this order, in every query of both stores. */
#define LG_COLS                                                                                    \
    "id, seq, verb, started_at, exit_status, state, host, git_commit, devgate_version, node, "     \
    "pending"
#define LG_NCOLS 11
/* The list entry of one row given as text (NULL: SQL NULL); NULL when out of
 * memory. */
cJSON *dg_lg_entry(const char *const v[LG_NCOLS]);
/* Adds the summary members of a listed run (backend, model, batch, throughput,
 * verdict, spec_id, bucket_id, label, command) read from its record rec (may
 * be NULL: all not reported) to e; false when out of memory. */
bool dg_lg_add_summary(cJSON *e, const cJSON *rec, const char *verb);

/* obj's string member key, NULL when absent or not a string. */
const char *dg_lg_str(const cJSON *obj, const char *key);
/* obj's number member key as an int, 0 when absent. */
int dg_lg_int(const cJSON *obj, const char *key);

/* ---- ledger_query.c: either store ---- */

/* True when lg is open on a store. */
bool dg_lg_usable(const dg_ledger *lg);
/* The store's insert and match (dg_lg_sq_* or dg_lg_pg_*). */
dg_status dg_lg_store_insert(dg_ctx *ctx, dg_ledger *lg, lg_fields *f, bool *taken);
dg_status dg_lg_store_match(dg_ctx *ctx, dg_ledger *lg, const char *id, int max, cJSON *arr);
/* A listed entry e finished: its summary added, its record parsed in place
 * (keep) or dropped; DG_ERR_LEDGER when a kept record is not JSON. */
dg_status dg_lg_finish_entry(dg_ctx *ctx, dg_ledger *lg, cJSON *e, bool keep);

/* ---- ledger_path.c: where a SQLite ledger lives ---- */

/* $XDG_DATA_HOME/devgate/ledger.db, else ~/.local/share/devgate/ledger.db
 * (DEVGATE_LEDGER aside); dg_malloc'd, NULL when no home is known. */
char *dg_lg_default_file(void);
/* Makes the folders above path (shown in messages); the status and message. */
dg_status dg_lg_make_parents(dg_ctx *ctx, const char *path, const char *shown);
/* DG_ERR_LEDGER with why when path is not a place a ledger file can be. */
dg_status dg_lg_check_location(dg_ctx *ctx, const char *path, const char *shown);
/* "a folder", "a socket", ... for a file's mode. */
const char *dg_lg_file_kind(mode_t mode);
/* True when path's folder exists but cannot be written. */
bool dg_lg_dir_unwritable(const char *path);

/* ---- ledger_sqlite.c: the SQLite store ---- */

/* SQLite's words for failure rc: the connection's message while it is rc's,
 * else rc's own text. */
const char *dg_lg_sql_why(sqlite3 *db, int rc);
/* Maps a SQLite failure rc while doing (a phrase) to a status and a message
 * naming the ledger shown. */
dg_status dg_lg_sql_fail(dg_ctx *ctx, sqlite3 *db, const char *shown, int timeout_ms, int rc,
                         const char *doing);
/* dg_lg_sql_fail for lg's connection. */
dg_status dg_lg_fail(dg_ctx *ctx, const dg_ledger *lg, int rc, const char *doing);
/* Rolls back the open transaction, if there is one. */
void dg_lg_rollback(sqlite3 *db);
/* True, after a short sleep, when rc is a lock conflict SQLite answered at
 * once and the deadline is not yet past (*attempt counts the retries). */
bool dg_lg_retry_busy(int rc, double deadline, int *attempt);
/* Now plus lg's busy timeout (dg_now's clock). */
double dg_lg_deadline(const dg_ledger *lg);
/* BEGIN IMMEDIATE, waiting up to lg's timeout for the write lock; SQLite's rc. */
int dg_lg_begin(dg_ledger *lg);
/* The SQLite halves of the store calls (the dg_lg_pg_* below are the team
 * ledger's), with the same contracts. */
dg_status dg_lg_sq_insert(dg_ctx *ctx, dg_ledger *lg, lg_fields *f, bool *taken);
dg_status dg_lg_sq_update(dg_ctx *ctx, dg_ledger *lg, const char *id, int exit_status,
                          const char *state, const char *record);
dg_status dg_lg_sq_list(dg_ctx *ctx, dg_ledger *lg, int limit, cJSON *arr);
dg_status dg_lg_sq_match(dg_ctx *ctx, dg_ledger *lg, const char *id, int max, cJSON *arr);
dg_status dg_lg_sq_pending(dg_ctx *ctx, dg_ledger *lg, cJSON *arr);
dg_status dg_lg_sq_clear_pending(dg_ctx *ctx, dg_ledger *lg, const char *id);

/* True when this build can reach PostgreSQL (libpq linked). */
bool dg_lg_pg_built(void);
/* Sets lg->shown and lg->secret from the URI in lg->path; DG_ERR_USAGE when it
 * is not a connection URI libpq accepts (the message never holds it). */
dg_status dg_lg_pg_name(dg_ctx *ctx, dg_ledger *lg);
/* Connects and migrates. *unreachable is set when the server could not be
 * reached or refused the connection (the caller may fall back). */
dg_status dg_lg_pg_open(dg_ctx *ctx, dg_ledger *lg, bool *unreachable);
void dg_lg_pg_close(struct lg_pg *pg);
/* Inserts one run; *taken (f->exact only) when its id is already there. */
dg_status dg_lg_pg_insert(dg_ctx *ctx, dg_ledger *lg, lg_fields *f, bool *taken);
dg_status dg_lg_pg_update(dg_ctx *ctx, dg_ledger *lg, const char *id, int exit_status,
                          const char *state, const char *record);
/* Appends the newest limit entries (0: all) to arr, each with "record" as
 * text and "rank" 0. */
dg_status dg_lg_pg_list(dg_ctx *ctx, dg_ledger *lg, int limit, cJSON *arr);
/* Appends up to max entries whose id is id (rank 0) or starts with it (rank 1),
 * exact first then newest first; each carries "record" as text and "rank". */
dg_status dg_lg_pg_match(dg_ctx *ctx, dg_ledger *lg, const char *id, int max, cJSON *arr);

#endif
