/* Loss agreement of two runs (docs/rules.md "numerics-drift", docs/events.md
 * "Comparing two runs"): the losses both reported at the same (epoch, step),
 * paired and judged against one relative tolerance (the threshold
 * loss_rel_diff_max). One function for compare RUN_A RUN_B and for accept --
 * CMD's cpu/device pair (src/steps/method_compare.c). */
#ifndef DG_ANALYSIS_LOSS_H
#define DG_ANALYSIS_LOSS_H

#include "core/json.h"

#include <stdbool.h>
#include <stddef.h>

/* Fewest common (epoch, step) losses agreement is judged on. */
#define DG_LOSS_MIN_PAIRS 3

typedef struct dg_loss_pairing {
    size_t pairs;            /* (epoch, step) both reported a finite loss at */
    size_t a_only, b_only;   /* reported by one side only */
    double max_abs, max_rel; /* the largest |a - b| and |a - b| / max(|a|, |b|); NAN: no pairs */
    double worst_epoch;      /* where max_rel is; NAN: no pairs */
    double worst_step;       /* NAN: no pairs */
    double tolerance;        /* relative */
    int agree;               /* 1 agree, 0 disagree, -1 not judged (why says so) */
    char why[200];           /* why not judged ("" when judged) */
} dg_loss_pairing;

/* Whether a run record's seeds object says torch was unseeded (its torch
 * seed neither a number nor true): such a run's losses are not comparable
 * with another's. False when seeds is not an object (not reported). */
bool dg_loss_torch_unseeded(const cJSON *seeds);

/* Pairs the losses a and b ([[epoch, step, loss], ...], a run record's
 * supervise.losses; NULL or not an array: none) and judges them against
 * tolerance: agree when every pair's relative difference is at most it.
 * Not judged (agree -1, why set) when `incomparable` is given (the reason
 * the two runs' losses cannot be held against each other, e.g. unseeded),
 * when neither reported a loss, or with fewer than DG_LOSS_MIN_PAIRS pairs.
 * False when out of host memory (out then says nothing was paired). */
bool dg_loss_pair(const cJSON *a, const cJSON *b, double tolerance, const char *incomparable,
                  dg_loss_pairing *out);

/* The pairing as JSON: {pairs, A_ONLY, B_ONLY, max_abs_diff: METRIC(loss),
 * max_rel_diff: METRIC(relative), worst: {epoch, step} | null, tolerance,
 * min_pairs, agree: bool | null, why: str | null}, the one-side counts
 * under the keys a_only and b_only name ("a_only", "cpu_only"). NULL when
 * out of memory. */
cJSON *dg_loss_pairing_json(const dg_loss_pairing *p, const char *a_only, const char *b_only);

#endif
