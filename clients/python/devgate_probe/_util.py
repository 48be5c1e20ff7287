"""Helpers without state: JSON cleaning, process memory, out-of-memory
recognition, device names. Standard library only; torch is looked up in
sys.modules and never imported here."""

import contextlib
import math
import numbers
import os
import re
import sys
import warnings

PROTOCOL_VERSION = 1
MAX_TEXT = 2048  # characters kept of any free-text string in an event
_MAX_DEPTH = 8


def clean(obj, depth=0):
    """Returns obj as plain JSON data: non-finite floats become None, numpy and
    other number types become int/float, strings are cut to MAX_TEXT, anything
    else becomes a short string. Never reads a tensor's value (that would make
    the device wait)."""
    if obj is None or isinstance(obj, bool):
        return obj
    if isinstance(obj, str):
        return obj if len(obj) <= MAX_TEXT else obj[:MAX_TEXT]
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if depth >= _MAX_DEPTH:
        return None
    if isinstance(obj, dict):
        return {str(k)[:MAX_TEXT]: clean(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v, depth + 1) for v in obj]
    if type(obj).__module__.startswith("torch"):
        # A tensor (or other torch object): describe it, never print its values.
        shape = getattr(obj, "shape", None)
        dev = getattr(obj, "device", None)
        return "<%s shape=%s device=%s>" % (type(obj).__name__, tuple(shape) if shape is not None else "?", dev)
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        f = float(obj)
        return f if math.isfinite(f) else None
    try:
        s = str(obj)
    except Exception:
        s = "<%s>" % type(obj).__name__
    return s[:MAX_TEXT]


def split_device(device):
    """'cuda:1' -> ('cuda', 1); 'mps' -> ('mps', None); None -> ('cpu', None)."""
    s = "cpu" if device is None else str(device)
    kind, _, index = s.partition(":")
    kind = kind.strip().lower()
    try:
        idx = int(index) if index else None
    except ValueError:
        idx = None
    return kind, idx


_statm = [None, None]  # [pid, descriptor] of this process's /proc/PID/statm, kept open
_PAGE = None
# A forked child forgets the parent's descriptor at the fork (os.register_at_fork):
# no getpid() per read, a system call that costs several us amid a training
# loop's work. Without register_at_fork the PID is compared at each read.
FORGETS_AT_FORK = hasattr(os, "register_at_fork")  # _zero's hooks use it too


def _statm_forget():
    """In a forked child: the inherited descriptor reads the parent, so the
    child's own file is opened at its next read. The inherited one is left
    open (close-on-exec): its number may be the program's by now."""
    _statm[0] = _statm[1] = None


if FORGETS_AT_FORK:
    os.register_at_fork(after_in_child=_statm_forget)


def _statm_read():
    """/proc/PID/statm's resident pages through a descriptor kept open (a
    pread: about 1 us, where an open, read and close costs 10-20 us on every
    optimizer step). Opened by PID, never /proc/self, and again in a forked
    child (the fork forgets the parent's), so a descriptor inherited across a
    fork never reads the parent. None when it cannot be read."""
    if _statm[0] is None or (not FORGETS_AT_FORK and _statm[0] != os.getpid()):
        pid = os.getpid()
        try:
            fd = os.open("/proc/%d/statm" % pid, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except (OSError, AttributeError):
            fd = None  # no /proc (macOS): not tried again in this process
        _statm[0], _statm[1] = pid, fd
    if _statm[1] is None:
        return None
    try:
        fields = os.pread(_statm[1], 128, 0).split()
        if len(fields) == 7:  # statm's seven counts: not a file that took over the number
            return int(fields[1])
    except (OSError, ValueError):
        pass
    _statm[0] = None  # the program closed it: opened afresh next time (never closed here)
    return None


def rss_bytes():
    """The process's resident bytes now, or None when they cannot be read.
    Linux: /proc/PID/statm. macOS: proc_pid_rusage (ri_resident_size)."""
    global _PAGE
    pages = _statm_read()
    if pages is None and _statm[0] is None:
        pages = _statm_read()  # the descriptor went stale: once more, freshly opened
    if pages is not None:
        try:
            if _PAGE is None:
                _PAGE = os.sysconf("SC_PAGE_SIZE")
            return pages * _PAGE
        except (OSError, ValueError):
            return None
    if sys.platform == "darwin":
        return _darwin_resident()
    return None


def _darwin_resident():
    try:
        import ctypes
        import ctypes.util

        name = ctypes.util.find_library("proc")
        if not name:
            return None
        lib = ctypes.CDLL(name)
        buf = ctypes.create_string_buffer(512)  # rusage_info_v0 is 96 bytes
        if lib.proc_pid_rusage(ctypes.c_int(os.getpid()), ctypes.c_int(0), buf) != 0:
            return None
        # rusage_info_v0: uuid[16], then uint64 user_time, system_time,
        # pkg_idle_wkups, interrupt_wkups, pageins, wired_size, resident_size (@64).
        return int.from_bytes(buf.raw[64:72], sys.byteorder)
    except Exception:
        return None


def max_rss_bytes():
    """The process's peak resident bytes (getrusage), or None. Only a maximum:
    never used as the current footprint."""
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak) if sys.platform == "darwin" else int(peak) * 1024
    except Exception:
        return None


_OOM_TEXT = (
    ("cuda", re.compile(r"CUDA out of memory|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED")),
    ("mps", re.compile(r"MPS backend out of memory")),
    ("cpu", re.compile(r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)"
                       r"|can't allocate memory|not enough memory")),
)


def oom_device(exc):
    """The device kind ("cuda", "mps", "cpu") whose memory ran out, when exc is
    an out-of-memory error; None otherwise."""
    if isinstance(exc, MemoryError):
        return "cpu"
    torch = sys.modules.get("torch")
    cls = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None) if torch else None
    if isinstance(cls, type) and isinstance(exc, cls):
        return "cuda"
    if not isinstance(exc, RuntimeError):
        return None
    try:
        text = str(exc)
    except Exception:
        return None
    for kind, pattern in _OOM_TEXT:
        if pattern.search(text):
            return kind
    return None


def is_oom(exc):
    """True when exc is an out-of-memory error of cuda, mps or the cpu."""
    return oom_device(exc) is not None


def describe(exc):
    """'Type: message', cut to MAX_TEXT."""
    try:
        text = "%s: %s" % (type(exc).__name__, exc)
    except Exception:
        text = type(exc).__name__
    return text[:MAX_TEXT]


# PyTorch's MPS fallback warning (PYTORCH_ENABLE_MPS_FALLBACK=1), e.g.
# "The operator 'aten::nonzero' is not currently supported on the MPS backend and
# will fall back to run on the CPU. This may have performance implications."
_FALLBACK = re.compile(
    r"The operator '([^']{1,200})' is not (?:currently )?(?:supported|implemented) "
    r"(?:on|for) the MPS (?:backend|device)")


def fallback_op(text):
    """The operator named in PyTorch's MPS fallback warning text, or None."""
    m = _FALLBACK.search(text or "")
    return m.group(1) if m else None


def option_for(value, hints, argv=None):
    """The command-line option that set value (a number): "--batch-size" for
    `--batch-size 64` or `--batch-size=64` when value is 64 and the option's
    name holds one of hints; None when no such option carries it."""
    if value is None or isinstance(value, bool):
        return None
    argv = sys.argv[1:] if argv is None else argv
    want = str(value)
    for i, word in enumerate(argv):
        if not word.startswith("-") or word == "--":
            continue
        name, eq, val = word.partition("=")
        if not eq:
            val = argv[i + 1] if i + 1 < len(argv) else None
        key = name.lstrip("-").lower().replace("-", "").replace("_", "")
        if val == want and any(h in key for h in hints):
            return name
    return None


def loader_knobs(loader, argv=None):
    """run_start.loader: the training DataLoader's own settings, named as
    the program sets them (num_workers, pin_memory, persistent_workers,
    prefetch_factor, batch_size, drop_last), its batches and samples per
    epoch when it has a length, and the command-line options that set the
    batch size and the workers (batch_arg, workers_arg). Never iterates it."""
    def length(obj):
        try:
            return int(len(obj))
        except Exception:
            return None

    workers = int(getattr(loader, "num_workers", 0) or 0)
    batch = getattr(loader, "batch_size", None)
    return {
        "class": type(loader).__name__,
        "num_workers": workers,
        "pin_memory": bool(getattr(loader, "pin_memory", False)),
        "persistent_workers": bool(getattr(loader, "persistent_workers", False)),
        "prefetch_factor": getattr(loader, "prefetch_factor", None) if workers else None,
        "batch_size": batch if isinstance(batch, int) else None,
        "drop_last": bool(getattr(loader, "drop_last", False)),
        "batches": length(loader),
        "samples": length(getattr(loader, "dataset", None)),
        "batch_arg": option_for(batch, ("batch", "bs"), argv),
        "workers_arg": option_for(workers, ("worker", "jobs"), argv),
    }


@contextlib.contextmanager
def own_calls(state):
    """The probe's own calls into torch (the gate's product, the epoch end's
    memory reads and cache release, the profiler window): kept out of the
    program's counts (state.inside) and their warnings not shown, since they
    are devgate's doing, not the program's output."""
    state.inside += 1
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        state.inside -= 1
