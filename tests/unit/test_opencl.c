/* OpenCL backend: "no platforms" reason, device info, buffer round trips, range
 * checks and SGEMM against a double-precision reference for every kernel
 * variant (DEVGATE_OPENCL_KERNEL), plus the GFLOP/s of a 512^3 product. */
#include "backend/backend.h"
#include "core/core.h"

#include "check.h"

#include <float.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

static const dg_backend_iface *be;

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

/* Naive row-major reference in double: ref = alpha*A*B + beta*C0, and the
 * magnitude bound mag = |alpha|*sum|a||b| + |beta||c0|. */
static void ref_gemm(int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                     int ldb, float beta, const float *c0, int ldc, double *ref, double *mag)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0, sa = 0;
            for (int p = 0; p < k; p++) {
                double x = (double)a[(size_t)i * lda + p] * (double)b[(size_t)p * ldb + j];
                s += x;
                sa += fabs(x);
            }
            double c = beta == 0.0f ? 0.0 : (double)beta * c0[(size_t)i * ldc + j];
            ref[(size_t)i * n + j] = (double)alpha * s + c;
            mag[(size_t)i * n + j] = fabs((double)alpha) * sa + fabs(c);
        }
}

/* One GEMM case: operands at byte offsets inside larger buffers, padded leading
 * dims; checks every element and that nothing outside C's matrix changed. */
static void gemm_case(void *ctx, int m, int n, int k, float alpha, float beta, int pad, size_t off)
{
    int lda = k + pad, ldb = n + pad, ldc = n + pad;
    size_t na = (size_t)m * lda, nb = (size_t)k * ldb, nc = (size_t)m * ldc;
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
    float *ca = (float *)((char *)a + off), *cb = (float *)((char *)b + off);
    float *cc = (float *)((char *)c + off);
    if (beta == 0.0f) /* uninitialised C: NaN must not leak into the result */
        for (size_t i = 0; i < nc; i++)
            cc[i] = NAN;
    ref_gemm(m, n, k, alpha, ca, lda, cb, ldb, beta, cc, ldc, ref, mag);

    void *da = NULL, *db = NULL, *dc = NULL;
    CHECK(be->buf_alloc(ctx, ba, &da) == DG_OK);
    CHECK(be->buf_alloc(ctx, bb, &db) == DG_OK);
    CHECK(be->buf_alloc(ctx, bc, &dc) == DG_OK);
    if (da && db && dc) {
        CHECK(be->upload(ctx, da, 0, a, ba) == DG_OK);
        CHECK(be->upload(ctx, db, 0, b, bb) == DG_OK);
        CHECK(be->upload(ctx, dc, 0, c, bc) == DG_OK);
        dg_status st =
            be->gemm(ctx, false, false, m, n, k, alpha, (dg_ref){da, off}, lda, (dg_ref){db, off}, ldb, beta, (dg_ref){dc, off}, ldc);
        CHECK_MSG(st == DG_OK, "gemm %dx%dx%d: %s", m, n, k, be->last_error(ctx));
        CHECK(be->synchronize(ctx) == DG_OK);
        CHECK(be->download(ctx, dc, 0, out, bc) == DG_OK);
        int bad = 0, outside = 0;
        double worst = 0;
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
            if (!(err <= tol)) {
                if (bad++ < 3)
                    fprintf(stderr, "  C[%zu,%zu] = %.9g, want %.9g (tol %.3g)\n", i, j,
                            (double)out[e], want, tol);
            } else if (tol > 0 && err / tol > worst) {
                worst = err / tol;
            }
        }
        CHECK_MSG(bad == 0, "gemm m=%d n=%d k=%d alpha=%g beta=%g pad=%d off=%zu: %d wrong", m, n,
                  k, (double)alpha, (double)beta, pad, off, bad);
        CHECK_MSG(outside == 0, "gemm m=%d n=%d k=%d: %d elements outside C changed", m, n, k,
                  outside);
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
    if (be->gemm(ctx, false, false, n, n, n, 1.0f, (dg_ref){a, 0}, n, (dg_ref){b, 0}, n, 0.0f, (dg_ref){c, 0}, n) || be->synchronize(ctx))
        goto done; /* warm-up */
    for (int rep = 0; rep < 3; rep++) {
        double t0 = dg_now();
        int iters = 3;
        for (int it = 0; it < iters; it++)
            if (be->gemm(ctx, false, false, n, n, n, 1.0f, (dg_ref){a, 0}, n, (dg_ref){b, 0}, n, 0.0f, (dg_ref){c, 0}, n))
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
    CHECK(be->supports_op(ctx, DG_OP_GEMM));
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
    CHECK(be->gemm(ctx, false, false, 4, 4, 4, 1, (dg_ref){buf, 2}, 4, (dg_ref){buf, 0}, 4, 0, (dg_ref){buf, 0}, 4) == DG_ERR_USAGE);
    CHECK(strstr(be->last_error(ctx), "aligned") != NULL);
    CHECK(be->gemm(ctx, false, false, 4, 4, 4, 1, (dg_ref){buf, 0}, 3, (dg_ref){buf, 0}, 4, 0, (dg_ref){buf, 0}, 4) == DG_ERR_USAGE);
    CHECK(be->gemm(ctx, false, false, 4, 8, 4, 1, (dg_ref){buf, 0}, 4, (dg_ref){buf, 0}, 8, 0, (dg_ref){buf, 0}, 7) == DG_ERR_USAGE);
    CHECK(be->gemm(ctx, false, false, 64, 64, 64, 1, (dg_ref){buf, 0}, 64, (dg_ref){buf, 0}, 64, 0, (dg_ref){buf, 0}, 64) == DG_ERR_USAGE);
    CHECK(strstr(be->last_error(ctx), "outside") != NULL);
    CHECK(be->gemm(ctx, false, false, 4, 4, 4, 1, (dg_ref){buf, 0}, 4, (dg_ref){buf, N - 32}, 4, 0, (dg_ref){buf, 0}, 4) == DG_ERR_USAGE);
    CHECK(be->gemm(ctx, false, false, -1, 4, 4, 1, (dg_ref){buf, 0}, 4, (dg_ref){buf, 0}, 4, 0, (dg_ref){buf, 0}, 4) == DG_ERR_USAGE);
    CHECK(be->gemm(ctx, false, false, 4, 4, 4, 1, (dg_ref){NULL, 0}, 4, (dg_ref){buf, 0}, 4, 0, (dg_ref){buf, 0}, 4) == DG_ERR_USAGE);
    CHECK(be->gemm(ctx, false, false, 0, 4, 4, 1, (dg_ref){NULL, 0}, 4, (dg_ref){NULL, 0}, 4, 0, (dg_ref){NULL, 0}, 4) == DG_OK);
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
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        gemm_case(ctx, m, n, k, 1.0f, 0.0f, 0, 0);
        gemm_case(ctx, m, n, k, -0.5f, 1.5f, 3, 20);
    }
    gemm_case(ctx, 33, 17, 65, 2.0f, -1.0f, 7, 4);
    gemm_case(ctx, 100, 70, 50, 0.0f, 0.25f, 1, 12);
    gemm_case(ctx, 129, 130, 31, 1.0f, 1.0f, 64, 256);
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
        check_skip(reason);
    }
    test_info(ctx);
    test_buffers(ctx);
    test_gemm(ctx);
    printf("sgemm 512^3 (default kernel): %.1f GFLOP/s\n", gflops(ctx, 512));
    int nd = be->device_count(ctx);
    be->free(ctx);

    void *bad = (void *)1;
    CHECK(be->init(nd, &bad, reason, sizeof reason) == DG_ERR_NOT_FOUND && bad == NULL);
    CHECK(strstr(reason, "out of range") != NULL);
    CHECK(be->init(-1, &bad, reason, sizeof reason) == DG_ERR_NOT_FOUND);

    setenv("DEVGATE_OPENCL_KERNEL", "bogus", 1);
    CHECK(be->init(0, &bad, reason, sizeof reason) == DG_ERR_USAGE && bad == NULL);

    /* Every kernel variant must be correct on whatever device this is. */
    static const char *const kinds[] = {"tiled", "tiled64", "tiled128", "vec", "naive"};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        setenv("DEVGATE_OPENCL_KERNEL", kinds[i], 1);
        ctx = NULL;
        st = be->init(0, &ctx, reason, sizeof reason);
        if (st != DG_OK) {
            printf("kernel %s not usable here: %s\n", kinds[i], reason);
            continue;
        }
        test_gemm(ctx);
        printf("sgemm 512^3 (%s kernel): %.1f GFLOP/s\n", kinds[i], gflops(ctx, 512));
        be->free(ctx);
    }
    unsetenv("DEVGATE_OPENCL_KERNEL");
    CHECK_DONE();
}
