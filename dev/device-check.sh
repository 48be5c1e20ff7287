#!/usr/bin/env bash
# Runs the built tree on a GPU machine: versions, env, gate on every backend,
# the unit tests and the CLI tests. Expects build/ (and, where cJSON is not
# installed, .devcarry/root with Debian's libcjson) carried beside the sources.
# Writes logs under $OUT when set.
set -u
cd "$(dirname "$0")/.."
. dev/device-env.sh
nvidia-smi -L 2>&1 | head -4
build/devgate --version
build/devgate env >"$out/env.txt" 2>&1; echo "env exit $?"; head -40 "$out/env.txt"
build/devgate gate; echo "gate exit $?"
build/devgate gate --json >"$out/gate.json"; echo "gate --json exit $?"
build/devgate gate --backend cuda --size 4096 --reps 10; echo "exit $?"
build/devgate gate --backend opencl --size 2048 --reps 5; echo "exit $?"
DEVGATE_FAULT=gemm-corrupt@cuda build/devgate gate --backend cuda --size 256; echo "corrupt cuda exit $? (want 1)"
for t in build/tests/test_*; do
  [ -x "$t" ] || continue
  "$t" >"$out/$(basename "$t").log" 2>&1; rc=$?
  echo "$(basename "$t"): exit $rc: $(tail -1 "$out/$(basename "$t").log")"
done
for s in tests/cli/test_*.sh; do
  bash "$s" >"$out/$(basename "$s").log" 2>&1; rc=$?
  echo "$(basename "$s"): exit $rc: $(tail -1 "$out/$(basename "$s").log")"
done
build/devgate ledger list
