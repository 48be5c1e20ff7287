/* Level 2 of the gate (docs/cli.md "Levels"): every training op of a backend
 * against the float64 reference (src/engine/ref64.c), judged by the
 * normalised mean squared error NMSE = sum (got - ref)^2 / sum ref^2 against
 * a per-op, per-precision tolerance (the table below, docs/rules.md
 * "op-numerics"), as llama.cpp's test-backend-ops does. The cases are built
 * once (inputs from a seed, the float64 outputs) and run on every backend. */
#ifndef DG_GATE_OPS_H
#define DG_GATE_OPS_H

#include "backend/backend.h"
#include "core/core.h"
#include "core/json.h"

/* The precisions an op is judged at: exact fp32, then TF32 tensor-core math
 * and bf16 inputs with fp32 accumulation where the backend has them
 * (caps.tf32 and set_math: gemm and convolutions only). Each value is the
 * set_math mode (DG_MATH_*) it runs under. */
typedef enum dg_op_prec { DG_PREC_FP32, DG_PREC_TF32, DG_PREC_BF16, DG_PREC__COUNT } dg_op_prec;
extern const char *const dg_op_prec_names[DG_PREC__COUNT];

/* One row of the tolerance table: an output of a call. A tolerance of 0
 * means exact (the float64 reference rounded to float32 must be met bit
 * for bit); NAN that the op does not run at that precision. */
typedef struct dg_op_tol {
    const char *call;   /* dg_call_names: "gemm", "conv2d_bwd", ... */
    const char *output; /* "C", "dx", "dw", ... */
    double nmse[DG_PREC__COUNT];
    const char *kind; /* "matrix product", "reduction", "exact", "elementwise" */
    bool backward;    /* a gradient the reference's finite differences vouch for */
} dg_op_tol;

extern const dg_op_tol dg_op_tols[];
extern const size_t dg_op_tols_count;
/* The row of call's output; NULL when the table has none. */
const dg_op_tol *dg_op_tol_find(const char *call, const char *output);

/* NMSE of got against ref over n values: sum (got - ref)^2 / sum ref^2; 0
 * when both are all zero, INFINITY when ref is all zero and got is not, or
 * when got holds a NaN or an infinity. */
double dg_nmse(const double *got, const double *ref, size_t n);

/* ---- what gate_ops.c builds and gate_ops_run.c runs ---- */

enum { DG_OPC_MAX_IN = 4, DG_OPC_MAX_OUT = 3, DG_OPC_MAX_CASES = 160 };

/* One output of a case and its float64 reference. */
typedef struct dg_op_out {
    const char *name;
    size_t n;
    double *ref;
    const dg_op_tol *tol;
} dg_op_out;

/* One call at one shape: its inputs (host floats) and its outputs. */
typedef struct dg_op_case {
    dg_call call;
    char op[16];    /* the table's op: "gemm_nt", or the call's name */
    char shape[96]; /* as the table prints it */
    bool fixture;
    /* gemm: C[m,n] = alpha op(A) op(B) + beta C; bias: outer, ch, inner */
    bool ta, tb;
    int m, n, k;
    float alpha, beta;
    dg_conv_shape conv;
    dg_pool_shape pool;
    bool no_dx, no_bias;
    size_t count; /* fill, relu, sgd */
    float value, lr, mom, wd;
    float *in[DG_OPC_MAX_IN];
    size_t in_n[DG_OPC_MAX_IN];
    int32_t *ints; /* labels (xent) or argmax (maxpool_bwd) */
    size_t ints_n;
    dg_op_out out[DG_OPC_MAX_OUT];
    int nout;
} dg_op_case;

struct dg_op_suite {
    dg_ctx *ctx;
    dg_rng rng;
    uint64_t seed;
    dg_op_case c[DG_OPC_MAX_CASES];
    size_t n;
    bool oom;
};

/* A table row's common members: {op, output, shape, nmse (null when not
 * finite), tolerance}; NULL out of memory. */
cJSON *dg_op_row_new(const char *op, const char *output, const char *shape, double nmse,
                     double tolerance);

typedef struct dg_op_suite dg_op_suite;

/* Builds the cases: the fixture's (the cifar preset's layers at batch 4,
 * each distinct shape once) and odd shapes (primes, 1s, overlapping pools,
 * strided and padded convolutions, every gemm transpose with alpha and
 * beta), inputs from seed, the float64 reference of each. NULL out of
 * memory (message on ctx). */
dg_op_suite *dg_op_suite_new(dg_ctx *ctx, uint64_t seed);
void dg_op_suite_free(dg_op_suite *s);
/* Cases in the suite. */
size_t dg_op_suite_count(const dg_op_suite *s);

/* Runs every case on an open backend (bctx of be) and returns the backend's
 * "ops" object (docs/schema/gate.md): the per-op table (op, backend,
 * precision, shape, output, NMSE, tolerance, verdict), counts, the worst
 * op. *failed is set when an op ran natively and missed its tolerance or
 * failed to run. NULL only when out of memory. */
cJSON *dg_op_suite_run(const dg_op_suite *s, const char *backend, const dg_backend_iface *be,
                       void *bctx, bool *failed);

/* The reference's own check: each backward row's float64 gradient against
 * central differences of the float64 forward, on small shapes. Returns the
 * "reference_check" array ({op, output, shape, nmse, bound, ok}); *ok false
 * when one missed its bound (the tolerance over 100, or FD_EXACT_BOUND for
 * an exact row). NULL only when out of memory. */
cJSON *dg_op_reference_check(uint64_t seed, bool *ok);
#endif
