/* libFuzzer harness for `devgate compare RUN_A RUN_B` on two record files:
 * the input is split at its first NUL (or in half) into two records, which go
 * through dg_compare_runs with and without --force. Nothing may crash; a
 * comparison that succeeds is valid JSON. */
#include "devgate.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 2);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = buf[size + 1] = '\0';
    const char *a = buf, *b;
    const char *nul = memchr(buf, '\0', size);
    if (nul) {
        b = nul + 1;
    } else {
        /* No separator: both halves, the second moved past a NUL of its own. */
        memmove(buf + size / 2 + 1, buf + size / 2, size - size / 2 + 1);
        buf[size / 2] = '\0';
        b = buf + size / 2 + 1;
    }
    dg_ctx *ctx = dg_ctx_new();
    for (int force = 0; force < 2; force++) {
        char *out = NULL;
        if (dg_compare_runs(ctx, a, b, force, NULL, &out) == DG_OK) {
            cJSON *o = cJSON_Parse(out);
            if (!o)
                abort();
            cJSON_Delete(o);
        }
        dg_string_free(out);
    }
    dg_ctx_free(ctx);
    free(buf);
    return 0;
}
