#!/usr/bin/env python3
"""A small regression trained with plain Python (no framework), the way a
quick experiment starts: argparse flags, a step loop that prints every step,
and an experiment tracker imported by name once the first epoch is done,
which is where a missing package fails the run."""
import argparse
import importlib
import random


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--tracker", default="wandb", help="module that logs the metrics")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    w, b = 0.0, 0.0
    tracker = None
    for epoch in range(args.epochs):
        for step in range(args.steps):
            x = rng.uniform(-1, 1)
            y = 3 * x + 1
            err = (w * x + b) - y
            w -= args.lr * err * x
            b -= args.lr * err
            print("epoch %d step %d loss %.4f" % (epoch, step, err * err), flush=True)
        if tracker is None:
            tracker = importlib.import_module(args.tracker)
        tracker.log({"epoch": epoch, "w": w, "b": b})


if __name__ == "__main__":
    main()
