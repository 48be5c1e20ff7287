/* devgate OpenCL kernels (OpenCL C 1.2, built with -cl-std=CL1.2).
 *
 * Single-precision GEMM, row-major, optionally batched:
 *   C_b[m,n] = alpha * op(A_b) * op(B_b) + beta * C_b,  b = 0 .. batch-1,
 * op(A) = A (stored m x k) or A^T (stored k x m), likewise B (k x n or n x k).
 * Leading dimensions, offsets and batch strides are in elements; the batch is
 * the NDRange's third dimension. When beta == 0 C is written without being
 * read, so uninitialised C cannot leak NaN into the result. Every kernel is
 * correct for any m, n, k >= 0 (out-of-range tile elements are loaded as zero
 * and never stored). Each variant comes in four specialisations, suffixed
 * _nn, _nt, _tn, _tt (op(A), op(B)), so the load pattern is fixed at compile
 * time and the untransposed path stays as fast as before.
 *
 *   dg_sgemm_db32, dg_sgemm_db64, dg_sgemm_db128
 *                   GPUs: a 32x32 (64x64, 128x128) tile of C per 8x8 (16x16,
 *                   16x16) work-group, 4x4 (4x4, 8x8) outputs per work-item,
 *                   A and B double-buffered in local memory, the next slice
 *                   prefetched into registers, float4 local reads.
 *   dg_sgemm_tiled64, dg_sgemm_tiled128
 *                   the earlier GPU kernels (single-buffered, scalar local
 *                   reads), kept to compare: a 64x64 (128x128) tile of C per
 *                   16x16 work-group, A and B staged through local memory 16
 *                   (8) deep, 4x4 (8x8) outputs per work-item.
 *   dg_sgemm_vec    CPUs: no local memory, no barriers; each work-item keeps a
 *                   6x16 block of C in twelve float8 registers (op(B) = B^T
 *                   runs on a copy that dg_transpose packs, where it fits).
 *   dg_sgemm_naive  fallback for devices too small for the tiled kernel.
 *
 * Then the training ops (elementwise, reductions, pooling, im2col / col2im,
 * softmax cross-entropy, SGD). Every reduction has a fixed order, so results
 * are deterministic run to run; nothing uses atomics. Tensor offsets are
 * element offsets (ulong); the host checks every range before a launch. */

#define DG_GEMM_PARAMS                                                                             \
    const int m, const int n, const int k, const float alpha, __global const float *restrict a,    \
        const ulong a_off, const int lda, const ulong sa, __global const float *restrict b,        \
        const ulong b_off, const int ldb, const ulong sb, const float beta, __global float *c,     \
        const ulong c_off, const int ldc, const ulong sc, __global const float *ep_b,             \
        const ulong ep_b_off, __global const float *ep_m, const ulong ep_m_off, const int epi

/* The fused epilogue (epi bits, 0: none): the bias per column (1) or per row
 * (2), then ReLU (4), then the mask (8: 0 where mask <= 0, mask laid out as C
 * with ldc). The same float operations as bias_add, relu_fwd and relu_bwd
 * after a product, so the fused result equals the unfused one exactly. */
#define EPI_BIAS_COL 1
#define EPI_BIAS_ROW 2
#define EPI_RELU 4
#define EPI_MASK 8
static inline float dg_epi(float v, const int epi, __global const float *eb,
                           __global const float *em, const int gr, const int gc, const int ldc)
{
    if (epi & EPI_BIAS_COL)
        v += eb[gc];
    if (epi & EPI_BIAS_ROW)
        v += eb[gr];
    if (epi & EPI_RELU)
        v = v > 0.0f ? v : 0.0f;
    if ((epi & EPI_MASK) && !(em[(size_t)gr * ldc + gc] > 0.0f))
        v = 0.0f;
    return v;
}
#define DG_EPI_ARGS epi, ep_b + ep_b_off, ep_m + ep_m_off + bi * sc
#define DG_EPI_PARAMS const int epi, __global const float *eb, __global const float *em

/* ---- tiled (local memory, register-blocked) ---------------------------------- */

#define WG 16 /* work-group edge: WG x WG work-items */

/* One ts x ts tile of C per work-group, staged tk deep; each work-item owns
 * (ts/WG) x (ts/WG) outputs strided by WG. ts, tk, ta and tb are compile-time
 * constants at every call, so the loops unroll, the load pattern is fixed and
 * acc lives in registers. Both slices are stored k-major (as[kk][row],
 * bs[kk][col]) so the compute loop reads along rows; global reads are
 * coalesced along whichever dimension is contiguous in memory, and the +1 in
 * the pitch breaks bank conflicts when the store runs along k. */
static inline void dg_tiled(const int ts, const int tk, const int ta, const int tb,
                            __local float *as, __local float *bs, const int m, const int n,
                            const int k, const float alpha, __global const float *restrict a,
                            const int lda, __global const float *restrict b, const int ldb,
                            const float beta, __global float *c, const int ldc, DG_EPI_PARAMS)
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
        /* A slice: ts rows x tk columns of op(A). */
        for (int l = 0; l < (ts * tk) / (WG * WG); l++) {
            const int e = tid + l * WG * WG;
            if (!ta) { /* stored m x k: read along k */
                const int r = e / tk, kk = e % tk;
                const int gr = row0 + r, gk = k0 + kk;
                as[kk * pitch + r] = (gr < m && gk < k) ? a[(size_t)gr * lda + gk] : 0.0f;
            } else { /* stored k x m: read along m */
                const int kk = e / ts, r = e % ts;
                const int gr = row0 + r, gk = k0 + kk;
                as[kk * pitch + r] = (gr < m && gk < k) ? a[(size_t)gk * lda + gr] : 0.0f;
            }
        }
        /* B slice: tk rows x ts columns of op(B). */
        for (int l = 0; l < (tk * ts) / (WG * WG); l++) {
            const int e = tid + l * WG * WG;
            if (!tb) { /* stored k x n: read along n */
                const int kk = e / ts, q = e % ts;
                const int gk = k0 + kk, gc = col0 + q;
                bs[kk * pitch + q] = (gk < k && gc < n) ? b[(size_t)gk * ldb + gc] : 0.0f;
            } else { /* stored n x k: read along k */
                const int q = e / tk, kk = e % tk;
                const int gk = k0 + kk, gc = col0 + q;
                bs[kk * pitch + q] = (gk < k && gc < n) ? b[(size_t)gc * ldb + gk] : 0.0f;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        for (int p = 0; p < tk; p++) {
            float av[8], bv[8];
            for (int r = 0; r < wpt; r++)
                av[r] = as[p * pitch + ty + r * WG];
            for (int q = 0; q < wpt; q++)
                bv[q] = bs[p * pitch + tx + q * WG];
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
            if (gc < n) {
                const float v =
                    beta == 0.0f ? alpha * acc[r][q] : alpha * acc[r][q] + beta * crow[gc];
                crow[gc] = epi ? dg_epi(v, epi, eb, em, gr, gc, ldc) : v;
            }
        }
    }
}

/* 64x64 tiles, 16 deep, 4x4 per work-item: enough work-groups for small sizes.
 * 128x128 tiles, 8 deep, 8x8 per work-item: more reuse once the grid is full. */
#define DG_TILED_KERNEL(name, ts, tk, ta, tb)                                                      \
    __kernel __attribute__((reqd_work_group_size(WG, WG, 1))) void name(DG_GEMM_PARAMS)            \
    {                                                                                              \
        __local float as[tk * (ts + 1)];                                                           \
        __local float bs[tk * (ts + 1)];                                                           \
        const size_t bi = get_group_id(2);                                                         \
        dg_tiled(ts, tk, ta, tb, as, bs, m, n, k, alpha, a + a_off + bi * sa, lda,                 \
                 b + b_off + bi * sb, ldb, beta, c + c_off + bi * sc, ldc, DG_EPI_ARGS);           \
    }
DG_TILED_KERNEL(dg_sgemm_tiled64_nn, 64, 16, 0, 0)
DG_TILED_KERNEL(dg_sgemm_tiled64_nt, 64, 16, 0, 1)
DG_TILED_KERNEL(dg_sgemm_tiled64_tn, 64, 16, 1, 0)
DG_TILED_KERNEL(dg_sgemm_tiled64_tt, 64, 16, 1, 1)
DG_TILED_KERNEL(dg_sgemm_tiled128_nn, 128, 8, 0, 0)
DG_TILED_KERNEL(dg_sgemm_tiled128_nt, 128, 8, 0, 1)
DG_TILED_KERNEL(dg_sgemm_tiled128_tn, 128, 8, 1, 0)
DG_TILED_KERNEL(dg_sgemm_tiled128_tt, 128, 8, 1, 1)

/* ---- double-buffered tiled (GPUs) ------------------------------------------- */

/* One ts x ts tile of C per we x we work-group, ts = 4 * we * g: each
 * work-item owns g x g blocks of 4 x 4 outputs, block (h, v) at rows
 * 4*ty + 4*we*h and columns 4*tx + 4*we*v of the tile, so the inner loop
 * reads its operands from local memory as float4 (one 16-byte load per four
 * values; lanes of a row share A's, B's are consecutive). The k loop is
 * software-pipelined: the next tk-deep slice of op(A) and op(B) is read from
 * global memory into registers before the current one is multiplied, then
 * stored into the other half of a double buffer, so one barrier per slice
 * suffices and the global latency hides behind the arithmetic. Global reads
 * run along whichever dimension is contiguous in memory (coalesced); the
 * local pitch ts + 4 keeps rows 16-byte aligned and spreads the k-major
 * stores over the banks. The same fixed k order as dg_tiled: each output is
 * one sequential sum over p. */
#define DG_DB_PITCH(ts) ((ts) + 4)

/* The column buffer's element (row, col) of one image x[c, h, w], read in
 * place (the implicit GEMM of a convolution): row = (ci*kh + ky)*kw + kx, col
 * = oy*wo + ox, 0 in the padding; geo = (c, h, w, kh, kw, stride, pad, wo).
 * The same value dg_im2col writes. */
static inline float dg_col_at(__global const float *restrict x, const int row, const int col,
                              const int8 geo)
{
    const int khw = geo.s3 * geo.s4;
    const int ci = row / khw, rr = row - ci * khw;
    const int ky = rr / geo.s4, kx = rr - ky * geo.s4;
    const int oy = col / geo.s7, ox = col - oy * geo.s7;
    const int iy = oy * geo.s5 - geo.s6 + ky, ix = ox * geo.s5 - geo.s6 + kx;
    return (iy >= 0 && iy < geo.s1 && ix >= 0 && ix < geo.s2)
               ? x[((size_t)ci * geo.s1 + iy) * geo.s2 + ix]
               : 0.0f;
}

/* A convolution's weights w[k, c, kh, kw] read as the dx product's A[c,
 * (kk*kh + ky)*kw + kx] (geo as dg_col_at's). */
static inline float dg_wt_at(__global const float *restrict w, const int row, const int col,
                             const int8 geo)
{
    const int khw = geo.s3 * geo.s4;
    const int kk = col / khw, r = col - kk * khw;
    return w[((size_t)kk * geo.s0 + row) * khw + r];
}

/* One image's output gradient dy[k, ho, wo] read as the dx product's B[(kk*kh
 * + ky)*kw + kx, y*w + x] = dy[kk, oy, ox] where y = oy*stride - pad + ky and
 * x likewise, 0 where no output position maps there (what col2im gathers). */
static inline float dg_dy_at(__global const float *restrict dy, const int row, const int col,
                             const int8 geo)
{
    const int khw = geo.s3 * geo.s4;
    const int kk = row / khw, r = row - kk * khw;
    const int ky = r / geo.s4, kx = r - ky * geo.s4;
    const int y = col / geo.s2, x = col - y * geo.s2;
    const int ty = y + geo.s6 - ky, tx = x + geo.s6 - kx;
    const int ho = (geo.s1 + 2 * geo.s6 - geo.s3) / geo.s5 + 1;
    if (ty < 0 || tx < 0 || ty % geo.s5 || tx % geo.s5)
        return 0.0f;
    const int oy = ty / geo.s5, ox = tx / geo.s5;
    return oy < ho && ox < geo.s7 ? dy[((size_t)kk * ho + oy) * geo.s7 + ox] : 0.0f;
}

/* cv (a compile-time constant) 0: A and B as stored; 1: op(B) is the column
 * buffer of the image at b (dg_col_at with geo; transposed when tb: the
 * weight gradient's product), gathered as the slices are fetched; 2: the
 * input gradient's product, A the weights (dg_wt_at) and B the output
 * gradient of the image at b (dg_dy_at). */
static inline void dg_db(const int we, const int g, const int tk, const int ta, const int tb,
                         __local float *as, __local float *bs, const int m, const int n,
                         const int k, const float alpha, __global const float *restrict a,
                         const int lda, __global const float *restrict b, const int ldb,
                         const float beta, __global float *c, const int ldc, DG_EPI_PARAMS,
                         const int cv, const int8 geo)
{
    const int ts = 4 * we * g, pitch = DG_DB_PITCH(ts), nt = we * we;
    const int per = ts * tk / nt; /* slice elements each work-item moves, per operand */
    const int tx = (int)get_local_id(0), ty = (int)get_local_id(1);
    const int tid = ty * we + tx;
    const int row0 = (int)get_group_id(1) * ts, col0 = (int)get_group_id(0) * ts;
    const int hb = tk * pitch; /* floats in one half of a double buffer */

    float4 acc[2][2][4]; /* [h][v][row within block]; g <= 2 */
    for (int h = 0; h < g; h++)
        for (int v = 0; v < g; v++)
            for (int i = 0; i < 4; i++)
                acc[h][v][i] = (float4)(0.0f);

    float ra[16], rb[16]; /* per <= 16 */
#define DG_DB_FETCH(k0)                                                                            \
    for (int l = 0; l < per; l++) {                                                                \
        const int e = tid + l * nt;                                                                \
        int r, kk;                                                                                 \
        if (!ta) {                                                                                 \
            r = e / tk;                                                                            \
            kk = e % tk;                                                                           \
        } else {                                                                                   \
            kk = e / ts;                                                                           \
            r = e % ts;                                                                            \
        }                                                                                          \
        const int gr = row0 + r, gk = (k0) + kk;                                                   \
        ra[l] = (gr < m && gk < k) ? (cv == 2 ? dg_wt_at(a, gr, gk, geo)                          \
                                      : ta    ? a[(size_t)gk * lda + gr]                           \
                                              : a[(size_t)gr * lda + gk])                          \
                                   : 0.0f;                                                         \
        int q, kb;                                                                                 \
        if (!tb) {                                                                                 \
            kb = e / ts;                                                                           \
            q = e % ts;                                                                            \
        } else {                                                                                   \
            q = e / tk;                                                                            \
            kb = e % tk;                                                                           \
        }                                                                                          \
        const int gc = col0 + q, gkb = (k0) + kb;                                                  \
        rb[l] = (gkb < k && gc < n) ? (cv == 1 && tb ? dg_col_at(b, gc, gkb, geo)                 \
                                       : cv == 1     ? dg_col_at(b, gkb, gc, geo)                  \
                                       : cv == 2     ? dg_dy_at(b, gkb, gc, geo)                   \
                                       : tb          ? b[(size_t)gc * ldb + gkb]                   \
                                                     : b[(size_t)gkb * ldb + gc])                  \
                                    : 0.0f;                                                        \
    }
#define DG_DB_STORE(buf)                                                                           \
    for (int l = 0; l < per; l++) {                                                                \
        const int e = tid + l * nt;                                                                \
        const int r = ta ? e % ts : e / tk, kk = ta ? e / ts : e % tk;                             \
        const int q = tb ? e / tk : e % ts, kb = tb ? e % tk : e / ts;                             \
        as[(buf)*hb + kk * pitch + r] = ra[l];                                                   \
        bs[(buf)*hb + kb * pitch + q] = rb[l];                                                   \
    }

    DG_DB_FETCH(0)
    DG_DB_STORE(0)
    barrier(CLK_LOCAL_MEM_FENCE);
    int cur = 0;
    for (int k0 = 0; k0 < k; k0 += tk) {
        const bool more = k0 + tk < k;
        if (more) {
            DG_DB_FETCH(k0 + tk)
        }
        __local const float *ap = as + cur * hb + 4 * ty;
        __local const float *bp = bs + cur * hb + 4 * tx;
        for (int p = 0; p < tk; p++) {
            float4 av[2], bv[2];
            for (int h = 0; h < g; h++)
                av[h] = *(__local const float4 *)(ap + p * pitch + 4 * we * h);
            for (int v = 0; v < g; v++)
                bv[v] = *(__local const float4 *)(bp + p * pitch + 4 * we * v);
            for (int h = 0; h < g; h++)
                for (int v = 0; v < g; v++) {
                    acc[h][v][0] += av[h].x * bv[v];
                    acc[h][v][1] += av[h].y * bv[v];
                    acc[h][v][2] += av[h].z * bv[v];
                    acc[h][v][3] += av[h].w * bv[v];
                }
        }
        if (more) {
            DG_DB_STORE(cur ^ 1)
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        cur ^= 1;
    }
#undef DG_DB_FETCH
#undef DG_DB_STORE

    for (int h = 0; h < g; h++)
        for (int i = 0; i < 4; i++) {
            const int gr = row0 + 4 * ty + 4 * we * h + i;
            if (gr >= m)
                break;
            __global float *crow = c + (size_t)gr * ldc;
            for (int v = 0; v < g; v++) {
                const float4 x = alpha * acc[h][v][i];
                const float xs[4] = {x.x, x.y, x.z, x.w};
                const int gc0 = col0 + 4 * tx + 4 * we * v;
                for (int j = 0; j < 4 && gc0 + j < n; j++) {
                    const float y = beta == 0.0f ? xs[j] : xs[j] + beta * crow[gc0 + j];
                    crow[gc0 + j] = epi ? dg_epi(y, epi, eb, em, gr, gc0 + j, ldc) : y;
                }
            }
        }
}

/* db32: 32x32 tiles on 8x8 work-items, 16 deep (many work-groups for the
 * fixture's small products); db64: 64x64 on 16x16, 16 deep; db128: 128x128 on
 * 16x16 (8x8 outputs each), 8 deep. */
/* A db kernel's body: its local tiles, its product of the batch (group
 * dimension 2), dg_db with cv and geo. */
/* The double-buffered local tiles of A and B (as4, bs4) a db kernel declares. */
#define DG_DB_TILES(we, g, tk)                                                                     \
    __local float4 as4[2 * tk * DG_DB_PITCH(4 * we * g) / 4];                                      \
    __local float4 bs4[2 * tk * DG_DB_PITCH(4 * we * g) / 4]
#define DG_DB_BODY(we, g, tk, ta, tb, cv, geo)                                                     \
    {                                                                                              \
        DG_DB_TILES(we, g, tk);                                                                    \
        const size_t bi = get_group_id(2);                                                         \
        dg_db(we, g, tk, ta, tb, (__local float *)as4, (__local float *)bs4, m, n, k, alpha,       \
              a + a_off + bi * sa, lda, b + b_off + bi * sb, ldb, beta, c + c_off + bi * sc, ldc,  \
              DG_EPI_ARGS, cv, geo);                                                               \
    }
#define DG_DB_KERNEL(name, we, g, tk, ta, tb)                                                      \
    __kernel __attribute__((reqd_work_group_size(we, we, 1))) void name(DG_GEMM_PARAMS)            \
        DG_DB_BODY(we, g, tk, ta, tb, 0, (int8)(0))
DG_DB_KERNEL(dg_sgemm_db32_nn, 8, 1, 16, 0, 0)
DG_DB_KERNEL(dg_sgemm_db32_nt, 8, 1, 16, 0, 1)
DG_DB_KERNEL(dg_sgemm_db32_tn, 8, 1, 16, 1, 0)
DG_DB_KERNEL(dg_sgemm_db32_tt, 8, 1, 16, 1, 1)
DG_DB_KERNEL(dg_sgemm_db64_nn, 16, 1, 16, 0, 0)
DG_DB_KERNEL(dg_sgemm_db64_nt, 16, 1, 16, 0, 1)
DG_DB_KERNEL(dg_sgemm_db64_tn, 16, 1, 16, 1, 0)
DG_DB_KERNEL(dg_sgemm_db64_tt, 16, 1, 16, 1, 1)
DG_DB_KERNEL(dg_sgemm_db128_nn, 16, 2, 8, 0, 0)
DG_DB_KERNEL(dg_sgemm_db128_nt, 16, 2, 8, 0, 1)
DG_DB_KERNEL(dg_sgemm_db128_tn, 16, 2, 8, 1, 0)
DG_DB_KERNEL(dg_sgemm_db128_tt, 16, 2, 8, 1, 1)

/* A convolution's forward pass as an implicit GEMM (the new path on GPUs):
 * y_img[k, ho*wo] = w[k, c*kh*kw] * col_img, the column buffer never written
 * (op(B) gathered from the image x_img = b + b_off + img * sb, dg_col_at);
 * the batch dimension runs over images; the epilogue adds the bias per row
 * (output channel) and the ReLU. The same slices and k order as the db
 * kernels on an im2col buffer, so the same result. */
#define DG_CONV_KERNEL(name, we, g, tk, tb, cv)                                                    \
    __kernel __attribute__((reqd_work_group_size(we, we, 1))) void name(DG_GEMM_PARAMS,            \
                                                                        const int8 geo)            \
        DG_DB_BODY(we, g, tk, 0, tb, cv, geo)
DG_CONV_KERNEL(dg_conv_db32, 8, 1, 16, 0, 1)
DG_CONV_KERNEL(dg_conv_db64, 16, 1, 16, 0, 1)
/* The backward pass's implicit GEMMs: dw_img[k, c*kh*kw] = dy_img[k, ho*wo] *
 * col_img^T (the per-image weight gradients, then summed as before), and
 * dx_img[c, h*w] = w^T-gathered * dy-gathered (the col2im sum inside the
 * product). */
DG_CONV_KERNEL(dg_convdw_db32, 8, 1, 16, 1, 1)
DG_CONV_KERNEL(dg_convdw_db64, 16, 1, 16, 1, 1)
DG_CONV_KERNEL(dg_convdx_db32, 8, 1, 16, 0, 2)
DG_CONV_KERNEL(dg_convdx_db64, 16, 1, 16, 0, 2)

/* ---- split-K (ocl_gemm_split.c) ---------------------------------------------- */

/* One k-slice of one product of a batch whose tiles leave compute units
 * idle: group dimension 2 is bi * slices + s, product bi's slice s, which
 * multiplies op(A_bi)[:, s*ks .. s*ks+ks) by op(B_bi)[s*ks .. s*ks+ks, :]
 * (the last slice shorter when ks does not divide k) with the db kernels'
 * tiles and writes the m x n partial product into w[bi * slices + s]
 * (row-major, ld n), alpha 1, no epilogue; dg_split_sum then adds the slices
 * up. */
#define DG_SPLIT_KERNEL(name, we, g, tk, ta, tb)                                                   \
    __kernel __attribute__((reqd_work_group_size(we, we, 1))) void name(                           \
        const int m, const int n, const int k, const int ks, const int slices,                     \
        __global const float *restrict a, const ulong a_off, const int lda, const ulong sa,        \
        __global const float *restrict b, const ulong b_off, const int ldb, const ulong sb,        \
        __global float *w)                                                                         \
    {                                                                                              \
        DG_DB_TILES(we, g, tk);                                                                    \
        const int z = (int)get_group_id(2), bi = z / slices, k0 = (z - bi * slices) * ks;          \
        const size_t ka = ta ? (size_t)k0 * lda : (size_t)k0,                                      \
                     kb = tb ? (size_t)k0 : (size_t)k0 * ldb;                                      \
        dg_db(we, g, tk, ta, tb, (__local float *)as4, (__local float *)bs4, m, n,                 \
              min(ks, k - k0), 1.0f, a + a_off + bi * sa + ka, lda, b + b_off + bi * sb + kb, ldb, \
              0.0f, w + (size_t)z * m * n, n, 0, w, w, 0, (int8)(0));                              \
    }
DG_SPLIT_KERNEL(dg_split_db32_nn, 8, 1, 16, 0, 0)
DG_SPLIT_KERNEL(dg_split_db32_nt, 8, 1, 16, 0, 1)
DG_SPLIT_KERNEL(dg_split_db32_tn, 8, 1, 16, 1, 0)
DG_SPLIT_KERNEL(dg_split_db32_tt, 8, 1, 16, 1, 1)
DG_SPLIT_KERNEL(dg_split_db64_nn, 16, 1, 16, 0, 0)
DG_SPLIT_KERNEL(dg_split_db64_nt, 16, 1, 16, 0, 1)
DG_SPLIT_KERNEL(dg_split_db64_tn, 16, 1, 16, 1, 0)
DG_SPLIT_KERNEL(dg_split_db64_tt, 16, 1, 16, 1, 1)

/* Split-K's reduction, one work-item per element of C_bi (group dimension 2
 * is bi): product bi's partial products w[bi * slices + s] summed in order
 * of s (so the result is the same run to run), then alpha, beta and the
 * fused epilogue exactly as the direct kernels apply them. */
__kernel void dg_split_sum(const int m, const int n, const int slices, __global const float *w,
                           const float alpha, const float beta, __global float *c,
                           const ulong c_off, const int ldc, const ulong sc,
                           __global const float *ep_b, const ulong ep_b_off,
                           __global const float *ep_m, const ulong ep_m_off, const int epi)
{
    const int col = (int)get_global_id(0), row = (int)get_global_id(1);
    const size_t bi = get_global_id(2);
    if (row >= m || col >= n)
        return;
    const size_t mn = (size_t)m * n, at = (size_t)row * n + col;
    __global const float *wp = w + bi * slices * mn + at;
    float s = wp[0];
    for (int i = 1; i < slices; i++)
        s += wp[(size_t)i * mn];
    __global float *cp = c + c_off + bi * sc + (size_t)row * ldc + col;
    const float x = alpha * s;
    const float v = beta == 0.0f ? x : x + beta * *cp;
    *cp = epi ? dg_epi(v, epi, ep_b + ep_b_off, ep_m + ep_m_off + bi * sc, row, col, ldc) : v;
}

/* ---- vector (CPU) ------------------------------------------------------------ */

#define VM 6  /* rows per work-item */
#define VN 16 /* columns per work-item (two float8) */

#define DG_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)

static inline void dg_vec(const int ta, const int tb, const int m, const int n, const int k,
                          const float alpha, __global const float *restrict a, const int lda,
                          __global const float *restrict b, const int ldb, const float beta,
                          __global float *c, const int ldc, DG_EPI_PARAMS)
{
    const int j = (int)get_global_id(0) * VN;
    const int i = (int)get_global_id(1) * VM;
    if (i >= m || j >= n)
        return;
    /* op(A)[row, p] = a[row * ars + p * aks]. */
    const size_t ars = ta ? 1 : (size_t)lda;
    const size_t aks = ta ? (size_t)lda : 1;

    /* Rows past m repeat row m-1: always in bounds, never stored. Named
     * variables, not arrays, so every accumulator stays in a register. */
#define DG_DECL(r)                                                                                 \
    __global const float *a##r = a + (size_t)min(i + r, m - 1) * ars;                              \
    float8 lo##r = (float8)(0.0f), hi##r = (float8)(0.0f);
    DG_ROWS(DG_DECL)
#undef DG_DECL

#define DG_FMA(r)                                                                                  \
    {                                                                                              \
        const float av = a##r[(size_t)p * aks];                                                    \
        lo##r += av * b0;                                                                          \
        hi##r += av * b1;                                                                          \
    }
    if (!tb && j + VN <= n) {
        __global const float *bp = b + j;
        for (int p = 0; p < k; p++, bp += ldb) {
            const float8 b0 = vload8(0, bp), b1 = vload8(1, bp);
            DG_ROWS(DG_FMA)
        }
    } else if (!tb) {
        __global const float *bp = b + j;
        float t[VN];
        for (int p = 0; p < k; p++, bp += ldb) {
            for (int q = 0; q < VN; q++)
                t[q] = j + q < n ? bp[q] : 0.0f;
            const float8 b0 = vload8(0, t), b1 = vload8(1, t);
            DG_ROWS(DG_FMA)
        }
    } else {
        /* op(B)[p, j+q] = b[(j+q) * ldb + p]: sixteen streams along k; columns
         * past n repeat column n-1 (never stored). */
        float t[VN];
        for (int p = 0; p < k; p++) {
            for (int q = 0; q < VN; q++)
                t[q] = b[(size_t)min(j + q, n - 1) * ldb + p];
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
        if (ncol == VN && !epi) {                                                                  \
            vstore8(beta == 0.0f ? v0 : v0 + beta * vload8(0, cr), 0, cr);                         \
            vstore8(beta == 0.0f ? v1 : v1 + beta * vload8(1, cr), 1, cr);                         \
        } else {                                                                                   \
            float t[VN];                                                                           \
            vstore8(v0, 0, t);                                                                     \
            vstore8(v1, 1, t);                                                                     \
            for (int q = 0; q < ncol; q++) {                                                       \
                const float y = beta == 0.0f ? t[q] : t[q] + beta * cr[q];                         \
                cr[q] = epi ? dg_epi(y, epi, eb, em, i + r, j + q, ldc) : y;                       \
            }                                                                                      \
        }                                                                                          \
    }
    DG_ROWS(DG_STORE)
#undef DG_STORE
}

#define DG_VEC_KERNEL(name, ta, tb)                                                                \
    __kernel void name(DG_GEMM_PARAMS)                                                             \
    {                                                                                              \
        const size_t bi = get_global_id(2);                                                        \
        dg_vec(ta, tb, m, n, k, alpha, a + a_off + bi * sa, lda, b + b_off + bi * sb, ldb, beta,   \
               c + c_off + bi * sc, ldc, DG_EPI_ARGS);                                             \
    }
DG_VEC_KERNEL(dg_sgemm_vec_nn, 0, 0)
DG_VEC_KERNEL(dg_sgemm_vec_nt, 0, 1)
DG_VEC_KERNEL(dg_sgemm_vec_tn, 1, 0)
DG_VEC_KERNEL(dg_sgemm_vec_tt, 1, 1)

/* t_i[p, q] = b_i[q, p] for q < rows, p < cols: B_i stored rows x cols (row
 * pitch ldb, batch stride sb) into t_i, cols x rows, packed (batch stride
 * rows * cols). On CPUs the vec kernel runs an op(B) = B^T product on this
 * copy: its untransposed path streams B's rows as float8, where the
 * transposed one gathers sixteen strided values per step. Work-item (q, p)
 * in 16 x 16 groups: a group reads a 16 x 16 block of B, row by row. */
__kernel void dg_transpose(__global const float *b, const ulong b_off, const int ldb,
                           const ulong sb, __global float *t, const int rows, const int cols)
{
    const int q = (int)get_global_id(0), p = (int)get_global_id(1);
    const size_t bi = get_global_id(2);
    if (q < rows && p < cols)
        t[bi * (size_t)rows * cols + (size_t)p * rows + q] =
            b[b_off + bi * sb + (size_t)q * ldb + p];
}

/* ---- naive fallback ---------------------------------------------------------- */

static inline void dg_naive(const int ta, const int tb, const int m, const int n, const int k,
                            const float alpha, __global const float *restrict a, const int lda,
                            __global const float *restrict b, const int ldb, const float beta,
                            __global float *c, const int ldc, DG_EPI_PARAMS)
{
    const int j = (int)get_global_id(0);
    const int i = (int)get_global_id(1);
    if (i >= m || j >= n)
        return;
    __global const float *ar = ta ? a + i : a + (size_t)i * lda;
    __global const float *bc = tb ? b + (size_t)j * ldb : b + j;
    const size_t aks = ta ? (size_t)lda : 1, bks = tb ? 1 : (size_t)ldb;
    float acc = 0.0f;
    for (int p = 0; p < k; p++)
        acc += ar[(size_t)p * aks] * bc[(size_t)p * bks];
    __global float *cp = c + (size_t)i * ldc + j;
    const float v = beta == 0.0f ? alpha * acc : alpha * acc + beta * *cp;
    *cp = epi ? dg_epi(v, epi, eb, em, i, j, ldc) : v;
}

#define DG_NAIVE_KERNEL(name, ta, tb)                                                              \
    __kernel void name(DG_GEMM_PARAMS)                                                             \
    {                                                                                              \
        const size_t bi = get_global_id(2);                                                        \
        dg_naive(ta, tb, m, n, k, alpha, a + a_off + bi * sa, lda, b + b_off + bi * sb, ldb, beta, \
                 c + c_off + bi * sc, ldc, DG_EPI_ARGS);                                           \
    }
DG_NAIVE_KERNEL(dg_sgemm_naive_nn, 0, 0)
DG_NAIVE_KERNEL(dg_sgemm_naive_nt, 0, 1)
DG_NAIVE_KERNEL(dg_sgemm_naive_tn, 1, 0)
DG_NAIVE_KERNEL(dg_sgemm_naive_tt, 1, 1)

/* ---- training ops ------------------------------------------------------------ */

#define RED_MAX 256 /* local size limit of the reduction kernels (a power of two) */

/* x[0..count) = v. */
__kernel void dg_fill(__global float *x, const ulong x_off, const ulong count, const float v)
{
    const size_t i = get_global_id(0);
    if (i < count)
        x[x_off + i] = v;
}

/* y[o, ch, i] += bias[ch]; total = outer * channels * inner. */
__kernel void dg_bias_add(__global float *y, const ulong y_off, __global const float *bias,
                          const ulong b_off, const int channels, const int inner, const int total)
{
    const int i = (int)get_global_id(0);
    if (i < total)
        y[y_off + i] += bias[b_off + (i / inner) % channels];
}

/* The sum of channel ch's values e0 .. e1 of dy viewed [outer, channels,
 * inner] (e = o * inner + i): each work-item a strided share, the shares
 * tree-added in red (local size a power of two <= RED_MAX); valid in every
 * work-item's return once all reached it. */
static inline float dg_channel_sum(__global const float *dy, __local float *red,
                                   const int channels, const int inner, const int ch,
                                   const uint e0, const uint e1)
{
    const uint lid = (uint)get_local_id(0), ls = (uint)get_local_size(0);
    float s = 0.0f;
    for (uint e = e0 + lid; e < e1; e += ls) {
        const uint o = e / (uint)inner, i = e - o * (uint)inner;
        s += dy[((size_t)o * channels + ch) * inner + i];
    }
    red[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint h = ls / 2; h > 0; h >>= 1) {
        if (lid < h)
            red[lid] += red[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return red[0];
}

/* One work-group per channel: db[ch] = the channel's sum (dg_channel_sum). */
__kernel void dg_bias_grad(__global const float *dy, const ulong dy_off, __global float *db,
                           const ulong db_off, const int outer, const int channels, const int inner)
{
    __local float red[RED_MAX];
    const int ch = (int)get_group_id(0);
    const float s = dg_channel_sum(dy + dy_off, red, channels, inner, ch, 0u,
                                   (uint)outer * (uint)inner);
    if (get_local_id(0) == 0)
        db[db_off + ch] = s;
}

/* A long bias gradient in two commands (the new path; then dg_sum_parts adds
 * the slices in order): work-group (s, ch) sums slice s of nparts of channel
 * ch's outer * inner values into part[s * channels + ch]. Many work-groups
 * where dg_bias_grad has one per channel (a convolution's 32 channels of a
 * million values each). */
__kernel void dg_bias_grad_part(__global const float *dy, const ulong dy_off,
                                __global float *part, const ulong part_off, const int outer,
                                const int channels, const int inner, const int nparts)
{
    __local float red[RED_MAX];
    const int sl = (int)get_group_id(0), ch = (int)get_group_id(1);
    const uint per = (uint)outer * (uint)inner;
    const uint chunk = (per + (uint)nparts - 1) / (uint)nparts;
    const uint e0 = (uint)sl * chunk, e1 = min(per, e0 + chunk);
    const float s = dg_channel_sum(dy + dy_off, red, channels, inner, ch, e0, e1);
    if (get_local_id(0) == 0)
        part[part_off + (size_t)sl * channels + ch] = s;
}

/* y = max(x, 0); x and y may be the same place. */
__kernel void dg_relu_fwd(__global const float *x, const ulong x_off, __global float *y,
                          const ulong y_off, const ulong count)
{
    const size_t i = get_global_id(0);
    if (i < count) {
        const float v = x[x_off + i];
        y[y_off + i] = v > 0.0f ? v : 0.0f;
    }
}

/* dx = y > 0 ? dy : 0; dx may alias dy. */
__kernel void dg_relu_bwd(__global const float *y, const ulong y_off, __global const float *dy,
                          const ulong dy_off, __global float *dx, const ulong dx_off,
                          const ulong count)
{
    const size_t i = get_global_id(0);
    if (i < count) {
        const float g = dy[dy_off + i];
        dx[dx_off + i] = y[y_off + i] > 0.0f ? g : 0.0f;
    }
}

/* One work-item per output of [planes, ho, wo]: the window max and the index
 * iy*w+ix of its first maximum in the input plane. total = planes * ho * wo. */
__kernel void dg_maxpool_fwd(__global const float *x, const ulong x_off, __global float *y,
                             const ulong y_off, __global int *am, const ulong am_off, const int h,
                             const int w, const int ks, const int st, const int ho, const int wo,
                             const int total)
{
    const int gid = (int)get_global_id(0);
    if (gid >= total)
        return;
    const int plane = gid / (ho * wo), r = gid - plane * (ho * wo);
    const int oy = r / wo, ox = r - oy * wo;
    __global const float *xp = x + x_off + (size_t)plane * h * w;
    const int iy0 = oy * st, ix0 = ox * st;
    int best_i = iy0 * w + ix0;
    float best = xp[best_i];
    for (int ky = 0; ky < ks; ky++)
        for (int kx = 0; kx < ks; kx++) {
            const int idx = (iy0 + ky) * w + ix0 + kx;
            const float v = xp[idx];
            if (v > best) {
                best = v;
                best_i = idx;
            }
        }
    y[y_off + gid] = best;
    am[am_off + gid] = best_i;
}

/* Gather form of dx = 0; dx[plane][argmax] += dy: one work-item per input
 * element sums, in output order, the dy of the windows that contain it and
 * whose argmax points at it. total = planes * h * w. */
__kernel void dg_maxpool_bwd(__global const float *dy, const ulong dy_off, __global const int *am,
                             const ulong am_off, __global float *dx, const ulong dx_off,
                             const int h, const int w, const int ks, const int st, const int ho,
                             const int wo, const int total)
{
    const int gid = (int)get_global_id(0);
    if (gid >= total)
        return;
    const int plane = gid / (h * w), r = gid - plane * (h * w);
    const int iy = r / w, ix = r - iy * w;
    const int oy0 = iy >= ks ? (iy - ks) / st + 1 : 0, oy1 = min(iy / st, ho - 1);
    const int ox0 = ix >= ks ? (ix - ks) / st + 1 : 0, ox1 = min(ix / st, wo - 1);
    const size_t base = (size_t)plane * ho * wo;
    float s = 0.0f;
    for (int oy = oy0; oy <= oy1; oy++)
        for (int ox = ox0; ox <= ox1; ox++) {
            const size_t o = base + (size_t)oy * wo + ox;
            if (am[am_off + o] == r)
                s += dy[dy_off + o];
        }
    dx[dx_off + gid] = s;
}

/* Column buffer of nimg images: col[(ci*kh + ky)*kw + kx][img*ho*wo + oy*wo + ox]
 * = x[img, ci, oy*st - pad + ky, ox*st - pad + kx] (0 in the padding). One
 * work-item per column entry, consecutive work-items along a column row
 * (coalesced stores); total = c*kh*kw * nimg*ho*wo. */
__kernel void dg_im2col(__global const float *x, const ulong x_off, __global float *col,
                        const ulong col_off, const int c, const int h, const int w, const int kh,
                        const int kw, const int st, const int pad, const int ho, const int wo,
                        const int nimg)
{
    const int hw = ho * wo, ncol = nimg * hw;
    const int gid = (int)get_global_id(0);
    if (gid >= c * kh * kw * ncol)
        return;
    const int row = gid / ncol, q = gid - row * ncol;
    const int img = q / hw, pos = q - img * hw;
    const int oy = pos / wo, ox = pos - oy * wo;
    const int ci = row / (kh * kw), rr = row - ci * (kh * kw);
    const int ky = rr / kw, kx = rr - ky * kw;
    const int iy = oy * st - pad + ky, ix = ox * st - pad + kx;
    float v = 0.0f;
    if (iy >= 0 && iy < h && ix >= 0 && ix < w)
        v = x[x_off + ((size_t)(img * c + ci) * h + iy) * w + ix];
    col[col_off + gid] = v;
}

/* Gather form of col2im: one work-item per element of dx[nimg, c, h, w] sums
 * the column entries that im2col copied from it (no atomics). */
__kernel void dg_col2im(__global const float *col, const ulong col_off, __global float *dx,
                        const ulong dx_off, const int c, const int h, const int w, const int kh,
                        const int kw, const int st, const int pad, const int ho, const int wo,
                        const int nimg)
{
    const int gid = (int)get_global_id(0);
    const int total = nimg * c * h * w;
    if (gid >= total)
        return;
    const int ix = gid % w, t1 = gid / w;
    const int iy = t1 % h, t2 = t1 / h;
    const int ci = t2 % c, img = t2 / c;
    const size_t ncol = (size_t)nimg * ho * wo;
    const size_t cbase = col_off + (size_t)img * ho * wo;
    float s = 0.0f;
    for (int ky = 0; ky < kh; ky++) {
        const int ty = iy + pad - ky;
        if (ty < 0 || ty % st)
            continue;
        const int oy = ty / st;
        if (oy >= ho)
            continue;
        for (int kx = 0; kx < kw; kx++) {
            const int tx = ix + pad - kx;
            if (tx < 0 || tx % st)
                continue;
            const int ox = tx / st;
            if (ox >= wo)
                continue;
            s += col[cbase + (size_t)((ci * kh + ky) * kw + kx) * ncol + (size_t)oy * wo + ox];
        }
    }
    dx[dx_off + gid] = s;
}

/* dst[i] = (accumulate ? dst[i] : 0) + sum over p of part[p * count + i], in
 * order of p: the per-image weight gradients of a convolution chunk. */
__kernel void dg_sum_parts(__global const float *part, const ulong part_off, __global float *dst,
                           const ulong dst_off, const int count, const int nparts,
                           const int accumulate)
{
    const int i = (int)get_global_id(0);
    if (i >= count)
        return;
    float s = accumulate ? dst[dst_off + i] : 0.0f;
    for (int p = 0; p < nparts; p++)
        s += part[part_off + (size_t)p * count + i];
    dst[dst_off + i] = s;
}

/* Softmax cross-entropy of row r: its dlogits row, *loss and *correct. A
 * label outside [0, classes) gives a zero dlogits row, loss 0 and correct 0.
 * dlogits may be the same place as logits (each element is read before it is
 * written). */
static inline void dg_xent_row(__global const float *logits, __global const int *labels,
                               __global float *dlogits, const int r, const int n,
                               const int classes, float *loss_out, float *correct)
{
    __global const float *x = logits + (size_t)r * classes;
    __global float *d = dlogits + (size_t)r * classes;
    const int lab = labels[r];
    *loss_out = 0.0f;
    *correct = 0.0f;
    if (lab < 0 || lab >= classes) {
        for (int j = 0; j < classes; j++)
            d[j] = 0.0f;
        return;
    }
    float mx = x[0];
    int am = 0;
    for (int j = 1; j < classes; j++) {
        const float v = x[j];
        if (v > mx) {
            mx = v;
            am = j;
        }
    }
    float sum = 0.0f;
    for (int j = 0; j < classes; j++)
        sum += exp(x[j] - mx);
    const float loss = log(sum) - (x[lab] - mx);
    const float fn = (float)n;
    for (int j = 0; j < classes; j++) {
        const float p = exp(x[j] - mx) / sum;
        d[j] = (j == lab ? p - 1.0f : p) / fn;
    }
    *loss_out = loss;
    *correct = am == lab ? 1.0f : 0.0f;
}

/* One work-item per row: the row's loss and correctness into scratch[r] and
 * scratch[n + r] (then dg_xent_reduce). */
__kernel void dg_xent_rows(__global const float *logits, const ulong l_off,
                           __global const int *labels, const ulong lab_off, __global float *dlogits,
                           const ulong d_off, __global float *scratch, const int n,
                           const int classes)
{
    const int r = (int)get_global_id(0);
    if (r >= n)
        return;
    float loss, correct;
    dg_xent_row(logits + l_off, labels + lab_off, dlogits + d_off, r, n, classes, &loss, &correct);
    scratch[r] = loss;
    scratch[n + r] = correct;
}

/* The tree of dg_xent_reduce over rl and rc (local size ls, a power of two),
 * then acc[0] += loss sum / n, acc[1] += correct rows. */
static inline void dg_xent_tree(__local float *rl, __local float *rc, const int lid, const int ls,
                                const int n, __global float *acc)
{
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = ls / 2; h > 0; h >>= 1) {
        if (lid < h) {
            rl[lid] += rl[lid + h];
            rc[lid] += rc[lid + h];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        acc[0] += rl[0] / (float)n;
        acc[1] += rc[0];
    }
}

/* One work-group: acc[0] += sum of the row losses / n, acc[1] += correct rows.
 * The local size is a power of two <= RED_MAX. */
__kernel void dg_xent_reduce(__global const float *scratch, const int n, __global float *acc,
                             const ulong acc_off)
{
    __local float rl[RED_MAX], rc[RED_MAX];
    const int lid = (int)get_local_id(0), ls = (int)get_local_size(0);
    float l = 0.0f, cn = 0.0f;
    for (int r = lid; r < n; r += ls) {
        l += scratch[r];
        cn += scratch[n + r];
    }
    rl[lid] = l;
    rc[lid] = cn;
    dg_xent_tree(rl, rc, lid, ls, n, acc + acc_off);
}

/* dg_xent_rows and dg_xent_reduce as one command (one work-group, local size
 * a power of two <= RED_MAX): work-item lid takes rows lid, lid + ls, ... and
 * sums their losses in that order, then the same tree, so the sums equal the
 * two kernels' exactly. */
__kernel void dg_xent_one(__global const float *logits, const ulong l_off,
                          __global const int *labels, const ulong lab_off, __global float *dlogits,
                          const ulong d_off, const int n, const int classes, __global float *acc,
                          const ulong acc_off)
{
    __local float rl[RED_MAX], rc[RED_MAX];
    const int lid = (int)get_local_id(0), ls = (int)get_local_size(0);
    float l = 0.0f, cn = 0.0f;
    for (int r = lid; r < n; r += ls) {
        float loss, correct;
        dg_xent_row(logits + l_off, labels + lab_off, dlogits + d_off, r, n, classes, &loss,
                    &correct);
        l += loss;
        cn += correct;
    }
    rl[lid] = l;
    rc[lid] = cn;
    dg_xent_tree(rl, rc, lid, ls, n, acc + acc_off);
}

/* PyTorch SGD: d = g + weight_decay * w; mom = momentum * mom + d; w -= lr * mom
 * (mom untouched and w -= lr * d when momentum == 0). */
__kernel void dg_sgd(__global float *w, const ulong w_off, __global const float *g,
                     const ulong g_off, __global float *mom, const ulong m_off, const ulong count,
                     const float lr, const float momentum, const float wd)
{
    const size_t i = get_global_id(0);
    if (i >= count)
        return;
    const float wv = w[w_off + i];
    float d = g[g_off + i];
    if (wd != 0.0f)
        d += wd * wv;
    if (momentum != 0.0f) {
        d += momentum * mom[m_off + i];
        mom[m_off + i] = d;
    }
    w[w_off + i] = wv - lr * d;
}

/* An empty command whose event carries profiling times (for devices whose
 * markers do not). */
__kernel void dg_mark(void)
{
}
