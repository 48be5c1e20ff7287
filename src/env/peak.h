/* FP32 peak estimates of the CPU and of devices, and the BLAS identity
 * (docs/measure.md, "Fair baselines"). */
#ifndef DG_ENV_PEAK_H
#define DG_ENV_PEAK_H

#include "core/core.h"
#include "core/json.h"

typedef struct dg_cpu_peak {
    int vector_bits; /* widest FP32 vectors the CPU and OS support: 128, 256, 512; 0 unknown */
    bool fma, amd;   /* fused multiply-add; AMD (for the OpenBLAS core name) */
    int fma_units;   /* vector FMA pipes per core (assumed 2 on x86 with FMA/AVX-512) */
    double flops_per_cycle; /* per core: lanes x 2 (FMA) x units */
    double ghz, ghz_measured,
        ghz_reported;       /* the clock used: measured, else reported; NAN unknown */
    int cores, logical;     /* physical cores and logical CPUs this process may use */
    double per_core_gflops; /* NAN when unknown */
    double gflops;          /* all cores */
    const char *isa;        /* "avx512f", "avx2+fma", "avx", "sse", "neon", "unknown" */
} dg_cpu_peak;

/* Estimates the CPU's FP32 peak: vector width and FMA from CPUID (GCC's
 * __builtin_cpu_supports, which checks the OS saves the registers), the clock
 * measured with a dependent chain of adds (best of several short runs),
 * else /proc/cpuinfo's "cpu MHz", and the cores in this process's affinity
 * mask (SMT siblings counted once). Computed once per process. */
const dg_cpu_peak *dg_cpu_peak_get(void);
/* {isa, vector_bits, fma, fma_units, flops_per_cycle, clock: METRIC(GHz),
 *  clock_measured, clock_reported, cores, logical_cpus, per_core: METRIC(GFLOP/s),
 *  fp32: METRIC(GFLOP/s), source} */
cJSON *dg_cpu_peak_json(const dg_cpu_peak *p);

/* FP32 peak of a backend's device in GFLOP/s for `threads` host threads (cpu:
 * min(threads, cores) x per core; threads <= 0: all cores), from the table of
 * known parts (NVIDIA H200 67 TFLOP/s, ...) or, for an OpenCL device that is
 * the host CPU (PoCL), the CPU's peak over compute_units. *source names where
 * it came from. NAN when unknown. */
double dg_device_peak_gflops(const char *backend, const char *device_name, double compute_units,
                             int threads, const char **source);

/* The BLAS loaded in this process: {library: "OpenBLAS" | "BLIS" | "MKL" | null,
 * version, config, kernel, kernel_vector_bits: METRIC(bits), threads:
 * METRIC(threads), openblas_coretype_env, generic_kernel: bool (narrower
 * vectors than cpu has), fix: str | null}. NULL only when out of memory. */
cJSON *dg_env_blas(const dg_cpu_peak *cpu);
#endif
