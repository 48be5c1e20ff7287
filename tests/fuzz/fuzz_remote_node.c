/* libFuzzer harness for the node side of devgate remote (`devgate __node`,
 * dg_remote_node): a request's words and input as the other side sends them,
 * against a cache in a temporary folder holding one cached file and a run
 * folder planted as a run leaves it. Input, NUL-separated: the words (one a
 * line; a word "SHA" stands for the SHA-256 of the input, "SIZE" for its
 * length), the input (a put's file, a tree's manifest), run.json,
 * exit_status, record.json, progress.log, and a flags byte (bits 0-3: each
 * of those four files is there; bit 4: the run's lock file is). Requests
 * that start devgate itself (start, bucket) are not sent. Nothing may crash
 * or hang; nothing is written outside the cache; an answer is JSON, and a
 * fetch answer is read on the other side into a valid record. */
#include "fuzz.h"
#include "fuzz_util.h"
#include "remote/remote_int.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOKEN "20261201-101500-9a3c11f0"
#define ABC_SHA "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

static char g_root[512], g_cache[600];

static void put_file(const char *dir, const char *name, const char *text, size_t len)
{
    char p[900];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f)
        abort();
    if (len && fwrite(text, 1, len, f) != len)
        abort();
    fclose(f);
}

static void remove_root(void)
{
    dg_remove_tree(g_root);
}

/* A fresh cache: the file "abc" cached as a.bin, and the run TOKEN's folder
 * with the files flags names. */
static void fresh_cache(const fuzz_parts *in, unsigned flags)
{
    if (!g_root[0]) {
        /* in memory where there is /dev/shm: a disk's latency would cap the
         * executions (a fresh cache each one) at a few dozen a second */
        const char *t = getenv("TMPDIR");
        if (access("/dev/shm", W_OK) == 0)
            t = "/dev/shm";
        snprintf(g_root, sizeof g_root, "%s/dg-fuzz-node-XXXXXX", t && t[0] ? t : "/tmp");
        if (!mkdtemp(g_root))
            abort();
        snprintf(g_cache, sizeof g_cache, "%s/cache", g_root);
        atexit(remove_root);
    }
    dg_remove_tree(g_cache);
    char dir[900];
    snprintf(dir, sizeof dir, "%s/objects/%s", g_cache, ABC_SHA);
    if (!dg_make_dirs(dir))
        abort();
    put_file(dir, "a.bin", "abc", 3);
    snprintf(dir, sizeof dir, "%s/runs/%s", g_cache, TOKEN);
    if (!dg_make_dirs(dir))
        abort();
    static const char *const names[] = {"run.json", "exit_status", "record.json", "progress.log"};
    for (int i = 0; i < 4; i++)
        if (flags & (1u << i))
            put_file(dir, names[i], in->p[2 + i], in->len[2 + i]);
    if (flags & 16)
        put_file(dir, "running", "", 0);
}

/* Aborts when anything but the cache lies in the temporary folder. */
static void only_cache(void)
{
    DIR *d = opendir(g_root);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "cache"))
            abort();
    if (d)
        closedir(d);
}

static void check_answer(const char *req, const char *answer)
{
    cJSON *a = cJSON_Parse(answer);
    if (!a)
        abort();
    cJSON_Delete(a);
    if (strcmp(req, "fetch") != 0)
        return;
    cJSON *ans = NULL;
    char why[160];
    if (!dg_remote_parse_fetch(answer, NULL, &ans, why, sizeof why))
        return;
    cJSON *rec = cJSON_DetachItemFromObject(ans, "record");
    if (cJSON_IsObject(rec)) {
        char *json = dg_remote_record_with(rec, NULL, "node", TOKEN,
                                           cJSON_DetachItemFromObject(ans, "node"));
        fuzz_text_check(json);
        dg_free(json);
    } else {
        cJSON_Delete(rec);
    }
    cJSON_Delete(ans);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_parts in;
    if (fuzz_split(data, size, 7, &in) < 0)
        return 0;
    unsigned flags = in.len[6] ? (unsigned char)in.p[6][0] : 0;
    fresh_cache(&in, flags);
    int fd = memfd_create("node-input", MFD_CLOEXEC);
    if (fd < 0 || (in.len[1] && write(fd, in.p[1], in.len[1]) != (ssize_t)in.len[1]))
        abort();
    lseek(fd, 0, SEEK_SET);
    char sha[65] = "", size_word[24], fdpath[64];
    snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", fd);
    dg_ctx *ctx = dg_ctx_new();
    if (dg_sha256_file(ctx, fdpath, sha, NULL) != DG_OK)
        abort();
    lseek(fd, 0, SEEK_SET);
    snprintf(size_word, sizeof size_word, "%zu", in.len[1]);
    const char *words[17];
    int n = 0;
    for (char *save = NULL, *w = strtok_r(in.p[0], "\n", &save); w && n < 16;
         w = strtok_r(NULL, "\n", &save))
        words[n++] = strcmp(w, "SHA") == 0 ? sha : strcmp(w, "SIZE") == 0 ? size_word : w;
    words[n] = NULL;
    if (n > 0 && strcmp(words[0], "start") != 0 && strcmp(words[0], "bucket") != 0) {
        dg_remote_node_req req = {.cache = g_cache, .argc = n, .argv = words, .in_fd = fd};
        char *answer = NULL;
        dg_remote_failure f = DG_REMOTE_OK;
        dg_status st = dg_remote_node(ctx, &req, &answer, &f);
        if (st == DG_OK && answer)
            check_answer(words[0], answer);
        if (st != DG_OK && (answer || f == DG_REMOTE_OK))
            abort();
        dg_free(answer);
        only_cache();
    }
    close(fd);
    dg_ctx_free(ctx);
    fuzz_parts_free(&in);
    return 0;
}
