#!/usr/bin/env bash
# Sent to a GPU machine (see dev/device-env.sh): the probe's tests with the
# machine's CUDA PyTorch, and accept --quick on the default device.
set -u
. dev/device-env.sh
log="$out/probe.log"
exec > >(tee -a "$log") 2>&1
echo "== probe tests with $(command -v python3) (CUDA torch)"
DEVGATE_PYTHON=$(command -v python3) bash tests/python/run_tests.sh all 2>&1 | grep -E "cuda|gate|leaky|sweep|Ran|OK|FAIL|Error" | head -30
echo "== probe gate and epoch watermarks on cuda"
PYTHONPATH=clients/python DEVGATE_EVENTS_FILE="$out/ev.jsonl" python3 - <<'PY'
import devgate_probe as dg, torch
p = dg.Probe(label="gpu check")
p.run_start("cuda", 256)
print("gate", p.gate("cuda"))
x = torch.randn(4096, 4096, device="cuda")
with p.epoch(0):
    y = x @ x
print("sweep", dg.Probe().sweep(lambda b: torch.randn(b, 1 << 20, device="cuda").sum().item(), start=256, stop=1 << 16, device="cuda"))
p.run_end("ok")
PY
grep '"epoch_end"\|"oom"' "$out/ev.jsonl" | cut -c1-400
echo "== accept --quick (default device)"
/usr/bin/time -f "accept --quick wall %e s" build/devgate accept --quick -o "$out/accept-quick"
echo "exit $?"
