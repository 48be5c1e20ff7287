#!/usr/bin/env bash
# accept -- CMD's fork server (docs/accept.md, "Fast trials: the fork server"):
# the runs of a Python command are forked from one interpreter that imported
# torch and the script's other installed imports, each still supervised as
# devgate's own child. Checked: the runs were forked (their parent is the
# server, each its own pid), what they measure agrees with fresh interpreters
# (--no-fork-server) within the intervals, and their footprint too; a crash
# and a segfault in a forked run read as in a fresh one; the fallback is taken
# and named for a command that is not `python SCRIPT`, for a script whose
# installed imports initialise the device, and for a run whose interpreter
# options differ (the gate). Skipped (77) without torch.
. "$(dirname "$0")/lib.sh"
SRC=${DEVGATE_SRC:?}
torch_python
SCRIPTS="$SRC/tests/python/scripts"
SCRIPT="$SCRIPTS/fork_train.py"
# A wait of 40 ms a batch (a slow disk): the step rate is mostly the wait's,
# steady on a loaded machine, so forked and fresh runs can be held to one another.
ARGS=(--batch '{batch}' --device '{device}' --epochs '{epochs}' --io-ms 40)

# What the runs were, on stderr for whoever reads a failure.
show() {
  "$PY" - "$1" >&2 <<'PY' || true
import json, sys
d = json.load(open(sys.argv[1]))
print("  %s launch: %s" % (sys.argv[1], json.dumps(d.get("launch"))[:400]))
for t in (d.get("sweep") or {}).get("trials", []):
    print("  trial b%d %s %s %s rss %s" % (t["batch"], t["ended"], t["samples_per_s"]["value"],
          (t["reason"] or "")[:80], t["rss_peak"]["value"]))
PY
}

# ---- forked (the default) against fresh interpreters -------------------------------
# A sitecustomize of the user's notes each interpreter start that runs the script:
# a forked run starts as a fresh interpreter does, the server never runs it.
mkdir -p usersite
cat >usersite/sitecustomize.py <<'PY'
import os, sys
if any(a.endswith("fork_train.py") for a in sys.argv):
    with open(os.environ["DGT_SITE"], "a") as f:
        f.write("%d\n" % os.getpid())
PY
export PYTHONPATH="$T/usersite" DGT_SITE="$T/site_fork.txt"
"$DG" --no-ledger accept --quick --sweep-from 16 --sweep-to 32 -o fork -- \
  "$PY" "$SCRIPT" "${ARGS[@]}" --pidlog pids_fork.txt >fork.txt 2>fork.err
rc=$?
[ "$rc" -eq 0 ] && ok || { bad "accept -- CMD (forked) exited $rc"; tail -20 fork.err >&2; }
cp fork/report.json fork.json 2>/dev/null || bad "no fork/report.json"
show fork.json
# gate, two trials, soak, profile: five runs, all forked.
expect_json fork.json 'd["launch"]["asked"] and d["launch"]["used"] == "fork-server" and (d["launch"]["forked"], d["launch"]["plain"]) == (5, 0) and d["launch"]["why"] is None'
expect_json fork.json '{"torch", "numpy", "argparse"} <= set(d["launch"]["server"]["imported"]) and d["launch"]["server"]["ready_s"]["valid"] and d["launch"]["server"]["pid"] > 1'
# The server was started with the method, its imports beside the env step:
# the runs waited for it less than its start-up took.
expect_json fork.json 'd["launch"]["server"]["waited_s"]["valid"] and d["launch"]["server"]["waited_s"]["value"] < d["launch"]["server"]["ready_s"]["value"]'
# Each trial's timeline: forked, set up, the program's code, its first step and
# window, its exit, in order; why it ended (the probe stopped it: a steady
# window, the step cap or the time budget).
expect_json fork.json 'all((lambda m: all(m[k]["valid"] for k in ("forked", "child_ready", "main", "first_step", "window_end", "exit", "tree_gone")) and 0 <= m["forked"]["value"] <= m["child_ready"]["value"] <= m["main"]["value"] <= m["first_step"]["value"] <= m["window_end"]["value"] <= m["exit"]["value"] <= m["tree_gone"]["value"] <= t["wall_s"]["value"])(t["timeline"]["marks"]) and t["stopped_by"] in ("window steady", "step cap", "time budget") for t in d["sweep"]["trials"])'
# The terminal says so, in one line below the steps; so does the page.
expect_grep fork.txt '^  runs +forked from one fork server: 5 of 5 runs \(python [0-9.]+; .*torch.*imported once in [0-9.]+ s\)$' "the terminal summary"
expect_grep fork/report.html 'runs: forked from one fork server: 5 of 5 runs' "the page"
# Each run's own pid, its parent the server (not devgate), the server not among them.
"$PY" - fork.json pids_fork.txt site_fork.txt <<'PY' && ok || bad "the runs were not forked by the server"
import json, sys
srv = json.load(open(sys.argv[1]))["launch"]["server"]["pid"]
rows = [tuple(map(int, l.split())) for l in open(sys.argv[2]) if l.strip()]
pids = [p for p, _ in rows]
site = [int(l) for l in open(sys.argv[3]) if l.strip()]
ok = len(rows) == 4 and all(pp == srv for _, pp in rows) and len(set(pids)) == 4 and srv not in pids
ok = ok and sorted(site) == sorted(pids)
print("server %d, runs (pid, ppid): %s, sitecustomize in %s" % (srv, rows, site), file=sys.stderr)
sys.exit(0 if ok else 1)
PY

DGT_SITE="$T/site_plain.txt" \
  "$DG" --no-ledger accept --quick --json --no-fork-server --sweep-from 16 --sweep-to 32 -o plain \
  -- "$PY" "$SCRIPT" "${ARGS[@]}" --pidlog pids_plain.txt >plain.json 2>plain.err
rc=$?
[ "$rc" -eq 0 ] && ok || { bad "accept -- CMD --no-fork-server exited $rc"; tail -20 plain.err >&2; }
show plain.json
expect_json plain.json 'not d["launch"]["asked"] and d["launch"]["used"] == "plain" and (d["launch"]["forked"], d["launch"]["plain"]) == (0, 5) and "--no-fork-server" in d["launch"]["why"] and d["launch"]["server"] is None'
# Fresh interpreters are devgate's own children: one parent for all, not a server.
"$PY" - pids_plain.txt site_plain.txt <<'PY' && ok || bad "the plain runs' parents"
import sys
rows = [tuple(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
site = [int(l) for l in open(sys.argv[2]) if l.strip()]
sys.exit(0 if len(rows) == 4 and len({pp for _, pp in rows}) == 1 and sorted(site) == sorted(p for p, _ in rows) else 1)
PY
unset PYTHONPATH DGT_SITE
# What a forked run measures agrees with a fresh one: at each batch, the two
# sides' 95% intervals of samples/s overlap (each widened by a tenth for the
# jitter of a loaded machine's sleeps); the process tree's peak footprint
# within 15% (a forked child without the server's resident pages made resident
# again shows a third less: the kernel does not copy the page tables of shared
# library text); the soak's steady rate within 30%.
"$PY" - fork.json plain.json <<'PY' && ok || bad "forked and fresh runs disagree"
import json, sys
f, p = (json.load(open(a)) for a in sys.argv[1:3])
ft = {t["batch"]: t for t in f["sweep"]["trials"]}
pt = {t["batch"]: t for t in p["sweep"]["trials"]}
ok = sorted(ft) == sorted(pt) == [16, 32]
def overlap(a, b):
    return None not in (a["lo"], b["lo"]) and 0.9 * a["lo"] <= 1.1 * b["hi"] and 0.9 * b["lo"] <= 1.1 * a["hi"]
for b in sorted(ft):
    a, c = ft[b], pt[b]
    va, vc = a["samples_per_s"]["value"], c["samples_per_s"]["value"]
    ra, rc = a["rss_peak"]["value"], c["rss_peak"]["value"]
    good = (a["ended"] == c["ended"] == "ok" and overlap(a["samples_per_s_ci"], c["samples_per_s_ci"])
            and 0.85 <= ra / rc <= 1.15)
    print("b%d: forked %.0f %s rss %.0f MiB, fresh %.0f %s rss %.0f MiB -> %s" % (
        b, va, a["samples_per_s_ci"], ra / 2**20, vc, c["samples_per_s_ci"], rc / 2**20, good), file=sys.stderr)
    ok = ok and good
def soak_rate(d):
    r = [e["samples_per_s"]["value"] for e in d["soak"]["epochs"] if e["samples_per_s"]["valid"]]
    return sorted(r)[len(r) // 2]
ratio = soak_rate(f) / soak_rate(p)
print("soak rate forked/fresh %.2f" % ratio, file=sys.stderr)
sys.exit(0 if ok and 0.7 <= ratio <= 1.4 else 1)
PY

# ---- a crash in a forked run reads as in a fresh one ---------------------------------
for mode in fork plain; do
  flag=; [ "$mode" = plain ] && flag=--no-fork-server
  for kind in crash segv; do
    "$DG" --no-ledger accept --quick --json $flag --sweep-from 16 --sweep-to 16 -o "${kind}_$mode" \
      -- "$PY" "$SCRIPT" "${ARGS[@]}" "--$kind-at" 3 >"${kind}_$mode.json" 2>"${kind}_$mode.err"
  done
  expect_json "crash_$mode.json" 'd["sweep"]["trials"][0]["ended"] == "failed" and d["sweep"]["trials"][0]["reason"] == "RuntimeError: boom at step 3"'
  expect_json "crash_$mode.json" '[s["error"] for s in d["steps"] if s["name"] in ("soak", "profile")] == ["RuntimeError: boom at step 3"] * 2'
  # The traceback on stderr starts where a fresh interpreter's does (no server frames).
  expect_grep "crash_$mode.err" 'fork_train.py", line [0-9]+, in main' "crash_$mode.err"
  if grep -q 'forkserver.py' "crash_$mode.err"; then bad "the fork server's frames in the traceback"; else ok; fi
  expect_json "segv_$mode.json" 'd["sweep"]["trials"][0]["ended"] == "signal" and d["sweep"]["trials"][0]["signal"] == "SIGSEGV" and d["sweep"]["trials"][0]["reason"].startswith("killed by SIGSEGV")'
done
expect_json crash_fork.json 'd["launch"]["used"] == "fork-server"'
expect_json segv_fork.json 'd["launch"]["used"] == "fork-server"'
# Each step of the forked run ends, and says so, as the fresh one's.
"$PY" - crash_fork.json crash_plain.json segv_fork.json segv_plain.json <<'PY' && ok || bad "a forked crash reads otherwise than a fresh one"
import json, sys
def ends(f):
    d = json.load(open(f))
    return [(s["name"], s["status"], (s["error"] or "").split(":")[0]) for s in d["steps"]]
a, b, c, e = (ends(f) for f in sys.argv[1:5])
print(a, b, c, e, sep="\n", file=sys.stderr)
sys.exit(0 if a == b and c == e else 1)
PY

# ---- the fallbacks, named ------------------------------------------------------------
# Not `python SCRIPT`: a launcher in front of the interpreter.
"$DG" --no-ledger accept --quick --sweep-from 16 --sweep-to 16 -o env -- \
  env "$PY" "$SCRIPT" "${ARGS[@]}" >env.txt 2>env.err
cp env/report.json env.json 2>/dev/null || bad "no env/report.json"
expect_json env.json 'd["launch"]["used"] == "plain" and d["launch"]["forked"] == 0 and d["launch"]["asked"] and "is not `python" in d["launch"]["why"] and d["launch"]["server"] is None'
expect_grep env.txt '^  runs +fresh interpreters: the command is not `python' "the terminal summary"
# The script's installed imports initialise the device: forking is unsafe. (The
# package is installed outside the script's folder: what lies below it is the
# program's own, never imported by the server.)
cp -r "$SCRIPTS/fork_site" site
PYTHONPATH="$T/site" "$DG" --no-ledger accept --quick --json --sweep-from 16 \
  --sweep-to 16 -o dev -- "$PY" "$SCRIPTS/fork_devinit_train.py" "${ARGS[@]}" >dev.json 2>dev.err
show dev.json
expect_json dev.json 'd["launch"]["used"] == "plain" and d["launch"]["forked"] == 0 and "forking is unsafe: the imports initialised CUDA" in d["launch"]["why"]'
expect_json dev.json '"gpu_setup" in d["launch"]["server"]["imported"] and d["sweep"]["trials"][0]["ended"] == "ok"'
# The gate's interpreter options differ from the command's (-u): the gate runs
# in a fresh interpreter, the rest forked.
"$DG" --no-ledger accept --quick --json --python "$PY" --sweep-from 16 --sweep-to 16 -o mixed -- \
  "$PY" -u "$SCRIPT" "${ARGS[@]}" >mixed.json 2>mixed.err
expect_json mixed.json 'd["launch"]["used"] == "mixed" and (d["launch"]["forked"], d["launch"]["plain"]) == (3, 1) and "interpreter or its options differ" in d["launch"]["why"]'
# Usage: the option is accept -- CMD's.
expect_exit 2 "$DG" --no-ledger accept --quick --no-fork-server
expect_grep "$T/err" "no-fork-server apply to accept -- CMD"

done_tests
