#!/usr/bin/env python3
"""A real Triton Inference Server on 127.0.0.1, set up from a capsim scenario.

The `tritonserver` binary comes from the `nvidia-pytriton` wheel on PyPI (pinned below), which
bundles it with the Python backend; it runs on the CPU. Three commands:

    scripts/triton.py install
        Downloads the wheel (no dependencies) and unpacks the server into .triton/, with the
        Python 3.11 backend stub in place and numpy 1.26 beside it (the stub is built against
        numpy 1's C API: with numpy 2 it misreads output sizes).
    scripts/triton.py start --scenario S.toml --model fixed --a 2ms --b 0.5ms --dir DIR
        Writes a model repository in DIR whose config.pbtxt comes from the scenario's default
        pool (max_batch_size, preferred_batch_size, max_queue_delay_microseconds, instance_group
        count = gpus x instance_count; a model warm-up that runs a batch of one and a full batch
        on every instance while the model loads), starts Triton on free loopback ports, waits
        until it is ready, and writes DIR/pid, DIR/ports.json ({"http": ..., "grpc": ...,
        "metrics": ...}) and DIR/stats-at-ready.json.
        `--model fixed` is a model whose every batch takes exactly a + b * batch_size: it sleeps
        for all but the last 0.2 ms and spins only that, so the server and a load generator can
        share two cores. `--model onnx --onnx M.onnx` runs an ONNX model with ONNX Runtime inside
        the Python backend.
    scripts/triton.py stats --dir DIR [--name fixed]
        Prints the model's statistics (`GET /v2/models/NAME/stats`) since the server was ready
        (the warm-up, which Triton counts, subtracted) as JSON.
    scripts/triton.py stop --dir DIR
        Stops the server started there, by its PID.
"""
import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
import zipfile
from pathlib import Path

from local_server import free_port, stop_dir, stop_pid

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / ".triton"
WHEEL = "nvidia-pytriton==0.7.0"
NUMPY = "numpy==1.26.4"
PYTHON_STUB = f"{sys.version_info.major}.{sys.version_info.minor}"


def install() -> None:
    server = HOME / "server" / "bin" / "tritonserver"
    if server.exists() and (HOME / "numpy1" / "numpy").exists():
        return
    HOME.mkdir(exist_ok=True)
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    wheels = HOME / "wheel"
    subprocess.run([*pip, "download", "--no-deps", "-d", str(wheels), WHEEL], check=True)
    wheel = next(wheels.glob("nvidia_pytriton-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        members = [m for m in z.namelist()
                   if m.startswith("pytriton/tritonserver/") or m.startswith("nvidia_pytriton.libs/")]
        z.extractall(HOME / "unpacked", members)
    shutil.rmtree(HOME / "server", ignore_errors=True)
    shutil.move(str(HOME / "unpacked" / "pytriton" / "tritonserver"), str(HOME / "server"))
    shutil.rmtree(HOME / "libs", ignore_errors=True)
    shutil.move(str(HOME / "unpacked" / "nvidia_pytriton.libs"), str(HOME / "libs"))
    shutil.rmtree(HOME / "unpacked")
    stub = HOME / "server" / "python_backend_stubs" / PYTHON_STUB / "triton_python_backend_stub"
    shutil.copy(stub, HOME / "server" / "backends" / "python" / "triton_python_backend_stub")
    for binary in [HOME / "server" / "bin" / "tritonserver",
                   HOME / "server" / "backends" / "python" / "triton_python_backend_stub"]:
        binary.chmod(0o755)
    subprocess.run([*pip, "install", "--no-warn-conflicts", "--target", str(HOME / "numpy1"), NUMPY],
                   check=True)
    shutil.rmtree(wheels)


def duration_us(text: str) -> float:
    """A capsim duration ('2ms', '500us', '0') in microseconds."""
    text = str(text).strip()
    for unit, scale in (("ns", 1e-3), ("us", 1.0), ("ms", 1e3), ("s", 1e6)):
        if text.endswith(unit) and text[: -len(unit)].replace(".", "", 1).isdigit():
            return float(text[: -len(unit)]) * scale
    if float(text) == 0:
        return 0.0
    raise SystemExit(f"cannot read duration {text!r}: write it as 2ms, 500us or 1s")


def queue_policy(queue: dict) -> str:
    """The scenario's `[queue]` as Triton's dynamic_batching fields: priority levels and the
    default queue policy (size bound, timeout and its action). Any of them turns Triton's payload
    prefetching off, as it does capsim's, so a server without them batches differently."""
    fields = ""
    levels = int(queue.get("priority_levels", 1))
    if levels > 1:
        # `replay --endpoint` sends no priority, so every request waits at the default level;
        # the levels are there for what they do to the batcher (no prefetching).
        fields += f" priority_levels: {levels} default_priority_level: {levels}"
    policy = []
    if int(queue.get("max_queue_size", 0)) > 0:
        policy.append(f"max_queue_size: {int(queue['max_queue_size'])}")
    if "timeout" in queue:
        policy.append(f"default_timeout_microseconds: {int(round(duration_us(queue['timeout'])))}")
        policy.append(f"timeout_action: {str(queue.get('timeout_action', 'reject')).upper()}")
    if policy:
        fields += f" default_queue_policy {{ {' '.join(policy)} }}"
    return fields


def config_pbtxt(scenario: dict, name: str, backend_inputs: str, outputs: str) -> str:
    batcher = scenario.get("batcher", {})
    execution = scenario.get("execution", {})
    max_batch = int(batcher.get("max_batch_size", 1))
    count = int(execution.get("gpus", 1)) * int(execution.get("instance_count", 1))
    lines = [f'name: "{name}"', 'backend: "python"', f"max_batch_size: {max_batch}",
             backend_inputs, outputs]
    if max_batch > 1:
        delay = int(round(duration_us(batcher.get("max_queue_delay", "0"))))
        preferred = batcher.get("preferred_batch_size", [])
        dyn = f"dynamic_batching {{ max_queue_delay_microseconds: {delay}"
        if preferred:
            dyn += f" preferred_batch_size: [ {', '.join(str(p) for p in preferred)} ]"
        lines.append(dyn + queue_policy(scenario.get("queue", {})) + " }")
    lines.append(f"instance_group [ {{ count: {count} kind: KIND_CPU }} ]")
    lines.append(model_warmup(max_batch))
    return "\n".join(lines) + "\n"


def model_warmup(max_batch: int) -> str:
    """Triton's own warm-up, run on every model instance while the model loads (before the
    server is ready): a batch of one and a full batch of 16 zero tokens. Without it each
    instance's first batch takes 40-58 ms (the Python backend's first `execute`, 14-25 times
    a fixed-time batch), and every run began by draining the backlog it left."""
    sizes = sorted({1, max(1, max_batch)})
    samples = [
        f'{{ name: "warmup_{size}" batch_size: {size} inputs {{ key: "input_ids" value: '
        f'{{ data_type: TYPE_INT64 dims: [ 16 ] zero_data: true }} }} }}'
        for size in sizes]
    return f"model_warmup [ {', '.join(samples)} ]"


FIXED_MODEL = '''import sys
sys.path.insert(0, {numpy1!r})
import time
import numpy as np
import triton_python_backend_utils as pb_utils

A_S, B_S, SPIN_S = {a_s!r}, {b_s!r}, 0.0002


class TritonPythonModel:
    def execute(self, requests):
        """Every batch takes exactly a + b * batch_size: sleep, then spin the last 0.2 ms."""
        start = time.perf_counter()
        deadline = start + A_S + B_S * len(requests)
        if deadline - start > SPIN_S:
            time.sleep(deadline - start - SPIN_S)
        while time.perf_counter() < deadline:
            pass
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy()
            y = np.zeros((x.shape[0], 2), dtype=np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("logits", y)]))
        return responses
'''

ONNX_MODEL = '''import sys
sys.path.insert(0, {numpy1!r})
sys.path.append({site!r})
import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession({onnx!r}, options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def execute(self, requests):
        """One session run per batch: the requests' inputs padded to the longest and stacked."""
        ids = [pb_utils.get_input_tensor_by_name(r, "input_ids").as_numpy() for r in requests]
        length = max(x.shape[1] for x in ids)
        batch = np.zeros((sum(x.shape[0] for x in ids), length), dtype=np.int64)
        row = 0
        for x in ids:
            batch[row:row + x.shape[0], : x.shape[1]] = x
            row += x.shape[0]
        feeds = {{name: batch if "mask" not in name else (batch != 0).astype(np.int64) for name in self.inputs}}
        logits = self.session.run(None, feeds)[0].astype(np.float32)
        responses, row = [], 0
        for x in ids:
            out = logits[row:row + x.shape[0]]
            row += x.shape[0]
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("logits", out)]))
        return responses
'''



def start(args: argparse.Namespace) -> None:
    install()
    scenario = tomllib.loads(Path(args.scenario).read_text())
    out = Path(args.dir).resolve()
    repo = out / "repository"
    shutil.rmtree(repo, ignore_errors=True)
    model_dir = repo / args.name / "1"
    model_dir.mkdir(parents=True)
    numpy1 = str(HOME / "numpy1")
    # Ragged batching lets requests of different lengths share a batch (Triton batches only equal
    # shapes otherwise); each model below reads its requests one by one.
    inputs = ('input [ { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] '
              'allow_ragged_batch: true } ]')
    outputs = 'output [ { name: "logits" data_type: TYPE_FP32 dims: [ -1 ] } ]'
    if args.model == "fixed":
        code = FIXED_MODEL.format(numpy1=numpy1, a_s=duration_us(args.a) * 1e-6,
                                  b_s=duration_us(args.b) * 1e-6)
    else:
        import site
        code = ONNX_MODEL.format(numpy1=numpy1, site=site.getsitepackages()[0],
                                 onnx=str(Path(args.onnx).resolve()))
    (model_dir / "model.py").write_text(code)
    (repo / args.name / "config.pbtxt").write_text(config_pbtxt(scenario, args.name, inputs, outputs))
    ports = {"http": free_port(), "grpc": free_port(), "metrics": free_port()}
    env = dict(os.environ)
    libdir = Path(sys.base_prefix) / "lib"
    # The active Python's own lib first, else the stub loads the system libpython and crashes.
    env["LD_LIBRARY_PATH"] = f"{libdir}:{HOME / 'libs'}:{env.get('LD_LIBRARY_PATH', '')}"
    log = open(out / "triton.log", "w")
    # The Python backend's shared-memory regions carry this server's own prefix, so that `stop`
    # can remove what a crashed server left in /dev/shm (Triton only unlinks them on a clean exit).
    shm_prefix = f"capsim_{hashlib.sha1(str(out).encode()).hexdigest()[:12]}_{os.getpid()}_"
    (out / "shm-prefix").write_text(shm_prefix)
    pin = ["taskset", "-c", args.cpus] if args.cpus else []
    # Triton's own per-request timestamps (queue start, compute start and end, HTTP send),
    # written every 1,000 requests to DIR/trace.json.0, .1, ...: Triton 2.51 kept in memory
    # until shutdown (log-frequency 0) corrupts its heap at a few hundred requests a second
    # ("malloc(): invalid size", std::length_error) and dies.
    trace = ([f"--trace-config=triton,file={out / 'trace.json'}", "--trace-config=level=TIMESTAMPS",
              "--trace-config=rate=1", "--trace-config=count=-1",
              "--trace-config=triton,log-frequency=1000"] if args.trace else [])
    process = subprocess.Popen(
        [*pin, str(HOME / "server" / "bin" / "tritonserver"),
         f"--model-repository={repo}",
         f"--backend-directory={HOME / 'server' / 'backends'}",
         "--http-address=127.0.0.1", f"--http-port={ports['http']}",
         "--grpc-address=127.0.0.1", f"--grpc-port={ports['grpc']}",
         f"--metrics-port={ports['metrics']}", "--metrics-address=127.0.0.1",
         f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
         "--log-verbose=0", *trace],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    (out / "pid").write_text(str(process.pid))
    deadline = time.time() + 60
    url = f"http://127.0.0.1:{ports['http']}/v2/health/ready"
    while time.time() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"tritonserver exited ({process.returncode}); see {out / 'triton.log'}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    (out / "ports.json").write_text(json.dumps(ports))
                    # Triton counts the warm-up in its statistics: `stats` subtracts these.
                    (out / "stats-at-ready.json").write_text(
                        json.dumps(model_stats(out, args.name)))
                    print(json.dumps(ports))
                    return
        except OSError:
            pass
        time.sleep(0.1)
    stop_pid(process.pid)
    raise SystemExit(f"tritonserver not ready within 60 s; see {out / 'triton.log'}")



def stop(args: argparse.Namespace) -> None:
    stop_dir(args.dir)
    # A server that crashed leaves its Python backend stubs behind: they name the repository.
    repository = str((Path(args.dir) / "repository").resolve())
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(part.decode(errors="replace").startswith(repository) for part in command[1:]):
            try:
                os.kill(int(proc.name), signal.SIGKILL)
            except ProcessLookupError:
                pass
    remove_shm_regions(Path(args.dir))


def remove_shm_regions(out: Path) -> None:
    """Unlinks the shared-memory regions of the server started in `out` that are still in
    /dev/shm (a crashed server's), by the prefix `start` gave them."""
    prefix_file = out / "shm-prefix"
    if not prefix_file.exists():
        return
    prefix = prefix_file.read_text().strip()
    for region in Path("/dev/shm").glob(prefix + "*"):
        region.unlink(missing_ok=True)


def model_stats(out: Path, name: str) -> dict:
    """The model's statistics as the Triton started in `out` reports them now (cumulative since
    it loaded, the warm-up included)."""
    port = json.loads((Path(out) / "ports.json").read_text())["http"]
    url = f"http://127.0.0.1:{port}/v2/models/{name}/stats"
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)["model_stats"][0]


def stats_since(after: dict, before: dict) -> dict:
    """Statistics `after` less `before`: every count and time subtracted (`batch_stats` by batch
    size, sizes left with no batch dropped), the other fields as `after` has them."""
    def minus(a, b):
        if isinstance(a, dict):
            return {k: minus(v, b.get(k)) if isinstance(b, dict) and k in b else v
                    for k, v in a.items()}
        if isinstance(a, (int, float)) and not isinstance(a, bool) and isinstance(b, (int, float)):
            return a - b
        return a
    since = {k: v for k, v in minus(after, before).items()
             if k not in ("batch_stats", "last_inference")}
    since["last_inference"] = after.get("last_inference")
    earlier = {b["batch_size"]: b for b in before.get("batch_stats", [])}
    since["batch_stats"] = [
        d for d in (minus(b, earlier.get(b["batch_size"], {})) | {"batch_size": b["batch_size"]}
                    for b in after.get("batch_stats", []))
        if d["compute_infer"]["count"] > 0]
    return since


def stats_since_ready(out: Path, name: str) -> dict:
    """The model's statistics since the Triton started in `out` was ready: its warm-up left out."""
    before = json.loads((Path(out) / "stats-at-ready.json").read_text())
    return stats_since(model_stats(out, name), before)


def stats(args: argparse.Namespace) -> None:
    print(json.dumps(stats_since_ready(Path(args.dir), args.name)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install")
    s = sub.add_parser("start")
    s.add_argument("--scenario", required=True)
    s.add_argument("--dir", required=True)
    s.add_argument("--model", choices=["fixed", "onnx"], default="fixed")
    s.add_argument("--name", default="fixed")
    s.add_argument("--a", default="2ms")
    s.add_argument("--b", default="0.5ms")
    s.add_argument("--onnx")
    s.add_argument("--cpus", help="CPU list for taskset (the server and its Python backend)")
    s.add_argument("--trace", action="store_true",
                   help="Triton traces every request's timestamps into DIR/trace.json.N")
    t = sub.add_parser("stop")
    t.add_argument("--dir", required=True)
    q = sub.add_parser("stats")
    q.add_argument("--dir", required=True)
    q.add_argument("--name", default="fixed")
    args = parser.parse_args()
    commands = {"install": install, "start": lambda: start(args), "stop": lambda: stop(args),
                "stats": lambda: stats(args)}
    commands[args.command]()


if __name__ == "__main__":
    main()
