/* The soak's intervals (docs/measure.md "Soak"): growth_ci over the last
 * third's watermarks and step_trend.thirds_ratio_ci over the thirds' epoch
 * step times, from dg_soak_analyse on crafted epochs: a steady plateau gives
 * a tight interval around its growth, a noisy one an interval that holds
 * 26%, a slowing soak a ratio interval above 1.2; under 6 epochs the
 * intervals are not valid. */
#include "analysis/analysis.h"
#include "check.h"
#include "core/core.h"
#include "core/json.h"

#define MIB 1048576.0

/* An epoch entry with the footprint (rss) in MiB and the median step ms. */
static cJSON *epoch(int i, double rss_mib, double step_ms)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "epoch", i);
    cJSON_AddItemToObject(e, "allocated", dg_json_metric(64 * MIB, true, "bytes"));
    cJSON_AddItemToObject(e, "reserved", dg_json_metric(64 * MIB, true, "bytes"));
    cJSON_AddItemToObject(e, "driver_used", dg_json_metric(0, false, "bytes"));
    cJSON_AddItemToObject(e, "rss", dg_json_metric(rss_mib * MIB, true, "bytes"));
    cJSON_AddItemToObject(e, "step_ms", dg_json_metric(step_ms, true, "ms"));
    cJSON_AddBoolToObject(e, "validation", false);
    return e;
}

static cJSON *analyse(const double *rss, const double *ms, int n)
{
    cJSON *ep = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(ep, epoch(i, rss[i], ms[i]));
    cJSON *s = cJSON_CreateObject();
    dg_soak_analyse(s, ep, NULL);
    cJSON_Delete(ep);
    return s;
}

static double num(const cJSON *s, const char *path)
{
    return dg_jnum(s, path);
}

/* The leak screen over per-step readings (dg_soak_step_growth): a footprint
 * growing 0.5 MB a step over 200 MB, with jitter, gives an interval of the
 * growth an epoch (24 steps) around 6%; a flat jittery one an interval
 * holding 0; seven readings, no figure. */
static void check_step_growth(void)
{
    enum { N = 48 };
    double grow[N], flat[N], none[N];
    unsigned x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        double jitter = ((double)(x >> 16 & 0x7fff) / 32767.0 - 0.5) * 2e6; /* +-1 MB */
        grow[i] = 200e6 + 0.5e6 * i + jitter;
        flat[i] = 200e6 + jitter;
        none[i] = NAN;
    }
    cJSON *s = cJSON_CreateObject();
    dg_soak_step_growth(s, none, grow, N, 12, 24);
    double p = num(s, "step_growth.footprint.per_epoch.point");
    double lo = num(s, "step_growth.footprint.per_epoch.lo");
    double hi = num(s, "step_growth.footprint.per_epoch.hi");
    double want = 100.0 * 0.5e6 * 24 / (200e6 + 0.5e6 * 12);
    CHECK_MSG(lo <= p && p <= hi && lo < want && want < hi && lo > 3 && hi < 9,
              "growing: %g (%g-%g), want about %g", p, lo, hi, want);
    CHECK(num(s, "step_growth.footprint.points") == N - 12);
    CHECK(dg_jbool(s, "step_growth.allocator_allocated.per_epoch.lo.valid") == 0);
    cJSON_Delete(s);
    s = cJSON_CreateObject();
    dg_soak_step_growth(s, none, flat, N, 12, 24);
    lo = num(s, "step_growth.footprint.per_epoch.lo");
    hi = num(s, "step_growth.footprint.per_epoch.hi");
    CHECK_MSG(lo < 0 && hi > 0, "flat: interval %g-%g should hold 0", lo, hi);
    cJSON_Delete(s);
    s = cJSON_CreateObject();
    dg_soak_step_growth(s, none, grow, 19, 12, 24);
    CHECK(dg_jbool(s, "step_growth.footprint.per_epoch.lo.valid") == 0 &&
          num(s, "step_growth.footprint.points") == 0);
    cJSON_Delete(s);
}

int main(void)
{
    check_step_growth();
    /* A plateau 30% above the baseline from epoch 3 on, little jitter. */
    const double plateau[12] = {100, 110, 120, 130, 130, 131, 129, 130, 130, 131, 129, 130};
    const double flat_ms[12] = {10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10};
    cJSON *s = analyse(plateau, flat_ms, 12);
    double p = num(s, "growth_ci.footprint.point"), lo = num(s, "growth_ci.footprint.lo"),
           hi = num(s, "growth_ci.footprint.hi");
    CHECK_MSG(isfinite(p) && isfinite(lo) && isfinite(hi), "plateau interval not reported");
    CHECK_MSG(lo <= p && p <= hi, "point %g outside [%g, %g]", p, lo, hi);
    CHECK_MSG(lo > 26 && hi < 32, "plateau growth interval [%g, %g] should lie above 26%%", lo, hi);
    CHECK(num(s, "growth_ci.epochs_per_third") == 4);
    CHECK(num(s, "growth_ci.level") == 0.95);
    /* the allocator did not grow: a zero-width interval at 0 */
    CHECK(num(s, "growth_ci.allocator_allocated.lo") == 0 &&
          num(s, "growth_ci.allocator_allocated.hi") == 0);
    /* the driver figure is not reported: neither is its interval */
    CHECK(dg_jbool(s, "growth_ci.driver.lo.valid") == 0);
    /* no slowdown: the ratio interval sits at 1 */
    CHECK(num(s, "step_trend.thirds_ratio_ci.lo") == 1 &&
          num(s, "step_trend.thirds_ratio_ci.hi") == 1);
    cJSON_Delete(s);

    /* Noisy watermarks around +26%: the interval holds the threshold. */
    const double noisy[12] = {100, 118, 135, 121, 133, 119, 137, 120, 134, 118, 136, 122};
    s = analyse(noisy, flat_ms, 12);
    lo = num(s, "growth_ci.footprint.lo");
    hi = num(s, "growth_ci.footprint.hi");
    CHECK_MSG(lo < 26 && hi > 26, "noisy growth interval [%g, %g] should hold 26%%", lo, hi);
    cJSON_Delete(s);

    /* A soak slowing from 10 ms to 15 ms a step. */
    const double slowing[9] = {10, 10.2, 9.9, 12, 12.5, 13, 15, 14.8, 15.3};
    const double same[9] = {100, 100, 100, 100, 100, 100, 100, 100, 100};
    s = analyse(same, slowing, 9);
    lo = num(s, "step_trend.thirds_ratio_ci.lo");
    hi = num(s, "step_trend.thirds_ratio_ci.hi");
    p = num(s, "step_trend.thirds_ratio_ci.point");
    CHECK_MSG(lo > 1.2 && lo <= p && p <= hi && hi < 1.6, "slowdown interval [%g, %g] point %g", lo,
              hi, p);
    CHECK(num(s, "step_trend.thirds_ratio_ci.epochs_per_third") == 3);
    cJSON_Delete(s);

    /* Five epochs: a third would be one epoch, a bootstrap of one value. */
    s = analyse(plateau, flat_ms, 5);
    CHECK(dg_jbool(s, "growth_ci.footprint.lo.valid") == 0);
    CHECK(dg_jbool(s, "step_trend.thirds_ratio_ci.lo.valid") == 0);
    CHECK(num(s, "growth_ci.epochs_per_third") == 0);
    CHECK(isfinite(num(s, "growth.footprint"))); /* the point is still there */
    cJSON_Delete(s);
    CHECK_DONE();
}
