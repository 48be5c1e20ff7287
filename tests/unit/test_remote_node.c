/* The remote protocol without ssh: the parsers of the node's answers (info,
 * cache states, fetch checked against the verb asked, run tokens, manifest
 * lines, bucket comparison) with hostile input, and the node side
 * (dg_remote_node) answering have/put/tree/fetch/list/mark in a temporary
 * cache: a corrupt arrival refused, a changed cached file caught, a folder
 * assembled from its manifest, bad requests refused before anything runs. */
#include "check.h"
#include "devgate.h"
#include "remote/remote_int.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_tmp[512];
static char g_cache[600];

static void test_parse_info(void)
{
    int proto;
    cJSON *info;
    dg_remote_parse_info("{\"protocol\":2,\"version\":\"x\"}", &proto, &info);
    CHECK(proto == 2 && info != NULL);
    cJSON_Delete(info);
    static const char *const bad[] = {"",
                                      "null",
                                      "[]",
                                      "{\"protocol\":\"2\"}",
                                      "{}",
                                      "garbage",
                                      "{\"protocol\":-1}",
                                      "{\"protocol\":1e300}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dg_remote_parse_info(bad[i], &proto, &info);
        CHECK_MSG(proto == -1 && info == NULL, "info answer '%s' accepted", bad[i]);
    }
    dg_remote_parse_info(NULL, &proto, &info);
    CHECK(proto == -1 && info == NULL);
}

static void test_parse_state(void)
{
    char st[16], path[64];
    CHECK(dg_remote_parse_state("{\"state\":\"ok\",\"path\":\"/c/o/x\"}", st, sizeof st, path,
                                sizeof path));
    CHECK_STR(st, "ok");
    CHECK_STR(path, "/c/o/x");
    CHECK(dg_remote_parse_state("{\"state\":\"missing\"}", st, sizeof st, path, sizeof path));
    CHECK(strcmp(st, "missing") == 0 && path[0] == '\0');
    /* a path longer than the buffer, a state of another type, a path of another type */
    char longp[200];
    snprintf(longp, sizeof longp, "{\"state\":\"ok\",\"path\":\"%0100d\"}", 0);
    CHECK(!dg_remote_parse_state(longp, st, sizeof st, path, sizeof path));
    CHECK(!dg_remote_parse_state("{\"state\":1}", st, sizeof st, path, sizeof path));
    CHECK(
        !dg_remote_parse_state("{\"state\":\"ok\",\"path\":3}", st, sizeof st, path, sizeof path));
    CHECK(!dg_remote_parse_state("{\"state\":\"ok\",\"path\":\"\"}", st, sizeof st, path,
                                 sizeof path));
    CHECK(!dg_remote_parse_state("not json", st, sizeof st, path, sizeof path));
}

static void test_parse_fetch(void)
{
    cJSON *ans;
    char why[160];
    const char *good = "{\"verb\":\"gate\",\"exit_status\":0,\"record\":{\"kind\":\"gate\"}}";
    CHECK(dg_remote_parse_fetch(good, "gate", &ans, why, sizeof why) && ans);
    cJSON_Delete(ans);
    CHECK(dg_remote_parse_fetch(good, NULL, &ans, why, sizeof why)); /* collect: no verb asked */
    cJSON_Delete(ans);
    CHECK(dg_remote_parse_fetch("{\"running\":true}", "gate", &ans, why, sizeof why));
    cJSON_Delete(ans);
    /* the node answering another verb than the one asked */
    const char *train = "{\"verb\":\"train\",\"exit_status\":0,\"record\":{\"kind\":\"train\"}}";
    CHECK(!dg_remote_parse_fetch(train, "gate", &ans, why, sizeof why) && !ans);
    CHECK_MSG(strstr(why, "verb 'train' to a 'gate' request") != NULL, "why: %s", why);
    /* a verb that is no devgate verb (an escape sequence), a record of another kind */
    CHECK(!dg_remote_parse_fetch("{\"verb\":\"\\u001b[2J\",\"exit_status\":0}", NULL, &ans, why,
                                 sizeof why));
    CHECK(strchr(why, '\x1b') == NULL);
    CHECK(!dg_remote_parse_fetch("{\"verb\":\"gate\",\"exit_status\":0,\"record\":{\"kind\":"
                                 "\"train\"}}",
                                 "gate", &ans, why, sizeof why));
    CHECK(strstr(why, "not a 'gate' record") != NULL);
    CHECK(!dg_remote_parse_fetch("{\"verb\":\"gate\",\"exit_status\":300}", "gate", &ans, why,
                                 sizeof why));
    CHECK(!dg_remote_parse_fetch("{\"verb\":\"gate\"}", "gate", &ans, why, sizeof why));
    CHECK(!dg_remote_parse_fetch("[1]", "gate", &ans, why, sizeof why));
    /* the protocol's keys exactly, and a whole status (fuzz_remote_answer: an
     * "exit_sTatus" passed the check, then read as NaN into an int) */
    CHECK(!dg_remote_parse_fetch("{\"verb\":\"gate\",\"exit_sTatus\":0}", "gate", &ans, why,
                                 sizeof why));
    CHECK(!dg_remote_parse_fetch("{\"verb\":\"gate\",\"exit_status\":2.5}", "gate", &ans, why,
                                 sizeof why));
    /* a failed run leaves no record: that is an answer, judged by the caller */
    CHECK(dg_remote_parse_fetch("{\"verb\":\"gate\",\"exit_status\":3}", "gate", &ans, why,
                                sizeof why));
    cJSON_Delete(ans);
}

static void test_tokens_manifest_bucket(void)
{
    CHECK(dg_remote_token_ok("20261201-101500-9a3c11f0"));
    CHECK(!dg_remote_token_ok(""));
    CHECK(!dg_remote_token_ok("../x"));
    CHECK(!dg_remote_token_ok("ABC"));
    CHECK(!dg_remote_token_ok("01234567890123456789012345678901234567890"));
    char sha[65];
    unsigned long long size;
    const char *rel;
    char line[200];
    const char *h = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    snprintf(line, sizeof line, "%s 12 cat/0.png", h);
    CHECK(dg_remote_manifest_line(line, sha, &size, &rel) && size == 12 &&
          strcmp(rel, "cat/0.png") == 0);
    static const char *const bad_rel[] = {"/etc/passwd", "../x", "a/../b", "a//b", ".hidden",
                                          "a/.x",        "a/",   "",       "./a"};
    for (size_t i = 0; i < sizeof bad_rel / sizeof bad_rel[0]; i++) {
        snprintf(line, sizeof line, "%s 1 %s", h, bad_rel[i]);
        CHECK_MSG(!dg_remote_manifest_line(line, sha, &size, &rel), "manifest path '%s' accepted",
                  bad_rel[i]);
    }
    CHECK(!dg_remote_manifest_line("E3B0 1 a", sha, &size, &rel));
    snprintf(line, sizeof line, "%.63s 1 a", h);
    CHECK(!dg_remote_manifest_line(line, sha, &size, &rel));
    char d[64];
    dg_bucket_differs("{\"id\":\"a\",\"batch\":16}", "{\"id\":\"a\",\"batch\":32}", d, sizeof d);
    CHECK_STR(d, "");
    dg_bucket_differs("{\"id\":\"a\",\"batch\":16,\"augment\":\"flip\"}",
                      "{\"id\":\"b\",\"batch\":32}", d, sizeof d);
    CHECK_STR(d, "augment, batch");
    dg_bucket_differs("{\"id\":\"a\"}", "{\"id\":\"b\"}", d, sizeof d);
    CHECK_STR(d, "id");
    dg_bucket_differs("{\"id\":\"a\"}", NULL, d, sizeof d);
    CHECK_STR(d, "id");
}

/* One node request with input text (NULL: none); its answer (dg_free). */
static dg_status node(dg_ctx *ctx, const char *input, dg_remote_failure *f, char **answer,
                      const char *const *words)
{
    int argc = 0;
    while (words[argc])
        argc++;
    int fd = -1;
    if (input) {
        char path[700];
        snprintf(path, sizeof path, "%s/in-XXXXXX", g_tmp);
        fd = mkstemp(path);
        unlink(path);
        if (write(fd, input, strlen(input)) != (ssize_t)strlen(input))
            return DG_ERR_IO;
        lseek(fd, 0, SEEK_SET);
    }
    dg_remote_node_req req = {.cache = g_cache, .argc = argc, .argv = words, .in_fd = fd};
    dg_status st = dg_remote_node(ctx, &req, answer, f);
    if (fd >= 0)
        close(fd);
    return st;
}

static void test_node_cache(dg_ctx *ctx)
{
    const char *abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    dg_remote_failure f;
    char *ans = NULL;
    CHECK(node(ctx, NULL, &f, &ans, (const char *[]){"info", NULL}) == DG_OK);
    int proto;
    cJSON *info;
    dg_remote_parse_info(ans, &proto, &info);
    CHECK(proto == DG_REMOTE_PROTOCOL);
    cJSON_Delete(info);
    dg_free(ans);
    CHECK(node(ctx, NULL, &f, &ans, (const char *[]){"have", abc, "a.bin", NULL}) == DG_OK);
    CHECK(ans && strstr(ans, "\"missing\""));
    dg_free(ans);
    /* arrives corrupt: refused as such, nothing kept */
    CHECK(node(ctx, "abd", &f, &ans, (const char *[]){"put", abc, "a.bin", "3", NULL}) != DG_OK);
    CHECK(f == DG_REMOTE_BUCKET && ans == NULL);
    CHECK(strstr(dg_errmsg(ctx), "arrived with SHA-256") != NULL);
    CHECK(node(ctx, "abc", &f, &ans, (const char *[]){"put", abc, "a.bin", "3", NULL}) == DG_OK);
    char st[16], path[700];
    CHECK(dg_remote_parse_state(ans, st, sizeof st, path, sizeof path) && !strcmp(st, "ok"));
    dg_free(ans);
    CHECK(node(ctx, NULL, &f, &ans, (const char *[]){"have", abc, "a.bin", NULL}) == DG_OK);
    CHECK(ans && strstr(ans, "\"ok\""));
    dg_free(ans);
    /* a cached file changed after it arrived: caught and removed */
    FILE *w = fopen(path, "ab");
    if (w) {
        fputc('x', w);
        fclose(w);
    }
    CHECK(node(ctx, NULL, &f, &ans, (const char *[]){"have", abc, "a.bin", NULL}) == DG_OK);
    CHECK(ans && strstr(ans, "\"tampered\"") && access(path, F_OK) != 0);
    dg_free(ans);
    /* requests that name paths outside the cache never run */
    const char *const *const bad[] = {
        (const char *[]){"have", abc, "../a.bin", NULL},
        (const char *[]){"have", "../../etc", "x", NULL},
        (const char *[]){"fetch", "../x", NULL},
        (const char *[]){"start", "t", "x", "gate", NULL},
        (const char *[]){"rm", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(node(ctx, NULL, &f, &ans, bad[i]) != DG_OK && f == DG_REMOTE_USAGE && !ans);
    }
    CHECK(node(ctx, NULL, &f, &ans, (const char *[]){"fetch", "20261201-000000-00000000", NULL}) !=
              DG_OK &&
          f == DG_REMOTE_NO_RUN);
}

static void test_node_tree(dg_ctx *ctx)
{
    const char *abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    dg_remote_failure f;
    char *ans = NULL;
    char manifest[200], id[65], mpath[700];
    snprintf(manifest, sizeof manifest, "%s 3 cat/0.png\n", abc);
    snprintf(mpath, sizeof mpath, "%s/manifest", g_tmp);
    FILE *m = fopen(mpath, "wb");
    if (m) {
        fputs(manifest, m);
        fclose(m);
    }
    CHECK(dg_sha256_file(ctx, mpath, id, NULL) == DG_OK);
    CHECK(node(ctx, manifest, &f, &ans, (const char *[]){"tree", id, NULL}) == DG_OK);
    CHECK_MSG(ans && strstr(ans, "\"missing\"") && strstr(ans, abc), "tree answer: %s", ans);
    dg_free(ans);
    CHECK(node(ctx, "abc", &f, &ans, (const char *[]){"put", abc, "0.png", "3", NULL}) == DG_OK);
    dg_free(ans);
    CHECK(node(ctx, manifest, &f, &ans, (const char *[]){"tree", id, NULL}) == DG_OK);
    char st[16], path[700];
    CHECK(dg_remote_parse_state(ans, st, sizeof st, path, sizeof path) && !strcmp(st, "ok"));
    dg_free(ans);
    char file[800];
    snprintf(file, sizeof file, "%s/cat/0.png", path);
    struct stat sb;
    CHECK(stat(file, &sb) == 0 && sb.st_size == 3);
    /* a manifest that does not hash to the id it is sent under */
    CHECK(node(ctx, "x", &f, &ans, (const char *[]){"tree", id, NULL}) != DG_OK &&
          f == DG_REMOTE_BUCKET);
}

static void test_node_runs(dg_ctx *ctx)
{
    dg_remote_failure f;
    char *ans = NULL;
    const char *tok = "20261201-101500-9a3c11f0";
    char dir[700], p[800];
    snprintf(dir, sizeof dir, "%s/runs/%s", g_cache, tok);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK(system(cmd) == 0);
    snprintf(p, sizeof p, "%s/run.json", dir);
    FILE *w = fopen(p, "w");
    if (w) {
        fputs("{\"verb\":\"gate\",\"argv\":[\"gate\"]}", w);
        fclose(w);
    }
    CHECK(node(ctx, NULL, &f, &ans, (const char *[]){"fetch", tok, NULL}) == DG_OK);
    CHECK(ans && strstr(ans, "\"running\":true"));
    dg_free(ans);
    CHECK(node(ctx, NULL, &f, &ans, (const char *[]){"list", NULL}) == DG_OK);
    CHECK_STR(ans ? ans : "", "[]");
    dg_free(ans);
    snprintf(p, sizeof p, "%s/exit_status", dir);
    w = fopen(p, "w");
    if (w) {
        fputs("0\n", w);
        fclose(w);
    }
    snprintf(p, sizeof p, "%s/record.json", dir);
    w = fopen(p, "w");
    if (w) {
        fputs("{\"kind\":\"gate\"}", w);
        fclose(w);
    }
    CHECK(node(ctx, NULL, &f, &ans, (const char *[]){"fetch", tok, NULL}) == DG_OK);
    cJSON *fa = NULL;
    char why[160];
    CHECK_MSG(dg_remote_parse_fetch(ans, "gate", &fa, why, sizeof why), "%s", why);
    CHECK(dg_jnum(fa, "exit_status") == 0 && dg_jstr(fa, "node.host"));
    cJSON_Delete(fa);
    dg_free(ans);
    CHECK(node(ctx, NULL, &f, &ans, (const char *[]){"list", NULL}) == DG_OK);
    CHECK(ans && strstr(ans, tok));
    dg_free(ans);
    CHECK(node(ctx, NULL, &f, &ans, (const char *[]){"mark", tok, NULL}) == DG_OK);
    dg_free(ans);
    CHECK(node(ctx, NULL, &f, &ans, (const char *[]){"list", NULL}) == DG_OK);
    CHECK_STR(ans ? ans : "", "[]");
    dg_free(ans);
}

/* A file at dir/name holding text. */
static void plant(const char *dir, const char *name, const char *text)
{
    char p[900];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *w = fopen(p, "w");
    if (w) {
        fputs(text, w);
        fclose(w);
    }
}

/* wait on a run that is not there, or whose supervisor died, ends at once:
 * it never waits for an exit status that cannot come (issue 26). */
static void test_node_wait_ends(dg_ctx *ctx)
{
    dg_remote_failure f;
    char *ans = NULL;
    CHECK(node(ctx, NULL, &f, &ans, (const char *[]){"wait", "20261201-000000-0bad0bad", NULL}) !=
              DG_OK &&
          f == DG_REMOTE_NO_RUN && !ans);
    const char *tok = "20261201-101600-0dead0ed";
    char dir[700], cmd[800], p[800];
    snprintf(dir, sizeof dir, "%s/runs/%s", g_cache, tok);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK(system(cmd) == 0);
    plant(dir, "run.json", "{\"verb\":\"gate\",\"argv\":[\"gate\"]}");
    /* an older devgate's run keeps no lock: wait cannot tell, and says so */
    CHECK(node(ctx, NULL, &f, &ans, (const char *[]){"wait", tok, NULL}) != DG_OK &&
          f == DG_REMOTE_USAGE && strstr(dg_errmsg(ctx), "keeps no lock"));
    /* a live run's lock is held: fetch says it runs */
    plant(dir, "running", "");
    snprintf(p, sizeof p, "%s/running", dir);
    int lk = open(p, O_RDONLY);
    CHECK(lk >= 0 && flock(lk, LOCK_EX) == 0);
    CHECK(node(ctx, NULL, &f, &ans, (const char *[]){"fetch", tok, NULL}) == DG_OK);
    CHECK(ans && strstr(ans, "\"running\":true"));
    dg_free(ans);
    /* its supervisor gone (lock free, no exit status): wait ends, fetch answers 255 */
    close(lk);
    CHECK(node(ctx, NULL, &f, &ans, (const char *[]){"wait", tok, NULL}) == DG_OK);
    dg_free(ans);
    CHECK(node(ctx, NULL, &f, &ans, (const char *[]){"fetch", tok, NULL}) == DG_OK);
    cJSON *fa = NULL;
    char why[160];
    CHECK_MSG(dg_remote_parse_fetch(ans, "gate", &fa, why, sizeof why), "%s", why);
    CHECK(dg_jnum(fa, "exit_status") == 255);
    CHECK(dg_jstr(fa, "stderr_tail") &&
          strstr(dg_jstr(fa, "stderr_tail"), "without an exit status"));
    cJSON_Delete(fa);
    dg_free(ans);
}

/* A node request's exit statuses as its failures, in the request's words. */
static void test_node_status(dg_ctx *ctx)
{
    dg_remote r = {.ctx = ctx, .cfg = {.host = "nodeA"}};
    static const dg_node_words w = {"assembling", " while assembling a folder",
                                    "the node could not assemble the folder", DG_REMOTE_BUCKET};
    static const dg_node_words plain = {"starting the run", "", "the run could not start",
                                        DG_REMOTE_USAGE};
    char err[] = "first\nno space left\n";
    dg_ssh_answer a = {.rc = 0, .out = "", .err = err};
    CHECK(dg_remote_node_status(&r, &a, &w) == DG_OK && r.failure == DG_REMOTE_OK);
    a.rc = DG_NODE_EXIT_DISK;
    CHECK(dg_remote_node_status(&r, &a, &w) != DG_OK && r.failure == DG_REMOTE_DISK);
    CHECK(!strcmp(dg_errmsg(ctx),
                  "remote nodeA: disk full on the node while assembling a folder: no space left"));
    CHECK(dg_remote_node_status(&r, &a, &plain) != DG_OK && r.failure == DG_REMOTE_DISK);
    CHECK(!strcmp(dg_errmsg(ctx), "remote nodeA: disk full on the node: no space left"));
    a.rc = DG_NODE_EXIT_CORRUPT;
    CHECK(dg_remote_node_status(&r, &a, &w) != DG_OK && r.failure == DG_REMOTE_BUCKET);
    CHECK(!strcmp(dg_errmsg(ctx),
                  "remote nodeA: the node could not assemble the folder (exit 15): no space left"));
    CHECK(dg_remote_node_status(&r, &a, &plain) != DG_OK && r.failure == DG_REMOTE_USAGE);
    a.rc = DG_NODE_EXIT_USAGE;
    CHECK(dg_remote_node_status(&r, &a, &plain) != DG_OK && r.failure == DG_REMOTE_USAGE);
    CHECK(!strcmp(dg_errmsg(ctx), "remote nodeA: the run could not start (exit 2): no space left"));
    a.rc = 255; /* ssh's own failure: said as doing */
    CHECK(dg_remote_node_status(&r, &a, &w) != DG_OK && r.failure == DG_REMOTE_USAGE);
    CHECK(strstr(dg_errmsg(ctx), "while assembling") != NULL);
    a.rc = 0;
    a.too_big = true;
    CHECK(dg_remote_node_status(&r, &a, &w) != DG_OK && r.failure == DG_REMOTE_USAGE);
}

int main(void)
{
    const char *tmpdir = getenv("TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/dg-node-XXXXXX", tmpdir && tmpdir[0] ? tmpdir : "/tmp");
    if (!mkdtemp(g_tmp))
        check_skip("cannot create a temporary folder");
    snprintf(g_cache, sizeof g_cache, "%s/cache", g_tmp);
    test_parse_info();
    test_parse_state();
    test_parse_fetch();
    test_tokens_manifest_bucket();
    dg_ctx *ctx = dg_ctx_new();
    test_node_cache(ctx);
    test_node_tree(ctx);
    test_node_runs(ctx);
    test_node_wait_ends(ctx);
    test_node_status(ctx);
    dg_ctx_free(ctx);
    char rm[600];
    snprintf(rm, sizeof rm, "rm -rf '%s'", g_tmp);
    if (system(rm) != 0)
        fprintf(stderr, "note: could not remove %s\n", g_tmp);
    CHECK_DONE();
}
