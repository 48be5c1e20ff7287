/* Chrome trace writer: events in the Trace Event format, written as one JSON
 * object that Perfetto and chrome://tracing open. */
#include "measure/measure.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

cJSON *dg_trace_add(cJSON *events, const char *name, const char *cat, double ts_us, double dur_us,
                    int pid, int tid)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(events, o)) {
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "cat", cat);
    cJSON_AddStringToObject(o, "ph", "X");
    cJSON_AddNumberToObject(o, "ts", ts_us);
    cJSON_AddNumberToObject(o, "dur", dur_us > 0 ? dur_us : 0);
    cJSON_AddNumberToObject(o, "pid", pid);
    cJSON_AddNumberToObject(o, "tid", tid);
    return cJSON_AddObjectToObject(o, "args");
}

void dg_trace_name(cJSON *events, int pid, int tid, const char *name)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(events, o)) {
        cJSON_Delete(o);
        return;
    }
    cJSON_AddStringToObject(o, "name", tid < 0 ? "process_name" : "thread_name");
    cJSON_AddStringToObject(o, "ph", "M");
    cJSON_AddNumberToObject(o, "pid", pid);
    cJSON_AddNumberToObject(o, "tid", tid < 0 ? 0 : tid);
    cJSON *args = cJSON_AddObjectToObject(o, "args");
    if (args)
        cJSON_AddStringToObject(args, "name", name);
}

dg_status dg_trace_write(dg_ctx *ctx, const char *path, const cJSON *events, const cJSON *metadata)
{
    if (!path || !*path || !cJSON_IsArray(events))
        return dg_fail(ctx, DG_ERR_USAGE, "trace: no path or no event array");
    cJSON *root = cJSON_CreateObject();
    bool ok = root && cJSON_AddItemReferenceToObject(root, "traceEvents", (cJSON *)events) &&
              cJSON_AddStringToObject(root, "displayTimeUnit", "ms");
    if (ok && metadata)
        ok = cJSON_AddItemReferenceToObject(root, "metadata", (cJSON *)metadata);
    else if (ok)
        ok = cJSON_AddObjectToObject(root, "metadata") != NULL;
    char *text = ok ? dg_json_print(root) : NULL;
    cJSON_Delete(root); /* references: the borrowed items stay */
    if (!text)
        return dg_fail(ctx, DG_ERR_NOMEM, "trace: out of memory printing the trace");
    size_t len = strlen(text);
    text[len] = '\n'; /* the NUL's place: written as the last line end */
    dg_status st = dg_file_write_atomic(ctx, path, text, len + 1);
    dg_free(text);
    if (st != DG_OK) {
        char msg[sizeof ctx->errmsg];
        snprintf(msg, sizeof msg, "trace: %s", dg_errmsg(ctx));
        return dg_fail(ctx, st, "%s", msg);
    }
    return DG_OK;
}
