/* The cpu backend's AVX-512 convolution kernels (contracts in cpu_avx512.h).
 *
 * The same register blocking as cpu_ops.c's AVX2 kernels, one vector holding
 * 16 floats instead of 8: a direct block is 12 (or, to waste fewer rows, 8)
 * output channels times two vectors of 16 pixels (24 or 16 accumulators),
 * the weights broadcast one row at a time; 12 rows ran at 180 GFLOP/s on
 * this Xeon where 8 ran at 160 (the broadcasts share the load ports). dw
 * blocks are 8 taps times 32 output channels. A vector covers 16 pixels of one output row ("slot");
 * the two vectors of a block take two consecutive slots, so a 16-pixel-wide image pairs rows (oy,
 * oy + 1) and a 32-wide one fills both from one row. Slots shorter than 16 pixels are stored
 * through a mask; loads read whole vectors (the padded image carries 16 floats of slack after it).
 * The reduction runs in the AVX2 kernels' order (channels in chunks of DIRECT_KC taps, then ky,
 * kx): one float FMA per term. The functions are compiled for AVX-512 F through target attributes,
 * so the file builds with the project's flags and the rest of the binary stays runnable on CPUs
 * without it. */
#include "backend/cpu/cpu_avx512.h"

#define MR DG_CPU512_MR
#define NR DG_CPU512_NR
/* Taps of the reduction a direct block sums before storing (cpu_ops.c's PKC). */
#define DIRECT_KC 256

int dg_cpu512_block_rows(int left)
{
    return left > 16 || (left > MR && left <= DG_CPU512_MR_WIDE) ? DG_CPU512_MR_WIDE : MR;
}

size_t dg_cpu512_packed_rows(size_t m)
{
    size_t rows = 0;
    for (size_t left = m; left > 0;) {
        size_t mb = (size_t)dg_cpu512_block_rows(left > 64 ? 64 : (int)left);
        rows += mb;
        left = left > mb ? left - mb : 0;
    }
    return rows;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define T512 __attribute__((target("avx512f")))
#define T512_INLINE __attribute__((target("avx512f"), always_inline)) static inline

bool dg_cpu512_built(void)
{
    return true;
}

bool dg_cpu512_usable(void)
{
    return __builtin_cpu_supports("avx512f");
}

/* The mask of the first n (capped at 16) lanes. */
static __mmask16 lanes(int n)
{
    return n >= NR ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

/* Row r's accumulator: 0 past mr, else the stored row (accumulate), the bias
 * or 0. */
T512_INLINE __m512 acc_init(const float *c, size_t ldc, int r, int mr, __mmask16 m,
                            const float *bias, bool accumulate)
{
    if (r >= mr)
        return _mm512_setzero_ps();
    if (accumulate)
        return _mm512_maskz_loadu_ps(m, c + (size_t)r * ldc);
    return bias ? _mm512_set1_ps(bias[r]) : _mm512_setzero_ps();
}

/* Stores row r's accumulator through mask m when r < mr. */
T512_INLINE void acc_put(float *c, size_t ldc, int r, int mr, __mmask16 m, __m512 v)
{
    if (r < mr)
        _mm512_mask_storeu_ps(c + (size_t)r * ldc, m, v);
}

/* One weight row r of a tap (r < rows): a times the tap's input vectors. */
#define Z_ROW(r)                                                                                   \
    if (r < rows) {                                                                                \
        a = _mm512_set1_ps(ap[r]);                                                                 \
        c##r##0 = _mm512_fmadd_ps(a, b0, c##r##0);                                                 \
        if (nv == 2)                                                                               \
            c##r##1 = _mm512_fmadd_ps(a, b1, c##r##1);                                             \
    }

/* One kernel tap (column kx): the input vectors at p0 + kx and p1 + kx times
 * the tap's MR weights; a macro so the 3x3 case unrolls with constant
 * offsets. */
#define Z_TAP(kx)                                                                                  \
    do {                                                                                           \
        __m512 b0 = _mm512_loadu_ps(p0 + (kx)), a;                                                 \
        __m512 b1 = nv == 2 ? _mm512_loadu_ps(p1 + (kx)) : b0;                                     \
        Z_ROW(0) Z_ROW(1) Z_ROW(2) Z_ROW(3) Z_ROW(4) Z_ROW(5) Z_ROW(6) Z_ROW(7);                   \
        Z_ROW(8) Z_ROW(9) Z_ROW(10) Z_ROW(11) ap += rows;                                          \
    } while (0)

#define Z_DECL(r)                                                                                  \
    __m512 c##r##0 = acc_init(y0, ldc, r, mr, m0, bias, accumulate);                               \
    __m512 c##r##1 = nv == 2 ? acc_init(y1, ldc, r, mr, m1, bias, accumulate) : _mm512_setzero_ps();
#define Z_PUT(r)                                                                                   \
    acc_put(y0, ldc, r, mr, m0, c##r##0);                                                          \
    if (nv == 2)                                                                                   \
        acc_put(y1, ldc, r, mr, m1, c##r##1);
#define Z_ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

/* A block of mr (<= rows, 8 or 12) rows times nv (1 or 2) slots: y0/y1 (rows
 * ldc apart, lanes m0/m1) = (accumulate ? themselves : bias or 0) + the
 * convolution over nch channels (cs floats apart) and kh x kw taps (rows ldr
 * apart) of the padded image read from p0s/p1s, ap the block's packed
 * weights (rows a tap). rows and nv are constants at every call, so the
 * rows past them and the second slot fold away. */
T512_INLINE void direct_block(int rows, int nv, int nch, int kh, int kw, const float *ap,
                              const float *p0s, const float *p1s, size_t cs, size_t ldr, float *y0,
                              float *y1, size_t ldc, int mr, __mmask16 m0, __mmask16 m1,
                              const float *bias, bool accumulate)
{
    Z_ALL(Z_DECL);
    for (int ch = 0; ch < nch; ch++) {
        for (int ky = 0; ky < kh; ky++) {
            const float *p0 = p0s + ch * cs + ky * ldr, *p1 = p1s + ch * cs + ky * ldr;
            if (kw == 3) { /* the common 3x3, unrolled */
                Z_TAP(0);
                Z_TAP(1);
                Z_TAP(2);
            } else {
                for (int kx = 0; kx < kw; kx++)
                    Z_TAP(kx);
            }
        }
    }
    Z_ALL(Z_PUT);
}

/* direct_block for 12 and 8 rows, two slots and one (the last slot of an odd
 * count): the same arguments, m1 0 for one slot. */
#define DIRECT_FN(name, rows, nv)                                                                  \
    T512 static void name(int nch, int kh, int kw, const float *ap, const float *p0s,              \
                          const float *p1s, size_t cs, size_t ldr, float *y0, float *y1,           \
                          size_t ldc, int mr, __mmask16 m0, __mmask16 m1, const float *bias,       \
                          bool accumulate)                                                         \
    {                                                                                              \
        direct_block(rows, nv, nch, kh, kw, ap, p0s, p1s, cs, ldr, y0, y1, ldc, mr, m0, m1, bias,  \
                     accumulate);                                                                  \
    }
DIRECT_FN(direct12x2, 12, 2)
DIRECT_FN(direct12x1, 12, 1)
DIRECT_FN(direct8x2, 8, 2)
DIRECT_FN(direct8x1, 8, 1)

void dg_cpu512_conv_direct(const dg_conv_shape *s, const float *buf, const float *wp,
                           const float *bias, float *y)
{
    const int wpd = s->w + 2 * s->pad, taps = s->kh * s->kw, m = s->k, ho = s->ho, wo = s->wo;
    const size_t cs = (size_t)(s->h + 2 * s->pad) * wpd, howo = (size_t)ho * wo;
    const size_t kd = (size_t)s->c * taps;
    const int per_row = (wo + NR - 1) / NR, slots = ho * per_row;
    const int chb = DIRECT_KC / taps > 0 ? DIRECT_KC / taps : 1;
    for (int c0 = 0; c0 < s->c; c0 += chb) {
        const int nch = s->c - c0 < chb ? s->c - c0 : chb;
        const float *src = buf + (size_t)c0 * cs;
        for (int j = 0; j < slots; j += 2) {
            /* slot j: row oy, columns ox .. ox + 16 (fewer at the row's end) */
            int oy = j / per_row, ox = j % per_row * NR;
            const float *p0 = src + (size_t)oy * wpd + ox, *p1 = p0;
            float *y0 = y + (size_t)oy * wo + ox, *y1 = y0;
            __mmask16 m0 = lanes(wo - ox), m1 = 0;
            if (j + 1 < slots) {
                oy = (j + 1) / per_row, ox = (j + 1) % per_row * NR;
                p1 = src + (size_t)oy * wpd + ox;
                y1 = y + (size_t)oy * wo + ox;
                m1 = lanes(wo - ox);
            }
            for (int rb = 0, mb; rb < m; rb += mb) {
                mb = dg_cpu512_block_rows(m - rb);
                const float *ap = wp + (size_t)rb * kd + (size_t)c0 * taps * mb;
                const int mr = m - rb < mb ? m - rb : mb;
                const float *b = c0 == 0 && bias ? bias + rb : NULL;
                float *z0 = y0 + (size_t)rb * howo, *z1 = y1 + (size_t)rb * howo;
                if (mb == DG_CPU512_MR_WIDE && m1)
                    direct12x2(nch, s->kh, s->kw, ap, p0, p1, cs, (size_t)wpd, z0, z1, howo, mr, m0,
                               m1, b, c0 > 0);
                else if (mb == DG_CPU512_MR_WIDE)
                    direct12x1(nch, s->kh, s->kw, ap, p0, p0, cs, (size_t)wpd, z0, z0, howo, mr, m0,
                               0, b, c0 > 0);
                else if (m1)
                    direct8x2(nch, s->kh, s->kw, ap, p0, p1, cs, (size_t)wpd, z0, z1, howo, mr, m0,
                              m1, b, c0 > 0);
                else
                    direct8x1(nch, s->kh, s->kw, ap, p0, p0, cs, (size_t)wpd, z0, z0, howo, mr, m0,
                              0, b, c0 > 0);
            }
        }
    }
}

/* One pixel of the dw block: dy's nv vectors at bp times tap r's input. */
#define W_ROW(r)                                                                                   \
    a = _mm512_set1_ps(x##r[ox]);                                                                  \
    c##r##0 = _mm512_fmadd_ps(a, b0, c##r##0);                                                     \
    if (nv == 2)                                                                                   \
        c##r##1 = _mm512_fmadd_ps(a, b1, c##r##1);
#define W_DECL(r)                                                                                  \
    __m512 c##r##0 = _mm512_loadu_ps(c + r * ldc);                                                 \
    __m512 c##r##1 = nv == 2 ? _mm512_loadu_ps(c + r * ldc + NR) : _mm512_setzero_ps();            \
    const float *x##r = x[r] + (size_t)oy0 * ldr;
#define W_PUT(r)                                                                                   \
    _mm512_storeu_ps(c + r * ldc, c##r##0);                                                        \
    if (nv == 2)                                                                                   \
        _mm512_storeu_ps(c + r * ldc + NR, c##r##1);
#define W_NEXT(r) x##r += ldr;

/* A block of dw turned over, c[r][j] (rows ldc apart) for the MR taps whose
 * inputs x[r] point at (the padded image at its channel, row ky, column kx;
 * rows ldr apart) and nv x 16 output channels, summed over the pixels of
 * rows [oy0, oy1) (wo a row): dyt the pixel-major dy of those rows (kp
 * floats a pixel), offset to the block's first channel. */
T512_INLINE void dw_block(int nv, const float *const x[MR], size_t ldr, int oy0, int oy1, int wo,
                          const float *dyt, size_t kp, float *c, size_t ldc)
{
    W_DECL(0) W_DECL(1) W_DECL(2) W_DECL(3) W_DECL(4) W_DECL(5) W_DECL(6) W_DECL(7);
    const float *bp = dyt;
    for (int oy = oy0; oy < oy1; oy++) {
        for (int ox = 0; ox < wo; ox++) {
            __m512 b0 = _mm512_loadu_ps(bp), a;
            __m512 b1 = nv == 2 ? _mm512_loadu_ps(bp + NR) : b0;
            W_ROW(0) W_ROW(1) W_ROW(2) W_ROW(3) W_ROW(4) W_ROW(5) W_ROW(6) W_ROW(7);
            bp += kp;
        }
        W_NEXT(0) W_NEXT(1) W_NEXT(2) W_NEXT(3) W_NEXT(4) W_NEXT(5) W_NEXT(6) W_NEXT(7);
    }
    W_PUT(0) W_PUT(1) W_PUT(2) W_PUT(3) W_PUT(4) W_PUT(5) W_PUT(6) W_PUT(7);
}

T512 static void dw2(const float *const x[MR], size_t ldr, int oy0, int oy1, int wo,
                     const float *dyt, size_t kp, float *c, size_t ldc)
{
    dw_block(2, x, ldr, oy0, oy1, wo, dyt, kp, c, ldc);
}

T512 static void dw1(const float *const x[MR], size_t ldr, int oy0, int oy1, int wo,
                     const float *dyt, size_t kp, float *c, size_t ldc)
{
    dw_block(1, x, ldr, oy0, oy1, wo, dyt, kp, c, ldc);
}

void dg_cpu512_dw(const dg_conv_shape *s, const float *xpad, const float *dyt, size_t kp, int oy0,
                  int oy1, float *part)
{
    const int kw = s->kw, taps = s->kh * kw, wo = s->wo;
    const size_t ckk = (size_t)s->c * taps, wpd = (size_t)s->w + 2 * s->pad;
    const size_t cs = ((size_t)s->h + 2 * s->pad) * wpd;
    const float *rows = dyt + (size_t)oy0 * wo * kp; /* pixel-major dy of row oy0 on */
    for (size_t k0 = 0; k0 < kp; k0 += 2 * NR)
        for (size_t q0 = 0; q0 < ckk; q0 += MR) {
            const float *xr[MR];
            for (int r = 0; r < MR; r++) {
                size_t q = q0 + r < ckk ? q0 + r : q0; /* rows past the end: ignored */
                int ch = (int)(q / taps), t = (int)(q % taps);
                xr[r] = xpad + ch * cs + (size_t)(t / kw) * wpd + t % kw;
            }
            if (kp - k0 >= 2 * NR)
                dw2(xr, wpd, oy0, oy1, wo, rows + k0, kp, part + q0 * kp + k0, kp);
            else
                dw1(xr, wpd, oy0, oy1, wo, rows + k0, kp, part + q0 * kp + k0, kp);
        }
}

#else /* no AVX-512 kernels in this build: the AVX2 or portable path runs */

bool dg_cpu512_built(void)
{
    return false;
}

bool dg_cpu512_usable(void)
{
    return false;
}

void dg_cpu512_conv_direct(const dg_conv_shape *s, const float *buf, const float *wp,
                           const float *bias, float *y)
{
    (void)s, (void)buf, (void)wp, (void)bias, (void)y;
}

void dg_cpu512_dw(const dg_conv_shape *s, const float *xpad, const float *dyt, size_t kp, int oy0,
                  int oy1, float *part)
{
    (void)s, (void)xpad, (void)dyt, (void)kp, (void)oy0, (void)oy1, (void)part;
}
#endif
