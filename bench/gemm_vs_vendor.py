#!/usr/bin/env python3
"""devgate's GEMM (the gate's matrix product) against the vendor library's own
rate in the same run: PyTorch's matmul (cuBLAS on cuda, its BLAS on cpu).

    python3 bench/gemm_vs_vendor.py --devgate build/devgate --backend cuda --sizes 1024,4096
"""
import argparse
import json
import statistics
import subprocess
import time

import torch


def vendor_gflops(n, device, reps=10):
    torch.backends.cuda.matmul.allow_tf32 = False  # the gate checks fp32
    a = torch.rand(n, n, device=device) * 2 - 1
    b = torch.rand(n, n, device=device) * 2 - 1
    for _ in range(3):
        a @ b
    times = []
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        a @ b
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return 2 * n ** 3 / statistics.median(times) / 1e9


def devgate_gflops(exe, backend, n):
    out = subprocess.run([exe, "--no-ledger", "gate", "--backend", backend, "--size", str(n), "--reps", "10",
                          "--json"], check=True, capture_output=True, text=True).stdout
    mm = json.loads(out)["backends"][0]["matmul"]
    assert mm["ok"], mm
    return mm["gflops"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--devgate", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--sizes", default="512,1024")
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    device = "cuda" if a.backend in ("cuda", "opencl") else "cpu"
    if a.threads:
        torch.set_num_threads(a.threads)
    print(f"# GEMM fp32: devgate {a.backend} gate vs torch.matmul on {device} (median of 10)")
    print(f"{'n':>6} {'devgate GF/s':>13} {'vendor GF/s':>12} {'ratio':>6}")
    for n in (int(s) for s in a.sizes.split(",")):
        d = devgate_gflops(a.devgate, a.backend, n)
        v = vendor_gflops(n, device)
        print(f"{n:6d} {d:13.1f} {v:12.1f} {d / v:6.2f}", flush=True)


if __name__ == "__main__":
    main()
