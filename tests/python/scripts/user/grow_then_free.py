#!/usr/bin/env python3
"""Builds a cache of feature tensors while training, then writes a report and
frees everything before a slow shutdown (flushing logs, closing files)."""
import argparse
import time

import torch
import torch.nn as nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--exit-s", type=float, default=2.5)
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Linear(256, 256).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cache = []
    for step in range(args.steps):
        x = torch.randn(64, 256, device=args.device)
        out = model(x)
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        cache.append(torch.randn(1024, 1024))  # 4 MiB a step, never released until the end
        y = torch.randn(256, 256)
        for _ in range(8):  # some work per step, so the growth is spread over time
            y = torch.tanh(y @ y) * 0.5
        if step % 20 == 0:
            print("step %d cached %d" % (step, len(cache)))
    del cache
    import gc
    gc.collect()
    print("shutting down")
    time.sleep(args.exit_s)


if __name__ == "__main__":
    main()
