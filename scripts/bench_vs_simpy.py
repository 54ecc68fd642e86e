#!/usr/bin/env python3
"""Speed of capsim's engine against SimPy on the same model, measured in the same run.

M/M/4 at utilization 0.8: Poisson arrivals at 3200/s, 4 servers, exponential service with a
1 ms mean; every customer's wait is accumulated (the mean is printed as a sanity check against
Erlang C). Prints both rates in customers per second and their ratio.

    .venv/bin/python scripts/bench_vs_simpy.py [CAPSIM_CUSTOMERS] [SIMPY_CUSTOMERS]
"""
import random
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
    out = subprocess.run(
        ["cargo", "run", "--quiet", "--release", "-p", "capsim-sim", "--example", "mm4_rate",
         "--", str(capsim_n), "5"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    print(out.strip().splitlines()[0])
    capsim_rate = float(out.split("capsim_customers_per_s")[1].split()[0])
    rates = []
    for seed in range(3):
        rate, wait_ms = simpy_mm4(simpy_n, seed)
        rates.append(rate)
    rates.sort()
    simpy_rate = rates[1]
    print(f"SimPy {simpy.__version__} M/M/4 rho 0.8: {simpy_n} customers, median {simpy_rate:.0f} "
          f"customers/s over 3 runs (mean wait {wait_ms:.4f} ms)")
    print(f"ratio capsim / SimPy: {capsim_rate / simpy_rate:.1f}x (target >= 100x)")


if __name__ == "__main__":
    main()
