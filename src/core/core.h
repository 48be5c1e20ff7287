/* Internal core: context, errors, counted host allocation, clock, rng, small
 * file helpers. Nothing here prints or exits. */
#ifndef DG_CORE_H
#define DG_CORE_H

#include "devgate.h"

#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>

#define DG_ERRMSG_MAX 1024

struct dg_ctx {
    char errmsg[DG_ERRMSG_MAX];
    dg_log_fn log_fn;
    void *log_user;
    bool env_cmdlines; /* dg_set_env_cmdlines */
};

#if defined(__GNUC__)
#define DG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DG_PRINTF(a, b)
#endif

/* Stores a formatted message on ctx (ctx may be NULL) and returns st. */
dg_status dg_fail(dg_ctx *ctx, dg_status st, const char *fmt, ...) DG_PRINTF(3, 4);
/* dg_fail for code that reports into a caller's buffer instead of a context:
 * formats into err (when err and errlen are given) and returns st. */
dg_status dg_fail_buf(char *err, size_t errlen, dg_status st, const char *fmt, ...) DG_PRINTF(4, 5);
/* Sends a diagnostic to the context's log callback, if any. */
void dg_log(dg_ctx *ctx, dg_log_level level, const char *fmt, ...) DG_PRINTF(3, 4);

/* Counted host allocation (live and peak bytes, see dg_host_mem_stats). */
void *dg_malloc(size_t n);
void *dg_calloc(size_t count, size_t n);
void *dg_realloc(void *p, size_t n);
void dg_free(void *p);
char *dg_strdup(const char *s);
/* printf into a new dg_malloc'd string; NULL when out of memory. */
char *dg_asprintf(const char *fmt, ...) DG_PRINTF(1, 2);
/* dg_asprintf with a va_list (ap is used up). */
char *dg_vasprintf(const char *fmt, va_list ap) DG_PRINTF(1, 0);

/* Monotonic clock in seconds. */
double dg_now(void);
/* Wall clock (CLOCK_REALTIME) in seconds since the epoch: the clock another
 * process's time stamps share (a Python child's time.time()). */
double dg_wall_now(void);
/* Current UTC time as ISO 8601 "YYYY-MM-DDTHH:MM:SSZ" into buf (>= 21 bytes). */
void dg_utc_iso(char *buf, size_t len);
/* Makes room for need elements of elem bytes in the dg_malloc'd array *p of
 * *cap (doubling from 64); false, *p untouched, when out of memory. */
bool dg_grow(void **p, size_t *cap, size_t need, size_t elem);
/* The same, *cap never past max: false also when need is more than max. */
bool dg_grow_max(void **p, size_t *cap, size_t need, size_t elem, size_t max);
/* n random bytes: getrandom, else /dev/urandom, else the clock and the pid. */
void dg_random_bytes(unsigned char *out, size_t n);

/* Counter-based generator (Philox-4x32-10): the same (seed, counter) gives the
 * same numbers on every machine, in any order of calls. */
typedef struct dg_rng {
    uint64_t seed;    /* the key */
    uint64_t stream;  /* high half of the counter: one stream per purpose */
    uint64_t counter; /* low half: advances by one per four outputs */
} dg_rng;
void dg_rng_init(dg_rng *r, uint64_t seed, uint64_t stream);
/* Four 32-bit outputs for the next counter value. */
void dg_rng_next4(dg_rng *r, uint32_t out[4]);
/* Uniform floats in [lo, hi). */
void dg_rng_uniform(dg_rng *r, float *dst, size_t n, float lo, float hi);

/* A growing byte buffer that keeps at most cap bytes: the rest is dropped and
 * marked truncated. data stays NUL-terminated once allocated. */
typedef struct dg_capbuf {
    char *data;
    size_t len, alloc, cap;
    bool nomem, truncated;
} dg_capbuf;
/* Appends n bytes (up to the cap); sets nomem when growing fails. */
void dg_capbuf_add(dg_capbuf *b, const char *src, size_t n);
/* Reads what is there on the non-blocking fd into b; true at end of file or
 * on an error other than EAGAIN (a child's pipe closing). */
bool dg_capbuf_drain(int fd, dg_capbuf *b);
/* Reads what fd holds, at most budget bytes (SIZE_MAX: no limit), handing
 * each read to feed(user, bytes, n); true at end of file or on an error
 * other than EINTR, EAGAIN (false: the pipe is drained for now, or the
 * budget is spent). */
bool dg_fd_drain(int fd, size_t budget, void (*feed)(void *user, const char *p, size_t n),
                 void *user);

/* Reads a whole (small) file into a NUL-terminated dg_malloc'd buffer, at most
 * max bytes; NULL on failure (errno set). *len gets the byte count when non-NULL. */
char *dg_read_file(const char *path, size_t max, size_t *len);
/* Reads up to size - 1 bytes of a small file (a /proc entry) into buf,
 * NUL-terminated; false when it cannot be opened or holds nothing. */
bool dg_read_small(const char *path, char *buf, size_t size);
/* Parses up to max unsigned decimal counters separated by blanks from p (a
 * /proc line's columns) into v; how many it read before the first that is
 * not one. */
int dg_parse_counters(const char *p, unsigned long long *v, int max);
/* Writes all n bytes to fd, resuming after signals; false with errno set. */
bool dg_write_all(int fd, const void *buf, size_t n);
/* Trims ASCII whitespace at both ends in place; returns s. */
char *dg_trim(char *s);
/* rm -rf: removes path and everything below it, never following a symbolic
 * link (a link is removed, not what it names); failures are ignored. */
void dg_remove_tree(const char *path);
/* "Key: N kB" from a /proc status-style text (meminfo, self/status) in bytes; false when absent. */
bool dg_proc_kb(const char *text, const char *key, double *bytes);
/* Resident set of this process in bytes (/proc/self/statm); false when unreadable. */
bool dg_proc_self_rss(double *bytes);
/* Copies src into dst of size n, always NUL-terminated, through
 * dg_text_clean (invalid UTF-8, controls, C1, bidi overrides become '?', tab
 * and newline a space; never cutting a sequence), so hostile strings cannot
 * break terminals or records. Records that keep the text as it was use
 * dg_utf8_clean (json.h) instead. */
void dg_copy_clean(char *dst, size_t n, const char *src);

/* Sets a spawn's attributes for a child of its own: a new process group (so
 * the terminal's Ctrl-C and group kills reach only what is meant), an empty
 * signal mask and every signal at its default disposition. 0 or an errno. */
int dg_spawnattr_isolate(posix_spawnattr_t *attr);

#endif
