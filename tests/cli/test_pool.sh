#!/usr/bin/env bash
# devgate pool on a real single-node Slurm with munge (tools/servers.sh
# slurm): a 4-task array of `accept --quick` (sized down: mlp on cpu, one
# thread, 4 steps, sweep to batch 8, so four of them fit in seconds on two
# cores) into the team ledger (PostgreSQL from tools/servers.sh; SQLite when
# PostgreSQL cannot start), one task cancelled and shown as such, the others
# in the ledger once and side by side; a hostile label arrives intact through
# the job script; a bucket mismatch between tasks is refused; the usage and
# Slurm failures each have their exit status.
. "$(dirname "$0")/lib.sh"
SRV="$DEVGATE_SRC/tools/servers.sh"
chmod 755 "$T"
trap '"$SRV" stop "$T/srv"; rm -rf "$T"' EXIT
"$SRV" start "$T/srv" slurm
rc=$?
if [ "$rc" -eq 77 ]; then
  echo "SKIPPED: Slurm/munge are not installed and could not be installed; devgate pool is NOT tested" >&2
  exit 77
fi
[ "$rc" -eq 0 ] || { echo "FAIL: the throwaway Slurm did not start" >&2; exit 1; }
. "$T/srv/slurm.env"

# The team ledger: PostgreSQL when it starts here, else a SQLite file.
if "$SRV" start "$T/srv" pg; then
  . "$T/srv/pg.env"
  export PGPASSWORD=$PG_PASSWORD # libpq's own means; sbatch passes the environment on
  LEDGER=$TEAM_URL
else
  echo "note: PostgreSQL did not start; the pool records into a SQLite ledger" >&2
  LEDGER=$T/team.db
fi
P() { "$DG" --ledger "$LEDGER" pool "$@"; }
ACC=(accept --quick --model mlp --backend cpu --threads 1 --steps 4 --epochs 1 --sweep-to 8)
hostile="it's \$(touch $T/pwned1) \`touch $T/pwned2\`; touch $T/pwned3 \"q\" \\"

# 1. Usage and Slurm failures.
expect_exit 2 P submit --tasks 2
expect_grep err 'no verb given'
expect_exit 2 P submit -- ledger list
expect_grep err "'ledger' is not a verb a pool task runs"
expect_exit 2 P submit --array 3-1 -- gate
expect_grep err "array spec '3-1'"
expect_exit 2 P submit --tasks 2 --array 0-1 -- gate
if [ -n "${TEAM_URL_PW:-}" ]; then
  expect_exit 2 "$DG" --ledger "$TEAM_URL_PW" pool submit -- gate
  expect_grep err 'holds a password, which would be written into the job script'
  grep -q "$PG_PASSWORD" "$T/err" && bad "the password was shown" || ok
fi
expect_exit 20 env PATH=/nonexistent "$DG" --ledger "$LEDGER" pool submit -- gate
expect_grep err 'sbatch not found'
expect_exit 21 P status 999999
expect_grep err 'no job 999999'
expect_exit 2 P status 12x
expect_exit 2 P status 1 --tasks 3

# 2. Four tasks; task 3 cancelled at once (pending or running: shown cancelled either way).
expect_exit 0 P submit --tasks 4 --dir "$T/pool" -- "${ACC[@]}" --label "$hostile"
expect_grep out '^pool job [0-9]+: 4 tasks'
job=$(sed -n 's/^pool job \([0-9]*\):.*/\1/p' "$T/out")
[ -n "$job" ] || bad "no job id printed"
scancel "${job}_3"
[ -f "$T/pool/$job/job.sh" ] && ok || bad "no job script kept"
grep -q "^exec '" "$T/pool/$job/job.sh" && ok || bad "the job script is not one quoted exec line"
done_waiting=no
for _ in $(seq 240); do
  P status "$job" --dir "$T/pool" --json >"$T/st.json" 2>"$T/st.err"
  if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if all(t["state"] not in ("pending","running") for t in d["tasks"]) else 1)' "$T/st.json" 2>/dev/null; then
    done_waiting=yes
    break
  fi
  sleep 0.5
done
[ $done_waiting = yes ] && ok || { bad "the tasks did not end in 120 s"; cat "$T/st.json" "$T/st.err" >&2; }
expect_exit 0 P status "$job" --dir "$T/pool"
expect_grep out "^pool job $job: 4 tasks: 3 completed, 1 cancelled"
expect_grep out '^3 +cancelled'
cp "$T/out" "$T/status.txt"

# 3. Collect: one row per task, the cancelled one shown, three records in the ledger once.
expect_exit 22 P collect "$job" --dir "$T/pool"
cp "$T/out" "$T/collect.txt"
for t in 0 1 2; do
  expect_grep "$T/collect.txt" "^$t +localhost +completed +0 +cpu +8 +[0-9.]+ samples/s +screening, route cpu +[0-9]{8}-"
done
expect_grep "$T/collect.txt" '^3 +[a-z-]+ +cancelled'
expect_grep "$T/collect.txt" 'the same one'
expect_exit 22 P collect "$job" --dir "$T/pool" --json
expect_json out "len(d['tasks']) == 4 and [t['state'] for t in d['tasks']] == ['completed'] * 3 + ['cancelled'] and d['recorded_now'] == 0 and d['same_bucket'] and d['exit_status'] == 22"
expect_json out "all(t['throughput']['valid'] and t['throughput']['unit'] == 'samples/s' for t in d['tasks'][:3]) and d['tasks'][3]['run_id'] is None"
expect_exit 0 "$DG" --ledger "$LEDGER" ledger list --json
expect_json out "sum(1 for r in d if r['verb'] == 'accept') == 3"
id0=$(grep -oE '^0 .* ([0-9]{8}-[0-9]{6}-[0-9a-f]{12})$' "$T/collect.txt" | grep -oE '[0-9]{8}-[0-9]{6}-[0-9a-f]{12}$')
expect_exit 0 "$DG" --ledger "$LEDGER" ledger show "$id0" --json
python3 - "$T/out" "$hostile" <<'PY' && ok || bad "the hostile label changed on its way through the job script"
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if d["record"]["label"] == sys.argv[2] else 1)
PY
expect_json out "d['record']['pool']['job'] == '$job' and d['record']['pool']['task'] == 0 and d['record']['pool']['node'] == 'localhost' and d['host'] and d['exit_status'] == 0"
ls "$T"/pwned* >/dev/null 2>&1 && bad "the job script's shell ran part of an argument" || ok

# 3b. Slurm has forgotten the job (MinJobAge passed; a stand-in scontrol says so):
# the states come from the task folders, and a task that never started is unknown.
mkdir -p "$T/fakebin"
printf '#!/bin/sh\necho "slurm_load_jobs error: Invalid job id specified" >&2\nexit 1\n' >"$T/fakebin/scontrol"
chmod +x "$T/fakebin/scontrol"
expect_exit 0 env PATH="$T/fakebin:$PATH" "$DG" --ledger "$LEDGER" pool status "$job" --dir "$T/pool"
expect_grep out "^pool job $job: 4 tasks: 3 completed, 1 unknown \(Slurm no longer lists it"
expect_grep out '^0 +completed +0 +localhost +from its folder'
expect_grep out '^3 +unknown +- +- +Slurm no longer knows the job'
expect_exit 21 env PATH="$T/fakebin:$PATH" "$DG" --ledger "$LEDGER" pool status "$job" --dir "$T/elsewhere"

# 4. A task whose record did not reach the ledger is entered by collect, once.
sqlite_led=$T/local.db
expect_exit 22 "$DG" --ledger "$sqlite_led" pool collect "$job" --dir "$T/pool"
expect_grep out '3 records entered into the ledger now'
expect_exit 22 "$DG" --ledger "$sqlite_led" pool collect "$job" --dir "$T/pool"
grep -q 'entered into the ledger now' "$T/out" && bad "collect entered the records twice" || ok
expect_exit 0 "$DG" --ledger "$sqlite_led" ledger list --json
expect_json out "len(d) == 3 and all(r['verb'] == 'accept' for r in d)"

# 5. Every task completed on one bucket: exit 0; a task on another bucket: exit 15.
TRAIN=(train --model mlp --backend cpu --threads 1 --steps 2 --batch 8)
expect_exit 0 P submit --tasks 2 --dir "$T/pool" -- "${TRAIN[@]}"
job2=$(sed -n 's/^pool job \([0-9]*\):.*/\1/p' "$T/out")
wait_slurm "$job2"
expect_exit 0 P collect "$job2" --dir "$T/pool"
expect_grep out '^1 +localhost +completed +0 +cpu +8 '
python3 - "$T/pool/$job2/task-1/record.json" <<'PY'
import json, sys
p = sys.argv[1]
d = json.load(open(p))
d["bucket"]["batch"] = 16
d["bucket"]["id"] = "0" * 64
json.dump(d, open(p, "w"))
PY
expect_exit 15 P collect "$job2" --dir "$T/pool"
expect_grep out 'another input bucket than the first task \(batch differ\)'

# 5b. collect takes only a devgate record of the verb submitted, never through a link.
rec1=$T/pool/$job2/task-1/record.json
mv "$rec1" "$T/rec1.keep"
printf '{"v":2,"run_id":"xxxxxxxxxxxxxxxxxxxxxxxxxxxx"}' >"$rec1"
expect_exit 22 P collect "$job2" --dir "$T/pool"
expect_grep out "record.json is a 'none' record, not one of 'train': not taken"
rm "$rec1"
ln -s "$T/rec1.keep" "$rec1"
expect_exit 22 P collect "$job2" --dir "$T/pool"
expect_grep out 'record.json is a link or not a regular file: not taken'

# 5c. Two identical run tasks: their buckets carry no id and are compared field
# by field, so they are the same bucket (exit 0, not 15).
expect_exit 0 P submit --tasks 2 --dir "$T/pool" -- run --no-env -- python3 "$DEVGATE_SRC/tests/data/run/good.py"
job3=$(sed -n 's/^pool job \([0-9]*\):.*/\1/p' "$T/out")
wait_slurm "$job3"
expect_exit 0 P collect "$job3" --dir "$T/pool"
expect_grep out 'every task with a record ran on the same one'
expect_grep out '^1 +localhost +completed +0 '

# 6. The controller unreachable: status and submit say so (exit 20), never a hang
# (a copy of the config naming a closed port, with Slurm's own retries cut short).
closed=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed "s/^SlurmctldPort=.*/SlurmctldPort=$closed/" "$SLURM_CONF" >"$T/down.conf"
echo MessageTimeout=1 >>"$T/down.conf"
expect_exit 20 env SLURM_CONF="$T/down.conf" timeout 60 "$DG" --ledger "$LEDGER" pool status "$job" --dir "$T/pool"
expect_grep err 'pool status: scontrol failed .*Unable to contact slurm controller'
expect_exit 20 env SLURM_CONF="$T/down.conf" timeout 60 "$DG" --ledger "$LEDGER" pool submit --dir "$T/pool" -- gate
expect_grep err 'pool submit: sbatch failed .*Unable to contact slurm controller'

done_tests
