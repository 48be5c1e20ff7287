/* Rules over a supervised program (devgate run): it failed, its events were
 * lost, and what the samples show without any probe (memory growing with
 * time, CPU use against the cores), and the host reads the zero-code probe
 * counted per step. */
#include "diagnose/diagnose.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void dg_judge_program_failed(dg_diag *d, const dg_rule *r)
{
    const dg_view_supervise *s = &d->v->supervise;
    if (!s->present || s->interrupted == 1)
        return; /* an interrupt is the user's, and the record says so */
    cJSON *f;
    if (s->timed_out == 1)
        f = dg_rule_finding(d, r, DG_SEV_FAIL, -1,
                            "the program ran past its timeout; its process tree was killed");
    else if (s->signal)
        f = dg_rule_finding(d, r, DG_SEV_FAIL, -1, "the program was killed by %s", s->signal);
    else if (s->exit_status.valid && s->exit_status.value != 0)
        f = dg_rule_finding(d, r, DG_SEV_FAIL, -1, "the program exited with status %d",
                            dg_rec_int(s->exit_status));
    else
        return;
    dg_ev_metric(d, f, "supervise", NULL, s->exit_status, "exit_status");
    dg_ev_str(d, f, "supervise", s->signal, "signal");
    dg_ev_bool(d, f, "supervise", s->timed_out, "timed_out");
    dg_ev_metric(d, f, "supervise", "s", s->wall, "wall");
}

void dg_judge_events_lost(dg_diag *d, const dg_rule *r)
{
    const dg_view_supervise *s = &d->v->supervise;
    double dropped = s->events_dropped.valid ? s->events_dropped.value : 0;
    double bad = s->events_malformed.valid ? s->events_malformed.value : 0;
    double cut = s->events_overlong.valid ? s->events_overlong.value : 0;
    double lost = dropped + bad + cut;
    if (!(lost > 0))
        return;
    cJSON *f = dg_rule_finding(
        d, r, DG_SEV_WARN, -1,
        "%.0f of the program's event lines were lost: %.0f dropped by the rate limit, "
        "%.0f malformed, %.0f overlong",
        lost, dropped, bad, cut);
    dg_ev_metric(d, f, "supervise", "lines", s->events_dropped, "events.dropped");
    dg_ev_metric(d, f, "supervise", "lines", s->events_malformed, "events.malformed");
    dg_ev_metric(d, f, "supervise", "lines", s->events_overlong, "events.overlong");
    dg_ev_metric(d, f, "supervise", "lines", s->events_lines, "events.lines");
}

/* Steady growth of the sampled process tree, for runs without the probe's
 * epoch watermarks: a least-squares line through the RSS samples of the last
 * two thirds of the run (the first third holds imports and set-up), judged
 * when it fits (R^2 >= 0.8) and grows more than mem_growth_pct over the
 * window. */
#define GROWTH_MIN_POINTS 8
#define GROWTH_MIN_R2 0.8

/* A sample of a live tree: samples taken as the program exits (no live
 * member: procs 0, rss 0) say nothing about its memory. */
static bool live_point(const dg_view_sample *p)
{
    return p->t.valid && p->rss.valid && p->rss.value > 0 &&
           !(p->procs.valid && p->procs.value == 0);
}

typedef struct rss_fit {
    int n;
    double slope, icpt, r2; /* MiB/s, MiB at the window's start, fit quality */
} rss_fit;

/* Least-squares line through the live RSS samples at or after w0 (MiB
 * against seconds since w0); n 0 when the samples are flat or too few. */
static rss_fit fit_rss(const dg_view_supervise *s, double w0)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0;
    int k = 0;
    for (int i = 0; i < s->nseries; i++) {
        const dg_view_sample *p = &s->series[i];
        if (!live_point(p) || p->t.value < w0)
            continue;
        double x = p->t.value - w0, y = p->rss.value / DG_MIB;
        sx += x, sy += y, sxx += x * x, sxy += x * y, syy += y * y;
        k++;
    }
    rss_fit f = {0, NAN, NAN, NAN};
    if (k < 2)
        return f;
    double vx = sxx - sx * sx / k, vy = syy - sy * sy / k, cxy = sxy - sx * sy / k;
    if (!(vx > 0) || !(vy > 0))
        return f; /* flat: nothing grows */
    f.n = k;
    f.slope = cxy / vx;
    f.icpt = (sy - f.slope * sx) / k;
    f.r2 = cxy * cxy / (vx * vy);
    return f;
}

void dg_judge_footprint_growth(dg_diag *d, const dg_rule *r)
{
    if (d->v->soak.present)
        return; /* the probe's epochs are judged by retained-refs */
    const dg_view_supervise *s = &d->v->supervise;
    if (s->nseries < GROWTH_MIN_POINTS)
        return;
    double t0 = NAN, t1 = NAN;
    for (int i = 0; i < s->nseries; i++) {
        const dg_view_sample *p = &s->series[i];
        if (!live_point(p))
            continue;
        double t = p->t.value;
        t0 = isnan(t0) ? t : fmin(t0, t);
        t1 = isnan(t1) ? t : fmax(t1, t);
    }
    if (!(t1 > t0))
        return;
    double w0 = t0 + (t1 - t0) / 3.0;
    rss_fit f = fit_rss(s, w0);
    /* The later half of the window must still grow: a start-up that levels
     * off (imports, a cache filling once) is not a leak. */
    rss_fit late = fit_rss(s, w0 + (t1 - w0) / 2.0);
    if (f.n < GROWTH_MIN_POINTS || !(f.icpt > 0) || !(f.slope > 0) || f.r2 < GROWTH_MIN_R2 ||
        !(late.n >= 2 && late.slope >= 0.5 * f.slope))
        return;
    double span = t1 - w0, from = f.icpt, to = f.icpt + f.slope * span;
    double growth = 100.0 * (to - from) / from;
    if (!(growth > d->th[TH_MEM_GROWTH_PCT]))
        return;
    cJSON *fd = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                                "the process tree grew from %.0f MiB to %.0f MiB over %.0f s "
                                "(+%.0f%%, steadily: R\xc2\xb2 %.2f), from the samples alone",
                                from, to, span, growth, f.r2);
    dg_ev_num(d, fd, "supervise", "series[].rss fit: growth", growth, "%");
    dg_ev_num(d, fd, "supervise", "series[].rss fit: slope", f.slope * 60.0, "MiB/min");
    dg_ev_num(d, fd, "supervise", "series[].rss fit: r2", f.r2, NULL);
    dg_ev_num(d, fd, "supervise", "series[].rss fit: points", f.n, "samples");
    dg_ev_metric(d, fd, "supervise", "bytes", s->rss_peak, "samples.rss_peak");
}

/* The cores the program could use: the run's own count, else the
 * environment proof's. NAN when unknown. */
static double run_cores(const dg_diag *d)
{
    dg_rec_metric c = d->v->supervise.cores;
    if (!c.valid)
        c = d->v->env.affinity_cores;
    if (!c.valid)
        c = d->v->env.logical_cores;
    return c.valid && c.value > 0 ? c.value : NAN;
}

#define CPU_MIN_WALL_S 2.0 /* shorter runs are mostly start-up */

void dg_judge_cpu_use(dg_diag *d, const dg_rule *r)
{
    if (d->v->profile.present)
        return; /* with the probe's steps, data-starved and host-sync say more */
    const dg_view_supervise *s = &d->v->supervise;
    double med = s->cpu_pct_median.value; /* NAN unless valid */
    if (!s->cpu_pct_median.valid || !(s->wall.valid && s->wall.value >= CPU_MIN_WALL_S))
        return;
    double cores = run_cores(d);
    char of[48] = "";
    if (isfinite(cores))
        snprintf(of, sizeof of, " of %d cores", diag_int(cores));
    cJSON *f;
    if (med < d->th[TH_CPU_BUSY_MIN_PCT]) {
        f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                            "the program used %.0f%% of one core (median)%s: it mostly waits", med,
                            of);
    } else if (isfinite(cores) && cores >= 4 && med <= 115) {
        f = dg_rule_finding(d, r, DG_SEV_INFO, -1,
                            "the program used one core (%.0f%%, median)%s: its loop is "
                            "single-threaded",
                            med, of);
        dg_rule_text(d, f, "hypothesis",
                     "a single-threaded loop: one core computes (or feeds a device) while %d "
                     "stay idle",
                     diag_int(cores) - 1);
        dg_rule_text(d, f, "action",
                     "if the cpu computes, raise its threads (torch.set_num_threads) or the "
                     "loader workers; if a device computes, this is the host's feeding thread");
    } else {
        return;
    }
    dg_ev_metric(d, f, "supervise", "percent", s->cpu_pct_median, "samples.cpu_pct_median");
    dg_ev_num(d, f, "supervise", "samples.cores", cores, "cores");
    dg_ev_metric(d, f, "supervise", "s", s->wall, "wall");
}

void dg_judge_host_sync(dg_diag *d, const dg_rule *r)
{
    const dg_view_profile *p = &d->v->profile;
    if (!p->host_reads_per_step.valid ||
        p->host_reads_per_step.value < d->th[TH_HOST_READS_PER_STEP])
        return;
    double per = p->host_reads_per_step.value;
    const char *dev = d->v->device;
    bool cpu = !dev || strncmp(dev, "cpu", 3) == 0;
    cJSON *f;
    if (cpu)
        f = dg_rule_finding(d, r, DG_SEV_INFO, -1,
                            "the step reads %.1f values to the host per step: free on the cpu, a "
                            "sync point on each one on a device",
                            per);
    else
        f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                            "the step reads %.1f values to the host per step on %s: each one "
                            "waits for the device's queue",
                            per, dev);
    dg_ev_metric(d, f, "profile", "reads", p->host_reads_per_step,
                 "sync_points.host_reads_per_step");
    dg_ev_metric(d, f, "profile", "reads", p->host_reads, "sync_points.host_reads");
    dg_ev_str(d, f, "profile", p->host_reads_source, "sync_points.host_reads_source");
}
