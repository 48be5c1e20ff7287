#!/usr/bin/env bash
# devgate train's data path: an IDX pair (gzip) and a PNG folder learn well
# above chance, worker counts give the same loss curve, the input bucket is
# recorded and ledger diff names what differs (spec, bucket) and calls no
# ratio a speedup across them,
# bad samples are skipped or fail, bad options exit 2.
. "$(dirname "$0")/lib.sh"

# An MNIST-like IDX pair: 10 classes of 28x28 class patterns plus noise.
python3 - "$T" <<'PY'
import gzip, random, struct, sys, math
d = sys.argv[1]
rnd = random.Random(5)
n, h, w = 600, 28, 28
pats = [[[0.5 + 0.5 * math.sin(2 * math.pi * ((k % 5 + 1) * y / h + (k // 5 + 1) * x / w) + k)
          for x in range(w)] for y in range(h)] for k in range(10)]
imgs, labs = bytearray(), bytearray()
for i in range(n):
    k = rnd.randrange(10)
    labs.append(k)
    for y in range(h):
        for x in range(w):
            v = pats[k][y][x] * 200 + rnd.uniform(0, 55)
            imgs.append(max(0, min(255, int(v))))
with gzip.open(f"{d}/img.idx.gz", "wb") as f:
    f.write(struct.pack(">HBBIII", 0, 8, 3, n, h, w) + bytes(imgs))
with gzip.open(f"{d}/lab.idx.gz", "wb") as f:
    f.write(struct.pack(">HBBI", 0, 8, 1, n) + bytes(labs))

# A PNG folder: 4 classes of 20x20 RGB images (colour bars), written with
# zlib and struct only; plus a copy with four corrupt files for the bad-sample checks.
import os, zlib
def png(path, rows):
    raw = b"".join(b"\0" + bytes(r) for r in rows)
    def chunk(t, data):
        return struct.pack(">I", len(data)) + t + data + struct.pack(">I", zlib.crc32(t + data) & 0xffffffff)
    hdr = struct.pack(">IIBBBBB", len(rows[0]) // 3, len(rows), 8, 2, 0, 0, 0)
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", hdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
for k, name in enumerate(["bars", "cols", "diag", "ring"]):
    os.makedirs(f"{d}/imgs/{name}", exist_ok=True)
    for i in range(40):
        rows = []
        for y in range(20):
            r = []
            for x in range(20):
                on = [y % 4 < 2, x % 4 < 2, (x + y) % 6 < 3, (x - 10) ** 2 + (y - 10) ** 2 < 36][k]
                v = (200 if on else 40) + rnd.randrange(-30, 30)
                r += [max(0, min(255, v + 10 * k)), max(0, min(255, v)), max(0, min(255, 255 - v))]
            rows.append(r)
        png(f"{d}/imgs/{name}/{i:03d}.png", rows)
import shutil
shutil.copytree(f"{d}/imgs", f"{d}/badimgs")
for name in ["bars", "cols", "diag", "ring"]:
    open(f"{d}/badimgs/{name}/999.png", "wb").write(b"\x89PNG\r\n\x1a\nnot really a png")
PY
IDX="idx:$T/img.idx.gz,$T/lab.idx.gz"

# IDX: learns well above chance (10 classes) on held-out samples.
expect_exit 0 "$DG" --no-ledger train --data "$IDX" --model mlp --batch 32 --steps 15 --epochs 4 --lr 0.05 \
  --val-split 0.2 --normalize auto --threads 1 --json
cp out "$T/idx.json"
expect_json out 'd["val"][-1]["accuracy"] > 0.6 and len(d["val"]) == 4'
expect_json out 'd["data"]["source"] == "idx" and d["data"]["val_samples"] == 120 and d["bucket"]["dataset"]["kind"] == "idx"'
expect_json out 'len(d["bucket"]["id"]) == 64 and d["bucket"]["normalize"]["mode"] == "auto" and len(d["bucket"]["normalize"]["mean"]) == 1'
expect_json out 'all(k in d["data"]["stages"] for k in ("read","decode","resize","augment","normalise","collate")) and d["phases"]["data"]["unit"] == "ms"'

# Worker counts give the same loss curve (0 = inline), augmentation on.
for wk in 0 2; do
  expect_exit 0 "$DG" --no-ledger train --data "$IDX" --batch 16 --steps 10 --epochs 2 --sync-every 2 \
    --augment crop,flip --workers $wk --threads 1 --json
  python3 -c 'import json,sys; print(json.dumps([p["loss"] for p in json.load(open(sys.argv[1]))["loss"]]))' out >"$T/curve$wk"
done
cmp -s "$T/curve0" "$T/curve2" && ok || bad "--workers 0 and 2 give different loss curves"

# PNG folder (RGB converted to gray, 20x20 resized to 28x28): learns, cache hits.
expect_exit 0 "$DG" --no-ledger train --data "images:$T/imgs" --batch 16 --steps 10 --epochs 5 --lr 0.05 \
  --val-split 0.25 --normalize auto --cache --threads 1 --json
expect_json out 'd["val"][-1]["accuracy"] > 0.6 and d["data"]["source"] == "images"'
expect_json out 'd["data"]["cache"]["enabled"] and d["data"]["cache"]["hits"] > 0 and d["data"]["stages"]["resize"]["value"] > 0'

# Bad samples: skipped and counted (warning on stderr) under a lenient share,
# fail mode names the file, the default share (1%) fails with the share.
expect_exit 0 "$DG" --no-ledger train --data "images:$T/badimgs" --batch 16 --steps 10 --max-bad-share 0.2 --json
expect_json out 'd["data"]["bad_samples"]["count"] >= 1 and "999.png" in d["data"]["bad_samples"]["messages"][0]'
expect_grep err 'warning: .*bad sample'
expect_exit 1 "$DG" --no-ledger train --data "images:$T/badimgs" --batch 16 --steps 10 --on-bad-sample fail
expect_grep err '999.png'
expect_exit 1 "$DG" --no-ledger train --data "images:$T/badimgs" --batch 16 --steps 10
expect_grep err 'above the allowed 1.00%'

# Human output: the data phase and the data line.
expect_exit 0 "$DG" --no-ledger train --data "$IDX" --batch 16 --steps 5 --threads 1
expect_grep out 'phases +data [0-9.]+ ms'
expect_grep out 'data +read .* decode .* resize .* augment .* normalise .* collate .* waited [0-9.]+ ms \([0-9.]+% of the step\)'
expect_grep out 'bucket +[0-9a-f]{16}'

# The ledger: same bucket compares; different buckets refuse unless --force.
"$DG" -q train --batch 16 --steps 5 --threads 1 >/dev/null 2>&1
"$DG" -q train --batch 16 --steps 5 --threads 1 --workers 0 >/dev/null 2>&1
"$DG" -q train --batch 16 --steps 5 --threads 1 --augment flip >/dev/null 2>&1
"$DG" -q gate --backend cpu --size 8 >/dev/null 2>&1
mapfile -t ids < <("$DG" ledger list --json | python3 -c 'import json,sys; [print(r["id"]) for r in json.load(sys.stdin)]')
# workers are not part of the bucket, but they are part of the spec
expect_exit 1 "$DG" ledger diff "${ids[3]}" "${ids[2]}"
expect_grep out '^\* spec.workers +2 +0'
expect_grep out 'samples/s'
expect_exit 1 "$DG" ledger diff "${ids[3]}" "${ids[1]}"
expect_grep err 'not comparable: spec.augment, bucket.augment, bucket.id differ; use --force'
expect_grep out '^\* bucket.augment'
expect_exit 0 "$DG" ledger diff "${ids[3]}" "${ids[1]}" --force
expect_grep out 'not a speedup: not comparable'
expect_exit 0 "$DG" ledger diff "${ids[3]}" "${ids[1]}" --force --json
expect_json out 'd["forced"] and not d["same_bucket"] and "bucket.augment" in d["differs"] and d["speedup"] is None and d["ratio"] > 0'
expect_exit 1 "$DG" ledger diff "${ids[3]}" "${ids[0]}"
expect_grep err 'not comparable: run.verb, spec, bucket differ'
expect_exit 2 "$DG" ledger diff "${ids[3]}"

# Bad options: exit 2 with a message.
expect_exit 2 "$DG" --no-ledger train --resolution 32x32
expect_grep err 'fixed input sizes'
expect_exit 2 "$DG" --no-ledger train --resolution 28x28,14x14
expect_grep err 'fixed input sizes'
expect_exit 0 "$DG" --no-ledger train --resolution 28x28 --steps 2 --batch 8
expect_exit 2 "$DG" --no-ledger train --resolution 28
expect_exit 2 "$DG" --no-ledger train --augment rotate
expect_grep err 'rotate'
expect_exit 2 "$DG" --no-ledger train --normalize 0.5/0
expect_exit 2 "$DG" --no-ledger train --normalize 0.5,0.5,0.5/0.2,0.2,0.2
expect_grep err 'channel'
expect_exit 2 "$DG" --no-ledger train --workers -1
expect_exit 2 "$DG" --no-ledger train --val-split 1
expect_exit 2 "$DG" --no-ledger train --max-bad-share 2
expect_exit 2 "$DG" --no-ledger train --on-bad-sample maybe
expect_exit 2 "$DG" --no-ledger train --data "idx:$T/nope,$T/nope2"
expect_exit 2 "$DG" --no-ledger train --data "$IDX" --samples 100
expect_grep err 'synthetic'

done_tests
