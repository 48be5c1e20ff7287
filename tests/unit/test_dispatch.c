/* Engine open and op dispatch: --disable-op parsing, native calls, the cpu
 * fallback (copies, read-modify-write outputs) and its census, over the cpu
 * backend and a fake device backend built from it. */
#include "check.h"
#include "engine/engine.h"

#include <math.h>

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

static bool fake_supports(void *ctx, const dg_op_desc *d)
{
    return d->op != DG_OP_RELU && d->op != DG_OP_CONV2D;
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
    fakedev.caps.host = false; /* a device, not the baseline */
    fakedev.supports_op = fake_supports;
    fakedev.download = fake_download;
    fakedev.last_error = fake_error;
}

/* ---- tests ---- */

#define CALL(x) (1u << DG_CALL_##x)
#define CONV (CALL(CONV2D_FWD) | CALL(CONV2D_BWD))
#define RELU (CALL(RELU_FWD) | CALL(RELU_BWD))
#define POOL (CALL(MAXPOOL_FWD) | CALL(MAXPOOL_BWD))

/* Parses spec for backend name: the status, and the mask in *m. */
static dg_status parse(dg_ctx *ctx, const char *spec, const char *name, uint32_t *m)
{
    *m = 99;
    return dg_parse_disabled_ops(ctx, spec, name, m);
}

static void test_parse(void)
{
    dg_ctx *ctx = dg_ctx_new();
    uint32_t m = 99;
    /* An op name stands for its calls; a call name for itself. */
    CHECK(parse(ctx, "conv2d", "cuda", &m) == DG_OK && m == CONV);
    CHECK(parse(ctx, "conv2d_fwd", "cuda", &m) == DG_OK && m == CALL(CONV2D_FWD));
    CHECK(parse(ctx, "conv2d_bwd@opencl", "opencl", &m) == DG_OK && m == CALL(CONV2D_BWD));
    CHECK(parse(ctx, "relu_bwd,maxpool_fwd", "opencl", &m) == DG_OK &&
          m == (CALL(RELU_BWD) | CALL(MAXPOOL_FWD)));
    CHECK(parse(ctx, "conv2d@opencl", "cuda", &m) == DG_OK && m == 0);
    CHECK(parse(ctx, "conv2d@opencl", "opencl", &m) == DG_OK && m == CONV);
    CHECK(parse(ctx, "relu,gemm@cuda", "cuda", &m) == DG_OK && m == (RELU | CALL(GEMM)));
    CHECK(parse(ctx, "relu,gemm@cuda", "opencl", &m) == DG_OK && m == RELU);
    CHECK(parse(ctx, " xent , softmax_xent@cuda, sgd ", "cuda", &m) == DG_OK &&
          m == (CALL(XENT) | CALL(SGD)));
    CHECK(parse(ctx, "maxpool,bias_add,bias_grad,fill", "opencl", &m) == DG_OK &&
          m == (POOL | CALL(BIAS_ADD) | CALL(BIAS_GRAD) | CALL(FILL)));
    /* Every call name the profile prints is accepted. */
    for (int c = 0; c < DG_CALL__COUNT; c++)
        CHECK_MSG(parse(ctx, dg_call_names[c], "opencl", &m) == DG_OK && m == 1u << c, "%s: %s",
                  dg_call_names[c], dg_errmsg(ctx));
    /* Entries without a backend are for the device: the cpu baseline ignores them. */
    CHECK(parse(ctx, "maxpool,bias_add,bias_grad,fill", "cpu", &m) == DG_OK && m == 0);
    CHECK(parse(ctx, "conv2d", "cpu", &m) == DG_OK && m == 0);
    CHECK(parse(ctx, "", "cuda", &m) == DG_OK && m == 0);
    CHECK(dg_parse_disabled_ops(ctx, NULL, "cuda", &m) == DG_OK && m == 0);
    CHECK(parse(ctx, "relu,", "cuda", &m) == DG_OK && m == RELU);
    CHECK(parse(ctx, "relu,bogus", "cuda", &m) == DG_ERR_USAGE && m == 0);
    CHECK_MSG(strstr(dg_errmsg(ctx), "unknown op 'bogus'") != NULL, "%s", dg_errmsg(ctx));
    CHECK(parse(ctx, "relu@tpu", "cuda", &m) == DG_ERR_USAGE);
    CHECK_MSG(strstr(dg_errmsg(ctx), "unknown backend 'tpu' (known: cpu, opencl, cuda)") != NULL,
              "%s", dg_errmsg(ctx));
    CHECK(parse(ctx, "bogus@opencl", "cuda", &m) == DG_ERR_USAGE);
    /* An op aimed at the cpu is refused, whatever backend runs. */
    CHECK(parse(ctx, "conv2d@cpu", "opencl", &m) == DG_ERR_USAGE && m == 0);
    CHECK_MSG(strstr(dg_errmsg(ctx), "conv2d@cpu: cpu is the fallback backend") != NULL, "%s",
              dg_errmsg(ctx));
    CHECK(parse(ctx, "gemm@cpu", "cpu", &m) == DG_ERR_USAGE);

    /* The check the verbs call before measuring: the same judgement, no backend. */
    CHECK(dg_disable_ops_check(ctx, NULL) == DG_OK);
    CHECK(dg_disable_ops_check(ctx, "") == DG_OK);
    CHECK(dg_disable_ops_check(ctx, "conv2d") == DG_OK);
    CHECK(dg_disable_ops_check(ctx, "conv2d_fwd@opencl,relu_bwd@cuda") == DG_OK);
    CHECK(dg_disable_ops_check(ctx, "conv3d@opencl") == DG_ERR_USAGE);
    CHECK_MSG(strstr(dg_errmsg(ctx), "unknown op 'conv3d'") != NULL, "%s", dg_errmsg(ctx));
    CHECK(dg_disable_ops_check(ctx, "conv2d@metal") == DG_ERR_USAGE);
    CHECK_MSG(strstr(dg_errmsg(ctx), "unknown backend 'metal'") != NULL, "%s", dg_errmsg(ctx));
    CHECK(dg_disable_ops_check(ctx, "relu@cpu") == DG_ERR_USAGE);
    CHECK_MSG(strstr(dg_errmsg(ctx), "relu@cpu") != NULL, "%s", dg_errmsg(ctx));
    dg_ctx_free(ctx);
}

/* The registry is one table: names, index, lookup and the host flag agree;
 * the capability blocks agree with the functions each backend fills in. */
static void test_registry(void)
{
    dg_ctx *ctx = dg_ctx_new();
    CHECK(strcmp(dg_backend_known(), "cpu, opencl, cuda") == 0);
    CHECK(dg_backend_names_count == 3);
    int hosts = 0;
    for (size_t i = 0; i < dg_backend_names_count; i++) {
        const char *n = dg_backend_names[i];
        CHECK(dg_backend_index(n) == (int)i);
        dg_backend_entry ent;
        CHECK(dg_backend_find(ctx, n, &ent) == DG_OK && strcmp(ent.name, n) == 0);
        const dg_backend_iface *b = ent.iface;
        if (!b)
            continue;
        CHECK(strcmp(b->name, n) == 0);
        hosts += b->caps.host;
        CHECK(dg_backend_is_host(n) == b->caps.host);
        CHECK_MSG(b->caps.graph_capture == (b->capture_begin && b->capture_end && b->replay),
                  "%s: graph_capture", n);
        CHECK_MSG(b->caps.event_timing == (b->event_record && b->event_elapsed), "%s: events", n);
        CHECK_MSG(b->caps.tf32 == (b->set_math != NULL), "%s: tf32", n);
    }
    CHECK(hosts == 1 && dg_backend_is_host("cpu"));
    CHECK(!dg_backend_is_host("opencl") && !dg_backend_is_host("cuda") &&
          !dg_backend_is_host("metal") && !dg_backend_is_host(NULL));
    dg_backend_entry ent;
    CHECK(dg_backend_find(ctx, "metal", &ent) == DG_ERR_NOT_FOUND);
    CHECK_MSG(strstr(dg_errmsg(ctx), "unknown backend 'metal' (known: cpu, opencl, cuda)"), "%s",
              dg_errmsg(ctx));
    CHECK(dg_backend_index("metal") == -1 && dg_backend_index(NULL) == -1);
    /* The fault wrapper is outside the production lookup. */
    setenv("DEVGATE_FAULT", "gemm-corrupt@cpu", 1);
    dg_backend_entry plain, wrapped;
    CHECK(dg_backend_find(ctx, "cpu", &plain) == DG_OK && plain.iface == dg_backend_cpu_iface());
    CHECK(dg_backend_lookup(ctx, "cpu", &wrapped) == DG_OK && wrapped.iface != plain.iface);
    CHECK(wrapped.iface && wrapped.iface->gemm != plain.iface->gemm && wrapped.iface->caps.host);
    setenv("DEVGATE_FAULT", "relu-leak@cpu", 1);
    CHECK(dg_backend_lookup(ctx, "cpu", &wrapped) == DG_OK && wrapped.iface &&
          !wrapped.iface->caps.graph_capture && !wrapped.iface->capture_begin);
    unsetenv("DEVGATE_FAULT");
    CHECK(dg_backend_lookup(ctx, "cpu", &wrapped) == DG_OK &&
          wrapped.iface == dg_backend_cpu_iface());
    dg_ctx_free(ctx);
}

static void test_open_cpu(void)
{
    dg_ctx *ctx = dg_ctx_new();
    dg_engine *e = (dg_engine *)1;
    dg_engine_opts o = {.disabled_calls = CONV};
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
    dg_engine_opts o = {.disabled_calls = CALL(GEMM)};
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
    dg_engine_opts o = {.disabled_calls = CALL(BIAS_ADD) | CALL(XENT) | CALL(SGD)};
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

/* ---- a device that judges by shape: gemm only while k <= 4 ---- */

static dg_backend_iface shapedev;
static dg_op_desc last_desc;
static int shape_asks, any_asks;

static bool shape_supports(void *ctx, const dg_op_desc *d)
{
    if (d->any_shape) {
        any_asks++;
        return true; /* in general, yes */
    }
    shape_asks++;
    last_desc = *d;
    return d->op != DG_OP_GEMM || d->k <= 4;
}

/* supports_op sees each call's shape and element type: the same gemm runs
 * natively at k = 3 and falls back at k = 8, one census record for the one
 * shape it refused; a call disabled alone (conv2d_bwd) falls back while its
 * sibling (conv2d_fwd) stays native. */
static void test_shape_aware(dg_ctx *ctx)
{
    shapedev = *dg_backend_cpu_iface();
    shapedev.name = "shapedev";
    shapedev.caps.host = false;
    shapedev.supports_op = shape_supports;
    dg_engine_opts o = {.disabled_calls = CALL(CONV2D_BWD)};
    dg_engine *e = NULL;
    CHECK(dg_engine_open_iface(ctx, &shapedev, &o, &e) == DG_OK && e);
    if (!e)
        return;
    CHECK(dg_engine_native(e, DG_OP_GEMM) && any_asks > 0);
    CHECK(!dg_engine_native(e, DG_OP_CONV2D)); /* one of its calls is disabled */
    enum { M = 2, N = 2, K = 8 };
    float a[M * K], b[K * N], c[M * N];
    for (int i = 0; i < M * K; i++)
        a[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)(i % 3) - 1.0f;
    dg_block *ba, *bb, *bc;
    dg_ref ra = put(ctx, e, &ba, 0, a, sizeof a), rb = put(ctx, e, &bb, 0, b, sizeof b);
    dg_ref rc = put(ctx, e, &bc, 0, c, sizeof c);
    shape_asks = 0;
    CHECK(dg_op_gemm(ctx, e, false, true, M, N, 3, 1.0f, ra, K, rb, K, 0.0f, rc, N) == DG_OK);
    CHECK(shape_asks == 1 && last_desc.op == DG_OP_GEMM && last_desc.call == DG_CALL_GEMM &&
          last_desc.dtype == DG_DTYPE_F32 && !last_desc.any_shape && last_desc.m == M &&
          last_desc.n == N && last_desc.k == 3 && !last_desc.ta && last_desc.tb);
    CHECK(!e->any_fallback);
    CHECK(dg_op_gemm(ctx, e, false, true, M, N, K, 1.0f, ra, K, rb, K, 0.0f, rc, N) == DG_OK);
    CHECK(e->any_fallback && last_desc.k == K);
    float got[M * N];
    get(e, rc, got, sizeof got);
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double r = 0;
            for (int p = 0; p < K; p++)
                r += (double)a[i * K + p] * b[j * K + p];
            bad += fabs(got[i * N + j] - r) > 1e-5;
        }
    CHECK_MSG(bad == 0, "%d wrong elements after the shape fallback", bad);
    cJSON *cj = dg_engine_census_json(e);
    CHECK(cJSON_GetArraySize(cj) == 1);
    const cJSON *r = census_rec(cj, "gemm 2x2x8 ta=0 tb=1");
    CHECK_MSG(r && num(r, "calls") == 1 && strcmp(str(r, "op"), "gemm") == 0 &&
                  strcmp(str(r, "reason"), "not supported by shapedev") == 0,
              "census: %s", cj ? cJSON_PrintUnformatted(cj) : "null");
    cJSON_Delete(cj);

    /* conv2d_fwd native, conv2d_bwd (disabled alone) on the fallback. */
    dg_conv_shape cs = {.n = 1,
                        .c = 1,
                        .h = 4,
                        .w = 4,
                        .k = 1,
                        .kh = 3,
                        .kw = 3,
                        .stride = 1,
                        .pad = 0,
                        .ho = 2,
                        .wo = 2};
    float x[16], w[9], y[4], dy[4] = {1, 1, 1, 1}, zero[16] = {0};
    for (int i = 0; i < 16; i++)
        x[i] = (float)i;
    for (int i = 0; i < 9; i++)
        w[i] = 1.0f;
    size_t ws = dg_op_conv2d_workspace(e, &cs); /* fwd runs on the device: its workspace */
    dg_block *bx, *bw, *by, *bdy, *bdx, *bdw, *bwk;
    dg_ref rx = put(ctx, e, &bx, 0, x, sizeof x), rw = put(ctx, e, &bw, 0, w, sizeof w);
    dg_ref ry = put(ctx, e, &by, 0, y, sizeof y), rdy = put(ctx, e, &bdy, 0, dy, sizeof dy);
    dg_ref rdx = put(ctx, e, &bdx, 0, zero, sizeof x), rdw = put(ctx, e, &bdw, 0, zero, sizeof w);
    dg_ref rwk = {NULL, 0};
    if (ws && dg_alloc(ctx, e->alloc, ws, &bwk) == DG_OK)
        rwk = (dg_ref){bwk->buf, 0};
    shape_asks = 0;
    CHECK(dg_op_conv2d_fwd(ctx, e, &cs, rx, rw, (dg_ref){NULL, 0}, ry, rwk) == DG_OK);
    CHECK(shape_asks == 1 && last_desc.call == DG_CALL_CONV2D_FWD && last_desc.conv == &cs);
    CHECK(dg_op_conv2d_bwd(ctx, e, &cs, rx, rw, rdy, rdx, rdw, (dg_ref){NULL, 0}, rwk) == DG_OK);
    get(e, ry, y, sizeof y);
    CHECK(y[0] == 45 && y[1] == 54 && y[2] == 81 && y[3] == 90);
    cj = dg_engine_census_json(e);
    CHECK(census_rec(cj, "conv2d n1 c1 4x4 k1 3x3 s1 p0") == NULL);
    r = census_rec(cj, "conv2d_bwd n1 c1 4x4 k1 3x3 s1 p0");
    CHECK_MSG(r && strcmp(str(r, "reason"), "disabled by --disable-op") == 0 &&
                  strcmp(str(r, "op"), "conv2d") == 0,
              "census: %s", cj ? cJSON_PrintUnformatted(cj) : "null");
    cJSON_Delete(cj);
    dg_engine_close(e);
}

int main(void)
{
    make_fakedev();
    size_t live0, live1;
    dg_ctx *ctx = dg_ctx_new();
    dg_host_mem_stats(&live0, NULL);
    test_parse();
    test_registry();
    test_open_cpu();
    test_gemm_fallback(ctx);
    test_relu_fallback(ctx);
    test_rmw_fallback(ctx);
    test_shape_aware(ctx);
    dg_host_mem_stats(&live1, NULL);
    CHECK_MSG(live1 == live0, "host bytes live %zu at start, %zu at end", live0, live1);
    dg_ctx_free(ctx);
    CHECK_DONE();
}
