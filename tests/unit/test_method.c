/* The method's contract (src/steps/runner.h), driver side: the one sweep
 * driver (dg_method_sweep) over a stand-in runner whose trials report
 * planted throughput curves, the same curves tests/cli/test_method_contract.sh
 * plants in the fixture's `__trial` children (DEVGATE_TRIAL_PLAN) and in the
 * command runner's stand-in program (tests/python/scripts/sweep_train.py):
 * where the doubling stops and why, the bisection's batches, the knee and the
 * safe batch; every trial measured under the lock with its contention. And
 * the one pair driver (dg_method_compare) over planted cpu/device sides: the
 * order, how many pairs the interval asks for, a failing side, each side's
 * lock and window, and the RUN the sides make (dg_method_pairs_run). Both
 * runners' pairs go through that driver: the same planted step times given
 * to the command runner's stand-in and to the fixture's own `pair`
 * (compare.c, DEVGATE_PAIR_PLAN) come out with the same speedup and the same
 * speed verdict. */
#include "check.h"

#include "core/json.h"
#include "steps/runner.h"
#include "steps/steps.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A planted curve (as sweep_train.py: --base-ms, --plateau, --gain,
 * --fall-above, --fall-factor, and out of memory above oom_above). */
typedef struct curve {
    double base_ms, plateau, gain, fall_above, fall;
    int oom_above;
} curve;

static double step_ms(const curve *c, int batch)
{
    double b = batch, step = c->base_ms;
    if (c->plateau > 0 && b > c->plateau)
        step *= (b / c->plateau) / pow(1.0 + c->gain, log2(b / c->plateau));
    if (c->fall_above > 0 && b > c->fall_above)
        step *= pow(c->fall, log2(b / c->fall_above));
    return step;
}

static int calls;

static dg_status planted_trial(void *ctx, int batch, dg_trial_result *t)
{
    const curve *c = ctx;
    calls++;
    if (c->oom_above && batch > c->oom_above) {
        t->end = DG_TRIAL_OOM;
        snprintf(t->reason, sizeof t->reason, "planted: out of memory");
        return DG_OK;
    }
    double ms[6], step = step_ms(c, batch);
    for (int i = 0; i < 6; i++)
        ms[i] = step;
    t->end = DG_TRIAL_OK;
    t->rate = dg_sweep_rate_ci(batch / (step / 1000), ms, 6, NAN, NAN, NAN);
    t->step_median = (dg_metric){step, true};
    t->steps = 6;
    t->step_source = "steps";
    t->samples = 6.0 * batch;
    t->loop_s = 6 * step / 1000;
    t->wall_s = (dg_metric){t->loop_s, true};
    return DG_OK;
}

static void nothing(void *ctx)
{
    (void)ctx;
}

static const dg_runner_i planted = {
    .version = DG_RUNNER_VERSION, .name = "planted", .trial = planted_trial, .sweep_done = nothing};

/* One row of the contract: a curve and what the method must conclude. */
typedef struct row {
    const char *name;
    curve c;
    int from;
    const char *stopped;
    int at;
    int trials[8]; /* the doubling's batches, 0-terminated */
    int bisect[8]; /* the bisection's, 0-terminated */
    int knee, safe;
} row;

static const row rows[] = {
    {.name = "plateau",
     .c = {.base_ms = 20, .plateau = 32, .gain = 0.04},
     .from = 8,
     .stopped = "throughput-plateau",
     .at = 256,
     .trials = {8, 16, 32, 64, 128, 256},
     .knee = 128,
     .safe = 256},
    {.name = "oom",
     .c = {.base_ms = 10, .oom_above = 40},
     .from = 16,
     .stopped = "oom",
     .at = 64,
     .trials = {16, 32, 64},
     .bisect = {48, 40, 44},
     .knee = 40,
     .safe = 40},
    {.name = "falling",
     .c = {.base_ms = 20, .fall_above = 32, .fall = 4},
     .from = 8,
     .stopped = "throughput-falling",
     .at = 128,
     .trials = {8, 16, 32, 64, 128},
     .knee = 32,
     .safe = 128},
};

static bool batches_are(const cJSON *arr, const int *want)
{
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, arr)
    {
        if (want[i] != (int)dg_jnum(t, "batch"))
            return false;
        i++;
    }
    return want[i] == 0;
}

/* ---- the comparison's pairs --------------------------------------------------- */

/* Planted sides: cpu at cpu_sps, the device at dev_sps, each times
 * (1 + noise x (-1)^k) on its k-th run; the device fails on run fail_at (1-based, 0 never). */
typedef struct planted_pairs {
    double cpu_sps, dev_sps, noise;
    int fail_at;
    int sleep_ms; /* each side takes at least this long */
    int ncpu, ndev;
    char order[64];
    /* Planted losses: loss_steps steps of 2.3 x 0.95^step, the device's
     * times 1 + loss_drift, the k-th cpu run's times 1 + cpu_jitter x k (an
     * unreproducible program); unseeded marks every side's record so. */
    int loss_steps;
    double loss_drift, cpu_jitter;
    bool unseeded;
} planted_pairs;

static cJSON *planted_losses(const planted_pairs *p, bool cpu, int k)
{
    if (p->loss_steps <= 0)
        return NULL;
    cJSON *arr = cJSON_CreateArray();
    double f = cpu ? 1 + p->cpu_jitter * k : 1 + p->loss_drift;
    for (int s = 0; s < p->loss_steps; s++) {
        const double r[3] = {0, s, 2.3 * pow(0.95, s) * f};
        cJSON_AddItemToArray(arr, cJSON_CreateDoubleArray(r, 3));
    }
    return arr;
}

static dg_status planted_pair(void *ctx, int batch, const char *device, dg_pair_side *out)
{
    planted_pairs *p = ctx;
    bool cpu = strcmp(device, "cpu") == 0;
    int k = cpu ? ++p->ncpu : ++p->ndev;
    size_t len = strlen(p->order);
    if (len + 1 < sizeof p->order)
        p->order[len] = cpu ? 'c' : 'd';
    CHECK(batch == 64);
    if (p->sleep_ms > 0)
        nanosleep(&(struct timespec){0, p->sleep_ms * 1000000L}, NULL);
    if (!cpu && k == p->fail_at) {
        out->end = DG_TRIAL_OOM;
        snprintf(out->reason, sizeof out->reason, "planted: out of memory");
        return DG_OK;
    }
    double sps = (cpu ? p->cpu_sps : p->dev_sps) * (1 + p->noise * (k % 2 ? 1 : -1));
    out->end = DG_TRIAL_OK;
    out->sps = (dg_metric){sps, true};
    out->step_ms = (dg_metric){1000.0 * batch / sps, true};
    out->busy = (dg_metric){cpu ? 1.0 : 0.8, true};
    out->losses = planted_losses(p, cpu, k);
    out->unseeded = p->unseeded;
    return DG_OK;
}

static const dg_runner_i pairing = {
    .version = DG_RUNNER_VERSION, .name = "planted", .pair = planted_pair};

static void test_pairs(dg_ctx *ctx)
{
    dg_compare_plan plan = {
        .batch = 64, .steps = 5, .min_pairs = 2, .max_pairs = 6, .ci_width = 0.10};
    /* Steady sides: the plan's pairs and no more, cpu first each time. */
    planted_pairs p = {.cpu_sps = 100, .dev_sps = 200};
    dg_step_out out = {0};
    CHECK(dg_method_compare(ctx, &pairing, &p, "cuda", &plan, NULL, &out) == DG_OK);
    CHECK_STR(p.order, "cdcd");
    const cJSON *run = cJSON_GetArrayItem(dg_jpath(out.section, "runs"), 0);
    CHECK(fabs(dg_jnum(run, "speedup") - 2.0) < 1e-9);
    CHECK(fabs(dg_jnum(run, "step_time_reduction_pct") - 50.0) < 1e-9);
    CHECK(fabs(dg_jnum(run, "busy_fraction") - 0.8) < 1e-9);
    CHECK_STR(dg_jstr(run, "device.backend"), "cuda");
    CHECK_STR(dg_jstr(out.section, "source"), "planted");
    CHECK(dg_jnum(out.section, "spec.repetitions") == 2);
    /* Each side's run under the lock, its contention window beside it. */
    for (int side = 0; side < 2; side++) {
        const cJSON *e;
        int n = 0;
        cJSON_ArrayForEach(e, dg_jpath(run, side ? "repetitions.device" : "repetitions.cpu"))
        {
            const char *lk = dg_jstr(e, "lock.state");
            CHECK_MSG(lk && strcmp(lk, "held") == 0, "side %d: lock %s", side, lk ? lk : "none");
            CHECK(cJSON_IsObject(dg_jpath(e, "window")));
            CHECK(dg_jbool(e, "median.valid") == 1);
            n++;
        }
        CHECK_MSG(n == 2, "side %d: %d entries", side, n);
    }
    CHECK(strstr(out.summary, "2.00× cpu") != NULL);
    CHECK_STR(dg_jstr(out.section, "spec.pairs_ended"), "interval narrow");
    CHECK(dg_jbool(out.section, "spec.budget.valid") == 0);
    cJSON_Delete(out.section);
    /* Noisy sides: the interval is wider than the target, so pairs are added
     * up to the plan's most; the speedup's interval still holds 2. */
    p = (planted_pairs){.cpu_sps = 100, .dev_sps = 200, .noise = 0.3};
    out = (dg_step_out){0};
    CHECK(dg_method_compare(ctx, &pairing, &p, "cuda", &plan, NULL, &out) == DG_OK);
    CHECK_STR(p.order, "cdcdcdcdcdcd");
    CHECK_STR(dg_jstr(out.section, "spec.pairs_ended"), "most pairs");
    run = cJSON_GetArrayItem(dg_jpath(out.section, "runs"), 0);
    double lo = dg_jnum(run, "speedup_ci.lo"), hi = dg_jnum(run, "speedup_ci.hi");
    CHECK_MSG(lo <= 2.0 && hi >= 2.0 && lo > 1.0, "interval %g-%g", lo, hi);
    cJSON_Delete(out.section);
    /* The same noisy sides under a time budget: each side takes 30 ms or
     * more, so two pairs spend 120 ms or more and leave no room for a third
     * within 150 ms; the interval is what the two pairs give. */
    p = (planted_pairs){.cpu_sps = 100, .dev_sps = 200, .noise = 0.3, .sleep_ms = 30};
    dg_compare_plan budgeted = plan;
    budgeted.budget_s = 0.15;
    out = (dg_step_out){0};
    CHECK(dg_method_compare(ctx, &pairing, &p, "cuda", &budgeted, NULL, &out) == DG_OK);
    CHECK_STR(p.order, "cdcd");
    CHECK_STR(dg_jstr(out.section, "spec.pairs_ended"), "time budget");
    CHECK(dg_jnum(out.section, "spec.budget.value") == 0.15);
    cJSON_Delete(out.section);
    /* A side that fails ends the comparison there, named in the section. */
    p = (planted_pairs){.cpu_sps = 100, .dev_sps = 200, .fail_at = 2};
    out = (dg_step_out){0};
    CHECK(dg_method_compare(ctx, &pairing, &p, "cuda", &plan, NULL, &out) == DG_ERR_CHECK);
    CHECK_STR(p.order, "cdcd");
    CHECK_STR(dg_jstr(out.section, "status"), "failed");
    run = cJSON_GetArrayItem(dg_jpath(out.section, "runs"), 0);
    CHECK_STR(dg_jstr(run, "failed"), "cuda");
    CHECK_STR(out.error, "planted: out of memory");
    cJSON_Delete(out.section);
    /* A verdict settled with a margin (10x: pays off at more than twice its
     * minimum, the interval a point) ends the pairs after 3, under the plan's 4. */
    dg_compare_plan four = plan;
    four.min_pairs = 4;
    p = (planted_pairs){.cpu_sps = 100, .dev_sps = 1000};
    out = (dg_step_out){0};
    CHECK(dg_method_compare(ctx, &pairing, &p, "cuda", &four, NULL, &out) == DG_OK);
    CHECK_STR(p.order, "cdcdcd");
    run = cJSON_GetArrayItem(dg_jpath(out.section, "runs"), 0);
    CHECK_STR(dg_jstr(run, "repetitions.stop"), "decisive");
    CHECK(dg_jnum(run, "repetitions.planned") == 6);
    CHECK_STR(dg_jstr(out.section, "spec.pairs_ended"), "decisive");
    cJSON_Delete(out.section);
    /* Cancelled: no pair runs. */
    volatile sig_atomic_t cancel = 1;
    p = (planted_pairs){.cpu_sps = 100, .dev_sps = 200};
    out = (dg_step_out){0};
    CHECK(dg_method_compare(ctx, &pairing, &p, "cuda", &plan, &cancel, &out) == DG_ERR_INTERRUPTED);
    CHECK(p.order[0] == 0);
    cJSON_Delete(out.section);
    /* A side without any figure: the speedup is not reported, never 0. */
    dg_pair_side none[2] = {{.end = DG_TRIAL_OK}, {.end = DG_TRIAL_OK}};
    dg_pair_side two[2] = {{.end = DG_TRIAL_OK, .sps = {10, true}},
                           {.end = DG_TRIAL_OK, .sps = {12, true}}};
    dg_compare_plan p8 = {.batch = 8};
    cJSON *r = dg_method_pairs_run(&p8, "mps", none, two, 2, NULL);
    CHECK(dg_jbool(r, "speedup.valid") == 0 && isnan(dg_jnum(r, "speedup")));
    CHECK(dg_jbool(r, "speedup_ci.lo.valid") == 0);
    CHECK(dg_jbool(r, "busy_fraction.valid") == 0);
    CHECK(dg_jnum(r, "repetitions.per_side") == 2);
    cJSON_Delete(r);
}

/* ---- both runners' pairs through the one driver ------------------------------ */

/* Planted step times at batch 64 and the verdict the driver must reach on
 * them (analysis/speed.h: pays off from 1.28x, the no-difference band
 * 0.91-1.1x). */
static const struct {
    double cpu_ms, dev_ms;
    const char *verdict;
} verdict_rows[] = {
    {40, 10, "pays-off"}, {23.8, 20, "no-gain"}, {20, 20, "no-difference"}, {10, 20, "slower"}};

static const cJSON *run_of(const dg_step_out *out)
{
    return cJSON_GetArrayItem(dg_jpath(out->section, "runs"), 0);
}

/* The RUN's loss check (plan.pair_losses): the first cpu repetition's losses
 * against the first device repetition's; not judged when the sides' losses
 * are not comparable; absent without pair_losses (the fixture's numerics are
 * its own). */
static void test_pair_losses(dg_ctx *ctx)
{
    static const struct {
        planted_pairs p;
        int agree; /* 1, 0, -1 null */
        const char *verdict, *why, *summary;
    } loss_rows[] = {
        {{.loss_steps = 8}, 1, "within tolerance", NULL, "; loss agrees over 8 steps"},
        {{.loss_steps = 8, .loss_drift = 0.05}, 0, "drift", NULL, "; loss DRIFTS over 8 steps"},
        {{.loss_steps = 8, .loss_drift = 0.005}, 1, "within tolerance", NULL, "agrees"},
        {{.loss_steps = 8, .cpu_jitter = 0.2},
         -1,
         NULL,
         "does not reproduce its own losses",
         "; loss not compared: the cpu side does not reproduce"},
        {{.loss_steps = 8, .unseeded = true}, -1, NULL, "torch was unseeded", "unseeded"},
        {{.loss_steps = 2}, -1, NULL, "too few common steps: 2", "too few"},
        {{.loss_steps = 0}, -1, NULL, "no losses reported", "no losses reported"},
    };
    dg_compare_plan plan = {.batch = 64,
                            .steps = 5,
                            .min_pairs = 2,
                            .max_pairs = 2,
                            .ci_width = 0.10,
                            .pair_losses = true};
    for (size_t i = 0; i < sizeof loss_rows / sizeof loss_rows[0]; i++) {
        planted_pairs p = loss_rows[i].p;
        p.cpu_sps = 100;
        p.dev_sps = 200;
        dg_step_out out = {0};
        CHECK(dg_method_compare(ctx, &pairing, &p, "cuda", &plan, NULL, &out) == DG_OK);
        const cJSON *run = run_of(&out);
        const cJSON *l = dg_jpath(run, "loss");
        CHECK_MSG(cJSON_IsObject(l), "row %zu: no loss", i);
        int agree = dg_jbool(l, "agree");
        CHECK_MSG(agree == loss_rows[i].agree, "row %zu: agree %d", i, agree);
        const char *v = dg_jstr(run, "verdict");
        CHECK_MSG(loss_rows[i].verdict ? v && !strcmp(v, loss_rows[i].verdict) : !v,
                  "row %zu: verdict %s", i, v ? v : "null");
        const char *why = dg_jstr(l, "why");
        CHECK_MSG(loss_rows[i].why ? why && strstr(why, loss_rows[i].why) : !why, "row %zu: why %s",
                  i, why ? why : "null");
        CHECK_MSG(strstr(out.summary, loss_rows[i].summary), "row %zu: summary %s", i, out.summary);
        CHECK(dg_jnum(l, "tolerance") == 0.01);
        if (loss_rows[i].agree >= 0) {
            CHECK(dg_jnum(l, "pairs") == 8);
            CHECK(fabs(dg_jnum(l, "max_rel_diff") -
                       loss_rows[i].p.loss_drift / (1 + loss_rows[i].p.loss_drift)) < 1e-9);
        }
        if (loss_rows[i].agree == 0) {
            CHECK_STR(dg_jstr(run, "drift[0]"), "loss.max_rel_diff");
        }
        cJSON_Delete(out.section);
    }
    /* Without pair_losses the RUN is as it was: no loss, verdict null. */
    planted_pairs p = {.cpu_sps = 100, .dev_sps = 200, .loss_steps = 8, .loss_drift = 0.05};
    plan.pair_losses = false;
    dg_step_out out = {0};
    CHECK(dg_method_compare(ctx, &pairing, &p, "cuda", &plan, NULL, &out) == DG_OK);
    CHECK(!dg_jpath(run_of(&out), "loss"));
    CHECK(cJSON_IsNull(dg_jpath(run_of(&out), "verdict")));
    CHECK(!strstr(out.summary, "loss"));
    cJSON_Delete(out.section);
}

static void test_both_runners(dg_ctx *ctx)
{
    dg_compare_opts co = {.train = DG_TRAIN_OPTS_INIT, .steps = 4, .repetitions = 3};
    co.train.backend = "opencl";
    co.train.model = "mlp";
    dg_fixture_compare *fc = NULL;
    CHECK(dg_fixture_compare_open(ctx, &co, &fc) == DG_OK);
    if (!fc)
        return;
    const dg_runner_i fixture = {
        .version = DG_RUNNER_VERSION, .name = "fixture", .pair = dg_fixture_compare_pair};
    for (size_t i = 0; i < sizeof verdict_rows / sizeof verdict_rows[0]; i++) {
        dg_compare_plan plan = {.batch = 64, .steps = 4, .min_pairs = 3, .max_pairs = 3};
        planted_pairs p = {.cpu_sps = 64e3 / verdict_rows[i].cpu_ms,
                           .dev_sps = 64e3 / verdict_rows[i].dev_ms};
        dg_step_out cmd = {0}, fx = {0};
        CHECK(dg_method_compare(ctx, &pairing, &p, "opencl", &plan, NULL, &cmd) == DG_OK);
        char env[64];
        snprintf(env, sizeof env, "%g:%g", verdict_rows[i].cpu_ms, verdict_rows[i].dev_ms);
        setenv("DEVGATE_PAIR_PLAN", env, 1);
        CHECK(dg_method_compare(ctx, &fixture, fc, "opencl", &plan, NULL, &fx) == DG_OK);
        unsetenv("DEVGATE_PAIR_PLAN");
        const char *want = verdict_rows[i].verdict;
        const char *vc = dg_jstr(run_of(&cmd), "speed.verdict");
        const char *vf = dg_jstr(run_of(&fx), "speed.verdict");
        CHECK_MSG(vc && strcmp(vc, want) == 0, "row %zu: the command's verdict %s, want %s", i,
                  vc ? vc : "(none)", want);
        CHECK_MSG(vf && strcmp(vf, want) == 0, "row %zu: the fixture's verdict %s, want %s", i,
                  vf ? vf : "(none)", want);
        double sc = dg_jnum(run_of(&cmd), "speedup"), sf = dg_jnum(run_of(&fx), "speedup");
        CHECK_MSG(fabs(sc - sf) < 1e-9 * sc, "row %zu: speedup %g against %g", i, sc, sf);
        /* The fixture's every step time in its repetitions, under the lock. */
        const cJSON *e = cJSON_GetArrayItem(dg_jpath(run_of(&fx), "repetitions.device"), 0);
        CHECK(cJSON_GetArraySize(dg_jpath(e, "ms")) == 4);
        CHECK_STR(dg_jstr(e, "lock.state"), "held");
        cJSON_Delete(cmd.section);
        cJSON_Delete(fx.section);
    }
    dg_fixture_compare_free(fc);
}

int main(void)
{
    char lock[] = "/tmp/devgate-test-method-XXXXXX";
    int fd = mkstemp(lock);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    setenv("DEVGATE_MEASURE_LOCK", lock, 1);
    dg_ctx *ctx = dg_ctx_new();
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const row *r = &rows[i];
        dg_sweep_plan plan = {
            .from = r->from, .to = DG_SWEEP_MAX_BATCH, .train_samples = NAN, .bisect = true};
        cJSON *root = cJSON_CreateObject();
        dg_status st = dg_method_sweep(ctx, &planted, (void *)&r->c, &plan, NULL, NULL, root);
        CHECK_MSG(st == DG_OK, "%s: %s", r->name, dg_status_name(st));
        const char *why = dg_jstr(root, "stopped.reason");
        CHECK_MSG(why && strcmp(why, r->stopped) == 0, "%s: stopped %s", r->name,
                  why ? why : "(none)");
        CHECK_MSG(dg_jnum(root, "stopped.at_batch") == r->at, "%s: at %g", r->name,
                  dg_jnum(root, "stopped.at_batch"));
        CHECK_MSG(batches_are(dg_jpath(root, "trials"), r->trials), "%s: trials", r->name);
        CHECK_MSG(batches_are(dg_jpath(root, "bisect"), r->bisect), "%s: bisect", r->name);
        CHECK_MSG(dg_jnum(root, "knee.batch") == r->knee, "%s: knee %g", r->name,
                  dg_jnum(root, "knee.batch"));
        CHECK_MSG(dg_jnum(root, "safe_batch.batch") == r->safe, "%s: safe %g", r->name,
                  dg_jnum(root, "safe_batch.batch"));
        /* Every trial under the measurement lock, its contention sampled. */
        const cJSON *t;
        int n = 0;
        for (int part = 0; part < 2; part++)
            cJSON_ArrayForEach(t, dg_jpath(root, part ? "bisect" : "trials"))
            {
                const char *lk = dg_jstr(t, "lock.state");
                CHECK_MSG(lk && strcmp(lk, "held") == 0, "%s b%g: lock %s", r->name,
                          dg_jnum(t, "batch"), lk ? lk : "(none)");
                CHECK_MSG(cJSON_IsObject(dg_jpath(t, "contention")), "%s b%g: no contention",
                          r->name, dg_jnum(t, "batch"));
                n++;
            }
        CHECK_MSG(n == calls, "%s: %d entries for %d trials", r->name, n, calls);
        CHECK(cJSON_IsObject(dg_jpath(root, "lock_waited")));
        calls = 0;
        cJSON_Delete(root);
    }
    /* A cancelled sweep stops before its next trial and says so. */
    volatile sig_atomic_t cancel = 1;
    dg_sweep_plan plan = {.from = 8, .to = 64, .train_samples = NAN, .bisect = true};
    cJSON *root = cJSON_CreateObject();
    CHECK(dg_method_sweep(ctx, &planted, (void *)&rows[0].c, &plan, &cancel, NULL, root) ==
          DG_ERR_INTERRUPTED);
    CHECK(calls == 0);
    const char *why = dg_jstr(root, "stopped.reason");
    CHECK(why && strcmp(why, "interrupted") == 0);
    cJSON_Delete(root);
    test_pairs(ctx);
    test_pair_losses(ctx);
    test_both_runners(ctx);
    dg_ctx_free(ctx);
    unlink(lock);
    CHECK_DONE();
}
