#!/usr/bin/env bash
# On a GPU machine: tests that need the GPU, the allocator at the real device
# limit, and the speed comparison with PyTorch (TF32 default and plain fp32).
set -u
cd "$(dirname "$0")/.."
. dev/device-env.sh
DG=build/devgate
for t in test_cuda test_ops test_alloc test_dispatch; do
  build/tests/$t >"$out/$t.log" 2>&1; echo "$t: exit $?: $(tail -1 "$out/$t.log")"
done
for s in test_train test_data; do
  bash tests/cli/$s.sh >"$out/$s.log" 2>&1; echo "$s.sh: exit $?: $(tail -1 "$out/$s.log")"
  grep -E '^FAIL|backends' "$out/$s.log" | head -5
done
echo "== allocator at the real device limit"
$DG --no-ledger train --backend cuda --model cifar --batch 300000 --steps 2 --samples 1024 --json >"$out/oom.json" 2>"$out/oom.err"
echo "exit $? (want 1)"; cat "$out/oom.err" | head -3
python3 -c "import json; d=json.load(open('$out/oom.json')); print(d['status'], {k: v['value'] for k, v in d['memory']['allocator'].items()})"
$DG --no-ledger train --backend cuda --model cifar --batch 1024 --steps 30 | grep -E 'train|speed|phases|memory|capture'
$DG --no-ledger gate --backend cuda --json | python3 -c "import json,sys; print(json.load(sys.stdin)['backends'][0]['versions'])"
python3 bench/train_vs_torch.py --devgate $DG --backend cuda --presets cifar --batches 1024,4096 --steps 20 --repeats 3
python3 bench/train_vs_torch.py --devgate $DG --backend cuda --presets cifar --batches 1024,4096 --steps 20 --repeats 3 --torch-fp32
python3 bench/train_vs_torch.py --devgate $DG --backend cuda --presets mlp,lenet --batches 32,64,128,256 --steps 200 --repeats 3
