/* The batch loader: samples of a dg_source resized to the bucket resolution,
 * augmented (train split only), normalised and collated into NCHW float
 * batches by worker threads, handed out strictly in batch order.
 *
 * Reproducible by construction: the sample order of an epoch and every
 * augmentation choice of a sample depend only on (seed, epoch, sample index)
 * through Philox streams, never on the worker count or timing. The input
 * bucket (resolutions, augmentations, batch, channels, normalisation and the
 * data set's identity) is printed canonically; its SHA-256 is the bucket id. */
#ifndef DG_LOADER_H
#define DG_LOADER_H

#include "data/data.h"

typedef struct dg_loader dg_loader;

typedef enum dg_split { DG_SPLIT_TRAIN = 0, DG_SPLIT_VAL = 1 } dg_split;
typedef enum dg_norm_mode { DG_NORM_NONE = 0, DG_NORM_AUTO, DG_NORM_GIVEN } dg_norm_mode;

#define DG_LOADER_MAX_RES 16
#define DG_LOADER_MAX_BAD_MSGS 20

typedef struct dg_resolution {
    int h, w;
    double weight; /* relative share of batches (> 0) */
} dg_resolution;

/* Host memory for the batch slots, e.g. a backend's page-locked host_alloc /
 * host_free: alloc gives `bytes` at *p (DG_OK) or fails, and the slot then
 * takes plain memory; free gets back what alloc gave. */
typedef struct dg_loader_mem {
    dg_status (*alloc)(void *user, size_t bytes, void **p);
    void (*free)(void *user, void *p);
    void *user;
} dg_loader_mem;

/* A batch handed out by dg_loader_acquire: it lives in the loader's slot
 * until dg_loader_release. x (batch * channels * h * w floats, NCHW) starts
 * the slot's one memory block; y (batch labels) follows it at the first
 * DG_LOADER_LABEL_ALIGN boundary after the largest batch's floats. */
typedef struct dg_batch {
    float *x;
    int32_t *y;
    int h, w;
    bool page_locked; /* the block came from opts.slot_mem.alloc */
    int64_t seq;      /* the batch's position in the run (0-based) */
    int slot;         /* the loader's slot (checked by dg_loader_release) */
} dg_batch;

#define DG_LOADER_LABEL_ALIGN 256

/* Replaces dg_source_read (tests wrap a source to inject bad samples). */
typedef dg_status (*dg_loader_read_fn)(void *user, dg_source *s, size_t i, dg_image *img,
                                       dg_read_times *t, char *err, size_t errlen);

typedef struct dg_loader_opts {
    int batch;    /* samples per batch (>= 1) */
    int channels; /* channels of the model (1 or 3); samples must arrive so */
    int nres;     /* resolutions in res (1..DG_LOADER_MAX_RES) */
    dg_resolution res[DG_LOADER_MAX_RES];
    bool crop, flip;        /* augmentations (train split only) */
    dg_norm_mode norm;      /* none, auto (one pass at creation) or given */
    int norm_count;         /* given: values per list (1: every channel, or channels) */
    float mean[3], std[3];  /* given: per channel */
    int workers;            /* threads; 0: inline in the caller; < 0: 2 */
    int prefetch;           /* queue depth in batches; 0 (and at least): workers + hold */
    int hold;               /* batches the consumer may hold at once (acquire); 0: 2, inline 1 */
    dg_loader_mem slot_mem; /* alloc NULL: plain memory for the slots */
    bool cache;             /* keep decoded+resized samples (before augmentation) */
    size_t cache_cap; /* cache cap in bytes; 0: 2 GiB, at most a quarter of the available memory */
    size_t max_image_bytes; /* decoded bytes one image may take; 0: auto (the smaller of
                               512 MiB and available / (4 * max(1, workers))) */
    double mem_available;   /* bytes the budget is held against; 0: MemAvailable (/proc/meminfo) */
    double val_split;       /* share held out for validation, [0, 1) */
    bool on_bad_fail;       /* a bad sample fails the loader instead of being skipped */
    double max_bad_share;   /* fail when bad/seen exceeds this; < 0: 0.01 */
    uint64_t seed;
    dg_math math;           /* the run's math mode (part of the bucket: numerics differ) */
    dg_loader_read_fn read; /* NULL: dg_source_read */
    void *read_user;
} dg_loader_opts;

/* Creates a loader over src (borrowed; must outlive the loader): splits the
 * indices, sets src's decode budget (a larger image is a bad sample naming
 * its size), computes "auto" normalisation (one pass over up to 10000
 * training samples) and the bucket. DG_ERR_USAGE bad options or batch slots
 * and worker buffers that need more than the available memory, DG_ERR_FORMAT
 * data that cannot be normalised. */
dg_status dg_loader_new(dg_ctx *ctx, dg_source *src, const dg_loader_opts *o, dg_loader **out);
/* Joins the workers (even mid-epoch) and frees, the slots of batches still
 * held included (their views dangle afterwards); accepts NULL. */
void dg_loader_free(dg_loader *ld);
/* Samples in a split. */
size_t dg_loader_count(const dg_loader *ld, dg_split sp);
/* Largest batch size in floats (batch * channels * max h * max w). */
size_t dg_loader_batch_floats(const dg_loader *ld);
/* Starts handing out `epochs` epochs of `steps` batches each (0: one pass,
 * ceil(count / batch)) of split sp, from epoch first_epoch; batch j of an
 * epoch holds positions j*batch.. of the epoch's permutation, wrapping.
 * Stops any run in progress; DG_ERR_USAGE while batches are held. */
dg_status dg_loader_start(dg_loader *ld, dg_split sp, int first_epoch, int epochs, int steps);
/* The next batch in order into x (dg_loader_batch_floats floats) and y
 * (batch labels), its resolution into *h, *w. DG_ERR_FORMAT for a bad sample
 * under on_bad_fail or too many bad samples, DG_ERR_USAGE past the end. The
 * message goes to the loader's ctx. */
dg_status dg_loader_next(dg_loader *ld, float *x, int32_t *y, int *h, int *w);
/* The next batch in order as a view of its slot, without a copy; the slot
 * stays the caller's (workers do not refill it) until dg_loader_release. At
 * most opts.hold batches are held at once. Errors as dg_loader_next, and
 * DG_ERR_USAGE when hold batches are held or the batch's slot is still held
 * (a batch released out of turn); *b is zeroed on error. */
dg_status dg_loader_acquire(dg_loader *ld, dg_batch *b);
/* Hands b's slot back for refilling; the caller must be done reading it (an
 * async upload from it finished). DG_ERR_USAGE with a message for a batch this
 * loader did not hand out or one released already; b is zeroed on success. */
dg_status dg_loader_release(dg_loader *ld, dg_batch *b);
/* Batches acquired and not yet released. */
int dg_loader_held(const dg_loader *ld);
/* The canonical bucket text and its SHA-256 (64 hex digits); owned by ld. */
const char *dg_loader_bucket_text(const dg_loader *ld);
const char *dg_loader_bucket_id(const dg_loader *ld);
/* The bucket as JSON with its "id". */
cJSON *dg_loader_bucket_json(const dg_loader *ld);
/* Stage times, per-epoch starvation, bad samples, cache hits, workers. */
cJSON *dg_loader_stats_json(const dg_loader *ld);
/* Bad samples met and samples seen so far. */
void dg_loader_bad_counts(const dg_loader *ld, size_t *bad, size_t *seen);
/* Normalisation in use (auto: the computed values). */
void dg_loader_norm(const dg_loader *ld, float mean[3], float std[3]);

/* Parsers for the CLI's strings into opts (DG_ERR_USAGE with a message):
 * "HxW[:WEIGHT][,...]", "crop,flip" (or "" / "none"), "none" | "auto" |
 * "m1,m2,m3/s1,s2,s3". */
dg_status dg_loader_parse_resolution(dg_ctx *ctx, const char *s, dg_loader_opts *o);
dg_status dg_loader_parse_augment(dg_ctx *ctx, const char *s, dg_loader_opts *o);
dg_status dg_loader_parse_normalize(dg_ctx *ctx, const char *s, dg_loader_opts *o);

/* The canonical bucket text (bucket.c): fixed key order, numbers as
 * integers or %.6g, the data set identity with its keys sorted. NULL when
 * out of memory; free with dg_free. mean/std are used unless norm is none. */
char *dg_bucket_text(const dg_loader_opts *o, const float mean[3], const float std[3],
                     const cJSON *dataset);
/* SHA-256 of text as 64 lowercase hex digits into hex[65]. */
void dg_sha256_hex(const void *data, size_t len, char hex[65]);

/* Resizes one CHW plane set: per axis bilinear (align_corners=false) when
 * growing, area averaging when shrinking, a copy when equal. */
void dg_resize(const float *src, int c, int h, int w, float *dst, int oh, int ow);
#endif
