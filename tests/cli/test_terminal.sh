#!/bin/bash
# Hostile strings from records, process tables, file names and hostnames never
# reach the terminal as control bytes (ESC, 8-bit CSI, C1, DEL, bidi overrides,
# invalid UTF-8) through any printer; pack files never follow planted symlinks.
. "$(dirname "$0")/lib.sh"

# clean FILE [what] [cr]: FILE is valid UTF-8 with no control but LF/TAB (and
# CR when a pty's line discipline adds it), no C1, no bidi control.
clean() {
  if python3 - "$1" "${3:-}" <<'PY'
import sys, re
b = open(sys.argv[1], "rb").read()
if sys.argv[2] == "cr":
    b = b.replace(b"\r\n", b"\n")
try:
    t = b.decode("utf-8")
except UnicodeDecodeError as e:
    print("invalid UTF-8:", e); sys.exit(1)
bad = re.findall("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", t)
if bad:
    print("control code points:", sorted({hex(ord(c)) for c in bad})); sys.exit(1)
PY
  then ok; else bad "${2:-$1} carries terminal controls"; head -c 600 "$1" | od -c | head -8 >&2; fi
}

# The hostile payload as a JSON string: ESC clear-screen, OSC title, BEL, 8-bit
# CSI as U+009B, RLO U+202E, DEL, a newline (row breaker).
EVIL='\u001b[2J\u001b]0;owned\u0007\u009b31m\u202eevil\u007f\nrow'
cat >evil.sh <<EOS
printf '%s\n' '{"v":1,"ev":"run_start","device":"$EVIL","label":"$EVIL","framework":{"name":"$EVIL","version":"1"}}' >&3
printf '%s\n' '{"v":1,"ev":"step","step":1,"epoch":0,"ms":1.5,"samples":8}' >&3
printf '%s\n' '{"v":1,"ev":"run_end","status":"ok"}' >&3
EOS

# 1. compare RUN_A RUN_B prints label, device, command and run id from the records.
expect_exit 0 "$DG" run --no-env --sample-ms 50 --json -- sh evil.sh
cp "$T/out" a.json
grep -qF '\u001b[2J' a.json && ok || bad "the hostile run_start did not reach the record"
expect_exit 0 "$DG" run --no-env --sample-ms 50 --json --label "$(printf '\033[31m\302\233x\342\200\256y\177')" -- sh evil.sh
cp "$T/out" b.json
expect_exit 0 "$DG" compare a.json b.json
clean "$T/out" "compare RUN_A RUN_B"
clean "$T/err" "compare RUN_A RUN_B (stderr)"
# Rows stay rows: the label's newline does not start a new line.
expect_grep "$T/out" '^  label +' "compare label row"
if grep -q '^row' "$T/out"; then bad "a newline in a label broke the table"; else ok; fi

# 2. ledger list and show on the recorded runs; show on a terminal (script(1) gives a pty).
expect_exit 0 "$DG" ledger list
clean "$T/out" "ledger list"
id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' b.json)
if command -v script >/dev/null; then
  script -qec "$DG ledger show $id" /dev/null >show.tty 2>&1
  clean show.tty "ledger show on a terminal" cr
else
  echo "SKIP: script(1) missing, ledger show on a pty not checked" >&2
fi
# Into a pipe, --json is data: kept exactly (the label round-trips).
expect_exit 0 "$DG" ledger show "$id" --json
expect_json "$T/out" 'd["record"]["label"] == "\x1b[31m\x9bx\u202ey\x7f"'

# 3. Hostnames: in a private UTS namespace, a hostile hostname through env and ledger list.
if unshare -u true 2>/dev/null; then
  unshare -u sh -c "python3 -c 'import socket; socket.sethostname(b\"h\\x1b[2J\\xff\\xe2\\x80\\xaeq\\nx\")' &&
    \"$DG\" env >env.out 2>env.err && \"$DG\" run --sample-ms 50 -- true >run.out 2>run.err"
  rc=$?
  if [ "$rc" -eq 0 ]; then ok; else bad "env/run under a hostile hostname exited $rc"; cat env.err run.err >&2; fi
  clean env.out "env (hostile hostname)"
  clean run.out "run summary (hostile hostname)"
  expect_exit 0 "$DG" ledger list
  clean "$T/out" "ledger list (hostile hostname)"
  if grep -vqE '^(id |[0-9]{8}-)' "$T/out"; then bad "ledger list: a hostname broke a row"; else ok; fi
else
  echo "SKIP: unshare -u not permitted here; hostname case not checked" >&2
fi

# 4. Other users' command lines: a busy process with hostile argv during env.
python3 -c '
import os, sys, time
if os.fork() == 0:
    t = time.time() + 8
    while time.time() < t: pass
    os._exit(0)
' &
python3 - <<'PY' &
import os, time
argv = [b"/bin/sh", b"-c", b"t=$(($(date +%s)+8)); while [ $(date +%s) -lt $t ]; do :; done", b"\x1b[2J\x9b\xc2\x9b\xe2\x80\xae\xff"]
os.execv(argv[0], argv)
PY
hog=$!
sleep 1
expect_exit 0 "$DG" env
clean "$T/out" "env with a hostile busy process"
kill "$hog" 2>/dev/null; wait 2>/dev/null

# 5. Loader warnings name data-set files: a bad image with a hostile name.
mkdir -p imgs/a imgs/b
python3 - <<'PY'
import struct, zlib
def png(path):
    raw = b"".join(b"\x00" + bytes([128] * 28) for _ in range(28))
    def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 28, 28, 8, 0, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    open(path, "wb").write(data)
for c in "ab":
    for i in range(8):
        png(f"imgs/{c}/{i}.png")
open(b"imgs/a/\x1b[2J\xe2\x80\xaebad\x9b.png", "wb").write(b"\x89PNG\r\n\x1a\nbroken")
PY
"$DG" --no-ledger train --data images:imgs --model mlp --steps 8 --batch 4 >train.out 2>train.err
clean train.out "train summary (hostile file name)"
clean train.err "loader warnings (hostile file name)"
expect_grep train.err 'bad sample' "loader warning"

# 6. A planted symlink at a pack file is replaced, never followed.
mkdir pack
echo victim >victim.txt
ln -s "$T/victim.txt" pack/report.md
expect_exit 0 "$DG" report b.json --format md -o pack
[ "$(cat victim.txt)" = victim ] && ok || bad "report -o followed the symlink into victim.txt"
[ -f pack/report.md ] && [ ! -L pack/report.md ] && ok || bad "pack/report.md is not a regular file"
ls pack | grep -q tmp && bad "a temporary file was left in the pack" || ok
# The old temporary name was PATH.tmp-PID: links planted for the next pids
# must not catch the write (the name is random and created exclusively).
echo victim2 >victim2.txt
python3 -c 'import os
for p in range(os.getpid() + 1, os.getpid() + 3000): os.symlink("../victim2.txt", "pack/report.md.tmp-%d" % p)'
expect_exit 0 "$DG" report b.json --format md -o pack
[ "$(cat victim2.txt)" = victim2 ] && ok || bad "report -o wrote through a planted temporary-name link"

done_tests
