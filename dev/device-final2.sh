#!/usr/bin/env bash
# Sent to a GPU machine after issues 11-16's second round: the CUDA tests
# (pinned uploads), accept --quick on cuda (time to evidence), the zero-code
# probe's CUDA sync debug count on a script reading .item() every step, and
# accept -- CMD on an unmodified CUDA PyTorch script (gate, sweep with child
# runs, the interleaved cpu baseline, soak, profile). Expects .devcarry/bin
# (devgate, libdevgate-cuda.so, python/, test_cuda) and .devcarry/root.
# Log: $OUT/final2.log.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/devgate-device}
mkdir -p "$out"
exec > >(tee -a "$out/final2.log") 2>&1
bin=$PWD/.devcarry/bin
export LD_LIBRARY_PATH="$PWD/.devcarry/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DEVGATE_PLUGIN_DIR="$bin" DEVGATE_BIN="$bin/devgate" DEVGATE_SRC="$PWD"
export DEVGATE_LEDGER="$out/ledger.db" LC_ALL=C PYTHONUNBUFFERED=1
DG=$bin/devgate
nvidia-smi -L 2>&1 | head -1
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
$DG --version
timeout 150 "$bin/test_cuda" >"$out/test_cuda.log" 2>&1; echo "test_cuda: exit $?: $(tail -1 "$out/test_cuda.log")"
s=$(date +%s.%N)
timeout 120 $DG accept --quick --backend cuda -o "$out/pack-quick" >"$out/accept-quick.txt" 2>&1; rc=$?
echo "accept --quick --backend cuda: exit $rc in $(python3 -c "print(round($(date +%s.%N)-$s,1))") s"
grep -E "accepted|not accepted|route|speedup" "$out/accept-quick.txt" | head -5
echo "== devgate run: .item() every step on cuda, sync debug mode"
timeout 90 $DG run --json --sample-ms 100 -- python3 tests/python/scripts/plain_train.py --mode item --device cuda --epochs 3 --steps 16 >"$out/run-item.json" 2>"$out/run-item.err"; echo "run exit $?"
python3 - "$out/run-item.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
sp = (d.get("profile") or {}).get("sync_points") or {}
print("sync_points", json.dumps({k: sp.get(k) for k in ("device_syncs", "device_syncs_per_step", "device_syncs_source", "device_syncs_why")}))
print("findings", [(f["id"], f["severity"]) for f in d["findings"]])
PY
echo "== accept -- CMD on cuda"
s=$(date +%s.%N)
timeout 240 $DG accept --quick --json -o "$out/pack-cmd" -- python3 tests/python/scripts/accept_train.py \
  --batch '{batch}' --device '{device}' --epochs '{epochs}' --steps 20 --features 256 --hidden 4096 >"$out/accept-cmd.json" 2>"$out/accept-cmd.err"; rc=$?
echo "accept -- CMD: exit $rc in $(python3 -c "print(round($(date +%s.%N)-$s,1))") s"
tail -12 "$out/accept-cmd.err"
python3 - "$out/accept-cmd.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
v = lambda x: x.get("value") if isinstance(x, dict) else x
sw = d.get("sweep") or {}
print("sweep trials", [(t.get("batch"), t.get("outcome") or t.get("status"), v(t.get("samples_per_s"))) for t in sw.get("trials", [])])
print("knee", v(sw.get("knee")), "safe", v(sw.get("safe_batch")))
for r in (d.get("compare") or {}).get("runs", []):
    print("compare batch", r.get("batch"), "speedup", v(r.get("speedup")), "ci", json.dumps({k: v((r.get("speedup_ci") or {}).get(k)) for k in ("lo", "hi")}))
ph = ((d.get("profile") or {}).get("phases")) or {}
print("profile phases", {k: v((p or {}).get("share")) for k, p in ph.items()} if isinstance(ph, dict) else ph)
print("decision", json.dumps((d.get("decision") or {}).get("route")), "final", json.dumps(d.get("final_gate") or d.get("accepted")))
print("findings", [(f["id"], f["severity"]) for f in d["findings"]])
PY
