/* Checks of the float64 training run (src/engine/ref64_train.c): its losses
 * track the fp32 cpu backend's over the same weights and batches (exported by
 * `train --export`) on an mlp-like and a conv model, a hand-built one-layer
 * case matches the closed form, the FLOP estimate counts what it says, and
 * the trajectory is the same bytes on one thread and on two. */
#include "core/core.h"
#include "engine/model.h"

#include "check.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- batches from an export --------------------------------------------------- */

typedef struct exported {
    FILE *f;
    size_t xfloats;
    int n;
} exported;

static dg_status read_batch(void *user, int step, float *x, int32_t *labels)
{
    exported *e = user;
    if (fread(x, sizeof(float), e->xfloats, e->f) != e->xfloats ||
        fread(labels, sizeof(int32_t), (size_t)e->n, e->f) != (size_t)e->n)
        return DG_ERR_IO;
    return DG_OK;
}

static float *read_params(const char *dir, size_t bytes)
{
    char path[512];
    snprintf(path, sizeof path, "%s/params.f32", dir);
    FILE *f = fopen(path, "rb");
    float *p = malloc(bytes);
    if (!f || !p || fread(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "test_ref64_train: cannot read %s\n", path);
        exit(2);
    }
    fclose(f);
    return p;
}

/* Trains `model` (layer string for input c x h x w) on cpu with sync every
 * step and exports its batches, then runs the float64 reference on them and
 * compares every loss within rel (relative). */
static void track_cpu(const char *model, int c, int h, int w, int batch, int steps, double rel)
{
    dg_ctx *ctx = dg_ctx_new();
    const char *tmp = getenv("TMPDIR");
    char tdir[512];
    snprintf(tdir, sizeof tdir, "%s/dg-ref64-train-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    char *d = mkdtemp(tdir);
    CHECK(d != NULL);
    if (!d)
        return;
    char ex[600];
    snprintf(ex, sizeof ex, "%s/export", d);
    dg_train_opts o = {.init = DG_TRAIN_OPTS_MAGIC,
                       .model = model,
                       .in_c = c,
                       .in_h = h,
                       .in_w = w,
                       .batch = batch,
                       .steps = steps,
                       .seed = 7,
                       .sync_every = 1,
                       .lr = 0.05f,
                       .momentum = 0.9f,
                       .weight_decay = 5e-4f,
                       .threads = 1,
                       .export_dir = ex};
    char *json = NULL;
    dg_status st = dg_train_run(ctx, &o, &json);
    CHECK_MSG(st == DG_OK, "%s: train: %s", model, dg_errmsg(ctx));
    cJSON *rec = json ? cJSON_Parse(json) : NULL;
    const cJSON *lj = cJSON_GetObjectItem(rec, "loss");
    CHECK(cJSON_GetArraySize(lj) == steps);

    dg_model m;
    CHECK(dg_model_parse(ctx, model, c, h, w, &m) == DG_OK);
    float *init = read_params(ex, m.param_arena);
    char path[700];
    snprintf(path, sizeof path, "%s/batches.bin", ex);
    exported e = {fopen(path, "rb"), (size_t)batch * m.in_c * m.in_h * m.in_w, batch};
    CHECK(e.f != NULL);
    double *losses = calloc((size_t)steps, sizeof *losses);
    double *fin = calloc(m.param_arena / sizeof(float), sizeof *fin);
    if (e.f && losses && fin) {
        st = dg_ref64_train(ctx, &m, init, batch, steps, 1, read_batch, &e, o.lr, o.momentum,
                            o.weight_decay, losses, fin);
        CHECK_MSG(st == DG_OK, "%s: ref64: %s", model, dg_errmsg(ctx));
        double worst = 0;
        for (int s = 0; s < steps && st == DG_OK; s++) {
            const cJSON *pt = cJSON_GetArrayItem(lj, s);
            double got = cJSON_GetNumberValue(cJSON_GetObjectItem(pt, "loss"));
            double diff = fabs(got - losses[s]) / fabs(losses[s]);
            if (!(diff <= worst))
                worst = diff;
        }
        CHECK_MSG(worst <= rel, "%s: cpu vs float64 loss: worst relative difference %.3g > %.3g",
                  model, worst, rel);
        /* It learns: the last loss is below the first. */
        CHECK_MSG(losses[steps - 1] < losses[0], "%s: float64 loss %.6f -> %.6f", model, losses[0],
                  losses[steps - 1]);
        /* The final parameters moved away from the initial ones. */
        double moved = 0;
        for (size_t i = 0; i < m.param_arena / sizeof(float); i++)
            moved += fabs(fin[i] - init[i]);
        CHECK(moved > 0);
    }
    if (e.f)
        fclose(e.f);
    free(losses);
    free(fin);
    free(init);
    cJSON_Delete(rec);
    dg_string_free(json);
    remove(path);
    snprintf(path, sizeof path, "%s/params.f32", ex);
    remove(path);
    snprintf(path, sizeof path, "%s/manifest.json", ex);
    remove(path);
    rmdir(ex);
    rmdir(d);
    dg_ctx_free(ctx);
}

/* ---- the closed form ------------------------------------------------------------ */

/* One fc layer 2 -> 2, weights and biases 0, batch 1, x = (1, 2), label 0, no
 * momentum: step 0 has logits 0 and loss log 2; after it W = lr [[.5, 1], [-.5, -1]],
 * b = lr [.5, -.5], so step 1 has logits (3 lr, -3 lr) and loss log(1 + e^(-6 lr));
 * its update subtracts lr * ((p - 1) x, (1 - p) x) with p = 1 / (1 + e^(-6 lr)). */
static dg_status one_batch(void *user, int step, float *x, int32_t *labels)
{
    x[0] = 1.0f;
    x[1] = 2.0f;
    labels[0] = 0;
    return DG_OK;
}

static void test_closed_form(void)
{
    dg_ctx *ctx = dg_ctx_new();
    dg_model m;
    dg_status st = dg_model_parse(ctx, "fc:2", 1, 1, 2, &m);
    CHECK_MSG(st == DG_OK, "parse: %s", dg_errmsg(ctx));
    if (st != DG_OK) {
        dg_ctx_free(ctx);
        return;
    }
    const dg_layer *l = &m.L[0];
    CHECK(m.nlayers == 1 && l->kind == DG_L_FC && l->w_count == 4 && l->b_count == 2);
    size_t count = m.param_arena / sizeof(float);
    float *init = calloc(count, sizeof *init);
    double *fin = calloc(count, sizeof *fin);
    double losses[2];
    double lr = 0.1;
    st = dg_ref64_train(ctx, &m, init, 1, 2, 1, one_batch, NULL, lr, 0.0, 0.0, losses, fin);
    CHECK(st == DG_OK);
    CHECK_MSG(fabs(losses[0] - log(2.0)) < 1e-15, "loss 0 = %.17g", losses[0]);
    double want1 = log(1.0 + exp(-6.0 * lr));
    CHECK_MSG(fabs(losses[1] - want1) < 1e-15, "loss 1 = %.17g, want %.17g", losses[1], want1);
    double p = 1.0 / (1.0 + exp(-6.0 * lr));
    const double *W = fin + l->w_off / sizeof(float), *b = fin + l->b_off / sizeof(float);
    double wantW[4] = {lr * 0.5 - lr * (p - 1) * 1, lr * 1.0 - lr * (p - 1) * 2,
                       -lr * 0.5 - lr * (1 - p) * 1, -lr * 1.0 - lr * (1 - p) * 2};
    double wantb[2] = {lr * 0.5 - lr * (p - 1), -lr * 0.5 - lr * (1 - p)};
    for (int i = 0; i < 4; i++)
        CHECK_MSG(fabs(W[i] - wantW[i]) < 1e-15, "W[%d] = %.17g, want %.17g", i, W[i], wantW[i]);
    for (int i = 0; i < 2; i++)
        CHECK_MSG(fabs(b[i] - wantb[i]) < 1e-15, "b[%d] = %.17g, want %.17g", i, b[i], wantb[i]);
    /* Momentum 0.5: the second update adds half the first one's step. */
    st = dg_ref64_train(ctx, &m, init, 1, 2, 1, one_batch, NULL, lr, 0.5, 0.0, losses, fin);
    CHECK(st == DG_OK);
    CHECK(fabs(W[0] - (wantW[0] + lr * 0.5 * 0.5)) < 1e-15);
    CHECK(fabs(b[1] - (wantb[1] - lr * 0.5 * 0.5)) < 1e-15);
    /* FLOPs: forward 2*1*2*2 = 8; a first layer has no input gradient: 2 passes. */
    CHECK(dg_ref64_step_flops(&m, 1) == 16.0);
    CHECK(dg_ref64_step_flops(&m, 4) == 64.0);
    /* Bad arguments are usage errors; a failing batch source ends the run. */
    CHECK(dg_ref64_train(ctx, &m, init, 0, 2, 1, one_batch, NULL, lr, 0, 0, losses, fin) ==
          DG_ERR_USAGE);
    CHECK(dg_ref64_train(ctx, &m, init, 1, 2, 1, NULL, NULL, lr, 0, 0, losses, fin) ==
          DG_ERR_USAGE);
    free(init);
    free(fin);
    dg_ctx_free(ctx);
}

static dg_status failing_batch(void *user, int step, float *x, int32_t *labels)
{
    (*(int *)user)++;
    return step == 1 ? DG_ERR_IO : one_batch(user, step, x, labels);
}

static void test_batch_failure(void)
{
    dg_ctx *ctx = dg_ctx_new();
    dg_model m;
    CHECK(dg_model_parse(ctx, "fc:2", 1, 1, 2, &m) == DG_OK);
    float init[512] = {0};
    double losses[3], fin[512];
    int calls = 0;
    CHECK(m.param_arena <= sizeof init);
    CHECK(dg_ref64_train(ctx, &m, init, 1, 3, 1, failing_batch, &calls, 0.1, 0, 0, losses, fin) ==
          DG_ERR_IO);
    CHECK(calls == 2);
    dg_ctx_free(ctx);
}

/* ---- the same bytes at any thread count ------------------------------------------ */

/* Batch `step` drawn from the rng stream of that step: the same at every call. */
static dg_status seeded_batch(void *user, int step, float *x, int32_t *labels)
{
    const int *n = user;
    dg_rng r;
    dg_rng_init(&r, 11, (uint64_t)step);
    dg_rng_uniform(&r, x, (size_t)n[0] * n[1], -1.0f, 1.0f);
    for (int i = 0; i < n[0]; i++)
        labels[i] = (int32_t)((i * 7 + step) % 10);
    return DG_OK;
}

/* The losses and final parameters of a few steps on `threads` OpenMP threads. */
static dg_status trajectory(dg_ctx *ctx, const dg_model *m, const float *init, int threads,
                            int batch, int steps, double *losses, double *fin)
{
    int dims[2] = {batch, m->in_c * m->in_h * m->in_w};
    return dg_ref64_train(ctx, m, init, batch, steps, threads, seeded_batch, dims, 0.05, 0.9, 5e-4,
                          losses, fin);
}

/* The model is sized so that every convolution pass, pool, the first relu,
 * the large product and the SGD over the arena run split over the team
 * (ref64.c's PAR_MIN); each output keeps its one thread and its order, so
 * two threads give the bytes one does. */
static void test_threads_same_bytes(void)
{
    dg_ctx *ctx = dg_ctx_new();
    dg_model m;
    dg_status st = dg_model_parse(
        ctx, "conv3x3:16:p1,relu,pool2,conv3x3:32:p1,relu,pool2,fc:64,relu,fc:10", 3, 16, 16, &m);
    CHECK_MSG(st == DG_OK, "parse: %s", dg_errmsg(ctx));
    if (omp_get_thread_limit() < 2) { /* the TSan tier: OMP_THREAD_LIMIT=1 */
        printf("threads: one OpenMP thread at most here, the 1-against-2 check does not run\n");
        dg_ctx_free(ctx);
        return;
    }
    const int batch = 20, steps = 4;
    size_t count = m.param_arena / sizeof(float);
    float *init = calloc(count, sizeof *init);
    double *l[2] = {calloc(steps, sizeof(double)), calloc(steps, sizeof(double))};
    double *p[2] = {calloc(count, sizeof(double)), calloc(count, sizeof(double))};
    CHECK(st == DG_OK && init && l[0] && l[1] && p[0] && p[1]);
    if (st == DG_OK && init && l[0] && l[1] && p[0] && p[1]) {
        dg_rng r;
        dg_rng_init(&r, 5, 0);
        dg_rng_uniform(&r, init, count, -0.2f, 0.2f);
        int caller = omp_get_max_threads();
        for (int t = 0; t < 2; t++)
            CHECK_MSG(trajectory(ctx, &m, init, t + 1, batch, steps, l[t], p[t]) == DG_OK,
                      "%d threads: %s", t + 1, dg_errmsg(ctx));
        CHECK(omp_get_max_threads() == caller); /* the caller's team size is back */
        CHECK_MSG(memcmp(l[0], l[1], steps * sizeof(double)) == 0,
                  "losses differ: last %.17g on 1 thread, %.17g on 2", l[0][steps - 1],
                  l[1][steps - 1]);
        size_t differ = 0;
        for (size_t i = 0; i < count; i++)
            differ += memcmp(&p[0][i], &p[1][i], sizeof(double)) != 0;
        CHECK_MSG(differ == 0, "%zu of %zu final parameters differ between 1 and 2 threads", differ,
                  count);
        CHECK_MSG(l[0][steps - 1] < l[0][0], "float64 loss %.6f -> %.6f", l[0][0], l[0][steps - 1]);
    }
    free(init);
    for (int i = 0; i < 2; i++) {
        free(l[i]);
        free(p[i]);
    }
    dg_ctx_free(ctx);
}

int main(void)
{
    test_closed_form();
    test_threads_same_bytes();
    test_batch_failure();
    /* fp32 against float64 over 10 steps: 1e-4 relative is far above fp32
     * round-off and far below any real divergence. */
    track_cpu("fc:32,relu,fc:16,relu,fc:10", 1, 12, 12, 16, 10, 1e-4);
    track_cpu("conv3x3:4:p1,relu,pool2,conv3x3:6,relu,pool2,fc:10", 1, 12, 12, 8, 10, 1e-4);
    CHECK_DONE();
}
