#!/usr/bin/env python3
"""The shipped classifier in a real Triton, run by run: `capsim validate --endpoint --server-trace`.

For each load and each repeat, this starts a fresh, traced Triton (scripts/triton.py) serving
traces/models/text_classifier.onnx with ONNX Runtime inside the Python backend, measures the
model through it (`capsim calibrate --endpoint`: closed-loop runs, Triton's own compute per batch
size, its time per request outside the model and the client's path: OUT/calibrate.txt,
OUT/calibrated.toml), runs `capsim validate --endpoint --server-trace` of the calibrated
scenario at that one load (a fraction of the calibrated capacity), and stops Triton. The
scenario is scenarios/bert-dynamic-batching.toml with one instance (one Triton). validate
replays the demo trace against it and simulates it three ways: "sim", the calibrated scenario
(a prediction calibrated on other runs: no timing of the compared run); "run-sim", its service
leveled to Triton's compute per batch size in the run; and "trace-sim", driven by Triton's own
trace of the run (its queue arrivals, its batches' times fitted as a + b * n + c * n * L, the
model instance's hand-over, the run's speed and stalls, the batcher's race:
`crates/endpoint/src/validation/triton/timeline.rs`), which leaves the queue and the batcher alone
to compare, whatever this machine was doing (a replay). With --profile, sim predicts from the
in-process CPU profile (traces/profiles/text_classifier.cpu.json) instead of a calibration, and
the loads are fractions of its capacity. This script only prints validate's figures as a row.

    cargo build --release
    .venv/bin/python scripts/classifier_check.py [--loads 0.3,0.6] [--repeats 3] [--out DIR]
    .venv/bin/python scripts/classifier_check.py --stored   # the stored runs' rows again

Prints one markdown row per run. Each run's files stay under --out.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import triton_check as tc  # noqa: E402

ROOT = tc.ROOT
SCENARIO = ROOT / "scenarios" / "bert-dynamic-batching.toml"
ONNX = ROOT / "traces" / "models" / "text_classifier.onnx"
PROFILE = ROOT / "traces" / "profiles" / "text_classifier.cpu.json"
TRACE = ROOT / "traces" / "demo.parquet"
MODEL = "text_classifier"


TRITON = ROOT / "scripts" / "triton.py"


def start_server(out: Path, traced: bool) -> Path:
    """A fresh Triton serving the classifier from `out` (traced at level TIMESTAMPS with
    `traced`), with the scenario at one instance (one Triton is one instance of the scenario)
    written to OUT/scenario.toml, whose path it returns. `TRITON stop --dir OUT` stops it."""
    out.mkdir(parents=True, exist_ok=True)
    text = SCENARIO.read_text()
    assert "\ninstances = 2\n" in text, f"{SCENARIO} no longer says instances = 2"
    scenario = out / "scenario.toml"
    scenario.write_text(text.replace("\ninstances = 2\n", "\ninstances = 1\n"))
    subprocess.run([sys.executable, str(TRITON), "start", "--model", "onnx", "--onnx", str(ONNX),
                    "--name", MODEL, "--scenario", str(scenario), "--dir", str(out),
                    *(["--trace"] if traced else [])],
                   check=True, stdout=subprocess.DEVNULL)
    return scenario


def run_once(out: Path, load: float, duration: str, calibrated: bool) -> None:
    """A fresh traced Triton; with `calibrated`, `capsim calibrate --endpoint` through it first;
    `capsim validate --endpoint` at one load; Triton stopped."""
    for stale in out.glob("trace.json*"):
        stale.unlink()
    scenario = start_server(out, traced=True)
    try:
        url = f"http://127.0.0.1:{json.loads((out / 'ports.json').read_text())['http']}"
        service = ["--profile", str(PROFILE)]
        if calibrated:
            with open(out / "calibrate.txt", "w") as log:
                subprocess.run([str(tc.CAPSIM), "calibrate", "--endpoint", url, "--model", MODEL,
                                "--scenario", str(scenario), "--trace", str(TRACE), "-o",
                                str(out / "calibrated.toml")],
                               check=True, stdout=log, stderr=subprocess.STDOUT)
            scenario, service = out / "calibrated.toml", []
        with open(out / "validate.txt", "w") as log:
            subprocess.run([str(tc.CAPSIM), "validate", "--endpoint", url, "--model", MODEL,
                            "--scenario", str(scenario), "--trace", str(TRACE), *service,
                            "--loads", str(load), "--duration", duration, "--server-trace",
                            "-o", str(out / "validate")],
                           check=True, stdout=log, stderr=subprocess.STDOUT)
    finally:
        subprocess.run([sys.executable, str(TRITON), "stop", "--dir", str(out)], check=True)


def run(out: Path, load: float, duration: str, calibrated: bool) -> None:
    """`run_once` until its Triton survives (`triton_check.until_alive`: traced Triton 2.51
    crashes now and then on this machine), each dead try's log and validate output kept."""
    tc.until_alive(out, lambda: run_once(out, load, duration, calibrated),
                   ["triton.log", "calibrate.txt", "validate.txt", "validate"])


def compare(out: Path, load: float) -> str:
    """A stored run's row: validate's own figures (`validation.json`), its trace-sim (the run's
    timeline, `crates/endpoint/src/validation/triton/timeline.rs`) and run-sim beside what was measured."""
    validation = json.loads((out / "validate" / "validation.json").read_text())
    v = validation["loads"][0]
    measured = v["measured"]["figures"]
    trace_sim, timeline = v.get("trace_sim"), v.get("server_timeline")
    if trace_sim is None or timeline is None:
        return f"| {out.name} | {load * 100:.0f}% | no trace-sim: {v.get('trace_sim_missing')} |"
    run_errors = (v.get("run_sim") or {}).get("errors") or {}
    sim_errors = v["sim"]["errors"]
    sim_gap = v["sim"]["worst_share_gap"]["points"]

    def pct(error) -> str:
        return f"{error * 100:+.1f}%" if error is not None else "–"

    def err(m: float, s: float) -> str:
        return f"{(s - m) / m * 100:+.1f}%" if m else "–"

    gap = (trace_sim.get("worst_share_gap") or {}).get("points", 0.0)
    t = timeline
    delay = v["measured"].get("schedule_delay_p99_ms")
    return (f"| {out.name} | {load * 100:.0f}% | {measured['e2e_p50_ms']:.2f} "
            f"| {pct(sim_errors['e2e_p50'])} "
            f"| {pct(trace_sim['errors']['e2e_p50'])} | {pct(run_errors.get('e2e_p50'))} "
            f"| {measured['e2e_p99_ms']:.2f} | {pct(sim_errors['e2e_p99'])} "
            f"| {pct(trace_sim['errors']['e2e_p99'])} "
            f"| {pct(run_errors.get('e2e_p99'))} | {sim_gap:.1f} "
            f"| {t['server_queue_p50_ms']:.2f} / {t['sim_queue_p50_ms']:.2f} "
            f"({err(t['server_queue_p50_ms'], t['sim_queue_p50_ms'])}) "
            f"| {t['server_queue_p99_ms']:.2f} / {t['sim_queue_p99_ms']:.2f} "
            f"({err(t['server_queue_p99_ms'], t['sim_queue_p99_ms'])}) | {gap:.1f} "
            f"| {t['stalls']} ({t['stall_ms']:.0f} ms) "
            f"| {t['fit_a_ms']:.2f} + {t['fit_b_ms']:.3f}·n + {t['fit_c_us']:.2f} us·n·L "
            f"+ {t['turnaround_us'] / 1e3:.3f} | {t['left_waiting']} "
            f"({t['left_waiting_ms']:.0f} ms) | {delay if delay is None else round(delay, 2)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", default="0.3,0.6")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--duration", default="20s")
    parser.add_argument("--out", default=str(ROOT / "output" / "classifier-check"))
    parser.add_argument("--profile", action="store_true",
                        help="sim predicts from the in-process CPU profile instead of a "
                             "calibration through the server (`capsim calibrate --endpoint`)")
    parser.add_argument("--stored", action="store_true",
                        help="no Triton: print the rows of the runs stored under --out again")
    args = parser.parse_args()
    sim = "sim (profile)" if args.profile else "sim (calibrated)"
    print(f"| run | load | e2e p50 ms measured | {sim} | trace-sim (the mean of its seeds) "
          f"| run-sim | e2e p99 ms measured | {sim} | trace-sim | run-sim "
          f"| worst share gap pp ({sim}) "
          "| queue p50 ms: Triton / trace-sim | queue p99 ms: Triton / trace-sim "
          "| worst share gap pp (trace-sim) | stalls > 3x | run's batch time fitted (ms) "
          "| left waiting for an arrival (their wait) | schedule delay p99 ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for repeat in range(1, args.repeats + 1):
        for load in (float(x) for x in args.loads.split(",")):
            out = Path(args.out) / f"run{repeat}-{load * 100:.0f}"
            if not args.stored:
                run(out, load, args.duration, not args.profile)
            print(compare(out, load), flush=True)


if __name__ == "__main__":
    main()
