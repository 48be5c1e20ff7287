/* Files devgate writes: created exclusively under a random name beside the
 * target, then renamed into place, so a reader never sees half a file, a full
 * disk leaves the old one, and a symlink planted in a shared folder is never
 * followed (O_EXCL refuses it; rename replaces the link, not its target). */
#include "core.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

dg_status dg_file_write_atomic(dg_ctx *ctx, const char *path, const void *data, size_t len)
{
    char clean[256];
    dg_copy_clean(clean, sizeof clean, path ? path : "");
    if (!path || !*path)
        return dg_fail(ctx, DG_ERR_USAGE, "write: no file name");
    char *tmp = dg_asprintf("%s.tmp-XXXXXX", path);
    if (!tmp)
        return dg_fail(ctx, DG_ERR_NOMEM, "cannot write %s: out of memory", clean);
    int fd = mkostemp(tmp, O_CLOEXEC);
    int err = fd < 0 ? errno : 0;
    if (!err) {
        /* mkostemp makes 0600; a pack file gets what the umask allows, as fopen would. */
        mode_t um = umask(0);
        umask(um);
        if (fchmod(fd, 0666 & ~um) != 0)
            err = errno;
        if (!err && !dg_write_all(fd, data, len))
            err = errno ? errno : EIO;
        if (close(fd) != 0 && !err)
            err = errno;
        if (!err && rename(tmp, path) != 0)
            err = errno;
        if (err)
            unlink(tmp);
    }
    dg_free(tmp);
    if (err)
        return dg_fail(ctx, DG_ERR_IO, "cannot write %s: %s", clean, strerror(err));
    return DG_OK;
}

bool dg_make_dirs(const char *path)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        errno = ENAMETOOLONG;
        return false;
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return false;
        *p = '/';
    }
    return mkdir(buf, 0777) == 0 || errno == EEXIST;
}

bool dg_read_small(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || size == 0) {
        if (fd >= 0)
            close(fd);
        return false;
    }
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    return true;
}

bool dg_write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void dg_remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
