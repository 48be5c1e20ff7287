/* The one process runner (proc.h): posix_spawn by default, fork and exec
 * when the child needs what only fork gives (a death signal, an address-space
 * limit). Every descriptor the child gets is first made a close-on-exec copy
 * at fd 64 or above in the parent, then moved onto its number in the child,
 * so no source can collide with a target and nothing else leaks into it. */
#include "core/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/mman.h>
#include <sys/prctl.h>
#endif

extern char **environ;

#define SRC_MIN_FD 64 /* where the child's sources sit in the parent */
#define SLOTS (3 + DG_PROC_EXTRA_MAX)
#define PIPE_PREFILL_MAX 65536 /* a buffer this small fits an empty pipe */

typedef struct slot {
    int child_fd; /* -1: unused */
    dg_proc_io_kind kind;
    int src;  /* the parent's close-on-exec copy moved onto child_fd; -1 none */
    int mine; /* the parent's end of a CAPTURE or PIPE; -1 none */
    bool eof;
    dg_capbuf buf; /* CAPTURE */
} slot;

struct dg_proc {
    pid_t pid;
    int pidfd; /* -1 where pidfd_open is missing: the wait polls in slices */
    bool own_group, leave_strays, reaped;
    int status;
    double t0, deadline, grace;
    const volatile sig_atomic_t *cancel;
    slot s[SLOTS];
};

/* ---- descriptors ----------------------------------------------------------------- */

int dg_pipe(int fds[2], int min_fd)
{
    int raw[2];
    if (min_fd < 3)
        min_fd = 3;
#ifdef __linux__
    if (pipe2(raw, O_CLOEXEC) != 0)
        return errno;
#else
    if (pipe(raw) != 0)
        return errno;
#endif
    int err = 0;
    for (int i = 0; i < 2; i++) {
        fds[i] = fcntl(raw[i], F_DUPFD_CLOEXEC, min_fd);
        if (fds[i] < 0)
            err = errno;
        close(raw[i]);
    }
    if (err) {
        for (int i = 0; i < 2; i++)
            if (fds[i] >= 0)
                close(fds[i]);
        fds[0] = fds[1] = -1;
        return err;
    }
    return 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* A descriptor holding data from its start: a pre-filled pipe when it fits,
 * else an anonymous file. -1 with errno on failure. */
static int buffer_source(const char *data, size_t len)
{
    if (len <= PIPE_PREFILL_MAX) {
        int p[2];
        int e = dg_pipe(p, SRC_MIN_FD);
        if (e) {
            errno = e;
            return -1;
        }
        size_t done = 0;
        while (done < len) {
            ssize_t w = write(p[1], data + done, len - done);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                e = errno ? errno : EIO;
                close(p[0]);
                close(p[1]);
                errno = e;
                return -1;
            }
            done += (size_t)w;
        }
        close(p[1]);
        return p[0];
    }
    int fd;
#if defined(__linux__) && defined(MFD_CLOEXEC)
    fd = memfd_create("devgate-stdin", MFD_CLOEXEC);
#else
    fd = -1;
#endif
    if (fd < 0) {
        FILE *f = tmpfile();
        if (!f)
            return -1;
        fd = dup(fileno(f));
        fclose(f);
        if (fd < 0)
            return -1;
    }
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, SRC_MIN_FD);
    int e = errno;
    close(fd);
    if (hi < 0) {
        errno = e;
        return -1;
    }
    for (size_t done = 0; done < len;) {
        ssize_t w = write(hi, data + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            e = errno ? errno : EIO;
            close(hi);
            errno = e;
            return -1;
        }
        done += (size_t)w;
    }
    if (lseek(hi, 0, SEEK_SET) != 0) {
        e = errno;
        close(hi);
        errno = e;
        return -1;
    }
    return hi;
}

/* Prepares one slot's source (and the parent's end). 0 or an errno. */
static int slot_open(slot *sl, const dg_proc_io *io, int child_fd)
{
    bool input = child_fd == 0;
    sl->child_fd = child_fd;
    sl->kind = io->kind;
    sl->src = sl->mine = -1;
    int p[2], e;
    switch (io->kind) {
    case DG_PROC_INHERIT: return child_fd <= 2 ? 0 : EINVAL;
    case DG_PROC_NULL: {
        int fd = open("/dev/null", (input ? O_RDONLY : O_WRONLY) | O_CLOEXEC);
        if (fd < 0)
            return errno;
        sl->src = fcntl(fd, F_DUPFD_CLOEXEC, SRC_MIN_FD);
        e = errno;
        close(fd);
        return sl->src < 0 ? e : 0;
    }
    case DG_PROC_FD:
        if (io->fd < 0)
            return EBADF;
        sl->src = fcntl(io->fd, F_DUPFD_CLOEXEC, SRC_MIN_FD);
        return sl->src < 0 ? errno : 0;
    case DG_PROC_BUFFER:
        if (!input)
            return EINVAL;
        sl->src = buffer_source(io->data ? io->data : "", io->data ? io->len : 0);
        return sl->src < 0 ? errno : 0;
    case DG_PROC_CAPTURE:
    case DG_PROC_PIPE:
        if (input && io->kind == DG_PROC_CAPTURE)
            return EINVAL;
        if ((e = dg_pipe(p, SRC_MIN_FD)) != 0)
            return e;
        sl->src = input ? p[0] : p[1];
        sl->mine = input ? p[1] : p[0];
        if (!input)
            set_nonblock(sl->mine);
        sl->buf.cap = io->cap ? io->cap : DG_PROC_CAP_DEFAULT;
        return 0;
    }
    return EINVAL;
}

/* ---- environment ----------------------------------------------------------------- */

static size_t env_name_len(const char *e)
{
    const char *eq = strchr(e, '=');
    return eq ? (size_t)(eq - e) : strlen(e);
}

static bool same_name(const char *a, const char *b)
{
    size_t n = env_name_len(a);
    return env_name_len(b) == n && strncmp(a, b, n) == 0;
}

char **dg_env_edited(const char *const edits[])
{
    size_t n = 0, ne = 0;
    while (environ && environ[n])
        n++;
    while (edits[ne])
        ne++;
    char **env = dg_malloc((n + ne + 1) * sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool edited = false;
        for (size_t j = 0; j < ne && !edited; j++)
            edited = same_name(environ[i], edits[j]);
        if (!edited)
            env[k++] = environ[i];
    }
    for (size_t j = 0; j < ne; j++) {
        bool later = false;
        for (size_t l = j + 1; l < ne && !later; l++)
            later = same_name(edits[j], edits[l]);
        if (!later && strchr(edits[j], '='))
            env[k++] = (char *)edits[j];
    }
    env[k] = NULL;
    return env;
}

/* ---- fork mode ------------------------------------------------------------------- */

static void child_fail(int errfd, int err)
{
    ssize_t w;
    do
        w = write(errfd, &err, sizeof err);
    while (w < 0 && errno == EINTR);
    _exit(127);
}

/* The child between fork and exec (async-signal-safe calls only): limit,
 * death signal, group, signals, descriptors, then execve along PATH as execvp
 * does without its allocation. Never returns. */
static void child_exec(const dg_proc_opts *o, const slot *s, char *const env[],
                       const char *path_env, int errfd, pid_t parent)
{
    if (o->as_limit) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_AS, &rl) != 0)
            child_fail(errfd, errno);
        rl.rlim_cur = (rlim_t)o->as_limit;
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_cur > rl.rlim_max)
            rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            child_fail(errfd, errno);
    }
#ifdef PR_SET_PDEATHSIG
    if (o->die_with_parent) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
            child_fail(errfd, errno);
        if (getppid() != parent) /* the parent died before the call took hold */
            _exit(127);
    }
#else
    (void)parent;
#endif
    if (!o->same_group && setpgid(0, 0) != 0)
        child_fail(errfd, errno);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaction(sig, &dfl, NULL); /* fails harmlessly for numbers libc reserves */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int i = 0; i < SLOTS; i++)
        if (s[i].child_fd >= 0 && s[i].src >= 0)
            while (dup2(s[i].src, s[i].child_fd) < 0)
                if (errno != EINTR)
                    child_fail(errfd, errno);
    const char *file = o->argv[0];
    if (strchr(file, '/')) {
        execve(file, (char *const *)o->argv, env);
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
            execve(buf, (char *const *)o->argv, env);
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

/* fork + child_exec; the child's errno comes back over a close-on-exec pipe. */
static int start_forked(const dg_proc_opts *o, const slot *s, char *const env[], pid_t *pid)
{
    int errp[2];
    int rc = dg_pipe(errp, SRC_MIN_FD);
    if (rc)
        return rc;
    const char *path_env = getenv("PATH");
    pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0)
        child_exec(o, s, env, path_env, errp[1], parent);
    rc = child < 0 ? errno : 0;
    if (child > 0 && !o->same_group)
        setpgid(child, child); /* also here, so the group exists before fork returns to us */
    close(errp[1]);
    if (!rc) {
        int child_err = 0;
        ssize_t got;
        do
            got = read(errp[0], &child_err, sizeof child_err);
        while (got < 0 && errno == EINTR);
        if (got == (ssize_t)sizeof child_err) {
            rc = child_err ? child_err : EIO;
            while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {
            }
        }
    }
    close(errp[0]);
    *pid = child;
    return rc;
}

/* ---- spawn mode ------------------------------------------------------------------ */

static int start_spawned(const dg_proc_opts *o, const slot *s, char *const env[], pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc)
        return rc;
    if ((rc = posix_spawnattr_init(&attr)) != 0) {
        posix_spawn_file_actions_destroy(&fa);
        return rc;
    }
    for (int i = 0; i < SLOTS && !rc; i++)
        if (s[i].child_fd >= 0 && s[i].src >= 0)
            rc = posix_spawn_file_actions_adddup2(&fa, s[i].src, s[i].child_fd);
    if (!rc && !o->same_group) {
        rc = dg_spawnattr_isolate(&attr);
    } else if (!rc) {
        sigset_t none, all;
        sigemptyset(&none);
        sigfillset(&all);
        rc = posix_spawnattr_setsigmask(&attr, &none);
        if (!rc)
            rc = posix_spawnattr_setsigdefault(&attr, &all);
        if (!rc)
            rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    }
    if (!rc)
        rc = posix_spawnp(pid, o->argv[0], &fa, &attr, (char *const *)o->argv, env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    return rc;
}

/* ---- the handle ------------------------------------------------------------------ */

static void slots_close(dg_proc *p, bool mine_too)
{
    for (int i = 0; i < SLOTS; i++) {
        close_fd(&p->s[i].src);
        if (mine_too)
            close_fd(&p->s[i].mine);
    }
}

/* The message for a failed start. */
static dg_status start_failure(dg_ctx *ctx, const char *prog, int err, char *buf, size_t len)
{
    char clean[160];
    dg_copy_clean(clean, sizeof clean, prog);
    dg_status st = err == ENOMEM ? DG_ERR_NOMEM : DG_ERR_IO;
    if ((err == ENOENT || err == ENOTDIR) && !strchr(prog, '/')) {
        snprintf(buf, len, "cannot start '%s': not found in PATH", clean);
        st = DG_ERR_NOT_FOUND;
    } else if (err == ENOENT && access(prog, F_OK) == 0) {
        /* The file is there, so what it needs is missing. */
        snprintf(buf, len, "cannot start '%s': its #! interpreter or ELF loader is missing", clean);
    } else {
        snprintf(buf, len, "cannot start '%s': %s", clean, strerror(err));
        if (err == ENOENT || err == ENOTDIR)
            st = DG_ERR_NOT_FOUND;
    }
    return dg_fail(ctx, st, "%s", buf);
}

/* The start proper; *err gets the errno behind a failure (0 for a bad option). */
static dg_status proc_start(dg_ctx *ctx, const dg_proc_opts *o, dg_proc **out, char *msg,
                            size_t msg_len, int *err)
{
    *out = NULL;
    *err = 0;
    msg[0] = '\0';
    if (!o || !o->argv || !o->argv[0] || !o->argv[0][0]) {
        snprintf(msg, msg_len, "no program to start");
        return dg_fail(ctx, DG_ERR_USAGE, "%s", msg);
    }
    if (o->n_extra < 0 || o->n_extra > DG_PROC_EXTRA_MAX) {
        snprintf(msg, msg_len, "too many extra descriptors (%d)", o->n_extra);
        return dg_fail(ctx, DG_ERR_USAGE, "%s", msg);
    }
    dg_proc *p = dg_calloc(1, sizeof *p);
    if (!p) {
        *err = ENOMEM;
        return start_failure(ctx, o->argv[0], ENOMEM, msg, msg_len);
    }
    p->pid = -1;
    p->pidfd = -1;
    for (int i = 0; i < SLOTS; i++)
        p->s[i].child_fd = p->s[i].src = p->s[i].mine = -1;
    const dg_proc_io *std[3] = {&o->in, &o->out, &o->err};
    int e = 0;
    for (int i = 0; i < 3 && !e; i++)
        e = slot_open(&p->s[i], std[i], i);
    for (int i = 0; i < o->n_extra && !e; i++) {
        int cfd = o->extra[i].child_fd;
        dg_proc_io_kind k = o->extra[i].io.kind;
        if (cfd < 3 || cfd >= SRC_MIN_FD ||
            (k != DG_PROC_CAPTURE && k != DG_PROC_FD && k != DG_PROC_PIPE)) {
            slots_close(p, true);
            dg_free(p);
            snprintf(msg, msg_len, "bad extra descriptor %d", cfd);
            return dg_fail(ctx, DG_ERR_USAGE, "%s", msg);
        }
        e = slot_open(&p->s[3 + i], &o->extra[i].io, cfd);
    }
    char **env = NULL;
    if (!e && o->env_edits && !(env = dg_env_edited(o->env_edits)))
        e = ENOMEM;
    if (!e) {
        p->t0 = dg_now();
        bool forked = o->die_with_parent || o->as_limit;
        e = forked ? start_forked(o, p->s, env ? env : environ, &p->pid)
                   : start_spawned(o, p->s, env ? env : environ, &p->pid);
    }
    dg_free(env);
    slots_close(p, false); /* the child has its copies */
    if (e) {
        slots_close(p, true);
        dg_free(p);
        *err = e;
        return start_failure(ctx, o->argv[0], e, msg, msg_len);
    }
    p->own_group = !o->same_group;
    p->leave_strays = o->leave_strays;
    p->cancel = o->cancel;
    p->deadline = o->timeout_s > 0 ? p->t0 + o->timeout_s : 0;
    p->grace = o->term_grace_s > 0 ? o->term_grace_s : 0;
#if defined(__linux__) && defined(SYS_pidfd_open)
    p->pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
    if (p->pidfd >= 0)
        fcntl(p->pidfd, F_SETFD, FD_CLOEXEC);
#endif
    *out = p;
    return DG_OK;
}

dg_status dg_proc_start(dg_ctx *ctx, const dg_proc_opts *o, dg_proc **out)
{
    char msg[256];
    int err;
    dg_status st = proc_start(ctx, o, out, msg, sizeof msg, &err);
    if (st != DG_OK)
        errno = err ? err : EINVAL;
    return st;
}

pid_t dg_proc_pid(const dg_proc *p)
{
    return p ? p->pid : -1;
}

int dg_proc_fd(const dg_proc *p, int child_fd)
{
    for (int i = 0; p && i < SLOTS; i++)
        if (p->s[i].child_fd == child_fd && p->s[i].kind == DG_PROC_PIPE)
            return p->s[i].mine;
    return -1;
}

void dg_proc_fd_close(dg_proc *p, int child_fd)
{
    for (int i = 0; p && i < SLOTS; i++)
        if (p->s[i].child_fd == child_fd && p->s[i].kind == DG_PROC_PIPE)
            close_fd(&p->s[i].mine);
}

int dg_proc_kill(dg_proc *p, int sig)
{
    if (!p || p->pid <= 0 || p->reaped)
        return ESRCH;
    int rc = kill(p->own_group ? -p->pid : p->pid, sig);
    return rc == 0 ? 0 : errno;
}

/* Reads what the captures hold now; true once every capture is at its end. */
static bool drain_all(dg_proc *p)
{
    bool all = true;
    for (int i = 0; i < SLOTS; i++) {
        slot *sl = &p->s[i];
        if (sl->kind != DG_PROC_CAPTURE || sl->mine < 0 || sl->eof)
            continue;
        if (dg_capbuf_drain(sl->mine, &sl->buf))
            sl->eof = true;
        else
            all = false;
    }
    return all;
}

/* True when the child has ended (not reaped yet: its group id stays taken). */
static bool has_ended(dg_proc *p, int *err)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    *err = 0;
    if (waitid(P_PID, (id_t)p->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
        if (errno != EINTR)
            *err = errno;
        return false;
    }
    return si.si_pid == p->pid;
}

static void reap(dg_proc *p)
{
    while (waitpid(p->pid, &p->status, 0) < 0 && errno == EINTR) {
    }
    p->reaped = true;
}

dg_status dg_proc_wait(dg_ctx *ctx, dg_proc *p, dg_proc_result *r)
{
    memset(r, 0, sizeof *r);
    r->exit_code = -1;
    if (!p || p->reaped)
        return dg_fail(ctx, DG_ERR_USAGE, "no child to wait for");
    r->started = true;
    double term_at = p->deadline, kill_at = 0;
    bool stopping = false, stopped = false;
    int werr = 0;
    for (;;) {
        struct pollfd pf[SLOTS + 1];
        int np = 0;
        for (int i = 0; i < SLOTS; i++)
            if (p->s[i].kind == DG_PROC_CAPTURE && p->s[i].mine >= 0 && !p->s[i].eof)
                pf[np++] = (struct pollfd){p->s[i].mine, POLLIN, 0};
        if (p->pidfd >= 0)
            pf[np++] = (struct pollfd){p->pidfd, POLLIN, 0};
        double now = dg_now();
        double next = stopping ? kill_at : term_at;
        int ms = p->pidfd >= 0 ? 100 : 20; /* the cancel flag is looked at this often */
        if (next > 0 && !stopped) {
            double left = next - now;
            int lm = left <= 0 ? 0 : (int)(left * 1000.0) + 1;
            if (lm < ms)
                ms = lm;
        }
        if (np > 0 && poll(pf, (nfds_t)np, ms) < 0 && errno != EINTR)
            ms = 1;
        else if (np == 0 && ms > 0) {
            struct timespec ts = {0, (long)ms * 1000000L};
            nanosleep(&ts, NULL);
        }
        drain_all(p);
        if (has_ended(p, &werr)) {
            drain_all(p); /* what it wrote before ending; strays are not waited for */
            if (p->own_group && !p->leave_strays)
                kill(-p->pid, SIGKILL);
            reap(p);
            break;
        }
        if (werr) {
            snprintf(r->error, sizeof r->error, "cannot wait for the child: %s", strerror(werr));
            kill(p->own_group ? -p->pid : p->pid, SIGKILL);
            p->reaped = true; /* not ours to reap any more */
            break;
        }
        now = dg_now();
        bool cancelled = p->cancel && *p->cancel;
        if (!stopping && (cancelled || (term_at > 0 && now >= term_at))) {
            r->cancelled = cancelled;
            r->timed_out = !cancelled;
            stopping = true;
            if (p->grace > 0) {
                dg_proc_kill(p, SIGTERM);
                kill_at = now + p->grace;
            } else {
                dg_proc_kill(p, SIGKILL);
                stopped = true;
            }
        } else if (stopping && !stopped && now >= kill_at) {
            dg_proc_kill(p, SIGKILL);
            stopped = true;
        }
    }
    r->wall_s = dg_now() - p->t0;
    if (!werr) {
        if (WIFEXITED(p->status)) {
            r->exit_code = WEXITSTATUS(p->status);
        } else if (WIFSIGNALED(p->status)) {
            r->sig = WTERMSIG(p->status);
        }
    }
    bool nomem = false;
    r->out = p->s[1].buf;
    r->err = p->s[2].buf;
    for (int i = 0; i < DG_PROC_EXTRA_MAX; i++)
        r->extra[i] = p->s[3 + i].buf;
    for (int i = 0; i < SLOTS; i++) {
        nomem |= p->s[i].buf.nomem;
        memset(&p->s[i].buf, 0, sizeof p->s[i].buf);
        if (p->s[i].kind == DG_PROC_CAPTURE)
            close_fd(&p->s[i].mine);
    }
    if (werr)
        return dg_fail(ctx, DG_ERR_IO, "%s", r->error);
    if (nomem)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory reading the output of a child");
    if (r->cancelled)
        return dg_fail(ctx, DG_ERR_INTERRUPTED, "stopped: cancelled");
    if (r->timed_out)
        return dg_fail(ctx, DG_ERR_TIMEOUT, "stopped after its %.1f s limit", p->deadline - p->t0);
    return DG_OK;
}

void dg_proc_free(dg_proc *p)
{
    if (!p)
        return;
    if (p->pid > 0 && !p->reaped) {
        dg_proc_kill(p, SIGKILL);
        reap(p);
    }
    slots_close(p, true);
    for (int i = 0; i < SLOTS; i++)
        dg_free(p->s[i].buf.data);
    if (p->pidfd >= 0)
        close(p->pidfd);
    dg_free(p);
}

void dg_proc_release(dg_proc *p)
{
    if (!p)
        return;
    for (int i = 0; i < SLOTS; i++) {
        if (p->s[i].kind == DG_PROC_PIPE)
            p->s[i].mine = -1; /* the caller's now */
        dg_free(p->s[i].buf.data);
        p->s[i].buf.data = NULL;
    }
    p->reaped = true;
    dg_proc_free(p);
}

dg_status dg_proc_run(dg_ctx *ctx, const dg_proc_opts *o, dg_proc_result *r)
{
    memset(r, 0, sizeof *r);
    r->exit_code = -1;
    dg_proc *p;
    int err;
    dg_status st = proc_start(ctx, o, &p, r->error, sizeof r->error, &err);
    if (st != DG_OK) {
        r->spawn_errno = err;
        return st;
    }
    st = dg_proc_wait(ctx, p, r);
    dg_proc_free(p);
    return st;
}

void dg_proc_result_free(dg_proc_result *r)
{
    if (!r)
        return;
    dg_free(r->out.data);
    dg_free(r->err.data);
    for (int i = 0; i < DG_PROC_EXTRA_MAX; i++)
        dg_free(r->extra[i].data);
    memset(&r->out, 0, sizeof r->out);
    memset(&r->err, 0, sizeof r->err);
    memset(r->extra, 0, sizeof r->extra);
}

const char *dg_proc_describe(const dg_proc_result *r, char *buf, size_t len)
{
    if (!r->started)
        snprintf(buf, len, "%s", r->error[0] ? r->error : "did not start");
    else if (r->cancelled)
        snprintf(buf, len, "stopped: cancelled");
    else if (r->timed_out)
        snprintf(buf, len, "timed out after %.1f s", r->wall_s);
    else if (r->sig)
        snprintf(buf, len, "killed by signal %d (%s)", r->sig, strsignal(r->sig));
    else if (r->exit_code >= 0)
        snprintf(buf, len, "exited with status %d", r->exit_code);
    else
        snprintf(buf, len, "%s", r->error[0] ? r->error : "ended in an unknown way");
    return buf;
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
