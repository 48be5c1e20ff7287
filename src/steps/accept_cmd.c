/* accept -- CMD: the whole method on the user's own program (docs/accept.md,
 * "Your own program").
 *
 * Every step is one or more child runs of the user's command, each supervised
 * as `devgate run` supervises one (dg_run_supervise: no shell, own process
 * group, the zero-code probe, the sampled process tree), with {batch},
 * {device} and {epochs} substituted in its words. The probe's knobs
 * (docs/events.md, "Knobs for devgate accept") stop a child cleanly after N
 * optimizer steps and open a torch.profiler window. The steps:
 *
 *   env      dg_env_run, once;
 *   gate     a short Python child in the user's interpreter gates cpu, cuda, mps;
 *   sweep    a child per batch, doubling then bisection; out of memory (the
 *            framework's error, the address-space budget, the OOM killer) ends
 *            one trial only; knee and safe batch as the fixture's sweep;
 *   compare  the same command with {device}=cpu, interleaved with device runs;
 *   soak     the program's own epochs with per-epoch memory;
 *   profile  a torch.profiler window from the step hook, the trace in the pack.
 *
 * The record has the fixture's shape (kind "accept"), so dg_evidence_finish
 * applies the same rules, decision and final gate. */
#include "steps/accept_cmd.h"

#include "core/core.h"
#include "core/json.h"
#include "core/record.h"
#include "measure/measure.h"
#include "steps/runner.h"
#include "supervise/supervise.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TRIAL_EPOCHS 1000 /* {epochs} of a trial: the probe stops it long before */
#define SWAP_LIMIT_MIB 256.0
#define MAX_ARGS 4096

/* Per-tier sizes: [0] quick, [1] full. */
static const struct cmd_tier {
    int trial_steps;      /* optimizer steps per sweep trial (the first 2 are warm-up) */
    double trial_timeout; /* s per child */
    double max_trial_s;   /* stop doubling once a trial's steps took longer than this */
    int device_from;      /* the sweep's first batch when the gate chose a device */
    int soak_epochs;
    int compare_reps, compare_max_reps; /* pairs: at least, at most */
    double compare_ci_width;            /* add pairs while the interval is wider (share) */
    int compare_steps, compare_max_batch;
    int profile_warmup, profile_window;
    double profile_wall_s; /* the window closes after this even with steps left */
    int trace_max_events;  /* no Chrome trace of a window with more events */
} cmd_tiers[2] = {
    /* 8 steps a quick trial: 6 timed after the warm-up, the fewest a trial's
     * samples/s interval needs, so the sweep's stops are judged on intervals. */
    {8, 180, 10, 32, 2, 2, 2, 0.10, 5, 256, 2, 3, 10, 200000},
    {10, 600, 60, 8, 10, 3, 6, 0.10, 10, 1024, 3, 8, 30, 500000},
};

typedef struct acmd {
    dg_ctx *ctx;
    const dg_accept_cmd_opts *o;
    const struct cmd_tier *tier;
    const char *step;   /* the step running now, for the log */
    const char *device; /* the device judged ("cpu", "cuda", "mps") */
    int batch;          /* the batch soak, compare and profile use */
    bool batch_given;
    bool has_batch, has_device, has_epochs;
    dg_oom_count oom_before; /* the OOM-kill count before the running child */
    dg_forksrv *srv;         /* the fork server the children come from (off: plain children) */
} acmd;

static bool cancelled(const acmd *a)
{
    return a->o->cancel && *a->o->cancel;
}

/* Takes what the method settled before a step. */
static acmd *at(void *ctx, const dg_method_state *s, const char *step)
{
    acmd *a = ctx;
    a->step = step;
    if (s) {
        a->device = s->device;
        a->batch = s->batch;
        a->batch_given = s->batch_given;
    }
    return a;
}

static bool mentions(const char *const *argv, const char *key)
{
    for (size_t i = 0; argv[i]; i++)
        if (strstr(argv[i], key))
            return true;
    return false;
}

/* The environment edits of one child run ("NAME=VALUE"), as many as the step
 * needs and each as long as it is (a long inherited PYTHONPATH, a trace path):
 * nothing is dropped or cut. dg_malloc'd; env_free releases them. */
typedef struct child_env {
    char **vars; /* NULL-terminated; NULL before the first */
    int n;
    bool nomem; /* an edit could not be made: the child must not run without it */
} child_env;

static void env_add(child_env *e, const char *fmt, ...) DG_PRINTF(2, 3);
static void env_add(child_env *e, const char *fmt, ...)
{
    if (e->nomem)
        return;
    char **v = dg_realloc(e->vars, (size_t)(e->n + 2) * sizeof *v);
    if (!v) {
        e->nomem = true;
        return;
    }
    e->vars = v;
    va_list ap;
    va_start(ap, fmt);
    char *var = dg_vasprintf(fmt, ap);
    va_end(ap);
    if (!var)
        e->nomem = true;
    else
        v[e->n++] = var;
    v[e->n] = NULL;
}

static void env_free(child_env *e)
{
    for (int i = 0; i < e->n; i++)
        dg_free(e->vars[i]);
    dg_free(e->vars);
    memset(e, 0, sizeof *e);
}

/* Runs argv supervised; the run record parsed, NULL (why set) when it could
 * not start. */
static cJSON *supervise_child(acmd *a, const char *const *argv, dg_probe_mode mode,
                              const child_env *env, bool empty_cache, size_t limit, char *why,
                              size_t len)
{
    if (env && env->nomem) {
        snprintf(why, len, "out of host memory (the child's environment)");
        return NULL;
    }
    dg_run_opts ro = {.argv = argv,
                      .no_env = true,
                      .timeout_s = a->o->trial_timeout_s > 0 ? a->o->trial_timeout_s
                                                             : a->tier->trial_timeout,
                      .forward = a->o->cancel,
                      .stdout_to_stderr = true,
                      .probe = mode,
                      .probe_path = a->o->probe_path,
                      .empty_cache = empty_cache,
                      .env = env ? (const char *const *)env->vars : NULL,
                      .mem_limit = limit,
                      .sample_ms = 100};
    char *json = NULL;
    dg_accept_cmd_oom_read(&a->oom_before);
    dg_status st = dg_run_supervise_via(a->ctx, &ro, a->srv, &json);
    if (st != DG_OK || !json) {
        snprintf(why, len, "%s", dg_errmsg(a->ctx));
        dg_string_free(json);
        return NULL;
    }
    cJSON *rec = cJSON_Parse(json);
    dg_string_free(json);
    if (!rec)
        snprintf(why, len, "the child's run record does not parse");
    return rec;
}

/* A run of the user's command at (batch, device, epochs); steps > 0 stops it
 * cleanly after that many optimizer steps. */
static cJSON *run_cmd(acmd *a, int batch, const char *device, int epochs, int steps,
                      const char *profile, const char *profile_out, bool empty_cache, size_t limit,
                      char *why, size_t len)
{
    char **argv = dg_accept_cmd_argv(a->o->argv, batch, device, epochs);
    if (!argv) {
        snprintf(why, len, "out of host memory");
        return NULL;
    }
    child_env env = {.n = 0};
    if (steps > 0)
        env_add(&env, "DEVGATE_PROBE_MAX_STEPS=%d", steps);
    if (profile && profile_out) {
        env_add(&env, "DEVGATE_PROBE_PROFILE=%s", profile);
        env_add(&env, "DEVGATE_PROBE_PROFILE_OUT=%s", profile_out);
        env_add(&env, "DEVGATE_PROBE_PROFILE_WALL=%g", a->tier->profile_wall_s);
        if (a->o->trace_path) {
            env_add(&env, "DEVGATE_PROBE_TRACE=%s", a->o->trace_path);
            env_add(&env, "DEVGATE_PROBE_TRACE_MAX_EVENTS=%d", a->tier->trace_max_events);
        }
    }
    dg_log(a->ctx, DG_LOG_INFO, "%s: batch %d on %s", a->step, batch, device);
    cJSON *rec = supervise_child(a, (const char *const *)argv, DG_PROBE_AUTO, &env, empty_cache,
                                 limit, why, len);
    env_free(&env);
    dg_accept_cmd_argv_free(argv);
    return rec;
}

/* A child's samples/s over its steps after the warm-up (the first steps pay
 * the framework's lazy start-up: cuBLAS, kernel selection), else over all. */
static double child_sps(const cJSON *rec)
{
    double v = dg_json_metric_value(dg_jpath(rec, "throughput.samples_per_s_after_warmup"));
    return isfinite(v) ? v : dg_jnum(rec, "throughput.samples_per_s");
}

/* ---- gate ------------------------------------------------------------------------ */

/* The interpreter the gate runs in: --python, else the command's own when it
 * is Python, else python3. */
static const char *gate_python(const acmd *a)
{
    if (a->o->python)
        return a->o->python;
    if (dg_is_python(a->o->argv[0]))
        return a->o->argv[0];
    return "python3";
}

static void choose(acmd *a, const cJSON *gate, char *why, size_t len, dg_status *st)
{
    static const char *const order[] = {"cuda", "mps"};
    const char *want = a->o->device;
    a->device = "cpu";
    if (want && strcmp(want, "cpu") == 0)
        return;
    for (size_t i = 0; i < (want ? 1 : 2); i++) {
        const char *name = want ? want : order[i];
        const cJSON *b;
        cJSON_ArrayForEach(b, dg_jpath(gate, "backends"))
        {
            const char *n = dg_jstr(b, "name");
            if (!n || strcmp(n, name) != 0)
                continue;
            if (dg_jbool(b, "available") == 1 && dg_jbool(b, "matmul.ok") == 1) {
                a->device = name;
                return;
            }
            if (want) {
                const char *r = dg_jstr(b, "reason");
                snprintf(why, len, "device %s is not available in the program's interpreter: %s",
                         name, r ? r : "its matrix product failed");
                *st = DG_ERR_UNAVAILABLE;
                return;
            }
        }
    }
    if (want) {
        snprintf(why, len, "device %s is not one the gate names (cpu, cuda, mps)", want);
        *st = DG_ERR_UNAVAILABLE;
    }
}

static dg_status cmd_gate(void *ctx, dg_step_out *out, const char **device)
{
    acmd *a = at(ctx, NULL, "gate");
    const char *py = gate_python(a);
    const char *code = "import devgate_probe as d\n"
                       "p = d.Probe(label='devgate accept gate')\n"
                       "for dev in ('cpu', 'cuda', 'mps'):\n"
                       "    p.gate(dev)\n";
    const char *argv[] = {py, "-c", code, NULL};
    child_env env = {.n = 0};
    const char *pp = getenv("PYTHONPATH");
    env_add(&env, "PYTHONPATH=%s%s%s", a->o->probe_path ? a->o->probe_path : "",
            pp && pp[0] ? ":" : "", pp ? pp : "");
    char why[512] = "";
    cJSON *rec = a->o->probe_path
                     ? supervise_child(a, argv, DG_PROBE_MANUAL, &env, false, 0, why, sizeof why)
                     : NULL;
    env_free(&env);
    if (!a->o->probe_path)
        snprintf(why, sizeof why, "the devgate_probe package was not found beside devgate");
    cJSON *gate = rec ? cJSON_DetachItemFromObjectCaseSensitive(rec, "gate") : NULL;
    cJSON_Delete(rec);
    if (gate && !cJSON_IsObject(gate)) {
        cJSON_Delete(gate);
        gate = NULL;
        snprintf(why, sizeof why, "%s -c: the interpreter reported no gate (is torch installed?)",
                 py);
    }
    dg_status st = DG_OK;
    if (gate)
        cJSON_AddStringToObject(gate, "python", py);
    else
        st = DG_ERR_UNAVAILABLE;
    out->section = gate;
    char *sum = out->summary;
    size_t off = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, dg_jpath(gate, "backends"))
    {
        const char *n = dg_jstr(b, "name");
        bool avail = dg_jbool(b, "available") == 1;
        off +=
            (size_t)snprintf(sum + off, off < sizeof out->summary ? sizeof out->summary - off : 0,
                             "%s%s %s", off ? " · " : "", n ? n : "?",
                             !avail                          ? "not available"
                             : dg_jbool(b, "matmul.ok") == 1 ? "ok"
                                                             : "FAILED");
        if (off >= sizeof out->summary)
            break;
    }
    if (gate)
        choose(a, gate, why, sizeof why, &st);
    if (st != DG_OK) {
        dg_fail(a->ctx, st, "accept: %s", why);
        snprintf(out->error, sizeof out->error, "%s", why);
    }
    *device = a->device;
    return st;
}

/* ---- sweep ------------------------------------------------------------------------ */

static dg_status cmd_sweep_plan(void *ctx, const dg_method_state *st, cJSON *root,
                                dg_sweep_plan *plan, dg_step_out *out)
{
    acmd *a = at(ctx, st, "sweep");
    if (!a->has_batch) {
        out->skipped = true;
        snprintf(out->summary, sizeof out->summary,
                 "the command has no {batch}: there is no batch to sweep");
        return DG_OK;
    }
    /* A device's small batches are launch-bound: their samples/s only
     * doubles with the batch, and each trial costs the program's start-up
     * (seconds), so the quick tier starts a device's doubling higher. */
    bool dev_from = !a->o->sweep_from && strcmp(a->device, "cpu") != 0;
    int from = a->o->sweep_from > 0 ? a->o->sweep_from : dev_from ? a->tier->device_from : 8;
    if (a->o->sweep_to > 0 && from > a->o->sweep_to)
        from = a->o->sweep_to;
    dg_record_head(root, "sweep", 1);
    cJSON_AddStringToObject(root, "source", "command");
    cJSON *spec = cJSON_AddObjectToObject(root, "spec");
    cJSON_AddStringToObject(spec, "backend", a->device);
    cJSON_AddNumberToObject(spec, "from", from);
    cJSON_AddStringToObject(spec, "from_source",
                            a->o->sweep_from ? "option"
                            : dev_from       ? "tier (a device)"
                                             : "default");
    if (a->o->sweep_to > 0)
        cJSON_AddNumberToObject(spec, "to", a->o->sweep_to);
    else
        cJSON_AddNullToObject(spec, "to");
    cJSON_AddBoolToObject(spec, "bisect", true);
    cJSON_AddNumberToObject(spec, "warmup_steps", 2);
    cJSON_AddNumberToObject(spec, "timed_steps", a->tier->trial_steps - 2);
    cJSON_AddNumberToObject(spec, "max_steps", a->tier->trial_steps);
    cJSON_AddNumberToObject(spec, "trial_timeout_s",
                            a->o->trial_timeout_s > 0 ? a->o->trial_timeout_s
                                                      : a->tier->trial_timeout);
    cJSON_AddNumberToObject(spec, "swap_growth_mib", SWAP_LIMIT_MIB);
    cJSON_AddNumberToObject(spec, "max_trial_s", a->tier->max_trial_s);
    cJSON_AddItemToObject(spec, "mem_budget",
                          dg_json_metric((double)a->o->mem_budget, a->o->mem_budget > 0, "bytes"));
    cJSON_AddStringToObject(spec, "mem_budget_source",
                            a->o->mem_budget ? "option (RLIMIT_AS of each trial)" : "none");
    /* A program's own data has no size devgate knows: no train-set stop. */
    *plan = (dg_sweep_plan){.from = from,
                            .to = a->o->sweep_to > 0 ? a->o->sweep_to : DG_SWEEP_MAX_BATCH,
                            .max_trial_s = a->tier->max_trial_s,
                            .train_samples = NAN,
                            .bisect = true};
    return DG_OK;
}

static dg_trial_end end_of(const char *e, size_t mem_budget)
{
    static const struct {
        const char *word;
        dg_trial_end end;
    } ends[] = {{"ok", DG_TRIAL_OK},
                {"oom-killer", DG_TRIAL_OOM_KILLER},
                {"signal", DG_TRIAL_SIGNAL},
                {"timeout", DG_TRIAL_TIMEOUT},
                {"interrupted", DG_TRIAL_INTERRUPTED}};
    if (strcmp(e, "device-oom") == 0)
        return mem_budget ? DG_TRIAL_BUDGET : DG_TRIAL_OOM;
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++)
        if (strcmp(e, ends[i].word) == 0)
            return ends[i].end;
    return DG_TRIAL_FAILED;
}

/* The trial's measurements from the child's run record (ok: it ended cleanly). */
static void trial_metrics(dg_trial_result *t, const cJSON *rec, int b, bool ok)
{
    double sps = ok ? child_sps(rec) : NAN;
    const cJSON *stats = dg_jpath(rec, "profile.step.stats");
    double med = ok ? dg_jnum(stats, "median") : NAN, iqr = ok ? dg_jnum(stats, "iqr") : NAN;
    double n = dg_jnum(stats, "n");
    t->step_median = (dg_metric){isfinite(med) ? med : 0, isfinite(med)};
    t->step_iqr = (dg_metric){isfinite(iqr) ? iqr : 0, isfinite(iqr)};
    t->steps = ok && isfinite(n) ? n : 0;
    t->step_source = isfinite(med) ? "steps" : "none";
    /* The probe reports its step-time statistics, not the steps: the notch
     * rule's interval of the median (docs/measure.md "Sweep"), over the step
     * with its loader wait where the probe reports that (the time the rate
     * divides by), else over the step alone. */
    const cJSON *ws = dg_jpath(rec, "profile.step.wall_stats");
    const cJSON *cs = ws ? ws : stats;
    t->rate =
        dg_sweep_rate_ci(sps, NULL, 0, dg_jnum(cs, "median"), dg_jnum(cs, "iqr"), dg_jnum(cs, "n"));
    /* The allocator's peak over the epochs the probe closed (cuda, mps). */
    double peak = NAN;
    const cJSON *ep;
    cJSON_ArrayForEach(ep, dg_jpath(rec, "soak.epochs"))
    {
        double v = dg_jnum(ep, "max_allocated");
        if (isfinite(v) && !(v <= peak))
            peak = v;
    }
    t->allocated_peak = (dg_metric){isfinite(peak) ? peak : 0, isfinite(peak)};
    const cJSON *smp = dg_jpath(rec, "supervise.samples");
    double rss = dg_json_metric_value(dg_jpath(smp, "rss_peak"));
    double sg = dg_json_metric_value(dg_jpath(smp, "swap_growth"));
    double psi = dg_json_metric_value(dg_jpath(smp, "psi_peak"));
    t->rss_peak = (dg_metric){isfinite(rss) ? rss : 0, isfinite(rss)};
    t->swap_growth = (dg_metric){isfinite(sg) ? sg : 0, isfinite(sg)};
    t->psi_peak = (dg_metric){isfinite(psi) ? psi : 0, isfinite(psi)};
    t->swapped = isfinite(sg) && sg > SWAP_LIMIT_MIB * 1048576.0;
    double steps = dg_jnum(rec, "throughput.timed_steps");
    t->samples = ok && steps > 0 ? steps * b : NAN;
    t->loop_s = ok && sps > 0 ? t->samples / sps : NAN;
}

/* One trial: the command at batch b, stopped cleanly after the tier's steps;
 * out of memory (the framework's error, the address-space budget, the OOM
 * killer) ends this trial only. */
static dg_status cmd_trial(void *ctx, int b, dg_trial_result *t)
{
    acmd *a = at(ctx, NULL, "sweep");
    double t0 = dg_now();
    char why[512] = "";
    cJSON *rec = run_cmd(a, b, a->device, TRIAL_EPOCHS, a->tier->trial_steps, NULL, NULL, false,
                         a->o->mem_budget, why, sizeof why);
    dg_oom_count after;
    dg_accept_cmd_oom_read(&after);
    dg_oom_killer oomk = dg_accept_cmd_oom_since(&a->oom_before, &after);
    const char *e =
        rec ? dg_accept_cmd_ended_rec(rec, a->o->mem_budget, &oomk, t->reason, sizeof t->reason)
            : "failed";
    if (!rec)
        snprintf(t->reason, sizeof t->reason, "%s", why);
    t->end = end_of(e, a->o->mem_budget);
    t->extra = cJSON_CreateObject();
    dg_json_add_str(t->extra, "signal", dg_jstr(rec, "supervise.signal"));
    if (t->end == DG_TRIAL_OOM_KILLER) {
        cJSON *k = cJSON_AddObjectToObject(t->extra, "oom_killer");
        dg_json_add_str(k, "source", oomk.source);
        if (oomk.state == DG_OOMK_KILLED)
            cJSON_AddNumberToObject(k, "kills", (double)oomk.kills);
        else
            cJSON_AddNullToObject(k, "kills");
    }
    trial_metrics(t, rec, b, t->end == DG_TRIAL_OK);
    t->wall_s = (dg_metric){dg_now() - t0, true};
    cJSON_Delete(rec);
    return t->extra ? DG_OK : DG_ERR_NOMEM;
}

static void cmd_sweep_done(void *ctx)
{
    (void)ctx;
}

/* ---- compare: the cpu baseline ---------------------------------------------------------- */

static double compare_width(const double *cs, const double *ds, int n)
{
    double c[16], d[16];
    size_t nc = 0, nd = 0;
    for (int i = 0; i < n && i < 16; i++) {
        if (isfinite(cs[i]) && cs[i] > 0)
            c[nc++] = cs[i];
        if (isfinite(ds[i]) && ds[i] > 0)
            d[nd++] = ds[i];
    }
    dg_stats sc, sd;
    dg_median_ci ci;
    if (!nc || !nd)
        return NAN;
    dg_stats_compute(c, nc, 0, &sc);
    dg_stats_compute(d, nd, 0, &sd);
    if (!(sc.median > 0) ||
        !dg_bootstrap_median_ci(d, nd, c, nc, 0, 0.95, DG_BOOTSTRAP_SEED, &ci) || !ci.valid)
        return NAN;
    double sp = sd.median / sc.median;
    return sp > 0 ? (ci.hi - ci.lo) / sp : NAN;
}

static dg_status cmd_compare(void *ctx, const dg_method_state *st, dg_step_out *out)
{
    acmd *a = at(ctx, st, "compare");
    if (strcmp(a->device, "cpu") == 0 || !a->has_device) {
        out->skipped = true;
        snprintf(out->summary, sizeof out->summary, "%s",
                 !a->has_device ? "the command has no {device}: the cpu baseline cannot be run"
                 : a->o->device ? "the device asked for is the cpu baseline itself"
                                : "no device passed the gate: cpu is the only path");
        return DG_OK;
    }
    int batch = a->batch;
    if (!a->batch_given && batch > a->tier->compare_max_batch)
        batch = a->tier->compare_max_batch;
    int reps = a->tier->compare_reps, max_reps = a->tier->compare_max_reps;
    double cs[16], ds[16], cm[16], dm[16], bz[16];
    char err[512] = "", why[512], reason[512];
    const char *failed = NULL;
    double width = NAN;
    for (int i = 0; i < max_reps && i < 16 && !failed && !cancelled(a); i++) {
        /* Past the tier's pairs, another pair only while the speedup's
         * interval is wider than the tier's share of the speedup. */
        if (i >= a->tier->compare_reps) {
            width = compare_width(cs, ds, i);
            if (!(width > a->tier->compare_ci_width))
                break;
        }
        reps = i + 1;
        for (int side = 0; side < 2 && !failed; side++) {
            const char *dev = side ? a->device : "cpu";
            cJSON *rec = run_cmd(a, batch, dev, TRIAL_EPOCHS, a->tier->compare_steps, NULL, NULL,
                                 false, 0, why, sizeof why);
            const char *e =
                rec ? dg_accept_cmd_ended_rec(rec, 0, NULL, reason, sizeof reason) : "failed";
            if (strcmp(e, "ok") != 0) {
                failed = dev;
                snprintf(err, sizeof err, "%s", rec ? reason : why);
            }
            double sps = child_sps(rec);
            double ms = dg_jnum(rec, "profile.step.stats.median");
            double share = dg_json_metric_value(dg_jpath(rec, "profile.phases.queue_wait.share"));
            (side ? ds : cs)[i] = sps;
            (side ? dm : cm)[i] = ms;
            if (side)
                bz[i] = isfinite(share) ? 1 - share : NAN;
            cJSON_Delete(rec);
        }
    }
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "v", 1);
    cJSON_AddStringToObject(c, "kind", "compare");
    cJSON_AddStringToObject(c, "source", "command");
    cJSON_AddStringToObject(c, "status", failed ? "failed" : "ok");
    dg_json_add_str(c, "error", failed ? err : NULL);
    cJSON *spec = cJSON_AddObjectToObject(c, "spec");
    cJSON_AddStringToObject(spec, "baseline", "cpu");
    cJSON_AddStringToObject(spec, "backend", a->device);
    cJSON *bs = cJSON_AddArrayToObject(spec, "batches");
    cJSON_AddItemToArray(bs, cJSON_CreateNumber(batch));
    cJSON_AddNumberToObject(spec, "steps", a->tier->compare_steps);
    cJSON_AddNumberToObject(spec, "repetitions", reps);
    cJSON_AddNumberToObject(spec, "min_repetitions", a->tier->compare_reps);
    cJSON_AddNumberToObject(spec, "max_repetitions", max_reps);
    cJSON_AddNumberToObject(spec, "ci_width_target", a->tier->compare_ci_width);
    cJSON *runs = cJSON_AddArrayToObject(c, "runs");
    if (failed) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddNumberToObject(r, "batch", batch);
        cJSON_AddStringToObject(r, "status", "failed");
        cJSON_AddStringToObject(r, "failed", failed);
        dg_json_add_str(r, "error", err);
        cJSON_AddBoolToObject(r, "within_tolerance", false);
        cJSON_AddItemToArray(runs, r);
    } else if (!cancelled(a)) {
        cJSON_AddItemToArray(runs,
                             dg_accept_cmd_compare_run(batch, a->device, cs, ds, reps, bz, cm, dm));
    }
    out->section = c;
    const cJSON *r0 = cJSON_GetArrayItem(runs, 0);
    if (r0 && !failed)
        snprintf(out->summary, sizeof out->summary,
                 "%s is %.2f× cpu (95%% %.2f-%.2f×) at b%d, busy %.0f%%", a->device,
                 dg_jnum(r0, "speedup"), dg_jnum(r0, "speedup_ci.lo"), dg_jnum(r0, "speedup_ci.hi"),
                 batch, 100 * dg_jnum(r0, "busy_fraction"));
    snprintf(out->error, sizeof out->error, "%s", err);
    return cancelled(a) ? DG_ERR_INTERRUPTED : failed ? DG_ERR_CHECK : DG_OK;
}

/* ---- soak ------------------------------------------------------------------------------------ */

/* The soak: the program's own epochs at the method's batch, per-epoch memory
 * from the probe; bucket and framework go to the record's top level. */
static dg_status cmd_epochs(void *ctx, const dg_method_state *st, dg_step_out *out)
{
    acmd *a = at(ctx, st, "soak");
    int epochs = a->o->epochs > 0 ? a->o->epochs : a->tier->soak_epochs;
    char why[512] = "";
    cJSON *rec = run_cmd(a, a->batch, a->device, epochs, 0, NULL, NULL, a->o->empty_cache, 0, why,
                         sizeof why);
    const char *e =
        rec ? dg_accept_cmd_ended_rec(rec, 0, NULL, out->error, sizeof out->error) : "failed";
    if (!rec)
        snprintf(out->error, sizeof out->error, "%s", why);
    cJSON *soak = rec ? cJSON_DetachItemFromObjectCaseSensitive(rec, "soak") : NULL;
    if (soak && !cJSON_IsObject(soak)) {
        cJSON_Delete(soak);
        soak = NULL;
    }
    if (soak) {
        cJSON_AddStringToObject(soak, "source", "command");
        cJSON *spec = cJSON_AddObjectToObject(soak, "spec");
        cJSON_AddStringToObject(spec, "backend", a->device);
        cJSON_AddNumberToObject(spec, "batch", a->batch);
        cJSON_AddNumberToObject(spec, "epochs", epochs);
        cJSON_AddBoolToObject(spec, "epochs_substituted", a->has_epochs);
        cJSON_AddBoolToObject(spec, "empty_cache_asked", a->o->empty_cache);
        /* The sampled footprint of the whole tree beside the probe's. */
        cJSON *series = cJSON_DetachItemFromObjectCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(rec, "supervise"), "series");
        if (series)
            cJSON_AddItemToObject(soak, "samples_series", series);
    }
    out->section = soak;
    out->hoist = cJSON_CreateObject();
    static const char *const top[] = {"bucket", "framework"};
    for (size_t i = 0; rec && out->hoist && i < 2; i++) {
        cJSON *x = cJSON_DetachItemFromObjectCaseSensitive(rec, top[i]);
        if (x)
            cJSON_AddItemToObject(out->hoist, top[i], x);
    }
    cJSON_Delete(rec);
    if (strcmp(e, "interrupted") == 0)
        return DG_ERR_INTERRUPTED;
    if (strcmp(e, "ok") != 0)
        return DG_ERR_CHECK;
    if (!soak) {
        snprintf(out->error, sizeof out->error,
                 "the program reported no epoch end (no DataLoader epoch was seen)");
        return DG_ERR_CHECK;
    }
    return DG_OK;
}

/* ---- profile ----------------------------------------------------------------------------- */

static dg_status cmd_profile(void *ctx, const dg_method_state *st, dg_step_out *o)
{
    acmd *a = at(ctx, st, "profile");
    int warm = a->tier->profile_warmup, win = a->tier->profile_window;
    char spec[32], out[4096], why[512] = "";
    snprintf(spec, sizeof spec, "%d:%d", warm, win);
    const char *dir = getenv("TMPDIR");
    snprintf(out, sizeof out, "%s/devgate-profile-%ld.json", dir && dir[0] ? dir : "/tmp",
             (long)getpid());
    unlink(out);
    cJSON *rec = run_cmd(a, a->batch, a->device, TRIAL_EPOCHS, warm + win, spec, out, false, 0, why,
                         sizeof why);
    const char *e =
        rec ? dg_accept_cmd_ended_rec(rec, 0, NULL, o->error, sizeof o->error) : "failed";
    if (!rec)
        snprintf(o->error, sizeof o->error, "%s", why);
    char *text = dg_read_file(out, (size_t)8 << 20, NULL);
    unlink(out);
    cJSON *window = text ? cJSON_Parse(text) : NULL;
    dg_free(text);
    cJSON *p = o->section = dg_accept_cmd_profile(window, dg_jpath(rec, "profile"), a->device);
    /* devgate's own samples of the profiled child (RSS, CPU, threads) beside the trace. */
    cJSON *series = cJSON_DetachItemFromObjectCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(rec, "supervise"), "series");
    if (series)
        cJSON_AddItemToObject(p, "samples_series", series);
    cJSON_Delete(window);
    cJSON_Delete(rec);
    size_t off = 0;
    static const char *const shown[][2] = {
        {"queue_wait", "data"}, {"h2d", "h2d"}, {"compute", "compute"}, {"sync", "sync"}};
    for (size_t i = 0; i < 4 && off < sizeof o->summary; i++) {
        char key[64];
        snprintf(key, sizeof key, "phases.%s.share", shown[i][0]);
        double v = dg_json_metric_value(dg_jpath(p, key));
        if (isfinite(v))
            off += (size_t)snprintf(o->summary + off, sizeof o->summary - off, "%s%s %.0f%%",
                                    off ? " · " : "", shown[i][1], 100 * v);
    }
    const char *perr = dg_jstr(p, "error");
    if (strcmp(e, "interrupted") == 0)
        return DG_ERR_INTERRUPTED;
    if (strcmp(e, "ok") == 0 && perr)
        snprintf(o->error, sizeof o->error, "%s", perr);
    return strcmp(e, "ok") != 0 || perr ? DG_ERR_CHECK : DG_OK;
}

/* ---- the record ----------------------------------------------------------------------------- */

static const char *cmd_python(void *ctx)
{
    return gate_python(ctx);
}

static void cmd_spec(void *ctx, const dg_method_state *s, cJSON *spec)
{
    (void)s;
    acmd *a = ctx;
    cJSON_AddStringToObject(spec, "program", "command");
    cJSON *cmd = cJSON_AddArrayToObject(spec, "cmd");
    for (size_t i = 0; a->o->argv[i]; i++)
        cJSON_AddItemToArray(cmd, dg_json_string(a->o->argv[i]));
    cJSON_AddNullToObject(spec, "model");
    cJSON_AddStringToObject(spec, "data", "the program's own");
    cJSON_AddItemToObject(spec, "mem_budget",
                          dg_json_metric((double)a->o->mem_budget, a->o->mem_budget > 0, "bytes"));
    cJSON_AddBoolToObject(spec, "empty_cache", a->o->empty_cache);
    cJSON *ph = cJSON_AddObjectToObject(spec, "placeholders");
    cJSON_AddBoolToObject(ph, "batch", a->has_batch);
    cJSON_AddBoolToObject(ph, "device", a->has_device);
    cJSON_AddBoolToObject(ph, "epochs", a->has_epochs);
}

static const dg_runner_i command_runner = {
    .version = DG_RUNNER_VERSION,
    .name = "command",
    .python = cmd_python,
    .gate = cmd_gate,
    .sweep_plan = cmd_sweep_plan,
    .trial = cmd_trial,
    .sweep_done = cmd_sweep_done,
    .epochs = cmd_epochs,
    .compare = cmd_compare,
    .profile = cmd_profile,
    .spec = cmd_spec,
};

dg_status dg_accept_cmd_run(dg_ctx *ctx, const dg_accept_cmd_opts *opts, char **json)
{
    *json = NULL;
    if (!opts || !opts->argv || !opts->argv[0] || !opts->argv[0][0])
        return dg_fail(ctx, DG_ERR_USAGE, "accept: no program given (accept [options] -- CMD)");
    size_t n = 0;
    while (opts->argv[n])
        n++;
    if (n > MAX_ARGS)
        return dg_fail(ctx, DG_ERR_USAGE, "accept: the command has over %d words", MAX_ARGS);
    if (opts->batch < 0 || opts->epochs < 0 || opts->sweep_from < 0 || opts->sweep_to < 0 ||
        (opts->sweep_to > 0 && opts->sweep_from > opts->sweep_to))
        return dg_fail(ctx, DG_ERR_USAGE,
                       "accept: batch, epochs and the sweep's range must be positive (from <= to)");
    acmd a = {.ctx = ctx, .o = opts, .tier = &cmd_tiers[opts->quick ? 0 : 1], .device = "cpu"};
    a.has_batch = mentions(opts->argv, "{batch}");
    a.has_device = mentions(opts->argv, "{device}");
    a.has_epochs = mentions(opts->argv, "{epochs}");
    dg_method_opts mo = {.label = opts->label,
                         .cancel = opts->cancel,
                         .progress = opts->progress,
                         .progress_user = opts->progress_user,
                         .batch = opts->batch,
                         .quick = opts->quick,
                         .sweep_to = opts->sweep_to,
                         .backend_asked = opts->device,
                         .backend_none = "cpu"};
    a.srv = dg_forksrv_new(opts->argv, !opts->no_fork_server, opts->probe_path, opts->cancel);
    if (!a.srv)
        return dg_fail(ctx, DG_ERR_NOMEM, "accept: out of host memory");
    dg_status st = dg_method_run(ctx, &command_runner, &a, &mo, json);
    dg_accept_cmd_launch_note(ctx, a.srv, json);
    dg_forksrv_free(a.srv);
    return st;
}
