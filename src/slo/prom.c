/* The engine's own view (--metrics; docs/slo.md): the Prometheus text
 * exposition format parsed (pure, fuzzed), and the samples an inference
 * engine exports read by role: generated tokens (a counter), requests
 * waiting and running, KV-cache use. llama.cpp's server, vLLM, TGI and
 * SGLang name them differently; one table says which name plays which role. */
#include "slo/slo.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool name_start(char c)
{
    return isalpha((unsigned char)c) || c == '_' || c == ':';
}

static bool name_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == ':';
}

/* The labels between { and }: quoted values may hold escaped quotes and
 * braces. Returns the index of the closing brace, or -1. */
static long labels_end(const char *l, size_t n, size_t i)
{
    bool quoted = false;
    for (; i < n; i++) {
        char c = l[i];
        if (quoted) {
            if (c == '\\')
                i++;
            else if (c == '"')
                quoted = false;
        } else if (c == '"') {
            quoted = true;
        } else if (c == '}') {
            return (long)i;
        }
    }
    return -1;
}

/* A sample value: a float, NaN, +Inf or -Inf; false for anything else. */
static bool value_of(const char *s, size_t n, double *v)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, s, n);
    buf[n] = 0;
    if (!strcmp(buf, "NaN")) {
        *v = NAN;
        return true;
    }
    if (!strcmp(buf, "+Inf") || !strcmp(buf, "Inf")) {
        *v = INFINITY;
        return true;
    }
    if (!strcmp(buf, "-Inf")) {
        *v = -INFINITY;
        return true;
    }
    char *end;
    *v = strtod(buf, &end);
    return end == buf + n && isfinite(*v);
}

/* One line; true when it was a sample (fn called). */
static bool sample_line(const char *l, size_t n, slo_prom_fn fn, void *user)
{
    char name[200], labels[1024];
    size_t i = 0;
    while (i < n && (l[i] == ' ' || l[i] == '\t'))
        i++;
    size_t s = i;
    if (i >= n || !name_start(l[i]))
        return false;
    while (i < n && name_char(l[i]))
        i++;
    if (i - s >= sizeof name)
        return false;
    memcpy(name, l + s, i - s);
    name[i - s] = 0;
    labels[0] = 0;
    if (i < n && l[i] == '{') {
        long e = labels_end(l, n, i + 1);
        if (e < 0 || (size_t)e - i - 1 >= sizeof labels)
            return false;
        memcpy(labels, l + i + 1, (size_t)e - i - 1);
        labels[(size_t)e - i - 1] = 0;
        i = (size_t)e + 1;
    }
    if (i >= n || (l[i] != ' ' && l[i] != '\t'))
        return false;
    while (i < n && (l[i] == ' ' || l[i] == '\t'))
        i++;
    s = i;
    while (i < n && l[i] != ' ' && l[i] != '\t')
        i++;
    double v;
    if (!value_of(l + s, i - s, &v))
        return false;
    /* An optional timestamp (an integer) may follow; anything else is not a sample. */
    while (i < n && (l[i] == ' ' || l[i] == '\t'))
        i++;
    if (i < n && l[i] == '-')
        i++;
    while (i < n && isdigit((unsigned char)l[i]))
        i++;
    while (i < n && (l[i] == ' ' || l[i] == '\t'))
        i++;
    if (i != n)
        return false;
    fn(user, name, labels, v);
    return true;
}

long dg_slo_prom_parse(const char *text, size_t len, slo_prom_fn fn, void *user, long *malformed)
{
    long samples = 0, bad = 0;
    size_t i = 0;
    while (i < len) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t n = nl ? (size_t)(nl - (text + i)) : len - i;
        const char *l = text + i;
        size_t m = n;
        if (m && l[m - 1] == '\r')
            m--;
        size_t k = 0;
        while (k < m && (l[k] == ' ' || l[k] == '\t'))
            k++;
        if (k < m && l[k] != '#') {
            if (sample_line(l, m, fn, user))
                samples++;
            else
                bad++;
        }
        i += n + (nl ? 1 : 0);
    }
    if (malformed)
        *malformed = bad;
    return samples;
}

/* ---- the engine's metrics by role ------------------------------------------------- */

static const char *const role_names[SLO_ENGINE_ROLES][6] = {
    [SLO_ENGINE_TOKENS] = {"vllm:generation_tokens_total", "llamacpp:tokens_predicted_total",
                           "tgi_request_generated_tokens_sum", "sglang:generation_tokens_total",
                           NULL},
    [SLO_ENGINE_WAITING] = {"vllm:num_requests_waiting", "llamacpp:requests_deferred",
                            "tgi_queue_size", "sglang:num_queue_reqs", NULL},
    [SLO_ENGINE_RUNNING] = {"vllm:num_requests_running", "llamacpp:requests_processing",
                            "tgi_batch_current_size", "sglang:num_running_reqs", NULL},
    [SLO_ENGINE_KV_CACHE] = {"vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc",
                             "llamacpp:kv_cache_usage_ratio", "sglang:token_usage", NULL},
};

static void on_sample(void *user, const char *name, const char *labels, double value)
{
    slo_engine_point *p = user;
    (void)labels;
    for (int r = 0; r < SLO_ENGINE_ROLES; r++)
        for (int k = 0; role_names[r][k]; k++) {
            if (strcmp(name, role_names[r][k]) != 0 || !isfinite(value))
                continue;
            /* One engine's name per role; its label sets (models) summed. */
            if (p->name[r] && p->name[r] != role_names[r][k])
                continue;
            p->name[r] = role_names[r][k];
            p->v[r] = isnan(p->v[r]) ? value : p->v[r] + value;
        }
}

void dg_slo_engine_read(const char *text, size_t len, double t, slo_engine_point *p)
{
    memset(p, 0, sizeof *p);
    p->t = t;
    for (int r = 0; r < SLO_ENGINE_ROLES; r++)
        p->v[r] = NAN;
    p->samples = dg_slo_prom_parse(text, len, on_sample, p, &p->malformed);
}

const char *dg_slo_engine_role_name(int role)
{
    static const char *const names[SLO_ENGINE_ROLES] = {"tokens", "waiting", "running", "kv_cache"};
    return (unsigned)role < SLO_ENGINE_ROLES ? names[role] : "?";
}
