#!/usr/bin/env python3
"""No function in src/ over 150 lines (docs/ARCHITECTURE.md, "tests/lint/"; issue 20).

A function is a definition in the house's brace style (clang-format, Linux
braces): its signature, then `{` alone at the start of a line, then its body
up to the first `}` alone at the start of a line. Its length is the number of
lines from the opening brace to the closing one (a body of 150 lines between
them counts 151 and fails). The backends' kernel sources are exempt: a
kernel is written for the device, long and flat by design, and read beside
the paper it implements; they are listed here by name so that a new file is
never exempt by accident, and a listed file that is gone fails the test.
Usage: long_functions.py SRC_DIR [LIMIT]
"""
import os
import re
import sys

LIMIT = 150
SUFFIXES = (".c", ".h", ".cu", ".cl")
# Paths relative to SRC_DIR: the backends' kernel sources.
EXEMPT = {
    "backend/opencl/kernels.cl",
    "backend/cuda/cuda.cu",
    "backend/cuda/cuda_bf16.cu",
    "backend/cuda/cudnn_conv.cu",
}
NAME = re.compile(r"([A-Za-z_]\w*)\s*\(")


def functions(lines):
    """(name, first line, length) of each definition in lines (1-based first line)."""
    i = 0
    while i < len(lines):
        if lines[i].rstrip() != "{" or i == 0:
            i += 1
            continue
        # The signature: the lines above the brace back to a blank line, a
        # directive, a comment's end or a statement's end.
        j = i
        while j > 0:
            prev = lines[j - 1].rstrip()
            if not prev or prev.startswith("#") or prev.endswith((";", "}", "*/")):
                break
            j -= 1
        k = i + 1
        while k < len(lines) and lines[k].rstrip() != "}":
            k += 1
        m = NAME.search(" ".join(lines[j:i]))
        yield (m.group(1) if m else "?"), j + 1, k - i
        i = k + 1


def main():
    root = sys.argv[1]
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else LIMIT
    long, seen, count = [], set(), 0
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            if not f.endswith(SUFFIXES):
                continue
            path = os.path.join(d, f)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            if rel in EXEMPT:
                seen.add(rel)
                continue
            with open(path, encoding="utf-8", errors="replace") as fh:
                lines = fh.read().split("\n")
            for name, first, length in functions(lines):
                count += 1
                if length > limit:
                    long.append((length, rel, first, name))
    bad = 0
    for rel in sorted(EXEMPT - seen):
        print(f"long_functions.py: the exempt kernel source {rel} is not in {root}: "
              "take it off the list", file=sys.stderr)
        bad = 1
    # A parser that finds no function would pass everything.
    if count < 100:
        print(f"long_functions.py: only {count} functions found under {root}", file=sys.stderr)
        bad = 1
    for length, rel, first, name in sorted(long, reverse=True):
        print(f"{rel}:{first}: {name} is {length} lines (limit {limit}): split it into named "
              "helpers", file=sys.stderr)
        bad = 1
    if not bad:
        print(f"{count} functions, none over {limit} lines")
    return bad


if __name__ == "__main__":
    sys.exit(main())
