/* The batch loader: a ring of batch slots filled by worker threads in batch
 * order and handed to the consumer strictly in order. Every random choice
 * comes from a Philox stream keyed by (seed, purpose, epoch, index), so the
 * batches are the same for any worker count and any timing. */
#include "data/loader.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Philox streams. STREAM_ORDER matches the synthetic generator's (synth.c),
 * so the synthetic source's epochs are the fixture's original batches. */
#define STREAM_ORDER (3ull << 40)
#define STREAM_AUG (0x10ull << 56)
#define STREAM_RES (0x11ull << 56)
#define STREAM_SPLIT (0x12ull << 56)

enum { S_READ, S_DECODE, S_RESIZE, S_AUGMENT, S_NORM, S_COLLATE, S_COUNT };
static const char *const stage_names[S_COUNT] = {"read", "decode", "resize", "augment", "normalise", "collate"};

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY };

#define MSG_LEN 256

typedef struct slot {
    float *x;
    int32_t *y;
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

/* ---- resize ------------------------------------------------------------- */

typedef struct taps {
    int n;       /* taps per output */
    int *idx;    /* out * n source indices */
    float *wt;   /* out * n weights */
} taps;

/* Per-axis filter: bilinear (half-pixel centres, clamped) when growing,
 * box overlap when shrinking. */
static bool make_taps(int in, int out, taps *t)
{
    double scale = (double)in / out;
    t->n = out >= in ? 2 : (int)ceil(scale) + 1;
    t->idx = dg_malloc(sizeof(int) * (size_t)out * t->n);
    t->wt = dg_malloc(sizeof(float) * (size_t)out * t->n);
    if (!t->idx || !t->wt)
        return false;
    for (int o = 0; o < out; o++) {
        int *ix = t->idx + (size_t)o * t->n;
        float *w = t->wt + (size_t)o * t->n;
        for (int k = 0; k < t->n; k++) {
            ix[k] = 0;
            w[k] = 0;
        }
        if (out >= in) {
            double s = (o + 0.5) * scale - 0.5;
            if (s < 0)
                s = 0;
            int i0 = (int)s;
            if (i0 > in - 1)
                i0 = in - 1;
            int i1 = i0 + 1 < in ? i0 + 1 : in - 1;
            double f = s - i0;
            ix[0] = i0;
            ix[1] = i1;
            w[0] = (float)(1 - f);
            w[1] = (float)f;
        } else {
            double a = o * scale, b = (o + 1) * scale;
            int k = 0;
            for (int i = (int)floor(a); i < b && i < in && k < t->n; i++, k++) {
                double lo = i > a ? i : a, hi = i + 1 < b ? i + 1 : b;
                ix[k] = i;
                w[k] = (float)((hi - lo) / scale);
            }
        }
    }
    return true;
}

static void free_taps(taps *t)
{
    dg_free(t->idx);
    dg_free(t->wt);
}

void dg_resize(const float *src, int c, int h, int w, float *dst, int oh, int ow)
{
    if (h == oh && w == ow) {
        memcpy(dst, src, sizeof(float) * (size_t)c * h * w);
        return;
    }
    taps tx = {0}, ty = {0};
    float *tmp = dg_malloc(sizeof(float) * (size_t)c * h * ow);
    if (!tmp || !make_taps(w, ow, &tx) || !make_taps(h, oh, &ty)) {
        /* Out of memory: nearest neighbour needs nothing extra. */
        for (int ch = 0; ch < c; ch++)
            for (int y = 0; y < oh; y++)
                for (int x = 0; x < ow; x++)
                    dst[((size_t)ch * oh + y) * ow + x] =
                        src[((size_t)ch * h + (size_t)y * h / oh) * w + (size_t)x * w / ow];
        dg_free(tmp);
        free_taps(&tx);
        free_taps(&ty);
        return;
    }
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < h; y++) {
            const float *row = src + ((size_t)ch * h + y) * w;
            float *o = tmp + ((size_t)ch * h + y) * ow;
            for (int x = 0; x < ow; x++) {
                float acc = 0;
                for (int k = 0; k < tx.n; k++)
                    acc += tx.wt[(size_t)x * tx.n + k] * row[tx.idx[(size_t)x * tx.n + k]];
                o[x] = acc;
            }
        }
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < oh; y++) {
            float *o = dst + ((size_t)ch * oh + y) * ow;
            for (int x = 0; x < ow; x++)
                o[x] = 0;
            for (int k = 0; k < ty.n; k++) {
                float wk = ty.wt[(size_t)y * ty.n + k];
                if (wk == 0)
                    continue;
                const float *r = tmp + ((size_t)ch * h + ty.idx[(size_t)y * ty.n + k]) * ow;
                for (int x = 0; x < ow; x++)
                    o[x] += wk * r[x];
            }
        }
    dg_free(tmp);
    free_taps(&tx);
    free_taps(&ty);
}

/* ---- order ---------------------------------------------------------------- */

/* Fisher-Yates over list with the epoch's stream (as synth.c's make_order). */
static void shuffle(size_t *list, size_t n, uint64_t seed, uint64_t stream)
{
    dg_rng r;
    dg_rng_init(&r, seed, stream);
    uint32_t buf[4];
    for (size_t i = n - 1; i > 0 && n > 1; i--) {
        dg_rng_next4(&r, buf);
        uint64_t v = ((uint64_t)buf[0] << 32) | buf[1];
        size_t j = (size_t)(v % (i + 1));
        size_t t = list[i];
        list[i] = list[j];
        list[j] = t;
    }
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

/* The sample list of (split, epoch): train shuffled per epoch, val in order.
 * Called with mu held. */
static const size_t *epoch_list(dg_loader *ld, dg_split sp, int epoch, size_t *count)
{
    if (sp == DG_SPLIT_VAL) {
        *count = ld->nval;
        return ld->val;
    }
    *count = ld->ntrain;
    int k = epoch & 1;
    if (ld->perm_epoch[k] != epoch) {
        memcpy(ld->perm[k], ld->train, ld->ntrain * sizeof(size_t));
        shuffle(ld->perm[k], ld->ntrain, ld->o.seed, STREAM_ORDER + (uint64_t)epoch);
        ld->perm_epoch[k] = epoch;
    }
    return ld->perm[k];
}

static int pick_res(const dg_loader *ld, int epoch, int step)
{
    if (ld->o.nres == 1)
        return 0;
    dg_rng r;
    dg_rng_init(&r, ld->o.seed, STREAM_RES | ((uint64_t)(uint32_t)epoch << 32) | (uint32_t)step);
    uint32_t b[4];
    dg_rng_next4(&r, b);
    double total = 0;
    for (int i = 0; i < ld->o.nres; i++)
        total += ld->o.res[i].weight;
    double u = (b[0] >> 8) * (1.0 / 16777216.0) * total, acc = 0;
    for (int i = 0; i < ld->o.nres; i++) {
        acc += ld->o.res[i].weight;
        if (u < acc)
            return i;
    }
    return ld->o.nres - 1;
}

/* ---- one sample ------------------------------------------------------------ */

typedef struct scratch {
    float *a, *b;
} scratch;

/* Reads, resizes (or takes from the cache), augments and normalises sample idx
 * into dst (c*h*w floats); *label gets its label. DG_ERR_FORMAT with err for a
 * bad sample. */
static dg_status load_sample(dg_loader *ld, dg_split sp, int epoch, size_t idx, int ri, slot *sl,
                             scratch *sc, float *dst, int32_t *label, char *err, size_t errlen)
{
    int c = ld->o.channels, h = ld->o.res[ri].h, w = ld->o.res[ri].w;
    size_t chw = (size_t)c * h * w;
    const float *cur = NULL;
    dg_image img = {0};
    size_t key = (size_t)ri * ld->n_all + idx;
    if (ld->cache) {
        pthread_mutex_lock(&ld->cache_mu);
        if (ld->cache[key]) {
            cur = ld->cache[key];
            *label = ld->cache_y[key];
            ld->cache_hits++;
        } else {
            ld->cache_misses++;
        }
        pthread_mutex_unlock(&ld->cache_mu);
    }
    if (!cur) {
        dg_read_times rt = {0, 0};
        dg_status st = ld->o.read ? ld->o.read(ld->o.read_user, ld->src, idx, &img, &rt, err, errlen)
                                  : dg_source_read(ld->src, idx, &img, &rt, err, errlen);
        sl->t[S_READ] += rt.read;
        sl->t[S_DECODE] += rt.decode;
        if (st != DG_OK) {
            dg_image_free(&img);
            return st;
        }
        if (img.c != c || img.h < 1 || img.w < 1 || !img.data) {
            snprintf(err, errlen, "sample has %d channels (%dx%d), the loader wants %d", img.c, img.h,
                     img.w, c);
            dg_image_free(&img);
            return DG_ERR_FORMAT;
        }
        *label = img.label;
        double t0 = dg_now();
        if (img.h == h && img.w == w) {
            cur = img.data;
        } else {
            dg_resize(img.data, c, img.h, img.w, sc->a, h, w);
            cur = sc->a;
        }
        sl->t[S_RESIZE] += dg_now() - t0;
        if (ld->cache) {
            pthread_mutex_lock(&ld->cache_mu);
            if (!ld->cache[key] && ld->cache_bytes + chw * sizeof(float) <= ld->cache_cap) {
                float *keep = dg_malloc(chw * sizeof(float));
                if (keep) {
                    memcpy(keep, cur, chw * sizeof(float));
                    ld->cache[key] = keep;
                    ld->cache_y[key] = *label;
                    ld->cache_bytes += chw * sizeof(float);
                }
            }
            pthread_mutex_unlock(&ld->cache_mu);
        }
    }
    bool aug = sp == DG_SPLIT_TRAIN && (ld->o.crop || ld->o.flip);
    if (aug) {
        double t0 = dg_now();
        dg_rng r;
        dg_rng_init(&r, ld->o.seed, STREAM_AUG | ((uint64_t)(uint16_t)epoch << 40) | (idx & 0xffffffffffull));
        uint32_t b[4];
        dg_rng_next4(&r, b);
        /* cur is read-only unless it is scratch a (a resize result). */
        if (ld->o.crop) {
            /* Random-resized-lite: grow to 1.125x into b, crop back into a. */
            int H = (int)lround(h * 1.125), W = (int)lround(w * 1.125);
            dg_resize(cur, c, h, w, sc->b, H, W);
            int oy = (int)(b[0] % (uint32_t)(H - h + 1)), ox = (int)(b[1] % (uint32_t)(W - w + 1));
            for (int ch = 0; ch < c; ch++)
                for (int y = 0; y < h; y++)
                    memcpy(sc->a + ((size_t)ch * h + y) * w, sc->b + ((size_t)ch * H + oy + y) * W + ox,
                           sizeof(float) * (size_t)w);
            cur = sc->a;
        }
        if (ld->o.flip && (b[2] & 1)) {
            if (cur != sc->a) {
                memcpy(sc->a, cur, chw * sizeof(float));
                cur = sc->a;
            }
            for (size_t row = 0; row < (size_t)c * h; row++) {
                float *p = sc->a + row * w;
                for (int x = 0; x < w / 2; x++) {
                    float t = p[x];
                    p[x] = p[w - 1 - x];
                    p[w - 1 - x] = t;
                }
            }
        }
        sl->t[S_AUGMENT] += dg_now() - t0;
    }
    double t0 = dg_now();
    if (ld->o.norm != DG_NORM_NONE) {
        for (int ch = 0; ch < c; ch++) {
            float m = ld->mean[ch], is = 1.0f / ld->std[ch];
            const float *s = cur + (size_t)ch * h * w;
            float *d = dst + (size_t)ch * h * w;
            for (size_t i = 0; i < (size_t)h * w; i++)
                d[i] = (s[i] - m) * is;
        }
        sl->t[S_NORM] += dg_now() - t0;
    } else {
        memcpy(dst, cur, chw * sizeof(float));
        sl->t[S_COLLATE] += dg_now() - t0;
    }
    dg_image_free(&img);
    return DG_OK;
}

/* Fills batch g of the run into sl. Bad samples (skip mode) are replaced by
 * the next good sample of the epoch's list, so batches stay full and the
 * same on every run. */
static void fill_batch(dg_loader *ld, int64_t g, slot *sl, dg_split sp, int first_epoch, int steps)
{
    int epoch = first_epoch + (int)(g / steps), step = (int)(g % steps);
    int ri = pick_res(ld, epoch, step);
    int c = ld->o.channels, h = ld->o.res[ri].h, w = ld->o.res[ri].w, n = ld->o.batch;
    size_t chw = (size_t)c * h * w, count;
    sl->h = h;
    sl->w = w;
    sl->st = DG_OK;
    sl->err[0] = '\0';
    sl->bad = sl->seen = 0;
    sl->nmsg = 0;
    for (int s = 0; s < S_COUNT; s++)
        sl->t[s] = 0;
    pthread_mutex_lock(&ld->mu);
    const size_t *list = epoch_list(ld, sp, epoch, &count);
    pthread_mutex_unlock(&ld->mu);
    scratch sc = {dg_malloc(ld->scratch_floats * sizeof(float)), dg_malloc(ld->scratch_floats * sizeof(float))};
    if (!sc.a || !sc.b) {
        sl->st = DG_ERR_NOMEM;
        snprintf(sl->err, sizeof sl->err, "loader: out of memory for a batch");
        goto out;
    }
    for (int j = 0; j < n && sl->st == DG_OK; j++) {
        size_t p = ((size_t)step * n + j) % count;
        for (size_t tries = 0;; tries++) {
            if (tries >= count) {
                sl->st = DG_ERR_FORMAT;
                snprintf(sl->err, sizeof sl->err, "loader: no readable sample in the %s split",
                         sp == DG_SPLIT_VAL ? "validation" : "training");
                break;
            }
            size_t idx = list[(p + tries) % count];
            char err[MSG_LEN - 32] = "";
            sl->seen++;
            dg_status st = load_sample(ld, sp, epoch, idx, ri, sl, &sc, sl->x + (size_t)j * chw,
                                       &sl->y[j], err, sizeof err);
            if (st == DG_OK)
                break;
            if (st != DG_ERR_FORMAT || ld->o.on_bad_fail) {
                sl->st = st;
                snprintf(sl->err, sizeof sl->err, "bad sample %zu: %s", idx, err[0] ? err : dg_status_name(st));
                if (st == DG_ERR_FORMAT)
                    sl->bad++;
                break;
            }
            sl->bad++;
            if (sl->nmsg < DG_LOADER_MAX_BAD_MSGS)
                snprintf(sl->msgs[sl->nmsg++], MSG_LEN, "sample %zu: %s", idx, err);
        }
    }
out:
    dg_free(sc.a);
    dg_free(sc.b);
}

/* ---- workers ---------------------------------------------------------------- */

static int epoch_of(const dg_loader *ld, int64_t g)
{
    return (int)(g / ld->steps);
}

/* A worker may take batch next when its slot is free and it is at most one
 * epoch ahead of the consumer (two permutations are live at most). */
static bool can_take(const dg_loader *ld)
{
    return ld->next < ld->total && ld->next < ld->consumed + ld->nslots &&
           epoch_of(ld, ld->next) <= epoch_of(ld, ld->consumed) + 1;
}

static void *worker_main(void *arg)
{
    dg_loader *ld = arg;
    pthread_mutex_lock(&ld->mu);
    for (;;) {
        while (!ld->stop && !can_take(ld))
            pthread_cond_wait(&ld->cv_work, &ld->mu);
        if (ld->stop)
            break;
        int64_t g = ld->next++;
        slot *sl = &ld->slots[g % ld->nslots];
        sl->state = SLOT_FILLING;
        uint64_t gen = ld->gen;
        dg_split sp = ld->sp;
        int first = ld->first_epoch, steps = ld->steps;
        ld->busy++;
        pthread_mutex_unlock(&ld->mu);
        fill_batch(ld, g, sl, sp, first, steps);
        pthread_mutex_lock(&ld->mu);
        ld->busy--;
        if (gen == ld->gen) {
            sl->g = g;
            sl->state = SLOT_READY;
        }
        pthread_cond_broadcast(&ld->cv_ready);
    }
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

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
        dg_status st = ld->o.read ? ld->o.read(ld->o.read_user, ld->src, idx, &img, &rt, err, sizeof err)
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
        return dg_fail(ld->ctx, DG_ERR_FORMAT, "loader: normalise auto: no readable training sample");
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

dg_status dg_loader_new(dg_ctx *ctx, dg_source *src, const dg_loader_opts *opts, dg_loader **out)
{
    *out = NULL;
    dg_loader_opts o = *opts;
    if (o.batch < 1 || (o.channels != 1 && o.channels != 3))
        return dg_fail(ctx, DG_ERR_USAGE, "loader: batch must be positive and channels 1 or 3");
    if (o.nres < 1 || o.nres > DG_LOADER_MAX_RES)
        return dg_fail(ctx, DG_ERR_USAGE, "loader: 1..%d resolutions, got %d", DG_LOADER_MAX_RES, o.nres);
    for (int i = 0; i < o.nres; i++)
        if (o.res[i].h < 1 || o.res[i].w < 1 || o.res[i].h > 16384 || o.res[i].w > 16384 ||
            !(o.res[i].weight > 0) || !isfinite(o.res[i].weight))
            return dg_fail(ctx, DG_ERR_USAGE, "loader: resolution %dx%d:%g is out of range", o.res[i].h,
                           o.res[i].w, o.res[i].weight);
    qsort(o.res, (size_t)o.nres, sizeof o.res[0], cmp_res);
    if (!(o.val_split >= 0 && o.val_split < 1))
        return dg_fail(ctx, DG_ERR_USAGE, "loader: the validation share must be in [0, 1), got %g", o.val_split);
    if (o.max_bad_share < 0)
        o.max_bad_share = 0.01;
    if (!(o.max_bad_share <= 1))
        return dg_fail(ctx, DG_ERR_USAGE, "loader: the bad-sample share must be in [0, 1]");
    if (o.norm == DG_NORM_GIVEN) {
        if (o.norm_count != 1 && o.norm_count != o.channels)
            return dg_fail(ctx, DG_ERR_USAGE,
                           "loader: --normalize gives %d values per list, the model has %d channel%s",
                           o.norm_count, o.channels, o.channels > 1 ? "s" : "");
        for (int ch = 0; ch < 3; ch++) {
            if (o.norm_count == 1) {
                o.mean[ch] = o.mean[0];
                o.std[ch] = o.std[0];
            }
            if (ch < o.channels && !(o.std[ch] > 0 && isfinite(o.std[ch]) && isfinite(o.mean[ch])))
                return dg_fail(ctx, DG_ERR_USAGE, "loader: normalisation std must be positive and finite");
        }
    }
    if (o.workers < 0)
        o.workers = 2;
    if (o.workers > 256)
        return dg_fail(ctx, DG_ERR_USAGE, "loader: at most 256 workers");
    if (o.prefetch <= 0)
        o.prefetch = o.workers ? 2 * o.workers : 1;
    if (o.prefetch < o.workers)
        o.prefetch = o.workers;
    if (!o.cache_cap)
        o.cache_cap = (size_t)2 << 30;
    size_t n = dg_source_count(src);
    if (n == 0)
        return dg_fail(ctx, DG_ERR_FORMAT, "loader: the data set has no samples");

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
    dg_status st = DG_OK;

    /* Split: the last val_split share of a seeded permutation is held out;
     * both lists are kept in index order. */
    ld->nval = (size_t)floor(o.val_split * (double)n);
    if (o.val_split > 0 && ld->nval == 0)
        ld->nval = 1;
    ld->ntrain = n - ld->nval;
    if (ld->ntrain == 0) {
        st = dg_fail(ctx, DG_ERR_USAGE, "loader: --val-split %g leaves no training samples of %zu",
                     o.val_split, n);
        goto fail;
    }
    ld->train = dg_malloc(n * sizeof(size_t));
    ld->val = dg_malloc((ld->nval ? ld->nval : 1) * sizeof(size_t));
    ld->perm[0] = dg_malloc(ld->ntrain * sizeof(size_t));
    ld->perm[1] = dg_malloc(ld->ntrain * sizeof(size_t));
    if (!ld->train || !ld->val || !ld->perm[0] || !ld->perm[1]) {
        st = dg_fail(ctx, DG_ERR_NOMEM, "loader: out of memory for %zu sample indices", n);
        goto fail;
    }
    for (size_t i = 0; i < n; i++)
        ld->train[i] = i;
    if (ld->nval) {
        shuffle(ld->train, n, o.seed, STREAM_SPLIT);
        memcpy(ld->val, ld->train + ld->ntrain, ld->nval * sizeof(size_t));
        qsort(ld->train, ld->ntrain, sizeof(size_t), cmp_size);
        qsort(ld->val, ld->nval, sizeof(size_t), cmp_size);
    }

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
    /* Scratch holds the largest of a resized sample and its 1.125x growth. */
    ld->scratch_floats = (size_t)o.channels * (size_t)lround(ld->maxh * 1.125 + 1) *
                         (size_t)lround(ld->maxw * 1.125 + 1);

    ld->dataset = dg_source_identity(src);
    ld->bucket_text = dg_bucket_text(&ld->o, ld->mean, ld->std, ld->dataset);
    if (!ld->bucket_text) {
        st = dg_fail(ctx, DG_ERR_NOMEM, "loader: out of memory for the bucket");
        goto fail;
    }
    dg_sha256_hex(ld->bucket_text, strlen(ld->bucket_text), ld->bucket_id);

    if (o.cache) {
        ld->cache = dg_calloc((size_t)o.nres * n, sizeof(float *));
        ld->cache_y = dg_calloc((size_t)o.nres * n, sizeof(int32_t));
        ld->cache_cap = o.cache_cap;
        if (!ld->cache || !ld->cache_y) {
            st = dg_fail(ctx, DG_ERR_NOMEM, "loader: out of memory for the cache index");
            goto fail;
        }
    }
    ld->nslots = o.workers ? o.prefetch : 1;
    ld->slots = dg_calloc((size_t)ld->nslots, sizeof(slot));
    if (!ld->slots) {
        st = dg_fail(ctx, DG_ERR_NOMEM, "loader: out of memory");
        goto fail;
    }
    for (int i = 0; i < ld->nslots; i++) {
        ld->slots[i].x = dg_malloc(ld->slot_floats * sizeof(float));
        ld->slots[i].y = dg_malloc((size_t)o.batch * sizeof(int32_t));
        if (!ld->slots[i].x || !ld->slots[i].y) {
            st = dg_fail(ctx, DG_ERR_NOMEM, "loader: out of memory for %d batches of %zu floats",
                         ld->nslots, ld->slot_floats);
            goto fail;
        }
    }
    if (o.workers) {
        ld->threads = dg_calloc((size_t)o.workers, sizeof(pthread_t));
        if (!ld->threads) {
            st = dg_fail(ctx, DG_ERR_NOMEM, "loader: out of memory");
            goto fail;
        }
        for (int i = 0; i < o.workers; i++) {
            if (pthread_create(&ld->threads[i], NULL, worker_main, ld) != 0) {
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
            dg_free(ld->slots[i].x);
            dg_free(ld->slots[i].y);
        }
    dg_free(ld->slots);
    if (ld->cache)
        for (size_t i = 0; i < (size_t)ld->o.nres * ld->n_all; i++)
            dg_free(ld->cache[i]);
    dg_free(ld->cache);
    dg_free(ld->cache_y);
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

size_t dg_loader_count(const dg_loader *ld, dg_split sp)
{
    return sp == DG_SPLIT_VAL ? ld->nval : ld->ntrain;
}

size_t dg_loader_batch_floats(const dg_loader *ld)
{
    return ld->slot_floats;
}

/* ---- running ----------------------------------------------------------------- */

dg_status dg_loader_start(dg_loader *ld, dg_split sp, int first_epoch, int epochs, int steps)
{
    size_t count = dg_loader_count(ld, sp);
    if (count == 0)
        return dg_fail(ld->ctx, DG_ERR_USAGE, "loader: the %s split is empty",
                       sp == DG_SPLIT_VAL ? "validation" : "training");
    if (steps <= 0)
        steps = (int)((count + (size_t)ld->o.batch - 1) / (size_t)ld->o.batch);
    if (epochs < 1 || first_epoch < 0 || first_epoch > 65535 - epochs)
        return dg_fail(ld->ctx, DG_ERR_USAGE, "loader: epochs must be in 0..65535");
    pthread_mutex_lock(&ld->mu);
    ld->gen++;
    ld->total = 0; /* no new work */
    while (ld->busy > 0)
        pthread_cond_wait(&ld->cv_ready, &ld->mu);
    for (int i = 0; i < ld->nslots; i++)
        ld->slots[i].state = SLOT_FREE;
    ld->sp = sp;
    ld->first_epoch = first_epoch;
    ld->steps = steps;
    ld->next = ld->consumed = 0;
    ld->total = (int64_t)epochs * steps;
    ld->perm_epoch[0] = ld->perm_epoch[1] = -1;
    ld->failed = false;
    pthread_cond_broadcast(&ld->cv_work);
    pthread_mutex_unlock(&ld->mu);
    return DG_OK;
}

static epoch_stat *epoch_entry(dg_loader *ld, int epoch)
{
    for (size_t i = ld->neps; i-- > 0;)
        if (ld->eps[i].epoch == epoch)
            return &ld->eps[i];
    if (ld->neps == ld->cap_eps) {
        size_t cap = ld->cap_eps ? 2 * ld->cap_eps : 16;
        epoch_stat *p = dg_realloc(ld->eps, cap * sizeof *p);
        if (!p)
            return NULL;
        ld->eps = p;
        ld->cap_eps = cap;
    }
    epoch_stat *e = &ld->eps[ld->neps++];
    memset(e, 0, sizeof *e);
    e->epoch = epoch;
    return e;
}

dg_status dg_loader_next(dg_loader *ld, float *x, int32_t *y, int *h, int *w)
{
    double t0 = dg_now();
    if (ld->failed)
        return dg_fail(ld->ctx, DG_ERR_USAGE, "loader: a previous batch failed");
    pthread_mutex_lock(&ld->mu);
    if (ld->consumed >= ld->total) {
        pthread_mutex_unlock(&ld->mu);
        return dg_fail(ld->ctx, DG_ERR_USAGE, "loader: no batches left (call dg_loader_start)");
    }
    int64_t g = ld->consumed;
    slot *sl = &ld->slots[g % ld->nslots];
    if (!ld->nthreads) {
        pthread_mutex_unlock(&ld->mu);
        fill_batch(ld, g, sl, ld->sp, ld->first_epoch, ld->steps);
    } else {
        while (!(sl->state == SLOT_READY && sl->g == g))
            pthread_cond_wait(&ld->cv_ready, &ld->mu);
        pthread_mutex_unlock(&ld->mu);
    }
    int epoch = ld->first_epoch + (int)(g / ld->steps);
    bool epoch_end = (g + 1) % ld->steps == 0;
    epoch_stat *es = epoch_entry(ld, epoch);
    for (int s = 0; s < S_COUNT; s++) {
        ld->t[s] += sl->t[s];
        if (es)
            es->t[s] += sl->t[s];
    }
    ld->bad += sl->bad;
    ld->seen += sl->seen;
    for (int i = 0; i < sl->nmsg && ld->nmsg < DG_LOADER_MAX_BAD_MSGS; i++)
        memcpy(ld->msgs[ld->nmsg++], sl->msgs[i], MSG_LEN);
    dg_status st = DG_OK;
    if (sl->st != DG_OK) {
        st = dg_fail(ld->ctx, sl->st, "%s", sl->err);
    } else if ((ld->seen >= 1000 || epoch_end) && (double)ld->bad > ld->o.max_bad_share * (double)ld->seen) {
        st = dg_fail(ld->ctx, DG_ERR_FORMAT,
                     "loader: %zu of %zu samples read were bad (%.2f%%), above the allowed %.2f%%%s%s",
                     ld->bad, ld->seen, 100.0 * (double)ld->bad / (double)ld->seen,
                     100.0 * ld->o.max_bad_share, ld->nmsg ? "; first: " : "", ld->nmsg ? ld->msgs[0] : "");
    } else {
        size_t floats = (size_t)ld->o.batch * ld->o.channels * sl->h * sl->w;
        double tc = dg_now();
        memcpy(x, sl->x, floats * sizeof(float));
        memcpy(y, sl->y, (size_t)ld->o.batch * sizeof(int32_t));
        *h = sl->h;
        *w = sl->w;
        double dc = dg_now() - tc;
        ld->t[S_COLLATE] += dc;
        if (es)
            es->t[S_COLLATE] += dc;
    }
    if (st != DG_OK)
        ld->failed = true;
    pthread_mutex_lock(&ld->mu);
    sl->state = SLOT_FREE;
    ld->consumed++;
    pthread_cond_broadcast(&ld->cv_work);
    pthread_mutex_unlock(&ld->mu);
    double waited = dg_now() - t0;
    ld->waited += waited;
    ld->batches++;
    if (es) {
        es->waited += waited;
        es->batches++;
    }
    return st;
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
        cJSON_AddItemToArray(msgs, cJSON_CreateString(ld->msgs[i]));
    cJSON *cache = cJSON_AddObjectToObject(o, "cache");
    cJSON_AddBoolToObject(cache, "enabled", ld->cache != NULL);
    cJSON_AddNumberToObject(cache, "hits", (double)ld->cache_hits);
    cJSON_AddNumberToObject(cache, "misses", (double)ld->cache_misses);
    cJSON_AddItemToObject(cache, "bytes", dg_json_metric((double)ld->cache_bytes, true, "bytes"));
    cJSON_AddItemToObject(cache, "cap", dg_json_metric((double)ld->o.cache_cap, ld->cache != NULL, "bytes"));
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
            return dg_fail(ctx, DG_ERR_USAGE, "--resolution: at most %d entries", DG_LOADER_MAX_RES);
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
                   "--resolution wants HxW[:WEIGHT][,...] with sizes 1..16384 and positive weights, got '%.100s'", s);
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
            return dg_fail(ctx, DG_ERR_USAGE, "--augment: unknown augmentation '%.*s' (crop, flip or none)",
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
        int nm = parse_list(s, slash, o->mean), ns = parse_list(slash + 1, slash + strlen(slash), o->std);
        bool pos = ns > 0;
        for (int i = 0; i < ns; i++)
            pos = pos && o->std[i] > 0;
        if (nm > 0 && nm == ns && pos) {
            o->norm = DG_NORM_GIVEN;
            o->norm_count = nm;
            return DG_OK;
        }
    }
    return dg_fail(ctx, DG_ERR_USAGE,
                   "--normalize wants none, auto or MEAN/STD (e.g. 0.5/0.25 or 0.49,0.48,0.45/0.25,0.24,0.26; "
                   "std positive), got '%.100s'", s);
}
