#!/usr/bin/env bash
# devgate accept -- CMD's cpu baseline: when the gate passes a device, the
# command runs with {device}=cpu and {device}=DEVICE in turn (interleaved), and
# the compare section holds both sides' samples/s, the speedup with its
# interval and the busy fraction, which the fixture's speedup rules and the
# decision then judge. This machine has no GPU: the gate's interpreter is a
# stand-in that reports cuda as working (tests/cli/data/fake_gate_python), and
# the script trains on the cpu when told --device cuda, so the "device" is the
# cpu again and the speedup is about 1. Skipped (77) without torch.
. "$(dirname "$0")/lib.sh"
SRC=${DEVGATE_SRC:?}
torch_python
SCRIPT="$SRC/tests/python/scripts/accept_train.py"

"$DG" --no-ledger accept --json --quick --sweep-from 16 --sweep-to 32 \
  --python "$SRC/tests/cli/data/fake_gate_python" -o pack -- \
  "$PY" "$SCRIPT" --batch '{batch}' --device '{device}' --epochs '{epochs}' --steps 4 \
  --fake-device cuda >acc.json 2>acc.err
rc=$?
[ "$rc" -le 1 ] && ok || { bad "accept -- CMD exited $rc"; tail -30 acc.err >&2; }
expect_json acc.json 'd["spec"]["backend"] == "cuda" and d["sweep"]["spec"]["backend"] == "cuda"'
expect_json acc.json '[s["name"] for s in d["steps"] if s["status"] == "ok"][-2:] == ["compare", "profile"]'
expect_json acc.json 'd["compare"]["status"] == "ok" and d["compare"]["spec"]["repetitions"] == 2'
expect_json acc.json 'd["compare"]["runs"][0]["repetitions"]["order"] == ["cpu", "device", "cpu", "device"]'
expect_json acc.json 'all(v > 0 for v in d["compare"]["runs"][0]["repetitions"]["cpu_samples_per_s"] + d["compare"]["runs"][0]["repetitions"]["device_samples_per_s"])'
expect_json acc.json 'd["compare"]["runs"][0]["speedup"]["valid"] and d["compare"]["runs"][0]["speedup_ci"]["lo"]["valid"] and d["compare"]["runs"][0]["busy_fraction"]["valid"]'
# Each side ran under the measurement lock with its contention window, as the
# fixture's repetitions do, so the contended rule reads the user's compare too.
expect_json acc.json 'all(e["lock"]["state"] == "held" and isinstance(e["window"], dict) for k in ("cpu", "device") for e in d["compare"]["runs"][0]["repetitions"][k]) and len(d["compare"]["runs"][0]["repetitions"]["device"]) == 2'
expect_json acc.json 'abs(d["compare"]["runs"][0]["speedup"]["value"] - d["compare"]["runs"][0]["device"]["samples_per_s"]["value"] / d["compare"]["runs"][0]["cpu"]["samples_per_s"]["value"]) < 1e-9'
# The fixture's speedup rules and decision judge the compare run: the decision
# cites its speedup at its batch. (Which route: the "device" is the same cpu,
# so with two pairs a loaded machine's noise decides the side of the threshold.)
expect_json acc.json 'any("x cpu at batch" in r for r in d["decision"]["reasons"])'
done_tests
