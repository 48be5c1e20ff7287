#!/usr/bin/env bash
# A cpu step beside a busy neighbour degrades by no more than the cores it
# lost (issue 21 item 9): the fixture's cpu team follows the cores others
# leave free, so one busy process beside the step (a shell loop, as a
# colleague's job would be) costs at most usable/(usable-1) of its time at
# rest, not a wait at every op's end for the thread that shares a core with
# it. Measured in rounds (alone, beside the loop, beside the loop on one
# thread), medians compared with generous margins: the machine may be loaded
# by others too. The record says the threads the cpu side had and the cores
# others kept busy.
. "$(dirname "$0")/lib.sh"

hog=
stop_hog() { [ -n "$hog" ] && kill "$hog" 2>/dev/null && wait "$hog" 2>/dev/null; hog=; }
trap 'stop_hog; rm -rf "$T"' EXIT
start_hog() { sh -c 'while :; do :; done' & hog=$!; sleep 0.5; }

usable=$("$DG" --no-ledger env --json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(int(d["cpu"]["peak"]["topology"]["threads"]["value"]))' 2>/dev/null)
[ -n "$usable" ] || usable=1
if [ "$usable" -lt 2 ]; then
  echo "skipped: one usable core: no team to size"
  exit 77
fi

# step MODEL OUT [ARGS...]: one cpu training run, its step time in ms on stdout
step() {
  local model=$1 out=$2; shift 2
  "$DG" --no-ledger train --backend cpu --model "$model" --steps 240 --batch 32 --workers 0 \
    --json -q "$@" >"$out" 2>"$T/err" || { cat "$T/err" >&2; echo nan; return; }
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["throughput"]["step_ms"]["value"])' "$out"
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for model in mlp lenet; do
  alone=() beside=() one=()
  for round in 1 2 3; do
    stop_hog
    alone+=("$(step $model "$T/alone.json")")
    start_hog
    beside+=("$(step $model "$T/beside-$round.json")")
    one+=("$(step $model "$T/one.json" --threads 1)")
  done
  stop_hog
  a=$(median "${alone[@]}") b=$(median "${beside[@]}") o=$(median "${one[@]}")
  echo "$model: alone ${alone[*]} ms, beside a busy loop ${beside[*]} ms, one thread beside it ${o} ms (usable $usable)"
  # Lost one core of $usable: at most usable/(usable-1) x alone, with a margin of 2.5
  # for a machine others load (the static team took 10-100x).
  if python3 -c "import sys; a, b, u = $a, $b, $usable; sys.exit(0 if b <= 2.5 * a * u / (u - 1) else 1)"; then ok; else
    bad "$model: the step beside a busy loop took ${b} ms against ${a} ms alone (limit 2.5 x $usable/($usable-1))"
  fi
  # Never much worse than one thread beside the same loop (the static team waited for
  # the thread sharing a core at every op).
  if python3 -c "import sys; sys.exit(0 if $b <= 1.5 * $o else 1)"; then ok; else
    bad "$model: the step beside a busy loop took ${b} ms against ${o} ms on one thread"
  fi
  # The record: the team asked, its mean over the timed steps, the cores others took
  # (the loop alone is most of a core).
  for r in 1 2 3; do
    expect_json "$T/beside-$r.json" '
(lambda c: c["source"] == "usable cores" and c["adaptive"] is True
 and c["threads_asked"]["value"] == '"$usable"'
 and c["others_busy"]["valid"] and c["others_busy"]["value"] >= 0.5
 and c["others_busy_max"]["value"] >= c["others_busy"]["value"]
 and 1 <= c["threads_mean"]["value"] <= '"$usable"'
 and c["threads_fewest"]["value"] <= c["threads_mean"]["value"] + 1e-9
 and c["interval"] == {"value": 0.25, "unit": "s", "valid": True})(d["cpu_team"])'
  done
  expect_json "$T/one.json" 'd["cpu_team"]["source"] == "--threads" and d["cpu_team"]["adaptive"] is False and d["cpu_team"]["threads_mean"]["value"] == 1'
done

done_tests
