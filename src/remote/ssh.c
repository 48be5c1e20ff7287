/* The ssh transport of devgate remote: one call of `devgate __node WORDS` on
 * the node through the system's OpenSSH client (BatchMode, one shared
 * control connection per session), its answers capped in size, ssh's
 * failures told apart; the session handle and the node check. docs/team.md. */
#include "remote/remote_int.h"

#include "core/proc.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* The most bytes of the node's stderr kept for messages. */
#define ERR_MAX ((size_t)1 << 20)

dg_status dg_remote_failv(dg_ctx *ctx, dg_status st, const char *fmt, va_list ap)
{
    char *msg = dg_vasprintf(fmt, ap);
    dg_fail(ctx, st, "%s", msg ? msg : "remote: out of memory");
    dg_free(msg);
    return st;
}

dg_status dg_remote_fail(dg_remote *r, dg_remote_failure f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    r->failure = f;
    dg_status st =
        dg_remote_failv(r->ctx, f == DG_REMOTE_USAGE ? DG_ERR_USAGE : DG_ERR_UNAVAILABLE, fmt, ap);
    va_end(ap);
    return st;
}

void dg_remote_note(dg_remote *r, dg_remote_msg kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = dg_vasprintf(fmt, ap);
    va_end(ap);
    if (!msg)
        return;
    if (kind == DG_REMOTE_WARNING)
        cJSON_AddItemToArray(cJSON_GetObjectItem(r->extra, "warnings"), dg_json_string(msg));
    if (r->cfg.progress && !(kind == DG_REMOTE_NOTE && r->quiet_notes))
        r->cfg.progress(kind, msg, strlen(msg), r->cfg.user);
    dg_free(msg);
}

void dg_remote_last_line(const char *s, char *buf, size_t len)
{
    size_t n = s ? strlen(s) : 0;
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        n--;
    size_t start = n;
    while (start && s[start - 1] != '\n')
        start--;
    snprintf(buf, len, "%.*s", (int)(n - start), s ? s + start : "");
}

void dg_ssh_answer_free(dg_ssh_answer *a)
{
    dg_free(a->out);
    dg_free(a->err);
    a->out = a->err = NULL;
}

/* ssh's argv for one remote command line cmd (the program first). */
static int ssh_argv(const dg_remote *r, const char *cmd, const char **argv)
{
    int k = 0;
    argv[k++] = r->cfg.ssh && r->cfg.ssh[0] ? r->cfg.ssh : "ssh";
    static const char *const fixed[] = {"-o", "BatchMode=yes", "-o", "ConnectTimeout=10"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        argv[k++] = fixed[i];
    for (int i = 0; i < r->cfg.n_ssh_options && i < DG_REMOTE_MAX_OPTS; i++) {
        argv[k++] = "-o";
        argv[k++] = r->cfg.ssh_options[i];
    }
    if (r->mux_dir[0]) { /* one connection for all the calls of this session */
        argv[k++] = "-o";
        argv[k++] = "ControlMaster=auto";
        argv[k++] = "-o";
        argv[k++] = r->mux_opt;
        argv[k++] = "-o";
        argv[k++] = "ControlPersist=15";
    }
    argv[k++] = "--";
    argv[k++] = r->cfg.host;
    argv[k++] = cmd;
    argv[k] = NULL;
    return k;
}

/* Reads ssh's stdout and stderr at once (so neither fills while the other is
 * read) until both close; stdout kept up to the cap (ssh stopped past it),
 * stderr kept or streamed. */
static void ssh_collect(dg_remote *r, dg_proc *p, bool stream, dg_ssh_answer *a)
{
    dg_capbuf bufs[2] = {{.cap = DG_REMOTE_ANSWER_MAX}, {.cap = ERR_MAX}};
    struct pollfd pf[2] = {{.fd = dg_proc_fd(p, 1), .events = POLLIN},
                           {.fd = dg_proc_fd(p, 2), .events = POLLIN}};
    int open_fds = 2;
    while (open_fds > 0) {
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char chunk[16384];
            ssize_t got = read(pf[i].fd, chunk, sizeof chunk);
            if (got < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (got <= 0) { /* the handle closes it */
                pf[i].fd = -1;
                open_fds--;
                continue;
            }
            if (i == 0)
                a->out_bytes += (size_t)got;
            if (i == 1 && stream && r->cfg.progress)
                r->cfg.progress(DG_REMOTE_STREAM, chunk, (size_t)got, r->cfg.user);
            else
                dg_capbuf_add(&bufs[i], chunk, (size_t)got);
            if (i == 0 && bufs[0].truncated && !a->too_big) {
                a->too_big = true; /* a hostile or broken node: stop it rather than read on */
                dg_proc_kill(p, SIGTERM);
            }
        }
    }
    a->out = bufs[0].data ? bufs[0].data : dg_strdup("");
    a->err = bufs[1].data ? bufs[1].data : dg_strdup("");
}

dg_status dg_remote_ssh(dg_remote *r, const char *const *args, int in_fd, bool stream,
                        dg_ssh_answer *a)
{
    *a = (dg_ssh_answer){.rc = -1};
    const char *rargv[DG_REMOTE_MAX_ARGS + 8];
    int n = 0;
    rargv[n++] = r->cfg.devgate && r->cfg.devgate[0] ? r->cfg.devgate : "devgate";
    rargv[n++] = "__node";
    if (r->cfg.cache) {
        rargv[n++] = "--cache";
        rargv[n++] = r->cfg.cache;
    }
    for (int i = 0; args[i] && n < DG_REMOTE_MAX_ARGS; i++)
        rargv[n++] = args[i];
    rargv[n] = NULL;
    char *cmd = dg_shell_quote(rargv);
    if (!cmd)
        return dg_remote_fail(r, DG_REMOTE_USAGE, "remote: out of memory");
    const char *argv[2 * DG_REMOTE_MAX_OPTS + 16];
    ssh_argv(r, cmd, argv);
    /* leave_strays: a ControlPersist master ssh forks stays for the next call */
    dg_proc_opts o = {.argv = argv,
                      .in = in_fd >= 0 ? (dg_proc_io){.kind = DG_PROC_FD, .fd = in_fd}
                                       : (dg_proc_io){.kind = DG_PROC_NULL},
                      .out = {.kind = DG_PROC_PIPE},
                      .err = {.kind = DG_PROC_PIPE},
                      .leave_strays = true};
    dg_proc *p = NULL;
    dg_status st = dg_proc_start(r->ctx, &o, &p);
    dg_string_free(cmd);
    if (st != DG_OK)
        return dg_remote_fail(r, DG_REMOTE_USAGE, "remote: %s", dg_errmsg(r->ctx));
    ssh_collect(r, p, stream, a);
    dg_proc_result res;
    st = dg_proc_wait(r->ctx, p, &res);
    a->rc = st == DG_OK && res.exit_code >= 0 ? res.exit_code : 255;
    dg_proc_result_free(&res);
    dg_proc_free(p);
    if (!a->out || !a->err) {
        dg_ssh_answer_free(a);
        return dg_remote_fail(r, DG_REMOTE_USAGE, "remote: out of memory");
    }
    return DG_OK;
}

dg_status dg_remote_ssh_failure(dg_remote *r, const dg_ssh_answer *a, const char *doing)
{
    const char *host = r->cfg.host;
    if (a->too_big)
        return dg_remote_fail(r, DG_REMOTE_USAGE,
                              "remote %s: the node's answer while %s passed %zu MiB (%zu bytes "
                              "read); refused",
                              host, doing, DG_REMOTE_ANSWER_MAX >> 20, a->out_bytes);
    const char *err = a->err ? a->err : "";
    char line[512];
    dg_remote_last_line(err, line, sizeof line);
    if (a->rc == 255 && (strstr(err, "Permission denied") || strstr(err, "Authentication failed") ||
                         strstr(err, "Too many authentication failures")))
        return dg_remote_fail(r, DG_REMOTE_AUTH,
                              "remote %s: authentication refused while %s (%s); ssh runs with "
                              "BatchMode=yes: use a key the node accepts (ssh-agent, "
                              "IdentityFile in ~/.ssh/config or -o)",
                              host, doing, line);
    static const char *const unreachable[] = {
        "Connection refused",       "Could not resolve",      "timed out",
        "No route to host",         "Network is unreachable", "Connection closed",
        "Connection reset",         "kex_exchange",           "Host key verification failed",
        "Name or service not known"};
    for (size_t i = 0; a->rc == 255 && i < sizeof unreachable / sizeof unreachable[0]; i++)
        if (strstr(err, unreachable[i]))
            return dg_remote_fail(r, DG_REMOTE_UNREACHABLE,
                                  "remote %s: host unreachable while %s (%s)", host, doing, line);
    return dg_remote_fail(r, DG_REMOTE_USAGE,
                          "remote %s: ssh or the node's devgate failed while %s (exit %d: %s)",
                          host, doing, a->rc, line[0] ? line : "no message");
}

dg_status dg_remote_node_status(dg_remote *r, const dg_ssh_answer *a, const dg_node_words *w)
{
    if (a->rc == 255 || a->too_big)
        return dg_remote_ssh_failure(r, a, w->doing);
    if (a->rc == 0)
        return DG_OK;
    char line[256];
    dg_remote_last_line(a->err, line, sizeof line);
    if (a->rc == DG_NODE_EXIT_DISK)
        return dg_remote_fail(r, DG_REMOTE_DISK, "remote %s: disk full on the node%s: %s",
                              r->cfg.host, w->disk_while, line);
    return dg_remote_fail(r, a->rc == DG_NODE_EXIT_CORRUPT ? w->corrupt : DG_REMOTE_USAGE,
                          "remote %s: %s (exit %d): %s", r->cfg.host, w->failed, a->rc, line);
}

dg_status dg_remote_ask(dg_remote *r, const char *const *args, const char *doing, dg_ssh_answer *a)
{
    dg_status st = dg_remote_ssh(r, args, -1, false, a);
    if (st != DG_OK)
        return st;
    if (a->rc != 0 || a->too_big) {
        st = dg_remote_ssh_failure(r, a, doing);
        dg_ssh_answer_free(a);
    }
    return st;
}

/* One ssh connection for every call of this session (ControlMaster), unless
 * the user's options already name a ControlPath or ControlMaster. */
static void mux_start(dg_remote *r)
{
    for (int i = 0; i < r->cfg.n_ssh_options; i++)
        if (strncasecmp(r->cfg.ssh_options[i], "ControlPath", 11) == 0 ||
            strncasecmp(r->cfg.ssh_options[i], "ControlMaster", 13) == 0)
            return;
    const char *tmp = getenv("TMPDIR");
    snprintf(r->mux_dir, sizeof r->mux_dir, "%s/dg-ssh-XXXXXX",
             tmp && tmp[0] && strlen(tmp) < 30 ? tmp : "/tmp");
    if (!mkdtemp(r->mux_dir)) {
        r->mux_dir[0] = '\0';
        return;
    }
    snprintf(r->mux_opt, sizeof r->mux_opt, "ControlPath=%s/cm", r->mux_dir);
}

/* Closes our control connection and its folder. */
static void mux_stop(dg_remote *r)
{
    if (!r->mux_dir[0])
        return;
    const char *ssh = r->cfg.ssh && r->cfg.ssh[0] ? r->cfg.ssh : "ssh";
    const char *argv[] = {ssh, "-o", r->mux_opt, "-O", "exit", "--", r->cfg.host, NULL};
    dg_proc_opts o = {.argv = argv, .timeout_s = 30};
    dg_proc_result res;
    dg_proc_run(NULL, &o, &res);
    dg_proc_result_free(&res);
    char sock[128];
    snprintf(sock, sizeof sock, "%s/cm", r->mux_dir);
    unlink(sock);
    rmdir(r->mux_dir);
}

dg_status dg_remote_open(dg_ctx *ctx, const dg_remote_config *cfg, dg_remote **out)
{
    *out = NULL;
    if (!cfg || !cfg->host || !cfg->host[0] || cfg->n_ssh_options > DG_REMOTE_MAX_OPTS)
        return dg_fail(ctx, DG_ERR_USAGE, "remote: a host and at most %d ssh options",
                       DG_REMOTE_MAX_OPTS);
    dg_remote *r = dg_calloc(1, sizeof *r);
    cJSON *extra = cJSON_CreateObject();
    if (!r || !extra || !cJSON_AddArrayToObject(extra, "warnings")) {
        dg_free(r);
        cJSON_Delete(extra);
        return dg_fail(ctx, DG_ERR_NOMEM, "remote: out of memory");
    }
    r->ctx = ctx;
    r->cfg = *cfg;
    r->extra = extra;
    mux_start(r);
    *out = r;
    return DG_OK;
}

void dg_remote_close(dg_remote *r)
{
    if (!r)
        return;
    mux_stop(r);
    cJSON_Delete(r->extra);
    dg_free(r);
}

dg_remote_failure dg_remote_failure_of(const dg_remote *r)
{
    return r ? r->failure : DG_REMOTE_USAGE;
}

void dg_remote_parse_info(const char *text, int *protocol, cJSON **info)
{
    *protocol = -1;
    *info = NULL;
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    const cJSON *proto = cJSON_GetObjectItem(j, "protocol");
    if (!cJSON_IsObject(j) || !cJSON_IsNumber(proto) || proto->valuedouble < 0 ||
        proto->valuedouble > 1e6) {
        cJSON_Delete(j);
        return;
    }
    *protocol = (int)proto->valuedouble;
    *info = j;
}

/* The node's version and commit against ours: warnings when they differ. */
static void info_warnings(dg_remote *r, const cJSON *info)
{
    const cJSON *v = cJSON_GetObjectItem(info, "version"), *c = cJSON_GetObjectItem(info, "commit");
    char ver[64], commit[64];
    dg_copy_clean(ver, sizeof ver, cJSON_IsString(v) ? v->valuestring : "?");
    dg_copy_clean(commit, sizeof commit, cJSON_IsString(c) ? c->valuestring : "?");
    if (strcmp(ver, DG_VERSION) != 0)
        dg_remote_note(r, DG_REMOTE_WARNING, "node devgate version %s differs from local %s", ver,
                       DG_VERSION);
    if (strcmp(commit, dg_build_commit()) != 0)
        dg_remote_note(r, DG_REMOTE_WARNING, "node devgate commit %.12s differs from local %.12s",
                       commit, dg_build_commit());
}

dg_status dg_remote_check(dg_remote *r)
{
    r->failure = DG_REMOTE_OK;
    const char *args[] = {"info", NULL};
    const char *dgn = r->cfg.devgate && r->cfg.devgate[0] ? r->cfg.devgate : "devgate";
    dg_ssh_answer a;
    dg_status st = dg_remote_ssh(r, args, -1, false, &a);
    if (st != DG_OK)
        return st;
    if (a.rc == 255 || a.too_big) {
        st = dg_remote_ssh_failure(r, &a, "checking the node");
    } else if (a.rc == 127 || a.rc == 126) {
        st = dg_remote_fail(r, DG_REMOTE_DEVGATE,
                            "remote %s: devgate is missing on the node (%s not found or not "
                            "executable); install it there or name it with --devgate PATH",
                            r->cfg.host, dgn);
    } else {
        int proto = -1;
        cJSON *info = NULL;
        if (a.rc == 0)
            dg_remote_parse_info(a.out, &proto, &info);
        char line[256];
        dg_remote_last_line(a.err, line, sizeof line);
        if (proto < 0)
            st = dg_remote_fail(r, DG_REMOTE_DEVGATE,
                                "remote %s: the node's devgate is too old or not devgate (no "
                                "node protocol: '%s' exited %d: %s); install this version (%s) "
                                "there",
                                r->cfg.host, dgn, a.rc, line, DG_VERSION);
        else if (proto != DG_REMOTE_PROTOCOL)
            st = dg_remote_fail(r, DG_REMOTE_DEVGATE,
                                "remote %s: the node speaks protocol %d, this devgate %d; install "
                                "devgate %s there",
                                r->cfg.host, proto, DG_REMOTE_PROTOCOL, DG_VERSION);
        else
            info_warnings(r, info);
        cJSON_Delete(info);
    }
    dg_ssh_answer_free(&a);
    return st;
}
