/* Runs a program without a shell, with a time limit, capturing its stdout. */
#include "env/proc_run.h"

#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Sleeps for ms milliseconds (shortened by signals, which is harmless here). */
static void nap_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* A pipe whose ends are close-on-exec and do not sit on fds 0-2. */
static int make_pipe(int fds[2])
{
    int raw[2];
#ifdef __linux__
    if (pipe2(raw, O_CLOEXEC) != 0)
        return -1;
#else
    if (pipe(raw) != 0)
        return -1;
    fcntl(raw[0], F_SETFD, FD_CLOEXEC);
    fcntl(raw[1], F_SETFD, FD_CLOEXEC);
#endif
    for (int i = 0; i < 2; i++) {
        fds[i] = raw[i];
        if (raw[i] <= 2) {
            fds[i] = fcntl(raw[i], F_DUPFD_CLOEXEC, 3);
            close(raw[i]);
        }
    }
    if (fds[0] < 0 || fds[1] < 0) {
        if (fds[0] >= 0)
            close(fds[0]);
        if (fds[1] >= 0)
            close(fds[1]);
        return -1;
    }
    return 0;
}

/* Decodes a wait status into the caller's exit code and signal. */
static void decode_status(int st, int *exit_status, int *term_signal)
{
    if (WIFEXITED(st)) {
        *exit_status = WEXITSTATUS(st);
        *term_signal = 0;
    } else if (WIFSIGNALED(st)) {
        *exit_status = -1;
        *term_signal = WTERMSIG(st);
    }
}

dg_status dg_run_capture(const char *const argv[], double timeout_s, char **out, size_t max_out,
                         int *exit_status, int *term_signal)
{
    int xs_local, sig_local;
    if (!exit_status)
        exit_status = &xs_local;
    if (!term_signal)
        term_signal = &sig_local;
    *exit_status = -1;
    *term_signal = 0;
    if (out)
        *out = NULL;
    if (!argv || !argv[0] || !argv[0][0])
        return DG_ERR_USAGE;

    int fds[2];
    if (make_pipe(fds) != 0)
        return DG_ERR_IO;

    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc != 0) {
        close(fds[0]);
        close(fds[1]);
        errno = rc;
        return rc == ENOMEM ? DG_ERR_NOMEM : DG_ERR_IO;
    }
    rc = posix_spawnattr_init(&attr);
    if (rc != 0) {
        posix_spawn_file_actions_destroy(&fa);
        close(fds[0]);
        close(fds[1]);
        errno = rc;
        return rc == ENOMEM ? DG_ERR_NOMEM : DG_ERR_IO;
    }
    if (!rc)
        rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (!rc)
        rc = posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    if (!rc)
        rc = posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    if (!rc)
        rc = dg_spawnattr_isolate(&attr);
    pid_t pid = -1;
    if (!rc)
        rc = posix_spawnp(&pid, argv[0], &fa, &attr, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        *exit_status = 127;
        errno = rc;
        if (rc == ENOMEM)
            return DG_ERR_NOMEM;
        return (rc == ENOENT || rc == ENOTDIR) ? DG_ERR_NOT_FOUND : DG_ERR_IO;
    }

    int fl = fcntl(fds[0], F_GETFL);
    if (fl >= 0)
        fcntl(fds[0], F_SETFL, fl | O_NONBLOCK);

    dg_capbuf b = {.cap = max_out};
    double deadline = dg_now() + (timeout_s > 0 ? timeout_s : 0);
    bool eof = false, reaped = false, timed_out = false;
    int st = 0, wait_errno = 0;
    for (;;) {
        double left = deadline - dg_now();
        int slice = left <= 0 ? 0 : left < 0.05 ? (int)(left * 1000) + 1 : 50;
        if (!eof) {
            struct pollfd p = {fds[0], POLLIN, 0};
            int pr = poll(&p, 1, slice);
            if (pr > 0)
                eof = dg_capbuf_drain(fds[0], &b);
        }
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR)) {
            /* Ended (or cannot be waited for, e.g. SIGCHLD ignored): take
             * what is buffered, but do not wait for grandchildren holding
             * the pipe open. */
            if (w < 0)
                wait_errno = errno;
            reaped = true;
            if (!eof)
                dg_capbuf_drain(fds[0], &b);
            break;
        }
        if (dg_now() >= deadline) {
            timed_out = true;
            break;
        }
        if (eof)
            nap_ms(slice < 5 ? (slice ? slice : 1) : 5);
    }
    if (timed_out) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
        }
        if (!eof)
            dg_capbuf_drain(fds[0], &b);
    }
    close(fds[0]);

    if (b.nomem) {
        dg_free(b.data);
        errno = ENOMEM;
        return DG_ERR_NOMEM;
    }
    if (!b.data) {
        b.data = dg_malloc(1);
        if (!b.data) {
            errno = ENOMEM;
            return DG_ERR_NOMEM;
        }
    }
    b.data[b.len] = '\0';
    if (out)
        *out = b.data;
    else
        dg_free(b.data);
    if (timed_out) {
        *exit_status = -1;
        *term_signal = SIGKILL;
        return DG_ERR_TIMEOUT;
    }
    if (reaped && !wait_errno)
        decode_status(st, exit_status, term_signal);
    return DG_OK;
}
