/* Models: presets and their parameter counts, layer strings and their errors,
 * shapes, the size table, and seeded initialisation. */
#include "check.h"
#include "data/synth.h"
#include "engine/model.h"

static dg_ctx *ctx;

static dg_status parse(const char *spec, int c, int h, int w, dg_model *m)
{
    return dg_model_parse(ctx, spec, c, h, w, m);
}

static void test_presets(void)
{
    static dg_model m;
    CHECK(parse("mlp", 0, 0, 0, &m) == DG_OK);
    CHECK(m.param_count == 784u * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
    CHECK(m.classes == 10 && m.in_c == 1 && m.in_h == 28 && m.nlayers == 5);
    CHECK(parse("lenet", 0, 0, 0, &m) == DG_OK);
    CHECK_MSG(m.param_count == 44426, "lenet has %zu parameters", m.param_count);
    CHECK(m.L[2].kind == DG_L_POOL && m.L[2].out_h == 12 && m.L[5].out_h == 4);
    CHECK(m.L[6].kind == DG_L_FC && m.L[6].in_c == 256);
    CHECK(parse("cifar", 0, 0, 0, &m) == DG_OK);
    CHECK_MSG(m.param_count == 1116970, "cifar has %zu parameters", m.param_count);
    CHECK(m.in_c == 3 && m.in_h == 32 && m.L[0].out_h == 32 && m.L[0].conv.pad == 1);
    CHECK(m.ntensors == 12);
    CHECK_STR(m.T[0].name, "conv1.weight");
    CHECK(m.T[0].shape[0] == 32 && m.T[0].shape[1] == 3 && m.T[0].shape[2] == 3);
    /* Every tensor starts aligned and they do not overlap. */
    for (int i = 0; i < m.ntensors; i++) {
        CHECK(m.T[i].off % DG_ARENA_ALIGN == 0);
        if (i)
            CHECK(m.T[i].off >= m.T[i - 1].off + m.T[i - 1].count * 4);
    }
    CHECK(m.param_arena >= m.param_count * 4);
}

static void test_strings(void)
{
    static dg_model m;
    CHECK(parse("conv3x3:8:s2:p1,relu,pool2,flatten,fc:4", 3, 17, 17, &m) == DG_OK);
    CHECK(m.L[0].out_h == 9 && m.L[0].conv.stride == 2 && m.L[2].out_h == 4);
    CHECK(m.classes == 4 && m.L[3].in_c == 8 * 4 * 4);
    CHECK(parse("pool3:s2,fc:2", 1, 7, 7, &m) == DG_OK && m.L[0].out_h == 3);
    CHECK(parse("resnet", 0, 0, 0, &m) == DG_ERR_USAGE && strstr(dg_errmsg(ctx), "unknown model"));
    CHECK(parse("conv3x3,fc:10", 0, 0, 0, &m) == DG_ERR_USAGE &&
          strstr(dg_errmsg(ctx), "bad layer 'conv3x3'"));
    CHECK(parse("conv3x3:4:q1,fc:10", 0, 0, 0, &m) == DG_ERR_USAGE);
    CHECK(parse("fc:10,tanh", 0, 0, 0, &m) == DG_ERR_USAGE && strstr(dg_errmsg(ctx), "'tanh'"));
    CHECK(parse("conv9x9:4,fc:10", 1, 5, 5, &m) == DG_ERR_USAGE &&
          strstr(dg_errmsg(ctx), "does not fit"));
    CHECK(parse("pool8,fc:10", 1, 5, 5, &m) == DG_ERR_USAGE &&
          strstr(dg_errmsg(ctx), "does not fit"));
    CHECK(parse("fc:10,relu", 0, 0, 0, &m) == DG_ERR_USAGE &&
          strstr(dg_errmsg(ctx), "end with an fc"));
    CHECK(parse("fc:1", 0, 0, 0, &m) == DG_ERR_USAGE);
    CHECK(parse("fc:10,conv3x3:4,fc:2", 0, 0, 0, &m) == DG_ERR_USAGE);
    CHECK(parse("fc:99999999,fc:2", 0, 0, 0, &m) == DG_ERR_USAGE);
    /* A long hostile string is refused, not overflowed. */
    char big[2048];
    memset(big, 'r', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CHECK(parse(big, 0, 0, 0, &m) == DG_ERR_USAGE);
    CHECK(parse("fc:10", 0, 1, 1, &m) == DG_OK);
}

static void test_init(void)
{
    static dg_model m;
    CHECK(parse("lenet", 0, 0, 0, &m) == DG_OK);
    float *a = dg_malloc(m.param_arena), *b = dg_malloc(m.param_arena),
          *c = dg_malloc(m.param_arena);
    dg_model_init_params(&m, 7, a);
    dg_model_init_params(&m, 7, b);
    dg_model_init_params(&m, 8, c);
    CHECK(memcmp(a, b, m.param_arena) == 0);
    CHECK(memcmp(a, c, m.param_arena) != 0);
    /* Uniform in +-1/sqrt(fan_in); gaps zero. */
    const dg_layer *fc = &m.L[6];
    float bound = 1.0f / sqrtf((float)fc->fan_in), lo = 1, hi = -1;
    for (size_t i = 0; i < fc->w_count; i++) {
        float v = a[fc->w_off / 4 + i];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    CHECK(lo >= -bound && hi <= bound && hi - lo > 1.8f * bound);
    size_t end0 = m.T[0].off + m.T[0].count * 4;
    CHECK(end0 < m.T[1].off && a[end0 / 4] == 0.0f);
    dg_free(a);
    dg_free(b);
    dg_free(c);
}

static void test_synth(void)
{
    dg_synth *s1, *s2;
    CHECK(dg_synth_new(ctx, 3, 10, 1, 8, 8, 100, &s1) == DG_OK);
    CHECK(dg_synth_new(ctx, 3, 10, 1, 8, 8, 200, &s2) == DG_OK);
    /* A sample depends on (seed, index) only, not on the data set's size. */
    CHECK(memcmp(s1->x, s2->x, 100 * 64 * sizeof(float)) == 0);
    CHECK(memcmp(s1->y, s2->y, 100 * sizeof(int32_t)) == 0);
    int seen[10] = {0};
    for (int i = 0; i < 100; i++)
        seen[s1->y[i]]++;
    int classes = 0;
    for (int k = 0; k < 10; k++)
        classes += seen[k] > 0;
    CHECK(classes >= 8);
    float x[16 * 64];
    int32_t y[16], y2[16];
    dg_synth_batch(s1, 0, 0, 16, x, y);
    dg_synth_batch(s1, 1, 0, 16, x, y2);
    CHECK(memcmp(y, y2, sizeof y) != 0); /* another epoch, another order */
    dg_synth_batch(s1, 0, 0, 16, x, y2);
    CHECK(memcmp(y, y2, sizeof y) == 0);
    dg_synth_free(s1);
    dg_synth_free(s2);
    dg_synth_free(NULL);
}

int main(void)
{
    ctx = dg_ctx_new();
    test_presets();
    test_strings();
    test_init();
    test_synth();
    dg_ctx_free(ctx);
    CHECK_DONE();
}
