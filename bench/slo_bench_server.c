/* A loopback server for bench/slo_overhead.sh whose answer time is known:
 * every POST gets, DELAY_MS after its request arrived, one OpenAI streamed
 * completion of one token (server-sent events with usage, then [DONE]), in
 * one write. One thread, epoll, keep-alive; thousands of requests a second
 * on one core, so what a client measures above DELAY_MS is the client's own
 * overhead plus the loopback's, not this server's queue. Not a test: no
 * input is trusted beyond what a bench needs.
 *   cc -O2 -o slo_bench_server slo_bench_server.c && ./slo_bench_server PORTFILE DELAY_MS */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAXC 8192

typedef struct conn {
    int fd;
    char buf[16384];
    size_t len;
    double due; /* 0: no answer pending */
} conn;

static conn *conns[MAXC];
static const char body[] = "data: {\"choices\":[{\"index\":0,\"text\":\"x\"}]}\n\n"
                           "data: {\"choices\":[],\"usage\":{\"completion_tokens\":1}}\n\n"
                           "data: [DONE]\n\n";

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A whole request in c->buf (headers and Content-Length body): its length, or 0. */
static size_t request_len(const conn *c)
{
    const char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
    if (!end)
        return 0;
    size_t head = (size_t)(end - c->buf) + 4, cl = 0;
    const char *h = memmem(c->buf, head, "Content-Length:", 15);
    if (!h)
        h = memmem(c->buf, head, "content-length:", 15);
    if (h)
        cl = strtoul(h + 15, NULL, 10);
    return c->len >= head + cl ? head + cl : 0;
}

static void drop(int ep, conn *c)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    conns[c->fd] = NULL;
    free(c);
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return fprintf(stderr, "usage: %s PORTFILE DELAY_MS\n", argv[0]), 2;
    double delay = atof(argv[2]) / 1e3;
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 4096) ||
        getsockname(ls, (struct sockaddr *)&a, &al))
        return perror("listen"), 1;
    FILE *pf = fopen(argv[1], "w");
    fprintf(pf, "%d\n", ntohs(a.sin_port));
    fclose(pf);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      sizeof body - 1);
    char out[512];
    memcpy(out, head, (size_t)hl);
    memcpy(out + hl, body, sizeof body - 1);
    size_t outlen = (size_t)hl + sizeof body - 1;
    struct epoll_event evs[256];
    for (;;) {
        /* Wait until the earliest answer is due. */
        double t = now(), next = 1e300;
        for (int i = 0; i < MAXC; i++)
            if (conns[i] && conns[i]->due > 0) {
                if (conns[i]->due <= t) {
                    if (write(conns[i]->fd, out, outlen) != (ssize_t)outlen) {
                        drop(ep, conns[i]);
                        continue;
                    }
                    conns[i]->due = 0;
                } else if (conns[i]->due < next) {
                    next = conns[i]->due;
                }
            }
        int wait = next == 1e300 ? 1000 : (int)((next - now()) * 1e3);
        int n = epoll_wait(ep, evs, 256, wait < 0 ? 0 : wait);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == ls) {
                int c;
                while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (c >= MAXC) {
                        close(c);
                        continue;
                    }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conns[c] = calloc(1, sizeof(conn));
                    conns[c]->fd = c;
                    struct epoll_event ce = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce);
                }
                continue;
            }
            conn *c = conns[fd];
            if (!c)
                continue;
            ssize_t r = read(fd, c->buf + c->len, sizeof c->buf - c->len);
            if (r <= 0 && !(r < 0 && errno == EAGAIN)) {
                drop(ep, c);
                continue;
            }
            if (r > 0)
                c->len += (size_t)r;
            size_t rl = request_len(c);
            if (rl) {
                memmove(c->buf, c->buf + rl, c->len - rl);
                c->len -= rl;
                c->due = now() + delay;
            }
        }
    }
}
