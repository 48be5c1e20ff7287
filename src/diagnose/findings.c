/* The finding store (findings.h). */
#include "diagnose/findings.h"

#include "core/core.h"

#include <string.h>

const char *dg_severity_name(dg_severity s)
{
    return s == DG_SEV_FAIL ? "fail" : s == DG_SEV_WARN ? "warn" : "info";
}

static void put(dg_findings *fs, cJSON *obj, const char *key, cJSON *item)
{
    if (!obj || !item || !cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
        fs->nomem = true;
    }
}

cJSON *dg_findings_add(dg_findings *fs, const char *id, dg_severity sev, int run, const char *title,
                       const char *hypothesis, const char *action)
{
    if (fs->n == fs->cap) {
        int cap = fs->cap ? 2 * fs->cap : 16;
        dg_finding *f = dg_realloc(fs->items, (size_t)cap * sizeof *f);
        if (!f) {
            fs->nomem = true;
            return NULL;
        }
        fs->items = f;
        fs->cap = cap;
    }
    cJSON *o = cJSON_CreateObject();
    if (!o || !title) {
        cJSON_Delete(o);
        fs->nomem = true;
        return NULL;
    }
    put(fs, o, "id", cJSON_CreateString(id));
    put(fs, o, "severity", cJSON_CreateString(dg_severity_name(sev)));
    put(fs, o, "title", cJSON_CreateString(title));
    put(fs, o, "evidence", cJSON_CreateArray());
    put(fs, o, "hypothesis", cJSON_CreateString(hypothesis));
    put(fs, o, "action", cJSON_CreateString(action));
    fs->items[fs->n++] = (dg_finding){id, sev, run, o, false};
    return o;
}

bool dg_findings_fired(const dg_findings *fs, const char *id, dg_severity min, int run)
{
    for (int i = 0; i < fs->n; i++)
        if (strcmp(fs->items[i].id, id) == 0 && fs->items[i].severity >= min &&
            (run < 0 || fs->items[i].run == run))
            return true;
    return false;
}

void dg_findings_emit(dg_findings *fs, cJSON *arr)
{
    for (int sev = DG_SEV_FAIL; sev >= DG_SEV_INFO && arr; sev--)
        for (int i = 0; i < fs->n; i++)
            if ((int)fs->items[i].severity == sev && fs->items[i].json && !fs->items[i].in_output) {
                if (!cJSON_AddItemToArray(arr, fs->items[i].json)) {
                    fs->nomem = true;
                    continue;
                }
                fs->items[i].in_output = true; /* arr owns it; still readable */
            }
}

void dg_findings_free(dg_findings *fs)
{
    if (!fs)
        return;
    for (int i = 0; i < fs->n; i++)
        if (!fs->items[i].in_output)
            cJSON_Delete(fs->items[i].json);
    dg_free(fs->items);
    fs->items = NULL;
    fs->n = fs->cap = 0;
}
