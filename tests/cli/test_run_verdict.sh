#!/usr/bin/env bash
# `run` ends with what the run proved, never with accept's final gate (issue
# 22 item 3): the program's end and the findings by severity, in the record
# and on the terminal; "not accepted" (a sweep a run never does) never shows.
. "$(dirname "$0")/lib.sh"

expect_exit 0 "$DG" --no-ledger run --no-env -o "$T/ok" -- true
expect_grep "$T/out" '^  run: the program exited 0; no findings' "the summary"
grep -q 'not accepted' "$T/out" && bad "a healthy run's summary says 'not accepted'" || ok
expect_json "$T/ok/report.json" 'd["final_gate"]["for"] == "run" and d["final_gate"]["accepted"] is False'

expect_exit 1 "$DG" --no-ledger run --no-env -o "$T/bad" -- sh -c 'exit 3'
expect_grep "$T/out" 'run: the program exited with status 3; findings: 1 fail \(program-failed\)' "the summary"
expect_json "$T/bad/report.json" '"status 3" in d["final_gate"]["statement"] and d["final_gate"]["fail_findings"] == 1'

done_tests
