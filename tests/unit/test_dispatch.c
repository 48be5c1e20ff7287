/* Engine open and op dispatch: --disable-op parsing, native calls, the cpu
 * fallback (copies, read-modify-write outputs) and its census, over the cpu
 * backend and a fake device backend built from it. */
#include "check.h"
#include "engine/engine.h"

/* ---- helpers ---- */

static dg_ref put(dg_ctx *ctx, dg_engine *e, dg_block **blk, size_t off, const void *src,
                  size_t bytes)
{
    CHECK(dg_alloc(ctx, e->alloc, off + bytes, blk) == DG_OK);
    if (bytes)
        CHECK(e->be->upload(e->bctx, (*blk)->buf, off, src, bytes) == DG_OK);
    return (dg_ref){(*blk)->buf, off};
}

static void get(dg_engine *e, dg_ref r, void *dst, size_t bytes)
{
    CHECK(e->be->synchronize(e->bctx) == DG_OK);
    CHECK(e->be->download(e->bctx, r.buf, r.off, dst, bytes) == DG_OK);
}

/* The census record for shape, NULL when absent. */
static const cJSON *census_rec(const cJSON *arr, const char *shape)
{
    const cJSON *r;
    cJSON_ArrayForEach(r, arr)
    {
        const cJSON *s = cJSON_GetObjectItem(r, "shape");
        if (cJSON_IsString(s) && strcmp(s->valuestring, shape) == 0)
            return r;
    }
    return NULL;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1.0;
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* ---- the fake device: the cpu backend renamed, without relu and conv2d ---- */

static dg_backend_iface fakedev;
static bool fail_download;

static bool fake_supports(void *ctx, dg_op op)
{
    return op != DG_OP_RELU && op != DG_OP_CONV2D;
}

static dg_status fake_download(void *ctx, const void *buf, size_t off, void *dst, size_t bytes)
{
    if (fail_download)
        return DG_ERR_BACKEND;
    return dg_backend_cpu_iface()->download(ctx, buf, off, dst, bytes);
}

static const char *fake_error(void *ctx)
{
    return fail_download ? "fakedev: link down" : dg_backend_cpu_iface()->last_error(ctx);
}

static void make_fakedev(void)
{
    fakedev = *dg_backend_cpu_iface();
    fakedev.name = "fakedev";
    fakedev.supports_op = fake_supports;
    fakedev.download = fake_download;
    fakedev.last_error = fake_error;
}

/* ---- tests ---- */

static void test_parse(void)
{
    dg_ctx *ctx = dg_ctx_new();
    uint32_t m = 99;
    CHECK(dg_parse_disabled_ops(ctx, "conv2d", "cuda", &m) == DG_OK && m == 1u << DG_OP_CONV2D);
    CHECK(dg_parse_disabled_ops(ctx, "conv2d@opencl", "cuda", &m) == DG_OK && m == 0);
    CHECK(dg_parse_disabled_ops(ctx, "conv2d@opencl", "opencl", &m) == DG_OK &&
          m == 1u << DG_OP_CONV2D);
    CHECK(dg_parse_disabled_ops(ctx, "relu,gemm@cuda", "cuda", &m) == DG_OK &&
          m == ((1u << DG_OP_RELU) | (1u << DG_OP_GEMM)));
    CHECK(dg_parse_disabled_ops(ctx, "relu,gemm@cuda", "opencl", &m) == DG_OK &&
          m == 1u << DG_OP_RELU);
    CHECK(dg_parse_disabled_ops(ctx, " xent , softmax_xent@cuda, sgd ", "cuda", &m) == DG_OK &&
          m == ((1u << DG_OP_XENT) | (1u << DG_OP_SGD)));
    CHECK(dg_parse_disabled_ops(ctx, "maxpool,bias_add,bias_grad,fill", "cpu", &m) == DG_OK &&
          m == ((1u << DG_OP_MAXPOOL) | (1u << DG_OP_BIAS_ADD) | (1u << DG_OP_BIAS_GRAD) |
                (1u << DG_OP_FILL)));
    CHECK(dg_parse_disabled_ops(ctx, "", "cuda", &m) == DG_OK && m == 0);
    CHECK(dg_parse_disabled_ops(ctx, NULL, "cuda", &m) == DG_OK && m == 0);
    CHECK(dg_parse_disabled_ops(ctx, "relu,", "cuda", &m) == DG_OK && m == 1u << DG_OP_RELU);
    CHECK(dg_parse_disabled_ops(ctx, "relu,bogus", "cuda", &m) == DG_ERR_USAGE && m == 0);
    CHECK_MSG(strstr(dg_errmsg(ctx), "unknown op 'bogus'") != NULL, "%s", dg_errmsg(ctx));
    CHECK(dg_parse_disabled_ops(ctx, "relu@tpu", "cuda", &m) == DG_ERR_USAGE);
    CHECK_MSG(strstr(dg_errmsg(ctx), "unknown backend 'tpu'") != NULL, "%s", dg_errmsg(ctx));
    CHECK(dg_parse_disabled_ops(ctx, "bogus@opencl", "cuda", &m) == DG_ERR_USAGE);
    dg_ctx_free(ctx);
}

static void test_open_cpu(void)
{
    dg_ctx *ctx = dg_ctx_new();
    dg_engine *e = (dg_engine *)1;
    dg_engine_opts o = {.disabled_ops = 1u << DG_OP_CONV2D};
    CHECK(dg_engine_open(ctx, "cpu", &o, &e) == DG_ERR_USAGE && e == NULL);
    CHECK_MSG(strstr(dg_errmsg(ctx), "cpu is the fallback backend; ops cannot be disabled on it"),
              "%s", dg_errmsg(ctx));
    CHECK(dg_engine_open(ctx, "nosuch", NULL, &e) == DG_ERR_USAGE && e == NULL);
    CHECK(strstr(dg_errmsg(ctx), "nosuch") != NULL);
    dg_engine *c = NULL;
    if (dg_engine_open(ctx, "cuda", NULL, &c) != DG_OK) {
        CHECK_MSG(strncmp(dg_errmsg(ctx), "cuda is not available: ", 23) == 0, "%s",
                  dg_errmsg(ctx));
    }
    dg_engine_close(c);
    o = (dg_engine_opts){.device = 3};
    CHECK(dg_engine_open(ctx, "cpu", &o, &e) == DG_ERR_UNAVAILABLE);
    CHECK_MSG(strncmp(dg_errmsg(ctx), "cpu is not available: ", 22) == 0, "%s", dg_errmsg(ctx));

    o = (dg_engine_opts){.threads = 1, .mem_budget = 1 << 20};
    CHECK(dg_engine_open(ctx, "cpu", &o, &e) == DG_OK && e);
    CHECK(e->cpu == e->be && e->cpu_ctx == NULL && strcmp(e->name, "cpu") == 0);
    CHECK(dg_engine_native(e, DG_OP_GEMM));
    dg_alloc_stats s;
    dg_alloc_get_stats(e->alloc, &s);
    CHECK(s.budget == 1 << 20);

    /* gemm on cpu, natively. */
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1}, cv[4] = {0};
    dg_block *ba, *bb, *bc;
    dg_ref ra = put(ctx, e, &ba, 0, a, sizeof a), rb = put(ctx, e, &bb, 0, b, sizeof b);
    dg_ref rc = put(ctx, e, &bc, 0, cv, sizeof cv);
    CHECK(dg_op_gemm(ctx, e, false, false, 2, 2, 3, 1.0f, ra, 3, rb, 2, 0.0f, rc, 2) == DG_OK);
    get(e, rc, cv, sizeof cv);
    CHECK(cv[0] == 4 && cv[1] == 5 && cv[2] == 10 && cv[3] == 11);
    /* A bad shape comes back with the backend's message. */
    CHECK(dg_op_gemm(ctx, e, false, false, 2, 2, 3, 1.0f, ra, 1, rb, 2, 0.0f, rc, 2) ==
          DG_ERR_USAGE);
    CHECK_MSG(strstr(dg_errmsg(ctx), "cpu: gemm: cpu: bad gemm shape") != NULL, "%s",
              dg_errmsg(ctx));
    if (!dg_backend_cpu_iface()->relu_fwd) {
        CHECK(dg_op_relu_fwd(ctx, e, ra, ra, 6) == DG_ERR_UNAVAILABLE);
        CHECK_MSG(strstr(dg_errmsg(ctx), "op relu is not supported by cpu") != NULL, "%s",
                  dg_errmsg(ctx));
    } else {
        float x[6] = {-1, 2, -3, 4, 0, -0.5f}, y[6];
        dg_ref rx = put(ctx, e, &ba, 0, x, sizeof x);
        CHECK(dg_op_relu_fwd(ctx, e, rx, rx, 6) == DG_OK);
        get(e, rx, y, sizeof y);
        CHECK(y[0] == 0 && y[1] == 2 && y[2] == 0 && y[3] == 4 && y[4] == 0 && y[5] == 0);
    }
    CHECK(!e->any_fallback);
    cJSON *cj = dg_engine_census_json(e);
    CHECK(cJSON_IsArray(cj) && cJSON_GetArraySize(cj) == 0);
    cJSON_Delete(cj);
    dg_engine_close(e);
    dg_engine_close(NULL);
    dg_ctx_free(ctx);
}

/* C = alpha op(A) op(B) + beta C in double, A/B/C with leading dimensions. */
static void gemm_ref(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, const float *c, int ldc, double *out)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                double av = ta ? a[p * lda + i] : a[i * lda + p];
                double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
                s += av * bv;
            }
            out[i * n + j] = alpha * s + (beta != 0.0f ? beta * (double)c[i * ldc + j] : 0.0);
        }
}

/* A disabled gemm with transposes, padding, offsets and beta != 0 falls back
 * with C read back first; beta == 0 does not read C. */
static void test_gemm_fallback(dg_ctx *ctx)
{
    dg_engine_opts o = {.disabled_ops = 1u << DG_OP_GEMM};
    dg_engine *e = NULL;
    CHECK(dg_engine_open_iface(ctx, &fakedev, &o, &e) == DG_OK && e);
    if (!e)
        return;
    CHECK(!dg_engine_native(e, DG_OP_GEMM));
    CHECK(e->cpu == dg_backend_cpu_iface() && e->cpu_ctx != NULL);
    enum { M = 5, N = 4, K = 3, LDA = M + 2, LDB = K + 1, LDC = N + 3 };
    /* ta: A stored K x M (lda >= M); tb: B stored N x K (ldb >= K). */
    float a[K * LDA], b[N * LDB], c[M * LDC];
    for (int i = 0; i < K * LDA; i++)
        a[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < N * LDB; i++)
        b[i] = (float)(i % 5) * 0.5f - 1.0f;
    for (int i = 0; i < M * LDC; i++)
        c[i] = (float)i * 0.25f;
    size_t sa = ((K - 1) * LDA + M) * 4, sb = ((N - 1) * LDB + K) * 4, sc = ((M - 1) * LDC + N) * 4;
    dg_block *ba, *bb, *bc;
    dg_ref ra = put(ctx, e, &ba, 16, a, sa), rb = put(ctx, e, &bb, 8, b, sb);
    dg_ref rc = put(ctx, e, &bc, 32, c, sc);
    double want[M * N];
    gemm_ref(true, true, M, N, K, 1.5f, a, LDA, b, LDB, 0.5f, c, LDC, want);
    CHECK(dg_op_gemm(ctx, e, true, true, M, N, K, 1.5f, ra, LDA, rb, LDB, 0.5f, rc, LDC) == DG_OK);
    float got[M * LDC];
    get(e, rc, got, sc);
    double maxerr = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double d = fabs(got[i * LDC + j] - want[i * N + j]);
            maxerr = d > maxerr ? d : maxerr;
        }
    CHECK_MSG(maxerr < 1e-4, "max error %g", maxerr);
    /* Padding between rows of C is left alone. */
    CHECK(got[N] == c[N] && got[LDC - 1] == c[LDC - 1]);

    cJSON *cj = dg_engine_census_json(e);
    const cJSON *r = census_rec(cj, "gemm 5x4x3 ta=1 tb=1");
    CHECK(r != NULL);
    if (r) {
        CHECK_STR(str(r, "op"), "gemm");
        CHECK_STR(str(r, "backend"), "fakedev");
        CHECK_STR(str(r, "reason"), "disabled by --disable-op");
        CHECK(num(r, "calls") == 1);
        CHECK_MSG(num(r, "bytes_d2h") == (double)(sa + sb + sc), "d2h %g", num(r, "bytes_d2h"));
        CHECK(num(r, "bytes_h2d") == (double)sc);
        CHECK(num(r, "ms_total") >= 0);
    }
    cJSON_Delete(cj);
    CHECK(e->any_fallback);

    /* beta == 0: C holds NaN garbage that must not be read or propagate. */
    for (int i = 0; i < M * LDC; i++)
        c[i] = NAN;
    CHECK(e->be->upload(e->bctx, rc.buf, rc.off, c, sc) == DG_OK);
    gemm_ref(false, false, M, N, K, 1.0f, a, K, b, N, 0.0f, c, LDC, want);
    CHECK(dg_op_gemm(ctx, e, false, false, M, N, K, 1.0f, ra, K, rb, N, 0.0f, rc, LDC) == DG_OK);
    get(e, rc, got, sc);
    maxerr = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double d = fabs(got[i * LDC + j] - want[i * N + j]);
            maxerr = !isfinite(d) ? INFINITY : d > maxerr ? d : maxerr;
        }
    CHECK_MSG(maxerr < 1e-4, "max error %g", maxerr);
    cj = dg_engine_census_json(e);
    r = census_rec(cj, "gemm 5x4x3 ta=0 tb=0");
    size_t sa2 = ((M - 1) * K + K) * 4, sb2 = ((K - 1) * N + N) * 4;
    CHECK(r && num(r, "bytes_d2h") == (double)(sa2 + sb2) && num(r, "bytes_h2d") == (double)sc);
    cJSON_Delete(cj);

    /* Repeated fallbacks reuse the staging buffers: host memory stays flat. */
    size_t live1, live2;
    dg_host_mem_stats(&live1, NULL);
    for (int i = 0; i < 20; i++)
        CHECK(dg_op_gemm(ctx, e, false, false, M, N, K, 1.0f, ra, K, rb, N, 0.0f, rc, LDC) ==
              DG_OK);
    dg_host_mem_stats(&live2, NULL);
    CHECK_MSG(live2 == live1, "host bytes %zu -> %zu over 20 fallbacks", live1, live2);
    cj = dg_engine_census_json(e);
    r = census_rec(cj, "gemm 5x4x3 ta=0 tb=0");
    CHECK(r && num(r, "calls") == 21);
    /* Sorted by total time, largest first. */
    double prev = 1e300;
    cJSON_ArrayForEach(r, cj)
    {
        CHECK(num(r, "ms_total") <= prev);
        prev = num(r, "ms_total");
    }
    cJSON_Delete(cj);

    /* A failing copy surfaces with the device's message; nothing recorded. */
    fail_download = true;
    CHECK(dg_op_gemm(ctx, e, false, false, M, N, K, 1.0f, ra, K, rb, N, 0.0f, rc, LDC) ==
          DG_ERR_BACKEND);
    fail_download = false;
    CHECK_MSG(strstr(dg_errmsg(ctx), "fakedev download: fakedev: link down") != NULL, "%s",
              dg_errmsg(ctx));
    cj = dg_engine_census_json(e);
    r = census_rec(cj, "gemm 5x4x3 ta=0 tb=0");
    CHECK(r && num(r, "calls") == 21);
    cJSON_Delete(cj);

    /* A bad shape is refused, not overflowed. */
    CHECK(dg_op_gemm(ctx, e, false, false, -1, N, K, 1.0f, ra, K, rb, N, 0.0f, rc, LDC) ==
          DG_ERR_USAGE);

    /* More than 256 distinct shapes fold into one "other" record. */
    float ones[300];
    for (int i = 0; i < 300; i++)
        ones[i] = 1.0f;
    dg_block *bo, *bp;
    dg_ref ro = put(ctx, e, &bo, 0, ones, sizeof ones), rp = put(ctx, e, &bp, 0, ones, sizeof ones);
    int failed = 0;
    for (int i = 1; i <= 300; i++) /* m = i: an i x 1 column times 1 x 1 */
        failed +=
            dg_op_gemm(ctx, e, false, false, i, 1, 1, 2.0f, ro, 1, ro, 1, 0.0f, rp, 1) != DG_OK;
    CHECK(failed == 0);
    get(e, rp, ones, sizeof ones);
    CHECK(ones[0] == 2.0f && ones[299] == 2.0f);
    cj = dg_engine_census_json(e);
    CHECK_MSG(cJSON_GetArraySize(cj) == 257, "%d records", cJSON_GetArraySize(cj));
    r = census_rec(cj, "other");
    /* 2 records before, 254 more distinct shapes fit, 46 fold. */
    CHECK(r && strcmp(str(r, "op"), "other") == 0 && num(r, "calls") == 46);
    cJSON_Delete(cj);
    dg_engine_close(e);
}

static void test_relu_fallback(dg_ctx *ctx)
{
    dg_engine *e = NULL;
    CHECK(dg_engine_open_iface(ctx, &fakedev, NULL, &e) == DG_OK && e);
    if (!e)
        return;
    CHECK(dg_engine_native(e, DG_OP_GEMM));
    CHECK(!dg_engine_native(e, DG_OP_RELU) && !dg_engine_native(e, DG_OP_CONV2D));
    enum { COUNT = 1000 };
    float x[COUNT], y[COUNT];
    for (int i = 0; i < COUNT; i++)
        x[i] = (float)(i % 9) - 4.0f;
    dg_block *bx, *by;
    dg_ref rx = put(ctx, e, &bx, 0, x, sizeof x), ry = put(ctx, e, &by, 4, x, sizeof x);

    if (!dg_backend_cpu_iface()->relu_fwd) {
        CHECK(dg_op_relu_fwd(ctx, e, rx, ry, COUNT) == DG_ERR_UNAVAILABLE);
        CHECK_MSG(strstr(dg_errmsg(ctx),
                         "op relu is supported neither by fakedev nor by the cpu fallback"),
                  "%s", dg_errmsg(ctx));
        CHECK(!e->any_fallback);
    } else {
        CHECK(dg_op_relu_fwd(ctx, e, rx, ry, COUNT) == DG_OK);
        CHECK(dg_op_relu_fwd(ctx, e, rx, ry, COUNT) == DG_OK);
        get(e, ry, y, sizeof y);
        int bad = 0;
        for (int i = 0; i < COUNT; i++)
            bad += y[i] != (x[i] > 0 ? x[i] : 0.0f);
        CHECK(bad == 0);
        CHECK(e->any_fallback);
        cJSON *cj = dg_engine_census_json(e);
        const cJSON *r = census_rec(cj, "relu 1000");
        CHECK(r != NULL);
        if (r) {
            CHECK_STR(str(r, "op"), "relu");
            CHECK_STR(str(r, "reason"), "not supported by fakedev");
            CHECK(num(r, "calls") == 2);
            CHECK(num(r, "bytes_d2h") == 2.0 * COUNT * 4);
            CHECK(num(r, "bytes_h2d") == 2.0 * COUNT * 4);
        }
        cJSON_Delete(cj);
        /* In place: one staged copy each way. */
        CHECK(dg_op_relu_fwd(ctx, e, rx, rx, COUNT) == DG_OK);
        get(e, rx, y, sizeof y);
        bad = 0;
        for (int i = 0; i < COUNT; i++)
            bad += y[i] != (x[i] > 0 ? x[i] : 0.0f);
        CHECK(bad == 0);
        cj = dg_engine_census_json(e);
        r = census_rec(cj, "relu 1000");
        CHECK(r && num(r, "calls") == 3 && num(r, "bytes_d2h") == 3.0 * COUNT * 4 &&
              num(r, "bytes_h2d") == 3.0 * COUNT * 4);
        cJSON_Delete(cj);
        /* Backward with dx aliasing dy: dx = y > 0 ? dy : 0. */
        float dy[COUNT], dx[COUNT];
        for (int i = 0; i < COUNT; i++)
            dy[i] = (float)i;
        dg_block *bd;
        dg_ref rd = put(ctx, e, &bd, 0, dy, sizeof dy);
        CHECK(dg_op_relu_bwd(ctx, e, rx, rd, rd, COUNT) == DG_OK);
        get(e, rd, dx, sizeof dx);
        bad = 0;
        for (int i = 0; i < COUNT; i++)
            bad += dx[i] != (x[i] > 0 ? dy[i] : 0.0f);
        CHECK(bad == 0);
        cj = dg_engine_census_json(e);
        r = census_rec(cj, "relu_bwd 1000");
        CHECK(r && num(r, "calls") == 1 && num(r, "bytes_d2h") == 2.0 * COUNT * 4 &&
              num(r, "bytes_h2d") == 1.0 * COUNT * 4);
        cJSON_Delete(cj);
    }

    /* conv2d: 1 image, 2 channels 5x5, 3 filters 3x3, stride 1, pad 1. */
    dg_conv_shape s = {.n = 1,
                       .c = 2,
                       .h = 5,
                       .w = 5,
                       .k = 3,
                       .kh = 3,
                       .kw = 3,
                       .stride = 1,
                       .pad = 1,
                       .ho = 5,
                       .wo = 5};
    float cx[2 * 25], cw[3 * 2 * 9], cb[3] = {0.5f, -1.0f, 0.0f}, cy[3 * 25];
    for (int i = 0; i < 50; i++)
        cx[i] = (float)((i * 7) % 11) - 5.0f;
    for (int i = 0; i < 54; i++)
        cw[i] = (float)((i * 5) % 7) * 0.25f - 0.75f;
    dg_block *b1, *b2, *b3, *b4;
    dg_ref rcx = put(ctx, e, &b1, 0, cx, sizeof cx), rcw = put(ctx, e, &b2, 0, cw, sizeof cw);
    dg_ref rcb = put(ctx, e, &b3, 0, cb, sizeof cb), rcy = put(ctx, e, &b4, 0, cy, sizeof cy);
    dg_ref nowork = {NULL, 0};
    CHECK(dg_op_conv2d_workspace(e, &s) == 0); /* the fallback brings its own */
    if (!dg_backend_cpu_iface()->conv2d_fwd) {
        CHECK(dg_op_conv2d_fwd(ctx, e, &s, rcx, rcw, rcb, rcy, nowork) == DG_ERR_UNAVAILABLE);
        CHECK(strstr(dg_errmsg(ctx), "op conv2d is supported neither by fakedev") != NULL);
    } else {
        CHECK(dg_op_conv2d_fwd(ctx, e, &s, rcx, rcw, rcb, rcy, nowork) == DG_OK);
        get(e, rcy, cy, sizeof cy);
        double maxerr = 0;
        for (int k = 0; k < 3; k++)
            for (int oy = 0; oy < 5; oy++)
                for (int ox = 0; ox < 5; ox++) {
                    double acc = cb[k];
                    for (int c = 0; c < 2; c++)
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                int iy = oy - 1 + ky, ix = ox - 1 + kx;
                                if (iy >= 0 && iy < 5 && ix >= 0 && ix < 5)
                                    acc += (double)cx[c * 25 + iy * 5 + ix] *
                                           cw[((k * 2 + c) * 3 + ky) * 3 + kx];
                            }
                    double d = fabs(acc - cy[k * 25 + oy * 5 + ox]);
                    maxerr = d > maxerr ? d : maxerr;
                }
        CHECK_MSG(maxerr < 1e-4, "conv max error %g", maxerr);
        cJSON *cj = dg_engine_census_json(e);
        const cJSON *r = census_rec(cj, "conv2d n1 c2 5x5 k3 3x3 s1 p1");
        CHECK(r && num(r, "calls") == 1 && strcmp(str(r, "op"), "conv2d") == 0);
        CHECK(r && num(r, "bytes_d2h") == (double)(sizeof cx + sizeof cw + sizeof cb) &&
              num(r, "bytes_h2d") == (double)sizeof cy);
        cJSON_Delete(cj);
    }
    dg_engine_close(e);
}

/* Outputs the op also reads (bias_add's y, sgd's w and mom, xent's acc) are
 * downloaded before the cpu runs the op. */
static void test_rmw_fallback(dg_ctx *ctx)
{
    const dg_backend_iface *cpu = dg_backend_cpu_iface();
    dg_engine_opts o = {.disabled_ops =
                            (1u << DG_OP_BIAS_ADD) | (1u << DG_OP_XENT) | (1u << DG_OP_SGD)};
    dg_engine *e = NULL;
    CHECK(dg_engine_open_iface(ctx, &fakedev, &o, &e) == DG_OK && e);
    if (!e)
        return;
    dg_block *b1, *b2, *b3, *b4;

    float y[2 * 3 * 2], bias[3] = {1, 2, 3}, out[12];
    for (int i = 0; i < 12; i++)
        y[i] = (float)i;
    dg_ref ry = put(ctx, e, &b1, 0, y, sizeof y), rb = put(ctx, e, &b2, 0, bias, sizeof bias);
    if (!cpu->bias_add) {
        CHECK(dg_op_bias_add(ctx, e, ry, rb, 2, 3, 2) == DG_ERR_UNAVAILABLE);
    } else {
        CHECK(dg_op_bias_add(ctx, e, ry, rb, 2, 3, 2) == DG_OK);
        get(e, ry, out, sizeof out);
        int bad = 0;
        for (int i = 0; i < 12; i++)
            bad += out[i] != y[i] + bias[(i / 2) % 3];
        CHECK(bad == 0);
    }

    float w[4] = {1, -2, 3, -4}, g[4] = {0.5f, 0.5f, -1, 2}, mom[4] = {1, 1, 1, 1}, w2[4], m2[4];
    dg_ref rw = put(ctx, e, &b1, 0, w, sizeof w), rg = put(ctx, e, &b2, 0, g, sizeof g);
    dg_ref rm = put(ctx, e, &b3, 0, mom, sizeof mom);
    if (!cpu->sgd) {
        CHECK(dg_op_sgd(ctx, e, rw, rg, rm, 4, 0.1f, 0.9f, 0.01f) == DG_ERR_UNAVAILABLE);
    } else {
        CHECK(dg_op_sgd(ctx, e, rw, rg, rm, 4, 0.1f, 0.9f, 0.01f) == DG_OK);
        get(e, rw, w2, sizeof w2);
        get(e, rm, m2, sizeof m2);
        double err = 0;
        for (int i = 0; i < 4; i++) {
            double d = g[i] + 0.01 * w[i], m = 0.9 * mom[i] + d, nw = w[i] - 0.1 * m;
            err = fmax(err, fmax(fabs(m2[i] - m), fabs(w2[i] - nw)));
        }
        CHECK_MSG(err < 1e-5, "sgd error %g", err);
    }

    float logits[2 * 3] = {1, 2, 3, 3, 1, 2}, dl[6], acc[2] = {10, 1};
    int32_t labels[2] = {2, 1};
    dg_ref rl = put(ctx, e, &b1, 0, logits, sizeof logits);
    dg_ref rlab = put(ctx, e, &b2, 0, labels, sizeof labels);
    dg_ref rdl = put(ctx, e, &b3, 0, dl, sizeof dl), racc = put(ctx, e, &b4, 0, acc, sizeof acc);
    if (!cpu->xent) {
        CHECK(dg_op_xent(ctx, e, 2, 3, rl, rlab, rdl, racc) == DG_ERR_UNAVAILABLE);
    } else {
        CHECK(dg_op_xent(ctx, e, 2, 3, rl, rlab, rdl, racc) == DG_OK);
        float acc2[2];
        get(e, racc, acc2, sizeof acc2);
        get(e, rdl, dl, sizeof dl);
        double loss = 0, err = 0;
        for (int r = 0; r < 2; r++) {
            double mx = fmax(logits[r * 3], fmax(logits[r * 3 + 1], logits[r * 3 + 2])), z = 0;
            for (int c = 0; c < 3; c++)
                z += exp(logits[r * 3 + c] - mx);
            loss += -(logits[r * 3 + labels[r]] - mx - log(z)) / 2;
            for (int c = 0; c < 3; c++) {
                double p = exp(logits[r * 3 + c] - mx) / z - (c == labels[r]);
                err = fmax(err, fabs(dl[r * 3 + c] - p / 2));
            }
        }
        CHECK_MSG(fabs(acc2[0] - (10 + loss)) < 1e-4, "acc[0] %g, want %g", acc2[0], 10 + loss);
        CHECK_MSG(acc2[1] == 2.0f, "acc[1] %g", acc2[1]); /* row 0 right, row 1 wrong */
        CHECK_MSG(err < 1e-5, "dlogits error %g", err);
        cJSON *cj = dg_engine_census_json(e);
        const cJSON *r = census_rec(cj, "softmax_xent n2 classes3");
        CHECK(r && num(r, "bytes_d2h") == (double)(sizeof logits + sizeof labels + sizeof acc) &&
              num(r, "bytes_h2d") == (double)(sizeof dl + sizeof acc));
        cJSON_Delete(cj);
    }
    dg_engine_close(e);
}

int main(void)
{
    make_fakedev();
    size_t live0, live1;
    dg_ctx *ctx = dg_ctx_new();
    dg_host_mem_stats(&live0, NULL);
    test_parse();
    test_open_cpu();
    test_gemm_fallback(ctx);
    test_relu_fallback(ctx);
    test_rmw_fallback(ctx);
    dg_host_mem_stats(&live1, NULL);
    CHECK_MSG(live1 == live0, "host bytes live %zu at start, %zu at end", live0, live1);
    dg_ctx_free(ctx);
    CHECK_DONE();
}
