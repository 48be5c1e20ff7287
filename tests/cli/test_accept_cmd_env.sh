#!/usr/bin/env bash
# devgate accept -- CMD passes the user's environment to every child run whole:
#  - twelve variables of the user's (DGT_V1..DGT_V12) reach every child (the
#    gate's interpreter, each sweep trial, the soak, the baseline, the profile);
#  - a PYTHONPATH longer than 4 KiB reaches them uncut: its last entry (a
#    directory past the first 4096 bytes holding a sitecustomize.py, as a
#    user's own packages would be) is still on the path of every interpreter,
#    the gate's included (devgate's own edits of the child's environment once
#    lived in a fixed table of 8 entries of 4 KiB each and cut it there).
# Each Python child imports that sitecustomize, which appends one JSON line
# (its argv, DEVGATE_PROBE and the DGT_V variables it sees) to $T/seen.jsonl.
. "$(dirname "$0")/lib.sh"
SRC=${DEVGATE_SRC:?}
PY=$(command -v python3)
unset DEVGATE_PROBE_PATH DEVGATE_OOM_EVENTS
SCRIPT="$SRC/tests/python/scripts/sweep_train.py"

mkdir -p site
cat >site/sitecustomize.py <<'PY'
import json, os, sys
with open(os.environ["DGT_SEEN"], "a") as f:
    f.write(json.dumps({"argv": sys.argv, "probe": os.environ.get("DEVGATE_PROBE"),
                        "vars": {k: v for k, v in os.environ.items() if k.startswith("DGT_V")}}) + "\n")
PY
export DGT_SEEN="$T/seen.jsonl"
for i in $(seq 1 12); do export "DGT_V$i=value $i"; done
# 5000 bytes of entries that do not exist, then the one that does.
LONG=$("$PY" -c 'print(":".join("/nonexistent/%04d-%s" % (i, "x" * 40) for i in range(100)))')
export PYTHONPATH="$LONG:$T/site"
[ "${#PYTHONPATH}" -gt 4096 ] && ok || bad "the test's PYTHONPATH is only ${#PYTHONPATH} bytes"

"$DG" --no-ledger accept --json --quick --sweep-from 16 --sweep-to 64 -o pack -- \
  "$PY" "$SCRIPT" --batch '{batch}' --device '{device}' --epochs '{epochs}' --steps 3 --base-ms 5 \
  >acc.json 2>acc.err
rc=$?
[ "$rc" -le 4 ] && ok || { bad "accept -- CMD exited $rc"; tail -20 acc.err >&2; }
[ -s seen.jsonl ] && ok || { bad "no child imported the user's sitecustomize"; tail -5 acc.err >&2; }

"$PY" - "$T/seen.jsonl" "$T/acc.json" <<'PY' >check.out 2>&1
import json, sys
seen = [json.loads(l) for l in open(sys.argv[1])]
d = json.load(open(sys.argv[2]))
want = {"DGT_V%d" % i: "value %d" % i for i in range(1, 13)}
# The gate's interpreter: python -c under the probe's manual mode (the
# environment proof's own python -c runs without DEVGATE_PROBE).
gate = [s for s in seen if s["argv"][:1] == ["-c"] and s["probe"] == "manual"]
runs = [s for s in seen if any(a.endswith("sweep_train.py") for a in s["argv"])]
print("children", len(seen), "gate", len(gate), "runs", len(runs))
trials = len(d["sweep"]["trials"]) + len(d["sweep"]["bisect"])
ok = True
if not gate:
    print("the gate's interpreter never imported the sitecustomize at the end of PYTHONPATH")
    ok = False
if len(runs) < trials + 1:
    print("only %d of the command's children imported it (%d sweep trials alone)" % (len(runs), trials))
    ok = False
for s in seen:
    if s["vars"] != want:
        print("a child saw %d of the 12 variables: %s" % (len(s["vars"]), s["argv"][:2]))
        ok = False
sys.exit(0 if ok else 1)
PY
if [ $? -eq 0 ]; then ok; else bad "the children's environments"; sed 's/^/  | /' check.out >&2; fi
cat check.out
expect_json acc.json '[s["status"] for s in d["steps"]][:2] == ["ok", "ok"]'
done_tests
