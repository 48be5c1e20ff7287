/* Host facts: NVIDIA devices and their compute/graphics processes through
 * NVML loaded at run time. */
#include "env/sysinfo.h"

#include "measure/nvml.h"

#include <stdlib.h>
#include <string.h>

/* ---- NVIDIA GPU processes through NVML ------------------------------------------- */

/* Appends one kind of running processes of a device to arr. */
static void gpu_procs(sb *b, const dg_nvml *api, dg_nvml_procs_fn fn, dg_nvml_device dev,
                      const char *type, cJSON *arr, cJSON *devobj)
{
    if (!fn || !arr)
        return;
    dg_nvml_proc *v = NULL;
    unsigned int count = 0;
    dg_nvml_ret r = dg_nvml_processes(fn, dev, &v, &count);
    if (r == -1) {
        b->oom = true;
        return;
    }
    if (r != DG_NVML_OK) {
        char e[200], key[64];
        snprintf(key, sizeof key, "%s_processes_error", type);
        put_str(b, devobj, key, dg_nvml_error(api, r, e, sizeof e));
        return;
    }
    for (unsigned int i = 0; i < count; i++) {
        cJSON *o = push(b, arr, cJSON_CreateObject());
        if (!o)
            break;
        put_num(b, o, "pid", v[i].pid);
        char path[64];
        snprintf(path, sizeof path, "/proc/%u/comm", v[i].pid);
        char *comm = dg_si_read_value(path);
        put_str(b, o, "name", comm);
        dg_free(comm);
        bool mv = v[i].usedGpuMemory != DG_NVML_NOT_AVAILABLE;
        put_metric(b, o, "used_memory", mv ? (double)v[i].usedGpuMemory : 0, mv, "bytes");
        put_str(b, o, "type", type);
    }
    dg_free(v);
}

void dg_si_gpu_processes(sb *b, cJSON *root)
{
    cJSON *g = put_obj(b, root, "gpu_processes");
    if (!g)
        return;
    dg_nvml api;
    char why[400];
    dg_nvml_open_result or = dg_nvml_open(&api, why, sizeof why);
    if (or != DG_NVML_LOADED) {
        char msg[420];
        snprintf(msg, sizeof msg, "error: %s", why);
        put_str(b, g, "nvml", or == DG_NVML_ABSENT ? "absent" : msg);
        if (or == DG_NVML_ABSENT)
            put_str(b, g, "error", why);
        put_str(b, g, "driver_version", NULL);
        put_arr(b, g, "devices");
        return;
    }
    char e[200];
    put_str(b, g, "nvml", "loaded");
    char drv[96] = "";
    bool have_drv = api.driver && api.driver(drv, sizeof drv) == DG_NVML_OK;
    drv[sizeof drv - 1] = '\0';
    put_str(b, g, "driver_version", have_drv ? drv : NULL);
    cJSON *devs = put_arr(b, g, "devices");
    unsigned int n = 0;
    dg_nvml_ret r = api.count(&n);
    if (r != DG_NVML_OK)
        put_str(b, g, "error", dg_nvml_error(&api, r, e, sizeof e));
    for (unsigned int i = 0; r == DG_NVML_OK && i < n && devs && i < 1024; i++) {
        cJSON *d = push(b, devs, cJSON_CreateObject());
        if (!d)
            break;
        put_num(b, d, "index", i);
        dg_nvml_device h = NULL;
        dg_nvml_ret hr = api.handle(i, &h);
        if (hr != DG_NVML_OK) {
            put_str(b, d, "error", dg_nvml_error(&api, hr, e, sizeof e));
            continue;
        }
        char name[128] = "";
        bool hn = api.name && api.name(h, name, 96) == DG_NVML_OK;
        name[sizeof name - 1] = '\0';
        put_str(b, d, "name", hn ? name : NULL);
        dg_nvml_memory mem = {0, 0, 0};
        bool hm = api.mem && api.mem(h, &mem) == DG_NVML_OK;
        put_metric(b, d, "memory_total", (double)mem.total, hm, "bytes");
        put_metric(b, d, "memory_used", (double)mem.used, hm, "bytes");
        dg_nvml_util ut = {0, 0};
        bool hu = api.util && api.util(h, &ut) == DG_NVML_OK;
        put_metric(b, d, "utilization_gpu", ut.gpu, hu, "percent");
        cJSON *procs = put_arr(b, d, "processes");
        gpu_procs(b, &api, api.compute, h, "compute", procs, d);
        gpu_procs(b, &api, api.graphics, h, "graphics", procs, d);
    }
    dg_nvml_close(&api);
}
