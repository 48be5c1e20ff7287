#!/usr/bin/env bash
# devgate slo --target fixture: devgate's own model served by a child
# (`devgate __slo_fixture`) on a loopback port, every streamed token one
# forward pass on the cpu backend, measured through the same libcurl path as
# any URL. The record says the target was the fixture (model, backend, batch)
# and how its server ended; no server is left behind; a server that dies part
# way is named with how it died and the record is kept; a backend that cannot
# serve is exit 3 with its reason; the fixture's own options are usage errors
# elsewhere (test_slo_quick.sh). Full tier (30-50 s on a busy 2-core
# machine); test_slo_quick.sh has a one-level fixture run for the quick one.
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

# The server itself (devgate __slo_fixture on a socket this test listens on):
# OpenAI's routes and shapes, keep-alive, the errors a client gets, TERM ends it.
python3 - "$DG" <<'PY' >proto.txt 2>&1 && ok || { bad "the fixture server's protocol"; sed 's/^/  /' proto.txt >&2; }
import http.client, json, os, socket, subprocess, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
r, w = os.pipe()
p = subprocess.Popen([sys.argv[1], "--no-ledger", "__slo_fixture", "--listen-fd", str(s.fileno()),
                      "--ready-fd", str(w), "--model", "lenet", "--batch", "3"], pass_fds=(s.fileno(), w))
os.close(w)
ready = json.loads(os.fdopen(r).readline())
assert ready["ready"] and ready["model"] == "lenet" and ready["batch"] == 3, ready
c = http.client.HTTPConnection("127.0.0.1", s.getsockname()[1], timeout=60)
def call(method, path, body=None):
    c.request(method, path, body=None if body is None else json.dumps(body),
              headers={"Content-Type": "application/json"})
    a = c.getresponse()
    return a.status, a.getheader("Content-Type"), a.read().decode()
st, ct, b = call("GET", "/v1/models")
assert st == 200 and json.loads(b)["data"][0]["id"] == "lenet", b
# streamed chat: role in the first delta, one letter a token, the finish, usage, [DONE]
st, ct, b = call("POST", "/v1/chat/completions", {"model": "lenet", "messages": [{"role": "user", "content": "hello"}],
                 "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}})
ev = [l[6:] for l in b.split("\n") if l.startswith("data: ")]
assert st == 200 and ct == "text/event-stream" and ev[-1] == "[DONE]", b
js = [json.loads(e) for e in ev[:-1]]
toks = [j["choices"][0]["delta"]["content"] for j in js if j["choices"] and j["choices"][0]["finish_reason"] is None]
assert len(toks) == 5 and all(len(t) == 1 and t.isalpha() for t in toks), toks
assert js[0]["choices"][0]["delta"]["role"] == "assistant" and js[0]["object"] == "chat.completion.chunk"
assert js[-2]["choices"][0]["finish_reason"] == "length"
assert js[-1]["usage"] == {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}, js[-1]
# the same prompt gives the same tokens (seeded weights, a function of the prompt and the tokens so far)
st, ct, b2 = call("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hello"}],
                  "max_tokens": 5, "stream": True})
toks2 = [json.loads(l[6:])["choices"][0]["delta"]["content"] for l in b2.split("\n")
         if l.startswith("data: {") and json.loads(l[6:])["choices"][0]["finish_reason"] is None]
assert toks2 == toks, (toks, toks2)
# whole (stream false): one JSON answer with its usage
st, ct, b = call("POST", "/v1/completions", {"prompt": "abc", "max_tokens": 3})
d = json.loads(b)
assert st == 200 and len(d["choices"][0]["text"]) == 3 and d["usage"]["completion_tokens"] == 3, b
# the errors a client gets, each an OpenAI error object, the connection kept
for method, path, body, want in (("POST", "/v1/completions", {"model": "gpt-9", "prompt": "x"}, 404),
                                 ("GET", "/v1/completions", None, 405), ("GET", "/nope", None, 404),
                                 ("POST", "/v1/completions", {"prompt": "x", "max_tokens": 0}, 400)):
    st, ct, b = call(method, path, body)
    assert st == want and "message" in json.loads(b)["error"], (path, st, b)
c.request("POST", "/v1/completions", body="{not json", headers={"Content-Type": "application/json"})
a = c.getresponse(); a.read()
assert a.status == 400
st, ct, b = call("GET", "/metrics")
assert st == 200 and "vllm:generation_tokens_total 13" in b, b
st, ct, b = call("GET", "/health")
assert st == 200
p.terminate()
assert p.wait(timeout=30) == 0
print("ok")
PY

done_tests
