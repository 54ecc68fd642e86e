#!/usr/bin/env python3
"""TTFT at light load against a real vLLM on this CPU, in units of the server's own decode step,
against capsim's prediction for that engine (docs/accuracy.md, "TTFT at light load against vLLM
on this CPU"). The machine's speed cancels to first order: every time is divided by the step
time the server measured in the same run.

    scripts/light_load_check.py calibrate --server DIR -o CAL.json
        On an idle engine: isolated streamed requests at a few prompt lengths (each alone, with
        16 output tokens); then B background streams alone, their step measured in successive
        windows as their KV cache grows. From the server's own per-request metrics (vLLM
        --enable-per-request-metrics: queue, prefill, mean inter-token time), its /metrics and
        the client's TTFT: a linear step time (per step, per decode sequence, per KV token, per
        prefill sequence, per prefill token) and the cost outside the engine (client TTFT less
        the server's queue and prefill, per request and per input token), all in units of the
        B-stream decode step at no context.
    scripts/light_load_check.py measure --server DIR -o RUN.json
        The measured run: B background streams decode long outputs (the engine never idles)
        while probes with short outputs arrive at random, well-spaced times (one in flight at a
        time). Each probe's client TTFT, and the decode step from the server's /metrics over the
        probes' window (vllm:inter_token_latency_seconds sum/count); TTFT in step units. RUN.json
        also holds the trace of the run's sends (background and probes).
    scripts/light_load_check.py predict --calibration CAL.json --run RUN.json -o PRED.json
        capsim's prediction of the run's probes: a scenario of that engine (synchronous
        scheduling, the linear step time and the outside cost calibrated on CAL, in the run's own
        step) simulated by `capsim simulate` on the run's trace (written beside PRED.json); and
        the closed form (half a step of residual + the prefill step + the outside cost).
    scripts/light_load_check.py table PRED.json... -o SUMMARY.json
        The predictions as a markdown table, and the medians over the runs.

DIR is a `scripts/vllm_cpu.sh start --dir DIR` directory (DIR/port, DIR/pid, DIR/model_name) of a
server started with `-- --enable-per-request-metrics`. The prompts are the word-level
tokenizer's words (w3..w1023, one token each), so a prompt of L words is L tokens (checked
against the server's usage). Each run records the CPU that other jobs took from the 2 cores over
its windows (/proc/stat less the server's and this client's processes). Standard library only,
except `predict`, which reads capsim's requests.parquet with pyarrow (.venv has it).
"""
import argparse
import http.client
import json
import math
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

# The vLLM histograms whose sum/count deltas the runs record around each phase.
HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:iteration_tokens_total",
)
WORDS = 1021  # w3..w1023 of scripts/vllm_cpu.sh's tokenizer
# A background stream's output: longer than any run (8,000 steps of at least 10 ms), within the
# server's max_model_len of 16,384 with its prompt.
BACKGROUND_OUTPUT = 8000


class Server:
    """A started vllm_cpu.sh server: its port and model name."""

    def __init__(self, directory: Path):
        try:
            self.port = int((directory / "port").read_text())
            self.session = int((directory / "pid").read_text())
            self.model = (directory / "model_name").read_text().strip()
        except (OSError, ValueError) as err:
            sys.exit(f"light_load_check: --server {directory}: no port/model_name there ({err}); "
                     "start one with scripts/vllm_cpu.sh start --dir DIR -- "
                     "--enable-per-request-metrics")

    def pin_frontend(self, directory: Path) -> list:
        """Pins every process of the server's session but the model worker (the API server, the
        engine core) to the cores vLLM reserved for them (those the worker is not bound to), and
        this client too, so that none of them preempts the worker's steps. Returns the PIDs
        pinned."""
        sid = int((directory / "pid").read_text())
        worker_cores, others = set(), []
        for proc in Path("/proc").iterdir():
            try:
                if not proc.name.isdigit() or os.getsid(int(proc.name)) != sid:
                    continue
                if (proc / "comm").read_text().startswith("VLLM::Worker"):
                    worker_cores |= os.sched_getaffinity(int(proc.name))
                else:
                    others.append(int(proc.name))
            except (ProcessLookupError, PermissionError, FileNotFoundError):
                continue
        free = set(range(os.cpu_count())) - worker_cores
        if not worker_cores or not free:
            sys.exit(f"light_load_check: no VLLM::Worker bound to some of the cores in the "
                     f"session of PID {sid} ({directory}/pid): not a running vllm_cpu.sh server?")
        for pid in others:
            for task in Path(f"/proc/{pid}/task").iterdir():
                try:
                    os.sched_setaffinity(int(task.name), free)
                except ProcessLookupError:
                    pass
        os.sched_setaffinity(0, free)
        return others

    def metrics(self) -> dict:
        """The histograms' (sum, count) from /metrics, name -> (sum, count)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30) as r:
            text = r.read().decode()
        found = {name: [0.0, 0.0] for name in HISTOGRAMS}
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            for name in HISTOGRAMS:
                for i, suffix in enumerate(("_sum", "_count")):
                    if line.startswith(name + suffix + "{") or line.startswith(name + suffix + " "):
                        found[name][i] += float(line.rsplit(" ", 1)[1])
        return {k: tuple(v) for k, v in found.items()}


def cpu_seconds(session: int) -> tuple:
    """(CPU seconds busy on the machine, CPU seconds of the server's session and this client)
    since boot: their difference over a window is what other jobs took from the 2 cores."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    busy = sum(fields) - fields[3] - fields[4]  # less idle and iowait
    ours = 0
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (os.getsid(int(proc.name)) == session
                                        or int(proc.name) == os.getpid()):
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                ours += int(stat[11]) + int(stat[12])  # utime, stime
        except (ProcessLookupError, PermissionError, FileNotFoundError):
            continue
    return busy / tick, ours / tick


def foreign_cpu(before: tuple, after: tuple, window_s: float) -> dict:
    """Cores' share taken by other jobs over a window (0..2 on this machine)."""
    busy, ours = after[0] - before[0], after[1] - before[1]
    return {"busy_cores": busy / window_s, "server_and_client_cores": ours / window_s,
            "other_jobs_cores": (busy - ours) / window_s}


def metrics_delta(before: dict, after: dict) -> dict:
    """Per histogram: count, sum (s) and mean (s) of the observations between two scrapes."""
    out = {}
    for name in HISTOGRAMS:
        s, c = after[name][0] - before[name][0], after[name][1] - before[name][1]
        out[name] = {"count": c, "sum_s": s, "mean_s": s / c if c else None}
    return out


def prompt(tokens: int, rng: random.Random) -> str:
    """A prompt of exactly `tokens` tokens of the word-level tokenizer."""
    return " ".join(f"w{3 + rng.randrange(WORDS)}" for _ in range(tokens))


def stream(server: Server, text: str, max_tokens: int, stop: threading.Event = None,
           counter: list = None) -> dict:
    """One streamed completion (ignore_eos, usage and the server's per-request metrics in the last
    chunk). Times are time.perf_counter() seconds: send, first token, each token. `stop` closes
    the connection early (the server aborts the request); `counter[0]` counts the tokens as they
    come, for another thread to read."""
    body = json.dumps({"model": server.model, "prompt": text, "max_tokens": max_tokens,
                       "ignore_eos": True, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    rec = {"send_s": time.perf_counter(), "token_s": [], "metrics": None, "usage": None}
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    for raw in resp:
        line = raw.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("choices") and chunk["choices"][0].get("text"):
            rec["token_s"].append(time.perf_counter())
            if counter is not None:
                counter[0] += 1
        if chunk.get("usage"):
            rec["usage"], rec["metrics"] = chunk["usage"], chunk.get("metrics")
        if stop is not None and stop.is_set():
            break
    conn.close()
    return rec


def probe_figures(rec: dict, prompt_tokens: int) -> dict:
    """A finished request's client TTFT and the server's queue and prefill times, in ms."""
    m = rec["metrics"] or {}
    if rec["usage"] is None or m.get("queue_time_ms") is None:
        sys.exit("light_load_check: the server sent no per-request metrics: start it with "
                 "scripts/vllm_cpu.sh start --dir DIR -- --enable-per-request-metrics")
    if rec["usage"]["prompt_tokens"] != prompt_tokens:
        sys.exit(f"light_load_check: a prompt of {prompt_tokens} words counted "
                 f"{rec['usage']['prompt_tokens']} tokens: not the word-level tokenizer of "
                 "scripts/vllm_cpu.sh")
    ttft_ms = (rec["token_s"][0] - rec["send_s"]) * 1e3
    queue_ms, prefill_ms = m["queue_time_ms"], m["time_to_first_token_ms"]
    return {"prompt_tokens": prompt_tokens, "output_tokens": rec["usage"]["completion_tokens"],
            "client_ttft_ms": ttft_ms, "queue_ms": queue_ms, "prefill_ms": prefill_ms,
            "outside_ms": ttft_ms - queue_ms - prefill_ms, "mean_itl_ms": m.get("mean_itl_ms")}


class Background:
    """B streams decoding long outputs until stopped; each restarts if it ends first."""

    def __init__(self, server: Server, streams: int, prompt_tokens: int, max_tokens: int,
                 rng: random.Random):
        self.stop = threading.Event()
        self.sends = []  # (send perf_counter s, prompt tokens, tokens received)
        self.errors = []
        self.lock = threading.Lock()
        self.prompt_tokens = prompt_tokens
        self.counters = [[0] for _ in range(streams)]  # tokens of each stream's current request
        self.threads = [threading.Thread(target=self._run, daemon=True,
                                         args=(server, prompt(prompt_tokens, rng), prompt_tokens,
                                               max_tokens, self.counters[i]))
                        for i in range(streams)]

    def kv_tokens(self) -> int:
        """Tokens in the streams' KV cache now: their prompts and the tokens received so far."""
        return sum(self.prompt_tokens + c[0] for c in self.counters)

    def _run(self, server, text, prompt_tokens, max_tokens, counter):
        while not self.stop.is_set():
            counter[0] = 0
            try:
                rec = stream(server, text, max_tokens, self.stop, counter)
            except (OSError, RuntimeError) as err:
                self.errors.append(err)
                self.stop.set()
                return
            with self.lock:
                self.sends.append((rec["send_s"], prompt_tokens, len(rec["token_s"])))

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)
        if self.errors:
            sys.exit(f"light_load_check: a background stream failed: {self.errors[0]}")


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def median(xs):
    return statistics.median(xs) if xs else None


def linear_fit(xs, ys):
    """Least-squares line y = a + b x: (a, b)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def calibrate(args) -> dict:
    """Isolated requests on the idle engine, then background streams alone."""
    server, rng = Server(args.server), random.Random(args.seed)
    if args.pin:
        server.pin_frontend(args.server)
    lengths = [int(x) for x in args.lengths.split(",")]
    order = [L for _ in range(args.reps) for L in lengths]
    rng.shuffle(order)
    stream(server, prompt(8, rng), 4)  # warm-up, not counted
    load_before = uptime()
    isolated, cpu0, t0 = [], cpu_seconds(server.session), time.perf_counter()
    for L in order:
        time.sleep(args.idle_gap_s)
        isolated.append(probe_figures(stream(server, prompt(L, rng), 16), L))
    cpu = foreign_cpu(cpu0, cpu_seconds(server.session), time.perf_counter() - t0)
    windows = background_windows(server, args, rng)
    return {"kind": "calibration", "uptime_before": load_before, "uptime_after": uptime(),
            "isolated_cpu": cpu, "isolated": isolated, "background_streams": args.background,
            "background_windows": windows, **fit_engine(isolated, windows, args.background)}


def background_windows(server: Server, args, rng: random.Random) -> list:
    """B streams alone: the decode step (the server's mean inter-token latency) in successive
    windows, against the KV tokens the streams hold (growing as they decode)."""
    windows = []
    with Background(server, args.background, args.background_prompt, BACKGROUND_OUTPUT,
                    rng) as bg:
        time.sleep(args.warmup_s)
        before, kv0, cpu0 = server.metrics(), bg.kv_tokens(), cpu_seconds(server.session)
        for _ in range(round(args.background_s / args.window_s)):
            time.sleep(args.window_s)
            after, kv1, cpu1 = server.metrics(), bg.kv_tokens(), cpu_seconds(server.session)
            itl = metrics_delta(before, after)["vllm:inter_token_latency_seconds"]
            windows.append({"kv_tokens": (kv0 + kv1) / 2, "step_ms": itl["mean_s"] * 1e3,
                            "tokens": itl["count"], **foreign_cpu(cpu0, cpu1, args.window_s)})
            before, kv0, cpu0 = after, kv1, cpu1
    return windows


def fit_engine(isolated: list, windows: list, streams: int) -> dict:
    """The linear step and the outside cost in units of `unit`, the decode step of B streams at
    no context (the background windows' line at 0 KV tokens).

    decode step of n sequences holding kv tokens = a + b n + k kv (k and a + b B from the
    background windows; b from the isolated requests' decode step at one sequence); a
    prefill-only step of L tokens = alpha + c L (the isolated requests' prefill times); the cost
    outside the engine = k0 + k1 L (their client TTFT less the server's queue and prefill)."""
    lengths = [r["prompt_tokens"] for r in isolated]
    d0, k = linear_fit([w["kv_tokens"] for w in windows], [w["step_ms"] for w in windows])
    u1_ms = median([r["mean_itl_ms"] for r in isolated])
    # an isolated request's mean context over its 16 tokens
    kv1 = statistics.fmean(lengths) + 8
    b = (d0 - u1_ms + k * kv1) / (streams - 1)
    a = d0 - b * streams
    alpha, c = linear_fit(lengths, [r["prefill_ms"] for r in isolated])
    k0, k1 = linear_fit(lengths, [r["outside_ms"] for r in isolated])
    unit = d0
    return {"unit_ms": unit, "decode_step_1_ms": u1_ms,
            "unit_is": f"the decode step of {streams} streams at no context ({unit:.3f} ms here)",
            "decode_base": a / unit, "decode_per_seq": b / unit, "decode_per_kv_token": k / unit,
            "prefill_base": alpha / unit, "prefill_per_token": c / unit,
            "new_seq_extra": (alpha - a) / unit,
            "outside_base": k0 / unit, "outside_per_token": k1 / unit,
            "outside_median_ms": median([r["outside_ms"] for r in isolated]),
            "queue_median_ms": median([r["queue_ms"] for r in isolated])}


def measure(args) -> dict:
    """Background streams keep the engine decoding; probes arrive at random, spaced times."""
    server, rng = Server(args.server), random.Random(args.seed)
    if args.pin:
        server.pin_frontend(args.server)
    stream(server, prompt(8, rng), 4)  # warm-up, not counted
    load_before = uptime()
    t0 = time.perf_counter()
    probes = []
    with Background(server, args.background, args.background_prompt, BACKGROUND_OUTPUT, rng) as bg:
        time.sleep(args.warmup_s)
        before, w0, kv0 = server.metrics(), time.perf_counter(), bg.kv_tokens()
        cpu0 = cpu_seconds(server.session)
        for _ in range(args.probes):
            time.sleep(rng.uniform(args.gap_min_s, args.gap_max_s))
            rec = stream(server, prompt(args.probe_prompt, rng), args.probe_output)
            probes.append({**probe_figures(rec, args.probe_prompt),
                           "send_s": rec["send_s"] - t0})
        after, w1, kv1 = server.metrics(), time.perf_counter(), bg.kv_tokens()
        cpu1 = cpu_seconds(server.session)
    delta = metrics_delta(before, after)
    step_ms = delta["vllm:inter_token_latency_seconds"]["mean_s"] * 1e3
    steps = delta["vllm:iteration_tokens_total"]["count"]
    for p in probes:
        for key in ("client_ttft", "queue", "prefill", "outside"):
            p[key + "_steps"] = p[key + "_ms"] / step_ms
    trace = [{"arrival": round((s - t0) * 1e9), "input_tokens": L, "output_tokens": max(n, 1),
              "request_id": f"bg{i}"} for i, (s, L, n) in enumerate(sorted(bg.sends))]
    trace += [{"arrival": round(p["send_s"] * 1e9), "input_tokens": p["prompt_tokens"],
               "output_tokens": p["output_tokens"], "request_id": f"probe{i}"}
              for i, p in enumerate(probes)]
    trace.sort(key=lambda r: r["arrival"])
    ttfts = [p["client_ttft_steps"] for p in probes]
    return {"kind": "measured", "uptime_before": load_before, "uptime_after": uptime(),
            "background_streams": args.background, "window_s": w1 - w0,
            "mean_kv_tokens": (kv0 + kv1) / 2, "cpu": foreign_cpu(cpu0, cpu1, w1 - w0),
            "step_ms": step_ms, "step_ms_from_step_count": (w1 - w0) * 1e3 / steps if steps else None,
            "metrics_delta": delta, "probes": probes, "trace": trace,
            "ttft_steps_median": median(ttfts), "ttft_steps_mean": statistics.fmean(ttfts),
            "queue_steps_median": median([p["queue_steps"] for p in probes]),
            "prefill_steps_median": median([p["prefill_steps"] for p in probes]),
            "outside_steps_median": median([p["outside_steps"] for p in probes])}


def unit_ms(cal: dict, run: dict) -> float:
    """The calibration's unit in the measured run's milliseconds: the run's measured mean step
    over the probes' window is what the calibrated line gives for B streams at the window's mean
    KV tokens."""
    B = run["background_streams"]
    model_step = (cal["decode_base"] + cal["decode_per_seq"] * B
                  + cal["decode_per_kv_token"] * run["mean_kv_tokens"])
    return run["step_ms"] / model_step


def step_ns(units: float, unit: float, what: str) -> int:
    """A time in calibration units as nanoseconds of the run (`unit` ms a unit); a negative one
    (noise around zero) is set to 0 and said."""
    ns = round(units * unit * 1e6)
    if ns < 0:
        print(f"light_load_check: calibrated {what} is {units:+.4f} unit (below 0, noise around "
              "zero): 0 in the scenario", file=sys.stderr)
        return 0
    return ns


def scenario_toml(cal: dict, unit: float, schedule_ahead_steps: int) -> str:
    """capsim's model of the engine, its times in the measured run's milliseconds (`unit` ms a
    calibration unit). A prefill-only step of L tokens is base + per_prefill_seq +
    per_prefill_token * L; a decode step of n sequences base + per_decode_seq * n + per_kv_token
    * their KV tokens."""
    base = step_ns(cal["decode_base"], unit, "decode base")
    per_new = step_ns(cal["new_seq_extra"], unit, "extra of a new sequence's step")
    per_seq = step_ns(cal["decode_per_seq"], unit, "per decode sequence")
    per_kv = cal["decode_per_kv_token"] * unit * 1e6
    per_token = step_ns(cal["prefill_per_token"], unit, "prefill per token")
    out_base = step_ns(cal["outside_base"], unit, "outside cost per request")
    out_token = step_ns(cal["outside_per_token"], unit, "outside cost per input token")
    return f"""# written by scripts/light_load_check.py predict: vLLM-CPU 0.32 (synchronous scheduling:
# platforms/cpu.py sets async_scheduling = False), every time calibrated on a separate
# calibration run in units of its decode step, written here in the measured run's time (a unit
# is {unit:.4f} ms: the run's mean step over its window). The cost outside the engine (client
# TTFT less the server's queue and prefill on an idle engine: the HTTP hops, tokenization, the
# hand-overs to and from the engine core, detokenization) is one per-request and one
# per-input-token time; it is stated as pre-processing, as nothing tells its parts apart and
# at light load nothing queues for it.
name = "vllm-cpu-light-load"
instances = 1

[batcher]
kind = "continuous"
max_num_seqs = 32
max_num_batched_tokens = 4096
enable_chunked_prefill = true
schedule_ahead_steps = {schedule_ahead_steps}
# vLLM on CPU captures no CUDA graphs: every step runs eagerly, unpadded.
cuda_graph_sizes = []

[kv_cache]
block_size = 128
num_gpu_blocks = 8192
enable_prefix_caching = false

[step_time]
kind = "linear"
base = "{base}ns"
per_prefill_seq = "{per_new}ns"
per_decode_seq = "{per_seq}ns"
per_kv_token = "{max(per_kv, 0.0):.4f}ns"
per_prefill_token = "{per_token}ns"

[preprocess]
base = "{out_base}ns"
per_input_token = "{out_token}ns"
"""


def closed_form_steps(cal: dict, run: dict, schedule_ahead_steps: int) -> float:
    """Expected TTFT in the run's steps: half a step of residual, the steps scheduled ahead, the
    prefill step (one step plus a new sequence's extra and the probe's prompt) and the cost
    outside the engine."""
    L = run["probes"][0]["prompt_tokens"]
    to_steps = unit_ms(cal, run) / run["step_ms"]
    prefill_extra = (cal["new_seq_extra"] + cal["prefill_per_token"] * L) * to_steps
    outside = (cal["outside_base"] + cal["outside_per_token"] * L) * to_steps
    return 0.5 + schedule_ahead_steps + 1 + prefill_extra + outside


def fold_prefill_seq(scen: Path, run: dict) -> None:
    """For a capsim from before step_time.per_prefill_seq: every probe has the same prompt, so
    its prefill step is the same with the per-sequence time spread over its tokens (only the
    background streams' first steps, before the window, differ)."""
    lengths = {p["prompt_tokens"] for p in run["probes"]}
    if len(lengths) != 1:
        sys.exit("light_load_check: this capsim has no step_time.per_prefill_seq and the probes' "
                 "prompts differ: build capsim from this branch")
    (L,) = lengths
    lines = scen.read_text().splitlines()
    get = {ln.split(" = ")[0]: ln for ln in lines if " = " in ln}
    per_seq = float(get["per_prefill_seq"].split('"')[1].removesuffix("ns"))
    per_token = float(get["per_prefill_token"].split('"')[1].removesuffix("ns"))
    text = "\n".join(ln for ln in lines if not ln.startswith("per_prefill_seq = "))
    text = text.replace(get["per_prefill_token"],
                        f'per_prefill_token = "{per_token + per_seq / L:.4f}ns"  '
                        f"# per_prefill_seq ({per_seq:.0f}ns) over the probes' {L} tokens")
    scen.write_text(text + "\n")


def simulate(args, cal: dict, run: dict) -> list:
    """The probes' TTFT in steps from `capsim simulate` on the run's trace."""
    import pyarrow.parquet as pq

    out = Path(args.out).with_suffix("")
    out.mkdir(parents=True, exist_ok=True)
    scen = out / "scenario.toml"
    scen.write_text(scenario_toml(cal, unit_ms(cal, run), args.schedule_ahead_steps))
    trace = out / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in run["trace"]))
    command = [args.capsim, "simulate", "--scenario", str(scen), str(trace),
               "--map", "arrival=arrival:ns", "-o", str(out / "sim")]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 and "unknown field `schedule_ahead_steps`" in done.stderr:
        # (A capsim that predates schedule_ahead_steps predates cuda_graph_sizes too.)
        scen.write_text(scen.read_text().replace("cuda_graph_sizes = []\n", ""))
        if args.schedule_ahead_steps != 0:
            sys.exit(f"light_load_check: {args.capsim} predates batcher.schedule_ahead_steps")
        # A capsim from before the key: its continuous batcher is synchronous (0).
        scen.write_text(scen.read_text().replace("schedule_ahead_steps = 0\n", ""))
        done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 and "unknown field `per_prefill_seq`" in done.stderr:
        fold_prefill_seq(scen, run)
        done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"light_load_check: capsim simulate failed:\n{done.stderr}")
    table = pq.read_table(out / "sim" / "requests.parquet").to_pydict()
    # capsim's `request` is the row of the trace, which is sorted by arrival as written.
    ids = [run["trace"][i]["request_id"] for i in table["request"]]
    # The simulated step, as the server's is measured: the background streams' time per token.
    sim_step_ns = statistics.fmean(t for rid, t in zip(ids, table["tpot_ns"])
                                   if rid.startswith("bg") and t is not None)
    probes = [t for rid, t in zip(ids, table["ttft_ns"]) if rid.startswith("probe")]
    return [t / sim_step_ns for t in probes], sim_step_ns / 1e6


def predict(args) -> dict:
    cal = json.loads(Path(args.calibration).read_text())
    run = json.loads(Path(args.run).read_text())
    sim, sim_step_ms = simulate(args, cal, run)
    measured = [p["client_ttft_steps"] for p in run["probes"]]
    closed = closed_form_steps(cal, run, args.schedule_ahead_steps)
    res = {"class": "prediction (calibrated on another run)",
           "calibration": args.calibration, "run": args.run,
           "run_uptime": run["uptime_before"], "run_other_jobs_cores": run["cpu"]["other_jobs_cores"],
           "calibration_other_jobs_cores": max(w["other_jobs_cores"]
                                               for w in cal["background_windows"]),
           "step_ms": run["step_ms"], "probes": len(run["probes"]),
           "queue_median_steps": run["queue_steps_median"],
           "schedule_ahead_steps": args.schedule_ahead_steps,
           "measured_median_steps": median(measured), "measured_mean_steps": statistics.fmean(measured),
           "simulated_step_ms": sim_step_ms, "simulated_median_steps": median(sim), "simulated_mean_steps": statistics.fmean(sim),
           "closed_form_mean_steps": closed}
    res["error_median"] = res["simulated_median_steps"] / res["measured_median_steps"] - 1
    res["error_mean"] = res["simulated_mean_steps"] / res["measured_mean_steps"] - 1
    return res


def pool(args) -> dict:
    """A calibration whose every figure is the median of the given calibration runs' (the step's
    terms, the outside cost): steadier than one run on a shared machine. Give it runs other than
    the one it will predict."""
    cals = [json.loads(Path(p).read_text()) for p in args.calibrations]
    keys = ("decode_base", "decode_per_seq", "decode_per_kv_token", "prefill_base",
            "prefill_per_token", "new_seq_extra", "outside_base", "outside_per_token")
    pooled = {k: median([c[k] for c in cals]) for k in keys}
    return {"kind": "calibration (median of runs)", "runs": args.calibrations, **pooled,
            "background_windows": [w for c in cals for w in c["background_windows"]]}


def table(args) -> dict:
    """The predictions as the rows of docs/accuracy.md's table, and their medians."""
    preds = [json.loads(Path(p).read_text()) for p in args.predictions]
    print("| run | load average (1 min) | other jobs (cores) | step (ms) | measured p50 / mean "
          "(steps) | capsim p50 / mean (steps) | closed form (steps) | error p50 / mean |")
    print("|---|---|---|---|---|---|---|---|")
    for p in preds:
        load = p["run_uptime"].split("load average:")[1].split(",")[0].strip()
        print(f"| {Path(p['run']).stem} | {load} | {p['run_other_jobs_cores']:.2f} | "
              f"{p['step_ms']:.1f} | {p['measured_median_steps']:.2f} / "
              f"{p['measured_mean_steps']:.2f} | {p['simulated_median_steps']:.2f} / "
              f"{p['simulated_mean_steps']:.2f} | {p['closed_form_mean_steps']:.2f} | "
              f"{p['error_median']:+.1%} / {p['error_mean']:+.1%} |")
    keys = ("measured_median_steps", "measured_mean_steps", "simulated_median_steps",
            "simulated_mean_steps", "closed_form_mean_steps")
    res = {k: median([p[k] for p in preds]) for k in keys}
    res["error_of_medians_p50"] = res["simulated_median_steps"] / res["measured_median_steps"] - 1
    res["error_of_medians_mean"] = res["simulated_mean_steps"] / res["measured_mean_steps"] - 1
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("calibrate", "measure"):
        p = sub.add_parser(name)
        p.add_argument("--server", type=Path, required=True)
        p.add_argument("-o", "--out", required=True)
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--background", type=int, default=4, help="background streams (B)")
        p.add_argument("--background-prompt", type=int, default=16)
        p.add_argument("--warmup-s", type=float, default=3.0)
        p.add_argument("--pin", action="store_true",
                       help="pin the API server, the engine core and this client to the cores "
                            "the worker is not bound to (docs/accuracy.md: it makes the engine "
                            "core the bottleneck)")
    cal, mea = sub.choices["calibrate"], sub.choices["measure"]
    cal.add_argument("--lengths", default="16,64,256")
    cal.add_argument("--reps", type=int, default=6)
    cal.add_argument("--idle-gap-s", type=float, default=0.3)
    cal.add_argument("--background-s", type=float, default=40.0)
    cal.add_argument("--window-s", type=float, default=5.0)
    mea.add_argument("--probes", type=int, default=30)
    mea.add_argument("--probe-prompt", type=int, default=64)
    mea.add_argument("--probe-output", type=int, default=4)
    mea.add_argument("--gap-min-s", type=float, default=0.6)
    mea.add_argument("--gap-max-s", type=float, default=1.4)
    pre = sub.add_parser("predict")
    pre.add_argument("--calibration", required=True)
    pre.add_argument("--run", required=True)
    pre.add_argument("--capsim", default=str(Path(__file__).resolve().parent.parent
                                             / "target" / "release" / "capsim"))
    pre.add_argument("--schedule-ahead-steps", type=int, default=0)
    pre.add_argument("-o", "--out", required=True)
    poo = sub.add_parser("pool")
    poo.add_argument("calibrations", nargs="+")
    poo.add_argument("-o", "--out", required=True)
    tab = sub.add_parser("table")
    tab.add_argument("predictions", nargs="+")
    tab.add_argument("-o", "--out", required=True)
    args = ap.parse_args()
    result = {"calibrate": calibrate, "measure": measure, "predict": predict, "pool": pool,
              "table": table}[args.cmd](args)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    shown = {k: v for k, v in result.items() if not isinstance(v, (list, dict))}
    print(json.dumps(shown, indent=1))


if __name__ == "__main__":
    main()
