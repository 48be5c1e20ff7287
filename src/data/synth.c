#include "data/synth.h"

#include <math.h>
#include <string.h>

/* Streams of the generator; samples use one stream each so any sample can be
 * made alone, in any order, on any thread. */
#define STREAM_PATTERN (1ull << 40)
#define STREAM_SAMPLE (2ull << 40)
#define STREAM_ORDER (3ull << 40)

/* Class k's pattern: per channel a sum of three plane waves with frequencies
 * and phases from the seed, scaled to roughly [-1, 1]. */
static void make_pattern(uint64_t seed, int k, int c, int h, int w, float *dst)
{
    dg_rng r;
    dg_rng_init(&r, seed, STREAM_PATTERN + (uint64_t)k);
    for (int ch = 0; ch < c; ch++) {
        float p[12];
        dg_rng_uniform(&r, p, 12, 0.0f, 1.0f);
        float *plane = dst + (size_t)ch * h * w;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                float v = 0;
                for (int t = 0; t < 3; t++) {
                    float fy = 0.5f + 2.5f * p[4 * t], fx = 0.5f + 2.5f * p[4 * t + 1];
                    float ph = 6.2831853f * p[4 * t + 2], amp = 0.5f + 0.5f * p[4 * t + 3];
                    v += amp * sinf(6.2831853f * (fy * y / h + fx * x / w) + ph);
                }
                plane[(size_t)y * w + x] = v / 2.0f;
            }
    }
}

dg_status dg_synth_new(dg_ctx *ctx, uint64_t seed, int classes, int c, int h, int w, size_t samples,
                       dg_synth **out)
{
    *out = NULL;
    size_t chw = (size_t)c * h * w;
    if (samples == 0 || chw == 0 || samples > SIZE_MAX / sizeof(float) / chw)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "synthetic data: %zu samples of %zu values is out of range", samples, chw);
    dg_synth *s = dg_calloc(1, sizeof *s);
    float *patterns = dg_malloc((size_t)classes * chw * sizeof(float));
    if (s) {
        s->x = dg_malloc(samples * chw * sizeof(float));
        s->y = dg_malloc(samples * sizeof(int32_t));
        s->order = dg_malloc(samples * sizeof(size_t));
    }
    if (!s || !patterns || !s->x || !s->y || !s->order) {
        dg_free(patterns);
        dg_synth_free(s);
        return dg_fail(ctx, DG_ERR_NOMEM,
                       "synthetic data: out of host memory for %zu samples (%.1f MiB)", samples,
                       (double)samples * chw * 4 / 1048576.0);
    }
    *s = (dg_synth){.c = c,
                    .h = h,
                    .w = w,
                    .classes = classes,
                    .samples = samples,
                    .seed = seed,
                    .noise = 0.6f,
                    .x = s->x,
                    .y = s->y,
                    .order = s->order,
                    .order_epoch = -1};
    for (int k = 0; k < classes; k++)
        make_pattern(seed, k, c, h, w, patterns + (size_t)k * chw);
#pragma omp parallel for schedule(static) if (samples * chw > 1000000)
    for (size_t i = 0; i < samples; i++) {
        dg_rng r;
        dg_rng_init(&r, seed, STREAM_SAMPLE + i);
        uint32_t lab[4];
        dg_rng_next4(&r, lab);
        int32_t y = (int32_t)(lab[0] % (uint32_t)classes);
        s->y[i] = y;
        float *xi = s->x + i * chw;
        dg_rng_uniform(&r, xi, chw, -s->noise, s->noise);
        const float *pat = patterns + (size_t)y * chw;
        for (size_t j = 0; j < chw; j++)
            xi[j] += pat[j];
    }
    dg_free(patterns);
    *out = s;
    return DG_OK;
}

void dg_synth_free(dg_synth *s)
{
    if (!s)
        return;
    dg_free(s->x);
    dg_free(s->y);
    dg_free(s->order);
    dg_free(s);
}

static void make_order(dg_synth *s, int epoch)
{
    for (size_t i = 0; i < s->samples; i++)
        s->order[i] = i;
    dg_rng r;
    dg_rng_init(&r, s->seed, STREAM_ORDER + (uint64_t)epoch);
    uint32_t buf[4];
    for (size_t i = s->samples - 1; i > 0; i--) {
        dg_rng_next4(&r, buf);
        uint64_t v = ((uint64_t)buf[0] << 32) | buf[1];
        size_t j = (size_t)(v % (i + 1));
        size_t t = s->order[i];
        s->order[i] = s->order[j];
        s->order[j] = t;
    }
    s->order_epoch = epoch;
}

void dg_synth_batch(dg_synth *s, int epoch, int step, int n, float *x, int32_t *y)
{
    if (s->order_epoch != epoch)
        make_order(s, epoch);
    size_t chw = (size_t)s->c * s->h * s->w;
    for (int j = 0; j < n; j++) {
        size_t idx = s->order[((size_t)step * n + j) % s->samples];
        memcpy(x + (size_t)j * chw, s->x + idx * chw, chw * sizeof(float));
        y[j] = s->y[idx];
    }
}

cJSON *dg_synth_json(const dg_synth *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "source", "synthetic");
    cJSON_AddStringToObject(o, "generator", "class sine patterns + uniform noise (Philox-4x32-10)");
    cJSON_AddNumberToObject(o, "seed", (double)s->seed);
    cJSON_AddNumberToObject(o, "samples", (double)s->samples);
    cJSON_AddNumberToObject(o, "classes", s->classes);
    dg_json_add_ints(o, "shape", (const int[]){s->c, s->h, s->w}, 3);
    cJSON_AddNumberToObject(o, "noise", s->noise);
    return o;
}
