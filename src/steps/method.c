/* The method, written once (docs/accept.md; the runner interface in
 * src/steps/runner.h).
 *
 * env -> gate -> sweep -> soak -> compare -> profile, each step writing its
 * section of one evidence record (docs/schema/report.md). The runner measures
 * (the fixture's `__trial` children and library steps, or child runs of the
 * user's command); this file owns the order, cancellation, each step's entry
 * (begin, end, skip), the record's head and finish, the one sweep driver
 * (doubling, stop policy, bisection, conclusion) and the measurement lock and
 * contention window around every measured trial and epochs run. The rules,
 * the decision and the final gate are dg_evidence_finish's business. */
#include "steps/runner.h"

#include "core/record.h"
#include "steps/steps.h"

#include <math.h>
#include <string.h>

#define MAX_TRIALS 64 /* doubling plus bisection never gets near this */

dg_status dg_run_measured(dg_ctx *ctx, const dg_run_opts *opts, char **json)
{
    dg_measured ms;
    dg_measured_begin(&ms, opts ? opts->forward : NULL);
    dg_status st = dg_run_supervise(ctx, opts, json);
    cJSON *rec = *json ? cJSON_Parse(*json) : NULL;
    cJSON *soak = cJSON_GetObjectItemCaseSensitive(rec, "soak");
    dg_measured_end(&ms, rec);
    if (!rec)
        return st;
    /* The soak section carries its window as the accept record's soak does. */
    if (cJSON_IsObject(soak)) {
        static const char *const keys[] = {"lock", "contention"};
        for (int i = 0; i < 2; i++)
            cJSON_AddItemToObject(
                soak, keys[i],
                cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(rec, keys[i]), true));
    }
    char *out = dg_json_print(rec);
    cJSON_Delete(rec);
    if (!out)
        return dg_fail(ctx, DG_ERR_NOMEM, "run: out of host memory");
    dg_string_free(*json);
    *json = out;
    return st;
}

/* ---- the sweep driver ----------------------------------------------------------- */

const char *dg_trial_end_name(dg_trial_end e)
{
    switch (e) {
    case DG_TRIAL_OK: return "ok";
    case DG_TRIAL_OOM:
    case DG_TRIAL_BUDGET: return "device-oom";
    case DG_TRIAL_OOM_KILLER: return "oom-killer";
    case DG_TRIAL_SIGNAL: return "signal";
    case DG_TRIAL_TIMEOUT: return "timeout";
    case DG_TRIAL_FAILED: return "failed";
    case DG_TRIAL_INTERRUPTED: return "interrupted";
    }
    return "failed";
}

/* A trial that can stand as "good": it ran to its end and did not swap past the limit. */
static bool good(const dg_trial_result *t)
{
    return t->end == DG_TRIAL_OK && !t->swapped;
}

/* A trial whose steps held fewer samples than the batch asked for: the data
 * set is smaller than the batch and was delivered whole, so the trial
 * measured the data set's size, not its batch (the "train-set" stop). */
static bool short_of(const dg_trial_result *t, int batch)
{
    return isfinite(t->per_step) && t->per_step < batch;
}

/* The stop reason a failing trial gives (docs/measure.md "Sweep"). */
static const char *stop_reason(const dg_trial_result *t)
{
    switch (t->end) {
    case DG_TRIAL_OOM:
    case DG_TRIAL_OOM_KILLER: return "oom"; /* out of memory as the kernel saw it: a proving stop */
    case DG_TRIAL_BUDGET: return "budget";
    case DG_TRIAL_OK: return "swap";
    default: return dg_trial_end_name(t->end);
    }
}

static cJSON *metric_of(dg_metric m, const char *unit)
{
    bool ok = m.valid && isfinite(m.value);
    return dg_json_metric(ok ? m.value : 0, ok, unit);
}

cJSON *dg_trial_entry(int batch, dg_trial_result *t)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "batch", batch);
    cJSON_AddStringToObject(j, "ended", dg_trial_end_name(t->end));
    dg_json_add_str(j, "reason", t->reason[0] ? t->reason : NULL);
    if (t->end == DG_TRIAL_OOM || t->end == DG_TRIAL_BUDGET)
        cJSON_AddBoolToObject(j, "budget", t->end == DG_TRIAL_BUDGET);
    while (t->extra && t->extra->child) {
        cJSON *x = cJSON_DetachItemViaPointer(t->extra, t->extra->child);
        cJSON_AddItemToObject(j, x->string, x);
    }
    cJSON_Delete(t->extra);
    t->extra = NULL;
    bool sps = isfinite(t->rate.sps);
    cJSON_AddItemToObject(j, "samples_per_s",
                          dg_json_metric(sps ? t->rate.sps : 0, sps, "samples/s"));
    cJSON_AddItemToObject(j, "samples_per_s_ci", dg_sweep_rate_json(&t->rate));
    cJSON *sm = cJSON_AddObjectToObject(j, "step_ms");
    cJSON_AddItemToObject(sm, "median", metric_of(t->step_median, "ms"));
    cJSON_AddItemToObject(sm, "iqr", metric_of(t->step_iqr, "ms"));
    cJSON_AddNumberToObject(sm, "steps", isfinite(t->steps) ? t->steps : 0);
    cJSON_AddStringToObject(sm, "source", t->step_source ? t->step_source : "none");
    cJSON_AddItemToObject(j, "device_allocated_peak", metric_of(t->allocated_peak, "bytes"));
    cJSON_AddItemToObject(j, "device_reserved_peak", metric_of(t->reserved_peak, "bytes"));
    cJSON_AddItemToObject(j, "rss_peak", metric_of(t->rss_peak, "bytes"));
    cJSON_AddItemToObject(j, "swap_growth", metric_of(t->swap_growth, "bytes"));
    cJSON_AddItemToObject(j, "psi_peak", metric_of(t->psi_peak, "percent"));
    bool ns = isfinite(t->samples);
    cJSON_AddItemToObject(j, "samples", dg_json_metric(ns ? t->samples : 0, ns, "samples"));
    bool ps = isfinite(t->per_step), ts = isfinite(t->train_samples);
    cJSON_AddItemToObject(j, "samples_per_step",
                          dg_json_metric(ps ? t->per_step : 0, ps, "samples"));
    cJSON_AddItemToObject(j, "train_samples",
                          dg_json_metric(ts ? t->train_samples : 0, ts, "samples"));
    cJSON_AddItemToObject(j, "wall_s", metric_of(t->wall_s, "s"));
    return j;
}

/* The trial's end for the progress reports: its word, and its rate or reason. */
static void trial_progress(dg_progress_sink *p, const dg_trial_result *t)
{
    char detail[160];
    if (t->end == DG_TRIAL_OK && isfinite(t->rate.sps) && t->wall_s.valid)
        snprintf(detail, sizeof detail, "%.0f samples/s in %.1f s", t->rate.sps, t->wall_s.value);
    else if (t->end == DG_TRIAL_OK && isfinite(t->rate.sps))
        snprintf(detail, sizeof detail, "%.0f samples/s", t->rate.sps);
    else
        snprintf(detail, sizeof detail, "%.150s", t->reason);
    dg_progress_trial_end(p, dg_trial_end_name(t->end), detail);
}

typedef struct sweep_run {
    dg_ctx *ctx;
    const dg_runner_i *r;
    void *rc;
    const volatile sig_atomic_t *cancel;
    dg_sweep_point pts[MAX_TRIALS];
    int n;
    double lock_waited; /* s, summed over the trials */
    dg_progress_sink *progress;
} sweep_run;

/* Runs the trial at batch under the measurement lock; *entry its TRIAL entry. */
static dg_status run_one(sweep_run *sw, int batch, dg_trial_result *t, cJSON **entry)
{
    *entry = NULL;
    if (sw->n >= MAX_TRIALS)
        return DG_ERR_NOMEM;
    memset(t, 0, sizeof *t);
    t->rate = (dg_sweep_rate){.sps = NAN, .lo = NAN, .hi = NAN, .reason = "not run"};
    t->samples = NAN;
    t->per_step = NAN;
    t->train_samples = NAN;
    t->loop_s = NAN;
    dg_log(sw->ctx, DG_LOG_INFO, "sweep: trial at batch %d", batch);
    dg_progress_trial(sw->progress, "batch %d", batch);
    dg_measured ms;
    dg_measured_begin(&ms, sw->cancel);
    dg_status st = sw->r->trial(sw->rc, batch, t);
    cJSON *j = st == DG_OK ? dg_trial_entry(batch, t) : NULL;
    sw->lock_waited += dg_measured_end(&ms, j);
    cJSON_Delete(t->extra);
    t->extra = NULL;
    if (st != DG_OK || !j) {
        cJSON_Delete(j);
        return DG_ERR_NOMEM;
    }
    if (t->end != DG_TRIAL_OK && t->rate.valid)
        t->rate.valid = false;
    if (t->end != DG_TRIAL_OK)
        t->rate.reason = "the trial did not end ok";
    /* A trial that delivered less than its batch stands for no batch of its
     * own: knee and safe batch never come from it. */
    sw->pts[sw->n++] = (dg_sweep_point){batch, good(t) && !short_of(t, batch), t->rate};
    dg_log(sw->ctx, DG_LOG_INFO, "sweep: batch %d: %s%s%s", batch, dg_trial_end_name(t->end),
           t->reason[0] ? ": " : "", t->reason);
    trial_progress(sw->progress, t);
    *entry = j;
    return DG_OK;
}

static bool stop_asked(const sweep_run *sw)
{
    return sw->cancel && *sw->cancel;
}

/* Bisection between the last good batch g and the first failing one bad; the
 * smallest failing batch found. */
static int bisect(sweep_run *sw, cJSON *bis, int g, int bad, int resolution, dg_status *st)
{
    while (bad - g > resolution) {
        if (stop_asked(sw)) {
            *st = DG_ERR_INTERRUPTED;
            break;
        }
        int m = g + (bad - g) / 2;
        if (sw->progress)
            dg_progress_expect(sw->progress, sw->progress->trial + 1);
        dg_trial_result t;
        cJSON *j;
        if ((*st = run_one(sw, m, &t, &j)) != DG_OK)
            break;
        cJSON_AddItemToArray(bis, j);
        if (t.end == DG_TRIAL_INTERRUPTED) {
            *st = DG_ERR_INTERRUPTED;
            break;
        }
        if (good(&t))
            g = m;
        else
            bad = m;
    }
    return bad;
}

int dg_sweep_plan_trials(const dg_sweep_plan *plan)
{
    int n = 0;
    for (long b = plan->from > 0 ? plan->from : 1; b <= plan->to && n < 64; b *= 2)
        n++;
    return plan->to >= DG_SWEEP_MAX_BATCH && n > 6 ? 6 : n > 0 ? n : 1;
}

dg_status dg_method_sweep(dg_ctx *ctx, const dg_runner_i *r, void *rctx, const dg_sweep_plan *plan,
                          const volatile sig_atomic_t *cancel, dg_progress_sink *progress,
                          cJSON *root)
{
    sweep_run *sw = dg_calloc(1, sizeof *sw);
    if (!sw)
        return DG_ERR_NOMEM;
    *sw = (sweep_run){.ctx = ctx, .r = r, .rc = rctx, .cancel = cancel, .progress = progress};
    dg_progress_expect(progress, dg_sweep_plan_trials(plan));
    cJSON *trials = cJSON_AddArrayToObject(root, "trials");
    const char *why = "limit";
    int at = 0, last_good = 0, first_bad = 0;
    dg_status st = DG_OK;
    dg_sweep_stopper stop;
    dg_sweep_stop_init(&stop, plan->to, plan->max_trial_s, plan->train_samples);
    for (long b = plan->from; b <= plan->to; b *= 2) {
        dg_trial_result t;
        cJSON *j;
        if (stop_asked(sw)) {
            st = DG_ERR_INTERRUPTED;
            why = "interrupted";
            break;
        }
        if ((st = run_one(sw, (int)b, &t, &j)) != DG_OK)
            break;
        cJSON_AddItemToArray(trials, j);
        at = (int)b;
        if (t.end == DG_TRIAL_INTERRUPTED) {
            why = "interrupted";
            st = DG_ERR_INTERRUPTED;
            break;
        }
        if (!good(&t)) {
            why = stop_reason(&t);
            first_bad = (int)b;
            break;
        }
        /* The program's data set, once a trial reports it, bounds the
         * doubling; a trial that got less than it asked ends it there. */
        if (isfinite(t.train_samples))
            stop.train_samples = t.train_samples;
        if (short_of(&t, (int)b)) {
            why = "train-set";
            break;
        }
        last_good = (int)b;
        const char *end = dg_sweep_stop_next(&stop, (int)b, &t.rate, t.loop_s);
        cJSON_AddItemToObject(j, "stop_check", dg_sweep_judged_json(&stop.last));
        if (end) {
            why = end;
            break;
        }
    }
    cJSON *stopped = cJSON_AddObjectToObject(root, "stopped");
    cJSON_AddStringToObject(stopped, "reason", why);
    cJSON_AddNumberToObject(stopped, "at_batch", at);
    /* What a throughput stop rests on: the rates and intervals it compared. */
    cJSON_AddItemToObject(root, "stop_evidence", dg_sweep_stop_evidence(&stop, why));
    cJSON *bis = cJSON_AddArrayToObject(root, "bisect");
    int resolution = last_good / 8 > 1 ? last_good / 8 : 1;
    if (st == DG_OK && plan->bisect && last_good && first_bad)
        first_bad = bisect(sw, bis, last_good, first_bad, resolution, &st);
    cJSON_AddNumberToObject(root, "bisect_resolution", resolution);
    cJSON_AddItemToObject(root, "lock_waited", dg_json_metric(sw->lock_waited, true, "s"));
    /* Knee and safe batch over every good trial. */
    dg_sweep_conclude(root, sw->pts, sw->n, first_bad);
    dg_free(sw);
    return st;
}

/* ---- the step harness ------------------------------------------------------------- */

static const char *const step_names[] = {"env", "gate", "sweep", "soak", "compare", "profile"};
enum { STEP_COUNT = sizeof step_names / sizeof step_names[0] };

typedef struct method {
    dg_ctx *ctx;
    const dg_runner_i *r;
    void *rc;
    const dg_method_opts *o;
    cJSON *rec, *steps;
    int index;    /* of the step running now */
    double t0;    /* its start */
    double start; /* the method's */
    dg_method_state s;
    dg_progress_sink progress;
    int sweep_trials; /* the sweep's expected trials (the ETA's, before it starts) */
} method;

static bool cancelled(const method *m)
{
    return m->o->cancel && *m->o->cancel;
}

/* The seconds step i is planned to take (the runner's plan; NAN unknown). */
static double step_plan(method *m, int i)
{
    if (i == 0)
        return 2; /* the environment proof: about a second or two */
    if (i != 2)
        return m->r->plan_s(m->rc, &m->s, i);
    return m->sweep_trials * m->r->plan_s(m->rc, &m->s, 2);
}

/* What is left of the method by its plan, step_elapsed into the running
 * step. In the sweep, the trials it has finished say what one takes. */
static double method_eta(void *ctx, double step_elapsed)
{
    method *m = ctx;
    const dg_progress_sink *p = &m->progress;
    double left = 0;
    int i = m->index;
    if (i == 2 && isfinite(left = dg_progress_trials_left_s(p)))
        i++;
    else
        left = 0;
    for (; i < STEP_COUNT; i++) {
        double s = step_plan(m, i);
        if (!isfinite(s))
            return NAN;
        left += i == m->index ? fmax(s - step_elapsed, 0) : s;
    }
    return left;
}

static void begin(method *m, int index)
{
    m->index = index;
    m->t0 = dg_now();
    dg_progress_step(&m->progress, step_names[index], index, STEP_COUNT, 0);
}

/* Adds the step entry; status "ok", "failed", "skipped" or "interrupted". */
static void end(method *m, const char *status, const char *summary, const char *error)
{
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "name", step_names[m->index]);
    cJSON_AddStringToObject(s, "status", status);
    cJSON_AddNullToObject(s, "verdict"); /* set from the findings by dg_evidence_finish */
    dg_json_add_str(s, "summary", summary ? summary : "");
    dg_json_add_str(s, "error", error && error[0] ? error : NULL);
    bool ran = strcmp(status, "skipped") != 0;
    cJSON_AddItemToObject(s, "wall", dg_json_metric(ran ? dg_now() - m->t0 : 0, ran, "s"));
    cJSON_AddItemToArray(m->steps, s);
    if (m->progress.step == step_names[m->index]) /* a step that began, not one never reached */
        dg_progress_step_end(&m->progress, status, error && error[0] ? error : summary);
}

static void skip(method *m, int index, const char *why)
{
    m->index = index;
    end(m, "skipped", why, NULL);
    cJSON_AddNullToObject(m->rec, step_names[index]);
}

/* Keeps what the step gave (its section, the top-level members it found)
 * and ends it from its status: skipped, interrupted, failed or ok. */
static void conclude(method *m, dg_status st, dg_step_out *out)
{
    cJSON_AddItemToObject(m->rec, step_names[m->index],
                          out->section ? out->section : cJSON_CreateNull());
    out->section = NULL;
    while (out->hoist && out->hoist->child) {
        cJSON *x = cJSON_DetachItemViaPointer(out->hoist, out->hoist->child);
        if (cJSON_GetObjectItemCaseSensitive(m->rec, x->string))
            cJSON_Delete(x);
        else
            cJSON_AddItemToObject(m->rec, x->string, x);
    }
    cJSON_Delete(out->hoist);
    out->hoist = NULL;
    if (out->skipped)
        end(m, "skipped", out->summary, NULL);
    else if (st == DG_ERR_INTERRUPTED || (st != DG_OK && cancelled(m)))
        end(m, "interrupted", out->summary, "interrupted");
    else if (st != DG_OK)
        end(m, "failed", out->summary, out->error[0] ? out->error : dg_errmsg(m->ctx));
    else
        end(m, "ok", out->summary, NULL);
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

/* ---- the steps ------------------------------------------------------------------- */

static void env_summary(const cJSON *env, char *sum, size_t len)
{
    const char *proc = dg_jstr(env, "arch.process"), *host = dg_jstr(env, "arch.host");
    bool vm = dg_jbool(env, "virtualization.vm") == 1;
    bool ct = dg_jbool(env, "virtualization.container") == 1;
    int busy = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, dg_jpath(env, "processes.top_cpu"))
    {
        if (dg_jbool(p, "self") != 1 && dg_jnum(p, "cpu_percent") > 20)
            busy++;
    }
    snprintf(sum, len, "%s process on %s host, %s; %s; %d busy process%s", proc ? proc : "?",
             host ? host : "?", dg_jbool(env, "arch.translated") == 1 ? "TRANSLATED" : "native",
             vm && ct ? "container in a VM"
             : vm     ? "VM"
             : ct     ? "container"
                      : "no VM",
             busy, busy == 1 ? "" : "es");
}

static void step_env(method *m)
{
    begin(m, 0);
    dg_env_opts eo = {.python = m->r->python(m->rc)};
    char *json = NULL;
    dg_status st = dg_env_run(m->ctx, &eo, &json);
    dg_step_out out = {.section = json ? cJSON_Parse(json) : NULL};
    dg_string_free(json);
    if (out.section)
        env_summary(out.section, out.summary, sizeof out.summary);
    conclude(m, st, &out);
}

static dg_status step_gate(method *m)
{
    begin(m, 1);
    dg_step_out out = {0};
    const char *device = NULL;
    dg_status st = m->r->gate(m->rc, &out, &device);
    if (st == DG_OK)
        m->s.device = device ? device : "cpu";
    conclude(m, st, &out);
    return st;
}

static void sweep_summary(method *m, const cJSON *sw, char *sum, size_t len)
{
    char rate[32], kb[32], sb[32], at[32];
    fmt_rate(rate, sizeof rate, dg_jnum(sw, "knee.samples_per_s"));
    const char *reason = dg_jstr(sw, "stopped.reason");
    snprintf(sum, len, "%s: knee %s (%s samples/s) · safe %s · stopped at %s: %s", m->s.device,
             dg_fmt_num(kb, sizeof kb, "b%.0f", dg_jnum(sw, "knee.batch")), rate,
             dg_fmt_num(sb, sizeof sb, "b%.0f", dg_jnum(sw, "safe_batch.batch")),
             dg_fmt_num(at, sizeof at, "b%.0f", dg_jnum(sw, "stopped.at_batch")),
             reason ? reason : "reason not reported");
}

static void step_sweep(method *m)
{
    begin(m, 2);
    dg_step_out out = {0};
    dg_sweep_plan plan = {0};
    cJSON *root = cJSON_CreateObject();
    dg_status st = root ? m->r->sweep_plan(m->rc, &m->s, root, &plan, &out) : DG_ERR_NOMEM;
    if (st != DG_OK || out.skipped) {
        cJSON_Delete(root);
        conclude(m, st, &out);
        return;
    }
    m->sweep_trials = dg_sweep_plan_trials(&plan);
    st = dg_method_sweep(m->ctx, m->r, m->rc, &plan, m->o->cancel, &m->progress, root);
    m->r->sweep_done(m->rc);
    out.section = root;
    sweep_summary(m, root, out.summary, sizeof out.summary);
    /* The batch and step time the later steps build on: the knee's. */
    double knee = dg_jnum(root, "knee.batch");
    if (isfinite(knee) && !m->s.batch_given) {
        m->s.batch = (int)knee;
        const cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(root, "trials"))
        {
            if (dg_jnum(t, "batch") == knee)
                m->s.step_s = dg_jnum(t, "step_ms.median") / 1000.0;
        }
    }
    if (st == DG_ERR_NOMEM)
        snprintf(out.error, sizeof out.error, "out of trial slots or host memory");
    else if (st == DG_OK && !isfinite(knee)) {
        st = DG_ERR_CHECK;
        snprintf(out.error, sizeof out.error,
                 "no trial ran to its clean end: see the trials' reasons");
    }
    conclude(m, st, &out);
}

static void soak_summary(method *m, const cJSON *soak, char *sum, size_t len)
{
    char al[32], fp[32], ep[32];
    snprintf(sum, len, "%s b%d: allocator %s, footprint %s after %s%s", m->s.device, m->s.batch,
             dg_fmt_num(al, sizeof al, "%+.0f%%", dg_jnum(soak, "growth.allocator_allocated")),
             dg_fmt_num(fp, sizeof fp, "%+.0f%%", dg_jnum(soak, "growth.footprint")),
             dg_fmt_num(ep, sizeof ep, "%.0f epochs", dg_jnum(soak, "epochs_recorded")),
             dg_jbool(soak, "empty_cache") == 1 ? ", cache emptied each epoch" : "");
}

/* How an epochs run ended, as the step's status (its error in out). */
static dg_status epochs_status(dg_epochs_result *e, dg_step_out *out)
{
    snprintf(out->error, sizeof out->error, "%s", e->reason);
    if (e->end == DG_TRIAL_INTERRUPTED)
        return DG_ERR_INTERRUPTED;
    if (e->end != DG_TRIAL_OK)
        return DG_ERR_CHECK;
    if (!e->soak) {
        snprintf(out->error, sizeof out->error,
                 "the program reported no epoch end (no DataLoader epoch was seen)");
        return DG_ERR_CHECK;
    }
    return DG_OK;
}

/* The soak: the runner's epochs under the measurement lock, contention sampled. */
static void step_soak(method *m)
{
    begin(m, 3);
    dg_epochs_result e = {.end = DG_TRIAL_FAILED};
    dg_measured ms;
    dg_measured_begin(&ms, m->o->cancel);
    dg_status st = m->r->epochs(m->rc, &m->s, &e);
    if (!cJSON_IsObject(e.soak)) {
        cJSON_Delete(e.soak);
        e.soak = NULL;
    }
    dg_measured_end(&ms, e.soak);
    dg_step_out out = {.section = e.soak, .hoist = e.hoist};
    if (st == DG_OK)
        st = epochs_status(&e, &out);
    else
        snprintf(out.error, sizeof out.error, "out of host memory");
    if (out.section)
        soak_summary(m, out.section, out.summary, sizeof out.summary);
    conclude(m, st, &out);
}

/* The comparison against the cpu: the runner's plan, then the driver's pairs. */
static void step_compare(method *m)
{
    begin(m, 4);
    dg_step_out out = {0};
    dg_compare_plan plan = {0};
    dg_status st = m->r->compare_plan(m->rc, &m->s, &plan, &out);
    if (st == DG_OK && !out.skipped && plan.max_pairs > 0 && !out.section)
        st = dg_method_compare(m->ctx, m->r, m->rc, m->s.device, &plan, m->o->cancel, &out);
    conclude(m, st, &out);
}

static void step_profile(method *m)
{
    begin(m, 5);
    dg_step_out out = {0};
    dg_status st = m->r->profile(m->rc, &m->s, &out);
    conclude(m, st, &out);
}

/* ---- the record ------------------------------------------------------------------- */

/* Each step's share of the method's wall (steps[].share): where the time to
 * evidence went; not reported for a skipped step; what the shares leave is the
 * method's own work between steps. */
static void add_shares(cJSON *steps, double wall)
{
    cJSON *s;
    cJSON_ArrayForEach(s, steps)
    {
        double w = dg_jnum(s, "wall");
        bool ok = isfinite(w) && isfinite(wall) && wall > 0;
        cJSON_AddItemToObject(s, "share", dg_json_metric(ok ? w / wall : 0, ok, "fraction"));
    }
}

/* Closes the record (steps, state, supervise, bucket), prints it into *json,
 * frees it, and maps the run's status st to accept's return status. */
static dg_status finish_record(method *m, dg_status st, char **json)
{
    cJSON *spec = cJSON_AddObjectToObject(m->rec, "spec");
    const char *none = m->o->backend_asked ? m->o->backend_asked : m->o->backend_none;
    cJSON_AddStringToObject(spec, "backend", m->s.device ? m->s.device : none ? none : "");
    cJSON_AddBoolToObject(spec, "backend_chosen", m->o->backend_asked == NULL);
    cJSON_AddStringToObject(spec, "baseline", "cpu");
    cJSON_AddBoolToObject(spec, "quick", m->o->quick);
    cJSON_AddNumberToObject(spec, "level", m->o->level);
    if (m->s.batch > 0)
        cJSON_AddNumberToObject(spec, "batch", m->s.batch);
    else
        cJSON_AddNullToObject(spec, "batch");
    cJSON_AddStringToObject(spec, "batch_source", m->s.batch_given ? "option" : "sweep knee");
    if (m->o->sweep_to > 0)
        cJSON_AddNumberToObject(spec, "sweep_to", m->o->sweep_to);
    else
        cJSON_AddNullToObject(spec, "sweep_to");
    m->r->spec(m->rc, &m->s, spec);
    double wall = dg_now() - m->start;
    add_shares(m->steps, wall);
    cJSON_AddItemToObject(m->rec, "steps", m->steps);
    /* The level's budget against the method's wall (the judging after it is not counted). */
    cJSON_AddItemToObject(m->rec, "level",
                          dg_level_json(m->o->level, m->o->budget_s, wall, m->rec));
    cJSON_AddStringToObject(m->rec, "state", st == DG_ERR_INTERRUPTED ? "interrupted" : "complete");
    cJSON_AddNullToObject(m->rec, "supervise");
    if (!cJSON_GetObjectItemCaseSensitive(m->rec, "bucket"))
        cJSON_AddNullToObject(m->rec, "bucket");
    *json = dg_json_print(m->rec);
    cJSON_Delete(m->rec);
    if (!*json)
        return dg_fail(m->ctx, DG_ERR_NOMEM, "accept: out of host memory");
    if (st == DG_ERR_INTERRUPTED)
        return dg_fail(m->ctx, st, "accept: interrupted");
    return st == DG_ERR_UNAVAILABLE ? st : DG_OK;
}

dg_status dg_method_run(dg_ctx *ctx, const dg_runner_i *r, void *rctx, const dg_method_opts *o,
                        char **json)
{
    *json = NULL;
    if (!r || r->version != DG_RUNNER_VERSION)
        return dg_fail(ctx, DG_ERR_USAGE, "accept: runner interface version mismatch");
    if (!dg_level_get(o->level))
        return dg_fail(ctx, DG_ERR_USAGE, "accept: level %d out of range (%d..%d)", o->level,
                       DG_LEVEL_MIN, DG_LEVEL_MAX);
    method m = {.ctx = ctx,
                .r = r,
                .rc = rctx,
                .o = o,
                .start = dg_now(),
                .s = {.device = NULL,
                      .batch = o->batch > 0 ? o->batch : 32,
                      .batch_given = o->batch > 0,
                      .step_s = NAN},
                .sweep_trials = 6};
    dg_progress_init(&m.progress, o->progress, o->progress_user);
    m.progress.eta = method_eta;
    m.progress.ectx = &m;
    m.s.progress = &m.progress;
    m.rec = dg_record_new("accept", DG_RECORD_VERSION);
    m.steps = cJSON_CreateArray();
    if (!m.rec || !m.steps) {
        cJSON_Delete(m.rec);
        cJSON_Delete(m.steps);
        return dg_fail(ctx, DG_ERR_NOMEM, "accept: out of host memory");
    }
    cJSON_AddNullToObject(m.rec, "run_id");
    dg_json_add_str(m.rec, "label", o->label);

    dg_status st = DG_OK;
    int next = 1;
    step_env(&m);
    if (!cancelled(&m)) {
        st = step_gate(&m);
        next = 2;
    }
    void (*const later[])(method *) = {step_sweep, step_soak, step_compare, step_profile};
    for (; st == DG_OK && next < STEP_COUNT && !cancelled(&m); next++)
        later[next - 2](&m);
    if (cancelled(&m))
        st = DG_ERR_INTERRUPTED;
    for (int i = next; i < STEP_COUNT; i++)
        skip(&m, i,
             st == DG_ERR_INTERRUPTED ? "interrupted before this step"
                                      : "not run: the gate gave no device to judge");
    return finish_record(&m, st, json);
}
