#!/usr/bin/env bash
# HOUSE_STYLE rule 21: within a crate, nothing imports from what imports it, directly or around a
# circle. Checked at two grains:
# - modules: a module is a top-level file or directory of src/ (src/remote/ and everything under
#   it is `remote`); the crate root (lib.rs, main.rs) declares the modules and is not checked;
# - files: every .rs file is its own node (src/a/b.rs is `a::b`, src/a/mod.rs is `a`), so a circle
#   between two files of one module (notebook.rs <-> saved_state.rs) fails too. A parent file
#   (mod.rs) using its own children is the module tree, not a layer, and is not counted; a child
#   using its parent is. The crate root is left out as above.
# An import is a `use` (groups included; `crate::`, `super::`, `self::` or a child module's name)
# or such a path anywhere in the code, comments and `#[cfg(test)] mod tests { .. }` blocks left out.
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


# ---- files ------------------------------------------------------------------------------------

TEST_BLOCK = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")
USE_ANY = re.compile(r"\b(?:pub(?:\([^)]*\))?\s+)?use\s+")
PATH_EXPR = re.compile(r"(?<![\w:$])((?:crate|super|self)(?:::\w+)+|\w+(?:::\w+)+)")


def strip_test_blocks(text):
    """`#[cfg(test)] mod tests { .. }` blocks out (their `super::` is the file itself)."""
    out, pos = [], 0
    for m in TEST_BLOCK.finditer(text):
        if m.start() < pos:
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        out.append(text[pos : m.start()])
        out.append("\n" * text.count("\n", m.start(), i))
        pos = i
    out.append(text[pos:])
    return "".join(out)


def file_modules(src):
    """Module path (tuple) -> file, for every .rs file of the crate but the roots."""
    files = {}
    for root, _, names in os.walk(src):
        rel = os.path.relpath(root, src)
        parts = () if rel == "." else tuple(rel.split(os.sep))
        if parts[:1] == ("bin",):
            continue
        for name in names:
            if not name.endswith(".rs"):
                continue
            if not parts and name in ("lib.rs", "main.rs"):
                continue
            mod = parts if name == "mod.rs" else parts + (name[:-3],)
            files[mod] = os.path.join(root, name)
    return files


def expand_use(body):
    """`a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"]."""
    body = re.sub(r"\s+", "", body)
    if "{" not in body:
        return [body]
    head, rest = body.split("{", 1)
    rest = rest[: rest.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in rest:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    out = []
    for part in parts:
        if part:
            out += [head + p for p in expand_use(part)]
    return out


def resolve(path, here, files):
    """The file a path names, from module `here`, or None (another crate, std, a local)."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        base, segs = (), segs[1:]
    elif segs[0] in ("super", "self"):
        base = here
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    elif here + (segs[0],) in files:
        base = here  # a child module named without `self::`
    else:
        return None
    best = base if base in files else None
    for i in range(1, len(segs) + 1):
        if base + tuple(segs[:i]) in files:
            best = base + tuple(segs[:i])
    return best


def file_graph(src):
    files = file_modules(src)
    edges = {m: {} for m in files}
    for mod, path in files.items():
        is_parent = os.path.basename(path) == "mod.rs"
        with open(path, encoding="utf-8") as f:
            text = strip_test_blocks(strip_comments(f.read()))
        found = []
        for m in USE_ANY.finditer(text):
            end = text.find(";", m.end())
            body = text[m.end() : end if end >= 0 else len(text)]
            line = text.count("\n", 0, m.start()) + 1
            found += [(p, line) for p in expand_use(body)]
        for m in PATH_EXPR.finditer(text):
            before = text[max(0, m.start() - 80) : m.start()]
            if re.search(r"\buse\s+[^;]*$", before):
                continue  # inside a `use` already read above
            found.append((m.group(1), text.count("\n", 0, m.start()) + 1))
        for p, line in found:
            target = resolve(p, mod, files)
            if target is None or target == mod:
                continue
            if is_parent and target[: len(mod)] == mod:
                continue  # a parent using its own parts: the module tree, not a layer
            edges[mod].setdefault(target, []).append(f"{path}:{line}")
    return edges


def name(mod):
    """A node's name: a module's as it is, a file's module path."""
    return mod if isinstance(mod, str) else "::".join(mod) or "crate"


def report(src, edges, nodes):
    """Prints the circles of one crate's graph; True when there is one."""
    found = cycles(edges)
    level = "ERROR" if src in strict else "WARN"
    if not found:
        print(f"ok: {src}: no import circles between its {len(edges)} {nodes}")
        return False
    for comp in found:
        print(f"{level}: {src}: import circle between {nodes} {', '.join(map(name, comp))}")
        members = set(comp)
        for a in comp:
            for b in sorted(edges[a]):
                if b in members:
                    where = edges[a][b]
                    more = f" (+{len(where) - 1} more)" if len(where) > 1 else ""
                    print(f"    {name(a)} -> {name(b)}: {where[0]}{more}")
    return True


failed = False
for src in strict + warn:
    if not os.path.isdir(src):
        continue
    circle = report(src, graph(src), "modules")
    circle = report(src, file_graph(src), "files") or circle
    failed = failed or (circle and src in strict)

if failed:
    print("check-layers: move what both sides need into a leaf module (HOUSE_STYLE rule 21)")
    sys.exit(1)
PY
