/* Robust statistics of a series of measurements (docs/measure.md): quartiles
 * by linear interpolation (numpy's default), mean and sd (n - 1), outliers by
 * the modified z-score (median absolute deviation), a least-squares trend over
 * the index and the ratio of the last third to the first. */
#include "measure/measure.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Quantile p of sorted v[0..n) by linear interpolation between closest ranks. */
static double quantile(const double *v, size_t n, double p)
{
    double pos = p * (double)(n - 1);
    size_t lo = (size_t)floor(pos);
    if (lo + 1 >= n)
        return v[n - 1];
    double frac = pos - (double)lo;
    return v[lo] + frac * (v[lo + 1] - v[lo]);
}

void dg_stats_compute(const double *v, size_t n, size_t warmup, dg_stats *out)
{
    dg_stats s = {0};
    s.median = s.q1 = s.q3 = s.iqr = s.mean = s.sd = s.min = s.max = NAN;
    s.iqr_share = s.slope = s.thirds_ratio = NAN;
    if (!v || warmup >= n) {
        *out = s;
        return;
    }
    const double *x = v + warmup;
    size_t m = n - warmup;
    s.n = m;
    double *sorted = dg_malloc(m * sizeof *sorted);
    if (!sorted) {
        s.n = 0;
        *out = s;
        return;
    }
    memcpy(sorted, x, m * sizeof *sorted);
    qsort(sorted, m, sizeof *sorted, cmp_double);
    s.min = sorted[0];
    s.max = sorted[m - 1];
    s.median = quantile(sorted, m, 0.5);
    s.q1 = quantile(sorted, m, 0.25);
    s.q3 = quantile(sorted, m, 0.75);
    s.iqr = s.q3 - s.q1;
    s.iqr_share = s.median != 0 ? s.iqr / fabs(s.median) : NAN;
    s.noise = !(s.iqr_share > 0.10) ? 0 : s.iqr_share > 0.25 ? 2 : 1;

    double sum = 0;
    for (size_t i = 0; i < m; i++)
        sum += x[i];
    s.mean = sum / (double)m;
    if (m > 1) {
        double ss = 0;
        for (size_t i = 0; i < m; i++)
            ss += (x[i] - s.mean) * (x[i] - s.mean);
        s.sd = sqrt(ss / (double)(m - 1));
    }

    /* Median absolute deviation; 0 (half the values equal) means no outliers. */
    for (size_t i = 0; i < m; i++)
        sorted[i] = fabs(x[i] - s.median);
    qsort(sorted, m, sizeof *sorted, cmp_double);
    double mad = quantile(sorted, m, 0.5);
    if (mad > 0)
        for (size_t i = 0; i < m; i++)
            if (fabs(0.6745 * (x[i] - s.median) / mad) > 3.5)
                s.outliers++;
    dg_free(sorted);

    if (m > 1) {
        double mi = (double)(m - 1) / 2.0, num = 0, den = 0;
        for (size_t i = 0; i < m; i++) {
            num += ((double)i - mi) * (x[i] - s.mean);
            den += ((double)i - mi) * ((double)i - mi);
        }
        s.slope = num / den;
    }
    if (m >= 3) {
        size_t third = m / 3;
        double first = 0, last = 0;
        for (size_t i = 0; i < third; i++) {
            first += x[i];
            last += x[m - third + i];
        }
        s.thirds_ratio = first != 0 ? last / first : NAN;
    }
    *out = s;
}

static void add_metric(cJSON *o, const char *key, double v, const char *unit)
{
    cJSON_AddItemToObject(o, key, dg_json_metric(v, isfinite(v), unit));
}

cJSON *dg_stats_json(const dg_stats *s, const char *unit)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    char per[64];
    snprintf(per, sizeof per, "%s/step", unit);
    cJSON_AddNumberToObject(o, "n", (double)s->n);
    add_metric(o, "median", s->median, unit);
    add_metric(o, "q1", s->q1, unit);
    add_metric(o, "q3", s->q3, unit);
    add_metric(o, "iqr", s->iqr, unit);
    add_metric(o, "mean", s->mean, unit);
    add_metric(o, "sd", s->sd, unit);
    add_metric(o, "min", s->min, unit);
    add_metric(o, "max", s->max, unit);
    add_metric(o, "iqr_share", s->iqr_share, "fraction");
    cJSON_AddStringToObject(o, "noise", s->noise == 2 ? "strong" : s->noise == 1 ? "warn" : "quiet");
    cJSON_AddNumberToObject(o, "outliers", (double)s->outliers);
    add_metric(o, "slope", s->slope, per);
    add_metric(o, "thirds_ratio", s->thirds_ratio, "ratio");
    return o;
}
