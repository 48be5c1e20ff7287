/* devgate OpenCL kernels (OpenCL C 1.2, built with -cl-std=CL1.2).
 *
 * Single-precision GEMM, row-major: C[m,n] = alpha * A[m,k] * B[k,n] + beta * C.
 * Leading dimensions and offsets are in elements. When beta == 0 C is written
 * without being read, so uninitialised C cannot leak NaN into the result.
 * Every kernel is correct for any m, n, k >= 0 (out-of-range tile elements are
 * loaded as zero and never stored).
 *
 *   dg_sgemm_tiled64, dg_sgemm_tiled128
 *                   GPUs: a 64x64 (128x128) tile of C per 16x16 work-group, A
 *                   and B staged through local memory 16 (8) deep, 4x4 (8x8)
 *                   outputs per work-item.
 *   dg_sgemm_vec    CPUs: no local memory, no barriers; each work-item keeps a
 *                   6x16 block of C in twelve float8 registers.
 *   dg_sgemm_naive  fallback for devices too small for the tiled kernel. */

/* ---- tiled (local memory, register-blocked) ---------------------------------- */

#define WG 16 /* work-group edge: WG x WG work-items */

/* One ts x ts tile of C per work-group, staged tk deep; each work-item owns
 * (ts/WG) x (ts/WG) outputs strided by WG. ts and tk are compile-time constants
 * at every call, so the loops unroll and acc lives in registers. A is stored
 * transposed (as[kk][row]) so the compute loop reads both slices along rows;
 * the +1 in its pitch breaks store bank conflicts. */
static inline void dg_tiled(const int ts, const int tk, __local float *as, __local float *bs,
                            const int m, const int n, const int k, const float alpha,
                            __global const float *restrict a, const int lda,
                            __global const float *restrict b, const int ldb, const float beta,
                            __global float *c, const int ldc)
{
    const int wpt = ts / WG;
    const int tx = (int)get_local_id(0);
    const int ty = (int)get_local_id(1);
    const int tid = ty * WG + tx;
    const int row0 = (int)get_group_id(1) * ts;
    const int col0 = (int)get_group_id(0) * ts;
    const int pitch = ts + 1;

    float acc[8][8]; /* wpt <= 8 */
    for (int r = 0; r < wpt; r++)
        for (int q = 0; q < wpt; q++)
            acc[r][q] = 0.0f;

    for (int k0 = 0; k0 < k; k0 += tk) {
        /* A slice: ts rows x tk columns, read along k (coalesced). */
        for (int l = 0; l < (ts * tk) / (WG * WG); l++) {
            const int e = tid + l * WG * WG;
            const int r = e / tk, kk = e % tk;
            const int gr = row0 + r, gk = k0 + kk;
            as[kk * pitch + r] = (gr < m && gk < k) ? a[(size_t)gr * lda + gk] : 0.0f;
        }
        /* B slice: tk rows x ts columns, read along n (coalesced). */
        for (int l = 0; l < (tk * ts) / (WG * WG); l++) {
            const int e = tid + l * WG * WG;
            const int kk = e / ts, q = e % ts;
            const int gk = k0 + kk, gc = col0 + q;
            bs[kk * ts + q] = (gk < k && gc < n) ? b[(size_t)gk * ldb + gc] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        for (int p = 0; p < tk; p++) {
            float av[8], bv[8];
            for (int r = 0; r < wpt; r++)
                av[r] = as[p * pitch + ty + r * WG];
            for (int q = 0; q < wpt; q++)
                bv[q] = bs[p * ts + tx + q * WG];
            for (int r = 0; r < wpt; r++)
                for (int q = 0; q < wpt; q++)
                    acc[r][q] += av[r] * bv[q];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    for (int r = 0; r < wpt; r++) {
        const int gr = row0 + ty + r * WG;
        if (gr >= m)
            break;
        __global float *crow = c + (size_t)gr * ldc;
        for (int q = 0; q < wpt; q++) {
            const int gc = col0 + tx + q * WG;
            if (gc < n)
                crow[gc] = beta == 0.0f ? alpha * acc[r][q] : alpha * acc[r][q] + beta * crow[gc];
        }
    }
}

/* 64x64 tiles, 16 deep, 4x4 per work-item: enough work-groups for small sizes. */
__kernel __attribute__((reqd_work_group_size(WG, WG, 1))) void
dg_sgemm_tiled64(const int m, const int n, const int k, const float alpha,
                 __global const float *restrict a, const ulong a_off, const int lda,
                 __global const float *restrict b, const ulong b_off, const int ldb,
                 const float beta, __global float *c, const ulong c_off, const int ldc)
{
    __local float as[16 * (64 + 1)];
    __local float bs[16 * 64];
    dg_tiled(64, 16, as, bs, m, n, k, alpha, a + a_off, lda, b + b_off, ldb, beta, c + c_off, ldc);
}

/* 128x128 tiles, 8 deep, 8x8 per work-item: more reuse once the grid is full. */
__kernel __attribute__((reqd_work_group_size(WG, WG, 1))) void
dg_sgemm_tiled128(const int m, const int n, const int k, const float alpha,
                  __global const float *restrict a, const ulong a_off, const int lda,
                  __global const float *restrict b, const ulong b_off, const int ldb,
                  const float beta, __global float *c, const ulong c_off, const int ldc)
{
    __local float as[8 * (128 + 1)];
    __local float bs[8 * 128];
    dg_tiled(128, 8, as, bs, m, n, k, alpha, a + a_off, lda, b + b_off, ldb, beta, c + c_off, ldc);
}

/* ---- vector (CPU) ------------------------------------------------------------ */

#define VM 6  /* rows per work-item */
#define VN 16 /* columns per work-item (two float8) */

#define DG_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)

__kernel void dg_sgemm_vec(const int m, const int n, const int k, const float alpha,
                           __global const float *restrict a, const ulong a_off, const int lda,
                           __global const float *restrict b, const ulong b_off, const int ldb,
                           const float beta, __global float *c, const ulong c_off, const int ldc)
{
    const int j = (int)get_global_id(0) * VN;
    const int i = (int)get_global_id(1) * VM;
    if (i >= m || j >= n)
        return;
    a += a_off;
    b += b_off;
    c += c_off;

    /* Rows past m repeat row m-1: always in bounds, never stored. Named
     * variables, not arrays, so every accumulator stays in a register. */
#define DG_DECL(r)                                                                                 \
    __global const float *a##r = a + (size_t)min(i + r, m - 1) * lda;                              \
    float8 lo##r = (float8)(0.0f), hi##r = (float8)(0.0f);
    DG_ROWS(DG_DECL)
#undef DG_DECL

#define DG_FMA(r)                                                                                  \
    {                                                                                              \
        const float av = a##r[p];                                                                  \
        lo##r += av * b0;                                                                          \
        hi##r += av * b1;                                                                          \
    }
    __global const float *bp = b + j;
    if (j + VN <= n) {
        for (int p = 0; p < k; p++, bp += ldb) {
            const float8 b0 = vload8(0, bp), b1 = vload8(1, bp);
            DG_ROWS(DG_FMA)
        }
    } else {
        float t[VN];
        for (int p = 0; p < k; p++, bp += ldb) {
            for (int q = 0; q < VN; q++)
                t[q] = j + q < n ? bp[q] : 0.0f;
            const float8 b0 = vload8(0, t), b1 = vload8(1, t);
            DG_ROWS(DG_FMA)
        }
    }
#undef DG_FMA

    const int nrow = min(VM, m - i);
    const int ncol = min(VN, n - j);
#define DG_STORE(r)                                                                                \
    if (r < nrow) {                                                                                \
        __global float *cr = c + (size_t)(i + r) * ldc + j;                                        \
        const float8 v0 = alpha * lo##r, v1 = alpha * hi##r;                                       \
        if (ncol == VN) {                                                                          \
            vstore8(beta == 0.0f ? v0 : v0 + beta * vload8(0, cr), 0, cr);                         \
            vstore8(beta == 0.0f ? v1 : v1 + beta * vload8(1, cr), 1, cr);                         \
        } else {                                                                                   \
            float t[VN];                                                                           \
            vstore8(v0, 0, t);                                                                     \
            vstore8(v1, 1, t);                                                                     \
            for (int q = 0; q < ncol; q++)                                                         \
                cr[q] = beta == 0.0f ? t[q] : t[q] + beta * cr[q];                                 \
        }                                                                                          \
    }
    DG_ROWS(DG_STORE)
#undef DG_STORE
}

/* ---- naive fallback ---------------------------------------------------------- */

__kernel void dg_sgemm_naive(const int m, const int n, const int k, const float alpha,
                             __global const float *restrict a, const ulong a_off, const int lda,
                             __global const float *restrict b, const ulong b_off, const int ldb,
                             const float beta, __global float *c, const ulong c_off, const int ldc)
{
    const int j = (int)get_global_id(0);
    const int i = (int)get_global_id(1);
    if (i >= m || j >= n)
        return;
    __global const float *ar = a + a_off + (size_t)i * lda;
    __global const float *bc = b + b_off + j;
    float acc = 0.0f;
    for (int p = 0; p < k; p++)
        acc += ar[p] * bc[(size_t)p * ldb];
    __global float *cp = c + c_off + (size_t)i * ldc + j;
    *cp = beta == 0.0f ? alpha * acc : alpha * acc + beta * *cp;
}
