"""devgate's sitecustomize: arms the zero-code probe in Python processes that
`devgate run` could not start through `python -m devgate_probe.auto`
(torchrun, accelerate launch, a shell wrapper). devgate puts this directory
and the one holding devgate_probe on PYTHONPATH. It then runs the
sitecustomize this one hides (the distribution's own, e.g. Debian's), so
nothing the interpreter would have done is lost. The probe stays inactive in
multiprocessing children (DataLoader workers) and in processes that never
train (the launcher itself): it only reports once an optimizer steps.
"""


def _chain():
    """Runs the next sitecustomize on sys.path after this file's directory."""
    import importlib.machinery
    import importlib.util
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = mod
    spec.loader.exec_module(mod)


def _arm():
    import os
    if os.environ.get("DEVGATE_PROBE", "auto") != "auto":
        return
    try:
        from devgate_probe import _zero
        _zero.install()
    except Exception as e:  # never break the interpreter's start-up
        import sys
        sys.stderr.write("devgate_probe: zero-code probe not armed (%s)\n" % e)


try:
    _arm()
finally:
    _chain()
