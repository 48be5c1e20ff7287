/* devgate slo: a signable concurrency SLO for a shared node (docs/slo.md).
 *
 * Public API beside devgate.h (same conventions: statuses, a message on the
 * dg_ctx, records as versioned JSON text; the library never prints or exits).
 * Requests go to an OpenAI-compatible or Ollama endpoint through libcurl's
 * multi interface, many streams in one thread; without libcurl at build time
 * dg_slo_run answers DG_ERR_UNAVAILABLE. */
#ifndef DEVGATE_SLO_H
#define DEVGATE_SLO_H

#include "devgate.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The latencies a bound may name. */
typedef enum dg_slo_metric {
    DG_SLO_TTFT, /* time to the first non-empty streamed chunk */
    DG_SLO_TPOT, /* (E2E - TTFT) / (tokens - 1) */
    DG_SLO_ITL,  /* each gap between two streamed chunks */
    DG_SLO_E2E,  /* request sent (open loop: scheduled) to the last byte */
    DG_SLO_NMETRICS
} dg_slo_metric;

/* "ttft", "tpot", "itl", "e2e". */
const char *dg_slo_metric_name(dg_slo_metric m);

/* One bound of the SLO: metric at or below limit_s. */
typedef struct dg_slo_bound {
    dg_slo_metric metric;
    double limit_s;
} dg_slo_bound;

/* Parses "METRIC:LIMIT" ("ttft:500ms", "tpot:0.03s", "e2e:2s"; the unit is
 * ms, s or us; a bare number is ms) into *out. DG_ERR_USAGE with a message
 * naming what was wrong. */
dg_status dg_slo_bound_parse(dg_ctx *ctx, const char *text, dg_slo_bound *out);

#define DG_SLO_MAX_BOUNDS 4
#define DG_SLO_MAX_LEVELS 16

typedef enum dg_slo_api { DG_SLO_OPENAI = 0, DG_SLO_OLLAMA } dg_slo_api;

typedef struct dg_slo_opts {
    const char *target; /* endpoint URL (http:// or https://); a bare host:port gets http://;
                           "fixture": devgate's own fixture model, served by a child process
                           (devgate __slo_fixture) on a loopback port for the run */
    dg_slo_api api;
    const char *model; /* model name sent with each request; NULL: asked of the server (the
                          fixture: its model, a preset or layer string; NULL: mlp) */
    const char *fixture_backend; /* the fixture's backend (NULL: cpu) */
    int fixture_batch;           /* samples in each of the fixture's forward passes (0: 1) */
    const char *fixture_exe;     /* the devgate that serves the fixture (NULL: this one) */
    /* Closed loop: the concurrency ladder (1..DG_SLO_MAX_LEVELS levels,
     * ascending); open loop instead when rate > 0 (one level). */
    int concurrency[DG_SLO_MAX_LEVELS];
    int nconcurrency;
    bool find_max;       /* doubling from concurrency[0] (default 1), then bisection */
    int max_concurrency; /* find_max's ceiling (0: 256) */
    double rate;         /* open loop: requests/s (0: closed loop) */
    double burstiness;   /* gamma shape of the inter-arrival times (0: 1 = Poisson) */
    int max_inflight;    /* open loop: requests in flight at most (0: 1024) */
    uint64_t seed;       /* arrivals and the bootstrap */
    double duration_s;   /* measured window per level (0: 60) */
    long min_requests;   /* the window goes on past duration_s until this many were sent
                            (0: none), at most 4 x duration_s */
    double warmup_s;     /* before the steady-state check (< 0: 0; 0: 10% of duration, >= 1 s) */
    double window_s;     /* steady-state windows (0: 2 s) */
    int max_windows;     /* windows tried before measuring anyway (0: 10) */
    dg_slo_bound bounds[DG_SLO_MAX_BOUNDS];
    int nbounds;
    double percentile;          /* the SLO's percentile, e.g. 99 (0: 99) */
    double confidence;          /* LoadGen's confidence (0: 0.99) */
    const char *const *prompts; /* NULL-terminated (NULL: a built-in prompt) */
    int max_tokens;             /* per request (0: 64) */
    double request_timeout_s;   /* per request (0: 60) */
    const char *label;          /* free text kept in the record, or NULL */
    const char *metrics_url;    /* the engine's Prometheus endpoint, scraped before, once a
                                   second during and after each level's window (NULL: none) */
    const char *thresholds;     /* rule thresholds "NAME=VALUE,..." (docs/rules.md), or NULL */
    bool no_env;                /* skip the environment proof */
    /* --while -- CMD: a training command run alone until its probe saw
     * while_steps steps, then beside the server while the signed level (else
     * the first) is measured again (NULL-terminated; NULL: none). Its output
     * goes to stderr. */
    const char *const *while_argv;
    int while_steps;              /* timed steps alone (0: 20) */
    double while_seconds;         /* the most either run waits for steps (0: 300 s) */
    const char *while_probe_path; /* the devgate_probe package's folder (zero-code probe; NULL: the
                                     program's own probe calls only) */
    /* Where the caller's signal handler stores a signal number (may be NULL):
     * set, the run stops, drains and returns DG_ERR_INTERRUPTED with the record. */
    const volatile sig_atomic_t *cancel;
} dg_slo_opts;

/* Whether this build can drive endpoints (libcurl was found at build time). */
bool dg_slo_available(void);

/* Measures the SLO: per level a warm-up, the steady-state check (three
 * windows whose throughput and median E2E agree within 10%), then the
 * measured window under the machine-wide measurement lock with contention
 * sampled; per request TTFT, inter-token gaps, TPOT and E2E from monotonic
 * timestamps taken in libcurl's write callbacks, token counts as the server
 * reports them; each bound judged by LoadGen's binomial rule. *json gets the
 * record of kind "slo" (docs/schema/slo.md) whenever anything was measured,
 * its "final_gate" the signable statement. DG_OK: every level was measured
 * (pass, fail or inconclusive is in the record); DG_ERR_USAGE bad options;
 * DG_ERR_UNAVAILABLE no libcurl, or the endpoint never answered; DG_ERR_IO
 * the endpoint stopped answering part way (the record is kept, with the
 * error); DG_ERR_INTERRUPTED cancel was set (the record is kept). */
dg_status dg_slo_run(dg_ctx *ctx, const dg_slo_opts *opts, char **json);

/* The fixture server (devgate slo --target fixture; the hidden verb
 * __slo_fixture): devgate's fixture model on a backend, served in OpenAI's
 * streaming shape on listen_fd, every streamed token one forward pass. */
typedef struct dg_slo_fixture_opts {
    const char *backend; /* NULL: cpu */
    const char *model;   /* a preset or layer string; NULL: mlp (also the served model's name) */
    int batch;           /* samples in each forward pass (0: 1) */
    int device, threads;
    uint64_t seed; /* weights and inputs */
    int listen_fd; /* a listening TCP socket (borrowed) */
    int ready_fd;  /* gets one JSON line, {"ready": true, backend, device, model, ...} or
                      {"ready": false, "error": ...}, and is closed (-1: none) */
    /* Called after each answered request with the count so far (may be NULL). */
    void (*on_answered)(void *user, long answered);
    void *user;
    const volatile sig_atomic_t *cancel; /* set: the server stops (DG_ERR_INTERRUPTED) */
} dg_slo_fixture_opts;

/* Serves until *cancel is set: POST /v1/completions and /v1/chat/completions
 * (streamed as server-sent events with usage, or whole), GET /v1/models,
 * /health and /metrics. The status of the model's opening (its message on
 * ctx, also on ready_fd), DG_ERR_INTERRUPTED when stopped, or the first
 * forward pass's failure. */
dg_status dg_slo_fixture_serve(dg_ctx *ctx, const dg_slo_fixture_opts *o);

/* LoadGen's rule for one bound: with over of n requests over the bound, the
 * percentile p (e.g. 0.99) holds with confidence c when P(X <= over) <= 1 - c
 * for X ~ Binomial(n, 1 - p); it is missed when P(X >= over) <= 1 - c;
 * otherwise inconclusive, and *needed (may be NULL) gets the smallest n at
 * which as many overs would pass (0 when passed or missed). */
typedef enum dg_slo_judgement { DG_SLO_PASS, DG_SLO_FAIL, DG_SLO_INCONCLUSIVE } dg_slo_judgement;
dg_slo_judgement dg_slo_binomial(long n, long over, double p, double c, long *needed);
/* P(X <= k) for X ~ Binomial(n, q), accurate in both tails; NAN for bad arguments. */
double dg_binomial_cdf(long k, long n, double q);

#ifdef __cplusplus
}
#endif
#endif
