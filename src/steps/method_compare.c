/* The method's comparison against the cpu, written once (the runner
 * interface in src/steps/runner.h): pairs of runs, cpu then the device, each
 * side under the measurement lock with its contention window; at least the
 * plan's pairs, then more while the speedup's interval is too wide; the
 * compare section (docs/schema/report.md "compare") from the typed sides,
 * with the agreement of the sides' losses where the runner reports them. */
#include "steps/runner.h"

#include "analysis/loss.h"
#include "analysis/speed.h"
#include "core/record.h"

#include <math.h>
#include <string.h>

static double value_of(dg_metric m)
{
    return m.valid && isfinite(m.value) ? m.value : NAN;
}

/* The reported, positive samples/s of n sides into v; their count. */
static size_t rates_of(const dg_pair_side *s, int n, double *v)
{
    size_t k = 0;
    for (int i = 0; i < n; i++)
        if (value_of(s[i].sps) > 0)
            v[k++] = s[i].sps.value;
    return k;
}

/* The median of the reported values of one figure over n sides; NAN when none. */
static double median_of(const dg_pair_side *s, int n, size_t field)
{
    double v[DG_COMPARE_MAX_PAIRS] = {0};
    size_t k = 0;
    for (int i = 0; i < n && i < DG_COMPARE_MAX_PAIRS; i++) {
        dg_metric m = *(const dg_metric *)((const char *)&s[i] + field);
        if (isfinite(value_of(m)))
            v[k++] = m.value;
    }
    if (k == 0)
        return NAN;
    dg_stats st;
    dg_stats_compute(v, k, 0, &st);
    return st.median;
}

static cJSON *ci_json(double lo, double hi, bool valid, double resamples, const char *unit,
                      const char *method)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "lo", dg_json_metric_of(valid ? lo : NAN, unit));
    cJSON_AddItemToObject(o, "hi", dg_json_metric_of(valid ? hi : NAN, unit));
    cJSON_AddNumberToObject(o, "level", 0.95);
    cJSON_AddNumberToObject(o, "resamples", valid ? resamples : 0);
    cJSON_AddStringToObject(o, "method", method);
    return o;
}

static double reduction_pct(double sp)
{
    return isfinite(sp) && sp > 0 ? 100 * (1 - 1 / sp) : NAN;
}

/* The verdict on the speedup's interval (analysis/speed.c), in the words
 * accept, compare and compare RUN_A RUN_B share. */
static void add_speed(cJSON *run, const dg_median_ci *ci, bool valid, size_t nc, size_t nd)
{
    dg_speed_judgement sj;
    dg_speed_judge(valid ? ci->lo : NAN, valid ? ci->hi : NAN, nc, nd, 2, NULL, &sj);
    cJSON *sv = cJSON_AddObjectToObject(run, "speed");
    cJSON_AddStringToObject(sv, "verdict", sj.verdict);
    cJSON_AddStringToObject(sv, "why", sj.why);
    cJSON_AddNumberToObject(sv, "pays_off_min", sj.pays_off_min);
    cJSON_AddNumberToObject(sv, "band_lo", sj.band_lo);
    cJSON_AddNumberToObject(sv, "band_hi", sj.band_hi);
}

/* The device sides' busy fraction: the median with its seeded bootstrap
 * interval; and the Mann-Whitney test of the two sides' samples/s. */
static void add_busy_mw(cJSON *run, const dg_pair_side *dev, int n, const double *cs, size_t nc,
                        const double *ds, size_t nd)
{
    double bv[DG_COMPARE_MAX_PAIRS];
    size_t nb = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(value_of(dev[i].busy)))
            bv[nb++] = dev[i].busy.value;
    dg_median_ci ci = {0};
    bool civ = nb && dg_bootstrap_median_ci(bv, nb, NULL, 0, 0, 0.95, DG_BOOTSTRAP_SEED + 1, &ci) &&
               ci.valid;
    cJSON_AddItemToObject(
        run, "busy_fraction",
        dg_json_metric_of(median_of(dev, n, offsetof(dg_pair_side, busy)), "fraction"));
    cJSON_AddItemToObject(run, "busy_fraction_ci",
                          ci_json(ci.lo, ci.hi, civ, (double)ci.resamples, "fraction",
                                  "percentile bootstrap over the device's runs"));
    double u = NAN, p = nc && nd ? dg_mann_whitney_p(cs, nc, ds, nd, &u) : NAN;
    cJSON *mw = cJSON_AddObjectToObject(run, "mann_whitney");
    cJSON_AddItemToObject(mw, "p", dg_json_metric_of(p, "probability"));
    cJSON_AddItemToObject(mw, "u_cpu", dg_json_metric_of(u, "pairs"));
    cJSON_AddStringToObject(mw, "of", "the runs' samples/s, cpu against device, two-sided");
}

/* The repetitions: the order, each side's samples/s and entries (moved in),
 * and the seconds the entries waited for the measurement lock. */
static void add_repetitions(cJSON *run, const dg_compare_plan *plan,
                            const dg_pair_side *const *sides, int n, cJSON *const *entries)
{
    cJSON *rp = cJSON_AddObjectToObject(run, "repetitions");
    cJSON_AddNumberToObject(rp, "per_side", n);
    cJSON_AddNumberToObject(rp, "warmup_pairs", plan->warmup_pairs);
    cJSON *order = cJSON_AddArrayToObject(rp, "order");
    cJSON *rates[2] = {cJSON_AddArrayToObject(rp, "cpu_samples_per_s"),
                       cJSON_AddArrayToObject(rp, "device_samples_per_s")};
    cJSON *lists[2] = {entries ? cJSON_AddArrayToObject(rp, "cpu") : NULL,
                       entries ? cJSON_AddArrayToObject(rp, "device") : NULL};
    double wait = 0;
    for (int i = 0; i < n; i++) {
        for (int side = 0; side < 2; side++) {
            double v = value_of(sides[side][i].sps);
            cJSON_AddItemToArray(order, cJSON_CreateString(side ? "device" : "cpu"));
            cJSON_AddItemToArray(rates[side],
                                 isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull());
            cJSON *e = entries ? entries[2 * i + side] : NULL;
            double w = e ? dg_jnum(e, "lock.waited") : NAN;
            wait += isfinite(w) ? w : 0;
            if (e)
                cJSON_AddItemToArray(lists[side], e);
        }
    }
    cJSON_AddItemToObject(rp, "lock_waited", dg_json_metric_of(entries ? wait : NAN, "s"));
}

cJSON *dg_method_pairs_run(const dg_compare_plan *plan, const char *device, const dg_pair_side *cpu,
                           const dg_pair_side *dev, int n, cJSON *const *entries)
{
    if (n > DG_COMPARE_MAX_PAIRS)
        n = DG_COMPARE_MAX_PAIRS;
    cJSON *run = cJSON_CreateObject();
    cJSON_AddNumberToObject(run, "batch", plan->batch);
    cJSON_AddStringToObject(run, "status", "ok");
    double cs[DG_COMPARE_MAX_PAIRS], ds[DG_COMPARE_MAX_PAIRS];
    size_t nc = rates_of(cpu, n, cs), nd = rates_of(dev, n, ds);
    const dg_pair_side *sides[2] = {cpu, dev};
    double med[2] = {NAN, NAN};
    for (int side = 0; side < 2; side++) {
        cJSON *j = cJSON_AddObjectToObject(run, side ? "device" : "cpu");
        if (side)
            cJSON_AddStringToObject(j, "backend", device);
        cJSON_AddItemToObject(
            j, "step_ms",
            dg_json_metric_of(median_of(sides[side], n, offsetof(dg_pair_side, step_ms)), "ms"));
        med[side] = median_of(sides[side], n, offsetof(dg_pair_side, sps));
        cJSON_AddItemToObject(j, "samples_per_s", dg_json_metric_of(med[side], "samples/s"));
    }
    /* The speedup in samples/s over the loop's wall time (data wait included):
     * device over cpu, the interval by the seeded bootstrap of the median ratio. */
    double sp = isfinite(med[0]) && isfinite(med[1]) && med[0] > 0 ? med[1] / med[0] : NAN;
    cJSON_AddItemToObject(run, "speedup", dg_json_metric_of(sp, "x"));
    dg_median_ci ci = {0};
    bool civ = nc && nd &&
               dg_bootstrap_median_ci(ds, nd, cs, nc, 0, 0.95, DG_BOOTSTRAP_SEED, &ci) && ci.valid;
    cJSON_AddItemToObject(run, "speedup_ci",
                          ci_json(ci.lo, ci.hi, civ, (double)ci.resamples, "x",
                                  "percentile bootstrap of median(device) / median(cpu)"));
    add_speed(run, &ci, civ, nc, nd);
    /* Time per sample: 100 (1 - 1/speedup), the interval from the speedup's. */
    cJSON_AddItemToObject(run, "step_time_reduction_pct",
                          dg_json_metric_of(reduction_pct(sp), "%"));
    cJSON_AddItemToObject(run, "step_time_reduction_pct_ci",
                          ci_json(reduction_pct(ci.lo), reduction_pct(ci.hi), civ,
                                  (double)ci.resamples, "%", "from speedup_ci"));
    add_busy_mw(run, dev, n, cs, nc, ds, nd);
    cJSON_AddStringToObject(run, "busy_source",
                            plan->busy_source
                                ? plan->busy_source
                                : "1 - the data wait's share, from the probe's host clock (not "
                                  "device utilisation)");
    add_repetitions(run, plan, sides, n, entries);
    cJSON_AddNullToObject(run, "verdict");
    cJSON_AddStringToObject(run, "note",
                            "numerics are not compared for a user's program (no reference run)");
    return run;
}

/* The speedup's 95% interval width over the speedup after n pairs; NAN when
 * not computable. */
static double ci_width(const dg_pair_side *cpu, const dg_pair_side *dev, int n)
{
    double c[DG_COMPARE_MAX_PAIRS], d[DG_COMPARE_MAX_PAIRS];
    size_t nc = rates_of(cpu, n, c), nd = rates_of(dev, n, d);
    dg_stats sc, sd;
    dg_median_ci ci;
    if (!nc || !nd)
        return NAN;
    dg_stats_compute(c, nc, 0, &sc);
    dg_stats_compute(d, nd, 0, &sd);
    if (!(sc.median > 0) ||
        !dg_bootstrap_median_ci(d, nd, c, nc, 0, 0.95, DG_BOOTSTRAP_SEED, &ci) || !ci.valid)
        return NAN;
    double sp = sd.median / sc.median;
    return sp > 0 ? (ci.hi - ci.lo) / sp : NAN;
}

/* A repetition's entry (docs/schema/measure.md compare REP): the side's
 * median step and busy fraction, its step times where the runner has them
 * (the probe reports statistics, not each step: ms empty), and the runner's
 * own members (s->extra, moved in). */
static cJSON *side_entry(dg_pair_side *s)
{
    cJSON *e = cJSON_CreateObject();
    cJSON *ms = cJSON_DetachItemFromObjectCaseSensitive(s->extra, "ms");
    cJSON *warmup = cJSON_DetachItemFromObjectCaseSensitive(s->extra, "warmup");
    cJSON_AddItemToObject(e, "ms", ms ? ms : cJSON_CreateArray());
    cJSON_AddItemToObject(e, "warmup", warmup ? warmup : cJSON_CreateNumber(0));
    cJSON_AddItemToObject(e, "median", dg_json_metric_of(value_of(s->step_ms), "ms"));
    cJSON_AddItemToObject(e, "busy_fraction", dg_json_metric_of(value_of(s->busy), "fraction"));
    /* The runner's other members, moved in. */
    while (s->extra && s->extra->child) {
        cJSON *m = cJSON_DetachItemViaPointer(s->extra, s->extra->child);
        cJSON_AddItemToObject(e, m->string, m);
    }
    cJSON_Delete(s->extra);
    s->extra = NULL;
    return e;
}

/* Whether the speedup after n pairs settles its verdict with a margin more
 * pairs do not cross (dg_speed_decisive). */
static bool decisive(const dg_pair_side *cpu, const dg_pair_side *dev, int n)
{
    double c[DG_COMPARE_MAX_PAIRS], d[DG_COMPARE_MAX_PAIRS];
    size_t nc = rates_of(cpu, n, c), nd = rates_of(dev, n, d);
    dg_median_ci ci;
    return nc && nd && dg_bootstrap_median_ci(d, nd, c, nc, 0, 0.95, DG_BOOTSTRAP_SEED, &ci) &&
           ci.valid && dg_speed_decisive(ci.lo, ci.hi, nc, nd, NULL);
}

typedef struct pairs {
    dg_pair_side side[2][DG_COMPARE_MAX_PAIRS];
    cJSON *entry[2 * DG_COMPARE_MAX_PAIRS];
    int n;              /* pairs run */
    const char *ended;  /* what ended the pairs: "decisive", "interval narrow", "time budget",
                           "most pairs" */
    const char *failed; /* the side that did not end ok */
    const char *why;    /* its reason */
    bool interrupted;
} pairs;

static bool stop_asked(const volatile sig_atomic_t *cancel)
{
    return cancel && *cancel;
}

/* Runs pairs until the plan is met, a side fails or the run is cancelled. */
static dg_status run_pairs(const dg_runner_i *r, void *rctx, const char *device,
                           const dg_compare_plan *plan, const volatile sig_atomic_t *cancel,
                           pairs *p)
{
    int most = plan->max_pairs < DG_COMPARE_MAX_PAIRS ? plan->max_pairs : DG_COMPARE_MAX_PAIRS;
    double t0 = dg_now();
    p->ended = "most pairs";
    for (int i = 0; i < most && !p->failed; i++) {
        /* A verdict settled with a margin ends the pairs, the plan's minimum
         * or not (a device 50x the cpu needs no fifth cpu run to say so). */
        if (i >= DG_SPEED_DECISIVE_MIN && decisive(p->side[0], p->side[1], i)) {
            p->ended = "decisive";
            break;
        }
        /* Past the plan's pairs, another only while the interval is too wide
         * and the budget leaves room for a pair as long as the mean one. */
        if (i >= plan->min_pairs && !(ci_width(p->side[0], p->side[1], i) > plan->ci_width)) {
            p->ended = "interval narrow";
            break;
        }
        double spent = dg_now() - t0;
        if (i >= plan->min_pairs && plan->budget_s > 0 && spent + spent / i > plan->budget_s) {
            p->ended = "time budget";
            break;
        }
        for (int s = 0; s < 2 && !p->failed; s++) {
            if (stop_asked(cancel)) {
                p->interrupted = true;
                return DG_ERR_INTERRUPTED;
            }
            dg_pair_side *ps = &p->side[s][i];
            *ps = (dg_pair_side){.end = DG_TRIAL_FAILED};
            dg_measured ms;
            dg_measured_begin(&ms, cancel);
            dg_status st = r->pair(rctx, plan->batch, s ? device : "cpu", ps);
            cJSON *e = side_entry(ps);
            dg_measured_end(&ms, e);
            /* The repetition's window is "window" there, as the fixture's. */
            cJSON *w = cJSON_DetachItemFromObjectCaseSensitive(e, "contention");
            cJSON_AddItemToObject(e, "window", w ? w : cJSON_CreateNull());
            p->entry[2 * i + s] = e;
            p->n = i + 1;
            if (st != DG_OK)
                return DG_ERR_NOMEM;
            if (ps->end == DG_TRIAL_INTERRUPTED) {
                p->interrupted = true;
                return DG_ERR_INTERRUPTED;
            }
            if (ps->end != DG_TRIAL_OK) {
                p->failed = s ? device : "cpu";
                p->why = ps->reason;
            }
        }
    }
    return DG_OK;
}

/* Why the sides' losses cannot be held against each other (into why, n
 * bytes; "" when they can): a side's record says torch was unseeded, or the
 * cpu does not reproduce its own losses (its first two repetitions disagree,
 * *repeat their largest relative difference): the sides' losses then differ
 * by their random draws, not by their numerics. False when out of memory. */
static bool losses_incomparable(const pairs *p, double tol, char *why, size_t n, double *repeat)
{
    const dg_pair_side *cpu = p->side[0], *dev = p->side[1];
    *repeat = NAN;
    why[0] = '\0';
    if (cpu[0].unseeded || dev[0].unseeded) {
        snprintf(why, n,
                 "torch was unseeded in the %s: the sides' losses differ by their random draws",
                 cpu[0].unseeded && dev[0].unseeded ? "cpu and the device sides"
                 : cpu[0].unseeded                  ? "cpu side"
                                                    : "device side");
        return true;
    }
    if (p->n < 2 || !cpu[1].losses)
        return true;
    dg_loss_pairing rep;
    if (!dg_loss_pair(cpu[0].losses, cpu[1].losses, tol, NULL, &rep))
        return false;
    *repeat = rep.max_rel;
    if (rep.agree == 0)
        snprintf(why, n,
                 "the cpu side does not reproduce its own losses (its first two repetitions "
                 "differ by %.2g relative): the program is not deterministic (an unseeded random "
                 "source, or data workers), so its sides' losses are not comparable",
                 rep.max_rel);
    return true;
}

/* The RUN's loss check (plan->pair_losses; docs/schema/report.md "compare"):
 * the first cpu repetition's losses against the first device repetition's
 * at the (epoch, step) both reported, judged by loss_rel_diff_max's default
 * (numerics-drift judges max_rel_diff again by the threshold as used); the
 * RUN's verdict "within tolerance" or "drift" (drift: ["loss.max_rel_diff"]),
 * null when not judged. False when out of memory. */
static bool add_loss_check(cJSON *run, const pairs *p)
{
    double tol = dg_thresholds[TH_LOSS_REL_DIFF_MAX].value, repeat;
    char why[200];
    dg_loss_pairing lp;
    if (!losses_incomparable(p, tol, why, sizeof why, &repeat) ||
        !dg_loss_pair(p->side[0][0].losses, p->side[1][0].losses, tol, why[0] ? why : NULL, &lp))
        return false;
    cJSON *loss = dg_loss_pairing_json(&lp, "cpu_only", "device_only");
    if (!loss)
        return false;
    cJSON_AddStringToObject(loss, "basis",
                            "the first cpu and the first device repetition: the losses both "
                            "reported at the same (epoch, step)");
    cJSON_AddItemToObject(loss, "cpu_repeat_max_rel_diff", dg_json_metric_of(repeat, "relative"));
    cJSON_AddItemToObject(run, "loss", loss);
    cJSON_ReplaceItemInObjectCaseSensitive(run, "verdict",
                                           lp.agree < 0   ? cJSON_CreateNull()
                                           : lp.agree > 0 ? cJSON_CreateString("within tolerance")
                                                          : cJSON_CreateString("drift"));
    if (lp.agree == 0) {
        cJSON *drift = cJSON_AddArrayToObject(run, "drift");
        cJSON_AddItemToArray(drift, cJSON_CreateString("loss.max_rel_diff"));
    }
    cJSON_ReplaceItemInObjectCaseSensitive(
        run, "note",
        cJSON_CreateString("numerics: the cpu side's losses against the device side's (no "
                           "float64 reference for a user's program)"));
    return true;
}

/* The step line's loss part: "; loss agrees over 8 steps (max 3.1e-07,
 * tolerance 0.01)", appended to buf (len bytes). */
static void loss_summary(const cJSON *run, char *buf, size_t len)
{
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(run, "loss");
    double n = dg_jnum(l, "pairs"), rel = dg_jnum(l, "max_rel_diff"), tol = dg_jnum(l, "tolerance");
    int agree = dg_jbool(l, "agree");
    const char *why = dg_jstr(l, "why");
    size_t off = strlen(buf);
    if (off >= len)
        return;
    if (agree < 0)
        snprintf(buf + off, len - off, "; loss not compared: %s", why ? why : "not reported");
    else
        snprintf(buf + off, len - off,
                 "; loss %s over %.0f steps (max relative difference %.2g, tolerance %g)",
                 agree ? "agrees" : "DRIFTS", n, rel, tol);
}

/* The section's head and spec. */
static cJSON *section_head(const dg_runner_i *r, const char *device, const dg_compare_plan *plan,
                           const pairs *p)
{
    cJSON *c = dg_record_new("compare", 1);
    if (!c)
        return NULL;
    cJSON_AddStringToObject(c, "source", r->name);
    cJSON_AddStringToObject(c, "status", p->failed ? "failed" : "ok");
    dg_json_add_str(c, "error", p->failed ? p->why : NULL);
    cJSON *spec = cJSON_AddObjectToObject(c, "spec");
    cJSON_AddStringToObject(spec, "baseline", "cpu");
    cJSON_AddStringToObject(spec, "backend", device);
    cJSON *bs = cJSON_AddArrayToObject(spec, "batches");
    cJSON_AddItemToArray(bs, cJSON_CreateNumber(plan->batch));
    cJSON_AddNumberToObject(spec, "steps", plan->steps);
    cJSON_AddNumberToObject(spec, "repetitions", p->n);
    cJSON_AddNumberToObject(spec, "min_repetitions", plan->min_pairs);
    cJSON_AddNumberToObject(spec, "max_repetitions", plan->max_pairs);
    cJSON_AddNumberToObject(spec, "ci_width_target", plan->ci_width);
    cJSON_AddItemToObject(spec, "budget", dg_json_metric(plan->budget_s, plan->budget_s > 0, "s"));
    dg_json_add_str(spec, "pairs_ended", p->failed ? "a side failed" : p->ended);
    return c;
}

/* The step's line: the speedup with its interval, the busy fraction and the
 * speed verdict. */
static void run_summary(const cJSON *run, const char *device, int batch, char *buf, size_t len)
{
    char sp[32], ci[64] = "", busy[32];
    double lo = dg_jnum(run, "speedup_ci.lo"), hi = dg_jnum(run, "speedup_ci.hi");
    if (isfinite(lo) && isfinite(hi))
        snprintf(ci, sizeof ci, " (95%% %.2f-%.2f×)", lo, hi);
    const char *verdict = dg_jstr(run, "speed.verdict");
    snprintf(buf, len, "%s is %s%s at b%d, busy %s, %s", device,
             dg_fmt_num(sp, sizeof sp, "%.2f× cpu", dg_jnum(run, "speedup")), ci, batch,
             dg_fmt_num(busy, sizeof busy, "%.0f%%", 100 * dg_jnum(run, "busy_fraction")),
             verdict ? verdict : "unknown");
}

dg_status dg_method_compare(dg_ctx *ctx, const dg_runner_i *r, void *rctx, const char *device,
                            const dg_compare_plan *plan, const volatile sig_atomic_t *cancel,
                            dg_step_out *out)
{
    (void)ctx;
    pairs *p = dg_calloc(1, sizeof *p);
    if (!p)
        return DG_ERR_NOMEM;
    dg_status st = r->pair ? run_pairs(r, rctx, device, plan, cancel, p) : DG_ERR_NOMEM;
    cJSON *c = section_head(r, device, plan, p);
    cJSON *runs = c ? cJSON_AddArrayToObject(c, "runs") : NULL;
    if (runs && p->failed) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddNumberToObject(f, "batch", plan->batch);
        cJSON_AddStringToObject(f, "status", "failed");
        cJSON_AddStringToObject(f, "failed", p->failed);
        dg_json_add_str(f, "error", p->why);
        cJSON_AddBoolToObject(f, "within_tolerance", false);
        cJSON_AddItemToArray(runs, f);
    } else if (runs && st == DG_OK) {
        cJSON *run = dg_method_pairs_run(plan, device, p->side[0], p->side[1], p->n, p->entry);
        if (plan->pair_losses && !add_loss_check(run, p))
            st = DG_ERR_NOMEM;
        /* How many the plan allowed, and whether a decisive verdict cut them short. */
        cJSON *rp = cJSON_GetObjectItemCaseSensitive(run, "repetitions");
        cJSON_AddNumberToObject(rp, "planned", plan->max_pairs);
        cJSON_AddStringToObject(rp, "stop", strcmp(p->ended, "decisive") ? "planned" : "decisive");
        cJSON_AddItemToArray(runs, run);
        memset(p->entry, 0, sizeof p->entry); /* moved in */
    }
    for (int i = 0; i < 2 * DG_COMPARE_MAX_PAIRS; i++) {
        cJSON_Delete(p->entry[i]);
        cJSON_Delete(p->side[i % 2][i / 2].losses);
    }
    out->section = c;
    const cJSON *r0 = cJSON_GetArrayItem(runs, 0);
    if (r0 && !p->failed)
        run_summary(r0, device, plan->batch, out->summary, sizeof out->summary);
    if (r0 && !p->failed && plan->pair_losses)
        loss_summary(r0, out->summary, sizeof out->summary);
    if (p->failed)
        snprintf(out->error, sizeof out->error, "%s", p->why);
    if (c && r->compare_done && (st == DG_OK || p->failed))
        r->compare_done(rctx, out);
    if (st == DG_OK && p->failed)
        st = DG_ERR_CHECK;
    if (st == DG_OK && !c)
        st = DG_ERR_NOMEM;
    dg_free(p);
    return st;
}
