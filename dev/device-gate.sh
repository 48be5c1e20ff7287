#!/usr/bin/env bash
# The gate helper's GPU pass (verdict integrity, after issue 13's H200 run), under 4 minutes:
#  1. devgate run of tests/python/scripts/accept_train.py on cuda at batch 2048 (2 epochs of
#     20 steps): the run record's headline samples/s (now the steady rate after the 2 warm-up
#     steps), its basis, the whole run's rate beside it, and the supervise line;
#  2. accept --quick -- CMD of the same script (as dev/device-cmd.sh quick): the sweep's
#     trials, knee and safe batch, the decision's batch reason and the final gate: the
#     statement must promise the best rate at or below the safe batch (the knee, 2048 in
#     session 3, not 8192 where the rate had fallen to a third) and name the safe batch
#     apart; final_gate.batch and final_gate.safe_batch printed.
# Expects .devcarry as dev/device-cmd.sh does (bin/ with devgate, libdevgate-cuda.so and
# python/ from build-cuda; root/ with the Debian runtime libs), python3 with torch (CUDA)
# on PATH. Log: $OUT/gate.log.
set -u
cd "$(dirname "$0")/.."
. dev/device-carry.sh gate
SCRIPT=tests/python/scripts/accept_train.py
ARGS=(--steps 20 --features 256 --hidden 4096)
$DG --version
secs() { python3 -c "import sys; print(round($(date +%s.%N) - float(sys.argv[1]), 1))" "$1"; }

echo "== 1. devgate run at batch 2048 on cuda: the headline rate"
s=$(date +%s.%N)
timeout 60 $DG --no-ledger run --no-env -o "$out/run-b2048" -- python3 "$SCRIPT" --batch 2048 \
  --device cuda --epochs 2 "${ARGS[@]}" >"$out/run-b2048.out" 2>"$out/run-b2048.err"
echo " exit $? in $(secs "$s") s"
grep 'supervise' "$out/run-b2048.out"
python3 - "$out/run-b2048/report.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["throughput"]
v = lambda k: (t.get(k) or {}).get("value")
print(" headline %s samples/s (%s: %s)" % (v("samples_per_s"), t.get("samples_per_s_basis"), t.get("samples_per_s_note")))
print(" whole run %s, after warm-up %s, timed steps %s" % (v("samples_per_s_whole_run"), v("samples_per_s_after_warmup"), t.get("timed_steps")))
PY

echo "== 2. accept --quick -- CMD on cuda: what the final gate promises"
s=$(date +%s.%N)
timeout 200 $DG accept --quick --json -o "$out/pack-gate-quick" -- python3 "$SCRIPT" \
  --batch '{batch}' --device '{device}' --epochs '{epochs}' "${ARGS[@]}" \
  >"$out/accept-gate-quick.json" 2>"$out/accept-gate-quick.err"
echo " exit $? in $(secs "$s") s"
python3 - "$out/pack-gate-quick/report.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
v = lambda x: x.get("value") if isinstance(x, dict) else x
sw = d.get("sweep") or {}
print(" sweep stop", sw.get("stopped"), "knee", (sw.get("knee") or {}).get("batch"),
      "safe", (sw.get("safe_batch") or {}).get("batch"))
for t in (sw.get("trials") or []) + (sw.get("bisect") or []):
    print("  trial b%-7s %-10s sps %s" % (t.get("batch"), t.get("ended"), round(v(t.get("samples_per_s")) or 0)))
dec = d.get("decision") or {}
print(" decision", dec.get("route"), dec.get("backend"))
for r in dec.get("reasons") or []:
    print("  reason:", r[:300])
g = d.get("final_gate") or {}
print(" final_gate.batch", g.get("batch"), "throughput", v(g.get("throughput")), "safe_batch", g.get("safe_batch"))
print(" final gate", g.get("statement", "")[:400])
PY
