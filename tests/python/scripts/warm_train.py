#!/usr/bin/env python3
"""A small training script whose first step imports modules lazily, for
tests/cli/test_accept_cmd_warm.sh: lazylib (installed, warm_site/ on
PYTHONPATH) at its top; at the first step lazylib.slow (1 s), lazylib.threads
(starts a thread) and its own warm_own.lazy, then marks what it sees of
LAZYLIB_CACHE (lazylib.slow sets it) as "env=VALUE". --pidlog FILE appends
"PID PPID"."""
import argparse
import os

import lazylib  # noqa: F401  (the installed package: the fork server imports it)
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    ap = argparse.ArgumentParser(description="a small regression")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--pidlog")
    args = ap.parse_args()
    if args.pidlog:
        with open(args.pidlog, "a") as f:
            f.write("%d %d\n" % (os.getpid(), os.getppid()))
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    loader = DataLoader(TensorDataset(torch.randn(2048, 16), torch.randn(2048, 1)),
                        batch_size=args.batch, shuffle=True)
    n = 0
    for epoch in range(args.epochs):
        for x, y in loader:
            if n == 0:
                import lazylib.slow  # noqa: F401
                import lazylib.threads  # noqa: F401
                import warm_own.lazy  # noqa: F401
                lazylib.mark("env=" + os.environ.get("LAZYLIB_CACHE", "unset"))
            n += 1
            x, y = x.to(args.device), y.to(args.device)
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print("epoch %d loss %.4f" % (epoch, loss.item()), flush=True)


if __name__ == "__main__":
    main()
