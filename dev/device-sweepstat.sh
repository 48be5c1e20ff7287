#!/usr/bin/env bash
# Statistical sweep stops on the GPU: how the trials' samples/s intervals
# judge the doubling on the H200. Two fixture sweeps (devgate sweep --backend
# cuda --model cifar, batches 8 up, 3 warm-up + 20 timed steps a trial, each
# under 90 s), then one accept --quick -- CMD (tests/python/scripts/
# accept_train.py as dev/device-cmd.sh, under 110 s). For each sweep it prints
# every trial's batch, samples/s, its 95% interval (lo-hi, method or the
# reason it has none), the stopper's verdicts (fall / flat, "ambiguous" when
# the intervals overlap, "*" when judged without an interval), the stop and
# its evidence, and the knee with its interval and whether the interval
# chose it. Expects .devcarry as dev/device-s3a.sh does (bin/ with devgate,
# libdevgate-cuda.so, test_cuda and python/ from build-cuda; root/ with the
# Debian runtime libs) and, for the accept part, python3 with torch (CUDA).
# Log: $OUT/sweepstat.log.
set -u
cd "$(dirname "$0")/.."
. dev/device-carry.sh sweepstat
$DG --version
nvidia-smi -L 2>&1 | head -1

show() { # $1: a sweep record, or an accept record (its "sweep")
python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
sw = d.get("sweep", d) or {}
v = lambda x: x.get("value") if isinstance(x, dict) else x
r0 = lambda x: None if x is None else round(x)
for t in sw.get("trials", []):
    ci = t.get("samples_per_s_ci") or {}
    sc = t.get("stop_check") or {}
    band = ("%s-%s %s" % (r0(ci.get("lo")), r0(ci.get("hi")), ci.get("method"))) if ci.get("valid") \
        else "no interval: %s" % ci.get("reason")
    print(" b%-6s %-6s %8s  [%s]  fall %s%s  flat %s%s" % (
        t.get("batch"), t.get("ended"), r0(v(t.get("samples_per_s"))), band,
        sc.get("fall"), "" if sc.get("fall_with_interval") else "*",
        sc.get("flat"), "" if sc.get("flat_with_interval") else "*"))
print(" stopped", sw.get("stopped"))
e = sw.get("stop_evidence")
if e:
    side = lambda s: s and "b%s %s [%s-%s]" % (s["batch"], r0(v(s["samples_per_s"])),
                                              r0(s["samples_per_s_ci"]["lo"]), r0(s["samples_per_s_ci"]["hi"]))
    print(" evidence fall %s (falls %s) vs %s; flat %s (run %s) vs best %s, threshold %s" % (
        e["fall"], e["falls"], side(e.get("previous")), e["flat"], e["flat_run"], side(e.get("best")),
        r0(v(e.get("plateau_threshold")))))
k = sw.get("knee") or {}
kc = k.get("samples_per_s_ci") or {}
print(" knee b%s %s [%s-%s] could_be %s best %s" % (
    k.get("batch"), r0(v(k.get("samples_per_s"))), r0(kc.get("lo")), r0(kc.get("hi")),
    k.get("could_be"), r0(v(k.get("best_samples_per_s")))))
PY
}

for i in 1 2; do
  echo "== fixture sweep $i: cuda cifar"
  s=$(date +%s)
  timeout 90 $DG --no-ledger sweep --backend cuda --model cifar --json >"$out/sweep-$i.json" \
    2>"$out/sweep-$i.err"
  echo " exit $? in $(($(date +%s) - s)) s"
  show "$out/sweep-$i.json" || tail -5 "$out/sweep-$i.err"
done

echo "== accept --quick -- CMD (accept_train.py)"
s=$(date +%s)
timeout 110 $DG --no-ledger accept --quick --json -o "$out/pack-sweepstat" -- python3 \
  tests/python/scripts/accept_train.py --batch '{batch}' --device '{device}' --epochs '{epochs}' \
  --steps 20 --features 256 --hidden 4096 >"$out/accept.json" 2>"$out/accept.err"
echo " exit $? in $(($(date +%s) - s)) s"
show "$out/accept.json" || tail -5 "$out/accept.err"
