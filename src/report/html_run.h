/* The run page's charts (html_run.c): every series devgate run sampled, drawn
 * by html.c after the supervised run section. */
#ifndef DG_REPORT_HTML_RUN_H
#define DG_REPORT_HTML_RUN_H

#include "report/shared.h"

/* A chart per sampled series of a run record (process-tree RSS, CPU, threads
 * and processes, swap, GPU memory and utilisation, the probe's per-epoch
 * memory), "not reported" with the reason for a series without a valid
 * point; nothing for a record without a supervise section. */
void dg_rp_sec_run_series(dg_capbuf *b, const dg_record_view *v);

#endif
