/* The cpu backend's private header: its context and buffer types, the range
 * checks every op runs before touching memory, and the training ops
 * (cpu_ops.c) with the exact signatures of the interface members. */
#ifndef DG_CPU_OPS_H
#define DG_CPU_OPS_H

#include "backend/backend.h"

#include <stdint.h>
#include <stdio.h>

/* Which convolution path a context takes (DEVGATE_CPU_CONV, read at init). */
typedef enum cpu_conv_mode {
    CPU_CONV_AUTO,   /* the widest direct kernels the CPU runs: AVX-512, else AVX2/FMA */
    CPU_CONV_IM2COL, /* im2col + OpenBLAS + col2im, the portable fallback */
    CPU_CONV_AVX2,   /* the AVX2/FMA direct kernels even where AVX-512 runs */
    CPU_CONV_AVX512  /* the AVX-512 direct kernels (init refuses it where they cannot run) */
} cpu_conv_mode;

typedef struct cpu_ctx {
    char err[256];
    cpu_conv_mode conv_mode;
    double event_s[DG_EVENT_SLOTS]; /* host clock per recorded slot */
    bool event_set[DG_EVENT_SLOTS];
} cpu_ctx;

/* Each buffer records its size so every access is bounds-checked. */
typedef struct cpu_buf {
    size_t bytes;
    float *data; /* 64-byte aligned */
    void *raw;
} cpu_buf;

/* DG_ERR_USAGE unless [off, off + bytes) lies inside b. */
static inline dg_status check_range(cpu_ctx *c, const cpu_buf *b, size_t off, size_t bytes)
{
    if (!b || off > b->bytes || bytes > b->bytes - off) {
        snprintf(c->err, sizeof c->err, "cpu: range [%zu, +%zu) outside buffer of %zu bytes", off,
                 bytes, b ? b->bytes : 0);
        return DG_ERR_USAGE;
    }
    return DG_OK;
}

/* Host address of r after checking that `bytes` from it lie in its buffer and
 * that it is 4-byte aligned; NULL (message in c->err) when not. what names
 * the operand in the message. */
static inline char *cpu_span(cpu_ctx *c, dg_ref r, size_t bytes, const char *what)
{
    const cpu_buf *b = r.buf;
    if (!b) {
        snprintf(c->err, sizeof c->err, "cpu: %s is absent", what);
        return NULL;
    }
    if (r.off % 4) {
        snprintf(c->err, sizeof c->err, "cpu: %s offset %zu is not 4-byte aligned", what, r.off);
        return NULL;
    }
    if (r.off > b->bytes || bytes > b->bytes - r.off) {
        snprintf(c->err, sizeof c->err, "cpu: %s range [%zu, +%zu) outside buffer of %zu bytes",
                 what, r.off, bytes, b->bytes);
        return NULL;
    }
    return (char *)b->data + r.off;
}

/* cpu_span for a float operand: DG_ERR_USAGE when the range is bad. */
static inline dg_status cpu_ref(cpu_ctx *c, dg_ref r, size_t bytes, const char *what, float **p)
{
    *p = (float *)cpu_span(c, r, bytes, what);
    return *p ? DG_OK : DG_ERR_USAGE;
}

/* cpu_span for an int32 operand: DG_ERR_USAGE when the range is bad. */
static inline dg_status cpu_ref_i32(cpu_ctx *c, dg_ref r, size_t bytes, const char *what,
                                    int32_t **p)
{
    *p = (int32_t *)cpu_span(c, r, bytes, what);
    return *p ? DG_OK : DG_ERR_USAGE;
}

/* *mode = the convolution path DEVGATE_CPU_CONV's value names (NULL or ""
 * is auto); DG_ERR_USAGE with a message naming the variable in reason for
 * an unknown value, or for avx2/avx512 where this CPU cannot run them. */
dg_status dg_cpu_conv_mode_parse(const char *value, cpu_conv_mode *mode, char *reason,
                                 size_t reason_len);
/* Names the convolution kernels a context (NULL: a default one) runs:
 * "avx512", "avx2" or "im2col" (static text). */
const char *dg_cpu_conv_kernels(const void *ctx);
dg_status dg_cpu_fill(void *ctx, dg_ref x, size_t count, float value);
dg_status dg_cpu_bias_add(void *ctx, dg_ref y, dg_ref bias, int outer, int channels, int inner);
dg_status dg_cpu_bias_grad(void *ctx, dg_ref dy, dg_ref db, int outer, int channels, int inner);
dg_status dg_cpu_relu_fwd(void *ctx, dg_ref x, dg_ref y, size_t count);
dg_status dg_cpu_relu_bwd(void *ctx, dg_ref y, dg_ref dy, dg_ref dx, size_t count);
dg_status dg_cpu_maxpool_fwd(void *ctx, const dg_pool_shape *s, dg_ref x, dg_ref y, dg_ref argmax);
dg_status dg_cpu_maxpool_bwd(void *ctx, const dg_pool_shape *s, dg_ref dy, dg_ref argmax,
                             dg_ref dx);
size_t dg_cpu_conv2d_workspace(void *ctx, const dg_conv_shape *s);
dg_status dg_cpu_conv2d_fwd(void *ctx, const dg_conv_shape *s, dg_ref x, dg_ref w, dg_ref bias,
                            dg_ref y, dg_ref work);
dg_status dg_cpu_conv2d_bwd(void *ctx, const dg_conv_shape *s, dg_ref x, dg_ref w, dg_ref dy,
                            dg_ref dx, dg_ref dw, dg_ref db, dg_ref work);
dg_status dg_cpu_xent(void *ctx, int n, int classes, dg_ref logits, dg_ref labels, dg_ref dlogits,
                      dg_ref acc);
dg_status dg_cpu_sgd(void *ctx, dg_ref w, dg_ref g, dg_ref mom, size_t count, float lr,
                     float momentum, float weight_decay);
dg_status dg_cpu_event_record(void *ctx, int slot);
dg_status dg_cpu_event_elapsed(void *ctx, int from, int to, double *ms);

#endif
