/* libFuzzer harness for the spec reader (`accept --spec FILE`, the sweep
 * child's hand-off): any bytes go through dg_spec_decode. Nothing may crash;
 * a spec that decodes encodes again, and that text decodes to the same
 * canonical JSON (the round trip the sweep relies on). */
#include "devgate.h"
#include "fuzz.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    dg_ctx *ctx = dg_ctx_new();
    dg_spec *spec = NULL;
    if (dg_spec_decode(ctx, text, &spec) == DG_OK) {
        char *once = NULL, *twice = NULL;
        dg_spec *again = NULL;
        if (dg_spec_encode(ctx, dg_spec_opts(spec), &once) != DG_OK ||
            dg_spec_decode(ctx, once, &again) != DG_OK ||
            dg_spec_encode(ctx, dg_spec_opts(again), &twice) != DG_OK || strcmp(once, twice) != 0)
            abort();
        dg_string_free(once);
        dg_string_free(twice);
        dg_spec_free(again);
    } else if (!dg_errmsg(ctx)[0]) {
        abort(); /* a refusal says why */
    }
    dg_spec_free(spec);
    dg_ctx_free(ctx);
    free(text);
    return 0;
}
