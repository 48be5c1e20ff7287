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
 *   compare  the same command with {device}=cpu and {device}=DEVICE, the pairs
 *            run by the method's driver (method_compare.c);
 *   soak     the program's own epochs with per-epoch memory;
 *   profile  a torch.profiler window from the step hook, the trace in the pack.
 *
 * The record has the fixture's shape (kind "accept"), so dg_evidence_finish
 * applies the same rules, decision and final gate. */
#include "steps/accept_cmd.h"

#include "analysis/loss.h"
#include "core/core.h"
#include "core/json.h"
#include "core/record.h"
#include "measure/measure.h"
#include "measure/nvml.h"
#include "steps/runner.h"
#include "steps/steps.h"
#include "supervise/supervise.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TRIAL_EPOCHS 1000 /* {epochs} of a trial: the probe stops it long before */
#define MAX_ARGS 4096

/* How a child run is stopped once its answer is known (the probe's knobs,
 * docs/events.md "Knobs for devgate accept"): after `steps` optimizer steps
 * at most, once `steady` steps after the warm-up agree within `tol`, or once
 * `budget_s` seconds of steps are spent; then it leaves without the module
 * teardown (fast exit). */
typedef struct stop_plan {
    int steps, steady;
    double tol, budget_s;
} stop_plan;

/* Per-tier sizes: [0] quick, [1] full. */
static const struct cmd_tier {
    stop_plan trial;      /* a sweep trial (the first 2 steps are warm-up) */
    double trial_timeout; /* s per child */
    double max_trial_s;   /* stop doubling once a trial's steps took longer than this */
    int device_from;      /* the sweep's first batch when the gate chose a device */
    int soak_epochs;
    int compare_reps, compare_max_reps; /* pairs: at least, at most */
    double compare_ci_width;            /* add pairs while the interval is wider (share) */
    double compare_budget_s;            /* and while the pairs so far leave time for one more */
    stop_plan pair;                     /* a side of a pair */
    int compare_max_batch;
    int profile_warmup, profile_window;
    double profile_wall_s; /* the window closes after this even with steps left */
    int trace_max_events;  /* no Chrome trace of a window with more events */
} cmd_tiers[2] = {
    /* A quick trial: 6 timed steps after the warm-up at least, the fewest a
     * trial's samples/s interval needs, so the sweep's stops are judged on
     * intervals; more (up to 12) while the window is not steady. */
    {.trial = {.steps = 12, .steady = 6, .tol = 0.15, .budget_s = 4},
     .trial_timeout = 180,
     .max_trial_s = 10,
     .device_from = 32,
     .soak_epochs = 2,
     .compare_reps = 2,
     .compare_max_reps = 2,
     .compare_ci_width = 0.10,
     .compare_budget_s = 20,
     .pair = {.steps = 8, .steady = 4, .tol = 0.15, .budget_s = 3},
     .compare_max_batch = 256,
     .profile_warmup = 2,
     .profile_window = 3,
     .profile_wall_s = 10,
     .trace_max_events = 200000},
    {.trial = {.steps = 20, .steady = 8, .tol = 0.10, .budget_s = 10},
     .trial_timeout = 600,
     .max_trial_s = 60,
     .device_from = 8,
     .soak_epochs = 10,
     .compare_reps = 3,
     .compare_max_reps = 6,
     .compare_ci_width = 0.10,
     .compare_budget_s = 60,
     .pair = {.steps = 16, .steady = 6, .tol = 0.10, .budget_s = 6},
     .compare_max_batch = 1024,
     .profile_warmup = 3,
     .profile_window = 8,
     .profile_wall_s = 30,
     .trace_max_events = 500000},
};

typedef struct acmd {
    dg_ctx *ctx;
    const dg_accept_cmd_opts *o;
    const struct cmd_tier *tier;
    const char *step;   /* the step running now, for the log */
    const char *device; /* the device judged ("cpu", "cuda", "mps") */
    int batch;          /* the batch soak, compare and profile use */
    int level;          /* the gate's: 2 and above run devgate's device gate */
    bool batch_given;
    bool has_batch, has_device, has_epochs;
    dg_oom_count oom_before; /* the OOM-kill count before the running child */
    dg_progress_sink *progress;
    double start_s;       /* a child's start-up, as the gate's child took it (s); NAN unknown */
    double epoch_steps;   /* the training loader's batches per epoch (a trial's); NAN unknown */
    dg_device_args dargs; /* --device-arg: words each device's runs get */
    dg_forksrv *srv;      /* the fork server the children come from (off: plain children) */
} acmd;

/* Takes what the method settled before a step. */
static acmd *at(void *ctx, const dg_method_state *s, const char *step)
{
    acmd *a = ctx;
    a->step = step;
    if (s) {
        a->progress = s->progress;
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

/* PYTHONPATH with the devgate_probe package first: the gate's child's, and
 * (the zero-code probe's own edit is the same) every run's. */
static void probe_pythonpath(const acmd *a, child_env *e)
{
    const char *pp = getenv("PYTHONPATH");
    env_add(e, "PYTHONPATH=%s%s%s", a->o->probe_path ? a->o->probe_path : "",
            pp && pp[0] ? ":" : "", pp ? pp : "");
}

/* Starts the fork server now, with the environment every run gets, so its
 * imports go on while the environment and gate steps run. */
static void server_early(acmd *a)
{
    child_env env = {.n = 0};
    probe_pythonpath(a, &env);
    const char **edits = env.nomem ? NULL : dg_spawn_edits((const char *const *)env.vars);
    if (edits)
        dg_forksrv_start(a->srv, edits);
    dg_free(edits);
    env_free(&env);
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
                      .sample_ms = 100,
                      .progress = dg_progress_forward,
                      .progress_user = a->progress,
                      .output = a->o->output,
                      .output_user = a->o->output_user};
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

/* A child run's end for the progress reports: its word, and its rate or why. */
static void child_progress(acmd *a, const cJSON *rec, const char *why)
{
    char reason[512] = "", detail[160];
    const char *e = rec ? dg_accept_cmd_ended_rec(rec, 0, NULL, reason, sizeof reason) : "failed";
    double sps = dg_accept_cmd_child_sps(rec);
    if (!rec)
        snprintf(detail, sizeof detail, "%.150s", why);
    else if (strcmp(e, "ok") == 0 && isfinite(sps))
        snprintf(detail, sizeof detail, "%.0f samples/s", sps);
    else
        snprintf(detail, sizeof detail, "%.150s", reason);
    dg_progress_trial_end(a->progress, e, detail);
}

/* A run of the user's command at (batch, device, epochs); sp (NULL: none)
 * stops it cleanly once its answer is known. */
static cJSON *run_cmd(acmd *a, int batch, const char *device, int epochs, const stop_plan *sp,
                      const char *profile, const char *profile_out, bool empty_cache, size_t limit,
                      char *why, size_t len)
{
    char **argv = dg_accept_cmd_argv(a->o->argv, batch, device, epochs,
                                     dg_device_args_for(&a->dargs, device));
    if (!argv) {
        snprintf(why, len, "out of host memory");
        return NULL;
    }
    child_env env = {.n = 0};
    /* A command that does not name its device runs as given; on the cpu
     * with every accelerator hidden from it (the program falls back to the
     * cpu as it would on a machine without one). */
    if (!a->has_device && strcmp(device, "cpu") == 0)
        for (size_t i = 0; dg_accept_cmd_cpu_env[i]; i++)
            env_add(&env, "%s", dg_accept_cmd_cpu_env[i]);
    if (sp && sp->steps > 0) {
        env_add(&env, "DEVGATE_PROBE_MAX_STEPS=%d", sp->steps);
        env_add(&env, "DEVGATE_PROBE_FAST_EXIT=1");
        /* The gate step proved the device: no second product in every run. */
        env_add(&env, "DEVGATE_PROBE_GATE=0");
    }
    if (sp && sp->steady > 1)
        env_add(&env, "DEVGATE_PROBE_STEADY=%d:%g", sp->steady, sp->tol);
    if (sp && sp->budget_s > 0)
        env_add(&env, "DEVGATE_PROBE_BUDGET=%g", sp->budget_s);
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
    bool own = strcmp(a->step, "sweep") != 0; /* the driver reports the sweep's trials */
    if (own)
        dg_progress_trial(a->progress, "batch %d on %s", batch, device);
    cJSON *rec = supervise_child(a, (const char *const *)argv, DG_PROBE_AUTO, &env, empty_cache,
                                 limit, why, len);
    env_free(&env);
    dg_accept_cmd_argv_free(argv);
    double per_epoch = dg_jnum(rec, "loader.batches");
    if (per_epoch > 0)
        a->epoch_steps = per_epoch;
    if (own)
        child_progress(a, rec, why);
    return rec;
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
    probe_pythonpath(a, &env);
    char why[512] = "";
    cJSON *rec = a->o->probe_path
                     ? supervise_child(a, argv, DG_PROBE_MANUAL, &env, false, 0, why, sizeof why)
                     : NULL;
    env_free(&env);
    if (!a->o->probe_path)
        snprintf(why, sizeof why, "the devgate_probe package was not found beside devgate");
    double wall = dg_json_metric_value(dg_jpath(rec, "supervise.wall"));
    if (wall > 0)
        a->start_s = wall; /* the interpreter, its imports and three tiny gates */
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
    if (gate && st == DG_OK && a->level >= 2) /* devgate's own checks of the device */
        dg_accept_cmd_level_gate(a->ctx, gate, a->device, a->level, a->o->cancel, out->summary,
                                 sizeof out->summary);
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
    const stop_plan *tp = &a->tier->trial;
    cJSON_AddNumberToObject(spec, "warmup_steps", 2);
    cJSON_AddNumberToObject(spec, "timed_steps", tp->steady); /* at least, when steady */
    cJSON_AddNumberToObject(spec, "max_steps", tp->steps);
    cJSON *sd = cJSON_AddObjectToObject(spec, "steady");
    cJSON_AddNumberToObject(sd, "steps", tp->steady);
    cJSON_AddItemToObject(sd, "tolerance", dg_json_metric(tp->tol, true, "fraction"));
    cJSON_AddItemToObject(sd, "budget", dg_json_metric(tp->budget_s, true, "s"));
    cJSON_AddNumberToObject(spec, "trial_timeout_s",
                            a->o->trial_timeout_s > 0 ? a->o->trial_timeout_s
                                                      : a->tier->trial_timeout);
    cJSON_AddNumberToObject(spec, "swap_growth_mib", DG_ACCEPT_CMD_SWAP_LIMIT_MIB);
    cJSON_AddNumberToObject(spec, "max_trial_s", a->tier->max_trial_s);
    cJSON_AddItemToObject(spec, "mem_budget",
                          dg_json_metric((double)a->o->mem_budget, a->o->mem_budget > 0, "bytes"));
    cJSON_AddStringToObject(spec, "mem_budget_source",
                            a->o->mem_budget ? "option (RLIMIT_AS of each trial)" : "none");
    /* The program's data set is known once a trial reports its loader's:
     * the driver's train-set stop takes it from there. */
    *plan = (dg_sweep_plan){.from = from,
                            .to = a->o->sweep_to > 0 ? a->o->sweep_to : DG_SWEEP_MAX_BATCH,
                            .max_trial_s = a->tier->max_trial_s,
                            .train_samples = NAN,
                            .bisect = true};
    return DG_OK;
}

/* One trial: the command at batch b, stopped cleanly after the tier's steps;
 * out of memory (the framework's error, the address-space budget, the OOM
 * killer) ends this trial only. */
static dg_status cmd_trial(void *ctx, int b, dg_trial_result *t)
{
    acmd *a = at(ctx, NULL, "sweep");
    double t0 = dg_now();
    char why[512] = "";
    cJSON *rec = run_cmd(a, b, a->device, TRIAL_EPOCHS, &a->tier->trial, NULL, NULL, false,
                         a->o->mem_budget, why, sizeof why);
    dg_oom_count after;
    dg_accept_cmd_oom_read(&after);
    dg_oom_killer oomk = dg_accept_cmd_oom_since(&a->oom_before, &after);
    dg_accept_cmd_trial_read(rec, why, a->o->mem_budget, &oomk, b, t);
    t->wall_s = (dg_metric){dg_now() - t0, true};
    cJSON_Delete(rec);
    return t->extra ? DG_OK : DG_ERR_NOMEM;
}

static void cmd_sweep_done(void *ctx)
{
    (void)ctx;
}

/* ---- compare: the cpu baseline ---------------------------------------------------------- */

/* How the cpu side of the comparison runs (recorded as spec.cpu_side):
 * {device}=cpu, else the same command with the accelerators hidden (and the
 * cpu's --device-arg words), else only through --device-arg's cpu words (mps
 * cannot be hidden by the environment); NULL when there is no way. */
static const char *cpu_side(const acmd *a)
{
    if (a->has_device)
        return "{device}=cpu";
    if (strcmp(a->device ? a->device : "cpu", "mps") != 0)
        return "accelerators hidden";
    const char *const *w = dg_device_args_for(&a->dargs, "cpu");
    return w && w[0] ? "--device-arg cpu" : NULL;
}

static dg_status cmd_compare_plan(void *ctx, const dg_method_state *st, dg_compare_plan *plan,
                                  dg_step_out *out)
{
    acmd *a = at(ctx, st, "compare");
    if (strcmp(a->device, "cpu") == 0 || !cpu_side(a)) {
        out->skipped = true;
        snprintf(out->summary, sizeof out->summary, "%s",
                 !cpu_side(a)   ? "the command has no {device} and mps cannot be hidden from a "
                                  "program: give {device} or --device-arg cpu=ARGS"
                 : a->o->device ? "the device asked for is the cpu baseline itself"
                                : "no device passed the gate: cpu is the only path");
        return DG_OK;
    }
    int batch = a->batch;
    if (!a->batch_given && batch > a->tier->compare_max_batch)
        batch = a->tier->compare_max_batch;
    dg_progress_expect(a->progress, 2 * a->tier->compare_reps); /* pairs: cpu, device */
    *plan = (dg_compare_plan){.batch = batch,
                              .steps = a->tier->pair.steps,
                              .budget_s = a->tier->compare_budget_s,
                              .min_pairs = a->tier->compare_reps,
                              .max_pairs = a->tier->compare_max_reps,
                              .ci_width = a->tier->compare_ci_width,
                              .pair_losses = true};
    return DG_OK;
}

/* One side of a pair: the command at batch on device, stopped cleanly after
 * the tier's steps; its losses (the probe's, read off the hot path at the
 * stop) and whether its record says torch was unseeded go to the driver's
 * loss check. */
static dg_status cmd_pair(void *ctx, int batch, const char *device, dg_pair_side *out)
{
    acmd *a = at(ctx, NULL, "compare");
    char why[512] = "";
    cJSON *rec = run_cmd(a, batch, device, TRIAL_EPOCHS, &a->tier->pair, NULL, NULL, false, 0, why,
                         sizeof why);
    out->end = dg_accept_cmd_end(rec, why, 0, NULL, out->reason, sizeof out->reason);
    double sps = dg_accept_cmd_child_sps(rec), ms = dg_jnum(rec, "profile.step.stats.median");
    double share = dg_json_metric_value(dg_jpath(rec, "profile.phases.queue_wait.share"));
    out->sps = (dg_metric){isfinite(sps) ? sps : 0, isfinite(sps)};
    out->step_ms = (dg_metric){isfinite(ms) ? ms : 0, isfinite(ms)};
    out->busy = (dg_metric){isfinite(share) ? 1 - share : 0, isfinite(share)};
    out->losses = cJSON_DetachItemFromObjectCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(rec, "supervise"), "losses");
    out->unseeded = dg_loss_torch_unseeded(dg_jpath(rec, "seeds"));
    cJSON_Delete(rec);
    return DG_OK;
}

/* ---- soak ------------------------------------------------------------------------------------ */

/* The soak: the program's own epochs at the method's batch, per-epoch memory
 * from the probe; bucket and framework go to the record's top level. */
static dg_status cmd_epochs(void *ctx, const dg_method_state *st, dg_epochs_result *out)
{
    acmd *a = at(ctx, st, "soak");
    out->epochs = a->o->epochs > 0 ? a->o->epochs : a->tier->soak_epochs;
    char why[512] = "";
    cJSON *rec = run_cmd(a, a->batch, a->device, out->epochs, NULL, NULL, NULL, a->o->empty_cache,
                         0, why, sizeof why);
    out->end = dg_accept_cmd_end(rec, why, 0, NULL, out->reason, sizeof out->reason);
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
        cJSON_AddNumberToObject(spec, "epochs", out->epochs);
        cJSON_AddBoolToObject(spec, "epochs_substituted", a->has_epochs);
        cJSON_AddBoolToObject(spec, "empty_cache_asked", a->o->empty_cache);
        /* The sampled footprint of the whole tree beside the probe's. */
        cJSON *series = cJSON_DetachItemFromObjectCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(rec, "supervise"), "series");
        if (series)
            cJSON_AddItemToObject(soak, "samples_series", series);
    }
    out->soak = soak;
    out->hoist = cJSON_CreateObject();
    static const char *const top[] = {"bucket", "framework", "loader"};
    for (size_t i = 0; rec && out->hoist && i < sizeof top / sizeof top[0]; i++) {
        cJSON *x = cJSON_DetachItemFromObjectCaseSensitive(rec, top[i]);
        if (x)
            cJSON_AddItemToObject(out->hoist, top[i], x);
    }
    cJSON_Delete(rec);
    return out->hoist ? DG_OK : DG_ERR_NOMEM;
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
    stop_plan sp = {.steps = warm + win};
    cJSON *rec =
        run_cmd(a, a->batch, a->device, TRIAL_EPOCHS, &sp, spec, out, false, 0, why, sizeof why);
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
    /* How each side of the comparison was obtained (docs/schema/report.md). */
    cJSON *da = cJSON_AddObjectToObject(spec, "device_args");
    static const char *const devs[] = {"cpu", "cuda", "mps"};
    for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++) {
        const char *const *w = dg_device_args_for(&a->dargs, devs[i]);
        if (!w)
            continue;
        cJSON *arr = cJSON_AddArrayToObject(da, devs[i]);
        for (size_t k = 0; w[k]; k++)
            cJSON_AddItemToArray(arr, dg_json_string(w[k]));
    }
    const char *how = cpu_side(a);
    cJSON *cs = cJSON_AddObjectToObject(spec, "cpu_side");
    dg_json_add_str(cs, "how", how);
    cJSON *env = cJSON_AddArrayToObject(cs, "env");
    for (size_t i = 0; !a->has_device && how && dg_accept_cmd_cpu_env[i]; i++)
        cJSON_AddItemToArray(env, cJSON_CreateString(dg_accept_cmd_cpu_env[i]));
}

/* The tier's plan of step in seconds (the progress reports' ETA): its child
 * runs, each the start-up the gate's child took plus its steps at the knee's
 * step time; NAN until the gate has run (and, for the soak, until a trial
 * has told the loader's batches per epoch). */
static double cmd_plan_s(void *ctx, const dg_method_state *s, int step)
{
    const acmd *a = ctx;
    double st = isfinite(s->step_s) && s->step_s > 0 ? s->step_s : 0.05, up = a->start_s;
    const struct cmd_tier *t = a->tier;
    switch (step) {
    case 1: return NAN;
    case 2: return up + (t->trial.steady + 2) * st;
    case 3: {
        int epochs = a->o->epochs > 0 ? a->o->epochs : t->soak_epochs;
        return up + epochs * a->epoch_steps * st;
    }
    case 4: /* cpu and device pairs, the cpu's steps taken as three times the device's */
        return strcmp(s->device ? s->device : "cpu", "cpu") == 0 || !cpu_side(a)
                   ? 0
                   : t->compare_reps * (2 * up + 4.0 * t->pair.steady * st);
    default: return up + fmin((t->profile_warmup + t->profile_window) * st, t->profile_wall_s);
    }
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
    .compare_plan = cmd_compare_plan,
    .pair = cmd_pair,
    .profile = cmd_profile,
    .spec = cmd_spec,
    .plan_s = cmd_plan_s,
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
    bool quick = opts->quick;
    int level = opts->level;
    if (dg_level_resolve(ctx, &quick, &level) != DG_OK)
        return DG_ERR_USAGE;
    acmd a = {.ctx = ctx,
              .o = opts,
              .tier = &cmd_tiers[quick ? 0 : 1],
              .device = "cpu",
              .level = level,
              .start_s = NAN,
              .epoch_steps = NAN};
    a.has_batch = mentions(opts->argv, "{batch}");
    a.has_device = mentions(opts->argv, "{device}");
    a.has_epochs = mentions(opts->argv, "{epochs}");
    char why[256];
    if (dg_accept_cmd_device_args(opts->device_args, &a.dargs, why, sizeof why) != DG_OK)
        return dg_fail(ctx, DG_ERR_USAGE, "accept: --device-arg: %s", why);
    dg_method_opts mo = {.label = opts->label,
                         .cancel = opts->cancel,
                         .progress = opts->progress,
                         .progress_user = opts->progress_user,
                         .batch = opts->batch,
                         .quick = quick,
                         .level = level,
                         .budget_s = NAN, /* the program's own steps set the time */
                         .sweep_to = opts->sweep_to,
                         .backend_asked = opts->device,
                         .backend_none = "cpu"};
    a.srv = dg_forksrv_new(opts->argv, !opts->no_fork_server, opts->probe_path, opts->cancel);
    if (!a.srv) {
        dg_device_args_free(&a.dargs);
        return dg_fail(ctx, DG_ERR_NOMEM, "accept: out of host memory");
    }
    server_early(&a);
    /* NVML opened once for the whole method: each child's sampler opens it
     * again, and with NVML already held (the driver kept initialised between
     * the children when persistence mode is off) that costs nothing. */
    dg_nvml nv;
    bool nvml_held = dg_nvml_open(&nv, NULL, 0) == DG_NVML_LOADED;
    dg_status st = dg_method_run(ctx, &command_runner, &a, &mo, json);
    if (nvml_held)
        dg_nvml_close(&nv);
    dg_accept_cmd_launch_note(ctx, a.srv, json);
    dg_forksrv_free(a.srv);
    dg_device_args_free(&a.dargs);
    return st;
}
