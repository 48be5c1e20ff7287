/* The typed views' members that are one record path read as it is: one table
 * a view, generated from record_views.def (record_views.c), and the one loop
 * that reads a table. record.c, record_levels.c and record_slo.c build their
 * views through it; what is derived from other members, or read below an
 * array, each of them builds itself. */
#ifndef DG_RECORD_VIEWS_H
#define DG_RECORD_VIEWS_H

#include "core/record.h"

#include <stddef.h>

/* How a row's member is read (the reader of record.h it goes through). */
typedef enum dg_view_kind {
    DG_VK_END,   /* closes a table */
    DG_VK_NUM,   /* dg_rec_metric: dg_rec_num */
    DG_VK_STR,   /* const char *: dg_rec_str */
    DG_VK_BOOL,  /* int (tri): dg_rec_bool */
    DG_VK_ARR,   /* const cJSON *: dg_rec_arr */
    DG_VK_OBJ,   /* const cJSON *: dg_rec_obj */
    DG_VK_PNUM,  /* dg_rec_metric below a soak's analysis object (dg_rec_payload_num) */
    DG_VK_PBOOL, /* int (tri) below a soak's analysis object */
    DG_VK_DBL,   /* double: dg_rec_num's value, NAN when not reported */
} dg_view_kind;

/* One row: the member at off of the view is read from path id. */
typedef struct dg_view_field {
    size_t off;
    dg_rec_path_id id;
    dg_view_kind kind;
} dg_view_field;

/* The tables, dg_rec_NAME for each VIEW(NAME) of record_views.def, each
 * closed by a DG_VK_END row. */
#define VIEW(name) extern const dg_view_field dg_rec_##name[];
#define F(T, member, kind, path)
#define END
#include "core/record_views.def"
#undef VIEW
#undef F
#undef END

/* Reads every row of table f from node into the view at dst (PNUM and PBOOL
 * rows below a soak's analysis object, node its payload). */
void dg_rec_read_view(void *dst, const cJSON *node, const dg_view_field *f);
/* A new array (dg_free) of the views of arr's elements, elem bytes each, each
 * read through table f; *n its length. NULL and 0 when arr has none, or when
 * out of memory (then *nomem is set; else it is left as it is). */
void *dg_rec_read_array(const cJSON *arr, size_t elem, const dg_view_field *f, int *n, bool *nomem);
/* The item of a soak-analysis row below payload (the soak record itself, or a
 * version-1 record's nested object, where the row's "soak." is left off). */
const cJSON *dg_rec_payload_at(const cJSON *payload, dg_rec_path_id id);
/* The number of a soak-analysis row below payload (the soak record itself, or
 * a version-1 record's nested object). */
dg_rec_metric dg_rec_payload_num(const cJSON *payload, dg_rec_path_id id);

#endif
