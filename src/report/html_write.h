/* The HTML writers (html_write.c) shared by html.c (page, verdict, findings,
 * measurement sections), html_env.c (environment, gate log, bucket, seeds,
 * versions) and svg.c (the charts). Record strings go through dg_rp_h_esc. */
#ifndef DG_REPORT_HTML_WRITE_H
#define DG_REPORT_HTML_WRITE_H

#include "report/shared.h"

/* A record string, HTML-escaped; fallback (trusted) when s is NULL. */
void dg_rp_h_esc(dg_capbuf *b, const char *s, const char *fallback);
/* A formatted value; "not reported" is shown muted. */
void dg_rp_h_val(dg_capbuf *b, const char *v);
/* The metric (or number) at path, formatted for its unit. */
void dg_rp_h_metric(dg_capbuf *b, const cJSON *o, const char *path);
/* A typed view's metric, formatted for its unit (dg_rp_fmt_view_metric). */
void dg_rp_h_view_metric(dg_capbuf *b, dg_rec_metric m);
/* Writes fmt, trusted markup, with its conversions: %M a typed view's metric
 * (dg_rec_metric, as dg_rp_h_view_metric), %P the metric at a path (const
 * cJSON *, const char *path: dg_rp_h_metric), %S a record string and its
 * fallback (const char *, const char *: dg_rp_h_esc), %% a percent sign. */
void dg_rp_h_fmt(dg_capbuf *b, const char *fmt, ...);
/* A JSON scalar or metric as text. */
void dg_rp_h_scalar(dg_capbuf *b, const cJSON *n);
/* Scalars of an array joined by sep (trusted); "none" when empty. */
void dg_rp_h_join(dg_capbuf *b, const cJSON *arr, const char *sep);
/* Any JSON value as nested tables, at most depth levels. */
void dg_rp_h_generic(dg_capbuf *b, const cJSON *n, int depth);

/* Key/value rows: key is trusted text. */
void dg_rp_kv_begin(dg_capbuf *b, const char *key);
/* A row whose key is a record string: open (trusted markup up to the key),
 * the key escaped ("?" when NULL), then sep (trusted markup up to the cell).
 * The caller writes the cell and calls dg_rp_kv_end. */
void dg_rp_row_begin(dg_capbuf *b, const char *open, const char *key, const char *sep);
void dg_rp_kv_end(dg_capbuf *b);
void dg_rp_kv_str(dg_capbuf *b, const char *key, const char *s);
void dg_rp_kv_metric(dg_capbuf *b, const char *key, const cJSON *o, const char *path);

/* A table in a horizontally scrolling wrapper; head is trusted markup or NULL. */
void dg_rp_table_open(dg_capbuf *b, const char *head);
void dg_rp_table_close(dg_capbuf *b);
/* <section id><h2>title: both trusted. */
void dg_rp_section_open(dg_capbuf *b, const char *id, const char *title);
/* Opens the section (id, title trusted); when present is false writes "No
 * WHAT in this record." (what trusted) and closes it again. present. */
bool dg_rp_section(dg_capbuf *b, const char *id, const char *title, bool present, const char *what);
/* "No WHAT in this record." */
void dg_rp_section_absent(dg_capbuf *b, const char *what);

#endif
