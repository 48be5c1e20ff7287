/* Entry points of the OpenCL backend beyond its interface, for the side-by-side
 * GEMM bench (bench/gemm_vs_clblast.c) and the tests: the strided batched GEMM
 * the convolutions use, the variant it would pick, and the backend's own
 * context, queue and device so another library can work on the same buffers.
 * ctx is a context from dg_backend_opencl_iface()->init. */
#ifndef DG_OPENCL_HOOKS_H
#define DG_OPENCL_HOOKS_H
#include "backend/backend.h"

#include <CL/cl.h>
#include <stdint.h>

/* batch products C_i = alpha * op(A_i) * op(B_i) + beta * C_i, operand i at
 * the ref advanced by i*sa, i*sb, i*sc elements (k > 0, batch 0..65535);
 * every product's range is checked; enqueued only (asynchronous). */
dg_status dg_ocl_gemm_strided(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha,
                              dg_ref a, int lda, size_t sa, dg_ref b, int ldb, size_t sb,
                              float beta, dg_ref c, int ldc, size_t sc, int batch);

/* Name of the kernel variant ("db64", "vec", ...) a batch of m x n x k
 * products (op(A) = A^T when ta, op(B) = B^T when tb) runs on this device
 * ("" without a context), and in *slices (unless NULL) the k-slices it is
 * split into (1: not split; ocl_gemm_split.h, DEVGATE_OPENCL_SPLITK
 * respected). */
const char *dg_ocl_gemm_variant(void *ctx, bool ta, bool tb, int m, int n, int k, int batch,
                                int *slices);

/* The automatic choice's variant for that product on a device of a class
 * with every variant of the class built: cpu (the vec kernel) or not (GPUs
 * and accelerators, the tiled kernels), with compute_units, and its split
 * into *slices (unless NULL; no workspace cap): the table in opencl.c,
 * readable by tests without a device, DEVGATE_OPENCL_SPLITK not read. */
const char *dg_ocl_gemm_pick(bool cpu, unsigned compute_units, bool ta, bool tb, int m, int n,
                             int k, int batch, int *slices);

/* Where the context's program came from: "source" (built from kernels.cl) or
 * "cache" (the program binary cache, ocl_cache.h); "" without a context. */
const char *dg_ocl_program_origin(void *ctx);

/* The backend's context, in-order profiling queue and device (still owned by
 * the backend); DG_ERR_USAGE on a NULL argument. */
dg_status dg_ocl_handles(void *ctx, cl_context *context, cl_command_queue *queue,
                         cl_device_id *device);

/* Test hook: hold true makes every later upload from a page-locked block
 * (host_alloc) wait before its copy runs, until hold false lets them go (so a
 * test sees what host_wait and the ops do while a copy is in flight). Free
 * releases a held gate; DG_ERR_USAGE without a context. */
dg_status dg_ocl_hold_copies(void *ctx, bool hold);

/* Counts since init: commands the uploads, downloads, ops and event marks put
 * on the backend's queues (*enqueued), and calls that made the host wait for
 * the device (*waits: blocking copies, synchronize, host_wait on a copy in
 * flight, event_elapsed). DG_ERR_USAGE on a NULL argument. */
dg_status dg_ocl_counts(void *ctx, uint64_t *enqueued, uint64_t *waits);

#endif
