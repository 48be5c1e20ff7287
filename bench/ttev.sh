#!/usr/bin/env bash
# Time to evidence (issue 24): the fixture's `devgate accept --quick` and
# default tier N times each, and the median of every step's wall
# (steps[].wall), of its share (steps[].share) and of the whole command's wall.
# Given two binaries it runs them alternately (A B, then B A, ...), so both see
# the same drift of the machine's load, and prints them side by side with the
# ratio new / old. Kept per run: the 1-minute load average before it, the
# cores other processes kept busy while it ran (/proc/stat less the run's own
# CPU time from GNU time), the float64 reference's wall inside compare, and a
# hash of the reference's losses (the same hash: the same bytes).
#
#   bench/ttev.sh [-n N] [-t quick|default|both] DEVGATE [DEVGATE_NEW]
#     (default 3 runs, both tiers; one binary: just its medians)
#   bench/ttev.sh -s DIR [-n N] [-t ...] [old new | bin]: the table of the
#     records a run kept in DIR, nothing run again
#   TTEV_OUT=DIR keeps the records there (default a fresh temporary folder);
#   TTEV_ARGS="--backend opencl" adds words to every accept.
set -u
n=3
tiers="quick default"
summary=
while getopts "n:t:s:" opt; do
  case $opt in
  n) n=$OPTARG ;;
  s) summary=$OPTARG ;;
  t) case $OPTARG in
    quick | default) tiers=$OPTARG ;;
    both) tiers="quick default" ;;
    *)
      echo "ttev.sh: -t quick|default|both" >&2
      exit 2
      ;;
    esac ;;
  *)
    echo "usage: bench/ttev.sh [-n N] [-t quick|default|both] DEVGATE [DEVGATE_NEW]" >&2
    exit 2
    ;;
  esac
done
shift $((OPTIND - 1))
if [ -n "$summary" ]; then
  out=$summary
  labels=(old new)
  [ $# -gt 0 ] && labels=("$@")
elif [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: bench/ttev.sh [-n N] [-t quick|default|both] DEVGATE [DEVGATE_NEW]" >&2
  exit 2
else
  bins=("$@")
  labels=(old new)
  [ $# -eq 1 ] && labels=(bin)
  for b in "${bins[@]}"; do
    [ -x "$b" ] || {
      echo "ttev.sh: $b is not an executable" >&2
      exit 2
    }
  done
  out=${TTEV_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/ttev-XXXXXX")}
  mkdir -p "$out"
fi

# Busy and total clock ticks of all CPUs (/proc/stat's first line).
cpu_ticks() {
  awk '/^cpu /{t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t; exit}' /proc/stat
}

# One accept: its record, its exit status, its wall, the load average before
# it and the cores other processes kept busy while it ran (all CPUs' busy time
# less the accept's own user and system time, over its wall).
run_one() { # tier label round binary
  local flag=() name="$1-$2-$3"
  [ "$1" = quick ] && flag=(--quick)
  local load b0 b1 rc wall own others
  load=$(cut -d' ' -f1 /proc/loadavg)
  b0=$(cpu_ticks)
  # shellcheck disable=SC2086
  /usr/bin/time -f "%e %U %S" -o "$out/$name.time" \
    "$4" --no-ledger accept "${flag[@]}" ${TTEV_ARGS:-} --json -q -o "$out/pack-$name" \
    >"$out/$name.json" 2>"$out/$name.err"
  rc=$?
  b1=$(cpu_ticks)
  # GNU time puts "Command exited with non-zero status N" first when N is not 0.
  read -r wall own <<<"$(tail -n 1 "$out/$name.time" | awk '{print $1, $2 + $3}')"
  others=$(awk -v a="$b0" -v b="$b1" -v own="$own" -v wall="$wall" -v hz="$(getconf CLK_TCK)" \
    'BEGIN{split(a, x, " "); split(b, y, " "); o = ((y[1] - x[1]) / hz - own) / wall;
           printf "%.2f", o < 0 ? 0 : o}')
  echo "{\"tier\": \"$1\", \"label\": \"$2\", \"round\": $3, \"rc\": $rc," \
    "\"wall\": $wall, \"load1\": $load, \"others_cores\": $others}" >"$out/$name.meta"
  echo "ttev: $1 $2 round $3: rc $rc, $wall s, load $load before, others $others cores" >&2
}

for tier in $tiers; do
  [ -n "$summary" ] && break
  for r in $(seq 1 "$n"); do
    order=(0 1)
    [ $((r % 2)) -eq 0 ] && order=(1 0)
    for i in "${order[@]}"; do
      [ "$i" -lt "${#bins[@]}" ] && run_one "$tier" "${labels[$i]}" "$r" "${bins[$i]}"
    done
  done
done

python3 - "$out" "$n" "$tiers" "${labels[@]}" <<'PY'
import glob, hashlib, json, os, statistics, sys

out, n, tiers, labels = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]


def val(m):
    return m.get("value") if isinstance(m, dict) and m.get("valid") else None


def med(xs):
    xs = [x for x in xs if x is not None]
    return (statistics.median(xs), min(xs), max(xs)) if xs else None


def cell(m, share=None):
    if not m:
        return "—"
    s = f"{m[0]:.2f} ({m[1]:.2f}-{m[2]:.2f})"
    return s + (f", {100 * share[0]:.0f}%" if share else "")


print(f"# devgate accept: time to evidence, {n} runs per binary and tier, medians (min-max) s, share of the method's wall\n")
for tier in tiers:
    runs = {}
    for lab in labels:
        for meta in sorted(glob.glob(os.path.join(out, f"{tier}-{lab}-*.meta"))):
            m = json.load(open(meta))
            try:
                rec = json.load(open(meta[:-5] + ".json"))
            except (OSError, ValueError):
                rec = {}
            runs.setdefault(lab, []).append((m, rec))
    steps = []
    for lab in labels:
        for _, rec in runs.get(lab, []):
            for s in rec.get("steps", []):
                if s["name"] not in steps:
                    steps.append(s["name"])
    print(f"## {tier}\n")
    head = "| step | " + " | ".join(labels) + (" | new / old |" if len(labels) == 2 else " |")
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    rows = [(name, lambda rec, name=name: next((val(s.get("wall")) for s in rec.get("steps", []) if s["name"] == name), None),
             lambda rec, name=name: next((val(s.get("share")) for s in rec.get("steps", []) if s["name"] == name), None))
            for name in steps]
    rows.append(("compare: float64 reference", lambda rec: val(((rec.get("compare") or {}).get("runs") or [{}])[0].get("reference", {}).get("wall")), None))
    rows.append(("method (sum of steps)", lambda rec: sum(val(s.get("wall")) or 0 for s in rec.get("steps", [])) or None, None))
    for name, get, share in rows:
        cells, meds = [], []
        for lab in labels:
            recs = [rec for _, rec in runs.get(lab, [])]
            m = med([get(r) for r in recs])
            sh = med([share(r) for r in recs]) if share else None
            cells.append(cell(m, sh))
            meds.append(m[0] if m else None)
        ratio = f" | {meds[1] / meds[0]:.2f}" if len(labels) == 2 and meds[0] and meds[1] else (" | —" if len(labels) == 2 else "")
        print(f"| {name} | " + " | ".join(cells) + ratio + " |")
    cells, meds = [], []
    for lab in labels:
        m = med([meta["wall"] for meta, _ in runs.get(lab, [])])
        cells.append(cell(m))
        meds.append(m[0] if m else None)
    ratio = f" | {meds[1] / meds[0]:.2f}" if len(labels) == 2 and meds[0] and meds[1] else (" | —" if len(labels) == 2 else "")
    print("| **total (command wall)** | " + " | ".join(f"**{c}**" for c in cells) + ratio + " |")
    print()
    for lab in labels:
        loads = [meta["load1"] for meta, _ in runs.get(lab, [])]
        others = [meta.get("others_cores") for meta, _ in runs.get(lab, [])]
        rcs = [meta["rc"] for meta, _ in runs.get(lab, [])]
        refs = set()
        for _, rec in runs.get(lab, []):
            ref = (((rec.get("compare") or {}).get("runs") or [{}])[0].get("losses") or {}).get("ref")
            if ref is not None:
                refs.add(hashlib.sha256(json.dumps(ref).encode()).hexdigest()[:12])
        print(f"- {lab}: {len(loads)} runs, load average before each {loads}, cores others kept busy "
              f"during each {others}, exit statuses {rcs}, "
              f"float64 reference losses: {', '.join(sorted(refs)) or 'none'}")
    print()
print(f"records: {os.path.basename(out)} (TTEV_OUT)")
PY
