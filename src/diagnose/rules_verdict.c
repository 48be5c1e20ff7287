/* Rules about whether a verdict holds (docs/rules.md): the interval of a
 * speedup against its thresholds (verdict-inconclusive), other work running
 * during the measured windows (contended), and a cpu baseline that runs
 * below what its cores could do (cpu-baseline-unfair). The interval helpers
 * are shared with slow-device-data, speedup-near-one and the decision. */
#include "diagnose/diagnose.h"

#include <stdlib.h>
#include <string.h>

void dg_run_interval(dg_rec_metric point, dg_rec_interval ci, double *lo, double *hi)
{
    /* A record without the interval (an older compare, one repetition) is
     * judged on its point. */
    if (ci.lo.valid && ci.hi.valid) {
        *lo = ci.lo.value;
        *hi = ci.hi.value;
    } else {
        *lo = *hi = point.valid ? point.value : NAN;
    }
}

int dg_interval_side(double lo, double hi, double th)
{
    if (!isfinite(lo) || !isfinite(hi))
        return 2;
    return hi < th ? -1 : lo >= th ? 1 : 0;
}

int dg_slow_data_side(const dg_diag *d, const dg_view_run *run)
{
    double rlo, rhi, blo, bhi;
    dg_run_interval(run->reduction_pct, run->reduction_ci, &rlo, &rhi);
    dg_run_interval(run->busy_fraction, run->busy_ci, &blo, &bhi);
    int red = dg_interval_side(rlo, rhi, d->th[TH_DEVICE_MIN_REDUCTION_PCT]);
    int busy = dg_interval_side(blo, bhi, d->th[TH_DEVICE_BUSY_MIN]);
    if (red == 2)
        return 2;
    if (red == 1 || busy == 1)
        return 1; /* fast enough, or busy enough to be speedup-near-one's business */
    if (red == -1 && (busy == -1 || busy == 2))
        return -1;
    return 0;
}

/* verdict-inconclusive: an interval that holds a threshold the route hangs on. */
void dg_judge_verdict_inconclusive(dg_diag *d, const dg_rule *r)
{
    const dg_view_compare *c = &d->v->compare;
    for (int i = 0; i < c->nruns; i++) {
        const dg_view_run *run = &c->runs[i];
        if (!run->ok)
            continue;
        double slo, shi, rlo, rhi;
        dg_run_interval(run->speedup, run->speedup_ci, &slo, &shi);
        dg_run_interval(run->reduction_pct, run->reduction_ci, &rlo, &rhi);
        int sp = dg_interval_side(slo, shi, d->th[TH_SPEEDUP_MIN]);
        int slow = dg_slow_data_side(d, run);
        /* A device surely below either threshold goes to the cpu whatever the
         * other says: inconclusive only when neither rules it out. */
        if (sp == -1 || slow == -1 || (sp != 0 && slow != 0))
            continue;
        char what[300] = "";
        if (sp == 0)
            dg_cat(what, sizeof what, "speedup %.2f-%.2fx holds speedup_min %.2fx", slo, shi,
                   d->th[TH_SPEEDUP_MIN]);
        if (slow == 0)
            dg_cat(what, sizeof what, "%sstep-time reduction %.0f%% to %.0f%% holds %.0f%%",
                   what[0] ? "; " : "", rlo, rhi, d->th[TH_DEVICE_MIN_REDUCTION_PCT]);
        int reps = dg_rec_int(run->reps_per_side);
        cJSON *f = dg_rule_finding(d, r, DG_SEV_WARN, i,
                                   "%s vs cpu at batch %d is inconclusive: %s (95%% intervals)",
                                   dg_run_device(d, run), dg_rec_int(run->batch), what);
        dg_rule_text(d, f, "action",
                     "%s (this run had %d repetition%s a side: devgate compare --repetitions %d)",
                     r->action, reps, reps == 1 ? "" : "s", reps > 0 ? 2 * reps : 10);
        dg_ev_metric(d, f, "compare", "x", run->speedup, "runs[%d].speedup", i);
        dg_ev_metric(d, f, "compare", "x", run->speedup_ci.lo, "runs[%d].speedup_ci.lo", i);
        dg_ev_metric(d, f, "compare", "x", run->speedup_ci.hi, "runs[%d].speedup_ci.hi", i);
        dg_ev_metric(d, f, "compare", "%", run->reduction_ci.lo,
                     "runs[%d].step_time_reduction_pct_ci.lo", i);
        dg_ev_metric(d, f, "compare", "%", run->reduction_ci.hi,
                     "runs[%d].step_time_reduction_pct_ci.hi", i);
        dg_ev_metric(d, f, "compare", "probability", run->mw_p, "runs[%d].mann_whitney.p", i);
        dg_ev_metric(d, f, "compare", NULL, run->reps_per_side, "runs[%d].repetitions.per_side", i);
    }
}

/* ---- contended ---------------------------------------------------------------- */

typedef struct hog {
    int pid;
    char name[32];
    double max_pct;
    int windows;
} hog;

typedef struct contention {
    int windows, hit;
    double worst_cpus, worst_share, worst_psi;
    hog hogs[32];
    int nhogs;
    char where[400]; /* the measurements the hogs overlapped */
    int nwhere;
} contention;

static void add_hogs(contention *c, const dg_view_window *w, double min_pct)
{
    for (int i = 0; i < w->ntop; i++) {
        const dg_view_window_proc *p = &w->top[i];
        double pct = p->cpu_percent.value;
        const char *name = p->name;
        int pid = dg_rec_int(p->pid);
        if (!p->cpu_percent.valid || pct < min_pct || !name)
            continue;
        int k = 0;
        while (k < c->nhogs && !(c->hogs[k].pid == pid && !strcmp(c->hogs[k].name, name)))
            k++;
        if (k == c->nhogs) {
            if (c->nhogs == 32)
                continue;
            c->nhogs++;
            c->hogs[k] = (hog){.pid = pid};
            snprintf(c->hogs[k].name, sizeof c->hogs[k].name, "%s", name);
        }
        c->hogs[k].max_pct = fmax(c->hogs[k].max_pct, pct);
        c->hogs[k].windows++;
    }
}

/* One measured window: contended when other processes used at least
 * contention_cpus CPUs' worth during it. */
static void judge_window(const dg_diag *d, contention *c, const dg_view_window *w,
                         const char *label)
{
    if (!w->others_cpus.valid)
        return;
    double cpus = w->others_cpus.value;
    c->windows++;
    if (cpus < d->th[TH_CONTENTION_CPUS])
        return;
    c->hit++;
    c->worst_cpus = fmax(c->worst_cpus, cpus);
    if (w->others_share.valid)
        c->worst_share = fmax(c->worst_share, w->others_share.value);
    if (w->cpu_pressure_some.valid)
        c->worst_psi = fmax(c->worst_psi, w->cpu_pressure_some.value);
    add_hogs(c, w, d->th[TH_BUSY_PROCESS_CPU_PCT]);
    if (c->nwhere++ < 6)
        dg_cat(c->where, sizeof c->where, "%s%s", c->where[0] ? ", " : "", label);
}

static int by_pct_desc(const void *a, const void *b)
{
    const hog *x = a, *y = b;
    return (x->max_pct < y->max_pct) - (x->max_pct > y->max_pct);
}

void dg_judge_contended(dg_diag *d, const dg_rule *r)
{
    contention c = {0};
    char label[96];
    const dg_view_gate *g = &d->v->gate;
    for (int i = 0; i < g->nbackends; i++) {
        const dg_view_backend *b = &g->backends[i];
        snprintf(label, sizeof label, "gate %s", b->name ? b->name : "?");
        judge_window(d, &c, &b->matmul.window, label);
    }
    const dg_view_compare *cmp = &d->v->compare;
    for (int i = 0; i < cmp->nruns; i++) {
        const dg_view_run *run = &cmp->runs[i];
        for (int s = 0; s < 2; s++) {
            for (int k = 0; k < run->nreps[s]; k++) {
                snprintf(label, sizeof label, "compare b%d %s #%d", dg_rec_int(run->batch),
                         s ? dg_run_device(d, run) : "cpu", k + 1);
                judge_window(d, &c, &run->reps[s][k].window, label);
            }
        }
    }
    if (!c.hit)
        return;
    qsort(c.hogs, (size_t)c.nhogs, sizeof *c.hogs, by_pct_desc);
    char names[300] = "";
    for (int k = 0; k < c.nhogs && k < 4; k++)
        dg_cat(names, sizeof names, "%s%s (pid %d) %.0f%%", names[0] ? ", " : "", c.hogs[k].name,
               c.hogs[k].pid, c.hogs[k].max_pct);
    if (c.nwhere > 6)
        dg_cat(c.where, sizeof c.where, " and %d more", c.nwhere - 6);
    cJSON *f = dg_rule_finding(
        d, r, DG_SEV_WARN, -1,
        "other processes used up to %.1f CPUs (%.0f%% of the machine) during %d of %d measured "
        "windows: %s",
        c.worst_cpus, 100 * c.worst_share, c.hit, c.windows,
        names[0] ? names : "no single process above busy_process_cpu_pct");
    dg_rule_text(d, f, "hypothesis",
                 "%s; they overlapped %s (CPU pressure up to %.0f%% of the window)", r->hypothesis,
                 c.where, 100 * c.worst_psi);
    dg_ev_num(d, f, "compare", "windows contended", c.hit, "windows");
    dg_ev_num(d, f, "compare", "windows measured", c.windows, "windows");
    dg_ev_num(d, f, "compare", "others_cpus (worst window)", c.worst_cpus, "cpus");
    dg_ev_num(d, f, "compare", "cpu_pressure_some (worst window)", c.worst_psi, "fraction");
    char all[1200] = "";
    for (int k = 0; k < c.nhogs; k++)
        dg_cat(all, sizeof all, "%s%s (pid %d) %.0f%% in %d window%s", all[0] ? ", " : "",
               c.hogs[k].name, c.hogs[k].pid, c.hogs[k].max_pct, c.hogs[k].windows,
               c.hogs[k].windows == 1 ? "" : "s");
    dg_ev_add(d, f, "compare", "busy processes (largest share of one CPU)",
              all[0] ? cJSON_CreateString(all) : NULL, NULL);
    for (int k = 0; k < c.nhogs && k < 4; k++) {
        char field[96];
        snprintf(field, sizeof field, "%s (pid %d), windows %d", c.hogs[k].name, c.hogs[k].pid,
                 c.hogs[k].windows);
        dg_ev_num(d, f, "compare", field, c.hogs[k].max_pct, "percent");
    }
}

/* ---- cpu-baseline-unfair ------------------------------------------------------ */

static const dg_view_backend *gate_cpu(const dg_diag *d)
{
    const dg_view_gate *g = &d->v->gate;
    for (int i = 0; i < g->nbackends; i++)
        if (g->backends[i].name && !strcmp(g->backends[i].name, "cpu"))
            return &g->backends[i];
    return NULL;
}

void dg_judge_cpu_baseline_unfair(dg_diag *d, const dg_rule *r)
{
    const dg_view_backend *cpu = gate_cpu(d);
    if (!cpu)
        return;
    double frac = cpu->matmul.fraction_of_peak.value;
    double gflops = cpu->matmul.gflops.value, peak = cpu->peak_fp32.value;
    const char *kernel = cpu->blas.kernel;
    const char *lib = cpu->blas.library;
    const char *fix = cpu->blas.fix;
    bool generic = cpu->blas.generic == 1;
    const dg_rec_metric others = cpu->matmul.window.others_cpus;
    bool contended = others.valid && others.value >= d->th[TH_CONTENTION_CPUS];
    bool low = cpu->matmul.fraction_of_peak.valid && frac < d->th[TH_CPU_PEAK_FRACTION_MIN];
    /* The training runs' threads (0: all) against the cores the peak counts. */
    int threads = dg_rec_int(d->v->compare.threads);
    if (threads <= 0)
        threads = dg_rec_int(d->v->spec.threads);
    int cores = dg_rec_int(cpu->peak_cores);
    bool few = threads > 0 && cores > 0 && threads < cores;
    /* A low fraction measured while other work ran is contended's business,
     * unless the kernel itself is the generic one. */
    if (!generic && !few && !(low && !contended))
        return;
    char cause[400] = "";
    if (generic)
        dg_cat(cause, sizeof cause, "%s runs its %s kernel (%.0f-bit vectors) on a %s CPU",
               lib ? lib : "the BLAS", kernel ? kernel : "?", cpu->blas.vector_bits.value,
               cpu->peak_isa ? cpu->peak_isa : "?");
    if (few)
        dg_cat(cause, sizeof cause, "%sthe fixture runs %d thread%s on %d cores",
               cause[0] ? "; " : "", threads, threads == 1 ? "" : "s", cores);
    if (low && !generic && !contended)
        dg_cat(cause, sizeof cause, "%s%s kernel %s", cause[0] ? "; " : "", lib ? lib : "BLAS",
               kernel ? kernel : "not identified");
    cJSON *f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                               "cpu GEMM at %.0f GFLOP/s is %.0f%% of the cores' FP32 peak %.0f "
                               "GFLOP/s: %s",
                               gflops, 100 * frac, peak, cause);
    char act[600] = "";
    if (generic && fix)
        dg_cat(act, sizeof act, "%s", fix);
    if (few)
        dg_cat(act, sizeof act, "%srun with --threads 0 (all %d cores)", act[0] ? "; " : "", cores);
    if (!act[0])
        dg_cat(act, sizeof act, "%s", r->action);
    dg_rule_text(d, f, "action", "%s; until then every \"device is N x cpu\" is inflated", act);
    dg_ev_num(d, f, "gate", "cpu matmul.gflops", gflops, "GFLOP/s");
    dg_ev_num(d, f, "gate", "cpu peak.fp32", peak, "GFLOP/s");
    dg_ev_num(d, f, "gate", "cpu matmul.fraction_of_peak", frac, "fraction");
    dg_ev_add(d, f, "gate", "cpu blas.kernel", kernel ? cJSON_CreateString(kernel) : NULL, NULL);
    if (few) {
        dg_ev_num(d, f, "compare", "spec.threads", threads, "threads");
        dg_ev_num(d, f, "gate", "cpu peak.cpu.cores", cores, "cores");
    }
}
