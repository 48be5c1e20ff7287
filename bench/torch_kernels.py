#!/usr/bin/env python3
"""The CUDA kernels of PyTorch's training step for a fixture preset, as
bench/fixture_vs_torch.py runs it (same network, SGD with momentum, the
precision's flags), with their device time a step.

    python3 bench/torch_kernels.py --preset cifar --batch 1024 --precision bf16 [--top 20]

It runs the step eagerly under torch.profiler (CUDA graph replays hide their
kernels from it on some versions), 5 steps after 3 of warm-up, and prints one
line a kernel: microseconds a step, launches a step, the name; then the sum.
Read it beside `devgate profile --backend cuda --precision P` to see which side
spends its time where (the kernel count a step is what a graph saves least on).
"""
import argparse
import collections
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "golden"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="cifar")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="bf16")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile
    from golden import build
    from fixture_vs_torch import PRESETS

    torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    layers, shape = PRESETS[a.preset]
    torch.manual_seed(0)
    net = build(layers, shape).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(a.batch, *shape, device="cuda")
    y = torch.randint(0, 10, (a.batch,), device="cuda")
    ce = torch.nn.functional.cross_entropy

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = ce(net(x), y)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
    us, calls = collections.Counter(), collections.Counter()
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            name = ev.name[:110]
            us[name] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
            calls[name] += 1
    total = sum(us.values()) / a.steps
    print(f"# torch {torch.__version__} {a.preset} b{a.batch} {a.precision}: {total:.1f} us of kernels a step, "
          f"{sum(calls.values()) / a.steps:.0f} launches a step")
    for name, t in us.most_common(a.top):
        print(f"{t / a.steps:9.1f} us {calls[name] / a.steps:5.1f}x  {name}")


if __name__ == "__main__":
    main()
