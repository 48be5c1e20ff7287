/* Run ledger: one SQLite file (WAL) holding every recorded run, with forward
 * schema migrations. See docs/schema/ledger.md. */
#include "core/core.h"
#include "core/json.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* PRAGMA application_id of a devgate ledger: "DGV1". */
#define DG_LEDGER_APP_ID 0x44475631
#define DG_LEDGER_DEFAULT_TIMEOUT_MS 5000
#define DG_LEDGER_ID_RETRIES 64
#define DG_LEDGER_AMBIGUOUS_SHOWN 5

/* Migration i brings schema version i to i + 1; each runs inside BEGIN
 * IMMEDIATE ... COMMIT together with the user_version bump. Append only. */
static const char *const k_migrations[] = {
    /* 0 -> 1 */
    "CREATE TABLE runs("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " id TEXT UNIQUE NOT NULL,"
    " verb TEXT NOT NULL,"
    " started_at TEXT NOT NULL,"
    " exit_status INTEGER NOT NULL,"
    " state TEXT NOT NULL DEFAULT 'complete' CHECK (state IN ('complete', 'interrupted')),"
    " host TEXT,"
    " git_commit TEXT,"
    " devgate_version TEXT,"
    " record TEXT NOT NULL);"
    "CREATE INDEX runs_started_at ON runs(started_at);",
};
#define DG_LEDGER_SCHEMA ((int)(sizeof k_migrations / sizeof k_migrations[0]))

struct dg_ledger {
    sqlite3 *db;
    char *path;  /* as given */
    char *shown; /* path with control characters replaced, for messages */
    int timeout_ms;
};

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

char *dg_ledger_default_path(void)
{
    const char *env = getenv("DEVGATE_LEDGER");
    if (env && env[0])
        return dg_strdup(env);
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

/* ---- errors ------------------------------------------------------------------- */

/* Maps a SQLite failure to a status and a message naming the ledger. */
static dg_status sql_fail(dg_ctx *ctx, sqlite3 *db, const char *shown, int timeout_ms, int rc,
                          const char *doing)
{
    const char *why = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
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
    dg_free(lg->path);
    dg_free(lg->shown);
    dg_free(lg);
}

dg_status dg_ledger_open(dg_ctx *ctx, const char *path, int timeout_ms, dg_ledger **out)
{
    if (!out)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger open: no place for the result");
    *out = NULL;
    if (!path || !path[0])
        return dg_fail(ctx, DG_ERR_USAGE, "ledger open: empty path");
    dg_ledger *lg = dg_calloc(1, sizeof *lg);
    if (!lg)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    size_t plen = strlen(path);
    lg->path = dg_strdup(path);
    lg->shown = dg_malloc(plen + 1);
    lg->timeout_ms = timeout_ms > 0 ? timeout_ms : DG_LEDGER_DEFAULT_TIMEOUT_MS;
    if (!lg->path || !lg->shown) {
        dg_ledger_close(lg);
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    }
    dg_copy_clean(lg->shown, plen + 1, path);

    dg_status st = make_parents(ctx, path, lg->shown);
    if (st == DG_OK)
        st = check_location(ctx, path, lg->shown);
    if (st != DG_OK) {
        dg_ledger_close(lg);
        return st;
    }

    /* This SQLite may treat names starting "file:" as URIs; keep them files. */
    char *name = strncmp(path, "file:", 5) == 0 ? dg_asprintf("./%s", path) : dg_strdup(path);
    if (!name) {
        dg_ledger_close(lg);
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
        dg_ledger_close(lg);
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
        dg_ledger_close(lg);
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
                         lg->shown, sqlite3_errmsg(lg->db));
        else
            st = lg_fail(ctx, lg, rc, "reading the ledger header");
        dg_ledger_close(lg);
        return st;
    }
    st = judge_ident(ctx, &id, lg->shown);
    if (st != DG_OK) {
        dg_ledger_close(lg);
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
        dg_ledger_close(lg);
        return st;
    }

    if (id.app_id != DG_LEDGER_APP_ID || id.version < DG_LEDGER_SCHEMA) {
        st = migrate(ctx, lg);
        if (st != DG_OK) {
            dg_ledger_close(lg);
            return st;
        }
    }
    *out = lg;
    return DG_OK;
}

/* ---- record ------------------------------------------------------------------- */

static unsigned random16(void)
{
    uint16_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v)
        return v;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t got = read(fd, &v, sizeof v);
        close(fd);
        if (got == (ssize_t)sizeof v)
            return v;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned)((ts.tv_nsec ^ (long)getpid() * 2654435761L) & 0xffff);
}

/* A string member, or NULL. */
static const char *json_str(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return cJSON_IsString(it) && it->valuestring ? it->valuestring : NULL;
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

dg_status dg_ledger_record(dg_ctx *ctx, dg_ledger *lg, const char *verb, int exit_status,
                           const char *record_json, char **run_id)
{
    if (run_id)
        *run_id = NULL;
    if (!lg || !lg->db)
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
    const cJSON *env = cJSON_GetObjectItemCaseSensitive(rec, "env");
    const char *host = host_of(rec);
    if (!host)
        host = host_of(env);
    const char *commit = commit_of(rec);
    if (!commit)
        commit = commit_of(env);
    const char *state = state_of(rec);

    /* The run started when its record says (env and gate records carry a
     * top-level "timestamp"); otherwise now, when it is recorded. */
    time_t now;
    if (!parse_utc_iso(json_str(rec, "timestamp"), &now))
        now = time(NULL);
    struct tm tm;
    char stamp[24], started[32], id[32];
    if (!gmtime_r(&now, &tm)) {
        cJSON_Delete(rec);
        return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: the clock cannot be read", lg->shown);
    }
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);

    dg_status st = DG_OK;
    sqlite3_stmt *stmt = NULL;
    int rc = begin_immediate(lg);
    if (rc != SQLITE_OK) {
        st = lg_fail(ctx, lg, rc, "starting to record a run");
        goto done;
    }
    rc = sqlite3_prepare_v2(lg->db,
                            "INSERT INTO runs(id, verb, started_at, exit_status, state, host, "
                            "git_commit, devgate_version, record) VALUES (?,?,?,?,?,?,?,?,?)",
                            -1, &stmt, NULL);
    if (rc != SQLITE_OK) {
        st = lg_fail(ctx, lg, rc, "preparing to record a run");
        goto done;
    }
    for (int attempt = 0;; attempt++) {
        snprintf(id, sizeof id, "%s-%04x", stamp, random16());
        sqlite3_reset(stmt);
        sqlite3_clear_bindings(stmt);
        sqlite3_bind_text(stmt, 1, id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(stmt, 2, verb, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(stmt, 3, started, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(stmt, 4, exit_status);
        sqlite3_bind_text(stmt, 5, state, -1, SQLITE_STATIC);
        if (host)
            sqlite3_bind_text(stmt, 6, host, -1, SQLITE_TRANSIENT);
        if (commit)
            sqlite3_bind_text(stmt, 7, commit, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(stmt, 8, DG_VERSION, -1, SQLITE_STATIC);
        sqlite3_bind_text(stmt, 9, record_json, -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(stmt);
        if (rc == SQLITE_DONE)
            break;
        if (rc == SQLITE_CONSTRAINT_UNIQUE && attempt + 1 < DG_LEDGER_ID_RETRIES)
            continue; /* id taken this second: draw another suffix */
        st = lg_fail(ctx, lg, rc, "recording a run");
        goto done;
    }
    sqlite3_finalize(stmt);
    stmt = NULL;
    rc = sqlite3_exec(lg->db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        st = lg_fail(ctx, lg, rc, "committing a run");
        goto done;
    }
    if (run_id) {
        *run_id = dg_strdup(id);
        if (!*run_id)
            st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory (run %s was recorded)", id);
    }
done:
    sqlite3_finalize(stmt);
    if (st != DG_OK)
        rollback(lg->db);
    cJSON_Delete(rec);
    return st;
}

dg_status dg_ledger_update(dg_ctx *ctx, dg_ledger *lg, const char *id, int exit_status,
                           const char *record_json)
{
    if (!lg || !lg->db)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger update: no open ledger");
    if (!id || !record_json)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger update: no run id or no record");
    cJSON *rec = cJSON_ParseWithOpts(record_json, NULL, 1);
    if (!rec)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger update: the record is not valid JSON");
    const char *state = state_of(rec);
    sqlite3_stmt *stmt = NULL;
    int rc = sqlite3_prepare_v2(
        lg->db, "UPDATE runs SET exit_status = ?, state = ?, record = ? WHERE id = ?", -1, &stmt,
        NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int(stmt, 1, exit_status);
        sqlite3_bind_text(stmt, 2, state, -1, SQLITE_STATIC);
        sqlite3_bind_text(stmt, 3, record_json, -1, SQLITE_STATIC);
        sqlite3_bind_text(stmt, 4, id, -1, SQLITE_STATIC);
        rc = sqlite3_step(stmt);
    }
    dg_status st = DG_OK;
    if (rc != SQLITE_DONE)
        st = lg_fail(ctx, lg, rc, "updating a run");
    else if (sqlite3_changes(lg->db) != 1)
        st = dg_fail(ctx, DG_ERR_NOT_FOUND, "ledger %s: no run %s to update", lg->shown, id);
    sqlite3_finalize(stmt);
    cJSON_Delete(rec);
    return st;
}

/* ---- list / show -------------------------------------------------------------- */

#define ENTRY_COLUMNS "id, seq, verb, started_at, exit_status, state, host, git_commit"

static const char *col_text(sqlite3_stmt *stmt, int i)
{
    return (const char *)sqlite3_column_text(stmt, i);
}

/* The list entry of the current row (columns in ENTRY_COLUMNS order). */
static cJSON *entry_of(sqlite3_stmt *stmt)
{
    cJSON *e = cJSON_CreateObject();
    if (!e)
        return NULL;
    bool ok = dg_json_add_str(e, "id", col_text(stmt, 0)) &&
              cJSON_AddNumberToObject(e, "seq", (double)sqlite3_column_int64(stmt, 1)) &&
              dg_json_add_str(e, "verb", col_text(stmt, 2)) &&
              dg_json_add_str(e, "started_at", col_text(stmt, 3)) &&
              cJSON_AddNumberToObject(e, "exit_status", sqlite3_column_int(stmt, 4)) &&
              dg_json_add_str(e, "state", col_text(stmt, 5)) &&
              dg_json_add_str(e, "host", col_text(stmt, 6)) &&
              dg_json_add_str(e, "git_commit", col_text(stmt, 7));
    if (!ok) {
        cJSON_Delete(e);
        return NULL;
    }
    return e;
}

dg_status dg_ledger_list(dg_ctx *ctx, dg_ledger *lg, int limit, char **json)
{
    if (json)
        *json = NULL;
    if (!lg || !lg->db || !json)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger list: no open ledger or no place for the result");
    if (limit < 0)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger list: limit must be 0 (all) or positive, not %d",
                       limit);
    sqlite3_stmt *stmt = NULL;
    int rc = sqlite3_prepare_v2(
        lg->db, "SELECT " ENTRY_COLUMNS " FROM runs ORDER BY seq DESC LIMIT ?", -1, &stmt, NULL);
    if (rc != SQLITE_OK)
        return lg_fail(ctx, lg, rc, "listing runs");
    sqlite3_bind_int(stmt, 1, limit > 0 ? limit : -1);
    cJSON *arr = cJSON_CreateArray();
    dg_status st = arr ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    while (st == DG_OK && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        cJSON *e = entry_of(stmt);
        if (!e || !cJSON_AddItemToArray(arr, e)) {
            cJSON_Delete(e);
            st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
        }
    }
    if (st == DG_OK && rc != SQLITE_DONE)
        st = lg_fail(ctx, lg, rc, "listing runs");
    sqlite3_finalize(stmt);
    if (st == DG_OK) {
        *json = dg_json_print(arr);
        if (!*json)
            st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    }
    cJSON_Delete(arr);
    return st;
}

dg_status dg_ledger_show(dg_ctx *ctx, dg_ledger *lg, const char *id, char **json)
{
    if (json)
        *json = NULL;
    if (!lg || !lg->db || !json)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger show: no open ledger or no place for the result");
    if (!id || !id[0])
        return dg_fail(ctx, DG_ERR_USAGE, "ledger show: empty run id");
    char shown_id[64];
    dg_copy_clean(shown_id, sizeof shown_id, id);

    /* An exact id first, then a prefix compared with substr (no LIKE, so '%'
     * and '_' in the argument are plain characters). */
    sqlite3_stmt *stmt = NULL;
    int rc =
        sqlite3_prepare_v2(lg->db,
                           "SELECT " ENTRY_COLUMNS ", record, 0 AS rank FROM runs WHERE id = ?1 "
                           "UNION ALL "
                           "SELECT " ENTRY_COLUMNS ", record, 1 FROM runs "
                           "WHERE substr(id, 1, length(?1)) = ?1 AND id <> ?1 "
                           "ORDER BY rank, seq DESC LIMIT ?2",
                           -1, &stmt, NULL);
    if (rc != SQLITE_OK)
        return lg_fail(ctx, lg, rc, "looking up a run");
    sqlite3_bind_text(stmt, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(stmt, 2, DG_LEDGER_AMBIGUOUS_SHOWN + 1);

    dg_status st = DG_OK;
    cJSON *entry = NULL;
    int matches = 0;
    char ids[(DG_LEDGER_AMBIGUOUS_SHOWN + 1) * 40] = "";
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        if (matches == 0) {
            entry = entry_of(stmt);
            if (!entry) {
                st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
                break;
            }
            const char *text = col_text(stmt, 8);
            cJSON *rec = text ? cJSON_Parse(text) : NULL;
            if (!rec) {
                char bad[40];
                dg_copy_clean(bad, sizeof bad, col_text(stmt, 0));
                st = dg_fail(ctx, DG_ERR_LEDGER,
                             "ledger %s: run %s holds a record that is not valid JSON", lg->shown,
                             bad);
                break;
            }
            if (!cJSON_AddItemToObject(entry, "record", rec)) {
                cJSON_Delete(rec);
                st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
                break;
            }
            if (sqlite3_column_int(stmt, 9) == 0)
                break; /* exact id */
        }
        size_t used = strlen(ids);
        if (matches < DG_LEDGER_AMBIGUOUS_SHOWN) {
            char one[36];
            dg_copy_clean(one, sizeof one, col_text(stmt, 0));
            snprintf(ids + used, sizeof ids - used, "%s%s", matches ? ", " : "", one);
        } else {
            snprintf(ids + used, sizeof ids - used, ", ...");
        }
        matches++;
    }
    if (st == DG_OK && rc != SQLITE_ROW && rc != SQLITE_DONE)
        st = lg_fail(ctx, lg, rc, "looking up a run");
    sqlite3_finalize(stmt);

    if (st == DG_OK && !entry)
        st = dg_fail(ctx, DG_ERR_NOT_FOUND, "ledger %s: no run with id or id prefix '%s'",
                     lg->shown, shown_id);
    if (st == DG_OK && matches > 1)
        st = dg_fail(ctx, DG_ERR_USAGE,
                     "ledger %s: run id prefix '%s' is ambiguous: it matches %s; give more of "
                     "the id",
                     lg->shown, shown_id, ids);
    if (st == DG_OK) {
        *json = dg_json_print(entry);
        if (!*json)
            st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    }
    cJSON_Delete(entry);
    return st;
}
