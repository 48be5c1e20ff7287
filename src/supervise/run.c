/* devgate run (docs/events.md): supervise the user's own training program.
 * The loop polls the events pipe, samples the process tree, forwards the
 * caller's signals, enforces the timeout and, once the program has exited,
 * ends what it left behind. Then it builds the evidence record of kind "run":
 * the supervise section, and the shared sections (gate, sweep, soak,
 * profile) from the program's events, shaped as devgate's own steps write
 * them so the rules and reports apply unchanged. */
#include "supervise/supervise.h"

#include "analysis/analysis.h"
#include "core/record.h"
#include "env/peak.h"
#include "measure/measure.h"

#include <errno.h>
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
#define STEP_WARMUP 2 /* as the training fixture: the first two steps are warm-up */

typedef struct run {
    dg_evcollect col;
    dg_evreader rd;
    dg_tree_sampler *smp;
    double t0;
    double *epoch_rss_peak; /* per kept epoch: the tree's RSS peak since the previous epoch_end */
    size_t nerp, erp_cap;
} run;

static void on_line(void *user, const char *line, size_t len)
{
    run *r = user;
    size_t before = r->col.nepochs;
    dg_evcollect_line(&r->col, line, len, dg_now() - r->t0);
    if (r->col.nepochs > before) {
        double pk = r->smp ? dg_tree_sampler_take_rss_peak(r->smp) : NAN;
        if (r->nerp == r->erp_cap) {
            size_t cap = r->erp_cap ? 2 * r->erp_cap : 64;
            double *np = dg_realloc(r->epoch_rss_peak, cap * sizeof *np);
            if (!np)
                return;
            r->epoch_rss_peak = np;
            r->erp_cap = cap;
        }
        r->epoch_rss_peak[r->nerp++] = pk;
    }
}

/* Reads what the pipe holds, at most budget bytes; true at end of file. */
static bool drain(run *r, int fd, size_t budget)
{
    char chunk[65536];
    size_t got_total = 0;
    while (got_total < budget) {
        ssize_t got = read(fd, chunk, sizeof chunk);
        if (got > 0) {
            dg_evreader_feed(&r->rd, chunk, (size_t)got, on_line, r);
            got_total += (size_t)got;
            continue;
        }
        if (got == 0)
            return true;
        if (errno == EINTR)
            continue;
        return errno != EAGAIN && errno != EWOULDBLOCK;
    }
    return false;
}

static void nap_ms(double ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000.0) * 1e6)};
    nanosleep(&ts, NULL);
}

/* ---- record helpers ------------------------------------------------------------ */

static cJSON *metric(double v, const char *unit)
{
    return dg_json_metric(isfinite(v) ? v : 0, isfinite(v), unit);
}

static void add_num_or_null(cJSON *o, const char *key, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

static void add_tri(cJSON *o, const char *key, signed char v)
{
    if (v < 0)
        cJSON_AddNullToObject(o, key);
    else
        cJSON_AddBoolToObject(o, key, v == 1);
}

static double median_of(double *v, size_t n)
{
    if (!n)
        return NAN;
    dg_stats st;
    dg_stats_compute(v, n, 0, &st);
    return st.median;
}

/* A copy of run_start's member key, or null. */
static cJSON *from_start(const dg_evcollect *c, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->run_start, key);
    return v ? cJSON_Duplicate(v, true) : cJSON_CreateNull();
}

static double start_batch(const dg_evcollect *c)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(c->run_start, "batch");
    return cJSON_IsNumber(b) && isfinite(b->valuedouble) && b->valuedouble > 0 ? b->valuedouble
                                                                               : NAN;
}

/* gate: the gate record's shape (docs/schema/gate.md) from gate events. */
static cJSON *gate_section(const dg_evcollect *c)
{
    if (cJSON_GetArraySize(c->gates) == 0)
        return cJSON_CreateNull();
    cJSON *g = cJSON_CreateObject();
    cJSON_AddNumberToObject(g, "v", 1);
    cJSON_AddStringToObject(g, "kind", "gate");
    cJSON_AddStringToObject(g, "source", "probe");
    cJSON *arr = cJSON_AddArrayToObject(g, "backends");
    bool fail = false, unavailable = false;
    const cJSON *e;
    cJSON_ArrayForEach(e, c->gates)
    {
        cJSON *b = cJSON_CreateObject();
        const cJSON *dev = cJSON_GetObjectItem(e, "device");
        dg_json_add_str(b, "name", cJSON_IsString(dev) ? dev->valuestring : NULL);
        bool built = cJSON_IsTrue(cJSON_GetObjectItem(e, "built"));
        bool avail = cJSON_IsTrue(cJSON_GetObjectItem(e, "available"));
        cJSON_AddBoolToObject(b, "built", built);
        cJSON_AddBoolToObject(b, "available", avail);
        const cJSON *why = cJSON_GetObjectItem(e, "reason");
        dg_json_add_str(b, "reason", cJSON_IsString(why) ? why->valuestring : NULL);
        const cJSON *mm = cJSON_GetObjectItem(e, "matmul");
        cJSON *m = cJSON_AddObjectToObject(b, "matmul");
        const cJSON *ok = cJSON_GetObjectItem(mm, "ok");
        double n = cJSON_GetNumberValue(cJSON_GetObjectItem(mm, "n"));
        add_num_or_null(m, "m", n);
        add_num_or_null(m, "n", n);
        add_num_or_null(m, "k", n);
        if (cJSON_IsBool(ok))
            cJSON_AddBoolToObject(m, "ok", cJSON_IsTrue(ok));
        else
            cJSON_AddNullToObject(m, "ok");
        dg_json_add_str(m, "reason",
                        cJSON_IsFalse(ok) ? "the probe's matrix product did not match" : NULL);
        add_num_or_null(m, "max_abs_err",
                        cJSON_GetNumberValue(cJSON_GetObjectItem(mm, "max_abs_err")));
        add_num_or_null(m, "ms", cJSON_GetNumberValue(cJSON_GetObjectItem(mm, "ms")));
        if (avail && cJSON_IsFalse(ok))
            fail = true;
        if (!avail)
            unavailable = true;
        cJSON_AddItemToArray(arr, b);
    }
    cJSON_AddStringToObject(g, "verdict", fail ? "fail" : unavailable ? "unavailable" : "pass");
    return g;
}

/* sweep: the sweep record's shape (docs/schema/measure.md) from sweep_trial events. */
static cJSON *sweep_section(const dg_evcollect *c)
{
    int n = cJSON_GetArraySize(c->sweep_trials);
    if (n == 0)
        return cJSON_CreateNull();
    cJSON *s = cJSON_CreateObject();
    cJSON_AddNumberToObject(s, "v", 1);
    cJSON_AddStringToObject(s, "kind", "sweep");
    cJSON_AddStringToObject(s, "source", "probe");
    cJSON *trials = cJSON_AddArrayToObject(s, "trials");
    dg_sweep_point *pts = dg_calloc((size_t)n, sizeof *pts);
    int np = 0, first_bad = 0;
    const char *stop = "limit";
    int at = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, c->sweep_trials)
    {
        double batch = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "batch"));
        const cJSON *en = cJSON_GetObjectItem(e, "ended");
        const char *ended = cJSON_IsString(en) ? en->valuestring : "failed";
        static const char *const known[] = {"ok", "device-oom", "signal", "timeout", "failed"};
        bool valid = false;
        for (size_t i = 0; i < 5; i++)
            valid = valid || strcmp(ended, known[i]) == 0;
        if (!valid)
            ended = "failed";
        bool ok = strcmp(ended, "ok") == 0;
        double sps = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "samples_per_s"));
        cJSON *t = cJSON_CreateObject();
        add_num_or_null(t, "batch", batch);
        cJSON_AddStringToObject(t, "ended", ended);
        const cJSON *why = cJSON_GetObjectItem(e, "reason");
        dg_json_add_str(t, "reason", cJSON_IsString(why) ? why->valuestring : NULL);
        cJSON_AddNullToObject(t, "signal");
        cJSON_AddItemToObject(t, "samples_per_s", metric(sps, "samples/s"));
        dg_sweep_rate ci = {.sps = isfinite(sps) ? sps : NAN,
                            .lo = NAN,
                            .hi = NAN,
                            .reason = "the probe's sweep reports one step time"};
        cJSON_AddItemToObject(t, "samples_per_s_ci", dg_sweep_rate_json(&ci));
        cJSON *sm = cJSON_AddObjectToObject(t, "step_ms");
        cJSON_AddItemToObject(
            sm, "median", metric(cJSON_GetNumberValue(cJSON_GetObjectItem(e, "step_ms")), "ms"));
        cJSON_AddItemToObject(sm, "iqr", metric(NAN, "ms"));
        cJSON_AddNullToObject(sm, "steps");
        cJSON_AddStringToObject(sm, "source", "probe");
        cJSON_AddItemToObject(
            t, "device_allocated_peak",
            metric(cJSON_GetNumberValue(cJSON_GetObjectItem(e, "peak_bytes")), "bytes"));
        cJSON_AddItemToObject(t, "device_reserved_peak", metric(NAN, "bytes"));
        cJSON_AddItemToObject(t, "rss_peak", metric(NAN, "bytes"));
        cJSON_AddItemToObject(t, "swap_growth", metric(NAN, "bytes"));
        cJSON_AddItemToObject(t, "psi_peak", metric(NAN, "percent"));
        cJSON_AddItemToObject(t, "wall_s", metric(NAN, "s"));
        cJSON_AddItemToArray(trials, t);
        int b = isfinite(batch) && batch >= 1 && batch <= 1e9 ? (int)batch : 0;
        if (pts && b) {
            pts[np++] = (dg_sweep_point){b, ok, ci};
            if (!ok && (!first_bad || b < first_bad))
                first_bad = b;
        }
        at = b;
        stop = ok ? "limit" : strcmp(ended, "device-oom") == 0 ? "oom" : ended;
    }
    cJSON *st = cJSON_AddObjectToObject(s, "stopped");
    cJSON_AddStringToObject(st, "reason", stop);
    cJSON_AddNumberToObject(st, "at_batch", at);
    cJSON_AddArrayToObject(s, "bisect");
    dg_sweep_conclude(s, pts, np, first_bad);
    dg_free(pts);
    return s;
}

/* Step-time statistics of the stored steps (warm-up excluded) as
 * dg_stats_json; with_wait: each step plus its loader wait (the time the
 * headline rate divides by), else the step alone. */
static cJSON *step_stats(const dg_evcollect *c, double *median, bool with_wait)
{
    double *v = dg_malloc((c->nsteps ? c->nsteps : 1) * sizeof *v);
    size_t n = 0;
    for (size_t i = 0; v && i < c->nsteps; i++)
        if (isfinite(c->steps[i].step_ms))
            v[n++] = c->steps[i].step_ms +
                     (with_wait && isfinite(c->steps[i].data_ms) ? c->steps[i].data_ms : 0);
    dg_stats st;
    dg_stats_compute(v, n, n > STEP_WARMUP ? STEP_WARMUP : 0, &st);
    dg_free(v);
    *median = st.median;
    return dg_stats_json(&st, "ms");
}

/* soak: epochs with the soak record's keys and the soak analysis. */
static cJSON *soak_section(const run *r)
{
    const dg_evcollect *c = &r->col;
    if (c->nepochs == 0)
        return cJSON_CreateNull();
    cJSON *s = cJSON_CreateObject();
    cJSON_AddNumberToObject(s, "v", DG_RECORD_VERSION);
    cJSON_AddStringToObject(s, "kind", "soak");
    cJSON_AddStringToObject(s, "source", "probe");
    cJSON *eps = cJSON_AddArrayToObject(s, "epochs");
    double batch0 = start_batch(c);
    bool all_emptied = true;
    double *tmp = dg_malloc((c->nsteps ? c->nsteps : 1) * sizeof *tmp);
    double *per_epoch = dg_malloc(c->nepochs * sizeof *per_epoch); /* timed steps of each */
    for (size_t i = 0; i < c->nepochs; i++) {
        const dg_ev_epoch *e = &c->epochs[i];
        cJSON *o = cJSON_CreateObject();
        double ep = isfinite(e->epoch) ? e->epoch : (double)i;
        cJSON_AddNumberToObject(o, "epoch", ep);
        cJSON_AddItemToObject(o, "allocated", metric(e->allocated, "bytes"));
        cJSON_AddItemToObject(o, "reserved", metric(e->reserved, "bytes"));
        cJSON_AddItemToObject(o, "driver_used", metric(e->driver, "bytes"));
        cJSON_AddItemToObject(o, "rss", metric(e->footprint, "bytes"));
        cJSON_AddItemToObject(o, "rss_peak",
                              metric(i < r->nerp ? r->epoch_rss_peak[i] : NAN, "bytes"));
        add_tri(o, "cache_emptied", e->cache_emptied);
        add_tri(o, "validation", e->validation);
        /* The epoch's steps: median time and samples/s. */
        size_t n = 0;
        double sum = 0, samples = 0;
        bool batch_known = true;
        for (size_t k = 0; tmp && k < c->nsteps; k++) {
            const dg_ev_step *st = &c->steps[k];
            if (st->epoch != ep || !isfinite(st->step_ms))
                continue;
            tmp[n++] = st->step_ms;
            sum += st->step_ms + (isfinite(st->data_ms) ? st->data_ms : 0);
            double b = isfinite(st->batch) ? st->batch : batch0;
            if (isfinite(b))
                samples += b;
            else
                batch_known = false;
        }
        double med = median_of(tmp, n);
        if (per_epoch)
            per_epoch[i] = (double)n;
        cJSON_AddItemToObject(o, "step_ms", metric(med, "ms"));
        cJSON_AddItemToObject(
            o, "samples_per_s",
            metric(n && batch_known && sum > 0 ? samples / (sum / 1e3) : NAN, "samples/s"));
        cJSON_AddItemToObject(o, "max_allocated", metric(e->max_allocated, "bytes"));
        cJSON_AddNumberToObject(o, "t", e->t);
        cJSON_AddItemToArray(eps, o);
        if (e->cache_emptied != 1)
            all_emptied = false;
    }
    dg_free(tmp);
    double med;
    cJSON *stats = step_stats(c, &med, false);
    /* Version 2: the analysis beside the epochs, not nested under "soak". */
    cJSON_AddNumberToObject(s, "epochs_planned", (double)c->nepochs);
    /* The steps an epoch holds (the median over the epochs the probe closed),
     * as the fixture's soak plans them: the slowing-down rule asks how many
     * steps its thirds rest on. */
    double spe = per_epoch ? median_of(per_epoch, c->nepochs) : NAN;
    dg_free(per_epoch);
    if (isfinite(spe))
        cJSON_AddNumberToObject(s, "steps_per_epoch", round(spe));
    cJSON_AddBoolToObject(s, "empty_cache", all_emptied);
    dg_soak_analyse(s, eps, c->nsteps ? stats : NULL);
    cJSON *steps = cJSON_AddObjectToObject(s, "steps");
    cJSON_AddNumberToObject(steps, "warmup", c->nsteps > STEP_WARMUP ? STEP_WARMUP : 0);
    cJSON_AddItemToObject(steps, "stats", stats);
    return s;
}

/* CUDA's sync debug mode counts (docs/events.md): the synchronizing CUDA
 * operations the probe saw, or null and why (run_start's sync_debug). */
static void device_syncs(cJSON *sp, const dg_evcollect *c, size_t with, double n)
{
    add_num_or_null(sp, "device_syncs", with ? n : NAN);
    add_num_or_null(sp, "device_syncs_per_step", with ? n / (double)with : NAN);
    dg_json_add_str(sp, "device_syncs_source",
                    with ? "CUDA sync debug mode (torch.cuda.set_sync_debug_mode(\"warn\")): "
                           "synchronizing CUDA operations, counted per step"
                         : NULL);
    if (with) {
        cJSON_AddNullToObject(sp, "device_syncs_why");
        return;
    }
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(c->run_start, "sync_debug");
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(sd, "reason");
    const cJSON *state = cJSON_GetObjectItemCaseSensitive(sd, "state");
    char buf[600];
    if (cJSON_IsString(why) && why->valuestring[0])
        snprintf(buf, sizeof buf, "%s", why->valuestring);
    else if (cJSON_IsString(state))
        snprintf(buf, sizeof buf, "sync debug mode %.40s, but no step reported a count",
                 state->valuestring);
    else
        snprintf(buf, sizeof buf,
                 "not measured: no zero-code probe report of CUDA's sync debug "
                 "mode (a probe without it, or no probe)");
    dg_json_add_str(sp, "device_syncs_why", buf);
}

/* profile (partial): step times, the data wait, fallbacks, sync points. */
static cJSON *profile_section(const dg_evcollect *c, cJSON *root)
{
    cJSON *thr = cJSON_AddObjectToObject(root, "throughput");
    double batch0 = start_batch(c);
    /* A step's data_ms is outside its step_ms (docs/events.md): the loop's
     * time is their sum, so the wait's share is data / (data + step) and the
     * throughput is samples over that sum. */
    double sum_ms = 0, samples = 0, sum_data = 0, sum_ms_with_data = 0, reads = 0, dsyncs = 0,
           lib_reads = 0;
    size_t with_lib = 0;
    /* The same over the steps after the warm-up (first-step library start-up
     * left out): what a short child run (devgate accept -- CMD) compares. */
    double warm_ms = 0, warm_samples = 0;
    size_t warm_n = 0, warm_unknown = 0;
    size_t timed = 0, with_data = 0, loss_reads = 0, synced = 0, batch_unknown = 0, with_reads = 0,
           with_dsyncs = 0;
    double *dv = dg_malloc((c->nsteps ? c->nsteps : 1) * sizeof *dv);
    for (size_t i = 0; i < c->nsteps; i++) {
        const dg_ev_step *s = &c->steps[i];
        if (isfinite(s->loss))
            loss_reads++;
        if (s->synced == 1 || isfinite(s->loss))
            synced++;
        if (isfinite(s->syncs)) {
            reads += s->syncs;
            with_reads++;
        }
        if (isfinite(s->syncs_library)) {
            lib_reads += s->syncs_library;
            with_lib++;
        }
        if (isfinite(s->device_syncs)) {
            dsyncs += s->device_syncs;
            with_dsyncs++;
        }
        if (!isfinite(s->step_ms))
            continue;
        timed++;
        sum_ms += s->step_ms + (isfinite(s->data_ms) ? s->data_ms : 0);
        double b = isfinite(s->batch) ? s->batch : batch0;
        if (isfinite(b))
            samples += b;
        else
            batch_unknown++;
        if (i >= STEP_WARMUP) {
            warm_n++;
            warm_ms += s->step_ms + (isfinite(s->data_ms) ? s->data_ms : 0);
            if (isfinite(b))
                warm_samples += b;
            else
                warm_unknown++;
        }
        if (isfinite(s->data_ms)) {
            if (dv)
                dv[with_data] = s->data_ms;
            with_data++;
            sum_data += s->data_ms;
            sum_ms_with_data += s->step_ms + s->data_ms;
        }
    }
    double med = NAN, wmed;
    cJSON *stats = step_stats(c, &med, false);
    cJSON *wall_stats = step_stats(c, &wmed, true);
    double whole = timed && !batch_unknown && sum_ms > 0 ? samples / (sum_ms / 1e3) : NAN;
    double wsps = warm_n && !warm_unknown && warm_ms > 0 ? warm_samples / (warm_ms / 1e3) : NAN;
    /* The headline is the steady rate: the first steps pay start-up, compile
     * and allocator warm-up, which a long run amortises and a short one does
     * not. The whole run's rate stands in, said so, when too few steps
     * followed the warm-up. */
    bool steady = isfinite(wsps);
    double sps = steady ? wsps : whole;
    cJSON_AddItemToObject(thr, "samples_per_s", metric(sps, "samples/s"));
    dg_json_add_str(thr, "samples_per_s_basis",
                    steady            ? "after-warmup"
                    : isfinite(whole) ? "whole-run"
                                      : NULL);
    char basis[160] = "";
    if (steady)
        snprintf(basis, sizeof basis, "over the steps after the first %d (warm-up left out)",
                 STEP_WARMUP);
    else if (isfinite(whole))
        snprintf(basis, sizeof basis,
                 "over every step, warm-up included: %zu timed step%s, too few to leave out the "
                 "first %d",
                 timed, timed == 1 ? "" : "s", STEP_WARMUP);
    dg_json_add_str(thr, "samples_per_s_note", basis[0] ? basis : NULL);
    cJSON_AddItemToObject(thr, "samples_per_s_whole_run", metric(whole, "samples/s"));
    cJSON_AddItemToObject(thr, "step_ms", metric(med, "ms"));
    cJSON_AddNumberToObject(thr, "timed_steps", (double)timed);
    cJSON_AddItemToObject(thr, "samples_per_s_after_warmup", metric(wsps, "samples/s"));
    cJSON_AddNumberToObject(thr, "warmup_steps", STEP_WARMUP);
    add_num_or_null(thr, "batch", batch0);
    cJSON_AddStringToObject(thr, "source", "probe");
    if (c->nsteps == 0 && c->nfallbacks == 0) {
        cJSON_Delete(stats);
        cJSON_Delete(wall_stats);
        dg_free(dv);
        return cJSON_CreateNull();
    }
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "v", 1);
    cJSON_AddStringToObject(p, "kind", "profile");
    cJSON_AddStringToObject(p, "source", "probe");
    cJSON *step = cJSON_AddObjectToObject(p, "step");
    cJSON_AddItemToObject(step, "ms", metric(med, "ms"));
    cJSON_AddItemToObject(step, "stats", stats);
    /* The step with its loader wait: the spread of the time the rate divides by. */
    cJSON_AddItemToObject(step, "wall_stats", wall_stats);
    cJSON *ph = cJSON_AddObjectToObject(p, "phases");
    cJSON *qw = cJSON_AddObjectToObject(ph, "queue_wait");
    double dmed = dv ? median_of(dv, with_data) : NAN;
    cJSON_AddItemToObject(qw, "ms", metric(dmed, "ms"));
    cJSON_AddItemToObject(
        qw, "share",
        metric(with_data && sum_ms_with_data > 0 ? sum_data / sum_ms_with_data : NAN, "fraction"));
    cJSON_AddBoolToObject(qw, "in_step", false);
    cJSON_AddStringToObject(ph, "source",
                            "probe step events: data_ms (time waiting for the batch, before the "
                            "step) over data_ms + step_ms");
    dg_free(dv);
    cJSON *fb = cJSON_AddArrayToObject(p, "fallbacks");
    for (size_t i = 0; i < c->nfallbacks; i++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "op", c->fallbacks[i].op);
        cJSON_AddStringToObject(f, "device", c->fallbacks[i].device);
        cJSON_AddNumberToObject(f, "count", (double)c->fallbacks[i].count);
        dg_json_add_str(f, "message", c->fallbacks[i].message[0] ? c->fallbacks[i].message : NULL);
        cJSON_AddItemToArray(fb, f);
    }
    cJSON *sp = cJSON_AddObjectToObject(p, "sync_points");
    cJSON_AddNumberToObject(sp, "loss_reads", (double)loss_reads);
    cJSON_AddNullToObject(sp, "fallbacks");
    cJSON_AddNullToObject(sp, "total");
    add_num_or_null(sp, "per_step", c->nsteps ? (double)synced / (double)c->nsteps : NAN);
    cJSON_AddStringToObject(
        sp, "note", "per_step: share of step events that were synchronised or read the loss");
    add_num_or_null(sp, "host_reads", with_reads ? reads : NAN);
    add_num_or_null(sp, "host_reads_per_step", with_reads ? reads / (double)with_reads : NAN);
    dg_json_add_str(sp, "host_reads_source",
                    with_reads ? "zero-code probe: .item(), .tolist(), .numpy(), .cpu() of a "
                                 "device tensor and explicit synchronize, counted per step"
                               : NULL);
    /* Of them, the reads a library's code made (the calling frame: torch or
     * site-packages), the rest the program's own. */
    add_num_or_null(sp, "host_reads_library", with_lib ? lib_reads : NAN);
    device_syncs(sp, c, with_dsyncs, dsyncs);
    cJSON *sc = cJSON_AddObjectToObject(p, "steps");
    cJSON_AddNumberToObject(sc, "stored", (double)c->nsteps);
    cJSON_AddNumberToObject(sc, "summarised", (double)c->steps_summarised);
    cJSON_AddNumberToObject(sc, "timed", (double)timed);
    return p;
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
    cJSON_AddItemToObject(s, "wall", metric(wall, "s"));
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
    double t0 = r->t0, next_sample = t0;
    double deadline = o->timeout_s > 0 ? t0 + o->timeout_s : INFINITY;
    double kill_at = INFINITY, eof_t = NAN, end_t = NAN;
    sig_atomic_t last_fwd = 0;
    bool pipe_open = fd >= 0;
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
        double wake = fmin(fmin(next_sample, kill_at), fmin(deadline, now + 0.05));
        int ms = (int)ceil((wake - now) * 1e3);
        if (ms < 1)
            ms = 1;
        if (ms > 50)
            ms = 50;
        if (pipe_open) {
            struct pollfd p = {fd, POLLIN, 0};
            if (poll(&p, 1, ms) > 0 && drain(r, fd, READ_BUDGET)) {
                pipe_open = false;
                eof_t = dg_now();
            }
        } else {
            nap_ms(ms);
        }
        now = dg_now();
        if (!out->reaped) {
            int st;
            pid_t w = srv ? dg_forksrv_wait(srv, pid, &st) : waitpid(pid, &st, WNOHANG);
            if (w == pid || (w < 0 && errno == ECHILD)) {
                out->reaped = w == pid;
                out->wstatus = st;
                if (w != pid)
                    out->reaped = true, out->wstatus = -1;
                end_t = now;
                if (pipe_open && drain(r, fd, (size_t)64 << 20)) {
                    pipe_open = false;
                    eof_t = end_t;
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
    if (pipe_open) {
        drain(r, fd, (size_t)64 << 20);
    }
    dg_evreader_finish(&r->rd, on_line, r);
    dg_tree_reap(&tree);
    out->pipe_closed_early = isfinite(eof_t) && isfinite(end_t) && end_t - eof_t > EOF_SLACK_S;
    out->wall = (isfinite(end_t) ? end_t : dg_now()) - t0;
#ifdef PR_SET_CHILD_SUBREAPER
    if (reaper_set)
        prctl(PR_SET_CHILD_SUBREAPER, 0);
#endif
    dg_tree_free(&tree);
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
    cJSON_AddItemToObject(s, "wall", metric(oc->wall, "s"));
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
    } else {
        cJSON_AddNullToObject(s, "run_end");
    }
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
        cJSON_AddItemToObject(samples, "cores", metric(cores > 0 ? cores : NAN, "cores"));
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
    /* The environment proof first, so the program's load does not colour it. */
    char *envj = NULL;
    double env_t = dg_now(), env_wall = NAN;
    dg_status env_st = DG_OK;
    char env_err[DG_ERRMSG_MAX] = "";
    if (!o->no_env) {
        dg_env_opts eo = {0};
        env_st = dg_env_run(ctx, &eo, &envj);
        env_wall = dg_now() - env_t;
        if (env_st != DG_OK)
            snprintf(env_err, sizeof env_err, "%s", dg_errmsg(ctx));
    }
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
    launch ln = {.srv = NULL, .why = ""};
    if (srv) {
        const char **edits = dg_spawn_edits(plan.env);
        if (edits && dg_forksrv_launch(srv, plan.argv, edits, o->stdout_to_stderr, o->mem_limit,
                                       &pid, &fd, ln.why, sizeof ln.why) == 0)
            ln.srv = srv;
        else if (!edits)
            snprintf(ln.why, sizeof ln.why, "out of host memory");
        dg_free(edits);
        ln.server_pid = ln.srv ? dg_forksrv_pid(srv) : -1;
    }
    r.t0 = dg_now(); /* after the fork server's start-up, which is not the run's */
    if (!ln.srv)
        err = dg_spawn_child_limited(plan.argv, plan.env, o->stdout_to_stderr, o->mem_limit, &pid,
                                     &fd);
    if (err) {
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
    add_num_or_null(spec, "timeout_s", o->timeout_s > 0 ? o->timeout_s : NAN);
    cJSON_AddNumberToObject(spec, "grace_s", o->grace_s > 0 ? o->grace_s : DEFAULT_GRACE_S);
    if (o->probe == DG_PROBE_OFF)
        cJSON_AddNullToObject(spec, "events_fd");
    else
        cJSON_AddNumberToObject(spec, "events_fd", DG_EVENTS_FD);
    cJSON_AddStringToObject(spec, "probe", plan.mode);
    cJSON *pr = cJSON_AddObjectToObject(root, "probe");
    cJSON_AddStringToObject(pr, "mode", plan.mode);
    cJSON_AddBoolToObject(pr, "armed", plan.how != NULL);
    dg_json_add_str(pr, "how", plan.how);
    dg_json_add_str(pr, "why", plan.why[0] ? plan.why : NULL);
    cJSON *pcmd = cJSON_AddArrayToObject(pr, "cmd");
    for (size_t i = 0; plan.how && plan.argv[i]; i++)
        cJSON_AddItemToArray(
            pcmd, cJSON_CreateString(
                      dg_utf8_valid(plan.argv[i], strlen(plan.argv[i])) ? plan.argv[i] : "?"));
    cJSON_AddBoolToObject(pr, "empty_cache", o->probe == DG_PROBE_AUTO && o->empty_cache);
    const cJSON *sp_mode = cJSON_GetObjectItemCaseSensitive(r.col.run_start, "probe");
    dg_json_add_str(pr, "reported", cJSON_IsString(sp_mode) ? sp_mode->valuestring : NULL);
    dg_probe_plan_free(&plan);

    char summary[512], error[256];
    cJSON *sup = supervise_section(&r, o, &oc, summary, sizeof summary, error, sizeof error);
    dg_forksrv_launch_json(sup, ln.srv != NULL, ln.server_pid, ln.why);
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
    cJSON *envo = envj ? cJSON_Parse(envj) : NULL;
    dg_string_free(envj);
    cJSON_AddItemToObject(root, "env", envo ? envo : cJSON_CreateNull());
    cJSON_AddItemToObject(root, "gate", gate_section(&r.col));
    cJSON_AddItemToObject(root, "sweep", sweep_section(&r.col));
    cJSON_AddItemToObject(root, "soak", soak_section(&r));
    cJSON_AddNullToObject(root, "compare");
    cJSON_AddItemToObject(root, "profile", profile_section(&r.col, root));
    headline_summary(steps, root, summary, sizeof summary);
    cJSON_AddItemToObject(root, "supervise", sup);
    cJSON_AddItemToObject(root, "framework", from_start(&r.col, "framework"));
    cJSON_AddItemToObject(root, "device", from_start(&r.col, "device"));
    cJSON_AddItemToObject(root, "bucket", from_start(&r.col, "bucket"));
    cJSON_AddItemToObject(root, "seeds", from_start(&r.col, "seeds"));
    cJSON_AddItemToObject(root, "oom", cJSON_Duplicate(r.col.ooms, true));
    cJSON_AddItemToObject(root, "thresholds", cJSON_CreateObject());
    cJSON_AddArrayToObject(root, "findings");
    cJSON_AddNullToObject(root, "decision");
    cJSON_AddNullToObject(root, "final_gate");
    cJSON_AddNullToObject(root, "pack");
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
