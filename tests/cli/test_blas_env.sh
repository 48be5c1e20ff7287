#!/usr/bin/env bash
# devgate runs itself with OPENBLAS_NUM_THREADS=1 from before OpenBLAS loads
# (src/cli/main.c, blas_one_thread: its pthreads build's server threads spun
# beside the cpu backend's OpenMP team), and the programs it starts see the
# user's own value, set, empty or unset.
. "$(dirname "$0")/lib.sh"

# The child prints what it sees and what its parent (devgate) started with.
show='echo "sees [${OPENBLAS_NUM_THREADS-unset}] mark [${DEVGATE_BLAS_REEXEC-}]";
      tr "\0" "\n" </proc/$PPID/environ | grep "^OPENBLAS_NUM_THREADS=" | sed "s/^/parent /"'
OPENBLAS_NUM_THREADS=7 "$DG" -q --no-ledger run --no-env -- sh -c "$show" >"$T/seven" 2>&1
expect_grep "$T/seven" '^sees \[7\] mark \[\]$' "the program's environment (user's 7)"
expect_grep "$T/seven" '^parent OPENBLAS_NUM_THREADS=1$' "devgate's own start (user's 7)"
env -u OPENBLAS_NUM_THREADS "$DG" -q --no-ledger run --no-env -- sh -c "$show" >"$T/unset" 2>&1
expect_grep "$T/unset" '^sees \[unset\] mark \[\]$' "the program's environment (unset)"
expect_grep "$T/unset" '^parent OPENBLAS_NUM_THREADS=1$' "devgate's own start (unset)"
OPENBLAS_NUM_THREADS= "$DG" -q --no-ledger run --no-env -- sh -c "$show" >"$T/empty" 2>&1
expect_grep "$T/empty" '^sees \[\] mark \[\]$' "the program's environment (empty)"
# The user's 1 needs no second start.
OPENBLAS_NUM_THREADS=1 "$DG" -q --no-ledger run --no-env -- sh -c "$show" >"$T/one" 2>&1
expect_grep "$T/one" '^sees \[1\] mark \[\]$' "the program's environment (user's 1)"
# The words reach the second start as given: a path with a space and a quote.
mkdir -p "$T/a b'c"
expect_exit 0 env OPENBLAS_NUM_THREADS=3 "$DG" -q --no-ledger run --no-env -o "$T/a b'c/pack" -- true
[ -f "$T/a b'c/pack/report.json" ] && ok || bad "the pack did not land in the folder named with a space"

done_tests
