#!/usr/bin/env python3
"""Measures an operator bundle of a model with PyTorch, in the LLMServingSim profiler's layout.

capsim reads the bundle with `[step_time] kind = "operators"` and `capsim calibrate --operators
DIR --model M` (crates/sim/src/timing/operators/llmservingsim.rs): `meta.yaml` beside one `tpN/`
folder per tensor-parallel degree holding

- `dense.csv` (`layer,tokens,time_us`): embedding, layernorm (the residual add fused with RMSNorm,
  as vLLM runs it), qkv_proj, qk_norm (Qwen3), rotary_emb, o_proj, gate_up_proj, act_fn,
  down_proj (dense MLPs only) and final_layernorm, each over a step's tokens;
- `per_sequence.csv` (`layer,sequences,time_us`): lm_head (the logits of the sampled positions)
  and sampler (softmax and a random draw over the whole vocabulary), over a step's sequences;
- `attention.csv` (`prefill_chunk,kv_prefill,n_decode,kv_decode,time_us`): one layer's attention
  of one prefill chunk over its history plus `n_decode` decodes each over `kv_decode` tokens;
- `moe.csv` (`tokens,activated_experts,time_us`), for mixtures of experts: one layer's router and
  experts over `tokens` tokens spread evenly over `activated_experts` experts.

Each tensor-parallel degree is one rank's shard (heads, KV heads, MLP width and vocabulary divided
by the degree) measured on the one GPU; the all-reduces between ranks are not measured here.
Weights are random (BF16 on a GPU) with the shapes of the model's Hugging Face `config.json`, so
no checkpoint is read. The operators are PyTorch's eager ones (cuBLAS GEMMs, PyTorch's
scaled-dot-product attention over contiguous KV), not vLLM's fused kernels and paged attention:
the bundle's `measurement` block says so.

Times are CUDA-event intervals, median of repeats after warm-up, with the L2 cache overwritten
before each repeat (a real step reads each layer's weights once, from memory). `--dry-run` runs a
tiny grid on the CPU in float32 with a wall-clock timer, for tests: its times are no GPU's.

    python3 scripts/device/measure_operators.py --model models/meta-llama/Llama-3.1-8B.json \
        --out $OUT/profiles
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import json
import math
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import time

FORMAT_VERSION = "capsim-measure-operators 1"


# ---------------------------------------------------------------------------------------------
# The model's shape, whole and on one rank


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """What the operators need of a Hugging Face config.json."""

    model_id: str
    model_type: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    rms_eps: float
    qk_norm: bool
    attention_bias: bool
    tied_embeddings: bool
    experts: int  # 0 for a dense model
    experts_per_token: int
    expert_intermediate: int
    config_sha256: str

    def weight_bytes(self, bytes_per_value: int) -> int:
        """Bytes of the whole model's weights (embeddings, layers, LM head)."""
        attention = 2 * self.hidden * self.heads * self.head_dim
        attention += 2 * self.hidden * self.kv_heads * self.head_dim
        if self.experts:
            mlp = self.experts * 3 * self.hidden * self.expert_intermediate
            mlp += self.hidden * self.experts
        else:
            mlp = 3 * self.hidden * self.intermediate
        tables = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return bytes_per_value * (tables + self.layers * (attention + mlp))

    def kv_bytes_per_token(self, tp: int, bytes_per_value: int) -> int:
        """KV-cache bytes of one token over all layers on one of `tp` ranks."""
        return 2 * self.layers * (self.kv_heads // tp) * self.head_dim * bytes_per_value


class ConfigError(Exception):
    """A config.json that cannot be measured; the message names the file, key and fix."""


def _required(config: dict, key: str, path: pathlib.Path) -> int:
    value = config.get(key)
    if not isinstance(value, int) or value <= 0:
        raise ConfigError(
            f"{path}: key {key!r} is {value!r}; a Hugging Face config.json gives it as a "
            f"positive whole number"
        )
    return value


def _model_id(path: pathlib.Path, config: dict) -> str:
    """The hub id: the path under a `models/` folder without `.json` (models/Qwen/Qwen3-32B.json
    is Qwen/Qwen3-32B), else `_name_or_path`, else the file's stem."""
    parts = path.resolve().parts
    if "models" in parts:
        below = parts[len(parts) - parts[::-1].index("models") :]
        return "/".join(below)[: -len(path.suffix) or None]
    return str(config.get("_name_or_path") or path.stem)


def read_model(path: pathlib.Path) -> ModelShape:
    """The shape of the model whose config.json is at `path`."""
    try:
        text = path.read_text()
        config = json.loads(text)
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: {e}; give a Hugging Face config.json") from e
    hidden = _required(config, "hidden_size", path)
    heads = _required(config, "num_attention_heads", path)
    experts = next(
        (config[k] for k in ("num_local_experts", "num_experts", "n_routed_experts")
         if isinstance(config.get(k), int) and config[k] > 0),
        0,
    )
    intermediate = _required(config, "intermediate_size", path)
    model_type = str(config.get("model_type", ""))
    return ModelShape(
        model_id=_model_id(path, config),
        model_type=model_type,
        layers=_required(config, "num_hidden_layers", path),
        hidden=hidden,
        heads=heads,
        kv_heads=config.get("num_key_value_heads") or heads,
        head_dim=config.get("head_dim") or hidden // heads,
        intermediate=intermediate,
        vocab=_required(config, "vocab_size", path),
        rms_eps=float(config.get("rms_norm_eps", 1e-6)),
        qk_norm=model_type in ("qwen3", "qwen3_moe"),
        attention_bias=bool(config.get("attention_bias", False)),
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        experts=experts,
        experts_per_token=(_required(config, "num_experts_per_tok", path) if experts else 0),
        expert_intermediate=config.get("moe_intermediate_size") or intermediate,
        config_sha256=hashlib.sha256(text.encode()).hexdigest(),
    )


@dataclasses.dataclass(frozen=True)
class RankShape:
    """One rank's shard of a layer at tensor-parallel degree `tp`."""

    tp: int
    heads: int
    kv_heads: int
    intermediate: int
    expert_intermediate: int
    vocab: int


def rank_shape(model: ModelShape, tp: int) -> RankShape:
    """The shard of one of `tp` ranks; an error naming the key a degree does not divide (capsim
    checks a bundle against its model by exactly these quotients)."""
    widths = {
        "num_attention_heads": model.heads,
        "num_key_value_heads": model.kv_heads,
        "intermediate_size": model.intermediate,
        "vocab_size": model.vocab,
    }
    if model.experts:
        widths["moe_intermediate_size"] = model.expert_intermediate
    for key, value in widths.items():
        if value % tp:
            raise ConfigError(
                f"{model.model_id}: tensor-parallel degree {tp} does not divide {key} "
                f"({value}); give --tp degrees that divide the heads, KV heads, MLP width "
                f"and vocabulary"
            )
    return RankShape(
        tp=tp,
        heads=model.heads // tp,
        kv_heads=model.kv_heads // tp,
        intermediate=model.intermediate // tp,
        expert_intermediate=model.expert_intermediate // tp,
        vocab=model.vocab // tp,
    )


def default_degrees(model: ModelShape, memory_bytes: int, bytes_per_value: int) -> list[int]:
    """The smallest power-of-two degree (up to 8) whose rank holds its share of the weights in
    80% of the card's memory (the rest for KV cache and activations, as a deployment would need),
    and twice that, keeping those that divide the model's widths."""
    fitting = [
        tp for tp in (1, 2, 4, 8)
        if model.weight_bytes(bytes_per_value) / tp <= 0.8 * memory_bytes
    ]
    if not fitting:
        return []
    degrees = []
    for tp in (fitting[0], 2 * fitting[0]):
        try:
            rank_shape(model, tp)
            degrees.append(tp)
        except ConfigError:
            pass
    return degrees


# ---------------------------------------------------------------------------------------------
# The grids


def ladder(low: int, high: int, factor: float) -> list[int]:
    """Whole numbers from `low` to `high` (both kept), each `factor` times the last."""
    values, x = [], float(low)
    while round(x) < high:
        if not values or round(x) != values[-1]:
            values.append(round(x))
        x *= factor
    return values + [high]


def interleaved(low: int, high: int) -> list[int]:
    """Powers of two from `low` to `high` with the 1.5x point between each pair (1, 2, 3, 4, 6,
    8, 12, ...): dense enough for the GEMMs' wave steps, few enough for the time budget."""
    values = set()
    x = low
    while x <= high:
        values.add(x)
        if x * 3 // 2 <= high and x >= 2:
            values.add(x * 3 // 2)
        x *= 2
    return sorted(values)


@dataclasses.dataclass(frozen=True)
class Grid:
    """The points measured. On a GPU: tokens to 8192 and sequences to 1024 (vLLM's
    max_num_batched_tokens and max_num_seqs defaults for a server on an 80 GB or larger card),
    attention contexts to 16384 by factors of 4 (about 1,300 points a degree: with the other
    tables, some 15 s a degree on an H100-class card, so the twelve bundles of the six shipped
    models at two degrees each fit in about 6 minutes)."""

    tokens: list[int]
    sequences: list[int]
    chunks: list[int]
    kv_prefill: list[int]
    n_decode: list[int]
    kv_decode: list[int]
    moe_tokens: list[int]
    warmup: int
    repeats: int

    def describe(self) -> dict:
        def span(values: list[int]) -> str:
            return ", ".join(str(v) for v in values)

        return {
            "tokens": span(self.tokens),
            "sequences": span(self.sequences),
            "chunks": span(self.chunks),
            "kv_prefill": span(self.kv_prefill),
            "n_decode": span(self.n_decode),
            "kv_decode": span(self.kv_decode),
            "moe_tokens": span(self.moe_tokens),
        }


GPU_GRID = Grid(
    tokens=interleaved(1, 8192),
    sequences=interleaved(1, 1024),
    chunks=ladder(16, 4096, 4) + [8192],
    kv_prefill=[0] + ladder(16, 16384, 4),
    n_decode=ladder(1, 1024, 4),
    kv_decode=ladder(16, 16384, 4),
    moe_tokens=ladder(1, 8192, 2),
    warmup=3,
    repeats=7,
)

DRY_GRID = Grid(
    tokens=[1, 2, 4, 8],
    sequences=[1, 2, 4],
    chunks=[4, 8],
    kv_prefill=[0, 8],
    n_decode=[1, 2],
    kv_decode=[4, 8],
    moe_tokens=[1, 2, 4, 8],
    warmup=1,
    repeats=3,
)


def attention_points(grid: Grid, max_tokens: int, kv_capacity: int) -> list[tuple]:
    """(prefill_chunk, kv_prefill, n_decode, kv_decode) of every point: pure prefills, pure
    decodes and mixed steps, within `max_tokens` new tokens and `kv_capacity` KV tokens."""
    points = [(c, kp, 0, 0) for c in grid.chunks for kp in grid.kv_prefill]
    points += [(0, 0, n, kd) for n in grid.n_decode for kd in grid.kv_decode]
    points += [
        (c, kp, n, kd)
        for c in grid.chunks for kp in grid.kv_prefill
        for n in grid.n_decode for kd in grid.kv_decode
    ]
    return [
        (c, kp, n, kd) for (c, kp, n, kd) in points
        if c + n <= max_tokens and c + kp + n * kd <= kv_capacity
    ]


def moe_points(grid: Grid, model: ModelShape) -> list[tuple[int, int]]:
    """(tokens, activated experts): from the experts one token reaches (`k`) up to every expert
    or all that `tokens * k` routings can reach, doubling."""
    k, experts = model.experts_per_token, model.experts
    points = []
    for t in grid.moe_tokens:
        reach = min(experts, t * k)
        for a in sorted(set(ladder(k, reach, 2)) if reach > k else {k}):
            points.append((t, a))
    return points


# ---------------------------------------------------------------------------------------------
# Timing


class Timer:
    """Times a call: CUDA events on a GPU (the L2 cache overwritten before each repeat, so a
    layer's weights come from memory as in a real step), the wall clock on the CPU."""

    def __init__(self, torch, device: str, grid: Grid):
        self.torch = torch
        self.device = device
        self.grid = grid
        self.flush = None
        if device == "cuda":
            # Twice the largest L2 of the cards this runs on (H200: 60 MB).
            self.flush = torch.empty(128 << 20, dtype=torch.uint8, device=device)

    def median_us(self, call) -> float:
        """The median time of `call()` over the grid's repeats, after its warm-up, in us."""
        for _ in range(self.grid.warmup):
            call()
        if self.device != "cuda":
            return self._wall_clock_us(call)
        torch = self.torch
        pairs = []
        for _ in range(self.grid.repeats):
            self.flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) * 1e3 for s, e in pairs)

    def _wall_clock_us(self, call) -> float:
        times = []
        for _ in range(self.grid.repeats):
            start = time.perf_counter_ns()
            call()
            times.append((time.perf_counter_ns() - start) / 1e3)
        return statistics.median(times)


class OutOfTime(Exception):
    """The time budget ran out in the middle of a bundle."""


@dataclasses.dataclass
class Budget:
    """The wall-clock deadline of the whole run; checked between points."""

    deadline: float

    def check(self) -> None:
        if time.monotonic() > self.deadline:
            raise OutOfTime()


# ---------------------------------------------------------------------------------------------
# The operators of one rank


class RankLayerNames:
    """The operators of dense.csv a model has (LLMServingSim's names)."""

    @staticmethod
    def dense(model: ModelShape) -> list[str]:
        names = ["embedding", "layernorm", "qkv_proj"]
        if model.qk_norm:
            names.append("qk_norm")
        names += ["rotary_emb", "o_proj"]
        if not model.experts:
            # A mixture of experts' MLP is its MoE block (moe.csv).
            names += ["gate_up_proj", "act_fn", "down_proj"]
        return names + ["final_layernorm"]


class RankLayer:
    """Random weights of one rank's layer (and the embedding and LM head) and the operators
    measured on them. Every operator is a call on inputs built before it is timed."""

    def __init__(self, torch, model: ModelShape, rank: RankShape, device: str, dtype):
        self.torch, self.model, self.rank = torch, model, rank
        self.device, self.dtype = device, dtype
        h, d = model.hidden, model.head_dim
        self.q_width = rank.heads * d
        self.kv_width = rank.kv_heads * d
        self.embedding = self._weight(rank.vocab, h)
        self.norm = torch.ones(h, device=device, dtype=dtype)
        self.head_norm = torch.ones(d, device=device, dtype=dtype)
        self.qkv = self._weight(self.q_width + 2 * self.kv_width, h)
        self.qkv_bias = (
            self._weight(self.q_width + 2 * self.kv_width) if model.attention_bias else None
        )
        self.o = self._weight(h, self.q_width)
        if not model.experts:
            self.gate_up = self._weight(2 * rank.intermediate, h)
            self.down = self._weight(h, rank.intermediate)
        self.lm_head = self._weight(rank.vocab, h)

    def _weight(self, *shape):
        # Small values keep sums finite in BF16; the values do not change a kernel's time.
        return self.torch.randn(*shape, device=self.device, dtype=self.dtype) * 0.02

    def _hidden(self, tokens: int):
        return self._weight(tokens, self.model.hidden)

    def _rms_norm(self, x, weight):
        return self.torch.nn.functional.rms_norm(
            x, (x.shape[-1],), weight, self.model.rms_eps
        )

    def dense_operators(self) -> dict:
        """name -> (tokens -> a call), the per-layer and per-step operators of dense.csv."""
        builders = {
            "embedding": self._embedding,
            "layernorm": self._layernorm,
            "qkv_proj": self._qkv_proj,
            "qk_norm": self._qk_norm,
            "rotary_emb": self._rotary_emb,
            "o_proj": self._o_proj,
            "gate_up_proj": self._gate_up_proj,
            "act_fn": self._act_fn,
            "down_proj": self._down_proj,
            "final_layernorm": self._layernorm,
        }
        return {name: builders[name] for name in RankLayerNames.dense(self.model)}

    def _embedding(self, tokens: int):
        ids = self.torch.randint(0, self.rank.vocab, (tokens,), device=self.device)
        return lambda: self.torch.nn.functional.embedding(ids, self.embedding)

    def _layernorm(self, tokens: int):
        # vLLM fuses the residual add into the RMSNorm; the add is timed with it.
        x, residual = self._hidden(tokens), self._hidden(tokens)

        def call():
            summed = x + residual
            return self._rms_norm(summed, self.norm)

        return call

    def _qkv_proj(self, tokens: int):
        x = self._hidden(tokens)
        return lambda: self.torch.nn.functional.linear(x, self.qkv, self.qkv_bias)

    def _qk_norm(self, tokens: int):
        d = self.model.head_dim
        q = self._weight(tokens, self.rank.heads, d)
        k = self._weight(tokens, self.rank.kv_heads, d)
        return lambda: (self._rms_norm(q, self.head_norm), self._rms_norm(k, self.head_norm))

    def _rotary_emb(self, tokens: int):
        torch, d = self.torch, self.model.head_dim
        q = self._weight(tokens, self.rank.heads, d)
        k = self._weight(tokens, self.rank.kv_heads, d)
        angles = torch.rand(tokens, 1, d // 2, device=self.device, dtype=torch.float32)
        cos, sin = angles.cos().to(self.dtype), angles.sin().to(self.dtype)

        def rotate(x):
            x1, x2 = x[..., : d // 2], x[..., d // 2 :]
            return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

        return lambda: (rotate(q), rotate(k))

    def _o_proj(self, tokens: int):
        x = self._weight(tokens, self.q_width)
        return lambda: self.torch.nn.functional.linear(x, self.o)

    def _gate_up_proj(self, tokens: int):
        x = self._hidden(tokens)
        return lambda: self.torch.nn.functional.linear(x, self.gate_up)

    def _act_fn(self, tokens: int):
        x = self._weight(tokens, 2 * self.rank.intermediate)
        width = self.rank.intermediate
        silu = self.torch.nn.functional.silu
        return lambda: silu(x[:, :width]) * x[:, width:]

    def _down_proj(self, tokens: int):
        x = self._weight(tokens, self.rank.intermediate)
        return lambda: self.torch.nn.functional.linear(x, self.down)

    def per_sequence_operators(self) -> dict:
        """name -> (sequences -> a call), the operators of per_sequence.csv."""
        return {"lm_head": self._lm_head, "sampler": self._sampler}

    def _lm_head(self, sequences: int):
        x = self._hidden(sequences)
        return lambda: self.torch.nn.functional.linear(x, self.lm_head)

    def _sampler(self, sequences: int):
        # After the ranks' logits are gathered: the whole vocabulary, in float32, a softmax at
        # temperature 1 and a draw (the exponential race, argmax of p / E with E ~ Exp(1)).
        torch = self.torch
        logits = torch.randn(sequences, self.model.vocab, device=self.device)

        def call():
            probs = torch.softmax(logits, dim=-1)
            race = torch.empty_like(probs).exponential_()
            return (probs / race).argmax(dim=-1)

        return call


class RankAttention:
    """One rank's attention over contiguous K and V buffers of `capacity` tokens, with
    PyTorch's scaled-dot-product attention (FlashAttention on Hopper in BF16) and its grouped
    query heads (`enable_gqa`): the prefill chunk causal over its history (the lower-right
    causal mask), the decodes one query each over their context."""

    def __init__(self, torch, model: ModelShape, rank: RankShape, capacity: int, max_tokens: int,
                 device: str, dtype):
        from torch.nn.attention.bias import causal_lower_right

        self.torch, self.causal_lower_right = torch, causal_lower_right
        d = model.head_dim
        self.shape = (rank.heads, rank.kv_heads, d)
        self.native_gqa = True
        self.native_gqa = self._grouped_heads_run(device, dtype)
        self.keys = torch.randn(capacity, rank.kv_heads, d, device=device, dtype=dtype)
        self.values = torch.randn(capacity, rank.kv_heads, d, device=device, dtype=dtype)
        self.queries = torch.randn(max_tokens, rank.heads, d, device=device, dtype=dtype)

    def _grouped_heads_run(self, device: str, dtype) -> bool:
        """Whether this PyTorch runs both kinds of call with grouped KV heads (`enable_gqa`) on
        this device; if not, K and V are expanded to every query head before a point is timed
        (which reads `heads / kv_heads` times the KV bytes: meta.yaml says which ran)."""
        heads, kv_heads, d = self.shape
        torch = self.torch
        q = torch.randn(1, heads, 4, d, device=device, dtype=dtype)
        k = torch.randn(1, kv_heads, 12, d, device=device, dtype=dtype)
        try:
            self._attend(q, k, k, self.causal_lower_right(4, 12), causal=False)()
            self._attend(q, k[:, :, :4], k[:, :, :4], None, causal=True)()
            return True
        except RuntimeError as e:
            print(f"grouped KV heads refused ({e}); expanding K and V", file=sys.stderr)
            return False

    def _kv(self, start: int, sequences: int, length: int):
        """Keys and values of `sequences` sequences of `length` tokens from token `start` of the
        buffers, as (sequences, kv_heads, length, head_dim) views (copies with every query
        head's KV when grouped heads are refused)."""
        heads, kv_heads, d = self.shape
        end = start + sequences * length
        k = self.keys[start:end].view(sequences, length, kv_heads, d).transpose(1, 2)
        v = self.values[start:end].view(sequences, length, kv_heads, d).transpose(1, 2)
        if not self.native_gqa:
            k = k.repeat_interleave(heads // kv_heads, dim=1)
            v = v.repeat_interleave(heads // kv_heads, dim=1)
        return k, v

    def _q(self, start: int, sequences: int, length: int):
        heads, _, d = self.shape
        end = start + sequences * length
        return self.queries[start:end].view(sequences, length, heads, d).transpose(1, 2)

    def step(self, chunk: int, history: int, decodes: int, context: int):
        """A call computing one layer's attention of a step: one prefill chunk of `chunk` tokens
        after `history` cached tokens, and `decodes` decodes over `context` tokens each."""
        calls = []
        if chunk:
            q = self._q(0, 1, chunk)
            k, v = self._kv(0, 1, history + chunk)
            mask = self.causal_lower_right(chunk, history + chunk) if history else None
            calls.append(self._attend(q, k, v, mask, causal=not history))
        if decodes:
            q = self._q(chunk, decodes, 1)
            k, v = self._kv(history + chunk, decodes, context)
            calls.append(self._attend(q, k, v, None, causal=False))
        return lambda: [c() for c in calls]

    def _attend(self, q, k, v, mask, causal: bool):
        """A call of the attention kernel on these tensors (bound here, not late)."""
        sdpa = self.torch.nn.functional.scaled_dot_product_attention
        grouped = self.native_gqa
        return lambda: sdpa(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=grouped)


class RankExperts:
    """One rank's mixture-of-experts block: every expert on the rank with its MLP width divided
    by the degree (vLLM's tensor-parallel MoE), the router's GEMM and top-k, then the experts as
    two batched GEMMs (torch.bmm over the activated experts' stacked weights) with the gather
    and the weighted scatter-add. The routing is set, not drawn: the `tokens * k` routed copies
    are spread evenly over `activated` experts, so each point measures what its name says. Not
    vLLM's fused MoE kernel: a grouped GEMM of the same weights and rows."""

    def __init__(self, torch, model: ModelShape, rank: RankShape, device: str, dtype):
        self.torch, self.model, self.device, self.dtype = torch, model, device, dtype
        h, w, e = model.hidden, rank.expert_intermediate, model.experts
        self.width = w
        self.router = torch.randn(e, h, device=device, dtype=dtype) * 0.02
        self.up = torch.randn(e, h, 2 * w, device=device, dtype=dtype) * 0.02
        self.down = torch.randn(e, w, h, device=device, dtype=dtype) * 0.02

    def block(self, tokens: int, activated: int):
        """A call computing the block over `tokens` tokens routed to `activated` experts."""
        torch, f = self.torch, self.torch.nn.functional
        k, h = self.model.experts_per_token, self.model.hidden
        per_expert = math.ceil(tokens * k / activated)
        # Slot s of the (activated, per_expert) layout holds token s // k; the padding slots
        # beyond tokens * k repeat token 0 with weight 0.
        slots = torch.arange(activated * per_expert, device=self.device)
        token_of_slot = torch.where(slots < tokens * k, slots // k, 0)
        slot_weight = (slots < tokens * k).to(self.dtype) / k
        x = torch.randn(tokens, h, device=self.device, dtype=self.dtype)
        up, down = self.up[:activated], self.down[:activated]

        def call():
            gates = torch.softmax(f.linear(x, self.router).float(), dim=-1)
            torch.topk(gates, k, dim=-1)
            rows = x.index_select(0, token_of_slot).view(activated, per_expert, h)
            gate_up = torch.bmm(rows, up)
            act = f.silu(gate_up[..., : self.width]) * gate_up[..., self.width :]
            out = torch.bmm(act, down).view(-1, h) * slot_weight[:, None]
            return torch.zeros_like(x).index_add_(0, token_of_slot, out)

        return call


# ---------------------------------------------------------------------------------------------
# Measuring one degree


@dataclasses.dataclass
class Tables:
    """The rows of one degree's CSV files, times in us."""

    dense: list = dataclasses.field(default_factory=list)
    per_sequence: list = dataclasses.field(default_factory=list)
    attention: list = dataclasses.field(default_factory=list)
    moe: list = dataclasses.field(default_factory=list)
    #: Whether the attention ran with grouped KV heads (else K and V were expanded).
    native_gqa: bool = True


@dataclasses.dataclass
class Setup:
    """What every degree's measurement shares."""

    torch: object
    device: str
    dtype: object
    grid: Grid
    timer: Timer
    budget: Budget
    memory_bytes: int
    bytes_per_value: int


def kv_capacity(setup: Setup, model: ModelShape, rank: RankShape) -> int:
    """KV tokens the attention buffers hold: what the card's memory would cache for the whole
    model at this degree (90% of it less the rank's weights, as vLLM's gpu_memory_utilization
    default leaves), capped so one layer's K and V buffers take at most a quarter of the card,
    and at the largest point of the grid."""
    if setup.device != "cuda":
        g = setup.grid
        return max(g.chunks) + max(g.kv_prefill) + max(g.n_decode) * max(g.kv_decode)
    per_token = model.kv_bytes_per_token(rank.tp, setup.bytes_per_value)
    free = 0.9 * setup.memory_bytes - model.weight_bytes(setup.bytes_per_value) / rank.tp
    cached = int(max(free, 0) // per_token)
    layer_token_bytes = per_token // model.layers
    buffer_cap = int(0.25 * setup.memory_bytes // (layer_token_bytes or 1))
    g = setup.grid
    largest = max(g.chunks) + max(g.kv_prefill) + max(g.n_decode) * max(g.kv_decode)
    return min(cached, buffer_cap, largest)


def measure_degree(setup: Setup, model: ModelShape, rank: RankShape) -> Tables:
    """Every table of one degree; `OutOfTime` when the budget runs out before the end."""
    tables = Tables()
    layer = RankLayer(setup.torch, model, rank, setup.device, setup.dtype)
    for name, build in layer.dense_operators().items():
        for tokens in setup.grid.tokens:
            setup.budget.check()
            tables.dense.append((name, tokens, setup.timer.median_us(build(tokens))))
    for name, build in layer.per_sequence_operators().items():
        for sequences in setup.grid.sequences:
            setup.budget.check()
            tables.per_sequence.append(
                (name, sequences, setup.timer.median_us(build(sequences)))
            )
    del layer
    tables.attention, tables.native_gqa = measure_attention(setup, model, rank)
    if model.experts:
        experts = RankExperts(setup.torch, model, rank, setup.device, setup.dtype)
        for tokens, activated in moe_points(setup.grid, model):
            setup.budget.check()
            us = setup.timer.median_us(experts.block(tokens, activated))
            tables.moe.append((tokens, activated, us))
        del experts
    return tables


def measure_attention(setup: Setup, model: ModelShape, rank: RankShape) -> tuple[list, bool]:
    """The attention grid's rows within the card's KV capacity, and whether grouped KV heads
    ran natively."""
    max_tokens = max(setup.grid.tokens)
    capacity = kv_capacity(setup, model, rank)
    attention = RankAttention(setup.torch, model, rank, capacity, max_tokens, setup.device,
                              setup.dtype)
    if not attention.native_gqa:
        # Each point's expanded copy of K and V must fit beside the buffers.
        capacity //= rank.heads // rank.kv_heads
    rows = []
    for point in attention_points(setup.grid, max_tokens, capacity):
        setup.budget.check()
        rows.append((*point, setup.timer.median_us(attention.step(*point))))
    return rows, attention.native_gqa


# ---------------------------------------------------------------------------------------------
# The bundle on disk


def write_csv(path: pathlib.Path, header: str, rows: list) -> None:
    lines = [header]
    for row in rows:
        *keys, us = row
        # Times below 0.001 us would print as 0, which capsim's calibration refuses.
        lines.append(",".join(str(k) for k in keys) + f",{max(us, 0.001):.4f}")
    path.write_text("\n".join(lines) + "\n")


def yaml_lines(mapping: dict, indent: int = 0) -> list[str]:
    """Block YAML of nested dicts of scalars and lists of numbers (what capsim's reader of
    meta.yaml understands: crates/sim/src/timing/operators/llmservingsim/meta.rs)."""
    lines = []
    for key, value in mapping.items():
        pad = " " * indent
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:")
            lines.extend(yaml_lines(value, indent + 2))
        elif isinstance(value, bool):
            lines.append(f"{pad}{key}: {'true' if value else 'false'}")
        elif isinstance(value, (int, float)):
            lines.append(f"{pad}{key}: {value}")
        elif isinstance(value, list):
            lines.append(f"{pad}{key}: [{', '.join(str(v) for v in value)}]")
        else:
            lines.append(f"{pad}{key}: '{str(value).replace(chr(39), chr(39) * 2)}'")
    return lines


def bundle_meta(model: ModelShape, measured: dict, env: dict, setup: Setup) -> dict:
    """meta.yaml: LLMServingSim's keys capsim reads (gpu, model, tp_degrees, the one rank's
    shape in engine_effective.hf_overrides, of the first degree) and how it was measured."""
    degrees = sorted(measured)
    rank = rank_shape(model, degrees[0])
    gqa = all(t.native_gqa for t in measured.values())
    return {
        "profiler_version": FORMAT_VERSION,
        "profiler": "scripts/device/measure_operators.py (PyTorch eager operators)",
        "torch_version": env["torch"],
        "cuda_version": env["cuda"],
        "driver_version": env["driver"],
        "gpu": env["device_name"],
        "hardware": env["hardware"],
        "profiled_at": env["measured_at"],
        "architecture": model.model_type,
        "architecture_sha256": model.config_sha256,
        "model": model.model_id,
        "variant": env["variant"],
        "tp_degrees": degrees,
        "engine_effective": {
            "tensor_parallel_size": degrees[0],
            "hf_overrides": {
                "num_hidden_layers": 1,
                "intermediate_size": rank.intermediate,
                "num_attention_heads": rank.heads,
                "num_key_value_heads": rank.kv_heads,
                "vocab_size": rank.vocab,
            },
        },
        "grid": setup.grid.describe(),
        "measurement": {
            "timer": "CUDA events" if setup.device == "cuda" else "wall clock (CPU dry run)",
            "warmup": setup.grid.warmup,
            "repeats": setup.grid.repeats,
            "statistic": "median",
            "l2_flushed": setup.device == "cuda",
            "weights": "random, shapes of the model config",
            "dense": "torch.nn.functional (cuBLAS GEMMs; RMSNorm, rotary, SiLU unfused)",
            "attention": "torch sdpa, contiguous KV, lower-right causal mask, "
            + ("grouped KV heads (enable_gqa)" if gqa else "K and V expanded to every head"),
            "moe": "router + top-k + torch.bmm over the activated experts, even routing",
            "all_reduce": "not measured (one GPU)",
        },
        "skew_fit": {"enabled": False},
    }


def write_bundle(root: pathlib.Path, model: ModelShape, measured: dict, env: dict,
                 setup: Setup) -> pathlib.Path:
    """Writes `root/<hardware>/<model id>/<variant>/` and returns it."""
    degrees = sorted(measured)
    folder = root / env["hardware"] / model.model_id / env["variant"]
    if folder.exists():
        shutil.rmtree(folder)
    for tp in degrees:
        tables, tp_dir = measured[tp], folder / f"tp{tp}"
        tp_dir.mkdir(parents=True)
        write_csv(tp_dir / "dense.csv", "layer,tokens,time_us", tables.dense)
        write_csv(tp_dir / "per_sequence.csv", "layer,sequences,time_us", tables.per_sequence)
        write_csv(tp_dir / "attention.csv",
                  "prefill_chunk,kv_prefill,n_decode,kv_decode,time_us", tables.attention)
        if tables.moe:
            write_csv(tp_dir / "moe.csv", "tokens,activated_experts,time_us", tables.moe)
    meta = bundle_meta(model, measured, env, setup)
    (folder / "meta.yaml").write_text("\n".join(yaml_lines(meta)) + "\n")
    return folder


# ---------------------------------------------------------------------------------------------
# The machine


def hardware_name(device_name: str) -> str:
    """The folder name of a card, as LLMServingSim names its own (`H200`, `H100`, `RTX4090`)."""
    for short in ("H200", "H100", "B200", "A100", "L40S", "A10G", "L4"):
        if short in device_name.upper().split() or f"{short}-" in device_name.upper():
            return short
    return "".join(c for c in device_name if c.isalnum()) or "GPU"


def nvidia_smi(query: str) -> str:
    """One `nvidia-smi --query-gpu` field of the first GPU, or why it could not be read."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return "unknown (nvidia-smi not found)"
    try:
        out = subprocess.run(
            [tool, f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout
        return out.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError) as e:
        return f"unknown (nvidia-smi: {e})"


def environment(torch, device: str) -> dict:
    """The card, driver and versions the bundles were measured with."""
    env = {
        "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(
            device_name=props.name,
            hardware=hardware_name(props.name),
            driver=nvidia_smi("driver_version"),
            memory_bytes=props.total_memory,
            multiprocessors=props.multi_processor_count,
            compute_capability=f"{props.major}.{props.minor}",
            cudnn=str(torch.backends.cudnn.version()),
            variant="bf16",
        )
    else:
        env.update(
            device_name=f"CPU ({platform.processor() or platform.machine()})",
            hardware="CPU",
            driver="none",
            memory_bytes=0,
            variant="fp32-dry-run",
        )
    return env


def warm_up_gpu(torch, seconds: float) -> None:
    """Large BF16 matrix products for `seconds`, so the first points find the clocks up."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------------
# The command


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", required=True, type=pathlib.Path,
                   help="a Hugging Face config.json (repeat for several models)")
    p.add_argument("--out", required=True, type=pathlib.Path,
                   help="folder for <hardware>/<model id>/<variant>/ and "
                        "<hardware>/environment.json")
    p.add_argument("--tp", default="",
                   help="tensor-parallel degrees, comma-separated (default: the smallest "
                        "whose share of the weights fits 80%% of the card, and twice that)")
    p.add_argument("--budget", default="6min",
                   help="wall-clock budget of the whole run (e.g. 360s, 6min); bundles not "
                        "finished by then are left out and listed in environment.json")
    p.add_argument("--dry-run", action="store_true",
                   help="a tiny grid on the CPU in float32 (for tests; the times are no GPU's)")
    p.add_argument("--plan", type=float, metavar="GIB",
                   help="print, as JSON, what would be measured on a card of GIB GiB (the "
                        "degrees and the points of each table) and measure nothing; needs no "
                        "PyTorch")
    return p.parse_args(argv)


def parse_duration_s(text: str) -> float:
    """`360s`, `6min`, `500ms` as seconds; an error quoting the text otherwise."""
    for unit, scale in (("ms", 1e-3), ("min", 60.0), ("s", 1.0)):
        if text.endswith(unit):
            try:
                value = float(text[: -len(unit)])
            except ValueError:
                break
            if value > 0 and math.isfinite(value):
                return value * scale
    raise SystemExit(f"--budget {text!r}: give a duration with its unit (360s, 6min)")


def plan(models: list[ModelShape], tp_arg: str, memory_bytes: int, dry_run: bool) -> list:
    """(model, tp) in the order measured: every model's first degree, then the second degrees,
    so that a budget running out leaves the most models covered."""
    per_model = []
    for model in models:
        if tp_arg:
            degrees = [int(t) for t in tp_arg.split(",")]
            for tp in degrees:
                rank_shape(model, tp)
        elif dry_run:
            degrees = [tp for tp in (1, 2) if _divides(model, tp)]
        else:
            degrees = default_degrees(model, memory_bytes, 2)
        per_model.append((model, degrees))
    order = []
    for i in range(max((len(d) for _, d in per_model), default=0)):
        order += [(m, d[i]) for m, d in per_model if i < len(d)]
    return order


def describe_plan(models: list[ModelShape], tp_arg: str, memory_bytes: int) -> list[dict]:
    """The GPU plan on a card of `memory_bytes`: each (model, degree) in order with its points."""
    setup = Setup(torch=None, device="cuda", dtype=None, grid=GPU_GRID, timer=None,
                  budget=None, memory_bytes=memory_bytes, bytes_per_value=2)
    rows = []
    for model, tp in plan(models, tp_arg, memory_bytes, dry_run=False):
        rank = rank_shape(model, tp)
        dense = len(RankLayerNames.dense(model)) * len(GPU_GRID.tokens)
        capacity = kv_capacity(setup, model, rank)
        rows.append({
            "model": model.model_id, "tp": tp, "kv_capacity_tokens": capacity,
            "dense_points": dense, "per_sequence_points": 2 * len(GPU_GRID.sequences),
            "attention_points": len(attention_points(GPU_GRID, max(GPU_GRID.tokens), capacity)),
            "moe_points": len(moe_points(GPU_GRID, model)) if model.experts else 0,
        })
    return rows


def _divides(model: ModelShape, tp: int) -> bool:
    try:
        rank_shape(model, tp)
        return True
    except ConfigError:
        return False


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    budget_s = parse_duration_s(args.budget)
    started = time.monotonic()
    try:
        models = [read_model(path) for path in args.model]
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.plan is not None:
        try:
            print(json.dumps(describe_plan(models, args.tp, int(args.plan * 2**30)), indent=2))
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    try:
        import torch
    except ImportError:
        print("error: PyTorch is not installed in this Python; run it where torch is "
              f"({sys.executable})", file=sys.stderr)
        return 2
    if not args.dry_run and not torch.cuda.is_available():
        print("error: no CUDA device; measure on a GPU, or give --dry-run for the tiny CPU "
              "grid", file=sys.stderr)
        return 2
    device = "cpu" if args.dry_run else "cuda"
    if args.dry_run:
        # One thread: a dry run shares a CI machine's few cores with other builds.
        torch.set_num_threads(1)
    grid = DRY_GRID if args.dry_run else GPU_GRID
    env = environment(torch, device)
    setup = Setup(torch=torch, device=device,
                  dtype=torch.float32 if args.dry_run else torch.bfloat16, grid=grid,
                  timer=Timer(torch, device, grid), budget=Budget(started + budget_s),
                  memory_bytes=env["memory_bytes"], bytes_per_value=2)
    try:
        order = plan(models, args.tp, setup.memory_bytes, args.dry_run)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if device == "cuda":
        warm_up_gpu(torch, 2.0)
    report = run_plan(setup, order, models, args.out, env)
    report["elapsed_s"] = round(time.monotonic() - started, 1)
    # Beside the card's bundles, so that two cards' runs unpack side by side.
    folder = args.out / env["hardware"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "environment.json").write_text(json.dumps({**env, **report}, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0 if report["bundles"] else 1


def run_plan(setup: Setup, order: list, models: list[ModelShape], out: pathlib.Path,
             env: dict) -> dict:
    """Measures `order` until done or out of time; writes each model's bundle of the degrees
    finished. Returns the bundles written and what was left out, with why."""
    measured = {m.model_id: {} for m in models}
    skipped = []
    for i, (model, tp) in enumerate(order):
        begun = time.monotonic()
        try:
            measured[model.model_id][tp] = measure_degree(setup, model, rank_shape(model, tp))
        except OutOfTime:
            skipped += [f"{m.model_id} tp{t}: the time budget ran out" for m, t in order[i:]]
            break
        except RuntimeError as e:
            # A kernel this PyTorch refuses, or memory: that degree is left out, not the run.
            skipped.append(f"{model.model_id} tp{tp}: {str(e).splitlines()[0]}")
            print(f"{model.model_id} tp{tp} failed: {e}", file=sys.stderr, flush=True)
            continue
        finally:
            if setup.device == "cuda":
                setup.torch.cuda.empty_cache()
        print(f"{model.model_id} tp{tp}: {time.monotonic() - begun:.1f} s", flush=True)
    bundles = []
    for model in models:
        if measured[model.model_id]:
            folder = write_bundle(out, model, measured[model.model_id], env, setup)
            bundles.append({"model": model.model_id, "folder": str(folder.relative_to(out)),
                            "tp_degrees": sorted(measured[model.model_id])})
        elif not any(s.startswith(f"{model.model_id} ") for s in skipped):
            skipped.append(f"{model.model_id}: no degree divides its widths or fits the card")
    return {"bundles": bundles, "skipped": skipped}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
