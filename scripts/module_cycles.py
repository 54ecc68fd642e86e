#!/usr/bin/env python3
"""Finds module cycles inside each crate of the workspace; exits 1 naming them, else 0.

    python3 scripts/module_cycles.py [REPO_ROOT]
    python3 scripts/module_cycles.py --flat-commands [REPO_ROOT]
    python3 scripts/module_cycles.py --self-test

Checks every `crates/*/src` and the command's `src/`. Every `.rs` file is a module (`lib.rs` and
`main.rs` the root, `a/mod.rs` and `a.rs` both `a`). A module names another in its `use` lines
(`use crate::..`, `use super::..`, `use self::..`, `use child::..`) and in the paths of its code:
`crate::a::b`, `super::..`, `self::..`, and a path that starts with a name it imported. Comments,
string literals and `#[cfg(test)]` items (a test may reach anywhere) are not code. A path is
resolved to the deepest module it names; a name imported there (`use x::Name`, `pub use`) is
followed to the module it comes from, so `crate::Scenario` re-exported by `lib.rs` is a use of
`scenario`, and a name from outside the crate is no edge.

A parent and the children it is made of are one unit seen from outside: a use of
`crate::review::basis::X` from `sweep` is an edge `sweep -> review`, and a use of `crate::sweep`
from `review::basis` is an edge `review -> sweep`, so the two make a cycle. Each edge joins the
two children of the modules' nearest common parent that hold them. A module's use of its own
descendants (`mod child;`, `pub use child::Item`) is containment and a child's use of its parent
is the child's own business: neither is an edge. A cycle is printed with one `file:line` per edge.

`--flat-commands` checks that the command layer is flat, with the same reading of `use` lines and
inline paths: a command module (`src/cmd/X.rs` and `src/cmd/X/..`) names no other command, only
its own parts, `cmd/mod.rs` and `cmd/shared/`; `cmd/shared/` names no command. Each breach is
printed with its `file:line`; exits 1 when there is one.
"""

import re
import sys
import tempfile
from collections import deque
from pathlib import Path


def code_of(text):
    """The code with comments, string contents and `#[cfg(test)]` items blanked to spaces; every
    newline is kept, so a line number in the result is the line in the file."""
    out, i, n = [], 0, len(text)

    def blank(s):
        return re.sub(r"[^\n]", " ", s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            j, depth = i + 2, 1
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and not _ident_before(text, i):
            end = text.find('"' + m.group(1), m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(text[i : m.end()] + blank(text[m.end() : j - 1 - len(m.group(1))]))
            out.append(text[j - 1 - len(m.group(1)) : j])
            i = j
        elif c == '"' or (c == "b" and text.startswith('b"', i) and not _ident_before(text, i)):
            start = i + (2 if c == "b" else 1)
            j = start
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:start] + blank(text[start:j]) + '"')
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a, 'static).
            m = CHAR.match(text, i)
            if m:
                out.append("' '")
                i = m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return _without_tests("".join(out))


CHAR = re.compile(r"'(?:\\(?:u\{[0-9a-fA-F]*\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'")


def _ident_before(text, i):
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")


def _without_tests(code):
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", code):
        if m.start() < i:
            continue
        out.append(code[i : m.start()])
        j, depth = m.end(), 0
        while j < len(code):
            c = code[j]
            j += 1
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            elif c == ";" and depth == 0:
                break
        out.append(re.sub(r"[^\n]", " ", code[m.start() : j]))
        i = j
    out.append(code[i:])
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


USE = re.compile(r"\buse\s+([^;]*);")
PATH = re.compile(r"(?<![:\w])(\w+(?:\s*::\s*\w+)+)")


class Crate:
    def __init__(self, src, root):
        self.files = {module_of(src, f): f for f in sorted(src.rglob("*.rs"))}
        self.modules = set(self.files)
        self.root = root
        code = {m: code_of(f.read_text()) for m, f in self.files.items()}
        # Names each module imports: name -> path segments.
        self.imports = {m: {} for m in self.modules}
        # What each module names: (path segments, line).
        self.uses = {m: [] for m in self.modules}
        for m, text in code.items():
            for u in USE.finditer(text):
                line = text.count("\n", 0, u.start()) + 1
                for segs, alias in expand(re.sub(r"\s+", " ", u.group(1))):
                    if not segs:
                        continue
                    self.uses[m].append((segs, line))
                    if alias and alias != "*":
                        self.imports[m][alias] = segs
            # Paths in the code, the `use` lines blanked (a path inside a use tree is relative
            # to the tree's prefix, read above).
            rest = USE.sub(lambda u: re.sub(r"[^\n]", " ", u.group(0)), text)
            for p in PATH.finditer(rest):
                segs = re.split(r"\s*::\s*", p.group(1))
                first = segs[0]
                if first in ("crate", "super", "self") or first in self.imports[m]:
                    line = rest.count("\n", 0, p.start()) + 1
                    self.uses[m].append((segs, line))

    def target(self, module, segs, depth=0):
        """The module `segs`, used in `module`, comes from; None when outside the crate."""
        if segs[0] == "crate":
            here, rest = (), segs[1:]
        elif segs[0] in ("super", "self"):
            here, rest = module, segs
        elif module + (segs[0],) in self.modules:
            here, rest = module, segs
        elif segs[0] in self.imports[module] and depth < 20:
            imported = self.imports[module][segs[0]]
            if imported[0] == segs[0] and len(imported) == 1:
                return None
            return self.target(module, imported + segs[1:], depth + 1)
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
        """Edges between sibling modules: `{a: {b: "file:line"}}`, the first place `a`'s files
        name `b`'s."""
        edges = {m: {} for m in self.modules}
        for m in sorted(self.modules):
            for segs, line in self.uses[m]:
                t = self.target(m, segs)
                if t is None or t[: len(m)] == m or m[: len(t)] == t:
                    continue  # outside the crate, itself, a descendant or an ancestor
                k = 0
                while m[k] == t[k]:
                    k += 1
                a, b = m[: k + 1], t[: k + 1]
                where = f"{self.files[m].relative_to(self.root)}:{line}"
                edges.setdefault(a, {}).setdefault(b, where)
                edges.setdefault(b, {})
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


def check(root, out=print):
    """Prints each cycle of each crate under `root`; returns how many it found."""
    crates = sorted(root.glob("crates/*/src"))
    if (root / "src").is_dir():
        crates.append(root / "src")
    found = 0
    for src in crates:
        label = src.parent.name if src.parent != root else "capsim (src/)"
        edges = Crate(src, root).edges()
        for comp in components(edges):
            found += 1
            cycle = one_cycle(edges, comp)
            out(f"{label}: module cycle: " + " -> ".join(name(m) for m in cycle))
            for a, b in zip(cycle, cycle[1:]):
                out(f"  {name(a)} -> {name(b)}: {edges[a][b]}")
            if len(comp) > 2:
                members = ", ".join(name(m) for m in sorted(comp))
                out(f"  (modules depending on each other in a ring: {members})")
    if found == 0:
        out("no module cycle in " + ", ".join(c.parent.name if c.parent != root else "src" for c in crates))
    return found


def flat_commands(root, out=print):
    """Prints each place under `root/src/cmd` where a command names another command, or `shared`
    names a command; returns how many it found."""
    src = root / "src"
    crate = Crate(src, root)
    found, seen = 0, set()
    for m in sorted(crate.modules):
        if len(m) < 2 or m[0] != "cmd":
            continue  # the command's root, `input.rs`, `cmd/mod.rs`
        for segs, line in crate.uses[m]:
            t = crate.target(m, segs)
            if t is None or len(t) < 2 or t[0] != "cmd" or t[1] in ("shared", m[1]):
                continue  # outside cmd, `cmd/mod.rs`, shared, or the command's own parts
            if (m, t[:2], line) in seen:
                continue  # one line per place: `use a::{X, Y}` names `a` once
            seen.add((m, t[:2], line))
            found += 1
            what = "shared module" if m[1] == "shared" else "command"
            where = f"{crate.files[m].relative_to(root)}:{line}"
            out(f"{what} {name(m)} names command {name(t[:2])}: {where}")
    if found == 0:
        out("no command module names another command (src/cmd)")
    else:
        out("move what two commands share into src/cmd/shared/ (or a library crate)")
    return found


SELF_TEST = {
    # A cycle only through an inline path in a function body: found.
    "lib.rs": "mod a;\nmod b;\nmod c;\nmod d;\nmod e;\nmod f;\npub use f::inner::Thing;\n",
    "a.rs": "use crate::b::Bee;\npub struct Ay;\n",
    "b.rs": "pub struct Bee;\nfn make() -> usize {\n    let x = crate::a::Ay;\n    0\n}\n",
    # Only in comments (line, doc, block, nested block) and strings (plain, raw, with `//`): none.
    "c.rs": (
        "use crate::d::Dee;\n"
        "// crate::c::X\n"
        "/// [`crate::c::X`]\n"
        "pub struct Cee;\n"
    ),
    "d.rs": (
        "//! crate::c::Cee\n"
        "pub struct Dee;\n"
        "/* crate::c::Cee /* nested */ crate::c::Cee */\n"
        "fn f() -> (&'static str, &'static str, &'static str, char) {\n"
        '    ("see crate::c::Cee", r#"crate::c::Cee "quoted""#, "http://x \\" crate::c::Cee", \'"\')\n'
        "}\n"
    ),
    # Through a child: `e` names `f::inner` (via the root's re-export); `f::inner` names `e`.
    "e.rs": "pub fn g() -> crate::Thing { crate::Thing }\n",
    "f/mod.rs": "pub mod inner;\n",
    "f/inner.rs": "pub struct Thing;\nfn h() { super::super::e::g(); }\n",
}


FLAT_SELF_TEST = {
    "main.rs": "mod cmd;\nfn main() { cmd::a::run(); cmd::b::run(); }\n",
    "cmd/mod.rs": "pub mod a;\npub mod b;\npub mod shared;\npub fn out_dir() {}\n",
    # A command naming another in a use line: found; naming cmd/mod.rs, shared, or another
    # command only in a comment, a string or a test: not.
    "cmd/a.rs": (
        "use super::b::helper;\n"
        "use super::shared::grid::Args;\n"
        "// super::b::helper\n"
        "pub fn run() { crate::cmd::out_dir(); let _ = \"crate::cmd::b::run\"; }\n"
        "#[cfg(test)]\nmod tests { use crate::cmd::b::run; }\n"
    ),
    # A command's own part naming its parent: fine; naming another command inline: found.
    "cmd/b.rs": "mod part;\npub fn helper() {}\npub fn run() { part::go(); }\n",
    "cmd/b/part.rs": "use super::helper;\npub fn go() {\n    crate::cmd::a::run();\n}\n",
    # shared naming a command: found.
    "cmd/shared/mod.rs": "pub mod grid;\n",
    "cmd/shared/grid.rs": "pub struct Args;\nfn f() { super::super::b::helper(); }\n",
}


def flat_self_test():
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        for path, text in FLAT_SELF_TEST.items():
            (src / path).parent.mkdir(parents=True, exist_ok=True)
            (src / path).write_text(text)
        lines = []
        found = flat_commands(Path(tmp), lines.append)
    expected = [
        "command crate::cmd::a names command crate::cmd::b: src/cmd/a.rs:1",
        "command crate::cmd::b::part names command crate::cmd::a: src/cmd/b/part.rs:3",
        "shared module crate::cmd::shared::grid names command crate::cmd::b: src/cmd/shared/grid.rs:2",
        "move what two commands share into src/cmd/shared/ (or a library crate)",
    ]
    if found != 3 or lines != expected:
        print(
            "flat-commands self-test failed: expected\n"
            + "\n".join(expected)
            + "\ngot\n"
            + "\n".join(lines)
        )
        return 1
    print("flat-commands self-test: commands naming commands found, none from comments or tests")
    return 0


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "crates" / "toy" / "src"
        for path, text in SELF_TEST.items():
            (src / path).parent.mkdir(parents=True, exist_ok=True)
            (src / path).write_text(text)
        lines = []
        found = check(Path(tmp), lines.append)
    text = "\n".join(lines)
    expected = [
        "toy: module cycle: crate::a -> crate::b -> crate::a",
        "  crate::a -> crate::b: crates/toy/src/a.rs:1",
        "  crate::b -> crate::a: crates/toy/src/b.rs:3",
        "toy: module cycle: crate::e -> crate::f -> crate::e",
        "  crate::e -> crate::f: crates/toy/src/e.rs:1",
        "  crate::f -> crate::e: crates/toy/src/f/inner.rs:2",
    ]
    if found != 2 or lines != expected:
        print("module_cycles self-test failed: expected\n" + "\n".join(expected) + "\ngot\n" + text)
        return 1
    print("module_cycles self-test: the inline path's cycles found, none from comments or strings")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test() or flat_self_test()
    if sys.argv[1:2] == ["--flat-commands"]:
        root = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parent.parent
        return 1 if flat_commands(root) else 0
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    return 1 if check(root) else 0


if __name__ == "__main__":
    sys.exit(main())
