/* Rules over the batch sweep: why it stopped (sweep-memory) and whether the
 * training batch is above its safe batch (batch-above-safe). */
#include "diagnose/diagnose.h"

#include <string.h>

/* The trial that stopped the sweep: the one at stopped.at_batch that did not
 * end ok, in trials or bisect; NULL when none matches. */
static const cJSON *stopping_trial(const dg_diag *d, char *path, size_t n)
{
    double at = dg_jnum(d->sweep, "stopped.at_batch");
    const char *lists[] = {"trials", "bisect"};
    for (int l = 0; l < 2; l++) {
        const cJSON *arr = dg_jpath(d->sweep, lists[l]);
        for (int i = 0; i < cJSON_GetArraySize(arr); i++) {
            const cJSON *t = cJSON_GetArrayItem(arr, i);
            const char *ended = dg_jstr(t, "ended");
            if (dg_jnum(t, "batch") == at && ended && strcmp(ended, "ok") != 0) {
                snprintf(path, n, "%s[%d]", lists[l], i);
                return t;
            }
        }
    }
    return NULL;
}

void dg_judge_sweep_memory(dg_diag *d, const dg_rule *r)
{
    static const char *const quiet[] = {"oom", "budget", "swap"};
    static const char *const loud[] = {"signal", "timeout", "failed"};
    const char *why = dg_jstr(d->sweep, "stopped.reason");
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
    int at = diag_int(dg_jnum(d->sweep, "stopped.at_batch"));
    int safe = diag_int(dg_jnum(d->sweep, "safe_batch.batch"));
    int first = diag_int(dg_jnum(d->sweep, "safe_batch.first_failure"));
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
    const cJSON *t = stopping_trial(d, tpath, sizeof tpath);
    const char *sig = dg_jstr(t, "signal");
    cJSON *f = dg_rule_finding(d, r, sev, -1, "sweep stopped at batch %d (%s%s%s): %s%s", at, why,
                               sig ? " " : "", sig ? sig : "", safe_txt, first_txt);
    if (sev == DG_SEV_WARN)
        dg_rule_text(d, f, "hypothesis",
                     "a trial %s rather than running out of device memory: SIGKILL is what the "
                     "out-of-memory killer sends, SIGSEGV/SIGBUS are often a driver fault",
                     !strcmp(why, "signal")    ? "was killed"
                     : !strcmp(why, "timeout") ? "hung"
                                               : "failed");
    if (safe > 0)
        dg_rule_text(
            d, f, "action",
            "train at batch %d or below (the safe batch); above it split the work or empty the "
            "cache",
            safe);
    dg_ev_path(d, f, "sweep", d->sweep, NULL, "stopped.reason");
    dg_ev_path(d, f, "sweep", d->sweep, "samples", "stopped.at_batch");
    dg_ev_path(d, f, "sweep", d->sweep, "samples", "safe_batch.batch");
    dg_ev_path(d, f, "sweep", d->sweep, "samples", "safe_batch.first_failure");
    if (t) {
        dg_ev_path(d, f, "sweep", d->sweep, NULL, "%s.ended", tpath);
        dg_ev_path(d, f, "sweep", d->sweep, NULL, "%s.reason", tpath);
        if (sig)
            dg_ev_path(d, f, "sweep", d->sweep, NULL, "%s.signal", tpath);
    }
}

void dg_judge_batch_above_safe(dg_diag *d, const dg_rule *r)
{
    double want = dg_jnum(d->spec, "batch");
    double safe = dg_jnum(d->sweep, "safe_batch.batch");
    if (!isfinite(want) || !isfinite(safe) || want <= safe)
        return;
    cJSON *f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                               "training batch %d is above the sweep's safe batch %d",
                               diag_int(want), diag_int(safe));
    dg_rule_text(d, f, "action",
                 "train at batch %d or below, or sweep again with the real data path",
                 diag_int(safe));
    dg_ev_num(d, f, "spec", "batch", want, "samples");
    dg_ev_path(d, f, "sweep", d->sweep, "samples", "safe_batch.batch");
    dg_ev_path(d, f, "sweep", d->sweep, "samples", "safe_batch.first_failure");
}
