#!/usr/bin/env python3
"""Image-classifier style training with random augmentation in two DataLoader
workers. Seeds Python's random and numpy "for reproducibility" (torch is
forgotten)."""
import argparse
import random

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Noisy(Dataset):
    def __init__(self, n=512):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, 8, 8, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        img = self.x[i]
        if torch.rand(1).item() < 0.5:  # random flip
            img = img.flip(-1)
        img = img + 0.1 * torch.randn_like(img)  # random noise
        return img, self.y[i]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    random.seed(0)
    np.random.seed(0)
    torch.set_num_threads(1)
    loader = DataLoader(Noisy(), batch_size=64, shuffle=True, num_workers=args.workers)
    model = nn.Sequential(nn.Flatten(), nn.Linear(192, 64), nn.ReLU(), nn.Linear(64, 4)).to(args.device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        for i, (x, y) in enumerate(loader):
            x, y = x.to(args.device), y.to(args.device)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print("epoch %d step %d loss %.4f" % (epoch, i, loss.item()))


if __name__ == "__main__":
    main()
