/* CLI helpers shared by the verbs. The CLI compiles against include/devgate.h
 * and cJSON only; it turns library statuses into messages and exit codes. */
#ifndef DG_CLI_H
#define DG_CLI_H

#include "devgate.h"
#include "opt.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <signal.h>
#include <stdio.h>

/* Exit statuses (docs/cli.md). */
enum {
    EXIT_PASS = 0,
    EXIT_FAIL = 1,
    EXIT_USAGE = 2, /* also: ledger unusable, internal errors */
    EXIT_UNAVAILABLE = 3,
    EXIT_NOT_ACCEPTED = 4, /* accept: no fail finding, but the final gate promises no throughput */
    EXIT_INTERRUPTED = 130,
};

typedef struct cli {
    dg_ctx *ctx;
    const char *ledger_path; /* NULL: default */
    bool no_ledger;
    bool json;
    bool quiet;
    bool env_cmdlines; /* --env-cmdlines */
    int progress;      /* --progress: CLI_PROGRESS_AUTO, _BAR, _PLAIN, _OFF */
    const char *prog;
    const cli_verb *verb; /* the verb running */
} cli;

/* Replaces stdout and stderr with streams that clean everything written
 * through dg_text_clean (controls, C1, bidi overrides, invalid UTF-8 become
 * '?'; newlines and tabs stay) before it reaches the descriptors. */
void cli_term_init(void);
/* From now on stdout carries a machine format (JSON, HTML, Markdown): kept
 * byte for byte when it is not a terminal, cleaned when it is. */
void cli_term_machine_output(void);
/* Writes s (devgate's own escapes, e.g. the progress line) to stderr's
 * descriptor unchanged, after what stderr holds. */
void cli_term_raw(const char *s);

/* Writes n bytes (a supervised program's own output) to fd 1 or 2
 * unchanged, after what that stream holds. */
void cli_term_raw_fd(int fd, const char *buf, size_t n);

/* ---- cli_progress.c: a measuring verb's progress on stderr ------------------------ */

enum { CLI_PROGRESS_AUTO, CLI_PROGRESS_BAR, CLI_PROGRESS_PLAIN, CLI_PROGRESS_OFF };
typedef struct cli_progress {
    int mode; /* CLI_PROGRESS_BAR, _PLAIN or _OFF */
    const char *verb;
    char step[16], what[96];
    int index, total, trial, trials;
    bool trials_guess;  /* the sweep's count is what the plan expects */
    bool trial_running; /* a supervised run: its epoch and steps go on the bar */
    double epoch, steps, elapsed, eta;
    bool drawn;     /* the bar is on the screen, the cursor at its end */
    bool line_open; /* the program's output ended mid-line: the bar waits for its end */
    bool verbose;   /* DEVGATE_VERBOSE: the library's notes too */
} cli_progress;
/* --progress auto|bar|plain|off into an int. */
const char *cli_progress_opt(const cli_opt *opt, const char *v, void *field);
/* Sets p up for verb as c's options and stderr say: a bar on a terminal,
 * plain lines elsewhere (or with --progress plain), none with --quiet. */
void cli_progress_start(cli_progress *p, const cli *c, const char *verb);
/* A dg_progress_fn (user: the cli_progress). */
void cli_progress_report(void *user, const dg_progress *r);
/* A dg_output_fn (user: the cli_progress): the program's bytes to the
 * terminal unchanged, the bar cleared before them and drawn again below. */
void cli_progress_output(void *user, int fd, const char *buf, size_t n);
/* A dg_log_fn (user: the cli_progress): warnings (and with DEVGATE_VERBOSE
 * the library's notes) above the bar. */
void cli_progress_log(dg_log_level level, const char *msg, void *user);
/* Prints "devgate: msg" on stderr above the bar. */
void cli_progress_note(cli_progress *p, const char *msg);
/* Takes the bar off the screen; nothing more is shown. */
void cli_progress_end(cli_progress *p);

/* s (NULL: "") cleaned into buf for one table cell: newlines and tabs
 * flattened too, so a hostile value cannot break the row. Returns buf. */
const char *cli_cell(char *buf, size_t n, const char *s);

/* Prints "devgate: <msg>" to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Maps a library status to an exit code, printing the context's message. */
int cli_fail_status(cli *c, dg_status st, const char *what);
/* Records json under verb in the ledger and prints it (JSON mode) or nothing.
 * When the ledger cannot take it, saves the record beside the working directory
 * so nothing is lost, prints why, and returns EXIT_USAGE; else exit_status.
 * *run_id (may be NULL) gets the id to free with dg_string_free. */
int cli_record(cli *c, const char *verb, const char *json, int exit_status, char **run_id);

/* How cli_ledger_open opens the ledger: a reading verb, a writing one, or one
 * that records (creates the file); QUIET leaves the message to the caller. */
enum { CLI_LEDGER_READ = 0, CLI_LEDGER_WRITE = 1, CLI_LEDGER_RECORD = 2, CLI_LEDGER_QUIET = 16 };
/* The ledger this invocation uses: --ledger, else DEVGATE_LEDGER, else the
 * default file (free()); NULL when none can be told. */
char *cli_ledger_path(const cli *c);
/* Opens the ledger at path (NULL: cli_ledger_path) as mode says, with
 * DEVGATE_LEDGER_TIMEOUT_MS as the busy timeout. NULL when it cannot, after
 * printing "WHAT: reason" (just the reason when what is NULL) unless QUIET;
 * *st (may be NULL) gets the status, DG_ERR_USAGE when no path can be told. */
dg_ledger *cli_ledger_open(cli *c, const char *path, int mode, const char *what, dg_status *st);

/* The whole file at path as a NUL-terminated string to free(); NULL with errno
 * set when it cannot be opened or read, EFBIG when it holds more than max
 * bytes, ENOMEM when out of memory. */
char *cli_read_file(const char *path, size_t max);
/* The most bytes a record file may hold (report, compare RUN_A RUN_B). */
#define CLI_RECORD_MAX ((size_t)64 << 20)
/* The same from an open descriptor, read to its end (not closed). */
char *cli_read_fd(int fd, size_t max);
/* Appends one read of a ready fd to *buf (kept NUL-terminated; a failed
 * growth drops the chunk); false at end of file or on an error. */
bool cli_pipe_append(int fd, char **buf, size_t *len);
/* The end of a measurement verb: records json under verb (cli_record with
 * exit_status), then prints rec as JSON with its ledger id (--json), or through
 * print followed by "FAIL     fail" (when fail is not NULL) and the ledger id;
 * a NULL print prints nothing in text mode. Takes and frees json and rec;
 * returns cli_record's status. */
/* Says the record's level against its budget on f ("level 2 took 41 s of
 * its 60 s budget", or that it overran); nothing when it holds no level. */
void cli_level_said(const cJSON *rec, FILE *f);
int cli_record_print(cli *c, const char *verb, char *json, cJSON *rec, int exit_status,
                     void (*print)(const cJSON *rec), const char *fail);
/* The exit code of a measurement verb whose library call still returned a
 * record: EXIT_PASS for DG_OK; else "devgate: VERB: message" and
 * EXIT_UNAVAILABLE for DG_ERR_UNAVAILABLE, EXIT_FAIL for the rest. */
int cli_step_status(cli *c, const char *verb, dg_status st);
/* "DIR/NAME" in a new string to free(), however long; NULL when out of memory. */
char *cli_join(const char *dir, const char *name);
/* mkdir -p: creates path and the folders above it; false with errno set. */
bool cli_make_dirs(const char *path);
/* Writes text to path through a temporary file and a rename, so a reader never
 * sees half a file and a full disk leaves the old one; false with a message. */
bool cli_write_file(const char *path, const char *text);
/* Writes the record to ./devgate-unrecorded-VERB-TIME-PID.json; returns the
 * path written (a static buffer) or NULL. */
const char *cli_save_unrecorded(const char *verb, const char *json);
/* INT, TERM and HUP caught for a measuring verb (cli_signal.c): the first sets
 * *flag to its number; later ones are ignored. Release restores the old
 * dispositions when none was caught, else ignores them until the exit;
 * releasing twice is harmless. */
typedef struct cli_signals {
    struct sigaction old[3];
    bool armed;
} cli_signals;
void cli_signals_catch(cli_signals *s, volatile sig_atomic_t *flag);
void cli_signals_release(cli_signals *s);
/* Whether a verb has them caught now. */
bool cli_signals_armed(void);

/* What a step verb gives its skeleton (cli_step.c; cli_verb.step): its
 * options struct (size bytes, tables[0] filling it; with has_train its
 * dg_train_opts at train_at starts as DG_TRAIN_OPTS_INIT and takes the train
 * table), check (false when the options fit, else the usage message in
 * buf), the library step (p its progress sink, with progress; *verdict
 * an exit status, or left -1 for cli_step_status's), judge (may be NULL: the exit status from the
 * record, *fail the FAIL line), before (before the step runs, e.g. a budget said up front;
 * may be NULL), head (before the summary, may be NULL) and print (the summary).
 * strict: a step that failed keeps no record; quiet_silent:
 * --quiet prints no summary; progress: the step reports its progress on
 * stderr (cli_progress.c). */
typedef struct cli_step {
    size_t size;
    bool has_train;
    size_t train_at;
    bool (*check)(const void *opts, char *buf, size_t len);
    dg_status (*run)(dg_ctx *ctx, void *opts, cli_progress *p, char **json, int *verdict);
    int (*judge)(const cJSON *rec, int rc, const char **fail);
    void (*before)(const cli *c, const void *opts);
    void (*head)(const void *opts);
    void (*print)(const cJSON *rec);
    bool strict, quiet_silent, progress;
} cli_step;
/* The verb c->verb through its step (the run of every step verb). */
int cli_step_main(cli *c, int argc, char **argv);
/* The step verbs' parts (each in its verb's file; verbs.c puts them together). */
dg_status cli_env_run(dg_ctx *ctx, void *opts, cli_progress *p, char **json, int *verdict);
void cli_env_print(const cJSON *rec);
dg_status cli_gate_run(dg_ctx *ctx, void *opts, cli_progress *p, char **json, int *verdict);
void cli_gate_before(const cli *c, const void *opts);
void cli_gate_print(const cJSON *rec);
dg_status cli_train_run(dg_ctx *ctx, void *opts, cli_progress *p, char **json, int *verdict);
int cli_train_judge(const cJSON *rec, int rc, const char **fail);
void cli_train_print(const cJSON *rec);
bool cli_soak_check(const void *opts, char *buf, size_t len);
dg_status cli_soak_run(dg_ctx *ctx, void *opts, cli_progress *p, char **json, int *verdict);
void cli_soak_print(const cJSON *rec);
bool cli_profile_check(const void *opts, char *buf, size_t len);
dg_status cli_profile_run(dg_ctx *ctx, void *opts, cli_progress *p, char **json, int *verdict);
void cli_profile_print(const cJSON *rec);
bool cli_sweep_check(const void *opts, char *buf, size_t len);
dg_status cli_sweep_run(dg_ctx *ctx, void *opts, cli_progress *p, char **json, int *verdict);
int cli_sweep_judge(const cJSON *rec, int rc, const char **fail);
void cli_sweep_print(const cJSON *rec);

/* Runs the rules and the decision on the record, applies the final gate, writes
 * the evidence pack (out_dir or ./devgate-report/RUN_ID/), records the ledger
 * entry and prints the summary (or the JSON); returns the exit status. */
int cli_evidence_finish(cli *c, const char *verb, char *record_json, const char *thresholds,
                        const char *out_dir, int exit_status);
/* Parses a decimal long in [lo, hi]; false for anything else. */
bool cli_parse_long(const char *s, long lo, long hi, long *out);
/* Parses a finite number in [lo, hi] (ABOVE_ZERO as lo: positive); false for
 * anything else. */
#define ABOVE_ZERO DBL_TRUE_MIN
bool cli_parse_double(const char *s, double lo, double hi, double *out);
/* Prints JSON text to stdout as machine output, DEL, C1 controls and bidi
 * marks inside its strings written as \\u escapes (still the same JSON). */
void cli_put_json(const char *text);
/* Prints a record as indented JSON, with its ledger run id when there is one. */
void cli_print_json(cJSON *rec, const char *run_id);

/* Human formatting. */
void fmt_bytes(char *buf, size_t len, const cJSON *metric);
const char *jstr(const cJSON *obj, const char *key, const char *fallback);
double jnum(const cJSON *obj, const char *key, double fallback);
/* A metric's value, or NAN when it is not valid. */
double jmetric(const cJSON *obj, const char *key);
/* The metric at obj's key printed with fmt into buf, or none when it is not
 * valid ("not reported", or "-" in a table column). Returns buf. */
const char *cli_metric(char *buf, size_t len, const cJSON *obj, const char *key, const char *fmt,
                       const char *none);

/* Exit statuses of `devgate run` beyond the common ones (docs/cli.md). */
enum {
    EXIT_RUN_TIMEOUT = 124,  /* the program ran past --timeout and was killed */
    EXIT_RUN_NOEXEC = 126,   /* the program exists but could not be started */
    EXIT_RUN_NOTFOUND = 127, /* no such program */
};

int cmd_ledger(cli *c, int argc, char **argv);
int cmd_remote(cli *c, int argc, char **argv);
int cmd_node(cli *c, int argc, char **argv);
int cmd_pool(cli *c, int argc, char **argv);
int cmd_pool_task(cli *c, int argc, char **argv); /* hidden: one pool task on its node */
int cmd_trial(cli *c, int argc, char **argv);     /* hidden: one sweep trial in a child */
int cmd_compare(cli *c, int argc, char **argv);
int cmd_accept(cli *c, int argc, char **argv);
int cmd_run(cli *c, int argc, char **argv);
/* The directory holding the devgate_probe package (DEVGATE_PROBE_PATH, else
 * beside this executable) into out; false when none has it (cli_run.c). */
bool cli_find_probe(char *out, size_t n);
/* devgate compare RUN_A RUN_B [--force]: two recorded runs side by side. */
int cmd_compare_runs(cli *c, const char *ida, const char *idb, bool force, const char *thresholds);
int cmd_report(cli *c, int argc, char **argv);
int cmd_slo(cli *c, int argc, char **argv);
int cmd_slo_fixture(cli *c, int argc, char **argv); /* hidden: the fixture server of slo */

/* The verbs' option tables and help (one per verb file). */
extern const cli_verb cli_verb_env, cli_verb_gate, cli_verb_train, cli_verb_sweep, cli_verb_trial,
    cli_verb_soak, cli_verb_compare, cli_verb_profile, cli_verb_accept, cli_verb_run,
    cli_verb_report, cli_verb_ledger, cli_verb_remote, cli_verb_node, cli_verb_pool,
    cli_verb_pool_task, cli_verb_slo, cli_verb_slo_fixture;
/* The verbs' own option tables (each in its verb's file; verbs.c lists them). */
extern const cli_opt cli_env_opts[], cli_gate_opts[], cli_sweep_opts[], cli_soak_opts[],
    cli_compare_opts[], cli_compare_runs_opts[], cli_profile_opts[], cli_accept_opts[],
    cli_run_opts[], cli_report_opts[], cli_ledger_opts[], cli_remote_opts[], cli_remote_run_opts[],
    cli_pool_opts[], cli_slo_opts[], cli_slo_fixture_opts[], cli_trial_opts[];
/* Empty buf when two records' input buckets agree (same id), else the names
 * of the bucket fields that differ ("batch, augment"; "id" when only the id
 * does). The rule of remote --like and pool collect (cli_remote.c). */
void cli_bucket_differs(const cJSON *a, const cJSON *b, char *buf, size_t len);
/* --threshold NAME=VALUE (CLI_FUNC): appends to the cli_thresholds at the field. */
typedef struct cli_thresholds {
    char list[4096]; /* "NAME=VALUE,NAME=VALUE" */
} cli_thresholds;
const char *cli_threshold_add(const cli_opt *o, const char *value, void *field);
/* CLI_FUNC for a double of seconds: "90", "90s", "1.5m", "2h" (positive). */
const char *cli_duration_opt(const cli_opt *o, const char *value, void *field);
#endif
