/* The cpu side's OpenMP team, sized at each step to the cores other
 * processes leave free (docs/measure.md, "Fair baselines"). */
#ifndef DG_ENV_CPU_TEAM_H
#define DG_ENV_CPU_TEAM_H

#include "core/core.h"
#include "core/json.h"

#include <sched.h>

/* Seconds between two looks at what others ran. */
#define DG_CPU_TEAM_INTERVAL_S 0.25
/* The first look comes sooner: a short run (80 sub-millisecond steps) would
 * otherwise end on the team it started with. Five clock ticks of /proc/stat. */
#define DG_CPU_TEAM_FIRST_S 0.05

typedef struct dg_cpu_team {
    int max;            /* the team asked for (dg_cpu_threads_resolve) */
    const char *source; /* where max came from: "--threads", "OMP_NUM_THREADS", "usable cores" */
    bool adaptive;      /* max is the usable cores: the team follows the free cores */
    double usable;      /* the usable cores (dg_cpu_topo_get) */
    int threads;        /* the team now */
    double others;      /* cores others kept busy over the last interval; NAN before one */
    const char *root;   /* where /proc/stat is read (NULL the running system; tests: a fixture) */
    cpu_set_t mask;     /* the CPUs counted: this process's affinity mask */
    bool mask_ok;       /* false: every CPU of /proc/stat counted */
    /* the last look: time, busy seconds of the mask's CPUs, this process's CPU seconds */
    double t_last, busy_last, own_last;
    bool snap_ok;
    /* over the steps since dg_cpu_team_mark: thread-seconds, seconds, the fewest threads,
     * others' core-seconds over the measured intervals and those intervals' seconds */
    double t_mark, thread_s, span_s, others_s, measured_s, others_max;
    int fewest, resizes;
    int looks; /* looks taken since init (the first after DG_CPU_TEAM_FIRST_S) */
} dg_cpu_team;

/* Starts a team for a requested thread count (0: OMP_NUM_THREADS, else the
 * usable cores), sets OpenMP's team to it and takes the first look. */
void dg_cpu_team_init(dg_cpu_team *t, int requested);
/* At a step's start: when DG_CPU_TEAM_INTERVAL_S (the first time
 * DG_CPU_TEAM_FIRST_S) has passed since the last
 * look, what others ran since (the busy time of the affinity mask's CPUs in
 * /proc/stat less this process's CPU time), and for an adaptive team the
 * size dg_cpu_team_size gives, set as OpenMP's team; the team's size. */
int dg_cpu_team_step(dg_cpu_team *t);
/* Restarts the run's tallies (the timed steps start here). */
void dg_cpu_team_mark(dg_cpu_team *t);
/* The team for `others` cores kept busy by other processes: the usable
 * cores less others, rounded to nearest, between 1 and max (max when others
 * is not known). Pure. */
int dg_cpu_team_size(int max, double usable, double others);
/* Busy seconds (all but idle and iowait) of the CPUs in mask (NULL: every
 * CPU) from root's /proc/stat (NULL: the running system's), false when
 * unreadable. */
bool dg_cpu_busy_s(const char *root, const cpu_set_t *mask, double *busy_s);
/* {threads_asked: METRIC(threads), source, adaptive, threads_mean: METRIC(threads)
 *  (time-weighted since the mark), threads_fewest: METRIC(threads), resizes,
 *  others_busy: METRIC(cores) (mean over the measured intervals), others_busy_max:
 *  METRIC(cores), interval: METRIC(s)} (docs/schema/measure.md "train") */
cJSON *dg_cpu_team_json(const dg_cpu_team *t);
#endif
