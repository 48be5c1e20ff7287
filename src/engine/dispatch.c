/* The engine: a backend opened for training with its allocator, op dispatch
 * (native, or the cpu backend with copies both ways) and the fallback census. */
#include "engine/engine.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CENSUS_MAX 256 /* distinct records; further ones fold into "other" */
#define STAGE_MAX 64   /* cached cpu staging buffers per engine */
#define OPERANDS_MAX 8 /* staged operands of one op */
#define PROF_ROWS_MAX 1024     /* distinct profile rows; further ones fold into "other" */
#define PROF_EVENTS_MAX 200000 /* trace events kept; further ones are counted as dropped */

typedef struct census_rec {
    uint64_t hash;
    char op[24];
    char shape[96];
    char reason[128];
    size_t calls;
    double ms;
    size_t d2h, h2d;
} census_rec;

typedef struct stage_buf {
    void *buf; /* cpu-backend buffer */
    size_t bytes;
    bool in_use;
    uint64_t last_used;
} stage_buf;

/* Fallback state of one engine: the census and the staging buffer cache. */
struct dg_census {
    census_rec *recs;
    size_t n, cap;
    census_rec other;
    bool have_other;
    stage_buf stage[STAGE_MAX];
    size_t nstage;
    uint64_t tick;
    size_t fb_d2h, fb_h2d; /* bytes every fallback copied, engine lifetime */
    struct prof *prof;     /* per-op profiling; NULL until first switched on */
    bool prof_on;
};

/* ---- ops and their function pointers ------------------------------------ */

/* Whether iface implements every function of op (conv2d_workspace optional). */
static bool has_op(const dg_backend_iface *b, dg_op op)
{
    switch (op) {
    case DG_OP_GEMM: return b->gemm != NULL;
    case DG_OP_FILL: return b->fill != NULL;
    case DG_OP_BIAS_ADD: return b->bias_add != NULL;
    case DG_OP_BIAS_GRAD: return b->bias_grad != NULL;
    case DG_OP_RELU: return b->relu_fwd && b->relu_bwd;
    case DG_OP_MAXPOOL: return b->maxpool_fwd && b->maxpool_bwd;
    case DG_OP_CONV2D: return b->conv2d_fwd && b->conv2d_bwd;
    case DG_OP_XENT: return b->xent != NULL;
    case DG_OP_SGD: return b->sgd != NULL;
    default: return false;
    }
}

bool dg_engine_native(const dg_engine *e, dg_op op)
{
    if (!e || (unsigned)op >= DG_OP__COUNT || (e->disabled_ops & (1u << op)))
        return false;
    return e->be->supports_op && e->be->supports_op(e->bctx, op) && has_op(e->be, op);
}

/* ---- --disable-op parsing ---------------------------------------------- */

static int op_index(const char *s)
{
    if (strcmp(s, "xent") == 0)
        return DG_OP_XENT;
    for (int i = 0; i < DG_OP__COUNT; i++)
        if (strcmp(s, dg_op_names[i]) == 0)
            return i;
    return -1;
}

dg_status dg_parse_disabled_ops(dg_ctx *ctx, const char *spec, const char *name, uint32_t *mask)
{
    *mask = 0;
    if (!spec)
        return DG_OK;
    uint32_t m = 0;
    const char *p = spec;
    while (*p) {
        size_t len = strcspn(p, ",");
        char item[96];
        snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item ? len : sizeof item - 1), p);
        p += len;
        if (*p == ',')
            p++;
        char *entry = dg_trim(item);
        if (!*entry)
            continue; /* empty entry ("a,,b", trailing comma) */
        char *at = strchr(entry, '@');
        const char *backend = NULL;
        if (at) {
            *at = '\0';
            backend = dg_trim(at + 1);
            dg_trim(entry);
        }
        char clean[96];
        int op = op_index(entry);
        if (op < 0) {
            dg_copy_clean(clean, sizeof clean, entry);
            return dg_fail(ctx, DG_ERR_USAGE,
                           "--disable-op: unknown op '%s' (known: gemm, fill, bias_add, bias_grad, "
                           "relu, maxpool, conv2d, softmax_xent (or xent), sgd)",
                           clean);
        }
        if (backend) {
            bool known = false;
            for (size_t i = 0; i < dg_backend_names_count; i++)
                known = known || strcmp(backend, dg_backend_names[i]) == 0;
            if (!known) {
                dg_copy_clean(clean, sizeof clean, backend);
                return dg_fail(ctx, DG_ERR_USAGE,
                               "--disable-op: unknown backend '%s' (known: cpu, opencl, cuda)",
                               clean);
            }
            if (!name || strcmp(backend, name) != 0)
                continue; /* for another backend */
        }
        m |= 1u << op;
    }
    *mask = m;
    return DG_OK;
}

/* ---- open and close ---------------------------------------------------- */

static void prof_free(struct prof *p);

static void *cpu_ctx_of(const dg_engine *e)
{
    return e->cpu_ctx ? e->cpu_ctx : e->bctx;
}

void dg_engine_close(dg_engine *e)
{
    if (!e)
        return;
    dg_allocator_free(e->alloc);
    if (e->census) {
        for (size_t i = 0; i < e->census->nstage; i++)
            e->cpu->buf_free(cpu_ctx_of(e), e->census->stage[i].buf);
        dg_free(e->census->recs);
        prof_free(e->census->prof);
        dg_free(e->census);
    }
    if (e->cpu_ctx)
        e->cpu->free(e->cpu_ctx);
    if (e->bctx)
        e->be->free(e->bctx);
    dg_free(e);
}

dg_status dg_engine_open_iface(dg_ctx *ctx, const dg_backend_iface *be, const dg_engine_opts *opts,
                               dg_engine **out)
{
    *out = NULL;
    dg_engine_opts o = opts ? *opts : (dg_engine_opts){0};
    if (!be || !be->name)
        return dg_fail(ctx, DG_ERR_USAGE, "engine: no backend interface");
    if (be->version != DG_BACKEND_IFACE_VERSION)
        return dg_fail(ctx, DG_ERR_UNAVAILABLE,
                       "%s is not available: interface version %u, devgate needs %u", be->name,
                       be->version, DG_BACKEND_IFACE_VERSION);
    bool is_cpu = strcmp(be->name, "cpu") == 0;
    uint32_t mask = o.disabled_ops & ((1u << DG_OP__COUNT) - 1);
    if (is_cpu && mask)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "cpu is the fallback backend; ops cannot be disabled on it");
    if (o.threads < 0)
        return dg_fail(ctx, DG_ERR_USAGE, "threads must be >= 0 (0: default), got %d", o.threads);
    /* A backend without set_math computes in exact fp32 only. */
    if (o.tf32 && !be->set_math)
        return dg_fail(ctx, DG_ERR_USAGE, "the %s backend has no TF32 mode (--tf32 is for cuda)",
                       be->name);

    dg_engine *e = dg_calloc(1, sizeof *e);
    struct dg_census *c = e ? dg_calloc(1, sizeof *c) : NULL;
    if (!c) {
        dg_free(e);
        return dg_fail(ctx, DG_ERR_NOMEM, "out of host memory opening the %s engine", be->name);
    }
    e->name = be->name;
    e->be = be;
    e->cpu = is_cpu ? be : dg_backend_cpu_iface();
    e->census = c;
    e->disabled_ops = mask;

    char reason[256] = "";
    dg_status st = be->init(o.device, &e->bctx, reason, sizeof reason);
    if (st != DG_OK) {
        e->bctx = NULL;
        dg_engine_close(e);
        return dg_fail(ctx, DG_ERR_UNAVAILABLE, "%s is not available: %s", be->name,
                       reason[0] ? reason : dg_status_name(st));
    }
    if (!is_cpu) {
        reason[0] = '\0';
        st = e->cpu->init(0, &e->cpu_ctx, reason, sizeof reason);
        if (st != DG_OK) {
            e->cpu_ctx = NULL;
            dg_engine_close(e);
            return dg_fail(ctx, DG_ERR_UNAVAILABLE, "%s: the cpu fallback is not available: %s",
                           be->name, reason[0] ? reason : dg_status_name(st));
        }
    }
    e->alloc = dg_allocator_new(be, e->bctx, o.mem_budget);
    if (!e->alloc) {
        dg_engine_close(e);
        return dg_fail(ctx, DG_ERR_NOMEM, "out of host memory opening the %s engine", be->name);
    }
    if (o.threads > 0) {
        omp_set_num_threads(o.threads); /* the cpu backend's one thread pool */
    }
    if (o.tf32 && (st = be->set_math(e->bctx, 1)) != DG_OK) {
        const char *why = be->last_error ? be->last_error(e->bctx) : NULL;
        dg_engine_close(e);
        return dg_fail(ctx, st, "%s: TF32 math could not be enabled: %s", be->name,
                       why && why[0] ? why : dg_status_name(st));
    }
    *out = e;
    return DG_OK;
}

dg_status dg_engine_open(dg_ctx *ctx, const char *name, const dg_engine_opts *opts, dg_engine **out)
{
    *out = NULL;
    if (!name)
        return dg_fail(ctx, DG_ERR_USAGE, "engine: no backend name");
    dg_backend_entry ent;
    dg_status st = dg_backend_lookup(ctx, name, &ent);
    if (st == DG_ERR_NOT_FOUND)
        return DG_ERR_USAGE; /* the lookup's message names the known backends */
    if (st != DG_OK)
        return st;
    if (!ent.iface)
        return dg_fail(ctx, DG_ERR_UNAVAILABLE, "%s is not available: %s", ent.name,
                       ent.reason[0] ? ent.reason : "no interface");
    return dg_engine_open_iface(ctx, ent.iface, opts, out);
}

/* ---- staging buffers ---------------------------------------------------- */

/* A free cpu staging buffer of exactly bytes, reused when one is cached. */
static dg_status stage_get(dg_engine *e, size_t bytes, void **buf)
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
        e->cpu->buf_free(cpu_ctx_of(e), slot->buf);
        *slot = (stage_buf){0};
    }
    void *b = NULL;
    dg_status st = e->cpu->buf_alloc(cpu_ctx_of(e), bytes ? bytes : 4, &b);
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

static void stage_put(dg_engine *e, void *buf)
{
    for (size_t i = 0; i < e->census->nstage; i++)
        if (e->census->stage[i].buf == buf)
            e->census->stage[i].in_use = false;
}

/* ---- one fallback: stage, run on the cpu, copy back, record ------------ */

enum { STAGE_IN = 1, STAGE_OUT = 2, STAGE_INOUT = 3, STAGE_SCRATCH = 0 };

typedef struct operand {
    dg_ref dev; /* {NULL, 0} for scratch */
    size_t bytes;
    void *sbuf;
    bool downloaded, upload;
} operand;

typedef struct fallback {
    dg_ctx *ctx;
    dg_engine *e;
    dg_op op;
    dg_status st;
    double t0;
    operand ops[OPERANDS_MAX];
    int n;
    size_t d2h, h2d;
} fallback;

/* Saturating product of sizes (SIZE_MAX on overflow). */
static size_t prod(size_t a, size_t b)
{
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

/* Elements of non-negative int dimensions, SIZE_MAX when negative or too large. */
static size_t elems4(int a, int b, int c, int d)
{
    if (a < 0 || b < 0 || c < 0 || d < 0)
        return SIZE_MAX;
    return prod(prod((size_t)a, (size_t)b), prod((size_t)c, (size_t)d));
}

/* Bytes of n 4-byte elements (SIZE_MAX passes through). */
static size_t bytes4(size_t n)
{
    return prod(n, 4);
}

/* Bytes a rows x cols row-major matrix with leading dimension ld spans. */
static size_t span(int rows, int cols, int ld)
{
    if (rows < 0 || cols < 0 || ld < 0)
        return SIZE_MAX;
    if (rows == 0 || cols == 0)
        return 0;
    size_t n = prod((size_t)rows - 1, (size_t)ld);
    return n == SIZE_MAX ? SIZE_MAX : bytes4(n + (size_t)cols);
}

static dg_status be_fail(fallback *f, const dg_backend_iface *b, void *bctx, dg_status st,
                         const char *what)
{
    const char *err = b->last_error(bctx);
    f->st = dg_fail(f->ctx, st, "%s fallback to the cpu: %s %s: %s", dg_op_names[f->op], b->name,
                    what, err && *err ? err : dg_status_name(st));
    return f->st;
}

static void fb_begin(fallback *f, dg_ctx *ctx, dg_engine *e, dg_op op)
{
    memset(f, 0, sizeof *f);
    f->ctx = ctx;
    f->e = e;
    f->op = op;
    f->t0 = dg_now();
    /* Downloads block, but make sure every queued write to the inputs is done. */
    dg_status st = e->be->synchronize(e->bctx);
    if (st != DG_OK)
        be_fail(f, e->be, e->bctx, st, "synchronize");
}

/* Stages a device operand of bytes on the cpu; mode says whether it is read
 * (downloaded first) and/or written (uploaded after). Absent refs stay absent. */
static dg_ref fb_ref(fallback *f, dg_ref dev, size_t bytes, int mode)
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
        dg_status st = stage_get(f->e, bytes, &sbuf);
        if (st != DG_OK) {
            be_fail(f, f->e->cpu, cpu_ctx_of(f->e), st, "staging buffer");
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

static dg_ref fb_in(fallback *f, dg_ref dev, size_t bytes)
{
    return fb_ref(f, dev, bytes, STAGE_IN);
}

static dg_ref fb_out(fallback *f, dg_ref dev, size_t bytes)
{
    return fb_ref(f, dev, bytes, STAGE_OUT);
}

static dg_ref fb_inout(fallback *f, dg_ref dev, size_t bytes)
{
    return fb_ref(f, dev, bytes, STAGE_INOUT);
}

/* Records the cpu op's status. */
static void fb_ran(fallback *f, dg_status st)
{
    if (st != DG_OK)
        be_fail(f, f->e->cpu, cpu_ctx_of(f->e), st, dg_op_names[f->op]);
}

static uint64_t fnv(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return (h ^ 0xff) * 0x100000001b3ull;
}

static census_rec *census_find(struct dg_census *c, const char *op, const char *shape,
                               const char *reason)
{
    uint64_t h = fnv(fnv(fnv(0xcbf29ce484222325ull, op), shape), reason);
    for (size_t i = 0; i < c->n; i++)
        if (c->recs[i].hash == h && strcmp(c->recs[i].op, op) == 0 &&
            strcmp(c->recs[i].shape, shape) == 0 && strcmp(c->recs[i].reason, reason) == 0)
            return &c->recs[i];
    if (c->n == c->cap && c->cap < CENSUS_MAX) {
        size_t ncap = c->cap ? c->cap * 2 : 16;
        census_rec *nr = dg_realloc(c->recs, ncap * sizeof *nr);
        if (nr) {
            c->recs = nr;
            c->cap = ncap;
        }
    }
    if (c->n == c->cap) { /* full (or no memory): fold into "other" */
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
static dg_status fb_end(fallback *f, const char *shape)
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
        stage_put(e, f->ops[i].sbuf);
    if (f->st != DG_OK)
        return f->st;
    char reason[128];
    if (e->disabled_ops & (1u << f->op))
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

/* ---- routing ------------------------------------------------------------ */

typedef enum route { ROUTE_NATIVE, ROUTE_FALLBACK, ROUTE_ERROR } route;

/* Where op runs: natively, on the cpu fallback (cpu_fn: the cpu implements the
 * function), or nowhere (*st and the message set). */
static route route_op(dg_ctx *ctx, dg_engine *e, dg_op op, bool cpu_fn, dg_status *st)
{
    *st = DG_OK;
    if (!e) {
        *st = dg_fail(ctx, DG_ERR_USAGE, "%s: no engine", dg_op_names[op]);
        return ROUTE_ERROR;
    }
    if (dg_engine_native(e, op))
        return ROUTE_NATIVE;
    if (!e->cpu_ctx) { /* the engine is the cpu: nothing to fall back to */
        if (cpu_fn)
            return ROUTE_NATIVE;
        *st = dg_fail(ctx, DG_ERR_UNAVAILABLE, "op %s is not supported by %s", dg_op_names[op],
                      e->name);
        return ROUTE_ERROR;
    }
    if (!cpu_fn) {
        *st = dg_fail(ctx, DG_ERR_UNAVAILABLE,
                      "op %s is supported neither by %s nor by the cpu fallback", dg_op_names[op],
                      e->name);
        return ROUTE_ERROR;
    }
    return ROUTE_FALLBACK;
}

/* Result of a native call, with the backend's message on failure. */
static dg_status native(dg_ctx *ctx, dg_engine *e, const char *fn, dg_status st)
{
    if (st == DG_OK)
        return DG_OK;
    const char *err = e->be->last_error(e->bctx);
    return dg_fail(ctx, st, "%s: %s: %s", e->name, fn, err && *err ? err : dg_status_name(st));
}

/* ---- op bodies: native or fallback (the public entry points are below) --- */

static dg_status run_gemm(dg_ctx *ctx, dg_engine *e, bool ta, bool tb, int m, int n, int k,
                          float alpha, dg_ref a, int lda, dg_ref b, int ldb, float beta, dg_ref c,
                          int ldc)
{
    dg_status st;
    route r = route_op(ctx, e, DG_OP_GEMM, e && e->cpu->gemm, &st);
    if (r == ROUTE_ERROR)
        return st;
    if (r == ROUTE_NATIVE)
        return native(ctx, e, "gemm",
                      e->be->gemm(e->bctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
    fallback f;
    fb_begin(&f, ctx, e, DG_OP_GEMM);
    dg_ref as = fb_in(&f, a, span(ta ? k : m, ta ? m : k, lda));
    dg_ref bs = fb_in(&f, b, span(tb ? n : k, tb ? k : n, ldb));
    dg_ref cs = fb_ref(&f, c, span(m, n, ldc), beta != 0.0f ? STAGE_INOUT : STAGE_OUT);
    if (f.st == DG_OK)
        fb_ran(&f, e->cpu->gemm(cpu_ctx_of(e), ta, tb, m, n, k, alpha, as, lda, bs, ldb, beta, cs,
                                ldc));
    char shape[96];
    snprintf(shape, sizeof shape, "gemm %dx%dx%d ta=%d tb=%d", m, n, k, (int)ta, (int)tb);
    return fb_end(&f, shape);
}

static dg_status run_fill(dg_ctx *ctx, dg_engine *e, dg_ref x, size_t count, float value)
{
    dg_status st;
    route r = route_op(ctx, e, DG_OP_FILL, e && e->cpu->fill, &st);
    if (r == ROUTE_ERROR)
        return st;
    if (r == ROUTE_NATIVE)
        return native(ctx, e, "fill", e->be->fill(e->bctx, x, count, value));
    fallback f;
    fb_begin(&f, ctx, e, DG_OP_FILL);
    dg_ref xs = fb_out(&f, x, bytes4(count));
    if (f.st == DG_OK)
        fb_ran(&f, e->cpu->fill(cpu_ctx_of(e), xs, count, value));
    char shape[96];
    snprintf(shape, sizeof shape, "fill %zu", count);
    return fb_end(&f, shape);
}

static dg_status run_bias_add(dg_ctx *ctx, dg_engine *e, dg_ref y, dg_ref bias, int outer,
                              int channels, int inner)
{
    dg_status st;
    route r = route_op(ctx, e, DG_OP_BIAS_ADD, e && e->cpu->bias_add, &st);
    if (r == ROUTE_ERROR)
        return st;
    if (r == ROUTE_NATIVE)
        return native(ctx, e, "bias_add",
                      e->be->bias_add(e->bctx, y, bias, outer, channels, inner));
    fallback f;
    fb_begin(&f, ctx, e, DG_OP_BIAS_ADD);
    dg_ref bs = fb_in(&f, bias, bytes4(elems4(channels, 1, 1, 1)));
    dg_ref ys = fb_inout(&f, y, bytes4(elems4(outer, channels, inner, 1)));
    if (f.st == DG_OK)
        fb_ran(&f, e->cpu->bias_add(cpu_ctx_of(e), ys, bs, outer, channels, inner));
    char shape[96];
    snprintf(shape, sizeof shape, "bias_add %dx%dx%d", outer, channels, inner);
    return fb_end(&f, shape);
}

static dg_status run_bias_grad(dg_ctx *ctx, dg_engine *e, dg_ref dy, dg_ref db, int outer,
                               int channels, int inner)
{
    dg_status st;
    route r = route_op(ctx, e, DG_OP_BIAS_GRAD, e && e->cpu->bias_grad, &st);
    if (r == ROUTE_ERROR)
        return st;
    if (r == ROUTE_NATIVE)
        return native(ctx, e, "bias_grad",
                      e->be->bias_grad(e->bctx, dy, db, outer, channels, inner));
    fallback f;
    fb_begin(&f, ctx, e, DG_OP_BIAS_GRAD);
    dg_ref dys = fb_in(&f, dy, bytes4(elems4(outer, channels, inner, 1)));
    dg_ref dbs = fb_out(&f, db, bytes4(elems4(channels, 1, 1, 1)));
    if (f.st == DG_OK)
        fb_ran(&f, e->cpu->bias_grad(cpu_ctx_of(e), dys, dbs, outer, channels, inner));
    char shape[96];
    snprintf(shape, sizeof shape, "bias_grad %dx%dx%d", outer, channels, inner);
    return fb_end(&f, shape);
}

static dg_status run_relu_fwd(dg_ctx *ctx, dg_engine *e, dg_ref x, dg_ref y, size_t count)
{
    dg_status st;
    route r = route_op(ctx, e, DG_OP_RELU, e && e->cpu->relu_fwd, &st);
    if (r == ROUTE_ERROR)
        return st;
    if (r == ROUTE_NATIVE)
        return native(ctx, e, "relu_fwd", e->be->relu_fwd(e->bctx, x, y, count));
    fallback f;
    fb_begin(&f, ctx, e, DG_OP_RELU);
    dg_ref xs = fb_in(&f, x, bytes4(count));
    dg_ref ys = fb_out(&f, y, bytes4(count));
    if (f.st == DG_OK)
        fb_ran(&f, e->cpu->relu_fwd(cpu_ctx_of(e), xs, ys, count));
    char shape[96];
    snprintf(shape, sizeof shape, "relu %zu", count);
    return fb_end(&f, shape);
}

static dg_status run_relu_bwd(dg_ctx *ctx, dg_engine *e, dg_ref y, dg_ref dy, dg_ref dx,
                              size_t count)
{
    dg_status st;
    route r = route_op(ctx, e, DG_OP_RELU, e && e->cpu->relu_bwd, &st);
    if (r == ROUTE_ERROR)
        return st;
    if (r == ROUTE_NATIVE)
        return native(ctx, e, "relu_bwd", e->be->relu_bwd(e->bctx, y, dy, dx, count));
    fallback f;
    fb_begin(&f, ctx, e, DG_OP_RELU);
    dg_ref ys = fb_in(&f, y, bytes4(count));
    dg_ref dys = fb_in(&f, dy, bytes4(count));
    dg_ref dxs = fb_out(&f, dx, bytes4(count));
    if (f.st == DG_OK)
        fb_ran(&f, e->cpu->relu_bwd(cpu_ctx_of(e), ys, dys, dxs, count));
    char shape[96];
    snprintf(shape, sizeof shape, "relu_bwd %zu", count);
    return fb_end(&f, shape);
}

static void pool_shape(char *buf, size_t len, const char *name, const dg_pool_shape *s)
{
    snprintf(buf, len, "%s n%d c%d %dx%d k%d s%d", name, s->n, s->c, s->h, s->w, s->k, s->stride);
}

static dg_status run_maxpool_fwd(dg_ctx *ctx, dg_engine *e, const dg_pool_shape *s, dg_ref x,
                                 dg_ref y, dg_ref argmax)
{
    dg_status st;
    route r = route_op(ctx, e, DG_OP_MAXPOOL, e && e->cpu->maxpool_fwd, &st);
    if (r == ROUTE_ERROR)
        return st;
    if (r == ROUTE_NATIVE)
        return native(ctx, e, "maxpool_fwd", e->be->maxpool_fwd(e->bctx, s, x, y, argmax));
    fallback f;
    fb_begin(&f, ctx, e, DG_OP_MAXPOOL);
    size_t out = bytes4(elems4(s->n, s->c, s->ho, s->wo));
    dg_ref xs = fb_in(&f, x, bytes4(elems4(s->n, s->c, s->h, s->w)));
    dg_ref ys = fb_out(&f, y, out);
    dg_ref as = fb_out(&f, argmax, out); /* int32 */
    if (f.st == DG_OK)
        fb_ran(&f, e->cpu->maxpool_fwd(cpu_ctx_of(e), s, xs, ys, as));
    char shape[96];
    pool_shape(shape, sizeof shape, "maxpool", s);
    return fb_end(&f, shape);
}

static dg_status run_maxpool_bwd(dg_ctx *ctx, dg_engine *e, const dg_pool_shape *s, dg_ref dy,
                                 dg_ref argmax, dg_ref dx)
{
    dg_status st;
    route r = route_op(ctx, e, DG_OP_MAXPOOL, e && e->cpu->maxpool_bwd, &st);
    if (r == ROUTE_ERROR)
        return st;
    if (r == ROUTE_NATIVE)
        return native(ctx, e, "maxpool_bwd", e->be->maxpool_bwd(e->bctx, s, dy, argmax, dx));
    fallback f;
    fb_begin(&f, ctx, e, DG_OP_MAXPOOL);
    size_t out = bytes4(elems4(s->n, s->c, s->ho, s->wo));
    dg_ref dys = fb_in(&f, dy, out);
    dg_ref as = fb_in(&f, argmax, out); /* int32 */
    dg_ref dxs = fb_out(&f, dx, bytes4(elems4(s->n, s->c, s->h, s->w)));
    if (f.st == DG_OK)
        fb_ran(&f, e->cpu->maxpool_bwd(cpu_ctx_of(e), s, dys, as, dxs));
    char shape[96];
    pool_shape(shape, sizeof shape, "maxpool_bwd", s);
    return fb_end(&f, shape);
}

static void conv_shape(char *buf, size_t len, const char *name, const dg_conv_shape *s)
{
    snprintf(buf, len, "%s n%d c%d %dx%d k%d %dx%d s%d p%d", name, s->n, s->c, s->h, s->w, s->k,
             s->kh, s->kw, s->stride, s->pad);
}

size_t dg_op_conv2d_workspace(dg_engine *e, const dg_conv_shape *s)
{
    /* The fallback stages its own cpu workspace, so only a backend that runs
     * conv2d itself needs device workspace. */
    bool on_be = dg_engine_native(e, DG_OP_CONV2D) || (e && !e->cpu_ctx);
    if (!on_be || !e->be->conv2d_workspace)
        return 0;
    return e->be->conv2d_workspace(e->bctx, s);
}

/* The cpu's own scratch for the fallback (the device's work ref is never used). */
static dg_ref conv_scratch(fallback *f, const dg_conv_shape *s)
{
    const dg_backend_iface *cpu = f->e->cpu;
    size_t ws = cpu->conv2d_workspace ? cpu->conv2d_workspace(cpu_ctx_of(f->e), s) : 0;
    return fb_ref(f, (dg_ref){NULL, 0}, ws, STAGE_SCRATCH);
}

static dg_status run_conv2d_fwd(dg_ctx *ctx, dg_engine *e, const dg_conv_shape *s, dg_ref x,
                                dg_ref w, dg_ref bias, dg_ref y, dg_ref work)
{
    dg_status st;
    route r = route_op(ctx, e, DG_OP_CONV2D, e && e->cpu->conv2d_fwd, &st);
    if (r == ROUTE_ERROR)
        return st;
    if (r == ROUTE_NATIVE)
        return native(ctx, e, "conv2d_fwd", e->be->conv2d_fwd(e->bctx, s, x, w, bias, y, work));
    fallback f;
    fb_begin(&f, ctx, e, DG_OP_CONV2D);
    dg_ref xs = fb_in(&f, x, bytes4(elems4(s->n, s->c, s->h, s->w)));
    dg_ref ws = fb_in(&f, w, bytes4(elems4(s->k, s->c, s->kh, s->kw)));
    dg_ref bs = fb_in(&f, bias, bytes4(elems4(s->k, 1, 1, 1)));
    dg_ref ys = fb_out(&f, y, bytes4(elems4(s->n, s->k, s->ho, s->wo)));
    dg_ref wk = conv_scratch(&f, s);
    if (f.st == DG_OK)
        fb_ran(&f, e->cpu->conv2d_fwd(cpu_ctx_of(e), s, xs, ws, bs, ys, wk));
    char shape[96];
    conv_shape(shape, sizeof shape, "conv2d", s);
    return fb_end(&f, shape);
}

static dg_status run_conv2d_bwd(dg_ctx *ctx, dg_engine *e, const dg_conv_shape *s, dg_ref x,
                                dg_ref w, dg_ref dy, dg_ref dx, dg_ref dw, dg_ref db, dg_ref work)
{
    dg_status st;
    route r = route_op(ctx, e, DG_OP_CONV2D, e && e->cpu->conv2d_bwd, &st);
    if (r == ROUTE_ERROR)
        return st;
    if (r == ROUTE_NATIVE)
        return native(ctx, e, "conv2d_bwd",
                      e->be->conv2d_bwd(e->bctx, s, x, w, dy, dx, dw, db, work));
    fallback f;
    fb_begin(&f, ctx, e, DG_OP_CONV2D);
    size_t xb = bytes4(elems4(s->n, s->c, s->h, s->w));
    size_t wb = bytes4(elems4(s->k, s->c, s->kh, s->kw));
    dg_ref xs = fb_in(&f, x, xb);
    dg_ref ws = fb_in(&f, w, wb);
    dg_ref dys = fb_in(&f, dy, bytes4(elems4(s->n, s->k, s->ho, s->wo)));
    dg_ref dxs = fb_out(&f, dx, xb);
    dg_ref dws = fb_out(&f, dw, wb);
    dg_ref dbs = fb_out(&f, db, bytes4(elems4(s->k, 1, 1, 1)));
    dg_ref wk = conv_scratch(&f, s);
    if (f.st == DG_OK)
        fb_ran(&f, e->cpu->conv2d_bwd(cpu_ctx_of(e), s, xs, ws, dys, dxs, dws, dbs, wk));
    char shape[96];
    conv_shape(shape, sizeof shape, "conv2d_bwd", s);
    return fb_end(&f, shape);
}

static dg_status run_xent(dg_ctx *ctx, dg_engine *e, int n, int classes, dg_ref logits,
                          dg_ref labels, dg_ref dlogits, dg_ref acc)
{
    dg_status st;
    route r = route_op(ctx, e, DG_OP_XENT, e && e->cpu->xent, &st);
    if (r == ROUTE_ERROR)
        return st;
    if (r == ROUTE_NATIVE)
        return native(ctx, e, "xent",
                      e->be->xent(e->bctx, n, classes, logits, labels, dlogits, acc));
    fallback f;
    fb_begin(&f, ctx, e, DG_OP_XENT);
    size_t lb = bytes4(elems4(n, classes, 1, 1));
    dg_ref ls = fb_in(&f, logits, lb);
    dg_ref lab = fb_in(&f, labels, bytes4(elems4(n, 1, 1, 1))); /* int32 */
    dg_ref dls = fb_out(&f, dlogits, lb);
    dg_ref as = fb_inout(&f, acc, 2 * sizeof(float)); /* accumulated */
    if (f.st == DG_OK)
        fb_ran(&f, e->cpu->xent(cpu_ctx_of(e), n, classes, ls, lab, dls, as));
    char shape[96];
    snprintf(shape, sizeof shape, "softmax_xent n%d classes%d", n, classes);
    return fb_end(&f, shape);
}

static dg_status run_sgd(dg_ctx *ctx, dg_engine *e, dg_ref w, dg_ref g, dg_ref mom, size_t count,
                         float lr, float momentum, float weight_decay)
{
    dg_status st;
    route r = route_op(ctx, e, DG_OP_SGD, e && e->cpu->sgd, &st);
    if (r == ROUTE_ERROR)
        return st;
    if (r == ROUTE_NATIVE)
        return native(ctx, e, "sgd",
                      e->be->sgd(e->bctx, w, g, mom, count, lr, momentum, weight_decay));
    fallback f;
    fb_begin(&f, ctx, e, DG_OP_SGD);
    size_t b = bytes4(count);
    dg_ref gs = fb_in(&f, g, b);
    dg_ref ws = fb_inout(&f, w, b);
    /* With momentum 0 the buffer is untouched: stage it without copies. */
    dg_ref ms = mom.buf ? fb_ref(&f, mom, b, momentum != 0.0f ? STAGE_INOUT : STAGE_SCRATCH)
                        : (dg_ref){NULL, 0};
    if (f.st == DG_OK)
        fb_ran(&f, e->cpu->sgd(cpu_ctx_of(e), ws, gs, ms, count, lr, momentum, weight_decay));
    char shape[96];
    snprintf(shape, sizeof shape, "sgd %zu", count);
    return fb_end(&f, shape);
}

/* ---- census JSON -------------------------------------------------------- */

static int by_ms_desc(const void *pa, const void *pb)
{
    const census_rec *a = *(const census_rec *const *)pa, *b = *(const census_rec *const *)pb;
    return a->ms < b->ms ? 1 : a->ms > b->ms ? -1 : strcmp(a->shape, b->shape);
}

cJSON *dg_engine_census_json(const dg_engine *e)
{
    cJSON *arr = cJSON_CreateArray();
    if (!arr || !e || !e->census)
        return arr;
    const struct dg_census *c = e->census;
    size_t n = c->n + (c->have_other ? 1 : 0);
    const census_rec **v = dg_malloc((n ? n : 1) * sizeof *v);
    if (!v) {
        cJSON_Delete(arr);
        return NULL;
    }
    for (size_t i = 0; i < c->n; i++)
        v[i] = &c->recs[i];
    if (c->have_other)
        v[c->n] = &c->other;
    qsort(v, n, sizeof *v, by_ms_desc);
    for (size_t i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            cJSON_Delete(arr);
            dg_free(v);
            return NULL;
        }
        cJSON_AddStringToObject(o, "op", v[i]->op);
        cJSON_AddStringToObject(o, "shape", v[i]->shape);
        cJSON_AddStringToObject(o, "backend", e->name);
        cJSON_AddStringToObject(o, "reason", v[i]->reason);
        cJSON_AddNumberToObject(o, "calls", (double)v[i]->calls);
        cJSON_AddNumberToObject(o, "ms_total", v[i]->ms);
        cJSON_AddNumberToObject(o, "bytes_d2h", (double)v[i]->d2h);
        cJSON_AddNumberToObject(o, "bytes_h2d", (double)v[i]->h2d);
    }
    dg_free(v);
    return arr;
}

/* ---- per-op profiling (devgate profile) ----------------------------------
 * Off: each op entry point costs one branch on census->prof_on. On: the op is
 * bracketed by synchronisation and timed with the host clock, so each op is
 * measured in isolation (no overlap with its neighbours). */

typedef struct prof_row {
    uint64_t hash;
    const char *op; /* static name: "conv2d_fwd", "relu_bwd", ... */
    char shape[96]; /* as in the fallback census */
    bool fallback;
    size_t calls;
    double ms;
    size_t d2h, h2d; /* bytes the fallback copied */
} prof_row;

typedef struct prof_event {
    uint32_t row; /* index into rows, UINT32_MAX: "other" */
    double ts, dur; /* microseconds since profiling was first switched on */
} prof_event;

struct prof {
    double origin; /* dg_now() when first switched on */
    prof_row *rows;
    size_t n, cap;
    prof_row other;
    bool have_other;
    prof_event *ev;
    size_t nev, capev, dropped;
};

static void prof_free(struct prof *p)
{
    if (!p)
        return;
    dg_free(p->rows);
    dg_free(p->ev);
    dg_free(p);
}

void dg_engine_set_profiling(dg_engine *e, bool on)
{
    if (!e || !e->census)
        return;
    if (on && !e->census->prof) {
        e->census->prof = dg_calloc(1, sizeof *e->census->prof);
        if (!e->census->prof)
            return; /* out of host memory: stays off, ops_json stays [] */
        e->census->prof->origin = dg_now();
    }
    e->census->prof_on = on;
}

static prof_row *prof_find(struct prof *p, const char *op, const char *shape, bool fb,
                           uint32_t *idx)
{
    uint64_t h = fnv(fnv(0xcbf29ce484222325ull, op), shape) ^ (fb ? 1u : 0u);
    for (size_t i = 0; i < p->n; i++)
        if (p->rows[i].hash == h && p->rows[i].fallback == fb &&
            strcmp(p->rows[i].op, op) == 0 && strcmp(p->rows[i].shape, shape) == 0) {
            *idx = (uint32_t)i;
            return &p->rows[i];
        }
    if (p->n == p->cap && p->cap < PROF_ROWS_MAX) {
        size_t ncap = p->cap ? p->cap * 2 : 32;
        prof_row *nr = dg_realloc(p->rows, ncap * sizeof *nr);
        if (nr) {
            p->rows = nr;
            p->cap = ncap;
        }
    }
    if (p->n == p->cap) { /* full (or no memory): fold into "other" */
        if (!p->have_other) {
            p->have_other = true;
            p->other.op = "other";
            snprintf(p->other.shape, sizeof p->other.shape, "folded: more than %d distinct rows",
                     PROF_ROWS_MAX);
        }
        *idx = UINT32_MAX;
        return &p->other;
    }
    prof_row *r = &p->rows[p->n];
    *idx = (uint32_t)p->n++;
    memset(r, 0, sizeof *r);
    r->hash = h;
    r->op = op;
    r->fallback = fb;
    snprintf(r->shape, sizeof r->shape, "%s", shape);
    return r;
}

/* One profiled call in flight. */
typedef struct prof_call {
    bool fallback;
    double t0;
    size_t d2h0, h2d0;
} prof_call;

/* Synchronises (so the op starts on an idle device) and starts the clock. */
static dg_status prof_begin(dg_ctx *ctx, dg_engine *e, dg_op op, prof_call *pc)
{
    pc->fallback = e->cpu_ctx && !dg_engine_native(e, op);
    dg_status st = e->be->synchronize(e->bctx);
    if (st != DG_OK)
        return native(ctx, e, "synchronize (profiling)", st);
    pc->d2h0 = e->census->fb_d2h;
    pc->h2d0 = e->census->fb_h2d;
    pc->t0 = dg_now();
    return DG_OK;
}

/* Waits for the op to finish, stops the clock and records row and event. */
static dg_status prof_end(dg_ctx *ctx, dg_engine *e, prof_call *pc, const char *op,
                          const char *shape, dg_status st)
{
    if (st != DG_OK)
        return st;
    if ((st = e->be->synchronize(e->bctx)) != DG_OK)
        return native(ctx, e, "synchronize (profiling)", st);
    double t1 = dg_now();
    struct prof *p = e->census->prof;
    uint32_t idx;
    prof_row *r = prof_find(p, op, shape, pc->fallback, &idx);
    r->calls++;
    r->ms += (t1 - pc->t0) * 1e3;
    r->d2h += e->census->fb_d2h - pc->d2h0;
    r->h2d += e->census->fb_h2d - pc->h2d0;
    if (p->nev == p->capev && p->capev < PROF_EVENTS_MAX) {
        size_t ncap = p->capev ? p->capev * 2 : 4096;
        if (ncap > PROF_EVENTS_MAX)
            ncap = PROF_EVENTS_MAX;
        prof_event *ne = dg_realloc(p->ev, ncap * sizeof *ne);
        if (ne) {
            p->ev = ne;
            p->capev = ncap;
        }
    }
    if (p->nev < p->capev)
        p->ev[p->nev++] = (prof_event){idx, (pc->t0 - p->origin) * 1e6, (t1 - pc->t0) * 1e6};
    else
        p->dropped++;
    return DG_OK;
}

static int row_by_ms_desc(const void *pa, const void *pb)
{
    const prof_row *a = *(const prof_row *const *)pa, *b = *(const prof_row *const *)pb;
    if (a->ms != b->ms)
        return a->ms < b->ms ? 1 : -1;
    int c = strcmp(a->op, b->op);
    return c ? c : strcmp(a->shape, b->shape);
}

cJSON *dg_engine_ops_json(const dg_engine *e)
{
    cJSON *arr = cJSON_CreateArray();
    if (!arr || !e || !e->census || !e->census->prof)
        return arr;
    const struct prof *p = e->census->prof;
    size_t n = p->n + (p->have_other ? 1 : 0);
    const prof_row **v = dg_malloc((n ? n : 1) * sizeof *v);
    if (!v) {
        cJSON_Delete(arr);
        return NULL;
    }
    double total = 0;
    for (size_t i = 0; i < p->n; i++) {
        v[i] = &p->rows[i];
        total += p->rows[i].ms;
    }
    if (p->have_other) {
        v[p->n] = &p->other;
        total += p->other.ms;
    }
    qsort(v, n, sizeof *v, row_by_ms_desc);
    for (size_t i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            cJSON_Delete(arr);
            dg_free(v);
            return NULL;
        }
        cJSON_AddStringToObject(o, "op", v[i]->op);
        cJSON_AddStringToObject(o, "shape", v[i]->shape);
        cJSON_AddStringToObject(o, "backend", e->name);
        cJSON_AddBoolToObject(o, "fallback", v[i]->fallback);
        cJSON_AddNumberToObject(o, "calls", (double)v[i]->calls);
        cJSON_AddNumberToObject(o, "ms_total", v[i]->ms);
        cJSON_AddNumberToObject(o, "ms_mean", v[i]->calls ? v[i]->ms / (double)v[i]->calls : 0);
        cJSON_AddNumberToObject(o, "share", total > 0 ? v[i]->ms / total : 0);
        if (v[i]->fallback) {
            cJSON_AddNumberToObject(o, "bytes_d2h", (double)v[i]->d2h);
            cJSON_AddNumberToObject(o, "bytes_h2d", (double)v[i]->h2d);
        }
    }
    dg_free(v);
    return arr;
}

cJSON *dg_engine_trace_json(const dg_engine *e)
{
    cJSON *arr = cJSON_CreateArray();
    if (!arr || !e || !e->census || !e->census->prof)
        return arr;
    const struct prof *p = e->census->prof;
    for (size_t i = 0; i < p->nev; i++) {
        const prof_event *ev = &p->ev[i];
        const prof_row *r = ev->row == UINT32_MAX ? &p->other : &p->rows[ev->row];
        cJSON *o = cJSON_CreateObject(), *args = o ? cJSON_AddObjectToObject(o, "args") : NULL;
        if (!args || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            cJSON_Delete(arr);
            return NULL;
        }
        cJSON_AddStringToObject(o, "name", r->op);
        cJSON_AddStringToObject(o, "cat", r->fallback ? "op,fallback" : "op");
        cJSON_AddStringToObject(o, "ph", "X");
        /* Whole nanoseconds: exact enough, and short in the file. */
        cJSON_AddNumberToObject(o, "ts", (double)llround(ev->ts * 1e3) / 1e3);
        cJSON_AddNumberToObject(o, "dur", (double)llround(ev->dur * 1e3) / 1e3);
        cJSON_AddNumberToObject(o, "pid", 1);
        cJSON_AddNumberToObject(o, "tid", 1);
        cJSON_AddStringToObject(args, "shape", r->shape);
        cJSON_AddStringToObject(args, "backend", e->name);
        cJSON_AddBoolToObject(args, "fallback", r->fallback);
    }
    return arr;
}

/* ---- public op entry points: profiled or straight through --------------- */

#define PROFILED(op_id, name, shape_fmt, call)                                                     \
    do {                                                                                           \
        if (__builtin_expect(!e || !e->census->prof_on, 1))                                        \
            return call;                                                                           \
        prof_call pc;                                                                              \
        dg_status pst = prof_begin(ctx, e, op_id, &pc);                                            \
        if (pst != DG_OK)                                                                          \
            return pst;                                                                            \
        char shape[96];                                                                            \
        shape_fmt;                                                                                 \
        return prof_end(ctx, e, &pc, name, shape, call);                                           \
    } while (0)

dg_status dg_op_gemm(dg_ctx *ctx, dg_engine *e, bool ta, bool tb, int m, int n, int k, float alpha,
                     dg_ref a, int lda, dg_ref b, int ldb, float beta, dg_ref c, int ldc)
{
    PROFILED(DG_OP_GEMM, "gemm",
             snprintf(shape, sizeof shape, "gemm %dx%dx%d ta=%d tb=%d", m, n, k, (int)ta, (int)tb),
             run_gemm(ctx, e, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
}

dg_status dg_op_fill(dg_ctx *ctx, dg_engine *e, dg_ref x, size_t count, float value)
{
    PROFILED(DG_OP_FILL, "fill", snprintf(shape, sizeof shape, "fill %zu", count),
             run_fill(ctx, e, x, count, value));
}

dg_status dg_op_bias_add(dg_ctx *ctx, dg_engine *e, dg_ref y, dg_ref bias, int outer, int channels,
                         int inner)
{
    PROFILED(DG_OP_BIAS_ADD, "bias_add",
             snprintf(shape, sizeof shape, "bias_add %dx%dx%d", outer, channels, inner),
             run_bias_add(ctx, e, y, bias, outer, channels, inner));
}

dg_status dg_op_bias_grad(dg_ctx *ctx, dg_engine *e, dg_ref dy, dg_ref db, int outer, int channels,
                          int inner)
{
    PROFILED(DG_OP_BIAS_GRAD, "bias_grad",
             snprintf(shape, sizeof shape, "bias_grad %dx%dx%d", outer, channels, inner),
             run_bias_grad(ctx, e, dy, db, outer, channels, inner));
}

dg_status dg_op_relu_fwd(dg_ctx *ctx, dg_engine *e, dg_ref x, dg_ref y, size_t count)
{
    PROFILED(DG_OP_RELU, "relu_fwd", snprintf(shape, sizeof shape, "relu %zu", count),
             run_relu_fwd(ctx, e, x, y, count));
}

dg_status dg_op_relu_bwd(dg_ctx *ctx, dg_engine *e, dg_ref y, dg_ref dy, dg_ref dx, size_t count)
{
    PROFILED(DG_OP_RELU, "relu_bwd", snprintf(shape, sizeof shape, "relu_bwd %zu", count),
             run_relu_bwd(ctx, e, y, dy, dx, count));
}

dg_status dg_op_maxpool_fwd(dg_ctx *ctx, dg_engine *e, const dg_pool_shape *s, dg_ref x, dg_ref y,
                            dg_ref argmax)
{
    PROFILED(DG_OP_MAXPOOL, "maxpool_fwd", pool_shape(shape, sizeof shape, "maxpool", s),
             run_maxpool_fwd(ctx, e, s, x, y, argmax));
}

dg_status dg_op_maxpool_bwd(dg_ctx *ctx, dg_engine *e, const dg_pool_shape *s, dg_ref dy,
                            dg_ref argmax, dg_ref dx)
{
    PROFILED(DG_OP_MAXPOOL, "maxpool_bwd", pool_shape(shape, sizeof shape, "maxpool_bwd", s),
             run_maxpool_bwd(ctx, e, s, dy, argmax, dx));
}

dg_status dg_op_conv2d_fwd(dg_ctx *ctx, dg_engine *e, const dg_conv_shape *s, dg_ref x, dg_ref w,
                           dg_ref bias, dg_ref y, dg_ref work)
{
    PROFILED(DG_OP_CONV2D, "conv2d_fwd", conv_shape(shape, sizeof shape, "conv2d", s),
             run_conv2d_fwd(ctx, e, s, x, w, bias, y, work));
}

dg_status dg_op_conv2d_bwd(dg_ctx *ctx, dg_engine *e, const dg_conv_shape *s, dg_ref x, dg_ref w,
                           dg_ref dy, dg_ref dx, dg_ref dw, dg_ref db, dg_ref work)
{
    PROFILED(DG_OP_CONV2D, "conv2d_bwd", conv_shape(shape, sizeof shape, "conv2d_bwd", s),
             run_conv2d_bwd(ctx, e, s, x, w, dy, dx, dw, db, work));
}

dg_status dg_op_xent(dg_ctx *ctx, dg_engine *e, int n, int classes, dg_ref logits, dg_ref labels,
                     dg_ref dlogits, dg_ref acc)
{
    PROFILED(DG_OP_XENT, "softmax_xent",
             snprintf(shape, sizeof shape, "softmax_xent n%d classes%d", n, classes),
             run_xent(ctx, e, n, classes, logits, labels, dlogits, acc));
}

dg_status dg_op_sgd(dg_ctx *ctx, dg_engine *e, dg_ref w, dg_ref g, dg_ref mom, size_t count,
                    float lr, float momentum, float weight_decay)
{
    PROFILED(DG_OP_SGD, "sgd", snprintf(shape, sizeof shape, "sgd %zu", count),
             run_sgd(ctx, e, w, g, mom, count, lr, momentum, weight_decay));
}
