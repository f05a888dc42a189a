"""Gradient compression up close: fewer bytes on the wire, and what it costs in accuracy.

A small model (an MLP, or softmax regression with ``hidden=0``, on the 8x8 digits) trains
synchronously with ``workers`` workers and ``ps:0``, full batch: every worker holds its shard
of the training split as constants, reads the weights from ``ps:0``, computes its gradient,
*compresses it on the worker*, and sends the compressed payload; ``ps:0`` decompresses each,
averages them and takes a gradient descent step. The cut between the worker's ops and the
ps's ops lies on the payload tensors, so what crosses the link is the payload: the traced
``_Send``/``_Recv`` pairs of the step (``timeline.step_records``) say so, byte for byte.

The methods (``METHODS``), for a gradient of ``floats`` float32 numbers (all of the model's
gradients flattened into one vector):

=========  ===============================================================  =====================
method     worker sends                                                     bytes to ``ps:0``
=========  ===============================================================  =====================
``none``   the float32 gradient                                             ``4 floats``
``fp16``   the gradient cast to float16 (Horovod's ``Compression.fp16``,    ``2 floats``
           PyTorch DDP's ``fp16_compress_hook``)
``bf16``   the gradient cast to bfloat16 (``bf16_compress_hook``)           ``2 floats``
``topk``   the ``k`` entries largest in magnitude: float32 values and       ``8 k``
           int32 indices (Stich et al. 2018, "Sparsified SGD with memory";
           Lin et al. 2018, "Deep Gradient Compression")
``sign``   1 bit per entry (its sign), packed 8 to a uint8, and one         ``ceil(floats/8) + 4``
           float32 scale, the mean magnitude (Seide et al. 2014, "1-bit
           SGD"; Karimireddy et al. 2019, "Error Feedback Fixes SignSGD")
=========  ===============================================================  =====================

``topk`` and ``sign`` keep *error feedback*: each worker has a residual variable holding what
it did not send; the next step compresses ``gradient + residual`` and keeps the rest again.
Nothing is lost, only delayed: after any number of steps, what ``ps:0`` received from a
worker plus that worker's residual is the sum of its raw gradients (``sums=True`` returns
the three, accumulated in the step itself: the received one on ``ps:0``, after
decompressing). ``error_feedback=False`` drops the rest instead, and the sum no longer holds.

The other direction is not compressed: each worker reads the float32 *weights* (not a
sum of gradients) from ``ps:0`` at the start of its step, ``4 floats`` bytes per worker,
whatever the method. So compressing the gradients can at most halve a step's bytes, and
over a slow link the weights set a floor on the step: ``workers * 4 floats / rate`` on the
ps's link. Measured at 50 mbit/s (``benchmarks/compression.py``, ``benchmarks/RESULTS.md``):
every compressed method, fp16 as much as top-k, steps in about 0.77 of ``none``'s time, a few
milliseconds above that floor.

The 1-bit method is the sign with a scale, not a low-rank one (PowerSGD): bits pack with
plain graph ops, ``bits * [128, 64, ..., 1]`` summed per 8 and cast to ``uint8`` on the
worker, ``tf.bitwise.right_shift`` and ``bitwise_and`` to unpack on ``ps:0``.

TensorFlow's distribution strategies offer no option to compress gradients (a request for
one, tensorflow/tensorflow#40468, was closed as stale); PyTorch DDP has communication hooks
(fp16, bf16, PowerSGD) and Horovod a ``Compression.fp16``.

Example (in a notebook; TensorFlow runs only in the tasks)::

    import dtfkit
    from dtfkit.recipes import compression

    with dtfkit.LocalCluster(ps=1, workers=2, link="50mbit") as cluster:
        runs = compression.compare(cluster, steps=60)
    print(compression.table(runs))
    compression.plot_tradeoff(runs)
    runs[0]["bytes_to_ps"]                                   # {'worker:0': 153640, 'worker:1': 153640}
    compression.expected_compressed_bytes("none", 38410)     # {'to_ps': 153640, 'from_ps': 153640}

Importing this module does not import TensorFlow.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

import dtfkit
from dtfkit.course.datasets import DIGITS_NUM_CLASSES, load_digits, shard
from dtfkit.recipes import placement, timeline

__all__ = [
    "METHODS",
    "check_args",
    "compare",
    "default_k",
    "expected_compressed_bytes",
    "model_floats",
    "plot_tradeoff",
    "table",
    "train_compressed",
    "train_methods",
]

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


def _label(run: dict[str, Any]) -> str:
    return f"topk (k={run['k']})" if run["method"] == "topk" else run["method"]


def table(runs: Sequence[dict[str, Any]]) -> str:
    """The runs of ``compare`` side by side, as a Markdown table: bytes a worker sent per step
    (traced) and the formula's, bytes it read, median step time, test accuracy, each with its
    ratio to ``none`` (when ``none`` ran).

    >>> run = {"method": "fp16", "k": None, "bytes_to_ps": {"worker:0": 8}, "bytes_from_ps": {"worker:0": 16},
    ...        "expected": {"to_ps": 8, "from_ps": 16}, "step_seconds": [0.01, 0.03, 0.02], "accuracy": 0.9}
    >>> print(table([run]))
    | method | bytes to ps / step (traced) | formula | x none | bytes from ps | step (median, range) | x none | test accuracy |
    |---|---:|---:|---:|---:|---|---:|---:|
    | fp16 | 8 | 8 | - | 16 | 20.0 ms (10.0-30.0) | - | 0.900 |
    """
    base = next((r for r in runs if r["method"] == "none"), None)

    def ratio(value: float, of: float | None) -> str:
        return f"{value / of:.2f}" if of else "-"

    base_up = _per_worker(base["bytes_to_ps"]) if base else None
    base_time = float(np.median(base["step_seconds"])) if base else None
    out = [
        "| method | bytes to ps / step (traced) | formula | x none | bytes from ps | step (median, range) "
        "| x none | test accuracy |",
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in runs:
        up, down = _per_worker(r["bytes_to_ps"]), _per_worker(r["bytes_from_ps"])
        secs = r["step_seconds"]
        median = float(np.median(secs))
        out.append(
            f"| {_label(r)} | {up:,} | {r['expected']['to_ps']:,} | {ratio(up, base_up)} | {down:,} "
            f"| {median * 1000:.1f} ms ({min(secs) * 1000:.1f}-{max(secs) * 1000:.1f}) "
            f"| {ratio(median, base_time)} | {r['accuracy']:.3f} |"
        )
    return "\n".join(out)


def _per_worker(bytes_by_worker: dict[str, int]) -> int:
    """The bytes of one worker, when every worker's are the same (else the largest)."""
    return max(bytes_by_worker.values())


def plot_tradeoff(runs: Sequence[dict[str, Any]], *, title: str | None = None):
    """Left: test accuracy against the bytes a worker sends per step (log scale), one labelled
    point per method. Right: each method's step time, the median with a bar from the first to
    the third quartile.

    Uses matplotlib (imported here). Returns ``(accuracy_axes, time_axes)``; the left one's
    points are one ``PathCollection`` per method, labelled with the method.

    Example::

        acc_ax, time_ax = compression.plot_tradeoff(runs, title="2 workers, 100 mbit/s")
    """
    import matplotlib.pyplot as plt

    if not runs:
        raise ValueError("no runs to draw: run compression.compare(cluster) first")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [3, 2]})
    for r in runs:
        up = _per_worker(r["bytes_to_ps"])
        left.scatter([up], [r["accuracy"]], s=40, label=_label(r), zorder=3)
        left.annotate(_label(r), (up, r["accuracy"]), xytext=(5, 4), textcoords="offset points", fontsize=8)
    left.set_xscale("log")
    left.set_xlabel("bytes a worker sends ps:0 per step (traced)")
    left.set_ylabel("test accuracy")
    # from 0.1 under the lowest point to 1: a gap of 0.01 should look like one
    left.set_ylim(max(0.0, min(r["accuracy"] for r in runs) - 0.1), 1.0)
    left.grid(alpha=0.3)
    labels = [_label(r) for r in runs]
    quartiles = [np.percentile(np.asarray(r["step_seconds"]) * 1000, [25, 50, 75]) for r in runs]
    medians = [q[1] for q in quartiles]
    spread = np.array([[q[1] - q[0] for q in quartiles], [q[2] - q[1] for q in quartiles]])
    right.barh(range(len(runs)), medians, xerr=spread, color="tab:orange", alpha=0.8, capsize=3)
    right.set_yticks(range(len(runs)), labels)
    right.invert_yaxis()
    right.set_xlabel("step time (ms): median, bar from 1st to 3rd quartile")
    fig.suptitle(title or "gradient compression: accuracy against bytes, and step time")
    fig.tight_layout()
    return left, right


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


def _forward(tf: Any, params: Sequence[Any], x: Any) -> Any:
    """Logits of the MLP (or of softmax regression with two parameters)."""
    if len(params) == 2:
        return tf.matmul(x, params[0]) + params[1]
    w1, b1, w2, b2 = params
    return tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2


def _forward_numpy(params: Sequence[np.ndarray], x: np.ndarray) -> np.ndarray:
    if len(params) == 2:
        return x @ params[0] + params[1]
    w1, b1, w2, b2 = params
    return np.maximum(x @ w1 + b1, 0.0) @ w2 + b2


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
            logits = _forward(tf, mine, tf.constant(xs))
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.constant(ys), logits=logits)
            )
            grads = tf.gradients(loss, mine)
            flat = tf.concat([tf.reshape(g, [-1]) for g in grads], 0)
            residual = tf.compat.v1.get_variable(
                f"residual_{i}", [floats], initializer=tf.compat.v1.zeros_initializer(), use_resource=True
            )
            raw = tf.compat.v1.get_variable(
                f"raw_sum_{i}", [floats], initializer=tf.compat.v1.zeros_initializer(), use_resource=True
            )
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
        received = [
            tf.compat.v1.get_variable(
                f"received_sum_{i}", [floats], initializer=tf.compat.v1.zeros_initializer(), use_resource=True
            )
            for i in range(workers)
        ]
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
    target = "grpc://" + spec["worker"][0]
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True  # the graph as built
    step_seconds, loss_curve = [], []
    try:
        with graph.as_default(), tf.compat.v1.Session(target, config=config) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            # The traced step fetches nothing: a loss fetched from worker:1 would travel to
            # worker:0 (the session's master) in the step, a transfer that is not the method's.
            metadata = tf.compat.v1.RunMetadata()
            sess.run(
                parts["targets"],
                options=placement.trace_options(timeout_ms=timeout_ms),
                run_metadata=metadata,
            )
            records = timeline.step_records(metadata, 0)
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
        tf.compat.v1.Session.reset(target, [container])
    x_test, y_test = load_digits(split="test", seed=SPLIT_SEED)
    accuracy = float(np.mean(np.argmax(_forward_numpy(weights, x_test), axis=1) == y_test))
    transfers = [(r["from"], r["to"], r["tensor"], r["bytes"]) for r in records if r["kind"] == "transfer"]
    names = [f"worker:{i}" for i in range(workers)]
    links = timeline.link_bytes(records)[0]
    out = {
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


def compare(
    cluster: Any,
    methods: Sequence[str] = METHODS,
    *,
    workers: int = 2,
    steps: int = STEPS,
    k: int | None = None,
    hidden: int = HIDDEN,
    learning_rate: float = LEARNING_RATE,
    seed: int = 0,
    error_feedback: bool = True,
    sums: bool = False,
    timeout: float = 300.0,
) -> list[dict[str, Any]]:
    """In the notebook: train once per method (``train_compressed``) in one client task of
    ``cluster``; returns one plain dict per method, in order (for ``table``, ``plot_tradeoff``).

    ``k`` (for ``topk``) defaults to ``default_k``: 1% of the gradient. Bad arguments, or a
    cluster without ``workers`` workers and a ps, raise ``ValueError`` before anything starts.

    Example::

        runs = compare(cluster, ["none", "fp16", "topk"], k=96, steps=60)
        [(r["method"], r["bytes_to_ps"]["worker:0"], r["accuracy"]) for r in runs]
    """
    methods = list(methods)
    if not methods:
        raise ValueError(f"methods is empty: name at least one of {METHODS}")
    floats = model_floats(hidden) if _is_int(hidden) and hidden >= 0 else None
    if floats is None:
        raise ValueError(
            f"hidden (units of the hidden layer, 0 for none) must be an integer >= 0, not {hidden!r}"
        )
    if "topk" in methods and k is None:
        k = default_k(floats)
    for method in methods:
        check_args(method, floats, k if method == "topk" else None, workers)
    if not _is_int(steps) or steps < 3:
        raise ValueError(
            f"steps must be an integer >= 3 (one traced, two to warm up, then timed), not {steps!r}"
        )
    spec = cluster.cluster_spec
    have = len(spec.get("worker", []))
    if have < workers:
        raise ValueError(
            f"workers={workers} but the cluster has {have}: start one with "
            f"dtfkit.LocalCluster(ps=1, workers={workers}), or pick workers <= {have}"
        )
    if not spec.get("ps"):
        raise ValueError(
            "compression trains through ps:0: start the cluster with dtfkit.LocalCluster(ps=1, ...)"
        )
    kwargs = {
        "k": k,
        "workers": workers,
        "steps": steps,
        "hidden": hidden,
        "learning_rate": learning_rate,
        "seed": seed,
        "error_feedback": error_feedback,
        "sums": sums,
        "timeout_ms": int(1000 * timeout),
    }
    (runs,) = cluster.run(
        train_methods, args=(methods,), kwargs=kwargs, on="client", timeout=timeout
    ).values()
    return runs
