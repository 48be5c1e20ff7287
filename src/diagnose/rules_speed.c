/* Rules over the compare runs: did the device pay off at each batch
 * (slow-device-data, speedup-near-one), do its numbers agree with the
 * reference (numerics-drift), did every run finish (compare-failed). */
#include "diagnose/diagnose.h"

#include <string.h>

/* slow-device-data: the method's first threshold, per compare run. */
void dg_judge_slow_device_data(dg_diag *d, const dg_rule *r)
{
    const dg_view_compare *c = &d->v->compare;
    for (int i = 0; i < c->nruns; i++) {
        const dg_view_run *run = &c->runs[i];
        dg_rec_metric red = run->reduction_pct, busy = run->busy_fraction;
        if (!run->ok || !red.valid || red.value >= d->th[TH_DEVICE_MIN_REDUCTION_PCT])
            continue;
        if (busy.valid && busy.value >= d->th[TH_DEVICE_BUSY_MIN])
            continue; /* busy but not faster: speedup-near-one's business */
        const char *dev = dg_run_device(d, run);
        int batch = dg_rec_int(run->batch);
        char step[96];
        if (red.value >= 0)
            snprintf(step, sizeof step, "%s step time only %.0f%% shorter than cpu", dev,
                     red.value);
        else
            snprintf(step, sizeof step, "%s step time %.0f%% longer than cpu", dev, -red.value);
        cJSON *f;
        if (busy.valid) {
            f = dg_rule_finding(d, r, DG_SEV_FAIL, i, "%s and device busy %.0f%% at batch %d", step,
                                100 * busy.value, batch);
        } else {
            f = dg_rule_finding(d, r, DG_SEV_WARN, i, "%s at batch %d (device busy not reported)",
                                step, batch);
            dg_rule_text(d, f, "action",
                         "%s; the busy fraction was not reported (the backend has no events), so "
                         "this is judged on the step time alone",
                         r->action);
        }
        dg_ev_metric(d, f, "compare", "%", red, "runs[%d].step_time_reduction_pct", i);
        dg_ev_metric(d, f, "compare", "fraction", busy, "runs[%d].busy_fraction", i);
        dg_ev_metric(d, f, "compare", "ms", run->cpu_step_ms, "runs[%d].cpu.step_ms", i);
        dg_ev_metric(d, f, "compare", "ms", run->device_step_ms, "runs[%d].device.step_ms", i);
        dg_ev_metric(d, f, "compare", "samples", run->batch, "runs[%d].batch", i);
    }
}

/* speedup-near-one: the device is busy (or slow-device-data would have said
 * so) and still not faster enough. Runs after slow-device-data in the table. */
void dg_judge_speedup_near_one(dg_diag *d, const dg_rule *r)
{
    const dg_view_compare *c = &d->v->compare;
    for (int i = 0; i < c->nruns; i++) {
        const dg_view_run *run = &c->runs[i];
        dg_rec_metric sp = run->speedup;
        if (!run->ok || !sp.valid || sp.value >= d->th[TH_SPEEDUP_MIN] ||
            dg_fired(d, "slow-device-data", DG_SEV_INFO, i))
            continue;
        const char *dev = dg_run_device(d, run);
        int batch = dg_rec_int(run->batch);
        cJSON *f =
            sp.value < 1
                ? dg_rule_finding(d, r, DG_SEV_WARN, i, "%s slower than cpu: %.2fx at batch %d",
                                  dev, sp.value, batch)
                : dg_rule_finding(d, r, DG_SEV_WARN, i, "%s only %.2fx cpu at batch %d", dev,
                                  sp.value, batch);
        dg_ev_metric(d, f, "compare", "x", sp, "runs[%d].speedup", i);
        dg_ev_metric(d, f, "compare", "fraction", run->busy_fraction, "runs[%d].busy_fraction", i);
        dg_ev_metric(d, f, "compare", "ms", run->cpu_step_ms, "runs[%d].cpu.step_ms", i);
        dg_ev_metric(d, f, "compare", "ms", run->device_step_ms, "runs[%d].device.step_ms", i);
        dg_ev_metric(d, f, "compare", "samples", run->batch, "runs[%d].batch", i);
        if (d->v->profile.sync_per_step.valid)
            dg_ev_metric(d, f, "profile", "sync points/step", d->v->profile.sync_per_step,
                         "sync_points.per_step");
    }
}

/* numerics-drift: a run beyond tolerance, with the figures that drifted. The
 * figures are named by the record (drift: ["loss_vs_ref.device", ...]): paths
 * below the run that the record itself lists. */
void dg_judge_numerics_drift(dg_diag *d, const dg_rule *r)
{
    const dg_view_compare *c = &d->v->compare;
    dg_rec_metric ltol = c->loss_tolerance, ptol = c->param_tolerance;
    for (int i = 0; i < c->nruns; i++) {
        const dg_view_run *run = &c->runs[i];
        if (!run->ok || !run->verdict || strcmp(run->verdict, "drift") != 0)
            continue;
        char figs[400] = "";
        const cJSON *fig;
        cJSON_ArrayForEach(fig, run->drift)
        {
            if (!cJSON_IsString(fig))
                continue;
            double v = dg_jnum(run->json, fig->valuestring);
            if (isfinite(v))
                dg_cat(figs, sizeof figs, "%s%s %.1e", figs[0] ? ", " : "", fig->valuestring, v);
            else
                dg_cat(figs, sizeof figs, "%s%s not finite", figs[0] ? ", " : "", fig->valuestring);
        }
        const char *against = run->reference_ran == 1 ? "float64" : "cpu";
        char tol[80] = "";
        if (ltol.valid && ptol.valid)
            snprintf(tol, sizeof tol, " (tolerance loss %.0e, params %.0e)", ltol.value,
                     ptol.value);
        cJSON *f = dg_rule_finding(d, r, DG_SEV_FAIL, i, "%s drifts from %s at batch %d: %s%s",
                                   dg_run_device(d, run), against, dg_rec_int(run->batch),
                                   figs[0] ? figs : "figures not listed", tol);
        cJSON_ArrayForEach(fig, run->drift)
        {
            if (cJSON_IsString(fig))
                dg_ev_item(d, f, "compare", "relative", dg_jpath(run->json, fig->valuestring),
                           "runs[%d].%s", i, fig->valuestring);
        }
        dg_ev_str(d, f, "compare", run->verdict, "runs[%d].verdict", i);
        dg_ev_metric(d, f, "compare", "relative", ltol, "thresholds.loss_tolerance");
        dg_ev_metric(d, f, "compare", "relative", ptol, "thresholds.param_tolerance");
    }
}

/* compare-failed: the compare step or one of its runs did not finish. */
void dg_judge_compare_failed(dg_diag *d, const dg_rule *r)
{
    const dg_view_compare *c = &d->v->compare;
    if (!c->present)
        return;
    bool any = false;
    for (int i = 0; i < c->nruns; i++) {
        const dg_view_run *run = &c->runs[i];
        if (!cJSON_IsObject(run->json) || run->ok)
            continue;
        any = true;
        cJSON *f = dg_rule_finding(d, r, DG_SEV_FAIL, i, "compare failed at batch %d on %s: %s",
                                   dg_rec_int(run->batch),
                                   run->failed ? run->failed : "an unnamed backend",
                                   run->error ? run->error : "no error reported");
        dg_ev_str(d, f, "compare", run->status, "runs[%d].status", i);
        dg_ev_str(d, f, "compare", run->failed, "runs[%d].failed", i);
        dg_ev_str(d, f, "compare", run->error, "runs[%d].error", i);
    }
    if (!any && c->status && strcmp(c->status, "ok") != 0) {
        cJSON *f = dg_rule_finding(d, r, DG_SEV_FAIL, -1, "compare failed (%s): %s", c->status,
                                   c->error ? c->error : "no error reported");
        dg_ev_str(d, f, "compare", c->status, "status");
        dg_ev_str(d, f, "compare", c->error, "error");
    }
}
