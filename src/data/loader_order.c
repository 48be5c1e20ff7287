/* The loader's order: how many samples a split has, the seeded sample order
 * per epoch and the resolution per step. The bottom of the loader's files:
 * it calls none of them. */
#include "data/loader_int.h"

#include <string.h>

size_t dg_loader_count(const dg_loader *ld, dg_split sp)
{
    return sp == DG_SPLIT_VAL ? ld->nval : ld->ntrain;
}

void dg_ld_shuffle(size_t *list, size_t n, uint64_t seed, uint64_t stream)
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

int dg_ld_cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

const size_t *dg_ld_epoch_list(dg_loader *ld, dg_split sp, int epoch, size_t *count)
{
    if (sp == DG_SPLIT_VAL) {
        *count = ld->nval;
        return ld->val;
    }
    *count = ld->ntrain;
    int k = epoch & 1;
    if (ld->perm_epoch[k] != epoch) {
        memcpy(ld->perm[k], ld->train, ld->ntrain * sizeof(size_t));
        dg_ld_shuffle(ld->perm[k], ld->ntrain, ld->o.seed, STREAM_ORDER + (uint64_t)epoch);
        ld->perm_epoch[k] = epoch;
    }
    return ld->perm[k];
}

int dg_ld_pick_res(const dg_loader *ld, int epoch, int step)
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
