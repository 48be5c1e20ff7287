/* Statistics of measurement series against hand-computed values. */
#include "measure/measure.h"

#include "check.h"

#define NEAR(a, b) (fabs((a) - (b)) < 1e-9)

static const cJSON *val(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItem(cJSON_GetObjectItem(o, k), "value");
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
    /* thirds of 10: 3 values each: (8+9+10)/(1+2+3) = 4.5 */
    CHECK(NEAR(s.thirds_ratio, 4.5));

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
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "median"), "unit")), "ms");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "noise")), "strong");
    static const char *const keys[] = {"q1", "q3", "iqr", "mean", "sd", "min", "max", "iqr_share",
                                       "outliers", "slope", "thirds_ratio"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CHECK_MSG(cJSON_GetObjectItem(j, keys[i]) != NULL, "missing %s", keys[i]);
    cJSON_Delete(j);
    dg_stats_compute(a, 1, 0, &s);
    j = dg_stats_json(&s, "ms");
    CHECK(cJSON_IsNull(val(j, "sd")) && cJSON_IsNull(val(j, "slope")) && cJSON_IsNull(val(j, "thirds_ratio")));
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "sd"), "valid")));
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "noise")), "quiet");
    cJSON_Delete(j);
    dg_stats_compute(a, 0, 0, &s);
    j = dg_stats_json(&s, "ms");
    CHECK(cJSON_IsNull(val(j, "median")) && cJSON_GetNumberValue(cJSON_GetObjectItem(j, "n")) == 0);
    cJSON_Delete(j);
    CHECK_DONE();
}
