/* The cpu side's OpenMP team, sized to the cores others leave free (issue 21
 * item 9). The kernels split each op into one static share per thread: when
 * another process takes a core, the thread that shares it finishes its share
 * late and every thread waits for it at the op's end, each op of the step,
 * so a 2-core step beside one busy process took ten to a hundred times its
 * time at rest. A team no larger than the free cores degrades by the cores
 * lost. What others ran is read every DG_CPU_TEAM_INTERVAL_S: the busy time
 * of this process's CPUs (/proc/stat, steal included: the host took it)
 * less this process's own CPU time (its spinning threads included). */
#include "env/cpu_team.h"
#include "env/peak.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double own_cpu_s(void)
{
    struct timespec ts;
    return clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0 ? ts.tv_sec + ts.tv_nsec * 1e-9 : NAN;
}

bool dg_cpu_busy_s(const char *root, const cpu_set_t *mask, double *busy_s)
{
    char path[512];
    if (snprintf(path, sizeof path, "%s/proc/stat", root ? root : "") >= (int)sizeof path)
        return false;
    char *text = dg_read_file(path, 1 << 22, NULL);
    if (!text)
        return false;
    long hz = sysconf(_SC_CLK_TCK);
    unsigned long long busy = 0;
    int cpus = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        /* cpuN user nice system idle iowait irq softirq steal [guest guest_nice]: guest
         * time is in user already */
        char *end;
        if (strncmp(line, "cpu", 3) != 0 || line[3] < '0' || line[3] > '9')
            continue;
        long cpu = strtol(line + 3, &end, 10);
        if (cpu < 0 || cpu >= CPU_SETSIZE || (mask && !CPU_ISSET((int)cpu, mask)))
            continue;
        unsigned long long v[8] = {0};
        if (dg_parse_counters(end, v, 8) < 5)
            continue;
        busy += v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
        cpus++;
    }
    dg_free(text);
    if (cpus == 0 || hz <= 0)
        return false;
    *busy_s = (double)busy / (double)hz;
    return true;
}

int dg_cpu_team_size(int max, double usable, double others)
{
    if (max < 1)
        max = 1;
    if (!isfinite(others) || !isfinite(usable) || others < 0)
        return max;
    double free = floor(usable - others + 0.5);
    return free >= max ? max : free < 1 ? 1 : (int)free;
}

/* One look at the busy time and this process's; false when unreadable. */
static bool look(dg_cpu_team *t, double *now, double *busy, double *own)
{
    *now = dg_now();
    *own = own_cpu_s();
    return dg_cpu_busy_s(t->root, t->mask_ok ? &t->mask : NULL, busy) && isfinite(*own);
}

void dg_cpu_team_init(dg_cpu_team *t, int requested)
{
    const char *root = t->root; /* a test's fixture survives the reset */
    memset(t, 0, sizeof *t);
    t->root = root;
    t->max = dg_cpu_threads_resolve(requested, &t->source);
    t->adaptive = strcmp(t->source, "usable cores") == 0;
    t->usable = dg_cpu_topo_get()->usable;
    t->threads = t->max;
    t->others = NAN;
    t->mask_ok = !root && sched_getaffinity(0, sizeof t->mask, &t->mask) == 0;
    t->snap_ok = look(t, &t->t_last, &t->busy_last, &t->own_last);
    omp_set_num_threads(t->threads);
    dg_cpu_team_mark(t);
}

void dg_cpu_team_mark(dg_cpu_team *t)
{
    t->t_mark = dg_now();
    t->thread_s = t->span_s = t->others_s = t->measured_s = 0;
    t->others_max = NAN;
    t->fewest = t->threads;
    t->resizes = 0;
}

int dg_cpu_team_step(dg_cpu_team *t)
{
    double now = dg_now();
    if (now - t->t_last < (t->looks ? DG_CPU_TEAM_INTERVAL_S : DG_CPU_TEAM_FIRST_S))
        return t->threads;
    t->looks++;
    double busy, own;
    bool ok = look(t, &now, &busy, &own);
    double dt = now - t->t_last;
    /* The span since the last look ran on the team set then. */
    double from = t->t_last > t->t_mark ? t->t_last : t->t_mark;
    if (now > from) {
        t->thread_s += t->threads * (now - from);
        t->span_s += now - from;
    }
    if (ok && t->snap_ok && dt > 0) {
        double others = ((busy - t->busy_last) - (own - t->own_last)) / dt;
        t->others = others > 0 ? others : 0;
        t->others_s += t->others * dt;
        t->measured_s += dt;
        if (!(t->others <= t->others_max))
            t->others_max = t->others;
    }
    t->snap_ok = ok;
    t->t_last = now;
    t->busy_last = busy;
    t->own_last = own;
    int n = t->adaptive ? dg_cpu_team_size(t->max, t->usable, t->others) : t->max;
    if (n != t->threads) {
        t->threads = n;
        t->resizes++;
        omp_set_num_threads(n);
    }
    if (n < t->fewest)
        t->fewest = n;
    return n;
}

cJSON *dg_cpu_team_json(const dg_cpu_team *t)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    /* The span after the last look ran on the team set then. */
    double now = dg_now(), from = t->t_last > t->t_mark ? t->t_last : t->t_mark;
    double ts = t->thread_s + (now > from ? t->threads * (now - from) : 0);
    double span = t->span_s + (now > from ? now - from : 0);
    bool measured = t->measured_s > 0;
    cJSON_AddItemToObject(o, "threads_asked", dg_json_metric(t->max, t->max > 0, "threads"));
    cJSON_AddStringToObject(o, "source", t->source ? t->source : "none");
    cJSON_AddBoolToObject(o, "adaptive", t->adaptive);
    cJSON_AddItemToObject(o, "threads_mean",
                          dg_json_metric(span > 0 ? ts / span : 0, span > 0, "threads"));
    cJSON_AddItemToObject(o, "threads_fewest", dg_json_metric(t->fewest, t->fewest > 0, "threads"));
    cJSON_AddNumberToObject(o, "resizes", t->resizes);
    cJSON_AddItemToObject(
        o, "others_busy",
        dg_json_metric(measured ? t->others_s / t->measured_s : 0, measured, "cores"));
    cJSON_AddItemToObject(o, "others_busy_max",
                          dg_json_metric(t->others_max, isfinite(t->others_max), "cores"));
    cJSON_AddItemToObject(o, "interval", dg_json_metric(DG_CPU_TEAM_INTERVAL_S, true, "s"));
    return o;
}
