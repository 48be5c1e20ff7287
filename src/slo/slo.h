/* The SLO verb's parts (docs/slo.md): the stream parsers (stream.c), the load
 * generator over libcurl's multi interface (loadgen.c), the statistics and
 * the verdict of one level (verdict.c), the level's phases and the ladder
 * (slo_run.c), the Prometheus text parser (prom.c), the fixture server's
 * request parser (fixture_http.c). */
#ifndef DG_SLO_H
#define DG_SLO_H

#include "core/core.h"
#include "core/json.h"
#include "devgate_slo.h"

/* ---- the response streams (stream.c) ---------------------------------------------
 * OpenAI server-sent events ("data: {json}" lines, an event ending at a blank
 * line, "data: [DONE]" at the end; a chunk's text in choices[0].text or
 * choices[0].delta.content, the counts in "usage") and Ollama NDJSON (one
 * object a line: "response" or message.content, "done": true with eval_count
 * and eval_duration at the end). Fed in pieces as they arrive; pure. */

#define SLO_LINE_MAX (1u << 20) /* a longer line is an error */

typedef struct slo_stream {
    dg_slo_api api;
    char *part; /* the partial line */
    size_t plen, pcap;
    char *data; /* SSE: the event's data so far */
    size_t dlen, dcap;
    bool in_data;       /* SSE: data lines seen since the last blank line */
    bool skipping;      /* dropping the rest of an overlong line */
    long chunks;        /* non-empty content pieces */
    bool done;          /* [DONE] or "done": true */
    long usage_tokens;  /* completion_tokens or eval_count; -1 not reported */
    long prompt_tokens; /* prompt_tokens or prompt_eval_count; -1 */
    double eval_s;      /* Ollama's eval_duration in s; NAN */
    long malformed;     /* lines that were not the JSON expected */
    bool overlong;      /* a line passed SLO_LINE_MAX */
    bool nomem;
    char error[160]; /* an error the server put in the stream ("" none), cleaned */
    char model[96];  /* the model a chunk named ("" none), cleaned */
} slo_stream;

void dg_slo_stream_init(slo_stream *s, dg_slo_api api);
/* Feeds n bytes; returns how many new non-empty content chunks they ended. */
long dg_slo_stream_feed(slo_stream *s, const char *data, size_t n);
/* Ends the stream: a last line without its newline is parsed. Returns new chunks. */
long dg_slo_stream_finish(slo_stream *s);
/* Frees the line buffer (the counts stay); accepts a zeroed struct. */
void dg_slo_stream_free(slo_stream *s);

/* ---- one request (loadgen.c) ------------------------------------------------------ */

typedef enum slo_outcome {
    SLO_INFLIGHT = 0,
    SLO_OK,      /* HTTP 200, stream ended */
    SLO_FAILED,  /* HTTP error, transport error, error in the stream, no end */
    SLO_TIMEOUT, /* past the request timeout */
    SLO_ABORTED, /* still in flight when the run stopped (interrupt, endpoint gone) */
} slo_outcome;

/* Phases a request is tagged with when it is sent. */
enum { SLO_PH_WARMUP = 0, SLO_PH_STEADY = 1, SLO_PH_MEASURED = 2, SLO_PH_DRAIN = 3 };

/* Times in s since the generator's start (monotonic clock); NAN when none. */
typedef struct slo_req {
    double sched, sent; /* open loop: the arrival's time, and when it was sent */
    double first, last; /* first and last non-empty chunk */
    double end;         /* the last byte (or the failure) */
    double eval_s;      /* the server's own eval time (Ollama), NAN */
    long tokens;        /* as the server reported (usage / eval_count), else the chunk count */
    long chunks;
    bool tokens_reported;
    int http;        /* status, 0 none */
    int curl_code;   /* CURLcode, 0 ok */
    uint8_t outcome; /* slo_outcome */
    uint8_t phase;
    uint32_t itl_first, itl_n; /* its gaps in the generator's itl store */
    char error[96];            /* why it failed, cleaned ("" none) */
} slo_req;

/* The latencies of a finished request in s (NAN when they do not apply):
 * ttft = first - start, e2e = end - start, tpot = (e2e - ttft) / (tokens - 1)
 * where start is sched in the open loop (the wait for a free stream counts),
 * sent in the closed loop. */
double dg_slo_req_ttft(const slo_req *r, bool open_loop);
double dg_slo_req_e2e(const slo_req *r, bool open_loop);
double dg_slo_req_tpot(const slo_req *r, bool open_loop);

/* ---- the generator (loadgen.c; stubbed without libcurl) ---------------------------- */

typedef struct slo_gen slo_gen;

typedef struct slo_target {
    char url[1024];  /* the request URL */
    char base[1024]; /* scheme://host:port (model discovery) */
    dg_slo_api api;
    bool chat; /* .../chat/completions or /api/chat: messages, not a prompt */
    const char *model;
    int max_tokens;
    double timeout_s;
    const char *const *prompts; /* NULL-terminated, at least one */
} slo_target;

/* Parses opts' target and api into t (URL completed with the API's path when
 * it has none). DG_ERR_USAGE with a message. */
dg_status dg_slo_target_init(dg_ctx *ctx, const dg_slo_opts *o, slo_target *t);

/* What the driver asks of the controller at every turn of its loop. */
typedef enum slo_ctl_answer { SLO_GO_ON, SLO_STOP_SENDING } slo_ctl_answer;
typedef struct slo_ctl {
    /* Called at least every 50 ms and after completions; may change
     * g's phase tag (dg_slo_gen_set_phase). */
    slo_ctl_answer (*tick)(void *user, slo_gen *g, double now);
    void *user;
} slo_ctl;

typedef struct slo_load {
    int concurrency;   /* closed loop; 0 with rate > 0 */
    double rate;       /* open loop requests/s */
    double burstiness; /* gamma shape (1: Poisson) */
    int max_inflight;  /* open loop */
    uint64_t seed;
} slo_load;

/* A generator for target t (borrowed; lives as long as g). NULL when out of
 * memory or libcurl cannot start, the reason on ctx. */
slo_gen *dg_slo_gen_new(dg_ctx *ctx, const slo_target *t);
void dg_slo_gen_free(slo_gen *g);
/* Drives load until the controller stops sending and the last request ends.
 * DG_OK; DG_ERR_INTERRUPTED when *cancel was set; DG_ERR_IO when the endpoint
 * stopped answering after it had answered (a run of transport failures),
 * DG_ERR_UNAVAILABLE when it never answered; in flight requests are then
 * aborted. The message on ctx. */
dg_status dg_slo_gen_drive(slo_gen *g, const slo_load *load, const slo_ctl *ctl,
                           const volatile sig_atomic_t *cancel);
void dg_slo_gen_set_phase(slo_gen *g, int phase);
/* The requests so far (sent order), the inter-chunk gaps (s) and how many were dropped past the
 * cap. */
const slo_req *dg_slo_gen_reqs(const slo_gen *g, size_t *n);
const float *dg_slo_gen_itl(const slo_gen *g, size_t *n, size_t *dropped);
/* Requests in flight now. */
int dg_slo_gen_inflight(const slo_gen *g);
/* GET base + path with a short timeout: the body (dg_malloc'd, NUL-ended) or NULL. */
char *dg_slo_http_get(const slo_target *t, const char *path, double timeout_s, long *http);

/* ---- statistics and the verdict (verdict.c) --------------------------------------- */

/* The record section of one level's measured requests (docs/schema/slo.md
 * LEVEL: requests, throughput, tokens, latency, verdict, samples), judged
 * against the bounds. open_loop: latencies from the scheduled arrival. */
typedef struct slo_judge_in {
    const slo_req *reqs;
    size_t nreqs;
    const float *itl;
    size_t nitl;
    double wall_s; /* the measured window, first send to last end */
    const dg_slo_opts *o;
    bool open_loop;
} slo_judge_in;
/* Adds requests, throughput, tokens, latency, verdict and samples to lvl;
 * *state gets the level's judgement. False when out of memory. */
bool dg_slo_judge_level(const slo_judge_in *in, cJSON *lvl, dg_slo_judgement *state, long *n,
                        long *over);
/* "inconclusive: n = 312, at least 459 needed at p99 with none over" and the like. */
void dg_slo_judgement_text(char *buf, size_t len, dg_slo_judgement j, long n, long over, double p,
                           double c, long needed);
/* "p99" for 0.99, "p99.9" for 0.999. */
void dg_slo_pct_name(char *buf, size_t len, double p);

/* ---- one level (level.c) ------------------------------------------------------------ */

typedef struct slo_level_res {
    int concurrency;         /* 0: the open loop */
    double meas_t0, meas_t1; /* the measured window: its start and the last end (dg_now) */
    dg_slo_judgement state;
    bool steady;
    bool error; /* the level ended early (endpoint gone, interrupted) */
    long n, over;
    char why[256]; /* the verdict in words */
} slo_level_res;

/* One level: warm-up, the steady-state check, the measured window (the
 * measurement lock held and contention sampled), drain, judgement. *lvl
 * gets its LEVEL (docs/schema/slo.md) when requests were sent and the
 * endpoint answered at least once; the status is dg_slo_gen_drive's. */
dg_status dg_slo_level_run(dg_ctx *ctx, const dg_slo_opts *o, const slo_target *t, int concurrency,
                           bool beside, cJSON **lvl, slo_level_res *r);

/* ---- training beside serving (beside.c) --------------------------------------------- */

/* Starts o->while_argv in a thread of its own, supervised; NULL after a
 * message on ctx. */
typedef struct slo_beside slo_beside;
slo_beside *dg_slo_beside_start(dg_ctx *ctx, const dg_slo_opts *o);
/* Waits (at most max_s, or until *cancel) until the command has taken steps
 * optimizer steps (its probe's count); false when it did not (it ended, never
 * stepped that far, or the wait ran out). */
bool dg_slo_beside_wait(slo_beside *b, long steps, double max_s,
                        const volatile sig_atomic_t *cancel);
/* Stops the command if it still runs, waits for it and gives its SIDE; the
 * times it ran (dg_now) into *t_start, *t_end. Frees b. */
cJSON *dg_slo_beside_stop(slo_beside *b, double *t_start, double *t_end);

/* ---- the fixture as the target (fixture.c) ---------------------------------------------- */

typedef struct slo_fixture slo_fixture;
/* Starts `devgate __slo_fixture` (o's model, fixture_backend, fixture_batch,
 * seed) on a loopback ephemeral port and waits until it says it is ready;
 * its base URL ("http://127.0.0.1:PORT") into base. *out owned by the
 * caller (dg_slo_fixture_stop). DG_ERR_UNAVAILABLE when it cannot serve (its
 * reason in the message), DG_ERR_INTERRUPTED, DG_ERR_IO. */
dg_status dg_slo_fixture_start(dg_ctx *ctx, const dg_slo_opts *o, slo_fixture **out, char *base,
                               size_t len);
/* Whether the child has ended; how ("killed by SIGKILL", "exited with status 1") into how. */
bool dg_slo_fixture_ended(const slo_fixture *f, char *how, size_t len);
/* Stops the child if it runs (TERM, KILL after 10 s), reaps it, frees f and
 * gives the record's "fixture" (what it served, where, how it ended); NULL for NULL. */
cJSON *dg_slo_fixture_stop(slo_fixture *f);

/* ---- the fixture server's requests (fixture_http.c) ------------------------------------ */

/* What the front of a connection's bytes holds. */
typedef enum slo_http_state {
    SLO_HTTP_MORE,    /* not a whole request yet: read on */
    SLO_HTTP_REQUEST, /* a whole request */
    SLO_HTTP_REFUSED, /* refused: answer status with why, then close */
} slo_http_state;

typedef struct slo_http_req {
    slo_http_state state;
    char method[8];        /* the request line's first word ("" when it is longer) */
    char path[256];        /* its second, the query cut off ("" when it is longer) */
    size_t body, body_len; /* the body's offset and its Content-Length */
    size_t used;           /* the bytes the request takes (all of them when refused) */
    bool keep_alive;       /* HTTP/1.1 and no "Connection: close" */
    bool expect_continue;  /* MORE: the head alone is here and asks for "100 Continue" */
    int status;            /* REFUSED: 400 or 413 */
    const char *why;       /* REFUSED: the reason (static) */
} slo_http_req;

/* Reads the request at the front of in[0..len) into *r: a head of at most
 * max bytes ending in a blank line, a body of Content-Length bytes (at most
 * max; chunked bodies refused). Pure: no I/O, no allocation, nothing read
 * past in[len - 1], in need not end in a NUL. Returns r->state. */
slo_http_state dg_slo_http_parse(const char *in, size_t len, size_t max, slo_http_req *r);

/* ---- the engine's own view (prom.c) ------------------------------------------------- */

/* Calls fn for every sample line of the Prometheus text exposition format
 * (name, labels text without the braces, value); comments and blank lines
 * are skipped, malformed lines counted. Returns the samples seen. Pure. */
typedef void (*slo_prom_fn)(void *user, const char *name, const char *labels, double value);
long dg_slo_prom_parse(const char *text, size_t len, slo_prom_fn fn, void *user, long *malformed);

/* The roles an engine's metrics play (llama.cpp, vLLM, TGI, SGLang names). */
enum {
    SLO_ENGINE_TOKENS,   /* generated tokens, a counter */
    SLO_ENGINE_WAITING,  /* requests waiting (the engine's queue) */
    SLO_ENGINE_RUNNING,  /* requests being generated */
    SLO_ENGINE_KV_CACHE, /* KV-cache use, a fraction */
    SLO_ENGINE_ROLES
};
/* One scrape read by role. */
typedef struct slo_engine_point {
    double t;                           /* when it was taken (the caller's clock) */
    double v[SLO_ENGINE_ROLES];         /* NAN: not exported */
    const char *name[SLO_ENGINE_ROLES]; /* the metric that played the role (static) */
    long samples, malformed;
} slo_engine_point;
/* Reads a scrape's text into p. Pure. */
void dg_slo_engine_read(const char *text, size_t len, double t, slo_engine_point *p);
/* "tokens", "waiting", "running", "kv_cache". */
const char *dg_slo_engine_role_name(int role);

/* A GET of url on g's multi handle, beside the load (one at a time): when it
 * ends, fn gets its body (NULL when it failed), the HTTP status and the time
 * it was sent (the generator's clock). False when one is in flight already
 * or libcurl refused. */
typedef void (*slo_scrape_fn)(void *user, const char *body, size_t len, long http, double sent);
bool dg_slo_gen_scrape(slo_gen *g, const char *url, slo_scrape_fn fn, void *user);
/* A blocking GET of the whole url with a short timeout (before and after a
 * level): the body (dg_malloc'd, NUL-ended) or NULL. */
char *dg_slo_http_get_url(const char *url, double timeout_s, long *http);
#endif
