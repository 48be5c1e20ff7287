/* The fixture's comparison, inside (compare.c, compare_numerics.c): its
 * configuration and state, the one training run both parts start, and the
 * numerics pair. */
#ifndef DG_COMPARE_INT_H
#define DG_COMPARE_INT_H

#include "core/core.h"
#include "core/json.h"
#include "engine/model.h"
#include "steps/steps.h"

#define REF_MAX_GFLOP 2.0 /* the float64 run is skipped above this per step */
#define MAX_RUNS 4        /* batches of one comparison */

typedef struct cmp_cfg {
    const dg_compare_opts *opts;
    const char *device;
    int steps, reps;
    double loss_tol, param_tol;
    float lr, momentum, wd;
    const dg_model *m;
    const char *tmp; /* private temp folder */
} cmp_cfg;

/* The fixture's comparison (steps.h): the configuration, what the numerics
 * pair of each batch found (the RUN's members it adds), the first device
 * record (the device's name) and the status of the side that failed. */
struct dg_fixture_compare {
    dg_ctx *ctx;
    cmp_cfg c;
    dg_model *m;
    char *tmp;
    cJSON *num[MAX_RUNS]; /* the numerics of batch[i]: RUN members, moved into the RUN */
    int batch[MAX_RUNS];
    int nnum;
    cJSON *dev_rec;
    const char *failed; /* the side of the numerics pair that failed */
    dg_status pair_st;  /* the status of the timed side that failed (DG_OK: none) */
    bool all_ok;
};

/* One training run of the comparison: sync every step, step times on, the
 * final parameters to params_path, the batches exported to export_dir (NULL:
 * none); the cpu in exact fp32. *rec gets the parsed record (NULL when there
 * is none). */
dg_status dg_compare_train_once(dg_ctx *ctx, const dg_train_opts *base, const char *backend,
                                int batch, int steps, const char *export_dir,
                                const char *params_path, cJSON **rec);
/* The numerics pair at batch (the warm-up: it exports the batches and
 * compiles the device's kernels): cpu, device and the float64 reference on
 * the same weights and batches; their RUN members kept in fc. The failing
 * side in fc->failed when one does not end ok. */
dg_status dg_compare_numerics_pair(dg_fixture_compare *fc, int batch);
#endif
