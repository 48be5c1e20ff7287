/* FP32 peak estimates (docs/measure.md, "Fair baselines"): what each side of
 * a comparison could do, so a GEMM rate or a training step can be read as a
 * fraction of it. CPU: cores x lanes x 2 (an FMA is two flops) x FMA units x
 * clock; devices: a table of known parts, or the host CPU for an OpenCL CPU
 * device. */
#include "env/peak.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static dg_cpu_peak cpu_peak;
static pthread_once_t peak_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
/* Seconds for iters x 8 dependent register adds (one cycle each). */
static double time_adds(long iters)
{
    unsigned long x = 0;
    long n = iters;
    double t0 = dg_now();
    __asm__ volatile("1:\n\t"
                     "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                     "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                     "dec %1\n\t"
                     "jnz 1b\n\t"
                     : "+r"(x), "+r"(n)
                     :
                     : "cc");
    return dg_now() - t0;
}

/* Best of several 8M-cycle runs, so a preemption in one does not count. */
static double measured_ghz(void)
{
    const long iters = 1000000;
    double best = INFINITY;
    (void)time_adds(iters); /* wake the core up from a low clock */
    for (int i = 0; i < 9; i++) {
        double t = time_adds(iters);
        if (t > 0 && t < best)
            best = t;
    }
    return isfinite(best) ? 8.0 * (double)iters / best / 1e9 : NAN;
}
#else
static double measured_ghz(void)
{
    return NAN;
}
#endif

/* cpuinfo_max_freq of cpu0 when there is cpufreq, else the largest "cpu MHz". */
static double reported_ghz(void)
{
    char *t = dg_read_file("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", 64, NULL);
    double v = t ? strtod(t, NULL) / 1e6 : NAN;
    dg_free(t);
    if (v > 0)
        return v;
    t = dg_read_file("/proc/cpuinfo", 1 << 20, NULL);
    double best = NAN;
    for (char *p = t; p && (p = strstr(p, "cpu MHz"));) {
        char *colon = strchr(p, ':');
        if (!colon)
            break;
        double mhz = strtod(colon + 1, NULL);
        if (mhz > 0 && !(mhz / 1e3 <= best))
            best = mhz / 1e3;
        p = colon + 1;
    }
    dg_free(t);
    return best;
}

/* Logical CPUs in the affinity mask and physical cores among them (SMT siblings
 * counted once, by their thread_siblings_list). */
static void count_cores(int *logical, int *cores)
{
    cpu_set_t set;
    *logical = *cores = 0;
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        *logical = *cores = n > 0 ? (int)n : 0;
        return;
    }
    char seen[64][32];
    int nseen = 0;
    bool topo = true;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &set))
            continue;
        (*logical)++;
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list",
                 c);
        char *s = dg_read_file(path, 64, NULL);
        if (!s) {
            topo = false;
            continue;
        }
        s[strcspn(s, "\n")] = '\0';
        bool dup = false;
        for (int i = 0; i < nseen && !dup; i++)
            dup = strcmp(seen[i], s) == 0;
        if (!dup && nseen < 64)
            snprintf(seen[nseen++], sizeof seen[0], "%s", s);
        dg_free(s);
    }
    *cores = topo && nseen > 0 && *logical <= 64 ? nseen : *logical;
}

static void compute_peak(void)
{
    dg_cpu_peak *p = &cpu_peak;
    memset(p, 0, sizeof *p);
    p->isa = "unknown";
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    p->amd = __builtin_cpu_is("amd");
    p->fma = __builtin_cpu_supports("fma");
    if (__builtin_cpu_supports("avx512f")) {
        p->vector_bits = 512;
        p->isa = "avx512f";
    } else if (__builtin_cpu_supports("avx2") && p->fma) {
        p->vector_bits = 256;
        p->isa = "avx2+fma";
    } else if (__builtin_cpu_supports("avx")) {
        p->vector_bits = 256;
        p->isa = "avx";
    } else if (__builtin_cpu_supports("sse2")) {
        p->vector_bits = 128;
        p->isa = "sse";
    }
    /* Two FMA pipes per core on every AVX2 and most AVX-512 x86 cores (some
     * Xeon Silver/Bronze have one 512-bit unit); without FMA, one add and one
     * multiply pipe, the same two flops per lane per cycle. */
    p->fma_units = p->fma ? 2 : 1;
#elif defined(__aarch64__)
    p->vector_bits = 128;
    p->fma = true;
    p->fma_units = 2;
    p->isa = "neon";
#endif
    p->flops_per_cycle = p->vector_bits ? (double)(p->vector_bits / 32) * 2.0 * p->fma_units : NAN;
    p->ghz_measured = measured_ghz();
    p->ghz_reported = reported_ghz();
    /* The clock the core can reach: a measurement under load reads low, a
     * VM's "cpu MHz" is often the base clock; the larger of the two. */
    p->ghz = isfinite(p->ghz_measured) && isfinite(p->ghz_reported)
                 ? fmax(p->ghz_measured, p->ghz_reported)
             : isfinite(p->ghz_measured) ? p->ghz_measured
                                         : p->ghz_reported;
    count_cores(&p->logical, &p->cores);
    p->per_core_gflops = p->flops_per_cycle * p->ghz;
    p->gflops = p->cores > 0 ? p->per_core_gflops * p->cores : NAN;
}

const dg_cpu_peak *dg_cpu_peak_get(void)
{
    pthread_once(&peak_once, compute_peak);
    return &cpu_peak;
}

cJSON *dg_cpu_peak_json(const dg_cpu_peak *p)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "isa", p->isa ? p->isa : "unknown");
    cJSON_AddItemToObject(o, "vector_bits",
                          dg_json_metric(p->vector_bits, p->vector_bits > 0, "bits"));
    cJSON_AddBoolToObject(o, "fma", p->fma);
    cJSON_AddNumberToObject(o, "fma_units", p->fma_units);
    cJSON_AddItemToObject(
        o, "flops_per_cycle",
        dg_json_metric(p->flops_per_cycle, isfinite(p->flops_per_cycle), "FLOP/cycle"));
    cJSON_AddItemToObject(o, "clock", dg_json_metric(p->ghz, isfinite(p->ghz), "GHz"));
    cJSON_AddItemToObject(o, "clock_measured",
                          dg_json_metric(p->ghz_measured, isfinite(p->ghz_measured), "GHz"));
    cJSON_AddItemToObject(o, "clock_reported",
                          dg_json_metric(p->ghz_reported, isfinite(p->ghz_reported), "GHz"));
    cJSON_AddNumberToObject(o, "cores", p->cores);
    cJSON_AddNumberToObject(o, "logical_cpus", p->logical);
    cJSON_AddItemToObject(
        o, "per_core", dg_json_metric(p->per_core_gflops, isfinite(p->per_core_gflops), "GFLOP/s"));
    cJSON_AddItemToObject(o, "fp32", dg_json_metric(p->gflops, isfinite(p->gflops), "GFLOP/s"));
    cJSON_AddStringToObject(o, "source", "cores x vector lanes x 2 (FMA) x FMA units x clock");
    return o;
}

/* FP32 TFLOP/s of known parts (boost clock, no sparsity, no tensor cores);
 * the first name contained in the device name wins, so longer names first. */
static const struct part {
    const char *name;
    double tflops;
} parts[] = {
    {"H200", 67.0},      {"H100 PCIe", 51.2}, {"H100", 67.0},     {"GH200", 67.0},
    {"A100", 19.5},      {"A10G", 31.2},      {"A10", 31.2},      {"L40S", 91.6},
    {"L40", 90.5},       {"L4", 30.3},        {"V100", 15.7},     {"T4", 8.1},
    {"RTX 4090", 82.6},  {"RTX 4080", 48.7},  {"RTX 3090", 35.6}, {"RTX 3080", 29.8},
    {"RTX A6000", 38.7}, {"MI300X", 163.4},   {"MI250X", 47.9},   {"MI210", 22.6},
};

double dg_device_peak_gflops(const char *backend, const char *device_name, double compute_units,
                             int threads, const char **source)
{
    const dg_cpu_peak *cpu = dg_cpu_peak_get();
    *source = "unknown part";
    if (backend && strcmp(backend, "cpu") == 0) {
        int n = threads > 0 && threads < cpu->cores ? threads : cpu->cores;
        *source = "cpu: cores used x vector lanes x 2 (FMA) x FMA units x clock";
        return n > 0 ? cpu->per_core_gflops * n : NAN;
    }
    if (!device_name)
        return NAN;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (strstr(device_name, parts[i].name)) {
            *source = "table of known parts";
            return parts[i].tflops * 1e3;
        }
    /* PoCL's CPU device ("pthread-haswell-AMD EPYC", "cpu-...") is this CPU. */
    if (backend && strcmp(backend, "opencl") == 0 &&
        (strncmp(device_name, "pthread-", 8) == 0 || strncmp(device_name, "cpu-", 4) == 0)) {
        double units = compute_units > 0 ? compute_units : cpu->logical;
        double cores = cpu->logical > 0 ? units * cpu->cores / cpu->logical : units;
        *source = "the host cpu (an OpenCL CPU device): its cores x per-core peak";
        return cores > 0 ? cpu->per_core_gflops * cores : NAN;
    }
    return NAN;
}
