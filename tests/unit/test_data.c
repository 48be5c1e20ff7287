/* Data pipeline: PNG/JPEG decoding in every colour type, truncation and lies,
 * IDX (plain and gzip), CIFAR batches, image folders, identities, and
 * concurrent reads. Fixtures are written by this test into a temp folder. */
#include "check.h"
#include "core/core.h"
#include "data/data.h"
#include "data/synth.h"

#include <errno.h>
#include <jpeglib.h>
#include <png.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char tmp[512];

/* ---- fixture helpers ------------------------------------------------------ */

static char *path_of(const char *rel)
{
    static char buf[8][1024];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 1024, "%s/%s", tmp, rel);
    return p;
}

static int write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(len > 0 ? (size_t)len : 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

/* Writes a PNG: rows hold one sample per byte for depths < 8 (packed by
 * libpng), two big-endian bytes per sample at 16 bits. */
static int write_png(const char *path, int w, int h, int ctype, int depth, const unsigned char *px,
                     const png_color *pal, int npal, const unsigned char *trans, int ntrans,
                     int interlace)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        return -1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, ctype,
                 interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (pal)
        png_set_PLTE(png, info, pal, npal);
    if (trans)
        png_set_tRNS(png, info, trans, ntrans, NULL);
    png_write_info(png, info);
    if (depth < 8)
        png_set_packing(png);
    int ch = ctype == PNG_COLOR_TYPE_GRAY || ctype == PNG_COLOR_TYPE_PALETTE ? 1
             : ctype == PNG_COLOR_TYPE_GRAY_ALPHA                            ? 2
             : ctype == PNG_COLOR_TYPE_RGB                                   ? 3
                                                                             : 4;
    size_t stride = (size_t)w * ch * (depth == 16 ? 2 : 1);
    png_bytep *rows = malloc(sizeof(png_bytep) * h);
    for (int y = 0; y < h; y++)
        rows[y] = (png_bytep)px + y * stride;
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    return fclose(f);
}

/* Writes a JPEG of w x h with nc components (1 gray, 3 RGB), 4:4:4, quality 100. */
static int write_jpeg(const char *path, int w, int h, int nc, const unsigned char *px,
                      int progressive)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = nc;
    c.in_color_space = nc == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 100, TRUE);
    for (int i = 0; i < c.num_components; i++)
        c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
    if (progressive)
        jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)px + (size_t)c.next_scanline * w * nc;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return fclose(f);
}

static float px_at(const dg_image *im, int c, int y, int x)
{
    return im->data[((size_t)c * im->h + y) * im->w + x];
}

/* ---- PNG ------------------------------------------------------------------ */

enum { PW = 5, PH = 3 };

static dg_status decode_file(const char *path, int channels, dg_image *img, char *err, size_t n)
{
    size_t len = 0;
    unsigned char *b = slurp(path, &len);
    if (!b)
        return DG_ERR_IO;
    dg_status st = dg_decode_image(b, len, channels, img, err, n);
    free(b);
    return st;
}

static void test_png_gray(void)
{
    int depths[] = {1, 2, 4, 8, 16};
    for (int di = 0; di < 5; di++) {
        int d = depths[di];
        unsigned char px[PW * PH * 2];
        unsigned maxv = (1u << d) - 1;
        unsigned vals[PW * PH];
        for (int i = 0; i < PW * PH; i++) {
            vals[i] =
                d == 16 ? (unsigned)(i * 4099 + 17) % 65536 : (unsigned)(i * 7 + 1) % (maxv + 1);
            if (d == 16) {
                px[2 * i] = (unsigned char)(vals[i] >> 8);
                px[2 * i + 1] = (unsigned char)vals[i];
            } else {
                px[i] = (unsigned char)vals[i];
            }
        }
        char name[64];
        snprintf(name, sizeof name, "gray%d.png", d);
        CHECK(write_png(path_of(name), PW, PH, PNG_COLOR_TYPE_GRAY, d, px, NULL, 0, NULL, 0, 0) ==
              0);
        dg_image im;
        char err[256];
        dg_status st = decode_file(path_of(name), 0, &im, err, sizeof err);
        CHECK_MSG(st == DG_OK, "gray %d: %s", d, err);
        if (st)
            continue;
        CHECK(im.c == 1 && im.h == PH && im.w == PW);
        int bad = 0;
        for (int i = 0; i < PW * PH; i++) {
            float want =
                d == 16 ? (float)vals[i] / 65535.0f : (float)(vals[i] * (255 / maxv)) / 255.0f;
            if (im.data[i] != want)
                bad++;
        }
        CHECK_MSG(bad == 0, "gray %d-bit: %d pixels differ", d, bad);
        dg_image_free(&im);
        /* gray -> 3 channels replicates. */
        st = decode_file(path_of(name), 3, &im, err, sizeof err);
        CHECK(st == DG_OK && im.c == 3);
        if (!st) {
            bad = 0;
            for (int i = 0; i < PW * PH; i++)
                if (im.data[i] != im.data[PW * PH + i] || im.data[i] != im.data[2 * PW * PH + i])
                    bad++;
            CHECK(bad == 0);
        }
        dg_image_free(&im);
    }
    /* 16-bit extremes are exactly 0 and 1. */
    unsigned char px16[4] = {0, 0, 0xff, 0xff};
    CHECK(write_png(path_of("g16x.png"), 2, 1, PNG_COLOR_TYPE_GRAY, 16, px16, NULL, 0, NULL, 0,
                    0) == 0);
    dg_image im;
    char err[256];
    CHECK(decode_file(path_of("g16x.png"), 0, &im, err, sizeof err) == DG_OK);
    CHECK(im.data && im.data[0] == 0.0f && im.data[1] == 1.0f);
    dg_image_free(&im);
}

static void rgb_pattern(unsigned char *px, int w, int h, int nc)
{
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            unsigned char *p = px + ((size_t)y * w + x) * nc;
            p[0] = (unsigned char)(x * 50);
            if (nc >= 3) {
                p[1] = (unsigned char)(y * 80 + 10);
                p[2] = (unsigned char)((x + y) * 20 + 5);
            }
            if (nc == 2 || nc == 4)
                p[nc - 1] = (unsigned char)(255 - x * 40);
        }
}

static void test_png_color(void)
{
    dg_image im;
    char err[256];
    /* gray + alpha: alpha dropped */
    unsigned char ga[PW * PH * 2];
    rgb_pattern(ga, PW, PH, 2);
    CHECK(write_png(path_of("ga.png"), PW, PH, PNG_COLOR_TYPE_GRAY_ALPHA, 8, ga, NULL, 0, NULL, 0,
                    0) == 0);
    CHECK(decode_file(path_of("ga.png"), 0, &im, err, sizeof err) == DG_OK);
    CHECK(im.c == 1 && im.data && px_at(&im, 0, 2, 3) == 150 / 255.0f);
    dg_image_free(&im);
    /* RGB 8 and RGBA 8, interlaced RGB */
    for (int variant = 0; variant < 3; variant++) {
        int nc = variant == 1 ? 4 : 3;
        unsigned char px[PW * PH * 4];
        rgb_pattern(px, PW, PH, nc);
        const char *name = variant == 0 ? "rgb8.png" : variant == 1 ? "rgba8.png" : "rgbi.png";
        CHECK(write_png(path_of(name), PW, PH, nc == 4 ? PNG_COLOR_TYPE_RGBA : PNG_COLOR_TYPE_RGB,
                        8, px, NULL, 0, NULL, 0, variant == 2) == 0);
        dg_status st = decode_file(path_of(name), 0, &im, err, sizeof err);
        CHECK_MSG(st == DG_OK, "%s: %s", name, err);
        if (st)
            continue;
        CHECK(im.c == 3 && im.h == PH && im.w == PW);
        int bad = 0;
        for (int y = 0; y < PH; y++)
            for (int x = 0; x < PW; x++)
                for (int c = 0; c < 3; c++)
                    if (px_at(&im, c, y, x) != px[(y * PW + x) * nc + c] / 255.0f)
                        bad++;
        CHECK_MSG(bad == 0, "%s: %d values differ", name, bad);
        dg_image_free(&im);
        /* RGB -> 1 channel is BT.601 luma. */
        CHECK(decode_file(path_of(name), 1, &im, err, sizeof err) == DG_OK);
        CHECK(im.c == 1);
        bad = 0;
        for (int y = 0; im.data && y < PH; y++)
            for (int x = 0; x < PW; x++) {
                const unsigned char *p = px + (y * PW + x) * nc;
                float l =
                    0.299f * (p[0] / 255.0f) + 0.587f * (p[1] / 255.0f) + 0.114f * (p[2] / 255.0f);
                if (fabsf(px_at(&im, 0, y, x) - l) > 1e-6f)
                    bad++;
            }
        CHECK(bad == 0);
        dg_image_free(&im);
    }
    /* RGB 16 */
    unsigned char p16[PW * PH * 6];
    for (int i = 0; i < PW * PH * 3; i++) {
        unsigned v = (unsigned)(i * 3001 + 11) % 65536;
        p16[2 * i] = (unsigned char)(v >> 8);
        p16[2 * i + 1] = (unsigned char)v;
    }
    CHECK(write_png(path_of("rgb16.png"), PW, PH, PNG_COLOR_TYPE_RGB, 16, p16, NULL, 0, NULL, 0,
                    0) == 0);
    CHECK(decode_file(path_of("rgb16.png"), 0, &im, err, sizeof err) == DG_OK);
    if (im.data) {
        int bad = 0;
        for (int y = 0; y < PH; y++)
            for (int x = 0; x < PW; x++)
                for (int c = 0; c < 3; c++) {
                    int i = (y * PW + x) * 3 + c;
                    unsigned v = (unsigned)p16[2 * i] << 8 | p16[2 * i + 1];
                    if (px_at(&im, c, y, x) != (float)v / 65535.0f)
                        bad++;
                }
        CHECK_MSG(bad == 0, "rgb16: %d values differ", bad);
    }
    dg_image_free(&im);
    /* palette, without and with transparency */
    png_color pal[4] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {10, 20, 30}};
    unsigned char trans[4] = {255, 128, 0, 255};
    unsigned char idx[PW * PH];
    for (int i = 0; i < PW * PH; i++)
        idx[i] = (unsigned char)(i % 4);
    for (int t = 0; t < 2; t++) {
        const char *name = t ? "palt.png" : "pal.png";
        CHECK(write_png(path_of(name), PW, PH, PNG_COLOR_TYPE_PALETTE, 8, idx, pal, 4,
                        t ? trans : NULL, 4, 0) == 0);
        dg_status st = decode_file(path_of(name), 0, &im, err, sizeof err);
        CHECK_MSG(st == DG_OK, "%s: %s", name, err);
        if (st)
            continue;
        CHECK(im.c == 3);
        int bad = 0;
        for (int i = 0; i < PW * PH; i++) {
            const png_color *p = &pal[i % 4];
            if (im.data[i] != p->red / 255.0f || im.data[PW * PH + i] != p->green / 255.0f ||
                im.data[2 * PW * PH + i] != p->blue / 255.0f)
                bad++;
        }
        CHECK_MSG(bad == 0, "%s: %d pixels differ", name, bad);
        dg_image_free(&im);
    }
}

static int mentions_bad(const char *err)
{
    return strstr(err, "truncated") || strstr(err, "corrupt") || strstr(err, "CRC") ||
           strstr(err, "Corrupt");
}

/* Rewrites the IHDR size of a PNG in memory and fixes its CRC. */
static void png_set_size(unsigned char *b, uint32_t w, uint32_t h)
{
    for (int i = 0; i < 4; i++) {
        b[16 + i] = (unsigned char)(w >> (24 - 8 * i));
        b[20 + i] = (unsigned char)(h >> (24 - 8 * i));
    }
    uint32_t crc = (uint32_t)crc32(0, b + 12, 17);
    for (int i = 0; i < 4; i++)
        b[29 + i] = (unsigned char)(crc >> (24 - 8 * i));
}

static void test_png_bad(void)
{
    size_t len = 0;
    unsigned char *b = slurp(path_of("rgb8.png"), &len);
    CHECK(b && len > 60);
    if (!b)
        return;
    size_t cuts[] = {8, 12, 20, 33, 40, len / 2, len - 13, len - 1};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        dg_image im;
        char err[256] = "";
        unsigned char *c = malloc(cuts[k]);
        memcpy(c, b, cuts[k]);
        dg_status st = dg_decode_image(c, cuts[k], 0, &im, err, sizeof err);
        CHECK_MSG(st == DG_ERR_FORMAT && mentions_bad(err), "png cut at %zu: %d %s", cuts[k], st,
                  err);
        CHECK(im.data == NULL);
        free(c);
    }
    /* huge header */
    unsigned char *c = malloc(len);
    memcpy(c, b, len);
    png_set_size(c, 20000, 20000);
    dg_image im;
    char err[256] = "";
    CHECK(dg_decode_image(c, len, 0, &im, err, sizeof err) == DG_ERR_FORMAT);
    CHECK_MSG(strstr(err, "16384") != NULL, "%s", err);
    /* a plausible-size header over far too little data */
    memcpy(c, b, len);
    png_set_size(c, 16000, 16000);
    CHECK(dg_decode_image(c, len, 0, &im, err, sizeof err) == DG_ERR_FORMAT);
    CHECK_MSG(mentions_bad(err), "%s", err);
    free(c);
    free(b);
    /* text renamed .png */
    const char *txt = "hello, this is not an image\n";
    CHECK(dg_decode_image((const unsigned char *)txt, strlen(txt), 0, &im, err, sizeof err) ==
          DG_ERR_FORMAT);
    CHECK(strstr(err, "not a PNG or JPEG") != NULL);
    CHECK(dg_decode_image(NULL, 0, 0, &im, err, sizeof err) == DG_ERR_FORMAT);
    CHECK(dg_decode_image((const unsigned char *)txt, strlen(txt), 2, &im, err, sizeof err) ==
          DG_ERR_USAGE);
}

/* ---- JPEG ----------------------------------------------------------------- */

enum { JW = 16, JH = 16 };

/* 8x8 blocks of flat colour so quality-100 4:4:4 JPEG keeps them closely. */
static void jpeg_pattern(unsigned char *px, int nc)
{
    for (int y = 0; y < JH; y++)
        for (int x = 0; x < JW; x++) {
            int blk = (y / 8) * 2 + x / 8;
            unsigned char *p = px + ((size_t)y * JW + x) * nc;
            p[0] = (unsigned char)(40 + blk * 50);
            if (nc == 3) {
                p[1] = (unsigned char)(200 - blk * 40);
                p[2] = (unsigned char)(blk & 1 ? 220 : 30);
            }
        }
}

static void test_jpeg(void)
{
    struct {
        const char *name;
        int nc, prog;
    } cases[] = {{"gray.jpg", 1, 0}, {"rgb.jpg", 3, 0}, {"prog.jpg", 3, 1}};
    for (int k = 0; k < 3; k++) {
        unsigned char px[JW * JH * 3];
        int nc = cases[k].nc;
        jpeg_pattern(px, nc);
        CHECK(write_jpeg(path_of(cases[k].name), JW, JH, nc, px, cases[k].prog) == 0);
        dg_image im;
        char err[256];
        dg_status st = decode_file(path_of(cases[k].name), 0, &im, err, sizeof err);
        CHECK_MSG(st == DG_OK, "%s: %s", cases[k].name, err);
        if (st)
            continue;
        CHECK(im.c == nc && im.h == JH && im.w == JW);
        float worst = 0;
        for (int y = 0; y < JH; y++)
            for (int x = 0; x < JW; x++)
                for (int c = 0; c < nc; c++) {
                    float d = fabsf(px_at(&im, c, y, x) - px[(y * JW + x) * nc + c] / 255.0f);
                    worst = d > worst ? d : worst;
                }
        CHECK_MSG(worst < 0.03f, "%s: worst error %g", cases[k].name, worst);
        dg_image_free(&im);
        /* conversions: gray -> 3, RGB -> 1 */
        st = decode_file(path_of(cases[k].name), nc == 1 ? 3 : 1, &im, err, sizeof err);
        CHECK(st == DG_OK && im.c == (nc == 1 ? 3 : 1));
        dg_image_free(&im);
        /* truncation at several lengths */
        size_t len = 0;
        unsigned char *b = slurp(path_of(cases[k].name), &len);
        size_t cuts[] = {3, 20, 200, len / 2, len - 2, len - 1};
        for (size_t j = 0; b && j < sizeof cuts / sizeof cuts[0]; j++) {
            unsigned char *c = malloc(cuts[j]);
            memcpy(c, b, cuts[j]);
            err[0] = 0;
            st = dg_decode_image(c, cuts[j], 0, &im, err, sizeof err);
            CHECK_MSG(st == DG_ERR_FORMAT && mentions_bad(err), "%s cut at %zu: %d %s",
                      cases[k].name, cuts[j], st, err);
            CHECK(im.data == NULL);
            free(c);
        }
        /* huge dimensions in SOF */
        for (size_t i = 2; b && i + 9 < len; i++)
            if (b[i] == 0xFF && (b[i + 1] == 0xC0 || b[i + 1] == 0xC2)) {
                b[i + 5] = 0x4e, b[i + 6] = 0x20; /* height 20000 */
                b[i + 7] = 0x4e, b[i + 8] = 0x20; /* width 20000 */
                break;
            }
        CHECK(b && dg_decode_image(b, len, 0, &im, err, sizeof err) == DG_ERR_FORMAT);
        CHECK_MSG(strstr(err, "16384") != NULL, "%s", err);
        free(b);
    }
}

/* ---- IDX ------------------------------------------------------------------ */

static size_t make_idx(unsigned char *b, int ndim, const uint32_t *dims, const unsigned char *data,
                       size_t n)
{
    b[0] = b[1] = 0;
    b[2] = 0x08;
    b[3] = (unsigned char)ndim;
    for (int d = 0; d < ndim; d++)
        for (int i = 0; i < 4; i++)
            b[4 + 4 * d + i] = (unsigned char)(dims[d] >> (24 - 8 * i));
    memcpy(b + 4 + 4 * ndim, data, n);
    return 4 + 4 * (size_t)ndim + n;
}

static int write_gz(const char *path, const void *data, size_t n)
{
    gzFile g = gzopen(path, "wb");
    if (!g)
        return -1;
    int w = gzwrite(g, data, (unsigned)n);
    return gzclose(g) == Z_OK && w == (int)n ? 0 : -1;
}

static void test_idx(dg_ctx *ctx)
{
    enum { N = 7, H = 4, W = 3 };
    unsigned char pix[N * H * W], lab[N], b[1024];
    for (int i = 0; i < N * H * W; i++)
        pix[i] = (unsigned char)(i * 37 % 256);
    for (int i = 0; i < N; i++)
        lab[i] = (unsigned char)(i % 5);
    uint32_t di[3] = {N, H, W}, dl[1] = {N};
    size_t n = make_idx(b, 3, di, pix, sizeof pix);
    CHECK(write_bytes(path_of("img.idx"), b, n) == 0);
    CHECK(write_gz(path_of("img.idx.gz"), b, n) == 0);
    /* parse directly */
    dg_idx idx;
    char err[256];
    CHECK(dg_idx_parse(b, n, &idx, err, sizeof err) == DG_OK);
    CHECK(idx.count == N && idx.item_bytes == H * W && idx.ndim == 3 && idx.data == b + 16);
    CHECK(dg_idx_parse(b, n - 1, &idx, err, sizeof err) == DG_ERR_FORMAT);
    CHECK_MSG(strstr(err, "header says 7 items of 12 bytes, file has 83 bytes") != NULL, "%s", err);
    unsigned char t = b[2];
    b[2] = 0x0D;
    CHECK(dg_idx_parse(b, n, &idx, err, sizeof err) == DG_ERR_FORMAT && strstr(err, "0x0d"));
    b[2] = t;
    n = make_idx(b, 1, dl, lab, sizeof lab);
    CHECK(write_bytes(path_of("lab.idx"), b, n) == 0);
    CHECK(write_gz(path_of("lab.idx.gz"), b, n) == 0);
    const char *specs[2][2] = {{"img.idx", "lab.idx"}, {"img.idx.gz", "lab.idx.gz"}};
    char *ids[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        char spec[2200];
        snprintf(spec, sizeof spec, "idx:%s,%s", path_of(specs[k][0]), path_of(specs[k][1]));
        dg_source *s = NULL;
        dg_status st = dg_source_open(ctx, spec, NULL, &s);
        CHECK_MSG(st == DG_OK, "%s", dg_errmsg(ctx));
        if (st)
            continue;
        CHECK(dg_source_count(s) == N && dg_source_classes(s) == 5);
        CHECK_STR(dg_source_kind(s), "idx");
        int c, h, w;
        dg_source_shape(s, &c, &h, &w);
        CHECK(c == 1 && h == H && w == W);
        dg_image im;
        CHECK(dg_source_read(s, 5, &im, NULL, err, sizeof err) == DG_OK);
        CHECK(im.label == 0 && im.c == 1 && im.data && im.data[7] == pix[5 * H * W + 7] / 255.0f);
        dg_image_free(&im);
        CHECK(dg_source_read(s, N, &im, NULL, err, sizeof err) == DG_ERR_USAGE);
        cJSON *id = dg_source_identity(s);
        ids[k] = cJSON_PrintUnformatted(id);
        cJSON *files = cJSON_GetObjectItem(id, "files");
        CHECK(cJSON_GetArraySize(files) == 2);
        CHECK(strstr(ids[k], tmp) == NULL); /* no absolute paths */
        cJSON_Delete(id);
        dg_source_close(s);
    }
    /* plain and gzip name different files, so different identities */
    CHECK(ids[0] && ids[1] && strcmp(ids[0], ids[1]) != 0);
    cJSON_free(ids[0]);
    cJSON_free(ids[1]);
    /* lies and mismatches */
    struct {
        const char *file;
        int ndim;
        uint32_t dims[2];
        size_t nbytes;
        const char *want;
    } bad[] = {
        {"lab_lie.idx", 1, {N + 1, 0}, N, "header says 8 items"},
        {"lab_short.idx", 1, {N - 1, 0}, N - 1, "labels"},
        {"lab_2d.idx", 2, {N, 1}, N, "1 dimension"},
    };
    for (int k = 0; k < 3; k++) {
        n = make_idx(b, bad[k].ndim, bad[k].dims, lab, bad[k].nbytes);
        CHECK(write_bytes(path_of(bad[k].file), b, n) == 0);
        char spec[2200];
        snprintf(spec, sizeof spec, "idx:%s,%s", path_of("img.idx.gz"), path_of(bad[k].file));
        dg_source *s = NULL;
        CHECK(dg_source_open(ctx, spec, NULL, &s) == DG_ERR_FORMAT && s == NULL);
        CHECK_MSG(strstr(dg_errmsg(ctx), bad[k].want) != NULL, "%s", dg_errmsg(ctx));
        if (k != 1)
            CHECK_MSG(strstr(dg_errmsg(ctx), bad[k].file) != NULL, "%s", dg_errmsg(ctx));
    }
    /* a truncated gzip file */
    size_t glen = 0;
    unsigned char *g = slurp(path_of("img.idx.gz"), &glen);
    CHECK(g && write_bytes(path_of("cut.idx.gz"), g, glen / 2) == 0);
    free(g);
    char spec[2200];
    snprintf(spec, sizeof spec, "idx:%s,%s", path_of("cut.idx.gz"), path_of("lab.idx"));
    dg_source *s = NULL;
    CHECK(dg_source_open(ctx, spec, NULL, &s) == DG_ERR_FORMAT);
    CHECK_MSG(strstr(dg_errmsg(ctx), "truncated") && strstr(dg_errmsg(ctx), "cut.idx.gz"), "%s",
              dg_errmsg(ctx));
    snprintf(spec, sizeof spec, "idx:%s,%s", path_of("missing.idx"), path_of("lab.idx"));
    CHECK(dg_source_open(ctx, spec, NULL, &s) == DG_ERR_IO);
}

/* ---- CIFAR ---------------------------------------------------------------- */

static void test_cifar(dg_ctx *ctx)
{
    enum { R = 3073, N = 5 };
    unsigned char *b = malloc(R * N + R / 2);
    for (int i = 0; i < N; i++) {
        b[i * R] = (unsigned char)(i % 10 == 3 ? 9 : i);
        for (int j = 1; j < R; j++)
            b[i * R + j] = (unsigned char)((i * 31 + j * 7) % 256);
    }
    CHECK(mkdir(path_of("cifar"), 0700) == 0);
    CHECK(write_bytes(path_of("cifar/data_batch_1.bin"), b, R * N) == 0);
    char spec[1100];
    snprintf(spec, sizeof spec, "cifar:%s", path_of("cifar"));
    dg_source *s = NULL;
    CHECK_MSG(dg_source_open(ctx, spec, NULL, &s) == DG_OK, "%s", dg_errmsg(ctx));
    if (s) {
        CHECK(dg_source_count(s) == N && dg_source_classes(s) == 10);
        int c, h, w;
        dg_source_shape(s, &c, &h, &w);
        CHECK(c == 3 && h == 32 && w == 32);
        dg_image im;
        char err[256];
        CHECK(dg_source_read(s, 3, &im, NULL, err, sizeof err) == DG_OK);
        CHECK(im.label == 9 && im.c == 3);
        /* channel 1, row 2, column 5 is byte 1 + 1024 + 2*32 + 5 of the record */
        CHECK(im.data && px_at(&im, 1, 2, 5) == b[3 * R + 1 + 1024 + 69] / 255.0f);
        dg_image_free(&im);
        dg_source_close(s);
    }
    size_t recs;
    char err[256];
    CHECK(dg_cifar_check(b, R * N, &recs, err, sizeof err) == DG_OK && recs == N);
    /* 5.5 records */
    CHECK(write_bytes(path_of("cifar/data_batch_1.bin"), b, R * N + R / 2) == 0);
    CHECK(dg_source_open(ctx, spec, NULL, &s) == DG_ERR_FORMAT);
    CHECK_MSG(strstr(dg_errmsg(ctx), "data_batch_1.bin") != NULL, "%s", dg_errmsg(ctx));
    /* label 11 */
    b[2 * R] = 11;
    CHECK(write_bytes(path_of("cifar/data_batch_1.bin"), b, R * N) == 0);
    CHECK(dg_source_open(ctx, spec, NULL, &s) == DG_ERR_FORMAT);
    CHECK_MSG(strstr(dg_errmsg(ctx), "data_batch_1.bin") && strstr(dg_errmsg(ctx), "label 11"),
              "%s", dg_errmsg(ctx));
    CHECK(dg_cifar_check(b, R * N, &recs, err, sizeof err) == DG_ERR_FORMAT);
    /* an empty folder has no batches */
    CHECK(mkdir(path_of("cifar_empty"), 0700) == 0);
    snprintf(spec, sizeof spec, "cifar:%s", path_of("cifar_empty"));
    CHECK(dg_source_open(ctx, spec, NULL, &s) != DG_OK);
    free(b);
}

/* ---- image folders, identity, threads ------------------------------------- */

static void make_tree(const char *root)
{
    char p[1200];
    const char *cls[3] = {"ant", "bee", "cow"};
    CHECK(mkdir(root, 0700) == 0);
    for (int k = 0; k < 3; k++) {
        snprintf(p, sizeof p, "%s/%s", root, cls[k]);
        CHECK(mkdir(p, 0700) == 0);
    }
    unsigned char px[JW * JH * 3];
    rgb_pattern(px, PW, PH, 3);
    snprintf(p, sizeof p, "%s/ant/a1.png", root);
    write_png(p, PW, PH, PNG_COLOR_TYPE_RGB, 8, px, NULL, 0, NULL, 0, 0);
    snprintf(p, sizeof p, "%s/ant/a2.PNG", root);
    write_png(p, PW, PH, PNG_COLOR_TYPE_RGB, 8, px, NULL, 0, NULL, 0, 1);
    snprintf(p, sizeof p, "%s/ant/notes.txt", root);
    write_bytes(p, "ignored", 7);
    /* a noisy 80x80 RGB PNG: large enough that its middle is a separate sample */
    unsigned char *noise = malloc(80 * 80 * 3);
    uint32_t r = 12345;
    for (int i = 0; i < 80 * 80 * 3; i++) {
        r = r * 1103515245u + 12345u;
        noise[i] = (unsigned char)(r >> 16);
    }
    snprintf(p, sizeof p, "%s/bee/big.png", root);
    write_png(p, 80, 80, PNG_COLOR_TYPE_RGB, 8, noise, NULL, 0, NULL, 0, 0);
    free(noise);
    snprintf(p, sizeof p, "%s/bee/bad.png", root);
    write_bytes(p, "this is text, not a picture\n", 28);
    jpeg_pattern(px, 1);
    snprintf(p, sizeof p, "%s/cow/c1.jpeg", root);
    write_jpeg(p, JW, JH, 1, px, 0);
    jpeg_pattern(px, 3);
    snprintf(p, sizeof p, "%s/cow/c2.JPG", root);
    write_jpeg(p, JW, JH, 3, px, 1);
}

static char *identity_sha(dg_ctx *ctx, const char *root)
{
    char spec[1200];
    snprintf(spec, sizeof spec, "images:%s", root);
    dg_source *s = NULL;
    if (dg_source_open(ctx, spec, NULL, &s) != DG_OK)
        return NULL;
    cJSON *id = dg_source_identity(s);
    cJSON *sha = cJSON_GetObjectItem(id, "sha256");
    char *out = cJSON_IsString(sha) ? strdup(sha->valuestring) : NULL;
    cJSON_Delete(id);
    dg_source_close(s);
    return out;
}

typedef struct reader {
    dg_source *s;
    size_t n;
    dg_image *imgs;
    dg_status *st;
} reader;

static void *read_all(void *arg)
{
    reader *r = arg;
    char err[256];
    for (size_t i = 0; i < r->n; i++)
        r->st[i] = dg_source_read(r->s, i, &r->imgs[i], NULL, err, sizeof err);
    return NULL;
}

static int same_image(const dg_image *a, const dg_image *b)
{
    if (a->c != b->c || a->h != b->h || a->w != b->w || a->label != b->label)
        return 0;
    if (!a->data || !b->data)
        return a->data == b->data;
    return memcmp(a->data, b->data, sizeof(float) * a->c * a->h * a->w) == 0;
}

static void check_threads(dg_source *s)
{
    size_t n = dg_source_count(s);
    reader serial = {s, n, calloc(n, sizeof(dg_image)), calloc(n, sizeof(dg_status))};
    read_all(&serial);
    reader par[4];
    pthread_t th[4];
    for (int t = 0; t < 4; t++) {
        par[t] = (reader){s, n, calloc(n, sizeof(dg_image)), calloc(n, sizeof(dg_status))};
        CHECK(pthread_create(&th[t], NULL, read_all, &par[t]) == 0);
    }
    int bad = 0;
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        for (size_t i = 0; i < n; i++) {
            if (par[t].st[i] != serial.st[i] || !same_image(&par[t].imgs[i], &serial.imgs[i]))
                bad++;
            dg_image_free(&par[t].imgs[i]);
        }
        free(par[t].imgs);
        free(par[t].st);
    }
    CHECK_MSG(bad == 0, "%s: %d samples differ between threads and the serial read",
              dg_source_kind(s), bad);
    for (size_t i = 0; i < n; i++)
        dg_image_free(&serial.imgs[i]);
    free(serial.imgs);
    free(serial.st);
}

static void test_images(dg_ctx *ctx)
{
    char root[1100], spec[1200];
    snprintf(root, sizeof root, "%s", path_of("tree"));
    make_tree(root);
    snprintf(spec, sizeof spec, "images:%s", root);
    dg_source *s = NULL;
    dg_source_opts o = {.channels = 3};
    CHECK_MSG(dg_source_open(ctx, spec, &o, &s) == DG_OK, "%s", dg_errmsg(ctx));
    if (!s)
        return;
    CHECK(dg_source_count(s) == 6 && dg_source_classes(s) == 3);
    CHECK_STR(dg_source_kind(s), "images");
    int c, h, w;
    dg_source_shape(s, &c, &h, &w);
    CHECK(c == 3 && h == 0 && w == 0);
    /* order: ant/a1.png ant/a2.PNG bee/bad.png bee/big.png cow/c1.jpeg cow/c2.JPG */
    int labels[6] = {0, 0, 1, 1, 2, 2};
    int sizes[6] = {PW, PW, 0, 80, JW, JW};
    for (size_t i = 0; i < 6; i++) {
        dg_image im;
        char err[512] = "";
        dg_read_times t = {0, 0};
        dg_status st = dg_source_read(s, i, &im, &t, err, sizeof err);
        if (i == 2) {
            CHECK(st == DG_ERR_FORMAT && im.data == NULL);
            CHECK_MSG(strstr(err, "bad.png") && strstr(err, "not a PNG or JPEG"), "%s", err);
        } else {
            CHECK_MSG(st == DG_OK, "sample %zu: %s", i, err);
            CHECK(im.label == labels[i] && im.c == 3 && im.w == sizes[i]);
            CHECK(t.read >= 0 && t.decode > 0);
        }
        dg_image_free(&im);
    }
    cJSON *id = dg_source_identity(s);
    char *txt = cJSON_PrintUnformatted(id);
    CHECK(txt && strstr(txt, "\"kind\":\"images\"") && strstr(txt, "\"name\":\"bee/big.png\""));
    CHECK(txt && strstr(txt, tmp) == NULL);
    CHECK(cJSON_GetObjectItem(id, "samples")->valuedouble == 6);
    cJSON_free(txt);
    cJSON_Delete(id);
    check_threads(s);
    dg_source_close(s);

    /* identity: stable, moved tree equal, one middle byte changes it */
    char *a = identity_sha(ctx, root), *b = identity_sha(ctx, root);
    CHECK(a && b && strcmp(a, b) == 0 && strlen(a) == 64);
    char moved[1100];
    snprintf(moved, sizeof moved, "%s", path_of("elsewhere"));
    CHECK(mkdir(moved, 0700) == 0);
    char moved_root[1200];
    snprintf(moved_root, sizeof moved_root, "%s/tree_copy_with_longer_name", moved);
    make_tree(moved_root);
    char *m = identity_sha(ctx, moved_root);
    CHECK(a && m && strcmp(a, m) == 0);
    char p[1300];
    snprintf(p, sizeof p, "%s/bee/big.png", moved_root);
    size_t len = 0;
    unsigned char *buf = slurp(p, &len);
    CHECK(buf && len > 3 * 4096);
    if (buf) {
        buf[len / 2] ^= 0x01;
        write_bytes(p, buf, len);
        free(buf);
    }
    char *m2 = identity_sha(ctx, moved_root);
    CHECK(a && m2 && strcmp(a, m2) != 0);
    free(a);
    free(b);
    free(m);
    free(m2);

    /* an empty class folder fails the open and is named */
    snprintf(p, sizeof p, "%s/dodo", root);
    CHECK(mkdir(p, 0700) == 0);
    CHECK(dg_source_open(ctx, spec, NULL, &s) == DG_ERR_FORMAT && s == NULL);
    CHECK_MSG(strstr(dg_errmsg(ctx), "dodo") && strstr(dg_errmsg(ctx), "empty"), "%s",
              dg_errmsg(ctx));
    /* a missing folder */
    snprintf(spec, sizeof spec, "images:%s", path_of("nope"));
    CHECK(dg_source_open(ctx, spec, NULL, &s) == DG_ERR_IO);
}

/* Symlinks in an image folder: a class folder linked to another class is
 * skipped (not an extra class with the same images), one linked to a folder
 * elsewhere is followed, loops and dangling links are skipped, an image
 * linked into another class is counted; all are counted and explained. */
static void test_links(dg_ctx *ctx)
{
    char root[1100], p[1300], q[1300], spec[1200];
    snprintf(root, sizeof root, "%s", path_of("links"));
    unsigned char px[PW * PH * 3];
    rgb_pattern(px, PW, PH, 3);
    const char *dirs[] = {"links", "links/ant", "links/bee", "outside"};
    for (int i = 0; i < 4; i++)
        CHECK(mkdir(path_of(dirs[i]), 0700) == 0);
    const char *pngs[] = {"links/ant/a1.png", "links/bee/b1.png", "outside/x.png"};
    for (int i = 0; i < 3; i++)
        CHECK(write_png(path_of(pngs[i]), PW, PH, PNG_COLOR_TYPE_RGB, 8, px, NULL, 0, NULL, 0, 0) ==
              0);
    struct {
        const char *target, *link;
    } ln[] = {
        {"ant", "ant_again"},  /* the same folder as class ant */
        {"../outside", "ext"}, /* a folder elsewhere: a real class */
        {"loop", "loop"},      /* a class folder that loops */
        {"nowhere.png", "bee/dangling.png"},
        {"cycle.png", "bee/cycle.png"},
        {"../ant/a1.png", "bee/a1_link.png"}, /* one image under two labels */
    };
    for (size_t i = 0; i < sizeof ln / sizeof ln[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", root, ln[i].link);
        CHECK_MSG(symlink(ln[i].target, p) == 0, "symlink %s: %s", p, strerror(errno));
    }
    snprintf(spec, sizeof spec, "images:%s", root);
    dg_source *s = NULL;
    CHECK_MSG(dg_source_open(ctx, spec, NULL, &s) == DG_OK, "%s", dg_errmsg(ctx));
    if (!s)
        return;
    CHECK_MSG(dg_source_classes(s) == 3 && dg_source_count(s) == 4, "%d classes, %zu samples",
              dg_source_classes(s), dg_source_count(s));
    const dg_source_links *l = dg_source_links_seen(s);
    CHECK_MSG(l->class_links == 2 && l->duplicate_classes == 1, "class links %zu, skipped %zu",
              l->class_links, l->duplicate_classes);
    CHECK_MSG(l->loops == 2 && l->dangling == 1, "loops %zu, dangling %zu", l->loops, l->dangling);
    CHECK_MSG(l->shared_files == 1, "shared files %zu", l->shared_files);
    bool said_dup = false, said_loop = false, said_shared = false;
    for (int i = 0; i < l->nmsg; i++) {
        said_dup = said_dup || (strstr(l->msgs[i], "ant_again") && strstr(l->msgs[i], "class ant"));
        said_loop = said_loop || (strstr(l->msgs[i], "loop") && strstr(l->msgs[i], "symlink loop"));
        said_shared = said_shared || strstr(l->msgs[i], "more than one class");
    }
    CHECK(said_dup && said_loop && said_shared);
    /* The identity lists the kept classes only. */
    cJSON *id = dg_source_identity(s);
    char *txt = cJSON_PrintUnformatted(id);
    CHECK(txt && !strstr(txt, "ant_again/") && strstr(txt, "ext/x.png") &&
          strstr(txt, "bee/a1_link.png"));
    cJSON_free(txt);
    cJSON_Delete(id);
    dg_source_close(s);
    (void)q;
}

/* A small file claiming a large image: refused before decoding once it
 * needs more than the budget, with the file, the size and the budget named;
 * decoded without a budget. PNG and (progressive) JPEG. */
static void test_decode_budget(dg_ctx *ctx)
{
    enum { BW = 1500, BH = 1400 };
    unsigned char *px = calloc((size_t)BW * BH, 1);
    CHECK(px != NULL);
    if (!px)
        return;
    CHECK(mkdir(path_of("big"), 0700) == 0 && mkdir(path_of("big/one"), 0700) == 0);
    CHECK(write_png(path_of("big/one/wide.png"), BW, BH, PNG_COLOR_TYPE_GRAY, 8, px, NULL, 0, NULL,
                    0, 0) == 0);
    CHECK(write_jpeg(path_of("big/one/wide.jpg"), BW, BH, 1, px, 1) == 0);
    free(px);
    const char *files[] = {"big/one/wide.png", "big/one/wide.jpg"};
    for (int k = 0; k < 2; k++) {
        size_t len = 0;
        unsigned char *buf = slurp(path_of(files[k]), &len);
        CHECK(buf && len < 200000);
        dg_image im;
        char err[512];
        /* Gray: 2.1 MB of pixels and 8.4 MB of floats. */
        CHECK(dg_decode_image_limit(buf, len, 0, 8u << 20, &im, err, sizeof err) == DG_ERR_FORMAT);
        CHECK(im.data == NULL);
        CHECK_MSG(strstr(err, "1500x1400 decodes to") && strstr(err, "budget of 8 MiB"), "%s", err);
        CHECK(dg_decode_image_limit(buf, len, 0, 64u << 20, &im, err, sizeof err) == DG_OK);
        dg_image_free(&im);
        CHECK(dg_decode_image(buf, len, 3, &im, err, sizeof err) == DG_OK && im.c == 3);
        dg_image_free(&im);
        free(buf);
    }
    char spec[1200];
    snprintf(spec, sizeof spec, "images:%s", path_of("big"));
    dg_source *s = NULL;
    CHECK(dg_source_open(ctx, spec, NULL, &s) == DG_OK);
    if (!s)
        return;
    dg_source_set_decode_budget(s, 4u << 20);
    dg_image im;
    char err[512];
    CHECK(dg_source_read(s, 1, &im, NULL, err, sizeof err) == DG_ERR_FORMAT);
    CHECK_MSG(strstr(err, "wide.png: PNG: 1500x1400 decodes to") && strstr(err, "4 MiB"), "%s",
              err);
    dg_source_set_decode_budget(s, 0);
    CHECK(dg_source_read(s, 1, &im, NULL, err, sizeof err) == DG_OK);
    dg_image_free(&im);
    dg_source_close(s);
}

/* A device or FIFO named as a data file says what it is, not "Success". */
static void test_not_regular(dg_ctx *ctx)
{
    dg_source *s = NULL;
    CHECK(dg_source_open(ctx, "idx:/dev/null,/dev/null", NULL, &s) == DG_ERR_IO && !s);
    CHECK_MSG(strstr(dg_errmsg(ctx), "/dev/null: is a character device, not a regular file") &&
                  !strstr(dg_errmsg(ctx), "Success"),
              "%s", dg_errmsg(ctx));
    char spec[1200];
    CHECK(mkfifo(path_of("fifo"), 0600) == 0);
    snprintf(spec, sizeof spec, "idx:%s,%s", path_of("fifo"), path_of("fifo"));
    CHECK(dg_source_open(ctx, spec, NULL, &s) == DG_ERR_IO && !s);
    CHECK_MSG(strstr(dg_errmsg(ctx), "is a FIFO"), "%s", dg_errmsg(ctx));
}

static void test_synthetic(dg_ctx *ctx)
{
    dg_source_opts o = {
        .channels = 1, .seed = 7, .samples = 40, .classes = 4, .height = 6, .width = 5};
    dg_source *s = NULL, *s2 = NULL;
    CHECK(dg_source_open(ctx, "synthetic", &o, &s) == DG_OK);
    CHECK(dg_source_open(ctx, "synthetic", &o, &s2) == DG_OK);
    if (!s || !s2)
        return;
    CHECK(dg_source_count(s) == 40 && dg_source_classes(s) == 4);
    CHECK_STR(dg_source_kind(s), "synthetic");
    int c, h, w;
    dg_source_shape(s, &c, &h, &w);
    CHECK(c == 1 && h == 6 && w == 5);
    dg_synth *ref = NULL;
    CHECK(dg_synth_new(ctx, 7, 4, 1, 6, 5, 40, &ref) == DG_OK);
    dg_image im;
    char err[128];
    CHECK(dg_source_read(s, 17, &im, NULL, err, sizeof err) == DG_OK);
    CHECK(ref && im.data && memcmp(im.data, ref->x + 17 * 30, 30 * sizeof(float)) == 0 &&
          im.label == ref->y[17]);
    dg_image_free(&im);
    dg_synth_free(ref);
    cJSON *a = dg_source_identity(s), *b = dg_source_identity(s2);
    CHECK(cJSON_Compare(a, b, 1));
    CHECK_STR(cJSON_GetObjectItem(a, "kind")->valuestring, "synthetic");
    cJSON_Delete(a);
    cJSON_Delete(b);
    check_threads(s);
    dg_source_close(s);
    dg_source_close(s2);
    o.seed = 8;
    CHECK(dg_source_open(ctx, "synthetic", &o, &s) == DG_OK);
    CHECK(dg_source_open(ctx, "bogus:thing", NULL, &s2) == DG_ERR_USAGE);
    dg_source_close(s);
}

/* Removes the fixture tree. */
static void rm_tree(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/dg_data_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmp))
        check_skip("cannot make a temp folder");
    dg_ctx *ctx = dg_ctx_new();
    test_png_gray();
    test_png_color();
    test_png_bad();
    test_jpeg();
    test_idx(ctx);
    test_cifar(ctx);
    test_images(ctx);
    test_links(ctx);
    test_decode_budget(ctx);
    test_not_regular(ctx);
    test_synthetic(ctx);
    dg_ctx_free(ctx);
    rm_tree(tmp);
    CHECK_DONE();
}
