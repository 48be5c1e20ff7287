#!/usr/bin/env bash
# Issue 15, OpenCL, second pass (page-locked uploads on a copy queue, the
# GEMM auto-pick table): one call measures
#  1. devgate's OpenCL SGEMM against CLBlast on the NVIDIA OpenCL platform,
#     automatic kernel choice, at the four squares (sq512..sq4096; the table
#     now picks tiled128 at 2048 and 4096 where db128 ran) and the fixture's
#     38 shapes; then sq2048 with db64, db128 and tiled128 forced (the one
#     square the last log has no per-variant numbers for);
#  2. the fixture on NVIDIA OpenCL against the cuda backend: devgate train for
#     mlp, lenet and cifar at batch 256 and 1024, three runs alternating,
#     median step times, the ratio cuda/opencl (target >= 0.5), the opencl
#     h2d phase and the loader's page-locked bytes (non-zero: the zero-copy
#     slots are on).
# Expects .devcarry as dev/device-ocl.sh does (devgate, libdevgate-cuda.so,
# gemm_vs_clblast from build-cuda configured with -DDG_BENCH_CLBLAST=ON;
# libclblast.so.1 under .devcarry/root). At most 4 minutes. Log: $OUT/ocl2.log.
set -u
cd "$(dirname "$0")/.."
. dev/device-carry.sh ocl2
GB=$bin/gemm_vs_clblast
# OCL_PLATFORM / OCL_SHAPES / OCL_MODELS: for a dry run of this script on
# another machine (e.g. OCL_PLATFORM=Portable OCL_SHAPES=sq512 OCL_MODELS=mlp).
plat=${OCL_PLATFORM:-NVIDIA}
shapes=${OCL_SHAPES:-all}
t0=$(date +%s)
left() { echo $((230 - ($(date +%s) - t0))); } # seconds left of the 4-minute budget
# Order: the automatic GEMM choice at the squares, the fixture opencl-vs-cuda
# timing (at most 130 s), then as time allows the fixture GEMM shapes and
# sq2048 with each 64/128-wide variant forced.
nvidia-smi -L 2>&1 | head -1
$DG --version
ls /etc/OpenCL/vendors/ 2>&1 | tr '\n' ' '; echo
if [ -x "$GB" ]; then
  ldd "$GB" | grep -E 'clblast|OpenCL|not found'
  $GB --devices --platform "$plat" | tee "$out/ocl-devices.txt"
  nv=$(awk -F'\t' '$1 == "pick" {print $2}' "$out/ocl-devices.txt")
else
  echo "no $GB: the GEMM bench is skipped (configure build-cuda with -DDG_BENCH_CLBLAST=ON)"
  nv=$($DG --no-ledger env --json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
b = [x for x in d["backends"] if x["name"] == "opencl"][0]
print(next((str(v["index"]) for v in b["devices"] if "'"$plat"'".upper() in (v.get("platform") or "").upper()), ""))')
fi
if [ -z "$nv" ]; then echo "no OpenCL device on a platform matching $plat: stopping"; exit 1; fi
echo "$plat OpenCL device index: $nv"

if [ -x "$GB" ]; then
  echo "== GEMM, $plat OpenCL, automatic kernel choice, the squares"
  timeout 40 $GB --device "$nv" --reps 7 --min-ms 10 --shapes "${OCL_SHAPES:-square}"; echo "exit $?"
fi

echo "== fixture: devgate train, opencl (device $nv) vs cuda, step_ms medians of 3 alternating runs"
tb=$(( $(left) - 60 )); [ "$tb" -gt 130 ] && tb=130
python3 - "$DG" "$nv" "$out" "$tb" "${OCL_MODELS:-mlp,lenet,cifar}" <<'PY'
import json, statistics, subprocess, sys, time
dg, nv, out, budget = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
models = sys.argv[5].split(",")
t0 = time.time()
steps = {"mlp": 60, "lenet": 40, "cifar": 20}
print(f"{'preset':6} {'batch':>5} {'opencl ms':>10} {'cuda ms':>8} {'cuda/ocl':>8}  opencl spread / cuda spread / notes")
for model in models:
    for batch in (256, 1024):
        if time.time() - t0 > budget - 15:
            print(f"{model:6} {batch:5d} skipped: out of time")
            continue
        ms = {"opencl": [], "cuda": []}
        note = ""
        for rep in range(3):
            for be in (("opencl", "cuda") if rep % 2 == 0 else ("cuda", "opencl")):
                cmd = [dg, "--no-ledger", "train", "--backend", be, "--device", nv if be == "opencl" else "0",
                       "--model", model, "--batch", str(batch), "--steps", str(steps[model]), "--json"]
                try:
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
                    if p.returncode != 0:
                        note = f"{be} exit {p.returncode}: {p.stderr.strip()[-200:]}"
                        continue
                    d = json.loads(p.stdout)
                    ms[be].append(d["throughput"]["step_ms"]["value"])
                    if be == "opencl" and rep == 0:
                        fb = [(f["op"], f["calls"]) for f in d.get("fallbacks") or []]
                        ph = d.get("phases") or {}
                        pl = ((d.get("data") or {}).get("memory") or {}).get("page_locked") or {}
                        note = "fallbacks %s; page-locked slot bytes %s; phases ms %s" % (
                            fb, pl.get("value") if pl.get("valid") else "not reported",
                            {k: round(v["value"], 2) for k, v in ph.items()
                             if isinstance(v, dict) and v.get("valid")})
                except Exception as e:  # noqa: BLE001 - report and go on
                    note = f"{be} run failed: {e!r}"[:200]
        if ms["opencl"] and ms["cuda"]:
            o, c = statistics.median(ms["opencl"]), statistics.median(ms["cuda"])
            sp = lambda v: f"{min(v):.2f}-{max(v):.2f}"
            print(f"{model:6} {batch:5d} {o:10.2f} {c:8.2f} {c / o:8.2f}  {sp(ms['opencl'])} / {sp(ms['cuda'])} / {note}",
                  flush=True)
        else:
            print(f"{model:6} {batch:5d} no result: {note}", flush=True)
PY
if [ -x "$GB" ] && [ "$(left)" -gt 45 ]; then
  echo "== GEMM, $plat OpenCL, automatic kernel choice, the fixture's shapes"
  timeout 40 $GB --device "$nv" --reps 3 --min-ms 5 --shapes fixture; echo "exit $?"
fi
if [ -x "$GB" ]; then
  for v in db64 db128 tiled128; do
    [ "$(left)" -lt 12 ] && { echo "skipping forced $v: out of time"; continue; }
    echo "== GEMM, $plat OpenCL, DEVGATE_OPENCL_KERNEL=$v, sq2048"
    DEVGATE_OPENCL_KERNEL=$v timeout 10 $GB --device "$nv" --reps 3 --min-ms 5 --shapes sq2048; echo "exit $?"
  done
fi
echo "total $(( $(date +%s) - t0 )) s"
