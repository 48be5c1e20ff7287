/* libFuzzer harness for what `devgate pool status` and `pool collect` read
 * from a shared pool folder (another user's files) and from Slurm: the job's
 * job.json, `scontrol -o show job`'s output, and a task folder's task.json,
 * exit.json, record.json and task.log (src/pool/pool_view.c: the tasks, each
 * task's merged state, the record checked before it is taken, the row from
 * it, bucket differences; dg_slurm_parse_jobs; dg_pool_last_line). Input:
 * the six files NUL-separated, in that order. Nothing may crash; each task's
 * state is one of the pool's words, and every row is valid UTF-8 JSON. */
#include "fuzz.h"
#include "fuzz_util.h"
#include "pool/pool_int.h"

#define JOB "4242"

static void check_view(const cJSON *o)
{
    if (!fuzz_pool_state_ok(dg_pool_jstr(o, "state", NULL)))
        abort();
    fuzz_json_check(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_parts in;
    if (fuzz_split(data, size, 6, &in) < 0)
        return 0;
    dg_ctx *ctx = dg_ctx_new();
    cJSON *manifest = cJSON_ParseWithLength(in.p[0], in.len[0]);
    if (!cJSON_IsObject(manifest)) {
        cJSON_Delete(manifest);
        manifest = NULL;
    }
    char *parsed = NULL;
    cJSON *sl = NULL;
    if (dg_slurm_parse_jobs(ctx, in.p[1], JOB, &parsed) == DG_OK) {
        sl = cJSON_Parse(parsed);
        if (!cJSON_IsArray(sl))
            abort();
    }
    dg_string_free(parsed);
    cJSON *tj = cJSON_ParseWithLength(in.p[2], in.len[2]);
    cJSON *ej = cJSON_ParseWithLength(in.p[3], in.len[3]);
    int ids[64];
    int n = dg_pool_task_ids(manifest, sl, ids, 64);
    const char *verb = dg_pool_jstr(manifest, "verb", NULL);
    char why[256];
    cJSON *rec = dg_pool_record_check(in.p[4], in.len[4], verb, why, sizeof why);
    if (!rec && !memchr(why, 0, sizeof why))
        abort();
    cJSON *first = NULL;
    for (int i = 0; i < n && i < 8; i++) {
        if (ids[i] < 0)
            abort();
        cJSON *row = dg_pool_task_view(ids[i], dg_pool_slurm_task(sl, ids[i]), tj, ej,
                                       cJSON_GetArraySize(sl) > 0);
        check_view(row);
        if (rec) {
            dg_pool_row_from_record(row, rec);
            const cJSON *bk = cJSON_GetObjectItem(rec, "bucket");
            char differs[256];
            if (!first && cJSON_IsObject(bk))
                first = cJSON_Parse("{\"id\":\"5d41402abc4b2a76\",\"dataset\":\"idx\"}");
            dg_pool_bucket_differs(first, bk, differs, sizeof differs);
            dg_json_add_str(row, "bucket_differs", differs);
        } else {
            if (why[0])
                dg_json_add_str(row, "record_refused", why);
            char line[256];
            if (in.len[5])
                dg_json_add_str(row, "last_log_line",
                                dg_pool_last_line(in.p[5], line, sizeof line));
        }
        fuzz_json_check(row);
        cJSON_Delete(row);
    }
    cJSON_Delete(first);
    cJSON_Delete(rec);
    cJSON_Delete(tj);
    cJSON_Delete(ej);
    cJSON_Delete(sl);
    cJSON_Delete(manifest);
    dg_ctx_free(ctx);
    fuzz_parts_free(&in);
    return 0;
}
