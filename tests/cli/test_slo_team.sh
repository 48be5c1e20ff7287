#!/usr/bin/env bash
# devgate slo where a team runs it (full tier): `remote HOST slo ...` over a
# real sshd on loopback and `pool submit -- slo ...` on a real single-node
# Slurm (tools/servers.sh), each measuring devgate's fixture served on the
# node's own loopback (--target fixture, cpu backend). The record comes home
# (remote) or into the team ledger (pool), the ledger lists it as kind slo
# with the fixture's backend and the signed level, the page renders; pool
# collect shows the task's goodput and verdict, no input bucket claimed.
. "$(dirname "$0")/lib.sh"
SRV="$DEVGATE_SRC/tools/servers.sh"
chmod 755 "$T"
trap '"$SRV" stop "$T/srv"; rm -rf "$T"' EXIT
if "$DG" --no-ledger slo --target fixture --slo ttft:1s --duration 1 2>&1 | grep -q "without libcurl"; then
  echo "skipped: built without libcurl"
  exit 77
fi
export OMP_NUM_THREADS=1
SLO=(slo --target fixture --concurrency 1,2 --duration 1.5s --warmup 0.3 --window 0.4 --max-windows 12
  --max-tokens 6 --no-env --slo ttft:2s --percentile 50)
ID_RE='[0-9]{8}-[0-9]{6}-[0-9a-f]{12}'

# check_record ID NODE_CHECK: the ledger's entry is an slo of the fixture, its page renders.
check_record() {
  expect_exit 0 "$DG" ledger show "$1" --json
  expect_json out "d['verb'] == 'slo' and d['record']['kind'] == 'slo' and d['backend'] == 'cpu' and d['model'] == 'mlp' and d['record']['spec']['fixture']['ended'] == 'stopped at the end of the run' and len(d['record']['levels']) >= 1 and $2"
  expect_exit 0 "$DG" report "$1" --format html
  expect_grep "$T/out" '<h3>The ladder</h3>' "the page of $1"
}

# 1. remote HOST slo: the fixture on the node's loopback, the record brought home.
"$SRV" start "$T/srv" ssh
rc=$?
if [ "$rc" -eq 0 ]; then
  . "$T/srv/ssh.env"
  expect_exit 0 "$DG" remote "${SSH_OPTS[@]}" --devgate "$DG" --cache "$T/node" "$SSH_HOST" "${SLO[@]}" --label far
  expect_grep out "run [0-9]{8}-[0-9]{6}-[0-9a-f]+ \(slo\) exit 0 · recorded as $ID_RE"
  rid=$(grep -oE "recorded as $ID_RE" "$T/out" | grep -oE "$ID_RE")
  check_record "$rid" "d['node'] == '$SSH_HOST' and d['record']['remote']['node'] == '$SSH_HOST' and d['record']['label'] == 'far'"
  expect_exit 0 "$DG" ledger list
  expect_grep out "^$rid +slo +cpu +mlp .*signed at [0-9]+ streams? .* far .*\(node $SSH_HOST\)"
elif [ "$rc" -eq 77 ]; then
  echo "SKIPPED (part): openssh-server is not installed and could not be; remote slo is NOT tested" >&2
else
  bad "the throwaway sshd did not start"
fi

# 2. pool submit -- slo: one task on Slurm into the ledger, collected side by side.
"$SRV" start "$T/srv" slurm
rc=$?
if [ "$rc" -eq 0 ]; then
  . "$T/srv/slurm.env"
  P() { "$DG" --ledger "$T/team.db" pool "$@"; }
  expect_exit 0 P submit --tasks 1 --dir "$T/pool" -- "${SLO[@]}" --label pooled
  job=$(sed -n 's/^pool job \([0-9]*\):.*/\1/p' "$T/out")
  wait_slurm "$job" 360
  expect_exit 0 P collect "$job" --dir "$T/pool"
  expect_grep out '^0 +localhost +completed +0 +cpu +- +[0-9.]+ requests/s +signed at [0-9]+ streams? +'
  grep -q 'input bucket' "$T/out" && bad "collect claimed an input bucket for slo records" || ok
  pid=$(grep -oE "$ID_RE\$" "$T/out" | tail -1)
  DEVGATE_LEDGER=$T/team.db check_record "$pid" "d['record']['pool']['job'] == '$job' and d['record']['label'] == 'pooled'"
  expect_exit 0 P collect "$job" --dir "$T/pool" --json
  expect_json out "d['tasks'][0]['throughput']['unit'] == 'requests/s' and d['tasks'][0]['throughput']['valid'] and d['tasks'][0]['bucket_id'] is None"
elif [ "$rc" -eq 77 ]; then
  echo "SKIPPED (part): Slurm/munge are not installed and could not be; pool slo is NOT tested" >&2
else
  bad "the throwaway Slurm did not start"
fi

done_tests
