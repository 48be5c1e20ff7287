"""The zero-code probe: hooks that report an unmodified PyTorch program to
`devgate run` (docs/events.md, "The zero-code probe").

install() arms an import hook; when the program imports torch (or at once if
it already has), it patches:

- DataLoader.__iter__ and the loader iterator's __next__: epoch boundaries and
  the data wait, measured inside __next__ (a wait is outside the step: the
  step is the rest of the interval between two optimizer steps);
- the optimizer's step: step boundaries (the global step hooks on torch 2.x,
  a patch of each optimizer class's step on 1.13) and Optimizer.__init__ (the
  device of the parameters, and the device gate once, before training);
- host reads (sync points): Tensor.item, .tolist, .numpy, .cpu (from a device),
  torch.cuda.synchronize and torch.mps.synchronize, counted per step;
- device syncs: on a CUDA device with torch 2.x, CUDA's sync debug mode
  (torch.cuda.set_sync_debug_mode("warn")), whose "called a synchronizing CUDA
  operation" warnings are counted per step (and not shown, when the probe set
  the mode); elsewhere the run_start says why it is unavailable;
- the seeds the program sets (torch.manual_seed, random.seed, numpy.random.seed);
- PyTorch's MPS fallback warnings.

The hooks only read clocks and counters: they never synchronise the device
(the one exception is the gate's small product, run once when the first
optimizer is built, outside every step). At a training epoch's end they read
the allocator figures (no sync) and the process footprint;
DEVGATE_PROBE_EMPTY_CACHE=1 (devgate's default) also collects garbage and
empties the device cache there, and says so. The loss each primary optimizer
step follows (the tensors backward() ran on since the previous step) is kept
detached and read once at epoch end into epoch_end.losses.

Inactive (a no-op) when DEVGATE_EVENTS_FD / DEVGATE_EVENTS_FILE /
DEVGATE_EVENTS_PATH lead nowhere, in forked children (DataLoader workers), and
once the program uses the explicit API itself. A spawned child (a launcher's
worker, multiprocessing's spawn) arms it and reports only if it steps an
optimizer; the events channel reaches it by DEVGATE_EVENTS_PATH when its
parent closed the inherited descriptor.
"""

import gc
import os
import random
import sys
import threading
import warnings
import weakref
from math import isfinite
from time import perf_counter, time

from . import _window
from . import probe as _probe_mod
from ._util import FORGETS_AT_FORK, describe, loader_knobs, own_calls, split_device

_state = None
_install_lock = threading.Lock()

SYNC_WARNING = "called a synchronizing CUDA operation"  # CUDA sync debug mode's text (torch 2.x)
MEM_BUDGET = 0.002  # a step's memory reading may cost this share of the step...
MEM_FLOOR_MS = 0.005  # ...once it costs more than this (a cpu footprint's pread never does)
MEM_MAX_STRIDE = 32  # and is thinned to no fewer than one reading every 32 steps
GC_BUDGET = 0.005  # a full collection at an epoch end may cost this share of the epoch...
GC_GROWTH = 0.01  # ...or runs anyway when live memory grew this much since the last one
MAX_EPOCH_LOSSES = 1000  # losses kept per epoch (thinned to every 2nd, 4th... step beyond)


def sync_debug_arm(torch, device, environ=None):
    """Turns on CUDA's sync debug mode ("warn": every synchronizing CUDA
    operation raises a UserWarning) for the program's device, when it is a CUDA
    device and this torch has torch.cuda.set_sync_debug_mode (2.x; not 1.13).
    Returns {"state", "reason"}: "on" (the probe set it), "program" (the program
    had set it already: left as it is), "off" (DEVGATE_PROBE_SYNC_DEBUG=0), or
    "unavailable" with the reason. Never synchronises the device."""
    env = os.environ if environ is None else environ
    kind = split_device(device)[0]
    if kind != "cuda":
        return {"state": "unavailable",
                "reason": "device %s is not a CUDA device (sync debug mode is CUDA's)" % (device or "cpu")}
    if env.get("DEVGATE_PROBE_SYNC_DEBUG", "1") in ("0", "false", "no"):
        return {"state": "off", "reason": "DEVGATE_PROBE_SYNC_DEBUG=0"}
    cuda = getattr(torch, "cuda", None)
    setm, getm = getattr(cuda, "set_sync_debug_mode", None), getattr(cuda, "get_sync_debug_mode", None)
    if not callable(setm) or not callable(getm):
        return {"state": "unavailable", "reason": "torch %s has no torch.cuda.set_sync_debug_mode"
                % getattr(torch, "__version__", "?")}
    try:
        if getm():
            return {"state": "program", "reason": "the program set the mode itself: only the warnings "
                    "its filters let through are counted"}
        with warnings.catch_warnings():
            # torch warns that the mode is a prototype when it is set: the
            # probe's own doing, not the program's output.
            warnings.simplefilter("ignore")
            setm("warn")
        return {"state": "on", "reason": None}
    except Exception as e:
        return {"state": "unavailable", "reason": "set_sync_debug_mode failed (%s)" % describe(e)}


def _capture_sync_warnings(st, swallow):
    """Counts CUDA sync debug warnings into st.device_syncs (not the probe's
    own: st.inside). swallow: the probe set the mode, so the warnings are its
    own and are not shown; an "always" filter lets every one through (the
    default filter would show one per call site)."""
    if swallow:
        warnings.filterwarnings("always", message=SYNC_WARNING, category=UserWarning)
    prev = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        try:
            mine = SYNC_WARNING in str(message)
        except Exception:
            mine = False
        if mine:
            if st.active and not st.inside:
                st.device_syncs += 1
            if swallow:
                return None
        return prev(message, category, filename, lineno, file, line)

    showwarning._devgate = True
    warnings.showwarning = showwarning


def _batch_size(batch):
    """The leading dimension of the first tensor (or sequence) in a batch:
    a list or tuple whose first member has a shape (the usual (inputs,
    targets)) at once, anything else through _first_batch_size."""
    t = type(batch)
    if (t is list or t is tuple) and batch:
        shape = getattr(batch[0], "shape", None)
        if shape is not None:
            try:
                return int(shape[0]) if len(shape) else None
            except Exception:
                return None
    return _first_batch_size(batch)


def _batch_plan(loader):
    """(batch_size, samples) when the loader's batches are the default plan
    (its own BatchSampler over a sampler of known length, the default
    collate, batches in order): the i-th batch then holds min(batch_size,
    samples - i * batch_size), and on_next reads no batch's shape but the
    first one's (amid a loop's work reading a shape costs several us a
    step). None otherwise: each batch's shape is read."""
    try:
        from torch.utils.data import BatchSampler
        from torch.utils.data._utils.collate import default_collate
        bs = getattr(loader, "batch_sampler", None)
        if (type(bs) is not BatchSampler or getattr(loader, "collate_fn", None) is not default_collate
                or getattr(loader, "in_order", True) is not True):
            return None
        size, samples = int(bs.batch_size), len(bs.sampler)
        return (size, samples) if size > 0 and samples >= 0 else None
    except Exception:
        return None


def _first_batch_size(obj, depth=0):
    """The leading dimension of the first tensor (or sequence) in a batch."""
    if depth > 4:
        return None
    shape = getattr(obj, "shape", None)
    if shape is not None:
        try:
            return int(shape[0]) if len(shape) else None
        except Exception:
            return None
    if isinstance(obj, (list, tuple)):
        for x in obj:
            n = _first_batch_size(x, depth + 1)
            if n is not None:
                return n
        return None
    if isinstance(obj, dict):
        for x in obj.values():
            n = _first_batch_size(x, depth + 1)
            if n is not None:
                return n
    return None


_STEP_HEAD = '{"v":%d,"ev":"step","t":' % _probe_mod.PROTOCOL_VERSION


def _step_line(row, wall):
    """The line of a step row (_State.on_step's tuple), made when the held
    events are written: the step record's fields in their order (docs/events.md:
    v, ev, t, epoch, step, step_ms, data_ms, loss, synced, syncs,
    syncs_library, then batch, device_syncs, allocated and footprint where
    known), t its perf_counter stamp + wall (time.time() - perf_counter())."""
    _, stamp, t1, mark, data, samples, syncs, lib, dsyncs, epoch, step, mem = row
    step_ms = (t1 - mark) * 1000.0 - (data or 0.0)
    if not isfinite(step_ms):
        step_ms = None
    elif step_ms < 0.0:
        step_ms = 0.0
    line = ('%s%r,"epoch":%s,"step":%d,"step_ms":%s,"data_ms":%s,"loss":null,"synced":false,'
            '"syncs":%d,"syncs_library":%d' % (
                _STEP_HEAD, stamp + wall, epoch if epoch >= 0 else "null", step,
                "null" if step_ms is None else repr(step_ms),
                "null" if data is None or not isfinite(data) else repr(data), syncs, lib))
    if samples:
        line += ',"batch":%d' % samples
    if dsyncs is not None:
        line += ',"device_syncs":%d' % dsyncs
    if mem:
        for key in ("allocated", "footprint"):
            if mem.get(key) is not None:
                line += ',"%s":%d' % (key, mem[key])
    return line + "}"


def _stand_down(ref):
    st = ref()
    if st is not None:
        st.active = False


class _State:
    """Everything the hooks share. Only the main training thread is expected
    to drive steps; counters are plain ints (a lost increment in a racing
    thread costs one count, never a crash)."""

    def __init__(self, probe):
        self.probe = probe
        self.pid = os.getpid()
        self.active = True
        self.inside = 0  # > 0 while the probe itself calls torch: not the program's reads
        self.patched = False
        self.seeds = {}
        self.device = None
        self.primary_opt = None  # weakref to the optimizer whose steps are the steps
        self.steady = False  # run_start sent and the primary optimizer known: on_step's short way
        self.step_calls = 0  # optimizer steps the class wrappers counted (torch 1.13)
        self.gated = set()
        self.started = False
        self.train_loader = None  # weakref to the loader whose iterator saw the first step
        self.cur_loader = None  # weakref
        self.cur_iter = None  # weakref
        self.batch_plan = None  # (batch_size, samples) of the current loader's epoch (_batch_plan)
        self.batch_i = 0  # the batches it gave so far
        self.epoch = -1
        self.epoch_open = False  # a training epoch began and has not been sent
        self.epoch_has_validation = False
        self.step_index = 0
        # The interval since the last optimizer step: its start, the data wait
        # in it (None: no batch came through a DataLoader), its samples (None:
        # a batch of unknown size came) and host reads.
        self.mark = perf_counter()
        self.data_ms = None
        self.samples = 0
        self.syncs = 0
        self.syncs_library = 0  # of syncs, reads made by a library's code (torch, site-packages)
        self.device_syncs = 0
        self.pending_loss = []  # tensors backward() ran on since the last optimizer step (detached)
        self.epoch_losses = []  # (step, [tensors]) of the open epoch, thinned by loss_stride
        self.loss_stride = 1
        self.loader_info = None  # the training loader's seeding facts (run_start.seeds.loader)
        self.loader_knobs = None  # its settings and the options that set them (run_start.loader)
        self.sync_debug = None  # sync_debug_arm's answer, once the device is known
        self.count_device_syncs = False  # the mode is on: each step says its device_syncs
        self.torch = None  # the module _patch_torch patched
        self.batch_hint = None
        self.dataset_name = None
        self.empty_cache = os.environ.get("DEVGATE_PROBE_EMPTY_CACHE", "") in ("1", "true", "yes")
        self.keep_loss = os.environ.get("DEVGATE_PROBE_LOSS", "1") not in ("0", "false", "no")
        try:  # a memory reading every N steps (0: none); the quick tier's leak screen reads them
            self.mem_every = max(0, int(os.environ.get("DEVGATE_PROBE_MEM_EVERY", "1")))
        except ValueError:
            self.mem_every = 1
        self.mem_next = 0  # the step of the next memory reading
        self.epoch_t0 = perf_counter()  # when the open training epoch began
        self.gc_ms = None  # the last full collection's cost
        self.gc_base = (None, None)  # live memory after it (allocated, footprint)
        self.gate_on = os.environ.get("DEVGATE_PROBE_GATE", "1") not in ("0", "false", "no")
        self.window = _window.Window()  # devgate accept's knobs: stop after N steps, profile
        self.lock = threading.Lock()
        # The run's timeline (run_start.marks, wall-clock s): the program's own
        # code starts now; a fork server's child brought its fork's marks.
        self.marks = dict(getattr(sys.modules.get(__package__), "_fork_marks", None) or {})
        self.marks["main"] = time()
        if FORGETS_AT_FORK:  # a forked child (a DataLoader worker) stands down at the fork
            ref = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: _stand_down(ref))

    # ---- activity ------------------------------------------------------------
    def on(self):
        """True while the hooks report. Called by every hook on every step, so
        no system call: a forked child was stood down at the fork (getpid()
        only where os.register_at_fork is missing)."""
        if not self.active or self.inside:
            return False
        if _probe_mod._explicit_used:
            self.active = False  # the program reports itself: stand down
            return False
        if not FORGETS_AT_FORK and os.getpid() != self.pid:
            self.active = False
            return False
        return self.probe._out is not None

    # ---- run -----------------------------------------------------------------------
    def start(self):
        if self.started:
            return
        self.started = True
        bucket = {"data": self.dataset_name, "batch": self.batch_hint, "script": _script_name()}
        seeds = self.seed_facts()
        if self.sync_debug is None:
            self.arm_sync_debug()
        self.inside += 1
        try:
            self.probe.run_start(self.device or "cpu", self.batch_hint, bucket=bucket, seeds=seeds,
                                 probe="auto", sync_debug=self.sync_debug, loader=self.loader_knobs,
                                 marks=self.marks)
        finally:
            self.inside -= 1

    def seed_facts(self):
        """run_start.seeds: the seeds the program set (a source it did not
        seed is null), which sources it seeded (`seeded`), and how the training
        loader's workers and shuffling are seeded (`loader`)."""
        seeds = {k: self.seeds.get(k) for k in ("torch", "numpy", "random")}
        seeds["workers"] = None
        hs = os.environ.get("PYTHONHASHSEED")
        seeds["python_hash"] = int(hs) if hs and hs.isdigit() else None
        seeds["seeded"] = {k: k in self.seeds for k in ("torch", "numpy", "random")}
        seeds["loader"] = self.loader_info
        return seeds

    def note_loader(self, loader):
        """The training loader's seeding facts: its workers, whether it
        shuffles, and whether a worker_init_fn or its own generator seeds them."""
        try:
            sampler = getattr(loader, "sampler", None)
            shuffle = type(sampler).__name__ == "RandomSampler"
            gen = getattr(loader, "generator", None)
            if gen is None and sampler is not None:
                gen = getattr(sampler, "generator", None)
            self.loader_info = {"workers": int(getattr(loader, "num_workers", 0) or 0),
                                "shuffle": bool(shuffle),
                                "worker_init_fn": getattr(loader, "worker_init_fn", None) is not None,
                                "generator": gen is not None}
        except Exception:
            self.loader_info = None
        try:
            self.loader_knobs = loader_knobs(loader)
        except Exception:
            self.loader_knobs = None

    def on_backward(self, tensor):
        """backward() ran on tensor: a one-element one is the loss the next
        optimizer step follows (kept detached; read at epoch end, never here).
        Not on a step the epoch's thinning leaves out (the stride only doubles)."""
        if self.step_index % self.loss_stride:
            return
        try:
            if tensor.numel() == 1:
                self.pending_loss.append(tensor.detach())
        except Exception:
            pass

    def keep_step_loss(self, step):
        pend, self.pending_loss = self.pending_loss, []
        if not pend or not self.keep_loss or step % self.loss_stride:
            return
        self.epoch_losses.append((step, pend))
        if len(self.epoch_losses) > MAX_EPOCH_LOSSES:  # thin: every other kept step
            self.loss_stride *= 2
            self.epoch_losses = [e for e in self.epoch_losses if e[0] % self.loss_stride == 0]

    def read_losses(self, torch):
        """The open epoch's kept losses as [[step, loss]]: one host read at
        epoch end (the sum of the losses backward() ran on before each step)."""
        kept, self.epoch_losses, self.loss_stride = self.epoch_losses, [], 1
        if not kept or torch is None:
            return None
        flat = [t for _, ts in kept for t in ts]
        try:  # one stack of the scalars as they are (the usual case)...
            vals = torch.stack(flat).reshape(-1).float().cpu().tolist()
            if len(vals) != len(flat):
                raise ValueError("not one value each")
        except Exception:
            try:  # ...each made a 0-d float first where shapes or types differ
                vals = torch.stack([t.reshape(()).float() for t in flat]).cpu().tolist()
            except Exception:
                return None
        out, i = [], 0
        for step, ts in kept:
            v = sum(vals[i:i + len(ts)])
            i += len(ts)
            out.append([step, v if v == v and abs(v) != float("inf") else None])
        return out

    def arm_sync_debug(self):
        """CUDA's sync debug mode for the program's device (once)."""
        if self.sync_debug is not None:
            return
        torch = self.torch if self.torch is not None else sys.modules.get("torch")
        self.inside += 1
        try:
            self.sync_debug = sync_debug_arm(torch, self.device)
            if self.sync_debug["state"] in ("on", "program"):
                _capture_sync_warnings(self, self.sync_debug["state"] == "on")
                self.count_device_syncs = True
        except Exception as e:
            self.sync_debug = {"state": "unavailable", "reason": "arming failed (%s)" % describe(e)}
        finally:
            self.inside -= 1

    def gate(self, device):
        if not self.gate_on or device in self.gated:
            return
        self.gated.add(device)
        with own_calls(self):
            try:
                self.probe.gate(device)
            except Exception:
                pass

    # ---- epochs --------------------------------------------------------------------
    def close_epoch(self, at_exit=False):
        """Sends the open training epoch's epoch_end (memory read now). At the
        interpreter's exit the program has already let go of its objects (a
        leak's list with them), so memory is not reported for that epoch:
        a reading of a torn-down program would hide the growth before it."""
        if not self.epoch_open:
            return
        self.epoch_open = False
        torch = sys.modules.get("torch")
        device = self.device or "cpu"
        emptied = False
        losses = None
        collected = None
        with own_calls(self):
            try:
                losses = self.read_losses(torch)
            except Exception:
                losses = None
            try:
                kind = split_device(device)[0]
                if self.empty_cache:
                    collected = self.collect(torch, device)
                if kind == "cpu":
                    emptied = True  # the cpu allocator keeps no cache to empty
                elif self.empty_cache:
                    emptied = _probe_mod._empty_cache(torch, device)
                alloc, reserved, max_alloc, driver = _probe_mod._device_memory(torch, device)
                if at_exit:
                    alloc = reserved = max_alloc = driver = None
            except Exception:
                alloc = reserved = max_alloc = driver = None
        # Plain values (read_losses' are finite or None): encoded as they are.
        self.probe.emit_plain("epoch_end", {
            "epoch": self.epoch, "allocated": alloc, "reserved": reserved, "max_allocated": max_alloc,
            "driver": driver, "footprint": None if at_exit else _probe_mod.rss_bytes(),
            "cache_emptied": bool(emptied), "validation": bool(self.epoch_has_validation),
            "losses": losses, "gc": collected})

    def collect(self, torch, device):
        """The epoch end's garbage collection; returns "full" or "young". A
        full collection costs tens of ms with torch loaded (all its module
        objects scanned), several % of a short epoch: it runs at the first
        epoch end, whenever it cost at most GC_BUDGET of the epoch, and
        whenever the live memory (device allocated, footprint) stands more
        than GC_GROWTH above its reading after the last full one, so memory
        that grows is always read after a full collection. Otherwise only
        the young generations are collected (microseconds)."""
        epoch_ms = (perf_counter() - self.epoch_t0) * 1000.0
        full = self.gc_ms is None or self.gc_ms <= GC_BUDGET * epoch_ms
        if not full:
            now = self.live_memory(torch, device)
            full = any(b and v is not None and v > b * (1.0 + GC_GROWTH) for v, b in zip(now, self.gc_base))
        if not full:
            gc.collect(1)
            return "young"
        t0 = perf_counter()
        gc.collect()
        self.gc_ms = (perf_counter() - t0) * 1000.0
        self.gc_base = self.live_memory(torch, device)
        return "full"

    def live_memory(self, torch, device):
        return (_probe_mod._allocated_now(torch, device), _probe_mod.rss_bytes())

    def reset_interval(self):
        """A new epoch's interval: its wait and samples from its start (host
        reads after the last epoch's last step count toward the next step)."""
        self.mark = perf_counter()
        self.data_ms = None
        self.samples = 0

    def on_iter(self, loader, it):
        """DataLoader.__iter__ returned it."""
        train = self.train_loader() if self.train_loader is not None else None
        if train is None or loader is train:
            if self.epoch_open:
                self.close_epoch()
            self.cur_loader = weakref.ref(loader)
            self.cur_iter = weakref.ref(it)
            self.batch_plan, self.batch_i = _batch_plan(loader), 0
            self.reset_interval()
            self.epoch_t0 = self.mark
            if train is not None:
                self.epoch += 1
                self.epoch_open = True
                self.epoch_has_validation = False
                self.step_index = 0
                self.mem_next = 0
            if self.batch_hint is None:
                self.batch_hint = getattr(loader, "batch_size", None)
            if self.loader_info is None:
                self.note_loader(loader)
            if self.dataset_name is None:
                ds = getattr(loader, "dataset", None)
                self.dataset_name = type(ds).__name__ if ds is not None else None
        else:
            self.epoch_has_validation = True  # another loader: validation, test...

    def on_next(self, it, wait_ms, batch, ended):
        cur = self.cur_iter() if self.cur_iter is not None else None
        if it is not cur:
            return
        if ended:
            return
        d = self.data_ms
        self.data_ms = wait_ms if d is None else d + wait_ms
        plan, i = self.batch_plan, self.batch_i
        if plan is None:
            n = _batch_size(batch)
        else:  # the i-th batch of the loader's plan; the first is checked against the batch itself
            self.batch_i = i + 1
            n = min(plan[0], plan[1] - i * plan[0])
            if i == 0 and _batch_size(batch) != n:
                self.batch_plan, n = None, _batch_size(batch)
        have = self.samples
        self.samples = None if n is None or have is None else have + n

    # ---- steps ---------------------------------------------------------------------
    def on_optimizer(self, opt):
        if self.device is None:
            try:
                for g in opt.param_groups:
                    for p in g["params"]:
                        self.device = str(p.device)
                        break
                    if self.device:
                        break
            except Exception:
                pass
            if self.device is not None:
                self.gate(self.device)  # before the mode is on: the gate's own sync is not counted
                self.arm_sync_debug()

    def on_step(self, opt):
        """The primary optimizer stepped: the step's record, held as a row
        (_step_line makes its line when the held events are written). The
        short way, every step once run_start went, is one clock read at each
        end, a tuple and a few counters reset: amid a training loop's work
        every operation here costs several times its cost in a tight loop."""
        t1 = stamp = perf_counter()
        if not self.steady or self.primary_opt() is not opt:
            if not self.settle(opt):
                return
            stamp = perf_counter()  # its t after the run_start settle may have sent
        step = self.step_index
        mem = None
        if step >= self.mem_next and self.mem_every:
            mem = {}
            self.step_memory(mem, (t1 - self.mark) * 1000.0)
        self.probe.hold((_step_line, stamp, t1, self.mark, self.data_ms, self.samples, self.syncs,
                         self.syncs_library, self.device_syncs if self.count_device_syncs else None,
                         self.epoch, step, mem), t1)
        if self.pending_loss:
            self.keep_step_loss(step)
        data, interval = self.data_ms, (t1 - self.mark) * 1000.0
        self.step_index = step + 1
        self.data_ms = None
        self.samples = self.syncs = self.syncs_library = self.device_syncs = 0
        self.mark = perf_counter()  # the probe's own time is in no step
        if self.window.wanted:
            self.window.after_step(self, data, interval)  # may raise SystemExit(_window.STOP_CODE)

    def settle(self, opt):
        """on_step's long way: the first step (the primary optimizer, the
        training loader, run_start), a second optimizer's step (not a step:
        False), a loader that came after the first step. True when opt's step
        is a step."""
        prim = self.primary_opt() if self.primary_opt is not None else None
        if prim is None:
            self.primary_opt = weakref.ref(opt)
            self.on_optimizer(opt)
        elif opt is not prim:
            self.pending_loss = []  # its losses are not the primary step's
            return False  # a second optimizer (GAN, multi-task): the first one's steps are the steps
        if self.train_loader is None and self.cur_loader is not None:
            loader = self.cur_loader()
            if loader is not None:
                self.train_loader = weakref.ref(loader)
                self.note_loader(loader)
                self.epoch = 0
                self.epoch_open = True
                self.epoch_has_validation = False
        self.start()
        # A loader may still come (the first steps ran on batches of the program's own).
        self.steady = self.train_loader is not None
        return True

    def step_memory(self, fields, interval_ms):
        """The step's memory after the optimizer stepped: the device's live
        (allocated) bytes and the process footprint. Counters only, no sync
        and no collection: the leak screen of a short soak fits a line
        through them (devgate's soak.step_growth; a reading's step is its
        position, so a step without one is simply left out). Read every
        mem_every-th step, and thinned further when a reading costs more
        than MEM_FLOOR_MS and more than MEM_BUDGET of the step."""
        torch = self.torch if self.torch is not None else sys.modules.get("torch")
        self.inside += 1
        t0 = perf_counter()
        try:
            alloc = _probe_mod._allocated_now(torch, self.device or "cpu")
            if alloc is not None:
                fields["allocated"] = alloc
            fp = _probe_mod.rss_bytes()
            if fp is not None:
                fields["footprint"] = fp
        except Exception:
            pass
        finally:
            self.inside -= 1
        cost_ms = (perf_counter() - t0) * 1000.0
        stride = self.mem_every
        if cost_ms > MEM_FLOOR_MS and interval_ms > 0:
            stride = max(stride, min(MEM_MAX_STRIDE, int(cost_ms / (MEM_BUDGET * interval_ms)) + 1))
        self.mem_next = self.step_index + stride

    def stop(self, n, why="steps", words=None):
        """The clean stop devgate's knobs ask for (_window.STOP_WORDS): the
        epoch's memory, run_end "stopped" with its stop, then the probe stands
        down."""
        self.close_epoch()
        self.probe.run_end("stopped", "stopped by devgate " + (
            words or "after %d optimizer steps (DEVGATE_PROBE_MAX_STEPS)" % n), stop=why)
        self.active = False

    def finish(self):
        if not self.on():
            return
        if self.train_loader is not None:
            self.close_epoch(at_exit=True)


def _script_name():
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv else None)
    return os.path.basename(path) if path else None


# ---- patches ------------------------------------------------------------------------

_LIB_MARKS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


def _library_frame(depth):
    """True when the code depth frames up is a library's (torch itself, or a
    package under site-packages), not the program's own."""
    try:
        fn = sys._getframe(depth).f_code.co_filename
    except Exception:
        return False
    if fn.startswith(_TORCH_DIR[0]) if _TORCH_DIR[0] else False:
        return True
    return any(m in fn for m in _LIB_MARKS)


_TORCH_DIR = [None]


def _count_read(st, depth):
    st.syncs += 1
    if _library_frame(depth + 1):
        st.syncs_library += 1


def _on_device(t):
    try:
        return t.device.type != "cpu"
    except Exception:
        return False


def _patch_tensor(torch, st):
    """Host reads: a read of a device tensor's values (.item, .tolist,
    .numpy, .cpu) or an explicit synchronize is a sync point; a read of a cpu
    tensor (an optimizer's step counter, a metric on the host) waits for
    nothing and is not counted. Each one is attributed to the program or to a
    library by the frame that called it."""
    T = torch.Tensor
    try:
        _TORCH_DIR[0] = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    except Exception:
        pass

    def wrap_read(name):
        orig = getattr(T, name, None)
        if orig is None or getattr(orig, "_devgate", False):
            return

        def hooked(self, *a, **k):
            if st.active and not st.inside and _on_device(self):
                _count_read(st, 2)
            return orig(self, *a, **k)

        hooked._devgate = True
        hooked.__name__ = name
        hooked.__doc__ = getattr(orig, "__doc__", None)
        setattr(T, name, hooked)

    for name in ("item", "tolist", "numpy", "cpu"):
        wrap_read(name)
    for modname in ("cuda", "mps"):
        mod = getattr(torch, modname, None)
        orig = getattr(mod, "synchronize", None)
        if orig is None or getattr(orig, "_devgate", False):
            continue

        def make(orig):
            def synchronize(*a, **k):
                if st.active and not st.inside:
                    _count_read(st, 2)
                return orig(*a, **k)
            synchronize._devgate = True
            synchronize.__doc__ = getattr(orig, "__doc__", None)
            return synchronize

        try:
            setattr(mod, "synchronize", make(orig))
        except Exception:
            pass


def _patch_backward(torch, st):
    """torch.autograd.backward (Tensor.backward calls it): the loss tensor the
    next optimizer step follows, kept without reading it."""
    ag = torch.autograd
    orig = getattr(ag, "backward", None)
    if orig is None or getattr(orig, "_devgate", False):
        return

    def backward(tensors, *a, **k):
        if st.active and not st.inside and st.keep_loss:
            try:
                if isinstance(tensors, (list, tuple)):
                    for t in tensors:
                        st.on_backward(t)
                elif tensors is not None:
                    st.on_backward(tensors)
            except Exception:
                pass
        return orig(tensors, *a, **k)

    backward._devgate = True
    backward.__doc__ = orig.__doc__
    ag.backward = backward


def _patch_seeds(torch, st):
    def record(key, orig):
        def seeded(seed=None, *a, **k):
            try:
                st.seeds[key] = int(seed) if seed is not None else None
            except Exception:
                pass
            return orig(seed, *a, **k) if seed is not None or a or k else orig()
        seeded._devgate = True
        seeded.__doc__ = getattr(orig, "__doc__", None)
        return seeded

    if not getattr(torch.manual_seed, "_devgate", False):
        orig_ms = torch.manual_seed
        torch.manual_seed = record("torch", orig_ms)
        rnd = getattr(torch, "random", None)
        if rnd is not None and getattr(rnd, "manual_seed", None) is orig_ms:
            rnd.manual_seed = torch.manual_seed
    if not getattr(random.seed, "_devgate", False):
        random.seed = record("random", random.seed)
    np = sys.modules.get("numpy")
    if np is not None and not getattr(np.random.seed, "_devgate", False):
        try:
            np.random.seed = record("numpy", np.random.seed)
        except Exception:
            pass


def _patch_loader(torch, st):
    dl = torch.utils.data.dataloader
    DataLoader = dl.DataLoader
    Base = dl._BaseDataLoaderIter
    orig_iter = DataLoader.__iter__
    orig_next = Base.__next__
    if getattr(orig_iter, "_devgate", False):
        return

    def __iter__(self):
        st.inside += 1  # the loader's own reads (its base seed's .item()) are not the program's
        try:
            it = orig_iter(self)
        finally:
            st.inside -= 1
        if st.on():
            try:
                st.on_iter(self, it)
            except Exception:
                pass
        return it

    def __next__(self):
        if not st.on():
            return orig_next(self)
        t0 = perf_counter()
        st.inside += 1
        try:
            batch = orig_next(self)
        except StopIteration:
            st.inside -= 1
            st.on_next(self, 0.0, None, True)
            raise
        except BaseException:
            st.inside -= 1
            raise
        st.inside -= 1
        try:
            st.on_next(self, (perf_counter() - t0) * 1000.0, batch, False)
        except Exception:
            pass
        return batch

    __iter__._devgate = __next__._devgate = True
    __iter__.__doc__, __next__.__doc__ = orig_iter.__doc__, orig_next.__doc__
    DataLoader.__iter__ = __iter__
    Base.__next__ = __next__


def _patch_optimizer(torch, st):
    optim = torch.optim
    Optimizer = optim.Optimizer
    if getattr(Optimizer.__init__, "_devgate", False):
        return
    reg = getattr(getattr(optim, "optimizer", None), "register_optimizer_step_post_hook", None)

    def after_step(opt):
        if st.on():
            try:
                st.on_step(opt)
            except Exception:
                pass

    if callable(reg):  # torch 2.x: the global step hook
        def post_hook(opt, args, kwargs):
            after_step(opt)
        reg(post_hook)
        hooked_classes = None
    else:  # torch 1.13: wrap each optimizer class's step at its first construction
        hooked_classes = set()

    def wrap_class(cls):
        if cls in hooked_classes:
            return
        hooked_classes.add(cls)
        orig = cls.__dict__.get("step")
        if orig is None or getattr(orig, "_devgate", False):
            return

        def step(self, *a, **k):
            seen = st.step_calls
            out = orig(self, *a, **k)
            # A subclass's step calling super().step() counts once: the innermost
            # wrapper counts it and the outer ones see it counted. (Not a
            # threading.local depth: its attribute reads cost the step more
            # than the rest of the hook; the training thread drives the steps.)
            if st.step_calls == seen:
                st.step_calls = seen + 1
                after_step(self)
            return out

        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            try:
                setattr(step, attr, getattr(orig, attr))
            except Exception:
                pass
        step.__dict__.update(getattr(orig, "__dict__", {}))  # keeps 1.13's "hooked" mark
        step._devgate = True
        cls.step = step

    orig_init = Optimizer.__init__

    def __init__(self, *a, **k):
        orig_init(self, *a, **k)
        try:
            if hooked_classes is not None:
                for cls in type(self).__mro__:
                    if cls is Optimizer or cls is object:
                        break
                    wrap_class(cls)
            if st.on():
                st.on_optimizer(self)
        except Exception:
            pass

    __init__._devgate = True
    __init__.__doc__ = orig_init.__doc__
    Optimizer.__init__ = __init__


def _patch_device_init(torch, st):
    """torch.cuda._lazy_init (torch's C++ side calls it too, at a tensor's
    first trip to the device): when CUDA's initialisation began and ended
    (marks device_init, device_ready), once."""
    cuda = getattr(torch, "cuda", None)
    orig = getattr(cuda, "_lazy_init", None)
    if orig is None or getattr(orig, "_devgate", False):
        return

    def _lazy_init():
        if "device_ready" in st.marks or cuda.is_initialized():
            return orig()
        t0 = time()
        out = orig()  # raises where CUDA cannot start: no mark then
        st.marks["device_init"], st.marks["device_ready"] = t0, time()
        return out

    _lazy_init._devgate = True
    _lazy_init.__doc__ = orig.__doc__
    cuda._lazy_init = _lazy_init


def _patch_torch(torch):
    st = _state
    if st is None or st.patched:
        return
    st.patched = True
    st.torch = torch
    st.marks.setdefault("torch_imported", time())
    for fn in (_patch_tensor, _patch_backward, _patch_seeds, _patch_loader, _patch_optimizer,
               _patch_device_init):
        try:
            fn(torch, st)
        except Exception as e:
            _probe_mod._warn("zero-" + fn.__name__, "zero-code probe: %s failed (%s); that hook is off"
                             % (fn.__name__, describe(e)), st.probe)


class _TorchFinder:
    """A meta-path finder that patches torch right after torch/__init__ has
    run (torch.utils.data and torch.optim are imported by it). It finds
    nothing itself: it asks the other finders and wraps the loader's
    exec_module, then leaves sys.meta_path."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        import importlib.util
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        orig_exec = getattr(loader, "exec_module", None)
        if orig_exec is None:
            return spec

        def exec_module(module):
            orig_exec(module)
            try:
                del loader.exec_module  # back to the class's method
            except Exception:
                pass
            _patch_torch(module)

        try:
            loader.exec_module = exec_module
        except Exception:
            return spec
        return spec


def _after_fork():
    st = _state
    if st is not None:
        st.active = False


def install(label="auto"):
    """Arms the zero-code probe in this process (idempotent). Returns True
    when it is active (events have somewhere to go)."""
    global _state
    with _install_lock:
        if _state is not None:
            return _state.active
        p = _probe_mod.Probe(label=label)
        p._auto = True
        _state = _State(p)
        if not p.enabled:
            _state.active = False
            return False
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork)
        try:
            p.install_fallback_capture()
        except Exception:
            pass
        torch = sys.modules.get("torch")
        if torch is not None:
            _patch_torch(torch)
        else:
            sys.meta_path.insert(0, _TorchFinder())
        import atexit
        atexit.register(finish)
        return True


def finish(status="ok", message=None):
    """Sends the last epoch's epoch_end and run_end (idempotent)."""
    st = _state
    if st is None or not st.active:
        return
    try:
        st.finish()
        if st.started and st.on():
            st.probe.run_end(status, message)
    except Exception:
        pass
    st.active = False


def fast_exit_asked(exc):
    """True when exc is the probe's own stop (SystemExit(_window.STOP_CODE)
    after it stopped the run) and DEVGATE_PROBE_FAST_EXIT asked for the exit
    without the interpreter's module teardown."""
    st = _state
    w = st.window if st is not None else None
    return (w is not None and w.fast_exit and w.stopped is not None
            and getattr(exc, "code", None) == _window.STOP_CODE)


def oom_from(exc):
    """Sends an oom event when exc (leaving the program) is out of memory."""
    st = _state
    if st is not None and st.active:
        try:
            st.probe._oom_from(exc)
        except Exception:
            pass


def _in_worker():
    """True in a multiprocessing child started by spawn/forkserver (a
    DataLoader worker): its command line carries --multiprocessing-fork."""
    argv = getattr(sys, "orig_argv", None) or sys.argv or []
    return any(a == "--multiprocessing-fork" or a.startswith("from multiprocessing.") for a in argv)
