/* The method's contract (src/steps/runner.h), driver side: the one sweep
 * driver (dg_method_sweep) over a stand-in runner whose trials report
 * planted throughput curves, the same curves tests/cli/test_method_contract.sh
 * plants in the fixture's `__trial` children (DEVGATE_TRIAL_PLAN) and in the
 * command runner's stand-in program (tests/python/scripts/sweep_train.py):
 * where the doubling stops and why, the bisection's batches, the knee and the
 * safe batch; every trial measured under the lock with its contention. */
#include "check.h"

#include "core/json.h"
#include "steps/runner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
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
    dg_ctx_free(ctx);
    unlink(lock);
    CHECK_DONE();
}
