/* Rules over memory: the soak's own-memory growth with the cache emptied
 * (retained-refs, working-set-change, memory-short, memory-not-emptied), its
 * step-time trend (slowing-down), and other work competing for memory
 * (memory-pressure). */
#include "diagnose/diagnose.h"

#include <stdio.h>
#include <string.h>

/* The process's own memory sources, in the order they are cited. */
static const dg_mem_source own_sources[] = {DG_MEM_ALLOCATOR_ALLOCATED, DG_MEM_ALLOCATOR_RESERVED,
                                            DG_MEM_FOOTPRINT};
#define NOWN (sizeof own_sources / sizeof *own_sources)

/* The largest growth of the process's own sources (NAN when none reported). */
static double own_growth(const dg_view_soak *s, const char **which)
{
    double best = NAN;
    *which = NULL;
    for (size_t i = 0; i < NOWN; i++) {
        dg_rec_metric g = s->growth[own_sources[i]];
        if (g.valid && (!isfinite(best) || g.value > best)) {
            best = g.value;
            *which = dg_mem_source_key(own_sources[i]);
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

/* Where the process's own memory growth stands against mem_growth_pct, judged
 * (live_only: live, allocated memory alone, which does not depend on the
 * allocator's cache, for runs whose cache was not emptied at epoch ends)
 * on each source's 95% interval (soak growth_ci; the point alone in records
 * without one): 1 some source surely above (its low end above), 0 none surely
 * above but some interval holds the threshold, -1 all at or below, 2 nothing
 * reported. *src is the source judged (the highest point of the deciding
 * side), *lo, *hi its interval (its growth twice without one). */
static int growth_side(const dg_diag *d, bool live_only, const char **src, double *lo, double *hi)
{
    const dg_view_soak *s = &d->v->soak;
    double th = d->th[TH_MEM_GROWTH_PCT], best = NAN;
    int side = 2;
    *src = NULL;
    *lo = *hi = NAN;
    for (size_t i = 0; i < NOWN; i++) {
        dg_mem_source m = own_sources[i];
        if (live_only && m != DG_MEM_ALLOCATOR_ALLOCATED)
            continue; /* reserved and footprint hold the cache: judged only when emptied */
        bool ci = s->growth_lo[m].valid && s->growth_hi[m].valid;
        double p = ci && s->growth_point[m].valid ? s->growth_point[m].value : s->growth[m].value;
        double l = ci ? s->growth_lo[m].value : s->growth[m].value;
        double h = ci ? s->growth_hi[m].value : s->growth[m].value;
        if (!isfinite(l) || !isfinite(h))
            continue;
        int si = l > th ? 1 : h > th ? 0 : -1;
        if (side == 2 || si > side || (si == side && p > best)) {
            side = si;
            best = p;
            *src = dg_mem_source_key(m);
            *lo = l;
            *hi = h;
        }
    }
    return side;
}

static void ev_growth(dg_diag *d, cJSON *f)
{
    const dg_view_soak *s = &d->v->soak;
    for (size_t i = 0; i < NOWN; i++)
        if (s->growth[own_sources[i]].valid)
            dg_ev_metric(d, f, "soak", "%", s->growth[own_sources[i]], "%sgrowth.%s", d->soak_pfx,
                         dg_mem_source_key(own_sources[i]));
    for (size_t i = 0; i < NOWN; i++)
        if (s->growth_lo[own_sources[i]].valid) {
            dg_ev_metric(d, f, "soak", "%", s->growth_lo[own_sources[i]], "%sgrowth_ci.%s.lo",
                         d->soak_pfx, dg_mem_source_key(own_sources[i]));
            dg_ev_metric(d, f, "soak", "%", s->growth_hi[own_sources[i]], "%sgrowth_ci.%s.hi",
                         d->soak_pfx, dg_mem_source_key(own_sources[i]));
        }
    dg_ev_metric(d, f, "soak", "epochs", s->epochs_recorded, "%sepochs_recorded", d->soak_pfx);
    dg_ev_bool(d, f, "soak", s->empty_cache, "%sempty_cache", d->soak_pfx);
}

/* The facts the memory rules share. */
typedef struct soak_mem {
    bool emptied;    /* the cache was emptied at each epoch end */
    double epochs;   /* recorded */
    double growth;   /* the judged source's, % */
    const char *src; /* that source's key */
    int aligned;     /* growth steps line up with validation epochs (1), not (0), unknown (-1) */
    double lo, hi;   /* growth_side's interval */
    char seen[96];   /* "SOURCE +N%", or that the growth was not reported */
} soak_mem;

/* The soak's memory facts into m; false when the soak did not report them. */
static bool soak_memory(const dg_diag *d, soak_mem *m)
{
    const dg_view_soak *s = &d->v->soak;
    if (!s->has_payload || s->empty_cache < 0)
        return false;
    m->emptied = s->empty_cache == 1;
    m->epochs = s->epochs_recorded.value;
    m->growth = own_growth(s, &m->src);
    m->aligned = s->staircase_aligned;
    if (isfinite(m->growth))
        snprintf(m->seen, sizeof m->seen, "%s +%.0f%%", source_label(m->src), m->growth);
    else
        snprintf(m->seen, sizeof m->seen, "growth not reported");
    return true;
}

void dg_judge_retained_refs(dg_diag *d, const dg_rule *r)
{
    soak_mem m;
    if (!soak_memory(d, &m) || !isfinite(m.epochs) || m.epochs < d->th[TH_MEM_EPOCHS] ||
        m.aligned == 1)
        return;
    /* Live (allocated) memory is evidence whether or not the cache was
     * emptied; reserved memory and the footprint only with the discipline. */
    int side = growth_side(d, !m.emptied, &m.src, &m.lo, &m.hi);
    if (side != 1 && side != 0)
        return;
    const char *why = m.emptied ? "although the cache was emptied every epoch"
                                : "of live tensors (the cache was not emptied, which this figure "
                                  "does not depend on)";
    cJSON *f;
    if (side == 0) /* the interval holds the threshold: no leak claimed, none ruled out */
        f = dg_rule_finding(d, r, DG_SEV_INFO, -1,
                            "memory growth inconclusive: %s %+.0f%% to %+.0f%% (95%% interval over "
                            "the last third of %.0f epochs) holds mem_growth_pct %.0f%%",
                            source_label(m.src), m.lo, m.hi, m.epochs, d->th[TH_MEM_GROWTH_PCT]);
    else if (m.lo < m.hi)
        f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                            "%s %+.0f%% to %+.0f%% (95%% interval over the last third) after %.0f "
                            "epochs %s",
                            source_label(m.src), m.lo, m.hi, m.epochs, why);
    else
        f = dg_rule_finding(d, r, DG_SEV_WARN, -1, "%s +%.0f%% after %.0f epochs %s",
                            source_label(m.src), m.lo, m.epochs, why);
    if (side == 0)
        dg_rule_text(d, f, "action",
                     "soak for more epochs with the machine quiet: the watermarks of the last "
                     "third straddle the threshold");
    ev_growth(d, f);
    dg_ev_bool(d, f, "soak", d->v->soak.staircase_aligned, "%sstaircase.aligned", d->soak_pfx);
}

void dg_judge_working_set_change(dg_diag *d, const dg_rule *r)
{
    soak_mem m;
    if (!soak_memory(d, &m) || !isfinite(m.epochs) || m.epochs < d->th[TH_MEM_EPOCHS] ||
        m.aligned != 1 || growth_side(d, !m.emptied, &m.src, &m.lo, &m.hi) != 1)
        return;
    char *val = NULL;
    const cJSON *ve = d->v->soak.validation_epochs;
    if (ve)
        val = cJSON_PrintUnformatted(ve);
    cJSON *f =
        dg_rule_finding(d, r, DG_SEV_INFO, -1,
                        "%s +%.0f%% after %.0f epochs in steps aligned with validation epochs %s",
                        source_label(m.src), m.growth, m.epochs, val ? val : "[]");
    cJSON_free(val);
    ev_growth(d, f);
    dg_ev_bool(d, f, "soak", d->v->soak.staircase_aligned, "%sstaircase.aligned", d->soak_pfx);
    dg_ev_item(d, f, "soak", NULL, d->v->soak.validation_epochs, "%sstaircase.validation_epochs",
               d->soak_pfx);
}

/* The leak screen over the steps' readings (soak.step_growth) of a soak too
 * short for the epochs' interval: the source whose projected growth after
 * mem_epochs epochs lies wholly above mem_growth_pct (the largest low end),
 * with *lo, *hi, *pe_lo, *pe_hi its projection and its growth an epoch;
 * -1 when none does. Live memory always; the footprint only when the cache
 * was emptied (memory-short's condition). */
static int screened_leak(const dg_diag *d, double *lo, double *hi, double *pe_lo, double *pe_hi)
{
    const dg_view_soak *s = &d->v->soak;
    static const dg_mem_source src[] = {DG_MEM_ALLOCATOR_ALLOCATED, DG_MEM_FOOTPRINT};
    double span = d->th[TH_MEM_EPOCHS] - 1; /* the epochs retained-refs' growth spans */
    int best = -1;
    for (size_t i = 0; i < 2; i++) {
        dg_mem_source m = src[i];
        if (!s->screen_lo[m].valid || !s->screen_hi[m].valid || !(span > 0))
            continue;
        double l = s->screen_lo[m].value * span, h = s->screen_hi[m].value * span;
        if (l > d->th[TH_MEM_GROWTH_PCT] && (best < 0 || l > *lo)) {
            best = (int)m;
            *lo = l;
            *hi = h;
            *pe_lo = s->screen_lo[m].value;
            *pe_hi = s->screen_hi[m].value;
        }
    }
    return best;
}

/* "lo to hi" in FMT, or one figure when both print the same. */
static void range_text(char *buf, size_t n, const char *fmt, double lo, double hi)
{
    char a[32], b[32];
    snprintf(a, sizeof a, fmt, lo);
    snprintf(b, sizeof b, fmt, hi);
    if (strcmp(a, b) == 0)
        snprintf(buf, n, "%s", a);
    else
        snprintf(buf, n, "%s to %s", a, b);
}

/* A suspected leak's hypothesis and action (memory-short's warn). */
static void suspected(dg_diag *d, cJSON *f)
{
    dg_rule_text(d, f, "hypothesis",
                 "retained references (tensors or graphs kept across steps), seen over too few "
                 "epochs to be sure");
    dg_rule_text(d, f, "action",
                 "confirm with the default tier (a soak of %.0f epochs with the cache emptied at "
                 "each end)",
                 d->th[TH_MEM_EPOCHS]);
}

void dg_judge_memory_short(dg_diag *d, const dg_rule *r)
{
    soak_mem m;
    if (!soak_memory(d, &m) || !m.emptied || !isfinite(m.epochs) ||
        m.epochs >= d->th[TH_MEM_EPOCHS])
        return;
    /* A leak screen over the epochs a short soak has (the quick tier): when
     * their growth's 95% interval lies above the threshold, a suspected leak
     * (warn), to be confirmed by a soak of mem_epochs epochs. */
    const char *isrc;
    if (growth_side(d, false, &isrc, &m.lo, &m.hi) == 1 && m.lo < m.hi && m.aligned != 1) {
        cJSON *f =
            dg_rule_finding(d, r, DG_SEV_WARN, -1,
                            "suspected leak: %s %+.0f%% to %+.0f%% (95%% interval) after "
                            "only %.0f epochs, above mem_growth_pct %.0f%%",
                            source_label(isrc), m.lo, m.hi, m.epochs, d->th[TH_MEM_GROWTH_PCT]);
        suspected(d, f);
        ev_growth(d, f);
        return;
    }
    /* Too few epochs for their interval: the line through the memory each
     * step read, projected to the mem_epochs a soak needs. A rate that
     * would carry memory past mem_growth_pct by then, even at the low end of
     * its interval, is a suspected leak (warn), never a verdict. */
    double pl, ph, el, eh;
    int k = m.aligned != 1 ? screened_leak(d, &pl, &ph, &el, &eh) : -1;
    if (k >= 0) {
        const dg_view_soak *s = &d->v->soak;
        const char *key = dg_mem_source_key((dg_mem_source)k);
        /* A steady leak's interval can be narrower than the printed digits:
         * then one figure says it ("13.5%"), not "13.5% to 13.5%". */
        char rate[64], proj[64];
        range_text(rate, sizeof rate, "%.1f%%", el, eh);
        range_text(proj, sizeof proj, "%+.0f%%", pl, ph);
        cJSON *f = dg_rule_finding(
            d, r, DG_SEV_WARN, -1,
            "suspected leak: %s grows %s an epoch (95%% interval of a line through %.0f readings, "
            "one a step, over %.0f epochs): at that rate it would stand %s above its baseline "
            "after %.0f epochs, above mem_growth_pct %.0f%%",
            source_label(key), rate, s->screen_points[k].value, m.epochs, proj,
            d->th[TH_MEM_EPOCHS], d->th[TH_MEM_GROWTH_PCT]);
        suspected(d, f);
        dg_ev_metric(d, f, "soak", "%", s->screen_lo[k], "%sstep_growth.%s.per_epoch.lo",
                     d->soak_pfx, key);
        dg_ev_metric(d, f, "soak", "%", s->screen_hi[k], "%sstep_growth.%s.per_epoch.hi",
                     d->soak_pfx, key);
        dg_ev_metric(d, f, "soak", "readings", s->screen_points[k], "%sstep_growth.%s.points",
                     d->soak_pfx, key);
        ev_growth(d, f);
        return;
    }
    cJSON *f = dg_rule_finding(d, r, DG_SEV_INFO, -1,
                               "only %.0f epochs recorded: the %.0f%% memory rule needs %.0f (%s)",
                               m.epochs, d->th[TH_MEM_GROWTH_PCT], d->th[TH_MEM_EPOCHS], m.seen);
    dg_rule_text(d, f, "action", "soak for at least %.0f epochs with the cache emptied at each end",
                 d->th[TH_MEM_EPOCHS]);
    ev_growth(d, f);
}

void dg_judge_memory_not_emptied(dg_diag *d, const dg_rule *r)
{
    soak_mem m;
    if (!soak_memory(d, &m) || m.emptied)
        return;
    cJSON *f = dg_rule_finding(
        d, r, DG_SEV_INFO, -1,
        "reserved memory and the footprint not judged: the cache was not emptied at epoch ends "
        "(%s; live, allocated memory is judged either way)",
        m.seen);
    ev_growth(d, f);
}

/* Steps a soak needs before its first and last thirds are compared. */
#define SLOWDOWN_MIN_STEPS 30

void dg_judge_slowing_down(dg_diag *d, const dg_rule *r)
{
    /* Thirds of a short soak are a handful of steps each: too few for a trend. */
    const dg_view_soak *s = &d->v->soak;
    double ratio = s->thirds_ratio.value, th = d->th[TH_SLOWDOWN_RATIO];
    /* Judged on the 95% interval of the per-epoch ratio when the soak has one
     * (step_trend.thirds_ratio_ci), else on the point. */
    bool ci = s->thirds_lo.valid && s->thirds_hi.valid;
    double lo = ci ? s->thirds_lo.value : ratio, hi = ci ? s->thirds_hi.value : ratio;
    if (!isfinite(lo) || !isfinite(hi) || hi <= th ||
        !(s->epochs_recorded.value * s->steps_per_epoch.value >= SLOWDOWN_MIN_STEPS))
        return;
    cJSON *f;
    /* Other work that took the cores during the soak slows its steps too:
     * named, and never laid on the program. */
    char busy[300];
    bool contended = dg_window_contended(d, &s->window, busy, sizeof busy);
    if (contended && lo > th) {
        f = dg_rule_finding(d, r, DG_SEV_INFO, -1,
                            "steps %.0f%% slower in the last third of the soak than in the first "
                            "(ratio %.2f), while %s: the slowdown may be theirs",
                            100 * ((s->thirds_point.valid ? s->thirds_point.value : lo) - 1),
                            s->thirds_point.valid ? s->thirds_point.value : lo, busy);
        dg_rule_text(d, f, "action",
                     "soak again on a quiet machine before reading a slowdown of the program");
        dg_ev_window(d, f, &s->window);
    } else if (lo <= th) {
        f = dg_rule_finding(
            d, r, DG_SEV_INFO, -1,
            "step-time trend inconclusive: the last third of the soak is %.2f-%.2fx "
            "the first (95%% interval over epochs), which holds slowdown_ratio %.2f",
            lo, hi, th);
        dg_rule_text(d, f, "action",
                     "soak for more epochs with the machine quiet before reading a slowdown");
    } else if (ci) {
        f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                            "steps %.0f%% slower in the last third of the soak than in the first "
                            "(ratio %.2f, 95%% %.2f-%.2f over epochs)",
                            100 * (s->thirds_point.valid ? s->thirds_point.value - 1 : lo - 1),
                            s->thirds_point.valid ? s->thirds_point.value : lo, lo, hi);
    } else {
        /* A point ratio is no verdict: without an interval (fewer epochs than
         * one needs) a slowdown is only a suspicion, and on a loaded machine
         * healthy runs showed one. */
        f = dg_rule_finding(d, r, DG_SEV_INFO, -1,
                            "steps %.0f%% slower in the last third of the soak than in the first "
                            "(ratio %.2f; no interval over so few epochs)",
                            100 * (ratio - 1), ratio);
        dg_rule_text(d, f, "action",
                     "soak for more epochs (6 or more give an interval) before reading a slowdown");
    }
    if (ci) {
        dg_ev_metric(d, f, "soak", "ratio", s->thirds_lo, "%sstep_trend.thirds_ratio_ci.lo",
                     d->soak_pfx);
        dg_ev_metric(d, f, "soak", "ratio", s->thirds_hi, "%sstep_trend.thirds_ratio_ci.hi",
                     d->soak_pfx);
    }
    dg_ev_metric(d, f, "soak", "ratio", s->thirds_ratio, "%sstep_trend.thirds_ratio", d->soak_pfx);
    dg_ev_metric(d, f, "soak", "ms/step", s->trend_slope, "%sstep_trend.slope", d->soak_pfx);
    dg_ev_metric(d, f, "soak", "ms", s->trend_median, "%sstep_trend.median", d->soak_pfx);
}

/* ---- memory pressure from other work ----------------------------------------------- */

void dg_judge_memory_pressure(dg_diag *d, const dg_rule *r)
{
    const dg_view_env *env = &d->v->env;
    char what[400] = "";
    /* Other processes' resident memory against the machine's. */
    double total = env->mem_total.value;
    double others = 0;
    char names[200] = "";
    int nn = 0;
    for (int i = 0; i < env->ntop_mem; i++) {
        const dg_view_proc *p = &env->top_mem[i];
        double rss = p->rss.value;
        if (p->self == 1 || !p->rss.valid)
            continue;
        others += rss;
        if (nn++ < 3)
            dg_cat(names, sizeof names, "%s%s %.*f %s", nn > 1 ? ", " : "", p->name ? p->name : "?",
                   rss >= DG_GIB ? 1 : 0, rss >= DG_GIB ? rss / DG_GIB : rss / DG_MIB,
                   rss >= DG_GIB ? "GiB" : "MiB");
    }
    bool mem = env->mem_total.valid && total > 0 && others / total > d->th[TH_OTHER_MEM_SHARE];
    if (mem)
        dg_cat(what, sizeof what, "other processes hold %.0f%% of %.1f GiB (%s)",
               100 * others / total, total / DG_GIB, names);
    dg_rec_metric psi = env->psi_some_avg10;
    bool pressure = psi.valid && psi.value > d->th[TH_PSI_SOME_PCT];
    if (pressure)
        dg_cat(what, sizeof what, "%smemory pressure %.0f%% (PSI some avg10)", what[0] ? "; " : "",
               psi.value);
    double lim = d->th[TH_SWAP_GROWTH_MIB] * DG_MIB;
    dg_rec_metric soak_swap = d->v->soak.swap_growth;
    bool soak = soak_swap.valid && soak_swap.value > lim;
    if (soak)
        dg_cat(what, sizeof what, "%sswap grew %.0f MiB during the soak", what[0] ? "; " : "",
               soak_swap.value / DG_MIB);
    const dg_view_sweep *sw = &d->v->sweep;
    int swap_trial = -1;
    double swap_max = 0;
    for (int i = 0; i < sw->ntrials; i++) {
        const dg_view_trial *t = &sw->trials[i];
        double g = t->swap_growth.value;
        if (t->ended && !strcmp(t->ended, "ok") && t->swap_growth.valid && g > lim &&
            g > swap_max) {
            swap_max = g;
            swap_trial = i;
        }
    }
    if (swap_trial >= 0)
        dg_cat(what, sizeof what, "%sswap grew %.0f MiB in the sweep trial at batch %d",
               what[0] ? "; " : "", swap_max / DG_MIB, dg_rec_int(sw->trials[swap_trial].batch));
    if (!what[0])
        return;
    cJSON *f =
        dg_rule_finding(d, r, DG_SEV_WARN, -1, "memory under pressure from other work: %s", what);
    if (mem) {
        dg_ev_num(d, f, "env", "processes.top_mem[self=false].rss", others, "bytes");
        dg_ev_metric(d, f, "env", "bytes", env->mem_total, "memory.total");
    }
    if (pressure)
        dg_ev_metric(d, f, "env", "percent", psi, "memory.pressure.some_avg10");
    if (soak)
        dg_ev_metric(d, f, "soak", "bytes", soak_swap, "sampler.swap_growth");
    if (swap_trial >= 0)
        dg_ev_metric(d, f, "sweep", "bytes", sw->trials[swap_trial].swap_growth,
                     "trials[%d].swap_growth", swap_trial);
}
