/* devgate compare RUN_A RUN_B (docs/events.md "Comparing two runs"): two
 * supervised runs of the user's own program side by side: speedup, busy
 * fraction, memory curves and loss agreement, refused across different input
 * buckets unless forced. */
#include "core/core.h"
#include "core/json.h"
#include "diagnose/thresholds.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LOSS_TOLERANCE 1e-2 /* relative: runs on different paths are not bit-identical */

static const cJSON *at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    return b ? cJSON_GetObjectItemCaseSensitive(x, b) : x;
}

static cJSON *metric(double v, const char *unit)
{
    return dg_json_metric(isfinite(v) ? v : 0, isfinite(v), unit);
}

/* Parses a run record (or a ledger entry holding one under "record"). */
static cJSON *load(dg_ctx *ctx, const char *text, const char *which, dg_status *st)
{
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    if (!cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        *st = dg_fail(ctx, DG_ERR_FORMAT, "compare: run %s is not a JSON record", which);
        return NULL;
    }
    cJSON *rec = doc;
    if (!cJSON_GetObjectItemCaseSensitive(doc, "kind") &&
        cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(doc, "record"))) {
        rec = cJSON_DetachItemFromObjectCaseSensitive(doc, "record");
        cJSON_Delete(doc);
    }
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(rec, "kind");
    if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "run") != 0) {
        *st = dg_fail(ctx, DG_ERR_FORMAT,
                      "compare: run %s is a '%s' record, not a 'run' record (devgate run)", which,
                      cJSON_IsString(kind) ? kind->valuestring : "?");
        cJSON_Delete(rec);
        return NULL;
    }
    return rec;
}

typedef struct loss_row {
    double epoch, step, loss;
} loss_row;

static int by_key(const void *a, const void *b)
{
    const loss_row *x = a, *y = b;
    if (x->epoch != y->epoch)
        return x->epoch < y->epoch ? -1 : 1;
    return (x->step > y->step) - (x->step < y->step);
}

/* The losses [[epoch, step, loss], ...] of a record, sorted by (epoch, step). */
static loss_row *losses_of(const cJSON *rec, size_t *n)
{
    const cJSON *arr = at(rec, "supervise", "losses");
    int cnt = cJSON_GetArraySize(arr);
    loss_row *v = dg_malloc((size_t)(cnt > 0 ? cnt : 1) * sizeof *v);
    *n = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, arr)
    {
        const cJSON *e = cJSON_GetArrayItem(row, 0), *s = cJSON_GetArrayItem(row, 1),
                    *l = cJSON_GetArrayItem(row, 2);
        if (v && cJSON_IsNumber(e) && cJSON_IsNumber(s) && cJSON_IsNumber(l) &&
            isfinite(l->valuedouble))
            v[(*n)++] = (loss_row){e->valuedouble, s->valuedouble, l->valuedouble};
    }
    if (v)
        qsort(v, *n, sizeof *v, by_key);
    return v;
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

static cJSON *run_summary(const cJSON *rec, double *ms, double *sps, double *busy)
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
    const cJSON *cmd = at(rec, "spec", "cmd");
    cJSON_AddItemToObject(r, "cmd", cmd ? cJSON_Duplicate(cmd, true) : cJSON_CreateNull());
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
    cJSON_AddItemToObject(r, "step_ms", metric(*ms, "ms"));
    cJSON_AddItemToObject(r, "samples_per_s", metric(*sps, "samples/s"));
    dg_json_add_str(r, "samples_per_s_basis",
                    isfinite(steady) ? "after-warmup"
                    : isfinite(*sps) ? "whole-run"
                                     : NULL);
    dg_json_add_str(r, "samples_per_s_note", isfinite(*sps) ? note : NULL);
    cJSON_AddItemToObject(r, "busy_fraction", metric(*busy, "fraction"));
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
    cJSON_AddItemToObject(r, "value", metric(value, unit));
    cJSON_AddNumberToObject(r, "limit", limit);
    if (passed < 0)
        cJSON_AddNullToObject(r, "passed");
    else
        cJSON_AddBoolToObject(r, "passed", passed == 1);
    cJSON_AddItemToArray(arr, r);
}

/* B against A by the fixture's speedup rules (docs/rules.md): the speedup is
 * the throughput ratio (samples over the loop's wall time, data wait
 * included), so a fix that makes each step slower but the epoch faster counts
 * as faster. Falls back to the step-time ratio when a run has no samples/s. */
static cJSON *judge(const double sps[2], const double ms[2], double busy_b)
{
    double th_speedup = dg_thresholds[TH_SPEEDUP_MIN].value;
    double th_red = dg_thresholds[TH_DEVICE_MIN_REDUCTION_PCT].value;
    double th_busy = dg_thresholds[TH_DEVICE_BUSY_MIN].value;
    bool by_sps = sps[0] > 0 && sps[1] > 0;
    double x = by_sps ? sps[1] / sps[0] : ms[0] > 0 && ms[1] > 0 ? ms[0] / ms[1] : NAN;
    double red = isfinite(x) ? 100.0 * (1.0 - 1.0 / x) : NAN;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "speedup", metric(x, "x"));
    dg_json_add_str(j, "speedup_source",
                    !isfinite(x) ? NULL
                    : by_sps     ? "throughput: B samples/s over A samples/s"
                                 : "step time: A step_ms median over B step_ms median");
    cJSON_AddItemToObject(j, "time_reduction_pct", metric(red, "%"));
    cJSON *rules = cJSON_AddArrayToObject(j, "rules");
    int p_sp = isfinite(x) ? x >= th_speedup : -1;
    int p_red = isfinite(red) ? red >= th_red : -1;
    int p_busy = isfinite(busy_b) ? busy_b >= th_busy : -1;
    rule_row(rules, "speedup-near-one", "speedup_min", x, th_speedup, "x", p_sp);
    rule_row(rules, "slow-device-data", "device_min_reduction_pct", red, th_red, "%", p_red);
    rule_row(rules, "slow-device-data", "device_busy_min", busy_b, th_busy, "fraction", p_busy);
    const char *verdict, *text;
    char buf[256];
    if (!isfinite(x)) {
        verdict = "unknown";
        text = "neither run reported a throughput or a step time: nothing to judge";
    } else if (x < 1.0) {
        verdict = "slower";
        snprintf(buf, sizeof buf, "B is %.0f%% slower than A (%.2fx)", 100 * (1 - x), x);
        text = buf;
    } else if (p_sp == 1 && p_red == 1 && p_busy != 0) {
        verdict = "pays-off";
        snprintf(buf, sizeof buf, "B pays off: %.2fx A (%.0f%% less time per sample)%s", x, red,
                 p_busy < 0 ? "; B's busy fraction is not known" : "");
        text = buf;
    } else if (p_busy == 0 && p_sp == 1) {
        verdict = "starved";
        snprintf(buf, sizeof buf,
                 "B is %.2fx A but busy only %.0f%% of its loop (under %.0f%%): it waits on data",
                 x, 100 * busy_b, 100 * th_busy);
        text = buf;
    } else {
        verdict = "no-gain";
        snprintf(buf, sizeof buf, "B is %.2fx A: below the %.2fx (%.0f%%) that pays off", x,
                 th_speedup, th_red);
        text = buf;
    }
    cJSON_AddStringToObject(j, "verdict", verdict);
    cJSON_AddStringToObject(j, "text", text);
    return j;
}

dg_status dg_compare_runs(dg_ctx *ctx, const char *record_a, const char *record_b, bool force,
                          char **json)
{
    *json = NULL;
    dg_status st = DG_OK;
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
    bool same = (!ba && !bb) || (ba && bb && cJSON_Compare(ba, bb, true));
    if (!same && !force) {
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
    cJSON_AddNumberToObject(o, "v", 1);
    cJSON_AddStringToObject(o, "kind", "compare-runs");
    char ts[32], host[256] = "";
    dg_utc_iso(ts, sizeof ts);
    cJSON_AddStringToObject(o, "timestamp", ts);
    if (gethostname(host, sizeof host) != 0)
        host[0] = '\0';
    host[sizeof host - 1] = '\0';
    dg_json_add_str(o, "host", host[0] ? host : NULL);
    cJSON *runs = cJSON_AddArrayToObject(o, "runs");
    double ms[2], sps[2], busy[2];
    cJSON_AddItemToArray(runs, run_summary(ra, &ms[0], &sps[0], &busy[0]));
    cJSON_AddItemToArray(runs, run_summary(rb, &ms[1], &sps[1], &busy[1]));
    cJSON *bk = cJSON_AddObjectToObject(o, "buckets");
    cJSON_AddBoolToObject(bk, "same", same);
    cJSON_AddBoolToObject(bk, "known", ba || bb);
    cJSON_AddBoolToObject(o, "forced", force && !same);
    /* Speedup of B over A. */
    cJSON *sp = cJSON_AddObjectToObject(o, "speedup");
    cJSON_AddItemToObject(sp, "step_time",
                          metric(ms[0] > 0 && ms[1] > 0 ? ms[0] / ms[1] : NAN, "x"));
    cJSON_AddItemToObject(sp, "samples_per_s",
                          metric(sps[0] > 0 && sps[1] > 0 ? sps[1] / sps[0] : NAN, "x"));
    cJSON_AddStringToObject(
        sp, "definition",
        "B over A: A step_ms median / B step_ms median; B samples/s / A samples/s");
    cJSON *bf = cJSON_AddObjectToObject(o, "busy_fraction");
    cJSON_AddItemToObject(bf, "a", metric(busy[0], "fraction"));
    cJSON_AddItemToObject(bf, "b", metric(busy[1], "fraction"));
    dg_json_add_str(bf, "source_a", busy_source(ra));
    dg_json_add_str(bf, "source_b", busy_source(rb));
    cJSON_AddStringToObject(bf, "definition",
                            "1 - the share of the training loop spent waiting for data "
                            "(profile.phases.queue_wait: data_ms over data_ms + step_ms)");
    cJSON_AddItemToObject(o, "judgement", judge(sps, ms, busy[1]));
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
    /* Loss agreement over the (epoch, step) pairs both runs reported. */
    size_t na, nb;
    loss_row *la = losses_of(ra, &na), *lb = losses_of(rb, &nb);
    size_t pairs = 0;
    double max_abs = NAN, max_rel = NAN;
    for (size_t i = 0; la && lb && i < na; i++) {
        const loss_row *m = bsearch(&la[i], lb, nb, sizeof *lb, by_key);
        if (!m)
            continue;
        pairs++;
        double d = fabs(la[i].loss - m->loss);
        double den = fmax(fmax(fabs(la[i].loss), fabs(m->loss)), 1e-12);
        max_abs = isnan(max_abs) ? d : fmax(max_abs, d);
        max_rel = isnan(max_rel) ? d / den : fmax(max_rel, d / den);
    }
    dg_free(la);
    dg_free(lb);
    cJSON *loss = cJSON_AddObjectToObject(o, "loss");
    cJSON_AddNumberToObject(loss, "pairs", (double)pairs);
    cJSON_AddNumberToObject(loss, "a_only", (double)(na - pairs));
    cJSON_AddNumberToObject(loss, "b_only", (double)(nb - pairs));
    cJSON_AddItemToObject(loss, "max_abs_diff", metric(max_abs, "loss"));
    cJSON_AddItemToObject(loss, "max_rel_diff", metric(max_rel, "relative"));
    cJSON_AddNumberToObject(loss, "tolerance", LOSS_TOLERANCE);
    if (pairs)
        cJSON_AddBoolToObject(loss, "agree", max_rel <= LOSS_TOLERANCE);
    else
        cJSON_AddNullToObject(loss, "agree");
    *json = dg_json_print(o);
    cJSON_Delete(o);
    cJSON_Delete(ra);
    cJSON_Delete(rb);
    if (!*json)
        return dg_fail(ctx, DG_ERR_NOMEM, "compare: out of host memory");
    return DG_OK;
}
