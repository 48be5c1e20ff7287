#!/usr/bin/env bash
# The outside world's bytes never break a record: busy processes whose
# command line and name hold invalid UTF-8 (0xff 0xfe, an 8-bit CSI 0x9b, a
# lone continuation byte) and ESC run during `devgate env --json`; the output
# must parse as strict UTF-8 JSON with the bytes shown as U+FFFD, whether or
# not the processes made the top lists. With a UTS namespace at hand, the
# hostname carries such bytes too.
. "$(dirname "$0")/lib.sh"

# strict_json FILE: exit 0 when FILE is strict UTF-8 and JSON.
strict_json() {
  python3 -c 'import json,sys; json.loads(open(sys.argv[1], "rb").read().decode("utf-8", "strict"))' "$1" 2>"$T/why"
}

pids=()
for i in 1 2 3 4; do
  # argv[0] and the name in /proc/PID/comm carry the bytes; the loop burns CPU.
  python3 -c 'import os,sys; os.execv("/bin/sh", [b"\xff\xfe\x9b\x1b[2J-busy-%d" % int(sys.argv[1]),
             "-c", "printf \"\\377\\376\\233\\200\" > /proc/self/comm 2>/dev/null; while :; do :; done"])' "$i" &
  pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"' EXIT
sleep 0.3

listed=0
for attempt in 1 2 3 4 5; do
  expect_exit 0 "$DG" --no-ledger env --json
  if strict_json "$T/out"; then ok; else bad "env --json is not strict UTF-8 JSON: $(cat "$T/why" | tail -1)"; fi
  if python3 - "$T/out" "${pids[@]}" <<'PY'
import json, sys
d = json.load(open(sys.argv[1], encoding="utf-8"))
want = {int(p) for p in sys.argv[2:]}
seen = [e for k in ("top_cpu", "top_mem") for e in d["processes"][k] if e["pid"] in want]
if not seen:
    sys.exit(1)
for e in seen:
    assert "\ufffd" in e["cmdline"] and "-busy-" in e["cmdline"], e
    assert "\x1b" not in e["cmdline"], e
    assert e["name"] == "sh" or "\ufffd" in e["name"], e
sys.exit(0)
PY
  then listed=1; break; fi
done
if [ "$listed" -eq 1 ]; then ok; else bad "no busy process with a non-UTF-8 argv made the top lists in 5 tries"; fi

# The interpreter's path (--python) holds such bytes: the record shows them
# as U+FFFD like every other text from the system, the terminal as '?'.
pydir=$(printf '%s/py\377\233' "$T")
mkdir -p "$pydir" && ln -s "$(command -v python3)" "$pydir/python3"
expect_exit 0 "$DG" --no-ledger env --python "$pydir/python3" --json
if strict_json "$T/out"; then ok; else bad "env --python with a non-UTF-8 path: $(tail -1 "$T/why")"; fi
expect_json out 'd["python"]["path"].endswith("/py\ufffd\ufffd/python3")'
expect_exit 0 "$DG" --no-ledger env --python "$pydir/python3"
expect_grep out '^  python +.*/py\?\?/python3$' "env's python line"

# The hostname, where a UTS namespace can be made (root or user namespaces).
if unshare -u true 2>/dev/null; then
  expect_exit 0 unshare -u python3 -c 'import os,socket,sys
socket.sethostname(b"h\xff\xfe\x9b")
os.execv(sys.argv[1], [sys.argv[1], "--no-ledger", "env", "--json"])' "$DG"
  if strict_json "$T/out"; then ok; else bad "env --json with a non-UTF-8 hostname: $(tail -1 "$T/why")"; fi
  expect_json out 'd["host"] == "h\ufffd\ufffd\ufffd"'
else
  echo "note: no UTS namespace; hostname check skipped"
fi

done_tests
