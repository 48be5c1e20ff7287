/* The device gate (method step 2): for each backend, is it built, does a device
 * answer, and does a matrix product computed there match the CPU reference?
 *
 * Inputs come from the seed on the host, are copied to the device, multiplied
 * there and read back. Each element is checked against a double-precision
 * reference with the classic forward-error bound of a length-k dot product,
 * |c - ref| <= 2 k eps32 sum_p |a_ip| |b_pj|, so the tolerance scales with K
 * and with the magnitudes involved rather than being one magic number. With
 * --precision tf32 or bf16 the device backends run the product in that mode
 * and the bound adds the input rounding (dg_gate_tol_unit, docs/schema/gate.md). */
#include "core/record.h"
#include "steps.h"

#include "env/env.h"
#include "env/peak.h"
#include "measure/measure.h"
#include "steps/gate_health.h"
#include "steps/gate_ops.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { DEFAULT_SIZE = 512, DEFAULT_WARM_REPS = 5, MAX_DIM = 16384 };
/* The checked product's warm timing: rounds of at least ROUND_S of products
 * (at most ROUND_MAX_PRODUCTS), the asked rounds and at least MIN_WALL_S in
 * all, MAX_ROUNDS at most. */
enum { MAX_ROUNDS = 64, ROUND_MAX_PRODUCTS = 10000 };
#define ROUND_S 0.01
#define MIN_WALL_S 0.05
/* Before the timed rounds and the rate's repetitions, products back to back
 * for at least WARMUP_S: the cores (or the device) leave their idle states and
 * the team's threads are all running when the clock starts. */
#define WARMUP_S 0.1
/* The cpu's rate product: square, a multiple of RATE_STEP between RATE_MIN
 * and RATE_MAX, sized so one product takes about RATE_SECONDS at the cores'
 * peak (steady state: every thread's share packs and streams its blocks
 * many times); RATE_REPS timed repetitions after a cold one. */
enum { RATE_MIN = 1024, RATE_MAX = 4096, RATE_STEP = 256, RATE_REPS = 7 };
#define RATE_SECONDS 0.01

typedef struct host_problem {
    int m, n, k;
    float *a, *b, *c; /* c receives the device result */
    double *ref, *absref;
} host_problem;

static void problem_free(host_problem *p)
{
    dg_free(p->a);
    dg_free(p->b);
    dg_free(p->c);
    dg_free(p->ref);
    dg_free(p->absref);
}

static dg_status problem_make(dg_ctx *ctx, const dg_matmul_check *chk, host_problem *p)
{
    memset(p, 0, sizeof *p);
    p->m = chk->m;
    p->n = chk->n;
    p->k = chk->k;
    size_t mk = (size_t)p->m * p->k, kn = (size_t)p->k * p->n, mn = (size_t)p->m * p->n;
    p->a = dg_malloc(mk * sizeof(float));
    p->b = dg_malloc(kn * sizeof(float));
    p->c = dg_malloc(mn * sizeof(float));
    p->ref = dg_malloc(mn * sizeof(double));
    p->absref = dg_malloc(mn * sizeof(double));
    float *absa = dg_malloc(mk * sizeof(float)), *absb = dg_malloc(kn * sizeof(float));
    if (!p->a || !p->b || !p->c || !p->ref || !p->absref || !absa || !absb) {
        dg_free(absa);
        dg_free(absb);
        problem_free(p);
        return dg_fail(ctx, DG_ERR_NOMEM, "gate: out of host memory for a %dx%dx%d product", p->m,
                       p->n, p->k);
    }
    dg_rng r;
    dg_rng_init(&r, chk->seed, 1);
    dg_rng_uniform(&r, p->a, mk, -1.0f, 1.0f);
    dg_rng_init(&r, chk->seed, 2);
    dg_rng_uniform(&r, p->b, kn, -1.0f, 1.0f);
    for (size_t i = 0; i < mk; i++)
        absa[i] = fabsf(p->a[i]);
    for (size_t i = 0; i < kn; i++)
        absb[i] = fabsf(p->b[i]);
    dg_gemm_reference(p->m, p->n, p->k, p->a, p->b, p->ref);
    dg_gemm_reference(p->m, p->n, p->k, absa, absb, p->absref);
    dg_free(absa);
    dg_free(absb);
    return DG_OK;
}

typedef struct check_result {
    double max_abs, max_rel, max_over_tol;
    size_t bad, worst_index;
} check_result;

double dg_gate_tol_unit(int k, dg_math m)
{
    double acc = 2.0 * k * (double)FLT_EPSILON; /* fp32 accumulation of k terms */
    double u = m == DG_MATH_BF16 ? ldexp(1.0, -8) : m == DG_MATH_TF32 ? ldexp(1.0, -11) : 0.0;
    return 2.0 * u + u * u + acc * (1.0 + u) * (1.0 + u);
}

static check_result compare(const host_problem *p, dg_math math)
{
    check_result r = {0};
    size_t mn = (size_t)p->m * p->n;
    double unit = dg_gate_tol_unit(p->k, math);
    for (size_t i = 0; i < mn; i++) {
        double got = p->c[i], want = p->ref[i];
        double err = fabs(got - want);
        double tol = unit * p->absref[i] + (double)FLT_MIN;
        double over = err / tol;
        if (!isfinite(got) || over > 1.0) {
            if (r.bad == 0 || !(over <= r.max_over_tol))
                r.worst_index = i;
            r.bad++;
        }
        if (!isfinite(got)) {
            r.max_abs = r.max_rel = r.max_over_tol = INFINITY;
            continue;
        }
        if (err > r.max_abs)
            r.max_abs = err;
        double rel = err / fmax(fabs(want), 1e-30);
        if (fabs(want) > 1e-6 && rel > r.max_rel)
            r.max_rel = rel;
        if (over > r.max_over_tol)
            r.max_over_tol = over;
    }
    return r;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* C = A B on the device, waited for. */
static dg_status product(const dg_backend_iface *be, void *bctx, const host_problem *p, void *da,
                         void *db, void *dc)
{
    dg_status st = be->gemm(bctx, false, false, p->m, p->n, p->k, 1.0f, (dg_ref){da, 0}, p->k,
                            (dg_ref){db, 0}, p->n, 0.0f, (dg_ref){dc, 0}, p->n);
    return st ? st : be->synchronize(bctx);
}

/* Runs the product on one device context in math mode math (set_math first
 * when it is not fp32); fills the matmul object. */
static void run_matmul(const dg_backend_iface *be, void *bctx, const host_problem *p, int reps,
                       dg_math math, cJSON *mm)
{
    void *da = NULL, *db = NULL, *dc = NULL;
    size_t mk = (size_t)p->m * p->k * 4, kn = (size_t)p->k * p->n * 4, mn = (size_t)p->m * p->n * 4;
    const char *stage = "alloc";
    dg_status st;
    double t0, cold = 0, warm = 0;
    cJSON_AddStringToObject(mm, "math", dg_math_name(math));
    stage = "set_math";
    if (math != DG_MATH_FP32 && (st = be->set_math(bctx, (int)math)) != DG_OK)
        goto fail;
    stage = "alloc";
    if ((st = be->buf_alloc(bctx, mk, &da)) || (st = be->buf_alloc(bctx, kn, &db)) ||
        (st = be->buf_alloc(bctx, mn, &dc)))
        goto fail;
    stage = "upload";
    if ((st = be->upload(bctx, da, 0, p->a, mk)) || (st = be->upload(bctx, db, 0, p->b, kn)) ||
        (st = be->synchronize(bctx)))
        goto fail;
    stage = "gemm";
    t0 = dg_now();
    if ((st = product(be, bctx, p, da, db, dc)))
        goto fail;
    cold = dg_now() - t0;
    /* One product can be too short to time (0.4 ms on 16 cores): the warm
     * figure is the median of rounds, each at least ROUND_S of products
     * back to back (the count set by a first warm product), reps rounds and
     * at least MIN_WALL_S of them in all. */
    t0 = dg_now();
    if ((st = product(be, bctx, p, da, db, dc)))
        goto fail;
    double one = dg_now() - t0;
    int per = one > 0 && one < ROUND_S ? (int)ceil(ROUND_S / one) : 1;
    if (per > ROUND_MAX_PRODUCTS)
        per = ROUND_MAX_PRODUCTS;
    double warmup = 0;
    int warmup_n = 0;
    for (; warmup < WARMUP_S; warmup_n += per) {
        t0 = dg_now();
        for (int j = 0; j < per; j++)
            if ((st = product(be, bctx, p, da, db, dc)))
                goto fail;
        warmup += dg_now() - t0;
    }
    double times[MAX_ROUNDS], total = 0;
    int rounds = 0;
    while (rounds < MAX_ROUNDS && (rounds < reps || total < MIN_WALL_S)) {
        t0 = dg_now();
        for (int j = 0; j < per; j++)
            if ((st = product(be, bctx, p, da, db, dc)))
                goto fail;
        double t = dg_now() - t0;
        total += t;
        times[rounds++] = t / per;
    }
    qsort(times, (size_t)rounds, sizeof times[0], cmp_double);
    warm = times[rounds / 2];
    double q1 = dg_quantile(times, (size_t)rounds, 0.25),
           q3 = dg_quantile(times, (size_t)rounds, 0.75);
    /* The result read back after the warm runs is the one checked, so a device
     * that is right once and wrong when repeated still fails. */
    stage = "download";
    if ((st = be->download(bctx, dc, 0, p->c, mn)))
        goto fail;
    check_result r = compare(p, math);
    bool ok = r.bad == 0;
    cJSON_AddBoolToObject(mm, "ok", ok);
    cJSON_AddNumberToObject(mm, "max_abs_err", isfinite(r.max_abs) ? r.max_abs : -1);
    cJSON_AddNumberToObject(mm, "max_rel_err", isfinite(r.max_rel) ? r.max_rel : -1);
    cJSON_AddNumberToObject(mm, "max_err_over_tolerance",
                            isfinite(r.max_over_tol) ? r.max_over_tol : -1);
    cJSON_AddNumberToObject(mm, "bad_elements", (double)r.bad);
    cJSON_AddNumberToObject(mm, "ms_cold", cold * 1e3);
    cJSON_AddNumberToObject(mm, "ms_warm", warm * 1e3);
    cJSON_AddItemToObject(mm, "warmup", dg_json_metric(warmup, true, "s"));
    cJSON_AddNumberToObject(mm, "warmup_products", warmup_n);
    cJSON_AddNumberToObject(mm, "warm_reps", (double)rounds * per);
    cJSON_AddNumberToObject(mm, "rounds", rounds);
    cJSON_AddNumberToObject(mm, "round_products", per);
    cJSON_AddItemToObject(mm, "round_spread",
                          dg_json_metric((q3 - q1) / warm, warm > 0 && rounds >= 2, "fraction"));
    cJSON_AddNumberToObject(mm, "gflops", warm > 0 ? 2.0 * p->m * p->n * p->k / warm * 1e-9 : 0);
    if (ok) {
        cJSON_AddNullToObject(mm, "reason");
    } else {
        size_t i = r.worst_index;
        char why[256];
        snprintf(
            why, sizeof why,
            "wrong result: %zu of %zu elements outside tolerance; worst at [%zu,%zu]: device %.9g, "
            "reference %.9g",
            r.bad, (size_t)p->m * p->n, i / (size_t)p->n, i % (size_t)p->n, (double)p->c[i],
            p->ref[i]);
        cJSON_AddStringToObject(mm, "reason", why);
    }
    be->buf_free(bctx, da);
    be->buf_free(bctx, db);
    be->buf_free(bctx, dc);
    return;
fail:;
    char why[512];
    snprintf(why, sizeof why, "%s failed (%s): %s", stage, dg_status_name(st),
             be->last_error(bctx));
    cJSON_AddBoolToObject(mm, "ok", false);
    cJSON_AddStringToObject(mm, "reason", why);
    be->buf_free(bctx, da);
    be->buf_free(bctx, db);
    be->buf_free(bctx, dc);
}

static cJSON *device_json(int index, const dg_device_info *d)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", index);
    cJSON_AddStringToObject(o, "name", d->name);
    cJSON_AddStringToObject(o, "vendor", d->vendor);
    cJSON_AddStringToObject(o, "driver_version", d->driver_version);
    cJSON_AddStringToObject(o, "platform", d->platform);
    cJSON_AddItemToObject(o, "memory_total",
                          dg_json_metric(d->mem_total.value, d->mem_total.valid, "bytes"));
    cJSON_AddItemToObject(o, "memory_free",
                          dg_json_metric(d->mem_free.value, d->mem_free.valid, "bytes"));
    cJSON_AddItemToObject(o, "compute_units",
                          dg_json_metric(d->compute_units.value, d->compute_units.valid, "units"));
    return o;
}

/* The side of the cpu's rate product for a peak of `peak` GFLOP/s; 0 when
 * the checked product (m, n, k) already holds that much work. */
static int rate_side(double peak, int m, int n, int k)
{
    double want = isfinite(peak) && peak > 0 ? peak * 1e9 * RATE_SECONDS : 0;
    int side = (int)ceil(cbrt(want / 2.0) / RATE_STEP) * RATE_STEP;
    if (side < RATE_MIN)
        side = RATE_MIN;
    if (side > RATE_MAX)
        side = RATE_MAX;
    return 2.0 * m * n * k >= 2.0 * side * side * (double)side ? 0 : side;
}

/* Times a side^3 product on the backend (unchecked: the checked product
 * proved the results; this one measures the steady-state rate) into rate. */
static void run_rate(const dg_backend_iface *be, void *bctx, int side, uint64_t seed, cJSON *rate)
{
    size_t bytes = (size_t)side * side * sizeof(float);
    float *host = dg_malloc(bytes);
    void *da = NULL, *db = NULL, *dc = NULL;
    const char *stage = "alloc";
    dg_status st = DG_ERR_NOMEM;
    cJSON_AddNumberToObject(rate, "m", side);
    cJSON_AddNumberToObject(rate, "n", side);
    cJSON_AddNumberToObject(rate, "k", side);
    if (!host || (st = be->buf_alloc(bctx, bytes, &da)) || (st = be->buf_alloc(bctx, bytes, &db)) ||
        (st = be->buf_alloc(bctx, bytes, &dc)))
        goto fail;
    dg_rng r;
    dg_rng_init(&r, seed, 3);
    dg_rng_uniform(&r, host, (size_t)side * side, -1.0f, 1.0f);
    stage = "upload";
    if ((st = be->upload(bctx, da, 0, host, bytes)) ||
        (st = be->upload(bctx, db, 0, host, bytes)) || (st = be->synchronize(bctx)))
        goto fail;
    stage = "gemm";
    /* Untimed products for WARMUP_S (the first is the cold one), then RATE_REPS timed. */
    double times[RATE_REPS], warmup = 0;
    int warmup_n = 0;
    for (int i = 0; i < RATE_REPS;) {
        double t0 = dg_now();
        if ((st = be->gemm(bctx, false, false, side, side, side, 1.0f, (dg_ref){da, 0}, side,
                           (dg_ref){db, 0}, side, 0.0f, (dg_ref){dc, 0}, side)) ||
            (st = be->synchronize(bctx)))
            goto fail;
        double t = dg_now() - t0;
        if (warmup < WARMUP_S) {
            warmup += t;
            warmup_n++;
        } else {
            times[i++] = t;
        }
    }
    qsort(times, RATE_REPS, sizeof times[0], cmp_double);
    double warm = times[RATE_REPS / 2];
    double g = warm > 0 ? 2.0 * side * side * (double)side / warm * 1e-9 : NAN;
    cJSON_AddNumberToObject(rate, "ms_warm", warm * 1e3);
    cJSON_AddNumberToObject(rate, "warm_reps", RATE_REPS);
    cJSON_AddItemToObject(rate, "warmup", dg_json_metric(warmup, true, "s"));
    cJSON_AddNumberToObject(rate, "warmup_products", warmup_n);
    cJSON_AddItemToObject(rate, "gflops", dg_json_metric(g, isfinite(g) && g > 0, "GFLOP/s"));
    cJSON_AddNullToObject(rate, "reason");
    goto done;
fail:;
    char why[512];
    snprintf(why, sizeof why, "%s failed (%s): %s", stage, dg_status_name(st),
             host ? be->last_error(bctx) : "out of host memory");
    cJSON_AddItemToObject(rate, "gflops", dg_json_metric(0, false, "GFLOP/s"));
    cJSON_AddStringToObject(rate, "reason", why);
done:
    be->buf_free(bctx, da);
    be->buf_free(bctx, db);
    be->buf_free(bctx, dc);
    dg_free(host);
}

/* The FP32 peak of the backend's device 0 and the product's fraction of it
 * (the rate product's when there is one); for cpu also the CPU's peak
 * figures and the BLAS loaded. */
static void add_peak(cJSON *o, const char *name, cJSON *mm)
{
    const cJSON *dev = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "devices"), 0);
    const char *src = NULL;
    double peak =
        dg_device_peak_gflops(name, dg_jstr(dev, "name"), dg_jnum(dev, "compute_units"), 0, &src);
    cJSON *pk = cJSON_AddObjectToObject(o, "peak");
    cJSON_AddItemToObject(pk, "fp32", dg_json_metric(peak, isfinite(peak), "GFLOP/s"));
    cJSON_AddStringToObject(pk, "source", src);
    if (strcmp(name, "cpu") == 0) {
        const dg_cpu_peak *cp = dg_cpu_peak_get();
        cJSON_AddItemToObject(pk, "cpu", dg_cpu_peak_json(cp));
        cJSON_AddItemToObject(o, "blas", dg_env_blas(cp));
    }
    const cJSON *rg = cJSON_GetObjectItem(cJSON_GetObjectItem(mm, "rate"), "gflops");
    bool use_rate = cJSON_IsTrue(cJSON_GetObjectItem(rg, "valid"));
    double g = use_rate ? dg_jnum(rg, "value") : dg_jnum(mm, "gflops");
    double f = g / peak;
    cJSON_AddItemToObject(mm, "fraction_of_peak",
                          dg_json_metric(f, isfinite(f) && g > 0 && peak > 0, "fraction"));
    cJSON_AddStringToObject(mm, "fraction_of", use_rate ? "rate" : "checked");
}

/* Level 3: the sustained load with the health sampled, then the memory
 * bandwidth, each under the measurement lock. */
static void level3(cJSON *o, const char *name, const dg_backend_iface *be, void *bctx,
                   const dg_device_info *info, const dg_matmul_check *check)
{
    const char *src = NULL;
    double peak = dg_device_peak_gflops(
        name, info->name, info->compute_units.valid ? info->compute_units.value : NAN, 0, &src);
    dg_sustain_opts so = {.seconds = check->sustain_s, .load = check->load, .seed = check->seed};
    bool bad = false;
    dg_mlock lk;
    dg_measure_lock(&lk, 600, NULL);
    cJSON *sus = dg_gate_sustain(be, bctx, info, peak, &so, &bad);
    double rated = dg_device_mem_gbps(info->name, &src);
    if (!isfinite(rated) && info->mem_gbps.valid) {
        rated = info->mem_gbps.value;
        src = "the device's memory clock x bus width";
    }
    cJSON *bw = dg_gate_membw(be, bctx, info, rated, isfinite(rated) ? src : NULL, &bad);
    dg_measure_unlock(&lk);
    if (sus) {
        cJSON_AddItemToObject(sus, "lock", dg_measure_lock_json(&lk));
        cJSON_AddItemToObject(o, "sustain", sus);
    }
    if (bw)
        cJSON_AddItemToObject(o, "memory_bandwidth", bw);
}

/* The product check on the backend's device 0, timed under the machine's
 * measurement lock with what else ran (mm's window and lock); the cpu on
 * the threads the fixture's cpu baseline gets (dg_cpu_threads_resolve), its
 * rate also taken on a product big enough to reach steady state; then the
 * FP32 peak (add_peak into o). */
static void timed_matmul(cJSON *o, cJSON *mm, const char *name, const dg_backend_iface *iface,
                         void *bctx, host_problem *p, const dg_matmul_check *check)
{
    dg_mlock lk;
    dg_measure_lock(&lk, 600, NULL);
    bool cpu = strcmp(name, "cpu") == 0;
    int saved = omp_get_max_threads(), nt = 0;
    const char *tsrc = NULL;
    if (cpu) {
        nt = dg_cpu_threads_resolve(0, &tsrc);
        omp_set_num_threads(nt);
        /* What the pool has now, not what was asked; and the
         * team a parallel region really gets (OMP_THREAD_LIMIT,
         * OMP_DYNAMIC and nesting can give fewer). */
        cJSON_AddNumberToObject(mm, "threads", omp_get_max_threads());
        cJSON_AddStringToObject(mm, "threads_source", tsrc);
        int team = 0;
#pragma omp parallel
        {
#pragma omp single
            team = omp_get_num_threads();
        }
        cJSON_AddItemToObject(mm, "team_threads", dg_json_metric(team, team > 0, "threads"));
    }
    dg_window *w = dg_window_begin();
    /* A backend without math modes (the cpu, the fp32 baseline)
     * is checked in fp32 whatever the run's math. */
    dg_math m = iface->set_math ? check->math : DG_MATH_FP32;
    run_matmul(iface, bctx, p, check->warm_reps, m, mm);
    /* Back to exact fp32: the level 2 op checks hold fp32 tolerances. */
    if (m != DG_MATH_FP32 && iface->set_math(bctx, DG_MATH_FP32) != DG_OK) {
        cJSON_ReplaceItemInObject(mm, "ok", cJSON_CreateFalse());
        cJSON_DeleteItemFromObject(mm, "reason");
        char why[400];
        snprintf(why, sizeof why, "set_math(fp32) after the %s product failed: %s", dg_math_name(m),
                 iface->last_error(bctx));
        cJSON_AddStringToObject(mm, "reason", why);
    }
    int side = cpu && cJSON_IsTrue(cJSON_GetObjectItem(mm, "ok"))
                   ? rate_side(dg_cpu_peak_get()->gflops, p->m, p->n, p->k)
                   : 0;
    if (side > 0)
        run_rate(iface, bctx, side, check->seed, cJSON_AddObjectToObject(mm, "rate"));
    cJSON_AddItemToObject(mm, "window", dg_window_end(w));
    dg_window_free(w);
    if (cpu)
        omp_set_num_threads(saved);
    dg_measure_unlock(&lk);
    cJSON_AddItemToObject(mm, "lock", dg_measure_lock_json(&lk));
    add_peak(o, name, mm);
}

/* The record's matmul: the check's shape, and the product itself when the
 * backend is available. */
static void add_matmul(dg_ctx *ctx, cJSON *o, const char *name, const dg_backend_iface *iface,
                       void *bctx, bool available, const dg_matmul_check *check)
{
    cJSON *mm = cJSON_AddObjectToObject(o, "matmul");
    cJSON_AddNumberToObject(mm, "m", check->m);
    cJSON_AddNumberToObject(mm, "n", check->n);
    cJSON_AddNumberToObject(mm, "k", check->k);
    cJSON_AddNumberToObject(mm, "device_index", 0);
    if (available) {
        host_problem p;
        if (problem_make(ctx, check, &p) != DG_OK) {
            cJSON_AddBoolToObject(mm, "ok", false);
            cJSON_AddStringToObject(mm, "reason", dg_errmsg(ctx));
        } else {
            timed_matmul(o, mm, name, iface, bctx, &p, check);
            problem_free(&p);
        }
    } else {
        cJSON_AddNullToObject(mm, "ok");
        cJSON_AddStringToObject(mm, "reason", "backend not available");
    }
}

cJSON *dg_gate_backend(dg_ctx *ctx, const char *name, const dg_backend_iface *iface,
                       const dg_matmul_check *check)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "name", name);
    dg_backend_entry e;
    if (dg_backend_lookup(ctx, name, &e) != DG_OK) {
        cJSON_Delete(o);
        return NULL;
    }
    if (iface) {
        e.iface = iface;
        e.built = true;
    }
    cJSON_AddBoolToObject(o, "built", e.built);
    void *bctx = NULL;
    char reason[512] = "";
    bool available = false;
    if (e.iface) {
        /* Without a check (the environment proof) a backend's probe is enough. */
        dg_status (*open)(int, void **, char *, size_t) =
            !check && e.iface->probe ? e.iface->probe : e.iface->init;
        if (open(0, &bctx, reason, sizeof reason) == DG_OK)
            available = e.iface->device_count(bctx) > 0;
        if (!available && !reason[0])
            snprintf(reason, sizeof reason, "no device answered");
    } else {
        snprintf(reason, sizeof reason, "%s", e.reason);
    }
    /* A VM or container is the usual reason a device backend sees no device:
     * name it in the reason rather than leave the user to guess. */
    if (!available && e.built && strcmp(name, "cpu") != 0) {
        cJSON *virt = dg_env_virtualization();
        const char *note = cJSON_GetStringValue(cJSON_GetObjectItem(virt, "note"));
        if (note && (cJSON_IsTrue(cJSON_GetObjectItem(virt, "vm")) ||
                     cJSON_IsTrue(cJSON_GetObjectItem(virt, "container")))) {
            size_t used = strlen(reason);
            snprintf(reason + used, sizeof reason - used, "; possibly hidden by virtualization: %s",
                     note);
            cJSON_AddTrueToObject(o, "virtualized");
        }
        cJSON_Delete(virt);
    }
    cJSON_AddBoolToObject(o, "available", available);
    dg_json_add_str(o, "reason", available ? NULL : reason);
    cJSON *devs = cJSON_AddArrayToObject(o, "devices");
    if (available) {
        char ver[512] = "";
        e.iface->versions(bctx, ver, sizeof ver);
        cJSON_AddStringToObject(o, "versions", ver);
        int nd = e.iface->device_count(bctx);
        for (int i = 0; i < nd; i++) {
            dg_device_info info;
            if (e.iface->device_info(bctx, i, &info) == DG_OK)
                cJSON_AddItemToArray(devs, device_json(i, &info));
        }
    }
    if (check)
        add_matmul(ctx, o, name, e.iface, bctx, available, check);
    if (check && check->ops && available) {
        bool failed = false;
        cJSON *ops = dg_op_suite_run(check->ops, name, e.iface, bctx, &failed);
        if (ops)
            cJSON_AddItemToObject(o, "ops", ops);
    }
    /* Level 2: the host-device link of every device backend (the cpu has none). */
    dg_device_info info;
    bool have_info = available && e.iface->device_info(bctx, 0, &info) == DG_OK;
    if (check && check->level >= 3 && have_info)
        level3(o, name, e.iface, bctx, &info, check);
    if (check && check->level >= 2 && have_info && !e.iface->caps.host) {
        bool bad = false;
        dg_mlock lk;
        dg_measure_lock(&lk, 600, NULL);
        dg_link_rating rating;
        dg_link_rating_nvml(&info, &rating);
        cJSON *link = dg_gate_link(e.iface, bctx, &rating, &bad);
        dg_measure_unlock(&lk);
        if (link) {
            cJSON_AddItemToObject(link, "lock", dg_measure_lock_json(&lk));
            cJSON_AddItemToObject(o, "link", link);
        }
    }
    if (bctx)
        e.iface->free(bctx);
    return o;
}

/* ---- levels ------------------------------------------------------------------ */

/* Each level a superset of the one below; the budgets are what the level
 * keeps on a loaded 2-core machine without a GPU (gate: every backend;
 * accept: the fixture's whole method, the gate included). */
static const dg_level_info level_rows[] = {
    {.level = 1,
     .gate_budget_s = 15,
     .accept_budget_s = 180,
     .what = "built, available, one checked matrix product per backend"},
    {.level = 2,
     .gate_budget_s = 60,
     .accept_budget_s = 720,
     .what = "level 1, every training op forward and backward against float64 (NMSE per op), "
             "host-device bandwidth both ways"},
    {.level = 3,
     .gate_budget_s = 300,
     .accept_budget_s = 960,
     .sustain_s = 60,
     .what = "level 2, sustained load with clocks, temperature, power and throttle reasons "
             "sampled, the rate's drift, device memory bandwidth"},
    {.level = 4,
     .gate_budget_s = 2400,
     .accept_budget_s = 4200,
     .sustain_s = 420,
     .what = "level 3 for longer, plus the full soak"},
};

const dg_level_info *dg_level_get(int level)
{
    return level >= DG_LEVEL_MIN && level <= DG_LEVEL_MAX ? &level_rows[level - DG_LEVEL_MIN]
                                                          : NULL;
}

/* Seconds waited for the measurement lock: every "lock" object's wait in o. */
static double lock_waited(const cJSON *o)
{
    double s = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, o)
    {
        if (it->string && strcmp(it->string, "lock") == 0 && cJSON_IsObject(it)) {
            double w = dg_json_metric_value(cJSON_GetObjectItemCaseSensitive(it, "waited"));
            s += isfinite(w) && w > 0 ? w : 0;
        } else if (cJSON_IsObject(it) || cJSON_IsArray(it)) {
            s += lock_waited(it);
        }
    }
    return s;
}

cJSON *dg_level_json(int level, double budget_s, double wall_s, const cJSON *rec)
{
    const dg_level_info *L = dg_level_get(level);
    cJSON *o = cJSON_CreateObject();
    if (!o || !L)
        return o;
    bool ran = isfinite(wall_s) && wall_s >= 0, has = isfinite(budget_s) && budget_s > 0;
    double waited = rec ? lock_waited(rec) : 0;
    cJSON_AddNumberToObject(o, "level", level);
    cJSON_AddStringToObject(o, "what", L->what);
    cJSON_AddItemToObject(o, "budget", dg_json_metric(has ? budget_s : 0, has, "s"));
    cJSON_AddItemToObject(o, "wall", dg_json_metric(ran ? wall_s : 0, ran, "s"));
    cJSON_AddItemToObject(o, "lock_waited", dg_json_metric(waited, true, "s"));
    cJSON_AddBoolToObject(o, "overrun", ran && has && wall_s - waited > budget_s);
    return o;
}

dg_status dg_level_resolve(dg_ctx *ctx, bool *quick, int *level)
{
    if (*level == 0)
        *level = *quick ? DG_LEVEL_MIN : DG_LEVEL_MIN + 1;
    if (!dg_level_get(*level))
        return dg_fail(ctx, DG_ERR_USAGE, "level %d out of range (%d..%d)", *level, DG_LEVEL_MIN,
                       DG_LEVEL_MAX);
    if (*quick && *level != DG_LEVEL_MIN)
        return dg_fail(ctx, DG_ERR_USAGE, "--quick is level %d; it cannot run level %d",
                       DG_LEVEL_MIN, *level);
    *quick = *level == DG_LEVEL_MIN;
    return DG_OK;
}

/* Level 4's full soak (dg_soak_run: the cifar fixture, 10 epochs, the cache
 * emptied at each end) on backend name, its record as the gate's "soak";
 * false when it did not run to its end. */
static bool level4_soak(dg_ctx *ctx, cJSON *root, const char *name, uint64_t seed)
{
    dg_soak_opts so = {.train = DG_TRAIN_OPTS_INIT};
    so.train.backend = name;
    so.train.model = "cifar";
    so.train.seed = seed;
    so.train.epochs = 10;
    char *json = NULL;
    dg_log(ctx, DG_LOG_INFO, "gate: level 4 soak on %s", name);
    dg_status st = dg_soak_run(ctx, &so, &json);
    cJSON *rec = json ? cJSON_Parse(json) : NULL;
    dg_string_free(json);
    cJSON *o = cJSON_AddObjectToObject(root, "soak");
    cJSON_AddStringToObject(o, "backend", name);
    cJSON_AddStringToObject(o, "status", dg_status_name(st));
    dg_json_add_str(o, "error", st == DG_OK ? NULL : dg_errmsg(ctx));
    cJSON_AddItemToObject(o, "record", rec ? rec : cJSON_CreateNull());
    return st == DG_OK;
}

/* Splits a comma-separated backend list, checking each name. */
static dg_status parse_backends(dg_ctx *ctx, const char *list, const char **names, size_t *count)
{
    *count = 0;
    if (!list) {
        for (size_t i = 0; i < dg_backend_names_count; i++)
            names[(*count)++] = dg_backend_names[i];
        return DG_OK;
    }
    const char *p = list;
    while (*p) {
        size_t len = strcspn(p, ",");
        bool found = false;
        for (size_t i = 0; i < dg_backend_names_count; i++) {
            if (strlen(dg_backend_names[i]) == len && strncmp(p, dg_backend_names[i], len) == 0) {
                bool dup = false;
                for (size_t j = 0; j < *count; j++)
                    dup |= names[j] == dg_backend_names[i];
                if (!dup)
                    names[(*count)++] = dg_backend_names[i];
                found = true;
            }
        }
        if (!found)
            return dg_fail(ctx, DG_ERR_USAGE, "unknown backend '%.*s' (known: cpu, opencl, cuda)",
                           (int)len > 64 ? 64 : (int)len, p);
        p += len;
        if (*p == ',')
            p++;
    }
    if (*count == 0)
        return dg_fail(ctx, DG_ERR_USAGE, "empty backend list");
    return DG_OK;
}

const char *const dg_device_preference[] = {"cuda", "opencl", NULL};

/* Where `name` stands in dg_device_preference; past its end when absent. */
static int preference_rank(const char *name)
{
    int r = 0;
    while (dg_device_preference[r] && strcmp(dg_device_preference[r], name) != 0)
        r++;
    return r;
}

/* Each backend's entry into entries[i] (names' order). With first_device the
 * host backends are checked, then the device backends in preference order
 * until one is available and passes its product check; those after it are
 * opened for built and available only, their product "not checked" (a cold
 * OpenCL platform compiles devgate's program for 18 s on the H200, for a
 * route that cuda already is). false when out of memory. */
static bool gate_entries(dg_ctx *ctx, const char *const *names, size_t count, bool first_device,
                         const dg_matmul_check *chk, cJSON **entries)
{
    size_t order[8];
    for (size_t i = 0; i < count; i++)
        order[i] = i;
    for (size_t i = 1; first_device && i < count; i++) /* stable: host first, then by rank */
        for (size_t j = i; j > 0; j--) {
            const char *a = names[order[j - 1]], *b = names[order[j]];
            int ra = dg_backend_is_host(a) ? -1 : preference_rank(a);
            int rb = dg_backend_is_host(b) ? -1 : preference_rank(b);
            if (ra <= rb)
                break;
            size_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    const char *passed = NULL;
    for (size_t k = 0; k < count; k++) {
        const char *name = names[order[k]];
        dg_log(ctx, DG_LOG_INFO, "gate: %s", name);
        bool skip = passed && !dg_backend_is_host(name);
        cJSON *b = entries[order[k]] = dg_gate_backend(ctx, name, NULL, skip ? NULL : chk);
        if (!b)
            break;
        if (skip) {
            cJSON *mm = cJSON_AddObjectToObject(b, "matmul");
            cJSON_AddNullToObject(mm, "ok");
            char why[96];
            snprintf(why, sizeof why, "not checked: %s passed first", passed);
            cJSON_AddStringToObject(mm, "reason", why);
        } else if (first_device && !dg_backend_is_host(name) && dg_jbool(b, "available") == 1 &&
                   dg_jbool(b, "matmul.ok") == 1 && !(dg_jnum(b, "ops.failed") > 0)) {
            passed = name;
        }
    }
    for (size_t i = 0; i < count; i++)
        if (!entries[i]) {
            for (size_t j = 0; j < count; j++)
                cJSON_Delete(entries[j]);
            return false;
        }
    return true;
}

dg_status dg_gate_run(dg_ctx *ctx, const dg_gate_opts *opts, char **json, dg_gate_verdict *verdict)
{
    *json = NULL;
    double t0 = dg_now();
    int level = opts && opts->level ? opts->level : DG_LEVEL_MIN;
    if (!dg_level_get(level))
        return dg_fail(ctx, DG_ERR_USAGE, "gate level %d out of range (%d..%d)", level,
                       DG_LEVEL_MIN, DG_LEVEL_MAX);
    if (opts && (!(opts->sustain_s >= 0 && opts->sustain_s <= 86400) ||
                 !(opts->load >= 0 && opts->load <= 1)))
        return dg_fail(ctx, DG_ERR_USAGE,
                       "gate: sustained seconds 0..86400 and load 0..1 (got %g s, load %g)",
                       opts->sustain_s, opts->load);
    dg_matmul_check chk = {
        .m = opts && opts->m ? opts->m : DEFAULT_SIZE,
        .n = opts && opts->n ? opts->n : DEFAULT_SIZE,
        .k = opts && opts->k ? opts->k : DEFAULT_SIZE,
        .seed = opts ? opts->seed : 0,
        .warm_reps = opts && opts->warm_reps > 0 ? opts->warm_reps : DEFAULT_WARM_REPS,
        .math = opts ? opts->math : DG_MATH_FP32,
    };
    if ((int)chk.math < DG_MATH_FP32 || chk.math > DG_MATH_BF16)
        return dg_fail(ctx, DG_ERR_USAGE, "gate: math mode %d (fp32, tf32 or bf16)", (int)chk.math);
    if (chk.m < 1 || chk.n < 1 || chk.k < 1 || chk.m > MAX_DIM || chk.n > MAX_DIM ||
        chk.k > MAX_DIM)
        return dg_fail(ctx, DG_ERR_USAGE, "matrix size %d,%d,%d out of range (1..%d each)", chk.m,
                       chk.n, chk.k, MAX_DIM);
    const char *names[8];
    size_t count;
    dg_status st = parse_backends(ctx, opts ? opts->backends : NULL, names, &count);
    if (st != DG_OK)
        return st;
    bool explicit_list = opts && opts->backends;

    cJSON *root = cJSON_CreateObject();
    dg_record_head(root, "gate", 1);
    cJSON_AddNumberToObject(root, "seed", (double)chk.seed);
    cJSON_AddStringToObject(
        root, "tolerance_model",
        chk.math == DG_MATH_FP32
            ? "|c-ref| <= 2*k*eps32*sum|a||b| per element"
            : "|c-ref| <= (2u + u^2 + 2*k*eps32*(1+u)^2)*sum|a||b| per element, "
              "u the input rounding (tf32 2^-11, bf16 2^-8)");
    cJSON_AddStringToObject(root, "math", dg_math_name(chk.math));
    bool failed = false, missing = false, ran_link = false, ran_sustain = false;
    /* Level 2: the op cases once for every backend, and the reference's own check. */
    dg_op_suite *suite = NULL;
    if (level >= 2) {
        bool ref_ok = false;
        cJSON *rc = dg_op_reference_check(chk.seed, &ref_ok);
        if (!rc || !(suite = dg_op_suite_new(ctx, chk.seed))) {
            cJSON_Delete(rc);
            cJSON_Delete(root);
            return dg_fail(ctx, DG_ERR_NOMEM, "gate: out of host memory for the op checks");
        }
        cJSON_AddItemToObject(root, "reference_check", rc);
        cJSON_AddBoolToObject(root, "reference_ok", ref_ok);
        failed |= !ref_ok;
        chk.ops = suite;
        chk.level = level;
        chk.sustain_s =
            opts && opts->sustain_s > 0 ? opts->sustain_s : dg_level_get(level)->sustain_s;
        chk.load = opts ? opts->load : 0;
    }
    cJSON *arr = cJSON_AddArrayToObject(root, "backends");
    cJSON *entries[8] = {NULL};
    if (!gate_entries(ctx, names, count, opts && opts->first_device, &chk, entries)) {
        cJSON_Delete(root);
        dg_op_suite_free(suite);
        return dg_fail(ctx, DG_ERR_NOMEM, "gate: out of memory");
    }
    for (size_t i = 0; i < count; i++) {
        cJSON *b = entries[i];
        cJSON_AddItemToArray(arr, b);
        bool avail = cJSON_IsTrue(cJSON_GetObjectItem(b, "available"));
        cJSON *ok = cJSON_GetObjectItem(cJSON_GetObjectItem(b, "matmul"), "ok");
        if (avail && !cJSON_IsTrue(ok) && !cJSON_IsNull(ok)) /* null: not checked (first_device) */
            failed = true;
        if (avail && (dg_jnum(b, "ops.failed") > 0 || dg_jbool(b, "link.ok") == 0 ||
                      dg_jbool(b, "sustain.ok") == 0 || dg_jbool(b, "memory_bandwidth.ok") == 0))
            failed = true;
        ran_sustain |= cJSON_GetObjectItem(b, "sustain") != NULL;
        ran_link |= cJSON_GetObjectItem(b, "link") != NULL;
        if (!avail && explicit_list)
            missing = true;
    }
    /* Level 4: the full soak on the device the fixture would judge (the first
     * device backend that passed, else the cpu). */
    if (level >= 4 && !failed) {
        const char *dev = NULL;
        const cJSON *b;
        cJSON_ArrayForEach(b, arr)
        {
            const char *n = dg_jstr(b, "name");
            if (!dev && n && dg_jbool(b, "available") == 1 && !dg_backend_is_host(n))
                dev = n;
        }
        failed |= !level4_soak(ctx, root, dev ? dev : "cpu", chk.seed);
    }
    cJSON *lv = dg_level_json(level, dg_level_get(level)->gate_budget_s, dg_now() - t0, root);
    cJSON_AddItemToObject(root, "level", lv);
    cJSON *checks = cJSON_AddArrayToObject(lv, "checks");
    cJSON_AddItemToArray(checks, cJSON_CreateString("product"));
    if (suite) {
        cJSON_AddItemToArray(checks, cJSON_CreateString("reference"));
        cJSON_AddItemToArray(checks, cJSON_CreateString("ops"));
    }
    if (ran_link)
        cJSON_AddItemToArray(checks, cJSON_CreateString("link"));
    if (ran_sustain) {
        cJSON_AddItemToArray(checks, cJSON_CreateString("sustain"));
        cJSON_AddItemToArray(checks, cJSON_CreateString("memory_bandwidth"));
    }
    if (cJSON_GetObjectItem(root, "soak"))
        cJSON_AddItemToArray(checks, cJSON_CreateString("soak"));
    dg_op_suite_free(suite);
    *verdict = failed ? DG_GATE_FAIL : missing ? DG_GATE_UNAVAILABLE : DG_GATE_PASS;
    cJSON_AddStringToObject(root, "verdict", failed ? "fail" : missing ? "unavailable" : "pass");
    *json = dg_json_print(root);
    cJSON_Delete(root);
    return *json ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "gate: out of memory printing the record");
}
