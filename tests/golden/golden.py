#!/usr/bin/env python3
"""Golden trajectories of the training fixture, computed independently by PyTorch.

devgate exports the initial weights and every batch of a run (`devgate train
--export DIR`); this script rebuilds the same network in PyTorch from the layer
string, loads those weights, trains on those batches with torch.optim.SGD and
prints the loss of every step. The committed tests/data/golden.json is the
oracle the tests compare devgate against; regenerate it with

    /usr/bin/python3 tests/golden/golden.py --devgate build/devgate --write tests/data/golden.json

(Debian's python3-torch installs for /usr/bin/python3.)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

RUNS = [  # preset, batch, steps, lr, momentum, weight decay, seed
    ("mlp", 16, 20, 0.02, 0.9, 5e-4, 1),
    ("lenet", 16, 20, 0.02, 0.9, 5e-4, 1),
    ("cifar", 8, 20, 0.02, 0.9, 5e-4, 1),
]


def build(layers, in_shape):
    """nn.Sequential for a devgate layer string; flatten before the first fc."""
    mods, (c, h, w), flat = [], in_shape, False
    for tok in layers.split(","):
        tok = tok.strip()
        if tok in ("flatten", ""):
            continue
        if tok == "relu":
            mods.append(torch.nn.ReLU())
        elif tok.startswith("conv"):
            parts = tok[4:].split(":")
            kh, kw = (int(v) for v in parts[0].split("x"))
            k, stride, pad = int(parts[1]), 1, 0
            for p in parts[2:]:
                if p[0] == "s":
                    stride = int(p[1:])
                elif p[0] == "p":
                    pad = int(p[1:])
            mods.append(torch.nn.Conv2d(c, k, (kh, kw), stride=stride, padding=pad))
            h, w, c = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1, k
        elif tok.startswith("pool"):
            parts = tok[4:].split(":")
            k = int(parts[0])
            s = int(parts[1][1:]) if len(parts) > 1 else k
            mods.append(torch.nn.MaxPool2d(k, s))
            h, w = (h - k) // s + 1, (w - k) // s + 1
        elif tok.startswith("fc:"):
            if not flat:
                mods.append(torch.nn.Flatten())
                flat, c, h, w = True, c * h * w, 1, 1
            out = int(tok[3:])
            mods.append(torch.nn.Linear(c, out))
            c = out
        else:
            raise SystemExit(f"unknown layer {tok}")
    return torch.nn.Sequential(*mods)


def trajectory(export_dir):
    man = json.load(open(os.path.join(export_dir, "manifest.json")))
    spec, model = man["spec"], man["model"]
    net = build(model["layers"], tuple(model["input"]))
    arena = np.fromfile(os.path.join(export_dir, "params.f32"), dtype=np.float32)
    params = [p for p in net.parameters()]
    assert len(params) == len(model["tensors"]), "parameter count differs"
    with torch.no_grad():
        for p, t in zip(params, model["tensors"]):
            off, n = t["offset"] // 4, t["bytes"] // 4
            assert list(p.shape) == t["shape"], (p.shape, t["shape"])
            p.copy_(torch.from_numpy(arena[off:off + n].reshape(t["shape"])))
    opt = torch.optim.SGD(net.parameters(), lr=spec["lr"], momentum=spec["momentum"],
                          weight_decay=spec["weight_decay"])
    b, (c, h, w) = spec["batch"], model["input"]
    raw = open(os.path.join(export_dir, "batches.bin"), "rb").read()
    xb, yb = b * c * h * w * 4, b * 4
    losses = []
    for s in range(spec["steps"] * spec["epochs"]):
        chunk = raw[s * (xb + yb):(s + 1) * (xb + yb)]
        x = torch.from_numpy(np.frombuffer(chunk[:xb], dtype=np.float32).reshape(b, c, h, w).copy())
        y = torch.from_numpy(np.frombuffer(chunk[xb:], dtype=np.int32).astype(np.int64))
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--devgate", required=True)
    ap.add_argument("--write")
    a = ap.parse_args()
    torch.set_num_threads(1)
    out = {"generator": "tests/golden/golden.py with PyTorch " + torch.__version__, "runs": []}
    for preset, batch, steps, lr, mom, wd, seed in RUNS:
        with tempfile.TemporaryDirectory() as d:
            exp = os.path.join(d, "export")
            subprocess.run([a.devgate, "--no-ledger", "train", "--model", preset, "--batch", str(batch),
                            "--steps", str(steps), "--lr", str(lr), "--momentum", str(mom),
                            "--weight-decay", str(wd), "--seed", str(seed), "--sync-every", "1",
                            "--export", exp], check=True, stdout=subprocess.DEVNULL)
            losses = trajectory(exp)
        out["runs"].append({"model": preset, "batch": batch, "steps": steps, "lr": lr, "momentum": mom,
                            "weight_decay": wd, "seed": seed, "losses": losses})
        print(preset, " ".join(f"{v:.5f}" for v in losses), file=sys.stderr)
    text = json.dumps(out, indent=1)
    if a.write:
        open(a.write, "w").write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
