#!/usr/bin/env python3
"""What the zero-code probe costs a Python-bound training loop (issue 24:
at most 1%, with a 95% interval narrower than 2%).

Rounds (the default): bench/probe_overhead_train.py (a small CNN, batch 64,
hundreds of optimizer steps an epoch) run as three variants in interleaved
rounds, the order rotating every round: `plain` (python SCRIPT), `run`
(`devgate run --no-env -- python SCRIPT`: the zero-code probe, its events
read by devgate, the epoch end's collection and cache release) and `off`
(`devgate run --no-env --probe off`: devgate around the program without the
probe), and with --baseline a fourth, `before` (`run` through another
devgate binary and the probe beside it: a change's before and after in the
same rounds). Without --devgate, `run` is `python -m devgate_probe.auto` with its
events to /dev/null and `off` is left out. Each child's figure is its median
epoch after the first (the first holds the warm-up); a round's ratio is
run / plain (and off / plain) of that round. Rounds go on until the 95%
bootstrap interval of the median ratio is narrower than --width (after
--min-rounds), or --rounds.

Hooks (--hooks): each hook's body timed in one process with the probe armed
(events to /dev/null): the optimizer step hook and its parts (the memory
reading, the event's encoding and write), the DataLoader iteration hook,
the backward hook, a host read's hook, the epoch end (its collection, full
and young); their sum per step as a share of the loop's own step.
In situ (--insitu, with --devgate; with --baseline, runs of both binaries
alternating, each side's pairs pooled): one `devgate run` of the same loop whose
epochs alternate, in one process, between the probe reporting (its hooks,
its step events through devgate's pipe, the epoch end's collection) and the
probe standing by (st.active False: the hooks return at once, nothing is
sent); a pair's ratio is the reporting epoch over the standing-by one
(--untimed: without the per-hook timers, whose own cost is in the reporting
epochs). The
rounds of separate processes above carry the machine's process-to-process
noise (several % on a shared 2-core VM); epochs of one process do not. Each
hook's in-situ cost (mean us per call, timed around it in the loop, cold
caches and all) is printed beside.
Results: docs/evidence/cpu-probe-zero.log, docs/evidence/h200-probe-zero.log,
docs/evidence/cpu-probe-cost-20261202-s9.log.

    python3 bench/probe_overhead.py --devgate build/devgate --device cpu --threads 1
    python3 bench/probe_overhead.py --hooks --device cpu --threads 1
    python3 bench/probe_overhead.py --devgate DEVGATE --device cuda --rounds 30
    python3 bench/probe_overhead.py --devgate DEVGATE --insitu --device cpu --threads 1
"""
import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(os.path.dirname(HERE), "clients", "python")
TRAIN = os.path.join(HERE, "probe_overhead_train.py")


def child_env(probe_events):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVGATE_")}
    env["PYTHONPATH"] = CLIENT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if probe_events:  # python -m devgate_probe.auto without devgate: as devgate run would set it
        env.update(DEVGATE_EVENTS_FILE=os.devnull, DEVGATE_PROBE="auto", DEVGATE_PROBE_EMPTY_CACHE="1")
    return env


def run_variant(a, variant, work):
    result = os.path.join(work, "result-%s.json" % variant)
    train = [a.python, TRAIN, "--device", a.device, "--epochs", str(a.epochs), "--steps-per-epoch",
             str(a.steps), "--batch-size", str(a.batch), "--threads", str(a.threads), "--result", result]
    if variant == "plain":
        cmd = train
    elif a.devgate:
        probe = ["--probe", "off"] if variant == "off" else []
        cmd = [a.baseline if variant == "before" else a.devgate, "run", "--no-env", "--quiet", "-o", os.path.join(work, "pack"), *probe, "--", *train]
    else:
        cmd = [a.python, "-m", "devgate_probe.auto", *train[1:]]
    env = child_env(variant == "run" and not a.devgate)
    if a.devgate:
        env["DEVGATE_LEDGER"] = os.path.join(work, "ledger.db")
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=1800)
    if done.returncode != 0:
        sys.exit("probe_overhead: the %s child exited %d: %s" % (variant, done.returncode,
                                                               " | ".join(done.stderr.strip().splitlines()[-3:])))
    with open(result) as f:
        got = json.load(f)
    later = got["epochs_s"][1:] or got["epochs_s"]
    cpu = got.get("epochs_cpu_s") or [math.nan]
    return statistics.median(later), statistics.median(cpu[1:] or cpu)


def bootstrap(ratios, n=4000, seed=1):
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choice(ratios) for _ in ratios) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def interval_text(ratios):
    lo, hi = bootstrap(ratios)
    med = statistics.median(ratios)
    return "%+.2f%% (95%% interval %+.2f%% .. %+.2f%%, width %.2f%%)" % (
        100 * (med - 1), 100 * (lo - 1), 100 * (hi - 1), 100 * (hi - lo)), hi - lo


def rounds(a):
    variants = ["plain", "run"] + (["before"] if a.devgate and a.baseline else []) + (["off"] if a.devgate else [])
    got = {v: [] for v in variants}
    ratios = {v: [] for v in variants[1:]}
    cpu_ratios = {v: [] for v in variants[1:]}
    with tempfile.TemporaryDirectory(prefix="devgate-probe-overhead-") as work:
        for k in range(a.rounds):
            order = variants[k % len(variants):] + variants[:k % len(variants)]
            if (k // len(variants)) % 2:
                order.reverse()
            this, cpu = {}, {}
            for v in order:
                this[v], cpu[v] = run_variant(a, v, work)
            for v in variants:
                got[v].append(this[v])
            for v in ratios:
                ratios[v].append(this[v] / this["plain"])
                cpu_ratios[v].append(cpu[v] / cpu["plain"])
            print("round %d (%s, load %.2f): %s" % (k, " ".join(order), os.getloadavg()[0], ", ".join(
                "%s %.3f s" % (v, this[v]) for v in variants)) + "; " + ", ".join(
                "%s/plain %.4f" % (v, ratios[v][-1]) for v in ratios), flush=True)
            if k + 1 >= a.min_rounds and interval_text(ratios["run"])[1] < a.width:
                break
            if a.max_seconds and time.time() - a.t0 > a.max_seconds * (k + 2) / (k + 1):
                print("stopped: the next round would pass --max-seconds %g" % a.max_seconds)
                break
    print("device %s, batch %d, %d steps an epoch, median epoch after the first, %d rounds: %s" % (
        a.device, a.batch, a.steps, len(got["plain"]),
        ", ".join("%s %.3f s" % (v, statistics.median(got[v])) for v in variants)))
    for v in ratios:
        print("%s / plain: %s" % (v, interval_text(ratios[v])[0]))
    if "before" in ratios:  # the change itself, paired by round
        print("run / before: %s" % interval_text([r / b for r, b in zip(ratios["run"], ratios["before"])])[0])
    for v in ratios:  # the process's CPU time over the same epochs: without the waits a busy machine adds
        if all(math.isfinite(x) for x in cpu_ratios[v]):
            print("%s / plain, CPU time: %s" % (v, interval_text(cpu_ratios[v])[0]))
    print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())


HOOKS = r"""
import gc, json, os, statistics, sys, time
os.environ["DEVGATE_EVENTS_FILE"] = os.devnull
os.environ["DEVGATE_PROBE_EMPTY_CACHE"] = "1"
from devgate_probe import _zero, probe as P, _util as U
_zero.install()
import torch
from torch.utils.data import DataLoader, TensorDataset
device, batch, threads, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if threads > 0:
    torch.set_num_threads(threads)
sys.path.insert(0, sys.argv[5])
from probe_overhead_train import SmallCNN, train_step
dev = torch.device(device)
side, width = (16, 8) if dev.type == "cpu" else (32, 32)
model = SmallCNN(width).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
data = TensorDataset(torch.randn(n * batch, 3, side, side), torch.randint(0, 10, (n * batch,)))
loader = DataLoader(data, batch_size=batch)
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
st = _zero._state

def loop(active):
    st.active = active
    times = []
    for x, y in loader:
        t0 = time.perf_counter()
        loss = train_step(model, opt, dev, x, y)
        times.append(time.perf_counter() - t0)
    sync()
    st.active = True
    return statistics.median(times) * 1e6, loss

loop(True)  # warm-up; the probe has its device, the first step's gate is done
step_us, loss = loop(False)

def per_call(fn, calls=2000, reps=7):
    best = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best.append((time.perf_counter() - t0) / calls * 1e6)
    return min(best)

it = iter(loader)
xy = next(it)

def next_hook():  # the DataLoader __next__ wrapper's own work around the loader's
    if st.on():
        t0 = time.perf_counter()
        st.inside += 1
        st.inside -= 1
        st.on_next(it, (time.perf_counter() - t0) * 1000.0, xy, False)

fields = {"epoch": 0, "step": 1, "step_ms": 3.2, "data_ms": 0.1, "loss": None, "synced": False, "syncs": 0,
          "syncs_library": 0, "batch": batch, "allocated": 123456, "footprint": 123456789}
cpu_scalar = torch.ones(())
r = {"step_us": step_us, "device": device, "batch": batch}
r["step hook (whole, every step)"] = per_call(lambda: (st.on_step(opt), setattr(st, "pending_loss", [])))
st.mem_next = 0
r["  memory reading (device allocated + footprint)"] = per_call(lambda: st.step_memory({}, step_us / 1000.0))
r["    device allocated"] = per_call(lambda: P._allocated_now(torch, device))
r["    footprint (statm)"] = per_call(U.rss_bytes)
r["  step event: encoding + write"] = per_call(lambda: st.probe.emit_plain("step", fields))
r["    the same through emit's checks"] = per_call(lambda: st.probe.emit("step", **fields))
r["DataLoader hook (per batch)"] = per_call(next_hook)
r["backward hook"] = per_call(lambda: (st.on_backward(loss), st.pending_loss.clear()))
r["host read hook (cpu tensor .item)"] = per_call(cpu_scalar.item)
st.active = False
r["  .item with the probe standing by"] = per_call(cpu_scalar.item)
st.active = True
def epoch_end(kind):
    st.epoch_open = True
    st.gc_ms = None if kind == "full" else 1e9
    st.epoch_t0 = time.perf_counter() - 1.0
    t0 = time.perf_counter()
    st.close_epoch()
    return (time.perf_counter() - t0) * 1e6
r["epoch end, full collection"] = min(epoch_end("full") for _ in range(5))
r["epoch end, young collection"] = min(epoch_end("young") for _ in range(5))
print(json.dumps(r))
"""


INSITU = r"""
import json, os, statistics, sys, time
from devgate_probe import _zero, probe as P
import torch
from torch.utils.data import DataLoader, TensorDataset
device, batch, threads, n, pairs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
untimed = sys.argv[7] == "1"
if threads > 0:
    torch.set_num_threads(threads)
sys.path.insert(0, sys.argv[6])
from probe_overhead_train import SmallCNN, train_step
torch.manual_seed(0)
dev = torch.device(device)
side, width = (16, 8) if dev.type == "cpu" else (32, 32)
model = SmallCNN(width).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
data = TensorDataset(torch.randn(n * batch, 3, side, side), torch.randint(0, 10, (n * batch,)))
loader = DataLoader(data, batch_size=batch, shuffle=True, pin_memory=dev.type == "cuda")
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
st = _zero._state
spent = {}

def timed(obj, name, key):
    orig = getattr(obj, name)
    def hook(*a, **k):
        t0 = time.perf_counter()
        try:
            return orig(*a, **k)
        finally:
            c = spent.setdefault(key, [0, 0.0])
            c[0] += 1
            c[1] += time.perf_counter() - t0
    setattr(obj, name, hook)

def epoch():
    t0 = time.perf_counter()
    for x, y in loader:
        train_step(model, opt, dev, x, y)
    sync()
    return time.perf_counter() - t0

for _ in range(2):  # warm-up; the first epoch end's full collection
    epoch()
for key, obj, name in (("step hook", st, "on_step"), ("  memory reading", st, "step_memory"),
                       ("  step event (held)", st.probe, "hold" if hasattr(st.probe, "hold") else "emit_held"), ("DataLoader hook", st, "on_next"),
                       ("backward hook", st, "on_backward"), ("epoch end", st, "close_epoch")):
    if hasattr(obj, name) and not untimed:  # emit_held: not in an older probe
        timed(obj, name, key)
on, off = [], []
for k in range(pairs):
    for active in ((True, False) if k % 2 == 0 else (False, True)):
        st.active = active
        (on if active else off).append(epoch())
        st.active = True
print(json.dumps({"on": on, "off": off, "spent": spent}))
"""


def insitu_run(a, devgate):
    """One devgate run of INSITU through devgate (its own devgate_probe beside
    it): the pairs' ratios, the hooks' time and call counts, the events counts."""
    env = child_env(False)
    with tempfile.TemporaryDirectory(prefix="devgate-probe-insitu-") as work:
        env["DEVGATE_LEDGER"] = os.path.join(work, "ledger.db")
        cmd = [devgate, "run", "--no-env", "--quiet", "-o", os.path.join(work, "pack"), "--", a.python, "-c",
               INSITU, a.device, str(a.batch), str(a.threads), str(a.steps), str(a.rounds), HERE,
               "1" if a.untimed else "0"]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            sys.exit("probe_overhead: the in-situ run exited %d: %s" % (
                done.returncode, " | ".join(done.stderr.strip().splitlines()[-3:])))
        with open(os.path.join(work, "pack", "report.json")) as f:
            ev = json.load(f)["supervise"]["events"]
    r = json.loads([ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1])
    r["ratios"] = [x / y for x, y in zip(r["on"], r["off"])]
    r["events"] = ev
    return r


def insitu_report(a, name, runs):
    """Prints the runs of one devgate binary pooled: the pairs' ratio and
    each hook's in-situ cost."""
    ratios = [x for r in runs for x in r["ratios"]]
    on, off = [x for r in runs for x in r["on"]], [x for r in runs for x in r["off"]]
    spent = {}
    for r in runs:
        for k, (calls, sec) in r["spent"].items():
            c = spent.setdefault(k, [0, 0.0])
            c[0] += calls
            c[1] += sec
    steps = a.steps * len(on)
    print("%sdevice %s, batch %d, %d steps an epoch, %d pairs of epochs in %d devgate run(s): reporting %.3f s, "
          "standing by %.3f s (medians)" % (name, a.device, a.batch, a.steps, len(ratios), len(runs),
                                            statistics.median(on), statistics.median(off)))
    print("%sreporting / standing by: %s" % (name, interval_text(ratios)[0]))
    step_us = 1e6 * statistics.median(off) / a.steps
    order = ["step hook", "  memory reading", "  step event (held)", "DataLoader hook", "backward hook", "epoch end"]
    total = 0.0
    for key in sorted(spent, key=lambda k: order.index(k) if k in order else len(order)):
        calls, sec = spent[key]
        total += 0.0 if key.startswith(" ") else 1e6 * sec / steps
        print("  %-28s %6d calls %8.2f us a call %8.2f us a step  %6.3f%% of a step" % (
            key, calls, 1e6 * sec / max(calls, 1), 1e6 * sec / steps, 100.0 * 1e6 * sec / steps / step_us))
    if spent:
        print("  %-28s %6s       %8s         %8.2f us a step  %6.3f%% of a step (step %.0f us)" % (
            "the hooks together", "", "", total, 100.0 * total / step_us, step_us))
    for r in runs:
        ev = r["events"]
        print("  devgate read the events pipe %s times for %d lines" % (ev.get("drains", "(not counted)"), ev["lines"]))
    return ratios


def insitu(a):
    """--insitu: one devgate run (or --insitu-runs); with --baseline the
    baseline's runs alternate with these (A B B A ...), each side's pairs
    pooled, and the difference of the two medians with its interval."""
    if not a.devgate:
        sys.exit("probe_overhead: --insitu needs --devgate")
    n = a.insitu_runs or (2 if a.baseline else 1)
    runs = {"after": [], "before": []}
    for k in range(n):
        sides = ["after", "before"] if a.baseline else ["after"]
        for side in (sides if k % 2 == 0 else sides[::-1]):
            runs[side].append(insitu_run(a, a.baseline if side == "before" else a.devgate))
    if not a.baseline:
        insitu_report(a, "", runs["after"])
        return
    after = insitu_report(a, "after:  ", runs["after"])
    before = insitu_report(a, "before: ", runs["before"])
    rng = random.Random(2)
    diffs = sorted(statistics.median(rng.choice(after) for _ in after) -
                   statistics.median(rng.choice(before) for _ in before) for _ in range(4000))
    d = statistics.median(after) - statistics.median(before)
    print("after - before (reporting / standing by, pairs pooled): %+.2f points (95%% interval %+.2f .. %+.2f)" % (
        100 * d, 100 * diffs[100], 100 * diffs[3899]))
    # A run's median ratio varies from run to run by more than its pairs say (the
    # process's layout): the runs themselves as the samples.
    meds = {k: [statistics.median(r["ratios"]) for r in runs[k]] for k in runs}
    for k in ("after", "before"):
        print("%s runs' median ratios: %s" % (k, " ".join("%+.2f%%" % (100 * (m - 1)) for m in meds[k])))
    diffs = sorted(statistics.mean(rng.choice(meds["after"]) for _ in meds["after"]) -
                   statistics.mean(rng.choice(meds["before"]) for _ in meds["before"]) for _ in range(4000))
    d = statistics.mean(meds["after"]) - statistics.mean(meds["before"])
    print("after - before (mean of the runs' medians): %+.2f points (95%% interval %+.2f .. %+.2f, %d runs each)" % (
        100 * d, 100 * diffs[100], 100 * diffs[3899], n))


def hooks(a):
    env = child_env(False)
    done = subprocess.run([a.python, "-c", HOOKS, a.device, str(a.batch), str(a.threads), str(a.steps), HERE],
                          env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        sys.exit("probe_overhead: the hooks' child exited %d: %s" % (done.returncode,
                                                                   " | ".join(done.stderr.strip().splitlines()[-3:])))
    r = json.loads(done.stdout.strip().splitlines()[-1])
    step_us = r.pop("step_us")
    device, batch = r.pop("device"), r.pop("batch")
    print("device %s, batch %d: the loop's step %.1f us (median, probe standing by)" % (device, batch, step_us))
    for name, us in r.items():
        print("  %-50s %9.2f us  %6.3f%% of a step" % (name, us, 100.0 * us / step_us))
    every = r["step hook (whole, every step)"] + r["DataLoader hook (per batch)"] + r["backward hook"]
    print("every step pays the step, DataLoader and backward hooks: %.2f us = %.3f%% of the step" % (
        every, 100.0 * every / step_us))
    print("an epoch of %d steps pays its end once: young %.0f us = %.3f%%, full %.0f us = %.3f%% of the epoch" % (
        a.steps, r["epoch end, young collection"], 100.0 * r["epoch end, young collection"] / (a.steps * step_us),
        r["epoch end, full collection"], 100.0 * r["epoch end, full collection"] / (a.steps * step_us)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--devgate", default=None, help="the devgate binary (the run and off variants); "
                    "without it: python -m devgate_probe.auto against plain")
    ap.add_argument("--baseline", default=None, help="with --devgate: another devgate binary (with its own "
                    "devgate_probe beside it) whose run is a fourth variant, `before`, in the same rounds")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=300, help="optimizer steps an epoch")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    ap.add_argument("--rounds", type=int, default=40, help="at most this many rounds")
    ap.add_argument("--min-rounds", type=int, default=6)
    ap.add_argument("--width", type=float, default=0.02, help="stop once the run/plain interval is this narrow")
    ap.add_argument("--max-seconds", type=float, default=0, help="no round begun that would end past this")
    ap.add_argument("--hooks", action="store_true", help="time each hook's body instead")
    ap.add_argument("--insitu", action="store_true", help="with --devgate: --rounds pairs of epochs in one "
                    "devgate run, the probe reporting and standing by in turn; with --baseline, the baseline's "
                    "runs alternate with these")
    ap.add_argument("--insitu-runs", type=int, default=0, help="--insitu: devgate runs per binary "
                    "(default 1; 2 with --baseline)")
    ap.add_argument("--untimed", action="store_true", help="--insitu without the per-hook timers (their own "
                    "cost, a few us a hook call, is in the reporting epochs)")
    a = ap.parse_args()
    t0 = a.t0 = time.time()
    hooks(a) if a.hooks else insitu(a) if a.insitu else rounds(a)
    print("(%.0f s)" % (time.time() - t0))


if __name__ == "__main__":
    main()
