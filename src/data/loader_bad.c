/* One batch under the loader's bad-sample policy: skip (replace a bad sample
 * by the next good one of the epoch's list, keep its message, fail above the
 * allowed share) or fail on the first. */
#include "data/loader_int.h"

#include <string.h>

void dg_ld_fill_batch(dg_loader *ld, int64_t g, slot *sl, dg_split sp, int first_epoch, int steps)
{
    int epoch = first_epoch + (int)(g / steps), step = (int)(g % steps);
    int ri = dg_ld_pick_res(ld, epoch, step);
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
    const size_t *list = dg_ld_epoch_list(ld, sp, epoch, &count);
    pthread_mutex_unlock(&ld->mu);
    if (dg_ld_fill_in_place(ld, sp, ri, sl, list, count, (size_t)step * n % count))
        return;
    scratch sc = {dg_malloc(ld->scratch_floats * sizeof(float)),
                  dg_malloc(ld->scratch_floats * sizeof(float))};
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
            dg_status st = dg_ld_load_sample(ld, sp, epoch, idx, ri, sl, &sc,
                                             sl->x + (size_t)j * chw, &sl->y[j], err, sizeof err);
            if (st == DG_OK)
                break;
            if (st != DG_ERR_FORMAT || ld->o.on_bad_fail) {
                sl->st = st;
                snprintf(sl->err, sizeof sl->err, "bad sample %zu: %s", idx,
                         err[0] ? err : dg_status_name(st));
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

dg_status dg_ld_bad_share_check(dg_loader *ld, bool epoch_end)
{
    if ((ld->seen >= 1000 || epoch_end) && (double)ld->bad > ld->o.max_bad_share * (double)ld->seen)
        return dg_fail(
            ld->ctx, DG_ERR_FORMAT,
            "loader: %zu of %zu samples read were bad (%.2f%%), above the allowed %.2f%%%s%s",
            ld->bad, ld->seen, 100.0 * (double)ld->bad / (double)ld->seen,
            100.0 * ld->o.max_bad_share, ld->nmsg ? "; first: " : "", ld->nmsg ? ld->msgs[0] : "");
    return DG_OK;
}
