/* Backend interface: a struct of function pointers plus a context pointer,
 * version field first. Each backend exports only its registration function
 * (dg_backend_<name>_iface); the CUDA one lives in a plug-in loaded at run time.
 *
 * Buffers are opaque device allocations (void *); offsets are in bytes.
 * Matrices are row-major. Every call that can fail returns a dg_status and
 * leaves a message retrievable through last_error. */
#ifndef DG_BACKEND_H
#define DG_BACKEND_H

#include "devgate.h"

#define DG_BACKEND_IFACE_VERSION 7

typedef struct dg_metric {
    double value;
    bool valid; /* false: the device did not report it; value is meaningless */
} dg_metric;

typedef struct dg_device_info {
    char name[128];
    char vendor[128];
    char driver_version[128];
    char platform[128];  /* OpenCL platform or CUDA runtime version; "" when none */
    dg_metric mem_total; /* bytes */
    dg_metric mem_free;  /* bytes */
    dg_metric compute_units;
    /* Where the device sits (version 5): its PCI address ("0000:1b:00.0", ""
     * when the backend cannot tell), whether it computes in host memory (a
     * CPU device: no link to cross), and its memory's rated bandwidth. */
    char pci_bus_id[32];
    bool host_memory;
    dg_metric mem_gbps; /* GB/s */
} dg_device_info;

/* A place in device memory: a buffer and a byte offset into it (4-byte
 * aligned). A ref whose buf is NULL means "absent" where an op allows it. */
typedef struct dg_ref {
    void *buf;
    size_t off;
} dg_ref;

/* 2-D convolution, NCHW input x[n,c,h,w], weights w[k,c,kh,kw] (PyTorch's
 * layout), bias[k], output y[n,k,ho,wo], ho = (h + 2 pad - kh) / stride + 1. */
typedef struct dg_conv_shape {
    int n, c, h, w;
    int k, kh, kw, stride, pad;
    int ho, wo;
} dg_conv_shape;

/* 2-D max-pool without padding (floor mode): window k, stride s. */
typedef struct dg_pool_shape {
    int n, c, h, w;
    int k, stride;
    int ho, wo;
} dg_pool_shape;

/* Operators a backend may or may not implement; dispatch asks supports_op and
 * runs what is missing on the cpu backend (docs/engine.md has each contract). */
typedef enum dg_op {
    DG_OP_GEMM,      /* gemm */
    DG_OP_FILL,      /* fill */
    DG_OP_BIAS_ADD,  /* bias_add */
    DG_OP_BIAS_GRAD, /* bias_grad */
    DG_OP_RELU,      /* relu_fwd, relu_bwd */
    DG_OP_MAXPOOL,   /* maxpool_fwd, maxpool_bwd */
    DG_OP_CONV2D,    /* conv2d_workspace, conv2d_fwd, conv2d_bwd */
    DG_OP_XENT,      /* xent: softmax cross-entropy forward + backward + accuracy */
    DG_OP_SGD,       /* sgd: momentum and weight decay */
    DG_OP__COUNT
} dg_op;

/* Stable names of the ops ("gemm", "conv2d", ...), indexed by dg_op. */
extern const char *const dg_op_names[DG_OP__COUNT];

/* The calls dispatch makes, one per op entry point. Their names
 * ("conv2d_fwd", "relu_bwd", ...) are the ones the profile prints and
 * --disable-op takes; an op's name (dg_op_names) stands for all its calls. */
typedef enum dg_call {
    DG_CALL_GEMM,
    DG_CALL_FILL,
    DG_CALL_BIAS_ADD,
    DG_CALL_BIAS_GRAD,
    DG_CALL_RELU_FWD,
    DG_CALL_RELU_BWD,
    DG_CALL_MAXPOOL_FWD,
    DG_CALL_MAXPOOL_BWD,
    DG_CALL_CONV2D_FWD,
    DG_CALL_CONV2D_BWD,
    DG_CALL_XENT,
    DG_CALL_SGD,
    DG_CALL__COUNT
} dg_call;

/* Names of the calls, indexed by dg_call; the op each call belongs to. */
extern const char *const dg_call_names[DG_CALL__COUNT];
extern const dg_op dg_call_op[DG_CALL__COUNT];

/* Element types of an op's data operands (labels and argmax are int32 always). */
typedef enum dg_dtype { DG_DTYPE_F32 } dg_dtype;

/* What supports_op is asked about: one call with its shape and element type,
 * or (any_shape) the op in general, before any call is known. */
typedef struct dg_op_desc {
    dg_op op;
    dg_call call; /* DG_CALL__COUNT when any_shape */
    dg_dtype dtype;
    bool any_shape; /* true: the shape fields below are unset */
    /* gemm: m, n, k, ta, tb; bias_add/bias_grad: m = outer, n = channels,
     * k = inner; xent: m = batch rows, n = classes; fill, relu, sgd: count. */
    int m, n, k;
    bool ta, tb;
    size_t count;
    const dg_conv_shape *conv; /* conv2d */
    const dg_pool_shape *pool; /* maxpool */
} dg_op_desc;

/* The descriptor of op in general (no call known yet). */
static inline dg_op_desc dg_op_desc_any(dg_op op)
{
    dg_op_desc d = {op, DG_CALL__COUNT, DG_DTYPE_F32, true, 0, 0, 0, false, false, 0, NULL, NULL};
    return d;
}

/* What a backend can do beyond the ops, fixed per backend: the engine, the
 * sampler and the steps read these instead of comparing backend names. */
typedef struct dg_backend_caps {
    bool host; /* computes on the host cpu: the fallback and the baseline devices are judged against
                */
    bool event_timing;           /* event_record/event_elapsed time device work (phase times) */
    bool graph_capture;          /* capture_begin/capture_end/replay record a whole step */
    bool tf32;                   /* set_math: TF32 (1) and bf16 (2) math modes */
    bool device_info_any_thread; /* device_info may be called from the sampler thread while ops run
                                  */
    bool nvml;                   /* an NVIDIA device: NVML reports its memory and utilisation */
} dg_backend_caps;

#define DG_EVENT_SLOTS 16

/* What a fused call does to each output after the product (version 6): the
 * bias added (per output column of a gemm, per output channel of a
 * convolution), then ReLU, then (gemm only) the mask: out = mask > 0 ? out :
 * 0, mask laid out as the output (same leading dimension). Absent refs and
 * false: that stage is skipped. */
typedef struct dg_epilogue {
    dg_ref bias;
    bool relu;
    dg_ref mask;
} dg_epilogue;

/* Bits of fusion(): the fused calls an opened context runs. */
#define DG_FUSE_GEMM 1u /* gemm_ep: bias, relu and mask */
#define DG_FUSE_CONV 2u /* conv2d_fwd_ep: bias and relu */

typedef struct dg_backend_iface {
    uint32_t version; /* DG_BACKEND_IFACE_VERSION the backend was built against */
    const char *name;
    dg_backend_caps caps;

    /* Opens device `device` (index into the enumeration). On failure returns a
     * status and writes the human reason (driver missing, no device, ...) to
     * reason. *ctx is owned by the caller and released with free. */
    dg_status (*init)(int device, void **ctx, char *reason, size_t reason_len);
    void (*free)(void *ctx);
    const char *(*last_error)(void *ctx);

    int (*device_count)(void *ctx);
    dg_status (*device_info)(void *ctx, int device, dg_device_info *out);
    /* Library / runtime versions this backend talks to, as "name version" text. */
    void (*versions)(void *ctx, char *buf, size_t len);

    /* DG_ERR_DEVICE_OOM when the device has no room (the caller may free
     * cached blocks and retry). */
    dg_status (*buf_alloc)(void *ctx, size_t bytes, void **buf);
    void (*buf_free)(void *ctx, void *buf);
    /* Blocking copies between host memory and a buffer (but see host_alloc). */
    dg_status (*upload)(void *ctx, void *buf, size_t off, const void *src, size_t bytes);
    dg_status (*download)(void *ctx, const void *buf, size_t off, void *dst, size_t bytes);
    dg_status (*synchronize)(void *ctx);
    /* Whether the backend runs the call (or, any_shape, the op) natively;
     * false sends it to the cpu fallback. */
    bool (*supports_op)(void *ctx, const dg_op_desc *d);

    /* ---- ops: all asynchronous where the device is, all fp32 ---- */

    /* C[m,n] = alpha * op(A) * op(B) + beta * C, row-major, leading dims in
     * elements. op(A) is m x k: A is stored m x k (lda >= k), or k x m when ta
     * (lda >= m). Likewise B: k x n (ldb >= n), or n x k when tb (ldb >= k).
     * beta == 0 never reads C (so NaN garbage in C does not propagate). */
    dg_status (*gemm)(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha, dg_ref a,
                      int lda, dg_ref b, int ldb, float beta, dg_ref c, int ldc);
    /* x[0..count) = value. */
    dg_status (*fill)(void *ctx, dg_ref x, size_t count, float value);
    /* y[o, ch, i] += bias[ch] over y viewed as [outer, channels, inner]. */
    dg_status (*bias_add)(void *ctx, dg_ref y, dg_ref bias, int outer, int channels, int inner);
    /* db[ch] = sum over o, i of dy[o, ch, i] (overwrites db). */
    dg_status (*bias_grad)(void *ctx, dg_ref dy, dg_ref db, int outer, int channels, int inner);
    /* y = max(x, 0); x and y may be the same place. */
    dg_status (*relu_fwd)(void *ctx, dg_ref x, dg_ref y, size_t count);
    /* dx = y > 0 ? dy : 0, with y the forward output; dx may alias dy. */
    dg_status (*relu_bwd)(void *ctx, dg_ref y, dg_ref dy, dg_ref dx, size_t count);
    /* y = window max; argmax (int32, [n,c,ho,wo]) = index iy*w+ix of the max
     * within its input plane, the first one on ties. */
    dg_status (*maxpool_fwd)(void *ctx, const dg_pool_shape *s, dg_ref x, dg_ref y, dg_ref argmax);
    /* dx = 0, then dx[plane][argmax] += dy for every output (overwrites dx). */
    dg_status (*maxpool_bwd)(void *ctx, const dg_pool_shape *s, dg_ref dy, dg_ref argmax,
                             dg_ref dx);
    /* Scratch bytes conv2d_fwd/bwd need for shape s (0 when none). */
    size_t (*conv2d_workspace)(void *ctx, const dg_conv_shape *s);
    /* y = conv(x, w) + bias (bias may be absent). */
    dg_status (*conv2d_fwd)(void *ctx, const dg_conv_shape *s, dg_ref x, dg_ref w, dg_ref bias,
                            dg_ref y, dg_ref work);
    /* dw = sum over the batch of dL/dw, db likewise (overwritten; db may be
     * absent); dx = dL/dx (overwritten; skipped when absent, e.g. first layer). */
    dg_status (*conv2d_bwd)(void *ctx, const dg_conv_shape *s, dg_ref x, dg_ref w, dg_ref dy,
                            dg_ref dx, dg_ref dw, dg_ref db, dg_ref work);
    /* Softmax cross-entropy, mean over the batch. logits [n, classes], labels
     * int32 [n]. dlogits = (softmax - onehot) / n. acc (float[2]) is
     * accumulated: acc[0] += mean loss, acc[1] += rows whose first argmax is
     * the label. A label outside [0, classes) contributes nothing and its
     * dlogits row is 0 (never an out-of-bounds access). */
    dg_status (*xent)(void *ctx, int n, int classes, dg_ref logits, dg_ref labels, dg_ref dlogits,
                      dg_ref acc);
    /* PyTorch SGD: d = g + weight_decay * w; mom = momentum * mom + d;
     * w -= lr * mom (mom untouched and w -= lr * d when momentum == 0). */
    dg_status (*sgd)(void *ctx, dg_ref w, dg_ref g, dg_ref mom, size_t count, float lr,
                     float momentum, float weight_decay);

    /* ---- optional (NULL when absent) ---- */

    /* Marks slot (0..DG_EVENT_SLOTS-1) in the device's stream; elapsed gives
     * the milliseconds between two marked slots once both completed. */
    dg_status (*event_record)(void *ctx, int slot);
    dg_status (*event_elapsed)(void *ctx, int from, int to, double *ms);
    /* Whole-step capture: ops issued between capture_begin and capture_end
     * are recorded (not run); replay runs the recorded step again. */
    dg_status (*capture_begin)(void *ctx);
    dg_status (*capture_end)(void *ctx);
    dg_status (*replay)(void *ctx);
    /* Math mode: 0 = exact fp32 (the default at init), 1 = TF32 tensor cores
     * allowed for GEMMs and convolutions, 2 = bf16 inputs to GEMMs and
     * convolutions with fp32 accumulation (DG_ERR_USAGE for a mode the
     * backend has not). NULL: fp32 only. Set before the conv2d_workspace
     * queries (the algorithms and workspaces depend on it). */
    dg_status (*set_math)(void *ctx, int mode);
    /* Page-locked host memory for the batches (NULL: plain memory serves as
     * well). An upload whose whole source lies in one such block may return
     * before the copy has run: it is ordered before every op issued after it,
     * and the block must not be written again until host_wait on it returns
     * (which waits for every upload that read from it). host_free waits too
     * and accepts NULL. */
    dg_status (*host_alloc)(void *ctx, size_t bytes, void **p);
    void (*host_free)(void *ctx, void *p);
    dg_status (*host_wait)(void *ctx, const void *p);
    /* Fused calls (version 6): fusion says which this open context runs
     * (DG_FUSE_* bits; 0 when a setting asks for the unfused path). gemm_ep:
     * C[m,n] = ep(op(A) * op(B)) (alpha 1, beta 0), bias per column of C;
     * conv2d_fwd_ep: y = ep(conv(x, w)), the mask absent. Each equals the
     * unfused calls it replaces (gemm, bias_add, relu_fwd, relu_bwd's mask). */
    unsigned (*fusion)(void *ctx);
    dg_status (*gemm_ep)(void *ctx, bool ta, bool tb, int m, int n, int k, dg_ref a, int lda,
                         dg_ref b, int ldb, dg_ref c, int ldc, const dg_epilogue *ep);
    dg_status (*conv2d_fwd_ep)(void *ctx, const dg_conv_shape *s, dg_ref x, dg_ref w, dg_ref y,
                               dg_ref work, const dg_epilogue *ep);
    /* Commands put on the device's queues and host waits for the device since
     * init (the record's per-step counts); NULL when the backend has none. */
    dg_status (*queue_counts)(void *ctx, uint64_t *enqueued, uint64_t *waits);
    /* Opens device `device` for device_count, device_info, versions and free
     * only (version 7): what the environment proof asks, without the kernels
     * init builds; NULL where init costs no more. */
    dg_status (*probe)(int device, void **ctx, char *reason, size_t reason_len);
} dg_backend_iface;

/* Registration functions of the backends compiled into the library. */
const dg_backend_iface *dg_backend_cpu_iface(void);
#ifdef DG_HAVE_OPENCL
const dg_backend_iface *dg_backend_opencl_iface(void);
#endif
/* The plug-in's exported symbol (src/backend/cuda). */
typedef const dg_backend_iface *(*dg_backend_iface_fn)(void);
#define DG_PLUGIN_SYMBOL "dg_backend_plugin_iface"

/* ---- registry (registry.c) ---- */

typedef struct dg_backend_entry {
    const char *name;
    bool built;                    /* compiled in, or plug-in file present */
    const dg_backend_iface *iface; /* NULL when not loadable */
    char reason[256];              /* why iface is NULL */
} dg_backend_entry;

/* Names of every backend devgate knows, in gate order (the registry table's
 * first column). */
extern const char *const dg_backend_names[];
extern const size_t dg_backend_names_count;

/* Index of name in dg_backend_names, -1 when devgate does not know it. */
int dg_backend_index(const char *name);
/* The known names as "cpu, opencl, cuda" (for messages). */
const char *dg_backend_known(void);

/* The production lookup: the registry table, loading the plug-in when needed.
 * DG_ERR_NOT_FOUND for a name devgate does not know. */
dg_status dg_backend_find(dg_ctx *ctx, const char *name, dg_backend_entry *out);
/* dg_backend_find, then the test fault wrapper (DEVGATE_FAULT, fault.c):
 * what the engine and the steps use. */
dg_status dg_backend_lookup(dg_ctx *ctx, const char *name, dg_backend_entry *out);
/* Whether backend name computes on the host (caps.host): the cpu baseline.
 * False for unknown names and for backends that cannot be loaded. */
bool dg_backend_is_host(const char *name);

/* ---- fault injection (fault.c, tests only) ---- */

/* iface wrapped by the fault DEVGATE_FAULT=KIND@NAME names for backend name,
 * or iface itself when none applies. */
const dg_backend_iface *dg_backend_fault_wrap(const char *name, const dg_backend_iface *iface);

/* Host memory behind a cpu-backend buffer (dispatch copies straight into it
 * when an op falls back to the cpu). */
void *dg_cpu_buf_data(void *buf);

/* Reference GEMM in double accumulation, no fast-math (cpu/reference.c). */
void dg_gemm_reference(int m, int n, int k, const float *a, const float *b, double *c);

#endif
