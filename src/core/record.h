/* The record vocabulary: one table of every path the records hold (the
 * evidence record of accept and run, and the per-verb records env, gate,
 * train, sweep, soak, compare, profile), and typed views built once from a
 * parsed record.
 *
 * The table (record_paths.def, X-macro rows) names each path once with its
 * type, unit and flags; code reads a record through the row's id
 * (dg_rec_num(node, DG_P_COMPARE_RUNS_SPEEDUP)) instead of a string.
 * tests/unit/test_record.c checks fresh records of every verb against it;
 * tests/lint/record_paths.py checks that no source reads an undeclared path.
 *
 * The views are plain C structs over the parsed cJSON tree: strings and raw
 * sub-trees point into that tree (the view is valid while the tree lives and
 * is not modified), arrays are owned by the view (dg_record_view_free).
 * Conventions of every member:
 *   - dg_rec_metric: value with its unit and validity; valid is false when
 *     the record did not report it (absent, null, METRIC valid:false, not
 *     finite): value is then NAN, never 0.
 *   - const char *: NULL when absent, null or not a string.
 *   - int flags documented "tri": 1 true, 0 false, -1 not reported.
 *   - bool present: the section was an object in the record.
 * The builder reads version-1 and version-2 records (docs/schema/report.md,
 * "Versions"). */
#ifndef DG_RECORD_H
#define DG_RECORD_H

#include "core/core.h"
#include "core/json.h"

#include <stdbool.h>

/* ---- the path table ---------------------------------------------------------- */

/* Where a row's path starts: REC is the evidence record itself; the others are
 * its sections, which are also whole per-verb records (a `devgate sweep
 * --json` record is what an accept record holds under "sweep"). */
typedef enum dg_rec_section {
    DG_SEC_REC,
    DG_SEC_ENV,
    DG_SEC_GATE,
    DG_SEC_SWEEP,
    DG_SEC_SOAK,
    DG_SEC_COMPARE,
    DG_SEC_PROFILE,
    DG_SEC_SUPERVISE,
    DG_SEC_TRAIN,
    DG_SEC_SLO, /* the slo record (never inside an evidence record) */
    DG_SEC_COUNT
} dg_rec_section;

typedef enum dg_rec_type {
    DG_RT_OBJECT,
    DG_RT_ARRAY,
    DG_RT_NUMBER,
    DG_RT_METRIC, /* {"value": number | null, "unit": str, "valid": bool} */
    DG_RT_STRING,
    DG_RT_BOOL,
    DG_RT_ANY /* more than one type (e.g. a finding's evidence value) */
} dg_rec_type;

enum {
    DG_RF_OPT = 1u, /* may be absent */
    DG_RF_NULL = 2u /* may be null */
};

typedef struct dg_rec_path {
    dg_rec_section section;
    const char
        *path; /* below the section: "runs[].cpu.step_ms"; "[]" every element, "*" every key */
    dg_rec_type type;
    const char *unit; /* a METRIC's unit; a NUMBER's, "" for counts, ids and plain ratios */
    unsigned flags;   /* DG_RF_* */
} dg_rec_path;

typedef enum dg_rec_path_id {
#define DG_RP(id, sec, path, type, unit, flags) DG_P_##id,
#include "core/record_paths.def"
#undef DG_RP
    DG_P_COUNT
} dg_rec_path_id;

extern const dg_rec_path dg_rec_paths[DG_P_COUNT];

/* "" for DG_SEC_REC, else the section's key ("env", "soak", ...). */
const char *dg_rec_section_name(dg_rec_section s);
/* "object", "array", "number", "metric", "string", "bool" or "any". */
const char *dg_rec_type_name(dg_rec_type t);

/* ---- reading one path --------------------------------------------------------- */

/* A number as the views hold it. unit is never NULL: the METRIC's own unit
 * when the record held a METRIC there (metric true), else the table's. */
typedef struct dg_rec_metric {
    double value; /* NAN when !valid */
    const char *unit;
    bool valid;
    bool metric; /* the record held a METRIC object (its unit is unit) */
} dg_rec_metric;

/* The item of row id below node: the whole path when the row has no "[]",
 * else the part after its last "[]." below node, which is then one element
 * of that array. NULL when any part is missing. */
const cJSON *dg_rec_at(const cJSON *node, dg_rec_path_id id);
/* The metric of item it (may be NULL) in row id's unit. */
dg_rec_metric dg_rec_num_of(const cJSON *it, dg_rec_path_id id);
/* The number of row id below node (a METRIC's value when valid, or a plain
 * finite number); invalid when not reported. */
dg_rec_metric dg_rec_num(const cJSON *node, dg_rec_path_id id);
/* A string, NULL when absent or not a string. */
const char *dg_rec_str(const cJSON *node, dg_rec_path_id id);
/* Tri: 1 true, 0 false, -1 absent or not a bool. */
int dg_rec_bool(const cJSON *node, dg_rec_path_id id);
/* The array at row id, NULL when absent or not an array. */
const cJSON *dg_rec_arr(const cJSON *node, dg_rec_path_id id);
/* The object at row id, NULL when absent or not an object. */
const cJSON *dg_rec_obj(const cJSON *node, dg_rec_path_id id);

/* A count as an int: -1 when not valid or out of int range. */
int dg_rec_int(dg_rec_metric m);

/* ---- typed views ---------------------------------------------------------------- */

/* The memory sources a soak judges, in the order records list them. */
typedef enum dg_mem_source {
    DG_MEM_ALLOCATOR_ALLOCATED,
    DG_MEM_ALLOCATOR_RESERVED,
    DG_MEM_DRIVER,
    DG_MEM_FOOTPRINT,
    DG_MEM_COUNT
} dg_mem_source;
/* The record key of a source ("allocator_allocated", ...). */
const char *dg_mem_source_key(dg_mem_source s);

/* The profile's phases: loader stages (per batch, beside the step) then the
 * step's own (per step). */
typedef enum dg_phase {
    DG_PHASE_READ,
    DG_PHASE_DECODE,
    DG_PHASE_RESIZE,
    DG_PHASE_AUGMENT,
    DG_PHASE_NORMALISE,
    DG_PHASE_COLLATE,
    DG_PHASE_QUEUE_WAIT,
    DG_PHASE_H2D,
    DG_PHASE_FORWARD,
    DG_PHASE_BACKWARD,
    DG_PHASE_UPDATE,
    DG_PHASE_D2H,
    DG_PHASE_SYNC,
    DG_PHASE_COUNT
} dg_phase;
/* The record key of a phase ("queue_wait", ...). */
const char *dg_phase_key(dg_phase p);

/* A 95% interval (the figure's _ci object): both ends invalid when the record
 * holds none (an older record, one repetition). */
typedef struct dg_rec_interval {
    dg_rec_metric lo, hi;
} dg_rec_interval;

/* Another process that took CPU time during a measured window. */
typedef struct dg_view_window_proc {
    const char *name;
    dg_rec_metric pid;         /* id, no unit */
    dg_rec_metric cpu_percent; /* percent of one CPU over the window */
} dg_view_window_proc;

/* A measured window's contention (measure/contention.c). */
typedef struct dg_view_window {
    bool present;
    dg_rec_metric others_cpus;       /* cpus: other processes' CPU time over the window */
    dg_rec_metric others_share;      /* fraction of the machine */
    dg_rec_metric cpu_pressure_some; /* fraction of the window */
    dg_view_window_proc *top;
    int ntop;
} dg_view_window;

/* The evidence record's spec (accept: the fixture's; run: the command's).
 * batch and sweep_to are in samples; seed, threads, workers are
 * counts. */
typedef struct dg_view_spec {
    bool present;
    const char *backend, *model, *data, *batch_source, *label;
    dg_rec_metric batch, seed, threads, workers, sweep_to;
    int quick;        /* tri */
    const cJSON *cmd; /* run: the command as an array of strings, else NULL */
} dg_view_spec;

/* One entry of the record's steps[]. */
typedef struct dg_view_step {
    const char *name, *status, *verdict, *summary, *error;
    dg_rec_metric wall;  /* s */
    dg_rec_metric share; /* fraction of the method's wall; not reported before issue 24 */
} dg_view_step;

/* Another process the environment saw. */
typedef struct dg_view_proc {
    const char *name;
    dg_rec_metric pid;         /* id, no unit */
    dg_rec_metric cpu_percent; /* % of one core */
    dg_rec_metric rss;         /* bytes */
    int self;                  /* tri: devgate itself */
} dg_view_proc;

/* A Python extension module built for another architecture. */
typedef struct dg_view_py_ext {
    const char *path;
    const char *arch; /* the first architecture it was built for, NULL when none */
} dg_view_py_ext;

/* A device a gate backend found. */
typedef struct dg_view_device {
    const char *name, *vendor;
    dg_rec_metric memory_total; /* bytes */
} dg_view_device;

/* One row of a backend's per-op table (gate level 2, docs/schema/gate.md). */
typedef struct dg_view_op_row {
    const char *op, *backend, *precision, *shape, *output, *verdict, *reason;
    int fixture;                   /* tri: a shape of the training fixture */
    dg_rec_metric nmse, tolerance; /* NMSE against float64; the table's (0: exact) */
    dg_rec_metric over_tolerance;  /* the worst row only: nmse / tolerance */
} dg_view_op_row;

/* A backend's level-2 op checks. */
typedef struct dg_view_ops {
    bool present;
    dg_rec_metric checked, passed, failed, not_native, errors; /* rows */
    bool has_worst;
    dg_view_op_row worst;
    dg_view_op_row *rows; /* the table */
    int nrows;
} dg_view_ops;

/* The ways of a link check, in the record's order. */
enum {
    DG_LINK_H2D_PAGEABLE,
    DG_LINK_H2D_PINNED,
    DG_LINK_D2H_PAGEABLE,
    DG_LINK_D2H_PINNED,
    DG_LINK_WAYS
};
extern const char *const dg_link_way_names[DG_LINK_WAYS];

/* A backend's level-2 link check. */
typedef struct dg_view_link {
    bool present;
    const char *kind, *current, *reason;
    dg_rec_metric rated;                  /* GB/s */
    dg_rec_metric gbps[DG_LINK_WAYS];     /* GB/s */
    dg_rec_metric fraction[DG_LINK_WAYS]; /* of rated */
    int ok;                               /* tri */
} dg_view_link;

/* One throttle reason of a sustained load. */
typedef struct dg_view_throttle {
    const char *reason;
    int slows;             /* tri: power, thermal or hardware slowdown (not idle, a setting) */
    dg_rec_metric seconds; /* s */
} dg_view_throttle;

/* A backend's level-3 sustained load and memory bandwidth. */
typedef struct dg_view_sustain {
    bool present;
    const char *source, *verdict; /* the health source; the drift's verdict */
    dg_rec_metric seconds, wall, rate, fraction_of_peak; /* s, s, GFLOP/s, fraction */
    dg_rec_metric first_third, last_third;               /* GFLOP/s */
    dg_rec_metric ratio, ratio_lo, ratio_hi;             /* last third over first, 95% */
    dg_rec_metric sm_min, sm_max, temp_max, power_mean, power_max, energy;
    dg_view_throttle *throttle;
    int nthrottle;
    int ok, throttled; /* tri */
    bool membw_present;
    dg_rec_metric membw, membw_rated, membw_fraction; /* GB/s, GB/s, fraction */
    int membw_ok;                                     /* tri */
} dg_view_sustain;

/* A backend as the gate (or, without a gate, the environment) lists it. */
typedef struct dg_view_backend {
    const char *name, *reason, *versions;
    int built, available; /* tri */
    struct {
        bool present;
        int ok; /* tri */
        const char *reason;
        dg_rec_metric bad_elements;           /* elements */
        dg_rec_metric max_err_over_tolerance; /* ratio */
        dg_rec_metric max_abs_err, gflops, ms_warm;
        dg_rec_metric max_rel_err, ms_cold;
        dg_rec_metric m, n, k;                /* the product's shape */
        dg_rec_metric fraction_of_peak;       /* fraction of peak_fp32 */
        const char *fraction_of;              /* "rate" or "checked": which product it is of */
        dg_rec_metric threads;                /* cpu: the threads the products ran on */
        const char *threads_source;           /* cpu: "usable cores", "OMP_NUM_THREADS" */
        dg_rec_metric rate_m, rate_n, rate_k; /* cpu: the steady-state rate product */
        dg_rec_metric rate_gflops;            /* GFLOP/s */
        dg_view_window window;                /* the timed products' window */
    } matmul;
    dg_rec_metric peak_fp32;       /* GFLOP/s */
    dg_rec_metric peak_cores;      /* physical cores the cpu's mask holds */
    dg_rec_metric peak_usable;     /* cores' worth the cpu peak counts (quota applied) */
    dg_rec_metric peak_advised;    /* threads a cpu baseline should run */
    dg_rec_metric peak_per_core;   /* GFLOP/s */
    dg_rec_metric peak_smt;        /* threads/core */
    const char *peak_per_core_src; /* measured FMA throughput, or table x clock */
    const char *peak_isa;
    struct {
        const char *library, *kernel, *fix;
        int generic;               /* tri: the generic (unoptimised) kernel */
        dg_rec_metric vector_bits; /* bits */
    } blas;
    dg_view_device *devices; /* the gate's: the devices it found */
    int ndevices;
    dg_view_ops ops;         /* gate level 2 */
    dg_view_link link;       /* gate level 2 */
    dg_view_sustain sustain; /* gate level 3 */
} dg_view_backend;

/* The environment summary the rules and the summaries read. */
typedef struct dg_view_env {
    bool present;
    bool has_arch; /* env.arch is an object: the architecture proof */
    const char *arch_host, *arch_process, *translation, *host;
    int translated;                    /* tri */
    const cJSON *translation_evidence; /* arch.translation_evidence as recorded, or NULL */
    dg_rec_metric mem_total;           /* bytes */
    dg_rec_metric logical_cores, affinity_cores; /* cores */
    dg_rec_metric psi_some_avg10;                /* percent */
    dg_view_proc *top_cpu, *top_mem;
    int ntop_cpu, ntop_mem;
    bool has_python;
    dg_view_py_ext *mixed; /* python.mixed_extensions */
    int nmixed;
    dg_rec_metric mixed_truncated; /* modules left out of the list */
    int py_arch_matches_host;      /* tri */
    const char *py_reference_arch, *py_binary_arch;
    const cJSON *py_binary_arch_list; /* python.binary.arch as recorded, or NULL */
    bool has_backends;                /* env.backends is an array */
    const cJSON *backends_json;       /* env.backends as recorded (any type), or NULL */
    dg_view_backend *backends;
    int nbackends;
} dg_view_env;

typedef struct dg_view_gate {
    bool present;
    const char *verdict; /* "pass" | "fail" | ... */
    const char *tolerance_model;
    bool has_backends;          /* gate.backends is an array */
    const cJSON *backends_json; /* gate.backends as recorded (any type), or NULL */
    dg_view_backend *backends;
    int nbackends;
    dg_rec_metric level; /* the gate's level (1 when the record predates levels: invalid) */
    int reference_ok;    /* tri: level 2's reference agreed with its finite differences */
} dg_view_gate;

/* The gate levels' members of one gate backend's view (record_levels.c);
 * false when out of host memory. */
bool dg_view_backend_levels(const cJSON *backend, dg_view_backend *be);
void dg_view_backend_levels_free(dg_view_backend *be);

/* One sweep trial (doubling or bisection). */
typedef struct dg_view_trial {
    const char *ended, *reason, *signal;
    int budget;                          /* tri: the memory budget ended it */
    dg_rec_metric batch;                 /* samples */
    dg_rec_metric samples_per_s;         /* samples/s */
    dg_rec_metric step_median, step_iqr; /* ms */
    dg_rec_metric step_steps;            /* steps behind them */
    dg_rec_metric swap_growth, rss_peak, device_allocated_peak, device_reserved_peak; /* bytes */
    dg_rec_metric psi_peak;                                                           /* percent */
    dg_rec_metric wall_s;                                                             /* s */
    dg_rec_metric energy_per_sample; /* J/sample, where the device reports its energy */
} dg_view_trial;

typedef struct dg_view_sweep {
    bool present;
    const char *backend;      /* sweep.spec.backend */
    dg_rec_metric mem_budget; /* bytes */
    const char *mem_budget_source;
    dg_view_trial *trials, *bisect;
    int ntrials, nbisect;
    const char *stopped_reason;
    dg_rec_metric stopped_at;                /* samples */
    dg_rec_metric knee_batch;                /* samples */
    dg_rec_metric knee_sps, best_sps;        /* samples/s */
    dg_rec_metric safe_batch, first_failure; /* samples */
    dg_rec_metric safe_sps;                  /* samples/s */
    bool safe_batch_is_number;               /* safe_batch.batch is a JSON number */
    bool knee_is_number;                     /* knee.batch is a JSON number */
    const char *safe_note;
    dg_rec_metric good_trials;
} dg_view_sweep;

/* One entry of a fallback census: the fixture's {op, shape, backend, reason,
 * calls, ms_total, bytes_d2h, bytes_h2d}, or a probe's {op, device, count,
 * message} (devgate run). */
typedef struct dg_view_fallback {
    const char *op, *device, *shape, *backend, *reason, *message;
    dg_rec_metric count;                /* probe: calls */
    dg_rec_metric calls;                /* fixture: calls */
    dg_rec_metric ms_total;             /* ms */
    dg_rec_metric bytes_d2h, bytes_h2d; /* bytes copied for the fallback */
} dg_view_fallback;

/* One soak epoch row. */
typedef struct dg_view_epoch {
    dg_rec_metric epoch;
    dg_rec_metric allocated, reserved, driver_used, rss, rss_peak; /* bytes */
    dg_rec_metric step_ms;                                         /* ms */
    dg_rec_metric samples_per_s;                                   /* samples/s */
    int cache_emptied, validation;                                 /* tri */
} dg_view_epoch;

/* The soak: its epochs and the memory analysis (v1: soak.soak.*, v2: soak.*). */
typedef struct dg_view_soak {
    bool present;
    bool has_payload; /* the analysis object was there */
    int empty_cache;  /* tri */
    dg_rec_metric epochs_recorded, steps_per_epoch;
    dg_rec_metric growth[DG_MEM_COUNT]; /* % over the first epoch's watermark */
    /* growth_ci: the 95% interval of each source's growth (%), the point it
     * brackets (last third's median watermark); not valid when not recorded */
    dg_rec_metric growth_point[DG_MEM_COUNT], growth_lo[DG_MEM_COUNT], growth_hi[DG_MEM_COUNT];
    dg_rec_metric baseline[DG_MEM_COUNT]; /* bytes: the watermarks growth is measured from */
    /* step_growth, the leak screen of a short soak (allocator_allocated and
     * footprint only): the growth an epoch adds (%) with its 95% interval,
     * from a line through the memory read after each step; and how many
     * readings it rests on. Not valid when not recorded. */
    dg_rec_metric screen_point[DG_MEM_COUNT], screen_lo[DG_MEM_COUNT], screen_hi[DG_MEM_COUNT];
    dg_rec_metric screen_points[DG_MEM_COUNT];
    int staircase_aligned;                            /* tri */
    const cJSON *validation_epochs;                   /* array of epoch numbers, or NULL */
    dg_rec_metric thirds_ratio;                       /* ratio */
    dg_rec_metric thirds_point, thirds_lo, thirds_hi; /* step_trend.thirds_ratio_ci, ratio */
    dg_rec_metric trend_slope;                        /* ms/step */
    dg_rec_metric trend_median;                       /* ms */
    dg_rec_metric swap_growth;                        /* bytes (the soak's sampler) */
    dg_rec_metric train_samples; /* data.train_samples: the training set's size */
    dg_view_epoch *epochs;
    int nepochs;
    bool has_census;          /* soak.fallbacks is an array */
    dg_view_fallback *census; /* its entries */
    int ncensus;
    dg_view_window window; /* "contention": what else ran during the soak's epochs */
} dg_view_soak;

/* One timed repetition of a compare side. */
typedef struct dg_view_rep {
    dg_rec_metric warmup; /* steps: the first ones of ms, left out of its statistics */
    double *ms;           /* step times in ms, as recorded (NAN where not a number) */
    int nms;
    dg_view_window window;
} dg_view_rep;

/* A figure a drifting run names (runs[].drift[]) and its value below the run. */
typedef struct dg_view_figure {
    const char *name;    /* "loss_vs_ref.device", ... */
    dg_rec_metric value; /* relative; invalid when the run does not hold it */
} dg_view_figure;

/* One compare run. A failed run ({batch, status, failed, error}) has ok false. */
typedef struct dg_view_run {
    bool ok;
    const char *status, *failed, *error;
    const char *device_backend;                /* runs[].device.backend */
    const char *verdict;                       /* "within tolerance" | "drift" */
    dg_rec_metric batch;                       /* samples */
    dg_rec_metric speedup;                     /* x */
    dg_rec_metric reduction_pct;               /* % */
    dg_rec_metric busy_fraction;               /* fraction */
    dg_rec_metric cpu_step_ms, device_step_ms; /* ms */
    dg_rec_metric cpu_sps, device_sps;         /* samples/s */
    dg_rec_metric device_fallbacks;            /* calls */
    dg_rec_metric loss_vs_ref_device;          /* relative */
    dg_rec_metric param_drift_device_vs_ref;   /* relative */
    int reference_ran, within_tolerance;       /* tri */
    const cJSON *drift;                        /* array of figure names, or NULL */
    dg_view_figure *figures;                   /* the drift figures that are strings */
    int nfigures;
    dg_rec_interval speedup_ci, reduction_ci, busy_ci; /* x, %, fraction */
    dg_rec_metric mw_p;                                /* Mann-Whitney p: probability */
    dg_rec_metric reps_per_side;                       /* repetitions a side */
    dg_view_rep *reps[2];                              /* the cpu's, the device's */
    int nreps[2];
    const cJSON *json; /* the run object */
} dg_view_run;

typedef struct dg_view_compare {
    bool present;
    const char *status, *error;
    const char *backend;                           /* compare.spec.backend */
    const char *device_name;                       /* compare.device.name */
    dg_rec_metric loss_tolerance, param_tolerance; /* relative */
    dg_rec_metric threads;                         /* compare.spec.threads (0: all) */
    dg_rec_metric threads_used; /* compare.spec.threads_used: what the cpu pool ran on */
    const char *threads_source; /* "--threads", "OMP_NUM_THREADS", "usable cores" */
    int within_tolerance;       /* tri */
    dg_view_run *runs;
    int nruns;
} dg_view_compare;

typedef struct dg_view_phase {
    bool present;        /* the phase's object was there */
    dg_rec_metric ms;    /* ms, per batch (loader stages) or per step */
    dg_rec_metric share; /* fraction */
    int in_step;         /* tri */
} dg_view_phase;

/* One row of the profile's op table. */
typedef struct dg_view_op {
    const char *op, *shape, *backend;
    int fallback; /* tri */
    dg_rec_metric calls;
    dg_rec_metric ms_total, ms_mean; /* ms */
    dg_rec_metric share;             /* fraction of the profiled op time */
} dg_view_op;

typedef struct dg_view_profile {
    bool present;
    const char *backend;                   /* profile.spec.backend */
    dg_rec_metric workers, sync_every;     /* profile.spec */
    dg_rec_metric step_ms, profiled_ms;    /* ms */
    dg_rec_metric mean_ms;                 /* ms: the window's wall a step (fixture) */
    dg_rec_metric stats_n;                 /* steps */
    dg_rec_metric stats_median, stats_iqr; /* ms */
    dg_rec_metric stats_iqr_share;         /* fraction */
    dg_rec_metric sync_per_step;           /* sync points/step */
    dg_rec_metric host_reads;              /* values read to the host (probe) */
    dg_rec_metric host_reads_per_step;     /* reads/step */
    dg_rec_metric host_reads_library;      /* of host_reads, made by a library's code */
    const char *host_reads_source;
    const char *source;           /* "probe" for a program's step events, NULL for the fixture */
    dg_rec_metric fallback_calls; /* ops_total.fallback_calls */
    bool has_phases;              /* profile.phases is an object */
    dg_view_phase phases[DG_PHASE_COUNT];
    dg_rec_metric window_steps; /* steps */
    const char *noise, *note;   /* step.stats.noise, note */
    dg_rec_metric bytes_h2d, bytes_d2h, bytes_fallback_h2d, bytes_fallback_d2h; /* bytes */
    dg_view_op *ops;
    int nops;
    bool has_ops;           /* profile.ops is an array */
    const cJSON *fallbacks; /* the fallback census (array of {op, ...}), or NULL */
    int nfallbacks;
    dg_view_fallback *census; /* its entries, nfallbacks of them */
} dg_view_profile;

/* One sample of the supervised process tree. */
typedef struct dg_view_sample {
    dg_rec_metric t;       /* s since the start */
    dg_rec_metric rss;     /* bytes */
    dg_rec_metric cpu_pct; /* percent of one core since the previous sample */
    dg_rec_metric procs;   /* live processes in the tree */
} dg_view_sample;

/* devgate run's supervision of the program. */
typedef struct dg_view_supervise {
    bool present;
    dg_rec_metric exit_status;
    const char *signal;         /* "SIGKILL", ...; NULL when none */
    const char *run_end_status; /* run_end.status ("ok", "error", "stopped"); NULL when none */
    const char *error_line;     /* error_lines[0]: why the program failed, as it said; NULL */
    int timed_out, interrupted; /* tri */
    dg_rec_metric wall;         /* s */
    dg_rec_metric events_lines, events_dropped, events_malformed, events_overlong; /* lines */
    dg_rec_metric rss_peak;       /* samples.rss_peak: bytes */
    dg_rec_metric cpu_pct_median; /* samples.cpu_pct_median: percent of one core */
    dg_rec_metric cores;          /* samples.cores */
    dg_view_sample *series;       /* the sampled series, in record order */
    int nseries;
    dg_view_window window; /* the record's "contention": what else ran during the run */
} dg_view_supervise;

typedef struct dg_view_threshold {
    const char *name;
    double value; /* in the threshold's unit (docs/rules.md) */
} dg_view_threshold;

typedef struct dg_view_finding {
    const char *id, *severity, *title, *hypothesis, *action;
    const char *section; /* that of its first piece of evidence, NULL when none */
    int rank;            /* 3 fail, 2 warn, 1 info, 0 other */
    const cJSON *json;
} dg_view_finding;

typedef struct dg_view_decision {
    bool present;
    const char *route, *backend;
    const cJSON *reasons; /* array of strings, or NULL */
} dg_view_decision;

/* What the sweep's safe batch is, in words, from the reason the sweep
 * stopped: "the memory ceiling" only when memory ended it (oom, budget,
 * swap); the training set's size, the sweep's limit, or the largest batch
 * tried otherwise. Never NULL. */
const char *dg_sweep_bound_words(const char *stopped_reason);

typedef struct dg_view_final_gate {
    bool present;
    int accepted;  /* tri */
    int proofs[4]; /* tri: architecture, gate_log, sweep, memory_curve */
    dg_rec_metric fail_findings;
    dg_rec_metric throughput;        /* samples/s */
    dg_rec_metric energy_per_sample; /* J/sample beside it, where the device reports energy */
    dg_rec_metric batch;             /* samples: the batch the throughput is promised at */
    dg_rec_metric safe_batch;        /* samples: the sweep's safe batch */
    const char *safe_bound; /* what it is, in words (dg_sweep_bound_words); NULL: not said */
    const char *statement;
    const cJSON *missing; /* the names of the proofs the pack lacks (array of strings), or NULL */
} dg_view_final_gate;

/* The seeds a supervised program set (record "seeds", from run_start): the
 * zero-code probe says which sources it seeded and how the training loader's
 * workers and shuffling are seeded. -1: not reported. */
typedef struct dg_view_seeds {
    bool present;
    dg_rec_metric torch, loader_workers;
    int torch_seeded, loader_shuffle, loader_worker_init_fn, loader_generator;
} dg_view_seeds;

/* The training DataLoader a supervised program iterated (record "loader",
 * from run_start): its settings as the program named them and the
 * command-line options that set them. -1 / NULL / not valid: not reported. */
typedef struct dg_view_loader {
    bool present;
    dg_rec_metric num_workers, batch_size, batches; /* workers, samples, batches */
    int pin_memory, persistent_workers;             /* tri */
    const char *batch_arg, *workers_arg;            /* "--batch-size", "--workers"; NULL */
} dg_view_loader;

/* A record, typed. For a per-verb record (kind sweep, soak, ...) the section
 * view of that kind is filled from the record itself. */
typedef struct dg_record_view {
    int version;      /* "v": 1 or 2 */
    const char *kind; /* "accept", "run", "sweep", ...; NULL when absent */
    const char *state, *label, *host, *timestamp, *run_id;
    const char *device; /* run: the device the program said it used ("cpu", "cuda:0") */
    dg_view_seeds seeds;
    dg_view_loader loader;
    dg_view_spec spec;
    dg_view_step *steps;
    int nsteps;
    dg_view_env env;
    dg_view_gate gate;
    dg_view_sweep sweep;
    dg_view_soak soak;
    dg_view_compare compare;
    dg_view_profile profile;
    dg_view_supervise supervise;
    dg_view_threshold *thresholds; /* as the rules used them; NULL when none recorded */
    int nthresholds;
    dg_view_finding *findings; /* in record order (most severe first) */
    int nfindings;
    dg_view_decision decision;
    dg_view_final_gate final_gate;
    const cJSON *rec;                   /* the record */
    const cJSON *section[DG_SEC_COUNT]; /* each section's object, NULL when not one */
    bool listed[DG_SEC_COUNT];          /* the record has the section's key, whatever it holds
                                           (a step that did not run leaves null) */
    const cJSON *soak_payload;          /* the soak analysis object (v1 soak.soak, v2 soak) */
} dg_record_view;

/* Builds the view of rec (an object; accept, run or a per-verb record of
 * version 1 or 2). *out is overwritten; free it with dg_record_view_free,
 * also after a failure. DG_ERR_FORMAT when rec is not an object or its
 * version is not 1 or 2, DG_ERR_NOMEM. ctx may be NULL (no message). */
dg_status dg_record_view_build(dg_ctx *ctx, const cJSON *rec, dg_record_view *out);
/* Frees what the view owns (not the record); NULL and zeroed views are fine. */
void dg_record_view_free(dg_record_view *v);

/* The threshold value the record used, NAN when not recorded. */
double dg_view_threshold_value(const dg_record_view *v, const char *name);

/* The version devgate writes into the records whose shape changed with it:
 * soak, accept and run (2: the soak analysis flattened into the soak record).
 * The other per-verb records keep version 1. docs/schema/report.md. */
#define DG_RECORD_VERSION 2

/* A new record's head: {v: version, kind, timestamp (UTC ISO 8601), host (null when not known)},
 * the fields every record devgate writes opens with. The caller owns it; NULL when out of memory.
 */
cJSON *dg_record_new(const char *kind, int version);
/* The same head added to rec. */
void dg_record_head(cJSON *rec, const char *kind, int version);

#endif
