/* The fork server (docs/accept.md, "Fast trials: the fork server"): one
 * Python interpreter, started with the interpreter and options of the user's
 * command, that imports what the program imports at its top level (torch and
 * the other installed packages; devgate_probe.forkserver) before any device
 * is initialised, then forks a child per run. devgate still supervises each
 * child as its own: the server reports its pid, the child is the leader of
 * its own process group and dies with the server (which dies with devgate),
 * devgate samples its tree, forwards signals, kills its group at the timeout,
 * and reads its end from the server, which reaps it and reports the raw wait
 * status. A run the server cannot take (another interpreter, an environment
 * that differs in a variable read at start-up, a server that is off or gone)
 * is started as a plain child; the counts and the first reason are kept for
 * the record. */
#include "supervise/supervise.h"

#include "core/json.h"
#include "core/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define READY_TIMEOUT_S 600.0 /* the server's imports (torch on a cold disk) */
/* A fork and its pid, after the server has warmed what the last child
 * imported (its checker children take at most WARM_BUDGET_S, 120 s, then the
 * server imports what they passed). */
#define REPLY_TIMEOUT_S 300.0
#define MSG_MAX ((uint32_t)16 << 20)
#define SERVER_FD 3 /* the control socket's number in the server */

typedef enum fs_state { FS_NEW, FS_STARTING, FS_READY, FS_OFF } fs_state;

struct dg_forksrv {
    char **prefix; /* the interpreter and its options (owned copies, NULL-terminated) */
    size_t nprefix;
    char *target[3]; /* SCRIPT, or -m MODULE, or -c CODE (owned) */
    char *shim;      /* PROBE_PATH/devgate_probe/_forksite (owned) */
    const volatile sig_atomic_t *cancel;
    fs_state state;
    bool asked;
    char why[512];   /* why it is off (or, ready, the first plain run's reason) */
    dg_proc *proc;   /* the server */
    int sock;        /* our end of the control socket */
    cJSON *hello;    /* its ready message */
    cJSON *learned;  /* what it warmed of its children's imports (its last pid reply's) */
    double t_start;  /* when it was started (dg_now) */
    double ready_s;  /* start to ready, s */
    double waited_s; /* of that, the time a run waited for it (s) */
    unsigned forked, plain;
    pid_t running; /* the child the server holds now, 0 none */
};

static void set_off(dg_forksrv *s, const char *fmt, ...) DG_PRINTF(2, 3);
static void set_off(dg_forksrv *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->why, sizeof s->why, fmt, ap);
    va_end(ap);
    s->state = FS_OFF;
    if (s->sock >= 0)
        close(s->sock);
    s->sock = -1;
    dg_proc_free(s->proc); /* kills a server still running, reaps it */
    s->proc = NULL;
    s->running = 0;
}

dg_forksrv *dg_forksrv_new(const char *const argv[], bool enabled, const char *probe_path,
                           const volatile sig_atomic_t *cancel)
{
    dg_forksrv *s = dg_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->sock = -1;
    s->cancel = cancel;
    s->asked = enabled;
    s->state = FS_OFF;
    int at = argv && argv[0] && dg_is_python(argv[0]) ? dg_python_program_index(argv) : -1;
    if (!enabled) {
        snprintf(s->why, sizeof s->why, "--no-fork-server: every run a fresh interpreter");
        return s;
    }
#ifndef __linux__
    snprintf(s->why, sizeof s->why, "the fork server needs Linux (/proc)");
    return s;
#endif
    if (!probe_path || !probe_path[0]) {
        snprintf(s->why, sizeof s->why, "the devgate_probe package was not found beside devgate");
        return s;
    }
    if (!argv || !argv[0] || !dg_is_python(argv[0])) {
        snprintf(s->why, sizeof s->why,
                 "the command is not `python [-m MODULE | SCRIPT] ...`: every run a fresh process");
        return s;
    }
    if (at < 0) {
        snprintf(s->why, sizeof s->why,
                 "the interpreter's command line names no program a server can run (stdin, -E "
                 "or -I)");
        return s;
    }
    s->prefix = dg_calloc((size_t)at + 1, sizeof *s->prefix);
    bool two = strcmp(argv[at], "-m") == 0 || strcmp(argv[at], "-c") == 0;
    bool ok = s->prefix && (!two || argv[at + 1]);
    for (int i = 0; ok && i < at; i++)
        ok = (s->prefix[i] = dg_strdup(argv[i])) != NULL;
    s->nprefix = (size_t)at;
    ok = ok && (s->shim = dg_asprintf("%s/devgate_probe/_forksite", probe_path)) != NULL;
    for (int i = 0; ok && i < (two ? 2 : 1); i++)
        ok = (s->target[i] = dg_strdup(argv[at + i])) != NULL;
    if (!ok) {
        dg_forksrv_free(s);
        return NULL;
    }
    s->state = FS_NEW;
    return s;
}

/* ---- messages: a 4-byte big-endian length, then JSON ---------------------------- */

/* Waits until fd is readable; false at the timeout or when cancelled. */
static bool wait_readable(int fd, double deadline, const volatile sig_atomic_t *cancel)
{
    for (;;) {
        if (cancel && *cancel)
            return false;
        double left = deadline - dg_now();
        if (left <= 0)
            return false;
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, left > 0.1 ? 100 : (int)ceil(left * 1e3));
        if (r > 0)
            return true;
        if (r < 0 && errno != EINTR)
            return false;
    }
}

static bool read_full(int fd, void *buf, size_t n, double deadline,
                      const volatile sig_atomic_t *cancel)
{
    char *p = buf;
    while (n) {
        if (!wait_readable(fd, deadline, cancel))
            return false;
        ssize_t r = read(fd, p, n);
        if (r == 0)
            return false;
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                continue;
            return false;
        }
        p += r;
        n -= (size_t)r;
    }
    return true;
}

/* The next message, NULL at the end, a timeout or garbage. */
static cJSON *msg_read(int fd, double timeout_s, const volatile sig_atomic_t *cancel)
{
    double deadline = dg_now() + timeout_s;
    unsigned char h[4];
    if (!read_full(fd, h, 4, deadline, cancel))
        return NULL;
    uint32_t n = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
    if (n == 0 || n > MSG_MAX)
        return NULL;
    char *body = dg_malloc((size_t)n + 1);
    if (!body)
        return NULL;
    cJSON *m = NULL;
    if (read_full(fd, body, n, deadline, cancel)) {
        body[n] = '\0';
        m = cJSON_Parse(body);
    }
    dg_free(body);
    if (m && !cJSON_IsObject(m)) {
        cJSON_Delete(m);
        m = NULL;
    }
    return m;
}

/* Sends obj with the descriptors fds[0..nfd) attached; false when it could not. */
static bool msg_send(int fd, const cJSON *obj, const int *fds, int nfd)
{
    char *body = cJSON_PrintUnformatted(obj);
    if (!body)
        return false;
    size_t n = strlen(body);
    unsigned char h[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16),
                          (unsigned char)(n >> 8), (unsigned char)n};
    struct iovec iov[2] = {{h, 4}, {body, n}};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    if (nfd > 0) {
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE((size_t)nfd * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN((size_t)nfd * sizeof(int));
        memcpy(CMSG_DATA(c), fds, (size_t)nfd * sizeof(int));
    }
    ssize_t w;
    do
        w = sendmsg(fd, &mh, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    /* The rest of a long message (the descriptors went with its first byte). */
    size_t done = w > 0 ? (size_t)w : 0, total = 4 + n;
    while (w >= 0 && done < total) {
        const char *p = done < 4 ? (const char *)h + done : body + (done - 4);
        size_t len = done < 4 ? 4 - done : total - done;
        w = send(fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            w = 0;
        done += w > 0 ? (size_t)w : 0;
    }
    cJSON_free(body);
    return w >= 0 && done == total;
}

/* ---- the server ------------------------------------------------------------------ */

/* The PYTHONPATH the edits give a child (the last edit of it, else devgate's);
 * NULL when it has none. */
static const char *child_pythonpath(const char *const edits[])
{
    const char *v = getenv("PYTHONPATH");
    for (size_t i = 0; edits && edits[i]; i++)
        if (strncmp(edits[i], "PYTHONPATH", 10) == 0 && (!edits[i][10] || edits[i][10] == '='))
            v = edits[i][10] ? edits[i] + 11 : NULL;
    return v;
}

/* Starts the server with the environment of the run edits (without the events
 * channel, which is each child's; _forksite/ first on PYTHONPATH standing in
 * for the user's sitecustomize, which each child runs instead); its ready
 * message is server_wait's to read. */
static bool server_start(dg_forksrv *s, const char *const edits[])
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        set_off(s, "the fork server's socket: %s", strerror(errno));
        return false;
    }
    size_t ne = 0;
    while (edits && edits[ne])
        ne++;
    char fdvar[40], nvar[48];
    snprintf(fdvar, sizeof fdvar, "DEVGATE_FORKSRV_FD=%d", SERVER_FD);
    snprintf(nvar, sizeof nvar, "DEVGATE_FORKSRV_PREFIX=%zu", s->nprefix);
    const char *pp = child_pythonpath(edits);
    char *shim = dg_asprintf("DEVGATE_FORKSRV_SHIM=%s", s->shim);
    char *path = dg_asprintf("PYTHONPATH=%s%s%s", s->shim, pp ? ":" : "", pp ? pp : "");
    char *orig = pp ? dg_asprintf("DEVGATE_FORKSRV_PYTHONPATH=%s", pp) : NULL;
    static const char *const drop[] = {"DEVGATE_EVENTS_FD", "DEVGATE_EVENTS_FILE",
                                       "DEVGATE_EVENTS_PATH", "DEVGATE_EVENTS_ID"};
    const char **env = dg_calloc(ne + 12, sizeof *env);
    const char **argv = dg_calloc(s->nprefix + 6, sizeof *argv);
    if (!env || !argv || !shim || !path || (pp && !orig)) {
        dg_free(env);
        dg_free(argv);
        dg_free(shim);
        dg_free(path);
        dg_free(orig);
        close(sv[0]);
        close(sv[1]);
        set_off(s, "out of host memory starting the fork server");
        return false;
    }
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
        env[k++] = edits[i];
    for (size_t i = 0; i < 4; i++)
        env[k++] = drop[i];
    env[k++] = fdvar;
    env[k++] = nvar;
    env[k++] = shim;
    env[k++] = path;
    env[k++] = orig ? orig : "DEVGATE_FORKSRV_PYTHONPATH";
    size_t a = 0;
    for (size_t i = 0; i < s->nprefix; i++)
        argv[a++] = s->prefix[i];
    argv[a++] = "-m";
    argv[a++] = "devgate_probe.forkserver";
    for (size_t i = 0; s->target[i]; i++)
        argv[a++] = s->target[i];
    dg_proc_opts o = {
        .argv = argv,
        .env_edits = env,
        .out = {.kind = DG_PROC_FD, .fd = 2}, /* never devgate's stdout (--json) */
        .err = {.kind = DG_PROC_INHERIT},
        .extra = {{.child_fd = SERVER_FD, .io = {.kind = DG_PROC_FD, .fd = sv[1]}}},
        .n_extra = 1,
        .die_with_parent = true,
    };
    s->t_start = dg_now();
    dg_status st = dg_proc_start(NULL, &o, &s->proc);
    int err = errno;
    dg_free(env);
    dg_free(argv);
    dg_free(shim);
    dg_free(path);
    dg_free(orig);
    close(sv[1]);
    s->sock = sv[0];
    if (st != DG_OK) {
        s->proc = NULL;
        set_off(s, "the fork server could not be started: %s", strerror(err));
        return false;
    }
    s->state = FS_STARTING;
    return true;
}

/* Waits for the started server's ready message. */
static bool server_wait(dg_forksrv *s)
{
    double t0 = dg_now();
    cJSON *h = msg_read(s->sock, READY_TIMEOUT_S, s->cancel);
    s->ready_s = dg_now() - s->t_start;
    s->waited_s += dg_now() - t0;
    if (!h) {
        set_off(s,
                "the fork server ended or was stopped before it was ready (%s -m "
                "devgate_probe.forkserver: its output is above)",
                s->prefix[0]);
        return false;
    }
    s->hello = h;
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(h, "ready"))) {
        const char *why = dg_jstr(h, "why");
        set_off(s, "forking is unsafe: %s", why ? why : "the server said so");
        return false;
    }
    s->state = FS_READY;
    return true;
}

/* True when argv is the server's interpreter and options with a program after. */
static bool same_interpreter(const dg_forksrv *s, const char *const argv[])
{
    for (size_t i = 0; i < s->nprefix; i++)
        if (!argv[i] || strcmp(argv[i], s->prefix[i]) != 0)
            return false;
    return argv[s->nprefix] != NULL;
}

static int plain(dg_forksrv *s, const char *why, char *out, size_t len)
{
    s->plain++;
    if (s->state != FS_OFF && !s->why[0])
        snprintf(s->why, sizeof s->why, "%s", why);
    snprintf(out, len, "%s", why);
    return -1;
}

/* The request: argv, the whole environment, the address-space limit. NULL
 * (why set) when a word is not UTF-8 (JSON carries text) or out of memory. */
static cJSON *request(const char *const argv[], const char *const edits[], size_t as_limit,
                      const char **why)
{
    char **env = dg_env_edited(edits);
    cJSON *r = cJSON_CreateObject();
    cJSON *av = cJSON_AddArrayToObject(r, "argv");
    cJSON *ev = cJSON_AddArrayToObject(r, "env");
    *why = "out of host memory";
    bool ok = env && av && ev;
    for (size_t i = 0; ok && argv[i]; i++) {
        ok = dg_utf8_valid(argv[i], strlen(argv[i]));
        if (!ok)
            *why = "a word of the command is not UTF-8";
        else
            cJSON_AddItemToArray(av, cJSON_CreateString(argv[i]));
    }
    for (size_t i = 0; ok && env[i]; i++) {
        ok = dg_utf8_valid(env[i], strlen(env[i]));
        if (!ok)
            *why = "an environment variable is not UTF-8";
        else
            cJSON_AddItemToArray(ev, cJSON_CreateString(env[i]));
    }
    cJSON_AddNumberToObject(r, "as_limit", (double)as_limit);
    dg_free(env);
    if (!ok) {
        cJSON_Delete(r);
        return NULL;
    }
    return r;
}

void dg_forksrv_start(dg_forksrv *s, const char *const edits[])
{
    if (s && s->state == FS_NEW)
        server_start(s, edits);
}

void dg_forksrv_ready(dg_forksrv *s, const char *const edits[])
{
    /* A server not started early starts at the first launch (the gate's,
     * outside every measured window) even when that one is not its to run. */
    dg_forksrv_start(s, edits);
    if (s && s->state == FS_STARTING)
        server_wait(s);
}

int dg_forksrv_launch(dg_forksrv *s, const char *const argv[], const char *const edits[],
                      bool stdout_to_stderr, int out_fd, int err_fd, size_t as_limit, pid_t *pid,
                      int *events_fd, char *why, size_t len)
{
    *pid = -1;
    *events_fd = -1;
    dg_forksrv_ready(s, edits);
    if (s->state == FS_OFF)
        return plain(s, s->why, why, len);
    if (!same_interpreter(s, argv))
        return plain(s, "the run's interpreter or its options differ from the fork server's", why,
                     len);
    const char *bad = NULL;
    cJSON *req = request(argv, edits, as_limit, &bad);
    if (!req)
        return plain(s, bad, why, len);
    int pfd[2];
    if (dg_pipe(pfd, 3) != 0) {
        cJSON_Delete(req);
        return plain(s, "no pipe for the events channel", why, len);
    }
    int fds[3] = {out_fd >= 0        ? out_fd
                  : stdout_to_stderr ? 2
                                     : 1,
                  err_fd >= 0 ? err_fd : 2, pfd[1]};
    bool sent = msg_send(s->sock, req, fds, 3);
    cJSON_Delete(req);
    close(pfd[1]);
    cJSON *rep = sent ? msg_read(s->sock, REPLY_TIMEOUT_S, NULL) : NULL;
    double p = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(rep, "pid"));
    const char *refused = dg_jstr(rep, "refused");
    if (isfinite(p) && p > 1) {
        cJSON *l = cJSON_DetachItemFromObjectCaseSensitive(rep, "learned");
        if (cJSON_IsObject(l)) {
            cJSON_Delete(s->learned);
            s->learned = l;
        } else {
            cJSON_Delete(l);
        }
        cJSON_Delete(rep);
        int fl = fcntl(pfd[0], F_GETFL);
        if (fl >= 0)
            fcntl(pfd[0], F_SETFL, fl | O_NONBLOCK);
        s->forked++;
        s->running = *pid = (pid_t)p;
        *events_fd = pfd[0];
        return 0;
    }
    close(pfd[0]);
    char r[512];
    snprintf(r, sizeof r, "%s", refused ? refused : "the fork server stopped answering");
    cJSON_Delete(rep);
    if (!refused)
        set_off(s, "%s", r);
    return plain(s, r, why, len);
}

pid_t dg_forksrv_wait(dg_forksrv *s, pid_t pid, int *wstatus)
{
    if (s->state != FS_READY || s->running != pid) {
        errno = ECHILD;
        return -1;
    }
    struct pollfd p = {s->sock, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0)
        return 0;
    cJSON *m = msg_read(s->sock, REPLY_TIMEOUT_S, NULL);
    double who = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(m, "exit"));
    double st = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(m, "status"));
    cJSON_Delete(m);
    if (!isfinite(who) || (pid_t)who != pid || !isfinite(st)) {
        set_off(s, "the fork server ended while a run was going on");
        errno = ECHILD;
        return -1;
    }
    s->running = 0;
    *wstatus = (int)st;
    return pid;
}

pid_t dg_forksrv_pid(const dg_forksrv *s)
{
    return s && s->proc ? dg_proc_pid(s->proc) : -1;
}

/* The server's learned imports (docs/schema/report.md): whether its children
 * taught it, and what it warmed of what they imported, from its last pid reply. */
static void learned_json(cJSON *sv, const cJSON *hello, const cJSON *l)
{
    const cJSON *on = cJSON_GetObjectItemCaseSensitive(hello, "learning");
    cJSON_AddBoolToObject(sv, "learning", !on || cJSON_IsTrue(on));
    static const char *const keys[][2] = {{"imports", "learned_imports"},
                                          {"failed", "learned_failed"},
                                          {"refused", "learned_refused"}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(l, keys[i][0]);
        cJSON_AddItemToObject(sv, keys[i][1],
                              cJSON_IsArray(v) ? cJSON_Duplicate(v, true) : cJSON_CreateArray());
    }
    cJSON_AddItemToObject(sv, "learned_s", dg_json_metric_of(dg_jnum(l, "s"), "s"));
}

cJSON *dg_forksrv_json(const dg_forksrv *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "asked", s->asked);
    cJSON_AddStringToObject(o, "used", !s->forked ? "plain" : s->plain ? "mixed" : "fork-server");
    cJSON_AddNumberToObject(o, "forked", s->forked);
    cJSON_AddNumberToObject(o, "plain", s->plain);
    dg_json_add_str(o, "why", s->why[0] ? s->why : NULL);
    const cJSON *h = s->hello;
    if (!h) {
        cJSON_AddNullToObject(o, "server");
        return o;
    }
    cJSON *sv = cJSON_AddObjectToObject(o, "server");
    static const char *const keys[] = {
        "pid",          "python",      "version",        "imported",
        "failed",       "import_s",    "native_threads", "resident_runs",
        "warm_imports", "warm_failed", "warm_refused"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(h, keys[i]);
        cJSON_AddItemToObject(sv, keys[i], v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
    }
    cJSON_AddItemToObject(sv, "warm_s", dg_json_metric_of(dg_jnum(h, "warm_s"), "s"));
    cJSON_AddItemToObject(sv, "ready_s", dg_json_metric(s->ready_s, true, "s"));
    cJSON_AddItemToObject(sv, "waited_s", dg_json_metric(s->waited_s, true, "s"));
    learned_json(sv, h, s->learned);
    return o;
}

void dg_forksrv_launch_json(cJSON *sup, bool forked, pid_t server_pid, const char *why)
{
    cJSON *l = cJSON_AddObjectToObject(sup, "launch");
    cJSON_AddStringToObject(l, "how", forked ? "fork-server" : "spawn");
    if (forked && server_pid > 0)
        cJSON_AddNumberToObject(l, "server_pid", server_pid);
    else
        cJSON_AddNullToObject(l, "server_pid");
    dg_json_add_str(l, "why", !forked && why && why[0] ? why : NULL);
}

void dg_forksrv_free(dg_forksrv *s)
{
    if (!s)
        return;
    if (s->sock >= 0)
        close(s->sock); /* an idle server ends at the end of its input */
    dg_proc_free(s->proc);
    for (size_t i = 0; s->prefix && s->prefix[i]; i++)
        dg_free(s->prefix[i]);
    dg_free(s->prefix);
    for (size_t i = 0; i < 3; i++)
        dg_free(s->target[i]);
    dg_free(s->shim);
    cJSON_Delete(s->hello);
    cJSON_Delete(s->learned);
    dg_free(s);
}
