#!/usr/bin/env python3
"""Where a forked trial's seconds go before its first optimizer step on CUDA
(issue 22: the H200's forked trials spent 4.2-4.5 s between "device init" and
the first step). A parent imports torch once, as devgate's fork server does,
then forks one child per round; each child times its start-up phase by phase,
the way fork_train.py meets them: CUDA context, the model's upload, the first
cuBLAS product, the first backward, the optimizers' first steps, a pinned
DataLoader's first batch with workers. The rounds rotate over settings:
"alone" (the parent imported torch only), "keeper" (another process holds a
CUDA context on the GPU throughout, which keeps the driver's per-GPU state
initialised when persistence mode is off) and "dynamo" (the parent also
imported torch._dynamo, which torch 2's first optimizer step imports).

    python3 bench/cuda_startup.py [--rounds 5] [--workers 2] [--settings alone,dynamo] [--json FILE]

Prints one line per child (seconds per phase) and the median per setting.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PHASES = ("context", "upload", "matmul", "backward", "optim", "loader", "total")


def child(workers):
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    t = {}
    t0 = last = time.perf_counter()

    def mark(name):
        nonlocal last
        torch.cuda.synchronize()
        now = time.perf_counter()
        t[name] = now - last
        last = now

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    mark("context")
    enc = nn.Sequential(nn.Linear(32, 512), nn.ReLU()).cuda()
    head = nn.Linear(512, 10).cuda()
    mark("upload")
    x = torch.randn(256, 32, device="cuda")
    y = torch.randint(0, 10, (256,), device="cuda")
    out = head(enc(x))
    mark("matmul")
    loss = nn.functional.cross_entropy(out, y)
    loss.backward()
    mark("backward")
    a = torch.optim.AdamW(enc.parameters(), lr=1e-3)
    s = torch.optim.SGD(head.parameters(), lr=1e-2, momentum=0.9)
    a.step()
    s.step()
    mark("optim")
    ds = TensorDataset(torch.randn(4096, 32), torch.randint(0, 10, (4096,)))
    dl = DataLoader(ds, batch_size=256, shuffle=True, num_workers=workers, pin_memory=True)
    xb, yb = next(iter(dl))
    xb.cuda(non_blocking=True)
    mark("loader")
    t["total"] = time.perf_counter() - t0
    return t


def one_round(workers):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            res = child(workers)
        except Exception as e:  # the round reports the failure, the bench goes on
            res = {"error": repr(e)}
        os.write(w, json.dumps(res).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        data += b
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data or b'{"error": "no answer"}')


KEEPER = "import torch, sys, time; torch.zeros(1, device='cuda'); print('ready', flush=True); sys.stdin.read()"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--settings", default="alone,keeper,dynamo")
    ap.add_argument("--json")
    args = ap.parse_args()
    settings = args.settings.split(",")
    try:
        pm = subprocess.run(["nvidia-smi", "--query-gpu=persistence_mode", "--format=csv,noheader"],
                            capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pm = "unknown"
    print("persistence mode: %s" % pm)
    t = time.perf_counter()
    import torch  # the parent's import, as the fork server's (before any device is initialised)
    print("parent: import torch %.2f s (torch %s, CUDA initialised: %s)" % (
        time.perf_counter() - t, torch.__version__, torch.cuda.is_initialized()))
    rows = {s: [] for s in settings}
    # torch._dynamo stays imported once imported: its rounds come after the others'.
    plan = [(i, s) for i in range(args.rounds) for s in settings if s != "dynamo"]
    plan += [(i, "dynamo") for i in range(args.rounds) if "dynamo" in settings]
    for i, setting in plan:
        keeper = None
        if setting == "keeper":
            keeper = subprocess.Popen([sys.executable, "-c", KEEPER], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
            keeper.stdout.readline()
        if setting == "dynamo":
            t = time.perf_counter()
            import torch._dynamo  # noqa: F401
            if "dynamo_import_s" not in rows:
                rows["dynamo_import_s"] = time.perf_counter() - t
                print("parent: import torch._dynamo %.2f s" % rows["dynamo_import_s"])
        res = one_round(args.workers)
        if keeper:
            keeper.stdin.close()
            keeper.wait()
        else:
            time.sleep(2)  # let the driver tear its state down, as between devgate's trials
        rows[setting].append(res)
        print("round %d %-6s %s" % (i, setting, res.get("error") or " ".join(
            "%s %.3f" % (p, res[p]) for p in PHASES)), flush=True)
    for setting in settings:
        rs = rows[setting]
        ok = [r for r in rs if "error" not in r]
        if ok:
            print("median %-6s %s (n=%d)" % (setting, " ".join(
                "%s %.3f" % (p, statistics.median(r[p] for r in ok)) for p in PHASES), len(ok)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"persistence_mode": pm, "rounds": rows}, f, indent=1)


if __name__ == "__main__":
    main()
