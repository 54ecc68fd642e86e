#!/usr/bin/env python3
"""Checks the prepared GPU device call (scripts/device/run.sh) before it is made; CI runs it.

1. What the call carries fits the device tool's 64 MiB: the files git tracks and the untracked
   files it does not ignore (both travel with the working tree), a `shared/` folder in the
   checkout, and the carried paths (`CARRY`: the stripped `capsim` that scripts/device/pack.sh
   builds). A carried path not built yet counts as `UNBUILT_BINARY_ALLOWANCE_BYTES`, an upper
   bound from the binary as built (see there).
2. Nothing that runs on that machine reaches for a package registry or the network: it has
   PyTorch, no Rust, no registry and no way out. Every file of scripts/device/ except those that
   run here (`RUN_HERE`) is searched for the commands and calls of `DENYLIST`; each hit is named
   by file, line and reason.

It first runs its own self-test (a planted `pip install`, `curl` and model download must be
caught, and an oversized carry refused), so the check cannot pass by catching nothing.

    python3 scripts/device/check.py          # exit 0: fits and clean; 1: a finding
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import tempfile

LIMIT_BYTES = 64 << 20
# Paths scripts/device/pack.sh builds and the device call carries (its `carry` list).
CARRY = ["target/device"]
# The stripped release `capsim` (x86-64, Linux) measured 19.5 MiB on 2026-12-06; a carried
# path not yet built is counted at this bound, with room for the binary to grow.
UNBUILT_BINARY_ALLOWANCE_BYTES = 32 << 20
# Files of scripts/device/ that run on this machine, not on the device.
RUN_HERE = {"check.py", "pack.sh"}

DENYLIST = [
    (r"\bpip3?\s+(install|download)\b|-m\s+pip\s+(install|download)\b",
     "installs from a package registry, which that machine cannot reach"),
    (r"\b(uv|conda|mamba|micromamba|poetry|pipx)\s+(pip\s+)?(install|add|sync|create)\b",
     "installs from a package registry, which that machine cannot reach"),
    (r"\bapt(-get)?\s+(install|update)\b|\bnpm\s+(install|ci)\b",
     "installs system or npm packages from a registry, which that machine cannot reach"),
    (r"\bcargo\b|\brustup\b|\brustc\b",
     "needs Rust, which that machine does not have: carry the binary pack.sh builds"),
    (r"\bcurl\b|\bwget\b", "downloads from the network, which that machine cannot reach"),
    (r"\bgit\s+(clone|fetch|pull|submodule|lfs)\b",
     "fetches a repository, which that machine cannot reach"),
    (r"huggingface|from_pretrained|snapshot_download|hf_hub",
     "downloads a model from a hub: build random weights from the config's shapes"),
    (r"https?://(?!127\.0\.0\.1|localhost|\[::1\])",
     "names a remote address, which that machine cannot reach"),
]
# Network libraries are allowed only on a line that names the loopback address.
NETWORK_CALLS = r"\burllib\b|\brequests\.|\bhttp\.client\b|\bsocket\.|\baiohttp\b"
LOOPBACK = r"127\.0\.0\.1|localhost|::1"


def registry_findings(folder: pathlib.Path) -> list[str]:
    """`file:line: reason: the line` for every line of a device-side file that reaches out."""
    findings = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.name in RUN_HERE or "__pycache__" in path.parts:
            continue
        try:
            lines = path.read_text().splitlines()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(lines, 1):
            reasons = [why for pattern, why in DENYLIST if re.search(pattern, line, re.I)]
            if re.search(NETWORK_CALLS, line) and not re.search(LOOPBACK, line):
                reasons.append("uses the network beyond the loopback address")
            findings += [f"{path}:{number}: {why}: {line.strip()}" for why in reasons]
    return findings


def git_files(root: pathlib.Path, *args: str) -> list[pathlib.Path]:
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", *args],
                         capture_output=True, check=True).stdout
    return [root / name for name in out.decode().split("\0") if name]


def tree_bytes(path: pathlib.Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def carried_bytes(root: pathlib.Path, carry: list[str]) -> list[tuple[str, int]]:
    """(what, bytes) of everything the device call sends from the checkout at `root`."""
    tracked = git_files(root)
    untracked = git_files(root, "--others", "--exclude-standard")
    # A deleted but still tracked file does not travel; a link travels as a link.
    sizes = [("tracked files", sum(p.lstat().st_size for p in tracked if p.exists()))]
    sizes.append(("untracked, not ignored files",
                  sum(p.lstat().st_size for p in untracked if p.exists())))
    if (root / "shared").is_dir():
        sizes.append(("shared/", tree_bytes(root / "shared")))
    for path in carry:
        if (root / path).exists():
            sizes.append((f"{path} (carried)", tree_bytes(root / path)))
        else:
            sizes.append((f"{path} (carried; not built, counted at its allowance)",
                          UNBUILT_BINARY_ALLOWANCE_BYTES))
    return sizes


def size_finding(sizes: list[tuple[str, int]], limit: int) -> str | None:
    total = sum(b for _, b in sizes)
    if total <= limit:
        return None
    parts = ", ".join(f"{what} {b / 2**20:.1f} MiB" for what, b in sizes)
    return (f"the device call would carry {total / 2**20:.1f} MiB, over its "
            f"{limit / 2**20:.0f} MiB ({parts}): ignore or stop carrying the largest")


def self_test() -> tuple[int, list[str]]:
    """(cases run, failures) of the check on planted cases."""
    failures, cases = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        (folder / "bad.sh").write_text(
            "set -e\npython3 -m pip install onnxruntime-gpu\ncurl -LO https://example.org/x\n"
        )
        (folder / "bad.py").write_text(
            "from transformers import AutoModel\nAutoModel.from_pretrained('m')\n"
            "import urllib.request; urllib.request.urlopen('http://10.0.0.1/')\n"
        )
        (folder / "good.py").write_text(
            "import torch\nurl = 'http://127.0.0.1:8000/v1'  # urllib to 127.0.0.1 only\n"
        )
        (folder / "pack.sh").write_text("cargo build --release\n")  # runs here: not searched
        found = registry_findings(folder)
        for planted in ("bad.sh:2:", "bad.sh:3:", "bad.py:2:", "bad.py:3:"):
            cases += 1
            if not any(planted in f for f in found):
                failures.append(f"a planted line was not caught: {planted}")
        for clean in ("good.py", "pack.sh"):
            cases += 1
            if any(f"/{clean}:" in f for f in found):
                failures.append(f"{clean} was flagged: {found}")
    cases += 2
    if size_finding([("a", 40 << 20), ("b", 30 << 20)], LIMIT_BYTES) is None:
        failures.append("70 MiB was not refused against 64 MiB")
    if size_finding([("a", 40 << 20)], LIMIT_BYTES) is not None:
        failures.append("40 MiB was refused against 64 MiB")
    return cases, failures


def main() -> int:
    cases, failures = self_test()
    print(f"device check self-test: {cases - len(failures)} passed, {len(failures)} failed")
    for failure in failures:
        print(f"  self-test: {failure}", file=sys.stderr)
    if failures:
        return 1
    root = pathlib.Path(__file__).resolve().parents[2]
    findings = registry_findings(root / "scripts" / "device")
    sizes = carried_bytes(root, CARRY)
    too_big = size_finding(sizes, LIMIT_BYTES)
    for finding in findings:
        print(f"error: {finding}", file=sys.stderr)
    if too_big:
        print(f"error: {too_big}", file=sys.stderr)
    total = sum(b for _, b in sizes)
    print(f"device call carries {total / 2**20:.1f} MiB of {LIMIT_BYTES / 2**20:.0f} MiB: "
          + ", ".join(f"{what} {b / 2**20:.1f} MiB" for what, b in sizes))
    return 1 if findings or too_big else 0


if __name__ == "__main__":
    sys.exit(main())
