#!/usr/bin/env bash
# accept -- CMD with its runs forked from the fork server against the same with
# every run a fresh interpreter (--no-fork-server), side by side on one script
# and one machine, the two interleaved round by round (the order alternating),
# and a Markdown table: the whole accept's wall, the sweep trials' wall, the
# gate/soak/profile walls, the server's start-up, then at each batch of the
# sweep both sides' samples/s (median over the rounds) and peak footprint with
# the ratio forked/fresh, and where a sweep trial's seconds go on either side
# (its timeline's spans, medians over every trial: bench/trial_timeline.py),
# and what the server warmed (its warm and learned imports).
# Medians over the rounds; the ratio fresh/forked of the walls says how much
# faster. Each accept gets a private measurement lock, so
# a neighbour's measurement on a shared machine does not hold it up (the lock
# waits are shown).
#
#   bench/fork_server.sh [--rounds N] [--device DEV] [--tier quick|default]
#                        [--devgate PATH] [--python PY] [--keep DIR] [-- CMD...]
# CMD defaults to PY tests/python/scripts/fork_train.py --batch {batch} --device {device}
# --epochs {epochs} --workers 2 --samples 4096 --hidden 512 (a small script with DataLoader workers).
set -u
cd "$(dirname "$0")/.."
ROUNDS=3 DEVICE= TIER=quick DG=build/devgate PY=${PYTHON:-python3} KEEP=
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    --tier) TIER=$2; shift 2 ;;
    --devgate) DG=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --keep) KEEP=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: bench/fork_server.sh [--rounds N] [--device DEV] [--tier quick|default] [--devgate PATH] [--python PY] [--keep DIR] [-- CMD...]" >&2; exit 2 ;;
  esac
done
if [ $# -eq 0 ]; then
  set -- "$PY" tests/python/scripts/fork_train.py --batch '{batch}' --device '{device}' \
    --epochs '{epochs}' --workers 2 --samples 4096 --hidden 512
fi
OUT=${KEEP:-$(mktemp -d "${TMPDIR:-/tmp}/fork-bench-XXXXXX")}
mkdir -p "$OUT"
opts=(--no-ledger accept)
[ "$TIER" = quick ] && opts+=(--quick)
[ -n "$DEVICE" ] && opts+=(--backend "$DEVICE")

one() { # mode round CMD...
  local m=$1 r=$2 flag=() s
  shift 2
  [ "$m" = plain ] && flag=(--no-fork-server)
  s=$(date +%s.%N)
  DEVGATE_MEASURE_LOCK="$OUT/lock-$m-$r" "$DG" "${opts[@]}" "${flag[@]}" --json -o "$OUT/$m-$r" \
    -- "$@" >"$OUT/$m-$r.json" 2>"$OUT/$m-$r.err"
  echo "$? $(python3 -c 'import sys, time; print(time.time() - float(sys.argv[1]))' "$s")" >"$OUT/$m-$r.wall"
}
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then order="fork plain"; else order="plain fork"; fi
  for m in $order; do
    one "$m" "$r" "$@"
  done
done

python3 - "$OUT" "$ROUNDS" "$TIER" "$*" <<'PY'
import json, os, statistics, sys
out, rounds, tier, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
v = lambda x: x.get("value") if isinstance(x, dict) else x
med = lambda xs: statistics.median(xs) if xs else float("nan")
runs = {"fork": [], "plain": []}
for m in runs:
    for r in range(1, rounds + 1):
        rc, wall = open(os.path.join(out, "%s-%d.wall" % (m, r))).read().split()
        try:
            d = json.load(open(os.path.join(out, "%s-%d.json" % (m, r))))
        except Exception:
            d = None
        runs[m].append((int(rc), float(wall), d))
def steps(d, name):
    return sum(v(s["wall"]) or 0 for s in d["steps"] if s["name"] == name)
def trials(d):
    sw = d.get("sweep") or {}
    return (sw.get("trials") or []) + (sw.get("bisect") or [])
def lockw(d):
    return sum(v(x) or 0 for x in [(d.get("sweep") or {}).get("lock_waited")] if x)
host = os.uname().nodename
print("`devgate accept %s-- %s`, %d round(s) a side, interleaved; host %s\n" % (
    "--quick " if tier == "quick" else "", cmd, rounds, host))
rows = []
def row(name, f):
    a = [f(d) for rc, w, d in runs["fork"] if d]
    b = [f(d) for rc, w, d in runs["plain"] if d]
    ma, mb = med(a), med(b)
    ratio = mb / ma if ma and ma == ma and mb == mb else float("nan")
    print("| %s | %.1f | %.1f | %.2f× |" % (name, ma, mb, ratio))
print("| median over rounds | forked (s) | fresh (s) | fresh/forked |")
print("|---|---|---|---|")
a = [w for rc, w, d in runs["fork"]]; b = [w for rc, w, d in runs["plain"]]
print("| accept, whole | %.1f | %.1f | %.2f× |" % (med(a), med(b), med(b) / med(a)))
row("env", lambda d: steps(d, "env"))
row("gate (forked: with the server's start-up)", lambda d: steps(d, "gate"))
row("sweep", lambda d: steps(d, "sweep"))
row("sweep trial, median", lambda d: med([v(t["wall_s"]) for t in trials(d) if v(t["wall_s"])]))
def steps_s(t):  # the trial's timed steps: samples over samples/s
    n, sps = v(t.get("samples")), v(t["samples_per_s"])
    return n / sps if n and sps else None
row("sweep trial's timed steps, median", lambda d: med([x for x in map(steps_s, trials(d)) if x]))
row("soak", lambda d: steps(d, "soak"))
row("compare", lambda d: steps(d, "compare"))
row("profile", lambda d: steps(d, "profile"))
row("sweep lock waits", lockw)
# Where a sweep trial's seconds go: its timeline's spans, medians over every trial.
sys.path.insert(0, os.path.join(os.getcwd(), "bench"))
import trial_timeline
tl = {m: trial_timeline.medians([d for rc, w, d in runs[m] if d]) for m in runs}
print("\n| sweep trial's span, median over trials | forked (s) | fresh (s) |")
print("|---|---|---|")
for k in trial_timeline.ORDER:
    if k in tl["fork"] or k in tl["plain"]:
        print("| %s | %s | %s |" % (k, *("%.2f" % tl[m][k] if k in tl[m] else "-" for m in ("fork", "plain"))))
srv = [d["launch"]["server"] for rc, w, d in runs["fork"] if d and (d.get("launch") or {}).get("server")]
if srv:
    print("\nserver: python %s, imported %s; import %.1f s, ready %.1f s (median)" % (
        srv[0].get("version"), ", ".join(srv[0].get("imported") or []),
        med([s.get("import_s") or 0 for s in srv]), med([v(s.get("ready_s")) or 0 for s in srv])))
    # What the server warmed (the first round's): the lazy imports before its ready
    # message, what the runs taught it after.
    w = srv[0]
    print("warm imports %s in %s s%s; learned %s in %s s%s" % (
        ", ".join(w.get("warm_imports") or []) or "none", v(w.get("warm_s")),
        " (refused %s)" % w["warm_refused"] if w.get("warm_refused") else "",
        ", ".join(w.get("learned_imports") or []) or "none", v(w.get("learned_s")),
        " (refused %s)" % "; ".join(w["learned_refused"]) if w.get("learned_refused") else ""))
for m in runs:
    ls = [(d.get("launch") or {}) for rc, w, d in runs[m] if d]
    print("%s: exits %s; launch %s" % (m, [rc for rc, w, d in runs[m]],
          sorted({"%s %s/%s%s" % (l.get("used"), l.get("forked"), l.get("plain"),
                  (" (" + l["why"][:80] + ")") if l.get("why") else "") for l in ls})))
print("\n| batch | forked samples/s | fresh samples/s | forked/fresh | forked rss MiB | fresh rss MiB | forked/fresh |")
print("|---|---|---|---|---|---|---|")
by = {"fork": {}, "plain": {}}
for m in by:
    for rc, w, d in runs[m]:
        for t in trials(d) if d else []:
            if t.get("ended") == "ok":
                by[m].setdefault(t["batch"], []).append((v(t["samples_per_s"]), v(t["rss_peak"])))
for b in sorted(set(by["fork"]) & set(by["plain"])):
    fs = med([x for x, _ in by["fork"][b] if x]); ps = med([x for x, _ in by["plain"][b] if x])
    fr = med([y for _, y in by["fork"][b] if y]) / 2**20; pr = med([y for _, y in by["plain"][b] if y]) / 2**20
    print("| %d | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f |" % (b, fs, ps, fs / ps, fr, pr, fr / pr))
for m in by:
    ks = [(d.get("sweep") or {}).get("knee", {}).get("batch") for rc, w, d in runs[m] if d]
    print("%s knees %s" % (m, ks))
PY
echo "(records in $OUT)"
