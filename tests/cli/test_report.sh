#!/usr/bin/env bash
# devgate report: every format from a file, -o DIR, ledger lookups that fail,
# and exit status 2 with a message naming the thing for every refusal. (A
# record found in the ledger by run id is rendered in tests/unit/test_report.c,
# which can record an evidence record with dg_ledger_record.)
. "$(dirname "$0")/lib.sh"
S="${DEVGATE_SRC:?}/tests/data/records/report-sample.json"

# The terminal summary is the default.
expect_exit 0 "$DG" report "$S"
expect_grep out '^devgate accept · run 20261130-0655-abcd · bucket b5e9a7b2 · host build-01$'
expect_grep out '^  sweep +PASS  knee b64'
expect_grep out '^   fail  slow-device-data'
expect_grep out '^ +→ look for references kept across steps'
expect_grep out '^  decision  device \(opencl\)'
expect_grep out '^  accepted: 1234.5 samples/s at batch 64 on opencl$'
expect_grep out '^  pack  devgate-report/20261130-0655-abcd/report.html$'

expect_exit 0 "$DG" report "$S" --format text
expect_grep out '^devgate accept'

expect_exit 0 "$DG" report "$S" --format html
expect_grep out '^<!DOCTYPE html>'
expect_grep out "Content-Security-Policy\" content=\"default-src 'none'"
if grep -qi '<script' out; then bad "html has a script element"; else ok; fi

expect_exit 0 "$DG" report "$S" --format md
expect_grep out '^## devgate accept: ✅ accepted'
expect_grep out '^### Findings'
expect_grep out '^\| knee \| batch 64'

expect_exit 0 "$DG" report "$S" --format json
expect_json out 'd["kind"]=="accept" and d["run_id"]=="20261130-0655-abcd" and len(d["findings"])==2'
expect_exit 0 "$DG" report "$S" --json
expect_json out 'd["final_gate"]["accepted"] is True'

# The memory threshold the rules used (a real record of `accept --quick
# --threshold mem_growth_pct=40`) is the one shown: page, chart and Markdown.
S40="$DEVGATE_SRC/tests/data/records/accept-threshold40.json"
expect_json "$S40" 'd["thresholds"]["mem_growth_pct"]==40'
expect_exit 0 "$DG" report "$S40" --format html
expect_grep out '>threshold \+40%</text>' "the memory chart"
expect_grep out ' · threshold 40% · ' "the memory section"
if grep -q 'threshold +\?26%' out; then bad "page still says 26%"; else ok; fi
expect_exit 0 "$DG" report "$S40" --format md
expect_grep out '^\| memory growth over 4 epochs \(threshold 40%\) \|'

# -o DIR: html by default, the folder created, the path printed.
expect_exit 0 "$DG" report "$S" -o "$T/pack/a/b"
expect_grep out "^$T/pack/a/b/report.html$"
[ -s "$T/pack/a/b/report.html" ] && ok || bad "report.html not written"
expect_grep "$T/pack/a/b/report.html" '</html>'
expect_exit 0 "$DG" report "$S" --format md -o "$T/pack"
[ -s "$T/pack/report.md" ] && ok || bad "report.md not written"
expect_exit 0 "$DG" report "$S" --format=json --output "$T/pack"
expect_json "$T/pack/report.json" 'd["kind"]=="accept"'
ls "$T"/pack/.report* >/dev/null 2>&1 && bad "temporary file left behind" || ok

# Refusals: exit 2, the message names the thing.
expect_exit 2 "$DG" report "$T/nosuch.json"
expect_grep err 'nosuch.json'
printf '{"v":1,"kind":"accept",' >"$T/cut.json"
expect_exit 2 "$DG" report "$T/cut.json"
expect_grep err 'cut.json.*not valid JSON'
printf '{"v":1,"kind":"bogus","backends":[]}\n' >"$T/bogus.json"
expect_exit 2 "$DG" report "$T/bogus.json" --format html
expect_grep err "bogus.json.*not an evidence record.*'bogus'"
: >"$T/empty.json"
expect_exit 2 "$DG" report "$T/empty.json"
expect_grep err 'empty.json'
mkdir -p "$T/adir"
expect_exit 2 "$DG" --no-ledger report "$T/adir"
expect_grep err 'adir'
if [ "$(id -u)" -ne 0 ]; then
  cp "$S" "$T/locked.json" && chmod 000 "$T/locked.json"
  expect_exit 2 "$DG" report "$T/locked.json"
  expect_grep err 'locked.json'
fi
expect_exit 2 "$DG" report "$S" --format pdf
expect_grep err "pdf"
expect_exit 2 "$DG" report
expect_grep err 'usage|use .report'
expect_exit 2 "$DG" report "$S" --frobnicate
expect_grep err 'frobnicate'
expect_exit 2 "$DG" report "$S" "$S"
touch "$T/afile"
expect_exit 2 "$DG" report "$S" -o "$T/afile/sub"
expect_grep err 'afile'

# The ledger: an id that matches no run, a run that is not an evidence record.
expect_exit 2 "$DG" report 19990101-000000-0000
expect_grep err "'19990101-000000-0000' is neither a file nor a run"
# Every verb's own record renders (issue 22): its one step line on the
# terminal and in Markdown, and a page with just its section.
"$DG" gate --backend cpu --size 8 >/dev/null 2>&1
"$DG" train --steps 4 --batch 16 --threads 1 --workers 0 >/dev/null 2>&1
"$DG" soak --steps 4 --batch 16 --epochs 2 --threads 1 --workers 0 >/dev/null 2>&1
ids=$("$DG" ledger list --json | python3 -c 'import json,sys; [print(r["verb"], r["id"]) for r in json.load(sys.stdin)]')
gid=$(echo "$ids" | awk '$1=="gate"{print $2}')
tid=$(echo "$ids" | awk '$1=="train"{print $2}')
sid=$(echo "$ids" | awk '$1=="soak"{print $2}')
expect_exit 0 "$DG" report "$gid"
expect_grep out "devgate gate · run $gid"
expect_grep out '^  gate +PASS +cpu [0-9.]+ GFLOP/s ok'
expect_exit 0 "$DG" report "$tid" --format md
expect_grep out '^## devgate train: ok'
expect_grep out '\| train \| ok \| ok \| mlp on cpu b16: [0-9]+ samples/s · loss'
expect_exit 0 "$DG" report "$sid"
expect_grep out '^  soak +OK +allocated [-+][0-9]+%.* after 2 epochs'
expect_exit 0 "$DG" report "$sid" -o "$T/soakpage"
grep -q 'Memory curve' "$T/soakpage/report.html" && ok || bad "the soak's page has no memory curve"
grep -q 'No batch sweep in this record' "$T/soakpage/report.html" &&
  bad "a soak's page lists the sections accept's record has" || ok
expect_exit 0 "$DG" report "$gid" --format html
expect_grep out 'Device gate log'
expect_exit 2 "$DG" --no-ledger report "$gid"
expect_grep err 'no-ledger'

done_tests
