/* Shared between the CUDA plug-in's files (hidden symbols, not exported):
 * cuDNN convolutions (cudnn_conv.cu) and the bf16 mode (cuda_bf16.cu). */
#ifndef DG_CUDA_BF16_H
#define DG_CUDA_BF16_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backend/backend.h"

#define CDN_HIDDEN __attribute__((visibility("hidden")))

/* The ReLU every kernel of the plug-in applies (relu_fwd, the fused
 * epilogues, the bf16 widening): one expression, so fused and unfused calls
 * give the same bits (NaN becomes 0, as max(v, 0) would not say). */
static __device__ __forceinline__ float cu_relu(float v)
{
    return v > 0.0f ? v : 0.0f;
}

/* The math modes of set_math: 0 exact fp32, 1 TF32, 2 bf16 inputs. */
enum { CU_MATH_FP32 = 0, CU_MATH_TF32 = 1, CU_MATH_BF16 = 2 };

/* ---- cuDNN convolutions (cudnn_conv.cu) ---- */
typedef struct cdn_ctx cdn_ctx;
/* snprintf into buf (tolerates NULL/0). */
CDN_HIDDEN void cdn_msg(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
CDN_HIDDEN bool cdn_version_text(char *buf, size_t len);
CDN_HIDDEN dg_status cdn_open(cdn_ctx **out, cudaStream_t stream, char *why, size_t len);
CDN_HIDDEN void cdn_close(cdn_ctx *d);
/* CU_MATH_*: later plans use it (bf16: bf16 tensors, fp32 compute type). */
CDN_HIDDEN void cdn_set_math(cdn_ctx *d, int math);
CDN_HIDDEN dg_status cdn_plan_shape(cdn_ctx *d, const dg_conv_shape *s, bool may_find, size_t *ws);
/* Pointers are float in fp32/TF32 mode, __nv_bfloat16 in bf16 mode. */
CDN_HIDDEN dg_status cdn_conv_fwd(cdn_ctx *d, const dg_conv_shape *s, const void *x, const void *w,
                                  void *y, void *work, char *err, size_t len);
CDN_HIDDEN dg_status cdn_conv_bwd(cdn_ctx *d, const dg_conv_shape *s, const void *x, const void *w,
                                  const void *dy, void *dx, void *dw, void *work, char *err,
                                  size_t len);
CDN_HIDDEN void cdn_describe(cdn_ctx *d, char *buf, size_t len);
/* Whether s's bf16 plan runs fp32 tensors of bf16-rounded values on TF32 math
 * (the carrier: exact products of the bf16 inputs, fp32 output) rather than
 * bf16 tensors; DEVGATE_CUDA_BF16_CONV=bf16|tf32 forces one, auto (default)
 * takes the carrier where a channel count is not a multiple of 8. */
CDN_HIDDEN bool cdn_carrier(cdn_ctx *d, const dg_conv_shape *s);
/* Whether s's bf16-tensor plan is channels-last: x, y (dy, dx) NHWC and w
 * KRSC bf16 copies (DEVGATE_CUDA_BF16_LAYOUT=nhwc, the default, where cuDNN
 * takes it; nchw keeps the engine's layout). */
CDN_HIDDEN bool cdn_nhwc(cdn_ctx *d, const dg_conv_shape *s);

/* ---- bf16 mode (cuda_bf16.cu) ---- */

#define CBF_RETIRED 32
/* Device scratch for the bf16 copies of a GEMM's operands: grown outside a
 * capture only; an outgrown block is kept (a captured graph may still read
 * it) until cbf_scratch_free. */
typedef struct cbf_scratch {
    void *p;
    size_t bytes;
    void *retired[CBF_RETIRED];
    int nretired;
} cbf_scratch;

CDN_HIDDEN void cbf_scratch_free(cbf_scratch *s);

/* Row-major C = alpha op(A) op(B) + beta C with A and B rounded to bf16
 * (round to nearest even) into s, fp32 accumulation and an fp32 C
 * (cublasGemmEx, CUDA_R_16BF inputs, CUBLAS_COMPUTE_32F). a_count and b_count
 * are the elements A and B span. DG_OK, or a status with the message in err. */
CDN_HIDDEN dg_status cbf_gemm(cublasHandle_t h, cudaStream_t stream, cbf_scratch *s, bool capturing,
                              bool ta, bool tb, int m, int n, int k, float alpha, const float *a,
                              size_t a_count, int lda, const float *b, size_t b_count, int ldb,
                              float beta, float *c, int ldc, char *err, size_t len);

/* Bytes a bf16 convolution adds after cuDNN's workspace (ws_bytes, rounded):
 * bf16 copies of x, w, y (or dy), dx and dw; on the TF32 carrier fp32 copies
 * of x, w and dy holding bf16-rounded values. */
CDN_HIDDEN size_t cbf_conv_extra(cdn_ctx *d, const dg_conv_shape *s, size_t x_count, size_t w_count,
                                 size_t y_count);

/* y = conv(bf16 x, bf16 w) (+ bias) (then ReLU when relu), y in fp32: x and
 * w cast into work after cuDNN's ws_bytes, cuDNN writes a bf16 y there, one
 * kernel widens it, adds the bias (may be NULL) and applies the ReLU. On the
 * TF32 carrier (cdn_carrier) cuDNN writes the fp32 y itself: there bias and
 * ReLU are the caller's fp32 epilogue, and passing them is a usage error. */
CDN_HIDDEN dg_status cbf_conv_fwd(cdn_ctx *d, cudaStream_t stream, const dg_conv_shape *s,
                                  size_t x_count, size_t w_count, size_t y_count, const float *x,
                                  const float *w, const float *bias, bool relu, float *y,
                                  void *work, size_t ws_bytes, char *err, size_t len);
/* dw (and dx when not NULL) from bf16 copies of x, w and dy; fp32 results. */
CDN_HIDDEN dg_status cbf_conv_bwd(cdn_ctx *d, cudaStream_t stream, const dg_conv_shape *s,
                                  size_t x_count, size_t w_count, size_t y_count, const float *x,
                                  const float *w, const float *dy, float *dx, float *dw, void *work,
                                  size_t ws_bytes, char *err, size_t len);

#endif
