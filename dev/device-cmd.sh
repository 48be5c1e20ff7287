#!/usr/bin/env bash
# accept -- CMD's time to evidence on the GPU (issue 13): the same command as
# session 3's first pass (tests/python/scripts/accept_train.py --steps 20
# --features 256 --hidden 4096), in two invocations the coordinator can run
# separately, each under 4 minutes:
#   dev/device-cmd.sh quick   start-up split, then accept --quick (target <= 150 s)
#   dev/device-cmd.sh full    the default tier (target <= 6 min; limited here to 230 s,
#                             so a longer run shows as exit 124 with the partial pack)
# Prints each step's wall, the sweep's trials (batch, ended, reason, samples/s,
# wall), knee/safe and stop, the compare's speedup with its interval and pairs,
# the profile's window, phases and trace, and the decision.
# Expects .devcarry as dev/device-s3a.sh does (bin/ with devgate,
# libdevgate-cuda.so, test_cuda and python/ from build-cuda; root/ with the
# Debian runtime libs), and python3 with torch (CUDA) on PATH. Log: $OUT/cmd-TIER.log.
set -u
cd "$(dirname "$0")/.."
tier=${1:-quick}
. dev/device-carry.sh "cmd-$tier"
SCRIPT=tests/python/scripts/accept_train.py
ARGS=(--steps 20 --features 256 --hidden 4096)
$DG --version
secs() { python3 -c "import sys; print(round($(date +%s.%N) - float(sys.argv[1]), 1))" "$1"; }

report() {
python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
v = lambda x: x.get("value") if isinstance(x, dict) else x
r1 = lambda x: None if x is None else round(x, 1)
print(" steps", [(s["name"], s["status"], r1(v(s.get("wall")))) for s in d.get("steps", [])])
for s in d.get("steps", []):
    if s.get("error"):
        print("  %s error: %s" % (s["name"], s["error"][:200]))
sw = d.get("sweep") or {}
print(" sweep from", (sw.get("spec") or {}).get("from"), (sw.get("spec") or {}).get("from_source"),
      "stop", sw.get("stopped"), "knee", (sw.get("knee") or {}).get("batch"),
      "safe", (sw.get("safe_batch") or {}).get("batch"))
for t in (sw.get("trials") or []) + (sw.get("bisect") or []):
    print("  trial b%-7s %-10s sps %-8s step_ms %-7s wall %-5s %s" % (
        t.get("batch"), t.get("ended"), round(v(t.get("samples_per_s")) or 0),
        r1(v((t.get("step_ms") or {}).get("median"))), r1(v(t.get("wall_s"))), (t.get("reason") or "")[:100]))
c = d.get("compare") or {}
for r in c.get("runs", []):
    ci = r.get("speedup_ci") or {}
    rp = r.get("repetitions") or {}
    print(" compare b%s speedup %s (95%% %s-%s) pairs %s cpu %s device %s" % (
        r.get("batch"), r1(v(r.get("speedup"))), r1(v(ci.get("lo"))), r1(v(ci.get("hi"))),
        (c.get("spec") or {}).get("repetitions"),
        [round(x) for x in rp.get("cpu_samples_per_s") or [] if x], [round(x) for x in rp.get("device_samples_per_s") or [] if x]))
p = d.get("profile") or {}
if p:
    ph = p.get("phases") or {}
    print(" profile", p.get("status"), p.get("error"), "batch", (d.get("spec") or {}).get("batch"),
          "window", p.get("window"), "phases",
          {k: r1(100 * (v(x.get("share")) or 0)) for k, x in ph.items() if isinstance(x, dict)},
          "trace", p.get("trace"), p.get("trace_skipped"))
dec = d.get("decision") or {}
print(" decision", dec.get("route"), "|", (dec.get("statement") or "")[:300])
print(" reasons", (dec.get("reasons") or [])[:3])
print(" findings", [(f["id"], f["severity"]) for f in d.get("findings", [])])
print(" final gate", (d.get("final_gate") or {}).get("statement", "")[:200])
PY
}

if [ "$tier" = quick ]; then
  echo "== start-up of one child (what every trial pays)"
  for i in 1; do
    s=$(date +%s.%N); python3 -c 'import torch' ; echo " import torch: $(secs "$s") s"
    s=$(date +%s.%N); python3 -c 'import torch; torch.zeros(1, device="cuda"); torch.cuda.synchronize()'
    echo " import torch + cuda context: $(secs "$s") s"
    s=$(date +%s.%N); python3 "$SCRIPT" --batch 8 --device cuda --epochs 1 "${ARGS[@]}" >/dev/null 2>&1
    echo " the script alone, 20 steps at b8: $(secs "$s") s"
    s=$(date +%s.%N)
    DEVGATE_PROBE_MAX_STEPS=5 $DG --no-ledger run --no-env -o "$out/run-b8-$i" -- python3 "$SCRIPT" --batch 8 \
      --device cuda --epochs 1000 "${ARGS[@]}" >/dev/null 2>&1
    echo " devgate run, probe, stopped after 5 steps: $(secs "$s") s"
  done
  s=$(date +%s.%N)
  timeout 190 $DG accept --quick --json -o "$out/pack-cmd-quick" -- python3 "$SCRIPT" \
    --batch '{batch}' --device '{device}' --epochs '{epochs}' "${ARGS[@]}" \
    >"$out/accept-cmd-quick.json" 2>"$out/accept-cmd-quick.err"
  rc=$?
  echo "== accept --quick -- CMD: exit $rc in $(secs "$s") s (target <= 150 s)"
else
  s=$(date +%s.%N)
  timeout 345 $DG accept --json -o "$out/pack-cmd-full" -- python3 "$SCRIPT" \
    --batch '{batch}' --device '{device}' --epochs '{epochs}' "${ARGS[@]}" \
    >"$out/accept-cmd-full.json" 2>"$out/accept-cmd-full.err"
  rc=$?
  echo "== accept -- CMD (default tier): exit $rc in $(secs "$s") s (target <= 360 s; cut at 345 s here)"
fi
grep -v -i 'sync_debug\|Synchronization debug\|_warn_once\|acc_events' "$out/accept-cmd-$tier.err" | tail -6
report "$out/pack-cmd-$tier/report.json"
