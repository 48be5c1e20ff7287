/* The training engine's internal API: a backend opened for training, its
 * caching allocator, op dispatch with CPU fallback and the fallback census.
 * Models, the float64 reference and the training loop build on this. */
#ifndef DG_ENGINE_H
#define DG_ENGINE_H

#include "backend/backend.h"
#include "core/core.h"
#include "core/json.h"
#include "env/cpu_team.h"

/* ---- caching allocator (alloc.c) ------------------------------------------
 * Behaves as PyTorch users expect: freed blocks are kept for reuse in size
 * classes; empty_cache returns every unused cached block to the device; a
 * failed allocation (device out of memory, or the byte budget) frees the cache
 * and retries once, then returns DG_ERR_DEVICE_OOM with the requested size and
 * the statistics in the message. Never an abort. Not thread-safe: one engine,
 * one thread. */

typedef struct dg_alloc_stats {
    size_t allocated, allocated_peak; /* bytes in blocks handed out (class sizes) */
    size_t requested;                 /* bytes asked for by live blocks */
    size_t reserved, reserved_peak;   /* bytes held from the device (in use + cached) */
    size_t device_allocs, device_frees;
    size_t cache_hits;
    size_t oom_events;
    size_t budget; /* 0: none */
} dg_alloc_stats;

typedef struct dg_block {
    void *buf;        /* the backend buffer */
    size_t bytes;     /* class size (>= requested) */
    size_t requested; /* what the caller asked for */
} dg_block;

typedef struct dg_allocator dg_allocator;

/* budget 0 = no cap. The allocator borrows be/bctx (not owned). */
dg_allocator *dg_allocator_new(const dg_backend_iface *be, void *bctx, size_t budget);
/* Frees every block, live or cached; accepts NULL. */
void dg_allocator_free(dg_allocator *a);
/* Hands out a block of at least bytes (> 0). */
dg_status dg_alloc(dg_ctx *ctx, dg_allocator *a, size_t bytes, dg_block **out);
/* Returns a block to the cache; accepts NULL. */
void dg_release(dg_allocator *a, dg_block *b);
/* Returns every cached (unused) block to the device. */
void dg_empty_cache(dg_allocator *a);
void dg_alloc_get_stats(const dg_allocator *a, dg_alloc_stats *out);
/* The class size a request of bytes is served from. */
size_t dg_alloc_class_size(size_t bytes);
cJSON *dg_alloc_stats_json(const dg_alloc_stats *s);

/* ---- engine: backend + allocator + dispatch (dispatch.c) ------------------ */

typedef struct dg_engine_opts {
    int device;              /* device index (0) */
    size_t mem_budget;       /* bytes, 0 = none */
    uint32_t disabled_calls; /* bit (1u << dg_call): force the CPU fallback */
    int threads;             /* cpu threads for BLAS and elementwise work, 0 = default */
    dg_math math; /* the device's product arithmetic (DG_ERR_USAGE where the backend has none) */
} dg_engine_opts;

typedef struct dg_engine {
    const char *name;           /* backend name */
    const dg_backend_iface *be; /* the device backend */
    void *bctx;
    const dg_backend_iface *cpu; /* the fallback (cpu backend; == be on cpu) */
    void *cpu_ctx;               /* NULL when be is cpu (bctx serves) */
    dg_allocator *alloc;
    uint32_t disabled_calls;  /* bit (1u << dg_call) */
    struct dg_census *census; /* fallback records */
    bool any_fallback;        /* an op has fallen back (capture is then off) */
    unsigned fuse;            /* DG_FUSE_* forms usable (fuse.c), once fuse_known */
    bool fuse_known;
    dg_cpu_team team; /* the cpu side's OpenMP team (dg_cpu_team_step at each step) */
} dg_engine;

/* Opens backend `name` for training. DG_ERR_UNAVAILABLE with the reason when
 * it cannot be used; DG_ERR_USAGE for an unknown name or ops disabled on cpu. */
dg_status dg_engine_open(dg_ctx *ctx, const char *name, const dg_engine_opts *opts,
                         dg_engine **out);
/* Opens an engine over the given backend interface (dg_engine_open after the
 * registry lookup; tests use it with wrapped backends). opts may be NULL. */
dg_status dg_engine_open_iface(dg_ctx *ctx, const dg_backend_iface *be, const dg_engine_opts *opts,
                               dg_engine **out);
/* Closes an engine; accepts NULL. */
void dg_engine_close(dg_engine *e);
/* Parses "OP[@BACKEND][,OP...]" into a mask of dg_call bits for backend
 * `name`: OP is a call name (conv2d_fwd), an op name (conv2d: all its calls)
 * or xent; entries for other backends are ignored, and entries without a
 * backend are for the device (ignored when name is the host baseline; with
 * name NULL only checked). DG_ERR_USAGE names an unknown op, an unknown
 * backend, or an op aimed at the host (OP@cpu). */
dg_status dg_parse_disabled_ops(dg_ctx *ctx, const char *spec, const char *name, uint32_t *mask);
/* True when be implements every entry point call c needs (the engine's table
 * of calls), whatever its supports_op says. */
bool dg_engine_implements(const dg_backend_iface *be, dg_call c);
/* True when every call of op runs natively on the engine's backend, whatever
 * its shape (supported in general, implemented, none disabled). */
bool dg_engine_native(const dg_engine *e, dg_op op);
/* The fallback census as a JSON array: [{op, shape, backend, reason, calls,
 * ms_total, bytes_h2d, bytes_d2h}] (bytes_h2d: host to device, i.e. results
 * copied back after the CPU ran the op). */
cJSON *dg_engine_census_json(const dg_engine *e);

/* Per-op timing for `devgate profile` (dispatch.c): when on, every op is
 * bracketed by synchronisation and timed (host clock around native calls and
 * fallbacks), accumulated per (op, shape, backend, native/fallback), and kept
 * as trace events (name, start and duration in microseconds since on, up to
 * 200000 events). */
void dg_engine_set_profiling(dg_engine *e, bool on);
/* [{op, shape, backend, fallback: bool, calls, ms_total, ms_mean, share}] sorted
 * by ms_total, share of the profiled op time; [] when never on. */
cJSON *dg_engine_ops_json(const dg_engine *e);
/* Chrome trace events [{name, cat, ph: "X", ts, dur, pid, tid, args}] of the
 * profiled ops. */
cJSON *dg_engine_trace_json(const dg_engine *e);

/* Op entry points: run natively or fall back to the cpu backend with the
 * copies that implies, recording each fallback. Contracts as in backend.h. */
dg_status dg_op_gemm(dg_ctx *ctx, dg_engine *e, bool ta, bool tb, int m, int n, int k, float alpha,
                     dg_ref a, int lda, dg_ref b, int ldb, float beta, dg_ref c, int ldc);
dg_status dg_op_fill(dg_ctx *ctx, dg_engine *e, dg_ref x, size_t count, float value);
dg_status dg_op_bias_add(dg_ctx *ctx, dg_engine *e, dg_ref y, dg_ref bias, int outer, int channels,
                         int inner);
dg_status dg_op_bias_grad(dg_ctx *ctx, dg_engine *e, dg_ref dy, dg_ref db, int outer, int channels,
                          int inner);
dg_status dg_op_relu_fwd(dg_ctx *ctx, dg_engine *e, dg_ref x, dg_ref y, size_t count);
dg_status dg_op_relu_bwd(dg_ctx *ctx, dg_engine *e, dg_ref y, dg_ref dy, dg_ref dx, size_t count);
dg_status dg_op_maxpool_fwd(dg_ctx *ctx, dg_engine *e, const dg_pool_shape *s, dg_ref x, dg_ref y,
                            dg_ref argmax);
dg_status dg_op_maxpool_bwd(dg_ctx *ctx, dg_engine *e, const dg_pool_shape *s, dg_ref dy,
                            dg_ref argmax, dg_ref dx);
/* Workspace bytes for conv shape s on this engine (max of native and fallback needs). */
size_t dg_op_conv2d_workspace(dg_engine *e, const dg_conv_shape *s);
dg_status dg_op_conv2d_fwd(dg_ctx *ctx, dg_engine *e, const dg_conv_shape *s, dg_ref x, dg_ref w,
                           dg_ref bias, dg_ref y, dg_ref work);
dg_status dg_op_conv2d_bwd(dg_ctx *ctx, dg_engine *e, const dg_conv_shape *s, dg_ref x, dg_ref w,
                           dg_ref dy, dg_ref dx, dg_ref dw, dg_ref db, dg_ref work);
dg_status dg_op_xent(dg_ctx *ctx, dg_engine *e, int n, int classes, dg_ref logits, dg_ref labels,
                     dg_ref dlogits, dg_ref acc);
dg_status dg_op_sgd(dg_ctx *ctx, dg_engine *e, dg_ref w, dg_ref g, dg_ref mom, size_t count,
                    float lr, float momentum, float weight_decay);

/* ---- fused calls (fuse.c) --------------------------------------------------
 * A layer and the ReLU after it (or, backward, a product and the mask of the
 * ReLU before it) as one backend call, where the backend offers the fused
 * form (backend.h: fusion, gemm_ep, conv2d_fwd_ep). */

/* Whether e runs the fused form what (DG_FUSE_GEMM, DG_FUSE_CONV) now: the
 * backend's open context offers it, every call it stands for runs natively
 * (none disabled, none falling back) and op profiling is off (the profile
 * times each op by itself). */
bool dg_engine_fuses(dg_engine *e, unsigned what);
/* C = ep(op(A) op(B)) on the backend (gemm_ep's contract); only where
 * dg_engine_fuses(e, DG_FUSE_GEMM). */
dg_status dg_op_gemm_ep(dg_ctx *ctx, dg_engine *e, bool ta, bool tb, int m, int n, int k, dg_ref a,
                        int lda, dg_ref b, int ldb, dg_ref c, int ldc, const dg_epilogue *ep);
/* y = ep(conv(x, w)) on the backend; only where dg_engine_fuses(e, DG_FUSE_CONV). */
dg_status dg_op_conv2d_fwd_ep(dg_ctx *ctx, dg_engine *e, const dg_conv_shape *s, dg_ref x, dg_ref w,
                              dg_ref y, dg_ref work, const dg_epilogue *ep);
/* Commands the backend has enqueued and host waits since it opened; false
 * when it counts none. */
bool dg_engine_queue_counts(const dg_engine *e, uint64_t *enqueued, uint64_t *waits);

/* ---- float64 reference (ref64.c) -------------------------------------------
 * Plain double-precision versions of every op on host arrays, same
 * contracts as backend.h; built without fast-math. Outer loops over
 * independent outputs run on OpenMP's team; each output is summed by one
 * thread in a fixed order, so the bytes do not depend on the thread count. */
void dg_ref64_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double *a, int lda,
                   const double *b, int ldb, double beta, double *c, int ldc);
void dg_ref64_bias_add(double *y, const double *bias, int outer, int channels, int inner);
void dg_ref64_bias_grad(const double *dy, double *db, int outer, int channels, int inner);
void dg_ref64_relu_fwd(const double *x, double *y, size_t count);
void dg_ref64_relu_bwd(const double *y, const double *dy, double *dx, size_t count);
void dg_ref64_maxpool_fwd(const dg_pool_shape *s, const double *x, double *y, int32_t *argmax);
void dg_ref64_maxpool_bwd(const dg_pool_shape *s, const double *dy, const int32_t *argmax,
                          double *dx);
void dg_ref64_conv2d_fwd(const dg_conv_shape *s, const double *x, const double *w,
                         const double *bias, double *y);
void dg_ref64_conv2d_bwd(const dg_conv_shape *s, const double *x, const double *w, const double *dy,
                         double *dx, double *dw, double *db);
/* Returns the mean loss; adds correct rows to *correct. */
double dg_ref64_xent(int n, int classes, const double *logits, const int32_t *labels,
                     double *dlogits, double *correct);
void dg_ref64_sgd(double *w, const double *g, double *mom, size_t count, double lr, double momentum,
                  double weight_decay);

/* ---- float64 training (ref64_train.c) ---------------------------------------
 * The training fixture's step composed from the ref64_* ops exactly as
 * train.c composes the device ops (forward, mean softmax cross-entropy,
 * backward, one SGD over the whole parameter arena), in double. */
struct dg_model;

/* Batch `step` (0-based) into x (batch * in_c * in_h * in_w floats, NCHW) and
 * labels (batch int32); a failure status ends the run (its message on ctx). */
typedef dg_status (*dg_ref64_batch_fn)(void *user, int step, float *x, int32_t *labels);

/* Trains m at batch size `batch` for `steps` steps from init_params (the
 * float32 arena, param_arena bytes) on the batches next_batch gives, on an
 * OpenMP team of `threads` (0: as the cpu backend's default, OMP_NUM_THREADS
 * else the usable cores less those others keep busy; the bytes do not depend
 * on it; the caller's team size is restored):
 * losses[steps] gets each step's mean loss (before its update), final_params
 * (param_arena / 4 doubles, arena layout, gaps 0) the parameters after the last
 * update. DG_ERR_USAGE bad sizes, DG_ERR_NOMEM out of host memory. */
dg_status dg_ref64_train(dg_ctx *ctx, const struct dg_model *m, const float *init_params, int batch,
                         int steps, int threads, dg_ref64_batch_fn next_batch, void *user,
                         double lr, double momentum, double weight_decay, double *losses,
                         double *final_params);
/* Floating-point operations of one training step (forward and backward) of m
 * at batch size `batch` (2 per multiply-add; the cost of dg_ref64_train). */
double dg_ref64_step_flops(const struct dg_model *m, int batch);
#endif
