/* Internal entry points shared between the steps. */
#ifndef DG_STEPS_H
#define DG_STEPS_H

#include "analysis/analysis.h"
#include "backend/backend.h"
#include "core/core.h"
#include "core/json.h"

/* The device matrix-product check of one backend. */
typedef struct dg_matmul_check {
    int m, n, k;
    uint64_t seed;
    int warm_reps;
} dg_matmul_check;

/* Describes backend `name` (built, available, reason, versions, devices) and,
 * when check is non-NULL and it is available, runs the matrix product on it.
 * iface overrides the registry's interface when non-NULL (tests use this to
 * gate a deliberately broken backend). NULL only when out of memory. */
cJSON *dg_gate_backend(dg_ctx *ctx, const char *name, const dg_backend_iface *iface,
                       const dg_matmul_check *check);
/* The loader wait of a train record's timed steps and the step it is a share
 * of, over the same steps (docs/schema/measure.md "profile"): *wait_ms the
 * mean wait a step (data.wait.per_step), *share the total wait over the
 * timed wall (data.wait.share_of_step), *mean_ms the timed wall a step
 * (throughput.step_ms); each NAN when not reported. */
void dg_profile_data_wait(const cJSON *rec, double *wait_ms, double *share, double *mean_ms);

/* An accept record's opening fields (v, kind, run_id, timestamp, host, label). */
void dg_accept_rec_head(cJSON *rec, const char *label);
/* Closes an accept record (steps, state, supervise, bucket), prints it into
 * *json, frees rec, and maps the run's status st to accept's return status. */
dg_status dg_accept_rec_finish(dg_ctx *ctx, cJSON *rec, cJSON *steps, dg_status st, char **json);

#endif
