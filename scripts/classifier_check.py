#!/usr/bin/env python3
"""The shipped classifier in a real Triton, run by run: `capsim validate --endpoint` and timeline-sim.

For each load (a fraction of the scenario's simulated capacity, as `validate` computes it) and
each repeat, this starts a fresh, traced Triton (scripts/triton.py) serving
traces/models/text_classifier.onnx with ONNX Runtime inside the Python backend, runs
`capsim validate --endpoint` at that one load (it replays the demo trace and prints its own
"sim", driven by the CPU profile, and "run-sim", the profile leveled to Triton's compute per
batch size), and stops Triton. Then it simulates the run a third way, timeline-sim
(`triton_check.timeline_sim`): arrivals at Triton's own queue start of each request; batch times
from the run itself, its traced batches fitted as a + b * n + c * n * L (n requests padded to
the longest, L tokens), after the model instance's turnaround between batches as the dispatch
and release latencies (`batcher.dispatch_latency`, `release_latency`: `triton_check.handover`);
and the run's
speed, each batch's measured over fitted time, as `execution.slowdowns`. That leaves the queue
and the batcher alone to compare, whatever this machine was doing.

    cargo build --release
    .venv/bin/python scripts/classifier_check.py [--loads 0.3,0.6] [--repeats 3] [--out DIR]
    .venv/bin/python scripts/classifier_check.py --resimulate   # the stored runs again

Prints one markdown row per run. Each run's files stay under --out.
"""
import argparse
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import triton_check as tc  # noqa: E402
import triton as triton_server  # noqa: E402

ROOT = tc.ROOT
SCENARIO = ROOT / "scenarios" / "bert-dynamic-batching.toml"
ONNX = ROOT / "traces" / "models" / "text_classifier.onnx"
PROFILE = ROOT / "traces" / "profiles" / "text_classifier.cpu.json"
TRACE = ROOT / "traces" / "demo.parquet"
MODEL = "text_classifier"
MAX_LENGTH = 512


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return repr(v)


def timeline_scenario(fit: dict, windows: list, thread_first: float) -> tuple:
    """The scenario's queue and batcher, one server of its model instances, the run's fitted
    batch times; and the run's replay inputs (`capsim simulate --replay-inputs`): its
    dispatch spread and hand-over per request, the run's speed, the batcher thread first at
    `thread_first` of batch ends. Returns (scenario text, replay-inputs text), as
    `triton_check.scenario_toml` does."""
    s = tomllib.loads(SCENARIO.read_text())
    lines = ['name = "classifier-timeline"', "instances = 1",
             f"max_input_tokens = {s.get('max_input_tokens', MAX_LENGTH)}"]
    replay = []
    for table in ("queue", "batcher"):
        lines.append(f"[{table}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in s.get(table, {}).items()]
    if fit.get("dispatch_ms", 0.0) > 0:
        lines.append(f'dispatch_latency = "{fit["dispatch_ms"] * 1e3:.1f}us"')
        if fit.get("dispatch_residuals"):
            replay.append(tc.ratios_toml("dispatch_residuals", fit["dispatch_residuals"]))
    if fit.get("release_ms", 0.0) > 0:
        lines.append(f'release_latency = "{fit["release_ms"] * 1e3:.1f}us"')
    if fit.get("release_per_request_ms", 0.0) > 0:
        replay.append(
            f'release_latency_per_request = "{fit["release_per_request_ms"] * 1e3:.1f}us"')
    if thread_first > 0:
        replay.append(f"thread_first_fraction = {thread_first:.4f}")
    lines += ["[execution]",
              f"instance_count = {s.get('execution', {}).get('instance_count', 1)}"]
    replay += tc.slowdowns_toml(windows)
    lines += ["[service]", 'kind = "affine"', f'a = "{fit["a_ms"]:.6f}ms"',
              f'b = "{fit["b_ms"]:.6f}ms"', f'c = "{fit["c_ms"]:.8f}ms"']
    return "\n".join(lines) + "\n", "\n".join(replay) + "\n"


def fit_batches(batches: list) -> dict:
    """Least squares of each traced batch's compute time on 1, n and n * L (ms), refitted twice
    without the batches more than 1.5 times their fit (the machine's stalls, which
    `execution.slowdowns` carries instead); a coefficient that comes out negative is dropped."""
    n = np.array([b[0] for b in batches], float)
    length = np.array([b[1] for b in batches], float)
    y = np.array([b[2] for b in batches], float)
    keep = np.ones(len(y), bool)
    terms = [0, 1, 2]
    coef = np.zeros(3)
    for _ in range(3):
        x = np.stack([np.ones_like(n), n, n * length], axis=1)
        while True:
            solved, *_ = np.linalg.lstsq(x[keep][:, terms], y[keep], rcond=None)
            if (solved >= 0).all() or len(terms) == 1:
                break
            terms = [t for t, c in zip(terms, solved) if c >= 0] or [0]
        coef = np.zeros(3)
        coef[terms] = np.maximum(solved, 0)
        keep = y <= 1.5 * (x @ coef)
    return {"a_ms": coef[0], "b_ms": coef[1], "c_ms": coef[2], "batches": len(y),
            "kept": int(keep.sum())}


def run_once(out: Path, load: float, duration: str) -> None:
    """A fresh traced Triton, `capsim validate --endpoint` at one load, Triton stopped."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("trace.json*"):
        stale.unlink()
    triton = ROOT / "scripts" / "triton.py"
    subprocess.run([sys.executable, str(triton), "start", "--model", "onnx", "--onnx", str(ONNX),
                    "--name", MODEL, "--scenario", str(SCENARIO), "--dir", str(out), "--trace"],
                   check=True, stdout=subprocess.DEVNULL)
    try:
        port = json.loads((out / "ports.json").read_text())["http"]
        with open(out / "validate.txt", "w") as log:
            subprocess.run([str(tc.CAPSIM), "validate", "--endpoint", f"http://127.0.0.1:{port}",
                            "--model", MODEL, "--scenario", str(SCENARIO), "--set", "instances=1",
                            "--trace", str(TRACE), "--profile", str(PROFILE), "--loads",
                            str(load), "--duration", duration, "--server-trace",
                            "-o", str(out / "validate")],
                           check=True, stdout=log, stderr=subprocess.STDOUT)
        (out / "triton_stats.json").write_text(
            json.dumps({"model_stats": [triton_server.stats_since_ready(out, MODEL)]}))
    finally:
        subprocess.run([sys.executable, str(triton), "stop", "--dir", str(out)], check=True)


def run(out: Path, load: float, duration: str) -> None:
    """`run_once` until its Triton survives (`triton_check.until_alive`: traced Triton 2.51
    crashes now and then on this machine), each dead try's log and validate output kept."""
    tc.until_alive(out, lambda: run_once(out, load, duration),
                   ["triton.log", "validate.txt", "validate"])


def compare(out: Path, load: float) -> str:
    """timeline-sim of a stored run, and its row beside validate's own figures."""
    measured = pq.read_table(out / "validate" / f"load-{load * 100:.0f}" /
                             "measured.parquet").to_pydict()
    tokens = {r: min(max(t, 1), MAX_LENGTH)
              for r, t in zip(measured["request"], measured["input_tokens"])}
    latency = {r: ns for r, ns, o in zip(measured["request"], measured["latency_ns"],
                                         measured["outcome"]) if o == "completed"}
    requests = [r for r in tc.server_requests(out / "trace.json")
                if int(r["request_id"]) in tokens]
    batches = [(len(m), max(tokens[int(r["request_id"])] for r in m), (end - start) / 1e6)
               for (start, end), m in tc.traced_batches(requests).items()]
    fit = fit_batches(batches)
    batcher = tomllib.loads(SCENARIO.read_text()).get("batcher", {})
    readiness = tc.setting_readiness({"delay": batcher.get("max_queue_delay", "0ms"),
                                      "preferred": batcher.get("preferred_batch_size", []),
                                      "max_batch_size": batcher.get("max_batch_size", 1)})
    timings = tc.request_timings(requests, 1, readiness)
    fit["turnaround_ms"] = timings["turnaround_ms"]
    # The scenario's queue policy turns Triton's prefetching off.
    fit["dispatch_ms"], fit["release_ms"], fit["release_per_request_ms"] = tc.handover(
        timings, prefetch=False)
    fit["dispatch_residuals"] = tc.dispatch_residuals(timings)
    (out / "timeline-fit.json").write_text(json.dumps(fit, indent=1))

    def nominal(members: list) -> float:
        longest = max(tokens[int(r["request_id"])] for r in members)
        return fit["a_ms"] + fit["b_ms"] * len(members) + fit["c_ms"] * len(members) * longest

    result = tc.timeline_sim(out, requests, tokens, latency, nominal,
                             lambda windows, first: timeline_scenario(fit, windows, first),
                             readiness, fit["turnaround_ms"] * 1e6, 1, fit["dispatch_ms"] * 1e6,
                             batcher.get("max_batch_size", 1))
    validation = json.loads((out / "validate" / "validation.json").read_text())
    v = validation["loads"][0]
    run_errors = (v.get("run_sim") or {}).get("errors") or {}

    def pct(error) -> str:
        return f"{error * 100:+.1f}%" if error is not None else "–"

    def err(m: float, s: float) -> str:
        return f"{(s - m) / m * 100:+.1f}%" if m else "–"

    q, e = result["queue"], result["e2e"]
    stats = json.loads((out / "triton_stats.json").read_text())["model_stats"][0]
    t_sh = tc.shares({b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]})
    # The shares the model predicts: the mean over seeds of the batcher's race.
    keys = set(t_sh) | set(result["mean_shares"])
    gap = max(abs(t_sh.get(k, 0) - result["mean_shares"].get(k, 0)) for k in keys) * 100
    delay = v["measured"].get("schedule_delay_p99_ms")
    return (f"| {out.name} | {load * 100:.0f}% | {e[0]:.2f} | {err(e[0], e[1])} "
            f"| {pct(run_errors.get('e2e_p50'))} | {e[2]:.2f} "
            f"| {err(e[2], e[3])} | {pct(run_errors.get('e2e_p99'))} "
            f"| {q[0]:.2f} / {q[1]:.2f} ({err(q[0], q[1])}) | {q[2]:.2f} / {q[3]:.2f} "
            f"({err(q[2], q[3])}) | {gap:.1f} | {result['stalls']} ({result['stall_ms']:.0f} ms) "
            f"| {fit['a_ms']:.2f} + {fit['b_ms']:.3f}·n + {fit['c_ms'] * 1000:.2f} us·n·L "
            f"+ {fit['turnaround_ms']:.3f} | {timings['left_waiting']} "
            f"({timings['left_waiting_ms']:.0f} ms) | {delay if delay is None else round(delay, 2)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", default="0.3,0.6")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--duration", default="20s")
    parser.add_argument("--out", default=str(ROOT / "output" / "classifier-check"))
    parser.add_argument("--resimulate", action="store_true",
                        help="no Triton: simulate the runs stored under --out again")
    args = parser.parse_args()
    print("| run | load | e2e p50 ms measured | timeline-sim (its figures: the mean of "
          f"{tc.SEEDS} seeds) | validate's run-sim "
          "| e2e p99 ms measured | timeline-sim | validate's run-sim "
          "| queue p50 ms: Triton / timeline-sim | queue p99 ms: Triton / timeline-sim "
          "| worst share gap pp (timeline-sim, mean of 8 seeds) | stalls > 3x | run's batch time fitted (ms) "
          "| left waiting for an arrival (their wait) | schedule delay p99 ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for repeat in range(1, args.repeats + 1):
        for load in (float(x) for x in args.loads.split(",")):
            out = Path(args.out) / f"run{repeat}-{load * 100:.0f}"
            if not args.resimulate:
                run(out, load, args.duration)
            print(compare(out, load), flush=True)


if __name__ == "__main__":
    main()
