"""devgate_probe: what a training program imports to report to `devgate run`.

Events follow docs/events.md (protocol version 1): JSON Lines on the descriptor
in DEVGATE_EVENTS_FD, appended to the file in DEVGATE_EVENTS_FILE, or nothing.
Pure standard library; torch and numpy are used when the program has them.

    import devgate_probe as dg
    worker_init_fn = dg.seed_everything(0)
    dg.run_start("cuda:0", batch=64)
    dg.gate("cuda:0")
    for e in range(epochs):
        with dg.epoch(e):
            for x, y in dg.timed_loader(loader):
                with dg.step() as s:
                    loss = train_step(x, y)
                    s.loss = float(loss) if want_it else None
    dg.run_end()

The module-level functions act on one default Probe (default_probe()); make
your own Probe(label=...) for more than one stream.
"""

import threading

from ._seed import WorkerSeeder, seed_everything
from ._util import PROTOCOL_VERSION, fallback_op, is_oom, oom_device
from .probe import Probe, footprint, peak_footprint

__version__ = "0.1.0"

_default = None
_default_lock = threading.Lock()


def default_probe():
    """The process's default Probe, created on first use (from the environment
    at that moment)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Probe()
        return _default


def _delegate(name):
    method = getattr(Probe, name)

    def call(*args, **kwargs):
        return getattr(default_probe(), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = method.__doc__
    return call


_METHODS = ("run_start", "run_end", "gate", "epoch", "epoch_end", "phase", "step", "step_begin", "step_end",
            "data_ready", "timed_loader", "oom", "fallback", "capture_fallbacks", "install_fallback_capture",
            "uninstall_fallback_capture", "sweep", "emit")
for _name in _METHODS:
    globals()[_name] = _delegate(_name)
del _name

__all__ = ["Probe", "default_probe", "seed_everything", "WorkerSeeder", "is_oom", "oom_device", "fallback_op",
           "footprint", "peak_footprint", "PROTOCOL_VERSION"] + list(_METHODS)
