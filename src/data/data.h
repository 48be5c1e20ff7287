/* The data pipeline: sources (synthetic, IDX, CIFAR-10 binary, image folders),
 * decoded samples, and the identity of a data set for the input bucket.
 *
 * A sample is decoded to float32 CHW in [0, 1] at its stored size (synthetic
 * samples are unbounded floats), converted to the requested channel count
 * (gray->RGB by replication, RGB->gray by ITU-R BT.601 luma, alpha dropped).
 * Reading is thread-safe: workers call dg_source_read concurrently. */
#ifndef DG_DATA_H
#define DG_DATA_H

#include "core/core.h"
#include "core/json.h"

typedef struct dg_source dg_source;

typedef struct dg_image {
    int c, h, w;
    float *data; /* c*h*w floats, owned by the image (dg_image_free) */
    int32_t label;
} dg_image;

/* Time spent per stage for one sample, added to by readers (seconds). */
typedef struct dg_read_times {
    double read, decode;
} dg_read_times;

typedef struct dg_source_opts {
    int channels;      /* channels wanted (1 or 3); 0: the source's own */
    uint64_t seed;     /* synthetic: seed */
    size_t samples;    /* synthetic: sample count */
    int classes;       /* synthetic: classes */
    int height, width; /* synthetic: size */
} dg_source_opts;

#define DG_SOURCE_MAX_LINK_MSGS 8

/* Symlinks met while listing an image folder (images:DIR). */
typedef struct dg_source_links {
    size_t class_links;       /* class folders that are symlinks (followed or skipped) */
    size_t duplicate_classes; /* of those, skipped: the same folder as another class */
    size_t loops, dangling;   /* symlinks that cannot be followed, skipped */
    size_t shared_files;      /* image files (by device and inode) under several classes */
    int nmsg;
    char msgs[DG_SOURCE_MAX_LINK_MSGS][400];
} dg_source_links;

/* Opens `spec`: "synthetic", "idx:IMAGES,LABELS" (plain or .gz), "cifar:DIR"
 * (data_batch_*.bin and test_batch.bin), "images:DIR" (one sub-folder per
 * class; PNG and JPEG). Header lies, truncated files, empty class folders,
 * labels out of range: DG_ERR_FORMAT naming the file and the problem;
 * unreadable paths DG_ERR_IO. Close with dg_source_close. */
dg_status dg_source_open(dg_ctx *ctx, const char *spec, const dg_source_opts *opts,
                         dg_source **out);
void dg_source_close(dg_source *s);
/* DG_OK when spec names a kind of source dg_source_open knows (nothing is
 * opened); DG_ERR_USAGE naming it otherwise. */
dg_status dg_source_spec_check(dg_ctx *ctx, const char *spec);
size_t dg_source_count(const dg_source *s);
int dg_source_classes(const dg_source *s);
/* Native sample size (c after conversion, h, w); images: 0 h/w (varies). */
void dg_source_shape(const dg_source *s, int *c, int *h, int *w);
/* Short kind: "synthetic", "idx", "cifar", "images". */
const char *dg_source_kind(const dg_source *s);
/* Decodes sample i. A bad sample (corrupt, truncated, not an image) returns
 * DG_ERR_FORMAT with "FILE: problem" in err; the source stays usable. */
dg_status dg_source_read(dg_source *s, size_t i, dg_image *img, dg_read_times *t, char *err,
                         size_t errlen);
/* Sample i as the stored floats (CHW, dg_source_shape's size) and its label,
 * without a copy, when the source holds its samples so (synthetic); NULL for
 * the other sources and out of range. Thread-safe; valid until close. */
const float *dg_source_peek(const dg_source *s, size_t i, int32_t *label);
/* The data set's identity for the input bucket: kind, file names, sizes and a
 * SHA-256 over names, sizes and sampled bytes (or the synthetic generator's
 * parameters). Deterministic across runs and machines. */
cJSON *dg_source_identity(const dg_source *s);
/* The symlinks met while listing (all zero for sources other than images). */
const dg_source_links *dg_source_links_seen(const dg_source *s);
/* Caps the bytes one decoded image may take (decoder buffers and the float
 * sample); an image above it is a bad sample naming its size. 0: no cap
 * beyond the decoders' 16384 x 16384. Set before reading from threads. */
void dg_source_set_decode_budget(dg_source *s, size_t bytes);
void dg_image_free(dg_image *img);

/* Decoders (decode.c): PNG (gray, gray+alpha, RGB, RGBA, palette, 1..16 bit)
 * and JPEG (baseline and progressive, gray and YCbCr) from memory to float
 * CHW in [0,1] with `channels` channels (0: native). DG_ERR_FORMAT with a
 * reason for anything malformed; never reads out of bounds; refuses images
 * above 16384 x 16384. */
dg_status dg_decode_image(const unsigned char *buf, size_t len, int channels, dg_image *img,
                          char *err, size_t errlen);
/* dg_decode_image refusing, before allocating, an image whose decoding
 * (decoder buffer plus float sample) would take more than max_bytes (0: no
 * cap): DG_ERR_FORMAT with its size and the cap in err. */
dg_status dg_decode_image_limit(const unsigned char *buf, size_t len, int channels,
                                size_t max_bytes, dg_image *img, char *err, size_t errlen);

/* IDX and CIFAR readers over memory (idx.c, cifar.c): parse and validate
 * headers against the buffer length (fuzz targets call these). */
typedef struct dg_idx {
    int type; /* 0x08 = u8 */
    int ndim;
    uint32_t dims[4];
    const unsigned char *data; /* into the buffer */
    size_t count;              /* dims[0] */
    size_t item_bytes;         /* product of dims[1..] */
} dg_idx;
dg_status dg_idx_parse(const unsigned char *buf, size_t len, dg_idx *out, char *err, size_t errlen);
/* CIFAR-10 binary: records of 1 label byte + 3072 pixel bytes. */
dg_status dg_cifar_check(const unsigned char *buf, size_t len, size_t *records, char *err,
                         size_t errlen);
#endif
