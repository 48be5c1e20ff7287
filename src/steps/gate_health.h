/* The gate's device checks beyond numerics (docs/cli.md "Levels"): level 2's
 * host <-> device link (gate_link.c) and level 3's sustained load with the
 * device's health sampled and its memory bandwidth (gate_sustain.c). */
#ifndef DG_GATE_HEALTH_H
#define DG_GATE_HEALTH_H

#include "backend/backend.h"
#include "core/core.h"
#include "core/json.h"

/* A page-locked copy under this fraction of the link's rating is slow (the
 * link_min_fraction threshold's default, docs/rules.md). */
#define DG_LINK_MIN_FRACTION 0.5

/* GB/s one way of a PCIe link of generation gen and width lanes, after line
 * coding; NAN outside generations 1-6 and widths 1-32. */
double dg_pcie_gbps(unsigned gen, unsigned width);

/* A link's rated bandwidth: gbps one way (NAN: not reported, with why), its
 * kind ("PCIe 5.0 x16", "host memory") and the state it is in now. */
typedef struct dg_link_rating {
    double gbps;
    char kind[48], current[48];
    const char *why; /* static; NULL when rated */
} dg_link_rating;

/* The rating of the device info describes: none for a device in host memory,
 * else NVML's maximum PCIe generation and width of the device at its PCI
 * address (NVIDIA GPUs; "not reported" elsewhere). */
void dg_link_rating_nvml(const dg_device_info *info, dg_link_rating *r);

struct dg_nvml;
/* The rating from an NVML already open (tests hand in a fake one): the
 * device at pci_bus_id (NULL or "": a lone device), its maximum PCIe
 * generation and width, and the state the link is in now; "not reported"
 * (why set) when NVML does not list the device or gives no figures. */
void dg_link_rating_read(const struct dg_nvml *nv, const char *pci_bus_id, dg_link_rating *r);

/* Level 2's link check of an open backend's device 0 against rating: the
 * "link" object of docs/schema/gate.md. *bad when a copy failed or a
 * page-locked copy ran under DG_LINK_MIN_FRACTION of the rating. NULL only
 * when out of memory. */
cJSON *dg_gate_link(const dg_backend_iface *be, void *bctx, const dg_link_rating *rating,
                    bool *bad);
/* Level 3: a rate that fell by more than this (percent, the last third of the
 * windows against the first, wholly by its interval) is unstable (the
 * unstable_drift_pct threshold's default); a memory bandwidth under this
 * fraction of the rating fails. */
#define DG_UNSTABLE_DRIFT_PCT 5.0
#define DG_MEMBW_MIN_FRACTION 0.5

typedef struct dg_sustain_opts {
    double seconds;        /* how long the load runs */
    double load;           /* busy share of each period (0 or >= 1: back to back) */
    uint64_t seed;         /* the GEMM's inputs */
    const char *host_root; /* the host health source's /proc and /sys prefix (NULL: real) */
} dg_sustain_opts;

/* Level 3's sustained load on an open backend's device 0 (info its
 * description, peak_gflops its FP32 peak or NAN): the "sustain" object of
 * docs/schema/gate.md (windows, drift with its interval, health samples and
 * their summary, throttle reasons with their seconds, contention). *bad
 * when the load failed or the rate drifted down (unstable). NULL only when
 * out of memory. */
cJSON *dg_gate_sustain(const dg_backend_iface *be, void *bctx, const dg_device_info *info,
                       double peak_gflops, const dg_sustain_opts *so, bool *bad);

/* The drift of n window rates (others[i]: other processes' CPUs in window i,
 * pressure[i] (may be NULL) its CPU pressure, each NAN unknown; windows at
 * either's contention threshold or above are left out;
 * contended: the whole run was, for sources without per-window figures):
 * {windows_judged, windows_contended, first_third, last_third, ratio,
 * ratio_ci, max_drift_pct, verdict}; *unstable when the ratio's interval
 * lies wholly below 1 - DG_UNSTABLE_DRIFT_PCT%. */
cJSON *dg_sustain_drift(const double *rates, const double *others, const double *pressure, int n,
                        bool contended, bool *unstable);

struct dg_health_sample;
/* The "health" object of n samples (health.h) ending at end_t: clocks,
 * temperature, power ({min, mean, max}), the energy counter's growth, the
 * throttle reasons with their seconds (a sample stands for the time to the
 * next), the samples; *slowed when a slowing reason was set. */
cJSON *dg_sustain_health(const struct dg_health_sample *s, int n, double end_t, bool *slowed);

/* Level 3's memory bandwidth of an open backend's device 0 against rated
 * (GB/s, NAN: not reported; rated_source says where it came from): the
 * "memory_bandwidth" object. *bad when it failed or ran under
 * DG_MEMBW_MIN_FRACTION of the rating. NULL only when out of memory. */
cJSON *dg_gate_membw(const dg_backend_iface *be, void *bctx, const dg_device_info *info,
                     double rated, const char *rated_source, bool *bad);
#endif
