"""What `devgate accept -- CMD` asks of the zero-code probe (docs/events.md,
"Knobs for devgate accept"), each from an environment variable:

- DEVGATE_PROBE_MAX_STEPS=N: after the N-th optimizer step the probe sends the
  epoch's epoch_end and run_end {status: "stopped"} and raises
  SystemExit(STOP_CODE): a clean stop, recorded as "stopped by devgate".
- DEVGATE_PROBE_PROFILE=WARMUP:WINDOW with DEVGATE_PROBE_PROFILE_OUT=FILE (and
  optionally DEVGATE_PROBE_TRACE=FILE): a torch.profiler window opened at the
  end of step WARMUP and closed at the end of step WARMUP + WINDOW, split into
  data, host-to-device, sync and compute, with the top operators, written as
  JSON to FILE (the Chrome trace to the trace file).
- DEVGATE_PROBE_PROFILE_WALL=S: the window also closes at the first step end
  after S seconds of window (a large batch's step, with every operator of its
  data loading recorded, can take long), with the steps it did hold; with
  DEVGATE_PROBE_MAX_STEPS the program then stops at once.
- DEVGATE_PROBE_TRACE_MAX_EVENTS=N: no Chrome trace is written when the window
  recorded more than N events (the file would be hundreds of MB and take
  minutes to write); the window's JSON says so ("trace_skipped").
- DEVGATE_PROBE_STEADY=N:TOL: the run stops as DEVGATE_PROBE_MAX_STEPS stops
  it once at least N steps followed the warm-up (the first WARMUP steps) and
  the median loop time (step and data wait) of the first half of those steps
  and of the second half agree within the share TOL: the rate over the steps
  after the warm-up is then steady (run_end's stop "steady"; "steps" when
  DEVGATE_PROBE_MAX_STEPS came first).
- DEVGATE_PROBE_BUDGET=S: the run stops at the first step end S seconds or
  more after the first step ended (run_end's stop "budget"), once the steps
  after the warm-up are as many as DEVGATE_PROBE_STEADY's N: a window that is
  not steady yet gets its time, not the step cap.
- DEVGATE_PROBE_FAST_EXIT=1: a run the probe stopped leaves through the
  interpreter's exit path (threads joined, atexit handlers, open files
  flushed) without the module teardown after it (devgate_probe.auto), which
  takes seconds with torch loaded.

No user code is needed: both are driven from the optimizer step hook.
"""

import json
import os
import sys
from time import perf_counter

from ._util import own_calls

STOP_CODE = 86  # SystemExit code of a stop asked by DEVGATE_PROBE_MAX_STEPS
TOP_OPS = 15
WARMUP = 2  # steps before the measured window (devgate's run record leaves them out too)
STOP_WORDS = {"steps": "after %d optimizer steps (DEVGATE_PROBE_MAX_STEPS)",
              "steady": "after %d optimizer steps: the window after the warm-up is steady "
                        "(DEVGATE_PROBE_STEADY)",
              "budget": "after %d optimizer steps: the time budget is spent (DEVGATE_PROBE_BUDGET)"}

# Operators whose time is the host waiting for the device (a sync point).
_SYNC_OPS = ("aten::_local_scalar_dense", "aten::item", "cudaDeviceSynchronize",
             "cudaStreamSynchronize", "cudaEventSynchronize", "aten::_mps_synchronize")
# Operators that copy between host and device (counted only off the cpu).
_COPY_OPS = ("aten::copy_", "aten::to", "aten::_to_copy", "Memcpy HtoD (Pageable -> Device)",
             "Memcpy HtoD (Pinned -> Device)", "cudaMemcpyAsync")


def _median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2.0


def _float_env(name):
    try:
        v = float(os.environ.get(name) or 0)
    except ValueError:
        return None
    return v if v > 0 else None


def _int_env(name):
    v = os.environ.get(name, "")
    try:
        n = int(v)
    except ValueError:
        return None
    return n if n > 0 else None


class Window:
    """The knobs of one process, read once at install."""

    def __init__(self):
        self.max_steps = _int_env("DEVGATE_PROBE_MAX_STEPS")
        self.warmup = self.window = None
        spec = os.environ.get("DEVGATE_PROBE_PROFILE", "")
        if spec:
            try:
                w, n = (int(x) for x in spec.split(":", 1))
                if w >= 0 and n > 0:
                    self.warmup, self.window = w, n
            except ValueError:
                pass
        self.out = os.environ.get("DEVGATE_PROBE_PROFILE_OUT") or None
        try:
            wall = float(os.environ.get("DEVGATE_PROBE_PROFILE_WALL") or 0)
        except ValueError:
            wall = 0.0
        self.wall_s = wall if wall > 0 else None
        self.max_events = _int_env("DEVGATE_PROBE_TRACE_MAX_EVENTS")
        self.profiled = 0  # steps inside the window
        self.trace = os.environ.get("DEVGATE_PROBE_TRACE") or None
        self.steps = 0
        self.prof = None
        self.t0 = None
        self.data_ms = 0.0
        self.device = "cpu"
        self.done = False
        self.steady_n = self.steady_tol = None
        try:
            n, tol = os.environ.get("DEVGATE_PROBE_STEADY", "").split(":", 1)
            if int(n) > 1 and float(tol) > 0:
                self.steady_n, self.steady_tol = int(n), float(tol)
        except ValueError:
            pass
        self.budget_s = _float_env("DEVGATE_PROBE_BUDGET")
        self.fast_exit = os.environ.get("DEVGATE_PROBE_FAST_EXIT", "") in ("1", "true", "yes")
        self.loops = []  # the loop times (ms) of the steps after the warm-up
        self.first_end = None  # perf_counter() at the first step's end
        self.stopped = None  # why the probe stopped the run ("steps", "steady", "budget")

    @property
    def wanted(self):
        return (self.max_steps is not None or self.steady_n is not None or self.budget_s is not None
                or (self.window is not None and self.out is not None))

    def stop_reason(self, loop_ms):
        """Why the run stops after this step, or None."""
        if self.first_end is None:
            self.first_end = perf_counter()
        if self.steps > WARMUP and loop_ms is not None:
            self.loops.append(loop_ms)
        if self.max_steps is not None and self.steps >= self.max_steps:
            return "steps"
        n = len(self.loops)
        if self.steady_n is not None and n >= self.steady_n:
            a, b = _median(self.loops[:n // 2]), _median(self.loops[n - n // 2:])
            if abs(a - b) <= self.steady_tol * max(a, b):
                return "steady"
        # The budget cuts a window that is not steady yet, never one shorter
        # than the steady check's (its rate's interval needs those steps).
        if (self.budget_s is not None and n >= (self.steady_n or 0)
                and perf_counter() - self.first_end >= self.budget_s):
            return "budget"
        return None

    def after_step(self, state, data_ms, loop_ms=None):
        """Called by the step hook after the step event went out, with the
        step's data wait and its whole loop time (ms). May raise
        SystemExit(STOP_CODE)."""
        self.steps += 1
        if self.prof is not None:
            self.data_ms += data_ms or 0.0
            self.profiled += 1
            over = self.wall_s is not None and perf_counter() - self.t0 >= self.wall_s
            if self.steps >= self.warmup + self.window or over:
                self._close(state, "wall" if over and self.profiled < self.window else None)
                if self.max_steps is not None:  # the window was what the run was for
                    self._stop(state, "steps")
        elif (self.window is not None and self.out is not None and not self.done
              and self.steps == self.warmup):
            self._open(state)
        why = self.stop_reason(loop_ms)
        if why:
            if self.prof is not None:
                self._close(state)
            self._stop(state, why)

    def _stop(self, state, why):
        self.stopped = why
        state.stop(self.steps, why, STOP_WORDS[why] % self.steps)
        raise SystemExit(STOP_CODE)

    def _open(self, state):
        torch = sys.modules.get("torch")
        prof_mod = getattr(torch, "profiler", None) if torch else None
        self.device = state.device or "cpu"
        if prof_mod is None:
            self._write({"error": "torch.profiler is not available"})
            return
        with own_calls(state):
            try:
                acts = [prof_mod.ProfilerActivity.CPU]
                if self.device.startswith("cuda"):
                    acts.append(prof_mod.ProfilerActivity.CUDA)
                self.prof = prof_mod.profile(activities=acts)
                self.prof.__enter__()
                self.t0 = perf_counter()
            except Exception as e:
                self.prof = None
                self._write({"error": "torch.profiler could not start: %s" % e})

    def _close(self, state, cut=None):
        prof, self.prof = self.prof, None
        self.done = True
        with own_calls(state):
            try:
                wall_ms = (perf_counter() - self.t0) * 1000.0
                prof.__exit__(None, None, None)
                rec = self._analyse(prof, wall_ms)
                if cut:
                    rec["cut"] = ("the window closed after %d of %d steps: %.1f s of window passed "
                                  "DEVGATE_PROBE_PROFILE_WALL=%g" % (self.profiled, self.window,
                                                                     wall_ms / 1000.0, self.wall_s))
                self._write(rec)
            except Exception as e:
                self._write({"error": "torch.profiler window failed: %s" % e})

    def _analyse(self, prof, wall_ms):
        on_cpu = self.device == "cpu"
        ops, sync_us, copy_us = [], 0.0, 0.0
        for evt in prof.key_averages():
            name = str(getattr(evt, "key", ""))
            if not name or name.startswith("ProfilerStep"):
                continue
            self_us = float(getattr(evt, "self_cpu_time_total", 0.0) or 0.0)
            dev_us = float(getattr(evt, "self_cuda_time_total", 0.0) or 0.0)
            calls = int(getattr(evt, "count", 0) or 0)
            if name in _SYNC_OPS:
                sync_us += self_us
            elif name in _COPY_OPS and not on_cpu:
                copy_us += self_us
            ops.append({"op": name, "calls": calls, "ms_total": self_us / 1000.0,
                        "device_ms_total": dev_us / 1000.0 if not on_cpu else None})
        key = "ms_total" if on_cpu else "device_ms_total"
        ops.sort(key=lambda o: -(o[key] or o["ms_total"]))
        trace = skipped = None
        events = None
        try:
            events = len(prof.events())  # built once by key_averages: no second pass
        except Exception:
            events = None
        if self.trace and self.max_events is not None and events is not None \
                and events > self.max_events:
            skipped = ("the window recorded %d events, over DEVGATE_PROBE_TRACE_MAX_EVENTS=%d: "
                       "no Chrome trace written" % (events, self.max_events))
        elif self.trace:
            try:
                prof.export_chrome_trace(self.trace)
                trace = self.trace
            except Exception as e:
                skipped = "export_chrome_trace failed: %s" % e
        data_ms = self.data_ms
        sync_ms = sync_us / 1000.0
        h2d_ms = None if on_cpu else copy_us / 1000.0
        compute = wall_ms - data_ms - sync_ms - (h2d_ms or 0.0)
        return {"warmup": self.warmup, "steps": self.profiled or self.window, "device": self.device,
                "events": events, "trace_skipped": skipped,
                "wall_ms": wall_ms, "data_ms": data_ms, "h2d_ms": h2d_ms, "sync_ms": sync_ms,
                "compute_ms": compute if compute > 0 else 0.0, "ops": ops[:TOP_OPS],
                "ops_count": len(ops), "trace": trace, "profiler": "torch.profiler"}

    def _write(self, rec):
        if not self.out:
            return
        rec.setdefault("v", 1)
        try:
            tmp = self.out + ".tmp"
            with open(tmp, "w") as f:
                json.dump(rec, f, allow_nan=False, default=str)
            os.replace(tmp, self.out)
        except Exception:
            pass
