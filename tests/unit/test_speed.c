/* The fixture comparison's early stop (dg_speed_decisive, src/analysis/speed.c):
 * only a pays-off verdict with its interval at twice the pay-off ratio, or a
 * slower one at half the equivalence band, each with a narrow interval and at
 * least DG_SPEED_DECISIVE_MIN samples a side, ends the repetitions early. */
#include "analysis/speed.h"

#include "check.h"

#include <math.h>

int main(void)
{
    dg_speed_judgement j;
    dg_speed_judge(1, 1, 5, 5, 2, NULL, &j);
    double p = j.pays_off_min, b = j.band_lo;
    CHECK(p > 1 && b < 1 && b > 0.5);
    size_t n = DG_SPEED_DECISIVE_MIN;
    /* pays off far above the ratio, narrow: decisive */
    CHECK(dg_speed_decisive(10 * p, 11 * p, n, n, NULL));
    CHECK(dg_speed_decisive(2 * p, 2.3 * p, n, n, NULL));
    /* pays off, but too near the ratio for fewer repetitions to stand */
    CHECK(!dg_speed_decisive(1.9 * p, 2.1 * p, n, n, NULL));
    /* pays off far above, but the interval is wide: the figure is not firm */
    CHECK(!dg_speed_decisive(10 * p, 12.5 * p, n, n, NULL));
    /* slower, far below the band: decisive; near it: not */
    CHECK(dg_speed_decisive(0.1 * b, 0.11 * b, n, n, NULL));
    CHECK(dg_speed_decisive(0.45 * b, 0.5 * b, n, n, NULL));
    CHECK(!dg_speed_decisive(0.5 * b, 0.55 * b, n, n, NULL));
    /* too few samples a side, whatever the interval */
    CHECK(!dg_speed_decisive(10 * p, 11 * p, n - 1, n, NULL));
    CHECK(!dg_speed_decisive(10 * p, 11 * p, n, n - 1, NULL));
    /* no difference, no gain, inconclusive, unknown: run the whole plan */
    CHECK(!dg_speed_decisive(0.99, 1.01, 9, 9, NULL));
    CHECK(!dg_speed_decisive(1.12, 1.15, 9, 9, NULL)); /* faster, below the pay-off ratio */
    CHECK(!dg_speed_decisive(0.9, 1.6, 9, 9, NULL));
    CHECK(!dg_speed_decisive(NAN, 2, 9, 9, NULL));
    CHECK(!dg_speed_decisive(0, 0, 9, 9, NULL));
    /* the thresholds a record carries move the margin */
    double th[TH_COUNT];
    for (int i = 0; i < TH_COUNT; i++)
        th[i] = dg_thresholds[i].value;
    th[TH_SPEEDUP_MIN] = 8;
    th[TH_DEVICE_MIN_REDUCTION_PCT] = 0;
    CHECK(!dg_speed_decisive(10, 11, n, n, th)); /* 10 < 2 x 8 */
    CHECK(dg_speed_decisive(17, 18, n, n, th));
    CHECK_DONE();
}
