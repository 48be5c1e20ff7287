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

/* ---- a verb's own record (verb.c) ---- */

/* Whether v is a verb's own record (gate, train, soak, ...), not accept's or run's. */
bool dg_rp_verb_record(const dg_record_view *v);
/* One line of what the verb's record shows (plain text; "" when nothing). */
void dg_rp_verb_summary(char *buf, size_t len, const dg_record_view *v);
/* The record's own verdict ("pass", ...) or else its status; NULL when neither. */
const char *dg_rp_verb_verdict(const dg_record_view *v);

#endif
