/* devgate run (docs/events.md): supervise the user's own training program.
 * The loop polls the events pipe, samples the process tree, forwards the
 * caller's signals, enforces the timeout and, once the program has exited,
 * ends what it left behind. Then it builds the evidence record of kind "run":
 * its head, spec and probe, the supervise section, and the shared sections
 * (gate, sweep, soak, profile) from the program's events (run_record.c). */
#include "supervise/supervise.h"

#include "core/progress.h"
#include "core/record.h"
#include "env/peak.h"
#include "measure/measure.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_SAMPLE_MS 200
#define DEFAULT_GRACE_S 2.0
#define READ_BUDGET ((size_t)1 << 20) /* bytes read per loop turn, so the loop stays responsive */
#define EOF_SLACK_S 0.25              /* EOF this long before the exit is "closed early" */
#define MAX_LOSSES 10000
/* The events pipe is read at most every DRAIN_GAP_S while it keeps being
 * readable: a program stepping every few ms would otherwise wake devgate at
 * every step event, and each wake-up (poll, read, parse, a context switch on
 * a busy machine) is taken from the program (issue 24). Exit, timeout, kill
 * and forwarded signals do not wait for it (the loop's other wakes). */
#define DRAIN_GAP_S 0.025
#define EVENTS_PIPE_BYTES (1 << 20)  /* asked for, so a held pipe never fills */
#define DRAIN_BIG ((size_t)32 << 10) /* a drain this large is not followed by a hold */

typedef struct run {
    dg_evcollect col;
    dg_evreader rd;
    dg_tree_sampler *smp;
    dg_relay relay;
    bool relayed;               /* the program's output passes through relay */
    dg_progress_sink *progress; /* epochs and ticks */
    double tick_t;              /* the last tick's time */
    size_t tick_steps;          /* the steps it reported */
    double t0;
    dg_run_clock clock;     /* devgate's marks of the run's timeline */
    double *epoch_rss_peak; /* per kept epoch: the tree's RSS peak since the previous epoch_end */
    size_t nerp, erp_cap;
    size_t drains;    /* loop turns that read the events pipe (supervise.events.drains) */
    size_t fed_bytes; /* bytes the events pipe gave, all drains */
} run;

/* Optimizer steps the program reported so far. */
static double steps_so_far(const run *r)
{
    return (double)(r->col.nsteps + r->col.steps_summarised);
}

static double last_epoch(const run *r)
{
    if (r->col.nepochs)
        return r->col.epochs[r->col.nepochs - 1].epoch;
    return r->col.nsteps ? r->col.steps[r->col.nsteps - 1].epoch : NAN;
}

/* An epoch closed: its number, the steps and the rate over its steps. */
static void progress_epoch(run *r)
{
    if (!r->progress || !r->progress->fn)
        return;
    const dg_ev_epoch *e = &r->col.epochs[r->col.nepochs - 1];
    double ms = 0, samples = 0;
    for (size_t i = r->col.nsteps; i-- > 0;) {
        const dg_ev_step *st = &r->col.steps[i];
        if (st->epoch != e->epoch)
            break;
        if (isfinite(st->step_ms) && isfinite(st->batch)) {
            ms += st->step_ms + (isfinite(st->data_ms) ? st->data_ms : 0);
            samples += st->batch;
        }
    }
    char detail[64] = "";
    if (ms > 0)
        snprintf(detail, sizeof detail, "%.0f samples/s", samples / (ms / 1e3));
    dg_progress_program(r->progress, DG_PROGRESS_EPOCH, e->epoch, steps_so_far(r),
                        detail[0] ? detail : NULL);
}

/* The live step count, at most twice a second. */
static void progress_tick(run *r, double now)
{
    size_t n = r->col.nsteps + r->col.steps_summarised;
    if (!r->progress || !r->progress->fn || n == r->tick_steps || now - r->tick_t < 0.5)
        return;
    r->tick_t = now;
    r->tick_steps = n;
    dg_progress_program(r->progress, DG_PROGRESS_TICK, last_epoch(r), steps_so_far(r), NULL);
}

static void on_line(void *user, const char *line, size_t len)
{
    run *r = user;
    size_t before = r->col.nepochs;
    dg_evcollect_line(&r->col, line, len, dg_now() - r->t0);
    if (r->col.nepochs > before) {
        double pk = r->smp ? dg_tree_sampler_take_rss_peak(r->smp) : NAN;
        if (!dg_grow((void **)&r->epoch_rss_peak, &r->erp_cap, r->nerp + 1, sizeof(double)))
            return;
        r->epoch_rss_peak[r->nerp++] = pk;
        progress_epoch(r);
    }
}

static void feed_events(void *user, const char *p, size_t n)
{
    run *r = user;
    r->fed_bytes += n;
    dg_evreader_feed(&r->rd, p, n, on_line, r);
}

/* Reads what the pipe holds, at most budget bytes; true at end of file. */
static bool drain(run *r, int fd, size_t budget)
{
    r->drains++;
    return dg_fd_drain(fd, budget, feed_events, r);
}

static void nap_ms(double ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000.0) * 1e6)};
    nanosleep(&ts, NULL);
}

/* The events pipe as the loop sees it. */
typedef struct evpipe {
    int fd;
    bool open;
    double held_until; /* not polled before this (dg_now): DRAIN_GAP_S after a drain */
    double eof_t;      /* when it gave end of file */
} evpipe;

/* Waits until wake (dg_now) at most, for the relay's output or the events
 * pipe (unless it is held), and reads what came. A drain that read
 * something holds the pipe for DRAIN_GAP_S, so a program's events are read
 * in batches; a large one does not (the pipe may be filling). */
static void wait_and_read(run *r, evpipe *ep, double now, double wake)
{
    bool held = ep->open && now < ep->held_until;
    if (held && ep->held_until < wake)
        wake = ep->held_until;
    int ms = (int)ceil((wake - now) * 1e3);
    if (ms < 1)
        ms = 1;
    if (ms > 50)
        ms = 50;
    struct pollfd pf[3];
    int npf = r->relayed ? dg_relay_pollfds(&r->relay, pf) : 0;
    bool polled = ep->open && !held;
    if (polled)
        pf[npf++] = (struct pollfd){ep->fd, POLLIN, 0};
    if (!npf) {
        nap_ms(ms);
        return;
    }
    if (poll(pf, (nfds_t)npf, ms) <= 0)
        return;
    if (r->relayed)
        dg_relay_pump(&r->relay, READ_BUDGET);
    if (!polled || !(pf[npf - 1].revents & (POLLIN | POLLHUP | POLLERR)))
        return;
    size_t before = r->fed_bytes;
    if (drain(r, ep->fd, READ_BUDGET)) {
        ep->open = false;
        ep->eof_t = dg_now();
    } else if (r->fed_bytes - before < DRAIN_BIG) {
        ep->held_until = dg_now() + DRAIN_GAP_S;
    }
}

/* STEP entry of the record (docs/schema/report.md). */
static void add_step(cJSON *steps, const char *name, const char *status, const char *verdict,
                     const char *summary, const char *error, double wall)
{
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "name", name);
    cJSON_AddStringToObject(s, "status", status);
    dg_json_add_str(s, "verdict", verdict);
    cJSON_AddStringToObject(s, "summary", summary);
    dg_json_add_str(s, "error", error);
    cJSON_AddItemToObject(s, "wall", dg_json_metric_of(wall, "s"));
    cJSON_AddItemToArray(steps, s);
}

/* ---- the supervisor ------------------------------------------------------------- */

/* How the child was started: by the fork server, or as a plain child (and why). */
typedef struct launch {
    dg_forksrv *srv; /* the server that forked it; NULL: a plain child */
    pid_t server_pid;
    char why[512]; /* a server was offered but the child is plain: why */
} launch;

typedef struct outcome {
    pid_t pid;
    bool reaped, timed_out, interrupted, pipe_closed_early;
    int wstatus, interrupt_sig;
    size_t descendants_killed;
    double wall;
} outcome;

/* srv: the fork server holding the child (NULL: the child is ours). */
static void supervise(run *r, const dg_run_opts *o, dg_forksrv *srv, pid_t pid, int fd,
                      outcome *out)
{
    double grace = o->grace_s > 0 ? o->grace_s : DEFAULT_GRACE_S;
    double period = (o->sample_ms > 0 ? o->sample_ms : DEFAULT_SAMPLE_MS) / 1e3;
    dg_tree tree = {.child = pid, .pgid = pid, .self = getpid()};
    dg_proc_entry ce;
    if (dg_proc_stat(pid, &ce))
        tree.child_start = ce.starttime;
    int was_reaper = 0;
    bool reaper_set = false;
#ifdef PR_SET_CHILD_SUBREAPER
    if (prctl(PR_GET_CHILD_SUBREAPER, &was_reaper) == 0 && !was_reaper)
        reaper_set = prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
    tree.subreaper = reaper_set || was_reaper;
#endif
    r->smp = dg_tree_sampler_new(&tree, !o->no_nvml);
    r->clock.sampler = dg_wall_now();
    double t0 = r->t0, next_sample = t0;
    double deadline = o->timeout_s > 0 ? t0 + o->timeout_s : INFINITY;
    double kill_at = INFINITY, end_t = NAN;
    sig_atomic_t last_fwd = 0;
    evpipe ep = {.fd = fd, .open = fd >= 0, .held_until = -INFINITY, .eof_t = NAN};
    if (ep.open)
        (void)fcntl(fd, F_SETPIPE_SZ, EVENTS_PIPE_BYTES); /* where refused: the default size */
    for (;;) {
        double now = dg_now();
        /* Forward the caller's signal. */
        sig_atomic_t fwd = o->forward ? *o->forward : 0;
        if (fwd && fwd != last_fwd) {
            last_fwd = fwd;
            out->interrupted = true;
            out->interrupt_sig = fwd;
            if (!out->reaped && kill(-pid, fwd) != 0)
                kill(pid, fwd);
            if (!isfinite(kill_at))
                kill_at = now + grace;
        }
        if (!out->reaped && !out->timed_out && now >= deadline) {
            out->timed_out = true;
            size_t k = dg_tree_kill(&tree, SIGTERM, false);
            if (k > out->descendants_killed)
                out->descendants_killed = k;
            kill_at = now + grace;
        }
        if (now >= kill_at) {
            size_t k = dg_tree_kill(&tree, SIGKILL, out->reaped);
            if (!out->reaped)
                kill(pid, SIGKILL);
            if (k > out->descendants_killed)
                out->descendants_killed = k;
            kill_at = now + 0.2; /* again, until the tree is gone */
        }
        /* Events, or a nap until the next thing to do. */
        wait_and_read(r, &ep, now, fmin(fmin(next_sample, kill_at), fmin(deadline, now + 0.05)));
        now = dg_now();
        progress_tick(r, now);
        if (!out->reaped) {
            int st;
            pid_t w = srv ? dg_forksrv_wait(srv, pid, &st) : waitpid(pid, &st, WNOHANG);
            if (w == pid || (w < 0 && errno == ECHILD)) {
                out->reaped = w == pid;
                out->wstatus = st;
                if (w != pid)
                    out->reaped = true, out->wstatus = -1;
                end_t = now;
                r->clock.exit = dg_wall_now();
                if (ep.open && drain(r, fd, (size_t)64 << 20)) {
                    ep.open = false;
                    ep.eof_t = end_t;
                }
                /* What it left behind: SIGTERM now, SIGKILL after the grace. */
                size_t k = dg_tree_kill(&tree, SIGTERM, true);
                if (k > out->descendants_killed)
                    out->descendants_killed = k;
                if (k && !(kill_at < now + grace))
                    kill_at = now + grace;
            }
        }
        if (!out->reaped && now >= next_sample) {
            if (r->smp)
                dg_tree_sample(r->smp, now - t0);
            next_sample += period;
            if (next_sample < now)
                next_sample = now + period;
        }
        if (out->reaped) {
            dg_tree_reap(&tree);
            size_t n = 0;
            dg_proc_entry *all = dg_proc_scan(&n);
            size_t left = dg_tree_members(&tree, all, n, NULL, 0);
            dg_free(all);
            if (left == 0)
                break;
        }
    }
    if (ep.open) {
        drain(r, fd, (size_t)64 << 20);
    }
    if (r->relayed) /* the tree is gone: what its descriptors still held */
        dg_relay_pump(&r->relay, (size_t)64 << 20);
    dg_evreader_finish(&r->rd, on_line, r);
    dg_tree_reap(&tree);
    r->clock.gone = dg_wall_now();
    out->pipe_closed_early =
        isfinite(ep.eof_t) && isfinite(end_t) && end_t - ep.eof_t > EOF_SLACK_S;
    out->wall = (isfinite(end_t) ? end_t : dg_now()) - t0;
#ifdef PR_SET_CHILD_SUBREAPER
    if (reaper_set)
        prctl(PR_SET_CHILD_SUBREAPER, 0);
#endif
    dg_tree_free(&tree);
}

/* The lines that say why the program failed: the exception of the last
 * traceback in its error output, else the run_end message the probe sent,
 * else the output's last lines; their source, or NULL when there are none. */
static const char *error_lines(const run *r, dg_error_lines *el)
{
    if (r->relayed)
        dg_error_lines_find(r->relay.tail, r->relay.tail_len, el);
    if (el->traceback)
        return "traceback";
    const char *msg = dg_jstr(r->col.run_end, "message");
    const char *st = dg_jstr(r->col.run_end, "status");
    if (msg && st && strcmp(st, "error") == 0) {
        dg_error_lines m;
        dg_error_lines_find(msg, strlen(msg), &m);
        if (m.n) {
            *el = m;
            return "run_end";
        }
    }
    return el->n ? "output tail" : NULL;
}

/* The supervise section. */
static cJSON *supervise_section(const run *r, const dg_run_opts *o, const outcome *oc,
                                char *summary, size_t slen, char *error, size_t elen)
{
    const dg_evcollect *c = &r->col;
    cJSON *s = cJSON_CreateObject();
    cJSON_AddNumberToObject(s, "pid", oc->pid);
    bool exited = oc->wstatus != -1 && WIFEXITED(oc->wstatus);
    bool signalled = oc->wstatus != -1 && WIFSIGNALED(oc->wstatus);
    char tmp[32];
    if (exited)
        cJSON_AddNumberToObject(s, "exit_status", WEXITSTATUS(oc->wstatus));
    else
        cJSON_AddNullToObject(s, "exit_status");
    const char *signame = signalled ? dg_signal_name(WTERMSIG(oc->wstatus), tmp, sizeof tmp) : NULL;
    dg_json_add_str(s, "signal", signame);
    cJSON_AddBoolToObject(s, "timed_out", oc->timed_out);
    cJSON_AddBoolToObject(s, "interrupted", oc->interrupted);
    char tmp2[32];
    const char *intname =
        oc->interrupted ? dg_signal_name(oc->interrupt_sig, tmp2, sizeof tmp2) : NULL;
    dg_json_add_str(s, "interrupt_signal", intname);
    cJSON_AddItemToObject(s, "wall", dg_json_metric_of(oc->wall, "s"));
    cJSON *ev = cJSON_AddObjectToObject(s, "events");
    cJSON_AddNumberToObject(ev, "fd", DG_EVENTS_FD);
    cJSON_AddNumberToObject(ev, "lines", (double)(c->lines + r->rd.overlong));
    cJSON_AddNumberToObject(ev, "parsed", (double)c->parsed);
    cJSON_AddNumberToObject(ev, "malformed", (double)c->malformed);
    cJSON_AddNumberToObject(ev, "overlong", (double)r->rd.overlong);
    cJSON_AddNumberToObject(ev, "dropped", (double)c->dropped);
    cJSON_AddNumberToObject(ev, "unknown", (double)c->unknown);
    cJSON *bk = cJSON_AddObjectToObject(ev, "by_kind");
    for (int k = 1; k < DG_EV_NKINDS; k++)
        cJSON_AddNumberToObject(bk, dg_ev_kind_name((dg_ev_kind)k), (double)c->by_kind[k]);
    cJSON_AddNumberToObject(ev, "steps_stored", (double)c->nsteps);
    cJSON_AddNumberToObject(ev, "steps_summarised", (double)c->steps_summarised);
    cJSON_AddNumberToObject(ev, "drains", (double)r->drains);
    cJSON *lim = cJSON_AddObjectToObject(ev, "limits");
    cJSON_AddNumberToObject(lim, "max_line", (double)(r->rd.max_line));
    cJSON_AddNumberToObject(lim, "rate", c->lim.rate);
    cJSON_AddNumberToObject(lim, "max_steps", (double)c->lim.max_steps);
    cJSON_AddNumberToObject(lim, "max_epochs", (double)c->lim.max_epochs);
    cJSON_AddNumberToObject(lim, "max_other", (double)c->lim.max_other);
    cJSON_AddBoolToObject(ev, "out_of_memory", c->nomem || r->rd.nomem);
    cJSON_AddBoolToObject(s, "pipe_closed_early", oc->pipe_closed_early);
    cJSON_AddNumberToObject(s, "descendants_killed", (double)oc->descendants_killed);
    if (c->run_end) {
        cJSON *re = cJSON_AddObjectToObject(s, "run_end");
        const cJSON *st = cJSON_GetObjectItem(c->run_end, "status"),
                    *m = cJSON_GetObjectItem(c->run_end, "message");
        dg_json_add_str(re, "status", cJSON_IsString(st) ? st->valuestring : NULL);
        char mb[512] = "";
        if (cJSON_IsString(m))
            snprintf(mb, sizeof mb, "%s", m->valuestring);
        dg_json_add_str(re, "message", cJSON_IsString(m) ? mb : NULL);
        /* What ended a stopped run (docs/events.md "Knobs for devgate accept"). */
        static const char *const stops[] = {"steady", "budget", "steps"};
        const char *why = dg_jstr(c->run_end, "stop"), *stop = NULL;
        for (size_t i = 0; why && i < sizeof stops / sizeof stops[0]; i++)
            if (strcmp(why, stops[i]) == 0)
                stop = stops[i];
        dg_json_add_str(re, "stop", stop);
    } else {
        cJSON_AddNullToObject(s, "run_end");
    }
    /* devgate's own messages from the probe (note events), not the program's. */
    cJSON_AddItemToObject(s, "notes", cJSON_Duplicate(c->notes, true));
    /* Losses by (epoch, step), for compare. */
    cJSON *ls = cJSON_AddArrayToObject(s, "losses");
    size_t nl = 0;
    for (size_t i = 0; i < c->nsteps && nl < MAX_LOSSES; i++) {
        const dg_ev_step *st = &c->steps[i];
        if (!isfinite(st->loss))
            continue;
        cJSON *row = cJSON_CreateArray();
        cJSON_AddItemToArray(row, isfinite(st->epoch) ? cJSON_CreateNumber(st->epoch)
                                                      : cJSON_CreateNull());
        cJSON_AddItemToArray(row, isfinite(st->step) ? cJSON_CreateNumber(st->step)
                                                     : cJSON_CreateNull());
        cJSON_AddItemToArray(row, cJSON_CreateNumber(st->loss));
        cJSON_AddItemToArray(ls, row);
        nl++;
    }
    dg_tree_sampler_json(r->smp, s, o->series_points);
    /* The CPUs the program could use, for the rules' CPU-use judgement: the
     * affinity mask, capped by the cgroup's CPU quota (a container's 2 CPUs
     * of a 64-core host are 2). */
    cJSON *samples = cJSON_GetObjectItemCaseSensitive(s, "samples");
    if (samples) {
        const dg_cpu_topo *topo = dg_cpu_topo_get();
        double cores = topo->affinity > 0 ? topo->affinity : (double)sysconf(_SC_NPROCESSORS_ONLN);
        bool quota = isfinite(topo->quota_cpus) && topo->quota_cpus < cores;
        if (quota)
            cores = topo->quota_cpus;
        cJSON_AddItemToObject(samples, "cores",
                              dg_json_metric_of(cores > 0 ? cores : NAN, "cores"));
        dg_json_add_str(samples, "cores_limit", cores > 0 ? (quota ? "quota" : "affinity") : NULL);
    }
    /* One line for the terminal, and the error when it did not end well. */
    const char *end_status = dg_jstr(c->run_end, "status");
    bool stopped = exited && WEXITSTATUS(oc->wstatus) == DG_PROBE_STOP_CODE && end_status &&
                   strcmp(end_status, "stopped") == 0;
    error[0] = '\0';
    if (oc->timed_out)
        snprintf(error, elen, "timed out after %.0f s: the process tree was killed", o->timeout_s);
    else if (oc->interrupted)
        snprintf(error, elen, "interrupted: %s forwarded to the program", intname);
    else if (signalled)
        snprintf(error, elen, "killed by %s", signame);
    else if (exited && WEXITSTATUS(oc->wstatus) != 0 && !stopped)
        snprintf(error, elen, "exit status %d", WEXITSTATUS(oc->wstatus));
    else if (!exited)
        snprintf(error, elen, "the program's end could not be observed");
    /* What the program said as it failed: the lines quoted in the finding. */
    bool failed = !oc->timed_out && !oc->interrupted &&
                  (signalled || (exited && WEXITSTATUS(oc->wstatus) != 0 && !stopped));
    dg_error_lines el = {.n = 0};
    const char *el_source = failed ? error_lines(r, &el) : NULL;
    if (el_source) {
        cJSON *arr = cJSON_AddArrayToObject(s, "error_lines");
        for (int i = 0; i < el.n; i++)
            cJSON_AddItemToArray(arr, dg_json_string(el.line[i]));
        size_t n = strlen(error);
        snprintf(error + n, n < elen ? elen - n : 0, ": %s", el.line[0]);
    } else {
        cJSON_AddNullToObject(s, "error_lines");
    }
    dg_json_add_str(s, "error_lines_source", el_source);
    char how[96];
    if (stopped)
        snprintf(how, sizeof how, "stopped by devgate (exit %d)", DG_PROBE_STOP_CODE);
    else if (exited)
        snprintf(how, sizeof how, "exit %d", WEXITSTATUS(oc->wstatus));
    else if (signalled)
        snprintf(how, sizeof how, "killed by %s", signame);
    else
        snprintf(how, sizeof how, "ended");
    snprintf(summary, slen,
             "%s%s after %.1f s · %llu events (%llu malformed, %llu overlong, %llu dropped, %llu "
             "unknown)%s%s",
             how,
             oc->timed_out     ? " (timeout)"
             : oc->interrupted ? " (interrupted)"
                               : "",
             oc->wall, (unsigned long long)c->parsed, (unsigned long long)c->malformed,
             (unsigned long long)r->rd.overlong, (unsigned long long)c->dropped,
             (unsigned long long)c->unknown,
             oc->pipe_closed_early ? " · events pipe closed early" : "",
             oc->descendants_killed ? " · left-behind processes killed" : "");
    return s;
}

/* Adds the headline rate to the supervise step's summary (the terminal's
 * line), saying whether it is the steady rate or the whole run's. */
static void headline_summary(cJSON *steps, const cJSON *root, char *summary, size_t len)
{
    const cJSON *thr = cJSON_GetObjectItemCaseSensitive(root, "throughput");
    double sps = dg_json_metric_value(cJSON_GetObjectItemCaseSensitive(thr, "samples_per_s"));
    const char *basis = dg_jstr(thr, "samples_per_s_basis");
    if (!isfinite(sps) || !basis)
        return;
    size_t n = strlen(summary);
    snprintf(summary + n, n < len ? len - n : 0, " · %.0f samples/s %s", sps,
             strcmp(basis, "after-warmup") == 0 ? "after warm-up"
                                                : "over the whole run (too few steps to leave "
                                                  "out the warm-up)");
    cJSON *st;
    cJSON_ArrayForEach(st, steps)
    {
        if (strcmp(dg_jstr(st, "name") ? dg_jstr(st, "name") : "", "supervise") == 0)
            cJSON_ReplaceItemInObjectCaseSensitive(st, "summary", cJSON_CreateString(summary));
    }
}

/* The record's "spec" (the command, cleaned to UTF-8, and the supervisor's
 * settings) and "probe" (how the zero-code probe was armed, what it reported). */
static void add_spec_probe(cJSON *root, const dg_run_opts *o, const dg_probe_plan *plan,
                           const dg_evcollect *col)
{
    cJSON *spec = cJSON_AddObjectToObject(root, "spec");
    cJSON *cmd = cJSON_AddArrayToObject(spec, "cmd");
    for (size_t i = 0; o->argv[i]; i++) {
        char *clean = NULL;
        size_t len = strlen(o->argv[i]);
        bool utf8 = dg_utf8_valid(o->argv[i], len);
        if (!utf8 && (clean = dg_malloc(len + 1)) != NULL) {
            for (size_t k = 0; k < len; k++)
                clean[k] = (unsigned char)o->argv[i][k] < 0x80 ? o->argv[i][k] : '?';
            clean[len] = '\0';
        }
        cJSON_AddItemToArray(cmd, cJSON_CreateString(utf8 ? o->argv[i] : clean ? clean : "?"));
        dg_free(clean);
    }
    dg_json_add_str(spec, "label", o->label);
    cJSON_AddNumberToObject(spec, "sample_ms", o->sample_ms > 0 ? o->sample_ms : DEFAULT_SAMPLE_MS);
    dg_json_add_num(spec, "timeout_s", o->timeout_s > 0 ? o->timeout_s : NAN);
    cJSON_AddNumberToObject(spec, "grace_s", o->grace_s > 0 ? o->grace_s : DEFAULT_GRACE_S);
    if (o->probe == DG_PROBE_OFF)
        cJSON_AddNullToObject(spec, "events_fd");
    else
        cJSON_AddNumberToObject(spec, "events_fd", DG_EVENTS_FD);
    cJSON_AddStringToObject(spec, "probe", plan->mode);
    cJSON *pr = cJSON_AddObjectToObject(root, "probe");
    cJSON_AddStringToObject(pr, "mode", plan->mode);
    cJSON_AddBoolToObject(pr, "armed", plan->how != NULL);
    dg_json_add_str(pr, "how", plan->how);
    dg_json_add_str(pr, "why", plan->why[0] ? plan->why : NULL);
    cJSON *pcmd = cJSON_AddArrayToObject(pr, "cmd");
    for (size_t i = 0; plan->how && plan->argv[i]; i++)
        cJSON_AddItemToArray(
            pcmd, cJSON_CreateString(
                      dg_utf8_valid(plan->argv[i], strlen(plan->argv[i])) ? plan->argv[i] : "?"));
    cJSON_AddBoolToObject(pr, "empty_cache", o->probe == DG_PROBE_AUTO && o->empty_cache);
    const cJSON *sp_mode = cJSON_GetObjectItemCaseSensitive(col->run_start, "probe");
    dg_json_add_str(pr, "reported", cJSON_IsString(sp_mode) ? sp_mode->valuestring : NULL);
}

/* The environment proof (dg_env_run) as the run's first step: its record
 * in *envj (NULL when it failed, the message in err), its wall time. */
static void env_step(dg_ctx *ctx, dg_progress_sink *progress, int nsteps, char **envj, double *wall,
                     char err[DG_ERRMSG_MAX])
{
    double t0 = dg_now();
    dg_progress_step(progress, "env", 0, nsteps, 0);
    dg_env_opts eo = {0};
    if (dg_env_run(ctx, &eo, envj) != DG_OK)
        snprintf(err, DG_ERRMSG_MAX, "%s", dg_errmsg(ctx));
    *wall = dg_now() - t0;
    dg_progress_step_end(progress, *envj ? "ok" : "failed", err);
}

/* Starts the program through the fork server srv: ln->srv set when it did,
 * else why not in ln->why (the caller then spawns it itself); *launch_t the
 * wall clock as it asked, once the server was ready (its start-up is not the
 * run's). */
static void launch_via(launch *ln, dg_forksrv *srv, const dg_run_opts *o, const dg_probe_plan *plan,
                       int out_fd, int err_fd, pid_t *pid, int *fd, double *launch_t)
{
    const char **edits = dg_spawn_edits(plan->env);
    if (edits)
        dg_forksrv_ready(srv, edits);
    *launch_t = dg_wall_now();
    if (edits && dg_forksrv_launch(srv, plan->argv, edits, o->stdout_to_stderr, out_fd, err_fd,
                                   o->mem_limit, pid, fd, ln->why, sizeof ln->why) == 0)
        ln->srv = srv;
    else if (!edits)
        snprintf(ln->why, sizeof ln->why, "out of host memory");
    dg_free(edits);
    ln->server_pid = ln->srv ? dg_forksrv_pid(srv) : -1;
}

/* What the program's probe reported at its start (framework, device,
 * bucket, seeds, loader) and its out-of-memory events; the members the
 * judging fills later (thresholds, findings, decision, final gate, pack). */
static void add_reported(cJSON *root, const dg_evcollect *col)
{
    cJSON_AddItemToObject(root, "framework", dg_run_from_start(col, "framework"));
    cJSON_AddItemToObject(root, "device", dg_run_from_start(col, "device"));
    cJSON_AddItemToObject(root, "bucket", dg_run_from_start(col, "bucket"));
    cJSON_AddItemToObject(root, "seeds", dg_run_from_start(col, "seeds"));
    cJSON_AddItemToObject(root, "loader", dg_run_from_start(col, "loader"));
    cJSON_AddItemToObject(root, "oom", cJSON_Duplicate(col->ooms, true));
    cJSON_AddItemToObject(root, "thresholds", cJSON_CreateObject());
    cJSON_AddArrayToObject(root, "findings");
    cJSON_AddNullToObject(root, "decision");
    cJSON_AddNullToObject(root, "final_gate");
    cJSON_AddNullToObject(root, "pack");
}

dg_status dg_run_supervise(dg_ctx *ctx, const dg_run_opts *o, char **json)
{
    return dg_run_supervise_via(ctx, o, NULL, json);
}

dg_status dg_run_supervise_via(dg_ctx *ctx, const dg_run_opts *o, dg_forksrv *srv, char **json)
{
    *json = NULL;
    if (!o || !o->argv || !o->argv[0] || !o->argv[0][0])
        return dg_fail(ctx, DG_ERR_USAGE, "run: no program to run");
    char ts[32];
    dg_utc_iso(ts, sizeof ts);
    char host[256] = "";
    if (gethostname(host, sizeof host) != 0)
        host[0] = '\0';
    host[sizeof host - 1] = '\0';
    dg_progress_sink progress;
    dg_progress_init(&progress, o->progress, o->progress_user);
    int nsteps = o->no_env ? 1 : 2;
    /* The environment proof first, so the program's load does not colour it. */
    char *envj = NULL;
    double env_wall = NAN;
    char env_err[DG_ERRMSG_MAX] = "";
    if (!o->no_env)
        env_step(ctx, &progress, nsteps, &envj, &env_wall, env_err);
    run r;
    memset(&r, 0, sizeof r);
    dg_ev_limits lim = {.rate = o->events_rate, .max_steps = o->max_steps};
    if (!dg_evcollect_init(&r.col, &lim)) {
        dg_string_free(envj);
        return dg_fail(ctx, DG_ERR_NOMEM, "run: out of host memory");
    }
    r.rd.max_line = o->max_line ? o->max_line : (size_t)64 << 10;
    dg_probe_plan plan;
    if (!dg_probe_plan_make(o, &plan)) {
        dg_probe_plan_free(&plan);
        dg_evcollect_free(&r.col);
        dg_string_free(envj);
        return dg_fail(ctx, DG_ERR_NOMEM, "run: out of host memory");
    }
    pid_t pid = -1;
    int fd = -1, err = 0;
    r.progress = &progress;
    /* Without a relay (no pipe or pty to be had) the program writes where it would have. */
    r.relayed = dg_relay_open(&r.relay, o->stdout_to_stderr, o->output, o->output_user) == 0;
    dg_progress_step(&progress, "supervise", nsteps - 1, nsteps, 0);
    int out_fd = r.relayed ? r.relay.out_child : -1, err_fd = r.relayed ? r.relay.err_child : -1;
    launch ln = {.srv = NULL, .why = ""};
    r.clock =
        (dg_run_clock){.launch = NAN, .received = NAN, .sampler = NAN, .exit = NAN, .gone = NAN};
    if (srv)
        launch_via(&ln, srv, o, &plan, out_fd, err_fd, &pid, &fd, &r.clock.launch);
    r.t0 = dg_now(); /* after the fork server's start-up, which is not the run's */
    r.clock.received = dg_wall_now();
    if (!ln.srv) {
        r.clock.launch = r.clock.received;
        err = dg_spawn_child_io(plan.argv, plan.env, o->stdout_to_stderr, out_fd, err_fd,
                                o->mem_limit, &pid, &fd);
    }
    if (r.relayed)
        dg_relay_started(&r.relay);
    if (err) {
        dg_relay_close(&r.relay);
        dg_probe_plan_free(&plan);
        dg_evcollect_free(&r.col);
        dg_string_free(envj);
        if (err == ENOMEM)
            return dg_fail(ctx, DG_ERR_NOMEM, "run: out of host memory starting '%s'", o->argv[0]);
        return dg_fail(ctx, err == ENOENT || err == ENOTDIR ? DG_ERR_NOT_FOUND : DG_ERR_IO,
                       "run: cannot start '%s': %s", o->argv[0], strerror(err));
    }
    outcome oc = {.pid = pid, .wstatus = -1};
    supervise(&r, o, ln.srv, pid, fd, &oc);
    close(fd);
    dg_relay_close(&r.relay);
    /* The probe's notes reach the user through devgate's log (its own
     * stderr, above the progress line), never the program's output. */
    const cJSON *note;
    cJSON_ArrayForEach(note, r.col.notes)
    {
        dg_log(ctx, DG_LOG_WARN, "probe: %s", note->valuestring);
    }

    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "v", DG_RECORD_VERSION);
    cJSON_AddStringToObject(root, "kind", "run");
    cJSON_AddNullToObject(root, "run_id");
    cJSON_AddStringToObject(root, "timestamp", ts);
    dg_json_add_str(root, "host", host[0] ? host : NULL);
    dg_json_add_str(root, "label", o->label);
    /* A stop the probe was asked for (DEVGATE_PROBE_MAX_STEPS) is a clean end. */
    const char *end_status = dg_jstr(r.col.run_end, "status");
    bool stopped = oc.wstatus != -1 && WIFEXITED(oc.wstatus) &&
                   WEXITSTATUS(oc.wstatus) == DG_PROBE_STOP_CODE && end_status &&
                   strcmp(end_status, "stopped") == 0;
    bool ok_exit = oc.wstatus != -1 && WIFEXITED(oc.wstatus) &&
                   (WEXITSTATUS(oc.wstatus) == 0 || stopped) && !oc.timed_out;
    cJSON_AddStringToObject(root, "state",
                            oc.interrupted ? "interrupted"
                            : ok_exit      ? "complete"
                                           : "failed");
    add_spec_probe(root, o, &plan, &r.col);
    dg_probe_plan_free(&plan);

    char summary[512], error[256];
    cJSON *sup = supervise_section(&r, o, &oc, summary, sizeof summary, error, sizeof error);
    dg_forksrv_launch_json(sup, ln.srv != NULL, ln.server_pid, ln.why);
    cJSON_AddItemToObject(sup, "timeline", dg_run_timeline(&r.col, &r.clock));
    cJSON *steps = cJSON_AddArrayToObject(root, "steps");
    if (!o->no_env) {
        char es[128];
        snprintf(es, sizeof es, envj ? "environment proof collected" : "environment proof failed");
        add_step(steps, "env", envj ? "ok" : "failed", envj ? "info" : NULL, es,
                 env_err[0] ? env_err : NULL, env_wall);
    }
    add_step(steps, "supervise",
             oc.interrupted ? "interrupted"
             : ok_exit      ? "ok"
                            : "failed",
             oc.interrupted ? NULL
             : ok_exit      ? "pass"
                            : "fail",
             summary, error[0] ? error : NULL, oc.wall);
    dg_progress_step_end(&progress,
                         oc.interrupted ? "interrupted"
                         : ok_exit      ? "ok"
                                        : "failed",
                         error[0] ? error : summary);
    cJSON *envo = envj ? cJSON_Parse(envj) : NULL;
    dg_string_free(envj);
    cJSON_AddItemToObject(root, "env", envo ? envo : cJSON_CreateNull());
    cJSON_AddItemToObject(root, "gate", dg_run_gate_section(&r.col));
    cJSON_AddItemToObject(root, "sweep", dg_run_sweep_section(&r.col));
    cJSON_AddItemToObject(root, "soak", dg_run_soak_section(&r.col, r.epoch_rss_peak, r.nerp));
    cJSON_AddNullToObject(root, "compare");
    cJSON_AddItemToObject(root, "profile", dg_run_profile_section(&r.col, root));
    headline_summary(steps, root, summary, sizeof summary);
    cJSON_AddItemToObject(root, "supervise", sup);
    dg_run_energy_add(&r.col, root);
    add_reported(root, &r.col);
    *json = dg_json_print(root);
    cJSON_Delete(root);
    dg_tree_sampler_free(r.smp);
    dg_evreader_free(&r.rd);
    dg_evcollect_free(&r.col);
    dg_free(r.epoch_rss_peak);
    if (!*json)
        return dg_fail(ctx, DG_ERR_NOMEM, "run: out of host memory printing the record");
    return DG_OK;
}
