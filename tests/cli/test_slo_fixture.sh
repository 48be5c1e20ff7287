#!/usr/bin/env bash
# devgate slo --target fixture: devgate's own model served by a child
# (`devgate __slo_fixture`) on a loopback port, every streamed token one
# forward pass on the cpu backend, measured through the same libcurl path as
# any URL. The record says the target was the fixture (model, backend, batch)
# and how its server ended; no server is left behind; a server that dies part
# way is named with how it died and the record is kept; a backend that cannot
# serve is exit 3 with its reason; the fixture's own options are usage errors
# elsewhere. Quick tier: no torch, no Python server.
. "$(dirname "$0")/lib.sh"
if "$DG" --no-ledger slo --target fixture --slo ttft:1s --duration 1 2>&1 | grep -q "without libcurl"; then
  expect_exit 3 "$DG" --no-ledger slo --target fixture --slo ttft:1s --duration 1
  echo "skipped: built without libcurl (checked exit 3)"
  exit 77
fi
FAST=(--duration 1.5s --warmup 0.3 --window 0.4 --max-windows 30 --max-tokens 6 --no-env)
export OMP_NUM_THREADS=1

# A ladder of two levels against the fixture (mlp, batch 2): every request
# streamed its six tokens as the server counted them, the record names the
# fixture, the statement says what was measured.
"$DG" slo --json --target fixture --batch 2 --concurrency 1,3 "${FAST[@]}" --slo ttft:2s \
  --slo tpot:1s --percentile 50 --label fx >f1.json 2>f1.err
rc=$?
# 0 signed; 4 when a busy machine kept a level from a steady state (the SLO
# itself is loose): the statement is then checked for saying so.
[ "$rc" -eq 0 ] || [ "$rc" -eq 4 ] && ok || { bad "the fixture run exited $rc"; sed 's/^/  /' f1.err >&2; }
expect_json f1.json '(lambda f: f["backend"] == "cpu" and f["model"] == "mlp" and f["batch"] == 2 and f["classes"] == 10 and f["parameters"] > 0 and f["url"].startswith("http://127.0.0.1:") and f["ended"] == "stopped at the end of the run")(d["spec"]["fixture"])'
expect_json f1.json 'd["spec"]["model"] == "mlp" and d["spec"]["target"].startswith(d["spec"]["fixture"]["url"] + "/v1/completions")'
expect_json f1.json 'all(l["requests"]["ok"] > 0 and l["requests"]["failed"] == 0 and l["tokens"]["source"] == "server" for l in d["levels"])'
expect_json f1.json 'all(s["tokens"] == 6 for l in d["levels"] for s in l["samples"] if s["outcome"] == "ok")'
# its own view, scraped from its /metrics: the server's token count and streams
expect_json f1.json 'd["spec"]["metrics"] == d["spec"]["fixture"]["url"] + "/metrics" and all(l["engine"]["names"]["tokens"] == "vllm:generation_tokens_total" and l["engine"]["tokens_per_s"]["valid"] and l["engine"]["tokens_per_s"]["value"] > 0 and l["engine"]["queue_waiting"]["value"] == 0 for l in d["levels"])'
expect_json f1.json '"endpoint devgate'"'"'s fixture on cpu (batch 2, http://127.0.0.1:" in d["final_gate"]["statement"] if d["final_gate"]["signed"] else "never reached a steady state" in d["final_gate"]["statement"]'
pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["spec"]["fixture"]["pid"])' f1.json)
kill -0 "$pid" 2>/dev/null && bad "the fixture server ($pid) outlived the run" || ok
# in the ledger under its verb, and its page renders
"$DG" ledger list --json >l1.json 2>/dev/null
expect_json l1.json 'any(r["verb"] == "slo" and r["label"] == "fx" and r["model"] == "mlp" for r in d)'
ID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' f1.json)
expect_exit 0 "$DG" report "$ID" --format html
expect_grep "$T/out" 'Concurrency SLO' "the page"
expect_grep "$T/out" "devgate's fixture served on cpu \\(.*\\), batch 2, its server stopped at the end of the run" "the page"

# The server dies part way (test hook: it SIGKILLs itself after 25 answers):
# exit 1, the death named, the record kept with how the server ended.
DEVGATE_SLO_FIXTURE_DIE=25 "$DG" slo --json --target fixture --concurrency 2 "${FAST[@]}" \
  --duration 4s --slo ttft:2s --label dies >f2.json 2>f2.err
rc=$?
[ "$rc" -eq 1 ] && ok || { bad "a dying fixture exited $rc, wanted 1"; sed 's/^/  /' f2.err >&2; }
expect_grep f2.err 'the fixture server \(devgate __slo_fixture\) killed by SIGKILL part way: .*stopped answering after [0-9]+ answered requests.*the record is kept'
expect_json f2.json 'd["spec"]["fixture"]["ended"] == "killed by SIGKILL" and d["state"] == "failed" and not d["final_gate"]["signed"]'

# A backend that cannot serve: exit 3 with the backend's reason, once, and nothing recorded.
if ! "$DG" --no-ledger gate --backend cuda --json 2>/dev/null | grep -q '"available":true'; then
  expect_exit 3 "$DG" slo --target fixture --backend cuda "${FAST[@]}" --slo ttft:1s --label nocuda
  expect_grep "$T/err" 'the fixture server cannot serve: cuda is not available'
  [ "$(grep -c 'cuda is not available' "$T/err")" -eq 1 ] && ok || bad "the reason was said more than once"
  "$DG" ledger list --json >l2.json 2>/dev/null
  expect_json l2.json 'not any(r["label"] == "nocuda" for r in d)'
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

done_tests
