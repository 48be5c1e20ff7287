/* Starting the supervised program: no shell, its own process group, the
 * events pipe on fd 3 and DEVGATE_EVENTS_FD=3 in its environment, and tied to
 * the supervisor: on Linux the child asks for SIGKILL when its parent dies
 * (PR_SET_PDEATHSIG), so a kill -9 of devgate does not leave it running.
 * posix_spawn cannot set that, so the child is forked and execs itself; the
 * code between fork and exec uses async-signal-safe calls only. */
#include "supervise/supervise.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

extern char **environ;

/* A close-on-exec pipe whose ends sit at fd 10 or above (never 0-3). */
static int make_pipe(int fds[2])
{
    int raw[2];
    if (pipe2(raw, O_CLOEXEC) != 0)
        return errno;
    int err = 0;
    for (int i = 0; i < 2; i++) {
        fds[i] = fcntl(raw[i], F_DUPFD_CLOEXEC, 10);
        if (fds[i] < 0)
            err = errno;
        close(raw[i]);
    }
    if (err) {
        for (int i = 0; i < 2; i++)
            if (fds[i] >= 0)
                close(fds[i]);
        return err;
    }
    return 0;
}

/* Length of the name of an environment entry "NAME=VALUE" (or "NAME"). */
static size_t env_name_len(const char *e)
{
    const char *eq = strchr(e, '=');
    return eq ? (size_t)(eq - e) : strlen(e);
}

/* True when entry e names a variable that edits sets or removes. */
static bool edited(const char *e, const char *const edits[])
{
    size_t n = env_name_len(e);
    for (size_t i = 0; edits && edits[i]; i++)
        if (env_name_len(edits[i]) == n && strncmp(edits[i], e, n) == 0)
            return true;
    return false;
}

/* environ without DEVGATE_EVENTS_FD and the edited names, plus
 * DEVGATE_EVENTS_FD=3 (unless removed) and the edits' NAME=VALUE entries;
 * dg_malloc'd array of borrowed strings (one of them static). */
static char **child_env(const char *const edits[])
{
    static char fdvar[32];
    snprintf(fdvar, sizeof fdvar, "DEVGATE_EVENTS_FD=%d", DG_EVENTS_FD);
    size_t n = 0, ne = 0;
    while (environ && environ[n])
        n++;
    while (edits && edits[ne])
        ne++;
    char **env = dg_malloc((n + ne + 2) * sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "DEVGATE_EVENTS_FD=", 18) != 0 && !edited(environ[i], edits))
            env[k++] = environ[i];
    if (!edited("DEVGATE_EVENTS_FD", edits))
        env[k++] = fdvar;
    for (size_t i = 0; i < ne; i++)
        if (strchr(edits[i], '='))
            env[k++] = (char *)edits[i];
    env[k] = NULL;
    return env;
}

/* Writes errno to the error pipe and ends the child (async-signal-safe). */
static void child_fail(int errfd, int err)
{
    ssize_t w;
    do
        w = write(errfd, &err, sizeof err);
    while (w < 0 && errno == EINTR);
    _exit(127);
}

/* Moves fd onto target (clearing close-on-exec); errno on failure. */
static int child_dup(int fd, int target)
{
    while (dup2(fd, target) < 0)
        if (errno != EINTR)
            return errno;
    return 0;
}

/* The child between fork and exec: death signal, own process group, signals
 * at their defaults and unblocked, fds 0/1/3, then execve along PATH (as
 * execvp does, without its allocation). Never returns. */
static void child_exec(const char *const argv[], char *const env[], const char *path_env,
                       bool stdout_to_stderr, size_t as_limit, int events_wr, int errfd,
                       pid_t parent)
{
    if (as_limit) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_AS, &rl) != 0)
            child_fail(errfd, errno);
        rl.rlim_cur = (rlim_t)as_limit;
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_cur > rl.rlim_max)
            rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            child_fail(errfd, errno);
    }
#ifdef PR_SET_PDEATHSIG
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        child_fail(errfd, errno);
    if (getppid() != parent) /* the supervisor died before the call took hold */
        _exit(127);
#else
    (void)parent;
#endif
    if (setpgid(0, 0) != 0)
        child_fail(errfd, errno);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            sigaction(s, &dfl, NULL); /* fails harmlessly for numbers libc reserves */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (nul < 0)
        child_fail(errfd, errno);
    int err = child_dup(nul, 0);
    if (!err && stdout_to_stderr)
        err = child_dup(2, 1);
    if (!err) /* events_wr >= 10, so the copy on 3 is a new descriptor without close-on-exec */
        err = child_dup(events_wr, DG_EVENTS_FD);
    if (err)
        child_fail(errfd, err);
    const char *file = argv[0];
    if (strchr(file, '/')) {
        execve(file, (char *const *)argv, env);
        child_fail(errfd, errno);
    }
    const char *p = path_env && path_env[0] ? path_env : "/bin:/usr/bin";
    size_t fl = strlen(file);
    int saved = ENOENT;
    char buf[4096];
    for (;;) {
        const char *colon = strchr(p, ':');
        size_t dl = colon ? (size_t)(colon - p) : strlen(p);
        if (dl + 1 + fl + 1 <= sizeof buf) {
            size_t k = 0;
            if (dl == 0) {
                buf[k++] = '.'; /* an empty element is the current directory */
            } else {
                memcpy(buf, p, dl);
                k = dl;
            }
            buf[k++] = '/';
            memcpy(buf + k, file, fl + 1);
            execve(buf, (char *const *)argv, env);
            if (errno == EACCES)
                saved = EACCES;
            else if (errno != ENOENT && errno != ENOTDIR && errno != ENAMETOOLONG)
                child_fail(errfd, errno);
        }
        if (!colon)
            break;
        p = colon + 1;
    }
    child_fail(errfd, saved);
}

int dg_spawn_child(const char *const argv[], const char *const env_edits[], bool stdout_to_stderr,
                   pid_t *pid, int *events_fd)
{
    return dg_spawn_child_limited(argv, env_edits, stdout_to_stderr, 0, pid, events_fd);
}

int dg_spawn_child_limited(const char *const argv[], const char *const env_edits[],
                           bool stdout_to_stderr, size_t as_limit, pid_t *pid, int *events_fd)
{
    *pid = -1;
    *events_fd = -1;
    if (!argv || !argv[0] || !argv[0][0])
        return ENOENT;
    int fds[2], errp[2];
    int rc = make_pipe(fds);
    if (rc)
        return rc;
    if ((rc = make_pipe(errp)) != 0) {
        close(fds[0]);
        close(fds[1]);
        return rc;
    }
    char **env = child_env(env_edits);
    if (!env) {
        close(fds[0]);
        close(fds[1]);
        close(errp[0]);
        close(errp[1]);
        return ENOMEM;
    }
    const char *path_env = getenv("PATH");
    pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0)
        child_exec(argv, env, path_env, stdout_to_stderr, as_limit, fds[1], errp[1], parent);
    rc = child < 0 ? errno : 0;
    if (child > 0)
        setpgid(child, child); /* also here, so the group exists before fork returns to us */
    dg_free(env);
    close(fds[1]);
    close(errp[1]);
    if (!rc) {
        /* The error pipe closes on a successful exec, or carries the errno. */
        int child_err = 0;
        ssize_t got;
        do
            got = read(errp[0], &child_err, sizeof child_err);
        while (got < 0 && errno == EINTR);
        if (got == (ssize_t)sizeof child_err) {
            rc = child_err ? child_err : EIO;
            while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
                ;
        }
    }
    close(errp[0]);
    if (rc) {
        close(fds[0]);
        *pid = -1;
        return rc;
    }
    *pid = child;
    int fl = fcntl(fds[0], F_GETFL);
    if (fl >= 0)
        fcntl(fds[0], F_SETFL, fl | O_NONBLOCK);
    *events_fd = fds[0];
    return 0;
}

const char *dg_signal_name(int sig, char *tmp, size_t len)
{
    static const struct {
        int sig;
        const char *name;
    } names[] = {
        {SIGSEGV, "SIGSEGV"}, {SIGKILL, "SIGKILL"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},
        {SIGFPE, "SIGFPE"},   {SIGILL, "SIGILL"},   {SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"},
        {SIGHUP, "SIGHUP"},   {SIGPIPE, "SIGPIPE"}, {SIGTRAP, "SIGTRAP"}, {SIGSYS, "SIGSYS"},
        {SIGXCPU, "SIGXCPU"}, {SIGQUIT, "SIGQUIT"}, {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"},
        {SIGALRM, "SIGALRM"}, {SIGXFSZ, "SIGXFSZ"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].sig == sig)
            return names[i].name;
    snprintf(tmp, len, "signal %d", sig);
    return tmp;
}
