/* accept: the fixture runner (docs/accept.md; the interface in
 * src/steps/runner.h). The method (src/steps/method.c) drives it; each of
 * its steps is the library step of the same name: the gate (dg_gate_run),
 * sweep trials (`devgate __trial` children, sweep.c), the soak
 * (dg_soak_run), the comparison (compare.c: its numerics pair, then the
 * driver's timed pairs of this runner's `pair`) and the profile
 * (dg_profile_run). The sizes of the later steps follow from what the
 * earlier ones measured: the device is the best one the gate passed, the
 * batch is the sweep's knee, and step counts are set by a time budget from
 * the knee's step time, so a slow device still finishes within the tier's
 * budget. */
#include "backend/backend.h"
#include "core/core.h"
#include "core/json.h"
#include "core/record.h"
#include "steps/steps.h"

#include <math.h>
#include <string.h>

/* Per-tier sizes: [0] quick, [1] full. */
static const struct tier {
    int sweep_warmup, sweep_timed;
    double trial_timeout_s, max_trial_s;
    int soak_epochs;
    double soak_budget_s;
    int compare_steps, compare_reps; /* per repetition; timed repetitions per side */
    int compare_max_batch;           /* the cpu side runs the same batch: keep it affordable */
    int profile_warmup;
    double profile_budget_s;
} tiers[2] = {
    {1, 3, 60, 4, 4, 6, 5, 3, 256, 2, 4},
    {2, 5, 120, 20, 10, 40, 10, 5, 1024, 5, 20},
};

typedef struct acc {
    dg_ctx *ctx;
    const dg_accept_opts *o;
    const struct tier *tier;
    dg_train_opts base;      /* the spec every training step starts from */
    dg_fixture_sweep *fs;    /* the sweep's prepared trials */
    dg_compare_opts compare; /* the comparison's options */
    dg_fixture_compare *fc;  /* the comparison's numerics, its pairs' runner */
    const char *device;      /* as the gate chose it */
    int level;               /* the gate's */
} acc;

/* Keeps a library step's record as the step's section. */
static cJSON *parse_owned(char *json)
{
    cJSON *sec = json ? cJSON_Parse(json) : NULL;
    dg_string_free(json);
    return sec;
}

/* ---- the steps --------------------------------------------------------------- */

static const char *fx_python(void *ctx)
{
    return ((acc *)ctx)->o->python;
}

/* Picks the device: the backend asked for, else the first of cuda, opencl that
 * is available and passed its product check; "cpu" when none did. */
static dg_status choose_device(acc *a, const cJSON *gate, char *why, size_t len)
{
    const cJSON *b;
    const char *want = a->o->train.backend;
    for (size_t i = 0; want ? i < 1 : dg_device_preference[i] != NULL; i++) {
        const char *name = want ? want : dg_device_preference[i];
        cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(gate, "backends"))
        {
            const char *n = dg_jstr(b, "name");
            if (!n || strcmp(n, name) != 0)
                continue;
            if (dg_jbool(b, "available") == 1 && (dg_jbool(b, "matmul.ok") == 1 || want)) {
                a->device = name;
                return DG_OK;
            }
            if (want) {
                const char *r = dg_jstr(b, "reason");
                snprintf(why, len, "backend %s is not available: %s", name,
                         r ? r : "no reason given");
                return DG_ERR_UNAVAILABLE;
            }
        }
    }
    if (want) {
        snprintf(why, len, "backend %s is not in the gate's list", want);
        return DG_ERR_UNAVAILABLE;
    }
    a->device = "cpu";
    return DG_OK;
}

static dg_status fx_gate(void *ctx, dg_step_out *out, const char **device)
{
    acc *a = ctx;
    /* Every known backend, so the log says what is built and why one is not there;
     * a backend named with --backend is gated with cpu, the baseline. */
    char list[64];
    const char *want = a->o->train.backend;
    bool want_host = want && dg_backend_is_host(want);
    if (want && !want_host)
        snprintf(list, sizeof list, "cpu,%s", want);
    dg_gate_opts go = {.backends = want ? (want_host ? want : list) : NULL,
                       .seed = a->base.seed,
                       .math = a->base.math,
                       .level = a->level,
                       .first_device = !want};
    char *json = NULL;
    dg_gate_verdict verdict = DG_GATE_PASS;
    dg_status st = dg_gate_run(a->ctx, &go, &json, &verdict);
    cJSON *gate = out->section = parse_owned(json);
    char *sum = out->summary;
    size_t off = 0, len = sizeof out->summary;
    const cJSON *b;
    cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(gate, "backends"))
    {
        const char *n = dg_jstr(b, "name");
        const cJSON *mm = cJSON_GetObjectItemCaseSensitive(b, "matmul");
        char part[128], gf[32];
        if (dg_jbool(b, "available") == 1 && dg_jbool(mm, "ok") < 0)
            snprintf(part, sizeof part, "%s available, %s", n ? n : "?",
                     dg_jstr(mm, "reason") ? dg_jstr(mm, "reason") : "not checked");
        else if (dg_jbool(b, "available") == 1)
            snprintf(part, sizeof part, "%s %s %s", n ? n : "?",
                     dg_fmt_num(gf, sizeof gf, "%.1f GFLOP/s", dg_jnum(mm, "gflops")),
                     dg_jbool(mm, "ok") == 1 ? "ok" : "FAILED");
        else
            snprintf(part, sizeof part, "%s: %s", n ? n : "?",
                     dg_jbool(b, "built") == 1 ? "built, not available" : "not built");
        off +=
            (size_t)snprintf(sum + off, off < len ? len - off : 0, "%s%s", off ? " · " : "", part);
        if (off >= len)
            break;
    }
    char why[512] = "";
    dg_status pick = gate ? choose_device(a, gate, why, sizeof why) : st;
    if (st == DG_OK && pick != DG_OK)
        st = dg_fail(a->ctx, pick, "%s", why);
    *device = a->device;
    return st;
}

static dg_status fx_sweep_plan(void *ctx, const dg_method_state *s, cJSON *root,
                               dg_sweep_plan *plan, dg_step_out *out)
{
    (void)out;
    acc *a = ctx;
    dg_sweep_opts so = {.train = a->base,
                        .to = a->o->sweep_to,
                        .warmup_steps = a->tier->sweep_warmup,
                        .timed_steps = a->tier->sweep_timed,
                        .trial_timeout_s = a->tier->trial_timeout_s,
                        .max_trial_s = a->tier->max_trial_s};
    so.train.backend = s->device;
    return dg_fixture_sweep_open(a->ctx, &so, root, plan, &a->fs);
}

static dg_status fx_trial(void *ctx, int batch, dg_trial_result *out)
{
    return dg_fixture_sweep_trial(((acc *)ctx)->fs, batch, out);
}

static void fx_sweep_done(void *ctx)
{
    acc *a = ctx;
    dg_fixture_sweep_free(a->fs);
    a->fs = NULL;
}

/* Steps that fit budget_s at the knee's step time, within [lo, hi]. */
static int steps_for(const dg_method_state *s, double budget_s, int runs, int lo, int hi)
{
    double step = isnan(s->step_s) || s->step_s <= 0 ? 0.05 : s->step_s;
    double n = budget_s / (step * (runs > 0 ? runs : 1));
    return n < lo ? lo : n > hi ? hi : (int)n;
}

static dg_status fx_epochs(void *ctx, const dg_method_state *s, dg_epochs_result *out)
{
    acc *a = ctx;
    dg_soak_opts so = {.train = a->base};
    so.train.backend = s->device;
    so.train.batch = s->batch;
    so.train.epochs = a->o->train.epochs > 0 ? a->o->train.epochs : a->tier->soak_epochs;
    so.train.progress = dg_progress_forward; /* the soak's epochs, on the method's line */
    so.train.progress_user = s->progress;
    so.train.steps = a->o->train.steps > 0
                         ? a->o->train.steps
                         : steps_for(s, a->tier->soak_budget_s, so.train.epochs, 2, 50);
    out->epochs = so.train.epochs;
    char *json = NULL;
    dg_status st = dg_soak_run(a->ctx, &so, &json);
    out->soak = parse_owned(json);
    out->end = st == DG_OK                ? DG_TRIAL_OK
               : st == DG_ERR_INTERRUPTED ? DG_TRIAL_INTERRUPTED
                                          : DG_TRIAL_FAILED;
    if (st != DG_OK)
        snprintf(out->reason, sizeof out->reason, "%s", dg_errmsg(a->ctx));
    const cJSON *bk = cJSON_GetObjectItemCaseSensitive(out->soak, "bucket");
    if (bk) {
        out->hoist = cJSON_CreateObject();
        cJSON_AddItemToObject(out->hoist, "bucket", cJSON_Duplicate(bk, true));
    }
    return DG_OK;
}

/* The fixture's comparison: its numerics pair against the float64 reference
 * here (compare.c), then the driver's timed pairs of fx_pair, then the
 * numerics added to the section (fx_compare_done). */
static dg_status fx_compare_plan(void *ctx, const dg_method_state *s, dg_compare_plan *plan,
                                 dg_step_out *out)
{
    acc *a = ctx;
    if (dg_backend_is_host(s->device)) {
        out->skipped = true;
        snprintf(out->summary, sizeof out->summary, "%s",
                 a->o->train.backend ? "the device asked for is the cpu baseline itself"
                                     : "no device passed the gate: cpu is the only path");
        return DG_OK;
    }
    /* The knee of a large device can be a batch the cpu needs seconds per step
     * for; above the tier's cap the comparison runs at the cap (a --batch given
     * is used as it is). */
    int batch = s->batch;
    if (!s->batch_given && batch > a->tier->compare_max_batch)
        batch = a->tier->compare_max_batch;
    dg_compare_opts co = {.train = a->base,
                          .batches = {batch},
                          .steps = a->tier->compare_steps,
                          .repetitions = a->tier->compare_reps};
    co.train.backend = s->device;
    a->compare = co;
    dg_status st = dg_fixture_compare_open(a->ctx, &a->compare, &a->fc);
    if (st == DG_OK)
        st = dg_fixture_compare_numerics(a->fc, batch, plan, out);
    return st;
}

static dg_status fx_pair(void *ctx, int batch, const char *device, dg_pair_side *out)
{
    return dg_fixture_compare_pair(((acc *)ctx)->fc, batch, device, out);
}

static void fx_compare_done(void *ctx, dg_step_out *out)
{
    dg_fixture_compare_done(((acc *)ctx)->fc, out);
}

static dg_status fx_profile(void *ctx, const dg_method_state *s, dg_step_out *out)
{
    acc *a = ctx;
    dg_profile_opts po = {
        .train = a->base, .warmup = a->tier->profile_warmup, .trace_path = a->o->trace_path};
    po.train.backend = s->device;
    po.train.batch = s->batch;
    /* Two passes share the budget: the unprofiled one at the knee's step
     * time, the profiled one (every op synchronised) at about twice it. */
    po.window = steps_for(s, a->tier->profile_budget_s, 3, 5, 50);
    char *json = NULL;
    dg_status st = dg_profile_run(a->ctx, &po, &json);
    cJSON *rec = out->section = parse_owned(json);
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(rec, "phases");
    if (ph) {
        static const struct {
            const char *key, *label;
        } shown[] = {{"queue_wait", "data"}, {"h2d", "h2d"},    {"forward", "fwd"},
                     {"backward", "bwd"},    {"update", "upd"}, {"sync", "sync"}};
        char *sum = out->summary;
        size_t off = 0, len = sizeof out->summary;
        for (size_t i = 0; i < sizeof shown / sizeof shown[0] && off < len; i++) {
            char key[64];
            snprintf(key, sizeof key, "%s.share", shown[i].key);
            double v = dg_jnum(ph, key);
            if (!isnan(v))
                off += (size_t)snprintf(sum + off, len - off, "%s%s %.0f%%", off ? " · " : "",
                                        shown[i].label, 100 * v);
        }
        double per = dg_jnum(rec, "sync_points.per_step");
        if (!isnan(per) && off < len)
            snprintf(sum + off, len - off, " · %.2g sync points per step", per);
    }
    return st;
}

static void fx_spec(void *ctx, const dg_method_state *s, cJSON *spec)
{
    (void)s;
    const dg_train_opts *t = &((acc *)ctx)->base;
    cJSON_AddStringToObject(spec, "model", t->model);
    dg_json_add_str(spec, "data", t->data ? t->data : "synthetic");
    cJSON_AddNumberToObject(spec, "seed", (double)t->seed);
    cJSON_AddNumberToObject(spec, "threads", t->threads);
    cJSON_AddNumberToObject(spec, "workers", t->workers < 0 ? 0 : t->workers);
    cJSON_AddBoolToObject(spec, "tf32", t->math == DG_MATH_TF32);
    cJSON_AddStringToObject(spec, "math", dg_math_name(t->math));
}

/* The tier's plan of step in seconds (the progress reports' ETA): the
 * budgets the steps are sized by, and a trial's few steps at the knee's step
 * time (0.05 s before the sweep has measured one). */
static double fx_plan_s(void *ctx, const dg_method_state *s, int step)
{
    const acc *a = ctx;
    double st = isfinite(s->step_s) && s->step_s > 0 ? s->step_s : 0.05;
    switch (step) {
    case 1: return 3;
    case 2: return 0.5 + (a->tier->sweep_warmup + a->tier->sweep_timed) * st;
    case 3: return a->tier->soak_budget_s + 1;
    case 4: /* both sides, the cpu's steps taken as twice the device's */
        return s->device && dg_backend_is_host(s->device)
                   ? 0
                   : 1 + 3.0 * a->tier->compare_reps * a->tier->compare_steps * st;
    default: return a->tier->profile_budget_s + 1;
    }
}

static const dg_runner_i fixture_runner = {
    .version = DG_RUNNER_VERSION,
    .name = "fixture",
    .python = fx_python,
    .gate = fx_gate,
    .sweep_plan = fx_sweep_plan,
    .trial = fx_trial,
    .sweep_done = fx_sweep_done,
    .epochs = fx_epochs,
    .compare_plan = fx_compare_plan,
    .pair = fx_pair,
    .compare_done = fx_compare_done,
    .profile = fx_profile,
    .spec = fx_spec,
    .plan_s = fx_plan_s,
};

dg_status dg_accept_run(dg_ctx *ctx, const dg_accept_opts *opts, char **json)
{
    *json = NULL;
    if (!opts)
        return dg_fail(ctx, DG_ERR_USAGE, "accept: no options");
    if (opts->train.batch < 0 || opts->train.epochs < 0 || opts->train.steps < 0 ||
        opts->sweep_to < 0)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "accept: batch, epochs, steps and the sweep limit must be positive");
    /* Inputs judged before anything is measured. */
    if (dg_train_opts_inputs_check(ctx, &opts->train, "cifar") != DG_OK)
        return DG_ERR_USAGE;
    bool quick = opts->quick;
    int level = opts->level;
    if (dg_level_resolve(ctx, &quick, &level) != DG_OK)
        return DG_ERR_USAGE;
    acc a = {.ctx = ctx, .o = opts, .tier = &tiers[quick ? 0 : 1], .base = opts->train};
    a.level = level;
    if (!a.base.model)
        a.base.model = "cifar";
    a.base.batch = 0;
    a.base.epochs = 0;
    a.base.steps = 0;
    dg_method_opts mo = {.label = opts->label,
                         .cancel = opts->train.cancel,
                         .progress = opts->progress,
                         .progress_user = opts->progress_user,
                         .batch = opts->train.batch,
                         .quick = quick,
                         .level = level,
                         .budget_s = dg_level_get(level)->accept_budget_s,
                         .sweep_to = opts->sweep_to,
                         .backend_asked = opts->train.backend};
    dg_status st = dg_method_run(ctx, &fixture_runner, &a, &mo, json);
    dg_fixture_sweep_free(a.fs);
    dg_fixture_compare_free(a.fc);
    return st;
}
