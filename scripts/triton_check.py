#!/usr/bin/env python3
"""capsim's queue and dynamic batcher against a real Triton on 127.0.0.1, with a fixed-time model.

For each batcher setting, this starts Triton (scripts/triton.py) with a model whose every batch
sleeps exactly a + b * batch_size, first to calibrate: closed-loop runs at a few concurrencies
give Triton's own compute time per batch size (the model's time plus the Python backend's
overhead), fitted as a' + b' * batch_size, and with --trace each model instance's turnaround
between batches from Triton's per-request timestamps. The setting's capacity follows
(instances * max_batch / (a' + turnaround + b' * max_batch)). Then, for each load (a fraction of
that capacity), it replays a Poisson trace against a fresh Triton (`capsim replay --endpoint`)
and simulates the same trace twice: with the calibration ("sim", what a planner would run) and
with the compute time and turnaround Triton measured in that very run ("run-sim", which isolates
the queue and batcher from the server's speed). It prints one markdown row per run: the
batch-size shares Triton counted, the queue time Triton measured (p50 and p99 from its trace;
the mean from its statistics when untraced), and the end-to-end p50/p99 the client measured,
each beside both simulations'. Traced runs get a second table, of a third simulation
("timeline-sim", `timeline_sim`): arrivals at Triton's own queue start of each request and
batches stretched by the run's own speed (`execution.slowdowns`), which leaves the queue and the
batcher alone to compare; its batch shares are the mean of 8 seeds of the batcher's race. With
--repeats N each load's trace is replayed N times, and a third table gives the spread of Triton's
own figures between replays of the same arrivals beside timeline-sim's errors.

    cargo build --release
    .venv/bin/python scripts/triton_check.py --trace [--duration 15s] [--out output/triton-check]
    .venv/bin/python scripts/triton_check.py --trace --settings 2 --loads 0.85 --repeats 5
    .venv/bin/python scripts/triton_check.py --resimulate   # after a change to the simulator

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

import triton as triton_server

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
SERVER_CPUS = ""
TRACE = False


def model_times(setting: dict) -> dict:
    """The fixed-time model's nominal a and b (ms) for a setting."""
    return {"a_ms": setting.get("a_ms", A_MS), "b_ms": setting.get("b_ms", B_MS)}


def scenario_toml(name: str, s: dict, a_ms: float = A_MS, b_ms: float = B_MS,
                  residuals: list | None = None, slowdowns: list | None = None,
                  dispatch_ms: float = 0.0, release_ms: float = 0.0,
                  release_per_request_ms: float = 0.0, thread_first: float = 0.0,
                  dispatch_residuals: list | None = None) -> tuple:
    """The setting as a capsim scenario whose batches take a + b * batch_size, times a factor
    drawn from `residuals` (measured over predicted batch times) when given, each after a
    dispatch latency of `dispatch_ms` when its model instance was idle, each model instance
    taken `release_ms` after; and its replay inputs (`capsim simulate --replay-inputs`, timings
    only a measured run gives): the dispatch's spread `dispatch_residuals` (the measured
    dispatches over their mean), `release_per_request_ms` x size more per release (`handover`),
    the batcher thread first at `thread_first` of batch ends, and the run's speed as
    `slowdowns` ((from ns, to ns, factor) windows; factor None: a pause). Returns
    (scenario text, replay-inputs text); write them with `write_scenario`."""
    lines = [f'name = "{name}"', "instances = 1", "[batcher]",
             f"max_batch_size = {s['max_batch_size']}", f'max_queue_delay = "{s["delay"]}"']
    replay = []
    if s["preferred"]:
        lines.append(f"preferred_batch_size = {s['preferred']}")
    if dispatch_ms > 0:
        lines.append(f'dispatch_latency = "{dispatch_ms * 1e3:.1f}us"')
        if dispatch_residuals:
            replay.append(ratios_toml("dispatch_residuals", dispatch_residuals))
    if release_ms > 0:
        lines.append(f'release_latency = "{release_ms * 1e3:.1f}us"')
    if release_per_request_ms > 0:
        replay.append(f'release_latency_per_request = "{release_per_request_ms * 1e3:.1f}us"')
    if thread_first > 0:
        replay.append(f"thread_first_fraction = {thread_first:.4f}")
    lines += ["[execution]", f"instance_count = {s['instances']}"]
    if slowdowns:
        replay += slowdowns_toml(slowdowns)
    lines += ["[service]", 'kind = "affine"', f'a = "{a_ms:.4f}ms"', f'b = "{b_ms:.4f}ms"']
    if residuals:
        lines.append(ratios_toml("residuals", residuals))
    return "\n".join(lines) + "\n", "\n".join(replay) + "\n"


def write_scenario(path: Path, texts: tuple) -> list:
    """Writes a (scenario, replay inputs) pair of `scenario_toml` to `path` and
    `path`.replay.toml; returns `capsim simulate`'s arguments for the two."""
    scenario, replay = texts
    path.write_text(scenario)
    replay_path = path.with_suffix(".replay.toml")
    replay_path.write_text(replay)
    return ["--scenario", str(path), "--replay-inputs", str(replay_path)]


def ratios_toml(key: str, ratios: list) -> str:
    """A TOML line setting `key` to a list of ratios, to 4 decimals."""
    return f"{key} = [{', '.join(f'{r:.4f}' for r in ratios)}]"


def handover(timings: dict | None, prefetch: bool = True) -> tuple:
    """(dispatch, release, release per request) in ms of a traced run (`request_timings`), as
    `batcher.dispatch_latency`, `release_latency` and `release_latency_per_request`: the
    dispatch is the wait of a ready batch for an idle model instance (0 without one); the
    release, the turnaround between back-to-back batches (a batch's compute end to the next
    one's start on the same instance, the next one ready), fitted on the size of the batch that
    ended (stalls apart in both). With prefetching Triton's instance thread takes a ready
    payload at once, so the turnaround holds no dispatch; it grows with the responses the
    backend sends first. Without it (`prefetch` False: a queue policy) the batch is formed only
    once the thread waits for it, so the turnaround holds a dispatch, taken off the release."""
    if not timings:
        return 0.0, 0.0, 0.0
    dispatch = timings["idle_dispatch_ms"] if timings["idle_dispatches"] else 0.0
    if "release_ms" not in timings:  # timings stored before the per-request fit
        return dispatch, max(timings["turnaround_ms"] - dispatch, 0.0), 0.0
    release = timings["release_ms"] if prefetch else max(timings["release_ms"] - dispatch, 0.0)
    return dispatch, release, timings["release_per_request_ms"]


def dispatch_residuals(timings: dict | None) -> list | None:
    """A traced run's idle dispatches over their mean (`batcher.dispatch_residuals`), the
    stalls apart as in the mean; None for an untraced run or one without idle dispatches."""
    return (timings or {}).get("dispatch_residuals")


def release_fit(pairs: list) -> tuple:
    """(r0, r1) in ms: the turnarounds `pairs` ((size of the batch that ended, turnaround ns),
    stalls apart) fitted as r0 + r1 x size by least squares, neither negative; (0, 0) without
    any."""
    quick = [(n, t / 1e6) for n, t in pairs if t < STALL_NS]
    if not quick:
        return 0.0, 0.0
    mean_n = sum(n for n, _ in quick) / len(quick)
    mean_t = sum(t for _, t in quick) / len(quick)
    sxx = sum((n - mean_n) ** 2 for n, _ in quick)
    slope = sum((n - mean_n) * (t - mean_t) for n, t in quick) / sxx if sxx else 0.0
    if slope <= 0.0:
        return mean_t, 0.0
    intercept = mean_t - slope * mean_n
    if intercept < 0.0:
        # Through the origin: the best slope with r0 held at 0.
        return 0.0, sum(n * t for n, t in quick) / sum(n * n for n, _ in quick)
    return intercept, slope


def slowdowns_toml(windows: list) -> list:
    """The replay inputs' `slowdowns = [...]` lines of (from ns, to ns, factor) windows, and
    `pauses = [...]` of the (from ns, to ns, None) ones."""
    return (["slowdowns = ["]
            + [f'  {{ from = "{a}ns", to = "{b}ns", factor = {f:.6f} }},'
               for a, b, f in windows if f is not None]
            + ["]", "pauses = ["]
            + [f'  {{ from = "{a}ns", to = "{b}ns" }},' for a, b, f in windows if f is None]
            + ["]"])


def traced_batches(requests: list) -> dict:
    """Traced requests grouped into Triton's batches (the requests that share a compute start
    and end), by (compute start, compute end)."""
    batches: dict = {}
    for r in requests:
        batches.setdefault((r["COMPUTE_START"], r["COMPUTE_END"]), []).append(r)
    return batches


def ready_at(queued: list, readiness: dict | None) -> float:
    """When a batch whose requests were queued at `queued` (ns) could run: its oldest request's
    queue delay over, or the moment it reached a preferred or the largest size
    (`setting_readiness`; without it, at once)."""
    ready = min(queued) + (readiness["delay_ns"] if readiness else 0.0)
    if readiness and len(queued) in readiness["ready_sizes"]:
        ready = min(ready, max(queued))
    return ready


def batch_residuals(path: Path, a_ms: float, b_ms: float) -> list:
    """Each traced batch's compute time (Triton's compute start to end) over a + b * size: the
    server's own variability (sleep overshoot, stalls), as `capsim calibrate` records it."""
    requests = [r for r in read_trace(path).values() if "COMPUTE_START" in r and "COMPUTE_END" in r]
    return sorted((end - start) / 1e6 / (a_ms + b_ms * len(members))
                  for (start, end), members in traced_batches(requests).items())


CLIENT_CPUS: list = []
TIMELINE_ROWS: list = []
# (setting, load) -> one dict per replay of its trace: Triton's figures and timeline-sim's.
REPEATS: dict = {}


def capsim(*args: str) -> None:
    subprocess.run([*CLIENT_CPUS, str(CAPSIM), *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def shares(counts: dict) -> dict:
    total = sum(counts.values())
    return {size: n / total for size, n in counts.items()} if total else {}


def summary_shares(summary: dict) -> dict:
    """`shares` of a capsim summary's `batch_size_counts`."""
    return shares({k: n for k, n in enumerate(summary["batch_size_counts"]) if n})


def capacity_rps(setting: dict, a_ms: float, b_ms: float) -> float:
    """The setting's capacity with full batches that take a + b * batch_size (ms) each."""
    batch = setting["max_batch_size"]
    return setting["instances"] * batch / ((a_ms + b_ms * batch) / 1000.0)


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


def serve(out: Path, setting: dict, replays: list) -> dict:
    """`serve_once` until its Triton survives (`until_alive`), each dead try's log and replays
    kept."""
    return until_alive(out, lambda: serve_once(out, setting, replays),
                       ["triton.log", *(folder for _, _, folder in replays)])


def serve_once(out: Path, setting: dict, replays: list) -> dict:
    """Starts Triton for the setting, runs each replay (a trace and extra `capsim replay` flags,
    written to its own folder) against it, and returns Triton's statistics after the last."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("trace.json*"):
        stale.unlink()
    scenario = out / "scenario.toml"
    nominal = model_times(setting)
    scenario.write_text(scenario_toml(out.name, setting, nominal["a_ms"], nominal["b_ms"])[0])
    triton = ROOT / "scripts" / "triton.py"
    flags = ["--cpus", SERVER_CPUS] if SERVER_CPUS else []
    flags += ["--trace"] if TRACE else []
    subprocess.run([sys.executable, str(triton), "start", "--scenario", str(scenario), "--dir",
                    str(out), "--a", f"{nominal['a_ms']}ms", "--b", f"{nominal['b_ms']}ms", *flags], check=True,
                   stdout=subprocess.DEVNULL)
    try:
        port = json.loads((out / "ports.json").read_text())["http"]
        for trace, extra, folder in replays:
            capsim("replay", "--endpoint", f"http://127.0.0.1:{port}", "--model", "fixed",
                   "--scenario", str(scenario), "--trace", str(trace), *extra, "-o",
                   str(out / folder))
        stats = triton_server.stats_since_ready(out, "fixed")
        (out / "triton_stats.json").write_text(json.dumps(stats, indent=1))
    finally:
        subprocess.run([sys.executable, str(triton), "stop", "--dir", str(out)], check=True)
    return stats


def calibrate(out: Path, setting: dict) -> dict:
    """Measures what a batch really costs on this server, as a planner calibrates before a
    capacity review: closed-loop runs at 1, half a batch and twice the model instances' full
    batches of clients, so that batches of many sizes run; Triton's compute per batch size,
    fitted as a + b * batch_size, and (traced) each model instance's turnaround between batches.
    Written to OUT/calibration.json."""
    batch, instances = setting["max_batch_size"], setting["instances"]
    levels = sorted({1, max(1, batch // 2), 2 * batch * instances})
    # As many batches whatever the model's speed.
    slower = model_times(setting)["a_ms"] / A_MS
    replays = []
    for clients in levels:
        trace = out / f"closed-{clients}.parquet"
        capsim("trace", "synth", "--arrivals", "poisson", "--rate", "1000", "--duration",
               f"{(0.3 + 0.2 * clients) / slower:.3f}s", "--input-tokens", "const:16", "--output-tokens",
               "none", "--seed", "1", "-o", str(trace))
        replays.append((trace, ["--concurrency", str(clients)], f"closed-{clients}"))
    stats = serve(out, setting, replays)
    a_ms, b_ms = fit_affine(stats["batch_stats"])
    timings = (trace_timings(out / "trace.json", instances, setting_readiness(setting))
               if TRACE else None)
    turnaround_ms = timings["turnaround_ms"] if timings else 0.0
    dispatch_ms, release_ms, release_per_request_ms = handover(timings)
    calibration = {"a_ms": a_ms, "b_ms": b_ms, "turnaround_ms": turnaround_ms,
                   "dispatch_ms": dispatch_ms, "release_ms": release_ms,
                   "release_per_request_ms": release_per_request_ms,
                   "dispatch_residuals": dispatch_residuals(timings),
                   "residuals": batch_residuals(out / "trace.json", a_ms, b_ms) if TRACE else None}
    (out / "calibration.json").write_text(json.dumps(calibration, indent=1))
    return calibration


def run_one(out: Path, label: str, setting: dict, load: float, duration: str,
            calibration: dict, repeat: int = 1) -> str:
    out.mkdir(parents=True, exist_ok=True)
    rate = load * capacity_rps(setting, calibration["a_ms"] + calibration["turnaround_ms"],
                               calibration["b_ms"])
    trace = out / "trace.parquet"
    capsim("trace", "synth", "--arrivals", "poisson", "--rate", f"{rate:.3f}", "--duration",
           duration, "--input-tokens", "const:16", "--output-tokens", "none", "--seed", "1",
           "-o", str(trace))
    serve(out, setting, [(trace, [], "measured")])
    (out / "calibration.json").write_text(json.dumps(calibration, indent=1))
    return compare(out, label, setting, load, rate, repeat)


def compare(out: Path, label: str, setting: dict, load: float, rate: float,
            repeat: int = 1) -> str:
    """Simulates a measured run's trace (sim and run-sim) and returns its table row; `repeat`:
    which replay of the same trace it was (named in the row from the second on)."""
    load_label = f"{load * 100:.0f}%" + (f" r{repeat}" if repeat > 1 else "")
    trace = out / "trace.parquet"
    stats = json.loads((out / "triton_stats.json").read_text())
    # The simulation a planner would run: the scenario with the calibration's times (from a
    # separate run; the fixed model's nominal times for runs stored before calibrations).
    cal_path = out / "calibration.json"
    cal = json.loads(cal_path.read_text()) if cal_path.exists() else model_times(setting)
    planned = out / "scenario-calibrated.toml"
    # Calibrations stored before the split of the turnaround: all of it as dispatch.
    planned_args = write_scenario(planned, scenario_toml(
        label, setting, cal["a_ms"], cal["b_ms"], cal.get("residuals"), None,
        cal.get("dispatch_ms", cal.get("turnaround_ms", 0.0)), cal.get("release_ms", 0.0),
        cal.get("release_per_request_ms", 0.0), dispatch_residuals=cal.get("dispatch_residuals")))
    capsim("simulate", *planned_args, str(trace), "-o", str(out / "simulated"))
    # The run-driven simulation: the service time Triton itself measured per batch size
    # (compute input + infer + output), fitted as a + b * batch_size, after, when the run was
    # traced, each model instance's turnaround between batches (Triton's own timestamps) as
    # the dispatch and release latencies (`handover`).
    a_ms, b_ms = fit_affine(stats["batch_stats"])
    traced = any(out.glob("trace.json*"))
    timings = (trace_timings(out / "trace.json", setting["instances"], setting_readiness(setting))
               if traced else None)
    turnaround_ms = timings["turnaround_ms"] if timings else 0.0
    fitted = out / "scenario-run.toml"
    residuals = batch_residuals(out / "trace.json", a_ms, b_ms) if traced else None
    fitted_args = write_scenario(fitted, scenario_toml(
        label, setting, a_ms, b_ms, residuals, None, *handover(timings),
        dispatch_residuals=dispatch_residuals(timings)))
    capsim("simulate", *fitted_args, str(trace), "-o", str(out / "simulated-run"))
    measured = json.loads((out / "measured" / "summary.json").read_text())
    sims = [json.loads((out / d / "summary.json").read_text())
            for d in ("simulated", "simulated-run")]
    triton_batches = {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}
    t_sh = shares(triton_batches)
    sim_shares = [summary_shares(sim) for sim in sims]

    def gap(s_sh: dict) -> float:
        keys = set(t_sh) | set(s_sh)
        return max((abs(t_sh.get(k, 0) - s_sh.get(k, 0)) for k in keys), default=0) * 100

    e2e = measured["latency_ms"]["end_to_end"]

    def err(m: float, s: float) -> str:
        return f"{(s - m) / m * 100:+.0f}%" if m else "–"

    def three(measured_ms: float, key: str, stat: str) -> str:
        a, b = (sim["latency_ms"][key][stat] for sim in sims)
        return f"{measured_ms:.2f} / {a:.2f} ({err(measured_ms, a)}) / {b:.2f} ({err(measured_ms, b)})"

    if timings:
        queue = (f"{three(timings['queue_p50_ms'], 'queue', 'p50_ms')} | "
                 f"{three(timings['queue_p99_ms'], 'queue', 'p99_ms')}")
    else:
        # Untraced: Triton's statistics give the mean only.
        q = stats["inference_stats"]["queue"]
        queue = f"mean {three(q['ns'] / max(q['count'], 1) / 1e6, 'queue', 'mean_ms')} | –"
    timeline = (fixed_timeline_sim(out, label, setting, a_ms, b_ms, timings)
                if traced else None)
    if timeline:
        q, e = timeline["queue"], timeline["e2e"]

        def pair(m: float, x: float) -> str:
            return f"{m:.2f} / {x:.2f} ({err(m, x)})"

        dispatch_ms, release_ms, per_request_ms = handover(timings)
        first = "–" if timeline["thread_first"] is None else f"{timeline['thread_first']:.2f}"
        TIMELINE_ROWS.append(
            f"| {label} | {load_label} | {gap(timeline['shares']):.1f} / "
            f"{gap(timeline['mean_shares']):.1f} | {pair(q[0], q[1])} "
            f"| {pair(q[2], q[3])} | {pair(e[0], e[1])} | {pair(e[2], e[3])} "
            f"| {' / '.join(err(m, x) for m, x in zip((q[0], q[2], e[0], e[2]), timeline['seed0']))} "
            f"| {timeline['stalls']} ({timeline['stall_ms']:.0f} ms) "
            f"| {timeline['dispatch_stalls']} ({timeline['dispatch_stall_ms']:.0f} ms) "
            f"| {turnaround_ms * 1e3:.0f} / {dispatch_ms * 1e3:.0f} / "
            f"{release_ms * 1e3:.0f} + {per_request_ms * 1e3:.0f}·n | {timings['left_waiting']} "
            f"({timings['left_waiting_ms']:.0f} ms) "
            f"| {timeline['joined']} of {timeline['requests']} "
            f"| {first} "
            f"({timeline['left_behind'][0] * 100:.0f}% / "
            f"{timeline['left_behind'][1] * 100:.0f}%) |")
    if timeline:
        REPEATS.setdefault((label, load), []).append({
            "queue": timeline["queue"], "e2e": timeline["e2e"], "shares": t_sh,
            "gap": gap(timeline["mean_shares"])})
    keys = sorted(set(t_sh) | set(sim_shares[0]), key=lambda k: -t_sh.get(k, 0))[:3]
    top = ", ".join(f"{k}: {t_sh.get(k, 0) * 100:.0f}/{sim_shares[0].get(k, 0) * 100:.0f}/"
                    f"{sim_shares[1].get(k, 0) * 100:.0f}" for k in keys)
    return (f"| {label} | {load_label} ({rate:.0f}/s) | {top} | {gap(sim_shares[0]):.1f} / "
            f"{gap(sim_shares[1]):.1f} | {queue} | "
            f"{three(e2e['p50_ms'], 'end_to_end', 'p50_ms')} | "
            f"{three(e2e['p99_ms'], 'end_to_end', 'p99_ms')} | {a_ms:.2f} + {b_ms:.2f}·n "
            f"+ {turnaround_ms:.3f} | {measured['load']['schedule_delay_p99_ms']:.2f} |")


def read_trace(path: Path) -> dict:
    """Triton's trace files (level TIMESTAMPS; PATH and PATH.N): each request's named
    timestamps, by trace id, with its KServe request id (the client's trace row) under
    "request_id" when it sent one."""
    requests: dict = {}
    files = sorted(path.parent.glob(path.name + "*"))
    for event in (e for f in files for e in json.loads(f.read_text() or "[]")):
        stamps = requests.setdefault(event["id"], {})
        for stamp in event.get("timestamps", []):
            stamps[stamp["name"]] = stamp["ns"]
        if "request_id" in event:
            stamps["request_id"] = event["request_id"]
    return requests


STALL_NS = 1_000_000


def run_slowdowns(requests: list, nominal_ms, t0: int, readiness: dict | None = None,
                  turnaround_ns: float = 0.0, model_instances: int = 1,
                  dispatch_ns: float = 0.0) -> list:
    """The run's own speed, as `execution.slowdowns` windows on the simulation's clock (ns from
    t0): each traced batch's compute interval, with its measured time over `nominal_ms(members)`
    (the batch's requests' timestamps) as the factor; where the batches of several model
    instances overlap, the mean of their factors. With one model instance, also the server's
    dispatch stalls: where a batch waited 1 ms (STALL_NS) or more from the later of its
    readiness (`readiness`, as `request_timings` judges it) and its instance's release, a wait
    the means of the hand-over leave out (`quick_mean_ms`), the time past where the mean
    (`turnaround_ns`) would have started it, from when the batch could have been formed to when
    it was (both `dispatch_ns` before compute), as a pause (factor None: `execution.pauses`),
    since the batcher thread, not the model, was held; the wait is queue time, as Triton counts
    it. (`capsim validate --endpoint --server-trace` does the same in crates/endpoint's
    `triton::timeline`, and also fills the gaps between slowdown windows.)"""
    batches = traced_batches(requests)
    stalls = []
    if model_instances == 1:
        free_at = None
        for (start, end), members in sorted(batches.items()):
            ready = ready_at([r["QUEUE_START"] for r in members], readiness)
            could = max(ready, free_at + turnaround_ns) if free_at is not None else ready
            # The pause ends when Triton formed the batch (its dispatch before compute): the
            # held batcher then batches all that waited.
            dispatch = int(round(dispatch_ns))
            # A stall is a wait the hand-over's means leave out (`quick_mean_ms`: from the
            # later of readiness and the instance's release, STALL_NS or more); its pause is
            # what it took past the mean.
            waited = start - (max(ready, free_at) if free_at is not None else ready)
            if waited >= STALL_NS and start > could:
                stalls.append((int(could) - dispatch, start - dispatch, None))
            free_at = end
    edges = sorted({t for key in batches for t in key})
    starts = sorted((start, end, (end - start) / 1e6 / nominal_ms(members))
                    for (start, end), members in batches.items() if end > start)
    windows, active, i = [], [], 0
    for lo, hi in zip(edges, edges[1:]):
        while i < len(starts) and starts[i][0] <= lo:
            active.append(starts[i])
            i += 1
        active = [b for b in active if b[1] > lo]
        factors = [b[2] for b in active if b[0] <= lo < b[1]]
        if factors and lo >= t0:
            factor = min(max(sum(factors) / len(factors), 1e-3), 1000.0)
            windows.append((lo - t0, hi - t0, factor))
    windows += [(a - t0, b - t0, f) for a, b, f in stalls if a >= t0]
    return sorted(windows, key=lambda w: (w[0], w[1]))


LEFT_BEHIND_NS = 50_000
# Seeds of timeline-sim whose shares and percentiles are averaged (`timeline_sim`).
SEEDS = 8
RELEASE_WINDOW_NS = 1_000_000


def left_behind_share(rows: list, max_batch: int) -> tuple:
    """Of the batches smaller than `max_batch` that started within 1 ms of a batch's end (taken
    at a model instance's release), the share that left behind a request queued more than 50 us
    before their start: (share, such batches). `rows`: (queued, compute start, compute end) ns
    of each request. When Triton's batcher thread wins the race at a batch's end, the requests
    waiting behind the growing payload join it, and none is left behind."""
    import bisect
    by_queue = sorted(rows)
    queued = [q for q, _, _ in by_queue]
    latest_start, top = [], -1
    for _, start, _ in by_queue:
        top = max(top, start)
        latest_start.append(top)
    batches: dict = {}
    for q, start, end in rows:
        batches.setdefault((start, end), []).append(q)
    ends = sorted(end for _, end in batches)
    taken = left = 0
    for (start, _), members in batches.items():
        i = bisect.bisect_left(ends, start)
        if len(members) >= max_batch or i == 0 or start - ends[i - 1] > RELEASE_WINDOW_NS:
            continue
        taken += 1
        k = bisect.bisect_left(queued, start - LEFT_BEHIND_NS)
        left += k > 0 and latest_start[k - 1] > start
    return (left / taken if taken else 0.0), taken


def measure_thread_first(traced: list, max_batch: int, simulated_rows) -> float | None:
    """`batcher.thread_first_fraction` of a run: the fraction whose simulation leaves requests
    behind at as many batches taken at a release as the server did (`left_behind_share`), by
    bisection (7 steps, to 1/128); the share falls as the fraction grows. `simulated_rows(f)`:
    the simulation's rows with fraction f. 0 when the server left more behind than the thread
    never winning does. None when the share cannot see the race: no such batches, or under 2
    points between the thread never and always first (with no queue delay nothing is left
    behind either way)."""
    target, taken = left_behind_share(traced, max_batch)
    if max_batch <= 1 or taken == 0:
        return None
    never = left_behind_share(simulated_rows(0.0), max_batch)[0]
    if never - left_behind_share(simulated_rows(1.0), max_batch)[0] < 0.02:
        return None
    if never <= target:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(7):
        mid = (lo + hi) / 2
        if left_behind_share(simulated_rows(mid), max_batch)[0] > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def server_requests(path: Path) -> list:
    """The traced requests that reached compute, with their ids; where an id was sent more than
    once (a warm-up before the run), its last time. Sorted by queue start."""
    latest: dict = {}
    for r in read_trace(path).values():
        if {"QUEUE_START", "COMPUTE_START", "COMPUTE_END", "request_id"} <= r.keys():
            rid = int(r["request_id"])
            if rid not in latest or r["QUEUE_START"] > latest[rid]["QUEUE_START"]:
                latest[rid] = r
    return sorted(latest.values(), key=lambda r: (r["QUEUE_START"], int(r["request_id"])))


def timeline_sim(out: Path, requests: list, tokens: dict, latency_ns: dict, nominal_ms,
                 scenario_of, readiness: dict | None = None, turnaround_ns: float = 0.0,
                 model_instances: int = 1, dispatch_ns: float = 0.0,
                 max_batch: int = 1) -> dict | None:
    """The queue and the batcher alone, with the run's own timing taken out of the way: the
    simulation's arrivals are the times Triton queued each request (its QUEUE_START, so neither
    the load generator's lateness nor HTTP sits in front of the queue) and its batches are
    stretched by the run's own speed (`run_slowdowns` against `nominal_ms`), so a stall of this
    machine holds the simulated queue up when it held Triton's up. Each request's time before
    the queue and after the compute is the one measured, so its end-to-end latency is the
    client's (`latency_ns` by id) minus Triton's queue-to-compute-end plus the simulation's.
    The batcher thread runs first at the fraction of batch ends measured from the trace
    (`measure_thread_first`, with batches of at most `max_batch`).
    `tokens`: input tokens by id; `scenario_of(windows, thread_first)`: the (scenario, replay inputs) texts of `scenario_toml`."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    if not requests:
        return None
    t0 = requests[0]["QUEUE_START"]
    trace = out / "trace-server.parquet"
    pq.write_table(pa.table({
        "arrival": pa.array([r["QUEUE_START"] - t0 for r in requests], pa.int64()),
        "input_tokens": pa.array([tokens[int(r["request_id"])] for r in requests], pa.uint32()),
    }), trace)
    windows = run_slowdowns(requests, nominal_ms, t0, readiness, turnaround_ns, model_instances,
                            dispatch_ns)
    scenario = out / "scenario-timeline.toml"

    def simulate(thread_first: float) -> dict:
        capsim("simulate", *write_scenario(scenario, scenario_of(windows, thread_first)),
               str(trace), "-o", str(out / "simulated-timeline"))
        return pq.read_table(out / "simulated-timeline" / "requests.parquet").to_pydict()

    def seed_run(seed: int) -> tuple:
        """The final scenario run with another seed (the thread's race at each batch end and
        each dispatch drawn again): its requests and its batch-size shares."""
        folder = out / "simulated-timeline-seed"
        capsim("simulate", "--scenario", str(scenario), "--replay-inputs",
               str(scenario.with_suffix(".replay.toml")), str(trace), "--seed", str(seed),
               "-o", str(folder))
        return (pq.read_table(folder / "requests.parquet").to_pydict(),
                summary_shares(json.loads((folder / "summary.json").read_text())))

    def executed(sim: dict) -> list:
        return [(a, s, e) for a, s, e, o in zip(sim["arrival_ns"], sim["exec_start_ns"],
                                                 sim["exec_end_ns"], sim["outcome"])
                if o == "completed" and e is not None]

    traced = [(r["QUEUE_START"] - t0, r["COMPUTE_START"] - t0, r["COMPUTE_END"] - t0)
              for r in requests]
    thread_first = measure_thread_first(traced, max_batch, lambda f: executed(simulate(f)))
    def latencies(sim: dict) -> tuple:
        """(Triton's queue, the simulation's queue, the measured end to end, the simulated
        end to end), ms, of the requests the simulation completed."""
        rows = {request: i for i, request in enumerate(sim["request"])}
        queue_t, queue_s, e2e_m, e2e_s = [], [], [], []
        for k, r in enumerate(requests):
            row = rows[k]
            if sim["outcome"][row] != "completed" or sim["exec_end_ns"][row] is None:
                continue
            arrival = sim["arrival_ns"][row]
            queue_t.append((r["COMPUTE_START"] - r["QUEUE_START"]) / 1e6)
            queue_s.append((sim["exec_start_ns"][row] - arrival) / 1e6)
            measured = latency_ns.get(int(r["request_id"]))
            if measured is not None:
                e2e_m.append(measured / 1e6)
                outside = measured - (r["COMPUTE_END"] - r["QUEUE_START"])
                e2e_s.append((outside + sim["exec_end_ns"][row] - arrival) / 1e6)
        return queue_t, queue_s, e2e_m, e2e_s

    def simulated_percentiles(queue_s: list, e2e_s: list) -> list:
        return [percentile(queue_s, 0.5), percentile(queue_s, 0.99),
                percentile(e2e_s, 0.5), percentile(e2e_s, 0.99)]

    sim = simulate(thread_first or 0.0)
    queue_t, queue_s, e2e_m, e2e_s = latencies(sim)
    seed0 = summary_shares(json.loads((out / "simulated-timeline" / "summary.json").read_text()))
    # One seed is one draw of the thread's races and the dispatches; the mean over SEEDS seeds
    # of a share or a percentile is what the model predicts (Triton's own is one draw too).
    shares_drawn, percentiles_drawn = [seed0], [simulated_percentiles(queue_s, e2e_s)]
    for seed in range(1, SEEDS):
        seed_sim, seed_shares = seed_run(seed)
        _, seed_queue, _, seed_e2e = latencies(seed_sim)
        shares_drawn.append(seed_shares)
        percentiles_drawn.append(simulated_percentiles(seed_queue, seed_e2e))
    mean_shares = {k: sum(d.get(k, 0.0) for d in shares_drawn) / len(shares_drawn)
                   for k in set().union(*shares_drawn)}
    q50, q99, e50, e99 = (sum(p[i] for p in percentiles_drawn) / len(percentiles_drawn)
                          for i in range(4))
    stalls = [w for w in windows if w[2] is not None and w[2] > 3]
    dispatch = [w for w in windows if w[2] is None]
    return {
        "dispatch_stalls": len(dispatch),
        "dispatch_stall_ms": sum(w[1] - w[0] for w in dispatch) / 1e6,
        "requests": len(requests), "joined": len(e2e_m),
        "queue": [percentile(queue_t, 0.5), q50, percentile(queue_t, 0.99), q99],
        "e2e": [percentile(e2e_m, 0.5), e50, percentile(e2e_m, 0.99), e99],
        # Seed 0's own: queue p50, p99, end-to-end p50, p99.
        "seed0": percentiles_drawn[0],
        "shares": seed0,
        "mean_shares": mean_shares,
        "stalls": len(stalls), "stall_ms": sum(w[1] - w[0] for w in stalls) / 1e6,
        "windows": len(windows),
        "thread_first": thread_first,
        "left_behind": [left_behind_share(traced, max_batch)[0],
                        left_behind_share(executed(sim), max_batch)[0]],
    }


def fixed_timeline_sim(out: Path, label: str, setting: dict, a_ms: float, b_ms: float,
                       timings: dict) -> dict | None:
    """`timeline_sim` of a fixed-time run: every batch's nominal time a + b * size, the
    simulated batches a + b * size with the run's dispatch and release latencies (`handover`
    of its `timings`)."""
    import pyarrow.parquet as pq
    requests = server_requests(out / "trace.json")
    client = pq.read_table(out / "measured" / "requests.parquet").to_pydict()
    return timeline_sim(
        out, requests, {int(r["request_id"]): 16 for r in requests},
        dict(zip(client["request"], client["latency_ns"])),
        lambda members: a_ms + b_ms * len(members),
        lambda windows, thread_first: scenario_toml(
            label, setting, a_ms, b_ms, None, windows, *handover(timings), thread_first,
            dispatch_residuals=dispatch_residuals(timings)),
        setting_readiness(setting), timings["turnaround_ms"] * 1e6, setting["instances"],
        handover(timings)[0] * 1e6, setting["max_batch_size"])


def percentile(values: list, q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def parse_ms(text: str) -> float:
    """A duration of the form the scenarios use ("2ms", "500us", "1s"), in milliseconds."""
    for unit, ms in (("us", 1e-3), ("ms", 1.0), ("s", 1e3)):
        if text.endswith(unit):
            return float(text.removesuffix(unit)) * ms
    raise ValueError(f"cannot read the duration {text!r}: use a unit (us, ms or s)")


def setting_readiness(setting: dict) -> dict:
    """When a batch of the setting may start: its delay (ns) and the sizes that start at once."""
    return {"delay_ns": parse_ms(setting["delay"]) * 1e6,
            "ready_sizes": {*setting["preferred"], setting["max_batch_size"]}}


def trace_timings(path: Path, model_instances: int, readiness: dict | None = None) -> dict:
    """What Triton's own timestamps say: the queue time of every request (queue start to compute
    start), and each model instance's turnaround (the mean, stalls apart): the time from one batch's compute end to the
    next one's compute start on the same instance, when the next batch was already ready to run
    (so the instance had work and was not idle): its oldest request had waited the queue delay,
    or it reached a preferred or the largest size, before the instance was free. Batches are the
    requests that share a compute start and end; each goes to the instance free the longest
    before it. `readiness`: `setting_readiness` (no delay and no preferred size when absent)."""
    requests = [r for r in read_trace(path).values() if "COMPUTE_START" in r and "QUEUE_START" in r]
    return request_timings(requests, model_instances, readiness)


def quick_mean_ms(waits_ns: list) -> float:
    """The mean in ms of the waits under STALL_NS (0 without any): a longer one is a stalled
    hand-over (this machine, not Triton), which `run_slowdowns` replays as a pause, and would
    count twice in a mean."""
    quick = [t for t in waits_ns if t < STALL_NS]
    return sum(quick) / len(quick) / 1e6 if quick else 0.0


def quick_ratios(waits_ns: list) -> list | None:
    """The waits under STALL_NS over their mean (`quick_mean_ms`), in order, to 4 decimals;
    None without any (or when all are 0)."""
    quick = [t for t in waits_ns if t < STALL_NS]
    mean = sum(quick) / len(quick) if quick else 0.0
    return [round(t / mean, 4) for t in quick] if mean > 0 else None


def request_timings(requests: list, model_instances: int, readiness: dict | None = None) -> dict:
    """`trace_timings` of traced requests already read (each with QUEUE_START, COMPUTE_START
    and COMPUTE_END)."""
    batches = traced_batches(requests)
    free_at = [0] * model_instances
    last_size = [0] * model_instances
    turnaround, idle_dispatch, left_waiting, released = [], [], [], []
    for (start, end), members in sorted(batches.items()):
        k = min(range(model_instances), key=lambda i: (free_at[i] > start, free_at[i]))
        queued = [r["QUEUE_START"] for r in members]
        ready = ready_at(queued, readiness)
        could = max(ready, free_at[k])
        if start - could > STALL_NS and start - max(queued) < STALL_NS / 2:
            # Ready with its instance free, it started only as a later request arrived.
            left_waiting.append((start - could) / 1e6)
        if 0 < free_at[k] <= start and ready < free_at[k]:
            turnaround.append(start - free_at[k])
            released.append((last_size[k], start - free_at[k]))
        elif free_at[k] <= ready <= start:
            # The instance was idle when the batch became ready: the wait is the dispatch alone.
            idle_dispatch.append(start - ready)
        free_at[k] = max(free_at[k], end)
        last_size[k] = len(members)
    release_ms, release_per_request_ms = release_fit(released)
    queue = [(r["COMPUTE_START"] - r["QUEUE_START"]) / 1e6 for r in requests]
    return {
        "queue_p50_ms": percentile(queue, 0.5), "queue_p99_ms": percentile(queue, 0.99),
        "queue_mean_ms": sum(queue) / max(len(queue), 1),
        "turnaround_ms": quick_mean_ms(turnaround),
        "release_ms": release_ms, "release_per_request_ms": release_per_request_ms,
        "turnarounds": len(turnaround), "batches": len(batches),
        "idle_dispatch_ms": quick_mean_ms(idle_dispatch),
        "dispatch_residuals": quick_ratios(idle_dispatch),
        "idle_dispatches": len(idle_dispatch),
        "left_waiting": len(left_waiting), "left_waiting_ms": sum(left_waiting),
    }


def fit_affine(batch_stats: list) -> tuple:
    """Least squares of the mean compute time per batch size, weighted by batches, in ms."""
    points = []
    for b in batch_stats:
        n = b["compute_infer"]["count"]
        if n:
            ns = sum(b[part]["ns"] for part in ("compute_input", "compute_infer", "compute_output"))
            points.append((b["batch_size"], ns / n / 1e6, n))
    w = sum(p[2] for p in points)
    mx = sum(p[0] * p[2] for p in points) / w
    my = sum(p[1] * p[2] for p in points) / w
    sxx = sum(p[2] * (p[0] - mx) ** 2 for p in points)
    slope = sum(p[2] * (p[0] - mx) * (p[1] - my) for p in points) / sxx if sxx else 0.0
    slope = max(slope, 0.0)
    return max(my - slope * mx, 0.0), slope


def repeat_spread_table() -> str:
    """Markdown table of the loads replayed more than once (`REPEATS`): the range of Triton's
    own queue and end-to-end percentiles over the replays of one trace, the range of
    timeline-sim's errors against each, the widest range of Triton's share of one batch size,
    and the worst share gap of each replay (timeline-sim's mean over its seeds)."""
    def span(values: list, fmt: str) -> str:
        return f"{fmt.format(min(values))} to {fmt.format(max(values))}"

    def errors(runs: list, key: str, k: int) -> str:
        return span([(r[key][k + 1] - r[key][k]) / r[key][k] * 100 for r in runs if r[key][k]],
                    "{:+.0f}%")

    lines = ["| setting | load | replays | Triton queue p50 ms | Triton queue p99 ms "
             "| Triton e2e p99 ms | timeline-sim error: queue p50 / queue p99 / e2e p99 "
             "| widest spread of Triton's share of one size, pp | worst share gap pp per replay |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (label, load), runs in REPEATS.items():
        if len(runs) < 2:
            continue
        sizes = set().union(*(r["shares"] for r in runs))
        widest = max(sizes, key=lambda k: max(r["shares"].get(k, 0) for r in runs)
                     - min(r["shares"].get(k, 0) for r in runs))
        share = [r["shares"].get(widest, 0) * 100 for r in runs]
        gaps = ", ".join(f"{r['gap']:.1f}" for r in runs)
        lines.append(
            f"| {label} | {load * 100:.0f}% | {len(runs)} "
            f"| {span([r['queue'][0] for r in runs], '{:.2f}')} "
            f"| {span([r['queue'][2] for r in runs], '{:.2f}')} "
            f"| {span([r['e2e'][2] for r in runs], '{:.2f}')} "
            f"| {errors(runs, 'queue', 0)} / {errors(runs, 'queue', 2)} / {errors(runs, 'e2e', 2)} "
            f"| size {widest}: {span(share, '{:.1f}')} "
            f"| {gaps} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="20s")
    parser.add_argument("--out", default=str(ROOT / "output" / "triton-check"))
    parser.add_argument("--pin", action="store_true",
                        help="the server on the first CPU, the load generator on the last")
    parser.add_argument("--loads", default=",".join(str(x) for x in LOADS))
    parser.add_argument("--settings", default=",".join(str(i) for i in range(len(SETTINGS))),
                        help="indices of the settings to run, comma-separated")
    parser.add_argument("--resimulate", action="store_true",
                        help="no Triton: simulate again the runs stored under --out (after a "
                             "change to the simulator) and print their rows")
    parser.add_argument("--trace", action="store_true",
                        help="Triton traces every request (queue percentiles, turnaround)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="replay each load's trace this many times, each against a fresh "
                             "Triton (the second into OUT/sI-LOAD-r2, ...), and print the "
                             "spread of Triton's own figures between them")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be 1 or more, found {args.repeats}")
    global SERVER_CPUS, TRACE
    TRACE = args.trace
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        SERVER_CPUS = str(cpus[0])
        CLIENT_CPUS.extend(["taskset", "-c", str(cpus[-1])])
    print("| setting | load | batch sizes, % of batches: Triton / sim / run-sim (top 3) "
          "| worst share gap pp: sim / run-sim | queue p50 ms: Triton / sim / run-sim "
          "| queue p99 ms: Triton / sim / run-sim "
          "| e2e p50 ms: measured / sim / run-sim | e2e p99 ms: measured / sim / run-sim "
          "| Triton's compute, fitted + turnaround (ms) | schedule delay p99 ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    labels = list(SETTINGS)
    # Loads whose Triton died in every try: reported, and the run goes on to the next.
    lost = []
    for i in (int(i) for i in args.settings.split(",")):
        calibration = None
        for load in (float(x) for x in args.loads.split(",")):
            for repeat in range(1, args.repeats + 1):
                out = Path(args.out) / (f"s{i}-{int(load * 100)}"
                                        + (f"-r{repeat}" if repeat > 1 else ""))
                setting = SETTINGS[labels[i]]
                if args.resimulate:
                    cal_path = out / "calibration.json"
                    cal = (json.loads(cal_path.read_text()) if cal_path.exists()
                           else model_times(setting))
                    rate = load * capacity_rps(setting,
                                               cal["a_ms"] + cal.get("turnaround_ms", 0.0),
                                               cal["b_ms"])
                    row = compare(out, labels[i], setting, load, rate, repeat)
                else:
                    try:
                        if calibration is None:
                            calibration = calibrate(Path(args.out) / f"s{i}-calibration",
                                                    setting)
                        row = run_one(out, labels[i], setting, load, args.duration,
                                      calibration, repeat)
                    except TritonDied as died:
                        lost.append(str(died))
                        row = f"| {labels[i]} | {load * 100:.0f}% | no row: {died} |"
                print(row, flush=True)
    if TIMELINE_ROWS:
        print()
        print("| setting | load | worst share gap pp: seed 0 / mean of "
              f"{SEEDS} seeds | queue p50 ms: Triton / timeline-sim (mean of {SEEDS} seeds) "
              "| queue p99 ms: Triton / timeline-sim | e2e p50 ms: measured / timeline-sim "
              "| e2e p99 ms: measured / timeline-sim "
              "| seed 0 alone: queue p50 / p99, e2e p50 / p99 "
              "| compute stalls > 3x (their time) "
              "| dispatch stalls > 1 ms (their time) "
              "| turnaround / dispatch / release + per request us | left waiting for an arrival (their wait) "
              "| requests joined | thread first (left behind: Triton / timeline-sim) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        print("\n".join(TIMELINE_ROWS))
    if any(len(runs) > 1 for runs in REPEATS.values()):
        print()
        print(repeat_spread_table())
    if lost:
        sys.exit(f"{len(lost)} load(s) without a row:\n" + "\n".join(lost))


if __name__ == "__main__":
    main()
