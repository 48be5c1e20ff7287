#!/usr/bin/env python3
"""The fixture against PyTorch, step time by step time, in alternating runs.

    /usr/bin/python3 bench/fixture_vs_torch.py --devgate build/devgate --backend cpu --threads 1,2
    python3 bench/fixture_vs_torch.py --devgate build/devgate --backend cuda --batches 32,256,1024,4096 --graph
    python3 bench/fixture_vs_torch.py ... --backend cuda --graph --precision tf32   # TF32 on both sides
    python3 bench/fixture_vs_torch.py ... --backend cuda --graph --precision bf16   # devgate bf16 vs autocast

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
`devgate env`); so are devgate's convolution kernels (avx512, avx2 or im2col:
the widest the CPU runs unless DEVGATE_CPU_CONV forces one) and PyTorch's
ATen CPU capability and whether oneDNN (its convolutions) is there.

--graph (cuda) captures PyTorch's whole step (forward, backward, SGD) in a CUDA
graph, the fastest a PyTorch user gets without writing kernels; each step then
copies the next batch from pinned host memory into the static input
(non-blocking) and replays, so both sides pay the upload.

--precision (cuda) picks the arithmetic of both sides: fp32 (the default)
turns PyTorch's TF32 off for matmul and cuDNN (both plain fp32); tf32 runs
devgate --precision tf32 against PyTorch with torch.backends.cuda.matmul.allow_tf32
and torch.backends.cudnn.allow_tf32 on; bf16 runs devgate --precision bf16
against the step's forward and loss under torch.autocast("cuda", torch.bfloat16)
(cache_enabled=False, as graph capture wants; TF32 off). --tf32 is
--precision tf32. With tf32 or bf16 each cell also runs devgate once at that
precision and once in fp32 with a loss read every 10 steps and checks the
curves agree: |loss - loss_fp32| <= LOSS_REL * |loss_fp32| + LOSS_ABS at
every point (the "loss" column; a failing cell makes the exit status 1).

Each figure is also given as a share of the device's dense peak for the
precision (the "pk" columns): the step's multiply-adds (forward, the weight
gradients and the input gradients of every layer but the first; 2 FLOP each)
over the step time and the peak in DEVICE_PEAKS (NVIDIA's dense figures:
H100/H200 SXM fp32 66.9, tf32 494.7, bf16 989.4 TFLOP/s; see
glennklockwood.com/garden/processors/h100); "not reported" for a device not
in the table. --json FILE writes every round.
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
# Dense peaks, FLOP/s, by torch.cuda.get_device_name() (the docstring cites them).
_HOPPER_SXM = {"fp32": 66.9e12, "tf32": 494.7e12, "bf16": 989.4e12}
DEVICE_PEAKS = {"NVIDIA H200": _HOPPER_SXM, "NVIDIA H100 80GB HBM3": _HOPPER_SXM}
LOSS_REL, LOSS_ABS, LOSS_STEPS = 0.05, 0.02, 100  # the bf16/tf32 loss-curve check


def step_flops(preset, batch):
    """FLOP of one training step: 2 per multiply-add of the forward, the weight
    gradients, and the input gradients of every weighted layer but the first."""
    layers, (c, h, w) = PRESETS[preset]
    total, first = 0, True
    for spec in layers.split(","):
        parts = spec.split(":")
        if parts[0] == "fc":
            out = int(parts[1])
            macs = c * h * w * out
            c, h, w = out, 1, 1
        elif parts[0].startswith("conv"):
            kh, kw = (int(v) for v in parts[0][4:].split("x"))
            k = int(parts[1])
            pad = int(parts[2][1:]) if len(parts) > 2 else 0
            ho, wo = h + 2 * pad - kh + 1, w + 2 * pad - kw + 1
            macs = c * k * kh * kw * ho * wo
            c, h, w = k, ho, wo
        elif parts[0].startswith("pool"):
            f = int(parts[0][4:])
            h, w = h // f, w // f
            continue
        else:
            continue
        total += macs * (2 if first else 3)
        first = False
    return 2.0 * total * batch


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
    tf32, name = None, None
    if device == "cuda":
        tf32 = {"cudnn": torch.backends.cudnn.allow_tf32, "matmul": torch.backends.cuda.matmul.allow_tf32}
        name = torch.cuda.get_device_name()
    cap = [ln.split(":", 1)[1].strip() for ln in torch.__config__.show().splitlines()
           if "CPU capability usage" in ln]
    print(json.dumps({"ready": True, "torch": torch.__version__, "blas_core": blas_core(),
                      "threads": torch.get_num_threads(), "tf32_defaults": tf32, "device_name": name,
                      "cpu_capability": cap[0] if cap else None,
                      "onednn": torch.backends.mkldnn.is_available()}),
          flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        if device == "cuda":  # TF32 for --precision tf32 only (autocast's bf16 products never use it)
            torch.backends.cudnn.allow_tf32 = job["precision"] == "tf32"
            torch.backends.cuda.matmul.allow_tf32 = job["precision"] == "tf32"
        ms, cpu = torch_step_ms(torch, build, job["preset"], job["batch"], job["steps"], device, job["graph"],
                                job["precision"] == "bf16")
        print(json.dumps({"step_ms": ms, "cpu_ms": cpu}), flush=True)


def torch_step_ms(torch, build, preset, batch, steps, device, graph, bf16=False):
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
    ce = torch.nn.functional.cross_entropy
    # bf16: the forward and the loss under autocast, backward outside it (PyTorch's recipe).
    if bf16:
        def fwd_loss(x, y):
            with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
                return ce(net(x), y)
    else:
        def fwd_loss(x, y):
            return ce(net(x), y)
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
                fwd_loss(sx, sy).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            loss = fwd_loss(sx, sy)
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
            loss = fwd_loss(x, y)
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

def devgate_cmd(a, preset, batch, steps, precision):
    cmd = [a.devgate, "--no-ledger", "train", "--backend", a.backend, "--model", preset, "--batch", str(batch),
           "--steps", str(steps), "--json", "-q"]
    if precision != "fp32":
        cmd += ["--precision", precision]
    return cmd


def devgate_losses(a, preset, batch, precision):
    """The loss curve (a point every 10 steps) of LOSS_STEPS steps at precision."""
    cmd = devgate_cmd(a, preset, batch, LOSS_STEPS, precision) + ["--sync-every", "10"]
    if a.workers is not None:
        cmd += ["--workers", str(a.workers)]
    rec = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    if rec["spec"].get("math") != precision:
        raise SystemExit(f"devgate ran math {rec['spec'].get('math')}, asked for {precision}: {cmd}")
    return [p["loss"] for p in rec["loss"]]


def loss_check(a, preset, batch):
    """(ok, worst |d|/(LOSS_REL*|ref|+LOSS_ABS), curves) of a.precision against fp32."""
    got, ref = devgate_losses(a, preset, batch, a.precision), devgate_losses(a, preset, batch, "fp32")
    if len(got) != len(ref) or not got or any(v is None for v in got + ref):
        return False, float("inf"), {"got": got, "fp32": ref}
    worst = max(abs(g - r) / (LOSS_REL * abs(r) + LOSS_ABS) for g, r in zip(got, ref))
    return worst <= 1.0, worst, {"got": got, "fp32": ref}


def devgate_step_ms(a, preset, batch, steps, threads):
    cmd = devgate_cmd(a, preset, batch, steps + WARMUP, a.precision)
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
    """The BLAS object of devgate's cpu gate record, with "conv" added: the
    convolution kernels the cpu backend runs (the end of its versions string,
    "conv avx512"), or None."""
    out = subprocess.run([exe, "--no-ledger", "gate", "--backend", "cpu", "--size", "64", "--json"],
                         capture_output=True, text=True).stdout
    try:
        env = json.loads(out)
    except ValueError:
        return None
    conv = None
    for b in env.get("backends") or []:
        v = (b.get("versions") or "") if isinstance(b, dict) else ""
        if v and b.get("name") == "cpu" and "; conv " in v:
            conv = v.rsplit("; conv ", 1)[1]

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
    blas = find(env)
    if blas is not None:
        blas["conv"] = conv
    return blas


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
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32",
                    help="both sides' arithmetic (cuda): fp32, TF32 on both, or devgate bf16 against autocast")
    ap.add_argument("--tf32", action="store_true", help="the same as --precision tf32")
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
    if a.tf32:
        a.precision = "tf32"
    if a.precision != "fp32" and a.backend != "cuda":
        ap.error(f"--precision {a.precision} is for --backend cuda")
    device = a.backend
    threads = [int(t) for t in a.threads.split(",")] if device == "cpu" else [0]
    dblas = devgate_blas(a.devgate)
    print(f"# devgate {a.backend} vs PyTorch ({device}{', CUDA graph' if a.graph else ', eager'}), "
          f"{ {'fp32': 'fp32 both (TF32 off)', 'tf32': 'TF32 both (devgate --precision tf32, PyTorch allow_tf32)', 'bf16': 'bf16 (devgate --precision bf16, PyTorch autocast bf16)'}[a.precision]}; "
          f"{a.rounds} alternating rounds a cell; devgate loader workers {a.workers if a.workers is not None else 'default'}; "
          f"ratio = torch_ms / devgate_ms (>1: devgate faster)")
    if dblas:
        print(f"# devgate BLAS: {dblas.get('config')}; kernel {dblas.get('kernel')}"
              f", generic kernel {dblas.get('generic_kernel')}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')}"
              f"; conv kernels {dblas.get('conv')} (DEVGATE_CPU_CONV={os.environ.get('DEVGATE_CPU_CONV', '')})")
    rows, failed = [], False
    hdr = (f"{'preset':7} {'batch':>5} {'thr':>3} {'devgate ms':>11} {'torch ms':>10} {'ratio':>6} {'lo':>6} {'hi':>6} "
           f"{'cpu ratio':>9} {'lo':>6} {'hi':>6} {'load':>5} {'dg pk':>7} {'pt pk':>7} {'loss':>10}")
    for th in threads:
        w = Worker(th, device)
        peak = (DEVICE_PEAKS.get(w.info.get("device_name") or "") or {}).get(a.precision)
        print(f"# PyTorch {w.info['torch']}, {w.info['threads']} threads, BLAS core {w.info['blas_core']}"
              + (f", TF32 defaults {w.info['tf32_defaults']}, device {w.info.get('device_name')}" if device == "cuda"
                 else f", ATen CPU capability {w.info.get('cpu_capability')}, oneDNN {w.info.get('onednn')}")
              + (f"; pk = share of the {a.precision} dense peak {peak / 1e12:.1f} TFLOP/s" if peak
                 else "; pk: device peak not reported"))
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
                        v, c = w.run(preset=preset, batch=batch, steps=steps, graph=a.graph,
                                     precision=a.precision)
                        tms.append(v)
                        tcpu.append(c)
                    loads.append(os.getloadavg()[0])
                    for f in ((dg, tt) if r % 2 == 0 else (tt, dg)):
                        f()
                    ratios.append(tms[-1] / dms[-1])
                    if dcpu[-1]:
                        cratios.append(tcpu[-1] / dcpu[-1])
                flops = step_flops(preset, batch)
                share = (lambda ms: f"{flops / (ms * 1e-3) / peak:7.4f}") if peak else (lambda ms: f"{'n/r':>7}")
                loss_ok, loss_worst, curves = True, None, None
                if a.precision != "fp32":
                    loss_ok, loss_worst, curves = loss_check(a, preset, batch)
                    failed = failed or not loss_ok
                row = {"preset": preset, "batch": batch, "threads": th, "steps": steps, "devgate_ms": dms,
                       "torch_ms": tms, "ratios": ratios, "devgate_cpu_ms": dcpu, "torch_cpu_ms": tcpu,
                       "cpu_ratios": cratios, "load": loads, "devgate_graph": cap, "step_flop": flops,
                       "peak_flops": peak, "loss_ok": loss_ok, "loss_worst": loss_worst, "loss_curves": curves}
                rows.append(row)
                if a.json:  # after every cell, so a run cut short keeps what it measured
                    with open(a.json, "w") as f:
                        json.dump({"backend": a.backend, "graph": a.graph, "precision": a.precision,
                                   "device": w.info.get("device_name"), "loss_tolerance": [LOSS_REL, LOSS_ABS],
                                   "devgate_blas": dblas, "rows": rows}, f, indent=1)
                print(f"{preset:7} {batch:5d} {th:3d} {statistics.median(dms):11.3f} {statistics.median(tms):10.3f} "
                      f"{statistics.median(ratios):6.2f} {min(ratios):6.2f} {max(ratios):6.2f} "
                      + (f"{statistics.median(cratios):9.2f} {min(cratios):6.2f} {max(cratios):6.2f} " if cratios
                         else f"{'-':>9} {'-':>6} {'-':>6} ")
                      + f"{statistics.median(loads):5.1f} {share(statistics.median(dms))} "
                      + f"{share(statistics.median(tms))} "
                      + (f"{'-':>10}" if loss_worst is None else
                         f"{'ok' if loss_ok else 'FAIL'} {loss_worst:5.2f}".rjust(10)), flush=True)
        w.close()
    if failed:
        print(f"# FAIL: a {a.precision} loss curve left |d| <= {LOSS_REL}*|fp32| + {LOSS_ABS} (the loss column)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
