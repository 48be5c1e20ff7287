/* accept -- CMD: the compare and profile sections of the user's program
 * (docs/schema/measure.md), built from what its child runs reported, in the
 * fixture's shapes so the same rules judge them. */
#include "steps/accept_cmd.h"

#include "core/core.h"
#include "core/json.h"
#include "measure/measure.h"

#include <math.h>
#include <string.h>

static cJSON *metric(double v, const char *unit)
{
    return dg_json_metric(isfinite(v) ? v : 0, isfinite(v), unit);
}

cJSON *dg_accept_cmd_compare_run(int batch, const char *device, const double *cpu_sps,
                                 const double *dev_sps, int reps, const double *dev_busy,
                                 const double *cpu_ms, const double *dev_ms)
{
    cJSON *run = cJSON_CreateObject();
    cJSON_AddNumberToObject(run, "batch", batch);
    cJSON_AddStringToObject(run, "status", "ok");
    double cs[16], ds[16], cm[16], dm[16], bz[16];
    size_t nc = 0, nd = 0, ncm = 0, ndm = 0, nb = 0;
    for (int i = 0; i < reps && i < 16; i++) {
        if (isfinite(cpu_sps[i]) && cpu_sps[i] > 0)
            cs[nc++] = cpu_sps[i];
        if (isfinite(dev_sps[i]) && dev_sps[i] > 0)
            ds[nd++] = dev_sps[i];
        if (cpu_ms && isfinite(cpu_ms[i]))
            cm[ncm++] = cpu_ms[i];
        if (dev_ms && isfinite(dev_ms[i]))
            dm[ndm++] = dev_ms[i];
        if (dev_busy && isfinite(dev_busy[i]))
            bz[nb++] = dev_busy[i];
    }
    dg_stats s;
    cJSON *cpu = cJSON_AddObjectToObject(run, "cpu");
    dg_stats_compute(cm, ncm, 0, &s);
    cJSON_AddItemToObject(cpu, "step_ms", metric(ncm ? s.median : NAN, "ms"));
    dg_stats_compute(cs, nc, 0, &s);
    double cmed = nc ? s.median : NAN;
    cJSON_AddItemToObject(cpu, "samples_per_s", metric(cmed, "samples/s"));
    cJSON *dev = cJSON_AddObjectToObject(run, "device");
    cJSON_AddStringToObject(dev, "backend", device);
    dg_stats_compute(dm, ndm, 0, &s);
    cJSON_AddItemToObject(dev, "step_ms", metric(ndm ? s.median : NAN, "ms"));
    dg_stats_compute(ds, nd, 0, &s);
    double dmed = nd ? s.median : NAN;
    cJSON_AddItemToObject(dev, "samples_per_s", metric(dmed, "samples/s"));
    /* The speedup in samples/s over the loop's wall time (data wait included):
     * device over cpu, the interval by the seeded bootstrap of the median ratio. */
    double sp = isfinite(cmed) && isfinite(dmed) && cmed > 0 ? dmed / cmed : NAN;
    cJSON_AddItemToObject(run, "speedup", metric(sp, "x"));
    dg_median_ci ci;
    bool civ = nc && nd &&
               dg_bootstrap_median_ci(ds, nd, cs, nc, 0, 0.95, DG_BOOTSTRAP_SEED, &ci) && ci.valid;
    cJSON *cij = cJSON_AddObjectToObject(run, "speedup_ci");
    cJSON_AddItemToObject(cij, "lo", metric(civ ? ci.lo : NAN, "x"));
    cJSON_AddItemToObject(cij, "hi", metric(civ ? ci.hi : NAN, "x"));
    cJSON_AddNumberToObject(cij, "level", 0.95);
    cJSON_AddNumberToObject(cij, "resamples", civ ? (double)ci.resamples : 0);
    cJSON_AddStringToObject(cij, "method", "percentile bootstrap of median(device) / median(cpu)");
    /* Time per sample: 100 (1 - 1/speedup), the interval from the speedup's. */
    cJSON_AddItemToObject(run, "step_time_reduction_pct",
                          metric(isfinite(sp) && sp > 0 ? 100 * (1 - 1 / sp) : NAN, "%"));
    cJSON *rci = cJSON_AddObjectToObject(run, "step_time_reduction_pct_ci");
    cJSON_AddItemToObject(rci, "lo", metric(civ && ci.lo > 0 ? 100 * (1 - 1 / ci.lo) : NAN, "%"));
    cJSON_AddItemToObject(rci, "hi", metric(civ && ci.hi > 0 ? 100 * (1 - 1 / ci.hi) : NAN, "%"));
    cJSON_AddNumberToObject(rci, "level", 0.95);
    cJSON_AddNumberToObject(rci, "resamples", civ ? (double)ci.resamples : 0);
    cJSON_AddStringToObject(rci, "method", "from speedup_ci");
    dg_stats_compute(bz, nb, 0, &s);
    cJSON_AddItemToObject(run, "busy_fraction", metric(nb ? s.median : NAN, "fraction"));
    cJSON_AddStringToObject(run, "busy_source",
                            "1 - the data wait's share, from the probe's host clock (not device "
                            "utilisation)");
    cJSON *rp = cJSON_AddObjectToObject(run, "repetitions");
    cJSON_AddNumberToObject(rp, "per_side", reps);
    cJSON_AddNumberToObject(rp, "warmup_pairs", 0);
    cJSON *order = cJSON_AddArrayToObject(rp, "order");
    cJSON *ca = cJSON_AddArrayToObject(rp, "cpu_samples_per_s");
    cJSON *da = cJSON_AddArrayToObject(rp, "device_samples_per_s");
    for (int i = 0; i < reps && i < 16; i++) {
        cJSON_AddItemToArray(order, cJSON_CreateString("cpu"));
        cJSON_AddItemToArray(order, cJSON_CreateString("device"));
        cJSON_AddItemToArray(ca, isfinite(cpu_sps[i]) ? cJSON_CreateNumber(cpu_sps[i])
                                                      : cJSON_CreateNull());
        cJSON_AddItemToArray(da, isfinite(dev_sps[i]) ? cJSON_CreateNumber(dev_sps[i])
                                                      : cJSON_CreateNull());
    }
    cJSON_AddNullToObject(run, "verdict");
    cJSON_AddStringToObject(run, "note",
                            "numerics are not compared for a user's program (no reference run)");
    return run;
}

/* The speedup's 95% interval width over the speedup (median device over
 * median cpu samples/s) after n pairs; NAN when not computable. */

static cJSON *phase(double ms, double wall_ms, int steps, bool in_step)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddItemToObject(p, "ms", metric(isfinite(ms) ? ms / steps : NAN, "ms"));
    cJSON_AddItemToObject(p, "share",
                          metric(isfinite(ms) && wall_ms > 0 ? ms / wall_ms : NAN, "fraction"));
    cJSON_AddBoolToObject(p, "in_step", in_step);
    return p;
}

cJSON *dg_accept_cmd_profile(const cJSON *window, const cJSON *run_profile, const char *device)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "v", 1);
    cJSON_AddStringToObject(p, "kind", "profile");
    cJSON_AddStringToObject(p, "source", "command");
    const char *err = dg_jstr(window, "error");
    cJSON_AddStringToObject(p, "status", window && !err ? "ok" : "failed");
    dg_json_add_str(p, "error", !window ? "the profiler window reported nothing" : err);
    int steps = dg_jint(window, "steps", 0);
    cJSON *w = cJSON_AddObjectToObject(p, "window");
    cJSON_AddNumberToObject(w, "warmup",
                            dg_jnum(window, "warmup") >= 0 ? dg_jnum(window, "warmup") : 0);
    cJSON_AddNumberToObject(w, "steps", steps > 0 ? steps : 0);
    dg_json_add_str(w, "cut", dg_jstr(window, "cut"));
    double nev = dg_jnum(window, "events");
    if (isfinite(nev))
        cJSON_AddNumberToObject(w, "events", nev);
    else
        cJSON_AddNullToObject(w, "events");
    double wall = dg_jnum(window, "wall_ms");
    cJSON *step = cJSON_AddObjectToObject(p, "step");
    cJSON_AddItemToObject(step, "ms",
                          metric(dg_json_metric_value(dg_jpath(run_profile, "step.ms")), "ms"));
    cJSON_AddItemToObject(step, "profiled_ms",
                          metric(steps > 0 && isfinite(wall) ? wall / steps : NAN, "ms"));
    const cJSON *stats = dg_jpath(run_profile, "step.stats");
    if (stats)
        cJSON_AddItemToObject(step, "stats", cJSON_Duplicate(stats, true));
    cJSON *ph = cJSON_AddObjectToObject(p, "phases");
    if (steps > 0 && !err) {
        cJSON_AddItemToObject(ph, "queue_wait",
                              phase(dg_jnum(window, "data_ms"), wall, steps, false));
        cJSON_AddItemToObject(ph, "h2d", phase(dg_jnum(window, "h2d_ms"), wall, steps, true));
        cJSON_AddItemToObject(ph, "compute",
                              phase(dg_jnum(window, "compute_ms"), wall, steps, true));
        cJSON_AddItemToObject(ph, "sync", phase(dg_jnum(window, "sync_ms"), wall, steps, true));
    }
    cJSON_AddStringToObject(
        ph, "source",
        "torch.profiler window from the step hook: data = the probe's wait inside the loader's "
        "__next__, h2d = copy operators (not on the cpu), sync = host reads of device values, "
        "compute = the rest of the window's wall time");
    cJSON *ops = cJSON_AddArrayToObject(p, "ops");
    double total = 0;
    const cJSON *o;
    bool dev = device && strcmp(device, "cpu") != 0;
    cJSON_ArrayForEach(o, dg_jpath(window, "ops"))
    {
        double ms = dg_jnum(o, dev ? "device_ms_total" : "ms_total");
        if (isfinite(ms))
            total += ms;
    }
    cJSON_ArrayForEach(o, dg_jpath(window, "ops"))
    {
        const char *name = dg_jstr(o, "op");
        double ms = dg_jnum(o, dev ? "device_ms_total" : "ms_total");
        double calls = dg_jnum(o, "calls");
        if (!name || !isfinite(ms))
            continue;
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "op", name);
        cJSON_AddNullToObject(r, "shape");
        cJSON_AddStringToObject(r, "backend", device ? device : "cpu");
        cJSON_AddBoolToObject(r, "fallback", false);
        cJSON_AddNumberToObject(r, "calls", isfinite(calls) ? calls : 0);
        cJSON_AddNumberToObject(r, "ms_total", ms);
        cJSON_AddNumberToObject(r, "ms_mean", calls > 0 ? ms / calls : ms);
        cJSON_AddNumberToObject(r, "share", total > 0 ? ms / total : 0);
        cJSON_AddItemToArray(ops, r);
    }
    cJSON_AddStringToObject(p, "ops_source",
                            dev ? "torch.profiler self device time, top operators of the window"
                                : "torch.profiler self cpu time, top operators of the window");
    const cJSON *sp = dg_jpath(run_profile, "sync_points");
    if (sp)
        cJSON_AddItemToObject(p, "sync_points", cJSON_Duplicate(sp, true));
    const cJSON *fb = dg_jpath(run_profile, "fallbacks");
    if (fb)
        cJSON_AddItemToObject(p, "fallbacks", cJSON_Duplicate(fb, true));
    dg_json_add_str(p, "trace", dg_jstr(window, "trace"));
    dg_json_add_str(p, "trace_skipped", dg_jstr(window, "trace_skipped"));
    cJSON_AddStringToObject(p, "note",
                            "the profiled window runs the user's program under torch.profiler; "
                            "its step time (profiled_ms) includes the profiler's cost");
    dg_json_utf8_fix(p); /* the window's op names and the copied sections: the program's bytes */
    return p;
}
