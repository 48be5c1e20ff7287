/* The gate levels' members of a gate backend's typed view (record.h): level
 * 2's per-op table and link check, level 3's sustained load and memory bandwidth. Kept beside
 * record.c, which calls it for every gate backend, so the levels' rows are read in one place. */
#include "core/record.h"

#include "core/core.h"

/* The ids of one row's members: [0] a table row's, [1] the worst's. */
static const dg_rec_path_id row_ids[][2] = {
    {DG_P_GATE_BACKENDS_OPS_TABLE_OP, DG_P_GATE_BACKENDS_OPS_WORST_OP},
    {DG_P_GATE_BACKENDS_OPS_TABLE_BACKEND, DG_P_GATE_BACKENDS_OPS_WORST_BACKEND},
    {DG_P_GATE_BACKENDS_OPS_TABLE_PRECISION, DG_P_GATE_BACKENDS_OPS_WORST_PRECISION},
    {DG_P_GATE_BACKENDS_OPS_TABLE_SHAPE, DG_P_GATE_BACKENDS_OPS_WORST_SHAPE},
    {DG_P_GATE_BACKENDS_OPS_TABLE_OUTPUT, DG_P_GATE_BACKENDS_OPS_WORST_OUTPUT},
    {DG_P_GATE_BACKENDS_OPS_TABLE_VERDICT, DG_P_GATE_BACKENDS_OPS_WORST_VERDICT},
    {DG_P_GATE_BACKENDS_OPS_TABLE_REASON, DG_P_GATE_BACKENDS_OPS_WORST_REASON},
    {DG_P_GATE_BACKENDS_OPS_TABLE_FIXTURE, DG_P_GATE_BACKENDS_OPS_WORST_FIXTURE},
    {DG_P_GATE_BACKENDS_OPS_TABLE_NMSE, DG_P_GATE_BACKENDS_OPS_WORST_NMSE},
    {DG_P_GATE_BACKENDS_OPS_TABLE_TOLERANCE, DG_P_GATE_BACKENDS_OPS_WORST_TOLERANCE},
};

/* r: a table element, or (worst) the backend holding ops.worst. */
static void op_row(const cJSON *r, dg_view_op_row *o, int worst)
{
    const char **strs[] = {&o->op,     &o->backend, &o->precision, &o->shape,
                           &o->output, &o->verdict, &o->reason};
    for (int i = 0; i < 7; i++)
        *strs[i] = dg_rec_str(r, row_ids[i][worst]);
    o->fixture = dg_rec_bool(r, row_ids[7][worst]);
    o->nmse = dg_rec_num(r, row_ids[8][worst]);
    o->tolerance = dg_rec_num(r, row_ids[9][worst]);
    if (worst)
        o->over_tolerance = dg_rec_num(r, DG_P_GATE_BACKENDS_OPS_WORST_OVER_TOLERANCE);
}

const char *const dg_link_way_names[DG_LINK_WAYS] = {"h2d_pageable", "h2d_pinned", "d2h_pageable",
                                                     "d2h_pinned"};

static void link_view(const cJSON *backend, dg_view_link *l)
{
    l->present = dg_rec_obj(backend, DG_P_GATE_BACKENDS_LINK) != NULL;
    l->kind = dg_rec_str(backend, DG_P_GATE_BACKENDS_LINK_KIND);
    l->current = dg_rec_str(backend, DG_P_GATE_BACKENDS_LINK_CURRENT);
    l->reason = dg_rec_str(backend, DG_P_GATE_BACKENDS_LINK_REASON);
    l->rated = dg_rec_num(backend, DG_P_GATE_BACKENDS_LINK_RATED);
    l->ok = dg_rec_bool(backend, DG_P_GATE_BACKENDS_LINK_OK);
    static const dg_rec_path_id g[DG_LINK_WAYS] = {
        DG_P_GATE_BACKENDS_LINK_H2D_PAGEABLE, DG_P_GATE_BACKENDS_LINK_H2D_PINNED,
        DG_P_GATE_BACKENDS_LINK_D2H_PAGEABLE, DG_P_GATE_BACKENDS_LINK_D2H_PINNED};
    static const dg_rec_path_id f[DG_LINK_WAYS] = {
        DG_P_GATE_BACKENDS_LINK_FRACTION_OF_RATED_H2D_PAGEABLE,
        DG_P_GATE_BACKENDS_LINK_FRACTION_OF_RATED_H2D_PINNED,
        DG_P_GATE_BACKENDS_LINK_FRACTION_OF_RATED_D2H_PAGEABLE,
        DG_P_GATE_BACKENDS_LINK_FRACTION_OF_RATED_D2H_PINNED};
    for (int k = 0; k < DG_LINK_WAYS; k++) {
        l->gbps[k] = dg_rec_num(backend, g[k]);
        l->fraction[k] = dg_rec_num(backend, f[k]);
    }
}

static bool sustain_view(const cJSON *b, dg_view_sustain *v)
{
    v->present = dg_rec_obj(b, DG_P_GATE_BACKENDS_SUSTAIN) != NULL;
    v->source = dg_rec_str(b, DG_P_GATE_BACKENDS_SUSTAIN_SOURCE);
    v->verdict = dg_rec_str(b, DG_P_GATE_BACKENDS_SUSTAIN_DRIFT_VERDICT);
    v->seconds = dg_rec_num(b, DG_P_GATE_BACKENDS_SUSTAIN_SECONDS);
    v->wall = dg_rec_num(b, DG_P_GATE_BACKENDS_SUSTAIN_WALL);
    v->rate = dg_rec_num(b, DG_P_GATE_BACKENDS_SUSTAIN_RATE);
    v->fraction_of_peak = dg_rec_num(b, DG_P_GATE_BACKENDS_SUSTAIN_FRACTION_OF_PEAK);
    v->first_third = dg_rec_num(b, DG_P_GATE_BACKENDS_SUSTAIN_DRIFT_FIRST_THIRD);
    v->last_third = dg_rec_num(b, DG_P_GATE_BACKENDS_SUSTAIN_DRIFT_LAST_THIRD);
    v->ratio = dg_rec_num(b, DG_P_GATE_BACKENDS_SUSTAIN_DRIFT_RATIO);
    v->ratio_lo = dg_rec_num(b, DG_P_GATE_BACKENDS_SUSTAIN_DRIFT_RATIO_CI_LO);
    v->ratio_hi = dg_rec_num(b, DG_P_GATE_BACKENDS_SUSTAIN_DRIFT_RATIO_CI_HI);
    v->sm_min = dg_rec_num(b, DG_P_GATE_BACKENDS_SUSTAIN_HEALTH_SM_CLOCK_MIN);
    v->sm_max = dg_rec_num(b, DG_P_GATE_BACKENDS_SUSTAIN_HEALTH_SM_CLOCK_MAX);
    v->temp_max = dg_rec_num(b, DG_P_GATE_BACKENDS_SUSTAIN_HEALTH_TEMPERATURE_MAX);
    v->power_mean = dg_rec_num(b, DG_P_GATE_BACKENDS_SUSTAIN_HEALTH_POWER_MEAN);
    v->power_max = dg_rec_num(b, DG_P_GATE_BACKENDS_SUSTAIN_HEALTH_POWER_MAX);
    v->energy = dg_rec_num(b, DG_P_GATE_BACKENDS_SUSTAIN_HEALTH_ENERGY);
    v->ok = dg_rec_bool(b, DG_P_GATE_BACKENDS_SUSTAIN_OK);
    v->throttled = dg_rec_bool(b, DG_P_GATE_BACKENDS_SUSTAIN_THROTTLED);
    v->membw_present = dg_rec_obj(b, DG_P_GATE_BACKENDS_MEMBW) != NULL;
    v->membw = dg_rec_num(b, DG_P_GATE_BACKENDS_MEMBW_BANDWIDTH);
    v->membw_rated = dg_rec_num(b, DG_P_GATE_BACKENDS_MEMBW_RATED);
    v->membw_fraction = dg_rec_num(b, DG_P_GATE_BACKENDS_MEMBW_FRACTION_OF_RATED);
    v->membw_ok = dg_rec_bool(b, DG_P_GATE_BACKENDS_MEMBW_OK);
    const cJSON *arr = dg_rec_arr(b, DG_P_GATE_BACKENDS_SUSTAIN_HEALTH_THROTTLE);
    int n = cJSON_GetArraySize(arr);
    if (n <= 0)
        return true;
    v->throttle = dg_calloc((size_t)n, sizeof *v->throttle);
    if (!v->throttle)
        return false;
    const cJSON *t;
    cJSON_ArrayForEach(t, arr)
    {
        dg_view_throttle *x = &v->throttle[v->nthrottle++];
        x->reason = dg_rec_str(t, DG_P_GATE_BACKENDS_SUSTAIN_HEALTH_THROTTLE_REASON);
        x->slows = dg_rec_bool(t, DG_P_GATE_BACKENDS_SUSTAIN_HEALTH_THROTTLE_SLOWS);
        x->seconds = dg_rec_num(t, DG_P_GATE_BACKENDS_SUSTAIN_HEALTH_THROTTLE_SECONDS);
    }
    return true;
}

bool dg_view_backend_levels(const cJSON *backend, dg_view_backend *be)
{
    link_view(backend, &be->link);
    if (!sustain_view(backend, &be->sustain))
        return false;
    dg_view_ops *o = &be->ops;
    o->present = dg_rec_obj(backend, DG_P_GATE_BACKENDS_OPS) != NULL;
    if (!o->present)
        return true;
    o->checked = dg_rec_num(backend, DG_P_GATE_BACKENDS_OPS_CHECKED);
    o->passed = dg_rec_num(backend, DG_P_GATE_BACKENDS_OPS_PASSED);
    o->failed = dg_rec_num(backend, DG_P_GATE_BACKENDS_OPS_FAILED);
    o->not_native = dg_rec_num(backend, DG_P_GATE_BACKENDS_OPS_NOT_NATIVE);
    o->errors = dg_rec_num(backend, DG_P_GATE_BACKENDS_OPS_ERRORS);
    const cJSON *w = dg_rec_obj(backend, DG_P_GATE_BACKENDS_OPS_WORST);
    o->has_worst = w != NULL;
    if (w)
        op_row(backend, &o->worst, 1);
    const cJSON *table = dg_rec_arr(backend, DG_P_GATE_BACKENDS_OPS_TABLE);
    int n = cJSON_GetArraySize(table);
    if (n <= 0)
        return true;
    o->rows = dg_calloc((size_t)n, sizeof *o->rows);
    if (!o->rows)
        return false;
    const cJSON *r;
    cJSON_ArrayForEach(r, table) op_row(r, &o->rows[o->nrows++], 0);
    return true;
}

void dg_view_backend_levels_free(dg_view_backend *be)
{
    dg_free(be->sustain.throttle);
    be->sustain.throttle = NULL;
    be->sustain.nthrottle = 0;
    dg_free(be->ops.rows);
    be->ops.rows = NULL;
    be->ops.nrows = 0;
}
