/* Rules over an slo record (docs/slo.md): whether the SLO can be signed
 * (slo-met, slo-missed, slo-inconclusive), where the latency went
 * (queueing-bound) and what a training job beside the server did to it
 * (training-interference). They read the record's typed slo view
 * (core/record_slo.h) and stay silent on every other record. */
#include "core/record_slo.h"
#include "diagnose/diagnose.h"

#include <string.h>

/* The slo view of d's record; false (nothing built) when it is not one. */
static bool slo_view(const dg_diag *d, dg_view_slo *s)
{
    if (!d->v->section[DG_SEC_SLO]) {
        memset(s, 0, sizeof *s);
        return false;
    }
    if (!dg_view_slo_build(s, d->v->section[DG_SEC_SLO])) {
        dg_view_slo_free(s);
        return false;
    }
    return s->present;
}

/* "8 streams" or "5 requests/s". */
static void level_name(char *buf, size_t n, const dg_view_slo_level *l)
{
    if (isfinite(l->concurrency))
        snprintf(buf, n, "%.0f stream%s", l->concurrency, l->concurrency == 1 ? "" : "s");
    else
        snprintf(buf, n, "%.4g requests/s", l->rate);
}

/* The level's counts as evidence. */
static void level_evidence(dg_diag *d, cJSON *f, const dg_view_slo_level *l)
{
    dg_ev_num(d, f, "slo", "levels[].concurrency", l->concurrency, "streams");
    dg_ev_str(d, f, "slo", l->verdict, "levels[].verdict.state");
    dg_ev_num(d, f, "slo", "levels[].verdict.n", l->n, "");
    dg_ev_num(d, f, "slo", "levels[].verdict.over", l->over, "");
    dg_ev_num(d, f, "slo", "levels[].requests.failed", l->failed, "");
    dg_ev_num(d, f, "slo", "levels[].requests.timeouts", l->timeouts, "");
}

void dg_judge_slo_met(dg_diag *d, const dg_rule *r)
{
    dg_view_slo s;
    if (!slo_view(d, &s))
        return;
    if (s.signed_ == 1) {
        cJSON *f = dg_rule_finding(d, r, DG_SEV_INFO, -1, "%s",
                                   s.statement ? s.statement : "the SLO is signed");
        dg_ev_str(d, f, "slo", s.verdict, "final_gate.verdict");
        dg_ev_num(d, f, "slo", "final_gate.concurrency", s.signed_concurrency, "streams");
        for (int i = 0; i < s.nlevels; i++)
            if (s.levels[i].concurrency == s.signed_concurrency)
                level_evidence(d, f, &s.levels[i]);
    }
    dg_view_slo_free(&s);
}

/* The first level, in concurrency order, whose verdict is state. */
static const dg_view_slo_level *first_with(const dg_view_slo *s, const char *state)
{
    const dg_view_slo_level *best = NULL;
    for (int i = 0; i < s->nlevels; i++) {
        const dg_view_slo_level *l = &s->levels[i];
        if (l->verdict && strcmp(l->verdict, state) == 0 &&
            (!best || !(best->concurrency <= l->concurrency)))
            best = l;
    }
    return best;
}

void dg_judge_slo_missed(dg_diag *d, const dg_rule *r)
{
    dg_view_slo s;
    if (!slo_view(d, &s))
        return;
    const dg_view_slo_level *l = first_with(&s, "fail");
    if (s.signed_ != 1 && s.verdict && strcmp(s.verdict, "missed") == 0 && l) {
        char at[48];
        level_name(at, sizeof at, l);
        cJSON *f = dg_rule_finding(
            d, r, DG_SEV_FAIL, -1,
            "the SLO is missed at %s, the lowest load measured: %.0f of %.0f requests over a "
            "bound (%.0f failed, %.0f timed out)",
            at, l->over, l->n, l->failed, l->timeouts);
        level_evidence(d, f, l);
        for (int b = 0; b < s.nbounds; b++)
            dg_ev_num(d, f, "slo", dg_slo_metric_name(s.bounds[b].metric),
                      dg_view_slo_pct(l, s.bounds[b].metric), "ms");
    }
    dg_view_slo_free(&s);
}

void dg_judge_slo_inconclusive(dg_diag *d, const dg_rule *r)
{
    dg_view_slo s;
    if (!slo_view(d, &s))
        return;
    if (s.signed_ != 1 && s.verdict && strcmp(s.verdict, "inconclusive") == 0) {
        cJSON *f = dg_rule_finding(d, r, DG_SEV_WARN, -1, "nothing can be signed yet: %s",
                                   s.statement ? s.statement : "too few requests");
        const dg_view_slo_level *l = first_with(&s, "inconclusive");
        if (l)
            level_evidence(d, f, l);
        dg_ev_num(d, f, "slo", "spec.percentile", s.percentile, "%");
        dg_ev_num(d, f, "slo", "spec.confidence", s.confidence, "");
    }
    dg_view_slo_free(&s);
}

void dg_judge_queueing_bound(dg_diag *d, const dg_rule *r)
{
    dg_view_slo s;
    if (!slo_view(d, &s))
        return;
    /* The lowest and the highest closed-loop level serving alone. */
    const dg_view_slo_level *lo = NULL, *hi = NULL;
    for (int i = 0; i < s.nlevels; i++) {
        const dg_view_slo_level *l = &s.levels[i];
        if (!isfinite(l->concurrency) || !isfinite(l->lat[DG_SLO_TTFT].p50))
            continue;
        if (!lo || l->concurrency < lo->concurrency)
            lo = l;
        if (!hi || l->concurrency > hi->concurrency)
            hi = l;
    }
    /* The engine's own queue where it was scraped: requests waiting. */
    const dg_view_slo_level *queued = NULL;
    for (int i = 0; i < s.nlevels; i++)
        if (s.levels[i].queue_waiting >= 1 &&
            (!queued || s.levels[i].queue_waiting > queued->queue_waiting))
            queued = &s.levels[i];
    double ttft = lo && hi && lo != hi ? hi->lat[DG_SLO_TTFT].p50 / lo->lat[DG_SLO_TTFT].p50 : NAN;
    double tpot = lo && hi && lo != hi ? hi->lat[DG_SLO_TPOT].p50 / lo->lat[DG_SLO_TPOT].p50 : NAN;
    double th = d->th[TH_SLO_QUEUE_RATIO];
    bool ladder = ttft >= th && !(tpot >= th);
    if (ladder || queued) {
        char a[48], b[48];
        cJSON *f;
        if (ladder) {
            level_name(a, sizeof a, lo);
            level_name(b, sizeof b, hi);
            f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                                "latency goes to queueing: from %s to %s the median TTFT rises "
                                "%.1fx while TPOT rises %.2fx",
                                a, b, ttft, tpot);
        } else {
            level_name(a, sizeof a, queued);
            f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                                "latency goes to queueing: at %s the engine held %.1f requests "
                                "waiting on average",
                                a, queued->queue_waiting);
        }
        if (lo && hi) {
            dg_ev_num(d, f, "slo", "levels[lowest].latency.ttft.p50", lo->lat[DG_SLO_TTFT].p50,
                      "ms");
            dg_ev_num(d, f, "slo", "levels[highest].latency.ttft.p50", hi->lat[DG_SLO_TTFT].p50,
                      "ms");
            dg_ev_num(d, f, "slo", "levels[lowest].latency.tpot.p50", lo->lat[DG_SLO_TPOT].p50,
                      "ms");
            dg_ev_num(d, f, "slo", "levels[highest].latency.tpot.p50", hi->lat[DG_SLO_TPOT].p50,
                      "ms");
        }
        if (queued)
            dg_ev_num(d, f, "slo", "levels[].engine.queue_waiting", queued->queue_waiting,
                      "requests");
    }
    dg_view_slo_free(&s);
}

/* The level serving alone at the same load as beside level b. */
static const dg_view_slo_level *alone_twin(const dg_view_slo *s, const dg_view_slo_level *b)
{
    for (int i = 0; i < s->nlevels; i++) {
        const dg_view_slo_level *l = &s->levels[i];
        if ((isfinite(b->concurrency) && l->concurrency == b->concurrency) ||
            (!isfinite(b->concurrency) && !isfinite(l->concurrency) && l->rate == b->rate))
            return l;
    }
    return NULL;
}

void dg_judge_training_interference(dg_diag *d, const dg_rule *r)
{
    dg_view_slo s;
    if (!slo_view(d, &s))
        return;
    double th = 1 + d->th[TH_SLO_INTERFERENCE_PCT] / 100;
    for (int i = 0; i < s.nbeside; i++) {
        const dg_view_slo_level *b = &s.beside[i], *a = alone_twin(&s, b);
        if (!a)
            continue;
        /* The bound whose percentile rose most, judged on the intervals:
         * beside's lower end above alone's upper end. */
        int worst = -1;
        double ratio = NAN;
        for (int k = 0; k < s.nbounds; k++) {
            dg_slo_metric m = s.bounds[k].metric;
            double x = b->lat[m].pslo / a->lat[m].pslo;
            bool apart = !(b->lat[m].lo <= a->lat[m].hi) || !isfinite(b->lat[m].lo);
            if (x >= th && apart && !(x <= ratio)) {
                ratio = x;
                worst = (int)m;
            }
        }
        bool slowed = s.train_slowdown >= th;
        if (worst < 0 && !slowed)
            continue;
        char at[48], pn[16];
        level_name(at, sizeof at, b);
        snprintf(pn, sizeof pn, "p%.4g", s.percentile);
        cJSON *f;
        if (worst >= 0)
            f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                                "training beside serving raises %s %s from %.1f to %.1f ms at "
                                "%s (%.2fx)%s",
                                pn, dg_slo_metric_name((dg_slo_metric)worst), a->lat[worst].pslo,
                                b->lat[worst].pslo, at, ratio,
                                slowed ? "; the training's steps slow too" : "");
        else
            f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                                "serving beside training slows the training's steps %.2fx "
                                "(%.1f ms alone, %.1f ms beside)",
                                s.train_slowdown, s.train_step_alone_ms, s.train_step_beside_ms);
        if (worst >= 0) {
            dg_ev_num(d, f, "slo", "levels[alone].latency.pslo", a->lat[worst].pslo, "ms");
            dg_ev_num(d, f, "slo", "levels[beside].latency.pslo", b->lat[worst].pslo, "ms");
            dg_ev_num(d, f, "slo", "levels[beside].latency.lo", b->lat[worst].lo, "ms");
            dg_ev_num(d, f, "slo", "levels[alone].latency.hi", a->lat[worst].hi, "ms");
        }
        dg_ev_num(d, f, "slo", "while.alone.step_ms", s.train_step_alone_ms, "ms");
        dg_ev_num(d, f, "slo", "while.beside.step_ms", s.train_step_beside_ms, "ms");
        dg_ev_num(d, f, "slo", "while.slowdown", s.train_slowdown, "ratio");
        break;
    }
    dg_view_slo_free(&s);
}
