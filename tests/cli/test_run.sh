#!/bin/bash
# devgate run: the supervisor of the user's own program, and compare RUN_A RUN_B.
. "$(dirname "$0")/lib.sh"
D="$DEVGATE_SRC/tests/data/run"
RUN=("$DG" run --no-env --sample-ms 50)

# gone FILE: the pid in FILE is gone within 5 s (a killed process can stay a
# zombie for a moment while its reaper exits).
gone() {
  [ -s "$1" ] || return 1
  local pid
  pid=$(cat "$1")
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || return 0
    [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" = Z ] && return 0
    sleep 0.1
  done
  return 1
}

# 1. A good program: gate, soak with 10 epochs, steps, fallbacks, run_end.
expect_exit 0 "${RUN[@]}" --json --label first -- python3 "$D/good.py"
cp "$T/out" good1.json
expect_json good1.json 'd["kind"] == "run" and d["state"] == "complete" and d["label"] == "first"'
expect_json good1.json 'd["supervise"]["exit_status"] == 0 and d["supervise"]["signal"] is None and not d["supervise"]["timed_out"]'
expect_json good1.json 'len(d["soak"]["epochs"]) == 10 and d["soak"]["epochs_recorded"] == 10 and d["soak"]["empty_cache"] is True'
expect_json good1.json 'all(d["soak"]["growth"][k]["value"] == 0 for k in ("allocator_reserved", "allocator_allocated", "driver", "footprint"))'
expect_json good1.json 'set(d["soak"]["epochs"][0]) >= {"epoch","allocated","reserved","driver_used","rss","rss_peak","cache_emptied","validation","step_ms","samples_per_s"}'
expect_json good1.json 'all(e["gc"] is None for e in d["soak"]["epochs"])' # the explicit API says no collection kind
expect_json good1.json 'd["gate"]["kind"] == "gate" and d["gate"]["verdict"] == "pass" and d["gate"]["backends"][0]["matmul"]["ok"] is True'
expect_json good1.json 'd["supervise"]["events"]["by_kind"]["step"] == 50 and d["supervise"]["events"]["unknown"] == 1 and d["supervise"]["events"]["malformed"] == 0'
expect_json good1.json 'd["profile"]["fallbacks"][0]["op"] == "aten::foo" and d["profile"]["step"]["ms"]["valid"]'
expect_json good1.json 'd["bucket"]["resolution"] == 32 and d["framework"]["name"] == "fake" and d["sweep"] is None and d["compare"] is None'
expect_json good1.json 'd["supervise"]["samples"]["count"] >= 1 and d["supervise"]["samples"]["rss_peak"]["valid"] and len(d["supervise"]["series"]) >= 1'
expect_json good1.json 'd["supervise"]["run_end"]["status"] == "ok" and len(d["supervise"]["losses"]) == 50'
expect_json good1.json '[s["name"] for s in d["steps"]] == ["supervise"] and d["steps"][0]["status"] == "ok"'
# The ledger lists the run with its own steady rate (a run's final gate promises none).
expect_exit 0 "$DG" ledger list --json
expect_json "$T/out" '(lambda r: r["throughput"]["valid"] and abs(r["throughput"]["value"] - json.load(open("good1.json"))["throughput"]["samples_per_s"]["value"]) < 1e-6 * r["throughput"]["value"])([x for x in d if x["verb"] == "run"][-1])'

# The CPUs the program could use (cpu-use reads them): never more than the
# affinity mask, and the mask when devgate runs pinned to one CPU (a cgroup
# quota below it would cap it further: cores_limit "quota").
expect_json good1.json 'd["supervise"]["samples"]["cores"]["value"] <= len(__import__("os").sched_getaffinity(0)) and d["supervise"]["samples"]["cores_limit"] in ("affinity", "quota")'

# 2. Garbage and an overlong line are counted; the run is fine (pinned to one CPU).
expect_exit 0 taskset -c 0 "${RUN[@]}" --json -- sh "$D/garbage.sh"
expect_json "$T/out" 'd["supervise"]["samples"]["cores"]["value"] == 1'
# A CPU quota of half a CPU caps it (root with a cgroup cpu controller only).
CG=""
if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
  CG=/sys/fs/cgroup/devgate-cpu-$$
  mkdir "$CG" 2>/dev/null && echo "50000 100000" >"$CG/cpu.max" 2>/dev/null || CG=""
elif [ -d /sys/fs/cgroup/cpu ]; then
  CG=/sys/fs/cgroup/cpu/devgate-cpu-$$
  mkdir "$CG" 2>/dev/null && echo 100000 >"$CG/cpu.cfs_period_us" 2>/dev/null &&
    echo 50000 >"$CG/cpu.cfs_quota_us" 2>/dev/null || CG=""
fi
if [ -n "$CG" ]; then
  expect_exit 0 bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$CG" \
    "${RUN[@]}" --json -- sh "$D/garbage.sh"
  expect_json "$T/out" 'd["supervise"]["samples"]["cores"]["value"] == 0.5 and d["supervise"]["samples"]["cores_limit"] == "quota"'
  rmdir "$CG" 2>/dev/null || true
else
  echo "skipped: root cannot make a cgroup with a CPU quota here"
fi
expect_json "$T/out" 'd["supervise"]["events"]["malformed"] == 5 and d["supervise"]["events"]["overlong"] == 1'
expect_json "$T/out" 'd["supervise"]["events"]["by_kind"]["step"] == 1 and d["supervise"]["run_end"]["status"] == "ok"'

# 3. A flood: dropped events counted, devgate keeps up and finishes. The time
# limits below are far from the sleeps (1000 s) they guard against, so a loaded
# CI machine does not trip them.
start=$(date +%s)
expect_exit 0 "${RUN[@]}" --json -- python3 "$D/flood.py"
took=$(( $(date +%s) - start ))
if [ "$took" -lt 90 ]; then ok; else bad "flood took ${took}s"; fi
expect_json "$T/out" 'd["supervise"]["events"]["dropped"] > 100000 and d["supervise"]["events"]["by_kind"]["step"] == 200000'
expect_json "$T/out" 'd["supervise"]["events"]["by_kind"]["epoch_end"] == 1 and d["supervise"]["run_end"] is not None'

# 4. A child that leaves a sleeping grandchild: the run ends promptly, the grandchild is killed.
start=$(date +%s)
expect_exit 0 "${RUN[@]}" --json -- sh "$D/forker.sh"
took=$(( $(date +%s) - start ))
if [ "$took" -lt 60 ]; then ok; else bad "forker run took ${took}s"; fi
expect_json "$T/out" 'd["supervise"]["descendants_killed"] == 1 and d["supervise"]["exit_status"] == 0'
gone grandchild.pid && ok || bad "grandchild still alive"

# 5. A hang past --timeout: the whole tree (a setsid grandchild too) is killed.
rm -f grandchild.pid
start=$(date +%s)
expect_exit 124 "${RUN[@]}" --json --timeout 1 -- sh "$D/hang.sh"
took=$(( $(date +%s) - start ))
if [ "$took" -lt 60 ]; then ok; else bad "timeout run took ${took}s"; fi
expect_json "$T/out" 'd["supervise"]["timed_out"] and d["supervise"]["signal"] == "SIGTERM" and d["state"] == "failed"'
expect_json "$T/out" 'd["supervise"]["descendants_killed"] >= 1'
gone grandchild.pid && ok || bad "setsid grandchild survived the timeout"

# 6. The events fd closed early is recorded, not an error.
expect_exit 0 "${RUN[@]}" --json -- sh "$D/closefd.sh"
expect_json "$T/out" 'd["supervise"]["pipe_closed_early"] is True and d["supervise"]["events"]["by_kind"]["phase"] == 1'

# 7. Killed by SIGKILL.
expect_exit 1 "${RUN[@]}" --json -- sh "$D/selfkill.sh"
expect_json "$T/out" 'd["supervise"]["signal"] == "SIGKILL" and d["supervise"]["exit_status"] is None and d["state"] == "failed"'
expect_grep "$T/err" 'killed by SIGKILL'

# 8. No such program: a clear message, exit 127, nothing recorded.
expect_exit 127 "$DG" run --no-env -- no-such-program-devgate-test
expect_grep "$T/err" "cannot start 'no-such-program-devgate-test'"
expect_exit 2 "$DG" run --no-env
expect_exit 2 "$DG" run --bogus -- true

# 9. SIGINT to devgate: forwarded to the program, exit 130, record kept as interrupted.
"$DG" run --no-env --sample-ms 50 --label int -- sh "$D/sleeper.sh" >int.out 2>int.err &
dgpid=$!
for _ in $(seq 1 300); do pgrep -P "$dgpid" >/dev/null && break; sleep 0.1; done
sleep 0.3 # the program has started: devgate's handler is in place
kill -INT "$dgpid"
wait "$dgpid"
rc=$?
if [ "$rc" -eq 130 ]; then ok; else bad "interrupted run exited $rc, wanted 130"; cat int.err >&2; fi
"$DG" ledger list --json >list.json
expect_json list.json 'd[0]["verb"] == "run" and d[0]["state"] == "interrupted" and d[0]["exit_status"] == 130'
"$DG" ledger show --json "$(python3 -c 'import json; print(json.load(open("list.json"))[0]["id"])')" >int.json
expect_json int.json 'd["record"]["supervise"]["interrupted"] and d["record"]["supervise"]["signal"] == "SIGINT" and d["record"]["state"] == "interrupted"'

# 10. DEVGATE_EVENTS_FD reaches the program, and no shell: arguments pass literally.
expect_exit 0 "${RUN[@]}" --json -- sh "$D/envfd.sh"
expect_json "$T/out" 'd["device"] == "fd3" and d["spec"]["cmd"][0] == "sh"'
expect_exit 0 "${RUN[@]}" --json -- touch 'x;y' '$(touch pwned)'
if [ -e 'x;y' ] && [ -e '$(touch pwned)' ] && [ ! -e pwned ]; then ok; else bad "arguments were not passed literally"; fi
expect_json "$T/out" 'd["spec"]["cmd"] == ["touch", "x;y", "$(touch pwned)"]'

# 11. The human summary, recorded in the ledger.
expect_exit 0 "${RUN[@]}" -- python3 "$D/good.py"
expect_grep "$T/out" 'supervise +PASS +exit 0'
expect_grep "$T/out" '^  pack +devgate-report/2'
expect_exit 0 "$DG" ledger list
expect_grep "$T/out" ' run ' "the run's ledger entry"

# 12. compare RUN_A RUN_B: equal buckets compare, different ones are refused unless --force.
"$DG" run --no-env --json --label a -- python3 "$D/good.py" --step-ms 4 >a.json 2>/dev/null
"$DG" run --no-env --json --label b -- python3 "$D/good.py" --step-ms 2 >b.json 2>/dev/null
"$DG" run --no-env --json --label c -- python3 "$D/good.py" --bucket-res 64 >c.json 2>/dev/null
ida=$(python3 -c 'import json; print(json.load(open("a.json"))["run_id"])')
idb=$(python3 -c 'import json; print(json.load(open("b.json"))["run_id"])')
idc=$(python3 -c 'import json; print(json.load(open("c.json"))["run_id"])')
expect_exit 0 "$DG" compare "$ida" "$idb" --json
expect_json "$T/out" 'd["kind"] == "compare-runs" and d["buckets"]["same"] and abs(d["speedup"]["step_time"]["value"] - 2.0) < 0.1'
expect_json "$T/out" 'd["loss"]["pairs"] == 50 and d["loss"]["agree"] is True and len(d["memory"]["a"]) == 10'
expect_json "$T/out" 'd["runs"][0]["run_id"] == "'"$ida"'" and d["runs"][1]["label"] == "b"'
expect_exit 0 "$DG" compare "$ida" "$idb"
expect_grep "$T/out" 'speedup B/A +step time 1\.99'
expect_exit 2 "$DG" compare "$ida" "$idc"
expect_grep "$T/err" 'input buckets differ'
expect_grep "$T/err" '"resolution":32'
expect_grep "$T/err" '"resolution":64'
expect_exit 0 "$DG" compare "$ida" "$idc" --force --json
expect_json "$T/out" 'd["forced"] is True and d["buckets"]["same"] is False'
expect_exit 0 "$DG" --no-ledger compare a.json b.json
# The judgement: B twice as fast pays off; A against B is slower.
expect_exit 0 "$DG" --no-ledger compare a.json b.json --json
# Under ctest -j2 another test may run beside the two runs: the verdict is then
# "inconclusive" (contended) leaning the same way, never the other way.
expect_json "$T/out" '(d["judgement"]["verdict"] == "pays-off" or (d["judgement"]["verdict"] == "inconclusive" and d["judgement"].get("leaning") == "pays-off")) and abs(d["judgement"]["speedup"]["value"] - 1.90) < 0.05 and d["judgement"]["speedup_source"].startswith("throughput")'
expect_json "$T/out" '[r["passed"] for r in d["judgement"]["rules"]] == [True, True, True] and d["busy_fraction"]["source_b"].startswith("probe step events")'
expect_exit 0 "$DG" --no-ledger compare b.json a.json --json
expect_json "$T/out" 'd["judgement"]["verdict"] == "slower" or (d["judgement"]["verdict"] == "inconclusive" and d["judgement"].get("leaning") == "slower")'
# The advised fix for a data-bound loop: each step slower (3 ms, not 2), the
# loop 3.75x faster (no more 10 ms data wait). Judged on throughput, it pays off.
"$DG" --no-ledger run --no-env --json -- python3 "$D/good.py" --step-ms 2 --data-ms 10 >starved.json 2>/dev/null
"$DG" --no-ledger run --no-env --json -- python3 "$D/good.py" --step-ms 3 --data-ms 0.2 >fixed.json 2>/dev/null
expect_exit 0 "$DG" --no-ledger compare starved.json fixed.json --json
expect_json "$T/out" 'd["speedup"]["step_time"]["value"] < 0.7 and d["judgement"]["verdict"] == "pays-off" and d["judgement"]["speedup"]["value"] > 3'
expect_json "$T/out" 'abs(d["busy_fraction"]["a"]["value"] - 2.0 / 12.0) < 0.01 and d["busy_fraction"]["b"]["value"] > 0.9'
expect_exit 0 "$DG" --no-ledger compare starved.json fixed.json
expect_grep "$T/out" 'decision +pays-off'
expect_exit 1 "$DG" compare 19990101-nope "$idb"
# compare is a reading verb: it records nothing (it works on a read-only ledger).
"$DG" ledger list --json >list.json
expect_json list.json 'all(e["verb"] != "compare-runs" for e in d)'

done_tests
