#!/usr/bin/env python3
"""A training script as people write theirs, for tests/cli/test_accept_cmd_fork.sh
and bench/fork_server.sh: argparse flags for the batch, the device and the
epochs, a seeded data set behind a DataLoader (--workers worker processes), an
encoder and a head with an optimizer each, a print every step. --pidlog FILE appends "PID PPID" of each run (the test checks that
the runs were forked from devgate's fork server); --crash-at N raises at the
Nth optimizer step, --segv-at N kills itself with SIGSEGV there; --io-ms adds
a wait per batch (a slow disk: the step rate is the wait's, whatever the load
of the machine); --log FILE writes each step's line to a log file opened at
the start and never closed (the interpreter's exit flushes it)."""
import argparse
import os
import signal
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    ap = argparse.ArgumentParser(description="a small classifier")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--io-ms", type=float, default=0.0)
    ap.add_argument("--pidlog")
    ap.add_argument("--log")
    ap.add_argument("--crash-at", type=int, default=0)
    ap.add_argument("--segv-at", type=int, default=0)
    args = ap.parse_args()
    if args.pidlog:
        with open(args.pidlog, "a") as f:
            f.write("%d %d\n" % (os.getpid(), os.getppid()))
    log = open(args.log, "w") if args.log else None
    np.random.seed(0)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dev = torch.device(args.device)
    x, y = torch.randn(args.samples, 32), torch.randint(0, 10, (args.samples,))
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch, shuffle=True,
                        num_workers=args.workers, pin_memory=dev.type == "cuda")
    encoder = nn.Sequential(nn.Linear(32, args.hidden), nn.ReLU()).to(dev)
    head = nn.Linear(args.hidden, 10).to(dev)
    opt_enc = torch.optim.AdamW(encoder.parameters(), lr=1e-3)
    opt_head = torch.optim.SGD(head.parameters(), lr=1e-2, momentum=0.9)
    n = 0
    for epoch in range(args.epochs):
        for xb, yb in loader:
            if args.io_ms:
                time.sleep(args.io_ms / 1e3)
            xb, yb = xb.to(dev), yb.to(dev)
            loss = nn.functional.cross_entropy(head(encoder(xb)), yb)
            opt_enc.zero_grad()
            opt_head.zero_grad()
            loss.backward()
            opt_enc.step()
            opt_head.step()
            n += 1
            print("epoch %d step %d loss %.4f" % (epoch, n, loss.item()), flush=True)
            if log:
                log.write("epoch %d step %d\n" % (epoch, n))
            if n == args.crash_at:
                raise RuntimeError("boom at step %d" % n)
            if n == args.segv_at:
                os.kill(os.getpid(), signal.SIGSEGV)


if __name__ == "__main__":
    main()
