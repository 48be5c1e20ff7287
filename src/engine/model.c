/* Presets, layer strings, shapes, the size table and initialisation. */
#include "engine/model.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name, *layers;
    int c, h, w;
} presets[] = {
    {"mlp", "fc:512,relu,fc:256,relu,fc:10", 1, 28, 28},
    {"lenet", "conv5x5:6,relu,pool2,conv5x5:16,relu,pool2,fc:120,relu,fc:84,relu,fc:10", 1, 28, 28},
    {"cifar",
     "conv3x3:32:p1,relu,conv3x3:32:p1,relu,pool2,conv3x3:64:p1,relu,conv3x3:64:p1,relu,pool2,"
     "fc:256,relu,fc:10",
     3, 32, 32},
};

static size_t align_up(size_t n)
{
    return (n + DG_ARENA_ALIGN - 1) / DG_ARENA_ALIGN * DG_ARENA_ALIGN;
}

/* Parses a decimal in [lo, hi] at *p, advancing it; false when absent or out of range. */
static bool take_int(const char **p, int lo, int hi, int *out)
{
    if (!isdigit((unsigned char)**p))
        return false;
    char *end;
    errno = 0;
    long v = strtol(*p, &end, 10);
    if (errno || v < lo || v > hi)
        return false;
    *p = end;
    *out = (int)v;
    return true;
}

/* One token of the layer string into layer l (kind and hyper-parameters). */
static dg_status parse_token(dg_ctx *ctx, const char *tok, dg_layer *l)
{
    const char *p = tok;
    memset(l, 0, sizeof *l);
    l->param_index = -1;
    if (strcmp(tok, "relu") == 0) {
        l->kind = DG_L_RELU;
        return DG_OK;
    }
    if (strncmp(tok, "conv", 4) == 0) {
        p += 4;
        l->kind = DG_L_CONV;
        l->conv.stride = 1;
        if (!take_int(&p, 1, 15, &l->conv.kh) || *p++ != 'x' || !take_int(&p, 1, 15, &l->conv.kw) ||
            *p++ != ':' || !take_int(&p, 1, 4096, &l->conv.k))
            goto bad;
        while (*p == ':') {
            p++;
            char which = *p++;
            int v;
            if (!take_int(&p, 0, 15, &v))
                goto bad;
            if (which == 's' && v >= 1)
                l->conv.stride = v;
            else if (which == 'p')
                l->conv.pad = v;
            else
                goto bad;
        }
        return *p ? dg_fail(ctx, DG_ERR_USAGE, "layer '%s': unexpected '%s'", tok, p) : DG_OK;
    }
    if (strncmp(tok, "pool", 4) == 0) {
        p += 4;
        l->kind = DG_L_POOL;
        if (!take_int(&p, 1, 16, &l->pool.k))
            goto bad;
        l->pool.stride = l->pool.k;
        if (*p == ':' && p[1] == 's') {
            p += 2;
            if (!take_int(&p, 1, 16, &l->pool.stride))
                goto bad;
        }
        return *p ? dg_fail(ctx, DG_ERR_USAGE, "layer '%s': unexpected '%s'", tok, p) : DG_OK;
    }
    if (strncmp(tok, "fc:", 3) == 0) {
        p += 3;
        l->kind = DG_L_FC;
        if (!take_int(&p, 1, 1 << 20, &l->out_c) || *p)
            goto bad;
        return DG_OK;
    }
bad:
    return dg_fail(
        ctx, DG_ERR_USAGE,
        "bad layer '%s' (expected convKxK:C[:sS][:pP], relu, poolK[:sS], fc:N or flatten)", tok);
}

/* Output shape of layer l given its input; DG_ERR_USAGE when it does not fit. */
static dg_status infer_shape(dg_ctx *ctx, int index, const char *tok, dg_layer *l)
{
    switch (l->kind) {
    case DG_L_CONV: {
        dg_conv_shape *s = &l->conv;
        s->c = l->in_c;
        s->h = l->in_h;
        s->w = l->in_w;
        int hp = l->in_h + 2 * s->pad, wp = l->in_w + 2 * s->pad;
        if (s->kh > hp || s->kw > wp)
            return dg_fail(
                ctx, DG_ERR_USAGE,
                "layer %d '%s': a %dx%d kernel does not fit the %dx%dx%d input (padding %d)",
                index + 1, tok, s->kh, s->kw, l->in_c, l->in_h, l->in_w, s->pad);
        s->ho = (hp - s->kh) / s->stride + 1;
        s->wo = (wp - s->kw) / s->stride + 1;
        l->out_c = s->k;
        l->out_h = s->ho;
        l->out_w = s->wo;
        l->w_count = (size_t)s->k * s->c * s->kh * s->kw;
        l->b_count = (size_t)s->k;
        l->fan_in = s->c * s->kh * s->kw;
        return DG_OK;
    }
    case DG_L_POOL: {
        dg_pool_shape *s = &l->pool;
        if (s->k > l->in_h || s->k > l->in_w)
            return dg_fail(ctx, DG_ERR_USAGE,
                           "layer %d '%s': a %dx%d window does not fit the %dx%d input", index + 1,
                           tok, s->k, s->k, l->in_h, l->in_w);
        s->c = l->in_c;
        s->h = l->in_h;
        s->w = l->in_w;
        s->ho = (l->in_h - s->k) / s->stride + 1;
        s->wo = (l->in_w - s->k) / s->stride + 1;
        l->out_c = l->in_c;
        l->out_h = s->ho;
        l->out_w = s->wo;
        return DG_OK;
    }
    case DG_L_RELU:
        l->out_c = l->in_c;
        l->out_h = l->in_h;
        l->out_w = l->in_w;
        return DG_OK;
    case DG_L_FC: {
        /* fc flattens whatever comes in. */
        size_t in = (size_t)l->in_c * l->in_h * l->in_w;
        if (in > (1u << 26))
            return dg_fail(ctx, DG_ERR_USAGE, "layer %d '%s': %zu input features is too many",
                           index + 1, tok, in);
        l->in_c = (int)in;
        l->in_h = l->in_w = 1;
        l->out_h = l->out_w = 1;
        l->w_count = (size_t)l->out_c * in;
        l->b_count = (size_t)l->out_c;
        l->fan_in = (int)in;
        return DG_OK;
    }
    }
    return DG_ERR_USAGE;
}

static void add_tensor(dg_model *m, const char *name, const int *shape, int ndim, size_t count,
                       size_t *off)
{
    dg_tensor_entry *t = &m->T[m->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    t->count = count;
    t->off = *off;
    *off = align_up(*off + count * sizeof(float));
    m->param_count += count;
}

dg_status dg_model_parse(dg_ctx *ctx, const char *spec, int c, int h, int w, dg_model *m)
{
    memset(m, 0, sizeof *m);
    const char *layers = NULL;
    snprintf(m->name, sizeof m->name, "custom");
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(spec, presets[i].name) == 0) {
            layers = presets[i].layers;
            snprintf(m->name, sizeof m->name, "%s", presets[i].name);
            if (!c) {
                c = presets[i].c;
                h = presets[i].h;
                w = presets[i].w;
            }
        }
    }
    if (!layers) {
        if (!strchr(spec, ':') && !strchr(spec, ','))
            return dg_fail(ctx, DG_ERR_USAGE,
                           "unknown model '%.64s' (presets: mlp, lenet, cifar; or a layer string "
                           "such as conv3x3:32:p1,relu,pool2,fc:10)",
                           spec);
        layers = spec;
    }
    if (!c) {
        c = 1;
        h = w = 28;
    }
    if (c < 1 || h < 1 || w < 1 || c > 64 || h > 4096 || w > 4096)
        return dg_fail(ctx, DG_ERR_USAGE, "input %dx%dx%d out of range", c, h, w);
    if (strlen(layers) >= sizeof m->layers)
        return dg_fail(ctx, DG_ERR_USAGE, "layer string longer than %zu characters",
                       sizeof m->layers - 1);
    snprintf(m->layers, sizeof m->layers, "%s", layers);
    m->in_c = c;
    m->in_h = h;
    m->in_w = w;

    char buf[512];
    snprintf(buf, sizeof buf, "%s", layers);
    int pc = c, ph = h, pw = w, nconv = 0, nfc = 0;
    size_t off = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        tok = dg_trim(tok);
        if (strcmp(tok, "flatten") == 0)
            continue; /* fc flattens by itself */
        if (m->nlayers == DG_MAX_LAYERS)
            return dg_fail(ctx, DG_ERR_USAGE, "more than %d layers", DG_MAX_LAYERS);
        dg_layer *l = &m->L[m->nlayers];
        dg_status st = parse_token(ctx, tok, l);
        if (st != DG_OK)
            return st;
        if (l->kind == DG_L_CONV && ph == 1 && pw == 1 && m->nlayers > 0 &&
            m->L[m->nlayers - 1].kind == DG_L_FC)
            return dg_fail(ctx, DG_ERR_USAGE,
                           "layer %d '%s': a convolution cannot follow fc layers", m->nlayers + 1,
                           tok);
        l->in_c = pc;
        l->in_h = ph;
        l->in_w = pw;
        if ((st = infer_shape(ctx, m->nlayers, tok, l)) != DG_OK)
            return st;
        if (l->kind == DG_L_CONV || l->kind == DG_L_FC) {
            char name[32];
            int idx = l->kind == DG_L_CONV ? ++nconv : ++nfc;
            const char *kind = l->kind == DG_L_CONV ? "conv" : "fc";
            l->param_index = m->ntensors;
            l->w_off = off;
            snprintf(name, sizeof name, "%s%d.weight", kind, idx);
            if (l->kind == DG_L_CONV) {
                int shape[4] = {l->conv.k, l->conv.c, l->conv.kh, l->conv.kw};
                add_tensor(m, name, shape, 4, l->w_count, &off);
            } else {
                int shape[2] = {l->out_c, l->in_c};
                add_tensor(m, name, shape, 2, l->w_count, &off);
            }
            l->b_off = off;
            snprintf(name, sizeof name, "%s%d.bias", kind, idx);
            int bshape[1] = {(int)l->b_count};
            add_tensor(m, name, bshape, 1, l->b_count, &off);
        }
        pc = l->out_c;
        ph = l->out_h;
        pw = l->out_w;
        m->nlayers++;
    }
    if (m->nlayers == 0 || m->L[m->nlayers - 1].kind != DG_L_FC)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "the model must end with an fc layer (its width is the class count)");
    m->classes = m->L[m->nlayers - 1].out_c;
    if (m->classes < 2)
        return dg_fail(ctx, DG_ERR_USAGE, "the last fc layer needs at least 2 classes, has %d",
                       m->classes);
    m->param_arena = off;
    return DG_OK;
}

void dg_model_layout(dg_model *m, dg_engine *e, int n, dg_act_layout *out)
{
    size_t off = 0;
    memset(out, 0, sizeof *out);
    out->x_off = off;
    off = align_up(off + (size_t)n * m->in_c * m->in_h * m->in_w * sizeof(float));
    out->labels_off = off;
    off = align_up(off + (size_t)n * sizeof(int32_t));
    out->acc_off = off;
    off = align_up(off + 2 * sizeof(float));
    for (int i = 0; i < m->nlayers; i++) {
        dg_layer *l = &m->L[i];
        size_t per = (size_t)l->out_c * l->out_h * l->out_w;
        l->y_off = off;
        off = align_up(off + (size_t)n * per * sizeof(float));
        l->dy_off = off;
        off = align_up(off + (size_t)n * per * sizeof(float));
        if (l->kind == DG_L_POOL) {
            l->pool.n = n;
            l->argmax_off = off;
            off = align_up(off + (size_t)n * per * sizeof(int32_t));
        }
        if (l->kind == DG_L_CONV) {
            l->conv.n = n;
            size_t ws = dg_op_conv2d_workspace(e, &l->conv);
            if (ws > out->work_bytes)
                out->work_bytes = ws;
        }
    }
    out->work_off = off;
    off = align_up(off + out->work_bytes);
    out->bytes = off;
}

dg_status dg_model_forward(dg_ctx *ctx, dg_engine *e, const dg_model *m, const dg_act_layout *lay,
                           int n, void *act, void *params)
{
    dg_status st = DG_OK;
    bool fc_fused = dg_engine_fuses(e, DG_FUSE_GEMM), conv_fused = dg_engine_fuses(e, DG_FUSE_CONV);
    for (int i = 0; i < m->nlayers && st == DG_OK; i++) {
        const dg_layer *l = &m->L[i];
        dg_ref in = {act, i == 0 ? lay->x_off : m->L[i - 1].y_off};
        dg_ref y = {act, l->y_off}, w = {params, l->w_off}, b = {params, l->b_off};
        bool relu = i + 1 < m->nlayers && m->L[i + 1].kind == DG_L_RELU;
        dg_epilogue ep = {b, relu, {NULL, 0}};
        if (relu && ((l->kind == DG_L_CONV && conv_fused) || (l->kind == DG_L_FC && fc_fused)))
            y = (dg_ref){act, m->L[++i].y_off}; /* the ReLU's output; the ReLU is done */
        dg_ref work = {act, lay->work_off};
        switch (l->kind) {
        case DG_L_CONV:
            st = conv_fused ? dg_op_conv2d_fwd_ep(ctx, e, &l->conv, in, w, y, work, &ep)
                            : dg_op_conv2d_fwd(ctx, e, &l->conv, in, w, b, y, work);
            break;
        case DG_L_RELU:
            st = dg_op_relu_fwd(ctx, e, in, y, (size_t)n * l->out_c * l->out_h * l->out_w);
            break;
        case DG_L_POOL:
            st = dg_op_maxpool_fwd(ctx, e, &l->pool, in, y, (dg_ref){act, l->argmax_off});
            break;
        case DG_L_FC:
            /* y[n, out] = x[n, in] * W[out, in]^T + b */
            if (fc_fused) {
                st = dg_op_gemm_ep(ctx, e, false, true, n, l->out_c, l->in_c, in, l->in_c, w,
                                   l->in_c, y, l->out_c, &ep);
                break;
            }
            st = dg_op_gemm(ctx, e, false, true, n, l->out_c, l->in_c, 1.0f, in, l->in_c, w,
                            l->in_c, 0.0f, y, l->out_c);
            if (st == DG_OK)
                st = dg_op_bias_add(ctx, e, y, b, n, l->out_c, 1);
            break;
        }
    }
    return st;
}

void dg_model_init_params(const dg_model *m, uint64_t seed, float *host)
{
    memset(host, 0, m->param_arena);
    for (int i = 0; i < m->nlayers; i++) {
        const dg_layer *l = &m->L[i];
        if (l->param_index < 0)
            continue;
        float bound = 1.0f / sqrtf((float)l->fan_in);
        dg_rng r;
        dg_rng_init(&r, seed, 1000 + (uint64_t)l->param_index);
        dg_rng_uniform(&r, host + l->w_off / sizeof(float), l->w_count, -bound, bound);
        dg_rng_init(&r, seed, 1000 + (uint64_t)l->param_index + 1);
        dg_rng_uniform(&r, host + l->b_off / sizeof(float), l->b_count, -bound, bound);
    }
}

cJSON *dg_model_json(const dg_model *m)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", m->name);
    dg_json_add_str(o, "layers", m->layers);
    dg_json_add_ints(o, "input", (const int[]){m->in_c, m->in_h, m->in_w}, 3);
    cJSON_AddNumberToObject(o, "classes", m->classes);
    cJSON_AddNumberToObject(o, "parameters", (double)m->param_count);
    cJSON_AddItemToObject(o, "parameter_bytes",
                          dg_json_metric((double)m->param_count * 4, true, "bytes"));
    cJSON_AddItemToObject(o, "arena_bytes", dg_json_metric((double)m->param_arena, true, "bytes"));
    cJSON *t = cJSON_AddArrayToObject(o, "tensors");
    for (int i = 0; i < m->ntensors; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", m->T[i].name);
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < m->T[i].ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber(m->T[i].shape[d]));
        cJSON_AddNumberToObject(e, "offset", (double)m->T[i].off);
        cJSON_AddNumberToObject(e, "bytes", (double)m->T[i].count * 4);
        cJSON_AddItemToArray(t, e);
    }
    return o;
}
