#!/usr/bin/env bash
# devgate compare RUN_A RUN_B judges like accept: the median ratio of the
# throughput samples both records hold with its seeded bootstrap 95% interval,
# pays-off / slower / no-difference / no-gain / inconclusive by stated
# thresholds (docs/rules.md "Speed verdicts"), "n too small" instead of a point
# ratio, contention and seeds named beside a claim; any two evidence records
# (run, accept, accept -- CMD, a fixture compare), the differing part of the
# commands in the table, and a read-only ledger.
# Real runs: tests/python/scripts/clock_train.py (torch-free, steps timed by
# the clock through the explicit probe API): the same command twice is never a
# speedup or a slowdown; --step-ms doubled is slower, and the reverse pays off.
. "$(dirname "$0")/lib.sh"
SRC=${DEVGATE_SRC:?}
PY=$(command -v python3)
SCRIPT="$SRC/tests/python/scripts/clock_train.py"

# show FILE WHAT: the judgement in one line on stderr (the numbers the report quotes).
show() {
  python3 - "$1" "$2" <<'PY' >&2
import json, sys
j = json.load(open(sys.argv[1]))["judgement"]
print("%s: %s %.3fx (95%% %.3f-%.3fx, judged %.3f-%.3fx, %d and %d epochs)" % (sys.argv[2],
      j["verdict"], j["speedup"]["value"], j["speedup_ci"]["lo"]["value"],
      j["speedup_ci"]["hi"]["value"], j["judged_ci"]["lo"]["value"], j["judged_ci"]["hi"]["value"],
      j["basis"]["n_a"], j["basis"]["n_b"]))
PY
}

# ---- real runs of one command --------------------------------------------------
crun() { "$DG" run --no-env --json -- "$PY" "$SCRIPT" --epochs 10 --steps 4 "$@" 2>/dev/null; }
# Five runs of one command (the issue's five identical runs), one at twice the
# step time, one of another seed.
for i in 1 2 3 4 5; do crun --step-ms 100 >same$i.json; done
crun --step-ms 200 >slow.json
crun --step-ms 100 --seed 2 >seed2.json
for f in same1 same2 same3 same4 same5 slow seed2; do
  expect_json $f.json 'd["kind"] == "run" and d["state"] == "complete" and len(d["soak"]["epochs"]) == 10'
done
# The same command twice: no difference or inconclusive, never a claim.
for pair in "same1 same2" "same2 same1" "same2 same3" "same3 same4" "same4 same5" "same5 same1"; do
  set -- $pair
  expect_exit 0 "$DG" --no-ledger compare $1.json $2.json --json
  cp "$T/out" "$T/$1-$2.json"
  show "$T/$1-$2.json" "the same command, $1 then $2"
  expect_json "$T/$1-$2.json" 'd["judgement"]["verdict"] in ("no-difference", "inconclusive")'
done
expect_json "$T/same1-same2.json" 'd["v"] == 2 and d["kind"] == "compare-runs" and d["judgement"]["basis"]["name"] == "epochs" and d["judgement"]["basis"]["n_a"] == 10'
expect_json "$T/same1-same2.json" 'd["judgement"]["speedup_ci"]["lo"]["valid"] and d["judgement"]["speedup_ci"]["lo"]["value"] <= d["judgement"]["speedup"]["value"] <= d["judgement"]["speedup_ci"]["hi"]["value"]'
expect_json "$T/same1-same2.json" 'd["judgement"]["band"]["equivalence_pct"] == 10 and abs(d["judgement"]["band"]["hi"] - 1.1) < 1e-9 and d["judgement"]["seeds"]["same"] is True'
expect_json "$T/same1-same2.json" 'all(r["cmd_diff"] == "(the same command)" for r in d["runs"])'
# The interval is seeded: the same records give the same interval.
expect_exit 0 "$DG" --no-ledger compare same1.json same2.json --json
expect_json "$T/out" 'd["judgement"]["speedup_ci"] == json.load(open("'"$T/same1-same2.json"'"))["judgement"]["speedup_ci"]'
# A real 2x: twice the step time is slower; the reverse pays off.
expect_exit 0 "$DG" --no-ledger compare same1.json slow.json --json
show "$T/out" "step time doubled"
# (run records carry their contention windows: when the slower run saw at least
# contention_cpus more of other processes than the faster one, the same
# measurement is inconclusive, leaning slower; never another verdict.)
slower_ok='(d["judgement"]["verdict"] == "slower" or (d["judgement"]["why"] == "contended" and d["judgement"]["leaning"] == "slower")) and d["judgement"]["speedup_ci"]["hi"]["value"] < 0.8'
expect_json "$T/out" "$slower_ok"
expect_json "$T/out" '[r["cmd_diff"] for r in d["runs"]] == ["... --step-ms 100", "... --step-ms 200"]'
expect_exit 0 "$DG" --no-ledger compare slow.json same1.json --json
show "$T/out" "step time halved"
expect_json "$T/out" '(d["judgement"]["verdict"] == "pays-off" or (d["judgement"]["why"] == "contended" and d["judgement"]["leaning"] == "pays-off")) and d["judgement"]["speedup_ci"]["lo"]["value"] > 1.28'
expect_exit 0 "$DG" --no-ledger compare same1.json slow.json
expect_grep "$T/out" '^  decision +(slower: B is [0-9]+% slower than A: 0\.[0-9]+x|inconclusive: contended: B measured 0\.[0-9]+x A) \(95% interval 0\.[0-9]+x-0\.[0-9]+x over 10 and 10 epochs, judged as 0\.[0-9]+x-0\.[0-9]+x with the runs. [0-9]+% spread'
expect_grep "$T/out" '^  command +\.\.\. --step-ms 100 +\.\.\. --step-ms 200'
expect_grep "$T/out" '^  judged on +.*per-epoch samples/s.* no difference within 0\.91-1\.10x'

# ---- planted records ----------------------------------------------------------
# plant NAME KIND 'python list of epoch samples/s' [extra python statements on r]
plant() {
  python3 - "$@" <<'PY'
import json, sys
name, kind, eps = sys.argv[1], sys.argv[2], eval(sys.argv[3])
r = {"v": 2, "kind": kind, "state": "complete", "label": None, "device": "cpu",
     "spec": {"cmd": ["python3", "/very/long/path/to/the/project/train.py", "--lr", "0.1",
                      "--epochs", str(len(eps))]},
     "bucket": {"resolution": 32, "augment": "none", "batch": 8, "data": "synthetic"},
     "seeds": {"torch": 1, "numpy": 1, "random": 1, "workers": 0},
     "soak": {"epochs": [{"epoch": i, "samples_per_s": {"value": v, "unit": "samples/s", "valid": True}}
                         for i, v in enumerate(eps)]},
     "throughput": {"samples_per_s": {"value": sorted(eps)[len(eps) // 2] if eps else None,
                                      "unit": "samples/s", "valid": bool(eps)}}}
def window(cpus):
    return {"others_cpus": {"value": cpus, "unit": "cpus", "valid": True}}
for stmt in sys.argv[4:]:
    exec(stmt)
json.dump(r, open(name, "w"))
PY
}
base='[100, 102, 98, 101, 99, 100, 103, 97, 100, 101]'
plant pa.json run "$base"
plant pb.json run "$base"
plant half.json run '[x / 2 for x in '"$base"']'
plant dbl.json run '[x * 2 for x in '"$base"']'
plant bit.json run '[x * 1.18 for x in '"$base"']'
plant wide.json run '[60, 140, 80, 130, 95, 150, 70, 120, 100, 110]'
plant few.json run '[100, 101, 99]'
plant few2.json run '[50, 51, 49]'
expect_exit 0 "$DG" --no-ledger compare pa.json pb.json --json
expect_json "$T/out" 'd["judgement"]["verdict"] == "no-difference" and d["judgement"]["speedup"]["value"] == 1'
expect_exit 0 "$DG" --no-ledger compare pa.json half.json --json
expect_json "$T/out" 'd["judgement"]["verdict"] == "slower" and abs(d["judgement"]["speedup"]["value"] - 0.5) < 1e-9 and d["judgement"]["seeds"]["note"] is None'
expect_exit 0 "$DG" --no-ledger compare pa.json dbl.json --json
expect_json "$T/out" 'd["judgement"]["verdict"] == "pays-off" and d["judgement"]["pays_off_min"] > 1.28'
# The thresholds are replaceable: a 150% band (0.40-2.50x) calls the halving no difference.
expect_exit 0 "$DG" --no-ledger compare pa.json half.json --threshold equivalence_pct=150 --json
expect_json "$T/out" 'd["judgement"]["verdict"] == "no-difference" and d["judgement"]["thresholds"]["equivalence_pct"] == 150'
expect_exit 2 "$DG" --no-ledger compare pa.json half.json --threshold nosuch=1
expect_exit 2 "$DG" --no-ledger compare --backend opencl --threshold speedup_min=2
# 18% faster: outside the band, below the pay-off ratio.
expect_exit 0 "$DG" --no-ledger compare pa.json bit.json --json
expect_json "$T/out" 'd["judgement"]["verdict"] == "no-gain"'
# A wide interval holds a threshold: inconclusive, and it says which.
expect_exit 0 "$DG" --no-ledger compare pa.json wide.json --json
expect_json "$T/out" 'd["judgement"]["verdict"] == "inconclusive" and "holds" in d["judgement"]["why"]'
# Too few samples for an interval: said, not a point-ratio verdict.
expect_exit 0 "$DG" --no-ledger compare few.json few2.json --json
expect_json "$T/out" 'd["judgement"]["verdict"] == "inconclusive" and d["judgement"]["why"] == "n too small" and "n too small" in d["judgement"]["text"]'
expect_exit 0 "$DG" --no-ledger compare few.json few2.json
expect_grep "$T/out" '^  decision +inconclusive: n too small \(3 and 3 epochs'

# Seeds: different seeds, and torch unseeded, are said next to a claim.
plant halfs.json run '[x / 2 for x in '"$base"']' 'r["seeds"]["torch"] = 7'
plant halfu.json run '[x / 2 for x in '"$base"']' 'r["seeds"]["torch"] = None'
plant halfn.json run '[x / 2 for x in '"$base"']' 'del r["seeds"]'
expect_exit 0 "$DG" --no-ledger compare pa.json halfs.json --json
expect_json "$T/out" 'd["judgement"]["verdict"] == "slower" and "seeds differ" in d["judgement"]["text"] and d["judgement"]["seeds"]["same"] is False'
expect_exit 0 "$DG" --no-ledger compare pa.json halfu.json --json
expect_json "$T/out" 'd["judgement"]["verdict"] == "slower" and "torch was unseeded in B" in d["judgement"]["text"]'
expect_exit 0 "$DG" --no-ledger compare pa.json halfn.json
expect_grep "$T/out" 'decision +slower: .*seeds are not recorded in B'
expect_grep "$T/out" '^  seeds +the seeds are not recorded in B'
# Real runs of different seeds: the same speed, no claim, the seeds still listed.
expect_exit 0 "$DG" --no-ledger compare same1.json seed2.json --json
expect_json "$T/out" 'd["judgement"]["seeds"]["same"] is False and d["judgement"]["verdict"] in ("no-difference", "inconclusive")'

# Contention: the slower run contended (its windows saw other processes) makes
# the slowdown inconclusive; the same contention on both sides is named beside
# the verdict; a record's own 'contended' finding counts.
W='for e in r["soak"]["epochs"]: e["window"] = window'
plant busy_half.json run '[x / 2 for x in '"$base"']' "$W(1.5)"
plant quiet_a.json run "$base" "$W(0.0)"
plant busy_a.json run "$base" "$W(1.5)"
plant found_half.json run '[x / 2 for x in '"$base"']' 'r["findings"] = [{"id": "contended", "severity": "warn"}]'
expect_exit 0 "$DG" --no-ledger compare quiet_a.json busy_half.json --json
expect_json "$T/out" 'd["judgement"]["verdict"] == "inconclusive" and d["judgement"]["why"] == "contended" and d["judgement"]["leaning"] == "slower"'
expect_json "$T/out" 'd["judgement"]["contention"]["b"]["windows_contended"] == 10 and d["judgement"]["contention"]["a"]["contended"] is False and d["judgement"]["contention"]["made_inconclusive"]'
expect_exit 0 "$DG" --no-ledger compare busy_a.json busy_half.json --json
expect_json "$T/out" 'd["judgement"]["verdict"] == "slower" and "other processes ran" in d["judgement"]["text"]'
expect_exit 0 "$DG" --no-ledger compare busy_half.json quiet_a.json --json
expect_json "$T/out" 'd["judgement"]["verdict"] == "inconclusive" and d["judgement"]["leaning"] == "pays-off"'
# The faster run contended, the slower quiet: the slowdown stands, contention named.
plant quiet_half.json run '[x / 2 for x in '"$base"']' "$W(0.0)"
expect_exit 0 "$DG" --no-ledger compare busy_a.json quiet_half.json --json
expect_json "$T/out" 'd["judgement"]["verdict"] == "slower" and d["judgement"]["contention"]["text"] is not None and "other processes ran" in d["judgement"]["text"]'
expect_exit 0 "$DG" --no-ledger compare pa.json found_half.json --json
expect_json "$T/out" 'd["judgement"]["verdict"] == "inconclusive" and d["judgement"]["why"] == "contended"'
expect_exit 0 "$DG" --no-ledger compare quiet_a.json busy_half.json
expect_grep "$T/out" '^  decision +inconclusive: contended: B measured 0\.50x A .*rerun when the machine is quiet'

# ---- any two evidence records ---------------------------------------------------
# An accept record (fixture): soak epochs and the compare step's repetitions.
REPS='[{"median": {"value": m, "unit": "ms", "valid": True}, "ms": [m] * 4, "warmup": 0} for m in (10, 10.2, 9.9, 10.1, 10)]'
plant acc.json accept "$base" 'r["spec"] = {"backend": "opencl", "model": "mlp", "batch": 32, "seed": 0, "quick": True}' \
  'del r["seeds"]' 'r["compare"] = {"kind": "compare", "runs": [{"batch": 32, "status": "ok", "repetitions": {"device": '"$REPS"'}}]}'
plant acc2.json accept "$base" 'r["spec"] = {"backend": "cuda", "model": "mlp", "batch": 32, "seed": 0, "quick": True}' 'del r["seeds"]'
plant cmdacc.json accept "$base" 'r["spec"]["cmd"] = ["python3", "train.py", "--batch", "{batch}", "--device", "{device}"]'
expect_exit 0 "$DG" --no-ledger compare pa.json acc.json --json
expect_json "$T/out" 'd["runs"][1]["kind"] == "accept" and d["runs"][1]["shape"] == "accept" and d["judgement"]["verdict"] == "no-difference" and d["judgement"]["basis"]["name"] == "epochs"'
expect_exit 0 "$DG" --no-ledger compare acc.json acc2.json
expect_grep "$T/out" '^  command +\.\.\. --backend opencl --model \.\.\. +\.\.\. --backend cuda --model \.\.\.'
expect_grep "$T/out" '^  seeds +seed=0 +seed=0'
expect_exit 0 "$DG" --no-ledger compare cmdacc.json pa.json --json
expect_json "$T/out" 'd["runs"][0]["shape"] == "accept -- CMD" and d["judgement"]["verdict"] == "no-difference"'
# A fixture compare record (devgate compare --json) against an accept's compare
# step: judged on the device's repetitions at the batch both ran.
python3 - <<PY
import json
m = [10, 10.2, 9.9, 10.1, 10]
r = {"v": 1, "kind": "compare", "status": "ok", "spec": {"model": "mlp", "backend": "opencl", "batches": [32], "seed": 0},
     "runs": [{"batch": 32, "status": "ok", "repetitions": {"device": [{"median": {"value": x * 2, "unit": "ms", "valid": True}} for x in m]}}]}
json.dump(r, open("fixcmp.json", "w"))
PY
expect_exit 0 "$DG" --no-ledger compare acc.json fixcmp.json --json
expect_json "$T/out" 'd["runs"][1]["kind"] == "compare" and d["judgement"]["basis"]["name"] == "compare" and d["judgement"]["basis"]["batch_a"] == 32 and d["judgement"]["verdict"] == "slower"'
expect_json "$T/out" 'd["buckets"]["known"] is False and d["buckets"]["b_known"] is False'
# Nothing measured the same way: said, exit 0.
expect_exit 0 "$DG" --no-ledger compare pa.json fixcmp.json --json
expect_json "$T/out" 'd["judgement"]["verdict"] == "unknown" and "share no throughput" in d["judgement"]["text"]'
# A real accept -- CMD-shaped record from the repo's fixtures is read too.
expect_exit 0 "$DG" --no-ledger compare "$SRC/tests/data/records/accept-opencl.json" "$SRC/tests/data/records/accept-threshold40.json" --json
expect_json "$T/out" 'd["judgement"]["verdict"] == "inconclusive" and d["judgement"]["why"] == "n too small"'
# Not a record at all is still refused.
echo '{"x": 1}' >nokind.json
expect_exit 2 "$DG" --no-ledger compare pa.json nokind.json
expect_grep "$T/err" 'not a devgate record'

# ---- the ledger: ids, and a read-only ledger (a reading verb) -------------------
mkdir "$T/lg" "$T/ro"
"$DG" --ledger "$T/lg/ledger.db" run --no-env -o "$T/p1" -- "$PY" "$SCRIPT" --epochs 6 --steps 3 --step-ms 20 >/dev/null 2>&1
"$DG" --ledger "$T/lg/ledger.db" run --no-env -o "$T/p2" -- "$PY" "$SCRIPT" --epochs 6 --steps 3 --step-ms 20 >/dev/null 2>&1
ids=$("$DG" --ledger "$T/lg/ledger.db" ledger list --json | python3 -c 'import json,sys; print(" ".join(r["id"] for r in json.load(sys.stdin) if r["verb"]=="run"))')
expect_exit 0 "$DG" --ledger "$T/lg/ledger.db" compare $ids --json
expect_json "$T/out" 'd["judgement"]["verdict"] in ("no-difference", "inconclusive")'
# Comparing records nothing: the ledger holds the two runs only.
expect_exit 0 "$DG" --ledger "$T/lg/ledger.db" ledger list --json
expect_json "$T/out" 'len(d) == 2'
before=$(sha256sum "$T/lg/ledger.db")
cat >"$T/ro.sh" <<EOF
touch "\$1/probe" 2>/dev/null && { echo WRITABLE; rm -f "\$1/probe"; exit 0; }
"$DG" --ledger "\$1/ledger.db" compare $ids >"$T/ro.out" 2>"$T/ro.err"; echo "compare \$?"
EOF
how=""
if unshare -m true 2>/dev/null; then
  unshare -m bash -c "mount --bind '$T/lg' '$T/ro' && mount -o remount,bind,ro '$T/ro' && bash '$T/ro.sh' '$T/ro'" >"$T/ro.res" 2>&1 && how="a read-only bind mount"
fi
if [ -z "$how" ] && chattr +i "$T/lg" 2>/dev/null; then
  bash "$T/ro.sh" "$T/lg" >"$T/ro.res" 2>&1 && how="an immutable folder"
  chattr -i "$T/lg"
fi
if [ -z "$how" ]; then
  echo "SKIP: read-only ledger case: neither a read-only bind mount nor chattr +i works here" >&2
elif grep -q WRITABLE "$T/ro.res"; then
  bad "$how still took a write; the read-only case proves nothing"
else
  expect_grep "$T/ro.res" '^compare 0$' "compare on $how"
  expect_grep "$T/ro.out" '^  decision +(no-difference|inconclusive):'
  [ "$before" = "$(sha256sum "$T/lg/ledger.db")" ] && ok || bad "compare changed the ledger"
fi

done_tests
