#!/usr/bin/env python3
"""What measuring costs: devgate's training throughput with and without the
background sampler, and with the loss read every step (--sync-every 1) against
the default (read at epoch end), on each backend. Medians of --repeats runs.

    python3 bench/measure_overhead.py --devgate build/devgate --backends cpu,opencl --model lenet
"""
import argparse
import json
import statistics
import subprocess


def rate(exe, backend, model, batch, steps, extra):
    cmd = [exe, "--no-ledger", "train", "--backend", backend, "--model", model, "--batch", str(batch),
           "--steps", str(steps), "--json"] + extra
    d = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return d["throughput"]["samples_per_s"]["value"], d.get("sampler", {}).get("overhead_s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--devgate", required=True)
    ap.add_argument("--backends", default="cpu")
    ap.add_argument("--model", default="lenet")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    variants = [("default", []), ("sampler 100 ms", ["--sample-ms", "100"]),
                ("sampler 10 ms", ["--sample-ms", "10"]), ("sync every step", ["--sync-every", "1"])]
    print(f"# {a.model} batch {a.batch}, {a.steps} steps, median of {a.repeats}; ratio = variant / default")
    print(f"{'backend':8} {'variant':18} {'samples/s':>11} {'ratio':>6} {'sampler cpu s':>14}")
    for be in a.backends.split(","):
        base = None
        for name, extra in variants:
            runs = [rate(a.devgate, be, a.model, a.batch, a.steps, extra) for _ in range(a.repeats)]
            r = statistics.median(x for x, _ in runs)
            ov = [o for _, o in runs if o is not None]
            base = base or r
            print(f"{be:8} {name:18} {r:11.0f} {r / base:6.3f} "
                  f"{statistics.median(ov) if ov else float('nan'):14.4f}", flush=True)


if __name__ == "__main__":
    main()
