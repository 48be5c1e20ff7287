/* The speed verdict of a throughput ratio from its interval (speed.h). */
#include "analysis/speed.h"

#include <math.h>
#include <string.h>

void dg_speed_judge(double lo, double hi, size_t na, size_t nb, size_t min_n, const double *th,
                    dg_speed_judgement *out)
{
    double speedup_min = th ? th[TH_SPEEDUP_MIN] : dg_thresholds[TH_SPEEDUP_MIN].value;
    double red =
        th ? th[TH_DEVICE_MIN_REDUCTION_PCT] : dg_thresholds[TH_DEVICE_MIN_REDUCTION_PCT].value;
    double e = (th ? th[TH_EQUIVALENCE_PCT] : dg_thresholds[TH_EQUIVALENCE_PCT].value) / 100;
    dg_speed_judgement j = {.verdict = "unknown", .why = "no interval"};
    /* Time per sample at least red% shorter is a ratio of 1 / (1 - red/100). */
    j.pays_off_min = red < 100 ? fmax(speedup_min, 1 / (1 - red / 100)) : INFINITY;
    j.band_lo = 1 / (1 + e);
    j.band_hi = 1 + e;
    if (!isfinite(lo) || !isfinite(hi)) {
        *out = j;
        return;
    }
    if (na < min_n || nb < min_n) {
        j.verdict = "inconclusive";
        j.why = "n too small";
    } else if (hi < j.band_lo) {
        j.verdict = "slower";
        j.why = "the interval lies below the equivalence band";
    } else if (lo >= j.pays_off_min) {
        j.verdict = "pays-off";
        j.why = "the interval lies at or above the pay-off ratio";
    } else if (lo >= j.band_lo && hi <= j.band_hi) {
        j.verdict = "no-difference";
        j.why = "the interval lies inside the equivalence band";
    } else if (lo > j.band_hi && hi < j.pays_off_min) {
        j.verdict = "no-gain";
        j.why = "faster, but the interval lies below the pay-off ratio";
    } else {
        j.verdict = "inconclusive";
        j.why = lo < j.band_lo    ? "the interval holds the band's lower edge"
                : lo <= j.band_hi ? "the interval holds the band's upper edge"
                                  : "the interval holds the pay-off ratio";
    }
    *out = j;
}

bool dg_speed_decisive(double lo, double hi, size_t na, size_t nb, const double *th)
{
    dg_speed_judgement j;
    dg_speed_judge(lo, hi, na, nb, DG_SPEED_DECISIVE_MIN, th, &j);
    if (!(lo > 0) || !(hi <= 1.2 * lo))
        return false;
    if (strcmp(j.verdict, "pays-off") == 0)
        return lo >= 2 * j.pays_off_min;
    if (strcmp(j.verdict, "slower") == 0)
        return hi <= 0.5 * j.band_lo;
    return false;
}
