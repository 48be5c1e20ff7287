/* The team ledger: the same schema and migrations as the SQLite ledger, in
 * PostgreSQL through libpq. Credentials come only through libpq's own means
 * (the URI, a password file, a service file, the environment); the password
 * never reaches a message, a log line or a record. docs/schema/ledger.md. */
#include "ledger/ledger_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The name shown for a URI when libpq cannot parse it (or is not built in):
 * the scheme and what follows the last '@', up to any '?'. */
static char *rough_name(const char *uri)
{
    const char *rest = strstr(uri, "://");
    size_t scheme = rest ? (size_t)(rest - uri) : 0;
    rest = rest ? rest + 3 : uri;
    size_t n = strcspn(rest, "?");
    const char *at = NULL;
    for (size_t k = 0; k < n; k++)
        if (rest[k] == '@')
            at = rest + k;
    if (at) {
        n -= (size_t)(at + 1 - rest);
        rest = at + 1;
    }
    char *raw = dg_asprintf("%.*s://%.*s", (int)scheme, uri, (int)n, rest);
    if (!raw)
        return NULL;
    dg_copy_clean(raw, strlen(raw) + 1, raw);
    return raw;
}

#ifdef DG_HAVE_LIBPQ
#include <dlfcn.h>
#include <libpq-fe.h>
#include <threads.h>

/* libpq is loaded at run time, only when a postgresql:// ledger is opened:
 * linked in, it brought LDAP, Kerberos and GnuTLS into every devgate process,
 * which broke LeakSanitizer's tracer beside PoCL's threads, and made libpq a
 * hard dependency of a binary that mostly never uses it. The header gives the
 * types; each call goes through the table below (same names, by macro). */
/* clang-format does not settle on this list: */
// clang-format off
#define PQ_CALLS(X) \
    X(PQclear) X(PQgetvalue) X(PQntuples) X(PQexec) X(PQerrorMessage) X(PQstatus) \
    X(PQtransactionStatus) X(PQsetNoticeProcessor) X(PQresultStatus) \
    X(PQresultErrorMessage) X(PQresultErrorField) X(PQgetisnull) X(PQfreemem) X(PQfinish) \
    X(PQexecParams) X(PQconninfoParse) X(PQconninfoFree) X(PQconnectdbParams) X(PQcmdTuples)
// clang-format on
#define PQ_MEMBER(f) __typeof__(f) *f;
static struct {
    PQ_CALLS(PQ_MEMBER)
} pq;
static bool pq_ok;
static char pq_why[256];

static void pq_load_once(void)
{
    void *h = dlopen("libpq.so.5", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        h = dlopen("libpq.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(pq_why, sizeof pq_why, "cannot load libpq.so.5 (install libpq5): %s", dlerror());
        return;
    }
#define PQ_LOAD(f)                                                                                 \
    if (!(*(void **)&pq.f = dlsym(h, #f))) {                                                       \
        snprintf(pq_why, sizeof pq_why, "libpq.so.5 lacks %s", #f);                                \
        return;                                                                                    \
    }
    PQ_CALLS(PQ_LOAD)
#undef PQ_LOAD
    pq_ok = true;
}

/* Loads libpq once; DG_ERR_UNAVAILABLE with the reason when it cannot. */
static dg_status pq_load(dg_ctx *ctx)
{
    static once_flag once = ONCE_FLAG_INIT;
    call_once(&once, pq_load_once);
    return pq_ok ? DG_OK : dg_fail(ctx, DG_ERR_UNAVAILABLE, "PostgreSQL ledger: %s", pq_why);
}

#define PQclear pq.PQclear
#define PQgetvalue pq.PQgetvalue
#define PQntuples pq.PQntuples
#define PQexec pq.PQexec
#define PQerrorMessage pq.PQerrorMessage
#define PQstatus pq.PQstatus
#define PQtransactionStatus pq.PQtransactionStatus
#define PQsetNoticeProcessor pq.PQsetNoticeProcessor
#define PQresultStatus pq.PQresultStatus
#define PQresultErrorMessage pq.PQresultErrorMessage
#define PQresultErrorField pq.PQresultErrorField
#define PQgetisnull pq.PQgetisnull
#define PQfreemem pq.PQfreemem
#define PQfinish pq.PQfinish
#define PQexecParams pq.PQexecParams
#define PQconninfoParse pq.PQconninfoParse
#define PQconninfoFree pq.PQconninfoFree
#define PQconnectdbParams pq.PQconnectdbParams
#define PQcmdTuples pq.PQcmdTuples

struct lg_pg {
    PGconn *conn;
};

bool dg_lg_pg_built(void)
{
    return true;
}

/* The team ledger's migrations, in PostgreSQL's words (ledger_int.h). */
static const char *const k_pg_migrations[] = LG_MIGRATIONS(" seq BIGSERIAL PRIMARY KEY");
_Static_assert(sizeof k_pg_migrations / sizeof k_pg_migrations[0] == DG_LEDGER_SCHEMA,
               "one migration per schema version");

dg_status dg_lg_pg_name(dg_ctx *ctx, dg_ledger *lg)
{
    dg_status loaded = pq_load(ctx);
    if (loaded != DG_OK)
        return loaded;
    char *err = NULL;
    PQconninfoOption *opts = PQconninfoParse(lg->path, &err);
    if (!opts) {
        /* libpq's message may quote the URI, password and all: not shown. */
        PQfreemem(err);
        char *rough = rough_name(lg->path);
        dg_status st = dg_fail(ctx, DG_ERR_USAGE,
                               "ledger %s: not a PostgreSQL connection URI libpq accepts "
                               "(postgresql://[user@]host[:port]/dbname[?param=value])",
                               rough ? rough : "postgresql://...");
        dg_free(rough);
        return st;
    }
    const char *user = NULL, *host = NULL, *hostaddr = NULL, *port = NULL, *db = NULL,
               *service = NULL, *password = NULL;
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        if (!o->val || !o->val[0])
            continue;
        if (strcmp(o->keyword, "user") == 0)
            user = o->val;
        else if (strcmp(o->keyword, "host") == 0)
            host = o->val;
        else if (strcmp(o->keyword, "hostaddr") == 0)
            hostaddr = o->val;
        else if (strcmp(o->keyword, "port") == 0)
            port = o->val;
        else if (strcmp(o->keyword, "dbname") == 0)
            db = o->val;
        else if (strcmp(o->keyword, "service") == 0)
            service = o->val;
        else if (strcmp(o->keyword, "password") == 0)
            password = o->val;
    }
    char *shown = dg_asprintf("postgresql://%s%s%s%s%s/%s%s%s", user ? user : "", user ? "@" : "",
                              host       ? host
                              : hostaddr ? hostaddr
                                         : "",
                              port ? ":" : "", port ? port : "", db ? db : "",
                              service ? "?service=" : "", service ? service : "");
    char *secret = password ? dg_strdup(password) : NULL;
    PQconninfoFree(opts);
    if (!shown || (password && !secret)) {
        dg_free(shown);
        dg_free(secret);
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    }
    dg_copy_clean(shown, strlen(shown) + 1, shown);
    dg_free(lg->shown);
    lg->shown = shown;
    lg->secret = secret;
    return DG_OK;
}

/* libpq's message as one line, with any occurrence of the password replaced. */
static void clean_msg(const dg_ledger *lg, const char *msg, char *out, size_t n)
{
    snprintf(out, n, "%s", msg ? msg : "");
    size_t len = strlen(out);
    while (len && (out[len - 1] == '\n' || out[len - 1] == ' '))
        out[--len] = '\0';
    for (char *p = out; *p; p++)
        if (*p == '\n')
            *p = ' ';
    dg_copy_clean(out, n, out);
    const char *s = lg->secret;
    size_t sl = s ? strlen(s) : 0;
    if (sl < 3)
        return;
    for (char *p = strstr(out, s); p; p = strstr(p + 3, s)) {
        memmove(p + 3, p + sl, strlen(p + sl) + 1);
        memcpy(p, "***", 3);
    }
}

static dg_status pg_fail(dg_ctx *ctx, const dg_ledger *lg, const PGresult *res, const char *doing)
{
    char why[512];
    clean_msg(lg, res ? PQresultErrorMessage(res) : PQerrorMessage(lg->pg->conn), why, sizeof why);
    if (!why[0])
        clean_msg(lg, PQerrorMessage(lg->pg->conn), why, sizeof why);
    const char *code = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    if (code &&
        (strcmp(code, "55P03") == 0 || strcmp(code, "40P01") == 0 || strcmp(code, "57014") == 0))
        return dg_fail(ctx, DG_ERR_BUSY,
                       "ledger %s: locked by another writer past the %d ms timeout while %s (%s)",
                       lg->shown, lg->timeout_ms, doing, why);
    if (PQstatus(lg->pg->conn) == CONNECTION_BAD)
        return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: lost the connection while %s: %s", lg->shown,
                       doing, why);
    return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: failed while %s: %s", lg->shown, doing, why);
}

/* Runs sql with text parameters; the result when its status is want, else
 * NULL with the failure on ctx. */
static PGresult *pg_exec(dg_ctx *ctx, dg_ledger *lg, const char *sql, int n,
                         const char *const *params, ExecStatusType want, const char *doing,
                         dg_status *st)
{
    /* Without parameters PQexec, which also takes several statements. */
    PGresult *res = n ? PQexecParams(lg->pg->conn, sql, n, NULL, params, NULL, NULL, 0)
                      : PQexec(lg->pg->conn, sql);
    if (res && PQresultStatus(res) == want)
        return res;
    *st = pg_fail(ctx, lg, res, doing);
    PQclear(res);
    return NULL;
}

static dg_status pg_cmd(dg_ctx *ctx, dg_ledger *lg, const char *sql, const char *doing)
{
    dg_status st = DG_OK;
    PQclear(pg_exec(ctx, lg, sql, 0, NULL, PGRES_COMMAND_OK, doing, &st));
    return st;
}

static void pg_rollback(dg_ledger *lg)
{
    if (PQtransactionStatus(lg->pg->conn) != PQTRANS_IDLE)
        PQclear(PQexec(lg->pg->conn, "ROLLBACK"));
}

/* The library never prints: notices are dropped. */
static void quiet_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

/* Identifies the database and applies pending migrations, all under one
 * transaction-scoped advisory lock, so concurrent openers apply each once. */
static dg_status pg_migrate(dg_ctx *ctx, dg_ledger *lg)
{
    dg_status st = pg_cmd(ctx, lg, "BEGIN", "starting the schema migration");
    if (st != DG_OK)
        return st;
    char lockq[80];
    snprintf(lockq, sizeof lockq, "SELECT pg_advisory_xact_lock(%d)", DG_LEDGER_APP_ID);
    PGresult *res =
        pg_exec(ctx, lg, lockq, 0, NULL, PGRES_TUPLES_OK, "waiting for the schema lock", &st);
    PQclear(res);
    if (res)
        res = pg_exec(ctx, lg,
                      "SELECT to_regclass('devgate_ledger') IS NOT NULL, "
                      "to_regclass('runs') IS NOT NULL",
                      0, NULL, PGRES_TUPLES_OK, "reading the schema version", &st);
    if (!res)
        goto fail;
    bool meta = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    bool runs = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
    PQclear(res);
    if (!meta && runs) {
        st = dg_fail(ctx, DG_ERR_LEDGER,
                     "ledger %s: not a devgate ledger (it holds a table \"runs\" but no "
                     "devgate_ledger table); the database was left untouched",
                     lg->shown);
        goto fail;
    }
    if (!meta) {
        char init[160];
        snprintf(init, sizeof init,
                 "CREATE TABLE devgate_ledger(app_id INTEGER NOT NULL, version INTEGER NOT NULL);"
                 "INSERT INTO devgate_ledger VALUES (%d, 0)",
                 DG_LEDGER_APP_ID);
        st = pg_cmd(ctx, lg, init, "creating the ledger");
        if (st != DG_OK)
            goto fail;
    }
    res = pg_exec(ctx, lg, "SELECT app_id, version FROM devgate_ledger", 0, NULL, PGRES_TUPLES_OK,
                  "reading the schema version", &st);
    if (!res)
        goto fail;
    long long app = PQntuples(res) == 1 ? strtoll(PQgetvalue(res, 0, 0), NULL, 10) : -1;
    long long version = PQntuples(res) == 1 ? strtoll(PQgetvalue(res, 0, 1), NULL, 10) : -1;
    PQclear(res);
    if (app != DG_LEDGER_APP_ID || version < 0) {
        st = dg_fail(ctx, DG_ERR_LEDGER,
                     "ledger %s: not a devgate ledger (devgate_ledger holds app_id %lld, "
                     "version %lld); the database was left untouched",
                     lg->shown, app, version);
        goto fail;
    }
    if (version > DG_LEDGER_SCHEMA) {
        st = dg_fail(ctx, DG_ERR_SCHEMA,
                     "ledger %s: written by a newer devgate: schema %lld, this build knows up to "
                     "%d; the database was left untouched",
                     lg->shown, version, DG_LEDGER_SCHEMA);
        goto fail;
    }
    for (int v = (int)version; v < DG_LEDGER_SCHEMA; v++) {
        char doing[64], bump[64];
        snprintf(doing, sizeof doing, "migrating the schema from version %d to %d", v, v + 1);
        snprintf(bump, sizeof bump, "UPDATE devgate_ledger SET version = %d", v + 1);
        st = pg_cmd(ctx, lg, k_pg_migrations[v], doing);
        if (st == DG_OK)
            st = pg_cmd(ctx, lg, bump, doing);
        if (st != DG_OK)
            goto fail;
        dg_log(ctx, DG_LOG_INFO, "ledger %s: schema migrated to version %d", lg->shown, v + 1);
    }
    st = pg_cmd(ctx, lg, "COMMIT", "committing the schema migration");
    if (st != DG_OK)
        goto fail;
    return DG_OK;
fail:
    pg_rollback(lg);
    return st;
}

/* The password in DEVGATE_LEDGER_PASSWORD_FILE (its first line) into *pw
 * (dg_free; NULL when the variable is unset or the URI holds a password,
 * which wins), kept as lg->secret to scrub from messages. Refused when the
 * file cannot be read or others may read it (libpq asks the same of a
 * .pgpass). Read from a file, the password is never in devgate's command
 * line nor in the environment of what devgate starts. */
static dg_status password_file(dg_ctx *ctx, dg_ledger *lg, char **pw)
{
    *pw = NULL;
    const char *f = getenv("DEVGATE_LEDGER_PASSWORD_FILE");
    if (!f || !f[0] || lg->secret)
        return DG_OK;
    char name[256];
    dg_copy_clean(name, sizeof name, f);
    int fd = open(f, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int e = fd < 0 ? errno : EINVAL;
        if (fd >= 0)
            close(fd);
        return dg_fail(ctx, DG_ERR_USAGE,
                       "ledger %s: DEVGATE_LEDGER_PASSWORD_FILE %s: cannot read it: %s", lg->shown,
                       name, e == EINVAL ? "not a regular file" : strerror(e));
    }
    if (sb.st_mode & (S_IRWXG | S_IRWXO)) {
        close(fd);
        return dg_fail(ctx, DG_ERR_USAGE,
                       "ledger %s: DEVGATE_LEDGER_PASSWORD_FILE %s may be read by others (mode "
                       "%04o): chmod 600 it",
                       lg->shown, name, (unsigned)(sb.st_mode & 07777));
    }
    char buf[1024];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    dg_status st = DG_OK;
    if (!buf[0])
        st = dg_fail(ctx, DG_ERR_USAGE, "ledger %s: DEVGATE_LEDGER_PASSWORD_FILE %s: %s", lg->shown,
                     name, n < 0 ? strerror(errno) : "no password on its first line");
    else if (!(*pw = dg_strdup(buf)) || !(lg->secret = dg_strdup(buf)))
        st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    memset(buf, 0, sizeof buf);
    return st;
}

dg_status dg_lg_pg_open(dg_ctx *ctx, dg_ledger *lg, bool *unreachable)
{
    *unreachable = false;
    dg_status loaded = pq_load(ctx);
    if (loaded != DG_OK)
        return loaded;
    lg->pg = dg_calloc(1, sizeof *lg->pg);
    if (!lg->pg)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    /* The URI (dbname, expanded) overrides the connect timeout before it; a
     * set PGCONNECT_TIMEOUT wins over ours (a NULL value leaves it to libpq). */
    char timeout[16];
    int secs = (lg->timeout_ms + 999) / 1000;
    snprintf(timeout, sizeof timeout, "%d", secs < 2 ? 2 : secs);
    char *pw = NULL;
    dg_status pst = password_file(ctx, lg, &pw);
    if (pst != DG_OK)
        return pst;
    /* the URI (dbname, expanded) overrides what comes before it */
    const char *keys[] = {"connect_timeout", "fallback_application_name", "password", "dbname",
                          NULL};
    const char *vals[] = {getenv("PGCONNECT_TIMEOUT") ? NULL : timeout, "devgate", pw, lg->path,
                          NULL};
    lg->pg->conn = PQconnectdbParams(keys, vals, 1);
    if (pw) {
        memset(pw, 0, strlen(pw));
        dg_free(pw);
    }
    if (!lg->pg->conn)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    PQsetNoticeProcessor(lg->pg->conn, quiet_notice, NULL);
    if (PQstatus(lg->pg->conn) != CONNECTION_OK) {
        *unreachable = true;
        char why[512];
        clean_msg(lg, PQerrorMessage(lg->pg->conn), why, sizeof why);
        return dg_fail(ctx, DG_ERR_UNAVAILABLE, "ledger %s: cannot reach the team ledger: %s",
                       lg->shown, why);
    }
    char set[96];
    snprintf(set, sizeof set, "SET lock_timeout = %d; SET client_min_messages = warning",
             lg->timeout_ms);
    dg_status st = pg_cmd(ctx, lg, set, "setting the lock timeout");
    if (st == DG_OK)
        st = pg_migrate(ctx, lg);
    return st;
}

void dg_lg_pg_close(struct lg_pg *pg)
{
    if (!pg)
        return;
    PQfinish(pg->conn);
    dg_free(pg);
}

dg_status dg_lg_pg_insert(dg_ctx *ctx, dg_ledger *lg, lg_fields *f, bool *taken)
{
    *taken = false;
    char code[16];
    snprintf(code, sizeof code, "%d", f->exit_status);
    for (int attempt = 0;; attempt++) {
        const char *p[11] = {f->id,     f->verb,    f->started, code,    f->state,  f->host,
                             f->commit, f->version, f->record,  f->node, f->pending};
        dg_status st = DG_OK;
        PGresult *res =
            pg_exec(ctx, lg,
                    "INSERT INTO runs(id, verb, started_at, exit_status, state, host, git_commit, "
                    "devgate_version, record, node, pending) "
                    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) "
                    "ON CONFLICT (id) DO NOTHING RETURNING seq",
                    11, p, PGRES_TUPLES_OK, "recording a run", &st);
        if (!res)
            return st;
        int rows = PQntuples(res);
        PQclear(res);
        if (rows == 1)
            return DG_OK;
        if (f->exact) {
            *taken = true;
            return DG_OK;
        }
        if (attempt + 1 >= DG_LEDGER_ID_RETRIES)
            return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: no free run id after %d draws",
                           lg->shown, DG_LEDGER_ID_RETRIES);
        dg_lg_draw_id(f);
    }
}

dg_status dg_lg_pg_update(dg_ctx *ctx, dg_ledger *lg, const char *id, int exit_status,
                          const char *state, const char *record)
{
    char code[16];
    snprintf(code, sizeof code, "%d", exit_status);
    const char *p[4] = {code, state, record, id};
    dg_status st = DG_OK;
    PGresult *res = pg_exec(ctx, lg,
                            "UPDATE runs SET exit_status = $1, state = $2, record = $3 "
                            "WHERE id = $4",
                            4, p, PGRES_COMMAND_OK, "updating a run", &st);
    if (!res)
        return st;
    if (strcmp(PQcmdTuples(res), "1") != 0) {
        char shown_id[64];
        dg_copy_clean(shown_id, sizeof shown_id, id);
        st = dg_fail(ctx, DG_ERR_NOT_FOUND, "ledger %s: no run %s to update", lg->shown, shown_id);
    }
    PQclear(res);
    return st;
}

/* Appends the entries of res to arr; with extra, the record text and rank. */
static dg_status pg_rows(dg_ctx *ctx, PGresult *res, bool extra, cJSON *arr)
{
    for (int r = 0; r < PQntuples(res); r++) {
        const char *v[LG_NCOLS];
        for (int k = 0; k < LG_NCOLS; k++)
            v[k] = PQgetisnull(res, r, k) ? NULL : PQgetvalue(res, r, k);
        cJSON *e = dg_lg_entry(v);
        bool ok = e != NULL;
        if (ok && extra)
            ok = dg_json_add_str(e, "record", PQgetvalue(res, r, LG_NCOLS)) &&
                 cJSON_AddNumberToObject(e, "rank", atoi(PQgetvalue(res, r, LG_NCOLS + 1)));
        if (!ok || !cJSON_AddItemToArray(arr, e)) {
            cJSON_Delete(e);
            return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
        }
    }
    return DG_OK;
}

dg_status dg_lg_pg_list(dg_ctx *ctx, dg_ledger *lg, int limit, cJSON *arr)
{
    char lim[16];
    snprintf(lim, sizeof lim, "%d", limit);
    const char *p[1] = {limit > 0 ? lim : NULL}; /* LIMIT NULL: all */
    dg_status st = DG_OK;
    PGresult *res = pg_exec(
        ctx, lg, "SELECT " LG_COLS ", record, 0 FROM runs ORDER BY seq DESC LIMIT $1::bigint", 1, p,
        PGRES_TUPLES_OK, "listing runs", &st);
    if (!res)
        return st;
    st = pg_rows(ctx, res, true, arr);
    PQclear(res);
    return st;
}

dg_status dg_lg_pg_match(dg_ctx *ctx, dg_ledger *lg, const char *id, int max, cJSON *arr)
{
    char lim[16];
    snprintf(lim, sizeof lim, "%d", max);
    const char *p[2] = {id, lim};
    dg_status st = DG_OK;
    PGresult *res = pg_exec(ctx, lg,
                            "SELECT " LG_COLS ", record, 0 AS rank FROM runs WHERE id = $1::text "
                            "UNION ALL "
                            "SELECT " LG_COLS ", record, 1 FROM runs "
                            "WHERE left(id, length($1::text)) = $1::text AND id <> $1::text "
                            "ORDER BY rank, seq DESC LIMIT $2::bigint",
                            2, p, PGRES_TUPLES_OK, "looking up a run", &st);
    if (!res)
        return st;
    st = pg_rows(ctx, res, true, arr);
    PQclear(res);
    return st;
}

#else /* no libpq: the team ledger is named, never opened */

struct lg_pg {
    int unused;
};

bool dg_lg_pg_built(void)
{
    return false;
}

dg_status dg_lg_pg_name(dg_ctx *ctx, dg_ledger *lg)
{
    char *rough = rough_name(lg->path);
    if (!rough)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    dg_free(lg->shown);
    lg->shown = rough;
    return DG_OK;
}

static dg_status not_built(dg_ctx *ctx, const dg_ledger *lg)
{
    return dg_fail(ctx, DG_ERR_UNAVAILABLE,
                   "ledger %s: this devgate was built without PostgreSQL support (libpq)",
                   lg->shown);
}

dg_status dg_lg_pg_open(dg_ctx *ctx, dg_ledger *lg, bool *unreachable)
{
    *unreachable = false;
    return not_built(ctx, lg);
}

void dg_lg_pg_close(struct lg_pg *pg)
{
    (void)pg;
}

dg_status dg_lg_pg_insert(dg_ctx *ctx, dg_ledger *lg, lg_fields *f, bool *taken)
{
    (void)f;
    *taken = false;
    return not_built(ctx, lg);
}

dg_status dg_lg_pg_update(dg_ctx *ctx, dg_ledger *lg, const char *id, int exit_status,
                          const char *state, const char *record)
{
    return not_built(ctx, lg);
}

dg_status dg_lg_pg_list(dg_ctx *ctx, dg_ledger *lg, int limit, cJSON *arr)
{
    return not_built(ctx, lg);
}

dg_status dg_lg_pg_match(dg_ctx *ctx, dg_ledger *lg, const char *id, int max, cJSON *arr)
{
    return not_built(ctx, lg);
}

#endif
