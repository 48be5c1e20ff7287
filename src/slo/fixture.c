/* --target fixture (docs/slo.md): devgate's fixture model as the endpoint.
 * A child devgate (`__slo_fixture`, fixture_serve.c) gets a listening socket
 * on a loopback ephemeral port and a readiness pipe; once it says it is
 * ready (the model on its backend, one forward pass run) the run measures
 * http://127.0.0.1:PORT as any URL, and stops it at the end. A child that
 * dies is told apart from an endpoint that stops answering. */
#include "backend/backend.h"
#include "core/proc.h"
#include "engine/model.h"
#include "slo/slo.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define READY_MAX_S 600.0 /* model load and a device's first use, on a loaded machine */

struct slo_fixture {
    dg_proc *p;
    cJSON *info; /* what the child said when ready, with url and pid */
};

/* A listening socket on 127.0.0.1 at a port the kernel picks; -1 after a message. */
static int listen_loopback(dg_ctx *ctx, int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4096) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
        dg_fail(ctx, DG_ERR_IO, "slo: fixture: no loopback port to listen on: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* The child's ready line (at most READY_MAX_S; cancel stops the wait), parsed; NULL when it
 * ended without one. */
static cJSON *read_ready(int fd, const volatile sig_atomic_t *cancel)
{
    char buf[8192];
    size_t len = 0;
    double t0 = dg_now();
    while (len < sizeof buf - 1 && dg_now() - t0 < READY_MAX_S && !(cancel && *cancel)) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = poll(&pf, 1, 100);
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0)
            continue;
        ssize_t n = read(fd, buf + len, sizeof buf - 1 - len);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (memchr(buf, '\n', len))
            break;
    }
    buf[len] = 0;
    return len ? cJSON_Parse(buf) : NULL;
}

/* Whether the child has ended (it is left to be reaped); how, into how. */
bool dg_slo_fixture_ended(const slo_fixture *f, char *how, size_t len)
{
    siginfo_t si = {0};
    if (!f || waitid(P_PID, (id_t)dg_proc_pid(f->p), &si, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        si.si_pid == 0)
        return false;
    char tmp[32];
    if (si.si_code == CLD_EXITED)
        snprintf(how, len, "exited with status %d", si.si_status);
    else
        snprintf(how, len, "killed by %s", dg_signal_name(si.si_status, tmp, sizeof tmp));
    return true;
}

/* Stops the child (TERM, then KILL after 10 s), reaps it and frees f; the
 * record's "fixture" with how it ended. Accepts NULL (NULL). */
cJSON *dg_slo_fixture_stop(slo_fixture *f)
{
    if (!f)
        return NULL;
    char how[96] = "";
    bool before = dg_slo_fixture_ended(f, how, sizeof how);
    if (!before) {
        dg_proc_kill(f->p, SIGTERM);
        for (double t0 = dg_now(); dg_now() - t0 < 10 && !dg_slo_fixture_ended(f, how, sizeof how);)
            usleep(20000);
        if (!how[0])
            dg_proc_kill(f->p, SIGKILL);
    }
    dg_proc_result r;
    dg_proc_wait(NULL, f->p, &r);
    if (!how[0])
        dg_proc_describe(&r, how, sizeof how);
    dg_proc_result_free(&r);
    dg_proc_free(f->p);
    cJSON *info = f->info;
    dg_json_add_str(info, "ended", before ? how : "stopped at the end of the run");
    dg_free(f);
    return info;
}

dg_status dg_slo_fixture_start(dg_ctx *ctx, const dg_slo_opts *o, slo_fixture **out, char *base,
                               size_t len)
{
    *out = NULL;
    /* What the child would refuse, refused here: a usage error, not an endpoint that cannot serve.
     */
    const char *backend = o->fixture_backend ? o->fixture_backend : "cpu";
    dg_model m;
    if (dg_backend_index(backend) < 0)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "slo: --backend %s: not a backend devgate knows (cpu, "
                       "opencl, cuda)",
                       backend);
    if (dg_model_parse(ctx, o->model ? o->model : "mlp", 0, 0, 0, &m) != DG_OK)
        return DG_ERR_USAGE;
    char self[PATH_MAX];
    const char *exe = o->fixture_exe;
    if (!exe) {
        ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
        if (sl <= 0)
            return dg_fail(ctx, DG_ERR_IO, "slo: fixture: cannot find this devgate: %s",
                           strerror(errno));
        self[sl] = 0;
        exe = self;
    }
    int port = 0, lfd = listen_loopback(ctx, &port);
    if (lfd < 0)
        return DG_ERR_IO;
    char batch[16], seed[24];
    snprintf(batch, sizeof batch, "%d", o->fixture_batch > 0 ? o->fixture_batch : 1);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    const char *const argv[] = {exe,
                                "--no-ledger",
                                "__slo_fixture",
                                "--listen-fd",
                                "3",
                                "--ready-fd",
                                "4",
                                "--backend",
                                backend,
                                "--model",
                                o->model ? o->model : "mlp",
                                "--batch",
                                batch,
                                "--seed",
                                seed,
                                NULL};
    /* Its messages reach the terminal; it dies with this thread (no orphan server). */
    dg_proc_opts po = {.argv = argv,
                       .err = {.kind = DG_PROC_INHERIT},
                       .extra = {{.child_fd = 3, .io = {.kind = DG_PROC_FD, .fd = lfd}},
                                 {.child_fd = 4, .io = {.kind = DG_PROC_PIPE}}},
                       .n_extra = 2,
                       .die_with_parent = true};
    slo_fixture *f = dg_calloc(1, sizeof *f);
    dg_status st = f ? dg_proc_start(ctx, &po, &f->p)
                     : dg_fail(ctx, DG_ERR_NOMEM, "slo: fixture: out of memory");
    /* The child holds the socket now: were it to die, connections are refused, not queued. */
    close(lfd);
    if (st != DG_OK) {
        dg_free(f);
        return st;
    }
    cJSON *ready = read_ready(dg_proc_fd(f->p, 4), o->cancel);
    f->info = ready ? ready : cJSON_CreateObject();
    char how[96] = "";
    if (!cJSON_IsTrue(cJSON_GetObjectItem(ready, "ready"))) {
        const char *why = dg_jstr(ready, "error");
        char msg[DG_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", why ? why : "");
        bool ended = dg_slo_fixture_ended(f, how, sizeof how);
        cJSON_Delete(dg_slo_fixture_stop(f));
        if (o->cancel && *o->cancel)
            return dg_fail(ctx, DG_ERR_INTERRUPTED, "slo: interrupted");
        if (msg[0])
            return dg_fail(ctx, DG_ERR_UNAVAILABLE, "slo: the fixture server cannot serve: %s",
                           msg);
        return dg_fail(ctx, DG_ERR_UNAVAILABLE,
                       "slo: the fixture server (%s __slo_fixture) never said it was ready%s%s",
                       exe, ended ? ": it " : "", how);
    }
    snprintf(base, len, "http://127.0.0.1:%d", port);
    cJSON_DeleteItemFromObject(f->info, "ready");
    cJSON_DeleteItemFromObject(f->info, "error");
    dg_json_add_str(f->info, "url", base);
    cJSON_AddNumberToObject(f->info, "pid", dg_proc_pid(f->p));
    *out = f;
    return DG_OK;
}
