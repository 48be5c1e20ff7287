#!/usr/bin/env bash
# devgate slo against a real streaming inference server on the loopback
# (tests/python/scripts/slo_server.py: a small PyTorch model behind aiohttp,
# with planted service times so the percentiles have a known truth).
# Skipped (77) without torch or aiohttp, or in a build without libcurl.
. "$(dirname "$0")/lib.sh"
SRC=${DEVGATE_SRC:?}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
if ! "$PY" -c 'import torch, aiohttp' >/dev/null 2>&1; then
  echo "skipped: torch and aiohttp are not importable by $PY (tools/deps.sh test)"
  exit 77
fi
SERVER="$SRC/tests/python/scripts/slo_server.py"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$T"' EXIT

# start_server NAME ARGS...: the server on a free loopback port; $PORT_NAME set.
start_server() {
  local name=$1; shift
  "$PY" "$SERVER" --port-file "$T/$name.port" "$@" >"$T/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do [ -s "$T/$name.port" ] && break; sleep 0.1; done
  [ -s "$T/$name.port" ] || { echo "FAIL: server $name did not start" >&2; cat "$T/$name.log" >&2; exit 1; }
  printf -v "PORT_$name" '%s' "$(cat "$T/$name.port")"
}

# A build without libcurl says so and exits 3 (the verb's own contract).
if "$DG" --no-ledger slo --target http://127.0.0.1:9 --slo ttft:1s --duration 1 2>&1 | grep -q "without libcurl"; then
  expect_exit 3 "$DG" --no-ledger slo --target http://127.0.0.1:9 --slo ttft:1s --duration 1
  echo "skipped: built without libcurl (checked exit 3)"
  exit 77
fi

# Planted: TTFT uniform on [30, 90] ms, TPOT 3 ms.
start_server main --ttft uniform:30:90 --tpot fixed:3 --seed 7
U="http://127.0.0.1:$PORT_main"
FAST=(--duration 2s --warmup 0.3 --window 0.4 --max-windows 12 --max-tokens 6 --no-env)

# 1. Closed loop, OpenAI SSE: TTFT percentiles hold the planted truth within
# their bootstrap interval, widened by the client and scheduler overhead a
# loaded two-core machine adds: the interval may lie above the truth by at
# most 15 ms + 15% (the request's trip and the event loops), never below it by
# more than 2 ms (nothing makes a token come early); TPOT near 3 ms; tokens as
# the server reported them.
"$DG" slo --json --target "$U" --concurrency 4 "${FAST[@]}" --slo ttft:400ms --slo tpot:60ms \
  --percentile 90 --requests 200 >c1.json 2>c1.err
rc=$?
[ "$rc" -eq 0 ] && ok || { bad "closed loop exited $rc"; sed 's/^/  /' c1.err >&2; }
expect_json c1.json 'd["kind"] == "slo" and d["spec"]["model"] == "tiny-bytes" and d["spec"]["model_source"] == "server"'
expect_json c1.json 'd["levels"][0]["requests"]["sent"] >= 200 and d["levels"][0]["requests"]["ok"] == d["levels"][0]["requests"]["sent"]'
expect_json c1.json 'd["levels"][0]["tokens"]["source"] == "server" and d["levels"][0]["tokens"]["mean"]["value"] == 6'
expect_json c1.json '(lambda ps: all(p["lo"] - 15 - 0.15 * (30 + 60 * p["p"] / 100) <= 30 + 60 * p["p"] / 100 <= p["hi"] + 2 for p in ps if p["p"] in (50, 90)))(d["levels"][0]["latency"]["ttft"]["percentiles"])'
expect_json c1.json 'all(2.5 <= p["value"]["value"] <= 12 for p in d["levels"][0]["latency"]["tpot"]["percentiles"] if p["p"] == 50)'
expect_json c1.json 'd["final_gate"]["signed"] and "hold at 4 concurrent streams with 99% confidence" in d["final_gate"]["statement"]'
expect_json c1.json 'd["levels"][0]["window"]["lock"]["state"] == "held" and d["levels"][0]["window"]["contention"] is not None'
expect_json c1.json 'len(d["levels"][0]["samples"]) == d["levels"][0]["requests"]["sent"] and d["levels"][0]["latency"]["itl"]["n"] > 0'

# 2. Ollama NDJSON through /api/chat: tokens from eval_count.
"$DG" slo --json --target "$U/api/chat" --api ollama --concurrency 2 "${FAST[@]}" \
  --duration 1s --slo e2e:2s --percentile 50 >c2.json 2>c2.err
rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 4 ] && ok || { bad "ollama exited $rc"; sed 's/^/  /' c2.err >&2; }
expect_json c2.json 'd["spec"]["api"] == "ollama" and d["spec"]["chat"] and d["levels"][0]["tokens"]["source"] == "server"'
expect_json c2.json 'd["levels"][0]["requests"]["ok"] > 0 and d["levels"][0]["requests"]["failed"] == 0'

# 3. Too few requests for p99: inconclusive with LoadGen's count, exit 4.
expect_exit 4 "$DG" --no-ledger slo --target "$U" --concurrency 1 "${FAST[@]}" --duration 0.5s \
  --slo ttft:5s
expect_grep "$T/out" 'NOT SIGNED.*inconclusive: n = [0-9]+, at least 459 needed at p99 with none over'

# 4. A bound the planted TTFT cannot meet: missed, exit 1.
expect_exit 1 "$DG" --no-ledger slo --target "$U" --concurrency 2 "${FAST[@]}" --duration 1s \
  --slo ttft:10ms --percentile 50
expect_grep "$T/out" 'not signed: p50 TTFT .+ 10 ms is missed at 2 concurrent streams'

# 5. Failures and timeouts are counted, never dropped: every 5th request
# answers 500, every 7th stops after its first token past the 0.4 s timeout.
start_server faults --ttft fixed:10 --tpot fixed:2 --fail-every 5 --hang-every 7 --hang-s 5
"$DG" slo --json --target "http://127.0.0.1:$PORT_faults" --concurrency 4 "${FAST[@]}" \
  --duration 1.5s --request-timeout 0.4s --slo ttft:1s --percentile 50 >c5.json 2>c5.err
expect_json c5.json '(lambda r: r["failed"] > 0 and r["timeouts"] > 0 and r["ok"] + r["failed"] + r["timeouts"] + r["aborted"] == r["sent"])(d["levels"][0]["requests"])'
expect_json c5.json 'any(e["what"] == "HTTP 500" for e in d["levels"][0]["requests"]["errors"])'
expect_json c5.json '(lambda l: l["verdict"]["bounds"][0]["over"] >= l["requests"]["failed"] + l["requests"]["timeouts"])(d["levels"][0])'

# 6. Open loop: seeded Poisson arrivals at 20/s.
"$DG" slo --json --target "$U" --rate 20 --seed 3 "${FAST[@]}" --duration 1.5s --slo e2e:3s \
  --percentile 50 >c6.json 2>c6.err
expect_json c6.json 'd["spec"]["mode"] == "open" and d["levels"][0]["concurrency"] is None'
expect_json c6.json '10 <= d["levels"][0]["requests"]["sent"] <= 60'

# 7. A server that dies part way: a clear error, exit 1, the record kept.
start_server dies --ttft fixed:5 --tpot fixed:1 --die-after 60
expect_exit 1 "$DG" slo --target "http://127.0.0.1:$PORT_dies" --concurrency 4 "${FAST[@]}" \
  --duration 3s --slo ttft:1s --label dying
expect_grep "$T/err" 'stopped answering after [0-9]+ answered requests.*the record is kept'
"$DG" ledger list --json >list.json 2>/dev/null
expect_json list.json 'any(r["verb"] == "slo" and r.get("label") == "dying" for r in d)'

# 8. Nothing listening: exit 3, nothing recorded.
expect_exit 3 "$DG" slo --target "http://127.0.0.1:$PORT_dies" --concurrency 2 "${FAST[@]}" \
  --slo ttft:1s --label gone
expect_grep "$T/err" 'cannot reach http://127.0.0.1:[0-9]+/v1/completions'

# 9. Usage errors: exit 2 with the option named.
expect_exit 2 "$DG" slo --target "$U" --duration 1
expect_grep "$T/err" 'at least one bound'
expect_exit 2 "$DG" slo --target "$U" --slo ttfb:5ms
expect_grep "$T/err" '\-\-slo wants METRIC:LIMIT'
expect_exit 2 "$DG" slo --target "$U" --slo ttft:5ms --rate 3 --concurrency 2
expect_grep "$T/err" 'exclude each other'
expect_exit 2 "$DG" slo --target "$U" --slo ttft:5ms --concurrency 4,2
expect_exit 2 "$DG" slo --target "ftp://x" --slo ttft:5ms
expect_grep "$T/err" 'not an http:// or https:// URL'

done_tests
