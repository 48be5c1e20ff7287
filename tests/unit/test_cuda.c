/* CUDA plug-in: loads $DEVGATE_PLUGIN_DIR/libdevgate-cuda.so the way devgate
 * does; without a GPU it checks the failure reason and skips, with one it checks
 * device facts, copies, fp32 GEMM accuracy, device OOM and times a 4096^3 sgemm. */
#include <dlfcn.h>
#include <float.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "check.h"

static const dg_backend_iface *bi;
static void *cx;

/* Deterministic floats in [-1, 1). */
static float rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(*s >> 40) / (double)(1ULL << 23) - 1.0);
}

/* Seconds on the monotonic clock. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* qsort order for doubles. */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Checks one row-major GEMM (leading dims padded by pad, operands at offsets in one buffer). */
static void gemm_case(int m, int n, int k, int pad, float alpha, float beta)
{
    int lda = k + pad, ldb = n + pad, ldc = n + pad;
    size_t na = (size_t)m * lda, nb = (size_t)k * ldb, nc = (size_t)m * ldc;
    /* A, B and C share one buffer at float-aligned but otherwise odd offsets. */
    size_t a_off = 4 * sizeof(float), b_off = a_off + (na + 3) * sizeof(float);
    size_t c_off = b_off + (nb + 5) * sizeof(float), total = c_off + nc * sizeof(float);
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c0 = malloc(nc * sizeof *c0);
    float *c = malloc(nc * sizeof *c);
    double *ref = calloc((size_t)m * n, sizeof *ref), *mag = calloc((size_t)m * n, sizeof *mag);
    uint64_t seed = 0x9e3779b97f4a7c15ULL ^ (uint64_t)(m * 1000003 + n * 1009 + k);
    void *buf = NULL;
    int bad = 0;
    double worst = 0.0;

    if (!a || !b || !c0 || !c || !ref || !mag) {
        CHECK_MSG(0, "host allocation for %dx%dx%d", m, n, k);
        goto out;
    }
    for (size_t i = 0; i < na; i++)
        a[i] = rnd(&seed);
    for (size_t i = 0; i < nb; i++)
        b[i] = rnd(&seed);
    for (size_t i = 0; i < nc; i++)
        c0[i] = rnd(&seed);

    CHECK(bi->buf_alloc(cx, total, &buf) == DG_OK);
    if (!buf)
        goto out;
    CHECK(bi->upload(cx, buf, a_off, a, na * sizeof *a) == DG_OK);
    CHECK(bi->upload(cx, buf, b_off, b, nb * sizeof *b) == DG_OK);
    CHECK(bi->upload(cx, buf, c_off, c0, nc * sizeof *c0) == DG_OK);
    dg_status st =
        bi->gemm(cx, false, false, m, n, k, alpha, (dg_ref){buf, a_off}, lda, (dg_ref){buf, b_off}, ldb, beta, (dg_ref){buf, c_off}, ldc);
    CHECK_MSG(st == DG_OK, "gemm %dx%dx%d: %s", m, n, k, bi->last_error(cx));
    CHECK(bi->synchronize(cx) == DG_OK);
    CHECK(bi->download(cx, buf, c_off, c, nc * sizeof *c) == DG_OK);

    /* Naive reference in double: ref = A*B and mag = |A|*|B|, row by row. */
    for (int i = 0; i < m; i++)
        for (int p = 0; p < k; p++) {
            double av = a[(size_t)i * lda + p];
            const float *brow = b + (size_t)p * ldb;
            double *r = ref + (size_t)i * n, *g = mag + (size_t)i * n;
            for (int j = 0; j < n; j++) {
                r[j] += av * brow[j];
                g[j] += fabs(av * brow[j]);
            }
        }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            size_t ic = (size_t)i * ldc + j, ir = (size_t)i * n + j;
            double want = alpha * ref[ir] + beta * (double)c0[ic];
            double scale = fabs(alpha) * mag[ir] + fabs(beta) * fabs((double)c0[ic]);
            double tol = 2.0 * (k + 1) * FLT_EPSILON * scale + FLT_MIN;
            double err = fabs((double)c[ic] - want);
            if (!(err <= tol)) {
                if (bad++ < 3)
                    fprintf(stderr, "gemm %dx%dx%d: C[%d,%d] = %.9g, want %.9g (tol %.3g)\n", m, n,
                            k, i, j, c[ic], want, tol);
            } else if (scale > 0 && err / scale > worst) {
                worst = err / scale;
            }
        }
    /* The padding columns of C must be untouched. */
    for (int i = 0; i < m; i++)
        for (int j = n; j < ldc; j++)
            if (c[(size_t)i * ldc + j] != c0[(size_t)i * ldc + j])
                bad++;
    CHECK_MSG(bad == 0, "gemm %dx%dx%d pad %d: %d elements out of tolerance", m, n, k, pad, bad);
    printf("gemm %dx%dx%d pad %d: worst |err|/sum|a||b| = %.3g (k*eps = %.3g)\n", m, n, k, pad,
           worst, k * FLT_EPSILON);
out:
    if (buf)
        bi->buf_free(cx, buf);
    free(a);
    free(b);
    free(c0);
    free(c);
    free(ref);
    free(mag);
}

/* A product that is exact in fp32 but not in TF32: catches tensor-core rounding. */
static void fp32_not_tf32(void)
{
    enum { N = 256 };
    float *a = malloc(sizeof(float) * N * N), *b = malloc(sizeof(float) * N * N);
    float *c = malloc(sizeof(float) * N * N);
    void *da = NULL, *db = NULL, *dc = NULL;
    int bad = 0;

    if (!a || !b || !c) {
        CHECK_MSG(0, "host allocation");
        goto out;
    }
    /* 1 + 2^-13 needs 13 mantissa bits (TF32 keeps 10); every partial sum of
     * 256 of them fits in fp32's 24, so the exact answer is 256 + 2^-5. */
    for (int i = 0; i < N * N; i++) {
        a[i] = 1.0f + 0x1p-13f;
        b[i] = 1.0f;
    }
    CHECK(bi->buf_alloc(cx, sizeof(float) * N * N, &da) == DG_OK);
    CHECK(bi->buf_alloc(cx, sizeof(float) * N * N, &db) == DG_OK);
    CHECK(bi->buf_alloc(cx, sizeof(float) * N * N, &dc) == DG_OK);
    if (!da || !db || !dc)
        goto out;
    CHECK(bi->upload(cx, da, 0, a, sizeof(float) * N * N) == DG_OK);
    CHECK(bi->upload(cx, db, 0, b, sizeof(float) * N * N) == DG_OK);
    CHECK(bi->gemm(cx, false, false, N, N, N, 1.0f, (dg_ref){da, 0}, N, (dg_ref){db, 0}, N, 0.0f, (dg_ref){dc, 0}, N) == DG_OK);
    CHECK(bi->synchronize(cx) == DG_OK);
    CHECK(bi->download(cx, dc, 0, c, sizeof(float) * N * N) == DG_OK);
    for (int i = 0; i < N * N; i++)
        if (c[i] != 256.0f + 0x1p-5f)
            bad++;
    CHECK_MSG(bad == 0, "%d of %d elements not exact (C[0] = %.9g): TF32 or reduced precision?",
              bad, N * N, c[0]);
out:
    bi->buf_free(cx, da);
    bi->buf_free(cx, db);
    bi->buf_free(cx, dc);
    free(a);
    free(b);
    free(c);
}

/* Uploads two pieces at byte offsets and reads them back whole and in part. */
static void copies(void)
{
    unsigned char src1[300], src2[517], back[1024];
    void *buf = NULL;

    for (size_t i = 0; i < sizeof src1; i++)
        src1[i] = (unsigned char)(i * 7 + 1);
    for (size_t i = 0; i < sizeof src2; i++)
        src2[i] = (unsigned char)(i * 13 + 5);
    CHECK(bi->buf_alloc(cx, 4096, &buf) == DG_OK);
    if (!buf)
        return;
    CHECK(bi->upload(cx, buf, 3, src1, sizeof src1) == DG_OK);
    CHECK(bi->upload(cx, buf, 3 + sizeof src1, src2, sizeof src2) == DG_OK);
    memset(back, 0, sizeof back);
    CHECK(bi->download(cx, buf, 3, back, sizeof src1 + sizeof src2) == DG_OK);
    CHECK(memcmp(back, src1, sizeof src1) == 0);
    CHECK(memcmp(back + sizeof src1, src2, sizeof src2) == 0);
    memset(back, 0, sizeof back);
    CHECK(bi->download(cx, buf, 3 + sizeof src1 + 100, back, 50) == DG_OK);
    CHECK(memcmp(back, src2 + 100, 50) == 0);
    CHECK(bi->upload(cx, buf, 0, src1, 0) == DG_OK);
    CHECK(bi->upload(cx, buf, 0, NULL, 8) == DG_ERR_USAGE);
    CHECK(bi->upload(cx, NULL, 0, src1, 8) == DG_ERR_USAGE);
    CHECK(bi->download(cx, buf, 0, NULL, 8) == DG_ERR_USAGE);
    CHECK(bi->last_error(cx)[0] != '\0');
    bi->buf_free(cx, buf);
}

/* Bad GEMM arguments are refused before they reach cuBLAS. */
static void gemm_usage(void)
{
    void *buf = NULL;

    CHECK(bi->buf_alloc(cx, 1024, &buf) == DG_OK);
    if (!buf)
        return;
    CHECK(bi->gemm(cx, false, false, 2, 2, 2, 1.0f, (dg_ref){NULL, 0}, 2, (dg_ref){buf, 0}, 2, 0.0f, (dg_ref){buf, 0}, 2) == DG_ERR_USAGE);
    CHECK(bi->gemm(cx, false, false, 2, 2, 2, 1.0f, (dg_ref){buf, 0}, 1, (dg_ref){buf, 0}, 2, 0.0f, (dg_ref){buf, 0}, 2) == DG_ERR_USAGE);
    CHECK(bi->gemm(cx, false, false, 2, 2, 2, 1.0f, (dg_ref){buf, 2}, 2, (dg_ref){buf, 0}, 2, 0.0f, (dg_ref){buf, 0}, 2) == DG_ERR_USAGE);
    CHECK(bi->gemm(cx, false, false, -1, 2, 2, 1.0f, (dg_ref){buf, 0}, 2, (dg_ref){buf, 0}, 2, 0.0f, (dg_ref){buf, 0}, 2) == DG_ERR_USAGE);
    CHECK(strstr(bi->last_error(cx), "gemm") != NULL);
    CHECK(bi->synchronize(cx) == DG_OK);
    bi->buf_free(cx, buf);
}

/* 4 TiB is refused as device OOM, and the device stays usable. */
static void oom(void)
{
    void *big = (void *)1, *small = NULL;
    unsigned char x[64], y[64];

    dg_status st = bi->buf_alloc(cx, (size_t)4 << 40, &big);
    CHECK_MSG(st == DG_ERR_DEVICE_OOM, "4 TiB alloc: %s (%d)", bi->last_error(cx), (int)st);
    CHECK(big == NULL);
    CHECK_MSG(strstr(bi->last_error(cx), "4398046511104") != NULL, "%s", bi->last_error(cx));
    if (st == DG_OK)
        bi->buf_free(cx, big);
    CHECK(bi->buf_alloc(cx, 1 << 20, &small) == DG_OK);
    if (!small)
        return;
    for (size_t i = 0; i < sizeof x; i++)
        x[i] = (unsigned char)(255 - i);
    CHECK(bi->upload(cx, small, 4096, x, sizeof x) == DG_OK);
    CHECK(bi->download(cx, small, 4096, y, sizeof y) == DG_OK);
    CHECK(memcmp(x, y, sizeof x) == 0);
    bi->buf_free(cx, small);
}

/* Median GFLOP/s of ten 4096^3 sgemms, each timed with its synchronize. */
static void perf(void)
{
    enum { N = 4096, REPS = 10 };
    size_t bytes = sizeof(float) * N * N;
    void *da = NULL, *db = NULL, *dc = NULL;
    float *h = malloc(bytes);
    uint64_t seed = 42;
    double t[REPS];
    bool ok = true;

    if (!h) {
        CHECK_MSG(0, "host allocation");
        return;
    }
    for (size_t i = 0; i < (size_t)N * N; i++)
        h[i] = rnd(&seed);
    CHECK(bi->buf_alloc(cx, bytes, &da) == DG_OK);
    CHECK(bi->buf_alloc(cx, bytes, &db) == DG_OK);
    CHECK(bi->buf_alloc(cx, bytes, &dc) == DG_OK);
    if (!da || !db || !dc)
        goto out;
    CHECK(bi->upload(cx, da, 0, h, bytes) == DG_OK);
    CHECK(bi->upload(cx, db, 0, h, bytes) == DG_OK);
    for (int r = 0; r < 3; r++)
        ok &= bi->gemm(cx, false, false, N, N, N, 1.0f, (dg_ref){da, 0}, N, (dg_ref){db, 0}, N, 0.0f, (dg_ref){dc, 0}, N) == DG_OK;
    ok &= bi->synchronize(cx) == DG_OK;
    for (int r = 0; r < REPS; r++) {
        double t0 = now_s();
        ok &= bi->gemm(cx, false, false, N, N, N, 1.0f, (dg_ref){da, 0}, N, (dg_ref){db, 0}, N, 0.0f, (dg_ref){dc, 0}, N) == DG_OK;
        ok &= bi->synchronize(cx) == DG_OK;
        t[r] = now_s() - t0;
    }
    CHECK_MSG(ok, "timed sgemm: %s", bi->last_error(cx));
    qsort(t, REPS, sizeof t[0], cmp_double);
    double med = 0.5 * (t[REPS / 2 - 1] + t[REPS / 2]);
    printf("sgemm %d^3: %.1f GFLOP/s (median of %d, %.3f ms; min %.3f ms, max %.3f ms)\n", N,
           2.0 * N * N * (double)N / med * 1e-9, REPS, med * 1e3, t[0] * 1e3, t[REPS - 1] * 1e3);
out:
    bi->buf_free(cx, da);
    bi->buf_free(cx, db);
    bi->buf_free(cx, dc);
    free(h);
}

int main(void)
{
    const char *dir = getenv("DEVGATE_PLUGIN_DIR");
    char path[4096], reason[256], text[512];

    if (!dir || !*dir)
        check_skip("DEVGATE_PLUGIN_DIR is not set");
    snprintf(path, sizeof path, "%s/libdevgate-cuda.so", dir);
    if (access(path, R_OK) != 0)
        check_skip("libdevgate-cuda.so not built (DEVGATE_PLUGIN_DIR has none)");

    void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK_MSG(so != NULL, "dlopen: %s", dlerror());
    if (!so)
        CHECK_DONE();
    dg_backend_iface_fn fn;
    *(void **)&fn = dlsym(so, DG_PLUGIN_SYMBOL);
    CHECK_MSG(fn != NULL, "dlsym " DG_PLUGIN_SYMBOL ": %s", dlerror());
    if (!fn)
        CHECK_DONE();
    bi = fn();
    CHECK(bi != NULL);
    if (!bi)
        CHECK_DONE();
    CHECK(bi->version == DG_BACKEND_IFACE_VERSION);
    if (bi->version != DG_BACKEND_IFACE_VERSION)
        CHECK_DONE();
    CHECK_STR(bi->name, "cuda");
    CHECK(bi->init && bi->free && bi->last_error && bi->device_count && bi->device_info &&
          bi->versions && bi->buf_alloc && bi->buf_free && bi->upload && bi->download && bi->gemm &&
          bi->synchronize && bi->supports_op);
    CHECK_STR(bi->last_error(NULL), "cuda: not initialised");
    bi->versions(NULL, text, sizeof text);
    CHECK_MSG(strstr(text, "runtime") && strstr(text, "cuBLAS"), "versions: \"%s\"", text);

    reason[0] = 'x';
    reason[1] = '\0';
    cx = (void *)1;
    dg_status st = bi->init(0, &cx, reason, sizeof reason);
    if (st != DG_OK) {
        CHECK(cx == NULL);
        CHECK(reason[0] != '\0' && strcmp(reason, "x") != 0);
        CHECK_MSG(strstr(reason, "driver") || strstr(reason, "device"), "reason: \"%s\"", reason);
        CHECK_MSG(st == DG_ERR_UNAVAILABLE || st == DG_ERR_NOT_FOUND, "status %d", (int)st);
        CHECK(bi->device_count(NULL) == 0 || st != DG_ERR_UNAVAILABLE);
        if (check_failed)
            CHECK_DONE();
        printf("%d passed, %d failed\n", check_passed, check_failed);
        char why[400];
        snprintf(why, sizeof why, "no CUDA device: %s", reason);
        check_skip(why);
    }
    CHECK(cx != NULL);
    CHECK(reason[0] == '\0');

    int count = bi->device_count(cx);
    CHECK(count >= 1);
    void *cx2 = (void *)1;
    CHECK(bi->init(count, &cx2, reason, sizeof reason) == DG_ERR_NOT_FOUND);
    CHECK(cx2 == NULL);
    CHECK_MSG(strstr(reason, "out of range") != NULL, "reason: \"%s\"", reason);

    dg_device_info di;
    CHECK(bi->device_info(cx, 0, &di) == DG_OK);
    CHECK(di.name[0] != '\0');
    CHECK_STR(di.vendor, "NVIDIA");
    CHECK(strncmp(di.platform, "CUDA ", 5) == 0);
    CHECK(strstr(di.driver_version, "driver ") && strstr(di.driver_version, "runtime "));
    CHECK(di.mem_total.valid && di.mem_total.value > 0);
    CHECK(di.mem_free.valid && di.mem_free.value > 0);
    CHECK(di.mem_free.value <= di.mem_total.value);
    CHECK(di.compute_units.valid && di.compute_units.value >= 1);
    CHECK(bi->device_info(cx, count, &di) == DG_ERR_NOT_FOUND);
    bi->versions(cx, text, sizeof text);
    CHECK(strstr(text, "CUDA driver ") && strstr(text, "cuBLAS "));
    CHECK(bi->device_info(cx, 0, &di) == DG_OK);
    printf("device 0: %s, %s, %s, %.0f SMs, %.1f / %.1f GiB free\n", di.name, di.driver_version,
           di.platform, di.compute_units.value, di.mem_free.value / (1 << 30),
           di.mem_total.value / (1 << 30));
    printf("versions: %s\n", text);
    CHECK(bi->supports_op(cx, DG_OP_GEMM));
    CHECK(!bi->supports_op(cx, DG_OP__COUNT));

    copies();
    gemm_usage();
    static const int shapes[][3] = {
        {1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {512, 512, 512}, {1000, 999, 1001}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        gemm_case(shapes[i][0], shapes[i][1], shapes[i][2], 0, 1.0f, 0.0f);
    gemm_case(33, 17, 65, 3, 1.5f, -0.5f);
    fp32_not_tf32();
    oom();
    perf();

    bi->free(cx);
    dlclose(so);
    CHECK_DONE();
}
