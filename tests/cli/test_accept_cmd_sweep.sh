#!/usr/bin/env bash
# devgate accept -- CMD's sweep on a program whose throughput curve is known
# (tests/python/scripts/sweep_train.py: sleep-calibrated steps reported through
# the explicit probe API, no torch, so a child costs the interpreter's start-up):
#  - a throughput plateau: samples/s doubles with the batch up to 32, then gains
#    4% a doubling; the sweep stops with reason throughput-plateau three
#    doublings later and reports the knee and the safe batch;
#  - the OOM killer, stood in for: above batch 40 the program adds one to the
#    kill count devgate reads (DEVGATE_OOM_EVENTS) and SIGKILLs itself; those
#    trials end "oom-killer", the sweep goes on and bisects between 32 and 64;
#  - the real OOM killer, when root can make a memory cgroup with a limit here:
#    above batch 40 the program touches 4x the limit, the kernel kills it (the
#    largest process in the cgroup: the limit is wide enough that devgate, even
#    built with ASan, is far smaller), devgate reads its own cgroup's count
#    (skipped, with the reason, else).
. "$(dirname "$0")/lib.sh"
SRC=${DEVGATE_SRC:?}
PY=$(command -v python3)
unset PYTHONPATH DEVGATE_PROBE_PATH DEVGATE_OOM_EVENTS
SCRIPT="$SRC/tests/python/scripts/sweep_train.py"
CMD=("$PY" "$SCRIPT" --batch '{batch}' --device '{device}' --epochs '{epochs}' --steps 3)

show() { # what the sweep did, on stderr for whoever reads a failure
  "$PY" - "$1" >&2 <<'PY' || true
import json, sys
d = json.load(open(sys.argv[1]))
sw = d["sweep"] or {}
print("  stopped", sw.get("stopped"), "knee", (sw.get("knee") or {}).get("batch"),
      "safe", (sw.get("safe_batch") or {}).get("batch"))
for t in sw.get("trials", []) + sw.get("bisect", []):
    print("  trial b%d %s %s %s" % (t["batch"], t["ended"], t["samples_per_s"]["value"], t["reason"] or ""))
PY
}

# 1. The plateau.
"$DG" --no-ledger accept --json --quick -o pack1 -- "${CMD[@]}" --base-ms 20 --plateau 32 \
  >plateau.json 2>plateau.err
rc=$?
[ "$rc" -le 1 ] && ok || { bad "accept -- CMD (plateau) exited $rc"; tail -20 plateau.err >&2; }
show plateau.json
expect_json plateau.json 'd["sweep"]["stopped"] == {"reason": "throughput-plateau", "at_batch": 256}'
expect_json plateau.json '[t["batch"] for t in d["sweep"]["trials"]] == [8, 16, 32, 64, 128, 256] and d["sweep"]["bisect"] == []'
expect_json plateau.json 'all(t["ended"] == "ok" and t["samples_per_s"]["valid"] for t in d["sweep"]["trials"])'
# The curve as made: doubling up to 32, then under 10% a doubling.
expect_json plateau.json '(lambda s: s[2] > 3 * s[0] and all(s[i + 1] < 1.1 * max(s[:i + 1]) for i in range(2, 5)))([t["samples_per_s"]["value"] for t in d["sweep"]["trials"]])'
expect_json plateau.json 'd["sweep"]["knee"]["batch"] >= 32 and d["sweep"]["safe_batch"]["batch"] == 256 and d["sweep"]["safe_batch"]["note"] == "no failure reached"'
expect_json plateau.json 'd["spec"]["batch"] == d["sweep"]["knee"]["batch"] and d["soak"]["spec"]["batch"] == d["sweep"]["knee"]["batch"]'
# The quick tier's trials time 6 steps, the fewest a 95% interval of the
# median needs: every trial has one (the probe's step + wait spread), and the
# plateau was judged on intervals, each clear of best x 1.10.
expect_json plateau.json 'all(t["samples_per_s_ci"]["valid"] is True and t["samples_per_s_ci"]["lo"] <= t["samples_per_s"]["value"] <= t["samples_per_s_ci"]["hi"] for t in d["sweep"]["trials"])'
expect_json plateau.json 'all(t["stop_check"]["flat_with_interval"] is True for t in d["sweep"]["trials"][1:])'
expect_json plateau.json '(lambda e: e["flat"] == "flat" and e["flat_run"] == 3 and e["best"]["batch"] == 128)(d["sweep"]["stop_evidence"])'

# 2. The OOM killer, stood in for by the count file.
echo "oom_kill 0" >oom.events
DEVGATE_OOM_EVENTS="$T/oom.events" "$DG" --no-ledger accept --json --quick --sweep-from 16 -o pack2 \
  -- "${CMD[@]}" --base-ms 10 --kill-above 40 --oom-events "$T/oom.events" >kill.json 2>kill.err
rc=$?
[ "$rc" -le 1 ] && ok || { bad "accept -- CMD (OOM killer) exited $rc"; tail -20 kill.err >&2; }
show kill.json
expect_json kill.json '[t["batch"] for t in d["sweep"]["trials"]] == [16, 32, 64] and [t["batch"] for t in d["sweep"]["bisect"]] == [48, 40, 44]'
expect_json kill.json '[t["ended"] for t in d["sweep"]["trials"] + d["sweep"]["bisect"]] == ["ok", "ok", "oom-killer", "oom-killer", "ok", "oom-killer"]'
expect_json kill.json 'all(t["reason"].startswith("oom-killer: killed by SIGKILL") and t["oom_killer"] == {"source": "DEVGATE_OOM_EVENTS", "kills": 1} for t in d["sweep"]["trials"] + d["sweep"]["bisect"] if t["ended"] != "ok")'
expect_json kill.json 'd["sweep"]["stopped"] == {"reason": "oom", "at_batch": 64} and d["sweep"]["safe_batch"]["batch"] == 40 and d["sweep"]["safe_batch"]["first_failure"] == 44'
expect_json kill.json '[s["status"] for s in d["steps"]][:4] == ["ok", "ok", "ok", "ok"]'

# 2b. Throughput falling past the knee: samples/s doubles up to batch 32, then
#     halves each doubling (the step time x4); no failure, so the safe batch is
#     the largest trial, 128. The gate promises the knee's rate at 32 and names
#     128 apart as the largest batch tried, never the memory ceiling (no memory
#     ended the sweep: issue 21); the decision recommends the same batch.
"$DG" --no-ledger accept --json --quick -o pack4 -- "${CMD[@]}" --base-ms 5 --fall-above 32 \
  >fall.json 2>fall.err
rc=$?
[ "$rc" -le 1 ] && ok || { bad "accept -- CMD (falling) exited $rc"; tail -20 fall.err >&2; }
show fall.json
expect_json fall.json 'd["sweep"]["stopped"] == {"reason": "throughput-falling", "at_batch": 128} and d["sweep"]["knee"]["batch"] == 32 and d["sweep"]["safe_batch"]["batch"] == 128'
expect_json fall.json 'd["final_gate"]["batch"] == 32 and d["final_gate"]["safe_batch"] == {"value": 128, "unit": "samples", "valid": True}'
expect_json fall.json 'abs(d["final_gate"]["throughput"]["value"] - d["sweep"]["knee"]["samples_per_s"]["value"]) < 1e-6'
expect_json fall.json '" at batch 32 on " in d["final_gate"]["statement"] and "safe batch 128 is the largest batch tried, not a memory ceiling" in d["final_gate"]["statement"] and "memory ceiling," not in d["final_gate"]["statement"] and d["final_gate"]["safe_batch_bound"].startswith("the largest batch tried")'
# The md and html renders say both: the promise at its batch, the safe batch apart.
"$DG" report pack4/report.json --format md >fall.md 2>fall.md.err
expect_grep fall.md '^\| promised throughput \| [0-9]+ samples/s at batch 32 \(safe batch 128: the largest batch tried, not a memory ceiling \(the sweep stopped on falling throughput\)\) \|$' "the md render"
"$DG" report pack4/report.json --format html -o fallhtml >/dev/null 2>&1
expect_grep fallhtml/report.html '<p>throughput [0-9]+ samples/s at batch 32 · safe batch 128 \(the largest batch tried, not a memory ceiling' "the html render"

# 2c. The program's data set bounds the sweep (issue 21): 100 samples, each
#     step holding min(batch, 100). With the set's size reported (a DataLoader
#     over a sized dataset) the doubling stops before asking for more: 8..64,
#     stopped "train-set" at 64. Without it (an iterable set), the trial at 128
#     delivers 100 and stops the sweep there; it is no knee, no safe batch.
#     Either way knee, safe batch and the promise stay within the set, rates
#     count the samples delivered, and the words name the training set, never
#     a memory ceiling.
for mode in sized hidden; do
  extra=()
  [ "$mode" = hidden ] && extra=(--hide-size)
  "$DG" --no-ledger accept --json --quick -o "pack-$mode" -- "${CMD[@]}" --base-ms 5 --samples 100 \
    "${extra[@]}" >"small-$mode.json" 2>"small-$mode.err"
  rc=$?
  [ "$rc" -le 1 ] && ok || { bad "accept -- CMD (small set, $mode) exited $rc"; tail -20 "small-$mode.err" >&2; }
  show "small-$mode.json"
  expect_json "small-$mode.json" 'd["sweep"]["stopped"]["reason"] == "train-set" and d["sweep"]["knee"]["batch"] <= 64 and d["sweep"]["safe_batch"]["batch"] == 64 and d["final_gate"]["batch"] <= 64'
  expect_json "small-$mode.json" '"memory ceiling," not in d["final_gate"]["statement"] and not d["final_gate"]["statement"].endswith("the memory ceiling") and d["final_gate"]["safe_batch_bound"].startswith("the training set")'
  # samples/s counts the samples a step held (100 at batch 128), not the batch.
  expect_json "small-$mode.json" 'all(t["samples_per_step"]["value"] == min(t["batch"], 100) for t in d["sweep"]["trials"])'
done
expect_json small-sized.json '[t["batch"] for t in d["sweep"]["trials"]] == [8, 16, 32, 64] and d["sweep"]["stopped"]["at_batch"] == 64 and d["sweep"]["trials"][0]["train_samples"]["value"] == 100'
expect_json small-hidden.json '[t["batch"] for t in d["sweep"]["trials"]] == [8, 16, 32, 64, 128] and d["sweep"]["stopped"]["at_batch"] == 128 and abs(d["sweep"]["trials"][4]["samples_per_s"]["value"] - 100 / 0.005) < 0.2 * 100 / 0.005'

# 3. The real OOM killer in a memory cgroup of its own (root only).
CG=""
if [ "$(id -u)" -eq 0 ]; then
  if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
    CG=/sys/fs/cgroup/devgate-test-$$ LIMIT=memory.max
  elif [ -d /sys/fs/cgroup/memory ]; then
    CG=/sys/fs/cgroup/memory/devgate-test-$$ LIMIT=memory.limit_in_bytes
  fi
  if [ -n "$CG" ] && ! { mkdir "$CG" 2>/dev/null && echo $((512 << 20)) >"$CG/$LIMIT" 2>/dev/null; }; then
    rmdir "$CG" 2>/dev/null
    CG=""
  fi
fi
# The probe's step statistics with the loader wait, which the sweep's notch
# interval uses (the rate divides by step + wait): every other step reports
# 10 ms of wait over 5 ms steps, so the median and IQR grow from 5, 0 to 10, 10.
"$DG" --no-ledger run --no-env --json -- "$PY" "$SCRIPT" --batch 8 --epochs 1 --steps 12 \
  --base-ms 5 --data-ms 10 >wait.json 2>wait.err || { bad "run (loader wait) failed"; tail -5 wait.err >&2; }
expect_json wait.json '(lambda p: p["stats"]["median"]["value"] == 5 and p["stats"]["iqr"]["value"] == 0 and p["wall_stats"]["n"] == 10 and p["wall_stats"]["median"]["value"] == 10 and p["wall_stats"]["iqr"]["value"] == 10)(d["profile"]["step"])'

if [ -z "$CG" ]; then
  echo "skipped (3): root cannot make a memory cgroup with a limit here"
else
  trap 'rmdir "$CG" 2>/dev/null; rm -rf "$T"' EXIT
  bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$CG" \
    "$DG" --no-ledger accept --json --quick --sweep-from 16 --sweep-to 64 -o pack3 -- "${CMD[@]}" \
    --base-ms 10 --alloc-above 40 --alloc-mib 2048 >real.json 2>real.err
  rc=$?
  [ "$rc" -le 1 ] && ok || { bad "accept -- CMD (real OOM) exited $rc"; tail -20 real.err >&2; }
  show real.json
  expect_json real.json '[t["ended"] for t in d["sweep"]["trials"]] == ["ok", "ok", "oom-killer"] and d["sweep"]["stopped"]["reason"] == "oom"'
  expect_json real.json '(lambda t: t["oom_killer"]["source"].startswith("cgroup memory.") and t["oom_killer"]["kills"] >= 1)(d["sweep"]["trials"][2])'
  expect_json real.json 'len(d["sweep"]["bisect"]) >= 1 and d["sweep"]["safe_batch"]["batch"] == 40'
fi
done_tests
