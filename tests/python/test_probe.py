"""Tests of clients/python/devgate_probe (run by tests/python/run_tests.sh).

StdlibTests need only the standard library; TorchTests need torch and are
skipped without it (the runner's "torch" mode then exits 77)."""

import io
import json
import math
import os
import pickle
import random
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import warnings
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CLIENT = os.path.join(ROOT, "clients", "python")
LEAKY = os.path.join(HERE, "scripts", "leaky_train.py")
if CLIENT not in sys.path:
    sys.path.insert(0, CLIENT)

import devgate_probe as dg  # noqa: E402
from devgate_probe.probe import Probe  # noqa: E402

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except Exception:
    HAVE_TORCH = False

MPS_WARNING = ("The operator 'aten::nonzero' is not currently supported on the MPS backend and will fall "
               "back to run on the CPU. This may have performance implications. (Triggered internally at "
               "aten/src/ATen/mps/MPSFallback.mm:11.)")
CPU_OOM = ("[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: you "
           "tried to allocate 137438953472 bytes. Error code 12 (Cannot allocate memory)")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVGATE_EVENTS")}
    env["PYTHONPATH"] = CLIENT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def run_py(code, env=None, pass_fds=(), timeout=120, args=()):
    return subprocess.run([sys.executable, "-c", code, *args], env=env or clean_env(), pass_fds=pass_fds,
                          capture_output=True, text=True, timeout=timeout)


def parse_lines(text):
    events = []
    for line in text.splitlines():
        ev = json.loads(line)
        events.append(ev)
    return events


def read_events(path):
    with open(path, encoding="utf-8") as f:
        return parse_lines(f.read())


def check_envelope(tc, ev):
    tc.assertEqual(ev["v"], 1)
    tc.assertIsInstance(ev["ev"], str)
    tc.assertIsInstance(ev["t"], float)
    tc.assertLess(abs(ev["t"] - time.time()), 600)


class FileProbeCase(unittest.TestCase):
    """A probe writing to a temporary DEVGATE_EVENTS_FILE."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "events.jsonl")
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEVGATE_EVENTS")}
        env["DEVGATE_EVENTS_FILE"] = self.path
        with mock.patch.dict(os.environ, env, clear=True):
            self.probe = Probe(label="test")
        self.assertTrue(self.probe.enabled)

    def tearDown(self):
        self.probe.close()
        self.tmp.cleanup()

    def events(self, ev=None):
        self.probe.flush()  # the steps emit_held holds (docs/events.md "held steps")
        out = read_events(self.path) if os.path.exists(self.path) else []
        return [e for e in out if ev is None or e["ev"] == ev]


class FakeTensor:
    """Stands in for a tensor: counts .item() calls."""

    def __init__(self, value):
        self.value = value
        self.items = 0

    def item(self):
        self.items += 1
        return self.value


class StdlibTests(FileProbeCase):
    def test_silent_without_env(self):
        code = (
            "import devgate_probe as dg, sys\n"
            "p = dg.Probe()\n"
            "assert not p.enabled\n"
            "p.run_start('cpu', 8); p.phase('train', 0)\n"
            "with p.epoch(0):\n"
            "    with p.step() as s: s.loss = 1.0\n"
            "p.sweep(lambda b: None, start=8, stop=16, steps=1, warmup=0)\n"
            "assert p.emit('custom', x=1) is None\n"
            "dg.run_start('cpu', 8); dg.run_end()\n"
            "print('done')\n")
        r = run_py(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "done\n")
        self.assertEqual(r.stderr, "")

    def test_file_gets_valid_lines(self):
        p = self.probe
        p.run_start("cpu", 32, bucket={"resolution": 224, "augment": "flip", "batch": 32, "data": "x"},
                    seeds={"torch": 1, "numpy": 1, "random": 1, "workers": 1})
        p.phase("train", 0)
        with p.epoch(0, validation=True):
            with p.step() as s:
                s.loss = 0.5
        p.fallback("aten::foo", "msg")
        p.oom(message="CUDA out of memory", batch=64, device="cuda:0")
        p.run_end("ok")
        evs = self.events()
        for e in evs:
            check_envelope(self, e)
        self.assertEqual([e["ev"] for e in evs],
                         ["run_start", "phase", "step", "epoch_end", "fallback", "oom", "run_end"])
        rs = evs[0]
        self.assertEqual(rs["device"], "cpu")
        self.assertEqual(rs["batch"], 32)
        self.assertEqual(rs["pid"], os.getpid())
        self.assertEqual(rs["label"], "test")
        self.assertEqual(rs["bucket"]["resolution"], 224)
        self.assertEqual(rs["seeds"]["torch"], 1)
        self.assertEqual(evs[3]["validation"], True)
        self.assertEqual(evs[5], dict(evs[5], device="cuda:0", batch=64))
        self.assertEqual(evs[6]["status"], "ok")
        with open(self.path, "rb") as f:
            raw = f.read()
        self.assertTrue(raw.endswith(b"\n"))
        self.assertNotIn(b"NaN", raw)

    def test_file_is_appended(self):
        with open(self.path, "w") as f:
            f.write('{"v":1,"ev":"phase","t":1.0,"name":"before","epoch":null}\n')
        self.probe.phase("after")
        self.assertEqual([e.get("name") for e in self.events()], ["before", "after"])

    def test_fd_from_a_pipe_in_a_subprocess(self):
        r, w = os.pipe()
        code = (
            "import devgate_probe as dg\n"
            "dg.run_start('cpu', 16)\n"
            "with dg.epoch(0):\n"
            "    dg.data_ready()\n"
            "    with dg.step() as s: s.loss = 2.5\n"
            "print('child done')\n")  # no run_end: the atexit hook sends it
        try:
            res = run_py(code, env=clean_env(DEVGATE_EVENTS_FD=str(w)), pass_fds=(w,))
        finally:
            os.close(w)
        with os.fdopen(r, "r", encoding="utf-8") as f:
            evs = parse_lines(f.read())
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertEqual(res.stderr, "")
        self.assertEqual([e["ev"] for e in evs], ["run_start", "step", "epoch_end", "run_end"])
        for e in evs:
            check_envelope(self, e)
        self.assertEqual(evs[1]["loss"], 2.5)
        self.assertIsNotNone(evs[1]["data_ms"])
        self.assertEqual(evs[3]["status"], "ok")
        self.assertIn("exit", evs[3]["message"])

    def test_uncaught_exception_ends_the_run_with_error(self):
        res = run_py("import devgate_probe as dg\ndg.run_start('cpu', 1)\nraise ValueError('boom')\n",
                     env=clean_env(DEVGATE_EVENTS_FILE=self.path))
        self.assertNotEqual(res.returncode, 0)
        end = self.events("run_end")
        self.assertEqual(len(end), 1)
        self.assertEqual(end[0]["status"], "error")
        self.assertIn("ValueError: boom", end[0]["message"])

    def test_context_manager_sends_run_end(self):
        with self.assertRaises(KeyError):
            with self.probe as p:
                p.run_start("cpu", 4)
                raise KeyError("x")
        end = self.events("run_end")
        self.assertEqual(end[0]["status"], "error")
        self.assertFalse(self.probe.enabled)  # closed on exit

    def test_broken_pipe_never_raises(self):
        code = (
            "import os, devgate_probe as dg\n"
            "r, w = os.pipe(); os.close(r)\n"
            "os.environ['DEVGATE_EVENTS_FD'] = str(w)\n"
            "p = dg.Probe()\n"
            "assert p.enabled\n"
            "p.run_start('cpu', 8)\n"
            "for i in range(100): p.phase('train', i)\n"
            "with p.epoch(1):\n"
            "    with p.step() as s: s.loss = 1.0\n"
            "assert not p.enabled\n"
            "p.run_end()\n"
            "print('alive')\n")
        res = run_py(code)
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertEqual(res.stdout, "alive\n")
        self.assertEqual(res.stderr.count("devgate_probe:"), 1, res.stderr)
        self.assertIn("Broken", res.stderr)

    def test_bad_descriptors_never_raise(self):
        r, w = os.pipe()
        try:
            for fd_text in ("987", "not-a-number", "-3", str(r)):  # closed, junk, negative, read-only
                res = run_py("import devgate_probe as dg\np = dg.Probe()\nassert not p.enabled\n"
                             "p.run_start('cpu', 1); p.run_end(); print('ok')\n",
                             env=clean_env(DEVGATE_EVENTS_FD=fd_text), pass_fds=(r,))
                self.assertEqual(res.returncode, 0, res.stderr)
                self.assertEqual(res.stdout, "ok\n")
                self.assertEqual(res.stderr.count("devgate_probe:"), 1, (fd_text, res.stderr))
        finally:
            os.close(r)
            os.close(w)

    def test_descriptor_closed_under_the_probe(self):
        r, w = os.pipe()
        try:
            with mock.patch.dict(os.environ, {"DEVGATE_EVENTS_FD": str(w)}):
                p = Probe()
            self.assertTrue(p.enabled)
            p.phase("train")
            os.close(w)
            with mock.patch("sys.stderr"):  # the one warning
                p.phase("train")  # EBADF
            self.assertFalse(p.enabled)
            p.run_end()
            self.assertEqual(os.read(r, 4096).count(b"\n"), 1)
        finally:
            os.close(r)

    def test_nan_and_infinity_become_null(self):
        self.probe.step_begin()
        rec = self.probe.step_end(loss=float("nan"))
        self.assertIsNotNone(rec)
        self.probe.run_start("cpu", 1, bucket={"x": float("inf"), "y": [1.0, float("-inf")]})
        step, start = self.events("step")[0], self.events("run_start")[0]
        self.assertIsNone(step["loss"])
        self.assertTrue(math.isfinite(step["step_ms"]))
        self.assertIsNone(start["bucket"]["x"])
        self.assertEqual(start["bucket"]["y"], [1.0, None])
        with open(self.path, "rb") as f:
            raw = f.read()
        self.assertNotIn(b"NaN", raw)
        self.assertNotIn(b"Infinity", raw)

    def test_loss_only_when_given(self):
        p = self.probe
        fake = FakeTensor(3.0)
        with p.epoch(0):
            with p.step():
                pass  # no loss
            with p.step() as s:
                s.loss = 1.25  # a float
            with p.step() as s:
                s.loss = fake  # a tensor-like: not read
            with p.step(read_loss=True) as s:
                s.loss = fake  # read when asked
        steps = self.events("step")
        self.assertEqual([e["loss"] for e in steps], [None, 1.25, None, 3.0])
        self.assertEqual([e["synced"] for e in steps], [False, False, False, True])
        self.assertEqual(fake.items, 1)

    def test_step_timing_and_counting(self):
        p = self.probe

        def slow_batches(n):
            for i in range(n):
                time.sleep(0.02)
                yield i

        with p.epoch(0):
            for _ in p.timed_loader(slow_batches(2)):
                with p.step():
                    time.sleep(0.01)
        with p.epoch(1):
            time.sleep(0.02)
            p.data_ready()
            p.step_begin(sync=True)
            time.sleep(0.01)
            p.step_end(loss=0.5, batch=16)
            p.step_begin()
            p.step_end()
        self.assertIsNone(p.step_end())  # no step_begin: nothing sent
        steps = self.events("step")
        self.assertEqual([(e["epoch"], e["step"]) for e in steps], [(0, 0), (0, 1), (1, 0), (1, 1)])
        for e in steps[:3]:
            self.assertGreaterEqual(e["step_ms"], 9.0)
            self.assertGreaterEqual(e["data_ms"], 15.0)
        self.assertIsNone(steps[3]["data_ms"])  # no data_ready for it
        self.assertEqual([e["synced"] for e in steps], [False, False, True, False])
        self.assertEqual(steps[2]["batch"], 16)
        self.assertNotIn("batch", steps[0])

    def test_epoch_context_on_cpu(self):
        with self.probe.epoch(3) as ep:
            pass
        e = self.events("epoch_end")[0]
        self.assertEqual(e["epoch"], 3)
        self.assertGreater(e["footprint"], 0)
        self.assertIs(e["cache_emptied"], True)
        self.assertIs(e["validation"], False)
        for key in ("allocated", "reserved", "max_allocated", "driver"):
            self.assertIn(key, e)
            self.assertIsNone(e[key])
        self.assertEqual(ep.record["footprint"], e["footprint"])
        with self.probe.epoch(4, empty_cache=False):
            pass
        self.assertIs(self.events("epoch_end")[1]["cache_emptied"], False)

    def test_oom_in_an_epoch_is_reported_and_propagates(self):
        with self.assertRaises(MemoryError):
            with self.probe.epoch(0):
                with self.probe.step():
                    raise MemoryError()
        with self.assertRaises(ValueError):
            with self.probe.epoch(1):
                raise ValueError("not an oom")
        self.assertEqual(len(self.events("oom")), 1)  # once, by the step
        self.assertEqual(self.events("oom")[0]["device"], "cpu")
        self.assertEqual(self.events("epoch_end"), [])
        self.assertEqual(self.events("step"), [])

    def test_fallback_capture(self):
        seen = []
        prev = warnings.showwarning

        def user_hook(message, category, filename, lineno, file=None, line=None):
            seen.append(str(message))

        try:
            warnings.showwarning = user_hook
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                warnings.showwarning = user_hook  # catch_warnings saved the outer one
                with self.probe.capture_fallbacks():
                    for _ in range(3):
                        warnings.warn(MPS_WARNING, UserWarning)
                    warnings.warn(MPS_WARNING.replace("aten::nonzero", "aten::_unique2"), UserWarning)
                    warnings.warn("an unrelated warning", UserWarning)
                self.assertIs(warnings.showwarning, user_hook)  # restored
        finally:
            warnings.showwarning = prev
        fb = self.events("fallback")
        self.assertEqual([e["op"] for e in fb], ["aten::nonzero", "aten::_unique2"])
        self.assertEqual({e["device"] for e in fb}, {"mps"})
        self.assertTrue(fb[0]["message"].startswith("The operator 'aten::nonzero'"))
        self.assertEqual(self.probe.fallback_counts, {"aten::nonzero": 3, "aten::_unique2": 1})
        self.assertEqual(len(seen), 5)  # every warning still reached the previous hook
        self.assertEqual(dg.fallback_op("The operator 'aten::foo' is not currently implemented for the MPS device."),
                         "aten::foo")

    def test_sweep_stops_at_cpu_oom(self):
        calls = []

        def step_fn(batch):
            calls.append(batch)
            if batch >= 64:
                raise RuntimeError(CPU_OOM)

        out = self.probe.sweep(step_fn, start=8, device="cpu", steps=3, warmup=1)
        self.assertEqual([t["batch"] for t in out["trials"]], [8, 16, 32, 64])
        self.assertEqual([t["ended"] for t in out["trials"]], ["ok", "ok", "ok", "device-oom"])
        self.assertEqual(out["best_batch"], 32)
        self.assertEqual(max(calls), 64)
        self.assertEqual(calls.count(8), 4)  # warmup + steps
        trials = self.events("sweep_trial")
        self.assertEqual(len(trials), 4)
        for t in trials[:3]:
            self.assertGreater(t["samples_per_s"], 0)
            self.assertGreaterEqual(t["step_ms"], 0)
            self.assertGreater(t["peak_bytes"], 0)
            self.assertIsNone(t["reason"])
        self.assertIn("DefaultCPUAllocator", trials[3]["reason"])
        self.assertIsNone(trials[3]["samples_per_s"])
        oom = self.events("oom")
        self.assertEqual(len(oom), 1)
        self.assertEqual((oom[0]["device"], oom[0]["batch"]), ("cpu", 64))

    def test_sweep_stop_and_other_errors(self):
        out = self.probe.sweep(lambda b: None, start=8, stop=32, steps=1, warmup=0)
        self.assertEqual([t["batch"] for t in out["trials"]], [8, 16, 32])
        self.assertEqual(out["best_batch"], 32)

        def bad(batch):
            raise ValueError("shape mismatch")

        out = self.probe.sweep(bad, start=8)
        self.assertEqual([t["ended"] for t in out["trials"]], ["failed"])
        self.assertIsNone(out["best_batch"])

        def memerr(batch):
            if batch > 8:
                raise MemoryError()

        out = self.probe.sweep(memerr, start=8)
        self.assertEqual([t["ended"] for t in out["trials"]], ["ok", "device-oom"])
        self.assertEqual(len(self.events("oom")), 1)

    def test_oom_recognition(self):
        self.assertEqual(dg.oom_device(RuntimeError(CPU_OOM)), "cpu")
        self.assertEqual(dg.oom_device(RuntimeError("DefaultCPUAllocator: not enough memory: you tried")), "cpu")
        self.assertEqual(dg.oom_device(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")), "cuda")
        self.assertEqual(dg.oom_device(RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)")), "mps")
        self.assertEqual(dg.oom_device(MemoryError()), "cpu")
        self.assertIsNone(dg.oom_device(RuntimeError("size mismatch")))
        self.assertIsNone(dg.oom_device(ValueError("CUDA out of memory")))  # not a RuntimeError

    def test_gate_without_torch(self):
        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "torch"))
            with open(os.path.join(d, "torch", "__init__.py"), "w") as f:
                f.write("raise ImportError('no torch here')\n")
            env = clean_env(DEVGATE_EVENTS_FILE=self.path)
            env["PYTHONPATH"] = d + os.pathsep + env["PYTHONPATH"]
            res = run_py("import devgate_probe as dg\nfor d in ('cpu', 'cuda', 'mps'):\n"
                         "    r = dg.gate(d)\n    assert r['built'] is False and r['available'] is False, r\n"
                         "print('ok')\n", env=env)
        self.assertEqual(res.returncode, 0, res.stderr)
        gates = self.events("gate")
        self.assertEqual([g["device"] for g in gates], ["cpu", "cuda", "mps"])
        for g in gates:
            self.assertTrue(g["reason"].startswith("torch not importable"), g)
            self.assertIsNone(g["matmul"])

    def test_seed_everything_stdlib(self):
        fn = dg.seed_everything(5)
        a = [random.random() for _ in range(3)]
        dg.seed_everything(5)
        self.assertEqual(a, [random.random() for _ in range(3)])
        self.assertEqual(os.environ["PYTHONHASHSEED"], "5")
        fn(3)
        self.assertEqual(random.random(), random.Random(8).random())
        fn2 = pickle.loads(pickle.dumps(fn))  # a spawn-started worker gets a pickled copy
        fn2(3)
        self.assertEqual(random.random(), random.Random(8).random())
        self.probe.run_start("cpu", 1)
        self.assertEqual(self.events("run_start")[0]["seeds"]["random"], 5)

    def test_threads_write_whole_lines(self):
        def work(k):
            for i in range(200):
                self.probe.emit("phase", name="t%d" % k, epoch=i)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        evs = self.events("phase")
        self.assertEqual(len(evs), 1600)
        self.assertEqual({e["name"] for e in evs}, {"t%d" % k for k in range(8)})

    def test_long_and_odd_strings(self):
        self.probe.fallback("aten::x", "quote\" back\\ nl\n ctl\x01 é 日本 \ud800" + "x" * 10000)
        e = self.events("fallback")[0]
        self.assertTrue(e["message"].startswith("quote\" back\\ nl\n ctl\x01 é 日本 "))
        self.assertLessEqual(len(e["message"]), 2048)

    def test_module_level_default_probe(self):
        with mock.patch.dict(os.environ, {"DEVGATE_EVENTS_FILE": self.path}):
            with mock.patch.object(dg, "_default", None):
                dg.phase("checkpoint", 2)
                self.assertIs(dg.default_probe(), dg.default_probe())
                dg.default_probe().close()
        self.assertEqual(self.events("phase")[0]["name"], "checkpoint")


@unittest.skipUnless(HAVE_TORCH, "torch not importable")
class StopKnobTests(unittest.TestCase):
    """devgate accept's stop knobs (docs/events.md "Knobs for devgate
    accept"), judged on the loop times the step hook hands the window: a
    steady window after the warm-up, a time budget, the step cap."""

    def window(self, **env):
        from devgate_probe import _window
        with mock.patch.dict(os.environ, {k: str(v) for k, v in env.items()}):
            return _window.Window()

    def feed(self, w, loops, clock=None):
        """The stop reason after each step of loop times loops (ms)."""
        out = []
        for i, ms in enumerate(loops):
            w.steps += 1
            if clock is not None:
                with mock.patch("devgate_probe._window.perf_counter", return_value=clock[i]):
                    out.append(w.stop_reason(ms))
            else:
                out.append(w.stop_reason(ms))
        return out

    def test_steady_after_the_warm_up(self):
        w = self.window(DEVGATE_PROBE_STEADY="4:0.10", DEVGATE_PROBE_MAX_STEPS=20)
        self.assertTrue(w.wanted)
        # Two warm-up steps (slow: never judged), then halves of 10, 10 | 10.5, 10.4 ms.
        self.assertEqual(self.feed(w, [900, 300, 10, 10, 10.5, 10.4]), [None] * 5 + ["steady"])

    def test_a_drifting_window_runs_on_to_the_cap(self):
        w = self.window(DEVGATE_PROBE_STEADY="4:0.10", DEVGATE_PROBE_MAX_STEPS=10)
        loops = [50, 50, 10, 11, 13, 15, 18, 21, 25, 30]  # slowing down: the halves never agree
        self.assertEqual(self.feed(w, loops), [None] * 9 + ["steps"])

    def test_the_budget_counts_from_the_first_step(self):
        w = self.window(DEVGATE_PROBE_BUDGET=2, DEVGATE_PROBE_MAX_STEPS=100)
        clock = [100.0, 100.9, 101.5, 102.1]  # perf_counter at each step's end
        self.assertEqual(self.feed(w, [900, 900, 900, 900], clock), [None, None, None, "budget"])

    def test_the_budget_waits_for_the_steady_checks_steps(self):
        # A slow, noisy window: the budget is spent after the first step, but
        # the window's interval needs the steady check's 4 steps after the warm-up.
        w = self.window(DEVGATE_PROBE_BUDGET=1, DEVGATE_PROBE_STEADY="4:0.01", DEVGATE_PROBE_MAX_STEPS=100)
        clock = [100.0 + 2 * i for i in range(7)]
        self.assertEqual(self.feed(w, [900, 900, 500, 600, 700, 800, 900], clock),
                         [None] * 5 + ["budget", "budget"])

    def test_off_without_the_knobs(self):
        w = self.window()
        self.assertFalse(w.wanted)
        self.assertEqual(self.feed(w, [10] * 30), [None] * 30)
        for bad in ("4", "x:0.1", "1:0.1", "4:0", "4:-1"):
            self.assertIsNone(self.window(DEVGATE_PROBE_STEADY=bad).steady_n, bad)


class FakeCuda:
    """torch.cuda's sync debug mode calls (torch 2.x), recording what was set."""

    def __init__(self, mode=0, fail=False):
        self.mode, self.fail, self.set_calls = mode, fail, []

    def get_sync_debug_mode(self):
        return self.mode

    def set_sync_debug_mode(self, mode):
        if self.fail:
            raise RuntimeError("no CUDA driver")
        self.set_calls.append(mode)
        self.mode = 1
        # torch 2.x's own warning as the mode is set (it reached the
        # program's output on the H200 before the probe silenced it).
        warnings.warn("Synchronization debug mode is a prototype feature and does not yet detect "
                      "all synchronizing operations", UserWarning)


class FakeTorch:
    def __init__(self, version="2.5.1", cuda=None):
        self.__version__ = version
        self.cuda = cuda if cuda is not None else FakeCuda()


class FakeParam:
    device = "cuda:0"


class FakeOptimizer:
    def __init__(self):
        self.param_groups = [{"params": [FakeParam()]}]


SYNC_TEXT = "called a synchronizing CUDA operation (Triggered internally at c10/cuda/CUDAFunctions.cpp:151.)"


class SyncDebugStdlibTests(FileProbeCase):
    """CUDA's sync debug mode in the zero-code probe, with a fake torch (the CUDA
    path cannot run on a machine without an NVIDIA GPU)."""

    def test_arm_on_cuda_with_torch_2(self):
        from devgate_probe._zero import sync_debug_arm
        t = FakeTorch()
        self.assertEqual(sync_debug_arm(t, "cuda:0", environ={}), {"state": "on", "reason": None})
        self.assertEqual(t.cuda.set_calls, ["warn"])

    def test_arm_leaves_the_programs_own_mode(self):
        from devgate_probe._zero import sync_debug_arm
        t = FakeTorch(cuda=FakeCuda(mode=2))
        got = sync_debug_arm(t, "cuda:1", environ={})
        self.assertEqual(got["state"], "program")
        self.assertEqual(t.cuda.set_calls, [])

    def test_unavailable_is_said_with_its_reason(self):
        from devgate_probe._zero import sync_debug_arm

        class Cuda113:  # torch 1.13: no sync debug mode
            pass

        cases = [(FakeTorch(), "cpu", "not a CUDA device"), (FakeTorch(), "mps", "not a CUDA device"),
                 (FakeTorch(), None, "not a CUDA device"),
                 (FakeTorch("1.13.1", Cuda113()), "cuda:0", "torch 1.13.1 has no torch.cuda.set_sync_debug_mode"),
                 (FakeTorch(cuda=FakeCuda(fail=True)), "cuda:0", "set_sync_debug_mode failed (RuntimeError"),
                 (None, "cuda:0", "has no torch.cuda.set_sync_debug_mode")]
        for torch_mod, device, why in cases:
            got = sync_debug_arm(torch_mod, device, environ={})
            self.assertEqual(got["state"], "unavailable", (device, got))
            self.assertIn(why, got["reason"])
        got = sync_debug_arm(FakeTorch(), "cuda:0", environ={"DEVGATE_PROBE_SYNC_DEBUG": "0"})
        self.assertEqual(got["state"], "off")

    def _state(self, torch_mod):
        from devgate_probe import _zero
        self.probe._auto = True  # the zero-code probe's own Probe
        st = _zero._State(self.probe)
        st.gate_on = False
        st.torch = torch_mod
        return st

    def test_sync_warnings_are_counted_per_step_and_not_shown(self):
        from devgate_probe import probe as probe_mod
        explicit = probe_mod._explicit_used
        with warnings.catch_warnings():
            warnings.simplefilter("default")  # Python's own: once per call site
            shown = []
            warnings.showwarning = lambda m, *a, **k: shown.append(str(m))
            t = FakeTorch()
            st = self._state(t)
            opt = FakeOptimizer()
            st.on_step(opt)  # the first step: device, sync debug on, run_start
            for _ in range(3):  # one call site: the "always" filter lets each one through
                warnings.warn(SYNC_TEXT, UserWarning)
            warnings.warn("an unrelated warning", UserWarning)
            st.on_step(opt)
            st.inside += 1  # the probe's own calls are not the program's syncs
            warnings.warn(SYNC_TEXT, UserWarning)
            st.inside -= 1
            st.on_step(opt)
        probe_mod._explicit_used = explicit
        start = self.events("run_start")[0]
        self.assertEqual(start["sync_debug"], {"state": "on", "reason": None})
        self.assertEqual(t.cuda.set_calls, ["warn"])
        self.assertEqual([s["device_syncs"] for s in self.events("step")], [0, 3, 0])
        self.assertEqual(shown, ["an unrelated warning"])

    def test_the_probes_own_calls_show_no_warning(self):
        """What torch warns about the probe's own calls (the gate's product,
        the epoch end's reads) is devgate's doing: not shown; the program's
        own warnings are."""
        from devgate_probe import probe as probe_mod
        explicit = probe_mod._explicit_used
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            shown = []
            warnings.showwarning = lambda m, *a, **k: shown.append(str(m))
            st = self._state(FakeTorch())
            st.gate_on = True
            with mock.patch.object(self.probe, "gate",
                                   side_effect=lambda d: warnings.warn("the gate's product warned")):
                st.gate("cuda:0")

            def memory(torch_mod, device):
                warnings.warn("a memory read warned")
                return 1, 2, 3, 4

            with mock.patch.object(probe_mod, "_device_memory", side_effect=memory):
                st.device, st.epoch_open = "cuda:0", True
                st.close_epoch()
            warnings.warn("the program's own warning")
        probe_mod._explicit_used = explicit
        self.assertEqual(shown, ["the program's own warning"])
        self.assertEqual(self.events("epoch_end")[0]["allocated"], 1)

    def test_the_probes_messages_go_to_devgate(self):
        """The probe's own messages travel as note events, not on the program's stderr."""
        from devgate_probe import probe as probe_mod
        err = io.StringIO()
        with mock.patch.object(sys, "stderr", err):
            probe_mod._warn("test-note", "zero-code probe: a hook failed; that hook is off", self.probe)
            probe_mod._warn("test-note", "the same key again", self.probe)
        self.assertEqual(err.getvalue(), "")
        self.assertEqual([e["message"] for e in self.events("note")],
                         ["zero-code probe: a hook failed; that hook is off"])

    def test_without_cuda_no_count_is_sent(self):
        from devgate_probe import probe as probe_mod
        explicit = probe_mod._explicit_used

        class CpuParam:
            device = "cpu"

        opt = FakeOptimizer()
        opt.param_groups = [{"params": [CpuParam()]}]
        with warnings.catch_warnings():
            st = self._state(FakeTorch())
            st.on_step(opt)
            st.on_step(opt)
        probe_mod._explicit_used = explicit
        start = self.events("run_start")[0]
        self.assertEqual(start["sync_debug"]["state"], "unavailable")
        self.assertIn("device cpu is not a CUDA device", start["sync_debug"]["reason"])
        self.assertTrue(all("device_syncs" not in s for s in self.events("step")))


class TorchTests(FileProbeCase):
    def test_gate_cpu(self):
        r = self.probe.gate("cpu")
        self.assertTrue(r["built"] and r["available"])
        self.assertIsNone(r["reason"])
        mm = r["matmul"]
        self.assertTrue(mm["ok"])
        self.assertEqual(mm["n"], 256)
        self.assertLess(mm["max_abs_err"], 1e-3)
        self.assertGreater(mm["ms"], 0)
        self.assertEqual(self.events("gate")[0]["matmul"]["ok"], True)

    def test_gate_cuda_and_mps_are_honest(self):
        import torch
        for dev in ("cuda", "cuda:0", "cuda:7", "mps"):
            r = self.probe.gate(dev)
            if dev.startswith("cuda"):
                self.assertEqual(r["built"], bool(torch.backends.cuda.is_built()))
                if not torch.cuda.is_available():
                    self.assertFalse(r["available"])
            else:
                mps = getattr(torch.backends, "mps", None)
                self.assertEqual(r["built"], bool(mps and mps.is_built()))
                if not (mps and mps.is_available()):
                    self.assertFalse(r["available"])
            if not r["available"]:
                self.assertIsNone(r["matmul"])
                self.assertTrue(r["reason"])
            else:
                self.assertTrue(r["matmul"]["ok"], r)
        self.assertEqual(len(self.events("gate")), 4)
        self.assertIn("unknown device", self.probe.gate("tpu")["reason"])

    def test_epoch_on_cpu_with_torch(self):
        import torch
        self.probe.run_start("cpu", 8)
        with self.probe.epoch(0, validation=True):
            torch.ones(1000, 1000).sum()
        e = self.events("epoch_end")[0]
        self.assertGreater(e["footprint"], 0)
        self.assertIs(e["cache_emptied"], True)
        self.assertIs(e["validation"], True)
        for key in ("allocated", "reserved", "max_allocated", "driver"):
            self.assertIsNone(e[key])

    def test_step_with_tensors(self):
        import torch
        p = self.probe
        p.run_start("cpu", 8)
        x = torch.randn(64, 64, requires_grad=True)
        with p.epoch(0):
            for sync, read in ((False, False), (True, False), (False, True)):
                with p.step(sync=sync, read_loss=read) as s:
                    s.loss = (x @ x).pow(2).mean()
                    s.loss.backward()
        steps = self.events("step")
        self.assertEqual([e["synced"] for e in steps], [False, True, True])
        self.assertIsNone(steps[0]["loss"])
        self.assertIsNone(steps[1]["loss"])
        self.assertIsInstance(steps[2]["loss"], float)
        self.probe.step_begin()
        self.assertIsNone(self.probe.step_end(loss=torch.tensor(float("nan")), read_loss=True)["loss"])

    def test_seed_everything_repeats_torch_numpy_random(self):
        import numpy as np
        import torch

        def draw():
            return (torch.rand(4).tolist(), random.random(), np.random.rand(2).tolist())

        dg.seed_everything(1234)
        a = draw()
        dg.seed_everything(1234)
        self.assertEqual(a, draw())
        dg.seed_everything(1235)
        self.assertNotEqual(a, draw())

    def test_worker_init_fn_seeds_dataloader_workers(self):
        code = (
            "import random, sys, numpy as np, torch, devgate_probe as dg\n"
            "from torch.utils.data import DataLoader, Dataset\n"
            "class D(Dataset):\n"
            "    def __len__(self): return 16\n"
            "    def __getitem__(self, i):\n"
            "        return torch.tensor([random.random(), float(np.random.rand()), float(torch.rand(1))])\n"
            "fn = dg.seed_everything(int(sys.argv[1]))\n"
            "dl = DataLoader(D(), batch_size=4, num_workers=2, worker_init_fn=fn)\n"
            "print(repr([b.tolist() for b in dl]))\n")
        runs = [run_py(code, args=(seed,)) for seed in ("7", "7", "8")]
        for r in runs:
            self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(runs[0].stdout, runs[1].stdout)
        self.assertNotEqual(runs[0].stdout, runs[2].stdout)
        batches = eval(runs[0].stdout)
        self.assertEqual(len(batches), 4)
        self.assertNotEqual(batches[0], batches[1])  # the two workers draw different streams
        # Worker w was seeded with seed + w for random: its first draw shows it.
        self.assertAlmostEqual(batches[0][0][0], random.Random(7).random(), places=6)  # float32 in a tensor
        self.assertAlmostEqual(batches[1][0][0], random.Random(8).random(), places=6)

    def test_sweep_with_tensors_stops_at_oom(self):
        import torch

        def step_fn(batch):
            if batch >= 64:
                raise RuntimeError(CPU_OOM)
            x = torch.randn(batch, 256)
            return (x @ x.t()).sum()

        out = self.probe.sweep(step_fn, start=8, device="cpu", steps=3, warmup=1)
        self.assertEqual([t["ended"] for t in out["trials"]], ["ok", "ok", "ok", "device-oom"])
        self.assertEqual(out["best_batch"], 32)
        self.assertEqual([t["batch"] for t in self.events("sweep_trial")], [8, 16, 32, 64])
        self.assertEqual(self.events("oom")[0]["batch"], 64)

    def test_leaky_train_footprint(self):
        growth = {}
        for keep in (False, True):
            path = os.path.join(self.tmp.name, "leaky-%s.jsonl" % keep)
            args = [sys.executable, LEAKY] + (["--keep-losses"] if keep else [])
            res = subprocess.run(args, env=clean_env(DEVGATE_EVENTS_FILE=path), capture_output=True,
                                 text=True, timeout=300)
            self.assertEqual(res.returncode, 0, res.stderr)
            evs = read_events(path)
            names = [e["ev"] for e in evs]
            self.assertEqual(names[0], "run_start")
            self.assertEqual(names[-1], "run_end")
            self.assertEqual(evs[-1]["status"], "ok")
            self.assertEqual(names.count("gate"), 1)
            ends = [e for e in evs if e["ev"] == "epoch_end"]
            self.assertEqual([e["epoch"] for e in ends], list(range(11)))
            self.assertTrue(all(e["cache_emptied"] for e in ends))
            self.assertEqual(names.count("step"), 11 * 24)
            base, last = ends[0]["footprint"], ends[10]["footprint"]
            growth[keep] = last / base - 1.0
        sys.stderr.write("\nleaky_train footprint growth, epoch 0 -> 10: without --keep-losses %+.1f%%, "
                         "with %+.1f%%\n" % (100 * growth[False], 100 * growth[True]))
        self.assertGreater(growth[True], 0.26)
        self.assertLess(growth[False], 0.26)



SITE = os.path.join(CLIENT, "devgate_probe", "_site")
ZERO_SCRIPT = r"""
import os, sys, torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(7)
ds = TensorDataset(torch.randn(96, 8), torch.randint(0, 2, (96,)))
train = DataLoader(ds, batch_size=16, num_workers=int(os.environ.get("WORKERS", "0")))
val = DataLoader(ds, batch_size=32)
m = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for epoch in range(3):
    for x, y in train:
        loss = torch.nn.functional.cross_entropy(m(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        loss.item()
    with torch.no_grad():
        for x, y in val:
            m(x)
if os.environ.get("EXPLICIT"):
    import devgate_probe as dg
    dg.run_start("cpu", 16)
    with dg.step():
        pass
sys.exit(int(os.environ.get("STATUS", "0")))
"""


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class ZeroCodeTests(FileProbeCase):
    """python -m devgate_probe.auto and the sitecustomize on an unmodified script."""

    def run_script(self, launcher, **env):
        script = os.path.join(self.tmp.name, "train.py")
        with open(script, "w") as f:
            f.write(ZERO_SCRIPT)
        return subprocess.run(launcher(script), env=clean_env(DEVGATE_EVENTS_FILE=self.path, **env),
                              capture_output=True, text=True, timeout=300)

    def check_run(self, status="ok"):
        evs = self.events()
        names = [e["ev"] for e in evs]
        self.assertEqual(names.count("run_start"), 1, names)
        start = self.events("run_start")[0]
        self.assertEqual((start["probe"], start["device"], start["batch"]), ("auto", "cpu", 16))
        self.assertEqual(start["seeds"]["torch"], 7)
        # On the cpu CUDA's sync debug mode is unavailable, said so, and no count is sent (not 0).
        self.assertEqual(start["sync_debug"]["state"], "unavailable")
        self.assertIn("not a CUDA device", start["sync_debug"]["reason"])
        self.assertEqual(names.count("gate"), 1)
        steps = self.events("step")
        self.assertEqual(len(steps), 3 * 6)  # 96 / 16 per epoch, the validation passes not counted
        self.assertEqual([s["epoch"] for s in steps], [e for e in range(3) for _ in range(6)])
        self.assertTrue(all(s["batch"] == 16 and s["data_ms"] is not None and s["step_ms"] >= 0 for s in steps))
        self.assertTrue(all("device_syncs" not in s for s in steps))
        # loss.item() after each step reads a cpu tensor: it waits for nothing, no sync point.
        self.assertEqual(sum(s["syncs"] for s in steps), 0)
        self.assertEqual(sum(s["syncs_library"] for s in steps), 0)
        ends = self.events("epoch_end")
        self.assertEqual([e["epoch"] for e in ends], [0, 1, 2])
        self.assertTrue(all(e["validation"] and e["cache_emptied"] for e in ends))
        # The last epoch is closed at the interpreter's exit: its memory is not reported.
        self.assertTrue(all(e["footprint"] > 0 for e in ends[:-1]) and ends[-1]["footprint"] is None, ends)
        # The loss backward() ran on, kept per step and read once at epoch end.
        self.assertTrue(all([l[0] for l in e["losses"]] == list(range(6)) for e in ends), ends)
        self.assertTrue(all(0 < l[1] < 10 for e in ends for l in e["losses"]))
        self.assertEqual(start["seeds"]["seeded"], {"torch": True, "numpy": False, "random": False})
        self.assertEqual(start["seeds"]["loader"]["shuffle"], False)
        self.assertEqual(self.events("run_end")[-1]["status"], status)
        self.assertEqual({e.get("pid", start["pid"]) for e in evs if e["ev"] == "run_start"}, {start["pid"]})

    def test_device_reads_counted_and_attributed(self):
        """Only reads of device tensors count (a meta tensor stands in for
        one here), attributed by the calling frame: the program's own, or a
        library's (a module under site-packages); reads of cpu tensors (the
        loss on the cpu, Adam's step counters) are not sync points."""
        lib = os.path.join(self.tmp.name, "site-packages")
        os.makedirs(lib)
        with open(os.path.join(lib, "fakelib.py"), "w") as f:
            f.write("def read(t):\n    try:\n        return t.item()\n    except Exception:\n        return None\n")
        script = os.path.join(self.tmp.name, "reads.py")
        with open(script, "w") as f:
            f.write("import sys, torch\nsys.path.insert(0, %r)\nimport fakelib\n" % lib + r"""
m = torch.nn.Linear(4, 2)
opt = torch.optim.Adam(m.parameters())
meta = torch.zeros((), device="meta")
loader = torch.utils.data.DataLoader(torch.randn(32, 4), batch_size=8)
for epoch in range(2):
    for x in loader:
        loss = m(x).pow(2).mean()
        opt.zero_grad(); loss.backward()
        loss.item(); x.tolist(); x.cpu()          # cpu tensors: no sync point
        try:
            meta.item()                          # the program's own device read
        except Exception:
            pass
        fakelib.read(meta)                       # a library's device read
        opt.step()
""")
        res = subprocess.run([sys.executable, "-m", "devgate_probe.auto", script],
                             env=clean_env(DEVGATE_EVENTS_FILE=self.path), capture_output=True, text=True,
                             timeout=300)
        self.assertEqual(res.returncode, 0, res.stderr)
        steps = self.events("step")
        self.assertEqual(len(steps), 8)
        self.assertEqual([s["syncs"] for s in steps], [2] * 8)
        self.assertEqual([s["syncs_library"] for s in steps], [1] * 8)

    def test_launcher_worker_reached_after_close_fds(self):
        """A launcher starting its worker with subprocess's default
        close_fds=True: the worker loses the inherited descriptor and finds
        the channel by DEVGATE_EVENTS_PATH (a pipe, as devgate run gives)."""
        script = os.path.join(self.tmp.name, "train.py")
        with open(script, "w") as f:
            f.write(ZERO_SCRIPT)
        launcher = os.path.join(self.tmp.name, "launch.py")
        with open(launcher, "w") as f:
            f.write("import subprocess, sys\nsys.exit(subprocess.run([sys.executable, %r]).returncode)\n" % script)
        r, w = os.pipe()
        os.set_inheritable(w, True)
        env = clean_env(DEVGATE_EVENTS_FD=str(w))
        env.pop("DEVGATE_EVENTS_FILE", None)
        proc = subprocess.Popen([sys.executable, "-m", "devgate_probe.auto", launcher], env=env,
                                pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(w)
        data = b""
        with os.fdopen(r, "rb") as f:
            data = f.read()
        proc.wait(timeout=300)
        self.assertEqual(proc.returncode, 0)
        evs = [json.loads(l) for l in data.decode().splitlines() if l.strip()]
        names = [e["ev"] for e in evs]
        self.assertEqual(names.count("step"), 3 * 6, names)
        self.assertEqual(names.count("run_start"), 1)
        self.assertNotEqual(evs[names.index("run_start")]["pid"], proc.pid)  # the worker's

    def test_auto_runs_an_unmodified_script(self):
        res = self.run_script(lambda s: [sys.executable, "-m", "devgate_probe.auto", s])
        self.assertEqual(res.returncode, 0, res.stderr)
        self.check_run()

    def test_bucket_names_the_program_not_the_probe(self):
        """The bucket's script is the program's (issue 26): its file for
        SCRIPT and -m MODULE, "-c" for -c CODE, never the probe's own
        module (auto.py)."""
        with open(os.path.join(self.tmp.name, "train_mod.py"), "w") as f:
            f.write(ZERO_SCRIPT)
        launchers = {
            "train.py": lambda s: [sys.executable, "-m", "devgate_probe.auto", s],
            "train_mod.py": lambda s: [sys.executable, "-m", "devgate_probe.auto", "-m", "train_mod"],
            "-c": lambda s: [sys.executable, "-m", "devgate_probe.auto", "-c", ZERO_SCRIPT],
        }
        for want, launcher in launchers.items():
            with self.subTest(script=want):
                open(self.path, "w").close()
                res = self.run_script(launcher, PYTHONPATH=os.pathsep.join([CLIENT, self.tmp.name]))
                self.assertEqual(res.returncode, 0, res.stderr)
                self.assertEqual(self.events("run_start")[0]["bucket"]["script"], want)

    def test_auto_with_forked_workers_reports_once(self):
        res = self.run_script(lambda s: [sys.executable, "-m", "devgate_probe.auto", s], WORKERS="2")
        self.assertEqual(res.returncode, 0, res.stderr)
        self.check_run()

    def test_exit_status_passes_through(self):
        res = self.run_script(lambda s: [sys.executable, "-m", "devgate_probe.auto", s], STATUS="3")
        self.assertEqual(res.returncode, 3, res.stderr)
        self.check_run(status="error")

    def test_explicit_api_makes_the_zero_code_probe_stand_down(self):
        res = self.run_script(lambda s: [sys.executable, "-m", "devgate_probe.auto", s], EXPLICIT="1")
        self.assertEqual(res.returncode, 0, res.stderr)
        starts = self.events("run_start")
        self.assertEqual([s["probe"] for s in starts], ["auto", "manual"])
        self.assertEqual(len(self.events("step")), 3 * 6 + 1)  # nothing after the explicit run_start

    def test_sitecustomize_through_a_shell_wrapper_chains(self):
        # A sitecustomize further down the path stands for the distribution's own: it must still run.
        other = os.path.join(self.tmp.name, "other")
        os.mkdir(other)
        marker = os.path.join(self.tmp.name, "chained")
        with open(os.path.join(other, "sitecustomize.py"), "w") as f:
            f.write("open(%r, 'w').write('yes')\n" % marker)
        wrapper = os.path.join(self.tmp.name, "wrap.sh")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nexec "%s" "$@"\n' % sys.executable)
        os.chmod(wrapper, 0o755)
        pp = os.pathsep.join([SITE, CLIENT, other])
        res = self.run_script(lambda s: [wrapper, s], PYTHONPATH=pp, DEVGATE_PROBE="auto", WORKERS="2")
        self.assertEqual(res.returncode, 0, res.stderr)
        self.check_run()
        self.assertTrue(os.path.exists(marker), "the hidden sitecustomize did not run")

    def test_sitecustomize_stays_off_unless_auto(self):
        pp = os.pathsep.join([SITE, CLIENT])
        res = self.run_script(lambda s: [sys.executable, s], PYTHONPATH=pp, DEVGATE_PROBE="manual")
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertEqual(self.events(), [])


if __name__ == "__main__":
    unittest.main()
