#!/usr/bin/env bash
# Human output and the prose devgate writes into records never say "nan" or
# "inf": a value that was not measured reads "not reported". Every sweep trial
# crashes here, so there is no knee, no safe batch and no rate to print.
. "$(dirname "$0")/lib.sh"

nan_free() { # FILE WHAT: no nan/inf token in FILE
  if grep -qiwE -- '[-+]?(b?nan|inf)%?x?' "$1"; then
    bad "$2 prints nan/inf: $(grep -oiwE -- '.{0,30}[-+]?(b?nan|inf)%?x?.{0,10}' "$1" | head -3)"
  else ok; fi
}

DEVGATE_FAULT=trial-crash@8 expect_exit 0 "$DG" --no-ledger accept --quick --model mlp \
  --sweep-to 8 --backend cpu -o pack
nan_free "$T/out" "accept's summary"
nan_free "$T/err" "accept's progress"
expect_grep "$T/out" 'sweep .*knee not reported' "accept's sweep line"
# The record's own step summaries (what the ledger and every later report read).
python3 - pack/report.json >"$T/summaries" <<'PY'
import json, sys
for s in json.load(open(sys.argv[1]))["steps"]:
    print(s["name"], s.get("summary") or "")
PY
expect_grep "$T/summaries" '^sweep .*knee not reported .*safe not reported' "the record's sweep summary"
nan_free "$T/summaries" "the record's step summaries"
nan_free pack/report.md "report.md"

# The verbs' own printers on the same kind of run.
DEVGATE_FAULT=trial-crash@8 expect_exit 1 "$DG" --no-ledger sweep --model mlp --from 8 --to 8 \
  --warmup-steps 1 --timed-steps 2
nan_free "$T/out" "sweep"
expect_exit 0 "$DG" --no-ledger train --model mlp --steps 3 --val-split 0.5
nan_free "$T/out" "train"

done_tests
