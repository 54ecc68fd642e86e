#!/usr/bin/env python3
"""capsim's queue and dynamic batcher against a real Triton on 127.0.0.1, with a fixed-time model.

For each batcher setting this writes a scenario whose batches take the fixed model's nominal
a + b * batch_size, and for each load starts a fresh Triton (scripts/triton.py; tracing every
request with --trace) whose one model sleeps exactly that long, calibrates the scenario through
it, runs `capsim validate --endpoint` at that one load (a fraction of the calibrated scenario's
capacity, as validate computes it), and stops Triton. validate replays a Poisson trace against it and simulates the same trace
up to three ways (docs/validation.md):

- "sim": the scenario calibrated through the server before the run (`capsim calibrate
  --endpoint`: closed-loop runs, Triton's compute per batch size fitted as a + b * size and its
  time per request outside the model; a prediction calibrated on other runs), or with
  --nominal the scenario alone (a prediction from the model's nominal times, without Triton's
  own costs around the model);
- "run-sim": the scenario's times leveled to Triton's compute per batch size over the run
  (replayed: its speed comes from the run);
- with --trace, "trace-sim": driven by Triton's trace of the run, its arrivals at Triton's
  queue, its batches' times, hand-over and stalls (replayed;
  crates/endpoint/src/validation/triton/timeline.rs), which leaves the queue and the batcher
  alone to compare.

This script only starts and stops the servers and prints validate's figures
(`validation.json`), one markdown row per run.

    scripts/triton.py install                # once
    cargo build --release
    .venv/bin/python scripts/triton_check.py --trace [--duration 15s] [--out output/triton-check]
    .venv/bin/python scripts/triton_check.py --trace --settings 2 --loads 0.85 --repeats 5
    .venv/bin/python scripts/triton_check.py --stored   # the stored runs' rows again

Needs two free cores' worth of quiet: the server, its Python backend and the load generator share
the machine. Each run's files stay under --out.
"""
import argparse
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAPSIM = ROOT / "target" / "release" / "capsim"
A_MS, B_MS = 2.0, 0.5

SETTINGS = {
    "no batching": dict(max_batch_size=1, preferred=[], delay="0ms", instances=1),
    "max 8, no delay": dict(max_batch_size=8, preferred=[], delay="0ms", instances=1),
    "max 8, preferred 4 and 8, 2 ms": dict(max_batch_size=8, preferred=[4, 8], delay="2ms",
                                           instances=1),
    # Ten times slower: at 2 ms + 0.5 ms x n two model instances serve 3,556 requests a second,
    # more than this 2-core machine can send, serve over HTTP and trace at once (the load
    # generator fell 1.3-2.7 ms behind its schedule at 930-2,750 requests a second, and Triton's
    # trace writer crashed).
    "max 32, 5 ms, 2 instances": dict(max_batch_size=32, preferred=[], delay="5ms", instances=2,
                                      a_ms=20.0, b_ms=5.0),
}
LOADS = [0.3, 0.6, 0.85]
# `taskset` prefixes of the server and of capsim (the load generator), set by --pin.
SERVER_CPUS = ""
CLIENT_CPUS: list = []


def model_times(setting: dict) -> dict:
    """The fixed-time model's nominal a and b (ms) for a setting."""
    return {"a_ms": setting.get("a_ms", A_MS), "b_ms": setting.get("b_ms", B_MS)}


def scenario_toml(name: str, s: dict) -> str:
    """The setting as a capsim scenario whose batches take the model's nominal a + b * size."""
    times = model_times(s)
    lines = [f'name = "{name}"', "instances = 1", "[batcher]",
             f"max_batch_size = {s['max_batch_size']}", f'max_queue_delay = "{s["delay"]}"']
    if s["preferred"]:
        lines.append(f"preferred_batch_size = {s['preferred']}")
    lines += ["[execution]", f"instance_count = {s['instances']}",
              "[service]", 'kind = "affine"', f'a = "{times["a_ms"]:.4f}ms"',
              f'b = "{times["b_ms"]:.4f}ms"']
    return "\n".join(lines) + "\n"


def triton_died(out: Path) -> bool:
    """Whether the Triton of `out` died under its own weight: a signal in its log, or its
    Python backend's stub reporting that the server went away. Traced Triton 2.51 does so
    now and then on this machine (SIGSEGV in its trace writer)."""
    log = out / "triton.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    # SIGTERM (15) is the stop at the end of every run.
    return (re.search(r"Signal \((?!15\))", text) is not None
            or "Non-graceful termination" in text)


class TritonDied(RuntimeError):
    """A Triton died in every try `until_alive` gave it."""


def until_alive(out: Path, once, kept_names: list, tries: int = 5):
    """`once()` (which starts a Triton in `out`, uses it and stops it), again against a fresh
    Triton when the last one died (`triton_died`), at most `tries` times; returns what the
    surviving try returned. Each failed try's files named in `kept_names` are kept under
    OUT/crashed-N. A Triton that caught a signal but went on answering (or hung, its requests
    timing out) counts as dead."""
    for attempt in range(1, tries + 1):
        try:
            result = once()
            if not triton_died(out):
                return result
            if attempt == tries:
                raise TritonDied(f"Triton died in every one of {tries} tries; see {out}")
            error: Exception = RuntimeError("a signal in its log")
        except (subprocess.CalledProcessError, OSError) as failure:
            if not triton_died(out):
                raise
            if attempt == tries:
                raise TritonDied(f"Triton died in every one of {tries} tries; see {out}") \
                    from failure
            error = failure
        # A folder of its own: an earlier run in `out` may have kept crashed-1, ...
        kept = next(out / f"crashed-{n}" for n in itertools.count(1)
                    if not (out / f"crashed-{n}").exists())
        kept.mkdir()
        for name in kept_names:
            if (out / name).exists():
                (out / name).rename(kept / name)
        print(f"{out.name}: Triton died ({error}); trying again, its files in {kept}",
              file=sys.stderr, flush=True)
    raise AssertionError("unreachable: the last try returns or raises")


def validate_once(out: Path, label: str, setting: dict, load: float, duration: str,
                  traced: bool, calibrated: bool) -> None:
    """A fresh Triton for the setting; with `calibrated`, `capsim calibrate --endpoint` first
    (closed-loop runs through it: its printout in OUT/calibrate.txt, the scenario it fits in
    OUT/calibrated.toml); then `capsim validate --endpoint` of that scenario at one load (its
    printout in OUT/validate.txt, its files in OUT/validate); Triton stopped."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("trace.json*"):
        stale.unlink()
    scenario = out / "scenario.toml"
    scenario.write_text(scenario_toml(label, setting))
    trace = out / "arrivals.parquet"
    # validate rescales the trace's gaps to each load and cuts it to --duration.
    subprocess.run([str(CAPSIM), "trace", "synth", "--arrivals", "poisson", "--rate", "1000",
                    "--duration", "120s", "--input-tokens", "const:16", "--output-tokens",
                    "none", "--seed", "1", "-o", str(trace)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times = model_times(setting)
    flags = ["--cpus", SERVER_CPUS] if SERVER_CPUS else []
    flags += ["--trace"] if traced else []
    triton = ROOT / "scripts" / "triton.py"
    subprocess.run([sys.executable, str(triton), "start", "--scenario", str(scenario), "--dir",
                    str(out), "--a", f"{times['a_ms']}ms", "--b", f"{times['b_ms']}ms", *flags],
                   check=True, stdout=subprocess.DEVNULL)
    try:
        port = json.loads((out / "ports.json").read_text())["http"]
        if calibrated:
            with open(out / "calibrate.txt", "w") as log:
                subprocess.run([*CLIENT_CPUS, str(CAPSIM), "calibrate", "--endpoint",
                                f"http://127.0.0.1:{port}", "--model", "fixed", "--scenario",
                                str(scenario), "--trace", str(trace), "-o",
                                str(out / "calibrated.toml")],
                               check=True, stdout=log, stderr=subprocess.STDOUT)
            scenario = out / "calibrated.toml"
        with open(out / "validate.txt", "w") as log:
            subprocess.run([*CLIENT_CPUS, str(CAPSIM), "validate", "--endpoint",
                            f"http://127.0.0.1:{port}", "--model", "fixed", "--scenario",
                            str(scenario), "--trace", str(trace), "--loads", str(load),
                            "--duration", duration, *(["--server-trace"] if traced else []),
                            "-o", str(out / "validate")],
                           check=True, stdout=log, stderr=subprocess.STDOUT)
    finally:
        subprocess.run([sys.executable, str(triton), "stop", "--dir", str(out)], check=True)


def row(out: Path, label: str, load_label: str) -> str:
    """A stored run's row from validate's `validation.json`."""
    v = json.loads((out / "validate" / "validation.json").read_text())["loads"][0]
    measured = v["measured"]["figures"]
    sims = [("sim", v.get("sim")), ("run-sim", v.get("run_sim")),
            ("trace-sim", v.get("trace_sim"))]

    def pct(error) -> str:
        return f"{error * 100:+.0f}%" if error is not None else "–"

    def errors(stat: str) -> str:
        return " / ".join(pct((s or {}).get("errors", {}).get(stat)) for _, s in sims)

    def gap(s) -> str:
        return f"{s['worst_share_gap']['points']:.1f}" if s and s.get("worst_share_gap") else "–"

    server = v.get("server_batch_shares") or {}
    top = sorted(server.items(), key=lambda kv: -kv[1])[:3]
    shares = ", ".join(f"{k}: {x:.0f}/{(v['sim']['batch_shares']).get(k, 0):.0f}" for k, x in top)
    t = v.get("server_timeline")
    queue = (f"{t['server_queue_p50_ms']:.2f} / {t['sim_queue_p50_ms']:.2f} | "
             f"{t['server_queue_p99_ms']:.2f} / {t['sim_queue_p99_ms']:.2f}" if t else "– | –")
    delay = v["measured"].get("schedule_delay_p99_ms")
    spread = v.get("sim_spread")  # absent from runs stored before 2026-12-07 22:00
    by_seed = (f"{spread['e2e_p99_ms'][0]:.2f}-{spread['e2e_p99_ms'][-1]:.2f} "
               f"({spread['measured_rank']:.2f})" if spread else "–")
    return (f"| {label} | {load_label} ({v['rate_rps']:.0f}/s) | {shares} "
            f"| {' / '.join(gap(s) for _, s in sims)} | {queue} "
            f"| {measured['e2e_p50_ms']:.2f}: {errors('e2e_p50')} "
            f"| {measured['e2e_p99_ms']:.2f}: {errors('e2e_p99')} | {by_seed} "
            f"| {'–' if delay is None else f'{delay:.2f}'} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="20s")
    parser.add_argument("--out", default=str(ROOT / "output" / "triton-check"))
    parser.add_argument("--pin", action="store_true",
                        help="the server on the first CPU, the load generator on the last")
    parser.add_argument("--loads", default=",".join(str(x) for x in LOADS))
    parser.add_argument("--settings", default=",".join(str(i) for i in range(len(SETTINGS))),
                        help="indices of the settings to run, comma-separated")
    parser.add_argument("--stored", action="store_true",
                        help="no Triton: print the rows of the runs stored under --out again")
    parser.add_argument("--trace", action="store_true",
                        help="Triton traces every request: validate's trace-sim and the queue "
                             "percentiles")
    parser.add_argument("--nominal", action="store_true",
                        help="sim predicts from the model's nominal times instead of a "
                             "calibration through the server (`capsim calibrate --endpoint`)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run each load this many times, each against a fresh Triton (the "
                             "second into OUT/sI-LOAD-r2, ...)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be 1 or more, found {args.repeats}")
    global SERVER_CPUS
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        SERVER_CPUS = str(cpus[0])
        CLIENT_CPUS.extend(["taskset", "-c", str(cpus[-1])])
    print("| setting | load | batch sizes, % of batches: Triton / sim (top 3) "
          "| worst share gap pp: sim / run-sim / trace-sim "
          "| queue p50 ms: Triton / trace-sim | queue p99 ms: Triton / trace-sim "
          "| e2e p50 ms measured: sim / run-sim / trace-sim "
          "| e2e p99 ms measured: sim / run-sim / trace-sim "
          "| sim p99 ms by seed (the run's rank) | schedule delay p99 ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    labels = list(SETTINGS)
    # Loads whose Triton died in every try: reported, and the run goes on to the next.
    lost = []
    for i in (int(i) for i in args.settings.split(",")):
        for load in (float(x) for x in args.loads.split(",")):
            for repeat in range(1, args.repeats + 1):
                out = Path(args.out) / (f"s{i}-{int(load * 100)}"
                                        + (f"-r{repeat}" if repeat > 1 else ""))
                load_label = f"{load * 100:.0f}%" + (f" r{repeat}" if repeat > 1 else "")
                try:
                    if not args.stored:
                        until_alive(out, lambda: validate_once(
                            out, labels[i], SETTINGS[labels[i]], load, args.duration,
                            args.trace, not args.nominal),
                            ["triton.log", "calibrate.txt", "validate.txt", "validate"])
                    line = row(out, labels[i], load_label)
                except TritonDied as died:
                    lost.append(str(died))
                    line = f"| {labels[i]} | {load_label} | no row: {died} |"
                print(line, flush=True)
    if lost:
        sys.exit(f"{len(lost)} load(s) without a row:\n" + "\n".join(lost))


if __name__ == "__main__":
    main()
