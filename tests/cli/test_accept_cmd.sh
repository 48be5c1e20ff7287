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
torch_python
# The budget is an address-space limit: glibc gives threads malloc arenas of 64
# MiB of address space each, as many as threads happen to allocate in; one
# arena makes the address space a function of the batch (docs/cli.md).
export MALLOC_ARENA_MAX=1
SCRIPT="$SRC/tests/python/scripts/accept_train.py"
# A wide input (4 MiB a sample, gathered in the step; two batches alive while
# the next is gathered: about 8 MiB a sample) with one hidden unit and two
# distinct rows: the memory grows with the batch, the compute, the data wait
# and the start-up stay small.
WIDE="--features 1048576 --hidden 1 --rows 2 --gather"

# Usage errors before anything runs.
expect_exit 2 "$DG" --no-ledger accept --
expect_grep "$T/err" "no program after --"
expect_exit 2 "$DG" --no-ledger accept train.py
expect_grep "$T/err" "your own program goes after --"
expect_exit 2 "$DG" --no-ledger accept --model mlp -- "$PY" "$SCRIPT"
expect_grep "$T/err" "are the fixture's"
expect_exit 2 "$DG" --no-ledger accept --backend tpu -- "$PY" "$SCRIPT"
expect_grep "$T/err" "want cpu, cuda or mps"
expect_exit 2 "$DG" --no-ledger accept --sweep-from 16
expect_grep "$T/err" "apply to accept -- CMD"

# The probe's clean stop, as every sweep trial uses it: after 3 optimizer steps
# of a 50-epoch run, exit 86 with run_end "stopped", a complete run.
DEVGATE_PROBE_MAX_STEPS=3 "$DG" --no-ledger run --no-env --json -- "$PY" "$SCRIPT" --epochs 50 \
  --steps 4 >stop.json 2>stop.err && ok || bad "a run stopped by the probe did not exit 0"
expect_json stop.json 'not any(f["id"] == "program-failed" for f in d["findings"])'
expect_json stop.json 'd["state"] == "complete" and d["supervise"]["exit_status"] == 86 and d["supervise"]["run_end"]["status"] == "stopped" and d["throughput"]["timed_steps"] == 3'
expect_json stop.json '"stopped by devgate" in d["steps"][-1]["summary"] and d["steps"][-1]["error"] is None'
expect_json stop.json 'd["supervise"]["run_end"]["stop"] == "steps"'
# Its timeline (supervise.timeline): every mark a plain cpu run passes, after
# the launch and in order (the window's end is the step as devgate received
# it, the loop's end the probe's own clock: the pipe may deliver a hair
# later); a plain child has no fork marks, a cpu run no device initialisation.
expect_json stop.json '(lambda m: all(m[k]["valid"] for k in ("sampler_ready", "main", "torch_imported", "first_step", "window_start", "window_end", "loop_end", "exit", "tree_gone")) and not any(m[k]["valid"] for k in ("forked", "child_ready", "device_init", "device_ready")) and 0 <= m["main"]["value"] <= m["torch_imported"]["value"] <= m["first_step"]["value"] <= m["window_start"]["value"] <= m["window_end"]["value"] <= m["loop_end"]["value"] + 0.5 and m["loop_end"]["value"] <= m["exit"]["value"] <= m["tree_gone"]["value"] and all(v["unit"] == "s" for v in m.values()))(d["supervise"]["timeline"]["marks"])'
expect_json stop.json 'd["supervise"]["timeline"]["origin"] == "launch" and d["supervise"]["timeline"]["origin_unix"]["valid"]'

# The other stops: a steady window after the warm-up (any three steps agree
# within 100 times their time: the fewest steps, 2 + 3), and a time budget
# (a slow disk's 200 ms a batch against a budget of 0.5 s: a few steps of 50).
FORK_SCRIPT="$SRC/tests/python/scripts/fork_train.py"
DEVGATE_PROBE_MAX_STEPS=50 DEVGATE_PROBE_STEADY=3:100 "$DG" --no-ledger run --no-env --json -- \
  "$PY" "$FORK_SCRIPT" --epochs 50 >steady.json 2>steady.err || bad "a steady stop did not exit 0"
expect_json steady.json 'd["supervise"]["exit_status"] == 86 and d["supervise"]["run_end"]["stop"] == "steady" and d["throughput"]["timed_steps"] == 5 and "steady" in d["supervise"]["run_end"]["message"]'
DEVGATE_PROBE_MAX_STEPS=50 DEVGATE_PROBE_BUDGET=0.5 "$DG" --no-ledger run --no-env --json -- \
  "$PY" "$FORK_SCRIPT" --epochs 50 --io-ms 200 >budget.json 2>budget.err || bad "a budget stop did not exit 0"
expect_json budget.json 'd["supervise"]["run_end"]["stop"] == "budget" and 2 <= d["throughput"]["timed_steps"] < 50'
# The fast exit of a stopped run (DEVGATE_PROBE_FAST_EXIT: no module teardown)
# still flushes what the program wrote to a file it never closed (4 lines: the
# stop is raised in the 5th step, before its line).
DEVGATE_PROBE_MAX_STEPS=5 DEVGATE_PROBE_FAST_EXIT=1 "$DG" --no-ledger run --no-env --json -- \
  "$PY" "$FORK_SCRIPT" --epochs 50 --log steps.log >fast.json 2>fast.err || bad "a fast exit did not exit 0"
expect_json fast.json 'd["supervise"]["exit_status"] == 86 and d["state"] == "complete" and d["throughput"]["timed_steps"] == 5'
[ "$(grep -c '^epoch 0 step' steps.log)" = 4 ] && ok || bad "the fast exit lost the program's unflushed file ($(wc -l <steps.log) lines)"
# ... and says nothing of its own into the program's stderr: an object whose
# __class__ warns when read (torch 2.11's torch.distributed.reduce_op did, under
# the fast exit's search for open files) stays silent.
cat >noisy.py <<NOISY
import runpy, sys, warnings
class Noisy:
    @property
    def __class__(self):
        warnings.warn("deprecated attribute read", FutureWarning)
        return Noisy
keep = Noisy()
sys.argv = ["$FORK_SCRIPT"] + sys.argv[1:]
runpy.run_path("$FORK_SCRIPT", run_name="__main__")
NOISY
DEVGATE_PROBE_MAX_STEPS=5 DEVGATE_PROBE_FAST_EXIT=1 "$DG" --no-ledger run --no-env --json -- \
  "$PY" noisy.py --epochs 50 >noisy.json 2>noisy.err || bad "a fast exit (noisy object) did not exit 0"
expect_json noisy.json 'd["supervise"]["exit_status"] == 86 and d["throughput"]["timed_steps"] == 5'
grep -q "deprecated attribute read" noisy.err && bad "the fast exit's warning reached the program's stderr" || ok

# The budget: the script's peak address space at batch 32 plus 128 MiB, so the
# batches up to 32 fit and 64 (about 256 MiB more) does not; the margins on both
# sides are wider than the run-to-run spread of a process's address space (tens
# of MiB: thread stacks and arenas).
# Measured through devgate run, so the probe's own share is in it as in the trials.
"$DG" --no-ledger run --no-env -o calib -- "$PY" "$SCRIPT" --batch 32 $WIDE --epochs 1 --steps 2 \
  --vmpeak vm32.txt >/dev/null 2>&1 || bad "the script does not run by itself"
BUDGET=$(($(cat vm32.txt) + 128 * 1048576))

"$DG" --no-ledger accept --json --batch 16 --mem-budget "$BUDGET" -o pack -- \
  "$PY" "$SCRIPT" --batch '{batch}' --device '{device}' --epochs '{epochs}' --steps 3 \
  $WIDE >acc.json 2>acc.err
rc=$?
[ "$rc" -eq 0 ] && ok || { bad "accept -- CMD exited $rc"; tail -30 acc.err >&2; }
# What the steps did, on stderr for whoever reads a failure.
"$PY" - acc.json >&2 <<'PY' || true
import json, sys
d = json.load(open(sys.argv[1]))
for s in d["steps"]:
    print("  %-8s %-8s %s %s" % (s["name"], s["status"], s["summary"], s["error"] or ""))
for t in (d["sweep"] or {}).get("trials", []) + (d["sweep"] or {}).get("bisect", []):
    print("  trial b%d %s %s %s" % (t["batch"], t["ended"], t["samples_per_s"]["value"], (t["reason"] or "")[:80]))
for f in d["findings"]:
    print("  finding %s %s: %s" % (f["severity"], f["id"], f["title"]))
print("  " + d["final_gate"]["statement"])
PY
if "$PY" -c 'import jsonschema' 2>/dev/null; then
  "$PY" - "$SRC/docs/schema/report.schema.json" acc.json <<'PY' && ok || bad "acc.json does not validate against report.schema.json"
import json, sys, jsonschema
jsonschema.validate(json.load(open(sys.argv[2])), json.load(open(sys.argv[1])))
PY
fi
expect_json acc.json 'd["kind"] == "accept" and d["spec"]["program"] == "command" and d["spec"]["placeholders"] == {"batch": True, "device": True, "epochs": True}'
# gate: in the script's interpreter, cpu passes, the others are named.
expect_json acc.json '[b["name"] for b in d["gate"]["backends"]] == ["cpu", "cuda", "mps"] and d["gate"]["backends"][0]["matmul"]["ok"]'
# sweep: doubling from 8 until the budget refused a batch, then bisection.
expect_json acc.json '[t["batch"] for t in d["sweep"]["trials"]] == [8, 16, 32, 64]'
expect_json acc.json 'd["sweep"]["stopped"]["reason"] == "budget" and d["sweep"]["trials"][-1]["ended"] == "device-oom" and d["sweep"]["trials"][-1]["budget"]'
expect_json acc.json 'len(d["sweep"]["bisect"]) >= 1 and d["sweep"]["safe_batch"]["first_failure"] < d["sweep"]["stopped"]["at_batch"]'
expect_json acc.json 'all(t["ended"] == "ok" for t in d["sweep"]["trials"][:-1]) and d["sweep"]["knee"]["batch"] >= 8'
expect_json acc.json 'd["sweep"]["safe_batch"]["batch"] < d["sweep"]["safe_batch"]["first_failure"]'
# soak: the script's own 10 epochs through {epochs}, memory per epoch, at --batch.
expect_json acc.json 'd["spec"]["batch"] == 16 and d["spec"]["batch_source"] == "option" and d["soak"]["spec"]["batch"] == 16'
# Every epoch's footprint is read but the last, which the probe closes at the
# interpreter's exit, after the program let go of its objects: not reported.
expect_json acc.json 'd["soak"]["epochs_recorded"] >= 10 and d["soak"]["spec"]["epochs_substituted"] and all(e["rss"]["valid"] for e in d["soak"]["epochs"][:-1]) and not d["soak"]["epochs"][-1]["rss"]["valid"] and d["soak"]["growth"]["footprint"]["valid"]'
# compare: the cpu is the only device here.
expect_json acc.json 'd["compare"] is None and [s["status"] for s in d["steps"]] == ["ok", "ok", "ok", "ok", "skipped", "ok"]'
# profile: a torch.profiler window, split, with top operators and a trace.
expect_json acc.json 'd["profile"]["status"] == "ok" and d["profile"]["phases"]["compute"]["share"]["value"] > 0.3 and len(d["profile"]["ops"]) >= 5'
expect_json acc.json '(lambda w: (w["warmup"], w["steps"], w["cut"]) == (3, 8, None) and w["events"] > 0)(d["profile"]["window"])'
[ -s pack/trace.json ] && grep -q '"aten::' pack/trace.json && ok || bad "no torch.profiler trace in the pack"
# the fixture's rules, decision and final gate.
expect_json acc.json 'd["decision"]["route"] == "cpu" and d["final_gate"]["accepted"]'
expect_json acc.json 'all(f["severity"] == "info" for f in d["findings"] if f["id"] not in ("noisy-measurement", "contended"))'
done_tests
