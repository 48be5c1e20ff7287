/* libFuzzer harness for the request parser of devgate slo's fixture server
 * (dg_slo_http_parse, src/slo/fixture_http.c): the input is what a client
 * sent on one connection, read as the server reads it, one request after
 * another. Nothing may crash or read past the bytes given (the input is not
 * NUL-terminated); every answer is one of the three states with its fields
 * in bounds; a request is never taken before its last byte is here; the
 * same bytes give the same answer; under a small limit as under the real
 * one. */
#include "fuzz.h"
#include "slo/slo.h"

#include <stdlib.h>
#include <string.h>

/* Aborts unless r, the answer for in[0..len) under max, is well-formed. */
static void check(const char *in, size_t len, size_t max, const slo_http_req *r)
{
    if (r->method[sizeof r->method - 1] || r->path[sizeof r->path - 1])
        abort();
    switch (r->state) {
    case SLO_HTTP_MORE:
        if (r->used || (len >= max && !memmem(in, len, "\r\n\r\n", 4)))
            abort();
        break;
    case SLO_HTTP_REFUSED:
        if (r->used != len || (r->status != 400 && r->status != 413) || !r->why || r->keep_alive ||
            r->expect_continue)
            abort();
        break;
    case SLO_HTTP_REQUEST:
        if (r->body < 4 || r->body > max || r->body_len > max || r->used != r->body + r->body_len ||
            r->used > len || r->expect_continue || memcmp(in + r->body - 4, "\r\n\r\n", 4) != 0 ||
            strchr(r->path, '?'))
            abort();
        break;
    default: abort();
    }
}

/* Reads in[0..len) as a connection's stream of requests under max. */
static void read_all(const char *in, size_t len, size_t max)
{
    size_t at = 0;
    for (;;) {
        slo_http_req r, again;
        slo_http_state st = dg_slo_http_parse(in + at, len - at, max, &r);
        if (st != r.state)
            abort();
        check(in + at, len - at, max, &r);
        if (dg_slo_http_parse(in + at, len - at, max, &again) != st || again.used != r.used ||
            strcmp(again.path, r.path) != 0 || again.keep_alive != r.keep_alive)
            abort();
        if (st != SLO_HTTP_REQUEST)
            return;
        /* One byte short of the request, it is not a request yet. */
        slo_http_req part;
        if (dg_slo_http_parse(in + at, r.used - 1, max, &part) != SLO_HTTP_MORE)
            abort();
        at += r.used;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    read_all((const char *)data, size, 1u << 20);
    read_all((const char *)data, size, 64);
    return 0;
}
