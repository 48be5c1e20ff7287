/* libFuzzer harness for devgate slo's response streams: the input is what an
 * inference server sends back. The first byte picks the API (OpenAI SSE or
 * Ollama NDJSON) and where the bytes are split; the rest goes through the
 * parser in two pieces and again byte by byte. Nothing may crash, and the
 * counts must not depend on how the bytes arrived. */
#include "fuzz.h"
#include "slo/slo.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    dg_slo_api api = data[0] & 1 ? DG_SLO_OLLAMA : DG_SLO_OPENAI;
    const char *text = (const char *)data + 1;
    size_t n = size - 1, cut = n ? (data[0] >> 1) % (n + 1) : 0;
    slo_stream a, b;
    dg_slo_stream_init(&a, api);
    dg_slo_stream_init(&b, api);
    long ka = dg_slo_stream_feed(&a, text, cut);
    ka += dg_slo_stream_feed(&a, text + cut, n - cut);
    ka += dg_slo_stream_finish(&a);
    long kb = 0;
    for (size_t i = 0; i < n; i++)
        kb += dg_slo_stream_feed(&b, text + i, 1);
    kb += dg_slo_stream_finish(&b);
    if (ka != a.chunks || kb != b.chunks || ka < 0 || ka > (long)n)
        abort();
    if (!a.nomem && !b.nomem &&
        (ka != kb || a.done != b.done || a.usage_tokens != b.usage_tokens ||
         a.malformed != b.malformed || strcmp(a.error, b.error) != 0))
        abort();
    if (strlen(a.error) >= sizeof a.error || strlen(a.model) >= sizeof a.model)
        abort();
    dg_slo_stream_free(&a);
    dg_slo_stream_free(&b);
    return 0;
}
