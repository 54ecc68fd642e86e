#!/usr/bin/env python3
"""Finds module cycles inside each crate of the workspace; exits 1 naming them, else 0.

    python3 scripts/module_cycles.py [REPO_ROOT]

For each `crates/*/src`, every `.rs` file is a module (`lib.rs` the root, `a/mod.rs` and `a.rs`
both `a`). A module depends on the modules it names in `use crate::..`, `use super::..`,
`use self::..`, `use child::..` and in `crate::..` / `super::..` paths in its code. A path is
resolved to the deepest module it names; a name imported there (`use x::Name`, `pub use`) is
followed to the module it comes from, so `crate::Scenario` re-exported by `lib.rs` is a use of
`scenario`, and a name from outside the crate is no edge. A module's use of its own descendants
is containment (`mod child;`, `pub use child::Item`), not an edge: a parent and the children it
is made of are one unit seen from outside, and a child may use its parent's items. Items under
`#[cfg(test)]` (test modules) are skipped: a test may reach anywhere.
"""

import re
import sys
from collections import deque
from pathlib import Path


def code_of(text):
    """The code without comments, string contents and `#[cfg(test)]` items."""
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'r(#*)"(?:.|\n)*?"\1', '""', text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    text = re.sub(r"'(?:\\.|[^'\\])'", "' '", text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        j, depth = m.end(), 0
        while j < len(text):
            c = text[j]
            j += 1
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            elif c == ";" and depth == 0:
                break
        i = j
    out.append(text[i:])
    return "".join(out)


def module_of(src, path):
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    return tuple(parts)


def expand(tree):
    """`a::{b, c::{d, e as f}}` into `[[a, b], [a, c, d], [a, c, e]]` (aliases kept as
    `(segments, alias)`)."""
    tree = tree.strip()
    brace = tree.find("{")
    if brace < 0:
        alias = None
        if " as " in tree:
            tree, alias = [t.strip() for t in tree.split(" as ")]
        segs = [s for s in tree.split("::") if s]
        return [(segs, alias or (segs[-1] if segs else None))]
    prefix = [s for s in tree[:brace].split("::") if s]
    inner = tree[brace + 1 : tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for c in inner:
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += (c == "{") - (c == "}")
        cur += c
    parts.append(cur)
    out = []
    for part in parts:
        if part.strip():
            for segs, alias in expand(part):
                if segs == ["self"]:
                    out.append((prefix, prefix[-1] if prefix else None))
                else:
                    out.append((prefix + segs, alias))
    return out


class Crate:
    def __init__(self, src):
        self.files = {module_of(src, f): f for f in src.rglob("*.rs")}
        self.modules = set(self.files)
        self.code = {m: code_of(f.read_text()) for m, f in self.files.items()}
        # Names each module imports: name -> (module it was imported in, path segments).
        self.imports = {m: {} for m in self.modules}
        self.uses = {m: [] for m in self.modules}
        for m, code in self.code.items():
            for u in re.finditer(r"\buse\s+([^;]*);", code):
                for segs, alias in expand(u.group(1).replace("\n", " ")):
                    if not segs:
                        continue
                    self.uses[m].append(segs)
                    if alias and alias != "*":
                        self.imports[m][alias] = segs
            for p in re.finditer(r"(?<![:\w])((?:crate|super|self)(?:::\w+)+)", code):
                self.uses[m].append(p.group(1).split("::"))

    def target(self, module, segs, depth=0):
        """The module `segs`, used in `module`, comes from; None when outside the crate."""
        if segs[0] == "crate":
            here, rest = (), segs[1:]
        elif segs[0] in ("super", "self"):
            here, rest = module, segs
        elif module + (segs[0],) in self.modules:
            here, rest = module, segs
        else:
            return None  # another crate, std, or a name of this module
        for i, s in enumerate(rest):
            if s == "super":
                here = here[:-1]
            elif s == "self":
                continue
            elif here + (s,) in self.modules:
                here = here + (s,)
            else:
                imported = self.imports[here].get(s)
                if imported and depth < 20 and imported != rest[i:]:
                    return self.target(here, imported + rest[i + 1 :], depth + 1)
                return here
        return here

    def edges(self):
        edges = {m: set() for m in self.modules}
        for m in self.modules:
            for segs in self.uses[m]:
                t = self.target(m, segs)
                if t is None or t == m or t[: len(m)] == m:
                    continue  # outside the crate, itself, or one of its own descendants
                edges[m].add(t)
        return edges


def components(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
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
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def one_cycle(edges, comp):
    """A shortest cycle through the component's first module, to name in the message."""
    members, start = set(comp), min(comp)
    queue, seen = deque([(start, [start])]), {start}
    while queue:
        v, path = queue.popleft()
        for w in sorted(edges[v]):
            if w == start:
                return path + [start]
            if w in members and w not in seen:
                seen.add(w)
                queue.append((w, path + [w]))
    return [start]


def name(module):
    return "crate" + "".join("::" + p for p in module)


def main():
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    crates = sorted(root.glob("crates/*/src"))
    found = 0
    for src in crates:
        edges = Crate(src).edges()
        for comp in components(edges):
            found += 1
            cycle = " -> ".join(name(m) for m in one_cycle(edges, comp))
            print(f"{src.parent.name}: module cycle: {cycle}")
            if len(comp) > 2:
                members = ", ".join(name(m) for m in sorted(comp))
                print(f"  (modules depending on each other in a ring: {members})")
    if found == 0:
        print("no module cycle in " + ", ".join(c.parent.name for c in crates))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
