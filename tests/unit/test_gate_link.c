/* Gate level 2's link check (src/steps/gate_link.c): PCIe ratings from
 * generation and width; the four ways measured on the backends that open
 * here (cpu copies, PoCL's page-locked blocks); the judgement against a
 * rating handed in (a rating far above what was measured is slow, one far
 * below is not, none is not judged); a failed copy is bad with its reason;
 * a device in host memory has no link to judge. */
#include "backend/backend.h"
#include "core/core.h"
#include "steps/gate_health.h"

#include "check.h"

static void check_ratings(void)
{
    CHECK(fabs(dg_pcie_gbps(5, 16) - 63.016) < 0.01);
    CHECK(fabs(dg_pcie_gbps(4, 16) - 31.507) < 0.01);
    CHECK(fabs(dg_pcie_gbps(3, 8) - 7.877) < 0.01);
    CHECK(fabs(dg_pcie_gbps(1, 1) - 0.25) < 1e-12);
    CHECK(isnan(dg_pcie_gbps(0, 16)) && isnan(dg_pcie_gbps(7, 16)) && isnan(dg_pcie_gbps(5, 0)));
    CHECK(isnan(dg_pcie_gbps(5, 33)));
}

static cJSON *measure(dg_ctx *ctx, const char *name, double rated, bool *bad, bool *opened)
{
    *opened = false;
    dg_backend_entry e;
    if (dg_backend_lookup(ctx, name, &e) != DG_OK || !e.iface)
        return NULL;
    void *bctx = NULL;
    char reason[256];
    if (e.iface->init(0, &bctx, reason, sizeof reason) != DG_OK)
        return NULL;
    *opened = true;
    dg_link_rating r = {.gbps = rated, .why = isnan(rated) ? "not reported: a test" : NULL};
    snprintf(r.kind, sizeof r.kind, "test");
    cJSON *o = dg_gate_link(e.iface, bctx, &r, bad);
    e.iface->free(bctx);
    return o;
}

static void check_backend(dg_ctx *ctx, const char *name)
{
    bool bad = true, opened;
    cJSON *o = measure(ctx, name, 1e6, &bad, &opened);
    if (!opened) {
        printf("note: %s does not open here\n", name);
        return;
    }
    bool pinned = dg_jbool(o, "pinned_offered") == 1;
    printf("%s: h2d %.2f GB/s pageable, %.2f pinned; d2h %.2f pageable, %.2f pinned (%.0f MiB)\n",
           name, dg_jnum(o, "h2d_pageable"), dg_jnum(o, "h2d_pinned"), dg_jnum(o, "d2h_pageable"),
           dg_jnum(o, "d2h_pinned"), dg_jnum(o, "bytes") / (1 << 20));
    CHECK(dg_jnum(o, "h2d_pageable") > 0 && dg_jnum(o, "d2h_pageable") > 0);
    CHECK(pinned == (dg_jnum(o, "h2d_pinned") > 0 && dg_jnum(o, "d2h_pinned") > 0));
    CHECK(!pinned == (dg_jbool(o, "h2d_pinned.valid") == 0));
    /* Far above what any copy does: slow, and the fractions are recorded. */
    CHECK_MSG(bad && dg_jbool(o, "ok") == 0, "%s: rated 1e6 GB/s was not slow", name);
    CHECK(dg_jnum(o, "fraction_of_rated.h2d_pageable") < 0.01);
    cJSON_Delete(o);
    /* Far below: not slow. */
    o = measure(ctx, name, 1e-3, &bad, &opened);
    CHECK_MSG(!bad && dg_jbool(o, "ok") == 1 && !dg_jstr(o, "reason"), "%s: rated 1 MB/s", name);
    cJSON_Delete(o);
    /* No rating: measured, not judged. */
    o = measure(ctx, name, NAN, &bad, &opened);
    CHECK(!bad && dg_jbool(o, "ok") == -1 && dg_jnum(o, "h2d_pageable") > 0);
    CHECK(dg_jstr(o, "reason") && strstr(dg_jstr(o, "reason"), "a test"));
    cJSON_Delete(o);
}

int main(void)
{
    check_ratings();
    dg_ctx *ctx = dg_ctx_new();
    check_backend(ctx, "cpu");
    check_backend(ctx, "opencl");
    /* A copy that fails is bad, with the stage named. */
    setenv("DEVGATE_FAULT", "upload-fail@cpu", 1);
    bool bad = false, opened;
    cJSON *o = measure(ctx, "cpu", 10, &bad, &opened);
    unsetenv("DEVGATE_FAULT");
    CHECK(bad && dg_jbool(o, "ok") == 0 && dg_jstr(o, "reason") &&
          !strncmp(dg_jstr(o, "reason"), "upload failed", 13));
    cJSON_Delete(o);
    /* A CPU device has no link: not judged, whatever NVML says. */
    dg_device_info info = {.host_memory = true};
    dg_link_rating r;
    dg_link_rating_nvml(&info, &r);
    CHECK(isnan(r.gbps) && !strcmp(r.kind, "host memory") && strstr(r.why, "host memory"));
    /* A device NVML cannot be asked about is not reported, never 0. */
    dg_device_info gpu = {.host_memory = false};
    snprintf(gpu.pci_bus_id, sizeof gpu.pci_bus_id, "0000:ff:1f.7");
    dg_link_rating_nvml(&gpu, &r);
    CHECK(isnan(r.gbps) && r.why && !strncmp(r.why, "not reported", 12));
    dg_ctx_free(ctx);
    CHECK_DONE();
}
