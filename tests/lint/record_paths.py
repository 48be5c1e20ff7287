#!/usr/bin/env python3
"""Every record path a source reads by string literal is declared in the path
table (src/core/record_paths.def).

What is checked: in src/**/*.c and src/**/*.h, each call of a record lookup
whose path argument is a string literal (C string concatenation and all):
  dg_jpath, dg_jnum, dg_jbool, dg_jstr          (core/json.h)  path = argument 2
  dg_rp_get, dg_rp_obj, dg_rp_arr, dg_rp_str, dg_rp_true, dg_rp_num (src/report)  path = argument 2
  dg_rp_fmt_metric_at                                              path = argument 4
A literal is declared when some row's path (of any section) is it or ends
with it at a component boundary: "runs[0].speedup" is declared by the row
"runs[].speedup" of COMPARE. Indices ([0], [%d], [%zu]) read as [], a %s in
a format as any one key, a row's "*" as any key. Paths built at run time and
keys read one at a time with cJSON_GetObjectItem* are not checked here; the
typed views (src/core/record.h) read through row ids instead.

Known undeclared reads (defects the owner of that file fixes, then removes
the line) are listed in record_paths.allow as "FILE PATH  # why"; an allowed
read that no longer occurs is itself an error, so the list only shrinks.

Exit 0 when every literal is declared, 1 otherwise (each undeclared one is
listed as FILE:LINE: PATH (CALL)). Usage: record_paths.py SOURCE_ROOT
"""
import os
import re
import sys

CALLS = {"dg_jpath": 1, "dg_jnum": 1, "dg_jbool": 1, "dg_jstr": 1, "dg_rp_get": 1, "dg_rp_obj": 1,
         "dg_rp_arr": 1, "dg_rp_str": 1, "dg_rp_true": 1, "dg_rp_num": 1, "dg_rp_fmt_metric_at": 3}


SECTIONS = {"ENV": "env", "GATE": "gate", "SWEEP": "sweep", "SOAK": "soak", "COMPARE": "compare",
            "PROFILE": "profile", "SUPERVISE": "supervise", "SLO": "slo"}


def rows(root):
    """Each row's path, and for a section's row also its path from the
    evidence record ("runs[].speedup" of COMPARE is also "compare.runs[].speedup")."""
    out = []
    pat = re.compile(r'^DG_RP\(\s*\w+\s*,\s*(\w+)\s*,\s*"([^"]*)"')
    with open(os.path.join(root, "src/core/record_paths.def")) as f:
        for line in f:
            m = pat.match(line)
            if m:
                out.append(m.group(2))
                if m.group(1) in SECTIONS:
                    out.append(SECTIONS[m.group(1)] + "." + m.group(2))
    return out


def split_args(text, start):
    """The arguments of the call whose '(' is at start; None when unbalanced."""
    depth, i, args, cur, in_str = 0, start, [], [], False
    while i < len(text):
        c = text[i]
        if in_str:
            cur.append(c)
            if c == "\\":
                cur.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            cur.append(c)
        elif c in "([{":
            depth += 1
            if depth > 1:
                cur.append(c)
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append("".join(cur).strip())
                return args, i
            cur.append(c)
        elif c == "," and depth == 1:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    return None, i


def literal(arg):
    """The value of an argument made only of string literals, else None."""
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', arg)
    rest = re.sub(r'"((?:[^"\\]|\\.)*)"', "", arg).strip()
    return "".join(parts) if parts and not rest else None


def comps(path):
    return path.split(".")


def comp_match(row_c, lit_c):
    if lit_c == "%s" or row_c == lit_c:
        return True
    if row_c.startswith("*"):  # a row's * is any one key
        return lit_c.endswith(row_c[1:]) and "[" not in lit_c[: len(lit_c) - len(row_c) + 1]
    return False


def declared(lit, paths):
    p = re.sub(r"\[(\d+|%d|%zu|%u|%i)\]", "[]", lit)
    lc = comps(p)
    for r in paths:
        rc = comps(r)
        if len(rc) >= len(lc) and all(comp_match(a, b) for a, b in zip(rc[len(rc) - len(lc):], lc)):
            return True
    return False


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    paths = rows(root)
    if len(paths) < 100:
        print("record_paths: the path table has %d rows" % len(paths))
        return 1
    allow = {}
    allow_file = os.path.join(root, "tests/lint/record_paths.allow")
    if os.path.exists(allow_file):
        for line in open(allow_file):
            line = line.split("#", 1)[0].strip()
            if line:
                f, lit = line.split()
                allow[(f, lit)] = False
    call_rx = re.compile(r"\b(" + "|".join(CALLS) + r")\s*\(")
    bad, seen = [], 0
    for d, _, files in os.walk(os.path.join(root, "src")):
        for name in sorted(files):
            if not name.endswith((".c", ".h")):
                continue
            fp = os.path.join(d, name)
            text = open(fp, encoding="utf-8", errors="replace").read()
            for m in call_rx.finditer(text):
                args, _ = split_args(text, m.end() - 1)
                k = CALLS[m.group(1)]
                if not args or len(args) <= k:
                    continue  # the declaration or a macro, not a call with a path
                lit = literal(args[k])
                if lit is None:
                    continue
                seen += 1
                rel = os.path.relpath(fp, root)
                if (rel, lit) in allow:
                    allow[(rel, lit)] = True
                    continue
                if not declared(lit, paths):
                    line = text.count("\n", 0, m.start()) + 1
                    bad.append("%s:%d: %s (%s)" % (os.path.relpath(fp, root), line, lit,
                                                   m.group(1)))
    for (f, lit), used in sorted(allow.items()):
        if not used:
            bad.append("%s: %s is allowed in record_paths.allow but no longer read: "
                       "remove the line" % (f, lit))
    for b in bad:
        print(b)
    print("record_paths: %d literal paths read, %d undeclared" % (seen, len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
