#!/usr/bin/env python3
# Writes the seed corpora of the harnesses whose inputs are other programs'
# answers, from real runs of the built devgate (and of the interpreter, the
# node protocol and Slurm where they are here): each seed is what the real
# thing printed, framed as the harness reads it (its header comment says how).
#   tests/fuzz/make_seeds.py build/devgate tests/fuzz/corpus [HARNESS...]
# Needs python3 and the probe beside devgate; Slurm's seeds need scontrol
# (otherwise the committed ones stay). Reruns overwrite the seeds it makes.
import json, os, subprocess, sys, tempfile

dg = os.path.abspath(sys.argv[1])
corpus = os.path.abspath(sys.argv[2])
only = set(sys.argv[3:])
src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
tmp = tempfile.mkdtemp(prefix="devgate-seeds-")
env = dict(os.environ, LC_ALL="C", DEVGATE_LEDGER=os.path.join(tmp, "ledger.db"))


def put(harness, name, data):
    d = os.path.join(corpus, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def run(args, stdin=b"", extra_env=None, fds=False, timeout=300):
    """(exit status, stdout, stderr, fd 3's bytes when fds) of one real run."""
    e = dict(env, **(extra_env or {}))
    r3 = w3 = None
    if fds:  # the pipe as the child's fd 3, through a shell's redirection
        r3, w3 = os.pipe()
        args = ["sh", "-c", 'exec "$0" "$@" 3>&%d %d>&-' % (w3, w3)] + args
    p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=e, cwd=tmp, pass_fds=(w3,) if fds else ())
    if fds:
        os.close(w3)
    out, err = p.communicate(stdin, timeout=timeout)
    pipe = b""
    if fds:
        with os.fdopen(r3, "rb") as f:
            pipe = f.read()
    return p.returncode, out, err, pipe


def want(h):
    return not only or h in only


# ---- fuzz_trial: 6 header bytes, the child's bytes, NUL, its stderr line ----
def trial_seeds():
    def fixture(name, spec, fault=None, flags=1):
        e = {"DEVGATE_FAULT": fault} if fault else {}
        rc, _, err, pipe = run([dg, "--no-ledger", "__trial", "--spec-fd", "0", "--result-fd", "3"],
                               json.dumps(spec).encode(), e, fds=True)
        sig = -rc if rc < 0 else 0
        head = bytes([0, flags, sig, rc if rc >= 0 else 0, spec["batch"].bit_length() - 1, 3])
        line = err.decode(errors="replace").strip().splitlines()[:1]
        put("fuzz_trial", name, head + pipe + b"\0" + "".join(line).encode())

    base = {"batch": 8, "steps": 8, "epochs": 1, "backend": "cpu", "threads": 1, "sync_every": 1}
    fixture("fixture-ok", base)
    fixture("fixture-budget", dict(base, batch=64, mem_budget=1 << 16))
    fixture("fixture-bad-spec", dict(base, model="no-such-model"))
    fixture("fixture-crash", dict(base, batch=16), fault="trial-crash@16")
    script = os.path.join(src, "tests/python/scripts/sweep_train.py")

    def command(name, args, flags=1, kills=0, steps=12):
        rc, out, err, _ = run([dg, "--no-ledger", "run", "--json", "--", "python3", script] + args,
                              extra_env={"DEVGATE_PROBE_MAX_STEPS": str(steps)})
        head = bytes([1, flags, 0, kills, 6, 2])
        put("fuzz_trial", name, head + out + b"\0" + b"the child's run record does not parse")

    command("command-ok", ["--batch", "64", "--data-ms", "3"])
    command("command-killed", ["--batch", "128", "--kill-above", "64"], flags=1 | (1 << 4), kills=1)
    command("command-unknown-oom", ["--batch", "128", "--kill-above", "64"], flags=1 | (2 << 4))
    put("fuzz_trial", "command-no-record", bytes([1, 1, 0, 0, 3, 2]) + b"\0cannot start: no such file")


if want("fuzz_trial"):
    trial_seeds()
print("seeds written under", corpus)
