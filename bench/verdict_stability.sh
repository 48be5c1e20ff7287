#!/usr/bin/env bash
# The same `devgate compare` N times on the machine as it is, then N times beside
# a CPU hog of this script's own (one busy loop per CPU, bounded by timeout), and
# a Markdown table of what the verdict did: the spread of the speedup's point
# estimates, the widths of their 95% intervals, and how often the verdict against
# speedup_min (pass: interval above, fail: below, inconclusive: it holds it)
# changed. Target: never pass in one run and fail in another.
#
#   bench/verdict_stability.sh [N] [DEVGATE]     (default 10, build/devgate)
#   COMPARE_ARGS="--backend opencl --model mlp --batches 64 --steps 10" to change the run
set -u
N=${1:-10}
DG=${2:-build/devgate}
ARGS=${COMPARE_ARGS:---backend opencl --model mlp --batches 64 --steps 10 --repetitions 5}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/verdict-stability-XXXXXX")
ncpu=$(nproc)

run_set() { # name
  for i in $(seq 1 "$N"); do
    # shellcheck disable=SC2086
    "$DG" --no-ledger compare $ARGS --json >"$OUT/$1-$i.json" 2>/dev/null || true
  done
}

run_set quiet
hogs=()
for _ in $(seq 1 "$ncpu"); do
  timeout 3600 sh -c 'while :; do :; done' &
  hogs+=($!)
done
run_set hog
kill "${hogs[@]}" 2>/dev/null
wait 2>/dev/null

python3 - "$OUT" "$N" "$ARGS" "$ncpu" <<'PY'
import json, os, statistics, sys
out, n, args, ncpu = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
TH = 1.25
print(f"`devgate compare {args}`, {n} runs per set, speedup_min {TH}x, {ncpu} CPUs; hog: one busy loop per CPU\n")
print("| set | runs | speedup median | min..max | spread (max/min) | 95% CI width median | pass | fail | inconclusive | verdict changes | contended windows |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for name in ("quiet", "hog"):
    pts, widths, verdicts, cont, total = [], [], [], 0, 0
    for i in range(1, n + 1):
        try:
            d = json.load(open(os.path.join(out, f"{name}-{i}.json")))
        except Exception:
            continue
        r = d["runs"][0]
        if not r.get("speedup", {}).get("valid"):
            continue
        sp = r["speedup"]["value"]; lo = r["speedup_ci"]["lo"]["value"]; hi = r["speedup_ci"]["hi"]["value"]
        pts.append(sp); widths.append(hi - lo)
        verdicts.append("pass" if lo >= TH else "fail" if hi < TH else "inconclusive")
        for side in ("cpu", "device"):
            for rep in r["repetitions"][side]:
                w = rep.get("window") or {}
                c = (w.get("others_cpus") or {}).get("value")
                if c is not None:
                    total += 1
                    cont += c >= 0.5
    if not pts:
        print(f"| {name} | 0 | | | | | | | | | |")
        continue
    changes = sum(1 for a, b in zip(verdicts, verdicts[1:]) if a != b)
    print(f"| {name} | {len(pts)} | {statistics.median(pts):.2f}x | {min(pts):.2f}..{max(pts):.2f}x | "
          f"{max(pts) / min(pts):.2f} | {statistics.median(widths):.2f}x | {verdicts.count('pass')} | "
          f"{verdicts.count('fail')} | {verdicts.count('inconclusive')} | {changes} | {cont}/{total} |")
    both = "pass" in verdicts and "fail" in verdicts
    print(f"\n{name}: {'PASS AND FAIL both seen (target missed)' if both else 'never pass in one run and fail in another'}\n", file=sys.stderr)
PY
rm -rf "$OUT"
