#!/usr/bin/env python3
"""How steady is this machine? Runs one batch of a model back to back for a while and prints
the median run time of every second and of every 10-second window.

A calibration measures a model in a few seconds and a live replay runs for 10-20 s; where the
machine itself runs the same batch at different speeds from one window to the next (shared
virtual machines do), that spread bounds how closely any simulation driven by an earlier
calibration can match a live run. See docs/calibration.md, Accuracy.

    .venv/bin/python scripts/experiments/machine_drift.py [--model M.onnx] [--batch 8] [--length 32]
        [--seconds 60] [--cpu 1]
"""

import argparse
import time

import numpy as np

from cpu_session import batch_feed, open_session


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="traces/models/text_classifier.onnx")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--cpu", type=int, default=None, help="pin to this CPU (Linux)")
    args = parser.parse_args()
    session = open_session(args.model, args.cpu)
    feed = batch_feed(session, args.batch, args.length, np.random.default_rng(1))
    for _ in range(30):
        session.run(None, feed)

    starts, times_ms = [], []
    begin = time.perf_counter()
    while (now := time.perf_counter()) - begin < args.seconds:
        session.run(None, feed)
        starts.append(now - begin)
        times_ms.append((time.perf_counter() - now) * 1e3)
    starts, times_ms = np.array(starts), np.array(times_ms)

    def window(a, b):
        inside = (starts >= a) & (starts < b)
        return float(np.median(times_ms[inside])) if inside.any() else float("nan")

    seconds = int(args.seconds)
    per_second = [window(s, s + 1) for s in range(seconds)]
    per_ten = [window(s, s + 10) for s in range(0, seconds - 9, 10)]
    print(f"batch {args.batch}, length {args.length}: {len(times_ms)} runs in {args.seconds:.0f} s, "
          f"median {np.median(times_ms):.3f} ms")
    print("1 s medians, ms:", " ".join(f"{m:.2f}" for m in per_second))
    lo, hi = min(per_second), max(per_second)
    print(f"1 s medians range {lo:.3f}-{hi:.3f} ms ({hi / lo:.2f}x)")
    if per_ten:
        lo10, hi10 = min(per_ten), max(per_ten)
        print("10 s medians, ms:", " ".join(f"{m:.3f}" for m in per_ten))
        print(f"10 s medians range {lo10:.3f}-{hi10:.3f} ms ({hi10 / lo10:.2f}x): a live run "
              f"of 10 s can run this batch that much slower than another")


if __name__ == "__main__":
    main()
