#!/usr/bin/env python3
"""A torch-free training stand-in whose steps are timed by the clock (not
planned): each step sleeps --step-ms and adds a little arithmetic, inside
devgate_probe's explicit step context, so two runs of the same command differ
by the machine's real noise (tests/cli/test_compare_runs.sh: the same command
twice is no difference or inconclusive; --step-ms doubled is slower).

Arguments: --batch N --epochs N --steps N --step-ms F --seed N (the seed is
only reported, through run_start's seeds)."""
import argparse
import sys
import time

import devgate_probe


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--step-ms", type=float, default=40.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    p = devgate_probe.Probe(label="clock_train", device="cpu")
    p.run_start("cpu", args.batch, seeds={"torch": args.seed, "numpy": args.seed,
                                          "random": args.seed, "workers": 0})
    acc = 0.0
    for epoch in range(args.epochs):
        with p.epoch(epoch, empty_cache=False):
            for _ in range(args.steps):
                with p.step(batch=args.batch):
                    time.sleep(args.step_ms / 1000.0)
                    acc += sum(i * 0.5 for i in range(200))
    p.run_end("ok")
    return 0 if acc > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
