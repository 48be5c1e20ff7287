/* FP32 peak estimates (docs/measure.md, "Fair baselines"): what each side of
 * a comparison could do, so a GEMM rate or a training step can be read as a
 * fraction of it. CPU: usable cores (cpu_topo.c) x one core's measured FMA
 * throughput, else x lanes x 2 (an FMA is two flops) x FMA pipes (a table of
 * microarchitectures) x clock; devices: a table of known parts, or the host
 * CPU for an OpenCL CPU device. */
#include "env/peak.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static dg_cpu_peak cpu_peak;
static pthread_once_t peak_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
/* Seconds for iters x 8 dependent register-register adds (one cycle each).
 * Not `add $1`: recent Intel cores (Golden Cove: Sapphire Rapids, Alder Lake)
 * fold chains of small immediate adds at rename and run them faster than one
 * per cycle; that chain read 6.6 GHz on an H200 host's Sapphire Rapids. A
 * register operand's value is not known at rename, so this chain runs at its
 * latency. */
static double time_adds(long iters)
{
    unsigned long x = 0, one = 1;
    long n = iters;
    double t0 = dg_now();
    __asm__ volatile("1:\n\t"
                     "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
                     "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
                     "dec %1\n\t"
                     "jnz 1b\n\t"
                     : "+r"(x), "+r"(n)
                     : "r"(one)
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
    double ghz = isfinite(best) ? 8.0 * (double)iters / best / 1e9 : NAN;
    return ghz > 0.2 && ghz < 7.0 ? ghz : NAN; /* outside: not a clock */
}

/* Seconds for iters x 12 independent FMAs of `bits` (512: AVX-512F, 256:
 * AVX2+FMA) on one core; 12 chains cover 2 pipes x 4-6 cycles of latency.
 * Assembly, so the figure does not depend on the build's -O level. */
static double time_fma(int bits, long iters)
{
    static const float k[3] = {1.0f, 0.9999f, 1e-3f}; /* start, multiplier, addend */
    long n = iters;
    double t0 = dg_now();
    if (bits == 512)
        __asm__ volatile(
            "vbroadcastss 0(%1), %%zmm0\n\t"
            "vmovaps %%zmm0, %%zmm1\n\tvmovaps %%zmm0, %%zmm2\n\tvmovaps %%zmm0, %%zmm3\n\t"
            "vmovaps %%zmm0, %%zmm4\n\tvmovaps %%zmm0, %%zmm5\n\tvmovaps %%zmm0, %%zmm6\n\t"
            "vmovaps %%zmm0, %%zmm7\n\tvmovaps %%zmm0, %%zmm8\n\tvmovaps %%zmm0, %%zmm9\n\t"
            "vmovaps %%zmm0, %%zmm10\n\tvmovaps %%zmm0, %%zmm11\n\t"
            "vbroadcastss 4(%1), %%zmm12\n\tvbroadcastss 8(%1), %%zmm13\n\t"
            "1:\n\t"
            "vfmadd213ps %%zmm13, %%zmm12, %%zmm0\n\tvfmadd213ps %%zmm13, %%zmm12, %%zmm1\n\t"
            "vfmadd213ps %%zmm13, %%zmm12, %%zmm2\n\tvfmadd213ps %%zmm13, %%zmm12, %%zmm3\n\t"
            "vfmadd213ps %%zmm13, %%zmm12, %%zmm4\n\tvfmadd213ps %%zmm13, %%zmm12, %%zmm5\n\t"
            "vfmadd213ps %%zmm13, %%zmm12, %%zmm6\n\tvfmadd213ps %%zmm13, %%zmm12, %%zmm7\n\t"
            "vfmadd213ps %%zmm13, %%zmm12, %%zmm8\n\tvfmadd213ps %%zmm13, %%zmm12, %%zmm9\n\t"
            "vfmadd213ps %%zmm13, %%zmm12, %%zmm10\n\tvfmadd213ps %%zmm13, %%zmm12, %%zmm11\n\t"
            "dec %0\n\tjnz 1b\n\t"
            "vzeroupper\n\t"
            : "+r"(n)
            : "r"(k)
            : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
              "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13");
    else
        __asm__ volatile(
            "vbroadcastss 0(%1), %%ymm0\n\t"
            "vmovaps %%ymm0, %%ymm1\n\tvmovaps %%ymm0, %%ymm2\n\tvmovaps %%ymm0, %%ymm3\n\t"
            "vmovaps %%ymm0, %%ymm4\n\tvmovaps %%ymm0, %%ymm5\n\tvmovaps %%ymm0, %%ymm6\n\t"
            "vmovaps %%ymm0, %%ymm7\n\tvmovaps %%ymm0, %%ymm8\n\tvmovaps %%ymm0, %%ymm9\n\t"
            "vmovaps %%ymm0, %%ymm10\n\tvmovaps %%ymm0, %%ymm11\n\t"
            "vbroadcastss 4(%1), %%ymm12\n\tvbroadcastss 8(%1), %%ymm13\n\t"
            "1:\n\t"
            "vfmadd213ps %%ymm13, %%ymm12, %%ymm0\n\tvfmadd213ps %%ymm13, %%ymm12, %%ymm1\n\t"
            "vfmadd213ps %%ymm13, %%ymm12, %%ymm2\n\tvfmadd213ps %%ymm13, %%ymm12, %%ymm3\n\t"
            "vfmadd213ps %%ymm13, %%ymm12, %%ymm4\n\tvfmadd213ps %%ymm13, %%ymm12, %%ymm5\n\t"
            "vfmadd213ps %%ymm13, %%ymm12, %%ymm6\n\tvfmadd213ps %%ymm13, %%ymm12, %%ymm7\n\t"
            "vfmadd213ps %%ymm13, %%ymm12, %%ymm8\n\tvfmadd213ps %%ymm13, %%ymm12, %%ymm9\n\t"
            "vfmadd213ps %%ymm13, %%ymm12, %%ymm10\n\tvfmadd213ps %%ymm13, %%ymm12, %%ymm11\n\t"
            "dec %0\n\tjnz 1b\n\t"
            "vzeroupper\n\t"
            : "+r"(n)
            : "r"(k)
            : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
              "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13");
    return dg_now() - t0;
}
enum { FMA_CHAINS = 12 };
#elif defined(__aarch64__)
static double measured_ghz(void)
{
    return NAN;
}

/* Seconds for iters x 24 independent 128-bit FMAs on one core (24 chains
 * cover 4 pipes x 4 cycles of latency: Neoverse V1/V2, Apple). */
static double time_fma(int bits, long iters)
{
    (void)bits;
    static const float k[3] = {1.0f, 0.9999f, 1e-3f};
    long n = iters;
    double t0 = dg_now();
    __asm__ volatile("ld1r {v0.4s}, [%1]\n\t"
                     "mov v1.16b, v0.16b\n\tmov v2.16b, v0.16b\n\tmov v3.16b, v0.16b\n\t"
                     "mov v4.16b, v0.16b\n\tmov v5.16b, v0.16b\n\tmov v6.16b, v0.16b\n\t"
                     "mov v7.16b, v0.16b\n\tmov v8.16b, v0.16b\n\tmov v9.16b, v0.16b\n\t"
                     "mov v10.16b, v0.16b\n\tmov v11.16b, v0.16b\n\tmov v12.16b, v0.16b\n\t"
                     "mov v13.16b, v0.16b\n\tmov v14.16b, v0.16b\n\tmov v15.16b, v0.16b\n\t"
                     "mov v16.16b, v0.16b\n\tmov v17.16b, v0.16b\n\tmov v18.16b, v0.16b\n\t"
                     "mov v19.16b, v0.16b\n\tmov v20.16b, v0.16b\n\tmov v21.16b, v0.16b\n\t"
                     "mov v22.16b, v0.16b\n\tmov v23.16b, v0.16b\n\t"
                     "add x9, %1, #4\n\tld1r {v30.4s}, [x9]\n\t"
                     "add x9, %1, #8\n\tld1r {v31.4s}, [x9]\n\t"
                     "1:\n\t"
                     "fmla v0.4s, v30.4s, v31.4s\n\tfmla v1.4s, v30.4s, v31.4s\n\t"
                     "fmla v2.4s, v30.4s, v31.4s\n\tfmla v3.4s, v30.4s, v31.4s\n\t"
                     "fmla v4.4s, v30.4s, v31.4s\n\tfmla v5.4s, v30.4s, v31.4s\n\t"
                     "fmla v6.4s, v30.4s, v31.4s\n\tfmla v7.4s, v30.4s, v31.4s\n\t"
                     "fmla v8.4s, v30.4s, v31.4s\n\tfmla v9.4s, v30.4s, v31.4s\n\t"
                     "fmla v10.4s, v30.4s, v31.4s\n\tfmla v11.4s, v30.4s, v31.4s\n\t"
                     "fmla v12.4s, v30.4s, v31.4s\n\tfmla v13.4s, v30.4s, v31.4s\n\t"
                     "fmla v14.4s, v30.4s, v31.4s\n\tfmla v15.4s, v30.4s, v31.4s\n\t"
                     "fmla v16.4s, v30.4s, v31.4s\n\tfmla v17.4s, v30.4s, v31.4s\n\t"
                     "fmla v18.4s, v30.4s, v31.4s\n\tfmla v19.4s, v30.4s, v31.4s\n\t"
                     "fmla v20.4s, v30.4s, v31.4s\n\tfmla v21.4s, v30.4s, v31.4s\n\t"
                     "fmla v22.4s, v30.4s, v31.4s\n\tfmla v23.4s, v30.4s, v31.4s\n\t"
                     "subs %0, %0, #1\n\tb.ne 1b\n\t"
                     : "+r"(n)
                     : "r"(k)
                     : "cc", "memory", "x9", "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8",
                       "v9", "v10", "v11", "v12", "v13", "v14", "v15", "v16", "v17", "v18", "v19",
                       "v20", "v21", "v22", "v23", "v30", "v31");
    return dg_now() - t0;
}
enum { FMA_CHAINS = 24 };
#else
static double measured_ghz(void)
{
    return NAN;
}
#endif

/* GFLOP/s of one core running independent FMAs of the widest vectors it
 * has: best of 7 runs of about 2 ms after a warm-up run (which also moves an
 * AVX-512 core to its vector clock); NAN where there is no kernel for the
 * ISA. *bits and *iters get the kernel's width and a 2 ms run's length. */
static double measured_fma(int vector_bits, bool fma, int *bits, long *iters)
{
    *bits = 0;
    *iters = 0;
#if defined(__x86_64__) || defined(__aarch64__)
#if defined(__x86_64__)
    if (!fma || vector_bits < 256)
        return NAN;
#endif
    *bits = vector_bits >= 512 ? 512 : vector_bits >= 256 ? 256 : 128;
    long n = 200000;
    double t = time_fma(*bits, n); /* warm-up, and the size of a 2 ms run */
    if (t > 0 && t < 2e-3)
        n = (long)(n * fmin(2e-3 / t, 100.0));
    *iters = n;
    double best = INFINITY;
    for (int i = 0; i < 7; i++) {
        t = time_fma(*bits, n);
        if (t > 0 && t < best)
            best = t;
    }
    double flops = (double)n * FMA_CHAINS * (*bits / 32) * 2.0;
    return isfinite(best) ? flops / best / 1e9 : NAN;
#else
    (void)vector_bits;
    (void)fma;
    return NAN;
#endif
}

#if defined(__x86_64__) || defined(__aarch64__)
/* The start gate of one round: every thread waits until all n were created
 * (go) or one could not be (abort). A gate, not a barrier: a barrier of n
 * never opens when fewer than n threads reach it, and a thread blocked in
 * one cannot be cancelled. */
typedef struct fma_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state; /* 0 waiting, 1 go, 2 abort */
} fma_gate;

typedef struct fma_job {
    fma_gate *gate;
    int bits;
    long iters;
    double secs;
} fma_job;

static void *fma_thread(void *arg)
{
    fma_job *j = arg;
    fma_gate *g = j->gate;
    pthread_mutex_lock(&g->mu);
    while (g->state == 0)
        pthread_cond_wait(&g->cv, &g->mu);
    bool go = g->state == 1;
    pthread_mutex_unlock(&g->mu);
    if (go)
        j->secs = time_fma(j->bits, j->iters);
    return NULL;
}

static void gate_open(fma_gate *g, int state)
{
    pthread_mutex_lock(&g->mu);
    g->state = state;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}
#endif

/* GFLOP/s of n threads running the FMA kernel at once (the median of 3
 * rounds of about 10 ms, each as long as its slowest thread): what the cores
 * do together, which one core's figure x n overstates when vCPUs share
 * physical cores unseen (SMT on the host: two siblings share one core's FMA
 * units, so each runs at half speed while both run) or the all-core vector
 * clock is lower. Rounds long against a wake-up's skew and the median, not
 * the best: a round in which the host happened not to run two siblings at
 * once must not hide that they share a core. NAN when it could not run. */
#define FMA_ALL_ROUNDS 3
#define FMA_ALL_LENGTH 5 /* x the single-core run (about 2 ms) */
static double measured_fma_all(int bits, long iters, int n)
{
#if defined(__x86_64__) || defined(__aarch64__)
    if (bits <= 0 || iters <= 0 || n < 2 || n > 1024)
        return NAN;
    iters *= FMA_ALL_LENGTH;
    fma_job *jobs = dg_calloc((size_t)n, sizeof *jobs);
    pthread_t *th = dg_calloc((size_t)n, sizeof *th);
    if (!jobs || !th) {
        dg_free(jobs);
        dg_free(th);
        return NAN;
    }
    double got[FMA_ALL_ROUNDS];
    int rounds = 0;
    for (int round = 0; round < FMA_ALL_ROUNDS; round++) {
        fma_gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
        for (int i = 0; i < n; i++)
            jobs[i] = (fma_job){&gate, bits, iters, NAN};
        /* The calling thread is one of the n. */
        int started = 1;
        for (int i = 1; i < n && started == i; i++)
            if (pthread_create(&th[i], NULL, fma_thread, &jobs[i]) == 0)
                started++;
        gate_open(&gate, started == n ? 1 : 2);
        if (started == n)
            fma_thread(&jobs[0]);
        for (int i = 1; i < started; i++)
            pthread_join(th[i], NULL);
        pthread_cond_destroy(&gate.cv);
        pthread_mutex_destroy(&gate.mu);
        if (started < n) { /* too few threads: no figure of n cores */
            rounds = 0;
            break;
        }
        double worst = 0;
        for (int i = 0; i < n; i++)
            worst = jobs[i].secs > worst ? jobs[i].secs : worst;
        double g =
            worst > 0 ? (double)n * iters * FMA_CHAINS * (bits / 32) * 2.0 / worst / 1e9 : NAN;
        if (isfinite(g))
            got[rounds++] = g;
    }
    dg_free(jobs);
    dg_free(th);
    /* The median of the rounds (of two, the lower). */
    for (int i = 1; i < rounds; i++)
        for (int j = i; j > 0 && got[j] < got[j - 1]; j--) {
            double x = got[j];
            got[j] = got[j - 1];
            got[j - 1] = x;
        }
    return rounds ? got[(rounds - 1) / 2] : NAN;
#else
    (void)bits;
    (void)iters;
    (void)n;
    return NAN;
#endif
}

/* cpuinfo_max_freq of cpu0 when there is cpufreq, else the largest "cpu MHz". */
static double reported_ghz(const char **source)
{
    char *t = dg_read_file("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", 64, NULL);
    double v = t ? strtod(t, NULL) / 1e6 : NAN;
    dg_free(t);
    *source = "reported: cpufreq cpuinfo_max_freq";
    if (v > 0)
        return v;
    *source = "reported: /proc/cpuinfo cpu MHz (a VM's is often its base clock)";
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

/* FMA pipes per core of known microarchitectures and the width of each: a
 * 512-bit op on 256-bit pipes (Zen 4) takes both, so the core does units x
 * min(pipe, vector) bits of FMA per cycle. Intel from CPUID family 6 models,
 * AMD from families 17h-1Ah, arm from the MIDR (implementer, part). */
typedef struct uarch_row {
    int vendor; /* 0 Intel, 1 AMD, 2 arm implementer (family = implementer id) */
    int family, model_lo, model_hi;
    const char *name;
    int units, pipe_bits;
} uarch_row;

static const uarch_row uarchs[] = {
    {0, 6, 0x3c, 0x3c, "Haswell", 2, 256},
    {0, 6, 0x3f, 0x3f, "Haswell", 2, 256},
    {0, 6, 0x45, 0x46, "Haswell", 2, 256},
    {0, 6, 0x3d, 0x3d, "Broadwell", 2, 256},
    {0, 6, 0x47, 0x47, "Broadwell", 2, 256},
    {0, 6, 0x4f, 0x4f, "Broadwell", 2, 256},
    {0, 6, 0x56, 0x56, "Broadwell", 2, 256},
    {0, 6, 0x4e, 0x4e, "Skylake", 2, 256},
    {0, 6, 0x5e, 0x5e, "Skylake", 2, 256},
    {0, 6, 0x8e, 0x8e, "Kaby/Coffee Lake", 2, 256},
    {0, 6, 0x9e, 0x9e, "Kaby/Coffee Lake", 2, 256},
    {0, 6, 0xa5, 0xa6, "Comet Lake", 2, 256},
    /* One 512-bit unit on Xeon Bronze, Silver and most Gold 5xxx; two on
     * Gold 6xxx and Platinum: the measured FMA throughput tells them apart. */
    {0, 6, 0x55, 0x55, "Skylake-SP/Cascade Lake/Cooper Lake (2 units on Gold 6/Platinum)", 2, 512},
    {0, 6, 0x6a, 0x6a, "Ice Lake-SP", 2, 512},
    {0, 6, 0x6c, 0x6c, "Ice Lake-SP", 2, 512},
    {0, 6, 0x7d, 0x7e, "Ice Lake (client: one 512-bit unit)", 2, 256},
    {0, 6, 0x8c, 0x8d, "Tiger Lake (one 512-bit unit)", 2, 256},
    {0, 6, 0xa7, 0xa7, "Rocket Lake (one 512-bit unit)", 2, 256},
    {0, 6, 0x8f, 0x8f, "Sapphire Rapids", 2, 512},
    {0, 6, 0xcf, 0xcf, "Emerald Rapids", 2, 512},
    {0, 6, 0xad, 0xae, "Granite Rapids", 2, 512},
    {0, 6, 0x97, 0x97, "Alder Lake (P-core)", 2, 256},
    {0, 6, 0x9a, 0x9a, "Alder Lake (P-core)", 2, 256},
    {0, 6, 0xb7, 0xb7, "Raptor Lake (P-core)", 2, 256},
    {0, 6, 0xba, 0xba, "Raptor Lake (P-core)", 2, 256},
    {0, 6, 0xbf, 0xbf, "Raptor Lake (P-core)", 2, 256},
    {0, 6, 0xaa, 0xac, "Meteor Lake (P-core)", 2, 256},
    {0, 6, 0xc5, 0xc6, "Arrow Lake (P-core)", 2, 256},
    {1, 0x17, 0x00, 0x2f, "Zen/Zen+", 2, 128},
    {1, 0x17, 0x30, 0xff, "Zen 2", 2, 256},
    {1, 0x18, 0x00, 0xff, "Hygon Dhyana (Zen)", 2, 128},
    {1, 0x19, 0x00, 0x0f, "Zen 3", 2, 256},
    {1, 0x19, 0x10, 0x1f, "Zen 4 (AVX-512 on 256-bit pipes)", 2, 256},
    {1, 0x19, 0x20, 0x5f, "Zen 3", 2, 256},
    {1, 0x19, 0x60, 0xaf, "Zen 4 (AVX-512 on 256-bit pipes)", 2, 256},
    {1, 0x1a, 0x20, 0x2f, "Zen 5 (mobile: 256-bit pipes)", 2, 256},
    {1, 0x1a, 0x60, 0x7f, "Zen 5 (mobile: 256-bit pipes)", 2, 256},
    {1, 0x1a, 0x00, 0xff, "Zen 5", 2, 512},
    {2, 0x41, 0xd08, 0xd08, "Cortex-A72", 2, 128},
    {2, 0x41, 0xd0b, 0xd0b, "Cortex-A76", 2, 128},
    {2, 0x41, 0xd0c, 0xd0c, "Neoverse N1", 2, 128},
    {2, 0x41, 0xd0d, 0xd0d, "Cortex-A77", 2, 128},
    {2, 0x41, 0xd40, 0xd40, "Neoverse V1", 4, 128},
    {2, 0x41, 0xd41, 0xd41, "Cortex-A78", 2, 128},
    {2, 0x41, 0xd44, 0xd44, "Cortex-X1", 4, 128},
    {2, 0x41, 0xd47, 0xd47, "Cortex-A710", 2, 128},
    {2, 0x41, 0xd48, 0xd48, "Cortex-X2", 4, 128},
    {2, 0x41, 0xd49, 0xd49, "Neoverse N2", 2, 128},
    {2, 0x41, 0xd4e, 0xd4e, "Cortex-X3", 4, 128},
    {2, 0x41, 0xd4f, 0xd4f, "Neoverse V2 (Grace)", 4, 128},
    {2, 0x41, 0xd84, 0xd84, "Neoverse V3", 4, 128},
    {2, 0x61, 0x000, 0xfff, "Apple (P-core)", 4, 128},
};

/* The row for this CPU, NULL when it is not in the table. */
static const uarch_row *find_uarch(void)
{
    int vendor = -1, family = -1, model = -1;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (__get_cpuid(0, &a, &b, &c, &d)) {
        vendor = b == 0x756e6547 ? 0 : (b == 0x68747541 || b == 0x6f677948) ? 1 : -1;
        if (__get_cpuid(1, &a, &b, &c, &d)) {
            family = (a >> 8) & 0xf;
            model = (a >> 4) & 0xf;
            if (family == 0xf)
                family += (a >> 20) & 0xff;
            if (family == 6 || family >= 0xf)
                model |= ((a >> 16) & 0xf) << 4;
        }
    }
#elif defined(__aarch64__) && defined(__APPLE__)
    vendor = 2;
    family = 0x61;
    model = 0;
#elif defined(__aarch64__)
    char *t = dg_read_file("/proc/cpuinfo", 1 << 20, NULL);
    const char *imp = t ? strstr(t, "CPU implementer") : NULL;
    const char *part = t ? strstr(t, "CPU part") : NULL;
    if (imp && part && strchr(imp, ':') && strchr(part, ':')) {
        vendor = 2;
        family = (int)strtol(strchr(imp, ':') + 1, NULL, 0);
        model = (int)strtol(strchr(part, ':') + 1, NULL, 0);
    }
    dg_free(t);
#endif
    for (size_t i = 0; i < sizeof uarchs / sizeof uarchs[0]; i++) {
        const uarch_row *r = &uarchs[i];
        if (r->vendor == vendor && r->family == family && model >= r->model_lo &&
            model <= r->model_hi)
            return r;
    }
    return NULL;
}

/* cores, logical, usable_cores and gflops of p from t. */
static void apply_topo(dg_cpu_peak *p, const dg_cpu_topo *t)
{
    p->topo = *t;
    p->cores = t->cores;
    p->logical = t->affinity;
    p->usable_cores = t->usable;
    p->gflops = isfinite(t->usable) && t->usable > 0 ? p->per_core_gflops * t->usable : NAN;
}

double dg_cpu_per_core_choose(double one, double all, int n, double table, const char **source)
{
    /* The measured throughput counts what the table cannot know (one
     * AVX-512 unit on a Xeon Silver, the vector clock), and the cores
     * together what one core cannot (vCPUs sharing physical cores, a lower
     * all-core clock); the table x clock stands in where nothing could be
     * measured. Together counts only when it is short of one core's figure
     * by more than a few percent of noise. */
    double together = n > 0 ? all / n : NAN;
    if (isfinite(one) && one > 0 && isfinite(together) && together > 0 && together < 0.95 * one) {
        *source = "measured: the usable cores' FMA throughput together, per core";
        return together;
    }
    if (isfinite(one) && one > 0) {
        *source = "measured: one core's FMA throughput";
        return one;
    }
    *source = "flops_per_cycle x clock";
    return table;
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
    /* Not in the table: two FMA pipes as wide as the vectors on x86 with FMA;
     * without FMA, one add and one multiply pipe, the same two flops per
     * lane per cycle. */
    p->fma_units = p->fma ? 2 : 1;
    p->fma_units_source = p->fma ? "assumed: 2 pipes as wide as the vectors (x86 with FMA)"
                                 : "assumed: one add and one multiply pipe (no FMA)";
#elif defined(__aarch64__)
    p->vector_bits = 128;
    p->fma = true;
    p->fma_units = 2;
    p->isa = "neon";
    p->fma_units_source = "assumed: 2 NEON pipes";
#endif
    p->pipe_bits = p->vector_bits;
    const uarch_row *u = find_uarch();
    static char usrc[120];
    if (u && p->fma) {
        p->uarch = u->name;
        p->fma_units = u->units;
        p->pipe_bits = u->pipe_bits;
        snprintf(usrc, sizeof usrc, "table: %s, %d x %d-bit", u->name, u->units, u->pipe_bits);
        p->fma_units_source = usrc;
    }
    int bits = p->pipe_bits < p->vector_bits ? p->pipe_bits : p->vector_bits;
    p->flops_per_cycle = p->vector_bits ? (double)(bits / 32) * 2.0 * p->fma_units : NAN;
    p->ghz_measured = measured_ghz();
    const char *rsrc = NULL;
    p->ghz_reported = reported_ghz(&rsrc);
    /* The clock the core can reach: a measurement under load reads low, a
     * VM's "cpu MHz" is often the base clock; the larger of the two. */
    bool use_measured = isfinite(p->ghz_measured) &&
                        !(isfinite(p->ghz_reported) && p->ghz_reported > p->ghz_measured);
    p->ghz = use_measured ? p->ghz_measured : p->ghz_reported;
    p->clock_source = use_measured ? "measured: dependent register adds, one per cycle"
                      : isfinite(p->ghz_reported) ? rsrc
                                                  : "unknown";
    int kbits = 0;
    long iters = 0;
    p->fma_measured = measured_fma(p->vector_bits, p->fma, &kbits, &iters);
    const dg_cpu_topo *topo = dg_cpu_topo_get();
    p->fma_all_threads = isfinite(p->fma_measured) && topo->threads > 1 ? topo->threads : 0;
    p->fma_all_measured = measured_fma_all(kbits, iters, p->fma_all_threads);
    p->per_core_gflops =
        dg_cpu_per_core_choose(p->fma_measured, p->fma_all_measured, p->fma_all_threads,
                               p->flops_per_cycle * p->ghz, &p->per_core_source);
    apply_topo(p, topo);
}

const dg_cpu_peak *dg_cpu_peak_get(void)
{
    pthread_once(&peak_once, compute_peak);
    return &cpu_peak;
}

void dg_cpu_peak_with_topo(const dg_cpu_topo *t, dg_cpu_peak *out)
{
    *out = *dg_cpu_peak_get();
    apply_topo(out, t);
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
    cJSON_AddItemToObject(o, "pipe_bits", dg_json_metric(p->pipe_bits, p->pipe_bits > 0, "bits"));
    dg_json_add_str(o, "uarch", p->uarch);
    cJSON_AddStringToObject(o, "fma_units_source",
                            p->fma_units_source ? p->fma_units_source : "unknown");
    cJSON_AddItemToObject(
        o, "flops_per_cycle",
        dg_json_metric(p->flops_per_cycle, isfinite(p->flops_per_cycle), "FLOP/cycle"));
    cJSON_AddItemToObject(o, "clock", dg_json_metric(p->ghz, isfinite(p->ghz), "GHz"));
    cJSON_AddItemToObject(o, "clock_measured",
                          dg_json_metric(p->ghz_measured, isfinite(p->ghz_measured), "GHz"));
    cJSON_AddItemToObject(o, "clock_reported",
                          dg_json_metric(p->ghz_reported, isfinite(p->ghz_reported), "GHz"));
    cJSON_AddStringToObject(o, "clock_source", p->clock_source ? p->clock_source : "unknown");
    cJSON_AddItemToObject(o, "fma_measured",
                          dg_json_metric(p->fma_measured, isfinite(p->fma_measured), "GFLOP/s"));
    cJSON_AddItemToObject(
        o, "fma_measured_all",
        dg_json_metric(p->fma_all_measured, isfinite(p->fma_all_measured), "GFLOP/s"));
    cJSON_AddNumberToObject(o, "fma_measured_all_threads", p->fma_all_threads);
    cJSON_AddNumberToObject(o, "cores", p->cores);
    cJSON_AddNumberToObject(o, "logical_cpus", p->logical);
    cJSON_AddItemToObject(o, "usable_cores",
                          dg_json_metric(p->usable_cores, isfinite(p->usable_cores), "cores"));
    cJSON_AddNumberToObject(o, "threads_advised", p->topo.threads);
    cJSON_AddItemToObject(o, "topology", dg_cpu_topo_json(&p->topo));
    cJSON_AddItemToObject(
        o, "per_core", dg_json_metric(p->per_core_gflops, isfinite(p->per_core_gflops), "GFLOP/s"));
    cJSON_AddStringToObject(o, "per_core_source",
                            p->per_core_source ? p->per_core_source : "unknown");
    cJSON_AddItemToObject(o, "fp32", dg_json_metric(p->gflops, isfinite(p->gflops), "GFLOP/s"));
    cJSON_AddStringToObject(o, "source", "usable cores x per core");
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

/* Memory bandwidth (GB/s) of known parts; the first name contained in the
 * device name wins, so longer names first. */
static const struct mem_part {
    const char *name;
    double gbps;
} mem_parts[] = {
    {"H200", 4800},
    {"H100 PCIe", 2000},
    {"H100", 3350},
    {"GH200", 4000},
    {"A100-SXM4-80GB", 2039},
    {"A100 80GB PCIe", 1935},
    {"A100", 1555},
    {"A10G", 600},
    {"A10", 600},
    {"L40S", 864},
    {"L40", 864},
    {"L4", 300},
    {"V100", 900},
    {"T4", 320},
    {"RTX 4090", 1008},
    {"RTX 4080", 717},
    {"RTX 3090", 936},
    {"RTX 3080", 760},
    {"RTX A6000", 768},
    {"MI300X", 5300},
    {"MI250X", 3277},
    {"MI210", 1638},
};

double dg_device_mem_gbps(const char *device_name, const char **source)
{
    *source = "unknown part";
    for (size_t i = 0; device_name && i < sizeof mem_parts / sizeof mem_parts[0]; i++)
        if (strstr(device_name, mem_parts[i].name)) {
            *source = "table of known parts";
            return mem_parts[i].gbps;
        }
    return NAN;
}

double dg_device_peak_gflops(const char *backend, const char *device_name, double compute_units,
                             int threads, const char **source)
{
    const dg_cpu_peak *cpu = dg_cpu_peak_get();
    *source = "unknown part";
    if (backend && strcmp(backend, "cpu") == 0) {
        double n = threads > 0 && threads < cpu->usable_cores ? threads : cpu->usable_cores;
        *source = "cpu: usable cores used x per-core peak";
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
