/* The cpu backend's convolution paths against each other: the AVX-512 direct
 * kernels (cpu_avx512.c) and the AVX2/FMA ones (cpu_ops.c) run the same
 * reduction in the same order (one float FMA a term: channels in chunks,
 * then ky, kx; dw over the pixels in order), so their y, dx, dw and db must
 * agree bit for bit on every shape; the portable im2col path sums in another
 * order and is held to the float64 reference by test_ops (which runs every
 * path: auto, avx2 and im2col). The shapes cover the fixture's layers (the
 * cifar and lenet convolutions) and the kernels' edges: output widths that
 * are not a multiple of 16 (a masked slot) or leave an odd slot count,
 * channel counts that are not a multiple of the 8-row block, reductions
 * longer than one 256-tap chunk, 1x1, 5x5, 3x1, pad up to kh - 1 and a
 * strided shape (the panel kernel, not AVX-512 yet). Each path's context is
 * opened with DEVGATE_CPU_CONV set; where this CPU has no AVX-512 the
 * comparison is skipped (exit 77) after checking that avx512 is refused with
 * a message naming the variable. */
#include "backend/backend.h"
#include "core/core.h"

#include "check.h"

#include <stdint.h>

enum { PATH_AVX512, PATH_AVX2, PATH__COUNT };
static const char *const path_env[PATH__COUNT] = {"avx512", "avx2"};

typedef struct conv_run {
    float *y, *dx, *dw, *db; /* outputs, read back */
} conv_run;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float rnd(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 40) / (double)(1u << 24)) * 2.0f - 1.0f;
}

static float *rnd_array(size_t n)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; p && i < n; i++)
        p[i] = rnd();
    return p;
}

/* A context on the path DEVGATE_CPU_CONV names; NULL with the reason when
 * the backend refuses it. */
static void *open_path(const char *mode, char *reason, size_t len)
{
    void *ctx = NULL;
    setenv("DEVGATE_CPU_CONV", mode, 1);
    dg_status st = dg_backend_cpu_iface()->init(0, &ctx, reason, len);
    unsetenv("DEVGATE_CPU_CONV");
    return st == DG_OK ? ctx : NULL;
}

/* A buffer holding n floats of src (zeros when src is NULL). */
static void *upload(void *ctx, const float *src, size_t n)
{
    const dg_backend_iface *b = dg_backend_cpu_iface();
    void *buf = NULL;
    size_t bytes = (n ? n : 1) * sizeof(float);
    if (b->buf_alloc(ctx, bytes, &buf) != DG_OK)
        return NULL;
    float *zero = src ? NULL : calloc(n ? n : 1, sizeof(float));
    if (b->upload(ctx, buf, 0, src ? src : zero, bytes) != DG_OK) {
        b->buf_free(ctx, buf);
        buf = NULL;
    }
    free(zero);
    return buf;
}

static float *download(void *ctx, void *buf, size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (p && dg_backend_cpu_iface()->download(ctx, buf, 0, p, n * sizeof *p) != DG_OK) {
        free(p);
        p = NULL;
    }
    return p;
}

/* Forward and backward of shape s on ctx from the inputs x, w, bias, dy;
 * false (with a message) when a call fails. */
static bool run_conv(void *ctx, const char *mode, const dg_conv_shape *s, const float *x,
                     const float *w, const float *bias, const float *dy, conv_run *out)
{
    const dg_backend_iface *b = dg_backend_cpu_iface();
    size_t nx = (size_t)s->n * s->c * s->h * s->w, nw = (size_t)s->k * s->c * s->kh * s->kw;
    size_t ny = (size_t)s->n * s->k * s->ho * s->wo, nk = (size_t)s->k;
    size_t ws = b->conv2d_workspace(ctx, s);
    void *X = upload(ctx, x, nx), *W = upload(ctx, w, nw), *B = upload(ctx, bias, nk);
    void *DY = upload(ctx, dy, ny), *Y = upload(ctx, NULL, ny), *DX = upload(ctx, NULL, nx);
    void *DW = upload(ctx, NULL, nw), *DB = upload(ctx, NULL, nk);
    void *WK = upload(ctx, NULL, ws / sizeof(float) + 1);
    bool ok = X && W && B && DY && Y && DX && DW && DB && WK;
    dg_ref rx = {X, 0}, rw = {W, 0}, rb = {B, 0}, rdy = {DY, 0}, ry = {Y, 0}, rdx = {DX, 0};
    dg_ref rdw = {DW, 0}, rdb = {DB, 0}, rwk = {WK, 0};
    if (ok && (b->conv2d_fwd(ctx, s, rx, rw, rb, ry, rwk) != DG_OK ||
               b->conv2d_bwd(ctx, s, rx, rw, rdy, rdx, rdw, rdb, rwk) != DG_OK)) {
        fprintf(stderr, "%s: %s\n", mode, b->last_error(ctx));
        ok = false;
    }
    if (ok) {
        out->y = download(ctx, Y, ny), out->dx = download(ctx, DX, nx);
        out->dw = download(ctx, DW, nw), out->db = download(ctx, DB, nk);
        ok = out->y && out->dx && out->dw && out->db;
    }
    void *bufs[] = {X, W, B, DY, Y, DX, DW, DB, WK};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        b->buf_free(ctx, bufs[i]);
    return ok;
}

/* Counts the elements of got that differ in their bits from want; prints the
 * first. */
static size_t bit_diffs(const char *what, const dg_conv_shape *s, const float *got,
                        const float *want, size_t n)
{
    size_t diffs = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&got[i], &want[i], sizeof(float)) == 0)
            continue;
        if (!diffs++)
            fprintf(
                stderr,
                "n%d c%d %dx%d k%d %dx%d s%d p%d: %s[%zu] avx512 %.9g, avx2 %.9g (%zu elements)\n",
                s->n, s->c, s->h, s->w, s->k, s->kh, s->kw, s->stride, s->pad, what, i,
                (double)got[i], (double)want[i], n);
    }
    return diffs;
}

static void free_run(conv_run *r)
{
    free(r->y), free(r->dx), free(r->dw), free(r->db);
}

/* One shape on both paths, its outputs compared bit for bit. */
static void check_shape(void *const ctx[PATH__COUNT], int n, int c, int h, int w, int k, int kh,
                        int kw, int stride, int pad)
{
    dg_conv_shape s = {.n = n,
                       .c = c,
                       .h = h,
                       .w = w,
                       .k = k,
                       .kh = kh,
                       .kw = kw,
                       .stride = stride,
                       .pad = pad,
                       .ho = (h + 2 * pad - kh) / stride + 1,
                       .wo = (w + 2 * pad - kw) / stride + 1};
    size_t nx = (size_t)n * c * h * w, nw = (size_t)k * c * kh * kw;
    size_t ny = (size_t)n * k * s.ho * s.wo;
    float *x = rnd_array(nx), *wt = rnd_array(nw), *bias = rnd_array((size_t)k);
    float *dy = rnd_array(ny);
    conv_run run[PATH__COUNT] = {{0}};
    bool ok = x && wt && bias && dy;
    for (int p = 0; ok && p < PATH__COUNT; p++)
        ok = run_conv(ctx[p], path_env[p], &s, x, wt, bias, dy, &run[p]);
    CHECK_MSG(ok, "conv n%d c%d %dx%d k%d %dx%d s%d p%d did not run on both paths", n, c, h, w, k,
              kh, kw, stride, pad);
    if (ok) {
        size_t d = bit_diffs("y", &s, run[0].y, run[1].y, ny);
        d += bit_diffs("dx", &s, run[0].dx, run[1].dx, nx);
        d += bit_diffs("dw", &s, run[0].dw, run[1].dw, nw);
        d += bit_diffs("db", &s, run[0].db, run[1].db, (size_t)k);
        CHECK_MSG(d == 0, "conv n%d c%d %dx%d k%d %dx%d s%d p%d: %zu elements differ", n, c, h, w,
                  k, kh, kw, stride, pad, d);
    }
    for (int p = 0; p < PATH__COUNT; p++)
        free_run(&run[p]);
    free(x), free(wt), free(bias), free(dy);
}

int main(void)
{
    void *ctx[PATH__COUNT] = {NULL};
    char reason[256] = "";
    const dg_backend_iface *b = dg_backend_cpu_iface();
    ctx[PATH_AVX512] = open_path("avx512", reason, sizeof reason);
    if (!ctx[PATH_AVX512]) {
        CHECK_MSG(strstr(reason, "DEVGATE_CPU_CONV=avx512") != NULL, "reason: %s", reason);
        printf("no AVX-512 path here: %s\n", reason);
        check_skip("the AVX-512 kernels cannot run on this CPU");
    }
    ctx[PATH_AVX2] = open_path("avx2", reason, sizeof reason);
    CHECK_MSG(ctx[PATH_AVX2] != NULL, "avx2 refused where avx512 runs: %s", reason);
    if (!ctx[PATH_AVX2]) {
        b->free(ctx[PATH_AVX512]);
        CHECK_DONE();
    }
    char versions[512];
    b->versions(ctx[PATH_AVX512], versions, sizeof versions);
    CHECK_MSG(strstr(versions, "conv avx512") != NULL, "versions: %s", versions);
    b->versions(ctx[PATH_AVX2], versions, sizeof versions);
    CHECK_MSG(strstr(versions, "conv avx2") != NULL, "versions: %s", versions);

    /* n c h w k kh kw stride pad: the fixture's layers first (cifar's four,
     * lenet's two), then the edges */
    static const int shapes[][9] = {
        {3, 3, 32, 32, 32, 3, 3, 1, 1},  {2, 32, 32, 32, 32, 3, 3, 1, 1},
        {2, 32, 16, 16, 64, 3, 3, 1, 1}, {2, 64, 16, 16, 64, 3, 3, 1, 1},
        {3, 1, 28, 28, 6, 5, 5, 1, 0},   {3, 6, 12, 12, 16, 5, 5, 1, 0},
        {1, 1, 5, 5, 1, 3, 3, 1, 0},     {2, 3, 8, 8, 4, 3, 3, 1, 1},
        {3, 8, 10, 12, 20, 3, 3, 1, 1},  {2, 5, 7, 9, 17, 3, 3, 1, 1},
        {3, 3, 20, 20, 9, 5, 5, 1, 2},   {2, 3, 6, 7, 5, 3, 1, 1, 0},
        {2, 2, 4, 5, 3, 1, 1, 1, 0},     {2, 4, 9, 40, 33, 3, 3, 1, 2},
        {2, 3, 17, 19, 8, 3, 3, 1, 1},   {2, 40, 6, 6, 12, 3, 3, 1, 1},
        {2, 2, 9, 7, 3, 3, 3, 2, 1},     {4, 1, 3, 3, 7, 3, 3, 1, 1},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int *v = shapes[i];
        check_shape(ctx, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
    }
    for (int p = 0; p < PATH__COUNT; p++)
        b->free(ctx[p]);
    CHECK_DONE();
}
