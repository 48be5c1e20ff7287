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
    /* Fallback rows of the profile's op table, summed per op name. */
    const cJSON *ops = dg_jpath(d->profile, "ops");
    if (!cJSON_IsArray(ops))
        ops = NULL;
    op_share top[32];
    int ntop = 0;
    double share = 0;
    bool share_known = false;
    const cJSON *row;
    cJSON_ArrayForEach(row, ops)
    {
        double s = dg_jnum(row, "share");
        if (!isfinite(s))
            continue;
        share_known = true;
        if (dg_jbool(row, "fallback") != 1)
            continue;
        share += s;
        const char *op = dg_jstr(row, "op");
        op = op ? op : "?";
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
    const cJSON *census = dg_jpath(d->profile, "fallbacks");
    int ncensus = cJSON_IsArray(census) ? cJSON_GetArraySize(census) : 0;
    const cJSON *runs = dg_diag_compare_runs(d);
    int cmp_run = -1;
    double cmp_calls = 0;
    for (int i = 0; i < cJSON_GetArraySize(runs); i++) {
        double n = dg_jnum(cJSON_GetArrayItem(runs, i), "device.fallbacks");
        if (isfinite(n) && n > cmp_calls) {
            cmp_calls = n;
            cmp_run = i;
        }
    }
    if (ntop == 0 && ncensus == 0 && cmp_run < 0)
        return;

    char names[240] = "";
    for (int k = 0; k < ntop && k < 3; k++)
        dg_cat(names, sizeof names, "%s%s %.0f%%", k ? ", " : "", top[k].op, 100 * top[k].share);
    if (!names[0]) {
        const cJSON *c;
        int k = 0;
        cJSON_ArrayForEach(c, census)
        {
            const char *op = dg_jstr(c, "op");
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
        dg_ev_path(d, f, "profile", d->profile, "calls", "ops_total.fallback_calls");
        if (ncensus > 0)
            dg_ev_num(d, f, "profile", "fallbacks.length", ncensus, "entries");
    } else {
        if (cmp_run >= 0)
            f = dg_rule_finding(d, r, DG_SEV_WARN, cmp_run,
                                "%.0f op calls fell back to the cpu in compare at batch %d%s%s%s",
                                cmp_calls,
                                diag_int(dg_jnum(cJSON_GetArrayItem(runs, cmp_run), "batch")),
                                names[0] ? " (" : "", names, names[0] ? ")" : "");
        else
            f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                                "%d ops fell back to the cpu in the profile%s%s", ncensus,
                                names[0] ? ": " : "", names);
        if (ncensus > 0)
            dg_ev_num(d, f, "profile", "fallbacks.length", ncensus, "entries");
    }
    if (cmp_run >= 0)
        dg_ev_path(d, f, "compare", d->compare, "calls", "runs[%d].device.fallbacks", cmp_run);
}

/* ---- profile ------------------------------------------------------------------------ */

void dg_judge_data_starved(dg_diag *d, const dg_rule *r)
{
    double share = dg_jnum(d->profile, "phases.queue_wait.share");
    if (!isfinite(share) || share <= d->th[TH_DATA_WAIT_SHARE])
        return;
    double wait = dg_jnum(d->profile, "phases.queue_wait.ms");
    double step = dg_jnum(d->profile, "step.ms");
    char detail[96] = "";
    if (isfinite(wait) && isfinite(step))
        snprintf(detail, sizeof detail, " (%.1f ms of a %.1f ms step)", wait, step);
    cJSON *f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                               "the step waits for its next batch %.0f%% of the time%s",
                               100 * share, detail);
    double workers = dg_jnum(d->profile, "spec.workers");
    if (isfinite(workers))
        dg_rule_text(d, f, "action",
                     "more loader workers (now %d), or cached, pre-augmented samples (--cache); "
                     "profile the data path on its own",
                     diag_int(workers));
    dg_ev_path(d, f, "profile", d->profile, "fraction", "phases.queue_wait.share");
    dg_ev_path(d, f, "profile", d->profile, "ms", "phases.queue_wait.ms");
    dg_ev_path(d, f, "profile", d->profile, "ms", "step.ms");
    /* The slowest loader stage says where the data path spends its time. */
    static const char *const stages[] = {"read",    "decode",    "resize",
                                         "augment", "normalise", "collate"};
    const char *slow = NULL;
    double slow_ms = -1;
    for (size_t i = 0; i < sizeof stages / sizeof *stages; i++) {
        char p[48];
        snprintf(p, sizeof p, "phases.%s.ms", stages[i]);
        double ms = dg_jnum(d->profile, p);
        if (isfinite(ms) && ms > slow_ms) {
            slow_ms = ms;
            slow = stages[i];
        }
    }
    if (slow)
        dg_ev_path(d, f, "profile", d->profile, "ms", "phases.%s.ms", slow);
    if (isfinite(workers))
        dg_ev_path(d, f, "profile", d->profile, "workers", "spec.workers");
}

/* Other processes busier than busy_process_cpu_pct, "name (pid N, P%)". */
static void busy_processes(const dg_diag *d, char *buf, size_t n, int *count)
{
    *count = 0;
    buf[0] = '\0';
    const cJSON *p;
    cJSON_ArrayForEach(p, dg_jpath(d->env, "processes.top_cpu"))
    {
        double cpu = dg_jnum(p, "cpu_percent");
        if (dg_jbool(p, "self") == 1 || !isfinite(cpu) || cpu <= d->th[TH_BUSY_PROCESS_CPU_PCT])
            continue;
        const char *name = dg_jstr(p, "name");
        dg_cat(buf, n, "%s%s (pid %d, %.0f%%)", *count ? ", " : "", name ? name : "?",
               diag_int(dg_jnum(p, "pid")), cpu);
        (*count)++;
    }
}

/* Steps a sample needs before its spread is judged. */
#define NOISE_MIN_STEPS 5

/* IQR over median of one side's step times pooled over a compare run's timed
 * repetitions (each one's warm-up left out); NAN under NOISE_MIN_STEPS steps. */
static double compare_side_spread(const cJSON *run, const char *side)
{
    char key[48];
    snprintf(key, sizeof key, "repetitions.%s", side);
    const cJSON *reps = dg_jpath(run, key), *rep;
    size_t n = 0, cap = 0;
    double *v = NULL;
    cJSON_ArrayForEach(rep, reps)
    {
        int wu = diag_int(dg_jnum(rep, "warmup"));
        int k = 0;
        const cJSON *ms;
        cJSON_ArrayForEach(ms, dg_jpath(rep, "ms"))
        {
            if (k++ < wu || !cJSON_IsNumber(ms) || !isfinite(ms->valuedouble))
                continue;
            if (n == cap) {
                size_t nc = cap ? 2 * cap : 64;
                double *nv = dg_realloc(v, nc * sizeof *v);
                if (!nv)
                    break;
                v = nv;
                cap = nc;
            }
            v[n++] = ms->valuedouble;
        }
    }
    dg_stats st;
    dg_stats_compute(v, n, 0, &st);
    dg_free(v);
    return n >= NOISE_MIN_STEPS ? st.iqr_share : NAN;
}

void dg_judge_noisy_measurement(dg_diag *d, const dg_rule *r)
{
    double lim = d->th[TH_NOISE_IQR_RATIO];
    char what[300] = "";
    int nsrc = 0;
    /* Profile window: the stats' iqr_share, else iqr / median. */
    double pr = dg_jnum(d->profile, "step.stats.iqr_share");
    if (!isfinite(pr)) {
        double iqr = dg_jnum(d->profile, "step.stats.iqr");
        double med = dg_jnum(d->profile, "step.stats.median");
        pr = isfinite(iqr) && isfinite(med) && med > 0 ? iqr / med : NAN;
    }
    /* Host step times of a device window that only synchronises at its end
     * measure how fast work is queued, not how long it runs: their spread is
     * judged on the cpu or when every step was synchronised. */
    const char *pbackend = dg_jstr(d->profile, "spec.backend");
    /* A probe's step events (devgate run) time the user's steps end to end:
     * judged too, so noise is judged on every record kind. */
    const char *psource = dg_jstr(d->profile, "source");
    bool synced = (pbackend && strcmp(pbackend, "cpu") == 0) ||
                  dg_jnum(d->profile, "spec.sync_every") == 1 ||
                  (psource && strcmp(psource, "probe") == 0);
    bool prof = isfinite(pr) && pr > lim && synced &&
                dg_jnum(d->profile, "step.stats.n") >= NOISE_MIN_STEPS;
    if (prof) {
        dg_cat(what, sizeof what, "profile IQR %.0f%% of the median", 100 * pr);
        nsrc++;
    }
    /* Sweep trials that ran to the end. */
    const cJSON *trials = dg_jpath(d->sweep, "trials");
    int noisy_trials[64], nt = 0;
    for (int i = 0; i < cJSON_GetArraySize(trials) && nt < 64; i++) {
        const cJSON *t = cJSON_GetArrayItem(trials, i);
        const char *ended = dg_jstr(t, "ended");
        double iqr = dg_jnum(t, "step_ms.iqr"), med = dg_jnum(t, "step_ms.median");
        /* The quartiles of fewer than 5 steps say little about noise. */
        if (!ended || strcmp(ended, "ok") != 0 || !isfinite(iqr) || !isfinite(med) || med <= 0 ||
            iqr / med <= lim || !(dg_jnum(t, "step_ms.steps") >= NOISE_MIN_STEPS))
            continue;
        noisy_trials[nt++] = i;
        if (nsrc++ < 3)
            dg_cat(what, sizeof what, "%ssweep batch %d IQR %.0f%%", what[0] ? "; " : "",
                   diag_int(dg_jnum(t, "batch")), 100 * iqr / med);
    }
    /* Compare: each side's step times pooled over its timed repetitions
     * (every step synchronised), warm-up steps left out. */
    int noisy_cmp[8][2], nc = 0;
    const cJSON *runs = dg_diag_compare_runs(d);
    for (int i = 0; i < cJSON_GetArraySize(runs) && nc < 8; i++) {
        const cJSON *run = cJSON_GetArrayItem(runs, i);
        for (int side = 0; side < 2 && nc < 8; side++) {
            double share = compare_side_spread(run, side ? "device" : "cpu");
            if (!(share > lim))
                continue;
            noisy_cmp[nc][0] = i;
            noisy_cmp[nc][1] = side;
            nc++;
            if (nsrc++ < 3)
                dg_cat(what, sizeof what, "%scompare b%d %s IQR %.0f%%", what[0] ? "; " : "",
                       diag_int(dg_jnum(run, "batch")), side ? dg_run_device(d, run) : "cpu",
                       100 * share);
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
    else if (d->env)
        dg_rule_text(d, f, "action",
                     "%s; no other busy process was seen when the environment was taken",
                     r->action);
    if (prof) {
        if (isfinite(dg_jnum(d->profile, "step.stats.iqr_share")))
            dg_ev_path(d, f, "profile", d->profile, "fraction", "step.stats.iqr_share");
        else
            dg_ev_num(d, f, "profile", "step.stats.iqr / step.stats.median", pr, "ratio");
        dg_ev_path(d, f, "profile", d->profile, "ms", "step.stats.iqr");
        dg_ev_path(d, f, "profile", d->profile, "ms", "step.stats.median");
    }
    for (int k = 0; k < nc; k++) {
        const cJSON *run = cJSON_GetArrayItem(runs, noisy_cmp[k][0]);
        char field[96];
        snprintf(field, sizeof field, "runs[%d].repetitions.%s[].ms (IQR / median)",
                 noisy_cmp[k][0], noisy_cmp[k][1] ? "device" : "cpu");
        dg_ev_num(d, f, "compare", field,
                  compare_side_spread(run, noisy_cmp[k][1] ? "device" : "cpu"), "ratio");
    }
    for (int k = 0; k < nt; k++) {
        dg_ev_path(d, f, "sweep", d->sweep, "ms", "trials[%d].step_ms.iqr", noisy_trials[k]);
        dg_ev_path(d, f, "sweep", d->sweep, "ms", "trials[%d].step_ms.median", noisy_trials[k]);
    }
    const cJSON *top = dg_jpath(d->env, "processes.top_cpu");
    for (int i = 0; i < cJSON_GetArraySize(top); i++) {
        const cJSON *p = cJSON_GetArrayItem(top, i);
        double cpu = dg_jnum(p, "cpu_percent");
        if (dg_jbool(p, "self") != 1 && isfinite(cpu) && cpu > d->th[TH_BUSY_PROCESS_CPU_PCT])
            dg_ev_path(d, f, "env", d->env, "percent", "processes.top_cpu[%d].cpu_percent", i);
    }
}
