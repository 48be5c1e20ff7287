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

  # Locked past the timeout: another process holds an exclusive transaction.
  "$DG" --ledger "$T/locked.db" gate --backend cpu --size 8 >/dev/null 2>&1
  python3 - "$T/locked.db" <<'PY' &
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN EXCLUSIVE")
time.sleep(4)
c.execute("ROLLBACK")
PY
  holder=$!
  sleep 1
  start=$(date +%s)
  DEVGATE_LEDGER_TIMEOUT_MS=300 expect_exit 2 "$DG" --ledger "$T/locked.db" gate --backend cpu --size 8
  took=$(( $(date +%s) - start ))
  expect_grep err 'lock|busy'
  [ "$took" -le 3 ] && ok || bad "locked ledger took ${took}s to give up"
  ls devgate-unrecorded-gate-*.json >/dev/null 2>&1 && ok || bad "record lost on a locked ledger"
  wait "$holder"
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
