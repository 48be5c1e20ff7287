/* The process runner (core/proc.h): exit and signal decoding, capped captures,
 * stdin feeding, extra descriptors, environment edits, timeouts that take the
 * whole group down (TERM, then KILL after the grace), cancellation, fork mode,
 * and the message for a program that is not there. */
#include "check.h"
#include "core/proc.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* True when /proc says pid is gone or a zombie. */
static bool dead_or_zombie(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    char *s = dg_read_file(path, 4096, NULL);
    if (!s)
        return true;
    char *rp = strrchr(s, ')');
    bool z = rp && (rp[2] == 'Z' || rp[2] == 'X');
    dg_free(s);
    return z;
}

static bool gone_soon(pid_t pid)
{
    for (int i = 0; i < 150; i++) {
        if (dead_or_zombie(pid))
            return true;
        usleep(20000);
    }
    return false;
}

static void test_exit_and_signal(void)
{
    dg_proc_result r;
    const char *ex3[] = {"sh", "-c", "echo out; echo err >&2; exit 3", NULL};
    dg_proc_opts o = {.argv = ex3,
                      .out = {.kind = DG_PROC_CAPTURE, .cap = 100},
                      .err = {.kind = DG_PROC_CAPTURE, .cap = 100}};
    CHECK(dg_proc_run(NULL, &o, &r) == DG_OK);
    CHECK(r.started && r.exit_code == 3 && r.sig == 0 && !r.timed_out);
    CHECK(r.out.data && strcmp(r.out.data, "out\n") == 0);
    CHECK(r.err.data && strcmp(r.err.data, "err\n") == 0);
    char d[128];
    CHECK_STR(dg_proc_describe(&r, d, sizeof d), "exited with status 3");
    dg_proc_result_free(&r);

    const char *killed[] = {"sh", "-c", "kill -SEGV $$", NULL};
    dg_proc_opts k = {.argv = killed};
    CHECK(dg_proc_run(NULL, &k, &r) == DG_OK);
    CHECK(r.exit_code == -1 && r.sig == SIGSEGV);
    CHECK(strstr(dg_proc_describe(&r, d, sizeof d), "killed by signal 11") != NULL);
    dg_proc_result_free(&r);

    /* SIGPIPE is ignored here (main), and at its default in the child. */
    const char *pipe_self[] = {"sh", "-c", "kill -PIPE $$; exit 0", NULL};
    k.argv = pipe_self;
    CHECK(dg_proc_run(NULL, &k, &r) == DG_OK);
    CHECK(r.sig == SIGPIPE);
    dg_proc_result_free(&r);
}

static void test_cap(void)
{
    dg_proc_result r;
    const char *big[] = {"sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x; echo tail >&2", NULL};
    dg_proc_opts o = {.argv = big,
                      .out = {.kind = DG_PROC_CAPTURE, .cap = 1000},
                      .err = {.kind = DG_PROC_CAPTURE, .cap = 1000}};
    CHECK(dg_proc_run(NULL, &o, &r) == DG_OK);
    CHECK(r.out.len == 1000 && r.out.truncated);
    CHECK(r.exit_code == 0); /* drained past the cap: the writer never blocked */
    CHECK(!r.err.truncated && r.err.data && strcmp(r.err.data, "tail\n") == 0);
    dg_proc_result_free(&r);
}

static void test_stdin(void)
{
    dg_proc_result r;
    const char *wc[] = {"wc", "-c", NULL};
    dg_proc_opts o = {.argv = wc,
                      .in = {.kind = DG_PROC_BUFFER, .data = "hello", .len = 5},
                      .out = {.kind = DG_PROC_CAPTURE}};
    CHECK(dg_proc_run(NULL, &o, &r) == DG_OK);
    CHECK(r.out.data && atoi(r.out.data) == 5);
    dg_proc_result_free(&r);

    /* Larger than a pipe holds: fed from a file, nothing waits on the child. */
    size_t n = 300000;
    char *buf = malloc(n);
    memset(buf, 'y', n);
    o.in.data = buf;
    o.in.len = n;
    CHECK(dg_proc_run(NULL, &o, &r) == DG_OK);
    CHECK(r.out.data && (size_t)atol(r.out.data) == n);
    dg_proc_result_free(&r);
    free(buf);

    /* The default stdin is /dev/null: cat ends at once. */
    const char *cat[] = {"cat", NULL};
    dg_proc_opts c = {.argv = cat, .out = {.kind = DG_PROC_CAPTURE}, .timeout_s = 10};
    CHECK(dg_proc_run(NULL, &c, &r) == DG_OK);
    CHECK(r.out.len == 0 && r.exit_code == 0);
    dg_proc_result_free(&r);
}

static void test_extra_and_env(void)
{
    dg_proc_result r;
    const char *sh[] = {"sh", "-c", "echo \"$DG_T_A:${DG_T_B-unset}\" >&3", NULL};
    const char *edits[] = {"DG_T_A=first", "DG_T_B", "DG_T_A=second", NULL};
    setenv("DG_T_B", "inherited", 1);
    dg_proc_opts o = {.argv = sh,
                      .env_edits = edits,
                      .extra = {{.child_fd = 3, .io = {.kind = DG_PROC_CAPTURE}}},
                      .n_extra = 1};
    CHECK(dg_proc_run(NULL, &o, &r) == DG_OK);
    CHECK(r.extra[0].data && strcmp(r.extra[0].data, "second:unset\n") == 0);
    dg_proc_result_free(&r);
    unsetenv("DG_T_B");

    /* A pipe the caller reads itself, after releasing the handle. */
    const char *wr[] = {"sh", "-c", "echo piped >&5", NULL};
    dg_proc_opts p = {
        .argv = wr, .extra = {{.child_fd = 5, .io = {.kind = DG_PROC_PIPE}}}, .n_extra = 1};
    dg_proc *h = NULL;
    CHECK(dg_proc_start(NULL, &p, &h) == DG_OK);
    int fd = dg_proc_fd(h, 5);
    pid_t pid = dg_proc_pid(h);
    CHECK(fd >= 3 && pid > 0);
    dg_proc_release(h);
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char got[32] = {0};
    ssize_t k = read(fd, got, sizeof got - 1);
    CHECK(k == 6 && strcmp(got, "piped\n") == 0);
    close(fd);
}

static void test_timeout_group(void)
{
    dg_proc_result r;
    /* The grandchild prints its pid, then both sleep: the limit takes both. */
    const char *group[] = {"sh", "-c", "sleep 30 & echo $!; wait", NULL};
    dg_proc_opts o = {.argv = group, .out = {.kind = DG_PROC_CAPTURE}, .timeout_s = 0.5};
    double t0 = dg_now();
    CHECK(dg_proc_run(NULL, &o, &r) == DG_ERR_TIMEOUT);
    double took = dg_now() - t0;
    CHECK_MSG(took >= 0.45 && took < 5, "took %.2f s", took);
    CHECK(r.timed_out && r.sig == SIGKILL);
    long gpid = r.out.data ? strtol(r.out.data, NULL, 10) : 0;
    CHECK(gpid > 0);
    if (gpid > 0)
        CHECK_MSG(gone_soon((pid_t)gpid), "grandchild %ld survived the timeout", gpid);
    dg_proc_result_free(&r);

    /* TERM first: a child that catches it exits on its own terms. */
    const char *polite[] = {"sh", "-c", "trap 'echo bye; exit 7' TERM; sleep 30 & wait", NULL};
    dg_proc_opts t = {
        .argv = polite, .out = {.kind = DG_PROC_CAPTURE}, .timeout_s = 0.5, .term_grace_s = 5};
    CHECK(dg_proc_run(NULL, &t, &r) == DG_ERR_TIMEOUT);
    CHECK(r.timed_out && r.exit_code == 7 && r.sig == 0);
    CHECK(r.out.data && strstr(r.out.data, "bye") != NULL);
    dg_proc_result_free(&r);

    /* One that ignores TERM gets KILL after the grace. */
    const char *stubborn[] = {"sh", "-c", "trap '' TERM; while :; do sleep 0.05; done", NULL};
    dg_proc_opts s = {.argv = stubborn, .timeout_s = 0.3, .term_grace_s = 0.4};
    t0 = dg_now();
    CHECK(dg_proc_run(NULL, &s, &r) == DG_ERR_TIMEOUT);
    took = dg_now() - t0;
    CHECK(r.sig == SIGKILL);
    CHECK_MSG(took >= 0.65 && took < 5, "took %.2f s", took);
    dg_proc_result_free(&r);

    /* A stray left in the group is killed when the child ends; the child's
     * end is not held up by the stray keeping stdout open. */
    const char *stray[] = {"sh", "-c", "sleep 30 & echo $!", NULL};
    dg_proc_opts st = {.argv = stray, .out = {.kind = DG_PROC_CAPTURE}, .timeout_s = 20};
    t0 = dg_now();
    CHECK(dg_proc_run(NULL, &st, &r) == DG_OK);
    CHECK(dg_now() - t0 < 5);
    gpid = r.out.data ? strtol(r.out.data, NULL, 10) : 0;
    CHECK(gpid > 0 && gone_soon((pid_t)gpid));
    dg_proc_result_free(&r);
}

static volatile sig_atomic_t cancel_flag;

static void test_cancel(void)
{
    dg_proc_result r;
    const char *sl[] = {"sleep", "30", NULL};
    cancel_flag = 0;
    dg_proc_opts o = {.argv = sl, .cancel = &cancel_flag, .timeout_s = 30};
    dg_proc *h = NULL;
    CHECK(dg_proc_start(NULL, &o, &h) == DG_OK);
    cancel_flag = 1;
    double t0 = dg_now();
    CHECK(dg_proc_wait(NULL, h, &r) == DG_ERR_INTERRUPTED);
    CHECK(r.cancelled && !r.timed_out && dg_now() - t0 < 5);
    dg_proc_free(h);
    dg_proc_result_free(&r);
}

static void test_missing(void)
{
    dg_ctx *ctx = dg_ctx_new();
    dg_proc_result r;
    const char *nope[] = {"devgate-no-such-program-xyz", NULL};
    dg_proc_opts o = {.argv = nope};
    CHECK(dg_proc_run(ctx, &o, &r) == DG_ERR_NOT_FOUND);
    CHECK(!r.started && r.spawn_errno == ENOENT);
    CHECK_MSG(strstr(dg_errmsg(ctx), "devgate-no-such-program-xyz") &&
                  strstr(dg_errmsg(ctx), "not found in PATH"),
              "%s", dg_errmsg(ctx));
    CHECK(strstr(r.error, "not found in PATH") != NULL);

    const char *abs[] = {"/nonexistent/dir/prog", NULL};
    o.argv = abs;
    o.as_limit = (size_t)1 << 34; /* fork mode reports the same way */
    CHECK(dg_proc_run(ctx, &o, &r) == DG_ERR_NOT_FOUND);
    CHECK(strstr(r.error, "/nonexistent/dir/prog") != NULL);

    const char *empty[] = {NULL};
    o.argv = empty;
    CHECK(dg_proc_run(ctx, &o, &r) == DG_ERR_USAGE);
    dg_ctx_free(ctx);
}

static void test_fork_mode(void)
{
    dg_proc_result r;
    /* The address-space limit reaches the child; stdout captured as in spawn mode. */
    const char *sh[] = {"sh", "-c", "ulimit -v; echo $$ > /dev/null; exit 4", NULL};
    dg_proc_opts o = {.argv = sh,
                      .out = {.kind = DG_PROC_CAPTURE},
                      .as_limit = (size_t)1 << 32,
                      .die_with_parent = true};
    CHECK(dg_proc_run(NULL, &o, &r) == DG_OK);
    CHECK(r.exit_code == 4);
    CHECK_MSG(r.out.data && atol(r.out.data) == (1L << 32) / 1024, "%s",
              r.out.data ? r.out.data : "(none)");
    dg_proc_result_free(&r);

    /* Its own process group, as in spawn mode. */
    const char *pg[] = {"sh", "-c", "ps -o pgid= -p $$", NULL};
    o.argv = pg;
    dg_proc *h = NULL;
    CHECK(dg_proc_start(NULL, &o, &h) == DG_OK);
    pid_t pid = dg_proc_pid(h);
    CHECK(dg_proc_wait(NULL, h, &r) == DG_OK);
    CHECK(r.out.data && atol(r.out.data) == (long)pid);
    dg_proc_free(h);
    dg_proc_result_free(&r);
}

int main(void)
{
    /* The parent ignoring signals does not pass that on. */
    signal(SIGPIPE, SIG_IGN);
    test_exit_and_signal();
    test_cap();
    test_stdin();
    test_extra_and_env();
    test_timeout_group();
    test_cancel();
    test_missing();
    test_fork_mode();
    CHECK_DONE();
}
