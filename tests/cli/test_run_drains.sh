#!/bin/bash
# devgate run reads the events pipe in batches (issue 24): a program stepping
# every 2 ms does not wake devgate at every step event. Not a timed test: a
# slower machine only makes fewer, larger drains.
. "$(dirname "$0")/lib.sh"
D="$DEVGATE_SRC/tests/data/run"

expect_exit 0 "$DG" run --no-env --json -- python3 "$D/trickle.py"
cp "$T/out" trickle.json
# Every event arrives and is counted ...
expect_json trickle.json 'd["supervise"]["events"]["by_kind"]["step"] == 400 and d["supervise"]["events"]["steps_stored"] == 400 and d["supervise"]["events"]["dropped"] == 0'
expect_json trickle.json 'd["soak"]["epochs_recorded"] == 1 and d["supervise"]["run_end"]["status"] == "ok"'
# ... in far fewer reads than events: at most one drain every 25 ms while the
# pipe keeps being readable (one per event before; 400 events over >= 0.8 s).
expect_json trickle.json '0 < d["supervise"]["events"]["drains"] <= 100'
expect_json trickle.json 'd["supervise"]["events"]["drains"] * 4 <= d["supervise"]["events"]["lines"]'
# The pipe is enlarged so a held pipe never fills (where the system allows 1 MiB).
if [ "$(cat /proc/sys/fs/pipe-max-size 2>/dev/null || echo 0)" -ge 1048576 ]; then
  expect_grep "$T/err" '^pipe_size 1048576$' "the program's stderr"
fi

done_tests
