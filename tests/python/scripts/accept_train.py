#!/usr/bin/env python3
"""An ordinary PyTorch training script, knowing nothing of devgate, for
`devgate accept -- CMD` (tests/cli/test_accept_cmd.sh): the batch, the device
and the epochs come from its own command line, as in most training scripts.

A linear-ReLU-linear model on a seeded data set of --features inputs per sample
through a torch.utils.data.DataLoader, SGD with momentum, --steps steps an
epoch. A batch holds batch x features x 4 bytes, so with a large --features
the memory a step needs grows with the batch (the test's memory budget cuts
the large batches off); with --hidden 1 and few --rows such a wide input
costs little compute or start-up. --vmpeak FILE writes the process's peak virtual size
(VmPeak) at exit, which the test uses to set that budget.
"""

import argparse
import sys

import torch
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    """n samples cycling over `rows` seeded base rows (cheap to make, any size)."""

    def __init__(self, n, features, classes, seed, rows=64):
        g = torch.Generator().manual_seed(seed)
        self.n = n
        self.rows = rows
        self.x = torch.randn(rows, features, generator=g)
        self.y = torch.randint(0, classes, (rows,), generator=g)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.x[i % self.rows], self.y[i % self.rows]


def vmpeak():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmPeak:"):
                return int(line.split()[1]) * 1024
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8, help="steps an epoch")
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", type=int, default=64, help="distinct samples the data cycles over")
    ap.add_argument("--gather", action="store_true", help="the loader yields sample indices and "
                    "each step gathers its batch from the data tensor (a tensor data set's fast "
                    "path: the copy is in the step, not in the loader)")
    ap.add_argument("--vmpeak", help="write the peak virtual size (bytes) here at exit")
    ap.add_argument("--fake-device", help="train on the cpu when --device is this name (a test "
                    "stand-in for a device this machine lacks)")
    args = ap.parse_args(argv)

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    dev = torch.device("cpu" if args.device == args.fake_device else args.device)
    classes = 10
    data = Samples(args.steps * args.batch, args.features, classes, args.seed, max(1, args.rows))
    if args.gather:
        loader = DataLoader(range(len(data)), batch_size=args.batch, shuffle=True)
    else:
        loader = DataLoader(data, batch_size=args.batch, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(args.features, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, classes)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    try:
        for epoch in range(args.epochs):
            model.train()
            for i, batch in enumerate(loader):
                if args.gather:
                    rows = batch % data.rows
                    x, y = data.x[rows], data.y[rows]
                else:
                    x, y = batch
                x, y = x.to(dev), y.to(dev)
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    finally:
        if args.vmpeak:
            with open(args.vmpeak, "w") as f:
                f.write("%d\n" % vmpeak())
    return 0


if __name__ == "__main__":
    sys.exit(main())
