/* OpenCL backend (OpenCL 1.2 API): device enumeration across platforms, one
 * context and in-order profiling queue on the chosen device, cl_mem buffers,
 * an own SGEMM (with transposes) and every training op of interface v2 as
 * kernels (kernels.cl, embedded at build time).
 *
 * Devices are indexed globally: every platform's GPUs first, then
 * accelerators, then CPUs. The GEMM kernel is picked per device and product
 * (the gpu_pick table): the local-memory tiled kernels on GPUs and
 * accelerators (32-, 64- or 128-wide tiles by problem size and transposes),
 * the float8 register kernel on CPUs, the naive kernel where no tiled one
 * fits; a product whose tiles leave compute units idle and whose k is long
 * runs split into k-slices (ocl_gemm_split.c). The environment variables
 * DEVGATE_OPENCL_KERNEL (tiled, db32, db64, db128, tiled64, tiled128, vec,
 * naive) and DEVGATE_OPENCL_SPLITK (off, or a slice count) override the
 * choice so tests can exercise every kernel on any device and benches can
 * compare them.
 *
 * Ops only enqueue (no host synchronisation inside an op), with element
 * offsets passed as kernel arguments (no sub-buffers) after every range has
 * been checked against the buffer's size. Reductions run in a fixed order and
 * scatters are written as gathers, so results are deterministic and no float
 * atomics are needed. On the new path (DEVGATE_OPENCL_PATH) a convolution's
 * forward pass on the GPU kernels is an implicit GEMM (kernels.cl's dg_conv:
 * the column buffer gathered from the images as the product's slices are
 * fetched; bias and ReLU in its epilogue), and with
 * DEVGATE_OPENCL_CONV_BWD=implicit its backward pass too (dg_convdw,
 * dg_convdx). Otherwise convolutions go through im2col, a
 * batched GEMM and a gather col2im, chunk of images at a time, the chunk sized so the workspace
 * stays under a cap: 64 MiB on CPUs, 1/256 of the memory (64-512 MiB) on
 * GPUs (DEVGATE_OPENCL_CONV_WORK, in bytes, overrides the cap so tests can
 * force small chunks). On CPUs a product with op(B) = B^T runs
 * on a packed copy of B^T (the vec kernel streams B's rows), made in a
 * scratch buffer under the same cap, gathered in the kernel past it.
 *
 * Page-locked host blocks (host_alloc, the loader's slots) are
 * CL_MEM_ALLOC_HOST_PTR buffers mapped once and kept mapped; an upload from
 * one is a non-blocking write into the block's device twin on a second
 * (copy) queue and a device-side copy on the compute queue that waits for
 * the write's event; host_wait waits for the last write from the block. */
#include "backend/backend.h"
#include "core/core.h"

#include <CL/cl.h>
#include <CL/cl_ext.h>

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ocl_cache.h"
#include "ocl_gemm_split.h"
#include "ocl_util.h"
#include "opencl_hooks.h"
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

/* GEMM kernel variants in kernels.cl, each in four transpose specialisations
 * (_nn, _nt, _tn, _tt); the geometry here must match the kernels. db32, db64
 * and db128 are the GPU kernels (double-buffered, float4 local reads);
 * tiled64 and tiled128 the earlier single-buffered ones, kept to compare. */
typedef enum ocl_var {
    VAR_D32,
    VAR_D64,
    VAR_D128,
    VAR_T64,
    VAR_T128,
    VAR_VEC,
    VAR_NAIVE,
    VAR_COUNT
} ocl_var;
static const char *const var_names[VAR_COUNT] = {"db32",     "db64", "db128", "tiled64",
                                                 "tiled128", "vec",  "naive"};
static const char *const var_kernels[VAR_COUNT] = {
    "dg_sgemm_db32",     "dg_sgemm_db64", "dg_sgemm_db128", "dg_sgemm_tiled64",
    "dg_sgemm_tiled128", "dg_sgemm_vec",  "dg_sgemm_naive"};
static const char *const trans_suffix[4] = {"_nn", "_nt", "_tn", "_tt"}; /* index ta*2+tb */
static const size_t var_tile[VAR_COUNT] = {32, 64, 128, 64, 128, 0, 0};  /* C tile edge per group */
static const size_t var_wg[VAR_COUNT] = {8, 16, 16, 16, 16, 0, 0};       /* work-group edge */
static const size_t var_local[VAR_COUNT] = {2 * 2 * 16 * 36 * sizeof(float),
                                            2 * 2 * 16 * 68 * sizeof(float),
                                            2 * 2 * 8 * 132 * sizeof(float),
                                            2 * 16 * 65 * sizeof(float),
                                            2 * 8 * 129 * sizeof(float),
                                            0,
                                            0};
#define VEC_ROWS 6  /* rows of C per vec work-item */
#define VEC_COLS 16 /* columns of C per vec work-item */
#define VEC_WG 16   /* vec work-group width */

/* Training-op kernels in kernels.cl. */
typedef enum ocl_op {
    K_FILL,
    K_BIAS_ADD,
    K_BIAS_GRAD,
    K_RELU_FWD,
    K_RELU_BWD,
    K_POOL_FWD,
    K_POOL_BWD,
    K_IM2COL,
    K_COL2IM,
    K_SUM_PARTS,
    K_XENT_ROWS,
    K_XENT_REDUCE,
    K_SGD,
    K_MARK,
    K_TRANSPOSE,
    K_XENT_ONE,
    K_BIAS_GRAD_PART,
    K_COUNT
} ocl_op;
static const char *const op_kernels[K_COUNT] = {
    "dg_fill",        "dg_bias_add",      "dg_bias_grad", "dg_relu_fwd", "dg_relu_bwd",
    "dg_maxpool_fwd", "dg_maxpool_bwd",   "dg_im2col",    "dg_col2im",   "dg_sum_parts",
    "dg_xent_rows",   "dg_xent_reduce",   "dg_sgd",       "dg_mark",     "dg_transpose",
    "dg_xent_one",    "dg_bias_grad_part"};
static const bool op_reduces[K_COUNT] = {
    [K_BIAS_GRAD] = true, [K_XENT_REDUCE] = true, [K_XENT_ONE] = true, [K_BIAS_GRAD_PART] = true};
/* A channel's bias gradient is split into slices of about this many values
 * (at most OCL_BG_PARTS of them) on the new path when that makes two or more. */
#define OCL_BG_SLICE 8192
#define OCL_BG_PARTS 1024
#define OCL_LOCAL 256 /* local size of the op kernels (RED_MAX in kernels.cl) */
/* Convolution workspace cap: images are processed in chunks whose column
 * buffer and per-image weight gradients fit in this many bytes (at least one
 * image per chunk). */
#define OCL_CONV_WORK_CAP ((uint64_t)64 << 20)
#define OCL_CONV_WORK_GPU_MAX ((uint64_t)512 << 20) /* most a GPU's cap grows to */
#define OCL_ELEMS_MAX ((uint64_t)INT32_MAX)         /* int-indexed tensors in the kernels */
#define OCL_BATCH_MAX 65535 /* batched GEMM's third NDRange dimension (NVIDIA's grid limit) */

typedef struct ocl_dev {
    cl_platform_id platform;
    cl_device_id device;
} ocl_dev;

#define OCL_PIN_BLOCKS 64 /* page-locked host blocks a context hands out (a loader slot each) */

/* A page-locked host block (host_alloc): a CL_MEM_ALLOC_HOST_PTR buffer
 * mapped once for its whole life, with its device staging twin. An upload
 * from it is a non-blocking write into the twin on the copy queue, so the
 * next batch travels while the compute queue still runs the step before; the
 * compute queue then takes it from the twin with a device-side copy that
 * waits for the write's event. */
typedef struct ocl_pin {
    void *host;      /* the mapped pointer; NULL: slot free */
    cl_mem hbuf;     /* the CL_MEM_ALLOC_HOST_PTR buffer behind host */
    cl_mem stage;    /* device twin, same size */
    size_t bytes;    /* as requested */
    cl_event copied; /* copy queue: the last write from the block; NULL once waited for */
    cl_event used;   /* compute queue: the last copy out of the twin */
} ocl_pin;

typedef struct ocl_ctx {
    ocl_dev *devs;
    int ndev;
    int index;
    cl_context context;
    cl_command_queue queue;
    cl_program program;
    dg_ocl_origin origin;            /* the program built from source or from the binary cache */
    cl_kernel kernels[VAR_COUNT][4]; /* the variants usable on this device; others NULL */
    cl_kernel ops[K_COUNT];
    /* The implicit-GEMM convolution kernels [CONV_FWD, CONV_DW, CONV_DX][db32, db64] where
     * those GEMM variants built; else NULL. */
    cl_kernel conv[3][2];
    size_t ops_local[K_COUNT]; /* local size per op kernel (a power of two for reductions) */
    cl_mem scratch;            /* xent per-row results, grown on demand */
    size_t scratch_bytes;
    cl_mem bt; /* B^T copies for the vec kernel's op(B) = B^T products */
    size_t bt_bytes;
    ocl_split split; /* split-K kernels and workspace (ocl_gemm_split.h) */
    cl_event events[DG_EVENT_SLOTS];
    cl_command_queue copyq; /* uploads from page-locked blocks; created with the first block */
    ocl_pin pin[OCL_PIN_BLOCKS];
    cl_event hold;      /* dg_ocl_hold_copies: a user event every page-locked write waits on */
    uint64_t enqueued;  /* commands put on the queues by uploads, ops and markers (dg_ocl_counts) */
    uint64_t waits;     /* calls that made the host wait for the device */
    bool kernel_marks;  /* markers lack profiling times here: mark with dg_mark */
    bool old_path;      /* DEVGATE_OPENCL_PATH=old: no fused calls, xent in two commands */
    bool direct_upload; /* page-locked uploads as one write on the compute queue */
    bool implicit_bwd;  /* DEVGATE_OPENCL_CONV_BWD=implicit: conv2d_bwd as implicit GEMMs */
    uint64_t conv_cap;  /* convolution workspace cap in bytes */
    cl_uint compute_units;
    cl_ulong max_alloc;
    pthread_t owner; /* the thread that made the context: only it writes err */
    char err[OCL_ERR_MAX];
} ocl_ctx;

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

/* An environment variable naming one of two words: *pick is its index, -1
 * when unset or empty; any other value is a usage error naming the variable. */
static dg_status env_word(const char *name, const char *const words[2], const char *what, int *pick,
                          char *reason, size_t len)
{
    const char *v = getenv(name);
    *pick = -1;
    if (!v || !*v)
        return DG_OK;
    for (int i = 0; i < 2; i++)
        if (strcmp(v, words[i]) == 0) {
            *pick = i;
            return DG_OK;
        }
    return reason_set(reason, len, DG_ERR_USAGE, "%s=%.64s: unknown %s (%s, %s)", name, v, what,
                      words[0], words[1]);
}

/* Stores a message on the context; returns st. */
static dg_status ocl_fail(ocl_ctx *o, dg_status st, const char *fmt, ...) DG_PRINTF(3, 4);
static dg_status ocl_fail(ocl_ctx *o, dg_status st, const char *fmt, ...)
{
    /* Only the owner writes the message: device_info also runs on the
     * sampler thread (caps.device_info_any_thread), whose failure returns
     * its status rather than race on the owner's text. */
    if (!pthread_equal(pthread_self(), o->owner))
        return st;
    va_list ap;
    va_start(ap, fmt);
    vput(o->err, sizeof o->err, fmt, ap);
    va_end(ap);
    return st;
}

/* Stores "<call> failed: NAME (code)" on the context; returns the mapped status. */
static dg_status ocl_clfail(ocl_ctx *o, const char *call, cl_int e)
{
    return ocl_fail(o, dg_ocl_status(e), "%s failed: %s (%d)", call, dg_ocl_err_name(e), (int)e);
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
                          dg_ocl_err_name(e), (int)e);
    cl_platform_id *plats = dg_malloc(nplat * sizeof *plats);
    if (!plats)
        return reason_set(reason, len, DG_ERR_NOMEM, "out of host memory");
    e = clGetPlatformIDs(nplat, plats, NULL);
    if (e != CL_SUCCESS) {
        dg_free(plats);
        return reason_set(reason, len, DG_ERR_UNAVAILABLE, "clGetPlatformIDs failed: %s (%d)",
                          dg_ocl_err_name(e), (int)e);
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

/* Opens the copy gate of dg_ocl_hold_copies, if held. */
static void release_hold(ocl_ctx *o)
{
    if (!o->hold)
        return;
    clSetUserEventStatus(o->hold, CL_COMPLETE);
    clReleaseEvent(o->hold);
    o->hold = NULL;
}

/* Frees one page-locked block, its twin and events, after their work. */
static void pin_release(ocl_ctx *o, ocl_pin *b)
{
    if (b->copied) {
        clWaitForEvents(1, &b->copied);
        clReleaseEvent(b->copied);
    }
    if (b->used) {
        clWaitForEvents(1, &b->used);
        clReleaseEvent(b->used);
    }
    if (b->host) {
        cl_event ev = NULL;
        if (clEnqueueUnmapMemObject(o->copyq, b->hbuf, b->host, 0, NULL, &ev) == CL_SUCCESS && ev) {
            clWaitForEvents(1, &ev);
            clReleaseEvent(ev);
        }
    }
    if (b->hbuf)
        clReleaseMemObject(b->hbuf);
    if (b->stage)
        clReleaseMemObject(b->stage);
    memset(b, 0, sizeof *b);
}

/* Releases everything the context holds, then the context; accepts NULL. */
static void ocl_free(void *ctx)
{
    ocl_ctx *o = ctx;
    if (!o)
        return;
    release_hold(o);
    if (o->queue)
        clFinish(o->queue);
    if (o->copyq) {
        clFinish(o->copyq);
        for (int i = 0; i < OCL_PIN_BLOCKS; i++)
            if (o->pin[i].host || o->pin[i].hbuf)
                pin_release(o, &o->pin[i]);
        clReleaseCommandQueue(o->copyq);
    }
    for (int i = 0; i < DG_EVENT_SLOTS; i++)
        if (o->events[i])
            clReleaseEvent(o->events[i]);
    if (o->scratch)
        clReleaseMemObject(o->scratch);
    if (o->bt)
        clReleaseMemObject(o->bt);
    dg_ocl_split_free(&o->split);
    for (int v = 0; v < VAR_COUNT; v++)
        for (int t = 0; t < 4; t++)
            if (o->kernels[v][t])
                clReleaseKernel(o->kernels[v][t]);
    for (int k = 0; k < K_COUNT; k++)
        if (o->ops[k])
            clReleaseKernel(o->ops[k]);
    for (int k = 0; k < 3; k++)
        for (int v = 0; v < 2; v++)
            if (o->conv[k][v])
                clReleaseKernel(o->conv[k][v]);
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
               OCL_BUILD_OPTS, dg_ocl_err_name(e), (int)e, clean[0] ? clean : "(empty)");
}

/* The automatic GEMM choice on GPUs and accelerators: first the split-K
 * rows (ocl_gemm_split.h: the product in k-slices where its tiles leave
 * compute units idle and k is long, dg_ocl_split_slices), then the direct
 * ones, widest tiles first. A row's variant is taken when the device built it
 * (and its split kernel, for a split row), its tiles alone fill every compute
 * unit (or the row lets tn products off that, or splits) and they pad the
 * product by at most 1/8 more than the next built row's would; the last built
 * row is taken always. Each row says what the H200 measured for it (device
 * GFLOP/s, NVIDIA OpenCL, docs/evidence/h200-ocl-20261201.log and, for the
 * split rows, h200-splitk-20261202.log). db128 is in no row: at every shape
 * where it was picked tiled128 ran faster on the same tiles; it stays for
 * DEVGATE_OPENCL_KERNEL=db128. */
typedef enum pick_fill {
    FILL_ALWAYS, /* no fill needed (the narrowest row) */
    FILL_ALL,    /* the tiles fill every compute unit */
    FILL_OR_TN,  /* fill, or a tn product (op(A) = A^T, op(B) = B: the weight gradients) */
    FILL_SPLIT,  /* split-K takes it (dg_ocl_split_slices answers 2 or more) */
} pick_fill;

typedef struct pick_row {
    ocl_var var;
    pick_fill fill;
    const char *why; /* the H200 measurement behind the row */
} pick_row;

static const pick_row gpu_pick[] = {
    {VAR_D64, FILL_SPLIT,
     "unsplit against split in one run: cifar256.fc1.fwd 2767 (db32) / 17860 in 16 slices, "
     "mlp4096.fc2.dw 4586 / 19051 in 9, sq512 8194 (db32) / 12349 in 4, mlp256.fc1.fwd 5220 / "
     "10555 in 6, mlp4096.fc1.dw 13972 / 20479 in 3; db32's slices ran slower: cifar256.fc1.fwd "
     "17520 in 16, sq512 10555 in 4, mlp4096.fc2.dw 17151 in 8"},
    {VAR_D32, FILL_SPLIT,
     "where 64-wide tiles pad too much: mlp4096.fc3.dw (10 x 256, k 4096) 103 unsplit, 1248 in "
     "32 slices; the batches of small products lenet256.conv1.dw 1429 / 2104 in 2, "
     "cifar256.conv1.dw 6484 / 8263 in 2"},
    {VAR_T128, FILL_ALL,
     "sq4096 tiled128 29682 against db128 20901 and db64 22556; cifar256.conv4.dx 23276 / 17158 / "
     "22479"},
    {VAR_D64, FILL_OR_TN,
     "tn at 64-wide tiles beats db32 though the tiles leave compute units idle: mlp4096.fc1.dw "
     "13914 against 10440, mlp256.fc1.dw 11004 / 9089, mlp4096.fc2.dw 4558 / 4187"},
    {VAR_D32, FILL_ALWAYS, "small products: mlp256.fc1.fwd 6224 against db64 5029"},
};
#define GPU_PICK_ROWS (sizeof gpu_pick / sizeof gpu_pick[0])

/* The variants a device class builds for the automatic choice: the gpu_pick
 * rows on GPUs and accelerators, vec on CPUs (bit per ocl_var). */
static unsigned class_variants(bool cpu)
{
    if (cpu)
        return 1u << VAR_VEC;
    unsigned have = 0;
    for (size_t i = 0; i < GPU_PICK_ROWS; i++)
        have |= 1u << gpu_pick[i].var;
    return have;
}

/* What the choice knows of a device beside the product: the variants built
 * (have) and those with a split-K kernel for the product's transposes
 * (split), a bit per ocl_var; its compute units; DEVGATE_OPENCL_SPLITK
 * (force); the split workspace's cap in bytes (0: none). */
typedef struct pick_dev {
    unsigned have, split, cus;
    int force;
    uint64_t cap;
} pick_dev;

/* A product's kernel: the variant and the k-slices (1: not split). */
typedef struct ocl_pick {
    ocl_var var;
    int slices;
} ocl_pick;

/* The tile edge of variant v's split-K form (ocl_gemm_split.h); 0: none. */
static int split_tile(ocl_var v)
{
    return v == VAR_D32 || v == VAR_D64 ? (int)var_tile[v] : 0;
}

/* The k-slices variant v splits the product into on d (1: none). */
static int pick_slices(const pick_dev *d, ocl_var v, int m, int n, int k, size_t batch)
{
    if (!(d->split & (1u << v)))
        return 1;
    return dg_ocl_split_slices(d->force, d->cus, split_tile(v), m, n, k, batch, d->cap);
}

/* The kernel for a batch of m x n x k products on device d: the only variant
 * built (split as dg_ocl_split_slices says), else the gpu_pick table's row,
 * else vec, else naive. */
static ocl_pick pick_core(const pick_dev *d, bool ta, bool tb, int m, int n, int k, size_t batch)
{
    unsigned have = d->have;
    if (have && !(have & (have - 1))) { /* one variant (DEVGATE_OPENCL_KERNEL) */
        int v = 0;
        while (!(have & (1u << v)))
            v++;
        return (ocl_pick){(ocl_var)v, pick_slices(d, (ocl_var)v, m, n, k, batch)};
    }
    const pick_row *rows[GPU_PICK_ROWS];
    size_t nr = 0;
    for (size_t i = 0; i < GPU_PICK_ROWS; i++)
        if (have & (1u << gpu_pick[i].var) &&
            (gpu_pick[i].fill != FILL_SPLIT || d->split & (1u << gpu_pick[i].var)))
            rows[nr++] = &gpu_pick[i];
    for (size_t j = 0; j < nr; j++) {
        ocl_var v = rows[j]->var;
        int slices = rows[j]->fill == FILL_SPLIT ? pick_slices(d, v, m, n, k, batch) : 1;
        if (j == nr - 1)
            return (ocl_pick){v, slices};
        uint64_t ts = var_tile[v], ns = var_tile[rows[j + 1]->var];
        uint64_t gm = ((uint64_t)m + ts - 1) / ts, gn = ((uint64_t)n + ts - 1) / ts;
        uint64_t pad = gm * gn * ts * ts;
        uint64_t npad = ((uint64_t)m + ns - 1) / ns * (((uint64_t)n + ns - 1) / ns) * ns * ns;
        bool fills = gm * gn * batch >= d->cus;
        bool ok = rows[j]->fill == FILL_ALWAYS  ? true
                  : rows[j]->fill == FILL_SPLIT ? slices > 1
                  : rows[j]->fill == FILL_ALL   ? fills
                                                : fills || (ta && !tb);
        if (ok && pad * 8 <= npad * 9)
            return (ocl_pick){v, slices};
    }
    if (have & (1u << VAR_VEC))
        return (ocl_pick){VAR_VEC, 1};
    return (ocl_pick){VAR_NAIVE, 1};
}

/* The variants this context built, a bit per ocl_var. */
static unsigned built_variants(const ocl_ctx *o)
{
    unsigned have = 0;
    for (int v = 0; v < VAR_COUNT; v++)
        if (o->kernels[v][0])
            have |= 1u << v;
    return have;
}

/* The choice for a product here, split-K as DEVGATE_OPENCL_SPLITK says
 * where split (else none), with the workspace under the convolutions' cap
 * and the device's allocation limit. */
static ocl_pick pick_gemm(const ocl_ctx *o, bool ta, bool tb, int m, int n, int k, size_t batch,
                          bool split)
{
    pick_dev d = {built_variants(o), 0, o->compute_units, split ? o->split.force : 0, o->conv_cap};
    if (o->max_alloc && o->max_alloc < d.cap)
        d.cap = o->max_alloc;
    for (int t = 0; t < 2 && split; t++) {
        ocl_var v = t ? VAR_D64 : VAR_D32;
        if (dg_ocl_split_has(&o->split, split_tile(v), ta, tb))
            d.split |= 1u << v;
    }
    return pick_core(&d, ta, tb, m, n, k, batch);
}

/* The direct (unsplit) kernel variant for a product here. */
static ocl_var pick_var(const ocl_ctx *o, bool ta, bool tb, int m, int n, size_t batch)
{
    return pick_gemm(o, ta, tb, m, n, 0, batch, false).var;
}

/* Creates the four transpose specialisations of kernel variant v; for a
 * tiled one also checks that they fit the device (work-group size, item
 * sizes, local memory) and sets *fits. */
static dg_status make_kernel(ocl_ctx *o, ocl_var v, bool *fits, char *reason, size_t len)
{
    cl_device_id dev = o->devs[o->index].device;
    *fits = true;
    size_t wg = SIZE_MAX;
    for (int t = 0; t < 4; t++) {
        char name[64];
        snprintf(name, sizeof name, "%s%s", var_kernels[v], trans_suffix[t]);
        cl_int e = CL_SUCCESS;
        o->kernels[v][t] = clCreateKernel(o->program, name, &e);
        if (!o->kernels[v][t])
            return reason_set(reason, len, dg_ocl_status(e), "clCreateKernel(%s) failed: %s (%d)",
                              name, dg_ocl_err_name(e), (int)e);
        size_t kwg = 0;
        e = clGetKernelWorkGroupInfo(o->kernels[v][t], dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof kwg,
                                     &kwg, NULL);
        if (e != CL_SUCCESS)
            return reason_set(reason, len, DG_ERR_BACKEND, "querying %s limits failed: %s (%d)",
                              name, dg_ocl_err_name(e), (int)e);
        if (kwg < wg)
            wg = kwg;
    }
    if (!var_tile[v])
        return DG_OK;
    size_t item[3] = {0, 0, 0};
    cl_ulong local = 0;
    cl_int e = clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof item, item, NULL);
    if (e == CL_SUCCESS)
        e = clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    if (e != CL_SUCCESS)
        return reason_set(reason, len, DG_ERR_BACKEND, "querying %s limits failed: %s (%d)",
                          var_kernels[v], dg_ocl_err_name(e), (int)e);
    *fits = wg >= var_wg[v] * var_wg[v] && item[0] >= var_wg[v] && item[1] >= var_wg[v] &&
            local >= var_local[v];
    if (!*fits) {
        reason_set(reason, len, DG_ERR_UNAVAILABLE,
                   "%s does not fit the device (kernel work-group limit %zu, local memory %llu "
                   "bytes)",
                   var_kernels[v], wg, (unsigned long long)local);
        for (int t = 0; t < 4; t++) {
            clReleaseKernel(o->kernels[v][t]);
            o->kernels[v][t] = NULL;
        }
    }
    return DG_OK;
}

/* Creates the GEMM kernels for the device: vec on CPUs; on other devices the
 * tiled kernels of the gpu_pick table (tiled128, db64, db32) that fit, else
 * naive. DEVGATE_OPENCL_KERNEL (tiled: that GPU set on any device; or one
 * variant by name) forces a choice. */
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
                          dg_ocl_err_name(e), (int)e);

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
                              "DEVGATE_OPENCL_KERNEL=%.64s: unknown kernel (tiled, db32, db64, "
                              "db128, tiled64, tiled128, vec, naive)",
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
    char why[256] = "";
    unsigned want = class_variants(false);
    for (int v = 0; v < VAR_COUNT; v++) {
        if (!(want & (1u << v)))
            continue;
        st = make_kernel(o, (ocl_var)v, &fits, why, sizeof why); /* each optional */
        if (st != DG_OK) {
            reason_set(reason, len, st, "%s", why);
            return st;
        }
    }
    if (!built_variants(o))
        return make_kernel(o, VAR_NAIVE, &fits, reason, len);
    return DG_OK;
}

/* Creates the training-op kernels and picks their local sizes: OCL_LOCAL or
 * less where the kernel or device allows less (a power of two for the
 * reductions). */
static dg_status make_op_kernels(ocl_ctx *o, char *reason, size_t len)
{
    cl_device_id dev = o->devs[o->index].device;
    size_t item[3] = {0, 0, 0};
    cl_int e = clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof item, item, NULL);
    if (e != CL_SUCCESS)
        return reason_set(reason, len, DG_ERR_BACKEND,
                          "clGetDeviceInfo(MAX_WORK_ITEM_SIZES) failed: %s (%d)",
                          dg_ocl_err_name(e), (int)e);
    for (int k = 0; k < K_COUNT; k++) {
        o->ops[k] = clCreateKernel(o->program, op_kernels[k], &e);
        if (!o->ops[k])
            return reason_set(reason, len, dg_ocl_status(e), "clCreateKernel(%s) failed: %s (%d)",
                              op_kernels[k], dg_ocl_err_name(e), (int)e);
        size_t wg = 0;
        e = clGetKernelWorkGroupInfo(o->ops[k], dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg,
                                     NULL);
        if (e != CL_SUCCESS)
            return reason_set(reason, len, DG_ERR_BACKEND, "querying %s limits failed: %s (%d)",
                              op_kernels[k], dg_ocl_err_name(e), (int)e);
        size_t l = OCL_LOCAL;
        if (l > wg)
            l = wg;
        if (l > item[0])
            l = item[0];
        if (l == 0)
            l = 1;
        if (op_reduces[k])
            while (l & (l - 1))
                l &= l - 1; /* round down to a power of two */
        o->ops_local[k] = l;
    }
    return DG_OK;
}

/* The implicit-GEMM convolution kernels beside the db32 and db64 GEMM
 * kernels this context built (each optional: where one cannot be made or
 * does not fit, convolutions go through im2col as before). */
static void make_conv_kernels(ocl_ctx *o)
{
    static const char *const names[3][2] = {{"dg_conv_db32", "dg_conv_db64"},
                                            {"dg_convdw_db32", "dg_convdw_db64"},
                                            {"dg_convdx_db32", "dg_convdx_db64"}};
    static const ocl_var vars[2] = {VAR_D32, VAR_D64};
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 2; i++) {
            if (!o->kernels[vars[i]][0])
                continue;
            cl_int e = CL_SUCCESS;
            cl_kernel kr = clCreateKernel(o->program, names[c][i], &e);
            size_t wg = 0;
            if (kr &&
                clGetKernelWorkGroupInfo(kr, o->devs[o->index].device, CL_KERNEL_WORK_GROUP_SIZE,
                                         sizeof wg, &wg, NULL) == CL_SUCCESS &&
                wg >= var_wg[vars[i]] * var_wg[vars[i]]) {
                o->conv[c][i] = kr;
            } else if (kr) {
                clReleaseKernel(kr);
            }
        }
}

/* The convolution workspace cap: OCL_CONV_WORK_CAP on CPUs; on other devices
 * 1/256 of the device memory within OCL_CONV_WORK_CAP .. OCL_CONV_WORK_GPU_MAX
 * (fewer, larger chunks: each chunk costs several launches); or the byte count
 * in DEVGATE_OPENCL_CONV_WORK (so tests can force one image per chunk). Also
 * the path: DEVGATE_OPENCL_PATH=old keeps the unfused commands (no fused
 * calls, the bias of a convolution a command of its own, xent in two) for
 * side-by-side measurements; new (the default) fuses. */
static dg_status read_conv_cap(ocl_ctx *o, char *reason, size_t len)
{
    o->conv_cap = OCL_CONV_WORK_CAP;
    cl_device_id dev = o->devs[o->index].device;
    cl_device_type type = 0;
    cl_ulong mem = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL) == CL_SUCCESS &&
        !(type & CL_DEVICE_TYPE_CPU) &&
        clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL) == CL_SUCCESS) {
        uint64_t c = mem / 256;
        o->conv_cap = c < OCL_CONV_WORK_CAP       ? OCL_CONV_WORK_CAP
                      : c > OCL_CONV_WORK_GPU_MAX ? OCL_CONV_WORK_GPU_MAX
                                                  : c;
    }
    static const char *const paths[2] = {"new", "old"}, *const uploads[2] = {"direct", "staged"},
                             *const bwds[2] = {"im2col", "implicit"};
    int path, up, bwd;
    dg_status st;
    if ((st = env_word("DEVGATE_OPENCL_PATH", paths, "path", &path, reason, len)) != DG_OK ||
        (st = env_word("DEVGATE_OPENCL_UPLOAD", uploads, "upload", &up, reason, len)) != DG_OK ||
        (st = env_word("DEVGATE_OPENCL_CONV_BWD", bwds, "path", &bwd, reason, len)) != DG_OK)
        return st;
    o->old_path = path == 1;
    /* Staged on both paths unless asked: on the H200 the direct write's h2d
     * phase took 2.4 ms of mlp's step at batch 1024 (docs/evidence/
     * h200-oclbench-20261202.log), the staged one overlaps the step before. */
    o->direct_upload = up == 0;
    o->implicit_bwd = bwd == 1;
    const char *v = getenv("DEVGATE_OPENCL_CONV_WORK");
    if (!v || !*v)
        return DG_OK;
    char *end = NULL;
    errno = 0;
    unsigned long long b = strtoull(v, &end, 10);
    if (errno || *end || b == 0 || v[0] < '0' || v[0] > '9')
        return reason_set(reason, len, DG_ERR_USAGE,
                          "DEVGATE_OPENCL_CONV_WORK=%.64s: not a byte count above 0", v);
    o->conv_cap = b;
    return DG_OK;
}

/* Whether a marker's event carries profiling times here (a platform may answer
 * CL_PROFILING_INFO_NOT_AVAILABLE for markers); where not, event_record
 * enqueues the empty dg_mark kernel instead. */
static void probe_markers(ocl_ctx *o)
{
    cl_event ev = NULL;
    cl_ulong end = 0;
    cl_int e = clEnqueueMarkerWithWaitList(o->queue, 0, NULL, &ev);
    if (e == CL_SUCCESS)
        e = clWaitForEvents(1, &ev);
    if (e == CL_SUCCESS)
        e = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL);
    o->kernel_marks = e != CL_SUCCESS || end == 0;
    if (ev)
        clReleaseEvent(ev);
}

/* Opens device `device`: context, profiling queue, and unless `probe` the
 * program, GEMM and op kernels. */
static dg_status ocl_open(int device, void **ctx, char *reason, size_t len, bool probe)
{
    if (reason && len)
        reason[0] = '\0';
    if (!ctx)
        return reason_set(reason, len, DG_ERR_USAGE, "no context pointer");
    *ctx = NULL;
    ocl_ctx *o = dg_calloc(1, sizeof *o);
    if (!o)
        return reason_set(reason, len, DG_ERR_NOMEM, "out of host memory");
    o->owner = pthread_self();
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
        st = reason_set(reason, len, dg_ocl_status(e),
                        "clCreateContext failed on OpenCL device %d (%s): %s (%d)", device, name,
                        dg_ocl_err_name(e), (int)e);
        goto fail;
    }
    o->queue = clCreateCommandQueue(o->context, d->device, CL_QUEUE_PROFILING_ENABLE, &e);
    if (!o->queue) {
        st = reason_set(reason, len, dg_ocl_status(e),
                        "clCreateCommandQueue failed on OpenCL device %d (%s): %s (%d)", device,
                        name, dg_ocl_err_name(e), (int)e);
        goto fail;
    }
    if (probe) {
        *ctx = o;
        return DG_OK;
    }
    cl_device_type type = 0;
    clGetDeviceInfo(d->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    o->program = dg_ocl_program_build(o->context, d->platform, d->device, opencl_kernels,
                                      OCL_BUILD_OPTS, !(type & CL_DEVICE_TYPE_CPU), &e, &o->origin);
    if (!o->program) {
        st = reason_set(reason, len, dg_ocl_status(e), "clCreateProgramWithSource failed: %s (%d)",
                        dg_ocl_err_name(e), (int)e);
        goto fail;
    }
    if (e != CL_SUCCESS) {
        build_failure(o, e, reason, len);
        st = e == CL_OUT_OF_HOST_MEMORY ? DG_ERR_NOMEM : DG_ERR_BACKEND;
        goto fail;
    }
    st = read_conv_cap(o, reason, len);
    if (st == DG_OK)
        st = dg_ocl_split_env(&o->split.force, reason, len);
    if (st == DG_OK)
        st = pick_kernels(o, reason, len);
    if (st == DG_OK)
        st = make_op_kernels(o, reason, len);
    if (st == DG_OK) /* split-K for the db32 and db64 tiles built */
        st = dg_ocl_split_init(&o->split, o->program, d->device, o->kernels[VAR_D32][0] != NULL,
                               o->kernels[VAR_D64][0] != NULL, reason, len);
    if (st != DG_OK)
        goto fail;
    make_conv_kernels(o);
    probe_markers(o);
    *ctx = o;
    return DG_OK;
fail:
    ocl_free(o);
    return st;
}

static dg_status ocl_init(int device, void **ctx, char *reason, size_t len)
{
    return ocl_open(device, ctx, reason, len, false);
}

/* The environment proof's open: context and queue, no program (a cold
 * platform compiles it for seconds: 18 s on the H200's first start). */
static dg_status ocl_probe(int device, void **ctx, char *reason, size_t len)
{
    return ocl_open(device, ctx, reason, len, true);
}

const char *dg_ocl_program_origin(void *ctx)
{
    ocl_ctx *o = ctx;
    return !o ? "" : o->origin == DG_OCL_FROM_CACHE ? "cache" : "source";
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
        /* A CPU device, or one sharing the host's memory, has no link to cross. */
        cl_device_type type = 0;
        cl_bool unified = CL_FALSE;
        if (clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof type, &type, NULL) == CL_SUCCESS &&
            (type & CL_DEVICE_TYPE_CPU))
            out->host_memory = true;
        if (clGetDeviceInfo(d, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL) ==
                CL_SUCCESS &&
            unified)
            out->host_memory = true;
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
        return e == CL_INVALID_BUFFER_SIZE ? DG_ERR_DEVICE_OOM : dg_ocl_status(e);
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
                        dg_ocl_err_name(e), (int)e);
    if (off > size || bytes > size - off)
        return ocl_fail(o, DG_ERR_USAGE, "%s: range [%zu, +%zu) outside the %zu-byte buffer", what,
                        off, bytes, size);
    return DG_OK;
}

/* ---- page-locked host blocks (host_alloc, host_wait, host_free) ------------------ */

/* The page-locked block holding [p, p + bytes), NULL when none does. */
static ocl_pin *pin_find(ocl_ctx *o, const void *p, size_t bytes)
{
    const char *q = p;
    for (int i = 0; i < OCL_PIN_BLOCKS; i++) {
        const char *h = o->pin[i].host;
        if (h && q >= h && (size_t)(q - h) <= o->pin[i].bytes &&
            bytes <= o->pin[i].bytes - (size_t)(q - h))
            return &o->pin[i];
    }
    return NULL;
}

/* Enqueues src (inside block b) to buf at off without waiting: a non-blocking
 * write into the twin on the copy queue (after the compute queue's last copy
 * out of the twin), then twin to buf on the compute queue once it arrived.
 * Both queues are flushed: the compute queue's wait on the copy queue's event
 * needs the copy submitted, and the flush sends the step before to the device
 * while the host builds this one (no blocking call does that any more). */
static dg_status upload_pinned(ocl_ctx *o, ocl_pin *b, cl_mem buf, size_t off, const void *src,
                               size_t bytes)
{
    size_t at = (size_t)((const char *)src - (const char *)b->host);
    if (o->direct_upload) {
        /* One command: the write on the compute queue itself, in order with
         * the ops (no twin, no event crossing queues); its event is what
         * host_wait waits for. */
        cl_event copied = NULL;
        cl_int e = clEnqueueWriteBuffer(o->queue, buf, CL_FALSE, off, bytes, src, o->hold ? 1 : 0,
                                        o->hold ? &o->hold : NULL, &copied);
        if (e != CL_SUCCESS)
            return ocl_clfail(o, "clEnqueueWriteBuffer(page-locked upload)", e);
        if (b->copied)
            clReleaseEvent(b->copied);
        b->copied = copied;
        o->enqueued++;
        e = clFlush(o->queue);
        return e == CL_SUCCESS ? DG_OK : ocl_clfail(o, "clFlush", e);
    }
    cl_event wait[2];
    cl_uint nw = 0;
    if (b->used)
        wait[nw++] = b->used;
    if (o->hold)
        wait[nw++] = o->hold;
    cl_event copied = NULL, used = NULL;
    cl_int e = clEnqueueWriteBuffer(o->copyq, b->stage, CL_FALSE, at, bytes, src, nw,
                                    nw ? wait : NULL, &copied);
    if (e != CL_SUCCESS)
        return ocl_clfail(o, "clEnqueueWriteBuffer(page-locked upload)", e);
    if (b->copied)
        clReleaseEvent(b->copied); /* the copy queue is in order: the new one ends later */
    b->copied = copied;
    e = clFlush(o->copyq);
    if (e != CL_SUCCESS)
        return ocl_clfail(o, "clFlush(copy queue)", e);
    e = clEnqueueCopyBuffer(o->queue, b->stage, buf, at, off, bytes, 1, &b->copied, &used);
    if (e != CL_SUCCESS)
        return ocl_clfail(o, "clEnqueueCopyBuffer(page-locked upload)", e);
    if (b->used)
        clReleaseEvent(b->used);
    b->used = used;
    o->enqueued += 2;
    e = clFlush(o->queue);
    return e == CL_SUCCESS ? DG_OK : ocl_clfail(o, "clFlush", e);
}

/* A page-locked host block of `bytes` with its device twin (interface v4), as
 * the cuda backend's: DG_ERR_NOMEM when every slot is taken or the host
 * refuses the block, DG_ERR_DEVICE_OOM when the twin does not fit. */
static dg_status ocl_host_alloc(void *ctx, size_t bytes, void **p)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    if (!p)
        return ocl_fail(o, DG_ERR_USAGE, "host_alloc: NULL output");
    *p = NULL;
    ocl_pin *b = NULL;
    for (int i = 0; i < OCL_PIN_BLOCKS && !b; i++)
        if (!o->pin[i].host)
            b = &o->pin[i];
    if (!b)
        return ocl_fail(o, DG_ERR_NOMEM, "host_alloc: all %d page-locked blocks in use",
                        OCL_PIN_BLOCKS);
    size_t n = bytes ? bytes : 1;
    if ((cl_ulong)n > o->max_alloc)
        return ocl_fail(o, DG_ERR_DEVICE_OOM,
                        "host_alloc: %zu bytes exceed CL_DEVICE_MAX_MEM_ALLOC_SIZE (%llu)", n,
                        (unsigned long long)o->max_alloc);
    cl_int e = CL_SUCCESS;
    if (!o->copyq) {
        o->copyq = clCreateCommandQueue(o->context, o->devs[o->index].device, 0, &e);
        if (!o->copyq)
            return ocl_clfail(o, "host_alloc: clCreateCommandQueue(copy queue)", e);
    }
    b->hbuf = clCreateBuffer(o->context, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, n, NULL, &e);
    if (!b->hbuf)
        return ocl_fail(o, DG_ERR_NOMEM,
                        "host_alloc: clCreateBuffer(CL_MEM_ALLOC_HOST_PTR) of %zu bytes failed: "
                        "%s (%d)",
                        n, dg_ocl_err_name(e), (int)e);
    b->host = clEnqueueMapBuffer(o->copyq, b->hbuf, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, n, 0,
                                 NULL, NULL, &e);
    if (!b->host) {
        pin_release(o, b);
        return ocl_fail(o, DG_ERR_NOMEM,
                        "host_alloc: mapping %zu page-locked bytes failed: %s (%d)", n,
                        dg_ocl_err_name(e), (int)e);
    }
    b->bytes = bytes;
    b->stage = clCreateBuffer(o->context, CL_MEM_READ_WRITE, n, NULL, &e);
    if (!b->stage) {
        pin_release(o, b);
        dg_status st = e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_RESOURCES ||
                               e == CL_INVALID_BUFFER_SIZE
                           ? DG_ERR_DEVICE_OOM
                           : dg_ocl_status(e);
        return ocl_fail(o, st, "host_alloc: staging twin of %zu bytes: %s (%d)", n,
                        dg_ocl_err_name(e), (int)e);
    }
    *p = b->host;
    return DG_OK;
}

/* Waits until no upload still reads from the block holding p. */
static dg_status ocl_host_wait(void *ctx, const void *p)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    ocl_pin *b = p ? pin_find(o, p, 0) : NULL;
    if (!b)
        return ocl_fail(o, DG_ERR_USAGE, "host_wait: %p is not in a page-locked block", p);
    if (!b->copied)
        return DG_OK;
    cl_int e = clWaitForEvents(1, &b->copied);
    o->waits++;
    if (e != CL_SUCCESS)
        return ocl_clfail(o, "host_wait: clWaitForEvents", e);
    clReleaseEvent(b->copied);
    b->copied = NULL;
    return DG_OK;
}

/* Frees the block starting at p after its uploads; accepts NULL. */
static void ocl_host_free(void *ctx, void *p)
{
    ocl_ctx *o = ctx;
    if (!o || !p)
        return;
    for (int i = 0; i < OCL_PIN_BLOCKS; i++)
        if (o->pin[i].host == p) {
            pin_release(o, &o->pin[i]);
            return;
        }
    ocl_fail(o, DG_ERR_USAGE, "host_free: %p is not a page-locked block", p);
}

dg_status dg_ocl_counts(void *ctx, uint64_t *enqueued, uint64_t *waits)
{
    const ocl_ctx *o = ctx;
    if (!o || !enqueued || !waits)
        return DG_ERR_USAGE;
    *enqueued = o->enqueued;
    *waits = o->waits;
    return DG_OK;
}

dg_status dg_ocl_hold_copies(void *ctx, bool hold)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    if (!hold) {
        release_hold(o);
        return DG_OK;
    }
    if (o->hold)
        return DG_OK;
    cl_int e = CL_SUCCESS;
    o->hold = clCreateUserEvent(o->context, &e);
    return o->hold ? DG_OK : ocl_clfail(o, "clCreateUserEvent", e);
}

/* Host src to buf at byte offset off; returns when the copy is done, except
 * from a page-locked block (host_alloc), where it only enqueues. */
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
    ocl_pin *pb = pin_find(o, src, bytes);
    if (pb)
        return upload_pinned(o, pb, (cl_mem)buf, off, src, bytes);
    cl_int e = clEnqueueWriteBuffer(o->queue, (cl_mem)buf, CL_TRUE, off, bytes, src, 0, NULL, NULL);
    o->enqueued++;
    o->waits++;
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
    o->enqueued++;
    o->waits++;
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

/* Checks that ref r holds elems 4-byte elements: a buffer of this backend, a
 * 4-byte aligned offset, the whole range inside the buffer. *eoff gets the
 * offset in elements. */
static dg_status check_ref(ocl_ctx *o, const char *op, const char *name, dg_ref r, uint64_t elems,
                           cl_ulong *eoff)
{
    if (!r.buf)
        return ocl_fail(o, DG_ERR_USAGE, "%s: %s is absent", op, name);
    if (r.off % sizeof(float))
        return ocl_fail(o, DG_ERR_USAGE, "%s: offset of %s (%zu bytes) not 4-byte aligned", op,
                        name, r.off);
    if (elems > SIZE_MAX / sizeof(float))
        return ocl_fail(o, DG_ERR_USAGE, "%s: %s extent overflows", op, name);
    char what[64];
    snprintf(what, sizeof what, "%s %s", op, name);
    *eoff = r.off / sizeof(float);
    return check_range(o, what, r.buf, r.off, (size_t)elems * sizeof(float));
}

/* One operand of an op for check_refs: its name, the ref, the elements it must
 * hold, where its offset in elements goes; skip: not used by this call. */
typedef struct operand {
    const char *name;
    dg_ref ref;
    uint64_t elems;
    cl_ulong *eoff;
    bool skip;
} operand;

/* check_ref over the operands in order; the first failure's status. */
static dg_status check_refs(ocl_ctx *o, const char *op, const operand *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (v[i].skip)
            continue;
        dg_status st = check_ref(o, op, v[i].name, v[i].ref, v[i].elems, v[i].eoff);
        if (st != DG_OK)
            return st;
    }
    return DG_OK;
}

static dg_status set_args(ocl_ctx *o, cl_kernel k, const char *name, const karg *args, size_t n)
{
    size_t i = 0;
    cl_int e = dg_ocl_set_args(k, args, n, &i);
    if (e != CL_SUCCESS)
        return ocl_fail(o, dg_ocl_status(e), "clSetKernelArg(%s, %zu) failed: %s (%d)", name, i,
                        dg_ocl_err_name(e), (int)e);
    return DG_OK;
}

/* Sets op kernel k's arguments and enqueues it over items work-items rounded
 * up to the kernel's local size (an explicit local size: left to the driver,
 * an odd count can get work-groups of one). A reduction passes items =
 * groups * ops_local[k]. */
static dg_status run_op(ocl_ctx *o, ocl_op k, const karg *args, size_t nargs, size_t items)
{
    dg_status st = set_args(o, o->ops[k], op_kernels[k], args, nargs);
    if (st != DG_OK)
        return st;
    size_t local = o->ops_local[k];
    size_t global = (items + local - 1) / local * local;
    cl_int e = clEnqueueNDRangeKernel(o->queue, o->ops[k], 1, NULL, &global, &local, 0, NULL, NULL);
    if (e != CL_SUCCESS)
        return ocl_fail(o, dg_ocl_status(e), "clEnqueueNDRangeKernel(%s) failed: %s (%d)",
                        op_kernels[k], dg_ocl_err_name(e), (int)e);
    o->enqueued++;
    return DG_OK;
}

/* Enqueues the packed copy of the batch B_i^T (B_i stored n x k) into o->bt,
 * grown on demand up to the workspace cap (o->conv_cap, as the convolutions'),
 * and points *b, *eb, *ldb, *sb at it (then op(B_i) = the copy,
 * untransposed). DG_ERR_UNAVAILABLE (nothing changed) when the copies would
 * pass the cap or the device's allocation limit: the vec kernel then gathers
 * B^T itself. */
static dg_status transpose_b(ocl_ctx *o, cl_mem *b, cl_ulong *eb, int *ldb, cl_ulong *sb, int n,
                             int k, size_t batch)
{
    uint64_t bytes = (uint64_t)n * (uint64_t)k * batch * sizeof(float);
    if (bytes > o->conv_cap || (o->max_alloc && bytes > o->max_alloc) ||
        (uint64_t)n * (uint64_t)k > OCL_ELEMS_MAX)
        return DG_ERR_UNAVAILABLE;
    if (o->bt_bytes < bytes) {
        size_t want = o->bt_bytes * 2 > bytes ? o->bt_bytes * 2 : (size_t)bytes;
        if (want > o->conv_cap)
            want = (size_t)bytes;
        cl_int e = CL_SUCCESS;
        cl_mem m = clCreateBuffer(o->context, CL_MEM_READ_WRITE, want, NULL, &e);
        if (!m)
            return e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_RESOURCES
                       ? DG_ERR_UNAVAILABLE
                       : ocl_clfail(o, "clCreateBuffer(gemm B^T copy)", e);
        if (o->bt)
            clReleaseMemObject(o->bt); /* lives on until its last command finishes */
        o->bt = m;
        o->bt_bytes = want;
    }
    cl_int rows = n, cols = k, ld = *ldb;
    cl_ulong off = *eb, stride = *sb;
    const karg args[] = {KA(*b), KA(off), KA(ld), KA(stride), KA(o->bt), KA(rows), KA(cols)};
    dg_status st = set_args(o, o->ops[K_TRANSPOSE], op_kernels[K_TRANSPOSE], args, NARGS(args));
    if (st != DG_OK)
        return st;
    size_t local[3] = {16, 16, 1};
    size_t global[3] = {((size_t)n + 15) / 16 * 16, ((size_t)k + 15) / 16 * 16, batch};
    /* A device that cannot run 16 x 16 groups picks its own. */
    size_t *lp = o->ops_local[K_TRANSPOSE] < 256 ? NULL : local;
    cl_int e =
        clEnqueueNDRangeKernel(o->queue, o->ops[K_TRANSPOSE], 3, NULL, global, lp, 0, NULL, NULL);
    if (e != CL_SUCCESS)
        return ocl_clfail(o, "clEnqueueNDRangeKernel(dg_transpose)", e);
    o->enqueued++;
    *b = o->bt;
    *eb = 0;
    *ldb = n;
    *sb = (cl_ulong)n * (cl_ulong)k;
    return DG_OK;
}

/* The implicit-GEMM convolution kinds (ocl_ctx.conv's first index). */
enum { CONV_FWD, CONV_DW, CONV_DX };

/* Enqueues batch GEMMs on checked operands, product i on the operands
 * advanced by i*sa, i*sb, i*sc elements, with pick_var's variant, then the
 * epilogue ep (NULL: none) on every output. */
static dg_status enqueue_product(ocl_ctx *o, bool ta, bool tb, int m, int n, int k, float alpha,
                                 cl_mem a, cl_ulong ea, int lda, cl_ulong sa, cl_mem b, cl_ulong eb,
                                 int ldb, cl_ulong sb, float beta, cl_mem c, cl_ulong ec, int ldc,
                                 cl_ulong sc, size_t batch, const ocl_epi *ep, const cl_int8 *geo,
                                 int cv);

/* Product g split into p.slices k-slices of variant p.var's tiles;
 * DG_ERR_UNAVAILABLE (nothing enqueued) where the workspace does not fit. */
static dg_status split_product(ocl_ctx *o, ocl_pick p, const ocl_split_gemm *g)
{
    char err[256] = "";
    dg_status st = dg_ocl_split_enqueue(&o->split, o->context, o->queue, split_tile(p.var),
                                        p.slices, g, &o->enqueued, err, sizeof err);
    return st == DG_OK || st == DG_ERR_UNAVAILABLE ? st : ocl_fail(o, st, "%s", err);
}

/* enqueue_product without a convolution: split into k-slices where the
 * choice takes it (g in ocl_split_gemm's field order), else the direct
 * kernel. */
static dg_status enqueue_gemm_ep(ocl_ctx *o, bool ta, bool tb, int m, int n, int k, float alpha,
                                 cl_mem a, cl_ulong ea, int lda, cl_ulong sa, cl_mem b, cl_ulong eb,
                                 int ldb, cl_ulong sb, float beta, cl_mem c, cl_ulong ec, int ldc,
                                 cl_ulong sc, size_t batch, const ocl_epi *ep)
{
    ocl_pick p = pick_gemm(o, ta, tb, m, n, k, batch, true);
    if (p.slices > 1) {
        const ocl_split_gemm g = {ta, tb, m,   n,   k,   alpha, beta, a,  b,     c, ea,
                                  eb, ec, lda, ldb, ldc, sa,    sb,   sc, batch, ep};
        dg_status st = split_product(o, p, &g);
        if (st != DG_ERR_UNAVAILABLE)
            return st;
    }
    return enqueue_product(o, ta, tb, m, n, k, alpha, a, ea, lda, sa, b, eb, ldb, sb, beta, c, ec,
                           ldc, sc, batch, ep, NULL, CONV_FWD);
}

/* The implicit-GEMM convolution kernel of kind cv (CONV_FWD, CONV_DW,
 * CONV_DX) for an m x n product over batch images, as the GEMM choice would
 * tile it (0: db32, 1: db64); -1 when none serves (the old path, or no such
 * kernel here: im2col). */
static int conv_kernel_for(const ocl_ctx *o, int cv, int m, int n, size_t batch)
{
    if (o->old_path)
        return -1;
    ocl_var v = pick_var(o, false, cv == CONV_DW, m, n, batch);
    if (v == VAR_D32 && o->conv[cv][0])
        return 0;
    if ((v == VAR_D64 || v == VAR_T128 || v == VAR_D128 || v == VAR_T64) && o->conv[cv][1])
        return 1;
    return -1;
}

/* enqueue_gemm_ep, or with geo (c, h, w, kh, kw, stride, pad, wo) the
 * implicit-GEMM convolution of kind cv (kernels.cl's dg_db cv 1 or 2): the
 * image (or output gradient) of product i at b + eb + i * sb
 * (conv_kernel_for must have answered). */
static dg_status enqueue_product(ocl_ctx *o, bool ta, bool tb, int m, int n, int k, float alpha,
                                 cl_mem a, cl_ulong ea, int lda, cl_ulong sa, cl_mem b, cl_ulong eb,
                                 int ldb, cl_ulong sb, float beta, cl_mem c, cl_ulong ec, int ldc,
                                 cl_ulong sc, size_t batch, const ocl_epi *ep, const cl_int8 *geo,
                                 int cv)
{
    ocl_var v = pick_var(o, ta, tb, m, n, batch);
    int ck = geo ? conv_kernel_for(o, cv, m, n, batch) : -1;
    if (geo && ck < 0)
        return ocl_fail(o, DG_ERR_BACKEND, "conv2d: no implicit-GEMM kernel here");
    if (geo)
        v = ck == 0 ? VAR_D32 : VAR_D64;
    if (v == VAR_VEC && tb && k > 0) {
        dg_status st = transpose_b(o, &b, &eb, &ldb, &sb, n, k, batch);
        if (st == DG_OK)
            tb = false;
        else if (st != DG_ERR_UNAVAILABLE)
            return st;
    }
    cl_kernel kr = geo ? o->conv[cv][ck] : o->kernels[v][(ta ? 2 : 0) + (tb ? 1 : 0)];
    cl_int im = m, in = n, ik = k, ia = lda, ib = ldb, ic = ldc, epi = ep ? ep->epi : 0;
    cl_float fa = alpha, fb = beta;
    /* Unused epilogue operands: C stands in (never read). */
    cl_mem mbias = ep && ep->bias ? ep->bias : c, mmask = ep && ep->mask ? ep->mask : c;
    cl_ulong ebias = ep ? ep->ebias : 0, emask = ep ? ep->emask : 0;
    const karg args[] = {KA(im), KA(in),    KA(ik),    KA(fa),    KA(a),     KA(ea), KA(ia), KA(sa),
                         KA(b),  KA(eb),    KA(ib),    KA(sb),    KA(fb),    KA(c),  KA(ec), KA(ic),
                         KA(sc), KA(mbias), KA(ebias), KA(mmask), KA(emask), KA(epi)};
    dg_status st = set_args(o, kr, geo ? "dg_conv" : var_kernels[v], args, NARGS(args));
    if (st == DG_OK && geo) { /* the geometry after the GEMM's arguments */
        cl_int e = clSetKernelArg(kr, (cl_uint)NARGS(args), sizeof *geo, geo);
        if (e != CL_SUCCESS)
            st = ocl_clfail(o, "clSetKernelArg(dg_conv geometry)", e);
    }
    if (st != DG_OK)
        return st;

    size_t global[3], local[3] = {1, 1, 1};
    size_t *lp = local;
    if (var_tile[v]) {
        global[0] = ((size_t)n + var_tile[v] - 1) / var_tile[v] * var_wg[v];
        global[1] = ((size_t)m + var_tile[v] - 1) / var_tile[v] * var_wg[v];
        local[0] = local[1] = var_wg[v];
    } else if (v == VAR_VEC) {
        size_t gx = ((size_t)n + VEC_COLS - 1) / VEC_COLS;
        local[0] = gx < VEC_WG ? gx : VEC_WG;
        global[0] = (gx + local[0] - 1) / local[0] * local[0];
        global[1] = ((size_t)m + VEC_ROWS - 1) / VEC_ROWS;
    } else {
        global[0] = (size_t)n;
        global[1] = (size_t)m;
        lp = NULL;
    }
    global[2] = batch;
    cl_int e = clEnqueueNDRangeKernel(o->queue, kr, 3, NULL, global, lp, 0, NULL, NULL);
    if (e != CL_SUCCESS)
        return ocl_clfail(o, "clEnqueueNDRangeKernel(sgemm)", e);
    o->enqueued++;
    return DG_OK;
}

static dg_status enqueue_gemm(ocl_ctx *o, bool ta, bool tb, int m, int n, int k, float alpha,
                              cl_mem a, cl_ulong ea, int lda, cl_ulong sa, cl_mem b, cl_ulong eb,
                              int ldb, cl_ulong sb, float beta, cl_mem c, cl_ulong ec, int ldc,
                              cl_ulong sc, size_t batch)
{
    return enqueue_gemm_ep(o, ta, tb, m, n, k, alpha, a, ea, lda, sa, b, eb, ldb, sb, beta, c, ec,
                           ldc, sc, batch, NULL);
}

/* ocl_gemm, and with ep (NULL: none) ocl_gemm_ep: the checks, then the
 * product and its epilogue. */
static dg_status gemm_checked(ocl_ctx *o, bool ta, bool tb, int m, int n, int k, float alpha,
                              dg_ref a, int lda, dg_ref b, int ldb, float beta, dg_ref c, int ldc,
                              const dg_epilogue *ep)
{
    if (m < 0 || n < 0 || k < 0)
        return ocl_fail(o, DG_ERR_USAGE, "gemm: negative size m=%d n=%d k=%d", m, n, k);
    if (m == 0 || n == 0)
        return DG_OK;
    cl_ulong ea = 0, eb = 0, ec = 0;
    dg_status st = check_matrix(o, 'C', c.buf, c.off, m, n, ldc, &ec);
    if (st == DG_OK && k > 0)
        st = check_matrix(o, 'A', a.buf, a.off, ta ? k : m, ta ? m : k, lda, &ea);
    if (st == DG_OK && k > 0)
        st = check_matrix(o, 'B', b.buf, b.off, tb ? n : k, tb ? k : n, ldb, &eb);
    ocl_epi oe = {0};
    if (st == DG_OK && ep && ep->bias.buf) {
        oe.epi |= EPI_BIAS_COL;
        oe.bias = ep->bias.buf;
        st = check_ref(o, "gemm_ep", "bias", ep->bias, (uint64_t)n, &oe.ebias);
    }
    if (st == DG_OK && ep && ep->mask.buf) {
        oe.epi |= EPI_MASK;
        oe.mask = ep->mask.buf;
        st = check_matrix(o, 'M', ep->mask.buf, ep->mask.off, m, n, ldc, &oe.emask);
    }
    if (ep && ep->relu)
        oe.epi |= EPI_RELU;
    if (st != DG_OK)
        return st;
    /* With k == 0 the kernels never touch A or B, but the arguments must still
     * be valid memory objects: stand C in for them. */
    cl_mem ma = k > 0 ? (cl_mem)a.buf : (cl_mem)c.buf, mb = k > 0 ? (cl_mem)b.buf : (cl_mem)c.buf;
    return enqueue_gemm_ep(o, ta, tb, m, n, k, alpha, ma, ea, k > 0 ? lda : 1, 0, mb, eb,
                           k > 0 ? ldb : 1, 0, beta, (cl_mem)c.buf, ec, ldc, 0, 1,
                           oe.epi ? &oe : NULL);
}

static dg_status ocl_gemm(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha, dg_ref a,
                          int lda, dg_ref b, int ldb, float beta, dg_ref c, int ldc)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    return gemm_checked(o, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, NULL);
}

static dg_status ocl_gemm_ep(void *ctx, bool ta, bool tb, int m, int n, int k, dg_ref a, int lda,
                             dg_ref b, int ldb, dg_ref c, int ldc, const dg_epilogue *ep)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    if (!ep)
        return ocl_fail(o, DG_ERR_USAGE, "gemm_ep: no epilogue");
    return gemm_checked(o, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc, ep);
}

static unsigned ocl_fusion(void *ctx)
{
    const ocl_ctx *o = ctx;
    return o && !o->old_path ? DG_FUSE_GEMM | DG_FUSE_CONV : 0;
}

static dg_status ocl_queue_counts(void *ctx, uint64_t *enqueued, uint64_t *waits)
{
    return dg_ocl_counts(ctx, enqueued, waits);
}

dg_status dg_ocl_gemm_strided(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha,
                              dg_ref a, int lda, size_t sa, dg_ref b, int ldb, size_t sb,
                              float beta, dg_ref c, int ldc, size_t sc, int batch)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || batch > OCL_BATCH_MAX)
        return ocl_fail(o, DG_ERR_USAGE, "gemm: bad size m=%d n=%d k=%d batch=%d (0..%d)", m, n, k,
                        batch, OCL_BATCH_MAX);
    if (m == 0 || n == 0 || batch == 0)
        return DG_OK;
    if (k == 0)
        return ocl_fail(o, DG_ERR_USAGE, "gemm: the strided hook needs k > 0");
    /* The first and the last product's ranges: every one between lies inside. */
    cl_ulong ea = 0, eb = 0, ec = 0, last = 0;
    size_t lb = (size_t)(batch - 1) * sizeof(float);
    dg_status st = check_matrix(o, 'C', c.buf, c.off, m, n, ldc, &ec);
    if (st == DG_OK)
        st = check_matrix(o, 'A', a.buf, a.off, ta ? k : m, ta ? m : k, lda, &ea);
    if (st == DG_OK)
        st = check_matrix(o, 'B', b.buf, b.off, tb ? n : k, tb ? k : n, ldb, &eb);
    if (st == DG_OK && (sa > SIZE_MAX / lb || sb > SIZE_MAX / lb || sc > SIZE_MAX / lb))
        st = ocl_fail(o, DG_ERR_USAGE, "gemm: batch strides overflow");
    if (st == DG_OK)
        st = check_matrix(o, 'C', c.buf, c.off + sc * lb, m, n, ldc, &last);
    if (st == DG_OK)
        st = check_matrix(o, 'A', a.buf, a.off + sa * lb, ta ? k : m, ta ? m : k, lda, &last);
    if (st == DG_OK)
        st = check_matrix(o, 'B', b.buf, b.off + sb * lb, tb ? n : k, tb ? k : n, ldb, &last);
    if (st != DG_OK)
        return st;
    return enqueue_gemm(o, ta, tb, m, n, k, alpha, (cl_mem)a.buf, ea, lda, sa, (cl_mem)b.buf, eb,
                        ldb, sb, beta, (cl_mem)c.buf, ec, ldc, sc, (size_t)batch);
}

const char *dg_ocl_gemm_variant(void *ctx, bool ta, bool tb, int m, int n, int k, int batch,
                                int *slices)
{
    const ocl_ctx *o = ctx;
    ocl_pick p = {VAR_NAIVE, 1};
    if (o)
        p = pick_gemm(o, ta, tb, m, n, k, batch > 0 ? (size_t)batch : 1, true);
    if (slices)
        *slices = p.slices;
    return o ? var_names[p.var] : "";
}

const char *dg_ocl_gemm_pick(bool cpu, unsigned compute_units, bool ta, bool tb, int m, int n,
                             int k, int batch, int *slices)
{
    unsigned have = class_variants(cpu);
    pick_dev d = {have, have & ((1u << VAR_D32) | (1u << VAR_D64)), compute_units, OCL_SPLIT_AUTO,
                  0};
    ocl_pick p = pick_core(&d, ta, tb, m, n, k, batch > 0 ? (size_t)batch : 1);
    if (slices)
        *slices = p.slices;
    return var_names[p.var];
}

dg_status dg_ocl_handles(void *ctx, cl_context *context, cl_command_queue *queue,
                         cl_device_id *device)
{
    const ocl_ctx *o = ctx;
    if (!o || !context || !queue || !device)
        return DG_ERR_USAGE;
    *context = o->context;
    *queue = o->queue;
    *device = o->devs[o->index].device;
    return DG_OK;
}

static dg_status ocl_synchronize(void *ctx)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    cl_int e = clFinish(o->queue);
    o->waits++;
    return e == CL_SUCCESS ? DG_OK : ocl_clfail(o, "clFinish", e);
}

static bool ocl_supports_op(void *ctx, const dg_op_desc *d)
{
    (void)ctx;
    return d && d->op >= 0 && d->op < DG_OP__COUNT && d->dtype == DG_DTYPE_F32;
}

/* ---- training ops ------------------------------------------------------------ */

static dg_status ocl_fill(void *ctx, dg_ref x, size_t count, float value)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    if (count == 0)
        return DG_OK;
    cl_ulong ex = 0, cnt = count;
    dg_status st = check_ref(o, "fill", "x", x, count, &ex);
    if (st != DG_OK)
        return st;
    cl_mem mx = x.buf;
    cl_float v = value;
    const karg args[] = {KA(mx), KA(ex), KA(cnt), KA(v)};
    return run_op(o, K_FILL, args, NARGS(args), count);
}

/* outer * channels * inner as a checked element count of an int-indexed
 * tensor; DG_ERR_USAGE on a negative or too large shape. */
static dg_status check_oci(ocl_ctx *o, const char *op, int outer, int channels, int inner,
                           uint64_t *total)
{
    if (outer < 0 || channels < 0 || inner < 0)
        return ocl_fail(o, DG_ERR_USAGE, "%s: negative shape outer=%d channels=%d inner=%d", op,
                        outer, channels, inner);
    *total = (uint64_t)outer * (uint64_t)channels * (uint64_t)inner;
    if (*total > OCL_ELEMS_MAX)
        return ocl_fail(o, DG_ERR_USAGE, "%s: %llu elements exceed the kernels' limit", op,
                        (unsigned long long)*total);
    return DG_OK;
}

static dg_status ocl_bias_add(void *ctx, dg_ref y, dg_ref bias, int outer, int channels, int inner)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    uint64_t total = 0;
    dg_status st = check_oci(o, "bias_add", outer, channels, inner, &total);
    if (st != DG_OK || total == 0)
        return st;
    cl_ulong ey = 0, eb = 0;
    const operand refs[] = {{"y", y, total, &ey, false},
                            {"bias", bias, (uint64_t)channels, &eb, false}};
    st = check_refs(o, "bias_add", refs, NARGS(refs));
    if (st != DG_OK)
        return st;
    cl_mem my = y.buf, mb = bias.buf;
    cl_int ch = channels, in = inner, tot = (cl_int)total;
    const karg args[] = {KA(my), KA(ey), KA(mb), KA(eb), KA(ch), KA(in), KA(tot)};
    return run_op(o, K_BIAS_ADD, args, NARGS(args), (size_t)total);
}

static dg_status ensure_scratch(ocl_ctx *o, size_t bytes);

/* db = the bias gradient in two commands: nparts slices per channel summed by
 * many work-groups into the scratch buffer, then the slices added in order
 * (dg_sum_parts). Deterministic as the one-command kernel, in another order. */
static dg_status bias_grad_parts(ocl_ctx *o, cl_mem dy, cl_ulong edy, cl_mem db, cl_ulong edb,
                                 int outer, int channels, int inner, int nparts)
{
    dg_status st = ensure_scratch(o, (size_t)nparts * (size_t)channels * sizeof(float));
    if (st != DG_OK)
        return st;
    cl_mem ms = o->scratch;
    cl_ulong zero = 0;
    cl_int io = outer, ic = channels, ii = inner, np = nparts, acc = 0;
    const karg args[] = {KA(dy), KA(edy), KA(ms), KA(zero), KA(io), KA(ic), KA(ii), KA(np)};
    st = set_args(o, o->ops[K_BIAS_GRAD_PART], op_kernels[K_BIAS_GRAD_PART], args, NARGS(args));
    if (st != DG_OK)
        return st;
    size_t local[2] = {o->ops_local[K_BIAS_GRAD_PART], 1};
    size_t global[2] = {(size_t)nparts * local[0], (size_t)channels};
    cl_int e = clEnqueueNDRangeKernel(o->queue, o->ops[K_BIAS_GRAD_PART], 2, NULL, global, local, 0,
                                      NULL, NULL);
    if (e != CL_SUCCESS)
        return ocl_clfail(o, "clEnqueueNDRangeKernel(dg_bias_grad_part)", e);
    o->enqueued++;
    const karg sum[] = {KA(ms), KA(zero), KA(db), KA(edb), KA(ic), KA(np), KA(acc)};
    return run_op(o, K_SUM_PARTS, sum, NARGS(sum), (size_t)channels);
}

static dg_status ocl_bias_grad(void *ctx, dg_ref dy, dg_ref db, int outer, int channels, int inner)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    uint64_t total = 0;
    dg_status st = check_oci(o, "bias_grad", outer, channels, inner, &total);
    if (st != DG_OK || channels == 0)
        return st;
    cl_ulong edy = 0, edb = 0;
    const operand refs[] = {{"db", db, (uint64_t)channels, &edb, false},
                            {"dy", dy, total, &edy, total == 0}};
    st = check_refs(o, "bias_grad", refs, NARGS(refs));
    if (st != DG_OK)
        return st;
    /* An empty dy is never read: stand db in for it. */
    cl_mem mdy = total > 0 ? (cl_mem)dy.buf : (cl_mem)db.buf, mdb = db.buf;
    cl_int io = outer, ic = channels, ii = inner;
    uint64_t per = (uint64_t)outer * (uint64_t)inner;
    uint64_t parts = (per + OCL_BG_SLICE - 1) / OCL_BG_SLICE;
    if (!o->old_path && parts >= 2)
        return bias_grad_parts(o, mdy, edy, mdb, edb, outer, channels, inner,
                               (int)(parts < OCL_BG_PARTS ? parts : OCL_BG_PARTS));
    const karg args[] = {KA(mdy), KA(edy), KA(mdb), KA(edb), KA(io), KA(ic), KA(ii)};
    return run_op(o, K_BIAS_GRAD, args, NARGS(args), (size_t)channels * o->ops_local[K_BIAS_GRAD]);
}

static dg_status ocl_relu_fwd(void *ctx, dg_ref x, dg_ref y, size_t count)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    if (count == 0)
        return DG_OK;
    cl_ulong ex = 0, ey = 0, cnt = count;
    const operand refs[] = {{"x", x, count, &ex, false}, {"y", y, count, &ey, false}};
    dg_status st = check_refs(o, "relu_fwd", refs, NARGS(refs));
    if (st != DG_OK)
        return st;
    cl_mem mx = x.buf, my = y.buf;
    const karg args[] = {KA(mx), KA(ex), KA(my), KA(ey), KA(cnt)};
    return run_op(o, K_RELU_FWD, args, NARGS(args), count);
}

static dg_status ocl_relu_bwd(void *ctx, dg_ref y, dg_ref dy, dg_ref dx, size_t count)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    if (count == 0)
        return DG_OK;
    cl_ulong ey = 0, edy = 0, edx = 0, cnt = count;
    const operand refs[] = {{"y", y, count, &ey, false},
                            {"dy", dy, count, &edy, false},
                            {"dx", dx, count, &edx, false}};
    dg_status st = check_refs(o, "relu_bwd", refs, NARGS(refs));
    if (st != DG_OK)
        return st;
    cl_mem my = y.buf, mdy = dy.buf, mdx = dx.buf;
    const karg args[] = {KA(my), KA(ey), KA(mdy), KA(edy), KA(mdx), KA(edx), KA(cnt)};
    return run_op(o, K_RELU_BWD, args, NARGS(args), count);
}

/* Validates a pooling shape (floor mode, window inside the input); *nin and
 * *nout get the input and output element counts. */
static dg_status check_pool(ocl_ctx *o, const char *op, const dg_pool_shape *s, uint64_t *nin,
                            uint64_t *nout)
{
    if (!s)
        return ocl_fail(o, DG_ERR_USAGE, "%s: no shape", op);
    if (s->n < 0 || s->c < 0 || s->h < 1 || s->w < 1 || s->k < 1 || s->stride < 1 || s->k > s->h ||
        s->k > s->w)
        return ocl_fail(o, DG_ERR_USAGE, "%s: bad shape n=%d c=%d %dx%d k=%d stride=%d", op, s->n,
                        s->c, s->h, s->w, s->k, s->stride);
    int ho = (s->h - s->k) / s->stride + 1, wo = (s->w - s->k) / s->stride + 1;
    if (s->ho != ho || s->wo != wo)
        return ocl_fail(o, DG_ERR_USAGE, "%s: output %dx%d, the shape gives %dx%d", op, s->ho,
                        s->wo, ho, wo);
    uint64_t planes = (uint64_t)s->n * (uint64_t)s->c;
    *nin = planes * (uint64_t)s->h * (uint64_t)s->w;
    *nout = planes * (uint64_t)ho * (uint64_t)wo;
    if (*nin > OCL_ELEMS_MAX)
        return ocl_fail(o, DG_ERR_USAGE, "%s: %llu elements exceed the kernels' limit", op,
                        (unsigned long long)*nin);
    return DG_OK;
}

static dg_status ocl_maxpool_fwd(void *ctx, const dg_pool_shape *s, dg_ref x, dg_ref y,
                                 dg_ref argmax)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    uint64_t nin = 0, nout = 0;
    dg_status st = check_pool(o, "maxpool_fwd", s, &nin, &nout);
    if (st != DG_OK || nout == 0)
        return st;
    cl_ulong ex = 0, ey = 0, ea = 0;
    const operand refs[] = {{"x", x, nin, &ex, false},
                            {"y", y, nout, &ey, false},
                            {"argmax", argmax, nout, &ea, false}};
    st = check_refs(o, "maxpool_fwd", refs, NARGS(refs));
    if (st != DG_OK)
        return st;
    cl_mem mx = x.buf, my = y.buf, ma = argmax.buf;
    cl_int h = s->h, w = s->w, k = s->k, sd = s->stride, ho = s->ho, wo = s->wo, tot = (cl_int)nout;
    const karg args[] = {KA(mx), KA(ex), KA(my), KA(ey), KA(ma), KA(ea), KA(h),
                         KA(w),  KA(k),  KA(sd), KA(ho), KA(wo), KA(tot)};
    return run_op(o, K_POOL_FWD, args, NARGS(args), (size_t)nout);
}

static dg_status ocl_maxpool_bwd(void *ctx, const dg_pool_shape *s, dg_ref dy, dg_ref argmax,
                                 dg_ref dx)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    uint64_t nin = 0, nout = 0;
    dg_status st = check_pool(o, "maxpool_bwd", s, &nin, &nout);
    if (st != DG_OK || nin == 0)
        return st;
    cl_ulong edy = 0, ea = 0, edx = 0;
    const operand refs[] = {{"dy", dy, nout, &edy, false},
                            {"argmax", argmax, nout, &ea, false},
                            {"dx", dx, nin, &edx, false}};
    st = check_refs(o, "maxpool_bwd", refs, NARGS(refs));
    if (st != DG_OK)
        return st;
    cl_mem mdy = dy.buf, ma = argmax.buf, mdx = dx.buf;
    cl_int h = s->h, w = s->w, k = s->k, sd = s->stride, ho = s->ho, wo = s->wo, tot = (cl_int)nin;
    const karg args[] = {KA(mdy), KA(edy), KA(ma), KA(ea), KA(mdx), KA(edx), KA(h),
                         KA(w),   KA(k),   KA(sd), KA(ho), KA(wo),  KA(tot)};
    return run_op(o, K_POOL_BWD, args, NARGS(args), (size_t)nin);
}

/* Element counts of a validated convolution and its chunking: images run
 * chunk at a time through a column buffer [ckk, chunk*hw] followed by the
 * chunk's per-image weight gradients [chunk, k, ckk] (backward only). */
typedef struct conv_dims {
    uint64_t nx, nw, ny; /* x, w, y */
    uint64_t ckk, hw;    /* column rows c*kh*kw, output plane ho*wo */
    uint64_t chunk;      /* images per chunk (0 when n == 0) */
    uint64_t col, part;  /* workspace elements: column buffer, weight-gradient parts */
} conv_dims;

/* Validates a convolution shape and computes its dims (the chunk depends on
 * the device's allocation limit); with o NULL no message is stored. */
static dg_status conv_dims_of(ocl_ctx *o, const char *op, const dg_conv_shape *s, conv_dims *d)
{
    memset(d, 0, sizeof *d);
    if (!s)
        return o ? ocl_fail(o, DG_ERR_USAGE, "%s: no shape", op) : DG_ERR_USAGE;
    if (s->n < 0 || s->c < 1 || s->h < 1 || s->w < 1 || s->k < 1 || s->kh < 1 || s->kw < 1 ||
        s->stride < 1 || s->pad < 0 || s->pad > INT32_MAX / 4 || s->h + 2 * s->pad < s->kh ||
        s->w + 2 * s->pad < s->kw)
        return o ? ocl_fail(o, DG_ERR_USAGE,
                            "%s: bad shape n=%d c=%d %dx%d k=%d %dx%d stride=%d pad=%d", op, s->n,
                            s->c, s->h, s->w, s->k, s->kh, s->kw, s->stride, s->pad)
                 : DG_ERR_USAGE;
    int ho = (s->h + 2 * s->pad - s->kh) / s->stride + 1;
    int wo = (s->w + 2 * s->pad - s->kw) / s->stride + 1;
    if (s->ho != ho || s->wo != wo)
        return o ? ocl_fail(o, DG_ERR_USAGE, "%s: output %dx%d, the shape gives %dx%d", op, s->ho,
                            s->wo, ho, wo)
                 : DG_ERR_USAGE;
    d->ckk = (uint64_t)s->c * (uint64_t)s->kh * (uint64_t)s->kw;
    d->hw = (uint64_t)ho * (uint64_t)wo;
    d->nx = (uint64_t)s->n * (uint64_t)s->c * (uint64_t)s->h * (uint64_t)s->w;
    d->nw = (uint64_t)s->k * d->ckk;
    d->ny = (uint64_t)s->n * (uint64_t)s->k * d->hw;
    if (d->nx > OCL_ELEMS_MAX || d->nw > OCL_ELEMS_MAX || d->ny > OCL_ELEMS_MAX ||
        d->ckk * d->hw > OCL_ELEMS_MAX)
        return o ? ocl_fail(o, DG_ERR_USAGE, "%s: tensors exceed the kernels' element limit", op)
                 : DG_ERR_USAGE;
    if (s->n == 0)
        return DG_OK;
    /* As many images per chunk as fit the cap (at least one), then spread
     * evenly over the chunks that takes. */
    uint64_t cap = o ? o->conv_cap : OCL_CONV_WORK_CAP;
    if (o && o->max_alloc && o->max_alloc < cap)
        cap = o->max_alloc;
    uint64_t per = (d->ckk * d->hw + d->nw) * sizeof(float);
    uint64_t chunk = cap / per;
    if (chunk > OCL_ELEMS_MAX / (d->ckk * d->hw))
        chunk = OCL_ELEMS_MAX / (d->ckk * d->hw);
    if (chunk > OCL_ELEMS_MAX / d->nw)
        chunk = OCL_ELEMS_MAX / d->nw;
    if (chunk > OCL_BATCH_MAX)
        chunk = OCL_BATCH_MAX;
    if (chunk < 1)
        chunk = 1;
    if (chunk > (uint64_t)s->n)
        chunk = (uint64_t)s->n;
    uint64_t nchunks = ((uint64_t)s->n + chunk - 1) / chunk;
    d->chunk = ((uint64_t)s->n + nchunks - 1) / nchunks;
    d->col = d->chunk * d->ckk * d->hw;
    d->part = d->chunk * d->nw;
    return DG_OK;
}

static size_t ocl_conv2d_workspace(void *ctx, const dg_conv_shape *s)
{
    ocl_ctx *o = ctx;
    if (!o)
        return 0;
    /* A bad shape gives 0 here and its message from conv2d_fwd/bwd. */
    conv_dims d;
    char keep[OCL_ERR_MAX];
    memcpy(keep, o->err, sizeof keep);
    dg_status st = conv_dims_of(o, "conv2d_workspace", s, &d);
    memcpy(o->err, keep, sizeof keep);
    if (st != DG_OK)
        return 0;
    return (size_t)((d.col + d.part) * sizeof(float));
}

/* col[ckk, nimg*hw] = im2col of nimg images of x starting at element ex. */
static dg_status run_im2col(ocl_ctx *o, const dg_conv_shape *s, const conv_dims *d, cl_mem x,
                            cl_ulong ex, cl_mem col, cl_ulong ecol, int nimg)
{
    cl_int c = s->c, h = s->h, w = s->w, kh = s->kh, kw = s->kw, sd = s->stride, pad = s->pad;
    cl_int ho = s->ho, wo = s->wo, ni = nimg;
    const karg args[] = {KA(x),  KA(ex), KA(col), KA(ecol), KA(c),  KA(h),  KA(w),
                         KA(kh), KA(kw), KA(sd),  KA(pad),  KA(ho), KA(wo), KA(ni)};
    return run_op(o, K_IM2COL, args, NARGS(args), (size_t)nimg * (size_t)d->hw * (size_t)d->ckk);
}

/* conv2d_fwd, then ReLU when relu: on the new path the bias and the ReLU
 * run in the product's epilogue, on the old path as commands of their own. */
static dg_status conv_fwd(ocl_ctx *o, const dg_conv_shape *s, dg_ref x, dg_ref w, dg_ref bias,
                          dg_ref y, dg_ref work, bool relu)
{
    conv_dims d;
    dg_status st = conv_dims_of(o, "conv2d_fwd", s, &d);
    if (st != DG_OK || s->n == 0)
        return st;
    cl_ulong ex = 0, ew = 0, eb = 0, ey = 0, ek = 0;
    const operand refs[] = {{"x", x, d.nx, &ex, false},
                            {"w", w, d.nw, &ew, false},
                            {"bias", bias, (uint64_t)s->k, &eb, !bias.buf},
                            {"y", y, d.ny, &ey, false},
                            {"work", work, d.col, &ek, false}};
    st = check_refs(o, "conv2d_fwd", refs, NARGS(refs));
    if (st != DG_OK)
        return st;
    cl_mem mx = x.buf, mw = w.buf, my = y.buf, mk = work.buf;
    int ckk = (int)d.ckk, hw = (int)d.hw;
    ocl_epi oe = {0};
    if (!o->old_path) {
        oe.epi = (bias.buf ? EPI_BIAS_ROW : 0) | (relu ? EPI_RELU : 0);
        oe.bias = bias.buf;
        oe.ebias = eb;
    }
    if (conv_kernel_for(o, CONV_FWD, s->k, hw, (size_t)s->n) >= 0) {
        /* The implicit GEMM: one command for up to OCL_BATCH_MAX images, no
         * column buffer. */
        cl_int8 geo = {{s->c, s->h, s->w, s->kh, s->kw, s->stride, s->pad, s->wo}};
        cl_ulong xs = (cl_ulong)s->c * s->h * s->w, ys = (cl_ulong)s->k * hw;
        for (int i0 = 0; i0 < s->n && st == DG_OK; i0 += OCL_BATCH_MAX) {
            int nimg = s->n - i0 < OCL_BATCH_MAX ? s->n - i0 : OCL_BATCH_MAX;
            st = enqueue_product(o, false, false, s->k, hw, ckk, 1.0f, mw, ew, ckk, 0, mx,
                                 ex + (cl_ulong)i0 * xs, hw, xs, 0.0f, my, ey + (cl_ulong)i0 * ys,
                                 hw, ys, (size_t)nimg, oe.epi ? &oe : NULL, &geo, CONV_FWD);
        }
        return st;
    }
    for (int i0 = 0; i0 < s->n && st == DG_OK; i0 += (int)d.chunk) {
        int nimg = s->n - i0 < (int)d.chunk ? s->n - i0 : (int)d.chunk;
        st = run_im2col(o, s, &d, mx, ex + (cl_ulong)i0 * s->c * s->h * s->w, mk, ek, nimg);
        /* y_img[k, hw] = w[k, ckk] * col[:, img*hw .. +hw] for each image. */
        if (st == DG_OK)
            st = enqueue_gemm_ep(o, false, false, s->k, hw, ckk, 1.0f, mw, ew, ckk, 0, mk, ek,
                                 nimg * hw, (cl_ulong)hw, 0.0f, my, ey + (cl_ulong)i0 * s->k * hw,
                                 hw, (cl_ulong)s->k * hw, (size_t)nimg, oe.epi ? &oe : NULL);
    }
    if (st == DG_OK && bias.buf && o->old_path)
        st = ocl_bias_add(o, y, bias, s->n, s->k, hw);
    if (st == DG_OK && relu && o->old_path)
        st = ocl_relu_fwd(o, y, y, (size_t)d.ny);
    return st;
}

static dg_status ocl_conv2d_fwd(void *ctx, const dg_conv_shape *s, dg_ref x, dg_ref w, dg_ref bias,
                                dg_ref y, dg_ref work)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    return conv_fwd(o, s, x, w, bias, y, work, false);
}

static dg_status ocl_conv2d_fwd_ep(void *ctx, const dg_conv_shape *s, dg_ref x, dg_ref w, dg_ref y,
                                   dg_ref work, const dg_epilogue *ep)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    if (!ep || ep->mask.buf)
        return ocl_fail(o, DG_ERR_USAGE, "conv2d_fwd_ep: %s",
                        ep ? "a convolution's epilogue takes no mask" : "no epilogue");
    return conv_fwd(o, s, x, w, ep->bias, y, work, ep->relu);
}

/* The backward pass as implicit GEMMs (the new path on the GPU kernels), no
 * column buffer: per chunk of images, the per-image weight gradients
 * (dg_convdw: dy_img times the gathered col_img^T) into the parts, then
 * added in image order (as the im2col path does, so dw is the same); and, with
 * mdx, dx_img = the gathered w^T times the gathered dy_img (dg_convdx: the
 * col2im sum inside the product). */
static dg_status conv_bwd_implicit(ocl_ctx *o, const dg_conv_shape *s, const conv_dims *d,
                                   cl_mem mx, cl_ulong ex, cl_mem mw, cl_ulong ew, cl_mem mdy,
                                   cl_ulong edy, cl_mem mdx, cl_ulong edx, cl_mem mdw, cl_ulong edw,
                                   cl_mem mk, cl_ulong epart)
{
    int ckk = (int)d->ckk, hw = (int)d->hw, k = s->k, hwi = s->h * s->w;
    cl_ulong xs = (cl_ulong)s->c * hwi, ys = (cl_ulong)k * hw;
    cl_int8 geo = {{s->c, s->h, s->w, s->kh, s->kw, s->stride, s->pad, s->wo}};
    /* No column buffer: the whole workspace holds parts, so as many images a
     * chunk as their parts fit (each chunk is a set of commands). */
    uint64_t chunk = (d->col + d->part) / d->nw;
    chunk = chunk > OCL_BATCH_MAX ? OCL_BATCH_MAX : chunk > (uint64_t)s->n ? (uint64_t)s->n : chunk;
    epart -= d->col;
    dg_status st = DG_OK;
    for (int i0 = 0; i0 < s->n && st == DG_OK; i0 += (int)chunk) {
        int nimg = s->n - i0 < (int)chunk ? s->n - i0 : (int)chunk;
        cl_ulong ex0 = ex + (cl_ulong)i0 * xs, edy0 = edy + (cl_ulong)i0 * ys;
        if (nimg == 1) /* straight into dw */
            st =
                enqueue_product(o, false, true, k, ckk, hw, 1.0f, mdy, edy0, hw, ys, mx, ex0, hw,
                                xs, i0 > 0 ? 1.0f : 0.0f, mdw, edw, ckk, 0, 1, NULL, &geo, CONV_DW);
        if (nimg > 1) {
            st =
                enqueue_product(o, false, true, k, ckk, hw, 1.0f, mdy, edy0, hw, ys, mx, ex0, hw,
                                xs, 0.0f, mk, epart, ckk, d->nw, (size_t)nimg, NULL, &geo, CONV_DW);
            cl_int cnt = (cl_int)d->nw, np = nimg, accum = i0 > 0;
            const karg args[] = {KA(mk), KA(epart), KA(mdw), KA(edw), KA(cnt), KA(np), KA(accum)};
            if (st == DG_OK)
                st = run_op(o, K_SUM_PARTS, args, NARGS(args), (size_t)d->nw);
        }
        if (st == DG_OK && mdx)
            st = enqueue_product(o, false, false, s->c, hwi, k * s->kh * s->kw, 1.0f, mw, ew, ckk,
                                 0, mdy, edy0, hw, ys, 0.0f, mdx, edx + (cl_ulong)i0 * xs, hwi, xs,
                                 (size_t)nimg, NULL, &geo, CONV_DX);
    }
    return st;
}

static dg_status ocl_conv2d_bwd(void *ctx, const dg_conv_shape *s, dg_ref x, dg_ref w, dg_ref dy,
                                dg_ref dx, dg_ref dw, dg_ref db, dg_ref work)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    conv_dims d;
    dg_status st = conv_dims_of(o, "conv2d_bwd", s, &d);
    if (st != DG_OK)
        return st;
    cl_ulong ex = 0, ew = 0, edy = 0, edx = 0, edw = 0, edb = 0, ek = 0;
    const operand refs[] = {{"dw", dw, d.nw, &edw, false},
                            {"db", db, (uint64_t)s->k, &edb, !db.buf}};
    st = check_refs(o, "conv2d_bwd", refs, NARGS(refs));
    if (st == DG_OK && s->n == 0) { /* sums over an empty batch */
        st = ocl_fill(o, dw, (size_t)d.nw, 0.0f);
        if (st == DG_OK && db.buf)
            st = ocl_fill(o, db, (size_t)s->k, 0.0f);
        return st;
    }
    const operand ins[] = {{"x", x, d.nx, &ex, false},
                           {"w", w, d.nw, &ew, false},
                           {"dy", dy, d.ny, &edy, false},
                           {"dx", dx, d.nx, &edx, !dx.buf},
                           {"work", work, d.col + d.part, &ek, false}};
    if (st == DG_OK)
        st = check_refs(o, "conv2d_bwd", ins, NARGS(ins));
    if (st != DG_OK)
        return st;
    cl_mem mx = x.buf, mw = w.buf, mdy = dy.buf, mdx = dx.buf, mdw = dw.buf, mk = work.buf;
    int ckk = (int)d.ckk, hw = (int)d.hw, k = s->k;
    cl_ulong epart = ek + d.col, xs = (cl_ulong)s->c * s->h * s->w, ys = (cl_ulong)k * hw;
    if (o->implicit_bwd && conv_kernel_for(o, CONV_DW, k, ckk, (size_t)s->n) >= 0 &&
        (!dx.buf || conv_kernel_for(o, CONV_DX, s->c, s->h * s->w, (size_t)s->n) >= 0)) {
        st = conv_bwd_implicit(o, s, &d, mx, ex, mw, ew, mdy, edy, mdx, edx, mdw, edw, mk, epart);
        if (st == DG_OK && db.buf)
            st = ocl_bias_grad(o, dy, db, s->n, k, hw);
        return st;
    }
    for (int i0 = 0; i0 < s->n && st == DG_OK; i0 += (int)d.chunk) {
        int nimg = s->n - i0 < (int)d.chunk ? s->n - i0 : (int)d.chunk;
        st = run_im2col(o, s, &d, mx, ex + (cl_ulong)i0 * xs, mk, ek, nimg);
        /* dw += sum over images of dy_img[k, hw] * col_img^T: one product per
         * image into the parts (straight into dw for a single image), then
         * the parts added in image order. */
        if (st == DG_OK && nimg == 1)
            st = enqueue_gemm(o, false, true, k, ckk, hw, 1.0f, mdy, edy + (cl_ulong)i0 * ys, hw, 0,
                              mk, ek, hw, 0, i0 > 0 ? 1.0f : 0.0f, mdw, edw, ckk, 0, 1);
        if (st == DG_OK && nimg > 1) {
            st = enqueue_gemm(o, false, true, k, ckk, hw, 1.0f, mdy, edy + (cl_ulong)i0 * ys, hw,
                              ys, mk, ek, nimg * hw, (cl_ulong)hw, 0.0f, mk, epart, ckk, d.nw,
                              (size_t)nimg);
            cl_int cnt = (cl_int)d.nw, np = nimg, accum = i0 > 0;
            const karg args[] = {KA(mk), KA(epart), KA(mdw), KA(edw), KA(cnt), KA(np), KA(accum)};
            if (st == DG_OK)
                st = run_op(o, K_SUM_PARTS, args, NARGS(args), (size_t)d.nw);
        }
        if (!dx.buf)
            continue;
        /* col_img[ckk, hw] = w^T[ckk, k] * dy_img[k, hw], then the gather col2im. */
        if (st == DG_OK)
            st = enqueue_gemm(o, true, false, ckk, hw, k, 1.0f, mw, ew, ckk, 0, mdy,
                              edy + (cl_ulong)i0 * ys, hw, ys, 0.0f, mk, ek, nimg * hw,
                              (cl_ulong)hw, (size_t)nimg);
        if (st == DG_OK) {
            cl_int c = s->c, h = s->h, wd = s->w, kh = s->kh, kw = s->kw, sd = s->stride;
            cl_int pad = s->pad, ho = s->ho, wo = s->wo, ni = nimg;
            cl_ulong edx0 = edx + (cl_ulong)i0 * xs;
            const karg args[] = {KA(mk), KA(ek), KA(mdx), KA(edx0), KA(c),  KA(h),  KA(wd),
                                 KA(kh), KA(kw), KA(sd),  KA(pad),  KA(ho), KA(wo), KA(ni)};
            st = run_op(o, K_COL2IM, args, NARGS(args), (size_t)nimg * xs);
        }
    }
    if (st == DG_OK && db.buf)
        st = ocl_bias_grad(o, dy, db, s->n, k, hw);
    return st;
}

/* Makes the scratch buffer hold at least bytes (grown geometrically). A
 * released buffer lives on until the commands that use it have finished. */
static dg_status ensure_scratch(ocl_ctx *o, size_t bytes)
{
    if (o->scratch_bytes >= bytes)
        return DG_OK;
    size_t want = bytes;
    if (want < 2 * o->scratch_bytes)
        want = 2 * o->scratch_bytes;
    if (want < 4096)
        want = 4096;
    cl_int e = CL_SUCCESS;
    cl_mem m = clCreateBuffer(o->context, CL_MEM_READ_WRITE, want, NULL, &e);
    if (!m)
        return ocl_clfail(o, "clCreateBuffer(xent scratch)", e);
    if (o->scratch)
        clReleaseMemObject(o->scratch);
    o->scratch = m;
    o->scratch_bytes = want;
    return DG_OK;
}

static dg_status ocl_xent(void *ctx, int n, int classes, dg_ref logits, dg_ref labels,
                          dg_ref dlogits, dg_ref acc)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    if (n < 0 || classes < 1)
        return ocl_fail(o, DG_ERR_USAGE, "xent: bad shape n=%d classes=%d", n, classes);
    if (n == 0)
        return DG_OK;
    uint64_t nl = (uint64_t)n * (uint64_t)classes;
    if (nl > OCL_ELEMS_MAX)
        return ocl_fail(o, DG_ERR_USAGE, "xent: %llu logits exceed the kernels' limit",
                        (unsigned long long)nl);
    cl_ulong el = 0, elab = 0, ed = 0, ea = 0;
    const operand refs[] = {{"logits", logits, nl, &el, false},
                            {"labels", labels, (uint64_t)n, &elab, false},
                            {"dlogits", dlogits, nl, &ed, false},
                            {"acc", acc, 2, &ea, false}};
    dg_status st = check_refs(o, "xent", refs, NARGS(refs));
    if (st == DG_OK && !o->old_path) { /* one command */
        cl_mem ml = logits.buf, mlab = labels.buf, md = dlogits.buf, ma = acc.buf;
        cl_int in = n, ic = classes;
        const karg one[] = {KA(ml), KA(el), KA(mlab), KA(elab), KA(md),
                            KA(ed), KA(in), KA(ic),   KA(ma),   KA(ea)};
        return run_op(o, K_XENT_ONE, one, NARGS(one), o->ops_local[K_XENT_ONE]);
    }
    if (st == DG_OK)
        st = ensure_scratch(o, 2 * (size_t)n * sizeof(float));
    if (st != DG_OK)
        return st;
    cl_mem ml = logits.buf, mlab = labels.buf, md = dlogits.buf, ma = acc.buf, ms = o->scratch;
    cl_int in = n, ic = classes;
    const karg rows[] = {KA(ml), KA(el), KA(mlab), KA(elab), KA(md),
                         KA(ed), KA(ms), KA(in),   KA(ic)};
    st = run_op(o, K_XENT_ROWS, rows, NARGS(rows), (size_t)n);
    const karg red[] = {KA(ms), KA(in), KA(ma), KA(ea)};
    if (st == DG_OK)
        st = run_op(o, K_XENT_REDUCE, red, NARGS(red), o->ops_local[K_XENT_REDUCE]);
    return st;
}

static dg_status ocl_sgd(void *ctx, dg_ref w, dg_ref g, dg_ref mom, size_t count, float lr,
                         float momentum, float weight_decay)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    if (count == 0)
        return DG_OK;
    cl_ulong ew = 0, eg = 0, em = 0, cnt = count;
    const operand refs[] = {{"w", w, count, &ew, false},
                            {"g", g, count, &eg, false},
                            {"mom", mom, count, &em, momentum == 0.0f}};
    dg_status st = check_refs(o, "sgd", refs, NARGS(refs));
    if (st != DG_OK)
        return st;
    /* Without momentum mom is never touched (and may be absent): stand w in. */
    cl_mem mw = w.buf, mg = g.buf, mm = momentum != 0.0f ? (cl_mem)mom.buf : (cl_mem)w.buf;
    cl_float flr = lr, fm = momentum, fwd = weight_decay;
    const karg args[] = {KA(mw), KA(ew),  KA(mg),  KA(eg), KA(mm),
                         KA(em), KA(cnt), KA(flr), KA(fm), KA(fwd)};
    return run_op(o, K_SGD, args, NARGS(args), count);
}

/* ---- events ------------------------------------------------------------------ */

static dg_status ocl_event_record(void *ctx, int slot)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    if (slot < 0 || slot >= DG_EVENT_SLOTS)
        return ocl_fail(o, DG_ERR_USAGE, "event_record: slot %d outside 0..%d", slot,
                        DG_EVENT_SLOTS - 1);
    cl_event ev = NULL;
    cl_int e;
    if (o->kernel_marks) {
        size_t one = 1;
        e = clEnqueueNDRangeKernel(o->queue, o->ops[K_MARK], 1, NULL, &one, &one, 0, NULL, &ev);
    } else {
        e = clEnqueueMarkerWithWaitList(o->queue, 0, NULL, &ev);
    }
    if (e != CL_SUCCESS)
        return ocl_clfail(
            o, o->kernel_marks ? "clEnqueueNDRangeKernel(dg_mark)" : "clEnqueueMarkerWithWaitList",
            e);
    if (o->events[slot])
        clReleaseEvent(o->events[slot]);
    o->events[slot] = ev;
    o->enqueued++;
    return DG_OK;
}

static dg_status ocl_event_elapsed(void *ctx, int from, int to, double *ms)
{
    ocl_ctx *o = ctx;
    if (!o)
        return DG_ERR_USAGE;
    if (!ms)
        return ocl_fail(o, DG_ERR_USAGE, "event_elapsed: no output");
    if (from < 0 || from >= DG_EVENT_SLOTS || to < 0 || to >= DG_EVENT_SLOTS)
        return ocl_fail(o, DG_ERR_USAGE, "event_elapsed: slots %d, %d outside 0..%d", from, to,
                        DG_EVENT_SLOTS - 1);
    if (!o->events[from] || !o->events[to])
        return ocl_fail(o, DG_ERR_USAGE, "event_elapsed: slot %d not recorded",
                        o->events[from] ? to : from);
    cl_event evs[2] = {o->events[from], o->events[to]};
    cl_int e = clWaitForEvents(from == to ? 1 : 2, evs);
    o->waits++;
    if (e != CL_SUCCESS)
        return ocl_clfail(o, "clWaitForEvents", e);
    cl_ulong t0 = 0, t1 = 0;
    e = clGetEventProfilingInfo(evs[0], CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL);
    if (e == CL_SUCCESS)
        e = clGetEventProfilingInfo(evs[1], CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    if (e != CL_SUCCESS)
        return ocl_clfail(o, "clGetEventProfilingInfo(CL_PROFILING_COMMAND_END)", e);
    *ms = (double)(int64_t)(t1 - t0) / 1e6;
    return DG_OK;
}

static const dg_backend_iface ocl_iface = {
    .version = DG_BACKEND_IFACE_VERSION,
    .name = "opencl",
    /* Profiling-marker events; no graphs in OpenCL 1.2; device_info is plain
     * queries (safe beside a running queue). An NVIDIA OpenCL device is told
     * by its vendor string at run time. */
    .caps = {.event_timing = true, .device_info_any_thread = true},
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
    .synchronize = ocl_synchronize,
    .supports_op = ocl_supports_op,
    .gemm = ocl_gemm,
    .fill = ocl_fill,
    .bias_add = ocl_bias_add,
    .bias_grad = ocl_bias_grad,
    .relu_fwd = ocl_relu_fwd,
    .relu_bwd = ocl_relu_bwd,
    .maxpool_fwd = ocl_maxpool_fwd,
    .maxpool_bwd = ocl_maxpool_bwd,
    .conv2d_workspace = ocl_conv2d_workspace,
    .conv2d_fwd = ocl_conv2d_fwd,
    .conv2d_bwd = ocl_conv2d_bwd,
    .xent = ocl_xent,
    .sgd = ocl_sgd,
    .event_record = ocl_event_record,
    .event_elapsed = ocl_event_elapsed,
    .host_alloc = ocl_host_alloc,
    .host_free = ocl_host_free,
    .host_wait = ocl_host_wait,
    .fusion = ocl_fusion,
    .gemm_ep = ocl_gemm_ep,
    .conv2d_fwd_ep = ocl_conv2d_fwd_ep,
    .queue_counts = ocl_queue_counts,
    .probe = ocl_probe,
    /* capture_begin, capture_end, replay: none (OpenCL 1.2 has no graphs). */
};

const dg_backend_iface *dg_backend_opencl_iface(void)
{
    return &ocl_iface;
}
