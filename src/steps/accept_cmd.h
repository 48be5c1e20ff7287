/* accept -- CMD internals shared with the unit tests (src/steps/accept_cmd.c). */
#ifndef DG_ACCEPT_CMD_H
#define DG_ACCEPT_CMD_H

#include "core/json.h"
#include "devgate.h"
#include "steps/runner.h"
#include "supervise/supervise.h"

/* Swap growth (MiB) over a trial past which it does not count as good. */
#define DG_ACCEPT_CMD_SWAP_LIMIT_MIB 256.0

/* argv with every {batch}, {device} and {epochs} in each word replaced by
 * the values (device NULL: "cpu"), then the words of extra (NULL-terminated,
 * may be NULL: the device's --device-arg words) appended; NULL-terminated,
 * free with dg_accept_cmd_argv_free. NULL when out of memory. */
char **dg_accept_cmd_argv(const char *const *argv, int batch, const char *device, int epochs,
                          const char *const *extra);
/* Frees what dg_accept_cmd_argv returned; accepts NULL. */
void dg_accept_cmd_argv_free(char **argv);

/* Adds the record's "launch" (how the child runs were started: the fork
 * server or fresh interpreters, docs/accept.md "Fast trials") from srv (NULL:
 * none was offered) to the accept record in *json, printed again; logs one
 * line saying which. *json is left as it was when out of memory. */
void dg_accept_cmd_launch_note(dg_ctx *ctx, const dg_forksrv *srv, char **json);

/* The devgate backend whose level checks stand for the command's device:
 * cuda for cuda, opencl for another accelerator (mps), cpu for the cpu. */
const char *dg_accept_cmd_level_backend(const char *device);
/* accept --level 2..4 -- CMD's device gate (accept_cmd_gate.c): `devgate
 * gate --level level --backend B` in a child on device's backend, its level
 * members (ops, link, sustain, memory_bandwidth) moved into gate's entry of
 * device ("level_backend" names B), its reference check and level object
 * (with backend, verdict, and reason when it did not run) into gate's top;
 * " · level N on B: VERDICT" appended to summary (len bytes). */
void dg_accept_cmd_level_gate(dg_ctx *ctx, cJSON *gate, const char *device, int level,
                              const volatile sig_atomic_t *cancel, char *summary, size_t len);

/* The devices --device-arg maps (the gate's names). */
#define DG_DEVICE_ARG_DEVICES 3 /* cpu, cuda, mps */
#define DG_DEVICE_ARG_WORDS 16  /* words per device */
/* accept -- CMD --device-arg "cpu=WORDS,cuda=WORDS": the words each device's
 * runs of the command get at its end (WORDS split on spaces; empty: none). */
typedef struct dg_device_args {
    char *text; /* dg_malloc'd copy the words point into */
    const char *words[DG_DEVICE_ARG_DEVICES][DG_DEVICE_ARG_WORDS + 1]; /* NULL-terminated */
    bool given[DG_DEVICE_ARG_DEVICES];
} dg_device_args;
/* Parses spec (NULL or "": none) into *out. DG_ERR_USAGE with why (len
 * bytes) for a device other than cpu, cuda, mps, one named twice, an item
 * without '=', more than DG_DEVICE_ARG_WORDS words; DG_ERR_NOMEM. */
dg_status dg_accept_cmd_device_args(const char *spec, dg_device_args *out, char *why, size_t len);
/* The words for device (NULL-terminated), NULL when --device-arg names it not. */
const char *const *dg_device_args_for(const dg_device_args *a, const char *device);
/* Frees what the parse kept; accepts NULL and a zeroed struct. */
void dg_device_args_free(dg_device_args *a);

/* The environment of a cpu run of a command without {device} (NULL-terminated
 * "NAME=VALUE"): every accelerator hidden, CUDA_VISIBLE_DEVICES= and its
 * equivalents for ROCm/HIP, AMD's and PoCL's OpenCL. */
extern const char *const dg_accept_cmd_cpu_env[];

/* An OOM-kill count as the kernel keeps it: readable (false: no source),
 * its source ("cgroup memory.events", "cgroup memory.oom_control" of
 * devgate's own cgroup, "/proc/vmstat" for the whole system, or the test
 * stand-in "DEVGATE_OOM_EVENTS") and the count. */
typedef struct dg_oom_count {
    bool readable;
    const char *source;
    unsigned long long kills;
} dg_oom_count;

/* What the kernel's OOM killer did over one child run. */
typedef enum {
    DG_OOMK_NONE,    /* a count was read before and after: it did not rise */
    DG_OOMK_KILLED,  /* it rose */
    DG_OOMK_UNKNOWN, /* no count could be read (or the source changed) */
} dg_oomk_state;
typedef struct dg_oom_killer {
    dg_oomk_state state;
    const char *source;
    unsigned long long kills; /* the rise (KILLED) */
} dg_oom_killer;

/* Reads the OOM-kill count now: DEVGATE_OOM_EVENTS (a file in memory.events
 * form, for tests) when set, else devgate's own memory cgroup, else
 * /proc/vmstat. */
void dg_accept_cmd_oom_read(dg_oom_count *c);
/* What happened between two reads of dg_accept_cmd_oom_read. */
dg_oom_killer dg_accept_cmd_oom_since(const dg_oom_count *before, const dg_oom_count *after);

/* How a child run ended, from its run record (kind "run"): "ok" (a clean
 * stop by the probe or exit 0, with timed steps), "device-oom" (an oom event
 * or an out-of-memory error leaving the program), "oom-killer" (SIGKILL while
 * oomk says the kernel counted a kill, or could not tell: reason says which),
 * "signal", "timeout", "interrupted" or "failed"; reason (len bytes) says why
 * when not ok. mem_budget > 0 words an oom as the budget's; oomk NULL: not
 * asked (a SIGKILL is then "signal"). */
const char *dg_accept_cmd_ended_rec(const cJSON *rec, size_t mem_budget, const dg_oom_killer *oomk,
                                    char *reason, size_t len);
/* The same from the record's JSON text. */
const char *dg_accept_cmd_ended(const char *run_json, size_t mem_budget, const dg_oom_killer *oomk,
                                char *reason, size_t len);

/* A child's samples/s over its steps after the warm-up (the first steps pay
 * the framework's lazy start-up: cuBLAS, kernel selection), else over all;
 * NAN when it reports neither. */
double dg_accept_cmd_child_sps(const cJSON *rec);
/* A sweep trial at batch b from the child's run record (untrusted; NULL: it
 * left none, why says why) and the OOM killer's count over the run (may be
 * NULL): how it ended and why, its measurements, t->extra new ("signal",
 * "oom_killer", "stopped_by", "timeline": the child's supervise.timeline). */
void dg_accept_cmd_trial_read(const cJSON *rec, const char *why, size_t mem_budget,
                              const dg_oom_killer *oomk, int b, dg_trial_result *t);
/* Why a child run that ended cleanly ended (its run record, untrusted): "window
 * steady", "time budget" or "step cap" when the probe stopped it
 * (supervise.run_end.stop), "epochs done" when the program ended by itself;
 * NULL when it did not complete. */
const char *dg_accept_cmd_stopped_by(const cJSON *rec);

/* How a child run ended as a trial's end, from its run record (untrusted;
 * NULL: it left none, why says why): dg_accept_cmd_ended_rec's word, its
 * reason in reason (len bytes). */
dg_trial_end dg_accept_cmd_end(const cJSON *rec, const char *why, size_t mem_budget,
                               const dg_oom_killer *oomk, char *reason, size_t len);

/* The profile section from the probe's window JSON (NULL: none reported) and
 * the profile child's run-record profile section (may be NULL). */
cJSON *dg_accept_cmd_profile(const cJSON *window, const cJSON *run_profile, const char *device);
#endif
