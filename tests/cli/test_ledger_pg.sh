#!/usr/bin/env bash
# The team ledger on a throwaway PostgreSQL 15 cluster (tools/servers.sh): the
# ledger suite (test_ledger with DEVGATE_TEST_PG), runs recorded through the
# CLI, a password in the URI never shown or stored, eight writers at once, and
# offline -> pending in the local ledger -> `ledger push` exactly once.
. "$(dirname "$0")/lib.sh"
SRV="$DEVGATE_SRC/tools/servers.sh"
chmod 755 "$T"
trap '"$SRV" stop "$T/srv"; rm -rf "$T"' EXIT
"$SRV" start "$T/srv" pg
rc=$?
if [ "$rc" -eq 77 ]; then
  echo "SKIPPED: PostgreSQL 15 is not installed and could not be installed; the team ledger is NOT tested" >&2
  exit 77
fi
[ "$rc" -eq 0 ] || { echo "FAIL: the throwaway PostgreSQL did not start" >&2; exit 1; }
. "$T/srv/pg.env"
psql_team() { PGPASSWORD=$PG_PASSWORD "$PG_BIN/psql" "$TEAM_URL" -qAtc "$1"; }
# no_secret: the password appears in none of the outputs so far
no_secret() {
  if grep -q -- "$PG_PASSWORD" "$T/out" "$T/err"; then bad "password shown: $*"; else ok; fi
}

# 1. The library's ledger suite against this database.
unit="$(dirname "$DG")/tests/test_ledger"
if DEVGATE_TEST_PG="$TEAM_URL_PW" "$unit" >"$T/unit.out" 2>&1; then ok; else
  bad "test_ledger against PostgreSQL"; tail -20 "$T/unit.out" >&2
fi

# 2. A run recorded in the team ledger through the CLI, password in the URI.
expect_exit 0 "$DG" --ledger "$TEAM_URL_PW" gate --backend cpu --size 8
expect_grep out 'recorded as [0-9]{8}-[0-9]{6}-[0-9a-f]{12}'
no_secret "gate"
id=$(grep -oE '[0-9]{8}-[0-9]{6}-[0-9a-f]{12}' "$T/out" | head -1)
[ "$(psql_team "select count(*) from runs where id = '$id' and verb = 'gate'")" = 1 ] && ok ||
  bad "gate run $id not in the team ledger"
# read back with the password from the environment, then from a password file
PGPASSWORD=$PG_PASSWORD expect_exit 0 "$DG" --ledger "$TEAM_URL" ledger list
expect_grep out "$id"
printf '*:*:*:team:%s\n' "$PG_PASSWORD" >"$T/pgpass" && chmod 600 "$T/pgpass"
PGPASSFILE=$T/pgpass DEVGATE_LEDGER=$TEAM_URL expect_exit 0 "$DG" ledger show "$id" --json
expect_json out 'd["verb"]=="gate" and d["record"]["kind"]=="gate"'
no_secret "show"
# nothing the ledger stores holds the password (the record includes the env)
[ "$(psql_team "select count(*) from runs where record like '%$PG_PASSWORD%' or coalesce(pending,'') like '%$PG_PASSWORD%'")" = 0 ] &&
  ok || bad "the password reached the team ledger"

# 2b. The password from DEVGATE_LEDGER_PASSWORD_FILE (issue 26): the run is
# recorded; the password is in devgate's command line as ps shows it no more
# than in the supervised program's environment, and the variable itself is
# devgate's, not the program's. A file others may read, or none, is refused.
printf '%s\n' "$PG_PASSWORD" >"$T/pw" && chmod 600 "$T/pw"
cat >"$T/peek.sh" <<'EOS'
tr '\0' ' ' </proc/$PPID/cmdline >"$1/parent-cmdline"
env >"$1/child-env"
EOS
DEVGATE_LEDGER=$TEAM_URL DEVGATE_LEDGER_PASSWORD_FILE=$T/pw expect_exit 0 "$DG" run --no-env -- sh "$T/peek.sh" "$T"
no_secret "run with a password file"
id=$(grep -oE 'run [0-9]{8}-[0-9]{6}-[0-9a-f]{12}' "$T/out" | grep -oE '[0-9]{8}-[0-9]{6}-[0-9a-f]{12}' | head -1)
[ -n "$id" ] && [ "$(psql_team "select count(*) from runs where id = '$id' and verb = 'run'")" = 1 ] && ok ||
  bad "the run with DEVGATE_LEDGER_PASSWORD_FILE is not in the team ledger"
grep -q devgate "$T/parent-cmdline" && ok || bad "the program's parent is not devgate"
grep -q -- "$PG_PASSWORD" "$T/parent-cmdline" "$T/child-env" && bad "the password reached ps or the program" || ok
grep -q DEVGATE_LEDGER_PASSWORD_FILE "$T/child-env" && bad "DEVGATE_LEDGER_PASSWORD_FILE reached the program" || ok
chmod 644 "$T/pw"
DEVGATE_LEDGER=$TEAM_URL DEVGATE_LEDGER_PASSWORD_FILE=$T/pw expect_exit 2 "$DG" ledger list
expect_grep err "DEVGATE_LEDGER_PASSWORD_FILE $T/pw may be read by others"
DEVGATE_LEDGER=$TEAM_URL DEVGATE_LEDGER_PASSWORD_FILE=$T/no-such expect_exit 2 "$DG" ledger list
expect_grep err "DEVGATE_LEDGER_PASSWORD_FILE $T/no-such: cannot read it"
no_secret "refused password files"

# A wrong password: refused, named without the password, the run kept locally.
expect_exit 0 "$DG" --ledger "postgresql://team:Wr0ngPassw@/ci?host=$PG_SOCK&port=$PG_PORT" gate --backend cpu --size 8
expect_grep err 'password authentication failed'
expect_grep err "pending: 'devgate ledger push'"
grep -q Wr0ngPassw "$T/out" "$T/err" && bad "wrong password shown" || ok

# 3. Eight writers at once lose nothing.
before=$(psql_team "select count(*) from runs")
pids=()
for i in 1 2 3 4 5 6 7 8; do
  "$DG" --ledger "$TEAM_URL_PW" gate --backend cpu --size 8 >"$T/w$i.out" 2>"$T/w$i.err" &
  pids+=($!)
done
for i in 1 2 3 4 5 6 7 8; do
  if wait "${pids[$((i - 1))]}"; then ok; else bad "writer $i: $(cat "$T/w$i.err")"; fi
done
after=$(psql_team "select count(*) from runs")
[ "$after" -eq $((before + 8)) ] && ok || bad "8 writers: $before runs before, $after after"
[ "$(psql_team "select count(*) - count(distinct id) from runs")" = 0 ] && ok || bad "duplicate ids"

# 4. Offline: the run waits in the local ledger; push uploads it exactly once.
rm -f "$DEVGATE_LEDGER"
"$SRV" stop-one "$T/srv" pg
expect_exit 0 "$DG" --ledger "$TEAM_URL_PW" gate --backend cpu --size 8
expect_grep err 'cannot reach the team ledger'
expect_grep err "kept in the local ledger $DEVGATE_LEDGER"
no_secret "offline gate"
off1=$(grep -oE '[0-9]{8}-[0-9]{6}-[0-9a-f]{12}' "$T/out" | head -1)
expect_exit 0 "$DG" --ledger "$TEAM_URL" gate --backend cpu --size 8
off2=$(grep -oE '[0-9]{8}-[0-9]{6}-[0-9a-f]{12}' "$T/out" | head -1)
expect_exit 0 "$DG" --ledger "$DEVGATE_LEDGER" ledger list
expect_grep out "pending: waits for postgresql://team@.*/ci"
if command -v sqlite3 >/dev/null; then
  grep -c -- "$PG_PASSWORD" "$DEVGATE_LEDGER"* >/dev/null && bad "password in the local ledger" || ok
fi
# push while still offline: refused, nothing lost
PGPASSWORD=$PG_PASSWORD expect_exit 2 "$DG" --ledger "$TEAM_URL" ledger push
expect_grep err 'stay waiting'
"$SRV" start "$T/srv" pg || bad "postgres did not start again"
before=$(psql_team "select count(*) from runs")
PGPASSWORD=$PG_PASSWORD expect_exit 0 "$DG" --ledger "$TEAM_URL" ledger push
expect_grep out '^pushed 2 runs from '
PGPASSWORD=$PG_PASSWORD expect_exit 0 "$DG" --ledger "$TEAM_URL" ledger push --json
expect_json out 'd["pushed"]==0 and d["already"]==0'
after=$(psql_team "select count(*) from runs")
[ "$after" -eq $((before + 2)) ] && ok || bad "push: $before runs before, $after after"
[ "$(psql_team "select count(*) from runs where id in ('$off1', '$off2') and pending is null")" = 2 ] &&
  ok || bad "the pushed runs $off1 $off2 are not in the team ledger under their ids"
[ "$(psql_team "select count(*) - count(distinct id) from runs")" = 0 ] && ok || bad "duplicate ids after push"
expect_exit 0 "$DG" --ledger "$DEVGATE_LEDGER" ledger list
grep -q 'pending:' "$T/out" && bad "runs still pending after push" || ok
# push needs a team ledger to push to
DEVGATE_LEDGER= expect_exit 2 "$DG" --ledger "$T/ledger.db" ledger push --from "$T/ledger.db"
expect_grep err 'name the team ledger'

done_tests
