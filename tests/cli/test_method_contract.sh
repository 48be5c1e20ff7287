#!/usr/bin/env bash
# The method's contract, runner side (src/steps/runner.h): the same planted
# throughput curves go through both runners, and the one sweep driver must
# conclude the same for each: where the doubling stopped and why, the
# bisection's batches, the knee and the safe batch (tests/unit/test_method.c
# holds the same table against a stand-in runner). The fixture runner's
# `__trial` children report the curve through DEVGATE_TRIAL_PLAN; the command
# runner's stand-in program, tests/python/scripts/sweep_train.py, plans the
# same step times through the explicit probe API. Both records keep the
# measurement lock and the contention window of every trial, and of the soak;
# the same planted pair timings through both runners' `pair` come out with
# the same speed verdict from the one pair driver;
# a `devgate run` record keeps them too, and its soak is judged for slowing down.
. "$(dirname "$0")/lib.sh"
SRC=${DEVGATE_SRC:?}
PY=$(command -v python3)
unset PYTHONPATH DEVGATE_PROBE_PATH DEVGATE_OOM_EVENTS DEVGATE_TRIAL_PLAN
SCRIPT="$SRC/tests/python/scripts/sweep_train.py"
CMD=("$PY" "$SCRIPT" --batch '{batch}' --device '{device}' --epochs '{epochs}' --steps 3)
NONE=1073741824 # no plateau

# name|from|fixture plan (base_ms:plateau:gain:fall_above:fall_factor:oom_above)|
# the stand-in's options|stopped|at|trials|bisect|knee|safe
rows=(
  "plateau|8|20:32:0.04:0:1:0|--base-ms 20 --plateau 32|throughput-plateau|256|8,16,32,64,128,256||128|256"
  "oom|16|10:$NONE:0:0:1:40|--base-ms 10 --kill-above 40 --oom-events $T/oom.events|oom|64|16,32,64|48,40,44|40|40"
  "falling|8|20:$NONE:0:32:4:0|--base-ms 20 --fall-above 32|throughput-falling|128|8,16,32,64,128||32|128"
)

# check FILE PATH-TO-SWEEP ROW: the sweep concluded as the row says, every
# trial measured under the lock with its contention.
check() {
  local file=$1 where=$2 row=$3
  if python3 - "$file" "$where" "$row" <<'PY'; then ok; else bad "$where of $file does not keep the contract (${row%%|*})"; fi
import json, sys
d = json.load(open(sys.argv[1]))
sw = d[sys.argv[2]] if sys.argv[2] != "." else d
name, frm, plan, opts, stopped, at, trials, bis, knee, safe = sys.argv[3].split("|")
ints = lambda s: [int(x) for x in s.split(",") if x]
got = {"stopped": sw["stopped"], "trials": [t["batch"] for t in sw["trials"]],
       "bisect": [t["batch"] for t in sw["bisect"]], "knee": sw["knee"]["batch"],
       "safe": sw["safe_batch"]["batch"]}
want = {"stopped": {"reason": stopped, "at_batch": int(at)}, "trials": ints(trials),
        "bisect": ints(bis), "knee": int(knee), "safe": int(safe)}
bad = [k for k in want if got[k] != want[k]]
for t in sw["trials"] + sw["bisect"]:
    if t["lock"]["state"] != "held" or not isinstance(t["contention"], dict):
        bad.append("lock/contention of b%d" % t["batch"])
if bad:
    print(name, "differs in", bad, "\n  got ", got, "\n  want", want, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}

for row in "${rows[@]}"; do
  IFS='|' read -r name from plan opts _ <<<"$row"
  # The fixture runner, through the standalone verb (the same driver).
  DEVGATE_TRIAL_PLAN=$plan "$DG" --no-ledger sweep --json --model mlp --from "$from" \
    --warmup-steps 2 --timed-steps 6 >"fx-$name.json" 2>"fx-$name.err"
  rc=$?
  [ "$rc" -eq 0 ] && ok || { bad "sweep ($name) exited $rc"; tail -5 "fx-$name.err" >&2; }
  check "fx-$name.json" . "$row"
  # The command runner, inside accept -- CMD.
  echo "oom_kill 0" >oom.events
  # shellcheck disable=SC2086 # the row's options are words
  DEVGATE_OOM_EVENTS="$T/oom.events" "$DG" --no-ledger accept --json --quick --sweep-from "$from" \
    -o "pack-$name" -- "${CMD[@]}" $opts >"cmd-$name.json" 2>"cmd-$name.err"
  rc=$?
  [ "$rc" -le 1 ] && ok || { bad "accept -- CMD ($name) exited $rc"; tail -5 "cmd-$name.err" >&2; }
  check "cmd-$name.json" sweep "$row"
done

# The fixture runner inside accept: the planted sweep concludes as above, and
# the soak is measured under the lock with its contention, as the command's.
row=${rows[0]}
IFS='|' read -r name from plan _ <<<"$row"
# The compare step's timed pairs, planted alike for both runners: a step of
# 23.8 ms on the cpu and 20 ms on the device (1.19x: faster, but under the
# pay-off ratio of 1.28x), the fixture's through DEVGATE_PAIR_PLAN.
PAIRS=23.8:20
DEVGATE_TRIAL_PLAN=$plan DEVGATE_PAIR_PLAN=$PAIRS "$DG" --no-ledger accept --json --quick \
  --model mlp -o pack-fx >fx-accept.json 2>fx-accept.err
rc=$?
[ "$rc" -le 1 ] && ok || { bad "accept (fixture) exited $rc"; tail -5 fx-accept.err >&2; }
check fx-accept.json sweep "$row"
for f in fx-accept.json cmd-plateau.json; do
  expect_json "$f" 'd["soak"]["lock"]["state"] == "held" and isinstance(d["soak"]["contention"], dict) and "others_share" in d["soak"]["contention"]'
  expect_json "$f" '[s["name"] for s in d["steps"]] == ["env", "gate", "sweep", "soak", "compare", "profile"] and d["steps"][2]["status"] == "ok"'
done

# Both runners' pairs go through the one pair driver (method_compare.c): the
# same planted step times come out as the same speedup and the same speed
# verdict, each side under the lock with its window. The command runner's
# gate is a stand-in that reports cuda working (the stand-in program only
# sleeps); the fixture compares where this machine has an OpenCL device.
"$DG" --no-ledger accept --json --quick --sweep-from 16 --sweep-to 16 \
  --python "$SRC/tests/cli/data/fake_gate_python" -o pack-cmp -- "${CMD[@]}" --base-ms 20 \
  --cpu-ms 23.8 >cmd-compare.json 2>cmd-compare.err
rc=$?
[ "$rc" -le 1 ] && ok || { bad "accept -- CMD with a device exited $rc"; tail -5 cmd-compare.err >&2; }
pairs_ok='(r := d["compare"]["runs"][0])["speed"]["verdict"] == "no-gain" and abs(r["speedup"]["value"] - 23.8 / 20) < 0.005 and all(e["lock"]["state"] == "held" and isinstance(e["window"], dict) for k in ("cpu", "device") for e in r["repetitions"][k])'
expect_json cmd-compare.json "$pairs_ok"
if "$DG" --no-ledger gate --backend opencl --size 8 >/dev/null 2>&1; then
  expect_json fx-accept.json "$pairs_ok"
  # The fixture's own part stays beside the driver's: the numerics against float64.
  expect_json fx-accept.json 'd["compare"]["source"] == "fixture" and d["compare"]["runs"][0]["verdict"] in ("within tolerance", "drift") and d["compare"]["runs"][0]["reference"]["ran"] and d["compare"]["thresholds"]["loss_tolerance"] > 0'
fi

# devgate run is the command runner's epochs step alone: the lock and the
# contention window over the run, and a soak whose epochs say how many steps
# they hold, so a program that slows down is found slowing down.
"$DG" --no-ledger run --no-env --json -o pack-run -- "$PY" "$SCRIPT" --batch 8 --epochs 9 --steps 8 \
  --base-ms 4 --epoch-growth 1.3 >run.json 2>run.err
rc=$?
[ "$rc" -le 1 ] && ok || { bad "run exited $rc"; tail -5 run.err >&2; }
expect_json run.json 'd["lock"]["state"] == "held" and isinstance(d["contention"], dict) and d["soak"]["lock"]["state"] == "held"'
expect_json run.json 'd["soak"]["steps_per_epoch"] == 8 and d["soak"]["epochs_recorded"] == 9'
# On a loaded machine the run's window may be contended: the slowdown is then
# named with the other processes, at info (contention is never the program's
# fault), and contended says so.
expect_json run.json 'any(f["id"] == "slowing-down" and (f["severity"] == "warn" or (f["severity"] == "info" and "other processes took" in f["title"] and d["contention"]["others_cpus"]["value"] >= 0.5)) for f in d["findings"])'

done_tests
