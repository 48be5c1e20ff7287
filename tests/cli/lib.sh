# Shared helpers for CLI tests: each test runs in its own temp dir with
# LC_ALL=C and a private ledger, and ends with "N passed, N failed".
set -u
export LC_ALL=C
DG=${DEVGATE_BIN:?DEVGATE_BIN must name the devgate binary}
T=$(mktemp -d)
# Each test script its own measurement lock (docs/measure.md): tests that run in
# parallel must not wait on each other's windows (a timing test would fail).
export DEVGATE_MEASURE_LOCK="$T/measure.lock"
trap 'rm -rf "$T"' EXIT
cd "$T"
export DEVGATE_LEDGER="$T/ledger.db"
passed=0
failed=0

ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*" >&2; }

# expect_exit CODE CMD...: runs CMD, keeps stdout in $T/out and stderr in $T/err.
expect_exit() {
  local want=$1; shift
  "$@" >"$T/out" 2>"$T/err"
  local got=$?
  if [ "$got" -eq "$want" ]; then ok; else
    bad "exit $got, wanted $want: $*"; sed 's/^/  stderr: /' "$T/err" | head -20 >&2
  fi
}

# expect_grep FILE PATTERN [what]
expect_grep() {
  if grep -qE -- "$2" "$1"; then ok; else bad "${3:-$1} lacks /$2/"; head -30 "$1" | sed 's/^/  | /' >&2; fi
}

# jq-like checks with python3: expect_json FILE 'python expression over d'
expect_json() {
  if python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ok = eval(sys.argv[2])
sys.exit(0 if ok else 1)
PY
  then ok; else bad "json check failed: $2"; head -c 2000 "$1" | sed 's/^/  | /' >&2; fi
}

# torch_python: PY becomes an interpreter that imports torch (/usr/bin/python3,
# else python3 on PATH), with PYTHONPATH and DEVGATE_PROBE_PATH unset; the
# test is skipped (exit 77) when there is none.
torch_python() {
  PY=/usr/bin/python3
  [ -x "$PY" ] || PY=$(command -v python3)
  if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    echo "skipped: torch is not importable by $PY"
    exit 77
  fi
  unset PYTHONPATH DEVGATE_PROBE_PATH
}

# wait_slurm JOB [TRIES]: until Slurm no longer lists the job (half a second a try, 240).
wait_slurm() {
  for _ in $(seq "${2:-240}"); do
    [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && return 0
    sleep 0.5
  done
}

done_tests() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
