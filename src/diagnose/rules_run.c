/* Rules over a supervised program (devgate run): it failed, its events were
 * lost, and what the samples show without any probe (memory growing with
 * time, CPU use against the cores), and the host reads the zero-code probe
 * counted per step. */
#include "diagnose/diagnose.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Exit 86 with run_end "stopped": the probe stopped the program as devgate
 * asked (DEVGATE_PROBE_MAX_STEPS, docs/events.md), a clean end. */
static bool stopped_by_devgate(const dg_view_supervise *s)
{
    return s->exit_status.value == 86 && s->run_end_status &&
           strcmp(s->run_end_status, "stopped") == 0;
}

void dg_judge_program_failed(dg_diag *d, const dg_rule *r)
{
    const dg_view_supervise *s = &d->v->supervise;
    if (!s->present || s->interrupted == 1)
        return; /* an interrupt is the user's, and the record says so */
    cJSON *f;
    /* What the program said as it failed (its last traceback's exception). */
    const char *said = s->error_line ? s->error_line : "", *sep = s->error_line ? ": " : "";
    if (s->timed_out == 1)
        f = dg_rule_finding(d, r, DG_SEV_FAIL, -1,
                            "the program ran past its timeout; its process tree was killed");
    else if (s->signal)
        f = dg_rule_finding(d, r, DG_SEV_FAIL, -1, "the program was killed by %s%s%s", s->signal,
                            sep, said);
    else if (s->exit_status.valid && s->exit_status.value != 0 && !stopped_by_devgate(s))
        f = dg_rule_finding(d, r, DG_SEV_FAIL, -1, "the program exited with status %d%s%s",
                            dg_rec_int(s->exit_status), sep, said);
    else
        return;
    dg_ev_str(d, f, "supervise", s->error_line, "error_lines[0]");
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
 * epoch watermarks: a Theil-Sen line (the median of the pairwise slopes,
 * robust to the odd sample far off it) through the RSS samples against the
 * tree's CPU time (the work done, so a program starved by its neighbours, at
 * start-up or at exit, is judged as if it had the machine to itself), over
 * the last two thirds of that CPU time (the first holds imports and set-up)
 * and without the exit tail (the trailing samples below half the run's high
 * level, its 90th percentile:
 * a program freeing its memory as it ends, a wrapper outliving its worker),
 * judged when it is steady (Kendall's tau >= 0.6 over the same pairs), the
 * later half still grows, and it grows more than mem_growth_pct over the
 * window. */
#define GROWTH_MIN_POINTS 8
#define GROWTH_MIN_TAU 0.6
#define GROWTH_MAX_POINTS 4096 /* the run sampler decimates below this */
#define GROWTH_FIT_POINTS 200  /* pairs of at most this many points (decimated) */

typedef struct rss_point {
    double cpu_s, mib;
} rss_point;

/* A sample of a live tree: samples taken as the program exits (no live
 * member: procs 0, rss 0) say nothing about its memory. */
static bool live_point(const dg_view_sample *p)
{
    return p->t.valid && p->rss.valid && p->rss.value > 0 &&
           !(p->procs.valid && p->procs.value == 0);
}

/* The live samples as (cumulative CPU seconds, MiB); one without a CPU share
 * adds no CPU time. A series with no CPU share at all (an older record) is
 * placed on wall time. Returns the count. */
static int rss_points(const dg_view_supervise *s, rss_point *out, double *wall)
{
    int k = 0;
    double cpu = 0, prev_t = NAN, t0 = NAN, t1 = NAN;
    for (int i = 0; i < s->nseries; i++) {
        const dg_view_sample *p = &s->series[i];
        if (!p->t.valid)
            continue;
        double t = p->t.value, pct = p->cpu_pct.value;
        if (isfinite(prev_t) && t > prev_t && p->cpu_pct.valid && pct > 0)
            cpu += pct / 100.0 * (t - prev_t);
        prev_t = t;
        if (!live_point(p) || k == GROWTH_MAX_POINTS)
            continue;
        t0 = isnan(t0) ? t : t0;
        t1 = t;
        out[k++] = (rss_point){cpu, p->rss.value / DG_MIB};
    }
    *wall = k ? t1 - t0 : NAN;
    if (!(cpu > 0)) {
        int j = 0;
        for (int i = 0; i < s->nseries && j < k; i++)
            if (live_point(&s->series[i]))
                out[j++].cpu_s = s->series[i].t.value - t0;
    }
    return k;
}

static int cmp_double(const void *a, const void *b);

/* Drops the exit tail: trailing points below half the run's high level (its
 * 90th percentile, so one spike does not set it). */
static int trim_exit_tail(const rss_point *pt, int n)
{
    if (n < 2)
        return n;
    double *v = dg_malloc(sizeof *v * (size_t)n);
    if (!v)
        return n;
    for (int i = 0; i < n; i++)
        v[i] = pt[i].mib;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double high = v[(int)(0.9 * (n - 1))];
    dg_free(v);
    while (n > 0 && pt[n - 1].mib < 0.5 * high)
        n--;
    return n;
}

typedef struct rss_fit {
    int n;
    double slope, icpt, tau; /* MiB per CPU second, MiB at the window's start, steadiness */
} rss_fit;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_of(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Theil-Sen line and Kendall's tau through the points at or after CPU time
 * w0, averaged into at most GROWTH_FIT_POINTS bins of equal CPU time (the
 * samples of a starved stretch, many at one CPU time, count as one); n 0
 * when they are flat or too few. */
static rss_fit fit_rss(const rss_point *pt, int n, double w0)
{
    rss_fit f = {0, NAN, NAN, NAN};
    int first = 0;
    while (first < n && pt[first].cpu_s < w0)
        first++;
    int k = n - first;
    if (k < 2 || !(pt[n - 1].cpu_s > w0))
        return f;
    int nb = k < GROWTH_FIT_POINTS ? k : GROWTH_FIT_POINTS;
    double width = (pt[n - 1].cpu_s - w0) / nb;
    rss_point *q = dg_calloc((size_t)nb, sizeof *q);
    int *cnt = dg_calloc((size_t)nb, sizeof *cnt);
    double *sl = dg_malloc(sizeof *sl * ((size_t)nb * (size_t)(nb - 1) / 2 + (size_t)nb + 1));
    if (!q || !cnt || !sl) {
        dg_free(q);
        dg_free(cnt);
        dg_free(sl);
        return f;
    }
    for (int i = first; i < n; i++) {
        int b = (int)((pt[i].cpu_s - w0) / width);
        b = b < 0 ? 0 : b >= nb ? nb - 1 : b;
        q[b].cpu_s += pt[i].cpu_s - w0;
        q[b].mib += pt[i].mib;
        cnt[b]++;
    }
    int m = 0;
    for (int b = 0; b < nb; b++)
        if (cnt[b])
            q[m++] = (rss_point){q[b].cpu_s / cnt[b], q[b].mib / cnt[b]};
    size_t ns = 0;
    long conc = 0, disc = 0, pairs = 0;
    for (int i = 0; i < m; i++)
        for (int j = i + 1; j < m; j++) {
            double dx = q[j].cpu_s - q[i].cpu_s, dy = q[j].mib - q[i].mib;
            pairs++;
            conc += dy > 0 && dx > 0;
            disc += dy < 0 && dx > 0;
            if (dx > 0)
                sl[ns++] = dy / dx;
        }
    if (ns > 0 && conc + disc > 0) {
        f.n = k; /* the samples behind the bins */
        f.slope = median_of(sl, ns);
        for (int i = 0; i < m; i++)
            sl[i] = q[i].mib - f.slope * q[i].cpu_s;
        f.icpt = median_of(sl, (size_t)m);
        f.tau = (double)(conc - disc) / (double)pairs;
    }
    dg_free(q);
    dg_free(cnt);
    dg_free(sl);
    return f;
}

void dg_judge_footprint_growth(dg_diag *d, const dg_rule *r)
{
    if (d->v->soak.present)
        return; /* the probe's epochs are judged by retained-refs */
    const dg_view_supervise *s = &d->v->supervise;
    if (s->nseries < GROWTH_MIN_POINTS)
        return;
    rss_point *pt = dg_malloc(sizeof *pt * GROWTH_MAX_POINTS);
    if (!pt)
        return;
    double wall;
    int all = rss_points(s, pt, &wall);
    int n = trim_exit_tail(pt, all);
    double c0 = n ? pt[0].cpu_s : 0, c1 = n ? pt[n - 1].cpu_s : 0;
    rss_fit f = {0, NAN, NAN, NAN}, late = f;
    double w0 = c0 + (c1 - c0) / 3.0;
    if (n >= GROWTH_MIN_POINTS && c1 > c0) {
        f = fit_rss(pt, n, w0);
        /* The later half of the window must still grow: a start-up that
         * levels off (imports, a cache filling once) is not a leak. */
        late = fit_rss(pt, n, w0 + (c1 - w0) / 2.0);
    }
    dg_free(pt);
    if (f.n < GROWTH_MIN_POINTS || !(f.icpt > 0) || !(f.slope > 0) || f.tau < GROWTH_MIN_TAU ||
        !(late.n >= 2 && late.slope >= 0.5 * f.slope))
        return;
    double span = c1 - w0, from = f.icpt, to = f.icpt + f.slope * span;
    double growth = 100.0 * (to - from) / from;
    if (!(growth > d->th[TH_MEM_GROWTH_PCT]))
        return;
    char tail[96] = "";
    if (all > n)
        snprintf(tail, sizeof tail,
                 "; the last %d samples, below half its level as it ended, left out", all - n);
    cJSON *fd =
        dg_rule_finding(d, r, DG_SEV_WARN, -1,
                        "the process tree grew from %.0f MiB to %.0f MiB (+%.0f%%) over %.1f "
                        "CPU-seconds of work in %.0f s, steadily (Kendall tau %.2f), from the "
                        "samples alone%s",
                        from, to, growth, span, wall, f.tau, tail);
    dg_ev_num(d, fd, "supervise", "series[].rss fit: growth", growth, "%");
    dg_ev_num(d, fd, "supervise", "series[].rss fit: slope", f.slope, "MiB/cpu-s");
    dg_ev_num(d, fd, "supervise", "series[].rss fit: tau", f.tau, NULL);
    dg_ev_num(d, fd, "supervise", "series[].rss fit: points", f.n, "samples");
    dg_ev_num(d, fd, "supervise", "series[].rss fit: exit tail", all - n, "samples");
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
        snprintf(of, sizeof of, " of %.3g %s", cores, cores == 1 ? "core" : "cores");
    cJSON *f;
    /* Contention is never the program's fault: with other processes taking
     * the cores, a low share is theirs to explain, not the program's wait. */
    const dg_view_window *w = &s->window;
    char busy[300];
    bool contended = dg_window_contended(d, w, busy, sizeof busy);
    if (med < d->th[TH_CPU_BUSY_MIN_PCT] && contended) {
        f = dg_rule_finding(d, r, DG_SEV_INFO, -1,
                            "the program used %.0f%% of one core (median)%s while %s: its CPU "
                            "use was contended, not its own choice",
                            med, of, busy);
        dg_rule_text(d, f, "hypothesis",
                     "the cores went to other work during the run (see contended), so a low "
                     "share says nothing about the program waiting");
        dg_rule_text(d, f, "action",
                     "read the program's CPU use from a run on a quiet machine (or with the "
                     "other work stopped)");
        dg_ev_window(d, f, w);
    } else if (med < d->th[TH_CPU_BUSY_MIN_PCT]) {
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
    const char *dev = d->v->device ? d->v->device : p->backend;
    cJSON *f;
    if (p->host_reads_library.valid && p->host_reads.valid && p->host_reads.value > 0) {
        /* The zero-code probe counts reads of device tensors only (a cpu
         * tensor's read waits for nothing): every one is a sync point,
         * whatever device the record names; the same words in run and accept. */
        double lib = p->host_reads_library.value / p->host_reads.value * per;
        char on[80] = "";
        if (dev && strncmp(dev, "cpu", 3) != 0)
            snprintf(on, sizeof on, " on %s", dev);
        f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                            "the step reads %.1f device values to the host per step%s (%.1f from "
                            "the program's code, %.1f from library calls): each one waits for "
                            "the device's queue",
                            per, on, per - lib, lib);
        dg_ev_metric(d, f, "profile", "reads", p->host_reads_library,
                     "sync_points.host_reads_library");
    } else if (!dev || strncmp(dev, "cpu", 3) == 0) {
        f = dg_rule_finding(d, r, DG_SEV_INFO, -1,
                            "the step reads %.1f values to the host per step: free on the cpu, a "
                            "sync point on each one on a device",
                            per);
    } else {
        f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                            "the step reads %.1f values to the host per step on %s: each one "
                            "waits for the device's queue",
                            per, dev);
    }
    dg_ev_metric(d, f, "profile", "reads", p->host_reads_per_step,
                 "sync_points.host_reads_per_step");
    dg_ev_metric(d, f, "profile", "reads", p->host_reads, "sync_points.host_reads");
    dg_ev_str(d, f, "profile", p->host_reads_source, "sync_points.host_reads_source");
}

/* The method's "same script, different curves" trap: torch not seeded while
 * the training loader draws from it (shuffling, or workers whose base seed is
 * drawn from torch's generator and no worker_init_fn of the program's). */
void dg_judge_unseeded(dg_diag *d, const dg_rule *r)
{
    const dg_view_seeds *sd = &d->v->seeds;
    if (!sd->present || sd->torch_seeded != 0 || sd->loader_generator == 1)
        return;
    double workers = sd->loader_workers.valid ? sd->loader_workers.value : 0;
    bool shuffle = sd->loader_shuffle == 1;
    bool random_workers = workers > 0 && sd->loader_worker_init_fn != 1;
    if (!shuffle && !random_workers)
        return;
    char what[160];
    if (shuffle && workers > 0)
        snprintf(what, sizeof what, "its training DataLoader shuffles and has %.0f %s", workers,
                 workers == 1 ? "worker" : "workers");
    else if (shuffle)
        snprintf(what, sizeof what, "its training DataLoader shuffles");
    else
        snprintf(what, sizeof what, "its training DataLoader has %.0f %s seeded from torch",
                 workers, workers == 1 ? "worker" : "workers");
    cJSON *f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                               "torch was not seeded and %s: two runs of this script see other "
                               "batches and augmentations, so their losses and times differ",
                               what);
    dg_ev_bool(d, f, "run", sd->torch_seeded, "seeds.seeded.torch");
    dg_ev_metric(d, f, "run", "workers", sd->loader_workers, "seeds.loader.workers");
    dg_ev_bool(d, f, "run", sd->loader_shuffle, "seeds.loader.shuffle");
    dg_ev_bool(d, f, "run", sd->loader_worker_init_fn, "seeds.loader.worker_init_fn");
    dg_ev_bool(d, f, "run", sd->loader_generator, "seeds.loader.generator");
}
