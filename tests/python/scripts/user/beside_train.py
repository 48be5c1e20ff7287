#!/usr/bin/env python3
"""A training job someone starts on the node that also serves: an MLP
classifier with a separate head, two optimizers (SGD for the body, Adam for
the head), a DataLoader with workers, a print every step. It trains until
--seconds have passed (or it is stopped), so it can run beside a server for
as long as a measurement takes."""
import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)

    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(4096, 256, generator=g)
    y = torch.randint(0, 10, (4096,), generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch, shuffle=True,
                        num_workers=args.workers, generator=g, drop_last=True)
    body = nn.Sequential(nn.Linear(256, args.width), nn.ReLU(),
                         nn.Linear(args.width, args.width), nn.ReLU(),
                         nn.Linear(args.width, args.width), nn.ReLU()).to(dev)
    head = nn.Linear(args.width, 10).to(dev)
    opt_body = torch.optim.SGD(body.parameters(), lr=0.01, momentum=0.9)
    opt_head = torch.optim.Adam(head.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    start = time.monotonic()
    step = 0
    epoch = 0
    while time.monotonic() - start < args.seconds:
        for xb, yb in loader:
            xb, yb = xb.to(dev), yb.to(dev)
            opt_body.zero_grad()
            opt_head.zero_grad()
            loss = loss_fn(head(body(xb)), yb)
            loss.backward()
            opt_body.step()
            opt_head.step()
            step += 1
            print("epoch %d step %d loss %.4f" % (epoch, step, loss.item()), flush=True)
            if time.monotonic() - start >= args.seconds:
                break
        epoch += 1
    print("trained %d steps in %.1f s" % (step, time.monotonic() - start), flush=True)


if __name__ == "__main__":
    main()
