#!/usr/bin/env bash
# Runs tests/python/test_probe.py and test_probe_cost.py against clients/python (no install needed).
# Usage: run_tests.sh [stdlib|torch|all]
#   stdlib: the cases that need only the standard library (always run)
#   torch:  the cases that need torch; exit 77 (skipped) when torch is not importable
# Uses $DEVGATE_PYTHON when set, else prefers /usr/bin/python3 (Debian's, where python3-torch is installed) over the
# first python3 on PATH; exits 77 when there is no python3 at all.
set -u
mode=${1:-all}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ -n "${DEVGATE_PYTHON:-}" ]; then
  py=$DEVGATE_PYTHON # e.g. an interpreter with a CUDA torch elsewhere
elif [ -x /usr/bin/python3 ]; then
  py=/usr/bin/python3
elif command -v python3 >/dev/null 2>&1; then
  py=$(command -v python3)
else
  echo "skipped: no python3"
  exit 77
fi
export PYTHONPATH="$root/clients/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
unset DEVGATE_EVENTS_FD DEVGATE_EVENTS_FILE
"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 8) else 1)' || { echo "skipped: $py is older than 3.8"; exit 77; }
case $mode in
  stdlib) filter=(-k StdlibTests) ;;
  torch)
    if ! "$py" -c 'import torch' >/dev/null 2>&1; then
      echo "skipped: torch is not importable by $py"
      exit 77
    fi
    filter=(-k TorchTests -k ZeroCodeTests) ;;
  all) filter=() ;;
  *) echo "usage: $0 [stdlib|torch|all]" >&2; exit 2 ;;
esac
cd "$here" && exec "$py" -m unittest -v "${filter[@]}" test_probe test_probe_cost
