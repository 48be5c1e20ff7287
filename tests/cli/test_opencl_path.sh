#!/usr/bin/env bash
# The OpenCL backend's two paths through a training step (docs/engine.md,
# DEVGATE_OPENCL_PATH): the fused one (a layer's bias and the ReLU after it in
# the layer's own command, the ReLU's mask in the product before it, xent in
# one command) trains to the very same losses as the old unfused one on every
# preset, with fewer commands a step, each counted in the record; phase marks
# only in the steps that end at a sync point; a bad path is a usage error.
. "$(dirname "$0")/lib.sh"
if ! "$DG" --no-ledger gate --backend opencl --size 8 >/dev/null 2>&1; then
  echo "skipped: no OpenCL device"
  exit 77
fi

for model in mlp lenet cifar; do
  for path in new old; do
    DEVGATE_OPENCL_PATH=$path expect_exit 0 "$DG" --no-ledger train --backend opencl --model "$model" \
      --batch 8 --steps 4 --sync-every 2 --threads 1 --json -q
    cp out "$T/$model-$path.json"
  done
  expect_json "$T/$model-new.json" "$(cat <<PY
(lambda o: [p['loss'] for p in d['loss']] == [p['loss'] for p in o['loss']] and len(d['loss']) == 2
 and d['throughput']['commands_per_step']['valid'] and d['throughput']['commands_per_step']['unit'] == 'commands'
 and 0 < d['throughput']['commands_per_step']['value'] < o['throughput']['commands_per_step']['value']
 and d['throughput']['host_waits_per_step']['valid'])(json.load(open('$T/$model-old.json')))
PY
)"
  python3 -c "import json; n, o = (json.load(open('$T/$model-%s.json' % p))['throughput']['commands_per_step']['value'] for p in ('new', 'old')); print('$model commands a step: fused %s, old path %s' % (n, o))"
done

# Phase marks only where a sync point reads them: syncing every step costs
# five marks a step more than syncing every second step, per two steps.
DEVGATE_OPENCL_PATH=new expect_exit 0 "$DG" --no-ledger train --backend opencl --model mlp \
  --batch 8 --steps 4 --sync-every 1 --threads 1 --json -q
expect_json out "$(cat <<PY
(d['throughput']['commands_per_step']['value'] - json.load(open('$T/mlp-new.json'))['throughput']['commands_per_step']['value'] >= 2.5
 and d['phases']['samples'] >= 1)
PY
)"

DEVGATE_OPENCL_PATH=fast expect_exit 3 "$DG" --no-ledger train --backend opencl --model mlp --batch 8 --steps 2
expect_grep err "DEVGATE_OPENCL_PATH=fast: unknown path"
done_tests
