/* NVML loaded at run time (see nvml.h). */
#include "measure/nvml.h"

#include "core/core.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

dg_nvml_open_result dg_nvml_open(dg_nvml *nv, char *err, size_t errlen)
{
    memset(nv, 0, sizeof *nv);
    char derr[400] = "";
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    const char *why = lib ? NULL : dlerror();
    if (why)
        dg_copy_clean(derr, sizeof derr, why);
    if (!lib) {
        lib = dlopen("libnvidia-ml.so", RTLD_NOW | RTLD_LOCAL);
        if (!lib && !derr[0] && (why = dlerror()) != NULL)
            dg_copy_clean(derr, sizeof derr, why);
    }
    if (!lib) {
        if (err && errlen)
            snprintf(err, errlen, "%s", derr[0] ? derr : "libnvidia-ml not found");
        return DG_NVML_ABSENT;
    }
    dg_nvml api;
    memset(&api, 0, sizeof api);
    api.init = (dg_nvml_ret(*)(void))dlsym(lib, "nvmlInit_v2");
    api.shutdown = (dg_nvml_ret(*)(void))dlsym(lib, "nvmlShutdown");
    api.count = (dg_nvml_ret(*)(unsigned int *))dlsym(lib, "nvmlDeviceGetCount_v2");
    api.handle =
        (dg_nvml_ret(*)(unsigned int, dg_nvml_device *))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    api.name =
        (dg_nvml_ret(*)(dg_nvml_device, char *, unsigned int))dlsym(lib, "nvmlDeviceGetName");
    api.mem =
        (dg_nvml_ret(*)(dg_nvml_device, dg_nvml_memory *))dlsym(lib, "nvmlDeviceGetMemoryInfo");
    api.util =
        (dg_nvml_ret(*)(dg_nvml_device, dg_nvml_util *))dlsym(lib, "nvmlDeviceGetUtilizationRates");
    api.compute = (dg_nvml_procs_fn)dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!api.compute)
        api.compute = (dg_nvml_procs_fn)dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v2");
    api.graphics = (dg_nvml_procs_fn)dlsym(lib, "nvmlDeviceGetGraphicsRunningProcesses_v3");
    if (!api.graphics)
        api.graphics = (dg_nvml_procs_fn)dlsym(lib, "nvmlDeviceGetGraphicsRunningProcesses_v2");
    api.driver = (dg_nvml_ret(*)(char *, unsigned int))dlsym(lib, "nvmlSystemGetDriverVersion");
    api.errstr = (const char *(*)(dg_nvml_ret))dlsym(lib, "nvmlErrorString");
    api.by_pci = (dg_nvml_ret(*)(const char *, dg_nvml_device *))dlsym(
        lib, "nvmlDeviceGetHandleByPciBusId_v2");
    typedef dg_nvml_ret (*uint_fn)(dg_nvml_device, unsigned int *);
    typedef dg_nvml_ret (*clock_fn)(dg_nvml_device, int, unsigned int *);
    typedef dg_nvml_ret (*ull_fn)(dg_nvml_device, unsigned long long *);
    api.pcie_max_gen = (uint_fn)dlsym(lib, "nvmlDeviceGetMaxPcieLinkGeneration");
    api.pcie_max_width = (uint_fn)dlsym(lib, "nvmlDeviceGetMaxPcieLinkWidth");
    api.pcie_gen = (uint_fn)dlsym(lib, "nvmlDeviceGetCurrPcieLinkGeneration");
    api.pcie_width = (uint_fn)dlsym(lib, "nvmlDeviceGetCurrPcieLinkWidth");
    api.clock = (clock_fn)dlsym(lib, "nvmlDeviceGetClockInfo");
    api.max_clock = (clock_fn)dlsym(lib, "nvmlDeviceGetMaxClockInfo");
    api.temperature = (clock_fn)dlsym(lib, "nvmlDeviceGetTemperature");
    api.power = (uint_fn)dlsym(lib, "nvmlDeviceGetPowerUsage");
    api.power_limit = (uint_fn)dlsym(lib, "nvmlDeviceGetEnforcedPowerLimit");
    api.energy = (ull_fn)dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption");
    api.throttle = (ull_fn)dlsym(lib, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!api.throttle)
        api.throttle = (ull_fn)dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
    if (!api.init || !api.count || !api.handle) {
        if (err && errlen)
            snprintf(err, errlen, "libnvidia-ml lacks nvmlInit_v2 or device enumeration");
        dlclose(lib);
        return DG_NVML_NO_SYMBOLS;
    }
    dg_nvml_ret r = api.init();
    if (r != DG_NVML_OK) {
        char e[200];
        if (err && errlen)
            snprintf(err, errlen, "nvmlInit_v2: %s", dg_nvml_error(&api, r, e, sizeof e));
        dlclose(lib);
        return DG_NVML_INIT_FAILED;
    }
    api.lib = lib;
    *nv = api;
    return DG_NVML_LOADED;
}

void dg_nvml_close(dg_nvml *nv)
{
    if (nv->lib) {
        if (nv->shutdown)
            nv->shutdown();
        dlclose(nv->lib);
    }
    memset(nv, 0, sizeof *nv);
}

const char *dg_nvml_error(const dg_nvml *nv, dg_nvml_ret r, char *buf, size_t n)
{
    const char *s = nv->errstr ? nv->errstr(r) : NULL;
    if (s)
        dg_copy_clean(buf, n, s);
    else
        snprintf(buf, n, "NVML error %d", r);
    return buf;
}

dg_nvml_ret dg_nvml_processes(dg_nvml_procs_fn fn, dg_nvml_device dev, dg_nvml_proc **out,
                              unsigned int *count)
{
    *out = NULL;
    *count = 0;
    if (!fn)
        return DG_NVML_OK;
    unsigned int cap = 64, n = cap;
    dg_nvml_proc *v = dg_malloc(cap * sizeof *v);
    dg_nvml_ret r = DG_NVML_INSUFFICIENT_SIZE;
    for (int tries = 0; v && tries < 4; tries++) {
        n = cap;
        r = fn(dev, &n, v);
        if (r != DG_NVML_INSUFFICIENT_SIZE)
            break;
        cap = n + 16;
        dg_nvml_proc *nvp = dg_realloc(v, cap * sizeof *nvp);
        if (!nvp)
            break;
        v = nvp;
    }
    if (!v)
        return -1;
    if (r != DG_NVML_OK) {
        dg_free(v);
        return r;
    }
    *out = v;
    *count = n < cap ? n : cap;
    return DG_NVML_OK;
}

dg_nvml_ret dg_nvml_find(const dg_nvml *nv, const char *pci_bus_id, dg_nvml_device *dev)
{
    if (pci_bus_id && pci_bus_id[0])
        return nv->by_pci ? nv->by_pci(pci_bus_id, dev) : -1;
    /* Without a bus id only a lone device is known to be the one meant. */
    unsigned n = 0;
    dg_nvml_ret r = nv->count(&n);
    if (r != DG_NVML_OK)
        return r;
    return n == 1 ? nv->handle(0, dev) : -1;
}
