/* The one process runner: a program started without a shell, in its own
 * process group with a clean signal mask and default dispositions, its
 * streams fed, captured (bounded), redirected or inherited, an optional
 * wall-clock limit after which the group gets TERM then KILL, and its end
 * decoded. Library-internal; nothing here prints or exits. */
#ifndef DG_PROC_H
#define DG_PROC_H

#include "core/core.h"

#include <signal.h>
#include <sys/types.h>

/* What one of the child's descriptors is connected to. */
typedef enum dg_proc_io_kind {
    DG_PROC_NULL = 0, /* /dev/null (the default) */
    DG_PROC_INHERIT,  /* the caller's descriptor of the same number */
    DG_PROC_CAPTURE,  /* (output) read into a buffer of at most cap bytes */
    DG_PROC_BUFFER,   /* (input) data/len fed in whole; the child sees EOF after it */
    DG_PROC_FD,       /* the caller's descriptor fd (borrowed: the caller closes it) */
    DG_PROC_PIPE,     /* a pipe whose other end the caller takes with dg_proc_fd */
} dg_proc_io_kind;

typedef struct dg_proc_io {
    dg_proc_io_kind kind;
    int fd;           /* DG_PROC_FD */
    const char *data; /* DG_PROC_BUFFER (borrowed until dg_proc_start returns) */
    size_t len;       /* DG_PROC_BUFFER */
    size_t cap;       /* DG_PROC_CAPTURE: bytes kept (0: DG_PROC_CAP_DEFAULT); more is read,
                       * dropped and flagged truncated */
} dg_proc_io;

/* A further descriptor of the child: child_fd (3..63) connected as io. */
typedef struct dg_proc_extra {
    int child_fd;
    dg_proc_io io; /* DG_PROC_CAPTURE, DG_PROC_FD or DG_PROC_PIPE (child writes) */
} dg_proc_extra;

#define DG_PROC_EXTRA_MAX 4
#define DG_PROC_CAP_DEFAULT ((size_t)1 << 20)

typedef struct dg_proc_opts {
    const char *const *argv;      /* argv[0] searched in PATH unless it holds a '/' */
    const char *const *env_edits; /* NULL-terminated or NULL: "NAME=VALUE" sets, "NAME"
                                   * removes; a later edit of a name wins */
    dg_proc_io in, out, err;      /* fds 0, 1, 2 */
    dg_proc_extra extra[DG_PROC_EXTRA_MAX];
    int n_extra;
    double timeout_s;    /* > 0: the group is stopped this long after the start */
    double term_grace_s; /* at the limit: TERM to the group, KILL after this (0: KILL) */
    const volatile sig_atomic_t *cancel; /* set: the group is stopped, DG_ERR_INTERRUPTED */
    bool same_group;   /* stay in the caller's process group (default: a group of its own) */
    bool leave_strays; /* keep what the child left in its group when it ends (default: killed) */
    /* Fork mode (fork and exec with async-signal-safe calls between): taken
     * when either is set, as posix_spawn can express neither. */
    bool die_with_parent; /* Linux: SIGKILL when the calling thread ends (PR_SET_PDEATHSIG) */
    size_t as_limit;      /* RLIMIT_AS for the child in bytes (0: as inherited) */
} dg_proc_opts;

/* How a child ended and what it said. The buffers are dg_malloc'd and
 * NUL-terminated once anything was read; dg_proc_result_free releases them. */
typedef struct dg_proc_result {
    bool started;   /* false: it never ran (reason in error) */
    bool timed_out; /* stopped at timeout_s */
    bool cancelled; /* stopped by the cancel flag */
    int exit_code;  /* exit status; -1 when a signal ended it or it never ran */
    int sig;        /* terminating signal, 0 if none */
    int spawn_errno;
    double wall_s; /* start to end */
    dg_capbuf out, err;
    dg_capbuf extra[DG_PROC_EXTRA_MAX]; /* captures of opts.extra[i] */
    char error[256];                    /* why it never ran or could not be waited for */
} dg_proc_result;

typedef struct dg_proc dg_proc;

/* Starts the child described by o; *out gets the handle (free with
 * dg_proc_free). DG_ERR_NOT_FOUND when the program is not there (message
 * "cannot start 'X': not found in PATH" on ctx), DG_ERR_IO when it could not
 * be started otherwise, DG_ERR_USAGE for an empty argv or a bad option,
 * DG_ERR_NOMEM; errno then holds the cause (EINVAL for a bad option). */
dg_status dg_proc_start(dg_ctx *ctx, const dg_proc_opts *o, dg_proc **out);
/* The child's pid (also its process group unless same_group). */
pid_t dg_proc_pid(const dg_proc *p);
/* The caller's end of the DG_PROC_PIPE on child_fd (0, 1, 2 or an extra's
 * child_fd): the write end for 0, the read end (non-blocking) otherwise; the
 * handle keeps ownership until dg_proc_release. -1 when there is none. */
int dg_proc_fd(const dg_proc *p, int child_fd);
/* Closes the caller's end of the DG_PROC_PIPE on child_fd now (the child's
 * stdin sees EOF); the handle forgets it. */
void dg_proc_fd_close(dg_proc *p, int child_fd);
/* Sends sig to the child's process group (to the child alone with
 * same_group). 0 or an errno. */
int dg_proc_kill(dg_proc *p, int sig);
/* Reads the captures until the child ends, the limit passes or the cancel
 * flag is set (then the group is stopped), and reaps it into *r (which the
 * caller frees with dg_proc_result_free). DG_OK when it ran and ended, whatever
 * its exit; DG_ERR_TIMEOUT; DG_ERR_INTERRUPTED; DG_ERR_IO when it cannot be
 * waited for; DG_ERR_NOMEM when a capture could not grow. */
dg_status dg_proc_wait(dg_ctx *ctx, dg_proc *p, dg_proc_result *r);
/* Frees the handle: a child still running has its group killed and is reaped.
 * Accepts NULL. */
void dg_proc_free(dg_proc *p);
/* Frees the handle but leaves the child and the DG_PROC_PIPE ends to the
 * caller (who now waits for the pid and closes the fds). Accepts NULL. */
void dg_proc_release(dg_proc *p);

/* dg_proc_start then dg_proc_wait: statuses of both; *r is filled either way
 * (started false when it never ran). */
dg_status dg_proc_run(dg_ctx *ctx, const dg_proc_opts *o, dg_proc_result *r);
/* Releases the result's buffers; accepts NULL. */
void dg_proc_result_free(dg_proc_result *r);

/* environ with the edits applied ("NAME=VALUE" sets, "NAME" removes; a later
 * edit of a name wins): a dg_malloc'd NULL-terminated array of borrowed
 * strings, NULL when out of memory. */
char **dg_env_edited(const char *const edits[]);

/* A pipe whose ends are close-on-exec and sit at fd min_fd or above (>= 3),
 * so they never collide with a child's standard streams. 0 or an errno. */
int dg_pipe(int fds[2], int min_fd);
/* "SIGSEGV", "SIGKILL", ... for sig, or "signal N" written into tmp. */
const char *dg_signal_name(int sig, char *tmp, size_t len);
/* "exited with status N", "killed by SIGKILL", "timed out after N s", ...
 * for r into buf; returns buf. */
const char *dg_proc_describe(const dg_proc_result *r, char *buf, size_t len);

#endif
