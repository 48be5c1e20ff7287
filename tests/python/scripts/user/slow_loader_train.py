#!/usr/bin/env python3
"""A training script whose data path does the work: every sample is decoded
and augmented in __getitem__ (a few milliseconds of CPU each), with the
DataLoader's num_workers left at its default 0, so the step mostly waits for
its next batch. The model is small; the batch size and the workers come from
the command line."""
import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Decoded(Dataset):
    """Stands in for JPEG decoding and augmentation: CPU work per sample."""

    def __init__(self, n=640, cost_ms=1.5):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, 16, 16, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.cost = cost_ms / 1000

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        t = time.perf_counter()
        img = self.x[i]
        while time.perf_counter() - t < self.cost:  # the decoder's time
            img = img.flip(-1)
        return img, self.y[i]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    loader = DataLoader(Decoded(), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers)
    model = nn.Sequential(nn.Flatten(), nn.Linear(768, 32), nn.ReLU(), nn.Linear(32, 10))
    model.to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(loader):
            x, y = x.to(args.device), y.to(args.device)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print("epoch %d step %d loss %.4f" % (epoch, step, loss.item()), flush=True)


if __name__ == "__main__":
    main()
