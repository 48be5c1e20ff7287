/* The fixture server's request parser (slo.h): the bytes at the front of a
 * connection read as one HTTP/1.1 request, or not yet one, or refused. No
 * I/O and no allocation; it reads in[0..len) and nothing past it, so the
 * bytes need no terminating NUL (tests/fuzz/fuzz_slo_http.c). */
#include "slo/slo.h"

#include <string.h>
#include <strings.h>

/* The value of header name in head[0..hlen) (the lines after the request
 * line), blanks before it skipped, up to its line's end; NULL when none. */
static const char *header(const char *head, size_t hlen, const char *name, size_t *vlen)
{
    size_t nl = strlen(name);
    const char *end = head + hlen;
    for (const char *p = memchr(head, '\n', hlen); p; p = memchr(p, '\n', (size_t)(end - p))) {
        p++;
        if ((size_t)(end - p) <= nl || strncasecmp(p, name, nl) != 0 || p[nl] != ':')
            continue;
        const char *v = p + nl + 1;
        while (v < end && (*v == ' ' || *v == '\t'))
            v++;
        const char *e = v;
        while (e < end && *e != '\r' && *e != '\n')
            e++;
        *vlen = (size_t)(e - v);
        return v;
    }
    return NULL;
}

/* A Content-Length as strtol reads it (a sign, then digits; none: 0), the
 * size held at cap + 1 so that any larger one stays larger than cap. */
static long long content_length(const char *v, size_t n, size_t cap)
{
    size_t i = 0;
    bool neg = i < n && v[i] == '-';
    if (i < n && (v[i] == '-' || v[i] == '+'))
        i++;
    unsigned long long x = 0;
    for (; i < n && v[i] >= '0' && v[i] <= '9'; i++)
        x = x > cap / 10 ? (unsigned long long)cap + 1 : x * 10 + (unsigned)(v[i] - '0');
    return neg ? -(long long)x : (long long)x;
}

/* The next word of the request line at *p (before end) into buf: "" when it
 * does not fit in len bytes with its NUL. */
static void word(const char **p, const char *end, char *buf, size_t len)
{
    while (*p < end && (**p == ' ' || **p == '\t'))
        (*p)++;
    const char *w = *p;
    while (*p < end && **p != ' ' && **p != '\t')
        (*p)++;
    size_t n = (size_t)(*p - w);
    if (n >= len)
        n = 0;
    memcpy(buf, w, n);
    buf[n] = '\0';
}

static slo_http_state refuse(slo_http_req *r, size_t len, int status, const char *why)
{
    r->keep_alive = false;
    r->used = len;
    r->status = status;
    r->why = why;
    return r->state = SLO_HTTP_REFUSED;
}

slo_http_state dg_slo_http_parse(const char *in, size_t len, size_t max, slo_http_req *r)
{
    memset(r, 0, sizeof *r);
    const char *stop = len >= 4 ? memmem(in, len, "\r\n\r\n", 4) : NULL;
    if (!stop) {
        if (len >= max)
            return refuse(r, len, 413, "request headers too large");
        return r->state = SLO_HTTP_MORE;
    }
    size_t hlen = (size_t)(stop - in) + 4, vl = 0;
    if (hlen > max)
        return refuse(r, len, 413, "request headers too large");
    const char *v = header(in, hlen, "Content-Length", &vl);
    long long body = v ? content_length(v, vl, max) : 0;
    const char *line_end = in;
    while (line_end < stop && *line_end != '\r' && *line_end != '\n')
        line_end++;
    const char *conn = header(in, hlen, "Connection", &vl);
    r->keep_alive = !(conn && vl == 5 && strncasecmp(conn, "close", 5) == 0) &&
                    !memmem(in, (size_t)(line_end - in), "HTTP/1.0", 8);
    if (header(in, hlen, "Transfer-Encoding", &vl) || body < 0 || body > (long long)max)
        return refuse(r, len, body > (long long)max ? 413 : 400,
                      "a request body needs a Content-Length (at most 1 MiB)");
    if (len < hlen + (size_t)body) {
        v = header(in, hlen, "Expect", &vl);
        r->expect_continue =
            v && vl >= 12 && strncasecmp(v, "100-continue", 12) == 0 && len == hlen;
        return r->state = SLO_HTTP_MORE;
    }
    const char *p = in;
    word(&p, line_end, r->method, sizeof r->method);
    word(&p, line_end, r->path, sizeof r->path);
    r->path[strcspn(r->path, "?")] = '\0';
    r->body = hlen;
    r->body_len = (size_t)body;
    r->used = hlen + (size_t)body;
    return r->state = SLO_HTTP_REQUEST;
}
