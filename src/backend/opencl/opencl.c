/* OpenCL backend (OpenCL 1.2 API): device enumeration across platforms, one
 * context and in-order profiling queue on the chosen device, cl_mem buffers and
 * an own SGEMM kernel (kernels.cl, embedded at build time).
 *
 * Devices are indexed globally: every platform's GPUs first, then
 * accelerators, then CPUs. The GEMM kernel is picked per device: the
 * local-memory tiled kernels on GPUs and accelerators (64- or 128-wide tiles by
 * problem size), the float8 register kernel on CPUs, the naive kernel where no
 * tiled one fits. The environment variable DEVGATE_OPENCL_KERNEL (tiled,
 * tiled64, tiled128, vec, naive) overrides the choice so tests can exercise
 * every kernel on any device. */
#include "backend/backend.h"
#include "core/core.h"

#include <CL/cl.h>
#include <CL/cl_ext.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opencl_kernels.h"

#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001
#endif
#ifndef CL_DEVICE_GLOBAL_FREE_MEMORY_AMD
#define CL_DEVICE_GLOBAL_FREE_MEMORY_AMD 0x4039
#endif

#define OCL_BUILD_OPTS "-cl-std=CL1.2"
#define OCL_LOG_MAX 2048 /* build log bytes kept in a failure reason */
#define OCL_ERR_MAX 3072

/* Kernel variants in kernels.cl; the geometry here must match the kernels. */
typedef enum ocl_var { VAR_T64, VAR_T128, VAR_VEC, VAR_NAIVE, VAR_COUNT } ocl_var;
static const char *const var_names[VAR_COUNT] = {"tiled64", "tiled128", "vec", "naive"};
static const char *const var_kernels[VAR_COUNT] = {"dg_sgemm_tiled64", "dg_sgemm_tiled128",
                                                   "dg_sgemm_vec", "dg_sgemm_naive"};
static const size_t var_tile[VAR_COUNT] = {64, 128, 0, 0}; /* C tile edge per work-group */
static const size_t var_local[VAR_COUNT] = {(16 * 65 + 16 * 64) * sizeof(float),
                                            (8 * 129 + 8 * 128) * sizeof(float), 0, 0};
#define TILED_WG 16 /* tiled work-group edge */
#define VEC_ROWS 6  /* rows of C per vec work-item */
#define VEC_COLS 16 /* columns of C per vec work-item */
#define VEC_WG 16   /* vec work-group width */

typedef struct ocl_dev {
    cl_platform_id platform;
    cl_device_id device;
} ocl_dev;

typedef struct ocl_ctx {
    ocl_dev *devs;
    int ndev;
    int index;
    cl_context context;
    cl_command_queue queue;
    cl_program program;
    cl_kernel kernels[VAR_COUNT]; /* the variants usable on this device; others NULL */
    cl_uint compute_units;
    cl_ulong max_alloc;
    char err[OCL_ERR_MAX];
} ocl_ctx;

/* Symbolic name of a CL error code ("CL_INVALID_VALUE"). */
static const char *cl_err_name(cl_int e)
{
    switch (e) {
    case 0: return "CL_SUCCESS";
    case -1: return "CL_DEVICE_NOT_FOUND";
    case -2: return "CL_DEVICE_NOT_AVAILABLE";
    case -3: return "CL_COMPILER_NOT_AVAILABLE";
    case -4: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case -5: return "CL_OUT_OF_RESOURCES";
    case -6: return "CL_OUT_OF_HOST_MEMORY";
    case -7: return "CL_PROFILING_INFO_NOT_AVAILABLE";
    case -8: return "CL_MEM_COPY_OVERLAP";
    case -9: return "CL_IMAGE_FORMAT_MISMATCH";
    case -10: return "CL_IMAGE_FORMAT_NOT_SUPPORTED";
    case -11: return "CL_BUILD_PROGRAM_FAILURE";
    case -12: return "CL_MAP_FAILURE";
    case -13: return "CL_MISALIGNED_SUB_BUFFER_OFFSET";
    case -14: return "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST";
    case -15: return "CL_COMPILE_PROGRAM_FAILURE";
    case -16: return "CL_LINKER_NOT_AVAILABLE";
    case -17: return "CL_LINK_PROGRAM_FAILURE";
    case -18: return "CL_DEVICE_PARTITION_FAILED";
    case -19: return "CL_KERNEL_ARG_INFO_NOT_AVAILABLE";
    case -30: return "CL_INVALID_VALUE";
    case -31: return "CL_INVALID_DEVICE_TYPE";
    case -32: return "CL_INVALID_PLATFORM";
    case -33: return "CL_INVALID_DEVICE";
    case -34: return "CL_INVALID_CONTEXT";
    case -35: return "CL_INVALID_QUEUE_PROPERTIES";
    case -36: return "CL_INVALID_COMMAND_QUEUE";
    case -37: return "CL_INVALID_HOST_PTR";
    case -38: return "CL_INVALID_MEM_OBJECT";
    case -39: return "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR";
    case -40: return "CL_INVALID_IMAGE_SIZE";
    case -41: return "CL_INVALID_SAMPLER";
    case -42: return "CL_INVALID_BINARY";
    case -43: return "CL_INVALID_BUILD_OPTIONS";
    case -44: return "CL_INVALID_PROGRAM";
    case -45: return "CL_INVALID_PROGRAM_EXECUTABLE";
    case -46: return "CL_INVALID_KERNEL_NAME";
    case -47: return "CL_INVALID_KERNEL_DEFINITION";
    case -48: return "CL_INVALID_KERNEL";
    case -49: return "CL_INVALID_ARG_INDEX";
    case -50: return "CL_INVALID_ARG_VALUE";
    case -51: return "CL_INVALID_ARG_SIZE";
    case -52: return "CL_INVALID_KERNEL_ARGS";
    case -53: return "CL_INVALID_WORK_DIMENSION";
    case -54: return "CL_INVALID_WORK_GROUP_SIZE";
    case -55: return "CL_INVALID_WORK_ITEM_SIZE";
    case -56: return "CL_INVALID_GLOBAL_OFFSET";
    case -57: return "CL_INVALID_EVENT_WAIT_LIST";
    case -58: return "CL_INVALID_EVENT";
    case -59: return "CL_INVALID_OPERATION";
    case -60: return "CL_INVALID_GL_OBJECT";
    case -61: return "CL_INVALID_BUFFER_SIZE";
    case -62: return "CL_INVALID_MIP_LEVEL";
    case -63: return "CL_INVALID_GLOBAL_WORK_SIZE";
    case -64: return "CL_INVALID_PROPERTY";
    case -65: return "CL_INVALID_IMAGE_DESCRIPTOR";
    case -66: return "CL_INVALID_COMPILER_OPTIONS";
    case -67: return "CL_INVALID_LINKER_OPTIONS";
    case -68: return "CL_INVALID_DEVICE_PARTITION_COUNT";
    case -69: return "CL_INVALID_PIPE_SIZE";
    case -70: return "CL_INVALID_DEVICE_QUEUE";
    case -71: return "CL_INVALID_SPEC_ID";
    case -72: return "CL_MAX_SIZE_RESTRICTION_EXCEEDED";
    case -1000: return "CL_INVALID_GL_SHAREGROUP_REFERENCE_KHR";
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    case -9999: return "NVIDIA_ILLEGAL_MEMORY_ACCESS";
    }
    return "CL_UNKNOWN_ERROR";
}

/* The dg_status a failed CL call maps to. */
static dg_status cl_status(cl_int e)
{
    switch (e) {
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES: return DG_ERR_DEVICE_OOM;
    case CL_OUT_OF_HOST_MEMORY: return DG_ERR_NOMEM;
    default: return DG_ERR_BACKEND;
    }
}

/* vsnprintf into dst of size n; accepts dst NULL or n 0. */
static void vput(char *dst, size_t n, const char *fmt, va_list ap)
{
    if (dst && n)
        vsnprintf(dst, n, fmt, ap);
}

/* Formats a reason (init's out-parameter); returns st. */
static dg_status reason_set(char *reason, size_t len, dg_status st, const char *fmt, ...)
    DG_PRINTF(4, 5);
static dg_status reason_set(char *reason, size_t len, dg_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vput(reason, len, fmt, ap);
    va_end(ap);
    return st;
}

/* Stores a message on the context; returns st. */
static dg_status ocl_fail(ocl_ctx *o, dg_status st, const char *fmt, ...) DG_PRINTF(3, 4);
static dg_status ocl_fail(ocl_ctx *o, dg_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vput(o->err, sizeof o->err, fmt, ap);
    va_end(ap);
    return st;
}

/* Stores "<call> failed: NAME (code)" on the context; returns the mapped status. */
static dg_status ocl_clfail(ocl_ctx *o, const char *call, cl_int e)
{
    return ocl_fail(o, cl_status(e), "%s failed: %s (%d)", call, cl_err_name(e), (int)e);
}

/* A device or platform string property as a dg_malloc'd string ("" on failure);
 * NULL only when out of memory. */
static char *dev_str(cl_device_id d, cl_device_info what)
{
    size_t sz = 0;
    if (clGetDeviceInfo(d, what, 0, NULL, &sz) != CL_SUCCESS || sz == 0)
        return dg_strdup("");
    char *s = dg_malloc(sz + 1);
    if (!s)
        return NULL;
    if (clGetDeviceInfo(d, what, sz, s, NULL) != CL_SUCCESS)
        sz = 0;
    s[sz] = '\0';
    return s;
}

static char *plat_str(cl_platform_id p, cl_platform_info what)
{
    size_t sz = 0;
    if (clGetPlatformInfo(p, what, 0, NULL, &sz) != CL_SUCCESS || sz == 0)
        return dg_strdup("");
    char *s = dg_malloc(sz + 1);
    if (!s)
        return NULL;
    if (clGetPlatformInfo(p, what, sz, s, NULL) != CL_SUCCESS)
        sz = 0;
    s[sz] = '\0';
    return s;
}

/* Copies a driver string cleaned and trimmed into dst of size n. */
static void copy_drv(char *dst, size_t n, const char *src)
{
    dg_copy_clean(dst, n, src ? src : "");
    dg_trim(dst);
}

/* Enumerates every device of every platform, GPUs first, then accelerators,
 * then CPUs. *devs gets a dg_malloc'd array (NULL when none); on failure the
 * reason is written and a status returned. */
static dg_status enumerate(ocl_dev **devs, int *ndev, char *reason, size_t len)
{
    *devs = NULL;
    *ndev = 0;
    cl_uint nplat = 0;
    cl_int e = clGetPlatformIDs(0, NULL, &nplat);
    if (e == CL_PLATFORM_NOT_FOUND_KHR || (e == CL_SUCCESS && nplat == 0))
        return reason_set(reason, len, DG_ERR_UNAVAILABLE,
                          "OpenCL ICD loader found no platforms (clGetPlatformIDs: %d)", (int)e);
    if (e != CL_SUCCESS)
        return reason_set(reason, len, DG_ERR_UNAVAILABLE, "clGetPlatformIDs failed: %s (%d)",
                          cl_err_name(e), (int)e);
    cl_platform_id *plats = dg_malloc(nplat * sizeof *plats);
    if (!plats)
        return reason_set(reason, len, DG_ERR_NOMEM, "out of host memory");
    e = clGetPlatformIDs(nplat, plats, NULL);
    if (e != CL_SUCCESS) {
        dg_free(plats);
        return reason_set(reason, len, DG_ERR_UNAVAILABLE, "clGetPlatformIDs failed: %s (%d)",
                          cl_err_name(e), (int)e);
    }

    static const cl_device_type order[] = {CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_ACCELERATOR,
                                           CL_DEVICE_TYPE_CPU};
    ocl_dev *list = NULL;
    int count = 0;
    dg_status st = DG_OK;
    for (size_t t = 0; t < sizeof order / sizeof order[0] && st == DG_OK; t++) {
        for (cl_uint p = 0; p < nplat && st == DG_OK; p++) {
            cl_uint nd = 0;
            if (clGetDeviceIDs(plats[p], order[t], 0, NULL, &nd) != CL_SUCCESS || nd == 0)
                continue; /* CL_DEVICE_NOT_FOUND: none of this type here */
            cl_device_id *ids = dg_malloc(nd * sizeof *ids);
            ocl_dev *grown = ids ? dg_realloc(list, ((size_t)count + nd) * sizeof *list) : NULL;
            if (!grown) {
                dg_free(ids);
                st = reason_set(reason, len, DG_ERR_NOMEM, "out of host memory");
                break;
            }
            list = grown;
            if (clGetDeviceIDs(plats[p], order[t], nd, ids, &nd) == CL_SUCCESS) {
                for (cl_uint d = 0; d < nd; d++) {
                    bool seen = false;
                    for (int s = 0; s < count && !seen; s++)
                        seen = list[s].device == ids[d];
                    if (!seen)
                        list[count++] = (ocl_dev){plats[p], ids[d]};
                }
            }
            dg_free(ids);
        }
    }
    dg_free(plats);
    if (st == DG_OK && count == 0)
        st = reason_set(reason, len, DG_ERR_UNAVAILABLE, "no OpenCL devices on %u platform(s)",
                        (unsigned)nplat);
    if (st != DG_OK) {
        dg_free(list);
        return st;
    }
    *devs = list;
    *ndev = count;
    return DG_OK;
}

/* Releases everything the context holds, then the context; accepts NULL. */
static void ocl_free(void *ctx)
{
    ocl_ctx *o = ctx;
    if (!o)
        return;
    if (o->queue)
        clFinish(o->queue);
    for (int v = 0; v < VAR_COUNT; v++)
        if (o->kernels[v])
            clReleaseKernel(o->kernels[v]);
    if (o->program)
        clReleaseProgram(o->program);
    if (o->queue)
        clReleaseCommandQueue(o->queue);
    if (o->context)
        clReleaseContext(o->context);
    dg_free(o->devs);
    dg_free(o);
}

/* Writes "<what>: NAME (code); build log: <log>" with the log capped and its
 * line breaks flattened. */
static void build_failure(ocl_ctx *o, cl_int e, char *reason, size_t len)
{
    size_t sz = 0;
    char *log = NULL;
    if (clGetProgramBuildInfo(o->program, o->devs[o->index].device, CL_PROGRAM_BUILD_LOG, 0, NULL,
                              &sz) == CL_SUCCESS &&
        sz > 0 && (log = dg_malloc(sz + 1)) != NULL) {
        if (clGetProgramBuildInfo(o->program, o->devs[o->index].device, CL_PROGRAM_BUILD_LOG, sz,
                                  log, NULL) != CL_SUCCESS)
            sz = 0;
        log[sz] = '\0';
        for (char *q = log; *q; q++)
            if (*q == '\n' || *q == '\r' || *q == '\t')
                *q = ' ';
        if (strlen(log) > OCL_LOG_MAX)
            memcpy(log + OCL_LOG_MAX - 4, "...", 4);
        dg_trim(log);
    }
    char clean[OCL_LOG_MAX + 1];
    dg_copy_clean(clean, sizeof clean, log ? log : "");
    dg_free(log);
    reason_set(reason, len, DG_ERR_BACKEND, "clBuildProgram(%s) failed: %s (%d); build log: %s",
               OCL_BUILD_OPTS, cl_err_name(e), (int)e, clean[0] ? clean : "(empty)");
}

/* Creates kernel variant v; for a tiled one also checks that it fits the
 * device (work-group size, item sizes, local memory) and sets *fits. */
static dg_status make_kernel(ocl_ctx *o, ocl_var v, bool *fits, char *reason, size_t len)
{
    cl_device_id dev = o->devs[o->index].device;
    cl_int e = CL_SUCCESS;
    *fits = true;
    o->kernels[v] = clCreateKernel(o->program, var_kernels[v], &e);
    if (!o->kernels[v])
        return reason_set(reason, len, cl_status(e), "clCreateKernel(%s) failed: %s (%d)",
                          var_kernels[v], cl_err_name(e), (int)e);
    if (!var_tile[v])
        return DG_OK;
    size_t wg = 0, item[3] = {0, 0, 0};
    cl_ulong local = 0;
    e = clGetKernelWorkGroupInfo(o->kernels[v], dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg,
                                 NULL);
    if (e == CL_SUCCESS)
        e = clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof item, item, NULL);
    if (e == CL_SUCCESS)
        e = clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    if (e != CL_SUCCESS)
        return reason_set(reason, len, DG_ERR_BACKEND, "querying %s limits failed: %s (%d)",
                          var_kernels[v], cl_err_name(e), (int)e);
    *fits = wg >= TILED_WG * TILED_WG && item[0] >= TILED_WG && item[1] >= TILED_WG &&
            local >= var_local[v];
    if (!*fits) {
        reason_set(reason, len, DG_ERR_UNAVAILABLE,
                   "%s does not fit the device (kernel work-group limit %zu, local memory %llu "
                   "bytes)",
                   var_kernels[v], wg, (unsigned long long)local);
        clReleaseKernel(o->kernels[v]);
        o->kernels[v] = NULL;
    }
    return DG_OK;
}

/* Creates the GEMM kernels for the device: vec on CPUs; on other devices both
 * tiled kernels that fit, else naive. DEVGATE_OPENCL_KERNEL (tiled, tiled64,
 * tiled128, vec, naive) forces a choice. */
static dg_status pick_kernels(ocl_ctx *o, char *reason, size_t len)
{
    cl_device_id dev = o->devs[o->index].device;
    cl_device_type type = 0;
    cl_int e = clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    if (e == CL_SUCCESS)
        e = clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof o->max_alloc, &o->max_alloc,
                            NULL);
    if (e == CL_SUCCESS)
        e = clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof o->compute_units,
                            &o->compute_units, NULL);
    if (e != CL_SUCCESS)
        return reason_set(reason, len, DG_ERR_BACKEND, "clGetDeviceInfo failed: %s (%d)",
                          cl_err_name(e), (int)e);

    const char *force = getenv("DEVGATE_OPENCL_KERNEL");
    bool tiled = !(type & CL_DEVICE_TYPE_CPU);
    int only = -1;
    if (force && *force) {
        tiled = strcmp(force, "tiled") == 0;
        for (int v = 0; v < VAR_COUNT && !tiled; v++)
            if (strcmp(force, var_names[v]) == 0)
                only = v;
        if (!tiled && only < 0)
            return reason_set(reason, len, DG_ERR_USAGE,
                              "DEVGATE_OPENCL_KERNEL=%.64s: unknown kernel (tiled, tiled64, "
                              "tiled128, vec, naive)",
                              force);
    }
    bool fits = true;
    dg_status st = DG_OK;
    if (only >= 0) {
        st = make_kernel(o, (ocl_var)only, &fits, reason, len);
        return st != DG_OK ? st : fits ? DG_OK : DG_ERR_UNAVAILABLE;
    }
    if (!tiled)
        return make_kernel(o, VAR_VEC, &fits, reason, len);
    char why[256];
    st = make_kernel(o, VAR_T64, &fits, why, sizeof why);
    if (st == DG_OK && fits)
        st = make_kernel(o, VAR_T128, &fits, why, sizeof why); /* optional */
    if (st != DG_OK) {
        reason_set(reason, len, st, "%s", why);
        return st;
    }
    if (!o->kernels[VAR_T64])
        return make_kernel(o, VAR_NAIVE, &fits, reason, len);
    return DG_OK;
}

/* Opens device `device`: context, profiling queue, program and GEMM kernel. */
static dg_status ocl_init(int device, void **ctx, char *reason, size_t len)
{
    if (reason && len)
        reason[0] = '\0';
    if (!ctx)
        return reason_set(reason, len, DG_ERR_USAGE, "no context pointer");
    *ctx = NULL;
    ocl_ctx *o = dg_calloc(1, sizeof *o);
    if (!o)
        return reason_set(reason, len, DG_ERR_NOMEM, "out of host memory");
    dg_status st = enumerate(&o->devs, &o->ndev, reason, len);
    if (st != DG_OK) {
        ocl_free(o);
        return st;
    }
    if (device < 0 || device >= o->ndev) {
        st = reason_set(reason, len, DG_ERR_NOT_FOUND,
                        "OpenCL device index %d out of range (%d device(s))", device, o->ndev);
        ocl_free(o);
        return st;
    }
    o->index = device;
    ocl_dev *d = &o->devs[device];
    char *dname = dev_str(d->device, CL_DEVICE_NAME);
    char name[128];
    copy_drv(name, sizeof name, dname);
    dg_free(dname);

    cl_int e = CL_SUCCESS;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)d->platform, 0};
    o->context = clCreateContext(props, 1, &d->device, NULL, NULL, &e);
    if (!o->context) {
        st = reason_set(reason, len, cl_status(e),
                        "clCreateContext failed on OpenCL device %d (%s): %s (%d)", device, name,
                        cl_err_name(e), (int)e);
        goto fail;
    }
    o->queue = clCreateCommandQueue(o->context, d->device, CL_QUEUE_PROFILING_ENABLE, &e);
    if (!o->queue) {
        st = reason_set(reason, len, cl_status(e),
                        "clCreateCommandQueue failed on OpenCL device %d (%s): %s (%d)", device,
                        name, cl_err_name(e), (int)e);
        goto fail;
    }
    const char *src = opencl_kernels;
    o->program = clCreateProgramWithSource(o->context, 1, &src, NULL, &e);
    if (!o->program) {
        st = reason_set(reason, len, cl_status(e), "clCreateProgramWithSource failed: %s (%d)",
                        cl_err_name(e), (int)e);
        goto fail;
    }
    e = clBuildProgram(o->program, 1, &d->device, OCL_BUILD_OPTS, NULL, NULL);
    if (e != CL_SUCCESS) {
        build_failure(o, e, reason, len);
        st = e == CL_OUT_OF_HOST_MEMORY ? DG_ERR_NOMEM : DG_ERR_BACKEND;
        goto fail;
    }
    st = pick_kernels(o, reason, len);
    if (st != DG_OK)
        goto fail;
    *ctx = o;
    return DG_OK;
fail:
    ocl_free(o);
    return st;
}

static const char *ocl_last_error(void *ctx)
{
    ocl_ctx *o = ctx;
    return o ? o->err : "OpenCL backend not initialised";
}

/* Number of OpenCL devices across all platforms (enumerates anew without ctx). */
static int ocl_device_count(void *ctx)
{
    ocl_ctx *o = ctx;
    if (o)
        return o->ndev;
    ocl_dev *devs = NULL;
    int n = 0;
    char why[8];
    if (enumerate(&devs, &n, why, sizeof why) != DG_OK)
        return 0;
    dg_free(devs);
    return n;
}

static dg_status ocl_device_info(void *ctx, int device, dg_device_info *out)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    if (!out)
        return ocl_fail(o, DG_ERR_USAGE, "device_info: no output");
    if (device < 0 || device >= o->ndev)
        return ocl_fail(o, DG_ERR_NOT_FOUND, "OpenCL device index %d out of range (%d device(s))",
                        device, o->ndev);
    memset(out, 0, sizeof *out);
    cl_device_id d = o->devs[device].device;
    cl_platform_id p = o->devs[device].platform;

    char *name = dev_str(d, CL_DEVICE_NAME), *vendor = dev_str(d, CL_DEVICE_VENDOR);
    char *drv = dev_str(d, CL_DRIVER_VERSION), *ext = dev_str(d, CL_DEVICE_EXTENSIONS);
    char *pname = plat_str(p, CL_PLATFORM_NAME), *pver = plat_str(p, CL_PLATFORM_VERSION);
    dg_status st = DG_OK;
    if (!name || !vendor || !drv || !ext || !pname || !pver) {
        st = ocl_fail(o, DG_ERR_NOMEM, "out of host memory");
    } else {
        copy_drv(out->name, sizeof out->name, name);
        copy_drv(out->vendor, sizeof out->vendor, vendor);
        copy_drv(out->driver_version, sizeof out->driver_version, drv);
        char plat[2 * sizeof out->platform];
        snprintf(plat, sizeof plat, "%s %s", dg_trim(pname), dg_trim(pver));
        copy_drv(out->platform, sizeof out->platform, plat);

        cl_ulong mem = 0;
        cl_uint cus = 0;
        cl_int e = clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
        if (e == CL_SUCCESS)
            out->mem_total = (dg_metric){(double)mem, true};
        e = clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
        if (e == CL_SUCCESS)
            out->compute_units = (dg_metric){(double)cus, true};
        /* Core OpenCL has no free-memory query; AMD's extension reports KiB. */
        if (strstr(ext, "cl_amd_device_attribute_query")) {
            size_t kib[2] = {0, 0};
            if (clGetDeviceInfo(d, CL_DEVICE_GLOBAL_FREE_MEMORY_AMD, sizeof kib, kib, NULL) ==
                CL_SUCCESS)
                out->mem_free = (dg_metric){(double)kib[0] * 1024.0, true};
        }
    }
    dg_free(name);
    dg_free(vendor);
    dg_free(drv);
    dg_free(ext);
    dg_free(pname);
    dg_free(pver);
    return st;
}

/* "OpenCL <platform version>; <device version>; driver <x>" of the open device. */
static void ocl_versions(void *ctx, char *buf, size_t len)
{
    ocl_ctx *o = ctx;
    if (!buf || !len)
        return;
    if (!o) {
        snprintf(buf, len, "OpenCL (not initialised)");
        return;
    }
    ocl_dev *d = &o->devs[o->index];
    char *pver = plat_str(d->platform, CL_PLATFORM_VERSION);
    char *dver = dev_str(d->device, CL_DEVICE_VERSION);
    char *drv = dev_str(d->device, CL_DRIVER_VERSION);
    if (pver && dver && drv) {
        const char *pv = dg_trim(pver);
        /* Platform versions read "OpenCL 3.0 <vendor>"; do not say OpenCL twice. */
        char raw[512];
        snprintf(raw, sizeof raw, "%s%s; %s; driver %s",
                 strncmp(pv, "OpenCL ", 7) == 0 ? "" : "OpenCL ", pv, dg_trim(dver), dg_trim(drv));
        dg_copy_clean(buf, len, raw);
    } else {
        snprintf(buf, len, "OpenCL (version query out of memory)");
    }
    dg_free(pver);
    dg_free(dver);
    dg_free(drv);
}

static dg_status ocl_buf_alloc(void *ctx, size_t bytes, void **buf)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    if (!buf)
        return ocl_fail(o, DG_ERR_USAGE, "buf_alloc: no output pointer");
    *buf = NULL;
    if (bytes == 0)
        return ocl_fail(o, DG_ERR_USAGE, "buf_alloc: zero-byte buffer");
    if ((cl_ulong)bytes > o->max_alloc)
        return ocl_fail(o, DG_ERR_DEVICE_OOM,
                        "buf_alloc: %zu bytes exceed CL_DEVICE_MAX_MEM_ALLOC_SIZE (%llu)", bytes,
                        (unsigned long long)o->max_alloc);
    cl_int e = CL_SUCCESS;
    cl_mem m = clCreateBuffer(o->context, CL_MEM_READ_WRITE, bytes, NULL, &e);
    if (!m) {
        ocl_clfail(o, "clCreateBuffer", e);
        return e == CL_INVALID_BUFFER_SIZE ? DG_ERR_DEVICE_OOM : cl_status(e);
    }
    *buf = m;
    return DG_OK;
}

static void ocl_buf_free(void *ctx, void *buf)
{
    (void)ctx;
    if (buf)
        clReleaseMemObject((cl_mem)buf);
}

/* Checks that [off, off+bytes) lies inside buf; records the failure. */
static dg_status check_range(ocl_ctx *o, const char *what, const void *buf, size_t off,
                             size_t bytes)
{
    if (!buf)
        return ocl_fail(o, DG_ERR_USAGE, "%s: NULL buffer", what);
    size_t size = 0;
    cl_int e = clGetMemObjectInfo((cl_mem)buf, CL_MEM_SIZE, sizeof size, &size, NULL);
    if (e != CL_SUCCESS)
        return ocl_fail(o, DG_ERR_USAGE, "%s: not a buffer of this backend: %s (%d)", what,
                        cl_err_name(e), (int)e);
    if (off > size || bytes > size - off)
        return ocl_fail(o, DG_ERR_USAGE, "%s: range [%zu, +%zu) outside the %zu-byte buffer", what,
                        off, bytes, size);
    return DG_OK;
}

static dg_status ocl_upload(void *ctx, void *buf, size_t off, const void *src, size_t bytes)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    dg_status st = check_range(o, "upload", buf, off, bytes);
    if (st != DG_OK || bytes == 0)
        return st;
    if (!src)
        return ocl_fail(o, DG_ERR_USAGE, "upload: NULL source");
    cl_int e = clEnqueueWriteBuffer(o->queue, (cl_mem)buf, CL_TRUE, off, bytes, src, 0, NULL, NULL);
    return e == CL_SUCCESS ? DG_OK : ocl_clfail(o, "clEnqueueWriteBuffer", e);
}

static dg_status ocl_download(void *ctx, const void *buf, size_t off, void *dst, size_t bytes)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    dg_status st = check_range(o, "download", buf, off, bytes);
    if (st != DG_OK || bytes == 0)
        return st;
    if (!dst)
        return ocl_fail(o, DG_ERR_USAGE, "download: NULL destination");
    cl_int e = clEnqueueReadBuffer(o->queue, (cl_mem)buf, CL_TRUE, off, bytes, dst, 0, NULL, NULL);
    return e == CL_SUCCESS ? DG_OK : ocl_clfail(o, "clEnqueueReadBuffer", e);
}

/* Checks one matrix operand: 4-byte aligned offset, rows*ld extent inside buf;
 * *eoff gets the offset in elements. */
static dg_status check_matrix(ocl_ctx *o, char which, const void *buf, size_t off, int rows,
                              int cols, int ld, cl_ulong *eoff)
{
    if (ld < (cols > 1 ? cols : 1))
        return ocl_fail(o, DG_ERR_USAGE, "gemm: ld%c %d < %d columns", which, ld, cols);
    if (off % sizeof(float))
        return ocl_fail(o, DG_ERR_USAGE, "gemm: offset of %c (%zu bytes) not 4-byte aligned", which,
                        off);
    *eoff = off / sizeof(float);
    uint64_t elems = rows && cols ? (uint64_t)(rows - 1) * (uint64_t)ld + (uint64_t)cols : 0;
    if (elems > SIZE_MAX / sizeof(float))
        return ocl_fail(o, DG_ERR_USAGE, "gemm: %c extent overflows", which);
    char what[16];
    snprintf(what, sizeof what, "gemm %c", which);
    return check_range(o, what, buf, off, (size_t)elems * sizeof(float));
}

static dg_status ocl_gemm_nn(void *ctx, int m, int n, int k, float alpha, const void *a, size_t a_off,
                          int lda, const void *b, size_t b_off, int ldb, float beta, void *c,
                          size_t c_off, int ldc)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    if (m < 0 || n < 0 || k < 0)
        return ocl_fail(o, DG_ERR_USAGE, "gemm: negative size m=%d n=%d k=%d", m, n, k);
    if (m == 0 || n == 0)
        return DG_OK;
    cl_ulong ea = 0, eb = 0, ec = 0;
    dg_status st = check_matrix(o, 'C', c, c_off, m, n, ldc, &ec);
    if (st == DG_OK && k > 0)
        st = check_matrix(o, 'A', a, a_off, m, k, lda, &ea);
    if (st == DG_OK && k > 0)
        st = check_matrix(o, 'B', b, b_off, k, n, ldb, &eb);
    if (st != DG_OK)
        return st;
    /* With k == 0 the kernels never touch A or B, but the arguments must still
     * be valid memory objects: stand C in for them. */
    cl_mem ma = k > 0 ? (cl_mem)a : (cl_mem)c, mb = k > 0 ? (cl_mem)b : (cl_mem)c;
    cl_mem mc = c;
    cl_int ci[6] = {m, n, k, k > 0 ? lda : 1, k > 0 ? ldb : 1, ldc};
    cl_float fa = alpha, fb = beta;
    /* Tiled: 128-wide tiles once they alone fill every compute unit, else 64. */
    ocl_var v = VAR_NAIVE;
    if (o->kernels[VAR_T64] || o->kernels[VAR_T128]) {
        size_t groups128 = (((size_t)m + 127) / 128) * (((size_t)n + 127) / 128);
        v = o->kernels[VAR_T128] && (!o->kernels[VAR_T64] || groups128 >= o->compute_units)
                ? VAR_T128
                : VAR_T64;
    } else if (o->kernels[VAR_VEC]) {
        v = VAR_VEC;
    }
    cl_kernel kr = o->kernels[v];
    const struct {
        size_t size;
        const void *value;
    } args[] = {
        {sizeof ci[0], &ci[0]}, {sizeof ci[1], &ci[1]}, {sizeof ci[2], &ci[2]}, {sizeof fa, &fa},
        {sizeof ma, &ma},       {sizeof ea, &ea},       {sizeof ci[3], &ci[3]}, {sizeof mb, &mb},
        {sizeof eb, &eb},       {sizeof ci[4], &ci[4]}, {sizeof fb, &fb},       {sizeof mc, &mc},
        {sizeof ec, &ec},       {sizeof ci[5], &ci[5]},
    };
    cl_int e = CL_SUCCESS;
    for (cl_uint i = 0; i < sizeof args / sizeof args[0] && e == CL_SUCCESS; i++)
        e = clSetKernelArg(kr, i, args[i].size, args[i].value);
    if (e != CL_SUCCESS)
        return ocl_clfail(o, "clSetKernelArg", e);

    size_t global[2], local[2];
    size_t *lp = local;
    if (var_tile[v]) {
        global[0] = ((size_t)n + var_tile[v] - 1) / var_tile[v] * TILED_WG;
        global[1] = ((size_t)m + var_tile[v] - 1) / var_tile[v] * TILED_WG;
        local[0] = local[1] = TILED_WG;
    } else if (v == VAR_VEC) {
        size_t gx = ((size_t)n + VEC_COLS - 1) / VEC_COLS;
        local[0] = gx < VEC_WG ? gx : VEC_WG;
        local[1] = 1;
        global[0] = (gx + local[0] - 1) / local[0] * local[0];
        global[1] = ((size_t)m + VEC_ROWS - 1) / VEC_ROWS;
    } else {
        global[0] = (size_t)n;
        global[1] = (size_t)m;
        lp = NULL;
    }
    e = clEnqueueNDRangeKernel(o->queue, kr, 2, NULL, global, lp, 0, NULL, NULL);
    if (e != CL_SUCCESS)
        return ocl_clfail(o, "clEnqueueNDRangeKernel(sgemm)", e);
    return DG_OK;
}

static dg_status ocl_synchronize(void *ctx)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    cl_int e = clFinish(o->queue);
    return e == CL_SUCCESS ? DG_OK : ocl_clfail(o, "clFinish", e);
}

static bool ocl_supports_op(void *ctx, dg_op op)
{
    (void)ctx;
    return op == DG_OP_GEMM;
}

/* Interface v2 entry: row-major with optional transposes. */
static dg_status ocl_gemm(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha, dg_ref a, int lda, dg_ref b, int ldb, float beta, dg_ref c, int ldc)
{
    if (ta || tb)
        return ocl_fail((ocl_ctx *)ctx, DG_ERR_USAGE, "gemm: transposed operands not implemented yet");
    return ocl_gemm_nn(ctx, m, n, k, alpha, a.buf, a.off, lda, b.buf, b.off, ldb, beta, c.buf, c.off, ldc);
}

static const dg_backend_iface ocl_iface = {
    .version = DG_BACKEND_IFACE_VERSION,
    .name = "opencl",
    .init = ocl_init,
    .free = ocl_free,
    .last_error = ocl_last_error,
    .device_count = ocl_device_count,
    .device_info = ocl_device_info,
    .versions = ocl_versions,
    .buf_alloc = ocl_buf_alloc,
    .buf_free = ocl_buf_free,
    .upload = ocl_upload,
    .download = ocl_download,
    .gemm = ocl_gemm,
    .synchronize = ocl_synchronize,
    .supports_op = ocl_supports_op,
};

const dg_backend_iface *dg_backend_opencl_iface(void)
{
    return &ocl_iface;
}
