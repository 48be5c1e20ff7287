#!/usr/bin/env bash
# devgate run on a real PyTorch program (Debian's python3-torch, CPU): the
# same script with and without retained loss tensors. Keeping each loss with
# its graph must make the retained-references finding fire; dropping it must
# not. Skipped (77) when torch is not importable.
. "$(dirname "$0")/lib.sh"
SRC=${DEVGATE_SRC:?}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
  echo "skipped: torch is not importable by $PY"
  exit 77
fi
export PYTHONPATH="$SRC/clients/python"
SCRIPT="$SRC/tests/python/scripts/leaky_train.py"

"$DG" run --json -o leak -- "$PY" "$SCRIPT" --keep-losses >leak.json 2>leak.err
rc=$?
[ "$rc" -le 1 ] && ok || { bad "run of the leaky script exited $rc"; sed 's/^/  /' leak.err >&2; }
expect_json leak.json 'd["supervise"]["exit_status"] == 0 and d["soak"]["epochs_recorded"] >= 10'
expect_json leak.json 'any(f["id"] == "retained-refs" for f in d["findings"])'
expect_json leak.json 'd["soak"]["growth"]["footprint"]["value"] > 26 and d["decision"]["route"] == "remote"'
expect_json leak.json 'd["gate"]["backends"][0]["name"] == "cpu" and d["gate"]["backends"][0]["matmul"]["ok"]'
[ -s leak/report.html ] && ok || bad "no report.html for the supervised run"

"$DG" run --json -o clean -- "$PY" "$SCRIPT" >clean.json 2>clean.err
expect_json clean.json 'd["supervise"]["exit_status"] == 0 and d["soak"]["epochs_recorded"] >= 10'
expect_json clean.json 'not any(f["id"] == "retained-refs" for f in d["findings"])'
expect_json clean.json 'abs(d["soak"]["growth"]["footprint"]["value"]) < 26'

# The two runs side by side: same input bucket, losses from the same seed.
expect_exit 0 "$DG" compare leak/report.json clean/report.json
done_tests
