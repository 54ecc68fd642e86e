#!/usr/bin/env python3
"""Speed of capsim's engine against SimPy on the same model, measured in the same run.

M/M/4 at utilization 0.8: Poisson arrivals at 3200/s, 4 servers, exponential service with a
1 ms mean; every customer's wait is accumulated (the mean is printed as a sanity check against
Erlang C). Prints both rates in customers per second and their ratio, and the rate of a bare
binary-heap event loop of the same model (run by `mm4_rate`; see its source for what it leaves out).

    .venv/bin/python scripts/bench_vs_simpy.py [CAPSIM_CUSTOMERS] [SIMPY_CUSTOMERS] [ROUNDS]

Both run on one core, in alternation (capsim, then SimPy, ROUNDS times); the ratio reported is
the median of the rounds' ratios, which a shared machine's changes of speed affect least.
"""
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import simpy

ROOT = Path(__file__).resolve().parent.parent


def simpy_mm4(customers: int, seed: int) -> tuple[float, float]:
    """Runs M/M/4 in SimPy; returns (customers per second of wall time, mean wait in ms)."""
    rng = random.Random(seed)
    env = simpy.Environment()
    servers = simpy.Resource(env, capacity=4)
    waits = [0.0, 0]

    def customer(env):
        arrived = env.now
        with servers.request() as req:
            yield req
            waits[0] += env.now - arrived
            waits[1] += 1
            yield env.timeout(rng.expovariate(1000.0))

    def source(env):
        for _ in range(customers):
            yield env.timeout(rng.expovariate(3200.0))
            env.process(customer(env))

    env.process(source(env))
    start = time.perf_counter()
    env.run()
    elapsed = time.perf_counter() - start
    return customers / elapsed, waits[0] / waits[1] * 1e3


def main() -> None:
    capsim_n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    simpy_n = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    # One core for both, so the figures are one-core figures and neither competes with the other.
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    subprocess.run(
        ["cargo", "build", "--quiet", "--release", "-p", "capsim-sim", "--example", "mm4_rate"],
        cwd=ROOT, check=True,
    )
    binary = ROOT / "target" / "release" / "examples" / "mm4_rate"
    # Shared machines change speed from one second to the next, so the two are measured in
    # alternation and compared round by round; the median of the rounds' ratios is the result.
    capsim_rates, simpy_rates, ratios, bare_rates = [], [], [], []
    for r in range(rounds):
        out = subprocess.run([binary, str(capsim_n), "3"], check=True, capture_output=True,
                             text=True).stdout
        if r == 0:
            print(out.strip().splitlines()[0])
        capsim_rate = float(out.split("capsim_customers_per_s")[1].split()[0])
        bare_rates.append(float(out.split("bare_heap_customers_per_s")[1].split()[0]))
        simpy_rate, wait_ms = simpy_mm4(simpy_n, r)
        capsim_rates.append(capsim_rate)
        simpy_rates.append(simpy_rate)
        ratios.append(capsim_rate / simpy_rate)
        print(f"round {r + 1}: capsim {capsim_rate:.0f}/s, SimPy {simpy_rate:.0f}/s, "
              f"ratio {capsim_rate / simpy_rate:.1f}x")
    print(f"capsim M/M/4 rho 0.8: {capsim_n} customers, median {statistics.median(capsim_rates):.0f} "
          f"customers/s over {rounds} rounds (each the median of 3 runs)")
    print(f"SimPy {simpy.__version__} M/M/4 rho 0.8: {simpy_n} customers, median "
          f"{statistics.median(simpy_rates):.0f} customers/s over {rounds} rounds "
          f"(last mean wait {wait_ms:.4f} ms)")
    print(f"bare binary-heap event loop (crates/sim/benches/reference/bare_heap.rs), same model: "
          f"median {statistics.median(bare_rates):.0f} customers/s")
    print(f"ratio capsim / SimPy: median {statistics.median(ratios):.1f}x over {rounds} paired "
          f"rounds, min {min(ratios):.1f}x, max {max(ratios):.1f}x (target >= 100x)")


if __name__ == "__main__":
    main()
