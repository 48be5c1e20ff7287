/* libFuzzer harness for the IDX header parser: any input gives DG_OK or
 * DG_ERR_FORMAT with a reason, and a success describes bytes inside the input. */
#include "data/data.h"
#include "fuzz.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dg_idx idx;
    char err[256];
    dg_status st = dg_idx_parse(data, size, &idx, err, sizeof err);
    if (st != DG_OK && (st != DG_ERR_FORMAT || !err[0]))
        abort();
    if (st == DG_OK) {
        if (idx.ndim < 1 || idx.ndim > 4 || idx.type != 0x08 || idx.count != idx.dims[0])
            abort();
        if (idx.data < data || (size_t)(idx.data - data) + idx.count * idx.item_bytes != size)
            abort();
        /* Touch every byte so a bad pointer or size shows under ASan. */
        unsigned sum = 0;
        for (size_t i = 0; i < idx.count * idx.item_bytes; i++)
            sum += idx.data[i];
        volatile unsigned sink = sum;
        (void)sink;
    }
    return 0;
}
