/* The threshold table and the parser of its overrides (thresholds.h). */
#include "diagnose/thresholds.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const dg_threshold dg_thresholds[TH_COUNT] = {
    [TH_DEVICE_MIN_REDUCTION_PCT] = {"device_min_reduction_pct", 22, "%", -1000, 100, false,
                                     "slow-device-data,verdict-inconclusive",
                                     "the device step time must be at least this much shorter "
                                     "than the cpu's (100 (cpu - device) / cpu)"},
    [TH_DEVICE_BUSY_MIN] = {"device_busy_min", 0.18, "fraction", 0, 1, false,
                            "slow-device-data,verdict-inconclusive",
                            "below this busy fraction the device mostly waits"},
    [TH_MEM_EPOCHS] = {"mem_epochs", 10, "epochs", 1, 1e6, true,
                       "retained-refs,working-set-change,memory-short",
                       "epochs a soak needs before memory growth is judged"},
    [TH_MEM_GROWTH_PCT] = {"mem_growth_pct", 26, "%", 0, 1e6, false,
                           "retained-refs,working-set-change,footprint-growth",
                           "growth of the process's own memory over the first epoch's "
                           "watermark, with the cache emptied every epoch"},
    [TH_SLOWDOWN_RATIO] = {"slowdown_ratio", 1.2, "ratio", 0, 1e3, false, "slowing-down",
                           "mean step time of the last third of the soak over the first third"},
    [TH_FALLBACK_SHARE] = {"fallback_share", 0.10, "fraction", 0, 1, false, "operator-gap",
                           "share of the profiled op time on the cpu fallback that warns"},
    [TH_FALLBACK_SHARE_FAIL] = {"fallback_share_fail", 0.5, "fraction", 0, 1, false, "operator-gap",
                                "share of the profiled op time on the cpu fallback that fails"},
    [TH_SPEEDUP_MIN] = {"speedup_min", 1.25, "x", 0, 1e6, false,
                        "speedup-near-one,verdict-inconclusive,decision",
                        "cpu step time over device step time below which the device does not "
                        "pay off"},
    [TH_DATA_WAIT_SHARE] = {"data_wait_share", 0.20, "fraction", 0, 1, false, "data-starved",
                            "share of the step spent waiting for the next batch"},
    [TH_NOISE_IQR_RATIO] = {"noise_iqr_ratio", 0.15, "ratio", 0, 1e3, false, "noisy-measurement",
                            "step-time IQR over the median"},
    [TH_BUSY_PROCESS_CPU_PCT] = {"busy_process_cpu_pct", 20, "%", 0, 1e6, false,
                                 "noisy-measurement,contended",
                                 "another process above this share of one core counts as busy"},
    [TH_OTHER_MEM_SHARE] = {"other_mem_share", 0.25, "fraction", 0, 1, false, "memory-pressure",
                            "resident memory of other processes over the machine's memory"},
    [TH_SWAP_GROWTH_MIB] = {"swap_growth_mib", 64, "MiB", 0, 1e9, false, "memory-pressure",
                            "swap growth during a soak or a good sweep trial"},
    [TH_PSI_SOME_PCT] = {"psi_some_pct", 10, "%", 0, 100, false, "memory-pressure",
                         "memory pressure (PSI some avg10) when the environment was taken"},
    [TH_CONTENTION_CPUS] = {"contention_cpus", 0.5, "cpus", 0, 1e4, false,
                            "contended,cpu-baseline-unfair",
                            "CPU time other processes used during a measured window, in CPUs' "
                            "worth (1 = one CPU busy the whole window)"},
    [TH_CPU_PEAK_FRACTION_MIN] = {"cpu_peak_fraction_min", 0.40, "fraction", 0, 1, false,
                                  "cpu-baseline-unfair",
                                  "the gate's cpu GEMM below this share of the cores' FP32 peak "
                                  "is an unfair baseline"},
    [TH_CPU_BUSY_MIN_PCT] = {"cpu_busy_min_pct", 75, "%", 0, 1e6, false, "cpu-use",
                             "median CPU of a supervised program's process tree, in % of one "
                             "core, below which it mostly waits"},
    [TH_HOST_READS_PER_STEP] = {"host_reads_per_step", 0.5, "reads", 0, 1e6, false, "host-sync",
                                "host reads (.item(), .tolist(), .cpu(), synchronize) per step "
                                "at or above which each step waits for the device"},
    [TH_EQUIVALENCE_PCT] = {"equivalence_pct", 10, "%", 0, 1000, false, "compare",
                            "two throughputs whose ratio's 95% interval lies within 1/(1+e) .. "
                            "1+e are the same speed (no difference)"},
    [TH_SLO_QUEUE_RATIO] = {"slo_queue_ratio", 2, "ratio", 1, 1e6, false, "queueing-bound",
                            "the median TTFT at the ladder's highest concurrency over its lowest "
                            "that, with TPOT rising less, says the latency went to queueing"},
    [TH_SLO_INTERFERENCE_PCT] = {"slo_interference_pct", 10, "%", 0, 1e6, false,
                                 "training-interference",
                                 "how much higher a bound's percentile beside training (its "
                                 "interval apart from the one alone), or how much slower the "
                                 "training's steps, counts as interference"},
    [TH_LINK_MIN_FRACTION] = {"link_min_fraction", 0.5, "fraction", 0, 1, false, "link-slow",
                              "a host-device copy (page-locked) under this share of the link's "
                              "rated bandwidth is slow"},
    [TH_UNSTABLE_DRIFT_PCT] = {"unstable_drift_pct", 5, "%", 0, 100, false, "device-unstable",
                               "a sustained load's rate that fell by more than this (the last "
                               "third of its windows against the first, by the 95% interval) "
                               "is unstable"},
    [TH_THROTTLE_MIN_SHARE] = {"throttle_min_share", 0.05, "fraction", 0, 1, false, "throttled",
                               "share of a sustained load a slowing throttle reason (power, "
                               "thermal, hardware) must hold to be named"},
    [TH_LOSS_REL_DIFF_MAX] = {"loss_rel_diff_max", 0.01, "relative", 0, 1000, false,
                              "numerics-drift,compare",
                              "two runs' losses at the same (epoch, step) whose relative "
                              "difference |a - b| / max(|a|, |b|) exceeds this disagree"},
};

int dg_threshold_index(const char *name, size_t n)
{
    for (int i = 0; i < TH_COUNT; i++)
        if (strlen(dg_thresholds[i].name) == n && !strncmp(dg_thresholds[i].name, name, n))
            return i;
    return -1;
}

dg_status dg_thresholds_parse(dg_ctx *ctx, const char *spec, double th[TH_COUNT])
{
    for (int i = 0; i < TH_COUNT; i++)
        th[i] = dg_thresholds[i].value;
    if (!spec)
        return DG_OK;
    const char *p = spec;
    while (*p) {
        size_t len = strcspn(p, ",");
        const char *item = p;
        p += len;
        if (*p == ',')
            p++;
        while (len && isspace((unsigned char)*item)) {
            item++;
            len--;
        }
        while (len && isspace((unsigned char)item[len - 1]))
            len--;
        if (!len)
            continue; /* an empty list, or an empty item between commas */
        const char *eq = memchr(item, '=', len);
        if (!eq)
            return dg_fail(ctx, DG_ERR_USAGE, "threshold: \"%.*s\" is not NAME=VALUE", (int)len,
                           item);
        size_t nlen = (size_t)(eq - item);
        while (nlen && isspace((unsigned char)item[nlen - 1]))
            nlen--;
        int idx = dg_threshold_index(item, nlen);
        if (idx < 0) {
            char known[512] = "";
            for (int i = 0; i < TH_COUNT; i++) {
                size_t used = strlen(known);
                if (used + 1 < sizeof known)
                    snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "",
                             dg_thresholds[i].name);
            }
            return dg_fail(ctx, DG_ERR_USAGE, "threshold: unknown name \"%.*s\" (known: %s)",
                           (int)nlen, item, known);
        }
        const dg_threshold *t = &dg_thresholds[idx];
        char val[64];
        size_t vlen = len - (size_t)(eq + 1 - item);
        const char *v = eq + 1;
        while (vlen && isspace((unsigned char)*v)) {
            v++;
            vlen--;
        }
        if (!vlen || vlen >= sizeof val)
            return dg_fail(ctx, DG_ERR_USAGE, "threshold %s: \"%.*s\" is not a number", t->name,
                           (int)vlen, v);
        memcpy(val, v, vlen);
        val[vlen] = '\0';
        char *end;
        errno = 0;
        double x = strtod(val, &end);
        if (end == val || *end || errno == ERANGE || !isfinite(x))
            return dg_fail(ctx, DG_ERR_USAGE, "threshold %s: \"%s\" is not a number", t->name, val);
        if (x < t->lo || x > t->hi)
            return dg_fail(ctx, DG_ERR_USAGE, "threshold %s: %s is out of range [%g, %g] %s",
                           t->name, val, t->lo, t->hi, t->unit);
        if (t->integer && x != floor(x))
            return dg_fail(ctx, DG_ERR_USAGE, "threshold %s: %s is not a whole number of %s",
                           t->name, val, t->unit);
        th[idx] = x;
    }
    return DG_OK;
}
