/* Rules over the batch sweep: why it stopped (sweep-memory) and whether the
 * training batch is above its safe batch (batch-above-safe). */
#include "diagnose/diagnose.h"

#include <string.h>

/* The trial that stopped the sweep: the one at stopped.at_batch that did not
 * end ok, in trials or bisect; NULL when none matches. */
static const dg_view_trial *stopping_trial(const dg_diag *d, char *path, size_t n)
{
    const dg_view_sweep *s = &d->v->sweep;
    const struct {
        const char *name;
        const dg_view_trial *t;
        int n;
    } lists[] = {{"trials", s->trials, s->ntrials}, {"bisect", s->bisect, s->nbisect}};
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < lists[l].n; i++) {
            const dg_view_trial *t = &lists[l].t[i];
            if (t->batch.valid && s->stopped_at.valid && t->batch.value == s->stopped_at.value &&
                t->ended && strcmp(t->ended, "ok") != 0) {
                snprintf(path, n, "%s[%d]", lists[l].name, i);
                return t;
            }
        }
    return NULL;
}

void dg_judge_sweep_memory(dg_diag *d, const dg_rule *r)
{
    static const char *const quiet[] = {"oom", "budget", "swap"};
    static const char *const loud[] = {"signal", "timeout", "failed"};
    const dg_view_sweep *s = &d->v->sweep;
    const char *why = s->stopped_reason;
    if (!why)
        return;
    dg_severity sev;
    size_t k = 0;
    while (k < 3 && strcmp(why, quiet[k]) != 0)
        k++;
    if (k < 3) {
        sev = DG_SEV_INFO;
    } else {
        k = 0;
        while (k < 3 && strcmp(why, loud[k]) != 0)
            k++;
        if (k == 3)
            return; /* limit, throughput-falling: no failure */
        sev = DG_SEV_WARN;
    }
    int at = dg_rec_int(s->stopped_at);
    int safe = dg_rec_int(s->safe_batch);
    int first = dg_rec_int(s->first_failure);
    char safe_txt[48], first_txt[48];
    if (safe > 0)
        snprintf(safe_txt, sizeof safe_txt, "safe batch %d", safe);
    else
        snprintf(safe_txt, sizeof safe_txt, "no safe batch");
    if (first > 0)
        snprintf(first_txt, sizeof first_txt, ", first failure %d", first);
    else
        first_txt[0] = '\0';
    char tpath[32];
    const dg_view_trial *t = stopping_trial(d, tpath, sizeof tpath);
    const char *sig = t ? t->signal : NULL;
    cJSON *f = dg_rule_finding(d, r, sev, -1, "sweep stopped at batch %d (%s%s%s): %s%s", at, why,
                               sig ? " " : "", sig ? sig : "", safe_txt, first_txt);
    if (sev == DG_SEV_WARN)
        dg_rule_text(d, f, "hypothesis",
                     "a trial %s rather than running out of device memory: SIGKILL is what the "
                     "out-of-memory killer sends, SIGSEGV/SIGBUS are often a driver fault",
                     !strcmp(why, "signal")    ? "was killed"
                     : !strcmp(why, "timeout") ? "hung"
                                               : "failed");
    char arg[96];
    if (safe > 0)
        dg_rule_text(
            d, f, "action",
            "train at batch %d or below (the safe batch)%s; above it split the work or empty the "
            "cache",
            safe, dg_batch_arg_text(d, safe, arg, sizeof arg));
    dg_ev_str(d, f, "sweep", why, "stopped.reason");
    dg_ev_metric(d, f, "sweep", "samples", s->stopped_at, "stopped.at_batch");
    dg_ev_metric(d, f, "sweep", "samples", s->safe_batch, "safe_batch.batch");
    dg_ev_metric(d, f, "sweep", "samples", s->first_failure, "safe_batch.first_failure");
    if (t) {
        dg_ev_str(d, f, "sweep", t->ended, "%s.ended", tpath);
        dg_ev_str(d, f, "sweep", t->reason, "%s.reason", tpath);
        if (sig)
            dg_ev_str(d, f, "sweep", sig, "%s.signal", tpath);
    }
}

void dg_judge_batch_above_safe(dg_diag *d, const dg_rule *r)
{
    dg_rec_metric want = d->v->spec.batch;
    dg_rec_metric safe = d->v->sweep.safe_batch;
    if (!want.valid || !safe.valid || want.value <= safe.value)
        return;
    cJSON *f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                               "training batch %d is above the sweep's safe batch %d",
                               dg_rec_int(want), dg_rec_int(safe));
    char arg[96];
    dg_rule_text(d, f, "action",
                 "train at batch %d or below%s, or sweep again with the real data path",
                 dg_rec_int(safe), dg_batch_arg_text(d, dg_rec_int(safe), arg, sizeof arg));
    dg_ev_num(d, f, "spec", "batch", want.value, "samples");
    dg_ev_metric(d, f, "sweep", "samples", d->v->sweep.safe_batch, "safe_batch.batch");
    dg_ev_metric(d, f, "sweep", "samples", d->v->sweep.first_failure, "safe_batch.first_failure");
}
