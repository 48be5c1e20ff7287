/* The gate levels' members of a gate backend's typed view (record.h): level
 * 2's per-op table. Kept beside record.c, which calls it for every gate
 * backend, so the levels' rows are read in one place. */
#include "core/record.h"

#include "core/core.h"

static void op_row(const cJSON *r, dg_view_op_row *o, bool worst)
{
    o->op =
        dg_rec_str(r, worst ? DG_P_GATE_BACKENDS_OPS_WORST_OP : DG_P_GATE_BACKENDS_OPS_TABLE_OP);
    o->backend = dg_rec_str(r, worst ? DG_P_GATE_BACKENDS_OPS_WORST_BACKEND
                                     : DG_P_GATE_BACKENDS_OPS_TABLE_BACKEND);
    o->precision = dg_rec_str(r, worst ? DG_P_GATE_BACKENDS_OPS_WORST_PRECISION
                                       : DG_P_GATE_BACKENDS_OPS_TABLE_PRECISION);
    o->shape = dg_rec_str(r, worst ? DG_P_GATE_BACKENDS_OPS_WORST_SHAPE
                                   : DG_P_GATE_BACKENDS_OPS_TABLE_SHAPE);
    o->output = dg_rec_str(r, worst ? DG_P_GATE_BACKENDS_OPS_WORST_OUTPUT
                                    : DG_P_GATE_BACKENDS_OPS_TABLE_OUTPUT);
    o->verdict = dg_rec_str(r, worst ? DG_P_GATE_BACKENDS_OPS_WORST_VERDICT
                                     : DG_P_GATE_BACKENDS_OPS_TABLE_VERDICT);
    o->reason = dg_rec_str(r, worst ? DG_P_GATE_BACKENDS_OPS_WORST_REASON
                                    : DG_P_GATE_BACKENDS_OPS_TABLE_REASON);
    o->fixture = dg_rec_bool(r, worst ? DG_P_GATE_BACKENDS_OPS_WORST_FIXTURE
                                      : DG_P_GATE_BACKENDS_OPS_TABLE_FIXTURE);
    o->nmse = dg_rec_num(r, worst ? DG_P_GATE_BACKENDS_OPS_WORST_NMSE
                                  : DG_P_GATE_BACKENDS_OPS_TABLE_NMSE);
    o->tolerance = dg_rec_num(r, worst ? DG_P_GATE_BACKENDS_OPS_WORST_TOLERANCE
                                       : DG_P_GATE_BACKENDS_OPS_TABLE_TOLERANCE);
    if (worst)
        o->over_tolerance = dg_rec_num(r, DG_P_GATE_BACKENDS_OPS_WORST_OVER_TOLERANCE);
}

bool dg_view_backend_levels(const cJSON *backend, dg_view_backend *be)
{
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
        op_row(backend, &o->worst, true);
    const cJSON *table = dg_rec_arr(backend, DG_P_GATE_BACKENDS_OPS_TABLE);
    int n = cJSON_GetArraySize(table);
    if (n <= 0)
        return true;
    o->rows = dg_calloc((size_t)n, sizeof *o->rows);
    if (!o->rows)
        return false;
    const cJSON *r;
    cJSON_ArrayForEach(r, table) op_row(r, &o->rows[o->nrows++], false);
    return true;
}

void dg_view_backend_levels_free(dg_view_backend *be)
{
    dg_free(be->ops.rows);
    be->ops.rows = NULL;
    be->ops.nrows = 0;
}
