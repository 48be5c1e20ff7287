/* Rules over memory: the soak's own-memory growth with the cache emptied
 * (retained-refs, working-set-change, memory-short, memory-not-emptied), its
 * step-time trend (slowing-down), and other work competing for memory
 * (memory-pressure). */
#include "diagnose/diagnose.h"

#include <string.h>

static const char *const own_sources[] = {"allocator_allocated", "allocator_reserved", "footprint"};

/* The largest growth of the process's own sources (NAN when none reported). */
static double own_growth(const cJSON *s, const char **which)
{
    double best = NAN;
    *which = NULL;
    for (size_t i = 0; i < sizeof own_sources / sizeof *own_sources; i++) {
        const cJSON *g = dg_jpath(dg_jpath(s, "growth"), own_sources[i]);
        double v = dg_jnum_item(g);
        if (isfinite(v) && (!isfinite(best) || v > best)) {
            best = v;
            *which = own_sources[i];
        }
    }
    return best;
}

static const char *source_label(const char *src)
{
    if (!src)
        return "memory";
    if (!strcmp(src, "allocator_allocated"))
        return "allocator allocated";
    if (!strcmp(src, "allocator_reserved"))
        return "allocator reserved";
    return "process footprint";
}

static void ev_growth(dg_diag *d, cJSON *f)
{
    for (size_t i = 0; i < sizeof own_sources / sizeof *own_sources; i++)
        if (isfinite(dg_jnum_item(dg_jpath(dg_jpath(d->soak, "soak.growth"), own_sources[i]))))
            dg_ev_path(d, f, "soak", d->soak, "%", "soak.growth.%s", own_sources[i]);
    dg_ev_path(d, f, "soak", d->soak, "epochs", "soak.epochs_recorded");
    dg_ev_path(d, f, "soak", d->soak, NULL, "soak.empty_cache");
}

/* The facts the memory rules share; false when the soak did not report them. */
static bool soak_memory(const dg_diag *d, bool *emptied, double *epochs, double *growth,
                        const char **src, int *aligned)
{
    const cJSON *s = dg_jpath(d->soak, "soak");
    int e = dg_jbool(s, "empty_cache");
    if (!cJSON_IsObject(s) || e < 0)
        return false;
    *emptied = e == 1;
    *epochs = dg_jnum(s, "epochs_recorded");
    *growth = own_growth(s, src);
    *aligned = dg_jbool(s, "staircase.aligned");
    return true;
}

void dg_judge_retained_refs(dg_diag *d, const dg_rule *r)
{
    bool emptied;
    double epochs, growth;
    const char *src;
    int aligned;
    if (!soak_memory(d, &emptied, &epochs, &growth, &src, &aligned) || !emptied ||
        !isfinite(epochs) || epochs < d->th[TH_MEM_EPOCHS] || !isfinite(growth) ||
        growth <= d->th[TH_MEM_GROWTH_PCT] || aligned == 1)
        return;
    cJSON *f =
        dg_rule_finding(d, r, DG_SEV_WARN, -1,
                        "%s +%.0f%% after %.0f epochs although the cache was emptied every epoch",
                        source_label(src), growth, epochs);
    ev_growth(d, f);
    dg_ev_path(d, f, "soak", d->soak, NULL, "soak.staircase.aligned");
}

void dg_judge_working_set_change(dg_diag *d, const dg_rule *r)
{
    bool emptied;
    double epochs, growth;
    const char *src;
    int aligned;
    if (!soak_memory(d, &emptied, &epochs, &growth, &src, &aligned) || !emptied ||
        !isfinite(epochs) || epochs < d->th[TH_MEM_EPOCHS] || !isfinite(growth) ||
        growth <= d->th[TH_MEM_GROWTH_PCT] || aligned != 1)
        return;
    char *val = NULL;
    const cJSON *ve = dg_jpath(d->soak, "soak.staircase.validation_epochs");
    if (ve)
        val = cJSON_PrintUnformatted(ve);
    cJSON *f =
        dg_rule_finding(d, r, DG_SEV_INFO, -1,
                        "%s +%.0f%% after %.0f epochs in steps aligned with validation epochs %s",
                        source_label(src), growth, epochs, val ? val : "[]");
    cJSON_free(val);
    ev_growth(d, f);
    dg_ev_path(d, f, "soak", d->soak, NULL, "soak.staircase.aligned");
    dg_ev_path(d, f, "soak", d->soak, NULL, "soak.staircase.validation_epochs");
}

void dg_judge_memory_short(dg_diag *d, const dg_rule *r)
{
    bool emptied;
    double epochs, growth;
    const char *src;
    int aligned;
    if (!soak_memory(d, &emptied, &epochs, &growth, &src, &aligned) || !emptied ||
        !isfinite(epochs) || epochs >= d->th[TH_MEM_EPOCHS])
        return;
    char seen[96];
    if (isfinite(growth))
        snprintf(seen, sizeof seen, "%s +%.0f%%", source_label(src), growth);
    else
        snprintf(seen, sizeof seen, "growth not reported");
    cJSON *f = dg_rule_finding(d, r, DG_SEV_INFO, -1,
                               "only %.0f epochs recorded: the %.0f%% memory rule needs %.0f (%s)",
                               epochs, d->th[TH_MEM_GROWTH_PCT], d->th[TH_MEM_EPOCHS], seen);
    dg_rule_text(d, f, "action", "soak for at least %.0f epochs with the cache emptied at each end",
                 d->th[TH_MEM_EPOCHS]);
    ev_growth(d, f);
}

void dg_judge_memory_not_emptied(dg_diag *d, const dg_rule *r)
{
    bool emptied;
    double epochs, growth;
    const char *src;
    int aligned;
    if (!soak_memory(d, &emptied, &epochs, &growth, &src, &aligned) || emptied)
        return;
    char seen[96];
    if (isfinite(growth))
        snprintf(seen, sizeof seen, "%s +%.0f%%", source_label(src), growth);
    else
        snprintf(seen, sizeof seen, "growth not reported");
    cJSON *f = dg_rule_finding(
        d, r, DG_SEV_INFO, -1,
        "memory rule not judged: the cache was not emptied at epoch ends (%s)", seen);
    ev_growth(d, f);
}

/* Steps a soak needs before its first and last thirds are compared. */
#define SLOWDOWN_MIN_STEPS 30

void dg_judge_slowing_down(dg_diag *d, const dg_rule *r)
{
    /* Thirds of a short soak are a handful of steps each: too few for a trend. */
    double ratio = dg_jnum(d->soak, "soak.step_trend.thirds_ratio");
    if (!isfinite(ratio) || ratio <= d->th[TH_SLOWDOWN_RATIO] ||
        !(dg_jnum(d->soak, "soak.epochs_recorded") * dg_jnum(d->soak, "soak.steps_per_epoch") >=
          SLOWDOWN_MIN_STEPS))
        return;
    cJSON *f =
        dg_rule_finding(d, r, DG_SEV_WARN, -1,
                        "steps %.0f%% slower in the last third of the soak than in the first "
                        "(ratio %.2f)",
                        100 * (ratio - 1), ratio);
    dg_ev_path(d, f, "soak", d->soak, "ratio", "soak.step_trend.thirds_ratio");
    dg_ev_path(d, f, "soak", d->soak, "ms/step", "soak.step_trend.slope");
    dg_ev_path(d, f, "soak", d->soak, "ms", "soak.step_trend.median");
}

/* ---- memory pressure from other work ----------------------------------------------- */

void dg_judge_memory_pressure(dg_diag *d, const dg_rule *r)
{
    char what[400] = "";
    /* Other processes' resident memory against the machine's. */
    double total = dg_jnum(d->env, "memory.total");
    double others = 0;
    char names[200] = "";
    int nn = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, dg_jpath(d->env, "processes.top_mem"))
    {
        double rss = dg_jnum(p, "rss");
        if (dg_jbool(p, "self") == 1 || !isfinite(rss))
            continue;
        others += rss;
        const char *name = dg_jstr(p, "name");
        if (nn++ < 3)
            dg_cat(names, sizeof names, "%s%s %.*f %s", nn > 1 ? ", " : "", name ? name : "?",
                   rss >= DG_GIB ? 1 : 0, rss >= DG_GIB ? rss / DG_GIB : rss / DG_MIB,
                   rss >= DG_GIB ? "GiB" : "MiB");
    }
    bool mem = isfinite(total) && total > 0 && others / total > d->th[TH_OTHER_MEM_SHARE];
    if (mem)
        dg_cat(what, sizeof what, "other processes hold %.0f%% of %.1f GiB (%s)",
               100 * others / total, total / DG_GIB, names);
    double psi = dg_jnum(d->env, "memory.pressure.some_avg10");
    bool pressure = isfinite(psi) && psi > d->th[TH_PSI_SOME_PCT];
    if (pressure)
        dg_cat(what, sizeof what, "%smemory pressure %.0f%% (PSI some avg10)", what[0] ? "; " : "",
               psi);
    double lim = d->th[TH_SWAP_GROWTH_MIB] * DG_MIB;
    double soak_swap = dg_jnum(d->soak, "sampler.swap_growth");
    bool soak = isfinite(soak_swap) && soak_swap > lim;
    if (soak)
        dg_cat(what, sizeof what, "%sswap grew %.0f MiB during the soak", what[0] ? "; " : "",
               soak_swap / DG_MIB);
    const cJSON *trials = dg_jpath(d->sweep, "trials");
    int swap_trial = -1;
    double swap_max = 0;
    for (int i = 0; i < cJSON_GetArraySize(trials); i++) {
        const cJSON *t = cJSON_GetArrayItem(trials, i);
        const char *ended = dg_jstr(t, "ended");
        double g = dg_jnum(t, "swap_growth");
        if (ended && !strcmp(ended, "ok") && isfinite(g) && g > lim && g > swap_max) {
            swap_max = g;
            swap_trial = i;
        }
    }
    if (swap_trial >= 0)
        dg_cat(what, sizeof what, "%sswap grew %.0f MiB in the sweep trial at batch %d",
               what[0] ? "; " : "", swap_max / DG_MIB,
               diag_int(dg_jnum(cJSON_GetArrayItem(trials, swap_trial), "batch")));
    if (!what[0])
        return;
    cJSON *f =
        dg_rule_finding(d, r, DG_SEV_WARN, -1, "memory under pressure from other work: %s", what);
    if (mem) {
        dg_ev_num(d, f, "env", "processes.top_mem[self=false].rss", others, "bytes");
        dg_ev_path(d, f, "env", d->env, "bytes", "memory.total");
    }
    if (pressure)
        dg_ev_path(d, f, "env", d->env, "percent", "memory.pressure.some_avg10");
    if (soak)
        dg_ev_path(d, f, "soak", d->soak, "bytes", "sampler.swap_growth");
    if (swap_trial >= 0)
        dg_ev_path(d, f, "sweep", d->sweep, "bytes", "trials[%d].swap_growth", swap_trial);
}
