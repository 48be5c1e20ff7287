/* devgate_probe.h: send devgate probe events (docs/events.md, version 1) from C.
 *
 * Single header, C99 or later, libc and POSIX only. Use it like stb headers:
 * every file may include it for the declarations, and exactly one translation
 * unit defines DEVGATE_PROBE_IMPLEMENTATION before including it:
 *
 *     #define DEVGATE_PROBE_IMPLEMENTATION
 *     #include "devgate_probe.h"
 *
 * That unit needs the POSIX declarations (compile with _POSIX_C_SOURCE=200809L,
 * _DEFAULT_SOURCE or _GNU_SOURCE, or include this header first: it then defines
 * _POSIX_C_SOURCE itself).
 *
 * Destination, read by dgp_open(): the descriptor number in DEVGATE_EVENTS_FD
 * (it must be open for writing; otherwise one warning on stderr and silence),
 * else the file named in DEVGATE_EVENTS_FILE (opened O_APPEND), else nothing:
 * every dgp_* call is then a cheap no-op. Before dgp_open() the probe is silent.
 *
 * Every event is one JSON object on one line, built in a fixed buffer of
 * DGP_LINE_MAX bytes (4096 = PIPE_BUF on Linux, so a line is never interleaved
 * with another writer's on a pipe) and sent with one write(2). Strings are
 * escaped (quote, backslash, control characters as \u00XX; invalid UTF-8 bytes
 * become U+FFFD) and cut at a character boundary when too long; doubles are
 * printed with %.17g (decimal point forced to '.' whatever the locale);
 * non-finite doubles and negative byte counts become null.
 *
 * Failures never reach the caller: a write failing with EPIPE, EBADF or any
 * error other than EINTR/EAGAIN makes the probe silent from then on (EAGAIN on
 * a non-blocking descriptor drops that one line).
 *
 * SIGPIPE: writing into a pipe whose reader has gone raises SIGPIPE, whose
 * default action ends the process. The header changes no global signal state:
 * around each write it blocks SIGPIPE in the calling thread only
 * (pthread_sigmask), and if that write raised a SIGPIPE that was not already
 * pending, it consumes it (sigwait on a signal known to be pending returns at
 * once) before restoring the thread's mask; the write then fails with EPIPE and
 * the probe turns silent. A program that ignores SIGPIPE itself may define
 * DGP_NO_SIGPIPE_GUARD to skip those three system calls per event. The guard
 * needs pthread_sigmask: in libc on glibc >= 2.34 and macOS, else link with
 * -pthread.
 *
 * Thread safety: events may be sent from several threads (one write(2) each);
 * dgp_open and dgp_close should not race with sends.
 *
 * The inherited descriptor of DEVGATE_EVENTS_FD is never closed by the probe;
 * a file it opened for DEVGATE_EVENTS_FILE is closed by dgp_close().
 */
#ifndef DEVGATE_PROBE_H
#define DEVGATE_PROBE_H

#ifdef __cplusplus
extern "C" {
#endif

#define DGP_PROTOCOL_VERSION 1
#ifndef DGP_LINE_MAX
#define DGP_LINE_MAX 4096
#endif

/* Reads the environment and opens the destination (closing any previous one).
 * Returns 1 when events will be sent, 0 when the probe is silent. */
int dgp_open(void);
/* 1 while events are being sent. */
int dgp_enabled(void);
/* Stops sending; closes a file the probe opened. */
void dgp_close(void);

/* run_start {framework: null, device, batch (<= 0: null), bucket: null,
 * seeds: null, pid}. */
void dgp_run_start(const char *device, long long batch);
/* run_start with framework {name, version} (NULL name: framework null) and a
 * label (NULL: absent). */
void dgp_run_start_ex(const char *device, long long batch, const char *framework,
                      const char *framework_version, const char *label);
/* gate {device, built, available, reason: null, matmul}: matmul is null when
 * available is 0, else {ok, n: null, max_abs_err, ms}. */
void dgp_gate(const char *device, int built, int available, int ok, double max_abs_err, double ms);
/* gate with the reason (NULL: null) and the product's size n (<= 0: null). */
void dgp_gate_ex(const char *device, int built, int available, const char *reason, long long n,
                 int ok, double max_abs_err, double ms);
/* step {epoch, step, step_ms, data_ms, loss, synced}: NAN for data_ms or loss
 * sends null. data_ms is the wait for the step's batch BEFORE the step, not
 * part of step_ms (docs/events.md, "One definition of the data wait"). */
void dgp_step(long long epoch, long long step, double step_ms, double data_ms, double loss,
              int synced);
/* epoch_end {epoch, allocated, reserved, max_allocated, driver, footprint,
 * cache_emptied, validation}: a byte count of -1 (any negative) sends null. */
void dgp_epoch_end(long long epoch, long long allocated, long long reserved,
                   long long max_allocated, long long driver, long long footprint,
                   int cache_emptied, int validation);
/* phase {name, epoch (< 0: null)}. */
void dgp_phase(const char *name, long long epoch);
/* fallback {op, device, message}. */
void dgp_fallback(const char *op, const char *device, const char *message);
/* sweep_trial {batch, ended ("ok", "device-oom", "failed"), samples_per_s,
 * step_ms, peak_bytes (< 0: null), reason (NULL: null)}. */
void dgp_sweep_trial(long long batch, const char *ended, double samples_per_s, double step_ms,
                     long long peak_bytes, const char *reason);
/* oom {device, batch (<= 0: null), message}. */
void dgp_oom(const char *device, long long batch, const char *message);
/* run_end {status ("ok" or "error"), message (NULL: null)}. */
void dgp_run_end(const char *status, const char *message);

/* The process's resident bytes now (Linux /proc/self/statm), or -1. */
long long dgp_footprint(void);

#ifdef __cplusplus
}
#endif
#endif /* DEVGATE_PROBE_H */

/* ========================================================================== */
#ifdef DEVGATE_PROBE_IMPLEMENTATION
#ifndef DGP_IMPLEMENTED
#define DGP_IMPLEMENTED

#if !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE) && !defined(_DEFAULT_SOURCE) &&             \
    !defined(_XOPEN_SOURCE) && !defined(__APPLE__)
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifndef DGP_NO_SIGPIPE_GUARD
#include <pthread.h>
#endif

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__STDC_NO_ATOMICS__) &&   \
    !defined(__cplusplus)
#include <stdatomic.h>
#define DGP_I_ATOMIC _Atomic
#else
#define DGP_I_ATOMIC volatile
#endif

enum { DGP_I_NAME_MAX = 256, DGP_I_TEXT_MAX = 2048, DGP_I_RESERVE = 8 };

static DGP_I_ATOMIC int dgp_i_fd = -1; /* where events go; -1: silent */
static int dgp_i_owned;                /* 1: we opened it (DEVGATE_EVENTS_FILE) */
static DGP_I_ATOMIC int dgp_i_warned;

/* One line being built. Every field is appended whole or not at all, and
 * DGP_I_RESERVE bytes stay free for the closing braces and the newline, so the
 * line is valid JSON even when something did not fit. */
typedef struct {
    char buf[DGP_LINE_MAX];
    size_t len;
    int first; /* no comma before the next key */
} dgp_i_line;

static void dgp_i_warn(const char *what)
{
    if (dgp_i_warned)
        return;
    dgp_i_warned = 1;
    fprintf(stderr, "devgate_probe: %s; events are not sent\n", what);
}

static size_t dgp_i_room(const dgp_i_line *l)
{
    return l->len + DGP_I_RESERVE < sizeof l->buf ? sizeof l->buf - DGP_I_RESERVE - l->len : 0;
}

static int dgp_i_raw(dgp_i_line *l, const char *s, size_t n)
{
    if (n > dgp_i_room(l))
        return 0;
    memcpy(l->buf + l->len, s, n);
    l->len += n;
    return 1;
}

/* Appends ,"key":VALUE (no comma first in an object) when it fits whole. */
static void dgp_i_field(dgp_i_line *l, const char *key, const char *value)
{
    char tmp[160];
    int n = snprintf(tmp, sizeof tmp, "%s\"%s\":%s", l->first ? "" : ",", key, value);
    if (n > 0 && (size_t)n < sizeof tmp && dgp_i_raw(l, tmp, (size_t)n))
        l->first = 0;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid. */
static size_t dgp_i_utf8(const unsigned char *s, size_t n)
{
    unsigned c = s[0], cp;
    size_t len;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0Fu;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07u;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3Fu);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return len;
}

/* Appends ,"key":"escaped" (or null for NULL), the escaped text cut at a
 * character boundary to at most max bytes and to the room left. */
static void dgp_i_str(dgp_i_line *l, const char *key, const char *s, size_t max)
{
    char head[80], tmp[8];
    if (!s) {
        dgp_i_field(l, key, "null");
        return;
    }
    int h = snprintf(head, sizeof head, "%s\"%s\":\"", l->first ? "" : ",", key);
    if (h <= 0 || (size_t)h >= sizeof head || (size_t)h + 1 > dgp_i_room(l))
        return;
    size_t room = dgp_i_room(l) - (size_t)h - 1; /* - the closing quote */
    if (max > room)
        max = room;
    char *out = l->buf + l->len;
    memcpy(out, head, (size_t)h);
    size_t o = (size_t)h, used_total = 0;
    const unsigned char *p = (const unsigned char *)s;
    size_t left = strlen(s);
    while (left) {
        const char *piece;
        size_t plen, used = 1;
        unsigned c = *p;
        if (c == '"' || c == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)c;
            piece = tmp;
            plen = 2;
        } else if (c == '\n' || c == '\t' || c == '\r') {
            piece = c == '\n' ? "\\n" : c == '\t' ? "\\t" : "\\r";
            plen = 2;
        } else if (c < 0x20 || c == 0x7F) {
            snprintf(tmp, sizeof tmp, "\\u%04x", c);
            piece = tmp;
            plen = 6;
        } else if (c < 0x80) {
            piece = (const char *)p;
            plen = 1;
        } else if ((used = dgp_i_utf8(p, left)) != 0) {
            piece = (const char *)p;
            plen = used;
        } else {
            piece = "\\ufffd"; /* a byte that is not UTF-8 */
            plen = 6;
            used = 1;
        }
        if (used_total + plen > max)
            break; /* cut here: never inside an escape or a character */
        memcpy(out + o, piece, plen);
        o += plen;
        used_total += plen;
        p += used;
        left -= used;
    }
    out[o++] = '"';
    l->len += o;
    l->first = 0;
}

static void dgp_i_num(dgp_i_line *l, const char *key, double v)
{
    char tmp[64];
    if (!isfinite(v)) {
        dgp_i_field(l, key, "null");
        return;
    }
    snprintf(tmp, sizeof tmp, "%.17g", v);
    for (char *c = tmp; *c; c++)
        if (*c == ',')
            *c = '.'; /* a locale with a decimal comma */
    dgp_i_field(l, key, tmp);
}

static void dgp_i_int(dgp_i_line *l, const char *key, long long v)
{
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%lld", v);
    dgp_i_field(l, key, tmp);
}

/* A count or size: negative means unknown. */
static void dgp_i_count(dgp_i_line *l, const char *key, long long v)
{
    if (v < 0)
        dgp_i_field(l, key, "null");
    else
        dgp_i_int(l, key, v);
}

static void dgp_i_bool(dgp_i_line *l, const char *key, int v)
{
    dgp_i_field(l, key, v ? "true" : "false");
}

/* Opens a nested object under key; returns 0 when it did not fit. */
static int dgp_i_open_obj(dgp_i_line *l, const char *key)
{
    size_t before = l->len;
    dgp_i_field(l, key, "{");
    if (l->len == before)
        return 0;
    l->first = 1;
    return 1;
}

static void dgp_i_close_obj(dgp_i_line *l)
{
    l->buf[l->len++] = '}'; /* within the reserve */
    l->first = 0;
}

/* Starts {"v":1,"ev":EV,"t":now; returns 0 when the probe is silent. */
static int dgp_i_begin(dgp_i_line *l, const char *ev)
{
    struct timespec ts;
    if (dgp_i_fd < 0)
        return 0;
    l->len = 0;
    l->buf[l->len++] = '{';
    l->first = 1;
    dgp_i_int(l, "v", DGP_PROTOCOL_VERSION);
    dgp_i_str(l, "ev", ev, DGP_I_NAME_MAX);
    clock_gettime(CLOCK_REALTIME, &ts);
    dgp_i_num(l, "t", (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
    return 1;
}

static ssize_t dgp_i_write_once(int fd, const char *p, size_t n)
{
#ifdef DGP_NO_SIGPIPE_GUARD
    return write(fd, p, n);
#else
    sigset_t pipe_set, old, pending;
    int was_pending, err;
    ssize_t w;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    if (pthread_sigmask(SIG_BLOCK, &pipe_set, &old) != 0)
        return write(fd, p, n);
    sigemptyset(&pending);
    was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    w = write(fd, p, n);
    err = errno;
    if (w < 0 && err == EPIPE && !was_pending) {
        sigemptyset(&pending);
        if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
            int sig;
            sigwait(&pipe_set, &sig); /* pending, so it returns at once */
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = err;
    return w;
#endif
}

/* Closes the object, adds the newline, sends the line with one write(2). */
static void dgp_i_send(dgp_i_line *l)
{
    int fd = dgp_i_fd;
    if (fd < 0)
        return;
    l->buf[l->len++] = '}';
    l->buf[l->len++] = '\n';
    size_t off = 0;
    while (off < l->len) {
        ssize_t w = dgp_i_write_once(fd, l->buf + off, l->len - off);
        if (w > 0) {
            off += (size_t)w; /* a short write (a full disk, a signal): send the rest */
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;    /* a full non-blocking pipe: this line is dropped */
        dgp_i_fd = -1; /* EPIPE, EBADF, ENOSPC...: silent from now on */
        return;
    }
}

void dgp_close(void)
{
    int fd = dgp_i_fd;
    dgp_i_fd = -1;
    if (fd >= 0 && dgp_i_owned)
        close(fd);
    dgp_i_owned = 0;
}

int dgp_open(void)
{
    const char *fd_text = getenv("DEVGATE_EVENTS_FD");
    const char *path = getenv("DEVGATE_EVENTS_FILE");
    dgp_close();
    dgp_i_warned = 0;
    if (fd_text && *fd_text) {
        char *end;
        errno = 0;
        long v = strtol(fd_text, &end, 10);
        while (*end == ' ' || *end == '\t' || *end == '\n')
            end++;
        if (errno || end == fd_text || *end || v < 0 || v > 1000000000L) {
            dgp_i_warn("DEVGATE_EVENTS_FD is not a descriptor number");
            return 0;
        }
        int flags = fcntl((int)v, F_GETFL);
        if (flags < 0 || (flags & O_ACCMODE) == O_RDONLY) {
            dgp_i_warn(flags < 0 ? "DEVGATE_EVENTS_FD is not an open descriptor"
                                 : "DEVGATE_EVENTS_FD is open read-only");
            return 0;
        }
        dgp_i_owned = 0;
        dgp_i_fd = (int)v;
        return 1;
    }
    if (path && *path) {
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            dgp_i_warn("cannot open DEVGATE_EVENTS_FILE");
            return 0;
        }
        dgp_i_owned = 1;
        dgp_i_fd = fd;
        return 1;
    }
    return 0;
}

int dgp_enabled(void)
{
    return dgp_i_fd >= 0;
}

void dgp_run_start_ex(const char *device, long long batch, const char *framework,
                      const char *framework_version, const char *label)
{
    dgp_i_line l;
    if (!dgp_i_begin(&l, "run_start"))
        return;
    if (!framework) {
        dgp_i_field(&l, "framework", "null");
    } else if (dgp_i_open_obj(&l, "framework")) {
        dgp_i_str(&l, "name", framework, DGP_I_NAME_MAX);
        dgp_i_str(&l, "version", framework_version, DGP_I_NAME_MAX);
        dgp_i_close_obj(&l);
    }
    dgp_i_str(&l, "device", device, DGP_I_NAME_MAX);
    if (batch > 0)
        dgp_i_int(&l, "batch", batch);
    else
        dgp_i_field(&l, "batch", "null");
    dgp_i_field(&l, "bucket", "null");
    dgp_i_field(&l, "seeds", "null");
    dgp_i_int(&l, "pid", (long long)getpid());
    if (label)
        dgp_i_str(&l, "label", label, DGP_I_TEXT_MAX);
    dgp_i_send(&l);
}

void dgp_run_start(const char *device, long long batch)
{
    dgp_run_start_ex(device, batch, NULL, NULL, NULL);
}

void dgp_gate_ex(const char *device, int built, int available, const char *reason, long long n,
                 int ok, double max_abs_err, double ms)
{
    dgp_i_line l;
    if (!dgp_i_begin(&l, "gate"))
        return;
    dgp_i_str(&l, "device", device, DGP_I_NAME_MAX);
    dgp_i_bool(&l, "built", built);
    dgp_i_bool(&l, "available", available);
    dgp_i_str(&l, "reason", reason, DGP_I_TEXT_MAX);
    if (!available) {
        dgp_i_field(&l, "matmul", "null");
    } else if (dgp_i_open_obj(&l, "matmul")) {
        dgp_i_bool(&l, "ok", ok);
        dgp_i_count(&l, "n", n > 0 ? n : -1);
        dgp_i_num(&l, "max_abs_err", max_abs_err);
        dgp_i_num(&l, "ms", ms);
        dgp_i_close_obj(&l);
    }
    dgp_i_send(&l);
}

void dgp_gate(const char *device, int built, int available, int ok, double max_abs_err, double ms)
{
    dgp_gate_ex(device, built, available, NULL, 0, ok, max_abs_err, ms);
}

void dgp_step(long long epoch, long long step, double step_ms, double data_ms, double loss,
              int synced)
{
    dgp_i_line l;
    if (!dgp_i_begin(&l, "step"))
        return;
    dgp_i_int(&l, "epoch", epoch);
    dgp_i_int(&l, "step", step);
    dgp_i_num(&l, "step_ms", step_ms);
    dgp_i_num(&l, "data_ms", data_ms);
    dgp_i_num(&l, "loss", loss);
    dgp_i_bool(&l, "synced", synced);
    dgp_i_send(&l);
}

void dgp_epoch_end(long long epoch, long long allocated, long long reserved,
                   long long max_allocated, long long driver, long long footprint,
                   int cache_emptied, int validation)
{
    dgp_i_line l;
    if (!dgp_i_begin(&l, "epoch_end"))
        return;
    dgp_i_int(&l, "epoch", epoch);
    dgp_i_count(&l, "allocated", allocated);
    dgp_i_count(&l, "reserved", reserved);
    dgp_i_count(&l, "max_allocated", max_allocated);
    dgp_i_count(&l, "driver", driver);
    dgp_i_count(&l, "footprint", footprint);
    dgp_i_bool(&l, "cache_emptied", cache_emptied);
    dgp_i_bool(&l, "validation", validation);
    dgp_i_send(&l);
}

void dgp_phase(const char *name, long long epoch)
{
    dgp_i_line l;
    if (!dgp_i_begin(&l, "phase"))
        return;
    dgp_i_str(&l, "name", name, DGP_I_NAME_MAX);
    dgp_i_count(&l, "epoch", epoch);
    dgp_i_send(&l);
}

void dgp_fallback(const char *op, const char *device, const char *message)
{
    dgp_i_line l;
    if (!dgp_i_begin(&l, "fallback"))
        return;
    dgp_i_str(&l, "op", op, DGP_I_NAME_MAX);
    dgp_i_str(&l, "device", device, DGP_I_NAME_MAX);
    dgp_i_str(&l, "message", message, DGP_I_TEXT_MAX);
    dgp_i_send(&l);
}

void dgp_sweep_trial(long long batch, const char *ended, double samples_per_s, double step_ms,
                     long long peak_bytes, const char *reason)
{
    dgp_i_line l;
    if (!dgp_i_begin(&l, "sweep_trial"))
        return;
    dgp_i_int(&l, "batch", batch);
    dgp_i_str(&l, "ended", ended, DGP_I_NAME_MAX);
    dgp_i_num(&l, "samples_per_s", samples_per_s);
    dgp_i_num(&l, "step_ms", step_ms);
    dgp_i_count(&l, "peak_bytes", peak_bytes);
    dgp_i_str(&l, "reason", reason, DGP_I_TEXT_MAX);
    dgp_i_send(&l);
}

void dgp_oom(const char *device, long long batch, const char *message)
{
    dgp_i_line l;
    if (!dgp_i_begin(&l, "oom"))
        return;
    dgp_i_str(&l, "device", device, DGP_I_NAME_MAX);
    dgp_i_count(&l, "batch", batch > 0 ? batch : -1);
    dgp_i_str(&l, "message", message, DGP_I_TEXT_MAX);
    dgp_i_send(&l);
}

void dgp_run_end(const char *status, const char *message)
{
    dgp_i_line l;
    if (!dgp_i_begin(&l, "run_end"))
        return;
    dgp_i_str(&l, "status", status ? status : "ok", DGP_I_NAME_MAX);
    dgp_i_str(&l, "message", message, DGP_I_TEXT_MAX);
    dgp_i_send(&l);
}

long long dgp_footprint(void)
{
    long long size = 0, resident = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    if (fscanf(f, "%lld %lld", &size, &resident) != 2)
        resident = -1;
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return resident >= 0 && page > 0 ? resident * (long long)page : -1;
}
#endif /* DGP_IMPLEMENTED */
#endif /* DEVGATE_PROBE_IMPLEMENTATION */
