/* CUDA backend plug-in: the runtime API for devices, memory and streams, cuBLAS
 * for the matrix product. devgate dlopens this object and finds it through its
 * one exported symbol (DG_PLUGIN_SYMBOL); it calls nothing of the devgate
 * library, keeps its messages in its own context and never prints or exits.
 * Kept in C style; it is C++ only because nvcc compiles it. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backend/backend.h"

typedef struct cu_ctx {
    int device;
    int driver_ver;  /* cudaDriverGetVersion, e.g. 13000 */
    int runtime_ver; /* cudaRuntimeGetVersion */
    cudaStream_t stream;
    cublasHandle_t blas;
    char err[512];
} cu_ctx;

/* Formats a message into buf (snprintf semantics, tolerates NULL/0). */
static void cu_vformat(char *buf, size_t len, const char *fmt, va_list ap)
{
    if (buf && len > 0)
        vsnprintf(buf, len, fmt, ap);
}

/* Records a message on c (when there is one) and returns st. */
static dg_status cu_fail(cu_ctx *c, dg_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (c)
        cu_vformat(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return st;
}

/* Writes a message into reason and returns st (init's failures). */
static dg_status cu_reason(char *reason, size_t len, dg_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cu_vformat(reason, len, fmt, ap);
    va_end(ap);
    return st;
}

/* Records a CUDA runtime error "what: name: text" on c; returns st. */
static dg_status cu_fail_rt(cu_ctx *c, dg_status st, const char *what, cudaError_t e)
{
    return cu_fail(c, st, "cuda: %s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Records a cuBLAS error "what: name: text" on c; returns DG_ERR_BACKEND. */
static dg_status cu_fail_blas(cu_ctx *c, const char *what, cublasStatus_t s)
{
    return cu_fail(c, DG_ERR_BACKEND, "cuda: %s: %s: %s", what, cublasGetStatusName(s),
                   cublasGetStatusString(s));
}

/* "13.0" from a CUDA version number such as 13000 ("none" for 0). */
static void cu_ver_str(int v, char *buf, size_t len)
{
    if (v <= 0)
        snprintf(buf, len, "none");
    else
        snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

/* Makes the context's device current on the calling thread. */
static dg_status cu_bind(cu_ctx *c)
{
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess)
        return cu_fail_rt(c, DG_ERR_BACKEND, "cudaSetDevice", e);
    return DG_OK;
}

/* Releases everything init created; accepts NULL. */
static void cu_free(void *ctx)
{
    cu_ctx *c = (cu_ctx *)ctx;
    if (!c)
        return;
    if (c->blas || c->stream)
        cudaSetDevice(c->device);
    if (c->blas)
        cublasDestroy(c->blas);
    if (c->stream) {
        cudaStreamSynchronize(c->stream);
        cudaStreamDestroy(c->stream);
    }
    free(c);
}

/* Checks driver and devices, then opens `device` with a stream and a cuBLAS handle. */
static dg_status cu_init(int device, void **ctx, char *reason, size_t reason_len)
{
    int drv = 0, rt = 0, count = 0;
    char drv_s[16], rt_s[16];
    cudaError_t e;
    cublasStatus_t bs;
    cu_ctx *c;

    if (reason && reason_len > 0)
        reason[0] = '\0';
    if (!ctx)
        return cu_reason(reason, reason_len, DG_ERR_USAGE, "cuda: init: NULL ctx pointer");
    *ctx = NULL;

    /* cudaDriverGetVersion reports 0 when no driver (libcuda) is installed. */
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    cu_ver_str(drv, drv_s, sizeof drv_s);
    cu_ver_str(rt, rt_s, sizeof rt_s);
    e = cudaGetDeviceCount(&count);
    if (drv == 0) {
        if (e == cudaSuccess)
            e = cudaErrorInsufficientDriver;
        cudaGetLastError();
        return cu_reason(reason, reason_len, DG_ERR_UNAVAILABLE,
                         "cuda: CUDA driver not found (libcuda.so.1 missing): %s: %s",
                         cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (e == cudaErrorInsufficientDriver) {
        cudaGetLastError();
        if (drv < rt)
            return cu_reason(reason, reason_len, DG_ERR_UNAVAILABLE,
                             "cuda: CUDA driver version %s < runtime %s: %s: %s", drv_s, rt_s,
                             cudaGetErrorName(e), cudaGetErrorString(e));
        return cu_reason(reason, reason_len, DG_ERR_UNAVAILABLE,
                         "cuda: CUDA driver %s cannot run runtime %s: %s: %s", drv_s, rt_s,
                         cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (e == cudaErrorNoDevice || (e == cudaSuccess && count <= 0)) {
        if (e == cudaSuccess)
            e = cudaErrorNoDevice;
        cudaGetLastError();
        return cu_reason(reason, reason_len, DG_ERR_UNAVAILABLE,
                         "cuda: no CUDA device (driver %s, runtime %s): %s: %s", drv_s, rt_s,
                         cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        return cu_reason(reason, reason_len, DG_ERR_UNAVAILABLE,
                         "cuda: cudaGetDeviceCount failed (driver %s, runtime %s): %s: %s", drv_s,
                         rt_s, cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (device < 0 || device >= count)
        return cu_reason(reason, reason_len, DG_ERR_NOT_FOUND,
                         "cuda: device index %d out of range (%d CUDA device%s)", device, count,
                         count == 1 ? "" : "s");

    c = (cu_ctx *)calloc(1, sizeof *c);
    if (!c)
        return cu_reason(reason, reason_len, DG_ERR_NOMEM, "cuda: out of host memory");
    c->device = device;
    c->driver_ver = drv;
    c->runtime_ver = rt;

    e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cu_reason(reason, reason_len, DG_ERR_UNAVAILABLE, "cuda: cannot open device %d: %s: %s",
                  device, cudaGetErrorName(e), cudaGetErrorString(e));
        c->stream = NULL;
        cu_free(c);
        return DG_ERR_UNAVAILABLE;
    }
    bs = cublasCreate(&c->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        c->blas = NULL;
        cu_free(c);
        return cu_reason(reason, reason_len, DG_ERR_UNAVAILABLE,
                         "cuda: cublasCreate on device %d: %s: %s", device, cublasGetStatusName(bs),
                         cublasGetStatusString(bs));
    }
    /* Plain fp32: no TF32 tensor-core shortcut, the gate checks fp32 accuracy. */
    bs = cublasSetStream(c->blas, c->stream);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cu_free(c);
        return cu_reason(reason, reason_len, DG_ERR_BACKEND,
                         "cuda: configuring cuBLAS on device %d: %s: %s", device,
                         cublasGetStatusName(bs), cublasGetStatusString(bs));
    }
    *ctx = c;
    return DG_OK;
}

/* The context's last message; a fixed one without a context. */
static const char *cu_last_error(void *ctx)
{
    cu_ctx *c = (cu_ctx *)ctx;
    return c ? c->err : "cuda: not initialised";
}

/* Number of CUDA devices (0 when the driver or devices are missing). */
static int cu_device_count(void *ctx)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

/* Describes device `device`; free memory is known only for the opened device. */
static dg_status cu_device_info(void *ctx, int device, dg_device_info *out)
{
    cu_ctx *c = (cu_ctx *)ctx;
    cudaDeviceProp p;
    cudaError_t e;
    int drv = 0, rt = 0, count = 0;
    char drv_s[16], rt_s[16];

    if (!out)
        return cu_fail(c, DG_ERR_USAGE, "cuda: device_info: NULL output");
    memset(out, 0, sizeof *out);
    e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return cu_fail_rt(c, DG_ERR_UNAVAILABLE, "cudaGetDeviceCount", e);
    }
    if (device < 0 || device >= count)
        return cu_fail(c, DG_ERR_NOT_FOUND, "cuda: device index %d out of range (%d CUDA device%s)",
                       device, count, count == 1 ? "" : "s");
    e = cudaGetDeviceProperties(&p, device);
    if (e != cudaSuccess)
        return cu_fail_rt(c, DG_ERR_BACKEND, "cudaGetDeviceProperties", e);

    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    cu_ver_str(drv, drv_s, sizeof drv_s);
    cu_ver_str(rt, rt_s, sizeof rt_s);
    snprintf(out->name, sizeof out->name, "%.*s", (int)sizeof out->name - 1, p.name);
    snprintf(out->vendor, sizeof out->vendor, "NVIDIA");
    snprintf(out->driver_version, sizeof out->driver_version, "driver %s / runtime %s", drv_s,
             rt_s);
    snprintf(out->platform, sizeof out->platform, "CUDA %s", rt_s);
    out->mem_total.value = (double)p.totalGlobalMem;
    out->mem_total.valid = true;
    out->compute_units.value = (double)p.multiProcessorCount;
    out->compute_units.valid = true;
    if (c && device == c->device && cu_bind(c) == DG_OK) {
        size_t free_b = 0, total_b = 0;
        e = cudaMemGetInfo(&free_b, &total_b);
        if (e == cudaSuccess) {
            out->mem_free.value = (double)free_b;
            out->mem_free.valid = true;
            out->mem_total.value = (double)total_b;
        } else {
            cudaGetLastError();
        }
    }
    return DG_OK;
}

/* "CUDA driver X.Y, runtime X.Y, cuBLAS X.Y.Z". */
static void cu_versions(void *ctx, char *buf, size_t len)
{
    cu_ctx *c = (cu_ctx *)ctx;
    int drv = 0, rt = 0, bv = 0, maj = 0, min = 0, pat = 0;
    char drv_s[16], rt_s[16], blas_s[32];

    if (!buf || len == 0)
        return;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    cu_ver_str(drv, drv_s, sizeof drv_s);
    cu_ver_str(rt, rt_s, sizeof rt_s);
    if (c && c->blas && cublasGetVersion(c->blas, &bv) == CUBLAS_STATUS_SUCCESS)
        snprintf(blas_s, sizeof blas_s, "%d.%d.%d", bv / 10000, (bv / 100) % 100, bv % 100);
    else if (cublasGetProperty(MAJOR_VERSION, &maj) == CUBLAS_STATUS_SUCCESS &&
             cublasGetProperty(MINOR_VERSION, &min) == CUBLAS_STATUS_SUCCESS &&
             cublasGetProperty(PATCH_LEVEL, &pat) == CUBLAS_STATUS_SUCCESS)
        snprintf(blas_s, sizeof blas_s, "%d.%d.%d", maj, min, pat);
    else
        snprintf(blas_s, sizeof blas_s, "unknown");
    snprintf(buf, len, "CUDA driver %s, runtime %s, cuBLAS %s", drv_s, rt_s, blas_s);
}

/* cudaMalloc; DG_ERR_DEVICE_OOM (error cleared) when the device is full. */
static dg_status cu_buf_alloc(void *ctx, size_t bytes, void **buf)
{
    cu_ctx *c = (cu_ctx *)ctx;
    void *p = NULL;
    cudaError_t e;
    dg_status st;

    if (!c)
        return DG_ERR_USAGE;
    if (!buf)
        return cu_fail(c, DG_ERR_USAGE, "cuda: buf_alloc: NULL output");
    *buf = NULL;
    if ((st = cu_bind(c)) != DG_OK)
        return st;
    e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return cu_fail(c, DG_ERR_DEVICE_OOM, "cuda: cudaMalloc of %zu bytes on device %d: %s: %s",
                       bytes, c->device, cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        return cu_fail(c, DG_ERR_BACKEND, "cuda: cudaMalloc of %zu bytes on device %d: %s: %s",
                       bytes, c->device, cudaGetErrorName(e), cudaGetErrorString(e));
    }
    *buf = p;
    return DG_OK;
}

/* cudaFree; accepts NULL; a failure is only recorded as the last error. */
static void cu_buf_free(void *ctx, void *buf)
{
    cu_ctx *c = (cu_ctx *)ctx;
    cudaError_t e;

    if (!c || !buf || cu_bind(c) != DG_OK)
        return;
    e = cudaFree(buf);
    if (e != cudaSuccess)
        cu_fail_rt(c, DG_ERR_BACKEND, "cudaFree", e);
}

/* Copies bytes on the stream and waits; dir tells host-to-device or back. */
static dg_status cu_copy(cu_ctx *c, void *dst, const void *src, size_t bytes,
                         enum cudaMemcpyKind dir, const char *what)
{
    cudaError_t e;
    dg_status st;

    if ((st = cu_bind(c)) != DG_OK)
        return st;
    e = cudaMemcpyAsync(dst, src, bytes, dir, c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        return cu_fail(c, DG_ERR_BACKEND, "cuda: %s of %zu bytes: %s: %s", what, bytes,
                       cudaGetErrorName(e), cudaGetErrorString(e));
    return DG_OK;
}

/* Host src to buf at byte offset off; returns when the copy is done. */
static dg_status cu_upload(void *ctx, void *buf, size_t off, const void *src, size_t bytes)
{
    cu_ctx *c = (cu_ctx *)ctx;

    if (!c)
        return DG_ERR_USAGE;
    if (!buf || (!src && bytes > 0))
        return cu_fail(c, DG_ERR_USAGE, "cuda: upload: NULL %s", buf ? "source" : "buffer");
    if (bytes == 0)
        return DG_OK;
    return cu_copy(c, (char *)buf + off, src, bytes, cudaMemcpyHostToDevice, "upload");
}

/* buf at byte offset off to host dst; returns when the copy is done. */
static dg_status cu_download(void *ctx, const void *buf, size_t off, void *dst, size_t bytes)
{
    cu_ctx *c = (cu_ctx *)ctx;

    if (!c)
        return DG_ERR_USAGE;
    if (!buf || (!dst && bytes > 0))
        return cu_fail(c, DG_ERR_USAGE, "cuda: download: NULL %s", buf ? "destination" : "buffer");
    if (bytes == 0)
        return DG_OK;
    return cu_copy(c, dst, (const char *)buf + off, bytes, cudaMemcpyDeviceToHost, "download");
}

/* Row-major C = alpha*A*B + beta*C as column-major C^T = B^T * A^T on the stream. */
static dg_status cu_gemm_nn(void *ctx, int m, int n, int k, float alpha, const void *a, size_t a_off,
                         int lda, const void *b, size_t b_off, int ldb, float beta, void *c_buf,
                         size_t c_off, int ldc)
{
    cu_ctx *c = (cu_ctx *)ctx;
    cublasStatus_t s;
    dg_status st;

    if (!c)
        return DG_ERR_USAGE;
    if (m < 0 || n < 0 || k < 0)
        return cu_fail(c, DG_ERR_USAGE, "cuda: gemm: negative size %dx%dx%d", m, n, k);
    if (!a || !b || !c_buf)
        return cu_fail(c, DG_ERR_USAGE, "cuda: gemm: NULL buffer");
    if (lda < (k > 1 ? k : 1) || ldb < (n > 1 ? n : 1) || ldc < (n > 1 ? n : 1))
        return cu_fail(c, DG_ERR_USAGE,
                       "cuda: gemm: leading dimension too small (lda %d, ldb %d, ldc %d for "
                       "m %d, n %d, k %d)",
                       lda, ldb, ldc, m, n, k);
    if (a_off % sizeof(float) || b_off % sizeof(float) || c_off % sizeof(float))
        return cu_fail(c, DG_ERR_USAGE,
                       "cuda: gemm: offsets must be multiples of %zu bytes (%zu, %zu, %zu)",
                       sizeof(float), a_off, b_off, c_off);
    if (m == 0 || n == 0)
        return DG_OK;
    if ((st = cu_bind(c)) != DG_OK)
        return st;
    s = cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha,
                    (const float *)((const char *)b + b_off), ldb,
                    (const float *)((const char *)a + a_off), lda, &beta,
                    (float *)((char *)c_buf + c_off), ldc);
    if (s != CUBLAS_STATUS_SUCCESS)
        return cu_fail_blas(c, "cublasSgemm", s);
    return DG_OK;
}

/* Waits for everything queued on the context's stream. */
static dg_status cu_synchronize(void *ctx)
{
    cu_ctx *c = (cu_ctx *)ctx;
    cudaError_t e;

    if (!c)
        return DG_ERR_USAGE;
    e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        return cu_fail_rt(c, DG_ERR_BACKEND, "cudaStreamSynchronize", e);
    return DG_OK;
}

/* Operators this backend implements. */
static bool cu_supports_op(void *ctx, dg_op op)
{
    return op == DG_OP_GEMM;
}

/* Interface v2 entry: row-major with optional transposes. */
static dg_status cu_gemm(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha, dg_ref a, int lda, dg_ref b, int ldb, float beta, dg_ref c, int ldc)
{
    if (ta || tb)
        return cu_fail((cu_ctx *)ctx, DG_ERR_USAGE, "cuda: gemm: transposed operands not implemented yet");
    return cu_gemm_nn(ctx, m, n, k, alpha, a.buf, a.off, lda, b.buf, b.off, ldb, beta, c.buf, c.off, ldc);
}

static const dg_backend_iface cu_iface = {
    .version = DG_BACKEND_IFACE_VERSION,
    .name = "cuda",
    .init = cu_init,
    .free = cu_free,
    .last_error = cu_last_error,
    .device_count = cu_device_count,
    .device_info = cu_device_info,
    .versions = cu_versions,
    .buf_alloc = cu_buf_alloc,
    .buf_free = cu_buf_free,
    .upload = cu_upload,
    .download = cu_download,
    .synchronize = cu_synchronize,
    .supports_op = cu_supports_op,
    .gemm = cu_gemm,
};

/* The plug-in's only export: the CUDA backend's interface. */
extern "C" __attribute__((visibility("default"))) const dg_backend_iface *
dg_backend_plugin_iface(void)
{
    return &cu_iface;
}
