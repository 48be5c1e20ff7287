#!/bin/bash
# The end of an evidence verb under trouble: a full disk under the pack, a
# SIGTERM while the pack is written, an overlong -o. Nothing measured is lost,
# the summary and the ledger name only the files that exist, and the exit
# status is 2 (docs/cli.md).
. "$(dirname "$0")/lib.sh"

cat >ev.sh <<'EOS'
printf '%s\n' '{"v":1,"ev":"run_start","device":"cpu","batch":8}' >&3
for i in 1 2 3 4 5; do printf '{"v":1,"ev":"step","step":%d,"epoch":0,"ms":1.5,"samples":8}\n' $i >&3; done
printf '%s\n' '{"v":1,"ev":"run_end","status":"ok"}' >&3
EOS
RUN=("$DG" run --no-env --sample-ms 50)

# 1. A full disk: a 16 KiB tmpfs takes report.json (about 10 KiB) and not the page.
mkdir mnt
if mount -t tmpfs -o size=16k tmpfs mnt 2>/dev/null; then
  expect_exit 2 "${RUN[@]}" -o mnt/pack -- sh ev.sh
  expect_grep "$T/err" 'cannot write mnt/pack/report\.(html|md): No space left on device' "disk-full message"
  expect_grep "$T/out" '^  pack  mnt/pack$' "summary's pack line"
  if grep -q 'report.html' "$T/out"; then bad "the summary names report.html, which was not written"; else ok; fi
  saved=$(ls devgate-unrecorded-run-*.json 2>/dev/null | head -1)
  [ -n "$saved" ] && ok || bad "the record was not saved beside the working directory"
  expect_json "$saved" '"report.html" in d["pack"]["not_written"] and "report.html" not in d["pack"]["files"]'
  expect_json "$saved" 'all(f in ("report.json",) for f in d["pack"]["files"])'
  umount mnt
else
  echo "SKIP: cannot mount a tmpfs here (not root?); the full-disk case is not checked" >&2
fi

# 1b. The ledger on a full disk: SQLite's own reason for the failure in the
# message, never its "not an error" (its message reset by the rollback that
# followed, issue 26); the record kept.
mkdir lmnt
if mount -t tmpfs -o size=256k tmpfs lmnt 2>/dev/null; then
  expect_exit 0 "${RUN[@]}" --ledger lmnt/l.db -- sh ev.sh
  dd if=/dev/zero of=lmnt/fill bs=4k 2>/dev/null
  expect_exit 2 "${RUN[@]}" --ledger lmnt/l.db -- sh ev.sh
  expect_grep "$T/err" 'ledger lmnt/l\.db: failed while .*(disk|full|I/O).*No space left on device' "full-disk ledger message"
  if grep -q 'not an error' "$T/err"; then bad "the ledger's message says 'not an error'"; else ok; fi
  expect_grep "$T/err" 'record' "the record kept"
  umount lmnt
else
  echo "SKIP: cannot mount a tmpfs here (not root?); the ledger's full-disk case is not checked" >&2
fi

# 2. SIGTERM while the pack is being finished: the ledger is held locked, so
# devgate waits inside the pack's end; two SIGTERMs must not end it.
expect_exit 0 "${RUN[@]}" -- sh ev.sh
python3 -c '
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN EXCLUSIVE")
open("locked", "w").close()
time.sleep(4)
' "$DEVGATE_LEDGER" &
locker=$!
while [ ! -e locked ]; do sleep 0.05; done
DEVGATE_LEDGER_TIMEOUT_MS=3000 "${RUN[@]}" -o term-pack -- sh ev.sh >term.out 2>term.err &
dg=$!
sleep 1.5
kill -TERM "$dg" 2>/dev/null; sleep 0.2; kill -TERM "$dg" 2>/dev/null
wait "$dg"; rc=$?
wait "$locker"
# The first signal decides (130, interrupted) and the pack is still written;
# never killed (143).
[ "$rc" -eq 130 ] && ok || { bad "SIGTERM during the pack: exit $rc, wanted 130"; cat term.err >&2; }
[ -s term-pack/report.html ] && [ -s term-pack/report.json ] && ok || bad "SIGTERM during the pack left it unwritten"

# 3. An overlong -o is refused with the reason, the record kept, no crash.
long=$(printf 'A%.0s' $(seq 1 4200))
expect_exit 2 "${RUN[@]}" -o "$long" -- sh ev.sh
expect_grep "$T/err" 'File name too long' "overlong -o message"
expect_grep "$T/err" 'the record was not lost' "overlong -o keeps the record"

done_tests
