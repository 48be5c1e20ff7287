/* The response streams of an inference server, parsed as they arrive (slo.h):
 * OpenAI server-sent events and Ollama NDJSON. Nothing here trusts the
 * server: lines are capped, JSON that is not what is expected is counted as
 * malformed, strings kept are cleaned. */
#include "slo/slo.h"

#include <math.h>
#include <string.h>

void dg_slo_stream_init(slo_stream *s, dg_slo_api api)
{
    memset(s, 0, sizeof *s);
    s->api = api;
    s->usage_tokens = -1;
    s->prompt_tokens = -1;
    s->eval_s = NAN;
}

void dg_slo_stream_free(slo_stream *s)
{
    dg_free(s->part);
    dg_free(s->data);
    s->part = s->data = NULL;
    s->plen = s->pcap = s->dlen = s->dcap = 0;
}

static const cJSON *item(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static bool nonempty_string(const cJSON *v)
{
    return cJSON_IsString(v) && v->valuestring[0];
}

/* A count a server reported: a finite non-negative integer, else -1. */
static long count_of(const cJSON *v)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble > 1e12 || v->valuedouble != floor(v->valuedouble))
        return -1;
    return (long)v->valuedouble;
}

static void keep_error(slo_stream *s, const cJSON *err)
{
    if (s->error[0])
        return;
    const char *msg = cJSON_IsString(err)                     ? err->valuestring
                      : nonempty_string(item(err, "message")) ? item(err, "message")->valuestring
                      : cJSON_IsObject(err) || cJSON_IsArray(err) ? "an error object"
                                                                  : NULL;
    if (msg)
        dg_copy_clean(s->error, sizeof s->error, msg);
}

static void keep_model(slo_stream *s, const cJSON *o)
{
    const cJSON *m = item(o, "model");
    if (!s->model[0] && nonempty_string(m))
        dg_copy_clean(s->model, sizeof s->model, m->valuestring);
}

/* One OpenAI chunk object; returns 1 when it carried text. */
static long openai_chunk(slo_stream *s, const cJSON *o)
{
    keep_model(s, o);
    const cJSON *err = item(o, "error");
    if (err && !cJSON_IsNull(err))
        keep_error(s, err);
    const cJSON *usage = item(o, "usage");
    if (cJSON_IsObject(usage)) {
        long c = count_of(item(usage, "completion_tokens")),
             p = count_of(item(usage, "prompt_tokens"));
        if (c >= 0)
            s->usage_tokens = c;
        if (p >= 0)
            s->prompt_tokens = p;
    }
    const cJSON *choices = item(o, "choices");
    if (!cJSON_IsArray(choices))
        return 0;
    const cJSON *ch = cJSON_GetArrayItem(choices, 0);
    const cJSON *delta = item(ch, "delta");
    /* Reasoning models stream their reasoning first: it is the first token too. */
    if (nonempty_string(item(ch, "text")) || nonempty_string(item(delta, "content")) ||
        nonempty_string(item(delta, "reasoning_content")) ||
        nonempty_string(item(delta, "reasoning")))
        return 1;
    return 0;
}

/* One Ollama line object; returns 1 when it carried text. */
static long ollama_chunk(slo_stream *s, const cJSON *o)
{
    keep_model(s, o);
    const cJSON *err = item(o, "error");
    if (err && !cJSON_IsNull(err))
        keep_error(s, err);
    if (cJSON_IsTrue(item(o, "done"))) {
        s->done = true;
        long c = count_of(item(o, "eval_count")), p = count_of(item(o, "prompt_eval_count"));
        if (c >= 0)
            s->usage_tokens = c;
        if (p >= 0)
            s->prompt_tokens = p;
        long ns = count_of(item(o, "eval_duration"));
        if (ns >= 0)
            s->eval_s = (double)ns * 1e-9;
    }
    if (nonempty_string(item(o, "response")) ||
        nonempty_string(item(item(o, "message"), "content")) ||
        nonempty_string(item(item(o, "message"), "thinking")) ||
        nonempty_string(item(o, "thinking")))
        return 1;
    return 0;
}

/* One parsed JSON value of the stream (taken: freed here). */
static long handle(slo_stream *s, cJSON *o)
{
    long k = 0;
    if (cJSON_IsObject(o))
        k = s->api == DG_SLO_OLLAMA ? ollama_chunk(s, o) : openai_chunk(s, o);
    else
        s->malformed++;
    cJSON_Delete(o);
    s->chunks += k;
    return k;
}

/* A JSON text of the stream: an SSE event's data or an NDJSON line. */
static long parse_json(slo_stream *s, const char *text, size_t n)
{
    return handle(s, cJSON_ParseWithLength(text, n));
}

/* Grows *buf (capacity *cap) to hold need bytes; false (nomem set) when it cannot. */
static bool grow(slo_stream *s, char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    char *p = dg_realloc(*buf, c);
    if (!p) {
        s->nomem = true;
        return false;
    }
    *buf = p;
    *cap = c;
    return true;
}

/* The end of an SSE event: its data (lines joined by '\n') is JSON or [DONE]. */
static long sse_event(slo_stream *s)
{
    long k = 0;
    if (s->in_data && s->dlen) {
        if (s->dlen == 6 && memcmp(s->data, "[DONE]", 6) == 0)
            s->done = true;
        else
            k = parse_json(s, s->data, s->dlen);
    }
    s->in_data = false;
    s->dlen = 0;
    return k;
}

/* One SSE line (without its end): "data:" appends to the event; a blank line
 * ends it; comments (":"), event:, id: and retry: are ignored. */
static long sse_line(slo_stream *s, const char *l, size_t n)
{
    if (n == 0)
        return sse_event(s);
    if (n < 5 || memcmp(l, "data:", 5) != 0)
        return 0;
    l += 5;
    n -= 5;
    if (n && l[0] == ' ') {
        l++;
        n--;
    }
    size_t need = s->dlen + (s->in_data ? 1 : 0) + n + 1;
    if (need > SLO_LINE_MAX) {
        s->overlong = true;
        s->in_data = false;
        s->dlen = 0;
        return 0;
    }
    if (!grow(s, &s->data, &s->dcap, need))
        return 0;
    if (s->in_data)
        s->data[s->dlen++] = '\n';
    memcpy(s->data + s->dlen, l, n);
    s->dlen += n;
    s->in_data = true;
    /* Servers that end each event with one newline (no blank line) still
     * stream: a data line that is [DONE] or a whole JSON object ends its
     * event at once. */
    if (s->dlen == 6 && memcmp(s->data, "[DONE]", 6) == 0)
        return sse_event(s);
    if (s->dlen >= 2 && s->data[0] == '{' && s->data[s->dlen - 1] == '}') {
        cJSON *o = cJSON_ParseWithLength(s->data, s->dlen);
        if (o) {
            s->in_data = false;
            s->dlen = 0;
            return handle(s, o);
        }
    }
    return 0;
}

/* One complete line of either format, without its end. */
static long one_line(slo_stream *s, const char *l, size_t n)
{
    if (n && l[n - 1] == '\r')
        n--;
    if (s->api == DG_SLO_OLLAMA) {
        size_t i = 0;
        while (i < n && (l[i] == ' ' || l[i] == '\t'))
            i++;
        return i < n ? parse_json(s, l + i, n - i) : 0;
    }
    return sse_line(s, l, n);
}

long dg_slo_stream_feed(slo_stream *s, const char *data, size_t n)
{
    long k = 0;
    while (n) {
        const char *nl = memchr(data, '\n', n);
        size_t take = nl ? (size_t)(nl - data) : n;
        if (s->plen + take > SLO_LINE_MAX) {
            /* An overlong line is dropped up to its end. */
            s->overlong = true;
            s->plen = 0;
            s->skipping = true;
        }
        if (s->skipping) {
            if (!nl)
                return k;
            s->skipping = false;
        } else if (!nl || s->plen) {
            if (!grow(s, &s->part, &s->pcap, s->plen + take + 1))
                return k;
            memcpy(s->part + s->plen, data, take);
            s->plen += take;
            if (nl) {
                k += one_line(s, s->part, s->plen);
                s->plen = 0;
            }
        } else {
            k += one_line(s, data, take);
        }
        if (!nl)
            return k;
        n -= take + 1;
        data = nl + 1;
    }
    return k;
}

long dg_slo_stream_finish(slo_stream *s)
{
    long k = 0;
    if (s->plen && !s->skipping)
        k += one_line(s, s->part, s->plen);
    s->plen = 0;
    s->skipping = false;
    if (s->api == DG_SLO_OPENAI)
        k += sse_event(s);
    return k;
}
