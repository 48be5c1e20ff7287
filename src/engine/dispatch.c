/* The engine: a backend opened for training with its allocator, op dispatch
 * (native, or the cpu backend with copies both ways) and the fallback census.
 * Every op entry point goes through one dispatch() over one table of calls
 * (dispatch_calls.c); --disable-op names are the call names. */
#include "engine/dispatch_int.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CENSUS_MAX 256         /* distinct records; further ones fold into "other" */
#define STAGE_MAX 64           /* cached cpu staging buffers per engine */
#define OPERANDS_MAX 8         /* staged operands of one op */
#define PROF_ROWS_MAX 1024     /* distinct profile rows; further ones fold into "other" */
#define PROF_EVENTS_MAX 200000 /* trace events kept; further ones are counted as dropped */

/* ---- native or not -------------------------------------------------------- */

static bool call_native(const dg_engine *e, dg_call c, const dg_op_desc *d);

bool dg_engine_native(const dg_engine *e, dg_op op)
{
    if (!e || (unsigned)op >= DG_OP__COUNT)
        return false;
    dg_op_desc d = dg_op_desc_any(op);
    for (int c = 0; c < DG_CALL__COUNT; c++)
        if (dg_call_op[c] == op && !call_native(e, (dg_call)c, &d))
            return false;
    return true;
}

/* ---- --disable-op parsing ---------------------------------------------- */

/* The calls name stands for: a call ("conv2d_fwd"), an op (every call of it:
 * "conv2d"), or "xent" for softmax_xent; 0 when it names none. */
static uint32_t calls_named(const char *s)
{
    if (strcmp(s, "xent") == 0)
        return 1u << DG_CALL_XENT;
    uint32_t m = 0;
    for (int c = 0; c < DG_CALL__COUNT; c++)
        if (strcmp(s, dg_call_names[c]) == 0 || strcmp(s, dg_op_names[dg_call_op[c]]) == 0)
            m |= 1u << c;
    return m;
}

dg_status dg_parse_disabled_ops(dg_ctx *ctx, const char *spec, const char *name, uint32_t *mask)
{
    *mask = 0;
    if (!spec)
        return DG_OK;
    /* Entries without a backend are for the device: never the host baseline. */
    bool name_is_host = name && dg_backend_is_host(name);
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
        char clean[96], cleanb[96];
        uint32_t calls = calls_named(entry);
        if (!calls) {
            dg_copy_clean(clean, sizeof clean, entry);
            return dg_fail(ctx, DG_ERR_USAGE,
                           "--disable-op: unknown op '%s' (known: gemm, fill, bias_add, bias_grad, "
                           "relu_fwd, relu_bwd, maxpool_fwd, maxpool_bwd, conv2d_fwd, conv2d_bwd, "
                           "softmax_xent (or xent), sgd; relu, maxpool and conv2d name both "
                           "directions)",
                           clean);
        }
        if (backend) {
            if (dg_backend_index(backend) < 0) {
                dg_copy_clean(cleanb, sizeof cleanb, backend);
                return dg_fail(ctx, DG_ERR_USAGE, "--disable-op: unknown backend '%s' (known: %s)",
                               cleanb, dg_backend_known());
            }
            if (dg_backend_is_host(backend)) {
                dg_copy_clean(clean, sizeof clean, entry);
                dg_copy_clean(cleanb, sizeof cleanb, backend);
                return dg_fail(ctx, DG_ERR_USAGE,
                               "--disable-op: %s@%s: %s is the fallback backend; ops cannot be "
                               "disabled on it",
                               clean, cleanb, cleanb);
            }
            if (!name || strcmp(backend, name) != 0)
                continue; /* for another backend */
        } else if (!name || name_is_host) {
            continue; /* for the device, and this is the baseline (or only a check) */
        }
        m |= calls;
    }
    *mask = m;
    return DG_OK;
}

dg_status dg_disable_ops_check(dg_ctx *ctx, const char *spec)
{
    uint32_t m;
    return dg_parse_disabled_ops(ctx, spec, NULL, &m);
}

/* ---- open and close ---------------------------------------------------- */

static void prof_free(struct prof *p);

void dg_engine_close(dg_engine *e)
{
    if (!e)
        return;
    dg_allocator_free(e->alloc);
    if (e->census) {
        for (size_t i = 0; i < e->census->nstage; i++)
            e->cpu->buf_free(dg_dp_cpu_ctx(e), e->census->stage[i].buf);
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
    bool is_cpu = be->caps.host;
    uint32_t mask = o.disabled_calls & ((1u << DG_CALL__COUNT) - 1);
    if (is_cpu && mask)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "cpu is the fallback backend; ops cannot be disabled on it");
    if (o.threads < 0)
        return dg_fail(ctx, DG_ERR_USAGE, "threads must be >= 0 (0: default), got %d", o.threads);
    /* A backend without set_math computes in exact fp32 only. */
    if (o.math != DG_MATH_FP32 && !(be->caps.tf32 && be->set_math))
        return dg_fail(ctx, DG_ERR_USAGE,
                       "the %s backend has no %s mode (--precision %s is for cuda)", be->name,
                       o.math == DG_MATH_BF16 ? "bf16" : "TF32", dg_math_name(o.math));

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
    e->disabled_calls = mask;

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
    /* The cpu backend's one thread pool: --threads, else OMP_NUM_THREADS,
     * else the usable physical cores (not every logical CPU, not past a
     * cgroup quota), then only those others leave free (dg_cpu_team_step). */
    dg_cpu_team_init(&e->team, o.threads);
    if (o.math != DG_MATH_FP32 && (st = be->set_math(e->bctx, (int)o.math)) != DG_OK) {
        const char *why = be->last_error ? be->last_error(e->bctx) : NULL;
        dg_engine_close(e);
        return dg_fail(ctx, st, "%s: %s math could not be enabled: %s", be->name,
                       dg_math_name(o.math), why && why[0] ? why : dg_status_name(st));
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

/* ---- census JSON -------------------------------------------------------- */

static int by_ms_desc(const void *pa, const void *pb)
{
    const census_rec *a = *(const census_rec *const *)pa, *b = *(const census_rec *const *)pb;
    return a->ms < b->ms ? 1 : a->ms > b->ms ? -1 : strcmp(a->shape, b->shape);
}

/* How rows_json writes one row into its object (total: the ops' summed time). */
typedef void (*row_fill)(cJSON *o, const void *row, const dg_engine *e, double total);

/* An array of one object per row (n rows size bytes apart, then other when not
 * NULL) in cmp's order, each written by fill; NULL when out of memory. */
static cJSON *rows_json(const dg_engine *e, const void *rows, size_t n, size_t size,
                        const void *other, int (*cmp)(const void *, const void *), row_fill fill,
                        double total)
{
    cJSON *arr = cJSON_CreateArray();
    size_t count = n + (other ? 1 : 0);
    const void **v = dg_malloc((count ? count : 1) * sizeof *v);
    if (!arr || !v) {
        cJSON_Delete(arr);
        dg_free(v);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = (const char *)rows + i * size;
    if (other)
        v[n] = other;
    qsort(v, count, sizeof *v, cmp);
    for (size_t i = 0; i < count; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            cJSON_Delete(arr);
            arr = NULL;
            break;
        }
        fill(o, v[i], e, total);
    }
    dg_free(v);
    return arr;
}

/* What a census row and an op-profile row both begin with: which op, at
 * which shape, on which backend. */
static void row_names(cJSON *o, const char *op, const char *shape, const dg_engine *e)
{
    cJSON_AddStringToObject(o, "op", op);
    cJSON_AddStringToObject(o, "shape", shape);
    cJSON_AddStringToObject(o, "backend", e->name);
}

/* The bytes a fallback copied each way, as both rows end. */
static void row_bytes(cJSON *o, size_t d2h, size_t h2d)
{
    cJSON_AddNumberToObject(o, "bytes_d2h", (double)d2h);
    cJSON_AddNumberToObject(o, "bytes_h2d", (double)h2d);
}

static void census_fill(cJSON *o, const void *row, const dg_engine *e, double total)
{
    const census_rec *r = row;
    (void)total;
    row_names(o, r->op, r->shape, e);
    cJSON_AddStringToObject(o, "reason", r->reason);
    cJSON_AddNumberToObject(o, "calls", (double)r->calls);
    cJSON_AddNumberToObject(o, "ms_total", r->ms);
    row_bytes(o, r->d2h, r->h2d);
}

cJSON *dg_engine_census_json(const dg_engine *e)
{
    if (!e || !e->census)
        return cJSON_CreateArray();
    const struct dg_census *c = e->census;
    return rows_json(e, c->recs, c->n, sizeof *c->recs, c->have_other ? &c->other : NULL,
                     by_ms_desc, census_fill, 0);
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
    uint32_t row;   /* index into rows, UINT32_MAX: "other" */
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
    uint64_t h = dg_dp_fnv(dg_dp_fnv(0xcbf29ce484222325ull, op), shape) ^ (fb ? 1u : 0u);
    for (size_t i = 0; i < p->n; i++)
        if (p->rows[i].hash == h && p->rows[i].fallback == fb && strcmp(p->rows[i].op, op) == 0 &&
            strcmp(p->rows[i].shape, shape) == 0) {
            *idx = (uint32_t)i;
            return &p->rows[i];
        }
    if (!dg_grow_max((void **)&p->rows, &p->cap, p->n + 1, sizeof *p->rows, PROF_ROWS_MAX)) {
        /* full (or no memory): fold into "other" */
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
static dg_status prof_begin(dg_ctx *ctx, dg_engine *e, bool on_cpu, prof_call *pc)
{
    pc->fallback = on_cpu;
    dg_status st = e->be->synchronize(e->bctx);
    if (st != DG_OK)
        return dg_dp_native(ctx, e, "synchronize (profiling)", st);
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
        return dg_dp_native(ctx, e, "synchronize (profiling)", st);
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

static void prof_fill(cJSON *o, const void *row, const dg_engine *e, double total)
{
    const prof_row *r = row;
    row_names(o, r->op, r->shape, e);
    cJSON_AddBoolToObject(o, "fallback", r->fallback);
    cJSON_AddNumberToObject(o, "calls", (double)r->calls);
    cJSON_AddNumberToObject(o, "ms_total", r->ms);
    cJSON_AddNumberToObject(o, "ms_mean", r->calls ? r->ms / (double)r->calls : 0);
    cJSON_AddNumberToObject(o, "share", total > 0 ? r->ms / total : 0);
    if (r->fallback)
        row_bytes(o, r->d2h, r->h2d);
}

cJSON *dg_engine_ops_json(const dg_engine *e)
{
    if (!e || !e->census || !e->census->prof)
        return cJSON_CreateArray();
    const struct prof *p = e->census->prof;
    double total = 0;
    for (size_t i = 0; i < p->n; i++)
        total += p->rows[i].ms;
    if (p->have_other)
        total += p->other.ms;
    return rows_json(e, p->rows, p->n, sizeof *p->rows, p->have_other ? &p->other : NULL,
                     row_by_ms_desc, prof_fill, total);
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

static bool call_native(const dg_engine *e, dg_call c, const dg_op_desc *d)
{
    if (e->disabled_calls & (1u << c))
        return false;
    return e->be->supports_op && e->be->supports_op(e->bctx, d) && dg_engine_implements(e->be, c);
}

/* What supports_op sees of call c with arguments a. */
static dg_op_desc desc_of(dg_call c, const call_args *a)
{
    return (dg_op_desc){.op = dg_call_op[c],
                        .call = c,
                        .dtype = DG_DTYPE_F32,
                        .m = a->m,
                        .n = a->n,
                        .k = a->k,
                        .ta = a->ta,
                        .tb = a->tb,
                        .count = a->count,
                        .conv = a->conv,
                        .pool = a->pool};
}

/* Result of a native call, with the backend's message on failure. */
dg_status dg_dp_native(dg_ctx *ctx, dg_engine *e, const char *fn, dg_status st)
{
    if (st == DG_OK)
        return DG_OK;
    const char *err = e->be->last_error(e->bctx);
    return dg_fail(ctx, st, "%s: %s: %s", e->name, fn, err && *err ? err : dg_status_name(st));
}

/* Runs the call on the cpu with its places staged, and records the fallback. */
static dg_status fall_back(dg_ctx *ctx, dg_engine *e, dg_call c, const call_args *a, char *shape,
                           size_t shape_len)
{
    const call_kind *k = &dg_dp_calls[c];
    fallback f;
    dg_ref s[OPERANDS_MAX] = {{0}};
    dg_fb_begin(&f, ctx, e, c);
    k->stage(&f, a, s);
    if (f.st == DG_OK)
        dg_fb_ran(&f, k->invoke(e->cpu, dg_dp_cpu_ctx(e), a, s));
    if (!shape[0])
        k->shape(a, shape, shape_len);
    return dg_fb_end(&f, shape);
}

/* The one dispatch: native, on the cpu fallback, or an error; profiled when
 * profiling is on. */
static dg_status dispatch(dg_ctx *ctx, dg_engine *e, dg_call c, const call_args *a)
{
    const char *fn = dg_call_names[c];
    dg_op op = dg_call_op[c];
    if (!e)
        return dg_fail(ctx, DG_ERR_USAGE, "%s: no engine", dg_op_names[op]);
    const call_kind *k = &dg_dp_calls[c];
    dg_op_desc d = desc_of(c, a);
    bool nat = call_native(e, c, &d);
    if (!nat && !e->cpu_ctx) { /* the engine is the cpu: nothing to fall back to */
        if (!k->has(e->cpu))
            return dg_fail(ctx, DG_ERR_UNAVAILABLE, "op %s is not supported by %s", dg_op_names[op],
                           e->name);
        nat = true;
    } else if (!nat && !k->has(e->cpu)) {
        return dg_fail(ctx, DG_ERR_UNAVAILABLE,
                       "op %s is supported neither by %s nor by the cpu fallback", dg_op_names[op],
                       e->name);
    }
    char shape[96] = "";
    bool prof = e->census->prof_on;
    prof_call pc = {0};
    if (__builtin_expect(prof, 0)) {
        k->shape(a, shape, sizeof shape);
        dg_status pst = prof_begin(ctx, e, !nat, &pc);
        if (pst != DG_OK)
            return pst;
    }
    dg_status st = nat ? dg_dp_native(ctx, e, fn, k->invoke(e->be, e->bctx, a, a->r))
                       : fall_back(ctx, e, c, a, shape, sizeof shape);
    return prof ? prof_end(ctx, e, &pc, fn, shape, st) : st;
}

size_t dg_op_conv2d_workspace(dg_engine *e, const dg_conv_shape *s)
{
    /* The fallback stages its own cpu workspace, so only a backend that runs
     * a conv2d call itself needs device workspace. */
    if (!e)
        return 0;
    call_args a = {.conv = s};
    dg_op_desc fwd = desc_of(DG_CALL_CONV2D_FWD, &a), bwd = desc_of(DG_CALL_CONV2D_BWD, &a);
    bool on_be = call_native(e, DG_CALL_CONV2D_FWD, &fwd) ||
                 call_native(e, DG_CALL_CONV2D_BWD, &bwd) || !e->cpu_ctx;
    if (!on_be || !e->be->conv2d_workspace)
        return 0;
    return e->be->conv2d_workspace(e->bctx, s);
}

/* ---- public op entry points ---------------------------------------------- */

#define PLACES(...) .r = {__VA_ARGS__}

dg_status dg_op_gemm(dg_ctx *ctx, dg_engine *e, bool ta, bool tb, int m, int n, int k, float alpha,
                     dg_ref a, int lda, dg_ref b, int ldb, float beta, dg_ref c, int ldc)
{
    call_args x = {.ta = ta,
                   .tb = tb,
                   .m = m,
                   .n = n,
                   .k = k,
                   .alpha = alpha,
                   .beta = beta,
                   .lda = lda,
                   .ldb = ldb,
                   .ldc = ldc,
                   PLACES(a, b, c)};
    return dispatch(ctx, e, DG_CALL_GEMM, &x);
}

dg_status dg_op_fill(dg_ctx *ctx, dg_engine *e, dg_ref x, size_t count, float value)
{
    call_args a = {.count = count, .value = value, PLACES(x)};
    return dispatch(ctx, e, DG_CALL_FILL, &a);
}

dg_status dg_op_bias_add(dg_ctx *ctx, dg_engine *e, dg_ref y, dg_ref bias, int outer, int channels,
                         int inner)
{
    call_args a = {.m = outer, .n = channels, .k = inner, PLACES(y, bias)};
    return dispatch(ctx, e, DG_CALL_BIAS_ADD, &a);
}

dg_status dg_op_bias_grad(dg_ctx *ctx, dg_engine *e, dg_ref dy, dg_ref db, int outer, int channels,
                          int inner)
{
    call_args a = {.m = outer, .n = channels, .k = inner, PLACES(dy, db)};
    return dispatch(ctx, e, DG_CALL_BIAS_GRAD, &a);
}

dg_status dg_op_relu_fwd(dg_ctx *ctx, dg_engine *e, dg_ref x, dg_ref y, size_t count)
{
    call_args a = {.count = count, PLACES(x, y)};
    return dispatch(ctx, e, DG_CALL_RELU_FWD, &a);
}

dg_status dg_op_relu_bwd(dg_ctx *ctx, dg_engine *e, dg_ref y, dg_ref dy, dg_ref dx, size_t count)
{
    call_args a = {.count = count, PLACES(y, dy, dx)};
    return dispatch(ctx, e, DG_CALL_RELU_BWD, &a);
}

dg_status dg_op_maxpool_fwd(dg_ctx *ctx, dg_engine *e, const dg_pool_shape *s, dg_ref x, dg_ref y,
                            dg_ref argmax)
{
    call_args a = {.pool = s, PLACES(x, y, argmax)};
    return dispatch(ctx, e, DG_CALL_MAXPOOL_FWD, &a);
}

dg_status dg_op_maxpool_bwd(dg_ctx *ctx, dg_engine *e, const dg_pool_shape *s, dg_ref dy,
                            dg_ref argmax, dg_ref dx)
{
    call_args a = {.pool = s, PLACES(dy, argmax, dx)};
    return dispatch(ctx, e, DG_CALL_MAXPOOL_BWD, &a);
}

dg_status dg_op_conv2d_fwd(dg_ctx *ctx, dg_engine *e, const dg_conv_shape *s, dg_ref x, dg_ref w,
                           dg_ref bias, dg_ref y, dg_ref work)
{
    call_args a = {.conv = s, PLACES(x, w, bias, y, work)};
    return dispatch(ctx, e, DG_CALL_CONV2D_FWD, &a);
}

dg_status dg_op_conv2d_bwd(dg_ctx *ctx, dg_engine *e, const dg_conv_shape *s, dg_ref x, dg_ref w,
                           dg_ref dy, dg_ref dx, dg_ref dw, dg_ref db, dg_ref work)
{
    call_args a = {.conv = s, PLACES(x, w, dy, dx, dw, db, work)};
    return dispatch(ctx, e, DG_CALL_CONV2D_BWD, &a);
}

dg_status dg_op_xent(dg_ctx *ctx, dg_engine *e, int n, int classes, dg_ref logits, dg_ref labels,
                     dg_ref dlogits, dg_ref acc)
{
    call_args a = {.m = n, .n = classes, PLACES(logits, labels, dlogits, acc)};
    return dispatch(ctx, e, DG_CALL_XENT, &a);
}

dg_status dg_op_sgd(dg_ctx *ctx, dg_engine *e, dg_ref w, dg_ref g, dg_ref mom, size_t count,
                    float lr, float momentum, float weight_decay)
{
    call_args a = {
        .count = count, .lr = lr, .momentum = momentum, .wd = weight_decay, PLACES(w, g, mom)};
    return dispatch(ctx, e, DG_CALL_SGD, &a);
}
