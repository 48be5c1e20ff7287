/* Checks of the float64 reference itself (src/engine/ref64.c): hand-computed
 * tiny cases, then every analytic gradient of two small compositions
 * (linear -> relu -> xent; conv -> relu -> maxpool -> flatten -> linear ->
 * xent) against central differences, h = 1e-6. Agreement is required to
 * 1e-6 relative where the gradient is not tiny; the absolute floor covers
 * the round-off of the difference quotient (about eps * |loss| / h). */
#include "core/core.h"
#include "engine/engine.h"

#include "check.h"

#include <stdint.h>

#define FD_H 1e-6
#define FD_REL 1e-6
#define FD_ABS 1e-8

static bool near(double got, double want, double tol)
{
    return fabs(got - want) <= tol;
}

static double *dalloc(size_t n)
{
    double *p = calloc(n ? n : 1, sizeof *p);
    if (!p) {
        fprintf(stderr, "test_ref64: out of host memory\n");
        exit(2);
    }
    return p;
}

/* n doubles uniform in [lo, hi) from the rng. */
static double *drand(dg_rng *r, size_t n, float lo, float hi)
{
    float *f = calloc(n ? n : 1, sizeof *f);
    double *d = dalloc(n);
    if (!f)
        exit(2);
    dg_rng_uniform(r, f, n, lo, hi);
    for (size_t i = 0; i < n; i++)
        d[i] = f[i];
    free(f);
    return d;
}

/* ---- hand-computed cases ---------------------------------------------------- */

static void test_gemm_2x2(void)
{
    const double a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
    double c[4];
    dg_ref64_gemm(false, false, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2);
    CHECK(c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50);
    dg_ref64_gemm(true, false, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2); /* A^T B */
    CHECK(c[0] == 26 && c[1] == 30 && c[2] == 38 && c[3] == 44);
    dg_ref64_gemm(false, true, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2); /* A B^T */
    CHECK(c[0] == 17 && c[1] == 23 && c[2] == 39 && c[3] == 53);
    dg_ref64_gemm(true, true, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2); /* A^T B^T = (B A)^T */
    CHECK(c[0] == 23 && c[1] == 31 && c[2] == 34 && c[3] == 46);
    /* alpha, beta and an accumulating C */
    double c2[4] = {1, 1, 1, -2};
    dg_ref64_gemm(false, false, 2, 2, 2, 2, a, 2, b, 2, 0.5, c2, 2);
    CHECK(c2[0] == 38.5 && c2[1] == 44.5 && c2[2] == 86.5 && c2[3] == 99);
    /* beta 0 never reads C: NaN there does not propagate */
    double c3[4] = {NAN, NAN, NAN, NAN};
    dg_ref64_gemm(false, false, 2, 2, 2, 1, a, 2, b, 2, 0, c3, 2);
    CHECK(c3[0] == 19 && c3[3] == 50);
    /* leading dimensions: A is the top-left 2x2 of a 2x3 block, C of a 2x3 */
    const double a3[6] = {1, 2, 99, 3, 4, 99};
    double c4[6] = {0, 0, -7, 0, 0, -7};
    dg_ref64_gemm(false, false, 2, 2, 2, 1, a3, 3, b, 2, 0, c4, 3);
    CHECK(c4[0] == 19 && c4[1] == 22 && c4[3] == 43 && c4[4] == 50 && c4[2] == -7 && c4[5] == -7);
}

static void test_conv_1x1(void)
{
    /* x [1, 2, 2, 2], w [1, 2, 1, 1] = {2, -1}, bias 0.5: y = 2 x0 - x1 + 0.5 */
    dg_conv_shape s = {.n = 1,
                       .c = 2,
                       .h = 2,
                       .w = 2,
                       .k = 1,
                       .kh = 1,
                       .kw = 1,
                       .stride = 1,
                       .pad = 0,
                       .ho = 2,
                       .wo = 2};
    const double x[8] = {1, 2, 3, 4, 10, 20, 30, 40}, w[2] = {2, -1}, bias[1] = {0.5};
    double y[4];
    dg_ref64_conv2d_fwd(&s, x, w, bias, y);
    CHECK(y[0] == -7.5 && y[1] == -15.5 && y[2] == -23.5 && y[3] == -31.5);
    dg_ref64_conv2d_fwd(&s, x, w, NULL, y);
    CHECK(y[0] == -8 && y[3] == -32);
    /* backward with dy = 1: dw[c] = sum x[c], db = 4, dx = w[c] */
    const double dy[4] = {1, 1, 1, 1};
    double dx[8], dw[2], db[1];
    dg_ref64_conv2d_bwd(&s, x, w, dy, dx, dw, db);
    CHECK(dw[0] == 10 && dw[1] == 100 && db[0] == 4);
    CHECK(dx[0] == 2 && dx[3] == 2 && dx[4] == -1 && dx[7] == -1);
    /* dx and db absent */
    dw[0] = dw[1] = NAN;
    dg_ref64_conv2d_bwd(&s, x, w, dy, NULL, dw, NULL);
    CHECK(dw[0] == 10 && dw[1] == 100);

    /* 3x3 padding 1 on a 1x1 image: only the centre tap sees the pixel */
    dg_conv_shape p = {.n = 1,
                       .c = 1,
                       .h = 1,
                       .w = 1,
                       .k = 1,
                       .kh = 3,
                       .kw = 3,
                       .stride = 1,
                       .pad = 1,
                       .ho = 1,
                       .wo = 1};
    const double x1[1] = {3}, w9[9] = {1, 1, 1, 1, 5, 1, 1, 1, 1};
    dg_ref64_conv2d_fwd(&p, x1, w9, NULL, y);
    CHECK(y[0] == 15);
}

static void test_xent_hand(void)
{
    const double lg[2] = {0, 0};
    const int32_t lab[1] = {0};
    double d[2], correct = 0;
    double loss = dg_ref64_xent(1, 2, lg, lab, d, &correct);
    CHECK_MSG(near(loss, log(2.0), 1e-15), "loss %.17g", loss);
    CHECK(d[0] == -0.5 && d[1] == 0.5);
    CHECK(correct == 1); /* tie: the first index is the argmax */

    /* label 1 on the tie: wrong; out-of-range label: nothing, zero row; mean over n */
    const double lg2[4] = {0, 0, 5, 7};
    const int32_t lab2[2] = {1, 2};
    correct = 0;
    double d2[4];
    loss = dg_ref64_xent(2, 2, lg2, lab2, d2, &correct);
    CHECK_MSG(near(loss, log(2.0) / 2, 1e-15), "loss %.17g", loss);
    CHECK(d2[0] == 0.25 && d2[1] == -0.25 && d2[2] == 0 && d2[3] == 0);
    CHECK(correct == 0);

    /* large logits: no overflow */
    const double big[2] = {1000, 0};
    const int32_t l0[1] = {0};
    loss = dg_ref64_xent(1, 2, big, l0, d, &correct);
    CHECK(isfinite(loss) && loss < 1e-300 && correct == 1);
}

static void test_sgd_hand(void)
{
    /* PyTorch: d = g + wd w; buf = momentum buf + d; w -= lr buf */
    double w[1] = {1}, mom[1] = {0.2};
    const double g1[1] = {0.5}, g2[1] = {-0.3};
    dg_ref64_sgd(w, g1, mom, 1, 0.1, 0.9, 0.01);
    CHECK_MSG(near(mom[0], 0.69, 1e-15) && near(w[0], 0.931, 1e-15), "w %.17g mom %.17g", w[0],
              mom[0]);
    dg_ref64_sgd(w, g2, mom, 1, 0.1, 0.9, 0.01);
    /* d = -0.3 + 0.00931 = -0.29069; buf = 0.621 - 0.29069 = 0.33031; w = 0.931 - 0.033031 */
    CHECK_MSG(near(mom[0], 0.33031, 1e-15) && near(w[0], 0.897969, 1e-15), "w %.17g mom %.17g",
              w[0], mom[0]);
    /* momentum 0: mom untouched (may even be absent), w -= lr d */
    double w0[1] = {1}, m0[1] = {123};
    dg_ref64_sgd(w0, g1, m0, 1, 0.1, 0.0, 0.01);
    CHECK(near(w0[0], 0.949, 1e-15) && m0[0] == 123);
    dg_ref64_sgd(w0, g1, NULL, 1, 0.1, 0.0, 0.0);
    CHECK(near(w0[0], 0.899, 1e-15));
}

static void test_small_ops_hand(void)
{
    /* maxpool k2 s2 on 4x4 with ties: first index wins; backward scatters */
    dg_pool_shape s = {.n = 1, .c = 1, .h = 4, .w = 4, .k = 2, .stride = 2, .ho = 2, .wo = 2};
    const double x[16] = {1, 3, 0, 0, 3, 2, 0, -1, -5, -6, 7, 7, -7, -5, 7, 7};
    double y[4], dx[16];
    int32_t am[4];
    dg_ref64_maxpool_fwd(&s, x, y, am);
    CHECK(y[0] == 3 && y[1] == 0 && y[2] == -5 && y[3] == 7);
    CHECK(am[0] == 1 && am[1] == 2 && am[2] == 8 && am[3] == 10);
    const double dy[4] = {1, 2, 3, 4};
    dg_ref64_maxpool_bwd(&s, dy, am, dx);
    CHECK(dx[1] == 1 && dx[2] == 2 && dx[8] == 3 && dx[10] == 4 && dx[0] == 0 && dx[15] == 0);
    /* overlapping windows (k3 s1 on 1x4): both outputs pick x[2], gradients add */
    dg_pool_shape o = {.n = 1, .c = 1, .h = 3, .w = 4, .k = 3, .stride = 1, .ho = 1, .wo = 2};
    const double xo[12] = {0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    double yo[2], dxo[12];
    int32_t amo[2];
    dg_ref64_maxpool_fwd(&o, xo, yo, amo);
    CHECK(amo[0] == 2 && amo[1] == 2);
    const double dyo[2] = {0.25, 0.5};
    dg_ref64_maxpool_bwd(&o, dyo, amo, dxo);
    CHECK(dxo[2] == 0.75 && dxo[0] == 0);

    /* bias over [outer 2, channels 2, inner 3] */
    double yb[12] = {0};
    const double b[2] = {1, -2};
    dg_ref64_bias_add(yb, b, 2, 2, 3);
    CHECK(yb[0] == 1 && yb[2] == 1 && yb[3] == -2 && yb[6] == 1 && yb[11] == -2);
    double db[2];
    dg_ref64_bias_grad(yb, db, 2, 2, 3);
    CHECK(db[0] == 6 && db[1] == -12);

    const double xr[4] = {-1, 0, 2, -0.0};
    double yr[4], dxr[4];
    const double dyr[4] = {5, 6, 7, 8};
    dg_ref64_relu_fwd(xr, yr, 4);
    CHECK(yr[0] == 0 && yr[1] == 0 && yr[2] == 2 && yr[3] == 0);
    dg_ref64_relu_bwd(yr, dyr, dxr, 4);
    CHECK(dxr[0] == 0 && dxr[1] == 0 && dxr[2] == 7 && dxr[3] == 0);
}

/* ---- finite differences ------------------------------------------------------ */

typedef double (*loss_fn)(void *model);

static double worst_rel;

/* Compares the analytic gradient g of the model's loss with respect to p[0..n)
 * against central differences. */
static void check_grad(const char *what, double *p, const double *g, size_t n, loss_fn loss,
                       void *model)
{
    size_t bad = 0, checked = 0;
    for (size_t i = 0; i < n; i++) {
        double keep = p[i];
        p[i] = keep + FD_H;
        double lp = loss(model);
        p[i] = keep - FD_H;
        double lm = loss(model);
        p[i] = keep;
        double fd = (lp - lm) / (2 * FD_H);
        double err = fabs(fd - g[i]), scale = fmax(fabs(fd), fabs(g[i]));
        if (scale > 1e-3) {
            checked++;
            if (err / scale > worst_rel)
                worst_rel = err / scale;
        }
        if (!(err <= FD_REL * scale + FD_ABS) && bad++ < 4)
            fprintf(stderr, "  %s[%zu]: analytic %.12g, central difference %.12g\n", what, i, g[i],
                    fd);
    }
    CHECK_MSG(bad == 0, "%s: %zu of %zu gradients disagree", what, bad, n);
    CHECK_MSG(checked > n / 4, "%s: only %zu of %zu gradients are not tiny", what, checked, n);
}

/* linear -> relu -> xent: logits = relu(x W^T + b), W [out, in] as PyTorch. */
typedef struct mlp {
    int n, in, out;
    double *x, *w, *b;
    int32_t *lab;
    double *z, *dl, *dz, *dx, *dw, *db; /* scratch and gradients */
} mlp;

static double mlp_forward(mlp *m)
{
    double correct = 0;
    dg_ref64_gemm(false, true, m->n, m->out, m->in, 1, m->x, m->in, m->w, m->in, 0, m->z, m->out);
    dg_ref64_bias_add(m->z, m->b, m->n, m->out, 1);
    dg_ref64_relu_fwd(m->z, m->z, (size_t)m->n * m->out);
    return dg_ref64_xent(m->n, m->out, m->z, m->lab, m->dl, &correct);
}

static double mlp_loss(void *model)
{
    return mlp_forward(model);
}

static void test_fd_mlp(void)
{
    mlp m = {.n = 3, .in = 5, .out = 4};
    dg_rng r;
    dg_rng_init(&r, 11, 1);
    size_t nz = (size_t)m.n * m.out;
    m.x = drand(&r, (size_t)m.n * m.in, -1, 1);
    m.w = drand(&r, (size_t)m.out * m.in, -1, 1);
    m.b = drand(&r, (size_t)m.out, 0.2f, 0.6f); /* most units active */
    m.lab = calloc((size_t)m.n, sizeof *m.lab);
    m.z = dalloc(nz), m.dl = dalloc(nz), m.dz = dalloc(nz);
    m.dx = dalloc((size_t)m.n * m.in), m.dw = dalloc((size_t)m.out * m.in);
    m.db = dalloc((size_t)m.out);
    for (int i = 0; i < m.n; i++)
        m.lab[i] = (i * 3 + 1) % m.out;

    mlp_forward(&m);
    dg_ref64_relu_bwd(m.z, m.dl, m.dz, nz);
    dg_ref64_gemm(true, false, m.out, m.in, m.n, 1, m.dz, m.out, m.x, m.in, 0, m.dw, m.in);
    dg_ref64_bias_grad(m.dz, m.db, m.n, m.out, 1);
    dg_ref64_gemm(false, false, m.n, m.in, m.out, 1, m.dz, m.out, m.w, m.in, 0, m.dx, m.in);

    check_grad("mlp dx", m.x, m.dx, (size_t)m.n * m.in, mlp_loss, &m);
    check_grad("mlp dw", m.w, m.dw, (size_t)m.out * m.in, mlp_loss, &m);
    check_grad("mlp db", m.b, m.db, (size_t)m.out, mlp_loss, &m);
    free(m.x), free(m.w), free(m.b), free(m.lab), free(m.z), free(m.dl), free(m.dz);
    free(m.dx), free(m.dw), free(m.db);
}

/* conv -> relu -> maxpool -> flatten -> linear -> xent. */
typedef struct cnn {
    dg_conv_shape cs;
    dg_pool_shape ps;
    int classes, feat;
    double *x, *cw, *cb, *lw, *lb;
    int32_t *lab, *am;
    double *y1, *p, *logits, *dl;                 /* activations */
    double *dp, *dr, *dx, *dcw, *dcb, *dlw, *dlb; /* gradients */
} cnn;

static double cnn_forward(cnn *m)
{
    double correct = 0;
    int n = m->cs.n;
    dg_ref64_conv2d_fwd(&m->cs, m->x, m->cw, m->cb, m->y1);
    dg_ref64_relu_fwd(m->y1, m->y1, (size_t)n * m->cs.k * m->cs.ho * m->cs.wo);
    dg_ref64_maxpool_fwd(&m->ps, m->y1, m->p, m->am);
    dg_ref64_gemm(false, true, n, m->classes, m->feat, 1, m->p, m->feat, m->lw, m->feat, 0,
                  m->logits, m->classes);
    dg_ref64_bias_add(m->logits, m->lb, n, m->classes, 1);
    return dg_ref64_xent(n, m->classes, m->logits, m->lab, m->dl, &correct);
}

static double cnn_loss(void *model)
{
    return cnn_forward(model);
}

static void test_fd_cnn(int n, int c, int h, int w, int k, int ksz, int stride, int pad,
                        uint64_t seed)
{
    cnn m = {0};
    m.cs = (dg_conv_shape){
        .n = n, .c = c, .h = h, .w = w, .k = k, .kh = ksz, .kw = ksz, .stride = stride, .pad = pad};
    m.cs.ho = (h + 2 * pad - ksz) / stride + 1;
    m.cs.wo = (w + 2 * pad - ksz) / stride + 1;
    m.ps = (dg_pool_shape){.n = n, .c = k, .h = m.cs.ho, .w = m.cs.wo, .k = 2, .stride = 2};
    m.ps.ho = (m.ps.h - 2) / 2 + 1;
    m.ps.wo = (m.ps.w - 2) / 2 + 1;
    m.classes = 4;
    m.feat = k * m.ps.ho * m.ps.wo;
    size_t nx = (size_t)n * c * h * w, nw = (size_t)k * c * ksz * ksz;
    size_t ny = (size_t)n * k * m.cs.ho * m.cs.wo, np = (size_t)n * m.feat;
    size_t nl = (size_t)n * m.classes, nlw = (size_t)m.classes * m.feat;
    dg_rng r;
    dg_rng_init(&r, seed, 2);
    m.x = drand(&r, nx, -1, 1), m.cw = drand(&r, nw, -0.5f, 0.5f);
    m.cb = drand(&r, (size_t)k, 0.0f, 0.3f);
    m.lw = drand(&r, nlw, -0.5f, 0.5f), m.lb = drand(&r, (size_t)m.classes, -0.1f, 0.1f);
    m.lab = calloc((size_t)n, sizeof *m.lab), m.am = calloc(np, sizeof *m.am);
    for (int i = 0; i < n; i++)
        m.lab[i] = (i * 3 + 2) % m.classes;
    m.y1 = dalloc(ny), m.p = dalloc(np), m.logits = dalloc(nl), m.dl = dalloc(nl);
    m.dp = dalloc(np), m.dr = dalloc(ny), m.dx = dalloc(nx), m.dcw = dalloc(nw);
    m.dcb = dalloc((size_t)k), m.dlw = dalloc(nlw), m.dlb = dalloc((size_t)m.classes);

    cnn_forward(&m);
    dg_ref64_gemm(true, false, m.classes, m.feat, n, 1, m.dl, m.classes, m.p, m.feat, 0, m.dlw,
                  m.feat);
    dg_ref64_bias_grad(m.dl, m.dlb, n, m.classes, 1);
    dg_ref64_gemm(false, false, n, m.feat, m.classes, 1, m.dl, m.classes, m.lw, m.feat, 0, m.dp,
                  m.feat);
    dg_ref64_maxpool_bwd(&m.ps, m.dp, m.am, m.dr);
    dg_ref64_relu_bwd(m.y1, m.dr, m.dr, ny);
    dg_ref64_conv2d_bwd(&m.cs, m.x, m.cw, m.dr, m.dx, m.dcw, m.dcb);

    char what[64];
    snprintf(what, sizeof what, "cnn s%d p%d", stride, pad);
    char name[96];
    snprintf(name, sizeof name, "%s conv dx", what);
    check_grad(name, m.x, m.dx, nx, cnn_loss, &m);
    snprintf(name, sizeof name, "%s conv dw", what);
    check_grad(name, m.cw, m.dcw, nw, cnn_loss, &m);
    snprintf(name, sizeof name, "%s conv db", what);
    check_grad(name, m.cb, m.dcb, (size_t)k, cnn_loss, &m);
    snprintf(name, sizeof name, "%s linear dw", what);
    check_grad(name, m.lw, m.dlw, nlw, cnn_loss, &m);
    snprintf(name, sizeof name, "%s linear db", what);
    check_grad(name, m.lb, m.dlb, (size_t)m.classes, cnn_loss, &m);

    free(m.x), free(m.cw), free(m.cb), free(m.lw), free(m.lb), free(m.lab), free(m.am);
    free(m.y1), free(m.p), free(m.logits), free(m.dl), free(m.dp), free(m.dr), free(m.dx);
    free(m.dcw), free(m.dcb), free(m.dlw), free(m.dlb);
}

int main(void)
{
    test_gemm_2x2();
    test_conv_1x1();
    test_xent_hand();
    test_sgd_hand();
    test_small_ops_hand();
    test_fd_mlp();
    test_fd_cnn(2, 2, 6, 6, 3, 3, 1, 1, 5);
    test_fd_cnn(2, 3, 7, 5, 2, 3, 2, 1, 6);
    printf("worst relative error of non-tiny gradients: %.3g\n", worst_rel);
    CHECK_DONE();
}
