"""An installed package whose heavy parts are imported lazily, at a program's
first step (as torch's optimizers import torch._dynamo): warm_train.py imports
this package at its top and lazylib.slow and lazylib.threads inside its loop.
tests/cli/test_accept_cmd_warm.sh copies this folder out of the script's and
puts it on PYTHONPATH. Each submodule appends "NAME PID" to the file named by
DGT_MARKS when it is imported: which processes paid its import."""
import os


def mark(name):
    path = os.environ.get("DGT_MARKS")
    if path:
        with open(path, "a") as f:
            f.write("%s %d\n" % (name, os.getpid()))
