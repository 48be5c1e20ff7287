/* One level's statistics and verdict (docs/slo.md "The verdict"): LoadGen's
 * binomial rule per bound, each percentile's point value with its bootstrap
 * interval, goodput, and failures and timeouts counted, never dropped. */
#include "measure/measure.h"
#include "slo/slo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- LoadGen's rule -------------------------------------------------------------- */

static double log_pmf(long k, long n, double lq, double lq1)
{
    return lgamma((double)n + 1) - lgamma((double)k + 1) - lgamma((double)(n - k) + 1) +
           (double)k * lq + (double)(n - k) * lq1;
}

/* Sum of the pmf from k going away from the mode (down when down), where
 * every term is smaller than the one before: stops once they no longer count. */
static double tail(long k, long n, double q, bool down)
{
    double lq = log(q), lq1 = log1p(-q), sum = 0;
    for (long i = k; down ? i >= 0 : i <= n; i += down ? -1 : 1) {
        double t = exp(log_pmf(i, n, lq, lq1));
        sum += t;
        if (t <= sum * 1e-17) /* every further term is smaller still */
            break;
    }
    return sum;
}

double dg_binomial_cdf(long k, long n, double q)
{
    if (n < 0 || !(q >= 0 && q <= 1))
        return NAN;
    if (k < 0)
        return 0;
    if (k >= n || q == 0)
        return 1;
    if (q == 1)
        return 0;
    /* Below the mean the terms fall going down, above it going up: sum the
     * tail that is small, so neither end loses its digits. */
    if ((double)k < (double)n * q)
        return fmin(1, tail(k, n, q, true));
    return fmax(0, 1 - tail(k + 1, n, q, false));
}

/* P(X >= k). */
static double upper_tail(long k, long n, double q)
{
    if (k <= 0)
        return 1;
    if (k > n)
        return 0;
    if ((double)k > (double)n * q)
        return fmin(1, tail(k, n, q, false));
    return fmax(0, 1 - tail(k - 1, n, q, true));
}

dg_slo_judgement dg_slo_binomial(long n, long over, double p, double c, long *needed)
{
    if (needed)
        *needed = 0;
    double alpha = 1 - c, q = 1 - p;
    if (n > 0 && over >= 0 && over <= n && dg_binomial_cdf(over, n, q) <= alpha)
        return DG_SLO_PASS;
    if (n > 0 && over > 0 && over <= n && upper_tail(over, n, q) <= alpha)
        return DG_SLO_FAIL;
    if (needed && over >= 0 && p > 0 && p < 1 && c > 0 && c < 1) {
        /* The fewest requests with as many overs that would pass: the cdf
         * falls as n grows, so double, then bisect. */
        long lo = over > n ? over : n, hi = lo > 0 ? lo : 1;
        while (dg_binomial_cdf(over, hi, q) > alpha && hi < (1L << 40))
            hi *= 2;
        while (hi - lo > 1) {
            long mid = lo + (hi - lo) / 2;
            if (dg_binomial_cdf(over, mid, q) <= alpha)
                hi = mid;
            else
                lo = mid;
        }
        *needed = hi;
    }
    return DG_SLO_INCONCLUSIVE;
}

void dg_slo_pct_name(char *buf, size_t len, double p)
{
    snprintf(buf, len, "p%.4g", p * 100);
}

static void over_words(char *buf, size_t len, long over)
{
    if (over == 0)
        snprintf(buf, len, "none over");
    else if (over == 1)
        snprintf(buf, len, "one over");
    else
        snprintf(buf, len, "%ld over", over);
}

void dg_slo_judgement_text(char *buf, size_t len, dg_slo_judgement j, long n, long over, double p,
                           double c, long needed)
{
    char pn[16], ov[32];
    dg_slo_pct_name(pn, sizeof pn, p);
    over_words(ov, sizeof ov, over);
    if (j == DG_SLO_PASS)
        snprintf(buf, len, "holds at %s with %.4g%% confidence: n = %ld, %s", pn, c * 100, n, ov);
    else if (j == DG_SLO_FAIL)
        snprintf(buf, len,
                 "missed at %s with %.4g%% confidence: n = %ld, %ld over (%.4g%% allowed)", pn,
                 c * 100, n, over, (1 - p) * 100);
    else
        snprintf(buf, len, "inconclusive: n = %ld, at least %ld needed at %s with %s", n, needed,
                 pn, ov);
}

/* ---- one request's latencies ----------------------------------------------------- */

static double start_of(const slo_req *r, bool open_loop)
{
    return open_loop && isfinite(r->sched) ? r->sched : r->sent;
}

double dg_slo_req_ttft(const slo_req *r, bool open_loop)
{
    return r->outcome == SLO_OK && isfinite(r->first) ? r->first - start_of(r, open_loop) : NAN;
}

double dg_slo_req_e2e(const slo_req *r, bool open_loop)
{
    return r->outcome == SLO_OK ? r->end - start_of(r, open_loop) : NAN;
}

double dg_slo_req_tpot(const slo_req *r, bool open_loop)
{
    double ttft = dg_slo_req_ttft(r, open_loop), e2e = dg_slo_req_e2e(r, open_loop);
    if (!isfinite(ttft) || r->tokens < 2)
        return NAN;
    return (e2e - ttft) / (double)(r->tokens - 1);
}

/* ---- the level ------------------------------------------------------------------- */

/* The measured requests' values of one metric in ms (ITL: every gap). */
typedef struct series {
    double *v;
    size_t n;
} series;

static double metric_of(const slo_req *r, dg_slo_metric m, bool open_loop)
{
    switch (m) {
    case DG_SLO_TTFT: return dg_slo_req_ttft(r, open_loop);
    case DG_SLO_TPOT: return dg_slo_req_tpot(r, open_loop);
    case DG_SLO_E2E: return dg_slo_req_e2e(r, open_loop);
    default: return NAN;
    }
}

static bool measured(const slo_req *r)
{
    return r->phase == SLO_PH_MEASURED && r->outcome != SLO_INFLIGHT;
}

static bool collect(const slo_judge_in *in, dg_slo_metric m, series *s)
{
    size_t cap = m == DG_SLO_ITL ? in->nitl : in->nreqs;
    s->v = dg_malloc((cap ? cap : 1) * sizeof *s->v);
    s->n = 0;
    if (!s->v)
        return false;
    for (size_t i = 0; i < in->nreqs; i++) {
        const slo_req *r = &in->reqs[i];
        if (!measured(r) || r->outcome != SLO_OK)
            continue;
        if (m == DG_SLO_ITL) {
            for (uint32_t k = 0; k < r->itl_n && r->itl_first + k < in->nitl; k++)
                s->v[s->n++] = 1e3 * in->itl[r->itl_first + k];
        } else {
            double x = metric_of(r, m, in->open_loop);
            if (isfinite(x))
                s->v[s->n++] = 1e3 * x;
        }
    }
    return true;
}

static cJSON *ms_metric(double v)
{
    return dg_json_metric(v, isfinite(v), "ms");
}

static void add_num_or_null(cJSON *o, const char *key, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

/* {n, mean, max, percentiles: [{p, value, lo, hi, level}]} of one series. */
static cJSON *latency_json(const series *s, const dg_slo_opts *o)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "n", (double)s->n);
    double sum = 0, max = NAN;
    for (size_t i = 0; i < s->n; i++) {
        sum += s->v[i];
        if (!(s->v[i] <= max))
            max = s->v[i];
    }
    cJSON_AddItemToObject(j, "mean", ms_metric(s->n ? sum / (double)s->n : NAN));
    cJSON_AddItemToObject(j, "max", ms_metric(max));
    double ps[4] = {0.50, 0.90, 0.99, o->percentile / 100};
    size_t np = 3;
    if (ps[3] != 0.50 && ps[3] != 0.90 && ps[3] != 0.99)
        np = 4;
    dg_median_ci ci[4];
    /* Bootstraps of large series cost resamples x n: fewer resamples there. */
    size_t resamples = s->n > 20000 ? 500 : 0;
    if (!dg_bootstrap_quantiles_ci(s->v, s->n, ps, np, resamples, 0.95, o->seed ^ 0x510, ci))
        for (size_t k = 0; k < np; k++)
            ci[k].point = s->n ? dg_quantile(s->v, s->n, ps[k]) : NAN;
    cJSON *arr = cJSON_AddArrayToObject(j, "percentiles");
    for (size_t k = 0; k < np; k++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "p", ps[k] * 100);
        cJSON_AddItemToObject(e, "value", ms_metric(ci[k].point));
        add_num_or_null(e, "lo", ci[k].valid ? ci[k].lo : NAN);
        add_num_or_null(e, "hi", ci[k].valid ? ci[k].hi : NAN);
        cJSON_AddNumberToObject(e, "level", 0.95);
        cJSON_AddItemToArray(arr, e);
    }
    return j;
}

static const char *outcome_name(uint8_t o)
{
    static const char *const names[] = {"in flight", "ok", "failed", "timeout", "aborted"};
    return o < sizeof names / sizeof names[0] ? names[o] : "?";
}

/* The distinct failure reasons with their counts, most frequent first (at most 8). */
static cJSON *errors_json(const slo_judge_in *in)
{
    enum { MAXE = 8 };
    const char *why[MAXE];
    long count[MAXE];
    int n = 0;
    long others = 0;
    for (size_t i = 0; i < in->nreqs; i++) {
        const slo_req *r = &in->reqs[i];
        if (!measured(r) || r->outcome == SLO_OK)
            continue;
        const char *w = r->error[0] ? r->error : outcome_name(r->outcome);
        int k = 0;
        while (k < n && strcmp(why[k], w) != 0)
            k++;
        if (k == n && n == MAXE) {
            others++;
            continue;
        }
        if (k == n) {
            why[n] = w;
            count[n++] = 0;
        }
        count[k]++;
    }
    cJSON *arr = cJSON_CreateArray();
    for (int done = 0; done < n; done++) {
        int best = -1;
        for (int k = 0; k < n; k++)
            if (count[k] >= 0 && (best < 0 || count[k] > count[best]))
                best = k;
        cJSON *e = cJSON_CreateObject();
        dg_json_add_str(e, "what", why[best]);
        cJSON_AddNumberToObject(e, "count", (double)count[best]);
        cJSON_AddItemToArray(arr, e);
        count[best] = -1;
    }
    if (others) {
        cJSON *e = cJSON_CreateObject();
        dg_json_add_str(e, "what", "other reasons");
        cJSON_AddNumberToObject(e, "count", (double)others);
        cJSON_AddItemToArray(arr, e);
    }
    return arr;
}

/* Whether request r is over bound b; -1 when the bound does not apply to it
 * (TPOT of a one-token answer; ITL is judged per gap elsewhere). */
static int over_bound(const slo_judge_in *in, const slo_req *r, const dg_slo_bound *b)
{
    if (r->outcome != SLO_OK)
        return 1; /* a failed or timed-out request kept no promise */
    if (b->metric == DG_SLO_ITL) {
        for (uint32_t k = 0; k < r->itl_n && r->itl_first + k < in->nitl; k++)
            if (in->itl[r->itl_first + k] > b->limit_s)
                return 1;
        return 0;
    }
    double x = metric_of(r, b->metric, in->open_loop);
    return isfinite(x) ? x > b->limit_s : -1;
}

/* The verdict of one bound: counts (ITL per gap), rule, text. */
static cJSON *bound_json(const slo_judge_in *in, const dg_slo_bound *b, dg_slo_judgement *state)
{
    const dg_slo_opts *o = in->o;
    long n = 0, over = 0;
    for (size_t i = 0; i < in->nreqs; i++) {
        const slo_req *r = &in->reqs[i];
        if (!measured(r) || r->outcome == SLO_ABORTED)
            continue;
        if (b->metric == DG_SLO_ITL && r->outcome == SLO_OK) {
            for (uint32_t k = 0; k < r->itl_n && r->itl_first + k < in->nitl; k++) {
                n++;
                over += in->itl[r->itl_first + k] > b->limit_s;
            }
            continue;
        }
        int ov = over_bound(in, r, b);
        if (ov < 0)
            continue;
        n++;
        over += ov;
    }
    long needed = 0;
    double p = o->percentile / 100;
    *state = dg_slo_binomial(n, over, p, o->confidence, &needed);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "metric", dg_slo_metric_name(b->metric));
    cJSON_AddItemToObject(j, "limit", ms_metric(b->limit_s * 1e3));
    cJSON_AddNumberToObject(j, "percentile", o->percentile);
    cJSON_AddNumberToObject(j, "confidence", o->confidence);
    cJSON_AddNumberToObject(j, "n", (double)n);
    cJSON_AddNumberToObject(j, "over", (double)over);
    add_num_or_null(j, "p_at_most", dg_binomial_cdf(over, n, 1 - p));
    static const char *const states[] = {"pass", "fail", "inconclusive"};
    cJSON_AddStringToObject(j, "state", states[*state]);
    if (*state == DG_SLO_INCONCLUSIVE)
        cJSON_AddNumberToObject(j, "needed", (double)needed);
    else
        cJSON_AddNullToObject(j, "needed");
    char text[200];
    dg_slo_judgement_text(text, sizeof text, *state, n, over, p, o->confidence, needed);
    dg_json_add_str(j, "text", text);
    return j;
}

/* At most this many requests' latencies are kept in the record per level. */
#define SLO_SAMPLES_MAX 1000

static cJSON *samples_json(const slo_judge_in *in, size_t nmeasured, size_t *stride)
{
    *stride = nmeasured > SLO_SAMPLES_MAX ? (nmeasured + SLO_SAMPLES_MAX - 1) / SLO_SAMPLES_MAX : 1;
    cJSON *arr = cJSON_CreateArray();
    size_t k = 0;
    for (size_t i = 0; i < in->nreqs; i++) {
        const slo_req *r = &in->reqs[i];
        if (!measured(r) || k++ % *stride)
            continue;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "t", r->sent);
        double v[3] = {dg_slo_req_ttft(r, in->open_loop), dg_slo_req_tpot(r, in->open_loop),
                       dg_slo_req_e2e(r, in->open_loop)};
        static const char *const keys[3] = {"ttft_ms", "tpot_ms", "e2e_ms"};
        for (int m = 0; m < 3; m++)
            add_num_or_null(e, keys[m], 1e3 * v[m]);
        if (r->outcome == SLO_OK)
            cJSON_AddNumberToObject(e, "tokens", (double)r->tokens);
        else
            cJSON_AddNullToObject(e, "tokens");
        cJSON_AddStringToObject(e, "outcome", outcome_name(r->outcome));
        cJSON_AddItemToArray(arr, e);
    }
    return arr;
}

/* requests {sent, ok, failed, timeouts, aborted, errors} and tokens {...};
 * *good the ok requests within every bound. */
static void counts_json(const slo_judge_in *in, cJSON *lvl, long *good, size_t *nmeasured,
                        double *tokens)
{
    long c[5] = {0}, reported = 0, okn = 0;
    *good = 0;
    *tokens = 0;
    *nmeasured = 0;
    for (size_t i = 0; i < in->nreqs; i++) {
        const slo_req *r = &in->reqs[i];
        if (!measured(r))
            continue;
        (*nmeasured)++;
        c[r->outcome < 5 ? r->outcome : 0]++;
        if (r->outcome != SLO_OK)
            continue;
        okn++;
        *tokens += (double)r->tokens;
        reported += r->tokens_reported;
        bool within = true;
        for (int b = 0; b < in->o->nbounds && within; b++)
            within = over_bound(in, r, &in->o->bounds[b]) != 1;
        *good += within;
    }
    cJSON *req = cJSON_AddObjectToObject(lvl, "requests");
    cJSON_AddNumberToObject(req, "sent", (double)*nmeasured);
    cJSON_AddNumberToObject(req, "ok", (double)c[SLO_OK]);
    cJSON_AddNumberToObject(req, "failed", (double)c[SLO_FAILED]);
    cJSON_AddNumberToObject(req, "timeouts", (double)c[SLO_TIMEOUT]);
    cJSON_AddNumberToObject(req, "aborted", (double)c[SLO_ABORTED]);
    cJSON_AddItemToObject(req, "errors", errors_json(in));
    cJSON *tk = cJSON_AddObjectToObject(lvl, "tokens");
    cJSON_AddStringToObject(tk, "source",
                            okn == 0          ? "none"
                            : reported == okn ? "server"
                            : reported == 0   ? "chunks"
                                              : "mixed");
    cJSON_AddItemToObject(tk, "mean",
                          dg_json_metric(okn ? *tokens / (double)okn : NAN, okn > 0, "tokens"));
    cJSON_AddNumberToObject(tk, "total", *tokens);
}

bool dg_slo_judge_level(const slo_judge_in *in, cJSON *lvl, dg_slo_judgement *state, long *n,
                        long *over)
{
    long good;
    size_t nmeasured;
    double tokens;
    counts_json(in, lvl, &good, &nmeasured, &tokens);
    double wall = in->wall_s;
    bool wv = isfinite(wall) && wall > 0;
    cJSON *tp = cJSON_AddObjectToObject(lvl, "throughput");
    long ok = (long)dg_jnum(lvl, "requests.ok");
    cJSON_AddItemToObject(tp, "requests_per_s",
                          dg_json_metric(wv ? (double)ok / wall : NAN, wv, "requests/s"));
    cJSON_AddItemToObject(tp, "tokens_per_s",
                          dg_json_metric(wv ? tokens / wall : NAN, wv, "tokens/s"));
    cJSON_AddItemToObject(tp, "goodput",
                          dg_json_metric(wv ? (double)good / wall : NAN, wv, "requests/s"));
    cJSON *lat = cJSON_AddObjectToObject(lvl, "latency");
    for (int m = 0; m < DG_SLO_NMETRICS; m++) {
        series s;
        if (!collect(in, (dg_slo_metric)m, &s))
            return false;
        cJSON_AddItemToObject(lat, dg_slo_metric_name((dg_slo_metric)m), latency_json(&s, in->o));
        dg_free(s.v);
    }
    cJSON *v = cJSON_AddObjectToObject(lvl, "verdict");
    cJSON *bounds = cJSON_AddArrayToObject(v, "bounds");
    bool any_fail = false, all_pass = in->o->nbounds > 0;
    for (int b = 0; b < in->o->nbounds; b++) {
        dg_slo_judgement j;
        cJSON_AddItemToArray(bounds, bound_json(in, &in->o->bounds[b], &j));
        any_fail = any_fail || j == DG_SLO_FAIL;
        all_pass = all_pass && j == DG_SLO_PASS;
    }
    *state = any_fail ? DG_SLO_FAIL : all_pass ? DG_SLO_PASS : DG_SLO_INCONCLUSIVE;
    static const char *const states[] = {"pass", "fail", "inconclusive"};
    cJSON_AddStringToObject(v, "state", states[*state]);
    *n = (long)nmeasured - (long)dg_jnum(lvl, "requests.aborted");
    *over = *n - good;
    cJSON_AddNumberToObject(v, "n", (double)*n);
    cJSON_AddNumberToObject(v, "over", (double)*over);
    size_t stride;
    cJSON_AddItemToObject(lvl, "samples", samples_json(in, nmeasured, &stride));
    cJSON_AddNumberToObject(lvl, "samples_stride", (double)stride);
    return true;
}

/* ---- names and bounds ------------------------------------------------------------- */

dg_status dg_slo_bound_parse(dg_ctx *ctx, const char *text, dg_slo_bound *out)
{
    const char *colon = text ? strchr(text, ':') : NULL;
    char word[16] = "";
    if (!colon || colon == text || (size_t)(colon - text) >= sizeof word)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "--slo wants METRIC:LIMIT (ttft:500ms, tpot:30ms, itl:50ms, e2e:2s)");
    memcpy(word, text, (size_t)(colon - text));
    int m = 0;
    while (m < DG_SLO_NMETRICS && strcmp(word, dg_slo_metric_name((dg_slo_metric)m)) != 0)
        m++;
    char clean[64];
    dg_copy_clean(clean, sizeof clean, word);
    if (m == DG_SLO_NMETRICS)
        return dg_fail(ctx, DG_ERR_USAGE, "--slo: unknown metric '%s' (ttft, tpot, itl or e2e)",
                       clean);
    char *end = NULL;
    double v = strtod(colon + 1, &end);
    double scale = 1e-3;
    if (end && strcmp(end, "s") == 0)
        scale = 1;
    else if (end && strcmp(end, "us") == 0)
        scale = 1e-6;
    else if (end && *end && strcmp(end, "ms") != 0)
        end = NULL;
    if (!end || end == colon + 1 || !isfinite(v) || v <= 0 || v * scale > 86400) {
        dg_copy_clean(clean, sizeof clean, colon + 1);
        return dg_fail(ctx, DG_ERR_USAGE,
                       "--slo %s: the limit '%s' is not a positive time (500ms, 0.5s, 800us)", word,
                       clean);
    }
    out->metric = (dg_slo_metric)m;
    out->limit_s = v * scale;
    return DG_OK;
}
