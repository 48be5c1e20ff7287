#!/usr/bin/env bash
# The option tables: --help for every verb, "did you mean", --name=VALUE, one
# validation for flags and spec files, and docs/cli.md naming exactly the
# options of the tables and every environment variable devgate reads.
. "$(dirname "$0")/lib.sh"
SRC=${DEVGATE_SRC:?DEVGATE_SRC must name the source tree}

# --- help: every verb exits 0 with synopsis, options, exit statuses, an example --
expect_exit 0 "$DG" --help
expect_grep out '^usage: devgate'
for verb in env gate train sweep soak compare profile accept run report ledger; do
  expect_exit 0 "$DG" "$verb" --help
  expect_grep out "^usage: devgate $verb" "$verb --help"
  expect_grep out '^exit status: ' "$verb --help"
  expect_grep out '^example: devgate ' "$verb --help"
  expect_grep "$T/out" '^  (-[a-z], )?--[a-z]' "$verb --help options"
  expect_exit 0 "$DG" "$verb" -h
  # devgate --help names every verb
  expect_exit 0 "$DG" --help
  expect_grep out "^  $verb( |\$)" "devgate --help ($verb)"
done
expect_exit 0 "$DG" help sweep
expect_grep out '^usage: devgate sweep'
expect_exit 0 "$DG" train --help
expect_grep out '^  --batch N +samples a step \(default 64; samples\)$'
expect_grep out '^  --lr F +learning rate \(default 0\.01\)$'

# --- mistakes: did you mean, with exit 2 ------------------------------------------
expect_exit 2 "$DG" train --bacth 8
expect_grep err "unknown option '--bacth'; did you mean --batch\?"
expect_exit 2 "$DG" sweep --form=8
expect_grep err "unknown option '--form'; did you mean --from\?"
expect_exit 2 "$DG" trian
expect_grep err "unknown verb 'trian'; did you mean train\?"
expect_exit 2 "$DG" accept --zzzzzzzz
expect_grep err "unknown option '--zzzzzzzz' \(devgate accept --help lists them\)"
expect_exit 2 "$DG" nosuchverbatall
if grep -q 'did you mean' "$T/err"; then bad "a far-off verb got a suggestion"; else ok; fi
expect_exit 2 "$DG" train --cache=yes
expect_grep err 'train: --cache takes no value'
expect_exit 2 "$DG" train --batch
expect_grep err 'train: --batch needs a value'
expect_exit 2 "$DG" report a b
expect_grep err "report: unexpected argument 'b'"

# --- one validation: the flag and the spec file refuse the same values -------------
expect_exit 2 "$DG" --no-ledger train --epochs 1.5
expect_grep err "train: --epochs wants an integer in 1\.\.65535, got '1\.5'"
expect_exit 2 "$DG" --no-ledger train --epochs=1000000000
expect_grep err "train: --epochs wants an integer in 1\.\.65535"
echo '{"epochs": 1.5}' >s1.json
expect_exit 2 "$DG" --no-ledger accept --spec s1.json
expect_grep err "spec file s1.json: spec: epochs wants an integer in 1\.\.65535, got '1\.5'"
echo '{"steps": 1e9}' >s2.json
expect_exit 2 "$DG" --no-ledger accept --spec s2.json
expect_grep err "steps wants an integer in 1\.\.100000000, got '1000000000'"
echo '{"lr": -1}' >s3.json
expect_exit 2 "$DG" --no-ledger accept --spec s3.json
expect_grep err "lr wants a number in \[0, 1e\+06\]"
echo '{"thresholds": {"mem_growth_pct,x": 40}}' >s4.json
expect_exit 2 "$DG" --no-ledger accept --spec s4.json
expect_grep err "threshold \"mem_growth_pct,x\" has '=' or ',' in its name"
echo '{"thresholds": {"a=b": 40}}' >s5.json
expect_exit 2 "$DG" --no-ledger accept --spec s5.json
expect_grep err "threshold \"a=b\" has '=' or ',' in its name"
echo '{"frobnicate": 1}' >s6.json
expect_exit 2 "$DG" --no-ledger accept --spec s6.json
expect_grep err 'unknown key "frobnicate"'
expect_exit 2 "$DG" --no-ledger accept --threshold a=b=c
expect_grep err "accept: --threshold wants NAME=VALUE"

# --- a training option from the table reaches the loader: --prefetch ------------------
expect_exit 0 "$DG" --no-ledger train --steps 3 --batch 8 --workers 2 --prefetch 7 --json
expect_json out 'd["data"]["prefetch"] == 7 and d["spec"]["prefetch"] == 7'
expect_exit 0 "$DG" --no-ledger train --steps 3 --batch 8 --workers 2 --json
expect_json out 'd["data"]["prefetch"] == 4 and d["spec"]["prefetch"] is None'
expect_exit 2 "$DG" --no-ledger train --prefetch 0
expect_grep err "train: --prefetch wants an integer in 1\.\.4096, got '0'"

# --- the sweep hands each trial its spec through the codec (stdin), not flags ----------
expect_exit 1 "$DG" --no-ledger sweep --data idx:nosuch-images,nosuch-labels --to 8 --no-bisect \
  --warmup-steps 1 --timed-steps 1 --json
expect_json out 'd["trials"][0]["ended"] == "failed" and "nosuch-images" in d["trials"][0]["reason"]'
# a spec that does not decode is refused by the child with the codec's message
echo '{"epochs": 1.5}' >bad-spec.json
expect_exit 2 "$DG" --no-ledger __trial --spec-fd 0 --result-fd 1 <bad-spec.json
expect_grep err "__trial: spec: epochs wants an integer"

# --- path buffers never truncate silently ---------------------------------------------
long=$(printf 'A%.0s' {1..4200})
expect_exit 2 "$DG" --no-ledger accept --quick -o "$long"
expect_grep err 'accept: cannot create A+\.\.\.: File name too long'
if [ -e core ]; then bad "a core file"; else ok; fi
# record files are capped, and the message says why
expect_exit 2 "$DG" --no-ledger compare /dev/zero /dev/zero
expect_grep err '/dev/zero.*(larger than|over) '

# --- docs/cli.md names exactly the tables' options, and every getenv -------------------
"$DG" __options >opts.txt
if python3 - "$SRC" opts.txt <<'PY'; then ok; else bad "docs/cli.md and the option tables or getenv disagree"; fi
import re, sys, pathlib
src, optfile = pathlib.Path(sys.argv[1]), sys.argv[2]
tables = {}
for line in open(optfile):
    verb, opt = line.split()
    tables.setdefault(verb, set()).add(opt)
doc = (src / "docs/cli.md").read_text()
def section(title, level="## "):
    m = re.search(r"^" + re.escape(level + title) + r"\n(.*?)(?=^## |\Z)", doc, re.M | re.S)
    if not m:
        sys.exit(f"docs/cli.md has no section '{title}'")
    return m.group(1)
train = set(re.findall(r"^\| `(--[a-z0-9-]+)", section("Train options", "### "), re.M))
common = set(re.findall(r"^- `(--[a-z0-9-]+)", section("Global options"), re.M)) - {"--help"}
per = section("Options per verb").split("### Train options")[0]
fails = 0
docverbs = {}
for m in re.finditer(r"^- `([a-z_]+)`: (.*)$", per, re.M):
    verb, text = m.group(1), re.sub(r"\([^)]*\)", "", m.group(2))
    opts = set(re.findall(r"`(--[a-z0-9-]+)", text))
    if "train options" in text:
        opts |= train
    if "common options" in text:
        opts |= common
    docverbs[verb] = opts
for verb in sorted(set(tables) | set(docverbs)):
    t, d = tables.get(verb, set()), docverbs.get(verb, set())
    for o in sorted(t - d):
        print(f"docs/cli.md: {verb} lacks {o}"); fails += 1
    for o in sorted(d - t):
        print(f"docs/cli.md: {verb} lists {o}, which the table does not have"); fails += 1
envdoc = section("Environment variables")
names = set()
for root in ("src", "clients/c"):
    for f in (src / root).rglob("*"):
        if f.suffix in (".c", ".h", ".cu", ".cl") and f.is_file():
            names |= set(re.findall(r'getenv\("([A-Za-z_0-9]+)"\)', f.read_text(errors="replace")))
for n in sorted(names):
    if not re.search(r"`" + re.escape(n) + r"[`=]", envdoc):
        print(f"docs/cli.md: environment variable {n} is read but not listed"); fails += 1
if len(names) < 10:
    print(f"only {len(names)} getenv names found: the scan is broken"); fails += 1
sys.exit(1 if fails else 0)
PY

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
