/* Statistics of measurement series against hand-computed values. */
#include "measure/measure.h"

#include "check.h"

#define NEAR(a, b) (fabs((a) - (b)) < 1e-9)

static const cJSON *val(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItem(cJSON_GetObjectItem(o, k), "value");
}

/* Bootstrap intervals against hand-computed distributions, Mann-Whitney
 * p-values against scipy.stats.mannwhitneyu 1.10.1 (method "auto"). */
static void comparisons(void)
{
    dg_median_ci c, c2;
    /* a = {1, 3}: a resample's median is 1, 2 or 3 with probability 1/4, 1/2,
     * 1/4, so the 2.5% and 97.5% points are 1 and 3; b = {1, 1} is always 1. */
    double a[2] = {3, 1}, b[2] = {1, 1};
    CHECK(dg_bootstrap_median_ci(a, 2, b, 2, 0, 0.95, 7, &c));
    CHECK(c.valid && NEAR(c.point, 2) && NEAR(c.lo, 1) && NEAR(c.hi, 3));
    CHECK(c.resamples == DG_BOOTSTRAP_RESAMPLES && NEAR(c.level, 0.95));
    /* Constant sides: the interval is the point. */
    double k2[3] = {2, 2, 2}, k4[4] = {4, 4, 4, 4};
    CHECK(dg_bootstrap_median_ci(k2, 3, k4, 4, 500, 0.95, 1, &c));
    CHECK(NEAR(c.point, 0.5) && NEAR(c.lo, 0.5) && NEAR(c.hi, 0.5) && c.resamples == 500);
    /* One sample {10, 20, 30}: P(median = 10) = 3 (1/3)^2 (2/3) + (1/3)^3 = 7/27 > 2.5%. */
    double t[3] = {30, 10, 20};
    CHECK(dg_bootstrap_median_ci(t, 3, NULL, 0, 0, 0.95, 3, &c));
    CHECK(NEAR(c.point, 20) && NEAR(c.lo, 10) && NEAR(c.hi, 30));
    /* Deterministic for a seed; bounded by the extreme ratios for any seed. */
    double cpu[5] = {10.2, 11.0, 9.8, 10.5, 12.9}, dev[5] = {2.1, 2.0, 2.6, 1.9, 2.2};
    CHECK(dg_bootstrap_median_ci(cpu, 5, dev, 5, 0, 0.95, 42, &c));
    CHECK(dg_bootstrap_median_ci(cpu, 5, dev, 5, 0, 0.95, 42, &c2));
    CHECK(c.lo == c2.lo && c.hi == c2.hi && c.point == c2.point);
    CHECK(NEAR(c.point, 10.5 / 2.1));
    CHECK(c.lo >= 9.8 / 2.6 && c.hi <= 12.9 / 1.9 && c.lo <= c.point && c.point <= c.hi);
    CHECK(c.lo < c.hi);
    CHECK(dg_bootstrap_median_ci(cpu, 5, dev, 5, 0, 0.95, 43, &c2));
    CHECK(c2.lo >= 9.8 / 2.6 && c2.hi <= 12.9 / 1.9);
    /* A wider level gives an interval at least as wide. */
    CHECK(dg_bootstrap_median_ci(cpu, 5, dev, 5, 0, 0.5, 42, &c2));
    CHECK(c2.lo >= c.lo && c2.hi <= c.hi && NEAR(c2.level, 0.5));
    /* Not computable: empty side, non-finite value, zero denominator. */
    double z[2] = {0, 0}, bad[2] = {1, NAN};
    CHECK(!dg_bootstrap_median_ci(a, 0, b, 2, 0, 0.95, 1, &c) && !c.valid && isnan(c.point));
    CHECK(!dg_bootstrap_median_ci(bad, 2, b, 2, 0, 0.95, 1, &c) && !c.valid);
    CHECK(!dg_bootstrap_median_ci(a, 2, z, 2, 0, 0.95, 1, &c) && !c.valid && isnan(c.lo));

    /* Mann-Whitney: scipy's values typed in. */
    double u;
    double x1[5] = {1, 2, 3, 4, 5}, y1[5] = {6, 7, 8, 9, 10};
    CHECK(NEAR(dg_mann_whitney_p(x1, 5, y1, 5, &u), 0.007936507936507936) && NEAR(u, 0));
    CHECK(NEAR(dg_mann_whitney_p(y1, 5, x1, 5, &u), 0.007936507936507936) && NEAR(u, 25));
    double x2[5] = {1.1, 2.5, 3.0, 4.2, 7.7}, y2[6] = {2.0, 5.1, 6.3, 8.8, 9.0, 9.5};
    CHECK(NEAR(dg_mann_whitney_p(x2, 5, y2, 6, &u), 0.12554112554112554) && NEAR(u, 6));
    double x3[6] = {3, 3, 4, 5, 5, 6}, y3[6] = {4, 5, 6, 6, 7, 8}; /* ties: asymptotic */
    CHECK(NEAR(dg_mann_whitney_p(x3, 6, y3, 6, &u), 0.07296726831346526) && NEAR(u, 6.5));
    double x4[12], y4[12]; /* 12 against 12 without ties: asymptotic */
    for (int i = 0; i < 12; i++) {
        x4[i] = i + 1;
        y4[i] = i + 6.5;
    }
    CHECK(NEAR(dg_mann_whitney_p(x4, 12, y4, 12, &u), 0.003549838634913565) && NEAR(u, 21));
    double x5[3] = {1, 2, 3}, y5[3] = {5, 6, 7};
    CHECK(NEAR(dg_mann_whitney_p(x5, 3, x5, 3, &u), 1.0) && NEAR(u, 4.5));
    CHECK(NEAR(dg_mann_whitney_p(y5, 3, x5, 3, &u), 0.1) && NEAR(u, 9));
    CHECK(isnan(dg_mann_whitney_p(x5, 0, y5, 3, &u)) && isnan(u));
    CHECK(isnan(dg_mann_whitney_p(bad, 2, y5, 3, NULL)));
}

int main(void)
{
    dg_stats s;
    /* 1..10: numpy percentile(linear) q1 3.25, median 5.5, q3 7.75; sd sqrt(55/6). */
    double a[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    dg_stats_compute(a, 10, 0, &s);
    CHECK(s.n == 10);
    CHECK(NEAR(s.median, 5.5));
    CHECK(NEAR(s.q1, 3.25));
    CHECK(NEAR(s.q3, 7.75));
    CHECK(NEAR(s.iqr, 4.5));
    CHECK(NEAR(s.mean, 5.5));
    CHECK(NEAR(s.sd, sqrt(55.0 / 6.0)));
    CHECK(NEAR(s.min, 1) && NEAR(s.max, 10));
    CHECK(NEAR(s.iqr_share, 4.5 / 5.5));
    CHECK(s.noise == 2);
    CHECK(s.outliers == 0);
    CHECK(NEAR(s.slope, 1.0));
    /* thirds of 10: 3 values each: median 9 over median 2 = 4.5 */
    CHECK(NEAR(s.thirds_ratio, 4.5));

    /* 4 epochs of 50 steps on an asynchronous device: each epoch's last step
     * waits for the queue (50 against 1). The last third holds two of those
     * waits and the first one: 1.43 on means, no slowdown on medians. */
    double async[200];
    for (int i = 0; i < 200; i++)
        async[i] = i % 50 == 49 ? 50 : 1;
    dg_stats as;
    dg_stats_compute(async, 200, 0, &as);
    CHECK_MSG(NEAR(as.thirds_ratio, 1), "thirds ratio %.3f", as.thirds_ratio);
    /* A real slowdown still reads: the last third's steps twice as long. */
    for (int i = 134; i < 200; i++)
        async[i] *= 2;
    dg_stats_compute(async, 200, 0, &as);
    CHECK_MSG(NEAR(as.thirds_ratio, 2), "thirds ratio %.3f", as.thirds_ratio);

    /* One outlier: median 10, MAD 1 (deviations 0,0,0,0,1,1,1,1,90): z(100) = 60.7. */
    double b[9] = {10, 10, 10, 10, 11, 9, 11, 9, 100};
    dg_stats_compute(b, 9, 0, &s);
    CHECK(NEAR(s.median, 10));
    CHECK(s.outliers == 1);
    CHECK(NEAR(s.q1, 10) && NEAR(s.q3, 11));
    CHECK(s.noise == 0); /* iqr 1 = 10% of median: not above */

    /* Warn band: iqr share in (0.10, 0.25]. */
    double w[5] = {100, 95, 105, 90, 110};
    dg_stats_compute(w, 5, 0, &s);
    CHECK(NEAR(s.q1, 95) && NEAR(s.q3, 105) && s.noise == 0);
    double w2[5] = {100, 94, 106, 90, 110};
    dg_stats_compute(w2, 5, 0, &s);
    CHECK(s.noise == 1);

    /* Constant: MAD 0 gives no outliers, sd 0, slope 0, ratio 1. */
    double c[6] = {3, 3, 3, 3, 3, 3};
    dg_stats_compute(c, 6, 0, &s);
    CHECK(s.outliers == 0 && NEAR(s.sd, 0) && NEAR(s.slope, 0) && NEAR(s.thirds_ratio, 1));
    CHECK(NEAR(s.iqr_share, 0) && s.noise == 0);
    /* More than half equal: MAD 0, the odd one is not divided by zero. */
    double c2[5] = {3, 3, 3, 3, 50};
    dg_stats_compute(c2, 5, 0, &s);
    CHECK(s.outliers == 0 && isfinite(s.mean));

    /* n = 0, n = 1. */
    dg_stats_compute(a, 0, 0, &s);
    CHECK(s.n == 0 && isnan(s.median) && isnan(s.mean) && isnan(s.slope) && isnan(s.thirds_ratio));
    dg_stats_compute(NULL, 0, 0, &s);
    CHECK(s.n == 0);
    dg_stats_compute(a, 1, 0, &s);
    CHECK(s.n == 1 && NEAR(s.median, 1) && NEAR(s.q1, 1) && NEAR(s.q3, 1) && NEAR(s.mean, 1));
    CHECK(isnan(s.sd) && isnan(s.slope) && isnan(s.thirds_ratio) && s.outliers == 0);
    /* Two values: slope defined, thirds not. */
    dg_stats_compute(a, 2, 0, &s);
    CHECK(NEAR(s.slope, 1) && isnan(s.thirds_ratio) && NEAR(s.sd, sqrt(0.5)));

    /* Warm-up excluded: 100, 200 then 1..10 gives the 1..10 figures. */
    double d[12] = {100, 200, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    dg_stats_compute(d, 12, 2, &s);
    CHECK(s.n == 10 && NEAR(s.median, 5.5) && NEAR(s.max, 10) && NEAR(s.slope, 1));
    CHECK(d[0] == 100 && d[2] == 1); /* input not modified */
    dg_stats_compute(d, 12, 12, &s);
    CHECK(s.n == 0 && isnan(s.median));
    dg_stats_compute(d, 12, 20, &s);
    CHECK(s.n == 0);

    /* Unsorted input: quartiles still by rank. */
    double u[4] = {4, 1, 3, 2};
    dg_stats_compute(u, 4, 0, &s);
    CHECK(NEAR(s.median, 2.5) && NEAR(s.q1, 1.75) && NEAR(s.q3, 3.25));

    /* JSON shape: metrics with unit, null (never 0) when not reported. */
    dg_stats_compute(a, 10, 0, &s);
    cJSON *j = dg_stats_json(&s, "ms");
    CHECK(j && cJSON_GetNumberValue(cJSON_GetObjectItem(j, "n")) == 10);
    CHECK(NEAR(cJSON_GetNumberValue(val(j, "median")), 5.5));
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "median"), "unit")),
              "ms");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "noise")), "strong");
    static const char *const keys[] = {"q1",       "q3",    "iqr",         "mean",
                                       "sd",       "min",   "max",         "iqr_share",
                                       "outliers", "slope", "thirds_ratio"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CHECK_MSG(cJSON_GetObjectItem(j, keys[i]) != NULL, "missing %s", keys[i]);
    cJSON_Delete(j);
    dg_stats_compute(a, 1, 0, &s);
    j = dg_stats_json(&s, "ms");
    CHECK(cJSON_IsNull(val(j, "sd")) && cJSON_IsNull(val(j, "slope")) &&
          cJSON_IsNull(val(j, "thirds_ratio")));
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "sd"), "valid")));
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "noise")), "quiet");
    cJSON_Delete(j);
    dg_stats_compute(a, 0, 0, &s);
    j = dg_stats_json(&s, "ms");
    CHECK(cJSON_IsNull(val(j, "median")) && cJSON_GetNumberValue(cJSON_GetObjectItem(j, "n")) == 0);
    cJSON_Delete(j);
    comparisons();
    CHECK_DONE();
}
