/* What the ledger's two stores share: the handle, one run's column values,
 * the entry helpers (ledger_entry.c, which calls neither store) and the
 * PostgreSQL store's entry points (ledger_pg.c). The SQLite store and the
 * store-independent logic live in ledger.c. docs/schema/ledger.md. */
#ifndef DG_LEDGER_INT_H
#define DG_LEDGER_INT_H

#include "core/core.h"
#include "core/json.h"

#include <sqlite3.h>

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
