#!/usr/bin/env python3
"""Side by side: devgate's training fixture against PyTorch eager, same preset,
batch, step count and threads, on the same machine in the same run.

    python3 bench/train_vs_torch.py --devgate build/devgate --backend cpu --threads 1
    python3 bench/train_vs_torch.py --devgate build/devgate --backend cuda --presets mlp,lenet --batches 32,64,128,256

Prints samples/s for both and the ratio devgate/PyTorch (median of --repeats
runs each). PyTorch runs the same network (built from the same layer string),
the same SGD (momentum, weight decay), one host-to-device copy of the batch per
step, and reads the loss once at the end, as devgate does by default.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# PyTorch's BLAS (OpenBLAS on Debian) keeps its own thread pool that
# torch.set_num_threads does not reach: pin it before torch loads, so "1
# thread" means one thread on both sides.
if "--threads" in sys.argv:
    _n = sys.argv[sys.argv.index("--threads") + 1]
    if _n != "0":
        os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = _n

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
import torch  # noqa: E402
from golden import build  # noqa: E402

PRESETS = {
    "mlp": ("fc:512,relu,fc:256,relu,fc:10", (1, 28, 28)),
    "lenet": ("conv5x5:6,relu,pool2,conv5x5:16,relu,pool2,fc:120,relu,fc:84,relu,fc:10", (1, 28, 28)),
    "cifar": ("conv3x3:32:p1,relu,conv3x3:32:p1,relu,pool2,conv3x3:64:p1,relu,conv3x3:64:p1,relu,pool2,"
              "fc:256,relu,fc:10", (3, 32, 32)),
}


def torch_rate(preset, batch, steps, device, warmup=3):
    layers, shape = PRESETS[preset]
    net = build(layers, shape).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    nb = 8
    xs = [torch.randn(batch, *shape) for _ in range(nb)]
    ys = [torch.randint(0, 10, (batch,)) for _ in range(nb)]
    loss_sum = torch.zeros((), device=device)

    def step(i):
        nonlocal loss_sum
        x, y = xs[i % nb].to(device), ys[i % nb].to(device)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        loss_sum = loss_sum + loss.detach()

    for i in range(warmup):
        step(i)
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    float(loss_sum)  # the one sync point
    return steps * batch / (time.perf_counter() - t0)


def devgate_rate(exe, backend, preset, batch, steps, threads, workers, tf32=False):
    cmd = [exe, "--no-ledger", "train", "--backend", backend, "--model", preset, "--batch", str(batch),
           "--steps", str(steps + 2), "--json"]
    if tf32:
        cmd += ["--tf32"]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    if threads:
        cmd += ["--threads", str(threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["throughput"]["samples_per_s"]["value"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--devgate", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--presets", default="mlp,lenet,cifar")
    ap.add_argument("--batches", default="32,128,512")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None,
                    help="devgate's data-loader workers (default: devgate's own); PyTorch's side "
                         "has no loader: its batches are pre-made tensors")
    ap.add_argument("--torch-fp32", action="store_true",
                    help="turn off PyTorch's TF32 convolutions (its default on Ampere and later), "
                         "so both sides compute in plain fp32 as devgate does")
    ap.add_argument("--devgate-tf32", action="store_true",
                    help="run devgate with --tf32 (TF32 tensor cores for convolutions and GEMMs, "
                         "cuda only), as PyTorch does by default")
    a = ap.parse_args()
    if a.torch_fp32:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    device = "cuda" if a.backend == "cuda" else "cpu"
    if a.threads:
        torch.set_num_threads(a.threads)
    tf32 = device == "cuda" and torch.backends.cudnn.allow_tf32
    print(f"# devgate {a.backend} vs PyTorch {torch.__version__} {device}, threads {a.threads or 'default'}, "
          f"{a.steps} timed steps, median of {a.repeats}; PyTorch convolutions "
          f"{'TF32 (default)' if tf32 else 'fp32'}; devgate {'tf32' if a.devgate_tf32 else 'fp32'}, loader workers "
          f"{a.workers if a.workers is not None else 'default'}")
    print(f"{'preset':8} {'batch':>6} {'devgate/s':>12} {'torch/s':>12} {'ratio':>7}")
    for preset in a.presets.split(","):
        for batch in (int(b) for b in a.batches.split(",")):
            d = statistics.median(devgate_rate(a.devgate, a.backend, preset, batch, a.steps, a.threads, a.workers,
                                               a.devgate_tf32)
                                  for _ in range(a.repeats))
            t = statistics.median(torch_rate(preset, batch, a.steps, device) for _ in range(a.repeats))
            print(f"{preset:8} {batch:6d} {d:12.0f} {t:12.0f} {d / t:7.2f}", flush=True)


if __name__ == "__main__":
    main()
