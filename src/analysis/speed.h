/* The speed verdict of a throughput ratio from its 95% interval (docs/rules.md,
 * "Speed verdicts"): one judge for the fixture's cpu/device compare and for
 * compare RUN_A RUN_B, so both say pays off, no gain, no difference, slower or
 * inconclusive by the same thresholds. */
#ifndef DG_ANALYSIS_SPEED_H
#define DG_ANALYSIS_SPEED_H

#include "diagnose/thresholds.h"

#include <stdbool.h>
#include <stddef.h>

/* Fewest samples a side for an interval a verdict on two records may rest on
 * (compare RUN_A RUN_B; the fixture judges its own repetitions, at least 2). */
#define DG_SPEED_MIN_SAMPLES 5

typedef struct dg_speed_judgement {
    const char *verdict;     /* "pays-off", "no-gain", "no-difference", "slower", "inconclusive",
                                "unknown" */
    const char *why;         /* a phrase: what in the interval (or the samples) decided it */
    double pays_off_min;     /* max(speedup_min, 1 / (1 - device_min_reduction_pct / 100)) */
    double band_lo, band_hi; /* the equivalence band: 1 / (1 + e), 1 + e; e = equivalence_pct */
} dg_speed_judgement;

/* Judges the ratio "new over old" (B over A, device over cpu; above 1 is
 * faster) from its interval [lo, hi], drawn from na and nb samples, by the
 * thresholds th (TH_COUNT values; NULL: the defaults):
 *   slower         hi below band_lo
 *   pays-off       lo at or above pays_off_min
 *   no-difference  the interval inside the band
 *   no-gain        lo above band_hi and hi below pays_off_min (faster, not enough)
 *   inconclusive   the interval holds band_lo, band_hi or pays_off_min; or a side
 *                  has fewer than min_n samples ("n too small")
 *   unknown        no interval (lo or hi not finite).
 * Never fails; out is always filled. */
void dg_speed_judge(double lo, double hi, size_t na, size_t nb, size_t min_n, const double *th,
                    dg_speed_judgement *out);

/* Fewest timed repetitions a side before the fixture's comparison may stop
 * early (the quick tier's whole plan). */
#define DG_SPEED_DECISIVE_MIN 3
/* Whether a comparison may stop before its planned repetitions: both sides
 * have DG_SPEED_DECISIVE_MIN samples, the verdict is pays-off with lo at
 * least twice pays_off_min, or slower with hi at most half of band_lo (a
 * margin more repetitions do not cross), and the interval is narrow (hi at
 * most 1.2 lo), so the figure it reports is as firm as the verdict. */
bool dg_speed_decisive(double lo, double hi, size_t na, size_t nb, const double *th);

#endif
