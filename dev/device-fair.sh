#!/usr/bin/env bash
# Session 3, fair: the cpu baseline judged against its hardware on the GPU
# host. Prints what the host says about its CPUs (nproc, lscpu, the affinity
# mask, cgroup quota, SMT siblings, CPUID family/model, clocks) next to what
# devgate makes of it (env cpu.usable_cores and cpu.peak: per-core FMA
# throughput measured, table pipes x clock, usable cores, the peak), and the
# gate's cpu GEMM (threads, the checked 512^3 and the steady-state rate
# product, fraction of peak) with the default threads and with
# OMP_NUM_THREADS=1 (which the rule must name). Under 1 minute. Expects
# .devcarry as dev/device-final2.sh does (bin/devgate; no GPU needed).
# Log: $OUT/fair.log, records $OUT/fair-*.json.
set -u
cd "$(dirname "$0")/.."
. dev/device-carry.sh fair
$DG --version
echo "== host"
echo "nproc $(nproc)  nproc --all $(nproc --all)"
lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|CPU max MHz|CPU MHz|Flags)' | cut -c1-160
grep -m4 -E '^(cpu family|model\s|stepping|microcode)' /proc/cpuinfo
grep 'cpu MHz' /proc/cpuinfo | sort | uniq -c | head -4
cat /sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq 2>/dev/null || echo "no cpufreq"
grep Cpus_allowed_list /proc/self/status
echo "cgroup: $(cat /proc/self/cgroup | tr '\n' ' ')"
for f in /sys/fs/cgroup/cpu.max /sys/fs/cgroup/cpu.max.effective /sys/fs/cgroup/cpuset.cpus.effective; do
  [ -r "$f" ] && echo "$f: $(cat "$f")"
done
echo "siblings (thread_siblings_list: count):"
cat /sys/devices/system/cpu/cpu*/topology/thread_siblings_list 2>/dev/null | sort | uniq -c | head -20
echo "core_cpus_list distinct: $(cat /sys/devices/system/cpu/cpu*/topology/core_cpus_list 2>/dev/null | sort -u | wc -l)"
echo "env OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-unset} OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
show() {
python3 - "$@" <<'PY'
import json, sys
v = lambda x: (round(x["value"], 3) if isinstance(x.get("value"), float) else x["value"]) if isinstance(x, dict) and "value" in x else x
kind, path = sys.argv[1], sys.argv[2]
d = json.load(open(path))
if kind == "env":
    c = d["cpu"]
    print(" env cpu: logical", v(c["logical_cores"]), "affinity", v(c["affinity_cores"]), "physical", v(c["physical_cores"]), "usable", v(c.get("usable_cores")))
    p = c.get("peak") or {}
else:
    b = [x for x in d["backends"] if x["name"] == "cpu"][0]
    m = b["matmul"]; r = m.get("rate") or {}
    print(" gate cpu: threads", m.get("threads"), "(%s)" % m.get("threads_source"), "checked %dx%dx%d" % (m["m"], m["n"], m["k"]), round(m.get("gflops") or 0, 1), "GFLOP/s;",
          "rate %sx%sx%s" % (r.get("m"), r.get("n"), r.get("k")), v(r.get("gflops")), "GFLOP/s in", round(r.get("ms_warm") or 0, 2), "ms;",
          "fraction", v(m.get("fraction_of_peak")), "of", m.get("fraction_of"), "; others_cpus", v((m.get("window") or {}).get("others_cpus")))
    bl = b.get("blas") or {}
    print(" blas:", bl.get("config"), "| kernel", bl.get("kernel"), "generic", bl.get("generic_kernel"), "own threads", v(bl.get("threads")), "threading", bl.get("threading"))
    p = (b.get("peak") or {}).get("cpu") or {}
keys = ["isa", "uarch", "fma_units", "pipe_bits", "fma_units_source", "flops_per_cycle", "clock", "clock_measured", "clock_reported", "clock_source",
        "fma_measured", "fma_measured_all", "fma_measured_all_threads", "cores", "logical_cpus", "usable_cores", "threads_advised", "per_core", "per_core_source", "fp32"]
print(" peak:", "; ".join("%s=%s" % (k, v(p.get(k))) for k in keys))
t = p.get("topology") or {}
print(" topology:", "; ".join("%s=%s" % (k, v(x)) for k, x in t.items()))
PY
}
echo "== devgate env"
timeout 60 $DG --no-ledger env --json -q >"$out/fair-env.json"; echo "exit $?"
show env "$out/fair-env.json"
echo "== devgate gate --backend cpu (default threads)"
timeout 60 $DG --no-ledger gate --backend cpu --json -q >"$out/fair-gate.json"; echo "exit $?"
show gate "$out/fair-gate.json"
echo "== devgate gate --backend cpu --size 2048 (checked at 2048^3: no rate product)"
timeout 60 $DG --no-ledger gate --backend cpu --size 2048 --reps 3 --json -q >"$out/fair-gate-2048.json"; echo "exit $?"
show gate "$out/fair-gate-2048.json"
echo "== OMP_NUM_THREADS=1 devgate gate --backend cpu"
OMP_NUM_THREADS=1 timeout 60 $DG --no-ledger gate --backend cpu --json -q >"$out/fair-gate-omp1.json"; echo "exit $?"
show gate "$out/fair-gate-omp1.json"
