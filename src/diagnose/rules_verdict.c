/* Rules about whether a verdict holds (docs/rules.md): the interval of a
 * speedup against its thresholds (verdict-inconclusive), other work running
 * during the measured windows (contended), and a cpu baseline that runs
 * below what its cores could do (cpu-baseline-unfair). The interval helpers
 * are shared with slow-device-data, speedup-near-one and the decision. */
#include "diagnose/diagnose.h"

#include <math.h>
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
    /* A run record's window: the program's whole run (its soak carries the
     * same one). accept's soak is the program's too, but a long window on a
     * shared machine would make every accept inconclusive: the rules that
     * read the soak name its contention themselves (slowing-down). */
    judge_window(d, &c, &d->v->supervise.window, "the run");
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

/* Below this many flops per thread a GEMM does not reach steady state (each
 * thread packs and streams its blocks too few times): 2^29, about the work
 * of one 640^3 product per thread. */
#define SMALL_FLOPS_PER_THREAD 536870912.0

static const dg_view_backend *gate_cpu(const dg_diag *d, int *index)
{
    const dg_view_gate *g = &d->v->gate;
    for (int i = 0; i < g->nbackends; i++)
        if (g->backends[i].name && !strcmp(g->backends[i].name, "cpu")) {
            *index = i;
            return &g->backends[i];
        }
    return NULL;
}

/* The threads the fixture's cpu baseline ran on: compare's threads_used,
 * else its spec.threads, else the record's spec.threads; 0 for all (older
 * records) or unknown; *src names the source. */
static int fixture_threads(const dg_diag *d, const char **src, const char **field)
{
    const dg_view_compare *c = &d->v->compare;
    *src = NULL;
    *field = "spec.threads";
    if (c->threads_used.valid && c->threads_used.value > 0) {
        *src = c->threads_source;
        *field = "spec.threads_used";
        return dg_rec_int(c->threads_used);
    }
    int t = dg_rec_int(c->threads);
    if (t <= 0)
        t = dg_rec_int(d->v->spec.threads);
    if (t > 0)
        *src = "--threads";
    return t > 0 ? t : 0;
}

void dg_judge_cpu_baseline_unfair(dg_diag *d, const dg_rule *r)
{
    int bi = -1;
    const dg_view_backend *cpu = gate_cpu(d, &bi);
    if (!cpu)
        return;
    double frac = cpu->matmul.fraction_of_peak.value;
    double peak = cpu->peak_fp32.value;
    bool rate = cpu->matmul.rate_gflops.valid && cpu->matmul.fraction_of &&
                !strcmp(cpu->matmul.fraction_of, "rate");
    double gflops = rate ? cpu->matmul.rate_gflops.value : cpu->matmul.gflops.value;
    int pm = dg_rec_int(rate ? cpu->matmul.rate_m : cpu->matmul.m);
    int pn = dg_rec_int(rate ? cpu->matmul.rate_n : cpu->matmul.n);
    int pk = dg_rec_int(rate ? cpu->matmul.rate_k : cpu->matmul.k);
    const char *kernel = cpu->blas.kernel;
    const char *lib = cpu->blas.library;
    const char *fix = cpu->blas.fix;
    bool generic = cpu->blas.generic == 1;
    const dg_rec_metric others = cpu->matmul.window.others_cpus;
    bool contended = others.valid && others.value >= d->th[TH_CONTENTION_CPUS];
    bool low = cpu->matmul.fraction_of_peak.valid && frac < d->th[TH_CPU_PEAK_FRACTION_MIN];
    /* The cores the peak counts (older records: the physical cores) and the
     * threads a baseline should run on them. */
    double cores = cpu->peak_usable.valid ? cpu->peak_usable.value : cpu->peak_cores.value;
    bool have_cores = (cpu->peak_usable.valid || cpu->peak_cores.valid) && cores > 0;
    int advised = cpu->peak_advised.valid && cpu->peak_advised.value >= 1
                      ? dg_rec_int(cpu->peak_advised)
                  : have_cores && cores >= 1 ? (int)floor(cores + 1e-9)
                                             : 0;
    /* The gate's own GEMM on fewer threads than that. */
    int gthreads = cpu->matmul.threads.valid ? dg_rec_int(cpu->matmul.threads) : 0;
    bool few_gate = gthreads > 0 && advised > 0 && gthreads < advised;
    /* The training runs' threads against the same cores. */
    const char *fsrc, *ffield;
    int fthreads = fixture_threads(d, &fsrc, &ffield);
    bool few_fixture = fthreads > 0 && advised > 0 && fthreads < advised;
    /* A product too small for steady state: its flops per thread. */
    int per = gthreads > 0 ? gthreads : advised > 0 ? advised : 1;
    double flops_per_thread = 2.0 * pm * pn * (double)pk / per;
    bool small = pm > 0 && pn > 0 && pk > 0 && flops_per_thread < SMALL_FLOPS_PER_THREAD;
    /* A low fraction measured while other work ran is contended's business,
     * unless the kernel or the threads explain it. */
    if (!generic && !few_gate && !few_fixture && !(low && !contended))
        return;
    char cause[700] = "";
    if (generic)
        dg_cat(cause, sizeof cause, "kernel: %s runs its %s kernel (%.0f-bit vectors) on a %s CPU",
               lib ? lib : "the BLAS", kernel ? kernel : "?", cpu->blas.vector_bits.value,
               cpu->peak_isa ? cpu->peak_isa : "?");
    if (few_gate)
        dg_cat(cause, sizeof cause,
               "%sthreads: the gate's GEMM ran on %d thread%s (%s) of %g usable cores",
               cause[0] ? "; " : "", gthreads, gthreads == 1 ? "" : "s",
               cpu->matmul.threads_source ? cpu->matmul.threads_source : "?", cores);
    if (few_fixture)
        dg_cat(cause, sizeof cause,
               "%sthreads: the fixture's cpu baseline runs %d thread%s (%s) on %g usable cores",
               cause[0] ? "; " : "", fthreads, fthreads == 1 ? "" : "s", fsrc ? fsrc : "?", cores);
    if (low && !contended && !generic && !few_gate && small)
        dg_cat(cause, sizeof cause,
               "%ssmall GEMM: %dx%dx%d is %.0f MFLOP per thread on %d thread%s, too little to "
               "reach steady state",
               cause[0] ? "; " : "", pm, pn, pk, flops_per_thread / 1e6, per, per == 1 ? "" : "s");
    else if (low && !contended && !generic && !few_gate)
        dg_cat(cause, sizeof cause,
               "%s%s kernel %s reaches only this at %dx%dx%d on %d thread%s: neither the kernel's "
               "vector width nor the thread count explains it",
               cause[0] ? "; " : "", lib ? lib : "BLAS", kernel ? kernel : "not identified", pm, pn,
               pk, per, per == 1 ? "" : "s");
    char peakhow[160] = "";
    if (have_cores && cpu->peak_per_core.valid)
        snprintf(peakhow, sizeof peakhow, " (%g cores x %.0f GFLOP/s)", cores,
                 cpu->peak_per_core.value);
    cJSON *f = dg_rule_finding(d, r, DG_SEV_WARN, -1,
                               "cpu GEMM at %.0f GFLOP/s is %.0f%% of the cores' FP32 peak %.0f "
                               "GFLOP/s%s: %s",
                               gflops, 100 * frac, peak, peakhow, cause);
    char act[700] = "";
    if (generic && fix)
        dg_cat(act, sizeof act, "%s", fix);
    if ((few_gate && cpu->matmul.threads_source &&
         !strcmp(cpu->matmul.threads_source, "OMP_NUM_THREADS")) ||
        (few_fixture && fsrc && !strcmp(fsrc, "OMP_NUM_THREADS")))
        dg_cat(act, sizeof act, "%sunset OMP_NUM_THREADS (or set it to %d)", act[0] ? "; " : "",
               advised);
    else if (few_fixture)
        dg_cat(act, sizeof act, "%srun with --threads 0 (all %d usable cores)", act[0] ? "; " : "",
               advised);
    if (!act[0] && small)
        dg_cat(act, sizeof act,
               "judge the cpu on a product that reaches steady state (devgate gate --backend cpu "
               "--size 2048; a current devgate times one itself)");
    if (!act[0])
        dg_cat(act, sizeof act, "%s", r->action);
    dg_rule_text(d, f, "action", "%s; until then every \"device is N x cpu\" is inflated", act);
    dg_ev_num(d, f, "gate", rate ? "cpu matmul.rate.gflops" : "cpu matmul.gflops", gflops,
              "GFLOP/s");
    dg_ev_metric(d, f, "gate", "GFLOP/s", cpu->peak_fp32, "backends[%d].peak.fp32", bi);
    dg_ev_metric(d, f, "gate", "fraction", cpu->matmul.fraction_of_peak,
                 "backends[%d].matmul.fraction_of_peak", bi);
    dg_ev_num(d, f, "gate", "cpu peak: usable cores", have_cores ? cores : NAN, "cores");
    dg_ev_metric(d, f, "gate", "GFLOP/s", cpu->peak_per_core, "backends[%d].peak.cpu.per_core", bi);
    dg_ev_str(d, f, "gate", kernel, "backends[%d].blas.kernel", bi);
    dg_ev_num(d, f, "gate", "cpu matmul: m*n*k", (double)pm * pn * pk, "");
    if (gthreads > 0)
        dg_ev_metric(d, f, "gate", "threads", cpu->matmul.threads, "backends[%d].matmul.threads",
                     bi);
    if (few_fixture)
        dg_ev_num(d, f, "compare", ffield, fthreads, "threads");
}
