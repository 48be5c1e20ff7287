/* The fixture server (devgate slo --target fixture, docs/slo.md): devgate's
 * own model served in OpenAI's streaming shape on a listening socket the
 * caller hands in. One thread, poll(): HTTP/1.1 with keep-alive, the answers
 * chunked; every streamed token is one forward pass of the fixture model
 * (engine/infer.c), the active streams served in turn, one token each per
 * round, so a request's latency grows with the streams beside it as an
 * engine's does. Routes: POST /v1/completions, POST /v1/chat/completions,
 * GET /v1/models, GET /health, GET /metrics (vLLM's names). */
#include "engine/infer.h"
#include "slo/slo.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 4200
#define IN_MAX (1u << 20)    /* a request larger than this is refused */
#define OUT_HIGH (64u << 10) /* a stream whose reader lags this far waits its turn */

enum { C_READ, C_STREAM, C_CLOSE };

typedef struct conn {
    int fd;
    int state;
    char *in;
    size_t ilen, icap;
    char *out;
    size_t olen, ocap, osent;
    /* the request being answered */
    bool chat, stream, usage, keep_alive;
    uint64_t key;
    long pos, max_tokens, prompt_tokens, id;
    char *text; /* a whole answer's text (stream false) */
    size_t tlen;
} conn;

typedef struct server {
    dg_ctx *ctx;
    const dg_slo_fixture_opts *o;
    dg_infer *inf;
    char model_json[600]; /* the served model's name as a JSON string */
    const char *model;
    conn *c[MAX_CONNS];
    int nc;
    long next_id, answered, tokens, waiting;
    int rr; /* round robin start */
} server;

/* ---- buffers ------------------------------------------------------------------------ */

static bool out_add(conn *c, const char *s, size_t n)
{
    if (c->olen + n > c->ocap) {
        size_t cap = c->ocap ? c->ocap : 4096;
        while (cap < c->olen + n)
            cap *= 2;
        char *p = dg_realloc(c->out, cap);
        if (!p)
            return false;
        c->out = p;
        c->ocap = cap;
    }
    memcpy(c->out + c->olen, s, n);
    c->olen += n;
    return true;
}

static bool out_fmt(conn *c, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < sizeof buf && out_add(c, buf, (size_t)n);
}

/* One piece of a chunked body. */
static bool out_chunk(conn *c, const char *s, size_t n)
{
    char head[24];
    int h = snprintf(head, sizeof head, "%zx\r\n", n);
    return out_add(c, head, (size_t)h) && out_add(c, s, n) && out_add(c, "\r\n", 2);
}

/* Writes what is pending without blocking; false when the peer is gone. */
static bool flush(conn *c)
{
    while (c->osent < c->olen) {
        ssize_t w = send(c->fd, c->out + c->osent, c->olen - c->osent, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        if (w <= 0)
            return false;
        c->osent += (size_t)w;
    }
    c->olen = c->osent = 0;
    return true;
}

static void conn_free(conn *c)
{
    if (!c)
        return;
    close(c->fd);
    dg_free(c->in);
    dg_free(c->out);
    dg_free(c->text);
    dg_free(c);
}

/* ---- answers ------------------------------------------------------------------------ */

static void answer(conn *c, int status, const char *type, const char *body)
{
    static const struct {
        int code;
        const char *text;
    } reasons[] = {
        {200, "OK"},          {400, "Bad Request"},       {404, "Not Found"},
        {405, "Not Allowed"}, {413, "Payload Too Large"}, {500, "Internal Server Error"}};
    const char *reason = "Error";
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        if (reasons[i].code == status)
            reason = reasons[i].text;
    out_fmt(c, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s\r\n", status,
            reason, type, strlen(body), c->keep_alive ? "" : "Connection: close\r\n");
    out_add(c, body, strlen(body));
    if (!c->keep_alive)
        c->state = C_CLOSE;
}

/* An OpenAI error object. */
static void answer_error(conn *c, int status, const char *message)
{
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    dg_json_add_str(e, "message", message);
    cJSON_AddStringToObject(e, "type", status >= 500 ? "server_error" : "invalid_request_error");
    char *body = cJSON_PrintUnformatted(j);
    answer(c, status, "application/json", body ? body : "{}");
    cJSON_free(body);
    cJSON_Delete(j);
}

static void answer_models(server *s, conn *c)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"object\":\"list\",\"data\":[{\"id\":%s,\"object\":\"model\",\"owned_by\":"
             "\"devgate\"}]}",
             s->model_json);
    answer(c, 200, "application/json", body);
}

/* vLLM's metric names, so --metrics reads the fixture as it reads vLLM. */
static void answer_metrics(server *s, conn *c)
{
    long running = 0;
    for (int i = 0; i < s->nc; i++)
        running += s->c[i]->state == C_STREAM;
    char body[1024];
    snprintf(body, sizeof body,
             "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running %ld\n"
             "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n"
             "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total %ld\n"
             "# TYPE devgate:fixture_requests_total counter\ndevgate:fixture_requests_total %ld\n",
             running, s->tokens, s->answered);
    answer(c, 200, "text/plain; version=0.0.4", body);
}

/* The prompt's bytes (a byte tokenizer: one token a byte) into the stream's key. */
static void take_prompt(conn *c, const char *p, uint64_t *h)
{
    for (; p && *p; p++) {
        *h = (*h ^ (unsigned char)*p) * 1099511628211ull;
        c->prompt_tokens++;
    }
}

/* A completion request: its body read, the stream set up (false: answered with an error). */
static bool start_completion(server *s, conn *c, const char *body, size_t len, bool chat)
{
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        answer_error(c, 400, "the body is not a JSON object");
        return false;
    }
    const cJSON *model = cJSON_GetObjectItem(j, "model");
    if (cJSON_IsString(model) && strcmp(model->valuestring, s->model) != 0) {
        char msg[700];
        snprintf(msg, sizeof msg, "The model '%.200s' does not exist (this server has %s)",
                 model->valuestring, s->model);
        cJSON_Delete(j);
        answer_error(c, 404, msg);
        return false;
    }
    uint64_t h = 1469598103934665603ull ^ s->o->seed;
    c->prompt_tokens = 0;
    const cJSON *e;
    if (chat) {
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "messages"))
            take_prompt(c, cJSON_GetStringValue(cJSON_GetObjectItem(e, "content")), &h);
    } else {
        const cJSON *p = cJSON_GetObjectItem(j, "prompt");
        if (cJSON_IsArray(p))
            cJSON_ArrayForEach(e, p) take_prompt(c, cJSON_GetStringValue(e), &h);
        else
            take_prompt(c, cJSON_GetStringValue(p), &h);
    }
    const cJSON *mt = cJSON_GetObjectItem(j, "max_tokens");
    if (!cJSON_IsNumber(mt))
        mt = cJSON_GetObjectItem(j, "max_completion_tokens");
    double k = cJSON_IsNumber(mt) ? mt->valuedouble : 16;
    c->stream = cJSON_IsTrue(cJSON_GetObjectItem(j, "stream"));
    c->usage = cJSON_IsTrue(
        cJSON_GetObjectItem(cJSON_GetObjectItem(j, "stream_options"), "include_usage"));
    cJSON_Delete(j);
    if (!(k >= 1 && k <= 1e6)) {
        answer_error(c, 400, "max_tokens must lie in 1..1000000");
        return false;
    }
    c->chat = chat;
    c->key = h;
    c->pos = 0;
    c->max_tokens = (long)k;
    c->id = ++s->next_id;
    c->tlen = 0;
    c->state = C_STREAM;
    if (c->stream)
        out_fmt(c,
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: "
                "no-cache\r\nTransfer-Encoding: chunked\r\n%s\r\n",
                c->keep_alive ? "" : "Connection: close\r\n");
    return true;
}

/* One server-sent event of the stream: a token's text ("" with the finish
 * reason at the end), or the usage chunk (choices empty). */
static bool sse_event(server *s, conn *c, const char *text, const char *finish, bool usage_only)
{
    char ev[1400];
    const char *obj = c->chat ? "chat.completion.chunk" : "text_completion";
    int n =
        snprintf(ev, sizeof ev,
                 "data: {\"id\":\"%s-%ld\",\"object\":\"%s\",\"created\":%lld,"
                 "\"model\":%s,\"choices\":",
                 c->chat ? "chatcmpl" : "cmpl", c->id, obj, (long long)time(NULL), s->model_json);
    if (usage_only)
        n += snprintf(ev + n, sizeof ev - (size_t)n,
                      "[],\"usage\":{\"prompt_tokens\":%ld,\"completion_tokens\":%ld,"
                      "\"total_tokens\":%ld}}\n\n",
                      c->prompt_tokens, c->pos, c->prompt_tokens + c->pos);
    else if (c->chat)
        n += snprintf(ev + n, sizeof ev - (size_t)n,
                      "[{\"index\":0,\"delta\":{%s\"content\":\"%s\"},\"finish_reason\":%s%s%s}]}"
                      "\n\n",
                      c->pos == 1 && !finish ? "\"role\":\"assistant\"," : "", text,
                      finish ? "\"" : "", finish ? finish : "null", finish ? "\"" : "");
    else
        n += snprintf(ev + n, sizeof ev - (size_t)n,
                      "[{\"index\":0,\"text\":\"%s\",\"logprobs\":null,\"finish_reason\":%s%s%s}]}"
                      "\n\n",
                      text, finish ? "\"" : "", finish ? finish : "null", finish ? "\"" : "");
    return n > 0 && (size_t)n < sizeof ev && out_chunk(c, ev, (size_t)n);
}

/* The end of an answer: the finish, the usage, [DONE] (or the whole JSON
 * answer when it was not streamed); the connection reads its next request. */
static void finish_answer(server *s, conn *c)
{
    if (c->stream) {
        sse_event(s, c, "", "length", false);
        if (c->usage)
            sse_event(s, c, "", NULL, true);
        static const char done[] = "data: [DONE]\n\n";
        out_chunk(c, done, sizeof done - 1);
        out_add(c, "0\r\n\r\n", 5);
        if (!c->keep_alive)
            c->state = C_CLOSE;
    } else {
        char *body = dg_asprintf(
            "{\"id\":\"%s-%ld\",\"object\":\"%s\",\"created\":%lld,\"model\":%s,\"choices\":[{"
            "\"index\":0,%s\"%.*s\"%s,\"finish_reason\":\"length\"}],\"usage\":{\"prompt_"
            "tokens\":%ld,\"completion_tokens\":%ld,\"total_tokens\":%ld}}",
            c->chat ? "chatcmpl" : "cmpl", c->id, c->chat ? "chat.completion" : "text_completion",
            (long long)time(NULL), s->model_json,
            c->chat ? "\"message\":{\"role\":\"assistant\",\"content\":" : "\"text\":",
            (int)c->tlen, c->text ? c->text : "", c->chat ? "}" : "", c->prompt_tokens, c->pos,
            c->prompt_tokens + c->pos);
        answer(c, body ? 200 : 500, "application/json", body ? body : "{}");
        dg_free(body);
    }
    if (c->state == C_STREAM)
        c->state = C_READ;
    s->answered++;
    if (s->o->on_answered)
        s->o->on_answered(s->o->user, s->answered);
}

/* One token of c's answer: one forward pass. False when the pass failed
 * (the stream then carries the error and ends). */
static bool one_token(server *s, conn *c)
{
    int tok = 0;
    dg_status st = dg_infer_next(s->ctx, s->inf, c->key, c->pos, &tok);
    if (st != DG_OK) {
        char ev[900], msg[600];
        dg_copy_clean(msg, sizeof msg, dg_errmsg(s->ctx));
        for (char *p = msg; *p; p++)
            if (*p == '"' || *p == '\\')
                *p = '\'';
        int n = snprintf(ev, sizeof ev, "data: {\"error\":{\"message\":\"%s\"}}\n\n", msg);
        if (c->stream && n > 0 && (size_t)n < sizeof ev)
            out_chunk(c, ev, (size_t)n);
        c->state = C_CLOSE;
        return false;
    }
    c->key = (c->key ^ (uint64_t)(tok + 1)) * 1099511628211ull;
    c->pos++;
    s->tokens++;
    char text[2] = {(char)('a' + tok % 26), 0};
    if (c->stream) {
        sse_event(s, c, text, NULL, false);
    } else {
        char *t = dg_realloc(c->text, c->tlen + 2);
        if (t) {
            c->text = t;
            c->text[c->tlen++] = text[0];
        }
    }
    if (c->pos >= c->max_tokens)
        finish_answer(s, c);
    return true;
}

/* ---- requests ----------------------------------------------------------------------- */

/* A whole request at the front of c->in (read by dg_slo_http_parse):
 * answered or its stream started; the bytes consumed. 0 when it is not all
 * here yet. */
static size_t take_request(server *s, conn *c)
{
    slo_http_req r;
    switch (dg_slo_http_parse(c->in, c->ilen, IN_MAX, &r)) {
    case SLO_HTTP_MORE:
        if (r.expect_continue)
            out_fmt(c, "HTTP/1.1 100 Continue\r\n\r\n");
        return 0;
    case SLO_HTTP_REFUSED:
        c->keep_alive = false;
        answer_error(c, r.status, r.why);
        return r.used;
    case SLO_HTTP_REQUEST: break;
    }
    c->keep_alive = r.keep_alive;
    bool post = strcmp(r.method, "POST") == 0, get = strcmp(r.method, "GET") == 0;
    bool chat = strcmp(r.path, "/v1/chat/completions") == 0;
    if (chat || strcmp(r.path, "/v1/completions") == 0) {
        if (!post)
            answer_error(c, 405, "use POST");
        else
            start_completion(s, c, c->in + r.body, r.body_len, chat);
    } else if (strcmp(r.path, "/v1/models") == 0 && get) {
        answer_models(s, c);
    } else if (strcmp(r.path, "/health") == 0 && get) {
        answer(c, 200, "application/json", "{\"status\":\"ok\"}");
    } else if (strcmp(r.path, "/metrics") == 0 && get) {
        answer_metrics(s, c);
    } else {
        answer_error(c, 404,
                     "no such route (POST /v1/completions, POST /v1/chat/completions, "
                     "GET /v1/models, /health, /metrics)");
    }
    return r.used;
}

/* Reads what c's peer sent; false when it is gone. */
static bool conn_read(server *s, conn *c)
{
    for (;;) {
        if (c->icap - c->ilen < 4096) {
            size_t cap = c->icap ? 2 * c->icap : 8192;
            if (cap > IN_MAX + 8192)
                break;
            char *p = dg_realloc(c->in, cap + 1);
            if (!p)
                return false;
            c->in = p;
            c->icap = cap;
        }
        ssize_t r = recv(c->fd, c->in + c->ilen, c->icap - c->ilen, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (r <= 0)
            return false;
        c->ilen += (size_t)r;
    }
    c->in[c->ilen] = 0;
    while (c->state == C_READ && c->ilen) {
        size_t used = take_request(s, c);
        if (!used)
            break;
        if (used > c->ilen)
            used = c->ilen;
        memmove(c->in, c->in + used, c->ilen - used);
        c->ilen -= used;
        c->in[c->ilen] = 0;
    }
    return true;
}

static void accept_all(server *s, int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        conn *c = s->nc < MAX_CONNS ? dg_calloc(1, sizeof *c) : NULL;
        if (!c) {
            close(fd);
            continue;
        }
        /* Each token goes out when it is made (no Nagle wait for the last one's ACK). */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fd = fd;
        c->keep_alive = true;
        s->c[s->nc++] = c;
    }
}

/* ---- the loop ------------------------------------------------------------------------- */

static void ready_line(int fd, const char *text)
{
    if (fd < 0)
        return;
    size_t n = strlen(text), off = 0;
    while (off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    close(fd);
}

/* One round: a token for every stream whose reader keeps up. True when any
 * stream is still generating (poll then does not wait). */
static bool round_robin(server *s, dg_status *st)
{
    bool more = false;
    for (int k = 0; k < s->nc && *st == DG_OK; k++) {
        conn *c = s->c[(s->rr + k) % s->nc];
        if (c->state != C_STREAM || c->olen > OUT_HIGH)
            continue;
        if (!one_token(s, c))
            *st = DG_ERR_BACKEND;
        flush(c);
        more = more || c->state == C_STREAM;
    }
    s->rr = s->nc ? (s->rr + 1) % s->nc : 0;
    return more;
}

static dg_status serve_loop(server *s)
{
    const dg_slo_fixture_opts *o = s->o;
    struct pollfd *pf = dg_malloc((MAX_CONNS + 1) * sizeof *pf);
    if (!pf)
        return dg_fail(s->ctx, DG_ERR_NOMEM, "fixture: out of memory");
    dg_status st = DG_OK;
    bool busy = false;
    while (st == DG_OK && !(o->cancel && *o->cancel)) {
        pf[0] = (struct pollfd){.fd = o->listen_fd, .events = POLLIN};
        for (int i = 0; i < s->nc; i++)
            pf[i + 1] = (struct pollfd){.fd = s->c[i]->fd,
                                        .events = (short)(POLLIN | (s->c[i]->olen ? POLLOUT : 0))};
        int r = poll(pf, (nfds_t)s->nc + 1, busy ? 0 : 100);
        if (r < 0 && errno != EINTR) {
            st = dg_fail(s->ctx, DG_ERR_IO, "fixture: poll: %s", strerror(errno));
            break;
        }
        for (int i = s->nc - 1; r > 0 && i >= 0; i--) {
            conn *c = s->c[i];
            short re = pf[i + 1].revents;
            bool alive = !(re & (POLLERR | POLLNVAL));
            if (alive && (re & (POLLIN | POLLHUP)))
                alive = conn_read(s, c);
            if (alive)
                alive = flush(c) && !(c->state == C_CLOSE && c->olen == 0);
            if (!alive) {
                conn_free(c);
                s->c[i] = s->c[--s->nc];
            }
        }
        if (r > 0 && (pf[0].revents & POLLIN))
            accept_all(s, o->listen_fd);
        busy = round_robin(s, &st);
    }
    dg_free(pf);
    for (int i = 0; i < s->nc; i++)
        conn_free(s->c[i]);
    s->nc = 0;
    if (st == DG_OK && o->cancel && *o->cancel)
        return DG_ERR_INTERRUPTED;
    return st;
}

dg_status dg_slo_fixture_serve(dg_ctx *ctx, const dg_slo_fixture_opts *o)
{
    server *s = dg_calloc(1, sizeof *s);
    if (!s)
        return dg_fail(ctx, DG_ERR_NOMEM, "fixture: out of memory");
    s->ctx = ctx;
    s->o = o;
    s->model = o->model ? o->model : "mlp";
    dg_infer_opts io = {.backend = o->backend,
                        .model = s->model,
                        .batch = o->batch,
                        .device = o->device,
                        .threads = o->threads,
                        .seed = o->seed};
    dg_status st = dg_infer_open(ctx, &io, &s->inf);
    cJSON *ready = st == DG_OK ? dg_infer_json(s->inf) : cJSON_CreateObject();
    cJSON_AddBoolToObject(ready, "ready", st == DG_OK);
    dg_json_add_str(ready, "error", st == DG_OK ? NULL : dg_errmsg(ctx));
    cJSON *name = cJSON_CreateString(s->model);
    char *nj = cJSON_PrintUnformatted(name);
    snprintf(s->model_json, sizeof s->model_json, "%s", nj ? nj : "\"mlp\"");
    cJSON_free(nj);
    cJSON_Delete(name);
    char *line = cJSON_PrintUnformatted(ready);
    cJSON_Delete(ready);
    if (line) {
        char *nl = dg_asprintf("%s\n", line);
        ready_line(o->ready_fd, nl ? nl : "{}\n");
        dg_free(nl);
    } else {
        ready_line(o->ready_fd, "{\"ready\":false}\n");
    }
    cJSON_free(line);
    if (st == DG_OK) {
        int fl = fcntl(o->listen_fd, F_GETFL);
        if (fl < 0 || fcntl(o->listen_fd, F_SETFL, fl | O_NONBLOCK) < 0)
            st = dg_fail(ctx, DG_ERR_USAGE, "fixture: fd %d is not a listening socket",
                         o->listen_fd);
    }
    if (st == DG_OK)
        st = serve_loop(s);
    dg_infer_close(s->inf);
    dg_free(s);
    return st;
}
