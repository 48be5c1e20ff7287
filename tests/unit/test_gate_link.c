/* Gate level 2's link check (src/steps/gate_link.c): PCIe ratings from
 * generation and width; the four ways measured on the backends that open
 * here (cpu copies, PoCL's page-locked blocks); the judgement against a
 * rating handed in (a rating far above what was measured is slow, one far
 * below is not, none is not judged); a failed copy is bad with its reason;
 * a device in host memory has no link to judge; the rating read from NVML
 * through a fake NVML (the path only a machine with NVML takes): a device
 * it lists, one it does not (nothing asked of a handle it never gave: that
 * crashed on the H200), figures out of range, a link trained down. */
#include "backend/backend.h"
#include "core/core.h"
#include "steps/gate_health.h"

#include "check.h"
#include "fake_nvml.h"

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

/* ---- the rating through a fake NVML (fake_nvml.h) ---- */
static unsigned fake_gen = 5, fake_width = 16, fake_cur_gen = 5, fake_cur_width = 16;

static dg_nvml_ret fake_uint(dg_nvml_device dev, unsigned *out, unsigned v)
{
    if (!fake_ok(dev))
        return 2;
    *out = v;
    return DG_NVML_OK;
}
static dg_nvml_ret fake_max_gen(dg_nvml_device d, unsigned *o)
{
    return fake_uint(d, o, fake_gen);
}
static dg_nvml_ret fake_max_width(dg_nvml_device d, unsigned *o)
{
    return fake_uint(d, o, fake_width);
}
static dg_nvml_ret fake_gen_now(dg_nvml_device d, unsigned *o)
{
    return fake_uint(d, o, fake_cur_gen);
}
static dg_nvml_ret fake_width_now(dg_nvml_device d, unsigned *o)
{
    return fake_uint(d, o, fake_cur_width);
}

static void check_nvml_rating(void)
{
    dg_nvml nv = fake_nvml();
    nv.pcie_max_gen = fake_max_gen, nv.pcie_max_width = fake_max_width;
    nv.pcie_gen = fake_gen_now, nv.pcie_width = fake_width_now;
    dg_link_rating r;
    /* The device at its address: rated from the maximum, the state it is in now beside. */
    fake_cur_gen = 4, fake_cur_width = 8;
    dg_link_rating_read(&nv, FAKE_PCI, &r);
    CHECK(fabs(r.gbps - 63.016) < 0.01 && !r.why);
    CHECK_STR(r.kind, "PCIe 5.0 x16");
    CHECK_STR(r.current, "PCIe 4.0 x8");
    /* An address NVML does not list: not reported, and nothing asked of a
     * handle NVML never gave (the H200's segfault: the current link was
     * read through the unset handle). */
    fake_bad_handle = 0;
    dg_link_rating_read(&nv, "0000:ff:1f.7", &r);
    CHECK_MSG(fake_bad_handle == 0, "%d NVML calls with a handle it never gave", fake_bad_handle);
    CHECK(isnan(r.gbps) && r.why && strstr(r.why, "does not list") && !r.kind[0] && !r.current[0]);
    /* No address: a lone device is the one; two are not told apart. */
    fake_devices = 1;
    dg_link_rating_read(&nv, "", &r);
    CHECK(fabs(r.gbps - 63.016) < 0.01);
    fake_devices = 2;
    dg_link_rating_read(&nv, NULL, &r);
    CHECK(isnan(r.gbps) && r.why && !strncmp(r.why, "not reported", 12));
    /* Figures out of range (a generation NVML does not know yet): not reported, never 0. */
    fake_gen = 9;
    dg_link_rating_read(&nv, FAKE_PCI, &r);
    CHECK(isnan(r.gbps) && r.why && strstr(r.why, "out of range") && !r.kind[0]);
    fake_gen = 5;
    /* An older driver without the PCIe calls: not reported. */
    nv.pcie_max_gen = NULL;
    nv.pcie_gen = NULL;
    dg_link_rating_read(&nv, FAKE_PCI, &r);
    CHECK(isnan(r.gbps) && r.why && strstr(r.why, "no PCIe") && !r.current[0]);
    CHECK(fake_bad_handle == 0);
}

int main(void)
{
    check_nvml_rating();
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
