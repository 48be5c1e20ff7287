#!/usr/bin/env bash
# Session 3, time to evidence (issue 15): two runs of accept --quick --backend
# cuda (target <= 20 s each) and one full accept --backend cuda (target <= 180
# s), each with its wall, every step's wall, the sweep's stop and trials, the
# knee, the soak and profile sizes, and the profile's data-wait figures (the
# queue wait against step.mean_ms, the window's mean step). Expects .devcarry
# as dev/device-s3a.sh does (bin/ with devgate, libdevgate-cuda.so from
# build-cuda; root/ with the Debian runtime libs). Log: $OUT/tte.log. About
# 1.5-2 minutes expected on the H200; at most 4 (timeouts 45 + 45 + 145 s: a full
# run cut at 145 s says so with exit 124).
set -u
cd "$(dirname "$0")/.."
. dev/device-carry.sh tte
$DG --version
walls() {
python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
v = lambda x: x.get("value") if isinstance(x, dict) else x
print(" steps", [(s["name"], s["status"], round(v(s.get("wall")) or -1, 1)) for s in d.get("steps", [])])
sw = d.get("sweep") or {}
print(" sweep stop", sw.get("stopped"), "train_samples", v((sw.get("spec") or {}).get("train_samples")),
      "knee", (sw.get("knee") or {}).get("batch"), "safe", (sw.get("safe_batch") or {}).get("batch"))
print(" trials", [(t.get("batch"), t.get("ended"), round(v(t.get("samples_per_s")) or 0),
                   round(v(t.get("wall_s")) or 0, 2)) for t in sw.get("trials") or []])
sk = d.get("soak") or {}
print(" soak batch", (sk.get("spec") or {}).get("batch"), "steps/epoch", (sk.get("spec") or {}).get("steps"),
      "epochs", sk.get("epochs_recorded"))
for r in (d.get("compare") or {}).get("runs", []):
    print(" compare", r.get("batch"), "speedup", v(r.get("speedup")))
p = d.get("profile") or {}
ph = p.get("phases") or {}
qw = ph.get("queue_wait") or {}
print(" profile batch", (p.get("spec") or {}).get("batch"), "window", p.get("window"),
      "step.ms", v((p.get("step") or {}).get("ms")), "step.mean_ms", v((p.get("step") or {}).get("mean_ms")),
      "queue_wait ms", v(qw.get("ms")), "share", v(qw.get("share")))
print(" decision", (d.get("decision") or {}).get("route"), (d.get("decision") or {}).get("statement", "")[:200])
print(" findings", [(f["id"], f["severity"], f.get("title", "")[:90]) for f in d["findings"]])
PY
}
run() { # name timeout args...
  local name=$1 lim=$2; shift 2
  local s; s=$(date +%s.%N)
  timeout "$lim" $DG accept "$@" -o "$out/pack-$name" >"$out/accept-$name.txt" 2>&1; local rc=$?
  echo "accept $* ($name): exit $rc in $(python3 -c "print(round($(date +%s.%N)-$s,1))") s"
  [ -f "$out/pack-$name/report.json" ] && walls "$out/pack-$name/report.json" || tail -5 "$out/accept-$name.txt"
}
run quick1 45 --quick --backend cuda
run quick2 45 --quick --backend cuda
run full 145 --backend cuda
