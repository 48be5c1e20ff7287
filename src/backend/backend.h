/* Backend interface: a struct of function pointers plus a context pointer,
 * version field first. Each backend exports only its registration function
 * (dg_backend_<name>_iface); the CUDA one lives in a plug-in loaded at run time.
 *
 * Buffers are opaque device allocations (void *); offsets are in bytes.
 * Matrices are row-major. Every call that can fail returns a dg_status and
 * leaves a message retrievable through last_error. */
#ifndef DG_BACKEND_H
#define DG_BACKEND_H

#include "devgate.h"

#define DG_BACKEND_IFACE_VERSION 1

typedef struct dg_metric {
    double value;
    bool valid; /* false: the device did not report it; value is meaningless */
} dg_metric;

typedef struct dg_device_info {
    char name[128];
    char vendor[128];
    char driver_version[128];
    char platform[128];  /* OpenCL platform or CUDA runtime version; "" when none */
    dg_metric mem_total; /* bytes */
    dg_metric mem_free;  /* bytes */
    dg_metric compute_units;
} dg_device_info;

/* Operators a backend may or may not implement (the list grows with the engine). */
typedef enum dg_op {
    DG_OP_GEMM,
    DG_OP__COUNT
} dg_op;

typedef struct dg_backend_iface {
    uint32_t version; /* DG_BACKEND_IFACE_VERSION the backend was built against */
    const char *name;

    /* Opens device `device` (index into the enumeration). On failure returns a
     * status and writes the human reason (driver missing, no device, ...) to
     * reason. *ctx is owned by the caller and released with free. */
    dg_status (*init)(int device, void **ctx, char *reason, size_t reason_len);
    void (*free)(void *ctx);
    const char *(*last_error)(void *ctx);

    int (*device_count)(void *ctx);
    dg_status (*device_info)(void *ctx, int device, dg_device_info *out);
    /* Library / runtime versions this backend talks to, as "name version" text. */
    void (*versions)(void *ctx, char *buf, size_t len);

    dg_status (*buf_alloc)(void *ctx, size_t bytes, void **buf);
    void (*buf_free)(void *ctx, void *buf);
    dg_status (*upload)(void *ctx, void *buf, size_t off, const void *src, size_t bytes);
    dg_status (*download)(void *ctx, const void *buf, size_t off, void *dst, size_t bytes);

    /* C[m,n] = alpha * A[m,k] * B[k,n] + beta * C, row-major, leading dims in
     * elements, offsets in bytes. Asynchronous where the device is. */
    dg_status (*gemm)(void *ctx, int m, int n, int k, float alpha, const void *a, size_t a_off,
                      int lda, const void *b, size_t b_off, int ldb, float beta, void *c,
                      size_t c_off, int ldc);
    dg_status (*synchronize)(void *ctx);
    bool (*supports_op)(void *ctx, dg_op op);
} dg_backend_iface;

/* Registration functions of the backends compiled into the library. */
const dg_backend_iface *dg_backend_cpu_iface(void);
#ifdef DG_HAVE_OPENCL
const dg_backend_iface *dg_backend_opencl_iface(void);
#endif
/* The plug-in's exported symbol (src/backend/cuda). */
typedef const dg_backend_iface *(*dg_backend_iface_fn)(void);
#define DG_PLUGIN_SYMBOL "dg_backend_plugin_iface"

/* ---- registry (registry.c) ---- */

typedef struct dg_backend_entry {
    const char *name;
    bool built;                   /* compiled in, or plug-in file present */
    const dg_backend_iface *iface; /* NULL when not loadable */
    char reason[256];             /* why iface is NULL */
} dg_backend_entry;

/* Names of every backend devgate knows, in gate order. */
extern const char *const dg_backend_names[];
extern const size_t dg_backend_names_count;

/* Looks a backend up by name, loading the plug-in when needed.
 * DG_ERR_NOT_FOUND for a name devgate does not know. */
dg_status dg_backend_lookup(dg_ctx *ctx, const char *name, dg_backend_entry *out);

/* Reference GEMM in double accumulation, no fast-math (cpu/reference.c). */
void dg_gemm_reference(int m, int n, int k, const float *a, const float *b, double *c);

#endif
