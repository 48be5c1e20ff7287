#!/usr/bin/env bash
# Golden renders: every evidence record tests/data/records/NAME.json renders to
# exactly tests/golden-render/NAME.html, NAME.md and NAME.txt (the terminal
# summary), byte for byte; every golden has its record. A deliberate change to
# a report is committed with the goldens tools/refresh-golden.sh regenerates.
. "$(dirname "$0")/lib.sh"
R="${DEVGATE_SRC:?}/tests/data/records"
G="$DEVGATE_SRC/tests/golden-render"
refresh="run tools/refresh-golden.sh if the change is meant, and commit the goldens"

count=0
for rec in "$R"/*.json; do
  name=$(basename "$rec" .json)
  count=$((count + 1))
  for f in html md txt; do
    fmt=$f
    [ "$f" = txt ] && fmt=text
    if [ ! -f "$G/$name.$f" ]; then
      bad "no golden tests/golden-render/$name.$f for $name.json ($refresh)"
      continue
    fi
    expect_exit 0 "$DG" --no-ledger report "$rec" --format "$fmt"
    if cmp -s "$T/out" "$G/$name.$f"; then ok; else
      bad "$name.json as $fmt differs from tests/golden-render/$name.$f ($refresh)"
      diff -u "$G/$name.$f" "$T/out" | head -40 | sed 's/^/  | /' >&2
    fi
  done
done
[ "$count" -ge 5 ] && ok || bad "only $count records in tests/data/records"

# No golden outlives its record.
for g in "$G"/*.html "$G"/*.md "$G"/*.txt; do
  [ -e "$g" ] || continue
  name=$(basename "$g"); name=${name%.*}
  [ -f "$R/$name.json" ] && ok || bad "golden $(basename "$g") has no record tests/data/records/$name.json"
done

# Rendering is a function of the record alone: twice gives the same bytes.
"$DG" --no-ledger report "$R/accept-opencl.json" --format html >"$T/a1"
"$DG" --no-ledger report "$R/accept-opencl.json" --format html >"$T/a2"
cmp -s "$T/a1" "$T/a2" && ok || bad "two renders of one record differ"

done_tests
