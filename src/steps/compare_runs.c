/* devgate compare RUN_A RUN_B (docs/events.md "Comparing two runs"): two
 * evidence records of any kind (run, accept, accept -- CMD, a fixture
 * compare) side by side: B judged against A on the throughput samples both
 * hold (a median ratio with its seeded bootstrap interval, judged as accept
 * judges the device: analysis/speed.h), with the contention and the seeds
 * named beside the verdict; busy fraction, memory curves and loss agreement;
 * refused across different input buckets unless forced. */
#include "steps/compare_runs.h"
#include "analysis/loss.h"
#include "analysis/speed.h"
#include "core/core.h"
#include "core/json.h"
#include "core/record.h"
#include "diagnose/diagnose.h"
#include "diagnose/thresholds.h"
#include "measure/measure.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const cJSON *at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    return b ? cJSON_GetObjectItemCaseSensitive(x, b) : x;
}

/* Parses an evidence record (or a ledger entry holding one under "record"). */
static cJSON *load(dg_ctx *ctx, const char *text, const char *which, dg_status *st)
{
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    if (!cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        *st = dg_fail(ctx, DG_ERR_FORMAT, "compare: %s is not a JSON record", which);
        return NULL;
    }
    cJSON *rec = doc;
    if (!cJSON_GetObjectItemCaseSensitive(doc, "kind") &&
        cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(doc, "record"))) {
        rec = cJSON_DetachItemFromObjectCaseSensitive(doc, "record");
        cJSON_Delete(doc);
    }
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(rec, "kind");
    if (!cJSON_IsString(kind)) {
        *st = dg_fail(ctx, DG_ERR_FORMAT, "compare: %s has no kind: not a devgate record", which);
        cJSON_Delete(rec);
        return NULL;
    }
    return rec;
}

/* Where a run's busy fraction comes from, or NULL when it has none. */
static const char *busy_source(const cJSON *rec)
{
    const cJSON *qw = at(at(rec, "profile", "phases"), "queue_wait", NULL);
    if (!isfinite(dg_json_metric_value(at(qw, "share", NULL))))
        return NULL;
    const cJSON *p = at(rec, "probe", "reported");
    return cJSON_IsString(p) && strcmp(p->valuestring, "auto") == 0
               ? "zero-code probe: 1 - the DataLoader wait's share of the training loop (host "
                 "clock, not device utilisation)"
               : "probe step events: 1 - data_ms / (data_ms + step_ms) (host clock, not device "
                 "utilisation)";
}

static cJSON *run_summary(const cJSON *rec, const cr_side *side, const char *cmd_diff, double *ms,
                          double *sps, double *busy)
{
    cJSON *r = cJSON_CreateObject();
    const cJSON *id = at(rec, "run_id", NULL);
    cJSON_AddItemToObject(
        r, "run_id", cJSON_IsString(id) ? cJSON_CreateString(id->valuestring) : cJSON_CreateNull());
    const char *keys[] = {"label", "state", "device", "framework", "bucket"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const cJSON *v = at(rec, keys[i], NULL);
        cJSON_AddItemToObject(r, keys[i], v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
    }
    cJSON_AddStringToObject(r, "kind", side->kind);
    cJSON_AddStringToObject(r, "shape", side->shape);
    cJSON_AddItemToObject(r, "cmd", cJSON_Duplicate(side->argv, true));
    cJSON_AddStringToObject(r, "cmd_diff", cmd_diff);
    dg_json_add_str(r, "seeds", side->seeds_known ? side->seeds : NULL);
    *ms = dg_json_metric_value(at(rec, "throughput", "step_ms"));
    if (isnan(*ms))
        *ms = dg_json_metric_value(at(at(rec, "profile", "step"), "ms", NULL));
    /* The steady rate (after the warm-up steps) when the run has one, else
     * the whole run's, said so: records before the headline became the
     * steady rate held the whole run's in samples_per_s. */
    const double steady = dg_json_metric_value(at(rec, "throughput", "samples_per_s_after_warmup"));
    *sps = isfinite(steady) ? steady : dg_json_metric_value(at(rec, "throughput", "samples_per_s"));
    const cJSON *ws = at(rec, "throughput", "warmup_steps");
    char note[160];
    if (isfinite(steady))
        snprintf(note, sizeof note, "over the steps after the first %.0f (warm-up left out)",
                 cJSON_IsNumber(ws) ? ws->valuedouble : 2);
    else
        snprintf(note, sizeof note,
                 "over every step, warm-up included (too few steps to leave it out)");
    double wait = dg_json_metric_value(at(at(rec, "profile", "phases"), "queue_wait", "share"));
    *busy = isfinite(wait) ? fmax(0.0, 1.0 - wait) : NAN;
    cJSON_AddItemToObject(r, "step_ms", dg_json_metric_of(*ms, "ms"));
    cJSON_AddItemToObject(r, "samples_per_s", dg_json_metric_of(*sps, "samples/s"));
    dg_json_add_str(r, "samples_per_s_basis",
                    isfinite(steady) ? "after-warmup"
                    : isfinite(*sps) ? "whole-run"
                                     : NULL);
    dg_json_add_str(r, "samples_per_s_note", isfinite(*sps) ? note : NULL);
    cJSON_AddItemToObject(r, "busy_fraction", dg_json_metric_of(*busy, "fraction"));
    dg_json_add_str(r, "busy_source", busy_source(rec));
    const cJSON *ts = at(rec, "throughput", "timed_steps");
    cJSON_AddNumberToObject(r, "timed_steps", cJSON_IsNumber(ts) ? ts->valuedouble : 0);
    return r;
}

/* Compact JSON of a bucket for a message, cut at 200 bytes. */
static void bucket_text(char *buf, size_t n, const cJSON *b)
{
    char *t = b ? cJSON_PrintUnformatted(b) : NULL;
    snprintf(buf, n, "%s", t ? t : "none");
    if (t && strlen(t) >= n && n > 4)
        memcpy(buf + n - 4, "...", 4);
    cJSON_free(t);
}

/* One rule's row of the judgement. */
static void rule_row(cJSON *arr, const char *id, const char *threshold, double value, double limit,
                     const char *unit, int passed)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "id", id);
    cJSON_AddStringToObject(r, "threshold", threshold);
    cJSON_AddItemToObject(r, "value", dg_json_metric_of(value, unit));
    cJSON_AddNumberToObject(r, "limit", limit);
    if (passed < 0)
        cJSON_AddNullToObject(r, "passed");
    else
        cJSON_AddBoolToObject(r, "passed", passed == 1);
    cJSON_AddItemToArray(arr, r);
}

/* "0.69x", "0.0044x": two decimals, or two significant digits below 0.1. */
static const char *fmt_x(char *buf, size_t n, double v)
{
    if (!isfinite(v))
        snprintf(buf, n, "n/a");
    else if (fabs(v) >= 0.1)
        snprintf(buf, n, "%.2fx", v);
    else
        snprintf(buf, n, "%.2gx", v);
    return buf;
}

/* The pair of sample sets both records hold, measured the same way: the
 * first of soak epochs (a soak's per-step times are no rate on a device that
 * queues steps asynchronously), compare at a common batch with at least
 * DG_SPEED_MIN_SAMPLES a side, else the first with any (judged "n too
 * small"); false when they share none. */
static bool choose(const cr_side *A, const cr_side *B, const cr_series **sa, const cr_series **sb)
{
    for (size_t min = DG_SPEED_MIN_SAMPLES;; min = 1) {
        if (A->epochs.n >= min && B->epochs.n >= min) {
            *sa = &A->epochs;
            *sb = &B->epochs;
            return true;
        }
        for (int i = 0; i < A->ncmp; i++)
            for (int k = 0; k < B->ncmp; k++)
                if (A->cmp[i].batch == B->cmp[k].batch && A->cmp[i].n >= min &&
                    B->cmp[k].n >= min) {
                    *sa = &A->cmp[i];
                    *sb = &B->cmp[k];
                    return true;
                }
        if (min == 1)
            return false;
    }
}

/* What a side holds, for the message when nothing is shared. */
static void holds(const cr_side *s, char *buf, size_t n)
{
    size_t off = (size_t)snprintf(buf, n, "%s", "");
    if (s->epochs.n)
        off += (size_t)snprintf(buf + off, n - off, "%zu epochs", s->epochs.n);
    for (int i = 0; i < s->ncmp && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%scompare at batch %d", off ? ", " : "",
                                s->cmp[i].batch);
    if (!off)
        snprintf(buf, n, "no throughput samples");
}

static cJSON *contention_json(const cr_side *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "windows", s->windows);
    cJSON_AddNumberToObject(o, "windows_contended", s->hit);
    cJSON_AddItemToObject(o, "others_cpus_worst",
                          dg_json_metric_of(s->windows ? s->cpus_worst : NAN, "cpus"));
    cJSON_AddItemToObject(o, "others_cpus_mean",
                          dg_json_metric_of(s->windows ? s->cpus_sum / s->windows : NAN, "cpus"));
    cJSON_AddBoolToObject(o, "finding", s->contended_finding);
    cJSON_AddBoolToObject(o, "contended", s->hit > 0 || s->contended_finding);
    return o;
}

static bool contended(const cr_side *s)
{
    return s->hit > 0 || s->contended_finding;
}

/* "A: 3 of 10 windows, up to 1.2 CPUs" */
static void contention_text(const cr_side *s, const char *name, char *buf, size_t n)
{
    if (s->hit)
        snprintf(buf, n, "%s: %d of %d measured windows, others up to %.1f CPUs", name, s->hit,
                 s->windows, s->cpus_worst);
    else if (s->contended_finding)
        snprintf(buf, n, "%s: its own finding 'contended'", name);
    else if (s->windows)
        snprintf(buf, n, "%s: quiet in %d measured windows", name, s->windows);
    else
        snprintf(buf, n, "%s: no measured windows", name);
}

/* Whether contention may have made the slower side slower: it was contended
 * and the faster side either was not measured or saw at least contention_cpus
 * less on average. */
static bool contention_explains(const cr_side *slow, const cr_side *fast, double th)
{
    if (!contended(slow))
        return false;
    if (!slow->windows || !fast->windows)
        return true;
    return slow->cpus_sum / slow->windows >= fast->cpus_sum / fast->windows + th;
}

static void seeds_note(const cr_side *A, const cr_side *B, char *buf, size_t n, cJSON *j)
{
    cJSON *o = cJSON_AddObjectToObject(j, "seeds");
    dg_json_add_str(o, "a", A->seeds_known ? A->seeds : NULL);
    dg_json_add_str(o, "b", B->seeds_known ? B->seeds : NULL);
    bool known = A->seeds_known && B->seeds_known;
    if (known)
        cJSON_AddBoolToObject(o, "same", strcmp(A->seeds, B->seeds) == 0);
    else
        cJSON_AddNullToObject(o, "same");
    cJSON_AddBoolToObject(o, "torch_unseeded", A->torch_unseeded || B->torch_unseeded);
    buf[0] = '\0';
    if (!known)
        snprintf(buf, n, "the seeds are not recorded in %s: the runs may have seen other data",
                 !A->seeds_known && !B->seeds_known ? "either record"
                 : !A->seeds_known                  ? "A"
                                                    : "B");
    else if (A->torch_unseeded || B->torch_unseeded)
        snprintf(buf, n, "torch was unseeded in %s: the runs may have seen other data",
                 A->torch_unseeded && B->torch_unseeded ? "both runs"
                 : A->torch_unseeded                    ? "A"
                                                        : "B");
    else if (strcmp(A->seeds, B->seeds) != 0)
        snprintf(buf, n, "the seeds differ (A: %s; B: %s): the runs saw other data", A->seeds,
                 B->seeds);
    dg_json_add_str(o, "note", buf[0] ? buf : NULL);
}

/* A verdict that claims a difference (the seeds are named beside it). */
static bool claims(const char *verdict)
{
    return !strcmp(verdict, "pays-off") || !strcmp(verdict, "slower") ||
           !strcmp(verdict, "no-gain") || !strcmp(verdict, "starved");
}

/* What judge() decided, for its sentence. */
typedef struct judged {
    const cr_series *sa, *sb;
    bool shared;
    dg_median_ci ci;
    double spread_a, spread_b; /* IQR over median of each side's samples */
    double lo, hi;             /* the interval judged: ci widened by the larger spread */
    double x, busy_b;
    const double *th;
    dg_speed_judgement sj;
    const char *verdict, *why, *leaning;
    char ca[120], cb[120];
} judged;

/* The sentence of a judgement: why, with the interval and what it held; may
 * turn the verdict to unknown when there is nothing to judge. */
static void judge_text(judged *v, const cr_side *A, const cr_side *B, char *text, size_t size)
{
    char interval[160] = "", n[96] = "", xs[24], los[24], his[24];
    fmt_x(xs, sizeof xs, v->x);
    if (v->shared) {
        const char *unit = !strcmp(v->sa->basis, "epochs") ? "epochs" : "repetitions";
        snprintf(n, sizeof n, "%zu and %zu %s", v->sa->n, v->sb->n, unit);
        char jlo[24], jhi[24];
        if (v->ci.valid)
            snprintf(interval, sizeof interval,
                     "95%% interval %s-%s over %s, judged as %s-%s with the runs' %.0f%% spread",
                     fmt_x(los, sizeof los, v->ci.lo), fmt_x(his, sizeof his, v->ci.hi), n,
                     fmt_x(jlo, sizeof jlo, v->lo), fmt_x(jhi, sizeof jhi, v->hi),
                     100 * fmax(v->spread_a, v->spread_b));
    }
    /* The text says why; the verdict word is beside it (judgement.verdict). */
    if (!v->shared) {
        char ha[160], hb[160];
        holds(A, ha, sizeof ha);
        holds(B, hb, sizeof hb);
        v->verdict = "unknown";
        v->why = "nothing shared";
        snprintf(text, size,
                 "nothing to judge: the records share no throughput measured the same way (A: "
                 "%s; B: %s)",
                 ha, hb);
    } else if (!strcmp(v->why, "n too small")) {
        snprintf(text, size,
                 "n too small (%s; an interval needs at least %d a side): the point ratio %s is "
                 "not a verdict",
                 n, DG_SPEED_MIN_SAMPLES, xs);
    } else if (!v->ci.valid) {
        v->verdict = "unknown";
        snprintf(text, size, "no interval could be drawn from %s", n);
    } else if (v->leaning) {
        snprintf(text, size,
                 "contended: B measured %s A (%s), %s by the interval, but the slower run (%s) "
                 "was contended (%s; %s): rerun when the machine is quiet",
                 xs, interval, v->leaning, v->x < 1 ? "B" : "A", v->ca, v->cb);
    } else if (!strcmp(v->verdict, "slower")) {
        snprintf(text, size, "B is %.0f%% slower than A: %s (%s)", 100 * (1 - v->x), xs, interval);
    } else if (!strcmp(v->verdict, "pays-off")) {
        snprintf(text, size, "B pays off: %s A (%s, at or above %.2fx)", xs, interval,
                 v->sj.pays_off_min);
    } else if (!strcmp(v->verdict, "starved")) {
        snprintf(text, size,
                 "B is %s A (%s) but busy only %.0f%% of its loop (under %.0f%%): it waits on "
                 "data",
                 xs, interval, 100 * v->busy_b, 100 * v->th[TH_DEVICE_BUSY_MIN]);
    } else if (!strcmp(v->verdict, "no-difference")) {
        snprintf(text, size, "B is %s A (%s), inside the equivalence band %.2f-%.2fx", xs, interval,
                 v->sj.band_lo, v->sj.band_hi);
    } else if (!strcmp(v->verdict, "no-gain")) {
        snprintf(text, size, "B is faster but does not pay off: %s A (%s, below %.2fx)", xs,
                 interval, v->sj.pays_off_min);
    } else {
        double edge = !strcmp(v->why, "the interval holds the band's lower edge") ? v->sj.band_lo
                      : !strcmp(v->why, "the interval holds the band's upper edge")
                          ? v->sj.band_hi
                          : v->sj.pays_off_min;
        snprintf(text, size, "B is %s A (%s): %s %.2fx", xs, interval, v->why, edge);
    }
}

/* B against A (docs/rules.md "Speed verdicts"): the median of B's samples/s
 * over A's with its seeded bootstrap 95% interval, judged by dg_speed_judge;
 * the speedup is throughput over the loop's wall time (data wait included),
 * so a fix that makes each step slower but the epoch faster counts as faster.
 * Contention that could explain a difference makes it inconclusive; the seeds
 * are named beside any claim of a difference. */
static void decide(const cr_side *A, const cr_side *B, judged *v)
{
    v->shared = choose(A, B, &v->sa, &v->sb);
    v->ci = (dg_median_ci){.point = NAN, .lo = NAN, .hi = NAN, .level = 0.95};
    if (v->shared)
        dg_bootstrap_median_ci(v->sb->v, v->sb->n, v->sa->v, v->sa->n, 0, 0.95, DG_BOOTSTRAP_SEED,
                               &v->ci);
    /* Two records are measured at different times: a loaded machine shifts a
     * whole run, which a bootstrap over one run's samples cannot see. The
     * interval judged is widened by the larger of the two runs' own spreads
     * (IQR over median): a run-to-run shift as large as a run's spread is
     * not taken for a difference. */
    dg_stats st;
    dg_stats_compute(v->shared ? v->sa->v : NULL, v->shared ? v->sa->n : 0, 0, &st);
    v->spread_a = isfinite(st.iqr_share) ? st.iqr_share : 0;
    dg_stats_compute(v->shared ? v->sb->v : NULL, v->shared ? v->sb->n : 0, 0, &st);
    v->spread_b = isfinite(st.iqr_share) ? st.iqr_share : 0;
    double m = fmax(v->spread_a, v->spread_b);
    v->lo = v->ci.valid ? v->ci.lo / (1 + m) : NAN;
    v->hi = v->ci.valid ? v->ci.hi * (1 + m) : NAN;
    dg_speed_judge(v->lo, v->hi, v->shared ? v->sa->n : 0, v->shared ? v->sb->n : 0,
                   DG_SPEED_MIN_SAMPLES, v->th, &v->sj);
    v->x = v->ci.valid ? v->ci.point : NAN;
    v->verdict = v->sj.verdict;
    v->why = v->sj.why;
    if (!strcmp(v->verdict, "pays-off") && isfinite(v->busy_b) &&
        v->busy_b < v->th[TH_DEVICE_BUSY_MIN]) {
        v->verdict = "starved";
        v->why = "fast enough, but B's loop mostly waits for data";
    }
    if (claims(v->verdict) &&
        contention_explains(v->x < 1 ? B : A, v->x < 1 ? A : B, v->th[TH_CONTENTION_CPUS])) {
        v->leaning = v->verdict;
        v->verdict = "inconclusive";
        v->why = "contended";
    }
    contention_text(A, "A", v->ca, sizeof v->ca);
    contention_text(B, "B", v->cb, sizeof v->cb);
}

/* The judgement as JSON (docs/events.md "Comparing two runs"). */
static cJSON *judge(const cr_side *A, const cr_side *B, double busy_b, const double *th)
{
    judged v = {.th = th, .busy_b = busy_b};
    decide(A, B, &v);
    const cr_series *sa = v.sa, *sb = v.sb;
    double x = v.x, red = isfinite(x) ? 100.0 * (1.0 - 1.0 / x) : NAN;
    double p = v.shared ? dg_mann_whitney_p(sa->v, sa->n, sb->v, sb->n, NULL) : NAN;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "speedup", dg_json_metric_of(x, "x"));
    cJSON *cij = cJSON_AddObjectToObject(j, "speedup_ci");
    cJSON_AddItemToObject(cij, "lo", dg_json_metric_of(v.ci.valid ? v.ci.lo : NAN, "x"));
    cJSON_AddItemToObject(cij, "hi", dg_json_metric_of(v.ci.valid ? v.ci.hi : NAN, "x"));
    cJSON_AddNumberToObject(cij, "level", 0.95);
    cJSON_AddNumberToObject(cij, "resamples", v.ci.valid ? (double)v.ci.resamples : 0);
    cJSON_AddStringToObject(cij, "method",
                            "percentile bootstrap of median(B samples/s) / median(A samples/s), "
                            "seeded (the same records give the same interval)");
    cJSON *jj = cJSON_AddObjectToObject(j, "judged_ci");
    cJSON_AddItemToObject(jj, "lo", dg_json_metric_of(v.lo, "x"));
    cJSON_AddItemToObject(jj, "hi", dg_json_metric_of(v.hi, "x"));
    cJSON_AddItemToObject(jj, "spread_a",
                          dg_json_metric_of(v.shared ? v.spread_a : NAN, "fraction"));
    cJSON_AddItemToObject(jj, "spread_b",
                          dg_json_metric_of(v.shared ? v.spread_b : NAN, "fraction"));
    cJSON_AddStringToObject(jj, "method",
                            "speedup_ci widened by the larger spread (IQR / median) of the two "
                            "records' samples: lo / (1 + s), hi x (1 + s)");
    cJSON_AddItemToObject(j, "mann_whitney_p", dg_json_metric_of(p, "probability"));
    char src[200] = "";
    if (v.shared)
        snprintf(src, sizeof src, "throughput: median B samples/s over median A samples/s, %s",
                 sa->what);
    dg_json_add_str(j, "speedup_source", v.shared ? src : NULL);
    cJSON *basis = cJSON_AddObjectToObject(j, "basis");
    dg_json_add_str(basis, "name", v.shared ? sa->basis : NULL);
    cJSON_AddNumberToObject(basis, "n_a", v.shared ? (double)sa->n : 0);
    cJSON_AddNumberToObject(basis, "n_b", v.shared ? (double)sb->n : 0);
    cJSON_AddNumberToObject(basis, "batch_a", v.shared ? sa->batch : 0);
    cJSON_AddNumberToObject(basis, "batch_b", v.shared ? sb->batch : 0);
    cJSON_AddNumberToObject(basis, "min_samples", DG_SPEED_MIN_SAMPLES);
    cJSON_AddItemToObject(j, "time_reduction_pct", dg_json_metric_of(red, "%"));
    cJSON *band = cJSON_AddObjectToObject(j, "band");
    cJSON_AddNumberToObject(band, "lo", v.sj.band_lo);
    cJSON_AddNumberToObject(band, "hi", v.sj.band_hi);
    cJSON_AddNumberToObject(band, "equivalence_pct", th[TH_EQUIVALENCE_PCT]);
    cJSON_AddNumberToObject(j, "pays_off_min", v.sj.pays_off_min);
    cJSON *tj = cJSON_AddObjectToObject(j, "thresholds");
    static const dg_threshold_id used[] = {TH_SPEEDUP_MIN, TH_DEVICE_MIN_REDUCTION_PCT,
                                           TH_DEVICE_BUSY_MIN, TH_EQUIVALENCE_PCT,
                                           TH_CONTENTION_CPUS};
    for (size_t i = 0; i < sizeof used / sizeof used[0]; i++)
        cJSON_AddNumberToObject(tj, dg_thresholds[used[i]].name, th[used[i]]);
    cJSON *rules = cJSON_AddArrayToObject(j, "rules");
    int p_sp = isfinite(x) ? x >= th[TH_SPEEDUP_MIN] : -1;
    int p_red = isfinite(red) ? red >= th[TH_DEVICE_MIN_REDUCTION_PCT] : -1;
    int p_busy = isfinite(busy_b) ? busy_b >= th[TH_DEVICE_BUSY_MIN] : -1;
    rule_row(rules, "speedup-near-one", "speedup_min", x, th[TH_SPEEDUP_MIN], "x", p_sp);
    rule_row(rules, "slow-device-data", "device_min_reduction_pct", red,
             th[TH_DEVICE_MIN_REDUCTION_PCT], "%", p_red);
    rule_row(rules, "slow-device-data", "device_busy_min", busy_b, th[TH_DEVICE_BUSY_MIN],
             "fraction", p_busy);
    /* Contention and seeds, named beside the verdict. */
    cJSON *cn = cJSON_AddObjectToObject(j, "contention");
    cJSON_AddItemToObject(cn, "a", contention_json(A));
    cJSON_AddItemToObject(cn, "b", contention_json(B));
    cJSON_AddBoolToObject(cn, "made_inconclusive", v.leaning != NULL);
    char ctext[260] = "";
    if (contended(A) || contended(B))
        snprintf(ctext, sizeof ctext, "other processes ran during the measurements (%s; %s)", v.ca,
                 v.cb);
    dg_json_add_str(cn, "text", ctext[0] ? ctext : NULL);
    char seeds[400];
    seeds_note(A, B, seeds, sizeof seeds, j);
    char text[1200];
    judge_text(&v, A, B, text, sizeof text);
    if (claims(v.verdict) && seeds[0])
        dg_cat(text, sizeof text, "; %s", seeds);
    if (ctext[0] && !v.leaning)
        dg_cat(text, sizeof text, "; %s", ctext);
    cJSON_AddStringToObject(j, "verdict", v.verdict);
    cJSON_AddStringToObject(j, "why", v.why);
    dg_json_add_str(j, "leaning", v.leaning);
    cJSON_AddStringToObject(j, "text", text);
    return j;
}

dg_status dg_compare_runs(dg_ctx *ctx, const char *record_a, const char *record_b, bool force,
                          const char *thresholds, char **json)
{
    *json = NULL;
    double th[TH_COUNT];
    dg_status st = dg_thresholds_parse(ctx, thresholds, th);
    if (st != DG_OK)
        return st;
    cJSON *ra = load(ctx, record_a, "A", &st);
    if (!ra)
        return st;
    cJSON *rb = load(ctx, record_b, "B", &st);
    if (!rb) {
        cJSON_Delete(ra);
        return st;
    }
    const cJSON *ba = at(ra, "bucket", NULL), *bb = at(rb, "bucket", NULL);
    if (ba && cJSON_IsNull(ba))
        ba = NULL;
    if (bb && cJSON_IsNull(bb))
        bb = NULL;
    /* A record without a bucket (the fixture's compare) is compared and said
     * so (buckets.known); two buckets that differ are refused unless forced. */
    bool same = (!ba && !bb) || (ba && bb && cJSON_Compare(ba, bb, true));
    if (!same && ba && bb && !force) {
        char ta[220], tb[220];
        bucket_text(ta, sizeof ta, ba);
        bucket_text(tb, sizeof tb, bb);
        cJSON_Delete(ra);
        cJSON_Delete(rb);
        return dg_fail(
            ctx, DG_ERR_USAGE,
            "compare: the runs' input buckets differ (A: %s; B: %s); --force compares them anyway",
            ta, tb);
    }
    cJSON *o = cJSON_CreateObject();
    dg_record_head(o, "compare-runs", 2);
    cJSON *runs = cJSON_AddArrayToObject(o, "runs");
    cr_side sd[2];
    bool read = dg_cr_side_read(&sd[0], ra, th[TH_CONTENTION_CPUS]);
    read = dg_cr_side_read(&sd[1], rb, th[TH_CONTENTION_CPUS]) && read;
    char diff[2][200];
    dg_cr_cmd_diff(sd[0].argv, sd[1].argv, diff[0], diff[1], sizeof diff[0]);
    double ms[2], sps[2], busy[2];
    cJSON_AddItemToArray(runs, run_summary(ra, &sd[0], diff[0], &ms[0], &sps[0], &busy[0]));
    cJSON_AddItemToArray(runs, run_summary(rb, &sd[1], diff[1], &ms[1], &sps[1], &busy[1]));
    cJSON *bk = cJSON_AddObjectToObject(o, "buckets");
    cJSON_AddBoolToObject(bk, "same", same);
    cJSON_AddBoolToObject(bk, "known", ba && bb);
    cJSON_AddBoolToObject(bk, "a_known", ba != NULL);
    cJSON_AddBoolToObject(bk, "b_known", bb != NULL);
    cJSON_AddBoolToObject(o, "forced", force && !same && ba && bb);
    /* The headline ratios (each record's own figures); the judgement's speedup
     * is the median ratio of the samples both hold. */
    cJSON *sp = cJSON_AddObjectToObject(o, "speedup");
    cJSON_AddItemToObject(sp, "step_time",
                          dg_json_metric_of(ms[0] > 0 && ms[1] > 0 ? ms[0] / ms[1] : NAN, "x"));
    cJSON_AddItemToObject(sp, "samples_per_s",
                          dg_json_metric_of(sps[0] > 0 && sps[1] > 0 ? sps[1] / sps[0] : NAN, "x"));
    cJSON_AddStringToObject(
        sp, "definition",
        "B over A: A step_ms median / B step_ms median; B samples/s / A samples/s");
    cJSON *bf = cJSON_AddObjectToObject(o, "busy_fraction");
    cJSON_AddItemToObject(bf, "a", dg_json_metric_of(busy[0], "fraction"));
    cJSON_AddItemToObject(bf, "b", dg_json_metric_of(busy[1], "fraction"));
    dg_json_add_str(bf, "source_a", busy_source(ra));
    dg_json_add_str(bf, "source_b", busy_source(rb));
    cJSON_AddStringToObject(bf, "definition",
                            "1 - the share of the training loop spent waiting for data "
                            "(profile.phases.queue_wait: data_ms over data_ms + step_ms)");
    cJSON_AddItemToObject(o, "judgement", judge(&sd[0], &sd[1], busy[1], th));
    char unseeded[160] = "";
    if (sd[0].torch_unseeded || sd[1].torch_unseeded)
        snprintf(unseeded, sizeof unseeded,
                 "torch was unseeded in %s: the runs' losses differ by their random draws",
                 sd[0].torch_unseeded && sd[1].torch_unseeded ? "both runs"
                 : sd[0].torch_unseeded                       ? "A"
                                                              : "B");
    dg_cr_side_free(&sd[0]);
    dg_cr_side_free(&sd[1]);
    /* Memory curves side by side. */
    cJSON *mem = cJSON_AddObjectToObject(o, "memory");
    const cJSON *ea = at(ra, "soak", "epochs"), *eb = at(rb, "soak", "epochs");
    cJSON_AddItemToObject(mem, "a", ea ? cJSON_Duplicate(ea, true) : cJSON_CreateNull());
    cJSON_AddItemToObject(mem, "b", eb ? cJSON_Duplicate(eb, true) : cJSON_CreateNull());
    cJSON *gr = cJSON_AddObjectToObject(mem, "growth");
    /* The soak analysis: soak.soak in record version 1, soak in version 2. */
    const cJSON *sa = at(ra, "soak", "soak") ? at(ra, "soak", "soak") : at(ra, "soak", NULL);
    const cJSON *sb = at(rb, "soak", "soak") ? at(rb, "soak", "soak") : at(rb, "soak", NULL);
    const cJSON *ga = at(sa, "growth", NULL), *gb = at(sb, "growth", NULL);
    cJSON_AddItemToObject(gr, "a", ga ? cJSON_Duplicate(ga, true) : cJSON_CreateNull());
    cJSON_AddItemToObject(gr, "b", gb ? cJSON_Duplicate(gb, true) : cJSON_CreateNull());
    /* Loss agreement over the (epoch, step) pairs both runs reported
     * (analysis/loss.c, as accept -- CMD's cpu/device pair): not judged when
     * torch was unseeded in either run (their losses differ by their draws). */
    dg_loss_pairing lp;
    bool paired = dg_loss_pair(at(ra, "supervise", "losses"), at(rb, "supervise", "losses"),
                               th[TH_LOSS_REL_DIFF_MAX], unseeded[0] ? unseeded : NULL, &lp);
    cJSON *loss = paired ? dg_loss_pairing_json(&lp, "a_only", "b_only") : NULL;
    if (loss)
        cJSON_AddItemToObject(o, "loss", loss);
    *json = dg_json_print(o);
    cJSON_Delete(o);
    cJSON_Delete(ra);
    cJSON_Delete(rb);
    if (!*json || !read || !loss) {
        dg_string_free(*json);
        *json = NULL;
        return dg_fail(ctx, DG_ERR_NOMEM, "compare: out of host memory");
    }
    return DG_OK;
}
