/* One fallback of the engine's dispatch (dispatch_int.h): the op's operands
 * staged in cached cpu buffers, the cpu backend run, the outputs copied
 * back, and the fallback census entry recorded. */
#include "engine/dispatch_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- staging buffers ---------------------------------------------------- */

/* A free cpu staging buffer of exactly bytes, reused when one is cached. */
dg_status dg_dp_stage_get(dg_engine *e, size_t bytes, void **buf)
{
    struct dg_census *c = e->census;
    stage_buf *victim = NULL;
    c->tick++;
    for (size_t i = 0; i < c->nstage; i++) {
        stage_buf *s = &c->stage[i];
        if (s->in_use)
            continue;
        if (s->bytes == bytes) {
            s->in_use = true;
            s->last_used = c->tick;
            *buf = s->buf;
            return DG_OK;
        }
        if (!victim || s->last_used < victim->last_used)
            victim = s;
    }
    stage_buf *slot = c->nstage < STAGE_MAX ? &c->stage[c->nstage] : victim;
    if (!slot)
        return DG_ERR_NOMEM; /* cannot happen: an op stages at most OPERANDS_MAX */
    if (slot == victim) {
        e->cpu->buf_free(dg_dp_cpu_ctx(e), slot->buf);
        *slot = (stage_buf){0};
    }
    void *b = NULL;
    dg_status st = e->cpu->buf_alloc(dg_dp_cpu_ctx(e), bytes ? bytes : 4, &b);
    if (st != DG_OK) {
        if (slot == victim) /* keep the table dense: move the last entry here */
            *slot = c->stage[--c->nstage];
        return st;
    }
    if (slot != victim)
        c->nstage++;
    *slot = (stage_buf){.buf = b, .bytes = bytes, .in_use = true, .last_used = c->tick};
    *buf = b;
    return DG_OK;
}

void dg_dp_stage_put(dg_engine *e, void *buf)
{
    for (size_t i = 0; i < e->census->nstage; i++)
        if (e->census->stage[i].buf == buf)
            e->census->stage[i].in_use = false;
}

/* ---- one fallback: stage, run on the cpu, copy back, record ------------ */

/* Saturating product of sizes (SIZE_MAX on overflow). */
static size_t prod(size_t a, size_t b)
{
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

/* Elements of non-negative int dimensions, SIZE_MAX when negative or too large. */
size_t dg_dp_elems4(int a, int b, int c, int d)
{
    if (a < 0 || b < 0 || c < 0 || d < 0)
        return SIZE_MAX;
    return prod(prod((size_t)a, (size_t)b), prod((size_t)c, (size_t)d));
}

/* Bytes of n 4-byte elements (SIZE_MAX passes through). */
size_t dg_dp_bytes4(size_t n)
{
    return prod(n, 4);
}

/* Bytes a rows x cols row-major matrix with leading dimension ld spans. */
size_t dg_dp_span(int rows, int cols, int ld)
{
    if (rows < 0 || cols < 0 || ld < 0)
        return SIZE_MAX;
    if (rows == 0 || cols == 0)
        return 0;
    size_t n = prod((size_t)rows - 1, (size_t)ld);
    return n == SIZE_MAX ? SIZE_MAX : dg_dp_bytes4(n + (size_t)cols);
}

static dg_status be_fail(fallback *f, const dg_backend_iface *b, void *bctx, dg_status st,
                         const char *what)
{
    const char *err = b->last_error(bctx);
    f->st = dg_fail(f->ctx, st, "%s fallback to the cpu: %s %s: %s", dg_op_names[f->op], b->name,
                    what, err && *err ? err : dg_status_name(st));
    return f->st;
}

void dg_fb_begin(fallback *f, dg_ctx *ctx, dg_engine *e, dg_call call)
{
    memset(f, 0, sizeof *f);
    f->ctx = ctx;
    f->e = e;
    f->call = call;
    f->op = dg_call_op[call];
    f->t0 = dg_now();
    /* Downloads block, but make sure every queued write to the inputs is done. */
    dg_status st = e->be->synchronize(e->bctx);
    if (st != DG_OK)
        be_fail(f, e->be, e->bctx, st, "synchronize");
}

/* Stages a device operand of bytes on the cpu; mode says whether it is read
 * (downloaded first) and/or written (uploaded after). Absent refs stay absent. */
dg_ref dg_fb_ref(fallback *f, dg_ref dev, size_t bytes, int mode)
{
    if (f->st != DG_OK || (!dev.buf && mode != STAGE_SCRATCH))
        return (dg_ref){NULL, 0};
    if (mode == STAGE_SCRATCH && bytes == 0)
        return (dg_ref){NULL, 0};
    if (bytes == SIZE_MAX) {
        f->st = dg_fail(f->ctx, DG_ERR_USAGE, "%s: bad shape (negative or overflowing size)",
                        dg_op_names[f->op]);
        return (dg_ref){NULL, 0};
    }
    operand *o = NULL;
    if (dev.buf) /* the same place twice (in-place ops) shares one staging buffer */
        for (int i = 0; i < f->n && !o; i++)
            if (f->ops[i].dev.buf == dev.buf && f->ops[i].dev.off == dev.off &&
                f->ops[i].bytes == bytes)
                o = &f->ops[i];
    if (!o) {
        if (f->n == OPERANDS_MAX) {
            f->st = dg_fail(f->ctx, DG_ERR_USAGE, "%s: too many operands", dg_op_names[f->op]);
            return (dg_ref){NULL, 0};
        }
        void *sbuf = NULL;
        dg_status st = dg_dp_stage_get(f->e, bytes, &sbuf);
        if (st != DG_OK) {
            be_fail(f, f->e->cpu, dg_dp_cpu_ctx(f->e), st, "staging buffer");
            return (dg_ref){NULL, 0};
        }
        o = &f->ops[f->n++];
        *o = (operand){.dev = dev, .bytes = bytes, .sbuf = sbuf};
    }
    if ((mode & STAGE_IN) && !o->downloaded && bytes) {
        dg_status st =
            f->e->be->download(f->e->bctx, dev.buf, dev.off, dg_cpu_buf_data(o->sbuf), bytes);
        if (st != DG_OK) {
            be_fail(f, f->e->be, f->e->bctx, st, "download");
            return (dg_ref){NULL, 0};
        }
        f->d2h += bytes;
    }
    o->downloaded = o->downloaded || (mode & STAGE_IN);
    o->upload = o->upload || (mode & STAGE_OUT);
    return (dg_ref){o->sbuf, 0};
}

dg_ref dg_fb_in(fallback *f, dg_ref dev, size_t bytes)
{
    return dg_fb_ref(f, dev, bytes, STAGE_IN);
}

dg_ref dg_fb_out(fallback *f, dg_ref dev, size_t bytes)
{
    return dg_fb_ref(f, dev, bytes, STAGE_OUT);
}

dg_ref dg_fb_inout(fallback *f, dg_ref dev, size_t bytes)
{
    return dg_fb_ref(f, dev, bytes, STAGE_INOUT);
}

/* Records the cpu op's status. */
void dg_fb_ran(fallback *f, dg_status st)
{
    if (st != DG_OK)
        be_fail(f, f->e->cpu, dg_dp_cpu_ctx(f->e), st, dg_op_names[f->op]);
}

uint64_t dg_dp_fnv(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return (h ^ 0xff) * 0x100000001b3ull;
}

static census_rec *census_find(struct dg_census *c, const char *op, const char *shape,
                               const char *reason)
{
    uint64_t h = dg_dp_fnv(dg_dp_fnv(dg_dp_fnv(0xcbf29ce484222325ull, op), shape), reason);
    for (size_t i = 0; i < c->n; i++)
        if (c->recs[i].hash == h && strcmp(c->recs[i].op, op) == 0 &&
            strcmp(c->recs[i].shape, shape) == 0 && strcmp(c->recs[i].reason, reason) == 0)
            return &c->recs[i];
    if (!dg_grow_max((void **)&c->recs, &c->cap, c->n + 1, sizeof *c->recs, CENSUS_MAX)) {
        /* full (or no memory): fold into "other" */
        if (!c->have_other) {
            c->have_other = true;
            snprintf(c->other.op, sizeof c->other.op, "other");
            snprintf(c->other.shape, sizeof c->other.shape, "other");
            snprintf(c->other.reason, sizeof c->other.reason,
                     "folded: more than %d distinct fallback records", CENSUS_MAX);
        }
        return &c->other;
    }
    census_rec *r = &c->recs[c->n++];
    memset(r, 0, sizeof *r);
    r->hash = h;
    snprintf(r->op, sizeof r->op, "%s", op);
    snprintf(r->shape, sizeof r->shape, "%s", shape);
    snprintf(r->reason, sizeof r->reason, "%s", reason);
    return r;
}

/* Copies the outputs back, frees the staging, records the census entry. */
dg_status dg_fb_end(fallback *f, const char *shape)
{
    dg_engine *e = f->e;
    for (int i = 0; i < f->n && f->st == DG_OK; i++) {
        operand *o = &f->ops[i];
        if (!o->upload || !o->bytes)
            continue;
        dg_status st =
            e->be->upload(e->bctx, o->dev.buf, o->dev.off, dg_cpu_buf_data(o->sbuf), o->bytes);
        if (st != DG_OK)
            be_fail(f, e->be, e->bctx, st, "upload");
        else
            f->h2d += o->bytes;
    }
    for (int i = 0; i < f->n; i++)
        dg_dp_stage_put(e, f->ops[i].sbuf);
    if (f->st != DG_OK)
        return f->st;
    char reason[128];
    if (e->disabled_calls & (1u << f->call))
        snprintf(reason, sizeof reason, "disabled by --disable-op");
    else
        snprintf(reason, sizeof reason, "not supported by %s", e->name);
    e->census->fb_d2h += f->d2h;
    e->census->fb_h2d += f->h2d;
    census_rec *r = census_find(e->census, dg_op_names[f->op], shape, reason);
    r->calls++;
    r->ms += (dg_now() - f->t0) * 1e3;
    r->d2h += f->d2h;
    r->h2d += f->h2d;
    e->any_fallback = true;
    return DG_OK;
}
