/* accept -- CMD: what one child run of the user's command is made of and
 * how it ended (docs/accept.md, "Your own program"): the command's words
 * with {batch}, {device} and {epochs} substituted, the kernel's OOM-kill
 * count around the run, and the reading of a child's run record ("ok",
 * "device-oom", "oom-killer", ...) and of a sweep trial's result from it. */
#include "steps/accept_cmd.h"

#include "core/core.h"
#include "core/json.h"
#include "steps/runner.h"
#include "supervise/supervise.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

char **dg_accept_cmd_argv(const char *const *argv, int batch, const char *device, int epochs,
                          const char *const *extra)
{
    size_t n = 0, x = 0;
    while (argv && argv[n])
        n++;
    while (extra && extra[x])
        x++;
    char **out = dg_calloc(n + x + 1, sizeof *out);
    if (!out)
        return NULL;
    for (size_t i = 0; i < x; i++) {
        out[n + i] = dg_strdup(extra[i]);
        if (!out[n + i]) {
            for (size_t k = 0; k < i; k++)
                dg_free(out[n + k]);
            dg_free(out);
            return NULL;
        }
    }
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

/* The accelerators a cpu run hides: CUDA (its runtime, and NVIDIA's OpenCL,
 * which follows CUDA_VISIBLE_DEVICES), ROCm (HIP and the ROCr runtime), AMD's
 * OpenCL (GPU_DEVICE_ORDINAL), and PoCL kept to its cpu device. Apple's MPS
 * has no such variable. */
const char *const dg_accept_cmd_cpu_env[] = {
    "CUDA_VISIBLE_DEVICES=", "HIP_VISIBLE_DEVICES=", "ROCR_VISIBLE_DEVICES=",
    "GPU_DEVICE_ORDINAL=",   "POCL_DEVICES=cpu",     NULL,
};

static const char *const arg_devices[DG_DEVICE_ARG_DEVICES] = {"cpu", "cuda", "mps"};

static int arg_device(const char *name, size_t n)
{
    for (int i = 0; i < DG_DEVICE_ARG_DEVICES; i++)
        if (strlen(arg_devices[i]) == n && strncmp(name, arg_devices[i], n) == 0)
            return i;
    return -1;
}

/* One DEVICE=WORDS item into out (its words point into item). */
static dg_status device_item(char *item, dg_device_args *out, char *why, size_t len)
{
    char *eq = strchr(item, '=');
    if (!eq)
        return dg_fail_buf(why, len, DG_ERR_USAGE, "'%s' is not DEVICE=ARGS", item);
    int d = arg_device(item, (size_t)(eq - item));
    if (d < 0)
        return dg_fail_buf(why, len, DG_ERR_USAGE,
                           "'%.*s' is not a device the gate names (cpu, cuda, mps)",
                           (int)(eq - item), item);
    if (out->given[d])
        return dg_fail_buf(why, len, DG_ERR_USAGE, "%s is given twice", arg_devices[d]);
    int n = 0;
    char *save = NULL;
    for (char *w = strtok_r(eq + 1, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        if (n == DG_DEVICE_ARG_WORDS)
            return dg_fail_buf(why, len, DG_ERR_USAGE, "%s has over %d words", arg_devices[d],
                               DG_DEVICE_ARG_WORDS);
        out->words[d][n++] = w;
    }
    out->given[d] = true;
    return DG_OK;
}

dg_status dg_accept_cmd_device_args(const char *spec, dg_device_args *out, char *why, size_t len)
{
    memset(out, 0, sizeof *out);
    if (!spec || !spec[0])
        return DG_OK;
    if (!(out->text = dg_strdup(spec)))
        return dg_fail_buf(why, len, DG_ERR_NOMEM, "out of host memory");
    char *save = NULL;
    for (char *item = strtok_r(out->text, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        dg_status st = device_item(item, out, why, len);
        if (st != DG_OK) {
            dg_device_args_free(out);
            return st;
        }
    }
    return DG_OK;
}

const char *const *dg_device_args_for(const dg_device_args *a, const char *device)
{
    int d = device ? arg_device(device, strlen(device)) : -1;
    return a && d >= 0 && a->given[d] ? a->words[d] : NULL;
}

void dg_device_args_free(dg_device_args *a)
{
    if (!a)
        return;
    dg_free(a->text);
    memset(a, 0, sizeof *a);
}

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
    /* What the program said as it failed (its traceback's exception). */
    const char *said = dg_jstr(sup, "error_lines[0]");
    const char *sep = said ? ": " : "";
    said = said ? said : "";
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
        snprintf(reason, len, "killed by %s%s%s", sig, sep, said);
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
        snprintf(reason, len, "exit status %.0f%s%s", xs, sep, said);
    else
        snprintf(reason, len, "the program did not end cleanly");
    return "failed";
}

/* ---- a sweep trial's result ------------------------------------------------------ */

double dg_accept_cmd_child_sps(const cJSON *rec)
{
    double v = dg_json_metric_value(dg_jpath(rec, "throughput.samples_per_s_after_warmup"));
    return isfinite(v) ? v : dg_jnum(rec, "throughput.samples_per_s");
}

static dg_trial_end end_of(const char *e, size_t mem_budget)
{
    static const struct {
        const char *word;
        dg_trial_end end;
    } ends[] = {{"ok", DG_TRIAL_OK},
                {"oom-killer", DG_TRIAL_OOM_KILLER},
                {"signal", DG_TRIAL_SIGNAL},
                {"timeout", DG_TRIAL_TIMEOUT},
                {"interrupted", DG_TRIAL_INTERRUPTED}};
    if (strcmp(e, "device-oom") == 0)
        return mem_budget ? DG_TRIAL_BUDGET : DG_TRIAL_OOM;
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++)
        if (strcmp(e, ends[i].word) == 0)
            return ends[i].end;
    return DG_TRIAL_FAILED;
}

dg_trial_end dg_accept_cmd_end(const cJSON *rec, const char *why, size_t mem_budget,
                               const dg_oom_killer *oomk, char *reason, size_t len)
{
    const char *e = rec ? dg_accept_cmd_ended_rec(rec, mem_budget, oomk, reason, len) : "failed";
    if (!rec)
        snprintf(reason, len, "%s", why ? why : "");
    return end_of(e, mem_budget);
}

/* The trial's measurements from the child's run record (ok: it ended cleanly). */
static void trial_metrics(dg_trial_result *t, const cJSON *rec, int b, bool ok)
{
    double sps = ok ? dg_accept_cmd_child_sps(rec) : NAN;
    const cJSON *stats = dg_jpath(rec, "profile.step.stats");
    double med = ok ? dg_jnum(stats, "median") : NAN, iqr = ok ? dg_jnum(stats, "iqr") : NAN;
    double n = dg_jnum(stats, "n");
    t->step_median = (dg_metric){isfinite(med) ? med : 0, isfinite(med)};
    t->step_iqr = (dg_metric){isfinite(iqr) ? iqr : 0, isfinite(iqr)};
    t->steps = ok && isfinite(n) ? n : 0;
    t->step_source = isfinite(med) ? "steps" : "none";
    /* The probe reports its step-time statistics, not the steps: the notch
     * rule's interval of the median (docs/measure.md "Sweep"), over the step
     * with its loader wait where the probe reports that (the time the rate
     * divides by), else over the step alone. */
    const cJSON *ws = dg_jpath(rec, "profile.step.wall_stats");
    const cJSON *cs = ws ? ws : stats;
    t->rate =
        dg_sweep_rate_ci(sps, NULL, 0, dg_jnum(cs, "median"), dg_jnum(cs, "iqr"), dg_jnum(cs, "n"));
    /* The allocator's peak over the epochs the probe closed (cuda, mps). */
    double peak = NAN;
    const cJSON *ep;
    cJSON_ArrayForEach(ep, dg_jpath(rec, "soak.epochs"))
    {
        double v = dg_jnum(ep, "max_allocated");
        if (isfinite(v) && !(v <= peak))
            peak = v;
    }
    t->allocated_peak = (dg_metric){isfinite(peak) ? peak : 0, isfinite(peak)};
    const cJSON *smp = dg_jpath(rec, "supervise.samples");
    double rss = dg_json_metric_value(dg_jpath(smp, "rss_peak"));
    double sg = dg_json_metric_value(dg_jpath(smp, "swap_growth"));
    double psi = dg_json_metric_value(dg_jpath(smp, "psi_peak"));
    t->rss_peak = (dg_metric){isfinite(rss) ? rss : 0, isfinite(rss)};
    t->swap_growth = (dg_metric){isfinite(sg) ? sg : 0, isfinite(sg)};
    t->psi_peak = (dg_metric){isfinite(psi) ? psi : 0, isfinite(psi)};
    t->swapped = isfinite(sg) && sg > DG_ACCEPT_CMD_SWAP_LIMIT_MIB * 1048576.0;
    /* The samples a step really held: a data set smaller than the batch is
     * delivered whole, and the samples and the driver's train-set stop count
     * that, not the batch asked for. */
    double per = dg_json_metric_value(dg_jpath(rec, "throughput.samples_per_step"));
    double most = dg_json_metric_value(dg_jpath(rec, "throughput.samples_per_step_max"));
    double ntrain = dg_jnum(rec, "loader.samples");
    t->per_step = isfinite(most) && most > 0 ? most : NAN;
    t->train_samples = isfinite(ntrain) && ntrain > 0 ? ntrain : NAN;
    double steps = dg_jnum(rec, "throughput.timed_steps");
    t->samples = ok && steps > 0 ? steps * (isfinite(per) && per > 0 ? per : b) : NAN;
    t->loop_s = ok && sps > 0 ? t->samples / sps : NAN;
}

void dg_accept_cmd_trial_read(const cJSON *rec, const char *why, size_t mem_budget,
                              const dg_oom_killer *oomk, int b, dg_trial_result *t)
{
    t->end = dg_accept_cmd_end(rec, why, mem_budget, oomk, t->reason, sizeof t->reason);
    t->extra = cJSON_CreateObject();
    dg_json_add_str(t->extra, "signal", dg_jstr(rec, "supervise.signal"));
    if (t->end == DG_TRIAL_OOM_KILLER) {
        cJSON *k = cJSON_AddObjectToObject(t->extra, "oom_killer");
        dg_json_add_str(k, "source", oomk ? oomk->source : NULL);
        if (oomk && oomk->state == DG_OOMK_KILLED)
            cJSON_AddNumberToObject(k, "kills", (double)oomk->kills);
        else
            cJSON_AddNullToObject(k, "kills");
    }
    trial_metrics(t, rec, b, t->end == DG_TRIAL_OK);
    dg_json_add_str(t->extra, "stopped_by",
                    t->end == DG_TRIAL_OK ? dg_accept_cmd_stopped_by(rec) : NULL);
    cJSON *tl = cJSON_Duplicate(dg_jpath(rec, "supervise.timeline"), true);
    cJSON_AddItemToObject(t->extra, "timeline", tl ? tl : cJSON_CreateNull());
    /* J/sample beside samples/s, where the child's run saw the device's power. */
    double jps = dg_json_metric_value(dg_jpath(rec, "throughput.energy_per_sample"));
    bool e = t->end == DG_TRIAL_OK && isfinite(jps);
    cJSON_AddItemToObject(t->extra, "energy_per_sample",
                          dg_json_metric(e ? jps : 0, e, "J/sample"));
}

const char *dg_accept_cmd_stopped_by(const cJSON *rec)
{
    const char *st = dg_jstr(rec, "supervise.run_end.status");
    if (!st || strcmp(st, "stopped") != 0)
        return dg_jstr(rec, "state") && strcmp(dg_jstr(rec, "state"), "complete") == 0
                   ? "epochs done"
                   : NULL;
    const char *why = dg_jstr(rec, "supervise.run_end.stop");
    static const char *const words[][2] = {
        {"steady", "window steady"}, {"budget", "time budget"}, {"steps", "step cap"}};
    for (size_t i = 0; why && i < sizeof words / sizeof words[0]; i++)
        if (strcmp(why, words[i][0]) == 0)
            return words[i][1];
    return "step cap";
}

/* ---- how the runs were started ------------------------------------------------------- */

void dg_accept_cmd_launch_note(dg_ctx *ctx, const dg_forksrv *srv, char **json)
{
    cJSON *rec = *json ? cJSON_Parse(*json) : NULL;
    cJSON *l = srv ? dg_forksrv_json(srv) : NULL;
    if (!rec || !l) {
        cJSON_Delete(rec);
        cJSON_Delete(l);
        return;
    }
    const char *why = dg_jstr(l, "why");
    dg_log(ctx, DG_LOG_INFO, "runs: %s, %.0f forked, %.0f fresh interpreters%s%s",
           dg_jstr(l, "used"), dg_jnum(l, "forked"), dg_jnum(l, "plain"), why ? " · " : "",
           why ? why : "");
    cJSON_AddItemToObject(rec, "launch", l);
    char *out = dg_json_print(rec);
    cJSON_Delete(rec);
    if (!out)
        return;
    dg_string_free(*json);
    *json = out;
}
