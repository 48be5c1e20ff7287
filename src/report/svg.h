/* The page's inline SVG charts (svg.c), drawn by html.c. */
#ifndef DG_REPORT_SVG_H
#define DG_REPORT_SVG_H

#include "report/shared.h"

/* Each chart skips points that are not valid numbers. */

/* Samples/s and memory against batch, knee and safe batch, failed trials. */
void dg_rp_svg_sweep(dg_capbuf *b, const dg_view_sweep *sweep);
/* The soak's per-epoch watermarks in percent of the baseline (the soak
 * analysis's, else the first epoch's), with the line at baseline +
 * threshold_pct (the rules' mem_growth_pct). */
void dg_rp_svg_memory(dg_capbuf *b, double threshold_pct, const dg_view_soak *soak);
/* cpu against the device per batch: step time and throughput bars. */
void dg_rp_svg_baseline(dg_capbuf *b, const dg_view_compare *compare);
/* The unprofiled pass's phases as bars. */
void dg_rp_svg_phases(dg_capbuf *b, const dg_view_profile *profile);

/* The y axis of a line chart: its labels and steps follow the unit. */
typedef enum rp_svg_unit { RP_UNIT_BYTES, RP_UNIT_PERCENT, RP_UNIT_COUNT } rp_svg_unit;
/* A line chart over an array of points (the run page's sampled series, the
 * probe's epochs): all strings trusted. */
typedef struct rp_svg_chart {
    const char *title;         /* aria label and <title> */
    const char *xkey, *xlabel; /* the member read as x, the x axis label (with its unit) */
    const char *ylabel;        /* the y axis label, with its unit */
    rp_svg_unit unit;          /* the y axis */
    bool x_integer;            /* x ticks at whole numbers only (epochs) */
    double ref;                /* a dashed reference line at this y (NAN: none) */
    const char *ref_label;     /* its label */
} rp_svg_chart;
typedef struct rp_svg_line {
    const char *key, *name, *color; /* the member read as y, its legend text, its colour */
    bool dashed;
} rp_svg_line;
/* Each line's member of every point against the chart's x; a point whose x or
 * y is not a finite number breaks that line. Returns the number of lines that
 * had a point; writes nothing when none had (the caller says "not reported"). */
int dg_rp_svg_lines(dg_capbuf *b, const rp_svg_chart *c, const cJSON *pts, const rp_svg_line *lines,
                    int nlines);

#endif
