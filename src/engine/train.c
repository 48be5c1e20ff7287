/* The training loop of the fixture: seeded model, batches from the loader
 * (docs/data.md), forward, loss, backward and SGD on one backend, the loss read back only at sync
 * points, phases timed with device events, and on backends that can, the whole step captured once
 * as a device graph and replayed. */
#include "core/record.h"
#include "data/loader.h"
#include "engine/model.h"
#include "engine/spec.h"
#include "engine/train_int.h"
#include "env/peak.h"
#include "measure/health.h"
#include "measure/measure.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { EV_START, EV_H2D, EV_FWD, EV_BWD, EV_UPDATE };
/* Loader opts of a second, inline loader that makes the same batches (the
 * export and the validation passes): normalisation fixed to the first's. */

static dg_ref act_at(const trainer *t, size_t off)
{
    return (dg_ref){t->act->buf, off};
}

static dg_ref param_at(const trainer *t, int arena, size_t off)
{
    return (dg_ref){t->params->buf, (size_t)arena * t->m.param_arena + off};
}

static const dg_ref absent = {NULL, 0};

/* Forward through every layer (dg_model_forward: fused where the engine
 * fuses), then the loss (which also seeds the backward). */
static dg_status forward(trainer *t)
{
    dg_status st =
        dg_model_forward(t->ctx, t->e, &t->m, &t->lay, t->n, t->act->buf, t->params->buf);
    if (st != DG_OK)
        return st;
    const dg_layer *last = &t->m.L[t->m.nlayers - 1];
    return dg_op_xent(t->ctx, t->e, t->n, t->m.classes, act_at(t, last->y_off),
                      act_at(t, t->lay.labels_off), act_at(t, last->dy_off),
                      act_at(t, t->lay.acc_off));
}

/* Backward through every layer. Where the engine fuses, a product's input
 * gradient that a ReLU (not the first layer) would mask next is masked in
 * the product's call, straight into the gradient of the layer before the
 * ReLU; the ReLU is then done. */
static dg_status backward(trainer *t)
{
    dg_ctx *ctx = t->ctx;
    dg_engine *e = t->e;
    dg_status st = DG_OK;
    int n = t->n;
    bool fused = dg_engine_fuses(e, DG_FUSE_GEMM);
    for (int i = t->m.nlayers - 1; i >= 0 && st == DG_OK; i--) {
        const dg_layer *l = &t->m.L[i];
        dg_ref in = i == 0 ? act_at(t, t->lay.x_off) : act_at(t, t->m.L[i - 1].y_off);
        dg_ref dx = i == 0 ? absent : act_at(t, t->m.L[i - 1].dy_off);
        dg_ref dy = act_at(t, l->dy_off);
        dg_epilogue mask = {absent, false, absent};
        if (fused && l->kind == DG_L_FC && i >= 2 && t->m.L[i - 1].kind == DG_L_RELU) {
            mask.mask = act_at(t, t->m.L[i - 1].y_off);
            dx = act_at(t, t->m.L[i - 2].dy_off);
        }
        switch (l->kind) {
        case DG_L_CONV:
            st = dg_op_conv2d_bwd(ctx, e, &l->conv, in, param_at(t, 0, l->w_off), dy, dx,
                                  param_at(t, 1, l->w_off), param_at(t, 1, l->b_off),
                                  act_at(t, t->lay.work_off));
            break;
        case DG_L_RELU:
            if (dx.buf)
                st = dg_op_relu_bwd(ctx, e, act_at(t, l->y_off), dy, dx,
                                    (size_t)n * l->out_c * l->out_h * l->out_w);
            break;
        case DG_L_POOL:
            if (dx.buf)
                st = dg_op_maxpool_bwd(ctx, e, &l->pool, dy, act_at(t, l->argmax_off), dx);
            break;
        case DG_L_FC:
            /* dW[out, in] = dy^T[out, n] * x[n, in]; db = sum dy; dx[n, in] = dy * W */
            st = dg_op_gemm(ctx, e, true, false, l->out_c, l->in_c, n, 1.0f, dy, l->out_c, in,
                            l->in_c, 0.0f, param_at(t, 1, l->w_off), l->in_c);
            if (st == DG_OK)
                st = dg_op_bias_grad(ctx, e, dy, param_at(t, 1, l->b_off), n, l->out_c, 1);
            if (st == DG_OK && mask.mask.buf) {
                st = dg_op_gemm_ep(ctx, e, false, false, n, l->in_c, l->out_c, dy, l->out_c,
                                   param_at(t, 0, l->w_off), l->in_c, dx, l->in_c, &mask);
                i--; /* the ReLU's backward is done */
            } else if (st == DG_OK && dx.buf) {
                st = dg_op_gemm(ctx, e, false, false, n, l->in_c, l->out_c, 1.0f, dy, l->out_c,
                                param_at(t, 0, l->w_off), l->in_c, 0.0f, dx, l->in_c);
            }
            break;
        }
    }
    return st;
}

/* One SGD call over the whole parameter arena (gaps between tensors hold
 * zeros in all three arenas, so they stay zero). */
static dg_status update(trainer *t)
{
    return dg_op_sgd(t->ctx, t->e, param_at(t, 0, 0), param_at(t, 1, 0), param_at(t, 2, 0),
                     t->m.param_arena / sizeof(float), t->lr, t->momentum, t->wd);
}

/* The loader's slot memory from the backend's page-locked host memory. */
static dg_status slot_alloc(void *user, size_t bytes, void **p)
{
    dg_engine *e = user;
    return e->be->host_alloc(e->bctx, bytes, p);
}

static void slot_free(void *user, void *p)
{
    dg_engine *e = user;
    e->be->host_free(e->bctx, p);
}

/* Hands batch b back to loader ld once no upload still reads from it (an
 * empty b is a no-op). */
static dg_status retire_batch(trainer *t, dg_loader *ld, dg_batch *b)
{
    if (!b->x)
        return DG_OK;
    const dg_backend_iface *be = t->e->be;
    if (b->page_locked && be->host_wait(t->e->bctx, b->x) != DG_OK)
        return dg_fail(t->ctx, DG_ERR_BACKEND, "%s: waiting for the batch upload: %s", t->e->name,
                       be->last_error(t->e->bctx));
    return dg_loader_release(ld, b);
}

/* Uploads batch b (inputs and labels) from the loader's slot; one copy when
 * the labels sit at the same distance behind the inputs in the slot as in the
 * activation arena. A plain-memory slot is handed back at once (its upload
 * blocked); a page-locked one only after the next step's upload. */
static dg_status upload_batch(trainer *t, dg_loader *ld, dg_batch *b)
{
    const dg_backend_iface *be = t->e->be;
    size_t xb = (size_t)t->n * t->m.in_c * t->m.in_h * t->m.in_w * sizeof(float);
    size_t gap = t->lay.labels_off - t->lay.x_off, yb = (size_t)t->n * sizeof(int32_t);
    bool ok;
    if ((const char *)b->y - (const char *)b->x == (ptrdiff_t)gap)
        ok = be->upload(t->e->bctx, t->act->buf, t->lay.x_off, b->x, gap + yb) == DG_OK;
    else
        ok = be->upload(t->e->bctx, t->act->buf, t->lay.x_off, b->x, xb) == DG_OK &&
             be->upload(t->e->bctx, t->act->buf, t->lay.labels_off, b->y, yb) == DG_OK;
    if (!ok)
        return dg_fail(t->ctx, DG_ERR_BACKEND, "%s: copying the batch to the device: %s",
                       t->e->name, be->last_error(t->e->bctx));
    return b->page_locked ? DG_OK : dg_loader_release(ld, b);
}

/* CPU seconds of the whole process (every thread), NAN when unknown. */
static double process_cpu_s(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
        return NAN;
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Whether step g (0-based over all epochs) ends at a sync point. */
static bool sync_after(const trainer *t, int g)
{
    return (t->sync_every > 0 && (g + 1) % t->sync_every == 0) || g % t->steps == t->steps - 1;
}

/* Marks a phase boundary in the device's stream: only in a step that ends at
 * a sync point, the one whose phases the sync point reads (a mark is a
 * command on the device's queue; the steps between need none). */
static void mark(trainer *t, int slot)
{
    if (t->e->be->event_record && t->marking)
        t->e->be->event_record(t->e->bctx, slot);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
    if (!n)
        return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One pass over split sp of loader val with the current weights (eagerly, no
 * update), or max_batches batches of it when > 0; appends {epoch, loss,
 * accuracy, batches} to vals. */
static dg_status validate(trainer *t, dg_loader *val, dg_split sp, int max_batches, int epoch,
                          cJSON *vals)
{
    dg_status st = dg_loader_start(val, sp, epoch, 1, max_batches > 0 ? max_batches : 0);
    size_t nb = max_batches > 0 ? (size_t)max_batches
                                : (dg_loader_count(val, sp) + (size_t)t->n - 1) / (size_t)t->n;
    for (size_t k = 0; k < nb && st == DG_OK; k++) {
        dg_batch b; /* a plain-memory slot: upload_batch hands it back */
        if ((st = dg_loader_acquire(val, &b)) == DG_OK && (st = upload_batch(t, val, &b)) == DG_OK)
            st = forward(t);
    }
    float acc[2];
    if (st == DG_OK &&
        t->e->be->download(t->e->bctx, t->act->buf, t->lay.acc_off, acc, sizeof acc) != DG_OK)
        st = dg_fail(t->ctx, DG_ERR_BACKEND, "%s: reading the validation loss: %s", t->e->name,
                     t->e->be->last_error(t->e->bctx));
    if (st == DG_OK)
        st = dg_op_fill(t->ctx, t->e, act_at(t, t->lay.acc_off), 2, 0.0f);
    if (st != DG_OK)
        return st;
    cJSON *v = cJSON_CreateObject();
    cJSON_AddNumberToObject(v, "epoch", epoch);
    double loss = acc[0] / (double)nb;
    if (isfinite(loss))
        cJSON_AddNumberToObject(v, "loss", loss);
    else
        cJSON_AddNullToObject(v, "loss");
    cJSON_AddNumberToObject(v, "accuracy", acc[1] / ((double)nb * t->n));
    cJSON_AddNumberToObject(v, "batches", (double)nb);
    cJSON_AddItemToArray(vals, v);
    return DG_OK;
}

/* The process footprint: resident set and its peak (VmHWM). */
static void footprint(dg_metric *rss, dg_metric *hwm)
{
    double v = 0;
    *rss = (dg_metric){v, dg_proc_self_rss(&v)};
    rss->value = v;
    char *status = dg_read_file("/proc/self/status", 1u << 16, NULL);
    v = 0;
    hwm->valid = status && dg_proc_kb(status, "VmHWM", &v);
    hwm->value = v;
    dg_free(status);
}

/* One epoch's watermark entry: allocator, backend/driver and process memory,
 * whether the cache was emptied and a validation phase ran, and the epoch's
 * step times (step_s: its steps' host seconds, NULL when not timed). */
static cJSON *epoch_entry(trainer *t, int device, int ep, bool emptied, bool validated,
                          const double *step_s, int steps)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "epoch", ep);
    dg_alloc_stats as;
    dg_alloc_get_stats(t->e->alloc, &as);
    cJSON_AddItemToObject(o, "allocated", dg_json_metric((double)as.allocated, true, "bytes"));
    cJSON_AddItemToObject(o, "reserved", dg_json_metric((double)as.reserved, true, "bytes"));
    dg_device_info info;
    bool dev = t->e->be->device_info(t->e->bctx, device, &info) == DG_OK && info.mem_total.valid &&
               info.mem_free.valid;
    cJSON_AddItemToObject(
        o, "driver_used",
        dg_json_metric(dev ? info.mem_total.value - info.mem_free.value : 0, dev, "bytes"));
    dg_metric rss, hwm;
    footprint(&rss, &hwm);
    cJSON_AddItemToObject(o, "rss", dg_json_metric(rss.value, rss.valid, "bytes"));
    cJSON_AddItemToObject(o, "rss_peak", dg_json_metric(hwm.value, hwm.valid, "bytes"));
    cJSON_AddBoolToObject(o, "cache_emptied", emptied);
    cJSON_AddBoolToObject(o, "validation", validated);
    double med = NAN, sum = 0;
    if (step_s && steps > 0) {
        double *tmp = dg_malloc((size_t)steps * sizeof *tmp);
        if (tmp) {
            for (int i = 0; i < steps; i++)
                sum += (tmp[i] = step_s[i] * 1e3);
            med = median(tmp, (size_t)steps);
            dg_free(tmp);
        }
    }
    cJSON_AddItemToObject(o, "step_ms", dg_json_metric(med, isfinite(med), "ms"));
    bool rate = isfinite(med) && sum > 0;
    cJSON_AddItemToObject(
        o, "samples_per_s",
        dg_json_metric(rate ? steps * (double)t->n / (sum / 1e3) : 0, rate, "samples/s"));
    return o;
}

/* ---- the run, one function per phase ---------------------------------------
 * trainer_open (options, model, data source, engine: a failure here has no
 * record), trainer_prepare (loaders, buffers, initial parameters, export),
 * trainer_plan_capture, then per step trainer_step, at each sync point
 * trainer_sync and at each epoch end trainer_epoch_end, and last
 * trainer_record (the record, whatever stopped the run) and trainer_close. */

/* Validates the options and opens what a record needs: model, data source,
 * engine. Nothing is left open on failure. */
static dg_status trainer_open(trainer *t, dg_ctx *ctx, const dg_train_opts *o,
                              const dg_train_ext *x)
{
    t->ctx = ctx;
    t->o = o;
    t->x = x;
    if (x->leak_per_step > ((size_t)1 << 40) || x->val_steps < 0 || x->profile_warmup < 0)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "train: leak per step, validation steps and profile warm-up "
                       "must be non-negative (leak at most 1 TiB)");
    t->backend = o->backend ? o->backend : "cpu";
    t->n = o->batch ? o->batch : 64;
    t->steps = o->steps ? o->steps : 100;
    t->epochs = o->epochs ? o->epochs : 1;
    t->sync_every = o->sync_every;
    t->lr = o->lr >= 0 ? o->lr : 0.01f;
    t->momentum = o->momentum >= 0 ? o->momentum : 0.9f;
    t->wd = o->weight_decay >= 0 ? o->weight_decay : 0.0f;
    if (t->n < 1 || t->n > (1 << 20) || t->steps < 1 || t->epochs < 1 || t->sync_every < 0 ||
        !isfinite(t->lr) || !isfinite(t->momentum) || !isfinite(t->wd))
        return dg_fail(ctx, DG_ERR_USAGE,
                       "train: batch, steps and epochs must be positive, "
                       "sync-every non-negative, rates finite");
    dg_status st =
        dg_model_parse(ctx, o->model ? o->model : "mlp", o->in_c, o->in_h, o->in_w, &t->m);
    if (st != DG_OK)
        return st;
    dg_engine_opts eo = {
        .device = o->device, .mem_budget = o->mem_budget, .threads = o->threads, .math = o->math};
    if (o->disable_ops &&
        (st = dg_parse_disabled_ops(ctx, o->disable_ops, t->backend, &eo.disabled_calls)))
        return st;
    size_t samples = o->samples;
    if (!samples) {
        samples = (size_t)t->steps * t->n;
        if (samples > DG_SYNTH_SAMPLES_CAP)
            samples = DG_SYNTH_SAMPLES_CAP;
        if (samples < (size_t)t->n)
            samples = (size_t)t->n;
    }
    /* Bad data options and unreadable data end the run before it has a record. */
    t->w_begin = dg_now();
    t->w_data = t->w_engine = t->w_prepare = NAN;
    if ((st = dg_train_open_data(ctx, o, &t->m, t->n, samples, &t->src, &t->lo)) != DG_OK) {
        dg_source_close(t->src);
        t->src = NULL;
        return st;
    }
    t->w_data = dg_now() - t->w_begin;
    if ((st = dg_engine_open(ctx, t->backend, &eo, &t->e)) != DG_OK) {
        dg_source_close(t->src);
        t->src = NULL;
        return st;
    }
    t->w_engine = dg_now() - t->w_begin - t->w_data;
    dg_model_layout(&t->m, t->e, t->n, &t->lay);
    /* The first steps pay for first-use costs (kernel builds, library set-up,
     * the capture): they run but are not timed. */
    t->total = t->steps * t->epochs;
    t->warmup = t->total > 2 ? 2 : t->total - 1;
    /* A profile's window starts after its own warm-up: the timed steps are its steps. */
    if (x->profile_warmup > 0 && x->profile_warmup < t->total)
        t->warmup = x->profile_warmup;
    t->finite = true;
    t->enq_step = t->waits_step = NAN;
    return DG_OK;
}

/* Loaders, host and device buffers, the initial parameters on the device,
 * the export when asked for. */
static dg_status trainer_prepare(trainer *t)
{
    dg_ctx *ctx = t->ctx;
    const dg_train_opts *o = t->o;
    const dg_train_ext *x = t->x;
    dg_engine *e = t->e;
    dg_status st;
    /* The training loader's slots are the upload buffers: page-locked where
     * the backend has such memory (a slot it refuses is plain memory). */
    if (e->be->host_alloc && e->be->host_free && e->be->host_wait) {
        t->lo.slot_mem = (dg_loader_mem){slot_alloc, slot_free, e};
        /* The batch in flight stays held while the next is taken (inline too). */
        if (t->lo.hold < 2)
            t->lo.hold = 2;
    }
    if ((st = dg_loader_new(ctx, t->src, &t->lo, &t->data)) != DG_OK)
        return st;
    if (o->val_split > 0) {
        dg_loader_opts vo = dg_train_inline_opts(&t->lo, t->data);
        if ((st = dg_loader_new(ctx, t->src, &vo, &t->val)) != DG_OK)
            return st;
    } else if (x->val_steps > 0) {
        /* Validation steps without a split: forward passes over training
         * batches, not augmented. */
        dg_loader_opts vo = dg_train_inline_opts(&t->lo, t->data);
        vo.crop = vo.flip = false;
        if ((st = dg_loader_new(ctx, t->src, &vo, &t->vtrain)) != DG_OK)
            return st;
    }
    if ((x->step_times || x->epoch_watermarks) &&
        !(t->step_s = dg_calloc((size_t)t->total, sizeof *t->step_s)))
        return dg_fail(ctx, DG_ERR_NOMEM, "train: out of host memory");
    if (x->leak_per_step && !(t->leaks = dg_calloc((size_t)t->total, sizeof *t->leaks)))
        return dg_fail(ctx, DG_ERR_NOMEM, "train: out of host memory");
    if (x->epoch_watermarks)
        t->epochs_j = cJSON_CreateArray();
    t->init = dg_malloc(t->m.param_arena);
    if (!t->init)
        return dg_fail(ctx, DG_ERR_NOMEM, "train: out of host memory");
    if ((st = dg_alloc(ctx, e->alloc, 3 * t->m.param_arena, &t->params)) != DG_OK ||
        (st = dg_alloc(ctx, e->alloc, t->lay.bytes, &t->act)) != DG_OK)
        return st;
    dg_model_init_params(&t->m, o->seed, t->init);
    if (o->export_dir) {
        dg_loader_opts xo = dg_train_inline_opts(&t->lo, t->data);
        dg_loader *ex = NULL;
        if ((st = dg_loader_new(ctx, t->src, &xo, &ex)) == DG_OK)
            st = dg_train_export_run(t, ex, o, t->epochs, t->steps, t->init, t->spec);
        dg_loader_free(ex);
        if (st != DG_OK)
            return st;
    }
    if ((st = dg_loader_start(t->data, DG_SPLIT_TRAIN, 0, t->epochs, t->steps)) != DG_OK)
        return st;
    if (e->be->upload(e->bctx, t->params->buf, 0, t->init, t->m.param_arena) != DG_OK)
        return dg_fail(ctx, DG_ERR_BACKEND, "%s: uploading parameters: %s", t->backend,
                       e->be->last_error(e->bctx));
    if ((st = dg_op_fill(ctx, e, param_at(t, 1, 0), 2 * t->m.param_arena / sizeof(float), 0.0f)) ||
        (st = dg_op_fill(ctx, e, act_at(t, t->lay.acc_off), 2, 0.0f)))
        return st;
    return DG_OK;
}

/* Whether the step can be captured as a graph, and if not, why. */
static void trainer_plan_capture(trainer *t)
{
    const dg_backend_iface *be = t->e->be;
    t->can_capture = !t->o->no_capture && be->caps.graph_capture && be->capture_begin &&
                     be->capture_end && be->replay;
    if (!t->o->no_capture && !t->can_capture)
        t->capture_note = "backend has no step capture";
    for (int i = 0; i < DG_OP__COUNT && t->can_capture; i++)
        if (!dg_engine_native(t->e, (dg_op)i) && i != DG_OP_FILL) {
            t->can_capture = false;
            t->capture_note = "an op falls back to the cpu (fallbacks synchronise)";
        }
    if (t->x->profile_ops && t->can_capture) {
        /* Timing every op needs each op run eagerly. */
        t->can_capture = false;
        t->capture_note = "op profiling times every op eagerly";
    }
}

static dg_status eager_step(trainer *t, bool marks)
{
    dg_status st = forward(t);
    if (st != DG_OK)
        return st;
    if (marks)
        mark(t, EV_FWD);
    if ((st = backward(t)) != DG_OK)
        return st;
    if (marks)
        mark(t, EV_BWD);
    return update(t);
}

/* The device's energy source: NVML on an NVIDIA device, the host's counter
 * (RAPL) for a device that computes in host memory, none otherwise. */
static void energy_open(trainer *t)
{
    dg_device_info info;
    const dg_backend_iface *be = t->e->be;
    if (t->health || be->device_info(t->e->bctx, t->o->device, &info) != DG_OK)
        return;
    if (be->caps.nvml || be->caps.host || info.host_memory)
        t->health = dg_health_open(&info, be->caps.nvml, NULL);
}

/* Step g (0-based over all epochs): the batch, then forward, backward and
 * update (eagerly, captured at step 1, or replayed), and the leak on demand.
 * *tw gets the step's start on the host clock. */
static dg_status trainer_step(trainer *t, int g, double *tw)
{
    dg_ctx *ctx = t->ctx;
    dg_engine *e = t->e;
    dg_status st;
    if (t->o->cancel && *t->o->cancel)
        return dg_fail(ctx, DG_ERR_INTERRUPTED, "train: interrupted at step %d of %d", g, t->total);
    dg_cpu_team_step(&e->team);
    if (g == t->warmup) {
        if ((st = e->be->synchronize(e->bctx)) != DG_OK)
            return st;
        dg_cpu_team_mark(&e->team);
        energy_open(t);
        /* The energy counter is read outside the timed wall: NVML's reads
         * (and the host's files) take milliseconds, as long as a small step. */
        dg_health_read(t->health, dg_now(), NULL, &t->energy[0]);
        t->t0 = dg_now();
        t->cpu0 = process_cpu_s();
        t->counted = dg_engine_queue_counts(e, &t->enq0, &t->waits0);
    }
    if (t->x->profile_ops && g == t->x->profile_warmup)
        dg_engine_set_profiling(e, true);
    *tw = dg_now();
    t->marking = sync_after(t, g);
    dg_batch b;
    if ((st = dg_loader_acquire(t->data, &b)) != DG_OK)
        return st;
    if (g >= t->warmup)
        t->data_wait += dg_now() - *tw;
    mark(t, EV_START);
    if ((st = upload_batch(t, t->data, &b)) != DG_OK)
        return st; /* b stays held: the loader's free waits for its upload */
    mark(t, EV_H2D);
    if (t->captured) {
        if (e->be->replay(e->bctx) != DG_OK)
            st = dg_fail(ctx, DG_ERR_BACKEND, "%s: replaying the step: %s", t->backend,
                         e->be->last_error(e->bctx));
    } else if (t->can_capture && g == 1) {
        /* Step 0 ran eagerly and proved the ops; capture step 1 and run it. */
        bool ok = e->be->capture_begin(e->bctx) == DG_OK;
        dg_status cst = ok ? forward(t) : DG_OK;
        if (ok && cst == DG_OK)
            cst = backward(t);
        if (ok && cst == DG_OK)
            cst = update(t);
        ok = e->be->capture_end(e->bctx) == DG_OK && ok && cst == DG_OK;
        if (ok && e->be->replay(e->bctx) == DG_OK) {
            t->captured = true;
        } else {
            t->capture_note = "capture failed; ran eagerly";
            t->can_capture = false;
            st = eager_step(t, false);
        }
    } else {
        st = eager_step(t, true);
    }
    if (st == DG_OK)
        mark(t, EV_UPDATE);
    /* The batch before finished its upload before this step's compute began;
     * waiting for it here leaves this step's upload travelling. */
    dg_status rst = retire_batch(t, t->data, &t->inflight);
    t->inflight = b;
    if (st == DG_OK)
        st = rst;
    if (st != DG_OK)
        return st;
    if (t->leaks) {
        /* Retained references on demand: the allocator counts them. */
        if ((st = dg_alloc(ctx, e->alloc, t->x->leak_per_step, &t->leaks[t->nleaks])) != DG_OK)
            return st;
        t->nleaks++;
    }
    t->since_sync++;
    return DG_OK;
}

/* Sync point after step g of epoch ep: the loss read back, the step's phases
 * from device events, the loss entry, the accumulator reset. */
static dg_status trainer_sync(trainer *t, int g, int ep)
{
    dg_ctx *ctx = t->ctx;
    dg_engine *e = t->e;
    float acc[2];
    if (e->be->download(e->bctx, t->act->buf, t->lay.acc_off, acc, sizeof acc) != DG_OK)
        return dg_fail(ctx, DG_ERR_BACKEND, "%s: reading the loss: %s", t->backend,
                       e->be->last_error(e->bctx));
    t->syncs++;
    if (g >= t->warmup && e->be->caps.event_timing && e->be->event_elapsed && t->phase_n < 256) {
        /* The phases of the step just finished, from device events. */
        double ms[PH_COUNT];
        bool ok = e->be->event_elapsed(e->bctx, EV_START, EV_H2D, &ms[PH_H2D]) == DG_OK;
        if (!t->captured) {
            ok = ok && e->be->event_elapsed(e->bctx, EV_H2D, EV_FWD, &ms[PH_FWD]) == DG_OK;
            ok = ok && e->be->event_elapsed(e->bctx, EV_FWD, EV_BWD, &ms[PH_BWD]) == DG_OK;
            ok = ok && e->be->event_elapsed(e->bctx, EV_BWD, EV_UPDATE, &ms[PH_UPDATE]) == DG_OK;
        } else {
            ok = ok && e->be->event_elapsed(e->bctx, EV_H2D, EV_UPDATE, &ms[PH_FWD]) == DG_OK;
            ms[PH_BWD] = ms[PH_UPDATE] = NAN;
        }
        if (ok) {
            for (int p = 0; p < PH_COUNT; p++)
                t->phase_ms[p][t->phase_n] = ms[p];
            t->phase_n++;
        }
    }
    double loss = acc[0] / t->since_sync, accuracy = acc[1] / ((double)t->since_sync * t->n);
    t->finite = t->finite && isfinite(loss);
    cJSON *pt = cJSON_CreateObject();
    cJSON_AddNumberToObject(pt, "epoch", ep);
    cJSON_AddNumberToObject(pt, "step", g + 1);
    cJSON_AddNumberToObject(pt, "steps_averaged", t->since_sync);
    if (isfinite(loss))
        cJSON_AddNumberToObject(pt, "loss", loss);
    else
        cJSON_AddNullToObject(pt, "loss");
    cJSON_AddNumberToObject(pt, "accuracy", accuracy);
    cJSON_AddItemToArray(t->losses, pt);
    t->since_sync = 0;
    return dg_op_fill(ctx, e, act_at(t, t->lay.acc_off), 2, 0.0f);
}

/* End of epoch ep (after its last step g): validation, then the allocator
 * discipline and the watermark; their time is kept out of the timed wall. */
static dg_status trainer_epoch_end(trainer *t, int g, int ep)
{
    const dg_train_ext *x = t->x;
    dg_engine *e = t->e;
    dg_status st;
    bool validated = false;
    if (t->val || t->vtrain) {
        double tv = dg_now();
        if (!t->vals)
            t->vals = cJSON_CreateArray();
        st = validate(t, t->val ? t->val : t->vtrain, t->val ? DG_SPLIT_VAL : DG_SPLIT_TRAIN,
                      x->val_steps, ep, t->vals);
        if (g >= t->warmup)
            t->val_time += dg_now() - tv;
        if (st != DG_OK)
            return st;
        validated = true;
    }
    if (x->epoch_watermarks || x->empty_cache_epoch) {
        double tv = dg_now();
        if (x->empty_cache_epoch) {
            if ((st = e->be->synchronize(e->bctx)) != DG_OK)
                return st;
            dg_empty_cache(e->alloc);
        }
        if (t->epochs_j)
            cJSON_AddItemToArray(t->epochs_j,
                                 epoch_entry(t, t->o->device, ep, x->empty_cache_epoch, validated,
                                             t->step_s ? t->step_s + (size_t)ep * t->steps : NULL,
                                             t->steps));
        if (g >= t->warmup)
            t->val_time += dg_now() - tv;
    }
    return DG_OK;
}

/* Epoch ep ended at step g: the caller's progress callback, if any, with
 * the rate over the run so far and the ETA of the epochs left. */
static void report_epoch(const trainer *t, int g, int ep)
{
    if (!t->o->progress)
        return;
    double el = dg_now() - t->t_start, per = el / (ep + 1);
    char detail[64] = "";
    if (el > 0)
        snprintf(detail, sizeof detail, "%.0f samples/s",
                 (double)(g + 1) * (t->o->batch > 0 ? t->o->batch : 64) / el);
    t->o->progress(t->o->progress_user, &(dg_progress){.kind = DG_PROGRESS_EPOCH,
                                                       .detail = detail[0] ? detail : NULL,
                                                       .epoch = ep,
                                                       .steps = g + 1,
                                                       .elapsed_s = el,
                                                       .eta_s = per * (t->epochs - ep - 1)});
}

/* Every step of every epoch, with sync points and epoch ends. */
static dg_status trainer_loop(trainer *t)
{
    dg_status st = DG_OK;
    if (t->x->sample_ms > 0)
        t->sampler = dg_sampler_start(t->e->be, t->e->bctx, t->x->sample_ms);
    t->losses = cJSON_CreateArray();
    t->t_start = dg_now();
    for (int g = 0; g < t->total; g++) {
        int ep = g / t->steps, s = g % t->steps;
        double tw = 0;
        if (s == 0 && t->x->lock_epochs) {
            /* Other devgate measurements wait between our epochs, never in one;
             * the wait is not training time. */
            double tl = dg_now();
            dg_measure_lock(&t->mlock, 600, t->o->cancel);
            t->lock_waited += t->mlock.waited_s;
            if (g >= t->warmup)
                t->val_time += dg_now() - tl;
        }
        if ((st = trainer_step(t, g, &tw)) != DG_OK)
            break;
        bool sync = sync_after(t, g);
        if (sync && (st = trainer_sync(t, g, ep)) != DG_OK)
            break;
        if (t->step_s) {
            t->step_s[g] = dg_now() - tw;
            t->nstep = g + 1;
        }
        if (!sync)
            continue;
        if (s == t->steps - 1) {
            double c0 = process_cpu_s();
            report_epoch(t, g, ep);
            st = trainer_epoch_end(t, g, ep);
            if (g >= t->warmup)
                t->val_cpu += process_cpu_s() - c0;
            if (st != DG_OK)
                break;
            if (t->x->lock_epochs) {
                dg_measure_unlock(&t->mlock);
                cJSON *last = t->epochs_j ? cJSON_GetArrayItem(t->epochs_j, ep) : NULL;
                if (last)
                    cJSON_AddItemToObject(last, "lock", dg_measure_lock_json(&t->mlock));
            }
        }
        if (g + 1 == t->total && g >= t->warmup) {
            t->wall = dg_now() - t->t0 - t->val_time;
            t->cpu = process_cpu_s() - t->cpu0 - t->val_cpu;
            dg_health_read(t->health, dg_now(), &t->energy[0], &t->energy[1]);
            t->timed_steps = t->total - t->warmup;
            uint64_t enq = 0, waits = 0;
            if (t->counted && dg_engine_queue_counts(t->e, &enq, &waits)) {
                t->enq_step = (double)(enq - t->enq0) / t->timed_steps;
                t->waits_step = (double)(waits - t->waits0) / t->timed_steps;
            }
        }
    }
    dg_measure_unlock(&t->mlock); /* an epoch cut short by an error */
    return st;
}

/* Releases everything the run holds; the engine last. */
static void trainer_close(trainer *t)
{
    cJSON_Delete(t->rec);
    cJSON_Delete(t->spec);
    cJSON_Delete(t->losses);
    cJSON_Delete(t->vals);
    cJSON_Delete(t->epochs_j);
    dg_sampler_free(t->sampler);
    dg_health_close(t->health);
    for (size_t i = 0; i < t->nleaks; i++)
        dg_release(t->e->alloc, t->leaks[i]);
    dg_free(t->leaks);
    dg_free(t->step_s);
    dg_loader_free(t->vtrain);
    if (t->e) {
        dg_release(t->e->alloc, t->params);
        dg_release(t->e->alloc, t->act);
    }
    dg_free(t->init);
    dg_loader_free(t->val);
    dg_loader_free(t->data);
    dg_source_close(t->src);
    dg_engine_close(t->e);
}

dg_status dg_train_run(dg_ctx *ctx, const dg_train_opts *o, char **json)
{
    return dg_train_run_ext(ctx, o, NULL, json);
}

dg_status dg_train_run_ext(dg_ctx *ctx, const dg_train_opts *o, const dg_train_ext *ext,
                           char **json)
{
    *json = NULL;
    if (dg_train_opts_check(ctx, o) != DG_OK)
        return DG_ERR_USAGE;
    /* The public options can ask for the sampler too (devgate train --sample-ms). */
    dg_train_ext plain = {.sample_ms = o->sample_ms};
    if (ext && ext->sample_ms <= 0 && o->sample_ms > 0) {
        plain = *ext;
        plain.sample_ms = o->sample_ms;
        ext = NULL;
    }
    trainer *t = dg_calloc(1, sizeof *t);
    if (!t)
        return dg_fail(ctx, DG_ERR_NOMEM, "train: out of host memory");
    t->ext = ext;
    dg_status st = trainer_open(t, ctx, o, ext ? ext : &plain);
    if (st != DG_OK) {
        dg_free(t);
        return st;
    }
    t->rec = cJSON_CreateObject();
    dg_train_opts ran = dg_train_resolved_opts(o, t->backend, t->n, t->steps, t->epochs,
                                               t->sync_every, t->lr, t->momentum, t->wd);
    t->spec = dg_spec_json(&ran);
    dg_spec_hash(ctx, &ran, t->spec_id);
    double tp = dg_now();
    if ((st = trainer_prepare(t)) == DG_OK) {
        t->w_prepare = dg_now() - tp;
        trainer_plan_capture(t);
        st = trainer_loop(t);
    }
    dg_sampler_stop(t->sampler);
    if (st == DG_OK && t->x->params_out)
        st = dg_train_write_params(t, t->x->params_out);
    *json = dg_json_print(dg_train_record(t, st));
    trainer_close(t);
    dg_free(t);
    if (!*json)
        return dg_fail(ctx, DG_ERR_NOMEM, "train: out of memory printing the record");
    return st;
}
