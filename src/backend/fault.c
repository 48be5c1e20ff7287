/* Fault injection for tests, outside the production lookup: dg_backend_lookup
 * passes every interface through dg_backend_fault_wrap, which wraps the one
 * DEVGATE_FAULT=KIND@BACKEND names so the gate and the learning tests can be
 * shown to fail. KIND is gemm-corrupt (one element of every product is
 * altered), upload-fail (every upload returns an error), sgd-skip (updates do
 * nothing), sgd-ascend (updates climb the gradient), relu-leak (relu_fwd
 * lets 1% of negative values through: y = x > 0 ? x : 0.01 x; step capture is
 * then off), bias-ulp (bias_add one ulp high everywhere; step capture
 * off) or gemm-slowdown (each product followed by an idle that grows with
 * the seconds since the first: a device that slows as it works). Other kinds (the sweep's
 * trial-crash, trial-hang) pass through. */
#include "backend/backend.h"
#include "core/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static dg_backend_iface faulty;
static const dg_backend_iface *faulty_inner;

static dg_status faulty_gemm(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha,
                             dg_ref a, int lda, dg_ref b, int ldb, float beta, dg_ref c, int ldc)
{
    dg_status st = faulty_inner->gemm(ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (st != DG_OK || m == 0 || n == 0)
        return st;
    /* Alter the middle element of the product by a large relative amount. */
    size_t at = c.off + ((size_t)(m / 2) * (size_t)ldc + (size_t)(n / 2)) * sizeof(float);
    float v;
    if ((st = faulty_inner->synchronize(ctx)) != DG_OK ||
        (st = faulty_inner->download(ctx, c.buf, at, &v, sizeof v)) != DG_OK)
        return st;
    v = v * 1.5f + 1.0f;
    return faulty_inner->upload(ctx, c.buf, at, &v, sizeof v);
}

static dg_status faulty_upload(void *ctx, void *buf, size_t off, const void *src, size_t bytes)
{
    return DG_ERR_BACKEND;
}

static dg_status faulty_sgd_skip(void *ctx, dg_ref w, dg_ref g, dg_ref mom, size_t count, float lr,
                                 float momentum, float weight_decay)
{
    return DG_OK;
}

static dg_status faulty_sgd_ascend(void *ctx, dg_ref w, dg_ref g, dg_ref mom, size_t count,
                                   float lr, float momentum, float weight_decay)
{
    return faulty_inner->sgd(ctx, w, g, mom, count, -lr, momentum, weight_decay);
}

/* Leaky relu on the host: the device's values are copied out, altered and
 * copied back, so every backend gets the same fault. */
static dg_status faulty_relu_leak(void *ctx, dg_ref x, dg_ref y, size_t count)
{
    if (count == 0)
        return DG_OK;
    float *h = malloc(count * sizeof *h);
    if (!h)
        return DG_ERR_NOMEM;
    dg_status st = faulty_inner->synchronize(ctx);
    if (st == DG_OK)
        st = faulty_inner->download(ctx, x.buf, x.off, h, count * sizeof *h);
    for (size_t i = 0; st == DG_OK && i < count; i++)
        h[i] = h[i] > 0.0f ? h[i] : 0.01f * h[i];
    if (st == DG_OK)
        st = faulty_inner->upload(ctx, y.buf, y.off, h, count * sizeof *h);
    free(h);
    return st;
}

/* bias_add one ulp high: y = nextafter(y + bias, +inf) for every element,
 * on the host between copies (so every backend gets the same fault), the
 * kind of wrong kernel only an exact check sees (level 2 names it). */
static dg_status faulty_bias_ulp(void *ctx, dg_ref y, dg_ref bias, int outer, int channels,
                                 int inner)
{
    dg_status st = faulty_inner->bias_add(ctx, y, bias, outer, channels, inner);
    size_t count = (size_t)outer * channels * inner;
    if (st != DG_OK || count == 0)
        return st;
    float *h = malloc(count * sizeof *h);
    if (!h)
        return DG_ERR_NOMEM;
    st = faulty_inner->synchronize(ctx);
    if (st == DG_OK)
        st = faulty_inner->download(ctx, y.buf, y.off, h, count * sizeof *h);
    for (size_t i = 0; st == DG_OK && i < count; i++)
        h[i] = nextafterf(h[i], INFINITY);
    if (st == DG_OK)
        st = faulty_inner->upload(ctx, y.buf, y.off, h, count * sizeof *h);
    free(h);
    return st;
}

/* A device that slows as it works: after each product, an idle as long as
 * the product took times the seconds since the first of its size (up to 4), so the
 * sustained rate falls to a fifth within seconds (level 3 must call it
 * unstable). */
static double slow_t0 = -1;
static int slow_m = -1;
static dg_status faulty_gemm_slowdown(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha,
                                      dg_ref a, int lda, dg_ref b, int ldb, float beta, dg_ref c,
                                      int ldc)
{
    double t = dg_now();
    if (slow_t0 < 0 || m != slow_m) /* each product size starts cool */
        slow_t0 = t, slow_m = m;
    dg_status st = faulty_inner->gemm(ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (st == DG_OK)
        st = faulty_inner->synchronize(ctx);
    double took = dg_now() - t, f = t - slow_t0;
    double idle = took * (f < 4 ? f : 4);
    struct timespec ts = {(time_t)idle, (long)((idle - (time_t)idle) * 1e9)};
    if (st == DG_OK && idle > 0)
        nanosleep(&ts, NULL);
    return st;
}

static const char *faulty_last_error(void *ctx)
{
    return "injected fault: upload refused (DEVGATE_FAULT)";
}

/* Host copies cannot be recorded into a captured step. */
static void no_capture(dg_backend_iface *f)
{
    f->capture_begin = NULL;
    f->capture_end = NULL;
    f->replay = NULL;
    f->caps.graph_capture = false;
}

/* A wrapped op must run as itself: the fused calls (which would bypass it)
 * are taken away. */
static void no_fusion(dg_backend_iface *f)
{
    f->fusion = NULL;
    f->gemm_ep = NULL;
    f->conv2d_fwd_ep = NULL;
}

const dg_backend_iface *dg_backend_fault_wrap(const char *name, const dg_backend_iface *iface)
{
    const char *spec = getenv("DEVGATE_FAULT");
    const char *at = spec ? strchr(spec, '@') : NULL;
    if (!iface || !at || strcmp(at + 1, name) != 0)
        return iface;
    size_t kind_len = (size_t)(at - spec);
    faulty = *iface;
    faulty_inner = iface;
    if (kind_len == 12 && strncmp(spec, "gemm-corrupt", 12) == 0) {
        faulty.gemm = faulty_gemm;
    } else if (kind_len == 11 && strncmp(spec, "upload-fail", 11) == 0) {
        faulty.upload = faulty_upload;
        faulty.last_error = faulty_last_error;
    } else if (kind_len == 8 && strncmp(spec, "sgd-skip", 8) == 0 && iface->sgd) {
        faulty.sgd = faulty_sgd_skip;
    } else if (kind_len == 10 && strncmp(spec, "sgd-ascend", 10) == 0 && iface->sgd) {
        faulty.sgd = faulty_sgd_ascend;
    } else if (kind_len == 13 && strncmp(spec, "gemm-slowdown", 13) == 0) {
        faulty.gemm = faulty_gemm_slowdown;
    } else if (kind_len == 8 && strncmp(spec, "bias-ulp", 8) == 0 && iface->bias_add) {
        faulty.bias_add = faulty_bias_ulp;
        no_capture(&faulty);
    } else if (kind_len == 9 && strncmp(spec, "relu-leak", 9) == 0 && iface->relu_fwd) {
        faulty.relu_fwd = faulty_relu_leak;
        no_capture(&faulty);
    } else {
        return iface;
    }
    no_fusion(&faulty);
    return &faulty;
}
