/* The SVG primitives the page's charts share (svg_draw.c): a plot area's
 * mapping, coordinates, lines, text, axes and legends. Every coordinate goes
 * through dg_rp_fmt_coord, so no NaN or infinity reaches the markup. */
#ifndef DG_REPORT_SVG_DRAW_H
#define DG_REPORT_SVG_DRAW_H

#include "report/shared.h"

/* The charts' colours: samples/s, memory, failures, the knee, the safe batch. */
#define C_SPS "#0969da"
#define C_MEM "#bc4c00"
#define C_FAIL "#cf222e"
#define C_KNEE "#1a7f37"
#define C_SAFE "#8250df"

/* A plot area: data ranges mapped into a viewBox with margins. */
typedef struct plot {
    double w, h;           /* viewBox */
    double ml, mr, mt, mb; /* margins */
    double x0, x1, y0, y1; /* data range (x already transformed) */
    double r0, r1;         /* right axis range (r1 > r0 when used) */
} plot;

/* A y-axis label writer. */
typedef void (*label_fn)(char *buf, size_t len, double v);

/* Data x, y (left axis) and y (right axis) to viewBox coordinates. */
double dg_svg_px(const plot *p, double x);
double dg_svg_py(const plot *p, double y);
double dg_svg_pr(const plot *p, double y);
/* Appends one coordinate. */
void dg_svg_co(dg_capbuf *b, double v);
/* Appends ` name="v"` with a coordinate value. */
void dg_svg_attr(dg_capbuf *b, const char *name, double v);
/* Opens an <svg> of viewBox w x h titled title (trusted); dg_svg_close ends it. */
void dg_svg_open(dg_capbuf *b, double w, double h, const char *title);
void dg_svg_close(dg_capbuf *b);
/* A line from (x1, y1) to (x2, y2) with style (trusted attributes). */
void dg_svg_line(dg_capbuf *b, double x1, double y1, double x2, double y2, const char *style);
/* Text at (x, y); s is trusted when esc is false, a record string otherwise. */
void dg_svg_text(dg_capbuf *b, double x, double y, const char *anchor, const char *style,
                 const char *s, bool esc);
/* 1, 2 or 5 times a power of ten, about range / n. */
double dg_svg_nice_step(double range, int n);
/* A step for a byte axis: a 1-2-5 multiple of the binary unit that fits. */
double dg_svg_bytes_step(double range, int n);
/* Compact axis label: 2.1k, 1.5M, 0.25. */
void dg_svg_short_num(char *buf, size_t len, double v);
/* Axis labels in bytes ("512 MiB") and percent ("40%"). */
void dg_svg_bytes_label(char *buf, size_t len, double v);
void dg_svg_pct_label(char *buf, size_t len, double v);
/* Horizontal grid and labels of the left axis (and the right one when used). */
void dg_svg_y_axis(dg_capbuf *b, const plot *p, label_fn left, label_fn right);
/* A legend entry at (x, y): a short line or marker in colour, then the text. */
double dg_svg_legend(dg_capbuf *b, double x, double y, const char *color, const char *dash,
                     const char *s);
#endif
