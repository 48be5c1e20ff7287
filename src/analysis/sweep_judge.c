/* The sweep's judgements (docs/measure.md "Sweep"): a trial's samples/s
 * interval (dg_sweep_rate_ci), the doubling stop policy the one sweep driver
 * (src/steps/method.c) feeds, and the conclusion over the trials (knee, safe
 * batch). Pure functions of the trials fed to them, so the unit tests drive
 * them with synthetic throughput sequences. */
#include "analysis/analysis.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KNEE_SHARE 0.05  /* knee: within 5% of the best throughput */
#define SAFE_MARGIN 0.05 /* safe batch: 5% under the first failure */

/* ---- a trial's samples/s interval ------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The 1-based rank j of the lower end of the distribution-free interval of
 * the median of n values, [x_(j), x_(n+1-j)], covering at least `level`:
 * the largest j with P(Binomial(n, 1/2) <= j - 1) <= (1 - level) / 2. 0 when
 * n is too small for any. The normal approximation past 1000 values. */
static size_t median_rank(size_t n, double level)
{
    double tail = (1.0 - level) / 2;
    if (n > 1000) {
        double j = floor((double)n / 2 - 1.959964 * sqrt((double)n) / 2);
        return j >= 1 ? (size_t)j : 0;
    }
    double lnn = lgamma((double)n + 1), cdf = 0;
    size_t j = 0;
    for (size_t i = 0; i < n / 2; i++) {
        cdf += exp(lnn - lgamma((double)i + 1) - lgamma((double)(n - i) + 1) - (double)n * M_LN2);
        if (cdf > tail)
            break;
        j = i + 1; /* P(B <= i) <= tail: rank i + 1 may be the lower end */
    }
    return j;
}

static dg_sweep_rate no_ci(double sps, const char *reason)
{
    return (dg_sweep_rate){.sps = sps, .lo = NAN, .hi = NAN, .valid = false, .reason = reason};
}

dg_sweep_rate dg_sweep_rate_ci(double sps, const double *ms, size_t n, double median, double iqr,
                               double nsteps)
{
    if (!isfinite(sps) || sps <= 0)
        return no_ci(NAN, "samples/s not reported");
    double a = NAN, b = NAN, mid = median;
    const char *method = NULL;
    if (ms && n < DG_SWEEP_CI_MIN_STEPS)
        return no_ci(sps, "fewer than 6 timed steps");
    if (ms) {
        double *v = dg_malloc(n * sizeof *v);
        size_t j = v ? median_rank(n, DG_SWEEP_CI_LEVEL) : 0;
        if (j) {
            memcpy(v, ms, n * sizeof *v);
            qsort(v, n, sizeof *v, cmp_double);
            a = v[j - 1];
            b = v[n - j];
            mid = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
            method = "order-statistics";
        }
        dg_free(v);
    }
    if (!method) {
        if (!isfinite(median) || median <= 0)
            return no_ci(sps, "step-time median not reported");
        if (!isfinite(nsteps) || nsteps < DG_SWEEP_CI_MIN_STEPS)
            return no_ci(sps, "fewer than 6 timed steps");
        if (!isfinite(iqr) || iqr < 0)
            return no_ci(sps, "step-time IQR not reported");
        double half = 1.58 * iqr / sqrt(nsteps);
        a = median - half;
        b = median + half;
        method = "notch";
    }
    if (!(isfinite(a) && isfinite(b) && a > 0 && a <= mid && mid <= b && mid > 0))
        return no_ci(sps, "the step-time interval reaches 0 ms");
    return (dg_sweep_rate){
        .sps = sps, .lo = sps * mid / b, .hi = sps * mid / a, .valid = true, .method = method};
}

cJSON *dg_sweep_rate_json(const dg_sweep_rate *r)
{
    cJSON *o = cJSON_CreateObject();
    if (r->valid) {
        cJSON_AddNumberToObject(o, "lo", r->lo);
        cJSON_AddNumberToObject(o, "hi", r->hi);
    } else {
        cJSON_AddNullToObject(o, "lo");
        cJSON_AddNullToObject(o, "hi");
    }
    cJSON_AddStringToObject(o, "unit", "samples/s");
    cJSON_AddBoolToObject(o, "valid", r->valid);
    cJSON_AddNumberToObject(o, "level", DG_SWEEP_CI_LEVEL);
    dg_json_add_str(o, "method", r->valid ? r->method : NULL);
    dg_json_add_str(o, "reason", r->valid ? NULL : r->reason);
    return o;
}

/* ---- the stopper ------------------------------------------------------------ */

void dg_sweep_stop_init(dg_sweep_stopper *s, int to, double max_trial_s, double train_samples)
{
    *s = (dg_sweep_stopper){.to = to,
                            .max_trial_s = max_trial_s,
                            .train_samples = train_samples,
                            .prev = no_ci(NAN, "no trial yet"),
                            .best = no_ci(NAN, "no trial yet")};
}

/* A fall of r below prev: with both intervals, counts only when r's lies
 * wholly below prev's; a lower point inside the overlap is ambiguous. */
static dg_sweep_verdict judge_fall(const dg_sweep_rate *r, const dg_sweep_rate *prev, bool *ci)
{
    *ci = false;
    if (!isfinite(r->sps) || !isfinite(prev->sps))
        return DG_SWEEP_UNJUDGED;
    *ci = r->valid && prev->valid;
    if (r->sps >= prev->sps)
        return DG_SWEEP_CLEAR;
    if (!*ci)
        return DG_SWEEP_COUNTS; /* today's rule: any fall */
    return r->hi < prev->lo ? DG_SWEEP_COUNTS : DG_SWEEP_AMBIGUOUS;
}

/* A flat doubling: r under best x (1 + gain); with r's interval, flat only
 * when it lies wholly under the threshold, a gain only when wholly over it. */
static dg_sweep_verdict judge_flat(const dg_sweep_rate *r, double thr, bool *ci)
{
    *ci = false;
    if (!isfinite(r->sps) || !isfinite(thr))
        return DG_SWEEP_UNJUDGED;
    if (!r->valid)
        return r->sps < thr ? DG_SWEEP_COUNTS : DG_SWEEP_CLEAR;
    *ci = true;
    return r->hi < thr ? DG_SWEEP_COUNTS : r->lo > thr ? DG_SWEEP_CLEAR : DG_SWEEP_AMBIGUOUS;
}

/* A running count after a verdict: up on one that counts, held on an
 * ambiguous one, back to 0 otherwise. */
static int run_after(int n, dg_sweep_verdict v)
{
    return v == DG_SWEEP_COUNTS ? n + 1 : v == DG_SWEEP_AMBIGUOUS ? n : 0;
}

const char *dg_sweep_stop_next(dg_sweep_stopper *s, int batch, const dg_sweep_rate *r,
                               double trial_s)
{
    dg_sweep_rate cur = *r;
    if (!isfinite(cur.sps))
        cur = no_ci(NAN, "samples/s not reported");
    dg_sweep_judged *j = &s->last;
    *j = (dg_sweep_judged){
        .batch = batch,
        .rate = cur,
        .prev_batch = s->prev_batch,
        .prev = s->prev,
        .best_batch = s->best_batch,
        .best = s->best,
        .threshold = isfinite(s->best.sps) ? s->best.sps * (1.0 + DG_SWEEP_PLATEAU_GAIN) : NAN};
    /* Two falls in a row: past the device's best, and not noise. A trial
     * whose rate was not reported breaks the run (and is no previous one). */
    j->fall = judge_fall(&cur, &s->prev, &j->fall_ci);
    s->falls = isfinite(cur.sps) ? run_after(s->falls, j->fall) : 0;
    s->prev = cur;
    s->prev_batch = batch;
    /* A small model on a large device never runs out of memory: doublings
     * that gain less than DG_SWEEP_PLATEAU_GAIN over the best so far, three
     * in a row, say the device is saturated. A rate not reported leaves the
     * run as it was. */
    j->flat = judge_flat(&cur, j->threshold, &j->flat_ci);
    if (isfinite(cur.sps)) {
        s->flat = run_after(s->flat, j->flat);
        if (!(cur.sps <= s->best.sps)) {
            s->best = cur;
            s->best_batch = batch;
        }
    }
    j->falls = s->falls;
    j->flat_run = s->flat;
    if (s->falls >= DG_SWEEP_FALLS)
        return "throughput-falling";
    if (s->flat >= DG_SWEEP_PLATEAU_RUN)
        return "throughput-plateau";
    long next = 2L * batch;
    if (next > s->to)
        return "limit";
    /* A batch larger than the data it trains on is not a training configuration. */
    if (isfinite(s->train_samples) && s->train_samples > 0 && (double)next > s->train_samples)
        return "train-set";
    /* The next size would take about twice as long. */
    if (s->max_trial_s > 0 && isfinite(trial_s) && trial_s > s->max_trial_s)
        return "time";
    return NULL;
}

/* ---- the evidence ----------------------------------------------------------- */

static cJSON *side_json(int batch, const dg_sweep_rate *r)
{
    if (!batch || !isfinite(r->sps))
        return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "batch", batch);
    cJSON_AddItemToObject(o, "samples_per_s", dg_json_metric(r->sps, true, "samples/s"));
    cJSON_AddItemToObject(o, "samples_per_s_ci", dg_sweep_rate_json(r));
    return o;
}

static const char *verdict_name(dg_sweep_verdict v, const char *counts, const char *clear)
{
    switch (v) {
    case DG_SWEEP_COUNTS: return counts;
    case DG_SWEEP_CLEAR: return clear;
    case DG_SWEEP_AMBIGUOUS: return "ambiguous";
    case DG_SWEEP_UNJUDGED: break;
    }
    return "not judged";
}

cJSON *dg_sweep_judged_json(const dg_sweep_judged *j)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "fall", verdict_name(j->fall, "fall", "no fall"));
    cJSON_AddBoolToObject(o, "fall_with_interval", j->fall_ci);
    cJSON_AddItemToObject(o, "previous", side_json(j->prev_batch, &j->prev));
    cJSON_AddNumberToObject(o, "falls", j->falls);
    cJSON_AddStringToObject(o, "flat", verdict_name(j->flat, "flat", "gain"));
    cJSON_AddBoolToObject(o, "flat_with_interval", j->flat_ci);
    cJSON_AddItemToObject(o, "best", side_json(j->best_batch, &j->best));
    cJSON_AddItemToObject(o, "plateau_threshold",
                          dg_json_metric(j->threshold, isfinite(j->threshold), "samples/s"));
    cJSON_AddNumberToObject(o, "flat_run", j->flat_run);
    return o;
}

cJSON *dg_sweep_stop_evidence(const dg_sweep_stopper *s, const char *why)
{
    bool by_rate =
        why && (strcmp(why, "throughput-falling") == 0 || strcmp(why, "throughput-plateau") == 0);
    return by_rate ? dg_sweep_judged_json(&s->last) : cJSON_CreateNull();
}

/* ---- the conclusion ---------------------------------------------------------- */

void dg_sweep_conclude(cJSON *root, const dg_sweep_point *pts, int n, int first_bad)
{
    double best = NAN;
    for (int i = 0; i < n; i++)
        if (pts[i].good && !isnan(pts[i].rate.sps) && !(pts[i].rate.sps <= best))
            best = pts[i].rate.sps;
    const dg_sweep_point *knee = NULL, *safe = NULL, *could = NULL;
    double cap = first_bad ? (1.0 - SAFE_MARGIN) * first_bad : INFINITY;
    double line = (1.0 - KNEE_SHARE) * best;
    int good_n = 0;
    for (int i = 0; i < n; i++) {
        const dg_sweep_point *t = &pts[i];
        if (!t->good)
            continue;
        good_n++;
        /* The knee is judged on the points: a wide interval at a small batch
         * (a loaded machine's skewed step times) must not pull the soak and
         * the profile down to it. How far down the noise would allow is
         * recorded beside it (could_be). */
        if (!isnan(t->rate.sps) && t->rate.sps >= line && (!knee || t->batch < knee->batch))
            knee = t;
        if (t->batch <= cap && (!safe || t->batch > safe->batch))
            safe = t;
    }
    for (int i = 0; knee && i < n; i++) {
        const dg_sweep_point *t = &pts[i];
        if (t->good && t->batch < knee->batch && t->rate.valid && t->rate.hi >= line &&
            (!could || t->batch < could->batch))
            could = t;
    }
    cJSON *kj = cJSON_AddObjectToObject(root, "knee");
    if (knee) {
        cJSON_AddNumberToObject(kj, "batch", knee->batch);
        cJSON_AddItemToObject(kj, "samples_per_s",
                              dg_json_metric(knee->rate.sps, true, "samples/s"));
        dg_sweep_rate r = knee->rate;
        if (!r.valid && !r.reason)
            r.reason = "not reported";
        cJSON_AddItemToObject(kj, "samples_per_s_ci", dg_sweep_rate_json(&r));
        if (could)
            cJSON_AddNumberToObject(kj, "could_be", could->batch);
        else
            cJSON_AddNullToObject(kj, "could_be");
    } else {
        cJSON_AddNullToObject(kj, "batch");
        cJSON_AddItemToObject(kj, "samples_per_s", dg_json_metric(0, false, "samples/s"));
        dg_sweep_rate r = {.lo = NAN, .hi = NAN, .reason = "no knee"};
        cJSON_AddItemToObject(kj, "samples_per_s_ci", dg_sweep_rate_json(&r));
        cJSON_AddNullToObject(kj, "could_be");
    }
    cJSON_AddItemToObject(kj, "best_samples_per_s",
                          dg_json_metric(best, !isnan(best), "samples/s"));
    cJSON_AddNumberToObject(kj, "within", KNEE_SHARE);
    cJSON *sj = cJSON_AddObjectToObject(root, "safe_batch");
    if (safe) {
        cJSON_AddNumberToObject(sj, "batch", safe->batch);
        cJSON_AddItemToObject(sj, "samples_per_s",
                              dg_json_metric(safe->rate.sps, !isnan(safe->rate.sps), "samples/s"));
    } else {
        cJSON_AddNullToObject(sj, "batch");
        cJSON_AddItemToObject(sj, "samples_per_s", dg_json_metric(0, false, "samples/s"));
    }
    cJSON_AddNumberToObject(sj, "margin", SAFE_MARGIN);
    if (first_bad)
        cJSON_AddNumberToObject(sj, "first_failure", first_bad);
    else
        cJSON_AddNullToObject(sj, "first_failure");
    dg_json_add_str(sj, "note",
                    !good_n      ? "no trial succeeded"
                    : !first_bad ? "no failure reached"
                    : !safe      ? "no good batch 5% under the first failure"
                                 : NULL);
    cJSON_AddNumberToObject(root, "good_trials", good_n);
}
