/* What the training run's files share (train.c the run, train_record.c its
 * record): the trainer, one run's state. Internal to src/engine/. */
#ifndef DG_ENGINE_TRAIN_INT_H
#define DG_ENGINE_TRAIN_INT_H

#include "data/loader.h"
#include "engine/model.h"
#include "engine/train.h"
#include "measure/health.h"
#include "measure/measure.h"

enum { PH_H2D, PH_FWD, PH_BWD, PH_UPDATE, PH_COUNT };
/* The timed phases' names in the record. */
extern const char *const dg_train_phase_names[PH_COUNT];

/* One training run: its options, the model on the device, the data, and
 * what the loop measures; the phase functions below share it. */
typedef struct trainer {
    dg_ctx *ctx;
    double t_start; /* the loop's start, for the progress reports */
    const dg_train_opts *o;
    const dg_train_ext *x;   /* never NULL (the plain instrumentation when none) */
    const dg_train_ext *ext; /* as the caller gave it: NULL for a plain run */
    const char *backend;
    int n; /* batch */
    int steps, epochs, sync_every, total, warmup;
    float lr, momentum, wd;

    dg_engine *e;
    dg_model m;
    dg_act_layout lay;
    dg_block *params; /* three arenas: parameters, gradients, momentum */
    dg_block *act;
    /* The training batches are the loader's slots, uploaded in place: with
     * the backend's page-locked memory (host_alloc) an upload only enqueues,
     * so the batch of the step before stays held (inflight) until host_wait
     * says its upload is done, while the next one travels. */
    dg_batch inflight;
    float *init; /* the initial parameter arena (host) */

    dg_source *src;
    dg_loader_opts lo;
    dg_loader *data, *val, *vtrain;

    bool can_capture, captured;
    const char *capture_note;

    double *step_s;   /* host seconds of every step (step times, epoch watermarks) */
    int nstep;        /* steps with a time in step_s */
    dg_block **leaks; /* the blocks kept alive on demand */
    size_t nleaks;
    dg_sampler *sampler;
    dg_health *health;          /* the device's energy counter (NULL: none to read) */
    dg_health_sample energy[2]; /* at the timed steps' start and end */
    double phase_ms[PH_COUNT][256];
    size_t phase_n;
    int syncs, since_sync, timed_steps;
    bool marking;                /* this step marks its phases (it ends at a sync point) */
    uint64_t enq0, waits0;       /* the backend's queue counts when the timed steps began */
    bool counted;                /* enq0 and waits0 were read */
    double enq_step, waits_step; /* per timed step; NAN when the backend counts none */
    bool finite;
    double t0, wall, val_time, data_wait;
    /* Where the run's start went (s; NAN where not reached): the data source
     * opened, the engine (backend, libraries, device context), buffers and
     * parameters prepared, the untimed first steps (capture included). */
    double w_begin, w_data, w_engine, w_prepare;
    dg_mlock mlock; /* lock_epochs: the epoch's hold of the measurement lock */
    double lock_waited;
    double cpu0, cpu, val_cpu; /* process CPU seconds: at t0, over the timed steps, at epoch ends */
    cJSON *rec, *spec, *losses, *vals, *epochs_j;
    char spec_id[65]; /* dg_spec_hash of the spec */
} trainer;

/* ---- train_data.c ---- */
/* Loader opts of a second, inline loader that makes the same batches (the
 * export and the validation passes): normalisation fixed to the first's. */
dg_loader_opts dg_train_inline_opts(const dg_loader_opts *lo, const dg_loader *ld);
/* Writes the initial parameters, the manifest and every batch under dir, for
 * the golden-trajectory script (tests/golden/). */
dg_status dg_train_export_run(trainer *t, dg_loader *data, const dg_train_opts *o, int epochs,
                              int steps, const float *init, cJSON *spec);
/* The options with the library's defaults filled in: what the record's spec
 * (the codec in engine/spec.c) says ran. */
dg_train_opts dg_train_resolved_opts(const dg_train_opts *o, const char *backend, int batch,
                                     int steps, int epochs, int sync_every, float lr, float mom,
                                     float wd);
/* Opens the data source for the model and fills the loader options. */
dg_status dg_train_open_data(dg_ctx *ctx, const dg_train_opts *o, const dg_model *m, int batch,
                             size_t samples, dg_source **src, dg_loader_opts *lo);
/* Downloads the parameter arena and writes it as raw float32 to path. */
dg_status dg_train_write_params(trainer *t, const char *path);

/* ---- train_record.c ---- */
/* The train record of t's run (docs/schema/measure.md) ended with final;
 * takes t's record parts over. */
cJSON *dg_train_record(trainer *t, dg_status final);
#endif
