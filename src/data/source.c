/* Data sources: synthetic (wrapping dg_synth), IDX (MNIST, plain or gzip),
 * CIFAR-10 binary batches and image folders, plus each source's identity.
 * IDX and CIFAR data are loaded at open; image files are read and decoded at
 * dg_source_read time. After open a source is read-only, so reads are safe
 * from any number of threads. Their files are read through source_files.c. */
#include "data/source_int.h"
#include "data/synth.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define MAX_IMAGE_FILE ((size_t)256 << 20)
#define CIFAR_RECORD 3073
#define CIFAR_SIDE 32

enum src_kind { SRC_SYNTH, SRC_IDX, SRC_CIFAR, SRC_IMAGES };

struct dg_source {
    enum src_kind kind;
    int channels; /* requested (0: native) */
    int native_c; /* before conversion (images: 0, varies) */
    int h, w;     /* images: 0 */
    int classes;
    size_t count;
    cJSON *identity;
    /* synthetic */
    dg_synth *syn;
    /* idx */
    unsigned char *idx_img_buf, *idx_lab_buf;
    dg_idx idx_img, idx_lab;
    /* cifar */
    unsigned char *cifar;
    /* images */
    char *root;
    char **files; /* "class/file", relative to root */
    int32_t *labels;
    dg_source_links links; /* symlinks met while listing */
    size_t decode_budget;  /* bytes one decoded image may take; 0: no budget */
};

/* ---- synthetic ------------------------------------------------------------ */

static dg_status open_synth(dg_ctx *ctx, dg_source *s, const dg_source_opts *o)
{
    int c = o->channels ? o->channels : 3;
    int classes = o->classes ? o->classes : 10;
    int h = o->height ? o->height : 32, w = o->width ? o->width : 32;
    size_t n = o->samples ? o->samples : 1024;
    if (classes < 1 || h < 1 || w < 1 || h > 16384 || w > 16384)
        return dg_fail(ctx, DG_ERR_USAGE, "synthetic data: bad size %d classes, %dx%d", classes, h,
                       w);
    dg_status st = dg_synth_new(ctx, o->seed, classes, c, h, w, n, &s->syn);
    if (st)
        return st;
    s->native_c = c;
    s->h = h;
    s->w = w;
    s->classes = classes;
    s->count = n;
    cJSON *id = dg_synth_json(s->syn);
    char *txt = cJSON_PrintUnformatted(id);
    unsigned char dig[32];
    unsigned dlen = 0;
    char hex[65] = "";
    if (txt && EVP_Digest(txt, strlen(txt), dig, &dlen, EVP_sha256(), NULL) == 1 && dlen == 32)
        for (int i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", dig[i]);
    cJSON_free(txt);
    cJSON *o2 = cJSON_CreateObject();
    cJSON_AddStringToObject(o2, "kind", "synthetic");
    cJSON_AddItemToObject(o2, "generator", id);
    cJSON_AddArrayToObject(o2, "files");
    cJSON_AddNumberToObject(o2, "files_total", 0);
    cJSON_AddStringToObject(o2, "sha256", hex);
    cJSON_AddNumberToObject(o2, "samples", (double)n);
    cJSON_AddNumberToObject(o2, "classes", classes);
    s->identity = o2;
    return DG_OK;
}

/* ---- IDX ------------------------------------------------------------------ */

/* Reads an IDX file (gunzipping when it starts with 1f 8b) and parses it;
 * raw keeps the bytes as stored for the identity. */
static dg_status load_idx(dg_ctx *ctx, const char *path, unsigned char **raw, size_t *rawlen,
                          unsigned char **data, dg_idx *idx)
{
    char err[512];
    *data = NULL;
    dg_status st = dg_src_read_whole(path, MAX_FILE_BYTES, raw, rawlen, err, sizeof err);
    if (st)
        return dg_fail(ctx, st, "%s", err);
    const unsigned char *p = *raw;
    size_t n = *rawlen;
    if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b) {
        if ((st = dg_src_gunzip(path, p, n, data, &n, err, sizeof err)))
            return dg_fail(ctx, st, "%s", err);
        p = *data;
    }
    if ((st = dg_idx_parse(p, n, idx, err, sizeof err)))
        return dg_fail(ctx, st, "%s: %s", path, err);
    return DG_OK;
}

static dg_status open_idx(dg_ctx *ctx, dg_source *s, const char *arg)
{
    const char *comma = strchr(arg, ',');
    if (!comma || comma == arg || !comma[1])
        return dg_fail(ctx, DG_ERR_USAGE, "idx source needs \"idx:IMAGES,LABELS\", got \"idx:%s\"",
                       arg);
    char *ipath = dg_asprintf("%.*s", (int)(comma - arg), arg);
    char *lpath = dg_strdup(comma + 1);
    unsigned char *iraw = NULL, *lraw = NULL;
    size_t ilen = 0, llen = 0;
    dg_status st = DG_OK;
    if (!ipath || !lpath)
        st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    if (!st)
        st = load_idx(ctx, ipath, &iraw, &ilen, &s->idx_img_buf, &s->idx_img);
    if (!st)
        st = load_idx(ctx, lpath, &lraw, &llen, &s->idx_lab_buf, &s->idx_lab);
    if (!st && s->idx_img.ndim != 3)
        st = dg_fail(ctx, DG_ERR_FORMAT, "%s: images need 3 dimensions [n, h, w], file has %d",
                     ipath, s->idx_img.ndim);
    if (!st && s->idx_lab.ndim != 1)
        st = dg_fail(ctx, DG_ERR_FORMAT, "%s: labels need 1 dimension [n], file has %d", lpath,
                     s->idx_lab.ndim);
    if (!st && s->idx_img.count != s->idx_lab.count)
        st = dg_fail(ctx, DG_ERR_FORMAT, "%s has %zu images but %s has %zu labels", ipath,
                     s->idx_img.count, lpath, s->idx_lab.count);
    if (!st && s->idx_img.count == 0)
        st = dg_fail(ctx, DG_ERR_FORMAT, "%s: no images", ipath);
    if (!st && (s->idx_img.dims[1] > 16384 || s->idx_img.dims[2] > 16384))
        st = dg_fail(ctx, DG_ERR_FORMAT, "%s: images of %ux%u are above the 16384 limit", ipath,
                     (unsigned)s->idx_img.dims[1], (unsigned)s->idx_img.dims[2]);
    if (!st) {
        /* Keep the raw bytes as the parsed data when the file was not gzipped. */
        if (!s->idx_img_buf) {
            s->idx_img_buf = iraw;
            iraw = NULL;
        }
        if (!s->idx_lab_buf) {
            s->idx_lab_buf = lraw;
            lraw = NULL;
        }
        int maxlab = 0;
        for (size_t i = 0; i < s->idx_lab.count; i++)
            if (s->idx_lab.data[i] > maxlab)
                maxlab = s->idx_lab.data[i];
        s->classes = maxlab + 1;
        s->count = s->idx_img.count;
        s->native_c = 1;
        s->h = (int)s->idx_img.dims[1];
        s->w = (int)s->idx_img.dims[2];
        ident_file files[2] = {
            /* Raw bytes live in iraw/lraw, or in the data buffers when not gzipped. */
            {.name = (char *)dg_src_base_name(ipath),
             .path = ipath,
             .bytes = ilen,
             .mem = iraw ? iraw : s->idx_img_buf},
            {.name = (char *)dg_src_base_name(lpath),
             .path = lpath,
             .bytes = llen,
             .mem = lraw ? lraw : s->idx_lab_buf},
        };
        st = dg_src_identity(ctx, "idx", files, 2, s->count, s->classes, &s->identity);
    }
    dg_free(iraw);
    dg_free(lraw);
    dg_free(ipath);
    dg_free(lpath);
    return st;
}

/* ---- CIFAR ---------------------------------------------------------------- */

/* data_batch_<digits>.bin or test_batch.bin */
static int is_cifar_name(const char *n)
{
    if (strcmp(n, "test_batch.bin") == 0)
        return 1;
    if (strncmp(n, "data_batch_", 11) != 0)
        return 0;
    const char *p = n + 11;
    if (!isdigit((unsigned char)*p))
        return 0;
    while (isdigit((unsigned char)*p))
        p++;
    return strcmp(p, ".bin") == 0;
}

static int keep_cifar(const char *dir, const char *name, void *user)
{
    return is_cifar_name(name);
}

static dg_status open_cifar(dg_ctx *ctx, dg_source *s, const char *dir)
{
    char **names = NULL;
    size_t nn = 0;
    dg_status st = dg_src_list_dir(ctx, dir, keep_cifar, NULL, &names, &nn);
    if (st)
        return st;
    if (nn == 0) {
        dg_src_free_list(names, nn);
        return dg_fail(ctx, DG_ERR_IO, "%s: no data_batch_*.bin or test_batch.bin files", dir);
    }
    unsigned char **bufs = dg_calloc(nn, sizeof *bufs);
    ident_file *files = dg_calloc(nn, sizeof *files);
    size_t *recs = dg_calloc(nn, sizeof *recs);
    if (!bufs || !files || !recs)
        st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    size_t total = 0;
    for (size_t i = 0; !st && i < nn; i++) {
        char err[512];
        size_t len = 0;
        files[i].name = names[i];
        files[i].path = dg_asprintf("%s/%s", dir, names[i]);
        if (!files[i].path) {
            st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
            break;
        }
        if ((st = dg_src_read_whole(files[i].path, MAX_FILE_BYTES, &bufs[i], &len, err,
                                    sizeof err))) {
            st = dg_fail(ctx, st, "%s", err);
            break;
        }
        files[i].bytes = len;
        files[i].mem = bufs[i];
        if ((st = dg_cifar_check(bufs[i], len, &recs[i], err, sizeof err))) {
            st = dg_fail(ctx, st, "%s: %s", files[i].path, err);
            break;
        }
        total += recs[i];
    }
    if (!st) {
        s->cifar = dg_malloc(total * CIFAR_RECORD);
        if (!s->cifar)
            st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory for %zu CIFAR records", total);
    }
    if (!st) {
        size_t off = 0;
        for (size_t i = 0; i < nn; i++) {
            memcpy(s->cifar + off, bufs[i], recs[i] * CIFAR_RECORD);
            off += recs[i] * CIFAR_RECORD;
        }
        s->count = total;
        s->classes = 10;
        s->native_c = 3;
        s->h = s->w = CIFAR_SIDE;
        st = dg_src_identity(ctx, "cifar", files, nn, s->count, s->classes, &s->identity);
    }
    for (size_t i = 0; i < nn; i++) {
        if (bufs)
            dg_free(bufs[i]);
        if (files)
            dg_free(files[i].path);
    }
    dg_free(bufs);
    dg_free(files);
    dg_free(recs);
    dg_src_free_list(names, nn);
    return st;
}

/* ---- image folders -------------------------------------------------------- */

/* Counts a symlink that cannot be followed (a loop, or dangling) and logs it. */
static void count_bad_link(dg_source_links *l, const char *dir, const char *name, int err)
{
    if (err == ELOOP)
        l->loops++;
    else
        l->dangling++;
    if (l->nmsg < DG_SOURCE_MAX_LINK_MSGS) {
        char clean[200];
        dg_copy_clean(clean, sizeof clean, name);
        snprintf(l->msgs[l->nmsg++], sizeof l->msgs[0], "%.200s: %s, skipped", clean,
                 err == ELOOP ? "symlink loop" : "dangling symlink");
    }
    (void)dir;
}

/* Directory entries that are (or link to) directories; symlinks that cannot
 * be followed are counted. */
static int keep_subdir(const char *dir, const char *name, void *user)
{
    char *p = dg_asprintf("%s/%s", dir, name);
    struct stat sb, lb;
    int ok = 0;
    if (p && stat(p, &sb) == 0)
        ok = S_ISDIR(sb.st_mode);
    else if (p && lstat(p, &lb) == 0 && S_ISLNK(lb.st_mode))
        count_bad_link(user, dir, name, errno == ELOOP ? ELOOP : ENOENT);
    dg_free(p);
    return ok;
}

static int keep_image(const char *dir, const char *name, void *user)
{
    const char *dot = strrchr(name, '.');
    if (!dot || (strcasecmp(dot, ".png") && strcasecmp(dot, ".jpg") && strcasecmp(dot, ".jpeg")))
        return 0;
    char *p = dg_asprintf("%s/%s", dir, name);
    struct stat sb, lb;
    int ok = 0;
    if (p && stat(p, &sb) == 0) {
        ok = !S_ISDIR(sb.st_mode);
    } else if (p && lstat(p, &lb) == 0 && S_ISLNK(lb.st_mode)) {
        const char *slash = strrchr(dir, '/');
        char *shown = dg_asprintf("%s/%s", slash ? slash + 1 : dir, name);
        count_bad_link(user, dir, shown ? shown : name, errno == ELOOP ? ELOOP : ENOENT);
        dg_free(shown);
    }
    dg_free(p);
    return ok;
}

typedef struct file_id {
    dev_t dev;
    ino_t ino;
    int32_t label;
} file_id;

static int cmp_file_id(const void *a, const void *b)
{
    const file_id *x = a, *y = b;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino)
        return x->ino < y->ino ? -1 : 1;
    return (x->label > y->label) - (x->label < y->label);
}

/* Drops class folders that are symlinks to the same folder as another class
 * (they would repeat its images under another label), preferring the real
 * folder, else the first name; counts symlinked class folders. */
static void drop_duplicate_classes(dg_source_links *l, const char *dir, char **classes, size_t *nc)
{
    size_t n = *nc, w = 0;
    for (size_t i = 0; i < n; i++) {
        char *p = dg_asprintf("%s/%s", dir, classes[i]);
        struct stat si, li;
        bool link = p && lstat(p, &li) == 0 && S_ISLNK(li.st_mode);
        bool have = p && stat(p, &si) == 0;
        dg_free(p);
        const char *twin = NULL;
        for (size_t j = 0; link && have && j < n && !twin; j++) {
            if (j == i)
                continue;
            char *q = dg_asprintf("%s/%s", dir, classes[j]);
            struct stat sj, lj;
            bool jlink = q && lstat(q, &lj) == 0 && S_ISLNK(lj.st_mode);
            bool same = q && stat(q, &sj) == 0 && sj.st_dev == si.st_dev && sj.st_ino == si.st_ino;
            dg_free(q);
            /* Keep a real folder over a link; of two links, the first. */
            if (same && (!jlink || j < i))
                twin = classes[j];
        }
        if (link)
            l->class_links++;
        if (twin) {
            l->duplicate_classes++;
            if (l->nmsg < DG_SOURCE_MAX_LINK_MSGS) {
                char a[120], b[120];
                dg_copy_clean(a, sizeof a, classes[i]);
                dg_copy_clean(b, sizeof b, twin);
                snprintf(l->msgs[l->nmsg++], sizeof l->msgs[0],
                         "class folder %s is a symlink to the same folder as class %s: skipped "
                         "(it would repeat those images under another label)",
                         a, b);
            }
            dg_free(classes[i]);
            continue;
        }
        classes[w++] = classes[i];
    }
    *nc = w;
}

/* Counts files that appear under more than one class (symlinked or hard-linked
 * images); ids holds one entry per file. */
static void count_shared_files(dg_source_links *l, file_id *ids, size_t n)
{
    qsort(ids, n, sizeof *ids, cmp_file_id);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        bool several = false;
        while (j < n && ids[j].dev == ids[i].dev && ids[j].ino == ids[i].ino) {
            several = several || ids[j].label != ids[i].label;
            j++;
        }
        if (several)
            l->shared_files++;
        i = j;
    }
}

static dg_status open_images(dg_ctx *ctx, dg_source *s, const char *dir)
{
    char **classes = NULL;
    size_t nc = 0, nfiles = 0, cap = 0;
    dg_source_links *links = &s->links;
    dg_status st = dg_src_list_dir(ctx, dir, keep_subdir, links, &classes, &nc);
    if (st)
        return st;
    drop_duplicate_classes(links, dir, classes, &nc);
    if (nc == 0)
        st = dg_fail(ctx, DG_ERR_FORMAT, "%s: no class folders", dir);
    if (!st && nc > INT32_MAX)
        st = dg_fail(ctx, DG_ERR_FORMAT, "%s: too many class folders", dir);
    for (size_t k = 0; !st && k < nc; k++) {
        char *cdir = dg_asprintf("%s/%s", dir, classes[k]);
        char **imgs = NULL;
        size_t ni = 0;
        if (!cdir)
            st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
        if (!st)
            st = dg_src_list_dir(ctx, cdir, keep_image, links, &imgs, &ni);
        if (!st && ni == 0)
            st = dg_fail(ctx, DG_ERR_FORMAT,
                         "%s: empty class folder (no .png, .jpg or .jpeg files)", cdir);
        if (!st && nfiles + ni > cap) {
            size_t ncap = cap ? cap : 64;
            while (ncap < nfiles + ni)
                ncap *= 2;
            char **nf = dg_realloc(s->files, ncap * sizeof *nf);
            int32_t *nl = nf ? dg_realloc(s->labels, ncap * sizeof *nl) : NULL;
            if (nf)
                s->files = nf;
            if (nl) {
                s->labels = nl;
                cap = ncap;
            } else {
                st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory listing %s", cdir);
            }
        }
        for (size_t i = 0; !st && i < ni; i++) {
            if (!(s->files[nfiles] = dg_asprintf("%s/%s", classes[k], imgs[i]))) {
                st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
                break;
            }
            s->labels[nfiles++] = (int32_t)k;
            s->count = nfiles; /* so close frees what was made */
        }
        dg_src_free_list(imgs, ni);
        dg_free(cdir);
    }
    if (!st) {
        s->classes = (int)nc;
        s->native_c = 0;
        s->h = s->w = 0;
        ident_file *files = dg_calloc(nfiles, sizeof *files);
        if (!files)
            st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
        file_id *ids = dg_malloc((nfiles ? nfiles : 1) * sizeof *ids);
        if (!ids)
            st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
        for (size_t i = 0; !st && i < nfiles; i++) {
            struct stat sb;
            files[i].name = s->files[i];
            files[i].path = dg_asprintf("%s/%s", dir, s->files[i]);
            if (!files[i].path) {
                st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
            } else if (stat(files[i].path, &sb) != 0) {
                st = dg_fail(ctx, DG_ERR_IO, "%s: %s", files[i].path, strerror(errno));
            } else {
                files[i].bytes = (uint64_t)sb.st_size;
                ids[i] = (file_id){sb.st_dev, sb.st_ino, s->labels[i]};
            }
        }
        if (!st) {
            count_shared_files(links, ids, nfiles);
            if (links->shared_files && links->nmsg < DG_SOURCE_MAX_LINK_MSGS)
                snprintf(links->msgs[links->nmsg++], sizeof links->msgs[0],
                         "%zu image file%s appear%s under more than one class (symlinks or "
                         "hard links): the same pixels carry several labels",
                         links->shared_files, links->shared_files == 1 ? "" : "s",
                         links->shared_files == 1 ? "s" : "");
        }
        dg_free(ids);
        if (!st)
            st = dg_src_identity(ctx, "images", files, nfiles, s->count, s->classes, &s->identity);
        for (size_t i = 0; files && i < nfiles; i++)
            dg_free(files[i].path);
        dg_free(files);
    }
    dg_src_free_list(classes, nc);
    if (!st && links->nmsg) {
        char shown[200];
        dg_copy_clean(shown, sizeof shown, dir);
        for (int i = 0; i < links->nmsg; i++)
            dg_log(ctx, DG_LOG_WARN, "images:%s: %s", shown, links->msgs[i]);
    }
    return st;
}

/* ---- the API -------------------------------------------------------------- */

/* The kind a source spec names; -1 when it names none. */
static int source_kind(const char *spec)
{
    if (strcmp(spec, "synthetic") == 0)
        return SRC_SYNTH;
    if (strncmp(spec, "idx:", 4) == 0)
        return SRC_IDX;
    if (strncmp(spec, "cifar:", 6) == 0 && spec[6])
        return SRC_CIFAR;
    if (strncmp(spec, "images:", 7) == 0 && spec[7])
        return SRC_IMAGES;
    return -1;
}

static dg_status unknown_source(dg_ctx *ctx, const char *spec)
{
    char clean[128];
    dg_copy_clean(clean, sizeof clean, spec);
    return dg_fail(
        ctx, DG_ERR_USAGE,
        "unknown data source \"%s\" (synthetic, idx:IMAGES,LABELS, cifar:DIR, images:DIR)", clean);
}

dg_status dg_source_spec_check(dg_ctx *ctx, const char *spec)
{
    if (!spec)
        return dg_fail(ctx, DG_ERR_USAGE, "no data source given");
    return source_kind(spec) < 0 ? unknown_source(ctx, spec) : DG_OK;
}

dg_status dg_source_open(dg_ctx *ctx, const char *spec, const dg_source_opts *opts, dg_source **out)
{
    *out = NULL;
    dg_source_opts o = {0};
    if (opts)
        o = *opts;
    if (!spec)
        return dg_fail(ctx, DG_ERR_USAGE, "no data source given");
    if (o.channels != 0 && o.channels != 1 && o.channels != 3)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "channels must be 1 or 3 (or 0 for the source's own), not %d", o.channels);
    dg_source *s = dg_calloc(1, sizeof *s);
    if (!s)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    s->channels = o.channels;
    dg_status st;
    int kind = source_kind(spec);
    s->kind = kind < 0 ? SRC_SYNTH : (enum src_kind)kind;
    switch (kind) {
    case SRC_SYNTH: st = open_synth(ctx, s, &o); break;
    case SRC_IDX: st = open_idx(ctx, s, spec + 4); break;
    case SRC_CIFAR: st = open_cifar(ctx, s, spec + 6); break;
    case SRC_IMAGES:
        s->root = dg_strdup(spec + 7);
        st = s->root ? open_images(ctx, s, s->root) : dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
        break;
    default: st = unknown_source(ctx, spec);
    }
    if (st) {
        dg_source_close(s);
        return st;
    }
    *out = s;
    return DG_OK;
}

void dg_source_close(dg_source *s)
{
    if (!s)
        return;
    dg_synth_free(s->syn);
    dg_free(s->idx_img_buf);
    dg_free(s->idx_lab_buf);
    dg_free(s->cifar);
    if (s->files)
        for (size_t i = 0; i < s->count; i++)
            dg_free(s->files[i]);
    dg_free(s->files);
    dg_free(s->labels);
    dg_free(s->root);
    cJSON_Delete(s->identity);
    dg_free(s);
}

size_t dg_source_count(const dg_source *s)
{
    return s->count;
}

int dg_source_classes(const dg_source *s)
{
    return s->classes;
}

void dg_source_shape(const dg_source *s, int *c, int *h, int *w)
{
    if (c)
        *c = s->channels ? s->channels : s->native_c;
    if (h)
        *h = s->h;
    if (w)
        *w = s->w;
}

const char *dg_source_kind(const dg_source *s)
{
    static const char *const names[] = {"synthetic", "idx", "cifar", "images"};
    return names[s->kind];
}

/* Fills img from 8-bit planar (CHW) or single-plane pixels, converting
 * channels (1 <-> 3) as asked. */
static dg_status from_u8_planar(const unsigned char *px, int nc, int h, int w, int want,
                                dg_image *img, char *err, size_t errlen)
{
    int outc = want ? want : nc;
    size_t plane = (size_t)h * w;
    float *d = dg_malloc(plane * outc * sizeof(float));
    if (!d)
        return dg_fail_buf(err, errlen, DG_ERR_NOMEM, "out of memory for a %dx%d image", w, h);
    if (outc == nc) {
        for (size_t i = 0; i < plane * nc; i++)
            d[i] = px[i] / 255.0f;
    } else if (outc == 3) {
        for (size_t i = 0; i < plane; i++)
            d[i] = d[plane + i] = d[2 * plane + i] = px[i] / 255.0f;
    } else {
        for (size_t i = 0; i < plane; i++) {
            float l = 0.299f * (px[i] / 255.0f) + 0.587f * (px[plane + i] / 255.0f) +
                      0.114f * (px[2 * plane + i] / 255.0f);
            d[i] = l < 1.0f ? l : 1.0f;
        }
    }
    img->c = outc;
    img->h = h;
    img->w = w;
    img->data = d;
    return DG_OK;
}

const float *dg_source_peek(const dg_source *s, size_t i, int32_t *label)
{
    if (s->kind != SRC_SYNTH || i >= s->count || (s->channels && s->channels != s->native_c))
        return NULL;
    *label = s->syn->y[i];
    return s->syn->x + i * ((size_t)s->native_c * s->h * s->w);
}

dg_status dg_source_read(dg_source *s, size_t i, dg_image *img, dg_read_times *t, char *err,
                         size_t errlen)
{
    memset(img, 0, sizeof *img);
    if (err && errlen)
        err[0] = '\0';
    if (i >= s->count)
        return dg_fail_buf(err, errlen, DG_ERR_USAGE, "sample %zu is out of range (%zu samples)", i,
                           s->count);
    double t0 = dg_now();
    dg_status st = DG_OK;
    switch (s->kind) {
    case SRC_SYNTH: {
        size_t chw = (size_t)s->native_c * s->h * s->w;
        img->data = dg_malloc(chw * sizeof(float));
        if (!img->data)
            return dg_fail_buf(err, errlen, DG_ERR_NOMEM, "out of memory");
        memcpy(img->data, s->syn->x + i * chw, chw * sizeof(float));
        img->c = s->native_c;
        img->h = s->h;
        img->w = s->w;
        img->label = s->syn->y[i];
        if (t)
            t->read += dg_now() - t0;
        return DG_OK;
    }
    case SRC_IDX:
        st = from_u8_planar(s->idx_img.data + i * s->idx_img.item_bytes, 1, s->h, s->w, s->channels,
                            img, err, errlen);
        img->label = s->idx_lab.data[i];
        break;
    case SRC_CIFAR: {
        const unsigned char *rec = s->cifar + i * CIFAR_RECORD;
        st = from_u8_planar(rec + 1, 3, CIFAR_SIDE, CIFAR_SIDE, s->channels, img, err, errlen);
        img->label = rec[0];
        break;
    }
    case SRC_IMAGES: {
        char *path = dg_asprintf("%s/%s", s->root, s->files[i]);
        if (!path)
            return dg_fail_buf(err, errlen, DG_ERR_NOMEM, "out of memory");
        unsigned char *buf = NULL;
        size_t len = 0;
        char why[512];
        st = dg_src_read_whole(path, MAX_IMAGE_FILE, &buf, &len, why, sizeof why);
        double t1 = dg_now();
        if (t)
            t->read += t1 - t0;
        if (st) {
            /* read_whole's message already names the file. */
            dg_fail_buf(err, errlen, st == DG_ERR_NOMEM ? st : DG_ERR_FORMAT, "%s", why);
            st = st == DG_ERR_NOMEM ? st : DG_ERR_FORMAT;
        } else {
            st = dg_decode_image_limit(buf, len, s->channels, s->decode_budget, img, why,
                                       sizeof why);
            if (st)
                dg_fail_buf(err, errlen, st, "%s: %s", path, why);
            else
                img->label = s->labels[i];
        }
        if (t)
            t->decode += dg_now() - t1;
        dg_free(buf);
        dg_free(path);
        return st;
    }
    }
    if (t)
        t->decode += dg_now() - t0;
    return st;
}

const dg_source_links *dg_source_links_seen(const dg_source *s)
{
    return &s->links;
}

void dg_source_set_decode_budget(dg_source *s, size_t bytes)
{
    s->decode_budget = bytes;
}

cJSON *dg_source_identity(const dg_source *s)
{
    return cJSON_Duplicate(s->identity, 1);
}

void dg_image_free(dg_image *img)
{
    if (!img)
        return;
    dg_free(img->data);
    img->data = NULL;
    img->c = img->h = img->w = 0;
}
