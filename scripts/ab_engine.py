#!/usr/bin/env python3
"""Paired A/B of two builds of the engine: which is faster, by how much.

On a shared machine the speed of the same binary swings by tens of percent from one minute to
the next, so two builds timed one after the other compare phases, not code. This runs them in
alternation (A B, B A, ...) pinned to one core, one 1 M-customer run each, and reports each
build's median and best, and the median of the rounds' ratios B/A.

    cargo build --release -p capsim-sim --examples
    mkdir -p /tmp/a && cp target/release/examples/{mm4_rate,full_pipeline_rate} /tmp/a/
    # ... change the engine, build again, copy to /tmp/b ...
    python3 scripts/ab_engine.py 16 /tmp/a /tmp/b [SCENARIO.toml]

SCENARIO replaces the full-pipeline scenario of the second measurement.
"""
import os
import re
import statistics
import subprocess
import sys


def run(binary: str, args: list[str], pattern: str) -> float:
    out = subprocess.run([binary, "1000000", "1", *args], check=True, capture_output=True,
                         text=True).stdout
    return float(re.search(pattern, out).group(1))


def main() -> None:
    rounds = int(sys.argv[1])
    a, b = sys.argv[2], sys.argv[3]
    extra = sys.argv[4:5]
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    results = {d: {"mm4": [], "full": []} for d in (a, b)}
    for r in range(rounds):
        for d in (a, b) if r % 2 == 0 else (b, a):
            results[d]["mm4"].append(
                run(f"{d}/mm4_rate", [], r"median (\d+)") / 1e6)
            results[d]["full"].append(
                run(f"{d}/full_pipeline_rate", extra, r"median ([0-9.]+) s"))
    for key, unit, better in (("mm4", "M customers/s", max), ("full", "s", min)):
        for d in (a, b):
            v = results[d][key]
            print(f"{key} {d}: median {statistics.median(v):.3f} {unit}, best {better(v):.3f}")
        ratios = [y / x for x, y in zip(results[a][key], results[b][key])]
        print(f"{key}: median of paired ratios B/A {statistics.median(ratios):.3f} over {rounds} rounds")


if __name__ == "__main__":
    main()
