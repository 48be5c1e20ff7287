/* Measurement: a background sampler of process and device memory, and the
 * statistics every step reports (docs/measure.md). */
#ifndef DG_MEASURE_H
#define DG_MEASURE_H

#include "backend/backend.h"
#include "core/core.h"
#include "core/json.h"

/* ---- statistics (stats.c) -------------------------------------------------- */

typedef struct dg_stats {
    size_t n; /* values after warm-up */
    double median, q1, q3, iqr, mean, sd, min, max;
    double iqr_share;    /* iqr / median */
    int noise;           /* 0 quiet, 1 warn (IQR > 10% of median), 2 strong (> 25%) */
    size_t outliers;     /* modified z-score |0.6745 (x - median) / MAD| > 3.5 */
    double slope;        /* least-squares trend per index, same unit as the values */
    double thirds_ratio; /* median of the last third / median of the first third (NAN when n < 3) */
} dg_stats;

/* Statistics of v[warmup..n) (v is not modified). n - warmup == 0 gives n = 0
 * and NAN fields. */
void dg_stats_compute(const double *v, size_t n, size_t warmup, dg_stats *out);
/* {n, median, q1, q3, iqr, mean, sd, min, max, iqr_share, noise: "quiet"|"warn"|"strong",
 *  outliers, slope, thirds_ratio} with every value a metric in `unit`. */
cJSON *dg_stats_json(const dg_stats *s, const char *unit);

/* ---- comparisons of two series (stats.c, docs/measure.md) ------------------- */

typedef struct dg_median_ci {
    double point;     /* median(a) / median(b), or median(a) when there is no b */
    double lo, hi;    /* percentile-bootstrap interval at `level` */
    double level;     /* e.g. 0.95 */
    size_t resamples; /* bootstrap resamples drawn */
    bool valid;       /* false when a side is empty, a median is not finite or b's is 0 */
} dg_median_ci;

#define DG_BOOTSTRAP_RESAMPLES 2000
#define DG_BOOTSTRAP_SEED 0x5eed0b007ULL

/* Percentile-bootstrap interval of median(a) / median(b) (b NULL or nb 0: of
 * median(a) alone). Each resample draws na values of a and nb of b with
 * replacement through Philox keyed by seed, so the same inputs and seed give
 * the same interval on every machine. resamples 0: DG_BOOTSTRAP_RESAMPLES;
 * level outside (0, 1): 0.95. False (out->valid false) when it cannot. */
bool dg_bootstrap_median_ci(const double *a, size_t na, const double *b, size_t nb,
                            size_t resamples, double level, uint64_t seed, dg_median_ci *out);

/* Quantile p in [0, 1] of v[0..n) (not modified) by linear interpolation
 * between the closest ranks, as dg_stats_compute's quartiles; NAN when n is 0,
 * p is out of range or out of memory. */
double dg_quantile(const double *v, size_t n, double p);
/* The percentile-bootstrap intervals of the np quantiles p[] of a (each in
 * [0, 1]), from the same resamples (drawn as dg_bootstrap_median_ci draws
 * them, keyed by seed): out[j] gets quantile p[j] as point with its lo, hi.
 * resamples 0: DG_BOOTSTRAP_RESAMPLES; level outside (0, 1): 0.95. False
 * (every out[j].valid false) when a is empty, holds a value that is not
 * finite, or memory runs out. */
bool dg_bootstrap_quantiles_ci(const double *a, size_t na, const double *p, size_t np,
                               size_t resamples, double level, uint64_t seed, dg_median_ci *out);

/* Two-sided Mann-Whitney U test of a against b as scipy.stats.mannwhitneyu
 * (method "auto"): the exact distribution when there are no ties and either
 * side has at most 8 values, else the normal approximation with the tie and
 * continuity corrections. Returns p in [0, 1] (NAN when a side is empty or a
 * value is not finite); *u_a (may be NULL) gets U of a (pairs a > b, ties 1/2). */
double dg_mann_whitney_p(const double *a, size_t na, const double *b, size_t nb, double *u_a);

/* ---- contention during a measured window (contention.c) --------------------- */

typedef struct dg_window dg_window;

/* Snapshots the cumulative counters (CPU and memory PSI "some total", /proc/stat
 * steal, every process's CPU time) at the start of a measured window; NULL when
 * out of memory (dg_window_end(NULL) then gives null). */
dg_window *dg_window_begin(void);
/* What happened during the window: {wall: METRIC(s), cpu_pressure_some,
 * memory_pressure_some: METRIC(fraction of the window some task stalled),
 * steal: METRIC(fraction of CPU time), others_cpus: METRIC(cpus),
 * others_share: METRIC(fraction of the online CPUs), top: [{pid, name,
 * cpu_percent: METRIC(percent of one CPU)}] (other processes, busiest first, at
 * most 10), cpus_online}. Our process and its children are not "others". Does
 * not free w. */
cJSON *dg_window_end(dg_window *w);
void dg_window_free(dg_window *w);

/* ---- the machine-wide measurement lock (lock.c) ------------------------------ */

typedef struct dg_mlock {
    char path[512];
    /* "held", "held by an ancestor" (a devgate measuring the program this one
     * runs in holds it), "timed out", "interrupted", "unavailable" */
    const char *state;
    double waited_s;
    bool held, nested, contended; /* contended: another measurement held it first */
    char error[128];
} dg_mlock;

/* The lock file: $DEVGATE_MEASURE_LOCK, else $XDG_RUNTIME_DIR/devgate-measure.lock,
 * else /tmp/devgate-measure.lock. */
void dg_measure_lock_path(char *buf, size_t len);
/* Takes the lock, waiting up to max_wait_s (polling every 50 ms, giving up
 * when *cancel is set); a measurement goes on unlocked when the lock cannot be
 * had, and l->state says why. Nested takes in one process only count. */
void dg_measure_lock(dg_mlock *l, double max_wait_s, const volatile sig_atomic_t *cancel);
/* Releases what dg_measure_lock took; accepts NULL and a lock not held. */
void dg_measure_unlock(dg_mlock *l);
/* {state, waited: METRIC(s), contended, error?} */
cJSON *dg_measure_lock_json(const dg_mlock *l);

/* ---- sampler (sampler.c) ----------------------------------------------------- */

typedef struct dg_sample_point {
    double t;             /* seconds since the sampler started */
    dg_metric rss;        /* bytes, this process */
    dg_metric swap_used;  /* bytes, whole machine */
    dg_metric psi_some10; /* percent, /proc/pressure/memory some avg10 */
    dg_metric dev_used;   /* bytes of device memory in use (backend mem info or NVML) */
    dg_metric dev_total;  /* bytes */
    dg_metric dev_util;   /* percent, where reported (NVML) */
} dg_sample_point;

typedef struct dg_sampler dg_sampler;

/* Starts a thread sampling every period_ms (<= 0: 100) until stopped. be/bctx
 * (may be NULL) give device memory through device_info's mem_free/mem_total;
 * for NVIDIA devices NVML (dlopen'ed) adds utilisation and the process's own
 * device memory. NULL when out of memory or the thread cannot start. */
dg_sampler *dg_sampler_start(const dg_backend_iface *be, void *bctx, int period_ms);
/* Points a sampler keeps by default (about 3.4 MB); beyond, the samples are
 * decimated as the run sampler's are: every other kept one is dropped and
 * only every stride-th new one is kept (the stride doubles each time). */
#define DG_SAMPLER_MAX_POINTS 32768
/* dg_sampler_start keeping at most max_points points (< 2: the default). */
dg_sampler *dg_sampler_start_capped(const dg_backend_iface *be, void *bctx, int period_ms,
                                    size_t max_points);
/* Stops the thread and keeps the samples; accepts NULL. */
void dg_sampler_stop(dg_sampler *s);
void dg_sampler_free(dg_sampler *s);
/* Samples kept so far, evenly spaced by the stride (valid until the next
 * call on s after stop). */
const dg_sample_point *dg_sampler_points(const dg_sampler *s, size_t *n);
/* Peaks and deltas over every sample taken (kept or not): rss_peak, swap
 * growth (last - first), psi peak, device used peak; count: samples taken. */
typedef struct dg_sampler_summary {
    dg_metric rss_peak, swap_growth, psi_peak, dev_used_peak, dev_util_mean;
    double overhead_s; /* CPU time the sampler thread itself used */
    size_t count;
} dg_sampler_summary;
void dg_sampler_summarise(const dg_sampler *s, dg_sampler_summary *out);
/* {"period_ms", "count" (taken), "stride" (samples holds every stride-th),
 * "overhead_s", summary metrics, "samples": [raw points kept]} */
cJSON *dg_sampler_json(const dg_sampler *s);

/* Machine swap in use (SwapTotal - SwapFree of /proc/meminfo) in bytes; false
 * when unreadable. */
bool dg_swap_used(double *bytes);
/* "some avg10" of /proc/pressure/memory in percent; false when absent. */
bool dg_psi_memory_some10(double *pct);

/* ---- Chrome trace (trace.c) ---------------------------------------------------
 * The Trace Event format Perfetto and chrome://tracing open: complete events
 * ("ph": "X") with ts and dur in microseconds and integer pid/tid. */

/* Appends a complete event {name, cat, ph: "X", ts, dur, pid, tid, args: {}} to
 * events and returns its args object (NULL when out of memory). */
cJSON *dg_trace_add(cJSON *events, const char *name, const char *cat, double ts_us, double dur_us,
                    int pid, int tid);
/* Appends a metadata event naming process pid (tid < 0) or thread pid/tid. */
void dg_trace_name(cJSON *events, int pid, int tid, const char *name);
/* Writes {"traceEvents": events, "displayTimeUnit": "ms", "metadata": metadata}
 * to path (through a temporary file renamed into place); events and metadata
 * (may be NULL) are borrowed. DG_ERR_IO with the reason when it cannot. */
dg_status dg_trace_write(dg_ctx *ctx, const char *path, const cJSON *events, const cJSON *metadata);

/* ---- a measured window (measured.c) ---- */

/* A measured window: the machine-wide measurement lock (waiting at most
 * DG_MEASURED_MAX_WAIT_S) and the contention sampled while it is held. */
#define DG_MEASURED_MAX_WAIT_S 600
typedef struct dg_measured {
    dg_mlock lock;
    dg_window *window;
} dg_measured;
/* Takes the lock and opens the contention window. */
void dg_measured_begin(dg_measured *m, const volatile sig_atomic_t *cancel);
/* Closes the window, releases the lock and adds "lock" ({state, waited,
 * contended}) and "contention" (dg_window_end's object) to obj (may be
 * NULL: recorded nowhere); returns the seconds waited for the lock. */
double dg_measured_end(dg_measured *m, cJSON *obj);
#endif
