/* Core: counter-based rng, counted allocation, metric JSON, helpers. */
#include "check.h"
#include "core/core.h"
#include "core/json.h"

#include <string.h>

static void test_rng(void)
{
    dg_rng a, b;
    uint32_t x[4], y[4];
    dg_rng_init(&a, 42, 7);
    dg_rng_init(&b, 42, 7);
    dg_rng_next4(&a, x);
    dg_rng_next4(&b, y);
    CHECK(memcmp(x, y, sizeof x) == 0);
    /* Philox-4x32-10 known-answer vector (Random123 kat_vectors: counter 0, key 0). */
    dg_rng z = {.seed = 0, .stream = 0, .counter = 0};
    dg_rng_next4(&z, x);
    CHECK_MSG(x[0] == 0x6627e8d5u && x[1] == 0xe169c58du && x[2] == 0xbc57ac4cu &&
                  x[3] == 0x9b00dbd8u,
              "philox(0,0) = %08x %08x %08x %08x", x[0], x[1], x[2], x[3]);
    /* Another stream or seed gives other numbers. */
    dg_rng_init(&b, 42, 8);
    dg_rng_next4(&b, y);
    dg_rng_init(&a, 42, 7);
    dg_rng_next4(&a, x);
    CHECK(memcmp(x, y, sizeof x) != 0);
    /* Uniform stays in range and is not constant. */
    float v[1000];
    dg_rng_init(&a, 1, 1);
    dg_rng_uniform(&a, v, 1000, -1.0f, 1.0f);
    float lo = 1, hi = -1;
    double sum = 0;
    for (int i = 0; i < 1000; i++) {
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
        sum += v[i];
    }
    CHECK(lo >= -1.0f && hi < 1.0f && hi - lo > 1.9f);
    CHECK(fabs(sum / 1000) < 0.1);
}

static void test_alloc(void)
{
    size_t live0, peak0, live1, peak1;
    dg_host_mem_stats(&live0, &peak0);
    char *p = dg_malloc(1 << 20);
    dg_host_mem_stats(&live1, &peak1);
    CHECK(live1 == live0 + (1 << 20));
    CHECK(peak1 >= live1);
    p = dg_realloc(p, 2 << 20);
    dg_host_mem_stats(&live1, NULL);
    CHECK(live1 == live0 + (2 << 20));
    dg_free(p);
    dg_host_mem_stats(&live1, NULL);
    CHECK(live1 == live0);
    CHECK(dg_calloc(SIZE_MAX / 2, 4) == NULL);
    CHECK(dg_malloc(SIZE_MAX) == NULL);
}

static void test_json(void)
{
    cJSON *m = dg_json_metric(0, false, "bytes");
    char *s = dg_json_print(m);
    CHECK_STR(s, "{\"value\":null,\"unit\":\"bytes\",\"valid\":false}");
    dg_string_free(s);
    cJSON_Delete(m);
    m = dg_json_metric(1024, true, "bytes");
    s = dg_json_print(m);
    CHECK_STR(s, "{\"value\":1024,\"unit\":\"bytes\",\"valid\":true}");
    dg_string_free(s);
    cJSON_Delete(m);
    /* dg_jint: whole numbers in int's range, else the fallback (no cast of NaN or 1e300) */
    cJSON *o = cJSON_Parse("{\"a\":7,\"b\":1e300,\"c\":-3,\"d\":2.5,\"e\":null,"
                           "\"f\":{\"value\":12,\"unit\":\"steps\",\"valid\":true}}");
    CHECK(dg_jint(o, "a", -1) == 7);
    CHECK(dg_jint(o, "b", -1) == -1);
    CHECK(dg_jint(o, "c", 0) == -3);
    CHECK(dg_jint(o, "d", -1) == -1);
    CHECK(dg_jint(o, "e", -1) == -1);
    CHECK(dg_jint(o, "missing", 5) == 5);
    CHECK(dg_jint(o, "f", -1) == 12);
    CHECK(dg_jint(NULL, "a", 9) == 9);
    cJSON_Delete(o);
}

static void test_helpers(void)
{
    char buf[8];
    dg_copy_clean(buf, sizeof buf, "a\x1b[31mbcdefgh");
    CHECK_STR(buf, "a?[31mb");
    char t[] = "  x y \n";
    CHECK_STR(dg_trim(t), "x y");
    dg_ctx *ctx = dg_ctx_new();
    CHECK(dg_fail(ctx, DG_ERR_IO, "reading %s", "f") == DG_ERR_IO);
    CHECK_STR(dg_errmsg(ctx), "reading f");
    CHECK_STR(dg_status_name(DG_ERR_DEVICE_OOM), "device-oom");
    dg_ctx_free(ctx);
    dg_ctx_free(NULL);
    CHECK(dg_read_file("/nonexistent/devgate", 100, NULL) == NULL);
    size_t n;
    char *s = dg_read_file("/proc/self/status", 64, &n);
    CHECK(s && n == 64 && strlen(s) == 64);
    dg_free(s);
}

/* Credentials in another process's command line are masked, nothing else. */
static void test_redact(void)
{
    char a[] = "psql postgresql://alice:s3cret@db:5432/team --echo";
    CHECK(dg_redact_secrets(a) == 1);
    CHECK_STR(a, "psql postgresql://alice:***@db:5432/team --echo");
    char b[] = "x 'host=db password=hunter2 user=u' PGPASSWORD=pw --password=p a://u:@h";
    CHECK(dg_redact_secrets(b) == 3);
    CHECK_STR(b, "x 'host=db password=*** user=u' PGPASSWORD=** --password=* a://u:@h");
    char c[] = "ssh user@host -p 22 https://example.org/a:b@c mypassword=x";
    CHECK(dg_redact_secrets(c) == 0);
    CHECK_STR(c, "ssh user@host -p 22 https://example.org/a:b@c mypassword=x");
    CHECK(dg_redact_secrets(NULL) == 0);
    char d[] = "python3 serve.py --token sk-proj-abcdefghijklmnop1234 --api-key=k3y "
               "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI HF_TOKEN=hf_x --epochs 3";
    CHECK(dg_redact_secrets(d) == 4);
    CHECK_STR(d, "python3 serve.py --token *** --api-key=*** AWS_SECRET_ACCESS_KEY=*** "
                 "HF_TOKEN=*** --epochs 3");
    char e[] = "curl -H x ghp_0123456789abcdefghij AKIAIOSFODNN7EXAMPLE --password hunter2 --token";
    CHECK(dg_redact_secrets(e) == 3);
    CHECK_STR(e, "curl -H x *** *** --password *** --token");
    char f[] = "train.py --tokenizer bpe --keys 3 PATH=/usr/bin sk-short";
    CHECK(dg_redact_secrets(f) == 0);
    CHECK_STR(f, "train.py --tokenizer bpe --keys 3 PATH=/usr/bin sk-short");
}

/* A host program's own cJSON allocator stays in place across devgate calls,
 * and a tree it parsed before the first call is freed by it afterwards. */
static size_t host_allocs;
static void *host_malloc(size_t n)
{
    host_allocs++;
    return malloc(n);
}

static void test_cjson_hooks_untouched(void)
{
    cJSON_Hooks h = {host_malloc, free};
    cJSON_InitHooks(&h);
    cJSON *before = cJSON_Parse("{\"a\":[1,2,3]}");
    CHECK(before != NULL);
    dg_ctx *ctx = dg_ctx_new();
    char *cat = NULL;
    CHECK(dg_rules_catalogue(ctx, &cat) == DG_OK && cat && cat[0] == '[');
    dg_string_free(cat);
    char text[64];
    CHECK(dg_text_clean(text, sizeof text, "a\x1b[2J\xc2\x9b\xe2\x80\xae\xff\nb", 13, false) == 10);
    CHECK_STR(text, "a?[2J??? b");
    dg_ctx_free(ctx);
    size_t n0 = host_allocs;
    cJSON *after = cJSON_Parse("[1]");
    CHECK(after != NULL && host_allocs > n0); /* still the host's allocator */
    cJSON_Delete(after);
    cJSON_Delete(before);
    cJSON_InitHooks(NULL);
}

/* dg_grow doubles an array as it fills; dg_grow_max stops at its cap, where
 * the census and the op profile fold further rows into "other"; dg_run_id
 * gives the stamp and the random part asked for. */
static void test_grow(void)
{
    int *v = NULL;
    size_t cap = 0;
    CHECK(dg_grow((void **)&v, &cap, 1, sizeof *v) && cap >= 1);
    CHECK(dg_grow((void **)&v, &cap, 100, sizeof *v) && cap >= 100);
    for (size_t i = 0; i < 100; i++)
        v[i] = (int)i; /* writable up to need */
    dg_free(v);
    v = NULL;
    cap = 0;
    size_t n = 0;
    while (dg_grow_max((void **)&v, &cap, n + 1, sizeof *v, 100))
        v[n++] = 1;
    CHECK_MSG(n == 100 && cap == 100, "stopped at %zu of cap %zu", n, cap);
    CHECK(!dg_grow_max((void **)&v, &cap, 101, sizeof *v, 100) && cap == 100);
    dg_free(v);
    char id[48];
    dg_run_id(id, sizeof id, 0, 12);
    CHECK_MSG(strlen(id) == 28 && strncmp(id, "19700101-000000-", 16) == 0, "id %s", id);
    for (int i = 16; i < 28; i++)
        CHECK(strchr("0123456789abcdef", id[i]) != NULL);
}

int main(void)
{
    test_rng();
    test_alloc();
    test_json();
    test_helpers();
    test_redact();
    test_cjson_hooks_untouched();
    test_grow();
    CHECK_DONE();
}
