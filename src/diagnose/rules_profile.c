/* Rules over the profile (and the measurements it shares with the sweep and
 * the environment): ops on the cpu fallback (operator-gap), the step waiting
 * for data (data-starved), noisy step times (noisy-measurement). */
#include "diagnose/diagnose.h"
#include "measure/measure.h"

#include <stdlib.h>
#include <string.h>

typedef struct op_share {
    const char *op;
    double share;
} op_share;

static int by_share_desc(const void *a, const void *b)
{
    double x = ((const op_share *)a)->share, y = ((const op_share *)b)->share;
    return x < y ? 1 : x > y ? -1 : 0;
}

void dg_judge_operator_gap(dg_diag *d, const dg_rule *r)
{
    const dg_view_profile *p = &d->v->profile;
    /* Fallback rows of the profile's op table, summed per op name. */
    op_share top[32];
    int ntop = 0;
    double share = 0;
    bool share_known = false;
    for (int i = 0; i < p->nops; i++) {
        const dg_view_op *row = &p->ops[i];
        if (!row->share.valid)
            continue;
        double s = row->share.value;
        share_known = true;
        if (row->fallback != 1)
            continue;
        share += s;
        const char *op = row->op ? row->op : "?";
        int k = 0;
        while (k < ntop && strcmp(top[k].op, op) != 0)
            k++;
        if (k == ntop && ntop < (int)(sizeof top / sizeof *top))
            top[ntop++] = (op_share){op, 0};
        if (k < ntop)
            top[k].share += s;
    }
    qsort(top, (size_t)ntop, sizeof *top, by_share_desc);

    /* The census (profile) and the compare runs say whether anything fell back. */
    int ncensus = p->nfallbacks;
    const dg_view_compare *c = &d->v->compare;
    int cmp_run = -1;
    double cmp_calls = 0;
    for (int i = 0; i < c->nruns; i++) {
        const dg_rec_metric n = c->runs[i].device_fallbacks;
        if (n.valid && n.value > cmp_calls) {
            cmp_calls = n.value;
            cmp_run = i;
        }
    }
    if (ntop == 0 && ncensus == 0 && cmp_run < 0)
        return;

    char names[240] = "";
    for (int k = 0; k < ntop && k < 3; k++)
        dg_cat(names, sizeof names, "%s%s %.0f%%", k ? ", " : "", top[k].op, 100 * top[k].share);
    if (!names[0]) {
        int k = 0;
        for (int i = 0; i < ncensus; i++) {
            const char *op = p->census[i].op;
            if (op && k++ < 3)
                dg_cat(names, sizeof names, "%s%s", k > 1 ? ", " : "", op);
        }
    }
    cJSON *f;
    if (share_known && (ntop > 0 || ncensus > 0)) {
        dg_severity sev = share > d->th[TH_FALLBACK_SHARE_FAIL] ? DG_SEV_FAIL
                          : share > d->th[TH_FALLBACK_SHARE]    ? DG_SEV_WARN
                                                                : DG_SEV_INFO;
        char under[64] = "";
        if (sev == DG_SEV_INFO)
            snprintf(under, sizeof under, ", under the %.0f%% threshold",
                     100 * d->th[TH_FALLBACK_SHARE]);
        f = dg_rule_finding(d, r, sev, -1,
                            "ops on the cpu fallback hold %.0f%% of the profiled op time%s%s%s",
                            100 * share, under, names[0] ? ": " : "", names);
        dg_ev_num(d, f, "profile", "ops[fallback].share", share, "fraction");
        dg_ev_metric(d, f, "profile", "calls", p->fallback_calls, "ops_total.fallback_calls");
        if (ncensus > 0)
            dg_ev_num(d, f, "profile", "fallbacks.length", ncensus, "entries");
    } else {
        if (cmp_run >= 0)
            f = dg_rule_finding(d, r, DG_SEV_WARN, cmp_run,
                                "%.0f op calls fell back to the cpu in compare at batch %d%s%s%s",
                                cmp_calls, dg_rec_int(c->runs[cmp_run].batch), names[0] ? " (" : "",
                                names, names[0] ? ")" : "");
        else
            f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                                "%d ops fell back to the cpu in the profile%s%s", ncensus,
                                names[0] ? ": " : "", names);
        if (ncensus > 0)
            dg_ev_num(d, f, "profile", "fallbacks.length", ncensus, "entries");
    }
    if (cmp_run >= 0)
        dg_ev_metric(d, f, "compare", "calls", c->runs[cmp_run].device_fallbacks,
                     "runs[%d].device.fallbacks", cmp_run);
}

/* ---- profile ------------------------------------------------------------------------ */

/* The program's own DataLoader knobs for a starved step, as it set them:
 * "raise the DataLoader's num_workers (now 0, --workers 0), persistent_workers=True
 * (now False), pin_memory=True (now False)". false when the loader says too little. */
static bool loader_advice(const dg_diag *d, char *buf, size_t n)
{
    const dg_view_loader *l = &d->v->loader;
    if (!l->num_workers.valid)
        return false;
    int w = dg_rec_int(l->num_workers);
    char how[96] = "";
    if (l->workers_arg)
        snprintf(how, sizeof how, ", %s %d", l->workers_arg, w);
    buf[0] = '\0';
    dg_cat(buf, n, "raise the DataLoader's num_workers (now %d%s)", w, how);
    if (l->persistent_workers == 0)
        dg_cat(buf, n, ", persistent_workers=True (now False: workers restart every epoch)");
    /* Pinned pages speed copies to a discrete device; on the cpu or a
     * unified-memory device (mps) decide from profiler evidence (METHOD). */
    const char *dev = d->v->device;
    if (l->pin_memory == 0 && dev && strncmp(dev, "cuda", 4) == 0)
        dg_cat(buf, n, ", pin_memory=True (now False)");
    return true;
}

void dg_judge_data_starved(dg_diag *d, const dg_rule *r)
{
    const dg_view_profile *p = &d->v->profile;
    const dg_view_phase *qw = &p->phases[DG_PHASE_QUEUE_WAIT];
    if (!qw->share.valid || qw->share.value <= d->th[TH_DATA_WAIT_SHARE])
        return;
    /* The wait is a mean over the window, its share of the window's wall: the
     * step it is set against is the window's mean step (step.mean_ms), or the
     * one the share implies, never the median of the steps. */
    char detail[96] = "";
    dg_rec_metric step = p->mean_ms;
    if (!step.valid && qw->ms.valid && qw->share.value > 0)
        step = (dg_rec_metric){qw->ms.value / qw->share.value, "ms", true, false};
    if (qw->ms.valid && step.valid)
        snprintf(detail, sizeof detail, " (%.1f ms of a %.1f ms step)", qw->ms.value, step.value);
    /* The loader's workers compete with other processes for the cores: a
     * wait measured while they took CPUs is named with them, at info. */
    const dg_view_window *w = dg_program_window(d);
    char busy[300];
    bool contended = dg_window_contended(d, w, busy, sizeof busy);
    cJSON *f = dg_rule_finding(d, r, contended ? DG_SEV_INFO : DG_SEV_WARN, -1,
                               "the step waits for its next batch %.0f%% of the time%s%s%s",
                               100 * qw->share.value, detail, contended ? ", measured while " : "",
                               contended ? busy : "");
    if (contended) {
        dg_rule_text(d, f, "hypothesis",
                     "the loader's workers shared the cores with the other work: the wait may "
                     "be theirs, not the data path's");
        dg_ev_window(d, f, w);
    }
    const dg_view_loader *l = &d->v->loader;
    char knobs[400];
    if (l->present && loader_advice(d, knobs, sizeof knobs))
        dg_rule_text(d, f, "action",
                     "%s; or cache pre-processed samples; profile the data path on its own", knobs);
    else if (p->workers.valid) /* devgate's own fixture: its loader flags */
        dg_rule_text(d, f, "action",
                     "more loader workers (--workers, now %d), or cached, pre-augmented samples "
                     "(--cache); profile the data path on its own",
                     dg_rec_int(p->workers));
    dg_ev_metric(d, f, "profile", "fraction", qw->share, "phases.queue_wait.share");
    dg_ev_metric(d, f, "profile", "ms", qw->ms, "phases.queue_wait.ms");
    if (p->mean_ms.valid)
        dg_ev_metric(d, f, "profile", "ms", p->mean_ms, "step.mean_ms");
    else
        dg_ev_metric(d, f, "profile", "ms", p->step_ms, "step.ms");
    /* The slowest loader stage says where the data path spends its time. */
    int slow = -1;
    double slow_ms = -1;
    for (int i = DG_PHASE_READ; i <= DG_PHASE_COLLATE; i++) {
        const dg_rec_metric ms = p->phases[i].ms;
        if (ms.valid && ms.value > slow_ms) {
            slow_ms = ms.value;
            slow = i;
        }
    }
    if (slow >= 0)
        dg_ev_metric(d, f, "profile", "ms", p->phases[slow].ms, "phases.%s.ms",
                     dg_phase_key((dg_phase)slow));
    if (p->workers.valid)
        dg_ev_metric(d, f, "profile", "workers", p->workers, "spec.workers");
    if (l->present) {
        dg_ev_metric(d, f, "run", "workers", l->num_workers, "loader.num_workers");
        dg_ev_bool(d, f, "run", l->persistent_workers, "loader.persistent_workers");
        dg_ev_bool(d, f, "run", l->pin_memory, "loader.pin_memory");
    }
}

/* Whether another process in the environment's list was busier than
 * busy_process_cpu_pct. */
static bool busy_other(const dg_diag *d, const dg_view_proc *p)
{
    return p->self != 1 && p->cpu_percent.valid &&
           p->cpu_percent.value > d->th[TH_BUSY_PROCESS_CPU_PCT];
}

/* Other processes busier than busy_process_cpu_pct, "name (pid N, P%)". */
static void busy_processes(const dg_diag *d, char *buf, size_t n, int *count)
{
    *count = 0;
    buf[0] = '\0';
    const dg_view_env *e = &d->v->env;
    for (int i = 0; i < e->ntop_cpu; i++) {
        const dg_view_proc *p = &e->top_cpu[i];
        if (!busy_other(d, p))
            continue;
        dg_cat(buf, n, "%s%s (pid %d, %.0f%%)", *count ? ", " : "", p->name ? p->name : "?",
               dg_rec_int(p->pid), p->cpu_percent.value);
        (*count)++;
    }
}

/* Steps a sample needs before its spread is judged. */
#define NOISE_MIN_STEPS 5

/* IQR over median of one side's step times pooled over a compare run's timed
 * repetitions (each one's warm-up left out); NAN under NOISE_MIN_STEPS steps. */
static double compare_side_spread(const dg_view_run *run, int side)
{
    size_t n = 0, cap = 0;
    double *v = NULL;
    for (int k = 0; k < run->nreps[side]; k++) {
        const dg_view_rep *rep = &run->reps[side][k];
        int wu = dg_rec_int(rep->warmup);
        for (int j = 0; j < rep->nms; j++) {
            if (j < wu || !isfinite(rep->ms[j]))
                continue;
            if (!dg_grow((void **)&v, &cap, n + 1, sizeof *v))
                break;
            v[n++] = rep->ms[j];
        }
    }
    dg_stats st;
    dg_stats_compute(v, n, 0, &st);
    dg_free(v);
    return n >= NOISE_MIN_STEPS ? st.iqr_share : NAN;
}

void dg_judge_noisy_measurement(dg_diag *d, const dg_rule *r)
{
    const dg_view_profile *p = &d->v->profile;
    double lim = d->th[TH_NOISE_IQR_RATIO];
    char what[300] = "";
    int nsrc = 0;
    /* Profile window: the stats' iqr_share, else iqr / median. */
    double pr = p->stats_iqr_share.value;
    if (!p->stats_iqr_share.valid) {
        double iqr = p->stats_iqr.value, med = p->stats_median.value;
        pr = p->stats_iqr.valid && p->stats_median.valid && med > 0 ? iqr / med : NAN;
    }
    /* Host step times of a device window that only synchronises at its end
     * measure how fast work is queued, not how long it runs: their spread is
     * judged on the cpu or when every step was synchronised. */
    /* A probe's step events (devgate run) time the user's steps end to end:
     * judged too, so noise is judged on every record kind. */
    bool synced = (p->backend && strcmp(p->backend, "cpu") == 0) ||
                  (p->sync_every.valid && p->sync_every.value == 1) ||
                  (p->source && strcmp(p->source, "probe") == 0);
    bool prof = isfinite(pr) && pr > lim && synced && p->stats_n.valid &&
                p->stats_n.value >= NOISE_MIN_STEPS;
    if (prof) {
        dg_cat(what, sizeof what, "profile IQR %.0f%% of the median", 100 * pr);
        nsrc++;
    }
    /* Sweep trials that ran to the end. */
    const dg_view_sweep *sw = &d->v->sweep;
    int noisy_trials[64], nt = 0;
    for (int i = 0; i < sw->ntrials && nt < 64; i++) {
        const dg_view_trial *t = &sw->trials[i];
        double iqr = t->step_iqr.value, med = t->step_median.value;
        /* The quartiles of fewer than 5 steps say little about noise. */
        if (!t->ended || strcmp(t->ended, "ok") != 0 || !t->step_iqr.valid ||
            !t->step_median.valid || med <= 0 || iqr / med <= lim ||
            !(t->step_steps.valid && t->step_steps.value >= NOISE_MIN_STEPS))
            continue;
        noisy_trials[nt++] = i;
        if (nsrc++ < 3)
            dg_cat(what, sizeof what, "%ssweep batch %d IQR %.0f%%", what[0] ? "; " : "",
                   dg_rec_int(t->batch), 100 * iqr / med);
    }
    /* Compare: each side's step times pooled over its timed repetitions
     * (every step synchronised), warm-up steps left out. */
    int noisy_cmp[8][2], nc = 0;
    const dg_view_compare *c = &d->v->compare;
    for (int i = 0; i < c->nruns && nc < 8; i++) {
        const dg_view_run *run = &c->runs[i];
        for (int side = 0; side < 2 && nc < 8; side++) {
            double share = compare_side_spread(run, side);
            if (!(share > lim))
                continue;
            noisy_cmp[nc][0] = i;
            noisy_cmp[nc][1] = side;
            nc++;
            if (nsrc++ < 3)
                dg_cat(what, sizeof what, "%scompare b%d %s IQR %.0f%%", what[0] ? "; " : "",
                       dg_rec_int(run->batch), side ? dg_run_device(d, run) : "cpu", 100 * share);
        }
    }
    if (nsrc == 0)
        return;
    if (nsrc > 3)
        dg_cat(what, sizeof what, "; %d more", nsrc - 3);
    char busy[400];
    int nbusy;
    busy_processes(d, busy, sizeof busy, &nbusy);
    cJSON *f = dg_rule_finding(d, r, DG_SEV_WARN, -1, "step times noisy: %s", what);
    if (nbusy)
        dg_rule_text(d, f, "action", "%s; other busy processes: %s", r->action, busy);
    else if (d->v->env.present)
        dg_rule_text(d, f, "action",
                     "%s; no other busy process was seen when the environment was taken",
                     r->action);
    if (prof) {
        if (p->stats_iqr_share.valid)
            dg_ev_metric(d, f, "profile", "fraction", p->stats_iqr_share, "step.stats.iqr_share");
        else
            dg_ev_num(d, f, "profile", "step.stats.iqr / step.stats.median", pr, "ratio");
        dg_ev_metric(d, f, "profile", "ms", p->stats_iqr, "step.stats.iqr");
        dg_ev_metric(d, f, "profile", "ms", p->stats_median, "step.stats.median");
    }
    for (int k = 0; k < nc; k++) {
        const dg_view_run *run = &c->runs[noisy_cmp[k][0]];
        char field[96];
        snprintf(field, sizeof field, "runs[%d].repetitions.%s[].ms (IQR / median)",
                 noisy_cmp[k][0], noisy_cmp[k][1] ? "device" : "cpu");
        dg_ev_num(d, f, "compare", field, compare_side_spread(run, noisy_cmp[k][1]), "ratio");
    }
    for (int k = 0; k < nt; k++) {
        const dg_view_trial *t = &sw->trials[noisy_trials[k]];
        dg_ev_metric(d, f, "sweep", "ms", t->step_iqr, "trials[%d].step_ms.iqr", noisy_trials[k]);
        dg_ev_metric(d, f, "sweep", "ms", t->step_median, "trials[%d].step_ms.median",
                     noisy_trials[k]);
    }
    const dg_view_env *e = &d->v->env;
    for (int i = 0; i < e->ntop_cpu; i++)
        if (busy_other(d, &e->top_cpu[i]))
            dg_ev_metric(d, f, "env", "percent", e->top_cpu[i].cpu_percent,
                         "processes.top_cpu[%d].cpu_percent", i);
}
