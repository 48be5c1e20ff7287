#!/usr/bin/env python3
"""devgate's OpenCL backend against its cuda backend on the same NVIDIA GPU.

    python3 bench/ocl_vs_cuda.py --devgate build/devgate [--presets mlp,lenet,cifar]
        [--batches 256,1024] [--rounds 3] [--steps N] [--paths new,old] [--device N] [--budget-s 300] [--json FILE]

For every preset and batch, `devgate train` runs on cuda (the step captured as
a CUDA graph, as it runs by default) and on opencl once per OpenCL path
(DEVGATE_OPENCL_PATH: new fuses a layer's bias and ReLU into its product, the
ReLU's mask into the product before it and xent into one command, runs a
convolution's forward pass as an implicit GEMM and sums a long bias gradient
over many work-groups; old keeps every op a command of its own; a path may
add +direct, the batch upload as one write on the compute queue
(DEVGATE_OPENCL_UPLOAD=direct), and +bwd, the convolution's backward pass as
implicit GEMMs (DEVGATE_OPENCL_CONV_BWD=implicit)), the sides alternating in
order round by round.
Each run's throughput.step_ms (the host clock over the steps after the
warm-up, from a synchronised start to the final sync point) is one sample;
the table gives the median of the rounds per side, the ratio cuda/opencl
(1.0: as fast as cuda; issue 24's target is >= 0.5) with its spread over the
rounds' pairings, the commands a step the opencl record counts, and the
opencl record's phases. --platform picks the OpenCL device whose platform
name holds the text (default NVIDIA). Stops starting new cells once
--budget-s seconds have passed (the cells left are listed as skipped).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

STEPS = {"mlp": 300, "lenet": 120, "cifar": 30}  # at batch 256; scaled by 256/batch, at least 10


def opencl_device(dg, platform):
    """devgate's OpenCL device index on the platform whose name holds platform, or None."""
    p = subprocess.run([dg, "--no-ledger", "env", "--json"], capture_output=True, text=True, timeout=120)
    try:
        env = json.loads(p.stdout)
    except ValueError:
        return None
    for b in env.get("backends", []):
        if b.get("name") != "opencl":
            continue
        for d in b.get("devices", []):
            if platform.upper() in (d.get("platform") or "").upper():
                return d.get("index")
    return None


def run(a, side, preset, batch, device):
    """One devgate train run; (step_ms, record) or (None, reason)."""
    backend, path = side.split(":") if ":" in side else (side, None)
    steps = a.steps or max(10, STEPS[preset] * 256 // batch)
    cmd = [a.devgate, "--no-ledger", "train", "--backend", backend, "--device",
           str(device if backend == "opencl" else 0), "--model", preset, "--batch", str(batch),
           "--steps", str(steps), "--json", "-q"]
    env = dict(os.environ)
    if path:  # PATH[+direct][+bwd]: DEVGATE_OPENCL_PATH, then the direct upload, the implicit backward
        words = path.split("+")
        env["DEVGATE_OPENCL_PATH"] = words[0]
        if "direct" in words:
            env["DEVGATE_OPENCL_UPLOAD"] = "direct"
        if "bwd" in words:
            env["DEVGATE_OPENCL_CONV_BWD"] = "implicit"
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        return None, "timed out"
    if p.returncode != 0:
        return None, "exit %d: %s" % (p.returncode, p.stderr.strip()[-200:])
    d = json.loads(p.stdout)
    ms = d["throughput"]["step_ms"]
    return (ms["value"] if ms.get("valid") else None), d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devgate", required=True)
    ap.add_argument("--presets", default="mlp,lenet,cifar")
    ap.add_argument("--batches", default="256,1024")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0, help="steps a run (default: by preset and batch)")
    ap.add_argument("--paths", default="new,old", help="OpenCL paths to run: new, old, each with +direct, +bwd")
    ap.add_argument("--platform", default="NVIDIA", help="the OpenCL platform's name holds this")
    ap.add_argument("--device", type=int, help="devgate's OpenCL device index (default: --platform's)")
    ap.add_argument("--budget-s", type=float, default=300)
    ap.add_argument("--json", metavar="FILE", help="every run's numbers as JSON")
    a = ap.parse_args()
    dev = a.device if a.device is not None else opencl_device(a.devgate, a.platform)
    if dev is None:
        print("no OpenCL device on a platform matching %r" % a.platform)
        return 3
    paths = [p for p in a.paths.split(",") if p]
    sides = ["cuda"] + ["opencl:" + p for p in paths]
    print("# devgate train, opencl (device %s, paths %s) against cuda, step_ms medians of %d rounds"
          % (dev, ",".join(paths), a.rounds))
    hdr = "%-6s %5s %9s" % ("preset", "batch", "cuda ms")
    for p in paths:
        hdr += " %9s %8s %5s" % (p + " ms", "ratio", "cmds")
    print(hdr + "  ratio spread / opencl phases (ms) of the first path / notes")
    t0, rows = time.time(), []
    for preset in a.presets.split(","):
        for batch in [int(b) for b in a.batches.split(",")]:
            if time.time() - t0 > a.budget_s:
                print("%-6s %5d skipped: out of time (--budget-s %g)" % (preset, batch, a.budget_s))
                continue
            ms = {s: [] for s in sides}
            rec, notes = {}, []
            for r in range(a.rounds):
                for s in (sides if r % 2 == 0 else sides[::-1]):
                    v, d = run(a, s, preset, batch, dev)
                    if v is None:
                        notes.append("%s: %s" % (s, d if isinstance(d, str) else "no valid step_ms"))
                        continue
                    ms[s].append(v)
                    rec.setdefault(s, d)
            row = {"preset": preset, "batch": batch, "step_ms": ms}
            line = "%-6s %5d" % (preset, batch)
            cu = statistics.median(ms["cuda"]) if ms["cuda"] else None
            line += " %9s" % ("%.3f" % cu if cu else "-")
            spread = []
            for p in paths:
                s = "opencl:" + p
                o = statistics.median(ms[s]) if ms[s] else None
                cmds = ((rec.get(s) or {}).get("throughput") or {}).get("commands_per_step") or {}
                ratio = cu / o if cu and o else None
                line += " %9s %8s %5s" % ("%.3f" % o if o else "-", "%.2f" % ratio if ratio else "-",
                                         "%.0f" % cmds["value"] if cmds.get("valid") else "-")
                if ratio:
                    rs = [c / x for c, x in zip(ms["cuda"], ms[s])]
                    spread.append("%s %.2f-%.2f" % (p, min(rs), max(rs)))
                row[p] = {"median_ms": o, "ratio": ratio, "commands_per_step": cmds.get("value")}
            first = rec.get("opencl:" + paths[0]) if paths else None
            ph = (first or {}).get("phases") or {}
            phs = {k: round(v["value"], 3) for k, v in ph.items() if isinstance(v, dict) and v.get("valid")}
            fb = [f["op"] for f in (first or {}).get("fallbacks") or []]
            line += "  %s / %s%s%s" % (", ".join(spread), phs, " fallbacks %s" % fb if fb else "",
                                        " / " + "; ".join(notes)[:300] if notes else "")
            print(line, flush=True)
            rows.append(row)
    print("# %.0f s" % (time.time() - t0))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": dev, "paths": paths, "rounds": a.rounds, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
