#!/usr/bin/env bash
# devgate run's child is tied to its supervisor: when devgate is killed with
# SIGKILL (no chance to clean up), the program it started dies with it
# instead of running on (PR_SET_PDEATHSIG, Linux).
. "$(dirname "$0")/lib.sh"

[ "$(uname -s)" = Linux ] || { echo "note: not Linux; skipped"; exit 77; }

"$DG" --no-ledger run --no-env -- sh -c 'echo $$ > child.pid; exec sleep 120' >"$T/run.out" 2>&1 &
dg=$!
child=
for _ in $(seq 200); do
  [ -s child.pid ] && child=$(cat child.pid) && break
  sleep 0.05
done
trap '[ -n "$child" ] && kill -9 "$child" 2>/dev/null; rm -rf "$T"' EXIT
if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then ok; else bad "the program did not start"; fi

kill -9 "$dg"
wait "$dg" 2>/dev/null
# Gone, or a zombie waiting for whoever inherited it.
gone=0
for _ in $(seq 100); do
  if ! kill -0 "$child" 2>/dev/null || awk '{ s = $0; sub(/.*\) /, "", s); exit !(substr(s, 1, 1) == "Z") }' "/proc/$child/stat" 2>/dev/null; then
    gone=1
    break
  fi
  sleep 0.05
done
if [ "$gone" -eq 1 ]; then ok; else bad "the program (pid $child) still runs after kill -9 of devgate"; fi

done_tests
