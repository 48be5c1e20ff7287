/* Per-op profiling in the engine (dg_engine_set_profiling, dg_engine_ops_json,
 * dg_engine_trace_json) and the Chrome trace writer: calls counted only while
 * on, shares summing to 1, one trace event per profiled call, fallback rows
 * flagged; over cpu, a fake device without relu, and opencl when present. */
#include "check.h"
#include "engine/engine.h"
#include "measure/measure.h"

#include <unistd.h>

/* ---- helpers ---- */

static dg_ref put(dg_ctx *ctx, dg_engine *e, dg_block **blk, const float *src, size_t count)
{
    CHECK(dg_alloc(ctx, e->alloc, count * sizeof(float), blk) == DG_OK);
    CHECK(e->be->upload(e->bctx, (*blk)->buf, 0, src, count * sizeof(float)) == DG_OK);
    return (dg_ref){(*blk)->buf, 0};
}

static void get(dg_engine *e, dg_ref r, float *dst, size_t count)
{
    CHECK(e->be->synchronize(e->bctx) == DG_OK);
    CHECK(e->be->download(e->bctx, r.buf, r.off, dst, count * sizeof(float)) == DG_OK);
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

/* The row for op (and fallback flag), NULL when absent. */
static const cJSON *row(const cJSON *ops, const char *op, bool fallback)
{
    const cJSON *r;
    cJSON_ArrayForEach(r, ops)
    {
        if (strcmp(str(r, "op"), op) == 0 &&
            cJSON_IsTrue(cJSON_GetObjectItem(r, "fallback")) == fallback)
            return r;
    }
    return NULL;
}

/* Sum of calls and shares over the table; checks every row's own invariants. */
static void table_sums(const cJSON *ops, const char *backend, double *calls, double *shares)
{
    *calls = *shares = 0;
    const cJSON *r;
    double prev = 1e300;
    cJSON_ArrayForEach(r, ops)
    {
        double c = num(r, "calls"), ms = num(r, "ms_total");
        CHECK(c >= 1);
        CHECK(ms >= 0);
        CHECK(ms <= prev); /* sorted by ms_total */
        prev = ms;
        CHECK(fabs(num(r, "ms_mean") - ms / c) <= 1e-9 * (1 + ms));
        CHECK(num(r, "share") >= 0 && num(r, "share") <= 1);
        CHECK_STR(str(r, "backend"), backend);
        CHECK(cJSON_IsBool(cJSON_GetObjectItem(r, "fallback")));
        CHECK(str(r, "shape")[0] != '\0');
        *calls += c;
        *shares += num(r, "share");
    }
}

/* Checks the trace events: complete events with integer pid/tid and
 * non-negative times; returns how many name op. */
static int trace_check(const cJSON *tr, const char *op)
{
    int n = 0;
    const cJSON *ev;
    double last_ts = -1;
    cJSON_ArrayForEach(ev, tr)
    {
        CHECK_STR(str(ev, "ph"), "X");
        CHECK(num(ev, "ts") >= 0 && num(ev, "dur") >= 0);
        CHECK(num(ev, "ts") >= last_ts); /* in call order */
        last_ts = num(ev, "ts");
        double pid = num(ev, "pid"), tid = num(ev, "tid");
        CHECK(pid >= 0 && pid == (int)pid && tid >= 0 && tid == (int)tid);
        CHECK(cJSON_IsObject(cJSON_GetObjectItem(ev, "args")));
        if (strcmp(str(ev, "name"), op) == 0)
            n++;
    }
    return n;
}

/* ---- the fake device: the cpu backend renamed, without relu ---- */

static dg_backend_iface fakedev;

static bool fake_supports(void *ctx, const dg_op_desc *d)
{
    return d->op != DG_OP_RELU;
}

/* ---- tests ---- */

/* Profiling on the cpu engine: off by default, counted only while on. */
static void test_cpu(dg_ctx *ctx)
{
    dg_engine *e = NULL;
    CHECK(dg_engine_open(ctx, "cpu", &(dg_engine_opts){.threads = 1}, &e) == DG_OK);
    if (!e)
        return;
    cJSON *ops = dg_engine_ops_json(e), *tr = dg_engine_trace_json(e);
    CHECK(cJSON_IsArray(ops) && cJSON_GetArraySize(ops) == 0); /* never on */
    CHECK(cJSON_IsArray(tr) && cJSON_GetArraySize(tr) == 0);
    cJSON_Delete(ops);
    cJSON_Delete(tr);

    float x[64], y[64], a[16 * 16], b[16 * 16];
    for (int i = 0; i < 64; i++)
        x[i] = (float)(i - 32);
    for (int i = 0; i < 256; i++)
        a[i] = b[i] = (float)(i % 7) - 3.0f;
    dg_block *bx, *by, *ba, *bb, *bc;
    dg_ref rx = put(ctx, e, &bx, x, 64), ry = put(ctx, e, &by, x, 64);
    dg_ref ra = put(ctx, e, &ba, a, 256), rb = put(ctx, e, &bb, b, 256);
    dg_ref rc = put(ctx, e, &bc, a, 256);

    CHECK(dg_op_relu_fwd(ctx, e, rx, ry, 64) == DG_OK); /* off: not counted */
    dg_engine_set_profiling(e, true);
    for (int i = 0; i < 3; i++)
        CHECK(dg_op_relu_fwd(ctx, e, rx, ry, 64) == DG_OK);
    for (int i = 0; i < 2; i++)
        CHECK(dg_op_gemm(ctx, e, false, false, 16, 16, 16, 1.0f, ra, 16, rb, 16, 0.0f, rc, 16) ==
              DG_OK);
    CHECK(dg_op_fill(ctx, e, rc, 256, 0.5f) == DG_OK);
    /* A failing call is passed through and not counted. */
    CHECK(dg_op_relu_fwd(ctx, NULL, rx, ry, 64) == DG_ERR_USAGE);
    dg_engine_set_profiling(e, false);
    CHECK(dg_op_relu_fwd(ctx, e, rx, ry, 64) == DG_OK); /* off again */
    CHECK(dg_op_fill(ctx, e, rc, 256, 0.5f) == DG_OK);

    get(e, ry, y, 64); /* profiled ops still compute */
    CHECK(y[0] == 0.0f && y[63] == 31.0f);

    ops = dg_engine_ops_json(e);
    tr = dg_engine_trace_json(e);
    double calls, shares;
    table_sums(ops, "cpu", &calls, &shares);
    CHECK_MSG(calls == 6, "calls %g", calls);
    CHECK_MSG(fabs(shares - 1) < 1e-9, "shares %g", shares);
    const cJSON *relu = row(ops, "relu_fwd", false), *gemm = row(ops, "gemm", false);
    CHECK(relu && num(relu, "calls") == 3);
    CHECK(relu && strcmp(str(relu, "shape"), "relu 64") == 0);
    CHECK(gemm && num(gemm, "calls") == 2);
    CHECK(gemm && strcmp(str(gemm, "shape"), "gemm 16x16x16 ta=0 tb=0") == 0);
    CHECK(row(ops, "fill", false) && num(row(ops, "fill", false), "calls") == 1);
    CHECK(cJSON_GetArraySize(tr) == 6);
    CHECK(trace_check(tr, "relu_fwd") == 3);
    CHECK(trace_check(tr, "gemm") == 2);
    cJSON_Delete(ops);
    cJSON_Delete(tr);

    /* On again: accumulates onto the same table and trace. */
    dg_engine_set_profiling(e, true);
    CHECK(dg_op_relu_bwd(ctx, e, ry, rx, rx, 64) == DG_OK);
    dg_engine_set_profiling(e, false);
    ops = dg_engine_ops_json(e);
    tr = dg_engine_trace_json(e);
    table_sums(ops, "cpu", &calls, &shares);
    CHECK(calls == 7 && fabs(shares - 1) < 1e-9);
    CHECK(row(ops, "relu_bwd", false) != NULL);
    CHECK(cJSON_GetArraySize(tr) == 7);
    cJSON_Delete(ops);
    cJSON_Delete(tr);

    dg_release(e->alloc, bx);
    dg_release(e->alloc, by);
    dg_release(e->alloc, ba);
    dg_release(e->alloc, bb);
    dg_release(e->alloc, bc);
    dg_engine_close(e);
}

/* A device without relu: relu falls back (flagged, with its copies), gemm not. */
static void test_fallback(dg_ctx *ctx)
{
    fakedev = *dg_backend_cpu_iface();
    fakedev.name = "fakedev";
    fakedev.caps.host = false; /* a device, not the baseline */
    fakedev.supports_op = fake_supports;
    dg_engine *e = NULL;
    CHECK(dg_engine_open_iface(ctx, &fakedev, NULL, &e) == DG_OK);
    if (!e)
        return;
    float x[32], y[32];
    for (int i = 0; i < 32; i++)
        x[i] = (float)i - 16.0f;
    dg_block *bx, *by;
    dg_ref rx = put(ctx, e, &bx, x, 32), ry = put(ctx, e, &by, x, 32);
    dg_engine_set_profiling(e, true);
    CHECK(dg_op_relu_fwd(ctx, e, rx, ry, 32) == DG_OK);
    CHECK(dg_op_relu_fwd(ctx, e, rx, ry, 32) == DG_OK);
    CHECK(dg_op_fill(ctx, e, rx, 32, 1.0f) == DG_OK);
    dg_engine_set_profiling(e, false);
    get(e, ry, y, 32);
    CHECK(y[0] == 0.0f && y[31] == 15.0f);

    cJSON *ops = dg_engine_ops_json(e), *tr = dg_engine_trace_json(e);
    double calls, shares;
    table_sums(ops, "fakedev", &calls, &shares);
    CHECK(calls == 3 && fabs(shares - 1) < 1e-9);
    const cJSON *relu = row(ops, "relu_fwd", true);
    CHECK(relu && num(relu, "calls") == 2);
    CHECK(relu && num(relu, "bytes_d2h") == 2 * 32 * 4 && num(relu, "bytes_h2d") == 2 * 32 * 4);
    CHECK(row(ops, "relu_fwd", false) == NULL);
    CHECK(row(ops, "fill", false) != NULL && row(ops, "fill", true) == NULL);
    CHECK(cJSON_GetArraySize(tr) == 3);
    int fb_events = 0;
    const cJSON *ev;
    cJSON_ArrayForEach(ev, tr)
    {
        if (strcmp(str(ev, "cat"), "op,fallback") == 0)
            fb_events++;
    }
    CHECK(fb_events == 2);
    cJSON_Delete(ops);
    cJSON_Delete(tr);
    /* The census saw the same fallbacks. */
    cJSON *census = dg_engine_census_json(e);
    CHECK(cJSON_GetArraySize(census) == 1 && num(cJSON_GetArrayItem(census, 0), "calls") == 2);
    cJSON_Delete(census);
    dg_release(e->alloc, bx);
    dg_release(e->alloc, by);
    dg_engine_close(e);
}

/* OpenCL with conv2d disabled: conv2d rows are fallback rows, gemm native. */
static void test_opencl(dg_ctx *ctx)
{
    dg_engine *e = NULL;
    dg_status st = dg_engine_open(
        ctx, "opencl",
        &(dg_engine_opts){.disabled_calls = (1u << DG_CALL_CONV2D_FWD) | (1u << DG_CALL_CONV2D_BWD),
                          .threads = 1},
        &e);
    if (st != DG_OK) {
        printf("opencl not tested: %s\n", dg_errmsg(ctx));
        return;
    }
    dg_conv_shape s = {.n = 2,
                       .c = 1,
                       .h = 6,
                       .w = 6,
                       .k = 2,
                       .kh = 3,
                       .kw = 3,
                       .stride = 1,
                       .pad = 1,
                       .ho = 6,
                       .wo = 6};
    float x[72], w[18], bias[2], y[144], a[64], yinit[144] = {0};
    for (int i = 0; i < 72; i++)
        x[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < 18; i++)
        w[i] = (float)(i % 3) - 1.0f;
    bias[0] = 0.5f;
    bias[1] = -0.5f;
    for (int i = 0; i < 64; i++)
        a[i] = 1.0f;
    dg_block *bx, *bw, *bb, *by, *ba, *bc, *bwk = NULL;
    dg_ref rx = put(ctx, e, &bx, x, 72), rw = put(ctx, e, &bw, w, 18);
    dg_ref rb = put(ctx, e, &bb, bias, 2), ry = put(ctx, e, &by, yinit, 144);
    dg_ref ra = put(ctx, e, &ba, a, 64), rc = put(ctx, e, &bc, a, 64);
    size_t wsb = dg_op_conv2d_workspace(e, &s);
    dg_ref rwk = {NULL, 0};
    if (wsb) {
        CHECK(dg_alloc(ctx, e->alloc, wsb, &bwk) == DG_OK);
        rwk = (dg_ref){bwk->buf, 0};
    }
    dg_engine_set_profiling(e, true);
    st = dg_op_conv2d_fwd(ctx, e, &s, rx, rw, rb, ry, rwk);
    CHECK_MSG(st == DG_OK, "%s", dg_errmsg(ctx));
    CHECK(dg_op_gemm(ctx, e, false, false, 8, 8, 8, 1.0f, ra, 8, ra, 8, 0.0f, rc, 8) == DG_OK);
    CHECK(dg_op_gemm(ctx, e, false, false, 8, 8, 8, 1.0f, ra, 8, ra, 8, 0.0f, rc, 8) == DG_OK);
    dg_engine_set_profiling(e, false);
    get(e, ry, y, 144);
    float c[64];
    get(e, rc, c, 64);
    CHECK(c[0] == 8.0f && c[63] == 8.0f);
    CHECK(isfinite(y[0]) && isfinite(y[143]));

    cJSON *ops = dg_engine_ops_json(e), *tr = dg_engine_trace_json(e);
    double calls, shares;
    table_sums(ops, "opencl", &calls, &shares);
    CHECK(calls == 3 && fabs(shares - 1) < 1e-9);
    CHECK(row(ops, "conv2d_fwd", true) != NULL && row(ops, "conv2d_fwd", false) == NULL);
    CHECK(row(ops, "gemm", false) != NULL && num(row(ops, "gemm", false), "calls") == 2);
    CHECK(cJSON_GetArraySize(tr) == 3 && trace_check(tr, "conv2d_fwd") == 1);
    cJSON_Delete(ops);
    cJSON_Delete(tr);
    dg_release(e->alloc, bx);
    dg_release(e->alloc, bw);
    dg_release(e->alloc, bb);
    dg_release(e->alloc, by);
    dg_release(e->alloc, ba);
    dg_release(e->alloc, bc);
    dg_release(e->alloc, bwk);
    dg_engine_close(e);
}

int main(void)
{
    dg_ctx *ctx = dg_ctx_new();
    test_cpu(ctx);
    test_fallback(ctx);
    test_opencl(ctx);
    dg_ctx_free(ctx);
    CHECK_DONE();
}
