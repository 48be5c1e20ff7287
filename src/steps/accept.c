/* accept: the method end to end (docs/accept.md).
 *
 * env -> gate -> sweep -> soak -> compare -> profile, each one the library step
 * of the same name, each writing its section of one evidence record
 * (docs/schema/report.md). The sizes of the later steps follow from what the
 * earlier ones measured: the device is the best one the gate passed, the batch
 * is the sweep's knee, and step counts are set by a time budget from the knee's
 * step time, so a slow device still finishes within the tier's budget. The
 * rules, the decision and the final gate are dg_evidence_finish's business. */
#include "backend/backend.h"
#include "core/core.h"
#include "core/json.h"
#include "core/record.h"
#include "steps/steps.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

/* Per-tier sizes: [0] quick, [1] full. */
static const struct tier {
    int sweep_warmup, sweep_timed;
    double trial_timeout_s, max_trial_s;
    int soak_epochs;
    double soak_budget_s;
    int compare_steps, compare_reps; /* per repetition; timed repetitions per side */
    int compare_max_batch;           /* the cpu side runs the same batch: keep it affordable */
    int profile_warmup;
    double profile_budget_s;
} tiers[2] = {
    {1, 3, 60, 4, 4, 6, 5, 3, 256, 2, 4},
    {2, 5, 120, 20, 10, 40, 10, 5, 1024, 5, 20},
};

static const char *const step_names[] = {"env", "gate", "sweep", "soak", "compare", "profile"};
enum { STEP_COUNT = sizeof step_names / sizeof step_names[0] };

typedef struct acc {
    dg_ctx *ctx;
    const dg_accept_opts *o;
    const struct tier *tier;
    cJSON *rec, *steps;
    int index;          /* of the step running now */
    double t0;          /* its start */
    dg_train_opts base; /* the spec every training step starts from */
    const char *device; /* the backend judged; "cpu" when no device passed the gate */
    int batch;          /* the batch soak, compare and profile use */
    double step_s;      /* the knee's step time (seconds), NAN when unknown */
} acc;

static bool cancelled(const acc *a)
{
    return a->base.cancel && *a->base.cancel;
}

static void begin(acc *a, int index)
{
    a->index = index;
    a->t0 = dg_now();
    if (a->o->progress)
        a->o->progress(a->o->progress_user, step_names[index], index, STEP_COUNT);
}

/* Adds the step entry; status "ok", "failed", "skipped" or "interrupted". */
static void end(acc *a, const char *status, const char *summary, const char *error)
{
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "name", step_names[a->index]);
    cJSON_AddStringToObject(s, "status", status);
    cJSON_AddNullToObject(s, "verdict"); /* set from the findings by dg_evidence_finish */
    dg_json_add_str(s, "summary", summary ? summary : "");
    dg_json_add_str(s, "error", error && error[0] ? error : NULL);
    bool ran = strcmp(status, "skipped") != 0;
    cJSON_AddItemToObject(s, "wall", dg_json_metric(ran ? dg_now() - a->t0 : 0, ran, "s"));
    cJSON_AddItemToArray(a->steps, s);
}

static void skip(acc *a, int index, const char *why)
{
    a->index = index;
    end(a, "skipped", why, NULL);
    cJSON_AddNullToObject(a->rec, step_names[index]);
}

/* Stores a step's record as its section; the status says how it went. Returns
 * the section (NULL when the step left no record). */
static cJSON *keep(acc *a, char *json)
{
    cJSON *sec = json ? cJSON_Parse(json) : NULL;
    dg_string_free(json);
    if (sec)
        cJSON_AddItemToObject(a->rec, step_names[a->index], sec);
    else
        cJSON_AddNullToObject(a->rec, step_names[a->index]);
    return sec;
}

/* Ends a step from its status: ok, interrupted or failed (with the message). */
static void finish(acc *a, dg_status st, const char *summary)
{
    if (st == DG_ERR_INTERRUPTED || (st != DG_OK && cancelled(a)))
        end(a, "interrupted", summary, "interrupted");
    else if (st != DG_OK)
        end(a, "failed", summary, dg_errmsg(a->ctx));
    else
        end(a, "ok", summary, NULL);
}

/* "12.3k" style rates for the one-line summaries. */
static void fmt_rate(char *buf, size_t len, double v)
{
    if (isnan(v))
        snprintf(buf, len, "not reported");
    else if (v >= 1e6)
        snprintf(buf, len, "%.1fM", v / 1e6);
    else if (v >= 1e4)
        snprintf(buf, len, "%.1fk", v / 1e3);
    else
        snprintf(buf, len, "%.0f", v);
}

/* ---- the steps --------------------------------------------------------------- */

static void run_env(acc *a)
{
    begin(a, 0);
    dg_env_opts eo = {.python = a->o->python};
    char *json = NULL;
    dg_status st = dg_env_run(a->ctx, &eo, &json);
    cJSON *env = keep(a, json);
    char sum[256] = "";
    if (env) {
        const cJSON *arch = cJSON_GetObjectItemCaseSensitive(env, "arch");
        const cJSON *virt = cJSON_GetObjectItemCaseSensitive(env, "virtualization");
        const char *proc = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(arch, "process"));
        const char *host = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(arch, "host"));
        bool translated = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(arch, "translated"));
        bool vm = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(virt, "vm"));
        bool ct = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(virt, "container"));
        int busy = 0;
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(
                                  cJSON_GetObjectItemCaseSensitive(env, "processes"), "top_cpu"))
        {
            if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "self")) &&
                dg_jnum(p, "cpu_percent") > 20)
                busy++;
        }
        snprintf(sum, sizeof sum, "%s process on %s host, %s; %s; %d busy process%s",
                 proc ? proc : "?", host ? host : "?", translated ? "TRANSLATED" : "native",
                 vm && ct ? "container in a VM"
                 : vm     ? "VM"
                 : ct     ? "container"
                          : "no VM",
                 busy, busy == 1 ? "" : "es");
    }
    finish(a, st, sum);
}

/* Picks the device: the backend asked for, else the first of cuda, opencl that
 * is available and passed its product check; "cpu" when none did. */
static dg_status choose_device(acc *a, const cJSON *gate, char *why, size_t len)
{
    const cJSON *b;
    const char *want = a->o->train.backend;
    static const char *const order[] = {"cuda", "opencl"};
    for (size_t i = 0; i < (want ? 1 : sizeof order / sizeof order[0]); i++) {
        const char *name = want ? want : order[i];
        cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(gate, "backends"))
        {
            const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "name"));
            if (!n || strcmp(n, name) != 0)
                continue;
            bool avail = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "available"));
            bool ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(b, "matmul"), "ok"));
            if (avail && (ok || want)) {
                a->device = name;
                return DG_OK;
            }
            if (want) {
                const char *r = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "reason"));
                snprintf(why, len, "backend %s is not available: %s", name,
                         r ? r : "no reason given");
                return DG_ERR_UNAVAILABLE;
            }
        }
    }
    if (want) {
        snprintf(why, len, "backend %s is not in the gate's list", want);
        return DG_ERR_UNAVAILABLE;
    }
    a->device = "cpu";
    return DG_OK;
}

static dg_status run_gate(acc *a)
{
    begin(a, 1);
    /* Every known backend, so the log says what is built and why one is not there;
     * a backend named with --backend is gated with cpu, the baseline. */
    char list[64];
    const char *want = a->o->train.backend;
    bool want_host = want && dg_backend_is_host(want);
    if (want && !want_host)
        snprintf(list, sizeof list, "cpu,%s", want);
    dg_gate_opts go = {.backends = want ? (want_host ? want : list) : NULL, .seed = a->base.seed};
    char *json = NULL;
    dg_gate_verdict verdict = DG_GATE_PASS;
    dg_status st = dg_gate_run(a->ctx, &go, &json, &verdict);
    cJSON *gate = keep(a, json);
    char sum[512] = "", why[512] = "";
    size_t off = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(gate, "backends"))
    {
        const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "name"));
        const cJSON *mm = cJSON_GetObjectItemCaseSensitive(b, "matmul");
        bool avail = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "available"));
        bool built = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "built"));
        char part[128], gf[32];
        if (avail)
            snprintf(part, sizeof part, "%s %s %s", n ? n : "?",
                     dg_fmt_num(gf, sizeof gf, "%.1f GFLOP/s", dg_jnum(mm, "gflops")),
                     cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mm, "ok")) ? "ok" : "FAILED");
        else
            snprintf(part, sizeof part, "%s: %s", n ? n : "?",
                     built ? "built, not available" : "not built");
        off += (size_t)snprintf(sum + off, off < sizeof sum ? sizeof sum - off : 0, "%s%s",
                                off ? " · " : "", part);
        if (off >= sizeof sum)
            break;
    }
    dg_status pick = gate ? choose_device(a, gate, why, sizeof why) : st;
    if (st == DG_OK && pick != DG_OK)
        st = dg_fail(a->ctx, pick, "%s", why);
    finish(a, st, sum);
    return st;
}

static void run_sweep(acc *a)
{
    begin(a, 2);
    dg_sweep_opts so = {.train = a->base,
                        .to = a->o->sweep_to,
                        .warmup_steps = a->tier->sweep_warmup,
                        .timed_steps = a->tier->sweep_timed,
                        .trial_timeout_s = a->tier->trial_timeout_s,
                        .max_trial_s = a->tier->max_trial_s};
    so.train.backend = a->device;
    char *json = NULL;
    dg_status st = dg_sweep_run(a->ctx, &so, &json);
    cJSON *sw = keep(a, json);
    char sum[256] = "", rate[32], kb[32], sb[32], at[32];
    double knee = dg_jnum(sw, "knee.batch"), safe = dg_jnum(sw, "safe_batch.batch");
    fmt_rate(rate, sizeof rate, dg_jnum(sw, "knee.samples_per_s"));
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(sw, "stopped");
    const char *reason = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(stop, "reason"));
    if (sw)
        snprintf(sum, sizeof sum, "%s: knee %s (%s samples/s) · safe %s · stopped at %s: %s",
                 a->device, dg_fmt_num(kb, sizeof kb, "b%.0f", knee), rate,
                 dg_fmt_num(sb, sizeof sb, "b%.0f", safe),
                 dg_fmt_num(at, sizeof at, "b%.0f", dg_jnum(stop, "at_batch")),
                 reason ? reason : "reason not reported");
    /* The batch and step time the later steps build on: the knee's. */
    if (!isnan(knee) && !a->o->train.batch) {
        a->batch = (int)knee;
        const cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(sw, "trials"))
        {
            if (dg_jnum(t, "batch") == knee)
                a->step_s = dg_jnum(t, "step_ms.median") / 1000.0;
        }
    }
    finish(a, st, sum);
}

/* Steps that fit budget_s at the knee's step time, within [lo, hi]. */
static int steps_for(const acc *a, double budget_s, int runs, int lo, int hi)
{
    double step = isnan(a->step_s) || a->step_s <= 0 ? 0.05 : a->step_s;
    double n = budget_s / (step * (runs > 0 ? runs : 1));
    return n < lo ? lo : n > hi ? hi : (int)n;
}

static void run_soak(acc *a)
{
    begin(a, 3);
    dg_soak_opts so = {.train = a->base};
    so.train.backend = a->device;
    so.train.batch = a->batch;
    so.train.epochs = a->o->train.epochs > 0 ? a->o->train.epochs : a->tier->soak_epochs;
    so.train.steps = a->o->train.steps > 0
                         ? a->o->train.steps
                         : steps_for(a, a->tier->soak_budget_s, so.train.epochs, 2, 50);
    char *json = NULL;
    dg_status st = dg_soak_run(a->ctx, &so, &json);
    cJSON *rec = keep(a, json);
    /* Record version 2: the soak analysis is in the soak record itself. */
    const cJSON *soak = cJSON_IsObject(rec) ? rec : NULL;
    char sum[256] = "", al[32], fp[32], ep[32];
    if (soak)
        snprintf(sum, sizeof sum, "%s b%d: allocator %s, footprint %s after %s%s", a->device,
                 a->batch,
                 dg_fmt_num(al, sizeof al, "%+.0f%%", dg_jnum(soak, "growth.allocator_allocated")),
                 dg_fmt_num(fp, sizeof fp, "%+.0f%%", dg_jnum(soak, "growth.footprint")),
                 dg_fmt_num(ep, sizeof ep, "%.0f epochs", dg_jnum(soak, "epochs_recorded")),
                 cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(soak, "empty_cache"))
                     ? ", cache emptied each epoch"
                     : "");
    if (rec && !cJSON_GetObjectItemCaseSensitive(a->rec, "bucket")) {
        const cJSON *bk = cJSON_GetObjectItemCaseSensitive(rec, "bucket");
        if (bk)
            cJSON_AddItemToObject(a->rec, "bucket", cJSON_Duplicate(bk, true));
    }
    finish(a, st, sum);
}

static void run_compare(acc *a)
{
    begin(a, 4);
    if (dg_backend_is_host(a->device)) {
        end(a, "skipped",
            a->o->train.backend ? "the device asked for is the cpu baseline itself"
                                : "no device passed the gate: cpu is the only path",
            NULL);
        cJSON_AddNullToObject(a->rec, "compare");
        return;
    }
    /* The knee of a large device can be a batch the cpu needs seconds per step
     * for; above the tier's cap the comparison runs at the cap (a --batch given
     * is used as it is). */
    int batch = a->batch;
    if (!a->o->train.batch && batch > a->tier->compare_max_batch)
        batch = a->tier->compare_max_batch;
    dg_compare_opts co = {.train = a->base,
                          .batches = {batch},
                          .steps = a->tier->compare_steps,
                          .repetitions = a->tier->compare_reps};
    co.train.backend = a->device;
    char *json = NULL;
    dg_status st = dg_compare_run(a->ctx, &co, &json);
    cJSON *rec = keep(a, json);
    const cJSON *run = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(rec, "runs"), 0);
    char sum[256] = "";
    if (run) {
        double busy = dg_jnum(run, "busy_fraction");
        char bs[32] = "not reported";
        if (!isnan(busy))
            snprintf(bs, sizeof bs, "%.0f%%", 100 * busy);
        const char *verdict =
            cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(run, "verdict"));
        char ci[64] = "";
        double lo = dg_jnum(run, "speedup_ci.lo"), hi = dg_jnum(run, "speedup_ci.hi");
        if (!isnan(lo) && !isnan(hi))
            snprintf(ci, sizeof ci, " (95%% %.2f-%.2f×)", lo, hi);
        char sp[32];
        snprintf(sum, sizeof sum, "%s is %s%s at b%d, busy %s, %s", a->device,
                 dg_fmt_num(sp, sizeof sp, "%.2f× cpu", dg_jnum(run, "speedup")), ci, batch, bs,
                 verdict ? verdict : "numerics not judged");
    }
    finish(a, st, sum);
}

static void run_profile(acc *a)
{
    begin(a, 5);
    dg_profile_opts po = {
        .train = a->base, .warmup = a->tier->profile_warmup, .trace_path = a->o->trace_path};
    po.train.backend = a->device;
    po.train.batch = a->batch;
    po.window = steps_for(a, a->tier->profile_budget_s, 2, 5, 50);
    char *json = NULL;
    dg_status st = dg_profile_run(a->ctx, &po, &json);
    cJSON *rec = keep(a, json);
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(rec, "phases");
    char sum[256] = "";
    if (ph) {
        static const struct {
            const char *key, *label;
        } shown[] = {{"queue_wait", "data"}, {"h2d", "h2d"},    {"forward", "fwd"},
                     {"backward", "bwd"},    {"update", "upd"}, {"sync", "sync"}};
        size_t off = 0;
        for (size_t i = 0; i < sizeof shown / sizeof shown[0] && off < sizeof sum; i++) {
            char key[64];
            snprintf(key, sizeof key, "%s.share", shown[i].key);
            double v = dg_jnum(ph, key);
            if (!isnan(v))
                off += (size_t)snprintf(sum + off, sizeof sum - off, "%s%s %.0f%%",
                                        off ? " · " : "", shown[i].label, 100 * v);
        }
        double per = dg_jnum(rec, "sync_points.per_step");
        if (!isnan(per) && off < sizeof sum)
            snprintf(sum + off, sizeof sum - off, " · %.2g sync points per step", per);
    }
    finish(a, st, sum);
}

/* ---- the record -------------------------------------------------------------- */

void dg_accept_rec_head(cJSON *rec, const char *label)
{
    cJSON_AddNumberToObject(rec, "v", DG_RECORD_VERSION);
    cJSON_AddStringToObject(rec, "kind", "accept");
    cJSON_AddNullToObject(rec, "run_id");
    char ts[32], host[256] = "";
    dg_utc_iso(ts, sizeof ts);
    cJSON_AddStringToObject(rec, "timestamp", ts);
    if (gethostname(host, sizeof host) == 0)
        host[sizeof host - 1] = '\0';
    cJSON_AddStringToObject(rec, "host", host);
    dg_json_add_str(rec, "label", label);
}

dg_status dg_accept_rec_finish(dg_ctx *ctx, cJSON *rec, cJSON *steps, dg_status st, char **json)
{
    cJSON_AddItemToObject(rec, "steps", steps);
    cJSON_AddStringToObject(rec, "state", st == DG_ERR_INTERRUPTED ? "interrupted" : "complete");
    cJSON_AddNullToObject(rec, "supervise");
    if (!cJSON_GetObjectItemCaseSensitive(rec, "bucket"))
        cJSON_AddNullToObject(rec, "bucket");
    *json = dg_json_print(rec);
    cJSON_Delete(rec);
    if (!*json)
        return dg_fail(ctx, DG_ERR_NOMEM, "accept: out of host memory");
    if (st == DG_ERR_INTERRUPTED)
        return dg_fail(ctx, st, "accept: interrupted");
    return st == DG_ERR_UNAVAILABLE ? st : DG_OK;
}

static void add_spec(acc *a)
{
    const dg_train_opts *t = &a->base;
    cJSON *spec = cJSON_AddObjectToObject(a->rec, "spec");
    cJSON_AddStringToObject(
        spec, "backend", a->device ? a->device : (a->o->train.backend ? a->o->train.backend : ""));
    cJSON_AddBoolToObject(spec, "backend_chosen", a->o->train.backend == NULL);
    cJSON_AddStringToObject(spec, "baseline", "cpu");
    cJSON_AddStringToObject(spec, "model", t->model);
    dg_json_add_str(spec, "data", t->data ? t->data : "synthetic");
    cJSON_AddBoolToObject(spec, "quick", a->o->quick);
    cJSON_AddNumberToObject(spec, "seed", (double)t->seed);
    if (a->batch > 0)
        cJSON_AddNumberToObject(spec, "batch", a->batch);
    else
        cJSON_AddNullToObject(spec, "batch");
    cJSON_AddStringToObject(spec, "batch_source", a->o->train.batch ? "option" : "sweep knee");
    if (a->o->sweep_to > 0)
        cJSON_AddNumberToObject(spec, "sweep_to", a->o->sweep_to);
    else
        cJSON_AddNullToObject(spec, "sweep_to");
    cJSON_AddNumberToObject(spec, "threads", t->threads);
    cJSON_AddNumberToObject(spec, "workers", t->workers < 0 ? 0 : t->workers);
    cJSON_AddBoolToObject(spec, "tf32", t->tf32);
}

dg_status dg_accept_run(dg_ctx *ctx, const dg_accept_opts *opts, char **json)
{
    *json = NULL;
    if (!opts)
        return dg_fail(ctx, DG_ERR_USAGE, "accept: no options");
    if (opts->train.batch < 0 || opts->train.epochs < 0 || opts->train.steps < 0 ||
        opts->sweep_to < 0)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "accept: batch, epochs, steps and the sweep limit must be positive");
    /* Inputs judged before anything is measured. */
    if (dg_disable_ops_check(ctx, opts->train.disable_ops) != DG_OK)
        return DG_ERR_USAGE;
    acc a = {.ctx = ctx,
             .o = opts,
             .tier = &tiers[opts->quick ? 0 : 1],
             .base = opts->train,
             .step_s = NAN};
    if (!a.base.model)
        a.base.model = "cifar";
    a.base.batch = 0;
    a.base.epochs = 0;
    a.base.steps = 0;
    a.batch = opts->train.batch > 0 ? opts->train.batch : 32;
    a.rec = cJSON_CreateObject();
    if (!a.rec)
        return dg_fail(ctx, DG_ERR_NOMEM, "accept: out of host memory");
    dg_accept_rec_head(a.rec, opts->label);
    a.steps = cJSON_CreateArray();

    dg_status st = DG_OK;
    int next = 1;
    run_env(&a);
    if (!cancelled(&a)) {
        st = run_gate(&a);
        next = 2;
    }
    void (*const later[])(acc *) = {run_sweep, run_soak, run_compare, run_profile};
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
