#!/usr/bin/env bash
# devgate accept -- CMD's cpu baseline: when the gate passes a device, the
# command runs with {device}=cpu and {device}=DEVICE in turn (interleaved), and
# the compare section holds both sides' samples/s, the speedup with its
# interval and the busy fraction, which the fixture's speedup rules and the
# decision then judge. This machine has no GPU: the gate's interpreter is a
# stand-in that reports cuda as working (tests/cli/data/fake_gate_python), and
# the script trains on the cpu when told --device cuda, so the "device" is the
# cpu again and the speedup is about 1. Then a script that does not name its
# device (--accel, as pytorch/examples' DCGAN): its cpu side runs with the
# accelerators hidden. Skipped (77) without torch.
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
expect_json acc.json 'd["spec"]["cpu_side"] == {"how": "{device}=cpu", "env": []} and d["spec"]["device_args"] == {}'

# A script that names no device (pytorch/examples' DCGAN style: --accel moves
# it to the accelerator) gets its cpu baseline too: the cpu side runs the same
# command with every accelerator hidden (CUDA_VISIBLE_DEVICES= and the like),
# the device side with --device-arg's words. A sitecustomize of the user's (on
# PYTHONPATH) notes what each of the script's interpreters saw.
mkdir -p site
cat >site/sitecustomize.py <<'PY'
import json, os, sys
if any(a.endswith("accel_train.py") for a in sys.argv):
    with open(os.environ["DGT_SEEN"], "a") as f:
        f.write(json.dumps({"argv": sys.argv[1:],
                            "env": {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES",
                                                                    "HIP_VISIBLE_DEVICES",
                                                                    "ROCR_VISIBLE_DEVICES")},
                            "steps": os.environ.get("DEVGATE_PROBE_MAX_STEPS")}) + "\n")
PY
export DGT_SEEN="$T/seen.jsonl"
unset CUDA_VISIBLE_DEVICES HIP_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES
PYTHONPATH="$T/site" "$DG" --no-ledger accept --json --quick --sweep-from 16 --sweep-to 32 \
  --python "$SRC/tests/cli/data/fake_gate_python" --device-arg 'cuda=--accel' -o pack2 -- \
  "$PY" "$SRC/tests/python/scripts/user/accel_train.py" --batchSize '{batch}' --niter '{epochs}' \
  --workers 0 >accel.json 2>accel.err
rc=$?
[ "$rc" -le 1 ] && ok || { bad "accept -- CMD without {device} exited $rc"; tail -30 accel.err >&2; }
expect_json accel.json 'd["compare"]["status"] == "ok" and d["compare"]["runs"][0]["repetitions"]["order"] == ["cpu", "device", "cpu", "device"]'
expect_json accel.json 'd["spec"]["placeholders"]["device"] is False and d["spec"]["device_args"] == {"cuda": ["--accel"]}'
expect_json accel.json 'd["spec"]["cpu_side"]["how"] == "accelerators hidden" and "CUDA_VISIBLE_DEVICES=" in d["spec"]["cpu_side"]["env"]'
"$PY" - "$T/seen.jsonl" <<'PY' >seen.out 2>&1 && ok || { bad "what the script's runs saw"; sed 's/^/  | /' seen.out >&2; }
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
cpu = [r for r in runs if r["env"]["CUDA_VISIBLE_DEVICES"] == ""]
dev = [r for r in runs if r["env"]["CUDA_VISIBLE_DEVICES"] is None]
why = []
# The compare's two cpu sides: accelerators hidden, no --accel.
if len(cpu) != 2 or any(r["env"]["HIP_VISIBLE_DEVICES"] != "" or "--accel" in r["argv"] for r in cpu):
    why.append("cpu sides: %s" % cpu)
# Every other run (sweep trials, soak, the device sides, the profile): --accel, nothing hidden.
if len(dev) != len(runs) - 2 or any(r["argv"][-1] != "--accel" for r in dev):
    why.append("device runs: %s" % dev)
print("runs %d, cpu %d, device %d" % (len(runs), len(cpu), len(dev)))
if why:
    print("\n".join(why))
sys.exit(1 if why else 0)
PY
# A --device-arg the gate cannot name is refused before anything runs.
expect_exit 2 "$DG" --no-ledger accept --quick --device-arg 'gpu=--accel' -- "$PY" x.py
expect_grep "$T/err" "--device-arg: 'gpu' is not a device the gate names" "the refusal"
done_tests
