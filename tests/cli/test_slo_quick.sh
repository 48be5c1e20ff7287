#!/usr/bin/env bash
# devgate slo, the quick tier's check (no Python server, no torch): usage
# errors exit 2 naming the option (the fixture's options too), one short level
# against devgate's own fixture (--target fixture), an endpoint nothing
# listens on is exit 3 with nothing recorded, a build without libcurl says so
# (exit 3). The longer cases are in test_slo.sh, test_slo_more.sh,
# test_slo_fixture.sh and test_slo_team.sh (full tier).
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

# The fixture's options: usage errors naming them.
expect_exit 2 "$DG" slo --target http://127.0.0.1:9 --backend cpu --slo ttft:1s
expect_grep "$T/err" '\-\-backend and \-\-batch are the fixture'"'"'s: give \-\-target fixture'
expect_exit 2 "$DG" slo --target fixture --api ollama --slo ttft:1s
expect_grep "$T/err" 'the fixture speaks OpenAI'
expect_exit 2 "$DG" slo --target fixture --model nosuch --slo ttft:1s
expect_grep "$T/err" "unknown model 'nosuch'"
expect_exit 2 "$DG" slo --target fixture --backend tpu --slo ttft:1s
expect_grep "$T/err" '\-\-backend tpu: not a backend devgate knows'
expect_exit 2 "$DG" __slo_fixture --backend cpu
expect_grep "$T/err" '\-\-listen-fd is required'

# One level against the fixture (mlp on cpu, served by devgate __slo_fixture
# on a loopback port): streamed, counted by the server, the fixture named.
OMP_NUM_THREADS=1 "$DG" slo --json --target fixture "${FAST[@]}" --max-windows 20 --slo ttft:2s \
  --percentile 50 --label fxq >fq.json 2>fq.err
rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 4 ] && ok || { bad "the fixture run exited $rc"; sed 's/^/  /' fq.err >&2; }
expect_json fq.json 'd["spec"]["fixture"]["backend"] == "cpu" and d["spec"]["fixture"]["ended"] == "stopped at the end of the run" and d["levels"][0]["requests"]["ok"] > 0 and d["levels"][0]["tokens"]["source"] == "server"'

# Nothing listening: exit 3, nothing recorded.
expect_exit 3 "$DG" slo --target "$U" --concurrency 2 "${FAST[@]}" --slo ttft:1s --label gone
expect_grep "$T/err" "cannot reach http://127.0.0.1:$free_port/v1/completions"
"$DG" ledger list --json >list.json 2>/dev/null
expect_json list.json '[r["label"] for r in d if r["verb"] == "slo"] == ["fxq"]'

done_tests
