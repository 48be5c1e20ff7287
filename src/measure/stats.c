/* Robust statistics of a series of measurements (docs/measure.md): quartiles
 * by linear interpolation (numpy's default), mean and sd (n - 1), outliers by
 * the modified z-score (median absolute deviation), a least-squares trend over
 * the index and the ratio of the last third's median to the first's. */
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

    if (m > 1) {
        double mi = (double)(m - 1) / 2.0, num = 0, den = 0;
        for (size_t i = 0; i < m; i++) {
            num += ((double)i - mi) * (x[i] - s.mean);
            den += ((double)i - mi) * ((double)i - mi);
        }
        s.slope = num / den;
    }
    /* Medians, not means: an asynchronous device's host step times put each
     * sync point's wait on one step, and a third that happens to hold two of
     * them against the first third's one reads as a slowdown of the whole
     * run (4 epochs of 50 steps: 1.43 on means, 1.00 on medians). */
    if (m >= 3) {
        size_t third = m / 3;
        memcpy(sorted, x, third * sizeof *sorted);
        qsort(sorted, third, sizeof *sorted, cmp_double);
        double first = quantile(sorted, third, 0.5);
        memcpy(sorted, x + m - third, third * sizeof *sorted);
        qsort(sorted, third, sizeof *sorted, cmp_double);
        double last = quantile(sorted, third, 0.5);
        s.thirds_ratio = first != 0 ? last / first : NAN;
    }
    dg_free(sorted);
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
    cJSON_AddStringToObject(o, "noise",
                            s->noise == 2   ? "strong"
                            : s->noise == 1 ? "warn"
                                            : "quiet");
    cJSON_AddNumberToObject(o, "outliers", (double)s->outliers);
    add_metric(o, "slope", s->slope, per);
    add_metric(o, "thirds_ratio", s->thirds_ratio, "ratio");
    return o;
}

/* ---- comparisons ------------------------------------------------------------ */

static double median_of(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return quantile(v, n, 0.5);
}

static bool all_finite(const double *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return false;
    return true;
}

/* n values of src drawn with replacement into dst; indices from the top bits
 * of Philox outputs scaled to [0, n) (bias below 2^-32 * n). */
static void resample(dg_rng *r, const double *src, size_t n, double *dst)
{
    uint32_t q[4];
    for (size_t i = 0; i < n; i++) {
        if (i % 4 == 0)
            dg_rng_next4(r, q);
        dst[i] = src[(size_t)(((uint64_t)q[i % 4] * n) >> 32)];
    }
}

bool dg_bootstrap_median_ci(const double *a, size_t na, const double *b, size_t nb,
                            size_t resamples, double level, uint64_t seed, dg_median_ci *out)
{
    dg_median_ci c = {.point = NAN, .lo = NAN, .hi = NAN};
    c.level = level > 0 && level < 1 ? level : 0.95;
    c.resamples = resamples ? resamples : DG_BOOTSTRAP_RESAMPLES;
    if (!b)
        nb = 0;
    *out = c;
    if (!a || !na || !all_finite(a, na) || (nb && !all_finite(b, nb)))
        return false;
    double *work = dg_malloc((na + nb) * sizeof *work);
    double *dist = dg_malloc(c.resamples * sizeof *dist);
    if (!work || !dist) {
        dg_free(work);
        dg_free(dist);
        return false;
    }
    memcpy(work, a, na * sizeof *work);
    double ma = median_of(work, na), mb = 1;
    if (nb) {
        memcpy(work, b, nb * sizeof *work);
        mb = median_of(work, nb);
    }
    bool ok = mb != 0 && isfinite(ma / mb);
    if (ok) {
        c.point = ma / mb;
        dg_rng r;
        dg_rng_init(&r, seed, 0xb0075);
        size_t kept = 0;
        for (size_t k = 0; k < c.resamples; k++) {
            resample(&r, a, na, work);
            double ra = median_of(work, na), rb = 1;
            if (nb) {
                resample(&r, b, nb, work + na);
                rb = median_of(work + na, nb);
            }
            if (rb != 0 && isfinite(ra / rb))
                dist[kept++] = ra / rb;
        }
        ok = kept > 0;
        if (ok) {
            qsort(dist, kept, sizeof *dist, cmp_double);
            c.lo = quantile(dist, kept, (1 - c.level) / 2);
            c.hi = quantile(dist, kept, (1 + c.level) / 2);
        }
    }
    c.valid = ok;
    dg_free(work);
    dg_free(dist);
    *out = c;
    return ok;
}

/* The k-th smallest of v[0..n) (k < n), v permuted so that v[0..k) <= v[k]
 * <= v(k..n): Wirth's selection with a median-of-three pivot value. */
static double select_kth(double *v, size_t n, size_t k)
{
    ptrdiff_t l = 0, m = (ptrdiff_t)n - 1, kk = (ptrdiff_t)k;
    while (l < m) {
        double a = v[l], b = v[l + (m - l) / 2], c = v[m];
        double x = a < b ? (b < c ? b : a < c ? c : a) : (a < c ? a : b < c ? c : b);
        ptrdiff_t i = l, j = m;
        do {
            while (v[i] < x)
                i++;
            while (x < v[j])
                j--;
            if (i <= j) {
                double t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                j--;
            }
        } while (i <= j);
        if (j < kk)
            l = i;
        if (kk < i)
            m = j;
    }
    return v[k];
}

/* quantile() of v without sorting it (v permuted): the same two order
 * statistics interpolated. */
static double quantile_select(double *v, size_t n, double p)
{
    double pos = p * (double)(n - 1);
    size_t lo = (size_t)floor(pos);
    double a = select_kth(v, n, lo);
    if (lo + 1 >= n)
        return a;
    /* After selection v[lo + 1..n) holds the values >= a: their minimum is next. */
    double b = v[lo + 1];
    for (size_t i = lo + 2; i < n; i++)
        if (v[i] < b)
            b = v[i];
    return a + (pos - (double)lo) * (b - a);
}

double dg_quantile(const double *v, size_t n, double p)
{
    if (!v || !n || !(p >= 0 && p <= 1))
        return NAN;
    double *w = dg_malloc(n * sizeof *w);
    if (!w)
        return NAN;
    memcpy(w, v, n * sizeof *w);
    double q = quantile_select(w, n, p);
    dg_free(w);
    return q;
}

bool dg_bootstrap_quantiles_ci(const double *a, size_t na, const double *p, size_t np,
                               size_t resamples, double level, uint64_t seed, dg_median_ci *out)
{
    level = level > 0 && level < 1 ? level : 0.95;
    resamples = resamples ? resamples : DG_BOOTSTRAP_RESAMPLES;
    for (size_t j = 0; j < np; j++)
        out[j] = (dg_median_ci){
            .point = NAN, .lo = NAN, .hi = NAN, .level = level, .resamples = resamples};
    if (!a || !na || !all_finite(a, na))
        return false;
    for (size_t j = 0; j < np; j++)
        if (!(p[j] >= 0 && p[j] <= 1))
            return false;
    double *work = dg_malloc(na * sizeof *work);
    double *dist = dg_malloc(resamples * np * sizeof *dist);
    if (!work || !dist) {
        dg_free(work);
        dg_free(dist);
        return false;
    }
    for (size_t j = 0; j < np; j++) {
        memcpy(work, a, na * sizeof *work);
        out[j].point = quantile_select(work, na, p[j]);
    }
    dg_rng r;
    dg_rng_init(&r, seed, 0xb0076);
    for (size_t k = 0; k < resamples; k++) {
        resample(&r, a, na, work);
        /* Selections leave the array a permutation of the resample. */
        for (size_t j = 0; j < np; j++)
            dist[j * resamples + k] = quantile_select(work, na, p[j]);
    }
    for (size_t j = 0; j < np; j++) {
        double *d = dist + j * resamples;
        qsort(d, resamples, sizeof *d, cmp_double);
        out[j].lo = quantile(d, resamples, (1 - level) / 2);
        out[j].hi = quantile(d, resamples, (1 + level) / 2);
        out[j].valid = isfinite(out[j].lo) && isfinite(out[j].hi);
    }
    dg_free(work);
    dg_free(dist);
    return true;
}

/* Number of arrangements of m values of a and n of b whose U of a is u:
 * f(m, n, u) = f(m - 1, n, u - n) + f(m, n - 1, u), as one table over n per m.
 * Returns the count table over u = 0..m*n (NULL when out of memory). */
static double *u_counts(size_t m, size_t n)
{
    size_t w = m * n + 1;
    /* prev[j][u] for rows of m - 1, kept for j = 0..n */
    double *prev = dg_calloc((n + 1) * w, sizeof(double));
    double *cur = dg_calloc((n + 1) * w, sizeof(double));
    if (!prev || !cur) {
        dg_free(prev);
        dg_free(cur);
        return NULL;
    }
    for (size_t j = 0; j <= n; j++)
        prev[j * w] = 1; /* f(0, j, 0) = 1 */
    for (size_t i = 1; i <= m; i++) {
        memset(cur, 0, (n + 1) * w * sizeof(double));
        cur[0] = 1; /* f(i, 0, 0) = 1 */
        for (size_t j = 1; j <= n; j++)
            for (size_t u = 0; u <= i * j; u++)
                cur[j * w + u] = (u >= j ? prev[j * w + u - j] : 0) + cur[(j - 1) * w + u];
        double *t = prev;
        prev = cur;
        cur = t;
    }
    double *res = dg_malloc(w * sizeof(double));
    if (res)
        memcpy(res, prev + n * w, w * sizeof(double));
    dg_free(prev);
    dg_free(cur);
    return res;
}

double dg_mann_whitney_p(const double *a, size_t na, const double *b, size_t nb, double *u_a)
{
    if (u_a)
        *u_a = NAN;
    if (!a || !b || !na || !nb || !all_finite(a, na) || !all_finite(b, nb))
        return NAN;
    /* Ranks of the pooled values with ties at their mean rank. */
    size_t n = na + nb;
    double *v = dg_malloc(n * sizeof *v);
    if (!v)
        return NAN;
    memcpy(v, a, na * sizeof *v);
    memcpy(v + na, b, nb * sizeof *v);
    qsort(v, n, sizeof *v, cmp_double);
    double rank_a = 0, tie_term = 0;
    bool ties = false;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && v[j + 1] == v[i])
            j++;
        double t = (double)(j - i + 1), mean_rank = (double)(i + j) / 2 + 1;
        if (t > 1) {
            ties = true;
            tie_term += t * t * t - t;
        }
        for (size_t k = 0; k < na; k++)
            if (a[k] == v[i])
                rank_a += mean_rank;
        i = j + 1;
    }
    dg_free(v);
    double m1 = (double)na, m2 = (double)nb;
    double u1 = rank_a - m1 * (m1 + 1) / 2, u2 = m1 * m2 - u1;
    if (u_a)
        *u_a = u1;
    double big = fmax(u1, u2), p;
    if (!ties && (na <= 8 || nb <= 8) && na * nb <= 20000) {
        /* The distribution is the same for (na, nb) and (nb, na): keep the
         * table's inner side the short one. */
        double *cnt = na >= nb ? u_counts(na, nb) : u_counts(nb, na);
        if (!cnt)
            return NAN;
        double total = 0, upper = 0;
        size_t top = na * nb, from = (size_t)big;
        for (size_t u = 0; u <= top; u++) {
            total += cnt[u];
            if (u >= from)
                upper += cnt[u];
        }
        dg_free(cnt);
        p = 2 * upper / total;
    } else {
        double mu = m1 * m2 / 2;
        double var = m1 * m2 / 12 * ((double)n + 1 - tie_term / ((double)n * ((double)n - 1)));
        if (!(var > 0))
            return 1; /* every value equal */
        double z = (big - mu - 0.5) / sqrt(var);
        p = erfc(z / sqrt(2.0));
    }
    return fmin(fmax(p, 0), 1);
}
