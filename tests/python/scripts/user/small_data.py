#!/usr/bin/env python3
"""A classifier on a small labelled set (96 samples): the batch is an option,
so a batch sweep soon asks for more samples than there are; two optimizers
(the head's learning rate apart), DataLoader workers, a line every step."""
import argparse
import random

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Points(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 32, generator=g)
        self.y = (self.x[:, 0] > 0).long()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"features": self.x[i], "label": self.y[i]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=96)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dev = torch.device(args.device)
    loader = DataLoader(Points(args.samples, 1), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers, generator=torch.Generator().manual_seed(0))
    body = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU()).to(dev)
    head = nn.Linear(256, 2).to(dev)
    opt_body = torch.optim.SGD(body.parameters(), lr=0.05, momentum=0.9)
    opt_head = torch.optim.Adam(head.parameters(), lr=1e-3)
    step = 0
    for epoch in range(args.epochs):
        for batch in loader:
            xb, yb = batch["features"].to(dev), batch["label"].to(dev)
            loss = nn.functional.cross_entropy(head(body(xb)), yb)
            opt_body.zero_grad()
            opt_head.zero_grad()
            loss.backward()
            opt_body.step()
            opt_head.step()
            print("epoch %d step %d batch %d loss %.4f" % (epoch, step, len(yb), loss.item()))
            step += 1


if __name__ == "__main__":
    main()
