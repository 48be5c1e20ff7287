#!/usr/bin/env python3
# Writes the seed corpus of tests/fuzz/fuzz_cli from the built devgate: per
# verb, every option of its --help with a value (as "--name VALUE" and as
# "--name=VALUE"), --help, and a few refusals.
#   tests/fuzz/make_cli_seeds.py build/devgate tests/fuzz/corpus/fuzz_cli
import re, subprocess, sys, os
dg, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
verbs = sorted(set(l.split()[0] for l in subprocess.run([dg, "__options"], capture_output=True, text=True).stdout.splitlines()))
vals = {"N": "4", "S": "1.5", "F": "0.5", "X": "7", "SIZE": "512K", "MIB": "256", "D": "10s",
        "CxHxW": "1x28x28", "M,N,K": "64,32,16", "N,N,...": "32,128", "NAME=VALUE": "speedup_min=1.2"}
def value(arg, default):
    if arg in vals: return vals[arg]
    if default and re.fullmatch(r"[A-Za-z0-9_.,:-]+", default): return default
    return "x"
n = 0
for v in verbs:
    h = subprocess.run([dg, v, "--help"], capture_output=True, text=True).stdout
    words, eqs = [v], [v]
    for line in h.splitlines():
        m = re.match(r"  (?:(-\w), )?(--[\w-]+)(?: (\S+))?\s{2,}(.*)", line)
        if not m or m.group(2) == "--help": continue
        alias, name, arg, rest = m.groups()
        d = re.search(r"\(default ([^;)]+)", rest)
        if arg:
            val = value(arg, d.group(1) if d else None)
            words += [name, val]
            eqs.append(f"{name}={val}")
        else:
            words.append(name); eqs.append(name)
    for tag, ws in (("all", words), ("eq", eqs)):
        open(f"{out}/{v}-{tag}", "w").write("\n".join(ws)); n += 1
    open(f"{out}/{v}-help", "w").write(f"{v}\n--help"); n += 1
extra = {"global": "devgate\n--ledger\nx.db\n--json\n-q", "global-bad": "devgate\n--ledgr=x",
         "missing-value": "train\n--batch", "bad-number": "sweep\n--from\n1e99",
         "near-miss": "accept\n--treshold\nx=1", "flag-value": "env\n--json=1",
         "positionals": "compare\nA\nB\nC\nD", "rest": "run\n--timeout\n5\n--\nprog\n--json",
         "remote": "remote\n-o\nPort=2222\n--cache\n/c\nhost\nenv",
         "pool-submit": "pool\n--tasks\n3\nsubmit\n--\ntrain\n--batch\n8",
         "out-of-range": "sweep\n--from\n0", "out-of-range-double": "train\n--lr=-1",
         "unknown": "env\n--zzzzzzzzzzzz"}
for k, t in extra.items():
    open(f"{out}/{k}", "w").write(t); n += 1
print(n, "seeds")
