/* Soak (docs/measure.md): many epochs with allocator discipline (the cache
 * emptied at each epoch end), a watermark per epoch from every memory source,
 * per-step times and the background sampler; the record adds the baseline
 * (end of epoch 1), each source's growth at the last epoch, whether growth
 * steps line up with validation epochs, and the step-time trend. */
#include "core/core.h"
#include "core/json.h"
#include "core/record.h"
#include "engine/train.h"
#include "measure/measure.h"
#include "steps/steps.h"

#include <math.h>

/* The soak's own fields and its analysis, added to the train record itself
 * (record version 2; version 1 nested them under "soak"). */
static void soak_fields(cJSON *rec, const dg_soak_opts *so, int epochs, int steps,
                        const dg_train_ext *x)
{
    cJSON_AddNumberToObject(rec, "epochs_planned", epochs);
    cJSON_AddNumberToObject(rec, "steps_per_epoch", steps);
    cJSON_AddBoolToObject(rec, "empty_cache", !so->no_empty_cache);
    cJSON_AddNumberToObject(rec, "leak_per_step", (double)so->leak_per_step);
    cJSON_AddNumberToObject(rec, "val_steps", so->val_steps);
    cJSON_AddNumberToObject(rec, "sample_ms", x->sample_ms);
    dg_soak_analyse(rec, cJSON_GetObjectItem(rec, "epochs"),
                    cJSON_GetObjectItem(cJSON_GetObjectItem(rec, "steps"), "stats"));
}

dg_status dg_soak_run(dg_ctx *ctx, const dg_soak_opts *opts, char **json)
{
    *json = NULL;
    if (opts->val_steps < 0)
        return dg_fail(ctx, DG_ERR_USAGE, "soak: --val-steps must be non-negative");
    dg_train_opts o = opts->train;
    if (!o.epochs)
        o.epochs = 10;
    if (!o.steps)
        o.steps = 50;
    dg_train_ext x = {
        .sample_ms = 100,
        .step_times = true,
        .epoch_watermarks = true,
        .empty_cache_epoch = !opts->no_empty_cache,
        .leak_per_step = opts->leak_per_step,
        .val_steps = opts->val_steps,
        .lock_epochs = true,
    };
    char *tj = NULL;
    dg_status st = dg_train_run_ext(ctx, &o, &x, &tj);
    if (!tj)
        return st;
    cJSON *rec = cJSON_Parse(tj);
    dg_string_free(tj);
    if (!rec)
        return dg_fail(ctx, DG_ERR_NOMEM, "soak: out of memory reading the training record");
    cJSON_ReplaceItemInObject(rec, "kind", cJSON_CreateString("soak"));
    cJSON_ReplaceItemInObject(rec, "v", cJSON_CreateNumber(DG_RECORD_VERSION));
    soak_fields(rec, opts, o.epochs, o.steps, &x);
    *json = dg_json_print(rec);
    cJSON_Delete(rec);
    if (!*json)
        return dg_fail(ctx, DG_ERR_NOMEM, "soak: out of memory printing the record");
    return st;
}
