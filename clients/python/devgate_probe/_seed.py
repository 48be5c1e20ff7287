"""Seeding every random source: Python's random, numpy, torch (cpu and cuda),
and each DataLoader worker."""

import importlib
import os
import random
import sys

# The hash seed this interpreter started with (PYTHONHASHSEED is read once, at
# start-up; setting it later only reaches child processes).
_STARTUP_HASH_SEED = os.environ.get("PYTHONHASHSEED")
_last_seeds = None


def _module(name):
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def _seed_numpy(np, seed):
    np.random.seed(seed % (2 ** 32))


class WorkerSeeder:
    """worker_init_fn for torch.utils.data.DataLoader: worker w seeds random,
    numpy and torch with seed + w. A plain class, so it pickles for the "spawn"
    start method (macOS, Windows)."""

    def __init__(self, seed):
        self.seed = int(seed)

    def __call__(self, worker_id):
        s = self.seed + int(worker_id)
        random.seed(s)
        np = _module("numpy")
        if np is not None:
            _seed_numpy(np, s)
        torch = _module("torch")
        if torch is not None:
            torch.manual_seed(s)

    def __repr__(self):
        return "WorkerSeeder(%d)" % self.seed


def seed_everything(seed):
    """Seeds random, numpy (when importable) and torch (when importable; cpu,
    and cuda lazily), and sets PYTHONHASHSEED for child processes (this
    interpreter's own str hashing was fixed at start-up: run it with
    PYTHONHASHSEED set to make that repeat too). Returns a WorkerSeeder to pass
    as DataLoader(worker_init_fn=...). Emits no event; a later run_start records
    the seeds (the "python_hash" key holds the start-up PYTHONHASHSEED or null)."""
    global _last_seeds
    seed = int(seed)
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed % (2 ** 32))
    np = _module("numpy")
    if np is not None:
        _seed_numpy(np, seed)
    torch = _module("torch")
    if torch is not None:
        torch.manual_seed(seed)
        try:
            torch.cuda.manual_seed_all(seed)  # lazy: no CUDA initialisation here
        except Exception:
            pass
    hash_seed = _STARTUP_HASH_SEED
    _last_seeds = {
        "torch": seed if torch is not None else None,
        "numpy": seed if np is not None else None,
        "random": seed,
        "workers": seed,
        "python_hash": int(hash_seed) if hash_seed and hash_seed.isdigit() else None,
    }
    return WorkerSeeder(seed)


def last_seeds():
    """The seeds of the latest seed_everything call (a dict), or None."""
    return dict(_last_seeds) if _last_seeds else None
