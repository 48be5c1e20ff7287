#!/usr/bin/env python3
"""Train a small classifier and keep, after every step, the model's outputs
on a fixed batch of examples, to plot how its predictions move during
training (the outputs are kept as they come: tensors with their autograd
graph, so each step's activations on that batch stay alive)."""
import argparse
import random

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser(description="train, and plot the predictions' trajectory")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    torch.manual_seed(3)
    np.random.seed(3)
    random.seed(3)
    torch.set_num_threads(1)
    dev = args.device
    centres = torch.randn(10, 128) * 2
    labels = torch.arange(1536) % 10
    points = centres[labels] + torch.randn(1536, 128)
    train = DataLoader(TensorDataset(points, labels), batch_size=args.batch_size, shuffle=True)
    watch = points[:64].to(dev)  # the examples whose predictions are plotted
    h = args.hidden
    net = nn.Sequential(nn.Linear(128, h), nn.Tanh(), nn.Linear(h, h), nn.Tanh(), nn.Linear(h, 10))
    net = net.to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    trajectory = []
    for epoch in range(args.epochs):
        for i, (xb, yb) in enumerate(train):
            loss = criterion(net(xb.to(dev)), yb.to(dev))
            opt.zero_grad()
            loss.backward()
            opt.step()
            trajectory.append(net(watch).softmax(dim=1))  # for the plot
            print("epoch %d step %d loss %.4f" % (epoch, i, loss.item()))
    print("kept %d snapshots of the predictions" % len(trajectory))


if __name__ == "__main__":
    main()
