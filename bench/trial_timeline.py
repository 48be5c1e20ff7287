#!/usr/bin/env python3
"""Where a child run's seconds go, from the timelines of accept records
(docs/schema/measure.md, TRIAL "timeline"; docs/schema/report.md, run
"supervise.timeline"): each sweep trial's marks cut into consecutive spans,
and the median of each span over the trials.

    python3 bench/trial_timeline.py REPORT.json [REPORT.json ...]

prints, per record, one line per trial (batch, why it ended, wall, the spans)
and a line of medians. bench/fork_server.sh and dev/gpu-pass.sh's `fork` pass
use spans() and medians() from here."""
import json
import statistics
import sys

# (span, from mark, to mark): a span whose marks are not both valid is left out;
# "launch" is the timeline's origin (0). A forked run has no torch_imported of
# its own (the server imported torch): its "to main" span runs from the fork.
SPANS = (
    ("start", "launch", "main"),          # fork server request (or fork/exec) to the program's code
    ("imports", "main", "torch_imported"),
    ("to device", "torch_imported", "device_init"),
    ("device init", "device_init", "device_ready"),
    ("to 1st step", "device_ready", "first_step"),
    ("warm-up", "first_step", "window_start"),
    ("window", "window_start", "window_end"),
    ("stop", "window_end", "loop_end"),
    ("exit", "loop_end", "exit"),
    ("tree", "exit", "tree_gone"),
)
# Without a device (the cpu) the script's own set-up runs from torch to the first step.
FALLBACK = {"to 1st step": ("torch_imported", "first_step")}


def _mark(marks, name):
    if name == "launch":
        return 0.0
    m = marks.get(name) or {}
    return m.get("value") if m.get("valid") else None


def spans(trial):
    """{span: seconds} of one TRIAL entry (empty without a timeline), with
    "devgate" the trial's wall past its tree's end (record, parse) and
    "wall" the trial's wall."""
    marks = ((trial.get("timeline") or {}).get("marks")) or {}
    out = {}
    for name, a, b in SPANS:
        ta, tb = _mark(marks, a), _mark(marks, b)
        if (ta is None or tb is None) and name in FALLBACK and _mark(marks, "device_init") is None:
            ta, tb = (_mark(marks, x) for x in FALLBACK[name])
        if ta is not None and tb is not None:
            out[name] = tb - ta
    wall = (trial.get("wall_s") or {}).get("value")
    gone = _mark(marks, "tree_gone")
    if wall is not None:
        out["wall"] = wall
        if gone is not None:
            out["devgate"] = wall - gone
    return out


def trials(d):
    sw = (d or {}).get("sweep") or {}
    return (sw.get("trials") or []) + (sw.get("bisect") or [])


def medians(records):
    """{span: median seconds} over every trial of the records."""
    by = {}
    for d in records:
        for t in trials(d):
            for k, v in spans(t).items():
                by.setdefault(k, []).append(v)
    return {k: statistics.median(v) for k, v in by.items()}


ORDER = [s[0] for s in SPANS] + ["devgate", "wall"]


def line(sp):
    return " ".join("%s %.2f" % (k, sp[k]) for k in ORDER if k in sp)


def main(paths):
    for p in paths:
        d = json.load(open(p))
        print("%s:" % p)
        for t in trials(d):
            print("  b%-6s %-8s %-13s %s" % (t.get("batch"), t.get("ended"), t.get("stopped_by") or "-",
                                            line(spans(t))))
        print("  median over %d trials: %s" % (len(trials(d)), line(medians([d]))))
        c = d.get("compare") or {}
        if c:
            sp = c.get("spec") or {}
            print("  compare: %s pairs, ended by %s (budget %s s)" % (
                sp.get("repetitions"), sp.get("pairs_ended"), (sp.get("budget") or {}).get("value")))
        srv = (d.get("launch") or {}).get("server") or {}
        if srv:
            print("  fork server: ready %.2f s after its start, runs waited %.2f s for it" % (
                (srv.get("ready_s") or {}).get("value") or 0, (srv.get("waited_s") or {}).get("value") or 0))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
