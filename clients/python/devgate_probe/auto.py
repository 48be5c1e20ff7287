"""python -m devgate_probe.auto [-m MODULE | -c CODE | SCRIPT] [ARGS...]

Runs a Python program unmodified with the zero-code probe armed (see
devgate_probe._zero), the way `python -m cProfile` runs one: the hooks are in
place before the program imports torch, sys.argv and __main__ are the
program's, and its exit status is passed through. `devgate run -- python
SCRIPT ARGS` starts the program this way (`--probe auto`, the default).
Without DEVGATE_EVENTS_FD or DEVGATE_EVENTS_FILE the program just runs.
"""

import os
import runpy
import sys
import types

from . import _zero


def _usage():
    sys.stderr.write("usage: python -m devgate_probe.auto [-m MODULE | -c CODE | SCRIPT] [ARGS...]\n")
    return 2


def _reach_descendants():
    """Puts devgate's sitecustomize first on PYTHONPATH for the processes this
    program starts: a launcher's worker (subprocess with the same
    interpreter), multiprocessing's spawned children. The probe arms there
    and reports only from a process that steps an optimizer."""
    if os.environ.get("DEVGATE_PROBE", "auto") != "auto":
        return
    site = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_site")
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if site not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([site] + parts)


def _exit_now(code):
    """The interpreter's exit path up to its module teardown, then the exit
    (DEVGATE_PROBE_FAST_EXIT, a run the probe stopped): non-daemon threads
    joined, every atexit handler run once (multiprocessing's ends the
    DataLoader's workers, logging's flushes its files), the files still open
    flushed, then os._exit. The teardown of torch's thousands of modules and
    objects, which only frees memory the exit frees anyway, is skipped."""
    import atexit
    import gc
    import io
    import threading
    import warnings
    try:
        threading._shutdown()
    except Exception:
        pass
    atexit._run_exitfuncs()
    # type(), not isinstance(): isinstance reads __class__, which on some
    # objects is a deprecated attribute that warns into the program's stderr
    # (torch.distributed.reduce_op on torch 2.11); and no warning of ours
    # reaches the program's output anyway.
    files = (io.BufferedWriter, io.BufferedRandom, io.TextIOWrapper)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for f in gc.get_objects():
            try:
                if issubclass(type(f), files) and not f.closed:
                    f.flush()
            except Exception:
                pass
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    os._exit(code if isinstance(code, int) else 1)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        return _usage() if not argv else (sys.stdout.write(__doc__) and 0)
    if argv[0] == "-m":
        if len(argv) < 2:
            return _usage()
        kind, target, rest = "module", argv[1], argv[2:]
        sys.argv = [target] + rest
    elif argv[0] == "-c":
        if len(argv) < 2:
            return _usage()
        kind, target, rest = "code", argv[1], argv[2:]
        sys.argv = ["-c"] + rest
    else:
        kind, target, rest = "script", argv[0], argv[1:]
        if not os.path.exists(target):
            sys.stderr.write("devgate_probe.auto: can't open file %r: no such file\n" % target)
            return 2
        sys.argv = [target] + rest
        # As `python SCRIPT`: the script's directory first on sys.path.
        sys.path[0] = os.path.dirname(os.path.abspath(target))
    _reach_descendants()
    _zero.install()
    status, message = "ok", None
    try:
        if kind == "module":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        elif kind == "code":
            sys.path[0] = ""
            # As `python -c`: the code runs as a __main__ module without a file (so the
            # bucket's script is "-c", and pickled __main__ names resolve), not inside
            # this module.
            main = types.ModuleType("__main__")
            main.__dict__["__builtins__"] = __builtins__
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        if e.code not in (0, None):
            status, message = "error", "SystemExit(%r)" % (e.code,)
        _zero.finish(status, message)
        if _zero.fast_exit_asked(e):
            _exit_now(e.code)
        raise
    except BaseException as e:
        _zero.oom_from(e)
        _zero.finish("error", "%s: %s" % (type(e).__name__, e))
        raise
    _zero.finish(status, message)
    return 0


if __name__ == "__main__":
    sys.exit(main())
