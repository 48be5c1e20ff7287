/* The supervised program's output passing through devgate (dg_run_opts.output):
 * its standard error always, its standard output where that goes to a
 * terminal (or to stderr). Each stream reaches the program through a
 * pseudo-terminal where the descriptor it would have inherited is a terminal
 * (one for both when they are the same terminal, so their order is kept and
 * the program still sees a terminal: line buffering, colours, tqdm), a pipe
 * otherwise. What comes back is handed to the caller's callback (which keeps
 * a progress line below it) or written to that descriptor, and the error
 * channel's last bytes are kept for the record's error lines. */
#include "supervise/supervise.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

/* Whether fds a and b are the same open terminal. */
static bool same_tty(int a, int b)
{
    struct stat sa, sb;
    return isatty(a) && isatty(b) && fstat(a, &sa) == 0 && fstat(b, &sb) == 0 &&
           sa.st_rdev == sb.st_rdev;
}

/* A pseudo-terminal like the terminal on fd like (its modes and size): the
 * master (non-blocking, close-on-exec) in *m, the slave in *s. 0 or an errno. */
static int open_pty(int like, int *m, int *s)
{
    *m = *s = -1;
    int fd = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    char name[128];
    if (grantpt(fd) != 0 || unlockpt(fd) != 0 || ptsname_r(fd, name, sizeof name) != 0) {
        int e = errno;
        close(fd);
        return e ? e : EIO;
    }
    int sl = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (sl < 0) {
        int e = errno;
        close(fd);
        return e;
    }
    struct termios tio;
    if (tcgetattr(like, &tio) == 0)
        tcsetattr(sl, TCSANOW, &tio);
    struct winsize ws;
    if (ioctl(like, TIOCGWINSZ, &ws) == 0)
        ioctl(sl, TIOCSWINSZ, &ws);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    *m = fd;
    *s = sl;
    return 0;
}

/* A channel to the program relayed to dest: a pty when dest is a terminal. */
static int open_channel(dg_relay_chan *c, int dest)
{
    c->dest = dest;
    c->pty = isatty(dest);
    if (c->pty)
        return open_pty(dest, &c->fd, &c->child);
    int p[2];
    int e = dg_pipe(p, 3);
    if (e)
        return e;
    fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
    c->fd = p[0];
    c->child = p[1];
    return 0;
}

int dg_relay_open(dg_relay *r, bool stdout_to_stderr, dg_output_fn fn, void *user)
{
    memset(r, 0, sizeof *r);
    r->fn = fn;
    r->user = user;
    for (int i = 0; i < 2; i++)
        r->ch[i] = (dg_relay_chan){.fd = -1, .child = -1, .dest = i + 1};
    r->out_child = r->err_child = -1;
    /* stderr: always, for its tail. */
    int e = open_channel(&r->ch[1], 2);
    if (e)
        return e;
    r->err_child = r->ch[1].child;
    if (stdout_to_stderr || same_tty(1, 2)) {
        r->out_child = r->ch[1].child; /* one channel: the order of the two is kept */
        r->merged = true;
    } else if (isatty(1)) {
        if ((e = open_channel(&r->ch[0], 1)) != 0) {
            dg_relay_close(r);
            return e;
        }
        r->out_child = r->ch[0].child;
    }
    return 0;
}

void dg_relay_started(dg_relay *r)
{
    for (int i = 0; i < 2; i++) {
        if (r->ch[i].child >= 0)
            close(r->ch[i].child);
        r->ch[i].child = -1;
    }
    r->out_child = r->err_child = -1;
}

/* Keeps the last bytes of the error channel. */
static void tail_add(dg_relay *r, const char *p, size_t n)
{
    if (n >= sizeof r->tail) {
        p += n - sizeof r->tail;
        n = sizeof r->tail;
    }
    size_t keep = r->tail_len + n > sizeof r->tail ? sizeof r->tail - n : r->tail_len;
    memmove(r->tail, r->tail + r->tail_len - keep, keep);
    memcpy(r->tail + keep, p, n);
    r->tail_len = keep + n;
}

static void deliver(dg_relay *r, int i, const char *p, size_t n)
{
    if (i == 1)
        tail_add(r, p, n);
    r->bytes[i] += n;
    if (r->fn) {
        r->fn(r->user, r->ch[i].dest, p, n);
        return;
    }
    while (n) { /* no callback: to the descriptor the program would have had */
        ssize_t w = write(r->ch[i].dest, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w, n -= (size_t)w;
    }
}

bool dg_relay_pump(dg_relay *r, size_t budget)
{
    char buf[16384];
    bool open = false;
    for (int i = 0; i < 2; i++) {
        dg_relay_chan *c = &r->ch[i];
        size_t got_total = 0;
        while (c->fd >= 0 && got_total < budget) {
            ssize_t got = read(c->fd, buf, sizeof buf);
            if (got > 0) {
                deliver(r, i, buf, (size_t)got);
                got_total += (size_t)got;
                continue;
            }
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                break;
            /* 0, or EIO: a pty whose last slave descriptor closed. */
            close(c->fd);
            c->fd = -1;
        }
        open = open || c->fd >= 0;
    }
    return !open;
}

int dg_relay_pollfds(const dg_relay *r, struct pollfd *p)
{
    int n = 0;
    for (int i = 0; i < 2; i++)
        if (r->ch[i].fd >= 0)
            p[n++] = (struct pollfd){.fd = r->ch[i].fd, .events = POLLIN};
    return n;
}

void dg_relay_close(dg_relay *r)
{
    dg_relay_started(r);
    for (int i = 0; i < 2; i++) {
        if (r->ch[i].fd >= 0)
            close(r->ch[i].fd);
        r->ch[i].fd = -1;
    }
}

/* ---- the error lines ------------------------------------------------------------ */

/* The text of line [p, e) as a terminal would leave it: after its last CR
 * (a progress bar redrawn in place), without escape sequences. */
static size_t visible(const char *p, const char *e, char *out, size_t cap)
{
    for (const char *q = e; q > p; q--)
        if (q[-1] == '\r' && q != e) {
            p = q;
            break;
        }
    size_t n = 0;
    while (p < e && n + 1 < cap) {
        unsigned char c = (unsigned char)*p;
        if (c == 0x1b && p + 1 < e && p[1] == '[') { /* CSI: up to its final byte */
            p += 2;
            while (p < e && !((unsigned char)*p >= 0x40 && (unsigned char)*p <= 0x7e))
                p++;
            p += p < e;
        } else if (c == 0x1b && p + 1 < e && p[1] == ']') { /* OSC: up to BEL or ST */
            p += 2;
            while (p < e && *p != '\a' && !(*p == 0x1b && p + 1 < e && p[1] == '\\'))
                p++;
            p += p < e ? (*p == '\a' ? 1 : 2) : 0;
        } else if (c == '\r') {
            p++;
        } else {
            out[n++] = (char)c;
            p++;
        }
    }
    out[n] = '\0';
    return n;
}

static bool blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t')
            return false;
    return true;
}

void dg_error_lines_find(const char *text, size_t len, dg_error_lines *out)
{
    memset(out, 0, sizeof *out);
    /* The lines, cleaned, as offsets into one buffer. */
    enum { MAXL = 256 };
    char *buf = dg_malloc(len + 1);
    size_t *start = dg_malloc(MAXL * sizeof *start);
    if (!buf || !start) {
        dg_free(buf);
        dg_free(start);
        return;
    }
    size_t used = 0, nl = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e)
            e = end;
        char raw[1024];
        size_t n = visible(p, e - p > 4096 ? p + 4096 : e, raw, sizeof raw);
        size_t m = dg_text_clean(buf + used, len + 1 - used, raw, n, false);
        if (!blank(buf + used)) {
            if (nl == MAXL) { /* keep the last MAXL lines */
                memmove(start, start + 1, (MAXL - 1) * sizeof *start);
                nl--;
            }
            start[nl++] = used;
            used += m + 1;
        }
        p = e + 1;
    }
    /* The last traceback's exception: the first line after its frames. */
    size_t from = nl > 3 ? nl - 3 : 0, to = nl;
    for (size_t i = nl; i-- > 0;) {
        if (strncmp(buf + start[i], "Traceback (most recent call last):", 34) != 0)
            continue;
        size_t k = i + 1;
        while (k < nl && (buf[start[k]] == ' ' || buf[start[k]] == '\t'))
            k++;
        if (k < nl) {
            from = k;
            to = k + DG_ERROR_LINES_MAX < nl ? k + DG_ERROR_LINES_MAX : nl;
            out->traceback = true;
        }
        break;
    }
    for (size_t i = from; i < to && out->n < DG_ERROR_LINES_MAX; i++)
        dg_text_clean(out->line[out->n++], DG_ERROR_LINE_LEN, buf + start[i],
                      strlen(buf + start[i]), false);
    dg_free(buf);
    dg_free(start);
}
