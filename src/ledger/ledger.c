/* Run ledger: one SQLite file (WAL) holding every recorded run, with forward
 * schema migrations, or a team ledger in PostgreSQL (ledger_pg.c) with the
 * same schema behind the same calls. See docs/schema/ledger.md. */
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
#define DG_LEDGER_AMBIGUOUS_SHOWN 5

/* The SQLite ledger's migrations (ledger_int.h; the team ledger's in ledger_pg.c). */
static const char *const k_migrations[] = LG_MIGRATIONS(" seq INTEGER PRIMARY KEY AUTOINCREMENT");
_Static_assert(sizeof k_migrations / sizeof k_migrations[0] == DG_LEDGER_SCHEMA,
               "one migration per schema version");

/* ---- default path ----------------------------------------------------------- */

static char *home_dir(void)
{
    const char *home = getenv("HOME");
    if (home && home[0])
        return dg_strdup(home);
    long sz = sysconf(_SC_GETPW_R_SIZE_MAX);
    size_t bufsz = sz > 0 ? (size_t)sz : 16384;
    char *buf = dg_malloc(bufsz);
    if (!buf)
        return NULL;
    struct passwd pw, *res = NULL;
    char *out = NULL;
    if (getpwuid_r(getuid(), &pw, buf, bufsz, &res) == 0 && res && res->pw_dir && res->pw_dir[0])
        out = dg_strdup(res->pw_dir);
    dg_free(buf);
    return out;
}

/* The default ledger file: $XDG_DATA_HOME/devgate/ledger.db, else
 * ~/.local/share/devgate/ledger.db (DEVGATE_LEDGER aside). */
static char *default_file(void)
{
    const char *xdg = getenv("XDG_DATA_HOME");
    if (xdg && xdg[0] == '/') { /* relative values are ignored (XDG spec) */
        size_t n = strlen(xdg);
        while (n > 1 && xdg[n - 1] == '/')
            n--;
        if (n == 1)
            n = 0; /* "/" itself */
        return dg_asprintf("%.*s/devgate/ledger.db", (int)n, xdg);
    }
    char *home = home_dir();
    if (!home)
        return NULL;
    size_t n = strlen(home);
    while (n > 0 && home[n - 1] == '/')
        n--;
    char *p = dg_asprintf("%.*s/.local/share/devgate/ledger.db", (int)n, home);
    dg_free(home);
    return p;
}

char *dg_ledger_default_path(void)
{
    const char *env = getenv("DEVGATE_LEDGER");
    return env && env[0] ? dg_strdup(env) : default_file();
}

/* ---- errors ------------------------------------------------------------------- */

/* SQLite's words for failure rc: the connection's message while it is rc's
 * (a later call, a rollback after the failure, resets it to "not an error"),
 * else rc's own text. */
static const char *sql_why(sqlite3 *db, int rc)
{
    return db && (sqlite3_extended_errcode(db) & 0xff) == (rc & 0xff) ? sqlite3_errmsg(db)
                                                                      : sqlite3_errstr(rc);
}

/* Maps a SQLite failure to a status and a message naming the ledger. */
static dg_status sql_fail(dg_ctx *ctx, sqlite3 *db, const char *shown, int timeout_ms, int rc,
                          const char *doing)
{
    const char *why = sql_why(db, rc);
    int oserr = db ? sqlite3_system_errno(db) : 0;
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return dg_fail(ctx, DG_ERR_BUSY,
                       "ledger %s: locked by another process past the %d ms timeout while %s (%s)",
                       shown, timeout_ms, doing, why);
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
        return dg_fail(ctx, DG_ERR_LEDGER,
                       "ledger %s: not a devgate ledger or corrupt while %s (%s)", shown, doing,
                       why);
    case SQLITE_NOMEM:
        return dg_fail(ctx, DG_ERR_NOMEM, "ledger %s: out of memory while %s", shown, doing);
    default:
        if (oserr)
            return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: failed while %s: %s (%s)", shown, doing,
                           why, strerror(oserr));
        return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: failed while %s: %s", shown, doing, why);
    }
}

static dg_status lg_fail(dg_ctx *ctx, const dg_ledger *lg, int rc, const char *doing)
{
    return sql_fail(ctx, lg->db, lg->shown, lg->timeout_ms, rc, doing);
}

static void rollback(sqlite3 *db)
{
    if (!sqlite3_get_autocommit(db))
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
}

/* SQLite answers some lock conflicts (switching to WAL while another process
 * opens the file, for one) at once, without its busy handler. True when rc is
 * such a conflict and the deadline is not yet past; it then sleeps a little. */
static bool retry_busy(int rc, double deadline, int *attempt)
{
    int prim = rc & 0xff;
    if ((prim != SQLITE_BUSY && prim != SQLITE_LOCKED) || dg_now() >= deadline)
        return false;
    int ms = 2 << (*attempt < 5 ? *attempt : 5); /* 2, 4, ... 64 ms */
    (*attempt)++;
    sqlite3_sleep(ms);
    return true;
}

static double deadline_of(const dg_ledger *lg)
{
    return dg_now() + lg->timeout_ms / 1000.0;
}

/* BEGIN IMMEDIATE, waiting up to the ledger's timeout for the write lock. */
static int begin_immediate(dg_ledger *lg)
{
    double deadline = deadline_of(lg);
    int attempt = 0, rc;
    do
        rc = sqlite3_exec(lg->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    while (rc != SQLITE_OK && retry_busy(rc, deadline, &attempt));
    return rc;
}

/* ---- folders ------------------------------------------------------------------ */

/* One folder of make_parents: exists as a folder, or is created 0700. */
static int ensure_dir(const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        if (errno != ENOENT)
            return errno;
        if (mkdir(dir, 0700) != 0 && errno != EEXIST)
            return errno;
        if (stat(dir, &sb) != 0)
            return errno;
    }
    return S_ISDIR(sb.st_mode) ? 0 : ENOTDIR;
}

/* mkdir -p of the folder holding path; missing folders get mode 0700. */
static dg_status make_parents(dg_ctx *ctx, const char *path, const char *shown)
{
    char *dir = dg_strdup(path);
    if (!dir)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    dg_status st = DG_OK;
    /* Starting at dir + 1: a leading '/' is the root, not a folder to make. */
    for (char *p = dir + 1; slash && dir[0] && st == DG_OK; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        int err = ensure_dir(dir);
        if (err) {
            char where[256];
            dg_copy_clean(where, sizeof where, dir);
            st = dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: cannot create folder %s: %s", shown, where,
                         strerror(err));
        }
        *p = c;
        if (c == '\0')
            break;
    }
    dg_free(dir);
    return st;
}

/* What a file that is not regular is, for messages. */
static const char *file_kind(mode_t mode)
{
    return S_ISFIFO(mode)   ? "a FIFO"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
                            : "a special file";
}

/* True when the folder holding path cannot be written to (by anyone: a
 * read-only mount or an immutable folder answer so even for root). */
static bool dir_unwritable(const char *path)
{
    char *dir = dg_strdup(path);
    if (!dir)
        return false;
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[slash == dir ? 1 : 0] = '\0';
    bool ro = access(slash ? dir : ".", W_OK) != 0;
    dg_free(dir);
    return ro;
}

/* The location must let us create the file and its -wal/-shm companions. */
static dg_status check_location(dg_ctx *ctx, const char *path, const char *shown)
{
    char *dir = dg_strdup(path);
    if (!dir)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    char *slash = strrchr(dir, '/');
    const char *d = ".";
    if (slash) {
        slash[slash == dir ? 1 : 0] = '\0';
        d = dir;
    }
    dg_status st = DG_OK;
    if (access(d, W_OK | X_OK) != 0)
        st = dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: folder is not writable: %s", shown,
                     strerror(errno));
    dg_free(dir);
    if (st != DG_OK)
        return st;
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode))
            return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: is a folder, not a ledger file", shown);
        if (!S_ISREG(sb.st_mode))
            return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: not a regular file (%s)", shown,
                           file_kind(sb.st_mode));
        if (access(path, R_OK | W_OK) != 0)
            return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: cannot open for writing: %s", shown,
                           strerror(errno));
    } else if (errno != ENOENT) {
        return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: %s", shown, strerror(errno));
    }
    return DG_OK;
}

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
        int rc = begin_immediate(lg);
        if (rc != SQLITE_OK)
            return lg_fail(ctx, lg, rc, "starting the schema migration");
        ident id = {0};
        rc = read_ident(lg->db, &id);
        if (rc != SQLITE_OK) {
            dg_status st = lg_fail(ctx, lg, rc, "reading the schema version");
            rollback(lg->db);
            return st;
        }
        dg_status st = judge_ident(ctx, &id, lg->shown);
        if (st != DG_OK) {
            rollback(lg->db);
            return st;
        }
        if (id.version >= DG_LEDGER_SCHEMA) {
            rollback(lg->db);
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
            st = lg_fail(ctx, lg, rc, doing);
            rollback(lg->db);
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

bool dg_ledger_is_team(const char *path)
{
    return path &&
           (strncmp(path, "postgresql://", 13) == 0 || strncmp(path, "postgres://", 11) == 0);
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

    dg_status st = make_parents(ctx, path, lg->shown);
    if (st == DG_OK)
        st = check_location(ctx, path, lg->shown);
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
        st = lg_fail(ctx, lg, rc, "opening");
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
    double deadline = deadline_of(lg);
    int attempt = 0;
    do
        rc = read_ident(lg->db, &id);
    while (rc != SQLITE_OK && retry_busy(rc, deadline, &attempt));
    if (rc != SQLITE_OK) {
        int prim = rc & 0xff;
        if (prim == SQLITE_NOTADB || prim == SQLITE_CORRUPT)
            st = dg_fail(ctx, DG_ERR_LEDGER,
                         "ledger %s: not a devgate ledger or corrupt (%s); the file was left "
                         "untouched",
                         lg->shown, sql_why(lg->db, rc));
        else
            st = lg_fail(ctx, lg, rc, "reading the ledger header");
        return st;
    }
    st = judge_ident(ctx, &id, lg->shown);
    if (st != DG_OK) {
        return st;
    }
    sqlite3_db_config(lg->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, NULL);

    /* journal_mode=WAL answers the mode in effect; anything else (a file
     * system without shared memory) still works, only with less concurrency. */
    deadline = deadline_of(lg);
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
    } while (rc != SQLITE_OK && retry_busy(rc, deadline, &attempt));
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(lg->db, "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;", NULL, NULL,
                          NULL);
    if (rc != SQLITE_OK) {
        st = lg_fail(ctx, lg, rc, "setting the journal mode");
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
                       file_kind(sb.st_mode));
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
            return lg_fail(ctx, lg, rc, "opening read-only");
        sqlite3_extended_result_codes(lg->db, 1);
        sqlite3_busy_timeout(lg->db, lg->timeout_ms);
        double deadline = deadline_of(lg);
        int attempt = 0;
        do
            rc = read_ident(lg->db, &id);
        while (rc != SQLITE_OK && retry_busy(rc, deadline, &attempt));
        /* CANTOPEN: a WAL ledger whose -shm file cannot be made. */
        if ((rc & 0xff) != SQLITE_CANTOPEN || pass == 1 || !dir_unwritable(path))
            break;
    }
    if (rc != SQLITE_OK) {
        int prim = rc & 0xff;
        if (prim == SQLITE_NOTADB || prim == SQLITE_CORRUPT)
            return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: not a devgate ledger or corrupt (%s)",
                           lg->shown, sql_why(lg->db, rc));
        return lg_fail(ctx, lg, rc, "reading the ledger header");
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
static const char *json_str(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return cJSON_IsString(it) && it->valuestring ? it->valuestring : NULL;
}

/* An integer member, or 0. */
static int jnum_int(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return cJSON_IsNumber(it) ? (int)it->valuedouble : 0;
}

/* "host": "name" or "host": {"hostname"|"name": "..."}. */
static const char *host_of(const cJSON *obj)
{
    if (!cJSON_IsObject(obj))
        return NULL;
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(obj, "host");
    if (cJSON_IsString(h) && h->valuestring)
        return h->valuestring;
    const char *s = json_str(h, "hostname");
    if (!s)
        s = json_str(h, "name");
    if (!s)
        s = json_str(obj, "hostname");
    return s;
}

static const char *commit_of(const cJSON *obj)
{
    return cJSON_IsObject(obj) ? json_str(cJSON_GetObjectItemCaseSensitive(obj, "git"), "commit")
                               : NULL;
}

static const char *state_of(const cJSON *rec)
{
    const char *s = json_str(rec, "state");
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

/* ---- the SQLite store ---------------------------------------------------------- */

static void bind_opt(sqlite3_stmt *stmt, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(stmt, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(stmt, i);
}

static dg_status sq_insert(dg_ctx *ctx, dg_ledger *lg, lg_fields *f, bool *taken)
{
    *taken = false;
    sqlite3_stmt *stmt = NULL;
    dg_status st = DG_OK;
    int rc = begin_immediate(lg);
    if (rc != SQLITE_OK)
        return lg_fail(ctx, lg, rc, "starting to record a run");
    rc = sqlite3_prepare_v2(lg->db,
                            "INSERT INTO runs(id, verb, started_at, exit_status, state, host, "
                            "git_commit, devgate_version, record, node, pending) "
                            "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                            -1, &stmt, NULL);
    if (rc != SQLITE_OK) {
        st = lg_fail(ctx, lg, rc, "preparing to record a run");
        goto done;
    }
    for (int attempt = 0;; attempt++) {
        sqlite3_reset(stmt);
        sqlite3_clear_bindings(stmt);
        sqlite3_bind_text(stmt, 1, f->id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(stmt, 2, f->verb, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(stmt, 3, f->started, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(stmt, 4, f->exit_status);
        sqlite3_bind_text(stmt, 5, f->state, -1, SQLITE_TRANSIENT);
        bind_opt(stmt, 6, f->host);
        bind_opt(stmt, 7, f->commit);
        bind_opt(stmt, 8, f->version);
        sqlite3_bind_text(stmt, 9, f->record, -1, SQLITE_TRANSIENT);
        bind_opt(stmt, 10, f->node);
        bind_opt(stmt, 11, f->pending);
        rc = sqlite3_step(stmt);
        if (rc == SQLITE_DONE)
            break;
        if (rc == SQLITE_CONSTRAINT_UNIQUE && f->exact) {
            *taken = true;
            goto done;
        }
        if (rc == SQLITE_CONSTRAINT_UNIQUE && attempt + 1 < DG_LEDGER_ID_RETRIES) {
            dg_lg_draw_id(f); /* id taken: draw other digits */
            continue;
        }
        st = lg_fail(ctx, lg, rc, "recording a run");
        goto done;
    }
    sqlite3_finalize(stmt);
    stmt = NULL;
    rc = sqlite3_exec(lg->db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        st = lg_fail(ctx, lg, rc, "committing a run");
done:
    sqlite3_finalize(stmt);
    rollback(lg->db);
    return st;
}

static dg_status sq_update(dg_ctx *ctx, dg_ledger *lg, const char *id, int exit_status,
                           const char *state, const char *record)
{
    sqlite3_stmt *stmt = NULL;
    int rc = sqlite3_prepare_v2(
        lg->db, "UPDATE runs SET exit_status = ?, state = ?, record = ? WHERE id = ?", -1, &stmt,
        NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int(stmt, 1, exit_status);
        sqlite3_bind_text(stmt, 2, state, -1, SQLITE_STATIC);
        sqlite3_bind_text(stmt, 3, record, -1, SQLITE_STATIC);
        sqlite3_bind_text(stmt, 4, id, -1, SQLITE_STATIC);
        rc = sqlite3_step(stmt);
    }
    dg_status st = DG_OK;
    if (rc != SQLITE_DONE)
        st = lg_fail(ctx, lg, rc, "updating a run");
    else if (sqlite3_changes(lg->db) != 1)
        st = dg_fail(ctx, DG_ERR_NOT_FOUND, "ledger %s: no run %s to update", lg->shown, id);
    sqlite3_finalize(stmt);
    return st;
}

/* Appends the entries of the rows of stmt to arr; with extra, the columns after
 * the entry's are the record text and the rank. */
static dg_status sq_rows(dg_ctx *ctx, dg_ledger *lg, sqlite3_stmt *stmt, bool extra, cJSON *arr,
                         const char *doing)
{
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        const char *v[LG_NCOLS];
        for (int k = 0; k < LG_NCOLS; k++)
            v[k] = (const char *)sqlite3_column_text(stmt, k);
        cJSON *e = dg_lg_entry(v);
        bool ok = e != NULL;
        if (ok && extra)
            ok = dg_json_add_str(e, "record", (const char *)sqlite3_column_text(stmt, LG_NCOLS)) &&
                 cJSON_AddNumberToObject(e, "rank", sqlite3_column_int(stmt, LG_NCOLS + 1));
        if (!ok || !cJSON_AddItemToArray(arr, e)) {
            cJSON_Delete(e);
            return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
        }
    }
    return rc == SQLITE_DONE ? DG_OK : lg_fail(ctx, lg, rc, doing);
}

/* The newest limit entries (0: all), each with its record text (rank 0). */
static dg_status sq_list(dg_ctx *ctx, dg_ledger *lg, int limit, cJSON *arr)
{
    sqlite3_stmt *stmt = NULL;
    int rc = sqlite3_prepare_v2(lg->db,
                                "SELECT " LG_COLS ", record, 0 FROM runs ORDER BY seq DESC LIMIT ?",
                                -1, &stmt, NULL);
    if (rc != SQLITE_OK)
        return lg_fail(ctx, lg, rc, "listing runs");
    sqlite3_bind_int(stmt, 1, limit > 0 ? limit : -1);
    dg_status st = sq_rows(ctx, lg, stmt, true, arr, "listing runs");
    sqlite3_finalize(stmt);
    return st;
}

/* An exact id first, then a prefix compared with substr (no LIKE, so '%' and
 * '_' in the argument are plain characters). */
static dg_status sq_match(dg_ctx *ctx, dg_ledger *lg, const char *id, int max, cJSON *arr)
{
    sqlite3_stmt *stmt = NULL;
    int rc = sqlite3_prepare_v2(lg->db,
                                "SELECT " LG_COLS ", record, 0 AS rank FROM runs WHERE id = ?1 "
                                "UNION ALL "
                                "SELECT " LG_COLS ", record, 1 FROM runs "
                                "WHERE substr(id, 1, length(?1)) = ?1 AND id <> ?1 "
                                "ORDER BY rank, seq DESC LIMIT ?2",
                                -1, &stmt, NULL);
    if (rc != SQLITE_OK)
        return lg_fail(ctx, lg, rc, "looking up a run");
    sqlite3_bind_text(stmt, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(stmt, 2, max);
    dg_status st = sq_rows(ctx, lg, stmt, true, arr, "looking up a run");
    sqlite3_finalize(stmt);
    return st;
}

/* The runs waiting for a team ledger, oldest first, with their records. */
static dg_status sq_pending(dg_ctx *ctx, dg_ledger *lg, cJSON *arr)
{
    sqlite3_stmt *stmt = NULL;
    int rc = sqlite3_prepare_v2(lg->db,
                                "SELECT " LG_COLS ", record, 0 FROM runs "
                                "WHERE pending IS NOT NULL ORDER BY seq",
                                -1, &stmt, NULL);
    if (rc != SQLITE_OK)
        return lg_fail(ctx, lg, rc, "listing the runs waiting for a push");
    dg_status st = sq_rows(ctx, lg, stmt, true, arr, "listing the runs waiting for a push");
    sqlite3_finalize(stmt);
    return st;
}

static dg_status sq_clear_pending(dg_ctx *ctx, dg_ledger *lg, const char *id)
{
    sqlite3_stmt *stmt = NULL;
    int rc =
        sqlite3_prepare_v2(lg->db, "UPDATE runs SET pending = NULL WHERE id = ?", -1, &stmt, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(stmt, 1, id, -1, SQLITE_STATIC);
        rc = sqlite3_step(stmt);
    }
    sqlite3_finalize(stmt);
    return rc == SQLITE_DONE ? DG_OK : lg_fail(ctx, lg, rc, "marking a run pushed");
}

/* ---- store-independent ---------------------------------------------------------- */

static bool usable(const dg_ledger *lg)
{
    return lg && (lg->db || lg->pg);
}

static dg_status store_insert(dg_ctx *ctx, dg_ledger *lg, lg_fields *f, bool *taken)
{
    return lg->pg ? dg_lg_pg_insert(ctx, lg, f, taken) : sq_insert(ctx, lg, f, taken);
}

static dg_status store_match(dg_ctx *ctx, dg_ledger *lg, const char *id, int max, cJSON *arr)
{
    return lg->pg ? dg_lg_pg_match(ctx, lg, id, max, arr) : sq_match(ctx, lg, id, max, arr);
}

/* "remote": {"node": "..."} of a record that ran on a remote node. */
static const char *node_of(const cJSON *rec)
{
    return cJSON_IsObject(rec) ? json_str(cJSON_GetObjectItemCaseSensitive(rec, "remote"), "node")
                               : NULL;
}

static dg_status record_text(dg_ctx *ctx, dg_ledger *lg, const char *verb, int exit_status,
                             const char *record_json, char **run_id)
{
    if (run_id)
        *run_id = NULL;
    if (!usable(lg))
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
    if (!parse_utc_iso(json_str(rec, "timestamp"), &now))
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
    dg_status st = store_insert(ctx, lg, &f, &taken);
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
    if (!usable(lg))
        return dg_fail(ctx, DG_ERR_USAGE, "ledger update: no open ledger");
    if (!id || !record_json)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger update: no run id or no record");
    cJSON *rec = cJSON_ParseWithOpts(record_json, NULL, 1);
    if (!rec)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger update: the record is not valid JSON");
    const char *state = state_of(rec);
    dg_status st = lg->pg ? dg_lg_pg_update(ctx, lg, id, exit_status, state, record_json)
                          : sq_update(ctx, lg, id, exit_status, state, record_json);
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

/* Turns a stored entry (record as text, rank) into a listed one: the summary
 * added, "rank" dropped, and the record either dropped or, with keep, parsed in
 * place (made valid UTF-8). */
static dg_status finish_entry(dg_ctx *ctx, dg_ledger *lg, cJSON *e, bool keep)
{
    const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "record"));
    cJSON *rec = text ? cJSON_Parse(text) : NULL;
    if (!rec && keep) {
        char bad[64];
        dg_copy_clean(bad, sizeof bad, json_str(e, "id"));
        return dg_fail(ctx, DG_ERR_LEDGER,
                       "ledger %s: run %s holds a record that is not valid JSON", lg->shown, bad);
    }
    /* a damaged record lists with an empty summary */
    bool ok = dg_lg_add_summary(e, rec, json_str(e, "verb"));
    cJSON_DeleteItemFromObjectCaseSensitive(e, "rank");
    if (ok && keep)
        ok = dg_json_utf8_fix(rec) && cJSON_ReplaceItemInObjectCaseSensitive(e, "record", rec);
    else
        cJSON_DeleteItemFromObjectCaseSensitive(e, "record");
    if (!ok || !keep)
        cJSON_Delete(rec);
    return ok ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
}

/* ---- list / show / export ------------------------------------------------------ */

/* When st is DG_OK, j printed into *json (DG_ERR_NOMEM when it cannot be); st. */
static dg_status print_into(dg_ctx *ctx, dg_status st, const cJSON *j, char **json)
{
    if (st == DG_OK && !(*json = dg_json_print(j)))
        st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    return st;
}

dg_status dg_ledger_list(dg_ctx *ctx, dg_ledger *lg, int limit, char **json)
{
    if (json)
        *json = NULL;
    if (!usable(lg) || !json)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger list: no open ledger or no place for the result");
    if (limit < 0)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger list: limit must be 0 (all) or positive, not %d",
                       limit);
    cJSON *arr = cJSON_CreateArray();
    dg_status st = arr ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    if (st == DG_OK)
        st = lg->pg ? dg_lg_pg_list(ctx, lg, limit, arr) : sq_list(ctx, lg, limit, arr);
    cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        if (st == DG_OK)
            st = finish_entry(ctx, lg, e, false);
    }
    st = print_into(ctx, st, arr, json);
    cJSON_Delete(arr);
    return st;
}

/* "YYYY-MM-DD" or "YYYY-MM-DDTHH:MM:SSZ" (digits where digits go): both sort
 * against started_at as text. */
static bool since_shape(const char *s)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:ddZ";
    size_t n = strlen(s);
    if (n != 10 && n != sizeof shape - 1)
        return false;
    for (size_t i = 0; i < n; i++) {
        bool ok = shape[i] == 'd' ? (s[i] >= '0' && s[i] <= '9') : s[i] == shape[i];
        if (!ok)
            return false;
    }
    return true;
}

dg_status dg_ledger_export(dg_ctx *ctx, dg_ledger *lg, const char *since, char **json)
{
    if (json)
        *json = NULL;
    if (!usable(lg) || !json)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "ledger export: no open ledger or no place for the result");
    if (since && !since_shape(since)) {
        char shown[64];
        dg_copy_clean(shown, sizeof shown, since);
        return dg_fail(ctx, DG_ERR_USAGE,
                       "since '%s' is not a UTC date YYYY-MM-DD or time "
                       "YYYY-MM-DDTHH:MM:SSZ",
                       shown);
    }
    cJSON *all = cJSON_CreateArray(), *out = cJSON_CreateArray();
    dg_status st = all && out ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    if (st == DG_OK)
        st = lg->pg ? dg_lg_pg_list(ctx, lg, 0, all) : sq_list(ctx, lg, 0, all);
    /* Newest first from the store; the export goes oldest first. */
    for (int i = cJSON_GetArraySize(all) - 1; st == DG_OK && i >= 0; i--) {
        const char *at = json_str(cJSON_GetArrayItem(all, i), "started_at");
        if (since && (!at || strcmp(at, since) < 0))
            continue;
        cJSON *e = cJSON_DetachItemFromArray(all, i);
        if (!cJSON_AddItemToArray(out, e)) {
            cJSON_Delete(e);
            st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
        } else {
            st = finish_entry(ctx, lg, e, true);
        }
    }
    st = print_into(ctx, st, out, json);
    cJSON_Delete(all);
    cJSON_Delete(out);
    return st;
}

dg_status dg_ledger_show(dg_ctx *ctx, dg_ledger *lg, const char *id, char **json)
{
    if (json)
        *json = NULL;
    if (!usable(lg) || !json)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger show: no open ledger or no place for the result");
    if (!id || !id[0])
        return dg_fail(ctx, DG_ERR_USAGE, "ledger show: empty run id");
    char shown_id[64];
    dg_copy_clean(shown_id, sizeof shown_id, id);

    cJSON *arr = cJSON_CreateArray();
    dg_status st = arr ? store_match(ctx, lg, id, DG_LEDGER_AMBIGUOUS_SHOWN + 1, arr)
                       : dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    int matches = st == DG_OK ? cJSON_GetArraySize(arr) : 0;
    cJSON *first = matches ? cJSON_GetArrayItem(arr, 0) : NULL;
    bool exact = first && jnum_int(first, "rank") == 0;
    if (st == DG_OK && !first)
        st = dg_fail(ctx, DG_ERR_NOT_FOUND, "ledger %s: no run with id or id prefix '%s'",
                     lg->shown, shown_id);
    if (st == DG_OK && matches > 1 && !exact) {
        char ids[(DG_LEDGER_AMBIGUOUS_SHOWN + 1) * 40] = "";
        size_t used = 0;
        for (int k = 0; k < matches; k++) {
            char one[48];
            dg_copy_clean(one, sizeof one, json_str(cJSON_GetArrayItem(arr, k), "id"));
            if (k < DG_LEDGER_AMBIGUOUS_SHOWN)
                used += (size_t)snprintf(ids + used, used < sizeof ids ? sizeof ids - used : 0,
                                         "%s%s", k ? ", " : "", one);
            else
                used += (size_t)snprintf(ids + used, used < sizeof ids ? sizeof ids - used : 0,
                                         ", ...");
        }
        st = dg_fail(ctx, DG_ERR_USAGE,
                     "ledger %s: run id prefix '%s' is ambiguous: it matches %s; give more of "
                     "the id",
                     lg->shown, shown_id, ids);
    }
    if (st == DG_OK)
        st = finish_entry(ctx, lg, first, true);
    st = print_into(ctx, st, first, json);
    cJSON_Delete(arr);
    return st;
}

/* ---- local ledger, push ----------------------------------------------------------- */

char *dg_ledger_local_path(void)
{
    const char *local = getenv("DEVGATE_LOCAL_LEDGER");
    if (local && local[0])
        return dg_strdup(local);
    /* DEVGATE_LEDGER when it is a file; when it names the team ledger, the
     * default file. */
    const char *env = getenv("DEVGATE_LEDGER");
    return env && env[0] && !dg_ledger_is_team(env) ? dg_strdup(env) : default_file();
}

dg_status dg_ledger_push(dg_ctx *ctx, dg_ledger *local, dg_ledger *team, dg_ledger_push_counts *n)
{
    if (n)
        memset(n, 0, sizeof *n);
    if (!usable(local) || !local->db || !usable(team) || !n)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "ledger push: needs an open local ledger, an open team ledger and a place "
                       "for the counts");
    if (local == team || (team->db && strcmp(local->path, team->path) == 0))
        return dg_fail(ctx, DG_ERR_USAGE, "ledger push: ledger %s cannot be pushed into itself",
                       local->shown);
    cJSON *arr = cJSON_CreateArray();
    dg_status st = arr ? sq_pending(ctx, local, arr) : dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        if (st != DG_OK)
            break;
        const char *target = json_str(e, "pending");
        if (!target || strcmp(target, team->shown) != 0) {
            n->other++;
            continue;
        }
        lg_fields f = {.verb = json_str(e, "verb"),
                       .state = json_str(e, "state"),
                       .host = json_str(e, "host"),
                       .commit = json_str(e, "git_commit"),
                       .version = json_str(e, "devgate_version"),
                       .record = json_str(e, "record"),
                       .node = json_str(e, "node"),
                       .exit_status = jnum_int(e, "exit_status"),
                       .exact = true};
        snprintf(f.id, sizeof f.id, "%s", json_str(e, "id"));
        snprintf(f.started, sizeof f.started, "%s", json_str(e, "started_at"));
        bool taken = false;
        st = store_insert(ctx, team, &f, &taken);
        if (st == DG_OK && taken) {
            /* There already: pushed before (then marked here), or another run
             * with the same id, which is a conflict, never a silent skip. */
            cJSON *there = cJSON_CreateArray();
            st = there ? store_match(ctx, team, f.id, 1, there)
                       : dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
            const char *rec = json_str(cJSON_GetArrayItem(there, 0), "record");
            if (st == DG_OK && (!rec || strcmp(rec, f.record) != 0))
                st = dg_fail(ctx, DG_ERR_LEDGER,
                             "ledger push: run %s is already in %s with a different record; it "
                             "was left waiting in %s",
                             f.id, team->shown, local->shown);
            cJSON_Delete(there);
            if (st == DG_OK)
                n->already++;
        } else if (st == DG_OK) {
            n->pushed++;
        }
        if (st == DG_OK)
            st = sq_clear_pending(ctx, local, f.id);
    }
    cJSON_Delete(arr);
    return st;
}
