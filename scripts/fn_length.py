#!/usr/bin/env python3
"""Finds functions longer than the ceiling; exits 1 naming them, else 0.

    python3 scripts/fn_length.py [--max N] [REPO_ROOT]
    python3 scripts/fn_length.py --self-test

Checks every `.rs` under `crates/*/src` and the command's `src/`, test code left out: a
`#[cfg(test)]` item, and a file that is a test module (`#[cfg(test)] mod tests;` makes
`tests.rs` beside it one). Every `fn` item with a body counts (free, in an `impl`, a trait's
default method, nested), from the line of `fn` (its attributes and doc comment not counted) to
the line of its closing brace, both included. Braces in comments, strings, raw strings and char
literals are not code (the reading is `module_cycles.code_of`'s). A function over the ceiling
(100 lines unless `--max N`) passes only when a `// Long ...: reason` comment stands directly
above its attributes and doc comment; each other one is printed as `path:line name N lines`.
"""

import re
import sys
import tempfile
from pathlib import Path

from module_cycles import code_of

CEILING = 100
FN = re.compile(r"\bfn\s+(r#)?(\w+)")
TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")
EXCEPTION = re.compile(r"//\s*Long [^:\n]*:\s*\S")


def functions(code):
    """`(name, first line, last line)` of each `fn` with a body in `code` (as `code_of` gives it)."""
    out = []
    for m in FN.finditer(code):
        # The signature ends at the body's `{` or, for a trait method without one, at `;`; a `;`
        # or `{` inside parentheses or brackets (`-> [u8; 4]`) is not the end.
        j, depth = m.end(), 0
        while j < len(code):
            c = code[j]
            if c in "([":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif depth == 0 and c in "{;":
                break
            j += 1
        if j >= len(code) or code[j] == ";":
            continue
        k, braces = j, 0
        while k < len(code):
            if code[k] == "{":
                braces += 1
            elif code[k] == "}":
                braces -= 1
                if braces == 0:
                    break
            k += 1
        first = code.count("\n", 0, m.start()) + 1
        out.append((m.group(2), first, code.count("\n", 0, k) + 1))
    return out


def excused(lines, first):
    """Whether a `// Long ...: reason` comment stands directly above the attributes and doc
    comment of the function whose `fn` is on line `first` (1-based)."""
    i = first - 2
    while i >= 0:
        s = lines[i].strip()
        if s.startswith("///") or s.startswith("#["):
            i -= 1
        elif s.endswith("]") and not s.startswith("//"):
            # The last line of an attribute over several lines: go up to its `#[`.
            while i >= 0 and not lines[i].strip().startswith("#["):
                i -= 1
            i -= 1
        else:
            break
    # The comment may run over several `//` lines; its first line opens `// Long`.
    top = i
    while top >= 0 and lines[top].strip().startswith("//") and not lines[top].strip().startswith("///"):
        top -= 1
    block = " ".join(lines[k].strip() for k in range(top + 1, i + 1))
    return i > top and lines[top + 1].strip().startswith("// Long ") and bool(EXCEPTION.match(block))


def test_files(src):
    """The files under `src` that are test modules, declared `#[cfg(test)] mod name;`."""
    out = set()
    for f in src.rglob("*.rs"):
        here = f.parent if f.name in ("lib.rs", "main.rs", "mod.rs") else f.with_suffix("")
        for m in TEST_MOD.finditer(f.read_text()):
            # `name.rs`, or the folder `name/` and every file in it.
            out |= {here / (m.group(1) + ".rs"), here / m.group(1)}
    return out


def check(root, ceiling=CEILING, out=print):
    """Prints each function over `ceiling` without an exception; returns how many."""
    found = 0
    sources = sorted((root / "crates").glob("*/src")) + [root / "src"]
    for src in sources:
        if not src.is_dir():
            continue
        skip = test_files(src)
        for f in sorted(src.rglob("*.rs")):
            if f in skip or any(p in skip for p in f.parents):
                continue
            text = f.read_text()
            lines = text.split("\n")
            for name, first, last in functions(code_of(text)):
                n = last - first + 1
                if n > ceiling and not excused(lines, first):
                    out(f"{f.relative_to(root)}:{first} {name} {n} lines")
                    found += 1
    return found


def body(n):
    return "".join(f"    let x{i} = {i};\n" for i in range(n))


SELF_TEST = {
    # Over the ceiling of 5: `long` (with braces in a string, a raw string, a char and a
    # comment that would close it early), `Thing::method`, and `outer` around a nested `inner`.
    "lib.rs": (
        "mod tool;\n#[cfg(test)]\nmod tests;\n"
        "/// Doc.\n#[inline]\npub fn long() -> [u8; 2] {\n"
        '    let s = "}}}"; let r = r#"}"#; let c = \'}\'; // }\n'
        + body(4)
        + "}\n"
        "fn short() {\n" + body(2) + "}\n"
        "struct Thing;\nimpl Thing {\n    fn method(&self) {\n" + body(5) + "    }\n}\n"
        "fn outer() {\n    fn inner() {\n" + body(6) + "    }\n}\n"
        "trait T {\n    fn no_body(&self);\n    fn with_body(&self) {}\n}\n"
        "// Long table: one arm per kind; split, it would read worse.\n"
        "/// Doc.\n#[allow(\n    dead_code\n)]\nfn excused() {\n" + body(8) + "}\n"
        "// A comment that gives no exception.\nfn unexcused() {\n" + body(8) + "}\n"
        "#[cfg(test)]\nmod inline_tests {\n    fn long_test() {\n" + body(8) + "    }\n}\n"
    ),
    "tool.rs": "pub fn fine() {}\n",
    "tests.rs": "fn long_test_file() {\n" + body(8) + "}\n",
}


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "crates" / "toy" / "src"
        src.mkdir(parents=True)
        for path, text in SELF_TEST.items():
            (src / path).write_text(text)
        lines = []
        found = check(Path(tmp), 5, lines.append)
    expected = [
        "crates/toy/src/lib.rs:6 long 7 lines",
        "crates/toy/src/lib.rs:19 method 7 lines",
        "crates/toy/src/lib.rs:27 outer 10 lines",
        "crates/toy/src/lib.rs:28 inner 8 lines",
        "crates/toy/src/lib.rs:57 unexcused 10 lines",
    ]
    if found != len(expected) or lines != expected:
        print(
            "fn_length self-test failed: expected\n"
            + "\n".join(expected)
            + "\ngot\n"
            + "\n".join(lines)
        )
        return 1
    print("fn_length self-test: the long functions found, the excused and the test ones left out")
    return 0


def main():
    args = sys.argv[1:]
    if args == ["--self-test"]:
        return self_test()
    ceiling = CEILING
    if args[:1] == ["--max"]:
        if len(args) < 2 or not args[1].isdigit():
            print("fn_length: --max needs a whole number of lines")
            return 2
        ceiling, args = int(args[1]), args[2:]
    root = Path(args[0]) if args else Path(__file__).resolve().parent.parent
    found = check(root, ceiling)
    if found:
        print(f"{found} function(s) over {ceiling} lines without a `// Long ...:` comment")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
