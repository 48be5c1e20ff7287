/* NVML (libnvidia-ml) loaded at run time: one loader shared by the environment
 * proof (src/env/sysinfo.c), the background sampler (src/measure/sampler.c)
 * and the run supervisor's tree sampler (src/supervise/sample.c), so the
 * dlopen and symbol code lives once. No NVIDIA header is needed. */
#ifndef DG_NVML_H
#define DG_NVML_H

#include <stdbool.h>
#include <stddef.h>

typedef int dg_nvml_ret;
typedef struct dg_nvml_dev_s *dg_nvml_device;
typedef struct dg_nvml_memory {
    unsigned long long total, free, used;
} dg_nvml_memory;
typedef struct dg_nvml_util {
    unsigned int gpu, memory;
} dg_nvml_util;
typedef struct dg_nvml_proc { /* nvmlProcessInfo_t of the _v2 and _v3 calls */
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} dg_nvml_proc;
typedef dg_nvml_ret (*dg_nvml_procs_fn)(dg_nvml_device, unsigned int *, dg_nvml_proc *);

#define DG_NVML_OK 0
#define DG_NVML_INSUFFICIENT_SIZE 7
#define DG_NVML_NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL

/* The entry points; any but init/count/handle may be NULL (older drivers). */
typedef struct dg_nvml {
    void *lib;
    dg_nvml_ret (*init)(void);
    dg_nvml_ret (*shutdown)(void);
    dg_nvml_ret (*count)(unsigned int *);
    dg_nvml_ret (*handle)(unsigned int, dg_nvml_device *);
    dg_nvml_ret (*name)(dg_nvml_device, char *, unsigned int);
    dg_nvml_ret (*mem)(dg_nvml_device, dg_nvml_memory *);
    dg_nvml_ret (*util)(dg_nvml_device, dg_nvml_util *);
    dg_nvml_procs_fn compute, graphics;
    dg_nvml_ret (*driver)(char *, unsigned int);
    const char *(*errstr)(dg_nvml_ret);
    /* The device's link and health (the gate's levels 2 and 3). */
    dg_nvml_ret (*by_pci)(const char *, dg_nvml_device *);
    dg_nvml_ret (*pcie_max_gen)(dg_nvml_device, unsigned int *);
    dg_nvml_ret (*pcie_max_width)(dg_nvml_device, unsigned int *);
    dg_nvml_ret (*pcie_gen)(dg_nvml_device, unsigned int *);
    dg_nvml_ret (*pcie_width)(dg_nvml_device, unsigned int *);
    dg_nvml_ret (*clock)(dg_nvml_device, int, unsigned int *);       /* MHz; DG_NVML_CLOCK_* */
    dg_nvml_ret (*max_clock)(dg_nvml_device, int, unsigned int *);   /* MHz */
    dg_nvml_ret (*temperature)(dg_nvml_device, int, unsigned int *); /* C; sensor 0: the GPU */
    dg_nvml_ret (*power)(dg_nvml_device, unsigned int *);            /* mW */
    dg_nvml_ret (*power_limit)(dg_nvml_device, unsigned int *);      /* mW, enforced */
    dg_nvml_ret (*energy)(dg_nvml_device, unsigned long long *);   /* mJ since the driver loaded */
    dg_nvml_ret (*throttle)(dg_nvml_device, unsigned long long *); /* DG_NVML_THROTTLE_* bits */
} dg_nvml;

#define DG_NVML_CLOCK_SM 1
#define DG_NVML_CLOCK_MEM 2
/* Clock event (throttle) reasons, nvmlClocksEventReason*. */
#define DG_NVML_THROTTLE_IDLE 0x1ULL
#define DG_NVML_THROTTLE_APP_CLOCKS 0x2ULL
#define DG_NVML_THROTTLE_SW_POWER_CAP 0x4ULL
#define DG_NVML_THROTTLE_HW_SLOWDOWN 0x8ULL
#define DG_NVML_THROTTLE_SYNC_BOOST 0x10ULL
#define DG_NVML_THROTTLE_SW_THERMAL 0x20ULL
#define DG_NVML_THROTTLE_HW_THERMAL 0x40ULL
#define DG_NVML_THROTTLE_HW_POWER_BRAKE 0x80ULL
#define DG_NVML_THROTTLE_DISPLAY_CLOCKS 0x100ULL

typedef enum dg_nvml_open_result {
    DG_NVML_LOADED = 0,  /* loaded and nvmlInit_v2 succeeded: close with dg_nvml_close */
    DG_NVML_ABSENT,      /* no libnvidia-ml.so.1 / .so: err has dlerror's text */
    DG_NVML_NO_SYMBOLS,  /* the library lacks nvmlInit_v2 or device enumeration */
    DG_NVML_INIT_FAILED, /* nvmlInit_v2 failed: err has NVML's text */
} dg_nvml_open_result;

/* Loads libnvidia-ml.so.1 (then libnvidia-ml.so), resolves the entry points
 * and initialises NVML. On anything but DG_NVML_LOADED nothing is held and
 * *nv is zeroed; err (may be NULL) gets a one-line reason, cleaned of control
 * characters. */
dg_nvml_open_result dg_nvml_open(dg_nvml *nv, char *err, size_t errlen);
/* Shuts NVML down and unloads it; accepts a zeroed (never opened) *nv. */
void dg_nvml_close(dg_nvml *nv);
/* NVML's text for a return code into buf ("NVML error N" without errstr). */
const char *dg_nvml_error(const dg_nvml *nv, dg_nvml_ret r, char *buf, size_t n);
/* Running processes of one kind (compute or graphics) on dev into a
 * dg_malloc'd array (*out, *count); DG_NVML_OK or NVML's error. -1 when out
 * of host memory, fn NULL gives 0 processes. */
dg_nvml_ret dg_nvml_processes(dg_nvml_procs_fn fn, dg_nvml_device dev, dg_nvml_proc **out,
                              unsigned int *count);
/* The NVML device at PCI address pci_bus_id ("0000:1b:00.0"); with none
 * given, device 0 when it is the only one. DG_NVML_OK or NVML's error (-1:
 * not found that way). */
dg_nvml_ret dg_nvml_find(const dg_nvml *nv, const char *pci_bus_id, dg_nvml_device *dev);
#endif
