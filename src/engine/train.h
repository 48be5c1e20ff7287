/* Extended entry to the training loop for the measurement steps (soak,
 * sweep trials, compare, profile): the same loop as dg_train_run with extra
 * instrumentation switched on. Fields at zero mean "off". */
#ifndef DG_TRAIN_H
#define DG_TRAIN_H

#include "devgate.h"

/* The synthetic source's size when --samples is not given: steps x batch up
 * to this cap, never under the batch (the sweep's train-set stop reads it). */
#define DG_SYNTH_SAMPLES_CAP 8192

typedef struct dg_train_ext {
    int sample_ms;          /* > 0: background sampler at this period; record "sampler" */
    bool step_times;        /* record per-step host times and their statistics ("steps") */
    bool epoch_watermarks;  /* record per-epoch watermarks ("epochs"): allocator, backend
                               pool/driver, process footprint */
    bool empty_cache_epoch; /* release and empty the allocator cache at each epoch end (marked in
                               "epochs") */
    size_t leak_per_step;   /* keep this many device bytes alive per step (retained references on
                               demand) */
    int val_steps;          /* validation steps (forward only) per epoch, marked in "epochs" */
    bool profile_ops; /* time every op (synchronising) after profile_warmup steps; record "ops" and
                         "trace" */
    int profile_warmup;     /* > 0: also the run's warm-up (the timed steps start after it) */
    const char *params_out; /* write the final parameter arena (float32) to this file */
    bool lock_epochs;       /* hold the machine's measurement lock through each epoch (its wait kept
                               out of the timed wall); "lock" in each "epochs" entry */
} dg_train_ext;

/* The loader threads for --workers N (0: the default, half the usable cores
 * within 2..8, enough to feed a fast device at batch 4096; negative: none,
 * batches made in the loop). */
int dg_train_workers(int requested);
/* dg_train_workers for a host advising `threads` compute threads. */
int dg_train_workers_for(int requested, int threads);

/* dg_train_run with instrumentation; ext may be NULL (then exactly dg_train_run). */
dg_status dg_train_run_ext(dg_ctx *ctx, const dg_train_opts *opts, const dg_train_ext *ext,
                           char **json);
#endif
