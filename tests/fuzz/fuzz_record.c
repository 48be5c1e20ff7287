/* libFuzzer harness for evidence records, which `devgate report` reads from any
 * file it is given: the bytes go through the rules (dg_diagnose), the evidence
 * finish and every renderer. Nothing may crash; a record that finishes must
 * render in every format, and the page must never carry a raw <script. */
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
    char *diag = NULL, *done = NULL;
    dg_diagnose(ctx, text, NULL, &diag);
    dg_string_free(diag);
    const char *rec = text;
    if (dg_evidence_finish(ctx, text, NULL, &done) == DG_OK)
        rec = done;
    for (int f = DG_REPORT_HTML; f <= DG_REPORT_TEXT; f++) {
        char *out = NULL;
        dg_status st = dg_report_render(ctx, rec, (dg_report_format)f, &out);
        if (done && st != DG_OK)
            abort(); /* a finished record always renders */
        if (f == DG_REPORT_HTML && out && strstr(out, "<script"))
            abort();
        dg_string_free(out);
    }
    dg_string_free(done);
    dg_ctx_free(ctx);
    free(text);
    return 0;
}
