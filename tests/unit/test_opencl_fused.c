/* OpenCL backend's fused calls (backend.h: fusion, gemm_ep, conv2d_fwd_ep)
 * and its two paths (DEVGATE_OPENCL_PATH): on every GEMM kernel variant the
 * fused product with its epilogue (bias per column, ReLU, the ReLU's mask)
 * equals, bit for bit, the unfused calls it stands for (gemm, bias_add,
 * relu_fwd, relu_bwd) in all four transposes at odd sizes; a fused forward
 * product is one command; the fused convolution (bias and ReLU in the
 * product's epilogue) equals conv2d_fwd then relu_fwd; the old path offers no
 * fused form, keeps its results equal, and runs xent as two commands where
 * the new one takes one, with the same sums; a long bias gradient takes two
 * commands of many work-groups on the new path, one on the old, both within
 * float rounding of float64. */
#include "backend/backend.h"
#include "backend/opencl/opencl_hooks.h"
#include "core/core.h"

#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const dg_backend_iface *be;

/* A device buffer of n floats holding src (or n values from r, some of them
 * exactly zero, when src is NULL); host copy in *host when asked. */
static void *put(void *ctx, dg_rng *r, size_t n, float **host)
{
    n = n ? n : 1; /* an empty operand: one element, never read */
    float *h = dg_malloc(n * sizeof *h);
    void *buf = NULL;
    if (!h)
        return NULL;
    dg_rng_uniform(r, h, n, -1.0f, 1.0f);
    for (size_t i = 3; i < n; i += 7)
        h[i] = 0.0f;
    if (be->buf_alloc(ctx, n * sizeof *h, &buf) != DG_OK ||
        be->upload(ctx, buf, 0, h, n * sizeof *h) != DG_OK) {
        be->buf_free(ctx, buf);
        buf = NULL;
    }
    if (host)
        *host = h;
    else
        dg_free(h);
    return buf;
}

/* Whether device buffers x and y hold the same n floats, bit for bit. */
static bool same(void *ctx, void *x, void *y, size_t n, const char *what)
{
    float *a = dg_malloc(n * 4), *b = dg_malloc(n * 4);
    bool ok = a && b && be->download(ctx, x, 0, a, n * 4) == DG_OK &&
              be->download(ctx, y, 0, b, n * 4) == DG_OK;
    size_t bad = n;
    for (size_t i = 0; ok && i < n && bad == n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0)
            bad = i;
    CHECK_MSG(ok && bad == n, "%s: element %zu differs (%g fused, %g unfused)", what, bad,
              ok && bad < n ? a[bad] : 0.0, ok && bad < n ? b[bad] : 0.0);
    dg_free(a);
    dg_free(b);
    return ok && bad == n;
}

static dg_ref at0(void *buf)
{
    return (dg_ref){buf, 0};
}

/* gemm_ep against gemm, bias_add, relu_fwd and relu_bwd for one shape. */
static void gemm_case(void *ctx, bool ta, bool tb, int m, int n, int k)
{
    dg_rng r;
    dg_rng_init(&r, 17u + (uint64_t)m * 3 + (uint64_t)n * 5 + (uint64_t)k * 7, 9);
    size_t mn = (size_t)m * n;
    void *a = put(ctx, &r, (size_t)m * k, NULL), *b = put(ctx, &r, (size_t)k * n, NULL);
    void *bias = put(ctx, &r, (size_t)n, NULL), *mask = put(ctx, &r, mn, NULL);
    void *f = put(ctx, &r, mn, NULL), *u = put(ctx, &r, mn, NULL);
    CHECK(a && b && bias && mask && f && u);
    int lda = ta ? m : k, ldb = tb ? k : n;
    char what[96];
    /* The three epilogues the trainer uses, and all stages at once. */
    const dg_epilogue eps[] = {{at0(bias), true, {NULL, 0}},
                               {at0(bias), false, {NULL, 0}},
                               {{NULL, 0}, false, at0(mask)},
                               {at0(bias), true, at0(mask)}};
    for (size_t e = 0; a && b && bias && mask && f && u && e < sizeof eps / sizeof eps[0]; e++) {
        const dg_epilogue *ep = &eps[e];
        snprintf(what, sizeof what, "gemm_ep ta=%d tb=%d %dx%dx%d epilogue %zu", ta, tb, m, n, k,
                 e);
        CHECK_MSG(be->gemm_ep(ctx, ta, tb, m, n, k, at0(a), lda, at0(b), ldb, at0(f), n, ep) ==
                      DG_OK,
                  "%s: %s", what, be->last_error(ctx));
        CHECK(be->gemm(ctx, ta, tb, m, n, k, 1.0f, at0(a), lda, at0(b), ldb, 0.0f, at0(u), n) ==
              DG_OK);
        if (ep->bias.buf)
            CHECK(be->bias_add(ctx, at0(u), ep->bias, m, n, 1) == DG_OK);
        if (ep->relu)
            CHECK(be->relu_fwd(ctx, at0(u), at0(u), mn) == DG_OK);
        if (ep->mask.buf)
            CHECK(be->relu_bwd(ctx, ep->mask, at0(u), at0(u), mn) == DG_OK);
        same(ctx, f, u, mn, what);
    }
    void *bufs[] = {a, b, bias, mask, f, u};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->buf_free(ctx, bufs[i]);
}

/* conv2d_fwd_ep (bias and ReLU) against conv2d_fwd then relu_fwd. */
static void conv_case(void *ctx, int n, int c, int h, int w, int k, int ks, int stride, int pad)
{
    dg_conv_shape s = {n, c, h, w, k, ks, ks, stride, pad, 0, 0};
    s.ho = (h + 2 * pad - ks) / stride + 1;
    s.wo = (w + 2 * pad - ks) / stride + 1;
    size_t nx = (size_t)n * c * h * w, nw = (size_t)k * c * ks * ks;
    size_t ny = (size_t)n * k * s.ho * s.wo, nwork = be->conv2d_workspace(ctx, &s) / 4 + 1;
    dg_rng r;
    dg_rng_init(&r, 23u + (uint64_t)(n * 11 + c * 13 + k * 17), 10);
    void *x = put(ctx, &r, nx, NULL), *wt = put(ctx, &r, nw, NULL), *bias = put(ctx, &r, k, NULL);
    void *f = put(ctx, &r, ny, NULL), *u = put(ctx, &r, ny, NULL),
         *work = put(ctx, &r, nwork, NULL);
    CHECK(x && wt && bias && f && u && work);
    char what[96];
    for (int relu = 0; relu < 2 && x && wt && bias && f && u && work; relu++) {
        snprintf(what, sizeof what, "conv2d_fwd_ep n=%d c=%d %dx%d k=%d %dx%d s%d p%d relu=%d", n,
                 c, h, w, k, ks, ks, stride, pad, relu);
        dg_epilogue ep = {at0(bias), relu != 0, {NULL, 0}};
        CHECK_MSG(be->conv2d_fwd_ep(ctx, &s, at0(x), at0(wt), at0(f), at0(work), &ep) == DG_OK,
                  "%s: %s", what, be->last_error(ctx));
        CHECK(be->conv2d_fwd(ctx, &s, at0(x), at0(wt), at0(bias), at0(u), at0(work)) == DG_OK);
        if (relu)
            CHECK(be->relu_fwd(ctx, at0(u), at0(u), ny) == DG_OK);
        same(ctx, f, u, ny, what);
    }
    dg_epilogue masked = {at0(bias), true, at0(f)};
    CHECK(be->conv2d_fwd_ep(ctx, &s, at0(x), at0(wt), at0(f), at0(work), &masked) == DG_ERR_USAGE);
    void *bufs[] = {x, wt, bias, f, u, work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->buf_free(ctx, bufs[i]);
}

/* conv2d_fwd of shape s on ctx from seeded inputs into y (host, ny floats). */
static bool conv_run(void *ctx, const dg_conv_shape *s, float *y, size_t ny)
{
    size_t nx = (size_t)s->n * s->c * s->h * s->w, nw = (size_t)s->k * s->c * s->kh * s->kw;
    dg_rng r;
    dg_rng_init(&r, 41, 14);
    void *x = put(ctx, &r, nx, NULL), *w = put(ctx, &r, nw, NULL), *b = put(ctx, &r, s->k, NULL);
    void *out = put(ctx, &r, ny, NULL),
         *work = put(ctx, &r, be->conv2d_workspace(ctx, s) / 4, NULL);
    bool ok = x && w && b && out && work &&
              be->conv2d_fwd(ctx, s, at0(x), at0(w), at0(b), at0(out), at0(work)) == DG_OK &&
              be->download(ctx, out, 0, y, ny * 4) == DG_OK;
    void *bufs[] = {x, w, b, out, work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->buf_free(ctx, bufs[i]);
    return ok;
}

/* conv2d_bwd of shape s on ctx from seeded inputs: dx, dw, db (host) in out
 * (nx + nw + k floats). */
static bool conv_bwd_run(void *ctx, const dg_conv_shape *s, float *out)
{
    size_t nx = (size_t)s->n * s->c * s->h * s->w, nw = (size_t)s->k * s->c * s->kh * s->kw;
    size_t ny = (size_t)s->n * s->k * s->ho * s->wo;
    dg_rng r;
    dg_rng_init(&r, 43, 15);
    void *x = put(ctx, &r, nx, NULL), *w = put(ctx, &r, nw, NULL), *dy = put(ctx, &r, ny, NULL);
    void *dx = put(ctx, &r, nx, NULL), *dw = put(ctx, &r, nw, NULL), *db = put(ctx, &r, s->k, NULL);
    void *work = put(ctx, &r, be->conv2d_workspace(ctx, s) / 4, NULL);
    bool ok = x && w && dy && dx && dw && db && work &&
              be->conv2d_bwd(ctx, s, at0(x), at0(w), at0(dy), at0(dx), at0(dw), at0(db),
                             at0(work)) == DG_OK &&
              be->download(ctx, dx, 0, out, nx * 4) == DG_OK &&
              be->download(ctx, dw, 0, out + nx, nw * 4) == DG_OK &&
              be->download(ctx, db, 0, out + nx + nw, (size_t)s->k * 4) == DG_OK;
    void *bufs[] = {x, w, dy, dx, dw, db, work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->buf_free(ctx, bufs[i]);
    return ok;
}

/* The implicit-GEMM convolution (the new path on the GPU kernels: the column
 * buffer gathered in the product) against im2col and the same product on the
 * old path, bit for bit, with the commands each takes. */
static void test_implicit_conv(void *fresh, void *old, const char *kernel)
{
    static const int shapes[][8] = {/* n, c, h, w, k, ks, stride, pad */
                                    {2, 1, 28, 28, 6, 5, 1, 0},
                                    {3, 3, 9, 7, 5, 3, 2, 1},
                                    {4, 3, 32, 32, 8, 3, 1, 1},
                                    {2, 16, 8, 8, 20, 3, 1, 1},
                                    {2, 5, 6, 6, 3, 1, 1, 0},
                                    {1, 2, 3, 3, 2, 3, 3, 2},
                                    /* one image a chunk in a small workspace */
                                    {6, 2, 3, 3, 16, 3, 1, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int *v = shapes[i];
        dg_conv_shape s = {v[0], v[1], v[2], v[3], v[4], v[5], v[5], v[6], v[7], 0, 0};
        s.ho = (s.h + 2 * s.pad - s.kh) / s.stride + 1;
        s.wo = (s.w + 2 * s.pad - s.kw) / s.stride + 1;
        size_t ny = (size_t)s.n * s.k * s.ho * s.wo;
        float *a = dg_malloc(ny * 4), *b = dg_malloc(ny * 4);
        uint64_t e0 = 0, e1 = 0, w = 0;
        CHECK(be->queue_counts(fresh, &e0, &w) == DG_OK);
        bool ok = a && b && conv_run(fresh, &s, a, ny);
        CHECK(be->queue_counts(fresh, &e1, &w) == DG_OK);
        ok = ok && conv_run(old, &s, b, ny);
        CHECK_MSG(ok && memcmp(a, b, ny * 4) == 0,
                  "%s: implicit conv n%d c%d %dx%d k%d %dx%d s%d p%d differs from im2col", kernel,
                  s.n, s.c, s.h, s.w, s.k, s.kh, s.kw, s.stride, s.pad);
        /* five uploads, the product with its bias, one download */
        CHECK_MSG(e1 - e0 == 7, "%s: the implicit conv took %llu commands with its copies (want 7)",
                  kernel, (unsigned long long)(e1 - e0));
        dg_free(a);
        dg_free(b);
        /* Backward: dw from the same per-image products, dx summed inside the
         * product instead of by col2im: within float rounding of im2col's. */
        size_t nb = (size_t)s.n * s.c * s.h * s.w + (size_t)s.k * s.c * s.kh * s.kw + s.k;
        a = dg_malloc(nb * 4), b = dg_malloc(nb * 4);
        ok = a && b && conv_bwd_run(fresh, &s, a) && conv_bwd_run(old, &s, b);
        double worst = 0, mag = 0;
        for (size_t j = 0; ok && j < nb; j++) {
            worst = fmax(worst, fabs((double)a[j] - b[j]));
            mag = fmax(mag, fabs((double)b[j]));
        }
        CHECK_MSG(ok && worst <= 1e-5 * mag,
                  "%s: implicit conv bwd n%d c%d %dx%d k%d %dx%d s%d p%d: max |diff| %g of %g",
                  kernel, s.n, s.c, s.h, s.w, s.k, s.kh, s.kw, s.stride, s.pad, worst, mag);
        dg_free(a);
        dg_free(b);
    }
}

/* The fused calls on the context's kernels: every transpose, odd and
 * fixture-like shapes, the convolutions of the presets (small batches). */
static void test_fused(void *ctx, const char *kernel)
{
    printf("fused calls on the %s kernel\n", kernel);
    static const int shapes[][3] = {{37, 45, 29}, {5, 10, 64}, {33, 1, 3}, {1, 17, 0}};
    for (int t = 0; t < 4; t++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            gemm_case(ctx, t & 2, t & 1, shapes[i][0], shapes[i][1], shapes[i][2]);
    conv_case(ctx, 2, 1, 12, 12, 6, 5, 1, 0); /* lenet's first layer, small */
    conv_case(ctx, 3, 3, 9, 7, 5, 3, 2, 1);   /* odd sizes, stride 2 pad 1 */
    conv_case(ctx, 2, 4, 8, 8, 8, 3, 1, 1);   /* cifar-like, padded */
}

/* A fused forward product is one command on a GPU kernel (no B^T copy); the
 * counter counts it. */
static void test_one_command(void *ctx)
{
    dg_rng r;
    dg_rng_init(&r, 5, 11);
    void *a = put(ctx, &r, 64 * 32, NULL), *b = put(ctx, &r, 32 * 16, NULL);
    void *bias = put(ctx, &r, 16, NULL), *c = put(ctx, &r, 64 * 16, NULL);
    uint64_t e0 = 0, w0 = 0, e1 = 0, w1 = 0;
    CHECK(be->queue_counts(ctx, &e0, &w0) == DG_OK);
    dg_epilogue ep = {at0(bias), true, {NULL, 0}};
    CHECK(be->gemm_ep(ctx, false, false, 64, 16, 32, at0(a), 32, at0(b), 16, at0(c), 16, &ep) ==
          DG_OK);
    CHECK(be->queue_counts(ctx, &e1, &w1) == DG_OK);
    CHECK_MSG(e1 - e0 == 1 && w1 == w0, "gemm_ep: %llu commands, %llu waits (want 1, 0)",
              (unsigned long long)(e1 - e0), (unsigned long long)(w1 - w0));
    CHECK(be->gemm_ep(ctx, false, false, 64, 16, 32, at0(a), 32, at0(b), 16, at0(c), 16, NULL) ==
          DG_ERR_USAGE);
    dg_epilogue wide = {{bias, 4}, false, {NULL, 0}}; /* the bias runs past its buffer */
    CHECK(be->gemm_ep(ctx, false, false, 64, 16, 32, at0(a), 32, at0(b), 16, at0(c), 16, &wide) ==
          DG_ERR_USAGE);
    void *bufs[] = {a, b, bias, c};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->buf_free(ctx, bufs[i]);
}

/* xent's dlogits and sums on this context, into host arrays; the commands it took. */
static uint64_t xent_run(void *ctx, int n, int classes, float *dl, float acc[2])
{
    dg_rng r;
    dg_rng_init(&r, 77, 12);
    size_t nl = (size_t)n * classes;
    void *lg = put(ctx, &r, nl, NULL), *d = put(ctx, &r, nl, NULL), *lab = NULL, *ac = NULL;
    int32_t *labels = dg_malloc((size_t)n * 4);
    float zero[2] = {0, 0};
    for (int i = 0; labels && i < n; i++)
        labels[i] = i % 13 == 5 ? -1 : (i * 7) % classes; /* some out of range */
    CHECK(labels && be->buf_alloc(ctx, (size_t)n * 4, &lab) == DG_OK &&
          be->upload(ctx, lab, 0, labels, (size_t)n * 4) == DG_OK &&
          be->buf_alloc(ctx, 8, &ac) == DG_OK && be->upload(ctx, ac, 0, zero, 8) == DG_OK);
    uint64_t e0 = 0, e1 = 0, w = 0;
    CHECK(be->queue_counts(ctx, &e0, &w) == DG_OK);
    CHECK(be->xent(ctx, n, classes, at0(lg), at0(lab), at0(d), at0(ac)) == DG_OK);
    CHECK(be->queue_counts(ctx, &e1, &w) == DG_OK);
    CHECK(be->download(ctx, d, 0, dl, nl * 4) == DG_OK);
    CHECK(be->download(ctx, ac, 0, acc, 8) == DG_OK);
    void *bufs[] = {lg, d, lab, ac};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->buf_free(ctx, bufs[i]);
    dg_free(labels);
    return e1 - e0;
}

/* bias_grad on ctx over [outer, channels, inner] into db (host); the commands it took. */
static uint64_t bias_grad_run(void *ctx, int outer, int channels, int inner, float *db)
{
    dg_rng r;
    dg_rng_init(&r, 31, 13);
    size_t n = (size_t)outer * channels * inner;
    void *dy = put(ctx, &r, n, NULL), *g = put(ctx, &r, (size_t)channels, NULL);
    uint64_t e0 = 0, e1 = 0, w = 0;
    CHECK(be->queue_counts(ctx, &e0, &w) == DG_OK);
    CHECK(be->bias_grad(ctx, at0(dy), at0(g), outer, channels, inner) == DG_OK);
    CHECK(be->queue_counts(ctx, &e1, &w) == DG_OK);
    CHECK(be->download(ctx, g, 0, db, (size_t)channels * 4) == DG_OK);
    be->buf_free(ctx, dy);
    be->buf_free(ctx, g);
    return e1 - e0;
}

/* A long bias gradient (a convolution's few channels of many values): many
 * work-groups and a sum of slices on the new path, one work-group a channel
 * on the old; the same sums within float rounding, each against float64. */
static void bias_grad_case(void *fresh, void *old, int outer, int channels, int inner)
{
    float *a = dg_malloc((size_t)channels * 4), *b = dg_malloc((size_t)channels * 4);
    if (!a || !b)
        return;
    uint64_t cn = bias_grad_run(fresh, outer, channels, inner, a);
    uint64_t co = bias_grad_run(old, outer, channels, inner, b);
    size_t per = (size_t)outer * inner;
    CHECK_MSG(co == 1 && cn == (per > 8192 ? 2u : 1u),
              "bias_grad %dx%dx%d commands: new %llu, old %llu", outer, channels, inner,
              (unsigned long long)cn, (unsigned long long)co);
    /* float64 of the same values */
    dg_rng r;
    dg_rng_init(&r, 31, 13);
    size_t n = per * channels;
    float *h = dg_malloc((n ? n : 1) * 4);
    if (h) {
        dg_rng_uniform(&r, h, n ? n : 1, -1.0f, 1.0f);
        for (size_t i = 3; i < n; i += 7)
            h[i] = 0.0f;
        for (int c = 0; c < channels; c++) {
            double s = 0, mag = 0;
            for (int o = 0; o < outer; o++)
                for (int i = 0; i < inner; i++) {
                    double v = h[((size_t)o * channels + c) * inner + i];
                    s += v;
                    mag += fabs(v);
                }
            CHECK_MSG(fabs(a[c] - s) <= 1e-5 * mag + 1e-6 && fabs(b[c] - s) <= 1e-5 * mag + 1e-6,
                      "bias_grad %dx%dx%d channel %d: new %g old %g float64 %g", outer, channels,
                      inner, c, a[c], b[c], s);
        }
    }
    dg_free(h);
    dg_free(a);
    dg_free(b);
}

/* The old path: no fused form offered, the convolution's bias and a fused
 * call's ReLU still right, xent in two commands with the new path's sums. */
static void test_paths(void *fresh)
{
    char reason[512];
    void *old = NULL;
    setenv("DEVGATE_OPENCL_PATH", "bogus", 1);
    CHECK(be->init(0, &old, reason, sizeof reason) == DG_ERR_USAGE && old == NULL);
    CHECK_MSG(strstr(reason, "DEVGATE_OPENCL_PATH=bogus"), "reason: %s", reason);
    unsetenv("DEVGATE_OPENCL_PATH");
    setenv("DEVGATE_OPENCL_CONV_BWD", "direct", 1);
    CHECK(be->init(0, &old, reason, sizeof reason) == DG_ERR_USAGE && old == NULL);
    CHECK_MSG(strstr(reason, "DEVGATE_OPENCL_CONV_BWD=direct"), "reason: %s", reason);
    unsetenv("DEVGATE_OPENCL_CONV_BWD");
    setenv("DEVGATE_OPENCL_PATH", "old", 1);
    dg_status st = be->init(0, &old, reason, sizeof reason);
    unsetenv("DEVGATE_OPENCL_PATH");
    CHECK_MSG(st == DG_OK, "init on the old path: %s", reason);
    if (st != DG_OK)
        return;
    CHECK(be->fusion(old) == 0);
    CHECK(be->fusion(fresh) == (DG_FUSE_GEMM | DG_FUSE_CONV));
    conv_case(old, 2, 3, 9, 7, 5, 3, 2, 1);
    bias_grad_case(fresh, old, 64, 3, 1000); /* 8 slices of a channel */
    bias_grad_case(fresh, old, 1000, 2, 77); /* a ragged last slice */
    bias_grad_case(fresh, old, 32, 5, 7);    /* short: one command on both */
    enum { N = 300, C = 10 };
    float *d1 = dg_malloc(N * C * 4), *d2 = dg_malloc(N * C * 4), a1[2] = {0}, a2[2] = {0};
    if (d1 && d2) {
        uint64_t c_new = xent_run(fresh, N, C, d1, a1), c_old = xent_run(old, N, C, d2, a2);
        CHECK_MSG(c_new == 1 && c_old == 2, "xent commands: new %llu (want 1), old %llu (want 2)",
                  (unsigned long long)c_new, (unsigned long long)c_old);
        CHECK(memcmp(d1, d2, N * C * 4) == 0);
        CHECK_MSG(a1[0] == a2[0] && a1[1] == a2[1] && a1[0] > 0 && a1[1] > 0,
                  "xent sums: new %g %g, old %g %g", a1[0], a1[1], a2[0], a2[1]);
    }
    dg_free(d1);
    dg_free(d2);
    be->free(old);
}

int main(void)
{
    be = dg_backend_opencl_iface();
    unsetenv("DEVGATE_OPENCL_PATH");
    static const char *const kernels[] = {"", "db32", "tiled", "tiled128", "naive"};
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        if (kernels[i][0])
            setenv("DEVGATE_OPENCL_KERNEL", kernels[i], 1);
        else
            unsetenv("DEVGATE_OPENCL_KERNEL");
        void *ctx = NULL;
        char reason[512];
        dg_status st = be->init(0, &ctx, reason, sizeof reason);
        if (st != DG_OK && i == 0) {
            printf("opencl init(0) failed (%s): %s\n", dg_status_name(st), reason);
            check_skip("no OpenCL device");
        }
        CHECK_MSG(st == DG_OK, "init with %s: %s", kernels[i], reason);
        if (st != DG_OK)
            continue;
        test_fused(ctx, kernels[i][0] ? kernels[i] : "default");
        if (i == 1 || i == 2) { /* GPU kernels: the implicit convolution against im2col */
            void *old = NULL, *bwd = NULL;
            setenv("DEVGATE_OPENCL_CONV_BWD", "implicit", 1);
            dg_status sb = be->init(0, &bwd, reason, sizeof reason);
            unsetenv("DEVGATE_OPENCL_CONV_BWD");
            CHECK_MSG(sb == DG_OK, "implicit backward with %s: %s", kernels[i], reason);
            setenv("DEVGATE_OPENCL_PATH", "old", 1);
            st = be->init(0, &old, reason, sizeof reason);
            unsetenv("DEVGATE_OPENCL_PATH");
            CHECK_MSG(st == DG_OK, "old path with %s: %s", kernels[i], reason);
            if (st == DG_OK && sb == DG_OK)
                test_implicit_conv(bwd, old, kernels[i]);
            be->free(old);
            be->free(bwd);
        }
        if (i == 1) { /* a small workspace: the backward pass in chunks of images */
            void *small = NULL, *old = NULL;
            setenv("DEVGATE_OPENCL_CONV_WORK", "2000", 1);
            setenv("DEVGATE_OPENCL_CONV_BWD", "implicit", 1);
            st = be->init(0, &small, reason, sizeof reason);
            unsetenv("DEVGATE_OPENCL_CONV_BWD");
            setenv("DEVGATE_OPENCL_PATH", "old", 1);
            dg_status st2 = be->init(0, &old, reason, sizeof reason);
            unsetenv("DEVGATE_OPENCL_PATH");
            unsetenv("DEVGATE_OPENCL_CONV_WORK");
            CHECK(st == DG_OK && st2 == DG_OK);
            if (st == DG_OK && st2 == DG_OK)
                test_implicit_conv(small, old, "db32, 2000-byte workspace");
            be->free(small);
            be->free(old);
        }
        if (i == 1)
            test_one_command(ctx);
        if (i == 0)
            test_paths(ctx);
        be->free(ctx);
    }
    unsetenv("DEVGATE_OPENCL_KERNEL");
    CHECK_DONE();
}
