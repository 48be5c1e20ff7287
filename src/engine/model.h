/* Models for the training fixture: presets and layer strings, shape checks,
 * the size table of every parameter and activation, seeded initialisation. */
#ifndef DG_MODEL_H
#define DG_MODEL_H

#include "engine/engine.h"

#define DG_MAX_LAYERS 48
#define DG_ARENA_ALIGN 256 /* bytes; every tensor in an arena starts aligned */

typedef enum dg_layer_kind { DG_L_CONV, DG_L_RELU, DG_L_POOL, DG_L_FC } dg_layer_kind;

typedef struct dg_layer {
    dg_layer_kind kind;
    int in_c, in_h, in_w;    /* input per sample (fc: in_c = features, h = w = 1) */
    int out_c, out_h, out_w; /* output per sample */
    dg_conv_shape conv;      /* conv: n is set per batch */
    dg_pool_shape pool;
    /* Parameter tensors (conv, fc): byte offsets into the parameter arena. */
    int param_index;         /* index of the weight in the size table, -1 when none */
    size_t w_off, b_off;     /* bytes */
    size_t w_count, b_count; /* elements */
    int fan_in;
    /* Activation arena (per batch): output, its gradient, pool argmax. */
    size_t y_off, dy_off, argmax_off;
} dg_layer;

typedef struct dg_tensor_entry {
    char name[32]; /* "conv1.weight", "fc3.bias" */
    int shape[4], ndim;
    size_t count; /* elements */
    size_t off;   /* byte offset in the parameter arena */
} dg_tensor_entry;

typedef struct dg_model {
    char name[32];    /* preset name or "custom" */
    char layers[512]; /* the resolved layer string */
    int in_c, in_h, in_w;
    int classes;
    int nlayers;
    dg_layer L[DG_MAX_LAYERS];
    int ntensors;
    dg_tensor_entry T[2 * DG_MAX_LAYERS];
    size_t param_count; /* elements in all parameter tensors */
    size_t param_arena; /* bytes of one arena (params; grads and momentum likewise) */
} dg_model;

/* Resolves `spec` (a preset: mlp, lenet, cifar; or a layer string such as
 * "conv3x3:32:p1,relu,pool2,fc:10") for input c x h x w (0s: the preset's, or
 * 1x28x28 for layer strings) and builds the size table. DG_ERR_USAGE names the
 * bad token or the layer that does not fit. */
dg_status dg_model_parse(dg_ctx *ctx, const char *spec, int c, int h, int w, dg_model *m);

/* Lays out the activation arena for batch n: fills the layers' activation
 * offsets and conv shapes; returns the arena bytes (input, labels, outputs,
 * gradients, argmax, loss accumulator) and the largest conv workspace. */
typedef struct dg_act_layout {
    size_t x_off, labels_off, acc_off, work_off;
    size_t bytes;      /* whole activation arena */
    size_t work_bytes; /* largest conv workspace */
} dg_act_layout;
void dg_model_layout(dg_model *m, dg_engine *e, int n, dg_act_layout *out);

/* The forward pass of m at batch n (laid out by dg_model_layout for n)
 * through every layer, no loss: the input at act's x_off, each layer's output
 * at its y_off (the last layer's are the logits; where the engine fuses, a
 * layer's bias and the ReLU after it run in the layer's own call, which
 * writes the ReLU's output and never its own); act is the activation
 * arena's buffer, params the parameter arena's (weights at their offsets).
 * The first failing op's status, its message on ctx. */
dg_status dg_model_forward(dg_ctx *ctx, dg_engine *e, const dg_model *m, const dg_act_layout *lay,
                           int n, void *act, void *params);

/* Initial parameters, PyTorch's default scheme (uniform in +-1/sqrt(fan_in)
 * for weights and biases), drawn from Philox with one stream per tensor so a
 * seed gives bit-identical weights on every backend. host has param_arena bytes
 * (gaps zeroed). */
void dg_model_init_params(const dg_model *m, uint64_t seed, float *host);

/* The size table as JSON: tensors, parameter count and bytes. */
cJSON *dg_model_json(const dg_model *m);
#endif
