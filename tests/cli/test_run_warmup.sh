#!/usr/bin/env bash
# devgate run's headline rate is the steady one: a program whose first two
# steps are slow (start-up, compile, allocator warm-up: 400 ms each here,
# against 10 ms steady steps) is recorded at its steady rate, within 10%, not
# at the whole run's (a tenth of it), and says which; compare RUN_A RUN_B reads
# the same steady rate, so the slow start alone is no speedup. With too few
# steps to leave the warm-up out the whole run's rate stands in, said so.
# (tests/python/scripts/sweep_train.py reports its planned step times through
# the explicit probe API: no torch, and the rates are known in advance.)
. "$(dirname "$0")/lib.sh"
SRC=${DEVGATE_SRC:?}
PY=$(command -v python3)
unset DEVGATE_OOM_EVENTS
SCRIPT="$SRC/tests/python/scripts/sweep_train.py"
# batch 32, 10 ms a step: 3200 samples/s steady.
STEADY=3200
run() { "$DG" --no-ledger run --no-env -o "$1" -- "$PY" "$SCRIPT" --batch 32 --epochs 1 --base-ms 10 "${@:2}" \
  >"$1.out" 2>"$1.err"; }

run slow --steps 12 --slow-first 2 --slow-ms 400
rc=$?
[ "$rc" -eq 0 ] && ok || { bad "run (slow start) exited $rc"; tail -5 slow.err >&2; }
expect_json slow/report.json "abs(d['throughput']['samples_per_s']['value'] / $STEADY - 1) <= 0.10"
expect_json slow/report.json "d['throughput']['samples_per_s_basis'] == 'after-warmup' and 'warm-up left out' in d['throughput']['samples_per_s_note']"
# The terminal's line says it and which it is.
expect_grep slow.out 'supervise +PASS .* · 3[0-9]{3} samples/s after warm-up$' "run's summary"
# The whole run's rate is kept beside it: 384 samples over 0.9 s.
expect_json slow/report.json "abs(d['throughput']['samples_per_s_whole_run']['value'] / (384 / 0.9) - 1) <= 0.10"

run even --steps 12
rc=$?
[ "$rc" -eq 0 ] && ok || { bad "run (even) exited $rc"; tail -5 even.err >&2; }
expect_exit 0 "$DG" --no-ledger compare --json slow/report.json even/report.json
cp "$T/out" cmp.json
expect_json cmp.json "all(abs(r['samples_per_s']['value'] / $STEADY - 1) <= 0.10 and r['samples_per_s_basis'] == 'after-warmup' for r in d['runs'])"
expect_json cmp.json "abs(d['speedup']['samples_per_s']['value'] - 1) <= 0.10"
expect_exit 0 "$DG" --no-ledger compare slow/report.json even/report.json
expect_grep "$T/out" 'measured +after warm-up +after warm-up' "compare's table"

# Two steps: nothing after the warm-up; the whole run's rate, said so.
run short --steps 2
rc=$?
[ "$rc" -eq 0 ] && ok || { bad "run (two steps) exited $rc"; tail -5 short.err >&2; }
expect_json short/report.json "d['throughput']['samples_per_s_basis'] == 'whole-run' and 'too few' in d['throughput']['samples_per_s_note'] and d['throughput']['samples_per_s']['valid']"
expect_json short/report.json "d['throughput']['samples_per_s']['value'] == d['throughput']['samples_per_s_whole_run']['value'] and not d['throughput']['samples_per_s_after_warmup']['valid']"
expect_grep short.out 'samples/s over the whole run \(too few steps to leave out the warm-up\)$' "run's summary"
done_tests
