/* The fixture's sweep trials (METHOD.md step 3; docs/measure.md "Sweep",
 * record in docs/schema/measure.md "sweep"), the fixture runner's `trial`,
 * and `devgate sweep`: the method's one sweep driver (src/steps/method.c)
 * over these trials.
 *
 * Each trial runs in a child process (`devgate --no-ledger __trial ...`),
 * kept for the next trial while trials end ok (the trial server, below;
 * DEVGATE_SWEEP_REUSE=off: a process per trial), started
 * by core/proc.c without a shell in its own process group, with stdout on /dev/null, stderr
 * on a pipe (its first line is the failure reason when there is no record)
 * a result pipe on fd 3 (`--result-fd 3`) carrying the child's training
 * record as one JSON line, and the trial's spec (the canonical spec JSON of
 * dg_spec_encode, decoded by the child with the same codec) on stdin
 * (`--spec-fd 0`). Whatever the child does (dies, hangs, writes
 * garbage, closes the pipe) ends that trial only: a deadline kills the whole
 * group with SIGKILL, the child is always reaped, and everything read from it
 * is parsed as untrusted text.
 *
 * Test hooks (child side, dg_sweep_trial): DEVGATE_FAULT=trial-crash@BATCH
 * raises SIGSEGV and DEVGATE_FAULT=trial-hang@BATCH sleeps forever when the
 * trial's batch is BATCH; DEVGATE_TRIAL_PLAN plants a throughput curve
 * (planted_trial). */
#include "backend/backend.h"
#include "core/core.h"
#include "core/json.h"
#include "core/proc.h"
#include "core/record.h"
#include "data/data.h"
#include "engine/train.h"
#include "measure/measure.h"
#include "steps/runner.h"
#include "steps/steps.h"
#include "supervise/supervise.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_FROM 8
#define DEFAULT_WARMUP 3
#define DEFAULT_TIMED 20
#define DEFAULT_TIMEOUT_S 120.0
#define DEFAULT_SWAP_MIB 256.0
#define RESULT_MAX ((size_t)32 << 20) /* bytes of record kept from a child */
#define ERR_MAX ((size_t)16 << 10)    /* bytes of stderr kept from a child */
#define RESULT_FD 3                   /* where the child finds the result pipe (argv's "3") */
#define SPEC_MAX ((size_t)60 << 10)   /* spec bytes handed over (under a pipe's 64 KiB) */

/* ---- small helpers --------------------------------------------------------- */

/* ---- running one child ------------------------------------------------------- */

typedef struct child_run {
    dg_trial_child c;
    dg_capbuf out; /* the result pipe */
} child_run;

/* First non-empty line of text into dst (cleaned); "" when none. */
static void first_line(char *dst, size_t n, const char *text)
{
    dst[0] = '\0';
    if (!text)
        return;
    while (*text == '\n' || *text == '\r' || *text == ' ')
        text++;
    size_t len = strcspn(text, "\r\n");
    char tmp[512];
    if (len >= sizeof tmp)
        len = sizeof tmp - 1;
    memcpy(tmp, text, len);
    tmp[len] = '\0';
    dg_copy_clean(dst, n, tmp);
}

/* Runs exe's `__trial` (core/proc.c: no shell, its own process group, the
 * input on stdin, stdout on /dev/null, stderr and the result pipe on fd 3
 * captured) until it ends, timeout_s passes or *cancel is set (then its group
 * is killed), and reaps it. false only when out of memory. */
static bool run_child(dg_ctx *ctx, const char *exe, const char *input, double timeout_s,
                      const volatile sig_atomic_t *cancel, child_run *r)
{
    memset(r, 0, sizeof *r);
    r->c.exit_code = -1;
    const char *const args[] = {exe, "--no-ledger", "__trial", "--spec-fd",
                                "0", "--result-fd", "3",       NULL};
    dg_proc_opts po = {
        .argv = args,
        .in = {.kind = DG_PROC_BUFFER, .data = input, .len = strlen(input)},
        .err = {.kind = DG_PROC_CAPTURE, .cap = ERR_MAX},
        .extra = {{.child_fd = RESULT_FD, .io = {.kind = DG_PROC_CAPTURE, .cap = RESULT_MAX}}},
        .n_extra = 1,
        .timeout_s = timeout_s,
        .cancel = cancel,
    };
    dg_proc_result pr;
    dg_status st = dg_proc_run(ctx, &po, &pr);
    r->c.started = pr.started;
    r->c.timed_out = pr.timed_out;
    r->c.interrupted = pr.cancelled;
    r->c.exit_code = pr.exit_code;
    r->c.sig = pr.sig;
    r->c.wall_s = pr.wall_s;
    r->out = pr.extra[0];
    pr.extra[0] = (dg_capbuf){0};
    if (!pr.started)
        snprintf(r->c.err_line, sizeof r->c.err_line, "cannot start the trial: %s", pr.error);
    else
        first_line(r->c.err_line, sizeof r->c.err_line, pr.err.data);
    bool ok = st != DG_ERR_NOMEM && !r->out.nomem && !pr.err.nomem;
    dg_proc_result_free(&pr);
    return ok;
}

/* ---- reading the child's record ------------------------------------------------ */

/* A metric of obj[key] (never trusting the child's shape). */
static dg_metric metric_of(const cJSON *obj, const char *key)
{
    const cJSON *m = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "value");
    bool ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "valid")) && cJSON_IsNumber(v) &&
              isfinite(v->valuedouble);
    return (dg_metric){ok ? v->valuedouble : 0, ok};
}

static const cJSON *path2(const cJSON *o, const char *a, const char *b)
{
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, a), b);
}

/* Parses the first line of the result pipe (len bytes at out); NULL unless
 * it is a JSON object with a "status" string. */
static cJSON *parse_record(const char *out, size_t len)
{
    if (!out || len == 0)
        return NULL;
    const char *nl = memchr(out, '\n', len);
    cJSON *rec = cJSON_ParseWithLength(out, nl ? (size_t)(nl - out) : len);
    if (!cJSON_IsObject(rec) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(rec, "status"))) {
        cJSON_Delete(rec);
        return NULL;
    }
    return rec;
}

/* ---- the trial server ------------------------------------------------------------ */

/* One child (`__trial --serve`) runs trial after trial: each spec one line on
 * its stdin, each record one line on fd 3. A process's start (the device
 * context and the libraries: about 0.5 s of a 0.7 s trial on the H200) is
 * paid once while the trials end "ok"; a trial that does not, or a child that
 * dies, hangs or writes garbage, ends that server, and the next trial starts
 * a fresh one. The trials a server runs grow in batch (the doubling, and the
 * bisection after its first good batch), so what a process keeps of an
 * earlier trial (its heap's high-water RSS) is below the current one's. */
typedef struct trial_server {
    dg_proc *p;
    int in, res, err;    /* the parent's ends: specs, records, stderr */
    dg_capbuf out, errs; /* the current trial's record and stderr */
} trial_server;

/* Ends the server: EOF on its stdin lets it exit; one still running after
 * 10 s, or at once when `kill`, has its group killed (and what it left in
 * its group goes with it in dg_proc_wait either way). How the child ended
 * goes to *end when given; true when it was killed. */
static bool server_close(dg_ctx *ctx, trial_server *v, bool kill, dg_proc_result *end)
{
    if (!v)
        return false;
    dg_proc_result pr;
    memset(&pr, 0, sizeof pr);
    dg_proc_fd_close(v->p, 0);
    siginfo_t si;
    for (double t0 = dg_now(); !kill; kill = dg_now() - t0 >= 10) {
        memset(&si, 0, sizeof si); /* ended, not yet reaped: dg_proc_wait reaps it */
        if (waitid(P_PID, (id_t)dg_proc_pid(v->p), &si, WEXITED | WNOHANG | WNOWAIT) != 0 ||
            si.si_pid != 0)
            break;
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    if (kill)
        dg_proc_kill(v->p, SIGKILL);
    dg_proc_wait(ctx, v->p, &pr);
    if (end)
        *end = pr;
    else
        dg_proc_result_free(&pr);
    dg_proc_free(v->p);
    dg_free(v->out.data);
    dg_free(v->errs.data);
    dg_free(v);
    return kill;
}

static trial_server *server_start(dg_ctx *ctx, const char *exe, child_run *r)
{
    trial_server *v = dg_calloc(1, sizeof *v);
    if (!v)
        return NULL;
    const char *const args[] = {exe, "--no-ledger", "__trial", "--serve", "--spec-fd",
                                "0", "--result-fd", "3",       NULL};
    dg_proc_opts po = {
        .argv = args,
        .in = {.kind = DG_PROC_PIPE},
        .err = {.kind = DG_PROC_PIPE},
        .extra = {{.child_fd = RESULT_FD, .io = {.kind = DG_PROC_PIPE}}},
        .n_extra = 1,
    };
    if (dg_proc_start(ctx, &po, &v->p) != DG_OK) {
        snprintf(r->c.err_line, sizeof r->c.err_line, "cannot start the trial: %s", dg_errmsg(ctx));
        dg_free(v);
        return NULL;
    }
    v->in = dg_proc_fd(v->p, 0);
    v->res = dg_proc_fd(v->p, RESULT_FD);
    v->err = dg_proc_fd(v->p, 2);
    v->out.cap = RESULT_MAX;
    v->errs.cap = ERR_MAX;
    return v;
}

/* Writes all of s and a newline to fd; false on error. */
static bool write_line(int fd, const char *s);

/* write_line to a pipe whose reader may be gone: SIGPIPE blocked on this
 * thread for the write and one it raised taken, so a dead server is an
 * EPIPE here and never the caller's signal. */
static bool write_line_nosig(int fd, const char *s)
{
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    bool was_pending = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    bool ok = write_line(fd, s);
    int e = errno;
    if (!ok && e == EPIPE && !was_pending)
        sigtimedwait(&pipe_set, NULL, &(struct timespec){0, 0});
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return ok;
}

/* One trial through the server *pv (started when NULL): the spec handed
 * over, then its record line awaited until timeout_s or *cancel. The server
 * is ended (and *pv NULL) unless the trial's record came and said "ok". r as
 * run_child fills it (wall: the spec handed over to the record read, the
 * first trial of a server with its start). false only when out of memory. */
static bool served_trial(dg_ctx *ctx, const char *exe, trial_server **pv, const char *spec,
                         int batch, double timeout_s, const volatile sig_atomic_t *cancel,
                         child_run *r)
{
    memset(r, 0, sizeof *r);
    r->c.exit_code = -1;
    double t0 = dg_now();
    trial_server *v = *pv ? *pv : server_start(ctx, exe, r);
    *pv = v;
    if (!v)
        return true; /* started false: err_line says why */
    r->c.started = true;
    v->out.len = v->errs.len = 0;
    v->out.truncated = v->errs.truncated = false;
    bool got = false, dead = !write_line_nosig(v->in, spec);
    while (!got && !dead) {
        if (cancel && *cancel) {
            r->c.interrupted = true;
            break;
        }
        double left = timeout_s - (dg_now() - t0);
        if (left <= 0) {
            r->c.timed_out = true;
            break;
        }
        struct pollfd fds[2] = {{.fd = v->res, .events = POLLIN}, {.fd = v->err, .events = POLLIN}};
        int wait_ms = left > 0.1 ? 100 : (int)(left * 1000) + 1;
        if (poll(fds, 2, wait_ms) < 0 && errno != EINTR)
            dead = true;
        if (v->err >= 0 && dg_capbuf_drain(v->err, &v->errs))
            v->err = -1; /* closed (the handle still owns it) */
        dead = dg_capbuf_drain(v->res, &v->out) || dead;
        got = v->out.len > 0 && memchr(v->out.data, '\n', v->out.len) != NULL;
        if (v->out.nomem || v->errs.nomem)
            break;
    }
    r->c.wall_s = dg_now() - t0;
    if (v->err >= 0 && dg_capbuf_drain(v->err, &v->errs))
        v->err = -1;                                    /* what a dying child said last */
    if (!got && !r->c.timed_out && !r->c.interrupted) { /* a child that wrote and ended before */
        dg_capbuf_drain(v->res, &v->out);               /* its spec came (EPIPE) */
        got = v->out.len > 0 && memchr(v->out.data, '\n', v->out.len) != NULL;
    }
    bool mem_ok = !v->out.nomem && !v->errs.nomem;
    cJSON *rec = got ? parse_record(v->out.data, v->out.len) : NULL;
    const cJSON *stj = cJSON_GetObjectItemCaseSensitive(rec, "status");
    bool keep = rec && cJSON_IsString(stj) && strcmp(stj->valuestring, "ok") == 0;
    /* A record of another batch (a line left over from an earlier trial) is
     * not this trial's: no record, and a server that wrote it is not kept. */
    const cJSON *rb =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rec, "spec"), "batch");
    char stale[96] = "";
    if (cJSON_IsNumber(rb) && rb->valuedouble != batch) {
        snprintf(stale, sizeof stale, "a record of batch %.0f, not this trial's %d",
                 rb->valuedouble, batch);
        v->out.len = 0;
        keep = false;
    }
    cJSON_Delete(rec);
    r->out = v->out; /* the caller frees it: the server gets a fresh buffer */
    v->out = (dg_capbuf){.cap = RESULT_MAX};
    if (got)
        r->c.exit_code = 0;
    if (!got || !keep) {
        dg_proc_result end;
        char errs[512];
        snprintf(errs, sizeof errs, "%.*s", (int)(v->errs.len < 511 ? v->errs.len : 511),
                 v->errs.data ? v->errs.data : "");
        bool killed = server_close(ctx, v, !got && !dead, &end);
        *pv = NULL;
        if (!killed) { /* it ended on its own: its exit is the trial's, as without a server */
            r->c.exit_code = end.exit_code;
            r->c.sig = end.sig;
        }
        first_line(r->c.err_line, sizeof r->c.err_line, stale[0] ? stale : errs);
        dg_proc_result_free(&end);
    }
    return mem_ok;
}

/* Fills the trial's measurements from the child's record (may be NULL). */
static void trial_metrics(dg_trial_result *t, int batch, const cJSON *rec, int warmup,
                          double swap_limit_bytes)
{
    const cJSON *thr = cJSON_GetObjectItemCaseSensitive(rec, "throughput");
    const cJSON *stats = path2(rec, "steps", "stats");
    dg_metric m = metric_of(thr, "samples_per_s");
    double sps = t->end == DG_TRIAL_OK && m.valid ? m.value : NAN;
    /* Per-step times after the sweep's own warm-up, else the child's statistics. */
    const cJSON *ms = path2(rec, "steps", "ms");
    int n = cJSON_IsArray(ms) ? cJSON_GetArraySize(ms) : 0;
    double *v = n > warmup ? dg_malloc((size_t)n * sizeof *v) : NULL;
    int nv = 0;
    double med = NAN, iqr = NAN, nst = NAN; /* the step times the rate's interval rests on */
    const double *after = NULL;
    size_t nafter = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, ms)
    {
        if (v && nv < n && cJSON_IsNumber(x) && isfinite(x->valuedouble))
            v[nv++] = x->valuedouble;
    }
    if (v && nv == n) {
        dg_stats st;
        dg_stats_compute(v, (size_t)n, (size_t)warmup, &st);
        t->step_median = (dg_metric){st.median, isfinite(st.median)};
        t->step_iqr = (dg_metric){st.iqr, isfinite(st.iqr)};
        t->steps = (double)st.n;
        t->step_source = "steps";
        after = v + warmup;
        nafter = st.n;
    } else if (stats && metric_of(stats, "median").valid) {
        const cJSON *sn = cJSON_GetObjectItemCaseSensitive(stats, "n");
        t->step_median = metric_of(stats, "median");
        t->step_iqr = metric_of(stats, "iqr");
        t->steps = cJSON_IsNumber(sn) ? sn->valuedouble : 0;
        t->step_source = "steps";
        med = t->step_median.value;
        iqr = t->step_iqr.valid ? t->step_iqr.value : NAN;
        nst = cJSON_IsNumber(sn) ? sn->valuedouble : NAN;
    } else {
        const cJSON *tn = cJSON_GetObjectItemCaseSensitive(thr, "timed_steps");
        t->step_median = metric_of(thr, "step_ms");
        t->steps = cJSON_IsNumber(tn) ? tn->valuedouble : 0;
        t->step_source = rec ? "throughput" : "none";
    }
    t->rate = dg_sweep_rate_ci(sps, after, nafter, med, iqr, nst);
    dg_free(v);
    /* The timed steps' own time, as the command's trials measure theirs. */
    double timed = dg_jnum(thr, "timed_steps");
    t->samples = isfinite(sps) && timed > 0 ? timed * batch : NAN;
    t->loop_s = isfinite(sps) && sps > 0 ? t->samples / sps : NAN;
    const cJSON *al = path2(rec, "memory", "allocator");
    t->allocated_peak = metric_of(al, "allocated_peak");
    t->reserved_peak = metric_of(al, "reserved_peak");
    const cJSON *smp = cJSON_GetObjectItemCaseSensitive(rec, "sampler");
    t->rss_peak = metric_of(smp, "rss_peak");
    t->swap_growth = metric_of(smp, "swap_growth");
    t->swapped = t->swap_growth.valid && t->swap_growth.value > swap_limit_bytes;
    t->psi_peak = metric_of(smp, "psi_peak");
    /* Energy per sample beside samples/s, where the device reports its energy. */
    dg_metric e = metric_of(thr, "energy_per_sample");
    if (t->extra && rec)
        cJSON_AddItemToObject(
            t->extra, "energy_per_sample",
            dg_json_metric(e.value, e.valid && t->end == DG_TRIAL_OK, "J/sample"));
}

/* ---- one trial ------------------------------------------------------------------ */

struct dg_fixture_sweep {
    dg_ctx *ctx;
    dg_train_opts train; /* with the budget filled in */
    const char *exe;
    char exe_buf[PATH_MAX];
    int warmup, timed;
    double timeout_s, swap_limit;
    bool reuse;        /* trials through a server (unless DEVGATE_SWEEP_REUSE=off) */
    trial_server *srv; /* the one running, NULL between servers */
};

/* How the child ended, from what run_child saw and the record (may be NULL);
 * *signame the signal's name when a signal ended it. */
static dg_trial_end child_end(double timeout_s, const dg_trial_child *r, const cJSON *rec,
                              char *reason, size_t len, const char **signame, char *sigtmp,
                              size_t siglen)
{
    const char *status = rec ? cJSON_GetObjectItemCaseSensitive(rec, "status")->valuestring : NULL;
    const cJSON *errj = cJSON_GetObjectItemCaseSensitive(rec, "error");
    char e[512] = "";
    if (cJSON_IsString(errj))
        dg_copy_clean(e, sizeof e, errj->valuestring);
    if (!r->started) {
        snprintf(reason, len, "%s", r->err_line);
        return DG_TRIAL_FAILED;
    }
    if (r->interrupted) {
        snprintf(reason, len, "interrupted; process group killed");
        return DG_TRIAL_INTERRUPTED;
    }
    if (r->timed_out) {
        snprintf(reason, len, "no result within %g s; process group killed", timeout_s);
        return DG_TRIAL_TIMEOUT;
    }
    if (r->sig) {
        *signame = dg_signal_name(r->sig, sigtmp, siglen);
        snprintf(reason, len, "%s%s", *signame,
                 r->sig == SIGKILL ? " (the kernel's out-of-memory killer sends this)" : "");
        return DG_TRIAL_SIGNAL;
    }
    if (!rec) {
        snprintf(reason, len, "no record (exit %d)%s%s", r->exit_code, r->err_line[0] ? ": " : "",
                 r->err_line);
        return DG_TRIAL_FAILED;
    }
    if (strcmp(status, "device-oom") == 0) {
        snprintf(reason, len, "%s", e[0] ? e : "device out of memory");
        return strstr(e, "budget would be exceeded") ? DG_TRIAL_BUDGET : DG_TRIAL_OOM;
    }
    if (strcmp(status, "ok") == 0 && r->exit_code == 0)
        return DG_TRIAL_OK;
    char stn[40];
    dg_copy_clean(stn, sizeof stn, status);
    snprintf(reason, len, "%s (exit %d)%s%s", stn, r->exit_code, e[0] || r->err_line[0] ? ": " : "",
             e[0] ? e : r->err_line);
    return DG_TRIAL_FAILED;
}

void dg_fixture_trial_read(const dg_trial_child *c, const char *out, size_t len, int batch,
                           int warmup, double swap_limit, double timeout_s, dg_trial_result *t)
{
    cJSON *rec = c->started && !c->timed_out && !c->interrupted && c->sig == 0
                     ? parse_record(out, len)
                     : NULL;
    char sigtmp[32];
    const char *signame = NULL;
    t->end =
        child_end(timeout_s, c, rec, t->reason, sizeof t->reason, &signame, sigtmp, sizeof sigtmp);
    t->extra = cJSON_CreateObject();
    dg_json_add_str(t->extra, "signal", signame);
    trial_metrics(t, batch, rec, warmup, swap_limit);
    t->wall_s = (dg_metric){c->wall_s, c->started};
    cJSON_Delete(rec);
}

dg_status dg_fixture_sweep_trial(void *fs, int b, dg_trial_result *t)
{
    dg_fixture_sweep *s = fs;
    dg_train_opts to = s->train;
    to.batch = b;
    to.steps = s->warmup + s->timed;
    to.epochs = 1;
    if (to.sync_every <= 0) /* every step, so each step time is a device time */
        to.sync_every = 1;
    char *spec = NULL;
    if (dg_spec_encode(s->ctx, &to, &spec) != DG_OK)
        return DG_ERR_NOMEM;
    if (strlen(spec) > SPEC_MAX) {
        dg_string_free(spec);
        return DG_ERR_NOMEM;
    }
    child_run r;
    bool mem_ok =
        s->reuse ? served_trial(s->ctx, s->exe, &s->srv, spec, b, s->timeout_s, s->train.cancel, &r)
                 : run_child(s->ctx, s->exe, spec, s->timeout_s, s->train.cancel, &r);
    dg_string_free(spec);
    if (!mem_ok) {
        dg_free(r.out.data);
        return DG_ERR_NOMEM;
    }
    dg_fixture_trial_read(&r.c, r.out.data, r.out.len, b, s->warmup, s->swap_limit, s->timeout_s,
                          t);
    dg_free(r.out.data);
    return t->extra ? DG_OK : DG_ERR_NOMEM;
}

/* ---- the sweep ------------------------------------------------------------------- */

/* Fills s->train.mem_budget when not given: 90% of the device's memory, or of
 * MemAvailable on cpu. DG_ERR_UNAVAILABLE when the backend cannot be opened. */
static dg_status settle_budget(dg_fixture_sweep *s, cJSON *spec)
{
    const char *name = s->train.backend ? s->train.backend : "cpu";
    dg_backend_entry ent;
    dg_status st = dg_backend_lookup(s->ctx, name, &ent);
    if (st != DG_OK)
        return DG_ERR_USAGE; /* unknown name; lookup left the message */
    if (!ent.iface)
        return dg_fail(s->ctx, DG_ERR_UNAVAILABLE, "backend %s is not available: %s", name,
                       ent.reason);
    void *bctx = NULL;
    char why[256] = "";
    st = ent.iface->init(s->train.device, &bctx, why, sizeof why);
    if (st != DG_OK)
        return dg_fail(s->ctx, DG_ERR_UNAVAILABLE, "backend %s is not available: %s", name,
                       why[0] ? why : dg_status_name(st));
    dg_device_info info;
    memset(&info, 0, sizeof info);
    bool have = ent.iface->device_info(bctx, s->train.device, &info) == DG_OK;
    ent.iface->free(bctx);
    cJSON *dev = cJSON_AddObjectToObject(spec, "device");
    char clean[128];
    dg_copy_clean(clean, sizeof clean, have ? info.name : "");
    dg_json_add_str(dev, "name", have ? clean : NULL);
    cJSON_AddItemToObject(
        dev, "mem_total",
        dg_json_metric(info.mem_total.value, have && info.mem_total.valid, "bytes"));
    cJSON_AddItemToObject(
        dev, "mem_free", dg_json_metric(info.mem_free.value, have && info.mem_free.valid, "bytes"));
    const char *src = "option";
    if (!s->train.mem_budget) {
        bool cpu = strcmp(name, "cpu") == 0;
        dg_metric base = cpu ? info.mem_free : info.mem_total;
        if (have && base.valid && base.value > 0) {
            s->train.mem_budget = (size_t)(0.9 * base.value);
            src = cpu ? "90% of MemAvailable" : "90% of device memory";
        } else {
            src = "none (device memory not reported)";
        }
    }
    cJSON_AddItemToObject(
        spec, "mem_budget",
        dg_json_metric((double)s->train.mem_budget, s->train.mem_budget > 0, "bytes"));
    cJSON_AddStringToObject(spec, "mem_budget_source", src);
    return DG_OK;
}

/* The training set the trials draw from, in samples; NAN when it cannot be
 * told (the source does not open: the trials then fail and say why). The
 * synthetic source has --samples or its cap; a file source its samples less
 * the validation split, as the loader holds it out. */
static double train_set_size(const dg_train_opts *o)
{
    const char *spec = o->data ? o->data : "synthetic";
    if (strcmp(spec, "synthetic") == 0)
        return o->samples ? (double)o->samples : DG_SYNTH_SAMPLES_CAP;
    dg_ctx *scratch = dg_ctx_new(); /* a source that does not open is the trials' to report */
    dg_source *src = NULL;
    dg_source_opts so = {.seed = o->seed};
    double n = NAN;
    if (scratch && dg_source_open(scratch, spec, &so, &src) == DG_OK) {
        size_t all = dg_source_count(src), val = 0;
        if (o->val_split > 0 && o->val_split < 1) {
            val = (size_t)floor(o->val_split * (double)all);
            val = val ? val : 1;
        }
        n = all > val ? (double)(all - val) : NAN;
    }
    dg_source_close(src);
    dg_ctx_free(scratch);
    return n;
}

/* The sweep record's head and spec (docs/schema/measure.md "sweep"). */
static cJSON *sweep_spec(const dg_fixture_sweep *s, const dg_sweep_opts *opts, cJSON *root,
                         int from, double ntrain)
{
    dg_record_head(root, "sweep", 1);
    cJSON *spec = cJSON_AddObjectToObject(root, "spec");
    dg_json_add_str(spec, "model", s->train.model ? s->train.model : "mlp");
    dg_json_add_str(spec, "backend", s->train.backend ? s->train.backend : "cpu");
    cJSON_AddNumberToObject(spec, "device_index", s->train.device);
    dg_json_add_str(spec, "data", s->train.data ? s->train.data : "synthetic");
    cJSON_AddNumberToObject(spec, "threads", s->train.threads);
    cJSON_AddNumberToObject(spec, "workers", s->train.workers < 0 ? 0 : s->train.workers);
    cJSON_AddNumberToObject(spec, "seed", (double)s->train.seed);
    cJSON_AddNumberToObject(spec, "from", from);
    if (opts->to > 0)
        cJSON_AddNumberToObject(spec, "to", opts->to);
    else
        cJSON_AddNullToObject(spec, "to");
    cJSON_AddBoolToObject(spec, "bisect", !opts->no_bisect);
    cJSON_AddNumberToObject(spec, "warmup_steps", s->warmup);
    cJSON_AddNumberToObject(spec, "timed_steps", s->timed);
    cJSON_AddNumberToObject(spec, "sync_every", s->train.sync_every > 0 ? s->train.sync_every : 1);
    cJSON_AddNumberToObject(spec, "trial_timeout_s", s->timeout_s);
    if (opts->max_trial_s > 0)
        cJSON_AddNumberToObject(spec, "max_trial_s", opts->max_trial_s);
    else
        cJSON_AddNullToObject(spec, "max_trial_s");
    cJSON_AddNumberToObject(spec, "swap_growth_mib", s->swap_limit / 1048576.0);
    cJSON_AddItemToObject(spec, "train_samples",
                          dg_json_metric(isnan(ntrain) ? 0 : ntrain, !isnan(ntrain), "samples"));
    return spec;
}

/* The options' checks: the program trials re-execute, the range, the steps,
 * the spec's hand-off. */
static dg_status sweep_check(dg_ctx *ctx, dg_fixture_sweep *s, const dg_sweep_opts *opts, int from,
                             int to)
{
    if (opts->exe) {
        s->exe = opts->exe;
    } else {
        ssize_t n = readlink("/proc/self/exe", s->exe_buf, sizeof s->exe_buf - 1);
        if (n <= 0)
            return dg_fail(ctx, DG_ERR_IO,
                           "sweep: cannot tell which program to run trials with: %s",
                           strerror(errno));
        s->exe_buf[n] = '\0';
        s->exe = s->exe_buf;
    }
    if (from > DG_SWEEP_MAX_BATCH || to < from)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "sweep: batches from %d to %d: want 1 <= from <= to <= %d", from, opts->to,
                       DG_SWEEP_MAX_BATCH);
    if (s->warmup + s->timed > 100000000 || s->warmup > 100000000 || s->timed > 100000000)
        return dg_fail(ctx, DG_ERR_USAGE, "sweep: too many steps per trial");
    char *tspec = NULL; /* the trials' spec must encode, and fit the hand-off */
    dg_status st = dg_spec_encode(ctx, &s->train, &tspec);
    if (st == DG_OK && strlen(tspec) > SPEC_MAX)
        st = dg_fail(ctx, DG_ERR_USAGE, "sweep: the training spec is over %zu bytes", SPEC_MAX);
    dg_string_free(tspec);
    return st;
}

dg_status dg_fixture_sweep_open(dg_ctx *ctx, const dg_sweep_opts *opts, cJSON *root,
                                dg_sweep_plan *plan, dg_fixture_sweep **out)
{
    *out = NULL;
    if (!opts)
        return dg_fail(ctx, DG_ERR_USAGE, "sweep: no options");
    if (dg_train_opts_inputs_check(ctx, &opts->train, NULL) != DG_OK)
        return DG_ERR_USAGE; /* before any trial runs */
    dg_fixture_sweep *s = dg_calloc(1, sizeof *s);
    if (!s)
        return dg_fail(ctx, DG_ERR_NOMEM, "sweep: out of host memory");
    s->ctx = ctx;
    s->train = opts->train;
    s->train.batch = 0;
    const char *reuse = getenv("DEVGATE_SWEEP_REUSE");
    s->reuse = !(reuse && strcmp(reuse, "off") == 0);
    s->warmup = opts->warmup_steps > 0 ? opts->warmup_steps : DEFAULT_WARMUP;
    s->timed = opts->timed_steps > 0 ? opts->timed_steps : DEFAULT_TIMED;
    s->timeout_s = opts->trial_timeout_s > 0 ? opts->trial_timeout_s : DEFAULT_TIMEOUT_S;
    s->swap_limit =
        (opts->swap_growth_mib > 0 ? opts->swap_growth_mib : DEFAULT_SWAP_MIB) * 1048576.0;
    int from = opts->from > 0 ? opts->from : DEFAULT_FROM;
    int to = opts->to > 0 ? opts->to : DG_SWEEP_MAX_BATCH;
    dg_status st = sweep_check(ctx, s, opts, from, to);
    double ntrain = st == DG_OK ? train_set_size(&s->train) : NAN;
    if (st == DG_OK)
        st = settle_budget(s, sweep_spec(s, opts, root, from, ntrain));
    if (st != DG_OK) {
        dg_free(s);
        return st;
    }
    *plan = (dg_sweep_plan){.from = from,
                            .to = to,
                            .max_trial_s = opts->max_trial_s,
                            .train_samples = ntrain,
                            .bisect = !opts->no_bisect};
    *out = s;
    return DG_OK;
}

void dg_fixture_sweep_free(dg_fixture_sweep *s)
{
    if (s)
        server_close(s->ctx, s->srv, false, NULL);
    dg_free(s);
}

/* The standalone verb's runner: trials only. */
static void sweep_done_nothing(void *ctx)
{
    (void)ctx;
}

static double sweep_eta(void *ctx, double step_elapsed)
{
    (void)step_elapsed;
    return dg_progress_trials_left_s(ctx);
}

dg_status dg_sweep_run(dg_ctx *ctx, const dg_sweep_opts *opts, char **json)
{
    *json = NULL;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return dg_fail(ctx, DG_ERR_NOMEM, "sweep: out of host memory");
    dg_sweep_plan plan;
    dg_fixture_sweep *s = NULL;
    dg_status st = dg_fixture_sweep_open(ctx, opts, root, &plan, &s);
    if (st != DG_OK) {
        cJSON_Delete(root);
        return st;
    }
    const dg_runner_i trials = {.version = DG_RUNNER_VERSION,
                                .name = "fixture",
                                .trial = dg_fixture_sweep_trial,
                                .sweep_done = sweep_done_nothing};
    dg_progress_sink progress;
    dg_progress_init(&progress, opts->progress, opts->progress_user);
    progress.eta = sweep_eta;
    progress.ectx = &progress;
    dg_progress_step(&progress, "sweep", 0, 1, dg_sweep_plan_trials(&plan));
    st = dg_method_sweep(ctx, &trials, s, &plan, opts->train.cancel, &progress, root);
    dg_progress_step_end(&progress, st == DG_OK ? "ok" : dg_status_name(st), NULL);
    if (st == DG_OK || st == DG_ERR_INTERRUPTED) {
        /* An interrupted sweep still returns the trials it ran. */
        *json = dg_json_print(root);
        if (!*json)
            st = DG_ERR_NOMEM;
    }
    double at = dg_jnum(root, "stopped.at_batch");
    cJSON_Delete(root);
    dg_fixture_sweep_free(s);
    if (st == DG_ERR_NOMEM)
        return dg_fail(ctx, DG_ERR_NOMEM, "sweep: out of host memory");
    if (st == DG_ERR_INTERRUPTED)
        return dg_fail(ctx, st, "sweep: interrupted at batch %.0f", at);
    return st;
}

/* ---- the child side ---------------------------------------------------------------- */

/* True when DEVGATE_FAULT is KIND@N with N the given batch. */
static bool fault_at(const char *kind, int batch)
{
    const char *spec = getenv("DEVGATE_FAULT");
    size_t kl = strlen(kind);
    if (!spec || strncmp(spec, kind, kl) != 0 || spec[kl] != '@')
        return false;
    char *end;
    long n = strtol(spec + kl + 1, &end, 10);
    return end != spec + kl + 1 && *end == '\0' && n == batch;
}

/* Writes all of s and a newline to fd; false on error. */
static bool write_line(int fd, const char *s)
{
    size_t len = strlen(s);
    for (int part = 0; part < 2; part++) {
        const char *p = part ? "\n" : s;
        size_t n = part ? 1 : len;
        while (n > 0) {
            ssize_t w = write(fd, p, n);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return false;
            p += w;
            n -= (size_t)w;
        }
    }
    return true;
}

/* Test hook for the method-contract test (tests/cli/test_method_contract.sh):
 * DEVGATE_TRIAL_PLAN="BASE_MS:PLATEAU:GAIN:FALL_ABOVE:FALL_FACTOR:OOM_ABOVE"
 * makes a trial train nothing and report the planted curve's step times, as
 * tests/python/scripts/sweep_train.py plans them for the command runner:
 * BASE_MS a step up to batch PLATEAU, GAIN more samples/s a doubling above
 * it, each doubling above FALL_ABOVE FALL_FACTOR times slower, and device
 * out of memory above OOM_ABOVE (0: none). NULL when the hook is not set. */
static cJSON *planted_trial(const dg_train_opts *o)
{
    const char *plan = getenv("DEVGATE_TRIAL_PLAN");
    double base, plateau, gain, fall_above, fall, oom_above;
    if (!plan || sscanf(plan, "%lf:%lf:%lf:%lf:%lf:%lf", &base, &plateau, &gain, &fall_above, &fall,
                        &oom_above) != 6)
        return NULL;
    double b = o->batch, step = base;
    if (b > plateau)
        step *= (b / plateau) / pow(1.0 + gain, log2(b / plateau));
    if (fall_above > 0 && b > fall_above)
        step *= pow(fall, log2(b / fall_above));
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddNumberToObject(rec, "v", 1);
    cJSON_AddStringToObject(rec, "kind", "train");
    bool oom = oom_above > 0 && b > oom_above;
    cJSON_AddStringToObject(rec, "status", oom ? "device-oom" : "ok");
    if (oom) {
        cJSON_AddStringToObject(rec, "error", "planted: device out of memory");
        return rec;
    }
    cJSON *thr = cJSON_AddObjectToObject(rec, "throughput");
    cJSON_AddItemToObject(thr, "samples_per_s",
                          dg_json_metric(b / (step / 1000), true, "samples/s"));
    cJSON_AddItemToObject(thr, "step_ms", dg_json_metric(step, true, "ms"));
    cJSON_AddNumberToObject(thr, "timed_steps", o->steps);
    cJSON *ms = cJSON_AddArrayToObject(cJSON_AddObjectToObject(rec, "steps"), "ms");
    for (int i = 0; i < o->steps; i++)
        cJSON_AddItemToArray(ms, cJSON_CreateNumber(step));
    return rec;
}

dg_status dg_sweep_trial(dg_ctx *ctx, const dg_train_opts *opts, int fd)
{
    if (!opts || fd < 0)
        return dg_fail(ctx, DG_ERR_USAGE, "trial: no options or result fd");
    /* The trial runs in its own process group, out of reach of the terminal's
     * Ctrl-C: it dies with the sweep instead. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char name[16]; /* "dgtrial-BATCH" in ps and pgrep: the batch is no longer in argv */
    snprintf(name, sizeof name, "dgtrial-%d", opts->batch);
    prctl(PR_SET_NAME, name);
    if (fault_at("trial-crash", opts->batch)) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        signal(SIGSEGV, SIG_DFL); /* past any sanitizer's handler */
        raise(SIGSEGV);
    }
    if (fault_at("trial-hang", opts->batch)) {
        for (;;)
            pause();
    }
    dg_train_ext ext = {.step_times = true, .sample_ms = 50};
    char *json = NULL;
    dg_status st = DG_OK;
    cJSON *planted = planted_trial(opts);
    if (planted) {
        json = dg_json_print(planted);
        cJSON_Delete(planted);
    } else {
        st = dg_train_run_ext(ctx, opts, &ext, &json);
    }
    if (!json) {
        /* No record (bad options, no memory): a minimal one says why. */
        cJSON *rec = cJSON_CreateObject();
        cJSON_AddNumberToObject(rec, "v", 1);
        cJSON_AddStringToObject(rec, "kind", "train");
        cJSON_AddStringToObject(rec, "status", dg_status_name(st == DG_OK ? DG_ERR_FORMAT : st));
        dg_json_add_str(rec, "error", dg_errmsg(ctx));
        json = dg_json_print(rec);
        cJSON_Delete(rec);
        if (!json)
            return dg_fail(ctx, DG_ERR_NOMEM, "trial: out of host memory");
    }
    bool wrote = write_line(fd, json);
    int e = errno;
    dg_string_free(json);
    if (!wrote && st == DG_OK)
        return dg_fail(ctx, DG_ERR_IO, "trial: cannot write the record to fd %d: %s", fd,
                       strerror(e));
    return st;
}
