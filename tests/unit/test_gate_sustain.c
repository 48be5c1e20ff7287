/* Gate level 3 (src/steps/gate_sustain.c, src/measure/health.c):
 *   - the drift judge on planted window rates: steady is stable, a rate that
 *     falls by a fifth is unstable, noise around a small fall is
 *     inconclusive, windows other processes took CPUs in are left out (and
 *     too few left is not judged); the H200's planted slowdown is unstable
 *     and its healthy run stable, bursts and a settling controller stable;
 *   - the health summary: throttle reasons with their seconds, slowing ones
 *     told from idle, fields no source gave left not reported (never 0);
 *   - the NVML source through a fake NVML (units, calls a driver lacks,
 *     a device it does not list never read, a lone device without an
 *     address);
 *   - the host health source on a fixture tree (clocks, the hottest zone,
 *     RAPL energy and the power between reads, throttle events), and on an
 *     empty one (nothing reported);
 *   - the load and the memory bandwidth on the cpu backend: figures present,
 *     the bandwidth judged against a rating handed in, none when there is
 *     none; the gemm-slowdown fault (a device that slows as it works) shows
 *     in the windows. */
#include "backend/backend.h"
#include "core/core.h"
#include "measure/health.h"
#include "steps/gate_health.h"

#include "check.h"
#include "fake_nvml.h"

#include <sys/stat.h>

static const char *drift_verdict(const double *r, const double *others, int n, bool *unstable)
{
    static char v[96];
    cJSON *o = dg_sustain_drift(r, others, NULL, n, false, unstable);
    snprintf(v, sizeof v, "%s", dg_jstr(o, "verdict"));
    cJSON_Delete(o);
    return v;
}

static void check_drift(void)
{
    double r[18], none[18];
    bool u;
    for (int i = 0; i < 18; i++)
        none[i] = NAN;
    for (int i = 0; i < 18; i++)
        r[i] = 100 + (i % 3) * 0.5;
    CHECK_STR(drift_verdict(r, none, 18, &u), "stable");
    CHECK(!u);
    for (int i = 0; i < 18; i++)
        r[i] = i < 6 ? 100 : i < 12 ? 90 : 80 + (i % 2);
    CHECK_STR(drift_verdict(r, none, 18, &u), "unstable");
    CHECK(u);
    for (int i = 0; i < 18; i++) /* a 3% fall under noise of 20% */
        r[i] = (i < 9 ? 100 : 97) * (i % 2 ? 1.2 : 0.8);
    CHECK_STR(drift_verdict(r, none, 18, &u), "inconclusive");
    CHECK(!u);
    /* The falling windows, every other one contended: 9 left, still unstable. */
    double others[18];
    for (int i = 0; i < 18; i++) {
        r[i] = 100 - 2.0 * i;
        others[i] = i % 2 ? 1.0 : 0.1;
    }
    cJSON *o = dg_sustain_drift(r, others, NULL, 18, false, &u);
    CHECK(dg_jnum(o, "windows_judged") == 9 && dg_jnum(o, "windows_contended") == 9);
    CHECK_STR(dg_jstr(o, "verdict"), "unstable");
    cJSON_Delete(o);
    /* CPU pressure alone (processes this one cannot see) leaves windows out too. */
    double quiet[18], psi[18];
    for (int i = 0; i < 18; i++) {
        quiet[i] = 0;
        psi[i] = i % 3 ? 0.01 : 0.9;
    }
    o = dg_sustain_drift(r, quiet, psi, 18, false, &u);
    CHECK(dg_jnum(o, "windows_judged") == 12 && dg_jnum(o, "windows_contended") == 6);
    cJSON_Delete(o);
    /* Every window contended: not judged, never unstable. */
    for (int i = 0; i < 18; i++)
        others[i] = 1.5;
    CHECK(!strncmp(drift_verdict(r, others, 18, &u), "not judged", 10) && !u);
    /* A run contended as a whole, without per-window figures: not judged. */
    o = dg_sustain_drift(r, none, NULL, 18, true, &u);
    CHECK(!strncmp(dg_jstr(o, "verdict"), "not judged", 10) && !u);
    cJSON_Delete(o);
}

/* The H200's windows (docs/evidence/h200-levels-20261202.log): the planted
 * slowdown on cuda (a fall over the first four seconds, then a fifth of the
 * rate held) and the healthy 60 s run (flat, a dip of 1.5% near the end). */
static const double h200_slow[] = {34056, 20170, 14191, 10983, 9956, 10045, 10003, 9997, 10002,
                                   9994,  9970,  10018, 9999,  9990, 9994,  9995,  9995, 9981};
static const double h200_healthy[] = {
    50343, 50215, 50595, 50705, 50727, 50691, 50706, 50712, 50713, 50706, 50728, 50603,
    50722, 50707, 50520, 50594, 50207, 50654, 50740, 50733, 50736, 50719, 50723, 50730,
    50732, 50712, 50769, 50758, 50891, 50766, 50761, 50760, 50721, 50755, 50742, 50718,
    50722, 50714, 50712, 50717, 50731, 50709, 50661, 50566, 50704, 50029, 50489, 50393,
    50219, 50379, 50619, 50489, 50477, 50481, 50473, 50228, 50486, 50681, 50324};

/* Shapes the drift must tell apart: a device that slows and holds the lower
 * rate is unstable (the bootstrap of each third's spread called the H200's
 * "inconclusive", 0.37-1.00, and the gate passed); a flat run, a short burst
 * and a controller settling in the first windows are stable. */
static void check_drift_shapes(void)
{
    double none[64], r[64];
    bool u = false;
    for (int i = 0; i < 64; i++)
        none[i] = NAN;
    int n = (int)(sizeof h200_slow / sizeof h200_slow[0]);
    cJSON *o = dg_sustain_drift(h200_slow, none, NULL, n, false, &u);
    printf("h200 slowdown: ratio %.3f (%.3f-%.3f), noise %.1f GFLOP/s: %s\n",
           dg_jnum(o, "ratio.value"), dg_jnum(o, "ratio_ci.lo.value"),
           dg_jnum(o, "ratio_ci.hi.value"), dg_jnum(o, "noise.value"), dg_jstr(o, "verdict"));
    CHECK_STR(dg_jstr(o, "verdict"), "unstable");
    CHECK(u && dg_jnum(o, "ratio_ci.hi.value") < 0.95);
    cJSON_Delete(o);
    n = (int)(sizeof h200_healthy / sizeof h200_healthy[0]);
    o = dg_sustain_drift(h200_healthy, none, NULL, n, false, &u);
    printf("h200 healthy: ratio %.4f (%.4f-%.4f), noise %.1f GFLOP/s: %s\n",
           dg_jnum(o, "ratio.value"), dg_jnum(o, "ratio_ci.lo.value"),
           dg_jnum(o, "ratio_ci.hi.value"), dg_jnum(o, "noise.value"), dg_jstr(o, "verdict"));
    CHECK_STR(dg_jstr(o, "verdict"), "stable");
    CHECK(!u && dg_jnum(o, "ratio_ci.lo.value") >= 0.95 && dg_jnum(o, "ratio.value") < 1);
    cJSON_Delete(o);
    /* Short bursts: a first window 20% fast, one window at half rate in the
     * last third, one at 1.3x in the middle: stable. */
    memcpy(r, h200_healthy, sizeof h200_healthy);
    r[0] *= 1.2, r[50] *= 0.5, r[30] *= 1.3;
    CHECK_STR(drift_verdict(r, none, n, &u), "stable");
    /* A controller settling: boost for two seconds (8% over), then flat
     * with 0.3% noise: stable. */
    for (int i = 0; i < 30; i++)
        r[i] = (i < 2 ? 1080 : 1000) * (1 + 0.003 * ((i * 7 % 5) - 2) / 2.0);
    CHECK_STR(drift_verdict(r, none, 30, &u), "stable");
    /* The same device slowing 10% smoothly over the run: unstable. */
    for (int i = 0; i < 30; i++)
        r[i] = (1000 - 100.0 * i / 29) * (1 + 0.003 * ((i * 7 % 5) - 2) / 2.0);
    CHECK_STR(drift_verdict(r, none, 30, &u), "unstable");
}

static void check_health_summary(void)
{
    dg_health_sample s[6] = {0};
    for (int i = 0; i < 6; i++) {
        s[i].t = i;
        s[i].sm_mhz = (dg_metric){1980 - 100.0 * (i >= 3), true};
        s[i].reasons_valid = true;
        s[i].energy_j = (dg_metric){1000 + 700.0 * i, true};
    }
    s[3].reasons = 0x40; /* hw thermal slowdown for two samples */
    s[4].reasons = 0x40 | 0x4;
    s[5].reasons = 0x1; /* idle: not a slowdown */
    bool slowed = false;
    cJSON *h = dg_sustain_health(s, 6, 6.5, &slowed);
    CHECK(slowed);
    CHECK(dg_jnum(h, "sm_clock.min.value") == 1880 && dg_jnum(h, "sm_clock.max.value") == 1980);
    CHECK(dg_jnum(h, "energy.value") == 3500 && dg_jnum(h, "energy_over.value") == 5);
    /* Not reported stays null, with its unit. */
    CHECK(dg_jbool(h, "temperature.max.valid") == 0 &&
          cJSON_IsNull(dg_jpath(h, "temperature.max.value")));
    CHECK(dg_jbool(h, "power.mean.valid") == 0);
    const cJSON *r;
    int seen = 0;
    cJSON_ArrayForEach(r, dg_jpath(h, "throttle"))
    {
        const char *n = dg_jstr(r, "reason");
        if (!strcmp(n, "hw_thermal_slowdown")) {
            seen++;
            CHECK(dg_jnum(r, "seconds.value") == 2 && dg_jbool(r, "slows") == 1);
        } else if (!strcmp(n, "gpu_idle")) {
            seen++;
            CHECK(dg_jnum(r, "seconds.value") == 1.5 && dg_jbool(r, "slows") == 0);
        } else if (!strcmp(n, "sw_power_cap")) {
            seen++;
            CHECK(dg_jnum(r, "seconds.value") == 1);
        }
    }
    CHECK(seen == 3);
    cJSON_Delete(h);
    /* Idle alone is no slowdown. */
    s[3].reasons = s[4].reasons = 0x1;
    h = dg_sustain_health(s, 6, 6.5, &slowed);
    CHECK(!slowed);
    cJSON_Delete(h);
}

static void put(const char *root, const char *path, const char *text)
{
    char full[512], dir[512];
    snprintf(full, sizeof full, "%s%s", root, path);
    snprintf(dir, sizeof dir, "%s", full);
    for (char *p = dir + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(dir, 0755);
            *p = '/';
        }
    FILE *f = fopen(full, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void check_host_source(void)
{
    char root[64];
    snprintf(root, sizeof root, "/tmp/dg_health_XXXXXX");
    if (!mkdtemp(root))
        return;
    put(root, "/proc/cpuinfo",
        "processor\t: 0\ncpu MHz\t\t: 2000.0\nprocessor\t: 1\ncpu MHz\t\t: "
        "3000.0\n");
    put(root, "/sys/class/thermal/thermal_zone0/temp", "45000\n");
    put(root, "/sys/class/thermal/thermal_zone1/temp", "61000\n");
    put(root, "/sys/class/powercap/intel-rapl:0/energy_uj", "1000000\n");
    put(root, "/sys/devices/system/cpu/cpu0/thermal_throttle/core_throttle_count", "5\n");
    put(root, "/sys/devices/system/cpu/cpu0/thermal_throttle/package_throttle_count", "1\n");
    dg_device_info info = {.host_memory = true};
    dg_health *h = dg_health_open(&info, false, root);
    dg_health_sample a, b;
    dg_health_read(h, 10, NULL, &a);
    CHECK(a.sm_mhz.valid && a.sm_mhz.value == 2500 && !a.mem_mhz.valid);
    CHECK(a.temp_c.valid && a.temp_c.value == 61);
    CHECK(a.energy_j.valid && a.energy_j.value == 1 && !a.power_w.valid);
    CHECK(a.reasons_valid && a.reasons == 0 && a.throttle_events.value == 6);
    put(root, "/sys/class/powercap/intel-rapl:0/energy_uj", "41000000\n");
    put(root, "/sys/devices/system/cpu/cpu0/thermal_throttle/core_throttle_count", "7\n");
    dg_health_read(h, 12, &a, &b);
    CHECK(b.power_w.valid && fabs(b.power_w.value - 20) < 1e-9);
    CHECK(b.reasons == DG_HEALTH_HOST_THERMAL && dg_health_reason_slows(b.reasons));
    dg_health_close(h);
    /* A tree without those files: every field not reported. */
    char empty[96];
    snprintf(empty, sizeof empty, "%s/none", root);
    h = dg_health_open(&info, false, empty);
    dg_health_read(h, 1, NULL, &a);
    CHECK(!a.sm_mhz.valid && !a.temp_c.valid && !a.energy_j.valid && !a.power_w.valid &&
          !a.reasons_valid);
    dg_health_close(h);
    /* A device off the host (an OpenCL GPU) is not read from the host's files. */
    dg_device_info gpu = {.host_memory = false};
    h = dg_health_open(&gpu, false, root);
    dg_health_read(h, 1, NULL, &a);
    CHECK(!strncmp(dg_health_source(h), "none", 4) && !a.sm_mhz.valid && !a.temp_c.valid);
    dg_health_close(h);
    /* NVML asked for a device at an address no device has: a source that
     * reports nothing, saying why (NVML loaded or not: an address, not "no
     * address", which on a machine of one GPU names that GPU). */
    dg_device_info nowhere = {.host_memory = false};
    snprintf(nowhere.pci_bus_id, sizeof nowhere.pci_bus_id, "0000:ff:1f.7");
    h = dg_health_open(&nowhere, true, NULL);
    CHECK(!strncmp(dg_health_source(h), "none", 4));
    dg_health_read(h, 1, NULL, &a);
    CHECK(!a.sm_mhz.valid && !a.power_w.valid && !a.reasons_valid);
    dg_health_close(h);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        printf("note: %s left behind\n", root);
}

/* ---- the health source through a fake NVML (fake_nvml.h) ---- */
/* The H200's figures at work: SM 1980 MHz, memory 3201 MHz, 64 C. */
static dg_nvml_ret fake_clock(dg_nvml_device d, int which, unsigned *v)
{
    if (!fake_ok(d))
        return 2;
    if (which == DG_NVML_CLOCK_SM)
        *v = 1980;
    else if (which == DG_NVML_CLOCK_MEM)
        *v = 3201;
    else
        return 3; /* NVML_ERROR_NOT_SUPPORTED */
    return DG_NVML_OK;
}
static dg_nvml_ret fake_temp(dg_nvml_device d, int sensor, unsigned *v)
{
    *v = 64;
    return fake_ok(d) && sensor == 0 ? DG_NVML_OK : 2;
}
static dg_nvml_ret fake_power(dg_nvml_device d, unsigned *mw)
{
    *mw = 684674; /* milliwatts */
    return fake_ok(d) ? DG_NVML_OK : 2;
}
static dg_nvml_ret fake_energy(dg_nvml_device d, unsigned long long *mj)
{
    *mj = 40610369ULL; /* millijoules */
    return fake_ok(d) ? DG_NVML_OK : 2;
}
static dg_nvml_ret fake_reasons(dg_nvml_device d, unsigned long long *bits)
{
    *bits = DG_NVML_THROTTLE_SW_POWER_CAP | DG_NVML_THROTTLE_APP_CLOCKS;
    return fake_ok(d) ? DG_NVML_OK : 2;
}
static dg_nvml_ret fake_no_sensor(dg_nvml_device d, int sensor, unsigned *v)
{
    (void)d, (void)sensor, (void)v;
    return 3; /* NVML_ERROR_NOT_SUPPORTED */
}

/* The NVML source's reading and its units through a fake NVML, the path
 * only a machine with NVML takes: milliwatts to W, millijoules to J, MHz,
 * C and the reason bits as NVML gives them; a call NVML lacks or refuses is
 * not reported; a device it does not list is never read. */
static void check_nvml_source(void)
{
    dg_nvml nv = fake_nvml();
    nv.clock = fake_clock, nv.temperature = fake_temp, nv.power = fake_power;
    nv.energy = fake_energy, nv.throttle = fake_reasons;
    dg_health *h = dg_health_open_nvml(&nv, FAKE_PCI, NULL);
    dg_health_sample a;
    CHECK_STR(dg_health_source(h), "NVML");
    dg_health_read(h, 3, NULL, &a);
    CHECK(a.t == 3 && a.sm_mhz.valid && a.sm_mhz.value == 1980 && a.mem_mhz.valid &&
          a.mem_mhz.value == 3201);
    CHECK(a.temp_c.valid && a.temp_c.value == 64);
    CHECK(a.power_w.valid && fabs(a.power_w.value - 684.674) < 1e-9);
    CHECK(a.energy_j.valid && fabs(a.energy_j.value - 40610.369) < 1e-9);
    CHECK(a.reasons_valid && a.reasons == (DG_NVML_THROTTLE_SW_POWER_CAP | 0x2));
    CHECK(!a.throttle_events.valid); /* a host-only field */
    dg_health_close(h);
    /* A driver without the power, energy and reason calls, one refusing the
     * temperature: those not reported, the clocks still read. */
    dg_nvml old = nv;
    old.power = NULL, old.energy = NULL, old.throttle = NULL;
    old.temperature = fake_no_sensor;
    h = dg_health_open_nvml(&old, FAKE_PCI, NULL);
    dg_health_read(h, 1, NULL, &a);
    CHECK(a.sm_mhz.valid && !a.temp_c.valid && !a.power_w.valid && !a.energy_j.valid &&
          !a.reasons_valid && a.reasons == 0);
    dg_health_close(h);
    /* An address NVML does not list: nothing read, never through an unset handle. */
    fake_bad_handle = 0;
    h = dg_health_open_nvml(&nv, "0000:ff:1f.7", NULL);
    dg_health_read(h, 1, NULL, &a);
    CHECK(!strncmp(dg_health_source(h), "none", 4) && !a.sm_mhz.valid && !a.power_w.valid &&
          !a.reasons_valid);
    CHECK(fake_bad_handle == 0);
    dg_health_close(h);
    /* No address: a lone device is the one; of two, neither. */
    h = dg_health_open_nvml(&nv, "", NULL);
    CHECK_STR(dg_health_source(h), "NVML");
    dg_health_close(h);
    fake_devices = 2;
    h = dg_health_open_nvml(&nv, NULL, "a test");
    CHECK(!strncmp(dg_health_source(h), "none", 4) && strstr(dg_health_source(h), "a test"));
    dg_health_close(h);
    fake_devices = 1;
    /* NVML that did not load: none. */
    h = dg_health_open_nvml(NULL, FAKE_PCI, "libnvidia-ml.so.1: cannot open");
    CHECK(!strncmp(dg_health_source(h), "none", 4) && strstr(dg_health_source(h), "cannot open"));
    dg_health_close(h);
}

static void check_on_cpu(void)
{
    const dg_backend_iface *be = dg_backend_cpu_iface();
    void *bctx = NULL;
    char why[256];
    if (be->init(0, &bctx, why, sizeof why) != DG_OK)
        return;
    dg_device_info info;
    CHECK(be->device_info(bctx, 0, &info) == DG_OK && info.host_memory);
    dg_sustain_opts so = {.seconds = 3, .load = 0.5};
    bool bad = true;
    cJSON *o = dg_gate_sustain(be, bctx, &info, NAN, &so, &bad);
    CHECK(o && dg_jnum(o, "rate.value") > 0 && cJSON_GetArraySize(dg_jpath(o, "windows")) >= 2);
    CHECK(dg_jbool(o, "ok") != 0 && !bad && dg_jbool(o, "fraction_of_peak.valid") == 0);
    CHECK(cJSON_GetArraySize(dg_jpath(o, "health.samples")) >= 3);
    CHECK(dg_jnum(o, "load.value") == 0.5 && dg_jstr(o, "source") &&
          !strncmp(dg_jstr(o, "source"), "host", 4));
    cJSON_Delete(o);
    o = dg_gate_membw(be, bctx, &info, 1e6, "a test", &bad);
    CHECK(o && dg_jnum(o, "bandwidth.value") > 0 && bad && dg_jbool(o, "ok") == 0);
    printf("cpu: relu_fwd streams %.2f GB/s over %.0f MiB\n", dg_jnum(o, "bandwidth.value"),
           dg_jnum(o, "bytes") / (1 << 20));
    cJSON_Delete(o);
    o = dg_gate_membw(be, bctx, &info, NAN, NULL, &bad);
    CHECK(o && !bad && dg_jbool(o, "ok") == -1 && dg_jbool(o, "rated.valid") == 0);
    cJSON_Delete(o);
    be->free(bctx);
    /* A device that slows as it works: its last windows fall well below its first. */
    setenv("DEVGATE_FAULT", "gemm-slowdown@cpu", 1);
    dg_ctx *ctx = dg_ctx_new();
    dg_backend_entry e;
    if (dg_backend_lookup(ctx, "cpu", &e) == DG_OK &&
        e.iface->init(0, &bctx, why, sizeof why) == DG_OK) {
        so = (dg_sustain_opts){.seconds = 9};
        o = dg_gate_sustain(e.iface, bctx, &info, NAN, &so, &bad);
        double first = dg_jnum(o, "drift.first_third.value"),
               last = dg_jnum(o, "drift.last_third.value");
        int judged = (int)dg_jnum(o, "drift.windows_judged");
        printf("gemm-slowdown: first third %.1f, last third %.1f GFLOP/s, %d windows judged: %s\n",
               first, last, judged, dg_jstr(o, "drift.verdict"));
        const cJSON *w = dg_jpath(o, "windows");
        int n = cJSON_GetArraySize(w);
        CHECK(n >= 6 && cJSON_GetArrayItem(w, n - 1)->valuedouble <
                            0.6 * cJSON_GetArrayItem(w, 0)->valuedouble);
        /* Judged (no contention), it is unstable and the check fails. */
        if (judged >= 6)
            CHECK(bad && dg_jbool(o, "ok") == 0 &&
                  !strcmp(dg_jstr(o, "drift.verdict"), "unstable"));
        cJSON_Delete(o);
        e.iface->free(bctx);
    }
    unsetenv("DEVGATE_FAULT");
    dg_ctx_free(ctx);
}

int main(void)
{
    check_drift();
    check_drift_shapes();
    check_health_summary();
    check_host_source();
    check_nvml_source();
    check_on_cpu();
    CHECK_DONE();
}
