/* libFuzzer harness for Slurm's answers as devgate pool reads them:
 * `scontrol -o show job JOB` (dg_slurm_parse_jobs: one entry per array task,
 * array specs expanded by dg_slurm_array_ids, the job's states in the pool's
 * words) and `sbatch --parsable`'s job id (dg_slurm_parse_job_id). Input:
 * the job id asked (one line), then the tool's output. Nothing may crash or
 * run long; the entries are sorted by task, each task once, each state one
 * of the pool's words. */
#include "fuzz.h"
#include "fuzz_util.h"
#include "pool/pool_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    if (!text)
        return 0;
    char *nl = strchr(text, '\n');
    const char *job = "4242", *out = text;
    if (nl) {
        *nl = '\0';
        job = text;
        out = nl + 1;
    }
    dg_ctx *ctx = dg_ctx_new();
    char *json = NULL;
    if (dg_slurm_parse_jobs(ctx, out, job, &json) == DG_OK) {
        cJSON *arr = cJSON_Parse(json);
        if (!cJSON_IsArray(arr))
            abort();
        fuzz_json_check(arr);
        double last = -1;
        const cJSON *e;
        cJSON_ArrayForEach(e, arr)
        {
            double t = dg_jnum(e, "task");
            if (!(t > last) || !fuzz_pool_state_ok(dg_jstr(e, "state")))
                abort();
            last = t;
        }
        cJSON_Delete(arr);
    }
    dg_string_free(json);
    char id[32];
    if (dg_slurm_parse_job_id(out, id) && !dg_pool_job_id_ok(id))
        abort();
    int ids[256], n = 0;
    if (dg_slurm_array_ids(ctx, job, ids, 256, &n) == DG_OK)
        for (int i = 1; i < n; i++)
            if (ids[i] <= ids[i - 1])
                abort();
    dg_ctx_free(ctx);
    free(text);
    return 0;
}
