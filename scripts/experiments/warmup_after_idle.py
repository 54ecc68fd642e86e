#!/usr/bin/env python3
"""How long does a model stay slow after an idle wait? Times, run by run, the runs that follow a
sleep, against the same batch in steady back-to-back work.

The profile's idle slowdown charges the extra time of a wait to the first batch after it; on
shared virtual machines the runs after it stay slow for milliseconds of work (see
docs/calibration.md, Accuracy). Each round works `--warm-ms` back to back, sleeps `--sleep-ms`,
then times `--runs` runs one by one; the medians per position over the rounds are printed with
the work done before each run.

    .venv/bin/python scripts/experiments/warmup_after_idle.py [--model M.onnx] [--shapes 1x64,2x64,8x64]
        [--sleep-ms 4] [--runs 8] [--rounds 60] [--warm-ms 20] [--cpu 1]
"""

import argparse
import time

import numpy as np

from cpu_session import batch_feed, open_session


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="traces/models/text_classifier.onnx")
    parser.add_argument("--shapes", default="1x64,2x64,8x64", help="BATCHxLENGTH,...")
    parser.add_argument("--sleep-ms", type=float, default=4.0)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--warm-ms", type=float, default=20.0)
    parser.add_argument("--cpu", type=int, default=None, help="pin to this CPU (Linux)")
    args = parser.parse_args()
    session = open_session(args.model, args.cpu)
    rng = np.random.default_rng(1)

    for text in args.shapes.split(","):
        batch, length = (int(v) for v in text.split("x"))
        feed = batch_feed(session, batch, length, rng)

        def run():
            start = time.perf_counter_ns()
            session.run(None, feed)
            return time.perf_counter_ns() - start

        for _ in range(30):
            run()
        after = np.empty((args.rounds, args.runs))
        steady = []
        for r in range(args.rounds):
            worked = 0
            while worked < args.warm_ms * 1e6:
                t = run()
                worked += t
                steady.append(t)
            time.sleep(args.sleep_ms / 1e3)
            after[r] = [run() for _ in range(args.runs)]
        medians_us = np.median(after, axis=0) / 1e3
        steady_us = float(np.median(steady)) / 1e3
        work_ms = np.concatenate([[0.0], np.cumsum(medians_us)[:-1] / 1e3])
        print(f"batch {batch}, length {length}: steady {steady_us:.0f} us; "
              f"after a {args.sleep_ms:g} ms sleep, run by run:")
        for k, (m, w) in enumerate(zip(medians_us, work_ms), start=1):
            print(f"  run {k}: {m:.0f} us ({m / steady_us - 1:+.0%}), after {w:.1f} ms of work")


if __name__ == "__main__":
    main()
