/* The float64 reference: every op of backend.h written as the plainest loops
 * that follow its contract, in double, single-threaded, built without
 * fast-math. It shares no code with the backends (conv2d is a direct
 * convolution, not im2col), so agreement with it is evidence. Shapes are
 * trusted: callers pass consistent sizes. */
#include "engine/engine.h"

#include <math.h>

#ifdef __FAST_MATH__
#error "ref64.c must be built without -ffast-math"
#endif

void dg_ref64_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double *a, int lda,
                   const double *b, int ldb, double beta, double *c, int ldc)
{
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
    for (int o = 0; o < outer; o++)
        for (int ch = 0; ch < channels; ch++)
            for (int i = 0; i < inner; i++)
                y[((size_t)o * channels + ch) * inner + i] += bias[ch];
}

void dg_ref64_bias_grad(const double *dy, double *db, int outer, int channels, int inner)
{
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
    for (size_t i = 0; i < count; i++)
        y[i] = x[i] > 0.0 ? x[i] : 0.0;
}

void dg_ref64_relu_bwd(const double *y, const double *dy, double *dx, size_t count)
{
    for (size_t i = 0; i < count; i++)
        dx[i] = y[i] > 0.0 ? dy[i] : 0.0;
}

void dg_ref64_maxpool_fwd(const dg_pool_shape *s, const double *x, double *y, int32_t *argmax)
{
    size_t planes = (size_t)s->n * s->c;
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
    for (size_t i = 0; i < planes * in_plane; i++)
        dx[i] = 0.0;
    for (size_t p = 0; p < planes; p++)
        for (size_t o = 0; o < out_plane; o++)
            dx[p * in_plane + argmax[p * out_plane + o]] += dy[p * out_plane + o];
}

/* Input position of output (oy, ox) under tap (ky, kx); false in the padding. */
static bool conv_in(const dg_conv_shape *s, int oy, int ox, int ky, int kx, int *iy, int *ix)
{
    *iy = oy * s->stride - s->pad + ky;
    *ix = ox * s->stride - s->pad + kx;
    return *iy >= 0 && *iy < s->h && *ix >= 0 && *ix < s->w;
}

void dg_ref64_conv2d_fwd(const dg_conv_shape *s, const double *x, const double *w,
                         const double *bias, double *y)
{
    for (int n = 0; n < s->n; n++) {
        for (int k = 0; k < s->k; k++) {
            for (int oy = 0; oy < s->ho; oy++) {
                for (int ox = 0; ox < s->wo; ox++) {
                    double acc = 0.0;
                    for (int c = 0; c < s->c; c++) {
                        for (int ky = 0; ky < s->kh; ky++) {
                            for (int kx = 0; kx < s->kw; kx++) {
                                int iy, ix;
                                if (!conv_in(s, oy, ox, ky, kx, &iy, &ix))
                                    continue;
                                double xv = x[(((size_t)n * s->c + c) * s->h + iy) * s->w + ix];
                                double wv = w[(((size_t)k * s->c + c) * s->kh + ky) * s->kw + kx];
                                acc += xv * wv;
                            }
                        }
                    }
                    if (bias)
                        acc += bias[k];
                    y[(((size_t)n * s->k + k) * s->ho + oy) * s->wo + ox] = acc;
                }
            }
        }
    }
}

void dg_ref64_conv2d_bwd(const dg_conv_shape *s, const double *x, const double *w, const double *dy,
                         double *dx, double *dw, double *db)
{
    size_t nx = (size_t)s->n * s->c * s->h * s->w, nw = (size_t)s->k * s->c * s->kh * s->kw;
    if (dx)
        for (size_t i = 0; i < nx; i++)
            dx[i] = 0.0;
    for (size_t i = 0; i < nw; i++)
        dw[i] = 0.0;
    if (db)
        for (int k = 0; k < s->k; k++)
            db[k] = 0.0;
    for (int n = 0; n < s->n; n++) {
        for (int k = 0; k < s->k; k++) {
            for (int oy = 0; oy < s->ho; oy++) {
                for (int ox = 0; ox < s->wo; ox++) {
                    double g = dy[(((size_t)n * s->k + k) * s->ho + oy) * s->wo + ox];
                    if (db)
                        db[k] += g;
                    for (int c = 0; c < s->c; c++) {
                        for (int ky = 0; ky < s->kh; ky++) {
                            for (int kx = 0; kx < s->kw; kx++) {
                                int iy, ix;
                                if (!conv_in(s, oy, ox, ky, kx, &iy, &ix))
                                    continue;
                                size_t xi = (((size_t)n * s->c + c) * s->h + iy) * s->w + ix;
                                size_t wi = (((size_t)k * s->c + c) * s->kh + ky) * s->kw + kx;
                                dw[wi] += g * x[xi];
                                if (dx)
                                    dx[xi] += g * w[wi];
                            }
                        }
                    }
                }
            }
        }
    }
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
