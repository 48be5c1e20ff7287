/* Per-op agreement test, in the style of llama.cpp's test-backend-ops: every
 * backend that opens here runs every op it claims (supports_op and a non-NULL
 * pointer) on seeded float inputs, and each result is compared with the
 * float64 reference (ref64_*) computed from the same float inputs.
 *
 * Tolerances are normalised, not magic numbers:
 *   reductions (gemm, conv2d, bias_grad): |got - ref| <= 4 K eps32 sum|terms|,
 *     the forward-error bound of a length-K sum, with sum|terms| the same
 *     reduction over absolute values (as gate.c does with |a||b|);
 *   elementwise ops: |got - ref| <= 4 eps32 max(1, |ref|);
 *   xent: loss and dlogits within 1e-5 relative (dlogits relative to its row
 *     scale 1/n at least), correct count exact; maxpool: exact; sgd: 1e-6
 *     relative to max(1, |ref|).
 * Outputs are placed at byte offsets inside larger buffers filled with a NaN
 * sentinel, so a write outside the output or a read of an unwritten output
 * shows up. Backends that do not open are skipped with the reason; ops that
 * are not implemented are listed as skipped. */
#include "backend/backend.h"
#include "core/core.h"
#include "engine/engine.h"

#include "check.h"

#include <float.h>
#include <stdint.h>

#define SENTINEL 0x7fc0beefu /* a quiet NaN no op produces */
#define MAX_LIVE 16
#define MAX_MISSES_SHOWN 4

/* Sub-ops reported separately (a dg_op may cover two or three entry points). */
enum {
    T_GEMM,
    T_FILL,
    T_BIAS_ADD,
    T_BIAS_GRAD,
    T_RELU_FWD,
    T_RELU_BWD,
    T_MAXPOOL_FWD,
    T_MAXPOOL_BWD,
    T_CONV_FWD,
    T_CONV_BWD,
    T_XENT,
    T_SGD,
    T_EVENTS,
    T_RANGE,
    T__COUNT
};
static const char *const t_names[T__COUNT] = {
    "gemm",        "fill",       "bias_add",   "bias_grad", "relu_fwd", "relu_bwd", "maxpool_fwd",
    "maxpool_bwd", "conv2d_fwd", "conv2d_bwd", "xent",      "sgd",      "events",   "range_checks",
};

/* A device buffer holding one tensor at byte offset off, with sentinel
 * bytes before it and after it. */
typedef struct dbuf {
    void *buf;
    size_t off, bytes, total;
} dbuf;

typedef struct env {
    const char *name;
    const dg_backend_iface *be;
    void *ctx;
    dg_rng rng;
    dbuf *live[MAX_LIVE];
    int nlive;
    bool case_ok;      /* the current shape has passed so far */
    const char *label; /* the current shape, for messages */
    double worst;      /* largest err/tol of the current sub-op */
    int pass[T__COUNT], fail[T__COUNT];
    double worst_of[T__COUNT];
} env;

/* ---- host helpers ------------------------------------------------------- */

static void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "test_ops: out of host memory\n");
        exit(2);
    }
    return p;
}

static float *rnd(env *e, size_t n, float lo, float hi)
{
    float *p = xcalloc(n, sizeof *p);
    dg_rng_uniform(&e->rng, p, n, lo, hi);
    return p;
}

/* Values on a coarse grid (multiples of 1/q in [-1, 1)): sums of a few of them
 * are exact in float whatever the order, and ties are common. */
static float *rnd_grid(env *e, size_t n, float q)
{
    float *p = rnd(e, n, -1.0f, 1.0f);
    for (size_t i = 0; i < n; i++)
        p[i] = floorf(p[i] * q) / q;
    return p;
}

static double *to_d(const float *f, size_t n)
{
    double *d = xcalloc(n, sizeof *d);
    for (size_t i = 0; i < n; i++)
        d[i] = f[i];
    return d;
}

static double *abs_d(const double *x, size_t n)
{
    double *d = xcalloc(n, sizeof *d);
    for (size_t i = 0; i < n; i++)
        d[i] = fabs(x[i]);
    return d;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---- failure bookkeeping ------------------------------------------------ */

static void miss(env *e, const char *fmt, ...) DG_PRINTF(2, 3);
static void miss(env *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  %s %s: ", e->name, e->label);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    e->case_ok = false;
}

static bool st_ok(env *e, dg_status st, const char *call)
{
    if (st == DG_OK)
        return true;
    miss(e, "%s returned %s: %s", call, dg_status_name(st), e->be->last_error(e->ctx));
    return false;
}

/* Compares n floats with the reference. Tolerance per element: unit * mag[i]
 * + FLT_MIN when mag is given, else unit * max(floor, |ref[i]|); unit 0 means
 * exact. NaN never passes. Returns true when all agree. */
static bool compare(env *e, const char *what, const float *got, const double *ref,
                    const double *mag, double unit, double floor_, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double tol = mag ? unit * mag[i] + (unit > 0 ? (double)FLT_MIN : 0.0)
                         : unit * fmax(floor_, fabs(ref[i]));
        double err = fabs((double)got[i] - ref[i]);
        if (err <= tol) {
            if (tol > 0 && err / tol > e->worst)
                e->worst = err / tol;
            continue;
        }
        if (bad++ < MAX_MISSES_SHOWN)
            miss(e, "%s[%zu] = %.9g, reference %.9g (err %.3g, tol %.3g)", what, i, got[i], ref[i],
                 err, tol);
    }
    if (bad > MAX_MISSES_SHOWN)
        miss(e, "%s: %zu of %zu elements out of tolerance", what, bad, n);
    return bad == 0;
}

/* ---- device buffers ----------------------------------------------------- */

/* Allocates a buffer with `bytes` at byte offset off (sentinel around it) and
 * uploads src there (sentinel when src is NULL). */
static dbuf *dbuf_new(env *e, const void *src, size_t bytes, size_t off)
{
    if (e->nlive == MAX_LIVE) {
        miss(e, "test bug: too many live buffers");
        return NULL;
    }
    dbuf *d = xcalloc(1, sizeof *d);
    d->off = off;
    d->bytes = bytes;
    d->total = off + bytes + 64;
    uint32_t *h = xcalloc(d->total / 4 + 1, sizeof *h);
    for (size_t i = 0; i < d->total / 4 + 1; i++)
        h[i] = SENTINEL;
    if (src)
        memcpy((char *)h + off, src, bytes);
    bool ok = st_ok(e, e->be->buf_alloc(e->ctx, d->total, &d->buf), "buf_alloc") &&
              st_ok(e, e->be->upload(e->ctx, d->buf, 0, h, d->total), "upload");
    free(h);
    if (!ok) {
        if (d->buf)
            e->be->buf_free(e->ctx, d->buf);
        free(d);
        return NULL;
    }
    e->live[e->nlive++] = d;
    return d;
}

static dg_ref R(const dbuf *d)
{
    return d ? (dg_ref){d->buf, d->off} : (dg_ref){NULL, 0};
}

/* Downloads the tensor into dst (synchronising first). */
static bool dbuf_get(env *e, const dbuf *d, void *dst)
{
    return st_ok(e, e->be->synchronize(e->ctx), "synchronize") &&
           st_ok(e, e->be->download(e->ctx, d->buf, d->off, dst, d->bytes), "download");
}

/* True when the bytes around the tensor still hold the sentinel. */
static bool dbuf_guard(env *e, const dbuf *d, const char *what)
{
    uint32_t *h = xcalloc(d->total / 4 + 1, sizeof *h);
    bool ok = st_ok(e, e->be->synchronize(e->ctx), "synchronize") &&
              st_ok(e, e->be->download(e->ctx, d->buf, 0, h, d->total), "download");
    const unsigned char *p = (const unsigned char *)h;
    uint32_t s = SENTINEL;
    const unsigned char *sp = (const unsigned char *)&s;
    for (size_t i = 0; ok && i < d->total; i++) {
        if (i >= d->off && i < d->off + d->bytes)
            continue;
        if (p[i] != sp[i % 4]) {
            miss(e, "%s: byte %zd relative to the tensor was written outside it", what,
                 (ptrdiff_t)i - (ptrdiff_t)d->off);
            ok = false;
        }
    }
    free(h);
    return ok;
}

/* Starts a shape: a fresh label and rng stream per shape so shapes are
 * independent of one another and of the backend. */
static void case_begin(env *e, int t, const char *label, uint64_t stream)
{
    static char buf[160];
    snprintf(buf, sizeof buf, "%s %s", t_names[t], label);
    e->label = buf;
    e->case_ok = true;
    e->worst = 0;
    dg_rng_init(&e->rng, 20240607u, stream * 64 + (uint64_t)t);
}

static void case_end(env *e, int t)
{
    for (int i = 0; i < e->nlive; i++) {
        e->be->buf_free(e->ctx, e->live[i]->buf);
        free(e->live[i]);
    }
    e->nlive = 0;
    CHECK_MSG(e->case_ok, "%s %s", e->name, e->label);
    if (e->worst > e->worst_of[t])
        e->worst_of[t] = e->worst;
    if (e->case_ok)
        e->pass[t]++;
    else
        e->fail[t]++;
}

/* ---- gemm ----------------------------------------------------------------- */

static void t_gemm(env *e, bool ta, bool tb, int m, int n, int k, float alpha, float beta, int pad,
                   int offe, int idx)
{
    char label[96];
    snprintf(label, sizeof label, "%c%c %dx%dx%d alpha %g beta %g pad %d off %d", ta ? 'T' : 'N',
             tb ? 'T' : 'N', m, n, k, alpha, beta, pad, offe);
    case_begin(e, T_GEMM, label, (uint64_t)idx);
    int ar = ta ? k : m, ac = ta ? m : k; /* A as stored */
    int br = tb ? n : k, bc = tb ? k : n; /* B as stored */
    int lda = ac + pad, ldb = bc + 2 * pad, ldc = n + pad;
    size_t na = (size_t)ar * lda, nb = (size_t)br * ldb, nc = (size_t)m * ldc;
    float *a = rnd(e, na, -1, 1), *b = rnd(e, nb, -1, 1), *c = rnd(e, nc, -1, 1);
    float nan;
    uint32_t sb = SENTINEL;
    memcpy(&nan, &sb, sizeof nan);
    /* Padding columns are never read: NaN there must not leak. */
    for (int i = 0; i < ar; i++)
        for (int j = ac; j < lda; j++)
            a[(size_t)i * lda + j] = nan;
    for (int i = 0; i < br; i++)
        for (int j = bc; j < ldb; j++)
            b[(size_t)i * ldb + j] = nan;
    if (beta == 0.0f)
        for (size_t i = 0; i < nc; i++)
            c[i] = nan;
    /* Dense double copies for the reference, and their magnitudes. */
    double *da = xcalloc((size_t)ar * ac, sizeof *da), *db = xcalloc((size_t)br * bc, sizeof *db);
    double *ref = xcalloc((size_t)m * n, sizeof *ref), *mag = xcalloc((size_t)m * n, sizeof *mag);
    for (int i = 0; i < ar; i++)
        for (int j = 0; j < ac; j++)
            da[(size_t)i * ac + j] = a[(size_t)i * lda + j];
    for (int i = 0; i < br; i++)
        for (int j = 0; j < bc; j++)
            db[(size_t)i * bc + j] = b[(size_t)i * ldb + j];
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            ref[(size_t)i * n + j] = beta == 0.0f ? 0.0 : c[(size_t)i * ldc + j];
            mag[(size_t)i * n + j] = fabs(ref[(size_t)i * n + j]);
        }
    double *ada = abs_d(da, (size_t)ar * ac), *adb = abs_d(db, (size_t)br * bc);
    dg_ref64_gemm(ta, tb, m, n, k, alpha, da, ac, db, bc, beta, ref, n);
    dg_ref64_gemm(ta, tb, m, n, k, fabs(alpha), ada, ac, adb, bc, fabs(beta), mag, n);

    size_t off = (size_t)offe * sizeof(float);
    dbuf *A = dbuf_new(e, a, na * sizeof(float), off);
    dbuf *B = dbuf_new(e, b, nb * sizeof(float), off + 4);
    dbuf *C = dbuf_new(e, c, nc * sizeof(float), off + 8);
    float *got = xcalloc(nc, sizeof *got), *packed = xcalloc((size_t)m * n, sizeof *packed);
    if (A && B && C &&
        st_ok(e, e->be->gemm(e->ctx, ta, tb, m, n, k, alpha, R(A), lda, R(B), ldb, beta, R(C), ldc),
              "gemm") &&
        dbuf_get(e, C, got)) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < ldc; j++) {
                float g = got[(size_t)i * ldc + j];
                if (j < n)
                    packed[(size_t)i * n + j] = g;
                else if (bits(g) != bits(c[(size_t)i * ldc + j]))
                    miss(e, "C padding [%d,%d] changed", i, j);
            }
        compare(e, "C", packed, ref, mag, 4.0 * (k + 1) * FLT_EPSILON, 0, (size_t)m * n);
        dbuf_guard(e, C, "C");
    }
    free(a), free(b), free(c), free(da), free(db), free(ada), free(adb), free(ref), free(mag);
    free(got), free(packed);
    case_end(e, T_GEMM);
}

static void test_gemm(env *e)
{
    static const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {128, 96, 200}};
    static const float ab[][2] = {{1, 0}, {0.5f, -1.5f}, {-2, 0.25f}, {1, 1}};
    int idx = 0;
    for (int t = 0; t < 4; t++)
        for (int s = 0; s < 4; s++, idx++) {
            const int *d = shapes[s];
            int v = (s + t) % 4;
            t_gemm(e, t & 1, t >> 1, d[0], d[1], d[2], ab[v][0], ab[v][1], v, 3 * v, idx);
        }
}

/* ---- fill ----------------------------------------------------------------- */

static void t_fill(env *e, size_t count, float value, size_t off, int idx)
{
    char label[64];
    snprintf(label, sizeof label, "count %zu value %g off %zu", count, value, off);
    case_begin(e, T_FILL, label, (uint64_t)idx);
    float *got = xcalloc(count, sizeof *got);
    double *ref = xcalloc(count, sizeof *ref);
    for (size_t i = 0; i < count; i++)
        ref[i] = value;
    dbuf *X = dbuf_new(e, NULL, count * sizeof(float), off);
    if (X && st_ok(e, e->be->fill(e->ctx, R(X), count, value), "fill") && dbuf_get(e, X, got)) {
        compare(e, "x", got, ref, NULL, 0, 0, count);
        dbuf_guard(e, X, "x");
    }
    free(got), free(ref);
    case_end(e, T_FILL);
}

static void test_fill(env *e)
{
    t_fill(e, 1, 0.0f, 0, 0);
    t_fill(e, 1000, -3.5f, 12, 1);
    t_fill(e, 65537, 1.0f / 3.0f, 4, 2);
}

/* ---- bias ----------------------------------------------------------------- */

static void t_bias(env *e, int outer, int ch, int inner, int idx)
{
    char label[64];
    snprintf(label, sizeof label, "[%d,%d,%d]", outer, ch, inner);
    size_t n = (size_t)outer * ch * inner, off = (size_t)(idx % 3) * 4;
    float *y = rnd(e, n, -1, 1), *bias = rnd(e, (size_t)ch, -1, 1), *got = xcalloc(n, sizeof *got);
    double *ref = to_d(y, n), *dbias = to_d(bias, (size_t)ch);

    if (e->be->bias_add) {
        case_begin(e, T_BIAS_ADD, label, (uint64_t)idx);
        dg_ref64_bias_add(ref, dbias, outer, ch, inner);
        dbuf *Y = dbuf_new(e, y, n * sizeof(float), off);
        dbuf *Bb = dbuf_new(e, bias, (size_t)ch * sizeof(float), off + 4);
        if (Y && Bb &&
            st_ok(e, e->be->bias_add(e->ctx, R(Y), R(Bb), outer, ch, inner), "bias_add") &&
            dbuf_get(e, Y, got)) {
            compare(e, "y", got, ref, NULL, 4.0 * FLT_EPSILON, 1.0, n);
            dbuf_guard(e, Y, "y");
        }
        case_end(e, T_BIAS_ADD);
    }
    if (e->be->bias_grad) {
        case_begin(e, T_BIAS_GRAD, label, (uint64_t)idx);
        double *dy = to_d(y, n), *ady = abs_d(dy, n);
        double *dref = xcalloc((size_t)ch, sizeof *dref), *mag = xcalloc((size_t)ch, sizeof *mag);
        dg_ref64_bias_grad(dy, dref, outer, ch, inner);
        dg_ref64_bias_grad(ady, mag, outer, ch, inner);
        dbuf *DY = dbuf_new(e, y, n * sizeof(float), off);
        dbuf *DB = dbuf_new(e, NULL, (size_t)ch * sizeof(float), off + 8); /* NaN: overwritten */
        if (DY && DB &&
            st_ok(e, e->be->bias_grad(e->ctx, R(DY), R(DB), outer, ch, inner), "bias_grad") &&
            dbuf_get(e, DB, got)) {
            compare(e, "db", got, dref, mag, 4.0 * (double)outer * inner * FLT_EPSILON, 0,
                    (size_t)ch);
            dbuf_guard(e, DB, "db");
        }
        free(dy), free(ady), free(dref), free(mag);
        case_end(e, T_BIAS_GRAD);
    }
    free(y), free(bias), free(got), free(ref), free(dbias);
}

static void test_bias(env *e)
{
    static const int shapes[][3] = {{1, 10, 1}, {32, 256, 1}, {3, 6, 576}, {2, 7, 13}};
    for (int i = 0; i < 4; i++)
        t_bias(e, shapes[i][0], shapes[i][1], shapes[i][2], i);
}

/* ---- relu ----------------------------------------------------------------- */

static void t_relu(env *e, size_t count, bool in_place, int idx)
{
    char label[64];
    snprintf(label, sizeof label, "count %zu%s", count, in_place ? " in place" : "");
    size_t bytes = count * sizeof(float), off = in_place ? 4 : 0;
    float *got = xcalloc(count, sizeof *got);

    case_begin(e, T_RELU_FWD, label, (uint64_t)idx);
    float *x = rnd(e, count, -1, 1), *dy = rnd(e, count, -1, 1);
    for (size_t i = 0; i < count; i += 7)
        x[i] = (i / 7) % 2 ? 0.0f : -0.0f; /* zeros of both signs */
    double *dx = to_d(x, count), *y = xcalloc(count, sizeof *y);
    dg_ref64_relu_fwd(dx, y, count);
    dbuf *X = dbuf_new(e, x, bytes, off);
    dbuf *Y = in_place ? X : dbuf_new(e, NULL, bytes, off + 8);
    if (X && Y && st_ok(e, e->be->relu_fwd(e->ctx, R(X), R(Y), count), "relu_fwd") &&
        dbuf_get(e, Y, got)) {
        compare(e, "y", got, y, NULL, 4.0 * FLT_EPSILON, 1.0, count);
        dbuf_guard(e, Y, "y");
    }
    case_end(e, T_RELU_FWD);

    case_begin(e, T_RELU_BWD, label, (uint64_t)idx);
    float *yf = xcalloc(count, sizeof *yf);
    for (size_t i = 0; i < count; i++)
        yf[i] = (float)y[i];
    double *ddy = to_d(dy, count), *ref = xcalloc(count, sizeof *ref);
    dg_ref64_relu_bwd(y, ddy, ref, count);
    dbuf *Yb = dbuf_new(e, yf, bytes, 0);
    dbuf *DY = dbuf_new(e, dy, bytes, off);
    dbuf *DX = in_place ? DY : dbuf_new(e, NULL, bytes, off + 12);
    if (Yb && DY && DX &&
        st_ok(e, e->be->relu_bwd(e->ctx, R(Yb), R(DY), R(DX), count), "relu_bwd") &&
        dbuf_get(e, DX, got)) {
        compare(e, "dx", got, ref, NULL, 4.0 * FLT_EPSILON, 1.0, count);
        dbuf_guard(e, DX, "dx");
    }
    case_end(e, T_RELU_BWD);
    free(x), free(dy), free(dx), free(y), free(yf), free(ddy), free(ref), free(got);
}

static void test_relu(env *e)
{
    static const size_t counts[] = {1, 1000, 65537};
    for (int i = 0; i < 3; i++) {
        t_relu(e, counts[i], false, 2 * i);
        t_relu(e, counts[i], true, 2 * i + 1);
    }
}

/* ---- maxpool -------------------------------------------------------------- */

static void t_maxpool(env *e, int n, int c, int h, int w, int k, int stride, bool ties, int idx)
{
    dg_pool_shape s = {.n = n, .c = c, .h = h, .w = w, .k = k, .stride = stride};
    s.ho = (h - k) / stride + 1;
    s.wo = (w - k) / stride + 1;
    char label[96];
    snprintf(label, sizeof label, "%dx%dx%dx%d k%d s%d%s", n, c, h, w, k, stride,
             ties ? " with ties" : "");
    size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * s.ho * s.wo;
    float *x = ties ? rnd_grid(e, nx, 4.0f) : rnd(e, nx, -1, 1);
    float *dy = rnd_grid(e, ny, 256.0f); /* exact sums in any order */
    double *dxd = to_d(x, nx), *y = xcalloc(ny, sizeof *y), *ddy = to_d(dy, ny);
    double *dxref = xcalloc(nx, sizeof *dxref);
    int32_t *am = xcalloc(ny, sizeof *am), *amgot = xcalloc(ny, sizeof *amgot);
    dg_ref64_maxpool_fwd(&s, dxd, y, am);
    dg_ref64_maxpool_bwd(&s, ddy, am, dxref);
    float *got = xcalloc(nx, sizeof *got);

    if (e->be->maxpool_fwd) {
        case_begin(e, T_MAXPOOL_FWD, label, (uint64_t)idx);
        dbuf *X = dbuf_new(e, x, nx * sizeof(float), 4);
        dbuf *Y = dbuf_new(e, NULL, ny * sizeof(float), 0);
        dbuf *AM = dbuf_new(e, NULL, ny * sizeof(int32_t), 8);
        if (X && Y && AM &&
            st_ok(e, e->be->maxpool_fwd(e->ctx, &s, R(X), R(Y), R(AM)), "maxpool_fwd") &&
            dbuf_get(e, Y, got) && dbuf_get(e, AM, amgot)) {
            compare(e, "y", got, y, NULL, 0, 0, ny);
            int shown = 0;
            for (size_t i = 0; i < ny; i++)
                if (amgot[i] != am[i] && shown++ < MAX_MISSES_SHOWN)
                    miss(e, "argmax[%zu] = %d, reference %d", i, amgot[i], am[i]);
            dbuf_guard(e, Y, "y");
            dbuf_guard(e, AM, "argmax");
        }
        case_end(e, T_MAXPOOL_FWD);
    }
    if (e->be->maxpool_bwd) {
        /* The reference argmax, so a forward failure does not blame backward. */
        case_begin(e, T_MAXPOOL_BWD, label, (uint64_t)idx);
        dbuf *DY = dbuf_new(e, dy, ny * sizeof(float), 4);
        dbuf *AM = dbuf_new(e, am, ny * sizeof(int32_t), 0);
        dbuf *DX = dbuf_new(e, NULL, nx * sizeof(float), 12); /* NaN: overwritten */
        if (DY && AM && DX &&
            st_ok(e, e->be->maxpool_bwd(e->ctx, &s, R(DY), R(AM), R(DX)), "maxpool_bwd") &&
            dbuf_get(e, DX, got)) {
            compare(e, "dx", got, dxref, NULL, 0, 0, nx);
            dbuf_guard(e, DX, "dx");
        }
        case_end(e, T_MAXPOOL_BWD);
    }
    free(x), free(dy), free(dxd), free(y), free(ddy), free(dxref), free(am), free(amgot), free(got);
}

static void test_maxpool(env *e)
{
    t_maxpool(e, 1, 1, 4, 4, 2, 2, false, 0);
    t_maxpool(e, 2, 3, 9, 9, 2, 2, false, 1);
    t_maxpool(e, 2, 3, 9, 9, 2, 2, true, 2);
    t_maxpool(e, 2, 2, 7, 7, 3, 2, false, 3);
    t_maxpool(e, 2, 2, 7, 7, 3, 2, true, 4);
}

/* ---- conv2d --------------------------------------------------------------- */

typedef struct conv_case {
    int n, c, h, w, k, kh, kw, stride, pad;
} conv_case;

static dg_conv_shape conv_shape(const conv_case *cc)
{
    dg_conv_shape s = {.n = cc->n,
                       .c = cc->c,
                       .h = cc->h,
                       .w = cc->w,
                       .k = cc->k,
                       .kh = cc->kh,
                       .kw = cc->kw,
                       .stride = cc->stride,
                       .pad = cc->pad};
    s.ho = (s.h + 2 * s.pad - s.kh) / s.stride + 1;
    s.wo = (s.w + 2 * s.pad - s.kw) / s.stride + 1;
    return s;
}

/* Workspace for shape s: absent when the backend needs none. */
static dbuf *conv_work(env *e, const dg_conv_shape *s)
{
    size_t ws = e->be->conv2d_workspace ? e->be->conv2d_workspace(e->ctx, s) : 0;
    return ws ? dbuf_new(e, NULL, ws, 0) : NULL;
}

static void t_conv_fwd(env *e, const conv_case *cc, bool with_bias, int idx)
{
    dg_conv_shape s = conv_shape(cc);
    char label[128];
    snprintf(label, sizeof label, "n%d c%d %dx%d k%d %dx%d s%d p%d%s", s.n, s.c, s.h, s.w, s.k,
             s.kh, s.kw, s.stride, s.pad, with_bias ? " bias" : "");
    case_begin(e, T_CONV_FWD, label, (uint64_t)idx);
    size_t nx = (size_t)s.n * s.c * s.h * s.w, nw = (size_t)s.k * s.c * s.kh * s.kw;
    size_t ny = (size_t)s.n * s.k * s.ho * s.wo;
    float *x = rnd(e, nx, -1, 1), *w = rnd(e, nw, -1, 1), *b = rnd(e, (size_t)s.k, -1, 1);
    double *dx = to_d(x, nx), *dw = to_d(w, nw), *db = to_d(b, (size_t)s.k);
    double *ax = abs_d(dx, nx), *aw = abs_d(dw, nw), *ab = abs_d(db, (size_t)s.k);
    double *ref = xcalloc(ny, sizeof *ref), *mag = xcalloc(ny, sizeof *mag);
    dg_ref64_conv2d_fwd(&s, dx, dw, with_bias ? db : NULL, ref);
    dg_ref64_conv2d_fwd(&s, ax, aw, with_bias ? ab : NULL, mag);
    float *got = xcalloc(ny, sizeof *got);
    dbuf *X = dbuf_new(e, x, nx * sizeof(float), 4);
    dbuf *W = dbuf_new(e, w, nw * sizeof(float), 0);
    dbuf *B = with_bias ? dbuf_new(e, b, (size_t)s.k * sizeof(float), 8) : NULL;
    dbuf *Y = dbuf_new(e, NULL, ny * sizeof(float), 12);
    dbuf *WK = conv_work(e, &s);
    if (X && W && Y && (B || !with_bias) && e->case_ok &&
        st_ok(e, e->be->conv2d_fwd(e->ctx, &s, R(X), R(W), R(B), R(Y), R(WK)), "conv2d_fwd") &&
        dbuf_get(e, Y, got)) {
        int K = s.c * s.kh * s.kw + 1;
        compare(e, "y", got, ref, mag, 4.0 * K * FLT_EPSILON, 0, ny);
        dbuf_guard(e, Y, "y");
    }
    free(x), free(w), free(b), free(dx), free(dw), free(db), free(ax), free(aw), free(ab);
    free(ref), free(mag), free(got);
    case_end(e, T_CONV_FWD);
}

static void t_conv_bwd(env *e, const conv_case *cc, bool want_dx, bool want_db, int idx)
{
    dg_conv_shape s = conv_shape(cc);
    char label[128];
    snprintf(label, sizeof label, "n%d c%d %dx%d k%d %dx%d s%d p%d dx %s db %s", s.n, s.c, s.h, s.w,
             s.k, s.kh, s.kw, s.stride, s.pad, want_dx ? "yes" : "no", want_db ? "yes" : "no");
    case_begin(e, T_CONV_BWD, label, (uint64_t)idx);
    size_t nx = (size_t)s.n * s.c * s.h * s.w, nw = (size_t)s.k * s.c * s.kh * s.kw;
    size_t ny = (size_t)s.n * s.k * s.ho * s.wo, nk = (size_t)s.k;
    float *x = rnd(e, nx, -1, 1), *w = rnd(e, nw, -1, 1), *dy = rnd(e, ny, -1, 1);
    double *dxx = to_d(x, nx), *dww = to_d(w, nw), *ddy = to_d(dy, ny);
    double *ax = abs_d(dxx, nx), *aw = abs_d(dww, nw), *ady = abs_d(ddy, ny);
    double *rdx = xcalloc(nx, sizeof *rdx), *rdw = xcalloc(nw, sizeof *rdw);
    double *rdb = xcalloc(nk, sizeof *rdb), *mdx = xcalloc(nx, sizeof *mdx);
    double *mdw = xcalloc(nw, sizeof *mdw), *mdb = xcalloc(nk, sizeof *mdb);
    dg_ref64_conv2d_bwd(&s, dxx, dww, ddy, rdx, rdw, rdb);
    dg_ref64_conv2d_bwd(&s, ax, aw, ady, mdx, mdw, mdb);
    size_t most = nx > nw ? nx : nw;
    float *got = xcalloc(most > nk ? most : nk, sizeof *got);
    dbuf *X = dbuf_new(e, x, nx * sizeof(float), 0);
    dbuf *W = dbuf_new(e, w, nw * sizeof(float), 4);
    dbuf *DY = dbuf_new(e, dy, ny * sizeof(float), 8);
    dbuf *DX = want_dx ? dbuf_new(e, NULL, nx * sizeof(float), 12) : NULL;
    dbuf *DW = dbuf_new(e, NULL, nw * sizeof(float), 16);
    dbuf *DB = want_db ? dbuf_new(e, NULL, nk * sizeof(float), 4) : NULL;
    dbuf *WK = conv_work(e, &s);
    if (X && W && DY && DW && e->case_ok &&
        st_ok(e, e->be->conv2d_bwd(e->ctx, &s, R(X), R(W), R(DY), R(DX), R(DW), R(DB), R(WK)),
              "conv2d_bwd")) {
        double red_dw = (double)s.n * s.ho * s.wo, red_dx = (double)s.k * s.kh * s.kw;
        if (dbuf_get(e, DW, got)) {
            compare(e, "dw", got, rdw, mdw, 4.0 * red_dw * FLT_EPSILON, 0, nw);
            dbuf_guard(e, DW, "dw");
        }
        if (DX && dbuf_get(e, DX, got)) {
            compare(e, "dx", got, rdx, mdx, 4.0 * red_dx * FLT_EPSILON, 0, nx);
            dbuf_guard(e, DX, "dx");
        }
        if (DB && dbuf_get(e, DB, got)) {
            compare(e, "db", got, rdb, mdb, 4.0 * red_dw * FLT_EPSILON, 0, nk);
            dbuf_guard(e, DB, "db");
        }
    }
    free(x), free(w), free(dy), free(dxx), free(dww), free(ddy), free(ax), free(aw), free(ady);
    free(rdx), free(rdw), free(rdb), free(mdx), free(mdw), free(mdb), free(got);
    case_end(e, T_CONV_BWD);
}

static void test_conv(env *e)
{
    /* n c h w k kh kw stride pad; the fifth and sixth are 1x1: pointwise (no
     * column matrix needed), and strided with a batch larger than the thread
     * count; the rest are for the cpu backend's direct dw kernel: k not a
     * multiple of its 16 columns, c kh kw not a multiple of its 6 rows, more
     * pixels than one 256-pixel pass (20x20), a kh != kw and a pad >= kh (dx
     * through the column matrix beside the direct dw) */
    static const conv_case cases[] = {
        {1, 1, 5, 5, 1, 3, 3, 1, 0},    {2, 3, 8, 8, 4, 3, 3, 1, 1},
        {3, 6, 12, 12, 16, 5, 5, 1, 0}, {2, 2, 9, 7, 3, 3, 3, 2, 1},
        {2, 5, 6, 4, 3, 1, 1, 1, 0},    {5, 2, 5, 6, 4, 1, 1, 2, 0},
        {3, 8, 10, 12, 20, 3, 3, 1, 1}, {2, 5, 7, 9, 16, 3, 3, 1, 1},
        {3, 3, 20, 20, 6, 5, 5, 1, 2},  {2, 3, 6, 7, 5, 3, 1, 1, 0},
        {2, 2, 4, 5, 3, 1, 1, 1, 1},
    };
    int idx = 0;
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        if (e->be->conv2d_fwd) {
            t_conv_fwd(e, &cases[i], false, idx++);
            t_conv_fwd(e, &cases[i], true, idx++);
        }
        if (e->be->conv2d_bwd)
            for (int v = 0; v < 4; v++)
                t_conv_bwd(e, &cases[i], v & 1, v >> 1, idx++);
    }
}

/* ---- softmax cross-entropy ------------------------------------------------ */

static void t_xent(env *e, int n, int classes, bool special, const float acc0[2], int idx)
{
    char label[96];
    snprintf(label, sizeof label, "n%d classes %d%s", n, classes,
             special ? " (label out of range, ties, large logits)" : "");
    case_begin(e, T_XENT, label, (uint64_t)idx);
    size_t nl = (size_t)n * classes;
    float *lg = rnd(e, nl, -3, 3), *lab01 = rnd(e, (size_t)n, 0, 1);
    int32_t *lab = xcalloc((size_t)n, sizeof *lab);
    for (int i = 0; i < n; i++)
        lab[i] = (int32_t)(lab01[i] * (float)classes) % classes;
    if (special) { /* n = 7, classes = 3 */
        static const float rows[7][3] = {
            {0.5f, 0.5f, 0.1f},       /* tie: first argmax is 0, label 1: wrong */
            {0.2f, 0.7f, 0.7f},       /* tie: first argmax is 1, label 1: right */
            {1.0f, 2.0f, 3.0f},       /* label 3: out of range */
            {100.0f, 90.0f, -100.0f}, /* exp overflows without the max shift */
            {-1.0f, -1.0f, -1.0f},    /* all tied: argmax 0, label 0: right */
            {0.3f, -0.2f, 0.9f},      /* label -1: out of range */
            {-50.0f, 40.0f, 39.5f},   /* label 2: wrong, tiny and large probabilities */
        };
        static const int32_t labs[7] = {1, 1, 3, 0, 0, -1, 2};
        memcpy(lg, rows, sizeof rows);
        memcpy(lab, labs, sizeof labs);
    }
    double *dl = to_d(lg, nl), *ref = xcalloc(nl, sizeof *ref), correct = 0;
    double loss = dg_ref64_xent(n, classes, dl, lab, ref, &correct);
    float *got = xcalloc(nl, sizeof *got), acc[2];
    dbuf *L = dbuf_new(e, lg, nl * sizeof(float), 4);
    dbuf *LB = dbuf_new(e, lab, (size_t)n * sizeof(int32_t), 0);
    dbuf *DL = dbuf_new(e, NULL, nl * sizeof(float), 8);
    dbuf *A = dbuf_new(e, acc0, 2 * sizeof(float), 12);
    if (L && LB && DL && A &&
        st_ok(e, e->be->xent(e->ctx, n, classes, R(L), R(LB), R(DL), R(A)), "xent") &&
        dbuf_get(e, DL, got) && dbuf_get(e, A, acc)) {
        /* dlogits relative to its row scale 1/n at least. */
        double *scale = xcalloc(nl, sizeof *scale);
        for (size_t i = 0; i < nl; i++)
            scale[i] = fmax(fabs(ref[i]), 1.0 / n);
        compare(e, "dlogits", got, ref, scale, 1e-5, 0, nl);
        double want_loss = (double)acc0[0] + loss;
        compare(e, "acc[0] (loss)", &acc[0], &want_loss, NULL, 1e-5, 1e-30, 1);
        double want_correct = (double)acc0[1] + correct;
        compare(e, "acc[1] (correct)", &acc[1], &want_correct, NULL, 0, 0, 1);
        dbuf_guard(e, DL, "dlogits");
        dbuf_guard(e, A, "acc");
        free(scale);
    }
    free(lg), free(lab01), free(lab), free(dl), free(ref), free(got);
    case_end(e, T_XENT);
}

static void test_xent(env *e)
{
    static const float zero[2] = {0, 0}, some[2] = {0.75f, 3.0f};
    t_xent(e, 1, 10, false, zero, 0);
    t_xent(e, 33, 10, false, some, 1);
    t_xent(e, 7, 3, true, some, 2);
    t_xent(e, 128, 10, false, zero, 3);
}

/* ---- sgd ------------------------------------------------------------------ */

static void t_sgd(env *e, size_t count, float momentum, float wd, bool zero_mom, int idx)
{
    char label[96];
    snprintf(label, sizeof label, "count %zu momentum %g wd %g%s, 3 steps", count, momentum, wd,
             zero_mom ? " mom 0" : "");
    case_begin(e, T_SGD, label, (uint64_t)idx);
    const float lr = 0.1f;
    size_t bytes = count * sizeof(float);
    float *w = rnd(e, count, -1, 1), *mom = rnd(e, count, -1, 1);
    if (zero_mom)
        memset(mom, 0, bytes);
    double *rw = to_d(w, count), *rm = to_d(mom, count);
    float *got = xcalloc(count, sizeof *got);
    dbuf *W = dbuf_new(e, w, bytes, 4);
    dbuf *M = dbuf_new(e, mom, bytes, 8);
    dbuf *G = dbuf_new(e, NULL, bytes, 0);
    for (int step = 0; step < 3 && W && M && G && e->case_ok; step++) {
        float *g = rnd(e, count, -1, 1);
        double *dg = to_d(g, count);
        dg_ref64_sgd(rw, dg, rm, count, lr, momentum, wd);
        if (st_ok(e, e->be->upload(e->ctx, G->buf, G->off, g, bytes), "upload") &&
            st_ok(e, e->be->sgd(e->ctx, R(W), R(G), R(M), count, lr, momentum, wd), "sgd") &&
            dbuf_get(e, W, got)) {
            compare(e,
                    step == 0   ? "w after step 1"
                    : step == 1 ? "w after step 2"
                                : "w after step 3",
                    got, rw, NULL, 1e-6, 1.0, count);
            if (dbuf_get(e, M, got)) {
                if (momentum == 0.0f) {
                    if (memcmp(got, mom, bytes) != 0)
                        miss(e, "momentum 0 changed mom");
                } else {
                    compare(e, "mom", got, rm, NULL, 1e-6, 1.0, count);
                }
            }
        }
        free(g), free(dg);
    }
    if (W && M && e->case_ok) {
        dbuf_guard(e, W, "w");
        dbuf_guard(e, M, "mom");
    }
    free(w), free(mom), free(rw), free(rm), free(got);
    case_end(e, T_SGD);
}

static void test_sgd(env *e)
{
    static const size_t counts[] = {7, 40000};
    int idx = 0;
    for (int c = 0; c < 2; c++)
        for (int v = 0; v < 4; v++, idx++)
            t_sgd(e, counts[c], v & 1 ? 0.9f : 0.0f, v & 2 ? 5e-4f : 0.0f, c == 0 && v == 1, idx);
}

/* ---- events --------------------------------------------------------------- */

static void test_events(env *e)
{
    case_begin(e, T_EVENTS, "record 0, gemm, record 1, elapsed", 0);
    dbuf *X = dbuf_new(e, NULL, 4096 * sizeof(float), 0);
    double ms = -1;
    if (X && st_ok(e, e->be->event_record(e->ctx, 0), "event_record") &&
        st_ok(e,
              e->be->gemm(e->ctx, false, false, 32, 32, 32, 1, R(X), 32, R(X), 32, 0,
                          (dg_ref){X->buf, X->off + 1024 * sizeof(float)}, 32),
              "gemm") &&
        st_ok(e, e->be->event_record(e->ctx, 1), "event_record") &&
        st_ok(e, e->be->synchronize(e->ctx), "synchronize") &&
        st_ok(e, e->be->event_elapsed(e->ctx, 0, 1, &ms), "event_elapsed")) {
        if (!(ms >= 0 && ms < 60000))
            miss(e, "elapsed %g ms", ms);
    }
    case_end(e, T_EVENTS);
}

/* ---- range checks (cpu): a ref past its buffer is a usage error ----------- */

static void expect_usage(env *e, dg_status st, const char *what)
{
    if (st != DG_ERR_USAGE)
        miss(e, "%s out of range returned %s, want usage", what, dg_status_name(st));
}

static void test_range(env *e)
{
    case_begin(e, T_RANGE, "bad refs and shapes are usage errors", 0);
    const dg_backend_iface *be = e->be;
    void *c = e->ctx;
    dbuf *S = dbuf_new(e, NULL, 256, 0); /* 64 floats, then 16 sentinel floats */
    if (!S) {
        case_end(e, T_RANGE);
        return;
    }
    dg_ref r = R(S), past = {S->buf, S->total}, none = {NULL, 0}; /* past: at the very end */
    dg_pool_shape ps = {.n = 1, .c = 1, .h = 8, .w = 8, .k = 2, .stride = 2, .ho = 4, .wo = 4};
    dg_pool_shape ps_bad = ps;
    ps_bad.ho = 8; /* inconsistent with h, k, stride */
    dg_conv_shape cs = {.n = 1,
                        .c = 1,
                        .h = 8,
                        .w = 8,
                        .k = 1,
                        .kh = 3,
                        .kw = 3,
                        .stride = 1,
                        .pad = 1,
                        .ho = 8,
                        .wo = 8};
    dg_conv_shape cs_bad = cs;
    cs_bad.wo = 9;
    size_t ws = be->conv2d_workspace ? be->conv2d_workspace(c, &cs) : 0;
    dbuf *WK = ws ? dbuf_new(e, NULL, ws, 0) : NULL;
    dg_ref wk = R(WK);
    if (be->fill)
        expect_usage(e, be->fill(c, r, 1000, 1.0f), "fill count");
    if (be->bias_add) {
        expect_usage(e, be->bias_add(c, r, past, 4, 4, 4), "bias_add bias");
        expect_usage(e, be->bias_add(c, r, r, 8, 8, 8), "bias_add y");
        expect_usage(e, be->bias_add(c, r, r, -1, 4, 4), "bias_add negative outer");
    }
    if (be->bias_grad)
        expect_usage(e, be->bias_grad(c, r, past, 4, 4, 4), "bias_grad db");
    if (be->relu_fwd)
        expect_usage(e, be->relu_fwd(c, r, past, 16), "relu_fwd y");
    if (be->relu_bwd)
        expect_usage(e, be->relu_bwd(c, past, r, r, 16), "relu_bwd y");
    if (be->maxpool_fwd) {
        expect_usage(e, be->maxpool_fwd(c, &ps, r, r, past), "maxpool_fwd argmax");
        expect_usage(e, be->maxpool_fwd(c, &ps_bad, r, r, r), "maxpool_fwd bad ho");
    }
    if (be->maxpool_bwd)
        expect_usage(e, be->maxpool_bwd(c, &ps, r, r, past), "maxpool_bwd dx");
    if (be->conv2d_fwd) {
        expect_usage(e, be->conv2d_fwd(c, &cs, r, r, none, past, wk), "conv2d_fwd y");
        expect_usage(e, be->conv2d_fwd(c, &cs, r, r, past, r, wk), "conv2d_fwd bias");
        expect_usage(e, be->conv2d_fwd(c, &cs_bad, r, r, none, r, wk), "conv2d_fwd bad wo");
        if (ws > S->total)
            expect_usage(e, be->conv2d_fwd(c, &cs, r, r, none, r, r), "conv2d_fwd work");
    }
    if (be->conv2d_bwd) {
        expect_usage(e, be->conv2d_bwd(c, &cs, r, r, r, none, past, none, wk), "conv2d_bwd dw");
        expect_usage(e, be->conv2d_bwd(c, &cs, r, r, r, past, r, none, wk), "conv2d_bwd dx");
        expect_usage(e, be->conv2d_bwd(c, &cs, r, r, r, none, r, past, wk), "conv2d_bwd db");
    }
    if (be->xent)
        expect_usage(e, be->xent(c, 4, 10, r, r, r, past), "xent acc");
    if (be->sgd)
        expect_usage(e, be->sgd(c, r, r, past, 16, 0.1f, 0.9f, 0.0f), "sgd mom");
    if (be->gemm)
        expect_usage(e, be->gemm(c, false, false, 8, 8, 8, 1, r, 8, r, 8, 0, past, 8), "gemm C");
    if (be->event_record) {
        expect_usage(e, be->event_record(c, DG_EVENT_SLOTS), "event_record slot");
        expect_usage(e, be->event_record(c, -1), "event_record slot -1");
    }
    dbuf whole = *S;
    whole.bytes = 0; /* every byte must still be the sentinel */
    if (e->case_ok && !dbuf_guard(e, &whole, "range buffer"))
        miss(e, "a rejected op wrote to its buffer");
    case_end(e, T_RANGE);
}

/* ---- driver ------------------------------------------------------------------ */

/* Hides the entry points of op from the copy of the interface the tests use. */
static void mask_op(dg_backend_iface *m, dg_op op)
{
    switch (op) {
    case DG_OP_GEMM: m->gemm = NULL; break;
    case DG_OP_FILL: m->fill = NULL; break;
    case DG_OP_BIAS_ADD: m->bias_add = NULL; break;
    case DG_OP_BIAS_GRAD: m->bias_grad = NULL; break;
    case DG_OP_RELU: m->relu_fwd = NULL, m->relu_bwd = NULL; break;
    case DG_OP_MAXPOOL: m->maxpool_fwd = NULL, m->maxpool_bwd = NULL; break;
    case DG_OP_CONV2D: m->conv2d_fwd = NULL, m->conv2d_bwd = NULL; break;
    case DG_OP_XENT: m->xent = NULL; break;
    case DG_OP_SGD: m->sgd = NULL; break;
    case DG_OP__COUNT: break;
    }
}

/* True when every entry point of op is present in m. */
static bool op_present(const dg_backend_iface *m, dg_op op)
{
    switch (op) {
    case DG_OP_GEMM: return m->gemm;
    case DG_OP_FILL: return m->fill;
    case DG_OP_BIAS_ADD: return m->bias_add;
    case DG_OP_BIAS_GRAD: return m->bias_grad;
    case DG_OP_RELU: return m->relu_fwd && m->relu_bwd;
    case DG_OP_MAXPOOL: return m->maxpool_fwd && m->maxpool_bwd;
    case DG_OP_CONV2D: return m->conv2d_workspace && m->conv2d_fwd && m->conv2d_bwd;
    case DG_OP_XENT: return m->xent;
    case DG_OP_SGD: return m->sgd;
    case DG_OP__COUNT: break;
    }
    return false;
}

/* label names the backend in the output ("cpu im2col" for a forced path). */
static void run_backend(dg_ctx *dctx, const char *name, const char *label)
{
    dg_backend_entry ent;
    if (dg_backend_lookup(dctx, name, &ent) != DG_OK || !ent.iface) {
        printf("skip %s: %s\n", name, ent.reason[0] ? ent.reason : dg_errmsg(dctx));
        return;
    }
    const dg_backend_iface *b = ent.iface;
    env e = {.name = label, .be = b};
    char reason[256] = "";
    dg_status st = b->init(0, &e.ctx, reason, sizeof reason);
    if (st != DG_OK) {
        printf("skip %s: %s (%s)\n", name, reason[0] ? reason : "init failed", dg_status_name(st));
        return;
    }
    dg_device_info info;
    if (b->device_info && b->device_info(e.ctx, 0, &info) == DG_OK)
        printf("%s: %s\n", label, info.name);

    /* The tests see only the entry points of ops the backend says it runs. */
    dg_backend_iface masked = *b;
    for (int op = 0; op < DG_OP__COUNT; op++) {
        bool sup = b->supports_op && b->supports_op(e.ctx, &(dg_op_desc){.op = (dg_op)op,
                                                                         .call = DG_CALL__COUNT,
                                                                         .any_shape = true});
        if (sup && op_present(b, (dg_op)op))
            continue;
        printf("skip %s %s: %s\n", name, dg_op_names[op],
               !sup ? "supports_op is false" : "an entry point is NULL");
        mask_op(&masked, (dg_op)op);
    }
    e.be = &masked;
    if (masked.gemm)
        test_gemm(&e);
    if (masked.fill)
        test_fill(&e);
    if (masked.bias_add || masked.bias_grad)
        test_bias(&e);
    if (masked.relu_fwd)
        test_relu(&e);
    if (masked.maxpool_fwd)
        test_maxpool(&e);
    if (masked.conv2d_fwd)
        test_conv(&e);
    if (masked.xent)
        test_xent(&e);
    if (masked.sgd)
        test_sgd(&e);
    if (b->event_record && b->event_elapsed && masked.gemm)
        test_events(&e);
    else
        printf("skip %s events: not implemented\n", name);
    if (strcmp(name, "cpu") == 0)
        test_range(&e);
    e.be = b;

    for (int t = 0; t < T__COUNT; t++)
        if (e.pass[t] + e.fail[t] > 0)
            printf("%s %-12s %2d/%-2d shapes passed  (worst err/tol %.3f)%s\n", name, t_names[t],
                   e.pass[t], e.pass[t] + e.fail[t], e.worst_of[t], e.fail[t] ? "  FAILED" : "");
    b->free(e.ctx);
}

int main(void)
{
    dg_ctx *dctx = dg_ctx_new();
    if (!dctx)
        return 2;
    for (size_t i = 0; i < dg_backend_names_count; i++)
        run_backend(dctx, dg_backend_names[i], dg_backend_names[i]);
    /* The cpu backend's portable convolution (im2col + OpenBLAS + col2im),
     * which machines without AVX2 and FMA run, forced where the direct
     * kernels would be taken, and the AVX2 kernels where the plain run took
     * the AVX-512 ones (skipped with the reason on a CPU without AVX2); an
     * unknown value is refused at init. */
    setenv("DEVGATE_CPU_CONV", "im2col", 1);
    run_backend(dctx, "cpu", "cpu im2col");
    setenv("DEVGATE_CPU_CONV", "avx2", 1);
    run_backend(dctx, "cpu", "cpu avx2");
    setenv("DEVGATE_CPU_CONV", "direct", 1);
    void *bad = NULL;
    char reason[256] = "";
    CHECK(dg_backend_cpu_iface()->init(0, &bad, reason, sizeof reason) == DG_ERR_USAGE);
    CHECK_MSG(strstr(reason, "DEVGATE_CPU_CONV") != NULL, "reason: %s", reason);
    if (bad)
        dg_backend_cpu_iface()->free(bad);
    unsetenv("DEVGATE_CPU_CONV");
    dg_ctx_free(dctx);
    CHECK_DONE();
}
