/* Compare (method step 5 and the numerics threshold): for each batch size the
 * same spec and seed train on the cpu baseline and on the device with the loss
 * read at every step, and both are held against a float64 training run on the
 * same weights and batches: step-time medians, speedup, device busy fraction,
 * loss and parameter drift, and a verdict per batch. */
#include "analysis/speed.h"
#include "core/record.h"
#include "engine/model.h"
#include "engine/train.h"
#include "env/peak.h"
#include "measure/measure.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REF_MAX_GFLOP 2.0     /* the float64 run is skipped above this per step */
#define REF_MAX_BATCH_MIB 256 /* train --export keeps at most this much batch data */
#define MAX_RUNS 4
#define MAX_REPS 50         /* timed repetitions per side */
#define LOCK_MAX_WAIT_S 600 /* then a repetition runs unlocked, and says so */

/* Batches of an export read back in order (train --export's batches.bin). */
typedef struct batch_file {
    FILE *f;
    size_t xfloats;
    int n;
} batch_file;

static dg_status read_batch(void *user, int step, float *x, int32_t *labels)
{
    batch_file *b = user;
    if (fread(x, sizeof(float), b->xfloats, b->f) != b->xfloats ||
        fread(labels, sizeof(int32_t), (size_t)b->n, b->f) != (size_t)b->n)
        return DG_ERR_IO;
    return DG_OK;
}

/* The float32 arena in path as doubles (count values); NULL on failure. */
static double *read_arena(const char *path, size_t count)
{
    float *f = dg_malloc(count * sizeof(float));
    double *d = dg_malloc(count * sizeof(double));
    FILE *fp = fopen(path, "rb");
    bool ok = f && d && fp && fread(f, sizeof(float), count, fp) == count;
    if (fp)
        fclose(fp);
    for (size_t i = 0; ok && i < count; i++)
        d[i] = f[i];
    dg_free(f);
    if (!ok) {
        dg_free(d);
        return NULL;
    }
    return d;
}

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

/* The per-step losses of a record with sync_every 1 (NAN where non-finite);
 * false unless there is one per step. */
static bool losses_of(const cJSON *rec, int steps, double *out)
{
    const cJSON *arr = cJSON_GetObjectItem(rec, "loss"), *pt;
    int i = 0;
    cJSON_ArrayForEach(pt, arr)
    {
        if (i >= steps)
            return false;
        const cJSON *l = cJSON_GetObjectItem(pt, "loss");
        out[i++] = cJSON_IsNumber(l) ? l->valuedouble : NAN;
    }
    return i == steps;
}

/* Largest |a - b| / |b| over the steps; INFINITY when a value is not finite. */
static double max_rel(const double *a, const double *b, int n)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]) / fmax(fabs(b[i]), 1e-12);
        if (!isfinite(d))
            return INFINITY;
        worst = fmax(worst, d);
    }
    return worst;
}

/* ||a - b|| / ||b|| (L2); INFINITY when not finite. */
static double rel_l2(const double *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    double r = den > 0 ? sqrt(num / den) : sqrt(num);
    return isfinite(r) ? r : INFINITY;
}

static cJSON *rel_metric(double v, bool valid)
{
    return dg_json_metric(v, valid && isfinite(v), "relative");
}

static cJSON *loss_array(const double *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, isfinite(v[i]) ? cJSON_CreateNumber(v[i]) : cJSON_CreateNull());
    return a;
}

/* One training run of the comparison: sync every step, step times on, the
 * final parameters to params_path, the batches exported to export_dir (NULL:
 * none). *rec gets the parsed record (NULL when there is none). */
static dg_status train_once(dg_ctx *ctx, const dg_train_opts *base, const char *backend, int batch,
                            int steps, const char *export_dir, const char *params_path, cJSON **rec)
{
    dg_train_opts o = *base;
    o.backend = backend;
    o.batch = batch;
    o.steps = steps;
    o.epochs = 1;
    o.sync_every = 1;
    o.export_dir = export_dir;
    if (strcmp(backend, "cpu") == 0)
        o.math = DG_MATH_FP32; /* the baseline stays exact fp32 (cpu has no TF32 or bf16 mode) */
    dg_train_ext x = {.step_times = true, .params_out = params_path};
    char *json = NULL;
    dg_status st = dg_train_run_ext(ctx, &o, &x, &json);
    *rec = json ? cJSON_Parse(json) : NULL;
    dg_string_free(json);
    if (st == DG_OK && !*rec)
        st = dg_fail(ctx, DG_ERR_NOMEM, "compare: out of memory reading the %s record", backend);
    return st;
}

static void remove_export(const char *dir)
{
    static const char *const files[] = {"params.f32", "batches.bin", "manifest.json"};
    char path[4200];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

typedef struct cmp_cfg {
    const dg_compare_opts *opts;
    const char *device;
    int steps, reps;
    double loss_tol, param_tol;
    float lr, momentum, wd;
    const dg_model *m;
    const char *tmp; /* private temp folder */
} cmp_cfg;

/* Adds name to the drift list when v exceeds tol (or is not finite). */
static bool within(double v, double tol, const char *name, cJSON *drift)
{
    if (v <= tol)
        return true;
    cJSON_AddItemToArray(drift, cJSON_CreateString(name));
    return false;
}

/* The timed repetitions of one side: each one's median step time after the
 * run's warm-up, its busy fraction and its raw step times. */
typedef struct side_reps {
    double med[MAX_REPS], busy[MAX_REPS];
    int n;
    cJSON *raw; /* [{ms: [..], warmup, median: METRIC(ms), busy_fraction}] */
} side_reps;

static void keep_rep(side_reps *s, const cJSON *rec, cJSON *window, cJSON *lock)
{
    double med = step_ms(rec);
    double busy = busy_fraction(rec, med);
    const cJSON *steps = cJSON_GetObjectItem(rec, "steps");
    cJSON *r = cJSON_CreateObject();
    const cJSON *ms = cJSON_GetObjectItem(steps, "ms");
    cJSON_AddItemToObject(r, "ms", ms ? cJSON_Duplicate(ms, true) : cJSON_CreateArray());
    cJSON_AddNumberToObject(r, "warmup", dg_jnum(steps, "warmup"));
    cJSON_AddItemToObject(r, "median", dg_json_metric(med, med > 0, "ms"));
    cJSON_AddItemToObject(r, "busy_fraction", dg_json_metric(busy, isfinite(busy), "fraction"));
    cJSON_AddItemToObject(r, "window", window);
    cJSON_AddItemToObject(r, "lock", lock);
    cJSON_AddItemToArray(s->raw, r);
    if (med > 0 && s->n < MAX_REPS) {
        s->med[s->n] = med;
        s->busy[s->n] = busy;
        s->n++;
    }
}

/* The speedup's interval over the repetitions so far (device over cpu). */
static void speedup_ci(const cmp_cfg *c, int batch, const side_reps *cpu, const side_reps *dev,
                       dg_median_ci *ci)
{
    uint64_t seed = DG_BOOTSTRAP_SEED ^ ((uint64_t)c->opts->train.seed << 20) ^ (uint64_t)batch;
    dg_bootstrap_median_ci(cpu->med, (size_t)cpu->n, dev->med, (size_t)dev->n, 0, 0.95, seed, ci);
}

/* After the numerics pair (the warm-up repetition, not timed: it exports the
 * batches and compiles the device's kernels), c->reps timed repetitions per
 * side, interleaved cpu, device, cpu, device, ... so drift and other load fall
 * on both sides alike; fewer when the speedup is decisive before the plan
 * ends (dg_speed_decisive: a device 50x the cpu needs no fifth cpu run at a
 * large batch to say so). *decisive says whether it stopped so. */
static dg_status timed_reps(dg_ctx *ctx, const cmp_cfg *c, int batch, side_reps *cpu,
                            side_reps *dev, cJSON *order, const char **failed, double *lock_wait,
                            bool *decisive)
{
    *decisive = false;
    for (int r = 0; r < c->reps && !*decisive; r++) {
        for (int side = 0; side < 2; side++) {
            const char *be = side ? c->device : "cpu";
            cJSON *rec = NULL;
            if (c->opts->train.cancel && *c->opts->train.cancel)
                return dg_fail(ctx, DG_ERR_INTERRUPTED, "compare: interrupted");
            /* Each timed run holds the machine's measurement lock and records
             * what else ran while it did. */
            dg_mlock lk;
            dg_measure_lock(&lk, LOCK_MAX_WAIT_S, c->opts->train.cancel);
            dg_window *w = dg_window_begin();
            dg_status st = train_once(ctx, &c->opts->train, be, batch, c->steps, NULL, NULL, &rec);
            cJSON *wj = dg_window_end(w);
            dg_window_free(w);
            dg_measure_unlock(&lk);
            *lock_wait += lk.waited_s;
            if (st != DG_OK) {
                cJSON_Delete(rec);
                cJSON_Delete(wj);
                *failed = be;
                return st;
            }
            keep_rep(side ? dev : cpu, rec, wj, dg_measure_lock_json(&lk));
            cJSON_AddItemToArray(order, cJSON_CreateString(side ? "device" : "cpu"));
            cJSON_Delete(rec);
        }
        if (r + 1 < c->reps && r + 1 >= DG_SPEED_DECISIVE_MIN) {
            dg_median_ci ci;
            speedup_ci(c, batch, cpu, dev, &ci);
            *decisive =
                ci.valid && dg_speed_decisive(ci.lo, ci.hi, (size_t)cpu->n, (size_t)dev->n, NULL);
        }
    }
    return DG_OK;
}

/* {lo, hi: METRIC(unit), level, resamples, method} of an interval; map (may be
 * NULL) turns a speedup bound into another figure's (monotone increasing). */
static cJSON *ci_json(const dg_median_ci *ci, const char *unit, double (*map)(double),
                      const char *method)
{
    cJSON *o = cJSON_CreateObject();
    double lo = ci->lo, hi = ci->hi;
    if (map) {
        lo = map(lo);
        hi = map(hi);
    }
    cJSON_AddItemToObject(o, "lo", dg_json_metric(lo, ci->valid && isfinite(lo), unit));
    cJSON_AddItemToObject(o, "hi", dg_json_metric(hi, ci->valid && isfinite(hi), unit));
    cJSON_AddNumberToObject(o, "level", ci->level);
    cJSON_AddNumberToObject(o, "resamples", (double)ci->resamples);
    cJSON_AddStringToObject(o, "method", method);
    return o;
}

static double reduction_pct(double speedup)
{
    return 100 * (1 - 1 / speedup);
}

/* The speedup (the ratio of the two sides' medians) with its interval and
 * verdict, the time per sample saved, the device's busy fraction and the
 * Mann-Whitney test (p, u) into run; timed: both sides have a median step. */
static void add_speedup(cJSON *run, const dg_median_ci *sp_ci, const dg_median_ci *busy_ci,
                        bool timed, int ncpu, int ndev, double p, double u)
{
    bool spv = timed && sp_ci->valid;
    static const char method[] = "percentile bootstrap over the repetitions' median step times";
    cJSON_AddItemToObject(run, "speedup", dg_json_metric(spv ? sp_ci->point : 0, spv, "x"));
    cJSON_AddItemToObject(run, "speedup_ci", ci_json(sp_ci, "x", NULL, method));
    /* The verdict on that interval, as compare RUN_A RUN_B words it. */
    dg_speed_judgement sj;
    dg_speed_judge(sp_ci->valid ? sp_ci->lo : NAN, sp_ci->valid ? sp_ci->hi : NAN, (size_t)ncpu,
                   (size_t)ndev, 2, NULL, &sj);
    cJSON *sv = cJSON_AddObjectToObject(run, "speed");
    cJSON_AddStringToObject(sv, "verdict", sj.verdict);
    cJSON_AddStringToObject(sv, "why", sj.why);
    cJSON_AddNumberToObject(sv, "pays_off_min", sj.pays_off_min);
    cJSON_AddNumberToObject(sv, "band_lo", sj.band_lo);
    cJSON_AddNumberToObject(sv, "band_hi", sj.band_hi);
    cJSON_AddItemToObject(run, "step_time_reduction_pct",
                          dg_json_metric(spv ? reduction_pct(sp_ci->point) : 0, spv, "%"));
    cJSON_AddItemToObject(run, "step_time_reduction_pct_ci",
                          ci_json(sp_ci, "%", reduction_pct, method));
    double busy = busy_ci->point;
    cJSON_AddItemToObject(run, "busy_fraction", dg_json_metric(busy, busy_ci->valid, "fraction"));
    cJSON_AddItemToObject(
        run, "busy_fraction_ci",
        ci_json(busy_ci, "fraction", NULL, "percentile bootstrap over the repetitions"));
    cJSON *mw = cJSON_AddObjectToObject(run, "mann_whitney");
    cJSON_AddItemToObject(mw, "p", dg_json_metric(p, isfinite(p), "probability"));
    cJSON_AddItemToObject(mw, "u_cpu", dg_json_metric(u, isfinite(u), "pairs"));
    cJSON_AddStringToObject(mw, "of",
                            "the repetitions' median step times, cpu against device, two-sided");
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

/* The numerics of one batch into run (loss_vs_ref, loss_cpu_vs_device,
 * param_drift, baseline_within_tolerance, within_tolerance, verdict, drift):
 * l and p the cpu's, the device's and the reference's losses (steps each) and
 * final parameters (count each); the reference's only with have_ref. True
 * when the device is within tolerance. */
static bool add_drift(cJSON *run, const cmp_cfg *c, bool have_ref, int steps, size_t count,
                      const double *const l[3], const double *const p[3])
{
    const double *cpu_l = l[0], *dev_l = l[1], *ref_l = l[2];
    const double *cpu_p = p[0], *dev_p = p[1], *ref_p = p[2];
    cJSON *drift = cJSON_CreateArray();
    bool ok = true;
    double lc = have_ref ? max_rel(cpu_l, ref_l, steps) : NAN;
    double ld = have_ref ? max_rel(dev_l, ref_l, steps) : NAN;
    double lcd = max_rel(dev_l, cpu_l, steps);
    cJSON *lr = cJSON_AddObjectToObject(run, "loss_vs_ref");
    cJSON_AddItemToObject(lr, "cpu", rel_metric(lc, have_ref));
    cJSON_AddItemToObject(lr, "device", rel_metric(ld, have_ref));
    cJSON_AddItemToObject(run, "loss_cpu_vs_device", rel_metric(lcd, true));
    double pdc = rel_l2(dev_p, cpu_p, count);
    double pcr = have_ref ? rel_l2(cpu_p, ref_p, count) : NAN;
    double pdr = have_ref ? rel_l2(dev_p, ref_p, count) : NAN;
    cJSON *pj = cJSON_AddObjectToObject(run, "param_drift");
    cJSON_AddItemToObject(pj, "device_vs_cpu", rel_metric(pdc, true));
    cJSON_AddItemToObject(pj, "cpu_vs_ref", rel_metric(pcr, have_ref));
    cJSON_AddItemToObject(pj, "device_vs_ref", rel_metric(pdr, have_ref));
    cJSON_AddNumberToObject(pj, "steps", steps);
    /* The device is judged against the float64 run when there is one (the
     * truth; the cpu is fp32 too and can sit on the other side of a relu
     * kink), else against the cpu. */
    if (have_ref) {
        ok &= within(ld, c->loss_tol, "loss_vs_ref.device", drift);
        ok &= within(pdr, c->param_tol, "param_drift.device_vs_ref", drift);
    } else {
        ok &= within(lcd, c->loss_tol, "loss_cpu_vs_device", drift);
        ok &= within(pdc, c->param_tol, "param_drift.device_vs_cpu", drift);
    }
    bool base_ok = !have_ref || (lc <= c->loss_tol && pcr <= c->param_tol);
    cJSON_AddBoolToObject(run, "baseline_within_tolerance", base_ok);
    if (!base_ok)
        cJSON_AddStringToObject(run, "note",
                                "the cpu baseline itself is beyond tolerance of the float64 "
                                "run; device and cpu disagree by more than fp32 round-off "
                                "(see loss_vs_ref.cpu, param_drift.cpu_vs_ref)");
    cJSON_AddBoolToObject(run, "within_tolerance", ok);
    cJSON_AddStringToObject(run, "verdict", ok ? "within tolerance" : "drift");
    cJSON_AddItemToObject(run, "drift", drift);
    return ok;
}

/* Why the float64 reference does not run at batch (its note in buf), or
 * NULL when it does: a step over REF_MAX_GFLOP, or more batch data than
 * REF_MAX_BATCH_MIB. */
static const char *ref_skipped(const dg_model *m, int batch, int steps, char *buf, size_t len)
{
    double gflop = dg_ref64_step_flops(m, batch) / 1e9;
    double xbytes = (double)batch * m->in_c * m->in_h * m->in_w * sizeof(float);
    if (gflop > REF_MAX_GFLOP)
        snprintf(buf, len,
                 "skipped: %.2f GFLOP per step is above the float64 reference's cap of %.0f GFLOP",
                 gflop, REF_MAX_GFLOP);
    else if (xbytes * steps > REF_MAX_BATCH_MIB * 1048576.0)
        snprintf(buf, len,
                 "skipped: %d batches of %.0f bytes exceed the %d MiB kept for the float64 "
                 "reference",
                 steps, xbytes, REF_MAX_BATCH_MIB);
    else
        return NULL;
    return buf;
}

/* The float64 training run on the weights and batches the cpu run exported
 * to exdir: its losses into ref_l, its final parameters in *ref_p (new), the
 * initial arena in *init (new), its wall time in *ref_s. */
static dg_status run_reference(dg_ctx *ctx, const cmp_cfg *c, int batch, const char *exdir,
                               float **init, double *ref_l, double **ref_p, double *ref_s)
{
    const dg_model *m = c->m;
    size_t count = m->param_arena / sizeof(float);
    char path[4200];
    snprintf(path, sizeof path, "%s/params.f32", exdir);
    FILE *pf = fopen(path, "rb");
    *init = dg_malloc(m->param_arena);
    *ref_p = dg_malloc(count * sizeof(double));
    bool ok = pf && *init && *ref_p && fread(*init, 1, m->param_arena, pf) == m->param_arena;
    if (pf)
        fclose(pf);
    snprintf(path, sizeof path, "%s/batches.bin", exdir);
    batch_file bf = {ok ? fopen(path, "rb") : NULL, (size_t)batch * m->in_c * m->in_h * m->in_w,
                     batch};
    double t0 = dg_now();
    dg_status st;
    if (!bf.f)
        st = dg_fail(ctx, DG_ERR_IO, "compare: reading the exported weights and batches failed");
    else if ((st = dg_ref64_train(ctx, m, *init, batch, c->steps, read_batch, &bf, c->lr,
                                  c->momentum, c->wd, ref_l, *ref_p)) == DG_ERR_IO)
        st = dg_fail(ctx, st, "compare: reading the exported batches failed");
    *ref_s = dg_now() - t0;
    if (bf.f)
        fclose(bf.f);
    return st;
}

/* Runs cpu, device and the float64 reference at one batch size and appends
 * the run entry; *device_rec keeps the first device record (for its name). */
static dg_status compare_batch(dg_ctx *ctx, const cmp_cfg *c, int batch, cJSON *runs, bool *all_ok,
                               cJSON **device_rec)
{
    const dg_model *m = c->m;
    int steps = c->steps;
    size_t count = m->param_arena / sizeof(float);
    char exdir[4096], cpu_path[4096], dev_path[4096];
    snprintf(exdir, sizeof exdir, "%s/export-%d", c->tmp, batch);
    snprintf(cpu_path, sizeof cpu_path, "%s/cpu-%d.f32", c->tmp, batch);
    snprintf(dev_path, sizeof dev_path, "%s/device-%d.f32", c->tmp, batch);

    double gflop = dg_ref64_step_flops(m, batch) / 1e9;
    char note[160];
    const char *ref_note = ref_skipped(m, batch, steps, note, sizeof note);
    bool want_ref = ref_note == NULL;

    cJSON *run = cJSON_CreateObject();
    cJSON_AddItemToArray(runs, run);
    cJSON_AddNumberToObject(run, "batch", batch);
    cJSON *cpu_rec = NULL, *dev_rec = NULL;
    double *cpu_l = dg_calloc((size_t)steps, sizeof(double));
    double *dev_l = dg_calloc((size_t)steps, sizeof(double));
    double *ref_l = dg_calloc((size_t)steps, sizeof(double));
    double *cpu_p = NULL, *dev_p = NULL, *ref_p = NULL, ref_s = 0;
    float *init = NULL;
    const char *failed = NULL;
    dg_status st =
        cpu_l && dev_l && ref_l ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "compare: out of host memory");
    if (st == DG_OK && (st = train_once(ctx, &c->opts->train, "cpu", batch, steps,
                                        want_ref ? exdir : NULL, cpu_path, &cpu_rec)) != DG_OK)
        failed = "cpu";
    if (st == DG_OK && (st = train_once(ctx, &c->opts->train, c->device, batch, steps, NULL,
                                        dev_path, &dev_rec)) != DG_OK)
        failed = c->device;
    if (st == DG_OK && (!losses_of(cpu_rec, steps, cpu_l) || !losses_of(dev_rec, steps, dev_l)))
        st = dg_fail(ctx, DG_ERR_CHECK, "compare: a run did not report a loss at every step");
    if (st == DG_OK &&
        (!(cpu_p = read_arena(cpu_path, count)) || !(dev_p = read_arena(dev_path, count))))
        st = dg_fail(ctx, DG_ERR_IO, "compare: reading the final parameters back failed");
    if (st == DG_OK && want_ref &&
        (st = run_reference(ctx, c, batch, exdir, &init, ref_l, &ref_p, &ref_s)) != DG_OK)
        failed = "float64 reference";
    remove_export(exdir);
    unlink(cpu_path);
    unlink(dev_path);
    side_reps cpu_r = {.raw = cJSON_CreateArray()}, dev_r = {.raw = cJSON_CreateArray()};
    cJSON *order = cJSON_CreateArray();
    double lock_wait = 0;
    bool decisive = false;
    if (st == DG_OK)
        st = timed_reps(ctx, c, batch, &cpu_r, &dev_r, order, &failed, &lock_wait, &decisive);

    if (st != DG_OK) {
        cJSON_AddStringToObject(run, "status", dg_status_name(st));
        cJSON_AddStringToObject(run, "failed", failed ? failed : "compare");
        cJSON_AddStringToObject(run, "error", dg_errmsg(ctx));
        cJSON_AddBoolToObject(run, "within_tolerance", false);
        *all_ok = false;
    } else {
        bool have_ref = want_ref;
        /* The timing: medians over the timed repetitions; the speedup the ratio
         * of the two medians with its bootstrap interval over the repetitions. */
        dg_median_ci sp_ci, busy_ci;
        uint64_t seed = DG_BOOTSTRAP_SEED ^ ((uint64_t)c->opts->train.seed << 20) ^ (uint64_t)batch;
        speedup_ci(c, batch, &cpu_r, &dev_r, &sp_ci);
        size_t nb = 0;
        double busy_v[MAX_REPS];
        for (int i = 0; i < dev_r.n; i++)
            if (isfinite(dev_r.busy[i]))
                busy_v[nb++] = dev_r.busy[i];
        dg_bootstrap_median_ci(busy_v, nb, NULL, 0, 0, 0.95, seed + 1, &busy_ci);
        double u = NAN;
        double p = dg_mann_whitney_p(cpu_r.med, (size_t)cpu_r.n, dev_r.med, (size_t)dev_r.n, &u);
        dg_stats cs, ds;
        dg_stats_compute(cpu_r.med, (size_t)cpu_r.n, 0, &cs);
        dg_stats_compute(dev_r.med, (size_t)dev_r.n, 0, &ds);
        double cms = cs.median, dms = ds.median;
        bool ct = cms > 0, dt = dms > 0;
        cJSON *cj = cJSON_AddObjectToObject(run, "cpu");
        cJSON_AddItemToObject(cj, "step_ms", dg_json_metric(cms, ct, "ms"));
        cJSON_AddItemToObject(cj, "samples_per_s",
                              dg_json_metric(ct ? batch * 1e3 / cms : 0, ct, "samples/s"));
        cJSON *dj = cJSON_AddObjectToObject(run, "device");
        cJSON_AddStringToObject(dj, "backend", c->device);
        cJSON_AddItemToObject(dj, "step_ms", dg_json_metric(dms, dt, "ms"));
        cJSON_AddItemToObject(dj, "samples_per_s",
                              dg_json_metric(dt ? batch * 1e3 / dms : 0, dt, "samples/s"));
        cJSON_AddBoolToObject(
            dj, "captured",
            cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(dev_rec, "capture"), "used")));
        cJSON_AddNumberToObject(dj, "fallbacks",
                                cJSON_GetArraySize(cJSON_GetObjectItem(dev_rec, "fallbacks")));
        add_peaks(cj, dj, c, batch, ct ? cms : NAN, dt ? dms : NAN, dev_rec);
        add_speedup(run, &sp_ci, &busy_ci, ct && dt, cpu_r.n, dev_r.n, p, u);
        cJSON *rp = cJSON_AddObjectToObject(run, "repetitions");
        cJSON_AddNumberToObject(rp, "per_side", cJSON_GetArraySize(order) / 2);
        cJSON_AddNumberToObject(rp, "planned", c->reps);
        cJSON_AddStringToObject(rp, "stop", decisive ? "decisive" : "planned");
        cJSON_AddNumberToObject(rp, "warmup_pairs", 1);
        cJSON_AddItemToObject(rp, "lock_waited", dg_json_metric(lock_wait, true, "s"));
        cJSON_AddItemToObject(rp, "order", order);
        order = NULL;
        cJSON_AddItemToObject(rp, "cpu", cpu_r.raw);
        cJSON_AddItemToObject(rp, "device", dev_r.raw);
        cpu_r.raw = dev_r.raw = NULL;

        cJSON *rj = cJSON_AddObjectToObject(run, "reference");
        cJSON_AddBoolToObject(rj, "ran", have_ref);
        cJSON_AddItemToObject(rj, "gflop_per_step", dg_json_metric(gflop, true, "GFLOP"));
        cJSON_AddItemToObject(rj, "wall", dg_json_metric(ref_s, have_ref, "s"));
        dg_json_add_str(rj, "note", ref_note);

        bool ok =
            add_drift(run, c, have_ref, steps, count, (const double *const[]){cpu_l, dev_l, ref_l},
                      (const double *const[]){cpu_p, dev_p, ref_p});
        cJSON *ls = cJSON_AddObjectToObject(run, "losses");
        cJSON_AddItemToObject(ls, "cpu", loss_array(cpu_l, steps));
        cJSON_AddItemToObject(ls, "device", loss_array(dev_l, steps));
        cJSON_AddItemToObject(ls, "ref", have_ref ? loss_array(ref_l, steps) : cJSON_CreateNull());
        *all_ok = *all_ok && ok;
    }
    cJSON_Delete(cpu_r.raw);
    cJSON_Delete(dev_r.raw);
    cJSON_Delete(order);
    if (dev_rec && !*device_rec) {
        *device_rec = dev_rec;
        dev_rec = NULL;
    }
    cJSON_Delete(cpu_rec);
    cJSON_Delete(dev_rec);
    dg_free(cpu_l);
    dg_free(dev_l);
    dg_free(ref_l);
    dg_free(cpu_p);
    dg_free(dev_p);
    dg_free(ref_p);
    dg_free(init);
    return st;
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

dg_status dg_compare_run(dg_ctx *ctx, const dg_compare_opts *opts, char **json)
{
    *json = NULL;
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
    int batches[MAX_RUNS], nb = 0;
    for (int i = 0; i < MAX_RUNS && opts->batches[i]; i++) {
        if (opts->batches[i] < 1 || opts->batches[i] > (1 << 20))
            return dg_fail(ctx, DG_ERR_USAGE, "compare: batch sizes must be in 1..%d, got %d",
                           1 << 20, opts->batches[i]);
        batches[nb++] = opts->batches[i];
    }
    if (!nb && o->batch > 0)
        batches[nb++] = o->batch;
    if (!nb) {
        batches[nb++] = 32;
        batches[nb++] = 128;
        batches[nb++] = 512;
    }
    cmp_cfg c = {.opts = opts, .device = device};
    c.steps = opts->steps ? opts->steps : o->steps ? o->steps : 20;
    c.reps = opts->repetitions ? opts->repetitions : 5;
    if (c.reps < 1 || c.reps > MAX_REPS)
        return dg_fail(ctx, DG_ERR_USAGE, "compare: repetitions must be in 1..%d, got %d", MAX_REPS,
                       c.reps);
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
    dg_model *m = dg_malloc(sizeof *m);
    if (!m)
        return dg_fail(ctx, DG_ERR_NOMEM, "compare: out of host memory");
    dg_status st = dg_model_parse(ctx, o->model ? o->model : "mlp", o->in_c, o->in_h, o->in_w, m);
    if (st != DG_OK) {
        dg_free(m);
        return st;
    }
    c.m = m;
    const char *tmpdir = getenv("TMPDIR");
    char *tmp = dg_asprintf("%s/devgate-compare-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!tmp || !mkdtemp(tmp)) {
        st = dg_fail(ctx, DG_ERR_IO, "compare: cannot create a temporary folder under %s: %s",
                     tmpdir && *tmpdir ? tmpdir : "/tmp", tmp ? strerror(errno) : "out of memory");
        dg_free(tmp);
        dg_free(m);
        return st;
    }
    c.tmp = tmp;

    cJSON *rec = cJSON_CreateObject(), *runs = cJSON_CreateArray(), *dev_rec = NULL;
    bool all_ok = true;
    for (int i = 0; i < nb && st == DG_OK; i++) {
        st = compare_batch(ctx, &c, batches[i], runs, &all_ok, &dev_rec);
        /* An unavailable device ends the comparison before it has a record. */
        if (st == DG_ERR_UNAVAILABLE && i == 0)
            break;
    }
    rmdir(tmp);
    dg_free(tmp);
    if (st == DG_ERR_UNAVAILABLE && cJSON_GetArraySize(runs) <= 1) {
        cJSON_Delete(runs);
        cJSON_Delete(rec);
        cJSON_Delete(dev_rec);
        dg_free(m);
        return st;
    }

    dg_record_head(rec, "compare", 1);
    cJSON_AddStringToObject(rec, "status", dg_status_name(st));
    dg_json_add_str(rec, "error", st == DG_OK ? NULL : dg_errmsg(ctx));
    cJSON_AddItemToObject(rec, "spec", spec_json(&c, batches, nb));
    cJSON_AddItemToObject(rec, "model", dg_model_json(m));
    cJSON *dj = cJSON_GetObjectItem(dev_rec, "device");
    cJSON_AddItemToObject(rec, "device", dj ? cJSON_Duplicate(dj, true) : cJSON_CreateObject());
    cJSON_AddItemToObject(rec, "runs", runs);
    cJSON *th = cJSON_AddObjectToObject(rec, "thresholds");
    cJSON_AddNumberToObject(th, "loss_tolerance", c.loss_tol);
    cJSON_AddNumberToObject(th, "param_tolerance", c.param_tol);
    cJSON_AddNumberToObject(th, "reference_max_gflop_per_step", REF_MAX_GFLOP);
    cJSON_AddStringToObject(th, "loss", "max over steps of |loss - baseline| / |baseline|");
    cJSON_AddStringToObject(th, "params",
                            "||params - baseline||2 / ||baseline||2 after the last step");
    cJSON_AddBoolToObject(rec, "within_tolerance", st == DG_OK && all_ok);
    *json = dg_json_print(rec);
    cJSON_Delete(rec);
    cJSON_Delete(dev_rec);
    dg_free(m);
    if (!*json)
        return dg_fail(ctx, DG_ERR_NOMEM, "compare: out of memory printing the record");
    return st;
}
