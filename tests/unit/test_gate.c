/* The device gate: the cpu backend passes; a backend that corrupts one element
 * of the product, or fails a copy, fails the gate with that reason. */
#include "check.h"
#include "steps/steps.h"

static const dg_backend_iface *real;
static dg_backend_iface broken;

static dg_status corrupt_gemm(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha,
                              dg_ref a, int lda, dg_ref b, int ldb, float beta, dg_ref c, int ldc)
{
    dg_status st = real->gemm(ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    /* One element, last row, first column, off by a tenth of a unit. */
    size_t at = c.off + (size_t)(m - 1) * ldc * sizeof(float);
    float v;
    real->download(ctx, c.buf, at, &v, sizeof v);
    v += 0.1f;
    real->upload(ctx, c.buf, at, &v, sizeof v);
    return st;
}

static dg_status refuse_download(void *ctx, const void *buf, size_t off, void *dst, size_t bytes)
{
    return DG_ERR_BACKEND;
}

static cJSON *gate_with(dg_ctx *ctx, const dg_backend_iface *iface, int m, int n, int k)
{
    dg_matmul_check chk = {.m = m, .n = n, .k = k, .seed = 3, .warm_reps = 2};
    return dg_gate_backend(ctx, "cpu", iface, &chk);
}

static bool matmul_ok(const cJSON *b)
{
    return cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "matmul"), "ok"));
}

static const char *matmul_reason(const cJSON *b)
{
    const char *s =
        cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "matmul"), "reason"));
    return s ? s : "";
}

int main(void)
{
    dg_ctx *ctx = dg_ctx_new();
    real = dg_backend_cpu_iface();

    cJSON *b = gate_with(ctx, NULL, 64, 48, 200);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(b, "available")));
    CHECK_MSG(matmul_ok(b), "%s", matmul_reason(b));
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(b, "devices")) == 1);
    cJSON_Delete(b);

    /* Odd sizes and k = 1. */
    b = gate_with(ctx, NULL, 7, 1, 1);
    CHECK(matmul_ok(b));
    cJSON_Delete(b);

    broken = *real;
    broken.gemm = corrupt_gemm;
    b = gate_with(ctx, &broken, 64, 48, 200);
    CHECK(!matmul_ok(b));
    CHECK(strstr(matmul_reason(b), "1 of 3072 elements outside tolerance") != NULL);
    CHECK(strstr(matmul_reason(b), "[63,0]") != NULL);
    cJSON_Delete(b);

    broken = *real;
    broken.download = refuse_download;
    b = gate_with(ctx, &broken, 16, 16, 16);
    CHECK(!matmul_ok(b));
    CHECK(strncmp(matmul_reason(b), "download failed", 15) == 0);
    cJSON_Delete(b);

    /* Whole gate: usage errors and the record's shape. */
    char *json = NULL;
    dg_gate_verdict v;
    dg_gate_opts o = {.backends = "cpu,nosuch"};
    CHECK(dg_gate_run(ctx, &o, &json, &v) == DG_ERR_USAGE);
    CHECK(strstr(dg_errmsg(ctx), "nosuch") != NULL);
    o = (dg_gate_opts){.backends = "cpu", .m = 0, .n = 20000};
    CHECK(dg_gate_run(ctx, &o, &json, &v) == DG_ERR_USAGE);
    o = (dg_gate_opts){.backends = "cpu", .m = 32, .n = 32, .k = 32};
    CHECK(dg_gate_run(ctx, &o, &json, &v) == DG_OK && v == DG_GATE_PASS);
    cJSON *rec = cJSON_Parse(json);
    const cJSON *mm =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(rec, "backends"), 0), "matmul");
    CHECK(cJSON_GetObjectItem(mm, "gflops")->valuedouble > 0);
    CHECK(cJSON_GetObjectItem(mm, "ms_warm")->valuedouble > 0);
    CHECK(cJSON_GetObjectItem(mm, "max_abs_err")->valuedouble < 1e-4);
    cJSON_Delete(rec);
    dg_string_free(json);
    dg_ctx_free(ctx);
    CHECK_DONE();
}
