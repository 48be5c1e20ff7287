#!/usr/bin/env bash
# devgate profile: the record, the Chrome trace (valid JSON, one complete
# event per profiled op call), fallback rows under --disable-op, the ledger
# verb and the usage errors; on cpu, and on opencl when it is available.
. "$(dirname "$0")/lib.sh"

backends=(cpu)
if "$DG" --no-ledger gate --backend opencl --size 8 >/dev/null 2>&1; then backends+=(opencl); fi

# check_trace TRACE RECORD: the trace opens as a Chrome trace and holds exactly
# one op event per op call of the record's table.
check_trace() {
  if python3 - "$1" "$2" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
r = json.load(open(sys.argv[2]))
ev = t["traceEvents"]
assert isinstance(ev, list) and t["displayTimeUnit"] == "ms" and isinstance(t["metadata"], dict)
for e in ev:
    assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
    assert e["ph"] in ("X", "M"), e
    if e["ph"] == "X":
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
ops = [e for e in ev if e["ph"] == "X" and e.get("cat", "").startswith("op")]
calls = sum(row["calls"] for row in r["ops"])
assert calls > 0 and len(ops) == calls == r["ops_total"]["calls"], (len(ops), calls)
assert r["trace_events"]["ops"] == calls and r["trace_events"]["dropped"] == 0
names = {}
for e in ops:
    names[e["name"]] = names.get(e["name"], 0) + 1
for op in set(row["op"] for row in r["ops"]):
    assert names.get(op) == sum(row["calls"] for row in r["ops"] if row["op"] == op), op
PY
  then ok; else bad "trace $1 does not match the op table of $2"; fi
}

for be in "${backends[@]}"; do
  model=mlp
  [ "$be" = opencl ] && model=lenet
  expect_exit 0 "$DG" profile --backend "$be" --model "$model" --batch 8 --threads 1 \
    --warmup 2 --window 4 --trace "t-$be.json" --json
  cp "$T/out" "$T/rec-$be.json"
  expect_json "rec-$be.json" 'd["kind"] == "profile" and d["v"] == 1 and d["status"] == "ok"'
  expect_json "rec-$be.json" 'd["window"] == {"warmup": 2, "steps": 4} and d["trace"] == "t-'"$be"'.json"'
  expect_json "rec-$be.json" 'd["spec"]["steps"] == 6 and d["spec"]["backend"] == "'"$be"'"'
  expect_json "rec-$be.json" 'all(k in d["phases"] for k in ["read", "decode", "resize", "augment", "normalise", "collate", "queue_wait", "h2d", "forward", "backward", "update", "d2h", "sync"])'
  expect_json "rec-$be.json" 'all(0 <= p["share"]["value"] <= 1 for k, p in d["phases"].items() if isinstance(p, dict) and p["in_step"] and p["share"]["valid"])'
  expect_json "rec-$be.json" 'abs(sum(o["share"] for o in d["ops"]) - 1) < 1e-6 and all(o["backend"] == "'"$be"'" for o in d["ops"])'
  expect_json "rec-$be.json" 'd["step"]["ms"]["valid"] and d["sync_points"]["loss_reads"] == 1 and d["bytes"]["h2d"]["value"] > 0'
  expect_json "rec-$be.json" 'isinstance(d["note"], str) and "isolation" in d["note"]'
  check_trace "t-$be.json" "rec-$be.json"
done

# Human output: phases, ops, sync points, bytes; without --trace no trace file
# is left in the working directory.
expect_exit 0 "$DG" profile --model mlp --batch 8 --threads 1 --warmup 1 --window 2
for w in 'queue wait' forward 'ops ' 'sync ' 'bytes ' 'trace +not written \(--trace FILE'; do
  expect_grep "$T/out" "$w" "profile output"
done
if ls ./*trace*.json >/dev/null 2>&1; then bad "profile left $(ls ./*trace*.json) without --trace"; else ok; fi
expect_exit 0 "$DG" profile --model mlp --batch 8 --threads 1 --warmup 1 --window 2 --trace t.json
expect_grep "$T/out" 'trace +t\.json \([0-9]+ op events' "profile output with --trace"
[ -s t.json ] && ok || bad "--trace t.json wrote nothing"
expect_exit 0 "$DG" ledger list --json
expect_grep "$T/out" '"profile"' "ledger list"

# Forced fallback: every conv2d row is a fallback row, and only those.
if [[ " ${backends[*]} " == *" opencl "* ]]; then
  expect_exit 0 "$DG" --no-ledger profile --backend opencl --model lenet --batch 8 --threads 1 \
    --warmup 2 --window 3 --disable-op conv2d@opencl --trace fb.json --json
  cp "$T/out" "$T/fb.json.rec"
  expect_json fb.json.rec 'any(o["op"].startswith("conv2d") for o in d["ops"])'
  expect_json fb.json.rec 'all(o["fallback"] == o["op"].startswith("conv2d") for o in d["ops"])'
  expect_json fb.json.rec 'd["sync_points"]["fallbacks"] == sum(o["calls"] for o in d["ops"] if o["fallback"]) > 0'
  expect_json fb.json.rec 'd["bytes"]["fallback_d2h"]["value"] > 0 and d["bytes"]["fallback_h2d"]["value"] > 0'
  check_trace fb.json fb.json.rec
  expect_exit 0 "$DG" --no-ledger profile --backend opencl --model lenet --batch 8 --threads 1 \
    --warmup 1 --window 1 --disable-op conv2d@opencl --trace fb2.json
  expect_grep "$T/out" 'conv2d.*FALLBACK' "profile output with --disable-op"
else
  echo "opencl not available: fallback checks skipped"
fi

# Usage errors exit 2; an unknown backend too; an unwritable trace fails the run.
for args in "--window 0" "--window abc" "--warmup -1" "--steps 5" "--epochs 2" "--bogus" \
            "--trace=" "--val-split 0.1" "--backend nosuch" "--threads 0"; do
  # shellcheck disable=SC2086
  expect_exit 2 "$DG" --no-ledger profile --batch 8 --warmup 1 --window 1 $args
done
expect_exit 1 "$DG" --no-ledger profile --batch 8 --threads 1 --warmup 1 --window 1 \
  --trace "$T/no-such-dir/t.json"
expect_grep "$T/err" "no-such-dir" "unwritable trace message"

done_tests
