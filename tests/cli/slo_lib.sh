# Shared by the devgate slo tests (test_slo.sh, test_slo_more.sh): lib.sh,
# the loopback inference server (tests/python/scripts/slo_server.py) and
# start_server; skips (77) without torch or aiohttp, or in a build without
# libcurl (after checking that such a build says so and exits 3).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
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

if "$DG" --no-ledger slo --target http://127.0.0.1:9 --slo ttft:1s --duration 1 2>&1 | grep -q "without libcurl"; then
  expect_exit 3 "$DG" --no-ledger slo --target http://127.0.0.1:9 --slo ttft:1s --duration 1
  echo "skipped: built without libcurl (checked exit 3)"
  exit 77
fi
FAST=(--duration 2s --warmup 0.3 --window 0.4 --max-windows 12 --max-tokens 6 --no-env)
