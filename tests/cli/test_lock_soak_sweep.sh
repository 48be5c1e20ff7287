#!/usr/bin/env bash
# The machine-wide measurement lock around soak epochs and sweep trials
# (docs/measure.md "Measurement lock"): two soaks at once take turns epoch by
# epoch, each wait is recorded with its epoch and kept out of the timed wall;
# a sweep trial waits for a lock held elsewhere and says how long.
. "$(dirname "$0")/lib.sh"
# lib.sh gives this script its own DEVGATE_MEASURE_LOCK; everything here shares it.

# ---- two soaks at once --------------------------------------------------------------
soak() { "$DG" -q --no-ledger soak --batch 32 --steps 40 --epochs 3 --threads 1 --workers 0 --json; }
soak >"$T/a.json" 2>"$T/a.err" &
pa=$!
soak >"$T/b.json" 2>"$T/b.err" &
pb=$!
wait "$pa" && wait "$pb" && ok || bad "a soak failed: $(cat "$T/a.err" "$T/b.err")"
if python3 - "$T/a.json" "$T/b.json" <<'PY'
import json, sys
runs = [json.load(open(p)) for p in sys.argv[1:]]
contended = 0
for d in runs:
    assert d["instrumentation"]["lock_epochs"] is True
    locks = [e["lock"] for e in d["epochs"]]
    assert len(locks) == 3 and all(l["state"] == "held" for l in locks), locks
    total = d["instrumentation"]["lock_waited"]["value"]
    assert abs(total - sum(l["waited"]["value"] for l in locks)) < 1e-6
    contended += sum(l["contended"] for l in locks)
    # the waits of the epochs after the first fall inside the timed span: the
    # wall must not count them (it is the steps' own time)
    later = sum(l["waited"]["value"] for l in locks[1:])
    steps = d["steps"]["ms"][d["steps"]["warmup"]:]
    wall = d["throughput"]["wall"]["value"]
    # (the wall and the summed step times agree to well under 10 ms otherwise)
    assert wall - sum(steps) / 1000 < 0.02 + 0.5 * later, (wall, sum(steps) / 1000, later)
# one of the two waited for the other's epochs
assert contended >= 1, "neither soak ever waited"
assert sum(d["instrumentation"]["lock_waited"]["value"] for d in runs) > 0
# and they took turns: an epoch after the first waited too (the one releasing
# the lock gives way to a waiter instead of taking it straight back)
assert sum(e["lock"]["contended"] for d in runs for e in d["epochs"][1:]) >= 1, \
    [[e["lock"]["waited"]["value"] for e in d["epochs"]] for d in runs]
PY
then ok; else bad "two soaks did not take turns epoch by epoch"; fi

# ---- a sweep trial waits for a lock held elsewhere ---------------------------------
flock "$DEVGATE_MEASURE_LOCK" sleep 1.5 &
holder=$!
sleep 0.3
expect_exit 0 "$DG" -q --no-ledger sweep --from 8 --to 16 --no-bisect --timed-steps 2 --threads 1 --json
wait "$holder"
expect_json out 'd["trials"][0]["lock"]["contended"] and d["trials"][0]["lock"]["waited"]["value"] > 0.8 and d["lock_waited"]["value"] >= d["trials"][0]["lock"]["waited"]["value"]'
expect_json out 'all(t["lock"]["state"] == "held" for t in d["trials"]) and not d["trials"][-1]["lock"]["contended"]'

# ---- a devgate inside a measured program does not wait for its own parent -----------
# (run holds the lock for the whole program; the nested sweep would wait 600 s.)
expect_exit 0 timeout 120 "$DG" -q --no-ledger run -o "$T/nested" -- \
  sh -c '"$0" -q --no-ledger sweep --from 8 --to 8 --no-bisect --timed-steps 2 --threads 1 --json >"$1"' \
  "$DG" "$T/nested.json"
python3 - "$T/nested.json" <<'PY' && ok || bad "the nested sweep did not record its ancestor's lock"
import json, sys
d = json.load(open(sys.argv[1]))
t = d["trials"][0]["lock"]
assert t["state"] == "held by an ancestor" and not t["contended"], t
assert t["waited"]["value"] < 5, t
PY

done_tests
