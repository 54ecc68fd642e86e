#!/usr/bin/env python3
"""Payloads queued behind another in Triton's dynamic batcher: a fixed 27-request timeline,
replayed against a fresh traced Triton several times, each attempt's batches printed beside
capsim's.

One model instance of the fixed-time model (every batch 40 ms), `max_batch_size = 8`,
`preferred_batch_size = [4, 8]`, an 8 ms delay, prefetching on. Arrivals (ms): 0; eight at
10-17; eight at 20-27; 50, 55, 60, 65, 70; 90, 92, 94, 96, 98. Requests 1-8 fill a payload
that waits for the first batch, and 9-12 make a second payload of 4 behind it. When the first
is taken, Triton's `InstanceQueue::Dequeue` marks the payload of 4 executing while it checks
whether it can merge it, which freezes it at 4. Requests 13-16 form a new payload, and the two
merge at their take when they fit. On 2026-12-02 Triton 2.51 ran 1, 8, 8, 8, 2 in 30 of 37
attempts. In 6, request 17 (50 ms) was in the new payload, which then did not fit, and every
payload after was cut: 1, 8, 4, 5, 6, 3 or 1, 8, 4, 4, 5, 5. In 1 its first batch started late
and took two requests. capsim models the freeze: 1, 8, 8, 8, 2 here, and 1, 8, 4, 5, 4, 5 with
request 17 at 47 ms.

With `--steady GAP_MS` the timeline holds the queue at saturation instead: 0; eight at 10-17;
four at 20-23; then one request every GAP_MS ms from 30 to 600 ms. At a 40 ms batch and a gap
of 7-9 ms, 4-6 requests arrive per batch, fewer than a full one, and which payloads are cut at
each take decides every batch after. Each attempt is also simulated on its own timeline
(`on_its_timeline`). On 2026-12-02 at 7 ms capsim gave Triton's 16 batches exactly in 2 of 3
attempts; at 9 ms both ran the same cycle of cut payloads (5, 5, 5, 1, ...).

    cargo build --release
    .venv/bin/python scripts/triton_probe.py [--attempts 4] [--steady GAP_MS] [--out DIR]
"""
import argparse
import collections
import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

import triton_check as tc

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = """name = "probe"
[batcher]
max_batch_size = 8
preferred_batch_size = [4, 8]
max_queue_delay = "8ms"
[service]
kind = "affine"
a = "40ms"
b = "0ms"
"""
ARRIVALS_MS = [0, *range(10, 18), *range(20, 28), 50, 55, 60, 65, 70, 90, 92, 94, 96, 98]
STEADY_UNTIL_MS = 600


def steady_arrivals(gap_ms: float) -> list:
    """The saturation timeline (`--steady`): a payload of 8 and one of 4 queued behind the
    first batch, then one request every `gap_ms` from 30 ms to `STEADY_UNTIL_MS`."""
    count = int((STEADY_UNTIL_MS - 30) / gap_ms) + 1
    return [0, *range(10, 18), *range(20, 24), *(round(30 + k * gap_ms, 3) for k in range(count))]
MAP = "arrival=t:ms,input_tokens=i"


def batches_of(starts: dict) -> list:
    """[(start ms from the first, sorted request ids)] of {start: [ids]}."""
    t0 = min(starts)
    return [(round((s - t0) / 1e6, 1), sorted(ids)) for s, ids in sorted(starts.items())]


def simulated(out: Path, scenario: Path, trace: Path) -> list:
    tc.capsim("simulate", "--scenario", str(scenario), str(trace), "--map", MAP, "-o",
              str(out / "simulated"))
    sim = pq.read_table(out / "simulated" / "requests.parquet").to_pydict()
    starts = collections.defaultdict(list)
    for request, start in zip(sim["request"], sim["exec_start_ns"]):
        starts[start].append(request)
    return batches_of(starts)


def measured(out: Path, scenario: Path, trace: Path) -> list:
    """One attempt against a fresh traced Triton: its batches from its trace."""
    for stale in out.glob("trace.json*"):
        stale.unlink()
    triton = ROOT / "scripts" / "triton.py"
    subprocess.run([sys.executable, str(triton), "start", "--scenario", str(scenario), "--dir",
                    str(out), "--a", "40ms", "--b", "0ms", "--trace"], check=True,
                   stdout=subprocess.DEVNULL)
    try:
        port = json.loads((out / "ports.json").read_text())["http"]
        tc.capsim("replay", "--endpoint", f"http://127.0.0.1:{port}", "--model", "fixed",
                  "--scenario", str(scenario), "--trace", str(trace), "--map", MAP, "-o",
                  str(out / "measured"))
        time.sleep(0.3)
    finally:
        subprocess.run([sys.executable, str(triton), "stop", "--dir", str(out)], check=True)
    starts = collections.defaultdict(list)
    for r in tc.server_requests(out / "trace.json"):
        starts[r["COMPUTE_START"]].append(int(r["request_id"]))
    return batches_of(starts)


def on_its_timeline(attempt: Path) -> list:
    """capsim's batch sizes for one attempt on its own timeline: arrivals at Triton's queue
    start of each request, every batch the attempt's median compute, and its median turnaround
    between back-to-back batches as the release latency (this VM adds 1-2 ms to a 40 ms batch,
    and over a dozen batches that moves arrivals from one payload to the next)."""
    requests = tc.server_requests(attempt / "trace.json")
    t0 = requests[0]["QUEUE_START"]
    batches = sorted(tc.traced_batches(requests))
    compute_ms = sorted(e - s for s, e in batches)[len(batches) // 2] / 1e6
    gaps = sorted(b[0] - a[1] for a, b in zip(batches, batches[1:]))
    release_us = gaps[len(gaps) // 2] / 1e3 if gaps else 0.0
    scenario = attempt / "scenario-timeline.toml"
    scenario.write_text(SCENARIO.replace('a = "40ms"', f'a = "{compute_ms:.3f}ms"').replace(
        "[service]", f'release_latency = "{max(release_us, 0.0):.1f}us"\n[service]'))
    trace = attempt / "timeline-server.csv"
    trace.write_text("t,i\n" + "".join(f"{(r['QUEUE_START'] - t0) / 1e6:.4f},16\n"
                                        for r in requests))
    return [len(ids) for _, ids in simulated(attempt, scenario, trace)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=4)
    parser.add_argument("--steady", type=float, metavar="GAP_MS",
                        help="the saturation timeline, one request every GAP_MS after the first "
                             "13 (see above)")
    parser.add_argument("--out", default=str(ROOT / "output" / "triton-probe"))
    args = parser.parse_args()
    if args.steady is not None and args.steady <= 0:
        parser.error(f"--steady must be a positive gap in ms, found {args.steady}")
    arrivals = ARRIVALS_MS if args.steady is None else steady_arrivals(args.steady)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scenario, trace = out / "scenario.toml", out / "timeline.csv"
    scenario.write_text(SCENARIO)
    trace.write_text("t,i\n" + "".join(f"{t},16\n" for t in arrivals))
    expected = simulated(out, scenario, trace)
    print("capsim:", [len(ids) for _, ids in expected], expected)
    for attempt in range(args.attempts):
        got = measured(out / f"attempt-{attempt}", scenario, trace)
        same = [ids for _, ids in got] == [ids for _, ids in expected]
        print(f"Triton {attempt}:", [len(ids) for _, ids in got], "same" if same else got,
              flush=True)
        print(f"  capsim on attempt {attempt}'s own timeline:",
              on_its_timeline(out / f"attempt-{attempt}"), flush=True)


if __name__ == "__main__":
    main()
