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

With `--drain N` it measures the hand-over between batches (one batch's compute end to the
next one's compute start) against the number of requests still queued, with nothing arriving:
every batch takes 20 ms, a request at 0 starts one, N more arrive during it (2-18 ms) and are
drained in batches of 8; the cycle repeats every `20 ms x (N / 8 + 3)`, 12 times an attempt.
Each attempt prints the mean and median hand-over by the number queued at the batch's end,
and a fit `c0 + c1 x size + c2 x queued past 8` (`--handovers-of RUN...` prints the same for
stored runs of `triton_check.py --trace`).

With `--backlog N --gap-us G` the same, with requests arriving: the setting of the Poisson
runs (`2 ms + 0.5 ms x n`, preferred 4 and 8, a 2 ms delay), N requests at 0 and then one every
G us for 3 s, so the queue is long while the burst drains and short after, at one arrival rate.

    cargo build --release
    .venv/bin/python scripts/experiments/triton_probe.py [--attempts 4] [--steady GAP_MS | --drain N |
        --backlog N --gap-us G] [--out DIR]
"""
import argparse
import collections
import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: triton_check
import triton_check as tc  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
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
DRAIN_BATCH_MS = 20.0
DRAIN_CYCLES = 12


def drain_arrivals(queued: int) -> list:
    """The drain timeline (`--drain`): per cycle, one request at its start and `queued` more
    spread over 2-18 ms, while the first one's batch computes; `DRAIN_CYCLES` cycles, each long
    enough for the queue to empty."""
    cycle_ms = DRAIN_BATCH_MS * (queued // 8 + 3)
    spread = [round(2 + 16 * k / max(queued - 1, 1), 3) for k in range(queued)]
    return [c * cycle_ms + t for c in range(DRAIN_CYCLES) for t in [0, *spread]]


BACKLOG_SECONDS = 3.0
HANDOVER_BUCKETS = [(0, 8), (8, 16), (16, 24), (24, 32), (32, 64), (64, 10**9)]


def backlog_arrivals(queued: int, gap_us: float) -> list:
    """The backlog timeline (`--backlog`): `queued` requests at 0 ms, then one every `gap_us`
    from 0.5 ms to `BACKLOG_SECONDS`."""
    count = int((BACKLOG_SECONDS * 1e6 - 500) / gap_us)
    return [0.0] * queued + [round(0.5 + k * gap_us / 1e3, 4) for k in range(count)]


def handovers(requests: list) -> list:
    """Each back-to-back hand-over under 1 ms of a traced run of one model instance: a batch's
    compute end to the next compute start, with that batch's requests all queued before the end
    (longer ones are the machine's stalls, which timeline-sim replays apart; with more model
    instances, consecutive batches are different instances'). Each as (requests queued at the
    end and not yet computing, the next batch's among them; the size of the batch that ended;
    the hand-over in us)."""
    import bisect
    batches = sorted(tc.traced_batches(requests).items())
    queued = sorted(r["QUEUE_START"] for r in requests)
    starts = sorted(r["COMPUTE_START"] for r in requests)
    found = []
    for ((_, end), ended), ((start, _), members) in zip(batches, batches[1:]):
        if max(r["QUEUE_START"] for r in members) >= end or start - end >= tc.STALL_NS:
            continue
        waiting = bisect.bisect_right(queued, end) - bisect.bisect_left(starts, end)
        found.append((waiting, len(ended), (start - end) / 1e3))
    return found


def handover_growth(found: list, past: int = 8) -> tuple | None:
    """The least-squares fit `c0 + c1 x size + c2 x max(0, queued - past)` of `handovers`, in
    us: (c0, c1, c2, the standard error of c2 over 200 bootstrap resamples, seed 0), or None
    with fewer than 10 hand-overs or none with more than `past` queued."""
    import numpy as np
    x = np.array([[1.0, size, max(0, waiting - past)] for waiting, size, _ in found])
    y = np.array([us for _, _, us in found])
    if len(y) < 10 or not (x[:, 2] > 0).any():
        return None
    fit = np.linalg.lstsq(x, y, rcond=None)[0]
    rng = np.random.default_rng(0)
    draws = []
    for _ in range(200):
        pick = rng.integers(0, len(y), len(y))
        draws.append(np.linalg.lstsq(x[pick], y[pick], rcond=None)[0][2])
    return (*fit, float(np.std(draws)))


def print_handovers(label: str, found: list, buckets: list) -> None:
    """`handovers` by `buckets` of the number queued ([lo, hi) pairs, empty ones left out):
    mean / median (count), and `handover_growth`."""
    print(f"{label}: hand-over us by requests queued, mean / median (count):", flush=True)
    for lo, hi in buckets:
        values = sorted(us for waiting, _, us in found if lo <= waiting < hi)
        if values:
            name = f"{lo}" if hi == lo + 1 else f"{lo}-{hi - 1}" if hi < 10**9 else f"{lo}+"
            print(f"  {name:>6}: {sum(values) / len(values):7.1f} / "
                  f"{values[len(values) // 2]:7.1f} ({len(values)})", flush=True)
    growth = handover_growth(found)
    if growth:
        print(f"  fit: {growth[0]:.0f} + {growth[1]:.1f} x size + {growth[2]:.2f} (+-{growth[3]:.2f})"
              " x queued past 8", flush=True)


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


def measured(out: Path, scenario: Path, trace: Path, a: str = "40ms", b: str = "0ms") -> list:
    """One attempt against a fresh traced Triton (every batch `a + b x size`): its batches
    from its trace."""
    for stale in out.glob("trace.json*"):
        stale.unlink()
    triton = ROOT / "scripts" / "triton.py"
    subprocess.run([sys.executable, str(triton), "start", "--scenario", str(scenario), "--dir",
                    str(out), "--a", a, "--b", b, "--trace"], check=True,
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
    parser.add_argument("--drain", type=int, metavar="N",
                        help="the hand-over against the queue: N requests drained in batches "
                             "of 8, nothing arriving (see above)")
    parser.add_argument("--backlog", type=int, metavar="N",
                        help="the hand-over against the queue with requests arriving: N at 0, "
                             "then one every --gap-us (see above)")
    parser.add_argument("--gap-us", type=float, metavar="G")
    parser.add_argument("--handovers-of", nargs="+", metavar="RUN",
                        help="only print the hand-overs of stored traced runs of one model "
                             "instance (directories with Triton's trace.json*, as "
                             "triton_check.py --trace writes them)")
    parser.add_argument("--out", default=str(ROOT / "output" / "triton-probe"))
    args = parser.parse_args()
    if args.steady is not None and args.steady <= 0:
        parser.error(f"--steady must be a positive gap in ms, found {args.steady}")
    if args.handovers_of:
        for run in args.handovers_of:
            print_handovers(run, handovers(tc.server_requests(Path(run) / "trace.json")),
                            HANDOVER_BUCKETS)
        return
    if args.drain is not None:
        if args.steady is not None or not 8 <= args.drain <= 512:
            parser.error("--drain takes 8 to 512 requests and no --steady")
        drain(Path(args.out), args.drain, args.attempts)
        return
    if args.backlog is not None:
        if args.gap_us is None or args.gap_us < 100 or not 0 <= args.backlog <= 4096:
            parser.error("--backlog takes 0 to 4096 requests and --gap-us of 100 or more")
        backlog(Path(args.out), args.backlog, args.gap_us, args.attempts)
        return
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


def drain(out: Path, queued: int, attempts: int) -> None:
    """`--drain`: each attempt's hand-overs by the number queued at the batch's end."""
    scenario = SCENARIO.replace('a = "40ms"', f'a = "{DRAIN_BATCH_MS}ms"')
    handover_attempts(out, scenario, drain_arrivals(queued), attempts, f"{DRAIN_BATCH_MS}ms",
                      "0ms", [(k, k + 1) for k in range(queued + 2)])


def backlog(out: Path, queued: int, gap_us: float, attempts: int) -> None:
    """`--backlog`: the Poisson runs' setting; hand-overs by the number queued."""
    scenario = SCENARIO.replace('"8ms"', '"2ms"').replace('a = "40ms"', 'a = "2ms"').replace(
        'b = "0ms"', 'b = "0.5ms"')
    handover_attempts(out, scenario, backlog_arrivals(queued, gap_us), attempts, "2ms", "0.5ms",
                      HANDOVER_BUCKETS)


def handover_attempts(out: Path, scenario_text: str, arrivals: list, attempts: int, a: str,
                      b: str, buckets: list) -> None:
    """Each attempt's hand-overs (`print_handovers`) by `buckets` of the number queued."""
    out.mkdir(parents=True, exist_ok=True)
    scenario, trace = out / "scenario.toml", out / "timeline.csv"
    scenario.write_text(scenario_text)
    trace.write_text("t,i\n" + "".join(f"{t},16\n" for t in arrivals))
    for attempt in range(attempts):
        measured(out / f"attempt-{attempt}", scenario, trace, a, b)
        print_handovers(f"Triton {attempt}", handovers(tc.server_requests(
            out / f"attempt-{attempt}" / "trace.json")), buckets)


if __name__ == "__main__":
    main()
