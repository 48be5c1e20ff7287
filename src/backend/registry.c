/* The backend registry: one table, one row per backend, lookup by
 * name. The CUDA backend is a plug-in found beside the executable (or in
 * $DEVGATE_PLUGIN_DIR) and loaded once; "built" means compiled in or plug-in
 * present, and the reason says why a built backend still cannot be used.
 *
 * The table below is the one list: the names, the gate order and the lookup
 * all come from it. dg_backend_find is the production lookup;
 * dg_backend_lookup adds the test fault wrapper (fault.c). */
#include "backend/backend.h"
#include "core/core.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <unistd.h>

const char *const dg_op_names[DG_OP__COUNT] = {
    [DG_OP_GEMM] = "gemm",           [DG_OP_FILL] = "fill",         [DG_OP_BIAS_ADD] = "bias_add",
    [DG_OP_BIAS_GRAD] = "bias_grad", [DG_OP_RELU] = "relu",         [DG_OP_MAXPOOL] = "maxpool",
    [DG_OP_CONV2D] = "conv2d",       [DG_OP_XENT] = "softmax_xent", [DG_OP_SGD] = "sgd",
};

const char *const dg_call_names[DG_CALL__COUNT] = {
    [DG_CALL_GEMM] = "gemm",
    [DG_CALL_FILL] = "fill",
    [DG_CALL_BIAS_ADD] = "bias_add",
    [DG_CALL_BIAS_GRAD] = "bias_grad",
    [DG_CALL_RELU_FWD] = "relu_fwd",
    [DG_CALL_RELU_BWD] = "relu_bwd",
    [DG_CALL_MAXPOOL_FWD] = "maxpool_fwd",
    [DG_CALL_MAXPOOL_BWD] = "maxpool_bwd",
    [DG_CALL_CONV2D_FWD] = "conv2d_fwd",
    [DG_CALL_CONV2D_BWD] = "conv2d_bwd",
    [DG_CALL_XENT] = "softmax_xent",
    [DG_CALL_SGD] = "sgd",
};

const dg_op dg_call_op[DG_CALL__COUNT] = {
    [DG_CALL_GEMM] = DG_OP_GEMM,           [DG_CALL_FILL] = DG_OP_FILL,
    [DG_CALL_BIAS_ADD] = DG_OP_BIAS_ADD,   [DG_CALL_BIAS_GRAD] = DG_OP_BIAS_GRAD,
    [DG_CALL_RELU_FWD] = DG_OP_RELU,       [DG_CALL_RELU_BWD] = DG_OP_RELU,
    [DG_CALL_MAXPOOL_FWD] = DG_OP_MAXPOOL, [DG_CALL_MAXPOOL_BWD] = DG_OP_MAXPOOL,
    [DG_CALL_CONV2D_FWD] = DG_OP_CONV2D,   [DG_CALL_CONV2D_BWD] = DG_OP_CONV2D,
    [DG_CALL_XENT] = DG_OP_XENT,           [DG_CALL_SGD] = DG_OP_SGD,
};

#ifdef DG_HAVE_CUDA_PLUGIN
#define PLUGIN_FILE "libdevgate-cuda.so"

static struct {
    once_flag once;
    const dg_backend_iface *iface;
    bool present;
    char reason[256];
} cuda_plugin = {.once = ONCE_FLAG_INIT};

/* Directory of the running executable, "" when it cannot be told. */
static void exe_dir(char *buf, size_t len)
{
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    buf[0] = '\0';
    if (n <= 0)
        return;
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    if (slash) {
        *slash = '\0';
        snprintf(buf, len, "%s", path);
    }
}

static void load_cuda_plugin(void)
{
    char dirs[3][PATH_MAX];
    int ndirs = 0;
    const char *env = getenv("DEVGATE_PLUGIN_DIR");
    if (env && *env)
        snprintf(dirs[ndirs++], PATH_MAX, "%s", env);
    char self[PATH_MAX - 32];
    exe_dir(self, sizeof self);
    if (self[0]) {
        snprintf(dirs[ndirs++], PATH_MAX, "%s", self);
        snprintf(dirs[ndirs++], PATH_MAX, "%s/../lib/devgate", self);
    }
    char path[PATH_MAX + 32] = "";
    for (int i = 0; i < ndirs; i++) {
        snprintf(path, sizeof path, "%s/%s", dirs[i], PLUGIN_FILE);
        if (access(path, R_OK) == 0)
            break;
        path[0] = '\0';
    }
    if (!path[0]) {
        snprintf(cuda_plugin.reason, sizeof cuda_plugin.reason,
                 "plug-in %s not found beside devgate or in DEVGATE_PLUGIN_DIR", PLUGIN_FILE);
        return;
    }
    cuda_plugin.present = true;
    /* Never closed: CUDA runtimes do not survive being unloaded. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(cuda_plugin.reason, sizeof cuda_plugin.reason,
                 "plug-in present but cannot be loaded: %s", e ? e : "unknown dlopen error");
        return;
    }
    dg_backend_iface_fn fn;
    *(void **)&fn = dlsym(h, DG_PLUGIN_SYMBOL);
    const dg_backend_iface *iface = fn ? fn() : NULL;
    if (!iface) {
        snprintf(cuda_plugin.reason, sizeof cuda_plugin.reason, "plug-in %s lacks %s", path,
                 DG_PLUGIN_SYMBOL);
        return;
    }
    if (iface->version != DG_BACKEND_IFACE_VERSION) {
        snprintf(cuda_plugin.reason, sizeof cuda_plugin.reason,
                 "plug-in interface version %u, devgate needs %u: rebuild the plug-in",
                 iface->version, DG_BACKEND_IFACE_VERSION);
        return;
    }
    cuda_plugin.iface = iface;
}

#endif

/* ---- the table ---------------------------------------------------------- */

static void resolve_cpu(dg_backend_entry *out)
{
    out->built = true;
    out->iface = dg_backend_cpu_iface();
}

static void resolve_opencl(dg_backend_entry *out)
{
#ifdef DG_HAVE_OPENCL
    out->built = true;
    out->iface = dg_backend_opencl_iface();
#else
    snprintf(out->reason, sizeof out->reason, "not compiled in (no OpenCL loader at build time)");
#endif
}

static void resolve_cuda(dg_backend_entry *out)
{
#ifdef DG_HAVE_CUDA_PLUGIN
    call_once(&cuda_plugin.once, load_cuda_plugin);
    out->built = cuda_plugin.present;
    out->iface = cuda_plugin.iface;
    snprintf(out->reason, sizeof out->reason, "%s", cuda_plugin.reason);
#else
    snprintf(out->reason, sizeof out->reason, "not compiled in (nvcc not found at build time)");
#endif
}

/* One row per backend, in gate order: name, how its interface is found. */
#define DG_BACKEND_TABLE(X)                                                                        \
    X("cpu", resolve_cpu)                                                                          \
    X("opencl", resolve_opencl)                                                                    \
    X("cuda", resolve_cuda)

#define ROW_NAME(name, resolve) name,
#define ROW_RESOLVE(name, resolve) resolve,
#define ROW_KNOWN(name, resolve) ", " name

const char *const dg_backend_names[] = {DG_BACKEND_TABLE(ROW_NAME)};
const size_t dg_backend_names_count = sizeof dg_backend_names / sizeof dg_backend_names[0];
static void (*const resolvers[])(dg_backend_entry *) = {DG_BACKEND_TABLE(ROW_RESOLVE)};
/* ", cpu, opencl, cuda" without its first separator. */
static const char known_names[] = "" DG_BACKEND_TABLE(ROW_KNOWN);

int dg_backend_index(const char *name)
{
    for (size_t i = 0; name && i < dg_backend_names_count; i++)
        if (strcmp(name, dg_backend_names[i]) == 0)
            return (int)i;
    return -1;
}

const char *dg_backend_known(void)
{
    return known_names + 2;
}

dg_status dg_backend_find(dg_ctx *ctx, const char *name, dg_backend_entry *out)
{
    memset(out, 0, sizeof *out);
    int i = dg_backend_index(name);
    if (i < 0)
        return dg_fail(ctx, DG_ERR_NOT_FOUND, "unknown backend '%s' (known: %s)", name ? name : "",
                       dg_backend_known());
    out->name = dg_backend_names[i];
    resolvers[i](out);
    return DG_OK;
}

dg_status dg_backend_lookup(dg_ctx *ctx, const char *name, dg_backend_entry *out)
{
    dg_status st = dg_backend_find(ctx, name, out);
    if (st == DG_OK)
        out->iface = dg_backend_fault_wrap(out->name, out->iface);
    return st;
}

bool dg_backend_is_host(const char *name)
{
    dg_backend_entry ent;
    return dg_backend_find(NULL, name, &ent) == DG_OK && ent.iface && ent.iface->caps.host;
}
