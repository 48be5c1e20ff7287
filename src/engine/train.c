/* The training loop of the fixture: seeded model, batches from the loader
 * (docs/data.md), forward, loss, backward and SGD on one backend, the loss read back only at sync
 * points, phases timed with device events, and on backends that can, the whole step captured once
 * as a device graph and replayed. */
#include "engine/train.h"
#include "core/record.h"
#include "data/loader.h"
#include "engine/model.h"
#include "engine/spec.h"
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

int dg_train_workers_for(int requested, int threads)
{
    if (requested < 0)
        return 0;
    if (requested > 0)
        return requested;
    int half = threads / 2;
    return half < 2 ? 2 : half > 8 ? 8 : half;
}

int dg_train_workers(int requested)
{
    return dg_train_workers_for(requested, dg_cpu_topo_get()->threads);
}

enum { EV_START, EV_H2D, EV_FWD, EV_BWD, EV_UPDATE };
enum { PH_H2D, PH_FWD, PH_BWD, PH_UPDATE, PH_COUNT };
static const char *const phase_names[PH_COUNT] = {"h2d", "forward", "backward", "update"};
/* Loader opts of a second, inline loader that makes the same batches (the
 * export and the validation passes): normalisation fixed to the first's. */
static dg_loader_opts inline_opts(const dg_loader_opts *lo, const dg_loader *ld)
{
    dg_loader_opts v = *lo;
    v.workers = 0;
    v.prefetch = 0;
    v.hold = 1;
    v.slot_mem = (dg_loader_mem){0}; /* its uploads block: plain memory serves */
    v.cache = false;
    if (v.norm != DG_NORM_NONE) {
        v.norm = DG_NORM_GIVEN;
        v.norm_count = v.channels;
        dg_loader_norm(ld, v.mean, v.std);
    }
    return v;
}

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
    bool finite;
    double t0, wall, val_time, data_wait;
    dg_mlock mlock; /* lock_epochs: the epoch's hold of the measurement lock */
    double lock_waited;
    double cpu0, cpu, val_cpu; /* process CPU seconds: at t0, over the timed steps, at epoch ends */
    cJSON *rec, *spec, *losses, *vals, *epochs_j;
    char spec_id[65]; /* dg_spec_hash of the spec */
} trainer;

static dg_ref act_at(const trainer *t, size_t off)
{
    return (dg_ref){t->act->buf, off};
}

static dg_ref param_at(const trainer *t, int arena, size_t off)
{
    return (dg_ref){t->params->buf, (size_t)arena * t->m.param_arena + off};
}

static const dg_ref absent = {NULL, 0};

/* Forward through every layer, then the loss (which also seeds the backward). */
static dg_status forward(trainer *t)
{
    dg_ctx *ctx = t->ctx;
    dg_engine *e = t->e;
    dg_status st = DG_OK;
    int n = t->n;
    for (int i = 0; i < t->m.nlayers && st == DG_OK; i++) {
        const dg_layer *l = &t->m.L[i];
        dg_ref in = i == 0 ? act_at(t, t->lay.x_off) : act_at(t, t->m.L[i - 1].y_off);
        dg_ref y = act_at(t, l->y_off);
        switch (l->kind) {
        case DG_L_CONV:
            st = dg_op_conv2d_fwd(ctx, e, &l->conv, in, param_at(t, 0, l->w_off),
                                  param_at(t, 0, l->b_off), y, act_at(t, t->lay.work_off));
            break;
        case DG_L_RELU:
            st = dg_op_relu_fwd(ctx, e, in, y, (size_t)n * l->out_c * l->out_h * l->out_w);
            break;
        case DG_L_POOL:
            st = dg_op_maxpool_fwd(ctx, e, &l->pool, in, y, act_at(t, l->argmax_off));
            break;
        case DG_L_FC:
            /* y[n, out] = x[n, in] * W[out, in]^T + b */
            st = dg_op_gemm(ctx, e, false, true, n, l->out_c, l->in_c, 1.0f, in, l->in_c,
                            param_at(t, 0, l->w_off), l->in_c, 0.0f, y, l->out_c);
            if (st == DG_OK)
                st = dg_op_bias_add(ctx, e, y, param_at(t, 0, l->b_off), n, l->out_c, 1);
            break;
        }
    }
    if (st != DG_OK)
        return st;
    const dg_layer *last = &t->m.L[t->m.nlayers - 1];
    return dg_op_xent(ctx, e, n, t->m.classes, act_at(t, last->y_off), act_at(t, t->lay.labels_off),
                      act_at(t, last->dy_off), act_at(t, t->lay.acc_off));
}

static dg_status backward(trainer *t)
{
    dg_ctx *ctx = t->ctx;
    dg_engine *e = t->e;
    dg_status st = DG_OK;
    int n = t->n;
    for (int i = t->m.nlayers - 1; i >= 0 && st == DG_OK; i--) {
        const dg_layer *l = &t->m.L[i];
        dg_ref in = i == 0 ? act_at(t, t->lay.x_off) : act_at(t, t->m.L[i - 1].y_off);
        dg_ref dx = i == 0 ? absent : act_at(t, t->m.L[i - 1].dy_off);
        dg_ref dy = act_at(t, l->dy_off);
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
            if (st == DG_OK && dx.buf)
                st = dg_op_gemm(ctx, e, false, false, n, l->in_c, l->out_c, 1.0f, dy, l->out_c,
                                param_at(t, 0, l->w_off), l->in_c, 0.0f, dx, l->in_c);
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

static void mark(trainer *t, int slot)
{
    if (t->e->be->event_record)
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

/* Writes the initial parameters, the manifest and every batch under dir, for
 * the golden-trajectory script (tests/golden/). */
static dg_status export_run(trainer *t, dg_loader *data, const dg_train_opts *o, int epochs,
                            int steps, const float *init, cJSON *spec)
{
    dg_status st = dg_loader_start(data, DG_SPLIT_TRAIN, 0, epochs, steps);
    if (st != DG_OK)
        return st;
    const char *dir = o->export_dir;
    size_t xb = (size_t)t->n * t->m.in_c * t->m.in_h * t->m.in_w * sizeof(float);
    if ((double)xb * steps * epochs > 256.0 * 1048576)
        return dg_fail(t->ctx, DG_ERR_USAGE, "--export: %d batches of %zu bytes exceed 256 MiB",
                       steps * epochs, xb);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return dg_fail(t->ctx, DG_ERR_IO, "--export: cannot create %s: %s", dir, strerror(errno));
    char path[4096];
    FILE *f;
    snprintf(path, sizeof path, "%s/params.f32", dir);
    f = fopen(path, "wb");
    bool ok = f && fwrite(init, 1, t->m.param_arena, f) == t->m.param_arena;
    ok = (f && fclose(f) == 0) && ok;
    if (!ok)
        return dg_fail(t->ctx, DG_ERR_IO, "--export: writing %s failed", path);
    snprintf(path, sizeof path, "%s/batches.bin", dir);
    if (!(f = fopen(path, "wb")))
        return dg_fail(t->ctx, DG_ERR_IO, "--export: cannot write %s: %s", path, strerror(errno));
    for (int ep = 0; ep < epochs; ep++)
        for (int s = 0; s < steps; s++) {
            dg_batch b;
            if ((st = dg_loader_acquire(data, &b)) != DG_OK) {
                fclose(f);
                return st;
            }
            ok &= fwrite(b.x, 1, xb, f) == xb;
            ok &= fwrite(b.y, 4, (size_t)t->n, f) == (size_t)t->n;
            if ((st = dg_loader_release(data, &b)) != DG_OK) {
                fclose(f);
                return st;
            }
        }
    ok &= fclose(f) == 0;
    if (!ok)
        return dg_fail(t->ctx, DG_ERR_IO, "--export: writing %s failed", path);
    cJSON *man = cJSON_CreateObject();
    cJSON_AddItemToObject(man, "spec", cJSON_Duplicate(spec, true));
    cJSON_AddItemToObject(man, "model", dg_model_json(&t->m));
    char *text = cJSON_Print(man);
    cJSON_Delete(man);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    f = text ? fopen(path, "w") : NULL;
    ok = f && fputs(text, f) >= 0;
    ok = (f && fclose(f) == 0) && ok;
    cJSON_free(text);
    return ok ? DG_OK : dg_fail(t->ctx, DG_ERR_IO, "--export: writing %s failed", path);
}

/* The options with the library's defaults filled in: what the record's spec
 * (the codec in engine/spec.c) says ran. */
static dg_train_opts resolved_opts(const dg_train_opts *o, const char *backend, int batch,
                                   int steps, int epochs, int sync_every, float lr, float mom,
                                   float wd)
{
    dg_train_opts r = *o;
    r.backend = backend, r.batch = batch, r.steps = steps, r.epochs = epochs;
    r.sync_every = sync_every, r.lr = lr, r.momentum = mom, r.weight_decay = wd;
    return r;
}

/* Fills the loader options from o for model m (nothing opened); the bucket
 * resolution is the model input (models have fixed input sizes). */
static dg_status data_opts(dg_ctx *ctx, const dg_train_opts *o, const dg_model *m, int batch,
                           dg_loader_opts *lo)
{
    const char *spec = o->data ? o->data : "synthetic";
    bool synthetic = strcmp(spec, "synthetic") == 0;
    dg_status st = dg_source_spec_check(ctx, spec);
    if (st != DG_OK)
        return st;
    if (o->samples && !synthetic)
        return dg_fail(ctx, DG_ERR_USAGE, "--samples applies to the synthetic source only");
    if (!(o->val_split >= 0 && o->val_split < 1))
        return dg_fail(ctx, DG_ERR_USAGE, "--val-split wants a share in [0, 1), got %g",
                       o->val_split);
    if (!isfinite(o->max_bad_share) || o->max_bad_share > 1)
        return dg_fail(ctx, DG_ERR_USAGE, "--max-bad-share wants a share in [0, 1]");
    *lo = (dg_loader_opts){.batch = batch, .math = o->math};
    lo->channels = m->in_c;
    if (o->resolution) {
        if ((st = dg_loader_parse_resolution(ctx, o->resolution, lo)) != DG_OK)
            return st;
        if (lo->nres > 1 || lo->res[0].h != m->in_h || lo->res[0].w != m->in_w)
            return dg_fail(
                ctx, DG_ERR_USAGE,
                "--resolution %s differs from the model input %dx%d; the fixture's "
                "models have fixed input sizes (data of another size is resized to the input)",
                o->resolution, m->in_h, m->in_w);
    }
    lo->nres = 1;
    lo->res[0] = (dg_resolution){m->in_h, m->in_w, 1.0};
    if (o->augment && (st = dg_loader_parse_augment(ctx, o->augment, lo)) != DG_OK)
        return st;
    if (o->normalize && (st = dg_loader_parse_normalize(ctx, o->normalize, lo)) != DG_OK)
        return st;
    if (lo->norm == DG_NORM_GIVEN && lo->norm_count != 1 && lo->norm_count != m->in_c)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "--normalize gives %d values per list, the model has %d channel%s",
                       lo->norm_count, m->in_c, m->in_c > 1 ? "s" : "");
    lo->workers = dg_train_workers(o->workers);
    lo->prefetch = o->prefetch;
    lo->cache = o->cache;
    lo->val_split = o->val_split;
    lo->on_bad_fail = o->on_bad_fail;
    lo->max_bad_share = o->max_bad_share == 0 ? 0.01 : o->max_bad_share < 0 ? 0 : o->max_bad_share;
    lo->seed = o->seed;
    return DG_OK;
}

/* Opens the data source for the model and fills the loader options. */
static dg_status open_data(dg_ctx *ctx, const dg_train_opts *o, const dg_model *m, int batch,
                           size_t samples, dg_source **src, dg_loader_opts *lo)
{
    dg_status st = data_opts(ctx, o, m, batch, lo);
    if (st != DG_OK)
        return st;
    dg_source_opts so = {.channels = m->in_c,
                         .seed = o->seed,
                         .samples = samples,
                         .classes = m->classes,
                         .height = m->in_h,
                         .width = m->in_w};
    if ((st = dg_source_open(ctx, o->data ? o->data : "synthetic", &so, src)) != DG_OK)
        return st;
    int classes = dg_source_classes(*src);
    if (classes > m->classes)
        return dg_fail(ctx, DG_ERR_USAGE, "the data set has %d classes, the model %s only %d",
                       classes, m->name, m->classes);
    return DG_OK;
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

/* Downloads the parameter arena and writes it as raw float32 to path. */
static dg_status write_params(trainer *t, const char *path)
{
    float *p = dg_malloc(t->m.param_arena);
    if (!p)
        return dg_fail(t->ctx, DG_ERR_NOMEM, "train: out of host memory for the parameters");
    if (t->e->be->download(t->e->bctx, t->params->buf, 0, p, t->m.param_arena) != DG_OK) {
        dg_free(p);
        return dg_fail(t->ctx, DG_ERR_BACKEND, "%s: reading the parameters back: %s", t->e->name,
                       t->e->be->last_error(t->e->bctx));
    }
    FILE *f = fopen(path, "wb");
    int err = f ? 0 : errno;
    bool ok = f && fwrite(p, 1, t->m.param_arena, f) == t->m.param_arena;
    if (f && !ok)
        err = errno;
    if (f && fclose(f) != 0 && ok) {
        ok = false;
        err = errno;
    }
    dg_free(p);
    return ok ? DG_OK
              : dg_fail(t->ctx, DG_ERR_IO, "train: writing the parameters to %s failed: %s", path,
                        err ? strerror(err) : "short write");
}

/* ---- the run, one function per phase ---------------------------------------
 * trainer_open (options, model, data source, engine: a failure here has no
 * record), trainer_prepare (loaders, buffers, initial parameters, export),
 * trainer_plan_capture, then per step trainer_step, at each sync point
 * trainer_sync and at each epoch end trainer_epoch_end, and last
 * trainer_record (the record, whatever stopped the run) and trainer_close. */

dg_status dg_train_opts_inputs_check(dg_ctx *ctx, const dg_train_opts *o, const char *model)
{
    if (dg_train_opts_check(ctx, o) != DG_OK)
        return DG_ERR_USAGE;
    if (o->backend && dg_backend_index(o->backend) < 0)
        return dg_fail(ctx, DG_ERR_USAGE, "unknown backend '%.64s' (known: %s)", o->backend,
                       dg_backend_known());
    if (dg_disable_ops_check(ctx, o->disable_ops) != DG_OK)
        return DG_ERR_USAGE;
    dg_model *m = dg_calloc(1, sizeof *m);
    if (!m)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of host memory");
    const char *name = o->model ? o->model : model ? model : "mlp";
    dg_status st = dg_model_parse(ctx, name, o->in_c, o->in_h, o->in_w, m);
    dg_loader_opts lo;
    if (st == DG_OK)
        st = data_opts(ctx, o, m, o->batch > 0 ? o->batch : 1, &lo);
    dg_free(m);
    return st == DG_OK || st == DG_ERR_NOMEM ? st : DG_ERR_USAGE;
}

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
    if ((st = open_data(ctx, o, &t->m, t->n, samples, &t->src, &t->lo)) != DG_OK) {
        dg_source_close(t->src);
        t->src = NULL;
        return st;
    }
    if ((st = dg_engine_open(ctx, t->backend, &eo, &t->e)) != DG_OK) {
        dg_source_close(t->src);
        t->src = NULL;
        return st;
    }
    dg_model_layout(&t->m, t->e, t->n, &t->lay);
    /* The first steps pay for first-use costs (kernel builds, library set-up,
     * the capture): they run but are not timed. */
    t->total = t->steps * t->epochs;
    t->warmup = t->total > 2 ? 2 : t->total - 1;
    /* A profile's window starts after its own warm-up: the timed steps are its steps. */
    if (x->profile_warmup > 0 && x->profile_warmup < t->total)
        t->warmup = x->profile_warmup;
    t->finite = true;
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
        dg_loader_opts vo = inline_opts(&t->lo, t->data);
        if ((st = dg_loader_new(ctx, t->src, &vo, &t->val)) != DG_OK)
            return st;
    } else if (x->val_steps > 0) {
        /* Validation steps without a split: forward passes over training
         * batches, not augmented. */
        dg_loader_opts vo = inline_opts(&t->lo, t->data);
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
        dg_loader_opts xo = inline_opts(&t->lo, t->data);
        dg_loader *ex = NULL;
        if ((st = dg_loader_new(ctx, t->src, &xo, &ex)) == DG_OK)
            st = export_run(t, ex, o, t->epochs, t->steps, t->init, t->spec);
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
    if (g == t->warmup) {
        if ((st = e->be->synchronize(e->bctx)) != DG_OK)
            return st;
        energy_open(t);
        t->t0 = dg_now();
        t->cpu0 = process_cpu_s();
        dg_health_read(t->health, t->t0, NULL, &t->energy[0]);
    }
    if (t->x->profile_ops && g == t->x->profile_warmup)
        dg_engine_set_profiling(e, true);
    *tw = dg_now();
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

/* Energy beside samples/s (docs/schema/train.md): the counter's growth over
 * the timed steps as power, and its share of the timed wall per sample. */
static void energy_json(const trainer *t, cJSON *thr, double wall, double samples)
{
    const dg_health_sample *a = &t->energy[0], *b = &t->energy[1];
    bool ok = a->energy_j.valid && b->energy_j.valid && b->t > a->t &&
              b->energy_j.value >= a->energy_j.value && wall > 0 && samples > 0;
    double w = ok ? (b->energy_j.value - a->energy_j.value) / (b->t - a->t) : NAN;
    cJSON_AddItemToObject(thr, "power", dg_json_metric(ok ? w : 0, ok, "W"));
    cJSON_AddItemToObject(thr, "energy", dg_json_metric(ok ? w * wall : 0, ok, "J"));
    cJSON_AddItemToObject(thr, "energy_per_sample",
                          dg_json_metric(ok ? w * wall / samples : 0, ok, "J/sample"));
    cJSON_AddStringToObject(thr, "energy_source",
                            t->health ? dg_health_source(t->health)
                                      : "none: the device reports no energy");
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
        bool sync = (t->sync_every > 0 && (g + 1) % t->sync_every == 0) || s == t->steps - 1;
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
            dg_health_read(t->health, dg_now(), &t->energy[0], &t->energy[1]);
            t->wall = dg_now() - t->t0 - t->val_time;
            t->cpu = process_cpu_s() - t->cpu0 - t->val_cpu;
            t->timed_steps = t->total - t->warmup;
        }
    }
    dg_measure_unlock(&t->mlock); /* an epoch cut short by an error */
    return st;
}

/* The record of the run that ended with status final. */
static cJSON *trainer_record(trainer *t, dg_status final)
{
    dg_ctx *ctx = t->ctx;
    const dg_train_opts *o = t->o;
    const dg_train_ext *x = t->x;
    dg_engine *e = t->e;
    cJSON *rec = t->rec;
    dg_record_head(rec, "train", 1);
    cJSON_AddStringToObject(rec, "status", dg_status_name(final));
    dg_json_add_str(rec, "error", final == DG_OK ? NULL : dg_errmsg(ctx));
    cJSON_AddItemToObject(rec, "spec", t->spec);
    t->spec = NULL;
    cJSON_AddItemToObject(rec, "model", dg_model_json(&t->m));
    cJSON *dev = cJSON_AddObjectToObject(rec, "device");
    dg_device_info info;
    if (e->be->device_info(e->bctx, o->device, &info) == DG_OK) {
        cJSON_AddStringToObject(dev, "name", info.name);
        cJSON_AddStringToObject(dev, "vendor", info.vendor);
    }
    char ver[512] = "";
    e->be->versions(e->bctx, ver, sizeof ver);
    cJSON_AddStringToObject(dev, "versions", ver);
    int timed_steps = t->timed_steps, warmup = t->warmup;
    double wall = t->wall, data_wait = t->data_wait;
    if (t->data) {
        cJSON_AddItemToObject(rec, "bucket", dg_loader_bucket_json(t->data));
        cJSON_AddStringToObject(rec, "spec_id", t->spec_id); /* dg_spec_hash of the spec */
        cJSON *dj = dg_loader_stats_json(t->data);
        bool waited = timed_steps > 0;
        cJSON *wj = cJSON_AddObjectToObject(dj, "wait");
        cJSON_AddItemToObject(
            wj, "per_step",
            dg_json_metric(waited ? data_wait / timed_steps * 1e3 : 0, waited, "ms"));
        cJSON_AddItemToObject(wj, "share_of_step",
                              dg_json_metric(waited && wall > 0 ? data_wait / wall : 0,
                                             waited && wall > 0, "fraction"));
        if (t->val) {
            size_t vb, vs;
            dg_loader_bad_counts(t->val, &vb, &vs);
            cJSON_AddNumberToObject(dj, "val_bad_samples", (double)vb);
        }
        cJSON_AddItemToObject(rec, "data", dj);
    }
    if (t->vals) {
        cJSON_AddItemToObject(rec, "val", t->vals);
        t->vals = NULL;
    }
    cJSON *mem = cJSON_AddObjectToObject(rec, "memory");
    cJSON_AddItemToObject(mem, "activation_bytes",
                          dg_json_metric((double)t->lay.bytes, true, "bytes"));
    cJSON_AddItemToObject(mem, "workspace_bytes",
                          dg_json_metric((double)t->lay.work_bytes, true, "bytes"));
    dg_alloc_stats as;
    dg_alloc_get_stats(e->alloc, &as);
    cJSON_AddItemToObject(mem, "allocator", dg_alloc_stats_json(&as));
    cJSON_AddItemToObject(rec, "loss", t->losses ? t->losses : cJSON_CreateArray());
    t->losses = NULL;
    cJSON_AddBoolToObject(rec, "loss_finite", t->finite);
    cJSON *thr = cJSON_AddObjectToObject(rec, "throughput");
    bool timed = timed_steps > 0 && wall > 0;
    cJSON_AddNumberToObject(thr, "timed_steps", timed_steps);
    cJSON_AddNumberToObject(thr, "warmup_steps", warmup);
    cJSON_AddItemToObject(thr, "wall", dg_json_metric(wall, timed, "s"));
    cJSON_AddItemToObject(
        thr, "samples_per_s",
        dg_json_metric(timed ? timed_steps * (double)t->n / wall : 0, timed, "samples/s"));
    cJSON_AddItemToObject(thr, "step_ms",
                          dg_json_metric(timed ? wall / timed_steps * 1e3 : 0, timed, "ms"));
    bool cpu_ok = timed && isfinite(t->cpu) && t->cpu >= 0;
    cJSON_AddItemToObject(thr, "cpu_ms",
                          dg_json_metric(cpu_ok ? t->cpu / timed_steps * 1e3 : 0, cpu_ok, "ms"));
    cJSON_AddNumberToObject(thr, "sync_points", t->syncs);
    energy_json(t, thr, timed ? wall : 0, timed ? timed_steps * (double)t->n : 0);
    cJSON *ph = cJSON_AddObjectToObject(rec, "phases");
    cJSON_AddStringToObject(ph, "source",
                            e->be->caps.event_timing && e->be->event_elapsed
                                ? "device events, last step before each sync"
                                : "none");
    cJSON_AddNumberToObject(ph, "samples", (double)t->phase_n);
    for (int p = 0; p < PH_COUNT; p++) {
        double v = t->phase_n ? median(t->phase_ms[p], t->phase_n) : NAN;
        cJSON_AddItemToObject(ph, phase_names[p], dg_json_metric(v, isfinite(v), "ms"));
    }
    /* Host time the loop waited for its next batch, mean over the timed steps. */
    cJSON_AddItemToObject(ph, "data",
                          dg_json_metric(timed ? data_wait / timed_steps * 1e3 : 0, timed, "ms"));
    if (t->captured)
        cJSON_AddStringToObject(ph, "note",
                                "step captured as a graph: forward holds forward+backward+update");
    cJSON *cap = cJSON_AddObjectToObject(rec, "capture");
    cJSON_AddBoolToObject(cap, "used", t->captured);
    dg_json_add_str(cap, "note", t->captured ? NULL : t->capture_note);
    cJSON_AddItemToObject(rec, "fallbacks", dg_engine_census_json(e));
    if (t->ext) {
        cJSON *ins = cJSON_AddObjectToObject(rec, "instrumentation");
        cJSON_AddNumberToObject(ins, "sample_ms", x->sample_ms > 0 ? x->sample_ms : 0);
        cJSON_AddBoolToObject(ins, "step_times", x->step_times);
        cJSON_AddBoolToObject(ins, "epoch_watermarks", x->epoch_watermarks);
        cJSON_AddBoolToObject(ins, "empty_cache_epoch", x->empty_cache_epoch);
        cJSON_AddNumberToObject(ins, "leak_per_step", (double)x->leak_per_step);
        cJSON_AddNumberToObject(ins, "leaked_blocks", (double)t->nleaks);
        cJSON_AddNumberToObject(ins, "val_steps", x->val_steps);
        cJSON_AddBoolToObject(ins, "profile_ops", x->profile_ops);
        dg_json_add_str(ins, "params_out", x->params_out);
        cJSON_AddBoolToObject(ins, "lock_epochs", x->lock_epochs);
        cJSON_AddItemToObject(ins, "lock_waited",
                              dg_json_metric(t->lock_waited, x->lock_epochs, "s"));
    }
    if (x->step_times && t->step_s) {
        int done_steps = t->nstep;
        cJSON *sj = cJSON_AddObjectToObject(rec, "steps");
        cJSON *ms = cJSON_AddArrayToObject(sj, "ms");
        double *v = dg_malloc(((size_t)done_steps + 1) * sizeof *v);
        for (int i = 0; i < done_steps; i++) {
            cJSON_AddItemToArray(ms, cJSON_CreateNumber(t->step_s[i] * 1e3));
            if (v)
                v[i] = t->step_s[i] * 1e3;
        }
        dg_stats stt;
        size_t wu = (size_t)(done_steps < warmup ? done_steps : warmup);
        dg_stats_compute(v, v ? (size_t)done_steps : 0, v ? wu : 0, &stt);
        cJSON_AddNumberToObject(sj, "warmup", (double)wu);
        cJSON_AddItemToObject(sj, "stats", dg_stats_json(&stt, "ms"));
        dg_free(v);
    }
    if (t->epochs_j) {
        cJSON_AddItemToObject(rec, "epochs", t->epochs_j);
        t->epochs_j = NULL;
    }
    if (t->sampler)
        cJSON_AddItemToObject(rec, "sampler", dg_sampler_json(t->sampler));
    else if (x->sample_ms > 0)
        cJSON_AddNullToObject(rec, "sampler");
    if (x->profile_ops) {
        cJSON_AddItemToObject(rec, "ops", dg_engine_ops_json(e));
        cJSON_AddItemToObject(rec, "trace", dg_engine_trace_json(e));
    }
    return rec;
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
    dg_train_opts ran = resolved_opts(o, t->backend, t->n, t->steps, t->epochs, t->sync_every,
                                      t->lr, t->momentum, t->wd);
    t->spec = dg_spec_json(&ran);
    dg_spec_hash(ctx, &ran, t->spec_id);
    if ((st = trainer_prepare(t)) == DG_OK) {
        trainer_plan_capture(t);
        st = trainer_loop(t);
    }
    dg_sampler_stop(t->sampler);
    if (st == DG_OK && t->x->params_out)
        st = write_params(t, t->x->params_out);
    *json = dg_json_print(trainer_record(t, st));
    trainer_close(t);
    dg_free(t);
    if (!*json)
        return dg_fail(ctx, DG_ERR_NOMEM, "train: out of memory printing the record");
    return st;
}
