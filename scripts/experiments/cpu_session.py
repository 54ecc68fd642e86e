"""What the measurement scripts share: an ONNX Runtime CPU session opened as capsim opens its
own with `--threads 1` (one intra-op and one inter-op thread, idle threads sleep rather than
spin), and random but valid inputs for one batch. Imported by machine_drift.py and
warmup_after_idle.py, which run from this folder."""

import os

import numpy as np
import onnxruntime as ort


def open_session(model, cpu=None):
    """A CPU session of `model`; with `cpu`, the calling process is first pinned to that CPU."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def batch_feed(session, batch, length, rng):
    """Inputs for a batch of `batch` at `length` (every dynamic axis past the first): integer
    inputs uniform token ids below 1000, the others standard normal floats."""
    feed = {}
    for spec in session.get_inputs():
        shape = [batch if i == 0 else (d if isinstance(d, int) else length)
                 for i, d in enumerate(spec.shape)]
        if "int" in spec.type:
            feed[spec.name] = rng.integers(1, 1000, shape, dtype=np.int64)
        else:
            feed[spec.name] = rng.standard_normal(shape).astype(np.float32)
    return feed
