/* The record vocabulary (record.h): the path table (record_paths.def), the
 * readers of one path, the names of the views' enums and the head every
 * record opens with. Below record.c and its level and slo views, which all
 * read through it. */
#include "core/record.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

const dg_rec_path dg_rec_paths[DG_P_COUNT] = {
#define DG_RP(id, sec, path, type, unit, flags) {DG_SEC_##sec, path, DG_RT_##type, unit, flags},
#include "core/record_paths.def"
#undef DG_RP
};

const char *dg_rec_section_name(dg_rec_section s)
{
    static const char *const names[DG_SEC_COUNT] = {
        "", "env", "gate", "sweep", "soak", "compare", "profile", "supervise", "train", "slo"};
    return (unsigned)s < DG_SEC_COUNT ? names[s] : "";
}

const char *dg_rec_type_name(dg_rec_type t)
{
    static const char *const names[] = {"object", "array", "number", "metric",
                                        "string", "bool",  "any"};
    return (unsigned)t <= DG_RT_ANY ? names[t] : "?";
}

const char *dg_mem_source_key(dg_mem_source s)
{
    static const char *const keys[DG_MEM_COUNT] = {"allocator_allocated", "allocator_reserved",
                                                   "driver", "footprint"};
    return (unsigned)s < DG_MEM_COUNT ? keys[s] : "";
}

const char *dg_phase_key(dg_phase p)
{
    static const char *const keys[DG_PHASE_COUNT] = {
        "read", "decode",  "resize",   "augment", "normalise", "collate", "queue_wait",
        "h2d",  "forward", "backward", "update",  "d2h",       "sync"};
    return (unsigned)p < DG_PHASE_COUNT ? keys[p] : "";
}

/* ---- reading one path --------------------------------------------------------- */

const cJSON *dg_rec_at(const cJSON *node, dg_rec_path_id id)
{
    if ((unsigned)id >= DG_P_COUNT || !node)
        return NULL;
    const char *p = dg_rec_paths[id].path;
    const char *last = NULL;
    for (const char *q = strstr(p, "[]"); q; q = strstr(q + 2, "[]"))
        last = q;
    if (last) {
        p = last + 2;
        if (*p == '.')
            p++;
        if (!*p)
            return node; /* the element itself */
    }
    return dg_jpath(node, p);
}

dg_rec_metric dg_rec_num_of(const cJSON *it, dg_rec_path_id id)
{
    dg_rec_metric m = {NAN, (unsigned)id < DG_P_COUNT ? dg_rec_paths[id].unit : "", false, false};
    if (cJSON_IsObject(it) && cJSON_HasObjectItem(it, "valid")) {
        m.metric = true;
        const char *u = dg_jstr(it, "unit");
        if (u)
            m.unit = u;
    }
    double v = dg_jnum_item(it);
    if (isfinite(v)) {
        m.value = v;
        m.valid = true;
    }
    return m;
}

dg_rec_metric dg_rec_num(const cJSON *node, dg_rec_path_id id)
{
    return dg_rec_num_of(dg_rec_at(node, id), id);
}

const char *dg_rec_str(const cJSON *node, dg_rec_path_id id)
{
    const cJSON *it = dg_rec_at(node, id);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

int dg_rec_bool(const cJSON *node, dg_rec_path_id id)
{
    const cJSON *it = dg_rec_at(node, id);
    return cJSON_IsBool(it) ? cJSON_IsTrue(it) : -1;
}

const cJSON *dg_rec_arr(const cJSON *node, dg_rec_path_id id)
{
    const cJSON *it = dg_rec_at(node, id);
    return cJSON_IsArray(it) ? it : NULL;
}

const cJSON *dg_rec_obj(const cJSON *node, dg_rec_path_id id)
{
    const cJSON *it = dg_rec_at(node, id);
    return cJSON_IsObject(it) ? it : NULL;
}

int dg_rec_int(dg_rec_metric m)
{
    return m.valid && fabs(m.value) < 2e9 ? (int)m.value : -1;
}

cJSON *dg_record_new(const char *kind, int version)
{
    cJSON *rec = cJSON_CreateObject();
    if (rec)
        dg_record_head(rec, kind, version);
    return rec;
}

void dg_record_head(cJSON *rec, const char *kind, int version)
{
    cJSON_AddNumberToObject(rec, "v", version);
    cJSON_AddStringToObject(rec, "kind", kind);
    char ts[32], host[256] = "";
    dg_utc_iso(ts, sizeof ts);
    cJSON_AddStringToObject(rec, "timestamp", ts);
    if (gethostname(host, sizeof host) != 0)
        host[0] = '\0';
    host[sizeof host - 1] = '\0';
    dg_json_add_str(rec, "host", host[0] ? host : NULL); /* null: not known */
}
