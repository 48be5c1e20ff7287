/* What the engine's dispatch files share (dispatch.c the dispatcher and the
 * census, dispatch_fallback.c one fallback, dispatch_calls.c the call
 * table). Internal to src/engine/. */
#ifndef DG_ENGINE_DISPATCH_INT_H
#define DG_ENGINE_DISPATCH_INT_H

#include "engine/engine.h"

#include <stdint.h>

#define CENSUS_MAX 256 /* distinct records; further ones fold into "other" */
#define STAGE_MAX 64   /* cached cpu staging buffers per engine */
#define OPERANDS_MAX 8 /* staged operands of one op */

struct prof;

typedef struct census_rec {
    uint64_t hash;
    char op[24];
    char shape[96];
    char reason[128];
    size_t calls;
    double ms;
    size_t d2h, h2d;
} census_rec;

typedef struct stage_buf {
    void *buf; /* cpu-backend buffer */
    size_t bytes;
    bool in_use;
    uint64_t last_used;
} stage_buf;

/* Fallback state of one engine: the census and the staging buffer cache. */
struct dg_census {
    census_rec *recs;
    size_t n, cap;
    census_rec other;
    bool have_other;
    stage_buf stage[STAGE_MAX];
    size_t nstage;
    uint64_t tick;
    size_t fb_d2h, fb_h2d; /* bytes every fallback copied, engine lifetime */
    struct prof *prof;     /* per-op profiling; NULL until first switched on */
    bool prof_on;
};

enum { STAGE_IN = 1, STAGE_OUT = 2, STAGE_INOUT = 3, STAGE_SCRATCH = 0 };

typedef struct operand {
    dg_ref dev; /* {NULL, 0} for scratch */
    size_t bytes;
    void *sbuf;
    bool downloaded, upload;
} operand;

typedef struct fallback {
    dg_ctx *ctx;
    dg_engine *e;
    dg_call call;
    dg_op op;
    dg_status st;
    double t0;
    operand ops[OPERANDS_MAX];
    int n;
    size_t d2h, h2d;
} fallback;

/* The cpu backend's context a fallback runs in. */
static inline void *dg_dp_cpu_ctx(const dg_engine *e)
{
    return e->cpu_ctx ? e->cpu_ctx : e->bctx;
}

/* ---- the call table (dispatch_calls.c) ----
 * Every entry point packs its arguments into a call_args and hands it to
 * dispatch() with its dg_call. The table row of the call knows the rest: the
 * backend function that implements it, its shape string (formatted once per
 * call, and only when the census or the profile needs it), how its operands
 * are staged on the cpu for a fallback, and how the function is invoked. */

/* The arguments of one call: the union of the entry points' parameters.
 * m, n, k: gemm's dimensions; bias_add/bias_grad: outer, channels, inner;
 * xent: rows, classes (as in dg_op_desc). r: the places, in the order of the
 * backend function's parameters. */
typedef struct call_args {
    bool ta, tb;
    int m, n, k;
    int lda, ldb, ldc;
    float alpha, beta, value, lr, momentum, wd;
    size_t count;
    const dg_pool_shape *pool;
    const dg_conv_shape *conv;
    dg_ref r[OPERANDS_MAX];
} call_args;

typedef struct call_kind {
    bool (*has)(const dg_backend_iface *b);
    void (*shape)(const call_args *a, char *buf, size_t len);
    /* Stages a's places on the cpu for a fallback: s[i] for a->r[i]. */
    void (*stage)(fallback *f, const call_args *a, dg_ref *s);
    dg_status (*invoke)(const dg_backend_iface *b, void *bctx, const call_args *a, const dg_ref *r);
} call_kind;

/* The table, one row per dg_call. */
extern const call_kind dg_dp_calls[DG_CALL__COUNT];

/* Result of a native call, with the backend's message on failure (dispatch.c). */
dg_status dg_dp_native(dg_ctx *ctx, dg_engine *e, const char *fn, dg_status st);

/* ---- one fallback (dispatch_fallback.c) ---- */
/* A free cpu staging buffer of exactly bytes, reused when one is cached. */
dg_status dg_dp_stage_get(dg_engine *e, size_t bytes, void **buf);
/* Returns a staging buffer to the cache. */
void dg_dp_stage_put(dg_engine *e, void *buf);
/* Elements of non-negative int dimensions, SIZE_MAX when negative or too large. */
size_t dg_dp_elems4(int a, int b, int c, int d);
/* Bytes of n 4-byte elements (SIZE_MAX passes through). */
size_t dg_dp_bytes4(size_t n);
/* Bytes a rows x cols row-major matrix with leading dimension ld spans. */
size_t dg_dp_span(int rows, int cols, int ld);
/* Starts a fallback of call on e (the clock and the operand list). */
void dg_fb_begin(fallback *f, dg_ctx *ctx, dg_engine *e, dg_call call);
/* Stages a device operand of bytes on the cpu; mode says whether it is read
 * (downloaded first) and/or written (uploaded after). Absent refs stay absent. */
dg_ref dg_fb_ref(fallback *f, dg_ref dev, size_t bytes, int mode);
/* dg_fb_ref read only, written only, read and written. */
dg_ref dg_fb_in(fallback *f, dg_ref dev, size_t bytes);
dg_ref dg_fb_out(fallback *f, dg_ref dev, size_t bytes);
dg_ref dg_fb_inout(fallback *f, dg_ref dev, size_t bytes);
/* Records the cpu op's status. */
void dg_fb_ran(fallback *f, dg_status st);
/* Copies the outputs back, frees the staging, records the census entry. */
dg_status dg_fb_end(fallback *f, const char *shape);
/* FNV-1a of s continued from h (the census and profile rows' hash). */
uint64_t dg_dp_fnv(uint64_t h, const char *s);
#endif
