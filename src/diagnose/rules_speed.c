/* Rules over the compare runs: did the device pay off at each batch
 * (slow-device-data, speedup-near-one), do its numbers agree with the
 * reference (numerics-drift), did every run finish (compare-failed). */
#include "diagnose/diagnose.h"

#include <string.h>

/* slow-device-data: the method's first threshold, per compare run. */
void dg_judge_slow_device_data(dg_diag *d, const dg_rule *r)
{
    const cJSON *runs = dg_diag_compare_runs(d);
    for (int i = 0; i < cJSON_GetArraySize(runs); i++) {
        const cJSON *run = cJSON_GetArrayItem(runs, i);
        double red = dg_jnum(run, "step_time_reduction_pct");
        double busy = dg_jnum(run, "busy_fraction");
        /* Judged on the 95% intervals: only a device surely slow and idle
         * fires; an interval holding a threshold is verdict-inconclusive's. */
        if (!dg_run_ok(run) || !isfinite(red) || dg_slow_data_side(d, run) != -1)
            continue;
        const char *dev = dg_run_device(d, run);
        int batch = diag_int(dg_jnum(run, "batch"));
        char step[96];
        if (red >= 0)
            snprintf(step, sizeof step, "%s step time only %.0f%% shorter than cpu", dev, red);
        else
            snprintf(step, sizeof step, "%s step time %.0f%% longer than cpu", dev, -red);
        cJSON *f;
        if (isfinite(busy)) {
            f = dg_rule_finding(d, r, DG_SEV_FAIL, i, "%s and device busy %.0f%% at batch %d", step,
                                100 * busy, batch);
        } else {
            f = dg_rule_finding(d, r, DG_SEV_WARN, i, "%s at batch %d (device busy not reported)",
                                step, batch);
            dg_rule_text(d, f, "action",
                         "%s; the busy fraction was not reported (the backend has no events), so "
                         "this is judged on the step time alone",
                         r->action);
        }
        dg_ev_path(d, f, "compare", d->compare, "%", "runs[%d].step_time_reduction_pct", i);
        dg_ev_path(d, f, "compare", d->compare, "fraction", "runs[%d].busy_fraction", i);
        dg_ev_path(d, f, "compare", d->compare, "ms", "runs[%d].cpu.step_ms", i);
        dg_ev_path(d, f, "compare", d->compare, "ms", "runs[%d].device.step_ms", i);
        dg_ev_path(d, f, "compare", d->compare, "samples", "runs[%d].batch", i);
    }
}

/* speedup-near-one: the device is busy (or slow-device-data would have said
 * so) and still not faster enough. Runs after slow-device-data in the table. */
void dg_judge_speedup_near_one(dg_diag *d, const dg_rule *r)
{
    const cJSON *runs = dg_diag_compare_runs(d);
    for (int i = 0; i < cJSON_GetArraySize(runs); i++) {
        const cJSON *run = cJSON_GetArrayItem(runs, i);
        double sp = dg_jnum(run, "speedup"), lo, hi;
        dg_run_interval(run, "speedup", &lo, &hi);
        if (!dg_run_ok(run) || !isfinite(sp) ||
            dg_interval_side(lo, hi, d->th[TH_SPEEDUP_MIN]) != -1 ||
            dg_fired(d, "slow-device-data", DG_SEV_INFO, i))
            continue;
        const char *dev = dg_run_device(d, run);
        int batch = diag_int(dg_jnum(run, "batch"));
        cJSON *f = sp < 1 ? dg_rule_finding(d, r, DG_SEV_WARN, i,
                                            "%s slower than cpu: %.2fx at batch %d", dev, sp, batch)
                          : dg_rule_finding(d, r, DG_SEV_WARN, i, "%s only %.2fx cpu at batch %d",
                                            dev, sp, batch);
        dg_ev_path(d, f, "compare", d->compare, "x", "runs[%d].speedup", i);
        dg_ev_path(d, f, "compare", d->compare, "fraction", "runs[%d].busy_fraction", i);
        dg_ev_path(d, f, "compare", d->compare, "ms", "runs[%d].cpu.step_ms", i);
        dg_ev_path(d, f, "compare", d->compare, "ms", "runs[%d].device.step_ms", i);
        dg_ev_path(d, f, "compare", d->compare, "samples", "runs[%d].batch", i);
        if (isfinite(dg_jnum(d->profile, "sync_points.per_step")))
            dg_ev_path(d, f, "profile", d->profile, "sync points/step", "sync_points.per_step");
    }
}

/* numerics-drift: a run beyond tolerance, with the figures that drifted. */
void dg_judge_numerics_drift(dg_diag *d, const dg_rule *r)
{
    const cJSON *runs = dg_diag_compare_runs(d);
    double ltol = dg_jnum(d->compare, "thresholds.loss_tolerance");
    double ptol = dg_jnum(d->compare, "thresholds.param_tolerance");
    for (int i = 0; i < cJSON_GetArraySize(runs); i++) {
        const cJSON *run = cJSON_GetArrayItem(runs, i);
        const char *verdict = dg_jstr(run, "verdict");
        if (!dg_run_ok(run) || !verdict || strcmp(verdict, "drift") != 0)
            continue;
        char figs[400] = "";
        const cJSON *drift = cJSON_GetObjectItemCaseSensitive(run, "drift");
        const cJSON *fig;
        cJSON_ArrayForEach(fig, drift)
        {
            if (!cJSON_IsString(fig))
                continue;
            double v = dg_jnum(run, fig->valuestring);
            if (isfinite(v))
                dg_cat(figs, sizeof figs, "%s%s %.1e", figs[0] ? ", " : "", fig->valuestring, v);
            else
                dg_cat(figs, sizeof figs, "%s%s not finite", figs[0] ? ", " : "", fig->valuestring);
        }
        const char *against = dg_jbool(run, "reference.ran") == 1 ? "float64" : "cpu";
        char tol[80] = "";
        if (isfinite(ltol) && isfinite(ptol))
            snprintf(tol, sizeof tol, " (tolerance loss %.0e, params %.0e)", ltol, ptol);
        cJSON *f = dg_rule_finding(d, r, DG_SEV_FAIL, i, "%s drifts from %s at batch %d: %s%s",
                                   dg_run_device(d, run), against, diag_int(dg_jnum(run, "batch")),
                                   figs[0] ? figs : "figures not listed", tol);
        cJSON_ArrayForEach(fig, drift)
        {
            if (cJSON_IsString(fig))
                dg_ev_path(d, f, "compare", d->compare, "relative", "runs[%d].%s", i,
                           fig->valuestring);
        }
        dg_ev_path(d, f, "compare", d->compare, NULL, "runs[%d].verdict", i);
        dg_ev_path(d, f, "compare", d->compare, "relative", "thresholds.loss_tolerance");
        dg_ev_path(d, f, "compare", d->compare, "relative", "thresholds.param_tolerance");
    }
}

/* compare-failed: the compare step or one of its runs did not finish. */
void dg_judge_compare_failed(dg_diag *d, const dg_rule *r)
{
    if (!d->compare)
        return;
    const cJSON *runs = dg_diag_compare_runs(d);
    bool any = false;
    for (int i = 0; i < cJSON_GetArraySize(runs); i++) {
        const cJSON *run = cJSON_GetArrayItem(runs, i);
        if (!cJSON_IsObject(run) || dg_run_ok(run))
            continue;
        any = true;
        const char *who = dg_jstr(run, "failed");
        const char *err = dg_jstr(run, "error");
        cJSON *f =
            dg_rule_finding(d, r, DG_SEV_FAIL, i, "compare failed at batch %d on %s: %s",
                            diag_int(dg_jnum(run, "batch")), who ? who : "an unnamed backend",
                            err ? err : "no error reported");
        dg_ev_path(d, f, "compare", d->compare, NULL, "runs[%d].status", i);
        dg_ev_path(d, f, "compare", d->compare, NULL, "runs[%d].failed", i);
        dg_ev_path(d, f, "compare", d->compare, NULL, "runs[%d].error", i);
    }
    const char *st = dg_jstr(d->compare, "status");
    if (!any && st && strcmp(st, "ok") != 0) {
        const char *err = dg_jstr(d->compare, "error");
        cJSON *f = dg_rule_finding(d, r, DG_SEV_FAIL, -1, "compare failed (%s): %s", st,
                                   err ? err : "no error reported");
        dg_ev_path(d, f, "compare", d->compare, NULL, "status");
        dg_ev_path(d, f, "compare", d->compare, NULL, "error");
    }
}
