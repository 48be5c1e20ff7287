/* Contention seen while it happens (docs/measure.md, "Contention"): a measured
 * window is bracketed by two snapshots of the kernel's cumulative counters,
 * so what the window reports is what happened during it, not at its start:
 * CPU and memory pressure stall time (/proc/pressure/{cpu,memory} "some
 * total"), steal time (/proc/stat), and every other process's CPU time
 * (/proc/PID/stat utime + stime). A process that started inside the window
 * counts with all its time; one that ended inside it is not seen. */
#include "measure/measure.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct proc_ticks {
    int pid, ppid;
    unsigned long long start, ticks;
    char name[32];
} proc_ticks;

struct dg_window {
    double t0;
    double up0; /* seconds since boot at the start */
    double cpu_some_us, mem_some_us;
    bool cpu_psi, mem_psi;
    unsigned long long stat_total, stat_steal;
    bool stat_ok;
    proc_ticks *procs;
    size_t nprocs;
    bool procs_ok;
};

/* "some ... total=N" of a PSI file in microseconds. */
static bool psi_total(const char *path, double *us)
{
    char *t = dg_read_file(path, 4096, NULL);
    bool ok = false;
    if (t && strncmp(t, "some ", 5) == 0) {
        const char *p = strstr(t, "total=");
        const char *nl = strchr(t, '\n');
        if (p && (!nl || p < nl)) {
            *us = strtod(p + 6, NULL);
            ok = true;
        }
    }
    dg_free(t);
    return ok;
}

/* All jiffies and the steal jiffies of the "cpu" line of /proc/stat. */
static bool stat_ticks(unsigned long long *total, unsigned long long *steal)
{
    char *t = dg_read_file("/proc/stat", 1 << 16, NULL);
    bool ok = false;
    if (t && strncmp(t, "cpu ", 4) == 0) {
        unsigned long long v[10] = {0};
        if (dg_parse_counters(t + 4, v, 10) >= 8) {
            /* user nice system idle iowait irq softirq steal (guest is in user) */
            *total = 0;
            for (int i = 0; i < 8; i++)
                *total += v[i];
            *steal = v[7];
            ok = true;
        }
    }
    dg_free(t);
    return ok;
}

static double uptime_s(void)
{
    char *t = dg_read_file("/proc/uptime", 256, NULL);
    double v = t ? strtod(t, NULL) : -1;
    dg_free(t);
    return v;
}

/* One /proc/PID/stat: name (comm), ppid, utime + stime, starttime. */
static bool read_proc(int pid, proc_ticks *out)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    char *t = dg_read_file(path, 4096, NULL);
    if (!t)
        return false;
    char *l = strchr(t, '('), *r = strrchr(t, ')');
    bool ok = false;
    if (l && r && r > l) {
        size_t n = (size_t)(r - l - 1);
        if (n >= sizeof out->name)
            n = sizeof out->name - 1;
        memcpy(out->name, l + 1, n);
        out->name[n] = '\0';
        for (char *c = out->name; *c; c++)
            if (!isprint((unsigned char)*c))
                *c = '?';
        /* Fields after ')': 3 state, 4 ppid, ... 14 utime, 15 stime, ... 22 starttime. */
        unsigned long long f[23] = {0};
        char *p = r + 2;
        int field = 3;
        while (*p && field <= 22) {
            char *end;
            if (field == 3) {
                end = strchr(p, ' ');
                if (!end)
                    break;
            } else {
                f[field] = strtoull(p, &end, 10);
                if (end == p)
                    break;
            }
            p = end + (*end == ' ');
            field++;
        }
        if (field > 22) {
            out->pid = pid;
            out->ppid = (int)f[4];
            out->ticks = f[14] + f[15];
            out->start = f[22];
            ok = true;
        }
    }
    dg_free(t);
    return ok;
}

static int by_pid(const void *a, const void *b)
{
    const proc_ticks *x = a, *y = b;
    return (x->pid > y->pid) - (x->pid < y->pid);
}

static bool scan(proc_ticks **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return false;
    size_t cap = 0;
    bool ok = true;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        if (*n == cap) {
            size_t nc = cap ? cap * 2 : 256;
            proc_ticks *v = dg_realloc(*out, nc * sizeof *v);
            if (!v) {
                ok = false;
                break;
            }
            *out = v;
            cap = nc;
        }
        if (read_proc(atoi(e->d_name), &(*out)[*n]))
            (*n)++;
    }
    closedir(d);
    if (ok && *n)
        qsort(*out, *n, sizeof **out, by_pid);
    return ok;
}

dg_window *dg_window_begin(void)
{
    dg_window *w = dg_calloc(1, sizeof *w);
    if (!w)
        return NULL;
    /* The process scan first (it takes milliseconds), then the counters and
     * the clock together, so the window is what the caller measures. */
    w->procs_ok = scan(&w->procs, &w->nprocs);
    w->up0 = uptime_s();
    w->cpu_psi = psi_total("/proc/pressure/cpu", &w->cpu_some_us);
    w->mem_psi = psi_total("/proc/pressure/memory", &w->mem_some_us);
    w->stat_ok = stat_ticks(&w->stat_total, &w->stat_steal);
    w->t0 = dg_now();
    return w;
}

void dg_window_free(dg_window *w)
{
    if (!w)
        return;
    dg_free(w->procs);
    dg_free(w);
}

/* Our own process and its children are not "other". */
static bool is_self(const proc_ticks *p, int self)
{
    return p->pid == self || p->ppid == self;
}

static int by_share_desc(const void *a, const void *b)
{
    const proc_ticks *x = a, *y = b; /* ticks here hold the window's delta */
    return (x->ticks < y->ticks) - (x->ticks > y->ticks);
}

cJSON *dg_window_end(dg_window *w)
{
    if (!w)
        return cJSON_CreateNull();
    double t1 = dg_now(), dt = t1 - w->t0;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddItemToObject(o, "wall", dg_json_metric(dt, dt > 0, "s"));
    double us = 0;
    bool cv = w->cpu_psi && psi_total("/proc/pressure/cpu", &us) && dt > 0;
    double cpu_share = cv ? fmin(fmax((us - w->cpu_some_us) / 1e6 / dt, 0), 1) : NAN;
    cJSON_AddItemToObject(o, "cpu_pressure_some",
                          dg_json_metric(cpu_share, cv && isfinite(cpu_share), "fraction"));
    bool mv = w->mem_psi && psi_total("/proc/pressure/memory", &us) && dt > 0;
    double mem_share = mv ? fmin(fmax((us - w->mem_some_us) / 1e6 / dt, 0), 1) : NAN;
    cJSON_AddItemToObject(o, "memory_pressure_some",
                          dg_json_metric(mem_share, mv && isfinite(mem_share), "fraction"));
    unsigned long long tot = 0, steal = 0;
    bool sv = w->stat_ok && stat_ticks(&tot, &steal) && tot > w->stat_total;
    double steal_share = sv ? (double)(steal - w->stat_steal) / (double)(tot - w->stat_total) : NAN;
    cJSON_AddItemToObject(o, "steal", dg_json_metric(steal_share, sv, "fraction"));

    proc_ticks *now = NULL;
    size_t n = 0;
    long hz = sysconf(_SC_CLK_TCK);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    bool pv = w->procs_ok && scan(&now, &n) && hz > 0 && dt > 0;
    int self = (int)getpid();
    double others = 0;
    size_t kept = 0;
    for (size_t i = 0; pv && i < n; i++) {
        proc_ticks *p = &now[i];
        if (is_self(p, self))
            continue;
        proc_ticks key = {.pid = p->pid};
        const proc_ticks *old =
            w->nprocs ? bsearch(&key, w->procs, w->nprocs, sizeof key, by_pid) : NULL;
        unsigned long long base;
        if (old && old->start == p->start && old->ticks <= p->ticks)
            base = old->ticks;
        else if (w->up0 >= 0 && (double)p->start / (double)hz >= w->up0 - 0.02)
            base = 0; /* started inside the window */
        else
            continue; /* pid reused or unreadable before: not judged */
        unsigned long long d = p->ticks - base;
        if (!d)
            continue;
        others += (double)d / (double)hz;
        now[kept] = *p;
        now[kept].ticks = d;
        kept++;
    }
    /* In CPUs' worth (1 = one CPU busy the whole window) and as a share of the machine. */
    double busy = pv ? others / dt : NAN;
    /* Whole clock ticks over a short window round up: never more than the machine. */
    if (pv && ncpu > 0 && busy > (double)ncpu)
        busy = (double)ncpu;
    cJSON_AddItemToObject(o, "others_cpus", dg_json_metric(busy, pv, "cpus"));
    cJSON_AddItemToObject(
        o, "others_share",
        dg_json_metric(pv && ncpu > 0 ? busy / (double)ncpu : NAN, pv && ncpu > 0, "fraction"));
    cJSON *top = cJSON_AddArrayToObject(o, "top");
    if (kept)
        qsort(now, kept, sizeof *now, by_share_desc);
    for (size_t i = 0; i < kept && i < 10; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "pid", now[i].pid);
        cJSON_AddStringToObject(e, "name", now[i].name);
        cJSON_AddItemToObject(
            e, "cpu_percent",
            dg_json_metric((double)now[i].ticks / (double)hz / dt * 100, true, "percent"));
        cJSON_AddItemToArray(top, e);
    }
    if (ncpu > 0)
        cJSON_AddNumberToObject(o, "cpus_online", (double)ncpu);
    dg_free(now);
    return o;
}
