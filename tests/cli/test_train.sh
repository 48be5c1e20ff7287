#!/usr/bin/env bash
# devgate train: golden trajectories against PyTorch, learning on every
# available backend (and failing when the update is broken), the fallback
# census, the memory budget, and bad model strings.
. "$(dirname "$0")/lib.sh"
GOLDEN="${DEVGATE_SRC:?}/tests/data/golden.json"

backends=(cpu)
if "$DG" --no-ledger gate --backend opencl --size 8 >/dev/null 2>&1; then backends+=(opencl); fi
if "$DG" --no-ledger gate --backend cuda --size 8 >/dev/null 2>&1; then backends+=(cuda); fi
echo "backends: ${backends[*]}"

# Golden: the first 20 losses of each preset match PyTorch's from the same
# weights and batches (tests/golden/golden.py wrote the oracle).
for be in "${backends[@]}"; do
  python3 - "$GOLDEN" >"$T/runs.txt" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["runs"]:
    print(r["model"], r["batch"], r["steps"], r["lr"], r["momentum"], r["weight_decay"], r["seed"])
PY
  while read -r model batch steps lr mom wd seed; do
    expect_exit 0 "$DG" --no-ledger train --backend "$be" --model "$model" --batch "$batch" --steps "$steps" \
      --lr "$lr" --momentum "$mom" --weight-decay "$wd" --seed "$seed" --sync-every 1 --threads 1 --json
    cp out "$T/golden-$be-$model.json"
    expect_json out "$(cat <<PY
(lambda g: all(abs(a['loss'] - b) <= 2e-4 * max(1, abs(b)) for a, b in zip(d['loss'], g['losses'])) and len(d['loss']) == len(g['losses']))(
 [r for r in json.load(open('$GOLDEN'))['runs'] if r['model'] == '$model'][0])
PY
)"
  done <"$T/runs.txt"
done

# CPU time per timed step: over the timed steps the process cannot spend more
# than its whole life's CPU time (the rusage of the child), and it does spend
# some; with 40 steps of one thread the timed part is most of that CPU time.
python3 - "$DG" "$T/cpu.json" <<'PY' >"$T/cpu.txt"
import json, os, resource, subprocess, sys
before = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[2], "w") as f:
    subprocess.run([sys.argv[1], "--no-ledger", "train", "--model", "mlp", "--batch", "64", "--steps", "42",
                    "--threads", "1", "--workers", "0", "--json"], stdout=f, check=True)
after = resource.getrusage(resource.RUSAGE_CHILDREN)
print((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1e3)
PY
total_ms=$(cat "$T/cpu.txt")
expect_json "$T/cpu.json" "(lambda t: t['cpu_ms']['valid'] and t['cpu_ms']['unit'] == 'ms' and 0 < t['cpu_ms']['value'] * t['timed_steps'] <= $total_ms)(d['throughput'])"

# Learning: the loss falls well below its start within a few hundred steps.
# One thread: these check learning, not speed, and CI runs tests side by side.
learn() { # backend model batch steps lr
  "$DG" --no-ledger train --backend "$1" --model "$2" --batch "$3" --steps "$4" --sync-every 10 \
    --lr "$5" --threads 1 --json >"$T/learn.json" 2>"$T/err"
}
learned='d["loss"][-1]["loss"] is not None and d["loss"][-1]["loss"] < 0.5 * d["loss"][0]["loss"] and d["loss"][-1]["accuracy"] > 0.6'
for be in "${backends[@]}"; do
  learn "$be" mlp 32 100 0.05 && ok || bad "train mlp on $be failed"
  expect_json "$T/learn.json" "$learned"
  learn "$be" lenet 32 100 0.05 && ok || bad "train lenet on $be failed"
  expect_json "$T/learn.json" "$learned"
  if [ "$be" != opencl ]; then # PoCL runs cifar about 3x slower than the cpu backend
    learn "$be" cifar 16 120 0.01 && ok || bad "train cifar on $be failed"
    expect_json "$T/learn.json" "$learned"
  fi
done

# The same check fails when the update is skipped or climbs the gradient.
DEVGATE_FAULT=sgd-skip@cpu learn cpu mlp 32 100 0.05
expect_json "$T/learn.json" "not ($learned)"
DEVGATE_FAULT=sgd-ascend@cpu learn cpu mlp 32 100 0.05
expect_json "$T/learn.json" "not ($learned)"

# Fallback: conv2d forced onto the cpu gives the same losses and is counted.
if [[ " ${backends[*]} " == *" opencl "* ]]; then
  expect_exit 0 "$DG" --no-ledger train --backend opencl --model lenet --batch 16 --steps 20 --sync-every 1 \
    --lr 0.02 --momentum 0.9 --weight-decay 5e-4 --seed 1 --disable-op conv2d@opencl --threads 1 --json
  expect_json out '[f["op"] for f in d["fallbacks"]].count("conv2d") >= 1'
  expect_json out 'all(f["calls"] > 0 and f["ms_total"] > 0 and f["bytes_d2h"] > 0 and f["bytes_h2d"] > 0 for f in d["fallbacks"] if f["op"] == "conv2d")'
  expect_json out "all(abs(a['loss'] - b['loss']) <= 2e-4 * max(1, abs(b['loss'])) for a, b in zip(d['loss'], json.load(open('$T/golden-opencl-lenet.json'))['loss']))"
  expect_exit 0 "$DG" --no-ledger train --backend opencl --model lenet --batch 16 --steps 20 --disable-op conv2d
  expect_grep out 'conv2d'
fi
# An entry without a backend is for the device: the cpu baseline runs every op
# itself. An op aimed at the cpu, an unknown op or backend: usage errors.
expect_exit 0 "$DG" --no-ledger train --backend cpu --steps 3 --disable-op conv2d --json
expect_json out 'd["fallbacks"] == [] and d["spec"]["disable_ops"] == "conv2d"'
expect_exit 2 "$DG" --no-ledger train --backend cpu --disable-op conv2d@cpu
expect_grep err 'conv2d@cpu: cpu is the fallback backend'
expect_exit 2 "$DG" --no-ledger train --backend opencl --disable-op conv2d@cpu
expect_grep err 'cpu is the fallback backend'
expect_exit 2 "$DG" --no-ledger train --disable-op conv2d@metal
expect_grep err "unknown backend 'metal'"
expect_exit 2 "$DG" --no-ledger train --disable-op frobnicate
expect_grep err 'frobnicate'
# TF32 is opt-in and cuda-only; the default is recorded as exact fp32.
expect_exit 2 "$DG" --no-ledger train --backend cpu --tf32
expect_grep err 'TF32'
# bf16 likewise (--precision; other backends refuse it with a usage error).
expect_exit 2 "$DG" --no-ledger train --backend cpu --precision bf16
expect_grep err 'the cpu backend has no bf16 mode'
expect_exit 2 "$DG" --no-ledger train --backend cpu --precision fp16
expect_grep err 'fp32, tf32 or bf16'
expect_json "$T/golden-cpu-mlp.json" 'd["spec"]["math"] == "fp32"'

# Memory budget: out of memory is reported with the requested size, exit 1.
expect_exit 1 "$DG" --no-ledger train --model cifar --batch 256 --steps 2 --mem-budget 1M --json
expect_json out 'd["status"] == "device-oom" and d["memory"]["allocator"]["oom_events"]["value"] >= 1'
expect_grep err 'requested [0-9]+ bytes'

# Bad models: clear errors, exit 2.
expect_exit 2 "$DG" --no-ledger train --model resnet50
expect_grep err "unknown model 'resnet50'"
expect_exit 2 "$DG" --no-ledger train --model 'conv3x3:,fc:10'
expect_grep err "bad layer 'conv3x3:'"
expect_exit 2 "$DG" --no-ledger train --model 'conv9x9:4,fc:10' --input 1x5x5
expect_grep err 'does not fit'
expect_exit 2 "$DG" --no-ledger train --model 'fc:10,relu'
expect_grep err 'must end with an fc layer'
expect_exit 2 "$DG" --no-ledger train --batch 0
expect_exit 2 "$DG" --no-ledger train --mem-budget lots

# The timed wall holds the steps, not the energy counter's reads around them
# (NVML's take milliseconds, as long as a small step): with each read made
# 500 ms slow, 38 timed steps would gain 26 ms a step; the rate stays that of
# a run without the fault (the sanitizer builds' steps take ~5 ms). The run's
# start is accounted: data, engine, prepare and the untimed first steps.
expect_exit 0 "$DG" --no-ledger train --batch 8 --steps 40 --json
plain_ms=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["throughput"]["step_ms"]["value"])' "$T/out")
DEVGATE_FAULT=health-slow@500 expect_exit 0 "$DG" --no-ledger train --batch 8 --steps 40 --json
expect_json out "d['throughput']['energy_source'].startswith('host') and d['throughput']['step_ms']['valid'] and d['throughput']['step_ms']['value'] < 1.5 * $plain_ms + 10"
expect_json out 'all(d["startup"][k]["valid"] and d["startup"][k]["unit"] == "s" and 0 <= d["startup"][k]["value"] < 30 for k in ("data", "engine", "prepare", "first_steps"))'

# Human output and the ledger.
expect_exit 0 "$DG" train --model mlp --batch 32 --steps 30 --sync-every 10
for label in 'loss' 'speed' 'phases' 'memory' 'fallback' 'recorded as'; do expect_grep out "$label" "train output"; done
expect_exit 0 "$DG" ledger list --json
expect_json out 'd[0]["verb"] == "train"'

done_tests
