/* The tolerance table checked against the float64 reference's own finite
 * differences (gate_ops.h, dg_op_reference_check): for every backward row,
 * the reference's analytic gradient of L = sum R * f(inputs) (R drawn from
 * the seed) against central differences of its forward, h = 1e-6, on small
 * shapes, every coordinate. Level 2 judges devices against this reference
 * with the table's tolerances; the check proves the reference's gradients
 * hold to well below them (the tolerance over REF_MARGIN; for an exact row,
 * FD_EXACT_BOUND, the central difference's own round-off), so a
 * tolerance never asks more of a device than the reference can vouch for. */
#include "steps/gate_ops.h"

#include "engine/engine.h"

#include <math.h>
#include <string.h>

#define FD_H 1e-6
#define REF_MARGIN 100.0
#define FD_EXACT_BOUND 1e-16

typedef struct fd {
    dg_rng rng;
    bool oom;
    cJSON *arr;
    bool ok;
} fd;

static double *drand(fd *f, size_t n)
{
    float *t = dg_malloc((n ? n : 1) * sizeof *t);
    double *d = dg_calloc(n ? n : 1, sizeof *d);
    if (!t || !d) {
        dg_free(t);
        dg_free(d);
        f->oom = true;
        return NULL;
    }
    dg_rng_uniform(&f->rng, t, n, -1, 1);
    for (size_t i = 0; i < n; i++)
        d[i] = t[i];
    dg_free(t);
    return d;
}

static double dot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* The forward of one check: L at the current inputs. */
typedef double (*loss_fn)(void *u);

/* Central differences of loss over x[0..n) against the analytic g; adds
 * the row. */
static void judge(fd *f, const char *call, const char *output, const char *shape, double *x,
                  size_t n, const double *g, loss_fn loss, void *u)
{
    if (f->oom || !x || !g)
        return;
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + FD_H;
        double up = loss(u);
        x[i] = keep - FD_H;
        double down = loss(u);
        x[i] = keep;
        double d = (up - down) / (2 * FD_H) - g[i];
        num += d * d;
        den += g[i] * g[i];
    }
    double e = num == 0 ? 0 : den == 0 ? INFINITY : num / den;
    const dg_op_tol *t = dg_op_tol_find(call, output);
    double tol = t ? t->nmse[DG_PREC_FP32] : NAN;
    double bound = tol > 0 ? tol / REF_MARGIN : FD_EXACT_BOUND;
    bool ok = e <= bound;
    f->ok &= ok;
    cJSON *o = dg_op_row_new(call, output, shape, e, tol);
    if (!o) {
        f->oom = true;
        return;
    }
    cJSON_AddNumberToObject(o, "bound", bound);
    cJSON_AddBoolToObject(o, "ok", ok);
    cJSON_AddItemToArray(f->arr, o);
}

/* ---- gemm: L = sum R * (A B), dA = R B^T ---------------------------------------- */

typedef struct gemm_u {
    int m, n, k;
    double *a, *b, *r, *c;
} gemm_u;

static double gemm_loss(void *p)
{
    gemm_u *u = p;
    dg_ref64_gemm(false, false, u->m, u->n, u->k, 1, u->a, u->k, u->b, u->n, 0, u->c, u->n);
    return dot(u->c, u->r, (size_t)u->m * u->n);
}

static void check_gemm(fd *f)
{
    gemm_u u = {.m = 5, .n = 4, .k = 6};
    u.a = drand(f, 30), u.b = drand(f, 24), u.r = drand(f, 20), u.c = drand(f, 20);
    double *g = drand(f, 30);
    if (!f->oom)
        dg_ref64_gemm(false, true, u.m, u.k, u.n, 1, u.r, u.n, u.b, u.n, 0, g, u.k);
    judge(f, "gemm", "C", "5x4x6 dA", u.a, 30, g, gemm_loss, &u);
    dg_free(u.a), dg_free(u.b), dg_free(u.r), dg_free(u.c), dg_free(g);
}

/* ---- conv2d: L = sum R * conv(x, w) + bias --------------------------------------- */

typedef struct conv_u {
    dg_conv_shape s;
    double *x, *w, *b, *r, *y;
} conv_u;

static double conv_loss(void *p)
{
    conv_u *u = p;
    dg_ref64_conv2d_fwd(&u->s, u->x, u->w, u->b, u->y);
    return dot(u->y, u->r, (size_t)u->s.n * u->s.k * u->s.ho * u->s.wo);
}

static void check_conv(fd *f)
{
    conv_u u = {
        .s = {.n = 2, .c = 3, .h = 6, .w = 5, .k = 4, .kh = 3, .kw = 3, .stride = 2, .pad = 1}};
    u.s.ho = (u.s.h + 2 * u.s.pad - u.s.kh) / u.s.stride + 1;
    u.s.wo = (u.s.w + 2 * u.s.pad - u.s.kw) / u.s.stride + 1;
    size_t nx = 2 * 3 * 6 * 5, nw = 4 * 3 * 9, ny = (size_t)2 * 4 * u.s.ho * u.s.wo;
    u.x = drand(f, nx), u.w = drand(f, nw), u.b = drand(f, 4), u.r = drand(f, ny);
    u.y = drand(f, ny);
    double *gx = drand(f, nx), *gw = drand(f, nw), *gb = drand(f, 4);
    if (!f->oom)
        dg_ref64_conv2d_bwd(&u.s, u.x, u.w, u.r, gx, gw, gb);
    const char *shape = "[2,3,6,5]*[4,3,3,3] s2 p1";
    judge(f, "conv2d_bwd", "dx", shape, u.x, nx, gx, conv_loss, &u);
    judge(f, "conv2d_bwd", "dw", shape, u.w, nw, gw, conv_loss, &u);
    judge(f, "conv2d_bwd", "db", shape, u.b, 4, gb, conv_loss, &u);
    dg_free(u.x), dg_free(u.w), dg_free(u.b), dg_free(u.r), dg_free(u.y);
    dg_free(gx), dg_free(gw), dg_free(gb);
}

/* ---- bias_add: L = sum R * (y + bias), d bias = bias_grad(R) ------------------------- */

typedef struct bias_u {
    double *y, *b, *r, *t;
} bias_u;

static double bias_loss(void *p)
{
    bias_u *u = p;
    memcpy(u->t, u->y, 24 * sizeof *u->t);
    dg_ref64_bias_add(u->t, u->b, 2, 3, 4);
    return dot(u->t, u->r, 24);
}

static void check_bias(fd *f)
{
    bias_u u = {.y = drand(f, 24), .b = drand(f, 3), .r = drand(f, 24), .t = drand(f, 24)};
    double *g = drand(f, 3);
    if (!f->oom)
        dg_ref64_bias_grad(u.r, g, 2, 3, 4);
    judge(f, "bias_grad", "db", "[2,3,4]", u.b, 3, g, bias_loss, &u);
    dg_free(u.y), dg_free(u.b), dg_free(u.r), dg_free(u.t), dg_free(g);
}

/* ---- maxpool and relu: piecewise linear, so exact up to round-off ------------------ */

typedef struct pw_u {
    dg_pool_shape p;
    size_t n;
    double *x, *r, *y;
    int32_t *am;
} pw_u;

static double pool_loss(void *q)
{
    pw_u *u = q;
    dg_ref64_maxpool_fwd(&u->p, u->x, u->y, u->am);
    return dot(u->y, u->r, (size_t)u->p.n * u->p.c * u->p.ho * u->p.wo);
}

static double relu_loss(void *q)
{
    pw_u *u = q;
    dg_ref64_relu_fwd(u->x, u->y, u->n);
    return dot(u->y, u->r, u->n);
}

static void check_pool_relu(fd *f)
{
    pw_u u = {.p = {.n = 1, .c = 2, .h = 7, .w = 6, .k = 3, .stride = 2}};
    u.p.ho = (u.p.h - u.p.k) / u.p.stride + 1;
    u.p.wo = (u.p.w - u.p.k) / u.p.stride + 1;
    size_t nx = 2 * 7 * 6, ny = (size_t)2 * u.p.ho * u.p.wo;
    u.x = drand(f, nx), u.r = drand(f, ny), u.y = drand(f, nx);
    u.am = dg_calloc(ny, sizeof *u.am);
    double *g = drand(f, nx);
    if (!u.am)
        f->oom = true;
    if (!f->oom) {
        pool_loss(&u);
        dg_ref64_maxpool_bwd(&u.p, u.r, u.am, g);
    }
    judge(f, "maxpool_bwd", "dx", "[1,2,7,6] k3 s2", u.x, nx, g, pool_loss, &u);
    dg_free(u.r);
    /* relu: inputs kept away from the kink by more than h */
    u.n = nx;
    u.r = drand(f, nx);
    for (size_t i = 0; u.x && i < nx; i++)
        if (fabs(u.x[i]) < 1e-3)
            u.x[i] = 0.5;
    if (!f->oom) {
        relu_loss(&u);
        dg_ref64_relu_bwd(u.y, u.r, g, nx);
    }
    judge(f, "relu_bwd", "dx", "84", u.x, nx, g, relu_loss, &u);
    dg_free(u.x), dg_free(u.r), dg_free(u.y), dg_free(u.am), dg_free(g);
}

/* ---- xent: L = the mean loss itself ----------------------------------------------- */

typedef struct xent_u {
    double *l, *d;
    int32_t lab[3];
} xent_u;

static double xent_loss(void *p)
{
    xent_u *u = p;
    double correct = 0;
    return dg_ref64_xent(3, 5, u->l, u->lab, u->d, &correct);
}

static void check_xent(fd *f)
{
    xent_u u = {.l = drand(f, 15), .d = drand(f, 15), .lab = {4, 0, 2}};
    double *g = drand(f, 15);
    if (!f->oom) {
        double correct = 0;
        dg_ref64_xent(3, 5, u.l, u.lab, g, &correct);
    }
    judge(f, "softmax_xent", "dlogits", "3x5", u.l, 15, g, xent_loss, &u);
    dg_free(u.l), dg_free(u.d), dg_free(g);
}

cJSON *dg_op_reference_check(uint64_t seed, bool *ok)
{
    fd f = {.arr = cJSON_CreateArray(), .ok = true};
    if (!f.arr)
        return NULL;
    dg_rng_init(&f.rng, seed, 900);
    check_gemm(&f);
    check_conv(&f);
    check_bias(&f);
    check_pool_relu(&f);
    check_xent(&f);
    if (f.oom) {
        cJSON_Delete(f.arr);
        return NULL;
    }
    /* Every backward row of the table must have been checked. */
    for (size_t i = 0; i < dg_op_tols_count; i++) {
        if (!dg_op_tols[i].backward)
            continue;
        bool seen = false;
        const cJSON *r;
        cJSON_ArrayForEach(r, f.arr)
        {
            seen |= strcmp(dg_jstr(r, "op"), dg_op_tols[i].call) == 0 &&
                    strcmp(dg_jstr(r, "output"), dg_op_tols[i].output) == 0;
        }
        f.ok &= seen;
    }
    *ok = f.ok;
    return f.arr;
}
