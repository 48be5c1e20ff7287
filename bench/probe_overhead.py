#!/usr/bin/env python3
"""What the zero-code probe costs: the step time of a real model trained the
same way with and without `python -m devgate_probe.auto` (the way `devgate
run --probe auto` starts a script), in interleaved child processes.

Each child trains a small ResNet-style CNN (cpu: 16 channels, 16x16 inputs,
batch 32; cuda: 64 channels, 32x32, batch 256, a step of a few ms on a modern
GPU) from a DataLoader over in-memory tensors, --steps timed steps after
--warmup, and reports the median (or, --stat min, the fastest) step time over
chunks of 10 steps (one device synchronize per chunk, made by this benchmark,
not the probe), by the wall clock or (--clock cpu) the process's CPU time,
which other programs on a busy machine inflate less (with --threads 1 on a
cpu). The probe's events go to /dev/null. The result: median step time of each
variant, and the median of the per-pair ratios (probe / plain) with a 95%
bootstrap interval. Target: within 1%.
Results: docs/evidence/h200-probe-zero.log, docs/evidence/cpu-probe-zero.log.

    python3 bench/probe_overhead.py --device cpu --pairs 7
    python3 bench/probe_overhead.py --device cpu --threads 1 --clock cpu --pairs 15 --steps 200
    python3 bench/probe_overhead.py --device cpu --threads 1 --clock cpu --stat min --pairs 15 --steps 200
    python3 bench/probe_overhead.py --device cuda --pairs 9 --steps 300
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(os.path.dirname(HERE), "clients", "python")

CHILD = r"""
import json, sys, time, torch
from torch.utils.data import DataLoader, TensorDataset
device, steps, warmup, batch, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
clock = time.process_time if sys.argv[6] == "cpu" else time.perf_counter
if threads > 0:
    torch.set_num_threads(threads)
torch.manual_seed(0)
dev = torch.device(device)
def block(c):
    return torch.nn.Sequential(torch.nn.Conv2d(c, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c), torch.nn.ReLU(),
                               torch.nn.Conv2d(c, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c))
class Res(torch.nn.Module):
    def __init__(self, c=32, n=3):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, c, 3, padding=1), torch.nn.ReLU())
        self.blocks = torch.nn.ModuleList(block(c) for _ in range(n))
        self.head = torch.nn.Linear(c, 10)
    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            x = torch.relu(x + b(x))
        return self.head(x.mean((2, 3)))
model = (Res(16, 2) if dev.type == "cpu" else Res(64, 4)).to(dev)
side = 16 if dev.type == "cpu" else 32
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
n = (steps + warmup) * batch
ds = TensorDataset(torch.randn(n, 3, side, side), torch.randint(0, 10, (n,)))
loader = DataLoader(ds, batch_size=batch)
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
chunks, t0, i = [], None, 0
for x, y in loader:
    x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    i += 1
    if i == warmup:
        sync(); t0 = clock()
    elif i > warmup and (i - warmup) % 10 == 0:
        sync(); t1 = clock()
        chunks.append((t1 - t0) * 1000.0 / 10); t0 = t1
import statistics
print(json.dumps({"step_ms": statistics.median(chunks) if chunks else None, "min_ms": min(chunks) if chunks else None}))
"""


def child(py, probe, device, steps, warmup, batch, threads, clock, stat):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVGATE_")}
    env["PYTHONPATH"] = CLIENT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if probe:
        env["DEVGATE_EVENTS_FILE"] = os.devnull
        env["DEVGATE_PROBE"] = "auto"
    code = os.path.join(os.environ.get("TMPDIR", "/tmp"), "devgate_probe_overhead_child.py")
    with open(code, "w") as f:
        f.write(CHILD)
    cmd = [py] + (["-m", "devgate_probe.auto"] if probe else []) + [code, device, str(steps), str(warmup),
                                                                     str(batch), str(threads), clock]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["min_ms" if stat == "min" else "step_ms"]


def bootstrap(ratios, n=2000, seed=1):
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choice(ratios) for _ in ratios) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=None, help="default: 32 on cpu, 256 on a device")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: time.perf_counter (the step as the user waits for it); cpu: "
                         "time.process_time, the CPU time the process spent (with --threads 1 on a "
                         "cpu device: the step's work, less exposed to other programs on a busy machine)")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="each child's figure: the median or the fastest of its 10-step chunks (min: the "
                         "step's own cost with the least interference from other programs)")
    a = ap.parse_args()
    batch = a.batch or (32 if a.device == "cpu" else 256)
    plain, probed, ratios = [], [], []
    for k in range(a.pairs):
        order = (False, True) if k % 2 == 0 else (True, False)  # interleaved, alternating first
        got = {p: child(a.python, p, a.device, a.steps, a.warmup, batch, a.threads, a.clock, a.stat)
               for p in order}
        plain.append(got[False])
        probed.append(got[True])
        ratios.append(got[True] / got[False])
        print("pair %d: plain %.3f ms, probe %.3f ms, ratio %.4f" % (k, got[False], got[True], ratios[-1]),
              flush=True)
    lo, hi = bootstrap(ratios)
    med = statistics.median(ratios)
    print("device %s, batch %d, %s clock, %s of chunks, %d steps x %d pairs: plain %.3f ms, probe %.3f ms (medians); "
          "overhead %+.2f%% (95%% interval %+.2f%% .. %+.2f%%)"
          % (a.device, batch, a.clock, a.stat, a.steps, a.pairs, statistics.median(plain), statistics.median(probed),
             100 * (med - 1), 100 * (lo - 1), 100 * (hi - 1)))


if __name__ == "__main__":
    main()
