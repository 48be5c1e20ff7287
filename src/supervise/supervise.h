/* The run supervisor's internals (docs/events.md): spawning the user's
 * program, reading its events, sampling its process tree. dg_run_supervise
 * (run.c) puts them together. */
#ifndef DG_SUPERVISE_H
#define DG_SUPERVISE_H

#include "core/core.h"
#include "core/json.h"
#include "core/proc.h"

#include <poll.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- events.c: the line reader and the event parser ------------------------- */

typedef enum dg_ev_kind {
    DG_EV_MALFORMED = -1, /* not a JSON object with "v": 1 and a string "ev" */
    DG_EV_UNKNOWN = 0,    /* well formed, an event name this devgate does not know */
    DG_EV_RUN_START,
    DG_EV_GATE,
    DG_EV_STEP,
    DG_EV_EPOCH_END,
    DG_EV_PHASE,
    DG_EV_FALLBACK,
    DG_EV_SWEEP_TRIAL,
    DG_EV_OOM,
    DG_EV_RUN_END,
    DG_EV_NOTE, /* devgate's own message from the probe (shown by devgate, not the program) */
    DG_EV_NKINDS
} dg_ev_kind;

/* The protocol name of a kind ("step", ...; "unknown", "malformed"). */
const char *dg_ev_kind_name(dg_ev_kind k);

/* Parses one line (without its '\n'; any bytes, not NUL-terminated). A line
 * holding a NUL byte or invalid UTF-8, or that is not a JSON object with
 * "v": 1 and a string "ev", is DG_EV_MALFORMED (*obj NULL). Otherwise *obj
 * gets the object (free with cJSON_Delete) and the kind is returned. Pure:
 * no I/O, no global state beyond cJSON's allocator. */
dg_ev_kind dg_event_parse(const char *line, size_t len, cJSON **obj);

/* Splits a byte stream into lines of at most max_line bytes (without the
 * '\n'); the rest of a longer line is discarded and the line counted as
 * overlong. Blank lines (only spaces, tabs, '\r') are skipped uncounted. */
typedef struct dg_evreader {
    char *buf;
    size_t len, cap, max_line;
    bool discarding; /* inside an overlong line */
    bool nomem;
    uint64_t overlong;
} dg_evreader;
typedef void (*dg_evline_fn)(void *user, const char *line, size_t len);
/* Feeds n bytes; calls fn for every complete line within the cap. */
void dg_evreader_feed(dg_evreader *r, const char *data, size_t n, dg_evline_fn fn, void *user);
/* End of stream: a last unterminated line within the cap is passed to fn. */
void dg_evreader_finish(dg_evreader *r, dg_evline_fn fn, void *user);
void dg_evreader_free(dg_evreader *r);

/* ---- events.c: the collector (what the record keeps of the events) ------------- */

typedef struct dg_ev_step {
    double epoch, step, step_ms, data_ms, loss, batch, t; /* NAN when not reported */
    double syncs; /* host reads the zero-code probe saw in the step; NAN when not reported */
    double syncs_library; /* of them, reads made by a library's code; NAN when not reported */
    double device_syncs;  /* CUDA sync debug mode's synchronizing operations; NAN not reported */
    double allocated, footprint; /* bytes after the step: device live, process resident; NAN */
    signed char synced;          /* 1, 0, -1 unknown */
} dg_ev_step;

typedef struct dg_ev_epoch {
    double epoch, allocated, reserved, max_allocated, driver, footprint, t; /* NAN: not reported */
    signed char cache_emptied, validation;                                  /* 1, 0, -1 unknown */
    signed char gc_full; /* the collection before the reading: 1 full, 0 young, -1 not said */
} dg_ev_epoch;

typedef struct dg_ev_fallback {
    char op[128], device[64], message[512];
    uint64_t count;
} dg_ev_fallback;

/* Limits (0 in a field: the default in brackets). */
typedef struct dg_ev_limits {
    double rate;       /* step, phase, fallback and unknown events per 1 s window [1000] */
    size_t max_steps;  /* step events stored; later ones summarised [100000] */
    size_t max_epochs; /* epoch_end events kept [10000] */
    size_t max_other;  /* gate, sweep_trial, oom events kept, each [1000] */
} dg_ev_limits;

typedef struct dg_evcollect {
    dg_ev_limits lim;
    /* counters (docs/events.md) */
    uint64_t lines, parsed, malformed, overlong, dropped, unknown;
    uint64_t by_kind[DG_EV_NKINDS];
    /* rate window */
    double window_start;
    uint64_t window_n;
    /* kept */
    cJSON *run_start, *run_end;         /* the first of each */
    cJSON *gates, *sweep_trials, *ooms; /* arrays of the events' objects */
    cJSON *notes;                       /* the note events' messages, distinct, cleaned */
    dg_ev_step *steps;
    size_t nsteps, steps_cap;
    uint64_t steps_summarised; /* beyond max_steps: counted into the totals only */
    double sum_step_ms_summarised;
    dg_ev_epoch *epochs;
    size_t nepochs, epochs_cap;
    dg_ev_fallback *fallbacks;
    size_t nfallbacks, fallbacks_cap;
    uint64_t fallback_events;
    bool nomem;
} dg_evcollect;

/* A collector with limits lim (NULL: defaults); false when out of memory. */
bool dg_evcollect_init(dg_evcollect *c, const dg_ev_limits *lim);
void dg_evcollect_free(dg_evcollect *c);
/* Takes one line received at time now (seconds, any monotonic origin):
 * counts it, parses it, applies the rate limit and the caps, keeps what the
 * record needs. Never fails; running out of memory drops the event (counted
 * as dropped) and sets nomem. */
void dg_evcollect_line(dg_evcollect *c, const char *line, size_t len, double now);

/* ---- run_record.c: the run record's sections from the events ------------------ */

/* A copy of run_start's member key, or null. */
cJSON *dg_run_from_start(const dg_evcollect *c, const char *key);
/* gate: the gate record's shape (docs/schema/gate.md) from gate events; null when none. */
cJSON *dg_run_gate_section(const dg_evcollect *c);
/* sweep: the sweep record's shape (docs/schema/measure.md) from sweep_trial events. */
cJSON *dg_run_sweep_section(const dg_evcollect *c);
/* soak: the epochs (each with its tree RSS peak, rss_peaks[i] of npeaks; NAN
 * unknown) and the soak analysis; null when no epoch ended. */
cJSON *dg_run_soak_section(const dg_evcollect *c, const double *rss_peaks, size_t npeaks);
/* profile (partial: step times, the data wait, fallbacks, sync points), and
 * root's "throughput" added; null when no step or fallback was reported. */
cJSON *dg_run_profile_section(const dg_evcollect *c, cJSON *root);
/* The run record's energy per sample (root's "throughput", beside
 * samples_per_s): the mean power the supervisor sampled (supervise.series
 * gpu_power, NVML, the devices the program is on) over the steps the
 * headline rate is of, over that rate; not reported without samples there. */
void dg_run_energy_add(const dg_evcollect *c, cJSON *root);

/* ---- timeline.c: where a child run's seconds went ------------------------------- */

/* devgate's own marks of a child run, wall-clock s (dg_wall_now); NAN unknown. */
typedef struct dg_run_clock {
    double launch;   /* devgate asked for the child (fork server request or fork/exec) */
    double received; /* the origin of the collector's receive times (the steps') */
    double sampler;  /* the tree sampler was ready (NVML opened) */
    double exit;     /* the child was reaped */
    double gone;     /* its whole tree was gone */
} dg_run_clock;
/* supervise.timeline (docs/schema/report.md, run): origin, origin_unix, clock and
 * marks {NAME: {value s after the launch, unit, valid}} from devgate's marks k,
 * run_start's marks, the steps' and run_end's times. */
cJSON *dg_run_timeline(const dg_evcollect *c, const dg_run_clock *k);

/* ---- spawn.c ---------------------------------------------------------------------- */

#define DG_EVENTS_FD 3 /* the events pipe's number in the child (DEVGATE_EVENTS_FD) */
/* The exit status of a program the zero-code probe stopped after
 * DEVGATE_PROBE_MAX_STEPS steps (with run_end status "stopped"). */
#define DG_PROBE_STOP_CODE 86

/* Spawns argv[0] (searched in PATH) without a shell in a new process group,
 * stdin on /dev/null, stdout on the caller's stdout (or its stderr when
 * stdout_to_stderr), stderr inherited, the write end of a new pipe on fd
 * DG_EVENTS_FD and DEVGATE_EVENTS_FD=3 added to the environment (replacing
 * any inherited value). env_edits (NULL-terminated, may be NULL): "NAME=VALUE"
 * sets NAME, a bare "NAME" removes it (a bare DEVGATE_EVENTS_FD leaves the
 * variable out). *events_fd gets the read end (close-on-exec, non-blocking).
 * On Linux the child gets SIGKILL when the calling thread ends
 * (PR_SET_PDEATHSIG), so a supervisor killed with SIGKILL does not leave it
 * running; call it from the thread that waits for the child. Returns 0 or the
 * errno of the failure (ENOENT: no such program, EACCES: not executable, ...). */
int dg_spawn_child(const char *const argv[], const char *const env_edits[], bool stdout_to_stderr,
                   pid_t *pid, int *events_fd);
/* As dg_spawn_child, and the child's address space limited to as_limit bytes
 * (RLIMIT_AS, set between fork and exec; 0: left as inherited). */
int dg_spawn_child_limited(const char *const argv[], const char *const env_edits[],
                           bool stdout_to_stderr, size_t as_limit, pid_t *pid, int *events_fd);

/* As dg_spawn_child_limited, the child's fd 1 and fd 2 given: out_fd and
 * err_fd (the caller's, duplicated into the child; -1: inherited, or fd 2
 * for stdout when stdout_to_stderr). */
int dg_spawn_child_io(const char *const argv[], const char *const env_edits[],
                      bool stdout_to_stderr, int out_fd, int err_fd, size_t as_limit, pid_t *pid,
                      int *events_fd);

/* ---- relay.c: the program's output through devgate ------------------------------ */

typedef struct dg_relay_chan {
    int fd;    /* devgate's end (a pty master or a pipe's read end, non-blocking); -1 none */
    int child; /* the program's end until it is started; -1 none */
    int dest;  /* the descriptor it stands for (1, 2) */
    bool pty;
} dg_relay_chan;

typedef struct dg_relay {
    dg_relay_chan ch[2];      /* [0] the program's stdout (when relayed apart), [1] its stderr */
    int out_child, err_child; /* what the program gets as fd 1 and 2 (-1: inherited) */
    bool merged;              /* stdout and stderr share ch[1] */
    dg_output_fn fn;
    void *user;
    char tail[16384]; /* the error channel's last bytes */
    size_t tail_len;
    unsigned long long bytes[2];
} dg_relay;

/* Opens the channels: stderr always (a pty when fd 2 is a terminal, else a
 * pipe); stdout on the same channel with stdout_to_stderr or when fds 1
 * and 2 are the same terminal, on its own pty when only fd 1 is a terminal,
 * else not relayed. fn (NULL: write to the descriptor) gets what comes. 0 or
 * an errno (everything closed again). */
int dg_relay_open(dg_relay *r, bool stdout_to_stderr, dg_output_fn fn, void *user);
/* Closes the program's ends once it is started (it holds its own copies). */
void dg_relay_started(dg_relay *r);
/* Hands on what the channels hold (at most budget bytes each); true once
 * every channel is closed (the program and its descendants let go). */
bool dg_relay_pump(dg_relay *r, size_t budget);
/* The open channels' poll entries into p (room for 2); returns their count. */
int dg_relay_pollfds(const dg_relay *r, struct pollfd *p);
/* Closes everything; harmless twice. */
void dg_relay_close(dg_relay *r);

#define DG_ERROR_LINES_MAX 4
#define DG_ERROR_LINE_LEN 320
/* The lines that say why a program failed, from the end of its output. */
typedef struct dg_error_lines {
    int n;
    char line[DG_ERROR_LINES_MAX][DG_ERROR_LINE_LEN]; /* cleaned of control bytes and escapes */
    bool traceback; /* the exception of the last Python traceback, else the last lines */
} dg_error_lines;
/* Finds them in text (any bytes): the exception line (and up to three after
 * it) that follows the frames of the last "Traceback (most recent call
 * last):", else the last three non-blank lines; each line as a terminal
 * leaves it (after its last CR, without escape sequences), cleaned, cut at
 * DG_ERROR_LINE_LEN. Pure. */
void dg_error_lines_find(const char *text, size_t len, dg_error_lines *out);

/* The environment edits every supervised child gets, then env_edits (may be
 * NULL): DEVGATE_EVENTS_FD=3 first (so a caller's edit can replace or drop
 * it) and a team ledger URI with its password removed. A dg_malloc'd
 * NULL-terminated array of borrowed strings; NULL when out of memory. */
const char **dg_spawn_edits(const char *const env_edits[]);

/* ---- forksrv.c: the fork server (docs/accept.md "Fast trials") --------------------- */

typedef struct dg_forksrv dg_forksrv;

/* A fork server for the Python command argv (`python [OPTIONS] SCRIPT|-m
 * MODULE|-c CODE ...`), started at its first launch. Off, with the reason
 * kept for the record, when not enabled, not on Linux, without probe_path
 * (the directory holding devgate_probe) or when argv is not such a command.
 * cancel (may be NULL) cuts the wait for the server's start short. NULL only
 * when out of memory; free with dg_forksrv_free. */
dg_forksrv *dg_forksrv_new(const char *const argv[], bool enabled, const char *probe_path,
                           const volatile sig_atomic_t *cancel);
/* Starts argv (the server's interpreter and options, then the program) as a
 * child forked by the server, as dg_spawn_child_io would: its own process
 * group, the environment edits applied to devgate's environment, stdin
 * /dev/null, fd 1 out_fd (-1: devgate's stdout, or its stderr when
 * stdout_to_stderr), fd 2 err_fd (-1: devgate's stderr), the write end of a new pipe on fd 3
 * (*events_fd the read end, non-blocking, close-on-exec), RLIMIT_AS as_limit
 * (0: none), SIGKILL when the server dies. Starts the server first if needed.
 * 0 with *pid set; -1 with why filled when the run must be a plain child (the
 * server is off or gone, another interpreter, the server refused it). */
/* Starts the server (when it is not started or off) with the environment edits
 * a run has, without waiting for its imports: they go on while the caller does
 * other work (accept's env and gate steps). s may be NULL. */
void dg_forksrv_start(dg_forksrv *s, const char *const edits[]);
/* Starts the server if needed and waits until it is ready or off (the wait is
 * counted in the record's launch.server.waited_s). s may be NULL. */
void dg_forksrv_ready(dg_forksrv *s, const char *const edits[]);
int dg_forksrv_launch(dg_forksrv *s, const char *const argv[], const char *const edits[],
                      bool stdout_to_stderr, int out_fd, int err_fd, size_t as_limit, pid_t *pid,
                      int *events_fd, char *why, size_t len);
/* waitpid(pid, wstatus, WNOHANG) for a child of the server: pid with the raw
 * wait status once the server reaped it, 0 while it runs, -1 (errno ECHILD)
 * when the server is gone or does not hold pid. */
pid_t dg_forksrv_wait(dg_forksrv *s, pid_t pid, int *wstatus);
/* The server's pid, -1 when none is running. */
pid_t dg_forksrv_pid(const dg_forksrv *s);
/* What the record says of it (docs/schema/report.md "launch"): asked, used
 * ("fork-server", "mixed", "plain"), counts, the reason of the first plain
 * run or of the server being off, the server's imports and start-up time. */
cJSON *dg_forksrv_json(const dg_forksrv *s);
/* The supervise section's "launch" (docs/events.md): how the child was
 * started ("fork-server" with the server's pid, or "spawn") and, when a
 * server was offered and not used, why. */
void dg_forksrv_launch_json(cJSON *sup, bool forked, pid_t server_pid, const char *why);
/* dg_run_supervise with the child forked by srv when it takes it (NULL: a
 * plain child, as dg_run_supervise); the record's supervise.launch says which. */
dg_status dg_run_supervise_via(dg_ctx *ctx, const dg_run_opts *o, dg_forksrv *srv, char **json);
/* Ends the server (an idle one at the end of its input) and frees s.
 * Accepts NULL. */
void dg_forksrv_free(dg_forksrv *s);

/* ---- probe.c: how the zero-code probe is armed ------------------------------------ */

/* True when argv0's base name is a Python interpreter: python, python3,
 * python3.11 ... */
bool dg_is_python(const char *argv0);

/* Where a Python command line's program starts (the index of SCRIPT, or of
 * -m / -c), after the interpreter's own options; -1 when it cannot be
 * rewritten: no program (stdin, "-"), or -E / -I (PYTHONPATH ignored). */
int dg_python_program_index(const char *const argv[]);

/* The command and environment devgate run starts (docs/events.md "The
 * zero-code probe"). */
typedef struct dg_probe_plan {
    const char **argv; /* the argv to spawn (dg_malloc'd; strings borrowed or owned below) */
    const char **env;  /* env edits for dg_spawn_child, NULL-terminated (dg_malloc'd) */
    char *owned[3];    /* dg_malloc'd strings the two arrays point into */
    const char *mode;  /* "auto", "manual", "off" */
    const char *how;   /* "argv", "sitecustomize" or NULL (not armed) */
    char why[256];     /* why auto is not armed ("" when it is, or not auto) */
} dg_probe_plan;

/* Fills p for o (o->argv, o->probe, o->probe_path, o->empty_cache; the
 * inherited PYTHONPATH from the environment). false when out of memory. */
bool dg_probe_plan_make(const dg_run_opts *o, dg_probe_plan *p);
void dg_probe_plan_free(dg_probe_plan *p);

/* ---- sample.c: the process tree and its sampler ---------------------------------- */

typedef struct dg_proc_entry {
    pid_t pid, ppid, pgid;
    char state;
    unsigned long long ticks;     /* utime + stime */
    unsigned long long starttime; /* clock ticks after boot: tells a reused pid apart */
    long threads;
    double rss; /* bytes */
} dg_proc_entry;

/* A set of processes known to belong to the run's tree. */
typedef struct dg_tree {
    pid_t child, pgid, self;
    unsigned long long child_start;
    bool subreaper; /* orphans of the tree are re-parented to self */
    dg_proc_entry *known;
    size_t nknown, known_cap;
} dg_tree;

/* Reads every process's /proc/PID/stat into a dg_malloc'd array; NULL (n = 0)
 * when /proc cannot be read or out of memory. */
dg_proc_entry *dg_proc_scan(size_t *n);
/* Parses /proc/PID/stat text (NUL-terminated) into e (pid left as is), RSS
 * in bytes of page-sized pages; false when it does not look right. */
bool dg_proc_parse_stat(const char *txt, dg_proc_entry *e, double page);
/* One process's /proc/PID/stat; false when it cannot be read. */
bool dg_proc_stat(pid_t pid, dg_proc_entry *e);
/* The live members (not zombies) of the tree among all (scanned): the child,
 * members of its process group, descendants of either (ppid walk), earlier
 * known members still alive with the same start time, and with subreaper
 * orphans re-parented to self that started after the child. Adds them to the
 * known set. out (may be NULL) gets up to max of them; returns the count. */
size_t dg_tree_members(dg_tree *t, const dg_proc_entry *all, size_t n, dg_proc_entry *out,
                       size_t max);
/* The tree's resident memory in bytes: the sum over the k members that hold
 * any; NAN (not reported) when none does, as while the last one exits (its
 * memory released before it becomes a zombie), never 0. */
double dg_tree_rss(const dg_proc_entry *m, size_t k);
/* Sends sig to every live member of the tree (but the child when
 * exclude_child) and to its process group; returns the number of members
 * other than the child that were signalled. */
size_t dg_tree_kill(dg_tree *t, int sig, bool exclude_child);
/* Reaps (WNOHANG) known members that are zombies of self. */
void dg_tree_reap(dg_tree *t);
void dg_tree_free(dg_tree *t);

typedef struct dg_tree_point {
    double t;       /* seconds since the run started */
    double rss;     /* bytes over the tree */
    double cpu_pct; /* percent of one core over the tree since the previous sample; NAN first */
    double threads, procs;
    double swap;      /* machine swap in use, bytes; NAN unreadable */
    double psi;       /* some avg10, percent; NAN absent */
    double gpu_mem;   /* bytes over the tree's pids (NVML); NAN unknown */
    double gpu_util;  /* percent: the busiest device the tree has a process on (NVML,
                       * device-wide, not per process); NAN unknown or no such device */
    double gpu_power; /* W over the devices the tree has a process on (NVML, device-wide);
                       * NAN unknown or no such device */
} dg_tree_point;

typedef struct dg_tree_sampler dg_tree_sampler;
/* A sampler of tree t (borrowed); nvml: try NVML for per-process GPU memory.
 * NULL when out of memory. */
dg_tree_sampler *dg_tree_sampler_new(dg_tree *t, bool nvml);
/* Takes one sample at time t_s; returns the live member count (0: the tree is
 * gone). */
size_t dg_tree_sample(dg_tree_sampler *s, double t_s);
/* RSS peak of the tree since the last call (NAN when no sample), then resets. */
double dg_tree_sampler_take_rss_peak(dg_tree_sampler *s);
/* The summary "samples" and the downsampled "series" (at most max_points)
 * into the supervise section sup. */
void dg_tree_sampler_json(const dg_tree_sampler *s, cJSON *sup, size_t max_points);
/* "nvml" when GPU memory came from NVML, else the reason it did not. */
const char *dg_tree_sampler_gpu_source(const dg_tree_sampler *s);
void dg_tree_sampler_free(dg_tree_sampler *s);
#endif
