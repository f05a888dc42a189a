"""Runs inside the tasks: compress and decompress a gradient, and train with each compression method
(``train_compressed``, ``train_methods``); the byte counts both sides share.

TensorFlow only inside functions: the kernel imports this module to name what it sends.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

import dtfkit
from dtfkit.datasets import DIGITS_NUM_CLASSES, load_digits, shard
from dtfkit.recipes.allreduce.task_side import _traced_metadata, master_session
from dtfkit.recipes.timeline import task_side as timeline

METHODS = ("none", "fp16", "bf16", "topk", "sign")
FEATURES = 64  # 8x8 pixels
HIDDEN = 512
LEARNING_RATE = 0.5
STEPS = 60
SPLIT_SEED = 0  # the held-out test split is the same whatever seed the model uses


# ------------------------------------------------------------- plain Python (no TensorFlow)
def model_floats(hidden: int = HIDDEN) -> int:
    """How many float32 numbers the model (and so its gradient) has.

    ``hidden=0`` is softmax regression (64 x 10 weights and 10 biases).

    >>> model_floats(0), model_floats(128)
    (650, 9610)
    """
    if hidden == 0:
        return FEATURES * DIGITS_NUM_CLASSES + DIGITS_NUM_CLASSES
    return FEATURES * hidden + hidden + hidden * DIGITS_NUM_CLASSES + DIGITS_NUM_CLASSES


def default_k(floats: int) -> int:
    """The ``k`` ``compare`` uses for ``topk`` when none is given: 1% of the entries.

    >>> default_k(9610)
    96
    """
    return max(1, floats // 100)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_args(method: str, floats: int, k: int | None = None, workers: int = 1) -> None:
    """Refuse a method, ``k`` or worker count that cannot run, naming the bad value.

    ``k`` is for ``topk`` only, and there ``1 <= k <= floats``.

    >>> check_args("topk", 650, k=651)
    Traceback (most recent call last):
    ...
    ValueError: k=651 is more entries than the gradient has (650 floats): pick 1 <= k <= 650
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, not {method!r}")
    if not _is_int(floats) or floats < 1:
        raise ValueError(f"floats (the gradient's length) must be an integer >= 1, not {floats!r}")
    if not _is_int(workers) or workers < 1:
        raise ValueError(f"workers (how many workers train) must be an integer >= 1, not {workers!r}")
    if method != "topk":
        if k is not None:
            raise ValueError(f'k={k!r} is for method "topk" only; leave it out for {method!r}')
        return
    if k is None:
        raise ValueError(f'method "topk" needs k, how many entries to send (e.g. k={default_k(floats)})')
    if not _is_int(k) or k < 1:
        raise ValueError(f"k (entries top-k sends) must be an integer >= 1, not {k!r}")
    if k > floats:
        raise ValueError(
            f"k={k} is more entries than the gradient has ({floats} floats): pick 1 <= k <= {floats}"
        )


def expected_compressed_bytes(method: str, floats: int, k: int | None = None) -> dict[str, int]:
    """The payload bytes of one step between one worker and ``ps:0``, from the formulas.

    ``to_ps``: the compressed gradient a worker sends (table in the module docstring).
    ``from_ps``: the float32 weights the worker reads, ``4 floats``, whatever the method.
    The bytes are the tensors' own, not gRPC's framing around them.

    >>> expected_compressed_bytes("none", 650)
    {'to_ps': 2600, 'from_ps': 2600}
    >>> expected_compressed_bytes("topk", 650, k=6)["to_ps"], expected_compressed_bytes("sign", 650)["to_ps"]
    (48, 86)
    """
    check_args(method, floats, k)
    to_ps = {
        "none": 4 * floats,
        "fp16": 2 * floats,
        "bf16": 2 * floats,
        "topk": 8 * (k or 0),  # float32 values + int32 indices
        "sign": math.ceil(floats / 8) + 4,  # packed bits + one float32 scale
    }[method]
    return {"to_ps": to_ps, "from_ps": 4 * floats}


# ------------------------------------------------------------------ the graph (in tasks)
def _shapes(hidden: int) -> list[tuple[str, list[int]]]:
    if hidden == 0:
        return [("w", [FEATURES, DIGITS_NUM_CLASSES]), ("b", [DIGITS_NUM_CLASSES])]
    return [
        ("w1", [FEATURES, hidden]),
        ("b1", [hidden]),
        ("w2", [hidden, DIGITS_NUM_CLASSES]),
        ("b2", [DIGITS_NUM_CLASSES]),
    ]


def _forward(params: Sequence[Any], x: Any, relu: Any) -> Any:
    """Logits of the MLP (or of softmax regression with two parameters), in TensorFlow or NumPy."""
    if len(params) == 2:
        return x @ params[0] + params[1]
    w1, b1, w2, b2 = params
    return relu(x @ w1 + b1) @ w2 + b2


def _zeros(tf: Any, name: str, floats: int) -> Any:
    """A resource variable of ``floats`` zeros."""
    return tf.compat.v1.get_variable(
        name, [floats], initializer=tf.compat.v1.zeros_initializer(), use_resource=True
    )


def _initial_values(tf: Any, hidden: int, seed: int) -> list[Any]:
    """Glorot-uniform weights and zero biases, from stateless random ops: the same every run."""
    out = []
    for i, (_, shape) in enumerate(_shapes(hidden)):
        if len(shape) == 1:
            out.append(tf.zeros(shape))
        else:
            limit = math.sqrt(6.0 / (shape[0] + shape[1]))
            out.append(tf.random.stateless_uniform(shape, seed=[seed, i], minval=-limit, maxval=limit))
    return out


def compress(tf: Any, method: str, flat: Any, k: int | None) -> tuple[list[Any], Any]:
    """On the worker: the payload tensors for ``flat`` (a float32 vector), and the dense vector
    they stand for (what ``decompress`` gives back on the other side)."""
    floats = int(flat.shape[0])
    if method == "none":
        return [tf.identity(flat, name="payload")], flat
    if method in ("fp16", "bf16"):
        small = tf.cast(flat, tf.float16 if method == "fp16" else tf.bfloat16, name="payload")
        return [small], tf.cast(small, tf.float32)
    if method == "topk":
        _, indices = tf.math.top_k(tf.abs(flat), k=k, sorted=False, name="topk")
        values = tf.gather(flat, indices, name="payload_values")
        indices = tf.identity(indices, name="payload_indices")
        return [values, indices], tf.scatter_nd(indices[:, None], values, [floats])
    if method == "sign":
        pad = -floats % 8
        bits = tf.cast(flat >= 0.0, tf.int32)
        grouped = tf.reshape(tf.pad(bits, [[0, pad]]), [-1, 8])
        weights = tf.constant([128, 64, 32, 16, 8, 4, 2, 1], tf.int32)
        packed = tf.cast(tf.reduce_sum(grouped * weights, axis=1), tf.uint8, name="payload_bits")
        scale = tf.reduce_mean(tf.abs(flat), name="payload_scale")
        return [packed, scale], scale * (2.0 * tf.cast(bits, tf.float32) - 1.0)
    raise ValueError(f"method must be one of {METHODS}, not {method!r}")


def decompress(tf: Any, method: str, payload: Sequence[Any], floats: int) -> Any:
    """On ``ps:0``: the dense float32 vector of ``floats`` numbers a payload stands for."""
    if method == "none":
        return tf.identity(payload[0])
    if method in ("fp16", "bf16"):
        return tf.cast(payload[0], tf.float32)
    if method == "topk":
        values, indices = payload
        return tf.scatter_nd(indices[:, None], values, [floats])
    if method == "sign":
        packed, scale = payload
        shifts = tf.constant([7, 6, 5, 4, 3, 2, 1, 0], tf.int32)
        bits = tf.bitwise.bitwise_and(tf.bitwise.right_shift(tf.cast(packed, tf.int32)[:, None], shifts), 1)
        bits = tf.reshape(bits, [-1])[:floats]
        return scale * (2.0 * tf.cast(bits, tf.float32) - 1.0)
    raise ValueError(f"method must be one of {METHODS}, not {method!r}")


def _build(
    tf: Any,
    method: str,
    workers: int,
    k: int | None,
    hidden: int,
    learning_rate: float,
    seed: int,
    error_feedback: bool,
) -> dict[str, Any]:
    """The training graph in the current default graph. Returns its pieces by name."""
    ps = "/job:ps/task:0"
    floats = model_floats(hidden)
    shapes = _shapes(hidden)
    x, y = load_digits(split="train", seed=SPLIT_SEED)
    feedback = method in ("topk", "sign") and error_feedback
    with tf.compat.v1.device(ps):
        params = [
            tf.compat.v1.get_variable(name, initializer=value, use_resource=True)
            for (name, _), value in zip(shapes, _initial_values(tf, hidden, seed), strict=True)
        ]
        reads = [p.read_value() for p in params]  # each worker gets these: 4 floats bytes
    losses, dense_on_ps, worker_ops, residuals, raws = [], [], [], [], []
    for i in range(workers):
        with tf.compat.v1.device(f"/job:worker/task:{i}"), tf.compat.v1.name_scope(f"worker_{i}"):
            xs, ys = shard(x, y, i, workers)
            mine = [tf.identity(r) for r in reads]
            logits = _forward(mine, tf.constant(xs), tf.nn.relu)
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.constant(ys), logits=logits)
            )
            grads = tf.gradients(loss, mine)
            flat = tf.concat([tf.reshape(g, [-1]) for g in grads], 0)
            residual = _zeros(tf, f"residual_{i}", floats)
            raw = _zeros(tf, f"raw_sum_{i}", floats)
            todo = flat + residual.read_value() if feedback else flat
            payload, sent = compress(tf, method, todo, k)
            worker_ops.append(raw.assign_add(flat, read_value=False))
            if feedback:  # keep what was not sent for the next step
                worker_ops.append(residual.assign(todo - sent, read_value=False))
            losses.append(loss)
            residuals.append(residual)
            raws.append(raw)
        with tf.compat.v1.device(ps), tf.compat.v1.name_scope(f"from_worker_{i}"):
            dense_on_ps.append(decompress(tf, method, payload, floats))
    with tf.compat.v1.device(ps), tf.compat.v1.name_scope("update"):
        received = [_zeros(tf, f"received_sum_{i}", floats) for i in range(workers)]
        ps_ops = [r.assign_add(d, read_value=False) for r, d in zip(received, dense_on_ps, strict=True)]
        mean = tf.add_n(dense_on_ps) / float(workers)
        sizes = [int(np.prod(shape)) for _, shape in shapes]
        for param, part, (_, shape) in zip(params, tf.split(mean, sizes), shapes, strict=True):
            ps_ops.append(param.assign_sub(learning_rate * tf.reshape(part, shape), read_value=False))
    return {
        "params": params,
        "losses": losses,
        # every op of the step, fetched together: no control edge crosses tasks, so every
        # transfer of the step is a tensor the method sends
        "targets": worker_ops + ps_ops,
        "sums": {"received": received, "residual": residuals, "raw": raws},
        "floats": floats,
    }


def train_compressed(
    method: str,
    *,
    workers: int = 2,
    steps: int = STEPS,
    k: int | None = None,
    hidden: int = HIDDEN,
    learning_rate: float = LEARNING_RATE,
    seed: int = 0,
    error_feedback: bool = True,
    sums: bool = False,
    timeout_ms: int = 120_000,
) -> dict[str, Any]:
    """In a client task: train with ``method`` for ``steps`` steps on the first ``workers`` workers
    and ``ps:0``; trace the first step's transfers and time the others.

    ``k`` is for ``topk`` (required there). Each run lives in a resource container of its own
    on the tasks, reset at the end (``Session.reset``, which also closes any other session
    open on worker:0's master), so runs in a row start afresh.

    Returns plain data: ``method``, ``k``, ``workers``, ``steps``, ``floats``,
    ``bytes_to_ps`` and ``bytes_from_ps`` (``{worker: bytes}`` in the traced step, from its
    transfers), ``transfers`` (the traced step's ``(from, to, tensor, bytes)``), ``expected``
    (``expected_compressed_bytes``), ``step_seconds`` (the wall time of steps 3 to ``steps``:
    the first is traced, the second warms up) and their median, ``median_step_seconds``;
    ``loss`` (the workers' mean loss before each step from the second on: the traced step
    fetches nothing), ``accuracy`` (on the digits' test split, after the last step), and with
    ``sums``: ``sums`` = ``{worker: {"received", "residual", "raw"}}`` (NumPy vectors; see the
    module docstring).

    Example::

        (run,) = cluster.run(train_compressed, args=("topk",), kwargs={"k": 384}, on="client").values()
        run["bytes_to_ps"]      # {'worker:0': 3072, 'worker:1': 3072}
    """
    import tensorflow as tf

    floats = model_floats(hidden)
    check_args(method, floats, k, workers)
    spec = dtfkit.this_task().cluster
    if len(spec.get("worker", [])) < workers or not spec.get("ps"):
        raise ValueError(f"{workers} workers and a ps are needed; the cluster has {spec}")
    container = f"compression.{method}.{time.monotonic_ns()}"
    with tf.Graph().as_default() as graph, tf.compat.v1.container(container):
        parts = _build(tf, method, workers, k, hidden, learning_rate, seed, error_feedback)
    step_seconds, loss_curve = [], []
    try:
        with master_session(tf, graph) as sess:  # the graph as built, on worker:0's master
            # The traced step fetches nothing: a loss fetched from worker:1 would travel to
            # worker:0 (the session's master) in the step, a transfer that is not the method's.
            records = timeline.step_records(_traced_metadata(tf, sess, parts["targets"], timeout_ms), 0)
            fetches = [parts["targets"], parts["losses"]]
            for step in range(1, steps):
                start = time.perf_counter()
                _, losses = sess.run(fetches)
                if step >= 2:
                    step_seconds.append(time.perf_counter() - start)
                loss_curve.append(float(np.mean(losses)))
            weights = sess.run(parts["params"])
            kept = sess.run(parts["sums"]) if sums else None
    finally:
        tf.compat.v1.Session.reset("grpc://" + spec["worker"][0], [container])
    x_test, y_test = load_digits(split="test", seed=SPLIT_SEED)
    accuracy = float(
        np.mean(np.argmax(_forward(weights, x_test, lambda h: np.maximum(h, 0.0)), axis=1) == y_test)
    )
    transfers = [(r["from"], r["to"], r["tensor"], r["bytes"]) for r in records if r["kind"] == "transfer"]
    names = [f"worker:{i}" for i in range(workers)]
    links = timeline.link_bytes(records)[0]
    out: dict[str, Any] = {
        "method": method,
        "k": k,
        "workers": workers,
        "steps": steps,
        "floats": floats,
        "error_feedback": error_feedback,
        "bytes_to_ps": {w: links.get((w, "ps:0"), 0) for w in names},
        "bytes_from_ps": {w: links.get(("ps:0", w), 0) for w in names},
        "transfers": transfers,
        "expected": expected_compressed_bytes(method, floats, k),
        "step_seconds": step_seconds,
        "median_step_seconds": float(np.median(step_seconds)) if step_seconds else float("nan"),
        "loss": loss_curve,
        "accuracy": accuracy,
    }
    if kept is not None:
        out["sums"] = {
            w: {name: np.asarray(kept[name][i]) for name in ("received", "residual", "raw")}
            for i, w in enumerate(names)
        }
    return out


def train_methods(methods: Sequence[str], **kwargs: Any) -> list[dict[str, Any]]:
    """In a client task: ``train_compressed`` for each method in turn (one process for all).
    ``k`` in ``kwargs`` goes to ``topk`` only.

    Example::

        (runs,) = cluster.run(train_methods, args=(["none", "fp16"],), on="client").values()
    """
    k = kwargs.pop("k", None)
    return [train_compressed(m, k=k if m == "topk" else None, **kwargs) for m in methods]
