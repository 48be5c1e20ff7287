/* The spec codec (src/engine/spec.c): init is mandatory, encode/decode round
 * trip exactly and canonically, the hash follows what runs, decoding owns its
 * strings and refuses what the flags refuse. */
#include "check.h"
#include "devgate.h"

#include <stdint.h>

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Every field of dg_train_opts the codec carries. */
static bool same_opts(const dg_train_opts *a, const dg_train_opts *b)
{
    return a->init == b->init && same_str(a->model, b->model) && a->in_c == b->in_c &&
           a->in_h == b->in_h && a->in_w == b->in_w && same_str(a->backend, b->backend) &&
           a->device == b->device && a->batch == b->batch && a->steps == b->steps &&
           a->epochs == b->epochs && a->seed == b->seed && a->sync_every == b->sync_every &&
           a->lr == b->lr && a->momentum == b->momentum && a->weight_decay == b->weight_decay &&
           a->threads == b->threads && a->mem_budget == b->mem_budget &&
           same_str(a->disable_ops, b->disable_ops) && a->samples == b->samples &&
           a->no_capture == b->no_capture && a->sample_ms == b->sample_ms &&
           same_str(a->export_dir, b->export_dir) && same_str(a->data, b->data) &&
           a->workers == b->workers && a->prefetch == b->prefetch && a->val_split == b->val_split &&
           same_str(a->resolution, b->resolution) && same_str(a->augment, b->augment) &&
           same_str(a->normalize, b->normalize) && a->cache == b->cache &&
           a->on_bad_fail == b->on_bad_fail && a->max_bad_share == b->max_bad_share &&
           a->math == b->math;
}

static dg_status decode(dg_ctx *ctx, const char *json)
{
    dg_spec *s = NULL;
    dg_status st = dg_spec_decode(ctx, json, &s);
    CHECK(st == DG_OK ? s != NULL : s == NULL);
    dg_spec_free(s);
    return st;
}

int main(void)
{
    dg_ctx *ctx = dg_ctx_new();

    /* A zeroed struct is refused, not run at learning rate 0. */
    dg_train_opts zero = {0};
    char *json = NULL;
    CHECK(dg_train_run(ctx, &zero, &json) == DG_ERR_USAGE && json == NULL);
    CHECK(strstr(dg_errmsg(ctx), "not initialised") != NULL);
    dg_sweep_opts sz = {.from = 8, .to = 8};
    CHECK(dg_sweep_run(ctx, &sz, &json) == DG_ERR_USAGE && json == NULL);
    CHECK(dg_spec_encode(ctx, &zero, &json) == DG_ERR_USAGE && json == NULL);
    /* The macro and the function agree, and an initialised struct trains. */
    dg_train_opts a = DG_TRAIN_OPTS_INIT, b;
    memset(&b, 0x5a, sizeof b);
    dg_train_opts_init(&b);
    CHECK(same_opts(&a, &b) && b.lr < 0 && b.momentum < 0 && b.cancel == NULL);
    a.steps = 2, a.batch = 4, a.threads = 1;
    CHECK(dg_train_run(ctx, &a, &json) == DG_OK && json != NULL);
    CHECK(json && strstr(json, "\"lr\":0.01") != NULL);
    CHECK(json && strstr(json, "\"spec_id\":\"") != NULL);
    dg_string_free(json);

    /* Every option set through the shared setter, then a round trip. */
    dg_train_opts o = DG_TRAIN_OPTS_INIT;
    const char *set[][2] = {
        {"model", "lenet"},
        {"input", "3x32x32"},
        {"backend", "opencl"},
        {"math", "tf32"},
        {"device", "2"},
        {"batch", "96"},
        {"steps", "17"},
        {"epochs", "3"},
        {"seed", "18446744073709551615"},
        {"sync_every", "5"},
        {"lr", "0.125"},
        {"momentum", "0"},
        {"weight_decay", "5e-4"},
        {"threads", "3"},
        {"mem_budget", "512M"},
        {"disable_ops", "conv2d@opencl"},
        {"samples", "1000"},
        {"capture", "false"},
        {"sample_ms", "50"},
        {"export", "exp"},
        {"data", "cifar:dir"},
        {"workers", "0"},
        {"prefetch", "6"},
        {"val_split", "0.25"},
        {"resolution", "32x32"},
        {"augment", "crop,flip"},
        {"normalize", "auto"},
        {"cache", "true"},
        {"on_bad_sample", "fail"},
        {"max_bad_share", "0"},
    };
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++)
        CHECK_MSG(dg_train_opts_set(ctx, &o, set[i][0], set[i][1]) == DG_OK, "%s=%s: %s", set[i][0],
                  set[i][1], dg_errmsg(ctx));
    CHECK(o.in_c == 3 && o.in_h == 32 && o.math == DG_MATH_TF32 && o.no_capture &&
          o.workers == -1 && o.max_bad_share < 0 && o.on_bad_fail && o.momentum == 0 &&
          o.seed == UINT64_MAX && o.mem_budget == (size_t)512 << 20);
    char *text = NULL;
    CHECK(dg_spec_encode(ctx, &o, &text) == DG_OK && text != NULL);
    dg_spec *s = NULL;
    /* Decode from a copy that is gone afterwards: the spec owns its strings. */
    char *copy = strdup(text ? text : "");
    CHECK(dg_spec_decode(ctx, copy, &s) == DG_OK && s != NULL);
    memset(copy, 'x', strlen(copy));
    free(copy);
    const dg_train_opts *d = dg_spec_opts(s);
    CHECK_MSG(d && same_opts(&o, d), "round trip differs: %s", text ? text : "");
    char *again = NULL;
    CHECK(d && dg_spec_encode(ctx, d, &again) == DG_OK && again && text &&
          strcmp(again, text) == 0);
    /* The hash follows what runs, not where output goes. */
    char h1[65], h2[65], h3[65];
    CHECK(dg_spec_hash(ctx, &o, h1) == DG_OK && strlen(h1) == 64);
    dg_train_opts o2 = o;
    o2.export_dir = "elsewhere";
    CHECK(dg_spec_hash(ctx, &o2, h2) == DG_OK && strcmp(h1, h2) == 0);
    o2.lr = 0.25f;
    CHECK(dg_spec_hash(ctx, &o2, h3) == DG_OK && strcmp(h1, h3) != 0);
    dg_spec_free(s);
    dg_string_free(text);
    dg_string_free(again);

    /* Defaults: an initialised struct encodes to values that decode to the same run. */
    dg_train_opts def = DG_TRAIN_OPTS_INIT;
    CHECK(dg_spec_encode(ctx, &def, &text) == DG_OK && text);
    CHECK(text && strstr(text, "\"batch\":null") && strstr(text, "\"momentum\":0.9") &&
          strstr(text, "\"workers\":2") && strstr(text, "\"sync_every\":\"epoch\""));
    CHECK(text && dg_spec_decode(ctx, text, &s) == DG_OK);
    char *def2 = NULL;
    CHECK(s && dg_spec_encode(ctx, dg_spec_opts(s), &def2) == DG_OK && def2 && text &&
          strcmp(def2, text) == 0);
    dg_spec_free(s);
    dg_string_free(text);
    dg_string_free(def2);

    /* What the flags refuse, a spec refuses. */
    CHECK(decode(ctx, "{\"epochs\": 1.5}") == DG_ERR_USAGE);
    CHECK(strstr(dg_errmsg(ctx), "epochs wants an integer in 1..65535, got '1.5'") != NULL);
    /* The loader counts epochs in 16 bits: more is refused here, not later. */
    CHECK(decode(ctx, "{\"epochs\": 70000}") == DG_ERR_USAGE);
    CHECK(decode(ctx, "{\"steps\": 1e9}") == DG_ERR_USAGE);
    CHECK(decode(ctx, "{\"batch\": 0}") == DG_ERR_USAGE);
    CHECK(decode(ctx, "{\"lr\": -0.5}") == DG_ERR_USAGE);
    CHECK(decode(ctx, "{\"seed\": -1}") == DG_ERR_USAGE);
    CHECK(decode(ctx, "{\"math\": \"fp16\"}") == DG_ERR_USAGE);
    CHECK(decode(ctx, "{\"cache\": 1}") == DG_ERR_USAGE);
    CHECK(decode(ctx, "{\"model\": \"\"}") == DG_ERR_USAGE);
    CHECK(decode(ctx, "{\"input\": \"3x32\"}") == DG_ERR_USAGE);
    CHECK(decode(ctx, "{\"mem_budget\": 0}") == DG_ERR_USAGE);
    CHECK(decode(ctx, "{\"val_split\": 1}") == DG_ERR_USAGE);
    CHECK(decode(ctx, "{\"prefetch\": 0}") == DG_ERR_USAGE);
    CHECK(decode(ctx, "{\"nosuch\": 1}") == DG_ERR_USAGE);
    CHECK(strstr(dg_errmsg(ctx), "unknown key \"nosuch\"") != NULL);
    CHECK(decode(ctx, "[1]") == DG_ERR_FORMAT);
    CHECK(decode(ctx, "{\"batch\": 8") == DG_ERR_FORMAT);
    CHECK(decode(ctx, "{\"batch\": 8, \"mem_budget\": {\"value\": 1048576, \"valid\": true}}") ==
          DG_OK);
    CHECK(decode(ctx, "{\"batch\": null, \"disable_ops\": null, \"seed\": \"0x10\"}") == DG_OK);
    CHECK(dg_train_opts_set(ctx, &o, "nosuch", "1") == DG_ERR_USAGE);
    CHECK(dg_train_opts_set(ctx, &o, "batch", "1048577") == DG_ERR_USAGE);
    CHECK(dg_train_opts_set(ctx, &o, "batch", "8x") == DG_ERR_USAGE);
    dg_spec_free(NULL);
    dg_ctx_free(ctx);
    CHECK_DONE();
}
