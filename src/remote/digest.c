/* Content addresses of the files a remote node is sent: SHA-256 of a whole
 * file, read in pieces. docs/team.md. */
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

dg_status dg_sha256_file(dg_ctx *ctx, const char *path, char hex[65], uint64_t *size)
{
    hex[0] = '\0';
    if (size)
        *size = 0;
    char shown[512];
    dg_copy_clean(shown, sizeof shown, path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dg_fail(ctx, DG_ERR_IO, "%s: cannot open: %s", shown, strerror(errno));
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(md);
        close(fd);
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    }
    static _Thread_local unsigned char buf[1 << 16];
    uint64_t total = 0;
    dg_status st = DG_OK;
    for (;;) {
        ssize_t got = read(fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            st = dg_fail(ctx, DG_ERR_IO, "%s: cannot read: %s", shown, strerror(errno));
            break;
        }
        if (got == 0)
            break;
        EVP_DigestUpdate(md, buf, (size_t)got);
        total += (uint64_t)got;
    }
    close(fd);
    unsigned char d[32];
    unsigned int dl = 0;
    if (st == DG_OK && EVP_DigestFinal_ex(md, d, &dl) == 1 && dl == 32) {
        for (int i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", d[i]);
        if (size)
            *size = total;
    } else if (st == DG_OK) {
        st = dg_fail(ctx, DG_ERR_IO, "%s: SHA-256 failed", shown);
    }
    EVP_MD_CTX_free(md);
    return st;
}
