/* Caching allocator: size classes, reuse, statistics, empty_cache, budget and
 * the free-the-cache-and-retry path, against the cpu backend and wrapped ones. */
#include "check.h"
#include "engine/engine.h"

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)

static void test_classes(void)
{
    CHECK(dg_alloc_class_size(1) == 512);
    CHECK(dg_alloc_class_size(512) == 512);
    CHECK(dg_alloc_class_size(513) == 1024);
    CHECK(dg_alloc_class_size(MiB - 1) == MiB);
    CHECK(dg_alloc_class_size(MiB) == MiB);
    CHECK(dg_alloc_class_size(MiB + 1) == MiB + 128 * KiB);
    CHECK(dg_alloc_class_size(4 * MiB) == 4 * MiB);
    CHECK(dg_alloc_class_size(4 * MiB + 1) == 4 * MiB + 512 * KiB);
    CHECK(dg_alloc_class_size(5 * MiB) == 5 * MiB);
    CHECK(dg_alloc_class_size(5 * MiB + 1) == 5 * MiB + 512 * KiB);
    CHECK(dg_alloc_class_size(8 * MiB - 1) == 8 * MiB);
    CHECK(dg_alloc_class_size(123456789) == 125829120);
    CHECK(dg_alloc_class_size(SIZE_MAX) == 0); /* no class can hold it */

    /* Every class between 4 and 8 MiB: 4.5, 5, ..., 8 MiB. */
    size_t expect = 4 * MiB, seen = 0;
    for (size_t b = 4 * MiB + 1; b <= 8 * MiB; b += 4096) {
        size_t c = dg_alloc_class_size(b);
        if (c != expect) {
            CHECK_MSG(c == expect + 512 * KiB, "class of %zu is %zu after %zu", b, c, expect);
            expect = c;
            seen++;
        }
    }
    CHECK_MSG(seen == 8 && expect == 8 * MiB, "%zu classes up to %zu", seen, expect);

    /* Monotone, >= request, bounded waste, idempotent, on a spread of sizes. */
    size_t prev = 0;
    int bad = 0;
    for (size_t b = 1; b < ((size_t)1 << 40); b += b / 7 + 1) {
        size_t c = dg_alloc_class_size(b);
        bool ok = c >= b && c >= prev && dg_alloc_class_size(c) == c;
        if (b <= MiB)
            ok = ok && c % 512 == 0 && c - b < 512;
        else
            ok = ok && (double)(c - b) <= 0.125 * (double)b;
        if (!ok && bad++ < 5)
            CHECK_MSG(ok, "class of %zu is %zu (previous %zu)", b, c, prev);
        prev = c;
    }
    CHECK(bad == 0);
}

static void test_reuse_and_stats(void)
{
    const dg_backend_iface *cpu = dg_backend_cpu_iface();
    void *bctx = NULL;
    char reason[256];
    CHECK(cpu->init(0, &bctx, reason, sizeof reason) == DG_OK);
    dg_ctx *ctx = dg_ctx_new();
    dg_allocator *a = dg_allocator_new(cpu, bctx, 0);
    CHECK(a != NULL);

    dg_block *b1, *b2, *b3, *b4;
    CHECK(dg_alloc(ctx, a, 1000, &b1) == DG_OK);
    CHECK(b1->bytes == 1024 && b1->requested == 1000 && b1->buf != NULL);
    void *first = b1->buf;
    dg_release(a, b1);
    CHECK(dg_alloc(ctx, a, 700, &b1) == DG_OK); /* same class: from the cache */
    dg_alloc_stats s;
    dg_alloc_get_stats(a, &s);
    CHECK(b1->buf == first);
    CHECK(s.cache_hits == 1 && s.device_allocs == 1);
    CHECK(s.allocated == 1024 && s.requested == 700 && s.reserved == 1024);

    /* A sequence with exact statistics. */
    CHECK(dg_alloc(ctx, a, 3000, &b2) == DG_OK);        /* class 3072 */
    CHECK(dg_alloc(ctx, a, 2 * MiB + 1, &b3) == DG_OK); /* class 2.25 MiB */
    size_t c3 = 2 * MiB + 256 * KiB;
    CHECK(b3->bytes == c3);
    dg_release(a, b2);
    dg_alloc_get_stats(a, &s);
    CHECK_MSG(s.allocated == 1024 + c3, "allocated %zu", s.allocated);
    CHECK(s.requested == 700 + 2 * MiB + 1);
    CHECK(s.reserved == 1024 + 3072 + c3);
    CHECK(s.allocated_peak == 1024 + 3072 + c3);
    CHECK(s.reserved_peak == 1024 + 3072 + c3);
    CHECK(s.device_allocs == 3 && s.device_frees == 0 && s.cache_hits == 1 && s.oom_events == 0);
    CHECK(s.budget == 0);

    cJSON *j = dg_alloc_stats_json(&s);
    CHECK(j != NULL);
    cJSON *m = cJSON_GetObjectItem(j, "reserved");
    CHECK(m && cJSON_GetObjectItem(m, "value")->valuedouble == (double)s.reserved);
    CHECK(m && strcmp(cJSON_GetObjectItem(m, "unit")->valuestring, "bytes") == 0);
    m = cJSON_GetObjectItem(j, "cache_hits");
    CHECK(m && strcmp(cJSON_GetObjectItem(m, "unit")->valuestring, "count") == 0);
    CHECK(m && cJSON_GetObjectItem(m, "value")->valuedouble == 1.0);
    m = cJSON_GetObjectItem(j, "budget");
    CHECK(m && cJSON_IsNull(cJSON_GetObjectItem(m, "value")) &&
          cJSON_IsFalse(cJSON_GetObjectItem(m, "valid")));
    const char *keys[] = {"allocated",     "allocated_peak", "requested",    "reserved",
                          "reserved_peak", "device_allocs",  "device_frees", "oom_events"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CHECK_MSG(cJSON_GetObjectItem(j, keys[i]) != NULL, "missing %s", keys[i]);
    cJSON_Delete(j);
    CHECK(dg_alloc_stats_json(NULL) == NULL);

    /* empty_cache gives the cached 3072 back; live blocks stay. */
    dg_empty_cache(a);
    dg_alloc_get_stats(a, &s);
    CHECK(s.reserved == s.allocated && s.device_frees == 1);
    CHECK(dg_alloc(ctx, a, 3000, &b2) == DG_OK); /* no longer cached: a new device block */
    dg_alloc_get_stats(a, &s);
    CHECK(s.device_allocs == 4 && s.cache_hits == 1);

    /* Many classes: the class map grows and every one is found again. */
    enum { NB = 300 };
    dg_block *many[NB];
    for (int i = 0; i < NB; i++)
        CHECK(dg_alloc(ctx, a, (size_t)(i + 1) * 4096 + 1, &many[i]) == DG_OK);
    for (int i = 0; i < NB; i++)
        dg_release(a, many[i]);
    dg_alloc_get_stats(a, &s);
    size_t hits0 = s.cache_hits, allocs0 = s.device_allocs;
    for (int i = NB - 1; i >= 0; i--)
        CHECK(dg_alloc(ctx, a, (size_t)(i + 1) * 4096 + 1, &many[i]) == DG_OK);
    dg_alloc_get_stats(a, &s);
    CHECK(s.cache_hits == hits0 + NB && s.device_allocs == allocs0);
    for (int i = 0; i < NB; i += 2)
        dg_release(a, many[i]);

    /* Releasing twice, NULL, zero bytes: no harm. */
    CHECK(dg_alloc(ctx, a, 10, &b4) == DG_OK);
    dg_release(a, b4);
    dg_alloc_get_stats(a, &s);
    size_t alloc_before = s.allocated;
    dg_release(a, b4);
    dg_release(a, NULL);
    dg_release(NULL, b4);
    dg_alloc_get_stats(a, &s);
    CHECK(s.allocated == alloc_before);
    dg_block *z = (dg_block *)1;
    CHECK(dg_alloc(ctx, a, 0, &z) == DG_ERR_USAGE && z == NULL);
    CHECK(dg_alloc(ctx, a, SIZE_MAX, &z) == DG_ERR_DEVICE_OOM && z == NULL);
    CHECK(strstr(dg_errmsg(ctx), "device out of memory") != NULL);

    /* Closing with live blocks (b1, b2, b3, half of many) frees them too. */
    dg_allocator_free(a);
    dg_allocator_free(NULL);
    cpu->free(bctx);
    dg_ctx_free(ctx);
}

static void test_budget(void)
{
    const dg_backend_iface *cpu = dg_backend_cpu_iface();
    void *bctx = NULL;
    char reason[256];
    CHECK(cpu->init(0, &bctx, reason, sizeof reason) == DG_OK);
    dg_ctx *ctx = dg_ctx_new();
    dg_alloc_stats s;

    /* Two 600 KiB blocks do not fit in 1 MiB, even after freeing the cache. */
    dg_allocator *a = dg_allocator_new(cpu, bctx, MiB);
    dg_block *b1, *b2, *small;
    CHECK(dg_alloc(ctx, a, 1000, &small) == DG_OK);
    dg_release(a, small); /* cached */
    CHECK(dg_alloc(ctx, a, 600 * KiB, &b1) == DG_OK);
    b2 = (dg_block *)1;
    CHECK(dg_alloc(ctx, a, 600 * KiB, &b2) == DG_ERR_DEVICE_OOM);
    CHECK(b2 == NULL);
    CHECK_MSG(strstr(dg_errmsg(ctx), "requested 614400 bytes (class 614400) on cpu") != NULL, "%s",
              dg_errmsg(ctx));
    CHECK_MSG(strstr(dg_errmsg(ctx), "budget 1.0 MiB") != NULL, "%s", dg_errmsg(ctx));
    dg_alloc_get_stats(a, &s);
    CHECK(s.oom_events == 1 && s.device_frees == 1); /* the cache was emptied first */
    CHECK(s.reserved == 600 * KiB && s.allocated == 600 * KiB && s.budget == MiB);
    cJSON *j = dg_alloc_stats_json(&s);
    cJSON *m = cJSON_GetObjectItem(j, "budget");
    CHECK(m && cJSON_IsTrue(cJSON_GetObjectItem(m, "valid")) &&
          cJSON_GetObjectItem(m, "value")->valuedouble == (double)MiB);
    cJSON_Delete(j);
    dg_release(a, b1);
    dg_allocator_free(a);

    /* The budget full of cached blocks: a new class fits only after emptying. */
    a = dg_allocator_new(cpu, bctx, MiB);
    CHECK(dg_alloc(ctx, a, 400 * KiB, &b1) == DG_OK);
    CHECK(dg_alloc(ctx, a, 400 * KiB, &b2) == DG_OK);
    dg_release(a, b1);
    dg_release(a, b2);
    dg_block *b3;
    CHECK(dg_alloc(ctx, a, 600 * KiB, &b3) == DG_OK);
    dg_alloc_get_stats(a, &s);
    CHECK(s.device_frees == 2 && s.device_allocs == 3 && s.oom_events == 0);
    CHECK(s.reserved == 600 * KiB && s.reserved_peak == 800 * KiB);
    dg_release(a, b3);
    dg_allocator_free(a);

    cpu->free(bctx);
    dg_ctx_free(ctx);
}

/* ---- a wrapped cpu backend whose allocation fails on demand ---- */

static dg_backend_iface flaky;
static int fail_next;     /* failures still to give */
static dg_status fail_as; /* the status they return */
static int alloc_calls;

static dg_status flaky_alloc(void *ctx, size_t bytes, void **buf)
{
    alloc_calls++;
    if (fail_next != 0) {
        if (fail_next > 0)
            fail_next--;
        return fail_as;
    }
    return dg_backend_cpu_iface()->buf_alloc(ctx, bytes, buf);
}

static const char *flaky_error(void *ctx)
{
    return "flaky: device full";
}

static void test_device_oom(void)
{
    flaky = *dg_backend_cpu_iface();
    flaky.name = "flaky";
    flaky.buf_alloc = flaky_alloc;
    flaky.last_error = flaky_error;
    void *bctx = NULL;
    char reason[256];
    CHECK(flaky.init(0, &bctx, reason, sizeof reason) == DG_OK);
    dg_ctx *ctx = dg_ctx_new();
    dg_alloc_stats s;

    /* Out of memory once: the cache is freed and the retry succeeds. */
    dg_allocator *a = dg_allocator_new(&flaky, bctx, 0);
    dg_block *cached, *b;
    fail_next = 0;
    CHECK(dg_alloc(ctx, a, 5000, &cached) == DG_OK);
    dg_release(a, cached);
    fail_next = 1;
    fail_as = DG_ERR_DEVICE_OOM;
    alloc_calls = 0;
    CHECK(dg_alloc(ctx, a, 123456, &b) == DG_OK);
    dg_alloc_get_stats(a, &s);
    CHECK(alloc_calls == 2 && s.device_frees == 1 && s.oom_events == 0 && s.device_allocs == 2);
    dg_release(a, b);

    /* Always out of memory: DG_ERR_DEVICE_OOM after one retry, one event. */
    fail_next = -1;
    alloc_calls = 0;
    b = (dg_block *)1;
    CHECK(dg_alloc(ctx, a, 123456789, &b) == DG_ERR_DEVICE_OOM);
    CHECK(b == NULL && alloc_calls == 2);
    dg_alloc_get_stats(a, &s);
    CHECK(s.oom_events == 1);
    CHECK_MSG(strstr(dg_errmsg(ctx), "device out of memory: requested 123456789 bytes (class "
                                     "125829120) on flaky; allocated 0 B, reserved 0 B, budget "
                                     "none") != NULL,
              "%s", dg_errmsg(ctx));
    CHECK(strstr(dg_errmsg(ctx), "flaky: device full") != NULL);
    CHECK(s.reserved == 0 && s.allocated == 0);

    /* Other errors pass through with the backend's message, no retry. */
    fail_as = DG_ERR_BACKEND;
    alloc_calls = 0;
    CHECK(dg_alloc(ctx, a, 1000, &b) == DG_ERR_BACKEND);
    CHECK(alloc_calls == 1 && strstr(dg_errmsg(ctx), "flaky: device full") != NULL);
    dg_alloc_get_stats(a, &s);
    CHECK(s.oom_events == 1);
    fail_next = 0;
    dg_allocator_free(a);
    flaky.free(bctx);
    dg_ctx_free(ctx);
}

int main(void)
{
    size_t live0, live1;
    dg_host_mem_stats(&live0, NULL);
    test_classes();
    test_reuse_and_stats();
    test_budget();
    test_device_oom();
    dg_host_mem_stats(&live1, NULL);
    CHECK_MSG(live1 == live0, "host bytes live %zu at start, %zu at end", live0, live1);
    CHECK_DONE();
}
