/* accept -- CMD: the profile section of the user's program
 * (docs/schema/measure.md), built from what its child runs reported, in the
 * fixture's shapes so the same rules judge them. */
#include "steps/accept_cmd.h"

#include "core/core.h"
#include "core/json.h"
#include "measure/measure.h"

#include <math.h>
#include <string.h>

static cJSON *phase(double ms, double wall_ms, int steps, bool in_step)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddItemToObject(p, "ms", dg_json_metric_of(isfinite(ms) ? ms / steps : NAN, "ms"));
    cJSON_AddItemToObject(
        p, "share",
        dg_json_metric_of(isfinite(ms) && wall_ms > 0 ? ms / wall_ms : NAN, "fraction"));
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
    cJSON_AddItemToObject(
        step, "ms",
        dg_json_metric_of(dg_json_metric_value(dg_jpath(run_profile, "step.ms")), "ms"));
    cJSON_AddItemToObject(
        step, "profiled_ms",
        dg_json_metric_of(steps > 0 && isfinite(wall) ? wall / steps : NAN, "ms"));
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
