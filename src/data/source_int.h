/* What source.c's data set kinds share (source_files.c): reading their
 * files and the set's identity. Internal to src/data/. */
#ifndef DG_DATA_SOURCE_INT_H
#define DG_DATA_SOURCE_INT_H

#include "data/data.h"

#include <stdint.h>
#include <sys/types.h>

#define MAX_FILE_BYTES ((size_t)2 << 30) /* cap on a file or inflated stream */
#define IDENT_SAMPLE 4096                /* bytes hashed at each end and the middle of a file */
#define IDENT_MAX_FILES 64               /* files the identity names */

/* One file of the data set as the identity sees it. */
typedef struct ident_file {
    char *name; /* relative to the spec root */
    char *path; /* as opened */
    uint64_t bytes;
    const unsigned char *mem; /* the file's bytes when already in memory */
} ident_file;

/* What a file that is not a regular file is, for messages. */
const char *dg_src_not_regular(mode_t m);
/* errno e as text in buf: read_whole runs on the loader's worker threads,
 * and POSIX lets strerror return one buffer shared by every thread. */
const char *dg_src_err_text(int e, char *buf, size_t n);
/* Reads a whole file (at most cap bytes) into a dg_malloc'd buffer; on failure
 * returns DG_ERR_IO, DG_ERR_FORMAT (too large) or DG_ERR_NOMEM with a message.
 * Called from the loader's worker threads: nothing here is shared. */
dg_status dg_src_read_whole(const char *path, size_t cap, unsigned char **out, size_t *len,
                            char *err, size_t errlen);
/* Inflates a gzip buffer (all members) into a new buffer of at most
 * MAX_FILE_BYTES; DG_ERR_FORMAT for corrupt or truncated streams. */
dg_status dg_src_gunzip(const char *name, const unsigned char *in, size_t inlen,
                        unsigned char **out, size_t *outlen, char *err, size_t errlen);
/* The last path component (for sources named by file rather than folder). */
const char *dg_src_base_name(const char *path);
/* Builds {"kind", "files", "files_total", "sha256", "samples", "classes"}
 * over files (sorted here by name). */
dg_status dg_src_identity(dg_ctx *ctx, const char *kind, ident_file *files, size_t nfiles,
                          size_t samples, int classes, cJSON **out);
/* The entries of dir passing keep() (dot files left out), sorted, in a new
 * list (dg_src_free_list); DG_ERR_IO when dir is unreadable. */
dg_status dg_src_list_dir(dg_ctx *ctx, const char *dir,
                          int (*keep)(const char *dir, const char *name, void *user), void *user,
                          char ***out, size_t *n);
/* Frees what dg_src_list_dir made. */
void dg_src_free_list(char **v, size_t n);
#endif
