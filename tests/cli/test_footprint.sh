#!/usr/bin/env bash
# devgate weighs little while it supervises (issue 26 item 4): the environment
# proof gates every backend (PoCL maps LLVM and clang: about 240 MB here) in a
# child process, so `devgate run`'s own peak resident size while the program
# runs stays under 30 MB, and the proof still lists the backends it gated.
. "$(dirname "$0")/lib.sh"

[ -r /proc/self/status ] || { echo "note: no /proc; skipped"; exit 77; }

expect_exit 0 "$DG" --no-ledger run -o "$T/pack" -- sh -c 'grep VmHWM /proc/$PPID/status > hwm.txt'
kb=$(awk '{ print $2 }' hwm.txt 2>/dev/null)
# Under AddressSanitizer or ThreadSanitizer the peak is the sanitizer's shadow
# and quarantine, not devgate's: there the limit is five times as wide.
limit=30720
ldd "$DG" 2>/dev/null | grep -qE 'lib(asan|tsan)' && limit=$((5 * limit))
[ -n "$kb" ] && [ "$kb" -lt "$limit" ] && ok || bad "devgate run's peak resident size is ${kb:-unknown} kB (limit $limit kB)"
expect_json "$T/pack/report.json" 'any(b["name"] == "cpu" and b["available"] for b in d["env"]["backends"])'

# The env verb gets the same record through the child.
expect_exit 0 "$DG" --no-ledger env --json
expect_json "$T/out" 'd["kind"] == "env" and len(d["backends"]) >= 2'

done_tests
