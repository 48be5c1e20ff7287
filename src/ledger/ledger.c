/* Run ledger: one SQLite file (WAL) holding every recorded run, with forward
 * schema migrations, or a team ledger in PostgreSQL (ledger_pg.c) with the
 * same schema behind the same calls (docs/schema/ledger.md). This file
 * opens a ledger and records and updates runs; the SQLite store's rows are
 * in ledger_sqlite.c, reading either store in ledger_query.c, where a ledger
 * lives in ledger_path.c. */
#include "ledger/ledger_int.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DG_LEDGER_DEFAULT_TIMEOUT_MS 5000

/* The SQLite ledger's migrations (ledger_int.h; the team ledger's in ledger_pg.c). */
static const char *const k_migrations[] = LG_MIGRATIONS(" seq INTEGER PRIMARY KEY AUTOINCREMENT");
_Static_assert(sizeof k_migrations / sizeof k_migrations[0] == DG_LEDGER_SCHEMA,
               "one migration per schema version");

/* ---- small query helpers ------------------------------------------------------ */

/* Runs a one-value integer query. */
static int query_int(sqlite3 *db, const char *sql, long long *out)
{
    sqlite3_stmt *stmt = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, NULL);
    if (rc != SQLITE_OK) {
        sqlite3_finalize(stmt);
        return rc;
    }
    rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(stmt, 0);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        *out = 0;
        rc = SQLITE_OK;
    }
    sqlite3_finalize(stmt);
    return rc;
}

typedef struct ident {
    long long app_id, version, objects;
} ident;

/* Reads the identity of the database; the first real read of the file. The
 * three values come from one snapshot: read outside a transaction, another
 * opener's migration could commit between them (application_id 0 beside
 * user_version 1), making a fresh ledger look like another application's. */
static int read_ident(sqlite3 *db, ident *id)
{
    bool own = sqlite3_get_autocommit(db) != 0;
    int rc = own ? sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) : SQLITE_OK;
    if (rc == SQLITE_OK)
        rc = query_int(db, "SELECT count(*) FROM sqlite_schema", &id->objects);
    if (rc == SQLITE_OK)
        rc = query_int(db, "PRAGMA application_id", &id->app_id);
    if (rc == SQLITE_OK)
        rc = query_int(db, "PRAGMA user_version", &id->version);
    if (own && !sqlite3_get_autocommit(db))
        sqlite3_exec(db, rc == SQLITE_OK ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

/* DG_OK for a devgate ledger this build can use or an empty new database. */
static dg_status judge_ident(dg_ctx *ctx, const ident *id, const char *shown)
{
    if (id->app_id == DG_LEDGER_APP_ID) {
        if (id->version > DG_LEDGER_SCHEMA)
            return dg_fail(ctx, DG_ERR_SCHEMA,
                           "ledger %s: written by a newer devgate: schema %lld, this build knows "
                           "up to %d; the file was left untouched",
                           shown, id->version, DG_LEDGER_SCHEMA);
        return DG_OK;
    }
    if (id->app_id == 0 && id->version == 0 && id->objects == 0)
        return DG_OK;
    return dg_fail(ctx, DG_ERR_LEDGER,
                   "ledger %s: not a devgate ledger (an SQLite database of another application, "
                   "application_id 0x%08llx, user_version %lld); the file was left untouched",
                   shown, (unsigned long long)(id->app_id & 0xffffffffLL), id->version);
}

/* Applies pending migrations, each in its own BEGIN IMMEDIATE transaction; the
 * version is re-read inside the transaction so concurrent openers never apply
 * one twice. */
static dg_status migrate(dg_ctx *ctx, dg_ledger *lg)
{
    for (;;) {
        int rc = dg_lg_begin(lg);
        if (rc != SQLITE_OK)
            return dg_lg_fail(ctx, lg, rc, "starting the schema migration");
        ident id = {0};
        rc = read_ident(lg->db, &id);
        if (rc != SQLITE_OK) {
            dg_status st = dg_lg_fail(ctx, lg, rc, "reading the schema version");
            dg_lg_rollback(lg->db);
            return st;
        }
        dg_status st = judge_ident(ctx, &id, lg->shown);
        if (st != DG_OK) {
            dg_lg_rollback(lg->db);
            return st;
        }
        if (id.version >= DG_LEDGER_SCHEMA) {
            dg_lg_rollback(lg->db);
            return DG_OK;
        }
        int v = (int)id.version;
        char bump[96];
        if (v == 0)
            snprintf(bump, sizeof bump, "PRAGMA application_id = %d; PRAGMA user_version = %d;",
                     DG_LEDGER_APP_ID, v + 1);
        else
            snprintf(bump, sizeof bump, "PRAGMA user_version = %d;", v + 1);
        rc = sqlite3_exec(lg->db, k_migrations[v], NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(lg->db, bump, NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(lg->db, "COMMIT", NULL, NULL, NULL);
        if (rc != SQLITE_OK) {
            char doing[64];
            snprintf(doing, sizeof doing, "migrating the schema from version %d to %d", v, v + 1);
            st = dg_lg_fail(ctx, lg, rc, doing);
            dg_lg_rollback(lg->db);
            return st;
        }
        dg_log(ctx, DG_LOG_INFO, "ledger %s: schema migrated to version %d", lg->shown, v + 1);
    }
}

/* ---- open / close ------------------------------------------------------------- */

void dg_ledger_close(dg_ledger *lg)
{
    if (!lg)
        return;
    if (lg->db)
        sqlite3_close_v2(lg->db);
    dg_lg_pg_close(lg->pg);
    dg_free(lg->path);
    dg_free(lg->shown);
    if (lg->secret) {
        memset(lg->secret, 0, strlen(lg->secret));
        dg_free(lg->secret);
    }
    dg_free(lg->pending_for);
    dg_free(lg);
}

/* Opens the team ledger at path (lg allocated, path set). */
static dg_status open_team(dg_ctx *ctx, dg_ledger *lg, bool *unreachable)
{
    dg_status st = dg_lg_pg_name(ctx, lg);
    if (st != DG_OK)
        return st;
    if (!dg_lg_pg_built())
        return dg_fail(ctx, DG_ERR_UNAVAILABLE,
                       "ledger %s: this devgate was built without PostgreSQL support (libpq)",
                       lg->shown);
    return dg_lg_pg_open(ctx, lg, unreachable);
}

static dg_status open_sqlite(dg_ctx *ctx, dg_ledger *lg);
static dg_status open_sqlite_readonly(dg_ctx *ctx, dg_ledger *lg);

static dg_status open_any(dg_ctx *ctx, const char *path, int timeout_ms, bool readonly,
                          dg_ledger **out, bool *unreachable)
{
    *unreachable = false;
    if (!out)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger open: no place for the result");
    *out = NULL;
    if (!path || !path[0])
        return dg_fail(ctx, DG_ERR_USAGE, "ledger open: empty path");
    dg_ledger *lg = dg_calloc(1, sizeof *lg);
    if (!lg)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    lg->path = dg_strdup(path);
    lg->timeout_ms = timeout_ms > 0 ? timeout_ms : DG_LEDGER_DEFAULT_TIMEOUT_MS;
    if (!lg->path) {
        dg_ledger_close(lg);
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    }
    dg_status st = dg_ledger_is_team(path) ? open_team(ctx, lg, unreachable)
                   : readonly              ? open_sqlite_readonly(ctx, lg)
                                           : open_sqlite(ctx, lg);
    if (st != DG_OK) {
        dg_ledger_close(lg);
        return st;
    }
    *out = lg;
    return DG_OK;
}

dg_status dg_ledger_open(dg_ctx *ctx, const char *path, int timeout_ms, dg_ledger **out)
{
    bool unreachable;
    return open_any(ctx, path, timeout_ms, false, out, &unreachable);
}

dg_status dg_ledger_open_readonly(dg_ctx *ctx, const char *path, int timeout_ms, dg_ledger **out)
{
    bool unreachable;
    return open_any(ctx, path, timeout_ms, true, out, &unreachable);
}

dg_status dg_ledger_open_record(dg_ctx *ctx, const char *path, int timeout_ms, dg_ledger **out)
{
    bool unreachable;
    dg_status st = open_any(ctx, path, timeout_ms, false, out, &unreachable);
    if (st == DG_OK || !unreachable)
        return st;
    /* Keep the run here; the team ledger's name is remembered without its
     * password (dg_lg_pg_name again: the failed handle is gone). */
    char why[512];
    dg_copy_clean(why, sizeof why, dg_errmsg(ctx));
    dg_ledger probe = {.path = (char *)path};
    st = dg_lg_pg_name(ctx, &probe);
    char *team = probe.shown;
    if (probe.secret) {
        memset(probe.secret, 0, strlen(probe.secret));
        dg_free(probe.secret);
    }
    if (st != DG_OK)
        return st;
    char *local = dg_ledger_local_path();
    if (!local) {
        dg_free(team);
        return dg_fail(ctx, DG_ERR_LEDGER,
                       "%s; and no local ledger to keep the run in (set DEVGATE_LOCAL_LEDGER)",
                       why);
    }
    st = dg_ledger_open(ctx, local, timeout_ms, out);
    if (st == DG_OK) {
        (*out)->pending_for = team;
        dg_log(ctx, DG_LOG_WARN,
               "%s; the run is kept in the local ledger %s, pending: 'devgate ledger push' "
               "uploads it",
               why, (*out)->shown);
        team = NULL;
    }
    dg_free(local);
    dg_free(team);
    return st;
}

const char *dg_ledger_pending_for(const dg_ledger *lg)
{
    return lg ? lg->pending_for : NULL;
}

const char *dg_ledger_name(const dg_ledger *lg)
{
    return lg ? lg->shown : NULL;
}

/* path as messages show it (cleaned of control bytes), dg_malloc'd. */
static char *shown_name(const char *path)
{
    size_t len = strlen(path) + 1;
    char *shown = dg_malloc(len);
    if (shown)
        dg_copy_clean(shown, len, path);
    return shown;
}

/* Opens the SQLite ledger at lg->path; on failure the caller closes lg. */
static dg_status open_sqlite(dg_ctx *ctx, dg_ledger *lg)
{
    const char *path = lg->path;
    if (!(lg->shown = shown_name(path)))
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");

    dg_status st = dg_lg_make_parents(ctx, path, lg->shown);
    if (st == DG_OK)
        st = dg_lg_check_location(ctx, path, lg->shown);
    if (st != DG_OK) {
        return st;
    }

    /* This SQLite may treat names starting "file:" as URIs; keep them files. */
    char *name = strncmp(path, "file:", 5) == 0 ? dg_asprintf("./%s", path) : dg_strdup(path);
    if (!name) {
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    }
    char *wal = dg_asprintf("%s-wal", path);
    struct stat wsb;
    bool wal_existed = !wal || stat(wal, &wsb) == 0;
    dg_free(wal);
    int rc = sqlite3_open_v2(
        name, &lg->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    dg_free(name);
    if (rc != SQLITE_OK) {
        st = dg_lg_fail(ctx, lg, rc, "opening");
        return st;
    }
    sqlite3_extended_result_codes(lg->db, 1);
    sqlite3_busy_timeout(lg->db, lg->timeout_ms);
    /* Until the file proves to be ours, closing must not checkpoint a write-
     * ahead log that was already there into it. (Without one, closing only
     * removes the empty -wal/-shm files that reading created.) */
    if (wal_existed)
        sqlite3_db_config(lg->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
    if (sqlite3_db_readonly(lg->db, "main") == 1) {
        st = dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: opened read-only; a ledger must be writable",
                     lg->shown);
        return st;
    }

    /* Identify the file before anything writes to it. */
    ident id = {0};
    double deadline = dg_lg_deadline(lg);
    int attempt = 0;
    do
        rc = read_ident(lg->db, &id);
    while (rc != SQLITE_OK && dg_lg_retry_busy(rc, deadline, &attempt));
    if (rc != SQLITE_OK) {
        int prim = rc & 0xff;
        if (prim == SQLITE_NOTADB || prim == SQLITE_CORRUPT)
            st = dg_fail(ctx, DG_ERR_LEDGER,
                         "ledger %s: not a devgate ledger or corrupt (%s); the file was left "
                         "untouched",
                         lg->shown, dg_lg_sql_why(lg->db, rc));
        else
            st = dg_lg_fail(ctx, lg, rc, "reading the ledger header");
        return st;
    }
    st = judge_ident(ctx, &id, lg->shown);
    if (st != DG_OK) {
        return st;
    }
    sqlite3_db_config(lg->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, NULL);

    /* journal_mode=WAL answers the mode in effect; anything else (a file
     * system without shared memory) still works, only with less concurrency. */
    deadline = dg_lg_deadline(lg);
    attempt = 0;
    do {
        sqlite3_stmt *stmt = NULL;
        rc = sqlite3_prepare_v2(lg->db, "PRAGMA journal_mode=WAL", -1, &stmt, NULL);
        if (rc == SQLITE_OK) {
            rc = sqlite3_step(stmt);
            if (rc == SQLITE_ROW) {
                const unsigned char *mode = sqlite3_column_text(stmt, 0);
                if (!mode || strcmp((const char *)mode, "wal") != 0)
                    dg_log(ctx, DG_LOG_WARN, "ledger %s: journal mode is %s, not wal", lg->shown,
                           mode ? (const char *)mode : "unknown");
                rc = SQLITE_OK;
            }
        }
        sqlite3_finalize(stmt);
    } while (rc != SQLITE_OK && dg_lg_retry_busy(rc, deadline, &attempt));
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(lg->db, "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;", NULL, NULL,
                          NULL);
    if (rc != SQLITE_OK) {
        st = dg_lg_fail(ctx, lg, rc, "setting the journal mode");
        return st;
    }

    if (id.app_id != DG_LEDGER_APP_ID || id.version < DG_LEDGER_SCHEMA) {
        st = migrate(ctx, lg);
        if (st != DG_OK)
            return st;
    }
    return DG_OK;
}

/* "file:PATH?immutable=1" with PATH percent-encoded (RFC 3986), for SQLite's
 * URI names; NULL when out of memory. */
static char *immutable_uri(const char *path)
{
    size_t n = strlen(path);
    char *uri = dg_malloc(3 * n + 32), *p = uri;
    if (!uri)
        return NULL;
    p += sprintf(p, "file:%s", path[0] == '/' ? "" : "./");
    for (const unsigned char *c = (const unsigned char *)path; *c; c++) {
        if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
            strchr("/-._~", *c))
            *p++ = (char)*c;
        else
            p += sprintf(p, "%%%02X", *c);
    }
    strcpy(p, "?immutable=1");
    return uri;
}

/* Opens the existing SQLite ledger at lg->path for reading only: nothing is
 * created, migrated or written. A WAL ledger in a folder we cannot write to (a
 * read-only mount, another user's folder) cannot get its -shm file; it is then
 * read as immutable, without locks: a run someone else records meanwhile may
 * be missed. On failure the caller closes lg. */
static dg_status open_sqlite_readonly(dg_ctx *ctx, dg_ledger *lg)
{
    const char *path = lg->path;
    if (!(lg->shown = shown_name(path)))
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return errno == ENOENT
                   ? dg_fail(ctx, DG_ERR_NOT_FOUND,
                             "ledger %s: no such file (no run was recorded there)", lg->shown)
                   : dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: %s", lg->shown, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: is a folder, not a ledger file", lg->shown);
    if (!S_ISREG(sb.st_mode))
        return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: not a regular file (%s)", lg->shown,
                       dg_lg_file_kind(sb.st_mode));
    if (access(path, R_OK) != 0)
        return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: cannot open for reading: %s", lg->shown,
                       strerror(errno));

    ident id = {0};
    int rc = SQLITE_OK;
    for (int pass = 0; pass < 2; pass++) {
        /* This SQLite may treat names starting "file:" as URIs; keep them files. */
        char *name = pass == 1                        ? immutable_uri(path)
                     : strncmp(path, "file:", 5) == 0 ? dg_asprintf("./%s", path)
                                                      : dg_strdup(path);
        if (!name)
            return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
        sqlite3_close(lg->db);
        lg->db = NULL;
        rc = sqlite3_open_v2(
            name, &lg->db,
            SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX | (pass == 1 ? SQLITE_OPEN_URI : 0), NULL);
        dg_free(name);
        if (rc != SQLITE_OK)
            return dg_lg_fail(ctx, lg, rc, "opening read-only");
        sqlite3_extended_result_codes(lg->db, 1);
        sqlite3_busy_timeout(lg->db, lg->timeout_ms);
        double deadline = dg_lg_deadline(lg);
        int attempt = 0;
        do
            rc = read_ident(lg->db, &id);
        while (rc != SQLITE_OK && dg_lg_retry_busy(rc, deadline, &attempt));
        /* CANTOPEN: a WAL ledger whose -shm file cannot be made. */
        if ((rc & 0xff) != SQLITE_CANTOPEN || pass == 1 || !dg_lg_dir_unwritable(path))
            break;
    }
    if (rc != SQLITE_OK) {
        int prim = rc & 0xff;
        if (prim == SQLITE_NOTADB || prim == SQLITE_CORRUPT)
            return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: not a devgate ledger or corrupt (%s)",
                           lg->shown, dg_lg_sql_why(lg->db, rc));
        return dg_lg_fail(ctx, lg, rc, "reading the ledger header");
    }
    dg_status st = judge_ident(ctx, &id, lg->shown);
    if (st != DG_OK)
        return st;
    if (id.app_id != DG_LEDGER_APP_ID)
        return dg_fail(ctx, DG_ERR_NOT_FOUND, "ledger %s: empty (no run was recorded there)",
                       lg->shown);
    if (id.version < DG_LEDGER_SCHEMA)
        return dg_fail(ctx, DG_ERR_SCHEMA,
                       "ledger %s: schema %lld is older than this build's %d, and reading does "
                       "not migrate it: record one run into it (or open it writable) first",
                       lg->shown, id.version, DG_LEDGER_SCHEMA);
    return DG_OK;
}

/* ---- record ------------------------------------------------------------------- */

/* A string member, or NULL. */

/* An integer member, or 0. */

/* "host": "name" or "host": {"hostname"|"name": "..."}. */
static const char *host_of(const cJSON *obj)
{
    if (!cJSON_IsObject(obj))
        return NULL;
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(obj, "host");
    if (cJSON_IsString(h) && h->valuestring)
        return h->valuestring;
    const char *s = dg_lg_str(h, "hostname");
    if (!s)
        s = dg_lg_str(h, "name");
    if (!s)
        s = dg_lg_str(obj, "hostname");
    return s;
}

static const char *commit_of(const cJSON *obj)
{
    return cJSON_IsObject(obj) ? dg_lg_str(cJSON_GetObjectItemCaseSensitive(obj, "git"), "commit")
                               : NULL;
}

static const char *state_of(const cJSON *rec)
{
    const char *s = dg_lg_str(rec, "state");
    const cJSON *flag =
        cJSON_IsObject(rec) ? cJSON_GetObjectItemCaseSensitive(rec, "interrupted") : NULL;
    if ((s && strcmp(s, "interrupted") == 0) || cJSON_IsTrue(flag))
        return "interrupted";
    return "complete";
}

/* Strict "YYYY-MM-DDTHH:MM:SSZ" (a real UTC second) into *t. */
static bool parse_utc_iso(const char *s, time_t *t)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:ddZ";
    if (!s || strlen(s) != sizeof shape - 1)
        return false;
    for (size_t i = 0; i < sizeof shape - 1; i++) {
        bool ok = shape[i] == 'd' ? (s[i] >= '0' && s[i] <= '9') : s[i] == shape[i];
        if (!ok)
            return false;
    }
    struct tm tm = {0};
    tm.tm_year = atoi(s) - 1900;
    tm.tm_mon = atoi(s + 5) - 1;
    tm.tm_mday = atoi(s + 8);
    tm.tm_hour = atoi(s + 11);
    tm.tm_min = atoi(s + 14);
    tm.tm_sec = atoi(s + 17);
    struct tm want = tm, back;
    time_t v = timegm(&tm);
    if (v == (time_t)-1 || !gmtime_r(&v, &back))
        return false;
    if (back.tm_year != want.tm_year || back.tm_mon != want.tm_mon ||
        back.tm_mday != want.tm_mday || back.tm_hour != want.tm_hour ||
        back.tm_min != want.tm_min || back.tm_sec != want.tm_sec)
        return false; /* e.g. February 30th */
    *t = v;
    return true;
}

/* ---- store-independent ---------------------------------------------------------- */

/* "remote": {"node": "..."} of a record that ran on a remote node. */
static const char *node_of(const cJSON *rec)
{
    return cJSON_IsObject(rec) ? dg_lg_str(cJSON_GetObjectItemCaseSensitive(rec, "remote"), "node")
                               : NULL;
}

static dg_status record_text(dg_ctx *ctx, dg_ledger *lg, const char *verb, int exit_status,
                             const char *record_json, char **run_id)
{
    if (run_id)
        *run_id = NULL;
    if (!dg_lg_usable(lg))
        return dg_fail(ctx, DG_ERR_USAGE, "ledger record: no open ledger");
    if (!verb || !verb[0])
        return dg_fail(ctx, DG_ERR_USAGE, "ledger record: empty verb");
    if (!record_json)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger record: no record");
    const char *end = NULL;
    cJSON *rec = cJSON_ParseWithOpts(record_json, &end, 1);
    if (!rec) {
        size_t off = end && end >= record_json ? (size_t)(end - record_json) : 0;
        return dg_fail(ctx, DG_ERR_USAGE,
                       "ledger record: the record is not valid JSON (at byte %zu)", off);
    }
    lg_fields f = {.verb = verb,
                   .exit_status = exit_status,
                   .record = record_json,
                   .version = DG_VERSION,
                   .pending = lg->pending_for};
    const cJSON *env = cJSON_GetObjectItemCaseSensitive(rec, "env");
    f.host = host_of(rec);
    if (!f.host)
        f.host = host_of(env);
    f.commit = commit_of(rec);
    if (!f.commit)
        f.commit = commit_of(env);
    f.state = state_of(rec);
    f.node = node_of(rec);

    /* The run started when its record says (env and gate records carry a
     * top-level "timestamp"); otherwise now, when it is recorded. */
    time_t now;
    if (!parse_utc_iso(dg_lg_str(rec, "timestamp"), &now))
        now = time(NULL);
    struct tm tm;
    if (!gmtime_r(&now, &tm)) {
        cJSON_Delete(rec);
        return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: the clock cannot be read", lg->shown);
    }
    strftime(f.id, sizeof f.id, "%Y%m%d-%H%M%S-", &tm);
    strftime(f.started, sizeof f.started, "%Y-%m-%dT%H:%M:%SZ", &tm);
    dg_lg_draw_id(&f);

    bool taken = false;
    dg_status st = dg_lg_store_insert(ctx, lg, &f, &taken);
    if (st == DG_OK && run_id) {
        *run_id = dg_strdup(f.id);
        if (!*run_id)
            st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory (run %s was recorded)", f.id);
    }
    cJSON_Delete(rec);
    return st;
}

static dg_status update_text(dg_ctx *ctx, dg_ledger *lg, const char *id, int exit_status,
                             const char *record_json)
{
    if (!dg_lg_usable(lg))
        return dg_fail(ctx, DG_ERR_USAGE, "ledger update: no open ledger");
    if (!id || !record_json)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger update: no run id or no record");
    cJSON *rec = cJSON_ParseWithOpts(record_json, NULL, 1);
    if (!rec)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger update: the record is not valid JSON");
    const char *state = state_of(rec);
    dg_status st = lg->pg ? dg_lg_pg_update(ctx, lg, id, exit_status, state, record_json)
                          : dg_lg_sq_update(ctx, lg, id, exit_status, state, record_json);
    cJSON_Delete(rec);
    return st;
}

/* The ledger holds valid UTF-8 whatever bytes a path, label or spec value
 * brought into the record: invalid sequences become U+FFFD before it is kept. */
static char *utf8_copy(const char *record_json)
{
    return record_json && !dg_utf8_valid(record_json, strlen(record_json))
               ? dg_utf8_dup(record_json)
               : NULL;
}

dg_status dg_ledger_record(dg_ctx *ctx, dg_ledger *lg, const char *verb, int exit_status,
                           const char *record_json, char **run_id)
{
    char *clean = utf8_copy(record_json);
    dg_status st = record_text(ctx, lg, verb, exit_status, clean ? clean : record_json, run_id);
    dg_free(clean);
    return st;
}

dg_status dg_ledger_update(dg_ctx *ctx, dg_ledger *lg, const char *id, int exit_status,
                           const char *record_json)
{
    char *clean = utf8_copy(record_json);
    dg_status st = update_text(ctx, lg, id, exit_status, clean ? clean : record_json);
    dg_free(clean);
    return st;
}
