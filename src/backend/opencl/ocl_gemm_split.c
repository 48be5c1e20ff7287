/* Split-K for the OpenCL backend's GEMM: the choice, the kernels, the
 * workspace and the two commands (ocl_gemm_split.h). */
#include "ocl_gemm_split.h"
#include "ocl_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The automatic choice (dg_ocl_split_slices), from the H200's measurements
 * (NVIDIA OpenCL, GFLOP/s, docs/evidence/h200-splitk-20261202.log). A split
 * is taken where k is at least OCL_SPLIT_MIN_K and the tiles leave compute
 * units idle: a single product's fewer than the compute units, a batch's
 * fewer than OCL_SPLIT_FILL a compute unit (each of its tiles is a small
 * product, lenet256.conv1.dw's 6 x 25 in a 32-wide tile: 1429 unsplit, 2104
 * in 2 slices; cifar256.conv1.dw 6484 / 8263; cifar256.conv2.dw's 2304
 * work-groups lost, 18140 / 17482). A single product between one and two
 * work-groups a compute unit (sq1024's 256 64-wide tiles) was not measured
 * split, so is not. Then enough slices for OCL_SPLIT_FILL work-groups a
 * compute unit, each at least OCL_SPLIT_MIN_DEPTH of k (8 of the kernels'
 * 16-deep steps). Every product of k 256 lost by a split (mlp256.fc1.dw
 * 11043 unsplit, 9954 in 2 slices, 9002 in 4); from k 512 on, each gained. */
#define OCL_SPLIT_FILL 2
#define OCL_SPLIT_MIN_DEPTH 128
#define OCL_SPLIT_MIN_K 512
#define OCL_SPLIT_TK 16 /* the db kernels' k step: slices start on one */

static const char *const part_names[2][4] = {
    {"dg_split_db32_nn", "dg_split_db32_nt", "dg_split_db32_tn", "dg_split_db32_tt"},
    {"dg_split_db64_nn", "dg_split_db64_nt", "dg_split_db64_tn", "dg_split_db64_tt"}};
static const size_t part_wg[2] = {8, 16}; /* work-group edge of the 32- and 64-wide tiles */
#define SUM_LOCAL 64

int dg_ocl_split_depth(int k, int slices)
{
    if (slices < 2 || k < 1)
        return k;
    int ks = (k + slices - 1) / slices;
    return (ks + OCL_SPLIT_TK - 1) / OCL_SPLIT_TK * OCL_SPLIT_TK;
}

int dg_ocl_split_slices(int force, unsigned cus, int tile, int m, int n, int k, size_t batch,
                        uint64_t cap)
{
    if (force == 0 || (tile != 32 && tile != 64) || batch < 1 || m < 1 || n < 1 || k < 2)
        return 1;
    uint64_t want = force > 0 ? (uint64_t)force : 0;
    if (force < 0) {
        uint64_t t = (uint64_t)tile;
        uint64_t tiles = ((uint64_t)m + t - 1) / t * (((uint64_t)n + t - 1) / t) * batch;
        uint64_t idle = batch > 1 ? OCL_SPLIT_FILL * (uint64_t)cus : cus;
        if (tiles >= idle || k < OCL_SPLIT_MIN_K)
            return 1;
        want = (OCL_SPLIT_FILL * (uint64_t)cus + tiles - 1) / tiles;
        if (want > (uint64_t)k / OCL_SPLIT_MIN_DEPTH)
            want = (uint64_t)k / OCL_SPLIT_MIN_DEPTH;
    }
    if (want > OCL_SPLIT_MAX)
        want = OCL_SPLIT_MAX;
    if (want * batch > OCL_SPLIT_GRID)
        want = OCL_SPLIT_GRID / batch;
    uint64_t per = (uint64_t)m * (uint64_t)n * batch * sizeof(float);
    if (cap && want * per > cap)
        want = cap / per;
    if (want < 2)
        return 1;
    int ks = dg_ocl_split_depth(k, (int)want);
    int slices = (k + ks - 1) / ks; /* <= want: the depth was rounded up */
    return slices < 2 ? 1 : slices;
}

dg_status dg_ocl_split_env(int *force, char *reason, size_t len)
{
    const char *v = getenv("DEVGATE_OPENCL_SPLITK");
    *force = OCL_SPLIT_AUTO;
    if (!v || !*v)
        return DG_OK;
    if (strcmp(v, "off") == 0) {
        *force = 0;
        return DG_OK;
    }
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!errno && *end == '\0' && v[0] >= '0' && v[0] <= '9' && x >= 1 && x <= OCL_SPLIT_MAX) {
        *force = (int)x;
        return DG_OK;
    }
    if (reason && len)
        snprintf(reason, len, "DEVGATE_OPENCL_SPLITK=%.64s: not off or a slice count 1..%d", v,
                 OCL_SPLIT_MAX);
    return DG_ERR_USAGE;
}

/* Writes "split-K: WHAT failed: NAME (code)" into msg; returns st. */
static dg_status fail(char *msg, size_t len, const char *what, cl_int e, dg_status st)
{
    if (msg && len)
        snprintf(msg, len, "split-K: %s failed: %s (%d)", what, dg_ocl_err_name(e), (int)e);
    return st;
}

/* Kernel name of program as a kernel whose work-groups of edge x edge fit
 * dev; NULL where it does not (or cannot be made: the split is optional). */
static cl_kernel fitting_kernel(cl_program program, cl_device_id dev, const char *name, size_t edge)
{
    cl_int e = CL_SUCCESS;
    cl_kernel kr = clCreateKernel(program, name, &e);
    size_t wg = 0;
    if (kr &&
        clGetKernelWorkGroupInfo(kr, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL) ==
            CL_SUCCESS &&
        wg >= edge * edge)
        return kr;
    if (kr)
        clReleaseKernel(kr);
    return NULL;
}

dg_status dg_ocl_split_init(ocl_split *s, cl_program program, cl_device_id dev, bool have32,
                            bool have64, char *reason, size_t len)
{
    int force = s->force;
    memset(s, 0, sizeof *s);
    s->force = force;
    if (!have32 && !have64)
        return DG_OK;
    cl_int e = CL_SUCCESS;
    s->sum = clCreateKernel(program, "dg_split_sum", &e);
    size_t wg = 0;
    if (s->sum)
        e = clGetKernelWorkGroupInfo(s->sum, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
    if (!s->sum || e != CL_SUCCESS) {
        return fail(reason, len, "clCreateKernel(dg_split_sum)", e, DG_ERR_BACKEND);
    }
    s->sum_local = wg < SUM_LOCAL ? (wg ? wg : 1) : SUM_LOCAL;
    const bool have[2] = {have32, have64};
    for (int i = 0; i < 2; i++)
        for (int t = 0; t < 4 && have[i]; t++)
            s->part[i][t] = fitting_kernel(program, dev, part_names[i][t], part_wg[i]);
    return DG_OK;
}

void dg_ocl_split_free(ocl_split *s)
{
    cl_kernel *parts = &s->part[0][0]; /* the 2 x 4 split kernels in a row */
    for (int i = 0; i < 8; i++)
        if (parts[i])
            clReleaseKernel(parts[i]);
    if (s->sum)
        clReleaseKernel(s->sum);
    if (s->work)
        clReleaseMemObject(s->work);
    int force = s->force;
    memset(s, 0, sizeof *s);
    s->force = force;
}

bool dg_ocl_split_has(const ocl_split *s, int tile, bool ta, bool tb)
{
    return (tile == 32 || tile == 64) && s->sum && s->part[tile == 64][(ta ? 2 : 0) + (tb ? 1 : 0)];
}

/* Makes the workspace hold at least bytes (grown geometrically, as the
 * backend's other scratch buffers): DG_ERR_UNAVAILABLE when the device has no
 * room, *e set on another failure. */
static dg_status grow_work(ocl_split *s, cl_context context, size_t bytes, cl_int *e)
{
    if (s->work_bytes >= bytes)
        return DG_OK;
    size_t want = bytes < 2 * s->work_bytes ? 2 * s->work_bytes : bytes;
    cl_mem m = clCreateBuffer(context, CL_MEM_READ_WRITE, want, NULL, e);
    if (!m && want > bytes) /* the doubling may be what does not fit */
        m = clCreateBuffer(context, CL_MEM_READ_WRITE, want = bytes, NULL, e);
    if (!m)
        return *e == CL_MEM_OBJECT_ALLOCATION_FAILURE || *e == CL_OUT_OF_RESOURCES ||
                       *e == CL_INVALID_BUFFER_SIZE
                   ? DG_ERR_UNAVAILABLE
                   : DG_ERR_BACKEND;
    if (s->work)
        clReleaseMemObject(s->work); /* lives on until its last command finishes */
    s->work = m;
    s->work_bytes = want;
    return DG_OK;
}

/* Sets kernel kr's n arguments and enqueues it over global (dims
 * dimensions) in groups of local. */
static cl_int launch(cl_command_queue queue, cl_kernel kr, const karg *args, cl_uint n,
                     cl_uint dims, const size_t *global, const size_t *local)
{
    size_t bad;
    cl_int e = dg_ocl_set_args(kr, args, n, &bad);
    return e == CL_SUCCESS
               ? clEnqueueNDRangeKernel(queue, kr, dims, NULL, global, local, 0, NULL, NULL)
               : e;
}

dg_status dg_ocl_split_enqueue(ocl_split *s, cl_context context, cl_command_queue queue, int tile,
                               int slices, const ocl_split_gemm *g, uint64_t *enqueued, char *err,
                               size_t len)
{
    if (!dg_ocl_split_has(s, tile, g->ta, g->tb) || slices < 2 || g->batch < 1)
        return DG_ERR_UNAVAILABLE;
    int ti = tile == 64, tr = (g->ta ? 2 : 0) + (g->tb ? 1 : 0);
    cl_int e = CL_SUCCESS;
    size_t bytes = (size_t)slices * g->batch * (size_t)g->m * (size_t)g->n * sizeof(float);
    dg_status st = grow_work(s, context, bytes, &e);
    if (st != DG_OK) {
        return st == DG_ERR_UNAVAILABLE
                   ? st
                   : fail(err, len, "clCreateBuffer(split-K workspace)", e, st);
    }
    cl_int m = g->m, n = g->n, k = g->k, ks = dg_ocl_split_depth(g->k, slices), ns = slices;
    cl_int lda = g->lda, ldb = g->ldb, ldc = g->ldc, epi = g->ep ? g->ep->epi : 0;
    /* The partial products: product i's slice s at groups (x, y, i * slices + s). */
    const karg part_args[] = {KA(m),     KA(n),     KA(k),     KA(ks),     KA(ns),
                              KA(g->a),  KA(g->ea), KA(lda),   KA(g->sa),  KA(g->b),
                              KA(g->eb), KA(ldb),   KA(g->sb), KA(s->work)};
    size_t wg = part_wg[ti], t = (size_t)tile;
    size_t local[3] = {wg, wg, 1};
    size_t global[3] = {((size_t)n + t - 1) / t * wg, ((size_t)m + t - 1) / t * wg,
                        (size_t)ns * g->batch};
    e = launch(queue, s->part[ti][tr], part_args, (cl_uint)NARGS(part_args), 3, global, local);
    if (e != CL_SUCCESS)
        return fail(err, len, part_names[ti][tr], e, dg_ocl_status(e));
    (*enqueued)++;
    /* The sums in slice order, alpha, beta and the epilogue (unused operands: C stands in). */
    cl_float alpha = g->alpha, beta = g->beta;
    cl_mem bias = g->ep && g->ep->bias ? g->ep->bias : g->c;
    cl_mem mask = g->ep && g->ep->mask ? g->ep->mask : g->c;
    cl_ulong eb = g->ep ? g->ep->ebias : 0, em = g->ep ? g->ep->emask : 0;
    const karg sum_args[] = {KA(m),    KA(n),    KA(ns),    KA(s->work), KA(alpha),
                             KA(beta), KA(g->c), KA(g->ec), KA(ldc),     KA(g->sc),
                             KA(bias), KA(eb),   KA(mask),  KA(em),      KA(epi)};
    size_t sl[3] = {s->sum_local, 1, 1};
    size_t sg[3] = {((size_t)n + sl[0] - 1) / sl[0] * sl[0], (size_t)m, g->batch};
    e = launch(queue, s->sum, sum_args, (cl_uint)NARGS(sum_args), 3, sg, sl);
    if (e != CL_SUCCESS)
        return fail(err, len, "dg_split_sum", e, dg_ocl_status(e));
    (*enqueued)++;
    return DG_OK;
}
