/* The HTML writers the page's files share (html_write.h): escaped values,
 * key/value rows, tables, sections and any JSON value as nested tables. */
#include "report/html_write.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

/* ---- small writers -------------------------------------------------------- */

void dg_rp_h_esc(dg_capbuf *b, const char *s, const char *fallback)
{
    dg_rp_esc(b, ESC_HTML, s, fallback);
}

/* A formatted value: "not reported" is shown muted. */
void dg_rp_h_val(dg_capbuf *b, const char *v)
{
    bool na = strcmp(v, "not reported") == 0;
    dg_rp_put(b, na ? "<span class=\"na\">" : "");
    dg_rp_h_esc(b, v, "");
    dg_rp_put(b, na ? "</span>" : "");
}

void dg_rp_h_metric(dg_capbuf *b, const cJSON *o, const char *path)
{
    char v[64];
    dg_rp_fmt_metric_at(v, sizeof v, o, path);
    dg_rp_h_val(b, v);
}

void dg_rp_h_view_metric(dg_capbuf *b, dg_rec_metric m)
{
    char v[64];
    dg_rp_fmt_view_metric(v, sizeof v, m);
    dg_rp_h_val(b, v);
}

/* dg_rp_h_fmt's own conversions: %M and %P. */
static void h_conv(dg_capbuf *b, char c, va_list *ap)
{
    if (c == 'M') {
        dg_rp_h_view_metric(b, va_arg(*ap, dg_rec_metric));
    } else if (c == 'P') {
        const cJSON *o = va_arg(*ap, const cJSON *);
        dg_rp_h_metric(b, o, va_arg(*ap, const char *));
    } else {
        dg_capbuf_add(b, &c, 1);
    }
}

void dg_rp_h_fmt(dg_capbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dg_rp_vfmt(b, ESC_HTML, h_conv, fmt, &ap);
    va_end(ap);
}

/* A JSON scalar as text: strings escaped, numbers short, metrics with unit. */
void dg_rp_h_scalar(dg_capbuf *b, const cJSON *n)
{
    char v[64];
    if (cJSON_IsString(n)) {
        dg_rp_h_esc(b, n->valuestring, "");
    } else if (cJSON_IsBool(n)) {
        dg_rp_put(b, cJSON_IsTrue(n) ? "yes" : "no");
    } else if (cJSON_IsNumber(n)) {
        dg_rp_fmt_num(v, sizeof v, n->valuedouble, isfinite(n->valuedouble));
        if (fabs(n->valuedouble) >= 1000 && fabs(n->valuedouble) < 1e15 &&
            n->valuedouble == floor(n->valuedouble))
            snprintf(v, sizeof v, "%.0f", n->valuedouble);
        dg_rp_h_val(b, v);
    } else if (cJSON_IsObject(n) && cJSON_GetObjectItem(n, "valid")) {
        dg_rp_fmt_metric(v, sizeof v, n);
        dg_rp_h_val(b, v);
    } else {
        dg_rp_put(b, "<span class=\"na\">not reported</span>");
    }
}

/* <tr><th>key</th><td>...: the caller writes the cell and calls dg_rp_kv_end. */
void dg_rp_kv_begin(dg_capbuf *b, const char *key)
{
    dg_rp_put(b, "<tr><th>");
    dg_rp_put(b, key);
    dg_rp_put(b, "</th><td>");
}

void dg_rp_row_begin(dg_capbuf *b, const char *open, const char *key, const char *sep)
{
    dg_rp_put(b, open);
    dg_rp_h_esc(b, key, "?");
    dg_rp_put(b, sep);
}

void dg_rp_kv_end(dg_capbuf *b)
{
    dg_rp_put(b, "</td></tr>\n");
}

void dg_rp_kv_str(dg_capbuf *b, const char *key, const char *s)
{
    dg_rp_kv_begin(b, key);
    if (s)
        dg_rp_h_esc(b, s, "");
    else
        dg_rp_put(b, "<span class=\"na\">not reported</span>");
    dg_rp_kv_end(b);
}

void dg_rp_kv_metric(dg_capbuf *b, const char *key, const cJSON *o, const char *path)
{
    dg_rp_kv_begin(b, key);
    dg_rp_h_scalar(b, dg_rp_get(o, path));
    dg_rp_kv_end(b);
}

/* Strings of an array joined by sep, escaped; "none" when empty. */
void dg_rp_h_join(dg_capbuf *b, const cJSON *arr, const char *sep)
{
    const cJSON *a;
    bool first = true;
    cJSON_ArrayForEach(a, arr)
    {
        dg_rp_put(b, first ? "" : sep);
        dg_rp_h_scalar(b, a);
        first = false;
    }
    if (first)
        dg_rp_put(b, "<span class=\"na\">none</span>");
}

void dg_rp_table_open(dg_capbuf *b, const char *head)
{
    dg_rp_put(b, "<div class=\"scroll\"><table>");
    if (head)
        dg_rp_put(b, head);
    dg_rp_put(b, "\n");
}

void dg_rp_table_close(dg_capbuf *b)
{
    dg_rp_put(b, "</table></div>\n");
}

/* Any JSON value as nested key/value tables (depth-limited): used for
 * sections whose shape devgate does not know in detail (supervise). */
void dg_rp_h_generic(dg_capbuf *b, const cJSON *n, int depth)
{
    if (cJSON_IsArray(n)) {
        int count = cJSON_GetArraySize(n);
        const cJSON *first = cJSON_GetArrayItem(n, 0);
        if (count == 0 || !(cJSON_IsObject(first) || cJSON_IsArray(first)) || depth <= 0) {
            if (count > 0 && (cJSON_IsObject(first) || cJSON_IsArray(first)))
                dg_rp_printf(b, "%d items", count);
            else
                dg_rp_h_join(b, n, ", ");
            return;
        }
        int shown = 0;
        const cJSON *a;
        cJSON_ArrayForEach(a, n)
        {
            if (shown++ == 20) {
                dg_rp_printf(b, "<p class=\"note\">%d more</p>", count - 20);
                break;
            }
            dg_rp_h_generic(b, a, depth - 1);
        }
        return;
    }
    if (!cJSON_IsObject(n) || cJSON_GetObjectItem(n, "valid")) {
        dg_rp_h_scalar(b, n);
        return;
    }
    if (depth <= 0) {
        dg_rp_printf(b, "%d fields", cJSON_GetArraySize(n));
        return;
    }
    dg_rp_table_open(b, NULL);
    const cJSON *f;
    cJSON_ArrayForEach(f, n)
    {
        dg_rp_row_begin(b, "<tr><th>", f->string, "</th><td>");
        dg_rp_h_generic(b, f, depth - 1);
        dg_rp_kv_end(b);
    }
    dg_rp_table_close(b);
}

/* Opens a section with its id and heading (trusted text). */
void dg_rp_section_open(dg_capbuf *b, const char *id, const char *title)
{
    dg_rp_printf(b, "<section id=\"%s\"><h2>%s</h2>\n", id, title);
}

bool dg_rp_section(dg_capbuf *b, const char *id, const char *title, bool present, const char *what)
{
    dg_rp_section_open(b, id, title);
    if (!present) {
        dg_rp_section_absent(b, what);
        dg_rp_put(b, "</section>\n");
    }
    return present;
}

void dg_rp_section_absent(dg_capbuf *b, const char *what)
{
    dg_rp_printf(b, "<p class=\"na\">No %s in this record.</p>\n", what);
}
