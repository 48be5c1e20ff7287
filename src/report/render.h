/* The formats dg_report_render dispatches to (report.c): each writes one
 * checked evidence record (an object of kind accept or run, version 1),
 * read through its typed view built once (core/record.h; v->rec is the
 * parsed record), into b; out of memory and the size cap are left on b. */
#ifndef DG_REPORT_RENDER_H
#define DG_REPORT_RENDER_H

#include "report/shared.h"

/* The self-contained page (html.c, with html_env.c and svg.c). */
void dg_rp_render_html(dg_capbuf *b, const dg_record_view *v);
/* Markdown for a merge request (md.c). */
void dg_rp_render_md(dg_capbuf *b, const dg_record_view *v);
/* The terminal summary (text.c). */
void dg_rp_render_text(dg_capbuf *b, const dg_record_view *v);

#endif
