/* Level 2: every training op against the float64 reference (gate_ops.h).
 *
 * A case is one call at one shape: float inputs drawn from the seed, the
 * float64 reference of every output computed once from those same floats,
 * and each backend's outputs judged by NMSE against the tolerance table.
 * Exact rows (tolerance 0) compare with the reference rounded to float32:
 * an op that only moves or selects values, or rounds once (bias_add), must
 * be bit-equal. sgd is judged on the step it takes (w_out - w_in), not on
 * w, which barely moves. */
#include "steps/gate_ops.h"

#include "engine/engine.h"
#include "engine/model.h"

#include <math.h>
#include <string.h>

enum { FIXTURE_BATCH = 4 };
#define MAX_IN DG_OPC_MAX_IN
#define MAX_CASES DG_OPC_MAX_CASES
typedef dg_op_out op_out;
typedef dg_op_case op_case;

const char *const dg_op_prec_names[DG_PREC__COUNT] = {"fp32", "tf32", "bf16"};

/* docs/rules.md "op-numerics" holds this table; tests/unit/test_gate_ops.c
 * compares the two. fp32 matrix products: the honest error of a length-K
 * fp32 dot product of random data is about K eps^2 / 6 (2e-11 at K = 8192,
 * the fixture's largest); 1e-9 leaves a factor 50. TF32 and the default
 * (1e-7) are llama.cpp test-backend-ops' values (5e-4 for matrix products).
 * bf16 rounds each input to 8 significant bits (relative error up to 2^-8):
 * a product of two rounded inputs errs by about 1e-5 in NMSE whatever the
 * length of the sum (fp32 accumulation adds nothing to speak of), so the
 * same 5e-4 leaves a factor 50; a conv's bias gradient stays fp32. */
#define N NAN
const dg_op_tol dg_op_tols[] = {
    {"gemm", "C", {1e-9, 5e-4, 5e-4}, "matrix product", true},
    {"conv2d_fwd", "y", {1e-9, 5e-4, 5e-4}, "matrix product", false},
    {"conv2d_bwd", "dx", {1e-9, 5e-4, 5e-4}, "matrix product", true},
    {"conv2d_bwd", "dw", {1e-9, 5e-4, 5e-4}, "matrix product", true},
    {"conv2d_bwd", "db", {1e-9, 1e-9, 1e-9}, "reduction", true},
    {"bias_grad", "db", {1e-9, N, N}, "reduction", true},
    {"maxpool_bwd", "dx", {1e-12, N, N}, "reduction", true},
    {"bias_add", "y", {0, N, N}, "exact", false},
    {"fill", "x", {0, N, N}, "exact", false},
    {"relu_fwd", "y", {0, N, N}, "exact", false},
    {"relu_bwd", "dx", {0, N, N}, "exact", true},
    {"maxpool_fwd", "y", {0, N, N}, "exact", false},
    {"maxpool_fwd", "argmax", {0, N, N}, "exact", false},
    {"softmax_xent", "loss", {1e-7, N, N}, "elementwise", false},
    {"softmax_xent", "dlogits", {1e-7, N, N}, "elementwise", true},
    {"softmax_xent", "correct", {0, N, N}, "exact", false},
    {"sgd", "step", {1e-7, N, N}, "elementwise", false},
    {"sgd", "mom", {1e-7, N, N}, "elementwise", false},
};
#undef N
const size_t dg_op_tols_count = sizeof dg_op_tols / sizeof dg_op_tols[0];

const dg_op_tol *dg_op_tol_find(const char *call, const char *output)
{
    for (size_t i = 0; i < dg_op_tols_count; i++)
        if (strcmp(dg_op_tols[i].call, call) == 0 && strcmp(dg_op_tols[i].output, output) == 0)
            return &dg_op_tols[i];
    return NULL;
}

double dg_nmse(const double *got, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]))
            return INFINITY;
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return num == 0 ? 0 : den == 0 ? INFINITY : num / den;
}

cJSON *dg_op_row_new(const char *op, const char *output, const char *shape, double nmse,
                     double tolerance)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "op", op);
    cJSON_AddStringToObject(o, "output", output);
    cJSON_AddStringToObject(o, "shape", shape);
    if (isfinite(nmse))
        cJSON_AddNumberToObject(o, "nmse", nmse);
    else
        cJSON_AddNullToObject(o, "nmse");
    cJSON_AddNumberToObject(o, "tolerance", tolerance);
    return o;
}

/* ---- cases ------------------------------------------------------------------------ */

static void *cal(dg_op_suite *s, size_t n, size_t size)
{
    void *p = dg_calloc(n ? n : 1, size);
    if (!p)
        s->oom = true;
    return p;
}

/* The next case (NULL when the table is full, out of memory, or its shape is
 * already in the suite for that op). */
static op_case *add(dg_op_suite *s, dg_call call, const char *op, bool fixture, const char *fmt,
                    ...) DG_PRINTF(5, 6);
static op_case *add(dg_op_suite *s, dg_call call, const char *op, bool fixture, const char *fmt,
                    ...)
{
    if (s->oom || s->n == MAX_CASES)
        return NULL;
    char shape[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(shape, sizeof shape, fmt, ap);
    va_end(ap);
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->c[i].op, op) == 0 && strcmp(s->c[i].shape, shape) == 0)
            return NULL;
    op_case *c = &s->c[s->n++];
    memset(c, 0, sizeof *c);
    c->call = call;
    c->fixture = fixture;
    snprintf(c->op, sizeof c->op, "%s", op);
    snprintf(c->shape, sizeof c->shape, "%s", shape);
    /* A stream per case: a case's inputs do not depend on the cases before it. */
    dg_rng_init(&s->rng, s->seed, 1000 + s->n);
    return c;
}

static float *input(dg_op_suite *s, op_case *c, size_t n, float lo, float hi)
{
    float *p = cal(s, n, sizeof *p);
    if (p)
        dg_rng_uniform(&s->rng, p, n, lo, hi);
    for (int i = 0; i < MAX_IN; i++)
        if (!c->in[i]) {
            c->in[i] = p;
            c->in_n[i] = n;
            break;
        }
    return p;
}

static double *todouble(dg_op_suite *s, const float *f, size_t n)
{
    double *d = cal(s, n, sizeof *d);
    for (size_t i = 0; d && f && i < n; i++)
        d[i] = f[i];
    return d;
}

/* An output with its reference (owned by the case from now on). */
static void output(op_case *c, const char *name, double *ref, size_t n)
{
    const dg_op_tol *t = dg_op_tol_find(dg_call_names[c->call], name);
    op_out *o = &c->out[c->nout++];
    *o = (op_out){.name = name, .n = n, .ref = ref, .tol = t};
    /* Exact rows meet the reference rounded once, as the device must. */
    if (ref && t && t->nmse[DG_PREC_FP32] == 0)
        for (size_t i = 0; i < n; i++)
            ref[i] = (float)ref[i];
}

static void case_gemm(dg_op_suite *s, bool fixture, bool ta, bool tb, int m, int n, int k,
                      float alpha, float beta)
{
    char op[16];
    snprintf(op, sizeof op, "gemm_%c%c", ta ? 't' : 'n', tb ? 't' : 'n');
    op_case *c = add(s, DG_CALL_GEMM, op, fixture, "%dx%dx%d a%g b%g", m, n, k, alpha, beta);
    if (!c)
        return;
    c->ta = ta, c->tb = tb, c->m = m, c->n = n, c->k = k, c->alpha = alpha, c->beta = beta;
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    float *a = input(s, c, na, -1, 1), *b = input(s, c, nb, -1, 1), *c0 = input(s, c, nc, -1, 1);
    double *da = todouble(s, a, na), *db = todouble(s, b, nb), *ref = todouble(s, c0, nc);
    if (da && db && ref)
        dg_ref64_gemm(ta, tb, m, n, k, alpha, da, ta ? m : k, db, tb ? k : n, beta, ref, n);
    dg_free(da), dg_free(db);
    output(c, "C", ref, nc);
}

static void case_bias(dg_op_suite *s, bool fixture, int outer, int ch, int inner)
{
    size_t n = (size_t)outer * ch * inner;
    op_case *c = add(s, DG_CALL_BIAS_ADD, "bias_add", fixture, "[%d,%d,%d]", outer, ch, inner);
    if (c) {
        c->m = outer, c->n = ch, c->k = inner;
        float *y = input(s, c, n, -1, 1), *b = input(s, c, (size_t)ch, -1, 1);
        double *ref = todouble(s, y, n), *db = todouble(s, b, (size_t)ch);
        if (ref && db)
            dg_ref64_bias_add(ref, db, outer, ch, inner);
        dg_free(db);
        output(c, "y", ref, n);
    }
    if ((c = add(s, DG_CALL_BIAS_GRAD, "bias_grad", fixture, "[%d,%d,%d]", outer, ch, inner))) {
        c->m = outer, c->n = ch, c->k = inner;
        float *dy = input(s, c, n, -1, 1);
        double *ddy = todouble(s, dy, n), *ref = cal(s, (size_t)ch, sizeof *ref);
        if (ddy && ref)
            dg_ref64_bias_grad(ddy, ref, outer, ch, inner);
        dg_free(ddy);
        output(c, "db", ref, (size_t)ch);
    }
}

static void case_relu(dg_op_suite *s, bool fixture, size_t n, const char *shape)
{
    op_case *c = add(s, DG_CALL_RELU_FWD, "relu_fwd", fixture, "%s", shape);
    if (c) {
        c->count = n;
        float *x = input(s, c, n, -1, 1);
        double *dx = todouble(s, x, n), *ref = cal(s, n, sizeof *ref);
        if (dx && ref)
            dg_ref64_relu_fwd(dx, ref, n);
        dg_free(dx);
        output(c, "y", ref, n);
    }
    if ((c = add(s, DG_CALL_RELU_BWD, "relu_bwd", fixture, "%s", shape))) {
        c->count = n;
        float *y = input(s, c, n, -1, 1), *dy = input(s, c, n, -1, 1);
        for (size_t i = 0; y && i < n; i++)
            y[i] = y[i] > 0 ? y[i] : 0; /* a forward output: never negative */
        double *dyy = todouble(s, y, n), *ddy = todouble(s, dy, n), *ref = cal(s, n, sizeof *ref);
        if (dyy && ddy && ref)
            dg_ref64_relu_bwd(dyy, ddy, ref, n);
        dg_free(dyy), dg_free(ddy);
        output(c, "dx", ref, n);
    }
}

static void case_pool(dg_op_suite *s, bool fixture, dg_pool_shape p)
{
    p.ho = (p.h - p.k) / p.stride + 1;
    p.wo = (p.w - p.k) / p.stride + 1;
    size_t nx = (size_t)p.n * p.c * p.h * p.w, ny = (size_t)p.n * p.c * p.ho * p.wo;
    op_case *c = add(s, DG_CALL_MAXPOOL_FWD, "maxpool_fwd", fixture, "[%d,%d,%d,%d] k%d s%d", p.n,
                     p.c, p.h, p.w, p.k, p.stride);
    int32_t *am = cal(s, ny, sizeof *am);
    if (c && am) {
        c->pool = p;
        float *x = input(s, c, nx, -1, 1);
        double *dx = todouble(s, x, nx), *ref = cal(s, ny, sizeof *ref);
        double *amd = cal(s, ny, sizeof *amd);
        if (dx && ref && amd) {
            dg_ref64_maxpool_fwd(&p, dx, ref, am);
            for (size_t i = 0; i < ny; i++)
                amd[i] = am[i];
        }
        dg_free(dx);
        output(c, "y", ref, ny);
        output(c, "argmax", amd, ny);
    }
    if (am && (c = add(s, DG_CALL_MAXPOOL_BWD, "maxpool_bwd", fixture, "[%d,%d,%d,%d] k%d s%d", p.n,
                       p.c, p.h, p.w, p.k, p.stride))) {
        c->pool = p;
        c->ints = am;
        c->ints_n = ny;
        am = NULL;
        float *dy = input(s, c, ny, -1, 1);
        double *ddy = todouble(s, dy, ny), *ref = cal(s, nx, sizeof *ref);
        if (ddy && ref)
            dg_ref64_maxpool_bwd(&p, ddy, c->ints, ref);
        dg_free(ddy);
        output(c, "dx", ref, nx);
    }
    dg_free(am);
}

static void case_conv(dg_op_suite *s, bool fixture, dg_conv_shape v, bool no_bias, bool no_dx)
{
    v.ho = (v.h + 2 * v.pad - v.kh) / v.stride + 1;
    v.wo = (v.w + 2 * v.pad - v.kw) / v.stride + 1;
    size_t nx = (size_t)v.n * v.c * v.h * v.w, nw = (size_t)v.k * v.c * v.kh * v.kw;
    size_t ny = (size_t)v.n * v.k * v.ho * v.wo;
    char shape[96];
    snprintf(shape, sizeof shape, "[%d,%d,%d,%d]*[%d,%d,%d,%d] s%d p%d%s%s", v.n, v.c, v.h, v.w,
             v.k, v.c, v.kh, v.kw, v.stride, v.pad, no_bias ? " no bias" : "",
             no_dx ? " no dx" : "");
    op_case *c = add(s, DG_CALL_CONV2D_FWD, "conv2d_fwd", fixture, "%s", shape);
    if (c) {
        c->conv = v, c->no_bias = no_bias;
        float *x = input(s, c, nx, -1, 1), *w = input(s, c, nw, -1, 1);
        float *b = no_bias ? NULL : input(s, c, (size_t)v.k, -1, 1);
        double *dx = todouble(s, x, nx), *dw = todouble(s, w, nw);
        double *db = b ? todouble(s, b, (size_t)v.k) : NULL, *ref = cal(s, ny, sizeof *ref);
        if (dx && dw && ref && (db || !b))
            dg_ref64_conv2d_fwd(&v, dx, dw, db, ref);
        dg_free(dx), dg_free(dw), dg_free(db);
        output(c, "y", ref, ny);
    }
    if ((c = add(s, DG_CALL_CONV2D_BWD, "conv2d_bwd", fixture, "%s", shape))) {
        c->conv = v, c->no_bias = no_bias, c->no_dx = no_dx;
        float *x = input(s, c, nx, -1, 1), *w = input(s, c, nw, -1, 1);
        float *dy = input(s, c, ny, -1, 1);
        double *dx = todouble(s, x, nx), *dw = todouble(s, w, nw), *ddy = todouble(s, dy, ny);
        double *gx = no_dx ? NULL : cal(s, nx, sizeof *gx), *gw = cal(s, nw, sizeof *gw);
        double *gb = no_bias ? NULL : cal(s, (size_t)v.k, sizeof *gb);
        if (dx && dw && ddy && gw && (gx || no_dx) && (gb || no_bias))
            dg_ref64_conv2d_bwd(&v, dx, dw, ddy, gx, gw, gb);
        dg_free(dx), dg_free(dw), dg_free(ddy);
        if (!no_dx)
            output(c, "dx", gx, nx);
        output(c, "dw", gw, nw);
        if (!no_bias)
            output(c, "db", gb, (size_t)v.k);
    }
}

static void case_xent(dg_op_suite *s, bool fixture, int n, int classes, bool bad_label)
{
    op_case *c = add(s, DG_CALL_XENT, "softmax_xent", fixture, "%dx%d%s", n, classes,
                     bad_label ? " label -1" : "");
    if (!c)
        return;
    c->m = n, c->n = classes;
    size_t nl = (size_t)n * classes;
    float *l = input(s, c, nl, -4, 4);
    float *u = cal(s, (size_t)n, sizeof *u);
    c->ints = cal(s, (size_t)n, sizeof *c->ints);
    c->ints_n = (size_t)n;
    if (u && c->ints) {
        dg_rng_uniform(&s->rng, u, (size_t)n, 0, (float)classes);
        for (int i = 0; i < n; i++)
            c->ints[i] = (int32_t)u[i] < classes ? (int32_t)u[i] : classes - 1;
        if (bad_label)
            c->ints[n - 1] = -1;
    }
    dg_free(u);
    double *dl = todouble(s, l, nl), *ref = cal(s, nl, sizeof *ref);
    double *loss = cal(s, 1, sizeof *loss), *correct = cal(s, 1, sizeof *correct);
    if (dl && ref && loss && correct && c->ints)
        *loss = dg_ref64_xent(n, classes, dl, c->ints, ref, correct);
    dg_free(dl);
    output(c, "loss", loss, 1);
    output(c, "dlogits", ref, nl);
    output(c, "correct", correct, 1);
}

static void case_sgd(dg_op_suite *s, bool fixture, size_t n, float lr, float mom, float wd)
{
    op_case *c =
        add(s, DG_CALL_SGD, "sgd", fixture, "%zu lr %g momentum %g decay %g", n, lr, mom, wd);
    if (!c)
        return;
    c->count = n, c->lr = lr, c->mom = mom, c->wd = wd;
    float *w = input(s, c, n, -1, 1), *g = input(s, c, n, -1, 1), *m = input(s, c, n, -1, 1);
    double *dw = todouble(s, w, n), *dg = todouble(s, g, n), *dm = todouble(s, m, n);
    double *step = cal(s, n, sizeof *step);
    if (dw && dg && dm && step) {
        dg_ref64_sgd(dw, dg, dm, n, lr, mom, wd);
        for (size_t i = 0; i < n; i++)
            step[i] = dw[i] - (double)w[i];
    }
    dg_free(dw), dg_free(dg);
    output(c, "step", step, n);
    if (mom != 0)
        output(c, "mom", dm, n);
    else
        dg_free(dm);
}

static void case_fill(dg_op_suite *s, size_t n, float value)
{
    op_case *c = add(s, DG_CALL_FILL, "fill", false, "%zu value %g", n, value);
    if (!c)
        return;
    c->count = n, c->value = value;
    double *ref = cal(s, n, sizeof *ref);
    for (size_t i = 0; ref && i < n; i++)
        ref[i] = value;
    output(c, "x", ref, n);
}

/* Every op of the training fixture's cifar preset at batch FIXTURE_BATCH, in
 * the calls training makes: conv forward and backward (the first layer
 * without dx), relu, pool, linear layers as gemm NT (forward), TN (dW) and
 * NN (dx) with bias_add and bias_grad, the loss and the update. */
static void fixture_cases(dg_op_suite *s)
{
    dg_model m;
    if (dg_model_parse(s->ctx, "cifar", 0, 0, 0, &m) != DG_OK) {
        s->oom = true;
        return;
    }
    const int B = FIXTURE_BATCH;
    for (int i = 0; i < m.nlayers; i++) {
        const dg_layer *l = &m.L[i];
        size_t count = (size_t)B * l->out_c * l->out_h * l->out_w;
        char shape[64];
        switch (l->kind) {
        case DG_L_CONV: {
            dg_conv_shape v = l->conv;
            v.n = B;
            case_conv(s, true, v, false, i == 0);
            break;
        }
        case DG_L_RELU:
            snprintf(shape, sizeof shape, "[%d,%d,%d,%d]", B, l->out_c, l->out_h, l->out_w);
            case_relu(s, true, count, shape);
            break;
        case DG_L_POOL: {
            dg_pool_shape p = l->pool;
            p.n = B;
            case_pool(s, true, p);
            break;
        }
        case DG_L_FC:
            case_gemm(s, true, false, true, B, l->out_c, l->in_c, 1, 0);
            case_gemm(s, true, true, false, l->out_c, l->in_c, B, 1, 0);
            case_gemm(s, true, false, false, B, l->in_c, l->out_c, 1, 0);
            case_bias(s, true, B, l->out_c, 1);
            break;
        }
    }
    case_xent(s, true, B, m.classes, false);
    case_sgd(s, true, m.param_count, 0.01f, 0.9f, 0.0f);
}

static void odd_cases(dg_op_suite *s)
{
    static const int g[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}};
    static const float ab[][2] = {{1, 0}, {0.5f, -1.5f}, {-2, 0.25f}};
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < 3; i++)
            case_gemm(s, false, t & 1, t >> 1, g[i][0], g[i][1], g[i][2], ab[(i + t) % 3][0],
                      ab[(i + t) % 3][1]);
    case_fill(s, 1, 0.0f);
    case_fill(s, 1001, -1.0f / 3.0f);
    case_bias(s, false, 3, 7, 11);
    case_bias(s, false, 1, 5, 1);
    case_relu(s, false, 1, "1");
    case_relu(s, false, 1001, "1001");
    case_pool(s, false, (dg_pool_shape){.n = 2, .c = 3, .h = 13, .w = 11, .k = 3, .stride = 2});
    case_pool(s, false, (dg_pool_shape){.n = 1, .c = 2, .h = 7, .w = 9, .k = 2, .stride = 2});
    case_conv(s, false,
              (dg_conv_shape){
                  .n = 3, .c = 5, .h = 11, .w = 9, .k = 7, .kh = 3, .kw = 3, .stride = 2, .pad = 1},
              false, false);
    case_conv(s, false,
              (dg_conv_shape){
                  .n = 2, .c = 4, .h = 7, .w = 7, .k = 3, .kh = 1, .kw = 1, .stride = 1, .pad = 0},
              true, false);
    case_conv(s, false,
              (dg_conv_shape){
                  .n = 1, .c = 2, .h = 9, .w = 8, .k = 5, .kh = 5, .kw = 5, .stride = 1, .pad = 2},
              false, true);
    case_xent(s, false, 5, 13, true);
    case_xent(s, false, 1, 2, false);
    case_sgd(s, false, 1001, 0.05f, 0.9f, 5e-4f);
    case_sgd(s, false, 7, 0.1f, 0.0f, 0.0f);
}

dg_op_suite *dg_op_suite_new(dg_ctx *ctx, uint64_t seed)
{
    dg_op_suite *s = dg_calloc(1, sizeof *s);
    if (!s) {
        dg_fail(ctx, DG_ERR_NOMEM, "gate: out of host memory for the op cases");
        return NULL;
    }
    s->ctx = ctx;
    s->seed = seed;
    fixture_cases(s);
    odd_cases(s);
    if (s->oom) {
        dg_op_suite_free(s);
        dg_fail(ctx, DG_ERR_NOMEM, "gate: out of host memory for the op cases");
        return NULL;
    }
    return s;
}

void dg_op_suite_free(dg_op_suite *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        op_case *c = &s->c[i];
        for (int j = 0; j < MAX_IN; j++)
            dg_free(c->in[j]);
        for (int j = 0; j < c->nout; j++)
            dg_free(c->out[j].ref);
        dg_free(c->ints);
    }
    dg_free(s);
}

size_t dg_op_suite_count(const dg_op_suite *s)
{
    return s ? s->n : 0;
}
