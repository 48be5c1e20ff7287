#!/usr/bin/env python3
"""The fixture against PyTorch, step time by step time, in alternating runs.

    /usr/bin/python3 bench/fixture_vs_torch.py --devgate build/devgate --backend cpu --threads 1,2
    python3 bench/fixture_vs_torch.py --devgate build/devgate --backend cuda --batches 32,256,1024,4096 --graph
    python3 bench/fixture_vs_torch.py ... --backend cuda --graph --tf32   # devgate --tf32 against PyTorch's TF32 default

For every preset, batch and thread count it runs `devgate train` and the same
network in PyTorch (same layer string, SGD with momentum 0.9, lr 0.01, batch,
warm-up and step count) --rounds times, the order flipping every round
(devgate first, then PyTorch first, ...), so a machine that slows down or
speeds up during the run weighs on both sides alike. PyTorch runs in one
worker process per thread count, started with OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS set before torch loads (torch.set_num_threads does not
reach OpenBLAS's own pool). Each side reports its step time: wall time of the
timed steps over their count, with the device synchronised before and after
(devgate's throughput.step_ms, which reads the loss once at the end; PyTorch
reads its summed loss once at the end as well).

The table gives per cell the median step time of each side and the median of
the per-round ratios torch_ms / devgate_ms (above 1: devgate faster) with the
lowest and highest round, the same for process CPU time per step (devgate's
throughput.cpu_ms, PyTorch's time.process_time over its timed steps; every
thread of each process, devgate's loader workers included: on a host shared
with other work this moves far less than wall time), plus the load average. Both sides' BLAS core
(OpenBLAS's kernel name) is printed first: a ratio measured with either side
on a generic kernel says nothing about the fixture (set OPENBLAS_CORETYPE, see
`devgate env`).

--graph (cuda) captures PyTorch's whole step (forward, backward, SGD) in a CUDA
graph, the fastest a PyTorch user gets without writing kernels; each step then
copies the next batch from pinned host memory into the static input
(non-blocking) and replays, so both sides pay the upload. --tf32 runs devgate
with --tf32 and leaves PyTorch's TF32 settings at their defaults; without it
PyTorch's TF32 is turned off (both plain fp32). --json FILE writes every round.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PRESETS = {
    "mlp": ("fc:512,relu,fc:256,relu,fc:10", (1, 28, 28)),
    "lenet": ("conv5x5:6,relu,pool2,conv5x5:16,relu,pool2,fc:120,relu,fc:84,relu,fc:10", (1, 28, 28)),
    "cifar": ("conv3x3:32:p1,relu,conv3x3:32:p1,relu,pool2,conv3x3:64:p1,relu,conv3x3:64:p1,relu,pool2,"
              "fc:256,relu,fc:10", (3, 32, 32)),
}
WARMUP = 2  # devgate's warm-up steps in `train` (throughput.warmup_steps)


def blas_core():
    """OpenBLAS's kernel name in this process (torch must be loaded), or None."""
    import ctypes
    seen = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if "/" in line else ""
            if ("blas" in path.lower()) and path not in seen:
                seen.add(path)
                try:
                    lib = ctypes.CDLL(path)
                    fn = lib.openblas_get_corename
                except (OSError, AttributeError):
                    continue
                fn.restype = ctypes.c_char_p
                return fn().decode()
    return None


# ---- the PyTorch worker: one process per thread count, jobs as JSON lines ----

def worker_main(threads, device):
    import torch
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "golden"))
    from golden import build
    if threads:
        torch.set_num_threads(threads)
    tf32 = None
    if device == "cuda":
        tf32 = {"cudnn": torch.backends.cudnn.allow_tf32, "matmul": torch.backends.cuda.matmul.allow_tf32}
    print(json.dumps({"ready": True, "torch": torch.__version__, "blas_core": blas_core(),
                      "threads": torch.get_num_threads(), "tf32_defaults": tf32}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        if device == "cuda" and not job["tf32"]:  # --tf32 leaves PyTorch's defaults alone
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
        ms, cpu = torch_step_ms(torch, build, job["preset"], job["batch"], job["steps"], device, job["graph"])
        print(json.dumps({"step_ms": ms, "cpu_ms": cpu}), flush=True)


def torch_step_ms(torch, build, preset, batch, steps, device, graph):
    layers, shape = PRESETS[preset]
    torch.manual_seed(0)
    net = build(layers, shape).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    nb = 8
    pin = device == "cuda"
    xs = [torch.randn(batch, *shape).pin_memory() if pin else torch.randn(batch, *shape) for _ in range(nb)]
    ys = [torch.randint(0, 10, (batch,)) for _ in range(nb)]
    if pin:
        ys = [y.pin_memory() for y in ys]
    xent = torch.nn.functional.cross_entropy
    loss_sum = torch.zeros((), device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if graph:
        sx = torch.zeros(batch, *shape, device=device)
        sy = torch.zeros(batch, dtype=torch.long, device=device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the graph (cuDNN/cuBLAS choices, optimiser state)
            for i in range(WARMUP + 1):
                sx.copy_(xs[i % nb], non_blocking=True)
                sy.copy_(ys[i % nb], non_blocking=True)
                opt.zero_grad(set_to_none=True)
                xent(net(sx), sy).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            loss = xent(net(sx), sy)
            loss.backward()
            opt.step()
            loss_sum.add_(loss.detach())

        def step(i):
            sx.copy_(xs[i % nb], non_blocking=True)
            sy.copy_(ys[i % nb], non_blocking=True)
            g.replay()
    else:
        def step(i):
            nonlocal loss_sum
            x, y = xs[i % nb].to(device, non_blocking=pin), ys[i % nb].to(device, non_blocking=pin)
            opt.zero_grad(set_to_none=True)
            loss = xent(net(x), y)
            loss.backward()
            opt.step()
            loss_sum = loss_sum + loss.detach()
    for i in range(WARMUP):
        step(i)
    sync()
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(steps):
        step(WARMUP + i)
    float(loss_sum)  # the one sync point, as devgate reads its loss once
    return (time.perf_counter() - t0) / steps * 1e3, (time.process_time() - c0) / steps * 1e3


# ---- the driver -------------------------------------------------------------

def devgate_step_ms(a, preset, batch, steps, threads):
    cmd = [a.devgate, "--no-ledger", "train", "--backend", a.backend, "--model", preset, "--batch", str(batch),
           "--steps", str(steps + WARMUP), "--json", "-q"]
    if a.tf32:
        cmd.append("--tf32")
    if a.workers is not None:
        cmd += ["--workers", str(a.workers)]
    if threads and a.backend == "cpu":
        cmd += ["--threads", str(threads)]
    rec = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    thr = rec["throughput"]
    if thr["warmup_steps"] != WARMUP or thr["timed_steps"] != steps or not thr["step_ms"]["valid"]:
        raise SystemExit(f"devgate timed {thr['timed_steps']} steps after {thr['warmup_steps']}: {cmd}")
    cpu = thr.get("cpu_ms") or {}
    return thr["step_ms"]["value"], cpu.get("value") if cpu.get("valid") else None, rec.get("capture", {}).get("used")


def devgate_blas(exe):
    out = subprocess.run([exe, "--no-ledger", "gate", "--backend", "cpu", "--size", "64", "--json"],
                         capture_output=True, text=True).stdout
    try:
        env = json.loads(out)
    except ValueError:
        return None

    def find(o):
        if isinstance(o, dict):
            if "generic_kernel" in o:
                return o
            for v in o.values():
                r = find(v)
                if r:
                    return r
        elif isinstance(o, list):
            for v in o:
                r = find(v)
                if r:
                    return r
        return None
    return find(env)


class Worker:
    def __init__(self, threads, device):
        env = dict(os.environ)
        if threads:
            env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = str(threads)
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", str(threads),
                                   "--worker-device", device], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  env=env, text=True)
        self.info = json.loads(self.p.stdout.readline())

    def run(self, **job):
        self.p.stdin.write(json.dumps(job) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise SystemExit("PyTorch worker died")
        r = json.loads(line)
        return r["step_ms"], r["cpu_ms"]

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def steps_for(a, preset, batch):
    if a.steps:
        return a.steps
    if a.backend == "cpu":  # about the same work per run whatever the batch
        per = {"mlp": 6000, "lenet": 3000, "cifar": 800}[preset]
        return max(4, min(40, per // batch))
    return 200


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devgate", required=False)
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--presets", default="mlp,lenet,cifar")
    ap.add_argument("--batches", default="32,128,512")
    ap.add_argument("--threads", default="1,2", help="cpu thread counts (0: each side's default)")
    ap.add_argument("--steps", type=int, default=0, help="timed steps a run (default: by preset and batch)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--graph", action="store_true", help="PyTorch's step as a CUDA graph (cuda)")
    ap.add_argument("--tf32", action="store_true", help="devgate --tf32 against PyTorch's TF32 default (cuda)")
    ap.add_argument("--workers", type=int, help="devgate's loader threads (default devgate's own, 2); "
                    "PyTorch's batches are made before the timed steps")
    ap.add_argument("--json", metavar="FILE", help="every round as JSON")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--worker-device", default="cpu", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker is not None:
        return worker_main(a.worker, a.worker_device)
    if not a.devgate:
        ap.error("--devgate is required")
    device = a.backend
    threads = [int(t) for t in a.threads.split(",")] if device == "cpu" else [0]
    dblas = devgate_blas(a.devgate)
    print(f"# devgate {a.backend} vs PyTorch ({device}{', CUDA graph' if a.graph else ', eager'}), "
          f"{'TF32 both (devgate --tf32, PyTorch default)' if a.tf32 else 'fp32 both'}; "
          f"{a.rounds} alternating rounds a cell; devgate loader workers {a.workers if a.workers is not None else 'default'}; "
          f"ratio = torch_ms / devgate_ms (>1: devgate faster)")
    if dblas:
        print(f"# devgate BLAS: {dblas.get('config')}; kernel {dblas.get('kernel')}"
              f", generic kernel {dblas.get('generic_kernel')}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')}")
    rows = []
    hdr = (f"{'preset':7} {'batch':>5} {'thr':>3} {'devgate ms':>11} {'torch ms':>10} {'ratio':>6} {'lo':>6} {'hi':>6} "
           f"{'cpu ratio':>9} {'lo':>6} {'hi':>6} {'load':>5}")
    for th in threads:
        w = Worker(th, device)
        print(f"# PyTorch {w.info['torch']}, {w.info['threads']} threads, BLAS core {w.info['blas_core']}"
              + (f", TF32 defaults {w.info['tf32_defaults']}" if device == "cuda" else ""))
        print(hdr, flush=True)
        for preset in a.presets.split(","):
            for batch in (int(b) for b in a.batches.split(",")):
                steps = steps_for(a, preset, batch)
                dms, tms, ratios, loads, cap = [], [], [], [], None
                dcpu, tcpu, cratios = [], [], []
                for r in range(a.rounds):
                    def dg():
                        nonlocal cap
                        v, c, cap = devgate_step_ms(a, preset, batch, steps, th)
                        dms.append(v)
                        dcpu.append(c)

                    def tt():
                        v, c = w.run(preset=preset, batch=batch, steps=steps, graph=a.graph, tf32=a.tf32)
                        tms.append(v)
                        tcpu.append(c)
                    loads.append(os.getloadavg()[0])
                    for f in ((dg, tt) if r % 2 == 0 else (tt, dg)):
                        f()
                    ratios.append(tms[-1] / dms[-1])
                    if dcpu[-1]:
                        cratios.append(tcpu[-1] / dcpu[-1])
                row = {"preset": preset, "batch": batch, "threads": th, "steps": steps, "devgate_ms": dms,
                       "torch_ms": tms, "ratios": ratios, "devgate_cpu_ms": dcpu, "torch_cpu_ms": tcpu,
                       "cpu_ratios": cratios, "load": loads, "devgate_graph": cap}
                rows.append(row)
                if a.json:  # after every cell, so a run cut short keeps what it measured
                    with open(a.json, "w") as f:
                        json.dump({"backend": a.backend, "graph": a.graph, "tf32": a.tf32, "devgate_blas": dblas,
                                   "rows": rows}, f, indent=1)
                print(f"{preset:7} {batch:5d} {th:3d} {statistics.median(dms):11.3f} {statistics.median(tms):10.3f} "
                      f"{statistics.median(ratios):6.2f} {min(ratios):6.2f} {max(ratios):6.2f} "
                      + (f"{statistics.median(cratios):9.2f} {min(cratios):6.2f} {max(cratios):6.2f} " if cratios
                         else f"{'-':>9} {'-':>6} {'-':>6} ")
                      + f"{statistics.median(loads):5.1f}", flush=True)
        w.close()


if __name__ == "__main__":
    main()
