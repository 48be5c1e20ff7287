#!/usr/bin/env bash
# devgate accept --level 2 -- CMD: the gate step runs devgate's own device
# gate at the level on the backend behind the command's device (cpu here; a
# device the program's interpreter calls cuda is gated on devgate's cuda
# backend), in a child, with the level's budget said up front, recorded and
# kept; the level's checks join the gate section's entry of the device, so
# op-numerics (a planted wrong bias_add through DEVGATE_FAULT) is a finding
# of the record, of the page and of the ledger's row. --quick (level 1) runs
# no device gate. The command is a torch-free stand-in
# (tests/python/scripts/sweep_train.py: planned step times through the
# probe's explicit API).
. "$(dirname "$0")/lib.sh"
SRC=${DEVGATE_SRC:?}
PY=$(command -v python3)
unset PYTHONPATH DEVGATE_PROBE_PATH DEVGATE_OOM_EVENTS DEVGATE_TRIAL_PLAN
SCRIPT="$SRC/tests/python/scripts/sweep_train.py"
CMD=("$PY" "$SCRIPT" --batch '{batch}' --device '{device}' --epochs '{epochs}' --steps 3 --base-ms 5)
FAST=(--sweep-from 16 --sweep-to 32 --epochs 2)

# A planted wrong kernel: bias_add one ulp high on the cpu backend.
DEVGATE_FAULT=bias-ulp@cpu "$DG" accept --json --level 2 "${FAST[@]}" -o pack -- "${CMD[@]}" \
  >acc.json 2>acc.err
rc=$?
[ "$rc" -eq 1 ] && ok || { bad "accept --level 2 -- CMD with a wrong bias_add exited $rc, not 1"; tail -20 acc.err >&2; }
expect_grep acc.err "level 2 .*the device gate's budget 60 s" "the budget said up front"
expect_grep acc.err "the device gate \(level 2 on cpu\) took [0-9.]+ s, within its 60 s budget" "the budget kept, said after"
expect_grep acc.err "\[2/6 gate\] ok: .*level 2 on cpu: fail" "the gate step's line"
# The level object: asked, its budget, the backend, what it ran, the verdict.
expect_json acc.json 'd["gate"]["level"]["level"] == 2 and d["gate"]["level"]["backend"] == "cpu" and d["gate"]["level"]["budget"]["value"] == 60 and d["gate"]["level"]["overrun"] is False'
expect_json acc.json 'd["gate"]["level"]["wall"]["valid"] and 0 < d["gate"]["level"]["wall"]["value"] <= 60'
expect_json acc.json '"ops" in d["gate"]["level"]["checks"] and d["gate"]["level"]["verdict"] == "fail" and d["gate"]["level"]["reason"] is None'
expect_json acc.json 'd["gate"]["reference_ok"] is True and len(d["gate"]["reference_check"]) > 0'
expect_json acc.json 'd["gate"]["verdict"] == "fail"'
# The checks sit in the device's entry, beside the program's own gate of it.
expect_json acc.json '[b for b in d["gate"]["backends"] if b["name"] == "cpu"][0]["level_backend"] == "cpu"'
expect_json acc.json '(lambda o: o["failed"] >= 1 and o["checked"] > 50 and any(r["op"] == "bias_add" and r["verdict"] == "fail" for r in o["table"]))([b for b in d["gate"]["backends"] if b["name"] == "cpu"][0]["ops"])'
# The finding names the op, with evidence in the gate section.
expect_json acc.json 'any(f["id"] == "op-numerics" and "bias_add" in f["title"] and f["severity"] == "fail" for f in d["findings"])'
expect_json acc.json 'any(e["section"] == "gate" and ".ops.table[" in e["field"] for f in d["findings"] if f["id"] == "op-numerics" for e in f["evidence"])'
expect_grep pack/report.html "op-numerics" "the page"
expect_grep pack/report.html "bias_add" "the page's per-op table"
"$DG" ledger export --format jsonl >rows.jsonl 2>rows.err || bad "ledger export failed"
expect_grep rows.jsonl "op-numerics" "the ledger's row"

# A healthy device: the same level passes, nothing to find.
"$DG" --no-ledger accept --json --level 2 "${FAST[@]}" -- "${CMD[@]}" >ok.json 2>ok.err
rc=$?
# 4: no fail finding, not accepted (this short run's proofs are short).
[ "$rc" -eq 0 ] || [ "$rc" -eq 4 ] && ok || { bad "accept --level 2 -- CMD exited $rc"; tail -20 ok.err >&2; }
expect_json ok.json 'd["gate"]["level"]["verdict"] == "pass" and not any(f["id"] in ("op-numerics", "link-slow", "throttled", "device-unstable") for f in d["findings"])'
expect_json ok.json '[b for b in d["gate"]["backends"] if b["name"] == "cpu"][0]["ops"]["failed"] == 0'
expect_json ok.json 'd["gate"]["verdict"] != "fail"'

# An accelerator: the program's interpreter (a stand-in) says cuda works;
# its level checks are devgate's cuda backend's, which this machine lacks:
# recorded as such, the run goes on.
"$DG" --no-ledger accept --json --level 2 "${FAST[@]}" --python "$SRC/tests/cli/data/fake_gate_python" \
  -- "${CMD[@]}" >acc-cuda.json 2>acc-cuda.err
rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 4 ] && ok || { bad "accept --level 2 -- CMD on the stand-in cuda exited $rc"; tail -20 acc-cuda.err >&2; }
expect_json acc-cuda.json 'd["spec"]["backend"] == "cuda" and d["gate"]["level"]["backend"] == "cuda"'
expect_json acc-cuda.json '[b for b in d["gate"]["backends"] if b["name"] == "cuda"][0].get("level_backend") == "cuda"'
expect_json acc-cuda.json 'd["gate"]["level"]["verdict"] in ("unavailable", "pass")'

# Level 1 (--quick): the program's gate alone.
"$DG" --no-ledger accept --json --quick "${FAST[@]}" -- "${CMD[@]}" >quick.json 2>quick.err
expect_json quick.json '"backend" not in (d["gate"].get("level") or {}) and not any("ops" in b for b in d["gate"]["backends"])'
done_tests
