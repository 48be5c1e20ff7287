/* Context, status names, counted host allocation, clock and small helpers. */
#include "core.h"

#include "json.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

const char *dg_math_name(dg_math m)
{
    return m == DG_MATH_TF32 ? "tf32" : m == DG_MATH_BF16 ? "bf16" : "fp32";
}

const char *dg_status_name(dg_status st)
{
    switch (st) {
    case DG_OK: return "ok";
    case DG_ERR_USAGE: return "usage";
    case DG_ERR_NOMEM: return "no-memory";
    case DG_ERR_IO: return "io";
    case DG_ERR_FORMAT: return "format";
    case DG_ERR_UNAVAILABLE: return "unavailable";
    case DG_ERR_BACKEND: return "backend";
    case DG_ERR_DEVICE_OOM: return "device-oom";
    case DG_ERR_CHECK: return "check-failed";
    case DG_ERR_LEDGER: return "ledger";
    case DG_ERR_BUSY: return "busy";
    case DG_ERR_SCHEMA: return "schema";
    case DG_ERR_NOT_FOUND: return "not-found";
    case DG_ERR_TIMEOUT: return "timeout";
    case DG_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown";
}

dg_ctx *dg_ctx_new(void)
{
    return dg_calloc(1, sizeof(dg_ctx));
}

void dg_ctx_free(dg_ctx *ctx)
{
    dg_free(ctx);
}

const char *dg_errmsg(const dg_ctx *ctx)
{
    return ctx ? ctx->errmsg : "";
}

void dg_set_log(dg_ctx *ctx, dg_log_fn fn, void *user)
{
    ctx->log_fn = fn;
    ctx->log_user = user;
}

bool dg_has_secret(const char *s)
{
    if (!s)
        return false;
    char *copy = dg_strdup(s);
    bool has = copy && dg_redact_secrets(copy) > 0;
    dg_free(copy);
    return has;
}

void dg_set_env_cmdlines(dg_ctx *ctx, bool keep)
{
    ctx->env_cmdlines = keep;
}

void dg_string_free(char *s)
{
    /* Every string handed out is dg_malloc memory (dg_json_print copies
     * cJSON's output), so this is the one free for all of them. */
    dg_free(s);
}

dg_status dg_fail(dg_ctx *ctx, dg_status st, const char *fmt, ...)
{
    if (ctx) {
        va_list ap;
        va_start(ap, fmt);
        char raw[sizeof ctx->errmsg];
        vsnprintf(raw, sizeof raw, fmt, ap);
        va_end(ap);
        /* Messages name files and devices: keep them valid UTF-8. */
        dg_utf8_clean(ctx->errmsg, sizeof ctx->errmsg, raw, strlen(raw), false);
    }
    return st;
}

dg_status dg_fail_buf(char *err, size_t errlen, dg_status st, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}

void dg_log(dg_ctx *ctx, dg_log_level level, const char *fmt, ...)
{
    if (!ctx || !ctx->log_fn)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    ctx->log_fn(level, buf, ctx->log_user);
}

/* Each block carries its size in a header so frees can be counted. The header
 * is 16 bytes to keep max_align_t alignment for the payload. */
#define HDR 16
static _Atomic size_t g_live, g_peak;

static void count_add(size_t n)
{
    size_t now = atomic_fetch_add(&g_live, n) + n;
    size_t peak = atomic_load(&g_peak);
    while (now > peak && !atomic_compare_exchange_weak(&g_peak, &peak, now)) {
    }
}

void *dg_malloc(size_t n)
{
    if (n > SIZE_MAX - HDR)
        return NULL;
    unsigned char *p = malloc(n + HDR);
    if (!p)
        return NULL;
    memcpy(p, &n, sizeof n);
    count_add(n);
    return p + HDR;
}

void *dg_calloc(size_t count, size_t n)
{
    if (n && count > (SIZE_MAX - HDR) / n)
        return NULL;
    void *p = dg_malloc(count * n);
    if (p)
        memset(p, 0, count * n);
    return p;
}

void dg_free(void *p)
{
    if (!p)
        return;
    unsigned char *base = (unsigned char *)p - HDR;
    size_t n;
    memcpy(&n, base, sizeof n);
    atomic_fetch_sub(&g_live, n);
    free(base);
}

void *dg_realloc(void *p, size_t n)
{
    if (!p)
        return dg_malloc(n);
    if (n > SIZE_MAX - HDR)
        return NULL;
    unsigned char *base = (unsigned char *)p - HDR;
    size_t old;
    memcpy(&old, base, sizeof old);
    unsigned char *nb = realloc(base, n + HDR);
    if (!nb)
        return NULL;
    memcpy(nb, &n, sizeof n);
    atomic_fetch_sub(&g_live, old);
    count_add(n);
    return nb + HDR;
}

char *dg_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = dg_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

char *dg_vasprintf(const char *fmt, va_list ap)
{
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    if (n < 0)
        return NULL;
    char *s = dg_malloc((size_t)n + 1);
    if (s)
        vsnprintf(s, (size_t)n + 1, fmt, ap);
    return s;
}

const char *dg_fmt_num(char *buf, size_t len, const char *fmt, double v)
{
    if (!isfinite(v))
        snprintf(buf, len, "not reported");
    else
        snprintf(buf, len, fmt, v);
    return buf;
}

char *dg_asprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = dg_vasprintf(fmt, ap);
    va_end(ap);
    return s;
}

void dg_host_mem_stats(size_t *live, size_t *peak)
{
    if (live)
        *live = atomic_load(&g_live);
    if (peak)
        *peak = atomic_load(&g_peak);
}

double dg_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double dg_wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void dg_utc_iso(char *buf, size_t len)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

bool dg_grow_max(void **p, size_t *cap, size_t need, size_t elem, size_t max)
{
    if (need <= *cap)
        return true;
    if (need > max)
        return false;
    size_t nc = *cap ? 2 * *cap : 64;
    while (nc < need)
        nc *= 2;
    if (nc > max)
        nc = max;
    void *np = dg_realloc(*p, nc * elem);
    if (!np)
        return false;
    *p = np;
    *cap = nc;
    return true;
}

bool dg_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    return dg_grow_max(p, cap, need, elem, SIZE_MAX / 2);
}

void dg_random_bytes(unsigned char *out, size_t n)
{
    if (getrandom(out, n, GRND_NONBLOCK) == (ssize_t)n)
        return;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t got = read(fd, out, n);
        close(fd);
        if (got == (ssize_t)n)
            return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long v = (unsigned long long)ts.tv_nsec ^
                           (unsigned long long)getpid() * 2654435761ULL ^
                           (unsigned long long)ts.tv_sec << 20;
    for (size_t k = 0; k < n; k++) {
        v = v * 6364136223846793005ULL + 1442695040888963407ULL;
        out[k] = (unsigned char)(v >> 56);
    }
}

void dg_run_id(char *buf, size_t len, long long when, int hex)
{
    time_t t = (time_t)when;
    struct tm tm;
    char ts[24] = "00000000-000000";
    if (gmtime_r(&t, &tm))
        strftime(ts, sizeof ts, "%Y%m%d-%H%M%S", &tm);
    unsigned char r[16];
    size_t n = hex > 0 ? (size_t)(hex > 32 ? 32 : hex) / 2 : 0;
    dg_random_bytes(r, n);
    char digits[33] = "";
    for (size_t k = 0; k < n; k++)
        snprintf(digits + 2 * k, 3, "%02x", r[k]);
    snprintf(buf, len, "%s-%s", ts, digits);
}

int dg_parse_counters(const char *p, unsigned long long *v, int max)
{
    int n = 0;
    for (; n < max; n++) {
        char *end;
        errno = 0;
        v[n] = strtoull(p, &end, 10);
        if (end == p || errno)
            break;
        p = end;
    }
    return n;
}

char *dg_read_file(const char *path, size_t max, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = max < 4096 ? max : 4096, n = 0;
    char *buf = dg_malloc(cap + 1);
    while (buf) {
        if (n == cap) {
            if (cap >= max)
                break;
            cap = cap * 2 > max ? max : cap * 2;
            char *nb = dg_realloc(buf, cap + 1);
            if (!nb) {
                dg_free(buf);
                buf = NULL;
                errno = ENOMEM;
                break;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int err = ferror(f) ? EIO : 0;
    fclose(f);
    if (buf && err) {
        dg_free(buf);
        errno = err;
        return NULL;
    }
    if (buf) {
        buf[n] = '\0';
        if (len)
            *len = n;
    }
    return buf;
}

char *dg_trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

void dg_copy_clean(char *dst, size_t n, const char *src)
{
    dg_text_clean(dst, n, src, src ? strlen(src) : 0, false);
}

/* Overwrites s[0..n) with "***" (or as many '*' as fit) and closes the gap. */
static void mask_span(char *s, size_t n)
{
    size_t k = n < 3 ? n : 3;
    memset(s, '*', k);
    memmove(s + k, s + n, strlen(s + n) + 1);
}

static bool secret_end(char c)
{
    return c == '\0' || c == ' ' || c == '&' || c == ';' || c == '\'' || c == '"';
}

/* Whether NAME (an environment variable's, upper case, digits and '_') names
 * a credential: AWS_SECRET_ACCESS_KEY, HF_TOKEN, OPENAI_API_KEY, DB_PASSWD. */
static bool secret_var(const char *name, size_t n)
{
    if (n == 0 || n > 128)
        return false;
    char up[129];
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
            return false;
        up[i] = c;
    }
    up[n] = '\0';
    static const char *const words[] = {"SECRET",     "TOKEN",       "PASSWORD",
                                        "PASSWD",     "API_KEY",     "APIKEY",
                                        "ACCESS_KEY", "PRIVATE_KEY", "CREDENTIAL"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strstr(up, words[i]))
            return true;
    return false;
}

/* Whether the word w[0..n) has the shape of a well-known token: OpenAI's
 * sk-..., GitHub's ghp_/github_pat_, Slack's xox?-, Hugging Face's hf_, an
 * AWS access key id (AKIA + 16). */
static bool token_shaped(const char *w, size_t n)
{
    static const struct {
        const char *prefix;
        size_t min;
    } shapes[] = {{"sk-", 20},   {"ghp_", 20},  {"github_pat_", 20}, {"xoxb-", 15},
                  {"xoxp-", 15}, {"xoxa-", 15}, {"hf_", 20},         {"AKIA", 20}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t pn = strlen(shapes[i].prefix);
        if (n >= shapes[i].min && strncmp(w, shapes[i].prefix, pn) == 0)
            return true;
    }
    return false;
}

/* Whether w[0..n) is a flag whose value is a credential (--token, --api-key). */
static size_t secret_flag(const char *w, size_t n)
{
    static const char *const flags[] = {
        "--token",        "--api-key",    "--apikey",   "--secret",     "--password",   "--passwd",
        "--access-token", "--auth-token", "--hf-token", "--secret-key", "--private-key"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        size_t fn = strlen(flags[i]);
        if (n >= fn && strncasecmp(w, flags[i], fn) == 0 && (n == fn || w[fn] == '='))
            return fn;
    }
    return 0;
}

/* The word-level forms: `--token VALUE` and `--token=VALUE`, `NAME_SECRET=VALUE`,
 * and bare words shaped like a known token. Returns how many it masked. */
static int redact_words(char *s)
{
    int masked = 0;
    bool next_is_secret = false;
    for (char *w = s; *w;) {
        while (*w == ' ')
            w++;
        size_t n = 0;
        while (w[n] && w[n] != ' ')
            n++;
        if (n == 0)
            break;
        const char *eq = memchr(w, '=', n);
        size_t fn = secret_flag(w, n);
        char *v = NULL;
        size_t vn = 0;
        if (next_is_secret) {
            v = w, vn = n;
        } else if (fn && fn < n) {
            v = w + fn + 1, vn = n - fn - 1;
        } else if (eq && secret_var(w, (size_t)(eq - w))) {
            v = (char *)eq + 1, vn = n - (size_t)(eq - w) - 1;
        } else if (token_shaped(w, n)) {
            v = w, vn = n;
        }
        next_is_secret = fn == n;
        if (v && vn > 0 && strncmp(v, "***", vn < 3 ? vn : 3) != 0) {
            mask_span(v, vn);
            masked++;
            n = (size_t)(v - w) + (vn < 3 ? vn : 3);
        }
        w += n;
    }
    return masked;
}

int dg_redact_secrets(char *s)
{
    if (!s)
        return 0;
    int masked = 0;
    /* scheme://user:password@host: the userinfo ends at '@' before any '/'. */
    for (char *p = strstr(s, "://"); p; p = strstr(p, "://")) {
        char *u = p + 3, *at = NULL, *colon = NULL;
        for (char *q = u; *q && *q != '/' && *q != ' '; q++) {
            if (*q == '@')
                at = q;
            else if (*q == ':' && !colon && !at)
                colon = q;
        }
        if (at && colon && colon < at && at > colon + 1) {
            mask_span(colon + 1, (size_t)(at - colon - 1));
            masked++;
        }
        p = u;
    }
    /* keyword=value forms: libpq conninfo, the environment, a flag. */
    static const char *const keys[] = {"password=", "pgpassword=", "--password="};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        size_t kn = strlen(keys[i]);
        for (char *p = s; (p = strcasestr(p, keys[i])) != NULL;) {
            bool starts = p == s || p[-1] == ' ' || p[-1] == '?' || p[-1] == '&' ||
                          (keys[i][0] != '-' && p[-1] == '-');
            char *v = p + kn;
            size_t n = 0;
            while (!secret_end(v[n]))
                n++;
            if (starts && n > 0 && strncmp(v, "***", n < 3 ? n : 3) != 0) {
                mask_span(v, n);
                masked++;
            }
            p = v;
        }
    }
    return masked + redact_words(s);
}

bool dg_proc_kb(const char *text, const char *key, double *bytes)
{
    size_t kl = strlen(key);
    for (const char *p = text; p && *p;) {
        if (strncmp(p, key, kl) == 0 && p[kl] == ':') {
            char *end;
            unsigned long long kb = strtoull(p + kl + 1, &end, 10);
            if (end == p + kl + 1)
                return false;
            *bytes = (double)kb * 1024.0;
            return true;
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return false;
}

bool dg_proc_self_rss(double *bytes)
{
    char buf[256];
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    unsigned long long size, res;
    long page = sysconf(_SC_PAGESIZE);
    if (sscanf(buf, "%llu %llu", &size, &res) != 2 || page <= 0)
        return false;
    *bytes = (double)res * (double)page;
    return true;
}

void dg_capbuf_add(dg_capbuf *b, const char *src, size_t n)
{
    if (b->nomem)
        return;
    if (n > b->cap - b->len) {
        n = b->cap - b->len;
        b->truncated = true;
    }
    if (n == 0)
        return;
    if (b->len + n + 1 > b->alloc) {
        size_t want = b->alloc ? b->alloc : 4096;
        while (want < b->len + n + 1)
            want *= 2;
        if (want > b->cap + 1)
            want = b->cap + 1;
        char *nd = dg_realloc(b->data, want);
        if (!nd) {
            b->nomem = true;
            return;
        }
        b->data = nd;
        b->alloc = want;
    }
    memcpy(b->data + b->len, src, n);
    b->len += n;
    b->data[b->len] = '\0';
}

bool dg_fd_drain(int fd, size_t budget, void (*feed)(void *user, const char *p, size_t n),
                 void *user)
{
    char chunk[65536];
    size_t total = 0;
    while (total < budget) {
        ssize_t got = read(fd, chunk, sizeof chunk);
        if (got > 0) {
            feed(user, chunk, (size_t)got);
            total += (size_t)got;
            continue;
        }
        if (got == 0)
            return true;
        if (errno == EINTR)
            continue;
        return errno != EAGAIN && errno != EWOULDBLOCK;
    }
    return false;
}

static void capbuf_feed(void *b, const char *p, size_t n)
{
    dg_capbuf_add(b, p, n);
}

bool dg_capbuf_drain(int fd, dg_capbuf *b)
{
    return dg_fd_drain(fd, SIZE_MAX, capbuf_feed, b);
}

int dg_spawnattr_isolate(posix_spawnattr_t *attr)
{
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    int rc = posix_spawnattr_setpgroup(attr, 0);
    if (!rc)
        rc = posix_spawnattr_setsigmask(attr, &none);
    if (!rc)
        rc = posix_spawnattr_setsigdefault(attr, &all);
    if (!rc)
        rc = posix_spawnattr_setflags(attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                                POSIX_SPAWN_SETSIGDEF);
    return rc;
}
