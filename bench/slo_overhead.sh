#!/usr/bin/env bash
# devgate slo against a plain single-threaded client (bench/slo_client.py:
# asyncio, one event loop, the standard library) on the same loopback server answering every
# request with one streamed token exactly 10 ms after it arrived
# (bench/slo_bench_server.c: C, epoll, so the server adds no queue of its own
# at 64 streams): what each measures above the planted 10 ms at 1 and 64
# streams is the client's overhead (and the loopback's), and the CPU each
# spends per request; then the largest stream count one devgate process
# drives here (2 s planted requests, devgate's own CPU per level).
#   bench/slo_overhead.sh [SECONDS] [BUILD_DIR]      (default 10, build)
# Prints a table; keep it under docs/evidence/ with the machine's load.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-10}
dg=${2:-$root/build}/devgate
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT

cc -O2 -o "$tmp/server" "$root/bench/slo_bench_server.c"
serve() { # NAME DELAY_MS
  "$tmp/server" "$tmp/$1.port" "$2" >"$tmp/$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do [ -s "$tmp/$1.port" ] && break; sleep 0.1; done
  cat "$tmp/$1.port"
}

# devgate's CPU time (user + system, s) of one run: from its own rusage.
dg_run() { # OUT ARGS...
  local out=$1; shift
  /usr/bin/time -f "%U %S" -o "$tmp/time" "$dg" --no-ledger slo --json --no-env "$@" >"$out" 2>/dev/null || true
  tail -1 "$tmp/time" | awk '{print $1 + $2}'
}

echo "devgate slo overhead bench · $("$dg" --version | cut -d";" -f1)) · $(date -u +%Y-%m-%dT%H:%M:%SZ) · $(nproc) cores · load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "server: bench/slo_bench_server.c, one streamed token 10 ms after each request, loopback"
port=$(serve fast 10)
url="http://127.0.0.1:$port/v1/completions"
printf '\n%-8s %-8s %9s %10s %10s %10s %10s %14s  %s\n' client streams requests "E2E p50" "E2E p99" "TTFT p50" "TTFT p99" "CPU/request" "above the planted 10 ms"
for n in 1 64; do
  "$PY" "$root/bench/slo_client.py" --url "$url" --streams "$n" --seconds "$secs" >"$tmp/plain.json"
  "$PY" - "$tmp/plain.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print("%-8s %-8d %9d %8.3f ms %7.3f ms %7.3f ms %7.3f ms %11.1f us  +%.3f ms over 10" % ("plain", d["streams"], d["requests"], d["e2e_p50_ms"], d["e2e_p99_ms"], d["ttft_p50_ms"], d["ttft_p99_ms"], d["cpu_s_per_request"] * 1e6, d["e2e_p50_ms"] - 10))
EOF
  cpu=$(dg_run "$tmp/dg.json" --target "$url" --concurrency "$n" --duration "${secs}s" --warmup 1 \
    --window 1 --max-windows 3 --max-tokens 1 --slo e2e:10s --percentile 50)
  "$PY" - "$tmp/dg.json" "$cpu" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); cpu = float(sys.argv[2])
l = d["levels"][0]
def p(m, q):
    return [x["value"]["value"] for x in l["latency"][m]["percentiles"] if x["p"] == q][0]
total = sum(x["requests"]["sent"] for x in d["levels"]) + sum(x["warmup"]["requests"] for x in d["levels"])
print("%-8s %-8d %9d %8.3f ms %7.3f ms %7.3f ms %7.3f ms %11.1f us  +%.3f ms over 10" % ("devgate", l["concurrency"], l["requests"]["sent"], p("e2e", 50), p("e2e", 99), p("ttft", 50), p("ttft", 99), cpu / max(1, total) * 1e6, p("e2e", 50) - 10))
EOF
done
echo "(devgate's CPU per request counts its whole run: env check, warm-up, steady windows and the record)"

echo
echo "streams one devgate process drives: requests answered 2 s after they arrive, one token"
port=$(serve slow 2000)
url="http://127.0.0.1:$port/v1/completions"
printf '%-8s %9s %7s %9s %10s %10s %12s\n' streams sent failed req/s "TTFT p50" "TTFT p99" "devgate CPU"
for n in 128 512 1024 2048; do
  cpu=$(dg_run "$tmp/cap.json" --target "$url" --concurrency "$n" --duration 6s --warmup 2.5 \
    --window 2.5 --max-windows 3 --max-tokens 1 --slo ttft:10s --percentile 50 --request-timeout 20s)
  "$PY" - "$tmp/cap.json" "$cpu" "$n" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except ValueError:
    print("%-8s no record (devgate failed)" % sys.argv[3]); sys.exit(0)
l = d["levels"][0]; cpu = float(sys.argv[2])
def p(m, q):
    v = [x["value"]["value"] for x in l["latency"][m]["percentiles"] if x["p"] == q]
    return v[0] if v and v[0] is not None else float("nan")
wall = sum((x["warmup"]["duration"]["value"] or 0) for x in d["levels"]) + len(l["steady"]["windows"]) * 2.5 + (l["window"]["wall"]["value"] or 0)
print("%-8d %9d %7d %9.1f %7.0f ms %7.0f ms %9.0f%% of a core" % (l["concurrency"], l["requests"]["sent"], l["requests"]["failed"] + l["requests"]["timeouts"], l["throughput"]["requests_per_s"]["value"] or 0, p("ttft", 50), p("ttft", 99), 100 * cpu / wall))
EOF
done
