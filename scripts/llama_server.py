#!/usr/bin/env python3
"""A real OpenAI-compatible server on 127.0.0.1: llama.cpp (through llama-cpp-python's server)
serving a tiny random-weight model that this script writes itself, so nothing is downloaded
from a model hub. Four commands:

    scripts/llama_server.py install
        Installs the pinned packages of scripts/requirements-llama.txt into the running Python's
        environment (.venv, when run as scripts/setup.sh does): llama-cpp-python[server], built
        from source (PyPI has no Linux wheel of it; 2.5-6 minutes on 2 cores), and gguf. Does
        nothing when both are installed at the pinned versions.
    scripts/llama_server.py model -o M.gguf [--seed 0] [--vocab 512] [--eos first|never]
        Writes a llama-architecture GGUF with random weights: 2 layers, 64-wide, 4 heads, a
        2,048-token context and a sentencepiece ("llama") tokenizer of `--vocab` tokens:
        <unk> <s> </s>, the 256 byte tokens, then the words "▁a".."▁z" and "▁w<N>". The same
        seed writes the same file. The weights are random, but shaped so that greedy decoding
        only ever emits word tokens (each streams as its own non-empty text), and, with
        `--eos first` (the default), so that </s> is the likeliest token at every step: a
        completion reaches its requested length only if the server honours `min_tokens` or
        `ignore_eos`. `--eos never` makes </s> as unlikely as the byte tokens.
    scripts/llama_server.py start --dir DIR [--gguf M.gguf] [--name tiny]
        Starts the server on a free loopback port for the model (written to DIR/tiny.gguf with
        the defaults above when --gguf is not given), waits until it lists the model, and
        writes DIR/pid and DIR/ports.json ({"http": PORT, "model": NAME}).
    scripts/llama_server.py stop --dir DIR
        Stops the server started there, by its PID.

llama-cpp-python's server serves one completion at a time (the others wait for its lock) and,
by default, cuts a streamed completion short (with a normal end) as soon as another request
waits; `start` turns that off (`--interrupt_requests False`), else an open-loop replay would
see truncated answers counted as complete.
"""
import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from local_server import free_port, stop_dir, stop_pid

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "scripts" / "requirements-llama.txt"
# Only what the model and server need; the rest of llama.cpp (its tools, tests, examples, the
# multimodal library) would double the build time.
CMAKE_ARGS = ("-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "
              "-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF")

# The model's shape.
N_LAYER, N_EMBD, N_HEAD, N_FF, N_CTX = 2, 64, 4, 128, 2048
UNK, BOS, EOS, FIRST_BYTE, FIRST_WORD = 0, 1, 2, 3, 259
# Logit weight on the constant residual dimension: far beyond the random part's spread (about 1).
STEER = 8.0


def pinned() -> dict:
    """The packages of requirements-llama.txt, name -> version."""
    pins = {}
    for line in REQUIREMENTS.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            pins[name.split("[")[0]] = version
    return pins


def install() -> None:
    missing = []
    for name, version in pinned().items():
        try:
            if importlib.metadata.version(name) == version:
                continue
        except importlib.metadata.PackageNotFoundError:
            pass
        missing.append(f"{name}=={version}")
    if not missing:
        return
    print(f"llama_server: installing {', '.join(missing)} (llama-cpp-python builds from source: "
          "minutes)", file=sys.stderr)
    env = dict(os.environ)
    env.setdefault("CMAKE_ARGS", CMAKE_ARGS)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "-r", str(REQUIREMENTS)], check=True, env=env)


def vocabulary(size: int) -> tuple[list[str], list[int]]:
    """Token pieces and types: <unk> <s> </s>, 256 bytes, '▁a'..'▁z', then '▁w<N>'."""
    import gguf
    if size < FIRST_WORD + 26:
        raise SystemExit(f"--vocab {size} is too small: it needs at least {FIRST_WORD + 26}")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    words = [f"\u2581{chr(ord('a') + i)}" for i in range(26)]
    words += [f"\u2581w{i}" for i in range(size - FIRST_WORD - 26)]
    return tokens + words, [int(t) for t in types] + [int(gguf.TokenType.NORMAL)] * len(words)


def write_model(path: Path, seed: int, vocab: int, eos: str) -> None:
    """Writes the tiny random-weight llama GGUF described in the module's doc."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    tokens, types = vocabulary(vocab)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    # Dimension 0 of the residual stream is the same constant for every token and no layer
    # writes to it, so after the final norm it is always positive; the output rows' weight on
    # it then pushes a token's logit up (</s> with --eos first) or down (the control and byte
    # tokens) whatever the context.
    embedding = rng.standard_normal((vocab, N_EMBD)).astype(np.float32)
    embedding[:, 0] = 4.0
    output = matrix(vocab, N_EMBD)
    output[:, 0] = 0.0
    output[:FIRST_WORD, 0] = -STEER
    output[EOS, 0] = STEER if eos == "first" else -STEER

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"capsim-tiny-random-seed{seed}")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * vocab)
    writer.add_token_types(types)
    writer.add_unk_token_id(UNK)
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(EOS)
    # No <s> before a text prompt: "a b c" is then exactly three tokens, as many as its words.
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(True)

    writer.add_tensor("token_embd.weight", embedding)
    for layer in range(N_LAYER):
        blk = f"blk.{layer}"
        writer.add_tensor(f"{blk}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v"):
            writer.add_tensor(f"{blk}.{name}.weight", matrix(N_EMBD, N_EMBD))
        attn_output = matrix(N_EMBD, N_EMBD)
        attn_output[0, :] = 0.0
        writer.add_tensor(f"{blk}.attn_output.weight", attn_output)
        writer.add_tensor(f"{blk}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"{blk}.ffn_gate.weight", matrix(N_FF, N_EMBD))
        writer.add_tensor(f"{blk}.ffn_up.weight", matrix(N_FF, N_EMBD))
        ffn_down = matrix(N_EMBD, N_FF)
        ffn_down[0, :] = 0.0
        writer.add_tensor(f"{blk}.ffn_down.weight", ffn_down)
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", output)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()



def start(args: argparse.Namespace) -> None:
    out = Path(args.dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    model = Path(args.gguf).resolve() if args.gguf else out / "tiny.gguf"
    if not model.exists():
        write_model(model, seed=0, vocab=512, eos="first")
    port = free_port()
    log = open(out / "llama_server.log", "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(model),
         "--model_alias", args.name, "--host", "127.0.0.1", "--port", str(port),
         "--n_ctx", str(N_CTX), "--n_threads", str(args.threads),
         "--n_threads_batch", str(args.threads), "--interrupt_requests", "False",
         "--verbose", "False"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (out / "pid").write_text(str(process.pid))
    deadline = time.time() + args.ready_timeout
    url = f"http://127.0.0.1:{port}/v1/models"
    while time.time() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"llama_cpp.server exited ({process.returncode}); "
                             f"see {out / 'llama_server.log'}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                listed = [m["id"] for m in json.load(r)["data"]]
                if args.name in listed:
                    ports = {"http": port, "model": args.name}
                    (out / "ports.json").write_text(json.dumps(ports))
                    print(json.dumps(ports))
                    return
        except OSError:
            pass
        time.sleep(0.1)
    stop_pid(process.pid)
    raise SystemExit(f"llama_cpp.server not ready within {args.ready_timeout} s; "
                     f"see {out / 'llama_server.log'}")



def stop(args: argparse.Namespace) -> None:
    stop_dir(args.dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install")
    m = sub.add_parser("model")
    m.add_argument("-o", "--out", required=True)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--vocab", type=int, default=512)
    m.add_argument("--eos", choices=["first", "never"], default="first")
    s = sub.add_parser("start")
    s.add_argument("--dir", required=True)
    s.add_argument("--gguf")
    s.add_argument("--name", default="tiny")
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--ready-timeout", type=float, default=120.0)
    t = sub.add_parser("stop")
    t.add_argument("--dir", required=True)
    args = parser.parse_args()
    commands = {
        "install": install,
        "model": lambda: write_model(Path(args.out), args.seed, args.vocab, args.eos),
        "start": lambda: start(args),
        "stop": lambda: stop(args),
    }
    commands[args.command]()


if __name__ == "__main__":
    main()
