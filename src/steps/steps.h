/* Internal entry points shared between the steps. */
#ifndef DG_STEPS_H
#define DG_STEPS_H

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
#endif
