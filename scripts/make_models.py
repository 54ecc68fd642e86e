#!/usr/bin/env python3
"""Builds the small ONNX models shipped under traces/models/ for capsim's demo and tests.

Graphs are written node by node with onnx.helper; weights are numpy draws from fixed seeds, so
running this script again rebuilds byte-identical files. No training: the models compute
meaningless outputs, but their operators, shapes and costs are those of real ones, which is all a
latency profile needs.

    .venv/bin/python scripts/make_models.py [--out traces/models]
"""

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17  # LayerNormalization arrived in opset 17.


class Graph:
    """Collects nodes and initializers with unique names."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.count = 0

    def name(self, prefix):
        self.count += 1
        return f"{prefix}_{self.count}"

    def weight(self, prefix, shape, scale=None):
        fan_in = shape[0] if len(shape) > 1 else 1
        std = scale if scale is not None else 1.0 / np.sqrt(fan_in)
        values = self.rng.normal(0.0, std, size=shape).astype(np.float32)
        return self.const(prefix, values)

    def const(self, prefix, values):
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(values), name))
        return name

    def op(self, op_type, inputs, prefix=None, **attrs):
        out = self.name(prefix or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out


def dense(g, x, d_in, d_out, prefix):
    w = g.weight(f"{prefix}_w", (d_in, d_out))
    b = g.const(f"{prefix}_b", np.zeros(d_out, dtype=np.float32))
    return g.op("Add", [g.op("MatMul", [x, w]), b])


def layer_norm(g, x, hidden, prefix):
    scale = g.const(f"{prefix}_gamma", np.ones(hidden, dtype=np.float32))
    bias = g.const(f"{prefix}_beta", np.zeros(hidden, dtype=np.float32))
    return g.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-12)


def gelu(g, x):
    # The exact (erf) form, as BERT uses; ONNX Runtime fuses it into one Gelu kernel.
    inv_sqrt2 = g.const("inv_sqrt2", np.array(1.0 / np.sqrt(2.0), dtype=np.float32))
    one = g.const("one", np.array(1.0, dtype=np.float32))
    half = g.const("half", np.array(0.5, dtype=np.float32))
    erf = g.op("Erf", [g.op("Mul", [x, inv_sqrt2])])
    return g.op("Mul", [g.op("Mul", [x, half]), g.op("Add", [erf, one])])


def encoder_layer(g, x, hidden, heads, ffn, index):
    p = f"layer{index}"
    head_dim = hidden // heads
    split = g.const(f"{p}_split_shape", np.array([0, 0, heads, head_dim], dtype=np.int64))
    merge = g.const(f"{p}_merge_shape", np.array([0, 0, hidden], dtype=np.int64))

    def heads_of(t):  # [B, S, H] -> [B, heads, S, head_dim]
        return g.op("Transpose", [g.op("Reshape", [t, split])], perm=[0, 2, 1, 3])

    q = heads_of(dense(g, x, hidden, hidden, f"{p}_q"))
    k = g.op("Transpose", [g.op("Reshape", [dense(g, x, hidden, hidden, f"{p}_k"), split])], perm=[0, 2, 3, 1])
    v = heads_of(dense(g, x, hidden, hidden, f"{p}_v"))
    scale = g.const(f"{p}_scale", np.array(1.0 / np.sqrt(head_dim), dtype=np.float32))
    scores = g.op("Mul", [g.op("MatMul", [q, k]), scale])
    probs = g.op("Softmax", [scores], axis=-1)
    context = g.op("MatMul", [probs, v])
    context = g.op("Reshape", [g.op("Transpose", [context], perm=[0, 2, 1, 3]), merge])
    attn = dense(g, context, hidden, hidden, f"{p}_o")
    x = layer_norm(g, g.op("Add", [x, attn]), hidden, f"{p}_ln1")
    h = gelu(g, dense(g, x, hidden, ffn, f"{p}_ffn_in"))
    h = dense(g, h, ffn, hidden, f"{p}_ffn_out")
    return layer_norm(g, g.op("Add", [x, h]), hidden, f"{p}_ln2")


def text_classifier(vocab=1000, max_len=512, hidden=64, heads=4, ffn=256, layers=2, classes=2):
    """BERT-style encoder classifier: input_ids int64 [batch, seq] -> logits float [batch, classes]."""
    g = Graph(seed=20241)
    word = g.weight("word_embeddings", (vocab, hidden), scale=0.02)
    position = g.weight("position_embeddings", (max_len, hidden), scale=0.02)
    x = g.op("Gather", [word, "input_ids"], axis=0)
    # Position ids 0..seq-1 from the input's runtime shape.
    seq = g.op("Gather", [g.op("Shape", ["input_ids"]), g.const("axis1", np.array(1, dtype=np.int64))], axis=0)
    zero = g.const("zero", np.array(0, dtype=np.int64))
    step = g.const("step", np.array(1, dtype=np.int64))
    positions = g.op("Range", [zero, seq, step])
    x = g.op("Add", [x, g.op("Gather", [position, positions], axis=0)])
    x = layer_norm(g, x, hidden, "embeddings_ln")
    for index in range(layers):
        x = encoder_layer(g, x, hidden, heads, ffn, index)
    cls = g.op("Gather", [x, g.const("cls_index", np.array(0, dtype=np.int64))], axis=1)
    pooled = g.op("Tanh", [dense(g, cls, hidden, hidden, "pooler")])
    logits = dense(g, pooled, hidden, classes, "classifier")
    g.nodes.append(helper.make_node("Identity", [logits], ["logits"]))
    graph = helper.make_graph(
        g.nodes,
        "text_classifier",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])],
        g.inits,
    )
    return graph


def image_cnn(classes=10):
    """Small CNN: image float [batch, 3, 32, 32] -> logits float [batch, classes]."""
    g = Graph(seed=20242)
    x = "image"
    channels = 3
    for index, out in enumerate([16, 32, 64]):
        w = g.weight(f"conv{index}_w", (out, channels, 3, 3), scale=np.sqrt(2.0 / (channels * 9)))
        b = g.const(f"conv{index}_b", np.zeros(out, dtype=np.float32))
        x = g.op("Relu", [g.op("Conv", [x, w, b], pads=[1, 1, 1, 1], kernel_shape=[3, 3])])
        if index < 2:
            x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        channels = out
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    w = g.weight("fc_w", (channels, classes))
    b = g.const("fc_b", np.zeros(classes, dtype=np.float32))
    g.nodes.append(helper.make_node("Gemm", [x, w, b], ["logits"]))
    return helper.make_graph(
        g.nodes,
        "image_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])],
        g.inits,
    )


def static_batch():
    """A model whose batch dimension is fixed at 1: capsim calibrate must refuse it."""
    g = Graph(seed=20243)
    w = g.weight("w", (8, 2))
    g.nodes.append(helper.make_node("MatMul", ["features", w], ["scores"]))
    return helper.make_graph(
        g.nodes,
        "static_batch",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 2])],
        g.inits,
    )


def tiny_gpt(vocab=512, max_positions=1024, hidden=64, heads=4, ffn=256, layers=2):
    """GPT-style decoder with a KV cache, pre-LayerNorm, causal self-attention.

    Inputs: input_ids int64 [batch, seq]; past_key_{i}, past_value_{i} float [batch, heads,
    past_len, head_dim] per layer (past_len may be 0: a prefill). Outputs: logits float [batch,
    seq, vocab]; present_key_{i}, present_value_{i} float [batch, heads, past_len + seq, head_dim]
    (the past with this call's keys and values appended). Token i of the call sits at position
    past_len + i and attends to keys 0..past_len + i (the causal mask).
    """
    g = Graph(seed=20244)
    head_dim = hidden // heads
    word = g.weight("word_embeddings", (vocab, hidden), scale=0.02)
    position = g.weight("position_embeddings", (max_positions, hidden), scale=0.02)
    zero = g.const("zero", np.array(0, dtype=np.int64))
    one_i = g.const("one_i", np.array(1, dtype=np.int64))
    seq = g.op("Gather", [g.op("Shape", ["input_ids"]), g.const("axis1", np.array(1, dtype=np.int64))], axis=0)
    past_len = g.op("Gather", [g.op("Shape", ["past_key_0"]), g.const("axis2", np.array(2, dtype=np.int64))], axis=0)
    total = g.op("Add", [past_len, seq])
    query_positions = g.op("Range", [past_len, total, one_i])  # [seq]
    key_positions = g.op("Range", [zero, total, one_i])  # [total]
    x = g.op("Add", [g.op("Gather", [word, "input_ids"], axis=0), g.op("Gather", [position, query_positions], axis=0)])
    # Causal mask [seq, total]: key j is visible to query i when j <= past_len + i.
    column = g.const("column_shape", np.array([-1, 1], dtype=np.int64))
    visible = g.op("LessOrEqual", [key_positions, g.op("Reshape", [query_positions, column])])
    masked = g.const("masked", np.array(-1e9, dtype=np.float32))
    split = g.const("split_shape", np.array([0, 0, heads, head_dim], dtype=np.int64))
    merge = g.const("merge_shape", np.array([0, 0, hidden], dtype=np.int64))
    scale = g.const("scale", np.array(1.0 / np.sqrt(head_dim), dtype=np.float32))
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", vocab])]

    def heads_of(t):  # [B, S, H] -> [B, heads, S, head_dim]
        return g.op("Transpose", [g.op("Reshape", [t, split])], perm=[0, 2, 1, 3])

    for index in range(layers):
        p = f"layer{index}"
        h = layer_norm(g, x, hidden, f"{p}_ln1")
        q = heads_of(dense(g, h, hidden, hidden, f"{p}_q"))
        k = heads_of(dense(g, h, hidden, hidden, f"{p}_k"))
        v = heads_of(dense(g, h, hidden, hidden, f"{p}_v"))
        past_k, past_v, present_k, present_v = (f"past_key_{index}", f"past_value_{index}", f"present_key_{index}", f"present_value_{index}")
        g.nodes.append(helper.make_node("Concat", [past_k, k], [present_k], axis=2))
        g.nodes.append(helper.make_node("Concat", [past_v, v], [present_v], axis=2))
        for name in (past_k, past_v):
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", heads, "past_len", head_dim]))
        for name in (present_k, present_v):
            outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", heads, "total_len", head_dim]))
        scores = g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [present_k], perm=[0, 1, 3, 2])]), scale])
        probs = g.op("Softmax", [g.op("Where", [visible, scores, masked])], axis=-1)
        context = g.op("MatMul", [probs, present_v])
        context = g.op("Reshape", [g.op("Transpose", [context], perm=[0, 2, 1, 3]), merge])
        x = g.op("Add", [x, dense(g, context, hidden, hidden, f"{p}_o")])
        h = gelu(g, dense(g, layer_norm(g, x, hidden, f"{p}_ln2"), hidden, ffn, f"{p}_ffn_in"))
        x = g.op("Add", [x, dense(g, h, ffn, hidden, f"{p}_ffn_out")])
    x = layer_norm(g, x, hidden, "final_ln")
    lm_head = g.weight("lm_head", (hidden, vocab))
    g.nodes.append(helper.make_node("MatMul", [x, lm_head], ["logits"]))
    return helper.make_graph(g.nodes, "tiny_gpt", inputs, outputs, g.inits)


def check_tiny_gpt(path, prompt=24, batch=2):
    """Checks with ONNX Runtime that the KV cache is exact: a prefill of N tokens then one decode
    step gives the same last-position logits as a prefill of N + 1 tokens, and the decode's
    present keys equal the long prefill's."""
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    kv = [i for i in session.get_inputs() if i.name.startswith("past_")]
    heads, head_dim = kv[0].shape[1], kv[0].shape[3]
    ids = np.random.default_rng(7).integers(0, 512, size=(batch, prompt + 1), dtype=np.int64)

    def run(tokens, past):
        feed = {"input_ids": tokens}
        feed.update(past)
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, feed)))

    empty = {i.name: np.zeros((batch, heads, 0, head_dim), dtype=np.float32) for i in kv}
    full = run(ids, empty)
    head = run(ids[:, :prompt], empty)
    past = {name.replace("present_", "past_"): value for name, value in head.items() if name.startswith("present_")}
    step = run(ids[:, prompt:], past)
    # Causality: the shorter prefill's logits are the longer one's first positions.
    np.testing.assert_allclose(head["logits"], full["logits"][:, :prompt], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(step["logits"][:, -1], full["logits"][:, -1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(step["present_key_1"], full["present_key_1"], rtol=1e-4, atol=1e-5)
    print(f"{path}: prefill {prompt} + 1 decode step == prefill {prompt + 1} (last-position logits and KV)")


def save(graph, path):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="capsim make_models.py")
    model.ir_version = 8  # readable by every ONNX Runtime since 1.10
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    print(f"{path}: {os.path.getsize(path)} bytes")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "traces", "models"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    save(text_classifier(), os.path.join(args.out, "text_classifier.onnx"))
    save(image_cnn(), os.path.join(args.out, "image_cnn.onnx"))
    save(static_batch(), os.path.join(args.out, "static_batch.onnx"))
    save(tiny_gpt(), os.path.join(args.out, "tiny_gpt.onnx"))
    check_tiny_gpt(os.path.join(args.out, "tiny_gpt.onnx"))


if __name__ == "__main__":
    main()
