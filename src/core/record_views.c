/* The view tables of record_views.def and the loop that reads them
 * (record_views.h). */
#include "core/record_views.h"
#include "core/record_slo.h"

#include <math.h>
#include <string.h>

/* The member's offset, when its type is the kind's (else this does not compile). */
#define VK_TYPE_NUM dg_rec_metric
#define VK_TYPE_STR const char *
#define VK_TYPE_BOOL int
#define VK_TYPE_ARR const cJSON *
#define VK_TYPE_OBJ const cJSON *
#define VK_TYPE_PNUM dg_rec_metric
#define VK_TYPE_PBOOL int
#define VK_TYPE_DBL double
#define VIEW(name) const dg_view_field dg_rec_##name[] = {
#define F(T, member, kind, path)                                                                   \
    {_Generic(((T *)0)->member, VK_TYPE_##kind : offsetof(T, member)), DG_P_##path, DG_VK_##kind},
#define END                                                                                        \
    {                                                                                              \
        0, DG_P_COUNT, DG_VK_END                                                                   \
    }                                                                                              \
    }                                                                                              \
    ;
#include "core/record_views.def"
#undef VIEW
#undef F
#undef END

/* A version-2 row's path ("growth.footprint") below a version-1 payload. */
const cJSON *dg_rec_payload_at(const cJSON *payload, dg_rec_path_id id)
{
    const char *p = dg_rec_paths[id].path;
    if (!strncmp(p, "soak.", 5))
        p += 5;
    return payload ? dg_jpath(payload, p) : NULL;
}

dg_rec_metric dg_rec_payload_num(const cJSON *payload, dg_rec_path_id id)
{
    return dg_rec_num_of(dg_rec_payload_at(payload, id), id);
}

static int payload_bool(const cJSON *payload, dg_rec_path_id id)
{
    const cJSON *it = dg_rec_payload_at(payload, id);
    return cJSON_IsBool(it) ? cJSON_IsTrue(it) : -1;
}

void dg_rec_read_view(void *dst, const cJSON *node, const dg_view_field *f)
{
    for (; f->kind != DG_VK_END; f++) {
        void *m = (char *)dst + f->off;
        switch (f->kind) {
        case DG_VK_END: break;
        case DG_VK_NUM: *(dg_rec_metric *)m = dg_rec_num(node, f->id); break;
        case DG_VK_STR: *(const char **)m = dg_rec_str(node, f->id); break;
        case DG_VK_BOOL: *(int *)m = dg_rec_bool(node, f->id); break;
        case DG_VK_ARR: *(const cJSON **)m = dg_rec_arr(node, f->id); break;
        case DG_VK_OBJ: *(const cJSON **)m = dg_rec_obj(node, f->id); break;
        case DG_VK_PNUM: *(dg_rec_metric *)m = dg_rec_payload_num(node, f->id); break;
        case DG_VK_PBOOL: *(int *)m = payload_bool(node, f->id); break;
        case DG_VK_DBL: {
            dg_rec_metric x = dg_rec_num(node, f->id);
            *(double *)m = x.valid ? x.value : NAN;
            break;
        }
        }
    }
}

void *dg_rec_read_array(const cJSON *arr, size_t elem, const dg_view_field *f, int *n, bool *nomem)
{
    *n = 0;
    int k = cJSON_GetArraySize(arr);
    if (k <= 0)
        return NULL;
    char *out = dg_calloc((size_t)k, elem);
    if (!out) {
        *nomem = true;
        return NULL;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        dg_rec_read_view(out + (size_t)(*n)++ * elem, it, f);
    }
    return out;
}
