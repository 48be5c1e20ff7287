#!/usr/bin/env bash
# Fuzzes every libFuzzer harness in tests/fuzz (AddressSanitizer and
# UndefinedBehaviorSanitizer, undefined behaviour a finding too), SECONDS each
# (default 60), from the seed corpus; new inputs go to the work folder, never
# into the tree. Prints one row per harness: executions, coverage (edges),
# corpus size and findings (crash, leak, timeout or out-of-memory files).
# Exit 1 if any harness found something; the inputs are kept under
# WORK/findings/HARNESS/.
#   tools/fuzz.sh [SECONDS] [HARNESS...]
#   FUZZ_JOBS=16 tools/fuzz.sh 180     16 harnesses at a time (default 1)
# More settings:
#   FUZZ_BIN=DIR       run the harnesses built there (no clang needed: see
#                      dev/fuzz-carry.sh); default: build them into build-fuzz
#   FUZZ_WORK=DIR      corpora, findings and logs (default build-fuzz)
#   FUZZ_TIMEOUT=S     one input's limit before it counts as a hang (default 10)
#   FUZZ_BUILD_ONLY=1  build the harnesses into build-fuzz and stop
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
secs=${1:-60}
shift || true
jobs=${FUZZ_JOBS:-1}
work=${FUZZ_WORK:-build-fuzz}
case "$secs$jobs" in *[!0-9]*) echo "fuzz.sh: SECONDS and FUZZ_JOBS are whole numbers" >&2; exit 2 ;; esac
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do harnesses+=("$(basename "$f" .c)"); done
fi
if [ -n "${FUZZ_BIN:-}" ]; then
  bin=$(cd "$FUZZ_BIN" && pwd) || exit 2
else
  command -v clang >/dev/null || { echo "fuzz.sh: clang is needed (apt-get install clang), or FUZZ_BIN" >&2; exit 2; }
  cmake -S . -B build-fuzz -DDG_FUZZ=ON -DCMAKE_C_COMPILER=clang -DDG_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 2
  cmake --build build-fuzz -j"$(nproc)" --target "${harnesses[@]}" >/dev/null || exit 2
  bin=$root/build-fuzz/tests
fi
[ -n "${FUZZ_BUILD_ONLY:-}" ] && exit 0
for h in "${harnesses[@]}"; do
  [ -x "$bin/$h" ] || { echo "fuzz.sh: no harness $bin/$h" >&2; exit 2; }
done
mkdir -p "$work" && work=$(cd "$work" && pwd)
# Undefined behaviour stops the input like a crash, with its stack.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

# One harness: fuzzes, then writes its table row to WORK/HARNESS.row.
one() {
  local h=$1 corpus=$work/corpus_$1 out=$work/findings/$1 log=$work/$1.log
  mkdir -p "$corpus" "$out"
  (cd "$out" && "$bin/$h" -max_total_time="$secs" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=4096 \
     -print_final_stats=1 "$corpus" "$root/tests/fuzz/corpus/$h") >"$log" 2>&1
  local execs cov corp n
  execs=$(grep -a 'stat::number_of_executed_units' "$log" | awk '{print $2}')
  cov=$(grep -aoE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')
  corp=$(ls "$corpus" | wc -l)
  n=$(ls "$out" | grep -cE '^(crash|leak|timeout|oom|slow-unit)-')
  printf '%-22s %8s %12s %10s %8s %s\n' "$h" "$secs" "${execs:-?}" "${cov:-?}" "$corp" \
    "$([ "$n" -gt 0 ] && echo "$n in $out (log $log)" || echo none)" >"$work/$h.row"
}

echo "fuzz.sh: ${#harnesses[@]} harnesses, $secs s each, $jobs at a time" >&2
header() { printf '%-22s %8s %12s %10s %8s %s\n' harness seconds execs "cov edges" corpus findings; }
[ "$jobs" -le 1 ] && header
running=0
for h in "${harnesses[@]}"; do
  rm -f "$work/$h.row"
  if [ "$jobs" -le 1 ]; then
    one "$h"
    cat "$work/$h.row"
    continue
  fi
  one "$h" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait
found=0
if [ "$jobs" -gt 1 ]; then
  header
  for h in "${harnesses[@]}"; do
    cat "$work/$h.row" 2>/dev/null || printf '%-22s did not report\n' "$h"
  done
fi
for h in "${harnesses[@]}"; do
  grep -q ' none$' "$work/$h.row" 2>/dev/null || found=1
done
exit $found
