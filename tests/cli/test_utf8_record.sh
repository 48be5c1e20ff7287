#!/usr/bin/env bash
# Every record is valid UTF-8 JSON whatever bytes a path, a label or a spec
# value brings (issue 26 item 6): `run -o` a folder named with 0xff, `accept`
# with a label holding 0xff and a raw C1 byte; the pack's report.json and the
# ledger's copy both decode strictly as UTF-8.
. "$(dirname "$0")/lib.sh"

strict() { # FILE: decodes as strict UTF-8 and parses as JSON
  python3 -c 'import json, sys; json.loads(open(sys.argv[1], "rb").read().decode("utf-8", "strict"))' "$1" 2>/dev/null
}

dir=$'P\xff'
expect_exit 0 "$DG" run --no-env -o "$T/$dir" --label $'lab\xfeel' -- true
strict "$T/$dir/report.json" && ok || bad "run -o with 0xff: report.json is not valid UTF-8 JSON"
grep -q $'\xef\xbf\xbd' "$T/$dir/report.json" && ok || bad "the 0xff byte did not become U+FFFD"
"$DG" ledger list --json >"$T/list.json" 2>/dev/null
id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["id"])' "$T/list.json" 2>/dev/null)
# What the ledger file itself holds, not what `ledger show` makes of it.
python3 - "$DEVGATE_LEDGER" "$id" >"$T/stored.json" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.text_factory = bytes
sys.stdout.buffer.write(db.execute("select record from runs where id = ?", (sys.argv[2],)).fetchone()[0])
PY
strict "$T/stored.json" && ok || bad "the ledger's stored record of run $id is not valid UTF-8 JSON"

# A spec value (a path) with 0xff: the record's spec keeps it as U+FFFD.
"$DG" --no-ledger train --steps 2 --export "$T/"$'exp\xff' --json >train.json 2>train.err
strict train.json && ok || bad "train --export with 0xff: the record is not valid UTF-8 JSON"
grep -q $'exp\xef\xbf\xbd' train.json && ok || bad "the spec's export did not keep U+FFFD for 0xff"

done_tests
