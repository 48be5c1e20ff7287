/* The synthetic, learnable data set of the fixture: per-class smooth patterns
 * plus noise, every value a function of (seed, sample index) only. */
#ifndef DG_SYNTH_H
#define DG_SYNTH_H

#include "core/core.h"
#include "core/json.h"

typedef struct dg_synth {
    int c, h, w, classes;
    size_t samples;
    uint64_t seed;
    float noise;
    float *x;      /* samples x (c*h*w) */
    int32_t *y;    /* samples */
    size_t *order; /* sample order of order_epoch */
    int order_epoch;
} dg_synth;

/* Generates the data set; DG_ERR_NOMEM when it does not fit in host memory. */
dg_status dg_synth_new(dg_ctx *ctx, uint64_t seed, int classes, int c, int h, int w, size_t samples,
                       dg_synth **out);
/* Frees; accepts NULL. */
void dg_synth_free(dg_synth *s);
/* Copies batch `step` of `epoch` (n samples in a per-epoch permutation) into
 * x (n*c*h*w floats) and y (n labels). */
void dg_synth_batch(dg_synth *s, int epoch, int step, int n, float *x, int32_t *y);
/* The generator's parameters (they identify the data). */
cJSON *dg_synth_json(const dg_synth *s);
#endif
