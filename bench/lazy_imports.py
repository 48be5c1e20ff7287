#!/usr/bin/env python3
"""What a forked training program's first steps import lazily, and what the
fork server's warm and learned imports save of it (issue 22; docs/accept.md,
"Fast trials: the fork server"). A parent imports torch and numpy, as devgate's
fork server does for a script that imports them, then forks one child per
round; each child runs a training loop's first steps phase by phase (the
device's context, the model's upload, forward, backward, the optimizers' first
steps, an LR scheduler, gradient clipping, autocast with a GradScaler, a
DataLoader's first batch with workers, a checkpoint) and reports each phase's
seconds and the modules it imported that the server could warm (submodules of
packages the parent holds: devgate_probe.forkserver's rule). The settings, in
order (an import cannot be undone):
  alone    the parent imported torch and numpy only
  warm     the parent then ran the fork server's warm step (LAZY_IMPORTS,
           checked in a checker child first)
  learned  the parent then warmed, the checked way, what the warm rounds'
           first child imported (the server's learned imports)

    python3 bench/lazy_imports.py [--device cuda] [--rounds 3] [--workers 2] [--json FILE]

Prints one line per child, the median per setting, and what each setting
imported, refused or failed.
"""
import argparse
import io
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
from devgate_probe import forkserver  # noqa: E402

PHASES = ("context", "upload", "forward", "backward", "optim", "adam", "sched", "clip", "amp",
          "loader", "save", "total")


def child(dev, workers, before):
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    t, new = {}, {}
    t0 = last = time.perf_counter()
    seen = set(before)
    cuda = dev == "cuda"

    def mark(name):
        nonlocal last
        if cuda:
            torch.cuda.synchronize()
        now = time.perf_counter()
        t[name] = now - last
        last = now
        got = [n for n, m in list(sys.modules.items())
               if n not in seen and forkserver._learnable(n, m, before, [])]
        seen.update(sys.modules)
        new[name] = got

    if cuda:
        torch.cuda.init()
        torch.zeros(1, device="cuda")
    mark("context")
    enc = nn.Sequential(nn.Linear(32, 512), nn.ReLU()).to(dev)
    head = nn.Linear(512, 10).to(dev)
    mark("upload")
    x, y = torch.randn(256, 32, device=dev), torch.randint(0, 10, (256,), device=dev)
    loss = nn.functional.cross_entropy(head(enc(x)), y)
    mark("forward")
    loss.backward()
    mark("backward")
    # The optimizers fork_train.py steps (AdamW, SGD with momentum), then Adam.
    a = torch.optim.AdamW(enc.parameters(), lr=1e-3)
    for opt in (a, torch.optim.SGD(head.parameters(), lr=1e-2, momentum=0.9)):
        opt.step()
    mark("optim")
    torch.optim.Adam(head.parameters(), lr=1e-3).step()
    mark("adam")
    sched = torch.optim.lr_scheduler.OneCycleLR(a, max_lr=1e-2, total_steps=100)
    a.step()
    sched.step()
    mark("sched")
    torch.nn.utils.clip_grad_norm_(enc.parameters(), 1.0)
    mark("clip")
    amp = getattr(torch, "amp", None)
    scaler = (amp.GradScaler(dev, enabled=cuda) if hasattr(amp, "GradScaler")
              else torch.cuda.amp.GradScaler(enabled=cuda))
    with torch.autocast(device_type=dev, dtype=torch.float16 if cuda else torch.bfloat16):
        loss = nn.functional.cross_entropy(head(enc(x)), y)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(a)
        scaler.update()
    mark("amp")
    ds = TensorDataset(torch.randn(4096, 32), torch.randint(0, 10, (4096,)))
    dl = DataLoader(ds, batch_size=256, shuffle=True, num_workers=workers, pin_memory=cuda)
    xb, _yb = next(iter(dl))
    xb.to(dev, non_blocking=True)
    mark("loader")
    buf = io.BytesIO()
    torch.save({"enc": enc.state_dict(), "opt": a.state_dict()}, buf)
    mark("save")
    t["total"] = time.perf_counter() - t0
    return {"s": t, "new": new}


def one_round(dev, workers):
    r, w = os.pipe()
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        before = set(sys.modules)
        try:
            res = child(dev, workers, before)
        except Exception as e:  # the round reports the failure, the bench goes on
            res = {"error": repr(e)}
        data = json.dumps(res).encode()
        while data:
            data = data[os.write(w, data):]
        os._exit(0)
    os.close(w)
    data = forkserver._read_all(r, time.monotonic() + 300)  # the checker child's reader
    os.close(r)
    if data is None:
        os.kill(pid, 9)
    os.waitpid(pid, 0)
    return json.loads(data or b'{"error": "no answer in 300 s"}')


def show(tag, w):
    print("%s: imported %s in %.2f s; refused %s; failed %s" % (
        tag, w.imported or "nothing", w.seconds, w.refused or "nothing", w.failed[:10] or "nothing"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    t = time.perf_counter()
    import numpy  # noqa: F401
    import torch
    print("parent: import torch, numpy %.2f s (torch %s, python %s)" % (
        time.perf_counter() - t, torch.__version__, sys.version.split()[0]))
    rows, lists = {}, {}
    warm = forkserver.Warmer([], [], None)
    learn = forkserver.Warmer([], [], None, tried=warm.tried)
    for setting in ("alone", "warm", "learned"):
        if setting == "warm":
            why = warm.warm(forkserver.warm_candidates())
            show("warm", warm)
            lists["warm"] = {"imported": warm.imported, "refused": warm.refused,
                             "failed": warm.failed, "s": warm.seconds, "unsafe_after": why}
        if setting == "learned":
            names = [n for ph in PHASES for n in rows["warm"][0].get("new", {}).get(ph, [])]
            why = learn.warm(names)
            show("learned", learn)
            lists["learned"] = {"offered": len(names), "imported": learn.imported,
                                "refused": learn.refused, "failed": learn.failed,
                                "s": learn.seconds, "unsafe_after": why}
        rows[setting] = []
        for i in range(args.rounds):
            res = one_round(args.device, args.workers)
            rows[setting].append(res)
            if "error" in res:
                print("round %d %-7s %s" % (i, setting, res["error"]), flush=True)
                continue
            print("round %d %-7s %s" % (i, setting, " ".join(
                "%s %.3f" % (p, res["s"][p]) for p in PHASES)), flush=True)
            if i == 0:
                for p in PHASES[:-1]:
                    got = res["new"].get(p) or []
                    if got:
                        print("   %-8s imported %d: %s%s" % (p, len(got), ", ".join(got[:12]),
                                                          " ..." if len(got) > 12 else ""))
            time.sleep(1)
    for setting, rs in rows.items():
        ok = [r for r in rs if "error" not in r]
        if ok:
            print("median %-7s %s (n=%d)" % (setting, " ".join(
                "%s %.3f" % (p, statistics.median(r["s"][p] for r in ok)) for p in PHASES), len(ok)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": rows, "warm": lists}, f, indent=1)


if __name__ == "__main__":
    main()
