/* CIFAR-10 binary batch validation over memory: whole records of one label
 * byte and 3072 pixel bytes, labels below 10. */
#include "data/data.h"

#include <stdio.h>

#define CIFAR_RECORD 3073

dg_status dg_cifar_check(const unsigned char *buf, size_t len, size_t *records, char *err,
                         size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    *records = 0;
    if (len == 0) {
        if (err && errlen)
            snprintf(err, errlen, "empty CIFAR batch (0 records)");
        return DG_ERR_FORMAT;
    }
    if (len % CIFAR_RECORD != 0) {
        if (err && errlen)
            snprintf(err, errlen, "%zu bytes is not a whole number of %d-byte records (%zu + %zu)",
                     len, CIFAR_RECORD, len / CIFAR_RECORD, len % CIFAR_RECORD);
        return DG_ERR_FORMAT;
    }
    size_t n = len / CIFAR_RECORD;
    for (size_t i = 0; i < n; i++) {
        unsigned lab = buf[i * CIFAR_RECORD];
        if (lab >= 10) {
            if (err && errlen)
                snprintf(err, errlen, "record %zu: label %u is not below 10", i, lab);
            return DG_ERR_FORMAT;
        }
    }
    *records = n;
    return DG_OK;
}
