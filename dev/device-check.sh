#!/usr/bin/env bash
# Runs the built tree on a GPU machine: versions, env, gate on every backend,
# the unit tests and the CLI tests. Expects build/ (and, where cJSON is not
# installed, .devcarry/root with Debian's libcjson) carried beside the sources.
# Writes logs under $OUT when set.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/devgate-check}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/.devcarry/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DEVGATE_PLUGIN_DIR="$PWD/build" DEVGATE_BIN="$PWD/build/devgate" DEVGATE_SRC="$PWD"
export DEVGATE_LEDGER="$out/ledger.db" LC_ALL=C
# The image lists only PoCL in /etc/OpenCL/vendors; add NVIDIA's ICD beside it.
nv=$(ls /usr/local/nvidia/lib64/libnvidia-opencl.so.1 2>/dev/null)
if [ -n "$nv" ]; then
  mkdir -p "$out/icd"
  echo "$nv" >"$out/icd/nvidia.icd"
  cp /etc/OpenCL/vendors/*.icd "$out/icd/" 2>/dev/null
  export OCL_ICD_VENDORS="$out/icd"
fi
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
