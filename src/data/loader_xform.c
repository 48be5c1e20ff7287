/* The loader's per-sample stages: read and decode (through the source),
 * resize (bilinear up, area down), crop and flip (train split only, seeded
 * per (epoch, sample)), normalise, collate into the batch. */
#include "data/loader_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- resize ------------------------------------------------------------- */

typedef struct taps {
    int n;     /* taps per output */
    int *idx;  /* out * n source indices */
    float *wt; /* out * n weights */
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

/* ---- crop and flip -------------------------------------------------------- */

/* Crops (grow to 1.125x, crop back) and flips sample idx of epoch, seeded by
 * (seed, epoch, idx); cur is read-only unless it is sc->a. The result (cur or
 * sc->a). */
static const float *augment(const dg_loader *ld, int epoch, size_t idx, int c, int h, int w,
                            const float *cur, scratch *sc)
{
    size_t chw = (size_t)c * h * w;
    dg_rng r;
    dg_rng_init(&r, ld->o.seed,
                STREAM_AUG | ((uint64_t)(uint16_t)epoch << 40) | (idx & 0xffffffffffull));
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
    return cur;
}

/* ---- normalise and collate ------------------------------------------------ */

/* Writes cur into dst, normalised per channel unless normalisation is off;
 * the time goes to the normalise or the collate stage. */
static void normalise(const dg_loader *ld, int c, int h, int w, const float *cur, float *dst,
                      slot *sl)
{
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
        memcpy(dst, cur, (size_t)c * h * w * sizeof(float));
        sl->t[S_COLLATE] += dg_now() - t0;
    }
}

/* ---- a whole batch in place ------------------------------------------------ */

bool dg_ld_fill_in_place(dg_loader *ld, dg_split sp, int ri, slot *sl, const size_t *list,
                         size_t count, size_t first)
{
    int c = ld->o.channels, h = ld->o.res[ri].h, w = ld->o.res[ri].w, n = ld->o.batch;
    if (!ld->peek || h != ld->peek_h || w != ld->peek_w ||
        (sp == DG_SPLIT_TRAIN && (ld->o.crop || ld->o.flip)))
        return false;
    size_t chw = (size_t)c * h * w, hw = (size_t)h * w;
    double t0 = dg_now();
    for (int j = 0; j < n; j++) {
        const float *src = dg_source_peek(ld->src, list[(first + (size_t)j) % count], &sl->y[j]);
        if (!src)
            return false; /* the sample path fills the whole batch again */
        float *dst = sl->x + (size_t)j * chw;
        if (ld->o.norm == DG_NORM_NONE) {
            memcpy(dst, src, chw * sizeof(float));
            continue;
        }
        for (int ch = 0; ch < c; ch++) { /* as normalise() */
            float m = ld->mean[ch], is = 1.0f / ld->std[ch];
            const float *in = src + (size_t)ch * hw;
            float *d = dst + (size_t)ch * hw;
            for (size_t i = 0; i < hw; i++)
                d[i] = (in[i] - m) * is;
        }
    }
    sl->t[ld->o.norm == DG_NORM_NONE ? S_COLLATE : S_NORM] += dg_now() - t0;
    sl->seen += (size_t)n;
    return true;
}

/* ---- one sample ------------------------------------------------------------ */

dg_status dg_ld_load_sample(dg_loader *ld, dg_split sp, int epoch, size_t idx, int ri, slot *sl,
                            scratch *sc, float *dst, int32_t *label, char *err, size_t errlen)
{
    int c = ld->o.channels, h = ld->o.res[ri].h, w = ld->o.res[ri].w;
    size_t chw = (size_t)c * h * w;
    const float *cur = NULL;
    dg_image img = {0};
    size_t key = (size_t)ri * ld->n_all + idx;
    if (ld->peek && (cur = dg_source_peek(ld->src, idx, label)) != NULL &&
        (ld->peek_h != h || ld->peek_w != w)) {
        double t0 = dg_now();
        dg_resize(cur, c, ld->peek_h, ld->peek_w, sc->a, h, w);
        cur = sc->a;
        sl->t[S_RESIZE] += dg_now() - t0;
    }
    if (!cur && ld->cache)
        cur = dg_ld_cache_get(ld, key, label);
    if (!cur) {
        dg_read_times rt = {0, 0};
        dg_status st = ld->o.read
                           ? ld->o.read(ld->o.read_user, ld->src, idx, &img, &rt, err, errlen)
                           : dg_source_read(ld->src, idx, &img, &rt, err, errlen);
        sl->t[S_READ] += rt.read;
        sl->t[S_DECODE] += rt.decode;
        if (st != DG_OK) {
            dg_image_free(&img);
            return st;
        }
        if (img.c != c || img.h < 1 || img.w < 1 || !img.data) {
            snprintf(err, errlen, "sample has %d channels (%dx%d), the loader wants %d", img.c,
                     img.h, img.w, c);
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
        if (ld->cache)
            dg_ld_cache_put(ld, key, cur, chw, *label);
    }
    if (sp == DG_SPLIT_TRAIN && (ld->o.crop || ld->o.flip)) {
        double t0 = dg_now();
        cur = augment(ld, epoch, idx, c, h, w, cur, sc);
        sl->t[S_AUGMENT] += dg_now() - t0;
    }
    normalise(ld, c, h, w, cur, dst, sl);
    dg_image_free(&img);
    return DG_OK;
}
