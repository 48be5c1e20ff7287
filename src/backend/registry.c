/* The explicit backend registry: one list, one stanza per backend, lookup by
 * name. The CUDA backend is a plug-in found beside the executable (or in
 * $DEVGATE_PLUGIN_DIR) and loaded once; "built" means compiled in or plug-in
 * present, and the reason says why a built backend still cannot be used.
 *
 * Fault injection for tests: DEVGATE_FAULT=KIND@BACKEND wraps that backend so
 * the gate and the learning tests can be shown to fail. KIND is gemm-corrupt
 * (one element of every product is altered), upload-fail (every upload
 * returns an error), sgd-skip (updates do nothing), sgd-ascend (updates
 * climb the gradient) or relu-leak (relu_fwd lets 1% of negative values
 * through: y = x > 0 ? x : 0.01 x; step capture is then off). */
#include "backend/backend.h"
#include "core/core.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <unistd.h>

const char *const dg_op_names[DG_OP__COUNT] = {
    [DG_OP_GEMM] = "gemm",         [DG_OP_FILL] = "fill",       [DG_OP_BIAS_ADD] = "bias_add",
    [DG_OP_BIAS_GRAD] = "bias_grad", [DG_OP_RELU] = "relu",     [DG_OP_MAXPOOL] = "maxpool",
    [DG_OP_CONV2D] = "conv2d",     [DG_OP_XENT] = "softmax_xent", [DG_OP_SGD] = "sgd",
};

const char *const dg_backend_names[] = {"cpu", "opencl", "cuda"};
const size_t dg_backend_names_count = sizeof dg_backend_names / sizeof dg_backend_names[0];

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
        snprintf(cuda_plugin.reason, sizeof cuda_plugin.reason,
                 "plug-in %s lacks %s", path, DG_PLUGIN_SYMBOL);
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

/* ---- fault injection -------------------------------------------------- */

static dg_backend_iface faulty;
static const dg_backend_iface *faulty_inner;

static dg_status faulty_gemm(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha, dg_ref a, int lda, dg_ref b, int ldb, float beta, dg_ref c, int ldc)
{
    dg_status st = faulty_inner->gemm(ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (st != DG_OK || m == 0 || n == 0)
        return st;
    /* Alter the middle element of the product by a large relative amount. */
    size_t at = c.off + ((size_t)(m / 2) * (size_t)ldc + (size_t)(n / 2)) * sizeof(float);
    float v;
    if ((st = faulty_inner->synchronize(ctx)) != DG_OK ||
        (st = faulty_inner->download(ctx, c.buf, at, &v, sizeof v)) != DG_OK)
        return st;
    v = v * 1.5f + 1.0f;
    return faulty_inner->upload(ctx, c.buf, at, &v, sizeof v);
}

static dg_status faulty_upload(void *ctx, void *buf, size_t off, const void *src, size_t bytes)
{
    return DG_ERR_BACKEND;
}

static dg_status faulty_sgd_skip(void *ctx, dg_ref w, dg_ref g, dg_ref mom, size_t count, float lr,
                                 float momentum, float weight_decay)
{
    return DG_OK;
}

static dg_status faulty_sgd_ascend(void *ctx, dg_ref w, dg_ref g, dg_ref mom, size_t count, float lr,
                                   float momentum, float weight_decay)
{
    return faulty_inner->sgd(ctx, w, g, mom, count, -lr, momentum, weight_decay);
}

/* Leaky relu on the host: the device's values are copied out, altered and
 * copied back, so every backend gets the same fault. */
static dg_status faulty_relu_leak(void *ctx, dg_ref x, dg_ref y, size_t count)
{
    if (count == 0)
        return DG_OK;
    float *h = malloc(count * sizeof *h);
    if (!h)
        return DG_ERR_NOMEM;
    dg_status st = faulty_inner->synchronize(ctx);
    if (st == DG_OK)
        st = faulty_inner->download(ctx, x.buf, x.off, h, count * sizeof *h);
    for (size_t i = 0; st == DG_OK && i < count; i++)
        h[i] = h[i] > 0.0f ? h[i] : 0.01f * h[i];
    if (st == DG_OK)
        st = faulty_inner->upload(ctx, y.buf, y.off, h, count * sizeof *h);
    free(h);
    return st;
}

static const char *faulty_last_error(void *ctx)
{
    return "injected fault: upload refused (DEVGATE_FAULT)";
}

static const dg_backend_iface *maybe_inject(const char *name, const dg_backend_iface *iface)
{
    const char *spec = getenv("DEVGATE_FAULT");
    const char *at = spec ? strchr(spec, '@') : NULL;
    if (!iface || !at || strcmp(at + 1, name) != 0)
        return iface;
    size_t kind_len = (size_t)(at - spec);
    faulty = *iface;
    faulty_inner = iface;
    if (kind_len == 12 && strncmp(spec, "gemm-corrupt", 12) == 0) {
        faulty.gemm = faulty_gemm;
    } else if (kind_len == 11 && strncmp(spec, "upload-fail", 11) == 0) {
        faulty.upload = faulty_upload;
        faulty.last_error = faulty_last_error;
    } else if (kind_len == 8 && strncmp(spec, "sgd-skip", 8) == 0 && iface->sgd) {
        faulty.sgd = faulty_sgd_skip;
    } else if (kind_len == 10 && strncmp(spec, "sgd-ascend", 10) == 0 && iface->sgd) {
        faulty.sgd = faulty_sgd_ascend;
    } else if (kind_len == 9 && strncmp(spec, "relu-leak", 9) == 0 && iface->relu_fwd) {
        faulty.relu_fwd = faulty_relu_leak;
        /* Host copies cannot be recorded into a captured step. */
        faulty.capture_begin = NULL;
        faulty.capture_end = NULL;
        faulty.replay = NULL;
    } else {
        return iface;
    }
    return &faulty;
}

dg_status dg_backend_lookup(dg_ctx *ctx, const char *name, dg_backend_entry *out)
{
    memset(out, 0, sizeof *out);
    if (strcmp(name, "cpu") == 0) {
        out->name = "cpu";
        out->built = true;
        out->iface = dg_backend_cpu_iface();
    } else if (strcmp(name, "opencl") == 0) {
        out->name = "opencl";
#ifdef DG_HAVE_OPENCL
        out->built = true;
        out->iface = dg_backend_opencl_iface();
#else
        snprintf(out->reason, sizeof out->reason, "not compiled in (no OpenCL loader at build time)");
#endif
    } else if (strcmp(name, "cuda") == 0) {
        out->name = "cuda";
#ifdef DG_HAVE_CUDA_PLUGIN
        call_once(&cuda_plugin.once, load_cuda_plugin);
        out->built = cuda_plugin.present;
        out->iface = cuda_plugin.iface;
        snprintf(out->reason, sizeof out->reason, "%s", cuda_plugin.reason);
#else
        snprintf(out->reason, sizeof out->reason, "not compiled in (nvcc not found at build time)");
#endif
    } else {
        return dg_fail(ctx, DG_ERR_NOT_FOUND, "unknown backend '%s' (known: cpu, opencl, cuda)", name);
    }
    out->iface = maybe_inject(out->name, out->iface);
    return DG_OK;
}
