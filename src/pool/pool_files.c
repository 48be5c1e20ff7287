/* What the pool's calls share (pool_int.h): reads and writes of the shared
 * task folders that never follow a symlink and cap every file, Slurm's tools
 * run through the process runner, and the pool folder's path. */
#include "pool/pool_int.h"

#include "core/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- shared helpers (pool_int.h) ------------------------------------------------ */

bool dg_pool_job_id_ok(const char *s)
{
    if (!s || !s[0] || strlen(s) > 20)
        return false;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

int dg_pool_open_dir(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid()) {
        int e = errno ? errno : EPERM;
        close(fd);
        errno = st.st_uid != geteuid() ? EPERM : e;
        return -1;
    }
    return fd;
}

char *dg_pool_read_at(int dfd, const char *name, size_t max, size_t *len)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    if ((size_t)st.st_size > max) {
        close(fd);
        errno = EFBIG;
        return NULL;
    }
    dg_capbuf b = {.cap = max};
    bool ok = true;
    char chunk[65536];
    for (;;) {
        ssize_t got = read(fd, chunk, sizeof chunk);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            ok = false;
            break;
        }
        if (got == 0)
            break;
        dg_capbuf_add(&b, chunk, (size_t)got);
    }
    int e = errno;
    close(fd);
    if (!ok || b.nomem || b.truncated) {
        dg_free(b.data);
        errno = b.truncated ? EFBIG : b.nomem ? ENOMEM : e;
        return NULL;
    }
    if (!b.data && !(b.data = dg_calloc(1, 1)))
        return NULL;
    if (len)
        *len = b.len;
    return b.data;
}

cJSON *dg_pool_json_at(int dfd, const char *name, size_t max)
{
    char *t = dg_pool_read_at(dfd, name, max, NULL);
    cJSON *j = t ? cJSON_Parse(t) : NULL;
    dg_free(t);
    return j;
}

int dg_pool_write_new_at(int dfd, const char *name, const char *text)
{
    int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return errno;
    size_t n = strlen(text), done = 0;
    int err = 0;
    while (done < n) {
        ssize_t w = write(fd, text + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            err = errno ? errno : EIO;
            break;
        }
        done += (size_t)w;
    }
    if (close(fd) != 0 && !err)
        err = errno;
    return err;
}

void dg_pool_now(char *buf, size_t len)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* ---- Slurm's tools ---------------------------------------------------------- */

/* The last non-empty line of s into buf (cleaned). */
const char *dg_pool_last_line(const char *s, char *buf, size_t len)
{
    size_t n = s ? strlen(s) : 0;
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
        n--;
    size_t start = n;
    while (start && s[start - 1] != '\n')
        start--;
    char raw[512];
    snprintf(raw, sizeof raw, "%.*s", (int)(n - start), s ? s + start : "");
    dg_copy_clean(buf, len, raw);
    return buf;
}

/* Runs a Slurm tool (no shell, stdin /dev/null, both outputs captured at
 * 1 MiB, POOL_TOOL_TIMEOUT_S). DG_OK when it ran and exited 0 (*out its
 * stdout, dg_free); DG_ERR_UNAVAILABLE with the message "WHAT: ..." otherwise;
 * *tool_err (may be NULL) gets its stderr when it exited non-zero. */
dg_status dg_pool_run_tool(dg_ctx *ctx, const char *what, const char *const *argv, char **out,
                           char **tool_err)
{
    *out = NULL;
    if (tool_err)
        *tool_err = NULL;
    dg_proc_opts o = {.argv = argv,
                      .out = {.kind = DG_PROC_CAPTURE},
                      .err = {.kind = DG_PROC_CAPTURE},
                      .timeout_s = POOL_TOOL_TIMEOUT_S};
    dg_proc_result r;
    dg_status st = dg_proc_run(NULL, &o, &r);
    char line[512];
    dg_pool_last_line(r.err.data, line, sizeof line);
    if (!r.started) {
        st =
            r.spawn_errno == ENOENT
                ? dg_fail(ctx, DG_ERR_UNAVAILABLE,
                          "%s: %s not found: Slurm's client tools are not installed here "
                          "(Debian: apt-get install slurm-client), or not on PATH",
                          what, argv[0])
                : dg_fail(ctx, DG_ERR_UNAVAILABLE, "%s: cannot run %s: %s", what, argv[0], r.error);
    } else if (st == DG_ERR_TIMEOUT) {
        st = dg_fail(ctx, DG_ERR_UNAVAILABLE,
                     "%s: %s did not answer within %d s: is slurmctld up and SLURM_CONF right?",
                     what, argv[0], POOL_TOOL_TIMEOUT_S);
    } else if (st != DG_OK) {
        st = dg_fail(ctx, st, "%s: %s: %s", what, argv[0], dg_errmsg(ctx));
    } else if (r.exit_code != 0) {
        int code = r.sig ? 128 + r.sig : r.exit_code;
        st = dg_fail(ctx, DG_ERR_UNAVAILABLE, "%s: %s failed (exit %d): %s", what, argv[0], code,
                     line[0] ? line : "no message");
        if (tool_err) {
            *tool_err = r.err.data ? r.err.data : dg_calloc(1, 1);
            r.err.data = NULL;
        }
    } else {
        *out = r.out.data ? r.out.data : dg_calloc(1, 1);
        r.out.data = NULL;
        if (!*out)
            st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    }
    dg_proc_result_free(&r);
    return st;
}

/* ---- paths --------------------------------------------------------------------- */

/* The pool folder as an absolute path (created when create); NULL with a
 * message. */
char *dg_pool_root(dg_ctx *ctx, const char *given, bool create, const char *what)
{
    const char *d = given ? given : POOL_DEFAULT_DIR;
    if (strchr(d, '%') || strchr(d, '\n')) {
        char c[256];
        dg_copy_clean(c, sizeof c, d);
        dg_fail(ctx, DG_ERR_USAGE,
                "%s: --dir %s: a pool folder may not hold '%%' (Slurm's file name patterns) or "
                "a newline",
                what, c);
        return NULL;
    }
    if (create) {
        char buf[PATH_MAX];
        if (snprintf(buf, sizeof buf, "%s", d) >= (int)sizeof buf) {
            dg_fail(ctx, DG_ERR_USAGE, "%s: --dir is too long", what);
            return NULL;
        }
        for (char *p = buf + 1; *p; p++) {
            if (*p != '/')
                continue;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                break;
            *p = '/';
        }
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
            dg_fail(ctx, DG_ERR_IO, "%s: cannot create the pool folder %s: %s", what, d,
                    strerror(errno));
            return NULL;
        }
    }
    char *abs = realpath(d, NULL);
    if (abs) {
        char *r = dg_strdup(abs);
        free(abs);
        return r;
    }
    if (create) {
        dg_fail(ctx, DG_ERR_IO, "%s: %s: %s", what, d, strerror(errno));
        return NULL;
    }
    if (d[0] == '/') /* not there: keep the name for messages */
        return dg_strdup(d);
    char cwd[PATH_MAX];
    return getcwd(cwd, sizeof cwd) ? dg_asprintf("%s/%s", cwd, d) : NULL;
}
