/* Split-K for the OpenCL backend's GEMM (internal to src/backend/opencl/).
 *
 * A single product whose tiles leave compute units idle (m x n small against
 * a long k: 256 x 256 at 32-wide tiles is 64 work-groups on the H200's 132
 * compute units) runs as slices of k: kernels.cl's dg_split_db32/db64 put
 * slice s's partial product into a workspace of slices x m x n floats (group
 * dimension 2 is the slice), then dg_split_sum adds the slices in order of s
 * (the same result run to run, no atomics) and applies alpha, beta and the
 * fused epilogue (bias, ReLU, ReLU's mask) as the direct kernels do, so fused
 * callers still get one result. Two commands instead of one.
 *
 * dg_ocl_split_slices is the pure choice (tests read it without a device through
 * dg_ocl_gemm_pick); DEVGATE_OPENCL_SPLITK=off|N forces it off or to about N
 * slices wherever a db32/db64 product of batch 1 runs. */
#ifndef DG_OCL_GEMM_SPLIT_H
#define DG_OCL_GEMM_SPLIT_H
#include "backend/backend.h"

#include <CL/cl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A checked epilogue for a product (kernels.cl's EPI_* bits in epi). */
typedef struct ocl_epi {
    int epi;
    cl_mem bias, mask; /* NULL when unused */
    cl_ulong ebias, emask;
} ocl_epi;
enum { EPI_BIAS_COL = 1, EPI_BIAS_ROW = 2, EPI_RELU = 4, EPI_MASK = 8 };

#define OCL_SPLIT_MAX 64     /* most slices, automatic or forced */
#define OCL_SPLIT_GRID 65535 /* most slices x batch (the third NDRange dimension, as batches) */
#define OCL_SPLIT_AUTO (-1)

/* The split kernels of one context: [db32, db64][transpose ta*2+tb] (NULL
 * where the tile's GEMM kernel is not built), the reduction, and the
 * workspace (grown on demand, kept until dg_ocl_split_free). */
typedef struct ocl_split {
    cl_kernel part[2][4];
    cl_kernel sum;
    size_t sum_local; /* work-items of a dg_split_sum group along n */
    cl_mem work;
    size_t work_bytes;
    int force; /* DEVGATE_OPENCL_SPLITK: OCL_SPLIT_AUTO, 0 off, else about that many slices */
} ocl_split;

/* A checked batch of products C_i = alpha * op(A_i) * op(B_i) + beta * C_i,
 * operand i at element offset ea + i * sa (eb + i * sb, ec + i * sc), then the
 * epilogue ep (NULL: none) on each. */
typedef struct ocl_split_gemm {
    bool ta, tb;
    int m, n, k;
    float alpha, beta;
    cl_mem a, b, c;
    cl_ulong ea, eb, ec;
    int lda, ldb, ldc;
    cl_ulong sa, sb, sc;
    size_t batch;
    const ocl_epi *ep;
} ocl_split_gemm;

/* The slices for a batch of m x n x k products tiled tile-wide (32 or 64; 0:
 * a kernel without a split form) on a device of cus compute units, under
 * force (OCL_SPLIT_AUTO, 0 off, N) and a workspace cap in bytes (0: none).
 * 1 means no split. Automatic: where the tiles of the batch leave compute
 * units idle and k is long, enough slices for about two work-groups a
 * compute unit, each a few of the kernels' steps deep (ocl_gemm_split.c
 * says how many). Forced: about N slices of any product. Pure. */
int dg_ocl_split_slices(int force, unsigned cus, int tile, int m, int n, int k, size_t batch,
                        uint64_t cap);

/* k per slice for a product split into about slices (a multiple of the
 * kernels' depth, 16): the last slice takes the rest. Pure. */
int dg_ocl_split_depth(int k, int slices);

/* Reads DEVGATE_OPENCL_SPLITK into *force (unset or empty: OCL_SPLIT_AUTO);
 * DG_ERR_USAGE with the reason for any value but off and 1..OCL_SPLIT_MAX. */
dg_status dg_ocl_split_env(int *force, char *reason, size_t len);

/* Creates the split kernels from program for tiles 32 (have32) and 64
 * (have64) where they fit the device (each optional), and the reduction; s
 * zeroed first except force. DG_ERR_BACKEND with the reason when the
 * reduction cannot be made; what was made stays for dg_ocl_split_free. */
dg_status dg_ocl_split_init(ocl_split *s, cl_program program, cl_device_id dev, bool have32,
                            bool have64, char *reason, size_t len);

/* Releases the kernels and the workspace; accepts a zeroed s. */
void dg_ocl_split_free(ocl_split *s);

/* Whether the tile-wide (32 or 64) split kernel for these transposes exists. */
bool dg_ocl_split_has(const ocl_split *s, int tile, bool ta, bool tb);

/* Enqueues product g split into slices (dg_ocl_split_slices' answer) on the
 * tile-wide kernels: the partial products, then the sum; *enqueued counts
 * the commands. DG_ERR_UNAVAILABLE (nothing enqueued) when there is no such
 * kernel or the workspace cannot be allocated: the caller runs the direct
 * kernel; another failure's status with its message in err. */
dg_status dg_ocl_split_enqueue(ocl_split *s, cl_context context, cl_command_queue queue, int tile,
                               int slices, const ocl_split_gemm *g, uint64_t *enqueued, char *err,
                               size_t len);

#endif
