"""What the zero-code probe's hooks cost, and what the cuts keep (issue 24):
the footprint read through a kept descriptor, flat events encoded without
the general cleaner, the step's memory reading thinned when it is dear, and
the epoch end's full collection only where it is cheap or memory grew.
Run by tests/python/run_tests.sh with test_probe.py."""

import json
import os
import subprocess
import sys
import unittest
from unittest import mock

from test_probe import HAVE_TORCH, FakeOptimizer, FileProbeCase, read_events

from devgate_probe import _util, _zero  # noqa: E402
from devgate_probe import probe as probe_mod  # noqa: E402


def statm_resident():
    with open("/proc/%d/statm" % os.getpid(), "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class FakeProbe:
    enabled = True

    def __init__(self):
        self.sent = []

    def emit(self, ev, **fields):
        self.sent.append((ev, fields))
        return fields


@unittest.skipUnless(os.path.exists("/proc/self/statm"), "no /proc")
class CostStdlibTests(FileProbeCase):
    def test_footprint_through_a_kept_descriptor(self):
        first = _util.rss_bytes()
        fd = _util._statm[1]
        self.assertIsNotNone(fd)
        self.assertEqual(_util._statm[0], os.getpid())
        block = bytearray(64 << 20)  # 64 MiB touched: the kept descriptor reads the growth
        for i in range(0, len(block), 4096):
            block[i] = 1
        grown = _util.rss_bytes()
        self.assertEqual(_util._statm[1], fd)  # the same descriptor, read again
        self.assertGreater(grown - first, 48 << 20)
        self.assertLess(abs(grown - statm_resident()), 16 << 20)
        del block

    def test_a_descriptor_closed_under_it_is_opened_again(self):
        _util.rss_bytes()
        os.close(_util._statm[1])  # a program closing descriptors it does not own
        self.assertGreater(_util.rss_bytes(), 0)
        self.assertEqual(_util._statm[0], os.getpid())

    def test_a_forked_child_reads_its_own_process(self):
        _util.rss_bytes()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its own PID's file, not the parent's descriptor
            try:
                block = bytearray(96 << 20)
                for i in range(0, len(block), 4096):
                    block[i] = 1
                got = _util.rss_bytes()
                os.write(w, json.dumps([_util._statm[0], os.getpid(), got, statm_resident()]).encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            seen, child, got, truth = json.loads(f.read())
        os.waitpid(pid, 0)
        self.assertEqual(seen, child)
        self.assertLess(abs(got - truth), 16 << 20)  # the child's figure, its 96 MiB in it

    def test_flat_and_nested_events_encode_alike(self):
        nan, inf = float("nan"), float("inf")
        self.probe.emit("step", epoch=0, step=1, step_ms=nan, data_ms=inf, synced=False, batch=64, loss=None)
        self.probe.emit("note", message="x", nested={"a": nan, "b": [1.0, -inf]}, odd=object())
        with open(self.path, "rb") as f:
            raw = f.read()
        self.assertNotIn(b"NaN", raw)
        self.assertNotIn(b"Infinity", raw)
        step, note = self.events("step")[0], self.events("note")[0]
        self.assertEqual((step["step_ms"], step["data_ms"], step["batch"], step["synced"]), (None, None, 64, False))
        self.assertEqual((note["nested"], note["message"]), ({"a": None, "b": [1.0, None]}, "x"))
        self.assertIsInstance(note["odd"], str)
        long = self.probe.emit("note", message="y" * 5000)
        self.assertEqual(len(long["message"]), _util.MAX_TEXT)

    def test_plain_events_fall_back_on_what_the_encoder_refuses(self):
        self.probe.emit_plain("step", {"step": 0, "step_ms": 1.5, "batch": 64, "loss": None})
        self.probe.emit_plain("step", {"step": 1, "step_ms": float("nan"), "batch": 64})
        self.probe.emit_plain("step", {"step": 2, "step_ms": 1.0, "odd": object()})
        steps = self.events("step")
        self.assertEqual([s["step"] for s in steps], [0, 1, 2])
        self.assertEqual((steps[0]["step_ms"], steps[0]["v"], steps[0]["ev"]), (1.5, 1, "step"))
        self.assertIsNone(steps[1]["step_ms"])
        self.assertIsInstance(steps[2]["odd"], str)
        with open(self.path, "rb") as f:
            self.assertNotIn(b"NaN", f.read())



class CountingOut:
    """Stands in for the probe's descriptor: keeps each write(2)'s bytes."""

    def __init__(self, out):
        self.out, self.writes = out, []

    def write(self, data):
        self.writes.append(bytes(data))
        return self.out.write(data)


class HeldStepsStdlibTests(FileProbeCase):
    """Step events are held and written together (issue 24): one write(2) for
    many steps, the order kept, nothing lost at flush or close."""

    def setUp(self):
        super().setUp()
        self.counting = CountingOut(self.probe._out)
        self.probe._out = self.counting

    def raw_steps(self):  # what reached the file, without flushing
        return [e for e in read_events(self.path) if e["ev"] == "step"]

    def test_steps_wait_for_the_hold_then_go_in_one_write(self):
        t = self.probe._held_t
        for i in range(5):
            self.assertEqual(self.probe.emit_held("step", {"step": i, "step_ms": 1.0}, t)["step"], i)
        self.assertEqual((self.raw_steps(), self.counting.writes), ([], []))
        self.probe.emit_held("step", {"step": 5, "step_ms": 1.0}, t + 2 * probe_mod.HOLD_S)  # the hold passed
        self.assertEqual([e["step"] for e in self.raw_steps()], [0, 1, 2, 3, 4, 5])
        self.assertEqual(len(self.counting.writes), 1)
        self.assertEqual(self.counting.writes[0].count(b"\n"), 6)

    def test_a_full_hold_is_written_at_once(self):
        t = self.probe._held_t
        for i in range(probe_mod.HOLD_MAX):
            self.probe.emit_held("step", {"step": i}, t)
        self.assertEqual(len(self.raw_steps()), probe_mod.HOLD_MAX)
        self.assertEqual(len(self.counting.writes), 1)

    def test_any_other_event_writes_the_held_steps_first(self):
        t = self.probe._held_t
        self.probe.emit_held("step", {"step": 0, "step_ms": float("nan")}, t)  # refused by the encoder: cleaned
        self.probe.emit_held("step", {"step": 1}, t)
        self.probe.emit("epoch_end", epoch=0)
        got = read_events(self.path)
        self.assertEqual([e["ev"] for e in got], ["step", "step", "epoch_end"])
        self.assertIsNone(got[0]["step_ms"])
        self.assertEqual(len(self.counting.writes), 1)  # the steps and the epoch_end together

    def test_close_writes_what_is_held(self):
        self.probe.emit_held("step", {"step": 0}, self.probe._held_t)
        self.probe.close()
        self.assertEqual([e["step"] for e in self.raw_steps()], [0])

    def test_the_zero_code_step_is_held(self):
        st = _zero._State(self.probe)
        st.gate_on = False
        st.device = "cpu"
        st.sync_debug = {"state": "unavailable", "reason": "test"}
        opt = FakeOptimizer()
        st.on_step(opt)  # run_start goes at once; the step is held
        st.on_step(opt)
        self.assertEqual([e["ev"] for e in read_events(self.path)], ["run_start"])
        self.probe.flush()
        self.assertEqual([e["step"] for e in self.raw_steps()], [0, 1])

class StepRowStdlibTests(FileProbeCase):
    """The zero-code step held as a row (a tuple, its line made at the write;
    issue 24): the same record the dict made, in order with the other
    events, all of it written."""

    def row(self, stamp=None, mark=-0.0034, data=0.5, samples=64, syncs=2, lib=1, dsyncs=None, epoch=3,
            step=7, mem=None):
        """A step row stamped now (perf_counter) whose interval began mark s before."""
        stamp = _zero.perf_counter() if stamp is None else stamp
        return (_zero._step_line, stamp, stamp, stamp + mark, data, samples, syncs, lib, dsyncs, epoch, step, mem)

    def test_a_row_makes_the_step_record(self):
        got = json.loads(_zero._step_line(self.row(stamp=100.0), 1000.0))
        self.assertEqual(list(got), ["v", "ev", "t", "epoch", "step", "step_ms", "data_ms", "loss", "synced",
                                     "syncs", "syncs_library", "batch"])
        self.assertEqual((got["v"], got["ev"], got["epoch"], got["step"], got["data_ms"], got["loss"],
                          got["synced"], got["syncs"], got["syncs_library"], got["batch"]),
                         (1, "step", 3, 7, 0.5, None, False, 2, 1, 64))
        self.assertAlmostEqual(got["t"], 1100.0)
        self.assertAlmostEqual(got["step_ms"], 3.4 - 0.5, places=6)  # the interval less the data wait
        full = json.loads(_zero._step_line(self.row(dsyncs=4, mem={"allocated": 10, "footprint": 20}), 0.0))
        self.assertEqual(list(full)[-4:], ["batch", "device_syncs", "allocated", "footprint"])
        self.assertEqual((full["device_syncs"], full["allocated"], full["footprint"]), (4, 10, 20))
        bare = json.loads(_zero._step_line(self.row(data=None, samples=None, epoch=-1,
                                                    mem={"allocated": None, "footprint": 5}), 0.0))
        self.assertEqual((bare["epoch"], bare["data_ms"], "batch" in bare, "allocated" in bare, bare["footprint"]),
                         (None, None, False, False, 5))
        self.assertAlmostEqual(bare["step_ms"], 3.4, places=6)
        odd = _zero._step_line(self.row(mark=float("nan"), data=float("inf")), 0.0)
        self.assertNotIn("nan", odd.lower())
        self.assertNotIn("inf", odd.lower())
        self.assertEqual((json.loads(odd)["step_ms"], json.loads(odd)["data_ms"]), (None, None))
        self.assertEqual(json.loads(_zero._step_line(self.row(mark=0.5), 0.0))["step_ms"], 0.0)

    def test_rows_and_records_keep_their_order_and_all_are_written(self):
        t = self.probe._held_t
        self.probe.hold(self.row(step=0), t)
        self.probe.emit_held("step", {"step": 1}, t)
        self.probe.hold(self.row(step=2), t)

        def broken(row, wall):
            raise KeyError("planted")
        with mock.patch.object(probe_mod, "_warned", set()):
            self.probe.hold((broken, 0.0), t)  # a row that cannot be made: lost alone, said on stderr
            self.probe.hold(self.row(step=3), t)
            self.probe.emit("epoch_end", epoch=3)
        got = read_events(self.path)
        self.assertEqual([(e["ev"], e.get("step")) for e in got],
                         [("step", 0), ("step", 1), ("step", 2), ("step", 3), ("epoch_end", None)])
        self.assertTrue(all(a["t"] <= b["t"] for a, b in zip(got, got[1:])), got)  # one wall clock
        self.probe.hold(self.row(step=4), t)
        self.probe.close()
        self.assertEqual(read_events(self.path)[-1]["step"], 4)

    @unittest.skipUnless(hasattr(os, "fork") and hasattr(os, "register_at_fork"), "no fork")
    @mock.patch.object(probe_mod, "_explicit_used", False)  # an earlier case's explicit API
    def test_a_forked_child_stands_down_without_asking_its_pid(self):
        st = _zero._State(self.probe)
        self.assertTrue(st.on())
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                with mock.patch.object(_zero.os, "getpid", side_effect=AssertionError("getpid per hook")):
                    os.write(w, b"1" if st.on() else b"0")
            except BaseException:
                os.write(w, b"E")
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            said = f.read()
        os.waitpid(pid, 0)
        self.assertEqual(said, b"0")  # the child's hooks are off from the fork on
        with mock.patch.object(_zero.os, "getpid", side_effect=AssertionError("getpid per hook")):
            self.assertTrue(st.on())  # the parent's stay on, and no hook asks for the PID


HELD_SCRIPT = r"""
import sys, torch
torch.manual_seed(1)
class MySGD(torch.optim.SGD):  # a subclass calling super().step(): one step, not two
    def step(self, closure=None):
        return super().step(closure)
model = torch.nn.Linear(4, 1)
opt = MySGD(model.parameters(), lr=0.01)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(80, 4), torch.randn(80, 1)),
                                   batch_size=2)
for x, y in data:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
how = sys.argv[1]
if how == "raise":
    raise RuntimeError("planted failure after the steps")
if how == "exit":
    sys.exit(3)
"""


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class HeldRowsZeroCodeTests(FileProbeCase):
    """Every held step reaches the channel, in order, before the process
    ends, however the program ends (its steps take far less than HOLD_S, so
    none is written before the end)."""

    def run_held(self, how):
        script = os.path.join(self.tmp.name, "held.py")
        with open(script, "w") as f:
            f.write(HELD_SCRIPT)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEVGATE_")}
        env.update(DEVGATE_EVENTS_FILE=self.path, DEVGATE_PROBE_GATE="0",
                   PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(_zero.__file__))] +
                                              [p for p in [env.get("PYTHONPATH")] if p]))
        done = subprocess.run([sys.executable, "-m", "devgate_probe.auto", script, how], env=env,
                              capture_output=True, text=True, timeout=300)
        evs = read_events(self.path)
        names = [e["ev"] for e in evs]
        steps = [e for e in evs if e["ev"] == "step"]
        self.assertEqual([s["step"] for s in steps], list(range(40)), (done.stderr, names))
        self.assertTrue(all(s["batch"] == 2 and s["epoch"] == 0 for s in steps))
        self.assertEqual(names[-2:], ["epoch_end", "run_end"])  # every step before the epoch's end
        self.assertLess(names.index("run_start"), names.index("step"))
        self.assertTrue(all(a["t"] <= b["t"] for a, b in zip(evs, evs[1:])))
        self.assertEqual([l[0] for l in evs[-2]["losses"]], list(range(40)))
        return done, evs[-1]

    def test_a_normal_exit_writes_every_held_step(self):
        done, end = self.run_held("ok")
        self.assertEqual((done.returncode, end["status"]), (0, "ok"))

    def test_an_uncaught_exception_writes_every_held_step(self):
        done, end = self.run_held("raise")
        self.assertEqual((done.returncode, end["status"]), (1, "error"))
        self.assertIn("planted failure", end["message"])

    def test_sys_exit_writes_every_held_step(self):
        done, end = self.run_held("exit")
        self.assertEqual((done.returncode, end["status"]), (3, "error"))


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class BatchPlanTorchTests(unittest.TestCase):
    """A default DataLoader's batch sizes from its plan (no shape read per
    batch): the same samples per step as each batch's shape gives."""

    def sizes(self, loader):
        st = _zero._State(FakeProbe())
        it = iter(loader)
        st.on_iter(loader, it)
        got = []
        for batch in it:
            st.on_next(it, 0.0, batch, False)
            got.append(st.samples)
            st.samples = 0
        return got, st.batch_plan

    def test_the_plan_gives_each_batch_its_samples(self):
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        data = TensorDataset(torch.zeros(10, 3), torch.zeros(10))
        self.assertEqual(self.sizes(DataLoader(data, batch_size=4)), ([4, 4, 2], (4, 10)))
        self.assertEqual(self.sizes(DataLoader(data, batch_size=4, shuffle=True)), ([4, 4, 2], (4, 10)))
        self.assertEqual(self.sizes(DataLoader(data, batch_size=4, drop_last=True)), ([4, 4], (4, 10)))
        self.assertEqual(self.sizes(DataLoader(data, batch_size=5)), ([5, 5], (5, 10)))

    def test_anything_else_reads_each_batch(self):
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from torch.utils.data._utils.collate import default_collate
        data = TensorDataset(torch.zeros(10, 3), torch.zeros(10))
        # a collate of the program's own: its batches may hold other counts
        self.assertEqual(self.sizes(DataLoader(data, batch_size=4, collate_fn=lambda b: default_collate(b[:3]))),
                         ([3, 3, 2], None))
        # batches without a tensor: the plan's first batch disagrees, the count is unknown (None, not 4)
        self.assertEqual(self.sizes(DataLoader(["a"] * 10, batch_size=4)), ([None, None, None], None))


class CostStateStdlibTests(unittest.TestCase):
    """The step's memory reading and the epoch end's collection, on a state
    whose readings are planted."""

    def setUp(self):
        self.st = _zero._State(FakeProbe())
        self.st.device = "cpu"

    def read_steps(self, n, cost_ms, interval_ms):
        clock = [0.0]

        def perf():
            return clock[0]

        def alloc(torch, device):
            clock[0] += cost_ms / 1000.0
            return 1000

        read = []
        with mock.patch.object(_zero, "perf_counter", perf), \
                mock.patch.object(_zero._probe_mod, "_allocated_now", alloc):
            for i in range(n):
                self.st.step_index = i
                if self.st.step_index >= self.st.mem_next:
                    fields = {}
                    self.st.step_memory(fields, interval_ms)
                    read.append(i)
        return read

    def test_a_cheap_reading_is_taken_every_step(self):
        self.assertEqual(self.read_steps(50, 0.002, 0.5), list(range(50)))

    def test_a_dear_reading_is_thinned_to_its_budget(self):
        # 0.11 ms on a 10 ms step is 1.1%: one reading in 6 keeps it under 0.2% (at 0.05% a
        # quick soak's 48 steps kept too few readings for its leak screen: test_user_accept).
        self.assertEqual(self.read_steps(60, 0.11, 10.0), list(range(0, 60, 6)))
        self.st.mem_next = 0
        # never fewer than one every MEM_MAX_STRIDE steps, however dear
        self.assertEqual(self.read_steps(100, 50.0, 1.0), list(range(0, 100, _zero.MEM_MAX_STRIDE)))

    def test_mem_every_still_holds(self):
        self.st.mem_every = 4
        self.assertEqual(self.read_steps(20, 0.002, 0.5), list(range(0, 20, 4)))

    def collect(self, epoch_ms, gc_ms, live):
        """One epoch end: (kind, generations asked of gc.collect)."""
        clock = [100.0]
        calls = []

        def perf():
            return clock[0]

        def collect(generation=2):
            calls.append(generation)
            if generation == 2:
                clock[0] += gc_ms / 1000.0

        self.st.epoch_t0 = clock[0] - epoch_ms / 1000.0
        with mock.patch.object(_zero, "perf_counter", perf), mock.patch.object(_zero.gc, "collect", collect), \
                mock.patch.object(self.st, "live_memory", lambda torch, device: live):
            kind = self.st.collect(None, "cpu")
        return kind, calls

    def test_the_first_epoch_end_collects_everything(self):
        self.assertEqual(self.collect(500.0, 40.0, (None, 1000)), ("full", [2]))
        self.assertAlmostEqual(self.st.gc_ms, 40.0)
        self.assertEqual(self.st.gc_base, (None, 1000))

    def test_a_dear_collection_with_memory_flat_is_young_only(self):
        self.collect(500.0, 40.0, (None, 1000))
        self.assertEqual(self.collect(500.0, 40.0, (None, 1005)), ("young", [1]))

    def test_memory_that_grew_is_read_after_a_full_collection(self):
        self.collect(500.0, 40.0, (2000, 1000))
        self.assertEqual(self.collect(500.0, 40.0, (2000, 1020)), ("full", [2]))  # footprint +2%
        self.assertEqual(self.collect(500.0, 40.0, (2030, 1020)), ("full", [2]))  # allocated +1.5%
        self.assertEqual(self.st.gc_base, (2030, 1020))
        self.assertEqual(self.collect(500.0, 40.0, (2035, 1021)), ("young", [1]))

    def test_a_cheap_collection_runs_in_full_every_epoch(self):
        self.collect(500.0, 2.0, (None, 1000))  # 2 ms of a 500 ms epoch: 0.4%
        self.assertEqual(self.collect(500.0, 2.0, (None, 1000)), ("full", [2]))


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class CostTorchTests(unittest.TestCase):
    def test_cpu_has_no_allocator_reading(self):
        import torch
        from devgate_probe import probe
        self.assertIsNone(probe._allocated_now(torch, "cpu"))
        if not torch.cuda.is_available():
            self.assertIsNone(probe._allocated_now(torch, "cuda:0"))  # not initialised: unknown, not 0

    @unittest.skipUnless(HAVE_TORCH and __import__("torch").cuda.is_available(), "no CUDA device")
    def test_cuda_reading_matches_memory_allocated(self):
        import torch
        from devgate_probe import probe
        x = torch.ones(1 << 20, device="cuda")
        self.assertEqual(probe._allocated_now(torch, "cuda"), torch.cuda.memory_allocated())
        self.assertEqual(probe._allocated_now(torch, "cuda:0"), torch.cuda.memory_allocated(0))
        del x


if __name__ == "__main__":
    sys.exit(unittest.main())
