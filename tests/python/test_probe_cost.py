"""What the zero-code probe's hooks cost, and what the cuts keep (issue 24):
the footprint read through a kept descriptor, flat events encoded without
the general cleaner, the step's memory reading thinned when it is dear, and
the epoch end's full collection only where it is cheap or memory grew.
Run by tests/python/run_tests.sh with test_probe.py."""

import json
import os
import sys
import unittest
from unittest import mock

from test_probe import HAVE_TORCH, FileProbeCase

from devgate_probe import _util, _zero  # noqa: E402


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
        # 0.11 ms on a 10 ms step is 1.1%: one reading in 6 keeps it under 0.2%.
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
