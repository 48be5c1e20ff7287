#!/usr/bin/env python3
"""An ordinary PyTorch training script that knows nothing of devgate: the
zero-code probe's test subject (tests/cli/test_run_zero.sh). A small MLP on
seeded random data through a torch.utils.data.DataLoader, SGD, a validation
pass per epoch under torch.no_grad().

--mode picks the habit under test:
  healthy    nothing wrong: the loss is kept as a float every 8th step
  retain     every loss TENSOR is kept with its graph (and validation runs with
             autograd on): the footprint climbs epoch after epoch
  slow-data  __getitem__ sleeps --sleep-ms per sample: the step waits for data
  item       loss.item() every step (a host read, a sync point on a device)
--truth FILE writes what the script itself measured: samples trained, the
training loop's wall time and the time __getitem__ spent sleeping (measured
around the sleep, so a loaded machine's oversleep counts), for the test to
hold the probe's figures against.
"""

import argparse
import json
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    def __init__(self, n, inputs, classes, sleep_s, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, inputs, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)
        self.sleep_s = sleep_s
        self.slept = 0.0

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.sleep_s:
            t0 = time.perf_counter()
            time.sleep(self.sleep_s)
            self.slept += time.perf_counter() - t0  # what the sleep really took, load included
        return self.x[i], self.y[i]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", default="healthy", choices=("healthy", "retain", "slow-data", "item"))
    ap.add_argument("--epochs", type=int, default=11)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--sleep-ms", type=float, default=2.0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--truth", help="write the script's own measurements (JSON) here")
    args = ap.parse_args(argv)

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    inputs, classes = 128, 10
    sleep_s = args.sleep_ms / 1000.0 if args.mode == "slow-data" else 0.0
    train = Samples(args.steps * args.batch, inputs, classes, sleep_s, args.seed)
    val = Samples(4 * args.batch, inputs, classes, 0.0, args.seed + 1)
    loader = DataLoader(train, batch_size=args.batch, shuffle=True)
    val_loader = DataLoader(val, batch_size=args.batch)
    w = args.width
    model = torch.nn.Sequential(torch.nn.Linear(inputs, w), torch.nn.ReLU(), torch.nn.Linear(w, w),
                                torch.nn.ReLU(), torch.nn.Linear(w, w), torch.nn.ReLU(),
                                torch.nn.Linear(w, classes)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    kept, samples, loop_s, epoch_s = [], 0, 0.0, []
    for epoch in range(args.epochs):
        model.train()
        t0 = time.perf_counter()
        for i, (x, y) in enumerate(loader):
            x, y = x.to(dev), y.to(dev)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            samples += len(x)
            if args.mode == "retain":
                kept.append(loss)  # the tensor, with its graph
            elif args.mode == "item" or i % 8 == 0:
                kept.append(loss.item())
        epoch_s.append(time.perf_counter() - t0)
        loop_s += epoch_s[-1]
        model.eval()
        if args.mode == "retain":
            for x, y in val_loader:  # autograd on: each kept loss holds the whole graph
                kept.append(torch.nn.functional.cross_entropy(model(x.to(dev)), y.to(dev)))
        else:
            with torch.no_grad():
                for x, y in val_loader:
                    torch.nn.functional.cross_entropy(model(x.to(dev)), y.to(dev))
    if args.truth:
        with open(args.truth, "w") as f:
            json.dump({"samples": samples, "loop_s": loop_s, "epoch_s": epoch_s, "slept_s": train.slept}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
