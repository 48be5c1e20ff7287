/* cuDNN for the CUDA plug-in's conv2d, loaded at run time.
 *
 * The plug-in never links against cuDNN: the first context that wants it
 * dlopens libcudnn.so.9 (then libcudnn.so, then the copy beside the CUDA
 * runtime or a pip-style nvidia/cudnn/lib next to it; DEVGATE_CUDNN_LIB names
 * an exact file instead) and looks up the legacy (v7-style) convolution API,
 * which cuDNN 9 still ships in libcudnn_cnn/libcudnn_ops. Only the types, enum
 * values and functions used here are declared (values copied from cuDNN 9's
 * cudnn_graph.h, cudnn_ops.h and cudnn_cnn.h), so the plug-in loads and runs
 * its im2col path where cuDNN is absent.
 *
 * Algorithms are chosen once per shape (cdn_plan_shape, which conv2d_workspace
 * calls while the engine lays out memory, before any capture): cuDNN's Find
 * times the candidates (it allocates and synchronises, so never inside a
 * capture; there the heuristic list is used instead), and the choice is kept
 * with its descriptors. Choice rules:
 *   - fp32 FMA math only (CUDNN_FMA_MATH): no TF32 tensor-core rounding;
 *     except after cdn_set_math(d, CU_MATH_TF32) (devgate train --tf32): then
 *     the descriptors allow tensor-op math (TF32) and algorithms of either
 *     math type compete; after cdn_set_math(d, CU_MATH_BF16) (--precision
 *     bf16) x, w and y are CUDNN_DATA_BFLOAT16 tensors with a float compute
 *     type (cuDNN's bf16 configuration: fp32 accumulation) and tensor-op
 *     math, channels-last (NHWC, filters KRSC) unless DEVGATE_CUDA_BF16_LAYOUT
 *     =nchw: the casts into bf16 transpose on the way, where cuDNN would
 *     transpose NCHW bf16 tensors itself. Plans are kept per (shape, math mode);
 *   - no FFT algorithms and no non-fused Winograd (their rounding is not
 *     bounded by the per-element magnitude the tests hold results to); fused
 *     Winograd only where the reduction is at least 64 terms long, so that its
 *     transforms' extra rounding stays well inside the fp32 accumulation error;
 *   - deterministic algorithms first: a non-deterministic one (float atomics)
 *     only when the fastest deterministic one is more than 20% slower;
 *   - workspace at most an eighth of the device memory free when cuDNN was
 *     opened, between CDN_WS_MIN and CDN_WS_MAX bytes: at large batches the
 *     TF32 tensor-core algorithms need workspace in proportion to the
 *     activations (a fixed 256 MiB left cifar at batch 4096 on FMA kernels,
 *     slower with --tf32 than without).
 * The ops then only enqueue on the context's stream with the caller's
 * workspace: no allocation and no synchronisation, so they capture. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda_bf16.h"

#define CDN_WS_MIN ((size_t)256 << 20) /* workspace an algorithm may always ask for */
#define CDN_WS_MAX ((size_t)4 << 30)   /* and never more than this */
#define CDN_WS_ALIGN 256               /* workspace sizes are rounded up to this */
#define CDN_MAX_ALGOS 16               /* more than any of the three algorithm lists */
#define CDN_DET_SLACK 1.2f             /* a deterministic algorithm within this factor wins */
#define CDN_WINO_MIN_K 64              /* fused Winograd only for reductions this long */

/* ---- the declared part of cuDNN's API (values from the cuDNN 9 headers) ---- */

typedef int cdnStatus;          /* cudnnStatus_t */
#define CDN_STATUS_SUCCESS 0    /* CUDNN_STATUS_SUCCESS */
#define CDN_TENSOR_NCHW 0       /* CUDNN_TENSOR_NCHW */
#define CDN_TENSOR_NHWC 1       /* CUDNN_TENSOR_NHWC (a filter's KRSC) */
#define CDN_DATA_FLOAT 0        /* CUDNN_DATA_FLOAT */
#define CDN_DATA_BFLOAT16 9     /* CUDNN_DATA_BFLOAT16 */
#define CDN_CROSS_CORRELATION 1 /* CUDNN_CROSS_CORRELATION */
#define CDN_TENSOR_OP_MATH 1    /* CUDNN_TENSOR_OP_MATH */
#define CDN_TENSOR_OP_MATH_ALLOW_CONVERSION 2
#define CDN_FMA_MATH 3      /* CUDNN_FMA_MATH */
#define CDN_DETERMINISTIC 1 /* CUDNN_DETERMINISTIC */

/* cudnnConvolutionFwdAlgo_t */
enum {
    CDN_FWD_IMPLICIT_GEMM,
    CDN_FWD_IMPLICIT_PRECOMP_GEMM,
    CDN_FWD_GEMM,
    CDN_FWD_DIRECT,
    CDN_FWD_FFT,
    CDN_FWD_FFT_TILING,
    CDN_FWD_WINOGRAD,
    CDN_FWD_WINOGRAD_NONFUSED
};
/* cudnnConvolutionBwdDataAlgo_t */
enum {
    CDN_DATA_ALGO_0,
    CDN_DATA_ALGO_1,
    CDN_DATA_FFT,
    CDN_DATA_FFT_TILING,
    CDN_DATA_WINOGRAD,
    CDN_DATA_WINOGRAD_NONFUSED
};
/* cudnnConvolutionBwdFilterAlgo_t */
enum {
    CDN_FILTER_ALGO_0,
    CDN_FILTER_ALGO_1,
    CDN_FILTER_FFT,
    CDN_FILTER_ALGO_3,
    CDN_FILTER_WINOGRAD,
    CDN_FILTER_WINOGRAD_NONFUSED,
    CDN_FILTER_FFT_TILING
};

static const char *const cdn_fwd_names[] = {
    "implicit-gemm", "implicit-precomp-gemm", "gemm", "direct", "fft", "fft-tiling",
    "winograd",      "winograd-nonfused"};
static const char *const cdn_data_names[] = {"algo0",      "algo1",    "fft",
                                             "fft-tiling", "winograd", "winograd-nonfused"};
static const char *const cdn_filter_names[] = {
    "algo0", "algo1", "fft", "algo3", "winograd", "winograd-nonfused", "fft-tiling"};

/* cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: the three share this layout. */
typedef struct cdn_perf {
    int algo;
    cdnStatus status;
    float time; /* ms (Find); -1 from the heuristics */
    size_t memory;
    int determinism;
    int math_type;
    int reserved[3];
} cdn_perf;

typedef void *cdnHandle; /* cudnnHandle_t and the descriptor types: opaque pointers */
typedef void *cdnDesc;

typedef size_t (*fn_get_version)(void);
typedef const char *(*fn_error_string)(cdnStatus);
typedef cdnStatus (*fn_create)(cdnHandle *);
typedef cdnStatus (*fn_destroy)(cdnHandle);
typedef cdnStatus (*fn_set_stream)(cdnHandle, cudaStream_t);
typedef cdnStatus (*fn_create_desc)(cdnDesc *);
typedef cdnStatus (*fn_destroy_desc)(cdnDesc);
typedef cdnStatus (*fn_set_tensor4d)(cdnDesc, int format, int dtype, int n, int c, int h, int w);
typedef cdnStatus (*fn_set_filter4d)(cdnDesc, int dtype, int format, int k, int c, int h, int w);
typedef cdnStatus (*fn_set_conv2d)(cdnDesc, int pad_h, int pad_w, int u, int v, int dil_h,
                                   int dil_w, int mode, int compute_type);
typedef cdnStatus (*fn_set_math)(cdnDesc, int math_type);
/* Find / Get_v7 share one shape per kind: (handle, in1, in2, conv, out, n, *ret, perf). */
typedef cdnStatus (*fn_algos)(cdnHandle, cdnDesc, cdnDesc, cdnDesc, cdnDesc, int, int *,
                              cdn_perf *);
typedef cdnStatus (*fn_ws_size)(cdnHandle, cdnDesc, cdnDesc, cdnDesc, cdnDesc, int, size_t *);
/* Forward (x, w -> y), BackwardData (w, dy -> dx), BackwardFilter (x, dy -> dw). */
typedef cdnStatus (*fn_run)(cdnHandle, const void *alpha, cdnDesc, const void *, cdnDesc,
                            const void *, cdnDesc conv, int algo, void *work, size_t work_bytes,
                            const void *beta, cdnDesc, void *);

typedef struct cdn_api {
    void *so;
    size_t version; /* cudnnGetVersion: major*10000 + minor*100 + patch */
    char path[256];
    fn_get_version get_version;
    fn_error_string error_string;
    fn_create create;
    fn_destroy destroy;
    fn_set_stream set_stream;
    fn_create_desc create_tensor, create_filter, create_conv;
    fn_destroy_desc destroy_tensor, destroy_filter, destroy_conv;
    fn_set_tensor4d set_tensor4d;
    fn_set_filter4d set_filter4d;
    fn_set_conv2d set_conv2d;
    fn_set_math set_math;
    fn_algos find_fwd, find_data, find_filter, get_fwd, get_data, get_filter;
    fn_ws_size ws_fwd, ws_data, ws_filter;
    fn_run fwd, data, filter;
} cdn_api;

static pthread_mutex_t cdn_lock = PTHREAD_MUTEX_INITIALIZER;
static int cdn_state;          /* 0 not tried, 1 loaded, -1 failed (under cdn_lock) */
static char cdn_load_why[256]; /* why the load failed */
static cdn_api A;              /* valid once cdn_state == 1; never unloaded */

/* snprintf into buf (tolerates NULL/0); the plug-in's files share it. */
CDN_HIDDEN void cdn_msg(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    if (!buf || len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

/* Tries one file or soname; true when it opened (A.so set). */
static bool cdn_try(const char *name, char *why, size_t len)
{
    void *so = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        const char *e = dlerror();
        cdn_msg(why, len, "%s", e ? e : name);
        return false;
    }
    A.so = so;
    snprintf(A.path, sizeof A.path, "%s", name);
    return true;
}

/* Opens cuDNN: DEVGATE_CUDNN_LIB when set, else the sonames, else beside the
 * CUDA runtime this plug-in uses (a toolkit's lib64, or pip's nvidia/ tree). */
static bool cdn_open_so(char *why, size_t len)
{
    const char *env = getenv("DEVGATE_CUDNN_LIB");
    Dl_info info;
    char dir[200], path[256], first[200] = "";

    if (env && *env)
        return cdn_try(env, why, len);
    if (cdn_try("libcudnn.so.9", why, len))
        return true;
    snprintf(first, sizeof first, "%s", why);
    if (cdn_try("libcudnn.so", NULL, 0))
        return true;
    if (dladdr((void *)&cudaRuntimeGetVersion, &info) && info.dli_fname &&
        strchr(info.dli_fname, '/')) {
        snprintf(dir, sizeof dir, "%s", info.dli_fname);
        *strrchr(dir, '/') = '\0';
        snprintf(path, sizeof path, "%s/libcudnn.so.9", dir);
        if (cdn_try(path, NULL, 0))
            return true;
        snprintf(path, sizeof path, "%s/../../cudnn/lib/libcudnn.so.9", dir);
        if (cdn_try(path, NULL, 0))
            return true;
    }
    cdn_msg(why, len, "%s", first);
    return false;
}

#define CDN_SYM(field, name)                                                                       \
    do {                                                                                           \
        *(void **)&A.field = dlsym(A.so, name);                                                    \
        if (!A.field) {                                                                            \
            cdn_msg(why, len, "%s has no %s", A.path, name);                                       \
            return false;                                                                          \
        }                                                                                          \
    } while (0)

static bool cdn_syms(char *why, size_t len)
{
    CDN_SYM(get_version, "cudnnGetVersion");
    CDN_SYM(error_string, "cudnnGetErrorString");
    CDN_SYM(create, "cudnnCreate");
    CDN_SYM(destroy, "cudnnDestroy");
    CDN_SYM(set_stream, "cudnnSetStream");
    CDN_SYM(create_tensor, "cudnnCreateTensorDescriptor");
    CDN_SYM(create_filter, "cudnnCreateFilterDescriptor");
    CDN_SYM(create_conv, "cudnnCreateConvolutionDescriptor");
    CDN_SYM(destroy_tensor, "cudnnDestroyTensorDescriptor");
    CDN_SYM(destroy_filter, "cudnnDestroyFilterDescriptor");
    CDN_SYM(destroy_conv, "cudnnDestroyConvolutionDescriptor");
    CDN_SYM(set_tensor4d, "cudnnSetTensor4dDescriptor");
    CDN_SYM(set_filter4d, "cudnnSetFilter4dDescriptor");
    CDN_SYM(set_conv2d, "cudnnSetConvolution2dDescriptor");
    CDN_SYM(set_math, "cudnnSetConvolutionMathType");
    CDN_SYM(find_fwd, "cudnnFindConvolutionForwardAlgorithm");
    CDN_SYM(find_data, "cudnnFindConvolutionBackwardDataAlgorithm");
    CDN_SYM(find_filter, "cudnnFindConvolutionBackwardFilterAlgorithm");
    CDN_SYM(get_fwd, "cudnnGetConvolutionForwardAlgorithm_v7");
    CDN_SYM(get_data, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    CDN_SYM(get_filter, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    CDN_SYM(ws_fwd, "cudnnGetConvolutionForwardWorkspaceSize");
    CDN_SYM(ws_data, "cudnnGetConvolutionBackwardDataWorkspaceSize");
    CDN_SYM(ws_filter, "cudnnGetConvolutionBackwardFilterWorkspaceSize");
    CDN_SYM(fwd, "cudnnConvolutionForward");
    CDN_SYM(data, "cudnnConvolutionBackwardData");
    CDN_SYM(filter, "cudnnConvolutionBackwardFilter");
    return true;
}

/* Loads cuDNN once per process; false (with the reason) when it is not usable. */
static bool cdn_load(char *why, size_t len)
{
    bool ok;
    pthread_mutex_lock(&cdn_lock);
    if (cdn_state == 0) {
        char w[sizeof cdn_load_why] = "";
        bool good = cdn_open_so(w, sizeof w);
        if (good && !cdn_syms(w, sizeof w))
            good = false;
        if (good) {
            A.version = A.get_version();
            if (A.version < 90000 || A.version >= 100000) {
                cdn_msg(w, sizeof w, "%s is cuDNN version %zu; this plug-in was written for 9.x",
                        A.path, A.version);
                good = false;
            }
        }
        if (!good && A.so) {
            dlclose(A.so);
            memset(&A, 0, sizeof A);
        }
        snprintf(cdn_load_why, sizeof cdn_load_why, "%s", w);
        cdn_state = good ? 1 : -1;
    }
    ok = cdn_state == 1;
    if (!ok)
        cdn_msg(why, len, "%s", cdn_load_why);
    pthread_mutex_unlock(&cdn_lock);
    return ok;
}

/* ---- per-context state and plans --------------------------------------------------- */

typedef struct cdn_plan {
    dg_conv_shape s;
    int math;   /* the math mode the plan was made for (CU_MATH_*) */
    bool ok;    /* false: cuDNN declined this shape (im2col runs it) */
    bool found; /* chosen from Find's timings (else from the heuristics) */
    /* CU_MATH_BF16 only: fp32 tensors holding bf16-rounded values on TF32
     * math (exact products of bf16 inputs, fp32 accumulation and output; no
     * Winograd, whose transforms would round again) instead of bf16 tensors. */
    bool carrier;
    /* CU_MATH_BF16 bf16 tensors only: channels-last x, y (dy, dx) and w
     * (KRSC) copies, as cuDNN's bf16 tensor-core kernels read them. */
    bool nhwc;
    cdnDesc xd, yd, wd, cd;
    int fwd, data, filter;             /* chosen algorithms */
    size_t ws_fwd, ws_data, ws_filter; /* their workspace bytes */
    size_t ws;                         /* the most of the three, rounded up */
    char why[96];                      /* when !ok */
} cdn_plan;

struct cdn_ctx {
    cdnHandle h;
    int math;      /* CU_MATH_* (cdn_set_math) */
    size_t ws_cap; /* largest workspace an algorithm may ask for */
    cdn_plan *plans;
    int nplans, cap;
};
typedef struct cdn_ctx cdn_ctx;

static const char *cdn_err(cdnStatus s)
{
    const char *t = A.error_string ? A.error_string(s) : NULL;
    return t ? t : "unknown cuDNN status";
}

CDN_HIDDEN bool cdn_version_text(char *buf, size_t len)
{
    bool loaded;
    pthread_mutex_lock(&cdn_lock);
    loaded = cdn_state == 1;
    pthread_mutex_unlock(&cdn_lock);
    if (!loaded)
        return false;
    cdn_msg(buf, len, "%zu.%zu.%zu", A.version / 10000, A.version / 100 % 100, A.version % 100);
    return true;
}

CDN_HIDDEN dg_status cdn_open(cdn_ctx **out, cudaStream_t stream, char *why, size_t len)
{
    cdn_ctx *d;
    cdnStatus s;

    *out = NULL;
    if (!cdn_load(why, len))
        return DG_ERR_UNAVAILABLE;
    d = (cdn_ctx *)calloc(1, sizeof *d);
    if (!d) {
        cdn_msg(why, len, "out of host memory");
        return DG_ERR_NOMEM;
    }
    s = A.create(&d->h);
    if (s != CDN_STATUS_SUCCESS) {
        cdn_msg(why, len, "cudnnCreate (%s): %s", A.path, cdn_err(s));
        free(d);
        return DG_ERR_UNAVAILABLE;
    }
    s = A.set_stream(d->h, stream);
    if (s != CDN_STATUS_SUCCESS) {
        cdn_msg(why, len, "cudnnSetStream: %s", cdn_err(s));
        A.destroy(d->h);
        free(d);
        return DG_ERR_UNAVAILABLE;
    }
    size_t free_b = 0, total_b = 0;
    d->ws_cap = CDN_WS_MIN;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && free_b / 8 > d->ws_cap)
        d->ws_cap = free_b / 8 < CDN_WS_MAX ? free_b / 8 : CDN_WS_MAX;
    cudaGetLastError();
    *out = d;
    return DG_OK;
}

static void cdn_plan_free(cdn_plan *p)
{
    if (p->xd)
        A.destroy_tensor(p->xd);
    if (p->yd)
        A.destroy_tensor(p->yd);
    if (p->wd)
        A.destroy_filter(p->wd);
    if (p->cd)
        A.destroy_conv(p->cd);
    p->xd = p->yd = p->wd = p->cd = NULL;
}

/* CU_MATH_FP32: exact fp32 (FMA math, the default); CU_MATH_TF32: TF32
 * tensor-op math allowed; CU_MATH_BF16: bf16 tensors, fp32 accumulation.
 * Later plans (and lookups) use the mode; plans of other modes stay cached. */
CDN_HIDDEN void cdn_set_math(cdn_ctx *d, int math)
{
    if (d)
        d->math = math;
}

CDN_HIDDEN void cdn_close(cdn_ctx *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->nplans; i++)
        cdn_plan_free(&d->plans[i]);
    free(d->plans);
    if (d->h)
        A.destroy(d->h);
    free(d);
}

static bool cdn_same(const dg_conv_shape *a, const dg_conv_shape *b)
{
    return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w && a->k == b->k &&
           a->kh == b->kh && a->kw == b->kw && a->stride == b->stride && a->pad == b->pad &&
           a->ho == b->ho && a->wo == b->wo;
}

enum { CDN_KIND_FWD, CDN_KIND_DATA, CDN_KIND_FILTER };

/* Whether algorithm a of kind may be used for s (accuracy rules above; no
 * Winograd at all where exact says the inputs must reach the products as they are). */
static bool cdn_allowed(int kind, int a, const dg_conv_shape *s, bool exact)
{
    long long kf = (long long)s->c * s->kh * s->kw, kd = (long long)s->k * s->kh * s->kw;
    if (exact)
        kf = kd = 0;
    switch (kind) {
    case CDN_KIND_FWD:
        return a == CDN_FWD_IMPLICIT_GEMM || a == CDN_FWD_IMPLICIT_PRECOMP_GEMM ||
               a == CDN_FWD_GEMM || (a == CDN_FWD_WINOGRAD && kf >= CDN_WINO_MIN_K);
    case CDN_KIND_DATA:
        return a == CDN_DATA_ALGO_0 || a == CDN_DATA_ALGO_1 ||
               (a == CDN_DATA_WINOGRAD && kd >= CDN_WINO_MIN_K);
    default: return a == CDN_FILTER_ALGO_0 || a == CDN_FILTER_ALGO_1 || a == CDN_FILTER_ALGO_3;
    }
}

/* Picks from n results (Find: timed; heuristics: ranked, time < 0, where the
 * first deterministic one wins). -1 when none fits. */
static int cdn_pick(int kind, const cdn_plan *pl, const cdn_perf *p, int n, bool tensor_ops,
                    size_t cap)
{
    int best = -1, best_det = -1;
    float tb = 0.0f, td = 0.0f;
    bool timed = true;
    for (int i = 0; i < n; i++) {
        if (p[i].status != CDN_STATUS_SUCCESS || p[i].memory > cap ||
            (!tensor_ops && (p[i].math_type == CDN_TENSOR_OP_MATH ||
                             p[i].math_type == CDN_TENSOR_OP_MATH_ALLOW_CONVERSION)) ||
            !cdn_allowed(kind, p[i].algo, &pl->s, pl->carrier))
            continue;
        if (p[i].time < 0.0f)
            timed = false;
        float t = p[i].time >= 0.0f ? p[i].time : (float)i; /* heuristics: rank as time */
        if (best < 0 || t < tb) {
            best = i;
            tb = t;
        }
        if (p[i].determinism == CDN_DETERMINISTIC && (best_det < 0 || t < td)) {
            best_det = i;
            td = t;
        }
    }
    if (best_det >= 0 && (!timed || td <= CDN_DET_SLACK * tb + 0.005f))
        return best_det;
    return best;
}

static size_t cdn_round(size_t b)
{
    return (b + CDN_WS_ALIGN - 1) / CDN_WS_ALIGN * CDN_WS_ALIGN;
}

/* Sets up descriptors and chooses the three algorithms; false with p->why. */
static bool cdn_plan_make(cdn_ctx *d, cdn_plan *p, bool may_find)
{
    const dg_conv_shape *s = &p->s;
    cdn_perf perf[CDN_MAX_ALGOS];
    int got = 0, pick;
    cdnStatus st;
    int dt = p->math == CU_MATH_BF16 && !p->carrier ? CDN_DATA_BFLOAT16 : CDN_DATA_FLOAT;
    bool tensor_ops = p->math != CU_MATH_FP32;

#define CDN_CHECK(call, what)                                                                      \
    do {                                                                                           \
        st = (call);                                                                               \
        if (st != CDN_STATUS_SUCCESS) {                                                            \
            cdn_msg(p->why, sizeof p->why, "%s: %s", what, cdn_err(st));                           \
            return false;                                                                          \
        }                                                                                          \
    } while (0)

    CDN_CHECK(A.create_tensor(&p->xd), "cudnnCreateTensorDescriptor");
    CDN_CHECK(A.create_tensor(&p->yd), "cudnnCreateTensorDescriptor");
    CDN_CHECK(A.create_filter(&p->wd), "cudnnCreateFilterDescriptor");
    CDN_CHECK(A.create_conv(&p->cd), "cudnnCreateConvolutionDescriptor");
    int form = p->nhwc ? CDN_TENSOR_NHWC : CDN_TENSOR_NCHW;
    CDN_CHECK(A.set_tensor4d(p->xd, form, dt, s->n, s->c, s->h, s->w), "x descriptor");
    CDN_CHECK(A.set_tensor4d(p->yd, form, dt, s->n, s->k, s->ho, s->wo), "y descriptor");
    CDN_CHECK(A.set_filter4d(p->wd, dt, form, s->k, s->c, s->kh, s->kw), "w descriptor");
    CDN_CHECK(A.set_conv2d(p->cd, s->pad, s->pad, s->stride, s->stride, 1, 1, CDN_CROSS_CORRELATION,
                           CDN_DATA_FLOAT),
              "conv descriptor");
    /* The compute type stays float: bf16 tensors accumulate in fp32. */
    CDN_CHECK(A.set_math(p->cd, tensor_ops ? CDN_TENSOR_OP_MATH : CDN_FMA_MATH),
              "cudnnSetConvolutionMathType");

    /* Forward. */
    pick = -1;
    if (may_find &&
        A.find_fwd(d->h, p->xd, p->wd, p->cd, p->yd, CDN_MAX_ALGOS, &got, perf) ==
            CDN_STATUS_SUCCESS &&
        (pick = cdn_pick(CDN_KIND_FWD, p, perf, got, tensor_ops, d->ws_cap)) >= 0)
        p->found = true;
    if (pick < 0 && A.get_fwd(d->h, p->xd, p->wd, p->cd, p->yd, CDN_MAX_ALGOS, &got, perf) ==
                        CDN_STATUS_SUCCESS)
        pick = cdn_pick(CDN_KIND_FWD, p, perf, got, tensor_ops, d->ws_cap), p->found = false;
    if (pick < 0) {
        cdn_msg(p->why, sizeof p->why, "no usable forward algorithm");
        return false;
    }
    p->fwd = perf[pick].algo;
    CDN_CHECK(A.ws_fwd(d->h, p->xd, p->wd, p->cd, p->yd, p->fwd, &p->ws_fwd), "forward workspace");

    /* Backward data: (w, dy) -> dx. */
    pick = -1;
    if (may_find && A.find_data(d->h, p->wd, p->yd, p->cd, p->xd, CDN_MAX_ALGOS, &got, perf) ==
                        CDN_STATUS_SUCCESS)
        pick = cdn_pick(CDN_KIND_DATA, p, perf, got, tensor_ops, d->ws_cap);
    if (pick < 0 && A.get_data(d->h, p->wd, p->yd, p->cd, p->xd, CDN_MAX_ALGOS, &got, perf) ==
                        CDN_STATUS_SUCCESS)
        pick = cdn_pick(CDN_KIND_DATA, p, perf, got, tensor_ops, d->ws_cap), p->found = false;
    if (pick < 0) {
        cdn_msg(p->why, sizeof p->why, "no usable backward-data algorithm");
        return false;
    }
    p->data = perf[pick].algo;
    CDN_CHECK(A.ws_data(d->h, p->wd, p->yd, p->cd, p->xd, p->data, &p->ws_data),
              "backward-data workspace");

    /* Backward filter: (x, dy) -> dw. */
    pick = -1;
    if (may_find && A.find_filter(d->h, p->xd, p->yd, p->cd, p->wd, CDN_MAX_ALGOS, &got, perf) ==
                        CDN_STATUS_SUCCESS)
        pick = cdn_pick(CDN_KIND_FILTER, p, perf, got, tensor_ops, d->ws_cap);
    if (pick < 0 && A.get_filter(d->h, p->xd, p->yd, p->cd, p->wd, CDN_MAX_ALGOS, &got, perf) ==
                        CDN_STATUS_SUCCESS)
        pick = cdn_pick(CDN_KIND_FILTER, p, perf, got, tensor_ops, d->ws_cap), p->found = false;
    if (pick < 0) {
        cdn_msg(p->why, sizeof p->why, "no usable backward-filter algorithm");
        return false;
    }
    p->filter = perf[pick].algo;
    CDN_CHECK(A.ws_filter(d->h, p->xd, p->yd, p->cd, p->wd, p->filter, &p->ws_filter),
              "backward-filter workspace");
#undef CDN_CHECK

    size_t m = p->ws_fwd;
    if (p->ws_data > m)
        m = p->ws_data;
    if (p->ws_filter > m)
        m = p->ws_filter;
    if (m > d->ws_cap) {
        cdn_msg(p->why, sizeof p->why, "workspace of %zu bytes", m);
        return false;
    }
    p->ws = cdn_round(m);
    return true;
}

/* DEVGATE_CUDA_BF16_CONV: 0 auto, 1 bf16 tensors, 2 the TF32 carrier. */
static int cdn_bf16_route(void)
{
    const char *v = getenv("DEVGATE_CUDA_BF16_CONV");
    return v && strcmp(v, "bf16") == 0 ? 1 : v && strcmp(v, "tf32") == 0 ? 2 : 0;
}

/* DEVGATE_CUDA_BF16_LAYOUT: whether bf16 tensors are channels-last (nhwc,
 * the default) or as the engine holds them (nchw). On the H200 cifar's bf16
 * step took 1.26/4.01/13.80 ms at batch 256/1024/4096 channels-last, 2.13/
 * 5.83/16.77 in NCHW (docs/evidence/h200-bf16-layout-20261203.log). */
static bool cdn_bf16_nhwc(void)
{
    const char *v = getenv("DEVGATE_CUDA_BF16_LAYOUT");
    return !(v && strcmp(v, "nchw") == 0);
}

/* Makes p (shape and math set) on cuDNN; in bf16 mode on the TF32 carrier
 * when the route says so, or under auto when a channel count is not a
 * multiple of 8: bf16 tensor-core kernels want multiples of 8, and lenet's
 * convolutions (1>6, 6>16) ran 6.5x slower on bf16 tensors than on the
 * carrier on the H200, while cifar's aligned ones ran 1.2x faster on bf16
 * tensors. Find's own times (cuDNN's alone, without the casts around them)
 * picked the carrier where the whole step was slower with it, so they do not
 * decide (docs/evidence/h200-precprof-20261202-s9.log). */
static void cdn_plan_choose(cdn_ctx *d, cdn_plan *p, bool may_find)
{
    int route = p->math == CU_MATH_BF16 ? cdn_bf16_route() : 1;
    p->carrier = route == 2 || (route == 0 && (p->s.c % 8 != 0 || p->s.k % 8 != 0));
    p->nhwc = p->math == CU_MATH_BF16 && !p->carrier && cdn_bf16_nhwc();
    p->ok = cdn_plan_make(d, p, may_find);
    if (!p->ok && p->nhwc) { /* cuDNN declined channels-last: the engine's layout then */
        cdn_plan_free(p);
        cudaGetLastError();
        p->nhwc = false;
        p->ok = cdn_plan_make(d, p, may_find);
    }
}

/* The plan of s, made (and kept) on first use. NULL only when out of host memory. */
static cdn_plan *cdn_plan_of(cdn_ctx *d, const dg_conv_shape *s, bool may_find)
{
    for (int i = 0; i < d->nplans; i++)
        if (d->plans[i].math == d->math && cdn_same(&d->plans[i].s, s))
            return &d->plans[i];
    if (d->nplans == d->cap) {
        int cap = d->cap ? 2 * d->cap : 8;
        cdn_plan *np = (cdn_plan *)realloc(d->plans, (size_t)cap * sizeof *np);
        if (!np)
            return NULL;
        d->plans = np;
        d->cap = cap;
    }
    cdn_plan *p = &d->plans[d->nplans++];
    memset(p, 0, sizeof *p);
    p->s = *s;
    p->math = d->math;
    cdn_plan_choose(d, p, may_find);
    if (!p->ok) {
        cdn_plan_free(p);
        cudaGetLastError(); /* a failed Find may leave a (non-sticky) runtime error behind */
    }
    return p;
}

/* Whether s's bf16 plan runs on the TF32 carrier (fp32 tensors of bf16-rounded values). */
CDN_HIDDEN bool cdn_carrier(cdn_ctx *d, const dg_conv_shape *s)
{
    cdn_plan *p = d ? cdn_plan_of(d, s, false) : NULL;
    return p && p->ok && p->carrier;
}

/* Whether s's bf16 plan runs on channels-last bf16 copies (see cdn_plan.nhwc). */
CDN_HIDDEN bool cdn_nhwc(cdn_ctx *d, const dg_conv_shape *s)
{
    cdn_plan *p = d ? cdn_plan_of(d, s, false) : NULL;
    return p && p->ok && p->nhwc;
}

/* DG_OK and *ws when cuDNN runs s (choosing its algorithms on first sight:
 * with Find when may_find, else from the heuristics); DG_ERR_UNAVAILABLE when
 * s stays on the im2col path. */
CDN_HIDDEN dg_status cdn_plan_shape(cdn_ctx *d, const dg_conv_shape *s, bool may_find, size_t *ws)
{
    cdn_plan *p = cdn_plan_of(d, s, may_find);
    if (!p || !p->ok)
        return DG_ERR_UNAVAILABLE;
    *ws = p->ws;
    return DG_OK;
}

/* y = conv(x, w) with s's plan (cdn_plan_shape returned DG_OK for s). */
CDN_HIDDEN dg_status cdn_conv_fwd(cdn_ctx *d, const dg_conv_shape *s, const void *x, const void *w,
                                  void *y, void *work, char *err, size_t len)
{
    const float one = 1.0f, zero = 0.0f;
    cdn_plan *p = cdn_plan_of(d, s, false);
    if (!p || !p->ok) {
        cdn_msg(err, len, "no cuDNN plan for this shape");
        return DG_ERR_BACKEND;
    }
    cdnStatus st = A.fwd(d->h, &one, p->xd, x, p->wd, w, p->cd, p->fwd, p->ws_fwd ? work : NULL,
                         p->ws_fwd, &zero, p->yd, y);
    if (st != CDN_STATUS_SUCCESS) {
        cdn_msg(err, len, "cudnnConvolutionForward (%s): %s", cdn_fwd_names[p->fwd], cdn_err(st));
        return DG_ERR_BACKEND;
    }
    return DG_OK;
}

/* dw = conv_filter_grad(x, dy); dx = conv_data_grad(w, dy) when dx is not NULL. */
CDN_HIDDEN dg_status cdn_conv_bwd(cdn_ctx *d, const dg_conv_shape *s, const void *x, const void *w,
                                  const void *dy, void *dx, void *dw, void *work, char *err,
                                  size_t len)
{
    const float one = 1.0f, zero = 0.0f;
    cdn_plan *p = cdn_plan_of(d, s, false);
    cdnStatus st;
    if (!p || !p->ok) {
        cdn_msg(err, len, "no cuDNN plan for this shape");
        return DG_ERR_BACKEND;
    }
    st = A.filter(d->h, &one, p->xd, x, p->yd, dy, p->cd, p->filter, p->ws_filter ? work : NULL,
                  p->ws_filter, &zero, p->wd, dw);
    if (st != CDN_STATUS_SUCCESS) {
        cdn_msg(err, len, "cudnnConvolutionBackwardFilter (%s): %s", cdn_filter_names[p->filter],
                cdn_err(st));
        return DG_ERR_BACKEND;
    }
    if (!dx)
        return DG_OK;
    st = A.data(d->h, &one, p->wd, w, p->yd, dy, p->cd, p->data, p->ws_data ? work : NULL,
                p->ws_data, &zero, p->xd, dx);
    if (st != CDN_STATUS_SUCCESS) {
        cdn_msg(err, len, "cudnnConvolutionBackwardData (%s): %s", cdn_data_names[p->data],
                cdn_err(st));
        return DG_ERR_BACKEND;
    }
    return DG_OK;
}

/* Appends the plans, "; conv n1024 c32>32 32x32 k3x3: fwd A, data B, filter C (found)",
 * to buf (already holding text); truncates quietly. */
CDN_HIDDEN void cdn_describe(cdn_ctx *d, char *buf, size_t len)
{
    size_t used = strlen(buf);
    for (int i = 0; d && i < d->nplans && used + 1 < len; i++) {
        const cdn_plan *p = &d->plans[i];
        const dg_conv_shape *s = &p->s;
        int n;
        if (p->ok)
            n = snprintf(buf + used, len - used,
                         "; conv n%d c%d>%d %dx%d k%dx%d s%d: fwd %s, data %s, filter %s (%s%s)",
                         s->n, s->c, s->k, s->h, s->w, s->kh, s->kw, s->stride,
                         cdn_fwd_names[p->fwd], cdn_data_names[p->data],
                         cdn_filter_names[p->filter], p->found ? "timed" : "heuristic",
                         p->math == CU_MATH_TF32   ? ", tf32"
                         : p->math != CU_MATH_BF16 ? ""
                         : p->carrier              ? ", bf16 inputs on tf32 math"
                         : p->nhwc                 ? ", bf16 nhwc"
                                                   : ", bf16");
        else
            n = snprintf(buf + used, len - used, "; conv n%d c%d>%d %dx%d k%dx%d s%d: im2col (%s)",
                         s->n, s->c, s->k, s->h, s->w, s->kh, s->kw, s->stride, p->why);
        if (n < 0)
            return;
        used += (size_t)n < len - used ? (size_t)n : len - used - 1;
    }
}
