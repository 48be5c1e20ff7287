/* OpenCL error codes for the backend's messages and statuses (internal to
 * src/backend/opencl/: opencl.c and ocl_gemm_split.c's callers). */
#ifndef DG_OCL_ERR_H
#define DG_OCL_ERR_H
#include "backend/backend.h"

#include <CL/cl.h>

/* Symbolic name of a CL error code ("CL_INVALID_VALUE"; "CL_UNKNOWN_ERROR"
 * for a code it does not know); a static string. */
const char *dg_ocl_err_name(cl_int e);

/* The dg_status a failed CL call maps to: DG_ERR_DEVICE_OOM for the device's
 * allocation failures, DG_ERR_NOMEM for the host's, else DG_ERR_BACKEND. */
dg_status dg_ocl_status(cl_int e);

#endif
