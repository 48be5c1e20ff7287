/* The thresholds the rules judge by: their names, defaults, units and
 * accepted ranges (one table, thresholds.c), and the parser of the
 * NAME=VALUE,... overrides (`--threshold`). docs/rules.md lists them. */
#ifndef DG_THRESHOLDS_H
#define DG_THRESHOLDS_H

#include "core/core.h"

#include <stdbool.h>

/* Threshold indices; the table of names, defaults and units is in thresholds.c. */
typedef enum dg_threshold_id {
    TH_DEVICE_MIN_REDUCTION_PCT,
    TH_DEVICE_BUSY_MIN,
    TH_MEM_EPOCHS,
    TH_MEM_GROWTH_PCT,
    TH_SLOWDOWN_RATIO,
    TH_FALLBACK_SHARE,
    TH_FALLBACK_SHARE_FAIL,
    TH_SPEEDUP_MIN,
    TH_DATA_WAIT_SHARE,
    TH_NOISE_IQR_RATIO,
    TH_BUSY_PROCESS_CPU_PCT,
    TH_OTHER_MEM_SHARE,
    TH_SWAP_GROWTH_MIB,
    TH_PSI_SOME_PCT,
    TH_CONTENTION_CPUS,
    TH_CPU_PEAK_FRACTION_MIN,
    TH_CPU_BUSY_MIN_PCT,
    TH_HOST_READS_PER_STEP,
    TH_EQUIVALENCE_PCT,
    TH_SLO_QUEUE_RATIO,
    TH_SLO_INTERFERENCE_PCT,
    TH_LINK_MIN_FRACTION,
    TH_UNSTABLE_DRIFT_PCT,
    TH_THROTTLE_MIN_SHARE,
    TH_LOSS_REL_DIFF_MAX,
    TH_COUNT
} dg_threshold_id;

typedef struct dg_threshold {
    const char *name;
    double value; /* the default */
    const char *unit;
    double lo, hi;     /* accepted range of an override, inclusive */
    bool integer;      /* an override must be a whole number */
    const char *rules; /* the rule ids that read it */
    const char *doc;
} dg_threshold;

extern const dg_threshold dg_thresholds[TH_COUNT];

/* The index of the threshold named by the n bytes at name; -1 when none. */
int dg_threshold_index(const char *name, size_t n);

/* Fills th with the defaults, then applies the overrides in spec
 * ("NAME=VALUE,..."; NULL or empty: none). DG_ERR_USAGE with a message naming
 * the item for an unknown name, a value that is not a number, out of range or
 * not whole where it must be. */
dg_status dg_thresholds_parse(dg_ctx *ctx, const char *spec, double th[TH_COUNT]);

#endif
