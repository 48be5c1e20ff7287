#!/usr/bin/env bash
# Ledger trouble never loses a record: corrupt file, unwritable place,
# newer schema, locked past the timeout; two writers at once both land.
. "$(dirname "$0")/lib.sh"

# Corrupt ledger: exit 2, the file untouched, the record saved beside us.
head -c 8192 /dev/urandom >"$T/corrupt.db"
before=$(sha256sum "$T/corrupt.db")
expect_exit 2 "$DG" --ledger "$T/corrupt.db" gate --backend cpu --size 16
expect_grep err 'corrupt.db'
[ "$before" = "$(sha256sum "$T/corrupt.db")" ] && ok || bad "corrupt ledger was modified"
saved=$(ls devgate-unrecorded-gate-*.json 2>/dev/null | head -1)
[ -n "$saved" ] && ok || bad "no unrecorded record saved"
[ -n "$saved" ] && expect_json "$saved" 'd["kind"]=="gate" and d["verdict"]=="pass"'
rm -f devgate-unrecorded-*.json

# Unwritable location: a path under a regular file fails even for root.
touch "$T/afile"
expect_exit 2 "$DG" --ledger "$T/afile/sub/ledger.db" env
expect_grep err 'afile'
ls devgate-unrecorded-env-*.json >/dev/null 2>&1 && ok || bad "env record lost with unwritable ledger"
rm -f devgate-unrecorded-*.json

# Newer schema.
if command -v sqlite3 >/dev/null; then
  "$DG" --ledger "$T/new.db" gate --backend cpu --size 8 >/dev/null 2>&1
  sqlite3 "$T/new.db" 'PRAGMA user_version=999;'
  expect_exit 2 "$DG" --ledger "$T/new.db" ledger list
  expect_grep err 'newer'

  # Locked past the timeout: another process holds an exclusive transaction
  # from before devgate starts until after it has exited, so devgate must give
  # up on its own. The holder says when it holds the lock and lets go only when
  # told (FIFOs: no sleep guesses how long python takes to start on a loaded
  # machine). How long the wait lasts is tests/unit/test_ledger's test_locked.
  "$DG" --ledger "$T/locked.db" gate --backend cpu --size 8 >/dev/null 2>&1
  mkfifo "$T/held" "$T/release"
  python3 - "$T/locked.db" "$T/held" "$T/release" >"$T/holder.out" 2>&1 <<'PY' &
import signal, sqlite3, sys
signal.alarm(600)  # never outlive a test that died
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN EXCLUSIVE")
with open(sys.argv[2], "w") as f:
    f.write("held\n")
with open(sys.argv[3]) as f:
    f.readline()
c.execute("ROLLBACK")  # the transaction was still open: the lock was held throughout
print("held until released")
PY
  holder=$!
  # Opened read-write, neither FIFO blocks this script should the holder die.
  exec 3<>"$T/held" 4<>"$T/release"
  read -r -t 300 -u 3 state || state=timeout
  [ "$state" = held ] && ok || bad "the lock holder did not start ($state): $(cat "$T/holder.out")"
  DEVGATE_LEDGER_TIMEOUT_MS=300 expect_exit 2 "$DG" --ledger "$T/locked.db" gate --backend cpu --size 8
  echo go >&4
  exec 3>&- 4>&-
  expect_grep err 'lock|busy'
  expect_grep err 'past the 300 ms timeout' "the message (DEVGATE_LEDGER_TIMEOUT_MS applied)"
  ls devgate-unrecorded-gate-*.json >/dev/null 2>&1 && ok || bad "record lost on a locked ledger"
  wait "$holder" && ok || bad "the lock holder failed: $(cat "$T/holder.out")"
  expect_grep "$T/holder.out" 'held until released' "the lock holder"
  rm -f devgate-unrecorded-*.json
fi

# Processes recording at once all land (a generous lock timeout: this checks
# that writers queue, not how fast a loaded machine is).
pids=()
for i in 1 2 3 4; do
  DEVGATE_LEDGER_TIMEOUT_MS=30000 "$DG" --ledger "$T/shared.db" gate --backend cpu --size 8 >"$T/w$i.out" 2>"$T/w$i.err" &
  pids+=($!)
done
for i in 1 2 3 4; do
  if wait "${pids[$((i - 1))]}"; then ok; else bad "concurrent writer $i failed: $(cat "$T/w$i.err")"; fi
done
expect_exit 0 "$DG" --ledger "$T/shared.db" ledger list --json
expect_json out 'len(d)==4'

done_tests
