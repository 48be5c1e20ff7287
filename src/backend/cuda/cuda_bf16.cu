/* The CUDA plug-in's bf16 mode (set_math(2), devgate train --precision bf16):
 * autocast-like mixed precision. Matrix products and convolutions take their
 * fp32 inputs rounded to bf16 (round to nearest even) and accumulate in fp32:
 * cublasGemmEx on the fp32 operands with CUBLAS_COMPUTE_32F_FAST_16BF (cuBLAS
 * rounds them), or on bf16 copies our cast kernel makes with
 * CUBLAS_COMPUTE_32F (DEVGATE_CUDA_BF16_GEMM=cast); cuDNN convolutions on
 * CUDNN_DATA_BFLOAT16 tensors with a float compute type, whose bf16 outputs
 * one kernel widens back to fp32 (adding the bias and the ReLU on the way),
 * or, where a channel count is not a multiple of 8, on the TF32 carrier: fp32
 * tensors of the bf16-rounded inputs on TF32 math (TF32 holds every bf16
 * value, so the products are the bf16 inputs' own), whose fp32 outputs need no
 * widening. Everything else (weights, the SGD update, the loss, the
 * reductions, the activations between ops) stays fp32, and no loss scaling is
 * needed: bf16 has fp32's exponent range. *
 * Like every op of the plug-in these only enqueue on the stream: the GEMM's
 * bf16 scratch grows outside a capture (the eager first step sizes it) and a
 * capture that would need more fails with a message; the convolutions' copies
 * live in the workspace conv2d_workspace reported. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>

#include "cuda_bf16.h"

#define CBF_THREADS 256
#define CBF_MAX_BLOCKS 65536
#define CBF_ALIGN 256

static size_t cbf_round(size_t bytes)
{
    return (bytes + CBF_ALIGN - 1) / CBF_ALIGN * CBF_ALIGN;
}

static unsigned cbf_blocks(size_t count)
{
    size_t b = (count + CBF_THREADS - 1) / CBF_THREADS;
    if (b > CBF_MAX_BLOCKS)
        b = CBF_MAX_BLOCKS;
    return (unsigned)(b ? b : 1);
}

/* Up to three fp32 -> bf16 ranges cast by one launch; as_float: written back
 * as fp32 holding the bf16-rounded values (the TF32 carrier's inputs). */
typedef struct cbf_spans {
    const float *src[3];
    void *dst[3];
    size_t n[3];
    bool as_float;
} cbf_spans;

/* Blocks of row blockIdx.y cast span blockIdx.y: each thread's span is known
 * without a search, and the spans' pointers are picked by constant indices
 * (an index computed per element made every thread copy the parameter struct
 * into local memory). */
__global__ void k_to_bf16(cbf_spans sp)
{
    unsigned r = blockIdx.y;
    const float *src = r == 0 ? sp.src[0] : r == 1 ? sp.src[1] : sp.src[2];
    void *dst = r == 0 ? sp.dst[0] : r == 1 ? sp.dst[1] : sp.dst[2];
    size_t n = r == 0 ? sp.n[0] : r == 1 ? sp.n[1] : sp.n[2];
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        __nv_bfloat16 v = __float2bfloat16_rn(src[i]);
        if (sp.as_float)
            ((float *)dst)[i] = __bfloat162float(v);
        else
            ((__nv_bfloat16 *)dst)[i] = v;
    }
}

/* Up to two bf16 -> fp32 ranges; or range 0 alone plus bias[plane % channels]
 * over planes of inner elements (k_from_bf16_bias). */
typedef struct cbf_wide {
    const __nv_bfloat16 *src[2];
    float *dst[2];
    size_t n[2];
    const float *bias; /* range 0 only; NULL: none */
    bool relu;         /* range 0 only: ReLU after the bias */
    unsigned channels, inner;
} cbf_wide;

__global__ void k_from_bf16(cbf_wide w)
{
    size_t total = w.n[0] + w.n[1];
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        if (i < w.n[0]) {
            w.dst[0][i] = __bfloat162float(w.src[0][i]);
        } else {
            size_t j = i - w.n[0];
            w.dst[1][j] = __bfloat162float(w.src[1][j]);
        }
    }
}

/* Range 0 with the bias (may be NULL) and the ReLU, a block per plane of inner
 * elements (no division per element: a 64-bit one cost more than the memory
 * traffic on large outputs). The unfused bias_add and relu's arithmetic. */
__global__ void k_from_bf16_bias(const __nv_bfloat16 *src, float *dst, const float *bias, bool relu,
                                 unsigned planes, unsigned channels, unsigned inner)
{
    for (unsigned pl = blockIdx.x; pl < planes; pl += gridDim.x) {
        float b = bias ? bias[pl % channels] : 0.0f;
        size_t o = (size_t)pl * inner;
        for (unsigned i = threadIdx.x; i < inner; i += blockDim.x) {
            float v = __bfloat162float(src[o + i]);
            if (bias)
                v += b;
            dst[o + i] = relu ? cu_relu(v) : v;
        }
    }
}

/* Channels-last copies: src and dst hold n images of c planes of p elements
 * (NCHW, or a filter's KCRS with n = k and p = r s) and of p pixels of c
 * channels (NHWC, KRSC). A block moves a 32 x 32 tile of (channel, pixel)
 * through shared memory so that both the reads and the writes run along
 * consecutive addresses. */
#define CBF_TILE 32
#define CBF_TILE_ROWS 8

/* fp32 NCHW -> bf16 NHWC, rounded to nearest even. */
__global__ void k_to_bf16_nhwc(const float *src, __nv_bfloat16 *dst, unsigned n, unsigned c,
                               unsigned p)
{
    __shared__ float t[CBF_TILE][CBF_TILE + 1];
    unsigned p0 = blockIdx.x * CBF_TILE, c0 = blockIdx.y * CBF_TILE;
    for (unsigned img = blockIdx.z; img < n; img += gridDim.z) {
        size_t base = (size_t)img * c * p;
        for (unsigned j = threadIdx.y; j < CBF_TILE; j += CBF_TILE_ROWS)
            if (c0 + j < c && p0 + threadIdx.x < p)
                t[j][threadIdx.x] = src[base + (size_t)(c0 + j) * p + p0 + threadIdx.x];
        __syncthreads();
        for (unsigned j = threadIdx.y; j < CBF_TILE; j += CBF_TILE_ROWS)
            if (p0 + j < p && c0 + threadIdx.x < c)
                dst[base + (size_t)(p0 + j) * c + c0 + threadIdx.x] =
                    __float2bfloat16_rn(t[threadIdx.x][j]);
        __syncthreads();
    }
}

/* bf16 NHWC -> fp32 NCHW, then bias[channel] (may be NULL) and the ReLU. */
__global__ void k_from_bf16_nhwc(const __nv_bfloat16 *src, float *dst, const float *bias, bool relu,
                                 unsigned n, unsigned c, unsigned p)
{
    __shared__ float t[CBF_TILE][CBF_TILE + 1];
    unsigned p0 = blockIdx.x * CBF_TILE, c0 = blockIdx.y * CBF_TILE;
    for (unsigned img = blockIdx.z; img < n; img += gridDim.z) {
        size_t base = (size_t)img * c * p;
        for (unsigned j = threadIdx.y; j < CBF_TILE; j += CBF_TILE_ROWS)
            if (p0 + j < p && c0 + threadIdx.x < c)
                t[threadIdx.x][j] =
                    __bfloat162float(src[base + (size_t)(p0 + j) * c + c0 + threadIdx.x]);
        __syncthreads();
        for (unsigned j = threadIdx.y; j < CBF_TILE; j += CBF_TILE_ROWS)
            if (c0 + j < c && p0 + threadIdx.x < p) {
                float v = t[j][threadIdx.x];
                if (bias)
                    v += bias[c0 + j];
                dst[base + (size_t)(c0 + j) * p + p0 + threadIdx.x] = relu ? cu_relu(v) : v;
            }
        __syncthreads();
    }
}

/* The grid of a channels-last copy of n x c x p elements. */
static dim3 cbf_tiles(unsigned n, unsigned c, unsigned p)
{
    return dim3((p + CBF_TILE - 1) / CBF_TILE, (c + CBF_TILE - 1) / CBF_TILE,
                n < CBF_MAX_BLOCKS ? n : CBF_MAX_BLOCKS - 1);
}

static dg_status cbf_launched(const char *what, char *err, size_t len)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        return DG_OK;
    cdn_msg(err, len, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
    return DG_ERR_BACKEND;
}

static dg_status cbf_cast(cudaStream_t stream, cbf_spans sp, const char *what, char *err,
                          size_t len)
{
    size_t most = sp.n[0];
    unsigned spans = 1;
    for (unsigned r = 1; r < 3; r++)
        if (sp.n[r]) {
            spans = r + 1;
            most = sp.n[r] > most ? sp.n[r] : most;
        }
    if (most == 0)
        return DG_OK;
    k_to_bf16<<<dim3(cbf_blocks(most), spans), CBF_THREADS, 0, stream>>>(sp);
    return cbf_launched(what, err, len);
}

static dg_status cbf_widen(cudaStream_t stream, cbf_wide w, const char *what, char *err, size_t len)
{
    size_t planes = w.inner ? w.n[0] / w.inner : 0;
    if ((w.bias || w.relu) && w.n[1] == 0 && planes > 0 && planes <= UINT_MAX) {
        unsigned g = planes > CBF_MAX_BLOCKS ? CBF_MAX_BLOCKS : (unsigned)planes;
        k_from_bf16_bias<<<g, w.inner >= CBF_THREADS ? CBF_THREADS : 64, 0, stream>>>(
            w.src[0], w.dst[0], w.bias, w.relu, (unsigned)planes, w.channels, w.inner);
        return cbf_launched(what, err, len);
    }
    if (w.bias || w.relu) {
        cdn_msg(err, len, "%s: a bias or ReLU with a second range or %zu planes", what, planes);
        return DG_ERR_BACKEND;
    }
    size_t total = w.n[0] + w.n[1];
    if (total == 0)
        return DG_OK;
    k_from_bf16<<<cbf_blocks(total), CBF_THREADS, 0, stream>>>(w);
    return cbf_launched(what, err, len);
}

/* x (n x c x p, NCHW fp32) into dst as NHWC bf16. */
static dg_status cbf_cast_nhwc(cudaStream_t stream, const float *x, void *dst, int n, int c, int p,
                               const char *what, char *err, size_t len)
{
    if ((size_t)n * c * p == 0)
        return DG_OK;
    k_to_bf16_nhwc<<<cbf_tiles(n, c, p), dim3(CBF_TILE, CBF_TILE_ROWS), 0, stream>>>(
        x, (__nv_bfloat16 *)dst, (unsigned)n, (unsigned)c, (unsigned)p);
    return cbf_launched(what, err, len);
}

/* src (n x p x c, NHWC bf16) into y as NCHW fp32, with bias and ReLU. */
static dg_status cbf_widen_nhwc(cudaStream_t stream, const void *src, float *y, const float *bias,
                                bool relu, int n, int c, int p, const char *what, char *err,
                                size_t len)
{
    if ((size_t)n * c * p == 0)
        return DG_OK;
    k_from_bf16_nhwc<<<cbf_tiles(n, c, p), dim3(CBF_TILE, CBF_TILE_ROWS), 0, stream>>>(
        (const __nv_bfloat16 *)src, y, bias, relu, (unsigned)n, (unsigned)c, (unsigned)p);
    return cbf_launched(what, err, len);
}

CDN_HIDDEN void cbf_scratch_free(cbf_scratch *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->nretired; i++)
        cudaFree(s->retired[i]);
    if (s->p)
        cudaFree(s->p);
    memset(s, 0, sizeof *s);
}

/* Makes s hold at least bytes (half again as much when it grows). */
static dg_status cbf_reserve(cbf_scratch *s, cudaStream_t stream, bool capturing, size_t bytes,
                             char *err, size_t len)
{
    if (bytes <= s->bytes)
        return DG_OK;
    if (capturing) {
        cdn_msg(err, len,
                "bf16 gemm: %zu bytes of operand scratch needed inside a capture (%zu held); the "
                "eager step before the capture should have sized it",
                bytes, s->bytes);
        return DG_ERR_BACKEND;
    }
    if (s->p && s->nretired == CBF_RETIRED) {
        cdn_msg(err, len, "bf16 gemm: operand scratch outgrown %d times", CBF_RETIRED);
        return DG_ERR_BACKEND;
    }
    size_t want = bytes + bytes / 2;
    void *p = NULL;
    cudaError_t e = cudaStreamSynchronize(stream);
    if (e == cudaSuccess)
        e = cudaMalloc(&p, want);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cdn_msg(err, len, "bf16 gemm: %zu bytes of operand scratch: %s: %s", want,
                cudaGetErrorName(e), cudaGetErrorString(e));
        return e == cudaErrorMemoryAllocation ? DG_ERR_DEVICE_OOM : DG_ERR_BACKEND;
    }
    if (s->p)
        s->retired[s->nretired++] = s->p; /* a captured graph may still read it */
    s->p = p;
    s->bytes = want;
    return DG_OK;
}

/* DEVGATE_CUDA_BF16_GEMM=fast (the default): cuBLAS rounds the fp32 operands
 * to bf16 itself (CUBLAS_COMPUTE_32F_FAST_16BF), no cast kernel of ours (on
 * the H200 mlp's step at batch 32 took 0.222 ms so, 0.235 ms with ours);
 * cast: our kernel rounds them into bf16 copies first. */
static bool cbf_gemm_fast(void)
{
    const char *v = getenv("DEVGATE_CUDA_BF16_GEMM");
    return !(v && strcmp(v, "cast") == 0);
}

CDN_HIDDEN dg_status cbf_gemm(cublasHandle_t h, cudaStream_t stream, cbf_scratch *s, bool capturing,
                              bool ta, bool tb, int m, int n, int k, float alpha, const float *a,
                              size_t a_count, int lda, const float *b, size_t b_count, int ldb,
                              float beta, float *c, int ldc, char *err, size_t len)
{
    if (cbf_gemm_fast()) {
        cublasStatus_t bs =
            cublasGemmEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                         &alpha, b, CUDA_R_32F, ldb, a, CUDA_R_32F, lda, &beta, c, CUDA_R_32F, ldc,
                         CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT);
        if (bs != CUBLAS_STATUS_SUCCESS) {
            cdn_msg(err, len, "cublasGemmEx (fp32 rounded to bf16 by cuBLAS) %dx%dx%d: %s: %s", m,
                    n, k, cublasGetStatusName(bs), cublasGetStatusString(bs));
            return DG_ERR_BACKEND;
        }
        return DG_OK;
    }
    size_t a_bytes = cbf_round(a_count * sizeof(__nv_bfloat16));
    dg_status st =
        cbf_reserve(s, stream, capturing, a_bytes + b_count * sizeof(__nv_bfloat16), err, len);
    if (st != DG_OK)
        return st;
    __nv_bfloat16 *a16 = (__nv_bfloat16 *)s->p, *b16 = (__nv_bfloat16 *)((char *)s->p + a_bytes);
    cbf_spans sp = {{a, b, NULL}, {a16, b16, NULL}, {a_count, b_count, 0}, false};
    if ((st = cbf_cast(stream, sp, "bf16 gemm: cast", err, len)) != DG_OK)
        return st;
    /* Row-major C^T = op(B)^T op(A)^T as cuBLAS's column-major product. */
    cublasStatus_t bs =
        cublasGemmEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                     &alpha, b16, CUDA_R_16BF, ldb, a16, CUDA_R_16BF, lda, &beta, c, CUDA_R_32F,
                     ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cdn_msg(err, len, "cublasGemmEx (bf16 inputs, fp32 accumulation) %dx%dx%d: %s: %s", m, n, k,
                cublasGetStatusName(bs), cublasGetStatusString(bs));
        return DG_ERR_BACKEND;
    }
    return DG_OK;
}

/* The areas after cuDNN's workspace: bf16 x | w | y (dy) | dx | dw; on the
 * TF32 carrier (cdn_carrier) fp32 x | w | dy of bf16-rounded values (cuDNN
 * then writes y, dx and dw in fp32 itself). */
typedef struct cbf_conv_areas {
    void *x, *w, *y, *dx, *dw;
} cbf_conv_areas;

/* The rounded bytes of the x, w and y (dy) areas: bf16, or fp32 on the carrier. */
static void cbf_sizes(bool carrier, size_t x_count, size_t w_count, size_t y_count, size_t *x,
                      size_t *w, size_t *y)
{
    size_t e = carrier ? sizeof(float) : sizeof(__nv_bfloat16);
    *x = cbf_round(x_count * e);
    *w = cbf_round(w_count * e);
    *y = cbf_round(y_count * e);
}

static cbf_conv_areas cbf_areas(bool carrier, void *work, size_t ws_bytes, size_t x_count,
                                size_t w_count, size_t y_count)
{
    char *p = (char *)work + cbf_round(ws_bytes);
    size_t x, w, y;
    cbf_sizes(carrier, x_count, w_count, y_count, &x, &w, &y);
    cbf_conv_areas a;
    a.x = p;
    a.w = p + x;
    a.y = p + x + w;
    a.dx = carrier ? NULL : p + x + w + y;
    a.dw = carrier ? NULL : p + 2 * x + w + y;
    return a;
}

CDN_HIDDEN size_t cbf_conv_extra(cdn_ctx *d, const dg_conv_shape *s, size_t x_count, size_t w_count,
                                 size_t y_count)
{
    size_t x, w, y;
    bool carrier = cdn_carrier(d, s);
    cbf_sizes(carrier, x_count, w_count, y_count, &x, &w, &y);
    return carrier ? x + w + y : 2 * x + 2 * w + y;
}

/* cbf_conv_fwd on channels-last copies (cdn_nhwc): x and w transposed into
 * bf16 NHWC and KRSC, cuDNN's NHWC bf16 y transposed back into the fp32 NCHW
 * y with the bias and the ReLU. */
static dg_status cbf_conv_fwd_nhwc(cdn_ctx *d, cudaStream_t stream, const dg_conv_shape *s,
                                   cbf_conv_areas a, const float *x, const float *w,
                                   const float *bias, bool relu, float *y, void *work, char *err,
                                   size_t len)
{
    const char *what = "bf16 conv2d_fwd (nhwc)";
    dg_status st = cbf_cast_nhwc(stream, x, a.x, s->n, s->c, s->h * s->w, what, err, len);
    if (st == DG_OK)
        st = cbf_cast_nhwc(stream, w, a.w, s->k, s->c, s->kh * s->kw, what, err, len);
    if (st == DG_OK)
        st = cdn_conv_fwd(d, s, a.x, a.w, a.y, work, err, len);
    if (st == DG_OK)
        st = cbf_widen_nhwc(stream, a.y, y, bias, relu, s->n, s->k, s->ho * s->wo, what, err, len);
    return st;
}

/* cbf_conv_bwd on channels-last copies: dw (KRSC) and dx (NHWC) transposed
 * back into the engine's fp32 KCRS and NCHW. */
static dg_status cbf_conv_bwd_nhwc(cdn_ctx *d, cudaStream_t stream, const dg_conv_shape *s,
                                   cbf_conv_areas a, const float *x, const float *w,
                                   const float *dy, float *dx, float *dw, void *work, char *err,
                                   size_t len)
{
    const char *what = "bf16 conv2d_bwd (nhwc)";
    int hw = s->h * s->w, rs = s->kh * s->kw;
    dg_status st = cbf_cast_nhwc(stream, x, a.x, s->n, s->c, hw, what, err, len);
    if (st == DG_OK)
        st = cbf_cast_nhwc(stream, dy, a.y, s->n, s->k, s->ho * s->wo, what, err, len);
    if (st == DG_OK && dx)
        st = cbf_cast_nhwc(stream, w, a.w, s->k, s->c, rs, what, err, len);
    if (st == DG_OK)
        st = cdn_conv_bwd(d, s, a.x, a.w, a.y, dx ? a.dx : NULL, a.dw, work, err, len);
    if (st == DG_OK)
        st = cbf_widen_nhwc(stream, a.dw, dw, NULL, false, s->k, s->c, rs, what, err, len);
    if (st == DG_OK && dx)
        st = cbf_widen_nhwc(stream, a.dx, dx, NULL, false, s->n, s->c, hw, what, err, len);
    return st;
}

CDN_HIDDEN dg_status cbf_conv_fwd(cdn_ctx *d, cudaStream_t stream, const dg_conv_shape *s,
                                  size_t x_count, size_t w_count, size_t y_count, const float *x,
                                  const float *w, const float *bias, bool relu, float *y,
                                  void *work, size_t ws_bytes, char *err, size_t len)
{
    bool carrier = cdn_carrier(d, s);
    if (carrier && (bias || relu)) {
        cdn_msg(err, len, "bf16 conv2d_fwd: the TF32 carrier's bias and ReLU are the caller's");
        return DG_ERR_USAGE;
    }
    cbf_conv_areas a = cbf_areas(carrier, work, ws_bytes, x_count, w_count, y_count);
    if (cdn_nhwc(d, s))
        return cbf_conv_fwd_nhwc(d, stream, s, a, x, w, bias, relu, y, work, err, len);
    cbf_spans sp = {{x, w, NULL}, {a.x, a.w, NULL}, {x_count, w_count, 0}, carrier};
    dg_status st = cbf_cast(stream, sp, "bf16 conv2d_fwd: cast", err, len);
    if (st != DG_OK)
        return st;
    if (carrier) /* fp32 y straight from cuDNN */
        return cdn_conv_fwd(d, s, a.x, a.w, y, work, err, len);
    if ((st = cdn_conv_fwd(d, s, a.x, a.w, a.y, work, err, len)) != DG_OK)
        return st;
    cbf_wide wd = {
        {(const __nv_bfloat16 *)a.y, NULL}, {y, NULL}, {y_count, 0}, bias, relu, (unsigned)s->k,
        (unsigned)(s->ho * s->wo)};
    return cbf_widen(stream, wd, "bf16 conv2d_fwd: widen", err, len);
}

CDN_HIDDEN dg_status cbf_conv_bwd(cdn_ctx *d, cudaStream_t stream, const dg_conv_shape *s,
                                  size_t x_count, size_t w_count, size_t y_count, const float *x,
                                  const float *w, const float *dy, float *dx, float *dw, void *work,
                                  size_t ws_bytes, char *err, size_t len)
{
    bool carrier = cdn_carrier(d, s);
    cbf_conv_areas a = cbf_areas(carrier, work, ws_bytes, x_count, w_count, y_count);
    if (cdn_nhwc(d, s))
        return cbf_conv_bwd_nhwc(d, stream, s, a, x, w, dy, dx, dw, work, err, len);
    cbf_spans sp = {{x, dy, w}, {a.x, a.y, a.w}, {x_count, y_count, dx ? w_count : 0}, carrier};
    dg_status st = cbf_cast(stream, sp, "bf16 conv2d_bwd: cast", err, len);
    if (st != DG_OK)
        return st;
    if (carrier) /* fp32 dx and dw straight from cuDNN */
        return cdn_conv_bwd(d, s, a.x, a.w, a.y, dx, dw, work, err, len);
    if ((st = cdn_conv_bwd(d, s, a.x, a.w, a.y, dx ? a.dx : NULL, a.dw, work, err, len)) != DG_OK)
        return st;
    cbf_wide wd = {{(const __nv_bfloat16 *)a.dw, (const __nv_bfloat16 *)a.dx},
                   {dw, dx},
                   {w_count, dx ? x_count : 0},
                   NULL,
                   false,
                   1,
                   1};
    return cbf_widen(stream, wd, "bf16 conv2d_bwd: widen", err, len);
}
