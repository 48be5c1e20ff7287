/* devgate slo's pure parts: LoadGen's binomial rule at its boundaries (the
 * numbers LoadGen's own tables give), the binomial tails against a direct
 * sum, the stream parsers fed in every split, the bound parser, and the
 * quantile bootstrap. */
#include "check.h"
#include "measure/measure.h"
#include "slo/slo.h"

#include <math.h>

/* P(X <= k) by the plain sum of the pmf in long double (small n only). */
static double direct_cdf(long k, long n, double q)
{
    long double s = 0, c = 1; /* c = C(n, i) */
    for (long i = 0; i <= k && i <= n; i++) {
        s += c * powl(q, i) * powl(1 - q, n - i);
        c = c * (n - i) / (i + 1);
    }
    return (double)s;
}

static void test_binomial(void)
{
    /* The tails against the direct sum, both sides of the mean. */
    const long ns[] = {1, 10, 64, 100, 459, 662};
    const double qs[] = {0.01, 0.1, 0.5, 0.9};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof qs / sizeof *qs; b++)
            for (long k = 0; k <= ns[a]; k += ns[a] / 7 + 1) {
                double got = dg_binomial_cdf(k, ns[a], qs[b]), want = direct_cdf(k, ns[a], qs[b]);
                CHECK_MSG(fabs(got - want) <= 1e-9 * fmax(1e-300, want) + 1e-15,
                          "cdf(%ld, %ld, %g) = %.17g, want %.17g", k, ns[a], qs[b], got, want);
            }
    CHECK(dg_binomial_cdf(-1, 10, 0.5) == 0);
    CHECK(dg_binomial_cdf(10, 10, 0.5) == 1);
    CHECK(isnan(dg_binomial_cdf(1, 10, 1.5)));
    /* Far tails keep their digits on both sides (no 1 - (1 - x)). */
    double t = dg_binomial_cdf(0, 2000, 0.01);
    CHECK(fabs(t / pow(0.99, 2000) - 1) < 1e-9);
    t = 1 - dg_binomial_cdf(1999, 2000, 0.99);
    CHECK(fabs(t / pow(0.99, 2000) - 1) < 1e-6);

    /* LoadGen's minimum query counts at 99% confidence. */
    long need = -1;
    CHECK(dg_slo_binomial(63, 1, 0.90, 0.99, &need) == DG_SLO_INCONCLUSIVE);
    CHECK_MSG(need == 64, "p90 one over needs %ld", need);
    CHECK(dg_slo_binomial(64, 1, 0.90, 0.99, &need) == DG_SLO_PASS && need == 0);
    CHECK(dg_slo_binomial(458, 0, 0.99, 0.99, &need) == DG_SLO_INCONCLUSIVE);
    CHECK_MSG(need == 459, "p99 none over needs %ld", need);
    CHECK(dg_slo_binomial(459, 0, 0.99, 0.99, NULL) == DG_SLO_PASS);
    CHECK(dg_slo_binomial(661, 1, 0.99, 0.99, &need) == DG_SLO_INCONCLUSIVE);
    CHECK_MSG(need == 662, "p99 one over needs %ld", need);
    CHECK(dg_slo_binomial(662, 1, 0.99, 0.99, NULL) == DG_SLO_PASS);
    /* n = 312 with none over: the issue's own example. */
    CHECK(dg_slo_binomial(312, 0, 0.99, 0.99, &need) == DG_SLO_INCONCLUSIVE && need == 459);
    char text[200];
    dg_slo_judgement_text(text, sizeof text, DG_SLO_INCONCLUSIVE, 312, 0, 0.99, 0.99, need);
    CHECK_STR(text, "inconclusive: n = 312, at least 459 needed at p99 with none over");
    /* Missed: P(X >= over) <= 1 - c. With n = 100 at p99, 5 over: P(X >= 5)
     * = 0.0034 <= 0.01; 4 over: 0.018 > 0.01, inconclusive. */
    CHECK(dg_slo_binomial(100, 5, 0.99, 0.99, NULL) == DG_SLO_FAIL);
    CHECK(dg_slo_binomial(100, 4, 0.99, 0.99, NULL) == DG_SLO_INCONCLUSIVE);
    /* Every request over: missed, never "needs more". */
    CHECK(dg_slo_binomial(10, 10, 0.9, 0.99, NULL) == DG_SLO_FAIL);
    /* No requests at all: inconclusive with the count needed. */
    CHECK(dg_slo_binomial(0, 0, 0.99, 0.99, &need) == DG_SLO_INCONCLUSIVE && need == 459);
    char pn[16];
    dg_slo_pct_name(pn, sizeof pn, 0.999);
    CHECK_STR(pn, "p99.9");
}

/* Feeds text in two pieces split at every position and in single bytes; the
 * results must not depend on how the bytes arrived. */
static void feed_all_ways(dg_slo_api api, const char *text, long want_chunks, bool want_done,
                          long want_tokens)
{
    size_t n = strlen(text);
    for (size_t cut = 0; cut <= n; cut++) {
        slo_stream s;
        dg_slo_stream_init(&s, api);
        long k = dg_slo_stream_feed(&s, text, cut);
        k += dg_slo_stream_feed(&s, text + cut, n - cut);
        k += dg_slo_stream_finish(&s);
        CHECK_MSG(k == want_chunks && s.chunks == want_chunks && s.done == want_done &&
                      s.usage_tokens == want_tokens,
                  "cut %zu: chunks %ld/%ld done %d tokens %ld", cut, k, s.chunks, s.done,
                  s.usage_tokens);
        dg_slo_stream_free(&s);
    }
    slo_stream s;
    dg_slo_stream_init(&s, api);
    long k = 0;
    for (size_t i = 0; i < n; i++)
        k += dg_slo_stream_feed(&s, text + i, 1);
    k += dg_slo_stream_finish(&s);
    CHECK(k == want_chunks && s.done == want_done);
    dg_slo_stream_free(&s);
}

static void test_streams(void)
{
    feed_all_ways(
        DG_SLO_OPENAI,
        "data: {\"choices\":[{\"text\":\"a\"}]}\n\n"
        ": a comment\nevent: x\n"
        "data: {\"choices\":[{\"text\":\"\"}]}\n\n" /* empty: no token */
        "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\r\n\r\n"
        "data:{\"choices\":[],\"usage\":{\"completion_tokens\":7,\"prompt_tokens\":3}}\n\n"
        "data: [DONE]\n\n",
        2, true, 7);
    /* One newline between events (no blank line), and an event split over
     * two data lines. */
    feed_all_ways(DG_SLO_OPENAI,
                  "data: {\"choices\":[{\"text\":\"a\"}]}\n"
                  "data: {\"choices\":\n"
                  "data: [{\"text\":\"b\"}]}\n\n"
                  "data: [DONE]",
                  2, true, -1);
    feed_all_ways(
        DG_SLO_OLLAMA,
        "{\"response\":\"x\",\"done\":false}\n"
        "{\"message\":{\"content\":\"y\"},\"done\":false}\r\n\n"
        "{\"response\":\"\",\"done\":true,\"eval_count\":12,\"eval_duration\":2000000000}",
        2, true, 12);
    slo_stream s;
    dg_slo_stream_init(&s, DG_SLO_OLLAMA);
    const char *t = "{\"done\":true,\"eval_count\":4,\"eval_duration\":500000000}\n";
    dg_slo_stream_feed(&s, t, strlen(t));
    CHECK(fabs(s.eval_s - 0.5) < 1e-12);
    dg_slo_stream_free(&s);
    /* An error in the stream, garbage, a count that lies. */
    dg_slo_stream_init(&s, DG_SLO_OPENAI);
    t = "data: {\"error\":{\"message\":\"overloaded\\u001b[31m\"}}\n\ndata: not json\n\n"
        "data: {\"usage\":{\"completion_tokens\":-5}}\n\n";
    dg_slo_stream_feed(&s, t, strlen(t));
    dg_slo_stream_finish(&s);
    CHECK(strncmp(s.error, "overloaded", 10) == 0 && !strchr(s.error, 0x1b));
    CHECK(s.malformed == 1 && s.usage_tokens == -1 && !s.done);
    dg_slo_stream_free(&s);
    /* An overlong line is dropped, the stream goes on. */
    dg_slo_stream_init(&s, DG_SLO_OLLAMA);
    char *big = malloc(SLO_LINE_MAX + 16);
    memset(big, 'x', SLO_LINE_MAX + 8);
    big[SLO_LINE_MAX + 8] = '\n';
    dg_slo_stream_feed(&s, big, SLO_LINE_MAX + 9);
    t = "{\"response\":\"z\"}\n";
    CHECK(dg_slo_stream_feed(&s, t, strlen(t)) == 1 && s.overlong);
    free(big);
    dg_slo_stream_free(&s);
}

static void test_bounds(void)
{
    dg_slo_bound b;
    CHECK(dg_slo_bound_parse(NULL, "ttft:500ms", &b) == DG_OK && b.metric == DG_SLO_TTFT &&
          fabs(b.limit_s - 0.5) < 1e-12);
    CHECK(dg_slo_bound_parse(NULL, "e2e:2s", &b) == DG_OK && b.metric == DG_SLO_E2E &&
          b.limit_s == 2);
    CHECK(dg_slo_bound_parse(NULL, "tpot:30", &b) == DG_OK && fabs(b.limit_s - 0.03) < 1e-12);
    CHECK(dg_slo_bound_parse(NULL, "itl:800us", &b) == DG_OK && fabs(b.limit_s - 8e-4) < 1e-12);
    dg_ctx *ctx = dg_ctx_new();
    CHECK(dg_slo_bound_parse(ctx, "ttfb:5ms", &b) == DG_ERR_USAGE &&
          strstr(dg_errmsg(ctx), "unknown metric 'ttfb'"));
    CHECK(dg_slo_bound_parse(ctx, "ttft:-5ms", &b) == DG_ERR_USAGE);
    CHECK(dg_slo_bound_parse(ctx, "ttft:5min", &b) == DG_ERR_USAGE);
    CHECK(dg_slo_bound_parse(ctx, "ttft", &b) == DG_ERR_USAGE);
    CHECK(dg_slo_bound_parse(ctx, ":5ms", &b) == DG_ERR_USAGE);
    dg_ctx_free(ctx);
}

static void test_quantiles(void)
{
    double v[101];
    for (int i = 0; i <= 100; i++)
        v[i] = 100 - i; /* 0..100 reversed */
    CHECK(dg_quantile(v, 101, 0.5) == 50 && dg_quantile(v, 101, 0.99) == 99);
    CHECK(fabs(dg_quantile(v, 101, 0.995) - 99.5) < 1e-12);
    CHECK(v[0] == 100); /* not modified */
    CHECK(isnan(dg_quantile(v, 0, 0.5)) && isnan(dg_quantile(v, 3, 1.5)));
    /* Uniform draws on [0, 1): each interval holds its point, and the p50
     * interval holds the true median in (nearly) every seed. */
    dg_rng r;
    dg_rng_init(&r, 42, 1);
    int held = 0;
    for (int rep = 0; rep < 20; rep++) {
        double u[400];
        for (int i = 0; i < 400; i += 4) {
            uint32_t q[4];
            dg_rng_next4(&r, q);
            for (int k = 0; k < 4; k++)
                u[i + k] = q[k] / 4294967296.0;
        }
        double ps[3] = {0.5, 0.9, 0.99};
        dg_median_ci ci[3];
        CHECK(dg_bootstrap_quantiles_ci(u, 400, ps, 3, 500, 0.95, (uint64_t)rep, ci));
        for (int k = 0; k < 3; k++)
            CHECK(ci[k].valid && ci[k].lo <= ci[k].point && ci[k].point <= ci[k].hi);
        held += ci[0].lo <= 0.5 && 0.5 <= ci[0].hi;
    }
    CHECK_MSG(held >= 16, "the p50 interval held the truth %d times of 20", held);
    double bad[2] = {1, NAN}, p = 0.5;
    dg_median_ci ci;
    CHECK(!dg_bootstrap_quantiles_ci(bad, 2, &p, 1, 0, 0.95, 1, &ci) && !ci.valid);
}

typedef struct prom_seen {
    int n;
    char names[8][64], labels[8][128];
    double values[8];
} prom_seen;

static void on_prom(void *user, const char *name, const char *labels, double value)
{
    prom_seen *p = user;
    if (p->n < 8) {
        snprintf(p->names[p->n], 64, "%s", name);
        snprintf(p->labels[p->n], 128, "%s", labels);
        p->values[p->n] = value;
    }
    p->n++;
}

static void test_prometheus(void)
{
    const char *t = "# HELP x a help line\n"
                    "# TYPE vllm:num_requests_waiting gauge\n"
                    "vllm:num_requests_waiting{model_name=\"a \\\"b\\\" {c}\"} 3\n"
                    "\n"
                    "llamacpp:tokens_predicted_total 1.5e3 1700000000000\r\n"
                    "up NaN\n"
                    "bad line without value\n"
                    "{no_name=\"x\"} 1\n"
                    "x{unclosed=\"} 1\n"
                    "y 12abc\n"
                    "z +Inf";
    prom_seen p = {0};
    long bad = -1;
    long n = dg_slo_prom_parse(t, strlen(t), on_prom, &p, &bad);
    CHECK_MSG(n == 4 && p.n == 4 && bad == 4, "samples %ld (%d), malformed %ld", n, p.n, bad);
    CHECK_STR(p.names[0], "vllm:num_requests_waiting");
    CHECK_STR(p.labels[0], "model_name=\"a \\\"b\\\" {c}\"");
    CHECK(p.values[0] == 3 && p.values[1] == 1500 && isnan(p.values[2]) && isinf(p.values[3]));
    /* By role: the engine's names, label sets summed, one engine per role. */
    const char *v = "vllm:num_requests_waiting{model_name=\"a\"} 2\n"
                    "vllm:num_requests_waiting{model_name=\"b\"} 3\n"
                    "vllm:generation_tokens_total{model_name=\"a\"} 100\n"
                    "vllm:gpu_cache_usage_perc{model_name=\"a\"} 0.25\n"
                    "llamacpp:requests_deferred 7\n";
    slo_engine_point e;
    dg_slo_engine_read(v, strlen(v), 1.0, &e);
    CHECK(e.v[SLO_ENGINE_WAITING] == 5 && e.v[SLO_ENGINE_TOKENS] == 100);
    CHECK(e.v[SLO_ENGINE_KV_CACHE] == 0.25 && isnan(e.v[SLO_ENGINE_RUNNING]));
    CHECK_STR(e.name[SLO_ENGINE_WAITING], "vllm:num_requests_waiting");
    const char *l = "llamacpp:requests_processing 2\nllamacpp:requests_deferred 4\n"
                    "llamacpp:kv_cache_usage_ratio 0.5\n";
    dg_slo_engine_read(l, strlen(l), 1.0, &e);
    CHECK(e.v[SLO_ENGINE_RUNNING] == 2 && e.v[SLO_ENGINE_WAITING] == 4 &&
          e.v[SLO_ENGINE_KV_CACHE] == 0.5 && isnan(e.v[SLO_ENGINE_TOKENS]));
}

/* dg_slo_http_parse over an exact copy of n bytes of text (no NUL after
 * them, so a read past the end shows under the sanitizers). */
static slo_http_state http(const char *text, size_t n, size_t max, slo_http_req *r)
{
    char *copy = malloc(n ? n : 1);
    if (!copy)
        abort();
    memcpy(copy, text, n);
    slo_http_state st = dg_slo_http_parse(copy, n, max, r);
    free(copy);
    return st;
}
#define HTTP(lit, r) http((lit), sizeof(lit) - 1, 1u << 20, (r))

/* The fixture server's request parser on hostile input: every answer one
 * of the three, nothing read past the bytes given. */
static void test_http_parse(void)
{
    slo_http_req r;
    CHECK(HTTP("GET /health?x=1 HTTP/1.1\r\nHost: h\r\n\r\n", &r) == SLO_HTTP_REQUEST);
    CHECK(!strcmp(r.method, "GET") && !strcmp(r.path, "/health") && r.keep_alive &&
          r.body_len == 0 && r.used == 37);
    /* a body, and the next request pipelined behind it */
    static const char two[] = "POST /v1/completions HTTP/1.1\r\ncontent-length:\t2\r\n\r\n{}"
                              "GET /metrics HTTP/1.0\r\n\r\n";
    CHECK(HTTP(two, &r) == SLO_HTTP_REQUEST && !strcmp(r.method, "POST") && r.body == 52 &&
          r.body_len == 2 && r.used == 54);
    CHECK(http(two + 54, sizeof two - 55, 1u << 20, &r) == SLO_HTTP_REQUEST &&
          !strcmp(r.path, "/metrics") && !r.keep_alive && r.used == sizeof two - 55);
    CHECK(HTTP("GET / HTTP/1.1\r\nConnection: close\r\n\r\n", &r) == SLO_HTTP_REQUEST &&
          !r.keep_alive);
    CHECK(HTTP("GET / HTTP/1.1\r\nConnection: closed\r\n\r\n", &r) == SLO_HTTP_REQUEST &&
          r.keep_alive);
    /* headers without CRLF: never a request, refused once the head is too large */
    CHECK(HTTP("GET / HTTP/1.1\nHost: h\n\n", &r) == SLO_HTTP_MORE);
    CHECK(HTTP("GET / HTTP/1.1\r\nHost: h", &r) == SLO_HTTP_MORE);
    CHECK(http("GET / HTTP/1.1\nHost: h\n\n", 24, 24, &r) == SLO_HTTP_REFUSED && r.status == 413 &&
          r.used == 24 && !r.keep_alive);
    CHECK(HTTP("", &r) == SLO_HTTP_MORE && HTTP("\r\n\r", &r) == SLO_HTTP_MORE);
    /* a Content-Length that lies: more than was sent waits, less leaves the
     * rest for the next request; a negative or huge one is refused */
    CHECK(HTTP("POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{}", &r) ==
              SLO_HTTP_MORE &&
          !r.expect_continue);
    CHECK(HTTP("POST /v1/completions HTTP/1.1\r\nContent-Length: 1\r\n\r\n{}", &r) ==
              SLO_HTTP_REQUEST &&
          r.body_len == 1 && r.used == 53);
    CHECK(HTTP("POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n", &r) == SLO_HTTP_REFUSED &&
          r.status == 400 && strstr(r.why, "Content-Length"));
    CHECK(HTTP("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", &r) ==
              SLO_HTTP_REFUSED &&
          r.status == 413);
    CHECK(HTTP("POST / HTTP/1.1\r\nContent-Length: -99999999999999999999999\r\n\r\n", &r) ==
              SLO_HTTP_REFUSED &&
          r.status == 400);
    CHECK(HTTP("POST / HTTP/1.1\r\nContent-Length: 1048577\r\n\r\n", &r) == SLO_HTTP_REFUSED &&
          r.status == 413);
    CHECK(HTTP("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", &r) ==
              SLO_HTTP_REFUSED &&
          r.status == 400 && r.used == 59);
    /* 100-continue only while the head alone is here */
    static const char cont[] = "POST /v1/completions HTTP/1.1\r\nExpect: 100-Continue\r\n"
                               "Content-Length: 2\r\n\r\n{}";
    CHECK(http(cont, sizeof cont - 3, 1u << 20, &r) == SLO_HTTP_MORE && r.expect_continue);
    CHECK(http(cont, sizeof cont - 2, 1u << 20, &r) == SLO_HTTP_MORE && !r.expect_continue);
    CHECK(HTTP(cont, &r) == SLO_HTTP_REQUEST);
    /* NUL bytes, an empty request line, words too long for their buffers */
    CHECK(HTTP("GET /hea\0lth HTTP/1.1\r\nX: \0\r\n\r\n", &r) == SLO_HTTP_REQUEST &&
          !strcmp(r.path, "/hea"));
    CHECK(HTTP("\0\r\n\r\n", &r) == SLO_HTTP_REQUEST && r.method[0] == '\0');
    CHECK(HTTP("\r\n\r\n", &r) == SLO_HTTP_REQUEST && !r.method[0] && !r.path[0] && r.used == 4);
    CHECK(HTTP("OPTIONSX /health HTTP/1.1\r\n\r\n", &r) == SLO_HTTP_REQUEST && !r.method[0] &&
          !strcmp(r.path, "/health"));
    /* a 1 MiB header: refused, whether or not its end has come */
    size_t big = (1u << 20) + 64;
    char *h = malloc(big);
    if (!h)
        abort();
    memset(h, 'a', big);
    memcpy(h, "GET / HTTP/1.1\r\nX-Big: ", 23);
    CHECK(http(h, 1u << 20, 1u << 20, &r) == SLO_HTTP_REFUSED && r.status == 413 &&
          r.used == 1u << 20);
    CHECK(http(h, (1u << 20) - 1, 1u << 20, &r) == SLO_HTTP_MORE);
    memcpy(h + big - 4, "\r\n\r\n", 4);
    CHECK(http(h, big, 1u << 20, &r) == SLO_HTTP_REFUSED && r.status == 413 && r.used == big);
    free(h);
}

int main(void)
{
    test_binomial();
    test_streams();
    test_bounds();
    test_quantiles();
    test_prometheus();
    test_http_parse();
    CHECK_DONE();
}
