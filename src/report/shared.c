/* The helpers every renderer shares (shared.h): the output buffer writers,
 * escaping per format, tolerant record lookups, number formats and the
 * readings of the record more than one format shows. */
#include "report/shared.h"

#include "core/utf8.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- output ------------------------------------------------------------- */

void dg_rp_put(dg_capbuf *b, const char *s)
{
    if (s)
        dg_capbuf_add(b, s, strlen(s));
}

void dg_rp_printf(dg_capbuf *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        dg_capbuf_add(b, small, (size_t)n);
        return;
    }
    char *big = dg_malloc((size_t)n + 1);
    if (!big) {
        b->nomem = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    dg_capbuf_add(b, big, (size_t)n);
    dg_free(big);
}

static const char md_special[] = "\\`*_[]|~!$#";

static void esc_one(dg_capbuf *b, esc_mode mode, const unsigned char *s, size_t n, uint32_t cp)
{
    if (cp == '\n' || cp == '\r' || cp == '\t') {
        dg_rp_put(b, mode == ESC_HTML ? (cp == '\t' ? "\t" : "\n") : " ");
        return;
    }
    if (dg_cp_unsafe(cp)) {
        dg_rp_put(b, mode == ESC_TEXT ? "?" : "\xef\xbf\xbd");
        return;
    }
    if (mode == ESC_HTML) {
        switch (cp) {
        case '&': dg_rp_put(b, "&amp;"); return;
        case '<': dg_rp_put(b, "&lt;"); return;
        case '>': dg_rp_put(b, "&gt;"); return;
        case '"': dg_rp_put(b, "&quot;"); return;
        case '\'': dg_rp_put(b, "&#39;"); return;
        default: break;
        }
    } else if (mode == ESC_MD && (cp == '<' || cp == '>' || cp == '&')) {
        /* Entities, not backslashes: no raw '<' reaches a renderer that allows HTML. */
        dg_rp_put(b, cp == '<' ? "&lt;" : cp == '>' ? "&gt;" : "&amp;");
        return;
    } else if (mode == ESC_MD && cp < 0x80 && strchr(md_special, (int)cp)) {
        dg_capbuf_add(b, "\\", 1);
    }
    dg_capbuf_add(b, (const char *)s, n);
}

void dg_rp_esc(dg_capbuf *b, esc_mode mode, const char *s, const char *fallback)
{
    if (!s) {
        dg_rp_put(b, fallback);
        return;
    }
    const unsigned char *p = (const unsigned char *)s;
    for (size_t left = strlen(s); left;) {
        uint32_t cp;
        size_t n = dg_utf8_next(p, left, &cp);
        esc_one(b, mode, p, n, cp);
        p += n, left -= n;
    }
}

void dg_rp_opt(dg_capbuf *b, esc_mode mode, const char *lead, const char *s, const char *tail)
{
    if (!s)
        return;
    dg_rp_put(b, lead);
    dg_rp_esc(b, mode, s, "");
    dg_rp_put(b, tail);
}

void dg_rp_vfmt(dg_capbuf *b, esc_mode mode, dg_rp_conv conv, const char *fmt, va_list *ap)
{
    const char *run = fmt;
    for (const char *p = fmt; *p; p++) {
        if (*p != '%' || !p[1])
            continue;
        dg_capbuf_add(b, run, (size_t)(p - run));
        char c = *++p;
        run = p + 1;
        if (c == 'S') {
            const char *s = va_arg(*ap, const char *);
            dg_rp_esc(b, mode, s, va_arg(*ap, const char *));
        } else if (c != '%' && conv) {
            conv(b, c, ap);
        } else {
            dg_capbuf_add(b, p, 1); /* "%%": the second '%' */
        }
    }
    dg_capbuf_add(b, run, strlen(run));
}

void dg_rp_fmt(dg_capbuf *b, esc_mode mode, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dg_rp_vfmt(b, mode, NULL, fmt, &ap);
    va_end(ap);
}

/* Length of a non-finite number as printf writes it at s ("nan", "-nan",
 * "+inf", with a batch prefix "b" or a unit suffix "%", "x" or "×"), when s
 * starts one as a whole word; 0 otherwise. */
static size_t nonfinite_word(const char *s, bool word_start)
{
    if (!word_start)
        return 0;
    size_t i = 0;
    if (s[i] == 'b')
        i++;
    if (s[i] == '+' || s[i] == '-')
        i++;
    if (strncmp(s + i, "nan", 3) != 0 && strncmp(s + i, "inf", 3) != 0)
        return 0;
    i += 3;
    if (strncmp(s + i, "inity", 5) == 0)
        i += 5;
    if (s[i] == '%' || s[i] == 'x')
        i++;
    else if (strncmp(s + i, "\xc3\x97", 2) == 0) /* × */
        i += 2;
    unsigned char next = (unsigned char)s[i];
    if (isalnum(next) || next == '_' || next == '.')
        return 0;
    return i;
}

void dg_rp_prose(dg_capbuf *b, esc_mode mode, const char *s, const char *fallback)
{
    if (!s) {
        dg_rp_put(b, fallback);
        return;
    }
    /* Copy with every non-finite number spelled "not reported", then escape. */
    dg_capbuf t = {.cap = REPORT_STRING_MAX};
    bool start = true;
    for (const char *p = s; *p;) {
        size_t n = nonfinite_word(p, start);
        if (n) {
            dg_rp_put(&t, "not reported");
            p += n;
            start = false;
            continue;
        }
        unsigned char c = (unsigned char)*p;
        start = !(isalnum(c) || c == '_' || c == '.' || c >= 0x80);
        dg_capbuf_add(&t, p, 1);
        p++;
    }
    if (t.nomem)
        b->nomem = true;
    dg_rp_esc(b, mode, t.data ? t.data : "", fallback);
    dg_free(t.data);
}

/* ---- record access ------------------------------------------------------ */

const cJSON *dg_rp_get(const cJSON *o, const char *path)
{
    return dg_jpath(o, path);
}

const cJSON *dg_rp_obj(const cJSON *o, const char *path)
{
    const cJSON *n = dg_rp_get(o, path);
    return cJSON_IsObject(n) ? n : NULL;
}

const cJSON *dg_rp_arr(const cJSON *o, const char *path)
{
    const cJSON *n = dg_rp_get(o, path);
    return cJSON_IsArray(n) ? n : NULL;
}

const char *dg_rp_str(const cJSON *o, const char *path)
{
    return cJSON_GetStringValue(dg_rp_get(o, path));
}

bool dg_rp_true(const cJSON *o, const char *path)
{
    return cJSON_IsTrue(dg_rp_get(o, path));
}

/* dg_rp_num on a node itself. */
static bool rp_node_num(const cJSON *n, double *v)
{
    if (cJSON_IsObject(n)) {
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(n, "valid")))
            return false;
        n = cJSON_GetObjectItemCaseSensitive(n, "value");
    }
    if (!cJSON_IsNumber(n) || !isfinite(n->valuedouble))
        return false;
    *v = n->valuedouble;
    return true;
}

bool dg_rp_num(const cJSON *o, const char *path, double *v)
{
    return rp_node_num(dg_rp_get(o, path), v);
}

/* ---- numbers ------------------------------------------------------------ */

void dg_rp_fmt_num(char *buf, size_t len, double v, bool ok)
{
    if (!ok || !isfinite(v)) {
        snprintf(buf, len, "not reported");
        return;
    }
    double a = fabs(v);
    if (a == 0)
        snprintf(buf, len, "0");
    else if (a < 1e15 && v == floor(v))
        snprintf(buf, len, "%.0f", v); /* counts, batches, whole bytes */
    else if (a >= 10000)
        snprintf(buf, len, "%.0f", v);
    else if (a >= 100)
        snprintf(buf, len, "%.1f", v);
    else if (a >= 1)
        snprintf(buf, len, "%.2f", v);
    else if (a >= 0.01)
        snprintf(buf, len, "%.3f", v);
    else
        snprintf(buf, len, "%.2g", v);
}

void dg_rp_fmt_bytes(char *buf, size_t len, double v, bool ok)
{
    if (!ok || !isfinite(v)) {
        snprintf(buf, len, "not reported");
        return;
    }
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double a = fabs(v);
    int u = 0;
    while (a >= 1024 && u < 5) {
        a /= 1024;
        v /= 1024;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

/* A number with its unit (NULL: none), formatted for the unit. */
static void fmt_with_unit(char *buf, size_t len, bool ok, double v, const char *unit)
{
    if (!ok) {
        snprintf(buf, len, "not reported");
    } else if (unit && strcmp(unit, "bytes") == 0) {
        dg_rp_fmt_bytes(buf, len, v, true);
    } else if (unit && strcmp(unit, "fraction") == 0) {
        snprintf(buf, len, "%.1f%%", 100 * v);
    } else {
        dg_rp_fmt_num(buf, len, v, true);
        if (unit && unit[0]) {
            /* The unit is record text: keep it only when it is short and tame. */
            bool tame = strlen(unit) <= 16;
            for (const char *p = unit; tame && *p; p++)
                tame = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || strchr("/%", *p);
            size_t n = strlen(buf);
            if (tame)
                snprintf(buf + n, len > n ? len - n : 0, "%s%s",
                         strcmp(unit, "%") && strcmp(unit, "percent") ? " " : "",
                         strcmp(unit, "percent") ? unit : "%");
        }
    }
}

void dg_rp_fmt_metric(char *buf, size_t len, const cJSON *m)
{
    double v = 0;
    bool ok = rp_node_num(m, &v);
    const char *unit =
        cJSON_IsObject(m) ? cJSON_GetStringValue(cJSON_GetObjectItem(m, "unit")) : NULL;
    fmt_with_unit(buf, len, ok, v, unit);
}

void dg_rp_fmt_view_metric(char *buf, size_t len, dg_rec_metric m)
{
    fmt_with_unit(buf, len, m.valid && isfinite(m.value), m.value, m.metric ? m.unit : NULL);
}

void dg_rp_fmt_metric_at(char *buf, size_t len, const cJSON *o, const char *path)
{
    dg_rp_fmt_metric(buf, len, dg_rp_get(o, path));
}

void dg_rp_fmt_coord(char *buf, size_t len, double v)
{
    if (!isfinite(v) || fabs(v) > 1e7)
        v = 0;
    snprintf(buf, len, "%.1f", v);
}

/* ---- shared readings ---------------------------------------------------- */

const dg_view_finding **dg_rp_findings_sorted(const dg_record_view *v, int *n)
{
    *n = 0;
    if (v->nfindings <= 0)
        return NULL;
    const dg_view_finding **out = dg_malloc((size_t)v->nfindings * sizeof *out);
    if (!out)
        return NULL;
    int k = 0;
    for (int i = 0; i < v->nfindings; i++) {
        const dg_view_finding *f = &v->findings[i];
        if (!cJSON_IsObject(f->json))
            continue;
        /* Insertion sort keeps equal severities in record order. */
        int j = k;
        while (j > 0 && out[j - 1]->rank < f->rank) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = f;
        k++;
    }
    *n = k;
    return out;
}

const char *dg_rp_bucket_id(const cJSON *rec)
{
    static const char *const paths[] = {"bucket.id", "soak.bucket.id", "profile.bucket.id",
                                        "supervise.bucket.id", "compare.bucket.id"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        const char *s = dg_rp_str(rec, paths[i]);
        if (s && s[0])
            return s;
    }
    return NULL;
}

void dg_rp_head_facts(dg_capbuf *b, esc_mode mode, const dg_record_view *v,
                      const char *const mark[3][2])
{
    const char *bucket = dg_rp_bucket_id(v->rec);
    char shortid[13] = "";
    if (bucket)
        snprintf(shortid, sizeof shortid, "%s", bucket);
    const char *state = v->state && strcmp(v->state, "complete") != 0 ? v->state : NULL;
    const char *const facts[3] = {bucket ? shortid : NULL, v->label, state};
    for (int i = 0; i < 3; i++)
        dg_rp_opt(b, mode, mark[i][0], facts[i], mark[i][1]);
}

double dg_rp_mem_growth_pct(const dg_record_view *v)
{
    double x = dg_view_threshold_value(v, "mem_growth_pct");
    if (isfinite(x) && x > -100 && x < 1e6)
        return x;
    return 26;
}

const cJSON *dg_rp_supervise_command(const dg_record_view *v)
{
    return cJSON_GetArraySize(v->spec.cmd) > 0 ? v->spec.cmd : NULL;
}

void dg_rp_command(dg_capbuf *b, esc_mode mode, const cJSON *cmd)
{
    if (cJSON_IsString(cmd)) {
        dg_rp_esc(b, mode, cmd->valuestring, "");
        return;
    }
    const cJSON *a;
    bool first = true;
    cJSON_ArrayForEach(a, cmd)
    {
        const char *s = cJSON_IsString(a) ? a->valuestring : "?";
        bool quote = !s[0] || strpbrk(s, " \t'\"") != NULL;
        dg_rp_put(b, first ? "" : " ");
        dg_rp_put(b, quote ? "'" : "");
        dg_rp_esc(b, mode, s, "");
        dg_rp_put(b, quote ? "'" : "");
        first = false;
    }
}

const char *dg_rp_unfair_note(const dg_record_view *v)
{
    for (int i = 0; i < v->nfindings; i++)
        if (v->findings[i].id && !strcmp(v->findings[i].id, "cpu-baseline-unfair"))
            return " (an upper bound: the cpu baseline ran below its cores, "
                   "cpu-baseline-unfair)";
    return "";
}

bool dg_rp_loss_check(char *buf, size_t len, const cJSON *run)
{
    const cJSON *l = dg_rp_obj(run, "loss");
    buf[0] = '\0';
    if (!l)
        return false;
    const cJSON *agree = dg_rp_get(l, "agree");
    double n = 0, rel = NAN, tol = NAN, ep, st;
    dg_rp_num(l, "pairs", &n);
    dg_rp_num(l, "max_rel_diff", &rel);
    dg_rp_num(l, "tolerance", &tol);
    char where[64] = "";
    if (dg_rp_num(l, "worst.epoch", &ep) && dg_rp_num(l, "worst.step", &st))
        snprintf(where, sizeof where, "at epoch %.0f step %.0f; ", ep, st);
    if (cJSON_IsTrue(agree))
        snprintf(buf, len,
                 "loss agrees with the cpu over %.0f steps (max relative difference %.2g, "
                 "tolerance %g)",
                 n, rel, tol);
    else if (cJSON_IsFalse(agree))
        snprintf(buf, len, "loss DRIFTS from the cpu's by %.2g over %.0f steps (%stolerance %g)",
                 rel, n, where, tol);
    else
        snprintf(buf, len, "loss not compared: %s",
                 dg_rp_str(l, "why") ? dg_rp_str(l, "why") : "not reported");
    return true;
}

void dg_rp_decision(dg_capbuf *b, esc_mode mode, const dg_view_decision *d, const char *none,
                    void (*other)(dg_capbuf *b, const cJSON *reason))
{
    if (!d->present) {
        dg_rp_put(b, none);
        return;
    }
    dg_rp_esc(b, mode, d->route, "?");
    if (d->backend) {
        dg_rp_put(b, " (");
        dg_rp_esc(b, mode, d->backend, "");
        dg_rp_put(b, ")");
    }
    const cJSON *r;
    bool first = true;
    cJSON_ArrayForEach(r, d->reasons)
    {
        if (!cJSON_IsString(r) && !other)
            continue;
        dg_rp_put(b, first ? " — " : "; ");
        if (cJSON_IsString(r))
            dg_rp_prose(b, mode, r->valuestring, "");
        else
            other(b, r);
        first = false;
    }
}

bool dg_rp_launch(dg_capbuf *b, esc_mode mode, const cJSON *rec)
{
    const cJSON *l = dg_rp_obj(rec, "launch");
    double forked, plain;
    if (!l || !dg_rp_num(l, "forked", &forked) || !dg_rp_num(l, "plain", &plain))
        return false;
    const char *why = dg_rp_str(l, "why");
    if (forked > 0) {
        dg_rp_printf(b, "forked from one fork server: %.0f of %.0f runs (python ", forked,
                     forked + plain);
        dg_rp_esc(b, mode, dg_rp_str(l, "server.version"), "?");
        const cJSON *m;
        int k = 0;
        cJSON_ArrayForEach(m, dg_rp_arr(l, "server.imported"))
        {
            if (!cJSON_IsString(m) || strchr(m->valuestring, '.'))
                continue;
            dg_rp_put(b, k++ ? ", " : "; ");
            if (k > 6) {
                dg_rp_put(b, "…");
                break;
            }
            dg_rp_esc(b, mode, m->valuestring, "");
        }
        double s;
        if (k && dg_rp_num(l, "server.import_s", &s))
            dg_rp_printf(b, " imported once in %.1f s", s);
        dg_rp_put(b, ")");
        if (plain > 0) {
            dg_rp_printf(b, "; %.0f in a fresh interpreter", plain);
            if (why) {
                dg_rp_put(b, ": ");
                dg_rp_prose(b, mode, why, "");
            }
        }
        return true;
    }
    dg_rp_put(b, "fresh interpreters");
    if (why) {
        dg_rp_put(b, ": ");
        dg_rp_prose(b, mode, why, "");
    }
    return true;
}
