#!/usr/bin/env bash
# HOUSE_STYLE rule 21: within a crate, a module never imports from a module that imports it,
# directly or around a circle. A module is a top-level file or directory of src/ (src/remote/
# and everything under it is `remote`); an import is a `use crate::X...` (groups included) or a
# `crate::X::` path anywhere in the code, comments left out. The crate root (lib.rs, main.rs)
# declares the modules and is not checked.
#
# Fails on a cycle in any crate listed in STRICT (all of them since issue 18); WARN only reports,
# for a crate being brought into line.
set -euo pipefail
cd "$(dirname "$0")/.."

STRICT=(agent/src approval/src backends/src benches/src cli/src engine/src mcp/src sandbox-worker/src)
WARN=()

python3 - "${#STRICT[@]}" "${STRICT[@]}" "${WARN[@]}" <<'PY'
import os, re, sys

n_strict = int(sys.argv[1])
dirs = sys.argv[2:]
strict, warn = dirs[:n_strict], dirs[n_strict:]

CRATE = re.compile(r"(?<![\w$])crate::")
USE = re.compile(r"\b(?:pub(?:\([^)]*\))?\s+)?use\s+crate::")


def modules(src):
    """Top-level module name -> its .rs files."""
    mods = {}
    for entry in sorted(os.listdir(src)):
        path = os.path.join(src, entry)
        if entry.endswith(".rs") and entry not in ("lib.rs", "main.rs"):
            mods[entry[:-3]] = [path]
        elif os.path.isdir(path) and entry != "bin":
            files = []
            for root, _, names in os.walk(path):
                files += [os.path.join(root, f) for f in sorted(names) if f.endswith(".rs")]
            if files:
                mods[entry] = files
    return mods


def strip_comments(text):
    # Line comments only (doc links name paths without importing them); strings are rare enough.
    return re.sub(r"//[^\n]*", "", text)


def top_names(group):
    """First segments of the paths in a `{a, b::c, d::{e, f}}` group."""
    names, depth, cur = [], 0, ""
    for ch in group:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            names.append(cur)
            cur = ""
        else:
            cur += ch
    names.append(cur)
    out = []
    for name in names:
        m = re.match(r"\s*(\w+)", name)
        if m:
            out.append(m.group(1))
    return out


def imports(text):
    """(module name, line) for every `use crate::...` and `crate::X::` in `text`."""
    found = []
    for m in USE.finditer(text):
        end = text.find(";", m.end())
        body = text[m.end() : end if end >= 0 else len(text)]
        line = text.count("\n", 0, m.start()) + 1
        if body.lstrip().startswith("{"):
            inner = body.lstrip()[1:]
            inner = inner[: inner.rfind("}")] if "}" in inner else inner
            found += [(name, line) for name in top_names(inner)]
        else:
            seg = re.match(r"\s*(\w+)", body)
            if seg:
                found.append((seg.group(1), line))
    for m in CRATE.finditer(text):
        seg = re.match(r"(\w+)::", text[m.end() :])
        if seg:
            found.append((seg.group(1), text.count("\n", 0, m.start()) + 1))
    return found


def graph(src):
    mods = modules(src)
    edges = {m: {} for m in mods}  # from -> to -> [file:line]
    for mod, files in mods.items():
        for path in files:
            with open(path, encoding="utf-8") as f:
                text = strip_comments(f.read())
            for name, line in imports(text):
                if name in mods and name != mod:
                    edges[mod].setdefault(name, []).append(f"{path}:{line}")
    return edges


def cycles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


failed = False
for src in strict + warn:
    if not os.path.isdir(src):
        continue
    edges = graph(src)
    found = cycles(edges)
    level = "ERROR" if src in strict else "WARN"
    if not found:
        print(f"ok: {src}: no import cycles between its {len(edges)} modules")
        continue
    for comp in found:
        print(f"{level}: {src}: import cycle between {', '.join(comp)}")
        members = set(comp)
        for a in comp:
            for b in sorted(edges[a]):
                if b in members:
                    where = edges[a][b]
                    more = f" (+{len(where) - 1} more)" if len(where) > 1 else ""
                    print(f"    {a} -> {b}: {where[0]}{more}")
    if src in strict:
        failed = True

if failed:
    print("check-layers: move what both sides need into a leaf module (HOUSE_STYLE rule 21)")
    sys.exit(1)
PY
