/* A training run's options, data and files (train_int.h): the loader
 * workers, the resolved options the record keeps, the data source and its
 * loaders, the export for the golden-trajectory script and the final
 * parameters. train.c's trainer calls these; they call nothing of it. */
#include "engine/train_int.h"

#include "core/record.h"
#include "engine/spec.h"
#include "env/peak.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

dg_loader_opts dg_train_inline_opts(const dg_loader_opts *lo, const dg_loader *ld)
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

/* Writes the initial parameters, the manifest and every batch under dir, for
 * the golden-trajectory script (tests/golden/). */
dg_status dg_train_export_run(trainer *t, dg_loader *data, const dg_train_opts *o, int epochs,
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
dg_train_opts dg_train_resolved_opts(const dg_train_opts *o, const char *backend, int batch,
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
dg_status dg_train_open_data(dg_ctx *ctx, const dg_train_opts *o, const dg_model *m, int batch,
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

/* Downloads the parameter arena and writes it as raw float32 to path. */
dg_status dg_train_write_params(trainer *t, const char *path)
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
