/* The supervised program's process tree: who belongs to it (the child, its
 * process group, their descendants by parent pid, orphans re-parented to the
 * supervisor as subreaper), signalling it, and sampling it: resident set,
 * CPU, threads and processes over the tree, machine swap and memory
 * pressure, and the tree's GPU memory through NVML (measure/nvml.h). */
#include "supervise/supervise.h"

#include "measure/measure.h"
#include "measure/nvml.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_KNOWN 4096
#define MAX_STORED                                                                                 \
    32768 /* points kept; beyond, every other one is dropped and the stride doubles */

bool dg_proc_parse_stat(const char *txt, dg_proc_entry *e, double page)
{
    const char *p = strrchr(txt, ')');
    if (!p || p[1] != ' ')
        return false;
    p += 2;
    if (!*p) /* text ends after ") ": no state letter, no fields */
        return false;
    e->state = *p;
    /* Fields from 4 (ppid) on. */
    char *end;
    unsigned long long f[21];
    const char *q = p + 1;
    for (int i = 0; i < 21; i++) {
        errno = 0;
        long long v = strtoll(q, &end, 10);
        if (end == q || errno)
            return false;
        f[i] = (unsigned long long)v;
        q = end;
    }
    /* f[0] = field 4 ppid, f[1] pgrp, f[10] utime (14), f[11] stime, f[16] threads (20),
     * f[18] starttime (22), f[20] rss pages (24). */
    e->ppid = (pid_t)f[0];
    e->pgid = (pid_t)f[1];
    e->ticks = f[10] + f[11];
    e->threads = (long)f[16];
    e->starttime = f[18];
    e->rss = (double)(long long)f[20] * page;
    return true;
}

dg_proc_entry *dg_proc_scan(size_t *n)
{
    *n = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return NULL;
    double page = (double)sysconf(_SC_PAGESIZE);
    size_t cap = 512, k = 0;
    dg_proc_entry *v = dg_malloc(cap * sizeof *v);
    struct dirent *de;
    while (v && (de = readdir(d)) != NULL) {
        const char *nm = de->d_name;
        if (nm[0] < '1' || nm[0] > '9')
            continue;
        char *end;
        long pid = strtol(nm, &end, 10);
        if (*end || pid <= 0)
            continue;
        char path[64], buf[1024];
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        if (!dg_read_small(path, buf, sizeof buf))
            continue;
        dg_proc_entry e;
        memset(&e, 0, sizeof e);
        e.pid = (pid_t)pid;
        if (!dg_proc_parse_stat(buf, &e, page))
            continue;
        if (k == cap) {
            dg_proc_entry *nv = dg_realloc(v, 2 * cap * sizeof *nv);
            if (!nv)
                break;
            v = nv;
            cap *= 2;
        }
        v[k++] = e;
    }
    closedir(d);
    if (!v)
        return NULL;
    *n = k;
    return v;
}

bool dg_proc_stat(pid_t pid, dg_proc_entry *e)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    if (!dg_read_small(path, buf, sizeof buf))
        return false;
    memset(e, 0, sizeof *e);
    e->pid = pid;
    return dg_proc_parse_stat(buf, e, (double)sysconf(_SC_PAGESIZE));
}

static int by_pid(const void *a, const void *b)
{
    pid_t x = ((const dg_proc_entry *)a)->pid, y = ((const dg_proc_entry *)b)->pid;
    return (x > y) - (x < y);
}

static bool is_known(const dg_tree *t, const dg_proc_entry *e)
{
    for (size_t i = 0; i < t->nknown; i++)
        if (t->known[i].pid == e->pid && t->known[i].starttime == e->starttime)
            return true;
    return false;
}

static bool live(const dg_proc_entry *e)
{
    return e->state != 'Z' && e->state != 'X' && e->state != 'x';
}

size_t dg_tree_members(dg_tree *t, const dg_proc_entry *all, size_t n, dg_proc_entry *out,
                       size_t max)
{
    if (!all || !n)
        return 0;
    dg_proc_entry *v = dg_malloc(n * sizeof *v);
    bool *in = dg_calloc(n ? n : 1, sizeof *in);
    if (!v || !in) {
        dg_free(v);
        dg_free(in);
        return 0;
    }
    memcpy(v, all, n * sizeof *v);
    qsort(v, n, sizeof *v, by_pid);
    for (size_t i = 0; i < n; i++) {
        const dg_proc_entry *e = &v[i];
        if (e->pid == t->self)
            continue;
        in[i] = (e->pid == t->child && e->starttime == t->child_start) ||
                (t->pgid > 0 && e->pgid == t->pgid) || is_known(t, e) ||
                (t->subreaper && e->ppid == t->self && e->starttime >= t->child_start);
    }
    /* Descendants by parent pid, until nothing changes. */
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < n; i++) {
            if (in[i] || v[i].pid == t->self)
                continue;
            dg_proc_entry key = {.pid = v[i].ppid};
            const dg_proc_entry *par = bsearch(&key, v, n, sizeof *v, by_pid);
            if (par && in[par - v]) {
                in[i] = true;
                changed = true;
            }
        }
    }
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        if (!in[i] || !live(&v[i]))
            continue;
        if (out && count < max)
            out[count] = v[i];
        count++;
        if (!is_known(t, &v[i]) && t->nknown < MAX_KNOWN) {
            if (!dg_grow((void **)&t->known, &t->known_cap, t->nknown + 1, sizeof *t->known))
                continue;
            t->known[t->nknown++] = v[i];
        }
    }
    dg_free(v);
    dg_free(in);
    return count;
}

size_t dg_tree_kill(dg_tree *t, int sig, bool exclude_child)
{
    size_t n = 0, sent = 0;
    dg_proc_entry *all = dg_proc_scan(&n);
    dg_proc_entry *m = all ? dg_malloc((n ? n : 1) * sizeof *m) : NULL;
    size_t k = m ? dg_tree_members(t, all, n, m, n) : 0;
    /* The group in one call (each member gets the signal once), then the
     * members that left it. With exclude_child the child is gone already. */
    bool group = t->pgid > 0 && kill(-t->pgid, sig) == 0;
    for (size_t i = 0; i < k && m; i++) {
        bool is_child = m[i].pid == t->child;
        if (exclude_child && is_child)
            continue;
        bool in_group = group && m[i].pgid == t->pgid;
        if ((in_group || kill(m[i].pid, sig) == 0) && !is_child)
            sent++;
    }
    dg_free(m);
    dg_free(all);
    return sent;
}

void dg_tree_reap(dg_tree *t)
{
    for (size_t i = 0; i < t->nknown; i++) {
        if (t->known[i].pid == t->child)
            continue;
        int st;
        while (waitpid(t->known[i].pid, &st, WNOHANG) < 0 && errno == EINTR) {
        }
    }
}

void dg_tree_free(dg_tree *t)
{
    dg_free(t->known);
    t->known = NULL;
    t->nknown = t->known_cap = 0;
}

/* ---- the sampler ------------------------------------------------------------------ */

typedef struct prev_cpu {
    pid_t pid;
    unsigned long long start, ticks;
} prev_cpu;

struct dg_tree_sampler {
    dg_tree *tree;
    double tick_hz;
    /* NVML */
    dg_nvml nv;
    bool nvml_open;
    char gpu_source[200];
    /* CPU deltas */
    prev_cpu *prev;
    size_t nprev;
    double prev_t;
    bool have_prev;
    /* points */
    dg_tree_point *pts;
    size_t npts, cap;
    unsigned long long taken, stride;
    /* summary */
    double rss_peak, threads_peak, procs_peak, psi_peak, gpu_peak, swap_first, swap_last;
    double epoch_rss_peak;
};

dg_tree_sampler *dg_tree_sampler_new(dg_tree *t, bool nvml)
{
    dg_tree_sampler *s = dg_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->tree = t;
    long hz = sysconf(_SC_CLK_TCK);
    s->tick_hz = hz > 0 ? (double)hz : 100.0;
    s->stride = 1;
    s->rss_peak = s->threads_peak = s->procs_peak = s->psi_peak = s->gpu_peak = NAN;
    s->swap_first = s->swap_last = s->epoch_rss_peak = NAN;
    if (!nvml) {
        snprintf(s->gpu_source, sizeof s->gpu_source, "not asked for");
    } else {
        char why[160];
        dg_nvml_open_result r = dg_nvml_open(&s->nv, why, sizeof why);
        s->nvml_open = r == DG_NVML_LOADED;
        if (s->nvml_open)
            snprintf(s->gpu_source, sizeof s->gpu_source, "nvml");
        else
            snprintf(s->gpu_source, sizeof s->gpu_source, "%s: %s",
                     r == DG_NVML_ABSENT ? "no NVML" : "NVML unusable", why);
    }
    return s;
}

void dg_tree_sampler_free(dg_tree_sampler *s)
{
    if (!s)
        return;
    if (s->nvml_open)
        dg_nvml_close(&s->nv);
    dg_free(s->prev);
    dg_free(s->pts);
    dg_free(s);
}

const char *dg_tree_sampler_gpu_source(const dg_tree_sampler *s)
{
    return s ? s->gpu_source : "none";
}

static int by_u(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

/* GPU memory in bytes used by the pids m[0..k) on every NVIDIA device; NAN
 * when NVML gave nothing usable. *util gets the utilisation (percent, the
 * device's, NVML has no per-process figure) of the busiest device the pids
 * have a process on, NAN when none or unreadable; *power the power drawn by
 * the devices the pids have a process on (W, device-wide), NAN likewise. */
static double gpu_mem_of(dg_tree_sampler *s, const dg_proc_entry *m, size_t k, double *util,
                         double *power)
{
    *util = *power = NAN;
    if (!s->nvml_open)
        return NAN;
    unsigned *pids = dg_malloc((k ? k : 1) * sizeof *pids);
    if (!pids)
        return NAN;
    for (size_t i = 0; i < k; i++)
        pids[i] = (unsigned)m[i].pid;
    qsort(pids, k, sizeof *pids, by_u);
    unsigned int ndev = 0;
    bool any = false;
    double sum = 0;
    if (s->nv.count(&ndev) == DG_NVML_OK) {
        for (unsigned int d = 0; d < ndev && d < 64; d++) {
            dg_nvml_device h;
            if (s->nv.handle(d, &h) != DG_NVML_OK)
                continue;
            dg_nvml_procs_fn fns[2] = {s->nv.compute, s->nv.graphics};
            bool here = false; /* the tree has a process on this device */
            for (int f = 0; f < 2; f++) {
                dg_nvml_proc *v = NULL;
                unsigned int cnt = 0;
                if (!fns[f] || dg_nvml_processes(fns[f], h, &v, &cnt) != DG_NVML_OK)
                    continue;
                any = true;
                for (unsigned int i = 0; i < cnt; i++) {
                    unsigned key = v[i].pid;
                    if (!bsearch(&key, pids, k, sizeof *pids, by_u))
                        continue;
                    here = true;
                    if (v[i].usedGpuMemory != DG_NVML_NOT_AVAILABLE)
                        sum += (double)v[i].usedGpuMemory;
                }
                dg_free(v);
            }
            dg_nvml_util u;
            if (here && s->nv.util && s->nv.util(h, &u) == DG_NVML_OK && u.gpu <= 100)
                *util = isnan(*util) || (double)u.gpu > *util ? (double)u.gpu : *util;
            unsigned int mw = 0;
            if (here && s->nv.power && s->nv.power(h, &mw) == DG_NVML_OK)
                *power = (isnan(*power) ? 0 : *power) + mw / 1000.0;
        }
    }
    dg_free(pids);
    return any ? sum : NAN;
}

static double nmax(double a, double b)
{
    return isnan(a) ? b : isnan(b) ? a : (a > b ? a : b);
}

static void store(dg_tree_sampler *s, const dg_tree_point *p)
{
    if (s->taken++ % s->stride != 0)
        return;
    if (s->npts == MAX_STORED) {
        for (size_t i = 0; i < s->npts / 2; i++)
            s->pts[i] = s->pts[2 * i];
        s->npts /= 2;
        s->stride *= 2;
    }
    if (!dg_grow((void **)&s->pts, &s->cap, s->npts + 1, sizeof *s->pts))
        return;
    s->pts[s->npts++] = *p;
}

double dg_tree_rss(const dg_proc_entry *m, size_t k)
{
    double rss = 0;
    size_t holding = 0;
    for (size_t i = 0; i < k; i++) {
        if (m[i].rss > 0) {
            rss += m[i].rss;
            holding++;
        }
    }
    return holding ? rss : NAN;
}

size_t dg_tree_sample(dg_tree_sampler *s, double t_s)
{
    size_t n = 0;
    dg_proc_entry *all = dg_proc_scan(&n);
    dg_proc_entry *m = all ? dg_malloc((n ? n : 1) * sizeof *m) : NULL;
    size_t k = m ? dg_tree_members(s->tree, all, n, m, n) : 0;
    dg_free(all);
    dg_tree_point p = {
        .t = t_s, .cpu_pct = NAN, .swap = NAN, .psi = NAN, .gpu_mem = NAN, .gpu_util = NAN};
    p.gpu_power = NAN;
    double ticks_delta = 0;
    p.rss = m ? dg_tree_rss(m, k) : NAN;
    for (size_t i = 0; i < k; i++) {
        p.threads += (double)m[i].threads;
        unsigned long long before = 0;
        for (size_t j = 0; j < s->nprev; j++) {
            if (s->prev[j].pid == m[i].pid && s->prev[j].start == m[i].starttime) {
                before = s->prev[j].ticks;
                break;
            }
        }
        /* A process first seen now counts with its whole CPU time since the
         * last sample only when it started after it; otherwise it is a baseline. */
        if (m[i].ticks >= before && (before || s->have_prev))
            ticks_delta += (double)(m[i].ticks - before);
    }
    p.procs = (double)k;
    if (s->have_prev && t_s > s->prev_t)
        p.cpu_pct = 100.0 * ticks_delta / s->tick_hz / (t_s - s->prev_t);
    /* Keep this sample's CPU figures for the next delta. */
    prev_cpu *np = dg_realloc(s->prev, (k ? k : 1) * sizeof *np);
    if (np) {
        s->prev = np;
        for (size_t i = 0; i < k; i++)
            s->prev[i] = (prev_cpu){m[i].pid, m[i].starttime, m[i].ticks};
        s->nprev = k;
    }
    s->prev_t = t_s;
    s->have_prev = true;
    double v = 0;
    if (dg_swap_used(&v))
        p.swap = v;
    if (dg_psi_memory_some10(&v))
        p.psi = v;
    if (m && k)
        p.gpu_mem = gpu_mem_of(s, m, k, &p.gpu_util, &p.gpu_power);
    else if (s->nvml_open)
        p.gpu_mem = 0;
    dg_free(m);
    if (k == 0)
        return 0; /* the tree is gone (or not there yet): nothing to add */
    s->rss_peak = nmax(s->rss_peak, p.rss);
    s->epoch_rss_peak = nmax(s->epoch_rss_peak, p.rss);
    s->threads_peak = nmax(s->threads_peak, p.threads);
    s->procs_peak = nmax(s->procs_peak, p.procs);
    s->psi_peak = nmax(s->psi_peak, p.psi);
    s->gpu_peak = nmax(s->gpu_peak, p.gpu_mem);
    if (!isnan(p.swap)) {
        if (isnan(s->swap_first))
            s->swap_first = p.swap;
        s->swap_last = p.swap;
    }
    store(s, &p);
    return k;
}

double dg_tree_sampler_take_rss_peak(dg_tree_sampler *s)
{
    double v = s->epoch_rss_peak;
    s->epoch_rss_peak = NAN;
    return v;
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void add_num(cJSON *o, const char *key, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

void dg_tree_sampler_json(const dg_tree_sampler *s, cJSON *sup, size_t max_points)
{
    cJSON *sm = cJSON_AddObjectToObject(sup, "samples");
    size_t n = s ? s->npts : 0;
    cJSON_AddNumberToObject(sm, "count", s ? (double)s->taken : 0);
    cJSON_AddNumberToObject(sm, "stored", (double)n);
    double med = NAN;
    double *cpu = n ? dg_malloc(n * sizeof *cpu) : NULL;
    size_t nc = 0;
    for (size_t i = 0; cpu && i < n; i++)
        if (!isnan(s->pts[i].cpu_pct))
            cpu[nc++] = s->pts[i].cpu_pct;
    if (nc) {
        qsort(cpu, nc, sizeof *cpu, by_double);
        med = nc % 2 ? cpu[nc / 2] : 0.5 * (cpu[nc / 2 - 1] + cpu[nc / 2]);
    }
    dg_free(cpu);
    double rss = s ? s->rss_peak : NAN, thr = s ? s->threads_peak : NAN,
           pr = s ? s->procs_peak : NAN;
    double swg = s && !isnan(s->swap_first) ? s->swap_last - s->swap_first : NAN;
    double psi = s ? s->psi_peak : NAN, gpu = s ? s->gpu_peak : NAN;
    cJSON_AddItemToObject(sm, "rss_peak", dg_json_metric(rss, isfinite(rss), "bytes"));
    cJSON_AddItemToObject(sm, "cpu_pct_median", dg_json_metric(med, isfinite(med), "percent"));
    cJSON_AddItemToObject(sm, "threads_peak", dg_json_metric(thr, isfinite(thr), "threads"));
    cJSON_AddItemToObject(sm, "procs_peak", dg_json_metric(pr, isfinite(pr), "processes"));
    cJSON_AddItemToObject(sm, "swap_growth", dg_json_metric(swg, isfinite(swg), "bytes"));
    cJSON_AddItemToObject(sm, "psi_peak", dg_json_metric(psi, isfinite(psi), "percent"));
    cJSON_AddItemToObject(sm, "gpu_mem_peak", dg_json_metric(gpu, isfinite(gpu), "bytes"));
    cJSON_AddStringToObject(sm, "gpu_source", dg_tree_sampler_gpu_source(s));
    static const char *const units[][2] = {
        {"t", "s"},           {"rss", "bytes"},        {"cpu_pct", "percent"}, {"swap", "bytes"},
        {"gpu_mem", "bytes"}, {"gpu_util", "percent"}, {"gpu_power", "W"}};
    dg_json_add_pairs(sm, "series_units", units, sizeof units / sizeof units[0]);
    /* The series: at most max_points buckets; max for sizes and counts, mean CPU and power,
     * last swap. */
    cJSON *ser = cJSON_AddArrayToObject(sup, "series");
    if (!max_points)
        max_points = 600;
    size_t buckets = n < max_points ? n : max_points;
    for (size_t b = 0; b < buckets; b++) {
        size_t lo = b * n / buckets, hi = (b + 1) * n / buckets;
        double r = NAN, th = NAN, pc = NAN, g = NAN, gu = NAN, sw = NAN, cs = 0, ps = 0;
        size_t cn = 0, pn = 0;
        for (size_t i = lo; i < hi; i++) {
            const dg_tree_point *p = &s->pts[i];
            r = nmax(r, p->rss);
            th = nmax(th, p->threads);
            pc = nmax(pc, p->procs);
            g = nmax(g, p->gpu_mem);
            gu = nmax(gu, p->gpu_util);
            if (!isnan(p->swap))
                sw = p->swap;
            if (!isnan(p->cpu_pct))
                cs += p->cpu_pct, cn++;
            if (!isnan(p->gpu_power))
                ps += p->gpu_power, pn++;
        }
        cJSON *e = cJSON_CreateObject();
        add_num(e, "t", s->pts[hi - 1].t);
        add_num(e, "rss", r);
        add_num(e, "cpu_pct", cn ? cs / (double)cn : NAN);
        add_num(e, "threads", th);
        add_num(e, "procs", pc);
        add_num(e, "swap", sw);
        add_num(e, "gpu_mem", g);
        add_num(e, "gpu_util", gu);
        add_num(e, "gpu_power", pn ? ps / (double)pn : NAN); /* the bucket's mean */
        cJSON_AddItemToArray(ser, e);
    }
}
