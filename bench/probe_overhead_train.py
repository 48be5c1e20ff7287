#!/usr/bin/env python3
"""A Python-bound training loop, written the way people write theirs: a small
CNN at batch 64, an in-memory data set through a DataLoader, SGD, hundreds of
optimizer steps an epoch, the loss printed now and then. bench/probe_overhead.py
runs it plain, under `devgate run` and under `devgate run --probe off`.

It times each epoch (the loader's __iter__ to the last step, the device
synchronised at the end: the time a user waits for it), and the process's
CPU time over the same span (time.process_time: what the loop and every hook
in it spent, without the waits a busy machine adds), and writes
{"epochs_s": [...], "epochs_cpu_s": [...], "step_ms": median} as JSON to --result.

    python3 bench/probe_overhead_train.py --device cpu --epochs 4 --result out.json
"""
import argparse
import json
import statistics
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


class SmallCNN(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, width, 3, padding=1), torch.nn.BatchNorm2d(width), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(width, 2 * width, 3, padding=1), torch.nn.BatchNorm2d(2 * width), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1))
        self.head = torch.nn.Linear(2 * width, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def train_step(model, opt, dev, x, y):
    """One optimizer step on a batch; returns the loss (not read)."""
    x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--steps-per-epoch", type=int, default=300)
    ap.add_argument("--side", type=int, default=None, help="image side (default 16 on cpu, 32 on a device)")
    ap.add_argument("--width", type=int, default=None, help="channels (default 8 on cpu, 32 on a device)")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--print-every", type=int, default=100)
    ap.add_argument("--result", required=True)
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    side = a.side or (16 if dev.type == "cpu" else 32)
    width = a.width or (8 if dev.type == "cpu" else 32)
    model = SmallCNN(width).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    n = a.steps_per_epoch * a.batch_size
    data = TensorDataset(torch.randn(n, 3, side, side), torch.randint(0, 10, (n,)))
    loader = DataLoader(data, batch_size=a.batch_size, shuffle=True, num_workers=a.workers,
                        pin_memory=dev.type == "cuda")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    epochs, epochs_cpu, steps = [], [], []
    for epoch in range(a.epochs):
        model.train()
        t0, c0 = time.perf_counter(), time.process_time()
        for i, (x, y) in enumerate(loader):
            s0 = time.perf_counter()
            loss = train_step(model, opt, dev, x, y)
            steps.append(time.perf_counter() - s0)
            if a.print_every and i % a.print_every == 0:
                print("epoch %d step %d loss %.4f" % (epoch, i, loss.item()), flush=True)
        sync()
        epochs.append(time.perf_counter() - t0)
        epochs_cpu.append(time.process_time() - c0)
        print("epoch %d: %.3f s" % (epoch, epochs[-1]), flush=True)
    with open(a.result, "w") as f:
        json.dump({"epochs_s": epochs, "epochs_cpu_s": epochs_cpu, "step_ms": 1000.0 * statistics.median(steps)}, f)


if __name__ == "__main__":
    main()
