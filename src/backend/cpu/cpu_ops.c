/* The cpu backend's training ops (contracts in backend.h).
 *
 * conv2d with AVX2 and FMA runs on its own register-blocked kernels: stride 1
 * reads the (zero-padded) image directly, no column matrix; other strides
 * write the column matrix as panels the kernel reads. Backward at stride 1
 * gets dw from dw_kernel, straight from a padded copy of the image and dy
 * turned pixel-major (no column matrix, no OpenBLAS packing of a product with
 * only k rows), and dx as the forward convolution of dy with the weights
 * turned 180 degrees (no col2im). Without AVX2, with DEVGATE_CPU_CONV=im2col
 * (tests run both paths), or for other strides it is im2col into the
 * workspace plus one OpenBLAS SGEMM per image (beta = 1 after the first) and
 * col2im (a 1x1, stride 1, unpadded convolution uses the image itself as its
 * column matrix). The images are spread over OpenMP threads, each with its
 * own slice of the workspace (its padding zeroed once a call) and its own
 * partial dw, summed in thread order; OpenBLAS stays single-threaded (cpu.c):
 * one GEMM per image is too small for OpenBLAS's own threads to pay (measured
 * slower than one thread on two cores), and two thread pools spinning on the
 * same cores slow each other down. Elementwise work is plain loops the
 * compiler vectorises (branch-free selects), spread over threads only when
 * large enough to pay for waking them. Every op checks its shapes and the
 * ranges of its refs before it touches memory and returns DG_ERR_USAGE when
 * one is wrong (maxpool_bwd also refuses argmax entries outside their plane,
 * skipping them). */
#include "backend/cpu/cpu_ops.h"

#include "backend/cpu/cpu_avx512.h"

#include "core/core.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

/* Elements below which loops stay on the calling thread. */
#define PAR_MIN 32768
/* Channels summed together in bias_grad's row-wise pass. */
#define BIAS_CHUNK 64

/* ---- validation helpers ------------------------------------------------ */

static dg_status usage(cpu_ctx *c, const char *fmt, ...) DG_PRINTF(2, 3);
static dg_status usage(cpu_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return DG_ERR_USAGE;
}

/* *out = a * b * c * elem, false on overflow. */
static bool size_of(size_t a, size_t b, size_t c, size_t elem, size_t *out)
{
    size_t t;
    return !__builtin_mul_overflow(a, b, &t) && !__builtin_mul_overflow(t, c, &t) &&
           !__builtin_mul_overflow(t, elem, out);
}

/* Bytes of count floats (or int32s), usage error when it overflows. */
static dg_status count_bytes(cpu_ctx *c, size_t count, const char *op, size_t *bytes)
{
    if (!size_of(count, 1, 1, sizeof(float), bytes))
        return usage(c, "cpu: %s count %zu too large", op, count);
    return DG_OK;
}

/* ---- fill, bias, relu ------------------------------------------------------ */

dg_status dg_cpu_fill(void *ctx, dg_ref x, size_t count, float value)
{
    cpu_ctx *c = ctx;
    size_t bytes;
    float *p;
    dg_status st;
    if ((st = count_bytes(c, count, "fill", &bytes)) || count == 0 ||
        (st = cpu_ref(c, x, bytes, "fill x", &p)))
        return st;
#pragma omp parallel for simd if (count > PAR_MIN) schedule(static)
    for (size_t i = 0; i < count; i++)
        p[i] = value;
    return DG_OK;
}

/* Checks a [outer, channels, inner] view; *total gets the element count. */
static dg_status check_oci(cpu_ctx *c, const char *op, int outer, int channels, int inner,
                           size_t *total)
{
    if (outer < 0 || channels < 0 || inner < 0 ||
        !size_of((size_t)outer, (size_t)channels, (size_t)inner, 1, total) ||
        *total > SIZE_MAX / sizeof(float))
        return usage(c, "cpu: bad %s shape [%d, %d, %d]", op, outer, channels, inner);
    return DG_OK;
}

dg_status dg_cpu_bias_add(void *ctx, dg_ref y, dg_ref bias, int outer, int channels, int inner)
{
    cpu_ctx *c = ctx;
    size_t total = 0;
    float *yp, *bp;
    dg_status st;
    if ((st = check_oci(c, "bias_add", outer, channels, inner, &total)) || total == 0 ||
        (st = cpu_ref(c, y, total * sizeof(float), "bias_add y", &yp)) ||
        (st = cpu_ref(c, bias, (size_t)channels * sizeof(float), "bias_add bias", &bp)))
        return st;
    if (inner == 1) {
        /* y [outer, channels]: a vector add per row */
#pragma omp parallel for if (total > PAR_MIN) schedule(static)
        for (int o = 0; o < outer; o++) {
            float *row = yp + (size_t)o * channels; /* [channels] */
#pragma omp simd
            for (int ch = 0; ch < channels; ch++)
                row[ch] += bp[ch];
        }
    } else {
        /* y [outer * channels rows, inner]: one broadcast add per row */
        long rows = (long)outer * channels;
#pragma omp parallel for if (total > PAR_MIN) schedule(static)
        for (long r = 0; r < rows; r++) {
            float *row = yp + (size_t)r * inner; /* [inner] */
            float b = bp[r % channels];
#pragma omp simd
            for (int i = 0; i < inner; i++)
                row[i] += b;
        }
    }
    return DG_OK;
}

/* Sums dy [outer, channels, inner] per channel in double into db. */
static void bias_grad_sum(const float *dy, float *db, int outer, int channels, int inner,
                          size_t total)
{
    if (inner == 1) {
        /* dy [outer, channels]: column sums, BIAS_CHUNK channels at a time so
         * every row is read contiguously */
        int chunks = (channels + BIAS_CHUNK - 1) / BIAS_CHUNK;
#pragma omp parallel for if (total > PAR_MIN) schedule(static)
        for (int q = 0; q < chunks; q++) {
            int c0 = q * BIAS_CHUNK, len = channels - c0 < BIAS_CHUNK ? channels - c0 : BIAS_CHUNK;
            double acc[BIAS_CHUNK] = {0};
            for (int o = 0; o < outer; o++) {
                const float *row = dy + (size_t)o * channels + c0; /* [len] */
#pragma omp simd
                for (int j = 0; j < len; j++)
                    acc[j] += row[j];
            }
            for (int j = 0; j < len; j++)
                db[c0 + j] = (float)acc[j];
        }
        return;
    }
#pragma omp parallel for if (total > PAR_MIN) schedule(static)
    for (int ch = 0; ch < channels; ch++) {
        double s = 0.0;
        for (int o = 0; o < outer; o++) {
            const float *row = dy + ((size_t)o * channels + ch) * inner; /* [inner] */
#pragma omp simd reduction(+ : s)
            for (int i = 0; i < inner; i++)
                s += row[i];
        }
        db[ch] = (float)s;
    }
}

dg_status dg_cpu_bias_grad(void *ctx, dg_ref dy, dg_ref db, int outer, int channels, int inner)
{
    cpu_ctx *c = ctx;
    size_t total = 0;
    float *dyp, *dbp;
    dg_status st;
    if ((st = check_oci(c, "bias_grad", outer, channels, inner, &total)) || channels == 0 ||
        (st = cpu_ref(c, db, (size_t)channels * sizeof(float), "bias_grad db", &dbp)))
        return st;
    if (total == 0) { /* an empty sum */
        memset(dbp, 0, (size_t)channels * sizeof(float));
        return DG_OK;
    }
    if ((st = cpu_ref(c, dy, total * sizeof(float), "bias_grad dy", &dyp)))
        return st;
    bias_grad_sum(dyp, dbp, outer, channels, inner, total);
    return DG_OK;
}

dg_status dg_cpu_relu_fwd(void *ctx, dg_ref x, dg_ref y, size_t count)
{
    cpu_ctx *c = ctx;
    size_t bytes;
    float *xp, *yp;
    dg_status st;
    if ((st = count_bytes(c, count, "relu_fwd", &bytes)) || count == 0 ||
        (st = cpu_ref(c, x, bytes, "relu_fwd x", &xp)) ||
        (st = cpu_ref(c, y, bytes, "relu_fwd y", &yp)))
        return st;
#pragma omp parallel for simd if (count > PAR_MIN) schedule(static)
    for (size_t i = 0; i < count; i++)
        yp[i] = xp[i] > 0.0f ? xp[i] : 0.0f;
    return DG_OK;
}

dg_status dg_cpu_relu_bwd(void *ctx, dg_ref y, dg_ref dy, dg_ref dx, size_t count)
{
    cpu_ctx *c = ctx;
    size_t bytes;
    float *yp, *dyp, *dxp;
    dg_status st;
    if ((st = count_bytes(c, count, "relu_bwd", &bytes)) || count == 0 ||
        (st = cpu_ref(c, y, bytes, "relu_bwd y", &yp)) ||
        (st = cpu_ref(c, dy, bytes, "relu_bwd dy", &dyp)) ||
        (st = cpu_ref(c, dx, bytes, "relu_bwd dx", &dxp)))
        return st;
        /* dy is read unconditionally so the select vectorises (a conditional
         * load compiles to a branch per element, mispredicted on every sign
         * change of y) */
#pragma omp parallel for simd if (count > PAR_MIN) schedule(static)
    for (size_t i = 0; i < count; i++) {
        float d = dyp[i];
        dxp[i] = yp[i] > 0.0f ? d : 0.0f;
    }
    return DG_OK;
}

/* ---- maxpool ------------------------------------------------------------------ */

/* Checks a pool shape; *nx and *ny get the input and output element counts. */
static dg_status check_pool(cpu_ctx *c, const dg_pool_shape *s, size_t *nx, size_t *ny)
{
    if (!s || s->n < 0 || s->c < 0 || s->h < 1 || s->w < 1 || s->k < 1 || s->stride < 1 ||
        s->k > s->h || s->k > s->w || s->ho != (s->h - s->k) / s->stride + 1 ||
        s->wo != (s->w - s->k) / s->stride + 1 ||
        !size_of((size_t)s->n * s->c, (size_t)s->h, (size_t)s->w, sizeof(float), nx) ||
        !size_of((size_t)s->n * s->c, (size_t)s->ho, (size_t)s->wo, sizeof(float), ny))
        return usage(c, "cpu: bad maxpool shape n%d c%d %dx%d k%d s%d -> %dx%d", s ? s->n : 0,
                     s ? s->c : 0, s ? s->h : 0, s ? s->w : 0, s ? s->k : 0, s ? s->stride : 0,
                     s ? s->ho : 0, s ? s->wo : 0);
    *nx /= sizeof(float);
    *ny /= sizeof(float);
    return DG_OK;
}

dg_status dg_cpu_maxpool_fwd(void *ctx, const dg_pool_shape *s, dg_ref x, dg_ref y, dg_ref argmax)
{
    cpu_ctx *c = ctx;
    size_t nx = 0, ny = 0;
    float *xp, *yp;
    int32_t *ap;
    dg_status st;
    if ((st = check_pool(c, s, &nx, &ny)) || ny == 0 ||
        (st = cpu_ref(c, x, nx * sizeof(float), "maxpool_fwd x", &xp)) ||
        (st = cpu_ref(c, y, ny * sizeof(float), "maxpool_fwd y", &yp)) ||
        (st = cpu_ref_i32(c, argmax, ny * sizeof(int32_t), "maxpool_fwd argmax", &ap)))
        return st;
    const int h = s->h, w = s->w, k = s->k, stride = s->stride, ho = s->ho, wo = s->wo;
    const long planes = (long)s->n * s->c;
#pragma omp parallel for if (ny * (size_t)k * k > PAR_MIN) schedule(static)
    for (long p = 0; p < planes; p++) {
        const float *xq = xp + (size_t)p * h * w; /* [h, w] */
        float *yq = yp + (size_t)p * ho * wo;     /* [ho, wo] */
        int32_t *aq = ap + (size_t)p * ho * wo;   /* [ho, wo] */
        if (k == 2 && stride == 2) {
            /* the common 2x2 pool, branch-free: a data-dependent branch per
             * candidate mispredicts on about every other one */
            for (int oy = 0; oy < ho; oy++) {
                const float *r0 = xq + (size_t)2 * oy * w, *r1 = r0 + w; /* [w] each */
                float *yr = yq + (size_t)oy * wo;                        /* [wo] */
                int32_t *ar = aq + (size_t)oy * wo;                      /* [wo] */
                const int base = 2 * oy * w;
#pragma omp simd
                for (int ox = 0; ox < wo; ox++) {
                    float m = r0[2 * ox], v;
                    int32_t best = base + 2 * ox;
                    v = r0[2 * ox + 1]; /* strict: the first max wins ties */
                    best = v > m ? base + 2 * ox + 1 : best;
                    m = v > m ? v : m;
                    v = r1[2 * ox];
                    best = v > m ? base + w + 2 * ox : best;
                    m = v > m ? v : m;
                    v = r1[2 * ox + 1];
                    best = v > m ? base + w + 2 * ox + 1 : best;
                    m = v > m ? v : m;
                    yr[ox] = m;
                    ar[ox] = best;
                }
            }
            continue;
        }
        for (int oy = 0; oy < ho; oy++) {
            for (int ox = 0; ox < wo; ox++) {
                int best = oy * stride * w + ox * stride;
                float m = xq[best];
                for (int ky = 0; ky < k; ky++) {
                    const float *row = xq + (size_t)(oy * stride + ky) * w + ox * stride; /* [k] */
                    for (int kx = 0; kx < k; kx++) {
                        float v = row[kx]; /* strict: the first max wins ties */
                        best = v > m ? (oy * stride + ky) * w + ox * stride + kx : best;
                        m = v > m ? v : m;
                    }
                }
                yq[oy * wo + ox] = m;
                aq[oy * wo + ox] = best;
            }
        }
    }
    return DG_OK;
}

dg_status dg_cpu_maxpool_bwd(void *ctx, const dg_pool_shape *s, dg_ref dy, dg_ref argmax, dg_ref dx)
{
    cpu_ctx *c = ctx;
    size_t nx = 0, ny = 0;
    float *dyp, *dxp;
    int32_t *ap;
    dg_status st;
    if ((st = check_pool(c, s, &nx, &ny)) || nx == 0 ||
        (st = cpu_ref(c, dy, ny * sizeof(float), "maxpool_bwd dy", &dyp)) ||
        (st = cpu_ref_i32(c, argmax, ny * sizeof(int32_t), "maxpool_bwd argmax", &ap)) ||
        (st = cpu_ref(c, dx, nx * sizeof(float), "maxpool_bwd dx", &dxp)))
        return st;
    const int plane_in = s->h * s->w, plane_out = s->ho * s->wo;
    const long planes = (long)s->n * s->c;
    bool bad = false;
#pragma omp parallel for if (nx > PAR_MIN) schedule(static) reduction(|| : bad)
    for (long p = 0; p < planes; p++) {
        float *dxq = dxp + (size_t)p * plane_in;        /* [h * w] */
        const float *dyq = dyp + (size_t)p * plane_out; /* [ho * wo] */
        const int32_t *aq = ap + (size_t)p * plane_out; /* [ho * wo] */
        memset(dxq, 0, (size_t)plane_in * sizeof(float));
        for (int o = 0; o < plane_out; o++) {
            if (aq[o] < 0 || aq[o] >= plane_in) { /* never written: not from maxpool_fwd */
                bad = true;
                continue;
            }
            dxq[aq[o]] += dyq[o];
        }
    }
    if (bad)
        return usage(c, "cpu: maxpool_bwd argmax holds an index outside its %dx%d plane", s->h,
                     s->w);
    return DG_OK;
}

/* ---- conv2d --------------------------------------------------------------------- */

/* Checks a conv shape; fills the element counts of x, w, y. */
static dg_status check_conv(cpu_ctx *c, const dg_conv_shape *s, size_t *nx, size_t *nw, size_t *ny)
{
    if (!s || s->n < 0 || s->c < 1 || s->h < 1 || s->w < 1 || s->k < 1 || s->kh < 1 || s->kw < 1 ||
        s->stride < 1 || s->pad < 0 || s->h + 2 * (long)s->pad < s->kh ||
        s->w + 2 * (long)s->pad < s->kw || s->ho != (s->h + 2 * s->pad - s->kh) / s->stride + 1 ||
        s->wo != (s->w + 2 * s->pad - s->kw) / s->stride + 1 ||
        !size_of((size_t)s->n * s->c, (size_t)s->h, (size_t)s->w, sizeof(float), nx) ||
        !size_of((size_t)s->k * s->c, (size_t)s->kh, (size_t)s->kw, sizeof(float), nw) ||
        !size_of((size_t)s->n * s->k, (size_t)s->ho, (size_t)s->wo, sizeof(float), ny) ||
        (size_t)s->c * s->kh * s->kw > INT32_MAX || (size_t)s->ho * s->wo > INT32_MAX)
        return usage(c, "cpu: bad conv2d shape n%d c%d %dx%d k%d %dx%d s%d p%d -> %dx%d",
                     s ? s->n : 0, s ? s->c : 0, s ? s->h : 0, s ? s->w : 0, s ? s->k : 0,
                     s ? s->kh : 0, s ? s->kw : 0, s ? s->stride : 0, s ? s->pad : 0, s ? s->ho : 0,
                     s ? s->wo : 0);
    *nx /= sizeof(float);
    *nw /= sizeof(float);
    *ny /= sizeof(float);
    return DG_OK;
}

/* A 1x1, stride 1, unpadded convolution: each image is its own column matrix. */
static bool conv_pointwise(const dg_conv_shape *s)
{
    return s->kh == 1 && s->kw == 1 && s->stride == 1 && s->pad == 0;
}

/* ---- the packed-panel kernel --------------------------------------------------
 * OpenBLAS packs the column matrix before multiplying, and with only k (32 or
 * 64) output rows that packing costs as much as the product. With AVX2 and
 * FMA, conv2d instead writes its column matrix straight into the layout the
 * kernel reads: panels of PNR columns, each [ckk, PNR] contiguous, and the
 * weights once per call as blocks of PMR rows, [ckk, PMR] each. The kernel
 * keeps a PMR x PNR block of the output in registers over a KC-long slice of
 * the reduction (the panel slice stays in L1). */
#define PMR 6
#define PMR4 4 /* the short block's rows (direct_kernel4) */
#define PNR 16
#define PKC 256

/* Whether the CPU runs AVX2 and FMA (false off x86, where
 * __builtin_cpu_supports knows no such names). */
static bool have_fma(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

static size_t round_up(size_t v, size_t to)
{
    return (v + to - 1) / to * to;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DG_PANEL_KERNEL 1

/* The accumulators of a block's rows r < rows: the bias (or 0) for a fresh
 * block, the rows of c (nr floats each, ldc apart) when accumulating. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
acc_load(__m256 acc[][2], int rows, const float *c, size_t ldc, int mr, int nr, const float *bias,
         bool accumulate)
{
    for (int r = 0; r < rows; r++) {
        __m256 v = _mm256_setzero_ps();
        if (r < mr && !accumulate && bias)
            v = _mm256_set1_ps(bias[r]);
        acc[r][0] = acc[r][1] = v;
        if (r < mr && accumulate) {
            if (nr == PNR) {
                acc[r][0] = _mm256_loadu_ps(c + (size_t)r * ldc);
                acc[r][1] = _mm256_loadu_ps(c + (size_t)r * ldc + 8);
            } else {
                float tmp[PNR] = {0};
                memcpy(tmp, c + (size_t)r * ldc, (size_t)nr * sizeof(float));
                acc[r][0] = _mm256_loadu_ps(tmp);
                acc[r][1] = _mm256_loadu_ps(tmp + 8);
            }
        }
    }
}

/* Stores the accumulators of rows r < mr into c (nr floats each, ldc apart). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
acc_store(__m256 acc[][2], float *c, size_t ldc, int mr, int nr)
{
    for (int r = 0; r < mr; r++) {
        float *row = c + (size_t)r * ldc; /* [nr] */
        if (nr == PNR) {
            _mm256_storeu_ps(row, acc[r][0]);
            _mm256_storeu_ps(row + 8, acc[r][1]);
        } else {
            float tmp[PNR];
            _mm256_storeu_ps(tmp, acc[r][0]);
            _mm256_storeu_ps(tmp + 8, acc[r][1]);
            memcpy(row, tmp, (size_t)nr * sizeof(float));
        }
    }
}

/* c[mr, nr] (ldc) = (accumulate ? c : bias or 0) + ap [kc, PMR] * bp [kc, PNR]. */
__attribute__((target("avx2,fma"))) static void panel_kernel(int kc, const float *ap,
                                                             const float *bp, float *c, size_t ldc,
                                                             int mr, int nr, const float *bias,
                                                             bool accumulate)
{
    __m256 acc[PMR][2];
    acc_load(acc, PMR, c, ldc, mr, nr, bias, accumulate);
    __m256 c00 = acc[0][0], c01 = acc[0][1], c10 = acc[1][0], c11 = acc[1][1];
    __m256 c20 = acc[2][0], c21 = acc[2][1], c30 = acc[3][0], c31 = acc[3][1];
    __m256 c40 = acc[4][0], c41 = acc[4][1], c50 = acc[5][0], c51 = acc[5][1];
    for (int kk = 0; kk < kc; kk++) {
        __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8), a;
        a = _mm256_broadcast_ss(ap + 0);
        c00 = _mm256_fmadd_ps(a, b0, c00), c01 = _mm256_fmadd_ps(a, b1, c01);
        a = _mm256_broadcast_ss(ap + 1);
        c10 = _mm256_fmadd_ps(a, b0, c10), c11 = _mm256_fmadd_ps(a, b1, c11);
        a = _mm256_broadcast_ss(ap + 2);
        c20 = _mm256_fmadd_ps(a, b0, c20), c21 = _mm256_fmadd_ps(a, b1, c21);
        a = _mm256_broadcast_ss(ap + 3);
        c30 = _mm256_fmadd_ps(a, b0, c30), c31 = _mm256_fmadd_ps(a, b1, c31);
        a = _mm256_broadcast_ss(ap + 4);
        c40 = _mm256_fmadd_ps(a, b0, c40), c41 = _mm256_fmadd_ps(a, b1, c41);
        a = _mm256_broadcast_ss(ap + 5);
        c50 = _mm256_fmadd_ps(a, b0, c50), c51 = _mm256_fmadd_ps(a, b1, c51);
        ap += PMR;
        bp += PNR;
    }
    acc[0][0] = c00, acc[0][1] = c01, acc[1][0] = c10, acc[1][1] = c11;
    acc[2][0] = c20, acc[2][1] = c21, acc[3][0] = c30, acc[3][1] = c31;
    acc[4][0] = c40, acc[4][1] = c41, acc[5][0] = c50, acc[5][1] = c51;
    acc_store(acc, c, ldc, mr, nr);
}

/* One kernel tap of direct_kernel (6 rows) and direct_kernel4 (4 rows): the
 * 16 input columns from bp + kx times the tap's weights, into the
 * accumulators; a macro so the 3x3 case unrolls with constant offsets. */
#define DK6_TAP(kx)                                                                                \
    do {                                                                                           \
        __m256 b0 = _mm256_loadu_ps(bp + (kx)), b1 = _mm256_loadu_ps(bp + (kx) + 8), a;            \
        a = _mm256_broadcast_ss(ap + 0);                                                           \
        c00 = _mm256_fmadd_ps(a, b0, c00), c01 = _mm256_fmadd_ps(a, b1, c01);                      \
        a = _mm256_broadcast_ss(ap + 1);                                                           \
        c10 = _mm256_fmadd_ps(a, b0, c10), c11 = _mm256_fmadd_ps(a, b1, c11);                      \
        a = _mm256_broadcast_ss(ap + 2);                                                           \
        c20 = _mm256_fmadd_ps(a, b0, c20), c21 = _mm256_fmadd_ps(a, b1, c21);                      \
        a = _mm256_broadcast_ss(ap + 3);                                                           \
        c30 = _mm256_fmadd_ps(a, b0, c30), c31 = _mm256_fmadd_ps(a, b1, c31);                      \
        a = _mm256_broadcast_ss(ap + 4);                                                           \
        c40 = _mm256_fmadd_ps(a, b0, c40), c41 = _mm256_fmadd_ps(a, b1, c41);                      \
        a = _mm256_broadcast_ss(ap + 5);                                                           \
        c50 = _mm256_fmadd_ps(a, b0, c50), c51 = _mm256_fmadd_ps(a, b1, c51);                      \
        ap += PMR;                                                                                 \
    } while (0)
#define DK4_TAP(kx)                                                                                \
    do {                                                                                           \
        __m256 b0 = _mm256_loadu_ps(bp + (kx)), b1 = _mm256_loadu_ps(bp + (kx) + 8), a;            \
        a = _mm256_broadcast_ss(ap + 0);                                                           \
        c00 = _mm256_fmadd_ps(a, b0, c00), c01 = _mm256_fmadd_ps(a, b1, c01);                      \
        a = _mm256_broadcast_ss(ap + 1);                                                           \
        c10 = _mm256_fmadd_ps(a, b0, c10), c11 = _mm256_fmadd_ps(a, b1, c11);                      \
        a = _mm256_broadcast_ss(ap + 2);                                                           \
        c20 = _mm256_fmadd_ps(a, b0, c20), c21 = _mm256_fmadd_ps(a, b1, c21);                      \
        a = _mm256_broadcast_ss(ap + 3);                                                           \
        c30 = _mm256_fmadd_ps(a, b0, c30), c31 = _mm256_fmadd_ps(a, b1, c31);                      \
        ap += PMR4;                                                                                \
    } while (0)

/* The same block for a stride-1 convolution read straight from a padded
 * image: src points at channel 0, row oy, column ox0 of it; the reduction
 * runs over nch channels (cs floats apart) and the kh x kw taps (rows ldr
 * floats apart), ap packed in that order. Reads PNR floats per tap even when
 * nr is smaller (the image carries PNR floats of slack). */
__attribute__((target("avx2,fma"))) static void
direct_kernel(int nch, int kh, int kw, const float *ap, const float *src, size_t cs, size_t ldr,
              float *c, size_t ldc, int mr, int nr, const float *bias, bool accumulate)
{
    __m256 acc[PMR][2];
    acc_load(acc, PMR, c, ldc, mr, nr, bias, accumulate);
    __m256 c00 = acc[0][0], c01 = acc[0][1], c10 = acc[1][0], c11 = acc[1][1];
    __m256 c20 = acc[2][0], c21 = acc[2][1], c30 = acc[3][0], c31 = acc[3][1];
    __m256 c40 = acc[4][0], c41 = acc[4][1], c50 = acc[5][0], c51 = acc[5][1];
    for (int ch = 0; ch < nch; ch++) {
        for (int ky = 0; ky < kh; ky++) {
            const float *bp = src + ch * cs + ky * ldr;
            if (kw == 3) { /* the common 3x3, unrolled */
                DK6_TAP(0);
                DK6_TAP(1);
                DK6_TAP(2);
            } else {
                for (int kx = 0; kx < kw; kx++)
                    DK6_TAP(kx);
            }
        }
    }
    acc[0][0] = c00, acc[0][1] = c01, acc[1][0] = c10, acc[1][1] = c11;
    acc[2][0] = c20, acc[2][1] = c21, acc[3][0] = c30, acc[3][1] = c31;
    acc[4][0] = c40, acc[4][1] = c41, acc[5][0] = c50, acc[5][1] = c51;
    acc_store(acc, c, ldc, mr, nr);
}

/* direct_kernel for a block of at most PMR4 rows (ap packed PMR4 a tap):
 * where k is not a multiple of 6, the last rows go through it instead of a
 * 6-row block that computes rows nobody reads (k = 32: 6+6+6+6+4+4, not
 * 6 x 6). */
__attribute__((target("avx2,fma"))) static void
direct_kernel4(int nch, int kh, int kw, const float *ap, const float *src, size_t cs, size_t ldr,
               float *c, size_t ldc, int mr, int nr, const float *bias, bool accumulate)
{
    __m256 acc[PMR4][2];
    acc_load(acc, PMR4, c, ldc, mr, nr, bias, accumulate);
    __m256 c00 = acc[0][0], c01 = acc[0][1], c10 = acc[1][0], c11 = acc[1][1];
    __m256 c20 = acc[2][0], c21 = acc[2][1], c30 = acc[3][0], c31 = acc[3][1];
    for (int ch = 0; ch < nch; ch++) {
        for (int ky = 0; ky < kh; ky++) {
            const float *bp = src + ch * cs + ky * ldr;
            if (kw == 3) { /* the common 3x3, unrolled */
                DK4_TAP(0);
                DK4_TAP(1);
                DK4_TAP(2);
            } else {
                for (int kx = 0; kx < kw; kx++)
                    DK4_TAP(kx);
            }
        }
    }
    acc[0][0] = c00, acc[0][1] = c01, acc[1][0] = c10, acc[1][1] = c11;
    acc[2][0] = c20, acc[2][1] = c21, acc[3][0] = c30, acc[3][1] = c31;
    acc_store(acc, c, ldc, mr, nr);
}

/* dyt [howo, kp] = dy [k, howo] turned pixel-major (columns k..kp left as
 * they are), 8 x 8 blocks through registers: a column-at-a-time copy reads
 * k rows howo floats apart, which for 32x32 images all fall in one L1 set. */
__attribute__((target("avx2,fma"))) static void transpose_dy(const float *dy, int k, size_t howo,
                                                             float *dyt, size_t kp)
{
    size_t p8 = howo / 8 * 8;
    int k8 = k / 8 * 8;
    for (size_t p0 = 0; p0 < p8; p0 += 8)
        for (int k0 = 0; k0 < k8; k0 += 8) {
            const float *s = dy + (size_t)k0 * howo + p0;
            __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + howo);
            __m256 r2 = _mm256_loadu_ps(s + 2 * howo), r3 = _mm256_loadu_ps(s + 3 * howo);
            __m256 r4 = _mm256_loadu_ps(s + 4 * howo), r5 = _mm256_loadu_ps(s + 5 * howo);
            __m256 r6 = _mm256_loadu_ps(s + 6 * howo), r7 = _mm256_loadu_ps(s + 7 * howo);
            __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
            __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
            __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
            __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
            __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
            __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
            __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
            __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
            __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
            __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
            float *d = dyt + p0 * kp + k0;
            _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
            _mm256_storeu_ps(d + kp, _mm256_permute2f128_ps(u1, u5, 0x20));
            _mm256_storeu_ps(d + 2 * kp, _mm256_permute2f128_ps(u2, u6, 0x20));
            _mm256_storeu_ps(d + 3 * kp, _mm256_permute2f128_ps(u3, u7, 0x20));
            _mm256_storeu_ps(d + 4 * kp, _mm256_permute2f128_ps(u0, u4, 0x31));
            _mm256_storeu_ps(d + 5 * kp, _mm256_permute2f128_ps(u1, u5, 0x31));
            _mm256_storeu_ps(d + 6 * kp, _mm256_permute2f128_ps(u2, u6, 0x31));
            _mm256_storeu_ps(d + 7 * kp, _mm256_permute2f128_ps(u3, u7, 0x31));
        }
    /* the edges: channels past the last 8, pixels past the last 8 */
    for (size_t p = 0; p < howo; p++)
        for (int kk = p < p8 ? k8 : 0; kk < k; kk++)
            dyt[p * kp + kk] = dy[(size_t)kk * howo + p];
}

/* A PMR x PNR block of dw turned over, c[r][j] (rows ldc floats apart) for
 * tap r (channel, ky, kx) and output channel j, accumulated over the pixels
 * of rows [oy0, oy1) of one image: x[r] points at tap r's first input (the
 * padded image at its channel, row ky, column kx; rows ldr floats apart, wo
 * pixels a row) and dyt at the pixel-major dy [pixel][kp] of those rows,
 * already offset to the block's first output channel. */
__attribute__((target("avx2,fma"))) static void dw_kernel(const float *const x[PMR], size_t ldr,
                                                          int oy0, int oy1, int wo,
                                                          const float *dyt, size_t kp, float *c,
                                                          size_t ldc)
{
    __m256 c00 = _mm256_loadu_ps(c), c01 = _mm256_loadu_ps(c + 8);
    __m256 c10 = _mm256_loadu_ps(c + ldc), c11 = _mm256_loadu_ps(c + ldc + 8);
    __m256 c20 = _mm256_loadu_ps(c + 2 * ldc), c21 = _mm256_loadu_ps(c + 2 * ldc + 8);
    __m256 c30 = _mm256_loadu_ps(c + 3 * ldc), c31 = _mm256_loadu_ps(c + 3 * ldc + 8);
    __m256 c40 = _mm256_loadu_ps(c + 4 * ldc), c41 = _mm256_loadu_ps(c + 4 * ldc + 8);
    __m256 c50 = _mm256_loadu_ps(c + 5 * ldc), c51 = _mm256_loadu_ps(c + 5 * ldc + 8);
    const float *x0 = x[0] + (size_t)oy0 * ldr, *x1 = x[1] + (size_t)oy0 * ldr;
    const float *x2 = x[2] + (size_t)oy0 * ldr, *x3 = x[3] + (size_t)oy0 * ldr;
    const float *x4 = x[4] + (size_t)oy0 * ldr, *x5 = x[5] + (size_t)oy0 * ldr;
    const float *bp = dyt;
    for (int oy = oy0; oy < oy1; oy++) {
        for (int ox = 0; ox < wo; ox++) {
            __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8), a;
            a = _mm256_broadcast_ss(x0 + ox);
            c00 = _mm256_fmadd_ps(a, b0, c00), c01 = _mm256_fmadd_ps(a, b1, c01);
            a = _mm256_broadcast_ss(x1 + ox);
            c10 = _mm256_fmadd_ps(a, b0, c10), c11 = _mm256_fmadd_ps(a, b1, c11);
            a = _mm256_broadcast_ss(x2 + ox);
            c20 = _mm256_fmadd_ps(a, b0, c20), c21 = _mm256_fmadd_ps(a, b1, c21);
            a = _mm256_broadcast_ss(x3 + ox);
            c30 = _mm256_fmadd_ps(a, b0, c30), c31 = _mm256_fmadd_ps(a, b1, c31);
            a = _mm256_broadcast_ss(x4 + ox);
            c40 = _mm256_fmadd_ps(a, b0, c40), c41 = _mm256_fmadd_ps(a, b1, c41);
            a = _mm256_broadcast_ss(x5 + ox);
            c50 = _mm256_fmadd_ps(a, b0, c50), c51 = _mm256_fmadd_ps(a, b1, c51);
            bp += kp;
        }
        x0 += ldr, x1 += ldr, x2 += ldr, x3 += ldr, x4 += ldr, x5 += ldr;
    }
    _mm256_storeu_ps(c, c00), _mm256_storeu_ps(c + 8, c01);
    _mm256_storeu_ps(c + ldc, c10), _mm256_storeu_ps(c + ldc + 8, c11);
    _mm256_storeu_ps(c + 2 * ldc, c20), _mm256_storeu_ps(c + 2 * ldc + 8, c21);
    _mm256_storeu_ps(c + 3 * ldc, c30), _mm256_storeu_ps(c + 3 * ldc + 8, c31);
    _mm256_storeu_ps(c + 4 * ldc, c40), _mm256_storeu_ps(c + 4 * ldc + 8, c41);
    _mm256_storeu_ps(c + 5 * ldc, c50), _mm256_storeu_ps(c + 5 * ldc + 8, c51);
}
#else
#define DG_PANEL_KERNEL 0
#endif

/* The direct kernels a convolution runs on: none (im2col + OpenBLAS), AVX2
 * with FMA, or AVX-512 (cpu_avx512.c). */
typedef enum conv_isa { ISA_NONE, ISA_AVX2, ISA_AVX512 } conv_isa;

/* The kernels `mode` runs on this CPU: auto the widest it has; a forced
 * path the CPU lacks (refused at init) falls to the next narrower one. */
static conv_isa isa_of(cpu_conv_mode mode)
{
    bool avx2 = DG_PANEL_KERNEL && have_fma(), avx512 = avx2 && dg_cpu512_usable();
    switch (mode) {
    case CPU_CONV_IM2COL: return ISA_NONE;
    case CPU_CONV_AVX2: return avx2 ? ISA_AVX2 : ISA_NONE;
    default: return avx512 ? ISA_AVX512 : avx2 ? ISA_AVX2 : ISA_NONE;
    }
}

/* The kernels of a context (a NULL context: the workspace question, whose
 * sizes do not depend on the direct kernels' width; see conv_fast). */
static conv_isa conv_isa_of(const cpu_ctx *c)
{
    return isa_of(c ? c->conv_mode : CPU_CONV_AUTO);
}

dg_status dg_cpu_conv_mode_parse(const char *value, cpu_conv_mode *mode, char *reason,
                                 size_t reason_len)
{
    static const struct {
        const char *name;
        cpu_conv_mode mode;
    } modes[] = {{"auto", CPU_CONV_AUTO},
                 {"im2col", CPU_CONV_IM2COL},
                 {"avx2", CPU_CONV_AVX2},
                 {"avx512", CPU_CONV_AVX512}};
    *mode = CPU_CONV_AUTO;
    if (!value || !*value)
        return DG_OK;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        if (strcmp(value, modes[i].name) != 0)
            continue;
        *mode = modes[i].mode;
        if ((*mode == CPU_CONV_AVX2 && isa_of(CPU_CONV_AUTO) == ISA_NONE) ||
            (*mode == CPU_CONV_AVX512 && isa_of(CPU_CONV_AUTO) != ISA_AVX512)) {
            snprintf(reason, reason_len,
                     "cpu: DEVGATE_CPU_CONV=%s: this CPU (or this build) cannot run the %s "
                     "kernels; auto picks the widest it can",
                     value, value);
            return DG_ERR_USAGE;
        }
        return DG_OK;
    }
    snprintf(reason, reason_len,
             "cpu: DEVGATE_CPU_CONV='%.32s': expected auto, im2col, avx2 or avx512", value);
    return DG_ERR_USAGE;
}

const char *dg_cpu_conv_kernels(const void *ctx)
{
    static const char *const names[] = {"im2col", "avx2", "avx512"};
    return names[conv_isa_of(ctx)];
}

/* Whether a context may run the direct kernels (a NULL context: the
 * workspace question, answered for the larger of the two paths' needs). */
static bool conv_fast(const cpu_ctx *c)
{
    return conv_isa_of(c) != ISA_NONE;
}

/* Whether a context's direct kernels are the AVX-512 ones. */
static bool conv_wide(const cpu_ctx *c)
{
    return conv_isa_of(c) == ISA_AVX512;
}

/* Whether conv2d_fwd runs on the panel kernel. */
static bool conv_fast_fwd(const cpu_ctx *c, const dg_conv_shape *s)
{
    return conv_fast(c);
}

/* Whether conv2d_bwd computes dx on the panel kernel: for stride 1, dx is the
 * convolution of dy (padded by kh - 1 - pad) with the weights turned 180
 * degrees and c and k swapped, so dx needs no col2im. */
static bool conv_fast_dx(const cpu_ctx *c, const dg_conv_shape *s)
{
    return conv_fast(c) && s->stride == 1 && s->kh == s->kw && s->pad < s->kh;
}

/* Whether conv2d_bwd computes dw on dw_kernel, straight from a padded copy of
 * the image and dy turned pixel-major (stride 1): no column matrix, and no
 * OpenBLAS packing of a product whose k rows are too few to pay for it. */
static bool conv_fast_dw(const cpu_ctx *c, const dg_conv_shape *s)
{
    return conv_fast(c) && s->stride == 1;
}

/* The convolution whose output is dx (conv_fast_dx), for one image. */
static dg_conv_shape conv_dx_shape(const dg_conv_shape *s)
{
    dg_conv_shape f = {.n = 1,
                       .c = s->k,
                       .h = s->ho,
                       .w = s->wo,
                       .k = s->c,
                       .kh = s->kh,
                       .kw = s->kw,
                       .stride = 1,
                       .pad = s->kh - 1 - s->pad,
                       .ho = s->h,
                       .wo = s->w};
    return f;
}

/* Floats of the panels of a column matrix [kd, cols]. */
static size_t panel_floats(size_t kd, size_t cols)
{
    return kd * round_up(cols, PNR);
}

/* Rows of m rounded up to whole blocks of every kernel (PMR for AVX2, the
 * AVX-512 direct blocks, DG_CPU512_MR taps for its dw), so sizes do not
 * depend on which kernels run. */
static size_t block_round(size_t m)
{
    size_t a = round_up(m, PMR), b = round_up(m, DG_CPU512_MR), c = dg_cpu512_packed_rows(m);
    return a > b ? (a > c ? a : c) : (b > c ? b : c);
}

/* Floats of weights packed for the direct or panel kernels: m rows of kd. */
static size_t packed_floats(size_t m, size_t kd)
{
    return block_round(m) * kd;
}

/* Workspace floats shared by the threads: the packed weights. */
static size_t conv_shared(const cpu_ctx *c, const dg_conv_shape *s)
{
    size_t ckk = (size_t)s->c * s->kh * s->kw, kkk = (size_t)s->k * s->kh * s->kw, n = 0;
    if (conv_fast_fwd(c, s))
        n = packed_floats((size_t)s->k, ckk);
    if (conv_fast_dx(c, s) && packed_floats((size_t)s->c, kkk) > n)
        n = packed_floats((size_t)s->c, kkk);
    return round_up(n, 16);
}

/* Floats of one image x [c, h, w] padded for direct_kernel, with slack. */
static size_t padded_floats(const dg_conv_shape *s)
{
    return (size_t)s->c * (s->h + 2 * s->pad) * (s->w + 2 * s->pad) + PNR;
}

/* Output channels of the pixel-major dy dw_kernel reads: k rounded up to PNR
 * (the extra columns stay zero). */
static size_t dw_cols(const dg_conv_shape *s)
{
    return round_up((size_t)s->k, PNR);
}

/* The parts of one thread's backward slot, in floats from its start (each a
 * multiple of 16): x, the padded image (fast dw) or the column matrix (none
 * when pointwise); dyt, the pixel-major dy (fast dw); part, the partial dw
 * ([k, c kh kw], or turned over and padded to [block_round(c kh kw),
 * dw_cols] for the fast dw); dx, dy's padded image for the fast dx, or the
 * column matrix col2im reads when the fast dw left none in x. */
typedef struct bwd_slot {
    size_t x, dyt, part, dx, total;
} bwd_slot;

static bwd_slot bwd_layout(const cpu_ctx *c, const dg_conv_shape *s)
{
    size_t ckk = (size_t)s->c * s->kh * s->kw, howo = (size_t)s->ho * s->wo;
    size_t col = conv_pointwise(s) ? 0 : round_up(ckk * howo, 16);
    bool fast_dw = conv_fast_dw(c, s);
    bwd_slot b = {0};
    b.dyt = fast_dw ? round_up(padded_floats(s), 16) : col;
    b.part = b.dyt + (fast_dw ? howo * dw_cols(s) : 0);
    b.dx = b.part + (fast_dw ? block_round(ckk) * dw_cols(s) : round_up((size_t)s->k * ckk, 16));
    b.total = b.dx;
    if (conv_fast_dx(c, s)) {
        dg_conv_shape fs = conv_dx_shape(s);
        b.total += round_up(padded_floats(&fs), 16);
    } else if (fast_dw) {
        b.total += col;
    }
    return b;
}

/* Workspace floats one thread needs. Forward: a padded copy of the image
 * (stride 1), or its column matrix [c kh kw, ho wo] as panels plus one plain
 * row (or plain, and none when pointwise, without the fast kernels).
 * Backward: bwd_layout. */
static size_t conv_per_thread(const cpu_ctx *c, const dg_conv_shape *s)
{
    size_t ckk = (size_t)s->c * s->kh * s->kw, howo = (size_t)s->ho * s->wo;
    size_t fwd = conv_pointwise(s) ? 0 : round_up(ckk * howo, 16);
    if (conv_fast_fwd(c, s))
        fwd = s->stride == 1 ? padded_floats(s) : panel_floats(ckk, howo) + round_up(howo, 16);
    size_t bwd = bwd_layout(c, s).total;
    return fwd > bwd ? fwd : bwd;
}

size_t dg_cpu_conv2d_workspace(void *ctx, const dg_conv_shape *s)
{
    size_t nx, nw, ny;
    cpu_ctx scratch = {.conv_mode = CPU_CONV_AUTO}; /* messages of a NULL ctx go nowhere */
    cpu_ctx *c = ctx ? ctx : &scratch;
    if (check_conv(c, s, &nx, &nw, &ny) != DG_OK)
        return 0;
    int t = omp_get_max_threads();
    if (t > s->n)
        t = s->n > 0 ? s->n : 1;
    size_t per = conv_per_thread(c, s), shared = conv_shared(c, s);
    if (!ctx) { /* either path may run on it */
        cpu_ctx im = {.conv_mode = CPU_CONV_IM2COL};
        if (conv_per_thread(&im, s) > per)
            per = conv_per_thread(&im, s);
    }
    return (shared + (size_t)t * per) * sizeof(float);
}

/* The output columns [lo, hi) whose input column ox * stride - pad + kx lies
 * inside [0, w). */
static void valid_cols(const dg_conv_shape *s, int kx, int *lo, int *hi)
{
    int a = s->pad - kx, b = s->w + s->pad - kx;
    int first = a <= 0 ? 0 : (a + s->stride - 1) / s->stride;
    int end = b <= 0 ? 0 : (b + s->stride - 1) / s->stride;
    if (first > s->wo)
        first = s->wo;
    if (end > s->wo)
        end = s->wo;
    *lo = first;
    *hi = end < first ? first : end;
}

/* Row (ch, ky, kx) of one image's column matrix: row [ho * wo] gets the
 * input x [c, h, w] seen through that kernel tap; zeros in the padding. */
static void im2col_row(const dg_conv_shape *s, const float *x, int ch, int ky, int kx, float *row)
{
    const int ho = s->ho, wo = s->wo, stride = s->stride, pad = s->pad;
    const float *xc = x + (size_t)ch * s->h * s->w; /* [h, w] */
    int lo, hi;
    valid_cols(s, kx, &lo, &hi);
    for (int oy = 0; oy < ho; oy++) {
        float *r = row + (size_t)oy * wo; /* [wo] */
        int iy = oy * stride - pad + ky;
        if (iy < 0 || iy >= s->h) {
            memset(r, 0, (size_t)wo * sizeof(float));
            continue;
        }
        const float *xr = xc + (size_t)iy * s->w - pad + kx; /* xr[ox * stride] */
        for (int ox = 0; ox < lo; ox++)
            r[ox] = 0.0f;
        if (stride == 1)
            memcpy(r + lo, xr + lo, (size_t)(hi - lo) * sizeof(float));
        else
            for (int ox = lo; ox < hi; ox++)
                r[ox] = xr[(size_t)ox * stride];
        for (int ox = hi; ox < wo; ox++)
            r[ox] = 0.0f;
    }
}

/* One image x [c, h, w] into its columns of col [c * kh * kw, ld] (ho * wo
 * of them, from col[0]); zeros in the padding. */
static void im2col(const dg_conv_shape *s, const float *x, float *col, size_t ld)
{
    for (int ch = 0; ch < s->c; ch++)
        for (int ky = 0; ky < s->kh; ky++)
            for (int kx = 0; kx < s->kw; kx++)
                im2col_row(s, x, ch, ky, kx, col + (size_t)((ch * s->kh + ky) * s->kw + kx) * ld);
}

/* One image x [c, h, w] into the panels of its column matrix (panel_floats
 * of them; columns past ho * wo are zero); row is scratch [round_up(ho wo)]. */
static void im2col_panels(const dg_conv_shape *s, const float *x, float *panels, float *row)
{
    const size_t kd = (size_t)s->c * s->kh * s->kw, cols = (size_t)s->ho * s->wo;
    const size_t np = (cols + PNR - 1) / PNR;
    memset(row + cols, 0, (np * PNR - cols) * sizeof(float));
    for (int ch = 0; ch < s->c; ch++)
        for (int ky = 0; ky < s->kh; ky++)
            for (int kx = 0; kx < s->kw; kx++) {
                size_t kk = (size_t)(ch * s->kh + ky) * s->kw + kx;
                im2col_row(s, x, ch, ky, kx, row);
                for (size_t p = 0; p < np; p++)
                    memcpy(panels + (p * kd + kk) * PNR, row + p * PNR, PNR * sizeof(float));
            }
}

/* dx [c, h, w] = one image's columns of col [c * kh * kw, ld] summed back
 * onto the image (overwrites dx). */
static void col2im(const dg_conv_shape *s, const float *col, size_t ld, float *dx)
{
    const int ho = s->ho, wo = s->wo, stride = s->stride, pad = s->pad;
    memset(dx, 0, (size_t)s->c * s->h * s->w * sizeof(float));
    for (int ch = 0; ch < s->c; ch++) {
        float *dxc = dx + (size_t)ch * s->h * s->w; /* [h, w] */
        for (int ky = 0; ky < s->kh; ky++) {
            for (int kx = 0; kx < s->kw; kx++) {
                const float *row = col + (size_t)((ch * s->kh + ky) * s->kw + kx) * ld;
                int lo, hi;
                valid_cols(s, kx, &lo, &hi);
                for (int oy = 0; oy < ho; oy++) {
                    int iy = oy * stride - pad + ky;
                    if (iy < 0 || iy >= s->h)
                        continue;
                    const float *r = row + (size_t)oy * wo;         /* [wo] */
                    float *dr = dxc + (size_t)iy * s->w - pad + kx; /* dr[ox * stride] */
                    if (stride == 1)
                        for (int ox = lo; ox < hi; ox++)
                            dr[ox] += r[ox];
                    else
                        for (int ox = lo; ox < hi; ox++)
                            dr[(size_t)ox * stride] += r[ox];
                }
            }
        }
    }
}

/* How weights are packed: for the panel kernel, the AVX2 direct kernels or
 * the AVX-512 ones. */
typedef enum pack_kind { PACK_PANEL, PACK_AVX2, PACK_AVX512 } pack_kind;

/* Rows of the row block that starts with `left` rows to go: PMR for the
 * panel kernel; for the AVX2 direct kernels PMR, or PMR4 where that wastes
 * fewer rows (left 1..4, 7, 8); dg_cpu512_block_rows for AVX-512. A short
 * block is only ever followed by short or last blocks, so block rb starts at
 * rb * kd floats of the packed weights. */
static int block_rows(int left, pack_kind kind)
{
    if (kind == PACK_AVX512)
        return dg_cpu512_block_rows(left);
    return kind == PACK_PANEL || left >= 9 || left == 6 || left == 5 ? PMR : PMR4;
}

/* The packing of a context's direct kernels (stride 1). */
static pack_kind direct_pack(const cpu_ctx *c)
{
    return conv_wide(c) ? PACK_AVX512 : PACK_AVX2;
}

/* Packs w [k, c, kh, kw] as row blocks (block_rows(.., kind)) of the [k, c kh kw]
 * matrix (forward), or, when flip, of the [c, k kh kw] matrix of the weights
 * turned 180 degrees (dx): wp[block start * kd + kk * rows + r], zero rows
 * past the end. */
static void pack_weights(const dg_conv_shape *s, const float *w, bool flip, pack_kind kind,
                         float *wp)
{
    const int m = flip ? s->c : s->k, kh = s->kh, kw = s->kw, taps = kh * kw;
    const int kd = (flip ? s->k : s->c) * taps;
    for (int rb = 0, mb; rb < m; rb += mb) {
        mb = block_rows(m - rb, kind);
        for (int kk = 0; kk < kd; kk++)
            for (int r = 0; r < mb; r++) {
                int row = rb + r;
                float v = 0.0f;
                if (row < m && !flip)
                    v = w[(size_t)row * kd + kk];
                else if (row < m) { /* w[kk / taps][row][kh - 1 - ky][kw - 1 - kx] */
                    int q = kk / taps, t = kk % taps, ky = t / kw, kx = t % kw;
                    v = w[(((size_t)q * s->c + row) * kh + (kh - 1 - ky)) * kw + (kw - 1 - kx)];
                }
                *wp++ = v;
            }
    }
}

/* y [k, ho * wo] (+ bias) = conv of one image x [c, h, w] through the panel
 * kernel; wp from pack_weights(s, ..., false, PACK_PANEL), panels and row scratch. */
static void conv_panel_image(const dg_conv_shape *s, const float *x, const float *wp,
                             const float *bias, float *y, float *panels, float *row)
{
#if DG_PANEL_KERNEL
    const int m = s->k;
    const size_t kd = (size_t)s->c * s->kh * s->kw, cols = (size_t)s->ho * s->wo;
    const size_t np = (cols + PNR - 1) / PNR;
    im2col_panels(s, x, panels, row);
    for (size_t k0 = 0; k0 < kd; k0 += PKC) {
        int kc = kd - k0 < PKC ? (int)(kd - k0) : PKC;
        for (size_t p = 0; p < np; p++) {
            int nr = cols - p * PNR < PNR ? (int)(cols - p * PNR) : PNR;
            const float *bp = panels + (p * kd + k0) * PNR;
            for (int rb = 0; rb < m; rb += PMR)
                panel_kernel(kc, wp + ((size_t)rb * kd + k0 * PMR), bp,
                             y + (size_t)rb * cols + p * PNR, cols, m - rb < PMR ? m - rb : PMR, nr,
                             bias ? bias + rb : NULL, k0 > 0);
        }
    }
#else
    (void)s, (void)x, (void)wp, (void)bias, (void)y, (void)panels, (void)row;
#endif
}

/* buf [c, h + 2 pad, w + 2 pad] = one image x [c, h, w] with its zero
 * border; clean says buf's border is already zero (the same shape was padded
 * into it before), so only the inside is copied. */
static void pad_image(const dg_conv_shape *s, const float *x, float *buf, bool clean)
{
    const int hp = s->h + 2 * s->pad, wpd = s->w + 2 * s->pad;
    const size_t cs = (size_t)hp * wpd;
    if (!clean)
        memset(buf, 0, padded_floats(s) * sizeof(float));
    for (int ch = 0; ch < s->c; ch++)
        for (int iy = 0; iy < s->h; iy++)
            memcpy(buf + ch * cs + (size_t)(iy + s->pad) * wpd + s->pad,
                   x + ((size_t)ch * s->h + iy) * s->w, (size_t)s->w * sizeof(float));
}

/* y [k, ho * wo] (+ bias) = conv of one image x [c, h, w], stride 1, through
 * direct_kernel, or the AVX-512 kernels when wide; wp from pack_weights
 * (kind: direct_pack), buf scratch of padded_floats(s) (clean: as
 * pad_image). */
static void conv_direct_image(const dg_conv_shape *s, const float *x, const float *wp,
                              const float *bias, float *y, float *buf, bool clean, bool wide)
{
    if (wide) {
        pad_image(s, x, buf, clean);
        dg_cpu512_conv_direct(s, buf, wp, bias, y);
        return;
    }
#if DG_PANEL_KERNEL
    const int hp = s->h + 2 * s->pad, wpd = s->w + 2 * s->pad, taps = s->kh * s->kw;
    const int m = s->k, ho = s->ho, wo = s->wo;
    const size_t cs = (size_t)hp * wpd, howo = (size_t)ho * wo, kd = (size_t)s->c * taps;
    pad_image(s, x, buf, clean);
    int chb = PKC / taps > 0 ? PKC / taps : 1;
    for (int c0 = 0; c0 < s->c; c0 += chb) {
        int nch = s->c - c0 < chb ? s->c - c0 : chb;
        for (int oy = 0; oy < ho; oy++)
            for (int ox0 = 0; ox0 < wo; ox0 += PNR) {
                int nr = wo - ox0 < PNR ? wo - ox0 : PNR;
                const float *src = buf + c0 * cs + (size_t)oy * wpd + ox0;
                float *yo = y + (size_t)oy * wo + ox0;
                for (int rb = 0, mb; rb < m; rb += mb) {
                    mb = block_rows(m - rb, PACK_AVX2);
                    const float *ap = wp + (size_t)rb * kd + (size_t)c0 * taps * mb;
                    int mr = m - rb < mb ? m - rb : mb;
                    const float *b = c0 == 0 && bias ? bias + rb : NULL;
                    if (mb == PMR)
                        direct_kernel(nch, s->kh, s->kw, ap, src, cs, (size_t)wpd,
                                      yo + (size_t)rb * howo, howo, mr, nr, b, c0 > 0);
                    else
                        direct_kernel4(nch, s->kh, s->kw, ap, src, cs, (size_t)wpd,
                                       yo + (size_t)rb * howo, howo, mr, nr, b, c0 > 0);
                }
            }
    }
#else
    (void)s, (void)x, (void)wp, (void)bias, (void)y, (void)buf, (void)clean;
#endif
}

/* Pixels of dy whose pixel-major rows (PNR floats of them) dw_image keeps in
 * L1 while every tap block runs over them. */
#define DW_PIXELS 256

/* part [round_up(c kh kw, PMR), kp] += dw of one image turned over (stride 1):
 * x [c, h, w] padded into xpad and dy [k, ho * wo] turned pixel-major into
 * dyt [ho * wo, kp] (kp = dw_cols(s); clean: xpad's border and dyt's columns
 * past k are already zero); wide: on the AVX-512 kernels. */
static void dw_image(const dg_conv_shape *s, const float *x, const float *dy, float *xpad,
                     float *dyt, float *part, bool clean, bool wide)
{
#if DG_PANEL_KERNEL
    const int ho = s->ho, wo = s->wo, kh = s->kh, kw = s->kw, taps = kh * kw;
    const size_t howo = (size_t)ho * wo, kp = dw_cols(s), ckk = (size_t)s->c * taps;
    const size_t wpd = (size_t)s->w + 2 * s->pad, cs = ((size_t)s->h + 2 * s->pad) * wpd;
    pad_image(s, x, xpad, clean);
    if (!clean)
        memset(dyt, 0, howo * kp * sizeof(float));
    transpose_dy(dy, s->k, howo, dyt, kp);
    int rows = DW_PIXELS / wo > 0 ? DW_PIXELS / wo : 1;
    for (int oy0 = 0; oy0 < ho; oy0 += rows) {
        int oy1 = oy0 + rows < ho ? oy0 + rows : ho;
        if (wide) {
            dg_cpu512_dw(s, xpad, dyt, kp, oy0, oy1, part);
            continue;
        }
        for (size_t k0 = 0; k0 < kp; k0 += PNR)
            for (size_t q0 = 0; q0 < ckk; q0 += PMR) {
                const float *xr[PMR];
                for (int r = 0; r < PMR; r++) {
                    size_t q = q0 + r < ckk ? q0 + r : q0; /* rows past the end: ignored */
                    int ch = (int)(q / taps), t = (int)(q % taps);
                    xr[r] = xpad + ch * cs + (size_t)(t / kw) * wpd + t % kw;
                }
                dw_kernel(xr, wpd, oy0, oy1, wo, dyt + (size_t)oy0 * wo * kp + k0, kp,
                          part + q0 * kp + k0, kp);
            }
    }
#else
    (void)s, (void)x, (void)dy, (void)xpad, (void)dyt, (void)part, (void)clean, (void)wide;
#endif
}

/* Checks the workspace; *wk gets its start (the shared part) and *threads how
 * many threads it serves (at most the OpenMP maximum and the batch, at least
 * one). */
static dg_status conv_work(cpu_ctx *c, const dg_conv_shape *s, dg_ref work, const char *op,
                           float **wk, int *threads)
{
    size_t shared = conv_shared(c, s) * sizeof(float), per = conv_per_thread(c, s) * sizeof(float);
    const cpu_buf *b = work.buf;
    char what[48];
    snprintf(what, sizeof what, "%s workspace", op);
    dg_status st = cpu_ref(c, work, shared + per, what, wk);
    if (st != DG_OK)
        return st;
    size_t fit = per ? (b->bytes - work.off - shared) / per : SIZE_MAX;
    int t = omp_get_max_threads();
    if (t > s->n)
        t = s->n;
    *threads = (size_t)t < fit ? t : (int)fit;
    if (*threads < 1)
        *threads = 1;
    return DG_OK;
}

dg_status dg_cpu_conv2d_fwd(void *ctx, const dg_conv_shape *s, dg_ref x, dg_ref w, dg_ref bias,
                            dg_ref y, dg_ref work)
{
    cpu_ctx *c = ctx;
    size_t nx = 0, nw = 0, ny = 0;
    float *xp, *wp, *bp = NULL, *yp, *wk;
    int threads;
    dg_status st;
    if ((st = check_conv(c, s, &nx, &nw, &ny)) || ny == 0 ||
        (st = cpu_ref(c, x, nx * sizeof(float), "conv2d_fwd x", &xp)) ||
        (st = cpu_ref(c, w, nw * sizeof(float), "conv2d_fwd w", &wp)) ||
        (bias.buf &&
         (st = cpu_ref(c, bias, (size_t)s->k * sizeof(float), "conv2d_fwd bias", &bp))) ||
        (st = cpu_ref(c, y, ny * sizeof(float), "conv2d_fwd y", &yp)) ||
        (st = conv_work(c, s, work, "conv2d_fwd", &wk, &threads)))
        return st;
    const int ckk = s->c * s->kh * s->kw, howo = s->ho * s->wo, K = s->k;
    const size_t chw = (size_t)s->c * s->h * s->w, per = conv_per_thread(c, s);
    const bool pointwise = conv_pointwise(s), fast = conv_fast_fwd(c, s), wide = conv_wide(c);
    float *packed = wk, *slots = wk + conv_shared(c, s);
    if (fast)
        pack_weights(s, wp, false, s->stride == 1 ? direct_pack(c) : PACK_PANEL, packed);
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        float *col = slots + (size_t)omp_get_thread_num() * per; /* [ckk, ho * wo] */
        bool clean = false;
#pragma omp for schedule(static)
        for (int img = 0; img < s->n; img++) {
            const float *xi = xp + (size_t)img * chw; /* [c, h, w] */
            float *yi = yp + (size_t)img * K * howo;  /* [k, ho * wo] */
            if (fast && s->stride == 1) {
                conv_direct_image(s, xi, packed, bp, yi, col, clean, wide);
                clean = true;
                continue;
            }
            if (fast) {
                conv_panel_image(s, xi, packed, bp, yi, col, col + panel_floats((size_t)ckk, howo));
                continue;
            }
            if (!pointwise)
                im2col(s, xi, col, (size_t)howo);
            /* y_i [k, howo] = w [k, ckk] * col [ckk, howo] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, K, howo, ckk, 1.0f, wp, ckk,
                        pointwise ? xi : col, howo, 0.0f, yi, howo);
            for (int k = 0; bp && k < K; k++) {
                float *row = yi + (size_t)k * howo; /* [ho * wo] */
                float b = bp[k];
                for (int i = 0; i < howo; i++)
                    row[i] += b;
            }
        }
    }
    return DG_OK;
}

dg_status dg_cpu_conv2d_bwd(void *ctx, const dg_conv_shape *s, dg_ref x, dg_ref w, dg_ref dy,
                            dg_ref dx, dg_ref dw, dg_ref db, dg_ref work)
{
    cpu_ctx *c = ctx;
    size_t nx = 0, nw = 0, ny = 0;
    float *xp, *wp, *dyp, *dxp = NULL, *dwp, *dbp = NULL, *wk;
    int threads;
    dg_status st;
    if ((st = check_conv(c, s, &nx, &nw, &ny)) ||
        (st = cpu_ref(c, x, nx * sizeof(float), "conv2d_bwd x", &xp)) ||
        (st = cpu_ref(c, w, nw * sizeof(float), "conv2d_bwd w", &wp)) ||
        (st = cpu_ref(c, dy, ny * sizeof(float), "conv2d_bwd dy", &dyp)) ||
        (dx.buf && (st = cpu_ref(c, dx, nx * sizeof(float), "conv2d_bwd dx", &dxp))) ||
        (st = cpu_ref(c, dw, nw * sizeof(float), "conv2d_bwd dw", &dwp)) ||
        (db.buf && (st = cpu_ref(c, db, (size_t)s->k * sizeof(float), "conv2d_bwd db", &dbp))) ||
        (st = conv_work(c, s, work, "conv2d_bwd", &wk, &threads)))
        return st;
    const int ckk = s->c * s->kh * s->kw, howo = s->ho * s->wo, K = s->k;
    const size_t chw = (size_t)s->c * s->h * s->w, per = conv_per_thread(c, s);
    const bool pointwise = conv_pointwise(s), fast_dx = dxp && conv_fast_dx(c, s);
    const bool fast_dw = conv_fast_dw(c, s), wide = conv_wide(c);
    const bwd_slot lay = bwd_layout(c, s);
    const size_t kp = dw_cols(s), npart = fast_dw ? block_round((size_t)ckk) * kp : nw;
    const dg_conv_shape fs = conv_dx_shape(s);
    float *packed = wk, *slots = wk + conv_shared(c, s);
    if (s->n == 0) { /* empty sums */
        memset(dwp, 0, nw * sizeof(float));
        if (dbp)
            memset(dbp, 0, (size_t)K * sizeof(float));
        return DG_OK;
    }
    if (dbp)
        bias_grad_sum(dyp, dbp, s->n, K, howo, ny);
    if (fast_dx)
        pack_weights(s, wp, true, direct_pack(c), packed);
        /* Each thread sums dw over its images into its own partial (dw itself
         * when alone on the im2col path); static scheduling gives every thread
         * at least one image. */
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        int t = omp_get_thread_num();
        float *slot = slots + (size_t)t * per;
        float *col = slot + lay.x;                                    /* [ckk, ho * wo] */
        float *part = threads > 1 || fast_dw ? slot + lay.part : dwp; /* [k, ckk] */
        float *dxbuf = fast_dw ? slot + lay.dx : col; /* dy padded, or dx's columns */
        bool first = true;
        if (fast_dw)
            memset(part, 0, npart * sizeof(float));
#pragma omp for schedule(static)
        for (int img = 0; img < s->n; img++) {
            const float *xi = xp + (size_t)img * chw;        /* [c, h, w] */
            const float *dyi = dyp + (size_t)img * K * howo; /* [k, ho * wo] */
            if (fast_dw) {
                dw_image(s, xi, dyi, col, slot + lay.dyt, part, !first, wide);
            } else {
                if (!pointwise)
                    im2col(s, xi, col, (size_t)howo);
                /* part [k, ckk] (+)= dy_i [k, howo] * col^T [howo, ckk] */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, K, ckk, howo, 1.0f, dyi, howo,
                            pointwise ? xi : col, howo, first ? 0.0f : 1.0f, part, ckk);
            }
            if (dxp) {
                float *dxi = dxp + (size_t)img * chw; /* [c, h, w] */
                if (fast_dx) {
                    conv_direct_image(&fs, dyi, packed, NULL, dxi, slot + lay.dx, !first, wide);
                } else {
                    /* col [ckk, howo] = w^T [ckk, k] * dy_i [k, howo], then back onto the image */
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ckk, howo, K, 1.0f, wp,
                                ckk, dyi, howo, 0.0f, pointwise ? dxi : dxbuf, howo);
                    if (!pointwise)
                        col2im(s, dxbuf, (size_t)howo, dxi);
                }
            }
            first = false;
        }
    }
    /* dw = the sum of the partials in thread order (deterministic); the fast
     * path's partials hold dw turned over, kp columns a row */
    if (fast_dw) {
        for (int k = 0; k < K; k++)
            for (int q = 0; q < ckk; q++) {
                float sum = 0.0f;
                for (int t = 0; t < threads; t++)
                    sum += slots[(size_t)t * per + lay.part + (size_t)q * kp + k];
                dwp[(size_t)k * ckk + q] = sum;
            }
    } else if (threads > 1) {
        for (size_t i = 0; i < nw; i++) {
            float sum = 0.0f;
            for (int t = 0; t < threads; t++)
                sum += slots[(size_t)t * per + lay.part + i];
            dwp[i] = sum;
        }
    }
    return DG_OK;
}

/* ---- softmax cross-entropy, sgd --------------------------------------------------- */

dg_status dg_cpu_xent(void *ctx, int n, int classes, dg_ref logits, dg_ref labels, dg_ref dlogits,
                      dg_ref acc)
{
    cpu_ctx *c = ctx;
    size_t nl;
    float *lp, *dp, *ap;
    int32_t *yp;
    dg_status st;
    if (n < 0 || classes < 1 || !size_of((size_t)n, (size_t)classes, 1, sizeof(float), &nl))
        return usage(c, "cpu: bad xent shape n %d classes %d", n, classes);
    if ((st = cpu_ref(c, acc, 2 * sizeof(float), "xent acc", &ap)) || n == 0 ||
        (st = cpu_ref(c, logits, nl, "xent logits", &lp)) ||
        (st = cpu_ref_i32(c, labels, (size_t)n * sizeof(int32_t), "xent labels", &yp)) ||
        (st = cpu_ref(c, dlogits, nl, "xent dlogits", &dp)))
        return st;
    nl /= sizeof(float);
    double loss = 0.0;
    long correct = 0;
#pragma omp parallel for if (nl > PAR_MIN) schedule(static) reduction(+ : loss, correct)
    for (int r = 0; r < n; r++) {
        const float *l = lp + (size_t)r * classes; /* [classes] */
        float *d = dp + (size_t)r * classes;       /* [classes] */
        int32_t y = yp[r];
        if (y < 0 || y >= classes) { /* contributes nothing */
            memset(d, 0, (size_t)classes * sizeof(float));
            continue;
        }
        int best = 0;
        for (int j = 1; j < classes; j++)
            if (l[j] > l[best])
                best = j;
        double mx = l[best], sum = 0.0;
        for (int j = 0; j < classes; j++)
            sum += exp((double)l[j] - mx);
        double inv = 1.0 / sum, inv_n = 1.0 / n;
        for (int j = 0; j < classes; j++)
            d[j] = (float)((exp((double)l[j] - mx) * inv - (j == y ? 1.0 : 0.0)) * inv_n);
        loss += log(sum) - ((double)l[y] - mx);
        correct += best == y;
    }
    ap[0] = (float)((double)ap[0] + loss / n);
    ap[1] = (float)((double)ap[1] + (double)correct);
    return DG_OK;
}

dg_status dg_cpu_sgd(void *ctx, dg_ref w, dg_ref g, dg_ref mom, size_t count, float lr,
                     float momentum, float weight_decay)
{
    cpu_ctx *c = ctx;
    size_t bytes;
    float *wp, *gp, *mp = NULL;
    dg_status st;
    if ((st = count_bytes(c, count, "sgd", &bytes)) || count == 0 ||
        (st = cpu_ref(c, w, bytes, "sgd w", &wp)) || (st = cpu_ref(c, g, bytes, "sgd g", &gp)) ||
        (momentum != 0.0f && (st = cpu_ref(c, mom, bytes, "sgd mom", &mp))))
        return st;
    if (!mp) {
#pragma omp parallel for simd if (count > PAR_MIN) schedule(static)
        for (size_t i = 0; i < count; i++)
            wp[i] -= lr * (gp[i] + weight_decay * wp[i]);
        return DG_OK;
    }
#pragma omp parallel for simd if (count > PAR_MIN) schedule(static)
    for (size_t i = 0; i < count; i++) {
        float d = gp[i] + weight_decay * wp[i];
        float m = momentum * mp[i] + d;
        mp[i] = m;
        wp[i] -= lr * m;
    }
    return DG_OK;
}

/* ---- events: the host clock, since every cpu op has finished when it returns ---- */

dg_status dg_cpu_event_record(void *ctx, int slot)
{
    cpu_ctx *c = ctx;
    if (slot < 0 || slot >= DG_EVENT_SLOTS)
        return usage(c, "cpu: event slot %d outside 0..%d", slot, DG_EVENT_SLOTS - 1);
    c->event_s[slot] = dg_now();
    c->event_set[slot] = true;
    return DG_OK;
}

dg_status dg_cpu_event_elapsed(void *ctx, int from, int to, double *ms)
{
    cpu_ctx *c = ctx;
    if (from < 0 || from >= DG_EVENT_SLOTS || to < 0 || to >= DG_EVENT_SLOTS)
        return usage(c, "cpu: event slots %d, %d outside 0..%d", from, to, DG_EVENT_SLOTS - 1);
    if (!c->event_set[from] || !c->event_set[to])
        return usage(c, "cpu: event slot %d was never recorded", c->event_set[from] ? to : from);
    *ms = (c->event_s[to] - c->event_s[from]) * 1e3;
    return DG_OK;
}
