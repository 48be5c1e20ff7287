#!/usr/bin/env bash
# Unknown model, preset, backend and data names are usage errors (exit 2)
# before anything is measured, from flags and spec files alike, in every verb
# that trains the fixture (issue 21 item 9): no pack, no ledger entry, the
# message naming the value. A good spec still passes the check.
. "$(dirname "$0")/lib.sh"

# names_refused WHAT PATTERN CMD...: exit 2, the message, nothing measured.
names_refused() {
  local what=$1 pat=$2; shift 2
  rm -rf devgate-report
  expect_exit 2 "$@"
  expect_grep "$T/err" "$pat" "$what: stderr"
  [ ! -e devgate-report ] && ok || bad "$what: a pack was written"
}

names_refused "accept --model" "unknown model 'mlpp'" "$DG" accept --quick --model mlpp
names_refused "accept --backend" "unknown backend 'nope'" "$DG" accept --quick --backend nope
names_refused "accept --data" 'unknown data source "nope"' "$DG" accept --quick --data nope
names_refused "accept: a layer string that does not fit" "does not fit" \
  "$DG" accept --quick --model conv3x3:8,fc:10 --input 3x2x2
echo '{"model": "mlpp"}' >bad-model.json
names_refused "accept --spec model" "unknown model 'mlpp'" "$DG" accept --quick --spec bad-model.json
echo '{"backend": "opencl2", "label": "x"}' >bad-backend.json
names_refused "accept --spec backend" "unknown backend 'opencl2'" \
  "$DG" accept --quick --spec bad-backend.json
echo '{"augment": "rotate"}' >bad-augment.json
names_refused "accept --spec augment" "unknown augmentation 'rotate'" \
  "$DG" accept --quick --spec bad-augment.json
names_refused "sweep --model" "unknown model 'mlpp'" "$DG" sweep --model mlpp --backend cpu
names_refused "sweep --data" 'unknown data source' "$DG" sweep --data nope --backend cpu
names_refused "compare --model" "unknown model 'mlpp'" "$DG" compare --model mlpp --backend opencl
names_refused "soak --model" "unknown model 'mlpp'" "$DG" soak --model mlpp
names_refused "train --model" "unknown model 'mlpp'" "$DG" train --model mlpp
names_refused "gate --backend" "unknown backend 'nope'" "$DG" gate --backend nope

# Nothing reached the ledger.
n=$("$DG" ledger list --json 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))' 2>/dev/null)
[ "${n:-0}" = 0 ] && ok || bad "the ledger holds $n runs after refused names"

done_tests
