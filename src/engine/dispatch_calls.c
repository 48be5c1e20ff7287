/* The engine's one table of calls (dispatch_int.h): for each call, whether
 * the backend implements it, its shape string, how its operands are staged
 * for a fallback, and how its backend function is invoked. */
#include "engine/dispatch_int.h"

#include <stdio.h>

/* gemm */
static bool has_gemm(const dg_backend_iface *b)
{
    return b->gemm != NULL;
}
static void shape_gemm(const call_args *a, char *buf, size_t len)
{
    snprintf(buf, len, "gemm %dx%dx%d ta=%d tb=%d", a->m, a->n, a->k, (int)a->ta, (int)a->tb);
}
static void stage_gemm(fallback *f, const call_args *a, dg_ref *s)
{
    s[0] = dg_fb_in(f, a->r[0], dg_dp_span(a->ta ? a->k : a->m, a->ta ? a->m : a->k, a->lda));
    s[1] = dg_fb_in(f, a->r[1], dg_dp_span(a->tb ? a->n : a->k, a->tb ? a->k : a->n, a->ldb));
    s[2] = dg_fb_ref(f, a->r[2], dg_dp_span(a->m, a->n, a->ldc),
                     a->beta != 0.0f ? STAGE_INOUT : STAGE_OUT);
}
static dg_status call_gemm(const dg_backend_iface *b, void *x, const call_args *a, const dg_ref *r)
{
    return b->gemm(x, a->ta, a->tb, a->m, a->n, a->k, a->alpha, r[0], a->lda, r[1], a->ldb, a->beta,
                   r[2], a->ldc);
}

/* fill */
static bool has_fill(const dg_backend_iface *b)
{
    return b->fill != NULL;
}
static void shape_fill(const call_args *a, char *buf, size_t len)
{
    snprintf(buf, len, "fill %zu", a->count);
}
static void stage_fill(fallback *f, const call_args *a, dg_ref *s)
{
    s[0] = dg_fb_out(f, a->r[0], dg_dp_bytes4(a->count));
}
static dg_status call_fill(const dg_backend_iface *b, void *x, const call_args *a, const dg_ref *r)
{
    return b->fill(x, r[0], a->count, a->value);
}

/* bias_add, bias_grad: m = outer, n = channels, k = inner */
static bool has_bias_add(const dg_backend_iface *b)
{
    return b->bias_add != NULL;
}
static bool has_bias_grad(const dg_backend_iface *b)
{
    return b->bias_grad != NULL;
}
static void shape_bias_add(const call_args *a, char *buf, size_t len)
{
    snprintf(buf, len, "bias_add %dx%dx%d", a->m, a->n, a->k);
}
static void shape_bias_grad(const call_args *a, char *buf, size_t len)
{
    snprintf(buf, len, "bias_grad %dx%dx%d", a->m, a->n, a->k);
}
static void stage_bias_add(fallback *f, const call_args *a, dg_ref *s)
{
    /* y, bias: the bias is staged first (its download comes first). */
    s[1] = dg_fb_in(f, a->r[1], dg_dp_bytes4(dg_dp_elems4(a->n, 1, 1, 1)));
    s[0] = dg_fb_inout(f, a->r[0], dg_dp_bytes4(dg_dp_elems4(a->m, a->n, a->k, 1)));
}
static void stage_bias_grad(fallback *f, const call_args *a, dg_ref *s)
{
    s[0] = dg_fb_in(f, a->r[0], dg_dp_bytes4(dg_dp_elems4(a->m, a->n, a->k, 1)));
    s[1] = dg_fb_out(f, a->r[1], dg_dp_bytes4(dg_dp_elems4(a->n, 1, 1, 1)));
}
static dg_status call_bias_add(const dg_backend_iface *b, void *x, const call_args *a,
                               const dg_ref *r)
{
    return b->bias_add(x, r[0], r[1], a->m, a->n, a->k);
}
static dg_status call_bias_grad(const dg_backend_iface *b, void *x, const call_args *a,
                                const dg_ref *r)
{
    return b->bias_grad(x, r[0], r[1], a->m, a->n, a->k);
}

/* relu_fwd (x, y), relu_bwd (y, dy, dx) */
static bool has_relu_fwd(const dg_backend_iface *b)
{
    return b->relu_fwd != NULL;
}
static bool has_relu_bwd(const dg_backend_iface *b)
{
    return b->relu_bwd != NULL;
}
static void shape_relu_fwd(const call_args *a, char *buf, size_t len)
{
    snprintf(buf, len, "relu %zu", a->count);
}
static void shape_relu_bwd(const call_args *a, char *buf, size_t len)
{
    snprintf(buf, len, "relu_bwd %zu", a->count);
}
static void stage_relu_fwd(fallback *f, const call_args *a, dg_ref *s)
{
    s[0] = dg_fb_in(f, a->r[0], dg_dp_bytes4(a->count));
    s[1] = dg_fb_out(f, a->r[1], dg_dp_bytes4(a->count));
}
static void stage_relu_bwd(fallback *f, const call_args *a, dg_ref *s)
{
    s[0] = dg_fb_in(f, a->r[0], dg_dp_bytes4(a->count));
    s[1] = dg_fb_in(f, a->r[1], dg_dp_bytes4(a->count));
    s[2] = dg_fb_out(f, a->r[2], dg_dp_bytes4(a->count));
}
static dg_status call_relu_fwd(const dg_backend_iface *b, void *x, const call_args *a,
                               const dg_ref *r)
{
    return b->relu_fwd(x, r[0], r[1], a->count);
}
static dg_status call_relu_bwd(const dg_backend_iface *b, void *x, const call_args *a,
                               const dg_ref *r)
{
    return b->relu_bwd(x, r[0], r[1], r[2], a->count);
}

/* maxpool_fwd (x, y, argmax), maxpool_bwd (dy, argmax, dx) */
static bool has_maxpool_fwd(const dg_backend_iface *b)
{
    return b->maxpool_fwd != NULL;
}
static bool has_maxpool_bwd(const dg_backend_iface *b)
{
    return b->maxpool_bwd != NULL;
}
static void pool_shape(char *buf, size_t len, const char *name, const dg_pool_shape *s)
{
    snprintf(buf, len, "%s n%d c%d %dx%d k%d s%d", name, s->n, s->c, s->h, s->w, s->k, s->stride);
}
static void shape_maxpool_fwd(const call_args *a, char *buf, size_t len)
{
    pool_shape(buf, len, "maxpool", a->pool);
}
static void shape_maxpool_bwd(const call_args *a, char *buf, size_t len)
{
    pool_shape(buf, len, "maxpool_bwd", a->pool);
}
static void stage_maxpool_fwd(fallback *f, const call_args *a, dg_ref *s)
{
    const dg_pool_shape *p = a->pool;
    size_t out = dg_dp_bytes4(dg_dp_elems4(p->n, p->c, p->ho, p->wo));
    s[0] = dg_fb_in(f, a->r[0], dg_dp_bytes4(dg_dp_elems4(p->n, p->c, p->h, p->w)));
    s[1] = dg_fb_out(f, a->r[1], out);
    s[2] = dg_fb_out(f, a->r[2], out); /* int32 */
}
static void stage_maxpool_bwd(fallback *f, const call_args *a, dg_ref *s)
{
    const dg_pool_shape *p = a->pool;
    size_t out = dg_dp_bytes4(dg_dp_elems4(p->n, p->c, p->ho, p->wo));
    s[0] = dg_fb_in(f, a->r[0], out);
    s[1] = dg_fb_in(f, a->r[1], out); /* int32 */
    s[2] = dg_fb_out(f, a->r[2], dg_dp_bytes4(dg_dp_elems4(p->n, p->c, p->h, p->w)));
}
static dg_status call_maxpool_fwd(const dg_backend_iface *b, void *x, const call_args *a,
                                  const dg_ref *r)
{
    return b->maxpool_fwd(x, a->pool, r[0], r[1], r[2]);
}
static dg_status call_maxpool_bwd(const dg_backend_iface *b, void *x, const call_args *a,
                                  const dg_ref *r)
{
    return b->maxpool_bwd(x, a->pool, r[0], r[1], r[2]);
}

/* conv2d_fwd (x, w, bias, y, work), conv2d_bwd (x, w, dy, dx, dw, db, work) */
static bool has_conv2d_fwd(const dg_backend_iface *b)
{
    return b->conv2d_fwd != NULL;
}
static bool has_conv2d_bwd(const dg_backend_iface *b)
{
    return b->conv2d_bwd != NULL;
}
static void conv_shape(char *buf, size_t len, const char *name, const dg_conv_shape *s)
{
    snprintf(buf, len, "%s n%d c%d %dx%d k%d %dx%d s%d p%d", name, s->n, s->c, s->h, s->w, s->k,
             s->kh, s->kw, s->stride, s->pad);
}
static void shape_conv2d_fwd(const call_args *a, char *buf, size_t len)
{
    conv_shape(buf, len, "conv2d", a->conv);
}
static void shape_conv2d_bwd(const call_args *a, char *buf, size_t len)
{
    conv_shape(buf, len, "conv2d_bwd", a->conv);
}
/* The cpu's own scratch for the fallback (the device's work ref is never used). */
static dg_ref conv_scratch(fallback *f, const dg_conv_shape *s)
{
    const dg_backend_iface *cpu = f->e->cpu;
    size_t ws = cpu->conv2d_workspace ? cpu->conv2d_workspace(dg_dp_cpu_ctx(f->e), s) : 0;
    return dg_fb_ref(f, (dg_ref){NULL, 0}, ws, STAGE_SCRATCH);
}
static void stage_conv2d_fwd(fallback *f, const call_args *a, dg_ref *s)
{
    const dg_conv_shape *c = a->conv;
    s[0] = dg_fb_in(f, a->r[0], dg_dp_bytes4(dg_dp_elems4(c->n, c->c, c->h, c->w)));
    s[1] = dg_fb_in(f, a->r[1], dg_dp_bytes4(dg_dp_elems4(c->k, c->c, c->kh, c->kw)));
    s[2] = dg_fb_in(f, a->r[2], dg_dp_bytes4(dg_dp_elems4(c->k, 1, 1, 1)));
    s[3] = dg_fb_out(f, a->r[3], dg_dp_bytes4(dg_dp_elems4(c->n, c->k, c->ho, c->wo)));
    s[4] = conv_scratch(f, c);
}
static void stage_conv2d_bwd(fallback *f, const call_args *a, dg_ref *s)
{
    const dg_conv_shape *c = a->conv;
    size_t xb = dg_dp_bytes4(dg_dp_elems4(c->n, c->c, c->h, c->w));
    size_t wb = dg_dp_bytes4(dg_dp_elems4(c->k, c->c, c->kh, c->kw));
    s[0] = dg_fb_in(f, a->r[0], xb);
    s[1] = dg_fb_in(f, a->r[1], wb);
    s[2] = dg_fb_in(f, a->r[2], dg_dp_bytes4(dg_dp_elems4(c->n, c->k, c->ho, c->wo)));
    s[3] = dg_fb_out(f, a->r[3], xb);
    s[4] = dg_fb_out(f, a->r[4], wb);
    s[5] = dg_fb_out(f, a->r[5], dg_dp_bytes4(dg_dp_elems4(c->k, 1, 1, 1)));
    s[6] = conv_scratch(f, c);
}
static dg_status call_conv2d_fwd(const dg_backend_iface *b, void *x, const call_args *a,
                                 const dg_ref *r)
{
    return b->conv2d_fwd(x, a->conv, r[0], r[1], r[2], r[3], r[4]);
}
static dg_status call_conv2d_bwd(const dg_backend_iface *b, void *x, const call_args *a,
                                 const dg_ref *r)
{
    return b->conv2d_bwd(x, a->conv, r[0], r[1], r[2], r[3], r[4], r[5], r[6]);
}

/* softmax_xent (logits, labels, dlogits, acc): m = rows, n = classes */
static bool has_xent(const dg_backend_iface *b)
{
    return b->xent != NULL;
}
static void shape_xent(const call_args *a, char *buf, size_t len)
{
    snprintf(buf, len, "softmax_xent n%d classes%d", a->m, a->n);
}
static void stage_xent(fallback *f, const call_args *a, dg_ref *s)
{
    size_t lb = dg_dp_bytes4(dg_dp_elems4(a->m, a->n, 1, 1));
    s[0] = dg_fb_in(f, a->r[0], lb);
    s[1] = dg_fb_in(f, a->r[1], dg_dp_bytes4(dg_dp_elems4(a->m, 1, 1, 1))); /* int32 */
    s[2] = dg_fb_out(f, a->r[2], lb);
    s[3] = dg_fb_inout(f, a->r[3], 2 * sizeof(float)); /* accumulated */
}
static dg_status call_xent(const dg_backend_iface *b, void *x, const call_args *a, const dg_ref *r)
{
    return b->xent(x, a->m, a->n, r[0], r[1], r[2], r[3]);
}

/* sgd (w, g, mom) */
static bool has_sgd(const dg_backend_iface *b)
{
    return b->sgd != NULL;
}
static void shape_sgd(const call_args *a, char *buf, size_t len)
{
    snprintf(buf, len, "sgd %zu", a->count);
}
static void stage_sgd(fallback *f, const call_args *a, dg_ref *s)
{
    size_t b = dg_dp_bytes4(a->count);
    s[1] = dg_fb_in(f, a->r[1], b);
    s[0] = dg_fb_inout(f, a->r[0], b);
    /* With momentum 0 the buffer is untouched: stage it without copies. */
    s[2] = a->r[2].buf ? dg_fb_ref(f, a->r[2], b, a->momentum != 0.0f ? STAGE_INOUT : STAGE_SCRATCH)
                       : (dg_ref){NULL, 0};
}
static dg_status call_sgd(const dg_backend_iface *b, void *x, const call_args *a, const dg_ref *r)
{
    return b->sgd(x, r[0], r[1], r[2], a->count, a->lr, a->momentum, a->wd);
}

#define ROW(name)                                                                                  \
    {                                                                                              \
        has_##name, shape_##name, stage_##name, call_##name                                        \
    }
const call_kind dg_dp_calls[DG_CALL__COUNT] = {
    [DG_CALL_GEMM] = ROW(gemm),
    [DG_CALL_FILL] = ROW(fill),
    [DG_CALL_BIAS_ADD] = ROW(bias_add),
    [DG_CALL_BIAS_GRAD] = ROW(bias_grad),
    [DG_CALL_RELU_FWD] = ROW(relu_fwd),
    [DG_CALL_RELU_BWD] = ROW(relu_bwd),
    [DG_CALL_MAXPOOL_FWD] = ROW(maxpool_fwd),
    [DG_CALL_MAXPOOL_BWD] = ROW(maxpool_bwd),
    [DG_CALL_CONV2D_FWD] = ROW(conv2d_fwd),
    [DG_CALL_CONV2D_BWD] = ROW(conv2d_bwd),
    [DG_CALL_XENT] = ROW(xent),
    [DG_CALL_SGD] = ROW(sgd),
};
#undef ROW

bool dg_engine_implements(const dg_backend_iface *be, dg_call c)
{
    return (unsigned)c < DG_CALL__COUNT && dg_dp_calls[c].has(be);
}
