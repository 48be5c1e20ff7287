/* Compare (method step 5 and the numerics threshold), the fixture's part: for
 * each batch size the numerics pair (compare_numerics.c: cpu, the device and
 * a float64 training run on the same weights and batches, the loss read at
 * every step), then the timed cpu/device pairs through the one pair driver
 * (method_compare.c) over this file's `pair`; the numerics, FLOP rates and
 * the fixture's section members are added to what the driver made. */
#include "core/record.h"
#include "engine/model.h"
#include "engine/train.h"
#include "env/peak.h"
#include "measure/measure.h"
#include "steps/compare_int.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Median host step time after warm-up (the per-step times), else the mean. */
static double step_ms(const cJSON *rec)
{
    double v = dg_json_metric_at(cJSON_GetObjectItem(cJSON_GetObjectItem(rec, "steps"), "stats"),
                                 "median");
    return isfinite(v) ? v : dg_json_metric_at(cJSON_GetObjectItem(rec, "throughput"), "step_ms");
}

/* Device time of forward+backward+update (or the captured step) over the wall
 * step time, capped at 1; NAN when the backend has no events. */
static double busy_fraction(const cJSON *rec, double wall_ms)
{
    const cJSON *ph = cJSON_GetObjectItem(rec, "phases");
    const cJSON *n = cJSON_GetObjectItem(ph, "samples");
    if (!cJSON_IsNumber(n) || n->valuedouble <= 0 || !(wall_ms > 0))
        return NAN;
    double busy = dg_json_metric_at(ph, "forward");
    if (!cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(rec, "capture"), "used")))
        busy += dg_json_metric_at(ph, "backward") + dg_json_metric_at(ph, "update");
    /* Both are medians of separate series, so the ratio can pass 1 by noise. */
    return isfinite(busy) ? fmin(busy / wall_ms, 1.0) : NAN;
}

/* Each side's GFLOP/s against its FP32 peak into cj and dj, from the median
 * step times cms and dms (NAN: not timed) and the device's record. */
static void add_peaks(cJSON *cj, cJSON *dj, const cmp_cfg *c, int batch, double cms, double dms,
                      const cJSON *dev_rec)
{
    /* What each side did of what it could: the step's FLOPs (forward and
     * backward, 2 per multiply-add) over its median step time, against its
     * FP32 peak (the cpu's for the threads the run used). */
    double flops = dg_ref64_step_flops(c->m, batch);
    const char *src = NULL;
    double cpu_peak = dg_device_peak_gflops(
        "cpu", NULL, 0, dg_cpu_threads_resolve(c->opts->train.threads, NULL), &src);
    double dev_peak = dg_device_peak_gflops(c->device, dg_jstr(dev_rec, "device.name"), 0, 0, &src);
    double cg = flops / (cms / 1e3) / 1e9, dg = flops / (dms / 1e3) / 1e9;
    cJSON_AddItemToObject(cj, "gflops", dg_json_metric(cg, isfinite(cg), "GFLOP/s"));
    cJSON_AddItemToObject(cj, "peak_gflops",
                          dg_json_metric(cpu_peak, isfinite(cpu_peak), "GFLOP/s"));
    cJSON_AddItemToObject(cj, "fraction_of_peak",
                          dg_json_metric(cg / cpu_peak, isfinite(cg / cpu_peak), "fraction"));
    cJSON_AddItemToObject(dj, "gflops", dg_json_metric(dg, isfinite(dg), "GFLOP/s"));
    cJSON_AddItemToObject(dj, "peak_gflops",
                          dg_json_metric(dev_peak, isfinite(dev_peak), "GFLOP/s"));
    cJSON_AddStringToObject(dj, "peak_source", src);
    cJSON_AddItemToObject(dj, "fraction_of_peak",
                          dg_json_metric(dg / dev_peak, isfinite(dg / dev_peak), "fraction"));
}

/* A float rate as the shortest decimal that reads back to it (0.01, not 0.0099999998). */
static double rate(float f)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", f);
    double d = strtod(buf, NULL);
    return (float)d == f ? d : f;
}

static cJSON *spec_json(const cmp_cfg *c, const int *batches, int nb)
{
    const dg_train_opts *o = &c->opts->train;
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "model", o->model ? o->model : "mlp");
    cJSON_AddStringToObject(s, "baseline", "cpu");
    cJSON_AddStringToObject(s, "backend", c->device);
    cJSON_AddNumberToObject(s, "device", o->device);
    cJSON *b = cJSON_AddArrayToObject(s, "batches");
    for (int i = 0; i < nb; i++)
        cJSON_AddItemToArray(b, cJSON_CreateNumber(batches[i]));
    cJSON_AddNumberToObject(s, "steps", c->steps);
    cJSON_AddNumberToObject(s, "repetitions", c->reps);
    cJSON_AddNumberToObject(s, "seed", (double)o->seed);
    cJSON_AddNumberToObject(s, "sync_every", 1);
    cJSON_AddNumberToObject(s, "lr", rate(c->lr));
    cJSON_AddNumberToObject(s, "momentum", rate(c->momentum));
    cJSON_AddNumberToObject(s, "weight_decay", rate(c->wd));
    cJSON_AddNumberToObject(s, "threads", o->threads);
    /* What the cpu backend's pool ran on (--threads, else OMP_NUM_THREADS,
     * else the usable cores): cpu-baseline-unfair judges this one. */
    const char *tsrc = NULL;
    cJSON_AddNumberToObject(s, "threads_used", dg_cpu_threads_resolve(o->threads, &tsrc));
    cJSON_AddStringToObject(s, "threads_source", tsrc);
    dg_json_add_str(s, "disable_ops", o->disable_ops);
    cJSON_AddBoolToObject(s, "capture", !o->no_capture);
    cJSON_AddStringToObject(s, "data", o->data ? o->data : "synthetic");
    cJSON_AddNumberToObject(s, "workers", dg_train_workers(o->workers));
    dg_json_add_str(s, "augment", o->augment);
    dg_json_add_str(s, "normalize", o->normalize);
    return s;
}

/* A RUN that failed (docs/schema/measure.md "compare"): the side, the status
 * and the message. */
static cJSON *failed_run(int batch, dg_status st, const char *side, const char *error)
{
    cJSON *run = cJSON_CreateObject();
    cJSON_AddNumberToObject(run, "batch", batch);
    cJSON_AddStringToObject(run, "status", dg_status_name(st));
    cJSON_AddStringToObject(run, "failed", side ? side : "compare");
    dg_json_add_str(run, "error", error);
    cJSON_AddBoolToObject(run, "within_tolerance", false);
    return run;
}

/* Test hook for the method-contract tests (tests/unit/test_method.c,
 * tests/cli/test_method_contract.sh): DEVGATE_PAIR_PLAN="CPU_MS:DEVICE_MS"
 * makes a timed side train nothing and give the train record of steps of
 * CPU_MS on the cpu and DEVICE_MS on the device, as
 * tests/python/scripts/sweep_train.py plans them for the command runner
 * (--cpu-ms, --base-ms). NULL when the hook is not set. */
static cJSON *planted_side(const char *device, int steps)
{
    const char *plan = getenv("DEVGATE_PAIR_PLAN");
    double cpu_ms, dev_ms;
    if (!plan || sscanf(plan, "%lf:%lf", &cpu_ms, &dev_ms) != 2 || !(cpu_ms > 0) || !(dev_ms > 0))
        return NULL;
    double ms = strcmp(device, "cpu") == 0 ? cpu_ms : dev_ms;
    cJSON *rec = cJSON_CreateObject();
    cJSON *st = cJSON_AddObjectToObject(rec, "steps");
    cJSON *all = cJSON_AddArrayToObject(st, "ms");
    for (int i = 0; i < steps; i++)
        cJSON_AddItemToArray(all, cJSON_CreateNumber(ms));
    cJSON_AddNumberToObject(st, "warmup", 0);
    cJSON_AddItemToObject(cJSON_AddObjectToObject(st, "stats"), "median",
                          dg_json_metric(ms, true, "ms"));
    return rec;
}

dg_status dg_fixture_compare_pair(void *ctx, int batch, const char *device, dg_pair_side *out)
{
    dg_fixture_compare *fc = ctx;
    cJSON *rec = planted_side(device, fc->c.steps);
    dg_status st = rec ? DG_OK
                       : dg_compare_train_once(fc->ctx, &fc->c.opts->train, device, batch,
                                               fc->c.steps, NULL, NULL, &rec);
    if (st != DG_OK) {
        out->end = st == DG_ERR_INTERRUPTED  ? DG_TRIAL_INTERRUPTED
                   : st == DG_ERR_DEVICE_OOM ? DG_TRIAL_OOM
                                             : DG_TRIAL_FAILED;
        snprintf(out->reason, sizeof out->reason, "%s", dg_errmsg(fc->ctx));
        fc->pair_st = st;
        cJSON_Delete(rec);
        return st == DG_ERR_NOMEM ? DG_ERR_NOMEM : DG_OK;
    }
    /* The median host step after the run's warm-up, the device's busy share of it. */
    double med = step_ms(rec), busy = busy_fraction(rec, med);
    out->end = DG_TRIAL_OK;
    out->step_ms = (dg_metric){med > 0 ? med : 0, med > 0};
    out->sps = (dg_metric){med > 0 ? batch * 1e3 / med : 0, med > 0};
    out->busy = (dg_metric){isfinite(busy) ? busy : 0, isfinite(busy)};
    const cJSON *steps = cJSON_GetObjectItem(rec, "steps");
    const cJSON *ms = cJSON_GetObjectItem(steps, "ms");
    out->extra = cJSON_CreateObject();
    cJSON_AddItemToObject(out->extra, "ms", ms ? cJSON_Duplicate(ms, true) : cJSON_CreateArray());
    cJSON_AddNumberToObject(out->extra, "warmup", dg_jnum(steps, "warmup"));
    /* The cpu side's team: the threads it really had, the cores others took. */
    cJSON *team = strcmp(device, "cpu") == 0 ? cJSON_GetObjectItem(rec, "cpu_team") : NULL;
    if (team)
        cJSON_AddItemToObject(out->extra, "cpu_team", cJSON_Duplicate(team, true));
    cJSON_Delete(rec);
    return DG_OK;
}

/* Moves what the numerics pair found at run's batch into run (its verdict
 * and note replace the driver's), and the sides' FLOP rates against their
 * peaks; false when the device drifted beyond tolerance. */
static bool merge_numerics(dg_fixture_compare *fc, cJSON *run)
{
    int batch = (int)dg_jnum(run, "batch");
    cJSON *num = NULL;
    for (int i = 0; i < fc->nnum && !num; i++)
        if (fc->batch[i] == batch && fc->num[i]) {
            num = fc->num[i];
            fc->num[i] = NULL;
        }
    if (!num)
        return false;
    cJSON_DeleteItemFromObjectCaseSensitive(run, "verdict");
    cJSON_DeleteItemFromObjectCaseSensitive(run, "note");
    cJSON *cj = cJSON_GetObjectItem(run, "cpu"), *dj = cJSON_GetObjectItem(run, "device");
    cJSON *nd = cJSON_DetachItemFromObjectCaseSensitive(num, "device");
    while (dj && nd && nd->child) {
        cJSON *m = cJSON_DetachItemViaPointer(nd, nd->child);
        cJSON_AddItemToObject(dj, m->string, m);
    }
    cJSON_Delete(nd);
    add_peaks(cj, dj, &fc->c, batch, dg_jnum(cj, "step_ms"), dg_jnum(dj, "step_ms"), fc->dev_rec);
    while (num->child) {
        cJSON *m = cJSON_DetachItemViaPointer(num, num->child);
        cJSON_AddItemToObject(run, m->string, m);
    }
    cJSON_Delete(num);
    return cJSON_IsTrue(cJSON_GetObjectItem(run, "within_tolerance"));
}

/* Each RUN of a section: the numerics merged in (a failed one's status the
 * failing run's); fc->all_ok false when one failed or drifted. */
static void merge_runs(dg_fixture_compare *fc, cJSON *sec)
{
    cJSON *run;
    cJSON_ArrayForEach(run, cJSON_GetObjectItem(sec, "runs"))
    {
        if (cJSON_GetObjectItem(run, "failed")) {
            if (fc->pair_st != DG_OK)
                cJSON_ReplaceItemInObjectCaseSensitive(
                    run, "status", cJSON_CreateString(dg_status_name(fc->pair_st)));
            fc->all_ok = false;
        } else if (!merge_numerics(fc, run)) {
            fc->all_ok = false;
        }
    }
}

/* The fixture's members of a comparison's section: its spec's members where
 * absent, the model, the device, the thresholds and within_tolerance. */
static void section_members(dg_fixture_compare *fc, cJSON *sec, const int *batches, int nb)
{
    cJSON *spec = cJSON_GetObjectItem(sec, "spec");
    cJSON *all = spec_json(&fc->c, batches, nb);
    while (spec && all && all->child) {
        cJSON *m = cJSON_DetachItemViaPointer(all, all->child);
        if (cJSON_GetObjectItemCaseSensitive(spec, m->string))
            cJSON_Delete(m);
        else
            cJSON_AddItemToObject(spec, m->string, m);
    }
    cJSON_Delete(all);
    cJSON_AddItemToObject(sec, "model", dg_model_json(fc->m));
    cJSON *dj = cJSON_GetObjectItem(fc->dev_rec, "device");
    cJSON_AddItemToObject(sec, "device", dj ? cJSON_Duplicate(dj, true) : cJSON_CreateObject());
    cJSON *th = cJSON_AddObjectToObject(sec, "thresholds");
    cJSON_AddNumberToObject(th, "loss_tolerance", fc->c.loss_tol);
    cJSON_AddNumberToObject(th, "param_tolerance", fc->c.param_tol);
    cJSON_AddNumberToObject(th, "reference_max_gflop_per_step", REF_MAX_GFLOP);
    cJSON_AddStringToObject(th, "loss", "max over steps of |loss - baseline| / |baseline|");
    cJSON_AddStringToObject(th, "params",
                            "||params - baseline||2 / ||baseline||2 after the last step");
    const char *status = dg_jstr(sec, "status");
    cJSON_AddBoolToObject(sec, "within_tolerance",
                          fc->all_ok && status && strcmp(status, "ok") == 0);
}

void dg_fixture_compare_done(void *ctx, dg_step_out *out)
{
    dg_fixture_compare *fc = ctx;
    merge_runs(fc, out->section);
    const cJSON *run = cJSON_GetArrayItem(dg_jpath(out->section, "runs"), 0);
    int batch = (int)dg_jnum(run, "batch");
    section_members(fc, out->section, &batch, 1);
    const char *verdict = dg_jstr(run, "verdict");
    size_t n = strlen(out->summary);
    if (verdict && n && n < sizeof out->summary)
        snprintf(out->summary + n, sizeof out->summary - n, ", %s", verdict);
}

dg_status dg_fixture_compare_numerics(dg_fixture_compare *fc, int batch, dg_compare_plan *plan,
                                      dg_step_out *out)
{
    dg_status st = dg_compare_numerics_pair(fc, batch);
    if (st == DG_OK) {
        *plan = (dg_compare_plan){.batch = batch,
                                  .steps = fc->c.steps,
                                  .min_pairs = fc->c.reps,
                                  .max_pairs = fc->c.reps,
                                  .warmup_pairs = 1,
                                  .busy_source = "device time of forward, backward and update (or "
                                                 "the captured step) over the host step time"};
        return DG_OK;
    }
    /* The section of a comparison that ended in its numerics pair. */
    *plan = (dg_compare_plan){.batch = batch, .steps = fc->c.steps};
    cJSON *sec = dg_record_new("compare", 1);
    if (!sec)
        return st;
    cJSON_AddStringToObject(sec, "source", "fixture");
    cJSON_AddStringToObject(sec, "status", dg_status_name(st));
    dg_json_add_str(sec, "error", dg_errmsg(fc->ctx));
    cJSON_AddObjectToObject(sec, "spec");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(sec, "runs"),
                         failed_run(batch, st, fc->failed, dg_errmsg(fc->ctx)));
    fc->all_ok = false;
    section_members(fc, sec, &batch, 1);
    out->section = sec;
    snprintf(out->error, sizeof out->error, "%s", dg_errmsg(fc->ctx));
    return st;
}

void dg_fixture_compare_free(dg_fixture_compare *fc)
{
    if (!fc)
        return;
    for (int i = 0; i < fc->nnum; i++)
        cJSON_Delete(fc->num[i]);
    cJSON_Delete(fc->dev_rec);
    if (fc->tmp)
        rmdir(fc->tmp);
    dg_free(fc->tmp);
    dg_free(fc->m);
    dg_free(fc);
}

/* The timed sides of the fixture, for the pair driver. */
static const dg_runner_i fixture_pairs = {.version = DG_RUNNER_VERSION,
                                          .name = "fixture",
                                          .pair = dg_fixture_compare_pair,
                                          .compare_done = dg_fixture_compare_done};

/* One batch of `devgate compare`: the numerics pair, then the timed pairs
 * through the pair driver; its RUN appended to runs. */
static dg_status compare_batch(dg_fixture_compare *fc, int batch, cJSON *runs)
{
    dg_compare_plan plan;
    dg_step_out out = {0};
    dg_status st = dg_fixture_compare_numerics(fc, batch, &plan, &out);
    if (st == DG_OK)
        st = dg_method_compare(fc->ctx, &fixture_pairs, fc, fc->c.device, &plan,
                               fc->c.opts->train.cancel, &out);
    cJSON *run =
        cJSON_DetachItemViaPointer(cJSON_GetObjectItem(out.section, "runs"),
                                   cJSON_GetArrayItem(cJSON_GetObjectItem(out.section, "runs"), 0));
    if (run)
        cJSON_AddItemToArray(runs, run);
    cJSON_Delete(out.section);
    if (st == DG_ERR_CHECK && fc->pair_st != DG_OK)
        st = dg_fail(fc->ctx, fc->pair_st, "%s", out.error);
    else if (st == DG_ERR_NOMEM || (st == DG_OK && !run))
        st = dg_fail(fc->ctx, DG_ERR_NOMEM, "compare: out of host memory");
    return st;
}

dg_status dg_fixture_compare_open(dg_ctx *ctx, const dg_compare_opts *opts,
                                  dg_fixture_compare **out)
{
    *out = NULL;
    const dg_train_opts *o = &opts->train;
    const char *device = o->backend ? o->backend : "cpu";
    if (strcmp(device, "cpu") == 0)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "compare: --backend names the device to hold against the cpu "
                       "baseline (opencl, cuda); cpu cannot be compared with itself");
    if (dg_train_opts_inputs_check(ctx, o, NULL) != DG_OK)
        return DG_ERR_USAGE; /* before the cpu side runs */
    if (o->export_dir)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "compare: --export is not available here (compare exports "
                       "the batches for its float64 reference itself)");
    cmp_cfg c = {.opts = opts, .device = device};
    c.steps = opts->steps ? opts->steps : o->steps ? o->steps : 20;
    c.reps = opts->repetitions ? opts->repetitions : 5;
    if (c.reps < 1 || c.reps > DG_COMPARE_MAX_PAIRS)
        return dg_fail(ctx, DG_ERR_USAGE, "compare: repetitions must be in 1..%d, got %d",
                       DG_COMPARE_MAX_PAIRS, c.reps);
    c.loss_tol = opts->loss_tolerance ? opts->loss_tolerance : 1e-3;
    c.param_tol = opts->param_tolerance ? opts->param_tolerance : 1e-3;
    /* The rates as float, exactly as the fp32 runs use them. */
    c.lr = o->lr >= 0 ? o->lr : 0.01f;
    c.momentum = o->momentum >= 0 ? o->momentum : 0.9f;
    c.wd = o->weight_decay >= 0 ? o->weight_decay : 0.0f;
    if (c.steps < 1 || c.steps > 100000)
        return dg_fail(ctx, DG_ERR_USAGE, "compare: steps must be in 1..100000, got %d", c.steps);
    if (!(c.loss_tol > 0) || !isfinite(c.loss_tol) || !(c.param_tol > 0) || !isfinite(c.param_tol))
        return dg_fail(ctx, DG_ERR_USAGE, "compare: tolerances must be positive and finite");
    if (!isfinite(c.lr) || !isfinite(c.momentum) || !isfinite(c.wd))
        return dg_fail(ctx, DG_ERR_USAGE, "compare: rates must be finite");
    dg_fixture_compare *fc = dg_calloc(1, sizeof *fc);
    dg_model *m = dg_malloc(sizeof *m);
    if (!fc || !m) {
        dg_free(fc);
        dg_free(m);
        return dg_fail(ctx, DG_ERR_NOMEM, "compare: out of host memory");
    }
    *fc = (dg_fixture_compare){.ctx = ctx, .c = c, .m = m, .all_ok = true};
    dg_status st = dg_model_parse(ctx, o->model ? o->model : "mlp", o->in_c, o->in_h, o->in_w, m);
    const char *tmpdir = getenv("TMPDIR");
    fc->tmp = st == DG_OK
                  ? dg_asprintf("%s/devgate-compare-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp")
                  : NULL;
    if (st == DG_OK && (!fc->tmp || !mkdtemp(fc->tmp))) {
        st = dg_fail(ctx, DG_ERR_IO, "compare: cannot create a temporary folder under %s: %s",
                     tmpdir && *tmpdir ? tmpdir : "/tmp",
                     fc->tmp ? strerror(errno) : "out of memory");
        dg_free(fc->tmp);
        fc->tmp = NULL;
    }
    fc->c.m = m;
    fc->c.tmp = fc->tmp;
    if (st != DG_OK) {
        dg_fixture_compare_free(fc);
        return st;
    }
    *out = fc;
    return DG_OK;
}

dg_status dg_compare_run(dg_ctx *ctx, const dg_compare_opts *opts, char **json)
{
    *json = NULL;
    int batches[MAX_RUNS], nb = 0;
    for (int i = 0; i < MAX_RUNS && opts->batches[i]; i++) {
        if (opts->batches[i] < 1 || opts->batches[i] > (1 << 20))
            return dg_fail(ctx, DG_ERR_USAGE, "compare: batch sizes must be in 1..%d, got %d",
                           1 << 20, opts->batches[i]);
        batches[nb++] = opts->batches[i];
    }
    if (!nb && opts->train.batch > 0)
        batches[nb++] = opts->train.batch;
    if (!nb) {
        batches[nb++] = 32;
        batches[nb++] = 128;
        batches[nb++] = 512;
    }
    dg_fixture_compare *fc = NULL;
    dg_status st = dg_fixture_compare_open(ctx, opts, &fc);
    if (st != DG_OK)
        return st;
    cJSON *runs = cJSON_CreateArray();
    for (int i = 0; i < nb && st == DG_OK; i++) {
        st = compare_batch(fc, batches[i], runs);
        /* An unavailable device ends the comparison before it has a record. */
        if (st == DG_ERR_UNAVAILABLE && i == 0)
            break;
    }
    if (st == DG_ERR_UNAVAILABLE && cJSON_GetArraySize(runs) <= 1) {
        cJSON_Delete(runs);
        dg_fixture_compare_free(fc);
        return st;
    }
    cJSON *rec = dg_record_new("compare", 1);
    cJSON_AddStringToObject(rec, "status", dg_status_name(st));
    dg_json_add_str(rec, "error", st == DG_OK ? NULL : dg_errmsg(ctx));
    cJSON_AddItemToObject(rec, "spec", cJSON_CreateObject());
    cJSON_AddItemToObject(rec, "runs", runs);
    section_members(fc, rec, batches, nb);
    *json = dg_json_print(rec);
    cJSON_Delete(rec);
    dg_fixture_compare_free(fc);
    if (!*json)
        return dg_fail(ctx, DG_ERR_NOMEM, "compare: out of memory printing the record");
    return st;
}
