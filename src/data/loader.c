/* The batch loader: a ring of batch slots filled by worker threads in batch
 * order and handed to the consumer strictly in order. Every random choice
 * comes from a Philox stream keyed by (seed, purpose, epoch, index), so the
 * batches are the same for any worker count and any timing. This file:
 * creation, reporting and the option strings; the stages are in
 * loader_xform.c, loader_cache.c, loader_bad.c and loader_queue.c. */
#include "data/loader_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Decoded bytes one image may take when the caller names no budget (about
 * a 6700 x 6700 RGB image as floats), lowered to fit the workers. */
#define AUTO_IMAGE_BUDGET ((size_t)512 << 20)

/* MemAvailable of /proc/meminfo in bytes; false when unknown. */
static bool available_memory(double *bytes)
{
    char *mi = dg_read_file("/proc/meminfo", 1u << 16, NULL);
    bool ok = mi && dg_proc_kb(mi, "MemAvailable", bytes) && *bytes > 0;
    dg_free(mi);
    return ok;
}

static const char *const stage_names[S_COUNT] = {"read",    "decode",    "resize",
                                                 "augment", "normalise", "collate"};

/* ---- creation ------------------------------------------------------------------ */

/* Per-channel mean and std over up to 10000 training samples at their stored
 * size (evenly spaced positions of the training list); bad samples skipped. */
static dg_status auto_norm(dg_loader *ld)
{
    int c = ld->o.channels;
    double sum[3] = {0}, sq[3] = {0}, cnt = 0;
    size_t m = ld->ntrain < 10000 ? ld->ntrain : 10000;
    for (size_t k = 0; k < m; k++) {
        size_t idx = ld->train[(size_t)((double)k * ld->ntrain / m)];
        dg_image img = {0};
        dg_read_times rt = {0, 0};
        char err[MSG_LEN];
        dg_status st = ld->o.read
                           ? ld->o.read(ld->o.read_user, ld->src, idx, &img, &rt, err, sizeof err)
                           : dg_source_read(ld->src, idx, &img, &rt, err, sizeof err);
        if (st == DG_OK && img.c == c && img.data) {
            size_t hw = (size_t)img.h * img.w;
            for (int ch = 0; ch < c; ch++) {
                const float *p = img.data + (size_t)ch * hw;
                double s = 0, q = 0;
                for (size_t i = 0; i < hw; i++) {
                    s += p[i];
                    q += (double)p[i] * p[i];
                }
                sum[ch] += s;
                sq[ch] += q;
            }
            cnt += (double)hw;
        } else if (st != DG_OK && st != DG_ERR_FORMAT) {
            dg_image_free(&img);
            return dg_fail(ld->ctx, st, "loader: normalise auto: %s", err);
        }
        dg_image_free(&img);
    }
    if (cnt == 0)
        return dg_fail(ld->ctx, DG_ERR_FORMAT,
                       "loader: normalise auto: no readable training sample");
    for (int ch = 0; ch < c; ch++) {
        double mu = sum[ch] / cnt, var = sq[ch] / cnt - mu * mu;
        ld->mean[ch] = (float)mu;
        ld->std[ch] = var > 1e-12 ? (float)sqrt(var) : 1.0f;
    }
    return DG_OK;
}

static int cmp_res(const void *a, const void *b)
{
    const dg_resolution *x = a, *y = b;
    if (x->h != y->h)
        return x->h - y->h;
    return x->w - y->w;
}

/* Checks the loader options and fills in their defaults; DG_ERR_USAGE with
 * the message when one is out of range. */
static dg_status settle_opts(dg_ctx *ctx, dg_loader_opts *o)
{
    if (o->batch < 1 || (o->channels != 1 && o->channels != 3))
        return dg_fail(ctx, DG_ERR_USAGE, "loader: batch must be positive and channels 1 or 3");
    if (o->nres < 1 || o->nres > DG_LOADER_MAX_RES)
        return dg_fail(ctx, DG_ERR_USAGE, "loader: 1..%d resolutions, got %d", DG_LOADER_MAX_RES,
                       o->nres);
    for (int i = 0; i < o->nres; i++)
        if (o->res[i].h < 1 || o->res[i].w < 1 || o->res[i].h > 16384 || o->res[i].w > 16384 ||
            !(o->res[i].weight > 0) || !isfinite(o->res[i].weight))
            return dg_fail(ctx, DG_ERR_USAGE, "loader: resolution %dx%d:%g is out of range",
                           o->res[i].h, o->res[i].w, o->res[i].weight);
    qsort(o->res, (size_t)o->nres, sizeof o->res[0], cmp_res);
    if (!(o->val_split >= 0 && o->val_split < 1))
        return dg_fail(ctx, DG_ERR_USAGE, "loader: the validation share must be in [0, 1), got %g",
                       o->val_split);
    if (o->max_bad_share < 0)
        o->max_bad_share = 0.01;
    if (!(o->max_bad_share <= 1))
        return dg_fail(ctx, DG_ERR_USAGE, "loader: the bad-sample share must be in [0, 1]");
    if (o->norm == DG_NORM_GIVEN) {
        if (o->norm_count != 1 && o->norm_count != o->channels)
            return dg_fail(
                ctx, DG_ERR_USAGE,
                "loader: --normalize gives %d values per list, the model has %d channel%s",
                o->norm_count, o->channels, o->channels > 1 ? "s" : "");
        for (int ch = 0; ch < 3; ch++) {
            if (o->norm_count == 1) {
                o->mean[ch] = o->mean[0];
                o->std[ch] = o->std[0];
            }
            if (ch < o->channels &&
                !(o->std[ch] > 0 && isfinite(o->std[ch]) && isfinite(o->mean[ch])))
                return dg_fail(ctx, DG_ERR_USAGE,
                               "loader: normalisation std must be positive and finite");
        }
    }
    if (o->workers < 0)
        o->workers = 2;
    if (o->workers > 256)
        return dg_fail(ctx, DG_ERR_USAGE, "loader: at most 256 workers");
    if (o->hold < 0 || o->hold > 64)
        return dg_fail(ctx, DG_ERR_USAGE, "loader: the consumer may hold 1..64 batches, got %d",
                       o->hold);
    if (!o->hold)
        o->hold = o->workers ? 2 : 1;
    if ((o->slot_mem.alloc != NULL) != (o->slot_mem.free != NULL))
        return dg_fail(ctx, DG_ERR_USAGE, "loader: slot memory needs both alloc and free");
    if (o->prefetch <= 0)
        o->prefetch = o->workers ? o->workers + o->hold : 1;
    /* Workers keep filling while the consumer holds its batches. */
    if (o->workers && o->prefetch < o->workers + o->hold)
        o->prefetch = o->workers + o->hold;
    if (!o->cache_cap)
        o->cache_cap = (size_t)2 << 30;
    return DG_OK;
}

/* The training and validation index lists of ld's n samples. */
static dg_status split_samples(dg_loader *ld, size_t n)
{
    const dg_loader_opts *o = &ld->o;
    /* Split: the last val_split share of a seeded permutation is held out;
     * both lists are kept in index order. */
    ld->nval = (size_t)floor(o->val_split * (double)n);
    if (o->val_split > 0 && ld->nval == 0)
        ld->nval = 1;
    ld->ntrain = n - ld->nval;
    if (ld->ntrain == 0) {
        return dg_fail(ld->ctx, DG_ERR_USAGE,
                       "loader: --val-split %g leaves no training samples of %zu", o->val_split, n);
    }
    ld->train = dg_malloc(n * sizeof(size_t));
    ld->val = dg_malloc((ld->nval ? ld->nval : 1) * sizeof(size_t));
    ld->perm[0] = dg_malloc(ld->ntrain * sizeof(size_t));
    ld->perm[1] = dg_malloc(ld->ntrain * sizeof(size_t));
    if (!ld->train || !ld->val || !ld->perm[0] || !ld->perm[1]) {
        return dg_fail(ld->ctx, DG_ERR_NOMEM, "loader: out of memory for %zu sample indices", n);
    }
    for (size_t i = 0; i < n; i++)
        ld->train[i] = i;
    if (ld->nval) {
        dg_ld_shuffle(ld->train, n, o->seed, STREAM_SPLIT);
        memcpy(ld->val, ld->train + ld->ntrain, ld->nval * sizeof(size_t));
        qsort(ld->train, ld->ntrain, sizeof(size_t), dg_ld_cmp_size);
        qsort(ld->val, ld->nval, sizeof(size_t), dg_ld_cmp_size);
    }
    return DG_OK;
}

/* The batch slots (page-locked through slot_mem where it gives them). */
static dg_status alloc_slots(dg_loader *ld)
{
    const dg_loader_opts *o = &ld->o;
    ld->nslots = o->workers ? o->prefetch : o->hold;
    ld->slots = dg_calloc((size_t)ld->nslots, sizeof(slot));
    if (!ld->slots) {
        return dg_fail(ld->ctx, DG_ERR_NOMEM, "loader: out of memory");
    }
    for (int i = 0; i < ld->nslots; i++) {
        /* One block a slot, x then y: the consumer uploads straight from it.
         * Slot memory the allocator refuses (page-locked memory is scarce)
         * is plain memory. */
        slot *sl = &ld->slots[i];
        void *p = NULL;
        if (o->slot_mem.alloc && o->slot_mem.alloc(o->slot_mem.user, ld->slot_bytes, &p) == DG_OK &&
            p) {
            sl->page_locked = true;
            ld->slots_locked++;
        } else if (!(p = dg_malloc(ld->slot_bytes))) {
            return dg_fail(ld->ctx, DG_ERR_NOMEM,
                           "loader: out of memory for %d batches of %zu floats", ld->nslots,
                           ld->slot_floats);
        }
        sl->x = p;
        sl->y = (int32_t *)((char *)p + ld->label_off);
        /* the gap before the labels travels with a one-copy upload */
        memset((char *)p + ld->slot_floats * sizeof(float), 0,
               ld->label_off - ld->slot_floats * sizeof(float));
    }
    return DG_OK;
}

dg_status dg_loader_new(dg_ctx *ctx, dg_source *src, const dg_loader_opts *opts, dg_loader **out)
{
    *out = NULL;
    dg_loader_opts o = *opts;
    dg_status st = settle_opts(ctx, &o);
    if (st != DG_OK)
        return st;
    size_t n = dg_source_count(src);
    if (n == 0)
        return dg_fail(ctx, DG_ERR_FORMAT, "loader: the data set has no samples");
    if (!(o.mem_available >= 0))
        return dg_fail(ctx, DG_ERR_USAGE, "loader: mem_available must be 0 or positive");

    dg_loader *ld = dg_calloc(1, sizeof *ld);
    if (!ld)
        return dg_fail(ctx, DG_ERR_NOMEM, "loader: out of memory");
    ld->ctx = ctx;
    ld->src = src;
    ld->o = o;
    ld->n_all = n;
    ld->perm_epoch[0] = ld->perm_epoch[1] = -1;
    pthread_mutex_init(&ld->mu, NULL);
    pthread_mutex_init(&ld->cache_mu, NULL);
    pthread_cond_init(&ld->cv_work, NULL);
    pthread_cond_init(&ld->cv_ready, NULL);

    /* The host-memory budget: one decoded image at most image_budget bytes,
     * so a small file claiming a huge image is a bad sample, not gigabytes
     * per worker. */
    ld->mem_known = o.mem_available > 0 || available_memory(&ld->mem_available);
    if (o.mem_available > 0)
        ld->mem_available = o.mem_available;
    size_t per_worker =
        ld->mem_known ? (size_t)(ld->mem_available / (4.0 * (o.workers ? o.workers : 1))) : 0;
    ld->image_budget = o.max_image_bytes                                 ? o.max_image_bytes
                       : ld->mem_known && per_worker < AUTO_IMAGE_BUDGET ? per_worker
                                                                         : AUTO_IMAGE_BUDGET;
    dg_source_set_decode_budget(src, ld->image_budget);
    if (!opts->cache_cap && ld->mem_known && (double)ld->o.cache_cap > ld->mem_available / 4)
        ld->o.cache_cap = (size_t)(ld->mem_available / 4);

    if ((st = split_samples(ld, n)) != DG_OK)
        goto fail;

    for (int ch = 0; ch < 3; ch++) {
        ld->mean[ch] = o.norm == DG_NORM_GIVEN ? o.mean[ch] : 0.0f;
        ld->std[ch] = o.norm == DG_NORM_GIVEN ? o.std[ch] : 1.0f;
    }
    if (o.norm == DG_NORM_AUTO && (st = auto_norm(ld)) != DG_OK)
        goto fail;

    for (int i = 0; i < o.nres; i++) {
        if (o.res[i].h > ld->maxh)
            ld->maxh = o.res[i].h;
        if (o.res[i].w > ld->maxw)
            ld->maxw = o.res[i].w;
    }
    ld->slot_floats = (size_t)o.batch * o.channels * ld->maxh * ld->maxw;
    ld->label_off = (ld->slot_floats * sizeof(float) + DG_LOADER_LABEL_ALIGN - 1) /
                    DG_LOADER_LABEL_ALIGN * DG_LOADER_LABEL_ALIGN;
    ld->slot_bytes = ld->label_off + (size_t)o.batch * sizeof(int32_t);
    /* Scratch holds the largest of a resized sample and its 1.125x growth. */
    ld->scratch_floats = (size_t)o.channels * (size_t)lround(ld->maxh * 1.125 + 1) *
                         (size_t)lround(ld->maxw * 1.125 + 1);

    /* The slots and each worker's scratch are touched in full: refuse before
     * allocating more than half of what the machine has (the rest is the
     * model's). (The decoded images are
     * held to image_budget each, at most a quarter of it in all when auto.) */
    {
        int users = o.workers ? o.workers : 1, slots = o.workers ? o.prefetch : o.hold;
        double slot_b = (double)ld->slot_bytes;
        double worker_b = 2.0 * (double)ld->scratch_floats * sizeof(float);
        double need = slots * slot_b + users * worker_b;
        ld->fixed_bytes = need < 1e19 ? (size_t)need : SIZE_MAX;
        if (ld->mem_known && need > ld->mem_available / 2) { /* the rest is the model's */
            st = dg_fail(
                ctx, DG_ERR_USAGE,
                "loader: %d batch slot%s of %d samples at %dx%dx%d (%.2f GB each) and %d "
                "worker%s' scratch buffers (%.2f GB each) need %.2f GB, more than half of the "
                "%.2f GB of memory available; lower --batch, --prefetch or --workers",
                slots, slots == 1 ? "" : "s", o.batch, o.channels, ld->maxh, ld->maxw, slot_b / 1e9,
                users, users == 1 ? "" : "s", worker_b / 1e9, need / 1e9, ld->mem_available / 1e9);
            goto fail;
        }
    }

    ld->dataset = dg_source_identity(src);
    ld->bucket_text = dg_bucket_text(&ld->o, ld->mean, ld->std, ld->dataset);
    if (!ld->bucket_text) {
        st = dg_fail(ctx, DG_ERR_NOMEM, "loader: out of memory for the bucket");
        goto fail;
    }
    dg_sha256_hex(ld->bucket_text, strlen(ld->bucket_text), ld->bucket_id);

    /* A source holding float samples in memory (synthetic) is read in place:
     * no per-sample image to allocate and copy (a cache would only copy). */
    {
        int32_t lab;
        int pc = 0;
        dg_source_shape(src, &pc, &ld->peek_h, &ld->peek_w);
        ld->peek = !o.cache && !o.read && pc == o.channels && dg_source_peek(src, 0, &lab);
    }
    if (o.cache) {
        if (!dg_ld_cache_new(ld)) {
            st = dg_fail(ctx, DG_ERR_NOMEM, "loader: out of memory for the cache index");
            goto fail;
        }
    }
    if ((st = alloc_slots(ld)) != DG_OK)
        goto fail;
    if (o.workers) {
        ld->threads = dg_calloc((size_t)o.workers, sizeof(pthread_t));
        if (!ld->threads) {
            st = dg_fail(ctx, DG_ERR_NOMEM, "loader: out of memory");
            goto fail;
        }
        for (int i = 0; i < o.workers; i++) {
            if (pthread_create(&ld->threads[i], NULL, dg_ld_worker_main, ld) != 0) {
                st = dg_fail(ctx, DG_ERR_NOMEM, "loader: cannot start worker %d", i);
                goto fail;
            }
            ld->nthreads++;
        }
    }
    *out = ld;
    return DG_OK;
fail:
    dg_loader_free(ld);
    return st;
}

void dg_loader_free(dg_loader *ld)
{
    if (!ld)
        return;
    pthread_mutex_lock(&ld->mu);
    ld->stop = true;
    pthread_cond_broadcast(&ld->cv_work);
    pthread_mutex_unlock(&ld->mu);
    for (int i = 0; i < ld->nthreads; i++)
        pthread_join(ld->threads[i], NULL);
    dg_free(ld->threads);
    if (ld->slots)
        for (int i = 0; i < ld->nslots; i++) {
            if (ld->slots[i].page_locked)
                ld->o.slot_mem.free(ld->o.slot_mem.user, ld->slots[i].x);
            else
                dg_free(ld->slots[i].x);
        }
    dg_free(ld->slots);
    dg_ld_cache_free(ld);
    dg_free(ld->train);
    dg_free(ld->val);
    dg_free(ld->perm[0]);
    dg_free(ld->perm[1]);
    dg_free(ld->eps);
    dg_free(ld->bucket_text);
    cJSON_Delete(ld->dataset);
    pthread_mutex_destroy(&ld->mu);
    pthread_mutex_destroy(&ld->cache_mu);
    pthread_cond_destroy(&ld->cv_work);
    pthread_cond_destroy(&ld->cv_ready);
    dg_free(ld);
}

size_t dg_loader_batch_floats(const dg_loader *ld)
{
    return ld->slot_floats;
}

/* ---- reporting -------------------------------------------------------------- */

const char *dg_loader_bucket_text(const dg_loader *ld)
{
    return ld->bucket_text;
}

const char *dg_loader_bucket_id(const dg_loader *ld)
{
    return ld->bucket_id;
}

cJSON *dg_loader_bucket_json(const dg_loader *ld)
{
    cJSON *b = cJSON_Parse(ld->bucket_text);
    if (b)
        cJSON_AddStringToObject(b, "id", ld->bucket_id);
    return b;
}

void dg_loader_bad_counts(const dg_loader *ld, size_t *bad, size_t *seen)
{
    *bad = ld->bad;
    *seen = ld->seen;
}

void dg_loader_norm(const dg_loader *ld, float mean[3], float std[3])
{
    for (int c = 0; c < 3; c++) {
        mean[c] = ld->mean[c];
        std[c] = ld->std[c];
    }
}

static cJSON *stages_json(const double *t)
{
    cJSON *o = cJSON_CreateObject();
    for (int s = 0; s < S_COUNT; s++)
        cJSON_AddItemToObject(o, stage_names[s], dg_json_metric(t[s], true, "s"));
    return o;
}

cJSON *dg_loader_stats_json(const dg_loader *ld)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "source", dg_source_kind(ld->src));
    cJSON_AddNumberToObject(o, "samples", (double)ld->n_all);
    cJSON_AddNumberToObject(o, "train_samples", (double)ld->ntrain);
    cJSON_AddNumberToObject(o, "val_samples", (double)ld->nval);
    cJSON_AddNumberToObject(o, "classes", dg_source_classes(ld->src));
    cJSON_AddNumberToObject(o, "workers", ld->o.workers);
    cJSON_AddNumberToObject(o, "prefetch", ld->o.workers ? ld->nslots : 0);
    cJSON_AddNumberToObject(o, "batches", (double)ld->batches);
    cJSON_AddItemToObject(o, "stages", stages_json(ld->t));
    cJSON_AddItemToObject(o, "waited", dg_json_metric(ld->waited, true, "s"));
    cJSON *eps = cJSON_AddArrayToObject(o, "epochs");
    for (size_t i = 0; i < ld->neps; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "epoch", ld->eps[i].epoch);
        cJSON_AddNumberToObject(e, "batches", (double)ld->eps[i].batches);
        cJSON_AddItemToObject(e, "waited", dg_json_metric(ld->eps[i].waited, true, "s"));
        cJSON_AddItemToObject(e, "stages", stages_json(ld->eps[i].t));
        cJSON_AddItemToArray(eps, e);
    }
    cJSON *bad = cJSON_AddObjectToObject(o, "bad_samples");
    cJSON_AddStringToObject(bad, "mode", ld->o.on_bad_fail ? "fail" : "skip");
    cJSON_AddNumberToObject(bad, "count", (double)ld->bad);
    cJSON_AddNumberToObject(bad, "seen", (double)ld->seen);
    cJSON_AddNumberToObject(bad, "share", ld->seen ? (double)ld->bad / (double)ld->seen : 0);
    cJSON_AddNumberToObject(bad, "max_share", ld->o.max_bad_share);
    cJSON *msgs = cJSON_AddArrayToObject(bad, "messages");
    for (int i = 0; i < ld->nmsg; i++)
        cJSON_AddItemToArray(msgs, dg_json_string(ld->msgs[i]));
    cJSON *mem = cJSON_AddObjectToObject(o, "memory");
    cJSON_AddItemToObject(mem, "available",
                          dg_json_metric(ld->mem_available, ld->mem_known, "bytes"));
    cJSON_AddItemToObject(mem, "image_budget",
                          dg_json_metric((double)ld->image_budget, true, "bytes"));
    cJSON_AddItemToObject(mem, "fixed", dg_json_metric((double)ld->fixed_bytes, true, "bytes"));
    cJSON_AddNumberToObject(mem, "slot_count", ld->nslots);
    cJSON_AddItemToObject(
        mem, "slots", dg_json_metric((double)ld->nslots * (double)ld->slot_bytes, true, "bytes"));
    cJSON_AddItemToObject(
        mem, "page_locked",
        dg_json_metric((double)ld->slots_locked * (double)ld->slot_bytes, true, "bytes"));
    const dg_source_links *lk = dg_source_links_seen(ld->src);
    cJSON *links = cJSON_AddObjectToObject(o, "links");
    cJSON_AddNumberToObject(links, "class_folder_links", (double)lk->class_links);
    cJSON_AddNumberToObject(links, "duplicate_class_folders_skipped",
                            (double)lk->duplicate_classes);
    cJSON_AddNumberToObject(links, "loops_skipped", (double)lk->loops);
    cJSON_AddNumberToObject(links, "dangling_skipped", (double)lk->dangling);
    cJSON_AddNumberToObject(links, "files_under_several_classes", (double)lk->shared_files);
    cJSON *lm = cJSON_AddArrayToObject(links, "messages");
    for (int i = 0; i < lk->nmsg; i++)
        cJSON_AddItemToArray(lm, dg_json_string(lk->msgs[i]));
    /* The workers count and fill the cache under cache_mu, and may still be
     * filling batches ahead while this is read (a run that ended early). */
    dg_loader *m = (dg_loader *)ld; /* the lock only */
    pthread_mutex_lock(&m->cache_mu);
    size_t hits = ld->cache_hits, misses = ld->cache_misses, cached = ld->cache_bytes;
    pthread_mutex_unlock(&m->cache_mu);
    cJSON *cache = cJSON_AddObjectToObject(o, "cache");
    cJSON_AddBoolToObject(cache, "enabled", ld->cache != NULL);
    cJSON_AddNumberToObject(cache, "hits", (double)hits);
    cJSON_AddNumberToObject(cache, "misses", (double)misses);
    cJSON_AddItemToObject(cache, "bytes", dg_json_metric((double)cached, true, "bytes"));
    cJSON_AddItemToObject(cache, "cap",
                          dg_json_metric((double)ld->o.cache_cap, ld->cache != NULL, "bytes"));
    return o;
}

/* ---- option strings ---------------------------------------------------------- */

static bool parse_float(const char *s, char **end, double *v)
{
    *v = strtod(s, end);
    return *end != s && isfinite(*v);
}

dg_status dg_loader_parse_resolution(dg_ctx *ctx, const char *s, dg_loader_opts *o)
{
    o->nres = 0;
    const char *p = s;
    while (*p) {
        if (o->nres == DG_LOADER_MAX_RES)
            return dg_fail(ctx, DG_ERR_USAGE, "--resolution: at most %d entries",
                           DG_LOADER_MAX_RES);
        char *end;
        long h = strtol(p, &end, 10);
        if (end == p || *end != 'x')
            goto bad;
        p = end + 1;
        long w = strtol(p, &end, 10);
        if (end == p)
            goto bad;
        double wt = 1;
        p = end;
        if (*p == ':') {
            if (!parse_float(p + 1, &end, &wt) || !(wt > 0))
                goto bad;
            p = end;
        }
        if (h < 1 || w < 1 || h > 16384 || w > 16384)
            goto bad;
        o->res[o->nres++] = (dg_resolution){(int)h, (int)w, wt};
        if (*p == ',')
            p++;
        else if (*p)
            goto bad;
    }
    if (o->nres == 0)
        goto bad;
    return DG_OK;
bad:
    return dg_fail(ctx, DG_ERR_USAGE,
                   "--resolution wants HxW[:WEIGHT][,...] with sizes 1..16384 and positive "
                   "weights, got '%.100s'",
                   s);
}

dg_status dg_loader_parse_augment(dg_ctx *ctx, const char *s, dg_loader_opts *o)
{
    o->crop = o->flip = false;
    if (strcmp(s, "none") == 0 || !*s)
        return DG_OK;
    const char *p = s;
    while (*p) {
        size_t n = strcspn(p, ",");
        if (n == 4 && strncmp(p, "crop", 4) == 0)
            o->crop = true;
        else if (n == 4 && strncmp(p, "flip", 4) == 0)
            o->flip = true;
        else
            return dg_fail(ctx, DG_ERR_USAGE,
                           "--augment: unknown augmentation '%.*s' (crop, flip or none)",
                           (int)(n > 40 ? 40 : n), p);
        p += n;
        if (*p == ',')
            p++;
    }
    return DG_OK;
}

/* A comma list of 1..3 finite numbers. */
static int parse_list(const char *s, const char *stop, float *v)
{
    int n = 0;
    const char *p = s;
    while (p < stop) {
        if (n == 3)
            return -1;
        char *end;
        double d;
        if (!parse_float(p, &end, &d) || end > stop)
            return -1;
        v[n++] = (float)d;
        p = end;
        if (p < stop && *p == ',')
            p++;
        else if (p < stop)
            return -1;
    }
    return n;
}

dg_status dg_loader_parse_normalize(dg_ctx *ctx, const char *s, dg_loader_opts *o)
{
    if (strcmp(s, "none") == 0) {
        o->norm = DG_NORM_NONE;
        return DG_OK;
    }
    if (strcmp(s, "auto") == 0) {
        o->norm = DG_NORM_AUTO;
        return DG_OK;
    }
    const char *slash = strchr(s, '/');
    if (slash) {
        int nm = parse_list(s, slash, o->mean),
            ns = parse_list(slash + 1, slash + strlen(slash), o->std);
        bool pos = ns > 0;
        for (int i = 0; i < ns; i++)
            pos = pos && o->std[i] > 0;
        if (nm > 0 && nm == ns && pos) {
            o->norm = DG_NORM_GIVEN;
            o->norm_count = nm;
            return DG_OK;
        }
    }
    return dg_fail(
        ctx, DG_ERR_USAGE,
        "--normalize wants none, auto or MEAN/STD (e.g. 0.5/0.25 or 0.49,0.48,0.45/0.25,0.24,0.26; "
        "std positive), got '%.100s'",
        s);
}
