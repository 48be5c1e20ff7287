#!/usr/bin/env bash
# Sent to a GPU machine after the verdict, option-table and record changes:
# the CUDA tests, the gate's fraction of peak, the interleaved compare with its
# interval, accept in both tiers (time to evidence, route, exit status), and
# `devgate run` with the zero-code probe on a CUDA PyTorch script. Expects the
# carried binaries in .devcarry/bin (devgate, libdevgate-cuda.so, python/,
# tests) and Debian's runtime libraries in .devcarry/root. Log: $OUT/verdict.log.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/devgate-device}
mkdir -p "$out"
exec > >(tee -a "$out/verdict.log") 2>&1
bin=$PWD/.devcarry/bin
export LD_LIBRARY_PATH="$PWD/.devcarry/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DEVGATE_PLUGIN_DIR="$bin" DEVGATE_BIN="$bin/devgate" DEVGATE_SRC="$PWD"
export DEVGATE_LEDGER="$out/ledger.db" LC_ALL=C PYTHONUNBUFFERED=1
DG=$bin/devgate
nvidia-smi -L 2>&1 | head -2
$DG --version
for t in test_cuda test_verdict test_final_gate; do
  [ -x "$bin/$t" ] || continue
  timeout 120 "$bin/$t" >"$out/$t.log" 2>&1; echo "$t: exit $?: $(tail -1 "$out/$t.log")"
done
echo "== gate: GEMM against the device's FP32 peak"
$DG --no-ledger gate --backend cuda,cpu --size 4096 --json >"$out/gate.json"; echo "gate exit $?"
python3 - "$out/gate.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for b in d["backends"]:
    m = b.get("matmul") or {}
    pk = (b.get("peak") or {}).get("fp32") or {}
    fr = m.get("fraction_of_peak") or {}
    print(b["name"], "gflops %s" % m.get("gflops"), "peak %s GFLOP/s (%s)" % (pk.get("value"), (b.get("peak") or {}).get("source")),
          "fraction %s" % fr.get("value"), "blas", json.dumps((b.get("blas") or {}).get("core")))
PY
echo "== compare: interleaved repetitions, interval"
timeout 200 $DG --no-ledger compare --backend cuda --model mlp --batches 256 --steps 20 --repetitions 5 --json >"$out/compare.json"; echo "compare exit $?"
python3 - "$out/compare.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d.get("runs", []):
    v = lambda x: (x or {}).get("value") if isinstance(x, dict) else x
    ci = r.get("speedup_ci") or {}
    print("batch", r.get("batch"), "speedup %s" % v(r.get("speedup")), "ci", json.dumps({k: v(ci.get(k)) for k in ("lo", "hi")}),
          "p %s" % v((r.get("mann_whitney") or {}).get("p")))
PY
echo "== accept --quick (screening) and the default tier, timed"
for tier in --quick ""; do
  s=$(date +%s.%N)
  timeout 280 $DG accept $tier --backend cuda -o "$out/pack$tier" >"$out/accept$tier.txt" 2>&1; rc=$?
  e=$(date +%s.%N)
  echo "accept $tier: exit $rc in $(python3 -c "print(round($e-$s,1))") s"
  grep -E "^  (env|gate|sweep|memory|soak|baseline|compare|profile) |decision|accepted|screening" "$out/accept$tier.txt" | cut -c1-200
done
echo "== run with the zero-code probe on cuda"
timeout 120 $DG run --sample-ms 100 -o "$out/run-pack" -- python3 tests/python/scripts/plain_train.py --mode item --device cuda --epochs 3 --steps 16 >"$out/run.txt" 2>&1; echo "run exit $?"
grep -E "supervise|host-sync|decision|findings" "$out/run.txt" | head -8
