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

/* Level 2's link check of an open backend's device 0 against rating: the
 * "link" object of docs/schema/gate.md. *bad when a copy failed or a
 * page-locked copy ran under DG_LINK_MIN_FRACTION of the rating. NULL only
 * when out of memory. */
cJSON *dg_gate_link(const dg_backend_iface *be, void *bctx, const dg_link_rating *rating,
                    bool *bad);
#endif
