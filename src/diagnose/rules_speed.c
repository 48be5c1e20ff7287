/* Rules over the compare runs: did the device pay off at each batch
 * (slow-device-data, speedup-near-one), do its numbers agree with the
 * reference, or accept -- CMD's device losses with its cpu losses
 * (numerics-drift), did every run finish (compare-failed). They
 * read the compare runs of the typed view (core/record.h). */
#include "diagnose/diagnose.h"

#include <string.h>

/* slow-device-data: the method's first threshold, per compare run. */
void dg_judge_slow_device_data(dg_diag *d, const dg_rule *r)
{
    const dg_view_compare *c = &d->v->compare;
    for (int i = 0; i < c->nruns; i++) {
        const dg_view_run *run = &c->runs[i];
        /* Judged on the 95% intervals: only a device surely slow and idle
         * fires; an interval holding a threshold is verdict-inconclusive's. */
        if (!run->ok || !run->reduction_pct.valid || dg_slow_data_side(d, run) != -1)
            continue;
        double red = run->reduction_pct.value;
        const char *dev = dg_run_device(d, run);
        int batch = dg_rec_int(run->batch);
        char step[96];
        if (red >= 0)
            snprintf(step, sizeof step, "%s step time only %.0f%% shorter than cpu", dev, red);
        else
            snprintf(step, sizeof step, "%s step time %.0f%% longer than cpu", dev, -red);
        cJSON *f;
        if (run->busy_fraction.valid) {
            f = dg_rule_finding(d, r, DG_SEV_FAIL, i, "%s and device busy %.0f%% at batch %d", step,
                                100 * run->busy_fraction.value, batch);
        } else {
            f = dg_rule_finding(d, r, DG_SEV_WARN, i, "%s at batch %d (device busy not reported)",
                                step, batch);
            dg_rule_text(d, f, "action",
                         "%s; the busy fraction was not reported (the backend has no events), so "
                         "this is judged on the step time alone",
                         r->action);
        }
        dg_ev_metric(d, f, "compare", "%", run->reduction_pct, "runs[%d].step_time_reduction_pct",
                     i);
        dg_ev_metric(d, f, "compare", "fraction", run->busy_fraction, "runs[%d].busy_fraction", i);
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
    const dg_view_profile *p = &d->v->profile;
    for (int i = 0; i < c->nruns; i++) {
        const dg_view_run *run = &c->runs[i];
        double lo, hi;
        dg_run_interval(run->speedup, run->speedup_ci, &lo, &hi);
        if (!run->ok || !run->speedup.valid ||
            dg_interval_side(lo, hi, d->th[TH_SPEEDUP_MIN]) != -1 ||
            dg_fired(d, "slow-device-data", DG_SEV_INFO, i))
            continue;
        double sp = run->speedup.value;
        const char *dev = dg_run_device(d, run);
        int batch = dg_rec_int(run->batch);
        cJSON *f = sp < 1 ? dg_rule_finding(d, r, DG_SEV_WARN, i,
                                            "%s slower than cpu: %.2fx at batch %d", dev, sp, batch)
                          : dg_rule_finding(d, r, DG_SEV_WARN, i, "%s only %.2fx cpu at batch %d",
                                            dev, sp, batch);
        dg_ev_metric(d, f, "compare", "x", run->speedup, "runs[%d].speedup", i);
        dg_ev_metric(d, f, "compare", "fraction", run->busy_fraction, "runs[%d].busy_fraction", i);
        dg_ev_metric(d, f, "compare", "ms", run->cpu_step_ms, "runs[%d].cpu.step_ms", i);
        dg_ev_metric(d, f, "compare", "ms", run->device_step_ms, "runs[%d].device.step_ms", i);
        dg_ev_metric(d, f, "compare", "samples", run->batch, "runs[%d].batch", i);
        if (p->sync_per_step.valid)
            dg_ev_metric(d, f, "profile", "sync points/step", p->sync_per_step,
                         "sync_points.per_step");
    }
}

/* numerics-drift on accept -- CMD's RUN (its loss: the cpu side's losses
 * against the device side's at the same steps): the largest relative
 * difference above loss_rel_diff_max as used (overrides included), when the
 * two sides' losses were comparable (loss.agree not null). A warn, not the
 * fixture's fail: devgate cannot know whether a user's program must match
 * point by point (the method's condition), and an ordinary model with dropout
 * differs by design (the cpu's and the device's generators draw other masks
 * from one seed), so the drift is named and the route left to the speed. */
static void loss_drift(dg_diag *d, const dg_rule *r, int i, const dg_view_run *run)
{
    const cJSON *j = run->json;
    dg_rec_metric rel = dg_rec_num(j, DG_P_COMPARE_RUNS_LOSS_MAX_REL_DIFF);
    dg_rec_metric n = dg_rec_num(j, DG_P_COMPARE_RUNS_LOSS_PAIRS);
    dg_rec_metric ep = dg_rec_num(j, DG_P_COMPARE_RUNS_LOSS_WORST_EPOCH);
    dg_rec_metric st = dg_rec_num(j, DG_P_COMPARE_RUNS_LOSS_WORST_STEP);
    double tol = d->th[TH_LOSS_REL_DIFF_MAX];
    if (!run->ok || dg_rec_bool(j, DG_P_COMPARE_RUNS_LOSS_AGREE) < 0 || !rel.valid ||
        !(rel.value > tol))
        return;
    const char *dev = dg_run_device(d, run);
    char where[64] = "";
    if (ep.valid && st.valid)
        snprintf(where, sizeof where, " at epoch %d step %d", dg_rec_int(ep), dg_rec_int(st));
    cJSON *f =
        dg_rule_finding(d, r, DG_SEV_WARN, i,
                        "the command's %s loss drifts from its cpu loss by %.2g (relative%s) "
                        "over %d common steps at batch %d, above loss_rel_diff_max %.2g",
                        dev, rel.value, where, dg_rec_int(n), dg_rec_int(run->batch), tol);
    dg_rule_text(d, f, "hypothesis",
                 "dtype or precision: the %s side trains in another precision (autocast, "
                 "float16/bfloat16, TF32) or draws other random numbers than the cpu side; "
                 "reduction order alone moves early fp32 losses by far less than %.2g",
                 dev, tol);
    dg_rule_text(d, f, "action",
                 "look for autocast, .half()/.bfloat16() and TF32 "
                 "(torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) on the "
                 "%s path, and random draws made on the device (dropout, augmentation: the cpu's "
                 "and the device's generators give other numbers for one seed); unify the dtype "
                 "and run accept again, or accept the platform difference if the losses need not "
                 "match point by point; if they must, keep the device for preprocessing only and "
                 "train elsewhere",
                 dev);
    dg_ev_metric(d, f, "compare", "relative", rel, "runs[%d].loss.max_rel_diff", i);
    dg_ev_metric(d, f, "compare", "", n, "runs[%d].loss.pairs", i);
    dg_ev_metric(d, f, "compare", "", ep, "runs[%d].loss.worst.epoch", i);
    dg_ev_metric(d, f, "compare", "", st, "runs[%d].loss.worst.step", i);
    dg_ev_metric(d, f, "compare", "samples", run->batch, "runs[%d].batch", i);
}

/* numerics-drift: a run beyond tolerance, with the figures that drifted. */
void dg_judge_numerics_drift(dg_diag *d, const dg_rule *r)
{
    const dg_view_compare *c = &d->v->compare;
    for (int i = 0; i < c->nruns; i++) {
        const dg_view_run *run = &c->runs[i];
        if (dg_rec_obj(run->json, DG_P_COMPARE_RUNS_LOSS)) {
            loss_drift(d, r, i, run);
            continue;
        }
        if (!run->ok || !run->verdict || strcmp(run->verdict, "drift") != 0)
            continue;
        char figs[400] = "";
        for (int k = 0; k < run->nfigures; k++) {
            const dg_view_figure *fig = &run->figures[k];
            if (fig->value.valid)
                dg_cat(figs, sizeof figs, "%s%s %.1e", figs[0] ? ", " : "", fig->name,
                       fig->value.value);
            else
                dg_cat(figs, sizeof figs, "%s%s not finite", figs[0] ? ", " : "", fig->name);
        }
        const char *against = run->reference_ran == 1 ? "float64" : "cpu";
        char tol[80] = "";
        if (c->loss_tolerance.valid && c->param_tolerance.valid)
            snprintf(tol, sizeof tol, " (tolerance loss %.0e, params %.0e)",
                     c->loss_tolerance.value, c->param_tolerance.value);
        /* Which ops the drift comes from, when the gate checked each (level 2). */
        char ops[400], why[480] = "";
        int over = dg_ops_over_tolerance(d, dg_run_device(d, run), ops, sizeof ops);
        if (over > 0)
            snprintf(why, sizeof why, "; ops over their tolerance: %s", ops);
        else if (over == 0)
            snprintf(why, sizeof why,
                     "; every op within its tolerance at gate level 2 (the "
                     "drift is reduction order, not a wrong kernel)");
        cJSON *f = dg_rule_finding(d, r, DG_SEV_FAIL, i, "%s drifts from %s at batch %d: %s%s%s",
                                   dg_run_device(d, run), against, dg_rec_int(run->batch),
                                   figs[0] ? figs : "figures not listed", tol, why);
        for (int k = 0; k < run->nfigures; k++)
            dg_ev_metric(d, f, "compare", "relative", run->figures[k].value, "runs[%d].%s", i,
                         run->figures[k].name);
        dg_ev_str(d, f, "compare", run->verdict, "runs[%d].verdict", i);
        dg_ev_metric(d, f, "compare", "relative", c->loss_tolerance, "thresholds.loss_tolerance");
        dg_ev_metric(d, f, "compare", "relative", c->param_tolerance, "thresholds.param_tolerance");
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
