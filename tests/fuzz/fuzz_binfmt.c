/* libFuzzer harness for the executable header readers: any input must give
 * DG_OK or DG_ERR_FORMAT with a reason, and a success must be self-consistent. */
#include "env/binfmt.h"
#include "fuzz.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dg_binfmt_info info;
    char err[256];
    dg_status st = dg_binfmt_parse(data, size, &info, err, sizeof err);
    if (st != DG_OK && (st != DG_ERR_FORMAT || !err[0]))
        abort();
    if (st == DG_OK) {
        if (info.nslices < 1 || info.nslices > DG_BINFMT_MAX_SLICES)
            abort();
        if (info.bits != 32 && info.bits != 64)
            abort();
        for (int i = 0; i < info.nslices; i++)
            if (!memchr(info.arch[i], '\0', sizeof info.arch[i]) || !info.arch[i][0])
                abort();
        (void)dg_binfmt_matches(&info, "x86_64");
    }
    return 0;
}
