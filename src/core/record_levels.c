/* The gate levels' members of a gate backend's typed view (record.h): level
 * 2's per-op table and link check, level 3's sustained load and memory
 * bandwidth, read through their tables in record_views.def. Kept beside
 * record.c, which calls it for every gate backend. */
#include "core/record.h"
#include "core/record_views.h"

const char *const dg_link_way_names[DG_LINK_WAYS] = {"h2d_pageable", "h2d_pinned", "d2h_pageable",
                                                     "d2h_pinned"};

bool dg_view_backend_levels(const cJSON *backend, dg_view_backend *be)
{
    bool nomem = false;
    dg_view_link *l = &be->link;
    l->present = dg_rec_obj(backend, DG_P_GATE_BACKENDS_LINK) != NULL;
    dg_rec_read_view(l, backend, dg_rec_link_fields);
    dg_view_sustain *s = &be->sustain;
    s->present = dg_rec_obj(backend, DG_P_GATE_BACKENDS_SUSTAIN) != NULL;
    s->membw_present = dg_rec_obj(backend, DG_P_GATE_BACKENDS_MEMBW) != NULL;
    dg_rec_read_view(s, backend, dg_rec_sustain_fields);
    s->throttle =
        dg_rec_read_array(dg_rec_arr(backend, DG_P_GATE_BACKENDS_SUSTAIN_HEALTH_THROTTLE),
                          sizeof *s->throttle, dg_rec_throttle_fields, &s->nthrottle, &nomem);
    dg_view_ops *o = &be->ops;
    o->present = dg_rec_obj(backend, DG_P_GATE_BACKENDS_OPS) != NULL;
    if (!o->present)
        return !nomem;
    dg_rec_read_view(o, backend, dg_rec_ops_fields);
    /* The worst row's paths start at the backend, the table's at an element. */
    o->has_worst = dg_rec_obj(backend, DG_P_GATE_BACKENDS_OPS_WORST) != NULL;
    if (o->has_worst)
        dg_rec_read_view(&o->worst, backend, dg_rec_op_worst_fields);
    o->rows = dg_rec_read_array(dg_rec_arr(backend, DG_P_GATE_BACKENDS_OPS_TABLE), sizeof *o->rows,
                                dg_rec_op_row_fields, &o->nrows, &nomem);
    return !nomem;
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
