/* Inline SVG charts of the report page: batch sweep, memory curve, cpu against
 * device bars, profile phases. Every coordinate goes through dg_rp_fmt_coord and
 * every point whose value is not a valid finite number is skipped, so no
 * NaN or infinity ever reaches the markup. Labels from the record are escaped. */
#include "report/svg.h"
#include "report/html_write.h"
#include "report/svg_draw.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- batch sweep ----------------------------------------------------------------- */

typedef struct trial_pt {
    double batch, lx, sps, mem;
    bool ok, has_sps, has_mem;
    const dg_view_trial *t;
} trial_pt;

static int trial_cmp(const void *a, const void *b)
{
    const trial_pt *x = a, *y = b;
    return (x->batch > y->batch) - (x->batch < y->batch);
}

/* The memory figures the sweep chart can draw, in order of preference. */
typedef enum sweep_mem { MEM_RESERVED, MEM_ALLOCATED, MEM_RSS, MEM_NONE } sweep_mem;

static dg_rec_metric trial_mem(const dg_view_trial *t, sweep_mem k)
{
    return k == MEM_RESERVED    ? t->device_reserved_peak
           : k == MEM_ALLOCATED ? t->device_allocated_peak
                                : t->rss_peak;
}

/* The memory figure the sweep chart draws: the first the trials report. */
static sweep_mem sweep_mem_key(const dg_view_sweep *sw, const char **label)
{
    static const char *const labels[] = {"device reserved peak", "device allocated peak",
                                         "process RSS peak"};
    for (int k = 0; k < MEM_NONE; k++) {
        for (int i = 0; i < sw->ntrials + sw->nbisect; i++) {
            const dg_view_trial *t =
                i < sw->ntrials ? &sw->trials[i] : &sw->bisect[i - sw->ntrials];
            if (trial_mem(t, (sweep_mem)k).valid) {
                *label = labels[k];
                return (sweep_mem)k;
            }
        }
    }
    *label = NULL;
    return MEM_NONE;
}

/* Collects the doubling and bisection trials with a positive batch, sorted by batch. */
static int sweep_points(const dg_view_sweep *sw, sweep_mem memkey, trial_pt **out)
{
    int cap = sw->ntrials + sw->nbisect;
    *out = NULL;
    if (cap <= 0)
        return 0;
    trial_pt *v = dg_calloc((size_t)cap, sizeof *v);
    if (!v)
        return 0;
    int n = 0;
    for (int i = 0; i < cap; i++) {
        const dg_view_trial *t = i < sw->ntrials ? &sw->trials[i] : &sw->bisect[i - sw->ntrials];
        trial_pt p = {.t = t};
        if (!t->batch.valid || !(t->batch.value >= 1) || t->batch.value > 1e12)
            continue;
        p.batch = t->batch.value;
        p.lx = log2(p.batch);
        p.ok = t->ended && strcmp(t->ended, "ok") == 0;
        /* Beyond these a figure cannot be real, and scaling it would overflow. */
        p.sps = t->samples_per_s.value;
        p.has_sps = p.ok && t->samples_per_s.valid && p.sps >= 0 && p.sps < 1e15;
        if (memkey != MEM_NONE) {
            dg_rec_metric m = trial_mem(t, memkey);
            p.mem = m.value;
            p.has_mem = m.valid && p.mem >= 0 && p.mem < 1e18;
        }
        v[n++] = p;
    }
    qsort(v, (size_t)n, sizeof *v, trial_cmp);
    *out = v;
    return n;
}

/* A vertical marker line at batch with a label at the top (row 0 or 1). */
static void batch_marker(dg_capbuf *b, const plot *p, double batch, const char *color,
                         const char *what, int row)
{
    if (!(batch >= 1) || !isfinite(batch))
        return;
    double x = dg_svg_px(p, log2(batch));
    char style[80], lab[64];
    snprintf(style, sizeof style, "stroke=\"%s\" stroke-width=\"1.5\" stroke-dasharray=\"5 3\"",
             color);
    dg_svg_line(b, x, p->mt, x, p->h - p->mb, style);
    snprintf(lab, sizeof lab, "%s %.0f", what, batch);
    snprintf(style, sizeof style, "fill=\"%s\" font-weight=\"600\"", color);
    dg_svg_text(b, x + 3, p->mt + 10 + 12 * row, "start", style, lab, false);
}

static void sweep_x_axis(dg_capbuf *b, const plot *p)
{
    int k0 = (int)ceil(p->x0), k1 = (int)floor(p->x1);
    int stride = (k1 - k0) > 12 ? 2 : 1;
    for (int k = k0; k <= k1; k += stride) {
        char lab[24];
        snprintf(lab, sizeof lab, "%.0f", ldexp(1, k));
        dg_svg_line(b, dg_svg_px(p, k), p->h - p->mb, dg_svg_px(p, k), p->h - p->mb + 4,
                    "class=\"ax\"");
        dg_svg_text(b, dg_svg_px(p, k), p->h - p->mb + 16, "middle", NULL, lab, false);
    }
    dg_svg_text(b, (p->ml + p->w - p->mr) / 2, p->h - 4, "middle", NULL, "batch (log2 scale)",
                false);
}

static void sweep_series(dg_capbuf *b, const plot *p, const trial_pt *v, int n)
{
    /* samples/s of the trials that ended ok, joined in batch order. */
    dg_rp_put(b, "<polyline fill=\"none\" stroke=\"" C_SPS "\" stroke-width=\"2\" points=\"");
    for (int i = 0; i < n; i++)
        if (v[i].has_sps) {
            dg_svg_co(b, dg_svg_px(p, v[i].lx));
            dg_rp_put(b, ",");
            dg_svg_co(b, dg_svg_py(p, v[i].sps));
            dg_rp_put(b, " ");
        }
    dg_rp_put(b, "\"/>\n");
    if (p->r1 > p->r0) {
        dg_rp_put(b, "<polyline fill=\"none\" stroke=\"" C_MEM
                     "\" stroke-width=\"1.5\" stroke-dasharray=\"6 3\" "
                     "points=\"");
        for (int i = 0; i < n; i++)
            if (v[i].has_mem) {
                dg_svg_co(b, dg_svg_px(p, v[i].lx));
                dg_rp_put(b, ",");
                dg_svg_co(b, dg_svg_pr(p, v[i].mem));
                dg_rp_put(b, " ");
            }
        dg_rp_put(b, "\"/>\n");
    }
    for (int i = 0; i < n; i++) {
        if (v[i].has_sps) {
            dg_rp_put(b, "<circle r=\"3.5\" fill=\"" C_SPS "\"");
            dg_svg_attr(b, "cx", dg_svg_px(p, v[i].lx));
            dg_svg_attr(b, "cy", dg_svg_py(p, v[i].sps));
            dg_rp_put(b, "/>\n");
        }
        if (v[i].has_mem && p->r1 > p->r0) {
            dg_rp_put(b, "<rect width=\"6\" height=\"6\" fill=\"" C_MEM "\"");
            dg_svg_attr(b, "x", dg_svg_px(p, v[i].lx) - 3);
            dg_svg_attr(b, "y", dg_svg_pr(p, v[i].mem) - 3);
            dg_rp_put(b, "/>\n");
        }
    }
}

/* Failed trials: a red cross on the axis and how the trial ended. */
static void sweep_failures(dg_capbuf *b, const plot *p, const trial_pt *v, int n)
{
    int row = 0;
    for (int i = 0; i < n; i++) {
        if (v[i].ok)
            continue;
        double x = dg_svg_px(p, v[i].lx), y = p->h - p->mb - 8;
        dg_svg_line(b, x - 5, y - 5, x + 5, y + 5, "stroke=\"" C_FAIL "\" stroke-width=\"2.5\"");
        dg_svg_line(b, x - 5, y + 5, x + 5, y - 5, "stroke=\"" C_FAIL "\" stroke-width=\"2.5\"");
        char lab[96];
        const char *sig = v[i].t->signal;
        snprintf(lab, sizeof lab, "%.0f: %s%s%s", v[i].batch, v[i].t->ended ? v[i].t->ended : "?",
                 sig ? " " : "", sig ? sig : "");
        dg_svg_text(b, x, y - 10 - 12 * (row++ % 3), "middle", "fill=\"" C_FAIL "\"", lab, true);
    }
}

void dg_rp_svg_sweep(dg_capbuf *b, const dg_view_sweep *sw)
{
    const char *memlabel;
    sweep_mem memkey = sweep_mem_key(sw, &memlabel);
    trial_pt *v;
    int n = sweep_points(sw, memkey, &v);
    if (n == 0) {
        dg_rp_put(b, "<p class=\"na\">No trials to draw.</p>\n");
        dg_free(v);
        return;
    }
    plot p = {.w = 760, .h = 330, .ml = 56, .mr = 70, .mt = 30, .mb = 40};
    double spsmax = 0, memmax = 0;
    for (int i = 0; i < n; i++) {
        if (v[i].has_sps && v[i].sps > spsmax)
            spsmax = v[i].sps;
        if (v[i].has_mem && v[i].mem > memmax)
            memmax = v[i].mem;
    }
    p.x0 = v[0].lx - 0.4;
    p.x1 = v[n - 1].lx + 0.4;
    p.y0 = 0;
    p.y1 = spsmax > 0 ? spsmax * 1.15 : 1;
    p.r0 = 0;
    p.r1 = memmax > 0 ? memmax * 1.15 : 0;
    dg_svg_open(b, p.w, p.h, "Batch sweep: samples per second and memory against batch");
    dg_svg_y_axis(b, &p, dg_svg_short_num, p.r1 > 0 ? dg_svg_bytes_label : NULL);
    sweep_x_axis(b, &p);
    dg_svg_text(b, 12, p.mt - 10, "start", "class=\"t\"", "samples/s", false);
    double lx = 120;
    lx = dg_svg_legend(b, lx, 16, C_SPS, NULL, "samples/s (trials that ended ok)");
    if (p.r1 > 0)
        lx = dg_svg_legend(b, lx, 16, C_MEM, " stroke-dasharray=\"6 3\"", memlabel);
    dg_svg_legend(b, lx, 16, C_FAIL, NULL, "failed trial");
    bool hk = sw->knee_batch.valid, hs = sw->safe_batch.valid;
    if (hk)
        batch_marker(b, &p, sw->knee_batch.value, C_KNEE, "knee", 0);
    if (hs)
        batch_marker(b, &p, sw->safe_batch.value, C_SAFE, "safe", hk ? 1 : 0);
    sweep_series(b, &p, v, n);
    sweep_failures(b, &p, v, n);
    dg_svg_close(b);
    dg_free(v);
}

/* ---- memory curve ------------------------------------------------------------------- */

typedef struct mem_src {
    dg_mem_source src;
    const char *name, *color;
    double baseline;
    bool used;
} mem_src;

/* An epoch's watermark of a source (the footprint is the process RSS). */
static dg_rec_metric epoch_mem(const dg_view_epoch *e, dg_mem_source s)
{
    return s == DG_MEM_ALLOCATOR_ALLOCATED  ? e->allocated
           : s == DG_MEM_ALLOCATOR_RESERVED ? e->reserved
           : s == DG_MEM_DRIVER             ? e->driver_used
                                            : e->rss;
}

static double epoch_x(const dg_view_epoch *e, int index)
{
    double x = e->epoch.value;
    return e->epoch.valid && x >= 0 && x < 1e7 ? x : index;
}

/* An epoch's watermark of source s in percent of its baseline; false when
 * not reported or beyond what a chart can show (a baseline near zero). */
static bool mem_pct(const dg_view_epoch *e, const mem_src *s, double *pct)
{
    dg_rec_metric m = epoch_mem(e, s->src);
    if (!m.valid)
        return false;
    *pct = 100 * m.value / s->baseline;
    return isfinite(*pct) && fabs(*pct) < 1e6;
}

/* One source's curve in percent of its baseline; gaps break the path. */
static void mem_curve(dg_capbuf *b, const plot *p, const dg_view_soak *soak, const mem_src *s)
{
    dg_rp_printf(b, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"2\" d=\"", s->color);
    bool pen = false;
    for (int i = 0; i < soak->nepochs; i++) {
        const dg_view_epoch *e = &soak->epochs[i];
        double v;
        if (mem_pct(e, s, &v)) {
            dg_rp_put(b, pen ? "L" : "M");
            dg_svg_co(b, dg_svg_px(p, epoch_x(e, i)));
            dg_rp_put(b, " ");
            dg_svg_co(b, dg_svg_py(p, v));
            dg_rp_put(b, " ");
            pen = true;
        } else {
            pen = false;
        }
    }
    dg_rp_put(b, "\"/>\n");
    for (int i = 0; i < soak->nepochs; i++) {
        const dg_view_epoch *e = &soak->epochs[i];
        double v;
        if (mem_pct(e, s, &v)) {
            dg_rp_printf(b, "<circle r=\"3\" fill=\"%s\"", s->color);
            dg_svg_attr(b, "cx", dg_svg_px(p, epoch_x(e, i)));
            dg_svg_attr(b, "cy", dg_svg_py(p, v));
            dg_rp_put(b, "/>\n");
        }
    }
}

/* Validation epochs shaded, cache releases marked with a triangle on top. */
static void mem_epoch_marks(dg_capbuf *b, const plot *p, const dg_view_soak *soak)
{
    double half = 0.5 * (dg_svg_px(p, 1) - dg_svg_px(p, 0));
    for (int i = 0; i < soak->nepochs; i++) {
        const dg_view_epoch *e = &soak->epochs[i];
        double x = dg_svg_px(p, epoch_x(e, i));
        if (e->validation == 1) {
            dg_rp_put(b, "<rect fill=\"#ddf4ff\"");
            dg_svg_attr(b, "x", x - half);
            dg_svg_attr(b, "y", p->mt);
            dg_svg_attr(b, "width", 2 * half);
            dg_svg_attr(b, "height", p->h - p->mt - p->mb);
            dg_rp_put(b, "/>\n");
        }
        if (e->cache_emptied == 1) {
            dg_rp_put(b, "<path fill=\"#57606a\" d=\"M");
            dg_svg_co(b, x - 5);
            dg_rp_put(b, " ");
            dg_svg_co(b, p->mt - 8);
            dg_rp_put(b, " L");
            dg_svg_co(b, x + 5);
            dg_rp_put(b, " ");
            dg_svg_co(b, p->mt - 8);
            dg_rp_put(b, " L");
            dg_svg_co(b, x);
            dg_rp_put(b, " ");
            dg_svg_co(b, p->mt);
            dg_rp_put(b, " Z\"/>\n");
        }
    }
}

static void mem_x_axis(dg_capbuf *b, const plot *p)
{
    double step = dg_svg_nice_step(p->x1 - p->x0, 10);
    if (step < 1)
        step = 1;
    for (double k = ceil(p->x0 / step) * step; k <= p->x1; k += step) {
        char lab[24];
        snprintf(lab, sizeof lab, "%.0f", k + 0.0); /* never "-0" */
        dg_svg_text(b, dg_svg_px(p, k), p->h - p->mb + 16, "middle", NULL, lab, false);
    }
    dg_svg_text(b, (p->ml + p->w - p->mr) / 2, p->h - 4, "middle", NULL, "epoch", false);
}

void dg_rp_svg_memory(dg_capbuf *b, double threshold_pct, const dg_view_soak *soak)
{
    mem_src src[] = {
        {DG_MEM_ALLOCATOR_ALLOCATED, "allocator allocated", "#0969da", 0, false},
        {DG_MEM_ALLOCATOR_RESERVED, "allocator reserved", "#8250df", 0, false},
        {DG_MEM_DRIVER, "driver / backend pool", "#bc4c00", 0, false},
        {DG_MEM_FOOTPRINT, "process footprint", "#1a7f37", 0, false},
    };
    double ymin = 100, ymax = 100, xmax = 0;
    int used = 0;
    for (int i = 0; i < soak->nepochs; i++)
        xmax = fmax(xmax, epoch_x(&soak->epochs[i], i));
    for (int k = 0; k < 4; k++) {
        mem_src *s = &src[k];
        /* The analysis's baseline, else the first epoch's watermark. */
        dg_rec_metric base = soak->baseline[s->src];
        if (!base.valid && soak->nepochs > 0)
            base = epoch_mem(&soak->epochs[0], s->src);
        s->baseline = base.valid ? base.value : 0;
        if (!(s->baseline > 0))
            continue;
        for (int i = 0; i < soak->nepochs; i++) {
            double pct;
            if (mem_pct(&soak->epochs[i], s, &pct)) {
                s->used = true;
                ymin = fmin(ymin, pct);
                ymax = fmax(ymax, pct);
            }
        }
        used += s->used;
    }
    if (!used) {
        dg_rp_put(b, "<p class=\"na\">No watermark with a baseline to draw.</p>\n");
        return;
    }
    double pct = threshold_pct, thr = 100 + pct;
    plot p = {.w = 760, .h = 300, .ml = 56, .mr = 20, .mt = 40, .mb = 40};
    p.x0 = -0.5;
    p.x1 = xmax + 0.5;
    p.y0 = fmax(0, fmin(ymin, thr) - 10);
    p.y1 = fmax(ymax, thr) + 10;
    dg_svg_open(b, p.w, p.h, "Memory watermarks per epoch, in percent of the end of epoch 0");
    mem_epoch_marks(b, &p, soak);
    dg_svg_y_axis(b, &p, dg_svg_pct_label, NULL);
    mem_x_axis(b, &p);
    dg_svg_line(b, p.ml, dg_svg_py(&p, 100), p.w - p.mr, dg_svg_py(&p, 100),
                "stroke=\"#57606a\" stroke-width=\"1\"");
    dg_svg_line(b, p.ml, dg_svg_py(&p, thr), p.w - p.mr, dg_svg_py(&p, thr),
                "stroke=\"" C_FAIL "\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"");
    char lab[64];
    snprintf(lab, sizeof lab, "threshold +%.0f%%", pct);
    dg_svg_text(b, p.w - p.mr - 4, dg_svg_py(&p, thr) - 4, "end", "fill=\"" C_FAIL "\"", lab,
                false);
    dg_svg_text(b, p.w - p.mr - 4, dg_svg_py(&p, 100) + 12, "end", "fill=\"#57606a\"",
                "baseline (end of epoch 0)", false);
    for (int k = 0; k < 4; k++)
        if (src[k].used)
            mem_curve(b, &p, soak, &src[k]);
    double lx = p.ml;
    for (int k = 0; k < 4; k++)
        if (src[k].used)
            lx = dg_svg_legend(b, lx, 14, src[k].color, NULL, src[k].name);
    dg_svg_text(b, p.ml, 28, "start", "fill=\"#57606a\"",
                "▼ cache emptied at the epoch end · shaded: validation epoch", false);
    dg_svg_close(b);
}

/* ---- cpu against device bars ---------------------------------------------------------- */

/* A compare run's figure of one side (0 cpu, 1 the device). */
typedef dg_rec_metric (*run_fig)(const dg_view_run *r, int side);

static dg_rec_metric run_step_ms(const dg_view_run *r, int side)
{
    return side ? r->device_step_ms : r->cpu_step_ms;
}

static dg_rec_metric run_sps(const dg_view_run *r, int side)
{
    return side ? r->device_sps : r->cpu_sps;
}

/* One panel: two bars (cpu, device) per batch for the figure fig. */
static void bar_panel(dg_capbuf *b, const dg_view_compare *cmp, run_fig fig, const char *title,
                      const char *devname)
{
    int rows = 0;
    double max = 0;
    for (int k = 0; k < cmp->nruns; k++) {
        const dg_view_run *r = &cmp->runs[k];
        if (!r->batch.valid || r->failed)
            continue;
        rows++;
        for (int side = 0; side < 2; side++) {
            dg_rec_metric v = fig(r, side);
            if (v.valid && v.value > max)
                max = v.value;
        }
    }
    if (rows == 0)
        return;
    double w = 380, lw = 110, rowh = 18, h = 30 + rows * (2 * rowh + 8);
    dg_svg_open(b, w, h, title);
    dg_svg_text(b, 4, 16, "start", "class=\"t\"", title, false);
    double y = 28;
    for (int k = 0; k < cmp->nruns; k++) {
        const dg_view_run *r = &cmp->runs[k];
        if (!r->batch.valid || r->failed)
            continue;
        for (int side = 0; side < 2; side++) {
            char lab[64], val[48];
            snprintf(lab, sizeof lab, "b%.0f %s", r->batch.value, side ? "" : "cpu");
            dg_rp_put(b, "<text text-anchor=\"end\"");
            dg_svg_attr(b, "x", lw - 6);
            dg_svg_attr(b, "y", y + 13);
            dg_rp_put(b, ">");
            dg_rp_put(b, lab);
            if (side)
                dg_rp_h_esc(b, devname, "device");
            dg_rp_put(b, "</text>\n");
            dg_rec_metric m = fig(r, side);
            double v = m.value;
            bool ok = m.valid && v >= 0;
            dg_rp_fmt_num(val, sizeof val, ok ? v : 0, ok);
            double bw = ok && max > 0 ? (w - lw - 70) * v / max : 0;
            if (ok) {
                dg_rp_printf(b, "<rect fill=\"%s\"", side ? C_SPS : "#8c959f");
                dg_svg_attr(b, "x", lw);
                dg_svg_attr(b, "y", y + 2);
                dg_svg_attr(b, "width", bw);
                dg_svg_attr(b, "height", rowh - 4);
                dg_rp_put(b, "/>\n");
            }
            dg_svg_text(b, lw + bw + 4, y + 13, "start", NULL, val, true);
            y += rowh;
        }
        y += 8;
    }
    dg_svg_close(b);
}

void dg_rp_svg_baseline(dg_capbuf *b, const dg_view_compare *cmp)
{
    const char *dev = cmp->backend;
    dg_rp_put(b, "<div class=\"charts\"><div>");
    bar_panel(b, cmp, run_step_ms, "step time (ms, shorter is better)", dev);
    dg_rp_put(b, "</div><div>");
    bar_panel(b, cmp, run_sps, "throughput (samples/s, longer is better)", dev);
    dg_rp_put(b, "</div></div>\n");
}

/* ---- profile phases ----------------------------------------------------------------------- */

static void phase_bar(dg_capbuf *b, const dg_view_profile *prof, dg_phase ph, double max, double *y)
{
    const dg_view_phase *p = &prof->phases[ph];
    if (!p->present)
        return;
    const char *name = dg_phase_key(ph);
    double lw = 110, w = 760, ms = p->ms.value, share = p->share.value;
    bool hm = p->ms.valid;
    bool hs = p->share.valid && share >= 0;
    dg_svg_text(b, lw - 6, *y + 13, "end", NULL, name, false);
    char lab[96];
    double bw = 0;
    if (!hm) {
        snprintf(lab, sizeof lab, "not reported");
    } else {
        char m[32];
        dg_rp_fmt_num(m, sizeof m, ms, true);
        if (hs)
            snprintf(lab, sizeof lab, "%s ms · %.1f%%", m, 100 * share);
        else
            snprintf(lab, sizeof lab, "%s ms", m);
        bw = hs && max > 0 ? (w - lw - 140) * fmin(share / max, 1) : 0;
        if (hs && share > 0 && bw < 1)
            bw = 1;
    }
    if (bw > 0) {
        dg_rp_put(b, "<rect fill=\"" C_SPS "\"");
        dg_svg_attr(b, "x", lw);
        dg_svg_attr(b, "y", *y + 2);
        dg_svg_attr(b, "width", bw);
        dg_svg_attr(b, "height", 14);
        dg_rp_put(b, "/>\n");
    }
    dg_svg_text(b, lw + bw + 4, *y + 13, "start", hm ? NULL : "fill=\"#57606a\"", lab, false);
    *y += 18;
}

void dg_rp_svg_phases(dg_capbuf *b, const dg_view_profile *prof)
{
    /* The step's phases (per step), then the loader's (per batch). */
    static const dg_phase step_phases[] = {DG_PHASE_QUEUE_WAIT, DG_PHASE_H2D,    DG_PHASE_FORWARD,
                                           DG_PHASE_BACKWARD,   DG_PHASE_UPDATE, DG_PHASE_D2H,
                                           DG_PHASE_SYNC};
    static const dg_phase loader[] = {DG_PHASE_READ,    DG_PHASE_DECODE,    DG_PHASE_RESIZE,
                                      DG_PHASE_AUGMENT, DG_PHASE_NORMALISE, DG_PHASE_COLLATE};
    if (!prof->has_phases) {
        dg_rp_put(b, "<p class=\"na\">No phases in this record.</p>\n");
        return;
    }
    double max = 0;
    int rows = 0;
    for (int i = 0; i < 7; i++)
        if (prof->phases[step_phases[i]].present) {
            rows++;
            if (prof->phases[step_phases[i]].share.valid)
                max = fmax(max, prof->phases[step_phases[i]].share.value);
        }
    for (int i = 0; i < 6; i++)
        if (prof->phases[loader[i]].present) {
            rows++;
            if (prof->phases[loader[i]].share.valid)
                max = fmax(max, prof->phases[loader[i]].share.value);
        }
    double h = 58 + rows * 18, y = 26;
    dg_svg_open(b, 760, h, "Where the step time goes: phases of the unprofiled pass");
    dg_svg_text(b, 4, 16, "start", "class=\"t\"", "the step (per step, share of the step time)",
                false);
    for (int i = 0; i < 7; i++)
        phase_bar(b, prof, step_phases[i], max, &y);
    y += 8;
    dg_svg_text(b, 4, y + 8, "start", "class=\"t\"",
                "the loader (per batch, worker threads beside the step)", false);
    y += 14;
    for (int i = 0; i < 6; i++)
        phase_bar(b, prof, loader[i], max, &y);
    dg_svg_close(b);
}

/* ---- lines of a series against time or epoch (the run page) ------------------------------ */

/* A point's value when it is a finite number a chart can place. */
static bool line_val(const cJSON *pt, const char *key, double *v)
{
    return dg_rp_num(pt, key, v) && fabs(*v) < 1e18;
}

/* y-axis grid and labels for unit from 0 to p->y1. */
static void unit_axis(dg_capbuf *b, const plot *p, rp_svg_unit unit)
{
    double range = p->y1 - p->y0;
    double step = unit == RP_UNIT_BYTES ? dg_svg_bytes_step(range, 4) : dg_svg_nice_step(range, 4);
    if (unit == RP_UNIT_COUNT && step < 1)
        step = 1;
    if (!(range / step <= 50))
        return;
    for (double v = ceil(p->y0 / step) * step; v <= p->y1 + step * 1e-9; v += step) {
        char lab[32];
        if (unit == RP_UNIT_BYTES)
            dg_svg_bytes_label(lab, sizeof lab, v);
        else if (unit == RP_UNIT_PERCENT)
            dg_svg_pct_label(lab, sizeof lab, v);
        else
            dg_svg_short_num(lab, sizeof lab, v);
        dg_svg_line(b, p->ml, dg_svg_py(p, v), p->w - p->mr, dg_svg_py(p, v), "class=\"grid\"");
        dg_svg_text(b, p->ml - 4, dg_svg_py(p, v) + 4, "end", NULL, lab, false);
    }
    dg_svg_line(b, p->ml, p->mt, p->ml, p->h - p->mb, "class=\"ax\"");
    dg_svg_line(b, p->ml, p->h - p->mb, p->w - p->mr, p->h - p->mb, "class=\"ax\"");
}

static void lines_x_axis(dg_capbuf *b, const plot *p, bool x_integer, const char *xlabel)
{
    double step = dg_svg_nice_step(p->x1 - p->x0, 8);
    if (x_integer && step < 1)
        step = 1;
    if (!((p->x1 - p->x0) / step <= 50))
        return;
    for (double k = ceil(p->x0 / step) * step; k <= p->x1 + step * 1e-9; k += step) {
        char lab[24];
        snprintf(lab, sizeof lab, "%.3g", k + 0.0); /* never "-0" */
        dg_svg_line(b, dg_svg_px(p, k), p->h - p->mb, dg_svg_px(p, k), p->h - p->mb + 4,
                    "class=\"ax\"");
        dg_svg_text(b, dg_svg_px(p, k), p->h - p->mb + 16, "middle", NULL, lab, false);
    }
    dg_svg_text(b, (p->ml + p->w - p->mr) / 2, p->h - 4, "middle", NULL, xlabel, false);
}

/* One line: a path broken where a point is missing, and dots when the points are few. */
static void series_line(dg_capbuf *b, const plot *p, const cJSON *pts, const char *xkey,
                        const rp_svg_line *l, int npts)
{
    dg_rp_printf(b, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s d=\"", l->color,
                 l->dashed ? " stroke-dasharray=\"6 3\"" : "");
    bool pen = false;
    const cJSON *pt;
    cJSON_ArrayForEach(pt, pts)
    {
        double x, y;
        if (line_val(pt, xkey, &x) && line_val(pt, l->key, &y)) {
            dg_rp_put(b, pen ? "L" : "M");
            dg_svg_co(b, dg_svg_px(p, x));
            dg_rp_put(b, " ");
            dg_svg_co(b, dg_svg_py(p, y));
            dg_rp_put(b, " ");
            pen = true;
        } else {
            pen = false;
        }
    }
    dg_rp_put(b, "\"/>\n");
    if (npts > 60)
        return;
    cJSON_ArrayForEach(pt, pts)
    {
        double x, y;
        if (line_val(pt, xkey, &x) && line_val(pt, l->key, &y)) {
            dg_rp_printf(b, "<circle r=\"2.5\" fill=\"%s\"", l->color);
            dg_svg_attr(b, "cx", dg_svg_px(p, x));
            dg_svg_attr(b, "cy", dg_svg_py(p, y));
            dg_rp_put(b, "/>\n");
        }
    }
}

int dg_rp_svg_lines(dg_capbuf *b, const rp_svg_chart *c, const cJSON *pts, const rp_svg_line *lines,
                    int nlines)
{
    double xmin = INFINITY, xmax = -INFINITY, ymax = 0, ymin = 0;
    int drawn = 0, npts = 0;
    bool has[16] = {false};
    if (nlines > 16)
        nlines = 16;
    const cJSON *pt;
    cJSON_ArrayForEach(pt, pts)
    {
        double x, y;
        npts++;
        if (!line_val(pt, c->xkey, &x))
            continue;
        xmin = fmin(xmin, x); /* every point's x: the charts of one page share a time axis */
        xmax = fmax(xmax, x);
        for (int k = 0; k < nlines; k++) {
            if (!line_val(pt, lines[k].key, &y))
                continue;
            has[k] = true;
            ymax = fmax(ymax, y);
            ymin = fmin(ymin, y);
        }
    }
    for (int k = 0; k < nlines; k++)
        drawn += has[k];
    if (!drawn)
        return 0;
    /* The reference line joins the scale unless it would flatten the data. */
    bool ref_on = isfinite(c->ref) && fabs(c->ref) < 1e18 && c->ref_label;
    bool ref_in = ref_on && c->ref >= ymin && (c->ref <= 4 * ymax || ymax <= ymin);
    if (ref_in)
        ymax = fmax(ymax, c->ref);
    plot p = {.w = 760, .h = 240, .ml = 64, .mr = 20, .mt = 34, .mb = 40};
    if (!(xmax > xmin)) { /* one x: centre it */
        xmin -= c->x_integer ? 1 : 0.5;
        xmax += c->x_integer ? 1 : 0.5;
    }
    p.x0 = fmin(xmin, 0); /* time and epochs start at 0 */
    p.x1 = xmax;
    p.y0 = ymin;
    p.y1 = ymax > ymin ? ymin + (ymax - ymin) * 1.1 : ymin + (c->unit == RP_UNIT_BYTES ? 1024 : 1);
    dg_svg_open(b, p.w, p.h, c->title);
    unit_axis(b, &p, c->unit);
    lines_x_axis(b, &p, c->x_integer, c->xlabel);
    dg_svg_text(b, 8, 14, "start", "class=\"t\"", c->ylabel, false);
    if (ref_in) {
        dg_svg_line(b, p.ml, dg_svg_py(&p, c->ref), p.w - p.mr, dg_svg_py(&p, c->ref),
                    "stroke=\"" C_FAIL "\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"");
        dg_svg_text(b, p.w - p.mr - 4, dg_svg_py(&p, c->ref) - 4, "end", "fill=\"" C_FAIL "\"",
                    c->ref_label, false);
    } else if (ref_on) {
        char lab[160], v[32];
        dg_svg_short_num(v, sizeof v, c->ref);
        snprintf(lab, sizeof lab, "%s: %s%s, above the scale", c->ref_label, v,
                 c->unit == RP_UNIT_PERCENT ? "%" : "");
        dg_svg_text(b, p.w - p.mr - 4, 14, "end", "fill=\"" C_FAIL "\"", lab, false);
    }
    double lx = p.ml + 8;
    for (int k = 0; k < nlines; k++)
        if (has[k]) {
            series_line(b, &p, pts, c->xkey, &lines[k], npts);
            lx = dg_svg_legend(b, lx, 28, lines[k].color,
                               lines[k].dashed ? " stroke-dasharray=\"6 3\"" : NULL, lines[k].name);
        }
    dg_svg_close(b);
    return drawn;
}
