/* The SVG primitives of the page's charts (svg_draw.h). */
#include "report/svg_draw.h"
#include "report/html_write.h"

#include <math.h>
#include <string.h>

double dg_svg_px(const plot *p, double x)
{
    return p->ml + (x - p->x0) / (p->x1 - p->x0) * (p->w - p->ml - p->mr);
}

double dg_svg_py(const plot *p, double y)
{
    return p->h - p->mb - (y - p->y0) / (p->y1 - p->y0) * (p->h - p->mt - p->mb);
}

double dg_svg_pr(const plot *p, double y)
{
    return p->h - p->mb - (y - p->r0) / (p->r1 - p->r0) * (p->h - p->mt - p->mb);
}

/* Appends one coordinate. */
void dg_svg_co(dg_capbuf *b, double v)
{
    char buf[32];
    dg_rp_fmt_coord(buf, sizeof buf, v);
    dg_rp_put(b, buf);
}

/* Appends ` name="v"` with a coordinate value. */
void dg_svg_attr(dg_capbuf *b, const char *name, double v)
{
    dg_rp_printf(b, " %s=\"", name);
    dg_svg_co(b, v);
    dg_rp_put(b, "\"");
}

void dg_svg_open(dg_capbuf *b, double w, double h, const char *title)
{
    dg_rp_put(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 ");
    dg_svg_co(b, w);
    dg_rp_put(b, " ");
    dg_svg_co(b, h);
    dg_rp_printf(b, "\" width=\"100%%\" role=\"img\" aria-label=\"%s\"><title>%s</title>\n", title,
                 title);
}

void dg_svg_close(dg_capbuf *b)
{
    dg_rp_put(b, "</svg>\n");
}

void dg_svg_line(dg_capbuf *b, double x1, double y1, double x2, double y2, const char *style)
{
    dg_rp_put(b, "<line");
    dg_svg_attr(b, "x1", x1);
    dg_svg_attr(b, "y1", y1);
    dg_svg_attr(b, "x2", x2);
    dg_svg_attr(b, "y2", y2);
    dg_rp_printf(b, " %s/>\n", style);
}

/* Text at (x, y); s is trusted when esc is false, a record string otherwise. */
void dg_svg_text(dg_capbuf *b, double x, double y, const char *anchor, const char *style,
                 const char *s, bool esc)
{
    dg_rp_put(b, "<text");
    dg_svg_attr(b, "x", x);
    dg_svg_attr(b, "y", y);
    dg_rp_printf(b, " text-anchor=\"%s\" %s>", anchor, style ? style : "");
    if (esc)
        dg_rp_h_esc(b, s, "");
    else
        dg_rp_put(b, s);
    dg_rp_put(b, "</text>\n");
}

/* 1, 2 or 5 times a power of ten, about range / n. */
double dg_svg_nice_step(double range, int n)
{
    if (!(range > 0) || !isfinite(range))
        return 1;
    double raw = range / n, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

/* A step for a byte axis: a 1-2-5 multiple of the binary unit that fits. */
double dg_svg_bytes_step(double range, int n)
{
    double unit = 1;
    while (range / unit >= 1024 && unit < 1e18)
        unit *= 1024;
    return dg_svg_nice_step(range / unit, n) * unit;
}

/* Compact axis label: 2.1k, 1.5M, 0.25. */
void dg_svg_short_num(char *buf, size_t len, double v)
{
    double a = fabs(v);
    if (a >= 1e6)
        snprintf(buf, len, "%.3gM", v / 1e6);
    else if (a >= 1e3)
        snprintf(buf, len, "%.3gk", v / 1e3);
    else
        snprintf(buf, len, "%.3g", v);
}

void dg_svg_bytes_label(char *buf, size_t len, double v)
{
    dg_rp_fmt_bytes(buf, len, v, true);
}

void dg_svg_pct_label(char *buf, size_t len, double v)
{
    snprintf(buf, len, "%.0f%%", v);
}

/* Horizontal grid and labels of the left axis (and the right one when used). */
void dg_svg_y_axis(dg_capbuf *b, const plot *p, label_fn left, label_fn right)
{
    double step = dg_svg_nice_step(p->y1 - p->y0, 5);
    if (!((p->y1 - p->y0) / step <= 50) ||
        !((p->r1 - p->r0) / dg_svg_bytes_step(p->r1 - p->r0, 5) <= 50))
        return; /* a range no axis can label (never with finite, sane data) */
    for (double v = ceil(p->y0 / step) * step; v <= p->y1 + step * 1e-9; v += step) {
        char lab[32];
        left(lab, sizeof lab, v);
        dg_svg_line(b, p->ml, dg_svg_py(p, v), p->w - p->mr, dg_svg_py(p, v), "class=\"grid\"");
        dg_svg_text(b, p->ml - 4, dg_svg_py(p, v) + 4, "end", NULL, lab, false);
    }
    if (right && p->r1 > p->r0) {
        double rs = dg_svg_bytes_step(p->r1 - p->r0, 5);
        for (double v = ceil(p->r0 / rs) * rs; v <= p->r1 + rs * 1e-9; v += rs) {
            char lab[32];
            right(lab, sizeof lab, v);
            dg_svg_text(b, p->w - p->mr + 4, dg_svg_pr(p, v) + 4, "start", "fill=\"" C_MEM "\"",
                        lab, false);
        }
    }
    dg_svg_line(b, p->ml, p->mt, p->ml, p->h - p->mb, "class=\"ax\"");
    dg_svg_line(b, p->ml, p->h - p->mb, p->w - p->mr, p->h - p->mb, "class=\"ax\"");
}

/* A legend entry at (x, y): a short line or marker in colour, then the text. */
double dg_svg_legend(dg_capbuf *b, double x, double y, const char *color, const char *dash,
                     const char *s)
{
    dg_rp_put(b, "<line");
    dg_svg_attr(b, "x1", x);
    dg_svg_attr(b, "y1", y - 4);
    dg_svg_attr(b, "x2", x + 16);
    dg_svg_attr(b, "y2", y - 4);
    dg_rp_printf(b, " stroke=\"%s\" stroke-width=\"2\"%s/>\n", color, dash ? dash : "");
    dg_svg_text(b, x + 20, y, "start", NULL, s, false);
    return x + 28 + 6.2 * (double)strlen(s);
}
