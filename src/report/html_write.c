/* The HTML writers the page's files share (html_write.h): escaped values,
 * key/value rows, tables, sections and any JSON value as nested tables. */
#include "report/html_write.h"

#include <math.h>
#include <string.h>

/* ---- small writers -------------------------------------------------------- */

void rp_h_esc(dg_capbuf *b, const char *s, const char *fallback)
{
    rp_esc(b, ESC_HTML, s, fallback);
}

/* A formatted value: "not reported" is shown muted. */
void rp_h_val(dg_capbuf *b, const char *v)
{
    bool na = strcmp(v, "not reported") == 0;
    rp_put(b, na ? "<span class=\"na\">" : "");
    rp_h_esc(b, v, "");
    rp_put(b, na ? "</span>" : "");
}

void rp_h_metric(dg_capbuf *b, const cJSON *o, const char *path)
{
    char v[64];
    rp_fmt_metric_at(v, sizeof v, o, path);
    rp_h_val(b, v);
}

void rp_h_view_metric(dg_capbuf *b, dg_rec_metric m)
{
    char v[64];
    rp_fmt_view_metric(v, sizeof v, m);
    rp_h_val(b, v);
}

/* A JSON scalar as text: strings escaped, numbers short, metrics with unit. */
void rp_h_scalar(dg_capbuf *b, const cJSON *n)
{
    char v[64];
    if (cJSON_IsString(n)) {
        rp_h_esc(b, n->valuestring, "");
    } else if (cJSON_IsBool(n)) {
        rp_put(b, cJSON_IsTrue(n) ? "yes" : "no");
    } else if (cJSON_IsNumber(n)) {
        rp_fmt_num(v, sizeof v, n->valuedouble, isfinite(n->valuedouble));
        if (fabs(n->valuedouble) >= 1000 && fabs(n->valuedouble) < 1e15 &&
            n->valuedouble == floor(n->valuedouble))
            snprintf(v, sizeof v, "%.0f", n->valuedouble);
        rp_h_val(b, v);
    } else if (cJSON_IsObject(n) && cJSON_GetObjectItem(n, "valid")) {
        rp_fmt_metric(v, sizeof v, n);
        rp_h_val(b, v);
    } else {
        rp_put(b, "<span class=\"na\">not reported</span>");
    }
}

/* <tr><th>key</th><td>...: the caller writes the cell and calls rp_kv_end. */
void rp_kv_begin(dg_capbuf *b, const char *key)
{
    rp_put(b, "<tr><th>");
    rp_put(b, key);
    rp_put(b, "</th><td>");
}

void rp_kv_end(dg_capbuf *b)
{
    rp_put(b, "</td></tr>\n");
}

void rp_kv_str(dg_capbuf *b, const char *key, const char *s)
{
    rp_kv_begin(b, key);
    if (s)
        rp_h_esc(b, s, "");
    else
        rp_put(b, "<span class=\"na\">not reported</span>");
    rp_kv_end(b);
}

void rp_kv_metric(dg_capbuf *b, const char *key, const cJSON *o, const char *path)
{
    rp_kv_begin(b, key);
    rp_h_scalar(b, rp_get(o, path));
    rp_kv_end(b);
}

/* Strings of an array joined by sep, escaped; "none" when empty. */
void rp_h_join(dg_capbuf *b, const cJSON *arr, const char *sep)
{
    const cJSON *a;
    bool first = true;
    cJSON_ArrayForEach(a, arr)
    {
        rp_put(b, first ? "" : sep);
        rp_h_scalar(b, a);
        first = false;
    }
    if (first)
        rp_put(b, "<span class=\"na\">none</span>");
}

void rp_table_open(dg_capbuf *b, const char *head)
{
    rp_put(b, "<div class=\"scroll\"><table>");
    if (head)
        rp_put(b, head);
    rp_put(b, "\n");
}

void rp_table_close(dg_capbuf *b)
{
    rp_put(b, "</table></div>\n");
}

/* Any JSON value as nested key/value tables (depth-limited): used for
 * sections whose shape devgate does not know in detail (supervise). */
void rp_h_generic(dg_capbuf *b, const cJSON *n, int depth)
{
    if (cJSON_IsArray(n)) {
        int count = cJSON_GetArraySize(n);
        const cJSON *first = cJSON_GetArrayItem(n, 0);
        if (count == 0 || !(cJSON_IsObject(first) || cJSON_IsArray(first)) || depth <= 0) {
            if (count > 0 && (cJSON_IsObject(first) || cJSON_IsArray(first)))
                rp_printf(b, "%d items", count);
            else
                rp_h_join(b, n, ", ");
            return;
        }
        int shown = 0;
        const cJSON *a;
        cJSON_ArrayForEach(a, n)
        {
            if (shown++ == 20) {
                rp_printf(b, "<p class=\"note\">%d more</p>", count - 20);
                break;
            }
            rp_h_generic(b, a, depth - 1);
        }
        return;
    }
    if (!cJSON_IsObject(n) || cJSON_GetObjectItem(n, "valid")) {
        rp_h_scalar(b, n);
        return;
    }
    if (depth <= 0) {
        rp_printf(b, "%d fields", cJSON_GetArraySize(n));
        return;
    }
    rp_table_open(b, NULL);
    const cJSON *f;
    cJSON_ArrayForEach(f, n)
    {
        rp_put(b, "<tr><th>");
        rp_h_esc(b, f->string, "");
        rp_put(b, "</th><td>");
        rp_h_generic(b, f, depth - 1);
        rp_put(b, "</td></tr>\n");
    }
    rp_table_close(b);
}

/* Opens a section with its id and heading (trusted text). */
void rp_section_open(dg_capbuf *b, const char *id, const char *title)
{
    rp_printf(b, "<section id=\"%s\"><h2>%s</h2>\n", id, title);
}

void rp_section_absent(dg_capbuf *b, const char *what)
{
    rp_printf(b, "<p class=\"na\">No %s in this record.</p>\n", what);
}
