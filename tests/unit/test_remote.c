/* The remote path's pieces: dg_shell_quote attacked with quotes, ;, $(),
 * backquotes, globs and newlines (a real /bin/sh splits the line back and
 * must give the same words, running nothing); dg_sha256_file against known
 * digests. */
#include "check.h"
#include "devgate.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_tmp[512];

/* Runs `sh -c "printf '%s\0' LINE"` and returns its output (free()) and size. */
static char *sh_words(const char *line, size_t *len)
{
    char *script = NULL;
    if (asprintf(&script, "cd '%s' && printf '%%s\\0' %s", g_tmp, line) < 0)
        return NULL;
    int p[2];
    if (pipe(p) != 0) {
        free(script);
        return NULL;
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        execl("/bin/sh", "sh", "-c", script, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    free(script);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    ssize_t got;
    while (buf && (got = read(p[0], buf + n, cap - n)) > 0)
        n += (size_t)got;
    close(p[0]);
    int ws;
    waitpid(pid, &ws, 0);
    *len = n;
    return buf;
}

/* The words joined with NULs, as printf '%s\0' writes them. */
static size_t joined(const char *const *w, char *out)
{
    size_t n = 0;
    for (; *w; w++) {
        size_t l = strlen(*w);
        memcpy(out + n, *w, l + 1);
        n += l + 1;
    }
    return n;
}

static void test_quote(void)
{
    char mark[600];
    snprintf(mark, sizeof mark, "%s/ran", g_tmp);
    static const char *const attacks[][8] = {
        {"plain", NULL},
        {"a b", "  two  spaces ", "\ttab", NULL},
        {"it's", "'", "''", "'\\''", "a'b\"c", NULL},
        {"x; touch ran", "$(touch ran)", "`touch ran`", "&& touch ran", "| touch ran", NULL},
        {"l1\nl2", "\n", "line\n; touch ran\n", NULL},
        {"*", "?", "[a-z]", "~", "$HOME", "${IFS}", NULL},
        {"", "--", "-n", "\\", "\"", "!", NULL},
        {"\xc3\xa9t\xc3\xa9", "\x01\x7f", "#comment", NULL},
    };
    for (size_t i = 0; i < sizeof attacks / sizeof attacks[0]; i++) {
        char *line = dg_shell_quote(attacks[i]);
        CHECK(line != NULL);
        if (!line)
            continue;
        size_t n = 0;
        char *got = sh_words(line, &n);
        char want[4096];
        size_t wn = joined(attacks[i], want);
        CHECK_MSG(got && n == wn && memcmp(got, want, n) == 0,
                  "attack %zu: the shell split %s differently", i, line);
        free(got);
        dg_string_free(line);
    }
    CHECK_MSG(access(mark, F_OK) != 0, "the shell ran part of an argument");
    /* the empty list and NULL */
    const char *none[] = {NULL};
    char *e = dg_shell_quote(none);
    CHECK(e && e[0] == '\0');
    dg_string_free(e);
    CHECK(dg_shell_quote(NULL) == NULL);
}

static void test_sha256(void)
{
    dg_ctx *ctx = dg_ctx_new();
    char path[600], hex[65];
    uint64_t size = 1;
    snprintf(path, sizeof path, "%s/empty", g_tmp);
    close(open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600));
    CHECK(dg_sha256_file(ctx, path, hex, &size) == DG_OK);
    CHECK_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(size == 0);
    snprintf(path, sizeof path, "%s/abc", g_tmp);
    FILE *f = fopen(path, "wb");
    fputs("abc", f);
    fclose(f);
    CHECK(dg_sha256_file(ctx, path, hex, &size) == DG_OK);
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(size == 3);
    /* more than one read's worth: 1 MiB + 1 of 'a' */
    snprintf(path, sizeof path, "%s/big", g_tmp);
    f = fopen(path, "wb");
    for (int i = 0; i < (1 << 20) + 1; i++)
        fputc('a', f);
    fclose(f);
    CHECK(dg_sha256_file(ctx, path, hex, &size) == DG_OK);
    CHECK(size == (1u << 20) + 1);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "sha256sum '%s' | cut -c1-64", path);
    FILE *p = popen(cmd, "r");
    char want[80] = "";
    if (p) {
        if (!fgets(want, sizeof want, p))
            want[0] = '\0';
        pclose(p);
    }
    want[64] = '\0';
    CHECK_STR(hex, want);
    snprintf(path, sizeof path, "%s/none", g_tmp);
    CHECK(dg_sha256_file(ctx, path, hex, NULL) == DG_ERR_IO);
    CHECK(strstr(dg_errmsg(ctx), "none") != NULL);
    dg_ctx_free(ctx);
}

int main(void)
{
    const char *tmpdir = getenv("TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/dg-remote-XXXXXX", tmpdir && tmpdir[0] ? tmpdir : "/tmp");
    if (!mkdtemp(g_tmp))
        check_skip("cannot create a temporary folder");
    test_quote();
    test_sha256();
    char rm[600];
    snprintf(rm, sizeof rm, "rm -rf '%s'", g_tmp);
    if (system(rm) != 0)
        fprintf(stderr, "note: could not remove %s\n", g_tmp);
    CHECK_DONE();
}
