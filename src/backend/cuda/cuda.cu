/* CUDA backend plug-in: the runtime API for devices, memory and streams, cuBLAS
 * for matrix products, and kernels of its own for the training ops of
 * interface v2. devgate dlopens this object and finds it through its one
 * exported symbol (DG_PLUGIN_SYMBOL); it calls nothing of the devgate library,
 * keeps its messages in its own context and never prints or exits.
 * Kept in C style; it is C++ only because nvcc compiles it.
 *
 * Buffers are small host records (cu_buf) holding the device address and the
 * size, so every op checks each ref (4-byte aligned, extent inside the buffer)
 * before anything is launched. Ops only enqueue work on the context's stream:
 * no allocation, no synchronisation and no host read of device memory, so a
 * whole training step can be captured into a CUDA graph and replayed.
 * Reductions (bias_grad, xent, conv dW) run in a fixed order without float
 * atomics, so results are bitwise repeatable run to run.
 *
 * Convolutions run on cuDNN when it can be loaded at run time (cudnn_conv.cu
 * dlopens it; the plug-in does not link it), else on im2col + cuBLAS below.
 * DEVGATE_CUDA_CONV=im2col|cudnn|auto (read at init) forces a path: im2col
 * never loads cuDNN, cudnn makes init fail when cuDNN is not usable, auto (the
 * default) uses cuDNN when it loads. A shape cuDNN declines stays on im2col. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backend/backend.h"
#include "cuda_bf16.h"

#define CU_BUF_MAGIC 0x64674355u        /* "UCgd" */
#define CU_BLAS_WORKSPACE (32u << 20)   /* cuBLAS workspace: Hopper's recommendation */
#define CU_CONV_CAP ((size_t)256 << 20) /* conv workspace bytes before batching in chunks */
#define CU_THREADS 256
#define CU_MAX_BLOCKS 65536
#define CU_XENT_WARPS 8     /* rows in flight per xent block (one warp each) */
#define CU_XENT_BLOCKS 1024 /* xent blocks at most; each writes one partial */
#define CU_BG_PARTS 65536   /* bias_grad partial sums (doubles) in the context's scratch */
#define CU_BG_TARGET 1024   /* bias_grad blocks aimed at (channels x slices) */

/* Which convolution path a context uses (DEVGATE_CUDA_CONV). */
enum { CU_CONV_AUTO, CU_CONV_IM2COL, CU_CONV_CUDNN };

/* Page-locked host blocks a context hands out at most (a loader slot each). */
#define CU_PIN_BLOCKS 64

/* A page-locked host block (host_alloc) with its device staging twin: an
 * upload from it copies into the twin on the copy stream, so the next batch
 * travels while the compute stream still runs the step before; the compute
 * stream then takes it from the twin with a device-to-device copy. */
typedef struct cu_pin {
    void *host;  /* cudaHostAlloc; NULL: slot free */
    void *stage; /* device twin, same size */
    size_t bytes;
    cudaEvent_t copied; /* copy stream, after the last upload from the block */
    cudaEvent_t used;   /* compute stream, after the last copy out of the twin */
    bool pending;       /* copied recorded and not yet waited for */
    bool in_use;        /* used recorded */
} cu_pin;

/* A device allocation with its size; what dg_ref.buf points at on this backend. */
typedef struct cu_buf {
    uint32_t magic; /* CU_BUF_MAGIC while live */
    size_t bytes;   /* as requested */
    void *p;        /* device address */
} cu_buf;

typedef struct cu_ctx {
    int device;
    int driver_ver;  /* cudaDriverGetVersion, e.g. 13000 */
    int runtime_ver; /* cudaRuntimeGetVersion */
    cudaStream_t stream;
    cudaStream_t copy; /* uploads from page-locked blocks; created with the first block */
    cu_pin pin[CU_PIN_BLOCKS];
    cublasHandle_t blas;
    void *blas_ws;     /* cuBLAS workspace (CU_BLAS_WORKSPACE bytes) */
    double *xent_part; /* xent per-block partials: 2 * CU_XENT_BLOCKS */
    double *bg_part;   /* bias_grad per-slice partials: CU_BG_PARTS */
    int conv_mode;     /* CU_CONV_* from DEVGATE_CUDA_CONV */
    cdn_ctx *dnn;      /* cuDNN for conv2d; NULL: im2col only */
    char dnn_why[200]; /* why dnn is NULL */
    cudaEvent_t ev[DG_EVENT_SLOTS];
    bool ev_recorded[DG_EVENT_SLOTS];
    bool capturing;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    int math;       /* CU_MATH_* (set_math) */
    cbf_scratch bf; /* bf16 copies of a GEMM's operands (CU_MATH_BF16) */
    char err[512];
} cu_ctx;

/* Formats a message into buf (snprintf semantics, tolerates NULL/0). */
static void cu_vformat(char *buf, size_t len, const char *fmt, va_list ap)
{
    if (buf && len > 0)
        vsnprintf(buf, len, fmt, ap);
}

/* Records a message on c (when there is one) and returns st. */
static dg_status cu_fail(cu_ctx *c, dg_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (c)
        cu_vformat(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return st;
}

/* Writes a message into reason and returns st (init's failures). */
static dg_status cu_reason(char *reason, size_t len, dg_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cu_vformat(reason, len, fmt, ap);
    va_end(ap);
    return st;
}

/* Records a CUDA runtime error "what: name: text" on c; returns st. */
static dg_status cu_fail_rt(cu_ctx *c, dg_status st, const char *what, cudaError_t e)
{
    return cu_fail(c, st, "cuda: %s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Records a cuBLAS error "what: name: text" on c; returns DG_ERR_BACKEND. */
static dg_status cu_fail_blas(cu_ctx *c, const char *what, cublasStatus_t s)
{
    return cu_fail(c, DG_ERR_BACKEND, "cuda: %s: %s: %s", what, cublasGetStatusName(s),
                   cublasGetStatusString(s));
}

/* "13.0" from a CUDA version number such as 13000 ("none" for 0). */
static void cu_ver_str(int v, char *buf, size_t len)
{
    if (v <= 0)
        snprintf(buf, len, "none");
    else
        snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

/* Makes the context's device current on the calling thread. */
static dg_status cu_bind(cu_ctx *c)
{
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess)
        return cu_fail_rt(c, DG_ERR_BACKEND, "cudaSetDevice", e);
    return DG_OK;
}

/* Common entry of every op: a context, its device current. */
static dg_status cu_enter(cu_ctx *c)
{
    if (!c)
        return DG_ERR_USAGE;
    return cu_bind(c);
}

/* After kernel launches: the cheap launch-error check (no synchronisation). */
static dg_status cu_launched(cu_ctx *c, const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return cu_fail_rt(c, DG_ERR_BACKEND, what, e);
    return DG_OK;
}

/* Blocks for a grid-stride loop over count elements (count > 0). */
static unsigned cu_blocks(size_t count)
{
    size_t b = (count + CU_THREADS - 1) / CU_THREADS;
    if (b > CU_MAX_BLOCKS)
        b = CU_MAX_BLOCKS;
    return (unsigned)(b ? b : 1);
}

/* *out = a * b * c * d; false on size_t overflow or a negative factor. */
static bool cu_prod(size_t *out, long long a, long long b, long long c, long long d)
{
    size_t r;
    if (a < 0 || b < 0 || c < 0 || d < 0)
        return false;
    if (__builtin_mul_overflow((size_t)a, (size_t)b, &r) ||
        __builtin_mul_overflow(r, (size_t)c, &r) || __builtin_mul_overflow(r, (size_t)d, &r))
        return false;
    *out = r;
    return true;
}

/* Elements a rows x cols matrix with leading dimension ld spans (0 when empty). */
static size_t cu_extent(int rows, int cols, int ld)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    return (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
}

/* Checks that r holds count 4-byte elements inside a live buffer, 4-byte
 * aligned; *out = their device address. DG_ERR_USAGE (with a message) otherwise. */
static dg_status cu_ref(cu_ctx *c, const char *op, const char *what, dg_ref r, size_t count,
                        void **out)
{
    const cu_buf *b = (const cu_buf *)r.buf;

    *out = NULL;
    if (!b)
        return cu_fail(c, DG_ERR_USAGE, "cuda: %s: %s: NULL buffer", op, what);
    if (b->magic != CU_BUF_MAGIC)
        return cu_fail(c, DG_ERR_USAGE, "cuda: %s: %s: not a live cuda buffer", op, what);
    if (r.off % 4 != 0)
        return cu_fail(c, DG_ERR_USAGE, "cuda: %s: %s: byte offset %zu is not 4-byte aligned", op,
                       what, r.off);
    if (r.off > b->bytes || count > (b->bytes - r.off) / 4)
        return cu_fail(c, DG_ERR_USAGE,
                       "cuda: %s: %s: %zu elements at byte offset %zu exceed the %zu-byte buffer",
                       op, what, count, r.off, b->bytes);
    *out = (char *)b->p + r.off;
    return DG_OK;
}

/* cu_ref for a ref that may be absent (buf NULL): *out = NULL then. */
static dg_status cu_ref_opt(cu_ctx *c, const char *op, const char *what, dg_ref r, size_t count,
                            void **out)
{
    *out = NULL;
    if (!r.buf)
        return DG_OK;
    return cu_ref(c, op, what, r, count, out);
}

/* Refuses calls that would synchronise or allocate while a capture is open. */
static dg_status cu_not_capturing(cu_ctx *c, const char *what)
{
    if (c->capturing)
        return cu_fail(c, DG_ERR_USAGE, "cuda: %s: not allowed while a capture is open", what);
    return DG_OK;
}

/* ---- kernels -------------------------------------------------------------------- */

#define CU_GRID_LOOP(i, n)                                                                         \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

__global__ void k_fill(float *x, size_t n, float v)
{
    CU_GRID_LOOP(i, n)
    x[i] = v;
}

/* y[o, ch, i] += bias[ch]; inner == 1 is the common linear-layer case. */
__global__ void k_bias_add(float *y, const float *bias, size_t n, unsigned channels, unsigned inner,
                           bool relu)
{
    CU_GRID_LOOP(i, n)
    {
        float v = y[i] + bias[(i / inner) % channels];
        y[i] = relu ? cu_relu(v) : v;
    }
}

/* The same for planes of inner >= 32 (conv outputs): blocks stride over the
 * outer*channels planes, threads over a plane; no 64-bit division per element. */
__global__ void k_bias_add_plane(float *y, const float *bias, unsigned planes, unsigned channels,
                                 unsigned inner, bool relu)
{
    for (unsigned pl = blockIdx.x; pl < planes; pl += gridDim.x) {
        float b = bias[pl % channels];
        float *p = y + (size_t)pl * inner;
        for (unsigned i = threadIdx.x; i < inner; i += blockDim.x) {
            float v = p[i] + b;
            p[i] = relu ? cu_relu(v) : v;
        }
    }
}

/* gemm_ep's epilogue on row-major C[m, n] (leading dimension ldc): + bias[col],
 * ReLU, then the mask (laid out as C): the unfused bias_add, relu_fwd and
 * relu_bwd's arithmetic, so the results are the same bits. Blocks stride over
 * rows (y) and columns (x): no division per element. */
__global__ void k_gemm_ep(float *c, int m, int n, int ldc, const float *bias, bool relu,
                          const float *mask)
{
    for (int r = blockIdx.y; r < m; r += gridDim.y) {
        float *row = c + (size_t)r * ldc;
        const float *mrow = mask ? mask + (size_t)r * ldc : NULL;
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x) {
            float v = row[j];
            if (bias)
                v += bias[j];
            if (relu)
                v = cu_relu(v);
            if (mrow)
                v = mrow[j] > 0.0f ? v : 0.0f;
            row[j] = v;
        }
    }
}

/* db[ch] = sum over rows of dy[o, ch] (inner == 1): a block of 32 x 16 threads
 * per 32 channels, x along channels (coalesced), y striding rows; fixed order. */
__global__ void k_bias_grad_rows(const float *dy, float *db, int outer, int channels)
{
    __shared__ double part[16][33];
    int ch = blockIdx.x * 32 + threadIdx.x;
    double s = 0.0;

    if (ch < channels)
        for (int o = threadIdx.y; o < outer; o += 16)
            s += dy[(size_t)o * channels + ch];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && ch < channels) {
        double t = 0.0;
        for (int r = 0; r < 16; r++)
            t += part[r][threadIdx.x];
        db[ch] = (float)t;
    }
}

/* k_bias_grad_rows over slice blockIdx.y of `slices` equal slices of the rows,
 * into part[ch * slices + sl] (k_bias_grad_fin adds them in slice order): a
 * tall dy (a large batch through an fc layer) then spreads over many blocks
 * instead of channels / 32. */
__global__ void k_bias_grad_rows_part(const float *dy, double *part, int outer, int channels,
                                      int slices)
{
    __shared__ double sh[16][33];
    int ch = blockIdx.x * 32 + threadIdx.x, sl = blockIdx.y;
    int o0 = (int)((long long)outer * sl / slices);
    int o1 = (int)((long long)outer * (sl + 1) / slices);
    double s = 0.0;

    if (ch < channels)
        for (int o = o0 + threadIdx.y; o < o1; o += 16)
            s += dy[(size_t)o * channels + ch];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && ch < channels) {
        double t = 0.0;
        for (int r = 0; r < 16; r++)
            t += sh[r][threadIdx.x];
        part[(size_t)ch * slices + sl] = t;
    }
}

#define CU_BG_THREADS 256
/* Partial sums of db over slices of the outer index: block (ch, sl) adds
 * dy[o, ch, i] for o in slice sl of `slices` equal slices, each thread in a
 * fixed order, then a shared-memory tree in double, into part[ch * slices + sl]
 * (or, with db given and one slice, straight into db[ch]). */
__global__ void k_bias_grad_part(const float *dy, double *part, float *db, int outer, int channels,
                                 int inner, int slices)
{
    __shared__ double sh[CU_BG_THREADS];
    int ch = blockIdx.x, sl = blockIdx.y, t = threadIdx.x;
    int o0 = (int)((long long)outer * sl / slices);
    int o1 = (int)((long long)outer * (sl + 1) / slices);
    double s = 0.0;

    for (int o = o0; o < o1; o++) {
        const float *p = dy + ((size_t)o * channels + ch) * inner;
        for (int i = t; i < inner; i += CU_BG_THREADS)
            s += p[i];
    }
    sh[t] = s;
    __syncthreads();
    for (int w = CU_BG_THREADS / 2; w > 0; w >>= 1) {
        if (t < w)
            sh[t] += sh[t + w];
        __syncthreads();
    }
    if (t == 0) {
        if (db)
            db[ch] = (float)sh[0];
        else
            part[(size_t)ch * slices + sl] = sh[0];
    }
}

/* db[ch] = the channel's partials added in slice order. */
__global__ void k_bias_grad_fin(const double *part, float *db, int channels, int slices)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= channels)
        return;
    double s = 0.0;
    for (int i = 0; i < slices; i++)
        s += part[(size_t)ch * slices + i];
    db[ch] = (float)s;
}

__global__ void k_relu_fwd(const float *x, float *y, size_t n)
{
    CU_GRID_LOOP(i, n)
    y[i] = cu_relu(x[i]);
}

__global__ void k_relu_bwd(const float *y, const float *dy, float *dx, size_t n)
{
    CU_GRID_LOOP(i, n)
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

/* One thread per output: window max, argmax = iy*w+ix, first max on ties.
 * I is the index type: unsigned (cheap division) when n < 2^31, else size_t. */
template <typename I>
__global__ void k_maxpool_fwd(const float *x, float *y, int *am, I n, int h, int w, int k, int s,
                              int ho, int wo)
{
    for (I idx = (I)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (I)gridDim.x * blockDim.x) {
        int ox = (int)(idx % (I)wo);
        I t = idx / (I)wo;
        int oy = (int)(t % (I)ho);
        size_t pl = t / (I)ho;
        const float *xp = x + pl * (size_t)h * w;
        int iy0 = oy * s, ix0 = ox * s;
        int bi = iy0 * w + ix0;
        float best = xp[bi];
        for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++) {
                int j = (iy0 + ky) * w + ix0 + kx;
                float v = xp[j];
                if (v > best) {
                    best = v;
                    bi = j;
                }
            }
        y[idx] = best;
        am[idx] = bi;
    }
}

/* Gather: each dx element sums dy of the windows covering it whose argmax
 * names it, in window order (deterministic, no atomics). I as above. */
template <typename I>
__global__ void k_maxpool_bwd(const float *dy, const int *am, float *dx, I n, int h, int w, int k,
                              int s, int ho, int wo)
{
    for (I idx = (I)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (I)gridDim.x * blockDim.x) {
        int ix = (int)(idx % (I)w);
        I t = idx / (I)w;
        int iy = (int)(t % (I)h);
        size_t pl = t / (I)h;
        int me = iy * w + ix;
        int oy0 = iy - k + 1 <= 0 ? 0 : (iy - k + 1 + s - 1) / s;
        int ox0 = ix - k + 1 <= 0 ? 0 : (ix - k + 1 + s - 1) / s;
        int oy1 = min(iy / s, ho - 1), ox1 = min(ix / s, wo - 1);
        const float *dp = dy + pl * (size_t)ho * wo;
        const int *ap = am + pl * (size_t)ho * wo;
        float sum = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++)
                if (ap[oy * wo + ox] == me)
                    sum += dp[oy * wo + ox];
        dx[idx] = sum;
    }
}

/* Convolution geometry passed to the conv kernels (one chunk of cn images). */
typedef struct cu_conv_geo {
    int cn, c, h, w, k, kh, kw, stride, pad, ho, wo;
} cu_conv_geo;

/* col[r, i*P + p] = x[i, ci, oy*s-pad+ky, ox*s-pad+kx] (0 outside), r =
 * (ci*kh+ky)*kw+kx, P = ho*wo: the chunk's column matrix, rows of length cn*P. */
__global__ void k_im2col(const float *x, float *col, cu_conv_geo g)
{
    unsigned P = (unsigned)(g.ho * g.wo), L = (unsigned)g.cn * P;
    unsigned total = (unsigned)(g.c * g.kh * g.kw) * L;
    for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += gridDim.x * blockDim.x) {
        unsigned q = e % L, r = e / L;
        unsigned i = q / P, p = q - i * P;
        int oy = (int)(p / g.wo), ox = (int)(p % g.wo);
        int kx = (int)(r % g.kw), t = (int)(r / g.kw);
        int ky = t % g.kh, ci = t / g.kh;
        int iy = oy * g.stride - g.pad + ky, ix = ox * g.stride - g.pad + kx;
        float v = 0.0f;
        if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
            v = x[(((size_t)i * g.c + ci) * g.h + iy) * g.w + ix];
        col[e] = v;
    }
}

/* dyT[kk, i*P + p] = dy[i, kk, p] for the chunk. */
__global__ void k_dy_transpose(const float *dy, float *dyt, cu_conv_geo g)
{
    unsigned P = (unsigned)(g.ho * g.wo), L = (unsigned)g.cn * P;
    unsigned total = (unsigned)g.k * L;
    for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += gridDim.x * blockDim.x) {
        unsigned q = e % L, kk = e / L;
        unsigned i = q / P, p = q - i * P;
        dyt[e] = dy[((size_t)i * g.k + kk) * P + p];
    }
}

/* Gather form of col2im: dx[i, ci, y, x] = sum of the column entries that
 * im2col copied from (y, x), in (ky, kx) order; no atomics. */
__global__ void k_col2im(const float *col, float *dx, cu_conv_geo g)
{
    unsigned P = (unsigned)(g.ho * g.wo), L = (unsigned)g.cn * P;
    unsigned total = (unsigned)(g.cn * g.c * g.h * g.w);
    for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += gridDim.x * blockDim.x) {
        int ix = (int)(e % g.w);
        unsigned t = e / g.w;
        int iy = (int)(t % g.h);
        t /= g.h;
        int ci = (int)(t % g.c);
        unsigned i = t / g.c;
        float sum = 0.0f;
        for (int ky = 0; ky < g.kh; ky++) {
            int ty = iy + g.pad - ky;
            if (ty < 0)
                break;
            if (ty % g.stride)
                continue;
            int oy = ty / g.stride;
            if (oy >= g.ho)
                continue;
            for (int kx = 0; kx < g.kw; kx++) {
                int tx = ix + g.pad - kx;
                if (tx < 0)
                    break;
                if (tx % g.stride)
                    continue;
                int ox = tx / g.stride;
                if (ox >= g.wo)
                    continue;
                unsigned r = (unsigned)((ci * g.kh + ky) * g.kw + kx);
                sum += col[(size_t)r * L + i * P + (unsigned)(oy * g.wo + ox)];
            }
        }
        dx[e] = sum;
    }
}

/* Softmax cross-entropy, one warp per row, rows strided over the grid. Each
 * warp sums its rows' loss and hits in order; the block adds its warps in
 * order into part[2*block], part[2*block+1]. Bad labels: zero row, no loss. */
__global__ void k_xent(const float *logits, const int *labels, float *dl, int n, int classes,
                       double *part)
{
    __shared__ double sl[CU_XENT_WARPS], sc[CU_XENT_WARPS];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    double loss = 0.0, corr = 0.0;
    float fn = (float)n;

    for (int r = blockIdx.x * CU_XENT_WARPS + wid; r < n; r += gridDim.x * CU_XENT_WARPS) {
        const float *x = logits + (size_t)r * classes;
        float *d = dl + (size_t)r * classes;
        int lab = labels[r];
        if (lab < 0 || lab >= classes) {
            for (int j = lane; j < classes; j += 32)
                d[j] = 0.0f;
            continue;
        }
        /* First argmax: each lane's first max, then the smallest index among equal maxima. */
        float mx = 0.0f;
        int am = INT_MAX;
        for (int j = lane; j < classes; j += 32) {
            float v = x[j];
            if (am == INT_MAX || v > mx) {
                mx = v;
                am = j;
            }
        }
        for (int off = 16; off > 0; off >>= 1) {
            float om = __shfl_xor_sync(0xffffffffu, mx, off);
            int oa = __shfl_xor_sync(0xffffffffu, am, off);
            if (oa != INT_MAX && (am == INT_MAX || om > mx || (om == mx && oa < am))) {
                mx = om;
                am = oa;
            }
        }
        float xl = x[lab]; /* read before any lane writes d (which may alias x) */
        float se = 0.0f;
        for (int j = lane; j < classes; j += 32)
            se += expf(x[j] - mx);
        for (int off = 16; off > 0; off >>= 1)
            se += __shfl_xor_sync(0xffffffffu, se, off); /* commutative: equal in all lanes */
        float inv = 1.0f / se;
        for (int j = lane; j < classes; j += 32) {
            float p = expf(x[j] - mx) * inv;
            d[j] = (p - (j == lab ? 1.0f : 0.0f)) / fn;
        }
        if (lane == 0) {
            loss += (double)(logf(se) - (xl - mx));
            corr += am == lab ? 1.0 : 0.0;
        }
    }
    if (lane == 0) {
        sl[wid] = loss;
        sc[wid] = corr;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double a = 0.0, b = 0.0;
        for (int i = 0; i < CU_XENT_WARPS; i++) {
            a += sl[i];
            b += sc[i];
        }
        part[2 * blockIdx.x] = a;
        part[2 * blockIdx.x + 1] = b;
    }
}

/* One block of CU_XENT_BLOCKS threads: tree over the partials in fixed order,
 * then acc[0] += sum / n and acc[1] += hits. */
__global__ void k_xent_reduce(const double *part, int nb, int n, float *acc)
{
    __shared__ double sl[CU_XENT_BLOCKS], sc[CU_XENT_BLOCKS];
    int t = threadIdx.x;

    sl[t] = t < nb ? part[2 * t] : 0.0;
    sc[t] = t < nb ? part[2 * t + 1] : 0.0;
    __syncthreads();
    for (int w = CU_XENT_BLOCKS / 2; w > 0; w >>= 1) {
        if (t < w) {
            sl[t] += sl[t + w];
            sc[t] += sc[t + w];
        }
        __syncthreads();
    }
    if (t == 0) {
        acc[0] += (float)(sl[0] / n);
        acc[1] += (float)sc[0];
    }
}

/* PyTorch SGD; mom NULL when momentum == 0. */
__global__ void k_sgd(float *w, const float *g, float *mom, size_t n, float lr, float momentum,
                      float wd)
{
    CU_GRID_LOOP(i, n)
    {
        float d = g[i];
        if (wd != 0.0f)
            d += wd * w[i];
        if (mom) {
            float v = momentum * mom[i] + d;
            mom[i] = v;
            w[i] -= lr * v;
        } else {
            w[i] -= lr * d;
        }
    }
}

/* ---- context -------------------------------------------------------------------- */

/* Frees one page-locked block, its twin and events (after their work). */
static void cu_pin_release(cu_pin *b)
{
    if (b->pending)
        cudaEventSynchronize(b->copied);
    if (b->in_use)
        cudaEventSynchronize(b->used);
    if (b->copied)
        cudaEventDestroy(b->copied);
    if (b->used)
        cudaEventDestroy(b->used);
    if (b->stage)
        cudaFree(b->stage);
    if (b->host)
        cudaFreeHost(b->host);
    memset(b, 0, sizeof *b);
}

static void cu_pin_release_all(cu_ctx *c)
{
    for (int i = 0; i < CU_PIN_BLOCKS; i++)
        if (c->pin[i].host)
            cu_pin_release(&c->pin[i]);
}

/* Drops the instantiated graph and the captured graph, if any. */
static void cu_drop_graph(cu_ctx *c)
{
    if (c->exec)
        cudaGraphExecDestroy(c->exec);
    if (c->graph)
        cudaGraphDestroy(c->graph);
    c->exec = NULL;
    c->graph = NULL;
}

/* Releases everything init created; accepts NULL. */
static void cu_free(void *ctx)
{
    cu_ctx *c = (cu_ctx *)ctx;
    if (!c)
        return;
    cudaSetDevice(c->device);
    if (c->capturing && c->stream) {
        cudaGraph_t g = NULL;
        cudaStreamEndCapture(c->stream, &g);
        if (g)
            cudaGraphDestroy(g);
        c->capturing = false;
    }
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    if (c->copy)
        cudaStreamSynchronize(c->copy);
    cu_pin_release_all(c);
    cu_drop_graph(c);
    cbf_scratch_free(&c->bf);
    for (int i = 0; i < DG_EVENT_SLOTS; i++)
        if (c->ev[i])
            cudaEventDestroy(c->ev[i]);
    cdn_close(c->dnn);
    if (c->blas)
        cublasDestroy(c->blas);
    if (c->blas_ws)
        cudaFree(c->blas_ws);
    if (c->xent_part)
        cudaFree(c->xent_part);
    if (c->bg_part)
        cudaFree(c->bg_part);
    if (c->copy)
        cudaStreamDestroy(c->copy);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    cudaGetLastError();
    free(c);
}

/* DEVGATE_CUDA_CONV as a CU_CONV_* value; -1 for a value it does not know. */
static int cu_conv_mode_env(void)
{
    const char *v = getenv("DEVGATE_CUDA_CONV");
    if (!v || !*v || strcmp(v, "auto") == 0)
        return CU_CONV_AUTO;
    if (strcmp(v, "im2col") == 0)
        return CU_CONV_IM2COL;
    if (strcmp(v, "cudnn") == 0)
        return CU_CONV_CUDNN;
    return -1;
}

/* The backend's other knobs and the words each takes (unset or empty: the
 * default). false when every one is set to a word it knows, else true with
 * the first other one's name in `name` and its words in `expect`. They are
 * read where they act, so tests can switch them between calls. */
static bool cu_knob_unknown(char *name, size_t nlen, char *expect, size_t len)
{
    static const char *const knobs[] = {
        "DEVGATE_CUDA_FUSE=on|off", "DEVGATE_CUDA_BF16_CONV=auto|bf16|tf32",
        "DEVGATE_CUDA_BF16_GEMM=fast|cast", "DEVGATE_CUDA_BF16_LAYOUT=nhwc|nchw"};
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++) {
        const char *eq = strchr(knobs[i], '=');
        snprintf(name, nlen, "%.*s", (int)(eq - knobs[i]), knobs[i]);
        const char *v = getenv(name), *w = eq + 1;
        bool known = !v || !*v;
        for (size_t k; !known; w += k + 1) { /* each word of "a|b|c" */
            k = strcspn(w, "|");
            known = k == strlen(v) && strncmp(w, v, k) == 0;
            if (!w[k])
                break;
        }
        if (!known) {
            snprintf(expect, len, "%s", eq + 1);
            return true;
        }
    }
    return false;
}

/* Checks driver and devices, then opens `device` with a stream, a cuBLAS handle
 * (with its own workspace, as graph capture wants), the xent and bias_grad
 * scratch, and cuDNN unless DEVGATE_CUDA_CONV says im2col. */
static dg_status cu_init(int device, void **ctx, char *reason, size_t reason_len)
{
    int drv = 0, rt = 0, count = 0;
    char drv_s[16], rt_s[16];
    cudaError_t e;
    cublasStatus_t bs;
    cu_ctx *c;
    int mode = cu_conv_mode_env();

    if (reason && reason_len > 0)
        reason[0] = '\0';
    if (!ctx)
        return cu_reason(reason, reason_len, DG_ERR_USAGE, "cuda: init: NULL ctx pointer");
    *ctx = NULL;
    if (mode < 0)
        return cu_reason(reason, reason_len, DG_ERR_USAGE,
                         "cuda: DEVGATE_CUDA_CONV='%.32s': expected im2col, cudnn or auto",
                         getenv("DEVGATE_CUDA_CONV"));
    char knob[40], expect[48];
    if (cu_knob_unknown(knob, sizeof knob, expect, sizeof expect))
        return cu_reason(reason, reason_len, DG_ERR_USAGE, "cuda: %s='%.32s': expected %s", knob,
                         getenv(knob), expect);

    /* cudaDriverGetVersion reports 0 when no driver (libcuda) is installed. */
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    cu_ver_str(drv, drv_s, sizeof drv_s);
    cu_ver_str(rt, rt_s, sizeof rt_s);
    e = cudaGetDeviceCount(&count);
    if (drv == 0) {
        if (e == cudaSuccess)
            e = cudaErrorInsufficientDriver;
        cudaGetLastError();
        return cu_reason(reason, reason_len, DG_ERR_UNAVAILABLE,
                         "cuda: CUDA driver not found (libcuda.so.1 missing): %s: %s",
                         cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (e == cudaErrorInsufficientDriver) {
        cudaGetLastError();
        if (drv < rt)
            return cu_reason(reason, reason_len, DG_ERR_UNAVAILABLE,
                             "cuda: CUDA driver version %s < runtime %s: %s: %s", drv_s, rt_s,
                             cudaGetErrorName(e), cudaGetErrorString(e));
        return cu_reason(reason, reason_len, DG_ERR_UNAVAILABLE,
                         "cuda: CUDA driver %s cannot run runtime %s: %s: %s", drv_s, rt_s,
                         cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (e == cudaErrorNoDevice || (e == cudaSuccess && count <= 0)) {
        if (e == cudaSuccess)
            e = cudaErrorNoDevice;
        cudaGetLastError();
        return cu_reason(reason, reason_len, DG_ERR_UNAVAILABLE,
                         "cuda: no CUDA device (driver %s, runtime %s): %s: %s", drv_s, rt_s,
                         cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        return cu_reason(reason, reason_len, DG_ERR_UNAVAILABLE,
                         "cuda: cudaGetDeviceCount failed (driver %s, runtime %s): %s: %s", drv_s,
                         rt_s, cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (device < 0 || device >= count)
        return cu_reason(reason, reason_len, DG_ERR_NOT_FOUND,
                         "cuda: device index %d out of range (%d CUDA device%s)", device, count,
                         count == 1 ? "" : "s");

    c = (cu_ctx *)calloc(1, sizeof *c);
    if (!c)
        return cu_reason(reason, reason_len, DG_ERR_NOMEM, "cuda: out of host memory");
    c->device = device;
    c->driver_ver = drv;
    c->runtime_ver = rt;
    c->conv_mode = mode;

    e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cu_reason(reason, reason_len, DG_ERR_UNAVAILABLE, "cuda: cannot open device %d: %s: %s",
                  device, cudaGetErrorName(e), cudaGetErrorString(e));
        c->stream = NULL;
        cu_free(c);
        return DG_ERR_UNAVAILABLE;
    }
    e = cudaMalloc(&c->blas_ws, CU_BLAS_WORKSPACE);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&c->xent_part, sizeof(double) * 2 * CU_XENT_BLOCKS);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&c->bg_part, sizeof(double) * CU_BG_PARTS);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cu_free(c);
        return cu_reason(reason, reason_len, DG_ERR_UNAVAILABLE,
                         "cuda: scratch allocation on device %d: %s: %s", device,
                         cudaGetErrorName(e), cudaGetErrorString(e));
    }
    bs = cublasCreate(&c->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        c->blas = NULL;
        cu_free(c);
        return cu_reason(reason, reason_len, DG_ERR_UNAVAILABLE,
                         "cuda: cublasCreate on device %d: %s: %s", device, cublasGetStatusName(bs),
                         cublasGetStatusString(bs));
    }
    /* Plain fp32: no TF32 tensor-core shortcut, the gate checks fp32 accuracy
     * (set_math(1), devgate train --tf32, opts in to TF32).
     * The workspace is set after the stream (cublasSetStream resets it), so
     * cuBLAS never allocates inside a capture. */
    bs = cublasSetStream(c->blas, c->stream);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetWorkspace(c->blas, c->blas_ws, CU_BLAS_WORKSPACE);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cu_free(c);
        return cu_reason(reason, reason_len, DG_ERR_BACKEND,
                         "cuda: configuring cuBLAS on device %d: %s: %s", device,
                         cublasGetStatusName(bs), cublasGetStatusString(bs));
    }
    if (mode != CU_CONV_IM2COL &&
        cdn_open(&c->dnn, c->stream, c->dnn_why, sizeof c->dnn_why) != DG_OK) {
        c->dnn = NULL;
        cudaGetLastError();
        if (mode == CU_CONV_CUDNN) {
            cu_reason(reason, reason_len, DG_ERR_UNAVAILABLE,
                      "cuda: DEVGATE_CUDA_CONV=cudnn but cuDNN is not usable: %s", c->dnn_why);
            cu_free(c);
            return DG_ERR_UNAVAILABLE;
        }
    }
    *ctx = c;
    return DG_OK;
}

/* The context's last message; a fixed one without a context. */
static const char *cu_last_error(void *ctx)
{
    cu_ctx *c = (cu_ctx *)ctx;
    return c ? c->err : "cuda: not initialised";
}

/* Number of CUDA devices (0 when the driver or devices are missing). */
static int cu_device_count(void *ctx)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

/* Describes device `device`; free memory is known only for the opened device. */
static dg_status cu_device_info(void *ctx, int device, dg_device_info *out)
{
    cu_ctx *c = (cu_ctx *)ctx;
    cudaDeviceProp p;
    cudaError_t e;
    int drv = 0, rt = 0, count = 0;
    char drv_s[16], rt_s[16];

    if (!out)
        return cu_fail(c, DG_ERR_USAGE, "cuda: device_info: NULL output");
    memset(out, 0, sizeof *out);
    e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return cu_fail_rt(c, DG_ERR_UNAVAILABLE, "cudaGetDeviceCount", e);
    }
    if (device < 0 || device >= count)
        return cu_fail(c, DG_ERR_NOT_FOUND, "cuda: device index %d out of range (%d CUDA device%s)",
                       device, count, count == 1 ? "" : "s");
    e = cudaGetDeviceProperties(&p, device);
    if (e != cudaSuccess)
        return cu_fail_rt(c, DG_ERR_BACKEND, "cudaGetDeviceProperties", e);

    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    cu_ver_str(drv, drv_s, sizeof drv_s);
    cu_ver_str(rt, rt_s, sizeof rt_s);
    snprintf(out->name, sizeof out->name, "%.*s", (int)sizeof out->name - 1, p.name);
    snprintf(out->vendor, sizeof out->vendor, "NVIDIA");
    snprintf(out->driver_version, sizeof out->driver_version, "driver %s / runtime %s", drv_s,
             rt_s);
    snprintf(out->platform, sizeof out->platform, "CUDA %s", rt_s);
    out->mem_total.value = (double)p.totalGlobalMem;
    out->mem_total.valid = true;
    out->compute_units.value = (double)p.multiProcessorCount;
    out->compute_units.valid = true;
    if (cudaDeviceGetPCIBusId(out->pci_bus_id, (int)sizeof out->pci_bus_id, device) !=
        cudaSuccess) {
        cudaGetLastError();
        out->pci_bus_id[0] = '\0';
    }
    /* The memory's rating from its clock (kHz, double data rate) and bus width. */
    int mem_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess &&
        mem_khz > 0 && bus_bits > 0) {
        out->mem_gbps.value = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) / 1e9;
        out->mem_gbps.valid = true;
    } else {
        cudaGetLastError();
    }
    if (c && device == c->device && cu_bind(c) == DG_OK) {
        size_t free_b = 0, total_b = 0;
        e = cudaMemGetInfo(&free_b, &total_b);
        if (e == cudaSuccess) {
            out->mem_free.value = (double)free_b;
            out->mem_free.valid = true;
            out->mem_total.value = (double)total_b;
        } else {
            cudaGetLastError();
        }
    }
    return DG_OK;
}

/* "CUDA driver X.Y, runtime X.Y, cuBLAS X.Y.Z", then for a context its conv
 * path: ", cuDNN X.Y.Z" and the algorithms chosen per shape so far, or why
 * convolutions run on im2col. */
static void cu_versions(void *ctx, char *buf, size_t len)
{
    cu_ctx *c = (cu_ctx *)ctx;
    int drv = 0, rt = 0, bv = 0, maj = 0, min = 0, pat = 0;
    char drv_s[16], rt_s[16], blas_s[32];

    if (!buf || len == 0)
        return;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    cu_ver_str(drv, drv_s, sizeof drv_s);
    cu_ver_str(rt, rt_s, sizeof rt_s);
    if (c && c->blas && cublasGetVersion(c->blas, &bv) == CUBLAS_STATUS_SUCCESS)
        snprintf(blas_s, sizeof blas_s, "%d.%d.%d", bv / 10000, (bv / 100) % 100, bv % 100);
    else if (cublasGetProperty(MAJOR_VERSION, &maj) == CUBLAS_STATUS_SUCCESS &&
             cublasGetProperty(MINOR_VERSION, &min) == CUBLAS_STATUS_SUCCESS &&
             cublasGetProperty(PATCH_LEVEL, &pat) == CUBLAS_STATUS_SUCCESS)
        snprintf(blas_s, sizeof blas_s, "%d.%d.%d", maj, min, pat);
    else
        snprintf(blas_s, sizeof blas_s, "unknown");
    snprintf(buf, len, "CUDA driver %s, runtime %s, cuBLAS %s", drv_s, rt_s, blas_s);
    size_t used = strlen(buf);
    char dnn_s[32];
    if (c && c->dnn && cdn_version_text(dnn_s, sizeof dnn_s)) {
        snprintf(buf + used, len - used, ", cuDNN %s", dnn_s);
        cdn_describe(c->dnn, buf, len);
    } else if (c && c->conv_mode == CU_CONV_IM2COL) {
        snprintf(buf + used, len - used, ", conv im2col (DEVGATE_CUDA_CONV=im2col)");
    } else if (c) {
        snprintf(buf + used, len - used, ", conv im2col (cuDNN not loaded: %.120s)", c->dnn_why);
    } else if (cdn_version_text(dnn_s, sizeof dnn_s)) {
        snprintf(buf + used, len - used, ", cuDNN %s", dnn_s);
    }
}

/* ---- memory ---------------------------------------------------------------------- */

/* cudaMalloc behind a cu_buf record; DG_ERR_DEVICE_OOM (error cleared) when
 * the device is full. */
static dg_status cu_buf_alloc(void *ctx, size_t bytes, void **buf)
{
    cu_ctx *c = (cu_ctx *)ctx;
    void *p = NULL;
    cu_buf *b;
    cudaError_t e;
    dg_status st;

    if (!c)
        return DG_ERR_USAGE;
    if (!buf)
        return cu_fail(c, DG_ERR_USAGE, "cuda: buf_alloc: NULL output");
    *buf = NULL;
    if ((st = cu_not_capturing(c, "buf_alloc")) != DG_OK)
        return st;
    if ((st = cu_bind(c)) != DG_OK)
        return st;
    e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return cu_fail(c, DG_ERR_DEVICE_OOM, "cuda: cudaMalloc of %zu bytes on device %d: %s: %s",
                       bytes, c->device, cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        return cu_fail(c, DG_ERR_BACKEND, "cuda: cudaMalloc of %zu bytes on device %d: %s: %s",
                       bytes, c->device, cudaGetErrorName(e), cudaGetErrorString(e));
    }
    b = (cu_buf *)calloc(1, sizeof *b);
    if (!b) {
        cudaFree(p);
        return cu_fail(c, DG_ERR_NOMEM, "cuda: buf_alloc: out of host memory");
    }
    b->magic = CU_BUF_MAGIC;
    b->bytes = bytes;
    b->p = p;
    *buf = b;
    return DG_OK;
}

/* cudaFree; accepts NULL; a failure is only recorded as the last error. While
 * a capture is open the buffer is kept (cudaFree would break the capture). */
static void cu_buf_free(void *ctx, void *buf)
{
    cu_ctx *c = (cu_ctx *)ctx;
    cu_buf *b = (cu_buf *)buf;
    cudaError_t e;

    if (!c || !b)
        return;
    if (b->magic != CU_BUF_MAGIC) {
        cu_fail(c, DG_ERR_USAGE, "cuda: buf_free: not a live cuda buffer");
        return;
    }
    if (cu_not_capturing(c, "buf_free") != DG_OK || cu_bind(c) != DG_OK)
        return;
    e = cudaFree(b->p);
    if (e != cudaSuccess)
        cu_fail_rt(c, DG_ERR_BACKEND, "cudaFree", e);
    b->magic = 0;
    free(b);
}

/* Checks a copy's buffer range; *dev = device address of byte off. */
static dg_status cu_copy_range(cu_ctx *c, const char *what, const void *buf, size_t off,
                               size_t bytes, char **dev)
{
    const cu_buf *b = (const cu_buf *)buf;
    if (b->magic != CU_BUF_MAGIC)
        return cu_fail(c, DG_ERR_USAGE, "cuda: %s: not a live cuda buffer", what);
    if (off > b->bytes || bytes > b->bytes - off)
        return cu_fail(c, DG_ERR_USAGE,
                       "cuda: %s: %zu bytes at offset %zu exceed the %zu-byte buffer", what, bytes,
                       off, b->bytes);
    *dev = (char *)b->p + off;
    return DG_OK;
}

/* Copies bytes on the stream and waits; dir tells host-to-device or back. */
static dg_status cu_copy(cu_ctx *c, void *dst, const void *src, size_t bytes,
                         enum cudaMemcpyKind dir, const char *what)
{
    cudaError_t e;
    dg_status st;

    if ((st = cu_bind(c)) != DG_OK)
        return st;
    e = cudaMemcpyAsync(dst, src, bytes, dir, c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        return cu_fail(c, DG_ERR_BACKEND, "cuda: %s of %zu bytes: %s: %s", what, bytes,
                       cudaGetErrorName(e), cudaGetErrorString(e));
    return DG_OK;
}

/* The page-locked block holding [p, p + bytes), NULL when none does. */
static cu_pin *cu_pin_find(cu_ctx *c, const void *p, size_t bytes)
{
    const char *q = (const char *)p;
    for (int i = 0; i < CU_PIN_BLOCKS; i++) {
        const char *h = (const char *)c->pin[i].host;
        if (h && q >= h && (size_t)(q - h) <= c->pin[i].bytes &&
            bytes <= c->pin[i].bytes - (size_t)(q - h))
            return &c->pin[i];
    }
    return NULL;
}

/* Enqueues src (inside block pb) to dev without waiting: host to the twin on
 * the copy stream (after the compute stream's last copy out of that part of
 * the twin), then twin to dev on the compute stream once it arrived. */
static dg_status cu_upload_pinned(cu_ctx *c, cu_pin *pb, char *dev, const void *src, size_t bytes)
{
    size_t at = (size_t)((const char *)src - (const char *)pb->host);
    char *tw = (char *)pb->stage + at;
    cudaError_t e;
    dg_status st;

    if ((st = cu_bind(c)) != DG_OK)
        return st;
    e = pb->in_use ? cudaStreamWaitEvent(c->copy, pb->used, 0) : cudaSuccess;
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(tw, src, bytes, cudaMemcpyHostToDevice, c->copy);
    if (e == cudaSuccess)
        e = cudaEventRecord(pb->copied, c->copy);
    if (e == cudaSuccess) {
        pb->pending = true;
        e = cudaStreamWaitEvent(c->stream, pb->copied, 0);
    }
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(dev, tw, bytes, cudaMemcpyDeviceToDevice, c->stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(pb->used, c->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return cu_fail(c, DG_ERR_BACKEND,
                       "cuda: upload of %zu bytes from page-locked memory: %s: %s", bytes,
                       cudaGetErrorName(e), cudaGetErrorString(e));
    }
    pb->in_use = true;
    return DG_OK;
}

/* A page-locked host block of `bytes` with its device twin (interface v4);
 * DG_ERR_NOMEM when every slot is taken or the host refuses, DG_ERR_DEVICE_OOM
 * when the twin does not fit. */
static dg_status cu_host_alloc(void *ctx, size_t bytes, void **p)
{
    cu_ctx *c = (cu_ctx *)ctx;
    cu_pin *b = NULL;
    cudaError_t e;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if (!p)
        return cu_fail(c, DG_ERR_USAGE, "cuda: host_alloc: NULL output");
    *p = NULL;
    if ((st = cu_not_capturing(c, "host_alloc")) != DG_OK)
        return st;
    for (int i = 0; i < CU_PIN_BLOCKS && !b; i++)
        if (!c->pin[i].host)
            b = &c->pin[i];
    if (!b)
        return cu_fail(c, DG_ERR_NOMEM, "cuda: host_alloc: all %d page-locked blocks in use",
                       CU_PIN_BLOCKS);
    if (!c->copy) {
        e = cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            c->copy = NULL;
            cudaGetLastError();
            return cu_fail_rt(c, DG_ERR_BACKEND, "host_alloc: cudaStreamCreate", e);
        }
    }
    size_t n = bytes ? bytes : 1;
    e = cudaHostAlloc(&b->host, n, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        b->host = NULL;
        cudaGetLastError();
        return cu_fail(c, DG_ERR_NOMEM, "cuda: cudaHostAlloc of %zu bytes: %s: %s", n,
                       cudaGetErrorName(e), cudaGetErrorString(e));
    }
    b->bytes = bytes;
    e = cudaMalloc(&b->stage, n);
    if (e != cudaSuccess) {
        b->stage = NULL;
        cudaGetLastError();
        cu_pin_release(b);
        return cu_fail(c, e == cudaErrorMemoryAllocation ? DG_ERR_DEVICE_OOM : DG_ERR_BACKEND,
                       "cuda: staging twin of %zu bytes: %s: %s", n, cudaGetErrorName(e),
                       cudaGetErrorString(e));
    }
    e = cudaEventCreateWithFlags(&b->copied, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&b->used, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cu_pin_release(b);
        return cu_fail_rt(c, DG_ERR_BACKEND, "host_alloc: cudaEventCreate", e);
    }
    *p = b->host;
    return DG_OK;
}

/* Waits until no upload still reads from the block holding p. */
static dg_status cu_host_wait(void *ctx, const void *p)
{
    cu_ctx *c = (cu_ctx *)ctx;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    cu_pin *b = p ? cu_pin_find(c, p, 0) : NULL;
    if (!b)
        return cu_fail(c, DG_ERR_USAGE, "cuda: host_wait: %p is not in a page-locked block", p);
    if (!b->pending)
        return DG_OK;
    cudaError_t e = cudaEventSynchronize(b->copied);
    if (e != cudaSuccess)
        return cu_fail_rt(c, DG_ERR_BACKEND, "host_wait: cudaEventSynchronize", e);
    b->pending = false;
    return DG_OK;
}

/* Frees the block starting at p after its uploads; accepts NULL. Kept while a
 * capture is open (freeing would end it), as buf_free does. */
static void cu_host_free(void *ctx, void *p)
{
    cu_ctx *c = (cu_ctx *)ctx;
    if (!c || !p || cu_not_capturing(c, "host_free") != DG_OK || cu_bind(c) != DG_OK)
        return;
    for (int i = 0; i < CU_PIN_BLOCKS; i++)
        if (c->pin[i].host == p) {
            cu_pin_release(&c->pin[i]);
            return;
        }
    cu_fail(c, DG_ERR_USAGE, "cuda: host_free: %p is not a page-locked block", p);
}

/* Host src to buf at byte offset off; returns when the copy is done, except
 * from a page-locked block (host_alloc), where it only enqueues. */
static dg_status cu_upload(void *ctx, void *buf, size_t off, const void *src, size_t bytes)
{
    cu_ctx *c = (cu_ctx *)ctx;
    char *dev = NULL;
    dg_status st;

    if (!c)
        return DG_ERR_USAGE;
    if (!buf || (!src && bytes > 0))
        return cu_fail(c, DG_ERR_USAGE, "cuda: upload: NULL %s", buf ? "source" : "buffer");
    if ((st = cu_not_capturing(c, "upload")) != DG_OK)
        return st;
    if ((st = cu_copy_range(c, "upload", buf, off, bytes, &dev)) != DG_OK)
        return st;
    if (bytes == 0)
        return DG_OK;
    cu_pin *pb = cu_pin_find(c, src, bytes);
    if (pb)
        return cu_upload_pinned(c, pb, dev, src, bytes);
    return cu_copy(c, dev, src, bytes, cudaMemcpyHostToDevice, "upload");
}

/* buf at byte offset off to host dst; returns when the copy is done. */
static dg_status cu_download(void *ctx, const void *buf, size_t off, void *dst, size_t bytes)
{
    cu_ctx *c = (cu_ctx *)ctx;
    char *dev = NULL;
    dg_status st;

    if (!c)
        return DG_ERR_USAGE;
    if (!buf || (!dst && bytes > 0))
        return cu_fail(c, DG_ERR_USAGE, "cuda: download: NULL %s", buf ? "destination" : "buffer");
    if ((st = cu_not_capturing(c, "download")) != DG_OK)
        return st;
    if ((st = cu_copy_range(c, "download", buf, off, bytes, &dev)) != DG_OK)
        return st;
    if (bytes == 0)
        return DG_OK;
    return cu_copy(c, dst, dev, bytes, cudaMemcpyDeviceToHost, "download");
}

/* Waits for everything queued on the context's stream. */
static dg_status cu_synchronize(void *ctx)
{
    cu_ctx *c = (cu_ctx *)ctx;
    cudaError_t e;
    dg_status st;

    if (!c)
        return DG_ERR_USAGE;
    if ((st = cu_not_capturing(c, "synchronize")) != DG_OK)
        return st;
    if ((st = cu_bind(c)) != DG_OK)
        return st;
    e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        return cu_fail_rt(c, DG_ERR_BACKEND, "cudaStreamSynchronize", e);
    return DG_OK;
}

/* Every fp32 op of interface v4 runs natively, whatever its shape. */
static bool cu_supports_op(void *ctx, const dg_op_desc *d)
{
    return d && (int)d->op >= 0 && d->op < DG_OP__COUNT && d->dtype == DG_DTYPE_F32;
}

/* ---- GEMM --------------------------------------------------------------------- */

/* Row-major C = alpha op(A) op(B) + beta C as the column-major product
 * C^T = op(B)^T op(A)^T: cuBLAS sees each row-major matrix as its transpose,
 * so B goes first with op tb and A second with op ta. */
static dg_status cu_sgemm(cu_ctx *c, bool ta, bool tb, int m, int n, int k, float alpha,
                          const float *a, int lda, const float *b, int ldb, float beta, float *cm,
                          int ldc)
{
    cublasStatus_t s =
        cublasSgemm(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
                    k, &alpha, b, ldb, a, lda, &beta, cm, ldc);
    if (s != CUBLAS_STATUS_SUCCESS)
        return cu_fail_blas(c, "cublasSgemm", s);
    return DG_OK;
}

/* cu_gemm's work; *pc_out (when not NULL) is C's device address once checked. */
static dg_status cu_gemm_to(cu_ctx *c, bool ta, bool tb, int m, int n, int k, float alpha, dg_ref a,
                            int lda, dg_ref b, int ldb, float beta, dg_ref cr, int ldc,
                            void **pc_out)
{
    void *pa, *pb, *pc;
    int lda_min, ldb_min, ldc_min;
    dg_status st;

    if (!c)
        return DG_ERR_USAGE;
    if (m < 0 || n < 0 || k < 0)
        return cu_fail(c, DG_ERR_USAGE, "cuda: gemm: negative size %dx%dx%d", m, n, k);
    lda_min = ta ? m : k;
    ldb_min = tb ? k : n;
    ldc_min = n;
    if (lda < (lda_min > 1 ? lda_min : 1) || ldb < (ldb_min > 1 ? ldb_min : 1) ||
        ldc < (ldc_min > 1 ? ldc_min : 1))
        return cu_fail(c, DG_ERR_USAGE,
                       "cuda: gemm: leading dimension too small (lda %d, ldb %d, ldc %d for "
                       "m %d, n %d, k %d, ta %d, tb %d)",
                       lda, ldb, ldc, m, n, k, (int)ta, (int)tb);
    if ((st = cu_ref(c, "gemm", "A", a, ta ? cu_extent(k, m, lda) : cu_extent(m, k, lda), &pa)) !=
            DG_OK ||
        (st = cu_ref(c, "gemm", "B", b, tb ? cu_extent(n, k, ldb) : cu_extent(k, n, ldb), &pb)) !=
            DG_OK ||
        (st = cu_ref(c, "gemm", "C", cr, cu_extent(m, n, ldc), &pc)) != DG_OK)
        return st;
    if (pc_out)
        *pc_out = pc;
    if (m == 0 || n == 0)
        return DG_OK;
    if ((st = cu_bind(c)) != DG_OK)
        return st;
    if (c->math == CU_MATH_BF16 && k > 0) {
        char msg[400];
        st = cbf_gemm(c->blas, c->stream, &c->bf, c->capturing, ta, tb, m, n, k, alpha,
                      (const float *)pa, ta ? cu_extent(k, m, lda) : cu_extent(m, k, lda), lda,
                      (const float *)pb, tb ? cu_extent(n, k, ldb) : cu_extent(k, n, ldb), ldb,
                      beta, (float *)pc, ldc, msg, sizeof msg);
        return st == DG_OK ? DG_OK : cu_fail(c, st, "cuda: gemm: %s", msg);
    }
    return cu_sgemm(c, ta, tb, m, n, k, alpha, (const float *)pa, lda, (const float *)pb, ldb, beta,
                    (float *)pc, ldc);
}

/* C[m,n] = alpha op(A) op(B) + beta C, row-major, any of the four transposes. */
static dg_status cu_gemm(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha, dg_ref a,
                         int lda, dg_ref b, int ldb, float beta, dg_ref cr, int ldc)
{
    return cu_gemm_to((cu_ctx *)ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cr, ldc, NULL);
}

/* The fused calls (backend.h, version 6) unless DEVGATE_CUDA_FUSE=off: the
 * product, then one epilogue kernel in place of bias_add, relu_fwd and
 * relu_bwd's mask (forward: three calls become two; the same bits). */
static unsigned cu_fusion(void *ctx)
{
    const char *v = getenv("DEVGATE_CUDA_FUSE");
    (void)ctx;
    return v && strcmp(v, "off") == 0 ? 0u : DG_FUSE_GEMM | DG_FUSE_CONV;
}

static dg_status cu_gemm_ep(void *ctx, bool ta, bool tb, int m, int n, int k, dg_ref a, int lda,
                            dg_ref b, int ldb, dg_ref cr, int ldc, const dg_epilogue *ep)
{
    cu_ctx *c = (cu_ctx *)ctx;
    void *pc = NULL, *pb, *pm;
    dg_status st = cu_gemm_to(c, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, cr, ldc, &pc);
    if (st != DG_OK || !ep || m == 0 || n == 0)
        return st;
    if ((st = cu_ref_opt(c, "gemm_ep", "bias", ep->bias, (size_t)n, &pb)) != DG_OK ||
        (st = cu_ref_opt(c, "gemm_ep", "mask", ep->mask, cu_extent(m, n, ldc), &pm)) != DG_OK)
        return st;
    if (!pb && !ep->relu && !pm)
        return DG_OK;
    int threads = n >= CU_THREADS ? CU_THREADS : (n + 31) / 32 * 32;
    unsigned gx = (unsigned)((n + threads - 1) / threads), gy = m > 65535 ? 65535u : (unsigned)m;
    k_gemm_ep<<<dim3(gx, gy), threads, 0, c->stream>>>((float *)pc, m, n, ldc, (const float *)pb,
                                                       ep->relu, (const float *)pm);
    return cu_launched(c, "gemm_ep");
}

/* ---- elementwise and small ops ------------------------------------------------------- */

static dg_status cu_fill(void *ctx, dg_ref x, size_t count, float value)
{
    cu_ctx *c = (cu_ctx *)ctx;
    void *px;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if ((st = cu_ref(c, "fill", "x", x, count, &px)) != DG_OK)
        return st;
    if (count == 0)
        return DG_OK;
    k_fill<<<cu_blocks(count), CU_THREADS, 0, c->stream>>>((float *)px, count, value);
    return cu_launched(c, "fill");
}

/* Validates outer, channels, inner and returns their product in *total. */
static dg_status cu_oci(cu_ctx *c, const char *op, int outer, int channels, int inner,
                        size_t *total)
{
    if (outer < 0 || channels < 0 || inner < 0 || !cu_prod(total, outer, channels, inner, 1))
        return cu_fail(c, DG_ERR_USAGE, "cuda: %s: bad shape outer %d, channels %d, inner %d", op,
                       outer, channels, inner);
    return DG_OK;
}

/* Enqueues y[o, ch, i] += bias[ch], then ReLU when relu (b NULL: ReLU alone;
 * device addresses already checked; total > 0). */
static dg_status cu_bias_add_raw(cu_ctx *c, float *y, const float *b, size_t total, int channels,
                                 int inner, bool relu, const char *what)
{
    size_t planes = total / (size_t)inner;
    if (!b)
        k_relu_fwd<<<cu_blocks(total), CU_THREADS, 0, c->stream>>>(y, y, total);
    else if (inner >= 32 && planes <= UINT_MAX) {
        unsigned g = planes > CU_MAX_BLOCKS ? CU_MAX_BLOCKS : (unsigned)planes;
        k_bias_add_plane<<<g, inner >= CU_THREADS ? CU_THREADS : 128, 0, c->stream>>>(
            y, b, (unsigned)planes, (unsigned)channels, (unsigned)inner, relu);
    } else {
        k_bias_add<<<cu_blocks(total), CU_THREADS, 0, c->stream>>>(y, b, total, (unsigned)channels,
                                                                   (unsigned)inner, relu);
    }
    return cu_launched(c, what);
}

static dg_status cu_bias_add(void *ctx, dg_ref y, dg_ref bias, int outer, int channels, int inner)
{
    cu_ctx *c = (cu_ctx *)ctx;
    void *py, *pb;
    size_t total = 0;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if ((st = cu_oci(c, "bias_add", outer, channels, inner, &total)) != DG_OK ||
        (st = cu_ref(c, "bias_add", "y", y, total, &py)) != DG_OK ||
        (st = cu_ref(c, "bias_add", "bias", bias, (size_t)channels, &pb)) != DG_OK)
        return st;
    if (total == 0)
        return DG_OK;
    return cu_bias_add_raw(c, (float *)py, (const float *)pb, total, channels, inner, false,
                           "bias_add");
}

/* Enqueues db = per-channel sums of dy (device addresses already checked). */
static dg_status cu_bias_grad_raw(cu_ctx *c, const float *dy, float *db, int outer, int channels,
                                  int inner)
{
    if (channels == 0)
        return DG_OK;
    if (inner == 1) {
        /* Row slices of at least 64 rows, about 256 blocks in all; the slice
         * count depends on the shape alone, so the order is fixed. */
        dim3 blk(32, 16);
        unsigned cols = (unsigned)((channels + 31) / 32);
        int slices = (int)((256 + cols - 1) / cols);
        if (slices > outer / 64)
            slices = outer / 64;
        if (slices > CU_BG_PARTS / channels)
            slices = CU_BG_PARTS / channels;
        if (slices > 65535)
            slices = 65535;
        if (slices <= 1) {
            k_bias_grad_rows<<<cols, blk, 0, c->stream>>>(dy, db, outer, channels);
        } else {
            k_bias_grad_rows_part<<<dim3(cols, (unsigned)slices), blk, 0, c->stream>>>(
                dy, c->bg_part, outer, channels, slices);
            k_bias_grad_fin<<<(unsigned)((channels + 127) / 128), 128, 0, c->stream>>>(
                c->bg_part, db, channels, slices);
        }
    } else {
        /* Slices of the outer index spread a channel over several blocks; the
         * slice count depends on the shape alone, so the order is fixed. */
        int slices = (CU_BG_TARGET + channels - 1) / channels;
        if (slices > outer)
            slices = outer;
        if (slices > CU_BG_PARTS / channels)
            slices = CU_BG_PARTS / channels;
        if (slices > 65535)
            slices = 65535;
        if (slices <= 1) {
            k_bias_grad_part<<<(unsigned)channels, CU_BG_THREADS, 0, c->stream>>>(
                dy, NULL, db, outer, channels, inner, 1);
        } else {
            dim3 grid((unsigned)channels, (unsigned)slices);
            k_bias_grad_part<<<grid, CU_BG_THREADS, 0, c->stream>>>(dy, c->bg_part, NULL, outer,
                                                                    channels, inner, slices);
            k_bias_grad_fin<<<(unsigned)((channels + 127) / 128), 128, 0, c->stream>>>(
                c->bg_part, db, channels, slices);
        }
    }
    return cu_launched(c, "bias_grad");
}

static dg_status cu_bias_grad(void *ctx, dg_ref dy, dg_ref db, int outer, int channels, int inner)
{
    cu_ctx *c = (cu_ctx *)ctx;
    void *pdy, *pdb;
    size_t total = 0;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if ((st = cu_oci(c, "bias_grad", outer, channels, inner, &total)) != DG_OK ||
        (st = cu_ref(c, "bias_grad", "dy", dy, total, &pdy)) != DG_OK ||
        (st = cu_ref(c, "bias_grad", "db", db, (size_t)channels, &pdb)) != DG_OK)
        return st;
    return cu_bias_grad_raw(c, (const float *)pdy, (float *)pdb, outer, channels, inner);
}

static dg_status cu_relu_fwd(void *ctx, dg_ref x, dg_ref y, size_t count)
{
    cu_ctx *c = (cu_ctx *)ctx;
    void *px, *py;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if ((st = cu_ref(c, "relu_fwd", "x", x, count, &px)) != DG_OK ||
        (st = cu_ref(c, "relu_fwd", "y", y, count, &py)) != DG_OK)
        return st;
    if (count == 0)
        return DG_OK;
    k_relu_fwd<<<cu_blocks(count), CU_THREADS, 0, c->stream>>>((const float *)px, (float *)py,
                                                               count);
    return cu_launched(c, "relu_fwd");
}

static dg_status cu_relu_bwd(void *ctx, dg_ref y, dg_ref dy, dg_ref dx, size_t count)
{
    cu_ctx *c = (cu_ctx *)ctx;
    void *py, *pdy, *pdx;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if ((st = cu_ref(c, "relu_bwd", "y", y, count, &py)) != DG_OK ||
        (st = cu_ref(c, "relu_bwd", "dy", dy, count, &pdy)) != DG_OK ||
        (st = cu_ref(c, "relu_bwd", "dx", dx, count, &pdx)) != DG_OK)
        return st;
    if (count == 0)
        return DG_OK;
    k_relu_bwd<<<cu_blocks(count), CU_THREADS, 0, c->stream>>>(
        (const float *)py, (const float *)pdy, (float *)pdx, count);
    return cu_launched(c, "relu_bwd");
}

/* Validates a pool shape; *in_count, *out_count = elements of x and y. */
static dg_status cu_pool_shape(cu_ctx *c, const char *op, const dg_pool_shape *s, size_t *in_count,
                               size_t *out_count)
{
    if (!s)
        return cu_fail(c, DG_ERR_USAGE, "cuda: %s: NULL shape", op);
    if (s->n < 0 || s->c < 0 || s->k < 1 || s->stride < 1 || s->h < s->k || s->w < s->k ||
        s->ho != (s->h - s->k) / s->stride + 1 || s->wo != (s->w - s->k) / s->stride + 1 ||
        !cu_prod(in_count, s->n, s->c, s->h, s->w) || !cu_prod(out_count, s->n, s->c, s->ho, s->wo))
        return cu_fail(c, DG_ERR_USAGE,
                       "cuda: %s: bad shape n %d c %d %dx%d window %d stride %d -> %dx%d", op, s->n,
                       s->c, s->h, s->w, s->k, s->stride, s->ho, s->wo);
    return DG_OK;
}

static dg_status cu_maxpool_fwd(void *ctx, const dg_pool_shape *s, dg_ref x, dg_ref y,
                                dg_ref argmax)
{
    cu_ctx *c = (cu_ctx *)ctx;
    void *px, *py, *pa;
    size_t nin = 0, nout = 0;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if ((st = cu_pool_shape(c, "maxpool_fwd", s, &nin, &nout)) != DG_OK ||
        (st = cu_ref(c, "maxpool_fwd", "x", x, nin, &px)) != DG_OK ||
        (st = cu_ref(c, "maxpool_fwd", "y", y, nout, &py)) != DG_OK ||
        (st = cu_ref(c, "maxpool_fwd", "argmax", argmax, nout, &pa)) != DG_OK)
        return st;
    if (nout == 0)
        return DG_OK;
    if (nout < ((size_t)1 << 31))
        k_maxpool_fwd<unsigned><<<cu_blocks(nout), CU_THREADS, 0, c->stream>>>(
            (const float *)px, (float *)py, (int *)pa, (unsigned)nout, s->h, s->w, s->k, s->stride,
            s->ho, s->wo);
    else
        k_maxpool_fwd<size_t><<<cu_blocks(nout), CU_THREADS, 0, c->stream>>>(
            (const float *)px, (float *)py, (int *)pa, nout, s->h, s->w, s->k, s->stride, s->ho,
            s->wo);
    return cu_launched(c, "maxpool_fwd");
}

static dg_status cu_maxpool_bwd(void *ctx, const dg_pool_shape *s, dg_ref dy, dg_ref argmax,
                                dg_ref dx)
{
    cu_ctx *c = (cu_ctx *)ctx;
    void *pdy, *pa, *pdx;
    size_t nin = 0, nout = 0;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if ((st = cu_pool_shape(c, "maxpool_bwd", s, &nin, &nout)) != DG_OK ||
        (st = cu_ref(c, "maxpool_bwd", "dy", dy, nout, &pdy)) != DG_OK ||
        (st = cu_ref(c, "maxpool_bwd", "argmax", argmax, nout, &pa)) != DG_OK ||
        (st = cu_ref(c, "maxpool_bwd", "dx", dx, nin, &pdx)) != DG_OK)
        return st;
    if (nin == 0)
        return DG_OK;
    if (nin < ((size_t)1 << 31))
        k_maxpool_bwd<unsigned><<<cu_blocks(nin), CU_THREADS, 0, c->stream>>>(
            (const float *)pdy, (const int *)pa, (float *)pdx, (unsigned)nin, s->h, s->w, s->k,
            s->stride, s->ho, s->wo);
    else
        k_maxpool_bwd<size_t><<<cu_blocks(nin), CU_THREADS, 0, c->stream>>>(
            (const float *)pdy, (const int *)pa, (float *)pdx, nin, s->h, s->w, s->k, s->stride,
            s->ho, s->wo);
    return cu_launched(c, "maxpool_bwd");
}

/* ---- conv2d ----------------------------------------------------------------------
 * With cuDNN (cudnn_conv.cu), a shape it accepts runs its chosen forward,
 * backward-data and backward-filter algorithms in the caller's workspace, and
 * the bias and its gradient run on the kernels above. Otherwise (the im2col
 * path), per chunk of cn images: im2col into col[c*kh*kw, cn*P] (P = ho*wo), then
 *   forward  y_i = W[k, ckk] col_i          (strided-batched GEMM, col_i = col + i*P)
 *   dW      += dyT[k, cn*P] col^T            (one GEMM over the chunk, K = cn*P)
 *   dcol     = W^T dyT                       (one GEMM, into the col area)
 *   dx       = col2im(dcol)                  (gather kernel)
 * where dyT[k, cn*P] is dy of the chunk with images moved inside the rows.
 * The workspace holds col and dyT for one chunk; chunks keep it near
 * CU_CONV_CAP so that batch 4096 does not need gigabytes. */

typedef struct cu_conv_plan {
    size_t x_count, w_count, y_count; /* elements of x, w (and dw), y (and dy) */
    int ckk, P, chunk;                /* c*kh*kw, ho*wo, images per chunk */
    size_t col_floats, work_bytes;    /* chunk*ckk*P; (col + dyT) bytes */
} cu_conv_plan;

/* Checks a conv shape and plans the chunks; false (nothing written) on a bad shape. */
static bool cu_conv_plan_make(const dg_conv_shape *s, cu_conv_plan *pl)
{
    size_t per, maxc, nch, chunk, chunk_x;
    if (!s || s->n < 1 || s->c < 1 || s->h < 1 || s->w < 1 || s->k < 1 || s->kh < 1 || s->kw < 1 ||
        s->stride < 1 || s->pad < 0 || s->pad > INT_MAX / 4 || s->h > INT_MAX / 2 ||
        s->w > INT_MAX / 2 || s->h + 2 * s->pad < s->kh || s->w + 2 * s->pad < s->kw ||
        s->ho != (s->h + 2 * s->pad - s->kh) / s->stride + 1 ||
        s->wo != (s->w + 2 * s->pad - s->kw) / s->stride + 1)
        return false;
    if (!cu_prod(&pl->x_count, s->n, s->c, s->h, s->w) ||
        !cu_prod(&pl->w_count, s->k, s->c, s->kh, s->kw) ||
        !cu_prod(&pl->y_count, s->n, s->k, s->ho, s->wo))
        return false;
    /* Per image: ckk*P (col) + k*P (dyT) floats; everything indexed in 32 bits. */
    if (!cu_prod(&per, (long long)s->c * s->kh * s->kw + s->k, s->ho, s->wo, 1) ||
        (size_t)s->c * s->kh * s->kw > INT_MAX || (size_t)s->ho * s->wo > INT_MAX)
        return false;
    maxc = CU_CONV_CAP / sizeof(float) / per;
    if (maxc < 1)
        maxc = 1;
    if (maxc > (size_t)s->n)
        maxc = (size_t)s->n;
    nch = ((size_t)s->n + maxc - 1) / maxc;
    chunk = ((size_t)s->n + nch - 1) / nch;
    chunk_x = chunk * (size_t)s->c * s->h * s->w;
    if (chunk * per > INT_MAX || chunk_x > INT_MAX)
        return false;
    pl->ckk = s->c * s->kh * s->kw;
    pl->P = s->ho * s->wo;
    pl->chunk = (int)chunk;
    pl->col_floats = chunk * (size_t)pl->ckk * pl->P;
    pl->work_bytes = chunk * per * sizeof(float);
    return true;
}

/* Whether cuDNN runs s; *ws = its workspace bytes then. The first call for a
 * shape chooses the algorithms: timed with cuDNN's Find outside a capture,
 * from the heuristics inside one (Find allocates and synchronises). */
static bool cu_conv_on_dnn(cu_ctx *c, const dg_conv_shape *s, size_t *ws)
{
    *ws = 0;
    return c && c->dnn && cdn_plan_shape(c->dnn, s, !c->capturing, ws) == DG_OK;
}

/* cuDNN's workspace (the most its three chosen algorithms need; in bf16 mode
 * followed by the bf16 copies of the operands) when it runs s, else im2col's
 * column buffers. */
static size_t cu_conv2d_workspace(void *ctx, const dg_conv_shape *s)
{
    cu_ctx *c = (cu_ctx *)ctx;
    cu_conv_plan pl;
    size_t ws;
    if (!cu_conv_plan_make(s, &pl))
        return 0;
    if (c && c->dnn && cu_bind(c) == DG_OK && cu_conv_on_dnn(c, s, &ws))
        return c->math == CU_MATH_BF16
                   ? ws + cbf_conv_extra(c->dnn, s, pl.x_count, pl.w_count, pl.y_count)
                   : ws;
    return pl.work_bytes;
}

/* Geometry of a chunk of cn images. */
static cu_conv_geo cu_geo(const dg_conv_shape *s, int cn)
{
    cu_conv_geo g;
    g.cn = cn;
    g.c = s->c;
    g.h = s->h;
    g.w = s->w;
    g.k = s->k;
    g.kh = s->kh;
    g.kw = s->kw;
    g.stride = s->stride;
    g.pad = s->pad;
    g.ho = s->ho;
    g.wo = s->wo;
    return g;
}

/* bf16 mode has no im2col path: a convolution cuDNN does not run fails. */
static dg_status cu_conv_no_bf16(cu_ctx *c, const char *op, const dg_conv_shape *s)
{
    char plans[300] = ""; /* cuDNN's plans, the declined ones with their reason */
    if (c->dnn)
        cdn_describe(c->dnn, plans, sizeof plans);
    return cu_fail(c, DG_ERR_UNAVAILABLE,
                   "cuda: %s: --precision bf16 runs convolutions on cuDNN only, and cuDNN does not "
                   "run n%d c%d>%d %dx%d k%dx%d (%s%s)",
                   op, s->n, s->c, s->k, s->h, s->w, s->kh, s->kw,
                   c->dnn          ? "it declined the shape"
                   : c->dnn_why[0] ? c->dnn_why
                                   : "not loaded",
                   plans);
}

/* A cuDNN convolution in bf16 mode (cuda_bf16.cu): the forward pass (grads
 * NULL: y = conv(x, w) + bias, then ReLU when relu) or the backward one
 * (grads = {dy, dx or NULL, dw}), with the workspace holding cuDNN's dws bytes
 * and the bf16 copies. */
static dg_status cu_conv_bf16(cu_ctx *c, const dg_conv_shape *s, const cu_conv_plan *pl, size_t dws,
                              void *px, void *pw, void *pb, void *py, void *grads[3], dg_ref work,
                              bool relu)
{
    bool fwd = grads == NULL;
    const char *op = fwd ? "conv2d_fwd" : "conv2d_bwd";
    size_t need = dws + cbf_conv_extra(c->dnn, s, pl->x_count, pl->w_count, pl->y_count);
    void *pwk;
    char msg[300];
    dg_status st = cu_ref(c, op, "work", work, need / sizeof(float), &pwk);
    if (st != DG_OK)
        return st;
    bool carrier = cdn_carrier(c->dnn, s);
    if (fwd) {
        st = cbf_conv_fwd(c->dnn, c->stream, s, pl->x_count, pl->w_count, pl->y_count,
                          (const float *)px, (const float *)pw, carrier ? NULL : (const float *)pb,
                          relu && !carrier, (float *)py, pwk, dws, msg, sizeof msg);
        if (st == DG_OK && carrier && (pb || relu)) /* fp32 y: the fp32 epilogue */
            return cu_bias_add_raw(c, (float *)py, (const float *)pb, pl->y_count, s->k, pl->P,
                                   relu, "conv2d_fwd: bias");
    } else
        st = cbf_conv_bwd(c->dnn, c->stream, s, pl->x_count, pl->w_count, pl->y_count,
                          (const float *)px, (const float *)pw, (const float *)grads[0],
                          (float *)grads[1], (float *)grads[2], pwk, dws, msg, sizeof msg);
    return st == DG_OK ? DG_OK : cu_fail(c, st, "cuda: %s (bf16): %s", op, msg);
}

/* y = conv(x, w) (+ bias), then ReLU when relu: conv2d_fwd and conv2d_fwd_ep. */
static dg_status cu_conv_fwd_any(cu_ctx *c, const dg_conv_shape *s, dg_ref x, dg_ref w, dg_ref bias,
                                 dg_ref y, dg_ref work, bool relu)
{
    cu_conv_plan pl;
    void *px, *pw, *pb, *py, *pwk;
    const float one = 1.0f, zero = 0.0f;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if (!cu_conv_plan_make(s, &pl))
        return cu_fail(c, DG_ERR_USAGE, "cuda: conv2d_fwd: bad or too large shape");
    if ((st = cu_ref(c, "conv2d_fwd", "x", x, pl.x_count, &px)) != DG_OK ||
        (st = cu_ref(c, "conv2d_fwd", "w", w, pl.w_count, &pw)) != DG_OK ||
        (st = cu_ref_opt(c, "conv2d_fwd", "bias", bias, (size_t)s->k, &pb)) != DG_OK ||
        (st = cu_ref(c, "conv2d_fwd", "y", y, pl.y_count, &py)) != DG_OK)
        return st;
    size_t dws;
    if (cu_conv_on_dnn(c, s, &dws)) {
        char msg[256];
        pwk = NULL;
        if (c->math == CU_MATH_BF16)
            return cu_conv_bf16(c, s, &pl, dws, px, pw, pb, py, NULL, work, relu);
        if (dws && (st = cu_ref(c, "conv2d_fwd", "work", work, dws / sizeof(float), &pwk)) != DG_OK)
            return st;
        if ((st = cdn_conv_fwd(c->dnn, s, (const float *)px, (const float *)pw, (float *)py, pwk,
                               msg, sizeof msg)) != DG_OK)
            return cu_fail(c, st, "cuda: conv2d_fwd: %s", msg);
        if (pb || relu)
            return cu_bias_add_raw(c, (float *)py, (const float *)pb, pl.y_count, s->k, pl.P, relu,
                                   "conv2d_fwd: bias");
        return DG_OK;
    }
    if (c->math == CU_MATH_BF16)
        return cu_conv_no_bf16(c, "conv2d_fwd", s);
    if ((st = cu_ref(c, "conv2d_fwd", "work", work, pl.work_bytes / sizeof(float), &pwk)) != DG_OK)
        return st;
    float *col = (float *)pwk;
    size_t img_x = (size_t)s->c * s->h * s->w, img_y = (size_t)s->k * pl.P;
    for (int i0 = 0; i0 < s->n; i0 += pl.chunk) {
        int cn = s->n - i0 < pl.chunk ? s->n - i0 : pl.chunk;
        cu_conv_geo g = cu_geo(s, cn);
        size_t ncol = (size_t)cn * pl.ckk * pl.P;
        long long L = (long long)cn * pl.P;
        k_im2col<<<cu_blocks(ncol), CU_THREADS, 0, c->stream>>>((const float *)px + i0 * img_x, col,
                                                                g);
        if ((st = cu_launched(c, "conv2d_fwd: im2col")) != DG_OK)
            return st;
        /* Column-major view: y_i^T[P, k] = col_i^T[P, ckk] W^T[ckk, k]. */
        cublasStatus_t bs =
            cublasSgemmStridedBatched(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, pl.P, s->k, pl.ckk, &one,
                                      col, (int)L, pl.P, (const float *)pw, pl.ckk, 0, &zero,
                                      (float *)py + i0 * img_y, pl.P, (long long)img_y, cn);
        if (bs != CUBLAS_STATUS_SUCCESS)
            return cu_fail_blas(c, "conv2d_fwd: cublasSgemmStridedBatched", bs);
    }
    if (pb || relu)
        return cu_bias_add_raw(c, (float *)py, (const float *)pb, pl.y_count, s->k, pl.P, relu,
                               "conv2d_fwd: bias");
    return DG_OK;
}

static dg_status cu_conv2d_fwd(void *ctx, const dg_conv_shape *s, dg_ref x, dg_ref w, dg_ref bias,
                               dg_ref y, dg_ref work)
{
    return cu_conv_fwd_any((cu_ctx *)ctx, s, x, w, bias, y, work, false);
}

static dg_status cu_conv2d_fwd_ep(void *ctx, const dg_conv_shape *s, dg_ref x, dg_ref w, dg_ref y,
                                  dg_ref work, const dg_epilogue *ep)
{
    if (!ep || ep->mask.buf)
        return cu_fail((cu_ctx *)ctx, DG_ERR_USAGE, "cuda: conv2d_fwd_ep: no epilogue, or a mask");
    return cu_conv_fwd_any((cu_ctx *)ctx, s, x, w, ep->bias, y, work, ep->relu);
}

static dg_status cu_conv2d_bwd(void *ctx, const dg_conv_shape *s, dg_ref x, dg_ref w, dg_ref dy,
                               dg_ref dx, dg_ref dw, dg_ref db, dg_ref work)
{
    cu_ctx *c = (cu_ctx *)ctx;
    cu_conv_plan pl;
    void *px, *pw, *pdy, *pdx, *pdw, *pdb, *pwk;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if (!cu_conv_plan_make(s, &pl))
        return cu_fail(c, DG_ERR_USAGE, "cuda: conv2d_bwd: bad or too large shape");
    if ((st = cu_ref(c, "conv2d_bwd", "x", x, pl.x_count, &px)) != DG_OK ||
        (st = cu_ref(c, "conv2d_bwd", "w", w, pl.w_count, &pw)) != DG_OK ||
        (st = cu_ref(c, "conv2d_bwd", "dy", dy, pl.y_count, &pdy)) != DG_OK ||
        (st = cu_ref_opt(c, "conv2d_bwd", "dx", dx, pl.x_count, &pdx)) != DG_OK ||
        (st = cu_ref(c, "conv2d_bwd", "dw", dw, pl.w_count, &pdw)) != DG_OK ||
        (st = cu_ref_opt(c, "conv2d_bwd", "db", db, (size_t)s->k, &pdb)) != DG_OK)
        return st;
    size_t dws;
    if (cu_conv_on_dnn(c, s, &dws)) {
        char msg[256];
        pwk = NULL;
        if (c->math == CU_MATH_BF16) {
            void *grads[3] = {pdy, pdx, pdw};
            if ((st = cu_conv_bf16(c, s, &pl, dws, px, pw, NULL, NULL, grads, work, false)) !=
                DG_OK)
                return st;
            if (pdb)
                return cu_bias_grad_raw(c, (const float *)pdy, (float *)pdb, s->n, s->k, pl.P);
            return DG_OK;
        }
        if (dws && (st = cu_ref(c, "conv2d_bwd", "work", work, dws / sizeof(float), &pwk)) != DG_OK)
            return st;
        if ((st = cdn_conv_bwd(c->dnn, s, (const float *)px, (const float *)pw, (const float *)pdy,
                               (float *)pdx, (float *)pdw, pwk, msg, sizeof msg)) != DG_OK)
            return cu_fail(c, st, "cuda: conv2d_bwd: %s", msg);
        if (pdb)
            return cu_bias_grad_raw(c, (const float *)pdy, (float *)pdb, s->n, s->k, pl.P);
        return DG_OK;
    }
    if (c->math == CU_MATH_BF16)
        return cu_conv_no_bf16(c, "conv2d_bwd", s);
    if ((st = cu_ref(c, "conv2d_bwd", "work", work, pl.work_bytes / sizeof(float), &pwk)) != DG_OK)
        return st;
    float *col = (float *)pwk, *dyt = col + pl.col_floats;
    size_t img_x = (size_t)s->c * s->h * s->w, img_y = (size_t)s->k * pl.P;
    for (int i0 = 0; i0 < s->n; i0 += pl.chunk) {
        int cn = s->n - i0 < pl.chunk ? s->n - i0 : pl.chunk;
        cu_conv_geo g = cu_geo(s, cn);
        size_t ncol = (size_t)cn * pl.ckk * pl.P, ndy = (size_t)cn * img_y;
        int L = cn * pl.P;
        k_im2col<<<cu_blocks(ncol), CU_THREADS, 0, c->stream>>>((const float *)px + i0 * img_x, col,
                                                                g);
        k_dy_transpose<<<cu_blocks(ndy), CU_THREADS, 0, c->stream>>>(
            (const float *)pdy + i0 * img_y, dyt, g);
        if ((st = cu_launched(c, "conv2d_bwd: im2col")) != DG_OK)
            return st;
        /* dW[k, ckk] (+)= dyT[k, L] col[ckk, L]^T */
        if ((st = cu_sgemm(c, false, true, s->k, pl.ckk, L, 1.0f, dyt, L, col, L,
                           i0 == 0 ? 0.0f : 1.0f, (float *)pdw, pl.ckk)) != DG_OK)
            return st;
        if (pdx) {
            /* dcol[ckk, L] = W^T[ckk, k] dyT[k, L], over col (no longer needed). */
            if ((st = cu_sgemm(c, true, false, pl.ckk, L, s->k, 1.0f, (const float *)pw, pl.ckk,
                               dyt, L, 0.0f, col, L)) != DG_OK)
                return st;
            size_t nx = (size_t)cn * img_x;
            k_col2im<<<cu_blocks(nx), CU_THREADS, 0, c->stream>>>(col, (float *)pdx + i0 * img_x,
                                                                  g);
            if ((st = cu_launched(c, "conv2d_bwd: col2im")) != DG_OK)
                return st;
        }
    }
    if (pdb)
        return cu_bias_grad_raw(c, (const float *)pdy, (float *)pdb, s->n, s->k, pl.P);
    return DG_OK;
}

/* ---- loss and optimiser --------------------------------------------------------------- */

static dg_status cu_xent(void *ctx, int n, int classes, dg_ref logits, dg_ref labels,
                         dg_ref dlogits, dg_ref acc)
{
    cu_ctx *c = (cu_ctx *)ctx;
    void *pl, *plab, *pd, *pacc;
    size_t total = 0;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if (n < 0 || classes < 1 || !cu_prod(&total, n, classes, 1, 1))
        return cu_fail(c, DG_ERR_USAGE, "cuda: xent: bad shape n %d, classes %d", n, classes);
    if ((st = cu_ref(c, "xent", "logits", logits, total, &pl)) != DG_OK ||
        (st = cu_ref(c, "xent", "labels", labels, (size_t)n, &plab)) != DG_OK ||
        (st = cu_ref(c, "xent", "dlogits", dlogits, total, &pd)) != DG_OK ||
        (st = cu_ref(c, "xent", "acc", acc, 2, &pacc)) != DG_OK)
        return st;
    if (n == 0)
        return DG_OK;
    int nb = (n + CU_XENT_WARPS - 1) / CU_XENT_WARPS;
    if (nb > CU_XENT_BLOCKS)
        nb = CU_XENT_BLOCKS;
    k_xent<<<(unsigned)nb, CU_XENT_WARPS * 32, 0, c->stream>>>(
        (const float *)pl, (const int *)plab, (float *)pd, n, classes, c->xent_part);
    k_xent_reduce<<<1, CU_XENT_BLOCKS, 0, c->stream>>>(c->xent_part, nb, n, (float *)pacc);
    return cu_launched(c, "xent");
}

static dg_status cu_sgd(void *ctx, dg_ref w, dg_ref g, dg_ref mom, size_t count, float lr,
                        float momentum, float weight_decay)
{
    cu_ctx *c = (cu_ctx *)ctx;
    void *pw, *pg, *pm = NULL;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if ((st = cu_ref(c, "sgd", "w", w, count, &pw)) != DG_OK ||
        (st = cu_ref(c, "sgd", "g", g, count, &pg)) != DG_OK)
        return st;
    if (momentum != 0.0f && (st = cu_ref(c, "sgd", "mom", mom, count, &pm)) != DG_OK)
        return st;
    if (count == 0)
        return DG_OK;
    k_sgd<<<cu_blocks(count), CU_THREADS, 0, c->stream>>>(
        (float *)pw, (const float *)pg, (float *)pm, count, lr, momentum, weight_decay);
    return cu_launched(c, "sgd");
}

/* ---- events and capture ---------------------------------------------------------- */

/* Records slot's event on the stream (created on first use). Inside a capture
 * it becomes an event-record node of the graph, so replays mark it too. */
static dg_status cu_event_record(void *ctx, int slot)
{
    cu_ctx *c = (cu_ctx *)ctx;
    cudaError_t e;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if (slot < 0 || slot >= DG_EVENT_SLOTS)
        return cu_fail(c, DG_ERR_USAGE, "cuda: event_record: slot %d outside 0..%d", slot,
                       DG_EVENT_SLOTS - 1);
    if (!c->ev[slot] && (e = cudaEventCreate(&c->ev[slot])) != cudaSuccess) {
        c->ev[slot] = NULL;
        return cu_fail_rt(c, DG_ERR_BACKEND, "cudaEventCreate", e);
    }
    if (c->capturing)
        e = cudaEventRecordWithFlags(c->ev[slot], c->stream, cudaEventRecordExternal);
    else
        e = cudaEventRecord(c->ev[slot], c->stream);
    if (e != cudaSuccess)
        return cu_fail_rt(c, DG_ERR_BACKEND, "cudaEventRecord", e);
    c->ev_recorded[slot] = true;
    return DG_OK;
}

/* Waits for both slots and returns the milliseconds between them. */
static dg_status cu_event_elapsed(void *ctx, int from, int to, double *ms)
{
    cu_ctx *c = (cu_ctx *)ctx;
    cudaError_t e;
    float f = 0.0f;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if (!ms)
        return cu_fail(c, DG_ERR_USAGE, "cuda: event_elapsed: NULL output");
    *ms = 0.0;
    if (from < 0 || from >= DG_EVENT_SLOTS || to < 0 || to >= DG_EVENT_SLOTS)
        return cu_fail(c, DG_ERR_USAGE, "cuda: event_elapsed: slots %d, %d outside 0..%d", from, to,
                       DG_EVENT_SLOTS - 1);
    if (!c->ev_recorded[from] || !c->ev_recorded[to])
        return cu_fail(c, DG_ERR_USAGE, "cuda: event_elapsed: slot %d never recorded",
                       c->ev_recorded[from] ? to : from);
    if ((st = cu_not_capturing(c, "event_elapsed")) != DG_OK)
        return st;
    e = cudaEventSynchronize(c->ev[from]);
    if (e == cudaSuccess)
        e = cudaEventSynchronize(c->ev[to]);
    if (e == cudaSuccess)
        e = cudaEventElapsedTime(&f, c->ev[from], c->ev[to]);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return cu_fail_rt(c, DG_ERR_BACKEND, "event_elapsed", e);
    }
    *ms = (double)f;
    return DG_OK;
}

/* Starts recording the stream's work into a graph (thread-local mode: other
 * threads' unrelated CUDA calls are not affected). */
static dg_status cu_capture_begin(void *ctx)
{
    cu_ctx *c = (cu_ctx *)ctx;
    cudaError_t e;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if (c->capturing)
        return cu_fail(c, DG_ERR_USAGE, "cuda: capture_begin: a capture is already open");
    e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return cu_fail_rt(c, DG_ERR_BACKEND, "cudaStreamBeginCapture", e);
    }
    c->capturing = true;
    return DG_OK;
}

/* Ends the capture and instantiates it, replacing a previous graph. */
static dg_status cu_capture_end(void *ctx)
{
    cu_ctx *c = (cu_ctx *)ctx;
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    cudaError_t e;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if (!c->capturing)
        return cu_fail(c, DG_ERR_USAGE, "cuda: capture_end: no capture open");
    e = cudaStreamEndCapture(c->stream, &g);
    c->capturing = false;
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (g)
            cudaGraphDestroy(g);
        return cu_fail_rt(c, DG_ERR_BACKEND, "cudaStreamEndCapture", e);
    }
    e = cudaGraphInstantiate(&x, g, 0);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cudaGraphDestroy(g);
        return cu_fail_rt(c, DG_ERR_BACKEND, "cudaGraphInstantiate", e);
    }
    cu_drop_graph(c);
    c->graph = g;
    c->exec = x;
    return DG_OK;
}

/* Launches the captured step on the stream (asynchronous). */
static dg_status cu_replay(void *ctx)
{
    cu_ctx *c = (cu_ctx *)ctx;
    cudaError_t e;
    dg_status st;

    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if (c->capturing)
        return cu_fail(c, DG_ERR_USAGE, "cuda: replay: a capture is open");
    if (!c->exec)
        return cu_fail(c, DG_ERR_USAGE, "cuda: replay: nothing captured");
    e = cudaGraphLaunch(c->exec, c->stream);
    if (e != cudaSuccess)
        return cu_fail_rt(c, DG_ERR_BACKEND, "cudaGraphLaunch", e);
    return DG_OK;
}

/* 0: exact fp32 (cuBLAS default math, cuDNN FMA math); 1: TF32 tensor cores
 * allowed for GEMMs and convolutions; 2: bf16 inputs to GEMMs and
 * convolutions with fp32 accumulation (cuda_bf16.cu). Call before
 * conv2d_workspace: the convolution algorithms (and their workspaces) are
 * chosen per math mode. */
static dg_status cu_set_math(void *ctx, int mode)
{
    cu_ctx *c = (cu_ctx *)ctx;
    dg_status st;
    if ((st = cu_enter(c)) != DG_OK)
        return st;
    if (mode != CU_MATH_FP32 && mode != CU_MATH_TF32 && mode != CU_MATH_BF16)
        return cu_fail(c, DG_ERR_USAGE, "cuda: set_math: mode %d (0 fp32, 1 tf32, 2 bf16)", mode);
    if (c->capturing)
        return cu_fail(c, DG_ERR_USAGE, "cuda: set_math: a capture is open");
    /* bf16 GEMMs name their types and compute type (cublasGemmEx): default math. */
    cublasStatus_t bs = cublasSetMathMode(c->blas, mode == CU_MATH_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                        : CUBLAS_DEFAULT_MATH);
    if (bs != CUBLAS_STATUS_SUCCESS)
        return cu_fail(c, DG_ERR_BACKEND, "cuda: cublasSetMathMode: %s: %s",
                       cublasGetStatusName(bs), cublasGetStatusString(bs));
    cdn_set_math(c->dnn, mode);
    c->math = mode;
    return DG_OK;
}

static const dg_backend_iface cu_iface = {
    .version = DG_BACKEND_IFACE_VERSION,
    .name = "cuda",
    /* device_info calls the runtime on the backend's device: not from the
     * sampler thread (NVML serves there). */
    .caps = {.event_timing = true, .graph_capture = true, .tf32 = true, .nvml = true},
    .init = cu_init,
    .free = cu_free,
    .last_error = cu_last_error,
    .device_count = cu_device_count,
    .device_info = cu_device_info,
    .versions = cu_versions,
    .buf_alloc = cu_buf_alloc,
    .buf_free = cu_buf_free,
    .upload = cu_upload,
    .download = cu_download,
    .synchronize = cu_synchronize,
    .supports_op = cu_supports_op,
    .gemm = cu_gemm,
    .fill = cu_fill,
    .bias_add = cu_bias_add,
    .bias_grad = cu_bias_grad,
    .relu_fwd = cu_relu_fwd,
    .relu_bwd = cu_relu_bwd,
    .maxpool_fwd = cu_maxpool_fwd,
    .maxpool_bwd = cu_maxpool_bwd,
    .conv2d_workspace = cu_conv2d_workspace,
    .conv2d_fwd = cu_conv2d_fwd,
    .conv2d_bwd = cu_conv2d_bwd,
    .xent = cu_xent,
    .sgd = cu_sgd,
    .event_record = cu_event_record,
    .event_elapsed = cu_event_elapsed,
    .capture_begin = cu_capture_begin,
    .capture_end = cu_capture_end,
    .replay = cu_replay,
    .set_math = cu_set_math,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .host_wait = cu_host_wait,
    .fusion = cu_fusion,
    .gemm_ep = cu_gemm_ep,
    .conv2d_fwd_ep = cu_conv2d_fwd_ep,
};

/* The plug-in's only export: the CUDA backend's interface. */
extern "C" __attribute__((visibility("default"))) const dg_backend_iface *
dg_backend_plugin_iface(void)
{
    return &cu_iface;
}
