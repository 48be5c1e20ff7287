/* Diagnostics as data: the rule table that reads an evidence record
 * (docs/schema/report.md) and makes findings, and dg_diagnose /
 * dg_rules_catalogue. The judges live in their families (rules_*.c), the
 * thresholds in thresholds.c, the finding store in findings.c. The catalogue
 * is docs/rules.md.
 *
 * A rule is one row: {id, severity, signal, thresholds, judge, hypothesis,
 * action}. The judge reads what it needs and calls finding() for each thing
 * it finds; a field that is absent, null or a METRIC with valid:false is never
 * read as 0: the judge then stays silent. */
#include "diagnose/diagnose.h"

#include <string.h>

/* ---- reading the record ------------------------------------------------------ */

/* ---- the table ------------------------------------------------------------------------ */

/* Order matters only where a judge reads another's findings: slow-device-data
 * runs before speedup-near-one. Findings are sorted by severity afterwards. */
const dg_rule dg_rules[] = {
    {"env-translated", DG_SEV_FAIL, "env.arch.translated", "", dg_judge_env_translated,
     "wrong interpreter or binary: under translation the device reports not available and "
     "every speed is the emulator's",
     "run a native build for the host architecture and pin the environment with a lock file"},
    {"env-mixed-arch", DG_SEV_FAIL, "env.python.mixed_extensions, env.python.arch_matches_host", "",
     dg_judge_env_mixed_arch,
     "mixed binaries: wheels of one architecture inside an interpreter of another, so the device "
     "simply reports not available",
     "rebuild the environment for one architecture from a lock file; reinstall the listed "
     "packages"},
    {"gate-failed", DG_SEV_FAIL, "gate.verdict, gate.backends[].matmul.ok", "",
     dg_judge_gate_failed, "the device computes wrong results: a driver, runtime or kernel fault",
     "fix the environment first (driver, runtime and library versions), then run devgate gate "
     "again"},
    {"op-numerics", DG_SEV_FAIL, "gate.backends[].ops.table, gate.reference_ok", "",
     dg_judge_op_numerics,
     "a kernel computes an op wrongly on this device: its error against float64 is over the "
     "op's tolerance (docs/rules.md, op tolerances)",
     "report the op and shape; until it is fixed run it on the cpu (--disable-op OP) or train "
     "elsewhere"},
    {"link-slow", DG_SEV_WARN,
     "gate.backends[].link.h2d_pinned, .d2h_pinned, .fraction_of_rated, .rated",
     "link_min_fraction", dg_judge_link_slow,
     "the host-device link runs below its rating: a slot of fewer lanes or an older generation "
     "than the card's, a link trained down, a riser, or a shared switch",
     "check the slot and the link (nvidia-smi -q: PCIe generation and width, current against "
     "max); move the card, or feed the device fewer, larger batches"},
    {"device-unstable", DG_SEV_FAIL,
     "gate.backends[].sustain.drift (ratio, ratio_ci), .health.temperature", "unstable_drift_pct",
     dg_judge_device_unstable,
     "the device slows while it works: heat, power delivery or a clock that does not hold, so "
     "every short measurement overstates what a long run gets",
     "check cooling and the power limit (nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE); judge "
     "throughput on long runs only, or move the work to a node that holds its clocks"},
    {"throttled", DG_SEV_WARN, "gate.backends[].sustain.health.throttle[] (reason, seconds)",
     "throttle_min_share", dg_judge_throttled,
     "the device's clocks were held down by a power cap, heat or a hardware slowdown while it "
     "worked",
     "look at the named reason: a power cap (raise it or accept it), thermal (airflow, fans, "
     "room), hardware slowdown or power brake (power supply, an external signal); until then, "
     "throughput figures hold only at this node's reduced clocks"},
    {"device-missing", DG_SEV_FAIL, "spec.backend, gate.backends[].available", "",
     dg_judge_device_missing,
     "the device path is not there: driver or runtime missing, or the device hidden (VM, "
     "container)",
     "fix the environment first: make the device visible and available, then run devgate gate "
     "again"},
    {"backend-unavailable", DG_SEV_WARN, "gate.backends[].built, gate.backends[].available", "",
     dg_judge_backend_unavailable,
     "a backend devgate was built with cannot reach its device: driver or runtime missing, or "
     "the device hidden (VM, container)",
     "install the driver or pass the device through if that backend is wanted; otherwise ignore"},
    {"compare-failed", DG_SEV_FAIL, "compare.status, compare.runs[].failed", "",
     dg_judge_compare_failed,
     "the device path broke while training: a driver error, out of memory or a backend bug",
     "read the error, run devgate compare at that batch alone, and fix the path before trusting "
     "any speedup"},
    {"numerics-drift", DG_SEV_FAIL,
     "compare.runs[].verdict, compare.runs[].drift, compare.runs[].loss", "loss_rel_diff_max",
     dg_judge_numerics_drift,
     "dtype or reduction order: floating-point reductions run in another order on the device",
     "unify the dtype; accept the platform difference if losses need not match point by point, "
     "otherwise keep the device for preprocessing only and train elsewhere"},
    {"verdict-inconclusive", DG_SEV_WARN,
     "compare.runs[].speedup_ci, compare.runs[].step_time_reduction_pct_ci",
     "speedup_min,device_min_reduction_pct,device_busy_min", dg_judge_verdict_inconclusive,
     "the 95% interval of the speedup holds the threshold: the measurement cannot tell whether "
     "the device pays off, so no route is chosen on it",
     "rerun with the machine quiet (see contended), or with more repetitions"},
    {"contended", DG_SEV_WARN,
     "gate.backends[].matmul.window, compare.runs[].repetitions.*[].window",
     "contention_cpus,busy_process_cpu_pct", dg_judge_contended,
     "other programs ran during the measurements and took CPU time from them",
     "rerun when the machine is quiet, or stop the named processes; devgate's measurement lock "
     "keeps devgate runs apart but not other programs"},
    {"cpu-baseline-unfair", DG_SEV_WARN,
     "gate.backends[cpu].matmul.fraction_of_peak, .threads, .rate, gate.backends[cpu].peak.cpu, "
     "gate.backends[cpu].blas, compare.spec.threads_used",
     "cpu_peak_fraction_min,contention_cpus", dg_judge_cpu_baseline_unfair,
     "the cpu baseline runs below what its cores can do (a generic BLAS kernel, too few "
     "threads, or a GEMM too small to reach steady state), so every speedup over it is inflated",
     "give the cpu its proper BLAS kernel and all its cores, then compare again"},
    {"slow-device-data", DG_SEV_FAIL,
     "compare.runs[].step_time_reduction_pct, compare.runs[].busy_fraction",
     "device_min_reduction_pct,device_busy_min", dg_judge_slow_device_data,
     "the device waits on the data path or gets too little work per step (the batch), not a "
     "wrong device",
     "look at the data path and the batch first, not the device: profile the loader and the sync "
     "points, and raise the batch toward the sweep's safe batch"},
    {"speedup-near-one", DG_SEV_WARN, "compare.runs[].speedup, profile.sync_points.per_step",
     "speedup_min", dg_judge_speedup_near_one,
     "the device is not really used, or sync points (loss reads, fallbacks, host copies) make it "
     "wait",
     "check the device was really used (gate, fallback census) and count the sync points per "
     "step with devgate profile"},
    {"operator-gap", DG_SEV_WARN,
     "profile.ops[].fallback/share, profile.fallbacks, "
     "compare.runs[].device.fallbacks",
     "fallback_share,fallback_share_fail", dg_judge_operator_gap,
     "operator gap: these ops have no device kernel and fall back to the cpu, with copies both "
     "ways",
     "profile them and replace the operator, or route to an engine that has it (the native "
     "engine) or to a remote node"},
    {"retained-refs", DG_SEV_WARN,
     "soak.growth, soak.epochs_recorded, "
     "soak.empty_cache, soak.staircase.aligned",
     "mem_epochs,mem_growth_pct", dg_judge_retained_refs,
     "retained references: tensors or graphs kept alive across steps, so the cache cannot give "
     "memory back",
     "look for references kept across steps (losses kept with their graph, lists of outputs); "
     "consider a dedicated remote host"},
    {"working-set-change", DG_SEV_INFO, "soak.growth, soak.staircase.aligned",
     "mem_epochs,mem_growth_pct", dg_judge_working_set_change,
     "a working-set change: the staircase lines up with validation epochs, not a leak",
     "nothing to fix; keep validation and checkpoint epochs marked in the memory chart"},
    {"memory-short", DG_SEV_INFO, "soak.epochs_recorded, soak.growth", "mem_epochs,mem_growth_pct",
     dg_judge_memory_short, "too few epochs to tell retained references from a warm-up",
     "soak for at least 10 epochs with the cache emptied at each end"},
    {"memory-not-emptied", DG_SEV_INFO, "soak.empty_cache, soak.growth", "",
     dg_judge_memory_not_emptied,
     "without emptying the cache at epoch ends memory curves only ever go up",
     "soak with the cache emptied at every epoch end (leave out --no-empty-cache)"},
    {"memory-pressure", DG_SEV_WARN,
     "env.processes.top_mem, env.memory.pressure.some_avg10, "
     "soak.sampler.swap_growth, sweep.trials[].swap_growth",
     "other_mem_share,psi_some_pct,swap_growth_mib", dg_judge_memory_pressure,
     "other work competes for memory: the machine pages and the curves show it, not the model",
     "close the other programs or train on a dedicated (remote) node; record them with the "
     "result"},
    {"slowing-down", DG_SEV_WARN, "soak.step_trend.thirds_ratio", "slowdown_ratio",
     dg_judge_slowing_down, "cache and memory contention: fast at first, slow later",
     "lower the batch; release memory at every epoch end (empty the cache, collect garbage)"},
    {"sweep-memory", DG_SEV_INFO, "sweep.stopped.reason, sweep.safe_batch", "",
     dg_judge_sweep_memory, "the batch is above the safe size: memory runs out beyond it",
     "train at or below the safe batch; above it split the work or empty the cache"},
    {"batch-above-safe", DG_SEV_WARN, "spec.batch, sweep.safe_batch.batch", "",
     dg_judge_batch_above_safe, "the training batch is above the safe size the sweep found",
     "train at or below the safe batch"},
    {"data-starved", DG_SEV_WARN, "profile.phases.queue_wait.share", "data_wait_share",
     dg_judge_data_starved, "the data path cannot keep up: the step waits for its next batch",
     "more loader workers (the DataLoader's num_workers), or cached, pre-processed samples; "
     "profile the data path on its own"},
    {"program-failed", DG_SEV_FAIL, "supervise.exit_status, supervise.signal, supervise.timed_out",
     "", dg_judge_program_failed,
     "the supervised program did not finish: its figures cover only part of the run",
     "fix the failure before trusting the figures; the record keeps what was measured"},
    {"events-lost", DG_SEV_WARN, "supervise.events.dropped, .malformed, .overlong", "",
     dg_judge_events_lost,
     "the program's events were dropped or garbled: the curves and step statistics have gaps",
     "emit step events less often (every N steps) and check the emitter; the probes write one "
     "whole line per event"},
    {"footprint-growth", DG_SEV_WARN, "supervise.series[].rss (no soak section)", "mem_growth_pct",
     dg_judge_footprint_growth,
     "the program keeps memory it no longer needs: the process tree grows steadily with time "
     "(retained references, an unbounded cache or history)",
     "look for references kept across steps or epochs (losses with their graph, lists of "
     "outputs, caches); run with the probe to see it per epoch"},
    {"cpu-use", DG_SEV_WARN, "supervise.samples.cpu_pct_median, supervise.samples.cores",
     "cpu_busy_min_pct", dg_judge_cpu_use,
     "the program mostly waits (data, I/O, sleep, a lock or a device) instead of computing",
     "find what it waits for: run with the probe (data wait, sync points) or profile the data "
     "path; more loader workers if it is the data"},
    {"host-sync", DG_SEV_WARN, "profile.sync_points.host_reads_per_step", "host_reads_per_step",
     dg_judge_host_sync,
     "every step reads a value back to the host (.item(), .tolist(), .cpu(), synchronize): on a "
     "device each read waits for all queued work, so the host cannot run ahead",
     "read the loss every N steps or at epoch end (keep it as a tensor and sum on the device); "
     "drop explicit synchronize calls from the step"},
    {"unseeded", DG_SEV_WARN, "seeds.seeded.torch, seeds.loader (run_start: zero-code probe)", "",
     dg_judge_unseeded,
     "the same script gives different curves: torch's generator, which orders the batches and "
     "seeds the loader's workers, starts from a random seed each run",
     "seed torch, numpy and random before building the loader (torch.manual_seed(S)), or give "
     "the DataLoader generator=torch.Generator().manual_seed(S) and a worker_init_fn; compare two "
     "runs only with the same seeds"},
    {"noisy-measurement", DG_SEV_WARN,
     "profile.step.stats.iqr_share, "
     "sweep.trials[].step_ms.iqr/median, env.processes.top_cpu",
     "noise_iqr_ratio,busy_process_cpu_pct", dg_judge_noisy_measurement,
     "the measurement is noisy: other work, frequency scaling or sync jitter moves the step "
     "times",
     "rerun on a quiet machine and compare medians only when the spread is small"},
    {"slo-met", DG_SEV_INFO, "slo: final_gate.signed, final_gate.statement, levels[].verdict", "",
     dg_judge_slo_met,
     "the endpoint keeps the promise at that load with the stated confidence (LoadGen's rule)",
     "sign the statement; measure again after any change to the engine, the model or the node"},
    {"slo-missed", DG_SEV_FAIL, "slo: final_gate.verdict, levels[].verdict.bounds[]", "",
     dg_judge_slo_missed,
     "even the lowest load measured breaks a bound more often than the percentile allows: the "
     "engine, the model or the node is too slow for the promise",
     "relax the bound, serve a smaller model or shorter answers, or move the engine to a faster "
     "device; see queueing-bound for where the time goes"},
    {"slo-inconclusive", DG_SEV_WARN, "slo: final_gate.verdict, levels[].verdict.bounds[].needed",
     "", dg_judge_slo_inconclusive,
     "too few requests for LoadGen's rule at this percentile, or the load never settled: the "
     "measurement cannot say either way",
     "measure longer (--duration, --requests) to the count the verdict names, or lower the "
     "percentile; quiet the node if the windows never agreed"},
    {"queueing-bound", DG_SEV_WARN,
     "slo: levels[].latency.ttft, levels[].latency.tpot, levels[].engine.queue_waiting",
     "slo_queue_ratio", dg_judge_queueing_bound,
     "requests wait before the engine takes them (its slots or batch are full): the time goes to "
     "queueing, not to computing tokens",
     "give the engine more parallel slots or a larger batch (llama.cpp --parallel, vLLM "
     "--max-num-seqs), add a replica, or sign a lower concurrency"},
    {"training-interference", DG_SEV_WARN,
     "slo: levels[beside].latency, while.alone.step_ms, while.beside.step_ms",
     "slo_interference_pct", dg_judge_training_interference,
     "the training job and the server share the node's cores, memory bandwidth or device: each "
     "slows the other",
     "sign the SLO only for the node without training, give each its own cores (taskset, "
     "cgroups) or device, or schedule training outside the serving hours"},
};
const int dg_rule_count = (int)(sizeof dg_rules / sizeof dg_rules[0]);

/* ---- entry points ------------------------------------------------------------------------ */

dg_status dg_diagnose_view(dg_ctx *ctx, const dg_record_view *v, const char *overrides,
                           cJSON **result)
{
    *result = NULL;
    dg_diag d = {0};
    dg_status st = dg_thresholds_parse(ctx, overrides, d.th);
    if (st != DG_OK)
        return st;
    d.v = v;
    d.kind = v->kind ? v->kind : "";
    /* Evidence cites the soak analysis where this record holds it. */
    d.soak_pfx = v->soak_payload && v->soak_payload != v->section[DG_SEC_SOAK] ? "soak." : "";

    for (int i = 0; i < dg_rule_count && !dg_diag_nomem(&d); i++)
        dg_rules[i].judge(&d, &dg_rules[i]);

    cJSON *out = cJSON_CreateObject();
    cJSON *th = cJSON_CreateObject();
    cJSON *arr = cJSON_CreateArray();
    dg_put(&d, out, "v", cJSON_CreateNumber(1)); /* the diagnosis format: unchanged */
    for (int i = 0; i < TH_COUNT; i++)
        dg_put(&d, th, dg_thresholds[i].name, cJSON_CreateNumber(d.th[i]));
    dg_put(&d, out, "thresholds", th);
    /* Most severe first, stable within a severity (the table's order). */
    dg_findings_emit(&d.fs, arr);
    dg_put(&d, out, "findings", arr);
    /* The decision reads the findings' titles: it runs while arr holds them. */
    dg_put(&d, out, "decision", dg_diag_nomem(&d) ? NULL : dg_decide(&d));
    dg_findings_free(&d.fs);
    if (dg_diag_nomem(&d)) {
        cJSON_Delete(out);
        return dg_fail(ctx, DG_ERR_NOMEM, "diagnose: out of memory");
    }
    *result = out;
    return DG_OK;
}

dg_status dg_diagnose(dg_ctx *ctx, const char *record_json, const char *overrides, char **json)
{
    if (!json)
        return dg_fail(ctx, DG_ERR_USAGE, "diagnose: no place for the result");
    *json = NULL;
    double th[TH_COUNT];
    dg_status st = dg_thresholds_parse(ctx, overrides, th);
    if (st != DG_OK)
        return st;
    if (!record_json)
        return dg_fail(ctx, DG_ERR_FORMAT, "diagnose: no evidence record");
    const char *end = NULL;
    cJSON *rec = cJSON_ParseWithOpts(record_json, &end, true);
    if (!rec)
        return dg_fail(ctx, DG_ERR_FORMAT,
                       "diagnose: the evidence record is not JSON (stops at byte %zu)",
                       end && end >= record_json ? (size_t)(end - record_json) : (size_t)0);
    if (!cJSON_IsObject(rec)) {
        cJSON_Delete(rec);
        return dg_fail(ctx, DG_ERR_FORMAT, "diagnose: the evidence record is not a JSON object");
    }
    /* A record without "v" is read as version 1 (hand-written test records). */
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, "v");
    if (v && (!cJSON_IsNumber(v) || (v->valuedouble != 1 && v->valuedouble != 2))) {
        cJSON_Delete(rec);
        return dg_fail(ctx, DG_ERR_FORMAT, "diagnose: evidence record version is not 1 or 2");
    }
    if (!v)
        cJSON_AddNumberToObject(rec, "v", 1);
    dg_record_view view;
    st = dg_record_view_build(ctx, rec, &view);
    cJSON *out = NULL;
    if (st == DG_OK)
        st = dg_diagnose_view(ctx, &view, overrides, &out);
    if (st == DG_OK) {
        *json = dg_json_print(out);
        if (!*json)
            st = dg_fail(ctx, DG_ERR_NOMEM, "diagnose: out of memory");
    }
    cJSON_Delete(out);
    dg_record_view_free(&view);
    cJSON_Delete(rec);
    return st;
}

dg_status dg_rules_catalogue(dg_ctx *ctx, char **json)
{
    if (!json)
        return dg_fail(ctx, DG_ERR_USAGE, "rules: no place for the result");
    *json = NULL;
    dg_diag d = {0};
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < TH_COUNT && arr; i++) {
        const dg_threshold *t = &dg_thresholds[i];
        cJSON *o = cJSON_CreateObject();
        dg_put(&d, o, "name", cJSON_CreateString(t->name));
        dg_put(&d, o, "value", cJSON_CreateNumber(t->value));
        dg_put(&d, o, "unit", cJSON_CreateString(t->unit));
        dg_put(&d, o, "rule", cJSON_CreateString(t->rules));
        dg_put(&d, o, "doc", cJSON_CreateString(t->doc));
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            d.nomem = true;
        }
    }
    if (arr && !d.nomem)
        *json = dg_json_print(arr);
    cJSON_Delete(arr);
    if (!*json)
        return dg_fail(ctx, DG_ERR_NOMEM, "rules: out of memory");
    return DG_OK;
}
