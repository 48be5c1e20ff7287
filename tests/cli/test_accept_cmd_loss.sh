#!/usr/bin/env bash
# accept -- CMD's loss check (issue 21 item 8): the compare step's cpu and
# device sides are short runs of the same command; the losses both reported
# at the same (epoch, step) are paired (the first repetition of each side),
# judged against loss_rel_diff_max (0.01) in the RUN's loss, and a drift is
# named by numerics-drift as a warn that leaves the route to the speed (a
# user's model with dropout differs by design). The machine has no GPU:
# the gate's interpreter is a stand-in that reports cuda working
# (tests/cli/data/fake_gate_python) and the torch-free stand-in program
# (tests/python/scripts/sweep_train.py --loss) plants its loss curve, drifting
# off the cpu with --drift, unreproducible with --jitter. Then PyTorch, where
# /usr/bin/python3 has it: precision_train.py on both sides (fp32: the same
# losses), and with the planted dtype change on the device side only
# (--device-arg 'cuda=--dtype bfloat16'): over the pair's few early steps
# bf16 moves the loss by about 4e-4, inside the tolerance, and the check
# records that size (the H200's: docs/evidence/h200-lossdrift-20261202.log).
. "$(dirname "$0")/lib.sh"
SRC=${DEVGATE_SRC:?}
unset PYTHONPATH DEVGATE_PROBE_PATH
GATE="$SRC/tests/cli/data/fake_gate_python"
CMD=(python3 "$SRC/tests/python/scripts/sweep_train.py" --batch '{batch}' --device '{device}'
  --epochs '{epochs}' --steps 3 --base-ms 10 --cpu-ms 12)

acc() { # acc NAME WANT_EXIT [accept options --] args of the stand-in...
  local name=$1 want=$2; shift 2
  "$DG" --no-ledger accept --json --quick --sweep-from 16 --sweep-to 16 --python "$GATE" \
    -o "pack-$name" "$@" >"$name.json" 2>"$name.err"
  local rc=$?
  [ "$rc" -eq "$want" ] && ok || { bad "accept ($name) exited $rc, wanted $want"; tail -5 "$name.err" >&2; }
}

# The same losses on both sides: agree, within tolerance, nothing named.
acc agree 0 -- "${CMD[@]}" --loss
expect_json agree.json '(l := (r := d["compare"]["runs"][0])["loss"])["agree"] is True and l["pairs"] >= 3 and l["max_rel_diff"]["value"] == 0 and l["tolerance"] == 0.01 and l["why"] is None and r["verdict"] == "within tolerance"'
expect_json agree.json 'd["compare"]["runs"][0]["loss"]["cpu_repeat_max_rel_diff"]["value"] == 0 and d["compare"]["runs"][0]["loss"]["cpu_only"] == 0'
expect_json agree.json 'not any(f["id"] == "numerics-drift" for f in d["findings"])'
expect_json agree.json 'any("; loss agrees over" in s["summary"] for s in d["steps"] if s["name"] == "compare")'

# The device's losses drift 0.6% more each step: named (warn), the route left to the speed.
acc drift 0 -- "${CMD[@]}" --loss --drift 0.05
expect_json drift.json '(l := (r := d["compare"]["runs"][0])["loss"])["agree"] is False and l["max_rel_diff"]["value"] > 0.01 and r["verdict"] == "drift" and r["drift"] == ["loss.max_rel_diff"]'
expect_json drift.json 'any(f["id"] == "numerics-drift" and f["severity"] == "warn" and f["title"].startswith("the command'"'"'s cuda loss drifts from its cpu loss by ") and "above loss_rel_diff_max 0.01" in f["title"] for f in d["findings"])'
expect_json drift.json 'not any("loss drifts" in r or "drift" in r for r in d["decision"]["reasons"])'
expect_json drift.json 'any("; loss DRIFTS over" in s["summary"] for s in d["steps"] if s["name"] == "compare")'
# The renders show the loss check where they show the compare.
"$DG" --no-ledger report pack-drift/report.json --format text >drift.txt 2>&1
expect_grep drift.txt 'speedup +cuda .* · loss DRIFTS from the cpu.s by 0.0[0-9]+ over [0-9]+ steps \(at epoch [0-9]+ step [0-9]+; tolerance 0.01\)'
"$DG" --no-ledger report pack-drift/report.json --format md >drift.md 2>&1
expect_grep drift.md '^\| loss vs cpu, batch 16 \| loss DRIFTS from the cpu'
"$DG" --no-ledger report pack-drift/report.json --format html >drift.html 2>&1
expect_grep drift.html 'loss DRIFTS from the cpu&#39;s by'

# A program that does not reproduce its own losses on the cpu (unseeded):
# not comparable, said why, nothing named.
acc jitter 0 -- "${CMD[@]}" --loss --jitter 0.5
expect_json jitter.json '(l := d["compare"]["runs"][0]["loss"])["agree"] is None and "does not reproduce its own losses" in l["why"] and l["cpu_repeat_max_rel_diff"]["value"] > 0.01 and d["compare"]["runs"][0]["verdict"] is None'
expect_json jitter.json 'not any(f["id"] == "numerics-drift" for f in d["findings"])'
# No loss reported: not compared, said so.
acc none 0 -- "${CMD[@]}"
expect_json none.json 'd["compare"]["runs"][0]["loss"]["agree"] is None and d["compare"]["runs"][0]["loss"]["why"] == "no losses reported"'

# PyTorch through the zero-code probe (the losses read at the stop, off the hot path).
PY=/usr/bin/python3
if [ -x "$PY" ] && "$PY" -c 'import torch' >/dev/null 2>&1; then
  P=("$PY" "$SRC/tests/python/scripts/user/precision_train.py" --batch-size '{batch}' --epochs '{epochs}')
  "$DG" --no-ledger accept --json --quick --sweep-from 32 --sweep-to 32 --python "$GATE" -o pack-t32 \
    -- "${P[@]}" >t32.json 2>t32.err || { [ $? -le 1 ] || bad "accept (torch fp32) failed"; }
  expect_json t32.json '(l := d["compare"]["runs"][0]["loss"])["agree"] is True and l["pairs"] >= 3 and l["max_rel_diff"]["value"] == 0'
  "$DG" --no-ledger accept --json --quick --sweep-from 32 --sweep-to 32 --python "$GATE" -o pack-tbf \
    --device-arg 'cuda=--dtype bfloat16' -- "${P[@]}" >tbf.json 2>tbf.err || { [ $? -le 1 ] || bad "accept (torch bf16) failed"; }
  expect_json tbf.json '(l := d["compare"]["runs"][0]["loss"])["agree"] is True and l["pairs"] >= 3 and 1e-5 < l["max_rel_diff"]["value"] < 0.01'
else
  echo "torch cases skipped: torch is not importable by $PY"
fi
done_tests
