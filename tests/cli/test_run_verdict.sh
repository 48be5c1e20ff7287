#!/usr/bin/env bash
# `run` ends with what the run proved, never with accept's final gate (issue
# 22 item 3): the program's end and the findings by severity, in the record
# and on the terminal; "not accepted" (a sweep a run never does) never shows.
. "$(dirname "$0")/lib.sh"

expect_exit 0 "$DG" --no-ledger run --no-env -o "$T/ok" -- true
# (a loaded machine may add "contended": the measured window shared the CPUs)
expect_grep "$T/out" '^  run: the program exited 0; (no findings|findings: 1 warn \(contended\))$' "the summary"
grep -q 'not accepted' "$T/out" && bad "a healthy run's summary says 'not accepted'" || ok
expect_json "$T/ok/report.json" 'd["final_gate"]["for"] == "run" and d["final_gate"]["accepted"] is False'

expect_exit 1 "$DG" --no-ledger run --no-env -o "$T/bad" -- sh -c 'exit 3'
expect_grep "$T/out" 'run: the program exited with status 3; findings: 1 fail \(program-failed\)' "the summary"
expect_json "$T/bad/report.json" '"status 3" in d["final_gate"]["statement"] and d["final_gate"]["fail_findings"] == 1'

# A failed program is quoted: the exception of its last traceback, in the
# record, the finding, the step's error and the verdict on the terminal.
U="${DEVGATE_SRC:?}/tests/python/scripts/user"
expect_exit 1 "$DG" --no-ledger run --no-env -o "$T/crash" -- python3 "$U/tracked_train.py" \
  --tracker devgate_absent_tracker
expect_grep "$T/out" "program-failed +the program exited with status 1: ModuleNotFoundError: No module named 'devgate_absent_tracker'$" "the finding"
expect_grep "$T/out" "run: the program exited with status 1 \(ModuleNotFoundError: No module named 'devgate_absent_tracker'\); findings" "the verdict"
expect_grep "$T/err" "^devgate: run: exit status 1: ModuleNotFoundError: No module named 'devgate_absent_tracker'$" "the error on stderr"
expect_grep "$T/out" "^epoch 0 step 4 loss" "the program's own output"
expect_json "$T/crash/report.json" 'd["supervise"]["error_lines"] == ["ModuleNotFoundError: No module named %sdevgate_absent_tracker%s" % (chr(39), chr(39))] and d["supervise"]["error_lines_source"] == "traceback"'
expect_json "$T/crash/report.json" '[e for e in d["findings"][0]["evidence"] if e["field"] == "error_lines[0]"][0]["value"].startswith("ModuleNotFoundError")'
# Any program: its last lines (stdout among them: --json sends it to stderr),
# cleaned of colours, of the CRs of a redrawn line and of control bytes.
expect_exit 1 "$DG" --no-ledger run --no-env --json -o "$T/sh" -- sh -c \
  'echo "reading shards"; printf "loading 10%%\rloading 100%%\n" >&2; printf "\033[31merror:\033[0m cannot open data/train-00001.idx\a\n" >&2; exit 2'
expect_json "$T/sh/report.json" 'd["supervise"]["error_lines"] == ["reading shards", "loading 100%", "error: cannot open data/train-00001.idx?"] and d["supervise"]["error_lines_source"] == "output tail"'
expect_json "$T/out" 'd["supervise"]["exit_status"] == 2'
# The probe's own messages (note events) reach devgate's stderr, prefixed,
# and the record; not the program's output.
PYTHONPATH="$DEVGATE_SRC/clients/python" expect_exit 0 "$DG" --no-ledger run --no-env --probe manual \
  -o "$T/note" -- python3 -c 'import devgate_probe as d; d.Probe().note("a hook could not be set"); print("trained")'
expect_grep "$T/err" '^devgate: probe: a hook could not be set$' "the note on devgate's stderr"
expect_grep "$T/out" '^trained$' "the program's output"
if grep -q '^a hook could not be set' "$T/out" "$T/err"; then bad "the note reached the program's output"; else ok; fi
expect_json "$T/note/report.json" 'd["supervise"]["notes"] == ["a hook could not be set"] and d["supervise"]["events"]["by_kind"]["note"] == 1'
# A clean exit quotes nothing.
expect_json "$T/ok/report.json" 'd["supervise"]["error_lines"] is None'

done_tests
