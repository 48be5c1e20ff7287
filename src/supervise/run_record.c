/* devgate run's record sections from the program's events (docs/events.md):
 * gate, sweep, soak, profile and throughput, shaped as devgate's own steps
 * write them so the rules and reports apply unchanged (the soak and sweep
 * judged by src/analysis/). Pure functions of the event collector; run.c
 * calls them once the program has exited. */
#include "supervise/supervise.h"

#include "analysis/analysis.h"
#include "core/record.h"
#include "measure/measure.h"

#include <math.h>
#include <string.h>

#define STEP_WARMUP 2       /* as the training fixture: the first two steps are warm-up */
#define SERIES_SLACK_S 0.25 /* a sample this near the timed steps saw them (one every 0.2 s) */

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

/* A section's head as devgate's own step writes it, marked as the probe's. */
static cJSON *section_head(const char *kind, int version)
{
    cJSON *s = cJSON_CreateObject();
    cJSON_AddNumberToObject(s, "v", version);
    cJSON_AddStringToObject(s, "kind", kind);
    cJSON_AddStringToObject(s, "source", "probe");
    return s;
}

cJSON *dg_run_from_start(const dg_evcollect *c, const char *key)
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

cJSON *dg_run_gate_section(const dg_evcollect *c)
{
    if (cJSON_GetArraySize(c->gates) == 0)
        return cJSON_CreateNull();
    cJSON *g = section_head("gate", 1);
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
        dg_json_add_num(m, "m", n);
        dg_json_add_num(m, "n", n);
        dg_json_add_num(m, "k", n);
        if (cJSON_IsBool(ok))
            cJSON_AddBoolToObject(m, "ok", cJSON_IsTrue(ok));
        else
            cJSON_AddNullToObject(m, "ok");
        dg_json_add_str(m, "reason",
                        cJSON_IsFalse(ok) ? "the probe's matrix product did not match" : NULL);
        dg_json_add_num(m, "max_abs_err",
                        cJSON_GetNumberValue(cJSON_GetObjectItem(mm, "max_abs_err")));
        dg_json_add_num(m, "ms", cJSON_GetNumberValue(cJSON_GetObjectItem(mm, "ms")));
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
cJSON *dg_run_sweep_section(const dg_evcollect *c)
{
    int n = cJSON_GetArraySize(c->sweep_trials);
    if (n == 0)
        return cJSON_CreateNull();
    cJSON *s = section_head("sweep", 1);
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
        dg_json_add_num(t, "batch", batch);
        cJSON_AddStringToObject(t, "ended", ended);
        const cJSON *why = cJSON_GetObjectItem(e, "reason");
        dg_json_add_str(t, "reason", cJSON_IsString(why) ? why->valuestring : NULL);
        cJSON_AddNullToObject(t, "signal");
        cJSON_AddItemToObject(t, "samples_per_s", dg_json_metric_of(sps, "samples/s"));
        dg_sweep_rate ci = {.sps = isfinite(sps) ? sps : NAN,
                            .lo = NAN,
                            .hi = NAN,
                            .reason = "the probe's sweep reports one step time"};
        cJSON_AddItemToObject(t, "samples_per_s_ci", dg_sweep_rate_json(&ci));
        cJSON *sm = cJSON_AddObjectToObject(t, "step_ms");
        cJSON_AddItemToObject(
            sm, "median",
            dg_json_metric_of(cJSON_GetNumberValue(cJSON_GetObjectItem(e, "step_ms")), "ms"));
        cJSON_AddItemToObject(sm, "iqr", dg_json_metric_of(NAN, "ms"));
        cJSON_AddNullToObject(sm, "steps");
        cJSON_AddStringToObject(sm, "source", "probe");
        cJSON_AddItemToObject(
            t, "device_allocated_peak",
            dg_json_metric_of(cJSON_GetNumberValue(cJSON_GetObjectItem(e, "peak_bytes")), "bytes"));
        cJSON_AddItemToObject(t, "device_reserved_peak", dg_json_metric_of(NAN, "bytes"));
        cJSON_AddItemToObject(t, "rss_peak", dg_json_metric_of(NAN, "bytes"));
        cJSON_AddItemToObject(t, "swap_growth", dg_json_metric_of(NAN, "bytes"));
        cJSON_AddItemToObject(t, "psi_peak", dg_json_metric_of(NAN, "percent"));
        cJSON_AddItemToObject(t, "wall_s", dg_json_metric_of(NAN, "s"));
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
/* The leak screen over the memory each step read (soak.step_growth): from the
 * second half of the first epoch on, the start-up (imports, the optimizer's
 * state, the allocator's first blocks) left out. */
static void step_growth(cJSON *s, const dg_evcollect *c, double spe)
{
    size_t n = c->nsteps, first = 0;
    double *al = dg_malloc((n ? n : 1) * sizeof *al), *fp = dg_malloc((n ? n : 1) * sizeof *fp);
    bool any = false;
    for (size_t i = 0; al && fp && i < n; i++) {
        al[i] = c->steps[i].allocated;
        fp[i] = c->steps[i].footprint;
        any = any || isfinite(al[i]) || isfinite(fp[i]);
        if (c->steps[i].epoch == c->steps[0].epoch)
            first++;
    }
    size_t skip = first / 2 > STEP_WARMUP ? first / 2 : STEP_WARMUP;
    if (al && fp && any)
        dg_soak_step_growth(s, al, fp, n, skip < n ? skip : n, spe);
    dg_free(al);
    dg_free(fp);
}

cJSON *dg_run_soak_section(const dg_evcollect *c, const double *rss_peaks, size_t npeaks)
{
    if (c->nepochs == 0)
        return cJSON_CreateNull();
    cJSON *s = section_head("soak", DG_RECORD_VERSION);
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
        cJSON_AddItemToObject(o, "allocated", dg_json_metric_of(e->allocated, "bytes"));
        cJSON_AddItemToObject(o, "reserved", dg_json_metric_of(e->reserved, "bytes"));
        cJSON_AddItemToObject(o, "driver_used", dg_json_metric_of(e->driver, "bytes"));
        cJSON_AddItemToObject(o, "rss", dg_json_metric_of(e->footprint, "bytes"));
        cJSON_AddItemToObject(o, "rss_peak",
                              dg_json_metric_of(i < npeaks ? rss_peaks[i] : NAN, "bytes"));
        add_tri(o, "cache_emptied", e->cache_emptied);
        if (e->gc_full < 0)
            cJSON_AddNullToObject(o, "gc");
        else
            cJSON_AddStringToObject(o, "gc", e->gc_full ? "full" : "young");
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
        cJSON_AddItemToObject(o, "step_ms", dg_json_metric_of(med, "ms"));
        cJSON_AddItemToObject(
            o, "samples_per_s",
            dg_json_metric_of(n && batch_known && sum > 0 ? samples / (sum / 1e3) : NAN,
                              "samples/s"));
        cJSON_AddItemToObject(o, "max_allocated", dg_json_metric_of(e->max_allocated, "bytes"));
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
    /* The training set as the program's loader holds it: the accept record's
     * soak.data.train_samples, which the promise never exceeds. */
    double ntrain = dg_jnum(c->run_start, "loader.samples");
    if (isfinite(ntrain) && ntrain > 0) {
        cJSON *data = cJSON_AddObjectToObject(s, "data");
        cJSON_AddNumberToObject(data, "train_samples", ntrain);
        cJSON_AddStringToObject(data, "train_samples_source", "probe: len(DataLoader.dataset)");
    }
    dg_soak_analyse(s, eps, c->nsteps ? stats : NULL);
    step_growth(s, c, spe);
    cJSON *steps = cJSON_AddObjectToObject(s, "steps");
    cJSON_AddNumberToObject(steps, "warmup", c->nsteps > STEP_WARMUP ? STEP_WARMUP : 0);
    cJSON_AddItemToObject(steps, "stats", stats);
    return s;
}

/* CUDA's sync debug mode counts (docs/events.md): the synchronizing CUDA
 * operations the probe saw, or null and why (run_start's sync_debug). */
static void device_syncs(cJSON *sp, const dg_evcollect *c, size_t with, double n)
{
    dg_json_add_num(sp, "device_syncs", with ? n : NAN);
    dg_json_add_num(sp, "device_syncs_per_step", with ? n / (double)with : NAN);
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

/* What the profile and the throughput read of the step events. A step's
 * data_ms is outside its step_ms (docs/events.md): the loop's time is their
 * sum, so the wait's share is data / (data + step) and the throughput is
 * samples over that sum. */
typedef struct step_sums {
    double sum_ms, samples, sum_data, sum_ms_with_data, reads, dsyncs, lib_reads;
    size_t timed, with_data, loss_reads, synced, batch_unknown, with_reads, with_dsyncs, with_lib;
    /* The same over the steps after the warm-up (first-step library start-up
     * left out): what a short child run (devgate accept -- CMD) compares. */
    double warm_ms, warm_samples;
    size_t warm_n, warm_unknown;
    double *dv; /* the data waits (with_data of them); NULL when out of memory */
    double *bv; /* the samples each step held (nb of them: the loader's, not the batch asked) */
    size_t nb;
    double batch_max; /* the most a step held; NAN: none reported */
} step_sums;

/* Adds a step's b samples to *samples, or counts the step unknown. */
static void add_samples(double *samples, size_t *unknown, double b)
{
    if (isfinite(b))
        *samples += b;
    else
        (*unknown)++;
}

static void add_step_sums(step_sums *m, const dg_ev_step *s, size_t i, double batch0)
{
    if (isfinite(s->loss))
        m->loss_reads++;
    if (s->synced == 1 || isfinite(s->loss))
        m->synced++;
    if (isfinite(s->syncs)) {
        m->reads += s->syncs;
        m->with_reads++;
    }
    if (isfinite(s->syncs_library)) {
        m->lib_reads += s->syncs_library;
        m->with_lib++;
    }
    if (isfinite(s->device_syncs)) {
        m->dsyncs += s->device_syncs;
        m->with_dsyncs++;
    }
    if (!isfinite(s->step_ms))
        return;
    m->timed++;
    double loop_ms = s->step_ms + (isfinite(s->data_ms) ? s->data_ms : 0);
    m->sum_ms += loop_ms;
    double b = isfinite(s->batch) ? s->batch : batch0;
    add_samples(&m->samples, &m->batch_unknown, b);
    if (isfinite(s->batch)) {
        if (m->bv)
            m->bv[m->nb++] = s->batch;
        m->batch_max = isnan(m->batch_max) || s->batch > m->batch_max ? s->batch : m->batch_max;
    }
    if (i >= STEP_WARMUP) {
        m->warm_n++;
        m->warm_ms += loop_ms;
        add_samples(&m->warm_samples, &m->warm_unknown, b);
    }
    if (isfinite(s->data_ms)) {
        if (m->dv)
            m->dv[m->with_data] = s->data_ms;
        m->with_data++;
        m->sum_data += s->data_ms;
        m->sum_ms_with_data += s->step_ms + s->data_ms;
    }
}

/* The record's "throughput" (docs/schema/report.md, run) into thr. */
static void throughput_json(cJSON *thr, const step_sums *m, double med, double batch0)
{
    double whole =
        m->timed && !m->batch_unknown && m->sum_ms > 0 ? m->samples / (m->sum_ms / 1e3) : NAN;
    double wsps = m->warm_n && !m->warm_unknown && m->warm_ms > 0
                      ? m->warm_samples / (m->warm_ms / 1e3)
                      : NAN;
    /* The headline is the steady rate: the first steps pay start-up, compile
     * and allocator warm-up, which a long run amortises and a short one does
     * not. The whole run's rate stands in, said so, when too few steps
     * followed the warm-up. */
    bool steady = isfinite(wsps);
    double sps = steady ? wsps : whole;
    cJSON_AddItemToObject(thr, "samples_per_s", dg_json_metric_of(sps, "samples/s"));
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
                 m->timed, m->timed == 1 ? "" : "s", STEP_WARMUP);
    dg_json_add_str(thr, "samples_per_s_note", basis[0] ? basis : NULL);
    cJSON_AddItemToObject(thr, "samples_per_s_whole_run", dg_json_metric_of(whole, "samples/s"));
    cJSON_AddItemToObject(thr, "step_ms", dg_json_metric_of(med, "ms"));
    cJSON_AddNumberToObject(thr, "timed_steps", (double)m->timed);
    cJSON_AddItemToObject(thr, "samples_per_s_after_warmup", dg_json_metric_of(wsps, "samples/s"));
    cJSON_AddNumberToObject(thr, "warmup_steps", STEP_WARMUP);
    dg_json_add_num(thr, "batch", batch0);
    /* The samples a step really held (the loader's, not the batch asked for:
     * a data set smaller than the batch is delivered whole). */
    cJSON_AddItemToObject(thr, "samples_per_step",
                          dg_json_metric_of(median_of(m->bv, m->nb), "samples"));
    cJSON_AddItemToObject(thr, "samples_per_step_max", dg_json_metric_of(m->batch_max, "samples"));
    cJSON_AddStringToObject(thr, "source", "probe");
}

/* The profile's "sync_points" from the step events. */
static cJSON *sync_points_json(const dg_evcollect *c, const step_sums *m)
{
    cJSON *sp = cJSON_CreateObject();
    cJSON_AddNumberToObject(sp, "loss_reads", (double)m->loss_reads);
    cJSON_AddNullToObject(sp, "fallbacks");
    cJSON_AddNullToObject(sp, "total");
    dg_json_add_num(sp, "per_step", c->nsteps ? (double)m->synced / (double)c->nsteps : NAN);
    cJSON_AddStringToObject(
        sp, "note", "per_step: share of step events that were synchronised or read the loss");
    dg_json_add_num(sp, "host_reads", m->with_reads ? m->reads : NAN);
    dg_json_add_num(sp, "host_reads_per_step",
                    m->with_reads ? m->reads / (double)m->with_reads : NAN);
    dg_json_add_str(sp, "host_reads_source",
                    m->with_reads ? "zero-code probe: .item(), .tolist(), .numpy(), .cpu() of a "
                                    "device tensor and explicit synchronize, counted per step"
                                  : NULL);
    /* Of them, the reads a library's code made (the calling frame: torch or
     * site-packages), the rest the program's own. */
    dg_json_add_num(sp, "host_reads_library", m->with_lib ? m->lib_reads : NAN);
    device_syncs(sp, c, m->with_dsyncs, m->dsyncs);
    return sp;
}

void dg_run_energy_add(const dg_evcollect *c, cJSON *root)
{
    cJSON *thr = cJSON_GetObjectItemCaseSensitive(root, "throughput");
    if (!cJSON_IsObject(thr))
        return;
    double sps = dg_json_metric_value(cJSON_GetObjectItemCaseSensitive(thr, "samples_per_s"));
    const char *basis = dg_jstr(thr, "samples_per_s_basis");
    /* The steps the headline is over: after the warm-up, else all. */
    size_t first = basis && !strcmp(basis, "after-warmup") ? STEP_WARMUP : 0;
    double t0 = NAN, t1 = NAN;
    for (size_t i = first; i < c->nsteps; i++) {
        const dg_ev_step *st = &c->steps[i];
        if (!isfinite(st->t) || !isfinite(st->step_ms))
            continue;
        double begin = st->t - (st->step_ms + (isfinite(st->data_ms) ? st->data_ms : 0)) / 1e3;
        t0 = isfinite(t0) && t0 < begin ? t0 : begin;
        t1 = isfinite(t1) && t1 > st->t ? t1 : st->t;
    }
    /* A series point stands for the bucket ending at its t. */
    double sum = 0;
    int n = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, dg_jpath(root, "supervise.series"))
    {
        double t = dg_jnum(p, "t"), w = dg_jnum(p, "gpu_power");
        if (isfinite(t) && isfinite(w) && w >= 0 && t >= t0 - SERIES_SLACK_S &&
            t <= t1 + SERIES_SLACK_S)
            sum += w, n++;
    }
    double watts = n ? sum / n : NAN, jps = watts / sps;
    bool ok = isfinite(jps) && sps > 0;
    cJSON_AddItemToObject(thr, "power_mean", dg_json_metric(n ? watts : 0, n > 0, "W"));
    cJSON_AddItemToObject(thr, "energy_per_sample", dg_json_metric(ok ? jps : 0, ok, "J/sample"));
    dg_json_add_str(thr, "energy_source",
                    ok ? "NVML: the mean power of the devices the program's processes are on "
                         "(device-wide) over the timed steps, over samples_per_s"
                       : NULL);
}

cJSON *dg_run_profile_section(const dg_evcollect *c, cJSON *root)
{
    double batch0 = start_batch(c);
    step_sums m = {.dv = dg_malloc((c->nsteps ? c->nsteps : 1) * sizeof(double)),
                   .bv = dg_malloc((c->nsteps ? c->nsteps : 1) * sizeof(double)),
                   .batch_max = NAN};
    for (size_t i = 0; i < c->nsteps; i++)
        add_step_sums(&m, &c->steps[i], i, batch0);
    double med = NAN, wmed;
    cJSON *stats = step_stats(c, &med, false);
    cJSON *wall_stats = step_stats(c, &wmed, true);
    throughput_json(cJSON_AddObjectToObject(root, "throughput"), &m, med, batch0);
    dg_free(m.bv);
    if (c->nsteps == 0 && c->nfallbacks == 0) {
        cJSON_Delete(stats);
        cJSON_Delete(wall_stats);
        dg_free(m.dv);
        return cJSON_CreateNull();
    }
    cJSON *p = section_head("profile", 1);
    cJSON *step = cJSON_AddObjectToObject(p, "step");
    cJSON_AddItemToObject(step, "ms", dg_json_metric_of(med, "ms"));
    cJSON_AddItemToObject(step, "stats", stats);
    /* The step with its loader wait: the spread of the time the rate divides by. */
    cJSON_AddItemToObject(step, "wall_stats", wall_stats);
    cJSON *ph = cJSON_AddObjectToObject(p, "phases");
    cJSON *qw = cJSON_AddObjectToObject(ph, "queue_wait");
    double dmed = m.dv ? median_of(m.dv, m.with_data) : NAN;
    cJSON_AddItemToObject(qw, "ms", dg_json_metric_of(dmed, "ms"));
    cJSON_AddItemToObject(qw, "share",
                          dg_json_metric_of(m.with_data && m.sum_ms_with_data > 0
                                                ? m.sum_data / m.sum_ms_with_data
                                                : NAN,
                                            "fraction"));
    cJSON_AddBoolToObject(qw, "in_step", false);
    cJSON_AddStringToObject(ph, "source",
                            "probe step events: data_ms (time waiting for the batch, before the "
                            "step) over data_ms + step_ms");
    dg_free(m.dv);
    cJSON *fb = cJSON_AddArrayToObject(p, "fallbacks");
    for (size_t i = 0; i < c->nfallbacks; i++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "op", c->fallbacks[i].op);
        cJSON_AddStringToObject(f, "device", c->fallbacks[i].device);
        cJSON_AddNumberToObject(f, "count", (double)c->fallbacks[i].count);
        dg_json_add_str(f, "message", c->fallbacks[i].message[0] ? c->fallbacks[i].message : NULL);
        cJSON_AddItemToArray(fb, f);
    }
    cJSON_AddItemToObject(p, "sync_points", sync_points_json(c, &m));
    cJSON *sc = cJSON_AddObjectToObject(p, "steps");
    cJSON_AddNumberToObject(sc, "stored", (double)c->nsteps);
    cJSON_AddNumberToObject(sc, "summarised", (double)c->steps_summarised);
    cJSON_AddNumberToObject(sc, "timed", (double)m.timed);
    return p;
}
