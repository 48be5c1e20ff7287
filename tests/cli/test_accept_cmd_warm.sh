#!/usr/bin/env bash
# accept -- CMD's fork server warms what a program's first steps import lazily
# (docs/accept.md, "Fast trials: the fork server": warm and learned imports).
# warm_train.py imports the installed package lazylib at its top (the server
# imports it) and, at its first step, lazylib.slow (1 s at import),
# lazylib.threads (starts a thread at import) and its own warm_own.lazy; each
# appends "NAME PID" to $DGT_MARKS when imported. Checked: with learning on,
# the first run that imports lazylib.slow teaches the server, which imports it
# once (after a checker child did) and no later run pays it (the marks, the
# second trial's time to its first step); lazylib.threads is refused by the
# checker and forking stays on; the program's own module is never learned.
# With DEVGATE_FORKSRV_WARM naming them at the start instead (learning off):
# no run pays lazylib.slow, lazylib.threads is refused, a missing name fails,
# and the record says so. Skipped (77) without torch.
. "$(dirname "$0")/lib.sh"
SRC=${DEVGATE_SRC:?}
torch_python
SCRIPT="$SRC/tests/python/scripts/warm_train.py"
ARGS=(--batch '{batch}' --device '{device}' --epochs '{epochs}')
# The package is installed outside the script's folder (what lies below that
# folder is the program's own, never imported by the server).
cp -r "$SRC/tests/python/scripts/warm_site" site
export PYTHONPATH="$T/site"

# marks.py RECORD PIDLOG MARKS EXPR: EXPR over srv (the server's pid), runs
# (the script's runs, in order: trial b16, trial b32, soak, profile) and
# paid[NAME] (the pids that imported lazylib's NAME).
marks() {
  "$PY" - "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
srv = d["launch"]["server"]["pid"]
runs = [int(l.split()[0]) for l in open(sys.argv[2]) if l.strip()]
paid = {}
for l in open(sys.argv[3]):
    name, pid = l.split()
    paid.setdefault(name, set()).add(int(pid))
print("  server %d, runs %s, paid %s" % (srv, runs, paid), file=sys.stderr)
sys.exit(0 if len(runs) == 4 and eval(sys.argv[4]) else 1)
PY
}

# warm_accept NAME: accept --quick of warm_train.py, two sweep trials, into
# NAME.json (the marks in marks_NAME.txt, the runs' pids in pids_NAME.txt).
warm_accept() {
  DGT_MARKS="$T/marks_$1.txt" "$DG" --no-ledger accept --quick --json --sweep-from 16 \
    --sweep-to 32 -o "$1" -- "$PY" "$SCRIPT" "${ARGS[@]}" --pidlog "pids_$1.txt" \
    >"$1.json" 2>"$1.err"
  local rc=$?
  [ "$rc" -eq 0 ] && ok || { bad "accept -- CMD ($1) exited $rc"; tail -20 "$1.err" >&2; }
}

# ---- learned: the first run teaches the server ---------------------------------------
warm_accept learn
# gate, two trials, soak, profile: all forked, the refused import notwithstanding.
expect_json learn.json 'd["launch"]["used"] == "fork-server" and (d["launch"]["forked"], d["launch"]["plain"]) == (5, 0)'
expect_json learn.json 'd["launch"]["server"]["learning"] and d["launch"]["server"]["learned_imports"] == ["lazylib.slow"] and d["launch"]["server"]["learned_s"]["valid"]'
expect_json learn.json '[r.split(":")[0] for r in d["launch"]["server"]["learned_refused"]] == ["lazylib.threads"] and "started Python threads (lazylib-poller)" in d["launch"]["server"]["learned_refused"][0]'
expect_json learn.json 'not any("warm_own" in n for k in ("learned_imports", "learned_refused", "learned_failed") for n in d["launch"]["server"][k])'
# lazylib.slow: imported by the first run (which taught the server), then by a
# checker child and the server, never by a later run; lazylib.threads and the
# program's own module by every run (refused, never learned); every run sees
# the variable lazylib.slow sets (LAZYLIB_CACHE) after its first step's imports.
marks learn.json pids_learn.txt marks_learn.txt \
  'paid["slow"] & set(runs) == {runs[0]} and srv in paid["slow"] and len(paid["slow"]) == 3 and set(runs) <= paid["threads"] and srv not in paid["threads"] and set(runs) == paid["own"] == paid["env=default"]' \
  && ok || bad "the learned import was paid by a later run (or never warmed)"
# The second trial's first step does not wait for the 1 s import; the first's does.
expect_json learn.json '(lambda s: len(s) == 2 and s[0] >= 1.0 and s[1] < 0.9)([t["timeline"]["marks"]["first_step"]["value"] - t["timeline"]["marks"]["main"]["value"] for t in d["sweep"]["trials"]])'

# ---- warm at the start: DEVGATE_FORKSRV_WARM, learning off -----------------------------
DEVGATE_FORKSRV_WARM=lazylib.slow,lazylib.threads,lazylib.missing DEVGATE_FORKSRV_LEARN=0 \
  warm_accept warm
expect_json warm.json 'd["launch"]["used"] == "fork-server" and (d["launch"]["forked"], d["launch"]["plain"]) == (5, 0)'
expect_json warm.json 'd["launch"]["server"]["warm_imports"] == ["lazylib.slow"] and d["launch"]["server"]["warm_s"]["valid"] and d["launch"]["server"]["warm_s"]["value"] >= 2.0'
expect_json warm.json 'd["launch"]["server"]["warm_refused"].startswith("lazylib.threads: the imports started Python threads")'
expect_json warm.json '[f.split()[0] for f in d["launch"]["server"]["warm_failed"]] == ["lazylib.missing"]'
expect_json warm.json 'not d["launch"]["server"]["learning"] and d["launch"]["server"]["learned_imports"] == [] and not d["launch"]["server"]["learned_s"]["valid"]'
# lazylib.slow: the checker child and the server, no run; lazylib.threads: the
# checker child (refused: never the server) and every run. Every run sees the
# variable lazylib.slow sets at import (LAZYLIB_CACHE, as torch._dynamo sets
# TORCHINDUCTOR_CACHE_DIR), and the runs are forked all the same: a trial's
# environment is compared with the server's before its warm imports.
marks warm.json pids_warm.txt marks_warm.txt \
  'not paid["slow"] & set(runs) and srv in paid["slow"] and len(paid["slow"]) == 2 and set(runs) <= paid["threads"] and len(paid["threads"]) == 5 and srv not in paid["threads"] and set(runs) == paid["env=default"]' \
  && ok || bad "the warm import was paid by a run (or the refused one by the server)"

done_tests
