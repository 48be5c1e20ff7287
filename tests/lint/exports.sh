#!/usr/bin/env bash
# The library exports only its prefix (sqlite's tool/checksymbols): every
# global symbol defined in the given archives or shared objects is named dg_*.
# A helper shared between two files of one folder is still exported from the
# archive, so it carries the prefix too (dg_rp_*, dg_lg_*); everything else is
# static. Names in the implementation's reserved space (__*, as sanitizers and
# the linker define) are not ours and are skipped.
# Usage: exports.sh LIB.a|LIB.so...
set -euo pipefail
bad=0
for lib in "$@"; do
    case "$lib" in
    *.so) syms=$(nm -D --defined-only "$lib") ;;
    *) syms=$(nm -g --defined-only "$lib") ;;
    esac
    leaks=$(awk 'NF == 3 && $3 !~ /^(dg_|__)/ { print "  " $3 " (" $2 ")" }' <<<"$syms" | sort -u)
    if [ -n "$leaks" ]; then
        echo "exports: $(basename "$lib") exports names without the dg_ prefix:" >&2
        echo "$leaks" >&2
        bad=1
    fi
done
if [ "$bad" -ne 0 ]; then
    echo "exports: make each one static, or name it dg_* and declare it in its folder's header" >&2
    exit 1
fi
echo "exports: $# librar$([ $# -eq 1 ] && echo y || echo ies) export only dg_ names"
