#!/usr/bin/env bash
# Sent to a GPU machine: the zero-code probe on its CUDA PyTorch (2.x), with
# Python alone (no devgate build needed): the probe's torch tests, the test
# script in each mode on cuda through `python -m devgate_probe.auto` with the
# events in a file, the figures held against the script's own, and
# bench/probe_overhead.py on cuda. Log: $OUT/probe-zero.log.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/devgate-device}
mkdir -p "$out"
exec > >(tee -a "$out/probe-zero.log") 2>&1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
py=$(command -v python3)
nvidia-smi -L 2>&1 | head -2
"$py" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'
echo "== probe tests (TorchTests, ZeroCodeTests) with $py"
DEVGATE_PYTHON=$py timeout 150 bash tests/python/run_tests.sh torch 2>&1 | grep -E "^test_|Ran|OK|FAIL|Error|skipped" | head -60
echo "== tests/python/scripts/plain_train.py on cuda through python -m devgate_probe.auto"
for m in healthy retain slow-data item; do
  rm -f "$out/ev-$m.jsonl"
  DEVGATE_EVENTS_FILE="$out/ev-$m.jsonl" PYTHONPATH=clients/python timeout 120 "$py" -m devgate_probe.auto \
    tests/python/scripts/plain_train.py --mode "$m" --device cuda --epochs 4 --steps 16 --truth "$out/truth-$m.json"
  echo "$m exit $?"
  "$py" - "$m" "$out/ev-$m.jsonl" "$out/truth-$m.json" <<'PY'
import json, sys
m, evf, trf = sys.argv[1:4]
ev = [json.loads(l) for l in open(evf)]
t = json.load(open(trf))
st = [e for e in ev if e["ev"] == "step"]
ends = [e for e in ev if e["ev"] == "epoch_end"]
start = next(e for e in ev if e["ev"] == "run_start")
gate = next((e for e in ev if e["ev"] == "gate"), None)
loop = sum(e["step_ms"] + (e["data_ms"] or 0) for e in st) / 1e3
share = sum(e["data_ms"] or 0 for e in st) / 1e3 / loop
sps = sum(e.get("batch", 0) for e in st) / loop
print(" run_start device %s probe %s; gate %s matmul ok %s" % (start["device"], start["probe"], gate and gate["device"], gate and gate["matmul"] and gate["matmul"]["ok"]))
print(" steps %d, epochs %d; data share %.3f (truth %.3f); samples/s %.0f (truth %.0f); host reads/step %.2f" % (
    len(st), len(ends), share, t["slept_s"] / t["loop_s"], sps, t["samples"] / t["loop_s"], sum(e["syncs"] for e in st) / len(st)))
print(" allocated MiB per epoch", [round(e["allocated"] / 2**20, 1) if e["allocated"] is not None else None for e in ends],
      "reserved", [round(e["reserved"] / 2**20, 1) if e["reserved"] is not None else None for e in ends][-1:],
      "cache_emptied", ends[-1]["cache_emptied"] if ends else None)
PY
done
echo "== bench/probe_overhead.py on cuda"
timeout 150 "$py" bench/probe_overhead.py --device cuda --pairs 4 --steps 200
echo "== bench/probe_overhead.py on cpu (4 threads)"
timeout 90 "$py" bench/probe_overhead.py --device cpu --pairs 4 --steps 60 --threads 4
