/* The load generator (slo.h): many streams in one thread through libcurl's
 * multi interface. Closed loop (N streams, the next request when one ends)
 * or open loop (seeded gamma arrivals, Poisson at shape 1). Every timestamp
 * is the monotonic clock read in libcurl's write callback as the bytes
 * arrive. Built only with libcurl (DG_HAVE_CURL); without it the generator
 * cannot start and says why. */
#include "slo/slo.h"

#include <math.h>
#include <string.h>

#ifdef DG_HAVE_CURL
#include <curl/curl.h>
#include <pthread.h>

#define ITL_CAP ((size_t)1 << 22) /* gaps kept per generator (16 MiB) */

typedef struct xfer {
    slo_gen *g;
    CURL *easy;
    size_t req; /* its request in g->reqs */
    bool busy;
    slo_stream st;
    float *gaps; /* this request's inter-chunk gaps (s) until it ends */
    size_t ngaps, capgaps;
    char errbuf[CURL_ERROR_SIZE];
} xfer;

struct slo_gen {
    dg_ctx *ctx;
    const slo_target *t;
    CURLM *multi;
    struct curl_slist *headers;
    char **bodies;
    size_t nbodies;
    xfer *x;
    int nx, capx;
    slo_req *reqs;
    size_t nreqs, capreqs;
    float *itl;
    size_t nitl, capitl, itl_dropped;
    double t0;
    int phase, inflight;
    long answered;     /* requests the endpoint answered (any HTTP status) */
    int transport_run; /* transport failures in a row */
    int dead_after;    /* that many in a row: the endpoint is gone */
    char last_transport[160];
    dg_rng rng;
    uint32_t u[4];
    int nu;
    /* The engine's metrics, scraped beside the load (one GET at a time). */
    CURL *scrape;
    bool scraping;
    double scrape_sent;
    dg_capbuf scrape_body;
    slo_scrape_fn scrape_fn;
    void *scrape_user;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_code = CURLE_FAILED_INIT;
static void curl_init(void)
{
    curl_init_code = curl_global_init(CURL_GLOBAL_DEFAULT);
}

bool dg_slo_available(void)
{
    return true;
}

static double now_rel(const slo_gen *g)
{
    return dg_now() - g->t0;
}

/* ---- arrivals ---------------------------------------------------------------------- */

static double uniform01(slo_gen *g)
{
    if (g->nu == 0) {
        dg_rng_next4(&g->rng, g->u);
        g->nu = 4;
    }
    return ((double)g->u[--g->nu] + 0.5) / 4294967296.0;
}

static double normal01(slo_gen *g)
{
    return sqrt(-2 * log(uniform01(g))) * cos(2 * M_PI * uniform01(g));
}

/* Gamma(shape k, scale 1) by Marsaglia and Tsang (k < 1 through k + 1). */
static double gamma_draw(slo_gen *g, double k)
{
    if (k < 1)
        return gamma_draw(g, k + 1) * pow(uniform01(g), 1 / k);
    double d = k - 1.0 / 3, c = 1 / sqrt(9 * d);
    for (;;) {
        double x = normal01(g), v = 1 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = uniform01(g);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
            return d * v;
    }
}

/* The time to the next arrival: gamma with mean 1 / rate and shape b. */
static double interarrival(slo_gen *g, const slo_load *l)
{
    double b = l->burstiness > 0 ? l->burstiness : 1;
    return gamma_draw(g, b) / (l->rate * b);
}

/* ---- requests ---------------------------------------------------------------------- */

static void push_gap(slo_gen *g, xfer *x, double gap)
{
    if (x->ngaps == x->capgaps) {
        size_t cap = x->capgaps ? 2 * x->capgaps : 64;
        float *p = dg_realloc(x->gaps, cap * sizeof *p);
        if (!p) {
            g->itl_dropped++;
            return;
        }
        x->gaps = p;
        x->capgaps = cap;
    }
    x->gaps[x->ngaps++] = (float)gap;
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *user)
{
    xfer *x = user;
    size_t n = size * nmemb;
    double now = now_rel(x->g);
    slo_req *r = &x->g->reqs[x->req];
    long k = dg_slo_stream_feed(&x->st, p, n);
    r->end = now;
    for (long i = 0; i < k; i++) {
        if (isnan(r->first))
            r->first = now;
        else
            push_gap(x->g, x, now - r->last); /* chunks that came together: gap 0 */
        r->last = now;
    }
    return n;
}

static xfer *free_slot(slo_gen *g)
{
    for (int i = 0; i < g->nx; i++)
        if (!g->x[i].busy)
            return &g->x[i];
    if (g->nx == g->capx) {
        /* Slots move when the array grows: libcurl holds their addresses. */
        return NULL;
    }
    xfer *x = &g->x[g->nx];
    memset(x, 0, sizeof *x);
    x->g = g;
    x->easy = curl_easy_init();
    if (!x->easy)
        return NULL;
    const slo_target *t = g->t;
    long tmo = (long)(t->timeout_s * 1000);
    curl_easy_setopt(x->easy, CURLOPT_URL, t->url);
    curl_easy_setopt(x->easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, g->headers);
    curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, tmo);
    curl_easy_setopt(x->easy, CURLOPT_CONNECTTIMEOUT_MS, tmo < 10000 ? tmo : 10000L);
    curl_easy_setopt(x->easy, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(x->easy, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
    g->nx++;
    return x;
}

static bool new_req(slo_gen *g, size_t *idx)
{
    if (!dg_grow((void **)&g->reqs, &g->capreqs, g->nreqs + 1, sizeof *g->reqs))
        return false;
    *idx = g->nreqs++;
    return true;
}

/* Sends one request whose arrival was sched (NAN: closed loop). */
static dg_status issue(slo_gen *g, double sched)
{
    xfer *x = free_slot(g);
    size_t idx;
    if (!x || !new_req(g, &idx))
        return dg_fail(g->ctx, DG_ERR_NOMEM, "slo: out of memory for another request");
    slo_req *r = &g->reqs[idx];
    memset(r, 0, sizeof *r);
    r->sched = sched;
    r->first = r->last = r->end = r->eval_s = NAN;
    r->phase = (uint8_t)g->phase;
    r->outcome = SLO_INFLIGHT;
    x->req = idx;
    x->busy = true;
    x->ngaps = 0;
    x->errbuf[0] = 0;
    dg_slo_stream_init(&x->st, g->t->api);
    const char *body = g->bodies[idx % g->nbodies];
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    r->sent = now_rel(g);
    if (curl_multi_add_handle(g->multi, x->easy) != CURLM_OK) {
        x->busy = false;
        g->nreqs--;
        return dg_fail(g->ctx, DG_ERR_IO, "slo: libcurl refused another transfer");
    }
    g->inflight++;
    return DG_OK;
}

static bool transport_failure(CURLcode c)
{
    return c == CURLE_COULDNT_CONNECT || c == CURLE_COULDNT_RESOLVE_HOST || c == CURLE_RECV_ERROR ||
           c == CURLE_SEND_ERROR || c == CURLE_GOT_NOTHING || c == CURLE_PARTIAL_FILE ||
           c == CURLE_SSL_CONNECT_ERROR;
}

/* Ends x's request with its outcome (slot freed, gaps moved to the store). */
static void finish(slo_gen *g, xfer *x, CURLcode code, slo_outcome forced, const char *why)
{
    double now = now_rel(g);
    slo_req *r = &g->reqs[x->req];
    long k = dg_slo_stream_finish(&x->st);
    for (long i = 0; i < k; i++) {
        if (isnan(r->first))
            r->first = now;
        else
            push_gap(g, x, now - r->last);
        r->last = now;
        r->end = now;
    }
    if (isnan(r->end))
        r->end = now;
    long http = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &http);
    r->http = (int)http;
    r->curl_code = (int)code;
    r->chunks = x->st.chunks;
    r->tokens_reported = x->st.usage_tokens >= 0;
    r->tokens = r->tokens_reported ? x->st.usage_tokens : x->st.chunks;
    r->eval_s = x->st.eval_s;
    if (forced) {
        r->outcome = (uint8_t)forced;
        dg_copy_clean(r->error, sizeof r->error, why);
    } else if (code == CURLE_OPERATION_TIMEDOUT) {
        r->outcome = SLO_TIMEOUT;
        snprintf(r->error, sizeof r->error, "timeout after %g s", g->t->timeout_s);
    } else if (code != CURLE_OK) {
        r->outcome = SLO_FAILED;
        dg_copy_clean(r->error, sizeof r->error, curl_easy_strerror(code));
    } else if (http != 200) {
        r->outcome = SLO_FAILED;
        snprintf(r->error, sizeof r->error, "HTTP %ld", http);
    } else if (x->st.error[0]) {
        r->outcome = SLO_FAILED;
        snprintf(r->error, sizeof r->error, "server error: %s", x->st.error);
    } else if (x->st.overlong || x->st.nomem) {
        r->outcome = SLO_FAILED;
        snprintf(r->error, sizeof r->error, "a stream line over %u bytes", SLO_LINE_MAX);
    } else if (!x->st.done) {
        r->outcome = SLO_FAILED;
        snprintf(r->error, sizeof r->error, "the stream ended without its end marker");
    } else if (x->st.chunks == 0) {
        r->outcome = SLO_FAILED;
        snprintf(r->error, sizeof r->error, "no text was streamed");
    } else {
        r->outcome = SLO_OK;
    }
    if (!forced && transport_failure(code)) {
        g->transport_run++;
        char e[CURL_ERROR_SIZE];
        dg_copy_clean(e, sizeof e, x->errbuf[0] ? x->errbuf : curl_easy_strerror(code));
        snprintf(g->last_transport, sizeof g->last_transport, "%s", e);
    } else if (!forced && (code == CURLE_OK || http)) {
        g->transport_run = 0;
        g->answered++;
    }
    /* The request's gaps, contiguous in the store. */
    r->itl_first = (uint32_t)g->nitl;
    r->itl_n = 0;
    if (x->ngaps && g->nitl + x->ngaps <= ITL_CAP) {
        if (g->nitl + x->ngaps > g->capitl) {
            size_t cap = g->capitl ? g->capitl : 4096;
            while (cap < g->nitl + x->ngaps)
                cap *= 2;
            float *p = dg_realloc(g->itl, cap * sizeof *p);
            if (p) {
                g->itl = p;
                g->capitl = cap;
            }
        }
        if (g->nitl + x->ngaps <= g->capitl) {
            memcpy(g->itl + g->nitl, x->gaps, x->ngaps * sizeof *x->gaps);
            g->nitl += x->ngaps;
            r->itl_n = (uint32_t)x->ngaps;
        } else {
            g->itl_dropped += x->ngaps;
        }
    } else {
        g->itl_dropped += x->ngaps;
    }
    dg_slo_stream_free(&x->st);
    curl_multi_remove_handle(g->multi, x->easy);
    x->busy = false;
    g->inflight--;
}

/* The scrape ended: its body to the caller, the handle kept for the next. */
static void scrape_done(slo_gen *g, CURLcode code)
{
    long http = 0;
    curl_easy_getinfo(g->scrape, CURLINFO_RESPONSE_CODE, &http);
    curl_multi_remove_handle(g->multi, g->scrape);
    g->scraping = false;
    dg_capbuf *b = &g->scrape_body;
    bool ok = code == CURLE_OK && !b->nomem && !b->truncated;
    g->scrape_fn(g->scrape_user, ok ? (b->data ? b->data : "") : NULL, ok ? b->len : 0, http,
                 g->scrape_sent);
    b->len = 0;
    b->truncated = b->nomem = false;
}

static size_t on_get(char *p, size_t size, size_t nmemb, void *user)
{
    dg_capbuf *b = user;
    dg_capbuf_add(b, p, size * nmemb);
    return size * nmemb;
}

bool dg_slo_gen_scrape(slo_gen *g, const char *url, slo_scrape_fn fn, void *user)
{
    if (g->scraping)
        return false;
    if (!g->scrape) {
        g->scrape = curl_easy_init();
        if (!g->scrape)
            return false;
        g->scrape_body = (dg_capbuf){.cap = (size_t)4 << 20};
        curl_easy_setopt(g->scrape, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(g->scrape, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(g->scrape, CURLOPT_TIMEOUT_MS, 5000L);
        curl_easy_setopt(g->scrape, CURLOPT_WRITEFUNCTION, on_get);
        curl_easy_setopt(g->scrape, CURLOPT_WRITEDATA, &g->scrape_body);
    }
    curl_easy_setopt(g->scrape, CURLOPT_URL, url);
    g->scrape_fn = fn;
    g->scrape_user = user;
    g->scrape_sent = now_rel(g);
    if (curl_multi_add_handle(g->multi, g->scrape) != CURLM_OK)
        return false;
    g->scraping = true;
    return true;
}

static void reap(slo_gen *g)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(g->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        if (g->scrape && m->easy_handle == g->scrape) {
            scrape_done(g, m->data.result);
            continue;
        }
        xfer *x = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        if (x && x->busy)
            finish(g, x, m->data.result, SLO_INFLIGHT, NULL);
    }
}

static void abort_all(slo_gen *g, const char *why)
{
    for (int i = 0; i < g->nx; i++)
        if (g->x[i].busy)
            finish(g, &g->x[i], CURLE_OK, SLO_ABORTED, why);
}

/* The endpoint is gone: a run of transport failures longer than the streams. */
static dg_status gone(slo_gen *g)
{
    if (g->transport_run < g->dead_after)
        return DG_OK;
    abort_all(g, "the endpoint stopped answering");
    if (!g->answered)
        return dg_fail(g->ctx, DG_ERR_UNAVAILABLE, "cannot reach %s: %s", g->t->url,
                       g->last_transport);
    return dg_fail(g->ctx, DG_ERR_IO,
                   "the endpoint %s stopped answering after %ld answered requests (%d transport "
                   "failures in a row; last: %s)",
                   g->t->url, g->answered, g->transport_run, g->last_transport);
}

dg_status dg_slo_gen_drive(slo_gen *g, const slo_load *l, const slo_ctl *ctl,
                           const volatile sig_atomic_t *cancel)
{
    bool open = l->rate > 0, sending = true;
    int cap = open ? (l->max_inflight > 0 ? l->max_inflight : 1024) : l->concurrency;
    if (cap < 1)
        return dg_fail(g->ctx, DG_ERR_USAGE, "slo: no concurrency and no rate");
    if (cap > g->capx) {
        /* Slots never move once libcurl holds them: sized once here. */
        if (g->nx)
            return dg_fail(g->ctx, DG_ERR_USAGE, "slo: a generator drives one load");
        g->x = dg_calloc((size_t)cap, sizeof *g->x);
        if (!g->x)
            return dg_fail(g->ctx, DG_ERR_NOMEM, "slo: out of memory for %d streams", cap);
        g->capx = cap;
    }
    /* A closed loop's streams all fail at once when the endpoint goes; an
     * open loop's arrivals come one by one. */
    g->dead_after = open ? 8 : 8 + 2 * (cap < 64 ? cap : 64);
    dg_rng_init(&g->rng, l->seed, 0xa771);
    g->nu = 0;
    double next = open ? now_rel(g) + interarrival(g, l) : NAN;
    dg_status st = DG_OK;
    for (;;) {
        double now = now_rel(g);
        if (cancel && *cancel) {
            abort_all(g, "interrupted");
            return dg_fail(g->ctx, DG_ERR_INTERRUPTED, "slo: interrupted");
        }
        if (sending && ctl->tick(ctl->user, g, now) == SLO_STOP_SENDING)
            sending = false;
        while (sending && st == DG_OK && g->inflight < cap) {
            if (!open) {
                st = issue(g, NAN);
            } else if (next <= now) {
                st = issue(g, next);
                next += interarrival(g, l);
            } else {
                break;
            }
        }
        if (st != DG_OK) {
            abort_all(g, "the generator failed");
            return st;
        }
        if (!sending && g->inflight == 0)
            return DG_OK;
        int running = 0;
        curl_multi_perform(g->multi, &running);
        reap(g);
        if ((st = gone(g)) != DG_OK)
            return st;
        int wait_ms = 50;
        if (sending && open)
            wait_ms = (int)fmin(50, fmax(0, (next - now_rel(g)) * 1e3));
        if (sending && !open && g->inflight < cap)
            wait_ms = 0;
        curl_multi_poll(g->multi, NULL, 0, wait_ms, NULL);
    }
}

/* ---- set-up ------------------------------------------------------------------------ */

static char *body_for(const slo_target *t, const char *prompt)
{
    cJSON *b = cJSON_CreateObject();
    dg_json_add_str(b, "model", t->model);
    if (t->chat) {
        cJSON *msgs = cJSON_AddArrayToObject(b, "messages");
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        dg_json_add_str(m, "content", prompt);
        cJSON_AddItemToArray(msgs, m);
    } else {
        dg_json_add_str(b, "prompt", prompt);
    }
    cJSON_AddBoolToObject(b, "stream", true);
    if (t->api == DG_SLO_OLLAMA) {
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(b, "options"), "num_predict",
                                t->max_tokens);
    } else {
        cJSON_AddNumberToObject(b, "max_tokens", t->max_tokens);
        cJSON_AddBoolToObject(cJSON_AddObjectToObject(b, "stream_options"), "include_usage", true);
    }
    char *s = dg_json_print(b);
    cJSON_Delete(b);
    return s;
}

slo_gen *dg_slo_gen_new(dg_ctx *ctx, const slo_target *t)
{
    pthread_once(&curl_once, curl_init);
    if (curl_init_code != CURLE_OK) {
        dg_fail(ctx, DG_ERR_UNAVAILABLE, "libcurl did not start: %s",
                curl_easy_strerror(curl_init_code));
        return NULL;
    }
    slo_gen *g = dg_calloc(1, sizeof *g);
    if (!g) {
        dg_fail(ctx, DG_ERR_NOMEM, "slo: out of memory");
        return NULL;
    }
    g->ctx = ctx;
    g->t = t;
    g->multi = curl_multi_init();
    g->headers = curl_slist_append(NULL, "Content-Type: application/json");
    /* No "Expect: 100-continue" wait before a large prompt's body. */
    struct curl_slist *h = g->headers ? curl_slist_append(g->headers, "Expect:") : NULL;
    if (h)
        g->headers = h;
    size_t np = 0;
    while (t->prompts[np])
        np++;
    g->bodies = dg_calloc(np ? np : 1, sizeof *g->bodies);
    bool ok = g->multi && h && g->bodies;
    for (size_t i = 0; ok && i < np; i++)
        ok = (g->bodies[g->nbodies++] = body_for(t, t->prompts[i])) != NULL;
    if (!ok || !g->nbodies) {
        dg_slo_gen_free(g);
        dg_fail(ctx, DG_ERR_NOMEM, "slo: out of memory starting libcurl");
        return NULL;
    }
    /* Many streams to one host: no cap on connections to it. */
    curl_multi_setopt(g->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
    g->t0 = dg_now();
    return g;
}

void dg_slo_gen_free(slo_gen *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->nx; i++) {
        if (g->x[i].busy)
            curl_multi_remove_handle(g->multi, g->x[i].easy);
        curl_easy_cleanup(g->x[i].easy);
        dg_slo_stream_free(&g->x[i].st);
        dg_free(g->x[i].gaps);
    }
    dg_free(g->x);
    if (g->scrape) {
        if (g->scraping)
            curl_multi_remove_handle(g->multi, g->scrape);
        curl_easy_cleanup(g->scrape);
    }
    dg_free(g->scrape_body.data);
    if (g->multi)
        curl_multi_cleanup(g->multi);
    curl_slist_free_all(g->headers);
    for (size_t i = 0; i < g->nbodies; i++)
        dg_string_free(g->bodies[i]);
    dg_free(g->bodies);
    dg_free(g->reqs);
    dg_free(g->itl);
    dg_free(g);
}

void dg_slo_gen_set_phase(slo_gen *g, int phase)
{
    g->phase = phase;
}

const slo_req *dg_slo_gen_reqs(const slo_gen *g, size_t *n)
{
    *n = g->nreqs;
    return g->reqs;
}

const float *dg_slo_gen_itl(const slo_gen *g, size_t *n, size_t *dropped)
{
    *n = g->nitl;
    if (dropped)
        *dropped = g->itl_dropped;
    return g->itl;
}

int dg_slo_gen_inflight(const slo_gen *g)
{
    return g->inflight;
}

char *dg_slo_http_get_url(const char *url, double timeout_s, long *http)
{
    pthread_once(&curl_once, curl_init);
    *http = 0;
    if (curl_init_code != CURLE_OK)
        return NULL;
    CURL *e = curl_easy_init();
    if (!e)
        return NULL;
    dg_capbuf b = {.cap = (size_t)4 << 20};
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_get);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
    CURLcode c = curl_easy_perform(e);
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, http);
    curl_easy_cleanup(e);
    if (c != CURLE_OK || b.nomem || b.truncated) {
        dg_free(b.data);
        return NULL;
    }
    if (!b.data)
        b.data = dg_strdup("");
    return b.data;
}

char *dg_slo_http_get(const slo_target *t, const char *path, double timeout_s, long *http)
{
    char url[1200];
    snprintf(url, sizeof url, "%s%s", t->base, path);
    return dg_slo_http_get_url(url, timeout_s, http);
}

#else /* no libcurl */

struct slo_gen {
    int unused;
};

bool dg_slo_available(void)
{
    return false;
}

slo_gen *dg_slo_gen_new(dg_ctx *ctx, const slo_target *t)
{
    (void)t;
    dg_fail(ctx, DG_ERR_UNAVAILABLE,
            "slo: this devgate was built without libcurl (install libcurl4-openssl-dev and "
            "rebuild)");
    return NULL;
}

void dg_slo_gen_free(slo_gen *g)
{
    (void)g;
}

dg_status dg_slo_gen_drive(slo_gen *g, const slo_load *l, const slo_ctl *ctl,
                           const volatile sig_atomic_t *cancel)
{
    (void)g;
    (void)l;
    (void)ctl;
    (void)cancel;
    return DG_ERR_UNAVAILABLE;
}

void dg_slo_gen_set_phase(slo_gen *g, int phase)
{
    (void)g;
    (void)phase;
}

const slo_req *dg_slo_gen_reqs(const slo_gen *g, size_t *n)
{
    (void)g;
    *n = 0;
    return NULL;
}

const float *dg_slo_gen_itl(const slo_gen *g, size_t *n, size_t *dropped)
{
    (void)g;
    *n = 0;
    if (dropped)
        *dropped = 0;
    return NULL;
}

int dg_slo_gen_inflight(const slo_gen *g)
{
    (void)g;
    return 0;
}

char *dg_slo_http_get(const slo_target *t, const char *path, double timeout_s, long *http)
{
    (void)t;
    (void)path;
    (void)timeout_s;
    *http = 0;
    return NULL;
}

char *dg_slo_http_get_url(const char *url, double timeout_s, long *http)
{
    (void)url;
    (void)timeout_s;
    *http = 0;
    return NULL;
}

bool dg_slo_gen_scrape(slo_gen *g, const char *url, slo_scrape_fn fn, void *user)
{
    (void)g;
    (void)url;
    (void)fn;
    (void)user;
    return false;
}
#endif
