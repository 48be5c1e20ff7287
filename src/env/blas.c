/* The BLAS actually loaded in this process, and whether its kernel fits the
 * CPU (docs/measure.md, "Fair baselines"). Each library is found through
 * dlsym on the process's own symbol table, so the answer is the library the
 * dynamic loader picked (a Debian alternatives switch included), not the one
 * the build was configured against: OpenBLAS (openblas_get_config,
 * openblas_get_corename, openblas_get_num_threads), BLIS (bli_info_get_version_str,
 * bli_arch_query_id, bli_arch_string) and MKL (mkl_get_version_string,
 * mkl_get_max_threads). */
#include "env/peak.h"

#include <ctype.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Vector bits of an OpenBLAS core name (what its kernels use); 0 when unknown. */
static int openblas_core_bits(const char *core)
{
    static const struct {
        const char *name;
        int bits;
    } cores[] = {
        {"Katmai", 128},         {"Coppermine", 128}, {"Northwood", 128},   {"Prescott", 128},
        {"Banias", 128},         {"Atom", 128},       {"Core2", 128},       {"Penryn", 128},
        {"Dunnington", 128},     {"Nehalem", 128},    {"Opteron", 128},     {"Opteron_SSE3", 128},
        {"Barcelona", 128},      {"Nano", 128},       {"Bobcat", 128},      {"Sandybridge", 256},
        {"Bulldozer", 256},      {"Piledriver", 256}, {"Steamroller", 256}, {"Excavator", 256},
        {"Haswell", 256},        {"Zen", 256},        {"SkylakeX", 512},    {"Cooperlake", 512},
        {"SapphireRapids", 512},
    };
    for (size_t i = 0; core && i < sizeof cores / sizeof cores[0]; i++)
        if (strcasecmp(core, cores[i].name) == 0)
            return cores[i].bits;
    return 0;
}

/* The OpenBLAS core name that fits this CPU (for OPENBLAS_CORETYPE). */
static const char *openblas_right_core(const dg_cpu_peak *p)
{
    if (p->vector_bits >= 512)
        return p->amd ? "Zen (0.3.21 has no AVX-512 Zen target; SkylakeX works on Zen 4)"
                      : "SkylakeX";
    if (p->vector_bits >= 256 && p->fma)
        return p->amd ? "Zen" : "Haswell";
    if (p->vector_bits >= 256)
        return "Sandybridge";
    return NULL;
}

/* major.minor.patch of "OpenBLAS 0.3.21 ..." (0 when unreadable). */
static long version_code(const char *s)
{
    const char *p = s;
    while (p && *p && !isdigit((unsigned char)*p))
        p++;
    if (!p || !*p)
        return 0;
    char *end;
    long a = strtol(p, &end, 10), b = 0, c = 0;
    if (*end == '.')
        b = strtol(end + 1, &end, 10);
    if (*end == '.')
        c = strtol(end + 1, &end, 10);
    return a * 10000 + b * 100 + c;
}

cJSON *dg_env_blas(const dg_cpu_peak *cpu)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    typedef char *(*str_fn)(void);
    typedef int (*int_fn)(void);
    str_fn ob_config = (str_fn)dlsym(RTLD_DEFAULT, "openblas_get_config");
    str_fn ob_core = (str_fn)dlsym(RTLD_DEFAULT, "openblas_get_corename");
    int_fn ob_threads = (int_fn)dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
    int_fn ob_parallel = (int_fn)dlsym(RTLD_DEFAULT, "openblas_get_parallel");
    typedef const char *(*cstr_fn)(void);
    cstr_fn bli_version = (cstr_fn)dlsym(RTLD_DEFAULT, "bli_info_get_version_str");
    typedef int (*arch_id_fn)(void);
    typedef const char *(*arch_str_fn)(int);
    arch_id_fn bli_arch = (arch_id_fn)dlsym(RTLD_DEFAULT, "bli_arch_query_id");
    arch_str_fn bli_arch_str = (arch_str_fn)dlsym(RTLD_DEFAULT, "bli_arch_string");
    typedef void (*mkl_ver_fn)(char *, int);
    mkl_ver_fn mkl_version = (mkl_ver_fn)dlsym(RTLD_DEFAULT, "mkl_get_version_string");
    int_fn mkl_threads = (int_fn)dlsym(RTLD_DEFAULT, "mkl_get_max_threads");
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    dg_json_add_str(o, "openblas_coretype_env", coretype && *coretype ? coretype : NULL);

    const char *kernel = NULL;
    int kbits = 0;
    char fix[400] = "";
    if (ob_config) {
        const char *cfg = ob_config();
        kernel = ob_core ? ob_core() : NULL;
        kbits = openblas_core_bits(kernel);
        cJSON_AddStringToObject(o, "library", "OpenBLAS");
        dg_json_add_str(o, "config", cfg);
        char ver[32] = "";
        long vc = version_code(cfg);
        if (vc)
            snprintf(ver, sizeof ver, "%ld.%ld.%ld", vc / 10000, vc / 100 % 100, vc % 100);
        dg_json_add_str(o, "version", ver[0] ? ver : NULL);
        int th = ob_threads ? ob_threads() : -1;
        cJSON_AddItemToObject(o, "threads", dg_json_metric(th, th > 0, "threads"));
        /* The server threads alive now (a pthreads build starts one per core
         * at load; the cpu backend shuts them down): threads that spin
         * beside the OpenMP team when they are there. */
        const int *avail = (const int *)dlsym(RTLD_DEFAULT, "blas_server_avail");
        const int *nthreads = (const int *)dlsym(RTLD_DEFAULT, "blas_num_threads");
        int server = avail && nthreads ? (*avail ? *nthreads - 1 : 0) : -1;
        cJSON_AddItemToObject(o, "server_threads", dg_json_metric(server, server >= 0, "threads"));
        /* The build's threading model: devgate's cpu backend keeps OpenBLAS
         * at one thread and spreads a product over OpenMP threads itself
         * (the gate's matmul.threads), so `threads` is 1 there. */
        int par = ob_parallel ? ob_parallel() : -1;
        dg_json_add_str(o, "threading",
                        par == 0   ? "sequential"
                        : par == 1 ? "pthreads"
                        : par == 2 ? "openmp"
                                   : NULL);
        const char *right = openblas_right_core(cpu);
        if (coretype && *coretype)
            snprintf(fix, sizeof fix, "OPENBLAS_CORETYPE=%s forces this kernel: unset it%s%s",
                     coretype, right ? " or set OPENBLAS_CORETYPE=" : "", right ? right : "");
        else if (right && vc && vc < 32500)
            snprintf(fix, sizeof fix,
                     "OpenBLAS %s does not know this CPU model and falls back to a generic "
                     "kernel (fixed in 0.3.25): set OPENBLAS_CORETYPE=%s or upgrade OpenBLAS",
                     ver, right);
        else if (right)
            snprintf(fix, sizeof fix, "set OPENBLAS_CORETYPE=%s", right);
    } else if (bli_version) {
        cJSON_AddStringToObject(o, "library", "BLIS");
        dg_json_add_str(o, "version", bli_version());
        kernel = bli_arch && bli_arch_str ? bli_arch_str(bli_arch()) : NULL;
        cJSON_AddItemToObject(o, "threads", dg_json_metric(0, false, "threads"));
        if (kernel && (strcmp(kernel, "generic") == 0 || strcmp(kernel, "penryn") == 0))
            kbits = 128;
        snprintf(fix, sizeof fix,
                 "set BLIS_ARCH_TYPE to this CPU's configuration or use a BLIS "
                 "built with it");
    } else if (mkl_version) {
        char v[256] = "";
        mkl_version(v, (int)sizeof v);
        cJSON_AddStringToObject(o, "library", "MKL");
        dg_json_add_str(o, "version", v);
        int th = mkl_threads ? mkl_threads() : -1;
        cJSON_AddItemToObject(o, "threads", dg_json_metric(th, th > 0, "threads"));
        snprintf(fix, sizeof fix,
                 "on AMD CPUs, older MKL takes a generic code path: use "
                 "OpenBLAS or BLIS, or a recent MKL");
    } else {
        cJSON_AddNullToObject(o, "library");
        cJSON_AddItemToObject(o, "threads", dg_json_metric(0, false, "threads"));
    }
    dg_json_add_str(o, "kernel", kernel);
    cJSON_AddItemToObject(o, "kernel_vector_bits", dg_json_metric(kbits, kbits > 0, "bits"));
    /* The kernel is generic when it uses narrower vectors than the CPU has. */
    bool generic = kbits > 0 && cpu && cpu->vector_bits > 0 && kbits < cpu->vector_bits &&
                   (cpu->vector_bits < 512 || kbits < 256);
    cJSON_AddBoolToObject(o, "generic_kernel", generic);
    dg_json_add_str(o, "fix", generic && fix[0] ? fix : NULL);
    return o;
}
