/* devgate: prove whether a compute path delivers training speed.
 *
 * Public API. Everything behind these declarations is opaque: the CLI, the rules
 * and the reports compile against this header alone. The library never prints and
 * never exits; every call returns a dg_status and keeps a message on its dg_ctx
 * (dg_errmsg). Records cross this boundary as versioned JSON text whose schemas
 * live under docs/. */
#ifndef DEVGATE_H
#define DEVGATE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DG_VERSION "0.1.0"

typedef enum dg_status {
    DG_OK = 0,
    DG_ERR_USAGE,       /* bad argument or option value */
    DG_ERR_NOMEM,       /* host allocation failed */
    DG_ERR_IO,          /* a file or process could not be read or written */
    DG_ERR_FORMAT,      /* input is malformed, truncated or lies about itself */
    DG_ERR_UNAVAILABLE, /* backend not built, driver or device missing */
    DG_ERR_BACKEND,     /* a backend call failed */
    DG_ERR_DEVICE_OOM,  /* device allocation failed after freeing the cache */
    DG_ERR_CHECK,       /* a result failed verification */
    DG_ERR_LEDGER,      /* ledger corrupt, unwritable or otherwise unusable */
    DG_ERR_BUSY,        /* ledger locked past the timeout */
    DG_ERR_SCHEMA,      /* ledger written by a newer devgate */
    DG_ERR_NOT_FOUND,   /* no such record, backend or device */
    DG_ERR_TIMEOUT,     /* a child process or wait ran past its limit */
    DG_ERR_INTERRUPTED, /* stopped because the caller's cancel flag was set */
} dg_status;

/* Short stable name of a status ("ok", "usage", "device-oom", ...). */
const char *dg_status_name(dg_status st);

/* ---- library context ---------------------------------------------------- */

typedef struct dg_ctx dg_ctx;

typedef enum dg_log_level { DG_LOG_DEBUG, DG_LOG_INFO, DG_LOG_WARN } dg_log_level;
typedef void (*dg_log_fn)(dg_log_level level, const char *msg, void *user);

/* New library context; NULL when out of memory. Free with dg_ctx_free. */
dg_ctx *dg_ctx_new(void);
/* Frees a context; accepts NULL. */
void dg_ctx_free(dg_ctx *ctx);
/* The message of the last failed call on ctx ("" when none); owned by ctx. */
const char *dg_errmsg(const dg_ctx *ctx);
/* Routes the library's diagnostics to fn (default: dropped). */
void dg_set_log(dg_ctx *ctx, dg_log_fn fn, void *user);

/* What a progress report says (docs/cli.md "Progress"). */
typedef enum dg_progress_kind {
    DG_PROGRESS_STEP,      /* a step starts */
    DG_PROGRESS_STEP_END,  /* it ended: result "ok", "failed", "skipped" or "interrupted" */
    DG_PROGRESS_TRIAL,     /* a measured run within the step starts (a sweep trial, a
                            * child run of the command) */
    DG_PROGRESS_TRIAL_END, /* it ended: result "ok", "device-oom", "failed", ... */
    DG_PROGRESS_EPOCH,     /* the supervised program closed an epoch */
    DG_PROGRESS_TICK,      /* the supervised program's optimizer steps so far (for a live
                            * line; at most a few a second) */
} dg_progress_kind;

/* One progress report. Strings are borrowed for the call; any may be NULL. */
typedef struct dg_progress {
    dg_progress_kind kind;
    const char *step;   /* "env", "gate", "sweep", "soak", "compare", "profile", "supervise" */
    int index, total;   /* the step's index and the number of steps (0, 1 for run) */
    int trial;          /* TRIAL*: its number within the step, from 1; 0 otherwise */
    int trials;         /* the trials the tier's plan expects in the step (0: unknown) */
    const char *what;   /* TRIAL*: what runs ("batch 64 on cuda") */
    const char *result; /* *_END: how it ended */
    const char *detail; /* *_END, EPOCH: a short summary ("812 samples/s") */
    double epoch;       /* EPOCH, TICK: the program's epoch (from 0); NAN: not reported */
    double steps;       /* EPOCH, TICK: optimizer steps so far in this run; NAN: none */
    double elapsed_s;   /* since the verb started */
    double eta_s;       /* what is left by the tier's plan, in s; NAN: unknown */
} dg_progress;

/* Called from the thread that runs the verb; the callback must not call the library. */
typedef void (*dg_progress_fn)(void *user, const dg_progress *p);

/* What a supervised program writes to its standard output (fd 1) or error
 * (fd 2), n bytes as it wrote them, handed on as it comes. */
typedef void (*dg_output_fn)(void *user, int fd, const char *buf, size_t n);

/* Whether the environment proof keeps other processes' arguments (masked;
 * default false: only the program, pid, user, CPU and memory). */
void dg_set_env_cmdlines(dg_ctx *ctx, bool keep);
/* Masks credentials in a command line or URI in place, never lengthening it:
 * the password of scheme://user:PASSWORD@host; the value of password=,
 * PGPASSWORD=, of a credential flag (--token, --api-key, --password, ... with
 * = or as the next word) and of a credential variable (NAME_SECRET=,
 * ..._TOKEN=, ..._API_KEY=, ...); and words shaped like a known token (sk-...,
 * ghp_..., AKIA...). Returns how many it masked. */
int dg_redact_secrets(char *s);
/* Whether s (NULL: false) holds a credential dg_redact_secrets would mask. */
bool dg_has_secret(const char *s);
/* Frees a string returned by the library; accepts NULL. */
void dg_string_free(char *s);
/* v printed with fmt (one floating-point conversion, e.g. "b%.0f"), or "not
 * reported" when v is NaN or infinite: human text never shows "nan". Returns
 * buf. */
const char *dg_fmt_num(char *buf, size_t len, const char *fmt, double v);

/* Copies the len bytes at src into dst (capacity n; NUL-terminated when
 * n > 0) so that no terminal acts on them: invalid UTF-8, NUL, C0 and C1
 * controls, DEL and bidi embeddings/overrides/isolates become '?'; CR, and tab
 * and newline unless keep_lines, become a space. Never splits a UTF-8
 * sequence; stops when dst is full. Returns the bytes written. */
size_t dg_text_clean(char *dst, size_t n, const char *src, size_t len, bool keep_lines);

/* Writes len bytes to path atomically: a temporary file created exclusively
 * (O_EXCL, random name) beside path, then renamed over it, so readers never
 * see half a file, a failed write leaves the old file, and a planted symlink
 * is never followed. DG_ERR_IO with the reason (the path cleaned) on ctx. */
dg_status dg_file_write_atomic(dg_ctx *ctx, const char *path, const void *data, size_t len);
/* mkdir -p: creates path and the folders above it; false with errno set. */
bool dg_make_dirs(const char *path);

/* Host bytes allocated through the library now and at peak. cJSON trees are
 * not counted: devgate leaves cJSON's process-wide allocator hooks alone. */
void dg_host_mem_stats(size_t *live, size_t *peak);

/* ---- build facts -------------------------------------------------------- */

/* Git commit devgate was built from ("unknown" when not built from a checkout). */
const char *dg_build_commit(void);
/* Compiler id and version that built the library, e.g. "GCC 12.2.0". */
const char *dg_build_compiler(void);
/* Comma-separated backends compiled in or shipped as plug-ins ("cpu,opencl,cuda"). */
const char *dg_build_backends(void);

/* ---- environment proof (docs/schema/env.md) ----------------------------- */

typedef struct dg_env_opts {
    const char *python;      /* interpreter to inspect, or NULL */
    double python_timeout_s; /* limit for running it (<= 0: 60 s) */
    const char *cwd;         /* directory whose git state is recorded, or NULL for "." */
} dg_env_opts;

/* Collects the environment proof as JSON into *json (free with dg_string_free). */
dg_status dg_env_run(dg_ctx *ctx, const dg_env_opts *opts, char **json);

/* ---- device gate (docs/schema/gate.md) ---------------------------------- */

/* Arithmetic of the device's matrix products and convolutions (spec key
 * "math", --precision): the default is exact fp32. */
typedef enum dg_math {
    DG_MATH_FP32 = 0, /* exact fp32 */
    DG_MATH_TF32 = 1, /* TF32 tensor cores (cuda) */
    DG_MATH_BF16 = 2, /* bf16 inputs, fp32 accumulation, fp32 weights and loss (cuda) */
} dg_math;
/* "fp32", "tf32" or "bf16"; "fp32" for a value outside the enum. */
const char *dg_math_name(dg_math m);

/* The depths the gate and accept run at (docs/cli.md "Levels"), each a
 * superset of the one below: 1 built, available, one checked product per
 * backend; 2 every training op against float64 and the host-device link;
 * 3 sustained load with the device's health sampled, device memory
 * bandwidth; 4 level 3 longer plus the full soak. */
#define DG_LEVEL_MIN 1
#define DG_LEVEL_MAX 4

typedef struct dg_level_info {
    int level;
    double gate_budget_s;   /* the time `gate --level N` keeps (all backends) */
    double accept_budget_s; /* the time `accept --level N` keeps (the fixture) */
    double sustain_s;       /* levels 3-4: the sustained load's seconds per backend (else 0) */
    const char *what;       /* what the level runs, one line */
} dg_level_info;

/* The row of level (DG_LEVEL_MIN..DG_LEVEL_MAX); NULL outside. Static. */
const dg_level_info *dg_level_get(int level);

typedef struct dg_gate_opts {
    const char *backends; /* comma-separated names, or NULL for all known */
    int m, n, k;          /* matrix product size (0: 512) */
    uint64_t seed;        /* input seed */
    int warm_reps;        /* timed warm repetitions (0: 5) */
    dg_math math;         /* the product's arithmetic on device backends (cpu stays fp32) */
    int level;            /* DG_LEVEL_MIN..DG_LEVEL_MAX (0: 1) */
    double sustain_s; /* levels 3-4: the sustained load's seconds per backend (0: the level's) */
    double load;      /* levels 3-4: its busy share, (0, 1] (0: 1, back to back) */
    /* Check the device backends in route order (cuda, opencl) until one passes;
     * the rest are reported built and available, their product not checked. */
    bool first_device;
} dg_gate_opts;

typedef enum dg_gate_verdict {
    DG_GATE_PASS = 0,        /* every selected available backend passed */
    DG_GATE_FAIL = 1,        /* a backend failed its check */
    DG_GATE_UNAVAILABLE = 3, /* a backend named explicitly is not available */
} dg_gate_verdict;

/* Runs the device gate; *json gets the record, *verdict the outcome.
 * DG_ERR_USAGE for an unknown backend name or a bad size. */
dg_status dg_gate_run(dg_ctx *ctx, const dg_gate_opts *opts, char **json, dg_gate_verdict *verdict);

/* ---- training fixture (docs/schema/train.md) ----------------------------- */

/* Start every dg_train_opts with DG_TRAIN_OPTS_INIT or dg_train_opts_init():
 * the library refuses one that was not (a zeroed struct would otherwise train
 * with learning rate 0). */
#define DG_TRAIN_OPTS_MAGIC 0x64677431u
#define DG_TRAIN_OPTS_INIT                                                                         \
    {                                                                                              \
        .init = DG_TRAIN_OPTS_MAGIC, .lr = -1, .momentum = -1, .weight_decay = -1                  \
    }

typedef struct dg_train_opts {
    uint32_t init;        /* DG_TRAIN_OPTS_MAGIC once initialised */
    const char *model;    /* preset (mlp, lenet, cifar) or layer string; NULL: "mlp" */
    int in_c, in_h, in_w; /* input shape for layer strings (0: the preset's / 1x28x28) */
    const char *backend;  /* NULL: "cpu" */
    int device;           /* device index */
    int batch;            /* 0: 64 */
    int steps;            /* steps per epoch; 0: 100 */
    int epochs;           /* 0: 1 */
    uint64_t seed;
    int sync_every;          /* read the loss every N steps; 0: at epoch end */
    float lr;                /* < 0: default 0.01 */
    float momentum;          /* < 0: default 0.9 */
    float weight_decay;      /* < 0: default 0 */
    int threads;             /* cpu threads, 0: default */
    size_t mem_budget;       /* device allocator cap in bytes, 0: none */
    const char *disable_ops; /* "OP[@BACKEND],..." forced onto the cpu fallback, or NULL */
    size_t samples;          /* synthetic data set size; 0: steps*batch capped at 8192 (>= batch) */
    bool no_capture;         /* do not capture the step as a device graph */
    int sample_ms;           /* > 0: run the background memory sampler at this period */
    const char *export_dir;  /* write initial weights and the batches here (golden tests) */
    /* The data path (docs/data.md). */
    const char
        *data; /* source spec: "synthetic" (NULL), "idx:IMAGES,LABELS", "cifar:DIR", "images:DIR" */
    int workers;      /* loader threads; 0: 2; < 0: none (batches made inline in the loop) */
    int prefetch;     /* loader queue depth in batches; 0 (and at least): workers + 2 */
    double val_split; /* share held out and evaluated after each epoch; 0: none */
    const char
        *resolution; /* "HxW[:WEIGHT][,...]"; NULL: the model input (the only size train accepts) */
    const char *augment;   /* "crop", "flip", "crop,flip" or NULL/"none" */
    const char *normalize; /* NULL/"none", "auto" or "m1[,m2,m3]/s1[,s2,s3]" */
    bool cache;            /* keep decoded, resized samples in memory (2 GiB cap) */
    bool on_bad_fail;      /* a bad sample ends the run instead of being skipped */
    double max_bad_share;  /* fail above this bad/seen share; 0: 0.01; < 0: no bad sample allowed */
    dg_math math;          /* the device's product arithmetic (cuda only; default exact fp32) */
    /* Set non-zero (e.g. from a signal handler) to stop at the next step with
     * DG_ERR_INTERRUPTED; the record so far is still returned. NULL: never. */
    const volatile sig_atomic_t *cancel;
    /* Each epoch's end (DG_PROGRESS_EPOCH: the epoch, the steps so far, the
     * rate, and the ETA of the epochs left at the mean so far); NULL: none. */
    dg_progress_fn progress;
    void *progress_user;
} dg_train_opts;

/* Sets *o to DG_TRAIN_OPTS_INIT: every option at its default. */
void dg_train_opts_init(dg_train_opts *o);
/* DG_OK when o was initialised; DG_ERR_USAGE with a message otherwise. */
dg_status dg_train_opts_check(dg_ctx *ctx, const dg_train_opts *o);
/* Sets one option by its spec key (docs/schema/spec.md: "batch", "lr", "math",
 * ...) from text, with the checks the command line and spec files share; a
 * string value is kept by pointer (the caller keeps it alive). DG_ERR_USAGE for
 * an unknown key or a bad value (the message names both). */
dg_status dg_train_opts_set(dg_ctx *ctx, dg_train_opts *o, const char *key, const char *value);

/* Parses a byte count such as 1048576, 512K, 1M or 2GiB (binary units, at
 * most 1e18) into *out; false for anything else. Flags and specs share it. */
bool dg_parse_bytes(const char *s, size_t *out);

/* A decoded spec: the options and the strings they point to, owned together. */
typedef struct dg_spec dg_spec;
/* Decodes a spec JSON object (any subset of the keys; numbers where integers
 * are wanted must be integers) into *out, free with dg_spec_free.
 * DG_ERR_FORMAT not a JSON object; DG_ERR_USAGE unknown key or bad value. */
dg_status dg_spec_decode(dg_ctx *ctx, const char *json, dg_spec **out);
/* The options of a decoded spec; valid until dg_spec_free. */
const dg_train_opts *dg_spec_opts(const dg_spec *spec);
/* Frees a decoded spec and its strings; accepts NULL. */
void dg_spec_free(dg_spec *spec);
/* The canonical spec JSON of o (every key, defaults written as their values),
 * free with dg_string_free; dg_spec_decode of it gives back the same run. */
dg_status dg_spec_encode(dg_ctx *ctx, const dg_train_opts *o, char **json);
/* SHA-256 (hex) of the canonical spec without where output goes ("export"). */
dg_status dg_spec_hash(dg_ctx *ctx, const dg_train_opts *o, char hex[65]);

/* Runs the training fixture and returns its record as JSON in *json.
 * DG_ERR_USAGE bad options or model; DG_ERR_UNAVAILABLE backend not usable;
 * DG_ERR_DEVICE_OOM out of device memory (the record is still returned). */
dg_status dg_train_run(dg_ctx *ctx, const dg_train_opts *opts, char **json);

/* Checks a --disable-op list ("OP[@BACKEND][,...]", OP a name the reports
 * print: conv2d_fwd, relu_bwd, ..., or conv2d for both directions) before
 * anything is measured: DG_ERR_USAGE naming an unknown op, an unknown backend,
 * or an op aimed at the cpu (the fallback). NULL or "" is DG_OK. */
dg_status dg_disable_ops_check(dg_ctx *ctx, const char *spec);

/* Checks, before anything is measured, that every name and value in o names
 * something devgate has: the model (o->model, else `model`, else "mlp": a
 * preset or a layer string that fits its input), the backend, the disabled
 * ops, the data source's kind, the resolution, augmentation and
 * normalisation. Nothing is opened. DG_ERR_USAGE naming the first that does
 * not; flags and spec files reach it alike. */
dg_status dg_train_opts_inputs_check(dg_ctx *ctx, const dg_train_opts *o, const char *model);

/* ---- measurement steps (docs/schema/measure.md) ---------------------------- */

typedef struct dg_sweep_opts {
    dg_train_opts train;    /* model, backend, data...; batch is ignored */
    int from, to;           /* batches: from (0: 8) doubling up to to (0: no limit) */
    bool no_bisect;         /* skip bisection between last good and first bad */
    int warmup_steps;       /* per trial (0: 3) */
    int timed_steps;        /* per trial (0: 20) */
    double trial_timeout_s; /* per trial (0: 120) */
    double swap_growth_mib; /* stop when swap grows more than this in a trial (0: 256) */
    double
        max_trial_s; /* stop doubling after a good trial that ran longer than this (0: no limit) */
    const char *exe; /* the devgate binary trials re-execute (NULL: /proc/self/exe) */
    dg_progress_fn progress; /* each trial's start and end (may be NULL) */
    void *progress_user;
} dg_sweep_opts;

/* Batch sweep: each trial runs in a child process (`devgate __trial`), so an
 * out-of-memory kill or a driver fault ends that trial only. */
dg_status dg_sweep_run(dg_ctx *ctx, const dg_sweep_opts *opts, char **json);
/* The child side of a trial: runs the training described by argv (the CLI's
 * hidden `__trial` verb passes its arguments) and writes the record as one
 * JSON line to fd. Returns the status of the run. */
dg_status dg_sweep_trial(dg_ctx *ctx, const dg_train_opts *opts, int fd);

typedef struct dg_soak_opts {
    dg_train_opts train;  /* epochs default 10 here */
    bool no_empty_cache;  /* keep the allocator cache across epoch ends */
    size_t leak_per_step; /* bytes kept alive each step (retained references on demand) */
    int val_steps;        /* validation steps per epoch (0: none) */
} dg_soak_opts;

/* Soak: epochs with allocator discipline and per-epoch watermarks. */
dg_status dg_soak_run(dg_ctx *ctx, const dg_soak_opts *opts, char **json);

typedef struct dg_compare_opts {
    dg_train_opts train;    /* backend = the device; cpu is the baseline */
    int batches[4];         /* batch sizes (0-terminated; all 0: 32, 128, 512) */
    int steps;              /* steps per run (0: 20) */
    double loss_tolerance;  /* relative (0: 1e-3) */
    double param_tolerance; /* relative L2 (0: 1e-3) */
    int repetitions;        /* timed repetitions per side, interleaved cpu, device, ... (0: 5) */
} dg_compare_opts;

/* Compare: the same spec and seed on cpu and on the device, and both against
 * the float64 reference: speedup, busy fraction, loss and parameter drift. */
dg_status dg_compare_run(dg_ctx *ctx, const dg_compare_opts *opts, char **json);

typedef struct dg_profile_opts {
    dg_train_opts train;
    int warmup;             /* steps before the window (0: 10) */
    int window;             /* profiled steps (0: 50) */
    const char *trace_path; /* Chrome trace JSON written here, or NULL */
} dg_profile_opts;

/* Profile: a fixed window split into phases and ops, with a Chrome trace. */
dg_status dg_profile_run(dg_ctx *ctx, const dg_profile_opts *opts, char **json);

/* ---- accept: the main job (docs/accept.md) ------------------------------- */

typedef struct dg_accept_opts {
    dg_train_opts train;    /* model (NULL: cifar), backend (NULL: the best device the gate
                             * passes), data, seed, threads, workers, cancel...; batch: the
                             * batch soak/compare/profile use (0: the sweep's knee);
                             * epochs, steps: the soak's (0: the tier's, by time budget) */
    bool quick;             /* the short tier (about a minute on a 2-core machine) */
    int level;              /* the gate's level (0: 1 with quick, else 2; quick iff 1) */
    const char *label;      /* free text kept in the record, or NULL */
    const char *python;     /* interpreter the environment proof inspects, or NULL */
    const char *trace_path; /* the profile's Chrome trace is written here, or NULL */
    int sweep_to;           /* largest sweep batch (0: no limit but memory and time) */
    dg_progress_fn progress;
    void *progress_user;
} dg_accept_opts;

/* Runs env, gate, sweep, soak, compare and profile into one evidence record
 * (docs/schema/report.md, without findings: see dg_evidence_finish) in *json.
 * The record is returned also when the result is DG_ERR_INTERRUPTED (the cancel
 * flag was set: state "interrupted", later steps skipped) or DG_ERR_UNAVAILABLE
 * (the backend asked for is not available). */
dg_status dg_accept_run(dg_ctx *ctx, const dg_accept_opts *opts, char **json);

/* accept -- CMD: the whole method on the user's own program (docs/accept.md,
 * "Your own program"). Every step is a child run of argv supervised as by
 * dg_run_supervise, with {batch}, {device} and {epochs} in its words
 * substituted (never through a shell). */
typedef struct dg_accept_cmd_opts {
    const char *const *argv;  /* the user's command, NULL-terminated */
    const char *probe_path;   /* directory holding the devgate_probe package (NULL: no probe) */
    const char *python;       /* the gate's interpreter (NULL: argv[0] when Python, else python3) */
    const char *device;       /* the device judged (NULL: cuda, then mps, the first that passes) */
    bool quick;               /* the short tier (screening only, as for the fixture) */
    int level;                /* recorded with its budget (0: 1 with quick, else 2) */
    int batch;                /* soak/compare/profile batch (0: the sweep's knee) */
    int epochs;               /* the soak's {epochs} (0: 10, quick 2) */
    int sweep_from, sweep_to; /* the sweep's first batch (0: 8) and largest (0: no limit) */
    size_t mem_budget;        /* RLIMIT_AS of every sweep trial in bytes (0: none) */
    bool empty_cache;         /* the probe empties the device cache at each soak epoch end */
    double trial_timeout_s;   /* per child (0: the tier's) */
    const char *label;        /* free text kept in the record, or NULL */
    const char *trace_path;   /* the profile window's Chrome trace goes here, or NULL */
    const volatile sig_atomic_t *cancel; /* set (a signal number) to stop; forwarded to children */
    dg_progress_fn progress;
    void *progress_user;
    dg_output_fn output; /* the children's output, as dg_run_opts.output (NULL: to fd 2) */
    /* "DEVICE=ARGS[,DEVICE=ARGS]" (DEVICE cpu, cuda or mps; ARGS words split
     * on spaces, appended to that device's runs of the command), or NULL. A
     * command without {device} runs as given on the device, and on the cpu
     * with the accelerators hidden (CUDA_VISIBLE_DEVICES= and the like). */
    const char *device_args;
    void *output_user;
    bool no_fork_server; /* every run a fresh interpreter (default: forked from one server) */
} dg_accept_cmd_opts;

/* Runs env, gate, sweep, soak, compare and profile on the user's command into
 * one evidence record of kind "accept" (as dg_accept_run; finish it with
 * dg_evidence_finish). DG_ERR_USAGE bad options or no command;
 * DG_ERR_UNAVAILABLE the device asked for is not available (record returned);
 * DG_ERR_INTERRUPTED the cancel flag was set (record returned). */
dg_status dg_accept_cmd_run(dg_ctx *ctx, const dg_accept_cmd_opts *opts, char **json);

/* Completes an evidence record (accept or run): applies the rules and the
 * decision (dg_diagnose with overrides), sets each step's verdict from the
 * findings, and judges the final gate. The completed record goes to *json.
 * DG_ERR_USAGE for a bad override, DG_ERR_FORMAT for a record that is not one. */
dg_status dg_evidence_finish(dg_ctx *ctx, const char *record_json, const char *overrides,
                             char **json);

/* ---- diagnosis: rules and the routing decision (docs/rules.md) ----------- */

/* Applies the rules to an evidence record (docs/schema/report.md; a section that
 * is null or absent is not judged) and returns {"v", "thresholds", "findings",
 * "decision"} as JSON in *json. overrides: "NAME=VALUE[,NAME=VALUE...]" or NULL.
 * DG_ERR_USAGE for an unknown threshold or a bad value, DG_ERR_FORMAT when the
 * record does not parse. */
dg_status dg_diagnose(dg_ctx *ctx, const char *record_json, const char *overrides, char **json);
/* The thresholds with their defaults as a JSON array of {name, value, unit, rule, doc}. */
dg_status dg_rules_catalogue(dg_ctx *ctx, char **json);

/* ---- reports (docs/report.md) ------------------------------------------- */

typedef enum dg_report_format {
    DG_REPORT_HTML, /* self-contained page with inline SVG charts */
    DG_REPORT_MD,   /* Markdown for a merge request */
    DG_REPORT_JSON, /* the record, indented */
    DG_REPORT_TEXT, /* the terminal summary (plain UTF-8, no colour) */
} dg_report_format;

/* Renders an evidence record (docs/schema/report.md) into *out (free with
 * dg_string_free). Every string taken from the record is escaped for the format.
 * DG_ERR_FORMAT when the record does not parse or is not an evidence record. */
dg_status dg_report_render(dg_ctx *ctx, const char *record_json, dg_report_format fmt, char **out);

/* ---- run: supervising the user's own program (docs/events.md) ------------- */

/* How devgate run reaches inside the program (docs/events.md "The zero-code
 * probe"). AUTO: a Python interpreter is started as `python -m
 * devgate_probe.auto SCRIPT ARGS`, any other program with devgate's
 * sitecustomize on PYTHONPATH; MANUAL: the program as given, with the events
 * pipe (the explicit probe API); OFF: the program as given without the events
 * pipe (DEVGATE_EVENTS_FD and DEVGATE_EVENTS_FILE removed): samples only. */
typedef enum dg_probe_mode { DG_PROBE_AUTO = 0, DG_PROBE_MANUAL, DG_PROBE_OFF } dg_probe_mode;

typedef struct dg_run_opts {
    const char *const
        *argv; /* the program (argv[0], searched in PATH) and its arguments; NULL-terminated */
    const char *label; /* free text kept in the record, or NULL */
    int sample_ms;     /* process-tree sampling period (<= 0: 200) */
    double timeout_s;  /* wall-clock limit (<= 0: none); then SIGTERM to the tree, SIGKILL after
                          grace_s */
    double grace_s;    /* SIGTERM to SIGKILL (<= 0: 2 s) */
    /* Where the caller's SIGINT/SIGTERM handler stores the signal number (may
     * be NULL). The library installs no handler: it polls this, forwards each
     * new value to the program's process group and marks the run interrupted;
     * the tree is killed if it is still there grace_s later. */
    const volatile sig_atomic_t *forward;
    bool no_env;           /* skip the environment proof (dg_env_run) */
    bool no_nvml;          /* do not load NVML for the tree's GPU memory */
    bool stdout_to_stderr; /* the program's stdout goes to stderr (stdout kept for JSON) */
    size_t max_line;       /* event line cap in bytes (0: 65536) */
    double events_rate;    /* step, phase and fallback events kept per 1 s window (0: 1000) */
    size_t max_steps;      /* step events stored; later ones summarised (0: 100000) */
    size_t series_points;  /* points of the sampled series in the record (0: 600) */
    dg_probe_mode probe;   /* DG_PROBE_AUTO (default), DG_PROBE_MANUAL, DG_PROBE_OFF */
    const char
        *probe_path;  /* directory holding the devgate_probe package (auto; NULL: not armed) */
    bool empty_cache; /* auto: the probe empties the device cache at every epoch end */
    const char *const *env;  /* more environment edits, NULL-terminated (may be NULL): "NAME=VALUE"
                                sets NAME, a bare "NAME" removes it; applied last */
    size_t mem_limit;        /* the program's address-space limit (RLIMIT_AS) in bytes; 0: none */
    dg_progress_fn progress; /* step start and end, epochs, ticks (may be NULL) */
    void *progress_user;
    /* The program's standard error (and its standard output where that goes
     * to a terminal, or to stderr with stdout_to_stderr) passes through
     * devgate, which keeps its tail for the record (supervise.error_lines):
     * through a pseudo-terminal where the descriptor the program would have
     * inherited is a terminal (one for both when they are the same), a pipe
     * otherwise. output gets the bytes; NULL: written to that descriptor. */
    dg_output_fn output;
    void *output_user;
} dg_run_opts;

/* Runs opts->argv without a shell in its own process group, with an events
 * pipe on fd 3 (DEVGATE_EVENTS_FD=3 in its environment, the rest of the
 * environment passed through, stdin on /dev/null), reads its events
 * (docs/events.md), samples its process tree, enforces the timeout, forwards
 * signals, and kills descendants left behind when it exits. For the duration
 * the calling process is made a child subreaper (PR_SET_CHILD_SUBREAPER; the
 * old setting is restored) so orphaned descendants stay visible; only the
 * run's own processes are reaped. *json gets the evidence record of kind
 * "run" (docs/schema/report.md; supervise section in docs/events.md) whatever
 * the program did: its exit status, signal, timeout or interruption are in
 * the record, not in the returned status. DG_ERR_USAGE empty argv;
 * DG_ERR_NOT_FOUND the program does not exist; DG_ERR_IO it could not be
 * started otherwise (not executable, no pipe...; *json NULL in both, the
 * reason on ctx); DG_ERR_NOMEM. */
dg_status dg_run_supervise(dg_ctx *ctx, const dg_run_opts *opts, char **json);
/* devgate run: dg_run_supervise as the command runner's epochs step of the
 * method, under the machine-wide measurement lock with the contention
 * sampled over the run, both recorded in the record ("lock", "contention",
 * and in the soak section when there is one). Same statuses. */
dg_status dg_run_measured(dg_ctx *ctx, const dg_run_opts *opts, char **json);

/* Compares two evidence records of any kind (run, accept, accept -- CMD, a
 * fixture compare; or ledger entries holding one under "record"): B judged
 * against A on the throughput samples both hold (the soaks' per-epoch
 * samples/s, else the compare steps' device repetitions at a common batch)
 * by the median ratio and its seeded bootstrap 95% interval (pays-off,
 * no-gain, no-difference, slower, inconclusive; "n too small" below 5
 * samples a side), with contention and seeds named beside the verdict; the
 * headline speedups, busy fraction, the two memory curves, loss agreement
 * and the part of the two commands that differs. *json gets {"v": 2, "kind":
 * "compare-runs", ...} (docs/events.md "Comparing two runs"). Records whose
 * input buckets differ are refused with DG_ERR_USAGE and a message naming
 * both, unless force. thresholds: "NAME=VALUE,..." overrides (docs/rules.md;
 * NULL: the defaults), echoed under judgement.thresholds; a bad one is
 * DG_ERR_USAGE. DG_ERR_FORMAT when a record does not parse or has no kind. */
dg_status dg_compare_runs(dg_ctx *ctx, const char *record_a, const char *record_b, bool force,
                          const char *thresholds, char **json);

/* ---- ledger (docs/schema/ledger.md) ------------------------------------- */

typedef struct dg_ledger dg_ledger;

/* A run id: "YYYYMMDD-HHMMSS-" (UTC at unix time `when`) and `hex` random
 * lowercase hex digits (even, at most 32), so ids made on different hosts
 * do not meet (the ledger's, a remote run's token, a pack's without a
 * ledger). buf holds at least 17 + hex bytes. */
void dg_run_id(char *buf, size_t len, long long when, int hex);

/* Default ledger path: $DEVGATE_LEDGER, else $XDG_DATA_HOME/devgate/ledger.db,
 * else ~/.local/share/devgate/ledger.db. Caller frees with dg_string_free;
 * NULL when no home folder is known or out of memory. */
char *dg_ledger_default_path(void);
/* The local ledger, where runs wait while the team ledger cannot be reached:
 * $DEVGATE_LOCAL_LEDGER, else $DEVGATE_LEDGER when it names a file, else the
 * default path as if DEVGATE_LEDGER were unset. Free with dg_string_free. */
char *dg_ledger_local_path(void);
/* True when path names a team ledger (postgresql:// or postgres:// URI). */
bool dg_ledger_is_team(const char *path);
/* Opens (creating folders and file, migrating the schema) the ledger at path.
 * DG_ERR_LEDGER corrupt/unwritable, DG_ERR_BUSY locked past timeout_ms,
 * DG_ERR_SCHEMA newer schema. Close with dg_ledger_close. */
dg_status dg_ledger_open(dg_ctx *ctx, const char *path, int timeout_ms, dg_ledger **out);
/* Opens an existing ledger for reading only (SQLite: SQLITE_OPEN_READONLY;
 * nothing is created, migrated or written, so a read-only file, folder or
 * mount can be listed). DG_ERR_NOT_FOUND when no run was recorded at path (no
 * file, or an empty one), DG_ERR_SCHEMA also for an older schema (reading does
 * not migrate); else as dg_ledger_open. Writes through it fail. */
dg_status dg_ledger_open_readonly(dg_ctx *ctx, const char *path, int timeout_ms, dg_ledger **out);
/* Opens a ledger to record runs in: as dg_ledger_open, except that a team
 * ledger that cannot be reached (or refuses the connection) gives the local
 * ledger (dg_ledger_local_path) instead, whose runs are then marked pending for
 * the team ledger (dg_ledger_pending_for) until dg_ledger_push; a warning
 * naming both goes to the log. */
dg_status dg_ledger_open_record(dg_ctx *ctx, const char *path, int timeout_ms, dg_ledger **out);
/* The team ledger (its URI without password) that runs recorded through lg
 * wait for, or NULL when lg records where it was asked to. */
const char *dg_ledger_pending_for(const dg_ledger *lg);
/* The ledger as messages name it: the path, or the URI without its password. */
const char *dg_ledger_name(const dg_ledger *lg);
/* Closes a ledger; accepts NULL. */
void dg_ledger_close(dg_ledger *lg);
typedef struct dg_ledger_push_counts {
    int pushed;  /* runs copied into the team ledger */
    int already; /* runs found there already with the same record (pushed before) */
    int other;   /* runs waiting for another team ledger, left waiting */
} dg_ledger_push_counts;
/* Uploads the runs of the local ledger that wait for team, each exactly once,
 * under its own id, then marks them pushed locally. A run whose id the team
 * ledger already holds with the same record counts as already pushed; with a
 * different record it is a conflict (DG_ERR_LEDGER, the run stays waiting). */
dg_status dg_ledger_push(dg_ctx *ctx, dg_ledger *local, dg_ledger *team, dg_ledger_push_counts *n);
/* Records one run: verb, exit status, record JSON (DG_ERR_USAGE when it does not
 * parse; "interrupted": true or "state": "interrupted" in it marks the run
 * interrupted). *run_id gets the new id (a string the caller frees with
 * dg_string_free), may be NULL. */
dg_status dg_ledger_record(dg_ctx *ctx, dg_ledger *lg, const char *verb, int exit_status,
                           const char *record_json, char **run_id);
/* Replaces the record, exit status and state of run id (an exact id), e.g. to
 * add the evidence pack's location once it is written. DG_ERR_NOT_FOUND when no
 * run has that id. */
dg_status dg_ledger_update(dg_ctx *ctx, dg_ledger *lg, const char *id, int exit_status,
                           const char *record_json);
/* Lists the newest `limit` runs (0: all) as a JSON array into *json: each
 * entry's columns and the summary read from its record (backend, model,
 * batch, throughput METRIC(samples/s), verdict, spec_id, bucket_id; null where
 * the record does not hold it; docs/schema/ledger.md). */
dg_status dg_ledger_list(dg_ctx *ctx, dg_ledger *lg, int limit, char **json);
/* Every run started at or after since (NULL: all; "YYYY-MM-DD" or
 * "YYYY-MM-DDTHH:MM:SSZ", UTC, else DG_ERR_USAGE), oldest first, as a JSON
 * array into *json: list entries with "record", the record parsed and made
 * valid UTF-8. DG_ERR_LEDGER when a stored record does not parse. */
dg_status dg_ledger_export(dg_ctx *ctx, dg_ledger *lg, const char *since, char **json);
/* One run's entry (as listed, summary included) with its record as JSON into
 * *json; id is the run id or a unique prefix of it. DG_ERR_NOT_FOUND when none
 * matches, DG_ERR_USAGE when the prefix matches several. */
dg_status dg_ledger_show(dg_ctx *ctx, dg_ledger *lg, const char *id, char **json);
/* What differs between runs a and b (ids or unique prefixes) of lg, field by
 * field in four groups (run verb, spec through the spec codec, environment,
 * input bucket), into *json (dg_string_free): {"runs": [{id, verb, spec,
 * spec_decoded, env, bucket, samples_per_s, step_ms, batch, verdict}] x2,
 * "rows": [{name, group, whole_group, a, b, kind}] for every row not the same
 * (kind "differs", "one_side": an environment fact one run lacks, "ignored":
 * free text such as a label, or a data path under the same bucket id),
 * "differs", "recorded_by_one", "ignored" (row names), "same_counts",
 * "same_bucket", "comparable" (same verb, spec and bucket; the environment
 * never refuses), "not_comparable", "environment_differs", "ratio" (B/A
 * samples/s), "speedup" (the ratio when comparable)}. Statuses as
 * dg_ledger_show. */
dg_status dg_ledger_diff(dg_ctx *ctx, dg_ledger *lg, const char *a, const char *b, char **json);

/* ---- remote nodes (docs/team.md) ---------------------------------------- */

/* argv (NULL-terminated) as one POSIX shell command line that splits back into
 * exactly those words: each one single-quoted, a ' inside written '\''. Quotes,
 * ;, $(), backquotes, globs and newlines all arrive as plain characters. Free
 * with dg_string_free; NULL when argv is NULL or out of memory. */
char *dg_shell_quote(const char *const *argv);
/* SHA-256 of the whole file at path as 64 lowercase hex digits into hex, its
 * size into *size (may be NULL). DG_ERR_IO when it cannot be read. */
dg_status dg_sha256_file(dg_ctx *ctx, const char *path, char hex[65], uint64_t *size);

/* A session with one node over the system's OpenSSH client (docs/team.md):
 * the node check, content-addressed shipping into the node's cache, the
 * input bucket checked on both sides, the detached run, collect. Each call
 * returns a dg_status with its message on the ctx and what failed on the
 * handle (dg_remote_failure_of); nothing is printed. */
typedef struct dg_remote dg_remote;

/* What a failed remote call ran into, beside its status and message: each
 * one is an exit status of `devgate remote` (docs/cli.md). */
typedef enum dg_remote_failure {
    DG_REMOTE_OK = 0,
    DG_REMOTE_USAGE,       /* a bad request, or ssh or the node failed otherwise */
    DG_REMOTE_UNREACHABLE, /* host down, unknown, or the connection refused */
    DG_REMOTE_AUTH,        /* the node refused our key */
    DG_REMOTE_DEVGATE,     /* devgate missing on the node, too old, another protocol */
    DG_REMOTE_DISK,        /* the node's disk is full */
    DG_REMOTE_LOST,        /* connection lost mid-run; the run goes on on the node */
    DG_REMOTE_BUCKET,      /* the input bucket differs, or a file arrived corrupt */
    DG_REMOTE_NO_RUN,      /* the node has no such run */
    DG_REMOTE_RUN_FAILED,  /* the run left no record (its exit status in the fetch) */
} dg_remote_failure;

/* What the progress callback is handed: a line for the user, a warning (also
 * kept in the record's remote.warnings), or a chunk of the node's stderr. */
typedef enum dg_remote_msg { DG_REMOTE_NOTE, DG_REMOTE_WARNING, DG_REMOTE_STREAM } dg_remote_msg;
typedef void (*dg_remote_progress_fn)(dg_remote_msg kind, const char *text, size_t len, void *user);

typedef struct dg_remote_config {
    const char *host;
    const char *const *ssh_options; /* each passed as -o OPT */
    int n_ssh_options;
    const char *ssh;                /* the ssh program; NULL: "ssh" on PATH */
    const char *devgate;            /* devgate on the node; NULL: "devgate" */
    const char *cache;              /* the node's cache folder; NULL: its default */
    dg_remote_progress_fn progress; /* may be NULL */
    void *user;
} dg_remote_config;

/* A session with cfg's node into *out (one ssh connection shared by its calls
 * unless the options name a ControlPath); nothing is contacted yet. Strings in
 * cfg must outlive the handle. Close with dg_remote_close. */
dg_status dg_remote_open(dg_ctx *ctx, const dg_remote_config *cfg, dg_remote **out);
/* Ends the shared connection and frees the handle; accepts NULL. */
void dg_remote_close(dg_remote *r);
/* What the last failed call of r ran into; DG_REMOTE_OK after a success. */
dg_remote_failure dg_remote_failure_of(const dg_remote *r);
/* Checks the node: devgate there, its protocol, version and commit (a
 * difference is a warning). DG_ERR_UNAVAILABLE with the failure on the handle. */
dg_status dg_remote_check(dg_remote *r);
/* Starts VERB ARGS (argv[0] the verb) detached on the node: the --data files
 * and folders shipped into its cache first, the input bucket of a training
 * verb compared on both sides. The run's token into token. */
dg_status dg_remote_start(dg_remote *r, int argc, const char *const *argv, char token[48]);
/* Streams the run's progress (DG_REMOTE_STREAM) until it ends on the node;
 * DG_REMOTE_LOST when the connection drops. */
dg_status dg_remote_wait(dg_remote *r, const char *token);

/* A run fetched from the node. */
typedef struct dg_remote_fetched {
    bool running;        /* not finished: nothing else is set */
    int exit_status;     /* the verb's on the node */
    char verb[32];       /* the verb asked for */
    char *record;        /* its record with the "remote" section (dg_string_free), or NULL */
    char last_line[512]; /* of its stderr, when it left no record */
} dg_remote_fetched;
/* Fetches run token into *f (its record carrying the node's identity and what
 * this session shipped and checked). like_bucket (JSON text, may be NULL)
 * refuses a record on another input bucket with DG_REMOTE_BUCKET, and marks it
 * collected. Free *f's record with dg_string_free. */
dg_status dg_remote_fetch(dg_remote *r, const char *token, const char *like_bucket,
                          dg_remote_fetched *f);
/* Tells the node run token is dealt with: collect offers it no more. */
dg_status dg_remote_mark(dg_remote *r, const char *token);
/* The tokens of the node's finished, uncollected runs, oldest first, as a
 * JSON array into *json (dg_string_free). */
dg_status dg_remote_list(dg_remote *r, char **json);
/* The words as the node received them (a JSON array) into *json. */
dg_status dg_remote_argv(dg_remote *r, int argc, const char *const *argv, char **json);
/* Empty buf when the two input buckets (JSON text) agree, else the fields that
 * differ ("batch, augment"; "id" when only the id does). */
void dg_bucket_differs(const char *a, const char *b, char *buf, size_t len);

/* One request to the node side (`devgate __node [--cache DIR] WORDS`). */
typedef struct dg_remote_node_req {
    const char *cache; /* NULL: $XDG_CACHE_HOME/devgate or ~/.cache/devgate */
    int argc;          /* the words: the request and its arguments */
    const char *const *argv;
    int in_fd;                      /* the request's input (put, tree) */
    dg_remote_progress_fn progress; /* wait's stream */
    void *user;
} dg_remote_node_req;
/* Answers req: the answer (JSON text, or the token of start) into *answer
 * (dg_string_free; NULL when there is none). On failure the message is on the
 * ctx and *failure says what (USAGE, DISK, BUCKET: arrived corrupt, NO_RUN). */
dg_status dg_remote_node(dg_ctx *ctx, const dg_remote_node_req *req, char **answer,
                         dg_remote_failure *failure);

/* ---- a pool on Slurm (docs/team.md) ------------------------------------- */

/* Expands a Slurm array spec ("0-3", "1,3,5-7", "0-15:4"; a "%N" limit is
 * allowed and ignored) into ascending unique task ids in ids, at most max;
 * *n gets their count. DG_ERR_USAGE naming the spec when it is not one or
 * names more than max tasks. */
dg_status dg_slurm_array_ids(dg_ctx *ctx, const char *spec, int *ids, int max, int *n);
/* The pool's word for a Slurm JobState ("CANCELLED by 0" included): "pending",
 * "running", "completed", "failed" or "cancelled"; "unknown" for NULL or a
 * state it does not know. */
const char *dg_slurm_state(const char *job_state);
/* Parses `scontrol -o show job JOB` (one record a line, KEY=VALUE words) into
 * the tasks of job JOB: *json gets [{"task", "job_id", "state", "slurm_state",
 * "exit_code", "signal", "node", "reason"}] sorted by task (exit_code and
 * signal null until the task ended; node, reason null when Slurm has none),
 * a pending record of several tasks ("ArrayTaskId=3,5-7") expanded into one
 * entry each, records of other jobs skipped; a job that is not an array is
 * task 0. DG_ERR_FORMAT when the text holds no job record. Free *json with
 * dg_string_free. */
dg_status dg_slurm_parse_jobs(dg_ctx *ctx, const char *text, const char *job, char **json);
/* A pool task's job script: "#!/bin/sh", a comment and one `exec` line of
 * argv as dg_shell_quote writes it, so the shell interpolates nothing. Free
 * with dg_string_free; NULL when argv is NULL or out of memory. */
char *dg_pool_script(const char *const *argv);

/* What `pool submit` sends: VERB ARGS as a Slurm array of tasks. */
typedef struct dg_pool_submit_opts {
    const char *dir;                /* the pool folder (NULL: ./devgate-pool), created */
    const char *array;              /* a Slurm array spec, or NULL for 0..tasks-1 */
    int tasks;                      /* with array NULL (0: one task) */
    const char *partition;          /* NULL: Slurm's default */
    const char *time_limit;         /* NULL: the partition's */
    const char *devgate;            /* devgate on the nodes (NULL: this executable) */
    const char *const *sbatch_opts; /* more sbatch words, n_sbatch of them */
    int n_sbatch;
    const char *ledger;      /* where the tasks record: a file (made absolute) or a team URI */
    const char *const *argv; /* VERB ARGS */
    int argc;
} dg_pool_submit_opts;

/* Writes the job script (one quoted exec line of `devgate __pool_task`),
 * submits it through sbatch (no shell, 30 s limit) and writes the job's
 * folder DIR/JOB (job.sh, job.json). *manifest gets job.json's text
 * (dg_string_free). DG_ERR_USAGE bad options, or a ledger URI holding a
 * password (it would be written into the script); DG_ERR_UNAVAILABLE Slurm
 * unusable (sbatch missing, refused or silent: the message says which);
 * DG_ERR_IO the folder could not be written (the message says whether the
 * job was submitted). */
dg_status dg_pool_submit(dg_ctx *ctx, const dg_pool_submit_opts *o, char **manifest);
/* The ledger job JOB's tasks record into, from DIR/JOB/job.json (dir NULL:
 * ./devgate-pool); *ledger NULL when the folder does not say (dg_string_free). */
dg_status dg_pool_job_ledger(dg_ctx *ctx, const char *dir, const char *job, char **ledger);
/* Slurm's view of job JOB merged with its task folders: *json gets
 * {"kind": "pool-status", "job", "slurm_knows", "verb", "argv", "tasks": [{"task",
 * "state", "slurm_state", "detail", "exit_status", "signal", "node", "host",
 * "slurm_job_id"}], "counts": {"pending_or_running", "completed", "bad"}}
 * (dg_string_free). DG_ERR_USAGE a job id that is not one; DG_ERR_UNAVAILABLE
 * scontrol failed; DG_ERR_NOT_FOUND Slurm does not know it and it has no
 * folder. */
dg_status dg_pool_status(dg_ctx *ctx, const char *dir, const char *job, char **json);
/* Collects job JOB: every ended task's record.json, taken only when it is a
 * devgate record of the verb submitted (its kind, run id form, at most 64 MiB)
 * and never through a symlink, is entered into lg once (NULL: none) with
 * "pool": {job, task, node}; the tasks are held to the first one's input
 * bucket (by id, field by field when the records carry none). *json gets
 * {"kind": "pool-collect", "job", "verb", "argv", "same_bucket",
 * "recorded_now", "counts": {"pending_or_running", "bad", "no_record",
 * "bucket_differs", "ledger_errors"}, "tasks": [rows]} (dg_string_free).
 * Statuses as dg_pool_status, and DG_ERR_NOT_FOUND when the job has no
 * folder. */
dg_status dg_pool_collect(dg_ctx *ctx, dg_ledger *lg, const char *dir, const char *job,
                          char **json);

/* One task of a pool job, run on its node inside a Slurm job. */
typedef struct dg_pool_task_opts {
    const char *dir;         /* the pool folder */
    const char *ledger;      /* --ledger for the verb (NULL: its default) */
    int ledger_timeout_ms;   /* for noting the task in the ledger */
    const char *const *argv; /* VERB ARGS */
    int argc;
    const volatile sig_atomic_t *cancel; /* set: the verb gets TERM (KILL 25 s later) */
} dg_pool_task_opts;
typedef struct dg_pool_task_result {
    int exit_status; /* the verb's (128 + signal when one ended it) */
    int signal;      /* 0 if none */
    char note[512];  /* a problem after the verb ran ("" when none) */
} dg_pool_task_result;
/* Runs `devgate --json [--ledger L] VERB ARGS` (this executable) in
 * DIR/JOB/task-N (JOB and N from SLURM_ARRAY_JOB_ID/SLURM_JOB_ID and
 * SLURM_ARRAY_TASK_ID), the folder created exclusively and every file in it
 * created with O_EXCL|O_NOFOLLOW, so a planted link is refused, never
 * followed; keeps task.json, record.json, task.log and exit.json there and
 * notes "pool": {job, task, node} in the ledger's copy. DG_OK when the verb
 * ran (its exit in *r); DG_ERR_USAGE outside Slurm; DG_ERR_IO the folder or
 * a file could not be made safely (the message names it). */
dg_status dg_pool_task_run(dg_ctx *ctx, const dg_pool_task_opts *o, dg_pool_task_result *r);

#ifdef __cplusplus
}
#endif
#endif
