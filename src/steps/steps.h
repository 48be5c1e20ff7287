/* Internal entry points shared between the steps. */
#ifndef DG_STEPS_H
#define DG_STEPS_H

#include "backend/backend.h"
#include "core/core.h"
#include "core/json.h"

/* The device matrix-product check of one backend. */
typedef struct dg_matmul_check {
    int m, n, k;
    uint64_t seed;
    int warm_reps;
} dg_matmul_check;

/* Describes backend `name` (built, available, reason, versions, devices) and,
 * when check is non-NULL and it is available, runs the matrix product on it.
 * iface overrides the registry's interface when non-NULL (tests use this to
 * gate a deliberately broken backend). NULL only when out of memory. */
cJSON *dg_gate_backend(dg_ctx *ctx, const char *name, const dg_backend_iface *iface,
                       const dg_matmul_check *check);
/* ---- analyses shared with `devgate run` (src/supervise/run.c), which builds
 * the same sections from a supervised program's events ---------------------- */

/* Adds the soak analysis (docs/measure.md "Soak") to the section s:
 * epochs_recorded, baseline, growth, last, staircase and step_trend, from
 * epochs (the soak record's epoch entries: epoch, allocated, reserved,
 * driver_used, rss as METRICs, validation as a bool) and step_stats (a
 * dg_stats_json object, or NULL when steps were not timed). */
void dg_soak_analyse(cJSON *s, const cJSON *epochs, const cJSON *step_stats);

/* The loader wait of a train record's timed steps and the step it is a share
 * of, over the same steps (docs/schema/measure.md "profile"): *wait_ms the
 * mean wait a step (data.wait.per_step), *share the total wait over the
 * timed wall (data.wait.share_of_step), *mean_ms the timed wall a step
 * (throughput.step_ms); each NAN when not reported. */
void dg_profile_data_wait(const cJSON *rec, double *wait_ms, double *share, double *mean_ms);

/* One trial as the sweep's conclusion needs it. */
typedef struct dg_sweep_point {
    int batch;
    bool good;  /* ended ok and did not swap past the limit */
    double sps; /* samples/s, NAN when not reported */
} dg_sweep_point;

/* Adds "knee", "safe_batch" and "good_trials" (docs/schema/measure.md
 * "sweep") to root from the n trials; first_bad is the smallest failing
 * batch known (0: none). */
void dg_sweep_conclude(cJSON *root, const dg_sweep_point *pts, int n, int first_bad);

/* An accept record's opening fields (v, kind, run_id, timestamp, host, label). */
void dg_accept_rec_head(cJSON *rec, const char *label);
/* Closes an accept record (steps, state, supervise, bucket), prints it into
 * *json, frees rec, and maps the run's status st to accept's return status. */
dg_status dg_accept_rec_finish(dg_ctx *ctx, cJSON *rec, cJSON *steps, dg_status st, char **json);

/* The doubling stop policy of both batch sweeps (the fixture's and accept --
 * CMD's; docs/measure.md "Sweep"): fed each good trial in batch order, it
 * names the reason to stop before the next doubling, or NULL to go on. */
#define DG_SWEEP_FALLS 2           /* throughput-falling: this many falls in a row */
#define DG_SWEEP_PLATEAU_GAIN 0.10 /* a doubling must add 10% over the best to go on */
#define DG_SWEEP_PLATEAU_RUN 3     /* throughput-plateau: this many flat doublings in a row */
typedef struct dg_sweep_stopper {
    int to;               /* the largest batch asked for */
    double max_trial_s;   /* "time": a trial longer than this ends the doubling; <= 0 never */
    double train_samples; /* "train-set": no batch above it; NAN or <= 0 when unknown */
    int falls, flat;      /* running counts */
    double prev, best;    /* samples/s of the last and the best trial, NAN before any */
} dg_sweep_stopper;

/* Starts a policy for batches up to `to` (see the fields for the others). */
void dg_sweep_stop_init(dg_sweep_stopper *s, int to, double max_trial_s, double train_samples);

/* Feeds the good trial at batch (samples/s sps, NAN when not reported, and
 * trial_s, the time the "time" stop compares); returns "throughput-falling",
 * "throughput-plateau", "limit" (2 x batch > to), "train-set" (2 x batch >
 * the training set) or "time", or NULL when the sweep doubles on. */
const char *dg_sweep_stop_next(dg_sweep_stopper *s, int batch, double sps, double trial_s);
#endif
