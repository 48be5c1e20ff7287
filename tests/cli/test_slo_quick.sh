#!/usr/bin/env bash
# devgate slo, the quick tier's check (no server, no torch): usage errors
# exit 2 naming the option, an endpoint nothing listens on is exit 3 with
# nothing recorded, a build without libcurl says so (exit 3). The measuring
# cases are in test_slo.sh and test_slo_more.sh (full tier).
. "$(dirname "$0")/lib.sh"
free_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
U="http://127.0.0.1:$free_port"
FAST=(--duration 1s --warmup 0.2 --window 0.3 --max-tokens 4 --no-env)

# Usage errors: exit 2 with the option named (checked before any request).
expect_exit 2 "$DG" slo --target "$U" --duration 1
expect_grep "$T/err" 'at least one bound'
expect_exit 2 "$DG" slo --target "$U" --slo ttfb:5ms
expect_grep "$T/err" '\-\-slo wants METRIC:LIMIT'
expect_exit 2 "$DG" slo --target "$U" --slo ttft:5ms --rate 3 --concurrency 2
expect_grep "$T/err" 'exclude each other'
expect_exit 2 "$DG" slo --target "$U" --slo ttft:5ms --concurrency 4,2
expect_grep "$T/err" '\-\-concurrency'
expect_exit 2 "$DG" slo --target "ftp://x" --slo ttft:5ms
expect_grep "$T/err" 'not an http:// or https:// URL'
expect_exit 2 "$DG" slo --slo ttft:5ms
expect_grep "$T/err" '\-\-target URL is required'

if "$DG" --no-ledger slo --target "$U" --slo ttft:1s --duration 1 2>&1 | grep -q "without libcurl"; then
  expect_exit 3 "$DG" --no-ledger slo --target "$U" --slo ttft:1s --duration 1
  done_tests
  exit
fi

# Nothing listening: exit 3, nothing recorded.
expect_exit 3 "$DG" slo --target "$U" --concurrency 2 "${FAST[@]}" --slo ttft:1s --label gone
expect_grep "$T/err" "cannot reach http://127.0.0.1:$free_port/v1/completions"
[ ! -e "$DEVGATE_LEDGER" ] && ok || bad "a run that measured nothing was recorded"

done_tests
