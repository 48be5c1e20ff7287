/* The float64 reference: every op of backend.h written as the plainest loops
 * that follow its contract, in double, built without fast-math. It shares no
 * code with the backends (conv2d is a direct convolution, not im2col), so
 * agreement with it is evidence. Shapes are trusted: callers pass consistent
 * sizes.
 *
 * Threads: the outer loop of an op runs on OpenMP's team (the calling
 * thread's, as the cpu team sized it) over outputs that do not share a
 * reduction: rows, images, channels, planes. Each output is summed by one
 * thread in the order the single-threaded loop sums it, so the results are
 * the same bytes at any thread count (tests/unit/test_ref64_train.c checks
 * 1 against 2). No reduction is ever split across threads. */
#include "engine/engine.h"

#include <math.h>

#ifdef __FAST_MATH__
#error "ref64.c must be built without -ffast-math"
#endif

/* Below this many multiply-adds (or elements) an op stays on one thread:
 * starting the team would cost more than it saves. */
#define PAR_MIN 32768

void dg_ref64_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double *a, int lda,
                   const double *b, int ldb, double beta, double *c, int ldc)
{
    /* Every C[i][j] is one thread's, summed over p in order. */
#pragma omp parallel for collapse(2) if ((double)m * n * k > PAR_MIN) schedule(static)
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int p = 0; p < k; p++) {
                double av = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                double bv = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                s += av * bv;
            }
            double *cij = &c[(size_t)i * ldc + j];
            /* beta == 0 never reads C. */
            *cij = beta == 0.0 ? alpha * s : alpha * s + beta * *cij;
        }
    }
}

void dg_ref64_bias_add(double *y, const double *bias, int outer, int channels, int inner)
{
#pragma omp parallel for if ((double)outer * channels * inner > PAR_MIN) schedule(static)
    for (int o = 0; o < outer; o++)
        for (int ch = 0; ch < channels; ch++)
            for (int i = 0; i < inner; i++)
                y[((size_t)o * channels + ch) * inner + i] += bias[ch];
}

void dg_ref64_bias_grad(const double *dy, double *db, int outer, int channels, int inner)
{
#pragma omp parallel for if ((double)outer * channels * inner > PAR_MIN) schedule(static)
    for (int ch = 0; ch < channels; ch++) {
        double s = 0.0;
        for (int o = 0; o < outer; o++)
            for (int i = 0; i < inner; i++)
                s += dy[((size_t)o * channels + ch) * inner + i];
        db[ch] = s;
    }
}

void dg_ref64_relu_fwd(const double *x, double *y, size_t count)
{
#pragma omp parallel for if (count > PAR_MIN) schedule(static)
    for (size_t i = 0; i < count; i++)
        y[i] = x[i] > 0.0 ? x[i] : 0.0;
}

void dg_ref64_relu_bwd(const double *y, const double *dy, double *dx, size_t count)
{
#pragma omp parallel for if (count > PAR_MIN) schedule(static)
    for (size_t i = 0; i < count; i++)
        dx[i] = y[i] > 0.0 ? dy[i] : 0.0;
}

void dg_ref64_maxpool_fwd(const dg_pool_shape *s, const double *x, double *y, int32_t *argmax)
{
    size_t planes = (size_t)s->n * s->c;
#pragma omp parallel for if (planes * s->h * s->w > PAR_MIN) schedule(static)
    for (size_t p = 0; p < planes; p++) {
        const double *xp = x + p * s->h * s->w;
        for (int oy = 0; oy < s->ho; oy++) {
            for (int ox = 0; ox < s->wo; ox++) {
                int best = -1;
                double m = 0.0;
                for (int ky = 0; ky < s->k; ky++) {
                    for (int kx = 0; kx < s->k; kx++) {
                        int iy = oy * s->stride + ky, ix = ox * s->stride + kx;
                        double v = xp[iy * s->w + ix];
                        if (best < 0 || v > m) { /* strict: the first max wins ties */
                            m = v;
                            best = iy * s->w + ix;
                        }
                    }
                }
                size_t o = (p * s->ho + oy) * s->wo + ox;
                y[o] = m;
                argmax[o] = best;
            }
        }
    }
}

void dg_ref64_maxpool_bwd(const dg_pool_shape *s, const double *dy, const int32_t *argmax,
                          double *dx)
{
    size_t planes = (size_t)s->n * s->c, in_plane = (size_t)s->h * s->w;
    size_t out_plane = (size_t)s->ho * s->wo;
    /* argmax indexes within its plane: a plane's dx is one thread's. */
#pragma omp parallel for if (planes * in_plane > PAR_MIN) schedule(static)
    for (size_t p = 0; p < planes; p++) {
        for (size_t i = 0; i < in_plane; i++)
            dx[p * in_plane + i] = 0.0;
        for (size_t o = 0; o < out_plane; o++)
            dx[p * in_plane + argmax[p * out_plane + o]] += dy[p * out_plane + o];
    }
}

/* The taps of output (oy, ox) that land inside the input: ky in [ky0, ky1)
 * and kx in [kx0, kx1), tap (ky, kx) reading input (y0 + ky, x0 + kx). The
 * padding's taps add nothing and are left out; the others keep their order. */
typedef struct conv_window {
    int y0, x0, ky0, ky1, kx0, kx1;
} conv_window;

static conv_window conv_window_at(const dg_conv_shape *s, int oy, int ox)
{
    conv_window t = {.y0 = oy * s->stride - s->pad, .x0 = ox * s->stride - s->pad};
    t.ky0 = t.y0 < 0 ? -t.y0 : 0;
    t.ky1 = s->h - t.y0 < s->kh ? s->h - t.y0 : s->kh;
    t.kx0 = t.x0 < 0 ? -t.x0 : 0;
    t.kx1 = s->w - t.x0 < s->kw ? s->w - t.x0 : s->kw;
    return t;
}

/* Multiply-adds of one convolution pass over the whole batch (padding included). */
static double conv_macs(const dg_conv_shape *s)
{
    return (double)s->n * s->k * s->ho * s->wo * s->c * s->kh * s->kw;
}

/* Plane p of a [n, c, h, w] tensor ([h, w]) and kernel (k, c) of a [k, c, kh, kw] one. */
#define PLANE(t, n, c, C, H, W) ((t) + ((size_t)(n) * (C) + (c)) * (H) * (W))

void dg_ref64_conv2d_fwd(const dg_conv_shape *s, const double *x, const double *w,
                         const double *bias, double *y)
{
    /* Every output plane (n, k) is one thread's. */
#pragma omp parallel for collapse(2) if (conv_macs(s) > PAR_MIN) schedule(static)
    for (int n = 0; n < s->n; n++) {
        for (int k = 0; k < s->k; k++) {
            double *yp = PLANE(y, n, k, s->k, s->ho, s->wo);
            for (int oy = 0; oy < s->ho; oy++) {
                for (int ox = 0; ox < s->wo; ox++) {
                    conv_window t = conv_window_at(s, oy, ox);
                    double acc = 0.0;
                    for (int c = 0; c < s->c; c++) {
                        const double *xp = PLANE(x, n, c, s->c, s->h, s->w);
                        const double *wp = PLANE(w, k, c, s->c, s->kh, s->kw);
                        for (int ky = t.ky0; ky < t.ky1; ky++)
                            for (int kx = t.kx0; kx < t.kx1; kx++)
                                acc += xp[(size_t)(t.y0 + ky) * s->w + t.x0 + kx] *
                                       wp[ky * s->kw + kx];
                    }
                    if (bias)
                        acc += bias[k];
                    yp[(size_t)oy * s->wo + ox] = acc;
                }
            }
        }
    }
}

/* dw and db of a convolution: each output channel k one thread's, its
 * weights summed over (n, oy, ox) in that order. */
static void conv2d_bwd_weights(const dg_conv_shape *s, const double *x, const double *dy,
                               double *dw, double *db)
{
    size_t per_k = (size_t)s->c * s->kh * s->kw;
#pragma omp parallel for if (conv_macs(s) > PAR_MIN) schedule(static)
    for (int k = 0; k < s->k; k++) {
        double *dwk = dw + (size_t)k * per_k; /* [c, kh, kw] */
        for (size_t i = 0; i < per_k; i++)
            dwk[i] = 0.0;
        if (db)
            db[k] = 0.0;
        for (int n = 0; n < s->n; n++) {
            const double *dyp = PLANE(dy, n, k, s->k, s->ho, s->wo);
            for (int oy = 0; oy < s->ho; oy++) {
                for (int ox = 0; ox < s->wo; ox++) {
                    double g = dyp[(size_t)oy * s->wo + ox];
                    conv_window t = conv_window_at(s, oy, ox);
                    if (db)
                        db[k] += g;
                    for (int c = 0; c < s->c; c++) {
                        const double *xp = PLANE(x, n, c, s->c, s->h, s->w);
                        double *dwp = dwk + (size_t)c * s->kh * s->kw;
                        for (int ky = t.ky0; ky < t.ky1; ky++)
                            for (int kx = t.kx0; kx < t.kx1; kx++)
                                dwp[ky * s->kw + kx] +=
                                    g * xp[(size_t)(t.y0 + ky) * s->w + t.x0 + kx];
                    }
                }
            }
        }
    }
}

/* dx of a convolution: each input plane (n, c) one thread's, its values
 * summed over (k, oy, ox) in that order. */
static void conv2d_bwd_input(const dg_conv_shape *s, const double *w, const double *dy, double *dx)
{
#pragma omp parallel for collapse(2) if (conv_macs(s) > PAR_MIN) schedule(static)
    for (int n = 0; n < s->n; n++) {
        for (int c = 0; c < s->c; c++) {
            double *dxp = PLANE(dx, n, c, s->c, s->h, s->w);
            for (size_t i = 0; i < (size_t)s->h * s->w; i++)
                dxp[i] = 0.0;
            for (int k = 0; k < s->k; k++) {
                const double *dyp = PLANE(dy, n, k, s->k, s->ho, s->wo);
                const double *wp = PLANE(w, k, c, s->c, s->kh, s->kw);
                for (int oy = 0; oy < s->ho; oy++) {
                    for (int ox = 0; ox < s->wo; ox++) {
                        double g = dyp[(size_t)oy * s->wo + ox];
                        conv_window t = conv_window_at(s, oy, ox);
                        for (int ky = t.ky0; ky < t.ky1; ky++)
                            for (int kx = t.kx0; kx < t.kx1; kx++)
                                dxp[(size_t)(t.y0 + ky) * s->w + t.x0 + kx] +=
                                    g * wp[ky * s->kw + kx];
                    }
                }
            }
        }
    }
}

/* The weights' and the input's gradients are two passes: each output's sum
 * keeps the order of one loop over (n, k, oy, ox, c, ky, kx). */
void dg_ref64_conv2d_bwd(const dg_conv_shape *s, const double *x, const double *w, const double *dy,
                         double *dx, double *dw, double *db)
{
    conv2d_bwd_weights(s, x, dy, dw, db);
    if (dx)
        conv2d_bwd_input(s, w, dy, dx);
}

double dg_ref64_xent(int n, int classes, const double *logits, const int32_t *labels,
                     double *dlogits, double *correct)
{
    double loss = 0.0;
    for (int r = 0; r < n; r++) {
        const double *l = logits + (size_t)r * classes;
        double *d = dlogits + (size_t)r * classes;
        int32_t y = labels[r];
        if (y < 0 || y >= classes) { /* contributes nothing */
            for (int j = 0; j < classes; j++)
                d[j] = 0.0;
            continue;
        }
        int best = 0;
        for (int j = 1; j < classes; j++)
            if (l[j] > l[best])
                best = j;
        double mx = l[best], sum = 0.0;
        for (int j = 0; j < classes; j++)
            sum += exp(l[j] - mx);
        loss += log(sum) - (l[y] - mx);
        for (int j = 0; j < classes; j++)
            d[j] = (exp(l[j] - mx) / sum - (j == y ? 1.0 : 0.0)) / n;
        if (best == y)
            *correct += 1.0;
    }
    return n > 0 ? loss / n : 0.0;
}

void dg_ref64_sgd(double *w, const double *g, double *mom, size_t count, double lr, double momentum,
                  double weight_decay)
{
#pragma omp parallel for if (count > PAR_MIN) schedule(static)
    for (size_t i = 0; i < count; i++) {
        double d = g[i] + weight_decay * w[i];
        if (momentum != 0.0) {
            mom[i] = momentum * mom[i] + d;
            w[i] -= lr * mom[i];
        } else {
            w[i] -= lr * d;
        }
    }
}
