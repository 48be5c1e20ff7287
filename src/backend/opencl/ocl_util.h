/* What the OpenCL backend's files share (internal to src/backend/opencl/):
 * error codes as names and statuses, kernel arguments as (size, value). */
#ifndef DG_OCL_UTIL_H
#define DG_OCL_UTIL_H
#include "backend/backend.h"

#include <CL/cl.h>

/* Symbolic name of a CL error code ("CL_INVALID_VALUE"; "CL_UNKNOWN_ERROR"
 * for a code it does not know); a static string. */
const char *dg_ocl_err_name(cl_int e);

/* The dg_status a failed CL call maps to: DG_ERR_DEVICE_OOM for the device's
 * allocation failures, DG_ERR_NOMEM for the host's, else DG_ERR_BACKEND. */
dg_status dg_ocl_status(cl_int e);

/* A kernel argument: its size and where its value is. */
typedef struct karg {
    size_t size;
    const void *value;
} karg;
#define KA(x)                                                                                      \
    {                                                                                              \
        sizeof(x), &(x)                                                                            \
    }
#define NARGS(a) (sizeof(a) / sizeof((a)[0]))

/* Sets kernel k's arguments 0..n-1 from args; CL_SUCCESS, or the first
 * failure's code with its argument's index in *bad. */
cl_int dg_ocl_set_args(cl_kernel k, const karg *args, size_t n, size_t *bad);

#endif
