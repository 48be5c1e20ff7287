/* The method, once (docs/ARCHITECTURE.md "Data flow"): one driver
 * (src/steps/method.c) over a runner, a source of measurements with typed
 * results. The fixture runner (accept.c, its sweep trials `__trial` children
 * from sweep.c) and the command runner (accept_cmd.c, child runs of the
 * user's command through dg_run_supervise) implement it; neither holds a loop
 * over steps or batches. The driver owns the step order, cancellation, the
 * record's head and finish, the sweep's doubling, stop policy and bisection,
 * and the measurement lock and contention window around every measured trial
 * and epochs run. */
#ifndef DG_RUNNER_H
#define DG_RUNNER_H

#include "analysis/analysis.h"
#include "backend/backend.h"
#include "core/core.h"
#include "core/json.h"
#include "core/progress.h"
#include "measure/measure.h"

#include <signal.h>

#define DG_RUNNER_VERSION 1
#define DG_SWEEP_MAX_BATCH (1 << 20) /* the CLI's --batch limit */

/* How a sweep trial ended. */
typedef enum dg_trial_end {
    DG_TRIAL_OK,
    DG_TRIAL_OOM,        /* the device's or the framework's out of memory */
    DG_TRIAL_BUDGET,     /* out of memory against the memory budget */
    DG_TRIAL_OOM_KILLER, /* the kernel's OOM killer (or a SIGKILL that likely was) */
    DG_TRIAL_SIGNAL,
    DG_TRIAL_TIMEOUT,
    DG_TRIAL_FAILED,
    DG_TRIAL_INTERRUPTED,
} dg_trial_end;

/* One sweep trial at a batch, as a runner measured it. Every metric carries
 * its validity; the driver writes the TRIAL entry (docs/schema/measure.md)
 * from these fields once, for either runner. */
typedef struct dg_trial_result {
    dg_trial_end end;
    char reason[640];         /* why, when not ok ("" otherwise) */
    bool swapped;             /* swap grew past the limit: not a good trial */
    dg_sweep_rate rate;       /* samples/s with its interval */
    dg_metric step_median;    /* ms */
    dg_metric step_iqr;       /* ms */
    double steps;             /* timed steps the median is over (0: none) */
    const char *step_source;  /* "steps" | "throughput" | "none" */
    dg_metric allocated_peak; /* bytes, the device allocator's */
    dg_metric reserved_peak;  /* bytes */
    dg_metric rss_peak;       /* bytes */
    dg_metric swap_growth;    /* bytes */
    dg_metric psi_peak;       /* percent */
    double samples;           /* samples the timed steps delivered; NAN unknown */
    double per_step;          /* the most samples a step held: under the batch asked for when
                                 the data set is smaller; NAN unknown */
    double train_samples;     /* the training set's size as the trial saw it; NAN unknown */
    double loop_s;            /* the timed steps' own time (s; the "time" stop); NAN unknown */
    dg_metric wall_s;         /* s, start to end of the trial */
    cJSON *extra;             /* the runner's own members of the entry (NULL: none); moved in */
} dg_trial_result;

/* The word a TRIAL's "ended" holds for e. */
const char *dg_trial_end_name(dg_trial_end e);
/* The TRIAL entry (docs/schema/measure.md) of a trial at batch, written
 * once for either runner; t->extra's members moved in (t->extra freed). */
cJSON *dg_trial_entry(int batch, dg_trial_result *t);

/* What the driver's sweep asks of the runner: doubling from `from` to `to`,
 * the "time" stop, the training set ("train-set" stop; NAN unknown: a
 * trial's train_samples then sets it), and whether to bisect between the
 * last good and the first failing batch. */
typedef struct dg_sweep_plan {
    int from, to;
    double max_trial_s;   /* <= 0: no time stop */
    double train_samples; /* NAN: unknown */
    bool bisect;
} dg_sweep_plan;

/* What the steps so far decided; the runners size their steps from it. */
typedef struct dg_method_state {
    const char *device;         /* the device judged ("cpu" when the gate passed none) */
    int batch;                  /* the batch soak, compare and profile use */
    bool batch_given;           /* an option, not the sweep's knee */
    double step_s;              /* the knee's step time (s), NAN unknown */
    dg_progress_sink *progress; /* where a step reports its trials (never NULL in a step) */
} dg_method_state;

/* The soak's epochs at a batch, as a runner measured them in one run. The
 * driver judges the run from `end` (the same words as a trial's) and writes
 * the section's lock and contention and the step's summary. */
typedef struct dg_epochs_result {
    dg_trial_end end;
    char reason[512]; /* why, when not ok ("" otherwise) */
    int epochs;       /* asked for */
    cJSON *soak;      /* the soak section: the epochs and dg_soak_analyse's
                         members (moved in; NULL: the run reported none) */
    cJSON *hoist;     /* members for the record's top level where absent
                         (bucket, framework; moved in, may be NULL) */
} dg_epochs_result;

/* What the driver's comparison against the cpu asks of the runner. */
typedef struct dg_compare_plan {
    int batch;
    int steps;                /* optimizer steps a side (the spec's) */
    int min_pairs, max_pairs; /* max_pairs 0: the runner measured the step whole */
    double ci_width;          /* past min_pairs, another pair while the speedup's 95%
                                 interval is wider than this share of the speedup */
    int warmup_pairs;         /* pairs the runner ran before the timed ones (not timed) */
    const char *busy_source;  /* how a side's busy fraction is measured (NULL: the probe's
                                 data wait) */
    double budget_s;          /* > 0: and while the pairs so far leave time for one more
                                 within this many seconds of the step */
    bool pair_losses;         /* the sides report their losses (dg_pair_side.losses): the
                                 driver pairs the cpu's with the device's (the RUN's loss) */
} dg_compare_plan;
#define DG_COMPARE_MAX_PAIRS 50 /* compare --repetitions's limit */

/* One side of a cpu/device pair, as a runner measured it. */
typedef struct dg_pair_side {
    dg_trial_end end;
    char reason[512];  /* why, when not ok */
    dg_metric sps;     /* samples/s over the run's loop (data wait included) */
    dg_metric step_ms; /* the median step */
    dg_metric busy;    /* fraction of the step the device was busy */
    cJSON *extra;      /* the runner's own members of the side's repetition entry (the
                          fixture's every step time, ms, and warmup); moved in, NULL: none */
    cJSON *losses;     /* the losses the run reported, [[epoch, step, loss], ...] (a run
                          record's supervise.losses); moved in, NULL: none */
    bool unseeded;     /* the run's record says torch was not seeded */
} dg_pair_side;

/* What one step gave the method: its section for the record (moved in; NULL:
 * null), members to add to the record's top level where absent (bucket,
 * framework; moved in, may be NULL), its one-line summary, and how it went
 * (skipped with the summary as the reason; error "" takes the ctx message). */
typedef struct dg_step_out {
    cJSON *section;
    cJSON *hoist;
    bool skipped;
    char summary[256];
    char error[512];
} dg_step_out;

/* A source of measurements (version field first; every member required but
 * `pair` and `compare_done`). */
typedef struct dg_runner_i {
    int version; /* DG_RUNNER_VERSION */
    const char *name;
    /* The interpreter the environment step inspects (NULL: none). */
    const char *(*python)(void *ctx);
    /* Gates the devices and picks the one judged (*device, static or owned by ctx). */
    dg_status (*gate)(void *ctx, dg_step_out *out, const char **device);
    /* Prepares the sweep: writes the sweep record's head and spec into root
     * and fills the plan; out->skipped (with the reason) when there is none. */
    dg_status (*sweep_plan)(void *ctx, const dg_method_state *s, cJSON *root, dg_sweep_plan *plan,
                            dg_step_out *out);
    /* One trial at batch, in its own process. DG_ERR_NOMEM only when out of
     * memory; everything the trial did is in out. */
    dg_status (*trial)(void *ctx, int batch, dg_trial_result *out);
    /* Ends what sweep_plan prepared. */
    void (*sweep_done)(void *ctx);
    /* The soak: epochs at s->batch, in one run; everything it did is in out
     * (DG_ERR_NOMEM only when out of memory). */
    dg_status (*epochs)(void *ctx, const dg_method_state *s, dg_epochs_result *out);
    /* Plans the comparison against the cpu: the batch and how many pairs;
     * out->skipped (with the reason) when there is none. Whatever the runner
     * measures before the pairs is its own (the fixture's numerics pair
     * against the float64 reference, the warm-up); when that fails it fills
     * out->section with the failed comparison and leaves plan->max_pairs 0. */
    dg_status (*compare_plan)(void *ctx, const dg_method_state *s, dg_compare_plan *plan,
                              dg_step_out *out);
    /* One side of a cpu/device pair: a run at batch on device ("cpu" or
     * s->device); the driver interleaves the sides. Optional (NULL) when
     * compare_plan never asks for pairs. DG_ERR_NOMEM only when out of
     * memory; everything the run did is in out. */
    dg_status (*pair)(void *ctx, int batch, const char *device, dg_pair_side *out);
    /* Adds the runner's own part to the comparison the driver made of the
     * pairs (out->section, its summary): the fixture's numerics, FLOP rates
     * and section members. Optional (NULL: the RUN's verdict stays null,
     * with a note that numerics are not compared). */
    void (*compare_done)(void *ctx, dg_step_out *out);
    /* One profile window at s->batch. */
    dg_status (*profile)(void *ctx, const dg_method_state *s, dg_step_out *out);
    /* The record's spec section: the runner's own members (the method adds
     * backend, backend_chosen, baseline, quick, batch, batch_source, sweep_to). */
    void (*spec)(void *ctx, const dg_method_state *s, cJSON *spec);
    /* What the tier plans for step (1 gate .. 5 profile; the sweep: one
     * trial) in seconds, from what is settled in s and what the runner
     * measured so far; NAN unknown, 0 when the step will be skipped. Only
     * the progress reports' ETA reads it. */
    double (*plan_s)(void *ctx, const dg_method_state *s, int step);
} dg_runner_i;

/* How the method is run. */
typedef struct dg_method_opts {
    const char *label;
    const volatile sig_atomic_t *cancel;
    dg_progress_fn progress; /* may be NULL */
    void *progress_user;
    int batch;                 /* > 0: given as an option */
    bool quick;                /* the quick tier */
    int level;                 /* the gate's level (DG_LEVEL_MIN..DG_LEVEL_MAX) */
    double budget_s;           /* the level's budget for this runner (NAN: none stated) */
    int sweep_to;              /* the sweep's limit asked for (0: none) */
    const char *backend_asked; /* the device named by an option (NULL: chosen by the gate) */
    const char *backend_none;  /* the spec's backend when the gate chose none */
} dg_method_opts;

/* The method on runner r (env -> gate -> sweep -> soak -> compare -> profile)
 * into one accept record (docs/schema/report.md), *json (caller frees with
 * dg_string_free). DG_ERR_INTERRUPTED when cancelled (the record still
 * comes back), DG_ERR_UNAVAILABLE when the gate gave no device. */
dg_status dg_method_run(dg_ctx *ctx, const dg_runner_i *r, void *rctx, const dg_method_opts *o,
                        char **json);

/* The one sweep driver: doubling from plan->from, each good trial fed to the
 * stop policy (dg_sweep_stopper), bisection between the last good and the
 * first failing batch, the conclusion (knee, safe batch). Each trial runs
 * under the measurement lock with a contention window, recorded in its
 * entry. Fills root's trials, stopped, stop_evidence, bisect,
 * bisect_resolution, lock_waited, knee, safe_batch, good_trials. Each
 * trial's start and end go to progress (may be NULL). DG_OK,
 * DG_ERR_INTERRUPTED (root holds what ran) or DG_ERR_NOMEM. */
dg_status dg_method_sweep(dg_ctx *ctx, const dg_runner_i *r, void *rctx, const dg_sweep_plan *plan,
                          const volatile sig_atomic_t *cancel, dg_progress_sink *progress,
                          cJSON *root);
/* The trials a sweep over plan is expected to run: its doublings, at most 6
 * when the plan has no limit but memory and time. */
int dg_sweep_plan_trials(const dg_sweep_plan *plan);

/* The comparison step's section (docs/schema/report.md "compare", source
 * r->name) from plan->batch: pairs of runs of r->pair, cpu then s->device,
 * each side under the measurement lock with its contention window (the
 * RUN's repetitions.cpu[] / device[]), at least plan->min_pairs, then more
 * while the speedup's interval is wider than plan->ci_width and the time
 * budget (plan->budget_s) leaves room for one more, at most plan->max_pairs
 * (the section's spec.pairs_ended says which ended them). With
 * plan->pair_losses the RUN's loss holds the agreement of the first cpu and
 * device repetitions' losses (analysis/loss.h), its verdict "within
 * tolerance" or "drift" (null when not judged). out gets the section, the
 * summary and the error.
 * DG_OK, DG_ERR_CHECK (a side failed), DG_ERR_INTERRUPTED or DG_ERR_NOMEM. */
dg_status dg_method_compare(dg_ctx *ctx, const dg_runner_i *r, void *rctx, const char *device,
                            const dg_compare_plan *plan, const volatile sig_atomic_t *cancel,
                            dg_step_out *out);
/* A compare RUN (docs/schema/measure.md "compare") from n interleaved pairs
 * of sides (cpu[i], dev[i]) at plan->batch on device: the medians, the
 * speedup median(device) / median(cpu) samples/s with its seeded bootstrap
 * interval and its speed verdict (dg_speed_judge: the words accept and
 * compare RUN_A RUN_B use), the time per sample saved, the device's busy
 * fraction with its interval, the Mann-Whitney test of the two sides and the
 * repetitions (entries: NULL, or the 2 n side entries in order, moved in). */
cJSON *dg_method_pairs_run(const dg_compare_plan *plan, const char *device, const dg_pair_side *cpu,
                           const dg_pair_side *dev, int n, cJSON *const *entries);

#endif
