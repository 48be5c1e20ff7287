/* Level 2: running the op cases on a backend and judging each output
 * against its tolerance (gate_ops.h). Each case gets fresh device buffers,
 * released before the next; a call the backend does not run natively
 * (supports_op false, or no entry point) is listed as "not native". */
#include "engine/engine.h"
#include "steps/gate_ops.h"

#include <math.h>
#include <string.h>

#define MAX_IN DG_OPC_MAX_IN
#define MAX_OUT DG_OPC_MAX_OUT
typedef dg_op_out op_out;
typedef dg_op_case op_case;

enum { MAX_BUFS = 8 };

typedef struct dev {
    const dg_backend_iface *be;
    void *bctx;
    void *buf[MAX_BUFS];
    int nbuf;
    const char *stage;
} dev;

/* A device buffer of bytes left as it comes (scratch); {NULL, 0} on failure. */
static dg_ref scratch(dev *d, size_t bytes, dg_status *st)
{
    void *b = NULL;
    d->stage = "buf_alloc";
    if (*st == DG_OK && d->nbuf < MAX_BUFS &&
        (*st = d->be->buf_alloc(d->bctx, bytes, &b)) == DG_OK) {
        d->buf[d->nbuf++] = b;
        return (dg_ref){b, 0};
    }
    if (*st == DG_OK)
        *st = DG_ERR_NOMEM;
    return (dg_ref){NULL, 0};
}

/* A device buffer of bytes holding src (NULL: zeros); {NULL, 0} on failure. */
static dg_ref put(dev *d, const void *src, size_t bytes, dg_status *st)
{
    dg_ref r = scratch(d, bytes ? bytes : 4, st);
    d->stage = "upload";
    if (*st == DG_OK && src)
        *st = d->be->upload(d->bctx, r.buf, 0, src, bytes);
    else if (*st == DG_OK && bytes)
        *st = d->be->fill(d->bctx, r, bytes / 4, 0.0f);
    return r;
}

/* The n floats (ints: int32) at r into got as doubles. */
static void get(dev *d, dg_ref r, size_t n, bool ints, double *got, dg_status *st)
{
    if (*st != DG_OK)
        return;
    float *h = dg_malloc((n ? n : 1) * sizeof *h);
    if (!h) {
        *st = DG_ERR_NOMEM;
        return;
    }
    d->stage = "download";
    if ((*st = d->be->synchronize(d->bctx)) == DG_OK &&
        (*st = d->be->download(d->bctx, r.buf, r.off, h, n * sizeof *h)) == DG_OK) {
        for (size_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, &h[i], sizeof v);
            got[i] = ints ? (double)v : (double)h[i];
        }
    }
    dg_free(h);
}

static dg_op_desc desc_of(const op_case *c)
{
    dg_op_desc d = {.op = dg_call_op[c->call], .call = c->call, .dtype = DG_DTYPE_F32};
    switch (c->call) {
    case DG_CALL_GEMM: d.m = c->m, d.n = c->n, d.k = c->k, d.ta = c->ta, d.tb = c->tb; break;
    case DG_CALL_BIAS_ADD:
    case DG_CALL_BIAS_GRAD:
    case DG_CALL_XENT: d.m = c->m, d.n = c->n, d.k = c->k; break;
    case DG_CALL_CONV2D_FWD:
    case DG_CALL_CONV2D_BWD: d.conv = &c->conv; break;
    case DG_CALL_MAXPOOL_FWD:
    case DG_CALL_MAXPOOL_BWD: d.pool = &c->pool; break;
    default: d.count = c->count; break;
    }
    return d;
}

#define B4(n) ((size_t)(n)*4)

/* Runs c once; got[j] receives output j (c->out[j].n values). */
static dg_status run_case(dev *d, const op_case *c, double **got)
{
    const dg_backend_iface *be = d->be;
    void *x = d->bctx;
    dg_status st = DG_OK;
    dg_ref none = {NULL, 0}, r[MAX_IN], o[MAX_OUT];
    for (int i = 0; i < MAX_IN; i++)
        r[i] = c->in[i] ? put(d, c->in[i], B4(c->in_n[i]), &st) : none;
    for (int j = 0; j < c->nout; j++)
        o[j] = none;
    d->stage = dg_call_names[c->call];
    switch (c->call) {
    case DG_CALL_GEMM:
        if (st == DG_OK)
            st = be->gemm(x, c->ta, c->tb, c->m, c->n, c->k, c->alpha, r[0], c->ta ? c->m : c->k,
                          r[1], c->tb ? c->k : c->n, c->beta, r[2], c->n);
        o[0] = r[2];
        break;
    case DG_CALL_FILL:
        o[0] = put(d, NULL, B4(c->count), &st);
        if (st == DG_OK)
            st = be->fill(x, o[0], c->count, c->value);
        break;
    case DG_CALL_BIAS_ADD:
        if (st == DG_OK)
            st = be->bias_add(x, r[0], r[1], c->m, c->n, c->k);
        o[0] = r[0];
        break;
    case DG_CALL_BIAS_GRAD:
        o[0] = put(d, NULL, B4(c->n), &st);
        if (st == DG_OK)
            st = be->bias_grad(x, r[0], o[0], c->m, c->n, c->k);
        break;
    case DG_CALL_RELU_FWD:
        o[0] = put(d, NULL, B4(c->count), &st);
        if (st == DG_OK)
            st = be->relu_fwd(x, r[0], o[0], c->count);
        break;
    case DG_CALL_RELU_BWD:
        o[0] = put(d, NULL, B4(c->count), &st);
        if (st == DG_OK)
            st = be->relu_bwd(x, r[0], r[1], o[0], c->count);
        break;
    case DG_CALL_MAXPOOL_FWD:
        o[0] = put(d, NULL, B4(c->out[0].n), &st);
        o[1] = put(d, NULL, B4(c->out[1].n), &st);
        if (st == DG_OK)
            st = be->maxpool_fwd(x, &c->pool, r[0], o[0], o[1]);
        break;
    case DG_CALL_MAXPOOL_BWD: {
        dg_ref am = put(d, c->ints, B4(c->ints_n), &st);
        o[0] = put(d, NULL, B4(c->out[0].n), &st);
        if (st == DG_OK)
            st = be->maxpool_bwd(x, &c->pool, r[0], am, o[0]);
        break;
    }
    case DG_CALL_CONV2D_FWD:
    case DG_CALL_CONV2D_BWD: {
        size_t ws = be->conv2d_workspace ? be->conv2d_workspace(x, &c->conv) : 0;
        dg_ref work = ws ? scratch(d, ws, &st) : none;
        d->stage = dg_call_names[c->call];
        if (c->call == DG_CALL_CONV2D_FWD) {
            o[0] = put(d, NULL, B4(c->out[0].n), &st);
            if (st == DG_OK)
                st = be->conv2d_fwd(x, &c->conv, r[0], r[1], r[2], o[0], work);
            break;
        }
        int j = 0;
        dg_ref dx = c->no_dx ? none : (o[j] = put(d, NULL, B4(c->out[j].n), &st), o[j++]);
        dg_ref dw = (o[j] = put(d, NULL, B4(c->out[j].n), &st), o[j++]);
        dg_ref db = c->no_bias ? none : (o[j] = put(d, NULL, B4(c->out[j].n), &st), o[j]);
        if (st == DG_OK)
            st = be->conv2d_bwd(x, &c->conv, r[0], r[1], r[2], dx, dw, db, work);
        break;
    }
    case DG_CALL_XENT: {
        dg_ref labels = put(d, c->ints, B4(c->ints_n), &st);
        dg_ref acc = put(d, NULL, B4(2), &st);
        o[1] = put(d, NULL, B4(c->out[1].n), &st);
        if (st == DG_OK)
            st = be->xent(x, c->m, c->n, r[0], labels, o[1], acc);
        double a[2] = {NAN, NAN};
        get(d, acc, 2, false, a, &st);
        got[0][0] = a[0];
        get(d, o[1], c->out[1].n, false, got[1], &st);
        got[2][0] = a[1];
        return st;
    }
    case DG_CALL_SGD:
        if (st == DG_OK)
            st = be->sgd(x, r[0], r[1], r[2], c->count, c->lr, c->mom, c->wd);
        get(d, r[0], c->count, false, got[0], &st);
        for (size_t i = 0; st == DG_OK && i < c->count; i++)
            got[0][i] -= (double)c->in[0][i]; /* the step taken */
        if (c->nout > 1)
            get(d, r[2], c->count, false, got[1], &st);
        return st;
    case DG_CALL__COUNT: return DG_ERR_USAGE;
    }
    for (int j = 0; j < c->nout; j++)
        get(d, o[j], c->out[j].n, c->call == DG_CALL_MAXPOOL_FWD && j == 1, got[j], &st);
    return st;
}

static void dev_release(dev *d)
{
    for (int i = 0; i < d->nbuf; i++)
        d->be->buf_free(d->bctx, d->buf[i]);
    d->nbuf = 0;
}

/* ---- the table -------------------------------------------------------------------- */

typedef struct tally {
    int checked, passed, failed, not_native, errors;
    double worst_over; /* nmse / tolerance of the worst row run natively */
    cJSON *worst;
} tally;

static cJSON *row_json(const op_case *c, const char *backend, dg_op_prec p, const char *output,
                       double nmse, double tol, const char *verdict, const char *reason)
{
    cJSON *o = dg_op_row_new(c->op, output, c->shape, nmse, tol);
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "backend", backend);
    cJSON_AddStringToObject(o, "precision", dg_op_prec_names[p]);
    cJSON_AddBoolToObject(o, "fixture", c->fixture);
    cJSON_AddStringToObject(o, "verdict", verdict);
    dg_json_add_str(o, "reason", reason);
    return o;
}

/* Adds the rows of case c at precision p to table. */
static void judge_case(dev *d, const op_case *c, const char *backend, dg_op_prec p, cJSON *table,
                       tally *t)
{
    dg_op_desc desc = desc_of(c);
    bool native = d->be->supports_op && d->be->supports_op(d->bctx, &desc) &&
                  dg_engine_implements(d->be, c->call);
    double *got[MAX_OUT] = {0};
    dg_status st = DG_OK;
    char why[320] = "";
    if (native) {
        for (int j = 0; j < c->nout; j++)
            if (!(got[j] = dg_malloc((c->out[j].n ? c->out[j].n : 1) * sizeof *got[j])))
                st = DG_ERR_NOMEM;
        if (st == DG_OK)
            st = run_case(d, c, got);
        if (st != DG_OK)
            snprintf(why, sizeof why, "%s failed (%s): %s", d->stage, dg_status_name(st),
                     st == DG_ERR_NOMEM ? "out of memory" : d->be->last_error(d->bctx));
        dev_release(d);
        /* A call the backend does not run at a reduced precision (cuda's bf16
         * convolutions on a shape cuDNN declines) is not native there, not wrong. */
        if (st == DG_ERR_UNAVAILABLE && p != DG_PREC_FP32) {
            native = false;
            snprintf(why, sizeof why, "%s", d->be->last_error(d->bctx));
        }
    }
    for (int j = 0; j < c->nout; j++) {
        const op_out *o = &c->out[j];
        double tol = o->tol ? o->tol->nmse[p] : NAN;
        t->checked++;
        if (!native) {
            t->not_native++;
            cJSON_AddItemToArray(table, row_json(c, backend, p, o->name, NAN, tol, "not native",
                                                 why[0] ? why
                                                        : "the backend sends this call to the cpu "
                                                          "fallback"));
            continue;
        }
        if (st != DG_OK) {
            t->errors++;
            t->failed++;
            cJSON_AddItemToArray(table, row_json(c, backend, p, o->name, NAN, tol, "error", why));
            continue;
        }
        double e = dg_nmse(got[j], o->ref, o->n);
        bool pass = e <= tol;
        double over = tol > 0 ? e / tol : e > 0 ? INFINITY : 0;
        char r[96] = "";
        if (!isfinite(e))
            snprintf(r, sizeof r, "a non-finite value, or a reference of zeros not met");
        cJSON *row =
            row_json(c, backend, p, o->name, e, tol, pass ? "pass" : "fail", r[0] ? r : NULL);
        if (pass)
            t->passed++;
        else
            t->failed++;
        if (!t->worst || over > t->worst_over || (isnan(t->worst_over) && !isnan(over))) {
            cJSON_Delete(t->worst);
            t->worst = cJSON_Duplicate(row, true);
            t->worst_over = over;
        }
        cJSON_AddItemToArray(table, row);
    }
    for (int j = 0; j < c->nout; j++)
        dg_free(got[j]);
}

/* Whether every output of c has a tolerance at precision p. */
static bool runs_at(const op_case *c, dg_op_prec p)
{
    for (int j = 0; j < c->nout; j++)
        if (!c->out[j].tol || isnan(c->out[j].tol->nmse[p]))
            return false;
    return c->nout > 0;
}

cJSON *dg_op_suite_run(const dg_op_suite *s, const char *backend, const dg_backend_iface *be,
                       void *bctx, bool *failed)
{
    double t0 = dg_now();
    cJSON *o = cJSON_CreateObject();
    cJSON *table = cJSON_CreateArray();
    if (!o || !table) {
        cJSON_Delete(o);
        cJSON_Delete(table);
        return NULL;
    }
    dev d = {.be = be, .bctx = bctx};
    tally t = {.worst_over = 0};
    cJSON *precs = cJSON_CreateArray();
    for (int p = 0; p < DG_PREC__COUNT; p++) {
        /* A reduced precision runs under its math mode, where the backend has it. */
        if (p != DG_PREC_FP32 && !(be->caps.tf32 && be->set_math && be->set_math(bctx, p) == DG_OK))
            continue;
        cJSON_AddItemToArray(precs, cJSON_CreateString(dg_op_prec_names[p]));
        for (size_t i = 0; i < s->n; i++)
            if (runs_at(&s->c[i], (dg_op_prec)p))
                judge_case(&d, &s->c[i], backend, (dg_op_prec)p, table, &t);
        if (p != DG_PREC_FP32)
            be->set_math(bctx, DG_MATH_FP32);
    }
    *failed = t.failed > 0;
    cJSON_AddItemToObject(o, "precisions", precs);
    cJSON_AddNumberToObject(o, "checked", t.checked);
    cJSON_AddNumberToObject(o, "passed", t.passed);
    cJSON_AddNumberToObject(o, "failed", t.failed);
    cJSON_AddNumberToObject(o, "not_native", t.not_native);
    cJSON_AddNumberToObject(o, "errors", t.errors);
    if (t.worst) {
        if (isfinite(t.worst_over))
            cJSON_AddNumberToObject(t.worst, "over_tolerance", t.worst_over);
        else
            cJSON_AddNullToObject(t.worst, "over_tolerance");
        cJSON_AddItemToObject(o, "worst", t.worst);
    } else {
        cJSON_AddNullToObject(o, "worst");
    }
    cJSON_AddItemToObject(o, "wall", dg_json_metric(dg_now() - t0, true, "s"));
    cJSON_AddItemToObject(o, "table", table);
    return o;
}
