"""python [OPTIONS] -m devgate_probe.forkserver [SCRIPT | -m MODULE | -c CODE]

The fork server of `devgate accept -- CMD` (docs/accept.md, "Fast trials: the
fork server"). devgate starts it once, with the interpreter and options of the
user's command, and it imports what the program imports at its top level
(found with ast, never running the program's body): installed packages such as
torch and numpy, and the installed packages the program's own modules beside
it import; the program's own modules are not imported, so nothing they do at
import time (parse sys.argv, pick a device) is shared between trials. Then it
forks one child per trial, each a fresh `python [OPTIONS] TAIL` from there on:
its own process group, its argv, environment, descriptors and address-space
limit, the user's sitecustomize and usercustomize run in it (the server started
with _forksite/ standing in for them, so they never run there), the pages the server had resident made resident in it again (so its
memory footprint is the one a fresh interpreter would have after the same
imports), numpy's global generator seeded afresh (as a fresh interpreter's
is), __main__ a new module. The server reaps each child and reports its raw
wait status; devgate supervises the child as it would its own (pid, process
tree, signals, timeout).

Before it says it is ready, the server imports what a program's first steps
import lazily (LAZY_IMPORTS: torch 2's torch._dynamo, which every optimizer's
step() imports; DEVGATE_FORKSRV_WARM adds names), and each child, at its exit,
tells it over a pipe which submodules of the server's packages it imported
after the fork; the server imports those before the next fork (learned
imports; DEVGATE_FORKSRV_LEARN=0: none). Each such warm is checked in a checker
child first (the imports, then unsafe_reason()), so it never makes the server
unsafe to fork.

Forking is refused (devgate then starts plain children) when the imports
started Python threads or initialised a device (CUDA, XPU) or opened a device
file, when a trial's environment differs from the server's in a variable read
at start-up, and when the trial's interpreter or its options differ.

Protocol (DEVGATE_FORKSRV_FD, a Unix stream socket): every message is a 4-byte
big-endian length and a JSON object. Server: {"ready": true|false, ...} once,
then per request {"pid": N, "learned": {...}} or {"refused": WHY}, and {"exit": N, "status": W}
when the child has ended. devgate: {"argv": [...], "env": ["K=V", ...],
"as_limit": BYTES} with three descriptors (stdout, stderr, events) attached.
Pure standard library.
"""

import array
import ast
import gc
import importlib
import importlib.util
import json
import os
import socket
import struct
import sys
import threading
import time
import warnings

MAX_LOCAL_FILES = 64  # the program's own modules scanned for imports, at most
DEVICE_FILES = ("/dev/nvidia", "/dev/dri/", "/dev/kfd", "/dev/accel", "/dev/neuron")
# Variables a trial may set differently from the server: devgate's own knobs,
# and the ones a device reads when it is initialised (after the fork).
SAME_AFTER_FORK = ("DEVGATE_",)
DEVICE_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
               "GPU_DEVICE_ORDINAL", "POCL_DEVICES", "ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR")
MADV_POPULATE_READ = 22
STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))  # not listed when loaded already


# ---- the messages ---------------------------------------------------------------------


def _send(sock, obj):
    data = json.dumps(obj).encode("utf-8")
    sock.sendall(struct.pack(">I", len(data)) + data)


def _recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _recv(sock):
    """The next request and its descriptors; (None, []) at the end."""
    fds = array.array("i")
    msg, anc, _flags, _addr = sock.recvmsg(4, socket.CMSG_SPACE(8 * fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    fds = list(fds)
    if len(msg) < 4:
        rest = _recv_exact(sock, 4 - len(msg)) if msg else None
        if rest is None:
            return None, fds
        msg += rest
    body = _recv_exact(sock, struct.unpack(">I", msg)[0])
    if body is None:
        return None, fds
    return json.loads(body.decode("utf-8")), fds


# ---- what the program imports ----------------------------------------------------------


def _top_statements(body):
    """The module-level import statements: the body's own and those in a
    top-level try (the `try: import x except ImportError` idiom); never those
    under an if or in a function."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.Try):
            for sub in node.body:
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    yield sub


def _under(path, roots):
    path = os.path.realpath(path)
    return any(path == r or path.startswith(r + os.sep) for r in roots)


def _spec_path(spec):
    if spec is None:
        return None
    if spec.origin and spec.origin not in ("built-in", "frozen"):
        return spec.origin
    locs = list(spec.submodule_search_locations or [])
    return locs[0] if locs else None


def _local_file(name, roots):
    """The source file of module name when it is one of the program's own (a
    file or package under roots, found without importing anything)."""
    parts = name.split(".")
    for root in roots:
        base = os.path.join(root, *parts)
        for cand in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(cand):
                return cand
    return None


def _scan(source, filename, roots, package, seen, out):
    """Adds the installed modules that source imports at its top level to out,
    and scans the program's own modules it imports the same way."""
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return
    for node in _top_statements(tree.body):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif node.level == 0 and node.module:
            names = [node.module] + [node.module + "." + a.name for a in node.names if a.name != "*"]
        elif node.level > 0 and package is not None:
            # A relative import: the program's own package, level - 1 steps up.
            parts = package.split(".") if package else []
            if node.level - 1 > len(parts):
                continue
            base = parts[:len(parts) - (node.level - 1)]
            mod = ".".join(base + ([node.module] if node.module else []))
            if mod:
                names = [mod] + [mod + "." + a.name for a in node.names if a.name != "*"]
        for name in names:
            _classify(name, roots, seen, out)


def _classify(name, roots, seen, out):
    if not name or name in seen or name == "__future__" or len(seen) > 4096:
        return
    seen.add(name)
    local = _local_file(name, roots)
    if local is not None:
        if sum(1 for s in seen if s.startswith("file:")) >= MAX_LOCAL_FILES or ("file:" + local) in seen:
            return
        seen.add("file:" + local)
        try:
            with open(local, "rb") as f:
                src = f.read()
        except OSError:
            return
        pkg = name if local.endswith("__init__.py") else name.rpartition(".")[0]
        _scan(src, local, roots, pkg, seen, out)
        return
    top = name.split(".")[0]
    if "." in name:
        _classify(top, roots, seen, out)
        if _local_file(top, roots) is None:
            out.append(name)  # imported below when its package was, and it is a module
        return
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    where = _spec_path(spec)
    if spec is None or (where and _under(where, roots)):
        return
    out.append(name)


def _module_file(name, roots):
    for root in roots:
        f = _local_file(name, [root])
        if f:
            return f
        base = os.path.join(root, *name.split("."), "__main__.py")
        if os.path.isfile(base):
            return base
    return None


def _plan(target):
    """(roots, [(source, filename, package)]) of the program named by target
    (SCRIPT ..., -m MODULE ..., -c CODE ...)."""
    cwd = os.path.realpath(os.getcwd())
    if not target:
        return [cwd], []
    if target[0] == "-c" and len(target) > 1:
        return [cwd], [(target[1], "<string>", None)]
    if target[0] == "-m" and len(target) > 1:
        f = _module_file(target[1], [cwd])
        if not f:
            return [cwd], []
        try:
            with open(f, "rb") as fh:
                return [cwd], [(fh.read(), f, target[1].rpartition(".")[0])]
        except OSError:
            return [cwd], []
    script = target[0]
    root = os.path.realpath(os.path.dirname(os.path.abspath(script)))
    try:
        with open(script, "rb") as fh:
            return [root], [(fh.read(), script, None)]
    except OSError:
        return [root], []


def preload(target):
    """Imports the installed modules the program imports at its top level.
    Returns (imported, failed) names."""
    roots, sources = _plan(target)
    saved = sys.path[0] if sys.path else None
    if sys.path and target and target[0] not in ("-m", "-c"):
        sys.path[0] = roots[0]  # as the trial sees it: the script's folder first
    seen, names = set(), []
    for src, fn, pkg in sources:
        _scan(src, fn, roots, pkg, seen, names)
    imported, failed = [], []
    for name in names:
        if name in sys.modules:
            if "." not in name and name not in imported and name not in STDLIB:
                imported.append(name)  # loaded already (by an earlier import)
            continue
        if "." in name:
            if name.split(".")[0] not in sys.modules:
                continue  # its package is the program's own, or failed
            try:
                if importlib.util.find_spec(name) is None:
                    continue  # `from pkg import name`: an attribute, not a module
            except (ImportError, ValueError, AttributeError):
                continue
        try:
            importlib.import_module(name)
            imported.append(name)
        except (Exception, SystemExit) as e:  # the trial meets the same error itself
            failed.append("%s (%s)" % (name, type(e).__name__))
    if saved is not None:
        sys.path[0] = saved
    return imported, failed


# ---- is forking safe ---------------------------------------------------------------------


def unsafe_reason():
    """Why a child forked now could not be trusted, or None."""
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if others:
        return "the imports started Python threads (%s)" % ", ".join(sorted(others)[:5])
    torch = sys.modules.get("torch")
    for dev in ("cuda", "xpu"):
        mod = getattr(torch, dev, None) if torch is not None else None
        init = getattr(mod, "is_initialized", None)
        try:
            if callable(init) and init():
                return "the imports initialised %s (torch.%s.is_initialized())" % (dev.upper(), dev)
        except Exception:
            pass
    try:
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink("/proc/self/fd/" + fd)
            except OSError:
                continue
            if target.startswith(DEVICE_FILES):
                return "the imports opened a device (%s)" % target
    except OSError:
        pass
    return None


def native_threads():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def resident_file_pages():
    """The runs (address, length) of file-backed pages resident in this
    process: a forked child's page tables lack most of them (the kernel does
    not copy those of shared text), which a fresh interpreter's footprint
    counts, so each child makes them resident again."""
    runs = []
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        with open("/proc/self/maps") as maps, open("/proc/self/pagemap", "rb") as pm:
            for line in maps:
                f = line.split()
                if len(f) < 6 or not f[5].startswith("/") or f[5].startswith("/dev/") or "r" not in f[1]:
                    continue
                lo, hi = (int(x, 16) for x in f[0].split("-"))
                n = (hi - lo) // page
                pm.seek(lo // page * 8)
                ent = array.array("Q")
                ent.frombytes(pm.read(n * 8))
                start = None
                for i, v in enumerate(ent):
                    if v >> 63:
                        if start is None:
                            start = i
                    elif start is not None:
                        runs.append((lo + start * page, (i - start) * page))
                        start = None
                if start is not None:
                    runs.append((lo + start * page, (len(ent) - start) * page))
    except (OSError, ValueError):
        return []
    return runs


def _make_resident(runs):
    if not runs:
        return
    import ctypes
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
        madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        if all(madvise(a, n, MADV_POPULATE_READ) == 0 for a, n in runs):
            return
    except (OSError, AttributeError):
        pass
    for a, n in runs:  # kernels before 5.14: touch each page
        for p in range(a, a + n, page):
            try:
                ctypes.c_char.from_address(p).value
            except (ValueError, OSError):
                break


# ---- warm imports: what the program's first steps import lazily ---------------------------

# Modules a program's first steps import inside a function (at their first
# use), by the package whose code imports them, and the version of that
# package from which it does: the server imports them once it holds the
# package, so a forked child finds them in sys.modules (docs/accept.md).
LAZY_IMPORTS = (
    # torch >= 2: every optimizer's step() is wrapped by
    # _use_grad_for_differentiable (torch/optim/optimizer.py), whose first
    # line is `import torch._dynamo`: 4-5 s of a forked trial on the H200.
    ("torch", (2,), "torch._dynamo"),
)
WARM_VAR = "DEVGATE_FORKSRV_WARM"    # more modules to warm, comma-separated
LEARN_VAR = "DEVGATE_FORKSRV_LEARN"  # 0: children do not teach the server
WARM_BUDGET_S = 120.0                # the checker children of one warm, at most
CHECK_PASSES = 4                     # checker children per warm, at most
LEARN_MAX = 4000                     # names a child reports, at most
PIPE_BYTES = 1 << 20                 # the learn pipe's capacity asked for
NOT_LEARNED = ("devgate_probe",)     # devgate's own, never warmed
REPORT_MAX = 200                     # names of each kind in a report, at most


def _version(mod):
    """The leading numbers of mod.__version__: "2.11.0+cu130" (2, 11, 0), "1.13.0a0" (1, 13, 0)."""
    out = []
    for part in str(getattr(mod, "__version__", "")).split("+")[0].split("."):
        n = len(part) - len(part.lstrip("0123456789"))
        if not n:
            break
        out.append(int(part[:n]))
    return tuple(out)


def warm_candidates():
    """The lazy imports of the loaded packages (LAZY_IMPORTS) and the names in
    DEVGATE_FORKSRV_WARM, those not loaded yet."""
    names = []
    for pkg, since, name in LAZY_IMPORTS:
        mod = sys.modules.get(pkg)
        if mod is None or _version(mod) < since:
            continue
        try:
            if importlib.util.find_spec(name) is None:  # its package is loaded: imports nothing
                continue
        except (ImportError, ValueError, AttributeError):
            continue
        names.append(name)
    names += [n.strip() for n in os.environ.get(WARM_VAR, "").split(",") if n.strip()]
    out = []
    for n in names:
        if n not in sys.modules and n not in out:
            out.append(n)
    return out


def _import_checked(names, roots):
    """Imports names in order; each one not loaded already by an earlier one
    is followed by unsafe_reason(). Stops at the first that makes forking
    unsafe. Returns {"ok": [imported], "failed": ["name (Exc: msg)"],
    "unsafe": [name, why] | None, "rest": [names after it]}."""
    ok, failed = [], []
    for i, name in enumerate(names):
        if name in sys.modules:
            continue
        try:
            spec = importlib.util.find_spec(name)
            where = _spec_path(spec)
            if spec is None:
                failed.append("%s (not found)" % name)
                continue
            if where and _under(where, roots):
                failed.append("%s (the program's own module)" % name)
                continue
            importlib.import_module(name)
        except (Exception, SystemExit) as e:
            failed.append("%s (%s: %s)" % (name, type(e).__name__, str(e)[:120]))
            continue
        ok.append(name)
        why = unsafe_reason()
        if why:
            return {"ok": ok[:-1], "failed": failed, "unsafe": [name, why], "rest": names[i + 1:]}
    return {"ok": ok, "failed": failed, "unsafe": None, "rest": []}


def _read_all(fd, deadline):
    """What fd gives until its end; None when the deadline passed first."""
    import select
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        r, _w, _x = select.select([fd], [], [], left)
        if not r:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return data
        data += chunk


def _checker(names, roots, keep_closed, deadline):
    """Forks a checker child that imports names as _import_checked does and
    reports over a pipe; the server's own state is untouched. Returns its
    report, or one whose `unsafe` says why the check gave none."""
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the checker: never returns
        try:
            os.close(r)
            _prctl_deathsig()
            for fd in keep_closed:
                try:
                    os.close(fd)
                except OSError:
                    pass
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            data = json.dumps(_import_checked(names, roots)).encode("utf-8")
            while data:
                data = data[os.write(w, data):]
        finally:
            os._exit(0)
    os.close(w)
    try:
        data = _read_all(r, deadline)
    finally:
        os.close(r)
    if data is None:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    os.waitpid(pid, 0)
    try:
        rep = json.loads(data.decode("utf-8")) if data else None
    except ValueError:
        rep = None
    if data is None:
        why = "the check took longer than the %.0f s a warm may take" % WARM_BUDGET_S
    elif not isinstance(rep, dict):
        why = "the checker child ended without a report"
    else:
        return rep
    return {"ok": [], "failed": [], "unsafe": [names[0] if names else "", why], "rest": []}


class Warmer:
    """Imports modules in the server only after a checker child has imported
    them and found the server would stay forkable; a name that failed or made
    it unsafe is never tried again."""

    def __init__(self, roots, keep_closed, path0, tried=None):
        self.roots = roots
        self.keep_closed = keep_closed
        self.path0 = path0
        self.tried = set() if tried is None else tried
        self.imported, self.failed, self.refused = [], [], []
        self.seconds = 0.0
        self.checked = False

    def report(self):
        return {"imports": self.imported[:REPORT_MAX], "failed": self.failed[:REPORT_MAX],
                "refused": self.refused[:REPORT_MAX],
                "s": round(self.seconds, 3) if self.checked else None}

    def warm(self, names):
        """Warms names (in order); returns why the server itself became unsafe
        after (it should not: the checker saw the same imports), or None."""
        names = [n for n in names if n not in self.tried and n not in sys.modules]
        if not names:
            return None
        t0 = time.monotonic()
        self.checked = True
        saved = sys.path[0] if sys.path else None
        if self.path0 is not None and saved is not None:
            sys.path[0] = self.path0  # as a trial resolves a name
        try:
            return self._warm(names)
        finally:
            if saved is not None:
                sys.path[0] = saved
            gc.collect()
            self.seconds += time.monotonic() - t0

    def _warm(self, names):
        deadline = time.monotonic() + WARM_BUDGET_S
        for _ in range(CHECK_PASSES):
            if not names or time.monotonic() >= deadline:
                break
            rep = _checker(names, self.roots, self.keep_closed, deadline)
            ok = [n for n in rep.get("ok") or [] if isinstance(n, str)]
            bad = rep.get("unsafe")
            self.failed += [str(f) for f in rep.get("failed") or []]
            self.tried.update(n for n in names if n not in (rep.get("rest") or []))
            if bad:
                self.refused.append("%s: %s" % (bad[0], bad[1]))
            got = _import_checked(ok, self.roots)  # the same imports, in the same order
            self.imported += got["ok"]
            self.failed += got["failed"]
            if got["unsafe"]:
                self.imported.append(got["unsafe"][0])
                return "the warm import of %s: %s" % tuple(got["unsafe"])
            names = [n for n in rep.get("rest") or [] if n not in self.tried]
        self.tried.update(names)
        return None


def _learnable(name, mod, before, roots):
    """True when the child imported name after the fork and it is a submodule
    of a package the server had imported (not the program's own, not devgate's)."""
    if name in before or "." not in name or name.startswith("__"):
        return False
    top = name.split(".", 1)[0]
    if top not in before or top in NOT_LEARNED:
        return False
    if not isinstance(mod, type(sys)) or getattr(mod, "__spec__", None) is None:
        return False
    where = getattr(mod, "__file__", None)
    return not (where and _under(where, roots))


def _teach_at_exit(wfd, before, roots):
    """In the forked child: at its exit (atexit: a child killed by a signal
    sends nothing), writes to the learn pipe the modules it imported that the
    server could warm, in the order they were imported."""
    import atexit
    me = os.getpid()

    def teach():
        if os.getpid() != me:
            return  # a process forked by the program (a DataLoader worker)
        try:
            names = [n for n, m in list(sys.modules.items()) if _learnable(n, m, before, roots)]
            data = json.dumps(names[:LEARN_MAX]).encode("utf-8")
            os.set_blocking(wfd, False)
            os.write(wfd, data)  # all or part: the pipe was emptied before the fork
        except (OSError, ValueError, TypeError):
            pass
        finally:
            try:
                os.close(wfd)
            except OSError:
                pass

    atexit.register(teach)


def _learn_pipe():
    """A pipe for a child's report, both ends above 9 (clear of the
    descriptors _child places), as large as the system lets it be."""
    import fcntl
    r, w = os.pipe()
    ends = []
    for fd in (r, w):
        ends.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10))
        os.close(fd)
    try:
        fcntl.fcntl(ends[1], getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    except OSError:
        pass
    return ends[0], ends[1]


def _learned(rfd):
    """The names a child wrote to the learn pipe (read once it has ended)."""
    data = b""
    os.set_blocking(rfd, False)
    try:
        while True:
            chunk = os.read(rfd, 1 << 16)
            if not chunk:
                break
            data += chunk
    except (BlockingIOError, OSError):
        pass
    os.close(rfd)
    try:
        names = json.loads(data.decode("utf-8")) if data else []
    except ValueError:
        # A report cut at the pipe's capacity: the names before the cut.
        text = data.decode("utf-8", "replace")
        names = json.loads(text[:text.rfind('",') + 1] + "]") if '",' in text else []
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


# ---- one trial ---------------------------------------------------------------------------


def refusal(req, env0, nprefix):
    if len(req.get("argv") or []) <= nprefix:
        return "the request names no program"
    env = dict(e.split("=", 1) for e in req.get("env", []) if "=" in e)
    for k in sorted(set(env) | set(env0)):
        if env.get(k) != env0.get(k) and not k.startswith(SAME_AFTER_FORK) and k not in DEVICE_VARS:
            return "the trial's environment differs from the fork server's in %s" % k
    return None


def _prctl_deathsig():
    try:
        import ctypes
        import signal
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _env_set(env0):
    """The variables the server's warm imports set (absent from env0 or
    changed): a child keeps them where its own environment has none, as a
    fresh interpreter has them once it has made the same imports."""
    return {k: v for k, v in os.environ.items() if env0.get(k) != v}


def _child(req, fds, ctl, server_pid, runs, warm_env):
    """In the forked child: becomes the trial, then runs its program as the
    interpreter would. Returns only through the program's SystemExit or
    exception (the interpreter's normal exit: threads joined, atexit, flush)."""
    forked = time.time()
    os.setpgid(0, 0)
    _prctl_deathsig()
    if os.getppid() != server_pid:
        os._exit(137)  # the server died before the death signal was armed
    null = os.open(os.devnull, os.O_RDONLY)  # before fd 3 is free: every source is above 3
    os.close(ctl)
    for i, fd in enumerate([null] + list(fds[:3])):
        os.dup2(fd, i, inheritable=True)
    for fd in set([null] + list(fds)):
        if fd > 3:
            os.close(fd)
    if "as_limit" in req and req["as_limit"]:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        lim = int(req["as_limit"])
        if hard != resource.RLIM_INFINITY and lim > hard:
            lim = hard
        resource.setrlimit(resource.RLIMIT_AS, (lim, hard))
    env = dict(e.split("=", 1) for e in req.get("env", []) if "=" in e)
    for k in list(os.environ):
        if k not in env:
            del os.environ[k]
    for k, v in env.items():
        if os.environ.get(k) != v:
            os.environ[k] = v
    for k, v in warm_env.items():
        if k not in env:
            os.environ[k] = v
    _make_resident(runs)
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed()  # a fresh interpreter seeds numpy's global generator from the OS
        except Exception:
            pass
    try:
        sys.stdout.reconfigure(line_buffering=os.isatty(1) and not sys.flags.unbuffered)
    except (AttributeError, ValueError, OSError):
        pass
    argv = list(req["argv"])
    sys.orig_argv = argv
    # The run's timeline: the zero-code probe sends these with its own marks.
    pkg = sys.modules.get(__package__ or "devgate_probe")
    if pkg is not None:
        pkg._fork_marks = {"forked": forked, "child_ready": time.time()}
    return argv


def _run_tail(tail):
    """The interpreter's own handling of `python [OPTIONS] TAIL`."""
    import builtins
    import runpy
    import types
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    if tail[0] == "-c":
        sys.argv = ["-c"] + tail[2:]
        if sys.path:
            sys.path[0] = ""
        exec(compile(tail[1], "<string>", "exec"), main.__dict__)
    elif tail[0] == "-m":
        sys.argv = [tail[1]] + tail[2:]
        runpy._run_module_as_main(tail[1], alter_argv=True)
    else:
        sys.argv = list(tail)
        if sys.path:
            sys.path[0] = os.path.dirname(os.path.realpath(tail[0]))
        runpy.run_path(tail[0], run_name="__main__")
    return 0


def _trial(tail):
    """Runs the trial's program; an exception that ends it is shown as the
    interpreter shows one (sys.excepthook, exit status 1) without this
    module's frames, so its traceback reads as a fresh interpreter's."""
    try:
        return _run_tail(tail)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as e:  # noqa: B036 (the interpreter's own top level)
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == _run_tail.__code__.co_filename:
            tb = tb.tb_next
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        raise SystemExit(1)


def _trial_path0(target, roots):
    """sys.path[0] as a trial of target sees it: the script's folder (else
    None: the working folder, or "" for -c, as the server has it already)."""
    return roots[0] if target and target[0] not in ("-m", "-c") else None


def serve(sock, nprefix, target):
    t0 = time.monotonic()
    imported, failed = preload(target)
    import_s = time.monotonic() - t0
    gc.collect()
    why = unsafe_reason()
    roots = _plan(target)[0]
    # The environment a trial's is compared with: the one before the warm
    # imports, which may set variables (torch._dynamo: TORCHINDUCTOR_CACHE_DIR).
    env0 = dict(os.environ)
    warm = Warmer(roots, [sock.fileno()], _trial_path0(target, roots))
    if why is None:
        why = warm.warm(warm_candidates())
    learn = Warmer(roots, [sock.fileno()], warm.path0, tried=warm.tried)
    learning = os.environ.get(LEARN_VAR, "1") != "0"
    runs = [] if why else resident_file_pages()
    me = os.getpid()
    _send(sock, {"ready": why is None, "why": why, "pid": me, "python": sys.executable,
                 "version": sys.version.split()[0], "imported": imported, "failed": failed,
                 "import_s": round(import_s, 3), "native_threads": native_threads(),
                 "resident_runs": len(runs), "warm_imports": warm.imported,
                 "warm_failed": warm.failed[:REPORT_MAX],
                 "warm_refused": "; ".join(warm.refused) or None,
                 "warm_s": round(warm.seconds, 3) if warm.checked else None,
                 "learning": learning})
    if why:
        return 0
    while True:
        try:
            req, fds = _recv(sock)
        except (OSError, ValueError):
            return 0
        if req is None:
            return 0
        no = refusal(req, env0, nprefix) if len(fds) == 3 else "the request carried no descriptors"
        no = no or (why and "forking became unsafe: %s" % why)
        if no:
            for fd in fds:
                os.close(fd)
            _send(sock, {"refused": no})
            continue
        pipe = _learn_pipe() if learning else None
        sys.stdout.flush()
        sys.stderr.flush()
        with warnings.catch_warnings():
            # Python 3.12+ warns about fork in a process with threads: OpenBLAS's
            # pool, which shuts itself down around a fork.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            before = set(sys.modules)
            ctl = sock.detach()  # _child closes it once its descriptors are placed
            argv = _child(req, fds, ctl, me, runs, _env_set(env0))
            if pipe:
                os.close(pipe[0])
                _teach_at_exit(pipe[1], before, roots)
            _site_hooks(argv[nprefix:])
            return _trial(argv[nprefix:])
        for fd in fds + list(pipe[1:] if pipe else []):
            os.close(fd)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass  # the child did it first, or has already ended
        _send(sock, {"pid": pid, "learned": learn.report()})
        _pid, status = os.waitpid(pid, 0)
        _send(sock, {"exit": pid, "status": status})
        if pipe:
            # Before the next fork: what this child imported, checked and warmed.
            n = len(learn.imported)
            why = learn.warm(_learned(pipe[0]))
            if len(learn.imported) > n and not why:
                runs = resident_file_pages()


def _unshim():
    """Takes _forksite (the stand-in for the user's sitecustomize and
    usercustomize while the server started) off the path and restores
    PYTHONPATH, so each child runs the user's own start-up hooks (_child)."""
    shim = os.environ.pop("DEVGATE_FORKSRV_SHIM", None)
    orig = os.environ.pop("DEVGATE_FORKSRV_PYTHONPATH", None)
    if not shim:
        return
    real = os.path.realpath(shim)
    sys.path[:] = [p for p in sys.path if not p or os.path.realpath(p) != real]
    for name in ("sitecustomize", "usercustomize"):
        if getattr(sys.modules.get(name), "DEVGATE_FORKSRV_SHIM", False):
            del sys.modules[name]
    if orig is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = orig


def _site_hooks(tail):
    """The user's sitecustomize and usercustomize, run as the interpreter runs
    them at its start (sys.argv as it is then), in the child only."""
    if sys.flags.no_site:
        return
    import site
    if tail[0] in ("-m", "-c"):
        sys.argv = [tail[0]] + tail[2:]
    else:
        sys.argv = list(tail)
    site.execsitecustomize()
    if getattr(site, "ENABLE_USER_SITE", False):
        site.execusercustomize()


def main():
    _unshim()
    fd = int(os.environ.pop("DEVGATE_FORKSRV_FD", "-1"))
    if fd < 0:
        sys.stderr.write("devgate_probe.forkserver: started by devgate only (DEVGATE_FORKSRV_FD)\n")
        return 2
    sock = socket.socket(fileno=fd)
    nprefix = int(os.environ.pop("DEVGATE_FORKSRV_PREFIX", "1"))
    return serve(sock, nprefix, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
