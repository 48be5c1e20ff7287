/* A data set's files as the sources read them (source_int.h): whole files
 * under a cap, gzip streams, sorted folder listings, and the set's identity
 * hash (SHA-256 over every file's bytes, sampled past IDENT_SAMPLE). Below
 * source.c's kinds, which all read through it. */
#include "data/source_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ---- helpers -------------------------------------------------------------- */

/* What a file that is not a regular file is, for messages. */
const char *dg_src_not_regular(mode_t m)
{
    if (S_ISDIR(m))
        return "is a directory";
    if (S_ISCHR(m))
        return "is a character device";
    if (S_ISBLK(m))
        return "is a block device";
    if (S_ISFIFO(m))
        return "is a FIFO";
    if (S_ISSOCK(m))
        return "is a socket";
    return "is a special file";
}

/* errno e as text in buf: read_whole runs on the loader's worker threads,
 * and POSIX lets strerror return one buffer shared by every thread. */
const char *dg_src_err_text(int e, char *buf, size_t n)
{
    return strerror_r(e, buf, n); /* the GNU form (_GNU_SOURCE): buf or a static text */
}

/* Reads a whole file (at most cap bytes) into a dg_malloc'd buffer; on failure
 * returns DG_ERR_IO, DG_ERR_FORMAT (too large) or DG_ERR_NOMEM with a message.
 * Called from the loader's worker threads: nothing here is shared. */
dg_status dg_src_read_whole(const char *path, size_t cap, unsigned char **out, size_t *len,
                            char *err, size_t errlen)
{
    *out = NULL;
    *len = 0;
    char eb[128];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
    if (fd < 0)
        return dg_fail_buf(err, errlen, DG_ERR_IO, "%s: %s", path,
                           dg_src_err_text(errno, eb, sizeof eb));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return dg_fail_buf(err, errlen, DG_ERR_IO, "%s: %s", path,
                           dg_src_err_text(e, eb, sizeof eb));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return dg_fail_buf(err, errlen, DG_ERR_IO, "%s: %s, not a regular file", path,
                           dg_src_not_regular(sb.st_mode));
    }
    if ((uint64_t)sb.st_size > cap) {
        close(fd);
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT, "%s: %lld bytes is over the %zu-byte limit",
                           path, (long long)sb.st_size, cap);
    }
    size_t n = (size_t)sb.st_size, got = 0;
    unsigned char *buf = dg_malloc(n ? n : 1);
    if (!buf) {
        close(fd);
        return dg_fail_buf(err, errlen, DG_ERR_NOMEM, "%s: out of memory for %zu bytes", path, n);
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            dg_free(buf);
            return dg_fail_buf(err, errlen, DG_ERR_IO, "%s: %s", path,
                               e ? dg_src_err_text(e, eb, sizeof eb)
                                 : "file shrank while being read");
        }
        got += (size_t)r;
    }
    close(fd);
    *out = buf;
    *len = n;
    return DG_OK;
}

/* Inflates a gzip buffer (all members) into a new buffer of at most
 * MAX_FILE_BYTES; DG_ERR_FORMAT for corrupt or truncated streams. */
dg_status dg_src_gunzip(const char *name, const unsigned char *in, size_t inlen,
                        unsigned char **out, size_t *outlen, char *err, size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
        return dg_fail_buf(err, errlen, DG_ERR_NOMEM, "%s: cannot start zlib", name);
    size_t cap = inlen * 4 < (1u << 20) ? (1u << 20) : inlen * 4, n = 0;
    if (cap > MAX_FILE_BYTES)
        cap = MAX_FILE_BYTES;
    unsigned char *buf = dg_malloc(cap);
    dg_status st = DG_OK;
    size_t pos = 0;
    int zr = Z_OK;
    while (buf) {
        if (n == cap) {
            if (cap >= MAX_FILE_BYTES) {
                st = dg_fail_buf(err, errlen, DG_ERR_FORMAT, "%s: inflates to more than %zu bytes",
                                 name, MAX_FILE_BYTES);
                break;
            }
            size_t ncap = cap * 2 > MAX_FILE_BYTES ? MAX_FILE_BYTES : cap * 2;
            unsigned char *nb = dg_realloc(buf, ncap);
            if (!nb)
                break;
            buf = nb;
            cap = ncap;
        }
        size_t in_chunk = inlen - pos > (1u << 30) ? (1u << 30) : inlen - pos;
        size_t out_chunk = cap - n > (1u << 30) ? (1u << 30) : cap - n;
        z.next_in = (unsigned char *)in + pos;
        z.avail_in = (uInt)in_chunk;
        z.next_out = buf + n;
        z.avail_out = (uInt)out_chunk;
        zr = inflate(&z, Z_NO_FLUSH);
        pos += in_chunk - z.avail_in;
        n += out_chunk - z.avail_out;
        if (zr == Z_STREAM_END) {
            /* Another member may follow (concatenated gzip files). */
            if (pos < inlen && in[pos] == 0x1f && inlen - pos >= 2 && in[pos + 1] == 0x8b) {
                inflateReset(&z);
                continue;
            }
            break;
        }
        if (zr == Z_BUF_ERROR && pos == inlen && z.avail_out > 0) {
            st = dg_fail_buf(err, errlen, DG_ERR_FORMAT, "%s: truncated gzip stream", name);
            break;
        }
        if (zr != Z_OK && zr != Z_BUF_ERROR) {
            st = dg_fail_buf(err, errlen, DG_ERR_FORMAT, "%s: corrupt gzip stream (%s)", name,
                             z.msg ? z.msg : "zlib error");
            break;
        }
        if (zr == Z_OK && pos == inlen && z.avail_out > 0) {
            st = dg_fail_buf(err, errlen, DG_ERR_FORMAT, "%s: truncated gzip stream", name);
            break;
        }
    }
    inflateEnd(&z);
    if (!buf)
        return dg_fail_buf(err, errlen, DG_ERR_NOMEM, "%s: out of memory inflating", name);
    if (st != DG_OK) {
        dg_free(buf);
        return st;
    }
    if (zr != Z_STREAM_END) {
        dg_free(buf);
        return dg_fail_buf(err, errlen, DG_ERR_NOMEM, "%s: out of memory inflating", name);
    }
    *out = buf;
    *outlen = n;
    return DG_OK;
}

/* The last path component (for sources named by file rather than folder). */
const char *dg_src_base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s && s[1] ? s + 1 : path;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_ident(const void *a, const void *b)
{
    return strcmp(((const ident_file *)a)->name, ((const ident_file *)b)->name);
}

/* Adds bytes [off, off+n) of the file (or of mem when given) to the digest. */
static dg_status hash_range(EVP_MD_CTX *md, int fd, const unsigned char *mem, uint64_t off,
                            size_t n)
{
    if (mem)
        return EVP_DigestUpdate(md, mem + off, n) == 1 ? DG_OK : DG_ERR_IO;
    unsigned char b[IDENT_SAMPLE];
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, b + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return DG_ERR_IO;
        got += (size_t)r;
    }
    return EVP_DigestUpdate(md, b, n) == 1 ? DG_OK : DG_ERR_IO;
}

/* Adds one file to the digest: its name, size and sampled bytes (first,
 * middle and last 4 KiB, each clamped to the file), from f->mem when set. */
static dg_status hash_file(dg_ctx *ctx, EVP_MD_CTX *md, const ident_file *f)
{
    const unsigned char *mem = f->mem;
    unsigned char sz[8];
    for (int i = 0; i < 8; i++)
        sz[i] = (unsigned char)(f->bytes >> (8 * i));
    if (EVP_DigestUpdate(md, f->name, strlen(f->name) + 1) != 1 || EVP_DigestUpdate(md, sz, 8) != 1)
        return dg_fail(ctx, DG_ERR_IO, "%s: hashing failed", f->path);
    int fd = -1;
    if (!mem) {
        fd = open(f->path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return dg_fail(ctx, DG_ERR_IO, "%s: %s", f->path, strerror(errno));
    }
    uint64_t n = f->bytes, k = n < IDENT_SAMPLE ? n : IDENT_SAMPLE;
    uint64_t mid = n / 2 >= IDENT_SAMPLE / 2 ? n / 2 - IDENT_SAMPLE / 2 : 0;
    dg_status st = hash_range(md, fd, mem, 0, (size_t)k);
    if (st == DG_OK)
        st = hash_range(md, fd, mem, mid, (size_t)(mid + k <= n ? k : n - mid));
    if (st == DG_OK)
        st = hash_range(md, fd, mem, n - k, (size_t)k);
    if (fd >= 0)
        close(fd);
    return st == DG_OK ? DG_OK : dg_fail(ctx, DG_ERR_IO, "%s: read failed while hashing", f->path);
}

/* Builds {"kind", "files", "files_total", "sha256", "samples", "classes"}
 * over files (sorted here by name). */
dg_status dg_src_identity(dg_ctx *ctx, const char *kind, ident_file *files, size_t nfiles,
                          size_t samples, int classes, cJSON **out)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory hashing the data set");
    if (nfiles > 1)
        qsort(files, nfiles, sizeof *files, cmp_ident);
    dg_status st = DG_OK;
    if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1 ||
        EVP_DigestUpdate(md, kind, strlen(kind) + 1) != 1)
        st = dg_fail(ctx, DG_ERR_IO, "SHA-256 is not available");
    for (size_t i = 0; st == DG_OK && i < nfiles; i++)
        st = hash_file(ctx, md, &files[i]);
    unsigned char dig[EVP_MAX_MD_SIZE];
    unsigned dlen = 0;
    if (st == DG_OK && EVP_DigestFinal_ex(md, dig, &dlen) != 1)
        st = dg_fail(ctx, DG_ERR_IO, "SHA-256 failed");
    EVP_MD_CTX_free(md);
    if (st != DG_OK)
        return st;
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    for (unsigned i = 0; i < dlen; i++)
        snprintf(hex + 2 * i, 3, "%02x", dig[i]);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", kind);
    cJSON *arr = cJSON_AddArrayToObject(o, "files");
    for (size_t i = 0; i < nfiles && i < IDENT_MAX_FILES; i++) {
        cJSON *f = cJSON_CreateObject();
        dg_json_add_str(f, "name", files[i].name);
        cJSON_AddNumberToObject(f, "bytes", (double)files[i].bytes);
        cJSON_AddItemToArray(arr, f);
    }
    cJSON_AddNumberToObject(o, "files_total", (double)nfiles);
    cJSON_AddStringToObject(o, "sha256", hex);
    cJSON_AddNumberToObject(o, "samples", (double)samples);
    cJSON_AddNumberToObject(o, "classes", classes);
    *out = o;
    return DG_OK;
}

/* Lists the entries of dir passing keep(), sorted; DG_ERR_IO when unreadable. */
dg_status dg_src_list_dir(dg_ctx *ctx, const char *dir,
                          int (*keep)(const char *dir, const char *name, void *user), void *user,
                          char ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return dg_fail(ctx, DG_ERR_IO, "%s: %s", dir, strerror(errno));
    char **v = NULL;
    size_t cnt = 0, cap = 0;
    struct dirent *e;
    dg_status st = DG_OK;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !keep(dir, e->d_name, user))
            continue;
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            char **nv = dg_realloc(v, ncap * sizeof *nv);
            if (!nv) {
                st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory listing %s", dir);
                break;
            }
            v = nv;
            cap = ncap;
        }
        if (!(v[cnt] = dg_strdup(e->d_name))) {
            st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory listing %s", dir);
            break;
        }
        cnt++;
    }
    closedir(d);
    if (st) {
        for (size_t i = 0; i < cnt; i++)
            dg_free(v[i]);
        dg_free(v);
        return st;
    }
    if (cnt)
        qsort(v, cnt, sizeof *v, cmp_str);
    *out = v;
    *n = cnt;
    return DG_OK;
}

void dg_src_free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dg_free(v[i]);
    dg_free(v);
}
