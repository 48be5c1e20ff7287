/* The batch loader: the same batches for any worker count, seeds that matter,
 * a disjoint and unaugmented validation split, bad samples skipped or failed
 * within their share, resize filters on tiny images, auto normalisation and
 * the bucket id's stability. */
#include "check.h"
#include "data/loader.h"

#include <openssl/evp.h>
#include <stdint.h>
#include <unistd.h>

static dg_ctx *ctx;

static dg_source *synth(uint64_t seed, size_t n, int c, int h, int w)
{
    dg_source_opts so = {
        .channels = c, .seed = seed, .samples = n, .classes = 10, .height = h, .width = w};
    dg_source *s = NULL;
    if (dg_source_open(ctx, "synthetic", &so, &s) != DG_OK)
        fprintf(stderr, "synthetic source: %s\n", dg_errmsg(ctx));
    return s;
}

static dg_loader_opts base_opts(int batch, int c, int h, int w)
{
    dg_loader_opts o = {.batch = batch, .channels = c, .nres = 1, .max_bad_share = -1, .seed = 7};
    o.res[0] = (dg_resolution){h, w, 1.0};
    return o;
}

/* SHA-256 over every batch (values, labels, sizes) of `epochs` epochs; "" on error. */
static void hash_run(dg_source *s, dg_loader_opts o, dg_split sp, int epochs, int steps,
                     char hex[65], dg_status *st_out)
{
    hex[0] = '\0';
    dg_loader *ld = NULL;
    dg_status st = dg_loader_new(ctx, s, &o, &ld);
    float *x = NULL;
    int32_t *y = NULL;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    EVP_DigestInit_ex(md, EVP_sha256(), NULL);
    if (st == DG_OK) {
        x = dg_malloc(dg_loader_batch_floats(ld) * sizeof(float));
        y = dg_malloc((size_t)o.batch * sizeof(int32_t));
        st = dg_loader_start(ld, sp, 0, epochs, steps);
        if (steps == 0)
            steps = (int)((dg_loader_count(ld, sp) + (size_t)o.batch - 1) / (size_t)o.batch);
    }
    for (int b = 0; st == DG_OK && b < epochs * steps; b++) {
        int h, w;
        if ((st = dg_loader_next(ld, x, y, &h, &w)) != DG_OK)
            break;
        EVP_DigestUpdate(md, x, sizeof(float) * (size_t)o.batch * o.channels * h * w);
        EVP_DigestUpdate(md, y, sizeof(int32_t) * (size_t)o.batch);
        EVP_DigestUpdate(md, &h, sizeof h);
        EVP_DigestUpdate(md, &w, sizeof w);
    }
    unsigned char d[32];
    unsigned len = 0;
    EVP_DigestFinal_ex(md, d, &len);
    EVP_MD_CTX_free(md);
    if (st == DG_OK)
        for (int i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", d[i]);
    if (st_out)
        *st_out = st;
    dg_free(x);
    dg_free(y);
    dg_loader_free(ld);
}

static void test_determinism(void)
{
    dg_source *s = synth(3, 200, 1, 12, 12);
    CHECK(s != NULL);
    if (!s)
        return;
    /* Augmented, auto-normalised, two resolutions (one resized). */
    dg_loader_opts o = base_opts(16, 1, 12, 12);
    o.crop = o.flip = true;
    o.norm = DG_NORM_AUTO;
    o.nres = 2;
    o.res[1] = (dg_resolution){10, 14, 0.5};
    char ref[65], h[65];
    dg_status st;
    o.workers = 0;
    hash_run(s, o, DG_SPLIT_TRAIN, 2, 0, ref, &st);
    CHECK_MSG(st == DG_OK && ref[0], "inline run: %s", dg_errmsg(ctx));
    int workers[] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        o.workers = workers[i];
        hash_run(s, o, DG_SPLIT_TRAIN, 2, 0, h, &st);
        CHECK_MSG(strcmp(h, ref) == 0, "%d workers differ from inline", workers[i]);
    }
    /* More steps than the epoch holds (wrapping), prefetch 1, cache on. */
    o.workers = 0;
    hash_run(s, o, DG_SPLIT_TRAIN, 2, 17, ref, &st);
    o.workers = 4;
    o.prefetch = 1;
    o.cache = true;
    hash_run(s, o, DG_SPLIT_TRAIN, 2, 17, h, &st);
    CHECK_MSG(strcmp(h, ref) == 0 && ref[0], "cached 4-worker run differs");
    o.prefetch = 0;
    o.cache = false;
    o.seed = 8;
    hash_run(s, o, DG_SPLIT_TRAIN, 2, 17, h, &st);
    CHECK_MSG(strcmp(h, ref) != 0, "another seed gave the same batches");
    dg_source_close(s);
}

/* The loader over the synthetic source without augmentation or normalisation
 * hands out exactly the fixture's original batches (dg_synth order). */
static void test_synthetic_identity(void)
{
    dg_source *s = synth(1, 50, 1, 6, 6);
    if (!s)
        return;
    dg_loader_opts o = base_opts(8, 1, 6, 6);
    dg_loader *ld = NULL;
    CHECK(dg_loader_new(ctx, s, &o, &ld) == DG_OK);
    CHECK(dg_loader_start(ld, DG_SPLIT_TRAIN, 0, 1, 7) == DG_OK);
    float x[8 * 36];
    int32_t y[8];
    int h, w;
    bool labels_ok = true;
    for (int b = 0; b < 7; b++) {
        CHECK(dg_loader_next(ld, x, y, &h, &w) == DG_OK);
        for (int j = 0; j < 8; j++)
            labels_ok = labels_ok && y[j] >= 0 && y[j] < 10;
    }
    CHECK(labels_ok);
    CHECK(dg_loader_next(ld, x, y, &h, &w) == DG_ERR_USAGE); /* past the end */
    dg_loader_free(ld);
    dg_source_close(s);
}

static void test_val_split(void)
{
    dg_source *s = synth(5, 100, 1, 8, 8);
    if (!s)
        return;
    dg_loader_opts o = base_opts(10, 1, 8, 8);
    o.val_split = 0.2;
    o.crop = o.flip = true;
    o.workers = 2;
    dg_loader *ld = NULL;
    CHECK(dg_loader_new(ctx, s, &o, &ld) == DG_OK);
    if (!ld)
        return;
    CHECK(dg_loader_count(ld, DG_SPLIT_VAL) == 20);
    CHECK(dg_loader_count(ld, DG_SPLIT_TRAIN) == 80);
    /* Which samples are in each split: read the raw samples to match by value. */
    float raw[100][64];
    for (size_t i = 0; i < 100; i++) {
        dg_image img = {0};
        dg_read_times t = {0, 0};
        char err[128];
        CHECK(dg_source_read(s, i, &img, &t, err, sizeof err) == DG_OK);
        memcpy(raw[i], img.data, sizeof raw[i]);
        dg_image_free(&img);
    }
    bool in_val[100] = {false}, in_train[100] = {false};
    float x[10 * 64];
    int32_t y[10];
    int h, w;
    /* Validation: two passes give the same, unaugmented samples. */
    for (int pass = 0; pass < 2; pass++) {
        CHECK(dg_loader_start(ld, DG_SPLIT_VAL, pass, 1, 0) == DG_OK);
        for (int b = 0; b < 2; b++) {
            CHECK(dg_loader_next(ld, x, y, &h, &w) == DG_OK);
            for (int j = 0; j < 10; j++) {
                int found = -1;
                for (int i = 0; i < 100; i++)
                    if (memcmp(raw[i], x + j * 64, sizeof raw[i]) == 0)
                        found = i;
                CHECK_MSG(found >= 0, "validation sample %d of batch %d was altered", j, b);
                if (found >= 0)
                    in_val[found] = true;
            }
        }
    }
    int nval = 0;
    for (int i = 0; i < 100; i++)
        nval += in_val[i];
    CHECK_MSG(nval == 20, "validation covered %d samples", nval);
    /* Training without augmentation: every sample is from the other 80. */
    o.crop = o.flip = false;
    dg_loader *tl = NULL;
    CHECK(dg_loader_new(ctx, s, &o, &tl) == DG_OK);
    if (tl) {
        CHECK(dg_loader_start(tl, DG_SPLIT_TRAIN, 0, 1, 8) == DG_OK);
        for (int b = 0; b < 8; b++) {
            CHECK(dg_loader_next(tl, x, y, &h, &w) == DG_OK);
            for (int j = 0; j < 10; j++)
                for (int i = 0; i < 100; i++)
                    if (memcmp(raw[i], x + j * 64, sizeof raw[i]) == 0)
                        in_train[i] = true;
        }
    }
    int ntrain = 0, both = 0;
    for (int i = 0; i < 100; i++) {
        ntrain += in_train[i];
        both += in_train[i] && in_val[i];
    }
    CHECK_MSG(ntrain == 80 && both == 0, "train covered %d, %d in both splits", ntrain, both);
    dg_loader_free(tl);
    dg_loader_free(ld);
    dg_source_close(s);
}

/* A source wrapper that makes every sample i with i % every == 0 bad. */
typedef struct bad_every {
    size_t every;
} bad_every;

static dg_status bad_read(void *user, dg_source *s, size_t i, dg_image *img, dg_read_times *t,
                          char *err, size_t errlen)
{
    const bad_every *b = user;
    if (b->every && i % b->every == 0) {
        snprintf(err, errlen, "sample%zu.png: truncated", i);
        return DG_ERR_FORMAT;
    }
    return dg_source_read(s, i, img, t, err, errlen);
}

static void test_bad_samples(void)
{
    dg_source *s = synth(9, 400, 1, 4, 4);
    if (!s)
        return;
    bad_every be = {.every = 50}; /* 8 of 400: 2% */
    dg_loader_opts o = base_opts(20, 1, 4, 4);
    o.read = bad_read;
    o.read_user = &be;
    o.max_bad_share = 0.05;
    char h0[65], h2[65];
    dg_status st;
    o.workers = 0;
    hash_run(s, o, DG_SPLIT_TRAIN, 2, 0, h0, &st);
    CHECK_MSG(st == DG_OK, "skip mode failed: %s", dg_errmsg(ctx));
    o.workers = 3;
    hash_run(s, o, DG_SPLIT_TRAIN, 2, 0, h2, &st);
    CHECK_MSG(st == DG_OK && strcmp(h0, h2) == 0, "skipping is not deterministic across workers");
    /* Counted, with messages, and no bad sample in any batch. */
    dg_loader *ld = NULL;
    CHECK(dg_loader_new(ctx, s, &o, &ld) == DG_OK);
    if (ld) {
        float x[20 * 16];
        int32_t y[20];
        int h, w;
        CHECK(dg_loader_start(ld, DG_SPLIT_TRAIN, 0, 1, 0) == DG_OK);
        for (int b = 0; b < 20; b++)
            CHECK(dg_loader_next(ld, x, y, &h, &w) == DG_OK);
        size_t bad, seen;
        dg_loader_bad_counts(ld, &bad, &seen);
        CHECK_MSG(bad == 8 && seen == 408, "bad %zu seen %zu", bad, seen);
        cJSON *js = dg_loader_stats_json(ld);
        cJSON *msgs = cJSON_GetObjectItem(cJSON_GetObjectItem(js, "bad_samples"), "messages");
        CHECK(cJSON_GetArraySize(msgs) == 8);
        CHECK(strstr(cJSON_GetArrayItem(msgs, 0)->valuestring, "truncated") != NULL);
        cJSON_Delete(js);
    }
    dg_loader_free(ld);
    /* Above the share: fails with the share in the message. */
    o.max_bad_share = 0.01;
    hash_run(s, o, DG_SPLIT_TRAIN, 1, 0, h2, &st);
    CHECK(st == DG_ERR_FORMAT);
    CHECK_MSG(strstr(dg_errmsg(ctx), "1.96%") != NULL, "message: %s", dg_errmsg(ctx));
    /* Fail mode: the first bad sample ends the run with its message. */
    o.max_bad_share = 0.5;
    o.on_bad_fail = true;
    hash_run(s, o, DG_SPLIT_TRAIN, 1, 0, h2, &st);
    CHECK(st == DG_ERR_FORMAT);
    CHECK_MSG(strstr(dg_errmsg(ctx), "truncated") != NULL, "message: %s", dg_errmsg(ctx));
    /* Everything bad: a clear failure, not a hang. */
    be.every = 1;
    o.on_bad_fail = false;
    o.max_bad_share = 1;
    hash_run(s, o, DG_SPLIT_TRAIN, 1, 0, h2, &st);
    CHECK(st == DG_ERR_FORMAT);
    dg_source_close(s);
}

static bool near(float a, float b)
{
    return fabsf(a - b) < 1e-5f;
}

static void test_resize(void)
{
    /* Area: 4x4 -> 2x2 averages each 2x2 block. */
    float src[16];
    for (int i = 0; i < 16; i++)
        src[i] = (float)i;
    float dst[16];
    dg_resize(src, 1, 4, 4, dst, 2, 2);
    CHECK(near(dst[0], 2.5f) && near(dst[1], 4.5f) && near(dst[2], 10.5f) && near(dst[3], 12.5f));
    /* Area with a non-integer ratio: 3 -> 2 along a row: [0,1,2] -> [1/3, 5/3]. */
    float r3[3] = {0, 1, 2}, r2[2];
    dg_resize(r3, 1, 1, 3, r2, 1, 2);
    CHECK(near(r2[0], (0 * 1.0f + 1 * 0.5f) / 1.5f) && near(r2[1], (1 * 0.5f + 2 * 1.0f) / 1.5f));
    /* Bilinear (half-pixel centres): [0, 1] -> [0, 0.25, 0.75, 1]. */
    float two[2] = {0, 1}, four[4];
    dg_resize(two, 1, 1, 2, four, 1, 4);
    CHECK(near(four[0], 0) && near(four[1], 0.25f) && near(four[2], 0.75f) && near(four[3], 1));
    /* 2x2 -> 3x3: the centre is the mean, corners the corners. */
    float q[4] = {0, 1, 2, 3}, n9[9];
    dg_resize(q, 1, 2, 2, n9, 3, 3);
    CHECK(near(n9[4], 1.5f) && near(n9[0], 0) && near(n9[8], 3));
    /* Equal size is a copy; a constant image stays constant either way. */
    float c[12], o1[30], o2[6];
    for (int i = 0; i < 12; i++)
        c[i] = 0.25f;
    dg_resize(c, 3, 2, 2, o1, 2, 5);
    dg_resize(c, 3, 2, 2, o2, 1, 2);
    bool flat = true;
    for (int i = 0; i < 30; i++)
        flat = flat && near(o1[i], 0.25f);
    for (int i = 0; i < 6; i++)
        flat = flat && near(o2[i], 0.25f);
    CHECK(flat);
}

static void test_auto_norm(void)
{
    dg_source *s = synth(11, 300, 3, 8, 8);
    if (!s)
        return;
    dg_loader_opts o = base_opts(30, 3, 8, 8);
    o.norm = DG_NORM_AUTO;
    o.workers = 2;
    dg_loader *ld = NULL;
    CHECK(dg_loader_new(ctx, s, &o, &ld) == DG_OK);
    if (!ld)
        return;
    float *x = dg_malloc(30 * 3 * 64 * sizeof(float));
    int32_t y[30];
    double sum[3] = {0}, sq[3] = {0}, n = 0;
    CHECK(dg_loader_start(ld, DG_SPLIT_TRAIN, 0, 1, 0) == DG_OK);
    for (int b = 0; b < 10; b++) {
        int h, w;
        CHECK(dg_loader_next(ld, x, y, &h, &w) == DG_OK);
        for (int j = 0; j < 30; j++)
            for (int c = 0; c < 3; c++)
                for (int i = 0; i < 64; i++) {
                    double v = x[(j * 3 + c) * 64 + i];
                    sum[c] += v;
                    sq[c] += v * v;
                }
        n += 30 * 64;
    }
    for (int c = 0; c < 3; c++) {
        double m = sum[c] / n, sd = sqrt(sq[c] / n - m * m);
        CHECK_MSG(fabs(m) < 1e-3 && fabs(sd - 1) < 1e-3, "channel %d: mean %g std %g", c, m, sd);
    }
    cJSON *b = dg_loader_bucket_json(ld);
    CHECK_STR(
        cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "normalize"), "mode")),
        "auto");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "normalize"), "mean")) ==
          3);
    cJSON_Delete(b);
    dg_free(x);
    dg_loader_free(ld);
    dg_source_close(s);
}

/* Writes a tiny IDX pair (n 4x4 images) into dir; flip changes one pixel byte. */
static bool write_idx(const char *dir, int n, bool flip, char *spec, size_t len)
{
    char pi[512], pl[512];
    snprintf(pi, sizeof pi, "%s/img.idx", dir);
    snprintf(pl, sizeof pl, "%s/lab.idx", dir);
    FILE *f = fopen(pi, "wb"), *g = fopen(pl, "wb");
    if (!f || !g) {
        if (f)
            fclose(f);
        if (g)
            fclose(g);
        return false;
    }
    unsigned char hi[16] = {0, 0, 8, 3, 0, 0, 0, (unsigned char)n, 0, 0, 0, 4, 0, 0, 0, 4};
    unsigned char hl[8] = {0, 0, 8, 1, 0, 0, 0, (unsigned char)n};
    fwrite(hi, 1, 16, f);
    fwrite(hl, 1, 8, g);
    for (int i = 0; i < n; i++) {
        unsigned char px[16], lab = (unsigned char)(i % 10);
        for (int k = 0; k < 16; k++)
            px[k] = (unsigned char)(i * 7 + k * 13);
        if (flip && i == n / 2)
            px[5] ^= 1;
        fwrite(px, 1, 16, f);
        fwrite(&lab, 1, 1, g);
    }
    fclose(f);
    fclose(g);
    snprintf(spec, len, "idx:%s,%s", pi, pl);
    return true;
}

static void bucket_of(dg_source *s, dg_loader_opts o, char id[65])
{
    dg_loader *ld = NULL;
    id[0] = '\0';
    o.workers = 0;
    if (dg_loader_new(ctx, s, &o, &ld) == DG_OK)
        snprintf(id, 65, "%s", dg_loader_bucket_id(ld));
    else
        fprintf(stderr, "loader: %s\n", dg_errmsg(ctx));
    dg_loader_free(ld);
}

static void test_bucket(void)
{
    char dir[] = "/tmp/dg_loader_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    char spec[1200];
    dg_source_opts so = {.channels = 1};
    dg_source *s = NULL;
    CHECK(write_idx(dir, 40, false, spec, sizeof spec));
    CHECK_MSG(dg_source_open(ctx, spec, &so, &s) == DG_OK, "idx: %s", dg_errmsg(ctx));
    if (!s)
        return;
    dg_loader_opts o = base_opts(8, 1, 4, 4);
    char a[65], b[65];
    bucket_of(s, o, a);
    bucket_of(s, o, b);
    CHECK(a[0] && strcmp(a, b) == 0);
    CHECK(strlen(a) == 64);
    dg_loader_opts v = o;
    v.batch = 9;
    bucket_of(s, v, b);
    CHECK_MSG(strcmp(a, b) != 0, "batch does not change the bucket");
    v = o;
    v.res[0].h = 5;
    bucket_of(s, v, b);
    CHECK_MSG(strcmp(a, b) != 0, "resolution does not change the bucket");
    v = o;
    v.flip = true;
    bucket_of(s, v, b);
    CHECK_MSG(strcmp(a, b) != 0, "augment does not change the bucket");
    v = o;
    v.norm = DG_NORM_AUTO;
    bucket_of(s, v, b);
    CHECK_MSG(strcmp(a, b) != 0, "normalize does not change the bucket");
    /* The workers, prefetch and cache are not part of the bucket. */
    v = o;
    v.cache = true;
    v.prefetch = 3;
    bucket_of(s, v, b);
    CHECK_MSG(strcmp(a, b) == 0, "cache or prefetch changed the bucket");
    /* The math mode changes numerics: TF32 runs are another bucket. */
    v = o;
    v.math = DG_MATH_TF32;
    bucket_of(s, v, b);
    CHECK_MSG(strcmp(a, b) != 0, "the math mode does not change the bucket");
    char bf[65];
    v.math = DG_MATH_BF16;
    bucket_of(s, v, bf);
    CHECK_MSG(strcmp(a, bf) != 0 && strcmp(b, bf) != 0, "bf16 shares a bucket with fp32 or tf32");
    /* Resolution order does not matter: the list is sorted. */
    o.nres = 2;
    o.res[1] = (dg_resolution){3, 3, 1};
    bucket_of(s, o, a);
    v = o;
    v.res[0] = o.res[1];
    v.res[1] = o.res[0];
    bucket_of(s, v, b);
    CHECK(strcmp(a, b) == 0);
    o.nres = 1;
    bucket_of(s, o, a);
    dg_source_close(s);
    /* One byte of the data set. */
    CHECK(write_idx(dir, 40, true, spec, sizeof spec));
    s = NULL;
    CHECK(dg_source_open(ctx, spec, &so, &s) == DG_OK);
    if (s) {
        bucket_of(s, o, b);
        CHECK_MSG(b[0] && strcmp(a, b) != 0, "a changed data byte does not change the bucket");
        dg_source_close(s);
    }
    /* Stable across runs and machines: the canonical text is fixed. */
    s = synth(1, 10, 1, 4, 4);
    if (s) {
        dg_loader *ld = NULL;
        o.workers = 0;
        CHECK(dg_loader_new(ctx, s, &o, &ld) == DG_OK);
        if (ld) {
            const char *t = dg_loader_bucket_text(ld);
            CHECK_MSG(
                strncmp(
                    t,
                    "{\"resolutions\":[{\"h\":4,\"w\":4,\"weight\":1}],\"augment\":[],\"batch\":8,"
                    "\"channels\":1,\"normalize\":{\"mode\":\"none\",\"mean\":[],\"std\":[]},"
                    "\"dataset\":{",
                    strlen("{\"resolutions\":[{\"h\":4,\"w\":4,\"weight\":1}],\"augment\":[],"
                           "\"batch\":8,"
                           "\"channels\":1,\"normalize\":{\"mode\":\"none\",\"mean\":[],\"std\":[]}"
                           ",\"dataset\":{")) == 0,
                "bucket text: %s", t);
            char h[65];
            dg_sha256_hex(t, strlen(t), h);
            CHECK_STR(h, dg_loader_bucket_id(ld));
        }
        dg_loader_free(ld);
        dg_source_close(s);
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

static void test_parse(void)
{
    dg_loader_opts o = {0};
    CHECK(dg_loader_parse_resolution(ctx, "32x32", &o) == DG_OK && o.nres == 1 && o.res[0].h == 32);
    CHECK(dg_loader_parse_resolution(ctx, "32x32:3,64x48:1", &o) == DG_OK && o.nres == 2 &&
          o.res[1].w == 48 && o.res[0].weight == 3);
    CHECK(dg_loader_parse_resolution(ctx, "32", &o) == DG_ERR_USAGE);
    CHECK(dg_loader_parse_resolution(ctx, "32x32:0", &o) == DG_ERR_USAGE);
    CHECK(dg_loader_parse_resolution(ctx, "0x32", &o) == DG_ERR_USAGE);
    CHECK(dg_loader_parse_augment(ctx, "flip,crop", &o) == DG_OK && o.crop && o.flip);
    CHECK(dg_loader_parse_augment(ctx, "none", &o) == DG_OK && !o.crop && !o.flip);
    CHECK(dg_loader_parse_augment(ctx, "rotate", &o) == DG_ERR_USAGE);
    CHECK(dg_loader_parse_normalize(ctx, "auto", &o) == DG_OK && o.norm == DG_NORM_AUTO);
    CHECK(dg_loader_parse_normalize(ctx, "0.5,0.4,0.3/0.2,0.2,0.25", &o) == DG_OK &&
          o.norm == DG_NORM_GIVEN && o.norm_count == 3 && near(o.std[2], 0.25f));
    CHECK(dg_loader_parse_normalize(ctx, "0.5/0", &o) == DG_ERR_USAGE);
    CHECK(dg_loader_parse_normalize(ctx, "0.5,0.4/0.2", &o) == DG_ERR_USAGE);
    CHECK(dg_loader_parse_normalize(ctx, "lots", &o) == DG_ERR_USAGE);
}

/* Freeing mid-epoch joins the workers without waiting for the run. */
static void test_free_midway(void)
{
    dg_source *s = synth(2, 500, 1, 16, 16);
    if (!s)
        return;
    dg_loader_opts o = base_opts(50, 1, 16, 16);
    o.workers = 4;
    o.crop = true;
    dg_loader *ld = NULL;
    CHECK(dg_loader_new(ctx, s, &o, &ld) == DG_OK);
    if (ld) {
        float *x = dg_malloc(dg_loader_batch_floats(ld) * sizeof(float));
        int32_t y[50];
        int h, w;
        CHECK(dg_loader_start(ld, DG_SPLIT_TRAIN, 0, 100, 0) == DG_OK);
        CHECK(dg_loader_next(ld, x, y, &h, &w) == DG_OK);
        /* Restarting mid-run works too. */
        CHECK(dg_loader_start(ld, DG_SPLIT_TRAIN, 3, 100, 0) == DG_OK);
        CHECK(dg_loader_next(ld, x, y, &h, &w) == DG_OK);
        dg_free(x);
    }
    dg_loader_free(ld);
    dg_source_close(s);
}

/* The record's loader figures may be read while the workers still fill
 * batches ahead (a run that stops early, or fails, writes its record then):
 * the cache counters they bump are read under the cache's lock (the TSan
 * tier sees an unlocked read race with the workers). */
static void test_stats_while_filling(void)
{
    dg_source *s = synth(4, 400, 1, 16, 16);
    if (!s)
        return;
    dg_loader_opts o = base_opts(20, 1, 16, 16);
    o.workers = 2;
    o.prefetch = 6;
    o.cache = true;
    dg_loader *ld = NULL;
    CHECK(dg_loader_new(ctx, s, &o, &ld) == DG_OK);
    if (ld) {
        dg_batch b;
        CHECK(dg_loader_start(ld, DG_SPLIT_TRAIN, 0, 4, 0) == DG_OK);
        CHECK(dg_loader_acquire(ld, &b) == DG_OK);
        double seen = 0;
        bool ok = true;
        for (int i = 1; i < 60 && ok; i++) {
            cJSON *j = dg_loader_stats_json(ld);
            const cJSON *c = cJSON_GetObjectItem(j, "cache");
            double n = cJSON_GetNumberValue(cJSON_GetObjectItem(c, "hits")) +
                       cJSON_GetNumberValue(cJSON_GetObjectItem(c, "misses"));
            CHECK_MSG(n >= seen && n >= 20.0 * i, "cache lookups %.0f after %.0f", n, seen);
            seen = n;
            cJSON_Delete(j);
            ok = dg_loader_release(ld, &b) == DG_OK && dg_loader_acquire(ld, &b) == DG_OK;
        }
        CHECK(ok && dg_loader_release(ld, &b) == DG_OK);
    }
    dg_loader_free(ld);
    dg_source_close(s);
}

/* A sum over a batch's values and labels, position-weighted so that another
 * batch (or the same samples reordered) gives another value. */
static double batch_sum(const float *x, const int32_t *y, size_t floats, int n)
{
    double s = 0;
    for (size_t i = 0; i < floats; i++)
        s += (double)x[i] * (double)(i % 97 + 1);
    for (int j = 0; j < n; j++)
        s += (double)y[j] * (j + 1);
    return s;
}

/* SHA-256 over `batches` batches taken with dg_loader_acquire/release
 * instead of dg_loader_next; "" on error. */
static void hash_acquired(dg_source *s, dg_loader_opts o, int batches, char hex[65])
{
    hex[0] = '\0';
    dg_loader *ld = NULL;
    if (dg_loader_new(ctx, s, &o, &ld) != DG_OK)
        return;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    EVP_DigestInit_ex(md, EVP_sha256(), NULL);
    dg_status st = dg_loader_start(ld, DG_SPLIT_TRAIN, 0, 1, batches);
    for (int k = 0; k < batches && st == DG_OK; k++) {
        dg_batch b;
        if ((st = dg_loader_acquire(ld, &b)) != DG_OK)
            break;
        CHECK(b.seq == k);
        EVP_DigestUpdate(md, b.x, sizeof(float) * (size_t)o.batch * o.channels * b.h * b.w);
        EVP_DigestUpdate(md, b.y, sizeof(int32_t) * (size_t)o.batch);
        EVP_DigestUpdate(md, &b.h, sizeof b.h);
        EVP_DigestUpdate(md, &b.w, sizeof b.w);
        st = dg_loader_release(ld, &b);
    }
    unsigned char d[32];
    unsigned len = 0;
    EVP_DigestFinal_ex(md, d, &len);
    EVP_MD_CTX_free(md);
    if (st == DG_OK)
        for (int i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", d[i]);
    dg_loader_free(ld);
}

/* Zero-copy batches: acquire hands out the slot itself, in batch order, with
 * the same content as dg_loader_next; a held slot is never refilled; the
 * hold limit, a batch whose slot is still held, foreign and double releases
 * and a restart while holding are refused with a message. */
static void test_acquire_release(void)
{
    dg_source *s = synth(5, 300, 1, 7, 7);
    if (!s)
        return;
    dg_loader_opts o = base_opts(16, 1, 7, 7);
    o.norm = DG_NORM_AUTO;
    char want[65], got[65];
    hash_run(s, o, DG_SPLIT_TRAIN, 1, 12, want, NULL);
    for (int wk = 0; wk <= 3; wk += 3) {
        o.workers = wk;
        hash_acquired(s, o, 12, got);
        CHECK_MSG(want[0] && strcmp(want, got) == 0, "workers %d: acquired %s, next %s", wk, got,
                  want);
    }

    /* 2 workers, hold 2: 4 slots (workers + hold). */
    o.workers = 2;
    dg_loader *ld = NULL;
    CHECK(dg_loader_new(ctx, s, &o, &ld) == DG_OK);
    if (!ld) {
        dg_source_close(s);
        return;
    }
    size_t floats = dg_loader_batch_floats(ld);
    cJSON *j = dg_loader_stats_json(ld);
    const cJSON *mem = cJSON_GetObjectItem(j, "memory");
    CHECK(cJSON_GetObjectItem(j, "prefetch")->valueint == 4);
    CHECK(cJSON_GetObjectItem(mem, "slot_count")->valueint == 4);
    CHECK(dg_json_metric_value(cJSON_GetObjectItem(mem, "slots")) ==
          4 * 3392.0); /* 3136 B of floats to 3328, 64 B of labels */
    CHECK(dg_json_metric_value(cJSON_GetObjectItem(mem, "page_locked")) == 0);
    cJSON_Delete(j);
    CHECK(dg_loader_start(ld, DG_SPLIT_TRAIN, 0, 1, 10) == DG_OK);
    dg_batch b0, b1, b2;
    CHECK(dg_loader_acquire(ld, &b0) == DG_OK && b0.seq == 0 && !b0.page_locked);
    /* labels follow the inputs at the first 256-byte boundary */
    CHECK((char *)b0.y - (char *)b0.x == 3328);
    double sum0 = batch_sum(b0.x, b0.y, floats, 16);
    CHECK(dg_loader_start(ld, DG_SPLIT_TRAIN, 0, 1, 10) == DG_ERR_USAGE &&
          strstr(dg_errmsg(ctx), "1 batch still held"));
    /* batches 1..3 come and go while 0 stays held; the workers run ahead */
    for (int k = 1; k <= 3; k++) {
        CHECK(dg_loader_acquire(ld, &b1) == DG_OK && b1.seq == k && b1.x != b0.x);
        if (k == 1) {
            CHECK(dg_loader_acquire(ld, &b2) == DG_ERR_USAGE &&
                  strstr(dg_errmsg(ctx), "2 batches held already") && b2.x == NULL);
        }
        CHECK(dg_loader_release(ld, &b1) == DG_OK && b1.x == NULL);
    }
    usleep(50000);
    /* a worker that refilled a held slot would have changed batch 0 here */
    CHECK_MSG(batch_sum(b0.x, b0.y, floats, 16) == sum0, "held batch 0 was overwritten");
    /* batch 4 needs batch 0's slot */
    CHECK(dg_loader_acquire(ld, &b1) == DG_ERR_USAGE &&
          strstr(dg_errmsg(ctx), "batch 0 is still held and batch 4 needs its slot"));
    dg_batch copy = b0, fake = b0;
    fake.x = (float *)&fake; /* not a slot */
    CHECK(dg_loader_release(ld, &fake) == DG_ERR_USAGE &&
          strstr(dg_errmsg(ctx), "did not hand out"));
    fake = b0;
    fake.slot = 99;
    CHECK(dg_loader_release(ld, &fake) == DG_ERR_USAGE &&
          strstr(dg_errmsg(ctx), "did not hand out"));
    CHECK(dg_loader_release(ld, NULL) == DG_ERR_USAGE);
    CHECK(dg_loader_release(ld, &b0) == DG_OK && dg_loader_held(ld) == 0);
    CHECK(dg_loader_release(ld, &copy) == DG_ERR_USAGE &&
          strstr(dg_errmsg(ctx), "batch 0 was released already"));
    /* out of turn: hold 4 (in batch 0's slot: its stale view is still
     * refused) and 5, give back 5 first */
    CHECK(dg_loader_acquire(ld, &b1) == DG_OK && b1.seq == 4 && b1.x == copy.x);
    CHECK(dg_loader_release(ld, &copy) == DG_ERR_USAGE &&
          strstr(dg_errmsg(ctx), "batch 0 was released already") && dg_loader_held(ld) == 1);
    CHECK(dg_loader_acquire(ld, &b2) == DG_OK && b2.seq == 5);
    CHECK(dg_loader_release(ld, &b2) == DG_OK && dg_loader_held(ld) == 1);
    CHECK(dg_loader_release(ld, &b1) == DG_OK && dg_loader_held(ld) == 0);
    /* the rest in order, the content as dg_loader_next would give it */
    for (int k = 6; k < 10; k++) {
        CHECK(dg_loader_acquire(ld, &b1) == DG_OK && b1.seq == k);
        CHECK(dg_loader_release(ld, &b1) == DG_OK);
    }
    CHECK(dg_loader_acquire(ld, &b1) == DG_ERR_USAGE && strstr(dg_errmsg(ctx), "no batches left"));
    /* shutdown with batches held frees their slots too (ASan: no leak) */
    CHECK(dg_loader_start(ld, DG_SPLIT_TRAIN, 0, 1, 10) == DG_OK);
    CHECK(dg_loader_acquire(ld, &b1) == DG_OK && dg_loader_acquire(ld, &b2) == DG_OK);
    CHECK(dg_loader_held(ld) == 2);
    dg_loader_free(ld);
    dg_source_close(s);
}

/* Slot memory from a caller's allocator (a backend's page-locked memory):
 * every slot from it while it gives, plain memory once it refuses, counted in
 * the stats, and all of it handed back to its free at shutdown. */
typedef struct counting_mem {
    int allocs, frees, limit;
    size_t bytes;
} counting_mem;

static dg_status counting_alloc(void *user, size_t bytes, void **p)
{
    counting_mem *m = user;
    if (m->allocs == m->limit)
        return DG_ERR_NOMEM;
    *p = dg_malloc(bytes);
    if (!*p)
        return DG_ERR_NOMEM;
    m->allocs++;
    m->bytes = bytes;
    return DG_OK;
}

static void counting_free(void *user, void *p)
{
    counting_mem *m = user;
    m->frees++;
    dg_free(p);
}

static void test_slot_memory(void)
{
    dg_source *s = synth(5, 300, 1, 7, 7);
    if (!s)
        return;
    char want[65], got[65];
    dg_loader_opts o = base_opts(16, 1, 7, 7);
    o.workers = 3;
    hash_run(s, o, DG_SPLIT_TRAIN, 1, 12, want, NULL);
    counting_mem m = {.limit = 3};
    o.slot_mem = (dg_loader_mem){counting_alloc, counting_free, &m};
    dg_loader *ld = NULL;
    CHECK(dg_loader_new(ctx, s, &o, &ld) == DG_OK);
    CHECK_MSG(m.allocs == 3 && m.bytes == 3392, "%d allocs of %zu bytes", m.allocs, m.bytes);
    if (ld) {
        cJSON *j = dg_loader_stats_json(ld);
        const cJSON *mem = cJSON_GetObjectItem(j, "memory");
        int slots = cJSON_GetObjectItem(mem, "slot_count")->valueint;
        CHECK_MSG(slots == 5, "%d slots (3 workers + hold 2)", slots);
        CHECK(dg_json_metric_value(cJSON_GetObjectItem(mem, "page_locked")) == 3 * 3392.0);
        CHECK(dg_json_metric_value(cJSON_GetObjectItem(mem, "slots")) == slots * 3392.0);
        cJSON_Delete(j);
        CHECK(dg_loader_start(ld, DG_SPLIT_TRAIN, 0, 1, 12) == DG_OK);
        int locked = 0;
        for (int k = 0; k < 12; k++) {
            dg_batch b;
            CHECK(dg_loader_acquire(ld, &b) == DG_OK);
            locked += b.page_locked;
            CHECK(dg_loader_release(ld, &b) == DG_OK);
        }
        /* batches 0-2, 5-7, 10-11 sit in slots 0-2, the allocator's */
        CHECK_MSG(locked == 8, "%d of 12 batches in the allocator's slots", locked);
        dg_batch held;
        CHECK(dg_loader_start(ld, DG_SPLIT_TRAIN, 0, 1, 12) == DG_OK);
        CHECK(dg_loader_acquire(ld, &held) == DG_OK);
    }
    dg_loader_free(ld);
    CHECK_MSG(m.frees == 3, "%d of 3 slots handed back", m.frees);
    hash_acquired(s, o, 12, got);
    CHECK_MSG(strcmp(want, got) == 0, "allocator slots: %s, plain: %s", got, want);
    /* alloc without free is refused */
    o.slot_mem.free = NULL;
    CHECK(dg_loader_new(ctx, s, &o, &ld) == DG_ERR_USAGE && ld == NULL);
    o.slot_mem = (dg_loader_mem){0};
    o.hold = 65;
    CHECK(dg_loader_new(ctx, s, &o, &ld) == DG_ERR_USAGE && ld == NULL);
    dg_source_close(s);
}

/* The synthetic source read in place (no image per sample) gives the batches
 * of the per-sample path (forced here by the cache), normalised or not. */
static void test_in_place(void)
{
    dg_source *s = synth(9, 100, 3, 6, 5);
    if (!s)
        return;
    for (int norm = 0; norm < 2; norm++) {
        dg_loader_opts o = base_opts(8, 3, 6, 5);
        o.norm = norm ? DG_NORM_AUTO : DG_NORM_NONE;
        o.workers = 2;
        char fast[65], slow[65];
        hash_run(s, o, DG_SPLIT_TRAIN, 2, 0, fast, NULL);
        dg_loader *ld = NULL;
        CHECK(dg_loader_new(ctx, s, &o, &ld) == DG_OK);
        if (ld) {
            float *x = dg_malloc(dg_loader_batch_floats(ld) * sizeof(float));
            int32_t y[8];
            int h, w;
            CHECK(dg_loader_start(ld, DG_SPLIT_TRAIN, 0, 1, 3) == DG_OK);
            for (int k = 0; k < 3; k++)
                CHECK(dg_loader_next(ld, x, y, &h, &w) == DG_OK);
            cJSON *j = dg_loader_stats_json(ld);
            const cJSON *st = cJSON_GetObjectItem(j, "stages");
            /* in place: nothing read, the copy is the normalise (or collate) stage */
            CHECK(dg_json_metric_value(cJSON_GetObjectItem(st, "read")) == 0);
            CHECK(dg_json_metric_value(cJSON_GetObjectItem(st, norm ? "normalise" : "collate")) >
                  0);
            cJSON_Delete(j);
            dg_free(x);
            dg_loader_free(ld);
        }
        o.cache = true;
        hash_run(s, o, DG_SPLIT_TRAIN, 2, 0, slow, NULL);
        CHECK_MSG(fast[0] && strcmp(fast, slow) == 0, "norm %d: in place %s, per sample %s", norm,
                  fast, slow);
    }
    dg_source_close(s);
}

/* The host-memory budget: batch slots and worker buffers that need more than
 * the memory available are refused up front with the sizes named; the
 * per-image decode budget follows the available memory and the workers, and
 * is reported with what it was held against. */
static void test_memory_budget(void)
{
    dg_source *s = synth(3, 64, 3, 32, 32);
    if (!s)
        return;
    /* 4096 samples of 3x32x32 floats are 50 MB a slot; 2 slots, 64 MB available. */
    dg_loader_opts o = base_opts(4096, 3, 32, 32);
    o.workers = 1;
    o.prefetch = 2;
    o.hold = 1; /* slots: at least workers + hold */
    o.mem_available = 64e6;
    dg_loader *ld = NULL;
    CHECK(dg_loader_new(ctx, s, &o, &ld) == DG_ERR_USAGE && ld == NULL);
    CHECK_MSG(strstr(dg_errmsg(ctx), "2 batch slots of 4096 samples at 3x32x32") &&
                  strstr(dg_errmsg(ctx), "more than half of the 0.06 GB of memory available") &&
                  strstr(dg_errmsg(ctx), "--batch"),
              "%s", dg_errmsg(ctx));
    /* Enough memory: it runs (5 slots: 4 workers + hold 1), and the budget is
     * a quarter of it per worker. */
    o.mem_available = 4e9;
    o.workers = 4;
    o.prefetch = 0;
    CHECK_MSG(dg_loader_new(ctx, s, &o, &ld) == DG_OK, "%s", dg_errmsg(ctx));
    if (ld) {
        cJSON *j = dg_loader_stats_json(ld);
        const cJSON *mem = cJSON_GetObjectItem(j, "memory");
        double budget = dg_json_metric_value(cJSON_GetObjectItem(mem, "image_budget"));
        double avail = dg_json_metric_value(cJSON_GetObjectItem(mem, "available"));
        double fixed = dg_json_metric_value(cJSON_GetObjectItem(mem, "fixed"));
        CHECK_MSG(budget == 250e6 && avail == 4e9 && fixed > 5 * 50e6 && fixed < 1e9,
                  "budget %.0f available %.0f fixed %.0f", budget, avail, fixed);
        CHECK(cJSON_GetObjectItem(j, "links") != NULL);
        cJSON_Delete(j);
        dg_loader_free(ld);
        ld = NULL;
    }
    /* Plenty of memory: the budget stops at 512 MiB; an explicit one wins. */
    o.mem_available = 1e12;
    CHECK(dg_loader_new(ctx, s, &o, &ld) == DG_OK);
    if (ld) {
        cJSON *j = dg_loader_stats_json(ld);
        double budget = dg_json_metric_value(
            cJSON_GetObjectItem(cJSON_GetObjectItem(j, "memory"), "image_budget"));
        CHECK_MSG(budget == 512.0 * 1048576, "budget %.0f", budget);
        cJSON_Delete(j);
        dg_loader_free(ld);
        ld = NULL;
    }
    o.max_image_bytes = 1000;
    CHECK(dg_loader_new(ctx, s, &o, &ld) == DG_OK);
    if (ld) {
        cJSON *j = dg_loader_stats_json(ld);
        double budget = dg_json_metric_value(
            cJSON_GetObjectItem(cJSON_GetObjectItem(j, "memory"), "image_budget"));
        CHECK(budget == 1000);
        cJSON_Delete(j);
        dg_loader_free(ld);
    }
    o.mem_available = -1;
    CHECK(dg_loader_new(ctx, s, &o, &ld) == DG_ERR_USAGE);
    dg_source_close(s);
}

int main(void)
{
    ctx = dg_ctx_new();
    test_resize();
    test_parse();
    test_synthetic_identity();
    test_determinism();
    test_val_split();
    test_bad_samples();
    test_auto_norm();
    test_bucket();
    test_free_midway();
    test_stats_while_filling();
    test_acquire_release();
    test_slot_memory();
    test_in_place();
    test_memory_budget();
    size_t live, peak;
    dg_host_mem_stats(&live, &peak);
    dg_ctx_free(ctx);
    CHECK_DONE();
}
