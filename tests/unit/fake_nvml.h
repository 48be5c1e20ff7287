/* A fake NVML for the unit tests of what reads NVML (the gate's link
 * rating, the health source): one device at FAKE_PCI, fake_devices listed
 * when no address is given; every call through a handle the fake never gave
 * counts in fake_bad_handle (real NVML crashes on one: the H200's segfault).
 * A test sets the entry points it needs on top of fake_nvml()'s. */
#ifndef DG_FAKE_NVML_H
#define DG_FAKE_NVML_H
#include "measure/nvml.h"

#include <stdint.h>
#include <string.h>

#define FAKE_PCI "00000000:1B:00.0"
#define FAKE_NOT_FOUND 6 /* NVML_ERROR_NOT_FOUND */
static struct dg_nvml_dev_s *const fake_dev = (struct dg_nvml_dev_s *)(uintptr_t)0x5eed;
static unsigned fake_devices = 1;
static int fake_bad_handle;

static inline dg_nvml_ret fake_by_pci(const char *pci, dg_nvml_device *dev)
{
    if (strcmp(pci, FAKE_PCI) != 0)
        return FAKE_NOT_FOUND; /* *dev left as it was, as NVML leaves it */
    *dev = fake_dev;
    return DG_NVML_OK;
}

static inline dg_nvml_ret fake_count(unsigned *n)
{
    *n = fake_devices;
    return DG_NVML_OK;
}

static inline dg_nvml_ret fake_handle(unsigned i, dg_nvml_device *dev)
{
    if (i >= fake_devices)
        return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *dev = fake_dev;
    return DG_NVML_OK;
}

/* Whether d is the fake's device; counts the calls through any other. */
static inline bool fake_ok(dg_nvml_device d)
{
    fake_bad_handle += d != fake_dev;
    return d == fake_dev;
}

static inline dg_nvml fake_nvml(void)
{
    return (dg_nvml){.count = fake_count, .handle = fake_handle, .by_pci = fake_by_pci};
}
#endif
