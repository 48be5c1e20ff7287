#!/usr/bin/env bash
# On a GPU machine: the op tests, the training tests and the speed comparison
# against PyTorch for the cuda backend (and the OpenCL backend on the same GPU).
# Expects build/ and .devcarry/root (Debian runtime libraries) carried.
set -u
cd "$(dirname "$0")/.."
. dev/device-env.sh
DG=build/devgate
for t in test_cuda test_ops; do
  build/tests/$t >"$out/$t.log" 2>&1; echo "$t: exit $?: $(tail -1 "$out/$t.log")"
done
bash tests/cli/test_train.sh >"$out/test_train.log" 2>&1; echo "test_train.sh: exit $?: $(tail -1 "$out/test_train.log")"
grep -E '^FAIL|backends' "$out/test_train.log" | head
for m in mlp lenet cifar; do
  $DG --no-ledger train --backend cuda --model $m --batch 128 --steps 100 | grep -E 'speed|phases|capture'
done
$DG --no-ledger train --backend cuda --model mlp --batch 64 --steps 100 --no-capture | grep -E 'speed|capture'
$DG --no-ledger train --backend cuda --model mlp --batch 64 --steps 100 --sync-every 1 | grep -E 'speed|capture'
$DG --no-ledger train --backend opencl --model mlp --batch 128 --steps 100 | grep -E 'train|speed'
$DG --no-ledger train --backend opencl --model cifar --batch 256 --steps 20 | grep -E 'speed'
python3 bench/train_vs_torch.py --devgate $DG --backend cuda --presets mlp,lenet --batches 32,64,128,256 --steps 200 --repeats 3
python3 bench/train_vs_torch.py --devgate $DG --backend cuda --presets cifar --batches 1024,4096 --steps 20 --repeats 3
python3 bench/gemm_vs_vendor.py --devgate $DG --backend cuda --sizes 1024,4096
