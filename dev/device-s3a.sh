#!/usr/bin/env bash
# Session 3, first GPU pass: where accept --quick --backend cuda spends its
# time (each step's wall from the pack) and accept -- CMD on an unmodified CUDA
# script with the throughput-plateau stop, to completion. Expects .devcarry
# as dev/device-final2.sh does. Log: $OUT/s3a.log.
set -u
cd "$(dirname "$0")/.."
. dev/device-carry.sh s3a
$DG --version
walls() {
python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(" steps", [(s["name"], s["status"], round((s.get("wall") or {}).get("value") or -1, 1)) for s in d.get("steps", [])])
sw = d.get("sweep") or {}
v = lambda x: x.get("value") if isinstance(x, dict) else x
print(" sweep stop", sw.get("stopped"), "knee", v(sw.get("knee")), "safe", v(sw.get("safe_batch")))
print(" trials", [(t.get("batch"), t.get("ended"), t.get("reason"), round(v(t.get("samples_per_s")) or 0), v(t.get("wall_s"))) for t in sw.get("trials") or []])
for r in (d.get("compare") or {}).get("runs", []):
    print(" compare", r.get("batch"), "speedup", v(r.get("speedup")))
print(" decision", (d.get("decision") or {}).get("route"), (d.get("decision") or {}).get("statement", "")[:300])
print(" findings", [(f["id"], f["severity"]) for f in d["findings"]])
PY
}
for run in 1 2; do
s=$(date +%s.%N)
timeout 120 $DG accept --quick --backend cuda -o "$out/pack-quick$run" >"$out/accept-quick$run.txt" 2>&1; rc=$?
echo "accept --quick --backend cuda #$run: exit $rc in $(python3 -c "print(round($(date +%s.%N)-$s,1))") s"
walls "$out/pack-quick$run/report.json"
done
echo "== accept -- CMD on cuda"
s=$(date +%s.%N)
timeout 300 $DG accept --quick --json -o "$out/pack-cmd" -- python3 tests/python/scripts/accept_train.py \
  --batch '{batch}' --device '{device}' --epochs '{epochs}' --steps 20 --features 256 --hidden 4096 >"$out/accept-cmd.json" 2>"$out/accept-cmd.err"; rc=$?
echo "accept -- CMD: exit $rc in $(python3 -c "print(round($(date +%s.%N)-$s,1))") s"
grep -v -i 'sync_debug\|Synchronization debug' "$out/accept-cmd.err" | tail -8
walls "$out/pack-cmd/report.json"
