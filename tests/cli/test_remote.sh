#!/usr/bin/env bash
# devgate remote over a real sshd on loopback (tools/servers.sh: key-only
# login with a throwaway key); the "node" is this same build with another
# cache folder. Hostile arguments arrive intact; each failure has its exit
# status; the input is shipped once, a tampered cached file is caught, a
# bucket mismatch is refused; a run survives a killed connection and is
# collected; the record enters the local ledger with the node's identity.
. "$(dirname "$0")/lib.sh"
SRV="$DEVGATE_SRC/tools/servers.sh"
chmod 755 "$T"
trap '"$SRV" stop "$T/srv"; rm -rf "$T"' EXIT
"$SRV" start "$T/srv" ssh
rc=$?
if [ "$rc" -eq 77 ]; then
  echo "SKIPPED: openssh-server is not installed and could not be installed; devgate remote is NOT tested" >&2
  exit 77
fi
[ "$rc" -eq 0 ] || { echo "FAIL: the throwaway sshd did not start" >&2; exit 1; }
. "$T/srv/ssh.env"
NODE=(--devgate "$DG" --cache "$T/node")
R() { "$DG" remote "${SSH_OPTS[@]}" "${NODE[@]}" "$@"; }
ID_RE='[0-9]{8}-[0-9]{6}-[0-9a-f]{12}'

# 1. Hostile arguments arrive intact, none run by the node's shell.
hostile=("a b" "it's" "\$(touch $T/pwned1)" "x;touch $T/pwned2" "$(printf 'l1\nl2')" "\`touch $T/pwned3\`"
  '*' '' '"' '\' '--json' "a'b\"c" "&& touch $T/pwned4" "|" "~" '$HOME')
expect_exit 0 R "$SSH_HOST" argv "${hostile[@]}"
python3 - "$T/out" "${hostile[@]}" <<'PY' && ok || bad "hostile arguments changed on the way"
import json, sys
got = json.load(open(sys.argv[1]))
sys.exit(0 if got == sys.argv[2:] else 1)
PY
ls "$T"/pwned* >/dev/null 2>&1 && bad "the node's shell ran part of an argument" || ok

# 2. Failures, each with its exit status and message.
closed=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
expect_exit 10 "$DG" remote -o Port="$closed" -o IdentityFile="$SSH_KEY" "${NODE[@]}" "$SSH_HOST" gate
expect_grep err 'host unreachable'
ssh-keygen -q -t ed25519 -N '' -f "$T/stranger"
expect_exit 11 "$DG" remote -o Port="$SSH_PORT" -o IdentityFile="$T/stranger" -o IdentitiesOnly=yes \
  -o UserKnownHostsFile="$T/srv/ssh/known_hosts" -o StrictHostKeyChecking=accept-new \
  "${NODE[@]}" "$SSH_HOST" gate
expect_grep err 'authentication refused'
expect_exit 12 R --devgate "$T/no/such/devgate" "$SSH_HOST" gate --backend cpu --size 8
expect_grep err 'devgate is missing on the node'
expect_exit 12 R --devgate /bin/true "$SSH_HOST" gate --backend cpu --size 8
expect_grep err 'too old'

# 3. End to end: train on an IDX pair, shipped content-addressed.
python3 - "$T" <<'PY'
import gzip, random, struct, sys
d, rnd, n = sys.argv[1], random.Random(3), 96
labs = bytes(rnd.randrange(4) for _ in range(n))
imgs = bytes(min(255, l * 60 + rnd.randrange(40)) for l in labs for _ in range(64))
with gzip.open(f"{d}/img.idx.gz", "wb") as f:
    f.write(struct.pack(">HBBIII", 0, 8, 3, n, 8, 8) + imgs)
with gzip.open(f"{d}/lab.idx.gz", "wb") as f:
    f.write(struct.pack(">HBBI", 0, 8, 1, n) + labs)
PY
TRAIN=(train --data "idx:$T/img.idx.gz,$T/lab.idx.gz" --model mlp --batch 16 --steps 2 --epochs 1 --threads 1)
expect_exit 0 R "$SSH_HOST" "${TRAIN[@]}"
expect_grep err 'img.idx.gz sent \(sha256 [0-9a-f]{16}'
expect_grep err 'lab.idx.gz sent'
expect_grep out "recorded as $ID_RE"
rid=$(grep -oE "$ID_RE" "$T/out" | tail -1)
expect_exit 0 "$DG" ledger show "$rid" --json
expect_json out "d['node'] == '$SSH_HOST' and d['record']['remote']['node'] == '$SSH_HOST' and d['record']['remote']['node_info']['commit'] and len(d['record']['remote']['shipped']) == 2 and d['record']['bucket']['dataset']['kind'] == 'idx'"
expect_exit 0 "$DG" ledger list
expect_grep out "(node $SSH_HOST)"
# cached copies are verified on arrival: the files are there under their SHA-256
sha=$(sha256sum "$T/img.idx.gz" | cut -c1-64)
[ -f "$T/node/objects/$sha/img.idx.gz" ] && ok || bad "no cached copy under its SHA-256"
# again: nothing shipped
expect_exit 0 R "$SSH_HOST" "${TRAIN[@]}"
expect_grep err "img.idx.gz already in the node's cache"
grep -q ' sent ' "$T/err" && bad "a cached file was sent again" || ok
# a cached file changed on the node: caught, removed, sent again
printf 'x' >>"$T/node/objects/$sha/img.idx.gz"
expect_exit 0 R "$SSH_HOST" "${TRAIN[@]}"
expect_grep err 'did not match its SHA-256'
expect_grep err 'img.idx.gz sent'
cmp -s "$T/img.idx.gz" "$T/node/objects/$sha/img.idx.gz" && ok || bad "the tampered copy was kept"

# 4. The same bucket or nothing: --like holds the remote run to a local one.
expect_exit 0 "$DG" "${TRAIN[@]}"
lid=$(grep -oE "$ID_RE" "$T/out" | tail -1)
expect_exit 15 R --like "$lid" "$SSH_HOST" train --data "idx:$T/img.idx.gz,$T/lab.idx.gz" --model mlp \
  --batch 32 --steps 2 --epochs 1 --threads 1
expect_grep err 'different input bucket than the local run \(batch differ\)'
expect_exit 0 R --like "$lid" "$SSH_HOST" "${TRAIN[@]}"

# 4b. The bucket is checked before the run: a node whose probe sees another
# bucket (here: a wrapper that adds --augment flip to the node's probe) is
# refused, naming the field, and nothing runs there.
printf '#!/bin/sh\ncase " $* " in *" bucket -- train "*) exec "%s" "$@" --augment flip ;; esac\nexec "%s" "$@"\n' \
  "$DG" "$DG" >"$T/odd-devgate"
chmod +x "$T/odd-devgate"
runs_before=$(ls "$T/node/runs" | wc -l)
expect_exit 15 R --devgate "$T/odd-devgate" "$SSH_HOST" "${TRAIN[@]}"
expect_grep err "the node's input bucket differs from the local one \(augment differ: local [0-9a-f]{16}, node [0-9a-f]{16}\); nothing was run"
[ "$(ls "$T/node/runs" | wc -l)" -eq "$runs_before" ] && ok || bad "a run started despite the bucket mismatch"
expect_exit 0 R "$SSH_HOST" "${TRAIN[@]}"
expect_grep err 'input bucket [0-9a-f]{16} here and on the node'
rid=$(grep -oE "$ID_RE" "$T/out" | tail -1)
expect_exit 0 "$DG" ledger show "$rid" --json
expect_json out "d['record']['remote']['bucket_checked'] == d['record']['bucket']['id']"

# 4c. An image folder (images:DIR) is shipped content-addressed, file by file,
# once; the node assembles it from its cache; the bucket is the local one's.
python3 - "$T/imgs" <<'PY'
import os, struct, sys, zlib
def png(path, w, h, v):
    raw = b"".join(b"\0" + bytes((v + x + y) % 256 for x in range(w)) for y in range(h))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
for c, base in (("cat", 10), ("dog", 150)):
    os.makedirs(f"{sys.argv[1]}/{c}", exist_ok=True)
    for i in range(4):
        png(f"{sys.argv[1]}/{c}/{i}.png", 12, 12, base + 7 * i)
PY
IMG=(train --data "images:$T/imgs" --model mlp --batch 4 --steps 2 --epochs 1 --threads 1)
expect_exit 0 R "$SSH_HOST" "${IMG[@]}"
expect_grep err 'folder imgs: 8 files, 8 sent, 0 already in the node.s cache \(tree sha256 [0-9a-f]{16}'
rid=$(grep -oE "$ID_RE" "$T/out" | tail -1)
expect_exit 0 "$DG" ledger show "$rid" --json
expect_json out "d['record']['remote']['shipped'][0]['files'] == 8 and d['record']['remote']['shipped'][0]['files_sent'] == 8 and d['record']['bucket']['dataset']['kind'] == 'images'"
tree=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["record"]["remote"]["shipped"][0]["tree"])' "$T/out")
[ -f "$T/node/trees/$tree/cat/0.png" ] && cmp -s "$T/imgs/cat/0.png" "$T/node/trees/$tree/cat/0.png" && ok ||
  bad "the node's tree lacks cat/0.png"
expect_exit 0 "$DG" "${IMG[@]}"
limg=$(grep -oE "$ID_RE" "$T/out" | tail -1)
expect_exit 0 R --like "$limg" "$SSH_HOST" "${IMG[@]}"
expect_grep err 'folder imgs: 8 files, 0 sent, 8 already in the node.s cache'
# a cached image changed on the node: caught, removed, sent again
sha=$(sha256sum "$T/imgs/dog/2.png" | cut -c1-64)
printf 'x' >>"$T/node/objects/$sha/2.png"
expect_exit 0 R "$SSH_HOST" "${IMG[@]}"
expect_grep err '1 cached file of .*imgs did not match its SHA-256'
expect_grep err 'folder imgs: 8 files, 1 sent, 7 already'
cmp -s "$T/imgs/dog/2.png" "$T/node/trees/$tree/dog/2.png" && ok || bad "the tree kept the changed image"

# 4d. End to end: accept --quick on the node (sized down: mlp on cpu, one
# thread), its record in the local ledger with the node's identity.
ACC=(accept --quick --model mlp --backend cpu --threads 1 --steps 4 --epochs 1 --sweep-to 8)
expect_exit 0 R "$SSH_HOST" "${ACC[@]}"
expect_grep out "run [0-9]{8}-[0-9]{6}-[0-9a-f]{8} \(accept\) exit 0 · recorded as $ID_RE"
rid=$(grep -oE "$ID_RE" "$T/out" | tail -1)
expect_exit 0 "$DG" ledger show "$rid" --json
expect_json out "d['verb'] == 'accept' and d['node'] == '$SSH_HOST' and d['record']['remote']['node_info']['host'] and d['record']['final_gate']['screening'] and d['record']['final_gate']['throughput']['valid'] and len(d['record']['remote']['bucket_checked']) == 64"

# 4e. The node's answers are untrusted input (issue 26): an answer past 64 MiB
# is refused naming its source and size (the local side stays small), the verb
# and record kind must be the ones asked for, and a verb's unknown option is
# refused here before anything is shipped or started on the node.
entries() { "$DG" ledger list 2>/dev/null | grep -cE "$ID_RE"; }
before=$(entries)
printf '#!/bin/sh\ncase " $* " in *" fetch "*) head -c 100000000 /dev/zero | tr "\\000" x; exit 0 ;; esac\nexec "%s" "$@"\n' \
  "$DG" >"$T/big-devgate"
chmod +x "$T/big-devgate"
TIME=()
[ -x /usr/bin/time ] && TIME=(/usr/bin/time -f '%M' -o "$T/rss")
"${TIME[@]}" "$DG" remote "${SSH_OPTS[@]}" --devgate "$T/big-devgate" --cache "$T/node" \
  "$SSH_HOST" gate --backend cpu --size 8 >"$T/out" 2>"$T/err"
got=$?
[ "$got" -eq 2 ] && ok || bad "a 100 MB answer: exit $got, wanted 2"
expect_grep err "the node's answer while fetching a record passed 64 MiB \([0-9]{8,} bytes read\); refused"
# (a sanitizer's shadow memory and quarantine make the footprint meaningless)
if [ -s "$T/rss" ] && ! nm "$DG" 2>/dev/null | grep -q __asan_init; then
  rss=$(tail -1 "$T/rss")
  [ "$rss" -lt 200000 ] && ok || bad "a 100 MB answer grew devgate to $rss kB"
fi
printf '#!/bin/sh\ncase " $* " in *" fetch "*) "%s" "$@" | sed "s/\\"verb\\":\\"gate\\"/\\"verb\\":\\"train\\"/"; exit 0 ;; esac\nexec "%s" "$@"\n' \
  "$DG" "$DG" >"$T/liar-devgate"
chmod +x "$T/liar-devgate"
expect_exit 2 R --devgate "$T/liar-devgate" "$SSH_HOST" gate --backend cpu --size 8
expect_grep err "the node's answer is refused \(the node answered verb 'train' to a 'gate' request"
[ "$(entries)" -eq "$before" ] && ok || bad "a refused answer entered the ledger"
R "$SSH_HOST" collect >/dev/null 2>&1 # the refused runs stay on the node; clear them
runs_before=$(ls "$T/node/runs" | wc -l)
rm -f "$T/node/objects"/*/img.idx.gz
expect_exit 2 R "$SSH_HOST" "${TRAIN[@]}" --label X
expect_grep err "train: unknown option '--label'"
grep -q ' sent \|already in' "$T/err" && bad "the data was shipped before the option was refused" || ok
[ "$(ls "$T/node/runs" | wc -l)" -eq "$runs_before" ] && ok || bad "a run started despite the unknown option"

# 4f. `remote HOST run -- CMD` ships the files the command names under the
# working folder (the script under a subfolder, its config) into the node's
# cache and runs there with the same relative paths (issue 22); again, nothing
# is sent; a changed script is sent again.
mkdir -p "$T/proj/sub"
cat >"$T/proj/sub/train.py" <<'PY'
import sys
cfg = open(sys.argv[1].split("=", 1)[1]).read().strip()
print("config", cfg)
sys.exit(0 if cfg == "lr=0.1" else 7)
PY
echo 'lr=0.1' >"$T/proj/sub/conf.txt"
(cd "$T/proj" && R "$SSH_HOST" run --no-env -- python3 sub/train.py --config=sub/conf.txt) >"$T/out" 2>"$T/err"
got=$?
[ "$got" -eq 0 ] && ok || { bad "remote run of sub/train.py: exit $got"; head -20 "$T/err" >&2; }
expect_grep err "the command's files: 2 files, 2 sent, 0 already in the node.s cache"
expect_grep out "run [0-9]{8}-[0-9]{6}-[0-9a-f]{8} \(run\) exit 0 · recorded as $ID_RE"
rid=$(grep -oE "$ID_RE" "$T/out" | tail -1)
expect_exit 0 "$DG" ledger show "$rid" --json
expect_json out "[s['name'] for s in d['record']['remote']['shipped']] == ['command'] and d['record']['remote']['shipped'][0]['files'] == 2"
(cd "$T/proj" && R "$SSH_HOST" run --no-env -- python3 sub/train.py --config=sub/conf.txt) >"$T/out" 2>"$T/err"
expect_grep err "the command's files: 2 files, 0 sent, 2 already"
echo 'lr=0.2' >"$T/proj/sub/conf.txt"
(cd "$T/proj" && R "$SSH_HOST" run --no-env -- python3 sub/train.py --config=sub/conf.txt) >"$T/out" 2>"$T/err"
expect_grep err "the command's files: 2 files, 1 sent, 1 already"
expect_grep out "\(run\) exit [1-9]"
expect_exit 0 "$DG" ledger show "$(grep -oE "$ID_RE" "$T/out" | tail -1)" --json
expect_json out "d['record']['supervise']['exit_status'] == 7"

# 5. The connection dies mid-run: the run goes on, collect fetches it.
R "$SSH_HOST" run --no-env -- sleep 3 >"$T/lost.out" 2>"$T/lost.err" &
client=$!
for _ in $(seq 100); do
  grep -q 'started (detached' "$T/lost.err" 2>/dev/null && break
  sleep 0.1
done
sleep 0.5
pkill -KILL -P "$(cat "$T/srv/ssh.pid")" # the sessions of our sshd: every connection drops
wait "$client"
got=$?
[ "$got" -eq 14 ] && ok || { bad "killed connection: exit $got, wanted 14"; cat "$T/lost.err" >&2; }
grep -q 'connection lost mid-run' "$T/lost.err" && ok || bad "no 'connection lost' message"
tok=$(grep -oE '[0-9]{8}-[0-9]{6}-[0-9a-f]{8}' "$T/lost.err" | head -1)
collected=no
for _ in $(seq 60); do
  R "$SSH_HOST" collect "$tok" >"$T/out" 2>"$T/err"
  grep -q "recorded as" "$T/out" && { collected=yes; break; }
  sleep 0.5
done
[ "$collected" = yes ] && ok || { bad "run $tok not collected after the dropped connection"; cat "$T/err" >&2; }
expect_exit 0 R "$SSH_HOST" collect
expect_grep out 'no finished runs to collect'

# 6. Disk full on the node (a 64 KiB tmpfs as its cache, when mounting works).
if [ "$(id -u)" -eq 0 ] && mkdir -p "$T/full" && mount -t tmpfs -o size=64k tmpfs "$T/full" 2>/dev/null; then
  head -c 300000 /dev/urandom >"$T/big.bin"
  expect_exit 13 "$DG" remote "${SSH_OPTS[@]}" --devgate "$DG" --cache "$T/full" "$SSH_HOST" \
    train --data "idx:$T/big.bin,$T/lab.idx.gz" --steps 1
  expect_grep err 'disk full on the node'
  umount "$T/full"
else
  echo "note: cannot mount a small tmpfs here; the disk-full case is not exercised" >&2
fi

done_tests
