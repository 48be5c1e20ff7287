#!/usr/bin/env bash
# Progress on stderr (docs/cli.md "Progress"), from the library's dg_progress
# reports through the callback the CLI installs:
#  - stderr piped: one line per step, per trial and per epoch, with the time
#    elapsed (and the ETA once the plan knows it), while --json keeps stdout
#    one JSON document; --quiet shows none;
#  - on a terminal (a pseudo-terminal here): one line at the bottom, cleared
#    before the program's own output and drawn again below it, the program
#    still seeing a terminal.
# The programs are tests/python/scripts/sweep_train.py (no torch: steps that
# sleep and report through the probe API) and a shell one-liner.
. "$(dirname "$0")/lib.sh"
SRC=${DEVGATE_SRC:?}
PY=$(command -v python3)
unset PYTHONPATH DEVGATE_PROBE_PATH DEVGATE_OOM_EVENTS DEVGATE_VERBOSE
SCRIPT="$SRC/tests/python/scripts/sweep_train.py"

# 1. accept -- CMD, stderr to a file: the steps, the sweep's trials, the soak's epochs.
"$DG" --no-ledger accept --json --quick --sweep-to 16 -o pack1 -- "$PY" "$SCRIPT" \
  --batch '{batch}' --device '{device}' --epochs '{epochs}' --steps 3 --base-ms 5 >acc.json 2>acc.err
rc=$?
[ "$rc" -le 1 ] && ok || { bad "accept -- CMD exited $rc"; tail -20 acc.err >&2; }
expect_json acc.json 'd["kind"] == "accept" and len(d["sweep"]["trials"]) == 2'
for s in env gate sweep soak compare profile; do
  expect_grep acc.err "^devgate: \[[1-6]/6 $s\] started · [0-9]+:[0-9][0-9] elapsed" "the $s step's start"
done
expect_grep acc.err '^devgate: \[3/6 sweep\] trial 1/~2 \(batch 8\) ok: [0-9]+ samples/s in [0-9.]+ s · ' "the first trial's line"
expect_grep acc.err '^devgate: \[3/6 sweep\] trial 2/~2 \(batch 16\) ok: ' "the second trial's line"
expect_grep acc.err '^devgate: \[3/6 sweep\] ok: cpu: knee b16' "the sweep's end with its summary"
expect_grep acc.err '^devgate: \[4/6 soak\] trial 1 \(batch 16 on cpu\) epoch 2 ended at step 6: ' "the soak's epochs"
expect_grep acc.err '^devgate: \[5/6 compare\] skipped: ' "a skipped step"
expect_grep acc.err ' · ETA ~[0-9]+:[0-9][0-9]$' "an ETA"
# One line per trial: the sweep trials' own epochs are not listed.
if grep -q '3/6 sweep.*epoch' acc.err; then bad "sweep trials list their epochs"; else ok; fi

# 2. run --json: the program's epochs on stderr, stdout the record alone.
"$DG" --no-ledger run --no-env --json -- "$PY" "$SCRIPT" --epochs 2 --steps 3 >run.json 2>run.err
expect_json run.json 'd["kind"] == "run" and d["state"] == "complete"'
expect_grep run.err '^devgate: \[supervise\] started · 0:0[0-9] elapsed$' "run's start"
expect_grep run.err '^devgate: \[supervise\] epoch 1 ended at step 3: [0-9]+ samples/s · ' "run's first epoch"
expect_grep run.err '^devgate: \[supervise\] epoch 2 ended at step 6: ' "run's second epoch"
expect_grep run.err '^devgate: \[supervise\] ok: exit 0 ' "run's end"
"$DG" --no-ledger run --no-env --json -q -- "$PY" "$SCRIPT" --epochs 1 --steps 2 >q.json 2>q.err
expect_json q.json 'd["state"] == "complete"'
if grep -q '^devgate: \[' q.err; then bad "--quiet still shows progress"; sed 's/^/  | /' q.err >&2; else ok; fi

# 3. On a terminal: the bar below the program's lines, which reach it whole.
"$PY" - "$DG" <<'PY' >tty.out 2>tty.err && ok || { bad "the terminal run"; cat tty.err >&2; }
import os, pty, sys
dg = sys.argv[1]
prog = 'for i in 1 2 3; do echo "line $i of the program"; sleep 0.3; done; [ -t 1 ] && echo "stdout is a terminal"; [ -t 2 ] && echo "stderr is a terminal" >&2; exit 0'
pid, fd = pty.fork()
if pid == 0:
    os.execv(dg, [dg, "--no-ledger", "run", "--no-env", "--probe", "off", "--", "sh", "-c", prog])
out = b""
while True:
    try:
        chunk = os.read(fd, 65536)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
_, st = os.waitpid(pid, 0)
open("tty.raw", "wb").write(out)
sys.exit(0 if os.WEXITSTATUS(st) == 0 else 1)
PY
"$PY" - <<'PY' && ok || bad "the bar and the program's lines on the terminal"
import re, sys
raw = open("tty.raw", "rb").read().decode("utf-8", "replace")
why = []
for i in (1, 2, 3):
    # Each program line starts on a cleared row (the bar taken off first) and is whole.
    if not re.search(r"\r\x1b\[Kline %d of the program\r?\r\n" % i, raw):
        why.append("line %d not on a cleared row" % i)
if "devgate run [supervise]" not in raw:
    why.append("no bar")
# The bar comes back below the program's output.
last = raw.rfind("line 3 of the program")
if raw.find("devgate run [supervise]", last) < 0:
    why.append("no bar after the program's last line")
for s in ("stdout is a terminal", "stderr is a terminal"):
    if s not in raw:
        why.append("the program did not see a terminal: " + s)
if why:
    print("\n".join(why), file=sys.stderr)
    print(repr(raw[:3000]), file=sys.stderr)
    sys.exit(1)
PY

# 4. The fixture's own sweep: one line per trial.
"$DG" --no-ledger sweep --json --model mlp --from 8 --to 16 --warmup-steps 1 --timed-steps 3 \
  >sw.json 2>sw.err
expect_json sw.json 'len(d["trials"]) == 2'
expect_grep sw.err '^devgate: \[sweep\] trial 1/~2 \(batch 8\) ok: ' "the fixture sweep's first trial"
expect_grep sw.err '^devgate: \[sweep\] trial 2/~2 \(batch 16\) ok: .* · ETA ~0:00$' "the fixture sweep's last trial"
# 5. The fixture's soak and train: one line per epoch, with the ETA of the epochs left.
"$DG" --no-ledger soak --json --model mlp --epochs 3 --steps 10 >soak.json 2>soak.err
expect_json soak.json 'd["kind"] == "soak"'
for e in 1 2 3; do
  expect_grep soak.err "^devgate: \[soak\] epoch $e ended at step $((e * 10)): [0-9]+ samples/s · [0-9]+:[0-9][0-9] elapsed · ETA ~[0-9]+:[0-9][0-9]$" "the soak's epoch $e"
done
"$DG" --no-ledger train --model mlp --epochs 2 --steps 5 >train.out 2>train.err
expect_grep train.err '^devgate: \[train\] epoch 2 ended at step 10: ' "train's last epoch"
done_tests
