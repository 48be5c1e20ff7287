#!/usr/bin/env bash
# Regenerates the golden renders (tests/golden-render/NAME.{html,md,txt}) of
# every evidence record tests/data/records/NAME.json, deliberately: run it
# after a change that is meant to alter a report, then read `git diff
# tests/golden-render` and commit the goldens with that change, saying why.
# Usage: tools/refresh-golden.sh [DEVGATE_BINARY]   (default build/devgate)
# The CTest test cli/test_report_golden compares the same renders byte for byte.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dg=${1:-${DEVGATE_BIN:-$root/build/devgate}}
if [ ! -x "$dg" ]; then
  echo "refresh-golden: no devgate binary at '$dg' (build first or pass its path)" >&2
  exit 2
fi
export LC_ALL=C
out=$root/tests/golden-render
mkdir -p "$out"
rm -f "$out"/*.html "$out"/*.md "$out"/*.txt
n=0
for rec in "$root"/tests/data/records/*.json; do
  name=$(basename "$rec" .json)
  for f in html md txt; do
    fmt=$f
    [ "$f" = txt ] && fmt=text
    if ! "$dg" --no-ledger report "$rec" --format "$fmt" >"$out/$name.$f"; then
      echo "refresh-golden: rendering $rec as $fmt failed" >&2
      exit 1
    fi
  done
  n=$((n + 1))
done
echo "refresh-golden: $n records rendered into tests/golden-render/"
git -C "$root" status --short -- tests/golden-render || true
