/* IDX (MNIST) header parsing over memory: magic, element type, big-endian
 * dimensions, and an exact size check against the buffer. */
#include "data/data.h"

#include <stdio.h>
#include <string.h>

dg_status dg_idx_parse(const unsigned char *buf, size_t len, dg_idx *out, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    memset(out, 0, sizeof *out);
    if (len < 4)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT, "truncated IDX header (%zu bytes)", len);
    if (buf[0] != 0 || buf[1] != 0)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT,
                           "not an IDX file (magic %02x %02x, expected 00 00)", buf[0], buf[1]);
    int type = buf[2], ndim = buf[3];
    if (type != 0x08)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT,
                           "IDX element type 0x%02x is not supported (only 0x08, unsigned byte)",
                           type);
    if (ndim < 1 || ndim > 4)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT, "IDX has %d dimensions (1 to 4 supported)",
                           ndim);
    size_t hdr = 4 + 4 * (size_t)ndim;
    if (len < hdr)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT,
                           "truncated IDX header: %d dimensions need %zu bytes, file has %zu", ndim,
                           hdr, len);
    out->type = type;
    out->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        const unsigned char *p = buf + 4 + 4 * d;
        out->dims[d] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    }
    size_t item = 1;
    for (int d = 1; d < ndim; d++) {
        if (out->dims[d] == 0)
            return dg_fail_buf(err, errlen, DG_ERR_FORMAT, "IDX dimension %d is 0", d);
        if (item > SIZE_MAX / out->dims[d])
            return dg_fail_buf(err, errlen, DG_ERR_FORMAT, "IDX item size overflows");
        item *= out->dims[d];
    }
    size_t count = out->dims[0], have = len - hdr;
    if (count > SIZE_MAX / item || count * item != have)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT,
                           "header says %zu items of %zu bytes, file has %zu bytes", count, item,
                           have);
    out->count = count;
    out->item_bytes = item;
    out->data = buf + hdr;
    return DG_OK;
}
