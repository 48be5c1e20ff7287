/* Internal entry points shared between the steps. */
#ifndef DG_STEPS_H
#define DG_STEPS_H

#include "analysis/analysis.h"
#include "backend/backend.h"
#include "core/core.h"
#include "core/json.h"
#include "steps/runner.h"

/* The device matrix-product check of one backend. */
struct dg_op_suite;
typedef struct dg_matmul_check {
    int m, n, k;
    uint64_t seed;
    int warm_reps;
    dg_math math;                  /* the backend's set_math mode for the product (fp32: none) */
    const struct dg_op_suite *ops; /* level 2: every op against float64 (NULL: not run) */
    int level;                     /* the gate's level: 2 adds the link, 3 the sustained load */
    double sustain_s, load;        /* levels 3-4: the load's seconds per backend and busy share */
} dg_matmul_check;

/* The gate's per-element tolerance over sum_p |a_ip| |b_pj| for a length-k
 * product in math mode m (docs/schema/gate.md derives it): 2 k eps32 for fp32; with
 * inputs rounded to a unit roundoff u first (tf32 2^-11, bf16 2^-8),
 * 2u + u^2 + 2 k eps32 (1 + u)^2. */
double dg_gate_tol_unit(int k, dg_math m);

/* The device backends in the order a route prefers them, NULL-ended: accept
 * picks the first that passed its gate, and dg_gate_opts.first_device checks
 * them in this order. */
extern const char *const dg_device_preference[];
/* Describes backend `name` (built, available, reason, versions, devices) and,
 * when check is non-NULL and it is available, runs the matrix product on it.
 * iface overrides the registry's interface when non-NULL (tests use this to
 * gate a deliberately broken backend). NULL only when out of memory. */
cJSON *dg_gate_backend(dg_ctx *ctx, const char *name, const dg_backend_iface *iface,
                       const dg_matmul_check *check);
/* The level object of a gate or accept record (docs/schema/gate.md): level,
 * what, budget (s; NAN: none stated), wall (s; NAN: not reported),
 * lock_waited (every "lock" object's wait in rec, may be NULL), overrun
 * (wall less the lock's waits over the budget). NULL only when out of
 * memory; {} for a bad level. */
cJSON *dg_level_json(int level, double budget_s, double wall_s, const cJSON *rec);
/* accept's level from --quick and --level (0: not given): quick is level 1,
 * the default 2; *quick becomes level == 1. DG_ERR_USAGE for a level out of
 * range or --quick with another level. */
dg_status dg_level_resolve(dg_ctx *ctx, bool *quick, int *level);
/* The loader wait of a train record's timed steps and the step it is a share
 * of, over the same steps (docs/schema/measure.md "profile"): *wait_ms the
 * mean wait a step (data.wait.per_step), *share the total wait over the
 * timed wall (data.wait.share_of_step), *mean_ms the timed wall a step
 * (throughput.step_ms); each NAN when not reported. */
void dg_profile_data_wait(const cJSON *rec, double *wait_ms, double *share, double *mean_ms);

/* ---- the fixture's sweep trials (sweep.c), the fixture runner's `trial` ---- */

typedef struct dg_fixture_sweep dg_fixture_sweep;
/* Checks the sweep's options, settles the memory budget, writes the sweep
 * record's head and spec into root and the driver's plan; *out the prepared
 * trials (dg_fixture_sweep_free). The status and message when it cannot. */
dg_status dg_fixture_sweep_open(dg_ctx *ctx, const dg_sweep_opts *opts, cJSON *root,
                                dg_sweep_plan *plan, dg_fixture_sweep **out);
/* One trial at batch: a `devgate __trial` child (its spec on stdin, its
 * record on fd 3) killed with its group on the timeout or the cancel flag;
 * fs a dg_fixture_sweep. DG_ERR_NOMEM only when out of memory. */
dg_status dg_fixture_sweep_trial(void *fs, int batch, dg_trial_result *out);
/* How a `__trial` child ended, as the process runner saw it. */
typedef struct dg_trial_child {
    bool started;       /* false: it could not start (err_line says why) */
    bool timed_out;     /* its group was killed at the deadline */
    bool interrupted;   /* the caller's cancel flag ended it */
    int exit_code;      /* -1 when a signal ended it */
    int sig;            /* the signal that ended it, 0 if none */
    char err_line[256]; /* its first stderr line, cleaned */
    double wall_s;
} dg_trial_child;
/* The trial at batch read from its child's end and the result pipe's bytes
 * (len at out, untrusted: the first line should be the child's record): how
 * it ended and why, its measurements after warmup steps, swapped when its
 * swap grew past swap_limit bytes; t->extra new (its "signal"). */
void dg_fixture_trial_read(const dg_trial_child *c, const char *out, size_t len, int batch,
                           int warmup, double swap_limit, double timeout_s, dg_trial_result *t);
/* Frees what dg_fixture_sweep_open made; accepts NULL. */
void dg_fixture_sweep_free(dg_fixture_sweep *s);
/* ---- the fixture's comparison (compare.c), the fixture runner's `pair` ---- */

/* A comparison prepared once and measured a batch at a time: the numerics
 * pair (cpu, the device and the float64 reference on the same weights and
 * batches; the warm-up, not timed), then the timed sides through the pair
 * driver (dg_method_compare), then the fixture's part added to the section. */
typedef struct dg_fixture_compare dg_fixture_compare;
/* Checks the options (device, steps, repetitions at most
 * DG_COMPARE_MAX_PAIRS, tolerances, rates, model) and makes a private
 * temporary folder; *out (dg_fixture_compare_free). The status and message
 * when it cannot. */
dg_status dg_fixture_compare_open(dg_ctx *ctx, const dg_compare_opts *opts,
                                  dg_fixture_compare **out);
/* The numerics pair at batch, kept for the batch's RUN, and the driver's
 * plan (the options' repetitions, one warm-up pair). When it fails,
 * out->section holds the failed comparison and out->error the message; its
 * status is returned. */
dg_status dg_fixture_compare_numerics(dg_fixture_compare *fc, int batch, dg_compare_plan *plan,
                                      dg_step_out *out);
/* runner.h `pair`: one timed training run at batch on device (fc a
 * dg_fixture_compare): its median host step after warm-up, samples/s, the
 * device's busy share and every step time. */
dg_status dg_fixture_compare_pair(void *fc, int batch, const char *device, dg_pair_side *out);
/* runner.h `compare_done`: each RUN's numerics and FLOP rates, the section's
 * fixture members (spec, model, device, thresholds, within_tolerance) and
 * the numerics verdict on the summary. */
void dg_fixture_compare_done(void *fc, dg_step_out *out);
/* Frees what dg_fixture_compare_open made; accepts NULL. */
void dg_fixture_compare_free(dg_fixture_compare *fc);
#endif
