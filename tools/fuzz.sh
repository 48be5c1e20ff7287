#!/usr/bin/env bash
# Fuzzes every libFuzzer harness in tests/fuzz in turn (one at a time, with
# AddressSanitizer and UndefinedBehaviorSanitizer), SECONDS each (default 60),
# from the seed corpus; new inputs go to build-fuzz/, never into the tree.
# Prints one row per harness: executions, coverage (edges), corpus size and
# findings (crash, leak, timeout or out-of-memory files). Exit 1 if any harness
# found something; the inputs are kept under build-fuzz/findings/HARNESS/.
#   tools/fuzz.sh [SECONDS] [HARNESS...]
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
command -v clang >/dev/null || { echo "fuzz.sh: clang is needed (apt-get install clang)" >&2; exit 2; }
cmake -S . -B build-fuzz -DDG_FUZZ=ON -DCMAKE_C_COMPILER=clang -DDG_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 2
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do harnesses+=("$(basename "$f" .c)"); done
fi
cmake --build build-fuzz -j"$(nproc)" --target "${harnesses[@]}" >/dev/null || exit 2
found=0
printf '%-22s %8s %12s %10s %8s %s\n' harness seconds execs "cov edges" corpus findings
for h in "${harnesses[@]}"; do
  work=build-fuzz/corpus_$h
  out=build-fuzz/findings/$h
  mkdir -p "$work" "$out"
  log=build-fuzz/$h.log
  (cd "$out" && "../../tests/$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 \
     -print_final_stats=1 "../../../$work" "../../../tests/fuzz/corpus/$h") >"$log" 2>&1
  execs=$(grep -a 'stat::number_of_executed_units' "$log" | awk '{print $2}')
  cov=$(grep -aoE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')
  corp=$(ls "$work" | wc -l)
  n=$(ls "$out" | grep -cE '^(crash|leak|timeout|oom)-')
  [ "$n" -gt 0 ] && found=1
  printf '%-22s %8s %12s %10s %8s %s\n' "$h" "$secs" "${execs:-?}" "${cov:-?}" "$corp" \
    "$([ "$n" -gt 0 ] && echo "$n in $out (log $log)" || echo none)"
done
exit $found
