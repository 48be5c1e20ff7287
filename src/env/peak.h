/* FP32 peak estimates of the CPU and of devices, and the BLAS identity
 * (docs/measure.md, "Fair baselines"). */
#ifndef DG_ENV_PEAK_H
#define DG_ENV_PEAK_H

#include "core/core.h"
#include "core/json.h"

/* The CPUs this process may use (cpu_topo.c). */
typedef struct dg_cpu_topo {
    int online;               /* logical CPUs online; 0 unknown */
    int affinity;             /* logical CPUs in this process's affinity mask */
    int cores;                /* physical cores among them (SMT siblings counted once) */
    int smt;                  /* the most CPUs of the mask on one core (1: no SMT in use) */
    const char *cores_source; /* "core_cpus_list", "thread_siblings_list", "cpuinfo core id",
                                 "none: every logical CPU counted as a core" */
    double quota_cpus;        /* cgroup CPU quota in CPUs (the tightest on the path); NAN none */
    char quota_file[160];     /* the cpu.max (v1: cpu.cfs_quota_us) it came from; "" none */
    double usable;            /* cores' worth this process can use: min(cores, quota); NAN */
    int threads;              /* advised compute threads: usable rounded down, at least 1 */
} dg_cpu_topo;

/* Reads the CPUs this process may use from the files below root (NULL or ""
 * for the running system, where the affinity mask comes from
 * sched_getaffinity; a fixture directory otherwise, from its
 * proc/self/status Cpus_allowed_list): the mask, the physical cores in it
 * from sys/devices/system/cpu/cpuN/topology (core_cpus_list, else
 * thread_siblings_list, else proc/cpuinfo's physical id and core id), and the
 * cgroup quota (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us) of
 * proc/self/cgroup's path and its ancestors. Never fails: unknowns are 0/NAN. */
void dg_cpu_topo_read(const char *root, dg_cpu_topo *t);
/* dg_cpu_topo_read of the running system, computed once per process. */
const dg_cpu_topo *dg_cpu_topo_get(void);
/* {online: METRIC(cpus), affinity: METRIC(cpus), cores: METRIC(cores), smt:
 *  METRIC(threads/core), cores_source, quota: METRIC(cpus), quota_file, usable:
 *  METRIC(cores), threads: METRIC(threads)} */
cJSON *dg_cpu_topo_json(const dg_cpu_topo *t);
/* The cpu backend's thread count for a requested one: requested when > 0,
 * else OMP_NUM_THREADS when set to a positive number, else the usable cores
 * (dg_cpu_topo_get()->threads); *source (may be NULL) names which. */
int dg_cpu_threads_resolve(int requested, const char **source);

typedef struct dg_cpu_peak {
    int vector_bits;   /* widest FP32 vectors the CPU and OS support: 128, 256, 512; 0 unknown */
    bool fma, amd;     /* fused multiply-add; AMD (for the OpenBLAS core name) */
    int fma_units;     /* vector FMA pipes per core (the microarchitecture table, else 2 on x86
                          with FMA, 1 without) */
    int pipe_bits;     /* width of each pipe in bits (a 512-bit op on 256-bit pipes takes two) */
    const char *uarch; /* the table's name for this core, NULL when not in it */
    const char *fma_units_source; /* "table: <uarch>" or "assumed: ..." */
    double flops_per_cycle;       /* per core: units x min(pipe, vector) / 32 lanes x 2 (FMA) */
    double ghz, ghz_measured,
        ghz_reported;            /* the clock used: the larger of measured and reported; NAN */
    const char *clock_source;    /* which one that was */
    double fma_measured;         /* GFLOP/s of one core running independent FMAs; NAN unknown */
    double fma_all_measured;     /* GFLOP/s of fma_all_threads threads at once; NAN not run */
    int fma_all_threads;         /* the usable cores rounded down (0: not run) */
    int cores, logical;          /* physical cores and logical CPUs this process may use */
    double usable_cores;         /* cores' worth the peak counts: min(cores, cgroup quota) */
    double per_core_gflops;      /* the per-core figure used; NAN when unknown */
    const char *per_core_source; /* which measurement, or "flops_per_cycle x clock" */
    double gflops;               /* usable_cores x per core */
    const char *isa;             /* "avx512f", "avx2+fma", "avx", "sse", "neon", "unknown" */
    dg_cpu_topo topo;            /* what the cores came from */
} dg_cpu_peak;

/* Estimates the CPU's FP32 peak: vector width and FMA from CPUID (GCC's
 * __builtin_cpu_supports, which checks the OS saves the registers), FMA pipes
 * from a table of microarchitectures (CPUID family/model, arm's MIDR), the
 * clock measured with a dependent chain of register adds (best of several
 * short runs) or the reported one, one core's measured FMA throughput (the
 * figure used when it could be measured), and the usable cores of
 * dg_cpu_topo_get. Computed once per process. */
const dg_cpu_peak *dg_cpu_peak_get(void);
/* The per-core FP32 figure of the peak: `all` / n (GFLOP/s of n cores' FMA
 * kernels at once) when it is below 0.95 x `one` (one core's), else `one`,
 * else `table` (flops_per_cycle x clock) when neither was measured (NAN);
 * *source names which. */
double dg_cpu_per_core_choose(double one, double all, int n, double table, const char **source);
/* This process's per-core figures (dg_cpu_peak_get) over the cores of t:
 * *out gets cores, logical, usable_cores and gflops from t (tests hand in
 * fake topologies). */
void dg_cpu_peak_with_topo(const dg_cpu_topo *t, dg_cpu_peak *out);
/* {isa, vector_bits, fma, fma_units, pipe_bits, uarch, fma_units_source,
 *  flops_per_cycle: METRIC(FLOP/cycle), clock: METRIC(GHz), clock_measured,
 *  clock_reported, clock_source, fma_measured: METRIC(GFLOP/s),
 *  fma_measured_all: METRIC(GFLOP/s), fma_measured_all_threads, cores,
 *  logical_cpus, usable_cores: METRIC(cores), threads_advised, topology,
 *  per_core: METRIC(GFLOP/s), per_core_source, fp32: METRIC(GFLOP/s), source}
 *  (docs/schema/gate.md CPU_PEAK) */
cJSON *dg_cpu_peak_json(const dg_cpu_peak *p);

/* FP32 peak of a backend's device in GFLOP/s for `threads` host threads (cpu:
 * min(threads, usable cores) x per core; threads <= 0: all usable cores), from the table of
 * known parts (NVIDIA H200 67 TFLOP/s, ...) or, for an OpenCL device that is
 * the host CPU (PoCL), the CPU's peak over compute_units. *source names where
 * it came from. NAN when unknown. */
double dg_device_peak_gflops(const char *backend, const char *device_name, double compute_units,
                             int threads, const char **source);

/* The rated memory bandwidth (GB/s) of a known part by its device name
 * (NVIDIA H200 4800, ...); NAN when unknown. *source says where it came from. */
double dg_device_mem_gbps(const char *device_name, const char **source);

/* The BLAS loaded in this process: {library: "OpenBLAS" | "BLIS" | "MKL" | null,
 * version, config, kernel, kernel_vector_bits: METRIC(bits), threads:
 * METRIC(threads), threading (OpenBLAS), openblas_coretype_env, generic_kernel: bool (narrower
 * vectors than cpu has), fix: str | null}. NULL only when out of memory. */
cJSON *dg_env_blas(const dg_cpu_peak *cpu);
#endif
