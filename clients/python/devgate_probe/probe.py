"""The Probe: writes devgate's probe events (docs/events.md, version 1) as JSON
Lines to the descriptor in DEVGATE_EVENTS_FD, or appends them to the file in
DEVGATE_EVENTS_FILE, and is silent otherwise. Nothing here may break the
training program: every failure to write turns the probe silent."""

import atexit
import contextlib
import gc
import json
import math
import numbers
import os
import sys
import threading
import time
import warnings
import weakref
from time import perf_counter

from . import _seed
from ._util import (MAX_TEXT, PROTOCOL_VERSION, clean, describe, fallback_op, max_rss_bytes,
                    oom_device, rss_bytes, split_device)

_FLT_EPSILON = 2.0 ** -23
_FLT_MIN = 1.1754943508222875e-38
_GATE_SEED = 20261130
_MAX_FALLBACK_OPS = 1000
_ENCODE = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=True).encode
# Held events (emit_held, hold: the zero-code probe's step, every optimizer step)
# are written together once HOLD_S passed since the last write or HOLD_MAX are held.
HOLD_S = 0.2
HOLD_MAX = 256


def _refuse(obj):
    raise TypeError("not JSON: %s" % type(obj).__name__)


try:  # the C encoder made once (JSONEncoder.encode makes one per call): held records, flat
    from json.encoder import c_make_encoder as _c_make, encode_basestring_ascii as _ascii
    _C_ENCODE = _c_make(None, _refuse, _ascii, None, ":", ",", False, False, False) if _c_make else None
except ImportError:
    _C_ENCODE = None
_warned = set()
_warned_lock = threading.Lock()
# Set once the program drives a Probe of its own (not the zero-code one): the
# zero-code probe then stands down, so one run never reports steps twice.
_explicit_used = False


def _note_explicit(probe):
    global _explicit_used
    if not getattr(probe, "_auto", False):
        _explicit_used = True


def _warn(key, text, probe=None):
    """devgate's own message, once per key per process; never raises. It
    goes to devgate on the events channel (a note event, which devgate shows
    on its own stderr) when probe has one, so it never lands in the
    program's output; on stderr only when there is no channel to send it on
    (the channel's own failures)."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    try:
        if probe is not None and probe.emit("note", message=text) is not None:
            return
    except Exception:
        pass
    try:
        sys.stderr.write("devgate_probe: %s\n" % text)
        sys.stderr.flush()
    except Exception:
        pass


def _torch():
    """torch if the program imported it, else None (never imports it)."""
    return sys.modules.get("torch")


def _import_torch():
    """Imports torch on demand; returns (torch, None) or (None, reason)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch, None
    try:
        import torch  # noqa: F811 - optional dependency, imported lazily
        return torch, None
    except Exception as e:  # ImportError, or a broken install raising anything
        return None, "torch not importable: %s" % describe(e)


def _detect_framework():
    torch = _torch()
    if torch is not None:
        return {"name": "torch", "version": str(getattr(torch, "__version__", None))}
    for name in ("jax", "tensorflow", "mlx"):
        mod = sys.modules.get(name)
        if mod is not None:
            return {"name": name, "version": getattr(mod, "__version__", None)}
    return None


def _mps_fn(torch, name):
    mps = getattr(torch, "mps", None)  # torch.mps exists from PyTorch 2.0
    fn = getattr(mps, name, None)
    return fn if callable(fn) else None


def _device_call(torch, device, name):
    """Calls torch.cuda.NAME or torch.mps.NAME for the device. True when it
    ran; cpu has nothing to do."""
    kind, idx = split_device(device)
    if kind == "cpu":
        return True
    if torch is None:
        return False
    try:
        if kind == "cuda":
            if not torch.cuda.is_available():
                return False
            if name == "synchronize":
                torch.cuda.synchronize(idx)  # None: the current device
            else:
                getattr(torch.cuda, name)()
            return True
        if kind == "mps":
            fn = _mps_fn(torch, name)
            if fn is None:
                return False
            fn()
            return True
    except Exception:
        return False
    return False


def _synchronize(torch, device):
    """Waits for the device's queued work. True when it could."""
    return _device_call(torch, device, "synchronize")


def _empty_cache(torch, device):
    """Empties the device allocator's cache. True when the discipline was
    applied (cpu: nothing to empty beyond the gc.collect that precedes it)."""
    return _device_call(torch, device, "empty_cache")


def _device_memory(torch, device):
    """(allocated, reserved, max_allocated, driver) for the device; None where
    the figure is unknown."""
    kind, idx = split_device(device)
    alloc = reserved = max_alloc = driver = None
    if torch is None:
        return alloc, reserved, max_alloc, driver
    try:
        if kind == "cuda" and torch.cuda.is_available():
            dev = idx if idx is not None else torch.cuda.current_device()
            alloc = int(torch.cuda.memory_allocated(dev))
            reserved = int(torch.cuda.memory_reserved(dev))
            max_alloc = int(torch.cuda.max_memory_allocated(dev))
        elif kind == "mps":
            fn = _mps_fn(torch, "current_allocated_memory")
            alloc = int(fn()) if fn else None
            fn = _mps_fn(torch, "driver_allocated_memory")
            driver = int(fn()) if fn else None
    except Exception:
        pass
    return alloc, reserved, max_alloc, driver


def _allocated_now(torch, device):
    """The device's live allocated bytes (the step's memory reading), or None.
    On CUDA one member of memory_stats_as_nested_dict: memory_allocated
    flattens and sorts every statistic of the allocator first (about ten
    times the cost, on every optimizer step). Never synchronises."""
    kind, idx = split_device(device)
    if torch is None or kind == "cpu":
        return None
    try:
        if kind == "cuda":
            if not torch.cuda.is_initialized():
                return None
            stats = torch.cuda.memory_stats_as_nested_dict(idx if idx is not None else torch.cuda.current_device())
            return int(stats["allocated_bytes"]["all"]["current"])
        if kind == "mps":
            fn = _mps_fn(torch, "current_allocated_memory")
            return int(fn()) if fn else None
    except Exception:
        pass
    return None


def _peak_bytes(torch, device):
    kind, idx = split_device(device)
    if kind == "cuda" and torch is not None:
        try:
            if torch.cuda.is_available():
                return int(torch.cuda.max_memory_allocated(idx if idx is not None else None))
        except Exception:
            pass
    return rss_bytes()


def _reset_peak(torch, device):
    kind, idx = split_device(device)
    if kind == "cuda" and torch is not None:
        try:
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats(idx if idx is not None else None)
        except Exception:
            pass


def _share_channel(fd, st):
    """Names the events channel for this process's descendants, once per
    tree: a child started with close_fds (subprocess's default) or by
    multiprocessing's spawn loses the inherited descriptor, and opens
    DEVGATE_EVENTS_PATH instead (Linux: /proc/PID/fd/N of this process, which
    outlives the children it waits for). DEVGATE_EVENTS_ID (device:inode)
    tells a descendant whether its own descriptor N is still the channel."""
    try:
        if os.environ.get("DEVGATE_EVENTS_PATH") or not os.path.isdir("/proc/self/fd"):
            return
        import stat as _stat
        if not _stat.S_ISFIFO(st.st_mode):
            return  # a regular file: DEVGATE_EVENTS_FILE is the way to name one
        os.environ["DEVGATE_EVENTS_PATH"] = "/proc/%d/fd/%d" % (os.getpid(), fd)
        os.environ["DEVGATE_EVENTS_ID"] = "%d:%d" % (st.st_dev, st.st_ino)
    except Exception:
        pass


class _Epoch:
    """Context manager of Probe.epoch."""

    def __init__(self, probe, index, validation, empty_cache):
        self.probe = probe
        self.index = index
        self.validation = validation
        self.empty_cache = empty_cache
        self.record = None

    def __enter__(self):
        p = self.probe
        p._epoch = self.index
        p._step_index = 0
        p._last_mark = perf_counter()
        p._pending_data_ms = None
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is not None:
            self.probe._oom_from(exc)
            return False
        self.record = self.probe.epoch_end(self.index, validation=self.validation,
                                           empty_cache=self.empty_cache)
        return False


class _Step:
    """Context manager of Probe.step. Set .loss (a float, or a tensor with
    read_loss=True) and optionally .batch inside the block."""

    def __init__(self, probe, sync, read_loss, batch):
        self.probe = probe
        self.sync = sync
        self.read_loss = read_loss
        self.batch = batch
        self.loss = None
        self.record = None

    def __enter__(self):
        self.probe.step_begin(sync=self.sync)
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is not None:
            self.probe._step_t0 = None
            self.probe._oom_from(exc)
            return False
        self.record = self.probe.step_end(loss=self.loss, read_loss=self.read_loss, batch=self.batch)
        return False


class Probe:
    """Sends devgate probe events. Probe(label=None, device=None).

    The destination is chosen once, here: the descriptor in DEVGATE_EVENTS_FD,
    else the file in DEVGATE_EVENTS_FILE (appended), else nothing. A bad
    descriptor leaves the probe silent with one warning on stderr. Every event
    is one write(2) of one line; a write that fails (broken pipe, closed
    descriptor, full disk) turns the probe silent for good. Writes are
    serialised by a lock, so threads may share a probe.

    Used as a context manager, the probe sends run_end on exit ("error" with
    the exception's text when one propagates) and closes."""

    def __init__(self, label=None, device=None):
        self.label = label
        self.device = None if device is None else str(device)
        self.fallback_counts = {}
        self._lock = threading.Lock()
        self._out = None
        self._owned = False
        self._run_started = False
        self._run_ended = False
        self._start_pid = None
        self._atexit = False
        self._batch = None
        self._epoch = None
        self._step_index = 0
        self._step_t0 = None
        self._step_sync = False
        self._last_mark = perf_counter()
        self._pending_data_ms = None
        self._hook = None
        self._prev_showwarning = None
        self._held = []  # records emit_held stamped and has not written yet
        self._held_t = perf_counter()  # the last write of held records
        self._open()
        if hasattr(os, "register_at_fork"):
            # A forked child (a DataLoader worker) must not inherit the lock
            # held by another thread at the fork.
            ref = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: Probe._renew_lock(ref))

    @staticmethod
    def _renew_lock(ref):
        probe = ref()
        if probe is not None:
            probe._lock = threading.Lock()
            probe._held = []  # the parent's steps, not the child's

    # ---- destination -------------------------------------------------------
    def _open(self):
        fd_text = os.environ.get("DEVGATE_EVENTS_FD")
        if fd_text is not None and fd_text.strip():
            fd = None
            try:
                fd = int(fd_text.strip())
                if fd < 0:
                    raise ValueError("negative")
                st = os.fstat(fd)
                ident = os.environ.get("DEVGATE_EVENTS_ID")
                if ident and ident != "%d:%d" % (st.st_dev, st.st_ino):
                    raise OSError("descriptor %d is another file here" % fd)
                try:
                    import fcntl
                    if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
                        raise OSError("opened read-only")
                except ImportError:
                    pass
                # Unbuffered binary: each event is one write(2) of a whole line
                # (atomic on a pipe up to PIPE_BUF), and nothing is left in a
                # buffer to be flushed into a broken pipe at exit.
                self._out = os.fdopen(fd, "wb", buffering=0, closefd=False)
                _share_channel(fd, st)
            except (ValueError, OSError) as e:
                # A descendant whose parent closed the descriptor (subprocess's
                # close_fds, multiprocessing spawn): the channel by its path.
                if self._open_path(os.environ.get("DEVGATE_EVENTS_PATH")):
                    return
                _warn("fd", "DEVGATE_EVENTS_FD=%r is not a writable descriptor (%s); events are not sent"
                      % (fd_text, e))
                self._out = None
            return
        path = os.environ.get("DEVGATE_EVENTS_FILE")
        if path:
            try:
                self._out = open(path, "ab", buffering=0)
                self._owned = True
            except OSError as e:
                _warn("file", "cannot open DEVGATE_EVENTS_FILE=%r (%s); events are not sent" % (path, e))
                self._out = None

    def _open_path(self, path):
        """Opens the events channel by the path a parent named
        (DEVGATE_EVENTS_PATH: /proc/PID/fd/N of the process that holds it, a
        new write end of the same pipe). True when it could."""
        if not path:
            return False
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return False
        try:
            import fcntl
            fl = fcntl.fcntl(fd, fcntl.F_GETFL)
            fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~os.O_NONBLOCK)  # writes wait as on the inherited pipe
        except Exception:
            pass
        self._out = os.fdopen(fd, "wb", buffering=0)
        self._owned = True
        return True

    @property
    def enabled(self):
        """True while events go somewhere."""
        return self._out is not None

    def close(self):
        """Stops sending: removes the fallback hook, closes a file the probe
        opened (an inherited descriptor is left open). Idempotent."""
        self.uninstall_fallback_capture()
        self.flush()
        with self._lock:
            out, self._out = self._out, None
        if out is not None:
            try:
                out.close()
            except Exception:
                pass

    def _write(self, data):
        with self._lock:
            out = self._out
            if out is None:
                return False
            if self._held:  # held records go first: the events keep their order
                data = self._encode_held() + data
            try:
                view = memoryview(data)
                while view:
                    n = out.write(view)
                    if n is None:  # non-blocking descriptor, full: drop the line
                        return False
                    view = view[n:]
                return True
            except (OSError, ValueError) as e:
                # BrokenPipeError, EBADF, ENOSPC, a closed file object: silent from now on.
                self._out = None
                _warn("write", "events no longer sent (%s)" % describe(e))
                return False

    def note(self, text):
        """Sends a note: devgate's message about the probe itself (a hook
        that could not be set...), shown by devgate, never in the program's
        output. Returns the record sent or None."""
        return self.emit("note", message=str(text))

    def emit(self, ev, **fields):
        """Sends one event {v, ev, t, **fields}; returns the record sent (a
        dict) or None when silent. NaN and infinities become null."""
        if self._out is None:
            return None
        try:
            rec = {"v": PROTOCOL_VERSION, "ev": ev, "t": time.time()}
            flat = True
            for k, v in fields.items():
                if k in rec:
                    continue
                t = type(v)
                if t is float:
                    if not math.isfinite(v):
                        v = None
                elif not (v is None or t is int or t is bool or (t is str and len(v) <= MAX_TEXT)):
                    flat = False
                rec[k] = v
            # A flat event of plain values (every step's) is already clean; clean()
            # walks anything else. One encoder, built once: json.dumps with options
            # builds a new one per call.
            rec = rec if flat else clean(rec)
            line = _ENCODE(rec)
        except Exception as e:
            _warn("encode", "an event could not be encoded (%s)" % describe(e))
            return None
        return rec if self._write((line + "\n").encode("ascii")) else None

    def emit_plain(self, ev, fields):
        """emit for an event the caller built of plain JSON values (numbers,
        bools, None, short strings, lists of them), never holding the keys
        v, ev or t (the zero-code probe's epoch_end with its losses): encoded
        as it is, without emit's walk through every value; anything the
        encoder refuses (NaN, an object) goes through emit. Returns what emit
        does."""
        if self._out is None:
            return None
        rec = {"v": PROTOCOL_VERSION, "ev": ev, "t": time.time()}
        rec.update(fields)
        try:
            line = _ENCODE(rec)
        except (ValueError, TypeError):
            return self.emit(ev, **fields)
        return rec if self._write((line + "\n").encode("ascii")) else None

    def emit_held(self, ev, fields, now=None):
        """emit_plain for an event sent on every optimizer step: the record
        is stamped now (its "t") and held; the held records are encoded and
        written together, in one write(2), once HOLD_S passed since the last
        write (now: perf_counter) or HOLD_MAX are held, before any other
        event (the order is kept), and at flush() and close(). Encoding and
        writing a line amid the program's work costs it ten times what a
        batch costs per line (issue 24); a process killed outright loses at
        most HOLD_S of events. Returns the record, or None when silent."""
        if self._out is None:
            return None
        rec = {"v": PROTOCOL_VERSION, "ev": ev, "t": time.time()}
        rec.update(fields)
        return self.hold(rec, now)

    def hold(self, rec, now=None):
        """Holds one event until the next write (see emit_held). rec is a
        record the caller built whole ({"v", "ev", "t", fields...} of plain
        JSON values), or a row: a tuple whose first member is the function
        that makes its line, line(row, wall) -> str, called at the write
        with wall = time.time() - perf_counter() then (the zero-code probe's
        step: a tuple of the step's counters and its perf_counter stamp costs
        the step a fraction of a dict and a clock read). now: perf_counter
        (read here when not given). Returns rec, or None when silent."""
        if self._out is None:
            return None
        held = self._held
        held.append(rec)
        if (perf_counter() if now is None else now) - self._held_t >= HOLD_S or len(held) >= HOLD_MAX:
            self.flush()
        return rec

    def flush(self):
        """Writes the records emit_held holds (nothing when none are)."""
        if self._held:
            self._write(b"")

    def _encode_held(self):
        """The held records as lines (under the lock), emptied."""
        held, self._held = self._held, []
        self._held_t = now = perf_counter()
        wall = time.time() - now  # a row's perf_counter stamp + wall = its time.time()
        lines = []
        for rec in held:
            if type(rec) is tuple:
                try:
                    lines.append(rec[0](rec, wall))
                except Exception as e:  # a row's line function that failed: the row is lost, said once
                    _warn("encode", "an event could not be encoded (%s)" % describe(e))  # under the lock: no note
                continue
            try:
                lines.append("".join(_C_ENCODE(rec, 0)) if _C_ENCODE is not None else _ENCODE(rec))
            except (ValueError, TypeError):  # NaN, an object: the general cleaner
                try:
                    lines.append(_ENCODE(clean(rec)))
                except Exception as e:
                    _warn("encode", "an event could not be encoded (%s)" % describe(e))
        return ("\n".join(lines) + "\n").encode("ascii") if lines else b""

    # ---- run -------------------------------------------------------------------
    def run_start(self, device, batch, bucket=None, seeds=None, framework=None, probe="manual",
                  sync_debug=None, loader=None, marks=None):
        """Sends run_start. device: "cpu", "cuda:0", "mps"...; batch: int;
        bucket: dict describing the input (resolution, augment, batch, data);
        seeds: dict {torch, numpy, random, workers}, default the latest
        seed_everything's; framework: {name, version}, default detected from
        the modules imported; probe: "manual" (this API) or "auto" (the
        zero-code probe); sync_debug: {state, reason} of CUDA's sync debug
        mode (the zero-code probe's), sent only when given; loader: the
        training DataLoader's settings ({num_workers, pin_memory,
        persistent_workers, prefetch_factor, batch_size, drop_last,
        batches, samples, batch_arg, workers_arg}, devgate_probe's
        loader_knobs), sent only when given; marks: {name: wall-clock s} of
        the run's start (the zero-code probe's: main, torch_imported,
        device_init, device_ready; a fork server's child adds forked and
        child_ready), sent only when given. Arms an atexit run_end."""
        _note_explicit(self)
        self.device = str(device) if device is not None else self.device
        self._batch = batch
        self._run_started = True
        self._run_ended = False
        self._start_pid = os.getpid()
        if not self._atexit:
            atexit.register(self._at_exit)
            self._atexit = True
        fields = {
            "framework": framework if framework is not None else _detect_framework(),
            "device": self.device,
            "batch": batch,
            "bucket": bucket,
            "seeds": seeds if seeds is not None else _seed.last_seeds(),
            "pid": os.getpid(),
            "probe": probe,
        }
        if self.label is not None:
            fields["label"] = str(self.label)
        if sync_debug is not None:
            fields["sync_debug"] = sync_debug
        if loader is not None:
            fields["loader"] = loader
        if marks:
            fields["marks"] = dict(marks)
        return self.emit("run_start", **fields)

    def run_end(self, status="ok", message=None, stop=None):
        """Sends run_end once per run_start (status "ok" or "error"; "stopped"
        with stop, what ended it, when devgate's knobs stopped it)."""
        if self._run_ended:
            return None
        self._run_ended = True
        if stop is not None:
            return self.emit("run_end", status=status, message=message, stop=stop)
        return self.emit("run_end", status=status, message=message)

    def _at_exit(self):
        if not self._run_started or self._run_ended or os.getpid() != self._start_pid:
            return  # nothing to close, or a forked child (a DataLoader worker)
        last = getattr(sys, "last_value", None)  # set for an uncaught exception
        if last is not None:
            self.run_end("error", describe(last))
        else:
            self.run_end("ok", "run_end sent at interpreter exit")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc is not None:
                self._oom_from(exc)
            if self._run_started and not self._run_ended:
                if exc is None or isinstance(exc, (SystemExit,)) and exc.code in (0, None):
                    self.run_end("ok")
                else:
                    self.run_end("error", describe(exc))
        finally:
            self.close()
        return False

    # ---- gate --------------------------------------------------------------------
    def gate(self, device="cpu", n=256):
        """The device gate: whether torch was built with the device's backend,
        whether it is available, and a seeded n x n fp32 product on the device
        checked against a float64 product on the CPU, element by element,
        within |c - ref| <= 2 k eps32 sum|a||b| (k = n), timed with the device
        synchronised (median of 3 after one warm-up). Sends a gate event and
        returns its fields. Never raises."""
        device = str(device)
        kind, idx = split_device(device)
        res = {"device": device, "built": False, "available": False, "reason": None, "matmul": None}
        try:
            self._gate(res, device, kind, idx, int(n))
        except Exception as e:
            res["reason"] = describe(e)
        self.emit("gate", **res)
        return res

    def _gate(self, res, device, kind, idx, n):
        torch, why = _import_torch()
        if torch is None:
            res["reason"] = why
            return
        if kind == "cpu":
            res["built"] = res["available"] = True
        elif kind == "cuda":
            be = getattr(torch.backends, "cuda", None)
            built_fn = getattr(be, "is_built", None)
            res["built"] = bool(built_fn()) if callable(built_fn) else getattr(torch.version, "cuda", None) is not None
            if not res["built"]:
                res["reason"] = "torch %s was built without CUDA" % torch.__version__
                return
            if not torch.cuda.is_available():
                res["reason"] = "torch.cuda.is_available() is false (no driver or no device)"
                return
            count = torch.cuda.device_count()
            if idx is not None and not 0 <= idx < count:
                res["reason"] = "no device %s: %d CUDA device(s)" % (device, count)
                return
            res["available"] = True
        elif kind == "mps":
            mps = getattr(torch.backends, "mps", None)
            if mps is None:
                res["reason"] = "torch %s has no MPS backend (needs 1.12 or later)" % torch.__version__
                return
            res["built"] = bool(mps.is_built())
            if not res["built"]:
                res["reason"] = "torch %s was built without MPS" % torch.__version__
                return
            if not mps.is_available():
                res["reason"] = "torch.backends.mps.is_available() is false (needs macOS 12.3+ on Apple silicon, native arm64 Python)"
                return
            res["available"] = True
        else:
            res["reason"] = "unknown device %r (cpu, cuda, cuda:N, mps)" % device
            return
        res["matmul"] = self._matmul(torch, device, kind, n, res)

    @staticmethod
    def _matmul(torch, device, kind, n, res):
        mm = {"ok": False, "n": n, "max_abs_err": None, "ms": None}
        try:
            g = torch.Generator().manual_seed(_GATE_SEED)
            a = torch.rand(n, n, generator=g, dtype=torch.float32) * 2 - 1
            b = torch.rand(n, n, generator=g, dtype=torch.float32) * 2 - 1
            a64, b64 = a.double(), b.double()
            ref = a64 @ b64
            bound = (a64.abs() @ b64.abs()) * (2.0 * n * _FLT_EPSILON) + _FLT_MIN
            dev = torch.device(device)
            da, db = a.to(dev), b.to(dev)
            c = da @ db  # warm-up: library initialisation, kernel selection
            if not _synchronize(torch, device):
                c.to("cpu")
            times = []
            for _ in range(3):
                t0 = perf_counter()
                c = da @ db
                if not _synchronize(torch, device):
                    c.to("cpu")  # the copy waits for the product
                times.append((perf_counter() - t0) * 1000.0)
            times.sort()
            mm["ms"] = times[1]
            ran_on = c.device.type
            host = c.to("cpu").double()
            if not bool(torch.isfinite(host).all()):
                res["reason"] = "matmul: non-finite elements in the device product"
                return mm
            err = (host - ref).abs()
            mm["max_abs_err"] = float(err.max())
            bad = int((err > bound).sum())
            if ran_on != kind:
                res["reason"] = "matmul: the product ran on %s, not %s" % (ran_on, kind)
            elif bad:
                res["reason"] = "matmul: %d of %d elements outside 2*k*eps32*sum|a||b|" % (bad, n * n)
            else:
                mm["ok"] = True
        except Exception as e:
            res["reason"] = "matmul: %s" % describe(e)
        return mm

    # ---- epochs ------------------------------------------------------------------
    def epoch(self, epoch_index, validation=False, empty_cache=True):
        """Context manager around one epoch: counts its steps, and at a normal
        exit applies the allocator discipline and sends epoch_end (see
        epoch_end). An out-of-memory exception leaving the block sends oom and
        propagates. The object yielded has .validation (settable) and, after
        the block, .record."""
        return _Epoch(self, epoch_index, validation, empty_cache)

    def epoch_end(self, epoch_index, validation=False, empty_cache=True):
        """gc.collect(), then (empty_cache=True) empties the device allocator's
        cache (torch.cuda.empty_cache / torch.mps.empty_cache), then sends
        epoch_end with the watermarks: cuda memory_allocated, memory_reserved,
        max_memory_allocated; mps current_allocated_memory (allocated) and
        driver_allocated_memory (driver); footprint = process resident bytes.
        Unknown figures are null. Returns the fields sent."""
        _note_explicit(self)
        torch = _torch()
        device = self.device or "cpu"
        emptied = False
        try:
            gc.collect()
            if empty_cache:
                emptied = _empty_cache(torch, device)
        except Exception:
            emptied = False
        alloc, reserved, max_alloc, driver = _device_memory(torch, device)
        fields = {
            "epoch": epoch_index,
            "allocated": alloc,
            "reserved": reserved,
            "max_allocated": max_alloc,
            "driver": driver,
            "footprint": rss_bytes(),
            "cache_emptied": bool(emptied),
            "validation": bool(validation),
        }
        self.emit("epoch_end", **fields)
        return fields

    def phase(self, name, epoch=None):
        """Sends phase {name, epoch} ("train", "validation", "checkpoint",
        "lr-change", "sweep"...); epoch defaults to the current epoch."""
        return self.emit("phase", name=name, epoch=self._epoch if epoch is None else epoch)

    # ---- steps ---------------------------------------------------------------------
    def data_ready(self):
        """Marks that the batch has arrived: the next step's data_ms is the time
        since the previous step ended (or the epoch began)."""
        self._pending_data_ms = (perf_counter() - self._last_mark) * 1000.0

    def timed_loader(self, loader):
        """Yields loader's batches, measuring the wait for each as the next
        step's data_ms."""
        it = iter(loader)
        while True:
            t0 = perf_counter()
            try:
                item = next(it)
            except StopIteration:
                return
            self._pending_data_ms = (perf_counter() - t0) * 1000.0
            yield item

    def step(self, sync=False, read_loss=False, batch=None):
        """Context manager timing one step (see step_begin/step_end); set
        .loss inside the block to report it."""
        return _Step(self, sync, read_loss, batch)

    def step_begin(self, sync=False):
        """Starts timing a step. sync=True synchronises the device first and at
        step_end, so step_ms covers the device work (costs a sync point)."""
        self._step_sync = bool(sync)
        if sync:
            _synchronize(_torch(), self.device)
        self._step_t0 = perf_counter()

    def step_end(self, loss=None, read_loss=False, batch=None):
        """Ends the step begun by step_begin and sends step {epoch, step,
        step_ms, data_ms, loss, synced}. loss is sent only when it is a Python
        (or numpy) number; a tensor is read with .item() only when
        read_loss=True (a sync point, so synced becomes true). Returns the
        fields, or None without a step_begin."""
        t0 = self._step_t0
        if t0 is None:
            return None
        _note_explicit(self)
        self._step_t0 = None
        synced = False
        value = None
        try:
            if isinstance(loss, numbers.Real) and not isinstance(loss, bool):
                value = float(loss)
            elif loss is not None and read_loss and hasattr(loss, "item"):
                value = float(loss.item())
                synced = True
        except Exception:
            value = None
        if value is not None and not math.isfinite(value):
            value = None
        if self._step_sync:
            synced = _synchronize(_torch(), self.device) or synced
        t1 = perf_counter()
        fields = {
            "epoch": self._epoch,
            "step": self._step_index,
            "step_ms": (t1 - t0) * 1000.0,
            "data_ms": self._pending_data_ms,
            "loss": value,
            "synced": synced,
        }
        if batch is not None:
            fields["batch"] = batch
        self._pending_data_ms = None
        self._step_index += 1
        self._last_mark = t1
        self.emit("step", **fields)
        return fields

    # ---- out of memory -------------------------------------------------------------
    def oom(self, message=None, batch=None, device=None, exc=None):
        """Sends oom {device, batch, message}; with exc, the device and message
        come from the exception."""
        if exc is not None:
            device = device or oom_device(exc)
            message = message or describe(exc)
        return self.emit("oom", device=device or self.device, batch=batch if batch is not None else self._batch,
                         message=message)

    def _oom_from(self, exc):
        """Sends oom once for an out-of-memory exception leaving a step, an
        epoch or the probe's block (the enclosing blocks see it again)."""
        try:
            if getattr(exc, "_devgate_oom_sent", False) or oom_device(exc) is None:
                return
            self.oom(exc=exc)
            try:
                exc._devgate_oom_sent = True
            except Exception:
                pass
        except Exception:
            pass

    # ---- fallbacks ----------------------------------------------------------------------
    def fallback(self, op, message=None, device="mps"):
        """Sends fallback {op, device, message} the first time op is seen;
        later sightings are only counted in .fallback_counts."""
        count = self.fallback_counts.get(op, 0)
        if count == 0 and len(self.fallback_counts) >= _MAX_FALLBACK_OPS:
            return None
        self.fallback_counts[op] = count + 1
        if count:
            return None
        return self.emit("fallback", op=op, device=device, message=message)

    def _on_warning(self, message):
        text = str(message)
        op = fallback_op(text)
        if op is not None:
            self.fallback(op, text[:MAX_TEXT], "mps")

    def install_fallback_capture(self):
        """Hooks warnings.showwarning (chaining to the previous hook) so PyTorch's
        MPS fallback warnings ("The operator 'aten::...' is not currently
        supported on the MPS backend and will fall back to run on the CPU")
        become fallback events. The warnings are still shown."""
        if self._hook is not None:
            return
        prev = warnings.showwarning

        def hook(message, category, filename, lineno, file=None, line=None):
            try:
                self._on_warning(message)
            except Exception:
                pass
            return prev(message, category, filename, lineno, file, line)

        self._prev_showwarning = prev
        self._hook = hook
        warnings.showwarning = hook

    def uninstall_fallback_capture(self):
        """Restores the previous warnings.showwarning (when ours is still the
        one installed)."""
        hook, prev = self._hook, self._prev_showwarning
        if hook is None:
            return
        if warnings.showwarning is hook:
            warnings.showwarning = prev
        self._hook = self._prev_showwarning = None

    @contextlib.contextmanager
    def capture_fallbacks(self):
        """Context manager form of install_fallback_capture."""
        self.install_fallback_capture()
        try:
            yield self
        finally:
            self.uninstall_fallback_capture()

    # ---- batch sweep ---------------------------------------------------------------------
    def sweep(self, step_fn, start=8, stop=None, device=None, steps=5, warmup=2):
        """Batch sweep: calls step_fn(batch) at start, 2*start, 4*start... (up to
        stop, or 2**20 without stop), warmup untimed calls then steps timed
        calls per size with the device synchronised, and sends a sweep_trial
        per size {batch, ended, samples_per_s, step_ms, peak_bytes, reason}.
        peak_bytes: cuda max_memory_allocated since a reset, else the process
        resident bytes. Stops at the first out-of-memory error (ended
        "device-oom", plus an oom event; memory is freed with gc and
        empty_cache) or other error (ended "failed"). Returns
        {"trials": [...], "best_batch": largest ok batch or None}."""
        device = str(device) if device is not None else (self.device or "cpu")
        stop = int(stop) if stop is not None else 2 ** 20
        steps = max(1, int(steps))
        warmup = max(0, int(warmup))
        trials = []
        best = None
        self.emit("phase", name="sweep", epoch=None)
        batch = max(1, int(start))
        while batch <= stop:
            trial, oom_kind = self._trial(step_fn, batch, device, steps, warmup)
            trials.append(trial)
            self.emit("sweep_trial", **trial)
            if oom_kind:
                self.emit("oom", device=device if split_device(device)[0] == oom_kind else oom_kind,
                          batch=batch, message=trial["reason"])
            if trial["ended"] != "ok":
                break
            best = batch
            batch *= 2
        return {"trials": trials, "best_batch": best}

    def _trial(self, step_fn, batch, device, steps, warmup):
        torch = _torch()
        trial = {"batch": batch, "ended": "ok", "samples_per_s": None, "step_ms": None,
                 "peak_bytes": None, "reason": None}
        oom_kind = None
        try:
            _reset_peak(torch, device)
            for _ in range(warmup):
                step_fn(batch)
            _synchronize(torch, device)
            t0 = perf_counter()
            for _ in range(steps):
                step_fn(batch)
            _synchronize(torch, device)
            ms = (perf_counter() - t0) * 1000.0 / steps
            trial["step_ms"] = ms
            trial["samples_per_s"] = batch * 1000.0 / ms if ms > 0 else None
        except Exception as e:  # KeyboardInterrupt and SystemExit go through
            oom_kind = oom_device(e)
            trial["ended"] = "device-oom" if oom_kind else "failed"
            trial["reason"] = describe(e)
        # The exception (and the frames holding the batch) is gone here.
        trial["peak_bytes"] = _peak_bytes(torch, device)
        try:
            gc.collect()
            _empty_cache(torch, device)
        except Exception:
            pass
        return trial, oom_kind


def footprint():
    """The process's resident bytes now (None when unknown)."""
    return rss_bytes()


def peak_footprint():
    """The process's peak resident bytes (getrusage), or None."""
    return max_rss_bytes()
