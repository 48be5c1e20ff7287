/* Level 2 of the gate: host <-> device bandwidth, both ways, from pageable
 * memory (malloc) and from page-locked memory (the backend's host_alloc),
 * against the link's rated bandwidth (gate_health.h).
 *
 * The transfer size doubles from 4 MiB until one page-locked upload takes
 * LINK_MIN_S (or LINK_MAX_BYTES), so the fixed cost of a call does not
 * dominate; each of the four ways is then the median of LINK_REPS timed
 * copies after one untimed. The rating is PCIe generation x width as NVML
 * reports the link's maximum (per direction, after line coding); a device
 * that computes in host memory (a CPU device) has no link to judge. The
 * page-locked figures (the pageable ones when the backend offers no
 * page-locked memory) are judged: under DG_LINK_MIN_FRACTION of the rating
 * in either direction the link is slow (the link-slow finding). The NVML
 * device is found by the backend's PCI address. */
#include "steps/gate_health.h"

#include "core/json.h"
#include "measure/nvml.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LINK_MIN_S 0.01
#define LINK_START_BYTES ((size_t)4 << 20)
#define LINK_MAX_BYTES ((size_t)256 << 20)
enum { LINK_REPS = 5 };

/* GB/s per lane of PCIe generations 1..6, after line coding (8b/10b for 1-2,
 * 128b/130b for 3-5, 242B/256B FLIT for 6). */
static const double lane_gbps[] = {0, 0.25, 0.5, 0.9846, 1.9692, 3.9385, 7.5630};

double dg_pcie_gbps(unsigned gen, unsigned width)
{
    if (gen < 1 || gen >= sizeof lane_gbps / sizeof lane_gbps[0] || width < 1 || width > 32)
        return NAN;
    return lane_gbps[gen] * width;
}

static void rating_reset(dg_link_rating *r)
{
    memset(r, 0, sizeof *r);
    r->gbps = NAN;
}

void dg_link_rating_read(const dg_nvml *nv, const char *pci_bus_id, dg_link_rating *r)
{
    rating_reset(r);
    dg_nvml_device dev = NULL;
    unsigned gen = 0, width = 0, cg = 0, cw = 0;
    /* Nothing is asked of a device NVML did not hand out: a handle left
     * unset by a failed lookup is no device (it crashed NVML's callee). */
    if (dg_nvml_find(nv, pci_bus_id, &dev) != DG_NVML_OK || !dev) {
        r->why = "not reported: NVML does not list this device";
        return;
    }
    if (!nv->pcie_max_gen || !nv->pcie_max_width || nv->pcie_max_gen(dev, &gen) != DG_NVML_OK ||
        nv->pcie_max_width(dev, &width) != DG_NVML_OK)
        r->why = "not reported: NVML gives no PCIe link generation or width";
    else if (isnan(r->gbps = dg_pcie_gbps(gen, width)))
        r->why = "not reported: NVML's PCIe generation or width is out of range";
    else
        snprintf(r->kind, sizeof r->kind, "PCIe %u.0 x%u", gen, width);
    if (nv->pcie_gen && nv->pcie_width && nv->pcie_gen(dev, &cg) == DG_NVML_OK &&
        nv->pcie_width(dev, &cw) == DG_NVML_OK && !isnan(dg_pcie_gbps(cg, cw)))
        snprintf(r->current, sizeof r->current, "PCIe %u.0 x%u", cg, cw);
}

void dg_link_rating_nvml(const dg_device_info *info, dg_link_rating *r)
{
    rating_reset(r);
    if (info->host_memory) {
        snprintf(r->kind, sizeof r->kind, "host memory");
        r->why = "not judged: the device computes in host memory (a CPU device); no link to cross";
        return;
    }
    dg_nvml nv;
    char err[256];
    if (dg_nvml_open(&nv, err, sizeof err) != DG_NVML_LOADED) {
        r->why = "not reported: NVML is not loaded (the rating is read from NVML on NVIDIA GPUs)";
        return;
    }
    char pci[sizeof info->pci_bus_id + 1];
    snprintf(pci, sizeof pci, "%.*s", (int)sizeof info->pci_bus_id, info->pci_bus_id);
    dg_link_rating_read(&nv, pci, r);
    dg_nvml_close(&nv);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct way {
    const char *key;
    bool up, pinned;
    double gbps;
} way;

/* One copy of bytes; its seconds, NAN on failure (*st set). */
static double copy_once(const dg_backend_iface *be, void *bctx, void *dbuf, void *host,
                        size_t bytes, const way *w, dg_status *st)
{
    double t0 = dg_now();
    if (w->up) {
        *st = be->upload(bctx, dbuf, 0, host, bytes);
        if (*st == DG_OK && w->pinned && be->host_wait)
            *st = be->host_wait(bctx, host);
    } else {
        *st = be->download(bctx, dbuf, 0, host, bytes);
    }
    if (*st == DG_OK)
        *st = be->synchronize(bctx);
    return *st == DG_OK ? dg_now() - t0 : NAN;
}

cJSON *dg_gate_link(const dg_backend_iface *be, void *bctx, const dg_link_rating *rating, bool *bad)
{
    bool slow = false;
    *bad = false;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    const char *kind = rating->kind, *cur = rating->current, *why = rating->why;
    double rated = rating->gbps;
    way ways[4] = {{"h2d_pageable", true, false, NAN},
                   {"h2d_pinned", true, true, NAN},
                   {"d2h_pageable", false, false, NAN},
                   {"d2h_pinned", false, true, NAN}};
    size_t bytes = LINK_START_BYTES;
    void *dbuf = NULL, *pinned = NULL;
    char *page = NULL;
    dg_status st = DG_OK;
    const char *stage = "buf_alloc";
    /* Size: double until a page-locked (else pageable) upload takes LINK_MIN_S. */
    for (;;) {
        if ((st = be->buf_alloc(bctx, bytes, &dbuf)) != DG_OK)
            break;
        stage = "host memory";
        page = dg_malloc(bytes);
        if (!page) {
            st = DG_ERR_NOMEM;
            break;
        }
        memset(page, 1, bytes); /* faulted in before timing */
        if (be->host_alloc && be->host_alloc(bctx, bytes, &pinned) == DG_OK)
            memset(pinned, 1, bytes);
        else
            pinned = NULL;
        stage = "upload";
        way probe = {"", true, pinned != NULL, NAN};
        double t = copy_once(be, bctx, dbuf, pinned ? pinned : page, bytes, &probe, &st);
        if (st != DG_OK || t >= LINK_MIN_S || bytes >= LINK_MAX_BYTES)
            break;
        be->buf_free(bctx, dbuf);
        if (pinned)
            be->host_free(bctx, pinned);
        dg_free(page);
        dbuf = pinned = NULL;
        page = NULL;
        bytes *= 2;
    }
    for (int k = 0; k < 4 && st == DG_OK; k++) {
        if (ways[k].pinned && !pinned)
            continue;
        void *host = ways[k].pinned ? pinned : page;
        double t[LINK_REPS];
        stage = ways[k].up ? "upload" : "download";
        copy_once(be, bctx, dbuf, host, bytes, &ways[k], &st); /* untimed */
        for (int i = 0; i < LINK_REPS && st == DG_OK; i++)
            t[i] = copy_once(be, bctx, dbuf, host, bytes, &ways[k], &st);
        if (st != DG_OK)
            break;
        qsort(t, LINK_REPS, sizeof t[0], cmp_d);
        ways[k].gbps = t[LINK_REPS / 2] > 0 ? bytes / t[LINK_REPS / 2] / 1e9 : NAN;
    }
    if (dbuf)
        be->buf_free(bctx, dbuf);
    if (pinned)
        be->host_free(bctx, pinned);
    dg_free(page);

    dg_json_add_str(o, "kind", kind[0] ? kind : NULL);
    dg_json_add_str(o, "current", cur[0] ? cur : NULL);
    cJSON_AddItemToObject(o, "rated", dg_json_metric(rated, isfinite(rated), "GB/s"));
    dg_json_add_str(o, "rated_reason", why);
    cJSON_AddNumberToObject(o, "bytes", (double)bytes);
    cJSON_AddNumberToObject(o, "reps", LINK_REPS);
    cJSON_AddBoolToObject(o, "pinned_offered", be->host_alloc != NULL);
    for (int k = 0; k < 4; k++) {
        bool ok = isfinite(ways[k].gbps);
        cJSON_AddItemToObject(o, ways[k].key, dg_json_metric(ok ? ways[k].gbps : 0, ok, "GB/s"));
    }
    int pinned_ok = isfinite(ways[1].gbps) + isfinite(ways[3].gbps);
    cJSON *fr = cJSON_AddObjectToObject(o, "fraction_of_rated");
    bool judged = false;
    for (int k = 0; k < 4; k++) {
        double f = ways[k].gbps / rated;
        bool ok = isfinite(f);
        cJSON_AddItemToObject(fr, ways[k].key, dg_json_metric(ok ? f : 0, ok, "fraction"));
        /* The page-locked figures are the link's; without them, the pageable ones. */
        if (ok && ways[k].pinned == (pinned_ok > 0)) {
            judged = true;
            slow |= f < DG_LINK_MIN_FRACTION;
        }
    }
    cJSON_AddNumberToObject(o, "min_fraction", DG_LINK_MIN_FRACTION);
    if (st != DG_OK) {
        char e[400];
        snprintf(e, sizeof e, "%s failed (%s): %s", stage, dg_status_name(st),
                 st == DG_ERR_NOMEM ? "out of host memory" : be->last_error(bctx));
        cJSON_AddFalseToObject(o, "ok");
        cJSON_AddStringToObject(o, "reason", e);
        *bad = true;
    } else if (!judged) {
        cJSON_AddNullToObject(o, "ok");
        cJSON_AddStringToObject(o, "reason",
                                why ? why : "not judged: no figure to hold to the rating");
    } else {
        cJSON_AddBoolToObject(o, "ok", !slow);
        if (slow)
            cJSON_AddStringToObject(o, "reason",
                                    "slow: a copy ran under the rated bandwidth's "
                                    "minimum fraction");
        else
            cJSON_AddNullToObject(o, "reason");
        *bad = slow;
    }
    return o;
}
