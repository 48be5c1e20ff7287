#!/usr/bin/env bash
# Ledger paths that are not ordinary writable files: a FIFO (or any special
# file) is named as "not a regular file"; the read-only verbs (ledger list,
# show, report from the ledger) open the ledger read-only, so they read a
# ledger on a read-only mount, never create a missing one and never migrate.
. "$(dirname "$0")/lib.sh"

# A FIFO: a clear message naming it, for recording and reading verbs alike;
# the record is kept; the FIFO is neither opened nor replaced.
mkfifo "$T/fifo.db"
expect_exit 2 "$DG" --ledger "$T/fifo.db" gate --backend cpu --size 8
expect_grep err 'fifo\.db: not a regular file \(a FIFO\)'
ls devgate-unrecorded-gate-*.json >/dev/null 2>&1 && ok || bad "record lost on a FIFO ledger"
rm -f devgate-unrecorded-*.json
expect_exit 2 "$DG" --ledger "$T/fifo.db" ledger list
expect_grep err 'fifo\.db: not a regular file \(a FIFO\)'
[ -p "$T/fifo.db" ] && ok || bad "the FIFO was replaced"
expect_exit 2 "$DG" --ledger /dev/null ledger list
expect_grep err '/dev/null: not a regular file \(a character device\)'

# --help says what --ledger takes: a file or a team ledger URI.
expect_exit 0 "$DG" ledger --help
expect_grep out '--ledger PATH\|URI +the run ledger: an SQLite file, or a postgresql:// team ledger URI' "ledger --help"

# A missing ledger is reported, not created, by the reading verbs.
expect_exit 2 "$DG" --ledger "$T/none/ledger.db" ledger list
expect_grep err 'none/ledger\.db: no such file'
[ ! -e "$T/none" ] && ok || bad "ledger list created $T/none"
expect_exit 2 "$DG" --ledger "$T/none.db" ledger show 2026
[ ! -e "$T/none.db" ] && ok || bad "ledger show created none.db"

# Reading never migrates: an older-schema ledger is refused untouched.
python3 - "$T/old.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.executescript("""PRAGMA application_id=0x44475631; PRAGMA user_version=1;
CREATE TABLE runs(seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL,
 verb TEXT NOT NULL, started_at TEXT NOT NULL, exit_status INTEGER NOT NULL,
 state TEXT NOT NULL DEFAULT 'complete', host TEXT, git_commit TEXT,
 devgate_version TEXT, record TEXT NOT NULL);""")
c.close()
PY
before=$(sha256sum "$T/old.db")
expect_exit 2 "$DG" --ledger "$T/old.db" ledger list
expect_grep err 'old\.db: schema 1 is older'
[ "$before" = "$(sha256sum "$T/old.db")" ] && ok || bad "ledger list migrated an old ledger"

# Two runs in a ledger (a gate, a supervised program), then the ledger's
# folder made read-only.
mkdir "$T/lg" "$T/ro"
expect_exit 0 "$DG" --ledger "$T/lg/ledger.db" gate --backend cpu --size 8
expect_exit 0 "$DG" --ledger "$T/lg/ledger.db" run -o "$T/pack" -- true
id=$("$DG" --ledger "$T/lg/ledger.db" ledger list --json | python3 -c 'import json,sys; print([r["id"] for r in json.load(sys.stdin) if r["verb"]=="run"][0])')
before=$(sha256sum "$T/lg/ledger.db")

# The reads, run in a place where writing is refused even to root: a read-only
# bind mount in a private mount namespace, else an immutable folder (chattr).
cat >"$T/reads.sh" <<EOF
set -u
L=\$1/ledger.db
touch "\$1/probe" 2>/dev/null && { echo "WRITABLE"; rm -f "\$1/probe"; exit 0; }
"$DG" --ledger "\$L" ledger list --json >"$T/list.json" 2>"$T/list.err"; echo "list \$?"
"$DG" --ledger "\$L" ledger show "$id" --json >"$T/show.json" 2>"$T/show.err"; echo "show \$?"
"$DG" --ledger "\$L" report "$id" -o "$T/rep" >"$T/rep.out" 2>"$T/rep.err"; echo "report \$?"
"$DG" --ledger "\$L" gate --backend cpu --size 8 >/dev/null 2>"$T/gate.err"; echo "gate \$?"
EOF
how=""
if unshare -m true 2>/dev/null; then
  unshare -m bash -c "mount --bind '$T/lg' '$T/ro' && mount -o remount,bind,ro '$T/ro' && bash '$T/reads.sh' '$T/ro'" >"$T/reads.out" 2>"$T/reads.err" && how="a read-only bind mount"
fi
if [ -z "$how" ] && chattr +i "$T/lg" 2>/dev/null; then
  bash "$T/reads.sh" "$T/lg" >"$T/reads.out" 2>"$T/reads.err" && how="an immutable folder"
  chattr -i "$T/lg"
fi
if [ -z "$how" ]; then
  echo "SKIP: read-only ledger case: neither a read-only bind mount nor chattr +i works here" >&2
elif grep -q WRITABLE "$T/reads.out"; then
  bad "$how still took a write; the read-only case proves nothing"
else
  echo "read-only ledger case on $how" >&2
  expect_grep "$T/reads.out" '^list 0$' "ledger list on $how"
  expect_json "$T/list.json" 'len(d)==2'
  expect_grep "$T/reads.out" '^show 0$' "ledger show on $how"
  expect_json "$T/show.json" 'd["id"]=="'"$id"'" and d["record"]["kind"]=="run"'
  expect_grep "$T/reads.out" '^report 0$' "report RUN_ID on $how"
  [ -s "$T/rep/report.html" ] && ok || bad "report from a read-only ledger wrote no report.html"
  # Recording there still fails clearly, and keeps the record.
  expect_grep "$T/reads.out" '^gate 2$' "gate on $how"
  expect_grep "$T/gate.err" 'lg|ro' "gate's message"
  expect_grep "$T/gate.err" 'not writable|read-only|Read-only'
  [ "$before" = "$(sha256sum "$T/lg/ledger.db")" ] && ok || bad "reading changed the ledger"
  for f in list show rep; do
    [ -s "$T/$f.err" ] && sed "s/^/  $f stderr: /" "$T/$f.err" >&2
  done
fi
rm -f devgate-unrecorded-*.json

done_tests
