/* The fixture model served for inference (devgate slo --target fixture,
 * docs/slo.md): the training fixture's model with seeded weights on one
 * backend, one forward pass per generated token. Not thread-safe: one
 * session, one thread. */
#ifndef DG_ENGINE_INFER_H
#define DG_ENGINE_INFER_H

#include "core/core.h"
#include "core/json.h"

typedef struct dg_infer_opts {
    const char *backend; /* NULL: cpu */
    const char *model;   /* a preset or layer string (engine/model.h); NULL: mlp */
    int batch;           /* samples in each forward pass (0: 1) */
    int device;          /* device index */
    int threads;         /* cpu threads (0: the default) */
    uint64_t seed;       /* weights and inputs */
} dg_infer_opts;

typedef struct dg_infer dg_infer;

/* Opens the backend, lays the model out for the batch, uploads seeded
 * weights and a seeded input batch, and runs one forward pass (the first
 * use's costs paid before anything is timed). *out owned by the caller
 * (dg_infer_close). DG_ERR_USAGE bad model or batch; the backend's status
 * (DG_ERR_UNAVAILABLE, DG_ERR_DEVICE_OOM, ...) with its message on ctx. */
dg_status dg_infer_open(dg_ctx *ctx, const dg_infer_opts *o, dg_infer **out);
/* Closes a session; accepts NULL. */
void dg_infer_close(dg_infer *s);
/* One generated token: the input's first sample gets features made from
 * (key, pos), one forward pass of the whole batch runs, and *token gets the
 * class the first sample's logits rank highest (0 .. classes - 1), read back
 * from the device (so every token waits for its pass). */
dg_status dg_infer_next(dg_ctx *ctx, dg_infer *s, uint64_t key, long pos, int *token);
/* The session as the record says it: backend, device, model, layers,
 * parameters, batch, classes and the first pass's time. Caller owns it. */
cJSON *dg_infer_json(const dg_infer *s);
#endif
