/* The loader's queue: worker threads filling a ring of batch slots, and the
 * consumer taking them strictly in batch order (the order itself is
 * loader_order.c's). */
#include "data/loader_int.h"

#include <string.h>

/* ---- workers ---------------------------------------------------------------- */

static int epoch_of(const dg_loader *ld, int64_t g)
{
    return (int)(g / ld->steps);
}

/* A worker may take batch next when its slot is free (the batch before in
 * that slot handed out and released) and it is at most one epoch ahead of
 * the consumer (two permutations are live at most). */
static bool can_take(const dg_loader *ld)
{
    return ld->next < ld->total && ld->next < ld->consumed + ld->nslots &&
           ld->slots[ld->next % ld->nslots].state == SLOT_FREE &&
           epoch_of(ld, ld->next) <= epoch_of(ld, ld->consumed) + 1;
}

void *dg_ld_worker_main(void *arg)
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
        dg_ld_fill_batch(ld, g, sl, sp, first, steps);
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
    if (ld->held > 0) {
        int held = ld->held;
        pthread_mutex_unlock(&ld->mu);
        return dg_fail(ld->ctx, DG_ERR_USAGE,
                       "loader: %d batch%s still held; release %s before starting a new run", held,
                       held == 1 ? "" : "es", held == 1 ? "it" : "them");
    }
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
    if (!dg_grow((void **)&ld->eps, &ld->cap_eps, ld->neps + 1, sizeof *ld->eps))
        return NULL;
    epoch_stat *e = &ld->eps[ld->neps++];
    memset(e, 0, sizeof *e);
    e->epoch = epoch;
    return e;
}

/* Takes the batch in slot sl (batch g) into the consumer's totals; DG_OK or
 * the batch's failure (the message on ld's ctx). */
static dg_status account(dg_loader *ld, int64_t g, const slot *sl, epoch_stat *es)
{
    bool epoch_end = (g + 1) % ld->steps == 0;
    for (int s = 0; s < S_COUNT; s++) {
        ld->t[s] += sl->t[s];
        if (es)
            es->t[s] += sl->t[s];
    }
    ld->bad += sl->bad;
    ld->seen += sl->seen;
    for (int i = 0; i < sl->nmsg && ld->nmsg < DG_LOADER_MAX_BAD_MSGS; i++)
        memcpy(ld->msgs[ld->nmsg++], sl->msgs[i], MSG_LEN);
    if (sl->st != DG_OK)
        return dg_fail(ld->ctx, sl->st, "%s", sl->err);
    return dg_ld_bad_share_check(ld, epoch_end);
}

dg_status dg_loader_acquire(dg_loader *ld, dg_batch *b)
{
    double t0 = dg_now();
    memset(b, 0, sizeof *b);
    b->slot = -1;
    if (ld->failed)
        return dg_fail(ld->ctx, DG_ERR_USAGE, "loader: a previous batch failed");
    pthread_mutex_lock(&ld->mu);
    if (ld->consumed >= ld->total) {
        pthread_mutex_unlock(&ld->mu);
        return dg_fail(ld->ctx, DG_ERR_USAGE, "loader: no batches left (call dg_loader_start)");
    }
    int64_t g = ld->consumed;
    int k = (int)(g % ld->nslots);
    slot *sl = &ld->slots[k];
    if (ld->held >= ld->o.hold || sl->state == SLOT_HELD) {
        int held = ld->held;
        int64_t old = sl->state == SLOT_HELD ? sl->g : -1;
        pthread_mutex_unlock(&ld->mu);
        if (old >= 0)
            return dg_fail(ld->ctx, DG_ERR_USAGE,
                           "loader: batch %lld is still held and batch %lld needs its slot; "
                           "release it first",
                           (long long)old, (long long)g);
        return dg_fail(ld->ctx, DG_ERR_USAGE,
                       "loader: %d batch%s held already (the most allowed); release one first",
                       held, held == 1 ? "" : "es");
    }
    if (!ld->nthreads) {
        sl->state = SLOT_FILLING;
        pthread_mutex_unlock(&ld->mu);
        dg_ld_fill_batch(ld, g, sl, ld->sp, ld->first_epoch, ld->steps);
        sl->g = g;
        pthread_mutex_lock(&ld->mu);
    } else {
        while (!(sl->state == SLOT_READY && sl->g == g))
            pthread_cond_wait(&ld->cv_ready, &ld->mu);
    }
    sl->state = SLOT_HELD;
    ld->held++;
    ld->consumed++;
    pthread_cond_broadcast(&ld->cv_work); /* the consumer moved on: workers may run ahead */
    pthread_mutex_unlock(&ld->mu);
    int epoch = ld->first_epoch + (int)(g / ld->steps);
    epoch_stat *es = epoch_entry(ld, epoch);
    dg_status st = account(ld, g, sl, es);
    double waited = dg_now() - t0;
    ld->waited += waited;
    ld->batches++;
    if (es) {
        es->waited += waited;
        es->batches++;
    }
    if (st != DG_OK) {
        ld->failed = true;
        pthread_mutex_lock(&ld->mu);
        sl->state = SLOT_FREE;
        ld->held--;
        pthread_cond_broadcast(&ld->cv_work);
        pthread_mutex_unlock(&ld->mu);
        return st;
    }
    *b = (dg_batch){.x = sl->x,
                    .y = sl->y,
                    .h = sl->h,
                    .w = sl->w,
                    .page_locked = sl->page_locked,
                    .seq = g,
                    .slot = k};
    return DG_OK;
}

dg_status dg_loader_release(dg_loader *ld, dg_batch *b)
{
    if (!b || b->slot < 0 || b->slot >= ld->nslots || ld->slots[b->slot].x != b->x)
        return dg_fail(ld->ctx, DG_ERR_USAGE,
                       "loader: release of a batch this loader did not hand out");
    pthread_mutex_lock(&ld->mu);
    slot *sl = &ld->slots[b->slot];
    if (sl->state != SLOT_HELD || sl->g != b->seq) {
        pthread_mutex_unlock(&ld->mu);
        return dg_fail(ld->ctx, DG_ERR_USAGE, "loader: batch %lld was released already",
                       (long long)b->seq);
    }
    sl->state = SLOT_FREE;
    ld->held--;
    pthread_cond_broadcast(&ld->cv_work);
    pthread_mutex_unlock(&ld->mu);
    memset(b, 0, sizeof *b);
    b->slot = -1;
    return DG_OK;
}

int dg_loader_held(const dg_loader *ld)
{
    return ld->held;
}

dg_status dg_loader_next(dg_loader *ld, float *x, int32_t *y, int *h, int *w)
{
    dg_batch b;
    dg_status st = dg_loader_acquire(ld, &b);
    if (st != DG_OK)
        return st;
    double tc = dg_now();
    memcpy(x, b.x, (size_t)ld->o.batch * ld->o.channels * b.h * b.w * sizeof(float));
    memcpy(y, b.y, (size_t)ld->o.batch * sizeof(int32_t));
    *h = b.h;
    *w = b.w;
    double dc = dg_now() - tc;
    int epoch = ld->first_epoch + (int)(b.seq / ld->steps);
    epoch_stat *es = epoch_entry(ld, epoch);
    ld->t[S_COLLATE] += dc;
    ld->waited += dc;
    if (es) {
        es->t[S_COLLATE] += dc;
        es->waited += dc;
    }
    return dg_loader_release(ld, &b);
}
