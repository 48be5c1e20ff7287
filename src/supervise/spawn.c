/* Starting the supervised program: no shell, its own process group, the
 * events pipe on fd 3 and DEVGATE_EVENTS_FD=3 in its environment. */
#include "supervise/supervise.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

int dg_spawn_child(const char *const argv[], const char *const env_edits[], bool stdout_to_stderr,
                   pid_t *pid, int *events_fd)
{
    *pid = -1;
    *events_fd = -1;
    if (!argv || !argv[0] || !argv[0][0])
        return ENOENT;
    int fds[2];
    int rc = make_pipe(fds);
    if (rc)
        return rc;
    char **env = child_env(env_edits);
    if (!env) {
        close(fds[0]);
        close(fds[1]);
        return ENOMEM;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    rc = posix_spawn_file_actions_init(&fa);
    bool fa_ok = rc == 0, attr_ok = false;
    if (!rc)
        rc = posix_spawnattr_init(&attr), attr_ok = rc == 0;
    if (!rc)
        rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (!rc && stdout_to_stderr)
        rc = posix_spawn_file_actions_adddup2(&fa, 2, 1);
    if (!rc) /* fds[1] >= 10, so dup2 onto 3 gives a descriptor without close-on-exec */
        rc = posix_spawn_file_actions_adddup2(&fa, fds[1], DG_EVENTS_FD);
    if (!rc)
        rc = dg_spawnattr_isolate(&attr);
    if (!rc)
        rc = posix_spawnp(pid, argv[0], &fa, &attr, (char *const *)argv, env);
    if (fa_ok)
        posix_spawn_file_actions_destroy(&fa);
    if (attr_ok)
        posix_spawnattr_destroy(&attr);
    dg_free(env);
    close(fds[1]);
    if (rc) {
        close(fds[0]);
        *pid = -1;
        return rc;
    }
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
