/* The slo record's typed view (record_slo.h): read once through the path
 * table's SLO rows, judged by the slo rules and drawn by the report. */
#include "core/record_slo.h"
#include "core/record.h"

#include <math.h>
#include <string.h>

/* The record's names of the latencies (the vocabulary lives below slo/). */
const char *dg_slo_metric_name(dg_slo_metric m)
{
    static const char *const names[DG_SLO_NMETRICS] = {"ttft", "tpot", "itl", "e2e"};
    return (unsigned)m < DG_SLO_NMETRICS ? names[m] : "?";
}

static double num(const cJSON *node, dg_rec_path_id id)
{
    dg_rec_metric m = dg_rec_num(node, id);
    return m.valid ? m.value : NAN;
}

/* The percentile p of a percentiles array (one latency's), with its interval. */
static void pct_of(const cJSON *arr, double p, double *v, double *lo, double *hi)
{
    *v = *lo = *hi = NAN;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        /* The element's rows read the same below any latency's element. */
        if (fabs(num(e, DG_P_SLO_LEVELS_LATENCY_TTFT_PERCENTILES_P) - p) > 1e-9)
            continue;
        *v = num(e, DG_P_SLO_LEVELS_LATENCY_TTFT_PERCENTILES_VALUE);
        *lo = num(e, DG_P_SLO_LEVELS_LATENCY_TTFT_PERCENTILES_LO);
        *hi = num(e, DG_P_SLO_LEVELS_LATENCY_TTFT_PERCENTILES_HI);
        return;
    }
}

static void level_of(dg_view_slo_level *l, const cJSON *j, double pslo)
{
    memset(l, 0, sizeof *l);
    l->raw = j;
    l->beside = dg_rec_bool(j, DG_P_SLO_LEVELS_BESIDE) == 1;
    l->concurrency = num(j, DG_P_SLO_LEVELS_CONCURRENCY);
    l->rate = num(j, DG_P_SLO_LEVELS_RATE);
    l->steady = dg_rec_str(j, DG_P_SLO_LEVELS_STEADY_STATE);
    l->verdict = dg_rec_str(j, DG_P_SLO_LEVELS_VERDICT_STATE);
    l->state = dg_rec_str(j, DG_P_SLO_LEVELS_STATE);
    l->n = num(j, DG_P_SLO_LEVELS_VERDICT_N);
    l->over = num(j, DG_P_SLO_LEVELS_VERDICT_OVER);
    l->sent = num(j, DG_P_SLO_LEVELS_REQUESTS_SENT);
    l->ok = num(j, DG_P_SLO_LEVELS_REQUESTS_OK);
    l->failed = num(j, DG_P_SLO_LEVELS_REQUESTS_FAILED);
    l->timeouts = num(j, DG_P_SLO_LEVELS_REQUESTS_TIMEOUTS);
    l->requests_per_s = num(j, DG_P_SLO_LEVELS_THROUGHPUT_REQUESTS_PER_S);
    l->goodput = num(j, DG_P_SLO_LEVELS_THROUGHPUT_GOODPUT);
    l->tokens_per_s = num(j, DG_P_SLO_LEVELS_THROUGHPUT_TOKENS_PER_S);
    l->others_share = num(j, DG_P_SLO_LEVELS_WINDOW_CONTENTION_OTHERS_SHARE);
    l->queue_waiting = num(j, DG_P_SLO_LEVELS_ENGINE_QUEUE_WAITING);
    l->engine_tokens_per_s = num(j, DG_P_SLO_LEVELS_ENGINE_TOKENS_PER_S);
    static const dg_rec_path_id pcts[DG_SLO_NMETRICS] = {
        DG_P_SLO_LEVELS_LATENCY_TTFT_PERCENTILES, DG_P_SLO_LEVELS_LATENCY_TPOT_PERCENTILES,
        DG_P_SLO_LEVELS_LATENCY_ITL_PERCENTILES, DG_P_SLO_LEVELS_LATENCY_E2E_PERCENTILES};
    static const dg_rec_path_id ns[DG_SLO_NMETRICS] = {
        DG_P_SLO_LEVELS_LATENCY_TTFT_N, DG_P_SLO_LEVELS_LATENCY_TPOT_N,
        DG_P_SLO_LEVELS_LATENCY_ITL_N, DG_P_SLO_LEVELS_LATENCY_E2E_N};
    for (int m = 0; m < DG_SLO_NMETRICS; m++) {
        const cJSON *arr = dg_rec_arr(j, pcts[m]);
        dg_view_slo_lat *x = &l->lat[m];
        double lo, hi;
        pct_of(arr, 50, &x->p50, &lo, &hi);
        pct_of(arr, pslo, &x->pslo, &x->lo, &x->hi);
        x->n = num(j, ns[m]);
    }
}

/* The levels of the record, split into those serving alone and those
 * measured beside the training command. */
static bool levels_of(dg_view_slo *v, const cJSON *arr)
{
    int k = cJSON_GetArraySize(arr);
    if (k <= 0)
        return true;
    v->levels = dg_calloc((size_t)k, sizeof *v->levels);
    v->beside = dg_calloc((size_t)k, sizeof *v->beside);
    if (!v->levels || !v->beside)
        return false;
    const cJSON *j;
    cJSON_ArrayForEach(j, arr)
    {
        dg_view_slo_level l;
        level_of(&l, j, v->percentile);
        if (l.beside)
            v->beside[v->nbeside++] = l;
        else
            v->levels[v->nlevels++] = l;
    }
    return true;
}

bool dg_view_slo_build(dg_view_slo *v, const cJSON *rec)
{
    memset(v, 0, sizeof *v);
    v->percentile = v->confidence = v->signed_concurrency = NAN;
    v->train_step_alone_ms = v->train_step_beside_ms = v->train_slowdown = NAN;
    v->signed_ = -1;
    if (!cJSON_IsObject(rec))
        return true;
    v->present = true;
    v->target = dg_rec_str(rec, DG_P_SLO_SPEC_TARGET);
    v->model = dg_rec_str(rec, DG_P_SLO_SPEC_MODEL);
    v->api = dg_rec_str(rec, DG_P_SLO_SPEC_API);
    v->mode = dg_rec_str(rec, DG_P_SLO_SPEC_MODE);
    v->fixture_backend = dg_rec_str(rec, DG_P_SLO_SPEC_FIXTURE_BACKEND);
    v->fixture_device = dg_rec_str(rec, DG_P_SLO_SPEC_FIXTURE_DEVICE);
    v->fixture_ended = dg_rec_str(rec, DG_P_SLO_SPEC_FIXTURE_ENDED);
    v->fixture_batch = num(rec, DG_P_SLO_SPEC_FIXTURE_BATCH);
    v->percentile = num(rec, DG_P_SLO_SPEC_PERCENTILE);
    v->confidence = num(rec, DG_P_SLO_SPEC_CONFIDENCE);
    const cJSON *b;
    cJSON_ArrayForEach(b, dg_rec_arr(rec, DG_P_SLO_SPEC_BOUNDS))
    {
        const char *m = dg_rec_str(b, DG_P_SLO_SPEC_BOUNDS_METRIC);
        double lim = num(b, DG_P_SLO_SPEC_BOUNDS_LIMIT);
        for (int k = 0; m && k < DG_SLO_NMETRICS && v->nbounds < DG_SLO_MAX_BOUNDS; k++)
            if (strcmp(m, dg_slo_metric_name((dg_slo_metric)k)) == 0 && isfinite(lim))
                v->bounds[v->nbounds++] = (dg_slo_bound){(dg_slo_metric)k, lim / 1e3};
    }
    v->signed_ = dg_rec_bool(rec, DG_P_SLO_FINAL_GATE_SIGNED);
    v->verdict = dg_rec_str(rec, DG_P_SLO_FINAL_GATE_VERDICT);
    v->statement = dg_rec_str(rec, DG_P_SLO_FINAL_GATE_STATEMENT);
    v->signed_concurrency = num(rec, DG_P_SLO_FINAL_GATE_CONCURRENCY);
    v->beside_json = dg_rec_obj(rec, DG_P_SLO_WHILE);
    v->train_step_alone_ms = num(rec, DG_P_SLO_WHILE_ALONE_STEP_MS);
    v->train_step_beside_ms = num(rec, DG_P_SLO_WHILE_BESIDE_STEP_MS);
    v->train_slowdown = num(rec, DG_P_SLO_WHILE_SLOWDOWN);
    return levels_of(v, dg_rec_arr(rec, DG_P_SLO_LEVELS));
}

void dg_view_slo_free(dg_view_slo *v)
{
    dg_free(v->levels);
    dg_free(v->beside);
    v->levels = v->beside = NULL;
    v->nlevels = v->nbeside = 0;
}

double dg_view_slo_pct(const dg_view_slo_level *l, dg_slo_metric m)
{
    return (unsigned)m < DG_SLO_NMETRICS ? l->lat[m].pslo : NAN;
}
