#!/usr/bin/env python3
"""The load generator's speed: capsim against a Python asyncio (aiohttp) generator, same run.

Starts the minimal KServe server of `crates/endpoint/examples/kserve_echo.rs` (it answers at
once, so what is measured is the client), synthesizes a Poisson trace at RATE req/s for DURATION,
and sends it open loop twice, in alternation ROUNDS times: with `capsim replay --endpoint` and
with an aiohttp generator written the usual way (one task per request, sleeping until its
intended time, one keep-alive session of up to 256 connections). Prints each round's achieved rate and schedule delay
p99 (actual minus intended send time), and the medians and their ratio.

    cargo build --release && cargo build --release -p capsim-endpoint --example kserve_echo
    .venv/bin/python scripts/bench_endpoint.py [RATE] [DURATION_S] [ROUNDS]   # 10000 10 3
"""
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
CAPSIM = ROOT / "target" / "release" / "capsim"
ECHO = ROOT / "target" / "release" / "examples" / "kserve_echo"


def capsim_round(port: int, trace: Path, out: Path) -> tuple:
    subprocess.run([str(CAPSIM), "replay", "--endpoint", f"http://127.0.0.1:{port}", "--model",
                    "echo", "--trace", str(trace), "-o", str(out)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    load = json.loads((out / "summary.json").read_text())["load"]
    return load["achieved_rate_rps"], load["schedule_delay_p99_ms"]


async def aiohttp_generator(port: int, arrivals_s: list) -> tuple:
    url = f"http://127.0.0.1:{port}/v2/models/echo/infer"
    body = json.dumps({"inputs": [{"name": "input_ids", "shape": [1, 16], "datatype": "INT64",
                                   "data": list(range(16))}]})
    delays, sent = [], []
    connector = aiohttp.TCPConnector(limit=256)
    async with aiohttp.ClientSession(connector=connector) as session:
        loop = asyncio.get_running_loop()
        origin = loop.time() + 0.05

        async def one(at: float) -> None:
            await asyncio.sleep(max(0.0, origin + at - loop.time()))
            now = loop.time()
            delays.append(now - (origin + at))
            sent.append(now)
            async with session.post(url, data=body,
                                    headers={"Content-Type": "application/json"}) as r:
                await r.read()

        await asyncio.gather(*(one(a) for a in arrivals_s))
    span = max(sent) - min(sent)
    delays.sort()
    return (len(sent) - 1) / span, delays[int(0.99 * (len(delays) - 1))] * 1e3


def main() -> None:
    rate = float(sys.argv[1]) if len(sys.argv) > 1 else 10000.0
    duration = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    work = Path(tempfile.mkdtemp(prefix="bench-endpoint-"))
    trace = work / "trace.parquet"
    subprocess.run([str(CAPSIM), "trace", "synth", "--arrivals", "poisson", "--rate", str(rate),
                    "--duration", f"{duration}s", "--input-tokens", "const:16",
                    "--output-tokens", "none", "--seed", "1", "-o", str(trace)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import pyarrow.parquet as pq  # from the notebooks' requirements
    arrivals_s = [a * 1e-9 for a in pq.read_table(trace).column("arrival").to_pylist()]
    server = subprocess.Popen([str(ECHO)], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        results = {"capsim": [], "aiohttp": []}
        for r in range(rounds):
            order = ["capsim", "aiohttp"] if r % 2 == 0 else ["aiohttp", "capsim"]
            for name in order:
                if name == "capsim":
                    got = capsim_round(port, trace, work / f"capsim-{r}")
                else:
                    got = asyncio.run(aiohttp_generator(port, arrivals_s))
                results[name].append(got)
                print(f"round {r} {name}: achieved {got[0]:.0f} req/s, schedule delay p99 "
                      f"{got[1]:.3f} ms", flush=True)
        med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
               for k, v in results.items()}
        print(f"requested {rate:.0f} req/s for {duration:.0f} s, {len(arrivals_s)} requests")
        for k, (achieved, p99) in med.items():
            print(f"{k}: median achieved {achieved:.0f} req/s, schedule delay p99 {p99:.3f} ms")
        print(f"rate ratio capsim/aiohttp {med['capsim'][0] / med['aiohttp'][0]:.2f}; "
              f"schedule delay p99 ratio aiohttp/capsim {med['aiohttp'][1] / med['capsim'][1]:.1f}")
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
