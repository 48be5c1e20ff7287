#!/usr/bin/env bash
# Sent to a GPU machine for issue 15 (fixture speed on cuda): the CUDA tests
# (also against a plug-in built with the copy-stream wait taken out, which
# test_cuda must catch), a cuda-vs-float64 trajectory compare (the trainer's
# double-buffered page-locked batches), per-op profiles of the two slowest
# cells, and bench/fixture_vs_torch.py against PyTorch with CUDA graphs in
# fp32 and TF32. Expects the carried binaries in .devcarry/bin (devgate,
# libdevgate-cuda.so, python/, test_cuda, test_ops), the broken plug-in in
# .devcarry/broken, Debian's runtime libraries in .devcarry/root (or the
# same under $CARRY).
# Log: $OUT/speed.log, bench rounds: $OUT/bench-*.json.
# CARRY names another carry folder (default .devcarry beside dev/).
set -u
cd "$(dirname "$0")/.."
carry=$(cd "${CARRY:-.devcarry}" && pwd)
out=${OUT:-/tmp/devgate-device}
mkdir -p "$out"
exec > >(tee -a "$out/speed.log") 2>&1
bin=$carry/bin
export LD_LIBRARY_PATH="$carry/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DEVGATE_PLUGIN_DIR="$bin" DEVGATE_BIN="$bin/devgate" DEVGATE_SRC="$PWD"
export DEVGATE_LEDGER="$out/ledger.db" LC_ALL=C PYTHONUNBUFFERED=1
DG=$bin/devgate
rounds=${ROUNDS:-2}
steps=${STEPS:-60}
# STAGE=followup (the second call): test_cuda again, then only the cells the
# first pass left below 1: mlp and lenet at 1024 and 4096 with 8 loader
# workers (the first pass's profile had the step waiting on the loader), cifar
# at 1024 and 4096 in TF32 (cuDNN workspace cap) and fp32.
stage=${STAGE:-full}
nvidia-smi -L 2>&1 | head -2
if [ "$stage" = followup ]; then
  timeout 90 "$bin/test_cuda" >"$out/test_cuda.log" 2>&1; echo "test_cuda: exit $?: $(tail -1 "$out/test_cuda.log")"
  grep -E "cudnn: fwd\+bwd|im2col: fwd\+bwd" "$out/test_cuda.log"
  B="python3 bench/fixture_vs_torch.py --devgate $DG --backend cuda --graph --rounds $rounds --steps $steps"
  echo "== fp32, devgate with 2 (default) and 8 loader workers"
  timeout 45 $B --presets mlp,lenet --batches 1024,4096 --json "$out/bench-fp32-w2.json"
  timeout 45 $B --presets mlp,lenet --batches 1024,4096 --workers 8 --json "$out/bench-fp32-w8.json"
  echo "== cifar, cuDNN workspace up to an eighth of free memory"
  timeout 45 $B --presets cifar --batches 1024,4096 --tf32 --json "$out/bench-tf32-cifar.json"
  timeout 40 $B --presets cifar --batches 4096 --json "$out/bench-fp32-cifar.json"
  timeout 20 $DG --no-ledger train --backend cuda --model cifar --batch 4096 --steps 5 --tf32 --json -q |
    python3 -c 'import json,sys; print("cifar 4096 tf32:", json.load(sys.stdin)["device"]["versions"])'
  exit 0
fi
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
for t in test_cuda test_ops; do
  timeout 90 "$bin/$t" >"$out/$t.log" 2>&1; echo "$t: exit $?: $(tail -1 "$out/$t.log")"
done
grep -E "^device 0|^versions|ms|GFLOP" "$out/test_cuda.log" | head -20
echo "== test_cuda against the plug-in without the copy-stream wait (must fail)"
DEVGATE_PLUGIN_DIR=$carry/broken timeout 60 "$bin/test_cuda" >"$out/test_cuda_broken.log" 2>&1
echo "broken: exit $?: $(grep -m2 -E 'CHECK failed' "$out/test_cuda_broken.log")"
echo "== compare: cuda against cpu and the float64 trajectory"
timeout 60 $DG --no-ledger compare --backend cuda --model mlp --batches 256 --steps 20 --repetitions 1 \
  >"$out/compare.txt" 2>&1; echo "compare exit $?"; grep -iE "loss|numerics|trajectory|speedup" "$out/compare.txt" | head -6
echo "== per-op profiles"
for cell in "mlp 4096" "cifar 1024"; do
  set -- $cell
  timeout 60 $DG --no-ledger profile --backend cuda --model $1 --batch $2 --warmup 5 --window 20 \
    --trace "$out/trace-$1.json" 2>&1 | sed -n '1,12p;/ops /,/more rows/p'
done
echo "== bench: fp32 both (PyTorch TF32 off), PyTorch step as a CUDA graph"
timeout ${FP32_S:-130} python3 bench/fixture_vs_torch.py --devgate "$DG" --backend cuda --graph \
  --batches 32,256,1024,4096 --rounds "$rounds" --steps "$steps" --json "$out/bench-fp32.json"
echo "== bench: devgate --tf32 against PyTorch's TF32 defaults, CUDA graph"
timeout ${TF32_S:-100} python3 bench/fixture_vs_torch.py --devgate "$DG" --backend cuda --graph --tf32 \
  --batches 32,256,1024,4096 --rounds "$rounds" --steps "$steps" --json "$out/bench-tf32.json"
