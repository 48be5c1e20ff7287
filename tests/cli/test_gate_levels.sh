#!/usr/bin/env bash
# devgate gate --level 2 and 3 on every backend that opens here (cpu, PoCL),
# each within its stated budget on this machine (issue 25: "level budgets
# kept at each level"; the wall less the time spent waiting for another
# measurement, as the record's overrun counts it), with what each level adds:
# level 2 the op table, the reference check and the link of a device backend;
# level 3 the sustained load (windows, a drift verdict, the health source,
# fields no source gives "not reported") and the memory bandwidth. Level 1's
# budget is test_gate.sh's; level 4 (40 minutes) is left to the GPU pass.
. "$(dirname "$0")/lib.sh"

# budget_kept FILE LEVEL BUDGET: the level object says it and it held.
budget_kept() {
  expect_json "$1" "d['level']['level'] == $2 and d['level']['budget']['value'] == $3 and d['level']['overrun'] is False and d['level']['wall']['value'] - d['level']['lock_waited']['value'] <= $3"
}

"$DG" --no-ledger gate --level 2 --json >l2.json 2>l2.err
rc=$?
[ "$rc" -eq 0 ] && ok || { bad "gate --level 2 exited $rc"; tail -5 l2.err >&2; }
budget_kept l2.json 2 60
expect_json l2.json 'd["reference_ok"] is True and all(b["ops"]["failed"] == 0 and b["ops"]["checked"] > 50 for b in d["backends"] if b["available"])'
expect_json l2.json 'all(("link" in b) == (b["name"] != "cpu") for b in d["backends"] if b["available"])'

"$DG" --no-ledger gate --level 3 --json >l3.json 2>l3.err
rc=$?
# 1 only when a drift or the bandwidth failed on this shared machine; say which.
[ "$rc" -le 1 ] && ok || { bad "gate --level 3 exited $rc"; tail -5 l3.err >&2; }
[ "$rc" -eq 0 ] || python3 - l3.json >&2 <<'PY' || true
import json, sys
for b in json.load(open(sys.argv[1]))["backends"]:
    s = b.get("sustain") or {}
    print("note:", b["name"], (s.get("drift") or {}).get("verdict"), s.get("reason"),
          (b.get("memory_bandwidth") or {}).get("reason"))
PY
budget_kept l3.json 3 300
expect_json l3.json '"sustain" in d["level"]["checks"] and "memory_bandwidth" in d["level"]["checks"]'
expect_json l3.json 'all(len(b["sustain"]["windows"]) >= 50 and b["sustain"]["drift"]["verdict"] and b["sustain"]["drift"]["noise"]["unit"] == "GFLOP/s" for b in d["backends"] if b["available"])'
expect_json l3.json 'all(b["sustain"]["source"].startswith("host") and b["memory_bandwidth"]["bandwidth"]["valid"] for b in d["backends"] if b["available"])'
# What a host source lacks is not reported, never 0: the memory clock.
expect_json l3.json 'all(b["sustain"]["health"]["mem_clock"]["max"]["valid"] is False and b["sustain"]["health"]["mem_clock"]["max"]["value"] is None for b in d["backends"] if b["available"])'
done_tests
