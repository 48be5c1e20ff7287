#!/usr/bin/env python3
"""A stand-in training program for the sweep of `devgate accept -- CMD`
(tests/cli/test_accept_cmd_sweep.sh), without torch: each "step" sleeps for
a calibrated time and reports itself through devgate_probe's explicit API, so
a child costs the interpreter's start-up only and the throughput curve is
known in advance.

Step time = max(1, batch / plateau) x --base-ms, shortened by --gain per
doubling above --plateau: samples/s doubles with the batch up to --plateau,
then grows by only --gain (a fraction) per doubling: a throughput plateau.
Each step sleeps that time and reports it as its step_ms (the plan, not the
clock: a loaded machine's late wake-ups would blur the curve).
--kill-above B: at a batch above B the program SIGKILLs itself after its
first step (as the kernel's OOM killer would end it); with --oom-events FILE it
first adds one to the "oom_kill N" line of FILE (the stand-in for the
kernel's count that devgate reads through DEVGATE_OOM_EVENTS).
--alloc-above B --alloc-mib M: at a batch above B it touches M MiB (a real
out of memory under a cgroup's limit).

--fall-above B --fall-factor F: above batch B each doubling multiplies the
step time by F (F > 2: samples/s falls past the knee at B).
--slow-first N --slow-ms MS: the first N steps take MS each instead (a
framework's start-up, compile and allocator warm-up), for the run record's
headline rate (tests/cli/test_run_warmup.sh).
--data-ms MS: every other step reports MS of loader wait (not slept), for
the run record's profile.step.wall_stats (tests/cli/test_accept_cmd_sweep.sh).
--epoch-growth F: each epoch's steps take F times the previous epoch's (a
program slowing down, for the run record's slowing-down analysis:
tests/cli/test_method_contract.sh).
--cpu-ms MS: the base step time on --device cpu instead of --base-ms (a
planted cpu baseline for accept's compare pairs, as the fixture's
DEVGATE_PAIR_PLAN plants it: tests/cli/test_method_contract.sh).
--samples N: a data set of N samples: a step holds min(batch, N) (a loader
delivers a set smaller than the batch whole), and run_start says N
(loader.samples) unless --hide-size (an iterable data set without a length).
--loss: each step reports a loss, a planted curve 2.3 x 0.95^step (the same
on every device, as a seeded program's fp32 steps would be); --drift F: off
the cpu each step's loss is multiplied by 1 + F x (step + 1) / 8 (a device
training in another precision drifts step by step: accept -- CMD's loss
check, tests/cli/test_accept_cmd_loss.sh); --jitter F: every run multiplies
its losses by 1 + F x a draw of its own (an unseeded program).

The program stops by itself after DEVGATE_PROBE_MAX_STEPS steps (the zero-code
probe's knob, which an explicit-API program honours itself) or after --epochs
x --steps steps.
"""

import argparse
import math
import os
import random
import signal
import sys
import time

import devgate_probe


def sleep_until(deadline):
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return
        time.sleep(left if left > 0.002 else 0)


def bump(path):
    n = 0
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k == "oom_kill":
                    n = int(v)
    except OSError:
        pass
    with open(path + ".tmp", "w") as f:
        f.write("oom_kill %d\n" % (n + 1))
    os.replace(path + ".tmp", path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4, help="steps an epoch")
    ap.add_argument("--base-ms", type=float, default=40.0)
    ap.add_argument("--cpu-ms", type=float,
                    help="the base step time when --device cpu (default --base-ms)")
    ap.add_argument("--plateau", type=int, default=1 << 30)
    ap.add_argument("--gain", type=float, default=0.04)
    ap.add_argument("--kill-above", type=int)
    ap.add_argument("--oom-events")
    ap.add_argument("--alloc-above", type=int)
    ap.add_argument("--alloc-mib", type=int, default=0)
    ap.add_argument("--fall-above", type=int)
    ap.add_argument("--fall-factor", type=float, default=4.0)
    ap.add_argument("--slow-first", type=int, default=0)
    ap.add_argument("--slow-ms", type=float, default=0.0)
    ap.add_argument("--epoch-growth", type=float, default=1.0)
    ap.add_argument("--data-ms", type=float, default=0.0,
                    help="loader wait reported on every other step (not slept)")
    ap.add_argument("--samples", type=int, help="the data set's size (a step holds at most this)")
    ap.add_argument("--hide-size", action="store_true", help="run_start does not say --samples")
    ap.add_argument("--loss", action="store_true", help="report a planted loss curve each step")
    ap.add_argument("--drift", type=float, default=0.0,
                    help="off the cpu, the loss drifts by this share per 8 steps")
    ap.add_argument("--jitter", type=float, default=0.0,
                    help="the run's losses scaled by a draw of its own (unseeded)")
    args = ap.parse_args(argv)

    b = args.batch
    base_ms = args.cpu_ms if args.cpu_ms is not None and args.device == "cpu" else args.base_ms
    step_s = base_ms / 1000.0
    if b > args.plateau:
        doublings = math.log2(b / args.plateau)
        step_s *= (b / args.plateau) / (1.0 + args.gain) ** doublings
    if args.fall_above is not None and b > args.fall_above:
        step_s *= args.fall_factor ** math.log2(b / args.fall_above)
    max_steps = int(os.environ.get("DEVGATE_PROBE_MAX_STEPS") or 0) or None
    p = devgate_probe.Probe(label="sweep_train", device=args.device)
    held = min(b, args.samples) if args.samples else b
    loader = None
    if args.samples and not args.hide_size:
        loader = {"samples": args.samples, "batch_size": b, "drop_last": False,
                  "batches": -(-args.samples // b)}
    p.run_start(args.device, b, loader=loader)
    hog = None
    done = 0
    scale = 1.0 + args.jitter * random.SystemRandom().random()
    for epoch in range(args.epochs):
        with p.epoch(epoch, empty_cache=False):
            for i in range(args.steps):
                # The step sleeps its planned time and reports that time (not
                # the clock's reading), so the curve devgate sees does not
                # depend on how late a loaded machine wakes the sleeper.
                this_s = args.slow_ms / 1000.0 if done < args.slow_first else step_s
                this_s *= args.epoch_growth ** epoch
                sleep_until(time.perf_counter() + this_s)
                loss = None
                if args.loss:
                    loss = 2.3 * 0.95 ** done * scale
                    if args.device != "cpu":
                        loss *= 1.0 + args.drift * (done + 1) / 8.0
                p.emit("step", epoch=epoch, step=i, step_ms=this_s * 1000.0,
                       data_ms=args.data_ms if done % 2 else 0.0,
                       loss=loss, synced=False, batch=held)
                done += 1
                if args.kill_above is not None and b > args.kill_above:
                    if args.oom_events:
                        bump(args.oom_events)
                    os.kill(os.getpid(), signal.SIGKILL)
                if args.alloc_above is not None and b > args.alloc_above and hog is None:
                    hog = bytearray(args.alloc_mib << 20)
                    for i in range(0, len(hog), 4096):
                        hog[i] = 1
                if max_steps and done >= max_steps:
                    break
        if max_steps and done >= max_steps:
            break
    p.run_end("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
