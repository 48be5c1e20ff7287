/* The loader's cache of decoded, resized samples (before augmentation), one
 * entry per (resolution, sample), filled until its byte cap. */
#include "data/loader_int.h"

#include <string.h>

bool dg_ld_cache_new(dg_loader *ld)
{
    ld->cache = dg_calloc((size_t)ld->o.nres * ld->n_all, sizeof(float *));
    ld->cache_y = dg_calloc((size_t)ld->o.nres * ld->n_all, sizeof(int32_t));
    ld->cache_cap = ld->o.cache_cap;
    return ld->cache && ld->cache_y;
}

void dg_ld_cache_free(dg_loader *ld)
{
    if (ld->cache)
        for (size_t i = 0; i < (size_t)ld->o.nres * ld->n_all; i++)
            dg_free(ld->cache[i]);
    dg_free(ld->cache);
    dg_free(ld->cache_y);
    ld->cache = NULL;
    ld->cache_y = NULL;
}

const float *dg_ld_cache_get(dg_loader *ld, size_t key, int32_t *label)
{
    const float *cur = NULL;
    pthread_mutex_lock(&ld->cache_mu);
    if (ld->cache[key]) {
        cur = ld->cache[key];
        *label = ld->cache_y[key];
        ld->cache_hits++;
    } else {
        ld->cache_misses++;
    }
    pthread_mutex_unlock(&ld->cache_mu);
    return cur;
}

void dg_ld_cache_put(dg_loader *ld, size_t key, const float *data, size_t chw, int32_t label)
{
    pthread_mutex_lock(&ld->cache_mu);
    if (!ld->cache[key] && ld->cache_bytes + chw * sizeof(float) <= ld->cache_cap) {
        float *keep = dg_malloc(chw * sizeof(float));
        if (keep) {
            memcpy(keep, data, chw * sizeof(float));
            ld->cache[key] = keep;
            ld->cache_y[key] = label;
            ld->cache_bytes += chw * sizeof(float);
        }
    }
    pthread_mutex_unlock(&ld->cache_mu);
}
