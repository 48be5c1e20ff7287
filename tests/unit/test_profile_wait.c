/* The profile's data wait: a mean over the window, set against the window's
 * mean step over the same steps (dg_profile_data_wait), never the median of
 * unsynchronised steps; and a real profile on the cpu whose queue_wait share
 * is its ms over step.mean_ms. */
#include "check.h"

#include "core/json.h"
#include "devgate.h"
#include "steps/steps.h"

#include <math.h>

static bool near(double a, double b)
{
    return fabs(a - b) <= 1e-9 + 1e-6 * fabs(b);
}

int main(void)
{
    /* The H200 profile of this session's first GPU pass, in the train
     * record's terms: 13 window steps, a mean wait of 92.7 ms, the window's
     * wall 13 x 153 ms, the median step 21.9 ms (the host ran ahead of the
     * device, then blocked). */
    const char *h200 =
        "{\"steps\":{\"ms\":[150,20,21,21.9,22,23,21,180,300,310,320,330,340,350,360]},"
        "\"data\":{\"wait\":{\"per_step\":{\"value\":92.7,\"unit\":\"ms\",\"valid\":true},"
        "\"share_of_step\":{\"value\":0.6058823529,\"unit\":\"fraction\",\"valid\":true}}},"
        "\"throughput\":{\"step_ms\":{\"value\":153.0,\"unit\":\"ms\",\"valid\":true}}}";
    cJSON *rec = cJSON_Parse(h200);
    CHECK(rec != NULL);
    double wait, share, mean;
    dg_profile_data_wait(rec, &wait, &share, &mean);
    CHECK(near(wait, 92.7));
    CHECK(near(mean, 153.0));
    CHECK_MSG(near(share, 0.6058823529), "share %g", share);
    CHECK(share <= 1 && wait <= mean); /* a wait inside the step never exceeds it */
    cJSON_Delete(rec);

    /* No share in the record: the wait over the mean step, never over a median. */
    rec = cJSON_Parse("{\"data\":{\"wait\":{\"per_step\":{\"value\":30,\"valid\":true}}},"
                      "\"throughput\":{\"step_ms\":{\"value\":120,\"valid\":true}}}");
    dg_profile_data_wait(rec, &wait, &share, &mean);
    CHECK(near(share, 0.25) && near(mean, 120));
    cJSON_Delete(rec);
    /* Nothing reported: NAN, never 0. */
    rec = cJSON_Parse("{}");
    dg_profile_data_wait(rec, &wait, &share, &mean);
    CHECK(isnan(wait) && isnan(share) && isnan(mean));
    cJSON_Delete(rec);

    /* A real profile (cpu, mlp, two loader workers): the queue wait's share is
     * its ms over the window's mean step, and both are over the same steps. */
    dg_ctx *ctx = dg_ctx_new();
    dg_profile_opts po = {.train = {.init = DG_TRAIN_OPTS_MAGIC,
                                    .model = "mlp",
                                    .backend = "cpu",
                                    .batch = 32,
                                    .lr = -1,
                                    .momentum = -1,
                                    .weight_decay = -1,
                                    .threads = 1,
                                    .seed = 7},
                          .warmup = 3,
                          .window = 8};
    char *json = NULL;
    dg_status st = dg_profile_run(ctx, &po, &json);
    CHECK_MSG(st == DG_OK, "profile: %s", dg_errmsg(ctx));
    cJSON *p = json ? cJSON_Parse(json) : NULL;
    dg_string_free(json);
    double ms = dg_jnum(p, "phases.queue_wait.ms"), sh = dg_jnum(p, "phases.queue_wait.share");
    double mm = dg_jnum(p, "step.mean_ms");
    CHECK_MSG(isfinite(ms) && isfinite(sh) && mm > 0, "queue_wait %g ms, share %g, mean %g", ms, sh,
              mm);
    CHECK_MSG(fabs(sh * mm - ms) <= 1e-6 + 1e-6 * ms, "share %g x mean step %g ms != %g ms", sh, mm,
              ms);
    CHECK(ms <= mm);
    cJSON_Delete(p);
    dg_ctx_free(ctx);
    CHECK_DONE();
}
