/* A child run's timeline (docs/schema/report.md, run "supervise.timeline"):
 * where its seconds went, from devgate's request for the child to the end of
 * its process tree. devgate's own marks (launch, sampler ready, exit, tree
 * gone) and the probe's (its run_start marks, the steps' and run_end's times)
 * are wall-clock seconds (CLOCK_REALTIME; the probe's time.time()) on one
 * host, written as seconds after the launch. A pure function of the event
 * collector and devgate's marks; run.c calls it once the tree is gone. */
#include "supervise/supervise.h"

#include "core/json.h"

#include <math.h>
#include <string.h>

#define STEP_WARMUP 2 /* as the run record's throughput: the first two steps are warm-up */

/* The marks in the order a run passes them: name, and where it comes from. */
enum {
    M_SAMPLER,
    M_FORKED,
    M_CHILD_READY,
    M_MAIN,
    M_TORCH,
    M_DEV_INIT,
    M_DEV_READY,
    M_FIRST_STEP,
    M_WINDOW_START,
    M_WINDOW_END,
    M_LOOP_END,
    M_EXIT,
    M_TREE_GONE,
    M_COUNT
};
static const char *const mark_names[M_COUNT] = {
    [M_SAMPLER] = "sampler_ready",     [M_FORKED] = "forked",
    [M_CHILD_READY] = "child_ready",   [M_MAIN] = "main",
    [M_TORCH] = "torch_imported",      [M_DEV_INIT] = "device_init",
    [M_DEV_READY] = "device_ready",    [M_FIRST_STEP] = "first_step",
    [M_WINDOW_START] = "window_start", [M_WINDOW_END] = "window_end",
    [M_LOOP_END] = "loop_end",         [M_EXIT] = "exit",
    [M_TREE_GONE] = "tree_gone"};

static double num_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : NAN;
}

/* The wall-clock time devgate received the stored step i (its end), NAN
 * when not reported. */
static double step_t(const dg_evcollect *c, const dg_run_clock *k, size_t i)
{
    return i < c->nsteps ? k->received + c->steps[i].t : NAN;
}

cJSON *dg_run_timeline(const dg_evcollect *c, const dg_run_clock *k)
{
    double at[M_COUNT];
    for (int i = 0; i < M_COUNT; i++)
        at[i] = NAN;
    const cJSON *pm = cJSON_GetObjectItemCaseSensitive(c->run_start, "marks");
    for (int i = M_FORKED; i <= M_DEV_READY; i++)
        at[i] = num_of(pm, mark_names[i]);
    at[M_FIRST_STEP] = step_t(c, k, 0);
    /* The measured window is the steps after the warm-up: it opens as the
     * last warm-up step ends. */
    if (c->nsteps > STEP_WARMUP) {
        at[M_WINDOW_START] = step_t(c, k, STEP_WARMUP - 1);
        at[M_WINDOW_END] = step_t(c, k, c->nsteps - 1);
    }
    at[M_LOOP_END] = num_of(c->run_end, "t");
    at[M_EXIT] = k->exit;
    at[M_SAMPLER] = k->sampler;
    at[M_TREE_GONE] = k->gone;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "origin", "launch");
    bool known = isfinite(k->launch);
    cJSON_AddItemToObject(o, "origin_unix", dg_json_metric(known ? k->launch : 0, known, "s"));
    cJSON_AddStringToObject(o, "clock",
                            "wall clock (devgate's CLOCK_REALTIME, the probe's time.time()), s "
                            "after devgate asked for the child");
    cJSON *m = cJSON_AddObjectToObject(o, "marks");
    for (int i = 0; i < M_COUNT; i++) {
        double v = known && isfinite(at[i]) ? at[i] - k->launch : NAN;
        cJSON_AddItemToObject(m, mark_names[i],
                              dg_json_metric(isfinite(v) ? v : 0, isfinite(v), "s"));
    }
    return o;
}
