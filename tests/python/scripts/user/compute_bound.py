#!/usr/bin/env python3
"""Fits a polynomial to noisy samples by plain gradient descent, in pure
Python: compute-bound on one core, no framework, a line every iteration."""
import argparse
import math
import random
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--points", type=int, default=400)
    parser.add_argument("--degree", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    rng = random.Random(0)
    xs = [rng.uniform(-1, 1) for _ in range(args.points)]
    ys = [math.sin(3 * x) + rng.gauss(0, 0.05) for x in xs]
    w = [0.0] * (args.degree + 1)
    end = time.monotonic() + args.seconds
    it = 0
    while time.monotonic() < end:
        grad = [0.0] * len(w)
        loss = 0.0
        for x, y in zip(xs, ys):
            powers = [x ** k for k in range(len(w))]
            err = sum(wk * p for wk, p in zip(w, powers)) - y
            loss += err * err
            for k, p in enumerate(powers):
                grad[k] += 2 * err * p
        w = [wk - args.lr * g / len(xs) for wk, g in zip(w, grad)]
        print("iter %d loss %.5f" % (it, loss / len(xs)))
        it += 1


if __name__ == "__main__":
    main()
