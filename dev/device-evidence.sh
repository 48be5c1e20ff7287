#!/usr/bin/env bash
# Sent to a GPU machine (see dev/device-env.sh): accept on its default device,
# the Python probe on cuda, devgate run with NVML sampling on cpu and cuda, and
# compare of the two runs. Results under $OUT.
set -u
. dev/device-env.sh
export PYTHONPATH="$PWD/clients/python"
log="$out/evidence.log"
exec > >(tee -a "$log") 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'

echo "== accept --quick (default device)"
/usr/bin/time -f "accept --quick wall %e s" build/devgate accept --quick -o "$out/accept-quick"
echo "exit $?"
echo "== accept (full default)"
/usr/bin/time -f "accept wall %e s" timeout 420 build/devgate accept -o "$out/accept-full"
echo "exit $?"

echo "== probe tests (torch with cuda)"
bash tests/python/run_tests.sh all 2>&1 | tail -15

echo "== devgate run: the same script on cpu and on cuda"
S=tests/python/scripts/leaky_train.py
build/devgate run --label cpu -o "$out/run-cpu" -- python3 $S --device cpu --threads 4
echo "exit $?"
build/devgate run --label cuda -o "$out/run-cuda" -- python3 $S --device cuda
echo "exit $?"
build/devgate run --label cuda-leak -o "$out/run-cuda-leak" -- python3 $S --device cuda --keep-losses
echo "exit $?"
python3 - "$out" <<'PY'
import json, sys
for name in ("run-cpu", "run-cuda", "run-cuda-leak"):
    d = json.load(open(f"{sys.argv[1]}/{name}/report.json"))
    s = d["supervise"]["samples"]
    g = d["soak"]["soak"]["growth"] if d.get("soak") else {}
    print(name, "gpu_mem_peak", s.get("gpu_mem_peak"), "source", s.get("gpu_source"))
    print("   growth", {k: (v or {}).get("value") for k, v in g.items()})
    print("   findings", [(f["id"], f["severity"]) for f in d["findings"]], "route", d["decision"]["route"])
PY
echo "== compare RUN_A RUN_B (cpu vs cuda)"
build/devgate compare "$out/run-cpu/report.json" "$out/run-cuda/report.json"
echo "exit $?"
build/devgate ledger list
