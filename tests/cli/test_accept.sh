#!/usr/bin/env bash
# devgate accept: the pack, its schema, the ledger entry, thresholds and the
# spec file, exit statuses, and an interrupted run that keeps what it measured.
. "$(dirname "$0")/lib.sh"
SRC=${DEVGATE_SRC:?}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
SMALL=(--quick --model mlp --sweep-to 128)

# validate FILE: the record against docs/schema/report.schema.json
validate() {
  if "$PY" - "$SRC/docs/schema/report.schema.json" "$1" <<'PY'
import json, sys
try:
    import jsonschema
except ImportError:
    sys.exit(0)  # the test tier installs python3-jsonschema; without it only the shape checks run
jsonschema.validate(json.load(open(sys.argv[2])), json.load(open(sys.argv[1])))
PY
  then ok; else bad "$1 does not validate against report.schema.json"; fi
}

# --- the cpu alone: every proof, a complete record, one ledger entry -------------
expect_exit 0 "$DG" accept "${SMALL[@]}" --backend cpu -o packA
expect_grep out '^  (env|gate|sweep|soak|compare|profile) ' "summary lines"
expect_grep out 'pack +packA' "pack line"
for f in report.json report.html report.md trace.json; do
  [ -s "packA/$f" ] && ok || bad "packA/$f missing"
done
validate packA/report.json
expect_json packA/report.json 'd["state"] == "complete" and [s["name"] for s in d["steps"]] == ["env","gate","sweep","soak","compare","profile"]'
# --quick is a screening: every proof of its tier, never "accepted".
expect_json packA/report.json 'd["final_gate"]["accepted"] is False and d["final_gate"]["screening"] is True and d["final_gate"]["statement"].startswith("screening only")'
# The sweep proves a ceiling only with 4 trials and a proving stop (a loaded machine
# can end the short tier's sweep early on its time budget).
expect_json packA/report.json 'all(d["final_gate"]["proofs"][k] for k in ("architecture", "gate_log", "memory_curve")) and d["final_gate"]["proofs"]["sweep"] == (len(d["sweep"]["trials"]) >= 4 and d["sweep"]["stopped"]["reason"] in ("oom", "budget", "swap", "throughput-falling", "throughput-plateau", "time", "limit", "train-set"))'
expect_json packA/report.json 'd["steps"][4]["status"] == "skipped" and d["compare"] is None'
# Each step's share of the method's wall: its wall over level.wall; none for the skipped step.
expect_json packA/report.json 'all(abs(s["share"]["value"] - s["wall"]["value"] / d["level"]["wall"]["value"]) < 1e-6 and s["share"]["unit"] == "fraction" for s in d["steps"] if s["status"] != "skipped") and 0.5 < sum(s["share"]["value"] for s in d["steps"] if s["share"]["valid"]) <= 1 and not d["steps"][4]["share"]["valid"]'
expect_grep packA/report.md '^\| (env|gate|sweep|soak|profile) \| ok \| .* \| [0-9.]+% \|$' "each step's share on the page"
expect_json packA/report.json 'd["profile"]["trace"] == "trace.json" and d["pack"]["dir"] == "packA"'
id=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' packA/report.json)
expect_exit 0 "$DG" ledger show "$id" --json
expect_json out 'd["verb"] == "accept" and d["state"] == "complete" and d["record"]["pack"]["dir"] == "packA"'

# --- the default device with a hostile label ------------------------------------
"$DG" accept "${SMALL[@]}" --label '<script>alert(1)</script>' -o packB >out 2>err
rc=$?
[ "$rc" -le 1 ] && ok || { bad "accept on the default device exited $rc"; sed 's/^/  /' err >&2; }
validate packB/report.json
if grep -q '<script>alert(1)' packB/report.html; then bad "the label reached report.html unescaped"; else ok; fi
expect_json packB/report.json 'd["label"] == "<script>alert(1)</script>" and d["decision"]["route"] in ("cpu","device","native","remote","inconclusive")'
expect_json packB/report.json '(d["final_gate"]["fail_findings"] > 0) == ('"$rc"' == 1)'

# --- thresholds: checked before measuring; recorded when used --------------------
expect_exit 2 "$DG" accept "${SMALL[@]}" --threshold no_such_threshold=1 -o packC
expect_grep err 'no_such_threshold' "unknown threshold message"
[ ! -e packC ] && ok || bad "a usage error still measured and wrote a pack"
# --- --disable-op: judged before measuring (an unknown op or backend, an op
# aimed at the cpu), each refused at once with exit 2 and no pack -------------
for bad_op in conv3d@opencl conv2d@metal conv2d@cpu; do
  t0=$(date +%s)
  expect_exit 2 "$DG" accept "${SMALL[@]}" --disable-op "$bad_op" -o packX
  [ $(( $(date +%s) - t0 )) -lt 20 ] && ok || bad "--disable-op $bad_op was refused only after measuring"
  [ ! -e packX ] && ok || bad "--disable-op $bad_op still measured and wrote a pack"
done
expect_grep err 'cpu is the fallback backend' "op aimed at the cpu message"
expect_exit 2 "$DG" --no-ledger sweep --model mlp --to 16 --disable-op conv3d
expect_grep err "unknown op 'conv3d'" "sweep checks --disable-op first"
cat >spec.json <<'EOF'
{"model": "mlp", "backend": "cpu", "quick": true, "sweep_to": 64, "thresholds": {"mem_growth_pct": 50}}
EOF
expect_exit 0 "$DG" accept --spec spec.json --threshold device_busy_min=0.5 -o packD
expect_json packD/report.json 'd["thresholds"]["mem_growth_pct"] == 50 and d["thresholds"]["device_busy_min"] == 0.5 and d["spec"]["model"] == "mlp"'
echo '{"model": "mlp", "colour": "red"}' >bad-spec.json
expect_exit 2 "$DG" accept --spec bad-spec.json
expect_grep err 'colour' "unknown spec key message"

# --- levels: --quick is level 1 and refuses another; each is said and recorded ----
expect_json packA/report.json 'd["spec"]["level"] == 1 and d["spec"]["quick"] is True and d["level"]["level"] == 1 and d["level"]["budget"]["value"] == 180 and d["gate"]["level"]["level"] == 1'
expect_json packA/report.json 'd["level"]["wall"]["valid"] and d["level"]["overrun"] == (d["level"]["wall"]["value"] - d["level"]["lock_waited"]["value"] > 180)'
expect_exit 2 "$DG" accept "${SMALL[@]}" --level 3 -o packL
expect_grep err '--quick is level 1; it cannot run --level 3'
[ ! -e packL ] && ok || bad "a level conflict still measured and wrote a pack"
expect_exit 2 "$DG" accept --level 5 -o packL
expect_grep err '--level wants an integer in 1..4'
echo '{"model": "mlp", "level": 9}' >bad-level.json
expect_exit 2 "$DG" accept --spec bad-level.json -o packL
expect_grep err 'level wants an integer in 1..4'

# --- a failed gate is a fail finding: exit 1, not accepted -----------------------
DEVGATE_FAULT=gemm-corrupt@cpu expect_exit 1 "$DG" accept "${SMALL[@]}" --backend cpu -o packE
expect_json packE/report.json 'any(f["id"] == "gate-failed" and f["severity"] == "fail" for f in d["findings"])'
expect_json packE/report.json 'd["final_gate"]["accepted"] is False and d["final_gate"]["statement"].startswith("screening only") and "1 fail finding" in d["final_gate"]["statement"]'

# --- a backend that is not there: exit 3, the gate log is still kept --------------
if ! "$DG" gate --backend cuda >/dev/null 2>&1; then
  expect_exit 3 "$DG" accept "${SMALL[@]}" --backend cuda -o packF
  expect_json packF/report.json 'd["gate"] is not None and d["sweep"] is None and d["steps"][2]["status"] == "skipped"'
fi

# --- the ledger cannot be opened: the pack keeps the record, exit 2 ---------------
: >afile
expect_exit 2 "$DG" --ledger afile/ledger.db accept "${SMALL[@]}" --backend cpu -o packG
expect_json packG/report.json 'd["run_id"] is None and d["sweep"] is not None'
expect_grep err 'packG/report.json' "where the record went"

# --- Ctrl-C mid-sweep: exit 130, partial pack and ledger entry kept ---------------
DEVGATE_FAULT=trial-hang@16 "$DG" accept "${SMALL[@]}" --backend cpu -o packI >outI 2>errI &
pid=$!
child=
for _ in $(seq 1 600); do
  child=$(pgrep -P "$pid" -x dgtrial-16 || true) # the trial names itself by its batch
  [ -n "$child" ] && break
  sleep 0.1
done
[ -n "$child" ] && ok || bad "the hanging trial never started"
kill -INT "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 130 ] && ok || { bad "interrupted accept exited $rc, wanted 130"; sed 's/^/  /' errI >&2; }
expect_grep errI 'interrupted' "interrupt message"
validate packI/report.json
expect_json packI/report.json 'd["state"] == "interrupted" and d["sweep"]["stopped"]["reason"] == "interrupted"'
expect_json packI/report.json '[s["status"] for s in d["steps"]][2:] == ["interrupted","skipped","skipped","skipped"]'
expect_json packI/report.json 'd["sweep"]["trials"][0]["ended"] == "ok" and d["final_gate"]["accepted"] is False'
for _ in $(seq 1 50); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
kill -0 "$child" 2>/dev/null && bad "the hanging trial $child outlived the interrupt" || ok
expect_exit 0 "$DG" ledger list
expect_grep out 'accept .*130 .*\(interrupted\)' "interrupted ledger entry"

done_tests
