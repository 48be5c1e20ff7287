/* The OpenCL program binary cache (issue 24, time to evidence): the kernels
 * built once per boot, device, driver and source, so the processes of one
 * accept (env, gate, sweep trials, soak, compare, profile) build from source
 * once. ocl_cache.c. */
#ifndef DG_OCL_CACHE_H
#define DG_OCL_CACHE_H
#include <CL/cl.h>
#include <stdbool.h>

/* Where the program came from. */
typedef enum { DG_OCL_FROM_SOURCE = 0, DG_OCL_FROM_CACHE = 1 } dg_ocl_origin;

/* Creates and builds the program for device (in context, on platform) with
 * the build options: from a cached binary when a valid entry exists (its key
 * the SHA-256 of the boot id, platform, device, driver, options and source;
 * the file's own checksum checked; a binary the driver refuses is built from
 * source), else from source, then stored. The cache folder is
 * DEVGATE_OPENCL_CACHE, else ${TMPDIR:-/tmp}/devgate-cache-UID/opencl; it is
 * used only when it is a folder (not a link) the user owns with no access for
 * others; DEVGATE_OPENCL_CACHE=off (or use false) builds from source always.
 * The backend asks it for GPUs and accelerators only: a CPU platform's
 * binary is its every kernel compiled to machine code, which PoCL does only
 * when the binary is asked for (17 s of CPU for kernels.cl, where its own
 * cache of the front end's output makes a second build from source cheap).
 * Returns the
 * program, *err CL_SUCCESS when it is built; a program whose build from
 * source failed comes back with that error (its build log readable; the
 * caller releases it); NULL when none could be created (*err says why). */
cl_program dg_ocl_program_build(cl_context context, cl_platform_id platform, cl_device_id device,
                                const char *src, const char *opts, bool use, cl_int *err,
                                dg_ocl_origin *origin);

/* The cache file a build for device would use, into buf (false: no cache:
 * it is off, or the folder is not safe to use). */
bool dg_ocl_cache_path(cl_platform_id platform, cl_device_id device, const char *src,
                       const char *opts, char *buf, size_t len);

#endif
