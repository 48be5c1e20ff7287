/* OpenCL backend: "no platforms" reason, device info, buffer round trips, range
 * checks, SGEMM in all four transpose combinations against a double-precision
 * reference for every kernel variant (DEVGATE_OPENCL_KERNEL), plus the GFLOP/s
 * of a 512^3 product; then every training op against small hand-written
 * references (odd sizes, batch 1, overlapping pooling windows, strided and
 * padded convolutions in one and several chunks, out-of-range labels), the
 * events, and the range checks of every op; the page-locked upload blocks
 * (host_alloc): bit-for-bit equal to a plain upload, ordered before the ops,
 * host_wait held until the copy ran (a gated copy queue), the refusals. */
#include "backend/backend.h"
#include "backend/opencl/opencl_hooks.h"
#include "core/core.h"

#include "check.h"

#include <float.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

static const dg_backend_iface *be;
#define OCL_TEST_BLOCKS 64 /* page-locked blocks a context hands out (OCL_PIN_BLOCKS) */

/* ---- "no platforms" reason, checked in a child with an empty ICD folder ---- */

static void test_no_platforms(void)
{
    const char *tmp = getenv("TMPDIR");
    char tdir[512];
    snprintf(tdir, sizeof tdir, "%s/dg_ocl_icd_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    char *d = mkdtemp(tdir);
    CHECK(d != NULL);
    if (!d)
        return;
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        setenv("OCL_ICD_VENDORS", d, 1);
        unsetenv("OCL_ICD_FILENAMES");
        char reason[256] = "";
        void *ctx = NULL;
        dg_status st = be->init(0, &ctx, reason, sizeof reason);
        char line[300];
        int n = snprintf(line, sizeof line, "%d %s", (int)st, reason);
        if (write(fds[1], line, (size_t)n) != n)
            _exit(2);
        be->free(ctx);
        _exit(0);
    }
    close(fds[1]);
    char got[300] = "";
    size_t len = 0;
    ssize_t r;
    while ((r = read(fds[0], got + len, sizeof got - 1 - len)) > 0)
        len += (size_t)r;
    got[len] = '\0';
    close(fds[0]);
    int ws = 0;
    waitpid(pid, &ws, 0);
    rmdir(d);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    char want[300];
    snprintf(want, sizeof want, "%d OpenCL ICD loader found no platforms (clGetPlatformIDs: -1001)",
             (int)DG_ERR_UNAVAILABLE);
    CHECK_STR(got, want);
}

/* ---- helpers ---------------------------------------------------------------- */

static void fill(dg_rng *r, float *p, size_t n)
{
    dg_rng_uniform(r, p, n, -1.0f, 1.0f);
}

/* op(X)[i][p] of a row-major matrix with leading dim ld, transposed when t. */
static float at(const float *x, bool t, int ld, int i, int p)
{
    return t ? x[(size_t)p * ld + i] : x[(size_t)i * ld + p];
}

/* Naive row-major reference in double: ref = alpha*op(A)*op(B) + beta*C0, and
 * the magnitude bound mag = |alpha|*sum|a||b| + |beta||c0|. */
static void ref_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, const float *c0, int ldc, double *ref,
                     double *mag)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0, sa = 0;
            for (int p = 0; p < k; p++) {
                double x = (double)at(a, ta, lda, i, p) * (double)at(b, tb, ldb, p, j);
                s += x;
                sa += fabs(x);
            }
            double c = beta == 0.0f ? 0.0 : (double)beta * c0[(size_t)i * ldc + j];
            ref[(size_t)i * n + j] = (double)alpha * s + c;
            mag[(size_t)i * n + j] = fabs((double)alpha) * sa + fabs(c);
        }
}

/* One GEMM case: operands at byte offsets inside larger buffers, padded leading
 * dims, A stored k x m when ta and B stored n x k when tb; checks every
 * element and that nothing outside C's matrix changed. */
static void gemm_case(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha, float beta,
                      int pad, size_t off)
{
    int ra = ta ? k : m, ca = ta ? m : k, rb = tb ? n : k, cb = tb ? k : n;
    int lda = ca + pad, ldb = cb + pad, ldc = n + pad;
    size_t na = (size_t)ra * lda, nb = (size_t)rb * ldb, nc = (size_t)m * ldc;
    size_t ba = off + (na ? na : 1) * 4, bb = off + (nb ? nb : 1) * 4, bc = off + nc * 4 + 64;
    float *a = dg_malloc(ba), *b = dg_malloc(bb), *c = dg_malloc(bc), *out = dg_malloc(bc);
    double *ref = dg_malloc((size_t)m * n * sizeof(double) + 1);
    double *mag = dg_malloc((size_t)m * n * sizeof(double) + 1);
    CHECK(a && b && c && out && ref && mag);
    if (!a || !b || !c || !out || !ref || !mag)
        goto done;
    dg_rng r;
    dg_rng_init(&r, 42u + (uint64_t)m * 7 + (uint64_t)n * 131 + (uint64_t)k, 1);
    fill(&r, a, ba / 4);
    fill(&r, b, bb / 4);
    fill(&r, c, bc / 4);
    float *ca_ = (float *)((char *)a + off), *cb_ = (float *)((char *)b + off);
    float *cc = (float *)((char *)c + off);
    if (beta == 0.0f) /* uninitialised C: NaN must not leak into the result */
        for (size_t i = 0; i < nc; i++)
            cc[i] = NAN;
    ref_gemm(ta, tb, m, n, k, alpha, ca_, lda, cb_, ldb, beta, cc, ldc, ref, mag);

    void *da = NULL, *db = NULL, *dc = NULL;
    CHECK(be->buf_alloc(ctx, ba, &da) == DG_OK);
    CHECK(be->buf_alloc(ctx, bb, &db) == DG_OK);
    CHECK(be->buf_alloc(ctx, bc, &dc) == DG_OK);
    if (da && db && dc) {
        CHECK(be->upload(ctx, da, 0, a, ba) == DG_OK);
        CHECK(be->upload(ctx, db, 0, b, bb) == DG_OK);
        CHECK(be->upload(ctx, dc, 0, c, bc) == DG_OK);
        dg_status st = be->gemm(ctx, ta, tb, m, n, k, alpha, (dg_ref){da, off}, lda,
                                (dg_ref){db, off}, ldb, beta, (dg_ref){dc, off}, ldc);
        CHECK_MSG(st == DG_OK, "gemm %c%c %dx%dx%d: %s", ta ? 't' : 'n', tb ? 't' : 'n', m, n, k,
                  be->last_error(ctx));
        CHECK(be->synchronize(ctx) == DG_OK);
        CHECK(be->download(ctx, dc, 0, out, bc) == DG_OK);
        int bad = 0, outside = 0;
        for (size_t e = 0; e < bc / 4; e++) {
            size_t rel = e - off / 4;
            bool in = e >= off / 4 && rel < nc && (int)(rel % (size_t)ldc) < n;
            if (!in) {
                if (memcmp(&out[e], &c[e], 4) != 0)
                    outside++;
                continue;
            }
            size_t i = rel / (size_t)ldc, j = rel % (size_t)ldc;
            double want = ref[i * n + j];
            double tol = 2.0 * (k > 0 ? k : 1) * FLT_EPSILON * mag[i * n + j] + 1e-30;
            double err = fabs((double)out[e] - want);
            if (!(err <= tol) && bad++ < 3)
                fprintf(stderr, "  C[%zu,%zu] = %.9g, want %.9g (tol %.3g)\n", i, j, (double)out[e],
                        want, tol);
        }
        CHECK_MSG(bad == 0, "gemm %c%c m=%d n=%d k=%d alpha=%g beta=%g pad=%d off=%zu: %d wrong",
                  ta ? 't' : 'n', tb ? 't' : 'n', m, n, k, (double)alpha, (double)beta, pad, off,
                  bad);
        CHECK_MSG(outside == 0, "gemm %c%c m=%d n=%d k=%d: %d elements outside C changed",
                  ta ? 't' : 'n', tb ? 't' : 'n', m, n, k, outside);
    }
    be->buf_free(ctx, da);
    be->buf_free(ctx, db);
    be->buf_free(ctx, dc);
done:
    dg_free(a);
    dg_free(b);
    dg_free(c);
    dg_free(out);
    dg_free(ref);
    dg_free(mag);
}

/* GFLOP/s of an n^3 product (best of a few synchronised runs). */
static double gflops(void *ctx, int n)
{
    size_t bytes = (size_t)n * n * 4;
    float *h = dg_malloc(bytes);
    void *a = NULL, *b = NULL, *c = NULL;
    double best = 0;
    if (!h || be->buf_alloc(ctx, bytes, &a) || be->buf_alloc(ctx, bytes, &b) ||
        be->buf_alloc(ctx, bytes, &c))
        goto done;
    dg_rng r;
    dg_rng_init(&r, 7, 2);
    fill(&r, h, (size_t)n * n);
    if (be->upload(ctx, a, 0, h, bytes) || be->upload(ctx, b, 0, h, bytes))
        goto done;
    if (be->gemm(ctx, false, false, n, n, n, 1.0f, (dg_ref){a, 0}, n, (dg_ref){b, 0}, n, 0.0f,
                 (dg_ref){c, 0}, n) ||
        be->synchronize(ctx))
        goto done; /* warm-up */
    for (int rep = 0; rep < 3; rep++) {
        double t0 = dg_now();
        int iters = 3;
        for (int it = 0; it < iters; it++)
            if (be->gemm(ctx, false, false, n, n, n, 1.0f, (dg_ref){a, 0}, n, (dg_ref){b, 0}, n,
                         0.0f, (dg_ref){c, 0}, n))
                goto done;
        if (be->synchronize(ctx))
            goto done;
        double dt = dg_now() - t0;
        double g = 2.0 * n * n * (double)n * iters / dt / 1e9;
        if (g > best)
            best = g;
    }
done:
    be->buf_free(ctx, a);
    be->buf_free(ctx, b);
    be->buf_free(ctx, c);
    dg_free(h);
    return best;
}

/* ---- tests ------------------------------------------------------------------ */

static void test_info(void *ctx)
{
    int nd = be->device_count(ctx);
    CHECK(nd >= 1);
    dg_device_info info;
    CHECK(be->device_info(ctx, 0, &info) == DG_OK);
    CHECK(info.name[0] != '\0');
    CHECK(info.vendor[0] != '\0');
    CHECK(info.driver_version[0] != '\0');
    CHECK(info.platform[0] != '\0');
    CHECK(info.mem_total.valid && info.mem_total.value > 0);
    CHECK(info.compute_units.valid && info.compute_units.value >= 1);
    printf("device 0: %s | %s | driver %s | %s | %.0f MiB | %.0f CUs | free %s\n", info.name,
           info.vendor, info.driver_version, info.platform, info.mem_total.value / 1048576.0,
           info.compute_units.value, info.mem_free.valid ? "reported" : "not reported");
    CHECK(be->device_info(ctx, nd, &info) == DG_ERR_NOT_FOUND);
    CHECK(strstr(be->last_error(ctx), "out of range") != NULL);
    CHECK(be->device_info(ctx, -1, &info) == DG_ERR_NOT_FOUND);
    CHECK(be->device_count(NULL) == nd);

    char ver[256] = "";
    be->versions(ctx, ver, sizeof ver);
    printf("versions: %s\n", ver);
    CHECK(strncmp(ver, "OpenCL ", 7) == 0);
    CHECK(strstr(ver, "; driver ") != NULL);
    char small[8];
    be->versions(ctx, small, sizeof small);
    CHECK(strlen(small) == 7);
    CHECK(be->supports_op(
        ctx, &(dg_op_desc){.op = DG_OP_GEMM, .call = DG_CALL__COUNT, .any_shape = true}));
    CHECK(be->version == DG_BACKEND_IFACE_VERSION);
    CHECK_STR(be->name, "opencl");
}

static void test_buffers(void *ctx)
{
    enum { N = 4096 };
    unsigned char *h = dg_malloc(N), *back = dg_malloc(N), *part = dg_malloc(300);
    void *buf = NULL;
    CHECK(h && back && part);
    if (!h || !back || !part)
        goto done;
    for (int i = 0; i < N; i++)
        h[i] = (unsigned char)(i * 31 + 7);
    CHECK(be->buf_alloc(ctx, N, &buf) == DG_OK && buf);
    if (!buf)
        goto done;
    CHECK(be->upload(ctx, buf, 0, h, N) == DG_OK);
    for (int i = 0; i < 300; i++)
        part[i] = (unsigned char)(255 - i);
    CHECK(be->upload(ctx, buf, 37, part, 300) == DG_OK); /* odd byte offset */
    memcpy(h + 37, part, 300);
    CHECK(be->download(ctx, buf, 0, back, N) == DG_OK);
    CHECK(memcmp(back, h, N) == 0);
    memset(back, 0, N);
    CHECK(be->download(ctx, buf, 13, back, 1001) == DG_OK);
    CHECK(memcmp(back, h + 13, 1001) == 0);
    CHECK(be->download(ctx, buf, N - 1, back, 1) == DG_OK && back[0] == h[N - 1]);
    CHECK(be->upload(ctx, buf, N, part, 0) == DG_OK); /* empty range at the end */

    /* Out-of-range and malformed requests fail cleanly with a message. */
    CHECK(be->upload(ctx, buf, N - 10, part, 11) == DG_ERR_USAGE);
    CHECK(strstr(be->last_error(ctx), "outside") != NULL);
    CHECK(be->download(ctx, buf, N + 1, back, 0) == DG_ERR_USAGE);
    CHECK(be->download(ctx, buf, SIZE_MAX, back, 2) == DG_ERR_USAGE);
    CHECK(be->download(ctx, buf, 2, back, SIZE_MAX) == DG_ERR_USAGE);
    CHECK(be->upload(ctx, NULL, 0, part, 4) == DG_ERR_USAGE);
    CHECK(be->upload(ctx, buf, 0, NULL, 4) == DG_ERR_USAGE);
    void *none = NULL;
    CHECK(be->buf_alloc(ctx, 0, &none) == DG_ERR_USAGE && none == NULL);
    CHECK(be->buf_alloc(ctx, SIZE_MAX, &none) == DG_ERR_DEVICE_OOM && none == NULL);
    CHECK(strstr(be->last_error(ctx), "CL_DEVICE_MAX_MEM_ALLOC_SIZE") != NULL);

    /* GEMM argument checks: alignment, leading dims, extents. */
    CHECK(be->gemm(ctx, false, false, 4, 4, 4, 1, (dg_ref){buf, 2}, 4, (dg_ref){buf, 0}, 4, 0,
                   (dg_ref){buf, 0}, 4) == DG_ERR_USAGE);
    CHECK(strstr(be->last_error(ctx), "aligned") != NULL);
    CHECK(be->gemm(ctx, false, false, 4, 4, 4, 1, (dg_ref){buf, 0}, 3, (dg_ref){buf, 0}, 4, 0,
                   (dg_ref){buf, 0}, 4) == DG_ERR_USAGE);
    CHECK(be->gemm(ctx, false, false, 4, 8, 4, 1, (dg_ref){buf, 0}, 4, (dg_ref){buf, 0}, 8, 0,
                   (dg_ref){buf, 0}, 7) == DG_ERR_USAGE);
    CHECK(be->gemm(ctx, false, false, 64, 64, 64, 1, (dg_ref){buf, 0}, 64, (dg_ref){buf, 0}, 64, 0,
                   (dg_ref){buf, 0}, 64) == DG_ERR_USAGE);
    CHECK(strstr(be->last_error(ctx), "outside") != NULL);
    CHECK(be->gemm(ctx, false, false, 4, 4, 4, 1, (dg_ref){buf, 0}, 4, (dg_ref){buf, N - 32}, 4, 0,
                   (dg_ref){buf, 0}, 4) == DG_ERR_USAGE);
    CHECK(be->gemm(ctx, false, false, -1, 4, 4, 1, (dg_ref){buf, 0}, 4, (dg_ref){buf, 0}, 4, 0,
                   (dg_ref){buf, 0}, 4) == DG_ERR_USAGE);
    CHECK(be->gemm(ctx, false, false, 4, 4, 4, 1, (dg_ref){NULL, 0}, 4, (dg_ref){buf, 0}, 4, 0,
                   (dg_ref){buf, 0}, 4) == DG_ERR_USAGE);
    CHECK(be->gemm(ctx, false, false, 0, 4, 4, 1, (dg_ref){NULL, 0}, 4, (dg_ref){NULL, 0}, 4, 0,
                   (dg_ref){NULL, 0}, 4) == DG_OK);
    CHECK(be->synchronize(ctx) == DG_OK);
    be->buf_free(ctx, buf);
done:
    be->buf_free(ctx, NULL);
    dg_free(h);
    dg_free(back);
    dg_free(part);
}

static void test_gemm(void *ctx)
{
    static const int shapes[][3] = {{1, 1, 1},       {7, 5, 3},     {33, 17, 65}, {64, 64, 64},
                                    {513, 257, 129}, {1, 512, 300}, {65, 63, 17}, {5, 6, 0}};
    for (int t = 0; t < 4; t++) {
        bool ta = t & 2, tb = t & 1;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            gemm_case(ctx, ta, tb, m, n, k, 1.0f, 0.0f, 0, 0);
            gemm_case(ctx, ta, tb, m, n, k, -0.5f, 1.5f, 3, 20);
        }
        gemm_case(ctx, ta, tb, 33, 17, 65, 2.0f, -1.0f, 7, 4);
        gemm_case(ctx, ta, tb, 100, 70, 50, 0.0f, 0.25f, 1, 12);
        gemm_case(ctx, ta, tb, 129, 130, 31, 1.0f, 1.0f, 64, 256);
    }
}

/* ---- page-locked upload blocks (host_alloc / host_wait / host_free) --------- */

typedef struct waiter {
    void *ctx;
    const void *p;
    atomic_int done; /* 1 once host_wait returned */
    dg_status st;
} waiter;

static void *wait_thread(void *arg)
{
    waiter *w = arg;
    w->st = be->host_wait(w->ctx, w->p);
    atomic_store(&w->done, 1);
    return NULL;
}

/* Element i of the block in round r (a third of them negative, for the relu). */
static float pinned_val(size_t i, int r)
{
    return (float)((i % 1000) + 1 + (size_t)r) * (i % 3 ? 1.0f : -1.0f);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* An upload from a page-locked block only enqueues (on the compute queue, or
 * staged through the copy queue: DEVGATE_OPENCL_UPLOAD): its
 * bytes must equal a plain upload's bit for bit, land before the ops issued
 * after it, and the block must stay unwritable (host_wait blocks) while its
 * copy has not run. The copy queue is held shut by dg_ocl_hold_copies so the
 * copy is certainly in flight when host_wait is asked; a host_wait that did
 * not wait returns at once and the check on its thread fails. */
static void test_pinned(void *ctx)
{
    const size_t n = 1 << 16, bytes = n * sizeof(float);
    CHECK(be->host_alloc && be->host_free && be->host_wait);
    float *a = NULL, *plain = dg_malloc(bytes), *back = dg_malloc(bytes), *back2 = dg_malloc(bytes);
    void *x = NULL, *y = NULL, *z = NULL, *blk[OCL_TEST_BLOCKS + 1] = {0};
    CHECK(plain && back && back2);
    CHECK(be->host_alloc(ctx, bytes, (void **)&a) == DG_OK && a != NULL);
    CHECK(be->buf_alloc(ctx, bytes, &x) == DG_OK && be->buf_alloc(ctx, bytes, &y) == DG_OK &&
          be->buf_alloc(ctx, bytes, &z) == DG_OK);
    if (!a || !plain || !back || !back2 || !x || !y || !z)
        goto done;
    dg_rng r;
    dg_rng_init(&r, 1234, 0);
    for (size_t i = 0; i < n; i += 4) {
        uint32_t u[4]; /* any bit pattern, NaNs and denormals included */
        dg_rng_next4(&r, u);
        memcpy(&a[i], u, sizeof u);
        memcpy(&plain[i], u, sizeof u);
    }
    /* Bit for bit: the same bytes through the page-locked path and the plain one. */
    CHECK(be->upload(ctx, x, 0, a, bytes) == DG_OK);
    CHECK(be->upload(ctx, z, 0, plain, bytes) == DG_OK);
    CHECK(be->download(ctx, x, 0, back, bytes) == DG_OK);
    CHECK(be->download(ctx, z, 0, back2, bytes) == DG_OK);
    CHECK(memcmp(back, plain, bytes) == 0 && memcmp(back, back2, bytes) == 0);
    CHECK(be->host_wait(ctx, a) == DG_OK);

    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < n; i++)
            a[i] = pinned_val(i, round);
        /* The copy is held back: the upload and the relu after it only enqueue. */
        CHECK(dg_ocl_hold_copies(ctx, true) == DG_OK);
        CHECK(be->upload(ctx, x, 0, a, bytes) == DG_OK);
        CHECK(be->relu_fwd(ctx, (dg_ref){x, 0}, (dg_ref){y, 0}, n) == DG_OK);
        waiter w = {ctx, a + 7, 0, DG_ERR_BACKEND};
        pthread_t th;
        CHECK(pthread_create(&th, NULL, wait_thread, &w) == 0);
        sleep_ms(round == 0 ? 200 : 50);
        CHECK_MSG(atomic_load(&w.done) == 0,
                  "round %d: host_wait returned while the block's copy was held back", round);
        CHECK(dg_ocl_hold_copies(ctx, false) == DG_OK);
        pthread_join(th, NULL);
        CHECK(atomic_load(&w.done) == 1 && w.st == DG_OK);
        /* The block may be refilled now; the device keeps what was copied. */
        for (size_t i = 0; i < n; i++)
            a[i] = -1.0f;
        CHECK(be->upload(ctx, x, 64, a + 16, 4096) == DG_OK); /* a sub-range, at an offset */
        CHECK(be->download(ctx, y, 0, back, bytes) == DG_OK);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += back[i] != fmaxf(pinned_val(i, round), 0.0f);
        CHECK_MSG(bad == 0, "round %d: %zu of %zu relu outputs did not see the upload", round, bad,
                  n);
        CHECK(be->download(ctx, x, 0, back, 64 + 4096 + 64) == DG_OK);
        CHECK(back[15] == pinned_val(15, round) && back[16] == -1.0f && back[16 + 1023] == -1.0f &&
              back[16 + 1024] == pinned_val(16 + 1024, round));
        CHECK(be->host_wait(ctx, a) == DG_OK);
        CHECK(be->host_wait(ctx, a) == DG_OK); /* nothing in flight: returns at once */
    }
    /* Plain memory is not a block; the slots run out; NULL is accepted. */
    CHECK(be->host_wait(ctx, back) == DG_ERR_USAGE);
    CHECK(strstr(be->last_error(ctx), "page-locked") != NULL);
    CHECK(be->host_wait(ctx, NULL) == DG_ERR_USAGE);
    CHECK(be->host_alloc(ctx, 64, NULL) == DG_ERR_USAGE);
    void *big = (void *)1;
    CHECK(be->host_alloc(ctx, SIZE_MAX, &big) == DG_ERR_DEVICE_OOM && big == NULL);
    int got = 0;
    for (int i = 0; i < OCL_TEST_BLOCKS + 1; i++)
        if (be->host_alloc(ctx, i ? 64 : 0, &blk[i]) == DG_OK)
            got++;
    CHECK_MSG(got == OCL_TEST_BLOCKS - 1, "%d small blocks beside the big one (%d slots)", got,
              OCL_TEST_BLOCKS);
    CHECK(be->host_alloc(ctx, 64, &big) == DG_ERR_NOMEM && big == NULL);
    CHECK(strstr(be->last_error(ctx), "in use") != NULL);
    for (int i = 0; i < OCL_TEST_BLOCKS + 1; i++)
        be->host_free(ctx, blk[i]);
    be->host_free(ctx, NULL);
    be->host_free(ctx, back); /* not a block: a message, nothing freed */
    CHECK(strstr(be->last_error(ctx), "not a page-locked block") != NULL);
    CHECK(be->host_alloc(ctx, 64, &blk[0]) == DG_OK && blk[0]); /* a freed slot is reused */
    be->host_free(ctx, blk[0]);
    /* host_free right after an upload waits for its copy (ASan sees a
     * use-after-free otherwise). */
    CHECK(dg_ocl_hold_copies(ctx, true) == DG_OK);
    CHECK(be->upload(ctx, x, 0, a, bytes) == DG_OK);
    CHECK(dg_ocl_hold_copies(ctx, false) == DG_OK);
    CHECK(dg_ocl_hold_copies(NULL, true) == DG_ERR_USAGE);
done:
    be->host_free(ctx, a);
    be->buf_free(ctx, x);
    be->buf_free(ctx, y);
    be->buf_free(ctx, z);
    dg_free(plain);
    dg_free(back);
    dg_free(back2);
}

/* One mlp training step (784-64-10, batch 32) the way the trainer issues it:
 * the batch from a page-locked block, forward, backward, update, the phase
 * marks. Nothing in it may make the host wait for the device (the loss is
 * read at sync points only); the commands it enqueues are counted. A plain
 * (pageable) upload is one wait, which shows the counter counts. */
static void test_step_waits(void *ctx)
{
    enum { B = 32, I = 784, H = 64, C = 10 };
    size_t xb = (size_t)B * I * 4, yb = (size_t)B * 4;
    size_t nparam = (size_t)H * I + H + (size_t)C * H + C;
    void *act = NULL, *par = NULL, *grad = NULL, *mom = NULL;
    float *blk = NULL;
    CHECK(be->host_alloc(ctx, xb + yb, (void **)&blk) == DG_OK);
    size_t o_x = 0, o_y = xb, o_h = o_y + yb, o_o = o_h + (size_t)B * H * 4;
    size_t o_dh = o_o + (size_t)B * C * 4, o_do = o_dh + (size_t)B * H * 4,
           o_acc = o_do + B * C * 4;
    CHECK(be->buf_alloc(ctx, o_acc + 8, &act) == DG_OK);
    CHECK(be->buf_alloc(ctx, nparam * 4, &par) == DG_OK);
    CHECK(be->buf_alloc(ctx, nparam * 4, &grad) == DG_OK);
    CHECK(be->buf_alloc(ctx, nparam * 4, &mom) == DG_OK);
    if (!blk || !act || !par || !grad || !mom)
        goto done;
    size_t w1 = 0, b1 = (size_t)H * I * 4, w2 = b1 + H * 4, b2 = w2 + (size_t)C * H * 4;
    for (size_t i = 0; i < (size_t)B * I; i++)
        blk[i] = (float)(i % 7) * 0.1f;
    for (int i = 0; i < B; i++)
        ((int32_t *)(blk + (size_t)B * I))[i] = i % C;
    CHECK(be->fill(ctx, (dg_ref){par, 0}, nparam, 0.01f) == DG_OK);
    CHECK(be->fill(ctx, (dg_ref){mom, 0}, nparam, 0.0f) == DG_OK);
    CHECK(be->fill(ctx, (dg_ref){act, o_acc}, 2, 0.0f) == DG_OK);
    CHECK(be->synchronize(ctx) == DG_OK);
    uint64_t e0 = 0, w0 = 0, e1 = 0, w1c = 0;
    CHECK(dg_ocl_counts(ctx, &e0, &w0) == DG_OK);
    for (int step = 0; step < 2; step++) {
        CHECK(be->event_record(ctx, 0) == DG_OK);
        CHECK(be->upload(ctx, act, o_x, blk, xb + yb) == DG_OK);
        CHECK(be->event_record(ctx, 1) == DG_OK);
        CHECK(be->gemm(ctx, false, true, B, H, I, 1, (dg_ref){act, o_x}, I, (dg_ref){par, w1}, I, 0,
                       (dg_ref){act, o_h}, H) == DG_OK);
        CHECK(be->bias_add(ctx, (dg_ref){act, o_h}, (dg_ref){par, b1}, B, H, 1) == DG_OK);
        CHECK(be->relu_fwd(ctx, (dg_ref){act, o_h}, (dg_ref){act, o_h}, (size_t)B * H) == DG_OK);
        CHECK(be->gemm(ctx, false, true, B, C, H, 1, (dg_ref){act, o_h}, H, (dg_ref){par, w2}, H, 0,
                       (dg_ref){act, o_o}, C) == DG_OK);
        CHECK(be->bias_add(ctx, (dg_ref){act, o_o}, (dg_ref){par, b2}, B, C, 1) == DG_OK);
        CHECK(be->xent(ctx, B, C, (dg_ref){act, o_o}, (dg_ref){act, o_y}, (dg_ref){act, o_do},
                       (dg_ref){act, o_acc}) == DG_OK);
        CHECK(be->event_record(ctx, 2) == DG_OK);
        CHECK(be->gemm(ctx, true, false, C, H, B, 1, (dg_ref){act, o_do}, C, (dg_ref){act, o_h}, H,
                       0, (dg_ref){grad, w2}, H) == DG_OK);
        CHECK(be->bias_grad(ctx, (dg_ref){act, o_do}, (dg_ref){grad, b2}, B, C, 1) == DG_OK);
        CHECK(be->gemm(ctx, false, false, B, H, C, 1, (dg_ref){act, o_do}, C, (dg_ref){par, w2}, H,
                       0, (dg_ref){act, o_dh}, H) == DG_OK);
        CHECK(be->relu_bwd(ctx, (dg_ref){act, o_h}, (dg_ref){act, o_dh}, (dg_ref){act, o_dh},
                           (size_t)B * H) == DG_OK);
        CHECK(be->gemm(ctx, true, false, H, I, B, 1, (dg_ref){act, o_dh}, H, (dg_ref){act, o_x}, I,
                       0, (dg_ref){grad, w1}, I) == DG_OK);
        CHECK(be->bias_grad(ctx, (dg_ref){act, o_dh}, (dg_ref){grad, b1}, B, H, 1) == DG_OK);
        CHECK(be->event_record(ctx, 3) == DG_OK);
        CHECK(be->sgd(ctx, (dg_ref){par, 0}, (dg_ref){grad, 0}, (dg_ref){mom, 0}, nparam, 0.01f,
                      0.9f, 0.0f) == DG_OK);
        CHECK(be->event_record(ctx, 4) == DG_OK);
    }
    CHECK(dg_ocl_counts(ctx, &e1, &w1c) == DG_OK);
    CHECK_MSG(w1c == w0, "two eager steps made the host wait for the device %llu times",
              (unsigned long long)(w1c - w0));
    /* per step: 2 for the upload (copy queue write, device copy), 5 marks,
     * 5 gemm, 2 bias_add, 1 relu_fwd, 1 xent (rows and sum in one command),
     * 2 bias_grad, 1 relu_bwd, 1 sgd; the vec kernel (CPUs) packs B^T first
     * for the two forward products */
    uint64_t want =
        20 + (strcmp(dg_ocl_gemm_variant(ctx, false, true, B, H, I, 1, NULL), "vec") ? 0 : 2);
    CHECK_MSG(e1 - e0 == 2 * want, "%llu commands in two steps, want %llu",
              (unsigned long long)(e1 - e0), (unsigned long long)(2 * want));
    printf("one mlp step: %llu commands enqueued, %llu host waits (the loss read at sync points)\n",
           (unsigned long long)(e1 - e0) / 2, (unsigned long long)(w1c - w0) / 2);
    float acc[2] = {0, 0};
    CHECK(be->download(ctx, act, o_acc, acc, sizeof acc) == DG_OK);
    CHECK(isfinite(acc[0]) && acc[0] > 0);
    CHECK(dg_ocl_counts(ctx, &e0, &w0) == DG_OK && w0 == w1c + 1); /* the read-back */
    CHECK(be->host_wait(ctx, blk) == DG_OK);
    CHECK(dg_ocl_counts(ctx, &e0, &w0) == DG_OK);
    float *plain = dg_malloc(xb + yb);
    if (plain) {
        memcpy(plain, blk, xb + yb);
        CHECK(be->upload(ctx, act, o_x, plain, xb + yb) == DG_OK);
        CHECK(dg_ocl_counts(ctx, &e1, &w1c) == DG_OK && w1c == w0 + 1 && e1 == e0 + 1);
        dg_free(plain);
    }
    CHECK(dg_ocl_counts(NULL, &e1, &w1c) == DG_ERR_USAGE);
    CHECK(dg_ocl_counts(ctx, NULL, &w1c) == DG_ERR_USAGE);
done:
    be->host_free(ctx, blk);
    be->buf_free(ctx, act);
    be->buf_free(ctx, par);
    be->buf_free(ctx, grad);
    be->buf_free(ctx, mom);
}

/* ---- training ops against small hand-written references -------------------- */

#define GUARD 0x7fc0beefu /* a NaN no op writes: marks bytes around each tensor */

/* A device tensor of n 4-byte elements at byte offset off inside a buffer
 * whose other bytes hold GUARD. */
typedef struct dten {
    void *buf;
    size_t off, n, bytes;
} dten;

#define REF(t) ((dg_ref){(t).buf, (t).off})
static const dg_ref none = {NULL, 0};

/* Allocates and uploads (src may be NULL: guard bytes then). */
static dten dput(void *ctx, const void *src, size_t n, size_t off)
{
    dten t = {NULL, off, n, off + n * 4 + 64};
    uint32_t *h = dg_malloc(t.bytes);
    CHECK(h != NULL);
    if (!h)
        return t;
    for (size_t i = 0; i < t.bytes / 4; i++)
        h[i] = GUARD;
    if (src)
        memcpy((char *)h + off, src, n * 4);
    CHECK(be->buf_alloc(ctx, t.bytes, &t.buf) == DG_OK);
    if (t.buf)
        CHECK(be->upload(ctx, t.buf, 0, h, t.bytes) == DG_OK);
    dg_free(h);
    return t;
}

/* Downloads the tensor into dst and checks the guard bytes around it. */
static bool dget(void *ctx, dten t, void *dst, const char *what)
{
    uint32_t *h = dg_malloc(t.bytes);
    bool ok = h && t.buf && be->download(ctx, t.buf, 0, h, t.bytes) == DG_OK;
    CHECK_MSG(ok, "%s: download failed", what);
    if (ok) {
        int changed = 0;
        for (size_t i = 0; i < t.bytes / 4; i++)
            if ((i < t.off / 4 || i >= t.off / 4 + t.n) && h[i] != GUARD)
                changed++;
        CHECK_MSG(changed == 0, "%s: %d guard elements changed", what, changed);
        memcpy(dst, (char *)h + t.off, t.n * 4);
    }
    dg_free(h);
    return ok;
}

static void dfree(void *ctx, dten t)
{
    be->buf_free(ctx, t.buf);
}

/* Counts got[i] farther from ref[i] than unit * mag[i] (mag NULL: exact). */
static int agree(const char *what, const float *got, const double *ref, const double *mag, size_t n,
                 double unit)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double tol = mag ? unit * mag[i] + 1e-30 : 0;
        double err = fabs((double)got[i] - ref[i]);
        if (!(err <= tol) && bad++ < 3)
            fprintf(stderr, "  %s[%zu] = %.9g, want %.9g (tol %.3g)\n", what, i, (double)got[i],
                    ref[i], tol);
    }
    CHECK_MSG(bad == 0, "%s: %d of %zu wrong", what, bad, n);
    return bad;
}

static float *rnd(dg_rng *r, size_t n)
{
    float *p = dg_malloc(n * 4 + 4);
    if (p)
        fill(r, p, n);
    return p;
}

/* The strided batched GEMM hook (what the convolutions and the CLBlast bench
 * call): every product against the reference with strides between the
 * operands (A shared when sa = 0), the variant's name, the handles, and the
 * range check of the last product. */
static void test_gemm_strided(void *ctx)
{
    enum { NB = 3 };
    static const int shapes[][3] = {{7, 5, 3}, {65, 63, 17}, {130, 129, 40}};
    for (int t = 0; t < 4; t++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            bool ta = t & 2, tb = t & 1;
            int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            int lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 3;
            size_t one_a = (size_t)(ta ? k : m) * lda, one_b = (size_t)(tb ? n : k) * ldb;
            size_t sa = t == 1 ? 0 : one_a + 5, sb = one_b + 1, sc = (size_t)m * ldc + 7;
            size_t na = sa * (NB - 1) + one_a, nb = sb * (NB - 1) + one_b,
                   nc = sc * (NB - 1) + (size_t)m * ldc;
            dg_rng r;
            dg_rng_init(&r, 99u + (uint64_t)t * 7 + s, 1);
            float *a = rnd(&r, na), *b = rnd(&r, nb), *c = rnd(&r, nc), *out = dg_malloc(nc * 4);
            double *ref = dg_malloc((size_t)m * n * sizeof(double)),
                   *mag = dg_malloc((size_t)m * n * sizeof(double));
            dten da = dput(ctx, a, na, 0), db = dput(ctx, b, nb, 8), dc = dput(ctx, c, nc, 4);
            dg_status st = dg_ocl_gemm_strided(ctx, ta, tb, m, n, k, 1.5f, REF(da), lda, sa,
                                               REF(db), ldb, sb, 0.5f, REF(dc), ldc, sc, NB);
            CHECK_MSG(st == DG_OK, "strided gemm %d: %s", t, be->last_error(ctx));
            if (st == DG_OK && out && ref && mag && dget(ctx, dc, out, "strided gemm C")) {
                for (int i = 0; i < NB; i++) {
                    ref_gemm(ta, tb, m, n, k, 1.5f, a + sa * i, lda, b + sb * i, ldb, 0.5f,
                             c + sc * i, ldc, ref, mag);
                    int bad = 0;
                    for (int y = 0; y < m; y++)
                        for (int x = 0; x < n; x++) {
                            double tol = 2.0 * k * FLT_EPSILON * mag[(size_t)y * n + x] + 1e-30;
                            double got = out[sc * i + (size_t)y * ldc + x];
                            if (!(fabs(got - ref[(size_t)y * n + x]) <= tol))
                                bad++;
                        }
                    CHECK_MSG(bad == 0, "strided gemm %c%c %dx%dx%d product %d: %d wrong",
                              ta ? 't' : 'n', tb ? 't' : 'n', m, n, k, i, bad);
                }
                /* The padding between products and after the rows is untouched. */
                int moved = 0;
                for (size_t e = 0; e < nc; e++) {
                    size_t i = e / sc, rel = e % sc;
                    bool in = i < NB && rel < (size_t)m * ldc && (int)(rel % (size_t)ldc) < n;
                    if (!in && memcmp(&out[e], &c[e], 4) != 0)
                        moved++;
                }
                CHECK_MSG(moved == 0, "strided gemm: %d elements outside the products changed",
                          moved);
            }
            /* One more product would run past C (and past A unless shared). */
            CHECK(dg_ocl_gemm_strided(ctx, ta, tb, m, n, k, 1.0f, REF(da), lda, sa, REF(db), ldb,
                                      sb, 0.0f, REF(dc), ldc, sc, NB + 1) == DG_ERR_USAGE);
            CHECK(strstr(be->last_error(ctx), "outside") != NULL);
            dfree(ctx, da);
            dfree(ctx, db);
            dfree(ctx, dc);
            dg_free(a);
            dg_free(b);
            dg_free(c);
            dg_free(out);
            dg_free(ref);
            dg_free(mag);
        }
    dg_ref z = {NULL, 0};
    CHECK(dg_ocl_gemm_strided(ctx, false, false, 4, 4, 4, 1.0f, z, 4, 0, z, 4, 0, 0.0f, z, 4, 0,
                              65536) == DG_ERR_USAGE);
    CHECK(dg_ocl_gemm_strided(ctx, false, false, 4, 4, 4, 1.0f, z, 4, 0, z, 4, 0, 0.0f, z, 4, 0,
                              0) == DG_OK);
    CHECK(dg_ocl_gemm_strided(NULL, false, false, 4, 4, 4, 1.0f, z, 4, 0, z, 4, 0, 0.0f, z, 4, 0,
                              1) == DG_ERR_USAGE);
    CHECK(dg_ocl_gemm_variant(ctx, false, false, 64, 64, 64, 1, NULL)[0] != '\0');
    CHECK_STR(dg_ocl_gemm_variant(NULL, false, false, 64, 64, 64, 1, NULL), "");
    cl_context cx = NULL;
    cl_command_queue q = NULL;
    cl_device_id dv = NULL;
    CHECK(dg_ocl_handles(ctx, &cx, &q, &dv) == DG_OK && cx && q && dv);
    CHECK(dg_ocl_handles(ctx, &cx, NULL, &dv) == DG_ERR_USAGE);
}

static void test_fill_bias_relu(void *ctx)
{
    dg_rng r;
    dg_rng_init(&r, 11, 3);
    /* fill: odd count at an offset. */
    dten x = dput(ctx, NULL, 7, 4);
    float got[64];
    double want[64];
    CHECK(be->fill(ctx, REF(x), 7, -2.5f) == DG_OK);
    CHECK(be->fill(ctx, REF(x), 0, 1.0f) == DG_OK);
    for (int i = 0; i < 7; i++)
        want[i] = -2.5;
    if (dget(ctx, x, got, "fill"))
        agree("fill", got, want, NULL, 7, 0);
    dfree(ctx, x);

    /* bias_add over [3, 5, 7] and the MLP form [13, 6, 1]: exact (one add). */
    static const int shapes[][3] = {{3, 5, 7}, {13, 6, 1}, {1, 1, 1}};
    for (int s = 0; s < 3; s++) {
        int o = shapes[s][0], c = shapes[s][1], in = shapes[s][2];
        size_t n = (size_t)o * c * in;
        float *y = rnd(&r, n), *b = rnd(&r, (size_t)c), *out = dg_malloc(n * 4);
        double *ref = dg_malloc(n * sizeof *ref), *mag = dg_malloc(n * sizeof *mag);
        dten dy = dput(ctx, y, n, 8), dbias = dput(ctx, b, (size_t)c, 4);
        CHECK(be->bias_add(ctx, REF(dy), REF(dbias), o, c, in) == DG_OK);
        for (size_t i = 0; i < n; i++)
            ref[i] = (double)(y[i] + b[(i / (size_t)in) % (size_t)c]);
        if (dget(ctx, dy, out, "bias_add"))
            agree("bias_add", out, ref, NULL, n, 0);
        /* bias_grad of the same tensor (as dy): sum over outer and inner. */
        dten db = dput(ctx, NULL, (size_t)c, 12);
        CHECK(be->bias_grad(ctx, REF(dy), REF(db), o, c, in) == DG_OK);
        for (int ch = 0; ch < c; ch++) {
            ref[ch] = mag[ch] = 0;
            for (int oo = 0; oo < o; oo++)
                for (int i = 0; i < in; i++) {
                    double v = out[((size_t)oo * c + ch) * in + i];
                    ref[ch] += v;
                    mag[ch] += fabs(v);
                }
        }
        float gb[8];
        if (dget(ctx, db, gb, "bias_grad"))
            agree("bias_grad", gb, ref, mag, (size_t)c, 4.0 * o * in * FLT_EPSILON);
        dfree(ctx, dy);
        dfree(ctx, dbias);
        dfree(ctx, db);
        dg_free(y), dg_free(b), dg_free(out), dg_free(ref), dg_free(mag);
    }
    /* bias_grad over a large outer*inner (many elements per work-item). */
    {
        int o = 37, c = 3, in = 1031;
        size_t n = (size_t)o * c * in;
        float *dyv = rnd(&r, n);
        double ref[3] = {0}, mag[3] = {0};
        for (size_t i = 0; i < n; i++) {
            ref[(i / in) % c] += dyv[i];
            mag[(i / in) % c] += fabs(dyv[i]);
        }
        dten dy = dput(ctx, dyv, n, 0), db = dput(ctx, NULL, 3, 0);
        float gb[3];
        CHECK(be->bias_grad(ctx, REF(dy), REF(db), o, c, in) == DG_OK);
        if (dget(ctx, db, gb, "bias_grad large"))
            agree("bias_grad large", gb, ref, mag, 3, 4.0 * o * in * FLT_EPSILON);
        /* An empty outer gives zeros. */
        CHECK(be->bias_grad(ctx, REF(dy), REF(db), 0, c, in) == DG_OK);
        double zero[3] = {0, 0, 0};
        if (dget(ctx, db, gb, "bias_grad empty"))
            agree("bias_grad empty", gb, zero, NULL, 3, 0);
        dfree(ctx, dy);
        dfree(ctx, db);
        dg_free(dyv);
    }

    /* relu: out of place, in place; relu_bwd with dx aliasing dy. */
    {
        enum { N = 1001 };
        float *xv = rnd(&r, N), *dyv = rnd(&r, N), out[N];
        xv[0] = 0.0f;
        xv[1] = -0.0f;
        double ref[N];
        dten dx = dput(ctx, xv, N, 4), dy = dput(ctx, NULL, N, 8), dg = dput(ctx, dyv, N, 0);
        CHECK(be->relu_fwd(ctx, REF(dx), REF(dy), N) == DG_OK);
        for (int i = 0; i < N; i++)
            ref[i] = xv[i] > 0 ? xv[i] : 0.0;
        if (dget(ctx, dy, out, "relu_fwd"))
            agree("relu_fwd", out, ref, NULL, N, 0);
        CHECK(be->relu_fwd(ctx, REF(dx), REF(dx), N) == DG_OK);
        if (dget(ctx, dx, out, "relu_fwd in place"))
            agree("relu_fwd in place", out, ref, NULL, N, 0);
        CHECK(be->relu_bwd(ctx, REF(dy), REF(dg), REF(dg), N) == DG_OK);
        for (int i = 0; i < N; i++)
            ref[i] = ref[i] > 0 ? dyv[i] : 0.0;
        if (dget(ctx, dg, out, "relu_bwd"))
            agree("relu_bwd", out, ref, NULL, N, 0);
        dfree(ctx, dx);
        dfree(ctx, dy);
        dfree(ctx, dg);
        dg_free(xv), dg_free(dyv);
    }
}

/* Max-pool k3 s2 (overlapping windows) over odd planes, with ties. */
static void pool_case(void *ctx, int n, int c, int h, int w, int k, int stride)
{
    dg_pool_shape s = {n, c, h, w, k, stride, (h - k) / stride + 1, (w - k) / stride + 1};
    size_t nin = (size_t)n * c * h * w, nout = (size_t)n * c * s.ho * s.wo;
    float *x = dg_malloc(nin * 4), *dy = dg_malloc(nout * 4), *y = dg_malloc(nout * 4);
    float *dx = dg_malloc(nin * 4), *gy = dg_malloc(nout * 4), *gdx = dg_malloc(nin * 4);
    int32_t *am = dg_malloc(nout * 4), *gam = dg_malloc(nout * 4);
    dg_rng r;
    dg_rng_init(&r, (uint64_t)(n * 1000 + h * 10 + w), 4);
    fill(&r, x, nin);
    fill(&r, dy, nout);
    for (size_t i = 0; i < nin; i++)
        x[i] = floorf(x[i] * 3.0f); /* values in {-3..2}: many ties */
    /* Reference: first max in row-major window order; scatter in output order. */
    memset(dx, 0, nin * 4);
    for (int p = 0; p < n * c; p++)
        for (int oy = 0; oy < s.ho; oy++)
            for (int ox = 0; ox < s.wo; ox++) {
                const float *xp = x + (size_t)p * h * w;
                int best = oy * stride * w + ox * stride;
                for (int ky = 0; ky < k; ky++)
                    for (int kx = 0; kx < k; kx++) {
                        int idx = (oy * stride + ky) * w + ox * stride + kx;
                        if (xp[idx] > xp[best])
                            best = idx;
                    }
                size_t o = ((size_t)p * s.ho + oy) * s.wo + ox;
                y[o] = xp[best];
                am[o] = best;
                dx[(size_t)p * h * w + best] += dy[o];
            }
    dten DX = dput(ctx, x, nin, 4), DY = dput(ctx, NULL, nout, 0), AM = dput(ctx, NULL, nout, 8);
    dten DG = dput(ctx, dy, nout, 12), DDX = dput(ctx, NULL, nin, 0);
    CHECK(be->maxpool_fwd(ctx, &s, REF(DX), REF(DY), REF(AM)) == DG_OK);
    CHECK(be->maxpool_bwd(ctx, &s, REF(DG), REF(AM), REF(DDX)) == DG_OK);
    if (dget(ctx, DY, gy, "maxpool y"))
        CHECK_MSG(memcmp(gy, y, nout * 4) == 0, "maxpool_fwd y differs (n%d %dx%d k%d s%d)", n, h,
                  w, k, stride);
    if (dget(ctx, AM, gam, "maxpool argmax"))
        CHECK_MSG(memcmp(gam, am, nout * 4) == 0, "maxpool_fwd argmax differs (n%d %dx%d k%d s%d)",
                  n, h, w, k, stride);
    if (dget(ctx, DDX, gdx, "maxpool dx"))
        CHECK_MSG(memcmp(gdx, dx, nin * 4) == 0, "maxpool_bwd dx differs (n%d %dx%d k%d s%d)", n, h,
                  w, k, stride);
    dfree(ctx, DX), dfree(ctx, DY), dfree(ctx, AM), dfree(ctx, DG), dfree(ctx, DDX);
    dg_free(x), dg_free(dy), dg_free(y), dg_free(dx), dg_free(gy), dg_free(gdx), dg_free(am);
    dg_free(gam);
}

static void test_pool(void *ctx)
{
    pool_case(ctx, 1, 1, 9, 7, 3, 2);
    pool_case(ctx, 2, 3, 9, 7, 3, 2);
    pool_case(ctx, 3, 2, 8, 8, 2, 2);
    pool_case(ctx, 1, 2, 7, 5, 2, 3); /* stride > k: inputs no window covers */
    pool_case(ctx, 2, 1, 4, 4, 4, 1);
}

/* Convolution against a double reference: y (with bias), then dx, dw, db. */
static void conv_case(void *ctx, int n, int c, int h, int w, int k, int kh, int kw, int stride,
                      int pad)
{
    dg_conv_shape s = {n,
                       c,
                       h,
                       w,
                       k,
                       kh,
                       kw,
                       stride,
                       pad,
                       (h + 2 * pad - kh) / stride + 1,
                       (w + 2 * pad - kw) / stride + 1};
    size_t nx = (size_t)n * c * h * w, nw = (size_t)k * c * kh * kw;
    size_t ny = (size_t)n * k * s.ho * s.wo;
    dg_rng r;
    dg_rng_init(&r, (uint64_t)(n * 7 + c * 11 + h * 13 + k * 17 + stride), 5);
    float *x = rnd(&r, nx), *wt = rnd(&r, nw), *b = rnd(&r, (size_t)k), *dy = rnd(&r, ny);
    size_t most = nx > ny ? nx : ny;
    most = most > nw ? most : nw;
    float *got = dg_malloc(most * 4);
    double *ry = calloc(ny, sizeof(double)), *my = calloc(ny, sizeof(double));
    double *rdx = calloc(nx, sizeof(double)), *mdx = calloc(nx, sizeof(double));
    double *rdw = calloc(nw, sizeof(double)), *mdw = calloc(nw, sizeof(double));
    double rdb[16] = {0}, mdb[16] = {0};
    for (int img = 0; img < n; img++)
        for (int ko = 0; ko < k; ko++)
            for (int oy = 0; oy < s.ho; oy++)
                for (int ox = 0; ox < s.wo; ox++) {
                    size_t yo = (((size_t)img * k + ko) * s.ho + oy) * s.wo + ox;
                    double sum = b[ko], mag = fabs(b[ko]);
                    rdb[ko] += dy[yo];
                    mdb[ko] += fabs(dy[yo]);
                    for (int ci = 0; ci < c; ci++)
                        for (int ky = 0; ky < kh; ky++)
                            for (int kx = 0; kx < kw; kx++) {
                                int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= w)
                                    continue;
                                size_t xi = (((size_t)img * c + ci) * h + iy) * w + ix;
                                size_t wi = (((size_t)ko * c + ci) * kh + ky) * kw + kx;
                                sum += (double)x[xi] * wt[wi];
                                mag += fabs((double)x[xi] * wt[wi]);
                                rdx[xi] += (double)dy[yo] * wt[wi];
                                mdx[xi] += fabs((double)dy[yo] * wt[wi]);
                                rdw[wi] += (double)dy[yo] * x[xi];
                                mdw[wi] += fabs((double)dy[yo] * x[xi]);
                            }
                    ry[yo] = sum;
                    my[yo] = mag;
                }
    size_t ws = be->conv2d_workspace(ctx, &s);
    CHECK_MSG(ws > 0, "conv workspace 0");
    dten X = dput(ctx, x, nx, 4), W = dput(ctx, wt, nw, 0), B = dput(ctx, b, (size_t)k, 8);
    dten Y = dput(ctx, NULL, ny, 12), DY = dput(ctx, dy, ny, 4), DX = dput(ctx, NULL, nx, 0);
    dten DW = dput(ctx, NULL, nw, 8), DB = dput(ctx, NULL, (size_t)k, 4);
    dten WK = dput(ctx, NULL, (ws + 3) / 4, 16);
    char label[96];
    snprintf(label, sizeof label, "conv n%d c%d %dx%d k%d %dx%d s%d p%d", n, c, h, w, k, kh, kw,
             stride, pad);
    dg_status st = be->conv2d_fwd(ctx, &s, REF(X), REF(W), REF(B), REF(Y), REF(WK));
    CHECK_MSG(st == DG_OK, "%s fwd: %s", label, be->last_error(ctx));
    if (dget(ctx, Y, got, label))
        agree("conv y", got, ry, my, ny, 4.0 * (c * kh * kw + 1) * FLT_EPSILON);
    st = be->conv2d_bwd(ctx, &s, REF(X), REF(W), REF(DY), REF(DX), REF(DW), REF(DB), REF(WK));
    CHECK_MSG(st == DG_OK, "%s bwd: %s", label, be->last_error(ctx));
    if (dget(ctx, DX, got, label))
        agree("conv dx", got, rdx, mdx, nx, 4.0 * k * kh * kw * FLT_EPSILON);
    if (dget(ctx, DW, got, label))
        agree("conv dw", got, rdw, mdw, nw, 4.0 * n * s.ho * s.wo * FLT_EPSILON);
    if (dget(ctx, DB, got, label))
        agree("conv db", got, rdb, mdb, (size_t)k, 4.0 * n * s.ho * s.wo * FLT_EPSILON);
    /* Without dx and db (first layer): dw alone, the same. */
    CHECK(be->fill(ctx, REF(DW), nw, NAN) == DG_OK);
    st = be->conv2d_bwd(ctx, &s, REF(X), REF(W), REF(DY), none, REF(DW), none, REF(WK));
    CHECK_MSG(st == DG_OK, "%s bwd without dx: %s", label, be->last_error(ctx));
    if (dget(ctx, DW, got, label))
        agree("conv dw (no dx)", got, rdw, mdw, nw, 4.0 * n * s.ho * s.wo * FLT_EPSILON);
    dfree(ctx, X), dfree(ctx, W), dfree(ctx, B), dfree(ctx, Y), dfree(ctx, DY), dfree(ctx, DX);
    dfree(ctx, DW), dfree(ctx, DB), dfree(ctx, WK);
    dg_free(x), dg_free(wt), dg_free(b), dg_free(dy), dg_free(got);
    free(ry), free(my), free(rdx), free(mdx), free(rdw), free(mdw);
}

static void test_conv(void *ctx)
{
    conv_case(ctx, 1, 3, 9, 7, 5, 3, 3, 2, 1); /* batch 1, stride 2 pad 1, odd sizes */
    conv_case(ctx, 3, 3, 9, 7, 5, 3, 3, 2, 1);
    conv_case(ctx, 2, 1, 12, 12, 6, 5, 5, 1, 0); /* lenet's first layer, small */
    conv_case(ctx, 5, 4, 8, 8, 8, 3, 3, 1, 1);
    conv_case(ctx, 2, 2, 5, 6, 3, 1, 1, 1, 0); /* 1x1 */
    conv_case(ctx, 1, 2, 3, 3, 2, 3, 3, 3, 2); /* stride 3, pad 2: sparse columns */
}

/* Softmax cross-entropy with out-of-range labels, ties and an accumulating acc. */
static void xent_case(void *ctx, int n, int classes, const float *lg, const int32_t *lab)
{
    size_t nl = (size_t)n * classes;
    double *ref = dg_malloc(nl * sizeof *ref), *scale = dg_malloc(nl * sizeof *scale);
    double loss = 0, correct = 0;
    for (int i = 0; i < n; i++) {
        const float *x = lg + (size_t)i * classes;
        double *d = ref + (size_t)i * classes;
        if (lab[i] < 0 || lab[i] >= classes) {
            for (int j = 0; j < classes; j++)
                d[j] = 0;
            continue;
        }
        double mx = x[0], sum = 0;
        int am = 0;
        for (int j = 1; j < classes; j++)
            if (x[j] > mx)
                mx = x[j], am = j;
        for (int j = 0; j < classes; j++)
            sum += exp(x[j] - mx);
        loss += log(sum) + mx - x[lab[i]];
        correct += am == lab[i];
        for (int j = 0; j < classes; j++)
            d[j] = (exp(x[j] - mx) / sum - (j == lab[i])) / n;
    }
    for (size_t i = 0; i < nl; i++)
        scale[i] = fmax(fabs(ref[i]), 1.0 / n);
    const float acc0[2] = {0.75f, 3.0f};
    dten L = dput(ctx, lg, nl, 4), LB = dput(ctx, lab, (size_t)n, 0), D = dput(ctx, NULL, nl, 8);
    dten A = dput(ctx, acc0, 2, 12);
    float *got = dg_malloc(nl * 4), acc[2];
    CHECK_MSG(be->xent(ctx, n, classes, REF(L), REF(LB), REF(D), REF(A)) == DG_OK, "xent: %s",
              be->last_error(ctx));
    if (dget(ctx, D, got, "xent dlogits"))
        agree("xent dlogits", got, ref, scale, nl, 1e-5);
    double want[2] = {acc0[0] + loss / n, acc0[1] + correct}, wmag[2] = {fabs(want[0]), 0};
    if (dget(ctx, A, acc, "xent acc"))
        agree("xent acc", acc, want, wmag, 2, 1e-5);
    /* A second call accumulates again. */
    CHECK(be->xent(ctx, n, classes, REF(L), REF(LB), REF(D), REF(A)) == DG_OK);
    want[0] += loss / n, want[1] += correct, wmag[0] = fabs(want[0]);
    if (dget(ctx, A, acc, "xent acc twice"))
        agree("xent acc twice", acc, want, wmag, 2, 1e-5);
    dfree(ctx, L), dfree(ctx, LB), dfree(ctx, D), dfree(ctx, A);
    dg_free(ref), dg_free(scale), dg_free(got);
}

static void test_xent(void *ctx)
{
    static const float lg[5 * 4] = {0.5f,  0.5f,  0.1f,   0.0f,  /* tie: argmax 0 */
                                    1.0f,  2.0f,  3.0f,   4.0f,  /* label 4: out of range */
                                    100.f, 90.f,  -100.f, 0,     /* large logits */
                                    -1,    -1,    -1,     -1,    /* all tied */
                                    0.3f,  -0.2f, 0.9f,   0.1f}; /* label -1 */
    static const int32_t lab[5] = {1, 4, 0, 0, -1};
    xent_case(ctx, 5, 4, lg, lab);
    dg_rng r;
    dg_rng_init(&r, 99, 6);
    enum { N = 300, C = 10 };
    float *l = rnd(&r, N * C);
    int32_t labs[N];
    for (int i = 0; i < N; i++)
        labs[i] = (i * 7) % (C + 1) - (i % 13 == 0); /* some out of range either side */
    xent_case(ctx, N, C, l, labs);
    xent_case(ctx, 1, 1, l, labs + 1); /* one row, one class, label 0 */
    dg_free(l);
}

static void test_sgd(void *ctx)
{
    enum { N = 1003 };
    dg_rng r;
    dg_rng_init(&r, 5, 7);
    float *w = rnd(&r, N), *g = rnd(&r, N), *m = rnd(&r, N), out[N];
    double rw[N], rm[N], mag[N];
    for (int v = 0; v < 3; v++) {
        float mom = v == 0 ? 0.9f : 0.0f, wd = v == 2 ? 0.0f : 5e-4f, lr = 0.05f;
        dten W = dput(ctx, w, N, 4), G = dput(ctx, g, N, 0), M = dput(ctx, m, N, 8);
        for (int i = 0; i < N; i++) {
            double d = (double)g[i] + (double)wd * w[i];
            rm[i] = m[i];
            if (mom != 0.0f) {
                rm[i] = (double)mom * m[i] + d;
                d = rm[i];
            }
            rw[i] = w[i] - (double)lr * d;
            mag[i] = fmax(1.0, fabs(rw[i]));
        }
        /* Without momentum mom may be absent. */
        dg_ref mref = v == 1 ? none : REF(M);
        CHECK_MSG(be->sgd(ctx, REF(W), REF(G), mref, N, lr, mom, wd) == DG_OK, "sgd: %s",
                  be->last_error(ctx));
        if (dget(ctx, W, out, "sgd w"))
            agree("sgd w", out, rw, mag, N, 1e-6);
        if (dget(ctx, M, out, "sgd mom"))
            agree("sgd mom", out, rm, mom != 0.0f ? mag : NULL, N, 1e-6);
        dfree(ctx, W), dfree(ctx, G), dfree(ctx, M);
    }
    dg_free(w), dg_free(g), dg_free(m);
}

static void test_events(void *ctx)
{
    dten X = dput(ctx, NULL, 64 * 64 * 3, 0);
    double ms = -1;
    CHECK(be->event_elapsed(ctx, 0, 1, &ms) == DG_ERR_USAGE); /* nothing recorded yet */
    CHECK(strstr(be->last_error(ctx), "not recorded") != NULL);
    CHECK(be->event_record(ctx, 0) == DG_OK);
    CHECK(be->fill(ctx, REF(X), 64 * 64 * 2, 0.5f) == DG_OK);
    CHECK(be->gemm(ctx, false, true, 64, 64, 64, 1, REF(X), 64, REF(X), 64, 0,
                   (dg_ref){X.buf, 64 * 64 * 2 * 4}, 64) == DG_OK);
    CHECK(be->event_record(ctx, DG_EVENT_SLOTS - 1) == DG_OK);
    CHECK(be->event_elapsed(ctx, 0, DG_EVENT_SLOTS - 1, &ms) == DG_OK);
    CHECK_MSG(ms >= 0 && ms < 60000, "elapsed %g ms", ms);
    CHECK(be->event_elapsed(ctx, 0, 0, &ms) == DG_OK && ms == 0);
    CHECK(be->event_record(ctx, 0) == DG_OK); /* re-recording a slot replaces its event */
    CHECK(be->event_elapsed(ctx, DG_EVENT_SLOTS - 1, 0, &ms) == DG_OK && ms >= 0);
    CHECK(be->event_record(ctx, DG_EVENT_SLOTS) == DG_ERR_USAGE);
    CHECK(be->event_record(ctx, -1) == DG_ERR_USAGE);
    CHECK(be->event_elapsed(ctx, 0, DG_EVENT_SLOTS, &ms) == DG_ERR_USAGE);
    CHECK(be->event_elapsed(ctx, 0, 1, NULL) == DG_ERR_USAGE);
    CHECK(be->capture_begin == NULL && be->capture_end == NULL && be->replay == NULL);
    dfree(ctx, X);
}

/* Bad ranges, offsets and shapes are DG_ERR_USAGE, never a launch. */
static void test_op_ranges(void *ctx)
{
    dten t = dput(ctx, NULL, 100, 0); /* 100 elements + 64 guard bytes = 116 elements */
    void *b = t.buf;
    dg_ref r0 = {b, 0}, odd = {b, 2}, end = {b, 116 * 4 - 8};
    CHECK(be->fill(ctx, odd, 4, 0) == DG_ERR_USAGE);
    CHECK(strstr(be->last_error(ctx), "aligned") != NULL);
    CHECK(be->fill(ctx, end, 3, 0) == DG_ERR_USAGE);
    CHECK(strstr(be->last_error(ctx), "outside") != NULL);
    CHECK(be->fill(ctx, end, 2, 0) == DG_OK);
    CHECK(be->fill(ctx, none, 2, 0) == DG_ERR_USAGE);
    CHECK(be->fill(ctx, (dg_ref){b, SIZE_MAX - 3}, 2, 0) == DG_ERR_USAGE);
    CHECK(be->fill(ctx, r0, SIZE_MAX / 2, 0) == DG_ERR_USAGE);
    CHECK(be->bias_add(ctx, r0, end, 2, 3, 4) == DG_ERR_USAGE);
    CHECK(be->bias_add(ctx, r0, r0, 2, 3, 40) == DG_ERR_USAGE);
    CHECK(be->bias_add(ctx, r0, r0, -1, 3, 4) == DG_ERR_USAGE);
    CHECK(be->bias_add(ctx, r0, r0, 65536, 65536, 65536) == DG_ERR_USAGE);
    CHECK(be->bias_grad(ctx, r0, end, 1, 3, 1) == DG_ERR_USAGE);
    CHECK(be->bias_grad(ctx, end, r0, 1, 3, 1) == DG_ERR_USAGE);
    CHECK(be->relu_fwd(ctx, r0, end, 3) == DG_ERR_USAGE);
    CHECK(be->relu_bwd(ctx, r0, r0, odd, 3) == DG_ERR_USAGE);
    CHECK(be->relu_bwd(ctx, end, r0, r0, 3) == DG_ERR_USAGE);

    dg_pool_shape ps = {1, 1, 8, 8, 2, 2, 4, 4}; /* 64 in, 16 out */
    CHECK(be->maxpool_fwd(ctx, &ps, r0, r0, (dg_ref){b, 64 * 4}) == DG_OK);
    CHECK(be->maxpool_fwd(ctx, &ps, r0, r0, (dg_ref){b, 101 * 4}) == DG_ERR_USAGE);
    CHECK(be->maxpool_bwd(ctx, &ps, r0, r0, (dg_ref){b, 60 * 4}) == DG_ERR_USAGE);
    dg_pool_shape bad = ps;
    bad.ho = 5; /* (8-2)/2+1 = 4 */
    CHECK(be->maxpool_fwd(ctx, &bad, r0, r0, r0) == DG_ERR_USAGE);
    bad = ps;
    bad.k = 9;
    CHECK(be->maxpool_fwd(ctx, &bad, r0, r0, r0) == DG_ERR_USAGE);
    CHECK(be->maxpool_bwd(ctx, NULL, r0, r0, r0) == DG_ERR_USAGE);

    dg_conv_shape cs = {1, 1, 5, 5, 2, 3, 3, 1, 0, 3, 3}; /* x 25, w 18, y 18 */
    size_t ws = be->conv2d_workspace(ctx, &cs);
    CHECK(ws == (9 * 9 + 18) * 4); /* column buffer, dw part */
    dten wk = dput(ctx, NULL, 128, 0);
    dg_ref x = r0, w = {b, 25 * 4}, y = {b, 43 * 4}, k = REF(wk);
    CHECK(be->conv2d_fwd(ctx, &cs, x, w, none, y, k) == DG_OK);
    CHECK(be->conv2d_fwd(ctx, &cs, x, w, none, y, none) == DG_ERR_USAGE);
    CHECK(be->conv2d_fwd(ctx, &cs, x, w, none, y, (dg_ref){wk.buf, wk.bytes - 8}) == DG_ERR_USAGE);
    CHECK(be->conv2d_fwd(ctx, &cs, x, w, none, (dg_ref){b, 99 * 4}, k) == DG_ERR_USAGE);
    CHECK(be->conv2d_fwd(ctx, &cs, x, w, (dg_ref){b, 115 * 4}, y, k) == DG_ERR_USAGE);
    CHECK(be->conv2d_bwd(ctx, &cs, x, w, y, none, none, none, k) == DG_ERR_USAGE); /* dw */
    CHECK(be->conv2d_bwd(ctx, &cs, x, w, y, (dg_ref){b, 92 * 4}, (dg_ref){b, 61 * 4}, none, k) ==
          DG_ERR_USAGE);
    CHECK(be->conv2d_bwd(ctx, &cs, x, w, y, none, (dg_ref){b, 61 * 4}, none, k) == DG_OK);
    dg_conv_shape cb = cs;
    cb.wo = 4;
    CHECK(be->conv2d_workspace(ctx, &cb) == 0);
    CHECK(be->conv2d_fwd(ctx, &cb, x, w, none, y, k) == DG_ERR_USAGE);
    cb = cs;
    cb.stride = 0;
    CHECK(be->conv2d_bwd(ctx, &cb, x, w, y, none, w, none, k) == DG_ERR_USAGE);
    CHECK(be->conv2d_fwd(ctx, NULL, x, w, none, y, k) == DG_ERR_USAGE);

    CHECK(be->xent(ctx, 4, 10, r0, r0, r0, end) == DG_OK);
    CHECK(be->xent(ctx, 4, 10, r0, r0, r0, (dg_ref){b, 115 * 4}) == DG_ERR_USAGE);
    CHECK(be->xent(ctx, 12, 10, r0, r0, r0, end) == DG_ERR_USAGE);
    CHECK(be->xent(ctx, 4, 0, r0, r0, r0, end) == DG_ERR_USAGE);
    CHECK(be->xent(ctx, 4, 10, r0, none, r0, end) == DG_ERR_USAGE);
    CHECK(be->xent(ctx, 0, 10, none, none, none, none) == DG_OK);
    CHECK(be->sgd(ctx, r0, end, r0, 3, 0.1f, 0.0f, 0.0f) == DG_ERR_USAGE);
    CHECK(be->sgd(ctx, r0, r0, end, 3, 0.1f, 0.9f, 0.0f) == DG_ERR_USAGE);
    CHECK(be->sgd(ctx, r0, r0, end, 3, 0.1f, 0.0f, 0.0f) == DG_OK); /* mom unused */
    CHECK(be->sgd(ctx, r0, r0, none, 3, 0.1f, 0.9f, 0.0f) == DG_ERR_USAGE);
    CHECK(be->synchronize(ctx) == DG_OK);
    for (int op = 0; op < DG_OP__COUNT; op++)
        CHECK_MSG(
            be->supports_op(
                ctx, &(dg_op_desc){.op = (dg_op)op, .call = DG_CALL__COUNT, .any_shape = true}),
            "supports_op(%s)", dg_op_names[op]);
    dfree(ctx, t);
    dfree(ctx, wk);
}

static void test_ops(void *ctx)
{
    test_fill_bias_relu(ctx);
    test_pool(ctx);
    test_conv(ctx);
    test_xent(ctx);
    test_sgd(ctx);
    test_events(ctx);
    test_op_ranges(ctx);
}

int main(void)
{
    be = dg_backend_opencl_iface();
    CHECK(be != NULL && be->version == DG_BACKEND_IFACE_VERSION);
    be->free(NULL);
    be->free(NULL);
    CHECK(be->last_error(NULL) != NULL);
    test_no_platforms();

    void *ctx = NULL;
    char reason[512] = "";
    unsetenv("DEVGATE_OPENCL_KERNEL");
    dg_status st = be->init(0, &ctx, reason, sizeof reason);
    if (st != DG_OK) {
        printf("opencl init(0) failed (%s): %s\n", dg_status_name(st), reason);
        /* No platform or device here: skip. A device that fails to build the
         * kernels (a kernels.cl error) is a failure, not a skip. */
        CHECK_MSG(st != DG_ERR_BACKEND, "the OpenCL kernels do not build: %s", reason);
        if (st == DG_ERR_BACKEND)
            CHECK_DONE();
        check_skip(reason);
    }
    test_info(ctx);
    test_buffers(ctx);
    test_gemm(ctx);
    test_gemm_strided(ctx);
    test_ops(ctx);
    test_pinned(ctx);
    test_step_waits(ctx);
    printf("sgemm 512^3 (default kernel): %.1f GFLOP/s\n", gflops(ctx, 512));
    int nd = be->device_count(ctx);
    be->free(ctx);
    /* The direct upload (one write on the compute queue) keeps the same
     * contract as the staged one (a copy-queue write into a twin, then a
     * device copy). */
    setenv("DEVGATE_OPENCL_UPLOAD", "direct", 1);
    st = be->init(0, &ctx, reason, sizeof reason);
    CHECK_MSG(st == DG_OK, "init with DEVGATE_OPENCL_UPLOAD=direct: %s", reason);
    if (st == DG_OK) {
        test_pinned(ctx);
        be->free(ctx);
    }
    setenv("DEVGATE_OPENCL_UPLOAD", "both", 1);
    CHECK(be->init(0, &ctx, reason, sizeof reason) == DG_ERR_USAGE &&
          strstr(reason, "DEVGATE_OPENCL_UPLOAD=both"));
    unsetenv("DEVGATE_OPENCL_UPLOAD");

    void *bad = (void *)1;
    CHECK(be->init(nd, &bad, reason, sizeof reason) == DG_ERR_NOT_FOUND && bad == NULL);
    CHECK(strstr(reason, "out of range") != NULL);
    CHECK(be->init(-1, &bad, reason, sizeof reason) == DG_ERR_NOT_FOUND);

    setenv("DEVGATE_OPENCL_KERNEL", "bogus", 1);
    CHECK(be->init(0, &bad, reason, sizeof reason) == DG_ERR_USAGE && bad == NULL);

    /* Every kernel variant must be correct on whatever device this is. */
    static const char *const kinds[] = {"tiled",   "db32",     "db64", "db128",
                                        "tiled64", "tiled128", "vec",  "naive"};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        setenv("DEVGATE_OPENCL_KERNEL", kinds[i], 1);
        ctx = NULL;
        st = be->init(0, &ctx, reason, sizeof reason);
        if (st != DG_OK) {
            printf("kernel %s not usable here: %s\n", kinds[i], reason);
            continue;
        }
        test_gemm(ctx);
        test_gemm_strided(ctx);
        test_conv(ctx); /* batched, transposed products */
        printf("sgemm 512^3 (%s kernel): %.1f GFLOP/s\n", kinds[i], gflops(ctx, 512));
        be->free(ctx);
    }
    unsetenv("DEVGATE_OPENCL_KERNEL");

    /* Convolution workspace caps that force one image per chunk, and a few. */
    static const char *const caps[] = {"1", "20737", "31104"};
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        setenv("DEVGATE_OPENCL_CONV_WORK", caps[i], 1);
        ctx = NULL;
        st = be->init(0, &ctx, reason, sizeof reason);
        CHECK_MSG(st == DG_OK, "init with DEVGATE_OPENCL_CONV_WORK=%s: %s", caps[i], reason);
        if (st == DG_OK) {
            dg_conv_shape cs = {5, 4, 8, 8, 8, 3, 3, 1, 1, 8, 8};
            size_t per = (36 * 64 + 8 * 36) * 4; /* column buffer + dw part per image */
            size_t ws = be->conv2d_workspace(ctx, &cs);
            CHECK_MSG(ws >= per && ws <= 5 * per && ws % per == 0, "workspace %zu", ws);
            test_conv(ctx);
            be->free(ctx);
        }
    }
    setenv("DEVGATE_OPENCL_CONV_WORK", "12k", 1);
    CHECK(be->init(0, &bad, reason, sizeof reason) == DG_ERR_USAGE && bad == NULL);
    CHECK(strstr(reason, "DEVGATE_OPENCL_CONV_WORK") != NULL);
    unsetenv("DEVGATE_OPENCL_CONV_WORK");
    CHECK_DONE();
}
