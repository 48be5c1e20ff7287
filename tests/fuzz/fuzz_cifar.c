/* libFuzzer harness for the CIFAR-10 batch check: any input gives DG_OK or
 * DG_ERR_FORMAT with a reason; a success counts whole records with labels < 10. */
#include "data/data.h"
#include "fuzz.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t records = 0;
    char err[256];
    dg_status st = dg_cifar_check(data, size, &records, err, sizeof err);
    if (st != DG_OK && (st != DG_ERR_FORMAT || !err[0]))
        abort();
    if (st == DG_OK) {
        if (records == 0 || records * 3073 != size)
            abort();
        for (size_t i = 0; i < records; i++)
            if (data[i * 3073] >= 10)
                abort();
    }
    return 0;
}
