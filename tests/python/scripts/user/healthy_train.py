#!/usr/bin/env python3
"""A careful training script: everything seeded (workers too), the loss
accumulated on the device and read once per epoch, a validation pass."""
import argparse
import random

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def seed_worker(worker_id):
    s = torch.initial_seed() % 2 ** 32
    np.random.seed(s)
    random.seed(s)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    dev = torch.device(args.device)
    g = torch.Generator().manual_seed(args.seed)
    x, y = torch.randn(1024, 64), torch.randint(0, 10, (1024,))
    train = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, num_workers=args.workers,
                       worker_init_fn=seed_worker, generator=g)
    val = DataLoader(TensorDataset(x[:256], y[:256]), batch_size=128)
    model = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        model.train()
        total = torch.zeros((), device=dev)
        for xb, yb in train:
            xb, yb = xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach()
        model.eval()
        with torch.no_grad():
            correct = sum((model(xb.to(dev)).argmax(1) == yb.to(dev)).sum() for xb, yb in val)
        print("epoch %d loss %.4f acc %.3f" % (epoch, (total / len(train)).item(), correct.item() / 256))


if __name__ == "__main__":
    main()
