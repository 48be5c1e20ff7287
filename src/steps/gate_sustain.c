/* Level 3 of the gate (gate_health.h): a sustained load with the device's
 * health sampled, the rate's drift judged with an interval, and the
 * device's memory bandwidth against its rating.
 *
 * The load is square fp32 GEMMs sized to take about SUSTAIN_CALL_S each at
 * the device's peak, issued back to back (or, with load < 1, idling so the
 * busy share of each period is load) for the set seconds. Every window of
 * SUSTAIN_WINDOW_S gives a rate (GFLOP/s of its wall); every
 * SUSTAIN_SAMPLE_S between calls the health source is read (clocks,
 * temperature, power, energy, throttle reasons: health.h). The drift is
 * median(last third of the windows) / median(first third), with its 95%
 * interval from the windows' window-to-window noise: wholly below 1 - DG_UNSTABLE_DRIFT_PCT% the
 * device slowed while it worked (unstable); wholly above it, stable; else inconclusive. Other
 * processes taking CPUs make a host device's rate theirs as much as its own: for a device in host
 * memory each window has its own contention window, and windows where others took CONTENDED_CPUS or
 * more, or where some task waited for a CPU CONTENDED_PRESSURE of the window (PSI, which sees
 * processes of other containers too; quiet windows read under 0.06 here, shared ones 0.5-1), are
 * left out of the drift (for a GPU the run's window decides whether it is judged at all). The
 * memory bandwidth is relu_fwd streaming one buffer into another (two bytes moved per byte), the
 * median of MEMBW_REPS, against the part's rating. */
#include "steps/gate_health.h"

#include "core/json.h"
#include "measure/health.h"
#include "measure/measure.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SUSTAIN_CALL_S 0.025
#define SUSTAIN_WINDOW_S 1.0
#define SUSTAIN_SAMPLE_S 0.5
#define SUSTAIN_PERIOD_S 0.1   /* the duty cycle's period when load < 1 */
#define CONTENDED_CPUS 0.5     /* the contention_cpus threshold's default */
#define CONTENDED_PRESSURE 0.2 /* a window some task waited a fifth of for a CPU */
enum { SIDE_MIN = 256, SIDE_MAX = 8192, SIDE_STEP = 256, MAX_WINDOWS = 4096, MAX_SAMPLES = 8192 };
enum { MEMBW_REPS = 5 };

static void sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* The GEMM side that takes about SUSTAIN_CALL_S at peak (GFLOP/s; NAN: 1024). */
static int side_for(double peak)
{
    if (!(peak > 0))
        return 1024;
    int side = (int)(cbrt(peak * 1e9 * SUSTAIN_CALL_S / 2) / SIDE_STEP) * SIDE_STEP;
    return side < SIDE_MIN ? SIDE_MIN : side > SIDE_MAX ? SIDE_MAX : side;
}

typedef struct run {
    const dg_backend_iface *be;
    void *bctx;
    void *a, *b, *c;
    int side;
    double *rates;    /* GFLOP/s per window */
    double *others;   /* host devices: other processes' CPUs during each window (NAN: unknown) */
    double *pressure; /* host devices: CPU pressure (PSI some) during each window (NAN: unknown) */
    bool per_window;  /* take a contention window per rate window (a host device) */
    int nw;
    dg_health_sample *s;
    int ns;
    dg_status st;
} run;

static dg_status gemm_once(run *r)
{
    dg_status st =
        r->be->gemm(r->bctx, false, false, r->side, r->side, r->side, 1.0f, (dg_ref){r->a, 0},
                    r->side, (dg_ref){r->b, 0}, r->side, 0.0f, (dg_ref){r->c, 0}, r->side);
    return st == DG_OK ? r->be->synchronize(r->bctx) : st;
}

/* Other processes' CPUs in a contention window (dg_window_end's); NAN unknown. */
static double others_cpus(const cJSON *window)
{
    return dg_json_metric_value(cJSON_GetObjectItemCaseSensitive(window, "others_cpus"));
}

/* The share of a contention window some task waited for a CPU (PSI), which
 * also sees processes this one cannot (other containers); NAN unknown. */
static double cpu_pressure(const cJSON *window)
{
    return dg_json_metric_value(cJSON_GetObjectItemCaseSensitive(window, "cpu_pressure_some"));
}

/* Runs the load for seconds at duty load, filling windows and samples. */
static void drive(run *r, double seconds, double load, dg_health *h)
{
    double flop = 2.0 * r->side * (double)r->side * r->side;
    double t0 = dg_now(), wstart = t0, wflop = 0, next_sample = t0, pstart = t0, pbusy = 0;
    dg_window *cw = r->per_window ? dg_window_begin() : NULL;
    while (r->st == DG_OK) {
        double now = dg_now();
        if (now >= next_sample && r->ns < MAX_SAMPLES) {
            dg_health_read(h, now - t0, r->ns ? &r->s[r->ns - 1] : NULL, &r->s[r->ns]);
            r->ns++;
            next_sample = now + SUSTAIN_SAMPLE_S;
        }
        if (now - t0 >= seconds)
            break;
        double c0 = dg_now();
        if ((r->st = gemm_once(r)) != DG_OK)
            break;
        double c1 = dg_now();
        wflop += flop;
        pbusy += c1 - c0;
        if (load < 1) { /* idle until the period's busy share is load */
            double want = pbusy / load - (c1 - pstart);
            sleep_s(want);
            if (dg_now() - pstart >= SUSTAIN_PERIOD_S)
                pstart = dg_now(), pbusy = 0;
        }
        double t = dg_now();
        if (t - wstart >= SUSTAIN_WINDOW_S && r->nw < MAX_WINDOWS) {
            r->others[r->nw] = r->pressure[r->nw] = NAN;
            if (cw) { /* what other processes took during this window */
                cJSON *c = dg_window_end(cw);
                dg_window_free(cw);
                r->others[r->nw] = others_cpus(c);
                r->pressure[r->nw] = cpu_pressure(c);
                cJSON_Delete(c);
                cw = dg_window_begin();
            }
            r->rates[r->nw++] = wflop / (dg_now() - wstart) / 1e9;
            wstart = dg_now();
            wflop = 0;
        }
    }
    dg_window_free(cw);
}

/* ---- judging ------------------------------------------------------------------------ */

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(const double *v, int n)
{
    if (n <= 0)
        return NAN;
    double *t = dg_malloc((size_t)n * sizeof *t);
    if (!t)
        return NAN;
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    dg_free(t);
    return m;
}

/* The windows' noise: sigma from their successive differences (1.4826
 * median|d| / sqrt 2, a normal's sd from the differences' median absolute
 * size). A trend moves every window a little and a step moves one
 * difference, so neither swells it the way they swell a third's spread. */
static double window_noise(const double *r, int n)
{
    if (n < 2)
        return NAN;
    double *d = dg_malloc((size_t)(n - 1) * sizeof *d);
    if (!d)
        return NAN;
    for (int i = 0; i + 1 < n; i++)
        d[i] = fabs(r[i + 1] - r[i]);
    double m = median_of(d, n - 1);
    dg_free(d);
    return 1.4826 * m / sqrt(2.0);
}

/* The drift object (gate_health.h) over the windows no other process took
 * CPUs in (others under CONTENDED_CPUS, or not measured). The ratio is the
 * last third's median over the first's: a burst or a controller settling
 * within a few windows moves neither median. Its interval comes from the
 * windows' noise (window_noise; each third's median has a standard error of
 * 1.2533 sigma / sqrt(third)), not from each third's spread: a device that
 * slows for the first seconds and then holds a lower rate spreads the first
 * third across the fall, and a bootstrap of that spread reached back to 1
 * (the H200's planted slowdown read 0.79, 0.37-1.00). *unstable when the
 * interval lies wholly below the floor. */
cJSON *dg_sustain_drift(const double *all, const double *others, const double *pressure, int nall,
                        bool contended, bool *unstable)
{
    cJSON *o = cJSON_CreateObject();
    double *rates = dg_calloc(nall > 0 ? (size_t)nall : 1, sizeof *rates);
    int n = 0;
    for (int i = 0; rates && i < nall; i++)
        if (!(others[i] >= CONTENDED_CPUS) && !(pressure && pressure[i] >= CONTENDED_PRESSURE))
            rates[n++] = all[i];
    cJSON_AddNumberToObject(o, "windows_judged", n);
    cJSON_AddNumberToObject(o, "windows_contended", nall - n);
    contended = contended && nall == n; /* per-window counts replace the run's */
    int third = n / 3;
    double first = median_of(rates, third), last = median_of(rates + n - third, third);
    double noise = window_noise(rates, n), ratio = last / first;
    /* 95%: the delta method over the two medians' relative errors. */
    double se = 1.2533 * noise / sqrt(third > 0 ? third : 1);
    double rel = 1.959964 * sqrt(pow(se / first, 2) + pow(se / last, 2));
    bool valid = third >= 2 && isfinite(ratio) && first > 0 && last > 0 && isfinite(rel);
    double lo = valid ? ratio * (1 - rel) : NAN, hi = valid ? ratio * (1 + rel) : NAN;
    double floor_ = 1 - DG_UNSTABLE_DRIFT_PCT / 100.0;
    const char *verdict = !valid         ? "not judged: fewer than 6 windows without contention"
                          : contended    ? "not judged: other processes took CPUs during the run"
                          : hi < floor_  ? "unstable"
                          : lo >= floor_ ? "stable"
                                         : "inconclusive";
    *unstable = valid && !contended && hi < floor_;
    cJSON_AddItemToObject(o, "first_third", dg_json_metric(first, third > 0, "GFLOP/s"));
    cJSON_AddItemToObject(o, "last_third", dg_json_metric(last, third > 0, "GFLOP/s"));
    cJSON_AddItemToObject(o, "noise", dg_json_metric(noise, isfinite(noise), "GFLOP/s"));
    cJSON_AddItemToObject(o, "ratio", dg_json_metric(ratio, valid, "ratio"));
    cJSON *c = cJSON_AddObjectToObject(o, "ratio_ci");
    cJSON_AddItemToObject(c, "lo", dg_json_metric(lo, valid, "ratio"));
    cJSON_AddItemToObject(c, "hi", dg_json_metric(hi, valid, "ratio"));
    cJSON_AddNumberToObject(c, "level", 0.95);
    cJSON_AddStringToObject(c, "method", "the windows' noise from their successive differences");
    cJSON_AddNumberToObject(o, "max_drift_pct", DG_UNSTABLE_DRIFT_PCT);
    cJSON_AddStringToObject(o, "verdict", verdict);
    dg_free(rates);
    return o;
}

/* Summary of one health field over the samples: {min, mean, max} or null members. */
static cJSON *field_json(const dg_health_sample *s, int n, size_t off, const char *unit)
{
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        const dg_metric *m = (const dg_metric *)((const char *)&s[i] + off);
        if (!m->valid)
            continue;
        lo = fmin(lo, m->value), hi = fmax(hi, m->value), sum += m->value, k++;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "min", dg_json_metric(lo, k > 0, unit));
    cJSON_AddItemToObject(o, "mean", dg_json_metric(k ? sum / k : 0, k > 0, unit));
    cJSON_AddItemToObject(o, "max", dg_json_metric(hi, k > 0, unit));
    return o;
}

/* Throttle reasons: the seconds each bit was set (a sample stands for the time
 * to the next); *slowed when a slowing one was. */
static cJSON *reasons_json(const dg_health_sample *s, int n, double end_t, bool *slowed)
{
    cJSON *arr = cJSON_CreateArray();
    *slowed = false;
    for (int b = 0; b < 17; b++) {
        unsigned long long bit = 1ULL << b;
        double secs = 0;
        int count = 0;
        for (int i = 0; i < n; i++) {
            if (!s[i].reasons_valid || !(s[i].reasons & bit))
                continue;
            secs += (i + 1 < n ? s[i + 1].t : end_t) - s[i].t;
            count++;
        }
        if (!count)
            continue;
        bool slows = dg_health_reason_slows(bit);
        *slowed |= slows;
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "reason", dg_health_reason_name(bit));
        cJSON_AddBoolToObject(r, "slows", slows);
        cJSON_AddItemToObject(r, "seconds", dg_json_metric(secs, true, "s"));
        cJSON_AddNumberToObject(r, "samples", count);
        cJSON_AddItemToArray(arr, r);
    }
    return arr;
}

static cJSON *samples_json(const dg_health_sample *s, int n)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "t", s[i].t);
        cJSON_AddItemToObject(o, "sm_mhz",
                              dg_json_metric(s[i].sm_mhz.value, s[i].sm_mhz.valid, "MHz"));
        cJSON_AddItemToObject(o, "mem_mhz",
                              dg_json_metric(s[i].mem_mhz.value, s[i].mem_mhz.valid, "MHz"));
        cJSON_AddItemToObject(o, "temp", dg_json_metric(s[i].temp_c.value, s[i].temp_c.valid, "C"));
        cJSON_AddItemToObject(o, "power",
                              dg_json_metric(s[i].power_w.value, s[i].power_w.valid, "W"));
        if (s[i].reasons_valid)
            cJSON_AddNumberToObject(o, "reasons", (double)s[i].reasons);
        else
            cJSON_AddNullToObject(o, "reasons");
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

cJSON *dg_sustain_health(const dg_health_sample *s, int n, double end_t, bool *slowed)
{
    cJSON *h = cJSON_CreateObject();
    cJSON_AddItemToObject(h, "sm_clock",
                          field_json(s, n, offsetof(dg_health_sample, sm_mhz), "MHz"));
    cJSON_AddItemToObject(h, "mem_clock",
                          field_json(s, n, offsetof(dg_health_sample, mem_mhz), "MHz"));
    cJSON_AddItemToObject(h, "temperature",
                          field_json(s, n, offsetof(dg_health_sample, temp_c), "C"));
    cJSON_AddItemToObject(h, "power", field_json(s, n, offsetof(dg_health_sample, power_w), "W"));
    /* Energy: the counter's growth over the run. */
    int first = -1, last = -1;
    for (int i = 0; i < n; i++)
        if (s[i].energy_j.valid)
            last = i, first = first < 0 ? i : first;
    bool e = first >= 0 && last > first && s[last].energy_j.value >= s[first].energy_j.value;
    cJSON_AddItemToObject(
        h, "energy",
        dg_json_metric(e ? s[last].energy_j.value - s[first].energy_j.value : 0, e, "J"));
    cJSON_AddItemToObject(h, "energy_over", dg_json_metric(e ? s[last].t - s[first].t : 0, e, "s"));
    cJSON_AddItemToObject(h, "throttle", reasons_json(s, n, end_t, slowed));
    bool rv = false;
    for (int i = 0; i < n; i++)
        rv |= s[i].reasons_valid;
    cJSON_AddBoolToObject(h, "throttle_reported", rv);
    cJSON_AddItemToObject(h, "samples", samples_json(s, n));
    return h;
}

cJSON *dg_gate_sustain(const dg_backend_iface *be, void *bctx, const dg_device_info *info,
                       double peak_gflops, const dg_sustain_opts *so, bool *bad)
{
    *bad = false;
    run r = {.be = be, .bctx = bctx, .side = side_for(peak_gflops)};
    r.rates = dg_calloc(MAX_WINDOWS, sizeof *r.rates);
    r.others = dg_calloc(MAX_WINDOWS, sizeof *r.others);
    r.pressure = dg_calloc(MAX_WINDOWS, sizeof *r.pressure);
    r.per_window = info->host_memory;
    r.s = dg_calloc(MAX_SAMPLES, sizeof *r.s);
    cJSON *o = cJSON_CreateObject();
    size_t bytes = (size_t)r.side * r.side * sizeof(float);
    float *host = dg_malloc(bytes);
    dg_health *h = dg_health_open(info, be->caps.nvml, so->host_root);
    if (!o || !r.rates || !r.others || !r.pressure || !r.s || !host || !h) {
        cJSON_Delete(o);
        o = NULL;
        goto out;
    }
    dg_rng rng;
    dg_rng_init(&rng, so->seed, 4);
    dg_rng_uniform(&rng, host, (size_t)r.side * r.side, -1, 1);
    if ((r.st = be->buf_alloc(bctx, bytes, &r.a)) == DG_OK &&
        (r.st = be->buf_alloc(bctx, bytes, &r.b)) == DG_OK &&
        (r.st = be->buf_alloc(bctx, bytes, &r.c)) == DG_OK &&
        (r.st = be->upload(bctx, r.a, 0, host, bytes)) == DG_OK &&
        (r.st = be->upload(bctx, r.b, 0, host, bytes)) == DG_OK)
        r.st = gemm_once(&r); /* warm: kernels chosen, clocks up */
    double load = so->load > 0 && so->load < 1 ? so->load : 1;
    dg_window *w = dg_window_begin();
    double t0 = dg_now();
    if (r.st == DG_OK)
        drive(&r, so->seconds, load, h);
    double wall = dg_now() - t0;
    cJSON *cont = dg_window_end(w);
    dg_window_free(w);
    double others = others_cpus(cont);
    bool contended = isfinite(others) && others >= CONTENDED_CPUS;

    cJSON_AddNumberToObject(o, "m", r.side);
    cJSON_AddItemToObject(o, "seconds", dg_json_metric(so->seconds, true, "s"));
    cJSON_AddItemToObject(o, "wall", dg_json_metric(wall, true, "s"));
    cJSON_AddItemToObject(o, "load", dg_json_metric(load, true, "fraction"));
    cJSON_AddStringToObject(o, "source", dg_health_source(h));
    double med = median_of(r.rates, r.nw);
    cJSON_AddItemToObject(o, "rate", dg_json_metric(med, r.nw > 0, "GFLOP/s"));
    double f = med / peak_gflops;
    cJSON_AddItemToObject(o, "fraction_of_peak",
                          dg_json_metric(f, isfinite(f) && f > 0, "fraction"));
    cJSON *rates = cJSON_AddArrayToObject(o, "windows");
    cJSON *oth = cJSON_AddArrayToObject(o, "windows_others_cpus");
    cJSON *prs = cJSON_AddArrayToObject(o, "windows_cpu_pressure");
    for (int i = 0; i < r.nw; i++) {
        cJSON_AddItemToArray(rates, cJSON_CreateNumber(r.rates[i]));
        cJSON_AddItemToArray(oth, isfinite(r.others[i]) ? cJSON_CreateNumber(r.others[i])
                                                        : cJSON_CreateNull());
        cJSON_AddItemToArray(prs, isfinite(r.pressure[i]) ? cJSON_CreateNumber(r.pressure[i])
                                                          : cJSON_CreateNull());
    }
    cJSON_AddNumberToObject(o, "window_s", SUSTAIN_WINDOW_S);
    bool unstable = false, slowed = false;
    cJSON_AddItemToObject(
        o, "drift", dg_sustain_drift(r.rates, r.others, r.pressure, r.nw, contended, &unstable));
    cJSON_AddItemToObject(o, "health", dg_sustain_health(r.s, r.ns, wall, &slowed));
    cJSON_AddBoolToObject(o, "throttled", slowed);
    cJSON_AddItemToObject(o, "contention", cont ? cont : cJSON_CreateNull());
    if (r.st != DG_OK) {
        char e[400];
        snprintf(e, sizeof e, "the load failed (%s): %s", dg_status_name(r.st),
                 be->last_error(bctx));
        cJSON_AddFalseToObject(o, "ok");
        cJSON_AddStringToObject(o, "reason", e);
        *bad = true;
    } else {
        cJSON_AddBoolToObject(o, "ok", !unstable);
        dg_json_add_str(o, "reason", unstable ? "the rate fell while the device worked" : NULL);
        *bad = unstable;
    }
out:
    if (r.a)
        be->buf_free(bctx, r.a);
    if (r.b)
        be->buf_free(bctx, r.b);
    if (r.c)
        be->buf_free(bctx, r.c);
    dg_health_close(h);
    dg_free(host);
    dg_free(r.rates);
    dg_free(r.others);
    dg_free(r.pressure);
    dg_free(r.s);
    return o;
}

/* ---- device memory bandwidth ---------------------------------------------------------- */

cJSON *dg_gate_membw(const dg_backend_iface *be, void *bctx, const dg_device_info *info,
                     double rated, const char *rated_source, bool *bad)
{
    *bad = false;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    /* Far past every cache: 256 MiB a side in host memory, up to 1 GiB on a device. */
    size_t bytes = (size_t)256 << 20;
    if (!info->host_memory && info->mem_total.valid && info->mem_total.value / 16 > bytes)
        bytes = info->mem_total.value / 16 > (1 << 30) ? (size_t)1 << 30
                                                       : (size_t)(info->mem_total.value / 16);
    size_t count = bytes / sizeof(float);
    void *x = NULL, *y = NULL;
    double t[MEMBW_REPS];
    dg_status st = be->buf_alloc(bctx, bytes, &x);
    if (st == DG_OK)
        st = be->buf_alloc(bctx, bytes, &y);
    if (st == DG_OK)
        st = be->fill(bctx, (dg_ref){x, 0}, count, 1.0f);
    for (int i = -1; i < MEMBW_REPS && st == DG_OK; i++) { /* -1: untimed */
        double t0 = dg_now();
        st = be->relu_fwd(bctx, (dg_ref){x, 0}, (dg_ref){y, 0}, count);
        if (st == DG_OK)
            st = be->synchronize(bctx);
        if (i >= 0)
            t[i] = dg_now() - t0;
    }
    if (x)
        be->buf_free(bctx, x);
    if (y)
        be->buf_free(bctx, y);
    double gbps = NAN;
    if (st == DG_OK) {
        qsort(t, MEMBW_REPS, sizeof t[0], cmp_d);
        gbps = t[MEMBW_REPS / 2] > 0 ? 2.0 * bytes / t[MEMBW_REPS / 2] / 1e9 : NAN;
    }
    double f = gbps / rated;
    cJSON_AddStringToObject(o, "kernel", "relu_fwd: read one buffer, write another");
    cJSON_AddNumberToObject(o, "bytes", (double)bytes);
    cJSON_AddNumberToObject(o, "reps", MEMBW_REPS);
    cJSON_AddItemToObject(o, "bandwidth", dg_json_metric(gbps, isfinite(gbps), "GB/s"));
    cJSON_AddItemToObject(o, "rated", dg_json_metric(rated, isfinite(rated), "GB/s"));
    dg_json_add_str(o, "rated_source", rated_source);
    cJSON_AddItemToObject(o, "fraction_of_rated", dg_json_metric(f, isfinite(f), "fraction"));
    cJSON_AddNumberToObject(o, "min_fraction", DG_MEMBW_MIN_FRACTION);
    if (st != DG_OK) {
        char e[400];
        snprintf(e, sizeof e, "failed (%s): %s", dg_status_name(st), be->last_error(bctx));
        cJSON_AddFalseToObject(o, "ok");
        cJSON_AddStringToObject(o, "reason", e);
        *bad = true;
    } else if (!isfinite(f)) {
        cJSON_AddNullToObject(o, "ok");
        cJSON_AddStringToObject(o, "reason", "not judged: the memory's rating is not reported");
    } else {
        *bad = f < DG_MEMBW_MIN_FRACTION;
        cJSON_AddBoolToObject(o, "ok", !*bad);
        dg_json_add_str(o, "reason", *bad ? "under the rating's minimum fraction" : NULL);
    }
    return o;
}
