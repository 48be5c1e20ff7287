/* Profile (METHOD.md, "Where time goes"): a fixed window of training steps
 * after a warm-up, run twice with the same spec and seed. The unprofiled pass
 * gives the step time and its split into phases (data-loader stages, queue
 * wait, transfer, forward, backward, update, sync); the profiled pass times
 * every op in isolation (synchronised before and after) for the op table and
 * the Chrome trace. */
#include "core/record.h"
#include "engine/train.h"
#include "measure/measure.h"
#include "steps/steps.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WARMUP_DEFAULT 10
#define WINDOW_DEFAULT 50
#define STEPS_MAX 1000000

static double num(const cJSON *obj, const char *key, double fallback)
{
    const cJSON *v = cJSON_GetObjectItem(obj, key);
    return cJSON_IsNumber(v) ? v->valuedouble : fallback;
}

/* Statistics of the per-step host times of the window (steps.ms[warmup..]). */
static void window_stats(const cJSON *rec, int warmup, dg_stats *out)
{
    const cJSON *ms = cJSON_GetObjectItem(cJSON_GetObjectItem(rec, "steps"), "ms");
    int n = cJSON_GetArraySize(ms);
    double *v = n > 0 ? dg_malloc((size_t)n * sizeof *v) : NULL;
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, ms)
    {
        if (v && cJSON_IsNumber(it))
            v[k++] = it->valuedouble;
    }
    size_t wu = (size_t)(warmup < k ? warmup : k);
    dg_stats_compute(v, v ? (size_t)k : 0, v ? wu : 0, out);
    dg_free(v);
}

/* Adds phase `name`: {ms, share, in_step}; share NAN: ms of step_ms. */
static void add_phase(cJSON *ph, const char *name, double ms, double share, double step_ms,
                      bool in_step)
{
    cJSON *p = cJSON_AddObjectToObject(ph, name);
    if (!p)
        return;
    bool ok = isfinite(ms);
    cJSON_AddItemToObject(p, "ms", dg_json_metric(ok ? ms : 0, ok, "ms"));
    if (!isfinite(share) && ok && step_ms > 0)
        share = ms / step_ms;
    bool share_ok = ok && isfinite(share);
    cJSON_AddItemToObject(p, "share", dg_json_metric(share_ok ? share : 0, share_ok, "fraction"));
    cJSON_AddBoolToObject(p, "in_step", in_step);
}

void dg_profile_data_wait(const cJSON *rec, double *wait_ms, double *share, double *mean_ms)
{
    const cJSON *wait = cJSON_GetObjectItem(cJSON_GetObjectItem(rec, "data"), "wait");
    *wait_ms = dg_json_metric_at(wait, "per_step");
    if (!isfinite(*wait_ms))
        *wait_ms = dg_json_metric_at(cJSON_GetObjectItem(rec, "phases"), "data");
    *mean_ms = dg_json_metric_at(cJSON_GetObjectItem(rec, "throughput"), "step_ms");
    *share = dg_json_metric_at(wait, "share_of_step");
    if (!isfinite(*share))
        *share = isfinite(*wait_ms) && *mean_ms > 0 ? *wait_ms / *mean_ms : NAN;
}

static const char *const stage_names[] = {"read",    "decode",    "resize",
                                          "augment", "normalise", "collate"};
#define NSTAGES (sizeof stage_names / sizeof stage_names[0])
static const char *const step_names[] = {"queue_wait", "h2d", "forward", "backward",
                                         "update",     "d2h", "sync"};
#define NSTEP (sizeof step_names / sizeof step_names[0])

typedef struct split {
    double stage[NSTAGES]; /* ms per batch, summed over workers */
    double step[NSTEP];    /* ms per step */
    double wait_share;     /* the queue wait's share of the window's wall */
    double mean_ms;        /* the window's wall / its steps (the steps the wait is over) */
    double step_ms;        /* median step of the window */
    bool sync_residual;    /* sync is step - the measured phases */
} split;

/* The phase split of the unprofiled pass's record. */
static void phase_split(const cJSON *rec, double step_ms, split *s)
{
    const cJSON *data = cJSON_GetObjectItem(rec, "data");
    const cJSON *stages = cJSON_GetObjectItem(data, "stages");
    double batches = num(data, "batches", 0);
    for (size_t i = 0; i < NSTAGES; i++)
        s->stage[i] = batches > 0 ? dg_json_metric_at(stages, stage_names[i]) * 1e3 / batches : NAN;
    const cJSON *ph = cJSON_GetObjectItem(rec, "phases");
    /* The wait is a mean over the window: its share is of the window's mean
     * step, never of the median (unsynchronised steps run ahead of the
     * device, then block: the two differ by several times). */
    dg_profile_data_wait(rec, &s->step[0], &s->wait_share, &s->mean_ms);
    for (size_t i = 1; i < NSTEP; i++)
        s->step[i] = dg_json_metric_at(ph, step_names[i]);
    s->step_ms = step_ms;
    s->sync_residual = false;
    if (!isfinite(s->step[NSTEP - 1]) && isfinite(step_ms)) {
        /* Not measured directly: what the step spends outside the measured phases
         * (waiting at sync points, reading the loss, host overhead). */
        double known = 0;
        for (size_t i = 0; i + 1 < NSTEP; i++)
            if (isfinite(s->step[i]))
                known += s->step[i];
        if (isfinite(s->step[2])) { /* device phases reported at all */
            s->step[NSTEP - 1] = step_ms > known ? step_ms - known : 0;
            s->sync_residual = true;
        }
    }
}

/* Op table totals: calls, ms; fallback calls and their copies. */
typedef struct op_totals {
    double calls, ms, fb_calls, fb_d2h, fb_h2d;
} op_totals;

static void ops_totals(const cJSON *ops, op_totals *t)
{
    memset(t, 0, sizeof *t);
    const cJSON *r;
    cJSON_ArrayForEach(r, ops)
    {
        t->calls += num(r, "calls", 0);
        t->ms += num(r, "ms_total", 0);
        if (cJSON_IsTrue(cJSON_GetObjectItem(r, "fallback"))) {
            t->fb_calls += num(r, "calls", 0);
            t->fb_d2h += num(r, "bytes_d2h", 0);
            t->fb_h2d += num(r, "bytes_h2d", 0);
        }
    }
}

/* Loss reads (sync points of the loop) inside the window: steps after warmup. */
static int window_loss_reads(const cJSON *rec, int warmup)
{
    int n = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(rec, "loss"))
    {
        if (num(p, "step", 0) > warmup)
            n++;
    }
    return n;
}

/* Bytes of one batch upload (inputs and int32 labels), 0 when unknown. */
static double batch_bytes(const cJSON *rec)
{
    const cJSON *in = cJSON_GetObjectItem(cJSON_GetObjectItem(rec, "model"), "input");
    double batch = num(cJSON_GetObjectItem(rec, "spec"), "batch", 0);
    if (cJSON_GetArraySize(in) != 3)
        return 0;
    double chw = 1;
    for (int i = 0; i < 3; i++) {
        const cJSON *d = cJSON_GetArrayItem(in, i);
        chw *= cJSON_IsNumber(d) ? d->valuedouble : 0;
    }
    return batch * (chw * 4 + 4);
}

/* The trace: the profiled pass's op events (pid 1), and from the unprofiled
 * pass its step times end to end and a composite median step (pid 2). */
/* The n parts of a composite (ms each, NAN: left out) one after the other
 * from 0 on thread tid of the unprofiled pass, each named names[i]. */
static void composite(cJSON *ev, const char *const *names, const double *ms, size_t n,
                      const char *cat, int tid)
{
    double ts = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(ms[i]))
            continue;
        cJSON *args = dg_trace_add(ev, names[i], cat, ts, ms[i] * 1e3, 2, tid);
        if (args)
            cJSON_AddNumberToObject(args, "ms", ms[i]);
        ts += ms[i] * 1e3;
    }
}

static cJSON *trace_events(const cJSON *prec, const cJSON *urec, const split *s, int warmup,
                           const char *backend)
{
    cJSON *ev = cJSON_CreateArray();
    if (!ev)
        return NULL;
    char name[128];
    snprintf(name, sizeof name, "profiled pass: %s ops, each synchronised", backend);
    dg_trace_name(ev, 1, -1, name);
    dg_trace_name(ev, 1, 1, "ops");
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(prec, "trace"))
    {
        cJSON *c = cJSON_Duplicate(it, true);
        if (!c || !cJSON_AddItemToArray(ev, c)) {
            cJSON_Delete(c);
            cJSON_Delete(ev);
            return NULL;
        }
    }
    dg_trace_name(ev, 2, -1, "unprofiled pass");
    dg_trace_name(ev, 2, 1, "steps (host time, end to end)");
    dg_trace_name(ev, 2, 2, "median step, composite of the phases");
    dg_trace_name(ev, 2, 3, "data loader per batch, composite (workers, overlapped)");
    double ts = 0;
    int g = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(cJSON_GetObjectItem(urec, "steps"), "ms"))
    {
        if (!cJSON_IsNumber(it))
            continue;
        snprintf(name, sizeof name, "step %d%s", g + 1, g < warmup ? " (warm-up)" : "");
        cJSON *args = dg_trace_add(ev, name, g < warmup ? "step,warmup" : "step", ts,
                                   it->valuedouble * 1e3, 2, 1);
        if (args)
            cJSON_AddNumberToObject(args, "ms", it->valuedouble);
        ts += it->valuedouble * 1e3;
        g++;
    }
    composite(ev, step_names, s->step, NSTEP, "phase", 2);
    composite(ev, stage_names, s->stage, NSTAGES, "data", 3);
    return ev;
}

static void add_status(cJSON *rec, dg_ctx *ctx, dg_status st)
{
    cJSON_AddStringToObject(rec, "status", dg_status_name(st));
    dg_json_add_str(rec, "error", st == DG_OK ? NULL : dg_errmsg(ctx));
}

/* The record's phases: the loader's stages per batch and the step's
 * phases (from the unprofiled pass urec, split in s), their shares of the
 * step step_ms. */
static void add_phases(cJSON *rec, const cJSON *urec, double step_ms, const split *s)
{
    cJSON *ph = cJSON_AddObjectToObject(rec, "phases");
    const cJSON *uph = cJSON_GetObjectItem(urec, "phases");
    cJSON_AddNumberToObject(ph, "samples", num(uph, "samples", 0));
    for (size_t i = 0; i < NSTAGES; i++)
        add_phase(ph, stage_names[i], s->stage[i], NAN, step_ms, false);
    /* Phases come from one sampled step while step_ms is a median: under load
     * the sample can outlast the median, so shares are of whichever is larger
     * and never exceed the whole. */
    double in_step = 0;
    for (size_t i = 0; i < NSTEP; i++)
        if (isfinite(s->step[i]))
            in_step += s->step[i];
    double share_base = isfinite(step_ms) && step_ms > in_step ? step_ms : in_step;
    for (size_t i = 0; i < NSTEP; i++)
        add_phase(ph, step_names[i], s->step[i], i == 0 ? s->wait_share : NAN, share_base, true);
    cJSON_AddStringToObject(ph, "source",
                            "unprofiled pass: loader stages per batch (summed over workers, "
                            "overlapped with the step), queue wait per step, device phases from "
                            "events of the last step before each sync point");
    const cJSON *uph_note = cJSON_GetObjectItem(uph, "note");
    if (cJSON_IsString(uph_note))
        cJSON_AddStringToObject(ph, "phases_note", uph_note->valuestring);
    dg_json_add_str(ph, "d2h_note",
                    isfinite(s->step[5]) ? NULL : "not timed on its own: inside sync");
    dg_json_add_str(ph, "sync_note",
                    s->sync_residual ? "residual: step time outside the measured phases (waits "
                                       "at sync points, loss reads, host overhead)"
                                     : NULL);
}

/* The window's ops (moved from the profiled pass prec), sync points, bytes and
 * fallbacks into rec; bb the bytes of one batch upload. The ops' calls. */
static double add_ops(cJSON *rec, cJSON *prec, const cJSON *urec, int warmup, int window, double bb)
{
    cJSON *ops = prec ? cJSON_DetachItemFromObject(prec, "ops") : NULL;
    if (!ops)
        ops = cJSON_CreateArray();
    op_totals ot;
    ops_totals(ops, &ot);
    cJSON_AddItemToObject(rec, "ops", ops);
    cJSON *osum = cJSON_AddObjectToObject(rec, "ops_total");
    cJSON_AddNumberToObject(osum, "calls", ot.calls);
    cJSON_AddItemToObject(osum, "ms", dg_json_metric(ot.ms, prec != NULL, "ms"));
    cJSON_AddNumberToObject(osum, "fallback_calls", ot.fb_calls);
    int reads = window_loss_reads(urec, warmup);
    cJSON *sp = cJSON_AddObjectToObject(rec, "sync_points");
    cJSON_AddNumberToObject(sp, "loss_reads", reads);
    cJSON_AddNumberToObject(sp, "fallbacks", ot.fb_calls);
    cJSON_AddNumberToObject(sp, "total", reads + ot.fb_calls);
    cJSON_AddNumberToObject(sp, "per_step", window ? (reads + ot.fb_calls) / window : 0);
    cJSON *bytes = cJSON_AddObjectToObject(rec, "bytes");
    cJSON_AddItemToObject(bytes, "h2d", dg_json_metric(bb * window + ot.fb_h2d, bb > 0, "bytes"));
    cJSON_AddItemToObject(bytes, "d2h", dg_json_metric(8.0 * reads + ot.fb_d2h, true, "bytes"));
    cJSON_AddItemToObject(bytes, "fallback_h2d", dg_json_metric(ot.fb_h2d, prec != NULL, "bytes"));
    cJSON_AddItemToObject(bytes, "fallback_d2h", dg_json_metric(ot.fb_d2h, prec != NULL, "bytes"));
    cJSON_AddStringToObject(bytes, "source",
                            "the window: batch uploads and loss reads of the loop, plus the "
                            "copies of every cpu fallback");
    cJSON *fb = prec ? cJSON_DetachItemFromObject(prec, "fallbacks") : NULL;
    cJSON_AddItemToObject(rec, "fallbacks", fb ? fb : cJSON_CreateArray());
    return ot.calls;
}

/* The trace file (opts->trace_path) of the two passes, and the record's
 * trace_events; calls the profiled ops. DG_OK when there is none to write. */
static dg_status add_trace(dg_ctx *ctx, cJSON *rec, const dg_profile_opts *opts, const cJSON *prec,
                           const cJSON *urec, const split *s, int warmup, int window, double calls)
{
    const char *backend = opts->train.backend ? opts->train.backend : "cpu";
    int nev = cJSON_GetArraySize(cJSON_GetObjectItem(prec, "trace"));
    cJSON *te = cJSON_AddObjectToObject(rec, "trace_events");
    cJSON_AddNumberToObject(te, "ops", nev);
    cJSON_AddNumberToObject(te, "dropped", calls > nev ? calls - nev : 0);
    dg_status tst = DG_OK;
    if (opts->trace_path && prec) {
        cJSON *ev = trace_events(prec, urec, s, warmup, backend);
        cJSON *meta = cJSON_CreateObject();
        if (meta) {
            cJSON_AddStringToObject(meta, "tool", "devgate " DG_VERSION);
            cJSON_AddStringToObject(meta, "kind", "profile");
            cJSON_AddStringToObject(meta, "timestamp", dg_jstr(rec, "timestamp"));
            cJSON_AddStringToObject(meta, "backend", backend);
            cJSON_AddNumberToObject(meta, "warmup", warmup);
            cJSON_AddNumberToObject(meta, "window", window);
        }
        tst = ev && meta ? dg_trace_write(ctx, opts->trace_path, ev, meta)
                         : dg_fail(ctx, DG_ERR_NOMEM, "profile: out of memory building the trace");
        cJSON_Delete(ev);
        cJSON_Delete(meta);
    }
    return tst;
}

dg_status dg_profile_run(dg_ctx *ctx, const dg_profile_opts *opts, char **json)
{
    *json = NULL;
    if (!opts)
        return dg_fail(ctx, DG_ERR_USAGE, "profile: no options");
    int warmup = opts->warmup ? opts->warmup : WARMUP_DEFAULT;
    int window = opts->window ? opts->window : WINDOW_DEFAULT;
    if (warmup < 0 || window < 0 || warmup > STEPS_MAX || window > STEPS_MAX)
        return dg_fail(ctx, DG_ERR_USAGE, "profile: warm-up and window must be 1..%d steps",
                       STEPS_MAX);
    const dg_train_opts *in = &opts->train;
    if (in->steps || in->epochs > 1)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "profile: --steps and --epochs do not apply (one epoch of warm-up + "
                       "window steps)");
    if (in->val_split > 0 || in->export_dir)
        return dg_fail(ctx, DG_ERR_USAGE, "profile: --val-split and --export do not apply");
    dg_train_opts t = *in;
    t.steps = warmup + window;
    t.epochs = 1;
    /* sync_every 0: the loss is read at the epoch end, i.e. the window end. */

    /* Pass 1, unprofiled: step times and phases. */
    char *ujson = NULL, *pjson = NULL;
    dg_train_ext ux = {.step_times = true, .profile_warmup = warmup};
    dg_status st = dg_train_run_ext(ctx, &t, &ux, &ujson);
    if (!ujson)
        return st;
    cJSON *urec = cJSON_Parse(ujson), *prec = NULL;
    dg_string_free(ujson);
    /* Pass 2, profiled: every op of the window synchronised and timed. */
    if (st == DG_OK && urec) {
        dg_train_ext px = {.step_times = true, .profile_ops = true, .profile_warmup = warmup};
        st = dg_train_run_ext(ctx, &t, &px, &pjson);
        prec = pjson ? cJSON_Parse(pjson) : NULL;
        dg_string_free(pjson);
    }
    if (!urec || (st == DG_OK && !prec)) {
        cJSON_Delete(urec);
        cJSON_Delete(prec);
        return dg_fail(ctx, DG_ERR_NOMEM, "profile: out of memory reading the training records");
    }

    cJSON *rec = cJSON_CreateObject();
    dg_record_head(rec, "profile", 1);
    double bb = batch_bytes(urec); /* before the spec moves over */
    cJSON *spec = cJSON_DetachItemFromObject(urec, "spec");
    cJSON_AddItemToObject(rec, "spec", spec ? spec : cJSON_CreateObject());
    cJSON *w = cJSON_AddObjectToObject(rec, "window");
    cJSON_AddNumberToObject(w, "warmup", warmup);
    cJSON_AddNumberToObject(w, "steps", window);
    cJSON *dev = cJSON_DetachItemFromObject(urec, "device");
    if (dev)
        cJSON_AddItemToObject(rec, "device", dev);
    cJSON *cap = cJSON_DetachItemFromObject(urec, "capture");
    if (cap)
        cJSON_AddItemToObject(rec, "capture", cap);

    /* Step time: unprofiled (the truth) and profiled (the cost of profiling). */
    dg_stats us, ps;
    window_stats(urec, warmup, &us);
    window_stats(prec, warmup, &ps);
    double step_ms =
        us.n ? us.median : dg_json_metric_at(cJSON_GetObjectItem(urec, "throughput"), "step_ms");
    cJSON *sj = cJSON_AddObjectToObject(rec, "step");
    cJSON_AddItemToObject(sj, "ms", dg_json_metric(step_ms, isfinite(step_ms), "ms"));
    cJSON_AddItemToObject(sj, "profiled_ms", dg_json_metric(ps.median, ps.n > 0, "ms"));
    cJSON_AddItemToObject(sj, "stats", dg_stats_json(&us, "ms"));

    split s;
    phase_split(urec, step_ms, &s);
    cJSON_AddItemToObject(sj, "mean_ms", dg_json_metric(s.mean_ms, isfinite(s.mean_ms), "ms"));
    add_phases(rec, urec, step_ms, &s);

    /* Ops, sync points and bytes (the window of the profiled pass). */
    double calls = add_ops(rec, prec, urec, warmup, window, bb);

    /* The trace file. */
    dg_status tst = add_trace(ctx, rec, opts, prec, urec, &s, warmup, window, calls);
    dg_json_add_str(rec, "trace",
                    opts->trace_path && prec && tst == DG_OK ? opts->trace_path : NULL);
    if (st == DG_OK)
        st = tst;
    add_status(rec, ctx, st);
    cJSON_AddStringToObject(
        rec, "note",
        "two passes of the same spec and seed: the op table comes from a profiled pass that "
        "synchronises before and after every op, so each op is timed in isolation (no overlap, "
        "launch and sync latency included) and that pass runs slower (step.profiled_ms); the step "
        "time and the phases come from the unprofiled pass. Loader stages run in worker threads "
        "beside the step: only queue_wait is on the step's path.");
    cJSON_Delete(urec);
    cJSON_Delete(prec);
    *json = dg_json_print(rec);
    cJSON_Delete(rec);
    if (!*json)
        return dg_fail(ctx, DG_ERR_NOMEM, "profile: out of memory printing the record");
    return st;
}
