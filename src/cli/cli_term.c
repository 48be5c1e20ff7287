/* Everything the CLI prints passes through one cleaner (dg_text_clean), so no
 * string taken from a record, a process table, a file name or a hostname can
 * drive the terminal: stdout and stderr are replaced by streams that clean
 * what is written and pass it to the original descriptors. The progress line
 * writes its own escapes to the raw descriptor (cli_term_raw). */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct term_out {
    int fd;
    bool raw;              /* pass bytes through unchanged (machine output to a pipe or file) */
    unsigned char pend[4]; /* the start of a UTF-8 sequence split across writes */
    size_t npend;
} term_out;

static term_out g_out = {.fd = STDOUT_FILENO}, g_err = {.fd = STDERR_FILENO};

static bool write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w, n -= (size_t)w;
    }
    return true;
}

/* Length of the UTF-8 sequence a lead byte starts (1 for anything else). */
static size_t seq_len(unsigned char c)
{
    return (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
}

static ssize_t term_write(void *cookie, const char *buf, size_t size)
{
    term_out *t = cookie;
    if (t->raw)
        return write_all(t->fd, buf, size) ? (ssize_t)size : -1;
    unsigned char in[1024 + sizeof t->pend];
    char out[sizeof in + 1];
    size_t done = 0;
    while (done < size) {
        size_t n = t->npend;
        memcpy(in, t->pend, n);
        size_t take = size - done < 1024 ? size - done : 1024;
        memcpy(in + n, buf + done, take);
        n += take, done += take;
        t->npend = 0;
        /* An incomplete sequence at the end waits for the bytes after it. */
        for (size_t back = 1; back <= 3 && back <= n; back++) {
            unsigned char c = in[n - back];
            if ((c & 0xc0) == 0x80)
                continue;
            if (seq_len(c) > back) {
                memcpy(t->pend, in + n - back, back);
                t->npend = back;
                n -= back;
            }
            break;
        }
        /* Cleaning only shrinks or keeps the length (a byte becomes '?'). */
        size_t m = dg_text_clean(out, sizeof out, (const char *)in, n, true);
        if (!write_all(t->fd, out, m))
            return -1;
    }
    return (ssize_t)size;
}

static int term_close(void *cookie)
{
    term_out *t = cookie;
    if (t->npend && !t->raw)
        write_all(t->fd, "?", 1); /* a sequence the program never finished */
    t->npend = 0;
    return 0;
}

static FILE *wrap(term_out *t, int mode)
{
    cookie_io_functions_t io = {.write = term_write, .close = term_close};
    FILE *f = fopencookie(t, "w", io);
    if (f)
        setvbuf(f, NULL, mode, 0);
    return f;
}

void cli_term_init(void)
{
    FILE *o = wrap(&g_out, isatty(STDOUT_FILENO) ? _IOLBF : _IOFBF);
    FILE *e = wrap(&g_err, _IOLBF);
    if (o) {
        fflush(stdout);
        stdout = o;
    }
    if (e) {
        fflush(stderr);
        stderr = e;
    }
}

void cli_term_machine_output(void)
{
    /* JSON, HTML and Markdown written to a pipe or a file are data, kept as
     * they are (their strings are escaped for their format); on a terminal
     * they are cleaned like everything else. */
    fflush(stdout);
    g_out.raw = !isatty(g_out.fd);
}

void cli_term_raw(const char *s)
{
    fflush(stderr);
    write_all(g_err.fd, s, strlen(s));
}

void cli_term_raw_fd(int fd, const char *buf, size_t n)
{
    fflush(fd == STDOUT_FILENO ? stdout : stderr);
    write_all(fd == STDOUT_FILENO ? g_out.fd : g_err.fd, buf, n);
}

const char *cli_cell(char *buf, size_t n, const char *s)
{
    dg_text_clean(buf, n, s, s ? strlen(s) : 0, false);
    return buf;
}
