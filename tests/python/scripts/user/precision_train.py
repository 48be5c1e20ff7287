#!/usr/bin/env python3
"""Train a small classifier in the precision asked for (--dtype float32 or
bfloat16, as training scripts offer to save memory): the model and its inputs
cast, every random source seeded, the loss printed every ten steps."""
import argparse
import random

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    torch.set_num_threads(1)
    dev, dtype = torch.device(args.device), getattr(torch, args.dtype)
    x = torch.randn(512, 32)
    y = (x @ torch.randn(32, 10)).argmax(1)  # a rule the model can learn
    train = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True,
                       generator=torch.Generator().manual_seed(1))
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 10)).to(dev, dtype)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    step = 0
    for epoch in range(args.epochs):
        for xb, yb in train:
            xb, yb = xb.to(dev, dtype), yb.to(dev)
            loss = nn.functional.cross_entropy(model(xb).float(), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % 10 == 0:
                print("epoch %d step %d loss %.4f" % (epoch, step, loss.item()))


if __name__ == "__main__":
    main()
