/* The float64 training run: the model of the fixture trained on the same
 * batches from the same float32 initial weights, with every op taken from
 * ref64.c and composed in the order train.c issues the device ops. It is the
 * yardstick `devgate compare` measures both fp32 backends against. The ops
 * run on an OpenMP team sized as the cpu side's is (env/cpu_team.h: the
 * cores others leave free, looked at between steps), and the trajectory is
 * the same bytes whatever its size (ref64.c). */
#include "engine/engine.h"
#include "engine/model.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#ifdef __FAST_MATH__
#error "ref64_train.c must be built without -ffast-math"
#endif

typedef struct ref_run {
    dg_model m; /* a copy with the batch size set in the conv/pool shapes */
    int n;
    double *x; /* input batch */
    int32_t *labels;
    double *y[DG_MAX_LAYERS], *dy[DG_MAX_LAYERS];
    int32_t *argmax[DG_MAX_LAYERS];
    double *P, *G, *M; /* parameters, gradients, momentum (arena layout) */
} ref_run;

static size_t per_sample(const dg_layer *l)
{
    return (size_t)l->out_c * l->out_h * l->out_w;
}

static double *at(double *arena, size_t byte_off)
{
    return arena + byte_off / sizeof(float);
}

static void forward_backward(ref_run *r, double *loss)
{
    const dg_model *m = &r->m;
    int n = r->n;
    for (int i = 0; i < m->nlayers; i++) {
        const dg_layer *l = &m->L[i];
        const double *in = i == 0 ? r->x : r->y[i - 1];
        switch (l->kind) {
        case DG_L_CONV:
            dg_ref64_conv2d_fwd(&l->conv, in, at(r->P, l->w_off), at(r->P, l->b_off), r->y[i]);
            break;
        case DG_L_RELU: dg_ref64_relu_fwd(in, r->y[i], (size_t)n * per_sample(l)); break;
        case DG_L_POOL: dg_ref64_maxpool_fwd(&l->pool, in, r->y[i], r->argmax[i]); break;
        case DG_L_FC:
            /* y[n, out] = x[n, in] * W[out, in]^T + b */
            dg_ref64_gemm(false, true, n, l->out_c, l->in_c, 1.0, in, l->in_c, at(r->P, l->w_off),
                          l->in_c, 0.0, r->y[i], l->out_c);
            dg_ref64_bias_add(r->y[i], at(r->P, l->b_off), n, l->out_c, 1);
            break;
        }
    }
    int last = m->nlayers - 1;
    double correct = 0.0;
    *loss = dg_ref64_xent(n, m->classes, r->y[last], r->labels, r->dy[last], &correct);
    for (int i = last; i >= 0; i--) {
        const dg_layer *l = &m->L[i];
        const double *in = i == 0 ? r->x : r->y[i - 1];
        double *dx = i == 0 ? NULL : r->dy[i - 1];
        switch (l->kind) {
        case DG_L_CONV:
            dg_ref64_conv2d_bwd(&l->conv, in, at(r->P, l->w_off), r->dy[i], dx, at(r->G, l->w_off),
                                at(r->G, l->b_off));
            break;
        case DG_L_RELU:
            if (dx)
                dg_ref64_relu_bwd(r->y[i], r->dy[i], dx, (size_t)n * per_sample(l));
            break;
        case DG_L_POOL:
            if (dx)
                dg_ref64_maxpool_bwd(&l->pool, r->dy[i], r->argmax[i], dx);
            break;
        case DG_L_FC:
            /* dW[out, in] = dy^T[out, n] * x[n, in]; db = sum dy; dx[n, in] = dy * W */
            dg_ref64_gemm(true, false, l->out_c, l->in_c, n, 1.0, r->dy[i], l->out_c, in, l->in_c,
                          0.0, at(r->G, l->w_off), l->in_c);
            dg_ref64_bias_grad(r->dy[i], at(r->G, l->b_off), n, l->out_c, 1);
            if (dx)
                dg_ref64_gemm(false, false, n, l->in_c, l->out_c, 1.0, r->dy[i], l->out_c,
                              at(r->P, l->w_off), l->in_c, 0.0, dx, l->in_c);
            break;
        }
    }
}

static void free_run(ref_run *r)
{
    dg_free(r->x);
    dg_free(r->labels);
    for (int i = 0; i < DG_MAX_LAYERS; i++) {
        dg_free(r->y[i]);
        dg_free(r->dy[i]);
        dg_free(r->argmax[i]);
    }
    dg_free(r->P);
    dg_free(r->G);
    dg_free(r->M);
    dg_free(r);
}

dg_status dg_ref64_train(dg_ctx *ctx, const struct dg_model *model, const float *init_params,
                         int batch, int steps, int threads, dg_ref64_batch_fn next_batch,
                         void *user, double lr, double momentum, double weight_decay,
                         double *losses, double *final_params)
{
    if (!model || !init_params || !next_batch || batch < 1 || steps < 1 || model->nlayers < 1 ||
        model->nlayers > DG_MAX_LAYERS)
        return dg_fail(ctx, DG_ERR_USAGE, "ref64 training: bad model, batch or step count");
    ref_run *r = dg_calloc(1, sizeof *r);
    if (!r)
        return dg_fail(ctx, DG_ERR_NOMEM, "ref64 training: out of host memory");
    r->m = *model;
    r->n = batch;
    dg_model *m = &r->m;
    size_t in_elems = (size_t)batch * m->in_c * m->in_h * m->in_w;
    size_t count = m->param_arena / sizeof(float);
    bool ok = (r->x = dg_malloc(in_elems * sizeof(double))) != NULL;
    ok = ok && (r->labels = dg_malloc((size_t)batch * sizeof(int32_t))) != NULL;
    ok = ok && (r->P = dg_malloc(count * sizeof(double))) != NULL;
    ok = ok && (r->G = dg_calloc(count ? count : 1, sizeof(double))) != NULL;
    ok = ok && (r->M = dg_calloc(count ? count : 1, sizeof(double))) != NULL;
    for (int i = 0; i < m->nlayers && ok; i++) {
        dg_layer *l = &m->L[i];
        size_t elems = (size_t)batch * per_sample(l);
        if (l->kind == DG_L_CONV)
            l->conv.n = batch;
        if (l->kind == DG_L_POOL) {
            l->pool.n = batch;
            ok = (r->argmax[i] = dg_malloc(elems * sizeof(int32_t))) != NULL;
        }
        ok = ok && (r->y[i] = dg_malloc(elems * sizeof(double))) != NULL;
        ok = ok && (r->dy[i] = dg_malloc(elems * sizeof(double))) != NULL;
    }
    float *xf = ok ? dg_malloc(in_elems * sizeof(float)) : NULL;
    if (!xf) {
        free_run(r);
        return dg_fail(ctx, DG_ERR_NOMEM, "ref64 training: out of host memory");
    }
    for (size_t i = 0; i < count; i++)
        r->P[i] = init_params[i];
    int caller_threads = omp_get_max_threads();
    dg_cpu_team team = {0};
    dg_cpu_team_init(&team, threads);
    dg_status st = DG_OK;
    for (int s = 0; s < steps; s++) {
        dg_cpu_team_step(&team);
        if ((st = next_batch(user, s, xf, r->labels)) != DG_OK)
            break;
        for (size_t i = 0; i < in_elems; i++)
            r->x[i] = xf[i];
        double loss;
        forward_backward(r, &loss);
        if (losses)
            losses[s] = loss;
        /* One SGD over the whole arena: the gaps hold zeros in all three. */
        dg_ref64_sgd(r->P, r->G, r->M, count, lr, momentum, weight_decay);
    }
    omp_set_num_threads(caller_threads);
    if (st == DG_OK && final_params)
        memcpy(final_params, r->P, count * sizeof(double));
    dg_free(xf);
    free_run(r);
    return st;
}

double dg_ref64_step_flops(const struct dg_model *m, int batch)
{
    double f = 0.0;
    for (int i = 0; i < m->nlayers; i++) {
        const dg_layer *l = &m->L[i];
        double out = (double)batch * per_sample(l);
        double passes = i == 0 ? 2.0 : 3.0; /* forward, weight gradient, input gradient */
        if (l->kind == DG_L_CONV)
            f += passes * 2.0 * out * l->conv.c * l->conv.kh * l->conv.kw;
        else if (l->kind == DG_L_FC)
            f += passes * 2.0 * out * l->in_c;
        else
            f += 2.0 * out; /* relu, pool: forward and backward, one operation each */
    }
    return f;
}
