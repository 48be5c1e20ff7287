/* Internal diagnosis API shared by the rule table and its entry points
 * (rules.c), the rule families (rules_*.c), the rule kit (rulekit.c) and the
 * routing decision (decision.c). The finding store is findings.h, the
 * thresholds thresholds.h. docs/rules.md is the catalogue. Nothing here
 * prints or exits; allocation failures set `nomem` and the caller turns that
 * into DG_ERR_NOMEM.
 *
 * Adding a rule: write its judge in the family file it belongs to (declare it
 * below with that file's group), add its row to dg_rules[] in rules.c, and
 * its entry to docs/rules.md. */
#ifndef DG_DIAGNOSE_H
#define DG_DIAGNOSE_H

#include "core/core.h"
#include "core/json.h"
#include "core/record.h"
#include "diagnose/findings.h"
#include "diagnose/thresholds.h"

#include <math.h>

#define DG_MIB (1024.0 * 1024.0)
#define DG_GIB (1024.0 * DG_MIB)

/* Everything a rule reads (the record's typed view, built once), and the
 * findings made so far. */
typedef struct dg_diag {
    const dg_record_view *v; /* what every judge and the decision read */
    const char *kind;        /* "accept", "run", or "" */
    const char *soak_pfx;    /* where the soak analysis is below the soak section:
                                "soak." (version 1) or "" (version 2), for evidence */
    double th[TH_COUNT];
    dg_findings fs;
    bool nomem; /* set by the kit and the decision; the store has its own */
} dg_diag;

/* Whether the diagnosis ran out of memory anywhere. */
static inline bool dg_diag_nomem(const dg_diag *d)
{
    return d->nomem || d->fs.nomem;
}

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

/* ---- the rule kit (rulekit.c) --------------------------------------------- */

/* dg_jpath, dg_jnum, dg_jbool, dg_jstr: core/json.h */

/* Adds item to obj under key (item NULL or a failed add: d->nomem). */
void dg_put(dg_diag *d, cJSON *obj, const char *key, cJSON *item);

/* A new finding of rule r with a printf-formatted title, in d's store.
 * Returns the FINDING object (owned by the store; NULL when out of memory). */
cJSON *dg_rule_finding(dg_diag *d, const dg_rule *r, dg_severity sev, int run, const char *fmt, ...)
    DG_PRINTF(5, 6);
/* Replaces the finding's "hypothesis" or "action" with a formatted text. */
void dg_rule_text(dg_diag *d, cJSON *f, const char *key, const char *fmt, ...) DG_PRINTF(4, 5);
/* Appends {section, field, value, unit} to the finding's evidence; takes
 * value (NULL: null). f NULL: nothing. */
void dg_ev_add(dg_diag *d, cJSON *f, const char *sec, const char *field, cJSON *value,
               const char *unit);
/* Evidence of a computed number (not finite: null). */
void dg_ev_num(dg_diag *d, cJSON *f, const char *sec, const char *field, double v,
               const char *unit);
/* Evidence of a view number at the printf-formatted field: its value (null
 * when not valid) with the METRIC's unit, or `unit` for a plain number. */
void dg_ev_metric(dg_diag *d, cJSON *f, const char *sec, const char *unit, dg_rec_metric m,
                  const char *fmt, ...) DG_PRINTF(6, 7);
/* Evidence of a view string (NULL: null) at the printf-formatted field. */
void dg_ev_str(dg_diag *d, cJSON *f, const char *sec, const char *s, const char *fmt, ...)
    DG_PRINTF(5, 6);
/* Evidence of a view tri-state bool (-1: null) at the printf-formatted field. */
void dg_ev_bool(dg_diag *d, cJSON *f, const char *sec, int tri, const char *fmt, ...)
    DG_PRINTF(5, 6);
/* Evidence of a recorded item the view points at (NULL: null); arrays and
 * objects that are not metrics are written as their compact JSON text. */
void dg_ev_item(dg_diag *d, cJSON *f, const char *sec, const char *unit, const cJSON *it,
                const char *fmt, ...) DG_PRINTF(6, 7);
/* " (--batch-size 64)": how the program's own command line sets batch,
 * when the record's loader names the option; "" otherwise. Returns buf. */
const char *dg_batch_arg_text(const dg_diag *d, int batch, char *buf, size_t n);
/* Appends to a fixed buffer, keeping it NUL-terminated (truncates quietly). */
void dg_cat(char *buf, size_t n, const char *fmt, ...) DG_PRINTF(3, 4);

/* Whether a finding with this id (at least min severity) was made; run >= 0
 * narrows it to findings about that compare run. */
static inline bool dg_fired(const dg_diag *d, const char *id, dg_severity min, int run)
{
    return dg_findings_fired(&d->fs, id, min, run);
}

/* The device backend of a compare run (the run's, compare's spec, or "the device"). */
const char *dg_run_device(const dg_diag *d, const dg_view_run *run);
/* The compare run the route is judged on: the run at the spec's batch when
 * there is one, else the ok run with the highest speedup; -1 when none. */
int dg_route_run(const dg_diag *d);
/* The batch a sweep's rate is promised at: its best measured good trial at or
 * below the safe batch (doubling and bisection alike; ties to the smaller
 * batch), normally the knee or the throughput maximum, never a batch past
 * the knee whose rate has fallen. *batch and *sps that trial's; false (both
 * NAN) when the sweep has no safe batch or no trial with a rate under it. */
bool dg_sweep_promise(const dg_view_sweep *s, double *batch, double *sps);
/* Whether other processes took at least contention_cpus CPUs during the
 * measured window w (NULL or not measured: false); words (n bytes) then
 * names them: "other processes took 1.8 CPUs of the machine (yes 97%, ...)". */
bool dg_window_contended(const dg_diag *d, const dg_view_window *w, char *words, size_t n);
/* The window a run's or a soak's program judgements rest on: the run's own
 * (a run record), else the soak's (accept). */
const dg_view_window *dg_program_window(const dg_diag *d);
/* Cites a contended window's others_cpus and cpu pressure in finding f. */
void dg_ev_window(dg_diag *d, cJSON *f, const dg_view_window *w);

/* The ops of backend `device` that missed their tolerance at gate level 2,
 * as "bias_add y NMSE 7.3e-15 > 0, ..." into buf; the count (0: every op
 * within its tolerance, -1: no level-2 table for that device). */
int dg_ops_over_tolerance(const dg_diag *d, const char *device, char *buf, size_t n);

/* A count from a record as an int; -1 when it is not a finite number in range
 * (a cast of NaN or 1e300 would be undefined). */
static inline int diag_int(double v)
{
    return isfinite(v) && fabs(v) < 2e9 ? (int)v : -1;
}

/* ---- the rule families: one judge per rule ------------------------------- */

/* rules_env.c: environment, gate and backends */
void dg_judge_env_translated(dg_diag *d, const dg_rule *r);
void dg_judge_env_mixed_arch(dg_diag *d, const dg_rule *r);
void dg_judge_gate_failed(dg_diag *d, const dg_rule *r);
void dg_judge_device_missing(dg_diag *d, const dg_rule *r);
void dg_judge_backend_unavailable(dg_diag *d, const dg_rule *r);
void dg_judge_op_numerics(dg_diag *d, const dg_rule *r);
void dg_judge_link_slow(dg_diag *d, const dg_rule *r);
void dg_judge_device_unstable(dg_diag *d, const dg_rule *r);
void dg_judge_throttled(dg_diag *d, const dg_rule *r);

/* rules_speed.c: the compare runs (speed and numerics) */
void dg_judge_compare_failed(dg_diag *d, const dg_rule *r);
void dg_judge_numerics_drift(dg_diag *d, const dg_rule *r);
void dg_judge_slow_device_data(dg_diag *d, const dg_rule *r);
void dg_judge_speedup_near_one(dg_diag *d, const dg_rule *r);

/* rules_slo.c: an slo record (signable or not, queueing, training beside serving) */
void dg_judge_slo_met(dg_diag *d, const dg_rule *r);
void dg_judge_slo_missed(dg_diag *d, const dg_rule *r);
void dg_judge_slo_inconclusive(dg_diag *d, const dg_rule *r);
void dg_judge_queueing_bound(dg_diag *d, const dg_rule *r);
void dg_judge_training_interference(dg_diag *d, const dg_rule *r);

/* rules_verdict.c: whether a verdict holds (intervals, contention, the baseline) */
void dg_judge_verdict_inconclusive(dg_diag *d, const dg_rule *r);
void dg_judge_contended(dg_diag *d, const dg_rule *r);
void dg_judge_cpu_baseline_unfair(dg_diag *d, const dg_rule *r);
/* The 95% interval ci of a compare run's figure, else its point twice (a
 * record without intervals is judged on its point; NAN when neither). */
void dg_run_interval(dg_rec_metric point, dg_rec_interval ci, double *lo, double *hi);
/* -1: the interval lies below th; 1: at or above; 0: it holds th
 * (inconclusive); 2: not reported. */
int dg_interval_side(double lo, double hi, double th);
/* The 22%/18% rule on the intervals: -1 the device is slow and idle (fires),
 * 1 it is not, 0 inconclusive, 2 not reported. */
int dg_slow_data_side(const dg_diag *d, const dg_view_run *run);

/* rules_memory.c: soak memory, slowdown, memory pressure from other work */
void dg_judge_retained_refs(dg_diag *d, const dg_rule *r);
void dg_judge_working_set_change(dg_diag *d, const dg_rule *r);
void dg_judge_memory_short(dg_diag *d, const dg_rule *r);
void dg_judge_memory_not_emptied(dg_diag *d, const dg_rule *r);
void dg_judge_memory_pressure(dg_diag *d, const dg_rule *r);
void dg_judge_slowing_down(dg_diag *d, const dg_rule *r);

/* rules_sweep.c: the batch sweep */
void dg_judge_sweep_memory(dg_diag *d, const dg_rule *r);
void dg_judge_batch_above_safe(dg_diag *d, const dg_rule *r);

/* rules_profile.c: operators, the data path, measurement noise */
void dg_judge_operator_gap(dg_diag *d, const dg_rule *r);
void dg_judge_data_starved(dg_diag *d, const dg_rule *r);
void dg_judge_noisy_measurement(dg_diag *d, const dg_rule *r);

/* rules_run.c: supervised programs (devgate run) */
void dg_judge_program_failed(dg_diag *d, const dg_rule *r);
void dg_judge_events_lost(dg_diag *d, const dg_rule *r);
void dg_judge_footprint_growth(dg_diag *d, const dg_rule *r);
void dg_judge_cpu_use(dg_diag *d, const dg_rule *r);
void dg_judge_host_sync(dg_diag *d, const dg_rule *r);
void dg_judge_unseeded(dg_diag *d, const dg_rule *r);

/* ---- entry points (rules.c) ---------------------------------------------- */

/* dg_diagnose over a view already built: *result is the object {v,
 * thresholds, findings, decision}, which the caller deletes (NULL on error).
 * The view's record must outlive nothing here: strings are copied. */
dg_status dg_diagnose_view(dg_ctx *ctx, const dg_record_view *v, const char *overrides,
                           cJSON **result);

/* ---- the routing decision (decision.c) ----------------------------------- */

/* The DECISION object from the findings and the record; NULL when out of
 * memory (d->nomem is set). Reads the findings' titles: call it while the
 * store still holds them. */
cJSON *dg_decide(dg_diag *d);

#endif
