/* The page's inline SVG charts (svg.c), drawn by html.c. */
#ifndef DG_REPORT_SVG_H
#define DG_REPORT_SVG_H

#include "report/shared.h"

/* Each chart skips points that are not valid numbers. */

/* Samples/s and memory against batch, knee and safe batch, failed trials. */
void rp_svg_sweep(dg_capbuf *b, const dg_view_sweep *sweep);
/* The soak section's per-epoch watermarks in percent of the baseline (from
 * payload, the soak analysis: v1 soak.soak, v2 the section itself), with
 * the line at baseline + threshold_pct (the rules' mem_growth_pct). */
void rp_svg_memory(dg_capbuf *b, double threshold_pct, const cJSON *soak, const cJSON *payload);
/* cpu against the device per batch: step time and throughput bars. */
void rp_svg_baseline(dg_capbuf *b, const dg_view_compare *compare);
/* The unprofiled pass's phases as bars. */
void rp_svg_phases(dg_capbuf *b, const dg_view_profile *profile);

#endif
