/* OpenCL GEMM choice and split-K (src/backend/opencl/ocl_gemm_split.h).
 * Without a device: the automatic choice (gpu_pick's rows, through
 * dg_ocl_gemm_pick) on the H200 (132 compute units), a small GPU and PoCL's
 * CPU device for the fixture's shapes of bench/gemm_vs_clblast.c, with the
 * k-slices it splits each into; dg_ocl_split_slices' forced counts, caps and
 * limits. On the device (PoCL here) with the split forced
 * (DEVGATE_OPENCL_SPLITK) on the db32 and db64 kernels: all four transposes
 * at odd sizes with k not a multiple of the slice, alpha and beta, and
 * gemm_ep with each epilogue (bias per column, ReLU, ReLU's mask, all three)
 * against a float64 reference; batched strided products; each result
 * bit-identical run to run; two commands a split product, one unsplit;
 * convolutions (their batched im2col products split) within float rounding
 * of the unsplit ones; bad DEVGATE_OPENCL_SPLITK values refused. */
#include "backend/backend.h"
#include "backend/opencl/ocl_gemm_split.h"
#include "backend/opencl/opencl_hooks.h"
#include "core/core.h"

#include "check.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const dg_backend_iface *be;

/* ---- the choice, without a device ------------------------------------------- */

static void test_pick(void)
{
    static const struct {
        bool cpu;
        unsigned cus;
        const char *shape;
        bool ta, tb;
        int m, n, k, batch;
        const char *want;
        int slices;
    } cases[] = {
        /* H200: the squares; sq512's 64 tiles of db64 split into 4 slices of 128 */
        {false, 132, "sq512", false, false, 512, 512, 512, 1, "db64", 4},
        {false, 132, "sq1024", false, false, 1024, 1024, 1024, 1, "db64", 1},
        {false, 132, "sq2048", false, false, 2048, 2048, 2048, 1, "tiled128", 1},
        {false, 132, "sq4096", false, false, 4096, 4096, 4096, 1, "tiled128", 1},
        /* H200: the under-filled products with a long k split (issue 24's weak shapes) */
        {false, 132, "cifar256.fc1.fwd", false, true, 256, 256, 4096, 1, "db64", 16},
        {false, 132, "mlp4096.fc2.dw", true, false, 256, 512, 4096, 1, "db64", 9},
        {false, 132, "mlp256.fc1.fwd", false, true, 256, 512, 784, 1, "db64", 6},
        {false, 132, "mlp256.fc2.fwd", false, true, 256, 256, 512, 1, "db64", 4},
        {false, 132, "mlp4096.fc1.dw", true, false, 512, 784, 4096, 1, "db64", 3},
        /* ... on 32-wide tiles where 64-wide ones pad too much */
        {false, 132, "mlp4096.fc3.dw", true, false, 10, 256, 4096, 1, "db32", 32},
        /* H200: k 256 is not split (every such product lost by it) */
        {false, 132, "mlp256.fc1.dw", true, false, 512, 784, 256, 1, "db64", 1},
        {false, 132, "mlp256.fc2.dx", false, false, 256, 512, 256, 1, "db32", 1},
        {false, 132, "cifar256.fc1.dw", true, false, 256, 4096, 256, 1, "db64", 1},
        {false, 132, "lenet256.fc1.fwd", false, true, 256, 120, 256, 1, "db32", 1},
        {false, 132, "lenet256.conv2.dx", true, false, 150, 64, 16, 256, "db32", 1},
        /* H200: filled products are not split */
        {false, 132, "mlp4096.fc1.fwd", false, true, 4096, 512, 784, 1, "db64", 1},
        {false, 132, "cifar256.fc1.dx", false, false, 256, 4096, 256, 1, "db64", 1},
        /* H200: batched products split below two work-groups a compute unit */
        {false, 132, "lenet256.conv1.dw", false, true, 6, 25, 576, 256, "db32", 2},
        {false, 132, "cifar256.conv1.dw", false, true, 32, 27, 1024, 256, "db32", 2},
        /* ... others fill the device: not split */
        {false, 132, "cifar256.conv2.fwd", false, false, 32, 1024, 288, 256, "db32", 1},
        {false, 132, "cifar256.conv2.dw", false, true, 32, 288, 1024, 256, "db32", 1},
        {false, 132, "cifar256.conv4.dx", true, false, 576, 256, 64, 256, "tiled128", 1},
        {false, 132, "cifar256.conv3.dx", true, false, 288, 256, 64, 256, "db64", 1},
        {false, 132, "cifar256.conv4.fwd", false, false, 64, 256, 576, 256, "db64", 1},
        /* a small GPU: 8 compute units are filled sooner */
        {false, 8, "sq512", false, false, 512, 512, 512, 1, "tiled128", 1},
        {false, 8, "mlp256.fc2.fwd", false, true, 256, 256, 512, 1, "db64", 1},
        {false, 8, "lenet256.fc1.fwd", false, true, 256, 120, 256, 1, "db64", 1},
        {false, 8, "cifar256.fc1.fwd", false, true, 256, 256, 4096, 1, "db64", 1},
        /* PoCL's CPU device: always the register-blocked vec kernel, never split */
        {true, 2, "sq512", false, false, 512, 512, 512, 1, "vec", 1},
        {true, 2, "cifar256.fc1.fwd", false, true, 256, 256, 4096, 1, "vec", 1},
        {true, 2, "mlp4096.fc1.dw", true, false, 512, 784, 4096, 1, "vec", 1},
        {true, 64, "cifar256.conv4.dx", true, false, 576, 256, 64, 256, "vec", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int slices = -1;
        const char *got =
            dg_ocl_gemm_pick(cases[i].cpu, cases[i].cus, cases[i].ta, cases[i].tb, cases[i].m,
                             cases[i].n, cases[i].k, cases[i].batch, &slices);
        CHECK_MSG(strcmp(got, cases[i].want) == 0 && slices == cases[i].slices,
                  "%s on %s with %u compute units: %s in %d slices, want %s in %d", cases[i].shape,
                  cases[i].cpu ? "cpu" : "gpu", cases[i].cus, got, slices, cases[i].want,
                  cases[i].slices);
    }
    CHECK_STR(dg_ocl_gemm_pick(false, 132, false, false, 512, 512, 512, 1, NULL), "db64");
}

/* dg_ocl_split_slices and dg_ocl_split_depth: forced counts, the limits. */
static void test_slices(void)
{
    const int A = OCL_SPLIT_AUTO;
    CHECK(dg_ocl_split_slices(0, 132, 64, 512, 512, 512, 1, 0) == 1);  /* off */
    CHECK(dg_ocl_split_slices(A, 132, 64, 512, 512, 512, 1, 0) == 4);  /* auto */
    CHECK(dg_ocl_split_slices(A, 132, 128, 512, 512, 512, 1, 0) == 1); /* no split form */
    CHECK(dg_ocl_split_slices(A, 132, 64, 512, 512, 256, 1, 0) == 1);  /* k short */
    CHECK(dg_ocl_split_slices(A, 64, 64, 512, 512, 4096, 1, 0) == 1);  /* tiles fill */
    CHECK(dg_ocl_split_slices(A, 132, 64, 64, 64, 4096, 264, 0) == 1); /* the batch fills */
    CHECK(dg_ocl_split_slices(A, 132, 64, 64, 64, 4096, 200, 0) == 2); /* < 2 a unit */
    CHECK(dg_ocl_split_slices(A, 132, 64, 64, 64, 4096, 33, 0) == 8);
    CHECK(dg_ocl_split_slices(A, 132, 64, 512, 512, 4096, 1, 0) == 5);   /* 64 tiles */
    CHECK(dg_ocl_split_slices(A, 132, 64, 1024, 1024, 4096, 1, 0) == 1); /* 256 tiles */
    CHECK(dg_ocl_split_slices(3, 132, 32, 37, 29, 301, 1, 0) == 3);      /* forced: 112, 112, 77 */
    CHECK(dg_ocl_split_depth(301, 3) == 112);
    CHECK(dg_ocl_split_slices(3, 1000, 32, 4096, 4096, 20, 1, 0) == 2); /* 16 + 4 */
    CHECK(dg_ocl_split_slices(64, 132, 32, 8, 8, 100, 1, 0) == 7);      /* 16 deep each */
    CHECK(dg_ocl_split_slices(1, 132, 32, 8, 8, 4096, 1, 0) == 1);
    CHECK(dg_ocl_split_slices(99, 132, 32, 8, 8, 1 << 20, 1, 0) == OCL_SPLIT_MAX);
    CHECK(dg_ocl_split_slices(8, 132, 32, 8, 8, 4096, 9000, 0) == 7); /* 7 x 9000 <= 65535 */
    CHECK(dg_ocl_split_slices(8, 132, 32, 8, 8, 4096, 40000, 0) == 1);
    CHECK(dg_ocl_split_slices(16, 132, 64, 256, 256, 4096, 1, 1 << 20) == 4); /* the cap */
    CHECK(dg_ocl_split_slices(16, 132, 64, 256, 256, 4096, 1, 1 << 18) == 1);
    CHECK(dg_ocl_split_slices(4, 132, 64, 0, 256, 4096, 1, 0) == 1);
    CHECK(dg_ocl_split_slices(4, 132, 64, 256, 256, 1, 1, 0) == 1);
}

/* ---- on the device --------------------------------------------------------- */

/* A device buffer holding the n floats of h (one float when n is 0). */
static void *put(void *ctx, const float *h, size_t n)
{
    void *buf = NULL;
    size_t bytes = (n ? n : 1) * sizeof(float);
    if (be->buf_alloc(ctx, bytes, &buf) != DG_OK)
        return NULL;
    if (n && be->upload(ctx, buf, 0, h, n * sizeof(float)) != DG_OK) {
        be->buf_free(ctx, buf);
        return NULL;
    }
    return buf;
}

static float *rnd(dg_rng *r, size_t n)
{
    float *h = dg_malloc((n ? n : 1) * sizeof *h);
    if (h)
        dg_rng_uniform(r, h, n ? n : 1, -1.0f, 1.0f);
    return h;
}

/* op(X)[i][p] of a row-major matrix with leading dim ld, transposed when t. */
static double at(const float *x, bool t, int ld, int i, int p)
{
    return t ? x[(size_t)p * ld + i] : x[(size_t)i * ld + p];
}

/* The epilogues of the test (kernels.cl's order: bias, ReLU, mask). */
enum { EP_NONE, EP_BIAS, EP_BIAS_RELU, EP_MASK, EP_ALL, EP_COUNT };

/* Whether got (m x n, ld ldc) matches alpha * op(A) op(B) + beta * c0 with
 * the epilogue ep in float64, within 2 k eps of the terms' magnitude. */
static int count_wrong(const float *got, bool ta, bool tb, int m, int n, int k, float alpha,
                       const float *a, int lda, const float *b, int ldb, float beta,
                       const float *c0, int ldc, int ep, const float *bias, const float *mask)
{
    int bad = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0, mag = 0;
            for (int p = 0; p < k; p++) {
                double x = at(a, ta, lda, i, p) * at(b, tb, ldb, p, j);
                s += x;
                mag += fabs(x);
            }
            double v = alpha * s + (beta != 0.0f ? beta * (double)c0[(size_t)i * ldc + j] : 0.0);
            mag = fabs((double)alpha) * mag + fabs((double)beta * c0[(size_t)i * ldc + j]);
            if (ep != EP_NONE && ep != EP_MASK)
                v += bias[j];
            if (ep == EP_BIAS_RELU || ep == EP_ALL)
                v = v > 0 ? v : 0;
            if ((ep == EP_MASK || ep == EP_ALL) && !(mask[(size_t)i * ldc + j] > 0.0f))
                v = 0;
            double tol = 2.0 * (k + 2) * FLT_EPSILON * (mag + 1.0);
            if (!(fabs(got[(size_t)i * ldc + j] - v) <= tol) && bad++ < 3)
                fprintf(stderr, "  C[%d,%d] = %.9g, want %.9g (tol %.2g)\n", i, j,
                        (double)got[(size_t)i * ldc + j], v, tol);
        }
    return bad;
}

/* One product (gemm, or gemm_ep with epilogue ep) at padded leading dims:
 * the split it takes, its commands, its values against float64, and the same
 * bits from a second run. */
static void gemm_case(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha, float beta,
                      int ep, int want_slices)
{
    int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
    size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb, nc = (size_t)m * ldc;
    dg_rng r;
    dg_rng_init(&r, 5u + (uint64_t)m * 7 + (uint64_t)n * 11 + (uint64_t)k * 13 + (uint64_t)ep, 3);
    float *a = rnd(&r, na), *b = rnd(&r, nb), *c0 = rnd(&r, nc), *bias = rnd(&r, (size_t)n);
    float *mask = rnd(&r, nc), *got = dg_malloc(nc * 4), *again = dg_malloc(nc * 4);
    void *da = put(ctx, a, na), *db = put(ctx, b, nb), *dc = put(ctx, c0, nc);
    void *dbias = put(ctx, bias, (size_t)n), *dmask = put(ctx, mask, nc);
    CHECK(a && b && c0 && bias && mask && got && again && da && db && dc && dbias && dmask);
    char what[128];
    snprintf(what, sizeof what, "%s%c%c m=%d n=%d k=%d alpha=%g beta=%g epilogue %d",
             ep ? "gemm_ep " : "gemm ", ta ? 't' : 'n', tb ? 't' : 'n', m, n, k, (double)alpha,
             (double)beta, ep);
    int slices = 0;
    dg_ocl_gemm_variant(ctx, ta, tb, m, n, k, 1, &slices);
    CHECK_MSG(slices == want_slices, "%s: %d slices, want %d", what, slices, want_slices);
    dg_epilogue e = {{ep != EP_NONE && ep != EP_MASK ? dbias : NULL, 0},
                     ep == EP_BIAS_RELU || ep == EP_ALL,
                     {ep == EP_MASK || ep == EP_ALL ? dmask : NULL, 0}};
    if (ep != EP_NONE) {
        alpha = 1.0f;
        beta = 0.0f;
    }
    for (int run = 0; run < 2 && da && db && dc && dbias && dmask && got && again; run++) {
        uint64_t e0 = 0, e1 = 0, w = 0;
        CHECK(be->upload(ctx, dc, 0, c0, nc * 4) == DG_OK);
        CHECK(dg_ocl_counts(ctx, &e0, &w) == DG_OK);
        dg_status st = ep == EP_NONE ? be->gemm(ctx, ta, tb, m, n, k, alpha, (dg_ref){da, 0}, lda,
                                                (dg_ref){db, 0}, ldb, beta, (dg_ref){dc, 0}, ldc)
                                     : be->gemm_ep(ctx, ta, tb, m, n, k, (dg_ref){da, 0}, lda,
                                                   (dg_ref){db, 0}, ldb, (dg_ref){dc, 0}, ldc, &e);
        CHECK_MSG(st == DG_OK, "%s: %s", what, be->last_error(ctx));
        CHECK(dg_ocl_counts(ctx, &e1, &w) == DG_OK);
        CHECK_MSG(e1 - e0 == (want_slices > 1 ? 2u : 1u), "%s: %llu commands", what,
                  (unsigned long long)(e1 - e0));
        float *out = run ? again : got;
        CHECK(be->download(ctx, dc, 0, out, nc * 4) == DG_OK);
    }
    if (got && again && a && b && c0) {
        int bad =
            count_wrong(got, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c0, ldc, ep, bias, mask);
        CHECK_MSG(bad == 0, "%s: %d elements wrong", what, bad);
        CHECK_MSG(memcmp(got, again, nc * 4) == 0, "%s: a second run differs", what);
    }
    void *bufs[] = {da, db, dc, dbias, dmask};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->buf_free(ctx, bufs[i]);
    float *hs[] = {a, b, c0, bias, mask, got, again};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
        dg_free(hs[i]);
}

/* Three strided products in one call (A shared when sa is 0) against float64. */
static void strided_case(void *ctx, bool ta, bool tb, int m, int n, int k, size_t sa)
{
    enum { NB = 3 };
    int lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
    size_t ea = (size_t)m * k, eb = (size_t)k * n, ec = (size_t)m * n;
    size_t sb = eb + 5, sc = ec + 7;
    size_t na = ea + sa * (NB - 1), nb = eb + sb * (NB - 1), nc = ec + sc * (NB - 1);
    dg_rng r;
    dg_rng_init(&r, 77u + (uint64_t)m + (uint64_t)k, 4);
    float *a = rnd(&r, na), *b = rnd(&r, nb), *c0 = rnd(&r, nc), *got = dg_malloc(nc * 4);
    void *da = put(ctx, a, na), *db = put(ctx, b, nb), *dc = put(ctx, c0, nc);
    CHECK(a && b && c0 && got && da && db && dc);
    if (a && b && c0 && got && da && db && dc) {
        dg_status st =
            dg_ocl_gemm_strided(ctx, ta, tb, m, n, k, 0.5f, (dg_ref){da, 0}, lda, sa,
                                (dg_ref){db, 0}, ldb, sb, -1.0f, (dg_ref){dc, 0}, ldc, sc, NB);
        CHECK_MSG(st == DG_OK, "strided: %s", be->last_error(ctx));
        CHECK(be->download(ctx, dc, 0, got, nc * 4) == DG_OK);
        for (int i = 0; i < NB; i++) {
            int bad = count_wrong(got + sc * i, ta, tb, m, n, k, 0.5f, a + sa * i, lda, b + sb * i,
                                  ldb, -1.0f, c0 + sc * i, ldc, EP_NONE, NULL, NULL);
            CHECK_MSG(bad == 0, "strided %c%c m=%d n=%d k=%d product %d: %d wrong", ta ? 't' : 'n',
                      tb ? 't' : 'n', m, n, k, i, bad);
        }
    }
    be->buf_free(ctx, da);
    be->buf_free(ctx, db);
    be->buf_free(ctx, dc);
    dg_free(a);
    dg_free(b);
    dg_free(c0);
    dg_free(got);
}

/* Every case on a context whose products split into about `force` slices. */
static void test_split(void *ctx, int force)
{
    static const int shapes[][3] = {{37, 29, 301}, {70, 65, 530}, {1, 1, 40}, {64, 64, 20}};
    for (int t = 0; t < 4; t++) {
        bool ta = t & 2, tb = t & 1;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            int ks = dg_ocl_split_depth(k, force), want = (k + ks - 1) / ks;
            gemm_case(ctx, ta, tb, m, n, k, 1.0f, 0.0f, EP_NONE, want);
            gemm_case(ctx, ta, tb, m, n, k, -0.5f, 1.5f, EP_NONE, want);
            for (int ep = EP_BIAS; ep < EP_COUNT; ep++)
                gemm_case(ctx, ta, tb, m, n, k, 1.0f, 0.0f, ep, want);
        }
        gemm_case(ctx, ta, tb, 9, 8, 1, 1.0f, 0.0f, EP_NONE, 1); /* k 1: never split */
        strided_case(ctx, ta, tb, 19, 23, 97, 0);
        strided_case(ctx, ta, tb, 19, 23, 97, 19 * 97 + 3);
    }
}

/* conv2d_fwd and conv2d_bwd (its products batched over a chunk of images)
 * on ctx: y, dx, dw, db into out. */
static bool conv_run(void *ctx, const dg_conv_shape *s, float *out)
{
    size_t nx = (size_t)s->n * s->c * s->h * s->w, nw = (size_t)s->k * s->c * s->kh * s->kw;
    size_t ny = (size_t)s->n * s->k * s->ho * s->wo, nk = (size_t)s->k;
    size_t nwork = be->conv2d_workspace(ctx, s) / 4;
    dg_rng r;
    dg_rng_init(&r, 91, 5);
    float *hx = rnd(&r, nx), *hw = rnd(&r, nw), *hb = rnd(&r, nk), *hdy = rnd(&r, ny);
    void *x = put(ctx, hx, nx), *w = put(ctx, hw, nw), *bias = put(ctx, hb, nk);
    void *dy = put(ctx, hdy, ny), *y = NULL, *dx = NULL, *dw = NULL, *db = NULL, *work = NULL;
    bool ok = be->buf_alloc(ctx, ny * 4, &y) == DG_OK && be->buf_alloc(ctx, nx * 4, &dx) == DG_OK &&
              be->buf_alloc(ctx, nw * 4, &dw) == DG_OK &&
              be->buf_alloc(ctx, nk * 4, &db) == DG_OK &&
              be->buf_alloc(ctx, (nwork ? nwork : 1) * 4, &work) == DG_OK && x && w && bias && dy;
    dg_ref z = {work, 0};
    ok = ok &&
         be->conv2d_fwd(ctx, s, (dg_ref){x, 0}, (dg_ref){w, 0}, (dg_ref){bias, 0}, (dg_ref){y, 0},
                        z) == DG_OK &&
         be->conv2d_bwd(ctx, s, (dg_ref){x, 0}, (dg_ref){w, 0}, (dg_ref){dy, 0}, (dg_ref){dx, 0},
                        (dg_ref){dw, 0}, (dg_ref){db, 0}, z) == DG_OK &&
         be->download(ctx, y, 0, out, ny * 4) == DG_OK &&
         be->download(ctx, dx, 0, out + ny, nx * 4) == DG_OK &&
         be->download(ctx, dw, 0, out + ny + nx, nw * 4) == DG_OK &&
         be->download(ctx, db, 0, out + ny + nx + nw, nk * 4) == DG_OK;
    void *bufs[] = {x, w, bias, dy, y, dx, dw, db, work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->buf_free(ctx, bufs[i]);
    float *hs[] = {hx, hw, hb, hdy};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
        dg_free(hs[i]);
    return ok;
}

/* Convolutions on split against unsplit: within float rounding. */
static void test_conv(void *split, void *plain, const char *kernel)
{
    /* n, c, h, w, k, kh, kw, stride, pad, ho, wo */
    static const dg_conv_shape shapes[] = {{4, 6, 12, 12, 16, 5, 5, 1, 0, 8, 8},
                                           {3, 3, 9, 7, 5, 3, 3, 2, 1, 5, 4}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        dg_conv_shape s = shapes[i];
        size_t total = (size_t)s.n * s.k * s.ho * s.wo + (size_t)s.n * s.c * s.h * s.w +
                       (size_t)s.k * s.c * s.kh * s.kw + (size_t)s.k;
        float *a = dg_malloc(total * 4), *b = dg_malloc(total * 4);
        bool ok = a && b && conv_run(split, &s, a) && conv_run(plain, &s, b);
        CHECK_MSG(ok, "conv %zu on %s: %s / %s", i, kernel, be->last_error(split),
                  be->last_error(plain));
        size_t bad = 0;
        for (size_t j = 0; ok && j < total; j++)
            if (!(fabs((double)a[j] - b[j]) <= 1e-4 * (1.0 + fabs((double)b[j]))))
                bad++;
        CHECK_MSG(bad == 0, "conv %zu on %s: %zu values differ split against unsplit", i, kernel,
                  bad);
        dg_free(a);
        dg_free(b);
    }
}

/* A context on device 0 with DEVGATE_OPENCL_KERNEL=kernel and
 * DEVGATE_OPENCL_SPLITK=split (NULL: unset); NULL where init fails. */
static void *open_with(const char *kernel, const char *split, dg_status *st, char *reason,
                       size_t len)
{
    setenv("DEVGATE_OPENCL_KERNEL", kernel, 1);
    if (split)
        setenv("DEVGATE_OPENCL_SPLITK", split, 1);
    else
        unsetenv("DEVGATE_OPENCL_SPLITK");
    void *ctx = NULL;
    *st = be->init(0, &ctx, reason, len);
    unsetenv("DEVGATE_OPENCL_SPLITK");
    unsetenv("DEVGATE_OPENCL_KERNEL");
    return *st == DG_OK ? ctx : NULL;
}

int main(void)
{
    be = dg_backend_opencl_iface();
    test_pick();
    test_slices();

    char reason[512] = "";
    dg_status st;
    void *probe = open_with("db32", NULL, &st, reason, sizeof reason);
    if (!probe) {
        printf("opencl init(0) with db32 failed (%s): %s\n", dg_status_name(st), reason);
        CHECK_MSG(st != DG_ERR_BACKEND, "the OpenCL kernels do not build: %s", reason);
        if (st == DG_ERR_BACKEND)
            CHECK_DONE();
        check_skip(reason);
    }
    be->free(probe);
    static const char *const bad[] = {"0", "65", "2x", "-3", "on", " 4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *ctx = open_with("db32", bad[i], &st, reason, sizeof reason);
        CHECK_MSG(!ctx && st == DG_ERR_USAGE && strstr(reason, "DEVGATE_OPENCL_SPLITK"),
                  "DEVGATE_OPENCL_SPLITK=%s: %s", bad[i], reason);
        be->free(ctx);
    }
    static const struct {
        const char *kernel, *split;
        int force;
    } runs[] = {{"db32", "3", 3}, {"db64", "5", 5}, {"tiled", "2", 2}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        void *ctx = open_with(runs[i].kernel, runs[i].split, &st, reason, sizeof reason);
        void *plain = open_with(runs[i].kernel, "off", &st, reason, sizeof reason);
        CHECK_MSG(ctx && plain, "%s split %s: %s", runs[i].kernel, runs[i].split, reason);
        if (ctx && plain) {
            printf("split-K forced to %s on the %s kernels\n", runs[i].split, runs[i].kernel);
            test_split(ctx, runs[i].force);
            test_conv(ctx, plain, runs[i].kernel);
            gemm_case(plain, false, true, 70, 65, 530, 1.0f, 0.0f, EP_ALL, 1); /* off: one */
        }
        be->free(ctx);
        be->free(plain);
    }
    CHECK_DONE();
}
