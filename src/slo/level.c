/* One level of the SLO (slo.h): the generator runs without a pause while the
 * controller moves the phase tag from warm-up to the steady-state windows to
 * the measured window, then stops sending and lets the last requests end. */
#include "measure/measure.h"
#include "slo/slo.h"

#include <math.h>
#include <string.h>

#define SLO_STEADY_TOLERANCE 0.10 /* three windows within 10% of their mean */
#define SLO_STEADY_MIN_REQUESTS 3 /* a window with fewer completions agrees with nothing */
#define MAXW 64
#define SLO_SCRAPE_S 1.0    /* the engine's metrics, once a second in the window */
#define SLO_SCRAPE_MAX 4096 /* scrapes kept per level */

typedef struct level {
    const dg_slo_opts *o;
    bool open_loop;
    int phase;
    double t_first, warm_end, win_start, meas_start, meas_stop;
    double abs0; /* dg_now() at the measured window's start */
    size_t warm_sent, meas_first;
    double tp[MAXW], lat[MAXW], cnt[MAXW];
    int nwin;
    bool steady;
    cJSON *windows;
    dg_window *cont;
    /* --metrics: the engine's scrapes during the measured window */
    slo_engine_point *pts;
    int npts;
    long scrape_failed;
    double next_scrape;
} level;

static void on_scrape(void *user, const char *body, size_t len, long http, double sent)
{
    level *L = user;
    if (!body || http != 200)
        L->scrape_failed++;
    else if (L->pts && L->npts < SLO_SCRAPE_MAX)
        dg_slo_engine_read(body, len, dg_now(), &L->pts[L->npts++]); /* the clock of "after" */
    (void)sent;
}

/* The tolerance the last three windows are held to: 10%, or the counting
 * noise of a window with few requests (two standard errors of a count of n,
 * 2 / sqrt(n), for the fewest the three held), whichever is larger: windows
 * of 20 requests cannot agree within 10% even when the load is steady. */
static double tolerance(const level *L)
{
    double n = fmin(L->cnt[L->nwin - 1], fmin(L->cnt[L->nwin - 2], L->cnt[L->nwin - 3]));
    return n > 0 ? fmax(SLO_STEADY_TOLERANCE, 2 / sqrt(n)) : SLO_STEADY_TOLERANCE;
}

/* Whether the last three windows agree: each throughput and median E2E
 * within the tolerance of the three's mean. */
static bool agree(const level *L)
{
    if (L->nwin < 3)
        return false;
    const double *v[2] = {L->tp + L->nwin - 3, L->lat + L->nwin - 3};
    double tol = tolerance(L);
    for (int s = 0; s < 2; s++) {
        double mean = (v[s][0] + v[s][1] + v[s][2]) / 3;
        if (!(isfinite(mean) && mean > 0))
            return false;
        for (int i = 0; i < 3; i++)
            if (!(fabs(v[s][i] - mean) <= tol * mean))
                return false;
    }
    return true;
}

/* Closes the window [win_start, now): requests that ended ok in it. */
static void close_window(level *L, slo_gen *g, double now)
{
    size_t n;
    const slo_req *r = dg_slo_gen_reqs(g, &n);
    double *e2e = dg_malloc((n ? n : 1) * sizeof *e2e);
    size_t k = 0;
    for (size_t i = 0; e2e && i < n; i++)
        if (r[i].outcome == SLO_OK && r[i].end >= L->win_start && r[i].end < now)
            e2e[k++] = 1e3 * dg_slo_req_e2e(&r[i], L->open_loop);
    double span = now - L->win_start;
    double tp = span > 0 ? (double)k / span : NAN;
    double med = k >= SLO_STEADY_MIN_REQUESTS ? dg_quantile(e2e, k, 0.5) : NAN;
    dg_free(e2e);
    if (L->nwin < MAXW) {
        L->tp[L->nwin] = k >= SLO_STEADY_MIN_REQUESTS ? tp : NAN;
        L->cnt[L->nwin] = (double)k;
        L->lat[L->nwin] = med;
        L->nwin++;
    }
    cJSON *w = cJSON_CreateObject();
    cJSON_AddItemToObject(w, "start", dg_json_metric(L->win_start, true, "s"));
    cJSON_AddNumberToObject(w, "requests", (double)k);
    cJSON_AddItemToObject(w, "throughput", dg_json_metric(tp, isfinite(tp), "requests/s"));
    cJSON_AddItemToObject(w, "e2e_p50", dg_json_metric(med, isfinite(med), "ms"));
    cJSON_AddItemToArray(L->windows, w);
    L->steady = agree(L);
}

static slo_ctl_answer tick(void *user, slo_gen *g, double now)
{
    level *L = user;
    const dg_slo_opts *o = L->o;
    size_t n;
    dg_slo_gen_reqs(g, &n);
    if (isnan(L->t_first)) {
        L->t_first = now;
        L->warm_end = now + o->warmup_s;
    }
    if (L->phase == SLO_PH_WARMUP && now >= L->warm_end) {
        L->phase = SLO_PH_STEADY;
        L->warm_sent = n;
        L->win_start = now;
    } else if (L->phase == SLO_PH_STEADY && now >= L->win_start + o->window_s) {
        close_window(L, g, now);
        if (L->steady || L->nwin >= o->max_windows) {
            L->phase = SLO_PH_MEASURED;
            L->meas_start = now;
            L->abs0 = dg_now();
            L->meas_first = n;
            L->cont = dg_window_begin();
        } else {
            L->win_start = now;
        }
    } else if (L->phase == SLO_PH_MEASURED && now - L->meas_start >= o->duration_s) {
        long sent = (long)(n - L->meas_first);
        if (o->min_requests <= 0 || sent >= o->min_requests ||
            now - L->meas_start >= 4 * o->duration_s) {
            L->phase = SLO_PH_DRAIN;
            L->meas_stop = now;
        }
    }
    if (o->metrics_url && L->phase == SLO_PH_MEASURED && now >= L->next_scrape &&
        dg_slo_gen_scrape(g, o->metrics_url, on_scrape, L))
        L->next_scrape = now + SLO_SCRAPE_S;
    dg_slo_gen_set_phase(g, L->phase);
    return L->phase == SLO_PH_DRAIN ? SLO_STOP_SENDING : SLO_GO_ON;
}

/* The level's head: what it ran and how its phases went. */
static cJSON *level_head(level *L, int concurrency, const dg_mlock *lock, cJSON *cont, double wall)
{
    const dg_slo_opts *o = L->o;
    cJSON *lvl = cJSON_CreateObject();
    if (concurrency > 0)
        cJSON_AddNumberToObject(lvl, "concurrency", concurrency);
    else
        cJSON_AddNullToObject(lvl, "concurrency");
    cJSON_AddItemToObject(lvl, "rate", dg_json_metric(o->rate, o->rate > 0, "requests/s"));
    cJSON *w = cJSON_AddObjectToObject(lvl, "warmup");
    cJSON_AddItemToObject(w, "duration", dg_json_metric(o->warmup_s, true, "s"));
    cJSON_AddNumberToObject(w, "requests", (double)L->warm_sent);
    cJSON *s = cJSON_AddObjectToObject(lvl, "steady");
    cJSON_AddStringToObject(s, "state",
                            L->steady                     ? "steady"
                            : L->phase >= SLO_PH_MEASURED ? "unsteady"
                                                          : "not reached");
    cJSON_AddNumberToObject(s, "tolerance", L->nwin >= 3 ? tolerance(L) : SLO_STEADY_TOLERANCE);
    cJSON_AddItemToObject(s, "windows", L->windows);
    L->windows = NULL;
    cJSON *m = cJSON_AddObjectToObject(lvl, "window");
    bool started = L->phase >= SLO_PH_MEASURED;
    cJSON_AddItemToObject(m, "start", dg_json_metric(L->meas_start, started, "s"));
    cJSON_AddItemToObject(m, "wall", dg_json_metric(wall, isfinite(wall), "s"));
    cJSON_AddItemToObject(m, "lock", dg_measure_lock_json(lock));
    cJSON_AddItemToObject(m, "contention", cont ? cont : cJSON_CreateNull());
    return lvl;
}

/* The level's verdict in words, from its judged record. */
static void why_of(slo_level_res *r, const cJSON *lvl, const level *L)
{
    /* A level that passed unsteady signs nothing: that is its reason. */
    if (!L->steady && r->state == DG_SLO_PASS) {
        snprintf(r->why, sizeof r->why, "%d windows of %g s never agreed within %.0f%%", L->nwin,
                 L->o->window_s, (L->nwin >= 3 ? tolerance(L) : SLO_STEADY_TOLERANCE) * 100);
        return;
    }
    static const char *const states[] = {"pass", "fail", "inconclusive"};
    const cJSON *b;
    cJSON_ArrayForEach(b, dg_jpath(lvl, "verdict.bounds"))
    {
        const char *st = dg_jstr(b, "state"), *text = dg_jstr(b, "text");
        if (st && text && strcmp(st, states[r->state]) == 0) {
            snprintf(r->why, sizeof r->why, "%s: %s", dg_jstr(b, "metric"), text);
            return;
        }
    }
}

/* One blocking scrape (before and after a level); false when it failed. */
static bool scrape_now(const char *url, slo_engine_point *p)
{
    long http = 0;
    char *body = dg_slo_http_get_url(url, 5, &http);
    bool ok = body && http == 200;
    if (ok)
        dg_slo_engine_read(body, strlen(body), dg_now(), p);
    dg_free(body);
    return ok;
}

static cJSON *point_json(const slo_engine_point *p, bool ok)
{
    if (!ok)
        return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    static const char *const units[SLO_ENGINE_ROLES] = {"tokens", "requests", "requests",
                                                        "fraction"};
    for (int r = 0; r < SLO_ENGINE_ROLES; r++)
        cJSON_AddItemToObject(o, dg_slo_engine_role_name(r), dg_json_metric_of(p->v[r], units[r]));
    return o;
}

/* ENGINE (docs/schema/slo.md): the engine's own view of the level: its token
 * rate from the counter over the window, its queue and batch on average and
 * at most, its KV cache at most, and its state before and after. */
static cJSON *engine_json(const level *L, const char *url, const slo_engine_point *before, bool bok,
                          const slo_engine_point *after, bool aok)
{
    cJSON *e = cJSON_CreateObject();
    char u[1024];
    snprintf(u, sizeof u, "%s", url);
    dg_redact_secrets(u);
    dg_json_add_str(e, "url", u);
    cJSON_AddNumberToObject(e, "scrapes", L->npts);
    cJSON_AddNumberToObject(e, "failed", (double)L->scrape_failed);
    cJSON *names = cJSON_AddObjectToObject(e, "names");
    double sum[SLO_ENGINE_ROLES] = {0}, max[SLO_ENGINE_ROLES], n[SLO_ENGINE_ROLES] = {0};
    const slo_engine_point *tok0 = NULL, *tok1 = NULL;
    for (int r = 0; r < SLO_ENGINE_ROLES; r++) {
        max[r] = NAN;
        const char *name = NULL;
        for (int i = 0; i < L->npts; i++) {
            const slo_engine_point *p = &L->pts[i];
            if (!isfinite(p->v[r]))
                continue;
            name = p->name[r];
            sum[r] += p->v[r];
            n[r]++;
            if (!(p->v[r] <= max[r]))
                max[r] = p->v[r];
            if (r == SLO_ENGINE_TOKENS) {
                tok0 = tok0 ? tok0 : p;
                tok1 = p;
            }
        }
        dg_json_add_str(names, dg_slo_engine_role_name(r), name);
    }
    double rate =
        tok0 && tok1 && tok1->t > tok0->t
            ? (tok1->v[SLO_ENGINE_TOKENS] - tok0->v[SLO_ENGINE_TOKENS]) / (tok1->t - tok0->t)
            : NAN;
    cJSON_AddItemToObject(e, "tokens_per_s", dg_json_metric_of(rate, "tokens/s"));
    double mean_w = n[SLO_ENGINE_WAITING] ? sum[SLO_ENGINE_WAITING] / n[SLO_ENGINE_WAITING] : NAN;
    double mean_r = n[SLO_ENGINE_RUNNING] ? sum[SLO_ENGINE_RUNNING] / n[SLO_ENGINE_RUNNING] : NAN;
    cJSON_AddItemToObject(e, "queue_waiting", dg_json_metric_of(mean_w, "requests"));
    cJSON_AddItemToObject(e, "queue_waiting_max",
                          dg_json_metric_of(max[SLO_ENGINE_WAITING], "requests"));
    cJSON_AddItemToObject(e, "running", dg_json_metric_of(mean_r, "requests"));
    cJSON_AddItemToObject(e, "kv_cache_max",
                          dg_json_metric_of(max[SLO_ENGINE_KV_CACHE], "fraction"));
    cJSON_AddItemToObject(e, "before", point_json(before, bok));
    cJSON_AddItemToObject(e, "after", point_json(after, aok));
    return e;
}

dg_status dg_slo_level_run(dg_ctx *ctx, const dg_slo_opts *o, const slo_target *t, int concurrency,
                           bool beside, cJSON **lvl, slo_level_res *r)
{
    *lvl = NULL;
    memset(r, 0, sizeof *r);
    r->concurrency = concurrency;
    r->state = DG_SLO_INCONCLUSIVE;
    level L = {.o = o,
               .open_loop = concurrency <= 0,
               .t_first = NAN,
               .meas_start = NAN,
               .meas_stop = NAN,
               .windows = cJSON_CreateArray()};
    slo_gen *g = L.windows ? dg_slo_gen_new(ctx, t) : NULL;
    if (!g) {
        cJSON_Delete(L.windows);
        return L.windows ? DG_ERR_UNAVAILABLE : DG_ERR_NOMEM;
    }
    slo_engine_point before, after;
    bool bok = false, aok = false;
    if (o->metrics_url) {
        L.pts = dg_calloc(SLO_SCRAPE_MAX, sizeof *L.pts);
        bok = scrape_now(o->metrics_url, &before);
    }
    dg_mlock lock;
    dg_measure_lock(&lock, DG_MEASURED_MAX_WAIT_S, o->cancel);
    slo_load load = {.concurrency = concurrency,
                     .rate = concurrency > 0 ? 0 : o->rate,
                     .burstiness = o->burstiness,
                     .max_inflight = o->max_inflight,
                     .seed = o->seed};
    slo_ctl ctl = {.tick = tick, .user = &L};
    dg_status st = dg_slo_gen_drive(g, &load, &ctl, o->cancel);
    cJSON *cont = L.cont ? dg_window_end(L.cont) : NULL;
    dg_window_free(L.cont);
    dg_measure_unlock(&lock);
    if (o->metrics_url)
        aok = scrape_now(o->metrics_url, &after);
    size_t n, nitl, dropped;
    const slo_req *reqs = dg_slo_gen_reqs(g, &n);
    const float *itl = dg_slo_gen_itl(g, &nitl, &dropped);
    double last = NAN;
    for (size_t i = L.meas_first; L.phase >= SLO_PH_MEASURED && i < n; i++)
        if (reqs[i].phase == SLO_PH_MEASURED && !(reqs[i].end <= last))
            last = reqs[i].end;
    double wall = last - L.meas_start;
    if (st == DG_ERR_UNAVAILABLE || st == DG_ERR_NOMEM) {
        dg_free(L.pts);
        cJSON_Delete(cont);
        cJSON_Delete(L.windows);
        dg_slo_gen_free(g);
        return st;
    }
    cJSON *j = level_head(&L, concurrency, &lock, cont, wall);
    cJSON_AddBoolToObject(j, "beside", beside);
    cJSON_AddItemToObject(j, "engine",
                          o->metrics_url
                              ? engine_json(&L, o->metrics_url, &before, bok, &after, aok)
                              : cJSON_CreateNull());
    dg_free(L.pts);
    r->meas_t0 = L.abs0;
    r->meas_t1 = L.abs0 + wall;
    slo_judge_in in = {.reqs = reqs,
                       .nreqs = n,
                       .itl = itl,
                       .nitl = nitl,
                       .wall_s = wall,
                       .o = o,
                       .open_loop = L.open_loop};
    if (!dg_slo_judge_level(&in, j, &r->state, &r->n, &r->over))
        st = dg_fail(ctx, DG_ERR_NOMEM, "slo: out of memory judging a level");
    cJSON_AddNumberToObject(j, "itl_dropped", (double)dropped);
    r->steady = L.steady;
    r->error = st != DG_OK || L.phase < SLO_PH_DRAIN;
    cJSON_AddStringToObject(j, "state",
                            st == DG_OK                ? "complete"
                            : st == DG_ERR_INTERRUPTED ? "interrupted"
                                                       : "failed");
    dg_json_add_str(j, "error", st == DG_OK ? NULL : dg_errmsg(ctx));
    if (st != DG_OK)
        snprintf(r->why, sizeof r->why, "%s", dg_errmsg(ctx));
    else
        why_of(r, j, &L);
    cJSON_Delete(L.windows);
    dg_slo_gen_free(g);
    *lvl = j;
    return st;
}
