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
    v.tf32 = true;
    bucket_of(s, v, b);
    CHECK_MSG(strcmp(a, b) != 0, "the math mode does not change the bucket");
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
    o.mem_available = 64e6;
    dg_loader *ld = NULL;
    CHECK(dg_loader_new(ctx, s, &o, &ld) == DG_ERR_USAGE && ld == NULL);
    CHECK_MSG(strstr(dg_errmsg(ctx), "2 batch slots of 4096 samples at 3x32x32") &&
                  strstr(dg_errmsg(ctx), "more than half of the 0.06 GB of memory available") &&
                  strstr(dg_errmsg(ctx), "--batch"),
              "%s", dg_errmsg(ctx));
    /* Enough memory: it runs, and the budget is a quarter of it per worker. */
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
        CHECK_MSG(budget == 250e6 && avail == 4e9 && fixed > 8 * 50e6 && fixed < 1e9,
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
    test_memory_budget();
    size_t live, peak;
    dg_host_mem_stats(&live, &peak);
    dg_ctx_free(ctx);
    CHECK_DONE();
}
