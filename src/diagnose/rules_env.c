/* Rules over the environment, the device gate and the backends:
 * translation, mixed-architecture Python, a failed gate, the requested device
 * missing, other backends unavailable. */
#include "diagnose/diagnose.h"

#include <math.h>
#include <string.h>

void dg_judge_env_translated(dg_diag *d, const dg_rule *r)
{
    const dg_view_env *e = &d->v->env;
    if (e->translated != 1)
        return;
    const char *how = e->translation, *proc = e->arch_process, *host = e->arch_host;
    cJSON *f = dg_rule_finding(
        d, r, DG_SEV_FAIL, -1, "devgate runs under translation (%s): %s binary on %s host",
        how ? how : "unnamed", proc ? proc : "an unknown", host ? host : "an unknown");
    if (host)
        dg_rule_text(d, f, "action", "%s (%s)", r->action, host);
    dg_ev_bool(d, f, "env", e->translated, "arch.translated");
    dg_ev_str(d, f, "env", how, "arch.translation");
    dg_ev_str(d, f, "env", host, "arch.host");
    dg_ev_str(d, f, "env", proc, "arch.process");
    dg_ev_item(d, f, "env", NULL, e->translation_evidence, "arch.translation_evidence");
}

void dg_judge_env_mixed_arch(dg_diag *d, const dg_rule *r)
{
    const dg_view_env *e = &d->v->env;
    int n = e->nmixed;
    dg_rec_metric more = e->mixed_truncated;
    int total = n + (more.valid && more.value > 0 ? dg_rec_int(more) : 0);
    bool interp = e->py_arch_matches_host == 0;
    if (total == 0 && !interp)
        return;
    const char *ref = e->py_reference_arch;
    char list[300] = "";
    for (int k = 0; k < n && k < 3; k++) {
        const dg_view_py_ext *m = &e->mixed[k];
        dg_cat(list, sizeof list, "%s%s (%s)", k > 0 ? ", " : "", m->path ? m->path : "?",
               m->arch ? m->arch : "?");
    }
    cJSON *f;
    if (total > 0)
        f = dg_rule_finding(
            d, r, DG_SEV_FAIL, -1, "python has %d extension module%s not built for %s: %s%s", total,
            total == 1 ? "" : "s", ref ? ref : "its architecture", list, total > 3 ? ", ..." : "");
    else
        f = dg_rule_finding(
            d, r, DG_SEV_FAIL, -1,
            "the python interpreter's binary is not built for the host architecture (%s)",
            e->arch_host ? e->arch_host : "unknown");
    dg_ev_num(d, f, "env", "python.mixed_extensions.length", n, "modules");
    if (more.valid)
        dg_ev_metric(d, f, "env", "modules", more, "python.mixed_extensions_truncated");
    dg_ev_str(d, f, "env", ref, "python.reference_arch");
    dg_ev_bool(d, f, "env", e->py_arch_matches_host, "python.arch_matches_host");
    dg_ev_item(d, f, "env", NULL, e->py_binary_arch_list, "python.binary.arch");
}

/* The requested device backend (spec.backend), NULL for none or cpu. */
static const char *wanted_backend(const dg_diag *d)
{
    const char *b = d->v->spec.backend;
    return b && strcmp(b, "cpu") != 0 ? b : NULL;
}

/* Where the backends are listed: the gate's, or env.backends without a gate. */
typedef struct backend_list {
    const char *sec;   /* "gate" or "env" */
    const cJSON *json; /* the recorded backends item, or NULL */
    const dg_view_backend *b;
    int n;
} backend_list;

static backend_list backends_of(const dg_diag *d)
{
    if (d->v->gate.present)
        return (backend_list){"gate", d->v->gate.backends_json, d->v->gate.backends,
                              d->v->gate.nbackends};
    return (backend_list){"env", d->v->env.backends_json, d->v->env.backends, d->v->env.nbackends};
}

/* The entry for a backend in the list; *index says which. */
static const dg_view_backend *backend_entry(const backend_list *l, const char *name, int *index)
{
    for (int i = 0; i < l->n; i++)
        if (l->b[i].name && !strcmp(l->b[i].name, name)) {
            *index = i;
            return &l->b[i];
        }
    *index = -1;
    return NULL;
}

void dg_judge_backend_unavailable(dg_diag *d, const dg_rule *r)
{
    const char *want = wanted_backend(d);
    backend_list l = backends_of(d);
    int wi;
    const dg_view_backend *wb = want ? backend_entry(&l, want, &wi) : NULL;
    /* Another backend missing matters less when the one asked for is there. */
    dg_severity sev = wb && wb->available == 1 ? DG_SEV_INFO : DG_SEV_WARN;
    const dg_view_gate *g = &d->v->gate;
    for (int i = 0; i < g->nbackends; i++) {
        const dg_view_backend *b = &g->backends[i];
        if (!b->name || (want && !strcmp(b->name, want)) || b->built != 1 || b->available != 0)
            continue;
        cJSON *f = dg_rule_finding(d, r, sev, -1, "%s built but not available: %s", b->name,
                                   b->reason ? b->reason : "no reason given");
        dg_ev_bool(d, f, "gate", b->built, "backends[%d].built", i);
        dg_ev_bool(d, f, "gate", b->available, "backends[%d].available", i);
        dg_ev_str(d, f, "gate", b->reason, "backends[%d].reason", i);
    }
}

void dg_judge_gate_failed(dg_diag *d, const dg_rule *r)
{
    const dg_view_gate *g = &d->v->gate;
    bool any = false;
    for (int i = 0; i < g->nbackends; i++) {
        const dg_view_backend *b = &g->backends[i];
        if (b->matmul.ok != 0)
            continue;
        any = true;
        dg_rec_metric bad = b->matmul.bad_elements, over = b->matmul.max_err_over_tolerance;
        char detail[120] = "";
        if (bad.valid)
            dg_cat(detail, sizeof detail, ", %d bad elements", dg_rec_int(bad));
        if (over.valid && over.value >= 0)
            dg_cat(detail, sizeof detail, ", max error %.3gx the tolerance", over.value);
        cJSON *f = dg_rule_finding(d, r, DG_SEV_FAIL, -1, "%s matrix product check failed: %s%s",
                                   b->name ? b->name : "a backend",
                                   b->matmul.reason ? b->matmul.reason : "wrong result", detail);
        dg_ev_bool(d, f, "gate", b->matmul.ok, "backends[%d].matmul.ok", i);
        dg_ev_str(d, f, "gate", b->matmul.reason, "backends[%d].matmul.reason", i);
        if (bad.valid)
            dg_ev_metric(d, f, "gate", "elements", bad, "backends[%d].matmul.bad_elements", i);
        if (over.valid)
            dg_ev_metric(d, f, "gate", "ratio", over, "backends[%d].matmul.max_err_over_tolerance",
                         i);
    }
    /* A failed op check or reference check is op-numerics' to name. */
    for (int i = 0; i < g->nbackends; i++) {
        const dg_view_backend *b = &g->backends[i];
        any |= b->ops.failed.valid && b->ops.failed.value > 0;
        any |= b->link.ok == 0 && b->link.rated.valid;       /* link-slow's */
        any |= b->sustain.ok == 0 && b->sustain.ratio.valid; /* device-unstable's */
    }
    any |= g->reference_ok == 0;
    if (!any && g->verdict && !strcmp(g->verdict, "fail")) {
        cJSON *f = dg_rule_finding(d, r, DG_SEV_FAIL, -1, "the device gate failed");
        dg_ev_str(d, f, "gate", g->verdict, "verdict");
    }
}

void dg_judge_device_missing(dg_diag *d, const dg_rule *r)
{
    const char *want = wanted_backend(d);
    if (!want || (!d->v->gate.present && !d->v->env.present))
        return;
    backend_list l = backends_of(d);
    int i;
    const dg_view_backend *b = backend_entry(&l, want, &i);
    if (!b) {
        if (!l.json)
            return; /* that section did not list backends at all */
        cJSON *f = dg_rule_finding(d, r, DG_SEV_FAIL, -1,
                                   "%s requested but not built into this devgate", want);
        dg_ev_add(d, f, "spec", "backend", cJSON_CreateString(want), NULL);
        dg_ev_item(d, f, l.sec, NULL, l.json, "backends");
        return;
    }
    if (b->available != 0)
        return;
    cJSON *f = dg_rule_finding(d, r, DG_SEV_FAIL, -1, "%s requested but not available: %s", want,
                               b->reason ? b->reason : "no reason given");
    dg_ev_add(d, f, "spec", "backend", cJSON_CreateString(want), NULL);
    dg_ev_bool(d, f, l.sec, b->available, "backends[%d].available", i);
    dg_ev_str(d, f, l.sec, b->reason, "backends[%d].reason", i);
}

/* op-numerics: gate level 2's per-op table; one finding per backend, op and
 * precision that missed its tolerance, naming the worst shape. */
void dg_judge_op_numerics(dg_diag *d, const dg_rule *r)
{
    const dg_view_gate *g = &d->v->gate;
    if (g->reference_ok == 0) {
        cJSON *f = dg_rule_finding(d, r, DG_SEV_FAIL, -1,
                                   "the float64 reference disagrees with its own finite "
                                   "differences: the per-op verdicts cannot be trusted");
        dg_ev_bool(d, f, "gate", g->reference_ok, "reference_ok");
    }
    for (int i = 0; i < g->nbackends; i++) {
        const dg_view_ops *o = &g->backends[i].ops;
        for (int k = 0; o->present && k < o->nrows; k++) {
            const dg_view_op_row *x = &o->rows[k];
            if (!x->verdict || (strcmp(x->verdict, "fail") && strcmp(x->verdict, "error")))
                continue;
            /* The worst row of this op and precision speaks for it; the others count. */
            int worst = k, count = 0;
            bool earlier = false;
            for (int j = 0; j < o->nrows; j++) {
                const dg_view_op_row *y = &o->rows[j];
                if (!y->verdict || (strcmp(y->verdict, "fail") && strcmp(y->verdict, "error")) ||
                    !y->op || !x->op || strcmp(y->op, x->op) || !y->precision || !x->precision ||
                    strcmp(y->precision, x->precision))
                    continue;
                earlier |= j < k;
                count++;
                double a = o->rows[worst].nmse.valid ? o->rows[worst].nmse.value : INFINITY;
                double b = y->nmse.valid ? y->nmse.value : INFINITY;
                if (b > a)
                    worst = j;
            }
            if (earlier)
                continue;
            const dg_view_op_row *w = &o->rows[worst];
            char err[96];
            if (w->nmse.valid)
                snprintf(err, sizeof err, "NMSE %.3g against a tolerance of %.3g%s", w->nmse.value,
                         w->tolerance.value, w->tolerance.value == 0 ? " (exact)" : "");
            else
                snprintf(err, sizeof err, "%s", w->reason ? w->reason : "no finite result");
            cJSON *f =
                dg_rule_finding(d, r, DG_SEV_FAIL, -1, "%s %s (%s) is wrong: %s %s at %s%s",
                                g->backends[i].name ? g->backends[i].name : "a backend", x->op,
                                x->precision, w->output ? w->output : "its output", err,
                                w->shape ? w->shape : "?", count > 1 ? " (and more shapes)" : "");
            dg_ev_str(d, f, "gate", w->op, "backends[%d].ops.table[%d].op", i, worst);
            dg_ev_str(d, f, "gate", w->shape, "backends[%d].ops.table[%d].shape", i, worst);
            dg_ev_metric(d, f, "gate", "nmse", w->nmse, "backends[%d].ops.table[%d].nmse", i,
                         worst);
            dg_ev_metric(d, f, "gate", "nmse", w->tolerance, "backends[%d].ops.table[%d].tolerance",
                         i, worst);
            const char *call = strncmp(x->op, "gemm_", 5) == 0 ? "gemm" : x->op;
            dg_rule_text(d, f, "action",
                         "that kernel is wrong on this device: report it with the shape; until "
                         "it is fixed run %s on the cpu (--disable-op %s) or train elsewhere",
                         call, call);
        }
    }
}

/* link-slow: gate level 2's host-device copies against the link's rating. */
void dg_judge_link_slow(dg_diag *d, const dg_rule *r)
{
    const dg_view_gate *g = &d->v->gate;
    double min = d->th[TH_LINK_MIN_FRACTION];
    for (int i = 0; i < g->nbackends; i++) {
        const dg_view_link *l = &g->backends[i].link;
        if (!l->present || !l->rated.valid)
            continue;
        /* The page-locked pair speaks for the link; the pageable one without it. */
        bool pinned = l->gbps[DG_LINK_H2D_PINNED].valid || l->gbps[DG_LINK_D2H_PINNED].valid;
        int ways[2] = {pinned ? DG_LINK_H2D_PINNED : DG_LINK_H2D_PAGEABLE,
                       pinned ? DG_LINK_D2H_PINNED : DG_LINK_D2H_PAGEABLE};
        char what[200] = "";
        for (int k = 0; k < 2; k++) {
            dg_rec_metric f = l->fraction[ways[k]], v = l->gbps[ways[k]];
            if (f.valid && v.valid && f.value < min)
                dg_cat(what, sizeof what, "%s%s %.1f GB/s (%.2f of it)", what[0] ? ", " : "",
                       dg_link_way_names[ways[k]], v.value, f.value);
        }
        if (!what[0])
            continue;
        cJSON *f =
            dg_rule_finding(d, r, DG_SEV_WARN, -1,
                            "%s's link (%s, rated %.1f GB/s) is slow: %s, under "
                            "link_min_fraction %.2f",
                            g->backends[i].name ? g->backends[i].name : "a backend",
                            l->kind ? l->kind : "kind not reported", l->rated.value, what, min);
        dg_ev_metric(d, f, "gate", "GB/s", l->rated, "backends[%d].link.rated", i);
        for (int k = 0; k < 2; k++) {
            dg_ev_metric(d, f, "gate", "GB/s", l->gbps[ways[k]], "backends[%d].link.%s", i,
                         dg_link_way_names[ways[k]]);
            dg_ev_metric(d, f, "gate", "fraction", l->fraction[ways[k]],
                         "backends[%d].link.fraction_of_rated.%s", i, dg_link_way_names[ways[k]]);
        }
        dg_ev_num(d, f, "thresholds", "link_min_fraction", min, "fraction");
        if (l->current && l->kind && strcmp(l->current, l->kind) != 0)
            dg_rule_text(d, f, "hypothesis",
                         "the link runs as %s, below the %s it can do: trained down, a slot of "
                         "fewer lanes, or power saving that did not lift under load",
                         l->current, l->kind);
    }
}

/* device-unstable: gate level 3's sustained rate fell by more than
 * unstable_drift_pct, wholly by its 95% interval. */
void dg_judge_device_unstable(dg_diag *d, const dg_rule *r)
{
    const dg_view_gate *g = &d->v->gate;
    double pct = d->th[TH_UNSTABLE_DRIFT_PCT];
    for (int i = 0; i < g->nbackends; i++) {
        const dg_view_sustain *s = &g->backends[i].sustain;
        if (!s->present || !s->ratio_hi.valid || !s->ratio.valid)
            continue;
        /* Contended windows were left out by the gate; a verdict of "not judged" has no interval.
         */
        if (s->verdict && !strncmp(s->verdict, "not judged", 10))
            continue;
        if (!(s->ratio_hi.value < 1 - pct / 100))
            continue;
        cJSON *f = dg_rule_finding(
            d, r, DG_SEV_FAIL, -1,
            "%s slowed while it worked: %.1f GFLOP/s in the last third of a %.0f s load against "
            "%.1f in the first (%.0f%%, 95%% %.0f%% to %.0f%%), beyond unstable_drift_pct %.0f%%",
            g->backends[i].name ? g->backends[i].name : "a backend", s->last_third.value,
            s->wall.valid ? s->wall.value : NAN, s->first_third.value, 100 * (s->ratio.value - 1),
            100 * (s->ratio_lo.value - 1), 100 * (s->ratio_hi.value - 1), pct);
        dg_ev_metric(d, f, "gate", "ratio", s->ratio, "backends[%d].sustain.drift.ratio", i);
        dg_ev_metric(d, f, "gate", "ratio", s->ratio_hi, "backends[%d].sustain.drift.ratio_ci.hi",
                     i);
        dg_ev_metric(d, f, "gate", "GFLOP/s", s->first_third,
                     "backends[%d].sustain.drift.first_third", i);
        dg_ev_metric(d, f, "gate", "GFLOP/s", s->last_third,
                     "backends[%d].sustain.drift.last_third", i);
        dg_ev_metric(d, f, "gate", "C", s->temp_max, "backends[%d].sustain.health.temperature.max",
                     i);
        dg_ev_num(d, f, "thresholds", "unstable_drift_pct", pct, "%");
    }
}

/* throttled: a slowing throttle reason held for throttle_min_share of the load. */
void dg_judge_throttled(dg_diag *d, const dg_rule *r)
{
    const dg_view_gate *g = &d->v->gate;
    double share = d->th[TH_THROTTLE_MIN_SHARE];
    for (int i = 0; i < g->nbackends; i++) {
        const dg_view_sustain *s = &g->backends[i].sustain;
        if (!s->present || !s->wall.valid || s->wall.value <= 0)
            continue;
        char what[300] = "";
        for (int k = 0; k < s->nthrottle; k++) {
            const dg_view_throttle *t = &s->throttle[k];
            if (t->slows == 1 && t->seconds.valid && t->seconds.value >= share * s->wall.value)
                dg_cat(what, sizeof what, "%s%s for %.1f s", what[0] ? ", " : "",
                       t->reason ? t->reason : "a reason", t->seconds.value);
        }
        if (!what[0])
            continue;
        char extra[160] = "";
        if (s->temp_max.valid)
            dg_cat(extra, sizeof extra, "; up to %.0f C", s->temp_max.value);
        if (s->sm_min.valid && s->sm_max.valid)
            dg_cat(extra, sizeof extra, "; clocks %.0f-%.0f MHz", s->sm_min.value, s->sm_max.value);
        if (s->power_max.valid)
            dg_cat(extra, sizeof extra, "; power up to %.0f W", s->power_max.value);
        cJSON *f = dg_rule_finding(d, r, DG_SEV_WARN, -1, "%s throttled during a %.0f s load: %s%s",
                                   g->backends[i].name ? g->backends[i].name : "a backend",
                                   s->wall.value, what, extra);
        for (int k = 0; k < s->nthrottle; k++)
            dg_ev_metric(d, f, "gate", "s", s->throttle[k].seconds,
                         "backends[%d].sustain.health.throttle[%d].seconds", i, k);
        dg_ev_metric(d, f, "gate", "s", s->wall, "backends[%d].sustain.wall", i);
        dg_ev_num(d, f, "thresholds", "throttle_min_share", share, "fraction");
    }
}
