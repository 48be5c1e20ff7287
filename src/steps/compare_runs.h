/* What compare RUN_A RUN_B reads from each evidence record (compare_basis.c):
 * the throughput samples each section holds, the contention its measured
 * windows saw, its seeds and its command, for compare_runs.c to judge. */
#ifndef DG_STEPS_COMPARE_RUNS_H
#define DG_STEPS_COMPARE_RUNS_H

#include "core/core.h"
#include "core/json.h"

#include <stdbool.h>
#include <stddef.h>

#define CR_MAX_SAMPLES 4096
#define CR_MAX_BATCHES 8

/* One set of throughput samples (samples/s) measured one way. */
typedef struct cr_series {
    const char *basis; /* "epochs", "compare" */
    int batch;         /* compare: the batch; 0 for epochs */
    double *v;         /* dg_malloc'd */
    size_t n;
    const char *what; /* "per-epoch samples/s of the soak", ... */
} cr_series;

typedef struct cr_side {
    const cJSON *rec;
    const char *kind;  /* the record's kind ("run", "accept", "compare", ...) */
    const char *shape; /* "run", "accept", "accept -- CMD", "compare", or the kind */
    cr_series epochs;
    cr_series cmp[CR_MAX_BATCHES];
    int ncmp;
    /* Contention: measured windows (objects with others_cpus) outside gate and env. */
    int windows, hit;
    double cpus_sum, cpus_worst;
    bool contended_finding; /* the record's own findings name contended */
    /* Seeds: "torch=1 numpy=1 random=1 workers=0", "seed=0" (the fixture), or "". */
    char seeds[160];
    bool seeds_known, torch_unseeded;
    cJSON *argv; /* the command as an array of strings (owned) */
} cr_side;

/* Fills s from rec (not copied: rec outlives s); th_contention: others_cpus at
 * or above which a window is contended. False when out of memory. */
bool cr_side_read(cr_side *s, const cJSON *rec, double th_contention);
void cr_side_free(cr_side *s);

/* The differing part of two commands, with a word of context either side and
 * "..." where words were left out: into a and b (n bytes each). */
void cr_cmd_diff(const cJSON *argv_a, const cJSON *argv_b, char *a, char *b, size_t n);

#endif
