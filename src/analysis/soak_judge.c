/* The soak's analysis (docs/measure.md "Soak"): from the per-epoch
 * watermarks and step times, the baseline (end of epoch 1), each source's
 * growth at the last epoch, whether growth steps line up with validation
 * epochs, the step-time trend and the 95% bootstrap intervals of growth and
 * slowdown. The fixture's soak, the command's and devgate run's records all
 * get it from here. */
#include "analysis/analysis.h"
#include "measure/measure.h"

#include <math.h>
#include <stdlib.h>

/* The sources compared, as named in the epoch entries and in "growth".
 * shared: the figure counts other processes too (the whole machine on cpu),
 * so it is reported but does not decide the staircase reading. */
static const struct {
    const char *entry, *name;
    bool shared;
} sources[] = {
    {"reserved", "allocator_reserved", false},
    {"allocated", "allocator_allocated", false},
    {"driver_used", "driver", true},
    {"rss", "footprint", false},
};
enum { NSRC = sizeof sources / sizeof sources[0] };

/* A metric's value, NAN when not valid or absent. */
static double metric_of(const cJSON *obj, const char *key)
{
    const cJSON *m = cJSON_GetObjectItem(obj, key);
    const cJSON *v = cJSON_GetObjectItem(m, "value");
    return cJSON_IsTrue(cJSON_GetObjectItem(m, "valid")) && cJSON_IsNumber(v) ? v->valuedouble
                                                                              : NAN;
}

/* Epochs k >= 2 where source src jumped by more than max(5% of baseline,
 * 1 MiB) over epoch k-1, and whether that pattern is a staircase lined up
 * with validation epochs: true when every jump is at a validation epoch and
 * jumps are at most half the transitions (a ramp is not a staircase); null
 * without jumps. */
static cJSON *staircase_of(const cJSON *epochs, const char *entry, double base, int *aligned)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *steps = cJSON_AddArrayToObject(o, "step_epochs");
    int n = cJSON_GetArraySize(epochs), jumps = 0, at_val = 0;
    double thr = fmax(0.05 * (isfinite(base) ? base : 0), 1048576.0);
    for (int k = 1; k < n; k++) {
        const cJSON *prev = cJSON_GetArrayItem(epochs, k - 1), *cur = cJSON_GetArrayItem(epochs, k);
        double a = metric_of(prev, entry), b = metric_of(cur, entry);
        if (!isfinite(a) || !isfinite(b) || b - a <= thr)
            continue;
        jumps++;
        cJSON_AddItemToArray(
            steps, cJSON_CreateNumber(cJSON_GetNumberValue(cJSON_GetObjectItem(cur, "epoch"))));
        if (cJSON_IsTrue(cJSON_GetObjectItem(cur, "validation")))
            at_val++;
    }
    bool ramp = jumps > 0 && 2 * jumps > n - 1;
    cJSON_AddBoolToObject(o, "ramp", ramp);
    *aligned = jumps == 0 ? -1 : (at_val == jumps && !ramp) ? 1 : 0;
    if (*aligned < 0)
        cJSON_AddNullToObject(o, "aligned");
    else
        cJSON_AddBoolToObject(o, "aligned", *aligned == 1);
    return o;
}

/* Epochs a third of the soak must hold before an interval is drawn from it:
 * a bootstrap of one value is that value, not an interval. */
#define SOAK_CI_MIN_PER_THIRD 2

/* {point, lo, hi} as METRICs in unit, from a ratio interval mapped by
 * (ratio - 1) * scale (scale 0: the ratio itself); invalid when !ci->valid. */
static cJSON *ci_json(const dg_median_ci *ci, double scale, const char *unit)
{
    cJSON *o = cJSON_CreateObject();
    double v[3] = {ci->point, ci->lo, ci->hi};
    static const char *const k[3] = {"point", "lo", "hi"};
    for (int i = 0; i < 3; i++) {
        double x = scale != 0 ? (v[i] - 1) * scale : v[i];
        bool ok = ci->valid && isfinite(x);
        cJSON_AddItemToObject(o, k[i], dg_json_metric(ok ? x : 0, ok, unit));
    }
    return o;
}

static void ci_about(cJSON *o, int per_third, const char *method)
{
    cJSON_AddNumberToObject(o, "level", 0.95);
    cJSON_AddNumberToObject(o, "resamples", DG_BOOTSTRAP_RESAMPLES);
    cJSON_AddNumberToObject(o, "epochs_per_third", per_third);
    cJSON_AddStringToObject(o, "method", method);
}

/* The 95% intervals the memory and slowing-down rules judge (docs/measure.md
 * "Soak"): growth of each source as the median watermark of the last third of
 * the epochs over the first epoch's, and the step-time slowdown as the median
 * of the last third's epoch step times over the first third's, each a
 * percentile bootstrap over the per-epoch values. Fewer than two epochs a
 * third: the intervals are written not valid and the rules judge the point. */
static void soak_intervals(cJSON *s, const cJSON *ep)
{
    int n = cJSON_GetArraySize(ep), third = n / 3;
    bool enough = third >= SOAK_CI_MIN_PER_THIRD;
    double *late = dg_malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    double *early = dg_malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    cJSON *g = cJSON_AddObjectToObject(s, "growth_ci");
    const cJSON *first = cJSON_GetArrayItem(ep, 0);
    for (int i = 0; i < NSRC; i++) {
        dg_median_ci ci = {.valid = false};
        double base = first ? metric_of(first, sources[i].entry) : NAN;
        /* The last third of the epochs that report the source: an epoch
         * without a reading (the probe's last one, closed at the program's
         * exit) is passed over, not counted as the end of the curve. */
        size_t nl = 0;
        for (int k = n - 1; enough && late && k >= 1 && nl < (size_t)third; k--) {
            double x = metric_of(cJSON_GetArrayItem(ep, k), sources[i].entry);
            if (isfinite(x))
                late[nl++] = x;
        }
        if (enough && late && nl == (size_t)third && isfinite(base) && base > 0)
            dg_bootstrap_median_ci(late, nl, &base, 1, 0, 0.95, DG_BOOTSTRAP_SEED, &ci);
        cJSON_AddItemToObject(g, sources[i].name, ci_json(&ci, 100.0, "%"));
    }
    ci_about(g, enough ? third : 0,
             "percentile bootstrap of the median watermark of the last third of the epochs "
             "over the first epoch's");
    cJSON *tr = cJSON_GetObjectItem(s, "step_trend");
    dg_median_ci ci = {.valid = false};
    size_t ne = 0, nl = 0;
    for (int k = 0; enough && early && late && k < third; k++) {
        double a = metric_of(cJSON_GetArrayItem(ep, k), "step_ms");
        double b = metric_of(cJSON_GetArrayItem(ep, n - third + k), "step_ms");
        if (isfinite(a))
            early[ne++] = a;
        if (isfinite(b))
            late[nl++] = b;
    }
    if (enough && ne == (size_t)third && nl == (size_t)third)
        dg_bootstrap_median_ci(late, nl, early, ne, 0, 0.95, DG_BOOTSTRAP_SEED, &ci);
    cJSON *t = ci_json(&ci, 0, "ratio");
    ci_about(t, enough ? third : 0,
             "percentile bootstrap of the median epoch step time of the last third of the "
             "epochs over the first third's");
    cJSON_AddItemToObject(tr, "thirds_ratio_ci", t);
    dg_free(late);
    dg_free(early);
}

void dg_soak_analyse(cJSON *s, const cJSON *ep, const cJSON *st)
{
    int n = cJSON_GetArraySize(ep);
    const cJSON *first = cJSON_GetArrayItem(ep, 0), *last = cJSON_GetArrayItem(ep, n - 1);
    cJSON_AddNumberToObject(s, "epochs_recorded", n);
    cJSON *base = cJSON_AddObjectToObject(s, "baseline");
    cJSON_AddNumberToObject(base, "epoch",
                            first ? cJSON_GetNumberValue(cJSON_GetObjectItem(first, "epoch")) : 0);
    cJSON *growth = cJSON_AddObjectToObject(s, "growth");
    cJSON *last_j = cJSON_AddObjectToObject(s, "last");
    cJSON_AddNumberToObject(last_j, "epoch",
                            last ? cJSON_GetNumberValue(cJSON_GetObjectItem(last, "epoch")) : 0);
    cJSON *stair = cJSON_AddObjectToObject(s, "staircase");
    int any = -1;
    for (int i = 0; i < NSRC; i++) {
        double b = first ? metric_of(first, sources[i].entry) : NAN;
        /* The last epoch that reports the source (see soak_intervals). */
        double l = NAN;
        for (int k = n - 1; k >= 1 && !isfinite(l); k--)
            l = metric_of(cJSON_GetArrayItem(ep, k), sources[i].entry);
        cJSON_AddItemToObject(base, sources[i].name, dg_json_metric(b, isfinite(b), "bytes"));
        cJSON_AddItemToObject(last_j, sources[i].name, dg_json_metric(l, isfinite(l), "bytes"));
        bool ok = isfinite(b) && isfinite(l) && b > 0;
        cJSON_AddItemToObject(growth, sources[i].name,
                              dg_json_metric(ok ? 100.0 * (l - b) / b : 0, ok, "%"));
        int al;
        cJSON_AddItemToObject(stair, sources[i].name, staircase_of(ep, sources[i].entry, b, &al));
        if (sources[i].shared)
            continue;
        if (al == 0)
            any = 0;
        else if (al == 1 && any != 0)
            any = 1;
    }
    cJSON *vals = cJSON_AddArrayToObject(stair, "validation_epochs");
    const cJSON *e;
    cJSON_ArrayForEach(e, ep)
    {
        if (cJSON_IsTrue(cJSON_GetObjectItem(e, "validation")))
            cJSON_AddItemToArray(
                vals, cJSON_CreateNumber(cJSON_GetNumberValue(cJSON_GetObjectItem(e, "epoch"))));
    }
    if (any < 0)
        cJSON_AddNullToObject(stair, "aligned");
    else
        cJSON_AddBoolToObject(stair, "aligned", any == 1);
    cJSON *tr = cJSON_AddObjectToObject(s, "step_trend");
    cJSON_AddItemToObject(
        tr, "median",
        dg_json_metric(metric_of(st, "median"), isfinite(metric_of(st, "median")), "ms"));
    double slope = metric_of(st, "slope"), ratio = metric_of(st, "thirds_ratio");
    cJSON_AddItemToObject(tr, "slope", dg_json_metric(slope, isfinite(slope), "ms/step"));
    cJSON_AddItemToObject(tr, "thirds_ratio", dg_json_metric(ratio, isfinite(ratio), "ratio"));
    soak_intervals(s, ep);
}

/* ---- the leak screen over the steps' readings ------------------------------------ */

#define SCREEN_MIN_POINTS 8
#define SCREEN_MAX_POINTS 200 /* readings decimated to at most this many before pairing */

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct line_fit {
    int n;
    double slope, lo, hi, start; /* per step; the line's value at the first point */
} line_fit;

/* Theil-Sen through (x, y) with Sen's (1968) distribution-free 95% interval
 * of the slope: the pairwise slopes ranked, the interval between ranks
 * (N -+ 1.96 sqrt(n(n-1)(2n+5)/18)) / 2. */
static line_fit sen_fit(const double *x, const double *y, int n)
{
    line_fit f = {0, NAN, NAN, NAN, NAN};
    size_t np = (size_t)n * (size_t)(n - 1) / 2;
    double *sl = n >= 2 ? dg_malloc(sizeof *sl * (np > (size_t)n ? np : (size_t)n)) : NULL;
    if (!sl)
        return f;
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (x[j] > x[i])
                sl[k++] = (y[j] - y[i]) / (x[j] - x[i]);
    if (k) {
        qsort(sl, k, sizeof *sl, cmp_dbl);
        f.n = n;
        f.slope = k % 2 ? sl[k / 2] : 0.5 * (sl[k / 2 - 1] + sl[k / 2]);
        double c = 1.959964 * sqrt((double)n * (n - 1) * (2.0 * n + 5) / 18.0);
        double lo = floor(((double)k - c) / 2), hi = ceil(((double)k + c) / 2);
        f.lo = sl[lo < 0 ? 0 : (size_t)lo];
        f.hi = sl[hi >= (double)k ? k - 1 : (size_t)hi];
        for (int i = 0; i < n; i++)
            sl[i] = y[i] - f.slope * (x[i] - x[0]);
        qsort(sl, (size_t)n, sizeof *sl, cmp_dbl);
        f.start = n % 2 ? sl[n / 2] : 0.5 * (sl[n / 2 - 1] + sl[n / 2]);
    }
    dg_free(sl);
    return f;
}

static cJSON *screen_source(const double *v, size_t n, size_t skip, double spe)
{
    double *x = dg_malloc(sizeof *x * SCREEN_MAX_POINTS),
           *y = dg_malloc(sizeof *y * SCREEN_MAX_POINTS);
    size_t have = 0;
    for (size_t i = skip; i < n; i++)
        have += isfinite(v[i]) && v[i] > 0;
    /* Evenly decimated: every stride-th reading. */
    size_t stride =
        have > SCREEN_MAX_POINTS ? (have + SCREEN_MAX_POINTS - 1) / SCREEN_MAX_POINTS : 1;
    int m = 0;
    size_t seen = 0;
    for (size_t i = skip; x && y && i < n && m < SCREEN_MAX_POINTS; i++) {
        if (!(isfinite(v[i]) && v[i] > 0) || seen++ % stride)
            continue;
        x[m] = (double)i;
        y[m++] = v[i];
    }
    line_fit f = m >= SCREEN_MIN_POINTS ? sen_fit(x, y, m) : (line_fit){0, NAN, NAN, NAN, NAN};
    dg_free(x);
    dg_free(y);
    cJSON *o = cJSON_CreateObject();
    bool ok = f.n > 0 && f.start > 0 && isfinite(spe) && spe > 0;
    cJSON_AddNumberToObject(o, "points", ok ? f.n : 0);
    cJSON_AddItemToObject(o, "start", dg_json_metric_of(ok ? f.start : NAN, "bytes"));
    cJSON_AddItemToObject(o, "slope", dg_json_metric_of(ok ? f.slope : NAN, "bytes/step"));
    cJSON *pe = cJSON_AddObjectToObject(o, "per_epoch");
    double k = ok ? 100.0 * spe / f.start : NAN;
    cJSON_AddItemToObject(pe, "point", dg_json_metric_of(k * f.slope, "%"));
    cJSON_AddItemToObject(pe, "lo", dg_json_metric_of(k * f.lo, "%"));
    cJSON_AddItemToObject(pe, "hi", dg_json_metric_of(k * f.hi, "%"));
    return o;
}

void dg_soak_step_growth(cJSON *s, const double *alloc, const double *fp, size_t n, size_t skip,
                         double steps_per_epoch)
{
    cJSON *g = cJSON_AddObjectToObject(s, "step_growth");
    cJSON_AddNumberToObject(g, "from_step", (double)skip);
    cJSON_AddNumberToObject(g, "steps", (double)(n > skip ? n - skip : 0));
    cJSON_AddItemToObject(g, "steps_per_epoch", dg_json_metric_of(steps_per_epoch, "steps"));
    cJSON_AddNumberToObject(g, "level", 0.95);
    cJSON_AddStringToObject(g, "method",
                            "Theil-Sen line through the memory read after each step (the first "
                            "epoch's first half left out), Sen's 95% interval of its slope; growth "
                            "an epoch over the line's start");
    cJSON_AddItemToObject(g, "allocator_allocated", screen_source(alloc, n, skip, steps_per_epoch));
    cJSON_AddItemToObject(g, "footprint", screen_source(fp, n, skip, steps_per_epoch));
}
