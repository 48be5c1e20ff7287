/* The float64 reference's trajectory alone (dg_ref64_train, src/engine/ref64_train.c):
 * the cifar preset at a batch for 5 steps from seeded weights and batches, its
 * wall, the last loss and a hash of the final parameters' bytes (the same hash
 * at any thread count). What `accept --quick` runs inside compare at the knee's
 * batch on this machine (batch 8, 5 steps).
 *
 *   cc -O2 -fopenmp -std=c17 -D_GNU_SOURCE -Isrc -IBUILD -Iinclude -isystem /usr/include/cjson \
 *      bench/ttev_ref64.c BUILD/libdevgate.a -lopenblas -lcjson -lsqlite3 -lcrypto -lpng \
 *      -ljpeg -lz -lOpenCL -lcurl -lgomp -lpthread -ldl -lm -o ttev_ref64
 *   ./ttev_ref64 [THREADS [BATCH]]   (THREADS 0: the cpu side's team, the free cores)
 *
 * An older build's library takes the signature without THREADS: build with
 * -DTTEV_NO_THREADS_ARG and set OMP_NUM_THREADS instead. */
#include "core/core.h"
#include "engine/model.h"

#include <stdio.h>
#include <stdlib.h>

/* Batch `step`: inputs and labels from the Philox stream of that step. */
static dg_status seeded_batch(void *user, int step, float *x, int32_t *labels)
{
    const size_t *dims = user; /* batch, floats per sample */
    dg_rng r;
    dg_rng_init(&r, 11, (uint64_t)step);
    dg_rng_uniform(&r, x, dims[0] * dims[1], -1.0f, 1.0f);
    for (size_t i = 0; i < dims[0]; i += 4) {
        uint32_t u[4];
        dg_rng_next4(&r, u);
        for (size_t j = 0; j < 4 && i + j < dims[0]; j++)
            labels[i + j] = (int32_t)(u[j] % 10);
    }
    return DG_OK;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 0, batch = argc > 2 ? atoi(argv[2]) : 8, steps = 5;
    dg_ctx *ctx = dg_ctx_new();
    dg_model m;
    if (dg_model_parse(ctx, "cifar", 0, 0, 0, &m) != DG_OK)
        return 2;
    size_t count = m.param_arena / sizeof(float);
    float *init = calloc(count, sizeof *init);
    double *losses = calloc(steps, sizeof *losses), *fin = calloc(count, sizeof *fin);
    if (!init || !losses || !fin)
        return 2;
    dg_rng r;
    dg_rng_init(&r, 5, 0);
    dg_rng_uniform(&r, init, count, -0.05f, 0.05f);
    size_t dims[2] = {(size_t)batch, (size_t)m.in_c * m.in_h * m.in_w};
    double t0 = dg_now();
#ifdef TTEV_NO_THREADS_ARG
    dg_status st =
        dg_ref64_train(ctx, &m, init, batch, steps, seeded_batch, dims, 0.01, 0.9, 0, losses, fin);
#else
    dg_status st = dg_ref64_train(ctx, &m, init, batch, steps, threads, seeded_batch, dims, 0.01,
                                  0.9, 0, losses, fin);
#endif
    double wall = dg_now() - t0;
    unsigned long long h = 1469598103934665603ULL; /* FNV-1a over the final parameters */
    for (size_t i = 0; i < count; i++) {
        const unsigned char *b = (const unsigned char *)&fin[i];
        for (size_t j = 0; j < sizeof fin[i]; j++)
            h = (h ^ b[j]) * 1099511628211ULL;
    }
    printf("status %s threads %d batch %d steps %d wall %.3f s last loss %.17g params %016llx\n",
           dg_status_name(st), threads, batch, steps, wall, losses[steps - 1], h);
    free(init);
    free(losses);
    free(fin);
    dg_ctx_free(ctx);
    return st == DG_OK ? 0 : 1;
}
