#!/usr/bin/env python3
"""No circle among the library's files (docs/ARCHITECTURE.md, "Layers").

A file depends on another when it calls a function (or reads a variable) that
the other defines; two files that depend on each other, directly or through
others, make a circle, and a reader can no longer learn one before the other.
The graph comes from what is built: `nm` over the library's objects (each
object one source file), so a macro or an inline in a header is no edge.
Usage: circles.py OBJECT_DIR (the library target's CMakeFiles folder)
"""
import collections
import os
import subprocess
import sys


def objects(root):
    """{source: (defined, undefined)} from nm over every object below root."""
    paths = []
    for d, _, files in os.walk(root):
        paths += [os.path.join(d, f) for f in files if f.endswith(".o")]
    out = subprocess.run(["nm", "-A"] + sorted(paths), capture_output=True, text=True,
                         check=True).stdout
    objs = collections.defaultdict(lambda: (set(), set()))
    for line in out.splitlines():
        path, sep, rest = line.partition(".o:")
        if not sep:
            continue
        path += ".o"
        src = os.path.relpath(path, root).removesuffix(".o")
        f = rest.split()
        if len(f) == 3 and f[1] in "TDBRC":
            objs[src][0].add(f[2])
        elif len(f) == 2 and f[0] == "U":
            objs[src][1].add(f[1])
    return objs


def sccs(graph):
    """Tarjan's strongly connected components of graph {node: {node: why}}."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    objs = objects(sys.argv[1])
    owner = {}
    for obj, (defined, _) in objs.items():
        for s in defined:
            owner[s] = obj
    graph = {obj: {} for obj in objs}
    for obj, (_, undefined) in objs.items():
        for s in sorted(undefined):
            o = owner.get(s)
            if o and o != obj:
                graph[obj].setdefault(o, s)
    bad = [c for c in sccs(graph) if len(c) > 1]
    for comp in bad:
        print("circles: " + ", ".join(comp) + " depend on each other:", file=sys.stderr)
        for a in comp:
            for b, why in sorted(graph[a].items()):
                if b in comp:
                    print(f"  {a} -> {b} ({why})", file=sys.stderr)
    if bad:
        print("circles: move what both need below them, or merge the two files", file=sys.stderr)
        return 1
    print(f"circles: {len(objs)} files, no circle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
