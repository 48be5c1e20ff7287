/* The fixture comparison's numerics (compare_int.h): the numerics pair of
 * one batch (cpu, the device and the float64 reference on the same weights
 * and batches, the loss read at every step) and what it finds: loss and
 * parameter drift against the reference, the verdict and the drift's names. */
#include "steps/compare_int.h"

#include "engine/model.h"
#include "engine/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REF_MAX_BATCH_MIB 256 /* train --export keeps at most this much batch data */

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

dg_status dg_compare_train_once(dg_ctx *ctx, const dg_train_opts *base, const char *backend,
                                int batch, int steps, const char *export_dir,
                                const char *params_path, cJSON **rec)
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

/* Adds name to the drift list when v exceeds tol (or is not finite). */
static bool within(double v, double tol, const char *name, cJSON *drift)
{
    if (v <= tol)
        return true;
    cJSON_AddItemToArray(drift, cJSON_CreateString(name));
    return false;
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
    else if ((st = dg_ref64_train(ctx, m, *init, batch, c->steps, c->opts->train.threads,
                                  read_batch, &bf, c->lr, c->momentum, c->wd, ref_l, *ref_p)) ==
             DG_ERR_IO)
        st = dg_fail(ctx, st, "compare: reading the exported batches failed");
    *ref_s = dg_now() - t0;
    if (bf.f)
        fclose(bf.f);
    return st;
}

/* The numerics' members of a RUN (docs/schema/measure.md "compare"): the
 * device's capture and fallbacks, the reference, the drift figures and
 * verdict, the losses. */
static cJSON *numerics_json(const cmp_cfg *c, int batch, const cJSON *dev_rec, const char *ref_note,
                            double ref_s, size_t count, const double *const l[3],
                            const double *const p[3])
{
    bool have_ref = ref_note == NULL;
    cJSON *run = cJSON_CreateObject();
    cJSON *dj = cJSON_AddObjectToObject(run, "device");
    cJSON_AddBoolToObject(
        dj, "captured",
        cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(dev_rec, "capture"), "used")));
    cJSON_AddNumberToObject(dj, "fallbacks",
                            cJSON_GetArraySize(cJSON_GetObjectItem(dev_rec, "fallbacks")));
    cJSON *rj = cJSON_AddObjectToObject(run, "reference");
    cJSON_AddBoolToObject(rj, "ran", have_ref);
    cJSON_AddItemToObject(rj, "gflop_per_step",
                          dg_json_metric(dg_ref64_step_flops(c->m, batch) / 1e9, true, "GFLOP"));
    cJSON_AddItemToObject(rj, "wall", dg_json_metric(ref_s, have_ref, "s"));
    dg_json_add_str(rj, "note", ref_note);
    add_drift(run, c, have_ref, c->steps, count, l, p);
    cJSON *ls = cJSON_AddObjectToObject(run, "losses");
    cJSON_AddItemToObject(ls, "cpu", loss_array(l[0], c->steps));
    cJSON_AddItemToObject(ls, "device", loss_array(l[1], c->steps));
    cJSON_AddItemToObject(ls, "ref", have_ref ? loss_array(l[2], c->steps) : cJSON_CreateNull());
    return run;
}

dg_status dg_compare_numerics_pair(dg_fixture_compare *fc, int batch)
{
    const cmp_cfg *c = &fc->c;
    dg_ctx *ctx = fc->ctx;
    int steps = c->steps;
    size_t count = c->m->param_arena / sizeof(float);
    char exdir[4096], cpu_path[4096], dev_path[4096], note[160];
    snprintf(exdir, sizeof exdir, "%s/export-%d", c->tmp, batch);
    snprintf(cpu_path, sizeof cpu_path, "%s/cpu-%d.f32", c->tmp, batch);
    snprintf(dev_path, sizeof dev_path, "%s/device-%d.f32", c->tmp, batch);
    const char *ref_note = ref_skipped(c->m, batch, steps, note, sizeof note);
    cJSON *cpu_rec = NULL, *dev_rec = NULL;
    double *l[3] = {dg_calloc((size_t)steps, sizeof(double)),
                    dg_calloc((size_t)steps, sizeof(double)),
                    dg_calloc((size_t)steps, sizeof(double))};
    double *p[3] = {NULL, NULL, NULL}, ref_s = 0;
    float *init = NULL;
    dg_status st =
        l[0] && l[1] && l[2] ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "compare: out of host memory");
    if (st == DG_OK &&
        (st = dg_compare_train_once(ctx, &c->opts->train, "cpu", batch, steps,
                                    ref_note ? NULL : exdir, cpu_path, &cpu_rec)) != DG_OK)
        fc->failed = "cpu";
    if (st == DG_OK && (st = dg_compare_train_once(ctx, &c->opts->train, c->device, batch, steps,
                                                   NULL, dev_path, &dev_rec)) != DG_OK)
        fc->failed = c->device;
    if (st == DG_OK && (!losses_of(cpu_rec, steps, l[0]) || !losses_of(dev_rec, steps, l[1])))
        st = dg_fail(ctx, DG_ERR_CHECK, "compare: a run did not report a loss at every step");
    if (st == DG_OK &&
        (!(p[0] = read_arena(cpu_path, count)) || !(p[1] = read_arena(dev_path, count))))
        st = dg_fail(ctx, DG_ERR_IO, "compare: reading the final parameters back failed");
    if (st == DG_OK && !ref_note &&
        (st = run_reference(ctx, c, batch, exdir, &init, l[2], &p[2], &ref_s)) != DG_OK)
        fc->failed = "float64 reference";
    remove_export(exdir);
    unlink(cpu_path);
    unlink(dev_path);
    if (st == DG_OK && fc->nnum < MAX_RUNS) {
        fc->batch[fc->nnum] = batch;
        fc->num[fc->nnum++] = numerics_json(c, batch, dev_rec, ref_note, ref_s, count,
                                            (const double *const *)l, (const double *const *)p);
    }
    if (dev_rec && !fc->dev_rec) {
        fc->dev_rec = dev_rec;
        dev_rec = NULL;
    }
    cJSON_Delete(cpu_rec);
    cJSON_Delete(dev_rec);
    for (int i = 0; i < 3; i++) {
        dg_free(l[i]);
        dg_free(p[i]);
    }
    dg_free(init);
    return st;
}
