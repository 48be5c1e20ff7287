/* PNG (libpng) and JPEG (libjpeg API) decoding from memory into float CHW in
 * [0, 1], with bounds-checked readers and longjmp error handling so malformed
 * input only ever gives DG_ERR_FORMAT with a reason. */
#include "data/data.h"

#include <jpeglib.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#define MAX_DIM 16384u
#define MAX_JPEG_SCANS 1000

/* Bytes for messages: "1.25 GiB", "512 MiB", "900 KiB". */
static void human_bytes(double b, char *out, size_t n)
{
    if (b >= 1073741824.0)
        snprintf(out, n, "%.2f GiB", b / 1073741824.0);
    else if (b >= 1048576.0)
        snprintf(out, n, "%.0f MiB", b / 1048576.0);
    else
        snprintf(out, n, "%.0f KiB", b / 1024.0);
}

/* True (with the message in err) when decoding a w x h image needs more than
 * max_bytes: need counts the decoder's pixel buffer and the float sample. */
static bool over_budget(const char *fmt, unsigned w, unsigned h, double need, size_t max_bytes,
                        char *err, size_t errlen)
{
    if (!max_bytes || need <= (double)max_bytes)
        return false;
    char a[32], b[32];
    human_bytes(need, a, sizeof a);
    human_bytes((double)max_bytes, b, sizeof b);
    dg_fail_buf(err, errlen, DG_ERR_FORMAT,
                "%s: %ux%u decodes to %s, above the loader's memory budget of %s per image", fmt, w,
                h, a, b);
    return true;
}

/* Converts h rows of w interleaved samples (nch channels, alpha last when nch
 * is 2 or 4; depth 8 or 16 big-endian) into a new CHW float image. */
static dg_status to_float(const unsigned char *px, size_t stride, int depth, int nch, int h, int w,
                          int want, dg_image *img, char *err, size_t errlen)
{
    int base = nch >= 3 ? 3 : 1;
    int outc = want ? want : base;
    size_t plane = (size_t)h * w;
    float *out = dg_malloc(plane * outc * sizeof(float));
    if (!out)
        return dg_fail_buf(err, errlen, DG_ERR_NOMEM, "out of memory for a %dx%d image", w, h);
    size_t bps = depth == 16 ? 2 : 1;
    for (int y = 0; y < h; y++) {
        const unsigned char *row = px + (size_t)y * stride;
        for (int x = 0; x < w; x++) {
            const unsigned char *p = row + (size_t)x * nch * bps;
            float v[3];
            for (int k = 0; k < base; k++)
                v[k] = bps == 2 ? (float)((unsigned)p[2 * k] << 8 | p[2 * k + 1]) / 65535.0f
                                : (float)p[k] / 255.0f;
            size_t o = (size_t)y * w + x;
            if (outc == base) {
                for (int k = 0; k < base; k++)
                    out[k * plane + o] = v[k];
            } else if (outc == 1) {
                float l = 0.299f * v[0] + 0.587f * v[1] + 0.114f * v[2];
                out[o] = l < 1.0f ? l : 1.0f;
            } else {
                out[o] = out[plane + o] = out[2 * plane + o] = v[0];
            }
        }
    }
    img->c = outc;
    img->h = h;
    img->w = w;
    img->data = out;
    img->label = 0;
    return DG_OK;
}

/* ---- PNG ------------------------------------------------------------------ */

typedef struct png_src {
    const unsigned char *buf;
    size_t len, pos;
    char msg[256];
} png_src;

/* libpng read callback over memory: never past len; an underrun is an error. */
static void png_read_mem(png_structp png, png_bytep dst, size_t n)
{
    png_src *s = png_get_io_ptr(png);
    if (n > s->len - s->pos) {
        snprintf(s->msg, sizeof s->msg, "truncated (needs %zu more bytes at offset %zu of %zu)",
                 n - (s->len - s->pos), s->pos, s->len);
        png_error(png, "truncated");
    }
    memcpy(dst, s->buf + s->pos, n);
    s->pos += n;
}

/* libpng error callback: keeps the first message and unwinds to setjmp. */
static void png_error_cb(png_structp png, png_const_charp msg)
{
    png_src *s = png_get_error_ptr(png);
    if (!s->msg[0])
        snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

/* libpng warning callback: warnings are not reported. */
static void png_warn_cb(png_structp png, png_const_charp msg)
{
}

static dg_status decode_png(const unsigned char *buf, size_t len, int want, size_t max_bytes,
                            dg_image *img, char *err, size_t errlen)
{
    png_src src = {.buf = buf, .len = len};
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_error_cb, png_warn_cb);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
        return dg_fail_buf(err, errlen, DG_ERR_NOMEM, "PNG: out of memory");
    }
    unsigned char *volatile pix = NULL;
    png_bytep *volatile rows = NULL;
    volatile dg_status st = DG_ERR_FORMAT;
    if (setjmp(png_jmpbuf(png))) {
        dg_fail_buf(err, errlen, st, "PNG: %s", src.msg[0] ? src.msg : "corrupt data");
        goto done;
    }
    png_set_read_fn(png, &src, png_read_mem);
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    /* Fuzzing: let mutated chunks past the checksums to reach the decoder. */
    png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
#ifdef PNG_IGNORE_ADLER32
    png_set_option(png, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
#endif
#endif
    png_read_info(png, info);
    png_uint_32 w, h;
    int depth, ctype, interlace;
    png_get_IHDR(png, info, &w, &h, &depth, &ctype, &interlace, NULL, NULL);
    if (w > MAX_DIM || h > MAX_DIM) {
        dg_fail_buf(err, errlen, DG_ERR_FORMAT, "PNG: image is %ux%u, above the %u limit",
                    (unsigned)w, (unsigned)h, MAX_DIM);
        goto done;
    }
    png_set_expand(png); /* palette -> RGB, gray < 8 bit -> 8 bit, tRNS -> alpha */
    if (interlace != PNG_INTERLACE_NONE)
        png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int nch = png_get_channels(png, info), odepth = png_get_bit_depth(png, info);
    size_t stride = png_get_rowbytes(png, info);
    if (nch < 1 || nch > 4 || (odepth != 8 && odepth != 16) ||
        stride != (size_t)w * nch * (odepth / 8)) {
        dg_fail_buf(err, errlen, DG_ERR_FORMAT, "PNG: unexpected layout (%d channels of %d bits)",
                    nch, odepth);
        goto done;
    }
    /* Deflate expands at most about 1032:1, so a header claiming far more
     * pixel bytes than the file could hold is a lie: refuse before allocating. */
    double raw = (double)h * (stride + 1);
    if (raw > (double)len * 1100.0 + 65536.0) {
        dg_fail_buf(
            err, errlen, DG_ERR_FORMAT,
            "PNG: truncated or corrupt header: %ux%u needs %.0f bytes, more than %zu bytes can "
            "hold",
            (unsigned)w, (unsigned)h, raw, len);
        goto done;
    }
    int outc = want ? want : nch >= 3 ? 3 : 1;
    if (over_budget("PNG", (unsigned)w, (unsigned)h,
                    (double)stride * h + (double)sizeof(png_bytep) * h +
                        (double)outc * w * h * sizeof(float),
                    max_bytes, err, errlen))
        goto done;
    st = DG_ERR_NOMEM;
    pix = dg_malloc(stride * h);
    rows = dg_malloc(sizeof(png_bytep) * h);
    if (!pix || !rows)
        png_error(png, "out of memory");
    st = DG_ERR_FORMAT;
    for (png_uint_32 y = 0; y < h; y++)
        rows[y] = pix + (size_t)y * stride;
    png_read_image(png, rows);
    png_read_end(png, NULL); /* a file cut before IEND is truncated */
    st = to_float(pix, stride, odepth, nch, (int)h, (int)w, want, img, err, errlen);
done:
    png_destroy_read_struct(&png, &info, NULL);
    dg_free(pix);
    dg_free(rows);
    return st;
}

/* ---- JPEG ----------------------------------------------------------------- */

typedef struct jpg_err {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX + 64];
} jpg_err;

typedef struct jpg_src {
    struct jpeg_source_mgr pub;
    int truncated;
} jpg_src;

static const JOCTET fake_eoi[2] = {0xFF, JPEG_EOI};

/* libjpeg fatal error: formats the message and unwinds (never exit()). */
static void jpg_error_exit(j_common_ptr c)
{
    jpg_err *e = (jpg_err *)c->err;
    if (!e->msg[0])
        (*c->err->format_message)(c, e->msg);
    longjmp(e->jb, 1);
}

/* libjpeg warnings and trace messages: counted, not printed. */
static void jpg_emit_message(j_common_ptr c, int level)
{
    if (level < 0)
        c->err->num_warnings++;
}

static void jpg_output_message(j_common_ptr c)
{
}

static void jpg_init_source(j_decompress_ptr c)
{
}

/* Underrun: the data ended early; feed a fake EOI and remember it. */
static boolean jpg_fill_input(j_decompress_ptr c)
{
    jpg_src *s = (jpg_src *)c->src;
    s->truncated = 1;
    s->pub.next_input_byte = fake_eoi;
    s->pub.bytes_in_buffer = sizeof fake_eoi;
    return TRUE;
}

static void jpg_skip_input(j_decompress_ptr c, long n)
{
    jpg_src *s = (jpg_src *)c->src;
    if (n <= 0)
        return;
    if ((size_t)n > s->pub.bytes_in_buffer) {
        jpg_fill_input(c);
        return;
    }
    s->pub.next_input_byte += n;
    s->pub.bytes_in_buffer -= (size_t)n;
}

static void jpg_term_source(j_decompress_ptr c)
{
}

/* Bounds the work a hostile progressive file can ask for. */
static void jpg_progress(j_common_ptr c)
{
    if (c->is_decompressor && ((j_decompress_ptr)c)->input_scan_number > MAX_JPEG_SCANS) {
        jpg_err *e = (jpg_err *)c->err;
        snprintf(e->msg, sizeof e->msg, "more than %d scans", MAX_JPEG_SCANS);
        longjmp(e->jb, 1);
    }
}

static dg_status decode_jpeg(const unsigned char *buf, size_t len, int want, size_t max_bytes,
                             dg_image *img, char *err, size_t errlen)
{
    struct jpeg_decompress_struct cinfo;
    jpg_err jerr;
    jpg_src src;
    struct jpeg_progress_mgr progress = {.progress_monitor = jpg_progress};
    memset(&jerr, 0, sizeof jerr);
    memset(&src, 0, sizeof src);
    cinfo.err = jpeg_std_error(&jerr.pub);
    jerr.pub.error_exit = jpg_error_exit;
    jerr.pub.emit_message = jpg_emit_message;
    jerr.pub.output_message = jpg_output_message;
    unsigned char *volatile pix = NULL;
    volatile dg_status st = DG_ERR_FORMAT;
    volatile int created = 0;
    if (setjmp(jerr.jb)) {
        if (src.truncated)
            dg_fail_buf(err, errlen, st, "JPEG: truncated (data ends after %zu bytes)", len);
        else
            dg_fail_buf(err, errlen, st, "JPEG: %s", jerr.msg[0] ? jerr.msg : "corrupt data");
        goto done;
    }
    jpeg_create_decompress(&cinfo);
    created = 1;
    cinfo.progress = &progress;
    cinfo.mem->max_memory_to_use = 2048L * 1024 * 1024;
    src.pub.init_source = jpg_init_source;
    src.pub.fill_input_buffer = jpg_fill_input;
    src.pub.skip_input_data = jpg_skip_input;
    src.pub.resync_to_restart = jpeg_resync_to_restart;
    src.pub.term_source = jpg_term_source;
    src.pub.next_input_byte = buf;
    src.pub.bytes_in_buffer = len;
    cinfo.src = &src.pub;
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.image_width > MAX_DIM || cinfo.image_height > MAX_DIM) {
        dg_fail_buf(err, errlen, DG_ERR_FORMAT, "JPEG: image is %ux%u, above the %u limit",
                    (unsigned)cinfo.image_width, (unsigned)cinfo.image_height, MAX_DIM);
        goto done;
    }
    switch (cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE: cinfo.out_color_space = JCS_GRAYSCALE; break;
    case JCS_YCbCr:
    case JCS_RGB: cinfo.out_color_space = JCS_RGB; break;
    case JCS_CMYK:
    case JCS_YCCK:
        dg_fail_buf(err, errlen, DG_ERR_FORMAT, "JPEG: CMYK images are not supported");
        goto done;
    default:
        dg_fail_buf(err, errlen, DG_ERR_FORMAT, "JPEG: colour space %d is not supported",
                    (int)cinfo.jpeg_color_space);
        goto done;
    }
    /* Before jpeg_start_decompress, which allocates the decoder's buffers
     * (for progressive files, coefficients of the whole image). */
    jpeg_calc_output_dimensions(&cinfo);
    {
        unsigned ow = cinfo.output_width, oh = cinfo.output_height;
        int oc = cinfo.output_components, outc = want ? want : oc >= 3 ? 3 : 1;
        double coef = cinfo.progressive_mode ? 2.0 * ow * oh * cinfo.num_components : 0;
        if (over_budget("JPEG", ow, oh,
                        (double)ow * oh * oc + coef + (double)outc * ow * oh * sizeof(float),
                        max_bytes, err, errlen))
            goto done;
    }
    jpeg_start_decompress(&cinfo);
    int nch = cinfo.output_components;
    unsigned w = cinfo.output_width, h = cinfo.output_height;
    if ((nch != 1 && nch != 3) || w == 0 || h == 0 || w > MAX_DIM || h > MAX_DIM) {
        dg_fail_buf(err, errlen, DG_ERR_FORMAT, "JPEG: unexpected output (%d components, %ux%u)",
                    nch, w, h);
        goto done;
    }
    size_t stride = (size_t)w * nch;
    st = DG_ERR_NOMEM;
    pix = dg_malloc(stride * h);
    if (!pix) {
        dg_fail_buf(err, errlen, st, "JPEG: out of memory for %ux%u", w, h);
        goto done;
    }
    st = DG_ERR_FORMAT;
    while (cinfo.output_scanline < h) {
        JSAMPROW row = pix + (size_t)cinfo.output_scanline * stride;
        if (jpeg_read_scanlines(&cinfo, &row, 1) != 1)
            break;
    }
    if (cinfo.output_scanline < h || src.truncated) {
        dg_fail_buf(err, errlen, st, "JPEG: truncated (data ends after %zu bytes)", len);
        goto done;
    }
    jpeg_finish_decompress(&cinfo);
    if (src.truncated) {
        dg_fail_buf(err, errlen, st, "JPEG: truncated (data ends after %zu bytes)", len);
        goto done;
    }
    st = to_float(pix, stride, 8, nch, (int)h, (int)w, want, img, err, errlen);
done:
    if (created)
        jpeg_destroy_decompress(&cinfo);
    dg_free(pix);
    return st;
}

dg_status dg_decode_image(const unsigned char *buf, size_t len, int channels, dg_image *img,
                          char *err, size_t errlen)
{
    return dg_decode_image_limit(buf, len, channels, 0, img, err, errlen);
}

dg_status dg_decode_image_limit(const unsigned char *buf, size_t len, int channels,
                                size_t max_bytes, dg_image *img, char *err, size_t errlen)
{
    static const unsigned char png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    memset(img, 0, sizeof *img);
    if (err && errlen)
        err[0] = '\0';
    if (channels != 0 && channels != 1 && channels != 3)
        return dg_fail_buf(err, errlen, DG_ERR_USAGE, "channels must be 0, 1 or 3, not %d",
                           channels);
    if (buf && len >= 8 && memcmp(buf, png_magic, 8) == 0)
        return decode_png(buf, len, channels, max_bytes, img, err, errlen);
    if (buf && len >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF)
        return decode_jpeg(buf, len, channels, max_bytes, img, err, errlen);
    return dg_fail_buf(err, errlen, DG_ERR_FORMAT, "not a PNG or JPEG image");
}
