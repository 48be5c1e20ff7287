#!/usr/bin/env bash
# devgate accept --quick -- CMD on unmodified user-style PyTorch scripts
# (tests/python/scripts/user/), the accept cases of issue 21's table:
#   small  a 24-sample data set (small enough that no throughput stop can
#          come first: two trials, 8 and 16): the sweep stops at its size
#          ("train-set"), knee, safe batch and promise within it, no "memory
#          ceiling";
#   leak   outputs kept with their graph every step, under the quick tier's
#          two epochs: memory-short warns "suspected leak", pointing at the
#          default tier, from the line through the memory each step read;
#   healthy the careful script: no finding above info from memory.
# Skipped (77) without torch.
. "$(dirname "$0")/lib.sh"
SRC=${DEVGATE_SRC:?}
torch_python
unset DEVGATE_EVENTS_PATH DEVGATE_EVENTS_ID
U="$SRC/tests/python/scripts/user"

accept() { # accept NAME [DEVGATE OPTIONS] -- SCRIPT ARGS...: the record in NAME.json
  local name=$1 opts=(); shift
  while [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  "$DG" --no-ledger accept --quick --json "${opts[@]}" -o "pack-$name" -- "$PY" "$U/$@" \
    >"$name.json" 2>"$name.err"
  local rc=$?
  [ "$rc" -le 1 ] || [ "$rc" -eq 4 ] && ok || {
    bad "accept --quick -- $1 exited $rc"; tail -20 "$name.err" | sed 's/^/  /' >&2; }
}

accept small -- small_data.py --samples 24 --batch-size '{batch}' --device '{device}' --epochs '{epochs}'
expect_json small.json 'd["sweep"]["stopped"]["reason"] == "train-set" and max(t["batch"] for t in d["sweep"]["trials"]) <= 24 and d["sweep"]["knee"]["batch"] <= 24 and d["sweep"]["safe_batch"]["batch"] <= 24'
expect_json small.json 'd["final_gate"]["batch"] is None or d["final_gate"]["batch"] <= 24'
expect_json small.json '"the memory ceiling" not in d["final_gate"]["statement"].replace("not a memory ceiling", "")'
expect_json small.json 'all(t["samples_per_step"]["value"] <= 24 for t in d["sweep"]["trials"] if t["samples_per_step"]["valid"]) and d["sweep"]["trials"][0]["train_samples"]["value"] == 24'

# The soak at batch 64 (24 steps an epoch): the knee's batch on this data
# leaves 2 steps an epoch, too few readings for a line (memory-short then
# says only that the soak is short).
accept leak --batch 64 -- track_train.py --batch-size '{batch}' --device '{device}' --epochs '{epochs}'
expect_json leak.json 'd["soak"]["epochs_recorded"] == 2'
expect_json leak.json 'any(f["id"] == "memory-short" and f["severity"] == "warn" and f["title"].startswith("suspected leak") and "default tier" in f["action"] for f in d["findings"])'
# A range whose ends print alike is said once ("13.5% an epoch", not "13.5% to 13.5%").
expect_json leak.json 'not any(__import__("re").search(r"([-+]?[0-9.]+%) to \1(?![0-9])", f["title"]) for f in d["findings"])'

accept healthy -- healthy_train.py --epochs '{epochs}' --workers 0
expect_json healthy.json 'not [f for f in d["findings"] if f["id"] in ("memory-short", "retained-refs", "footprint-growth") and f["severity"] != "info"]'

done_tests
