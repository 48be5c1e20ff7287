#!/usr/bin/env bash
# The report page in a real browser (headless Chromium): it draws something,
# a hostile label stays text, no script element exists, and the page logs no
# console error. A probe page first proves that console errors and CSP refusals
# do reach the log we grep, so a quiet log means something.
# Skips (77) without chromium unless DEVGATE_REQUIRE_CHROMIUM=1.
. "$(dirname "$0")/lib.sh"
S="${DEVGATE_SRC:?}/tests/data/records/report-sample.json"

if ! command -v chromium >/dev/null 2>&1; then
  if [ "${DEVGATE_REQUIRE_CHROMIUM:-0}" = 1 ]; then
    echo "FAIL: chromium not installed and DEVGATE_REQUIRE_CHROMIUM=1 (tools/deps.sh test installs it)" >&2
    exit 1
  fi
  echo "skipped: chromium not installed"
  exit 77
fi

# chrome FLAGS... URL: one headless run, private profile, no network chatter.
chrome() {
  timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --disable-sync --no-first-run --disable-extensions \
    --user-data-dir="$T/profile" --enable-logging=stderr --v=0 "$@"
}

# Browser console messages as Chromium logs them to stderr.
console_errors() {
  grep -E 'CONSOLE|Uncaught|Refused to|Content Security Policy' "$1"
}

# 0. The probe: an inline script under the same CSP is refused, and a page
#    without it logs its console.error; both must show up in the log.
cat >"$T/probe-csp.html" <<'EOF'
<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:"></head>
<body><p>probe</p><script>document.title = "ran";</script></body></html>
EOF
cat >"$T/probe-log.html" <<'EOF'
<!DOCTYPE html><html><body><script>console.error("devgate-probe-error");</script></body></html>
EOF
chrome --dump-dom "file://$T/probe-csp.html" >"$T/probe-csp.dom" 2>"$T/probe-csp.err"
console_errors "$T/probe-csp.err" >/dev/null && ok || bad "CSP refusal of an inline script not seen in the log"
chrome --dump-dom "file://$T/probe-log.html" >/dev/null 2>"$T/probe-log.err"
grep -q 'devgate-probe-error' "$T/probe-log.err" && ok || bad "console.error not seen in the log"

# The page under test: the sample with a hostile label and finding title.
python3 - "$S" "$T/hostile.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["label"] = "<script>alert(1)</script>"
d["findings"][0]["title"] = '"><img src=x onerror=alert(1)> title'
json.dump(d, open(sys.argv[2], "w"))
PY
expect_exit 0 "$DG" report "$T/hostile.json" -o "$T/pack"
page="$T/pack/report.html"

# 1. Screenshot at 1280x2000: a PNG that is not blank (many colours, ink on
#    a good share of the pixels), decoded with the standard library alone.
chrome --hide-scrollbars --window-size=1280,2000 --screenshot="$T/shot.png" "file://$page" \
  >/dev/null 2>"$T/shot.err"
if python3 - "$T/shot.png" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat = 8, b""
while pos < len(data):
    n, = struct.unpack(">I", data[pos:pos + 4]); typ = data[pos + 4:pos + 8]; body = data[pos + 8:pos + 8 + n]
    pos += 12 + n
    if typ == b"IHDR":
        w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
    elif typ == b"IDAT":
        idat += body
assert depth == 8 and interlace == 0 and ctype in (2, 6), (depth, ctype, interlace)
bpp = 3 if ctype == 2 else 4
raw, stride = zlib.decompress(idat), w * bpp
prev, i, colours, ink = bytearray(stride), 0, set(), 0
for y in range(h):
    f = raw[i]; line = bytearray(raw[i + 1:i + 1 + stride]); i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0; b = prev[x]; c = prev[x - bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + ((a + b) >> 1)) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    if y % 4 == 0:                     # every fourth row is plenty
        for x in range(0, stride, bpp * 2):
            px = bytes(line[x:x + 3]); colours.add(px); ink += px != b"\xff\xff\xff"
    prev = line
sampled = (h // 4 + 1) * (w // 2)
print(f"{w}x{h}, {len(colours)} colours, {100 * ink / sampled:.1f}% ink")
sys.exit(0 if (w, h) == (1280, 2000) and len(colours) >= 16 and ink / sampled > 0.05 else 1)
PY
then ok; else bad "screenshot blank or unreadable"; fi

# 2. The DOM after parsing: the label is text (escaped again on serialisation),
#    and no script or img element exists anywhere.
chrome --dump-dom "file://$page" >"$T/dom.html" 2>"$T/dom.err"
expect_grep "$T/dom.html" '&lt;script&gt;alert\(1\)&lt;/script&gt;' "DOM"
expect_grep "$T/dom.html" '"&gt;&lt;img src=x onerror=alert\(1\)&gt; title' "DOM"
if grep -qiE '<script|<img' "$T/dom.html"; then bad "the DOM has a script or img element"; else ok; fi
expect_grep "$T/dom.html" '<svg' "DOM"

# 3. No console message of any kind: no error, no uncaught exception, no CSP
#    refusal (a page with nothing to refuse logs nothing at all).
if console_errors "$T/dom.err" "$T/shot.err"; then bad "the page logged console messages"; else ok; fi

done_tests
