#!/usr/bin/env bash
# devgate slo, the longer cases (full tier): Ollama's NDJSON through /api/chat,
# LoadGen's verdicts through the CLI (inconclusive with the count needed, exit
# 4; missed, exit 1) and their rules, queueing behind the engine's slots
# (queueing-bound), the open loop's seeded arrivals. test_slo.sh has the
# quick cases.
. "$(dirname "$0")/slo_lib.sh"

start_server main --ttft uniform:30:90 --tpot fixed:3 --seed 7
U="http://127.0.0.1:$PORT_main"

# Ollama NDJSON through /api/chat: tokens from eval_count.
"$DG" slo --json --target "$U/api/chat" --api ollama --concurrency 2 "${FAST[@]}" \
  --duration 1s --slo e2e:2s --percentile 50 >c2.json 2>c2.err
rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 4 ] && ok || { bad "ollama exited $rc"; sed 's/^/  /' c2.err >&2; }
expect_json c2.json 'd["spec"]["api"] == "ollama" and d["spec"]["chat"] and d["levels"][0]["tokens"]["source"] == "server"'
expect_json c2.json 'd["levels"][0]["requests"]["ok"] > 0 and d["levels"][0]["requests"]["failed"] == 0'

# Too few requests for p99: inconclusive with LoadGen's count, exit 4.
expect_exit 4 "$DG" slo --target "$U" --concurrency 1 "${FAST[@]}" --duration 0.5s \
  --slo ttft:5s --label few
expect_grep "$T/out" 'NOT SIGNED.*inconclusive: n = [0-9]+, at least 459 needed at p99 with none over'

# A bound the planted TTFT cannot meet: missed, exit 1.
expect_exit 1 "$DG" slo --target "$U" --concurrency 2 "${FAST[@]}" --duration 1s \
  --slo ttft:10ms --percentile 50 --label tight
expect_grep "$T/out" 'not signed: p50 TTFT .+ 10 ms is missed at 2 concurrent streams'
# Both are in the ledger with the rule that says why.
"$DG" ledger list --json >l2.json 2>/dev/null
for case in few:slo-inconclusive tight:slo-missed; do
  id=$(python3 -c 'import json,sys; print([r["id"] for r in json.load(open(sys.argv[1])) if r["label"] == sys.argv[2]][0])' l2.json "${case%%:*}")
  "$DG" ledger show "$id" --json >show.json 2>/dev/null
  expect_json show.json "[f['id'] for f in d['record']['findings'] if f['id'].startswith('slo-')] == ['${case#*:}']"
done

# Queueing: two engine slots; from 1 to 8 streams the TTFT grows (the wait
# for a slot) while TPOT stays: queueing-bound.
start_server slots --ttft fixed:20 --tpot fixed:2 --slots 2
"$DG" --no-ledger slo --json --target "http://127.0.0.1:$PORT_slots" --concurrency 1,8 \
  "${FAST[@]}" --duration 1s --slo ttft:1s --percentile 50 >cq.json 2>cq.err
expect_json cq.json 'any(f["id"] == "queueing-bound" for f in d["findings"])'

# Open loop: seeded Poisson arrivals at 20/s.
"$DG" slo --json --target "$U" --rate 20 --seed 3 "${FAST[@]}" --duration 1.5s --slo e2e:3s \
  --percentile 50 >c6.json 2>c6.err
expect_json c6.json 'd["spec"]["mode"] == "open" and d["levels"][0]["concurrency"] is None'
expect_json c6.json '10 <= d["levels"][0]["requests"]["sent"] <= 60'

done_tests
