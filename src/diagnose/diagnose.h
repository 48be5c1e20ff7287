/* Internal diagnosis API shared by the rules (rules.c) and the routing
 * decision (decision.c). docs/rules.md is the catalogue. Nothing here prints
 * or exits; allocation failures set `nomem` and the caller turns that into
 * DG_ERR_NOMEM. */
#ifndef DG_DIAGNOSE_H
#define DG_DIAGNOSE_H

#include "core/core.h"
#include "core/json.h"

#include <math.h>

typedef enum dg_severity { DG_SEV_INFO = 0, DG_SEV_WARN = 1, DG_SEV_FAIL = 2 } dg_severity;

/* Threshold indices; the table of names, defaults and units is in rules.c. */
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

/* One finding as the rules made it; json is the FINDING object. */
typedef struct dg_finding {
    const char *id;
    dg_severity severity;
    int run; /* the compare run it judged, -1 when none */
    cJSON *json;
    bool in_output; /* json now belongs to the output's findings array */
} dg_finding;

/* Everything a rule reads, and the findings made so far. Sections are NULL
 * when null, absent or not an object. */
typedef struct dg_diag {
    const cJSON *rec;
    const char *kind; /* "accept", "run", or "" */
    const cJSON *spec, *env, *gate, *sweep, *soak, *compare, *profile, *supervise;
    double th[TH_COUNT];
    dg_finding *findings;
    int nfindings, cap;
    bool nomem;
} dg_diag;

struct dg_rule;
typedef void (*dg_rule_fn)(dg_diag *d, const struct dg_rule *r);

/* One row of the rule table: adding a rule is adding a row. */
typedef struct dg_rule {
    const char *id;
    dg_severity severity;   /* the usual severity; docs/rules.md says when it differs */
    const char *signal;     /* section and field it reads, for the catalogue */
    const char *thresholds; /* threshold names it reads, comma-separated ("" when none) */
    dg_rule_fn judge;
    const char *hypothesis;
    const char *action;
} dg_rule;

extern const dg_rule dg_rules[];
extern const int dg_rule_count;

/* ---- reading the record -------------------------------------------------- */

/* dg_jpath, dg_jnum, dg_jbool, dg_jstr: core/json.h */

/* ---- making findings ------------------------------------------------------ */

/* Whether a finding with this id (at least min severity) was made; run >= 0
 * narrows it to findings about that compare run. */
bool dg_fired(const dg_diag *d, const char *id, dg_severity min, int run);
/* The first finding with this id, or NULL. */
const dg_finding *dg_finding_get(const dg_diag *d, const char *id);

/* The compare run the route is judged on: the run at the spec's batch when
 * there is one, else the ok run with the highest speedup; -1 when none. */
int dg_route_run(const dg_diag *d);

/* The routing decision (decision.c): the DECISION object, NULL when out of
 * memory (d->nomem is set). */
cJSON *dg_decide(dg_diag *d);

const char *dg_severity_name(dg_severity s);

/* A count from a record as an int; -1 when it is not a finite number in range
 * (a cast of NaN or 1e300 would be undefined). */
static inline int diag_int(double v)
{
    return isfinite(v) && fabs(v) < 2e9 ? (int)v : -1;
}

#endif
