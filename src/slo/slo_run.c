/* dg_slo_run (devgate_slo.h, docs/slo.md): options, the target, the levels
 * (a list of concurrencies, --find-max's doubling and bisection, or one open
 * loop rate) and the record with its final gate, the signable statement. One
 * level's phases are in level.c. */
#include "core/record.h"
#include "diagnose/diagnose.h"
#include "slo/slo.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const builtin_prompts[] = {
    "Explain in a few sentences why a shared compute node needs a latency promise.", NULL};

/* ---- options ----------------------------------------------------------------------- */

static dg_status resolve(dg_ctx *ctx, const dg_slo_opts *in, dg_slo_opts *o)
{
    *o = *in;
    if (!o->target || !o->target[0])
        return dg_fail(ctx, DG_ERR_USAGE, "slo: --target URL is required");
    if (o->nbounds < 1 || o->nbounds > DG_SLO_MAX_BOUNDS)
        return dg_fail(ctx, DG_ERR_USAGE, "slo: give 1 to %d bounds with --slo METRIC:LIMIT",
                       DG_SLO_MAX_BOUNDS);
    if (o->rate > 0 && (o->nconcurrency > 0 || o->find_max))
        return dg_fail(ctx, DG_ERR_USAGE,
                       "slo: --rate (open loop) and --concurrency/--find-max (closed loop) "
                       "exclude each other");
    if (!(o->rate >= 0) || !isfinite(o->rate))
        return dg_fail(ctx, DG_ERR_USAGE, "slo: --rate must be a positive number");
    if (o->rate == 0 && o->nconcurrency == 0) {
        o->concurrency[0] = 1;
        o->nconcurrency = 1;
    }
    if (o->nconcurrency > DG_SLO_MAX_LEVELS)
        return dg_fail(ctx, DG_ERR_USAGE, "slo: at most %d concurrencies", DG_SLO_MAX_LEVELS);
    for (int i = 0; i < o->nconcurrency; i++)
        if (o->concurrency[i] < 1 || (i && o->concurrency[i] <= o->concurrency[i - 1]))
            return dg_fail(ctx, DG_ERR_USAGE,
                           "slo: --concurrency wants positive counts in ascending order");
    if (o->find_max && o->nconcurrency > 1)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "slo: --find-max starts from one concurrency (give at most one)");
    if (o->max_concurrency <= 0)
        o->max_concurrency = 256;
    if (o->max_concurrency > 4096)
        return dg_fail(ctx, DG_ERR_USAGE, "slo: --max-concurrency is at most 4096");
    for (int i = 0; i < o->nconcurrency; i++)
        if (o->concurrency[i] > 4096)
            return dg_fail(ctx, DG_ERR_USAGE, "slo: a concurrency is at most 4096");
    if (o->burstiness <= 0)
        o->burstiness = 1;
    if (o->max_inflight <= 0)
        o->max_inflight = 1024;
    if (o->duration_s <= 0)
        o->duration_s = 60;
    if (o->warmup_s == 0)
        o->warmup_s = fmax(1, 0.1 * o->duration_s);
    if (o->warmup_s < 0)
        o->warmup_s = 0;
    if (o->window_s <= 0)
        o->window_s = 2;
    if (o->max_windows <= 0)
        o->max_windows = 10;
    if (o->max_windows < 3)
        return dg_fail(ctx, DG_ERR_USAGE, "slo: --max-windows is at least 3 (three must agree)");
    if (o->percentile <= 0)
        o->percentile = 99;
    if (!(o->percentile > 0 && o->percentile < 100))
        return dg_fail(ctx, DG_ERR_USAGE, "slo: --percentile must lie between 0 and 100");
    if (o->confidence <= 0)
        o->confidence = 0.99;
    if (!(o->confidence > 0 && o->confidence < 1))
        return dg_fail(ctx, DG_ERR_USAGE, "slo: --confidence must lie between 0 and 1");
    if (o->max_tokens <= 0)
        o->max_tokens = 64;
    if (o->request_timeout_s <= 0)
        o->request_timeout_s = 60;
    if (!o->prompts || !o->prompts[0])
        o->prompts = builtin_prompts;
    if (o->metrics_url && strncmp(o->metrics_url, "http://", 7) != 0 &&
        strncmp(o->metrics_url, "https://", 8) != 0) {
        char clean[200];
        dg_copy_clean(clean, sizeof clean, o->metrics_url);
        return dg_fail(ctx, DG_ERR_USAGE, "slo: --metrics '%s' is not an http:// or https:// URL",
                       clean);
    }
    bool fixture = strcmp(o->target, "fixture") == 0;
    if (!fixture && (o->fixture_backend || o->fixture_batch))
        return dg_fail(ctx, DG_ERR_USAGE,
                       "slo: --backend and --batch are the fixture's: give --target fixture");
    if (fixture && o->api != DG_SLO_OPENAI)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "slo: the fixture speaks OpenAI's streaming shape: --api openai");
    if (fixture && !o->model)
        o->model = "mlp";
    if (o->while_steps <= 0)
        o->while_steps = 20;
    if (o->while_seconds <= 0)
        o->while_seconds = 300;
    double th[TH_COUNT];
    return dg_thresholds_parse(ctx, o->thresholds, th);
}

dg_status dg_slo_target_init(dg_ctx *ctx, const dg_slo_opts *o, slo_target *t)
{
    memset(t, 0, sizeof *t);
    const char *u = o->target;
    char clean[200];
    dg_copy_clean(clean, sizeof clean, u);
    const char *rest = u;
    const char *scheme = "http://";
    if (strncmp(u, "http://", 7) == 0) {
        rest = u + 7;
    } else if (strncmp(u, "https://", 8) == 0) {
        rest = u + 8;
        scheme = "https://";
    } else if (strstr(u, "://")) {
        return dg_fail(ctx, DG_ERR_USAGE, "slo: --target '%s' is not an http:// or https:// URL",
                       clean);
    }
    size_t hostlen = strcspn(rest, "/?#");
    if (hostlen == 0)
        return dg_fail(ctx, DG_ERR_USAGE, "slo: --target '%s' names no host", clean);
    const char *path = rest + hostlen;
    if (snprintf(t->base, sizeof t->base, "%s%.*s", scheme, (int)hostlen, rest) >=
        (int)sizeof t->base)
        return dg_fail(ctx, DG_ERR_USAGE, "slo: --target is too long");
    t->api = o->api;
    bool bare = !*path || strcmp(path, "/") == 0;
    const char *def = o->api == DG_SLO_OLLAMA ? "/api/generate" : "/v1/completions";
    if (snprintf(t->url, sizeof t->url, "%s%s", t->base, bare ? def : path) >= (int)sizeof t->url)
        return dg_fail(ctx, DG_ERR_USAGE, "slo: --target is too long");
    size_t pl = strcspn(t->url, "?#");
    static const char *const chat[] = {"/chat/completions", "/api/chat"};
    for (int i = 0; i < 2; i++) {
        size_t cl = strlen(chat[i]);
        if (pl >= cl && strncmp(t->url + pl - cl, chat[i], cl) == 0)
            t->chat = true;
    }
    t->model = o->model;
    t->max_tokens = o->max_tokens;
    t->timeout_s = o->request_timeout_s;
    t->prompts = o->prompts;
    return DG_OK;
}

/* The model the requests name: the option, else the server's first listed
 * model, else "default". Its source into *source. */
static const char *discover_model(const slo_target *t, char *buf, size_t len, const char **source)
{
    if (t->model) {
        *source = "option";
        return t->model;
    }
    long http = 0;
    bool ollama = t->api == DG_SLO_OLLAMA;
    char *body = dg_slo_http_get(t, ollama ? "/api/tags" : "/v1/models", 5, &http);
    cJSON *j = body && http == 200 ? cJSON_Parse(body) : NULL;
    dg_free(body);
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItem(j, ollama ? "models" : "data"), 0);
    const cJSON *name = cJSON_GetObjectItem(first, ollama ? "name" : "id");
    *source = "default";
    snprintf(buf, len, "default");
    if (cJSON_IsString(name) && name->valuestring[0]) {
        dg_utf8_clean(buf, len, name->valuestring, strlen(name->valuestring), true);
        *source = "server";
    }
    cJSON_Delete(j);
    return buf;
}

/* Ollama's /api/ps: each loaded model's size and the part of it in device
 * memory (size_vram), and their share: below 1, layers run on the CPU. */
static cJSON *ollama_ps(const slo_target *t)
{
    long http = 0;
    char *body = dg_slo_http_get(t, "/api/ps", 5, &http);
    cJSON *j = body && http == 200 ? cJSON_Parse(body) : NULL;
    dg_free(body);
    if (!j)
        return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "models");
    double size = 0, vram = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(j, "models"))
    {
        double s = dg_jnum(m, "size"), v = dg_jnum(m, "size_vram");
        cJSON *e = cJSON_CreateObject();
        dg_json_add_str(e, "name", dg_jstr(m, "name"));
        cJSON_AddItemToObject(e, "size", dg_json_metric_of(s, "bytes"));
        cJSON_AddItemToObject(e, "size_vram", dg_json_metric_of(v, "bytes"));
        cJSON_AddItemToArray(arr, e);
        if (isfinite(s) && isfinite(v)) {
            size += s;
            vram += v;
        }
    }
    cJSON_AddItemToObject(o, "vram_share",
                          dg_json_metric_of(size > 0 ? vram / size : NAN, "fraction"));
    cJSON_Delete(j);
    return o;
}

/* ---- the record ---------------------------------------------------------------------- */

static cJSON *spec_json(const dg_slo_opts *o, const slo_target *t, const char *model,
                        const char *model_source)
{
    cJSON *s = cJSON_CreateObject();
    char url[sizeof t->url];
    snprintf(url, sizeof url, "%s", t->url);
    dg_redact_secrets(url);
    dg_json_add_str(s, "target", url);
    cJSON_AddStringToObject(s, "api", o->api == DG_SLO_OLLAMA ? "ollama" : "openai");
    cJSON_AddBoolToObject(s, "chat", t->chat);
    dg_json_add_str(s, "model", model);
    cJSON_AddStringToObject(s, "model_source", model_source);
    cJSON_AddStringToObject(s, "mode", o->rate > 0 ? "open" : "closed");
    if (o->rate > 0) {
        cJSON_AddNullToObject(s, "concurrency");
    } else {
        cJSON *c = cJSON_AddArrayToObject(s, "concurrency");
        for (int i = 0; i < o->nconcurrency; i++)
            cJSON_AddItemToArray(c, cJSON_CreateNumber(o->concurrency[i]));
    }
    cJSON_AddBoolToObject(s, "find_max", o->find_max);
    cJSON_AddNumberToObject(s, "max_concurrency", o->max_concurrency);
    cJSON_AddItemToObject(s, "rate", dg_json_metric(o->rate, o->rate > 0, "requests/s"));
    cJSON_AddNumberToObject(s, "burstiness", o->burstiness);
    cJSON_AddNumberToObject(s, "max_inflight", o->max_inflight);
    cJSON_AddNumberToObject(s, "seed", (double)o->seed);
    cJSON_AddItemToObject(s, "duration", dg_json_metric(o->duration_s, true, "s"));
    cJSON_AddNumberToObject(s, "min_requests", (double)o->min_requests);
    cJSON_AddItemToObject(s, "warmup", dg_json_metric(o->warmup_s, true, "s"));
    cJSON_AddItemToObject(s, "window", dg_json_metric(o->window_s, true, "s"));
    cJSON_AddNumberToObject(s, "max_windows", o->max_windows);
    cJSON *b = cJSON_AddArrayToObject(s, "bounds");
    for (int i = 0; i < o->nbounds; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "metric", dg_slo_metric_name(o->bounds[i].metric));
        cJSON_AddItemToObject(e, "limit", dg_json_metric(o->bounds[i].limit_s * 1e3, true, "ms"));
        cJSON_AddItemToArray(b, e);
    }
    cJSON_AddNumberToObject(s, "percentile", o->percentile);
    cJSON_AddNumberToObject(s, "confidence", o->confidence);
    size_t np = 0, bytes = 0;
    for (; o->prompts[np]; np++)
        bytes += strlen(o->prompts[np]);
    cJSON *p = cJSON_AddObjectToObject(s, "prompts");
    cJSON_AddNumberToObject(p, "count", (double)np);
    cJSON_AddNumberToObject(p, "bytes", (double)bytes);
    cJSON_AddStringToObject(p, "source", o->prompts == builtin_prompts ? "builtin" : "option");
    cJSON_AddNumberToObject(s, "max_tokens", o->max_tokens);
    cJSON_AddItemToObject(s, "request_timeout", dg_json_metric(o->request_timeout_s, true, "s"));
    char mu[1024];
    snprintf(mu, sizeof mu, "%s", o->metrics_url ? o->metrics_url : "");
    dg_redact_secrets(mu);
    dg_json_add_str(s, "metrics", o->metrics_url ? mu : NULL);
    return s;
}

/* "p99 TTFT <= 500 ms and p99 TPOT <= 30 ms" */
static void bounds_text(char *buf, size_t len, const dg_slo_opts *o)
{
    char pn[16];
    dg_slo_pct_name(pn, sizeof pn, o->percentile / 100);
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; i < o->nbounds && off < len; i++) {
        char up[8];
        const char *m = dg_slo_metric_name(o->bounds[i].metric);
        size_t k = 0;
        for (; m[k] && k < sizeof up - 1; k++)
            up[k] = (char)toupper((unsigned char)m[k]);
        up[k] = 0;
        double ms = o->bounds[i].limit_s * 1e3;
        off += (size_t)snprintf(buf + off, len - off, "%s%s %s \u2264 %.4g %s",
                                i == 0                ? ""
                                : i == o->nbounds - 1 ? " and "
                                                      : ", ",
                                pn, up, ms >= 1000 ? ms / 1e3 : ms, ms >= 1000 ? "s" : "ms");
    }
}

/* "Debian GNU/Linux 12 (bookworm), Intel(R) Xeon(R) Processor x2" from the env proof. */
static void env_text(char *buf, size_t len, const cJSON *env)
{
    const char *os = dg_jstr(env, "os.name"), *cpu = dg_jstr(env, "cpu.model");
    double cores = dg_jnum(env, "cpu.logical_cores");
    if (!os && !cpu) {
        snprintf(buf, len, "environment not recorded");
        return;
    }
    char c[32] = "";
    if (isfinite(cores))
        snprintf(c, sizeof c, " x%.0f", cores);
    snprintf(buf, len, "%s%s%s%s", os ? os : "", os && cpu ? ", " : "", cpu ? cpu : "", c);
}

/* The level that can be signed: the largest concurrency whose SLO holds
 * (passed, steady, complete) with no smaller one missing it. A smaller level
 * that is only inconclusive (fewer requests in the same window) does not
 * stand in the way; one that missed does. -1: none. */
static int signable(const slo_level_res *lv, int n)
{
    int best = -1, fail_at = 0;
    for (int i = 0; i < n; i++)
        if ((lv[i].state == DG_SLO_FAIL || lv[i].error) &&
            (!fail_at || lv[i].concurrency < fail_at))
            fail_at = lv[i].concurrency > 0 ? lv[i].concurrency : 1;
    for (int i = 0; i < n; i++) {
        const slo_level_res *l = &lv[i];
        if (l->state != DG_SLO_PASS || !l->steady || l->error)
            continue;
        if (fail_at && l->concurrency >= fail_at)
            continue;
        if (best < 0 || l->concurrency > lv[best].concurrency)
            best = i;
    }
    return best;
}

/* "8 concurrent streams" or "5 requests/s (Poisson arrivals)". */
static void load_text(char *buf, size_t len, const dg_slo_opts *o, int concurrency)
{
    if (o->rate > 0)
        snprintf(buf, len, "%.4g requests/s (%s arrivals)", o->rate,
                 o->burstiness == 1 ? "Poisson" : "gamma");
    else
        snprintf(buf, len, "%d concurrent stream%s", concurrency, concurrency == 1 ? "" : "s");
}

/* The command beside, as words joined ("python3 train.py --epochs 3"), at most len. */
static void command_text(char *buf, size_t len, const char *const *argv)
{
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; argv && argv[i] && off + 1 < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? " " : "", argv[i]);
    dg_redact_secrets(buf);
}

/* Why nothing is signed, from the first level (in concurrency order) that did
 * not hold; *verdict gets missed or inconclusive. */
static void unsigned_text(char *text, size_t len, const char **verdict, const dg_slo_opts *o,
                          const slo_level_res *lv, int n, const char *bt)
{
    const slo_level_res *l = NULL;
    for (int i = 0; i < n; i++)
        if ((lv[i].state != DG_SLO_PASS || !lv[i].steady) &&
            (!l || lv[i].concurrency < l->concurrency))
            l = &lv[i];
    char at[64];
    load_text(at, sizeof at, o, l ? l->concurrency : 0);
    *verdict = l && l->state == DG_SLO_FAIL ? "missed" : "inconclusive";
    if (!l)
        snprintf(text, len, "not signed: no level was measured");
    else if (l->state == DG_SLO_FAIL)
        snprintf(text, len, "not signed: %s is missed at %s (%s)", bt, at, l->why);
    else if (l->state == DG_SLO_PASS)
        snprintf(text, len, "not signed: at %s the load never reached a steady state (%s)", at,
                 l->why);
    else
        snprintf(text, len, "not signed: at %s %s", at, l->why);
}

/* The final gate: the signable statement, or why nothing is signed. With a
 * training command beside (bs not NULL), the level signed alone must hold
 * beside it too. */
static void final_gate(cJSON *rec, const dg_slo_opts *o, const slo_level_res *lv, int n,
                       const slo_level_res *bs, dg_status st, const char *err)
{
    cJSON *fg = cJSON_AddObjectToObject(rec, "final_gate");
    char bt[256], et[256], at[64], cmd[200], text[1400];
    bounds_text(bt, sizeof bt, o);
    env_text(et, sizeof et, cJSON_GetObjectItem(rec, "env"));
    command_text(cmd, sizeof cmd, o->while_argv);
    const char *host = dg_jstr(rec, "host"), *url = dg_jstr(rec, "spec.target"),
               *model = dg_jstr(rec, "spec.model");
    char fx[1300];
    if (cJSON_IsObject(dg_jpath(rec, "spec.fixture"))) {
        snprintf(fx, sizeof fx, "devgate's fixture on %s (batch %.0f, %s)",
                 dg_jstr(rec, "spec.fixture.backend") ? dg_jstr(rec, "spec.fixture.backend") : "?",
                 dg_jnum(rec, "spec.fixture.batch"), url ? url : "?");
        url = fx;
    }
    int k = st == DG_OK ? signable(lv, n) : -1;
    const char *verdict = "signed";
    bool sign = k >= 0;
    if (k >= 0) {
        load_text(at, sizeof at, o, lv[k].concurrency);
        int off = snprintf(text, sizeof text,
                           "on node %s (%s), endpoint %s, model %s: %s %s at %s with %.4g%% "
                           "confidence (n = %ld, %ld over)",
                           host ? host : "?", et, url ? url : "?", model ? model : "?", bt,
                           o->nbounds == 1 ? "holds" : "hold", at, o->confidence * 100, lv[k].n,
                           lv[k].over);
        bool holds = bs && bs->state == DG_SLO_PASS && bs->steady && !bs->error;
        if (holds && off > 0 && (size_t)off < sizeof text)
            snprintf(text + off, sizeof text - (size_t)off,
                     ", and with `%s` training beside it (n = %ld, %ld over)", cmd, bs->n,
                     bs->over);
        if (o->while_argv && !holds) {
            sign = false;
            verdict = bs && bs->state == DG_SLO_FAIL ? "missed" : "inconclusive";
            snprintf(text, sizeof text,
                     "not signed: %s %s at %s alone (n = %ld, %ld over), but not with `%s` "
                     "training beside it: %s",
                     bt, o->nbounds == 1 ? "holds" : "hold", at, lv[k].n, lv[k].over, cmd,
                     !bs                        ? "it was not measured"
                     : bs->state == DG_SLO_PASS ? "the load never reached a steady state"
                                                : bs->why);
        }
    } else if (st == DG_ERR_INTERRUPTED) {
        snprintf(text, sizeof text, "not signed: the run was interrupted");
        verdict = "interrupted";
    } else if (st != DG_OK) {
        snprintf(text, sizeof text, "not signed: %s", err && err[0] ? err : "the run failed");
        verdict = "failed";
    } else {
        unsigned_text(text, sizeof text, &verdict, o, lv, n, bt);
    }
    cJSON_AddBoolToObject(fg, "signed", sign);
    cJSON_AddStringToObject(fg, "verdict", verdict);
    if (sign && o->rate <= 0)
        cJSON_AddNumberToObject(fg, "concurrency", lv[k].concurrency);
    else
        cJSON_AddNullToObject(fg, "concurrency");
    cJSON_AddItemToObject(fg, "rate", dg_json_metric(o->rate, o->rate > 0 && sign, "requests/s"));
    dg_json_add_num(fg, "n", sign ? (double)lv[k].n : NAN);
    dg_json_add_num(fg, "over", sign ? (double)lv[k].over : NAN);
    dg_json_add_str(fg, "statement", text);
}

/* ---- the ladder -------------------------------------------------------------------- */

typedef struct ladder {
    dg_ctx *ctx;
    const dg_slo_opts *o;
    const slo_target *t;
    cJSON *levels;
    slo_level_res res[64];
    int n;
    slo_level_res bres; /* the level measured beside the training (--while) */
    bool has_beside;
    cJSON *w; /* the record's "while" (--while), borrowed */
    dg_status st;
} ladder;

/* Measures one level (concurrency c, or the open loop when c is 0); true
 * when its SLO holds (pass and steady). */
static bool measure(ladder *l, int c)
{
    if (l->n >= 64 || l->st != DG_OK)
        return false;
    slo_level_res *r = &l->res[l->n];
    cJSON *lvl = NULL;
    l->st = dg_slo_level_run(l->ctx, l->o, l->t, c, false, &lvl, r);
    if (lvl) {
        cJSON_AddItemToArray(l->levels, lvl);
        l->n++;
    }
    dg_log(l->ctx, DG_LOG_INFO, "slo: level %d: %s", c, r->why);
    return l->st == DG_OK && r->state == DG_SLO_PASS && r->steady;
}

static void run_ladder(ladder *l, cJSON *lad)
{
    const dg_slo_opts *o = l->o;
    if (o->rate > 0) {
        cJSON_AddStringToObject(lad, "mode", "open");
        measure(l, 0);
        return;
    }
    if (!o->find_max) {
        cJSON_AddStringToObject(lad, "mode", o->nconcurrency > 1 ? "list" : "single");
        for (int i = 0; i < o->nconcurrency && l->st == DG_OK; i++)
            measure(l, o->concurrency[i]);
        return;
    }
    /* --find-max: doubling while the SLO holds, then bisection between the
     * last concurrency that held and the first that did not (the batch
     * sweep's search, over a verdict instead of a throughput). */
    cJSON_AddStringToObject(lad, "mode", "find-max");
    int good = 0, bad = 0;
    for (long c = o->concurrency[0]; c <= o->max_concurrency && l->st == DG_OK; c *= 2) {
        if (!measure(l, (int)c)) {
            bad = (int)c;
            break;
        }
        good = (int)c;
    }
    int resolution = good / 8 > 1 ? good / 8 : 1;
    cJSON_AddNumberToObject(lad, "resolution", resolution);
    while (good && bad && bad - good > resolution && l->st == DG_OK) {
        int m = good + (bad - good) / 2;
        if (measure(l, m))
            good = m;
        else
            bad = m;
    }
    if (bad)
        cJSON_AddNumberToObject(lad, "first_not_holding", bad);
    else
        cJSON_AddNullToObject(lad, "first_not_holding");
}

/* --while -- CMD, first: the command alone until its probe saw the steps
 * asked for (after its warm-up of two), then stopped. Before the ladder, so
 * that the level measured beside follows the levels alone closely. "while"
 * in the record (docs/schema/slo.md). */
static void train_alone(ladder *l, cJSON *rec)
{
    const dg_slo_opts *o = l->o;
    cJSON *w = cJSON_AddObjectToObject(rec, "while");
    cJSON *cmd = cJSON_AddArrayToObject(w, "command");
    for (int i = 0; o->while_argv[i]; i++) {
        char word[4096];
        snprintf(word, sizeof word, "%s", o->while_argv[i]);
        dg_redact_secrets(word);
        cJSON_AddItemToArray(cmd, dg_json_string(word));
    }
    cJSON_AddNumberToObject(w, "steps_alone", o->while_steps);
    dg_log(l->ctx, DG_LOG_INFO, "slo: the training alone for %d steps", o->while_steps);
    double t0, t1;
    slo_beside *b = dg_slo_beside_start(l->ctx, o);
    if (b)
        dg_slo_beside_wait(b, o->while_steps + 2, o->while_seconds, o->cancel);
    cJSON_AddItemToObject(w, "alone", dg_slo_beside_stop(b, &t0, &t1));
    if (!b)
        l->st = DG_ERR_NOMEM;
    else if (o->cancel && *o->cancel)
        l->st = dg_fail(l->ctx, DG_ERR_INTERRUPTED, "slo: interrupted");
    l->w = w;
}

/* --while -- CMD, then: the signed level (else the first) measured again
 * with the command training beside it, the level marked beside in "levels". */
static void run_beside(ladder *l)
{
    const dg_slo_opts *o = l->o;
    cJSON *w = l->w;
    int k = signable(l->res, l->n);
    int c = k >= 0 ? l->res[k].concurrency : l->n ? l->res[0].concurrency : 0;
    if (!w || (o->rate <= 0 && c <= 0))
        return;
    dg_json_add_num(w, "concurrency", o->rate > 0 ? NAN : c);
    slo_beside *b = dg_slo_beside_start(l->ctx, o);
    if (!b) {
        l->st = DG_ERR_NOMEM;
        return;
    }
    /* The level starts once the training is under way (its first steps). */
    bool under_way = dg_slo_beside_wait(b, 3, o->while_seconds, o->cancel);
    cJSON_AddBoolToObject(w, "under_way", under_way);
    cJSON *lvl = NULL;
    dg_log(l->ctx, DG_LOG_INFO, "slo: level %d with the training beside", c);
    l->st = dg_slo_level_run(l->ctx, o, l->t, c, true, &lvl, &l->bres);
    l->has_beside = lvl != NULL;
    if (lvl)
        cJSON_AddItemToArray(l->levels, lvl);
    double t0, t1;
    cJSON *beside = dg_slo_beside_stop(b, &t0, &t1);
    cJSON_AddItemToObject(w, "beside", beside);
    double a = dg_jnum(w, "alone.step_ms"), bs = dg_jnum(beside, "step_ms");
    cJSON_AddItemToObject(w, "slowdown", dg_json_metric_of(bs / a, "ratio"));
    /* The share of the measured window the training ran through. */
    double m0 = l->bres.meas_t0, m1 = l->bres.meas_t1;
    double ov = m1 > m0 ? (fmin(t1, m1) - fmax(t0, m0)) / (m1 - m0) : NAN;
    cJSON_AddItemToObject(w, "overlap", dg_json_metric_of(fmax(0, fmin(1, ov)), "fraction"));
}

static cJSON *record_head(dg_ctx *ctx, const dg_slo_opts *o)
{
    cJSON *rec = cJSON_CreateObject();
    dg_record_head(rec, "slo", 1);
    dg_json_add_str(rec, "label", o->label);
    cJSON *env = NULL;
    if (!o->no_env) {
        char *ej = NULL;
        dg_env_opts eo = {0};
        if (dg_env_run(ctx, &eo, &ej) == DG_OK && ej)
            env = cJSON_Parse(ej);
        dg_string_free(ej);
    }
    cJSON_AddItemToObject(rec, "env", env ? env : cJSON_CreateNull());
    return rec;
}

/* The rules over the finished record: its thresholds and findings added
 * (docs/rules.md; slo-met, slo-missed, slo-inconclusive, queueing-bound,
 * training-interference, and the environment's rules). */
static dg_status diagnose(dg_ctx *ctx, cJSON *rec, const char *overrides)
{
    dg_record_view view;
    cJSON *diag = NULL;
    dg_status st = dg_record_view_build(ctx, rec, &view);
    if (st == DG_OK)
        st = dg_diagnose_view(ctx, &view, overrides, &diag);
    dg_record_view_free(&view);
    if (st != DG_OK)
        return st;
    static const char *const keys[] = {"thresholds", "findings"};
    for (int i = 0; i < 2; i++)
        cJSON_AddItemToObject(rec, keys[i], cJSON_DetachItemFromObject(diag, keys[i]));
    cJSON_Delete(diag);
    return DG_OK;
}

dg_status dg_slo_run(dg_ctx *ctx, const dg_slo_opts *in, char **json)
{
    if (!json || !in)
        return dg_fail(ctx, DG_ERR_USAGE, "slo: no options or no output pointer");
    *json = NULL;
    dg_slo_opts o;
    slo_target t;
    dg_status st = resolve(ctx, in, &o);
    bool fixture = st == DG_OK && strcmp(o.target, "fixture") == 0;
    if (st == DG_OK && !fixture)
        st = dg_slo_target_init(ctx, &o, &t);
    if (st != DG_OK)
        return st;
    if (!dg_slo_available())
        return dg_fail(ctx, DG_ERR_UNAVAILABLE,
                       "slo: this devgate was built without libcurl (install "
                       "libcurl4-openssl-dev and rebuild)");
    /* The fixture: a child serving it on a loopback port, then measured as any URL. */
    slo_fixture *fx = NULL;
    char fxbase[64], fxmetrics[80];
    if (fixture) {
        if ((st = dg_slo_fixture_start(ctx, &o, &fx, fxbase, sizeof fxbase)) != DG_OK)
            return st;
        o.target = fxbase;
        /* Its own view: the server's /metrics (vLLM's names), unless another was given. */
        if (!o.metrics_url) {
            snprintf(fxmetrics, sizeof fxmetrics, "%s/metrics", fxbase);
            o.metrics_url = fxmetrics;
        }
        if ((st = dg_slo_target_init(ctx, &o, &t)) != DG_OK) {
            cJSON_Delete(dg_slo_fixture_stop(fx));
            return st;
        }
    }
    char mbuf[128];
    const char *msrc;
    t.model = discover_model(&t, mbuf, sizeof mbuf, &msrc);
    cJSON *rec = record_head(ctx, &o);
    cJSON_AddItemToObject(rec, "spec", spec_json(&o, &t, t.model, msrc));
    if (o.api == DG_SLO_OLLAMA)
        cJSON_AddItemToObject(rec, "ollama_ps", ollama_ps(&t));
    ladder l = {.ctx = ctx, .o = &o, .t = &t, .levels = cJSON_AddArrayToObject(rec, "levels")};
    cJSON *lad = cJSON_AddObjectToObject(rec, "ladder");
    if (o.while_argv)
        train_alone(&l, rec);
    if (l.st == DG_OK)
        run_ladder(&l, lad);
    if (o.while_argv && l.st == DG_OK)
        run_beside(&l);
    char how[96];
    /* The endpoint gone: the fixture's server may have died (its exit lands
     * just after its socket closed, so it is given a moment to show). */
    bool died = false;
    for (double t0 = dg_now(); fx && l.st != DG_OK && l.st != DG_ERR_INTERRUPTED &&
                               !(died = dg_slo_fixture_ended(fx, how, sizeof how)) &&
                               dg_now() - t0 < 2;)
        usleep(20000);
    if (died) {
        char was[DG_ERRMSG_MAX];
        snprintf(was, sizeof was, "%s", dg_errmsg(ctx));
        dg_fail(ctx, l.st, "the fixture server (devgate __slo_fixture) %s part way: %s", how, was);
    }
    cJSON *fxj = fixture ? dg_slo_fixture_stop(fx) : NULL;
    cJSON_AddItemToObject(cJSON_GetObjectItem(rec, "spec"), "fixture",
                          fxj ? fxj : cJSON_CreateNull());
    int k = signable(l.res, l.n);
    if (k >= 0 && o.rate <= 0)
        cJSON_AddNumberToObject(lad, "largest_holding", l.res[k].concurrency);
    else
        cJSON_AddNullToObject(lad, "largest_holding");
    char err[DG_ERRMSG_MAX];
    snprintf(err, sizeof err, "%s", l.st == DG_OK ? "" : dg_errmsg(ctx));
    cJSON_AddStringToObject(rec, "state",
                            l.st == DG_OK                ? "complete"
                            : l.st == DG_ERR_INTERRUPTED ? "interrupted"
                                                         : "failed");
    dg_json_add_str(rec, "error", err[0] ? err : NULL);
    final_gate(rec, &o, l.res, l.n, l.has_beside ? &l.bres : NULL, l.st, err);
    dg_status dst = diagnose(ctx, rec, o.thresholds);
    if (dst != DG_OK) {
        cJSON_Delete(rec);
        return dst;
    }
    /* Nothing measured and the endpoint never answered: no record to keep. */
    if (l.n == 0 && l.st != DG_OK) {
        cJSON_Delete(rec);
        return l.st;
    }
    *json = dg_json_print(rec);
    cJSON_Delete(rec);
    if (!*json)
        return dg_fail(ctx, DG_ERR_NOMEM, "slo: out of memory printing the record");
    if (l.st != DG_OK)
        dg_fail(ctx, l.st, "%s", err);
    return l.st;
}
