/* libFuzzer harness for the Python environment probe's answer (the env
 * proof's "python" section): what the interpreter printed on stdout (JSON
 * lines: the basics, then torch), its stderr and how it ended, read by
 * dg_env_python_answer. Input: 3 header bytes ([0] how it ended: ok, failed,
 * timeout, crashed, not-found; [1] bits: an exit status, stdout truncated, a
 * runner's reason; [2] the exit status or signal), stdout, NUL, stderr.
 * Nothing may crash; the members are a valid record, the directories named
 * are absolute, each once, and as many as the record shows. */
#include "env/python_int.h"
#include "fuzz.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const ends[] = {"ok", "failed", "timeout", "crashed", "not-found", NULL};
    uint8_t h[3];
    size_t hn = fuzz_head(data, size, h, sizeof h);
    fuzz_parts in;
    if (fuzz_split(data + hn, size - hn, 2, &in) < 0)
        return 0;
    dg_py_run r = {.status = ends[h[0] % 5],
                   .has_exit = h[1] & 1,
                   .exit_code = h[2],
                   .has_sig = h[0] % 5 == 3,
                   .sig = h[2] % 65,
                   .seconds = 3.8,
                   .has_seconds = h[0] % 5 != 4,
                   .out_truncated = h[1] & 2,
                   .out_cap = (size_t)1 << 20,
                   .error = (h[1] & 4) ? "no answer within 60.0 s; process group killed" : NULL,
                   .out = in.p[0],
                   .out_len = in.len[0],
                   .err = in.p[1],
                   .err_len = in.len[1]};
    cJSON *dirs = NULL;
    cJSON *o = dg_env_python_answer(&r, &dirs);
    if (!o || !cJSON_IsArray(dirs))
        abort();
    fuzz_json_check(o);
    fuzz_metric_check(o, "run.seconds");
    const cJSON *sites = cJSON_GetObjectItem(o, "site_packages"), *d, *e;
    if (cJSON_GetArraySize(sites) != cJSON_GetArraySize(dirs) || cJSON_GetArraySize(dirs) > 64)
        abort();
    cJSON_ArrayForEach(d, dirs)
    {
        if (!cJSON_IsString(d) || d->valuestring[0] != '/')
            abort();
        int same = 0;
        cJSON_ArrayForEach(e, dirs) same += strcmp(e->valuestring, d->valuestring) == 0;
        if (same != 1)
            abort();
    }
    if (!fuzz_one_of(dg_jstr(o, "run.status"), ends))
        abort();
    cJSON_Delete(o);
    cJSON_Delete(dirs);
    fuzz_parts_free(&in);
    return 0;
}
