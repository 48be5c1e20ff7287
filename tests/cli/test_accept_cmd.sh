#!/usr/bin/env bash
# devgate accept -- CMD on an unmodified PyTorch script
# (tests/python/scripts/accept_train.py, which never imports devgate_probe):
# the gate in the script's interpreter, a sweep of child runs stopped cleanly
# by the probe, the soak of the script's own epochs, a torch.profiler window,
# and the fixture's rules, decision and final gate. The script's large
# batches exceed the memory budget (RLIMIT_AS of each child): those trials end
# as device-oom, the sweep goes on and bisects; the healthy script is then
# accepted on the cpu route with nothing above info. Skipped (77) without torch.
. "$(dirname "$0")/lib.sh"
SRC=${DEVGATE_SRC:?}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
  echo "skipped: torch is not importable by $PY"
  exit 77
fi
unset PYTHONPATH DEVGATE_PROBE_PATH
SCRIPT="$SRC/tests/python/scripts/accept_train.py"
FEAT=262144 # 1 MiB a sample: a batch of b needs about 2b MiB more address space

# Usage errors before anything runs.
expect_exit 2 "$DG" --no-ledger accept --
expect_grep "$T/err" "no program after --"
expect_exit 2 "$DG" --no-ledger accept train.py
expect_grep "$T/err" "your own program goes after --"
expect_exit 2 "$DG" --no-ledger accept --model mlp -- "$PY" "$SCRIPT"
expect_grep "$T/err" "are the fixture's"
expect_exit 2 "$DG" --no-ledger accept --device tpu -- "$PY" "$SCRIPT"
expect_grep "$T/err" "want cpu, cuda or mps"
expect_exit 2 "$DG" --no-ledger accept --sweep-from 16
expect_grep "$T/err" "apply to accept -- CMD"

# The budget: the script's peak address space at batch 8, plus 400 MiB, so the
# batches up to about 128 fit and 256 does not.
"$PY" "$SCRIPT" --batch 8 --features $FEAT --epochs 1 --steps 2 --vmpeak vm8.txt >/dev/null 2>&1 ||
  bad "the script does not run by itself"
BUDGET=$(($(cat vm8.txt) + 400 * 1048576))

"$DG" --no-ledger accept --json --sweep-from 32 --mem-budget "$BUDGET" -o pack -- \
  "$PY" "$SCRIPT" --batch '{batch}' --device '{device}' --epochs '{epochs}' --steps 3 \
  --features $FEAT >acc.json 2>acc.err
rc=$?
[ "$rc" -eq 0 ] && ok || { bad "accept -- CMD exited $rc"; tail -30 acc.err >&2; }
expect_json acc.json 'd["kind"] == "accept" and d["spec"]["program"] == "command" and d["spec"]["placeholders"] == {"batch": True, "device": True, "epochs": True}'
# gate: in the script's interpreter, cpu passes, the others are named.
expect_json acc.json '[b["name"] for b in d["gate"]["backends"]] == ["cpu", "cuda", "mps"] and d["gate"]["backends"][0]["matmul"]["ok"]'
# sweep: doubling from 32 until the budget refused a batch, then bisection.
expect_json acc.json '[t["batch"] for t in d["sweep"]["trials"]][:3] == [32, 64, 128]'
expect_json acc.json 'd["sweep"]["stopped"]["reason"] == "budget" and d["sweep"]["trials"][-1]["ended"] == "device-oom" and d["sweep"]["trials"][-1]["budget"]'
expect_json acc.json 'len(d["sweep"]["bisect"]) >= 1 and d["sweep"]["safe_batch"]["first_failure"] < d["sweep"]["stopped"]["at_batch"]'
expect_json acc.json 'all(t["ended"] == "ok" for t in d["sweep"]["trials"][:-1]) and d["sweep"]["knee"]["batch"] >= 32'
expect_json acc.json 'd["sweep"]["safe_batch"]["batch"] < d["sweep"]["safe_batch"]["first_failure"]'
# soak: the script's own 10 epochs through {epochs}, memory per epoch.
expect_json acc.json 'd["soak"]["epochs_recorded"] >= 10 and d["soak"]["spec"]["epochs_substituted"] and all(e["rss"]["valid"] for e in d["soak"]["epochs"])'
# compare: the cpu is the only device here.
expect_json acc.json 'd["compare"] is None and [s["status"] for s in d["steps"]] == ["ok", "ok", "ok", "ok", "skipped", "ok"]'
# profile: a torch.profiler window, split, with top operators and a trace.
expect_json acc.json 'd["profile"]["status"] == "ok" and d["profile"]["phases"]["compute"]["share"]["value"] > 0.3 and len(d["profile"]["ops"]) >= 5'
expect_json acc.json 'd["profile"]["window"] == {"warmup": 3, "steps": 8}'
[ -s pack/trace.json ] && grep -q '"aten::' pack/trace.json && ok || bad "no torch.profiler trace in the pack"
# the fixture's rules, decision and final gate.
expect_json acc.json 'd["decision"]["route"] == "cpu" and d["final_gate"]["accepted"]'
expect_json acc.json 'all(f["severity"] == "info" for f in d["findings"] if f["id"] not in ("noisy-measurement", "contended"))'
done_tests
