#!/usr/bin/env bash
# Sent to a GPU machine for issue 15 (the cuda large-batch input path): the
# loader's slots are now the upload buffers (page-locked through host_alloc,
# uploaded in place, released after host_wait). Measures, in order:
#   1. test_cuda (host_alloc now hands out 64 blocks, a loader slot each);
#   2. compare cuda against cpu at batch 1024: the zero-copy uploads must give
#      the cpu trajectory ("within tolerance"; a slot released too early shows
#      as a loss off the cpu's);
#   3. devgate train mlp at 4096 with 2, 4 and 8 loader workers: step
#      time, the host's wait for its batch, h2d and device step, the page-locked
#      bytes (answers the default worker count on this 16-core host);
#   4. the per-op profile of mlp at 4096 (its "queue wait" line was 2.150 ms);
#   5. bench/fixture_vs_torch.py against PyTorch with CUDA graphs, mlp and
#      lenet at 256/1024/4096, default workers, then 8 workers at 1024/4096.
# Expects the carried binaries in .devcarry/bin (devgate, libdevgate-cuda.so,
# test_cuda, python/) and Debian's runtime libraries in .devcarry/root, as
# dev/device-s3a.sh. Log: $OUT/loader.log (about 3 minutes).
set -u
cd "$(dirname "$0")/.."
. dev/device-carry.sh loader
nvidia-smi -L 2>&1 | head -1
echo "cores $(nproc), load $(cut -d' ' -f1 /proc/loadavg)"
timeout 90 "$bin/test_cuda" >"$out/test_cuda.log" 2>&1
echo "test_cuda: exit $?: $(tail -1 "$out/test_cuda.log")"
grep -m3 "CHECK failed" "$out/test_cuda.log"
echo "== compare cuda vs cpu, mlp 1024"
timeout 60 $DG --no-ledger compare --backend cuda --model mlp --batches 1024 --steps 6 --repetitions 1 \
  >"$out/compare.txt" 2>&1
echo "compare exit $?"; grep -E "batch 1024" "$out/compare.txt" | head -2
echo "== train, loader workers (mlp at 4096, 60 steps; lenet has the same input)"
for m in mlp; do
  for w in 2 4 8; do
    timeout 30 $DG --no-ledger train --backend cuda --model $m --batch 4096 --steps 60 --workers $w --json -q \
      >"$out/train-$m-w$w.json" 2>"$out/train-$m-w$w.err"
    python3 - "$out/train-$m-w$w.json" $m $w <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"train {sys.argv[2]} w{sys.argv[3]}: no record ({e})"); sys.exit(0)
v = lambda x: round(x["value"], 3) if isinstance(x, dict) and x.get("valid") else None
ph, mem = d["phases"], d["data"]["memory"]
print(f"train {sys.argv[2]:5} workers {sys.argv[3]}: status {d['status']} step_ms {v(d['throughput']['step_ms'])}"
      f" data_wait_ms {v(ph['data'])} h2d_ms {v(ph['h2d'])} device_ms {v(ph['forward'])}"
      f" slots {mem['slot_count']} page_locked_MB {round(mem['page_locked']['value'] / 1e6, 1)}"
      f" capture {d['capture']['used']}")
PY
  done
done
echo "== profile mlp 4096"
timeout 60 $DG --no-ledger profile --backend cuda --model mlp --batch 4096 --warmup 5 --window 20 2>&1 | sed -n '1,8p'
echo "== bench: fp32 both, PyTorch step as a CUDA graph, default workers"
timeout 80 python3 bench/fixture_vs_torch.py --devgate "$DG" --backend cuda --graph --presets mlp,lenet \
  --batches 256,1024,4096 --rounds 2 --steps 60 --json "$out/bench-loader.json"
echo "== bench: 8 loader workers"
timeout 45 python3 bench/fixture_vs_torch.py --devgate "$DG" --backend cuda --graph --presets mlp,lenet \
  --batches 1024,4096 --rounds 2 --steps 60 --workers 8 --json "$out/bench-loader-w8.json"
