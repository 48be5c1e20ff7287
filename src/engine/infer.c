/* The fixture model served for inference (infer.h): seeded weights and a
 * seeded input batch on the device once, then one forward pass per token,
 * the first sample's features changed by the token before it (so each pass
 * depends on the last one's answer, as a decoder's does). */
#include "engine/infer.h"

#include "engine/model.h"

#include <math.h>
#include <string.h>

#define FEAT 16 /* the features each token rewrites in the first sample */

struct dg_infer {
    const char *backend;
    int n;
    dg_engine *e;
    dg_model m;
    dg_act_layout lay;
    dg_block *params, *act;
    float *logits; /* the first sample's, host */
    double first_ms;
    char device[128];
};

void dg_infer_close(dg_infer *s)
{
    if (!s)
        return;
    if (s->e) {
        dg_release(s->e->alloc, s->act);
        dg_release(s->e->alloc, s->params);
    }
    dg_engine_close(s->e);
    dg_free(s->logits);
    dg_free(s);
}

/* Seeded weights and a seeded input batch onto the device. */
static dg_status upload_start(dg_ctx *ctx, dg_infer *s, uint64_t seed)
{
    const dg_backend_iface *be = s->e->be;
    size_t xcount = (size_t)s->n * s->m.in_c * s->m.in_h * s->m.in_w;
    float *host = dg_malloc(s->m.param_arena > xcount * sizeof(float) ? s->m.param_arena
                                                                      : xcount * sizeof(float));
    if (!host)
        return dg_fail(ctx, DG_ERR_NOMEM, "fixture: out of host memory");
    dg_model_init_params(&s->m, seed, host);
    dg_status st = be->upload(s->e->bctx, s->params->buf, 0, host, s->m.param_arena);
    if (st == DG_OK) {
        dg_rng r;
        dg_rng_init(&r, seed, 0x1f);
        dg_rng_uniform(&r, host, xcount, 0.0f, 1.0f);
        st = be->upload(s->e->bctx, s->act->buf, s->lay.x_off, host, xcount * sizeof(float));
    }
    dg_free(host);
    if (st != DG_OK)
        return dg_fail(ctx, DG_ERR_BACKEND, "fixture: %s: uploading the model: %s", s->backend,
                       be->last_error(s->e->bctx));
    return DG_OK;
}

dg_status dg_infer_open(dg_ctx *ctx, const dg_infer_opts *o, dg_infer **out)
{
    *out = NULL;
    dg_infer *s = dg_calloc(1, sizeof *s);
    if (!s)
        return dg_fail(ctx, DG_ERR_NOMEM, "fixture: out of host memory");
    s->backend = o->backend ? o->backend : "cpu";
    s->n = o->batch ? o->batch : 1;
    dg_status st = DG_OK;
    if (s->n < 1 || s->n > (1 << 16))
        st = dg_fail(ctx, DG_ERR_USAGE, "fixture: the batch must lie in 1..65536");
    if (st == DG_OK)
        st = dg_model_parse(ctx, o->model ? o->model : "mlp", 0, 0, 0, &s->m);
    dg_engine_opts eo = {.device = o->device, .threads = o->threads};
    if (st == DG_OK)
        st = dg_engine_open(ctx, s->backend, &eo, &s->e);
    if (st == DG_OK) {
        dg_model_layout(&s->m, s->e, s->n, &s->lay);
        st = dg_alloc(ctx, s->e->alloc, s->m.param_arena, &s->params);
    }
    if (st == DG_OK)
        st = dg_alloc(ctx, s->e->alloc, s->lay.bytes, &s->act);
    if (st == DG_OK && !(s->logits = dg_malloc((size_t)s->m.classes * sizeof(float))))
        st = dg_fail(ctx, DG_ERR_NOMEM, "fixture: out of host memory");
    if (st == DG_OK)
        st = upload_start(ctx, s, o->seed);
    if (st == DG_OK) {
        dg_device_info di;
        if (s->e->be->device_info(s->e->bctx, o->device, &di) == DG_OK)
            dg_utf8_clean(s->device, sizeof s->device, di.name, strlen(di.name), true);
        double t0 = dg_now();
        int tok;
        st = dg_infer_next(ctx, s, o->seed, 0, &tok);
        s->first_ms = (dg_now() - t0) * 1e3;
    }
    if (st != DG_OK) {
        dg_infer_close(s);
        return st;
    }
    *out = s;
    return DG_OK;
}

dg_status dg_infer_next(dg_ctx *ctx, dg_infer *s, uint64_t key, long pos, int *token)
{
    const dg_backend_iface *be = s->e->be;
    float feat[FEAT];
    size_t per = (size_t)s->m.in_c * s->m.in_h * s->m.in_w;
    size_t nf = per < FEAT ? per : FEAT;
    dg_rng r;
    dg_rng_init(&r, key, (uint64_t)pos);
    dg_rng_uniform(&r, feat, nf, 0.0f, 1.0f);
    if (be->upload(s->e->bctx, s->act->buf, s->lay.x_off, feat, nf * sizeof(float)) != DG_OK)
        return dg_fail(ctx, DG_ERR_BACKEND, "fixture: %s: uploading a token's input: %s",
                       s->backend, be->last_error(s->e->bctx));
    dg_status st = dg_model_forward(ctx, s->e, &s->m, &s->lay, s->n, s->act->buf, s->params->buf);
    if (st != DG_OK)
        return st;
    const dg_layer *last = &s->m.L[s->m.nlayers - 1];
    if (be->download(s->e->bctx, s->act->buf, last->y_off, s->logits,
                     (size_t)s->m.classes * sizeof(float)) != DG_OK)
        return dg_fail(ctx, DG_ERR_BACKEND, "fixture: %s: reading the logits back: %s", s->backend,
                       be->last_error(s->e->bctx));
    int best = 0;
    for (int c = 1; c < s->m.classes; c++)
        if (s->logits[c] > s->logits[best])
            best = c;
    if (!isfinite(s->logits[best]))
        return dg_fail(ctx, DG_ERR_BACKEND, "fixture: %s: the forward pass gave non-finite logits",
                       s->backend);
    *token = best;
    return DG_OK;
}

cJSON *dg_infer_json(const dg_infer *s)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "backend", s->backend);
    dg_json_add_str(j, "device", s->device[0] ? s->device : NULL);
    dg_json_add_str(j, "model", s->m.name);
    dg_json_add_str(j, "layers", s->m.layers);
    cJSON_AddNumberToObject(j, "parameters", (double)s->m.param_count);
    cJSON_AddNumberToObject(j, "batch", s->n);
    cJSON_AddNumberToObject(j, "classes", s->m.classes);
    cJSON_AddItemToObject(j, "first_pass", dg_json_metric_of(s->first_ms, "ms"));
    return j;
}
