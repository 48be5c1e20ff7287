/* Internal to the batch loader (src/data/loader*.c): the loader struct, its
 * batch slots and per-epoch totals, and the functions of each stage file:
 * loader_xform.c (one sample: read, resize, crop, flip, normalise),
 * loader_cache.c (decoded+resized samples), loader_bad.c (one batch under the
 * bad-sample policy), loader_queue.c (workers, the in-order queue),
 * loader_order.c (sample order and resolution, at the bottom: it calls none
 * of the others). */
#ifndef DG_LOADER_INT_H
#define DG_LOADER_INT_H

#include "data/loader.h"

#include <pthread.h>
#include <stdint.h>

/* Philox streams. STREAM_ORDER matches the synthetic generator's (synth.c),
 * so the synthetic source's epochs are the fixture's original batches. */
#define STREAM_ORDER (3ull << 40)
#define STREAM_AUG (0x10ull << 56)
#define STREAM_RES (0x11ull << 56)
#define STREAM_SPLIT (0x12ull << 56)

enum { S_READ, S_DECODE, S_RESIZE, S_AUGMENT, S_NORM, S_COLLATE, S_COUNT };

/* A slot's life: FREE -> FILLING (a worker, or the consumer inline) -> READY
 * -> HELD (acquired) -> FREE (released). */
enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD };

#define MSG_LEN 256

typedef struct slot {
    float *x; /* the slot's block (x, then y at label_off bytes) */
    int32_t *y;
    bool page_locked; /* x came from opts.slot_mem.alloc */
    int h, w;
    int64_t g;
    int state;
    dg_status st;
    char err[MSG_LEN + 64];
    double t[S_COUNT];
    size_t bad, seen;
    int nmsg;
    char msgs[DG_LOADER_MAX_BAD_MSGS][MSG_LEN];
} slot;

typedef struct epoch_stat {
    int epoch;
    size_t batches;
    double waited;
    double t[S_COUNT];
} epoch_stat;

struct dg_loader {
    dg_ctx *ctx;
    dg_source *src;
    dg_loader_opts o;
    size_t n_all, ntrain, nval;
    size_t *train, *val;
    float mean[3], std[3];
    int maxh, maxw;
    size_t slot_floats, scratch_floats;
    size_t label_off, slot_bytes; /* y's byte offset in a slot's block, the block's size */
    bool peek;          /* samples taken straight from the source's memory (dg_source_peek) */
    int peek_h, peek_w; /* their stored size */
    char *bucket_text;
    char bucket_id[65];
    cJSON *dataset;

    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_ready;
    pthread_t *threads;
    int nthreads;
    bool stop;
    slot *slots;
    int nslots;
    int held; /* slots the consumer holds (SLOT_HELD) */
    /* The run in progress. */
    dg_split sp;
    int first_epoch, steps;
    int64_t total, next, consumed;
    int busy;
    uint64_t gen;
    size_t *perm[2];
    int perm_epoch[2];

    /* Cache of decoded, resized samples, per (resolution, sample). */
    pthread_mutex_t cache_mu;
    float **cache;
    int32_t *cache_y;
    size_t cache_bytes, cache_cap, cache_hits, cache_misses;

    /* Host-memory budget: what it was held against, the per-image cap, and
     * what the slots and worker buffers take. */
    double mem_available;
    bool mem_known;
    size_t image_budget, fixed_bytes;
    size_t slots_locked; /* slots whose block came from slot_mem.alloc */

    /* Consumer-side totals. */
    double t[S_COUNT], waited;
    size_t batches;
    epoch_stat *eps;
    size_t neps, cap_eps;
    size_t bad, seen;
    int nmsg;
    char msgs[DG_LOADER_MAX_BAD_MSGS][MSG_LEN];
    bool failed;
};

/* Two sample-sized float buffers of a batch being filled. */
typedef struct scratch {
    float *a, *b;
} scratch;

/* ---- loader_xform.c ---- */
/* Reads, resizes (or takes from the cache), augments and normalises sample idx
 * into dst (c*h*w floats); *label gets its label. DG_ERR_FORMAT with err for a
 * bad sample. */
dg_status dg_ld_load_sample(dg_loader *ld, dg_split sp, int epoch, size_t idx, int ri, slot *sl,
                            scratch *sc, float *dst, int32_t *label, char *err, size_t errlen);

/* Fills sl with batch positions first.. of list (wrapping at count) straight
 * from the source's memory when the loader reads in place (peek), the
 * resolution is the stored one and nothing is augmented: one copy or
 * normalisation per sample, timed once. false when that does not apply
 * (the sample path then fills the whole batch). */
bool dg_ld_fill_in_place(dg_loader *ld, dg_split sp, int ri, slot *sl, const size_t *list,
                         size_t count, size_t first);

/* ---- loader_cache.c ---- */
/* Allocates the cache index for nres resolutions of n samples; false when out of memory. */
bool dg_ld_cache_new(dg_loader *ld);
/* Frees every cached sample and the index; accepts a loader without a cache. */
void dg_ld_cache_free(dg_loader *ld);
/* The cached sample under key (its label into *label) or NULL; counts the hit or miss. */
const float *dg_ld_cache_get(dg_loader *ld, size_t key, int32_t *label);
/* Keeps a copy of chw floats under key while the cache has room. */
void dg_ld_cache_put(dg_loader *ld, size_t key, const float *data, size_t chw, int32_t label);

/* ---- loader_bad.c ---- */
/* Fills batch g of the run into sl. Bad samples (skip mode) are replaced by
 * the next good sample of the epoch's list, so batches stay full and the
 * same on every run. */
void dg_ld_fill_batch(dg_loader *ld, int64_t g, slot *sl, dg_split sp, int first_epoch, int steps);
/* DG_ERR_FORMAT with the message on ld's ctx when the bad share of the
 * samples read so far is above the allowed one (checked from 1000 samples
 * on, or at an epoch end); DG_OK otherwise. */
dg_status dg_ld_bad_share_check(dg_loader *ld, bool epoch_end);

/* ---- loader_order.c ---- */
/* Fisher-Yates over list with the epoch's stream (as synth.c's make_order). */
void dg_ld_shuffle(size_t *list, size_t n, uint64_t seed, uint64_t stream);
/* qsort comparison of size_t values. */
int dg_ld_cmp_size(const void *a, const void *b);
/* The sample list of (split, epoch): train shuffled per epoch, val in order.
 * Called with mu held. */
const size_t *dg_ld_epoch_list(dg_loader *ld, dg_split sp, int epoch, size_t *count);
/* The resolution index of (epoch, step), drawn by weight. */
int dg_ld_pick_res(const dg_loader *ld, int epoch, int step);
/* ---- loader_queue.c ---- */
/* A worker thread: takes the next batch while its slot is free and fills it. */
void *dg_ld_worker_main(void *arg);
#endif
