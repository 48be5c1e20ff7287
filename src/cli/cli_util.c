#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("devgate: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int cli_fail_status(cli *c, dg_status st, const char *what)
{
    const char *msg = dg_errmsg(c->ctx);
    size_t wl = strlen(what);
    /* A message that names its verb already ("slo: ...") is not prefixed twice. */
    if (strncmp(msg, what, wl) == 0 && msg[wl] == ':')
        cli_error("%s", msg);
    else
        cli_error("%s: %s", what, msg[0] ? msg : dg_status_name(st));
    switch (st) {
    case DG_ERR_UNAVAILABLE: return EXIT_UNAVAILABLE;
    default: return EXIT_USAGE;
    }
}

void cli_level_said(const cJSON *rec, FILE *f)
{
    const cJSON *lv = cJSON_GetObjectItem(rec, "level");
    /* accept -- CMD: the device gate keeps its own budget inside the gate step. */
    const cJSON *glv = cJSON_GetObjectItem(cJSON_GetObjectItem(rec, "gate"), "level");
    const char *gb = cJSON_GetStringValue(cJSON_GetObjectItem(glv, "backend"));
    if (gb && cJSON_IsObject(cJSON_GetObjectItem(rec, "gate")) && glv != lv) {
        const char *why = cJSON_GetStringValue(cJSON_GetObjectItem(glv, "reason"));
        double gw = jmetric(glv, "wall"), gbud = jmetric(glv, "budget");
        if (why)
            fprintf(f, "  the device gate (level %.0f on %s) did not run: %s\n",
                    jnum(glv, "level", NAN), gb, why);
        else if (!isnan(gw))
            fprintf(f, "  the device gate (level %.0f on %s) took %.1f s, %s its %.0f s budget\n",
                    jnum(glv, "level", NAN), gb, gw,
                    cJSON_IsTrue(cJSON_GetObjectItem(glv, "overrun")) ? "OVERRAN" : "within", gbud);
    }
    double level = jnum(lv, "level", NAN), budget = jmetric(lv, "budget"),
           wall = jmetric(lv, "wall"), waited = jmetric(lv, "lock_waited");
    if (isnan(level) || isnan(wall))
        return;
    char w[64] = "";
    if (waited >= 0.05)
        snprintf(w, sizeof w, " (%.1f s of it waiting for another measurement)", waited);
    if (isnan(budget))
        fprintf(f, "  level %.0f took %.1f s%s; no budget stated\n", level, wall, w);
    else if (cJSON_IsTrue(cJSON_GetObjectItem(lv, "overrun")))
        fprintf(f, "  level %.0f OVERRAN its %.0f s budget: %.1f s%s\n", level, budget, wall, w);
    else
        fprintf(f, "  level %.0f took %.1f s%s, within its %.0f s budget\n", level, wall, w,
                budget);
}

int cli_record_print(cli *c, const char *verb, char *json, cJSON *rec, int exit_status,
                     void (*print)(const cJSON *rec), const char *fail)
{
    char *run_id = NULL;
    int rc = cli_record(c, verb, json, exit_status, &run_id);
    if (c->json) {
        cli_print_json(rec, run_id);
    } else if (print) {
        print(rec);
        if (fail)
            printf("  FAIL     %s\n", fail);
        if (run_id)
            printf("  recorded as %s\n", run_id);
    }
    cJSON_Delete(rec);
    dg_string_free(json);
    dg_string_free(run_id);
    return rc;
}

int cli_step_status(cli *c, const char *verb, dg_status st)
{
    if (st == DG_OK)
        return EXIT_PASS;
    cli_error("%s: %s", verb, dg_errmsg(c->ctx));
    return st == DG_ERR_UNAVAILABLE ? EXIT_UNAVAILABLE : EXIT_FAIL;
}

char *cli_read_fd(int fd, size_t max)
{
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int err = 0;
    for (;;) {
        if (cap - len < 2) { /* room for a byte and the NUL */
            size_t ncap = cap ? 2 * cap : 65536;
            if (ncap > max + 2)
                ncap = max + 2; /* one byte past max tells "too big" */
            char *nb = ncap > cap ? realloc(buf, ncap) : NULL;
            if (!nb) {
                err = ncap > cap ? ENOMEM : EFBIG;
                break;
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t got = read(fd, buf + len, cap - len - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            err = errno;
            break;
        }
        len += (size_t)got;
        if (len > max) {
            err = EFBIG;
            break;
        }
        if (got == 0)
            break;
    }
    if (err) {
        free(buf);
        errno = err;
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

bool cli_pipe_append(int fd, char **buf, size_t *len)
{
    char chunk[8192];
    ssize_t got = read(fd, chunk, sizeof chunk);
    if (got <= 0)
        return false;
    char *nb = realloc(*buf, *len + (size_t)got + 1);
    if (nb) {
        *buf = nb;
        memcpy(nb + *len, chunk, (size_t)got);
        *len += (size_t)got;
        nb[*len] = '\0';
    }
    return true;
}

char *cli_read_file(const char *path, size_t max)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    char *text = cli_read_fd(fd, max);
    int e = errno;
    close(fd);
    errno = e;
    return text;
}

const char *cli_save_unrecorded(const char *verb, const char *json)
{
    static char path[256];
    char ts[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(ts, sizeof ts, "%Y%m%d-%H%M%S", &tm);
    snprintf(path, sizeof path, "devgate-unrecorded-%s-%s-%ld.json", verb, ts, (long)getpid());
    FILE *f = fopen(path, "wx");
    if (!f)
        return NULL;
    bool ok = fputs(json, f) >= 0 && fputc('\n', f) != EOF;
    ok = (fclose(f) == 0) && ok;
    return ok ? path : NULL;
}

char *cli_ledger_path(const cli *c)
{
    if (c->ledger_path)
        return strdup(c->ledger_path);
    char *def = dg_ledger_default_path();
    char *p = def ? strdup(def) : NULL;
    dg_string_free(def);
    return p;
}

dg_ledger *cli_ledger_open(cli *c, const char *path, int mode, const char *what, dg_status *st)
{
    dg_status local;
    if (!st)
        st = &local;
    char *def = path ? NULL : cli_ledger_path(c);
    const char *p = path ? path : def;
    bool quiet = mode & CLI_LEDGER_QUIET;
    mode &= ~CLI_LEDGER_QUIET;
    if (!p) {
        *st = DG_ERR_USAGE;
        if (!quiet)
            cli_error("%s: cannot tell where the ledger %s (set DEVGATE_LEDGER or --ledger)",
                      what ? what : "ledger", mode == CLI_LEDGER_RECORD ? "goes" : "is");
        return NULL;
    }
    const char *t = getenv("DEVGATE_LEDGER_TIMEOUT_MS");
    int timeout_ms = t ? atoi(t) : 0;
    dg_ledger *lg = NULL;
    if (mode == CLI_LEDGER_RECORD)
        *st = dg_ledger_open_record(c->ctx, p, timeout_ms, &lg);
    else if (mode == CLI_LEDGER_WRITE)
        *st = dg_ledger_open(c->ctx, p, timeout_ms, &lg);
    else
        *st = dg_ledger_open_readonly(c->ctx, p, timeout_ms, &lg);
    free(def);
    if (*st != DG_OK && !quiet) {
        if (what)
            cli_error("%s: %s", what, dg_errmsg(c->ctx));
        else
            cli_error("%s", dg_errmsg(c->ctx));
    }
    return *st == DG_OK ? lg : NULL;
}

int cli_record(cli *c, const char *verb, const char *json, int exit_status, char **run_id)
{
    if (run_id)
        *run_id = NULL;
    if (c->no_ledger)
        return exit_status;
    char *path = cli_ledger_path(c);
    if (!path) {
        cli_error("ledger: cannot tell where the ledger goes (set DEVGATE_LEDGER or --ledger)");
        return EXIT_USAGE;
    }
    dg_status st;
    dg_ledger *lg = cli_ledger_open(c, path, CLI_LEDGER_RECORD | CLI_LEDGER_QUIET, NULL, &st);
    free(path);
    if (st == DG_OK)
        st = dg_ledger_record(c->ctx, lg, verb, exit_status, json, run_id);
    dg_ledger_close(lg);
    if (st != DG_OK) {
        cli_error("%s", dg_errmsg(c->ctx));
        const char *saved = cli_save_unrecorded(verb, json);
        if (saved)
            cli_error("the record was not lost: saved to %s", saved);
        else
            cli_error("the record could not be saved either (%s); it follows on stderr",
                      strerror(errno));
        if (!saved)
            fprintf(stderr, "%s\n", json);
        return EXIT_USAGE;
    }
    return exit_status;
}

void fmt_bytes(char *buf, size_t len, const cJSON *metric)
{
    const cJSON *v = cJSON_GetObjectItem(metric, "value");
    if (!cJSON_IsTrue(cJSON_GetObjectItem(metric, "valid")) || !cJSON_IsNumber(v)) {
        snprintf(buf, len, "not reported");
        return;
    }
    double b = v->valuedouble;
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", b, units[u]);
}

const char *jstr(const cJSON *obj, const char *key, const char *fallback)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(obj, key));
    return s ? s : fallback;
}

double jnum(const cJSON *obj, const char *key, double fallback)
{
    const cJSON *v = cJSON_GetObjectItem(obj, key);
    return cJSON_IsNumber(v) ? v->valuedouble : fallback;
}

double jmetric(const cJSON *obj, const char *key)
{
    const cJSON *m = cJSON_GetObjectItem(obj, key);
    if (!cJSON_IsTrue(cJSON_GetObjectItem(m, "valid")))
        return NAN;
    return jnum(m, "value", NAN);
}

const char *cli_metric(char *buf, size_t len, const cJSON *obj, const char *key, const char *fmt,
                       const char *none)
{
    double v = jmetric(obj, key);
    if (isnan(v))
        snprintf(buf, len, "%s", none);
    else
        snprintf(buf, len, fmt, v);
    return buf;
}

const char *cli_threshold_add(const cli_opt *o, const char *value, void *field)
{
    (void)o;
    cli_thresholds *t = field;
    const char *eq = strchr(value, '=');
    if (!eq || eq == value || !eq[1] || strchr(value, ',') || strchr(eq + 1, '='))
        return "NAME=VALUE (no ',' and one '=')";
    size_t n = strlen(t->list);
    int w = snprintf(t->list + n, sizeof t->list - n, "%s%s", n ? "," : "", value);
    if (w < 0 || (size_t)w >= sizeof t->list - n) {
        t->list[n] = '\0';
        return "fewer thresholds (4 KiB in all)";
    }
    return NULL;
}

bool cli_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

bool cli_parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v) || !(v >= lo) || !(v <= hi))
        return false;
    *out = v;
    return true;
}

/* The code point of a UTF-8 sequence of n (2 or 3) bytes at p. */
static unsigned utf8_cp(const unsigned char *p, size_t n)
{
    return n == 2 ? (p[0] & 0x1fu) << 6 | (p[1] & 0x3fu)
                  : (p[0] & 0x0fu) << 12 | (p[1] & 0x3fu) << 6 | (p[2] & 0x3fu);
}

/* True for what a terminal acts on though JSON keeps it raw: DEL, the C1
 * controls and the bidirectional marks, embeddings, overrides and isolates. */
static bool json_unsafe(unsigned cp)
{
    return cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || cp == 0x200e ||
           cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

void cli_put_json(const char *text)
{
    cli_term_machine_output();
    if (!text)
        return;
    /* They can only sit inside strings (JSON's own syntax is ASCII), where
     * \uXXXX stands for the same character. */
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        size_t n = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0 ? 3 : 1;
        for (size_t k = 1; k < n; k++)
            if ((p[k] & 0xc0) != 0x80)
                n = 1;
        unsigned cp = n == 1 ? *p : utf8_cp(p, n);
        if ((n > 1 || cp == 0x7f) && json_unsafe(cp))
            printf("\\u%04x", cp);
        else
            fwrite(p, 1, n, stdout);
        p += n;
    }
    putchar('\n');
}

void cli_print_json(cJSON *rec, const char *run_id)
{
    if (run_id)
        cJSON_AddStringToObject(rec, "run_id", run_id);
    char *out = cJSON_Print(rec);
    cli_put_json(out);
    cJSON_free(out);
}

bool cli_make_dirs(const char *path)
{
    return dg_make_dirs(path);
}

bool cli_write_file(const char *path, const char *text)
{
    dg_ctx *ctx = dg_ctx_new();
    dg_status st = ctx ? dg_file_write_atomic(ctx, path, text, strlen(text)) : DG_ERR_NOMEM;
    if (st != DG_OK)
        cli_error("%s", ctx ? dg_errmsg(ctx) : "cannot write: out of memory");
    dg_ctx_free(ctx);
    return st == DG_OK;
}

char *cli_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* "90", "90s", "1.5m", "2h" into seconds; false for anything else or <= 0. */
static bool parse_duration(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v <= 0)
        return false;
    double mult = 1;
    if (*end == 's')
        end++;
    else if (*end == 'm')
        mult = 60, end++;
    else if (*end == 'h')
        mult = 3600, end++;
    if (*end || v * mult > 1e9)
        return false;
    *out = v * mult;
    return true;
}

const char *cli_duration_opt(const cli_opt *opt, const char *v, void *field)
{
    (void)opt;
    return parse_duration(v, field) ? NULL : "a duration such as 90, 90s, 10m or 2h";
}
