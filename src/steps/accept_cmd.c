/* accept -- CMD: the whole method on the user's own program (docs/accept.md,
 * "Your own program").
 *
 * Every step is one or more child runs of the user's command, each supervised
 * as `devgate run` supervises one (dg_run_supervise: no shell, own process
 * group, the zero-code probe, the sampled process tree), with {batch},
 * {device} and {epochs} substituted in its words. The probe's knobs
 * (docs/events.md, "Knobs for devgate accept") stop a child cleanly after N
 * optimizer steps and open a torch.profiler window. The steps:
 *
 *   env      dg_env_run, once;
 *   gate     a short Python child in the user's interpreter gates cpu, cuda, mps;
 *   sweep    a child per batch, doubling then bisection; out of memory (the
 *            framework's error, the address-space budget, the OOM killer) ends
 *            one trial only; knee and safe batch as the fixture's sweep;
 *   compare  the same command with {device}=cpu, interleaved with device runs;
 *   soak     the program's own epochs with per-epoch memory;
 *   profile  a torch.profiler window from the step hook, the trace in the pack.
 *
 * The record has the fixture's shape (kind "accept"), so dg_evidence_finish
 * applies the same rules, decision and final gate. */
#include "steps/accept_cmd.h"

#include "core/core.h"
#include "core/json.h"
#include "core/record.h"
#include "measure/measure.h"
#include "steps/steps.h"
#include "supervise/supervise.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TRIALS 48
#define MAX_BATCH (1 << 20)
#define TRIAL_EPOCHS 1000 /* {epochs} of a trial: the probe stops it long before */
#define SWAP_LIMIT_MIB 256.0
#define MAX_ARGS 4096

/* Per-tier sizes: [0] quick, [1] full. */
static const struct cmd_tier {
    int trial_steps;      /* optimizer steps per sweep trial (the first 2 are warm-up) */
    double trial_timeout; /* s per child */
    double max_trial_s;   /* stop doubling once a trial's steps took longer than this */
    int device_from;      /* the sweep's first batch when the gate chose a device */
    int soak_epochs;
    int compare_reps, compare_max_reps; /* pairs: at least, at most */
    double compare_ci_width;            /* add pairs while the interval is wider (share) */
    int compare_steps, compare_max_batch;
    int profile_warmup, profile_window;
    double profile_wall_s; /* the window closes after this even with steps left */
    int trace_max_events;  /* no Chrome trace of a window with more events */
} cmd_tiers[2] = {
    /* 8 steps a quick trial: 6 timed after the warm-up, the fewest a trial's
     * samples/s interval needs, so the sweep's stops are judged on intervals. */
    {8, 180, 10, 32, 2, 2, 2, 0.10, 5, 256, 2, 3, 10, 200000},
    {10, 600, 60, 8, 10, 3, 6, 0.10, 10, 1024, 3, 8, 30, 500000},
};

static const char *const step_names[] = {"env", "gate", "sweep", "soak", "compare", "profile"};
enum { STEP_COUNT = 6 };

typedef struct acmd {
    dg_ctx *ctx;
    const dg_accept_cmd_opts *o;
    const struct cmd_tier *tier;
    cJSON *rec, *steps;
    int index;
    double t0;
    const char *device; /* the device judged ("cpu", "cuda", "mps") */
    int batch;          /* the batch soak, compare and profile use */
    bool has_batch, has_device, has_epochs;
    dg_oom_count oom_before; /* the OOM-kill count before the running child */
} acmd;

static bool cancelled(const acmd *a)
{
    return a->o->cancel && *a->o->cancel;
}

static void begin(acmd *a, int index)
{
    a->index = index;
    a->t0 = dg_now();
    if (a->o->progress)
        a->o->progress(a->o->progress_user, step_names[index], index, STEP_COUNT);
}

static void end(acmd *a, const char *status, const char *summary, const char *error)
{
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "name", step_names[a->index]);
    cJSON_AddStringToObject(s, "status", status);
    cJSON_AddNullToObject(s, "verdict");
    dg_json_add_str(s, "summary", summary ? summary : "");
    dg_json_add_str(s, "error", error && error[0] ? error : NULL);
    bool ran = strcmp(status, "skipped") != 0;
    cJSON_AddItemToObject(s, "wall", dg_json_metric(ran ? dg_now() - a->t0 : 0, ran, "s"));
    cJSON_AddItemToArray(a->steps, s);
}

static void skip(acmd *a, int index, const char *why)
{
    a->index = index;
    end(a, "skipped", why, NULL);
    cJSON_AddNullToObject(a->rec, step_names[index]);
}

static cJSON *metric(double v, const char *unit)
{
    return dg_json_metric(isfinite(v) ? v : 0, isfinite(v), unit);
}

/* ---- the user's command ------------------------------------------------------ */

/* word with every {batch}, {device} and {epochs} replaced; dg_malloc'd. */
static char *substitute(const char *word, const char *batch, const char *device, const char *epochs)
{
    static const char *const keys[] = {"{batch}", "{device}", "{epochs}"};
    const char *vals[] = {batch, device, epochs};
    size_t len = strlen(word) + 1;
    for (const char *p = word; *p; p++)
        for (int k = 0; k < 3; k++)
            if (strncmp(p, keys[k], strlen(keys[k])) == 0)
                len += strlen(vals[k]);
    char *out = dg_malloc(len);
    if (!out)
        return NULL;
    size_t o = 0;
    for (const char *p = word; *p;) {
        int hit = -1;
        for (int k = 0; k < 3 && hit < 0; k++)
            if (strncmp(p, keys[k], strlen(keys[k])) == 0)
                hit = k;
        if (hit < 0) {
            out[o++] = *p++;
            continue;
        }
        size_t vl = strlen(vals[hit]);
        memcpy(out + o, vals[hit], vl);
        o += vl;
        p += strlen(keys[hit]);
    }
    out[o] = '\0';
    return out;
}

char **dg_accept_cmd_argv(const char *const *argv, int batch, const char *device, int epochs)
{
    size_t n = 0;
    while (argv && argv[n])
        n++;
    char **out = dg_calloc(n + 1, sizeof *out);
    if (!out)
        return NULL;
    char b[24], e[24];
    snprintf(b, sizeof b, "%d", batch);
    snprintf(e, sizeof e, "%d", epochs);
    for (size_t i = 0; i < n; i++) {
        out[i] = substitute(argv[i], b, device ? device : "cpu", e);
        if (!out[i]) {
            dg_accept_cmd_argv_free(out);
            return NULL;
        }
    }
    return out;
}

void dg_accept_cmd_argv_free(char **argv)
{
    for (size_t i = 0; argv && argv[i]; i++)
        dg_free(argv[i]);
    dg_free(argv);
}

static bool mentions(const char *const *argv, const char *key)
{
    for (size_t i = 0; argv[i]; i++)
        if (strstr(argv[i], key))
            return true;
    return false;
}

/* ---- one child run ------------------------------------------------------------- */

/* The "oom_kill N" line of a memory.events (cgroup v2), memory.oom_control
 * (v1) or /proc/vmstat file; false when the file or the line is not there. */
static bool read_oom_kill(const char *path, unsigned long long *n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char key[64];
    unsigned long long v;
    bool found = false;
    while (fscanf(f, "%63s %llu", key, &v) == 2)
        if (strcmp(key, "oom_kill") == 0) {
            *n = v;
            found = true;
        }
    fclose(f);
    return found;
}

/* The file of devgate's own memory cgroup that counts OOM kills: the cgroup
 * named in /proc/self/cgroup (v2 "0::PATH", else v1's memory line) under the
 * cgroup mount, with leading components of PATH dropped until the file exists
 * (a container mounts its own cgroup as the root without a cgroup namespace).
 * false when there is none. */
static bool own_cgroup_file(char *out, size_t len, const char **source)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return false;
    char line[1024], v2[1024] = "", v1[1024] = "";
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        char *ctl = c1 + 1;
        const char *path = c2 + 1;
        if (strcmp(line, "0") == 0 && !ctl[0])
            snprintf(v2, sizeof v2, "%s", path);
        else
            for (char *sv = NULL, *t = strtok_r(ctl, ",", &sv); t; t = strtok_r(NULL, ",", &sv))
                if (strcmp(t, "memory") == 0)
                    snprintf(v1, sizeof v1, "%s", path);
    }
    fclose(f);
    struct {
        const char *path, *mount, *file, *source;
    } tries[] = {{v1, "/sys/fs/cgroup/memory", "memory.oom_control", "cgroup memory.oom_control"},
                 {v2, "/sys/fs/cgroup", "memory.events", "cgroup memory.events"}};
    for (size_t i = 0; i < 2; i++) {
        if (!tries[i].path[0])
            continue;
        for (const char *p = tries[i].path; p;) {
            while (*p == '/')
                p++;
            snprintf(out, len, "%s%s%s/%s", tries[i].mount, p[0] ? "/" : "", p, tries[i].file);
            unsigned long long n;
            if (read_oom_kill(out, &n)) {
                *source = tries[i].source;
                return true;
            }
            if (!p[0])
                break;
            p = strchr(p, '/');
            if (!p)
                p = "";
        }
    }
    return false;
}

void dg_accept_cmd_oom_read(dg_oom_count *c)
{
    memset(c, 0, sizeof *c);
    const char *test = getenv("DEVGATE_OOM_EVENTS");
    if (test && test[0]) {
        /* Tests stand in for the kernel: the count from that file. */
        c->readable = read_oom_kill(test, &c->kills);
        c->source = "DEVGATE_OOM_EVENTS";
        return;
    }
    char path[2200];
    if (own_cgroup_file(path, sizeof path, &c->source)) {
        c->readable = read_oom_kill(path, &c->kills);
        if (c->readable)
            return;
    }
    c->readable = read_oom_kill("/proc/vmstat", &c->kills);
    c->source = c->readable ? "/proc/vmstat" : NULL;
}

dg_oom_killer dg_accept_cmd_oom_since(const dg_oom_count *before, const dg_oom_count *after)
{
    dg_oom_killer k = {.state = DG_OOMK_UNKNOWN, .source = NULL, .kills = 0};
    if (before->readable && after->readable && before->source && after->source &&
        strcmp(before->source, after->source) == 0) {
        k.source = after->source;
        k.kills = after->kills > before->kills ? after->kills - before->kills : 0;
        k.state = k.kills ? DG_OOMK_KILLED : DG_OOMK_NONE;
    }
    return k;
}

/* The environment edits of one child run ("NAME=VALUE"), as many as the step
 * needs and each as long as it is (a long inherited PYTHONPATH, a trace path):
 * nothing is dropped or cut. dg_malloc'd; env_free releases them. */
typedef struct child_env {
    char **vars; /* NULL-terminated; NULL before the first */
    int n;
    bool nomem; /* an edit could not be made: the child must not run without it */
} child_env;

static void env_add(child_env *e, const char *fmt, ...) DG_PRINTF(2, 3);
static void env_add(child_env *e, const char *fmt, ...)
{
    if (e->nomem)
        return;
    char **v = dg_realloc(e->vars, (size_t)(e->n + 2) * sizeof *v);
    if (!v) {
        e->nomem = true;
        return;
    }
    e->vars = v;
    va_list ap;
    va_start(ap, fmt);
    char *var = dg_vasprintf(fmt, ap);
    va_end(ap);
    if (!var)
        e->nomem = true;
    else
        v[e->n++] = var;
    v[e->n] = NULL;
}

static void env_free(child_env *e)
{
    for (int i = 0; i < e->n; i++)
        dg_free(e->vars[i]);
    dg_free(e->vars);
    memset(e, 0, sizeof *e);
}

/* Runs argv supervised; the run record parsed, NULL (why set) when it could
 * not start. */
static cJSON *supervise_child(acmd *a, const char *const *argv, dg_probe_mode mode,
                              const child_env *env, bool empty_cache, size_t limit, char *why,
                              size_t len)
{
    if (env && env->nomem) {
        snprintf(why, len, "out of host memory (the child's environment)");
        return NULL;
    }
    dg_run_opts ro = {.argv = argv,
                      .no_env = true,
                      .timeout_s = a->o->trial_timeout_s > 0 ? a->o->trial_timeout_s
                                                             : a->tier->trial_timeout,
                      .forward = a->o->cancel,
                      .stdout_to_stderr = true,
                      .probe = mode,
                      .probe_path = a->o->probe_path,
                      .empty_cache = empty_cache,
                      .env = env ? (const char *const *)env->vars : NULL,
                      .mem_limit = limit,
                      .sample_ms = 100};
    char *json = NULL;
    dg_accept_cmd_oom_read(&a->oom_before);
    dg_status st = dg_run_supervise(a->ctx, &ro, &json);
    if (st != DG_OK || !json) {
        snprintf(why, len, "%s", dg_errmsg(a->ctx));
        dg_string_free(json);
        return NULL;
    }
    cJSON *rec = cJSON_Parse(json);
    dg_string_free(json);
    if (!rec)
        snprintf(why, len, "the child's run record does not parse");
    return rec;
}

/* A run of the user's command at (batch, device, epochs); steps > 0 stops it
 * cleanly after that many optimizer steps. */
static cJSON *run_cmd(acmd *a, int batch, const char *device, int epochs, int steps,
                      const char *profile, const char *profile_out, bool empty_cache, size_t limit,
                      char *why, size_t len)
{
    char **argv = dg_accept_cmd_argv(a->o->argv, batch, device, epochs);
    if (!argv) {
        snprintf(why, len, "out of host memory");
        return NULL;
    }
    child_env env = {.n = 0};
    if (steps > 0)
        env_add(&env, "DEVGATE_PROBE_MAX_STEPS=%d", steps);
    if (profile && profile_out) {
        env_add(&env, "DEVGATE_PROBE_PROFILE=%s", profile);
        env_add(&env, "DEVGATE_PROBE_PROFILE_OUT=%s", profile_out);
        env_add(&env, "DEVGATE_PROBE_PROFILE_WALL=%g", a->tier->profile_wall_s);
        if (a->o->trace_path) {
            env_add(&env, "DEVGATE_PROBE_TRACE=%s", a->o->trace_path);
            env_add(&env, "DEVGATE_PROBE_TRACE_MAX_EVENTS=%d", a->tier->trace_max_events);
        }
    }
    dg_log(a->ctx, DG_LOG_INFO, "%s: batch %d on %s", step_names[a->index], batch, device);
    cJSON *rec = supervise_child(a, (const char *const *)argv, DG_PROBE_AUTO, &env, empty_cache,
                                 limit, why, len);
    env_free(&env);
    dg_accept_cmd_argv_free(argv);
    return rec;
}

/* A child's samples/s over its steps after the warm-up (the first steps pay
 * the framework's lazy start-up: cuBLAS, kernel selection), else over all. */
static double child_sps(const cJSON *rec)
{
    double v = dg_json_metric_value(dg_jpath(rec, "throughput.samples_per_s_after_warmup"));
    return isfinite(v) ? v : dg_jnum(rec, "throughput.samples_per_s");
}

static bool mentions_oom(const char *s)
{
    static const char *const pats[] = {"out of memory", "can't allocate memory",
                                       "not enough memory", "Cannot allocate memory",
                                       "MemoryError"};
    for (size_t i = 0; s && i < sizeof pats / sizeof pats[0]; i++)
        if (strstr(s, pats[i]))
            return true;
    return false;
}

const char *dg_accept_cmd_ended(const char *run_json, size_t mem_budget, const dg_oom_killer *oomk,
                                char *reason, size_t len)
{
    cJSON *rec = cJSON_Parse(run_json);
    const char *e = dg_accept_cmd_ended_rec(rec, mem_budget, oomk, reason, len);
    cJSON_Delete(rec);
    return e;
}

const char *dg_accept_cmd_ended_rec(const cJSON *rec, size_t mem_budget, const dg_oom_killer *oomk,
                                    char *reason, size_t len)
{
    reason[0] = '\0';
    const cJSON *sup = dg_jpath(rec, "supervise");
    if (!sup) {
        snprintf(reason, len, "no run record");
        return "failed";
    }
    const char *state = dg_jstr(rec, "state");
    const char *sig = dg_jstr(sup, "signal");
    const char *msg = dg_jstr(sup, "run_end.message");
    double xs = dg_jnum(sup, "exit_status");
    if (dg_jbool(sup, "interrupted") == 1) {
        snprintf(reason, len, "interrupted");
        return "interrupted";
    }
    if (dg_jbool(sup, "timed_out") == 1) {
        snprintf(reason, len, "timed out after %.0f s", dg_jnum(rec, "spec.timeout_s"));
        return "timeout";
    }
    const cJSON *oom = cJSON_GetArrayItem(dg_jpath(rec, "oom"), 0);
    if (oom || (state && strcmp(state, "complete") != 0 && mentions_oom(msg))) {
        const char *m = oom ? dg_jstr(oom, "message") : msg;
        snprintf(reason, len, "%s%s", mem_budget ? "over the memory budget: " : "",
                 m ? m : "out of memory");
        return "device-oom";
    }
    /* SIGKILL is how the kernel's OOM killer ends a process: it is the OOM
     * killer's when the kernel counted a kill over the child's run, or when
     * no count can be read (said so); not when a count was read and stayed. */
    if (sig && strcmp(sig, "SIGKILL") == 0 && oomk && oomk->state == DG_OOMK_KILLED) {
        snprintf(reason, len,
                 "oom-killer: killed by SIGKILL while the kernel's OOM killer counted %llu "
                 "kill%s (%s)",
                 oomk->kills, oomk->kills == 1 ? "" : "s", oomk->source ? oomk->source : "?");
        return "oom-killer";
    }
    if (sig && strcmp(sig, "SIGKILL") == 0 && oomk && oomk->state == DG_OOMK_UNKNOWN) {
        snprintf(reason, len,
                 "oom-killer: killed by signal 9 (likely out of memory: no OOM-kill count is "
                 "readable here)");
        return "oom-killer";
    }
    if (sig && strcmp(sig, "SIGKILL") == 0 && oomk) {
        snprintf(reason, len, "killed by SIGKILL (not the OOM killer: %s counted no kill)",
                 oomk->source ? oomk->source : "the kernel");
        return "signal";
    }
    if (sig) {
        snprintf(reason, len, "killed by %s", sig);
        return "signal";
    }
    if (state && strcmp(state, "complete") == 0) {
        if (!(dg_jnum(rec, "throughput.timed_steps") > 0) ||
            !isfinite(dg_jnum(rec, "throughput.samples_per_s"))) {
            snprintf(reason, len,
                     "no optimizer step with its batch was seen (the zero-code probe reports a "
                     "PyTorch training loop)");
            return "failed";
        }
        return "ok";
    }
    if (msg)
        snprintf(reason, len, "%s", msg);
    else if (isfinite(xs))
        snprintf(reason, len, "exit status %.0f", xs);
    else
        snprintf(reason, len, "the program did not end cleanly");
    return "failed";
}

/* ---- gate ------------------------------------------------------------------------ */

/* The interpreter the gate runs in: --python, else the command's own when it
 * is Python, else python3. */
static const char *gate_python(const acmd *a)
{
    if (a->o->python)
        return a->o->python;
    if (dg_is_python(a->o->argv[0]))
        return a->o->argv[0];
    return "python3";
}

static void choose(acmd *a, const cJSON *gate, char *why, size_t len, dg_status *st)
{
    static const char *const order[] = {"cuda", "mps"};
    const char *want = a->o->device;
    a->device = "cpu";
    if (want && strcmp(want, "cpu") == 0)
        return;
    for (size_t i = 0; i < (want ? 1 : 2); i++) {
        const char *name = want ? want : order[i];
        const cJSON *b;
        cJSON_ArrayForEach(b, dg_jpath(gate, "backends"))
        {
            const char *n = dg_jstr(b, "name");
            if (!n || strcmp(n, name) != 0)
                continue;
            if (dg_jbool(b, "available") == 1 && dg_jbool(b, "matmul.ok") == 1) {
                a->device = name;
                return;
            }
            if (want) {
                const char *r = dg_jstr(b, "reason");
                snprintf(why, len, "device %s is not available in the program's interpreter: %s",
                         name, r ? r : "its matrix product failed");
                *st = DG_ERR_UNAVAILABLE;
                return;
            }
        }
    }
    if (want) {
        snprintf(why, len, "device %s is not one the gate names (cpu, cuda, mps)", want);
        *st = DG_ERR_UNAVAILABLE;
    }
}

static dg_status run_gate(acmd *a)
{
    begin(a, 1);
    const char *py = gate_python(a);
    const char *code = "import devgate_probe as d\n"
                       "p = d.Probe(label='devgate accept gate')\n"
                       "for dev in ('cpu', 'cuda', 'mps'):\n"
                       "    p.gate(dev)\n";
    const char *argv[] = {py, "-c", code, NULL};
    child_env env = {.n = 0};
    const char *pp = getenv("PYTHONPATH");
    env_add(&env, "PYTHONPATH=%s%s%s", a->o->probe_path ? a->o->probe_path : "",
            pp && pp[0] ? ":" : "", pp ? pp : "");
    char why[512] = "";
    cJSON *rec = a->o->probe_path
                     ? supervise_child(a, argv, DG_PROBE_MANUAL, &env, false, 0, why, sizeof why)
                     : NULL;
    env_free(&env);
    if (!a->o->probe_path)
        snprintf(why, sizeof why, "the devgate_probe package was not found beside devgate");
    cJSON *gate = rec ? cJSON_DetachItemFromObjectCaseSensitive(rec, "gate") : NULL;
    cJSON_Delete(rec);
    if (gate && !cJSON_IsObject(gate)) {
        cJSON_Delete(gate);
        gate = NULL;
        snprintf(why, sizeof why, "%s -c: the interpreter reported no gate (is torch installed?)",
                 py);
    }
    dg_status st = DG_OK;
    if (gate) {
        cJSON_AddStringToObject(gate, "python", py);
        cJSON_AddItemToObject(a->rec, "gate", gate);
    } else {
        cJSON_AddNullToObject(a->rec, "gate");
        st = DG_ERR_UNAVAILABLE;
    }
    char sum[512] = "";
    size_t off = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, dg_jpath(gate, "backends"))
    {
        const char *n = dg_jstr(b, "name");
        bool avail = dg_jbool(b, "available") == 1;
        off += (size_t)snprintf(sum + off, off < sizeof sum ? sizeof sum - off : 0, "%s%s %s",
                                off ? " · " : "", n ? n : "?",
                                !avail                          ? "not available"
                                : dg_jbool(b, "matmul.ok") == 1 ? "ok"
                                                                : "FAILED");
        if (off >= sizeof sum)
            break;
    }
    if (gate)
        choose(a, gate, why, sizeof why, &st);
    if (st != DG_OK) {
        dg_fail(a->ctx, st, "accept: %s", why);
        end(a, "failed", sum, why);
    } else {
        end(a, "ok", sum, NULL);
    }
    return st;
}

/* ---- sweep ------------------------------------------------------------------------ */

typedef struct trial {
    int batch;
    const char *ended;
    double sps, loop_s;
    dg_sweep_rate rate; /* sps with its interval from the probe's step times */
    bool swapped;
    cJSON *json;
} trial;

typedef struct sweep {
    trial t[MAX_TRIALS];
    int n;
} sweep;

static bool trial_good(const trial *t)
{
    return strcmp(t->ended, "ok") == 0 && !t->swapped;
}

/* One trial's record entry (TRIAL of docs/schema/measure.md) from its run record. */
static trial *sweep_trial(acmd *a, sweep *s, int b)
{
    if (s->n >= MAX_TRIALS)
        return NULL;
    trial *t = &s->t[s->n++];
    memset(t, 0, sizeof *t);
    t->batch = b;
    t->sps = NAN;
    double t0 = dg_now();
    char why[512] = "", reason[512] = "";
    cJSON *rec = run_cmd(a, b, a->device, TRIAL_EPOCHS, a->tier->trial_steps, NULL, NULL, false,
                         a->o->mem_budget, why, sizeof why);
    dg_oom_count after;
    dg_accept_cmd_oom_read(&after);
    dg_oom_killer oomk = dg_accept_cmd_oom_since(&a->oom_before, &after);
    t->ended = rec ? dg_accept_cmd_ended_rec(rec, a->o->mem_budget, &oomk, reason, sizeof reason)
                   : "failed";
    if (!rec)
        snprintf(reason, sizeof reason, "%s", why);
    cJSON *j = t->json = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "batch", b);
    cJSON_AddStringToObject(j, "ended", t->ended);
    dg_json_add_str(j, "reason", reason[0] ? reason : NULL);
    dg_json_add_str(j, "signal", dg_jstr(rec, "supervise.signal"));
    if (strcmp(t->ended, "device-oom") == 0)
        cJSON_AddBoolToObject(j, "budget", a->o->mem_budget > 0);
    if (strcmp(t->ended, "oom-killer") == 0) {
        cJSON *k = cJSON_AddObjectToObject(j, "oom_killer");
        dg_json_add_str(k, "source", oomk.source);
        if (oomk.state == DG_OOMK_KILLED)
            cJSON_AddNumberToObject(k, "kills", (double)oomk.kills);
        else
            cJSON_AddNullToObject(k, "kills");
    }
    bool ok = strcmp(t->ended, "ok") == 0;
    double sps = ok ? child_sps(rec) : NAN;
    t->sps = sps;
    cJSON_AddItemToObject(j, "samples_per_s", metric(sps, "samples/s"));
    cJSON *sm = cJSON_AddObjectToObject(j, "step_ms");
    const cJSON *stats = dg_jpath(rec, "profile.step.stats");
    double med = dg_jnum(stats, "median");
    cJSON_AddItemToObject(sm, "median", metric(ok ? med : NAN, "ms"));
    cJSON_AddItemToObject(sm, "iqr", metric(ok ? dg_jnum(stats, "iqr") : NAN, "ms"));
    double n = dg_jnum(stats, "n");
    cJSON_AddNumberToObject(sm, "steps", ok && isfinite(n) ? n : 0);
    cJSON_AddStringToObject(sm, "source", ok && isfinite(med) ? "steps" : "none");
    /* The probe reports its step-time statistics, not the steps: the notch
     * rule's interval of the median (docs/measure.md "Sweep"), over the step
     * with its loader wait where the probe reports that (the time the rate
     * divides by), else over the step alone. */
    const cJSON *ws = dg_jpath(rec, "profile.step.wall_stats");
    const cJSON *cs = ws ? ws : stats;
    t->rate =
        dg_sweep_rate_ci(sps, NULL, 0, dg_jnum(cs, "median"), dg_jnum(cs, "iqr"), dg_jnum(cs, "n"));
    if (!ok)
        t->rate.reason = "the trial did not end ok";
    cJSON_AddItemToObject(j, "samples_per_s_ci", dg_sweep_rate_json(&t->rate));
    /* The allocator's peak over the epochs the probe closed (cuda, mps). */
    double peak = NAN;
    const cJSON *ep;
    cJSON_ArrayForEach(ep, dg_jpath(rec, "soak.epochs"))
    {
        double v = dg_jnum(ep, "max_allocated");
        if (isfinite(v) && !(v <= peak))
            peak = v;
    }
    cJSON_AddItemToObject(j, "device_allocated_peak", metric(peak, "bytes"));
    cJSON_AddItemToObject(j, "device_reserved_peak", metric(NAN, "bytes"));
    const cJSON *smp = dg_jpath(rec, "supervise.samples");
    cJSON_AddItemToObject(j, "rss_peak",
                          metric(dg_json_metric_value(dg_jpath(smp, "rss_peak")), "bytes"));
    double sg = dg_json_metric_value(dg_jpath(smp, "swap_growth"));
    t->swapped = isfinite(sg) && sg > SWAP_LIMIT_MIB * 1048576.0;
    cJSON_AddItemToObject(j, "swap_growth", metric(sg, "bytes"));
    cJSON_AddItemToObject(j, "psi_peak",
                          metric(dg_json_metric_value(dg_jpath(smp, "psi_peak")), "percent"));
    cJSON_AddItemToObject(j, "wall_s", metric(dg_now() - t0, "s"));
    double steps = dg_jnum(rec, "throughput.timed_steps");
    t->loop_s = ok && sps > 0 && steps > 0 ? steps * b / sps : NAN;
    cJSON_Delete(rec);
    dg_log(a->ctx, DG_LOG_INFO, "sweep: batch %d: %s%s%s", b, t->ended, reason[0] ? ": " : "",
           reason);
    return t;
}

static const char *stop_of(const trial *t, size_t mem_budget)
{
    if (strcmp(t->ended, "device-oom") == 0)
        return mem_budget ? "budget" : "oom";
    if (strcmp(t->ended, "oom-killer") == 0)
        return "oom"; /* out of memory as the kernel saw it: a proving stop, as the device's */
    if (strcmp(t->ended, "ok") == 0)
        return "swap";
    return t->ended;
}

static void run_sweep(acmd *a)
{
    begin(a, 2);
    if (!a->has_batch) {
        end(a, "skipped", "the command has no {batch}: there is no batch to sweep", NULL);
        cJSON_AddNullToObject(a->rec, "sweep");
        return;
    }
    sweep *s = dg_calloc(1, sizeof *s);
    if (!s) {
        end(a, "failed", "", "out of host memory");
        cJSON_AddNullToObject(a->rec, "sweep");
        return;
    }
    /* A device's small batches are launch-bound: their samples/s only
     * doubles with the batch, and each trial costs the program's start-up
     * (seconds), so the quick tier starts a device's doubling higher. */
    bool dev_from = !a->o->sweep_from && strcmp(a->device, "cpu") != 0;
    int from = a->o->sweep_from > 0 ? a->o->sweep_from : dev_from ? a->tier->device_from : 8;
    if (a->o->sweep_to > 0 && from > a->o->sweep_to)
        from = a->o->sweep_to;
    int to = a->o->sweep_to > 0 ? a->o->sweep_to : MAX_BATCH;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "v", 1);
    cJSON_AddStringToObject(root, "kind", "sweep");
    cJSON_AddStringToObject(root, "source", "command");
    cJSON *spec = cJSON_AddObjectToObject(root, "spec");
    cJSON_AddStringToObject(spec, "backend", a->device);
    cJSON_AddNumberToObject(spec, "from", from);
    cJSON_AddStringToObject(spec, "from_source",
                            a->o->sweep_from ? "option"
                            : dev_from       ? "tier (a device)"
                                             : "default");
    if (a->o->sweep_to > 0)
        cJSON_AddNumberToObject(spec, "to", a->o->sweep_to);
    else
        cJSON_AddNullToObject(spec, "to");
    cJSON_AddBoolToObject(spec, "bisect", true);
    cJSON_AddNumberToObject(spec, "warmup_steps", 2);
    cJSON_AddNumberToObject(spec, "timed_steps", a->tier->trial_steps - 2);
    cJSON_AddNumberToObject(spec, "max_steps", a->tier->trial_steps);
    cJSON_AddNumberToObject(spec, "trial_timeout_s",
                            a->o->trial_timeout_s > 0 ? a->o->trial_timeout_s
                                                      : a->tier->trial_timeout);
    cJSON_AddNumberToObject(spec, "swap_growth_mib", SWAP_LIMIT_MIB);
    cJSON_AddNumberToObject(spec, "max_trial_s", a->tier->max_trial_s);
    cJSON_AddItemToObject(spec, "mem_budget",
                          dg_json_metric((double)a->o->mem_budget, a->o->mem_budget > 0, "bytes"));
    cJSON_AddStringToObject(spec, "mem_budget_source",
                            a->o->mem_budget ? "option (RLIMIT_AS of each trial)" : "none");

    cJSON *trials = cJSON_AddArrayToObject(root, "trials");
    const char *why = "limit";
    int at = 0, last_good = 0, first_bad = 0;
    bool interrupted = false, nomem = false;
    /* A program's own data has no size devgate knows: no train-set stop. */
    dg_sweep_stopper stop;
    dg_sweep_stop_init(&stop, to, a->tier->max_trial_s, NAN);
    for (long b = from; b <= to && !cancelled(a); b *= 2) {
        trial *t = sweep_trial(a, s, (int)b);
        if (!t) {
            nomem = true;
            break;
        }
        cJSON_AddItemReferenceToArray(trials, t->json);
        at = t->batch;
        if (strcmp(t->ended, "interrupted") == 0) {
            why = "interrupted";
            interrupted = true;
            break;
        }
        if (!trial_good(t)) {
            why = stop_of(t, a->o->mem_budget);
            first_bad = t->batch;
            break;
        }
        last_good = t->batch;
        const char *end = dg_sweep_stop_next(&stop, t->batch, &t->rate, t->loop_s);
        cJSON_AddItemToObject(t->json, "stop_check", dg_sweep_judged_json(&stop.last));
        if (end) {
            why = end;
            break;
        }
    }
    if (cancelled(a))
        interrupted = true, why = "interrupted";
    cJSON *stopped = cJSON_AddObjectToObject(root, "stopped");
    cJSON_AddStringToObject(stopped, "reason", why);
    cJSON_AddNumberToObject(stopped, "at_batch", at);
    /* What a throughput stop rests on: the rates and intervals it compared. */
    cJSON_AddItemToObject(root, "stop_evidence", dg_sweep_stop_evidence(&stop, why));
    cJSON *bis = cJSON_AddArrayToObject(root, "bisect");
    int resolution = last_good / 8 > 1 ? last_good / 8 : 1;
    if (!interrupted && !nomem && last_good && first_bad) {
        int g = last_good, bad = first_bad;
        while (bad - g > resolution && !cancelled(a)) {
            int m = g + (bad - g) / 2;
            trial *t = sweep_trial(a, s, m);
            if (!t)
                break;
            cJSON_AddItemReferenceToArray(bis, t->json);
            if (strcmp(t->ended, "interrupted") == 0) {
                interrupted = true;
                break;
            }
            if (trial_good(t))
                g = m;
            else
                bad = m;
        }
        first_bad = bad;
    }
    cJSON_AddNumberToObject(root, "bisect_resolution", resolution);
    dg_sweep_point pts[MAX_TRIALS];
    for (int i = 0; i < s->n; i++)
        pts[i] = (dg_sweep_point){s->t[i].batch, trial_good(&s->t[i]), s->t[i].rate};
    dg_sweep_conclude(root, pts, s->n, first_bad);
    /* The record keeps copies: the trials' entries are owned by the sweep. */
    char *printed = dg_json_print(root);
    cJSON_Delete(root);
    for (int i = 0; i < s->n; i++)
        cJSON_Delete(s->t[i].json);
    dg_free(s);
    cJSON *sw = printed ? cJSON_Parse(printed) : NULL;
    dg_string_free(printed);
    if (!sw) {
        end(a, "failed", "", "out of host memory");
        cJSON_AddNullToObject(a->rec, "sweep");
        return;
    }
    cJSON_AddItemToObject(a->rec, "sweep", sw);
    double knee = dg_jnum(sw, "knee.batch"), safe = dg_jnum(sw, "safe_batch.batch");
    char sum[256];
    snprintf(sum, sizeof sum, "%s: knee b%.0f (%.0f samples/s) · safe b%.0f · stopped at b%d: %s",
             a->device, knee, dg_jnum(sw, "knee.samples_per_s"), safe, at, why);
    if (isfinite(knee) && !a->o->batch)
        a->batch = (int)knee;
    if (interrupted)
        end(a, "interrupted", sum, "interrupted");
    else if (nomem)
        end(a, "failed", sum, "out of trial slots or host memory");
    else if (!isfinite(knee))
        end(a, "failed", sum, "no trial ran to its clean stop: see the trials' reasons");
    else
        end(a, "ok", sum, NULL);
}

/* ---- compare: the cpu baseline ---------------------------------------------------------- */

cJSON *dg_accept_cmd_compare_run(int batch, const char *device, const double *cpu_sps,
                                 const double *dev_sps, int reps, const double *dev_busy,
                                 const double *cpu_ms, const double *dev_ms)
{
    cJSON *run = cJSON_CreateObject();
    cJSON_AddNumberToObject(run, "batch", batch);
    cJSON_AddStringToObject(run, "status", "ok");
    double cs[16], ds[16], cm[16], dm[16], bz[16];
    size_t nc = 0, nd = 0, ncm = 0, ndm = 0, nb = 0;
    for (int i = 0; i < reps && i < 16; i++) {
        if (isfinite(cpu_sps[i]) && cpu_sps[i] > 0)
            cs[nc++] = cpu_sps[i];
        if (isfinite(dev_sps[i]) && dev_sps[i] > 0)
            ds[nd++] = dev_sps[i];
        if (cpu_ms && isfinite(cpu_ms[i]))
            cm[ncm++] = cpu_ms[i];
        if (dev_ms && isfinite(dev_ms[i]))
            dm[ndm++] = dev_ms[i];
        if (dev_busy && isfinite(dev_busy[i]))
            bz[nb++] = dev_busy[i];
    }
    dg_stats s;
    cJSON *cpu = cJSON_AddObjectToObject(run, "cpu");
    dg_stats_compute(cm, ncm, 0, &s);
    cJSON_AddItemToObject(cpu, "step_ms", metric(ncm ? s.median : NAN, "ms"));
    dg_stats_compute(cs, nc, 0, &s);
    double cmed = nc ? s.median : NAN;
    cJSON_AddItemToObject(cpu, "samples_per_s", metric(cmed, "samples/s"));
    cJSON *dev = cJSON_AddObjectToObject(run, "device");
    cJSON_AddStringToObject(dev, "backend", device);
    dg_stats_compute(dm, ndm, 0, &s);
    cJSON_AddItemToObject(dev, "step_ms", metric(ndm ? s.median : NAN, "ms"));
    dg_stats_compute(ds, nd, 0, &s);
    double dmed = nd ? s.median : NAN;
    cJSON_AddItemToObject(dev, "samples_per_s", metric(dmed, "samples/s"));
    /* The speedup in samples/s over the loop's wall time (data wait included):
     * device over cpu, the interval by the seeded bootstrap of the median ratio. */
    double sp = isfinite(cmed) && isfinite(dmed) && cmed > 0 ? dmed / cmed : NAN;
    cJSON_AddItemToObject(run, "speedup", metric(sp, "x"));
    dg_median_ci ci;
    bool civ = nc && nd &&
               dg_bootstrap_median_ci(ds, nd, cs, nc, 0, 0.95, DG_BOOTSTRAP_SEED, &ci) && ci.valid;
    cJSON *cij = cJSON_AddObjectToObject(run, "speedup_ci");
    cJSON_AddItemToObject(cij, "lo", metric(civ ? ci.lo : NAN, "x"));
    cJSON_AddItemToObject(cij, "hi", metric(civ ? ci.hi : NAN, "x"));
    cJSON_AddNumberToObject(cij, "level", 0.95);
    cJSON_AddNumberToObject(cij, "resamples", civ ? (double)ci.resamples : 0);
    cJSON_AddStringToObject(cij, "method", "percentile bootstrap of median(device) / median(cpu)");
    /* Time per sample: 100 (1 - 1/speedup), the interval from the speedup's. */
    cJSON_AddItemToObject(run, "step_time_reduction_pct",
                          metric(isfinite(sp) && sp > 0 ? 100 * (1 - 1 / sp) : NAN, "%"));
    cJSON *rci = cJSON_AddObjectToObject(run, "step_time_reduction_pct_ci");
    cJSON_AddItemToObject(rci, "lo", metric(civ && ci.lo > 0 ? 100 * (1 - 1 / ci.lo) : NAN, "%"));
    cJSON_AddItemToObject(rci, "hi", metric(civ && ci.hi > 0 ? 100 * (1 - 1 / ci.hi) : NAN, "%"));
    cJSON_AddNumberToObject(rci, "level", 0.95);
    cJSON_AddNumberToObject(rci, "resamples", civ ? (double)ci.resamples : 0);
    cJSON_AddStringToObject(rci, "method", "from speedup_ci");
    dg_stats_compute(bz, nb, 0, &s);
    cJSON_AddItemToObject(run, "busy_fraction", metric(nb ? s.median : NAN, "fraction"));
    cJSON_AddStringToObject(run, "busy_source",
                            "1 - the data wait's share, from the probe's host clock (not device "
                            "utilisation)");
    cJSON *rp = cJSON_AddObjectToObject(run, "repetitions");
    cJSON_AddNumberToObject(rp, "per_side", reps);
    cJSON_AddNumberToObject(rp, "warmup_pairs", 0);
    cJSON *order = cJSON_AddArrayToObject(rp, "order");
    cJSON *ca = cJSON_AddArrayToObject(rp, "cpu_samples_per_s");
    cJSON *da = cJSON_AddArrayToObject(rp, "device_samples_per_s");
    for (int i = 0; i < reps && i < 16; i++) {
        cJSON_AddItemToArray(order, cJSON_CreateString("cpu"));
        cJSON_AddItemToArray(order, cJSON_CreateString("device"));
        cJSON_AddItemToArray(ca, isfinite(cpu_sps[i]) ? cJSON_CreateNumber(cpu_sps[i])
                                                      : cJSON_CreateNull());
        cJSON_AddItemToArray(da, isfinite(dev_sps[i]) ? cJSON_CreateNumber(dev_sps[i])
                                                      : cJSON_CreateNull());
    }
    cJSON_AddNullToObject(run, "verdict");
    cJSON_AddStringToObject(run, "note",
                            "numerics are not compared for a user's program (no reference run)");
    return run;
}

/* The speedup's 95% interval width over the speedup (median device over
 * median cpu samples/s) after n pairs; NAN when not computable. */
static double compare_width(const double *cs, const double *ds, int n)
{
    double c[16], d[16];
    size_t nc = 0, nd = 0;
    for (int i = 0; i < n && i < 16; i++) {
        if (isfinite(cs[i]) && cs[i] > 0)
            c[nc++] = cs[i];
        if (isfinite(ds[i]) && ds[i] > 0)
            d[nd++] = ds[i];
    }
    dg_stats sc, sd;
    dg_median_ci ci;
    if (!nc || !nd)
        return NAN;
    dg_stats_compute(c, nc, 0, &sc);
    dg_stats_compute(d, nd, 0, &sd);
    if (!(sc.median > 0) ||
        !dg_bootstrap_median_ci(d, nd, c, nc, 0, 0.95, DG_BOOTSTRAP_SEED, &ci) || !ci.valid)
        return NAN;
    double sp = sd.median / sc.median;
    return sp > 0 ? (ci.hi - ci.lo) / sp : NAN;
}

static void run_compare(acmd *a)
{
    begin(a, 4);
    if (strcmp(a->device, "cpu") == 0 || !a->has_device) {
        end(a, "skipped",
            !a->has_device ? "the command has no {device}: the cpu baseline cannot be run"
            : a->o->device ? "the device asked for is the cpu baseline itself"
                           : "no device passed the gate: cpu is the only path",
            NULL);
        cJSON_AddNullToObject(a->rec, "compare");
        return;
    }
    int batch = a->batch;
    if (!a->o->batch && batch > a->tier->compare_max_batch)
        batch = a->tier->compare_max_batch;
    int reps = a->tier->compare_reps, max_reps = a->tier->compare_max_reps;
    double cs[16], ds[16], cm[16], dm[16], bz[16];
    char err[512] = "", why[512], reason[512];
    const char *failed = NULL;
    double width = NAN;
    for (int i = 0; i < max_reps && i < 16 && !failed && !cancelled(a); i++) {
        /* Past the tier's pairs, another pair only while the speedup's
         * interval is wider than the tier's share of the speedup. */
        if (i >= a->tier->compare_reps) {
            width = compare_width(cs, ds, i);
            if (!(width > a->tier->compare_ci_width))
                break;
        }
        reps = i + 1;
        for (int side = 0; side < 2 && !failed; side++) {
            const char *dev = side ? a->device : "cpu";
            cJSON *rec = run_cmd(a, batch, dev, TRIAL_EPOCHS, a->tier->compare_steps, NULL, NULL,
                                 false, 0, why, sizeof why);
            const char *e =
                rec ? dg_accept_cmd_ended_rec(rec, 0, NULL, reason, sizeof reason) : "failed";
            if (strcmp(e, "ok") != 0) {
                failed = dev;
                snprintf(err, sizeof err, "%s", rec ? reason : why);
            }
            double sps = child_sps(rec);
            double ms = dg_jnum(rec, "profile.step.stats.median");
            double share = dg_json_metric_value(dg_jpath(rec, "profile.phases.queue_wait.share"));
            (side ? ds : cs)[i] = sps;
            (side ? dm : cm)[i] = ms;
            if (side)
                bz[i] = isfinite(share) ? 1 - share : NAN;
            cJSON_Delete(rec);
        }
    }
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "v", 1);
    cJSON_AddStringToObject(c, "kind", "compare");
    cJSON_AddStringToObject(c, "source", "command");
    cJSON_AddStringToObject(c, "status", failed ? "failed" : "ok");
    dg_json_add_str(c, "error", failed ? err : NULL);
    cJSON *spec = cJSON_AddObjectToObject(c, "spec");
    cJSON_AddStringToObject(spec, "baseline", "cpu");
    cJSON_AddStringToObject(spec, "backend", a->device);
    cJSON *bs = cJSON_AddArrayToObject(spec, "batches");
    cJSON_AddItemToArray(bs, cJSON_CreateNumber(batch));
    cJSON_AddNumberToObject(spec, "steps", a->tier->compare_steps);
    cJSON_AddNumberToObject(spec, "repetitions", reps);
    cJSON_AddNumberToObject(spec, "min_repetitions", a->tier->compare_reps);
    cJSON_AddNumberToObject(spec, "max_repetitions", max_reps);
    cJSON_AddNumberToObject(spec, "ci_width_target", a->tier->compare_ci_width);
    cJSON *runs = cJSON_AddArrayToObject(c, "runs");
    if (failed) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddNumberToObject(r, "batch", batch);
        cJSON_AddStringToObject(r, "status", "failed");
        cJSON_AddStringToObject(r, "failed", failed);
        dg_json_add_str(r, "error", err);
        cJSON_AddBoolToObject(r, "within_tolerance", false);
        cJSON_AddItemToArray(runs, r);
    } else if (!cancelled(a)) {
        cJSON_AddItemToArray(runs,
                             dg_accept_cmd_compare_run(batch, a->device, cs, ds, reps, bz, cm, dm));
    }
    cJSON_AddItemToObject(a->rec, "compare", c);
    const cJSON *r0 = cJSON_GetArrayItem(runs, 0);
    char sum[256] = "";
    if (r0 && !failed)
        snprintf(sum, sizeof sum, "%s is %.2f× cpu (95%% %.2f-%.2f×) at b%d, busy %.0f%%",
                 a->device, dg_jnum(r0, "speedup"), dg_jnum(r0, "speedup_ci.lo"),
                 dg_jnum(r0, "speedup_ci.hi"), batch, 100 * dg_jnum(r0, "busy_fraction"));
    if (cancelled(a))
        end(a, "interrupted", sum, "interrupted");
    else if (failed)
        end(a, "failed", sum, err);
    else
        end(a, "ok", sum, NULL);
}

/* ---- soak ------------------------------------------------------------------------------------ */

static void run_soak(acmd *a)
{
    begin(a, 3);
    int epochs = a->o->epochs > 0 ? a->o->epochs : a->tier->soak_epochs;
    char why[512] = "", reason[512] = "";
    cJSON *rec = run_cmd(a, a->batch, a->device, epochs, 0, NULL, NULL, a->o->empty_cache, 0, why,
                         sizeof why);
    const char *e = rec ? dg_accept_cmd_ended_rec(rec, 0, NULL, reason, sizeof reason) : "failed";
    cJSON *soak = rec ? cJSON_DetachItemFromObjectCaseSensitive(rec, "soak") : NULL;
    if (soak && !cJSON_IsObject(soak)) {
        cJSON_Delete(soak);
        soak = NULL;
    }
    if (soak) {
        cJSON_AddStringToObject(soak, "source", "command");
        cJSON *spec = cJSON_AddObjectToObject(soak, "spec");
        cJSON_AddStringToObject(spec, "backend", a->device);
        cJSON_AddNumberToObject(spec, "batch", a->batch);
        cJSON_AddNumberToObject(spec, "epochs", epochs);
        cJSON_AddBoolToObject(spec, "epochs_substituted", a->has_epochs);
        cJSON_AddBoolToObject(spec, "empty_cache_asked", a->o->empty_cache);
        /* The sampled footprint of the whole tree beside the probe's. */
        cJSON *series = cJSON_DetachItemFromObjectCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(rec, "supervise"), "series");
        if (series)
            cJSON_AddItemToObject(soak, "samples_series", series);
        cJSON_AddItemToObject(a->rec, "soak", soak);
    } else {
        cJSON_AddNullToObject(a->rec, "soak");
    }
    if (rec && !cJSON_GetObjectItemCaseSensitive(a->rec, "bucket")) {
        cJSON *bk = cJSON_DetachItemFromObjectCaseSensitive(rec, "bucket");
        if (bk)
            cJSON_AddItemToObject(a->rec, "bucket", bk);
    }
    if (rec && !cJSON_GetObjectItemCaseSensitive(a->rec, "framework")) {
        cJSON *fw = cJSON_DetachItemFromObjectCaseSensitive(rec, "framework");
        if (fw)
            cJSON_AddItemToObject(a->rec, "framework", fw);
    }
    cJSON_Delete(rec);
    char sum[256] = "";
    if (soak) {
        char fp[32] = "not reported", al[32] = "not reported";
        double g = dg_jnum(soak, "growth.footprint");
        double ga = dg_jnum(soak, "growth.allocator_allocated");
        if (isfinite(g))
            snprintf(fp, sizeof fp, "%+.0f%%", g);
        if (isfinite(ga))
            snprintf(al, sizeof al, "%+.0f%%", ga);
        snprintf(sum, sizeof sum, "%s b%d: footprint %s, allocator %s after %.0f epochs%s",
                 a->device, a->batch, fp, al, dg_jnum(soak, "epochs_recorded"),
                 dg_jbool(soak, "empty_cache") == 1 ? ", cache emptied each epoch" : "");
    }
    if (strcmp(e, "interrupted") == 0)
        end(a, "interrupted", sum, "interrupted");
    else if (strcmp(e, "ok") != 0)
        end(a, "failed", sum, rec ? reason : why);
    else if (!soak)
        end(a, "failed", sum, "the program reported no epoch end (no DataLoader epoch was seen)");
    else
        end(a, "ok", sum, NULL);
}

/* ---- profile ----------------------------------------------------------------------------- */

static cJSON *phase(double ms, double wall_ms, int steps, bool in_step)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddItemToObject(p, "ms", metric(isfinite(ms) ? ms / steps : NAN, "ms"));
    cJSON_AddItemToObject(p, "share",
                          metric(isfinite(ms) && wall_ms > 0 ? ms / wall_ms : NAN, "fraction"));
    cJSON_AddBoolToObject(p, "in_step", in_step);
    return p;
}

cJSON *dg_accept_cmd_profile(const cJSON *window, const cJSON *run_profile, const char *device)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "v", 1);
    cJSON_AddStringToObject(p, "kind", "profile");
    cJSON_AddStringToObject(p, "source", "command");
    const char *err = dg_jstr(window, "error");
    cJSON_AddStringToObject(p, "status", window && !err ? "ok" : "failed");
    dg_json_add_str(p, "error", !window ? "the profiler window reported nothing" : err);
    int steps = (int)dg_jnum(window, "steps");
    cJSON *w = cJSON_AddObjectToObject(p, "window");
    cJSON_AddNumberToObject(w, "warmup",
                            dg_jnum(window, "warmup") >= 0 ? dg_jnum(window, "warmup") : 0);
    cJSON_AddNumberToObject(w, "steps", steps > 0 ? steps : 0);
    dg_json_add_str(w, "cut", dg_jstr(window, "cut"));
    double nev = dg_jnum(window, "events");
    if (isfinite(nev))
        cJSON_AddNumberToObject(w, "events", nev);
    else
        cJSON_AddNullToObject(w, "events");
    double wall = dg_jnum(window, "wall_ms");
    cJSON *step = cJSON_AddObjectToObject(p, "step");
    cJSON_AddItemToObject(step, "ms",
                          metric(dg_json_metric_value(dg_jpath(run_profile, "step.ms")), "ms"));
    cJSON_AddItemToObject(step, "profiled_ms",
                          metric(steps > 0 && isfinite(wall) ? wall / steps : NAN, "ms"));
    const cJSON *stats = dg_jpath(run_profile, "step.stats");
    if (stats)
        cJSON_AddItemToObject(step, "stats", cJSON_Duplicate(stats, true));
    cJSON *ph = cJSON_AddObjectToObject(p, "phases");
    if (steps > 0 && !err) {
        cJSON_AddItemToObject(ph, "queue_wait",
                              phase(dg_jnum(window, "data_ms"), wall, steps, false));
        cJSON_AddItemToObject(ph, "h2d", phase(dg_jnum(window, "h2d_ms"), wall, steps, true));
        cJSON_AddItemToObject(ph, "compute",
                              phase(dg_jnum(window, "compute_ms"), wall, steps, true));
        cJSON_AddItemToObject(ph, "sync", phase(dg_jnum(window, "sync_ms"), wall, steps, true));
    }
    cJSON_AddStringToObject(
        ph, "source",
        "torch.profiler window from the step hook: data = the probe's wait inside the loader's "
        "__next__, h2d = copy operators (not on the cpu), sync = host reads of device values, "
        "compute = the rest of the window's wall time");
    cJSON *ops = cJSON_AddArrayToObject(p, "ops");
    double total = 0;
    const cJSON *o;
    bool dev = device && strcmp(device, "cpu") != 0;
    cJSON_ArrayForEach(o, dg_jpath(window, "ops"))
    {
        double ms = dg_jnum(o, dev ? "device_ms_total" : "ms_total");
        if (isfinite(ms))
            total += ms;
    }
    cJSON_ArrayForEach(o, dg_jpath(window, "ops"))
    {
        const char *name = dg_jstr(o, "op");
        double ms = dg_jnum(o, dev ? "device_ms_total" : "ms_total");
        double calls = dg_jnum(o, "calls");
        if (!name || !isfinite(ms))
            continue;
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "op", name);
        cJSON_AddNullToObject(r, "shape");
        cJSON_AddStringToObject(r, "backend", device ? device : "cpu");
        cJSON_AddBoolToObject(r, "fallback", false);
        cJSON_AddNumberToObject(r, "calls", isfinite(calls) ? calls : 0);
        cJSON_AddNumberToObject(r, "ms_total", ms);
        cJSON_AddNumberToObject(r, "ms_mean", calls > 0 ? ms / calls : ms);
        cJSON_AddNumberToObject(r, "share", total > 0 ? ms / total : 0);
        cJSON_AddItemToArray(ops, r);
    }
    cJSON_AddStringToObject(p, "ops_source",
                            dev ? "torch.profiler self device time, top operators of the window"
                                : "torch.profiler self cpu time, top operators of the window");
    const cJSON *sp = dg_jpath(run_profile, "sync_points");
    if (sp)
        cJSON_AddItemToObject(p, "sync_points", cJSON_Duplicate(sp, true));
    const cJSON *fb = dg_jpath(run_profile, "fallbacks");
    if (fb)
        cJSON_AddItemToObject(p, "fallbacks", cJSON_Duplicate(fb, true));
    dg_json_add_str(p, "trace", dg_jstr(window, "trace"));
    dg_json_add_str(p, "trace_skipped", dg_jstr(window, "trace_skipped"));
    cJSON_AddStringToObject(p, "note",
                            "the profiled window runs the user's program under torch.profiler; "
                            "its step time (profiled_ms) includes the profiler's cost");
    return p;
}

static void run_profile(acmd *a)
{
    begin(a, 5);
    int warm = a->tier->profile_warmup, win = a->tier->profile_window;
    char spec[32], out[4096], why[512] = "", reason[512] = "";
    snprintf(spec, sizeof spec, "%d:%d", warm, win);
    const char *dir = getenv("TMPDIR");
    snprintf(out, sizeof out, "%s/devgate-profile-%ld.json", dir && dir[0] ? dir : "/tmp",
             (long)getpid());
    unlink(out);
    cJSON *rec = run_cmd(a, a->batch, a->device, TRIAL_EPOCHS, warm + win, spec, out, false, 0, why,
                         sizeof why);
    const char *e = rec ? dg_accept_cmd_ended_rec(rec, 0, NULL, reason, sizeof reason) : "failed";
    char *text = dg_read_file(out, (size_t)8 << 20, NULL);
    unlink(out);
    cJSON *window = text ? cJSON_Parse(text) : NULL;
    dg_free(text);
    cJSON *p = dg_accept_cmd_profile(window, dg_jpath(rec, "profile"), a->device);
    /* devgate's own samples of the profiled child (RSS, CPU, threads) beside the trace. */
    cJSON *series = cJSON_DetachItemFromObjectCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(rec, "supervise"), "series");
    if (series)
        cJSON_AddItemToObject(p, "samples_series", series);
    cJSON_Delete(window);
    cJSON_Delete(rec);
    cJSON_AddItemToObject(a->rec, "profile", p);
    char sum[256] = "";
    size_t off = 0;
    static const char *const shown[][2] = {
        {"queue_wait", "data"}, {"h2d", "h2d"}, {"compute", "compute"}, {"sync", "sync"}};
    for (size_t i = 0; i < 4 && off < sizeof sum; i++) {
        char key[64];
        snprintf(key, sizeof key, "phases.%s.share", shown[i][0]);
        double v = dg_json_metric_value(dg_jpath(p, key));
        if (isfinite(v))
            off += (size_t)snprintf(sum + off, sizeof sum - off, "%s%s %.0f%%", off ? " · " : "",
                                    shown[i][1], 100 * v);
    }
    const char *perr = dg_jstr(p, "error");
    if (strcmp(e, "interrupted") == 0)
        end(a, "interrupted", sum, "interrupted");
    else if (strcmp(e, "ok") != 0)
        end(a, "failed", sum, rec ? reason : why);
    else if (perr)
        end(a, "failed", sum, perr);
    else
        end(a, "ok", sum, NULL);
}

/* ---- the record ----------------------------------------------------------------------------- */

static void run_env(acmd *a)
{
    begin(a, 0);
    dg_env_opts eo = {.python = a->o->python ? a->o->python : gate_python(a)};
    char *json = NULL;
    dg_status st = dg_env_run(a->ctx, &eo, &json);
    cJSON *env = json ? cJSON_Parse(json) : NULL;
    dg_string_free(json);
    cJSON_AddItemToObject(a->rec, "env", env ? env : cJSON_CreateNull());
    char sum[160];
    const char *proc = dg_jstr(env, "arch.process"), *hst = dg_jstr(env, "arch.host");
    snprintf(sum, sizeof sum, "%s process on %s host", proc ? proc : "?", hst ? hst : "?");
    if (st != DG_OK)
        end(a, "failed", sum, dg_errmsg(a->ctx));
    else
        end(a, "ok", sum, NULL);
}

static void add_spec(acmd *a)
{
    cJSON *spec = cJSON_AddObjectToObject(a->rec, "spec");
    cJSON_AddStringToObject(spec, "program", "command");
    cJSON *cmd = cJSON_AddArrayToObject(spec, "cmd");
    for (size_t i = 0; a->o->argv[i]; i++)
        cJSON_AddItemToArray(cmd, dg_json_string(a->o->argv[i]));
    cJSON_AddStringToObject(spec, "backend", a->device ? a->device : "cpu");
    cJSON_AddBoolToObject(spec, "backend_chosen", a->o->device == NULL);
    cJSON_AddStringToObject(spec, "baseline", "cpu");
    cJSON_AddNullToObject(spec, "model");
    cJSON_AddStringToObject(spec, "data", "the program's own");
    cJSON_AddBoolToObject(spec, "quick", a->o->quick);
    if (a->batch > 0)
        cJSON_AddNumberToObject(spec, "batch", a->batch);
    else
        cJSON_AddNullToObject(spec, "batch");
    cJSON_AddStringToObject(spec, "batch_source", a->o->batch ? "option" : "sweep knee");
    if (a->o->sweep_to > 0)
        cJSON_AddNumberToObject(spec, "sweep_to", a->o->sweep_to);
    else
        cJSON_AddNullToObject(spec, "sweep_to");
    cJSON_AddItemToObject(spec, "mem_budget",
                          dg_json_metric((double)a->o->mem_budget, a->o->mem_budget > 0, "bytes"));
    cJSON_AddBoolToObject(spec, "empty_cache", a->o->empty_cache);
    cJSON *ph = cJSON_AddObjectToObject(spec, "placeholders");
    cJSON_AddBoolToObject(ph, "batch", a->has_batch);
    cJSON_AddBoolToObject(ph, "device", a->has_device);
    cJSON_AddBoolToObject(ph, "epochs", a->has_epochs);
}

dg_status dg_accept_cmd_run(dg_ctx *ctx, const dg_accept_cmd_opts *opts, char **json)
{
    *json = NULL;
    if (!opts || !opts->argv || !opts->argv[0] || !opts->argv[0][0])
        return dg_fail(ctx, DG_ERR_USAGE, "accept: no program given (accept [options] -- CMD)");
    size_t n = 0;
    while (opts->argv[n])
        n++;
    if (n > MAX_ARGS)
        return dg_fail(ctx, DG_ERR_USAGE, "accept: the command has over %d words", MAX_ARGS);
    if (opts->batch < 0 || opts->epochs < 0 || opts->sweep_from < 0 || opts->sweep_to < 0 ||
        (opts->sweep_to > 0 && opts->sweep_from > opts->sweep_to))
        return dg_fail(ctx, DG_ERR_USAGE,
                       "accept: batch, epochs and the sweep's range must be positive (from <= to)");
    acmd a = {.ctx = ctx, .o = opts, .tier = &cmd_tiers[opts->quick ? 0 : 1], .device = NULL};
    a.has_batch = mentions(opts->argv, "{batch}");
    a.has_device = mentions(opts->argv, "{device}");
    a.has_epochs = mentions(opts->argv, "{epochs}");
    a.batch = opts->batch > 0 ? opts->batch : 32;
    a.rec = cJSON_CreateObject();
    a.steps = cJSON_CreateArray();
    if (!a.rec || !a.steps) {
        cJSON_Delete(a.rec);
        cJSON_Delete(a.steps);
        return dg_fail(ctx, DG_ERR_NOMEM, "accept: out of host memory");
    }
    dg_accept_rec_head(a.rec, opts->label);

    dg_status st = DG_OK;
    int next = 1;
    run_env(&a);
    if (!cancelled(&a)) {
        st = run_gate(&a);
        next = 2;
    }
    void (*const later[])(acmd *) = {run_sweep, run_soak, run_compare, run_profile};
    for (; st == DG_OK && next < STEP_COUNT && !cancelled(&a); next++)
        later[next - 2](&a);
    if (cancelled(&a))
        st = DG_ERR_INTERRUPTED;
    for (int i = next; i < STEP_COUNT; i++)
        skip(&a, i,
             st == DG_ERR_INTERRUPTED ? "interrupted before this step"
                                      : "not run: the gate gave no device to judge");
    add_spec(&a);
    return dg_accept_rec_finish(ctx, a.rec, a.steps, st, json);
}
