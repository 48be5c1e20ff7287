/* The device's health while it works (health.c): clocks, temperature,
 * power, energy and throttle reasons, sampled by the gate's level 3. NVML
 * (loaded at run time) on an NVIDIA GPU; on the host CPU (the cpu backend, a
 * CPU OpenCL device) /proc/cpuinfo's clocks, /sys thermal zones, the RAPL
 * package energy counter and the thermal_throttle counters. Every field a
 * source does not give stays not reported (valid false). */
#ifndef DG_HEALTH_H
#define DG_HEALTH_H

#include "backend/backend.h"

/* A host thermal throttle event between two reads (beside NVML's bits). */
#define DG_HEALTH_HOST_THERMAL 0x10000ULL

typedef struct dg_health_sample {
    double t;                   /* s, the caller's clock */
    dg_metric sm_mhz, mem_mhz;  /* MHz: the SM (host: mean CPU) clock, the memory clock */
    dg_metric temp_c;           /* degrees C */
    dg_metric power_w;          /* W (host: from the energy counter between reads) */
    dg_metric energy_j;         /* J, a counter (since the driver loaded / RAPL's start) */
    dg_metric throttle_events;  /* host: thermal throttle events so far */
    unsigned long long reasons; /* DG_NVML_THROTTLE_* / DG_HEALTH_HOST_THERMAL bits */
    bool reasons_valid;
} dg_health_sample;

typedef struct dg_health dg_health;

/* A health source for a device: NVML's device at info->pci_bus_id when
 * nvidia (a source that reports nothing when NVML or the device is missing:
 * dg_health_source says why), else for a device in host memory (or info
 * NULL) the host read below host_root (NULL or "": the real /proc and /sys;
 * tests hand in a fixture tree), else a source that reports nothing. NULL
 * only out of host memory. */
dg_health *dg_health_open(const dg_device_info *info, bool nvidia, const char *host_root);
struct dg_nvml;
/* A source over an NVML already open (dg_health_open's NVIDIA path; tests
 * hand in a fake one): it takes *nv over (closed with the source, or now
 * when the device at pci_bus_id, NULL or "" a lone one, is not found: a
 * source that reports nothing, err (may be NULL) saying why); nv NULL: NVML
 * did not load. NULL only out of host memory (nv then closed). */
dg_health *dg_health_open_nvml(const struct dg_nvml *nv, const char *pci_bus_id, const char *err);
/* One reading at time t (s); prev (may be NULL) the one before, for rates. */
void dg_health_read(dg_health *h, double t, const dg_health_sample *prev, dg_health_sample *out);
/* "NVML", "host: ...", or "none: why". */
const char *dg_health_source(const dg_health *h);
void dg_health_close(dg_health *h);

/* The name of one reason bit ("hw_thermal_slowdown", "sw_power_cap", ...). */
const char *dg_health_reason_name(unsigned long long bit);
/* Whether a reason bit means the device was slowed (power, thermal or
 * hardware slowdown), not idle or held by a setting. */
bool dg_health_reason_slows(unsigned long long bit);
#endif
