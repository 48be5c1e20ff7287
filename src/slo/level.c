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

typedef struct level {
    const dg_slo_opts *o;
    bool open_loop;
    int phase;
    double t_first, warm_end, win_start, meas_start, meas_stop;
    size_t warm_sent, meas_first;
    double tp[MAXW], lat[MAXW];
    int nwin;
    bool steady;
    cJSON *windows;
    dg_window *cont;
} level;

/* Whether the last three windows agree: each throughput and median E2E
 * within the tolerance of the three's mean. */
static bool agree(const level *L)
{
    if (L->nwin < 3)
        return false;
    const double *v[2] = {L->tp + L->nwin - 3, L->lat + L->nwin - 3};
    for (int s = 0; s < 2; s++) {
        double mean = (v[s][0] + v[s][1] + v[s][2]) / 3;
        if (!(isfinite(mean) && mean > 0))
            return false;
        for (int i = 0; i < 3; i++)
            if (!(fabs(v[s][i] - mean) <= SLO_STEADY_TOLERANCE * mean))
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
    cJSON_AddNumberToObject(s, "tolerance", SLO_STEADY_TOLERANCE);
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
                 L->o->window_s, SLO_STEADY_TOLERANCE * 100);
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

dg_status dg_slo_level_run(dg_ctx *ctx, const dg_slo_opts *o, const slo_target *t, int concurrency,
                           cJSON **lvl, slo_level_res *r)
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
    size_t n, nitl, dropped;
    const slo_req *reqs = dg_slo_gen_reqs(g, &n);
    const float *itl = dg_slo_gen_itl(g, &nitl, &dropped);
    double last = NAN;
    for (size_t i = L.meas_first; L.phase >= SLO_PH_MEASURED && i < n; i++)
        if (reqs[i].phase == SLO_PH_MEASURED && !(reqs[i].end <= last))
            last = reqs[i].end;
    double wall = last - L.meas_start;
    if (st == DG_ERR_UNAVAILABLE || st == DG_ERR_NOMEM) {
        cJSON_Delete(cont);
        cJSON_Delete(L.windows);
        dg_slo_gen_free(g);
        return st;
    }
    cJSON *j = level_head(&L, concurrency, &lock, cont, wall);
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
