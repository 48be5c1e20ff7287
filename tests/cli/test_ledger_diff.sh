#!/usr/bin/env bash
# ledger list, diff and export: the list's summary columns (verb, backend,
# model, batch, throughput with its unit, verdict); diff names every spec key
# (through the spec codec), environment fact and bucket field that differs
# before any number, and calls a ratio a speedup only between runs of the same
# verb, spec and bucket; export writes every run as CSV (header, RFC 4180
# quoting, empty for not reported) or JSON Lines (valid UTF-8, one a line).
. "$(dirname "$0")/lib.sh"

"$DG" -q train --batch 16 --steps 4 --threads 1 >/dev/null 2>&1
"$DG" -q train --batch 16 --steps 4 --threads 2 >/dev/null 2>&1
"$DG" -q train --batch 16 --steps 4 --threads 1 --model lenet >/dev/null 2>&1
"$DG" -q train --batch 16 --steps 4 --threads 1 >/dev/null 2>&1
"$DG" -q gate --backend cpu --size 8 >/dev/null 2>&1
mapfile -t ids < <("$DG" ledger list --json | python3 -c 'import json,sys; [print(r["id"]) for r in json.load(sys.stdin)]')
# oldest first: 0 threads 1, 1 threads 2, 2 lenet, 3 threads 1 again, 4 gate
mapfile -t ids < <(printf '%s\n' "${ids[@]}" | tac)
[ "${#ids[@]}" -eq 5 ] && ok || bad "wanted 5 runs, got ${#ids[@]}"

# Runs crafted beside them (the ledger is plain SQLite): a copy of run 0 on
# another host, one whose spec leaves out keys at their defaults (an older
# record), a host with a comma and a quote, invalid UTF-8 in a record, and two
# accept runs whose cpu BLAS kernel differs.
python3 - "$DEVGATE_LEDGER" "${ids[0]}" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rec = json.loads(db.execute("select record from runs where id = ?", (sys.argv[2],)).fetchone()[0])
def add(rid, verb, r, host):
    text = json.dumps(r)
    db.execute("insert into runs(id, verb, started_at, exit_status, state, host, git_commit, "
               "devgate_version, record) values (?,?,?,0,'complete',?,NULL,'0.1.0',?)",
               (rid, verb, "2026-01-02T03:04:05Z", host, text))
other = dict(rec, host="elsewhere")
other["device"] = dict(rec["device"], versions="OpenBLAS 0.3.26 Haswell; 1 threads (OpenMP)")
add("20260102-030405-0000000000a1", "train", other, "elsewhere")
old = json.loads(json.dumps(rec))
for k in ("cache", "max_bad_share", "on_bad_sample", "prefetch"):
    del old["spec"][k]
add("20260102-030405-0000000000a2", "train", old, rec["host"])
add("20260102-030405-0000000000a3", "train", rec, 'rack "7", slot 2')
add("20260102-030405-0000000000a4", "env", {"kind": "env"}, "h")
def accept(kernel):
    return {"v": 2, "kind": "accept", "spec": {"backend": "opencl", "model": "mlp", "batch": 64},
            "env": {"cpu": {"model": "AMD EPYC"}, "devgate": {"commit": "abc1234"}},
            "gate": {"backends": [{"name": "cpu", "blas": {"kernel": kernel, "config": "OpenBLAS 0.3.21"}}]},
            "bucket": {"id": "b0"}, "decision": {"route": "cpu", "backend": None},
            "final_gate": {"accepted": True, "screening": False, "batch": 64,
                           "throughput": {"value": 900.0, "unit": "samples/s", "valid": True}}}
add("20260102-030405-0000000000b1", "accept", accept("Zen"), "vm")
add("20260102-030405-0000000000b2", "accept", accept("Prescott"), "vm")
db.commit()
PY
# invalid UTF-8 in a stored record (a blob cast to text keeps the bytes)
python3 - "$DEVGATE_LEDGER" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("update runs set record = cast(? as text) where id = '20260102-030405-0000000000a4'",
           (b'{"kind":"env","note":"bad \xff\xfe bytes"}',))
db.commit()
PY

# ---- list: the summary columns ------------------------------------------------
expect_exit 0 "$DG" ledger list
expect_grep out '^id +verb +backend +model +batch +throughput +verdict +exit +label +command +host$'
expect_grep out "^${ids[0]} +train +cpu +mlp +16 +[0-9.]+ samples/s +ok +0 "
expect_grep out "^${ids[2]} +train +cpu +lenet +16 +[0-9.]+ samples/s +ok "
expect_grep out "^${ids[4]} +gate +cpu +- +- +- +pass +0 "
expect_grep out "^20260102-030405-0000000000b1 +accept +cpu +mlp +64 +900 samples/s +accepted "
expect_exit 0 "$DG" ledger list --json
expect_json out '[r for r in d if r["id"] == "'"${ids[0]}"'"][0]["throughput"]["unit"] == "samples/s" and [r for r in d if r["id"] == "'"${ids[0]}"'"][0]["throughput"]["valid"] and [r for r in d if r["id"] == "'"${ids[0]}"'"][0]["batch"] == 16'
# not reported is null and invalid, never 0
expect_json out '[r for r in d if r["id"] == "'"${ids[4]}"'"][0]["throughput"] == {"value": None, "unit": "samples/s", "valid": False} and [r for r in d if r["id"] == "'"${ids[4]}"'"][0]["batch"] is None'

# ---- diff: what differs first, then numbers labelled ---------------------------
expect_exit 1 "$DG" ledger diff "${ids[0]}" "${ids[1]}"
expect_grep out '^\* spec.threads +1 +2$'
expect_grep out '^  not comparable: spec.threads differs$'
expect_grep out '^  ratio B/A +[0-9.]+x, not a speedup: not comparable \(spec.threads\)'
grep -q 'speedup B/A' "$T/out" && bad "threads 1 vs 2 called a speedup" || ok
expect_grep err 'not comparable: spec.threads differs; use --force'
expect_exit 0 "$DG" ledger diff "${ids[0]}" "${ids[1]}" --json --force
expect_json out 'd["differs"][0] == "spec.threads" and not d["comparable"] and d["speedup"] is None and d["ratio"] > 0 and d["forced"] and d["not_comparable"] == "spec.threads"'
expect_exit 1 "$DG" ledger diff "${ids[0]}" "${ids[2]}"
expect_grep out '^\* spec.model +mlp +lenet$'
expect_grep out 'not comparable: spec.model differs'
# the same spec and bucket: a speedup, with the caveat of one measurement a side
expect_exit 0 "$DG" ledger diff "${ids[0]}" "${ids[3]}"
expect_grep out '^  speedup B/A +[0-9.]+x \(same spec and bucket; one measurement a side'
expect_grep out 'the same: 29 spec fields \(through the spec codec\)'
grep -q '^\*' "$T/out" && bad "identical specs listed a difference" || ok
expect_exit 0 "$DG" ledger diff "${ids[0]}" "${ids[3]}" --json
expect_json out 'd["comparable"] and d["differs"] == [] and d["speedup"] == d["ratio"] and d["runs"][0]["spec_decoded"]'
# another host: listed, still comparable
expect_exit 0 "$DG" ledger diff "${ids[0]}" 20260102-030405-0000000000a1
expect_grep out '^\* env.host +vm +elsewhere$'
expect_grep out '^\* env.device versions$'
expect_grep out 'speedup B/A .*the environment differs: env.host, env.device versions'
# an older record without some keys: the codec fills their defaults, so the same
expect_exit 0 "$DG" ledger diff "${ids[0]}" 20260102-030405-0000000000a2
grep -q '^\* spec' "$T/out" && bad "defaults left out of an older spec counted as differences" || ok
# the cpu BLAS kernel of two accept runs
expect_exit 0 "$DG" ledger diff 20260102-030405-0000000000b1 20260102-030405-0000000000b2
expect_grep out '^\* env.blas kernel +Zen +Prescott$'
# a gate run against a train run: verb, spec and bucket
expect_exit 1 "$DG" ledger diff "${ids[0]}" "${ids[4]}"
expect_grep out '^\* spec +29 fields +not recorded$'
expect_grep err 'not comparable: run.verb, spec, bucket differ'
expect_exit 1 "$DG" ledger diff "${ids[0]}" 19990101-000000-000000000000
expect_grep err 'no run with id'
expect_exit 2 "$DG" ledger diff "${ids[0]}"

# ---- export ----------------------------------------------------------------------
expect_exit 0 "$DG" ledger export --format csv
head -1 "$T/out" >"$T/head"
expect_grep "$T/head" '^id,seq,started_at,verb,exit_status,state,host,node,pending,git_commit,devgate_version,backend,model,batch,throughput,throughput_unit,verdict,spec_id,bucket_id$'
expect_grep out '"rack ""7"", slot 2"'
if python3 - "$T/out" "${ids[0]}" "${ids[4]}" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
by = {r["id"]: r for r in rows}
assert len(rows) == 11, len(rows)
assert by["20260102-030405-0000000000a3"]["host"] == 'rack "7", slot 2'
t = by[sys.argv[2]]
assert t["verb"] == "train" and t["model"] == "mlp" and t["batch"] == "16"
assert float(t["throughput"]) > 0 and t["throughput_unit"] == "samples/s" and len(t["spec_id"]) == 64
g = by[sys.argv[3]]
assert g["throughput"] == "" and g["throughput_unit"] == "" and g["batch"] == "" and g["verdict"] == "pass"
# oldest first
assert [r["seq"] for r in rows[:5]] == ["1", "2", "3", "4", "5"], [r["seq"] for r in rows]
PY
then ok; else bad "the CSV export does not read back"; fi
expect_exit 0 "$DG" ledger export --format jsonl
if python3 - "$T/out" <<'PY'
import json, sys
lines = open(sys.argv[1], "rb").read().split(b"\n")
assert lines[-1] == b"", "no final newline"
recs = [json.loads(l.decode("utf-8")) for l in lines[:-1]]  # strict UTF-8
assert len(recs) == 11, len(recs)
bad = [r for r in recs if r["id"] == "20260102-030405-0000000000a4"][0]
assert bad["record"]["note"] == "bad \ufffd\ufffd bytes", bad["record"]
assert all("record" in r and "throughput" in r for r in recs)
PY
then ok; else bad "the JSON Lines export is not one valid UTF-8 entry a line"; fi
# --since: the crafted runs of 2026-01-02 are left out of a later date
expect_exit 0 "$DG" ledger export --format jsonl --since 2026-06-01
[ "$(wc -l <"$T/out")" -eq 5 ] && ok || bad "--since 2026-06-01 gave $(wc -l <"$T/out") lines, wanted 5"
expect_exit 0 "$DG" ledger export --format csv --since 2026-01-02T03:04:05Z
[ "$(wc -l <"$T/out")" -eq 12 ] && ok || bad "--since at the crafted runs' second left some out"
expect_exit 0 "$DG" ledger export --format csv --since 2999-01-01
[ "$(wc -l <"$T/out")" -eq 1 ] && ok || bad "a future --since should give the header alone"
expect_exit 2 "$DG" ledger export --format csv --since 2026-13
expect_grep err "since '2026-13' is not a UTC date YYYY-MM-DD"
expect_exit 2 "$DG" ledger export --format xml
expect_grep err "format wants csv or jsonl, got 'xml'"
expect_exit 2 "$DG" ledger export
expect_grep err 'format wants csv or jsonl'

# ---- runs of the user's program: label and command columns, free text in diff --
python3 - "$DEVGATE_LEDGER" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
def run(label, batch=8, data="/home/a/data.idx", bucket_id=None):
    r = {"v": 2, "kind": "run", "label": label,
         "spec": {"program": "command", "cmd": ["python3", "train.py", "--batch", str(batch)],
                  "label": label, "batch": batch, "data": data},
         "bucket": {"batch": batch, "resolution": 32, "data": "synthetic"},
         "throughput": {"samples_per_s": {"value": 100.0, "unit": "samples/s", "valid": True}}}
    if bucket_id:
        r["bucket"]["id"] = bucket_id
    return r
def add(rid, r):
    db.execute("insert into runs(id, verb, started_at, exit_status, state, host, git_commit, "
               "devgate_version, record) values (?,?,?,0,'complete','h',NULL,'0.1.0',?)",
               (rid, "run", "2026-01-03T03:04:05Z", json.dumps(r)))
add("20260103-030405-0000000000c1", run("first try"))
add("20260103-030405-0000000000c2", run("second try"))
add("20260103-030405-0000000000c3", run("second try", batch=16))
add("20260103-030405-0000000000c4", run("x", data="/home/a/data.idx", bucket_id="ab" * 32))
add("20260103-030405-0000000000c5", run("x", data="/node/cache/obj/data.idx", bucket_id="ab" * 32))
hostile = run("\u009b[31m\u202eevil\x7f")
add("20260103-030405-0000000000c6", hostile)
db.commit()
PY
# runs differing only in their label: comparable, the label listed as free text
expect_exit 0 "$DG" ledger diff 20260103-030405-0000000000c1 20260103-030405-0000000000c2
expect_grep out '^~ spec.label +first try +second try$'
expect_grep out '^  speedup B/A'
expect_exit 0 "$DG" ledger diff 20260103-030405-0000000000c1 20260103-030405-0000000000c2 --json
expect_json out 'd["comparable"] and d["ignored"] == ["spec.label"] and d["differs"] == []'
# and in their batch: not comparable
expect_exit 1 "$DG" ledger diff 20260103-030405-0000000000c2 20260103-030405-0000000000c3
expect_grep err 'not comparable: .*spec.batch'
# a data path under the same bucket id (a node's cache): not a difference
expect_exit 0 "$DG" ledger diff 20260103-030405-0000000000c4 20260103-030405-0000000000c5 --json
expect_json out 'd["comparable"] and "spec.data" in d["ignored"] and d["same_bucket"]'
# list: label and command columns; --since filters, garbage is refused
expect_exit 0 "$DG" ledger list
expect_grep out '^20260103-030405-0000000000c1 +run +.* +first try +python3 train.py --bat'
expect_exit 0 "$DG" ledger list --since 2026-01-03 --json
expect_json out 'len(d) == 11 and sum(r["id"].startswith("20260103-") for r in d) == 6 and all(r["started_at"] >= "2026-01-03" for r in d) and [r for r in d if r["id"].endswith("c1")][0]["command"] == "python3 train.py --batch 8"'
expect_exit 2 "$DG" ledger list --since garbage
expect_grep err "since 'garbage' is not a UTC date"
expect_exit 2 "$DG" ledger show 20260103-030405-0000000000c1 --since 2026-01-01
# show: a human summary by default, the entry as JSON with --json
expect_exit 0 "$DG" ledger show 20260103-030405-0000000000c1
expect_grep out '^run 20260103-030405-0000000000c1$'
expect_grep out '^  label +first try$'
expect_grep out '^  command +python3 train.py --batch 8$'
expect_grep out 'ledger show 20260103-030405-0000000000c1 --json'
grep -q '"record"' "$T/out" && bad "ledger show dumped the record without --json" || ok
# C1 controls, bidi overrides and DEL never reach the output raw
expect_exit 0 "$DG" ledger show 20260103-030405-0000000000c6 --json
if python3 - "$T/out" <<'PY'
import json, sys
raw = open(sys.argv[1], "rb").read()
assert b"\xc2\x9b" not in raw and b"\xe2\x80\xae" not in raw and b"\x7f" not in raw, raw[:200]
d = json.loads(raw)
assert d["record"]["label"] == "\u009b[31m\u202eevil\x7f", d["record"]["label"]
PY
then ok; else bad "ledger show --json wrote C1, bidi or DEL raw"; fi
expect_exit 0 "$DG" ledger show 20260103-030405-0000000000c6
if python3 - "$T/out" <<'PY'
import sys
raw = open(sys.argv[1], "rb").read()
sys.exit(1 if b"\xc2\x9b" in raw or b"\xe2\x80\xae" in raw or b"\x7f" in raw else 0)
PY
then ok; else bad "ledger show wrote C1, bidi or DEL raw"; fi

done_tests
