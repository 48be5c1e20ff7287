/* The slo record's typed view (record_slo.h): read once through the path
 * table's SLO rows, judged by the slo rules and drawn by the report. */
#include "core/record_slo.h"
#include "core/record.h"
#include "core/record_views.h"

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
    dg_rec_read_view(l, j, dg_rec_slo_level_fields);
    static const dg_rec_path_id pcts[DG_SLO_NMETRICS] = {
        DG_P_SLO_LEVELS_LATENCY_TTFT_PERCENTILES, DG_P_SLO_LEVELS_LATENCY_TPOT_PERCENTILES,
        DG_P_SLO_LEVELS_LATENCY_ITL_PERCENTILES, DG_P_SLO_LEVELS_LATENCY_E2E_PERCENTILES};
    for (int m = 0; m < DG_SLO_NMETRICS; m++) {
        const cJSON *arr = dg_rec_arr(j, pcts[m]);
        dg_view_slo_lat *x = &l->lat[m];
        double lo, hi;
        pct_of(arr, 50, &x->p50, &lo, &hi);
        pct_of(arr, pslo, &x->pslo, &x->lo, &x->hi);
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
    dg_rec_read_view(v, rec, dg_rec_slo_fields);
    const cJSON *b;
    cJSON_ArrayForEach(b, dg_rec_arr(rec, DG_P_SLO_SPEC_BOUNDS))
    {
        const char *m = dg_rec_str(b, DG_P_SLO_SPEC_BOUNDS_METRIC);
        double lim = num(b, DG_P_SLO_SPEC_BOUNDS_LIMIT);
        for (int k = 0; m && k < DG_SLO_NMETRICS && v->nbounds < DG_SLO_MAX_BOUNDS; k++)
            if (strcmp(m, dg_slo_metric_name((dg_slo_metric)k)) == 0 && isfinite(lim))
                v->bounds[v->nbounds++] = (dg_slo_bound){(dg_slo_metric)k, lim / 1e3};
    }
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
