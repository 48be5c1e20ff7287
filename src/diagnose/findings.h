/* The finding store: the findings the rules make, in the order they were
 * made, each a FINDING object (docs/schema/report.md) with its id, severity
 * and the compare run it judged. The rules (rules.c and its families) add to
 * it, the decision (decision.c) reads it; it knows neither. Allocation
 * failures set `nomem`: the caller turns that into DG_ERR_NOMEM. */
#ifndef DG_FINDINGS_H
#define DG_FINDINGS_H

#include "core/json.h"

#include <stdbool.h>

typedef enum dg_severity { DG_SEV_INFO = 0, DG_SEV_WARN = 1, DG_SEV_FAIL = 2 } dg_severity;

/* One finding as the rules made it; json is the FINDING object. */
typedef struct dg_finding {
    const char *id; /* the rule's id (static storage) */
    dg_severity severity;
    int run; /* the compare run it judged, -1 when none */
    cJSON *json;
    bool in_output; /* json now belongs to the output's findings array */
} dg_finding;

typedef struct dg_findings {
    dg_finding *items;
    int n, cap;
    bool nomem;
} dg_findings;

/* "info", "warn" or "fail". */
const char *dg_severity_name(dg_severity s);

/* Appends a finding {id, severity, title, evidence: [], hypothesis, action};
 * id must outlive the store. Returns its FINDING object, which the store owns
 * (NULL when out of memory: fs->nomem is set). */
cJSON *dg_findings_add(dg_findings *fs, const char *id, dg_severity sev, int run, const char *title,
                       const char *hypothesis, const char *action);

/* Whether a finding with this id (at least min severity) was made; run >= 0
 * narrows it to findings about that compare run. */
bool dg_findings_fired(const dg_findings *fs, const char *id, dg_severity min, int run);

/* Moves the findings into the JSON array arr, most severe first and stable
 * within a severity; they stay readable in the store until arr is deleted.
 * Sets fs->nomem when one could not be added. */
void dg_findings_emit(dg_findings *fs, cJSON *arr);

/* Frees the findings not handed to an array by dg_findings_emit; NULL is fine. */
void dg_findings_free(dg_findings *fs);

#endif
