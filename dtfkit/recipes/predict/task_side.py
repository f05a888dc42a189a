"""Runs inside the tasks: a model's many gradients synchronised in buckets (``time_buckets``), and a
real training step with its synchronisation overlapped with the backward pass or after it
(``time_overlap``), both timed in a client task.

TensorFlow only inside functions: the kernel imports this module to name what it sends.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from dtfkit.recipes.allreduce.task_side import (
    ALGORITHMS,
    _concat_on,
    _devices,
    build_allreduce,
    gradient_variables,
    master_session,
    sync_run,
    time_steps,
)


def packs(tensor_bytes: Sequence[int], pack_bytes: int) -> list[list[int]]:
    """The tensors (their indices) in each bucket, as ``MultiWorkerMirroredStrategy`` packs its
    gradients for ``CommunicationOptions(bytes_per_pack=...)``: ``CollectiveAllReduce._all_reduce``
    reverses the list (the last gradient first, as the backward pass makes them), then
    ``cross_device_utils.group_by_size`` lets a bucket take tensors until it holds more than
    ``pack_bytes`` ("few but large packs"). 0 puts every tensor in one bucket; 1 each in its own.

    >>> packs([400, 400, 400, 2000, 400], 1000)
    [[4, 3], [2, 1, 0]]
    >>> packs([400, 400], 0), packs([400, 400], 1)
    ([[1, 0]], [[1], [0]])
    """
    order = list(reversed(range(len(tensor_bytes))))
    if pack_bytes == 0:
        return [order]
    out: list[list[int]] = []
    size = 0
    for i in order:
        if not out or size > pack_bytes:
            out.append([])
            size = 0
        out[-1].append(i)
        size += tensor_bytes[i]
    return out


def _check_args(algorithm: str, n: int, tensor_floats: Sequence[int]) -> None:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, not {algorithm!r}")
    if not isinstance(n, int) or isinstance(n, bool) or n < 2:
        raise ValueError(f"n (how many workers synchronise) must be an integer >= 2, not {n!r}")
    for floats in tensor_floats:
        if not isinstance(floats, int) or isinstance(floats, bool) or floats < 1 or floats % n:
            raise ValueError(f"every tensor's length must be a positive multiple of n = {n}, not {floats!r}")


def time_buckets(
    algorithm: str,
    n: int,
    tensor_floats: Sequence[int],
    pack_bytes: Sequence[int],
    *,
    steps: int = 3,
    timeout_ms: int = 120_000,
) -> list[dict[str, Any]]:
    """In a client task: synchronise a model's gradients (one tensor of ``tensor_floats[j]`` floats
    per worker for every ``j``) with ``algorithm`` over the first ``n`` workers, in the buckets
    ``packs`` makes for each of ``pack_bytes`` (1: every tensor alone, 0: all in one); time
    ``steps`` steps of each.

    Every bucket is the worker's tensors joined (``tf.concat``), synchronised, and cut apart
    again; the buckets run side by side, as TensorFlow runs independent ops. Returns one row per
    bucket size: ``pack_bytes``, ``buckets``, ``seconds`` and ``median_s``.

    Example::

        (rows,) = cluster.run(time_buckets, args=("ring", 3, [3000] * 40, [1, 100_000, 0]), on="client").values()
    """
    import tensorflow as tf

    _check_args(algorithm, n, tensor_floats)
    sizes = [4 * f for f in tensor_floats]
    targets: dict[int, list] = {}
    with tf.Graph().as_default() as graph:
        by_tensor = []  # by_tensor[j][i]: worker i's tensor j
        for j, floats in enumerate(tensor_floats):
            with tf.compat.v1.variable_scope(f"tensor_{j}"):
                by_tensor.append(gradient_variables(tf, n, floats, seed=j))
        for pack in pack_bytes:
            ops = []
            for b, members in enumerate(packs(sizes, pack)):
                with tf.name_scope(f"pack_{pack}/bucket_{b}"):
                    mine = [[by_tensor[j][i] for j in members] for i in range(n)]
                    joined = _concat_on(tf, mine, _devices(n), "joined")
                    for i, total in enumerate(build_allreduce(tf, algorithm, joined)):
                        with tf.compat.v1.device(f"/job:worker/task:{i}"):
                            ops += [t.op for t in tf.split(total, [tensor_floats[j] for j in members])]
            targets[pack] = ops
    with master_session(tf, graph) as sess:
        seconds = time_steps(tf, sess, targets, steps, timeout_ms)
    return [
        {
            "pack_bytes": pack,
            "buckets": len(packs(sizes, pack)),
            "seconds": seconds[pack],
            "median_s": statistics.median(seconds[pack]),
        }
        for pack in pack_bytes
    ]


def time_overlap(
    n: int,
    *,
    layers: int = 6,
    width: int = 384,
    batch: int = 256,
    algorithm: str = "ring",
    steps: int = 5,
    timeout_ms: int = 120_000,
) -> list[dict[str, Any]]:
    """In a client task: a real step on the first ``n`` workers (each computes the gradients of
    an MLP of ``layers`` square layers of ``width`` on its own batch, on its device) whose
    per-layer gradients are synchronised with ``algorithm``, timed two ways: ``"overlapped"``,
    where each layer's synchronisation starts as soon as its gradient is ready (the last layer's
    first: the backward pass runs from the output down), and ``"after"``, where every
    synchronisation waits until the whole backward pass is done (a control dependency on every
    gradient). Also ``"compute"``: the forward and the backward pass alone, with no synchronisation.
    Returns one row per way: ``way``, ``seconds``, ``median_s``.

    Example::

        (rows,) = cluster.run(time_overlap, args=(3,), on="client").values()
    """
    import tensorflow as tf

    _check_args(algorithm, n, [width * width])
    with tf.Graph().as_default() as graph:
        per_worker = []
        for i in range(n):
            with tf.compat.v1.device(f"/job:worker/task:{i}"):
                x = tf.random.stateless_uniform([batch, width], seed=[i, 1])
                weights = [
                    tf.compat.v1.get_variable(
                        f"w{i}_{k}",
                        initializer=tf.random.stateless_normal([width, width], seed=[i, k]) * (width**-0.5),
                        use_resource=True,
                    )
                    for k in range(layers)
                ]
                h = x
                for w in weights:
                    h = tf.nn.relu(h @ w)
                loss = tf.reduce_mean(tf.square(h))
                grads = [tf.reshape(g, [-1]) for g in tf.gradients(loss, weights)]
            per_worker.append(grads)
        targets: dict[str, list] = {"compute": [g.op for grads in per_worker for g in grads]}
        for way in ("overlapped", "after"):
            ops = []
            for k in reversed(range(layers)):  # the backward pass makes the last layer's first
                inputs = []
                for i in range(n):
                    with tf.compat.v1.device(f"/job:worker/task:{i}"):
                        if way == "after":
                            with tf.control_dependencies(per_worker[i]):
                                inputs.append(tf.identity(per_worker[i][k]))
                        else:
                            inputs.append(per_worker[i][k])
                with tf.name_scope(f"{way}/layer_{k}"):
                    ops += [t.op for t in build_allreduce(tf, algorithm, inputs)]
            targets[way] = ops
    with master_session(tf, graph) as sess:
        seconds = time_steps(tf, sess, targets, steps, timeout_ms)
    return [{"way": way, "seconds": s, "median_s": statistics.median(s)} for way, s in seconds.items()]


def trace_algorithms(algorithms: Sequence[str], ns: Sequence[int], floats: int) -> dict[tuple[str, int], Any]:
    """In a client task: ``allreduce.sync_run`` (one traced synchronisation, its sums checked) for
    every algorithm and every ``n``, one after another in this one task.

    Example::

        (runs,) = cluster.run(trace_algorithms, args=(ALGORITHMS, range(2, 7), 3000), on="client").values()
    """
    return {(algorithm, n): sync_run(algorithm, n, floats) for algorithm in algorithms for n in ns}
