/* The caching allocator: size classes, per-class free lists in a small open
 * addressing hash map, statistics, a byte budget and the free-the-cache-and-
 * retry-once path for device out of memory. */
#include "engine/engine.h"

#include <stdint.h>
#include <string.h>

#define SMALL_LIMIT ((size_t)1 << 20) /* up to here: multiples of SMALL_STEP */
#define SMALL_STEP ((size_t)512)
#define STEPS_PER_POW2 8 /* above SMALL_LIMIT: 8 classes per power of two */

/* A block as the allocator keeps it; callers see only pub. */
typedef struct blk {
    dg_block pub;
    struct blk *prev, *next; /* live list (doubly linked) or free list (next only) */
    bool live;
} blk;

/* One size class in the map: its cached blocks as a stack. */
typedef struct class_slot {
    size_t bytes; /* 0: empty slot */
    blk *free_head;
} class_slot;

struct dg_allocator {
    const dg_backend_iface *be;
    void *bctx;
    class_slot *slots; /* open addressing, capacity a power of two */
    size_t cap, used;
    blk *live; /* blocks handed out */
    dg_alloc_stats st;
};

size_t dg_alloc_class_size(size_t bytes)
{
    if (bytes <= SMALL_LIMIT) {
        if (bytes == 0)
            return SMALL_STEP;
        return (bytes + SMALL_STEP - 1) / SMALL_STEP * SMALL_STEP;
    }
    size_t pow2 = SMALL_LIMIT;
    while (pow2 <= bytes / 2)
        pow2 *= 2; /* largest power of two <= bytes */
    size_t step = pow2 / STEPS_PER_POW2;
    if (bytes > SIZE_MAX - (step - 1))
        return 0; /* no class can hold it */
    return (bytes + step - 1) / step * step;
}

dg_allocator *dg_allocator_new(const dg_backend_iface *be, void *bctx, size_t budget)
{
    dg_allocator *a = dg_calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->be = be;
    a->bctx = bctx;
    a->st.budget = budget;
    return a;
}

/* Slot index for class bytes: its own slot, or the empty one where it goes. */
static size_t slot_find(const class_slot *slots, size_t cap, size_t bytes)
{
    uint64_t h = (uint64_t)bytes; /* splitmix64 finaliser */
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
    size_t i = (size_t)h & (cap - 1);
    while (slots[i].bytes && slots[i].bytes != bytes)
        i = (i + 1) & (cap - 1);
    return i;
}

/* The slot of class bytes, created when absent; NULL when out of host memory. */
static class_slot *slot_get(dg_allocator *a, size_t bytes)
{
    if (a->cap) {
        class_slot *s = &a->slots[slot_find(a->slots, a->cap, bytes)];
        if (s->bytes == bytes)
            return s;
    }
    if ((a->used + 1) * 2 > a->cap) {
        size_t ncap = a->cap ? a->cap * 2 : 64;
        class_slot *ns = dg_calloc(ncap, sizeof *ns);
        if (!ns)
            return NULL;
        for (size_t i = 0; i < a->cap; i++)
            if (a->slots[i].bytes)
                ns[slot_find(ns, ncap, a->slots[i].bytes)] = a->slots[i];
        dg_free(a->slots);
        a->slots = ns;
        a->cap = ncap;
    }
    class_slot *s = &a->slots[slot_find(a->slots, a->cap, bytes)];
    s->bytes = bytes;
    s->free_head = NULL;
    a->used++;
    return s;
}

/* Returns a block's buffer to the device and frees the record. */
static void device_free(dg_allocator *a, blk *b)
{
    a->be->buf_free(a->bctx, b->pub.buf);
    a->st.reserved -= b->pub.bytes;
    a->st.device_frees++;
    dg_free(b);
}

void dg_empty_cache(dg_allocator *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->cap; i++) {
        blk *b = a->slots[i].free_head;
        a->slots[i].free_head = NULL;
        while (b) {
            blk *next = b->next;
            device_free(a, b);
            b = next;
        }
    }
}

void dg_allocator_free(dg_allocator *a)
{
    if (!a)
        return;
    dg_empty_cache(a);
    while (a->live) {
        blk *b = a->live;
        a->live = b->next;
        device_free(a, b);
    }
    dg_free(a->slots);
    dg_free(a);
}

/* Human size ("512 B", "1.5 MiB", "1.2 GiB") into buf. */
static const char *human(size_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    if (bytes < 1024) {
        snprintf(buf, len, "%zu B", bytes);
        return buf;
    }
    double v = (double)bytes / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 3) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, len, "%.1f %s", v, units[u]);
    return buf;
}

static dg_status oom(dg_ctx *ctx, dg_allocator *a, size_t bytes, size_t cls, const char *why)
{
    char al[32], re[32], bu[32];
    a->st.oom_events++;
    if (a->st.budget)
        human(a->st.budget, bu, sizeof bu);
    else
        snprintf(bu, sizeof bu, "none");
    return dg_fail(ctx, DG_ERR_DEVICE_OOM,
                   "device out of memory: requested %zu bytes (class %zu) on %s; allocated %s, "
                   "reserved %s, budget %s (%s)",
                   bytes, cls, a->be->name, human(a->st.allocated, al, sizeof al),
                   human(a->st.reserved, re, sizeof re), bu, why);
}

/* Hands b out: live list and statistics. */
static void hand_out(dg_allocator *a, blk *b, size_t bytes, dg_block **out)
{
    b->pub.requested = bytes;
    b->live = true;
    b->prev = NULL;
    b->next = a->live;
    if (a->live)
        a->live->prev = b;
    a->live = b;
    a->st.allocated += b->pub.bytes;
    a->st.requested += bytes;
    if (a->st.allocated > a->st.allocated_peak)
        a->st.allocated_peak = a->st.allocated;
    *out = &b->pub;
}

dg_status dg_alloc(dg_ctx *ctx, dg_allocator *a, size_t bytes, dg_block **out)
{
    *out = NULL;
    if (!a || bytes == 0)
        return dg_fail(ctx, DG_ERR_USAGE, "dg_alloc: %s",
                       a ? "zero bytes requested" : "no allocator");
    size_t cls = dg_alloc_class_size(bytes);
    if (cls == 0)
        return oom(ctx, a, bytes, cls, "no size class holds it");

    /* Cache hit: a released block of the same class. */
    if (a->cap) {
        class_slot *s = &a->slots[slot_find(a->slots, a->cap, cls)];
        if (s->bytes == cls && s->free_head) {
            blk *b = s->free_head;
            s->free_head = b->next;
            a->st.cache_hits++;
            hand_out(a, b, bytes, out);
            return DG_OK;
        }
    }

    blk *b = dg_calloc(1, sizeof *b);
    if (!b)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of host memory for an allocator record");
    const char *why = "";
    for (int attempt = 0; attempt < 2; attempt++) {
        if (attempt == 1)
            dg_empty_cache(a); /* free what is cached, then try once more */
        if (a->st.budget &&
            (a->st.reserved > a->st.budget || cls > a->st.budget - a->st.reserved)) {
            why = "the memory budget would be exceeded";
            continue;
        }
        void *buf = NULL;
        dg_status st = a->be->buf_alloc(a->bctx, cls, &buf);
        if (st == DG_OK) {
            b->pub.buf = buf;
            b->pub.bytes = cls;
            a->st.reserved += cls;
            if (a->st.reserved > a->st.reserved_peak)
                a->st.reserved_peak = a->st.reserved;
            a->st.device_allocs++;
            hand_out(a, b, bytes, out);
            return DG_OK;
        }
        if (st != DG_ERR_DEVICE_OOM) {
            dg_free(b);
            const char *err = a->be->last_error(a->bctx);
            return dg_fail(ctx, st, "%s: allocating %zu bytes: %s", a->be->name, cls,
                           err && *err ? err : dg_status_name(st));
        }
        why = a->be->last_error(a->bctx);
    }
    dg_free(b);
    return oom(ctx, a, bytes, cls, why && *why ? why : "the device refused");
}

void dg_release(dg_allocator *a, dg_block *pb)
{
    if (!a || !pb)
        return;
    blk *b = (blk *)pb; /* pub is the first member */
    if (!b->live)
        return; /* released twice: ignore */
    b->live = false;
    if (b->prev)
        b->prev->next = b->next;
    else
        a->live = b->next;
    if (b->next)
        b->next->prev = b->prev;
    a->st.allocated -= b->pub.bytes;
    a->st.requested -= b->pub.requested;
    class_slot *s = slot_get(a, b->pub.bytes);
    if (!s) {
        device_free(a, b); /* no room to cache it: give it back */
        return;
    }
    b->prev = NULL;
    b->next = s->free_head;
    s->free_head = b;
}

void dg_alloc_get_stats(const dg_allocator *a, dg_alloc_stats *out)
{
    if (a)
        *out = a->st;
    else
        memset(out, 0, sizeof *out);
}

cJSON *dg_alloc_stats_json(const dg_alloc_stats *s)
{
    cJSON *o = s ? cJSON_CreateObject() : NULL;
    if (!o)
        return NULL;
    const struct {
        const char *key;
        size_t value;
        const char *unit;
    } f[] = {
        {"allocated", s->allocated, "bytes"},
        {"allocated_peak", s->allocated_peak, "bytes"},
        {"requested", s->requested, "bytes"},
        {"reserved", s->reserved, "bytes"},
        {"reserved_peak", s->reserved_peak, "bytes"},
        {"device_allocs", s->device_allocs, "count"},
        {"device_frees", s->device_frees, "count"},
        {"cache_hits", s->cache_hits, "count"},
        {"oom_events", s->oom_events, "count"},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        cJSON_AddItemToObject(o, f[i].key, dg_json_metric((double)f[i].value, true, f[i].unit));
    cJSON_AddItemToObject(o, "budget", dg_json_metric((double)s->budget, s->budget != 0, "bytes"));
    return o;
}
