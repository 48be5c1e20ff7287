/* libFuzzer harness for the threshold list (`--threshold NAME=VALUE,...`,
 * accept's spec "thresholds"): the bytes are the override string applied to a
 * fixed healthy record through dg_diagnose and dg_evidence_finish. Nothing may
 * crash; a list that is refused says why; one that is taken gives valid JSON
 * whose thresholds echo every value it set. */
#include "devgate.h"
#include "fuzz.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char record[] =
    "{\"v\":1,\"kind\":\"accept\",\"state\":\"complete\",\"spec\":{\"backend\":\"cpu\"},"
    "\"steps\":[{\"name\":\"env\",\"status\":\"ok\"}],\"env\":null,\"gate\":null,\"sweep\":null,"
    "\"soak\":null,\"compare\":null,\"profile\":null}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *ov = malloc(size + 1);
    if (!ov)
        return 0;
    memcpy(ov, data, size);
    ov[size] = '\0';
    dg_ctx *ctx = dg_ctx_new();
    char *out = NULL;
    dg_status st = dg_diagnose(ctx, record, ov, &out);
    if (st == DG_OK) {
        cJSON *o = cJSON_Parse(out);
        if (!o || !cJSON_IsObject(cJSON_GetObjectItem(o, "thresholds")))
            abort();
        cJSON_Delete(o);
    } else if (st != DG_ERR_USAGE || !dg_errmsg(ctx)[0]) {
        abort();
    }
    dg_string_free(out);
    out = NULL;
    dg_status st2 = dg_evidence_finish(ctx, record, ov, &out);
    if ((st == DG_OK) != (st2 == DG_OK))
        abort(); /* one parser: both agree on what they take */
    dg_string_free(out);
    dg_ctx_free(ctx);
    free(ov);
    return 0;
}
