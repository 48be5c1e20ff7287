/* The device's health while it works (health.h): clocks, temperature,
 * power, energy and throttle reasons, from NVML on an NVIDIA GPU (found by
 * its PCI address) and from what Linux offers for the host CPU (a CPU
 * device: the cpu backend, PoCL). Whatever a source does not give is "not
 * reported" (valid false), never 0. */
#include "measure/health.h"

#include "core/core.h"
#include "measure/nvml.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct dg_health {
    bool nvidia;
    dg_nvml nv;
    dg_nvml_device dev;
    char root[256]; /* host: prefix of /proc and /sys ("" the real ones) */
    char source[160];
};

const char *dg_health_reason_name(unsigned long long bit)
{
    switch (bit) {
    case DG_NVML_THROTTLE_IDLE: return "gpu_idle";
    case DG_NVML_THROTTLE_APP_CLOCKS: return "applications_clocks_setting";
    case DG_NVML_THROTTLE_SW_POWER_CAP: return "sw_power_cap";
    case DG_NVML_THROTTLE_HW_SLOWDOWN: return "hw_slowdown";
    case DG_NVML_THROTTLE_SYNC_BOOST: return "sync_boost";
    case DG_NVML_THROTTLE_SW_THERMAL: return "sw_thermal_slowdown";
    case DG_NVML_THROTTLE_HW_THERMAL: return "hw_thermal_slowdown";
    case DG_NVML_THROTTLE_HW_POWER_BRAKE: return "hw_power_brake_slowdown";
    case DG_NVML_THROTTLE_DISPLAY_CLOCKS: return "display_clock_setting";
    case DG_HEALTH_HOST_THERMAL: return "cpu_thermal_throttle";
    }
    return "other";
}

bool dg_health_reason_slows(unsigned long long bit)
{
    return bit == DG_NVML_THROTTLE_SW_POWER_CAP || bit == DG_NVML_THROTTLE_HW_SLOWDOWN ||
           bit == DG_NVML_THROTTLE_SW_THERMAL || bit == DG_NVML_THROTTLE_HW_THERMAL ||
           bit == DG_NVML_THROTTLE_HW_POWER_BRAKE || bit == DG_HEALTH_HOST_THERMAL;
}

dg_health *dg_health_open_nvml(const dg_nvml *nv, const char *pci_bus_id, const char *err)
{
    dg_health *h = dg_calloc(1, sizeof *h);
    dg_nvml_device dev = NULL;
    /* A handle a failed lookup left unset is no device: never read through it. */
    if (h && nv && nv->count && dg_nvml_find(nv, pci_bus_id, &dev) == DG_NVML_OK && dev) {
        h->nv = *nv;
        h->dev = dev;
        h->nvidia = true;
        snprintf(h->source, sizeof h->source, "NVML");
        return h;
    }
    if (nv) {
        dg_nvml closing = *nv;
        dg_nvml_close(&closing);
    }
    if (!h)
        return NULL;
    snprintf(h->source, sizeof h->source, "none: NVML not loaded or the device not found (%s)",
             err && err[0] ? err : "no such device");
    return h;
}

dg_health *dg_health_open(const dg_device_info *info, bool nvidia, const char *host_root)
{
    if (nvidia) {
        dg_nvml nv;
        char err[200] = "", pci[sizeof info->pci_bus_id + 1] = "";
        bool loaded = dg_nvml_open(&nv, err, sizeof err) == DG_NVML_LOADED;
        if (info)
            snprintf(pci, sizeof pci, "%.*s", (int)sizeof info->pci_bus_id, info->pci_bus_id);
        return dg_health_open_nvml(loaded ? &nv : NULL, pci, err);
    }
    dg_health *h = dg_calloc(1, sizeof *h);
    if (!h)
        return NULL;
    if (info && !info->host_memory) { /* the host's figures are not this device's */
        snprintf(h->source, sizeof h->source,
                 "none: the platform reports no health for this device (NVML covers NVIDIA "
                 "GPUs only)");
        return h;
    }
    snprintf(h->root, sizeof h->root, "%s", host_root ? host_root : "");
    snprintf(h->source, sizeof h->source,
             "host: /proc/cpuinfo, /sys (thermal, powercap, thermal_throttle)");
    return h;
}

const char *dg_health_source(const dg_health *h)
{
    return h ? h->source : "none";
}

void dg_health_close(dg_health *h)
{
    if (!h)
        return;
    if (h->nvidia)
        dg_nvml_close(&h->nv);
    dg_free(h);
}

/* ---- NVML ------------------------------------------------------------------------ */

static dg_metric uint_m(dg_nvml_ret (*fn)(dg_nvml_device, int, unsigned int *), dg_nvml_device d,
                        int arg, double scale)
{
    unsigned int v = 0;
    return fn && fn(d, arg, &v) == DG_NVML_OK ? (dg_metric){v * scale, true} : (dg_metric){0, 0};
}

static void read_nvml(dg_health *h, dg_health_sample *s)
{
    dg_nvml *nv = &h->nv;
    s->sm_mhz = uint_m(nv->clock, h->dev, DG_NVML_CLOCK_SM, 1);
    s->mem_mhz = uint_m(nv->clock, h->dev, DG_NVML_CLOCK_MEM, 1);
    s->temp_c = uint_m(nv->temperature, h->dev, 0, 1);
    unsigned int mw = 0;
    if (nv->power && nv->power(h->dev, &mw) == DG_NVML_OK)
        s->power_w = (dg_metric){mw / 1000.0, true};
    unsigned long long mj = 0, bits = 0;
    if (nv->energy && nv->energy(h->dev, &mj) == DG_NVML_OK)
        s->energy_j = (dg_metric){mj / 1000.0, true};
    if (nv->throttle && nv->throttle(h->dev, &bits) == DG_NVML_OK) {
        s->reasons = bits;
        s->reasons_valid = true;
    }
}

/* ---- the host --------------------------------------------------------------------- */

static char *host_file(const dg_health *h, const char *path, size_t max)
{
    char full[512];
    snprintf(full, sizeof full, "%s%s", h->root, path);
    return dg_read_file(full, max, NULL);
}

/* The mean "cpu MHz" of /proc/cpuinfo. */
static dg_metric host_mhz(const dg_health *h)
{
    char *t = host_file(h, "/proc/cpuinfo", 1 << 20);
    double sum = 0;
    int n = 0;
    for (const char *p = t ? strstr(t, "cpu MHz") : NULL; p; p = strstr(p + 1, "cpu MHz")) {
        const char *c = strchr(p, ':');
        double v = c ? strtod(c + 1, NULL) : NAN;
        if (isfinite(v) && v > 0)
            sum += v, n++;
    }
    dg_free(t);
    return n ? (dg_metric){sum / n, true} : (dg_metric){0, false};
}

/* The hottest thermal zone (millidegrees in the files). */
static dg_metric host_temp(const dg_health *h)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/sys/class/thermal", h->root);
    DIR *d = opendir(dir);
    double best = NAN;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "thermal_zone", 12) != 0)
            continue;
        char path[600];
        snprintf(path, sizeof path, "/sys/class/thermal/%.200s/temp", e->d_name);
        char *t = host_file(h, path, 64);
        double v = t ? strtod(t, NULL) / 1000.0 : NAN;
        dg_free(t);
        if (isfinite(v) && v > -50 && v < 200 && !(v <= best))
            best = v;
    }
    if (d)
        closedir(d);
    return isfinite(best) ? (dg_metric){best, true} : (dg_metric){0, false};
}

/* RAPL package energy (microjoules in the file; intel-rapl:0 only). */
static dg_metric host_energy(const dg_health *h)
{
    char *t = host_file(h, "/sys/class/powercap/intel-rapl:0/energy_uj", 64);
    double v = t ? strtod(t, NULL) : NAN;
    dg_free(t);
    return isfinite(v) && v >= 0 ? (dg_metric){v / 1e6, true} : (dg_metric){0, false};
}

/* Thermal throttle events of every CPU, summed (core and package counters). */
static bool host_throttle_count(const dg_health *h, double *count)
{
    *count = 0;
    bool any = false;
    for (int cpu = 0; cpu < 4096; cpu++) {
        bool seen = false;
        static const char *const kinds[] = {"core", "package"};
        for (int k = 0; k < 2; k++) {
            char path[160];
            snprintf(path, sizeof path,
                     "/sys/devices/system/cpu/cpu%d/thermal_throttle/%s_throttle_count", cpu,
                     kinds[k]);
            char *t = host_file(h, path, 64);
            if (t) {
                *count += strtod(t, NULL);
                seen = any = true;
            }
            dg_free(t);
        }
        if (!seen)
            break;
    }
    return any;
}

static void read_host(dg_health *h, dg_health_sample *s, const dg_health_sample *prev)
{
    s->sm_mhz = host_mhz(h);
    s->temp_c = host_temp(h);
    s->energy_j = host_energy(h);
    /* Power from the energy counter between two reads. */
    if (prev && prev->energy_j.valid && s->energy_j.valid && s->t > prev->t &&
        s->energy_j.value >= prev->energy_j.value)
        s->power_w =
            (dg_metric){(s->energy_j.value - prev->energy_j.value) / (s->t - prev->t), true};
    double n = 0;
    if (host_throttle_count(h, &n)) {
        s->throttle_events = (dg_metric){n, true};
        s->reasons_valid = true;
        if (prev && prev->throttle_events.valid && n > prev->throttle_events.value)
            s->reasons = DG_HEALTH_HOST_THERMAL;
    }
}

/* Test hook: DEVGATE_FAULT=health-slow@MS makes every read take MS more
 * milliseconds (tests/cli/test_train.sh: the reads stay out of the timed wall). */
static void health_fault_delay(void)
{
    const char *f = getenv("DEVGATE_FAULT");
    if (!f || strncmp(f, "health-slow@", 12) != 0)
        return;
    long ms = strtol(f + 12, NULL, 10);
    if (ms > 0 && ms <= 10000)
        nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
}

void dg_health_read(dg_health *h, double t, const dg_health_sample *prev, dg_health_sample *out)
{
    memset(out, 0, sizeof *out);
    out->t = t;
    if (!h)
        return;
    health_fault_delay();
    if (h->nvidia)
        read_nvml(h, out);
    else if (strncmp(h->source, "host", 4) == 0)
        read_host(h, out, prev);
}
