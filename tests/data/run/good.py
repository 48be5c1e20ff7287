"""A well-behaved program for `devgate run` tests: run_start, a gate, steps
with losses, 10 epoch_end events with flat memory, a fallback and run_end,
written to DEVGATE_EVENTS_FD. Standard library only.

Arguments: [--device NAME] [--bucket-res N] [--step-ms F] [--data-ms F] [--loss-scale F]"""
import json
import os
import sys
import time

args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
device = args.get("--device", "cpu")
res = int(args.get("--bucket-res", "32"))
step_ms = float(args.get("--step-ms", "2.0"))
data_ms = float(args.get("--data-ms", "0.2"))
loss_scale = float(args.get("--loss-scale", "1.0"))

fd = int(os.environ["DEVGATE_EVENTS_FD"])
out = os.fdopen(fd, "w", buffering=1)


def ev(_ev, **kw):
    kw.update(v=1, ev=_ev, t=time.time())
    out.write(json.dumps(kw) + "\n")


ev("run_start", framework={"name": "fake", "version": "0.0"}, device=device, batch=8,
   bucket={"resolution": res, "augment": "none", "batch": 8, "data": "synthetic"},
   seeds={"torch": 1, "numpy": 1, "random": 1, "workers": 0}, pid=os.getpid())
ev("gate", device=device, built=True, available=True, reason=None,
   matmul={"ok": True, "n": 64, "max_abs_err": 1e-6, "ms": 0.5})
ev("fallback", op="aten::foo", device=device, message="falling back to cpu")
ballast = []
for epoch in range(10):
    ev("phase", name="train", epoch=epoch)
    for step in range(5):
        ev("step", epoch=epoch, step=step, step_ms=step_ms + 0.01 * step, data_ms=data_ms,
           loss=loss_scale * (2.0 - 0.01 * (epoch * 5 + step)), synced=True)
    time.sleep(0.03)
    ev("epoch_end", epoch=epoch, allocated=100 << 20, reserved=128 << 20, max_allocated=110 << 20,
       driver=200 << 20, footprint=300 << 20, cache_emptied=True, validation=False)
ev("mystery", x=1)
ev("run_end", status="ok", message=None)
