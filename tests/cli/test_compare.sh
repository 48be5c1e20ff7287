#!/usr/bin/env bash
# devgate compare: the cpu baseline against opencl (PoCL here) and both against
# the float64 reference. A clean run is within tolerance and reports a speedup
# and a busy fraction; a relu that leaks 1% of negative values on the device
# (DEVGATE_FAULT=relu-leak@opencl) is reported as drift; busy loops beside it
# are named by accept's contended rule; cpu against itself,
# bad options and an unavailable device are refused.
. "$(dirname "$0")/lib.sh"

if ! "$DG" --no-ledger gate --backend opencl --size 8 >/dev/null 2>&1; then
  echo "skipped: opencl is not available"
  exit 77
fi

# A private TMPDIR, to see that compare leaves no temporary files behind.
export TMPDIR="$T/tmp"
mkdir -p "$TMPDIR"

# One thread and small runs: this checks numerics and the record, not speed.
# One timed repetition a side unless a check is about the repetitions.
common=(--backend opencl --model mlp --steps 20 --lr 0.02 --threads 1 --seed 1 --repetitions 1)

# Clean: exit 0, every batch within tolerance, speedup and busy fraction present.
expect_exit 0 "$DG" compare "${common[@]}" --batches 16,32 --repetitions 3 --json
cp out "$T/clean.json"
# Interleaved repetitions: 3 a side, cpu and device alternating, raw step times kept,
# the speedup with its interval (which holds it) and the rank test beside it.
expect_json "$T/clean.json" 'd["spec"]["repetitions"] == 3 and all(r["repetitions"]["per_side"] == 3 and r["repetitions"]["order"] == ["cpu", "device"] * 3 for r in d["runs"])'
expect_json "$T/clean.json" 'all(len(r["repetitions"][s]) == 3 and all(len(x["ms"]) == 20 and x["warmup"] == 2 and x["median"]["valid"] for x in r["repetitions"][s]) for r in d["runs"] for s in ("cpu", "device"))'
# The cpu side's repetitions say the team it really had (--threads 1: one, fixed) and the
# cores others kept busy; the device side's have none.
expect_json "$T/clean.json" 'all(x["cpu_team"]["source"] == "--threads" and x["cpu_team"]["adaptive"] is False and x["cpu_team"]["threads_mean"]["value"] == 1 and x["cpu_team"]["interval"]["unit"] == "s" for r in d["runs"] for x in r["repetitions"]["cpu"]) and not any("cpu_team" in x for r in d["runs"] for x in r["repetitions"]["device"])'
expect_json "$T/clean.json" 'all(r["speedup_ci"]["lo"]["value"] <= r["speedup"]["value"] <= r["speedup_ci"]["hi"]["value"] and r["speedup_ci"]["level"] == 0.95 for r in d["runs"])'
expect_json "$T/clean.json" 'all(r["step_time_reduction_pct_ci"]["lo"]["value"] <= r["step_time_reduction_pct"]["value"] <= r["step_time_reduction_pct_ci"]["hi"]["value"] for r in d["runs"])'
expect_json "$T/clean.json" 'all(0 < r["mann_whitney"]["p"]["value"] <= 1 and r["busy_fraction_ci"]["lo"]["valid"] for r in d["runs"])'
expect_json "$T/clean.json" 'sorted([x["median"]["value"] for x in r0["repetitions"]["cpu"]])[1] == r0["cpu"]["step_ms"]["value"] if (r0 := d["runs"][0]) else False'
expect_json "$T/clean.json" 'd["v"] == 1 and d["kind"] == "compare" and d["within_tolerance"] is True'
expect_json "$T/clean.json" '[r["batch"] for r in d["runs"]] == [16, 32]'
expect_json "$T/clean.json" 'all(r["speedup"]["valid"] and r["speedup"]["value"] > 0 for r in d["runs"])'
expect_json "$T/clean.json" 'all(r["busy_fraction"]["valid"] and 0 < r["busy_fraction"]["value"] for r in d["runs"])'
expect_json "$T/clean.json" 'all(r["within_tolerance"] is True and r["verdict"] == "within tolerance" and r["drift"] == [] for r in d["runs"])'
# JSON shape: both sides, the reference, every drift figure, the thresholds.
expect_json "$T/clean.json" 'all(set(r) >= {"batch", "cpu", "device", "speedup", "step_time_reduction_pct", "busy_fraction", "loss_vs_ref", "loss_cpu_vs_device", "param_drift", "within_tolerance", "reference", "losses"} for r in d["runs"])'
expect_json "$T/clean.json" 'all(r[s]["step_ms"]["valid"] and r[s]["step_ms"]["value"] > 0 and r[s]["samples_per_s"]["value"] > 0 for r in d["runs"] for s in ("cpu", "device"))'
expect_json "$T/clean.json" 'all(r["reference"]["ran"] and r["loss_vs_ref"][k]["value"] < 1e-4 for r in d["runs"] for k in ("cpu", "device"))'
expect_json "$T/clean.json" 'all(r["param_drift"][k]["value"] < 1e-4 for r in d["runs"] for k in ("device_vs_cpu", "cpu_vs_ref", "device_vs_ref"))'
expect_json "$T/clean.json" 'all(len(r["losses"][k]) == 20 for r in d["runs"] for k in ("cpu", "device", "ref"))'
expect_json "$T/clean.json" 'abs(r0["step_time_reduction_pct"]["value"] - 100 * (r0["cpu"]["step_ms"]["value"] - r0["device"]["step_ms"]["value"]) / r0["cpu"]["step_ms"]["value"]) < 1e-6 if (r0 := d["runs"][0]) else False'
expect_json "$T/clean.json" 'd["thresholds"]["loss_tolerance"] == 1e-3 and d["thresholds"]["param_tolerance"] == 1e-3'
expect_json "$T/clean.json" 'd["spec"]["backend"] == "opencl" and d["spec"]["baseline"] == "cpu" and d["spec"]["steps"] == 20 and d["spec"]["lr"] == 0.02'
# Recorded in the ledger under the verb compare.
expect_exit 0 "$DG" ledger list --json
expect_grep out '"compare"' "ledger list"
# No temporary files are left behind.
if [ -z "$(ls -A "$TMPDIR")" ]; then ok; else bad "compare left $(ls "$TMPDIR") in TMPDIR"; fi

# Human output: one line per batch.
expect_exit 0 "$DG" --no-ledger compare "${common[@]}" --batches 16
expect_grep out '^  batch 16 .*speedup [0-9.]+x.*busy [0-9]+%.*within tolerance'
# The speedup with its 95% interval and the verdict on it (analysis/speed.h),
# as accept's compare and compare RUN_A RUN_B word it.
expect_grep out '^  batch 16 .*speedup [0-9.]+x \([-+][0-9]+% step time, 95% [0-9.]+-[0-9.]+x\) (pays-off|no-gain|no-difference|slower|inconclusive) · busy'
expect_json "$T/clean.json" 'all(r["speed"]["verdict"] in ("pays-off", "no-gain", "no-difference", "slower", "inconclusive") and r["speed"]["pays_off_min"] > 1.28 and abs(r["speed"]["band_hi"] - 1.1) < 1e-9 for r in d["runs"])'

# What else ran is named as accept names it (its rules over the comparison):
# two busy loops beside the timed runs make the contended rule fire.
python3 -c 'while 1: pass' &
hog1=$!
python3 -c 'while 1: pass' &
hog2=$!
expect_exit 0 "$DG" --no-ledger compare "${common[@]}" --batches 16
kill "$hog1" "$hog2"
wait "$hog1" "$hog2" 2>/dev/null
expect_grep out '^  warn +contended: other processes used .* during [0-9]+ of [0-9]+ measured windows'

# The leaky relu on the device drifts: exit 1, the drift named per batch.
DEVGATE_FAULT=relu-leak@opencl expect_exit 1 "$DG" --no-ledger compare "${common[@]}" --batches 16
expect_grep out 'DRIFT: .*loss_vs_ref\.device'
expect_grep out 'drift beyond tolerance'
DEVGATE_FAULT=relu-leak@opencl expect_exit 1 "$DG" --no-ledger compare "${common[@]}" --batches 32 --json
expect_json out 'd["within_tolerance"] is False and all(r["verdict"] == "drift" and "loss_vs_ref.device" in r["drift"] for r in d["runs"])'
expect_json out 'all(r["loss_vs_ref"]["cpu"]["value"] < 1e-4 and r["loss_vs_ref"]["device"]["value"] > 1e-3 and r["loss_cpu_vs_device"]["value"] > 1e-3 and r["baseline_within_tolerance"] for r in d["runs"])'

# A looser tolerance accepts the same clean run; the reference is skipped
# (and said so) for a step above its 2 GFLOP cap.
expect_exit 0 "$DG" --no-ledger compare --backend opencl --model fc:20000,relu,fc:10 --batches 40 --steps 3 --repetitions 1 \
  --threads 1 --loss-tolerance 1e-2 --json
expect_json out 'not d["runs"][0]["reference"]["ran"] and "skipped" in d["runs"][0]["reference"]["note"] and d["runs"][0]["loss_vs_ref"]["cpu"]["value"] is None'
expect_json out 'd["thresholds"]["loss_tolerance"] == 1e-2 and d["runs"][0]["param_drift"]["device_vs_cpu"]["valid"]'

# Usage: cpu against itself, no backend, bad values, options that do not apply.
expect_exit 2 "$DG" --no-ledger compare --backend cpu
expect_grep err 'cpu'
expect_exit 2 "$DG" --no-ledger compare
expect_exit 2 "$DG" --no-ledger compare --backend opencl --batches 0
expect_exit 2 "$DG" --no-ledger compare --backend opencl --batches 8,16,32,64,128
expect_exit 2 "$DG" --no-ledger compare --backend opencl --batches 8,
expect_exit 2 "$DG" --no-ledger compare --backend opencl --loss-tolerance -1
expect_exit 2 "$DG" --no-ledger compare --backend opencl --param-tolerance x
expect_exit 2 "$DG" --no-ledger compare --backend opencl --sync-every 5
expect_exit 2 "$DG" --no-ledger compare --backend opencl --export here
expect_exit 2 "$DG" --no-ledger compare --backend opencl --bogus
expect_exit 2 "$DG" --no-ledger compare --backend opencl --repetitions 0
expect_exit 2 "$DG" --no-ledger compare --backend opencl --repetitions 51
expect_exit 2 "$DG" --no-ledger compare --backend opencl --model nosuchmodel --batches 8 --steps 3

# An unavailable device: exit 3 (cuda is not built here; skip when it is).
if ! "$DG" --no-ledger gate --backend cuda --size 8 >/dev/null 2>&1; then
  expect_exit 3 "$DG" --no-ledger compare --backend cuda --batches 8 --steps 3 --threads 1
fi
# A device that refuses every upload fails the run (not drift, not a pass).
DEVGATE_FAULT=upload-fail@opencl expect_exit 1 "$DG" --no-ledger compare --backend opencl --batches 8 --steps 3 --threads 1 --json
expect_json out 'd["runs"][0]["failed"] == "opencl" and d["status"] != "ok"'

done_tests
