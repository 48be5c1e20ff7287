/* Starting the supervised program: no shell, its own process group, the
 * events pipe on fd 3 and DEVGATE_EVENTS_FD=3 in its environment, and tied to
 * the supervisor: on Linux the child asks for SIGKILL when its parent dies
 * (PR_SET_PDEATHSIG), so a kill -9 of devgate does not leave it running.
 * posix_spawn cannot set that, so the process runner's fork mode starts it. */
#include "supervise/supervise.h"

#include "core/proc.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#define STR_(x) #x
#define STR(x) STR_(x)

const char **dg_spawn_edits(const char *const env_edits[])
{
    size_t ne = 0;
    while (env_edits && env_edits[ne])
        ne++;
    const char **edits = dg_malloc((ne + 4) * sizeof *edits);
    if (!edits)
        return NULL;
    size_t k = 0;
    /* DEVGATE_EVENTS_FD first, so the caller's edits can replace or drop it. */
    edits[k++] = "DEVGATE_EVENTS_FD=" STR(DG_EVENTS_FD);
    /* A team ledger URI with its password, and where devgate reads the
     * password, are devgate's, not the program's. */
    if (dg_has_secret(getenv("DEVGATE_LEDGER")))
        edits[k++] = "DEVGATE_LEDGER";
    if (getenv("DEVGATE_LEDGER_PASSWORD_FILE"))
        edits[k++] = "DEVGATE_LEDGER_PASSWORD_FILE";
    for (size_t i = 0; i < ne; i++)
        edits[k++] = env_edits[i];
    edits[k] = NULL;
    return edits;
}

int dg_spawn_child(const char *const argv[], const char *const env_edits[], bool stdout_to_stderr,
                   pid_t *pid, int *events_fd)
{
    return dg_spawn_child_limited(argv, env_edits, stdout_to_stderr, 0, pid, events_fd);
}

int dg_spawn_child_limited(const char *const argv[], const char *const env_edits[],
                           bool stdout_to_stderr, size_t as_limit, pid_t *pid, int *events_fd)
{
    return dg_spawn_child_io(argv, env_edits, stdout_to_stderr, -1, -1, as_limit, pid, events_fd);
}

int dg_spawn_child_io(const char *const argv[], const char *const env_edits[],
                      bool stdout_to_stderr, int out_fd, int err_fd, size_t as_limit, pid_t *pid,
                      int *events_fd)
{
    *pid = -1;
    *events_fd = -1;
    if (!argv || !argv[0] || !argv[0][0])
        return ENOENT;
    const char **edits = dg_spawn_edits(env_edits);
    if (!edits)
        return ENOMEM;
    dg_proc_opts o = {
        .argv = argv,
        .env_edits = edits,
        .out = out_fd >= 0        ? (dg_proc_io){.kind = DG_PROC_FD, .fd = out_fd}
               : stdout_to_stderr ? (dg_proc_io){.kind = DG_PROC_FD, .fd = 2}
                                  : (dg_proc_io){.kind = DG_PROC_INHERIT},
        .err = err_fd >= 0 ? (dg_proc_io){.kind = DG_PROC_FD, .fd = err_fd}
                           : (dg_proc_io){.kind = DG_PROC_INHERIT},
        .extra = {{.child_fd = DG_EVENTS_FD, .io = {.kind = DG_PROC_PIPE}}},
        .n_extra = 1,
        .die_with_parent = true,
        .as_limit = as_limit,
    };
    dg_proc *p = NULL;
    int rc = dg_proc_start(NULL, &o, &p) == DG_OK ? 0 : errno;
    dg_free(edits);
    if (rc)
        return rc;
    *pid = dg_proc_pid(p);
    *events_fd = dg_proc_fd(p, DG_EVENTS_FD);
    dg_proc_release(p); /* the run loop waits for it and reads the pipe */
    return 0;
}
