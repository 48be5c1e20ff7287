#!/usr/bin/env bash
# A hang-up (a closed terminal, a dropped ssh session) is a cancel, not a
# crash: `run` and `accept` keep the interrupted record (pack and ledger
# entry), end the program's tree (a child that ignores SIGHUP and forks
# included), and exit 130. A storm of TERMs after the first keeps the pack
# and the exit 130 too: the first signal decides (issue 26, item 1).
. "$(dirname "$0")/lib.sh"

[ "$(uname -s)" = Linux ] || { echo "note: not Linux; skipped"; exit 77; }

# A program that ignores SIGHUP, forks, and records both pids.
cat >"$T/stubborn.sh" <<'SH'
trap '' HUP
sleep 60 & echo $! > kid.pid
echo $$ > parent.pid
wait
SH

wait_file() { for _ in $(seq 300); do [ -s "$1" ] && return 0; sleep 0.05; done; return 1; }
alive() { kill -0 "$1" 2>/dev/null && ! awk '{ s = $0; sub(/.*\) /, "", s); exit !(substr(s, 1, 1) == "Z") }' "/proc/$1/stat" 2>/dev/null; }

# ---- run, HUP ----
setsid "$DG" run --no-env -o "$T/packR" -- sh "$T/stubborn.sh" >"$T/run.out" 2>"$T/run.err" &
dg=$!
wait_file kid.pid || bad "the program did not start"
kid=$(cat kid.pid 2>/dev/null)
sleep 0.3
kill -HUP "$dg"
wait "$dg"; rc=$?
[ "$rc" -eq 130 ] && ok || bad "run after SIGHUP: exit $rc, wanted 130"
expect_json "$T/packR/report.json" 'd["supervise"]["interrupted"] is True'
[ "$("$DG" ledger list --json 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" -ge 1 ] \
  && ok || bad "run after SIGHUP: no ledger entry"
gone=0
for _ in $(seq 100); do alive "$kid" || { gone=1; break; }; sleep 0.1; done
[ "$gone" -eq 1 ] && ok || { bad "the forked child (pid $kid) survived the hang-up"; kill -9 "$kid" 2>/dev/null; }

# ---- run, a storm of TERMs: the first decides, the pack is complete ----
rm -f kid.pid parent.pid
"$DG" --no-ledger run --no-env -o "$T/packT" -- sh "$T/stubborn.sh" >"$T/runT.out" 2>"$T/runT.err" &
dg=$!
wait_file kid.pid || bad "the program did not start (storm)"
kid=$(cat kid.pid 2>/dev/null)
for _ in $(seq 60); do kill -TERM "$dg" 2>/dev/null || break; sleep 0.01; done
wait "$dg"; rc=$?
[ "$rc" -eq 130 ] && ok || bad "run under a TERM storm: exit $rc, wanted 130"
for f in report.json report.md report.html; do
  [ -s "$T/packT/$f" ] && ok || bad "run under a TERM storm: $f missing"
done
kill -9 "$kid" 2>/dev/null

# ---- accept --quick, HUP during the sweep ----
setsid "$DG" accept --quick --backend cpu --model mlp -o "$T/packA" >"$T/acc.out" 2>"$T/acc.err" &
dg=$!
# Hang up while a sweep trial runs (its child of devgate is there): a fixed
# delay raced the whole quick tier on an idle machine.
for _ in $(seq 1500); do pgrep -P "$dg" -f __trial >/dev/null 2>&1 && break; sleep 0.02; done
kill -HUP "$dg" || bad "accept ended before the hang-up"
# ...and TERMs while it keeps the partial pack: ignored, the hang-up decides.
for _ in $(seq 30); do kill -TERM "$dg" 2>/dev/null || break; sleep 0.01; done
wait "$dg"; rc=$?
[ "$rc" -eq 130 ] && ok || bad "accept after SIGHUP: exit $rc, wanted 130"
expect_json "$T/packA/report.json" 'd["state"] == "interrupted"'
[ -s "$T/packA/report.html" ] && ok || bad "accept after SIGHUP and TERMs: report.html missing"

done_tests
