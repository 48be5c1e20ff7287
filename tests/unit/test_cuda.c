/* CUDA plug-in: loads $DEVGATE_PLUGIN_DIR/libdevgate-cuda.so the way devgate
 * does; without a GPU it checks the failure reason and skips, with one it checks
 * device facts, copies, fp32 GEMM accuracy in all four transposes, device OOM,
 * every training op against double references, events and graph capture, and
 * prints timings: a 4096^3 sgemm, a cifar-sized conv layer, an MLP step eager
 * against captured. Convolutions are then checked, captured and timed (the
 * cifar preset's four layers) on each path, im2col and cuDNN, each chosen
 * with DEVGATE_CUDA_CONV for a fresh context. */
#include <dlfcn.h>
#include <float.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "check.h"

static const dg_backend_iface *bi;
static void *cx;

/* Deterministic floats in [-1, 1). */
static float rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(*s >> 40) / (double)(1ULL << 23) - 1.0);
}

/* Seconds on the monotonic clock. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* qsort order for doubles. */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Checks one row-major GEMM C = alpha op(A) op(B) + beta C (leading dims
 * padded by pad, operands at offsets in one buffer); ta/tb store A as k x m
 * and B as n x k. */
static void gemm_case(bool ta, bool tb, int m, int n, int k, int pad, float alpha, float beta)
{
    int ra = ta ? k : m, ca = ta ? m : k, rb = tb ? n : k, cb = tb ? k : n;
    int lda = ca + pad, ldb = cb + pad, ldc = n + pad;
    size_t na = (size_t)ra * lda, nb = (size_t)rb * ldb, nc = (size_t)m * ldc;
    /* A, B and C share one buffer at float-aligned but otherwise odd offsets. */
    size_t a_off = 4 * sizeof(float), b_off = a_off + (na + 3) * sizeof(float);
    size_t c_off = b_off + (nb + 5) * sizeof(float), total = c_off + nc * sizeof(float);
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c0 = malloc(nc * sizeof *c0);
    float *c = malloc(nc * sizeof *c);
    double *ref = calloc((size_t)m * n, sizeof *ref), *mag = calloc((size_t)m * n, sizeof *mag);
    uint64_t seed =
        0x9e3779b97f4a7c15ULL ^ (uint64_t)(m * 1000003 + n * 1009 + k + ta * 7 + tb * 3);
    void *buf = NULL;
    int bad = 0;
    double worst = 0.0;

    if (!a || !b || !c0 || !c || !ref || !mag) {
        CHECK_MSG(0, "host allocation for %dx%dx%d", m, n, k);
        goto out;
    }
    for (size_t i = 0; i < na; i++)
        a[i] = rnd(&seed);
    for (size_t i = 0; i < nb; i++)
        b[i] = rnd(&seed);
    for (size_t i = 0; i < nc; i++)
        c0[i] = rnd(&seed);

    CHECK(bi->buf_alloc(cx, total, &buf) == DG_OK);
    if (!buf)
        goto out;
    CHECK(bi->upload(cx, buf, a_off, a, na * sizeof *a) == DG_OK);
    CHECK(bi->upload(cx, buf, b_off, b, nb * sizeof *b) == DG_OK);
    CHECK(bi->upload(cx, buf, c_off, c0, nc * sizeof *c0) == DG_OK);
    dg_status st = bi->gemm(cx, ta, tb, m, n, k, alpha, (dg_ref){buf, a_off}, lda,
                            (dg_ref){buf, b_off}, ldb, beta, (dg_ref){buf, c_off}, ldc);
    CHECK_MSG(st == DG_OK, "gemm %c%c %dx%dx%d: %s", ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k,
              bi->last_error(cx));
    CHECK(bi->synchronize(cx) == DG_OK);
    CHECK(bi->download(cx, buf, c_off, c, nc * sizeof *c) == DG_OK);

    /* Naive reference in double: ref = op(A)*op(B) and mag = |op(A)|*|op(B)|. */
    for (int i = 0; i < m; i++)
        for (int p = 0; p < k; p++) {
            double av = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
            double *r = ref + (size_t)i * n, *g = mag + (size_t)i * n;
            for (int j = 0; j < n; j++) {
                double bv = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                r[j] += av * bv;
                g[j] += fabs(av * bv);
            }
        }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            size_t ic = (size_t)i * ldc + j, ir = (size_t)i * n + j;
            double want = alpha * ref[ir] + beta * (double)c0[ic];
            double scale = fabs(alpha) * mag[ir] + fabs(beta) * fabs((double)c0[ic]);
            double tol = 2.0 * (k + 1) * FLT_EPSILON * scale + FLT_MIN;
            double err = fabs((double)c[ic] - want);
            if (!(err <= tol)) {
                if (bad++ < 3)
                    fprintf(stderr, "gemm %dx%dx%d: C[%d,%d] = %.9g, want %.9g (tol %.3g)\n", m, n,
                            k, i, j, c[ic], want, tol);
            } else if (scale > 0 && err / scale > worst) {
                worst = err / scale;
            }
        }
    /* The padding columns of C must be untouched. */
    for (int i = 0; i < m; i++)
        for (int j = n; j < ldc; j++)
            if (c[(size_t)i * ldc + j] != c0[(size_t)i * ldc + j])
                bad++;
    CHECK_MSG(bad == 0, "gemm %c%c %dx%dx%d pad %d: %d elements out of tolerance", ta ? 'T' : 'N',
              tb ? 'T' : 'N', m, n, k, pad, bad);
    printf("gemm %c%c %dx%dx%d pad %d: worst |err|/sum|a||b| = %.3g (k*eps = %.3g)\n",
           ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, pad, worst, k * FLT_EPSILON);
out:
    if (buf)
        bi->buf_free(cx, buf);
    free(a);
    free(b);
    free(c0);
    free(c);
    free(ref);
    free(mag);
}

/* A product that is exact in fp32 but not in TF32: catches tensor-core rounding. */
static void fp32_not_tf32(void)
{
    enum { N = 256 };
    float *a = malloc(sizeof(float) * N * N), *b = malloc(sizeof(float) * N * N);
    float *c = malloc(sizeof(float) * N * N);
    void *da = NULL, *db = NULL, *dc = NULL;
    int bad = 0;

    if (!a || !b || !c) {
        CHECK_MSG(0, "host allocation");
        goto out;
    }
    /* 1 + 2^-13 needs 13 mantissa bits (TF32 keeps 10); every partial sum of
     * 256 of them fits in fp32's 24, so the exact answer is 256 + 2^-5. */
    for (int i = 0; i < N * N; i++) {
        a[i] = 1.0f + 0x1p-13f;
        b[i] = 1.0f;
    }
    CHECK(bi->buf_alloc(cx, sizeof(float) * N * N, &da) == DG_OK);
    CHECK(bi->buf_alloc(cx, sizeof(float) * N * N, &db) == DG_OK);
    CHECK(bi->buf_alloc(cx, sizeof(float) * N * N, &dc) == DG_OK);
    if (!da || !db || !dc)
        goto out;
    CHECK(bi->upload(cx, da, 0, a, sizeof(float) * N * N) == DG_OK);
    CHECK(bi->upload(cx, db, 0, b, sizeof(float) * N * N) == DG_OK);
    CHECK(bi->gemm(cx, false, false, N, N, N, 1.0f, (dg_ref){da, 0}, N, (dg_ref){db, 0}, N, 0.0f,
                   (dg_ref){dc, 0}, N) == DG_OK);
    CHECK(bi->synchronize(cx) == DG_OK);
    CHECK(bi->download(cx, dc, 0, c, sizeof(float) * N * N) == DG_OK);
    for (int i = 0; i < N * N; i++)
        if (c[i] != 256.0f + 0x1p-5f)
            bad++;
    CHECK_MSG(bad == 0, "%d of %d elements not exact (C[0] = %.9g): TF32 or reduced precision?",
              bad, N * N, c[0]);
out:
    bi->buf_free(cx, da);
    bi->buf_free(cx, db);
    bi->buf_free(cx, dc);
    free(a);
    free(b);
    free(c);
}

/* Uploads two pieces at byte offsets and reads them back whole and in part. */
static void copies(void)
{
    unsigned char src1[300], src2[517], back[1024];
    void *buf = NULL;

    for (size_t i = 0; i < sizeof src1; i++)
        src1[i] = (unsigned char)(i * 7 + 1);
    for (size_t i = 0; i < sizeof src2; i++)
        src2[i] = (unsigned char)(i * 13 + 5);
    CHECK(bi->buf_alloc(cx, 4096, &buf) == DG_OK);
    if (!buf)
        return;
    CHECK(bi->upload(cx, buf, 3, src1, sizeof src1) == DG_OK);
    CHECK(bi->upload(cx, buf, 3 + sizeof src1, src2, sizeof src2) == DG_OK);
    memset(back, 0, sizeof back);
    CHECK(bi->download(cx, buf, 3, back, sizeof src1 + sizeof src2) == DG_OK);
    CHECK(memcmp(back, src1, sizeof src1) == 0);
    CHECK(memcmp(back + sizeof src1, src2, sizeof src2) == 0);
    memset(back, 0, sizeof back);
    CHECK(bi->download(cx, buf, 3 + sizeof src1 + 100, back, 50) == DG_OK);
    CHECK(memcmp(back, src2 + 100, 50) == 0);
    CHECK(bi->upload(cx, buf, 0, src1, 0) == DG_OK);
    CHECK(bi->upload(cx, buf, 0, NULL, 8) == DG_ERR_USAGE);
    CHECK(bi->upload(cx, NULL, 0, src1, 8) == DG_ERR_USAGE);
    CHECK(bi->download(cx, buf, 0, NULL, 8) == DG_ERR_USAGE);
    CHECK(bi->last_error(cx)[0] != '\0');
    bi->buf_free(cx, buf);
}

/* Bad GEMM arguments are refused before they reach cuBLAS. */
static void gemm_usage(void)
{
    void *buf = NULL;

    CHECK(bi->buf_alloc(cx, 1024, &buf) == DG_OK);
    if (!buf)
        return;
    CHECK(bi->gemm(cx, false, false, 2, 2, 2, 1.0f, (dg_ref){NULL, 0}, 2, (dg_ref){buf, 0}, 2, 0.0f,
                   (dg_ref){buf, 0}, 2) == DG_ERR_USAGE);
    CHECK(bi->gemm(cx, false, false, 2, 2, 2, 1.0f, (dg_ref){buf, 0}, 1, (dg_ref){buf, 0}, 2, 0.0f,
                   (dg_ref){buf, 0}, 2) == DG_ERR_USAGE);
    CHECK(bi->gemm(cx, false, false, 2, 2, 2, 1.0f, (dg_ref){buf, 2}, 2, (dg_ref){buf, 0}, 2, 0.0f,
                   (dg_ref){buf, 0}, 2) == DG_ERR_USAGE);
    CHECK(bi->gemm(cx, false, false, -1, 2, 2, 1.0f, (dg_ref){buf, 0}, 2, (dg_ref){buf, 0}, 2, 0.0f,
                   (dg_ref){buf, 0}, 2) == DG_ERR_USAGE);
    CHECK(strstr(bi->last_error(cx), "gemm") != NULL);
    CHECK(bi->synchronize(cx) == DG_OK);
    bi->buf_free(cx, buf);
}

/* 4 TiB is refused as device OOM, and the device stays usable. */
static void oom(void)
{
    void *big = (void *)1, *small = NULL;
    unsigned char x[64], y[64];

    dg_status st = bi->buf_alloc(cx, (size_t)4 << 40, &big);
    CHECK_MSG(st == DG_ERR_DEVICE_OOM, "4 TiB alloc: %s (%d)", bi->last_error(cx), (int)st);
    CHECK(big == NULL);
    CHECK_MSG(strstr(bi->last_error(cx), "4398046511104") != NULL, "%s", bi->last_error(cx));
    if (st == DG_OK)
        bi->buf_free(cx, big);
    CHECK(bi->buf_alloc(cx, 1 << 20, &small) == DG_OK);
    if (!small)
        return;
    for (size_t i = 0; i < sizeof x; i++)
        x[i] = (unsigned char)(255 - i);
    CHECK(bi->upload(cx, small, 4096, x, sizeof x) == DG_OK);
    CHECK(bi->download(cx, small, 4096, y, sizeof y) == DG_OK);
    CHECK(memcmp(x, y, sizeof x) == 0);
    bi->buf_free(cx, small);
}

/* Median GFLOP/s of ten 4096^3 sgemms, each timed with its synchronize. */
static void perf(void)
{
    enum { N = 4096, REPS = 10 };
    size_t bytes = sizeof(float) * N * N;
    void *da = NULL, *db = NULL, *dc = NULL;
    float *h = malloc(bytes);
    uint64_t seed = 42;
    double t[REPS];
    bool ok = true;

    if (!h) {
        CHECK_MSG(0, "host allocation");
        return;
    }
    for (size_t i = 0; i < (size_t)N * N; i++)
        h[i] = rnd(&seed);
    CHECK(bi->buf_alloc(cx, bytes, &da) == DG_OK);
    CHECK(bi->buf_alloc(cx, bytes, &db) == DG_OK);
    CHECK(bi->buf_alloc(cx, bytes, &dc) == DG_OK);
    if (!da || !db || !dc)
        goto out;
    CHECK(bi->upload(cx, da, 0, h, bytes) == DG_OK);
    CHECK(bi->upload(cx, db, 0, h, bytes) == DG_OK);
    for (int r = 0; r < 3; r++)
        ok &= bi->gemm(cx, false, false, N, N, N, 1.0f, (dg_ref){da, 0}, N, (dg_ref){db, 0}, N,
                       0.0f, (dg_ref){dc, 0}, N) == DG_OK;
    ok &= bi->synchronize(cx) == DG_OK;
    for (int r = 0; r < REPS; r++) {
        double t0 = now_s();
        ok &= bi->gemm(cx, false, false, N, N, N, 1.0f, (dg_ref){da, 0}, N, (dg_ref){db, 0}, N,
                       0.0f, (dg_ref){dc, 0}, N) == DG_OK;
        ok &= bi->synchronize(cx) == DG_OK;
        t[r] = now_s() - t0;
    }
    CHECK_MSG(ok, "timed sgemm: %s", bi->last_error(cx));
    qsort(t, REPS, sizeof t[0], cmp_double);
    double med = 0.5 * (t[REPS / 2 - 1] + t[REPS / 2]);
    printf("sgemm %d^3: %.1f GFLOP/s (median of %d, %.3f ms; min %.3f ms, max %.3f ms)\n", N,
           2.0 * N * N * (double)N / med * 1e-9, REPS, med * 1e3, t[0] * 1e3, t[REPS - 1] * 1e3);
out:
    bi->buf_free(cx, da);
    bi->buf_free(cx, db);
    bi->buf_free(cx, dc);
    free(h);
}

/* ---- training ops against double references ------------------------------------ */

/* A device buffer holding n floats (or ints) copied from host h; NULL on failure. */
static void *to_dev(const void *h, size_t bytes)
{
    void *buf = NULL;
    CHECK(bi->buf_alloc(cx, bytes ? bytes : 4, &buf) == DG_OK);
    if (buf && bytes)
        CHECK(bi->upload(cx, buf, 0, h, bytes) == DG_OK);
    return buf;
}

/* Synchronizes, then copies bytes of buf back to h. */
static void from_dev(void *buf, void *h, size_t bytes)
{
    CHECK_MSG(bi->synchronize(cx) == DG_OK, "synchronize: %s", bi->last_error(cx));
    if (buf)
        CHECK(bi->download(cx, buf, 0, h, bytes) == DG_OK);
}

static dg_ref R(void *buf)
{
    return (dg_ref){buf, 0};
}

static float *frnd(size_t n, uint64_t seed)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; p && i < n; i++)
        p[i] = rnd(&seed);
    return p;
}

/* got vs want: |got - want| <= atol + rtol * scale (scale[i], or |want| when
 * scale is NULL); prints the first misses and the worst ratio. */
static void cmp(const char *what, const float *got, const double *want, const double *scale,
                size_t n, double atol, double rtol)
{
    int bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double s = scale ? scale[i] : fabs(want[i]);
        double tol = atol + rtol * s, err = fabs((double)got[i] - want[i]);
        if (!(err <= tol)) {
            if (bad++ < 3)
                fprintf(stderr, "%s[%zu] = %.9g, want %.9g (tol %.3g)\n", what, i, got[i], want[i],
                        tol);
        } else if (tol > 0 && err / tol > worst) {
            worst = err / tol;
        }
    }
    CHECK_MSG(bad == 0, "%s: %d of %zu out of tolerance", what, bad, n);
}

static void t_fill(void)
{
    enum { N = 1001 };
    float h[N + 8], g[N + 8];
    void *b = NULL;
    for (int i = 0; i < N + 8; i++)
        h[i] = (float)i;
    b = to_dev(h, sizeof h);
    if (!b)
        return;
    CHECK(bi->fill(cx, (dg_ref){b, 12}, N, -2.5f) == DG_OK);
    from_dev(b, g, sizeof g);
    int bad = 0;
    for (int i = 0; i < N + 8; i++)
        bad += g[i] != (i >= 3 && i < 3 + N ? -2.5f : (float)i);
    CHECK_MSG(bad == 0, "fill: %d wrong", bad);
    /* Refs are checked: past the end, misaligned, absent. */
    CHECK(bi->fill(cx, (dg_ref){b, 12}, N + 6, 0.0f) == DG_ERR_USAGE);
    CHECK(strstr(bi->last_error(cx), "fill") != NULL);
    CHECK(bi->fill(cx, (dg_ref){b, 2}, 4, 0.0f) == DG_ERR_USAGE);
    CHECK(bi->fill(cx, (dg_ref){NULL, 0}, 4, 0.0f) == DG_ERR_USAGE);
    CHECK(bi->fill(cx, (dg_ref){b, sizeof h}, 0, 0.0f) == DG_OK);
    CHECK(bi->fill(cx, (dg_ref){b, sizeof h + 4}, 0, 0.0f) == DG_ERR_USAGE);
    bi->buf_free(cx, b);
}

static void t_bias(int outer, int channels, int inner)
{
    size_t n = (size_t)outer * channels * inner;
    float *y = frnd(n, 11 + n), *bias = frnd(channels, 12), *got = malloc(n * sizeof *got);
    float *gdb = malloc(channels * sizeof *gdb);
    double *want = malloc(n * sizeof *want), *db = calloc(channels, sizeof *db);
    double *mag = calloc(channels, sizeof *mag);
    void *dy = to_dev(y, n * 4), *db_d = to_dev(bias, channels * 4);
    char what[96];

    for (int o = 0; o < outer; o++)
        for (int c = 0; c < channels; c++)
            for (int i = 0; i < inner; i++) {
                size_t e = ((size_t)o * channels + c) * inner + i;
                want[e] = (double)y[e] + bias[c];
                db[c] += y[e];
                mag[c] += fabs(y[e]);
            }
    CHECK(bi->bias_add(cx, R(dy), R(db_d), outer, channels, inner) == DG_OK);
    from_dev(dy, got, n * 4);
    snprintf(what, sizeof what, "bias_add %dx%dx%d", outer, channels, inner);
    cmp(what, got, want, NULL, n, 0.0, FLT_EPSILON);
    /* bias_grad of the original y. */
    CHECK(bi->upload(cx, dy, 0, y, n * 4) == DG_OK);
    CHECK(bi->fill(cx, R(db_d), channels, NAN) == DG_OK);
    CHECK(bi->bias_grad(cx, R(dy), R(db_d), outer, channels, inner) == DG_OK);
    from_dev(db_d, gdb, channels * 4);
    snprintf(what, sizeof what, "bias_grad %dx%dx%d", outer, channels, inner);
    cmp(what, gdb, db, mag, channels, 0.0, 2 * FLT_EPSILON);
    CHECK(bi->bias_grad(cx, R(dy), R(db_d), outer, channels + 1, inner) == DG_ERR_USAGE);
    bi->buf_free(cx, dy);
    bi->buf_free(cx, db_d);
    free(y), free(bias), free(got), free(gdb), free(want), free(db), free(mag);
}

static void t_relu(void)
{
    enum { N = 1037 };
    float *x = frnd(N, 21), *dy = frnd(N, 22), got[N];
    double want[N], wdx[N];
    void *dx_d = to_dev(x, sizeof got), *dy_d = to_dev(dy, sizeof got), *y_d = NULL;
    CHECK(bi->buf_alloc(cx, sizeof got, &y_d) == DG_OK);
    x[5] = 0.0f;
    x[6] = -0.0f;
    CHECK(bi->upload(cx, dx_d, 0, x, sizeof got) == DG_OK);
    for (int i = 0; i < N; i++) {
        want[i] = x[i] > 0 ? x[i] : 0.0;
        wdx[i] = x[i] > 0 ? dy[i] : 0.0;
    }
    CHECK(bi->relu_fwd(cx, R(dx_d), R(y_d), N) == DG_OK);
    from_dev(y_d, got, sizeof got);
    cmp("relu_fwd", got, want, NULL, N, 0.0, 0.0);
    CHECK(bi->relu_fwd(cx, R(dx_d), R(dx_d), N) == DG_OK); /* in place */
    from_dev(dx_d, got, sizeof got);
    cmp("relu_fwd in place", got, want, NULL, N, 0.0, 0.0);
    CHECK(bi->relu_bwd(cx, R(y_d), R(dy_d), R(dy_d), N) == DG_OK); /* dx aliases dy */
    from_dev(dy_d, got, sizeof got);
    cmp("relu_bwd", got, wdx, NULL, N, 0.0, 0.0);
    CHECK(bi->relu_bwd(cx, R(y_d), R(dy_d), R(dy_d), N + 1) == DG_ERR_USAGE);
    bi->buf_free(cx, dx_d);
    bi->buf_free(cx, dy_d);
    bi->buf_free(cx, y_d);
    free(x), free(dy);
}

static void t_maxpool(int n, int c, int h, int w, int k, int s, bool ties)
{
    dg_pool_shape ps = {n, c, h, w, k, s, (h - k) / s + 1, (w - k) / s + 1};
    size_t nin = (size_t)n * c * h * w, nout = (size_t)n * c * ps.ho * ps.wo;
    float *x = frnd(nin, 31 + nin), *dy = frnd(nout, 32), *gy = malloc(nout * 4);
    float *gdx = malloc(nin * 4);
    int32_t *am = malloc(nout * 4), *gam = malloc(nout * 4);
    double *wy = malloc(nout * 8), *wdx = calloc(nin, 8), *mag = calloc(nin, 8);
    char what[96];
    if (ties)
        for (size_t i = 0; i < nin; i++)
            x[i] = (float)((i * 7) % 3); /* many equal maxima */
    void *x_d = to_dev(x, nin * 4), *dy_d = to_dev(dy, nout * 4), *y_d = NULL, *am_d = NULL;
    void *dx_d = NULL;
    CHECK(bi->buf_alloc(cx, nout * 4, &y_d) == DG_OK);
    CHECK(bi->buf_alloc(cx, nout * 4, &am_d) == DG_OK);
    CHECK(bi->buf_alloc(cx, nin * 4, &dx_d) == DG_OK);
    for (int pl = 0; pl < n * c; pl++)
        for (int oy = 0; oy < ps.ho; oy++)
            for (int ox = 0; ox < ps.wo; ox++) {
                const float *xp = x + (size_t)pl * h * w;
                int best = oy * s * w + ox * s;
                for (int ky = 0; ky < k; ky++)
                    for (int kx = 0; kx < k; kx++) {
                        int j = (oy * s + ky) * w + ox * s + kx;
                        if (xp[j] > xp[best])
                            best = j;
                    }
                size_t o = ((size_t)pl * ps.ho + oy) * ps.wo + ox;
                wy[o] = xp[best];
                am[o] = best;
                wdx[(size_t)pl * h * w + best] += dy[o];
                mag[(size_t)pl * h * w + best] += fabs(dy[o]);
            }
    CHECK(bi->maxpool_fwd(cx, &ps, R(x_d), R(y_d), R(am_d)) == DG_OK);
    from_dev(y_d, gy, nout * 4);
    from_dev(am_d, gam, nout * 4);
    snprintf(what, sizeof what, "maxpool_fwd n%d c%d %dx%d k%d s%d%s", n, c, h, w, k, s,
             ties ? " ties" : "");
    cmp(what, gy, wy, NULL, nout, 0.0, 0.0);
    int bad = 0;
    for (size_t i = 0; i < nout; i++)
        bad += gam[i] != am[i];
    CHECK_MSG(bad == 0, "%s: %d argmax wrong", what, bad);
    CHECK(bi->fill(cx, R(dx_d), nin, NAN) == DG_OK);
    CHECK(bi->maxpool_bwd(cx, &ps, R(dy_d), R(am_d), R(dx_d)) == DG_OK);
    from_dev(dx_d, gdx, nin * 4);
    snprintf(what, sizeof what, "maxpool_bwd n%d c%d %dx%d k%d s%d%s", n, c, h, w, k, s,
             ties ? " ties" : "");
    cmp(what, gdx, wdx, mag, nin, 0.0, 2 * FLT_EPSILON);
    dg_pool_shape bad_s = ps;
    bad_s.ho++;
    CHECK(bi->maxpool_fwd(cx, &bad_s, R(x_d), R(y_d), R(am_d)) == DG_ERR_USAGE);
    bi->buf_free(cx, x_d), bi->buf_free(cx, dy_d), bi->buf_free(cx, y_d);
    bi->buf_free(cx, am_d), bi->buf_free(cx, dx_d);
    free(x), free(dy), free(gy), free(gdx), free(am), free(gam), free(wy), free(wdx), free(mag);
}

/* Double conv forward for images [i0, i1): y (and mag = same with |x|, |w|). */
static void ref_conv_fwd(const dg_conv_shape *s, const float *x, const float *w, const float *b,
                         int i0, int i1, double *y, double *mag)
{
    for (int i = i0; i < i1; i++)
        for (int k = 0; k < s->k; k++)
            for (int oy = 0; oy < s->ho; oy++)
                for (int ox = 0; ox < s->wo; ox++) {
                    double acc = b ? b[k] : 0.0, g = b ? fabs(b[k]) : 0.0;
                    for (int c = 0; c < s->c; c++)
                        for (int ky = 0; ky < s->kh; ky++)
                            for (int kx = 0; kx < s->kw; kx++) {
                                int iy = oy * s->stride - s->pad + ky;
                                int ix = ox * s->stride - s->pad + kx;
                                if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w)
                                    continue;
                                double t =
                                    (double)x[(((size_t)i * s->c + c) * s->h + iy) * s->w + ix] *
                                    w[(((size_t)k * s->c + c) * s->kh + ky) * s->kw + kx];
                                acc += t;
                                g += fabs(t);
                            }
                    size_t o = (((size_t)(i - i0) * s->k + k) * s->ho + oy) * s->wo + ox;
                    y[o] = acc;
                    mag[o] = g;
                }
}

/* Double conv backward: dx for images [i0, i1) (may be NULL); dw entries
 * listed in widx (nw of them; all when widx is NULL; none when dw is NULL);
 * db (may be NULL). Each with its magnitude (sum of |terms|). */
static void ref_conv_bwd(const dg_conv_shape *s, const float *x, const float *w, const float *dy,
                         int i0, int i1, double *dx, double *dxm, const size_t *widx, size_t nw,
                         double *dw, double *dwm, double *db, double *dbm)
{
    size_t wc = (size_t)s->k * s->c * s->kh * s->kw;
    if (dx) {
        size_t nx = (size_t)(i1 - i0) * s->c * s->h * s->w;
        memset(dx, 0, nx * 8);
        memset(dxm, 0, nx * 8);
    }
    for (size_t q = 0; dw && q < (widx ? nw : wc); q++) {
        dw[q] = 0.0;
        dwm[q] = 0.0;
    }
    for (int k = 0; db && k < s->k; k++) {
        db[k] = 0.0;
        dbm[k] = 0.0;
        for (int i = 0; i < s->n; i++)
            for (int p = 0; p < s->ho * s->wo; p++) {
                double g = dy[((size_t)i * s->k + k) * s->ho * s->wo + p];
                db[k] += g;
                dbm[k] += fabs(g);
            }
    }
    for (size_t q = 0; dw && q < (widx ? nw : wc); q++) {
        size_t e = widx ? widx[q] : q;
        int kx = (int)(e % s->kw), ky = (int)(e / s->kw % s->kh);
        int c = (int)(e / ((size_t)s->kw * s->kh) % s->c),
            k = (int)(e / ((size_t)s->kw * s->kh * s->c));
        for (int i = 0; i < s->n; i++)
            for (int oy = 0; oy < s->ho; oy++)
                for (int ox = 0; ox < s->wo; ox++) {
                    int iy = oy * s->stride - s->pad + ky, ix = ox * s->stride - s->pad + kx;
                    if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w)
                        continue;
                    double t = (double)dy[(((size_t)i * s->k + k) * s->ho + oy) * s->wo + ox] *
                               x[(((size_t)i * s->c + c) * s->h + iy) * s->w + ix];
                    dw[q] += t;
                    dwm[q] += fabs(t);
                }
    }
    if (!dx)
        return;
    for (int i = i0; i < i1; i++)
        for (int k = 0; k < s->k; k++)
            for (int oy = 0; oy < s->ho; oy++)
                for (int ox = 0; ox < s->wo; ox++) {
                    double g = dy[(((size_t)i * s->k + k) * s->ho + oy) * s->wo + ox];
                    for (int c = 0; c < s->c; c++)
                        for (int ky = 0; ky < s->kh; ky++)
                            for (int kx = 0; kx < s->kw; kx++) {
                                int iy = oy * s->stride - s->pad + ky;
                                int ix = ox * s->stride - s->pad + kx;
                                if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w)
                                    continue;
                                size_t o = (((size_t)(i - i0) * s->c + c) * s->h + iy) * s->w + ix;
                                double t =
                                    g * w[(((size_t)k * s->c + c) * s->kh + ky) * s->kw + kx];
                                dx[o] += t;
                                dxm[o] += fabs(t);
                            }
                }
}

static dg_conv_shape conv_shape(int n, int c, int h, int w, int k, int kh, int kw, int stride,
                                int pad)
{
    dg_conv_shape s = {n, c, h, w, k, kh, kw, stride, pad, 0, 0};
    s.ho = (h + 2 * pad - kh) / stride + 1;
    s.wo = (w + 2 * pad - kw) / stride + 1;
    return s;
}

/* Conv forward and backward against double. Images in check (ncheck of them)
 * are compared for y and dx; dw at nw sampled entries (all when nw == 0). When
 * timing, prints the median fwd and bwd times over reps runs and returns their
 * sum in ms (0 when not timed). */
static double t_conv(dg_conv_shape s, bool with_bias, bool with_dx, const int *check, int ncheck,
                     size_t nw, int reps)
{
    double timed = 0.0;
    size_t nx = (size_t)s.n * s.c * s.h * s.w, nwt = (size_t)s.k * s.c * s.kh * s.kw;
    size_t P = (size_t)s.ho * s.wo, ny = (size_t)s.n * s.k * P;
    size_t img_x = (size_t)s.c * s.h * s.w, img_y = (size_t)s.k * P;
    size_t ws = bi->conv2d_workspace(cx, &s);
    float *x = frnd(nx, 41 + nx), *w = frnd(nwt, 42), *b = frnd(s.k, 43), *dy = frnd(ny, 44);
    float *gy = malloc(ny * 4), *gdx = malloc(nx * 4), *gdw = malloc(nwt * 4),
          *gdb = malloc(s.k * 4);
    double *ry = malloc(img_y * 8), *rym = malloc(img_y * 8), *rdx = malloc(img_x * 8);
    double *rdxm = malloc(img_x * 8), *rdw = malloc(nwt * 8), *rdwm = malloc(nwt * 8);
    double *rdb = malloc(s.k * 8), *rdbm = malloc(s.k * 8);
    size_t *widx = nw ? malloc(nw * sizeof *widx) : NULL;
    float *sdw = nw ? malloc(nw * 4) : NULL;
    char what[160], tag[96];
    void *x_d = to_dev(x, nx * 4), *w_d = to_dev(w, nwt * 4), *b_d = to_dev(b, s.k * 4);
    void *dy_d = to_dev(dy, ny * 4), *y_d = NULL, *dx_d = NULL, *dw_d = NULL, *db_d = NULL;
    void *wk = NULL;

    snprintf(tag, sizeof tag, "n%d c%d %dx%d k%d %dx%d s%d p%d", s.n, s.c, s.h, s.w, s.k, s.kh,
             s.kw, s.stride, s.pad);
    CHECK(bi->buf_alloc(cx, ny * 4, &y_d) == DG_OK);
    CHECK(bi->buf_alloc(cx, nx * 4, &dx_d) == DG_OK);
    CHECK(bi->buf_alloc(cx, nwt * 4, &dw_d) == DG_OK);
    CHECK(bi->buf_alloc(cx, s.k * 4, &db_d) == DG_OK);
    CHECK(bi->buf_alloc(cx, ws + 4, &wk) == DG_OK);
    if (!y_d || !dx_d || !dw_d || !db_d || !wk)
        goto out;
    CHECK(bi->fill(cx, R(y_d), ny, NAN) == DG_OK);
    CHECK(bi->fill(cx, R(dx_d), nx, NAN) == DG_OK);
    CHECK(bi->fill(cx, R(dw_d), nwt, NAN) == DG_OK);
    CHECK(bi->fill(cx, R(db_d), s.k, NAN) == DG_OK);
    dg_ref bias = with_bias ? R(b_d) : (dg_ref){NULL, 0};
    dg_ref dxr = with_dx ? R(dx_d) : (dg_ref){NULL, 0};
    dg_ref dbr = with_bias ? R(db_d) : (dg_ref){NULL, 0};
    dg_status st = bi->conv2d_fwd(cx, &s, R(x_d), R(w_d), bias, R(y_d), R(wk));
    CHECK_MSG(st == DG_OK, "conv2d_fwd %s: %s", tag, bi->last_error(cx));
    st = bi->conv2d_bwd(cx, &s, R(x_d), R(w_d), R(dy_d), dxr, R(dw_d), dbr, R(wk));
    CHECK_MSG(st == DG_OK, "conv2d_bwd %s: %s", tag, bi->last_error(cx));
    from_dev(y_d, gy, ny * 4);
    from_dev(dx_d, gdx, nx * 4);
    from_dev(dw_d, gdw, nwt * 4);
    from_dev(db_d, gdb, s.k * 4);

    for (int q = 0; q < ncheck; q++) {
        int i = check[q];
        ref_conv_fwd(&s, x, w, with_bias ? b : NULL, i, i + 1, ry, rym);
        snprintf(what, sizeof what, "conv2d_fwd %s image %d", tag, i);
        cmp(what, gy + i * img_y, ry, rym, img_y, FLT_MIN,
            2.0 * (s.c * s.kh * s.kw + 2) * FLT_EPSILON);
        if (with_dx) {
            ref_conv_bwd(&s, x, w, dy, i, i + 1, rdx, rdxm, NULL, 0, NULL, NULL, NULL, NULL);
            snprintf(what, sizeof what, "conv2d_bwd dx %s image %d", tag, i);
            cmp(what, gdx + i * img_x, rdx, rdxm, img_x, FLT_MIN,
                2.0 * (s.k * s.kh * s.kw + 2) * FLT_EPSILON);
        }
    }
    if (!with_dx) {
        int bad = 0;
        for (size_t i = 0; i < nx; i++)
            bad += !isnan(gdx[i]);
        CHECK_MSG(bad == 0, "conv2d_bwd %s: dx written though absent", tag);
    }
    if (nw) {
        uint64_t sd = 77;
        for (size_t q = 0; q < nw; q++) {
            sd = sd * 6364136223846793005ULL + 1442695040888963407ULL;
            widx[q] = (size_t)(sd >> 33) % nwt;
            sdw[q] = gdw[widx[q]];
        }
        ref_conv_bwd(&s, x, w, dy, 0, 0, NULL, NULL, widx, nw, rdw, rdwm, with_bias ? rdb : NULL,
                     rdbm);
        snprintf(what, sizeof what, "conv2d_bwd dw %s (sampled)", tag);
        cmp(what, sdw, rdw, rdwm, nw, FLT_MIN, 2.0 * (s.n * P + 2) * FLT_EPSILON);
    } else {
        ref_conv_bwd(&s, x, w, dy, 0, 0, NULL, NULL, NULL, 0, rdw, rdwm, with_bias ? rdb : NULL,
                     rdbm);
        snprintf(what, sizeof what, "conv2d_bwd dw %s", tag);
        cmp(what, gdw, rdw, rdwm, nwt, FLT_MIN, 2.0 * (s.n * P + 2) * FLT_EPSILON);
    }
    if (with_bias) {
        snprintf(what, sizeof what, "conv2d_bwd db %s", tag);
        cmp(what, gdb, rdb, rdbm, s.k, FLT_MIN, 4 * FLT_EPSILON);
    }
    /* A workspace one float short is refused. */
    if (ws >= 4) {
        void *small = NULL;
        CHECK(bi->buf_alloc(cx, ws - 4, &small) == DG_OK);
        CHECK(bi->conv2d_fwd(cx, &s, R(x_d), R(w_d), bias, R(y_d), R(small)) == DG_ERR_USAGE);
        CHECK(bi->conv2d_bwd(cx, &s, R(x_d), R(w_d), R(dy_d), dxr, R(dw_d), dbr, R(small)) ==
              DG_ERR_USAGE);
        bi->buf_free(cx, small);
    }

    if (reps > 0) {
        double tf[32], tb[32];
        bool ok = true;
        if (reps > 32)
            reps = 32;
        for (int r = 0; r < 2; r++) {
            ok &= bi->conv2d_fwd(cx, &s, R(x_d), R(w_d), bias, R(y_d), R(wk)) == DG_OK;
            ok &=
                bi->conv2d_bwd(cx, &s, R(x_d), R(w_d), R(dy_d), dxr, R(dw_d), dbr, R(wk)) == DG_OK;
        }
        for (int r = 0; r < reps; r++) {
            ok &= bi->event_record(cx, 2) == DG_OK;
            ok &= bi->conv2d_fwd(cx, &s, R(x_d), R(w_d), bias, R(y_d), R(wk)) == DG_OK;
            ok &= bi->event_record(cx, 3) == DG_OK;
            ok &=
                bi->conv2d_bwd(cx, &s, R(x_d), R(w_d), R(dy_d), dxr, R(dw_d), dbr, R(wk)) == DG_OK;
            ok &= bi->event_record(cx, 4) == DG_OK;
            ok &= bi->event_elapsed(cx, 2, 3, &tf[r]) == DG_OK;
            ok &= bi->event_elapsed(cx, 3, 4, &tb[r]) == DG_OK;
        }
        CHECK_MSG(ok, "timed conv: %s", bi->last_error(cx));
        qsort(tf, reps, sizeof tf[0], cmp_double);
        qsort(tb, reps, sizeof tb[0], cmp_double);
        double fl = 2.0 * (double)s.n * s.k * (double)P * s.c * s.kh * s.kw;
        printf("conv %s: fwd %.3f ms (%.1f GFLOP/s), bwd %.3f ms (%.1f GFLOP/s), fwd+bwd %.3f ms; "
               "workspace %.1f MiB (median of %d)\n",
               tag, tf[reps / 2], fl / tf[reps / 2] * 1e-6, tb[reps / 2],
               (with_dx ? 2 : 1) * fl / tb[reps / 2] * 1e-6, tf[reps / 2] + tb[reps / 2],
               ws / 1048576.0, reps);
        timed = tf[reps / 2] + tb[reps / 2];
    }
out:
    bi->buf_free(cx, x_d), bi->buf_free(cx, w_d), bi->buf_free(cx, b_d), bi->buf_free(cx, dy_d);
    bi->buf_free(cx, y_d), bi->buf_free(cx, dx_d), bi->buf_free(cx, dw_d), bi->buf_free(cx, db_d);
    bi->buf_free(cx, wk);
    free(x), free(w), free(b), free(dy), free(gy), free(gdx), free(gdw), free(gdb);
    free(ry), free(rym), free(rdx), free(rdxm), free(rdw), free(rdwm), free(rdb), free(rdbm);
    free(widx), free(sdw);
    return timed;
}

/* Double softmax cross-entropy; returns the mean loss, adds hits to *hits. */
static double ref_xent(int n, int classes, const float *lg, const int32_t *lab, double *dl,
                       double *hits)
{
    double sum = 0.0;
    for (int r = 0; r < n; r++) {
        const float *x = lg + (size_t)r * classes;
        double *d = dl + (size_t)r * classes;
        if (lab[r] < 0 || lab[r] >= classes) {
            for (int j = 0; j < classes; j++)
                d[j] = 0.0;
            continue;
        }
        int am = 0;
        for (int j = 1; j < classes; j++)
            if (x[j] > x[am])
                am = j;
        double se = 0.0;
        for (int j = 0; j < classes; j++)
            se += exp((double)x[j] - x[am]);
        for (int j = 0; j < classes; j++)
            d[j] = (exp((double)x[j] - x[am]) / se - (j == lab[r])) / n;
        sum += log(se) - ((double)x[lab[r]] - x[am]);
        *hits += am == lab[r];
    }
    return sum / n;
}

static void t_xent(int n, int classes, bool in_place)
{
    size_t nl = (size_t)n * classes;
    float *lg = frnd(nl, 51 + nl), *gd = malloc(nl * 4), acc0[2] = {1.5f, 2.0f}, acc[2];
    int32_t *lab = malloc(n * 4);
    double *dl = malloc(nl * 8), hits = 0.0;
    char what[96];
    uint64_t sd = 52;
    for (int r = 0; r < n; r++) {
        sd = sd * 6364136223846793005ULL + 1442695040888963407ULL;
        lab[r] = (int32_t)((sd >> 33) % classes);
        for (int j = 0; j < classes; j++)
            lg[(size_t)r * classes + j] *= 4.0f;
    }
    if (n > 1) {
        lab[1] = classes;                /* out of range: nothing, zero row */
        lg[0 * classes + lab[0]] = 9.0f; /* a hit */
    }
    if (n > 2) {
        lab[2] = -1;
        lg[2 * (size_t)classes + 0] = 9.0f; /* tie at the max: first wins */
    }
    if (n > 3) {
        lab[3] = classes - 1;
        lg[3 * (size_t)classes + 0] = 9.0f;
        lg[3 * (size_t)classes + classes - 1] = 9.0f; /* tie: label is the second max, a miss */
    }
    double loss = ref_xent(n, classes, lg, lab, dl, &hits);
    void *lg_d = to_dev(lg, nl * 4), *lab_d = to_dev(lab, n * 4), *acc_d = to_dev(acc0, 8);
    void *d_d = NULL;
    if (in_place)
        d_d = lg_d;
    else
        CHECK(bi->buf_alloc(cx, nl * 4, &d_d) == DG_OK);
    if (!in_place)
        CHECK(bi->fill(cx, R(d_d), nl, NAN) == DG_OK);
    dg_status st = bi->xent(cx, n, classes, R(lg_d), R(lab_d), R(d_d), R(acc_d));
    CHECK_MSG(st == DG_OK, "xent: %s", bi->last_error(cx));
    from_dev(d_d, gd, nl * 4);
    from_dev(acc_d, acc, 8);
    snprintf(what, sizeof what, "xent n%d classes %d%s dlogits", n, classes,
             in_place ? " in place" : "");
    cmp(what, gd, dl, NULL, nl, 1e-6 / n, 1e-5);
    CHECK_MSG(fabs(acc[0] - (1.5 + loss)) <= 1e-5 * (1.5 + loss), "%s: acc[0] %.9g want %.9g", what,
              acc[0], 1.5 + loss);
    CHECK_MSG(acc[1] == (float)(2.0 + hits), "%s: acc[1] %.9g want %.9g", what, acc[1], 2.0 + hits);
    CHECK(bi->xent(cx, n, classes, R(lg_d), R(lab_d), R(d_d), (dg_ref){acc_d, 4}) == DG_ERR_USAGE);
    CHECK(bi->xent(cx, n + 1, classes, R(lg_d), R(lab_d), R(d_d), R(acc_d)) == DG_ERR_USAGE);
    bi->buf_free(cx, lg_d), bi->buf_free(cx, lab_d), bi->buf_free(cx, acc_d);
    if (!in_place)
        bi->buf_free(cx, d_d);
    free(lg), free(gd), free(lab), free(dl);
}

static void t_sgd(float momentum, float wd)
{
    enum { N = 1001 };
    float *w = frnd(N, 61), *g = frnd(N, 62), *m = frnd(N, 63), got[N], gm[N];
    double rw[N], rm[N];
    char what[64];
    void *w_d = to_dev(w, sizeof got), *g_d = to_dev(g, sizeof got), *m_d = to_dev(m, sizeof got);
    for (int i = 0; i < N; i++) {
        rw[i] = w[i];
        rm[i] = m[i];
    }
    for (int step = 0; step < 2; step++) {
        for (int i = 0; i < N; i++) {
            double d = g[i] + (double)wd * rw[i];
            if (momentum != 0.0f) {
                rm[i] = momentum * rm[i] + d;
                rw[i] -= 0.05 * rm[i];
            } else {
                rw[i] -= 0.05 * d;
            }
        }
        dg_ref mr = momentum != 0.0f ? R(m_d) : (dg_ref){NULL, 0};
        CHECK(bi->sgd(cx, R(w_d), R(g_d), mr, N, 0.05f, momentum, wd) == DG_OK);
    }
    from_dev(w_d, got, sizeof got);
    from_dev(m_d, gm, sizeof gm);
    snprintf(what, sizeof what, "sgd momentum %g wd %g: w", momentum, wd);
    cmp(what, got, rw, NULL, N, 1e-6, 1e-5);
    snprintf(what, sizeof what, "sgd momentum %g wd %g: mom", momentum, wd);
    cmp(what, gm, rm, NULL, N, 1e-6, 1e-5);
    if (momentum != 0.0f)
        CHECK(bi->sgd(cx, R(w_d), R(g_d), (dg_ref){NULL, 0}, N, 0.1f, momentum, wd) ==
              DG_ERR_USAGE);
    bi->buf_free(cx, w_d), bi->buf_free(cx, g_d), bi->buf_free(cx, m_d);
    free(w), free(g), free(m);
}

/* Events: elapsed > 0 around a big sgemm; bad and unrecorded slots refused. */
static void t_events(void)
{
    enum { N = 2048 };
    void *a = NULL, *c = NULL;
    double ms = -1.0;
    CHECK(bi->event_record && bi->event_elapsed);
    CHECK(bi->buf_alloc(cx, sizeof(float) * N * N, &a) == DG_OK);
    CHECK(bi->buf_alloc(cx, sizeof(float) * N * N, &c) == DG_OK);
    if (!a || !c)
        goto out;
    CHECK(bi->fill(cx, R(a), (size_t)N * N, 0.5f) == DG_OK);
    CHECK(bi->event_elapsed(cx, 0, 15, &ms) == DG_ERR_USAGE); /* never recorded */
    CHECK(bi->event_record(cx, 0) == DG_OK);
    CHECK(bi->gemm(cx, false, false, N, N, N, 1.0f, R(a), N, R(a), N, 0.0f, R(c), N) == DG_OK);
    CHECK(bi->event_record(cx, 1) == DG_OK);
    CHECK_MSG(bi->event_elapsed(cx, 0, 1, &ms) == DG_OK, "%s", bi->last_error(cx));
    CHECK_MSG(ms > 0.0, "elapsed %.6f ms", ms);
    printf("events: sgemm %d^3 took %.3f ms (%.1f GFLOP/s)\n", N, ms,
           2.0 * N * N * (double)N / ms * 1e-6);
    CHECK(bi->event_record(cx, DG_EVENT_SLOTS) == DG_ERR_USAGE);
    CHECK(bi->event_record(cx, -1) == DG_ERR_USAGE);
    CHECK(bi->event_elapsed(cx, 0, DG_EVENT_SLOTS, &ms) == DG_ERR_USAGE);
out:
    bi->buf_free(cx, a);
    bi->buf_free(cx, c);
}

/* Capture: fill, gemm, bias, relu, xent into acc; three replays give three
 * times the eager loss. Copies and sync are refused while capturing. */
static void t_capture(void)
{
    enum { B = 64, D = 100, C = 10 };
    float *x = frnd(B * D, 71), *w = frnd(D * C, 72), zero[2] = {0, 0}, acc1[2], acc3[2];
    int32_t lab[B];
    for (int i = 0; i < B; i++)
        lab[i] = (i * 7) % C;
    void *x_d = to_dev(x, B * D * 4), *w_d = to_dev(w, D * C * 4), *lab_d = to_dev(lab, sizeof lab);
    void *acc_d = to_dev(zero, 8), *z_d = NULL, *b_d = NULL, *dz_d = NULL;
    CHECK(bi->capture_begin && bi->capture_end && bi->replay);
    CHECK(bi->buf_alloc(cx, B * C * 4, &z_d) == DG_OK);
    CHECK(bi->buf_alloc(cx, B * C * 4, &dz_d) == DG_OK);
    CHECK(bi->buf_alloc(cx, C * 4, &b_d) == DG_OK);
    if (!z_d || !dz_d || !b_d || !acc_d)
        goto out;
    CHECK(bi->replay(cx) == DG_ERR_USAGE); /* nothing captured yet */
    CHECK(bi->synchronize(cx) == DG_OK);
    CHECK(bi->upload(cx, acc_d, 0, zero, 8) == DG_OK);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            CHECK_MSG(bi->capture_begin(cx) == DG_OK, "capture_begin: %s", bi->last_error(cx));
            CHECK(bi->capture_begin(cx) == DG_ERR_USAGE);
        }
        CHECK(bi->fill(cx, R(b_d), C, 0.25f) == DG_OK);
        CHECK(bi->gemm(cx, false, false, B, C, D, 1.0f, R(x_d), D, R(w_d), C, 0.0f, R(z_d), C) ==
              DG_OK);
        CHECK(bi->bias_add(cx, R(z_d), R(b_d), B, C, 1) == DG_OK);
        CHECK(bi->relu_fwd(cx, R(z_d), R(z_d), B * C) == DG_OK);
        CHECK(bi->xent(cx, B, C, R(z_d), R(lab_d), R(dz_d), R(acc_d)) == DG_OK);
        if (pass == 1) {
            CHECK(bi->upload(cx, acc_d, 0, zero, 8) == DG_ERR_USAGE);
            CHECK(bi->download(cx, acc_d, 0, acc3, 8) == DG_ERR_USAGE);
            CHECK(bi->synchronize(cx) == DG_ERR_USAGE);
            CHECK(bi->replay(cx) == DG_ERR_USAGE);
            CHECK_MSG(bi->capture_end(cx) == DG_OK, "capture_end: %s", bi->last_error(cx));
            CHECK(bi->capture_end(cx) == DG_ERR_USAGE);
        }
        if (pass == 0) {
            from_dev(acc_d, acc1, 8);
            CHECK(bi->upload(cx, acc_d, 0, zero, 8) == DG_OK);
        }
    }
    from_dev(acc_d, acc3, 8);
    CHECK_MSG(acc3[0] == 0.0f && acc3[1] == 0.0f, "capture ran the ops: acc %g %g", acc3[0],
              acc3[1]);
    for (int r = 0; r < 3; r++)
        CHECK_MSG(bi->replay(cx) == DG_OK, "replay: %s", bi->last_error(cx));
    from_dev(acc_d, acc3, 8);
    CHECK_MSG(acc1[0] > 0.0f && fabs(acc3[0] - 3.0 * acc1[0]) <= 1e-6 * 3.0 * acc1[0],
              "replayed loss %.9g, eager %.9g x 3", acc3[0], acc1[0]);
    CHECK_MSG(acc3[1] == 3.0f * acc1[1], "replayed hits %g, eager %g x 3", acc3[1], acc1[1]);
    printf("capture: eager loss %.6f hits %g; 3 replays: loss %.6f hits %g\n", acc1[0], acc1[1],
           acc3[0], acc3[1]);
out:
    bi->buf_free(cx, x_d), bi->buf_free(cx, w_d), bi->buf_free(cx, lab_d), bi->buf_free(cx, acc_d);
    bi->buf_free(cx, z_d), bi->buf_free(cx, dz_d), bi->buf_free(cx, b_d);
    free(x), free(w);
}

/* A 784-1024-1024-10 MLP training step at batch 256 (forward, xent, backward,
 * SGD with momentum): checks that captured replays give bitwise the eager
 * result, then times eager launches against replays (printed only). */
enum { MB = 256, M0 = 784, M1 = 1024, M2 = 1024, M3 = 10, MSTEPS = 5, MTIME = 50 };
typedef struct mlp {
    void *x, *lab, *w[3], *b[3], *mw[3], *mb[3], *dw[3], *db[3], *h[3], *dh[3], *acc;
} mlp;
static const int mlp_dims[4] = {M0, M1, M2, M3};

static bool mlp_step(mlp *m)
{
    bool ok = true;
    const float lr = 0.01f, mom = 0.9f, wd = 1e-4f;
    for (int l = 0; l < 3; l++) {
        void *in = l ? m->h[l - 1] : m->x;
        ok &= bi->gemm(cx, false, false, MB, mlp_dims[l + 1], mlp_dims[l], 1.0f, R(in), mlp_dims[l],
                       R(m->w[l]), mlp_dims[l + 1], 0.0f, R(m->h[l]), mlp_dims[l + 1]) == DG_OK;
        ok &= bi->bias_add(cx, R(m->h[l]), R(m->b[l]), MB, mlp_dims[l + 1], 1) == DG_OK;
        if (l < 2)
            ok &= bi->relu_fwd(cx, R(m->h[l]), R(m->h[l]), (size_t)MB * mlp_dims[l + 1]) == DG_OK;
    }
    ok &= bi->xent(cx, MB, M3, R(m->h[2]), R(m->lab), R(m->dh[2]), R(m->acc)) == DG_OK;
    for (int l = 2; l >= 0; l--) {
        void *in = l ? m->h[l - 1] : m->x;
        int ni = mlp_dims[l], no = mlp_dims[l + 1];
        ok &= bi->gemm(cx, true, false, ni, no, MB, 1.0f, R(in), ni, R(m->dh[l]), no, 0.0f,
                       R(m->dw[l]), no) == DG_OK;
        ok &= bi->bias_grad(cx, R(m->dh[l]), R(m->db[l]), MB, no, 1) == DG_OK;
        if (l > 0) {
            ok &= bi->gemm(cx, false, true, MB, ni, no, 1.0f, R(m->dh[l]), no, R(m->w[l]), no, 0.0f,
                           R(m->dh[l - 1]), ni) == DG_OK;
            ok &= bi->relu_bwd(cx, R(m->h[l - 1]), R(m->dh[l - 1]), R(m->dh[l - 1]),
                               (size_t)MB * ni) == DG_OK;
        }
    }
    for (int l = 0; l < 3; l++) {
        size_t nw = (size_t)mlp_dims[l] * mlp_dims[l + 1];
        ok &= bi->sgd(cx, R(m->w[l]), R(m->dw[l]), R(m->mw[l]), nw, lr, mom, wd) == DG_OK;
        ok &= bi->sgd(cx, R(m->b[l]), R(m->db[l]), R(m->mb[l]), mlp_dims[l + 1], lr, mom, wd) ==
              DG_OK;
    }
    return ok;
}

/* Puts the MLP back to its initial weights, zero momenta and zero acc. */
static void mlp_reset(mlp *m, float **w0)
{
    float zero[2] = {0, 0};
    for (int l = 0; l < 3; l++) {
        size_t nw = (size_t)mlp_dims[l] * mlp_dims[l + 1];
        CHECK(bi->upload(cx, m->w[l], 0, w0[l], nw * 4) == DG_OK);
        CHECK(bi->fill(cx, R(m->b[l]), mlp_dims[l + 1], 0.0f) == DG_OK);
        CHECK(bi->fill(cx, R(m->mw[l]), nw, 0.0f) == DG_OK);
        CHECK(bi->fill(cx, R(m->mb[l]), mlp_dims[l + 1], 0.0f) == DG_OK);
    }
    CHECK(bi->upload(cx, m->acc, 0, zero, 8) == DG_OK);
}

static void t_mlp(void)
{
    mlp m;
    float *w0[3] = {NULL, NULL, NULL}, *x = frnd((size_t)MB * M0, 81), *got = NULL, *want = NULL;
    int32_t lab[MB];
    bool ok = true;
    void **all = (void **)&m;
    size_t nall = sizeof m / sizeof(void *);

    memset(&m, 0, sizeof m);
    for (int i = 0; i < MB; i++)
        lab[i] = (i * 3) % M3;
    m.x = to_dev(x, (size_t)MB * M0 * 4);
    m.lab = to_dev(lab, sizeof lab);
    CHECK(bi->buf_alloc(cx, 8, &m.acc) == DG_OK);
    for (int l = 0; l < 3; l++) {
        size_t nw = (size_t)mlp_dims[l] * mlp_dims[l + 1], no = mlp_dims[l + 1];
        w0[l] = frnd(nw, 90 + l);
        for (size_t i = 0; i < nw; i++)
            w0[l][i] *= (float)(1.0 / sqrt(mlp_dims[l]));
        CHECK(bi->buf_alloc(cx, nw * 4, &m.w[l]) == DG_OK);
        CHECK(bi->buf_alloc(cx, nw * 4, &m.mw[l]) == DG_OK);
        CHECK(bi->buf_alloc(cx, nw * 4, &m.dw[l]) == DG_OK);
        CHECK(bi->buf_alloc(cx, no * 4, &m.b[l]) == DG_OK);
        CHECK(bi->buf_alloc(cx, no * 4, &m.mb[l]) == DG_OK);
        CHECK(bi->buf_alloc(cx, no * 4, &m.db[l]) == DG_OK);
        CHECK(bi->buf_alloc(cx, MB * no * 4, &m.h[l]) == DG_OK);
        CHECK(bi->buf_alloc(cx, MB * no * 4, &m.dh[l]) == DG_OK);
    }
    for (size_t i = 0; i < nall; i++)
        if (!all[i])
            goto out;
    size_t nw1 = (size_t)M1 * M2;
    got = malloc(nw1 * 4);
    want = malloc(nw1 * 4);
    float acc_e[2], acc_r[2];

    /* Eager MSTEPS steps, then the same from the same start by replays. */
    mlp_reset(&m, w0);
    for (int s = 0; s < MSTEPS; s++)
        ok &= mlp_step(&m);
    CHECK_MSG(ok, "mlp eager step: %s", bi->last_error(cx));
    from_dev(m.w[1], want, nw1 * 4);
    from_dev(m.acc, acc_e, 8);
    mlp_reset(&m, w0);
    CHECK(bi->capture_begin(cx) == DG_OK);
    ok &= mlp_step(&m);
    CHECK_MSG(bi->capture_end(cx) == DG_OK && ok, "mlp capture: %s", bi->last_error(cx));
    for (int s = 0; s < MSTEPS; s++)
        ok &= bi->replay(cx) == DG_OK;
    from_dev(m.w[1], got, nw1 * 4);
    from_dev(m.acc, acc_r, 8);
    bool same = memcmp(got, want, nw1 * 4) == 0 && memcmp(acc_e, acc_r, 8) == 0;
    double dmax = 0.0;
    for (size_t i = 0; i < nw1; i++)
        if (fabs((double)got[i] - want[i]) > dmax)
            dmax = fabs((double)got[i] - want[i]);
    CHECK_MSG(dmax <= 1e-5 && fabs(acc_r[0] - acc_e[0]) <= 1e-5 * acc_e[0] && acc_r[1] == acc_e[1],
              "mlp: %d replays differ from %d eager steps (max |dw| %.3g, loss %.9g vs %.9g)",
              MSTEPS, MSTEPS, dmax, acc_r[0], acc_e[0]);
    printf("mlp: %d captured replays vs %d eager steps: %s (max |w diff| %.3g), loss sum %.6f\n",
           MSTEPS, MSTEPS, same ? "bitwise identical" : "NOT bitwise identical", dmax, acc_e[0]);
    CHECK_MSG(acc_e[0] > 0.0f && acc_e[0] < 20.0f, "mlp loss sum %g", acc_e[0]);

    /* Timing: MTIME steps each way, wall clock to the final sync and events. */
    double t0, wall_e, wall_r, gpu_e = 0.0, gpu_r = 0.0;
    CHECK(bi->synchronize(cx) == DG_OK);
    t0 = now_s();
    ok &= bi->event_record(cx, 5) == DG_OK;
    for (int s = 0; s < MTIME; s++)
        ok &= mlp_step(&m);
    ok &= bi->event_record(cx, 6) == DG_OK;
    ok &= bi->synchronize(cx) == DG_OK;
    wall_e = now_s() - t0;
    ok &= bi->event_elapsed(cx, 5, 6, &gpu_e) == DG_OK;
    t0 = now_s();
    ok &= bi->event_record(cx, 5) == DG_OK;
    for (int s = 0; s < MTIME; s++)
        ok &= bi->replay(cx) == DG_OK;
    ok &= bi->event_record(cx, 6) == DG_OK;
    ok &= bi->synchronize(cx) == DG_OK;
    wall_r = now_s() - t0;
    ok &= bi->event_elapsed(cx, 5, 6, &gpu_r) == DG_OK;
    CHECK_MSG(ok, "mlp timing: %s", bi->last_error(cx));
    printf("mlp %d-%d-%d-%d batch %d, 25 ops/step: eager %.1f us/step (gpu %.1f), captured "
           "replay %.1f us/step (gpu %.1f), speed-up %.2fx\n",
           M0, M1, M2, M3, MB, wall_e / MTIME * 1e6, gpu_e / MTIME * 1e3, wall_r / MTIME * 1e6,
           gpu_r / MTIME * 1e3, wall_e / wall_r);
out:
    for (size_t i = 0; i < nall; i++)
        bi->buf_free(cx, all[i]);
    for (int l = 0; l < 3; l++)
        free(w0[l]);
    free(x), free(got), free(want);
}

/* The conv shapes every path is checked on (the context's current path). */
static void conv_cases(void)
{
    static const int first[] = {0}, two[] = {0, 1}, three[] = {0, 1, 2};
    t_conv(conv_shape(2, 3, 7, 9, 5, 3, 3, 2, 1), true, true, two, 2, 0, 0);
    t_conv(conv_shape(1, 2, 5, 5, 3, 3, 3, 1, 1), true, true, first, 1, 0, 0);
    t_conv(conv_shape(3, 4, 8, 6, 2, 2, 3, 1, 0), false, true, three, 3, 0, 0);
    t_conv(conv_shape(2, 3, 6, 6, 4, 1, 1, 1, 0), true, false, two, 2, 0, 0);
    t_conv(conv_shape(1, 1, 4, 4, 1, 4, 4, 1, 0), true, true, first, 1, 0, 0);
    /* A cifar-like layer (32 -> 32 channels, 3x3, pad 1): long reductions, where
     * cuDNN may pick Winograd. */
    static const int ends[] = {0, 5};
    t_conv(conv_shape(6, 32, 12, 12, 32, 3, 3, 1, 1), true, true, ends, 2, 0, 0);
}

/* got[i] against want[i]; tol = a quarter of the distance to tf32[i], the
 * value TF32 rounding of the inputs would give. */
static void cmp_not_tf32(const char *what, const float *got, const double *want, const double *tf32,
                         size_t n)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double tol = 0.25 * fabs(want[i] - tf32[i]);
        if (!(fabs((double)got[i] - want[i]) <= tol) && bad++ < 3)
            fprintf(stderr, "%s[%zu] = %.9g, want %.9g (TF32 would give %.9g)\n", what, i, got[i],
                    want[i], tf32[i]);
    }
    CHECK_MSG(bad == 0, "%s: %d of %zu not fp32-accurate: TF32 or reduced precision?", what, bad,
              n);
}

/* Convolutions exact (y, dx) or nearly (dw) in fp32 but not in TF32: x and dy
 * are 1 + 2^-12 (TF32 keeps 10 mantissa bits, so rounds them to 1), w is 1. */
static void conv_not_tf32(void)
{
    dg_conv_shape s = conv_shape(2, 32, 6, 6, 4, 3, 3, 1, 0); /* 4x4 outputs, no padding */
    size_t nx = (size_t)s.n * s.c * s.h * s.w, nw = (size_t)s.k * s.c * s.kh * s.kw;
    size_t ny = (size_t)s.n * s.k * s.ho * s.wo, most = nx > nw ? nx : nw;
    const double v = 1.0 + 0x1p-12;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *dy = malloc(ny * 4), *got = malloc(most * 4);
    double *want = malloc(most * 8), *tf = malloc(most * 8);
    size_t ws = bi->conv2d_workspace(cx, &s);
    void *x_d = NULL, *w_d = NULL, *dy_d = NULL, *y_d = NULL, *dx_d = NULL, *dw_d = NULL,
         *wk = NULL;
    static const int cover[6] = {1, 2, 3, 3, 2, 1}; /* output rows (cols) covering an input row */

    if (!x || !w || !dy || !got || !want || !tf) {
        CHECK_MSG(0, "host allocation");
        goto out;
    }
    for (size_t i = 0; i < nx; i++)
        x[i] = (float)v;
    for (size_t i = 0; i < nw; i++)
        w[i] = 1.0f;
    for (size_t i = 0; i < ny; i++)
        dy[i] = (float)v;
    x_d = to_dev(x, nx * 4), w_d = to_dev(w, nw * 4), dy_d = to_dev(dy, ny * 4);
    CHECK(bi->buf_alloc(cx, ny * 4, &y_d) == DG_OK);
    CHECK(bi->buf_alloc(cx, nx * 4, &dx_d) == DG_OK);
    CHECK(bi->buf_alloc(cx, nw * 4, &dw_d) == DG_OK);
    CHECK(bi->buf_alloc(cx, ws + 4, &wk) == DG_OK);
    if (!x_d || !w_d || !dy_d || !y_d || !dx_d || !dw_d || !wk)
        goto out;
    dg_status st = bi->conv2d_fwd(cx, &s, R(x_d), R(w_d), (dg_ref){NULL, 0}, R(y_d), R(wk));
    CHECK_MSG(st == DG_OK, "conv2d_fwd: %s", bi->last_error(cx));
    st =
        bi->conv2d_bwd(cx, &s, R(x_d), R(w_d), R(dy_d), R(dx_d), R(dw_d), (dg_ref){NULL, 0}, R(wk));
    CHECK_MSG(st == DG_OK, "conv2d_bwd: %s", bi->last_error(cx));
    from_dev(y_d, got, ny * 4);
    for (size_t i = 0; i < ny; i++)
        want[i] = 288.0 * v, tf[i] = 288.0;
    cmp_not_tf32("conv2d_fwd y (fp32, not TF32)", got, want, tf, ny);
    from_dev(dx_d, got, nx * 4);
    for (size_t i = 0; i < nx; i++) {
        int iy = (int)(i / 6 % 6), ix = (int)(i % 6);
        double cnt = (double)s.k * cover[iy] * cover[ix];
        want[i] = cnt * v, tf[i] = cnt;
    }
    cmp_not_tf32("conv2d_bwd dx (fp32, not TF32)", got, want, tf, nx);
    from_dev(dw_d, got, nw * 4);
    for (size_t i = 0; i < nw; i++)
        want[i] = 32.0 * v * v, tf[i] = 32.0;
    cmp_not_tf32("conv2d_bwd dw (fp32, not TF32)", got, want, tf, nw);
out:
    bi->buf_free(cx, x_d), bi->buf_free(cx, w_d), bi->buf_free(cx, dy_d);
    bi->buf_free(cx, y_d), bi->buf_free(cx, dx_d), bi->buf_free(cx, dw_d), bi->buf_free(cx, wk);
    free(x), free(w), free(dy), free(got), free(want), free(tf);
}

/* Largest |got - want| / mag over n values (mag: the sum of |terms|). */
static double tf32_err(const float *got, const double *want, const double *mag, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (mag[i] > 0.0 ? mag[i] : 1.0);
        if (!(e <= worst)) /* NaN counts as worst */
            worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

/* set_math(mode) (1: devgate train --tf32, 2: --precision bf16): a GEMM and
 * a convolution (forward and backward) still agree with double references
 * within the mode's tolerance of the sum of |terms| (TF32 1e-2; bf16 the
 * gate's bound for rounded inputs, 2u + u^2 + 2 K eps32 with u = 2^-8, and
 * for the convolutions a third u for the bf16 output cuDNN writes); bf16
 * must also show its rounding (a GEMM error of at least 3e-5, where fp32's is
 * about 1e-7: the mode was not silently ignored); set_math(0) restores exact
 * fp32 (the GEMM and conv TF32 detectors pass again). With bf16 on a context
 * without cuDNN the convolution must fail with a message instead. Run on a
 * context of each conv path. */
static void math_mode(int mode)
{
    enum { M = 192, N = 160, K = 320 };
    const double u = 1.0 / 256, bf_gemm = 2 * u + u * u + 2.0 * K * FLT_EPSILON * (1 + u) * (1 + u);
    const double tol = mode == 2 ? bf_gemm : 1e-2, conv_tol = mode == 2 ? bf_gemm + u : 1e-2;
    const char *name = mode == 2 ? "bf16" : "tf32";
    char text[512] = "";
    CHECK_MSG(bi->set_math != NULL, "the cuda backend has no set_math");
    if (!bi->set_math)
        return;
    CHECK(bi->set_math(cx, 3) == DG_ERR_USAGE && bi->set_math(cx, -1) == DG_ERR_USAGE);
    dg_status st = bi->set_math(cx, mode);
    CHECK_MSG(st == DG_OK, "set_math(%d): %s", mode, bi->last_error(cx));
    if (st != DG_OK)
        return;
    bi->versions(cx, text, sizeof text);
    bool dnn = strstr(text, ", cuDNN ") != NULL;

    /* GEMM. */
    float *a = frnd((size_t)M * K, 71), *b = frnd((size_t)K * N, 72),
          *c = malloc(sizeof(float) * M * N);
    double *want = calloc((size_t)M * N, 8), *mag = calloc((size_t)M * N, 8);
    void *da = NULL, *db = NULL, *dc = NULL;
    if (a && b && c && want && mag) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0.0, g = 0.0;
                for (int p = 0; p < K; p++) {
                    double t = (double)a[(size_t)i * K + p] * b[(size_t)p * N + j];
                    s += t;
                    g += fabs(t);
                }
                want[(size_t)i * N + j] = s, mag[(size_t)i * N + j] = g;
            }
        da = to_dev(a, sizeof(float) * M * K), db = to_dev(b, sizeof(float) * K * N);
        CHECK(bi->buf_alloc(cx, sizeof(float) * M * N, &dc) == DG_OK);
        /* bf16: cuBLAS's own rounding (the default) and devgate's cast kernel. */
        static const char *const gemm_ways[] = {"fast", "cast"};
        for (int v = 0; da && db && dc && v < (mode == 2 ? 2 : 1); v++) {
            if (mode == 2)
                setenv("DEVGATE_CUDA_BF16_GEMM", gemm_ways[v], 1);
            st = bi->gemm(cx, false, false, M, N, K, 1.0f, R(da), K, R(db), N, 0.0f, R(dc), N);
            CHECK_MSG(st == DG_OK, "%s gemm: %s", name, bi->last_error(cx));
            from_dev(dc, c, sizeof(float) * M * N);
            double e = tf32_err(c, want, mag, (size_t)M * N);
            CHECK_MSG(e <= tol, "%s gemm: normalised error %.3g > %.3g", name, e, tol);
            CHECK_MSG(mode != 2 || e >= 3e-5,
                      "bf16 gemm (%s): normalised error %.3g: inputs not rounded to bf16?",
                      gemm_ways[v], e);
            printf("%s gemm %dx%dx%d%s%s: normalised error %.3g (bound %.3g)\n", name, M, N, K,
                   mode == 2 ? " " : "", mode == 2 ? gemm_ways[v] : "", e, tol);
        }
        unsetenv("DEVGATE_CUDA_BF16_GEMM");
    } else {
        CHECK_MSG(0, "host allocation");
    }
    bi->buf_free(cx, da), bi->buf_free(cx, db), bi->buf_free(cx, dc);
    free(a), free(b), free(c), free(want), free(mag);

    /* Convolution: workspace asked after set_math, as the engine does. */
    dg_conv_shape s = conv_shape(4, 32, 12, 12, 48, 3, 3, 1, 1);
    size_t nx = (size_t)s.n * s.c * s.h * s.w, nw = (size_t)s.k * s.c * s.kh * s.kw;
    size_t ny = (size_t)s.n * s.k * s.ho * s.wo;
    size_t ws = bi->conv2d_workspace(cx, &s);
    float *x = frnd(nx, 73), *w = frnd(nw, 74), *dy = frnd(ny, 75), *bias = frnd((size_t)s.k, 76);
    float *gy = malloc(ny * 4), *gdx = malloc(nx * 4), *gdw = malloc(nw * 4);
    double *ry = malloc(ny * 8), *rym = malloc(ny * 8), *rdx = malloc(nx * 8),
           *rdxm = malloc(nx * 8);
    double *rdw = malloc(nw * 8), *rdwm = malloc(nw * 8);
    void *x_d = NULL, *w_d = NULL, *dy_d = NULL, *y_d = NULL, *dx_d = NULL, *dw_d = NULL,
         *wk = NULL, *b_d = NULL;
    if (x && w && dy && bias && gy && gdx && gdw && ry && rym && rdx && rdxm && rdw && rdwm) {
        ref_conv_fwd(&s, x, w, bias, 0, s.n, ry, rym); /* the bias: bf16's widening adds it */
        ref_conv_bwd(&s, x, w, dy, 0, s.n, rdx, rdxm, NULL, 0, rdw, rdwm, NULL, NULL);
        x_d = to_dev(x, nx * 4), w_d = to_dev(w, nw * 4), dy_d = to_dev(dy, ny * 4);
        b_d = to_dev(bias, (size_t)s.k * 4);
        CHECK(bi->buf_alloc(cx, ny * 4, &y_d) == DG_OK);
        CHECK(bi->buf_alloc(cx, nx * 4, &dx_d) == DG_OK);
        CHECK(bi->buf_alloc(cx, nw * 4, &dw_d) == DG_OK);
        CHECK(bi->buf_alloc(cx, ws + 4, &wk) == DG_OK);
        if (x_d && w_d && dy_d && b_d && y_d && dx_d && dw_d && wk && mode == 2 && !dnn) {
            st = bi->conv2d_fwd(cx, &s, R(x_d), R(w_d), (dg_ref){NULL, 0}, R(y_d), R(wk));
            CHECK_MSG(st != DG_OK && strstr(bi->last_error(cx), "cuDNN only"),
                      "bf16 conv2d_fwd without cuDNN: %s: %s", dg_status_name(st),
                      bi->last_error(cx));
            printf("bf16 conv without cuDNN: %s\n", bi->last_error(cx));
        } else if (x_d && w_d && dy_d && b_d && y_d && dx_d && dw_d && wk) {
            st = bi->conv2d_fwd(cx, &s, R(x_d), R(w_d), R(b_d), R(y_d), R(wk));
            CHECK_MSG(st == DG_OK, "%s conv2d_fwd: %s", name, bi->last_error(cx));
            st = bi->conv2d_bwd(cx, &s, R(x_d), R(w_d), R(dy_d), R(dx_d), R(dw_d),
                                (dg_ref){NULL, 0}, R(wk));
            CHECK_MSG(st == DG_OK, "%s conv2d_bwd: %s", name, bi->last_error(cx));
            from_dev(y_d, gy, ny * 4);
            from_dev(dx_d, gdx, nx * 4);
            from_dev(dw_d, gdw, nw * 4);
            double ey = tf32_err(gy, ry, rym, ny), ex = tf32_err(gdx, rdx, rdxm, nx);
            double ew = tf32_err(gdw, rdw, rdwm, nw);
            CHECK_MSG(ey <= conv_tol && ex <= conv_tol && ew <= conv_tol,
                      "%s conv: normalised errors y %.3g dx %.3g dw %.3g > %.3g", name, ey, ex, ew,
                      conv_tol);
            printf("%s conv n%d c%d>%d %dx%d: normalised errors y %.3g dx %.3g dw %.3g (bound "
                   "%.3g)\n",
                   name, s.n, s.c, s.k, s.h, s.w, ey, ex, ew, conv_tol);
        }
    } else {
        CHECK_MSG(0, "host allocation");
    }
    bi->buf_free(cx, x_d), bi->buf_free(cx, w_d), bi->buf_free(cx, dy_d);
    bi->buf_free(cx, y_d), bi->buf_free(cx, dx_d), bi->buf_free(cx, dw_d), bi->buf_free(cx, wk);
    bi->buf_free(cx, b_d);
    free(x), free(w), free(dy), free(bias), free(gy), free(gdx), free(gdw);
    free(ry), free(rym), free(rdx), free(rdxm), free(rdw), free(rdwm);

    /* Back to exact fp32. */
    st = bi->set_math(cx, 0);
    CHECK_MSG(st == DG_OK, "set_math(0): %s", bi->last_error(cx));
    fp32_not_tf32();
    conv_not_tf32();
}

/* Largest |a - b| over n floats, relative to the largest |a|. */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (fabs((double)a[i] - b[i]) > d || isnan(b[i]))
            d = isnan(b[i]) ? INFINITY : fabs((double)a[i] - b[i]);
        if (fabs(a[i]) > m)
            m = fabs(a[i]);
    }
    return m > 0 ? d / m : d;
}

/* A conv layer's forward and backward, run eagerly twice and then captured and
 * replayed: y and db (deterministic on every path) bitwise the same each time;
 * dx and dw bitwise where the algorithms are deterministic, else close. */
static void conv_capture(void)
{
    dg_conv_shape s = conv_shape(16, 32, 16, 16, 32, 3, 3, 1, 1);
    size_t n[4] = {(size_t)s.n * s.k * s.ho * s.wo, (size_t)s.n * s.c * s.h * s.w,
                   (size_t)s.k * s.c * s.kh * s.kw, (size_t)s.k}; /* y, dx, dw, db */
    static const char *const names[4] = {"y", "dx", "dw", "db"};
    size_t ws = bi->conv2d_workspace(cx, &s);
    float *x = frnd(n[1], 101), *w = frnd(n[2], 102), *b = frnd(n[3], 103), *dy = frnd(n[0], 104);
    float *run[3][4] = {{NULL}};
    void *x_d = to_dev(x, n[1] * 4), *w_d = to_dev(w, n[2] * 4), *b_d = to_dev(b, n[3] * 4);
    void *dy_d = to_dev(dy, n[0] * 4), *out[4] = {NULL, NULL, NULL, NULL}, *wk = NULL;
    bool ok = true;

    for (int i = 0; i < 4; i++)
        CHECK(bi->buf_alloc(cx, n[i] * 4, &out[i]) == DG_OK);
    CHECK(bi->buf_alloc(cx, ws + 4, &wk) == DG_OK);
    if (!x_d || !w_d || !b_d || !dy_d || !out[0] || !out[1] || !out[2] || !out[3] || !wk)
        goto out;
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < 4; i++) {
            run[r][i] = malloc(n[i] * 4);
            ok &= bi->fill(cx, R(out[i]), n[i], NAN) == DG_OK;
        }
        if (r == 2)
            ok &= bi->capture_begin(cx) == DG_OK;
        ok &= bi->conv2d_fwd(cx, &s, R(x_d), R(w_d), R(b_d), R(out[0]), R(wk)) == DG_OK;
        ok &= bi->conv2d_bwd(cx, &s, R(x_d), R(w_d), R(dy_d), R(out[1]), R(out[2]), R(out[3]),
                             R(wk)) == DG_OK;
        if (r == 2) {
            ok &= bi->capture_end(cx) == DG_OK;
            ok &= bi->replay(cx) == DG_OK;
        }
        CHECK_MSG(ok, "conv capture pass %d: %s", r, bi->last_error(cx));
        for (int i = 0; i < 4; i++)
            if (run[r][i])
                from_dev(out[i], run[r][i], n[i] * 4);
    }
    if (!ok)
        goto out;
    printf("conv capture n%d c%d %dx%d k%d:", s.n, s.c, s.h, s.w, s.k);
    for (int i = 0; i < 4; i++) {
        if (!run[0][i] || !run[1][i] || !run[2][i])
            continue;
        bool same1 = memcmp(run[0][i], run[1][i], n[i] * 4) == 0;
        bool same2 = memcmp(run[0][i], run[2][i], n[i] * 4) == 0;
        double d1 = rel_diff(run[0][i], run[1][i], n[i]), d2 = rel_diff(run[0][i], run[2][i], n[i]);
        if (i == 0 || i == 3)
            CHECK_MSG(same1 && same2, "conv %s: eager twice %s, replay %s", names[i],
                      same1 ? "same" : "differs", same2 ? "same" : "differs");
        else
            CHECK_MSG(d1 <= 1e-5 && d2 <= 1e-5, "conv %s: eager twice rel diff %.3g, replay %.3g",
                      names[i], d1, d2);
        printf(" %s %s", names[i], same1 && same2 ? "bitwise repeatable" : "NOT bitwise");
    }
    printf(" (eager, eager again, captured replay)\n");
out:
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 4; i++)
            free(run[r][i]);
    for (int i = 0; i < 4; i++)
        bi->buf_free(cx, out[i]);
    bi->buf_free(cx, x_d), bi->buf_free(cx, w_d), bi->buf_free(cx, b_d), bi->buf_free(cx, dy_d);
    bi->buf_free(cx, wk);
    free(x), free(w), free(b), free(dy);
}

/* The four conv layers of the cifar preset at batch 1024 (fwd and bwd as the
 * engine runs them: the first layer without dx), checked and timed. */
static void cifar_convs(const char *path)
{
    enum { N = 1024 };
    static const int ends[] = {0, N - 1};
    double t = 0.0;
    t += t_conv(conv_shape(N, 3, 32, 32, 32, 3, 3, 1, 1), true, false, ends, 2, 24, 10);
    t += t_conv(conv_shape(N, 32, 32, 32, 32, 3, 3, 1, 1), true, true, ends, 2, 24, 10);
    t += t_conv(conv_shape(N, 32, 16, 16, 64, 3, 3, 1, 1), true, true, ends, 2, 24, 10);
    t += t_conv(conv_shape(N, 64, 16, 16, 64, 3, 3, 1, 1), true, true, ends, 2, 24, 10);
    printf("cifar conv layers, batch %d, %s: fwd+bwd %.3f ms per step\n", N, path, t);
}

/* f rounded to the nearest bf16 (ties to even), as a float. */
static float bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) {
        u += 0x7fffu + ((u >> 16) & 1u);
        u &= 0xffff0000u;
    }
    memcpy(&f, &u, 4);
    return f;
}

/* bf16 convolutions on each route (DEVGATE_CUDA_BF16_CONV, the bf16 tensors in
 * both DEVGATE_CUDA_BF16_LAYOUTs) on a shape of their
 * own (plans are kept per shape): the TF32 carrier must equal the double
 * convolution of the bf16-rounded x, w and dy within fp32 accumulation
 * (8 K eps32 of the sum of |terms|: TF32 on unrounded inputs misses it by
 * the bf16 rounding, about 1e-4 here) and still show the rounding against
 * the unrounded inputs (at least 3e-5); the bf16-tensor route is held to the
 * rounded reference within its bf16 output's u; versions names the route. */
static void bf16_routes(void)
{
    /* The carrier, bf16 tensors channels-last, bf16 tensors NCHW. */
    static const char *const routes[] = {"tf32", "bf16", "bf16"};
    static const char *const layouts[] = {"nhwc", "nhwc", "nchw"};
    static const char *const named[] = {"bf16 inputs on tf32 math", "bf16 nhwc", "bf16)"};
    const char *env = getenv("DEVGATE_CUDA_BF16_CONV");
    char *saved = env ? strdup(env) : NULL, text[4096];
    CHECK(bi->set_math(cx, 2) == DG_OK);
    for (int r = 0; r < 3; r++) {
        setenv("DEVGATE_CUDA_BF16_CONV", routes[r], 1);
        setenv("DEVGATE_CUDA_BF16_LAYOUT", layouts[r], 1);
        /* 40 x 33 pixels, 24 x 40 channels: partial 32-wide tiles both ways. */
        dg_conv_shape s = conv_shape(3, 24, 40 + r, 33, 40, 3, 3, 1, 1);
        size_t nx = (size_t)s.n * s.c * s.h * s.w, nw = (size_t)s.k * s.c * s.kh * s.kw;
        size_t ny = (size_t)s.n * s.k * s.ho * s.wo, ws = bi->conv2d_workspace(cx, &s);
        const double K = (double)s.c * s.kh * s.kw,
                     bound = r == 0 ? 8 * K * FLT_EPSILON : 1.0 / 128;
        float *x = frnd(nx, 91), *w = frnd(nw, 92), *dy = frnd(ny, 93);
        float *xr = malloc(nx * 4), *wr = malloc(nw * 4), *dyr = malloc(ny * 4);
        float *gy = malloc(ny * 4), *gdx = malloc(nx * 4), *gdw = malloc(nw * 4);
        double *ry = malloc(ny * 8), *rym = malloc(ny * 8), *rdx = malloc(nx * 8),
               *rdxm = malloc(nx * 8), *rdw = malloc(nw * 8), *rdwm = malloc(nw * 8);
        void *x_d = NULL, *w_d = NULL, *dy_d = NULL, *y_d = NULL, *dx_d = NULL, *dw_d = NULL,
             *wk = NULL;
        if (!(x && w && dy && xr && wr && dyr && gy && gdx && gdw && ry && rym && rdx && rdxm &&
              rdw && rdwm)) {
            CHECK_MSG(0, "host allocation");
        } else {
            for (size_t i = 0; i < nx; i++)
                xr[i] = bf16_round(x[i]);
            for (size_t i = 0; i < nw; i++)
                wr[i] = bf16_round(w[i]);
            for (size_t i = 0; i < ny; i++)
                dyr[i] = bf16_round(dy[i]);
            x_d = to_dev(x, nx * 4), w_d = to_dev(w, nw * 4), dy_d = to_dev(dy, ny * 4);
            CHECK(bi->buf_alloc(cx, ny * 4, &y_d) == DG_OK &&
                  bi->buf_alloc(cx, nx * 4, &dx_d) == DG_OK &&
                  bi->buf_alloc(cx, nw * 4, &dw_d) == DG_OK &&
                  bi->buf_alloc(cx, ws + 4, &wk) == DG_OK);
        }
        if (x_d && w_d && dy_d && y_d && dx_d && dw_d && wk) {
            CHECK_MSG(bi->conv2d_fwd(cx, &s, R(x_d), R(w_d), (dg_ref){NULL, 0}, R(y_d), R(wk)) ==
                              DG_OK &&
                          bi->conv2d_bwd(cx, &s, R(x_d), R(w_d), R(dy_d), R(dx_d), R(dw_d),
                                         (dg_ref){NULL, 0}, R(wk)) == DG_OK,
                      "bf16 conv on %s (%s): %s", routes[r], layouts[r], bi->last_error(cx));
            from_dev(y_d, gy, ny * 4), from_dev(dx_d, gdx, nx * 4), from_dev(dw_d, gdw, nw * 4);
            ref_conv_fwd(&s, xr, wr, NULL, 0, s.n, ry, rym);
            ref_conv_bwd(&s, xr, wr, dyr, 0, s.n, rdx, rdxm, NULL, 0, rdw, rdwm, NULL, NULL);
            double ey = tf32_err(gy, ry, rym, ny), ex = tf32_err(gdx, rdx, rdxm, nx),
                   ew = tf32_err(gdw, rdw, rdwm, nw);
            CHECK_MSG(ey <= bound && ex <= bound && ew <= bound,
                      "bf16 conv on %s against the rounded inputs: y %.3g dx %.3g dw %.3g > %.3g",
                      routes[r], ey, ex, ew, bound);
            ref_conv_fwd(&s, x, w, NULL, 0, s.n, ry, rym);
            double eu = tf32_err(gy, ry, rym, ny);
            CHECK_MSG(eu >= 3e-5,
                      "bf16 conv on %s: y within %.3g of the unrounded inputs' "
                      "convolution: inputs not rounded to bf16?",
                      routes[r], eu);
            printf("bf16 conv on %s: against rounded inputs y %.3g dx %.3g dw %.3g (bound %.3g); "
                   "against unrounded %.3g\n",
                   routes[r], ey, ex, ew, bound, eu);
        }
        bi->versions(cx, text, sizeof text);
        char want[96];
        snprintf(want, sizeof want, "conv n3 c24>40 %dx33 k3x3 s1: fwd", s.h);
        const char *at = strstr(text, want), *semi = at ? strchr(at, ';') : NULL;
        const char *route = at ? strstr(at, named[r]) : NULL;
        CHECK_MSG(route && (!semi || route < semi), "versions for the %s route (%s): %s", routes[r],
                  layouts[r], at ? at : text);
        bi->buf_free(cx, x_d), bi->buf_free(cx, w_d), bi->buf_free(cx, dy_d);
        bi->buf_free(cx, y_d), bi->buf_free(cx, dx_d), bi->buf_free(cx, dw_d), bi->buf_free(cx, wk);
        free(x), free(w), free(dy), free(xr), free(wr), free(dyr), free(gy), free(gdx), free(gdw);
        free(ry), free(rym), free(rdx), free(rdxm), free(rdw), free(rdwm);
    }
    if (saved)
        setenv("DEVGATE_CUDA_BF16_CONV", saved, 1);
    else
        unsetenv("DEVGATE_CUDA_BF16_CONV");
    unsetenv("DEVGATE_CUDA_BF16_LAYOUT");
    free(saved);
    CHECK(bi->set_math(cx, 0) == DG_OK);
}

/* Whether device buffers x and y hold the same n floats, bit for bit. */
static void same_bits(void *x, void *y, size_t n, const char *what)
{
    float *a = malloc(n * 4), *b = malloc(n * 4);
    size_t bad = n;
    if (a && b) {
        from_dev(x, a, n * 4);
        from_dev(y, b, n * 4);
        for (size_t i = 0; i < n && bad == n; i++)
            if (memcmp(&a[i], &b[i], 4) != 0)
                bad = i;
    }
    CHECK_MSG(a && b && bad == n, "%s: element %zu differs (%g fused, %g unfused)", what, bad,
              a && b && bad < n ? a[bad] : 0.0, a && b && bad < n ? b[bad] : 0.0);
    free(a), free(b);
}

/* The fused calls at math mode `mode` (0 fp32, 1 TF32, 2 bf16): gemm_ep with
 * each epilogue the trainer uses (bias + ReLU, bias, the ReLU's mask, all
 * three) in the four transposes, and conv2d_fwd_ep (bias, with and without
 * ReLU), each equal bit for bit to the unfused calls (gemm, bias_add,
 * relu_fwd, relu_bwd; conv2d_fwd, relu_fwd); a mask on a convolution is
 * refused; DEVGATE_CUDA_FUSE=off offers no fused calls. */
static void fused_calls(int mode, bool dnn)
{
    enum { M = 67, N = 45, K = 130 };
    char what[128];
    CHECK(bi->fusion && bi->gemm_ep && bi->conv2d_fwd_ep);
    if (!bi->fusion || !bi->gemm_ep || !bi->conv2d_fwd_ep)
        return;
    CHECK(bi->fusion(cx) == (DG_FUSE_GEMM | DG_FUSE_CONV));
    setenv("DEVGATE_CUDA_FUSE", "off", 1);
    CHECK(bi->fusion(cx) == 0);
    unsetenv("DEVGATE_CUDA_FUSE");
    CHECK_MSG(bi->set_math(cx, mode) == DG_OK, "set_math(%d): %s", mode, bi->last_error(cx));
    float *ha = frnd((size_t)M * K, 81), *hb = frnd((size_t)K * N, 82), *hbias = frnd(64, 83),
          *hmask = frnd((size_t)M * N, 84);
    void *a = to_dev(ha, (size_t)M * K * 4), *b = to_dev(hb, (size_t)K * N * 4),
         *bias = to_dev(hbias, 64 * 4), *mask = to_dev(hmask, (size_t)M * N * 4), *f = NULL,
         *u = NULL;
    CHECK(bi->buf_alloc(cx, (size_t)M * N * 4, &f) == DG_OK);
    CHECK(bi->buf_alloc(cx, (size_t)M * N * 4, &u) == DG_OK);
    const dg_epilogue eps[] = {{R(bias), true, {NULL, 0}},
                               {R(bias), false, {NULL, 0}},
                               {{NULL, 0}, false, R(mask)},
                               {R(bias), true, R(mask)}};
    for (int t = 0; a && b && bias && mask && f && u && t < 4; t++)
        for (size_t e = 0; e < sizeof eps / sizeof eps[0]; e++) {
            bool ta = t & 1, tb = t & 2;
            int lda = ta ? M : K, ldb = tb ? K : N;
            const dg_epilogue *ep = &eps[e];
            snprintf(what, sizeof what, "math %d gemm_ep ta=%d tb=%d epilogue %zu", mode, ta, tb,
                     e);
            CHECK_MSG(bi->gemm_ep(cx, ta, tb, M, N, K, R(a), lda, R(b), ldb, R(f), N, ep) == DG_OK,
                      "%s: %s", what, bi->last_error(cx));
            CHECK(bi->gemm(cx, ta, tb, M, N, K, 1.0f, R(a), lda, R(b), ldb, 0.0f, R(u), N) ==
                  DG_OK);
            if (ep->bias.buf)
                CHECK(bi->bias_add(cx, R(u), ep->bias, M, N, 1) == DG_OK);
            if (ep->relu)
                CHECK(bi->relu_fwd(cx, R(u), R(u), (size_t)M * N) == DG_OK);
            if (ep->mask.buf)
                CHECK(bi->relu_bwd(cx, ep->mask, R(u), R(u), (size_t)M * N) == DG_OK);
            same_bits(f, u, (size_t)M * N, what);
        }
    bi->buf_free(cx, f), bi->buf_free(cx, u);
    /* Convolutions: a plane of 100 (bias a block per plane) and one of 9. */
    static const int shapes[][6] = {{3, 5, 12, 12, 7, 3}, {2, 4, 5, 5, 64, 3}};
    for (size_t i = 0; (dnn || mode != 2) && bias && i < 2; i++) {
        dg_conv_shape s = conv_shape(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
                                     shapes[i][4], shapes[i][5], shapes[i][5], 1, 0);
        size_t nx = (size_t)s.n * s.c * s.h * s.w, nw = (size_t)s.k * s.c * s.kh * s.kw;
        size_t ny = (size_t)s.n * s.k * s.ho * s.wo, ws = bi->conv2d_workspace(cx, &s);
        float *hx = frnd(nx, 85 + i), *hw = frnd(nw, 87 + i);
        void *x = to_dev(hx, nx * 4), *w = to_dev(hw, nw * 4), *work = NULL;
        f = u = NULL;
        CHECK(bi->buf_alloc(cx, ny * 4, &f) == DG_OK && bi->buf_alloc(cx, ny * 4, &u) == DG_OK &&
              bi->buf_alloc(cx, ws + 4, &work) == DG_OK);
        for (int relu = 0; x && w && f && u && work && relu < 2; relu++) {
            snprintf(what, sizeof what, "math %d conv2d_fwd_ep n%d c%d>%d %dx%d relu=%d", mode, s.n,
                     s.c, s.k, s.h, s.w, relu);
            dg_epilogue ep = {R(bias), relu != 0, {NULL, 0}};
            CHECK_MSG(bi->conv2d_fwd_ep(cx, &s, R(x), R(w), R(f), R(work), &ep) == DG_OK, "%s: %s",
                      what, bi->last_error(cx));
            CHECK(bi->conv2d_fwd(cx, &s, R(x), R(w), R(bias), R(u), R(work)) == DG_OK);
            if (relu)
                CHECK(bi->relu_fwd(cx, R(u), R(u), ny) == DG_OK);
            same_bits(f, u, ny, what);
        }
        dg_epilogue masked = {R(bias), true, R(f)};
        CHECK(bi->conv2d_fwd_ep(cx, &s, R(x), R(w), R(f), R(work), &masked) == DG_ERR_USAGE);
        bi->buf_free(cx, x), bi->buf_free(cx, w), bi->buf_free(cx, f), bi->buf_free(cx, u);
        bi->buf_free(cx, work);
        free(hx), free(hw);
    }
    bi->buf_free(cx, a), bi->buf_free(cx, b), bi->buf_free(cx, bias), bi->buf_free(cx, mask);
    free(ha), free(hb), free(hbias), free(hmask);
    CHECK(bi->set_math(cx, 0) == DG_OK);
}

/* Both conv paths, each in a fresh context opened with DEVGATE_CUDA_CONV set:
 * the conv checks, fp32 (not TF32) accuracy, capture, and the cifar layers
 * timed. Where cuDNN cannot be loaded the cudnn path is reported, not run. */
static void conv_paths(void)
{
    static const char *const paths[] = {"im2col", "cudnn"};
    const char *env = getenv("DEVGATE_CUDA_CONV");
    char *saved = env ? strdup(env) : NULL, text[4096], reason[256];
    void *outer = cx;

    for (int m = 0; m < 2; m++) {
        void *c2 = (void *)1;
        setenv("DEVGATE_CUDA_CONV", paths[m], 1);
        dg_status st = bi->init(0, &c2, reason, sizeof reason);
        if (st != DG_OK && m == 1 && strstr(reason, "cuDNN is not usable")) {
            CHECK(st == DG_ERR_UNAVAILABLE && c2 == NULL);
            printf("conv path cudnn: not run: %s\n", reason);
            continue;
        }
        CHECK_MSG(st == DG_OK, "init with DEVGATE_CUDA_CONV=%s: %s", paths[m], reason);
        if (st != DG_OK)
            continue;
        cx = c2;
        bi->versions(cx, text, sizeof text);
        if (m == 0)
            CHECK_MSG(strstr(text, "conv im2col (DEVGATE_CUDA_CONV=im2col)") != NULL,
                      "versions: \"%s\"", text);
        else
            CHECK_MSG(strstr(text, ", cuDNN ") != NULL, "versions: \"%s\"", text);
        printf("conv path %s: %s\n", paths[m], text);
        conv_cases();
        conv_not_tf32();
        math_mode(1);
        math_mode(2);
        for (int mode = 0; mode < 3; mode++)
            fused_calls(mode, m == 1);
        if (m == 1)
            bf16_routes();
        conv_capture();
        cifar_convs(paths[m]);
        bi->versions(cx, text, sizeof text);
        printf("conv path %s, chosen: %s\n", paths[m], text);
        bi->free(cx);
    }
    cx = outer;

    void *c3 = (void *)1;
    setenv("DEVGATE_CUDA_CONV", "fft", 1);
    CHECK(bi->init(0, &c3, reason, sizeof reason) == DG_ERR_USAGE);
    CHECK(c3 == NULL);
    CHECK_MSG(strstr(reason, "DEVGATE_CUDA_CONV") != NULL, "reason: \"%s\"", reason);
    if (saved)
        setenv("DEVGATE_CUDA_CONV", saved, 1);
    else
        unsetenv("DEVGATE_CUDA_CONV");
    free(saved);

    /* The other knobs refuse a value they do not know the same way, and take
     * each one they document. */
    static const struct {
        const char *name, *good[3];
    } knobs[] = {
        {"DEVGATE_CUDA_FUSE", {"on", "off", ""}},
        {"DEVGATE_CUDA_BF16_CONV", {"auto", "bf16", "tf32"}},
        {"DEVGATE_CUDA_BF16_GEMM", {"fast", "cast", ""}},
        {"DEVGATE_CUDA_BF16_LAYOUT", {"nhwc", "nchw", ""}},
    };
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++) {
        const char *was = getenv(knobs[i].name);
        char *keep = was ? strdup(was) : NULL;
        static const char *bad[] = {"Off", "of", "auto|bf16", "fast "};
        for (int j = 0; j < 4; j++) {
            setenv(knobs[i].name, bad[j], 1);
            c3 = (void *)1;
            CHECK_MSG(bi->init(0, &c3, reason, sizeof reason) == DG_ERR_USAGE, "%s='%s' accepted",
                      knobs[i].name, bad[j]);
            CHECK(c3 == NULL);
            CHECK_MSG(strstr(reason, knobs[i].name) && strstr(reason, knobs[i].good[1]),
                      "reason: \"%s\"", reason);
        }
        for (int j = 0; j < 3; j++) {
            setenv(knobs[i].name, knobs[i].good[j], 1);
            c3 = NULL;
            dg_status st = bi->init(0, &c3, reason, sizeof reason);
            CHECK_MSG(st == DG_OK, "%s=%s: %s", knobs[i].name, knobs[i].good[j], reason);
            bi->free(c3);
        }
        if (keep)
            setenv(knobs[i].name, keep, 1);
        else
            unsetenv(knobs[i].name);
        free(keep);
    }
}

/* Uploads from page-locked blocks (host_alloc) only enqueue: they must still
 * land before the ops issued after them, and host_wait must keep the block
 * from being rewritten under a copy that has not run. 64 MiB makes the host
 * copy slow enough that a missing stream dependency shows (the relu would read
 * the staging twin before the batch arrived). */
static void pinned_copies(void)
{
    const size_t n = (size_t)16 << 20, bytes = n * sizeof(float);
    float *a = NULL, *back = malloc(bytes);
    void *x = NULL, *y = NULL, *blk[65] = {0};

    CHECK(bi->host_alloc && bi->host_free && bi->host_wait);
    if (!bi->host_alloc || !back) {
        free(back);
        return;
    }
    CHECK(bi->host_alloc(cx, bytes, (void **)&a) == DG_OK && a != NULL);
    CHECK(bi->buf_alloc(cx, bytes, &x) == DG_OK);
    CHECK(bi->buf_alloc(cx, bytes, &y) == DG_OK);
    if (a && x && y) {
        for (int round = 0; round < 3; round++) {
            for (size_t i = 0; i < n; i++)
                a[i] = (float)((i % 1000) + 1 + round);
            CHECK(bi->upload(cx, x, 0, a, bytes) == DG_OK);
            CHECK(bi->relu_fwd(cx, R(x), R(y), n) == DG_OK);
            /* rewrite the block for the next round once the copy has run */
            CHECK(bi->host_wait(cx, a + 7) == DG_OK);
            for (size_t i = 0; i < n; i++)
                a[i] = -1.0f;
            CHECK(bi->upload(cx, x, 64, a + 16, 4096) == DG_OK); /* a sub-range, at an offset */
            from_dev(y, back, bytes);
            size_t bad = 0;
            for (size_t i = 0; i < n; i++)
                bad += back[i] != (float)((i % 1000) + 1 + round);
            CHECK_MSG(bad == 0, "round %d: %zu of %zu relu outputs did not see the upload", round,
                      bad, n);
            CHECK(bi->download(cx, x, 0, back, 64 + 4096 + 64) == DG_OK);
            CHECK(back[15] == (float)(15 % 1000 + 1 + round) && back[16] == -1.0f &&
                  back[16 + 1023] == -1.0f && back[16 + 1024] == (float)(1040 % 1000 + 1 + round));
            CHECK(bi->host_wait(cx, a) == DG_OK);
        }
    }
    /* plain memory is not a block; the slots run out; NULL is accepted */
    CHECK(bi->host_wait(cx, back) == DG_ERR_USAGE);
    CHECK(strstr(bi->last_error(cx), "page-locked") != NULL);
    int got = 0;
    for (int i = 0; i < 65; i++)
        if (bi->host_alloc(cx, 64, &blk[i]) == DG_OK)
            got++;
    CHECK_MSG(got == 63, "%d small blocks beside the big one (64 slots)", got);
    for (int i = 0; i < 65; i++)
        bi->host_free(cx, blk[i]);
    bi->host_free(cx, NULL);
    bi->host_free(cx, a);
    CHECK(bi->host_alloc(cx, 64, &blk[0]) == DG_OK); /* a freed slot is reused */
    bi->host_free(cx, blk[0]);
    bi->buf_free(cx, x);
    bi->buf_free(cx, y);
    free(back);
}

/* Every op of interface v2 against double references. */
static void ops(void)
{
    CHECK(bi->fill && bi->bias_add && bi->bias_grad && bi->relu_fwd && bi->relu_bwd &&
          bi->maxpool_fwd && bi->maxpool_bwd && bi->conv2d_workspace && bi->conv2d_fwd &&
          bi->conv2d_bwd && bi->xent && bi->sgd);
    for (int op = 0; op < DG_OP__COUNT; op++)
        CHECK_MSG(
            bi->supports_op(
                cx, &(dg_op_desc){.op = (dg_op)op, .call = DG_CALL__COUNT, .any_shape = true}),
            "op %d not supported", op);
    t_fill();
    t_bias(3, 5, 7);
    t_bias(65, 37, 1);
    t_bias(1000, 37, 1);  /* fc rows in uneven slices */
    t_bias(4096, 512, 1); /* mlp's first layer at batch 4096 */
    t_bias(4096, 10, 1);
    t_bias(1, 1, 1);
    t_bias(2, 3, 1000);
    t_relu();
    t_maxpool(2, 3, 9, 7, 3, 2, false);
    t_maxpool(1, 2, 8, 8, 2, 2, true);
    t_maxpool(3, 1, 5, 6, 3, 1, true);
    conv_cases();
    t_xent(5, 7, false);
    t_xent(1, 3, false);
    t_xent(37, 10, true);
    t_xent(3, 1500, false);
    t_xent(20000, 10, false);
    t_sgd(0.9f, 1e-4f);
    t_sgd(0.0f, 0.0f);
    t_sgd(0.0f, 5e-4f);
    t_events();
    t_capture();
}

/* Printed timings: a cifar-sized conv layer (two chunks of 128 images, also
 * checked at the chunk edges) and the MLP step eager vs captured. */
static void timings(void)
{
    static const int edges[] = {0, 127, 128, 255};
    t_conv(conv_shape(256, 32, 32, 32, 32, 3, 3, 1, 1), true, true, edges, 4, 24, 10);
    t_mlp();
}

int main(void)
{
    const char *dir = getenv("DEVGATE_PLUGIN_DIR");
    char path[4096], reason[256], text[512];

    if (!dir || !*dir)
        check_skip("DEVGATE_PLUGIN_DIR is not set");
    snprintf(path, sizeof path, "%s/libdevgate-cuda.so", dir);
    if (access(path, R_OK) != 0)
        check_skip("libdevgate-cuda.so not built (DEVGATE_PLUGIN_DIR has none)");

    void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK_MSG(so != NULL, "dlopen: %s", dlerror());
    if (!so)
        CHECK_DONE();
    dg_backend_iface_fn fn;
    *(void **)&fn = dlsym(so, DG_PLUGIN_SYMBOL);
    CHECK_MSG(fn != NULL, "dlsym " DG_PLUGIN_SYMBOL ": %s", dlerror());
    if (!fn)
        CHECK_DONE();
    bi = fn();
    CHECK(bi != NULL);
    if (!bi)
        CHECK_DONE();
    CHECK(bi->version == DG_BACKEND_IFACE_VERSION);
    if (bi->version != DG_BACKEND_IFACE_VERSION)
        CHECK_DONE();
    CHECK_STR(bi->name, "cuda");
    CHECK(bi->init && bi->free && bi->last_error && bi->device_count && bi->device_info &&
          bi->versions && bi->buf_alloc && bi->buf_free && bi->upload && bi->download && bi->gemm &&
          bi->synchronize && bi->supports_op);
    CHECK_STR(bi->last_error(NULL), "cuda: not initialised");
    bi->versions(NULL, text, sizeof text);
    CHECK_MSG(strstr(text, "runtime") && strstr(text, "cuBLAS"), "versions: \"%s\"", text);

    reason[0] = 'x';
    reason[1] = '\0';
    cx = (void *)1;
    dg_status st = bi->init(0, &cx, reason, sizeof reason);
    if (st != DG_OK) {
        CHECK(cx == NULL);
        CHECK(reason[0] != '\0' && strcmp(reason, "x") != 0);
        CHECK_MSG(strstr(reason, "driver") || strstr(reason, "device"), "reason: \"%s\"", reason);
        CHECK_MSG(st == DG_ERR_UNAVAILABLE || st == DG_ERR_NOT_FOUND, "status %d", (int)st);
        CHECK(bi->device_count(NULL) == 0 || st != DG_ERR_UNAVAILABLE);
        if (check_failed)
            CHECK_DONE();
        printf("%d passed, %d failed\n", check_passed, check_failed);
        char why[400];
        snprintf(why, sizeof why, "no CUDA device: %s", reason);
        check_skip(why);
    }
    CHECK(cx != NULL);
    CHECK(reason[0] == '\0');

    int count = bi->device_count(cx);
    CHECK(count >= 1);
    void *cx2 = (void *)1;
    CHECK(bi->init(count, &cx2, reason, sizeof reason) == DG_ERR_NOT_FOUND);
    CHECK(cx2 == NULL);
    CHECK_MSG(strstr(reason, "out of range") != NULL, "reason: \"%s\"", reason);

    dg_device_info di;
    CHECK(bi->device_info(cx, 0, &di) == DG_OK);
    CHECK(di.name[0] != '\0');
    CHECK_STR(di.vendor, "NVIDIA");
    CHECK(strncmp(di.platform, "CUDA ", 5) == 0);
    CHECK(strstr(di.driver_version, "driver ") && strstr(di.driver_version, "runtime "));
    CHECK(di.mem_total.valid && di.mem_total.value > 0);
    CHECK(di.mem_free.valid && di.mem_free.value > 0);
    CHECK(di.mem_free.value <= di.mem_total.value);
    CHECK(di.compute_units.valid && di.compute_units.value >= 1);
    CHECK(bi->device_info(cx, count, &di) == DG_ERR_NOT_FOUND);
    bi->versions(cx, text, sizeof text);
    CHECK(strstr(text, "CUDA driver ") && strstr(text, "cuBLAS "));
    CHECK(bi->device_info(cx, 0, &di) == DG_OK);
    printf("device 0: %s, %s, %s, %.0f SMs, %.1f / %.1f GiB free\n", di.name, di.driver_version,
           di.platform, di.compute_units.value, di.mem_free.value / (1 << 30),
           di.mem_total.value / (1 << 30));
    printf("versions: %s\n", text);
    CHECK(bi->supports_op(
        cx, &(dg_op_desc){.op = DG_OP_GEMM, .call = DG_CALL__COUNT, .any_shape = true}));
    CHECK(!bi->supports_op(
        cx, &(dg_op_desc){.op = DG_OP__COUNT, .call = DG_CALL__COUNT, .any_shape = true}));

    copies();
    pinned_copies();
    gemm_usage();
    static const int shapes[][3] = {
        {1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {512, 512, 512}, {1000, 999, 1001}};
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            gemm_case(ta, tb, shapes[i][0], shapes[i][1], shapes[i][2], 0, 1.0f, 0.0f);
        gemm_case(ta, tb, 33, 17, 65, 3, 1.5f, -0.5f);
        gemm_case(ta, tb, 1, 9, 4, 2, -1.0f, 1.0f);
    }
    fp32_not_tf32();
    oom();
    ops();
    perf();
    timings();
    conv_paths();

    bi->free(cx);
    dlclose(so);
    CHECK_DONE();
}
