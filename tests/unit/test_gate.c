/* The device gate: the cpu backend passes; a backend that corrupts one element
 * of the product, or fails a copy, fails the gate with that reason. With a
 * math mode the bound widens by exactly the input rounding: a product of
 * inputs rounded to bf16 passes the bf16 bound and fails the fp32 one, and
 * inputs rounded coarser than bf16 fail the bf16 bound too. */
#include "check.h"
#include "steps/steps.h"

#include <float.h>
#include <math.h>
#include <time.h>

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

/* A host "device" with math modes: mode 2 rounds A and B to `bits`
 * significant bits (8: bf16, round to nearest even) before the real product. */
static int fake_mode, fake_bits = 8, fake_modes_seen;

static dg_status fake_set_math(void *ctx, int mode)
{
    fake_mode = mode;
    fake_modes_seen |= 1 << mode;
    return DG_OK;
}

static float round_bits(float x, int bits)
{
    int e;
    double f = frexp((double)x, &e); /* x = f 2^e, 0.5 <= |f| < 1 */
    return (float)ldexp(nearbyint(ldexp(f, bits)), e - bits);
}

static dg_status rounded_copy(void *ctx, dg_ref src, size_t n, void **out)
{
    float *h = malloc(n * sizeof *h);
    dg_status st = h ? real->buf_alloc(ctx, n * sizeof *h, out) : DG_ERR_NOMEM;
    if (st == DG_OK)
        st = real->download(ctx, src.buf, src.off, h, n * sizeof *h);
    for (size_t i = 0; st == DG_OK && i < n; i++)
        h[i] = round_bits(h[i], fake_bits);
    if (st == DG_OK)
        st = real->upload(ctx, *out, 0, h, n * sizeof *h);
    free(h);
    return st;
}

static dg_status rounding_gemm(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha,
                               dg_ref a, int lda, dg_ref b, int ldb, float beta, dg_ref c, int ldc)
{
    if (fake_mode != 2)
        return real->gemm(ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    void *ra = NULL, *rb = NULL; /* the gate's operands are dense, untransposed */
    dg_status st = rounded_copy(ctx, a, (size_t)m * k, &ra);
    if (st == DG_OK)
        st = rounded_copy(ctx, b, (size_t)k * n, &rb);
    if (st == DG_OK)
        st = real->gemm(ctx, ta, tb, m, n, k, alpha, (dg_ref){ra, 0}, lda, (dg_ref){rb, 0}, ldb,
                        beta, c, ldc);
    real->buf_free(ctx, ra);
    real->buf_free(ctx, rb);
    return st;
}

static cJSON *gate_math(dg_ctx *ctx, const dg_backend_iface *iface, dg_math math)
{
    dg_matmul_check chk = {.m = 48, .n = 40, .k = 300, .seed = 5, .warm_reps = 1, .math = math};
    return dg_gate_backend(ctx, "cpu", iface, &chk);
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

/* Counts the products; each one sleeps slow_us first when set. */
static int gemm_calls, slow_us;

static dg_status counting_gemm(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha,
                               dg_ref a, int lda, dg_ref b, int ldb, float beta, dg_ref c, int ldc)
{
    gemm_calls++;
    if (slow_us > 0) {
        struct timespec ts = {0, slow_us * 1000L};
        nanosleep(&ts, NULL);
    }
    return real->gemm(ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static double mm_num(const cJSON *b, const char *key)
{
    const cJSON *x = cJSON_GetObjectItem(cJSON_GetObjectItem(b, "matmul"), key);
    return cJSON_IsNumber(x) ? x->valuedouble : -1;
}

/* The cpu's rate product's calls (its warm-up ones, the cold one among them, and its timed
 * ones), 0 when none ran. */
static int rate_calls(const cJSON *b)
{
    const cJSON *r = cJSON_GetObjectItem(cJSON_GetObjectItem(b, "matmul"), "rate");
    const cJSON *n = cJSON_GetObjectItem(r, "warm_reps"),
                *w = cJSON_GetObjectItem(r, "warmup_products");
    return cJSON_IsNumber(n) && cJSON_IsNumber(w) ? n->valueint + w->valueint : 0;
}

/* The warm-up's seconds of the checked product (-1 when absent). */
static double warmup_s(const cJSON *b)
{
    const cJSON *w = cJSON_GetObjectItem(cJSON_GetObjectItem(b, "matmul"), "warmup");
    return cJSON_IsTrue(cJSON_GetObjectItem(w, "valid"))
               ? cJSON_GetNumberValue(cJSON_GetObjectItem(w, "value"))
               : -1;
}

/* The warm timing (issue 21 item 9): a product too short to time is
 * repeated in rounds of at least 10 ms, at least 50 ms in all, after at least
 * 0.1 s of untimed ones; every product counted (the cold one, the one that
 * sets the round, the warm-up's; the cpu's rate product adds its own). */
static void check_rounds(dg_ctx *ctx)
{
    broken = *real;
    broken.gemm = counting_gemm;
    gemm_calls = slow_us = 0;
    cJSON *b = gate_with(ctx, &broken, 8, 8, 8); /* microseconds a product */
    double rounds = mm_num(b, "rounds"), per = mm_num(b, "round_products");
    CHECK_MSG(matmul_ok(b), "%s", matmul_reason(b));
    CHECK_MSG(per > 1 && rounds >= 2 && rounds <= 64, "rounds %g of %g products", rounds, per);
    CHECK_MSG(mm_num(b, "warm_reps") == rounds * per &&
                  gemm_calls == 2 + mm_num(b, "warmup_products") + rounds * per + rate_calls(b),
              "%g warm products, %g warm-up, %d calls, %g x %g", mm_num(b, "warm_reps"),
              mm_num(b, "warmup_products"), gemm_calls, rounds, per);
    CHECK_MSG(warmup_s(b) >= 0.1 && mm_num(b, "warmup_products") >= per,
              "warm-up %g s, %g products", warmup_s(b), mm_num(b, "warmup_products"));
    const cJSON *sp = cJSON_GetObjectItem(cJSON_GetObjectItem(b, "matmul"), "round_spread");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(sp, "valid")));
    cJSON_Delete(b);
    /* A product longer than a round: one a round, rounds until 50 ms. */
    gemm_calls = 0;
    slow_us = 12000;
    b = gate_with(ctx, &broken, 8, 8, 8);
    rounds = mm_num(b, "rounds");
    /* A 12 ms sleep can take twice that on a loaded machine: the rounds
     * then number fewer, but they still reach the 50 ms (the quick tier
     * read 2 rounds at load 20 where a quiet machine gives 4 or 5). */
    double ms = mm_num(b, "ms_warm");
    CHECK_MSG(mm_num(b, "round_products") == 1 && rounds >= 2 && rounds <= 5 &&
                  ms * (rounds + 1) >= 50,
              "%g rounds of %g products, %g ms each", rounds, mm_num(b, "round_products"), ms);
    CHECK_MSG(gemm_calls == 2 + mm_num(b, "warmup_products") + rounds + rate_calls(b),
              "%d calls, %g warm-up, %g rounds", gemm_calls, mm_num(b, "warmup_products"), rounds);
    CHECK(mm_num(b, "ms_warm") >= 12);
    slow_us = 0;
    cJSON_Delete(b);
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

    check_rounds(ctx);

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

    /* The bf16 bound: 2u + u^2 + 2 k eps32 (1 + u)^2, u = 2^-8; fp32's is 2 k eps32. */
    CHECK(fabs(dg_gate_tol_unit(300, DG_MATH_FP32) - 600.0 * FLT_EPSILON) < 1e-15);
    double u = 1.0 / 256;
    CHECK(fabs(dg_gate_tol_unit(300, DG_MATH_BF16) -
               (2 * u + u * u + 600.0 * FLT_EPSILON * (1 + u) * (1 + u))) < 1e-15);
    broken = *real;
    broken.gemm = rounding_gemm;
    broken.set_math = fake_set_math;
    fake_mode = 0;
    b = gate_math(ctx, &broken, DG_MATH_BF16); /* set_math(2): bf16 inputs, bf16 bound */
    /* bf16 for the product, then back to fp32 (the level 2 op checks are fp32's). */
    CHECK_MSG(matmul_ok(b) && fake_modes_seen == (1 << 2 | 1 << 0) && fake_mode == 0, "%s",
              matmul_reason(b));
    CHECK(
        strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "matmul"), "math")),
               "bf16") == 0);
    cJSON_Delete(b);
    fake_mode = 2; /* rounded inputs judged by the fp32 bound: caught */
    b = gate_math(ctx, &broken, DG_MATH_FP32);
    CHECK_MSG(!matmul_ok(b), "bf16-rounded inputs passed the fp32 bound");
    cJSON_Delete(b);
    fake_bits = 4; /* 4 significant bits: outside the bf16 bound */
    b = gate_math(ctx, &broken, DG_MATH_BF16);
    CHECK_MSG(!matmul_ok(b), "inputs rounded to 4 bits passed the bf16 bound");
    CHECK(strstr(matmul_reason(b), "outside tolerance") != NULL);
    cJSON_Delete(b);
    fake_bits = 8;
    b = gate_math(ctx, NULL, DG_MATH_BF16); /* the cpu has no math modes: checked in fp32 */
    CHECK(matmul_ok(b));
    CHECK(
        strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "matmul"), "math")),
               "fp32") == 0);
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

    /* first_device (accept's gate): the device backends in route order until
     * one passes; those after it are reported built and available but their
     * product is not checked. Here (no GPU) cuda is not there and opencl is
     * checked; on the H200 cuda passes and opencl is not checked. */
    o = (dg_gate_opts){.m = 64, .n = 64, .k = 64, .first_device = true};
    CHECK(dg_gate_run(ctx, &o, &json, &v) == DG_OK);
    CHECK_MSG(v == DG_GATE_PASS, "first_device: verdict %d", (int)v);
    rec = cJSON_Parse(json);
    dg_string_free(json);
    const cJSON *arr = cJSON_GetObjectItem(rec, "backends");
    CHECK(cJSON_GetArraySize(arr) == 3 &&
          strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(arr, 0), "name")),
                 "cpu") == 0);
    const char *passed = NULL;
    for (int r = 0; dg_device_preference[r]; r++) {
        const cJSON *e = NULL, *it;
        cJSON_ArrayForEach(it, arr)
        {
            if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(it, "name")),
                       dg_device_preference[r]) == 0)
                e = it;
        }
        if (!e || dg_jbool(e, "available") != 1)
            continue;
        const cJSON *ok = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "matmul"), "ok");
        if (!passed) { /* checked: the route's first device that works */
            CHECK_MSG(cJSON_IsBool(ok), "%s not checked before any device passed",
                      dg_device_preference[r]);
            if (cJSON_IsTrue(ok))
                passed = dg_device_preference[r];
        } else {
            char want[96];
            snprintf(want, sizeof want, "not checked: %s passed first", passed);
            CHECK_MSG(cJSON_IsNull(ok) && dg_jstr(e, "matmul.reason") &&
                          strcmp(dg_jstr(e, "matmul.reason"), want) == 0 &&
                          !cJSON_GetObjectItem(cJSON_GetObjectItem(e, "matmul"), "gflops"),
                      "%s checked after %s passed", dg_device_preference[r], passed);
        }
        printf("first_device: %s %s\n", dg_device_preference[r],
               passed == dg_device_preference[r] ? "checked, passed"
               : passed                          ? "not checked"
                                                 : "checked");
    }
    cJSON_Delete(rec);
    dg_ctx_free(ctx);
    CHECK_DONE();
}
