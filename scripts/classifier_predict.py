#!/usr/bin/env python3
"""The shipped classifier in a real Triton, predicted from a calibration through the server.

For each of --servers fresh, untraced Tritons (scripts/triton.py) serving
traces/models/text_classifier.onnx with ONNX Runtime inside the Python backend, this calibrates
the scenario through the server once (`capsim calibrate --endpoint`: OUT/sN/calibrate.txt,
OUT/sN/calibrated.toml), then runs `capsim validate --endpoint` of that calibrated scenario on
the same server: the demo trace (gamma arrivals, CV 2) at each load --repeats times, and a
Poisson trace of the demo's sizes and mean gap at each load once. Every figure of "sim" is a
prediction calibrated on other runs (the calibration's); none comes from the run compared.
The scenario is scenarios/bert-dynamic-batching.toml with one instance (one Triton).

    cargo build --release
    .venv/bin/python scripts/classifier_predict.py [--servers 3] [--loads 0.3,0.6] [--repeats 2]
    .venv/bin/python scripts/classifier_predict.py --stored   # the stored runs' table again

Prints one markdown row per run (end-to-end p50 and p99 measured and predicted, the worst
batch-share gap, whether the run meets every target: p50 within 10%, p99 within 20%, shares
within 5 points) and the counts. Each run's files stay under --out.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import classifier_check as cc  # noqa: E402
import triton_check as tc  # noqa: E402

ROOT = tc.ROOT
DEMO = cc.TRACE
MODEL = cc.MODEL
TARGETS = {"e2e_p50": 0.10, "e2e_p99": 0.20, "share_points": 5.0}


def poisson_trace(out: Path) -> Path:
    """The demo trace's sizes, in order, at Poisson arrivals of its mean gap (numpy seed 7)."""
    path = out / "poisson.parquet"
    demo = pq.read_table(DEMO)
    arrivals = demo.column("arrival").to_numpy()
    gaps = np.random.default_rng(7).exponential(np.diff(arrivals).mean(), demo.num_rows)
    pq.write_table(pa.table({
        "arrival": pa.array(np.cumsum(gaps).astype(np.int64), pa.int64()),
        "input_tokens": demo.column("input_tokens"),
    }), path)
    return path


def one_server(out: Path, loads: list, repeats: int, duration: str, poisson: Path) -> None:
    """A fresh Triton: calibrate once, validate every run on it, stop it."""
    scenario = cc.start_server(out, traced=False)
    try:
        url = f"http://127.0.0.1:{json.loads((out / 'ports.json').read_text())['http']}"
        with open(out / "calibrate.txt", "w") as log:
            subprocess.run([str(tc.CAPSIM), "calibrate", "--endpoint", url, "--model", MODEL,
                            "--scenario", str(scenario), "--trace", str(DEMO), "-o",
                            str(out / "calibrated.toml")],
                           check=True, stdout=log, stderr=subprocess.STDOUT)
        runs = [("demo", DEMO, load, k) for load in loads for k in range(repeats)]
        runs += [("poisson", poisson, load, 0) for load in loads]
        for name, trace, load, k in runs:
            label = f"{name}-{load:g}-{k + 1}"
            with open(out / f"{label}.txt", "w") as log:
                subprocess.run([str(tc.CAPSIM), "validate", "--endpoint", url, "--model", MODEL,
                                "--scenario", str(out / "calibrated.toml"), "--trace",
                                str(trace), "--loads", str(load), "--duration", duration,
                                "-o", str(out / label)],
                               check=True, stdout=log, stderr=subprocess.STDOUT)
    finally:
        subprocess.run([sys.executable, str(cc.TRITON), "stop", "--dir", str(out)], check=True)


def row(run: Path) -> tuple:
    """A stored run's markdown row and whether it meets every target."""
    v = json.loads((run / "validation.json").read_text())["loads"][0]
    measured, sim = v["measured"]["figures"], v["sim"]
    errors, gap = sim["errors"], sim["worst_share_gap"]["points"]
    meets = (abs(errors["e2e_p50"]) <= TARGETS["e2e_p50"]
             and abs(errors["e2e_p99"]) <= TARGETS["e2e_p99"]
             and gap <= TARGETS["share_points"])
    delay = v["measured"].get("schedule_delay_p99_ms")
    text = (f"| {run.parent.name} | {run.name} | {measured['e2e_p50_ms']:.2f} "
            f"| {errors['e2e_p50'] * 100:+.1f}% | {measured['e2e_p99_ms']:.2f} "
            f"| {errors['e2e_p99'] * 100:+.1f}% | {gap:.1f} "
            f"| {'–' if delay is None else f'{delay:.2f}'} | {'yes' if meets else 'no'} |")
    return text, meets, errors, gap


def table(out: Path) -> None:
    """Every stored run's row, then the counts."""
    print("| server | run | e2e p50 ms measured | sim | e2e p99 ms measured | sim "
          "| worst share gap pp | load generator's delay p99 ms | meets every target |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = [row(p.parent) for p in sorted(out.glob("s*/*/validation.json"))]
    for text, *_ in rows:
        print(text)
    n = len(rows)
    p50 = sum(abs(e["e2e_p50"]) <= TARGETS["e2e_p50"] for _, _, e, _ in rows)
    p99 = sum(abs(e["e2e_p99"]) <= TARGETS["e2e_p99"] for _, _, e, _ in rows)
    gaps = sum(g <= TARGETS["share_points"] for *_, g in rows)
    print(f"\n{sum(m for _, m, _, _ in rows)} of {n} runs meet every target; p50 within 10% in "
          f"{p50}, p99 within 20% in {p99}, shares within 5 points in {gaps}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=3)
    parser.add_argument("--loads", default="0.3,0.6")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--duration", default="20s")
    parser.add_argument("--out", default=str(ROOT / "output" / "classifier-predict"))
    parser.add_argument("--stored", action="store_true",
                        help="print the table of the runs stored under --out, run nothing")
    args = parser.parse_args()
    out = Path(args.out)
    if not args.stored:
        out.mkdir(parents=True, exist_ok=True)
        poisson = poisson_trace(out)
        loads = [float(x) for x in args.loads.split(",")]
        for k in range(args.servers):
            one_server(out / f"s{k + 1}", loads, args.repeats, args.duration, poisson)
    table(out)


if __name__ == "__main__":
    main()
