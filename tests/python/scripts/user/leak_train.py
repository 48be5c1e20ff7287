#!/usr/bin/env python3
"""Train a small classifier on synthetic data.

Keeps a history of the training and validation losses for plotting at the
end (as tensors: the habit that keeps every step's autograd graph alive; the
validation pass runs without torch.no_grad(), so each kept validation loss
holds its batch's activations too).
"""
import argparse
import random

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    device = torch.device(args.device)

    x = torch.randn(1536, 128)
    y = torch.randint(0, 10, (1536,))
    xv, yv = torch.randn(512, 128), torch.randint(0, 10, (512,))
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers)
    model = nn.Sequential(nn.Linear(128, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    history = []
    for epoch in range(args.epochs):
        model.train()
        for i, (xb, yb) in enumerate(loader):
            xb, yb = xb.to(device), yb.to(device)
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            history.append(loss)  # the leak: the tensor, with its graph
            print("epoch %d step %d" % (epoch, i))
        model.eval()
        for j in range(0, len(xv), args.batch_size):
            xb, yb = xv[j:j + args.batch_size].to(device), yv[j:j + args.batch_size].to(device)
            history.append(loss_fn(model(xb), yb))  # no torch.no_grad(): activations kept
    print("done, %d losses kept" % len(history))


if __name__ == "__main__":
    main()
