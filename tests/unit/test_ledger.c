/* Ledger: default path, open/migrate, record/list/show, refusals of foreign,
 * corrupt, newer and unwritable files, lock timeouts and concurrent writers;
 * the store-independent suite against SQLite and, when DEVGATE_TEST_PG names a
 * throwaway PostgreSQL database (tests/cli/test_ledger_pg.sh), the team
 * ledger; the fallback to the local ledger and push. */
#include "check.h"
#include "core/core.h"
#include "core/json.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SCHEMA 2  /* the version this build migrates to */
#define ID_LEN 28 /* YYYYMMDD-HHMMSS- and 12 hex digits */

static char g_tmp[512];

static char *tpath(const char *rel)
{
    static char buf[8][1024];
    static int next;
    char *b = buf[next++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", g_tmp, rel);
    return b;
}

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        CHECK(fwrite(data, 1, n, f) == n);
        fclose(f);
    }
}

/* Runs sql on a raw connection; returns the first column of the first row. */
static long long raw_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    long long v = -1;
    if (sqlite3_open(path, &db) == SQLITE_OK) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
            v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return v;
}

static void raw_exec(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK_MSG(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_close(db);
}

static int list_count(dg_ctx *ctx, const char *path)
{
    dg_ledger *lg = NULL;
    int n = -1;
    if (dg_ledger_open(ctx, path, 2000, &lg) == DG_OK) {
        char *json = NULL;
        if (dg_ledger_list(ctx, lg, 0, &json) == DG_OK) {
            cJSON *arr = cJSON_Parse(json);
            n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : -1;
            cJSON_Delete(arr);
        }
        dg_string_free(json);
    }
    dg_ledger_close(lg);
    return n;
}

static bool valid_run_id(const char *id)
{
    if (!id || strlen(id) != ID_LEN || id[8] != '-' || id[15] != '-')
        return false;
    for (int i = 0; i < ID_LEN; i++) {
        if (i == 8 || i == 15)
            continue;
        if (i < 15 ? !isdigit((unsigned char)id[i]) : !isxdigit((unsigned char)id[i]))
            return false;
        if (i >= 16 && isupper((unsigned char)id[i]))
            return false;
    }
    return true;
}

static bool contains(const char *hay, const char *needle)
{
    return hay && strstr(hay, needle) != NULL;
}

static const char *jstr_or(const cJSON *obj, const char *key)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(obj, key));
    return s ? s : "";
}

/* ---- default path ------------------------------------------------------------ */

static void save_env(const char *name, char **slot)
{
    const char *v = getenv(name);
    *slot = v ? strdup(v) : NULL;
}

static void restore_env(const char *name, char *saved)
{
    if (saved)
        setenv(name, saved, 1);
    else
        unsetenv(name);
    free(saved);
}

static void test_default_path(void)
{
    char *s_ledger, *s_xdg, *s_home;
    save_env("DEVGATE_LEDGER", &s_ledger);
    save_env("XDG_DATA_HOME", &s_xdg);
    save_env("HOME", &s_home);

    setenv("DEVGATE_LEDGER", "some/where/l.db", 1);
    setenv("XDG_DATA_HOME", "/xdg", 1);
    char *p = dg_ledger_default_path();
    CHECK(p && strcmp(p, "some/where/l.db") == 0);
    dg_string_free(p);

    setenv("DEVGATE_LEDGER", "", 1); /* empty: as if unset */
    p = dg_ledger_default_path();
    CHECK(p && strcmp(p, "/xdg/devgate/ledger.db") == 0);
    dg_string_free(p);

    unsetenv("DEVGATE_LEDGER");
    setenv("XDG_DATA_HOME", "/xdg/data//", 1);
    p = dg_ledger_default_path();
    CHECK(p && strcmp(p, "/xdg/data/devgate/ledger.db") == 0);
    dg_string_free(p);

    setenv("XDG_DATA_HOME", "relative/data", 1); /* not absolute: ignored */
    setenv("HOME", "/home/someone", 1);
    p = dg_ledger_default_path();
    CHECK(p && strcmp(p, "/home/someone/.local/share/devgate/ledger.db") == 0);
    dg_string_free(p);

    unsetenv("XDG_DATA_HOME");
    setenv("HOME", "/home/someone/", 1);
    p = dg_ledger_default_path();
    CHECK(p && strcmp(p, "/home/someone/.local/share/devgate/ledger.db") == 0);
    dg_string_free(p);

    unsetenv("HOME"); /* falls back to the password database, or NULL */
    p = dg_ledger_default_path();
    const char *tail = "/.local/share/devgate/ledger.db";
    CHECK(p == NULL ||
          (strlen(p) >= strlen(tail) && strcmp(p + strlen(p) - strlen(tail), tail) == 0));
    dg_string_free(p);

    restore_env("DEVGATE_LEDGER", s_ledger);
    restore_env("XDG_DATA_HOME", s_xdg);
    restore_env("HOME", s_home);
}

/* ---- open, record, list, show --------------------------------------------------- */

static void test_bad_arguments(dg_ctx *ctx)
{
    dg_ledger *lg = (dg_ledger *)1;
    CHECK(dg_ledger_open(ctx, NULL, 0, &lg) == DG_ERR_USAGE && lg == NULL);
    CHECK(dg_ledger_open(ctx, "", 0, &lg) == DG_ERR_USAGE);
    CHECK(dg_ledger_open(ctx, tpath("x.db"), 0, NULL) == DG_ERR_USAGE);
    dg_ledger_close(NULL);
    char *s = (char *)1;
    CHECK(dg_ledger_list(ctx, NULL, 0, &s) == DG_ERR_USAGE && s == NULL);
    CHECK(dg_ledger_show(ctx, NULL, "x", &s) == DG_ERR_USAGE);
    CHECK(dg_ledger_record(ctx, NULL, "env", 0, "{}", &s) == DG_ERR_USAGE);
}

static void test_open_creates_folders(dg_ctx *ctx)
{
    const char *path = tpath("a/b/devgate/ledger.db");
    dg_ledger *lg = NULL;
    dg_status st = dg_ledger_open(ctx, path, 0, &lg);
    CHECK_MSG(st == DG_OK, "%s", dg_errmsg(ctx));
    CHECK(lg != NULL);
    dg_ledger_close(lg);
    struct stat sb;
    CHECK(stat(tpath("a/b/devgate"), &sb) == 0 && S_ISDIR(sb.st_mode));
    CHECK((sb.st_mode & 0077) == 0); /* created 0700 */
    CHECK(exists(path));
    CHECK(raw_int(path, "PRAGMA application_id") == 0x44475631);
    CHECK(raw_int(path, "PRAGMA user_version") == SCHEMA);
    CHECK(raw_int(path, "SELECT count(*) FROM runs") == 0);
    CHECK(raw_int(path, "SELECT count(*) FROM sqlite_schema WHERE name = 'runs_started_at'") == 1);
    /* reopening an existing ledger is a no-op */
    lg = NULL;
    CHECK(dg_ledger_open(ctx, path, 0, &lg) == DG_OK);
    dg_ledger_close(lg);
    CHECK(raw_int(path, "PRAGMA user_version") == SCHEMA);
    char *mode = NULL;
    sqlite3 *db = NULL;
    if (sqlite3_open(path, &db) == SQLITE_OK) {
        sqlite3_stmt *stmt = NULL;
        if (sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, NULL) == SQLITE_OK &&
            sqlite3_step(stmt) == SQLITE_ROW)
            mode = strdup((const char *)sqlite3_column_text(stmt, 0));
        sqlite3_finalize(stmt);
    }
    sqlite3_close(db);
    CHECK(mode && strcmp(mode, "wal") == 0);
    free(mode);
}

static void test_round_trip(dg_ctx *ctx)
{
    const char *path = tpath("rt/ledger.db");
    dg_ledger *lg = NULL;
    CHECK_MSG(dg_ledger_open(ctx, path, 0, &lg) == DG_OK, "%s", dg_errmsg(ctx));
    if (!lg)
        return;
    char *ids[4] = {0};
    CHECK(dg_ledger_record(ctx, lg, "env", 0,
                           "{\"host\":\"box1\",\"git\":{\"commit\":\"abc123\"},\"x\":1.5}",
                           &ids[0]) == DG_OK);
    CHECK(dg_ledger_record(
              ctx, lg, "gate", 1,
              "{\"env\":{\"host\":{\"hostname\":\"box2\"},\"git\":{\"commit\":\"def\"}}}",
              &ids[1]) == DG_OK);
    CHECK(dg_ledger_record(ctx, lg, "gate", 3, "[1,2]", &ids[2]) == DG_OK);
    CHECK(dg_ledger_record(ctx, lg, "env", 130, "{\"interrupted\":true,\"host\":7}", &ids[3]) ==
          DG_OK);
    CHECK(dg_ledger_record(ctx, lg, "env", 0, "{}", NULL) == DG_OK); /* id not wanted */
    /* a record's own "timestamp" is when the run started; junk ones are ignored */
    char *tid = NULL;
    CHECK(dg_ledger_record(ctx, lg, "gate", 0, "{\"timestamp\":\"2001-02-03T04:05:06Z\"}", &tid) ==
          DG_OK);
    CHECK(tid && strncmp(tid, "20010203-040506-", 16) == 0);
    CHECK(tid &&
          raw_int(path, "SELECT count(*) FROM runs WHERE started_at = '2001-02-03T04:05:06Z'") ==
              1);
    dg_string_free(tid);
    static const char *const junk_ts[] = {
        "{\"timestamp\":\"2001-02-30T04:05:06Z\"}", "{\"timestamp\":\"2001-02-03 04:05:06\"}",
        "{\"timestamp\":\"yesterday\"}", "{\"timestamp\":20010203}"};
    for (int i = 0; i < 4; i++) {
        tid = NULL;
        CHECK(dg_ledger_record(ctx, lg, "gate", 0, junk_ts[i], &tid) == DG_OK);
        CHECK_MSG(valid_run_id(tid) && strncmp(tid, "2001", 4) != 0, "%s", tid ? tid : "(null)");
        dg_string_free(tid);
    }
    raw_exec(path, "DELETE FROM runs WHERE seq > 5"); /* back to the five above */
    for (int i = 0; i < 4; i++)
        CHECK_MSG(valid_run_id(ids[i]), "bad run id %s", ids[i] ? ids[i] : "(null)");

    /* invalid records and verbs */
    char *bad = (char *)1;
    CHECK(dg_ledger_record(ctx, lg, "env", 0, "{", &bad) == DG_ERR_USAGE && bad == NULL);
    CHECK(contains(dg_errmsg(ctx), "not valid JSON"));
    CHECK(dg_ledger_record(ctx, lg, "env", 0, "", NULL) == DG_ERR_USAGE);
    CHECK(dg_ledger_record(ctx, lg, "env", 0, "{} trailing", NULL) == DG_ERR_USAGE);
    CHECK(dg_ledger_record(ctx, lg, "env", 0, "nul", NULL) == DG_ERR_USAGE);
    CHECK(dg_ledger_record(ctx, lg, "env", 0, NULL, NULL) == DG_ERR_USAGE);
    CHECK(dg_ledger_record(ctx, lg, "", 0, "{}", NULL) == DG_ERR_USAGE);
    CHECK(dg_ledger_record(ctx, lg, NULL, 0, "{}", NULL) == DG_ERR_USAGE);
    char *deep = malloc(200001);
    if (deep) { /* nesting far past cJSON's limit: refused, no stack overflow */
        memset(deep, '[', 100000);
        memset(deep + 100000, ']', 100000);
        deep[200000] = '\0';
        CHECK(dg_ledger_record(ctx, lg, "env", 0, deep, NULL) == DG_ERR_USAGE);
        free(deep);
    }

    /* list: newest first */
    char *json = NULL;
    CHECK(dg_ledger_list(ctx, lg, 0, &json) == DG_OK);
    cJSON *arr = cJSON_Parse(json);
    CHECK(cJSON_GetArraySize(arr) == 5);
    cJSON *e = cJSON_GetArrayItem(arr, 1); /* ids[3] */
    CHECK(e && ids[3] && strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "id")), ids[3]) == 0);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(e, "state")), "interrupted");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(e, "host"))); /* not a string: NULL */
    CHECK(cJSON_GetObjectItem(e, "exit_status")->valuedouble == 130);
    e = cJSON_GetArrayItem(arr, 4); /* ids[0], oldest */
    CHECK(e && ids[0] && strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "id")), ids[0]) == 0);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(e, "verb")), "env");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(e, "host")), "box1");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(e, "git_commit")), "abc123");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(e, "state")), "complete");
    CHECK(cJSON_GetObjectItem(e, "seq")->valuedouble == 1);
    const char *started = cJSON_GetStringValue(cJSON_GetObjectItem(e, "started_at"));
    CHECK(started && strlen(started) == 20 && started[10] == 'T' && started[19] == 'Z');
    CHECK(started && ids[0] && strncmp(started, ids[0], 4) == 0); /* same year as the id */
    CHECK(cJSON_GetObjectItem(e, "record") == NULL);              /* list carries no records */
    e = cJSON_GetArrayItem(arr, 3);                               /* ids[1] */
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(e, "host")), "box2");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(e, "git_commit")), "def");
    e = cJSON_GetArrayItem(arr, 2); /* ids[2]: not an object */
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(e, "host")));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(e, "git_commit")));
    cJSON_Delete(arr);
    dg_string_free(json);

    json = NULL;
    CHECK(dg_ledger_list(ctx, lg, 2, &json) == DG_OK);
    arr = cJSON_Parse(json);
    CHECK(cJSON_GetArraySize(arr) == 2);
    cJSON_Delete(arr);
    dg_string_free(json);
    CHECK(dg_ledger_list(ctx, lg, -1, &json) == DG_ERR_USAGE && json == NULL);

    /* show by full id */
    json = NULL;
    CHECK(ids[0] && dg_ledger_show(ctx, lg, ids[0], &json) == DG_OK);
    cJSON *obj = cJSON_Parse(json);
    CHECK(obj && strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(obj, "id")), ids[0]) == 0);
    cJSON *rec = cJSON_GetObjectItem(obj, "record");
    CHECK(cJSON_IsObject(rec));
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(rec, "host")), "box1");
    CHECK(cJSON_GetObjectItem(rec, "x") && cJSON_GetObjectItem(rec, "x")->valuedouble == 1.5);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(obj, "git_commit")), "abc123");
    cJSON_Delete(obj);
    dg_string_free(json);

    json = NULL;
    CHECK(ids[2] && dg_ledger_show(ctx, lg, ids[2], &json) == DG_OK);
    obj = cJSON_Parse(json);
    CHECK(cJSON_IsArray(cJSON_GetObjectItem(obj, "record")));
    cJSON_Delete(obj);
    dg_string_free(json);

    /* show by prefix: unique when no other id shares it */
    if (ids[1]) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "%.18s", ids[1]);
        /* every run in the ledger counts: one recorded in the same second
         * shares the prefix once in 256 tries */
        int sharing = 0;
        char *all = NULL;
        CHECK(dg_ledger_list(ctx, lg, 0, &all) == DG_OK);
        cJSON *runs = cJSON_Parse(all);
        const cJSON *run;
        cJSON_ArrayForEach(run, runs)
        {
            const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(run, "id"));
            sharing += id && strncmp(id, prefix, strlen(prefix)) == 0;
        }
        cJSON_Delete(runs);
        dg_string_free(all);
        json = NULL;
        dg_status st = dg_ledger_show(ctx, lg, prefix, &json);
        if (sharing == 1) {
            CHECK(st == DG_OK);
            obj = cJSON_Parse(json);
            CHECK(obj && strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(obj, "id")), ids[1]) == 0);
            cJSON_Delete(obj);
        } else {
            CHECK(st == DG_ERR_USAGE);
        }
        dg_string_free(json);
    }

    /* ambiguous prefix: every id starts with the year */
    json = (char *)1;
    CHECK(dg_ledger_show(ctx, lg, "2", &json) == DG_ERR_USAGE && json == NULL);
    CHECK(contains(dg_errmsg(ctx), "ambiguous"));
    CHECK(ids[0] && contains(dg_errmsg(ctx), ids[0]));

    /* missing ids, LIKE wildcards taken literally */
    CHECK(dg_ledger_show(ctx, lg, "19990101-000000-0000", &json) == DG_ERR_NOT_FOUND);
    CHECK(contains(dg_errmsg(ctx), "19990101-000000-0000"));
    CHECK(dg_ledger_show(ctx, lg, "%", &json) == DG_ERR_NOT_FOUND);
    CHECK(dg_ledger_show(ctx, lg, "_", &json) == DG_ERR_NOT_FOUND);
    CHECK(dg_ledger_show(ctx, lg, "2%", &json) == DG_ERR_NOT_FOUND);
    CHECK(dg_ledger_show(ctx, lg, "' OR 1=1 --", &json) == DG_ERR_NOT_FOUND);
    CHECK(dg_ledger_show(ctx, lg, "\x1b[2J", &json) == DG_ERR_NOT_FOUND);
    CHECK(!contains(dg_errmsg(ctx), "\x1b")); /* control characters not echoed */
    CHECK(dg_ledger_show(ctx, lg, "", &json) == DG_ERR_USAGE);
    CHECK(dg_ledger_show(ctx, lg, NULL, &json) == DG_ERR_USAGE);

    dg_ledger_close(lg);
    CHECK(raw_int(path, "SELECT count(*) FROM runs") == 5);
    CHECK(raw_int(path, "SELECT count(*) FROM runs WHERE devgate_version = '" DG_VERSION "'") == 5);
    for (int i = 0; i < 4; i++)
        dg_string_free(ids[i]);
}

/* ---- refusals ------------------------------------------------------------------- */

/* Opening path must fail with want and leave the file's bytes, and which of
 * its -wal/-shm/-journal companions exist, as they were. */
static void check_refused(dg_ctx *ctx, const char *path, dg_status want, const char *says)
{
    static const char *const sides[] = {"-wal", "-shm", "-journal"};
    bool had[3];
    char side[1100];
    for (int i = 0; i < 3; i++) {
        snprintf(side, sizeof side, "%s%s", path, sides[i]);
        had[i] = exists(side);
    }
    size_t n0 = 0, n1 = 0;
    char *before = dg_read_file(path, 1 << 20, &n0);
    dg_ledger *lg = (dg_ledger *)1;
    dg_status st = dg_ledger_open(ctx, path, 0, &lg);
    CHECK_MSG(st == want, "%s: got %s: %s", path, dg_status_name(st), dg_errmsg(ctx));
    CHECK(lg == NULL);
    CHECK_MSG(contains(dg_errmsg(ctx), path), "message does not name the path: %s", dg_errmsg(ctx));
    CHECK_MSG(contains(dg_errmsg(ctx), says), "message lacks '%s': %s", says, dg_errmsg(ctx));
    char *after = dg_read_file(path, 1 << 20, &n1);
    CHECK(before && after && n0 == n1 && memcmp(before, after, n0) == 0);
    for (int i = 0; i < 3; i++) {
        snprintf(side, sizeof side, "%s%s", path, sides[i]);
        CHECK_MSG(exists(side) == had[i], "%s %s", side, had[i] ? "vanished" : "appeared");
    }
    dg_free(before);
    dg_free(after);
}

/* An evidence verb records, then replaces the record once its pack is written. */
static void test_update(dg_ctx *ctx)
{
    const char *path = tpath("upd/ledger.db");
    dg_ledger *lg = NULL;
    CHECK_MSG(dg_ledger_open(ctx, path, 0, &lg) == DG_OK, "%s", dg_errmsg(ctx));
    if (!lg)
        return;
    char *id = NULL, *shown = NULL;
    CHECK(dg_ledger_record(ctx, lg, "accept", 0, "{\"v\":1,\"pack\":null}", &id) == DG_OK);
    CHECK(id && dg_ledger_update(ctx, lg, id, 130,
                                 "{\"v\":1,\"pack\":{\"dir\":\"p\"},\"state\":\"interrupted\"}") ==
                    DG_OK);
    CHECK(id && dg_ledger_show(ctx, lg, id, &shown) == DG_OK);
    cJSON *e = shown ? cJSON_Parse(shown) : NULL;
    const cJSON *rec = cJSON_GetObjectItem(e, "record");
    CHECK(cJSON_IsObject(cJSON_GetObjectItem(rec, "pack")));
    CHECK(cJSON_GetObjectItem(e, "exit_status") &&
          cJSON_GetObjectItem(e, "exit_status")->valueint == 130);
    const char *state = cJSON_GetStringValue(cJSON_GetObjectItem(e, "state"));
    CHECK(state && strcmp(state, "interrupted") == 0);
    cJSON_Delete(e);
    dg_string_free(shown);
    CHECK(raw_int(path, "SELECT count(*) FROM runs") == 1);
    /* no such run; a record that is not JSON; an id that is only a prefix */
    CHECK(dg_ledger_update(ctx, lg, "20000101-000000-0000", 0, "{}") == DG_ERR_NOT_FOUND);
    CHECK(id && dg_ledger_update(ctx, lg, id, 0, "{nope") == DG_ERR_USAGE);
    char prefix[9] = "";
    if (id)
        snprintf(prefix, sizeof prefix, "%.8s", id);
    CHECK(dg_ledger_update(ctx, lg, prefix, 0, "{}") == DG_ERR_NOT_FOUND);
    dg_string_free(id);
    dg_ledger_close(lg);
}

static void test_refusals(dg_ctx *ctx)
{
    /* random bytes, long and short, and plain text */
    unsigned char junk[8192];
    dg_rng r;
    dg_rng_init(&r, 42, 7);
    for (size_t i = 0; i < sizeof junk; i += 16) {
        uint32_t o[4];
        dg_rng_next4(&r, o);
        memcpy(junk + i, o, 16);
    }
    write_bytes(tpath("junk.db"), junk, sizeof junk);
    check_refused(ctx, tpath("junk.db"), DG_ERR_LEDGER, "left untouched");
    CHECK(contains(dg_errmsg(ctx), "not a devgate ledger or corrupt"));
    write_bytes(tpath("short.db"), junk, 10);
    check_refused(ctx, tpath("short.db"), DG_ERR_LEDGER, "left untouched");
    write_bytes(tpath("text.db"), "hello, ledger\n", 14);
    check_refused(ctx, tpath("text.db"), DG_ERR_LEDGER, "left untouched");

    /* a real SQLite header followed by garbage */
    unsigned char fake[4096];
    memcpy(fake, junk, sizeof fake);
    memcpy(fake, "SQLite format 3", 16);
    write_bytes(tpath("fake.db"), fake, sizeof fake);
    check_refused(ctx, tpath("fake.db"), DG_ERR_LEDGER, "left untouched");

    /* another application's SQLite database */
    raw_exec(tpath("other.db"), "CREATE TABLE notes(t TEXT); INSERT INTO notes VALUES ('mine');");
    check_refused(ctx, tpath("other.db"), DG_ERR_LEDGER, "not a devgate ledger");
    CHECK(raw_int(tpath("other.db"), "SELECT count(*) FROM sqlite_schema") == 1);
    raw_exec(tpath("otherwal.db"), "PRAGMA journal_mode=WAL; CREATE TABLE notes(t TEXT);");
    check_refused(ctx, tpath("otherwal.db"), DG_ERR_LEDGER, "not a devgate ledger");
    /* ... with a write-ahead log it has not checkpointed yet */
    sqlite3 *db = NULL;
    CHECK(sqlite3_open(tpath("otherlog.db"), &db) == SQLITE_OK);
    sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
    CHECK(sqlite3_exec(db,
                       "PRAGMA journal_mode=WAL; CREATE TABLE notes(t TEXT);"
                       "INSERT INTO notes VALUES ('pending');",
                       NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    CHECK(exists(tpath("otherlog.db-wal")));
    check_refused(ctx, tpath("otherlog.db"), DG_ERR_LEDGER, "not a devgate ledger");
    raw_exec(tpath("otherid.db"), "PRAGMA application_id = 1234; PRAGMA user_version = 1;");
    check_refused(ctx, tpath("otherid.db"), DG_ERR_LEDGER, "not a devgate ledger");
    raw_exec(tpath("otherver.db"), "PRAGMA user_version = 3;");
    check_refused(ctx, tpath("otherver.db"), DG_ERR_LEDGER, "not a devgate ledger");

    /* a ledger from a newer devgate */
    const char *newer = tpath("newer/ledger.db");
    dg_ledger *lg = NULL;
    CHECK(dg_ledger_open(ctx, newer, 0, &lg) == DG_OK);
    CHECK(lg && dg_ledger_record(ctx, lg, "env", 0, "{}", NULL) == DG_OK);
    dg_ledger_close(lg);
    raw_exec(newer, "PRAGMA user_version = 99;");
    check_refused(ctx, newer, DG_ERR_SCHEMA,
                  "written by a newer devgate: schema 99, this build knows up to 2");
    CHECK(raw_int(newer, "PRAGMA user_version") == 99);
    CHECK(raw_int(newer, "SELECT count(*) FROM runs") == 1);
}

static void test_unwritable(dg_ctx *ctx)
{
    dg_ledger *lg = (dg_ledger *)1;
    /* the parent "folder" is a regular file: fails for root too */
    write_bytes(tpath("plain"), "x", 1);
    const char *under_file = tpath("plain/sub/ledger.db");
    CHECK(dg_ledger_open(ctx, under_file, 0, &lg) == DG_ERR_LEDGER && lg == NULL);
    CHECK(contains(dg_errmsg(ctx), under_file));
    CHECK_MSG(contains(dg_errmsg(ctx), strerror(ENOTDIR)), "%s", dg_errmsg(ctx));
    CHECK(dg_ledger_open(ctx, tpath("plain/ledger.db"), 0, &lg) == DG_ERR_LEDGER);
    CHECK_MSG(contains(dg_errmsg(ctx), strerror(ENOTDIR)), "%s", dg_errmsg(ctx));

    /* the path is a folder */
    CHECK(mkdir(tpath("adir"), 0700) == 0);
    CHECK(dg_ledger_open(ctx, tpath("adir"), 0, &lg) == DG_ERR_LEDGER);
    CHECK(contains(dg_errmsg(ctx), tpath("adir")));

    /* a read-only folder */
    if (geteuid() == 0) {
        printf(
            "note: running as root, which ignores folder modes; read-only folder case skipped\n");
        return;
    }
    CHECK(mkdir(tpath("ro"), 0700) == 0);
    CHECK(chmod(tpath("ro"), 0500) == 0);
    const char *ro = tpath("ro/ledger.db");
    CHECK(dg_ledger_open(ctx, ro, 0, &lg) == DG_ERR_LEDGER && lg == NULL);
    CHECK(contains(dg_errmsg(ctx), ro));
    CHECK_MSG(contains(dg_errmsg(ctx), strerror(EACCES)), "%s", dg_errmsg(ctx));
    CHECK(!exists(ro));
    const char *ro_sub = tpath("ro/sub/ledger.db");
    CHECK(dg_ledger_open(ctx, ro_sub, 0, &lg) == DG_ERR_LEDGER);
    CHECK_MSG(contains(dg_errmsg(ctx), strerror(EACCES)), "%s", dg_errmsg(ctx));
    chmod(tpath("ro"), 0700);

    /* a read-only ledger file */
    const char *rof = tpath("rofile/ledger.db");
    CHECK(dg_ledger_open(ctx, rof, 0, &lg) == DG_OK);
    dg_ledger_close(lg);
    CHECK(chmod(rof, 0400) == 0);
    CHECK(dg_ledger_open(ctx, rof, 0, &lg) == DG_ERR_LEDGER);
    CHECK(contains(dg_errmsg(ctx), rof));
    chmod(rof, 0600);
}

/* ---- empty files, odd names ----------------------------------------------------- */

static void test_migration_from_empty(dg_ctx *ctx)
{
    /* a zero-byte file */
    write_bytes(tpath("zero.db"), "", 0);
    dg_ledger *lg = NULL;
    CHECK_MSG(dg_ledger_open(ctx, tpath("zero.db"), 0, &lg) == DG_OK, "%s", dg_errmsg(ctx));
    CHECK(lg && dg_ledger_record(ctx, lg, "env", 0, "{}", NULL) == DG_OK);
    dg_ledger_close(lg);
    CHECK(raw_int(tpath("zero.db"), "PRAGMA user_version") == SCHEMA);

    /* an SQLite file that sqlite itself wrote, with no tables (version 0) */
    raw_exec(tpath("empty.db"), "CREATE TABLE t(x); DROP TABLE t;");
    CHECK(raw_int(tpath("empty.db"), "PRAGMA user_version") == 0);
    lg = NULL;
    CHECK_MSG(dg_ledger_open(ctx, tpath("empty.db"), 0, &lg) == DG_OK, "%s", dg_errmsg(ctx));
    CHECK(lg && dg_ledger_record(ctx, lg, "env", 0, "{}", NULL) == DG_OK);
    dg_ledger_close(lg);
    CHECK(raw_int(tpath("empty.db"), "PRAGMA application_id") == 0x44475631);
    CHECK(raw_int(tpath("empty.db"), "SELECT count(*) FROM runs") == 1);

    /* a relative name that looks like an SQLite URI stays a plain file name */
    char cwd[1024];
    if (getcwd(cwd, sizeof cwd) && chdir(g_tmp) == 0) {
        lg = NULL;
        CHECK(dg_ledger_open(ctx, "file:odd.db?mode=ro", 0, &lg) == DG_OK);
        CHECK(lg && dg_ledger_record(ctx, lg, "env", 0, "{}", NULL) == DG_OK);
        dg_ledger_close(lg);
        CHECK(exists("file:odd.db?mode=ro"));
        CHECK(chdir(cwd) == 0);
    }
}

/* ---- locks and concurrency ---------------------------------------------------- */

static void test_locked(dg_ctx *ctx)
{
    /* an existing ledger whose write lock another connection holds */
    const char *path = tpath("locked/ledger.db");
    dg_ledger *lg = NULL;
    CHECK(dg_ledger_open(ctx, path, 0, &lg) == DG_OK);
    dg_ledger_close(lg);
    sqlite3 *holder = NULL;
    CHECK(sqlite3_open(path, &holder) == SQLITE_OK);
    CHECK(sqlite3_exec(holder, "BEGIN EXCLUSIVE", NULL, NULL, NULL) == SQLITE_OK);
    double t0 = dg_now();
    lg = NULL;
    dg_status st = dg_ledger_open(ctx, path, 300, &lg);
    if (st == DG_OK)
        st = dg_ledger_record(ctx, lg, "env", 0, "{}", NULL);
    double dt = dg_now() - t0;
    CHECK_MSG(st == DG_ERR_BUSY, "got %s: %s", dg_status_name(st), dg_errmsg(ctx));
    CHECK_MSG(dt >= 0.25 && dt < 2.0, "waited %.3f s", dt);
    CHECK(contains(dg_errmsg(ctx), path));
    CHECK(contains(dg_errmsg(ctx), "300 ms"));
    dg_ledger_close(lg);
    sqlite3_exec(holder, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(holder);
    CHECK(list_count(ctx, path) == 0); /* nothing written */

    /* a brand-new file held exclusively before devgate ever saw it */
    const char *fresh = tpath("locked/fresh.db");
    holder = NULL;
    CHECK(sqlite3_open(fresh, &holder) == SQLITE_OK);
    CHECK(sqlite3_exec(holder, "BEGIN EXCLUSIVE", NULL, NULL, NULL) == SQLITE_OK);
    t0 = dg_now();
    lg = (dg_ledger *)1;
    st = dg_ledger_open(ctx, fresh, 300, &lg);
    dt = dg_now() - t0;
    CHECK_MSG(st == DG_ERR_BUSY && lg == NULL, "got %s: %s", dg_status_name(st), dg_errmsg(ctx));
    CHECK_MSG(dt >= 0.25 && dt < 2.0, "waited %.3f s", dt);
    CHECK(contains(dg_errmsg(ctx), "300 ms"));
    sqlite3_exec(holder, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(holder);
    CHECK(raw_int(fresh, "SELECT count(*) FROM sqlite_schema") == 0); /* nothing written */
    CHECK(list_count(ctx, fresh) == 0);                               /* usable once free */
}

#define WRITERS 2
#define RUNS_EACH 50

static void test_concurrent_writers(dg_ctx *ctx)
{
    const char *path = tpath("conc/ledger.db"); /* new: both also race the migration */
    int gate[2];
    CHECK(pipe(gate) == 0);
    fflush(stdout);
    fflush(stderr);
    pid_t kids[WRITERS];
    for (int k = 0; k < WRITERS; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            close(gate[1]);
            char c;
            while (read(gate[0], &c, 1) > 0) {
            }
            dg_ctx *cctx = dg_ctx_new();
            dg_ledger *lg = NULL;
            int fails = 0;
            if (dg_ledger_open(cctx, path, 20000, &lg) != DG_OK) {
                fprintf(stderr, "writer %d: %s\n", k, dg_errmsg(cctx));
                _exit(100);
            }
            for (int i = 0; i < RUNS_EACH; i++) {
                char rec[64];
                snprintf(rec, sizeof rec, "{\"writer\":%d,\"i\":%d}", k, i);
                if (dg_ledger_record(cctx, lg, "gate", 0, rec, NULL) != DG_OK) {
                    fprintf(stderr, "writer %d: %s\n", k, dg_errmsg(cctx));
                    fails++;
                }
            }
            dg_ledger_close(lg);
            dg_ctx_free(cctx);
            _exit(fails > 99 ? 99 : fails);
        }
        CHECK(kids[k] > 0);
    }
    close(gate[0]);
    close(gate[1]); /* both start now */
    for (int k = 0; k < WRITERS; k++) {
        int ws = 0;
        if (kids[k] > 0) {
            CHECK(waitpid(kids[k], &ws, 0) == kids[k]);
            CHECK_MSG(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "writer %d status 0x%x", k, ws);
        }
    }
    CHECK(list_count(ctx, path) == WRITERS * RUNS_EACH);
    CHECK(raw_int(path, "SELECT count(DISTINCT id) FROM runs") == WRITERS * RUNS_EACH);
    CHECK(raw_int(path, "SELECT count(*) FROM runs WHERE record LIKE '{\"writer\":0,%'") ==
          RUNS_EACH);
    CHECK(raw_int(path, "PRAGMA user_version") == SCHEMA);
}

/* ---- the store-independent suite (SQLite, and PostgreSQL when given) -------- */

/* The ids of every run in lg, as a parsed list; NULL when it cannot list. */
static cJSON *all_entries(dg_ctx *ctx, dg_ledger *lg)
{
    char *json = NULL;
    cJSON *arr = NULL;
    if (dg_ledger_list(ctx, lg, 0, &json) == DG_OK)
        arr = cJSON_Parse(json);
    dg_string_free(json);
    return arr;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Number of ids in arr that occur more than once. */
static int duplicate_ids(const cJSON *arr)
{
    int n = cJSON_GetArraySize(arr), dups = 0;
    const char **ids = calloc((size_t)n + 1, sizeof *ids);
    for (int i = 0; i < n; i++)
        ids[i] = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(arr, i), "id"));
    qsort(ids, (size_t)n, sizeof *ids, cmp_str);
    for (int i = 1; i < n; i++)
        dups += ids[i] && ids[i - 1] && strcmp(ids[i], ids[i - 1]) == 0;
    free(ids);
    return dups;
}

static cJSON *show_entry(dg_ctx *ctx, dg_ledger *lg, const char *id, dg_status *st)
{
    char *json = NULL;
    *st = dg_ledger_show(ctx, lg, id, &json);
    cJSON *e = *st == DG_OK ? cJSON_Parse(json) : NULL;
    dg_string_free(json);
    return e;
}

#define SUITE_WRITERS 8
#define SUITE_EACH 20

static void suite(dg_ctx *ctx, const char *where, const char *what)
{
    dg_ledger *lg = NULL;
    CHECK_MSG(dg_ledger_open(ctx, where, 5000, &lg) == DG_OK, "%s: %s", what, dg_errmsg(ctx));
    if (!lg)
        return;
    cJSON *arr = all_entries(ctx, lg);
    int before = cJSON_GetArraySize(arr);
    cJSON_Delete(arr);

    char *ids[3] = {0};
    CHECK(dg_ledger_record(ctx, lg, "env", 0,
                           "{\"host\":\"box1\",\"git\":{\"commit\":\"abc123\"},\"x\":1.5}",
                           &ids[0]) == DG_OK);
    CHECK(dg_ledger_record(ctx, lg, "accept", 1,
                           "{\"remote\":{\"node\":\"mac-mini\"},\"env\":{\"host\":{\"hostname\":"
                           "\"mini\"}}}",
                           &ids[1]) == DG_OK);
    CHECK(dg_ledger_record(ctx, lg, "gate", 130, "{\"interrupted\":true}", &ids[2]) == DG_OK);
    for (int i = 0; i < 3; i++)
        CHECK_MSG(valid_run_id(ids[i]), "%s: bad run id %s", what, ids[i] ? ids[i] : "(null)");
    CHECK(dg_ledger_record(ctx, lg, "env", 0, "{nope", NULL) == DG_ERR_USAGE);
    CHECK(dg_ledger_record(ctx, lg, "", 0, "{}", NULL) == DG_ERR_USAGE);

    /* list: newest first, the summary columns */
    char *json = NULL;
    CHECK(dg_ledger_list(ctx, lg, 3, &json) == DG_OK);
    arr = cJSON_Parse(json);
    dg_string_free(json);
    CHECK_MSG(cJSON_GetArraySize(arr) == 3, "%s: list --limit 3 gave %d", what,
              cJSON_GetArraySize(arr));
    const cJSON *e0 = cJSON_GetArrayItem(arr, 0), *e1 = cJSON_GetArrayItem(arr, 1),
                *e2 = cJSON_GetArrayItem(arr, 2);
    CHECK(ids[2] && strcmp(jstr_or(e0, "id"), ids[2]) == 0);
    CHECK(strcmp(jstr_or(e0, "state"), "interrupted") == 0);
    CHECK(cJSON_GetObjectItem(e0, "exit_status")->valuedouble == 130);
    CHECK(strcmp(jstr_or(e1, "node"), "mac-mini") == 0);
    CHECK(strcmp(jstr_or(e1, "host"), "mini") == 0);
    CHECK(strcmp(jstr_or(e2, "git_commit"), "abc123") == 0);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(e2, "node")));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(e2, "pending")));
    CHECK(strcmp(jstr_or(e2, "devgate_version"), DG_VERSION) == 0);
    CHECK(cJSON_GetObjectItem(e0, "seq")->valuedouble >
          cJSON_GetObjectItem(e1, "seq")->valuedouble);
    cJSON_Delete(arr);

    /* show: exact, a unique prefix, an ambiguous one, none, no LIKE */
    dg_status st;
    cJSON *e = show_entry(ctx, lg, ids[0], &st);
    CHECK_MSG(st == DG_OK, "%s: %s", what, dg_errmsg(ctx));
    CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "record"), "x") &&
          cJSON_GetObjectItem(cJSON_GetObjectItem(e, "record"), "x")->valuedouble == 1.5);
    CHECK(!cJSON_GetObjectItem(e, "rank"));
    cJSON_Delete(e);
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%.*s", ID_LEN - 2, ids[1] ? ids[1] : "");
    e = show_entry(ctx, lg, prefix, &st);
    CHECK_MSG(st == DG_OK && strcmp(jstr_or(e, "id"), ids[1] ? ids[1] : "") == 0, "%s: %s", what,
              dg_errmsg(ctx));
    cJSON_Delete(e);
    e = show_entry(ctx, lg, "2", &st);
    CHECK(st == DG_ERR_USAGE && contains(dg_errmsg(ctx), "ambiguous"));
    cJSON_Delete(e);
    e = show_entry(ctx, lg, "%", &st);
    CHECK(st == DG_ERR_NOT_FOUND);
    cJSON_Delete(e);
    e = show_entry(ctx, lg, "19990101-000000-000000000000", &st);
    CHECK(st == DG_ERR_NOT_FOUND && contains(dg_errmsg(ctx), "19990101-000000-000000000000"));
    cJSON_Delete(e);

    /* the summary of list, show and export: read from the record by its kind */
    char *tr = NULL, *old = NULL;
    CHECK(dg_ledger_record(ctx, lg, "train", 0,
                           "{\"kind\":\"train\",\"status\":\"ok\",\"spec\":{\"backend\":"
                           "\"cpu\",\"model\":\"lenet\",\"batch\":32},\"spec_id\":\"s1\","
                           "\"bucket\":{\"id\":\"b1\"},\"throughput\":{\"samples_per_s\":"
                           "{\"value\":250.5,\"unit\":\"samples/s\",\"valid\":true},"
                           "\"energy_per_sample\":{\"value\":0.75,\"unit\":\"J/sample\","
                           "\"valid\":true}}}",
                           &tr) == DG_OK);
    CHECK(dg_ledger_record(ctx, lg, "train", 0,
                           "{\"kind\":\"train\",\"timestamp\":\"2001-02-03T04:05:06Z\","
                           "\"throughput\":{\"samples_per_s\":{\"value\":null,\"unit\":"
                           "\"samples/s\",\"valid\":false}}}",
                           &old) == DG_OK);
    CHECK(dg_ledger_list(ctx, lg, 2, &json) == DG_OK);
    arr = cJSON_Parse(json);
    dg_string_free(json);
    const cJSON *s0 = cJSON_GetArrayItem(arr, 0), *s1 = cJSON_GetArrayItem(arr, 1);
    const cJSON *tp1 = cJSON_GetObjectItem(s1, "throughput"),
                *tp0 = cJSON_GetObjectItem(s0, "throughput");
    CHECK_MSG(strcmp(jstr_or(s1, "backend"), "cpu") == 0 &&
                  strcmp(jstr_or(s1, "model"), "lenet") == 0 &&
                  strcmp(jstr_or(s1, "verdict"), "ok") == 0 &&
                  strcmp(jstr_or(s1, "spec_id"), "s1") == 0 &&
                  strcmp(jstr_or(s1, "bucket_id"), "b1") == 0,
              "%s: summary of a train run", what);
    CHECK(cJSON_GetObjectItem(s1, "batch") && cJSON_GetObjectItem(s1, "batch")->valuedouble == 32);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(tp1, "valid")) &&
          cJSON_GetObjectItem(tp1, "value")->valuedouble == 250.5 &&
          strcmp(jstr_or(tp1, "unit"), "samples/s") == 0);
    /* J/sample beside samples/s where the record has it */
    const cJSON *j1 = cJSON_GetObjectItem(s1, "energy_per_sample"),
                *j0 = cJSON_GetObjectItem(s0, "energy_per_sample");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(j1, "valid")) &&
          cJSON_GetObjectItem(j1, "value")->valuedouble == 0.75 &&
          strcmp(jstr_or(j1, "unit"), "J/sample") == 0);
    /* not reported stays not reported: null and invalid, never 0 */
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(tp0, "valid")) &&
          cJSON_IsNull(cJSON_GetObjectItem(tp0, "value")));
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(j0, "valid")) &&
          cJSON_IsNull(cJSON_GetObjectItem(j0, "value")));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(s0, "batch")) &&
          cJSON_IsNull(cJSON_GetObjectItem(s0, "backend")));
    CHECK(!cJSON_GetObjectItem(s0, "record") && !cJSON_GetObjectItem(s0, "rank"));
    cJSON_Delete(arr);
    /* export: oldest first, records parsed; --since by started_at */
    CHECK(dg_ledger_export(ctx, lg, NULL, &json) == DG_OK);
    arr = cJSON_Parse(json);
    dg_string_free(json);
    int n = cJSON_GetArraySize(arr), at_tr = -1, at_old = -1, at_first = -1;
    for (int i = 0; i < n; i++) {
        const char *id = jstr_or(cJSON_GetArrayItem(arr, i), "id");
        at_tr = tr && strcmp(id, tr) == 0 ? i : at_tr;
        at_old = old && strcmp(id, old) == 0 ? i : at_old;
        at_first = ids[0] && strcmp(id, ids[0]) == 0 ? i : at_first;
    }
    CHECK_MSG(at_first >= 0 && at_tr > at_first && at_old > at_tr, "%s: export order %d %d %d",
              what, at_first, at_tr, at_old);
    const cJSON *xr = cJSON_GetObjectItem(cJSON_GetArrayItem(arr, at_tr), "record");
    CHECK(cJSON_IsObject(xr) && strcmp(jstr_or(xr, "spec_id"), "s1") == 0);
    CHECK(strcmp(jstr_or(cJSON_GetArrayItem(arr, at_tr), "model"), "lenet") == 0);
    cJSON_Delete(arr);
    CHECK(dg_ledger_export(ctx, lg, "2001-02-03T04:05:07Z", &json) == DG_OK);
    CHECK(json && old && !contains(json, old) && tr && contains(json, tr));
    dg_string_free(json);
    CHECK(dg_ledger_export(ctx, lg, "2001-02-03", &json) == DG_OK);
    CHECK(json && old && contains(json, old));
    dg_string_free(json);
    static const char *const bad_since[] = {"2001-2-3", "2001-02-03T04:05:06", "yesterday", "",
                                            "2001-02-03 04:05:06Z"};
    for (size_t i = 0; i < sizeof bad_since / sizeof bad_since[0]; i++) {
        json = (char *)1;
        CHECK_MSG(dg_ledger_export(ctx, lg, bad_since[i], &json) == DG_ERR_USAGE && !json,
                  "%s: since '%s' accepted", what, bad_since[i]);
    }
    CHECK(contains(dg_errmsg(ctx), "not a UTC date"));
    CHECK(dg_ledger_export(ctx, NULL, NULL, &json) == DG_ERR_USAGE);
    dg_string_free(tr);
    dg_string_free(old);

    /* update */
    CHECK(dg_ledger_update(ctx, lg, ids[0], 1, "{\"state\":\"interrupted\",\"y\":2}") == DG_OK);
    e = show_entry(ctx, lg, ids[0], &st);
    CHECK(strcmp(jstr_or(e, "state"), "interrupted") == 0);
    CHECK(cJSON_GetObjectItem(e, "exit_status")->valuedouble == 1);
    CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "record"), "y") != NULL);
    cJSON_Delete(e);
    CHECK(dg_ledger_update(ctx, lg, "19990101-000000-000000000000", 0, "{}") == DG_ERR_NOT_FOUND);
    CHECK(dg_ledger_update(ctx, lg, ids[0], 0, "{bad") == DG_ERR_USAGE);
    for (int i = 0; i < 3; i++)
        dg_string_free(ids[i]);
    dg_ledger_close(lg);

    /* eight writers at once (also racing their opens) lose nothing */
    int gate[2];
    CHECK(pipe(gate) == 0);
    fflush(stdout);
    fflush(stderr);
    pid_t kids[SUITE_WRITERS];
    for (int k = 0; k < SUITE_WRITERS; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            close(gate[1]);
            char c;
            while (read(gate[0], &c, 1) > 0) {
            }
            dg_ctx *cctx = dg_ctx_new();
            dg_ledger *w = NULL;
            int fails = 0;
            if (dg_ledger_open(cctx, where, 30000, &w) != DG_OK) {
                fprintf(stderr, "%s writer %d: %s\n", what, k, dg_errmsg(cctx));
                _exit(100);
            }
            for (int i = 0; i < SUITE_EACH; i++) {
                char rec[64];
                snprintf(rec, sizeof rec, "{\"writer\":%d,\"i\":%d}", k, i);
                if (dg_ledger_record(cctx, w, "gate", 0, rec, NULL) != DG_OK) {
                    fprintf(stderr, "%s writer %d: %s\n", what, k, dg_errmsg(cctx));
                    fails++;
                }
            }
            dg_ledger_close(w);
            dg_ctx_free(cctx);
            _exit(fails > 99 ? 99 : fails);
        }
        CHECK(kids[k] > 0);
    }
    close(gate[0]);
    close(gate[1]);
    for (int k = 0; k < SUITE_WRITERS; k++) {
        int ws = 0;
        if (kids[k] > 0) {
            CHECK(waitpid(kids[k], &ws, 0) == kids[k]);
            CHECK_MSG(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "%s writer %d status 0x%x", what, k,
                      ws);
        }
    }
    lg = NULL;
    CHECK(dg_ledger_open(ctx, where, 5000, &lg) == DG_OK);
    arr = lg ? all_entries(ctx, lg) : NULL;
    int after = cJSON_GetArraySize(arr);
    CHECK_MSG(after == before + 5 + SUITE_WRITERS * SUITE_EACH, "%s: %d runs before, %d after",
              what, before, after);
    CHECK_MSG(duplicate_ids(arr) == 0, "%s: duplicate run ids", what);
    cJSON_Delete(arr);
    dg_ledger_close(lg);
}

/* ---- the team ledger unreachable: the local ledger keeps the runs ------------ */

static char g_log[8192];

static void capture_log(dg_log_level level, const char *msg, void *user)
{
    (void)level;
    (void)user;
    size_t n = strlen(g_log);
    snprintf(g_log + n, sizeof g_log - n, "%s\n", msg);
}

/* Whether any byte sequence of the file at path equals needle. */
static bool file_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(buf + i, needle, k) == 0)
            return true;
    return false;
}

#define SECRET "S3cr3t-pw"

static void test_fallback(dg_ctx *ctx)
{
    char *s_local;
    save_env("DEVGATE_LOCAL_LEDGER", &s_local);
    const char *local = tpath("fb/local.db");
    setenv("DEVGATE_LOCAL_LEDGER", local, 1);
    const char *url = "postgresql://alice:" SECRET "@127.0.0.1:1/team"; /* port 1: refused */
    const char *team = "postgresql://alice@127.0.0.1:1/team";

    CHECK(dg_ledger_is_team(url) && dg_ledger_is_team("postgres://h/db"));
    CHECK(!dg_ledger_is_team("ledger.db") && !dg_ledger_is_team("postgresql:/x"));

    /* plain open: refused, named without the password */
    dg_ledger *lg = NULL;
    CHECK(dg_ledger_open(ctx, url, 1000, &lg) == DG_ERR_UNAVAILABLE && !lg);
    CHECK_MSG(contains(dg_errmsg(ctx), team) && !contains(dg_errmsg(ctx), SECRET), "%s",
              dg_errmsg(ctx));
    /* a password as a query parameter, and a URI libpq rejects */
    CHECK(dg_ledger_open(ctx, "postgresql://127.0.0.1:1/team?password=" SECRET, 1000, &lg) !=
          DG_OK);
    CHECK_MSG(!contains(dg_errmsg(ctx), SECRET), "%s", dg_errmsg(ctx));
    CHECK(dg_ledger_open(ctx, "postgresql://alice:" SECRET "@[::1/team?bogus=%zz", 1000, &lg) ==
          DG_ERR_USAGE);
    CHECK_MSG(!contains(dg_errmsg(ctx), SECRET) && contains(dg_errmsg(ctx), "not a PostgreSQL"),
              "%s", dg_errmsg(ctx));

    /* open to record: the local ledger, runs pending for the team ledger */
    g_log[0] = '\0';
    dg_set_log(ctx, capture_log, NULL);
    CHECK_MSG(dg_ledger_open_record(ctx, url, 1000, &lg) == DG_OK, "%s", dg_errmsg(ctx));
    dg_set_log(ctx, NULL, NULL);
    CHECK(lg && dg_ledger_pending_for(lg) && strcmp(dg_ledger_pending_for(lg), team) == 0);
    CHECK(lg && strcmp(dg_ledger_name(lg), local) == 0);
    CHECK_MSG(contains(g_log, local) && contains(g_log, team) && !contains(g_log, SECRET), "%s",
              g_log);
    for (int i = 0; lg && i < 3; i++)
        CHECK(dg_ledger_record(ctx, lg, "gate", 0, "{\"v\":1}", NULL) == DG_OK);
    dg_ledger_close(lg);
    char q[160];
    snprintf(q, sizeof q, "SELECT count(*) FROM runs WHERE pending = '%s'", team);
    CHECK(raw_int(local, q) == 3);
    CHECK(!file_has(local, SECRET));
    char wal[1100];
    snprintf(wal, sizeof wal, "%s-wal", local);
    CHECK(!file_has(wal, SECRET));
    /* a file path is not a team ledger: opening to record is plain open */
    lg = NULL;
    CHECK(dg_ledger_open_record(ctx, tpath("fb/direct.db"), 0, &lg) == DG_OK);
    CHECK(lg && !dg_ledger_pending_for(lg));
    dg_ledger_close(lg);

    /* the local path: DEVGATE_LOCAL_LEDGER, else a file DEVGATE_LEDGER, else
     * the default without a team DEVGATE_LEDGER */
    char *s_ledger, *s_xdg;
    save_env("DEVGATE_LEDGER", &s_ledger);
    save_env("XDG_DATA_HOME", &s_xdg);
    char *p = dg_ledger_local_path();
    CHECK(p && strcmp(p, local) == 0);
    dg_string_free(p);
    unsetenv("DEVGATE_LOCAL_LEDGER");
    setenv("DEVGATE_LEDGER", "here.db", 1);
    p = dg_ledger_local_path();
    CHECK(p && strcmp(p, "here.db") == 0);
    dg_string_free(p);
    setenv("DEVGATE_LEDGER", url, 1);
    setenv("XDG_DATA_HOME", "/xdg", 1);
    p = dg_ledger_local_path();
    CHECK_MSG(p && strcmp(p, "/xdg/devgate/ledger.db") == 0, "%s", p ? p : "(null)");
    dg_string_free(p);
    CHECK(getenv("DEVGATE_LEDGER") && strcmp(getenv("DEVGATE_LEDGER"), url) == 0);
    restore_env("DEVGATE_LEDGER", s_ledger);
    restore_env("XDG_DATA_HOME", s_xdg);
    restore_env("DEVGATE_LOCAL_LEDGER", s_local);
}

/* ---- push: each waiting run uploaded exactly once ------------------------------- */

static int pending_count(const char *local, const char *team)
{
    char q[600];
    snprintf(q, sizeof q, "SELECT count(*) FROM runs WHERE pending = '%s'", team);
    return (int)raw_int(local, q);
}

static void test_push_into(dg_ctx *ctx, const char *team_where, const char *what)
{
    static int round;
    char rel[64];
    snprintf(rel, sizeof rel, "push%d/local.db", round++);
    const char *local_path = tpath(rel);
    dg_ledger *local = NULL, *team = NULL;
    CHECK(dg_ledger_open(ctx, local_path, 0, &local) == DG_OK);
    CHECK_MSG(dg_ledger_open(ctx, team_where, 5000, &team) == DG_OK, "%s: %s", what,
              dg_errmsg(ctx));
    if (!local || !team) {
        dg_ledger_close(local);
        dg_ledger_close(team);
        return;
    }
    const char *name = dg_ledger_name(team);
    char *ids[3] = {0};
    for (int i = 0; i < 3; i++) {
        char rec[64];
        snprintf(rec, sizeof rec, "{\"push\":%d,\"round\":%d}", i, round);
        CHECK(dg_ledger_record(ctx, local, "gate", 0, rec, &ids[i]) == DG_OK);
    }
    char q[700];
    snprintf(q, sizeof q, "UPDATE runs SET pending = '%s' WHERE id <> '%s'", name, ids[2]);
    raw_exec(local_path, q);
    snprintf(q, sizeof q, "UPDATE runs SET pending = 'postgresql://elsewhere/db' WHERE id = '%s'",
             ids[2]);
    raw_exec(local_path, q);

    dg_ledger_push_counts n;
    CHECK_MSG(dg_ledger_push(ctx, local, team, &n) == DG_OK, "%s: %s", what, dg_errmsg(ctx));
    CHECK_MSG(n.pushed == 2 && n.already == 0 && n.other == 1, "%s: pushed %d already %d other %d",
              what, n.pushed, n.already, n.other);
    CHECK(pending_count(local_path, name) == 0);
    dg_status st;
    for (int i = 0; i < 2; i++) {
        cJSON *e = show_entry(ctx, team, ids[i], &st);
        CHECK_MSG(st == DG_OK, "%s: %s", what, dg_errmsg(ctx));
        CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "record"), "push") != NULL);
        CHECK(cJSON_IsNull(cJSON_GetObjectItem(e, "pending")));
        cJSON_Delete(e);
    }
    cJSON_Delete(show_entry(ctx, team, ids[2], &st));
    CHECK(st == DG_ERR_NOT_FOUND);

    /* again: nothing to do */
    CHECK(dg_ledger_push(ctx, local, team, &n) == DG_OK);
    CHECK(n.pushed == 0 && n.already == 0 && n.other == 1);
    /* a push that died after the upload, before marking: found, not doubled */
    cJSON *arr = all_entries(ctx, team);
    int count = cJSON_GetArraySize(arr);
    cJSON_Delete(arr);
    snprintf(q, sizeof q, "UPDATE runs SET pending = '%s' WHERE id <> '%s'", name, ids[2]);
    raw_exec(local_path, q);
    CHECK(dg_ledger_push(ctx, local, team, &n) == DG_OK);
    CHECK_MSG(n.pushed == 0 && n.already == 2, "%s: pushed %d already %d", what, n.pushed,
              n.already);
    arr = all_entries(ctx, team);
    CHECK(cJSON_GetArraySize(arr) == count);
    cJSON_Delete(arr);
    /* the same id with another record there: a conflict, left waiting */
    CHECK(dg_ledger_update(ctx, team, ids[0], 0, "{\"someone\":\"else\"}") == DG_OK);
    snprintf(q, sizeof q, "UPDATE runs SET pending = '%s' WHERE id = '%s'", name, ids[0]);
    raw_exec(local_path, q);
    CHECK(dg_ledger_push(ctx, local, team, &n) == DG_ERR_LEDGER);
    CHECK_MSG(contains(dg_errmsg(ctx), "different record") && contains(dg_errmsg(ctx), ids[0]),
              "%s", dg_errmsg(ctx));
    CHECK(pending_count(local_path, name) == 1);
    /* into itself, or without counts */
    CHECK(dg_ledger_push(ctx, local, local, &n) == DG_ERR_USAGE);
    CHECK(dg_ledger_push(ctx, local, team, NULL) == DG_ERR_USAGE);
    for (int i = 0; i < 3; i++)
        dg_string_free(ids[i]);
    dg_ledger_close(local);
    dg_ledger_close(team);
}

/* ---- migration 1 -> 2 keeps the runs ------------------------------------------- */

static void test_migration_v1(dg_ctx *ctx)
{
    const char *path = tpath("v1.db");
    raw_exec(path,
             "CREATE TABLE runs(seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL,"
             " verb TEXT NOT NULL, started_at TEXT NOT NULL, exit_status INTEGER NOT NULL,"
             " state TEXT NOT NULL DEFAULT 'complete' CHECK (state IN ('complete', "
             "'interrupted')), host TEXT, git_commit TEXT, devgate_version TEXT,"
             " record TEXT NOT NULL);"
             "CREATE INDEX runs_started_at ON runs(started_at);"
             "INSERT INTO runs(id, verb, started_at, exit_status, record) VALUES"
             " ('20250101-000000-abcd', 'env', '2025-01-01T00:00:00Z', 0, '{\"old\":1}');"
             "PRAGMA application_id = 1145525809; PRAGMA user_version = 1;");
    dg_ledger *lg = NULL;
    CHECK_MSG(dg_ledger_open(ctx, path, 0, &lg) == DG_OK, "%s", dg_errmsg(ctx));
    CHECK(raw_int(path, "PRAGMA user_version") == SCHEMA);
    dg_status st;
    cJSON *e = lg ? show_entry(ctx, lg, "20250101-000000-abcd", &st) : NULL;
    CHECK(e && cJSON_GetObjectItem(cJSON_GetObjectItem(e, "record"), "old") != NULL);
    CHECK(e && cJSON_IsNull(cJSON_GetObjectItem(e, "node")));
    cJSON_Delete(e);
    dg_ledger_close(lg);
}

/* ---- main ------------------------------------------------------------------- */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    chmod(p, 0700);
    remove(p);
    return 0;
}

int main(void)
{
    const char *tmpdir = getenv("TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/dg-ledger-XXXXXX", tmpdir && tmpdir[0] ? tmpdir : "/tmp");
    if (!mkdtemp(g_tmp))
        check_skip("cannot create a temporary folder");
    dg_ctx *ctx = dg_ctx_new();
    size_t live0 = 0;
    dg_host_mem_stats(&live0, NULL);

    test_default_path();
    test_bad_arguments(ctx);
    test_open_creates_folders(ctx);
    test_round_trip(ctx);
    test_update(ctx);
    test_refusals(ctx);
    test_unwritable(ctx);
    test_migration_from_empty(ctx);
    test_locked(ctx);
    test_concurrent_writers(ctx);
    test_migration_v1(ctx);
    test_fallback(ctx);
    suite(ctx, tpath("suite/ledger.db"), "sqlite");
    test_push_into(ctx, tpath("push-team/ledger.db"), "sqlite team");
    const char *pg = getenv("DEVGATE_TEST_PG");
    if (pg && pg[0]) {
        suite(ctx, pg, "postgresql");
        test_push_into(ctx, pg, "postgresql team");
    } else {
        printf("note: DEVGATE_TEST_PG unset: the PostgreSQL run of the suite is left to "
               "tests/cli/test_ledger_pg.sh\n");
    }

    size_t live1 = 0;
    dg_host_mem_stats(&live1, NULL);
    CHECK_MSG(live1 == live0, "host bytes live before %zu, after %zu", live0, live1);
    dg_ctx_free(ctx);
    chmod(tpath("ro"), 0700);
    nftw(g_tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    CHECK_DONE();
}
