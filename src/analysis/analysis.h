/* What judges measurements (docs/measure.md): a sweep trial's samples/s
 * interval, the doubling stop policy, the sweep's conclusion (knee, safe
 * batch) and the soak's analysis. Below both steps/ (the method) and
 * supervise/ (devgate run), which call it; it calls neither. */
#ifndef DG_ANALYSIS_H
#define DG_ANALYSIS_H

#include "core/core.h"
#include "core/json.h"

/* ---- soak (soak_judge.c) ---------------------------------------------------- */

/* Adds the soak analysis (docs/measure.md "Soak") to the section s:
 * epochs_recorded, baseline, growth, last, staircase and step_trend, from
 * epochs (the soak record's epoch entries: epoch, allocated, reserved,
 * driver_used, rss as METRICs, validation as a bool) and step_stats (a
 * dg_stats_json object, or NULL when steps were not timed). */
void dg_soak_analyse(cJSON *s, const cJSON *epochs, const cJSON *step_stats);
/* The leak screen of a short soak (docs/measure.md "Soak"): adds
 * s.step_growth from memory read after each of n steps in order (alloc: the
 * device's live bytes, fp: the process footprint; NAN where not read): per
 * source, a Theil-Sen line through the readings from step `skip` on (the
 * start-up left out) with Sen's 95% interval of its slope, and the growth an
 * epoch of steps_per_epoch steps adds over the line's start, in percent. A
 * source with fewer than 8 readings has no figure (valid false). */
void dg_soak_step_growth(cJSON *s, const double *alloc, const double *fp, size_t n, size_t skip,
                         double steps_per_epoch);

/* ---- sweep (sweep_judge.c) -------------------------------------------------- */

/* A trial's samples/s with its interval (docs/schema/measure.md TRIAL
 * "samples_per_s_ci"). */
typedef struct dg_sweep_rate {
    double sps;         /* samples/s, NAN when not reported */
    double lo, hi;      /* the interval, samples/s; NAN unless valid */
    bool valid;         /* lo <= sps <= hi, all finite */
    const char *method; /* "order-statistics" | "notch" | NULL when not valid */
    const char *reason; /* why not valid; NULL when valid */
} dg_sweep_rate;

/* One trial as the sweep's conclusion needs it. */
typedef struct dg_sweep_point {
    int batch;
    bool good;          /* ended ok and did not swap past the limit */
    dg_sweep_rate rate; /* samples/s (rate.sps, NAN when not reported) with its interval */
} dg_sweep_point;

/* Adds "knee", "safe_batch" and "good_trials" (docs/schema/measure.md
 * "sweep") to root from the n trials; first_bad is the smallest failing
 * batch known (0: none). The knee is the smallest good batch whose
 * samples/s reaches within 5% of the best; knee.could_be the smallest good
 * batch below it whose interval's upper end does. */
void dg_sweep_conclude(cJSON *root, const dg_sweep_point *pts, int n, int first_bad);

/* The doubling stop policy of both batch sweeps (the fixture's and accept --
 * CMD's; docs/measure.md "Sweep"): fed each good trial in batch order, it
 * names the reason to stop before the next doubling, or NULL to go on. With
 * each trial's samples/s interval it stops only on what the noise cannot
 * explain: a fall is a trial whose interval lies wholly below the previous
 * trial's, a flat doubling one whose interval lies wholly below the best so
 * far x (1 + DG_SWEEP_PLATEAU_GAIN), a gain one whose interval lies wholly
 * above it; a step between (intervals overlap) is "ambiguous" and neither
 * counts towards the stop nor breaks the run. Without an interval on either
 * side of a comparison the points are compared as they are. */
#define DG_SWEEP_FALLS 2           /* throughput-falling: this many falls in a row */
#define DG_SWEEP_PLATEAU_GAIN 0.10 /* a doubling must add 10% over the best to go on */
#define DG_SWEEP_PLATEAU_RUN 3     /* throughput-plateau: this many flat doublings in a row */
#define DG_SWEEP_CI_LEVEL 0.95     /* the trials' samples/s intervals */
#define DG_SWEEP_CI_MIN_STEPS 6    /* fewer timed steps give no 95% interval of the median */

/* The interval of a trial's rate sps (samples/s) from its step times: with
 * the n per-step times ms (after the warm-up; NULL when not kept) the 95%
 * distribution-free interval of their median from order statistics
 * (binomial ranks), else from median and iqr over nsteps timed steps the
 * notch rule median +- 1.58 iqr / sqrt(nsteps); the step-time interval
 * [a, b] becomes sps x median / b .. sps x median / a (the rate's relative
 * uncertainty is the median step time's). valid false with the reason when
 * neither is possible (sps or median not reported, fewer than
 * DG_SWEEP_CI_MIN_STEPS steps, no iqr). */
dg_sweep_rate dg_sweep_rate_ci(double sps, const double *ms, size_t n, double median, double iqr,
                               double nsteps);
/* The TRIAL's "samples_per_s_ci": {lo, hi: number | null, unit: "samples/s",
 * valid, level, method: str | null, reason: str | null}. */
cJSON *dg_sweep_rate_json(const dg_sweep_rate *r);

/* How one comparison of the stopper came out. */
typedef enum dg_sweep_verdict {
    DG_SWEEP_UNJUDGED,  /* nothing to compare with (first trial, rate not reported) */
    DG_SWEEP_COUNTS,    /* a fall / a flat doubling: counts towards the stop */
    DG_SWEEP_CLEAR,     /* no fall / a gain: the run starts over */
    DG_SWEEP_AMBIGUOUS, /* the intervals overlap the threshold: neither */
} dg_sweep_verdict;

/* The evidence of one trial's judgement: what was compared and how it came out. */
typedef struct dg_sweep_judged {
    int batch;
    dg_sweep_rate rate;    /* this trial */
    dg_sweep_verdict fall; /* against prev */
    bool fall_ci;          /* judged with both intervals */
    int prev_batch;        /* 0: none */
    dg_sweep_rate prev;    /* the previous good trial */
    dg_sweep_verdict flat; /* against best x (1 + gain) */
    bool flat_ci;          /* judged with this trial's interval */
    int best_batch;        /* 0: none */
    dg_sweep_rate best;    /* the best trial before this one */
    double threshold;      /* best x (1 + DG_SWEEP_PLATEAU_GAIN), NAN when none */
    int falls, flat_run;   /* the running counts after this trial */
} dg_sweep_judged;

typedef struct dg_sweep_stopper {
    int to;                   /* the largest batch asked for */
    double max_trial_s;       /* "time": a trial longer than this ends the doubling; <= 0 never */
    double train_samples;     /* "train-set": no batch above it; NAN or <= 0 when unknown */
    int falls, flat;          /* running counts */
    dg_sweep_rate prev, best; /* the last and the best trial (sps NAN before any) */
    int prev_batch, best_batch;
    dg_sweep_judged last; /* the judgement of the last trial fed */
} dg_sweep_stopper;

/* Starts a policy for batches up to `to` (see the fields for the others). */
void dg_sweep_stop_init(dg_sweep_stopper *s, int to, double max_trial_s, double train_samples);

/* Feeds the good trial at batch (its rate r: r->sps NAN when not reported,
 * r->valid false when it has no interval; trial_s, the time the "time" stop
 * compares); returns "throughput-falling", "throughput-plateau", "limit" (2 x
 * batch > to), "train-set" (2 x batch > the training set) or "time", or NULL
 * when the sweep doubles on. s->last holds the judgement. A pure function of
 * the trials fed. */
const char *dg_sweep_stop_next(dg_sweep_stopper *s, int batch, const dg_sweep_rate *r,
                               double trial_s);
/* The TRIAL's "stop_check" from a judgement (docs/schema/measure.md). */
cJSON *dg_sweep_judged_json(const dg_sweep_judged *j);
/* The sweep's "stop_evidence" for the stop reason why: the last judgement
 * when the throughput stopped the doubling, else null. */
cJSON *dg_sweep_stop_evidence(const dg_sweep_stopper *s, const char *why);
#endif
