/* The slo record's page (html_slo.c), drawn by html.c for a record of kind slo. */
#ifndef DG_REPORT_HTML_SLO_H
#define DG_REPORT_HTML_SLO_H

#include "report/shared.h"

/* The statement, the ladder (table and chart of each percentile against the
 * concurrency), the latency distribution of the signed level (or the last
 * one) and the training measured beside serving; nothing for another kind. */
void dg_rp_sec_slo(dg_capbuf *b, const dg_record_view *v);

#endif
