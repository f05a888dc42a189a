"""Runs inside the tasks: the four synchronisations themselves (ring, ps, sharded ps, tree) built as graphs and timed
or traced in a worker (``sync_run``, ``sync_sweep``, ``trace_sync``), the ring's schedule, and the
size checks both sides share.

TensorFlow only inside functions: the kernel imports this module to name what it sends.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

import dtfkit
from dtfkit.recipes.placement import task_side as placement
from dtfkit.recipes.timeline import task_side as timeline
from dtfkit.shown import shown

METHODS = ("ps", "sharded_ps", "ring")
# Chapter 13 adds a fourth: a binary tree, log2(n) rounds up and as many down (MPICH's answer to the
# ring's 2 (n - 1) rounds on small messages). The chapters before it compare the first three.
ALGORITHMS = (*METHODS, "tree")
# The ps method sends a worker's whole gradient as one tensor, in one gRPC message, and
# TensorFlow's gRPC server takes messages up to int32 max bytes (grpc_server_lib.cc,
# builder.SetMaxMessageSize): 4-byte floats, less 1 MiB for the message's other fields.
MAX_FLOATS = (2**31 - 1 - 2**20) // 4
# One transfer of a schedule: (from worker, to worker, chunk index).
Send = tuple[int, int, int]


# ------------------------------------------------------------- the ring, as plain Python
def ring_schedule(n: int) -> dict[str, list[list[Send]]]:
    """Who sends which chunk to whom at every step of a ring all-reduce over ``n`` workers.

    Worker ``i`` always sends to its right neighbour ``(i + 1) % n``. In reduce-scatter
    step ``s`` it sends chunk ``(i - s) % n`` (the one it has just added to); in all-gather
    step ``s`` the finished chunk ``(i + 1 - s) % n``.

    >>> ring_schedule(3)["reduce_scatter"]
    [[(0, 1, 0), (1, 2, 1), (2, 0, 2)], [(0, 1, 2), (1, 2, 0), (2, 0, 1)]]
    >>> ring_schedule(3)["all_gather"]
    [[(0, 1, 1), (1, 2, 2), (2, 0, 0)], [(0, 1, 0), (1, 2, 1), (2, 0, 2)]]
    """
    right = [(i + 1) % n for i in range(n)]
    return {
        "reduce_scatter": [[(i, right[i], (i - s) % n) for i in range(n)] for s in range(n - 1)],
        "all_gather": [[(i, right[i], (i + 1 - s) % n) for i in range(n)] for s in range(n - 1)],
    }


# ------------------------------------------------------------------ the graphs (in tasks)
def build_ring(tf: Any, grads: Sequence[Any], devices: Sequence[str], schedule: dict | None = None) -> list:
    """Ring all-reduce of ``grads[i]`` (on ``devices[i]``); returns each worker's sum, on its device.

    ``schedule`` defaults to ``ring_schedule(len(devices))``. Every send of the schedule
    becomes an op on the *receiving* device whose input lives on the sender: TensorFlow
    cuts the graph there and adds one ``_Send``/``_Recv`` pair, one chunk on the wire.

    Example (in a task)::

        outs = build_ring(tf, [g0, g1, g2], ["/job:worker/task:0", "/job:worker/task:1", "/job:worker/task:2"])
    """
    n = len(devices)
    schedule = schedule if schedule is not None else ring_schedule(n)
    chunks = _split_on(tf, grads, devices, n, "chunks")  # chunks[i][c]: worker i's copy of chunk c
    for s, step in enumerate(schedule["reduce_scatter"]):
        received = [(dst, c, chunks[src][c]) for src, dst, c in step]  # what was sent, before any add
        for dst, c, value in received:
            with tf.compat.v1.device(devices[dst]):
                chunks[dst][c] = tf.add(chunks[dst][c], value, name=f"reduce_scatter_{s}/w{dst}_c{c}")
    for s, step in enumerate(schedule["all_gather"]):
        received = [(dst, c, chunks[src][c]) for src, dst, c in step]
        for dst, c, value in received:
            with tf.compat.v1.device(devices[dst]):
                chunks[dst][c] = tf.identity(value, name=f"all_gather_{s}/w{dst}_c{c}")
    return _concat_on(tf, chunks, devices, "ring_sum")


def _split_on(tf: Any, grads: Sequence[Any], devices: Sequence[str], parts: int, name: str) -> list[list]:
    """Each ``grads[i]`` cut into ``parts`` equal pieces on ``devices[i]``: ``[worker][piece]``."""
    pieces = []
    for i, (grad, device) in enumerate(zip(grads, devices, strict=True)):
        with tf.compat.v1.device(device):
            pieces.append(tf.split(grad, parts, name=f"{name}_{i}"))
    return pieces


def _concat_on(tf: Any, pieces: Sequence[Sequence[Any]], devices: Sequence[str], name: str) -> list:
    """``pieces[i]`` joined again on ``devices[i]``: each worker's whole vector."""
    outs = []
    for i, (mine, device) in enumerate(zip(pieces, devices, strict=True)):
        with tf.compat.v1.device(device):
            outs.append(tf.concat(list(mine), 0, name=f"{name}_{i}"))
    return outs


def build_ps(tf: Any, grads: Sequence[Any], devices: Sequence[str], ps: str = "/job:ps/task:0") -> list:
    """Every worker's gradient to ``ps``, added there, the sum read back by every worker.

    Example (in a task)::

        outs = build_ps(tf, [g0, g1], ["/job:worker/task:0", "/job:worker/task:1"])
    """
    with tf.compat.v1.device(ps):
        total = tf.add_n(list(grads), name="ps_sum")
    outs = []
    for i, device in enumerate(devices):
        with tf.compat.v1.device(device):
            outs.append(tf.identity(total, name=f"read_sum_{i}"))
    return outs


def build_sharded_ps(
    tf: Any, grads: Sequence[Any], devices: Sequence[str], servers: Sequence[str] | None = None
) -> list:
    """A parameter server partitioned into ``len(servers)`` shards: shard ``j`` of every gradient
    goes to ``servers[j]``, is added there, and every worker reads the summed shard back.

    ``servers`` defaults to ``devices``: shard ``j`` is served by worker ``j``'s own task, as a
    partitioned variable is laid out in TensorFlow (``partitioned.partition_variable``: shard ``j``
    on ps task ``j``, round robin in ``replica_device_setter`` and ``ParameterServerStrategy``) with
    ps task ``j`` on worker ``j``'s machine; with ``link=`` a separate ps task would add a link the
    machine does not have. Each shard is ``build_ps`` on one slice of the gradients. With
    ``servers=["/job:ps/task:0", ...]`` the shards go to ps tasks of their own, and every worker's
    link carries all of its gradient each way (``S``), not ``2 (n - 1) / n`` of it.

    Example (in a task)::

        outs = build_sharded_ps(tf, [g0, g1, g2], ["/job:worker/task:0", "/job:worker/task:1", "/job:worker/task:2"])
    """
    servers = list(devices) if servers is None else list(servers)
    shards = _split_on(tf, grads, devices, len(servers), "split")  # shards[i][j]: worker i's slice j
    summed = []  # summed[j][i]: shard j's sum, as worker i reads it
    for j, server in enumerate(servers):
        with tf.name_scope(f"shard_{j}"):
            summed.append(build_ps(tf, [mine[j] for mine in shards], devices, ps=server))
    return _concat_on(
        tf, [[shard[i] for shard in summed] for i in range(len(devices))], devices, "sharded_sum"
    )


def tree_parent(i: int) -> int | None:
    """Worker ``i``'s parent in the binary tree ``build_tree`` uses (heap order: worker 0 is the
    root, the children of ``i`` are ``2i + 1`` and ``2i + 2``).

    >>> [tree_parent(i) for i in range(6)]
    [None, 0, 0, 1, 1, 2]
    """
    return None if i == 0 else (i - 1) // 2


def tree_depth(i: int) -> int:
    """How many links lie between worker ``i`` and the root of the tree.

    >>> [tree_depth(i) for i in range(7)]
    [0, 1, 1, 2, 2, 2, 2]
    """
    return (i + 1).bit_length() - 1


def build_tree(tf: Any, grads: Sequence[Any], devices: Sequence[str]) -> list:
    """Reduce up a binary tree to worker 0, then broadcast the sum down it; each worker's sum.

    Each child sends its whole partial sum, ``S``: ``2 * tree_depth(n - 1)`` rounds in all, against
    the ring's ``2 (n - 1)``; but a parent's link carries ``2 S`` each way in a round, not ``S / n``.

    Example (in a task)::

        outs = build_tree(tf, [g0, g1, g2], ["/job:worker/task:0", "/job:worker/task:1", "/job:worker/task:2"])
    """
    n = len(devices)
    partial = list(grads)
    for i in reversed(range(n)):  # children (larger indices) are summed before their parents
        children = [c for c in (2 * i + 1, 2 * i + 2) if c < n]
        if children:
            with tf.compat.v1.device(devices[i]):
                partial[i] = tf.add_n([partial[i], *(partial[c] for c in children)], name=f"tree_up/w{i}")
    total: list = [None] * n
    for i in range(n):  # parents (smaller indices) have their sum before their children copy it
        parent = tree_parent(i)
        with tf.compat.v1.device(devices[i]):
            source = partial[0] if parent is None else total[parent]
            total[i] = tf.identity(source, name=f"tree_down/w{i}")
    return total


def worker_gradient(tf: Any, index: int, floats: int, seed: int = 0) -> Any:
    """Worker ``index``'s gradient: ``floats`` uniform float32 numbers, the same in every run.

    Example (in a task)::

        g = worker_gradient(tf, 1, 1200)     # a tensor of shape [1200]
    """
    return tf.random.stateless_uniform([floats], seed=[seed, index], minval=-1.0, maxval=1.0)


def _graph_config(tf: Any, grappler: bool = False) -> Any:
    # Without Grappler the partition graphs hold exactly the ops build_ring/build_ps made, so
    # the trace names every transfer after them. Grappler changes no transfer and no byte here
    # (sync_run(grappler=True) shows it), but removes Identity ops: its model pruner (model_pruner.cc)
    # the Identity after each variable read, so the ps receives "Read/ReadVariableOp" instead of
    # "Identity"; its dependency optimizer (dependency_optimizer.cc) the last all-gather step's.
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = not grappler
    return config


def check_sync_args(method: str, n: int, floats: int) -> None:
    """Refuse what ``sync_run`` and ``trace_steps`` cannot run, naming the bad value.

    >>> check_sync_args("ring", 3, 1000)
    Traceback (most recent call last):
    ...
    ValueError: 1000 floats do not split into 3 equal chunks: pick floats divisible by n (e.g. 999 or 1002)
    """
    if not isinstance(method, str) or method not in ALGORITHMS:
        raise ValueError(f"method must be one of {ALGORITHMS}, not {shown(method)}")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n (how many workers synchronise) must be an integer >= 1, not {shown(n)}")
    if not isinstance(floats, int) or isinstance(floats, bool) or floats < 1:
        raise ValueError(f"floats (the gradient's length) must be an integer >= 1, not {shown(floats)}")
    if floats % n:
        near = [m for m in (floats - floats % n, floats - floats % n + n) if m]
        raise ValueError(
            f"{floats} floats do not split into {n} equal chunks: pick floats divisible by n "
            f"(e.g. {' or '.join(map(str, near))})"
        )
    parts = 1 if method in ("ps", "tree") else n  # the ring and the shards send 1/n of the gradient at once
    if floats // parts > MAX_FLOATS:
        sent = "its whole gradient" if parts == 1 else f"1/{n} of the gradient"
        raise ValueError(
            f"floats={floats:,} is too large: the {method} method sends {sent} in one gRPC message "
            f"({4 * floats // parts:,} bytes), and TensorFlow's servers take messages up to 2 GiB "
            f"(grpc_server_lib.cc: SetMaxMessageSize(int32 max)); pick floats <= {MAX_FLOATS * parts:,}"
        )


def _sync_graph(tf: Any, method: str, n: int, floats: int, seed: int, schedule: dict | None) -> tuple:
    """The graph ``sync_run`` and ``trace_sync`` run: a gradient variable on each of the first
    ``n`` workers, read, and the method's sums. Returns ``(graph, reads, sums)``."""
    with tf.Graph().as_default() as graph:
        grads = gradient_variables(tf, n, floats, seed)
        outs = build_allreduce(tf, method, grads, schedule)
    return graph, grads, outs


def _devices(n: int) -> list[str]:
    return [f"/job:worker/task:{i}" for i in range(n)]


def gradient_variables(tf: Any, n: int, floats: int, seed: int = 0) -> list:
    """In the default graph: a gradient variable on each of the first ``n`` workers
    (``worker_gradient``); their reads, in worker order.

    Example (in a task)::

        with tf.compat.v1.variable_scope("layer_3"):
            grads = gradient_variables(tf, 4, 1200, seed=3)
    """
    grads = []
    for i, device in enumerate(_devices(n)):
        with tf.compat.v1.device(device):
            var = tf.compat.v1.get_variable(
                f"grad_{i}", initializer=worker_gradient(tf, i, floats, seed), use_resource=True
            )
            grads.append(var.read_value())
    return grads


def build_allreduce(tf: Any, method: str, grads: Sequence[Any], schedule: dict | None = None) -> list:
    """``method``'s graph (one of ``ALGORITHMS``) over ``grads``, one per worker in worker order,
    worker ``i``'s on ``/job:worker/task:i``: each worker's sum, on its device.

    Example (in a task)::

        outs = build_allreduce(tf, "tree", [g0, g1, g2])
    """
    devices = _devices(len(grads))
    if method == "ring":
        return build_ring(tf, grads, devices, schedule)
    return {"sharded_ps": build_sharded_ps, "tree": build_tree}.get(method, build_ps)(tf, grads, devices)


@contextmanager
def master_session(tf: Any, graph: Any, grappler: bool = False):
    """A session on worker:0's master with ``graph``'s variables initialised (Grappler off unless
    asked: the graph runs as built).

    Example (in a client task)::

        with master_session(tf, graph) as sess:
            sess.run(ops)
    """
    target = "grpc://" + dtfkit.this_task().cluster["worker"][0]
    with graph.as_default(), tf.compat.v1.Session(target, config=_graph_config(tf, grappler)) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        yield sess


def sync_run(
    method: str,
    n: int,
    floats: int,
    *,
    repeats: int = 0,
    seed: int = 0,
    schedule: dict | None = None,
    return_sum: bool = False,
    grappler: bool = False,
    timeout_ms: int = 120_000,
) -> dict[str, Any]:
    """In a client task: synchronise ``floats`` float32 gradients of the first ``n`` workers once,
    traced; check the sums; optionally time ``repeats`` more synchronisations.

    ``method`` is one of ``ALGORITHMS``; ``schedule`` replaces the ring's. The traced run fetches
    nothing (the sums stay on the workers), so every transfer is the method's. Grappler is off
    unless ``grappler``: then the bytes are the same, but some transfers are named after other ops
    (``_graph_config``).

    Returns ``method``, ``n``, ``floats``, ``transfers`` (``placement.transfer_table``
    rows), ``bytes`` (``bytes_by_task``), ``correct`` (every worker's result
    ``np.allclose`` to the NumPy sum), ``max_error``, ``seconds`` (one per repeat), and
    ``sum`` (worker:0's result) when ``return_sum``.

    Example::

        (run,) = cluster.run(sync_run, args=("ps", 3, 1200), on="client").values()
        run["bytes"]["ps:0"]     # {'sent': 14400, 'received': 14400}
    """
    import tensorflow as tf

    check_sync_args(method, n, floats)
    graph, grads, outs = _sync_graph(tf, method, n, floats, seed, schedule)
    targets = [out.op for out in outs]  # run, fetch nothing: no transfer to the client
    with master_session(tf, graph, grappler) as sess:
        traced = placement.trace_run(sess, targets, graph=graph, timeout_ms=timeout_ms)
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            sess.run(targets)
            seconds.append(time.perf_counter() - start)
        values = sess.run(outs + grads)
    results, inputs = values[:n], values[n:]
    want = np.sum(np.stack(inputs), axis=0)
    errors = [float(np.max(np.abs(r - want))) for r in results]
    out = {
        "method": method,
        "n": n,
        "floats": floats,
        "transfers": traced["transfers"],
        "bytes": bytes_by_task(traced["transfers"]),
        "correct": all(np.allclose(r, want, atol=1e-5) for r in results),
        "max_error": max(errors),
        "seconds": seconds,
    }
    if return_sum:
        out["sum"] = results[0]
    return out


def sync_sweep(
    ns: Sequence[int],
    floats: int,
    *,
    methods: Sequence[str] = ("ps", "ring"),
    repeats: int = 0,
    seed: int = 0,
    grappler: bool = False,
) -> list[dict[str, Any]]:
    """In a client task: ``sync_run`` for every ``n`` in ``ns`` and every method of ``methods``
    (chapter 9's two unless told; ``METHODS`` has all three), in one process (a client task
    starts in seconds; one for the whole sweep). ``sum`` is kept for the largest ``n`` of the ring.

    Example::

        (runs,) = cluster.run(sync_sweep, args=([2, 3, 4], 1200), on="client").values()
        [(r["method"], r["n"], r["bytes"]["worker:0"]["sent"]) for r in runs]
    """
    return [
        sync_run(
            method,
            n,
            floats,
            repeats=repeats,
            seed=seed,
            return_sum=(method == "ring" and n == max(ns)),
            grappler=grappler,
        )
        for n in ns
        for method in methods
    ]


def trace_sync(
    method: str, n: int, floats: int, *, steps: int = 1, seed: int = 0, timeout_ms: int = 120_000
) -> list[dict[str, Any]]:
    """In a client task: run ``steps`` synchronisations (``sync_run``'s graph), each traced; return
    their ``timeline.step_records``: what every task computed and sent, and when.

    Example::

        (records,) = cluster.run(trace_sync, args=("ring", 3, 1200), kwargs={"steps": 2}, on="client").values()
    """
    import tensorflow as tf

    check_sync_args(method, n, floats)
    graph, _, outs = _sync_graph(tf, method, n, floats, seed, None)
    targets = [out.op for out in outs]
    records: list[dict[str, Any]] = []
    with master_session(tf, graph) as sess:
        for step in range(steps):
            records += timeline.step_records(_traced_metadata(tf, sess, targets, timeout_ms), step)
    return records


def _traced_metadata(tf: Any, sess: Any, fetches: Any, timeout_ms: int) -> Any:
    """Run ``fetches`` once with a full trace (``placement.trace_options``); its ``RunMetadata``."""
    metadata = tf.compat.v1.RunMetadata()
    sess.run(fetches, options=placement.trace_options(timeout_ms=timeout_ms), run_metadata=metadata)
    return metadata


def _check_steps(steps: int, most: int | None = None) -> None:
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1 or (most and steps > most):
        upto = f" and at most {most} (a trace is for reading; time_sync measures many steps)" if most else ""
        raise ValueError(f"steps must be an integer >= 1{upto}, not {shown(steps)}")


def time_steps(
    tf: Any, sess: Any, targets: dict[Any, list], steps: int, timeout_ms: int
) -> dict[Any, list[float]]:
    """Run every target once untimed (the master registers its pieces of the graph with the tasks
    then), then time ``steps`` runs of each, taking turns, so that a busy moment of the machine does
    not fall on one target alone: ``{key: [seconds, ...]}``.

    Example (in a client task)::

        seconds = time_steps(tf, sess, {"ring": ring_ops, "ps": ps_ops}, 3, 120_000)
    """
    options = tf.compat.v1.RunOptions(timeout_in_ms=timeout_ms)
    for ops in targets.values():
        sess.run(ops, options=options)
    seconds: dict[Any, list[float]] = {key: [] for key in targets}
    for _ in range(steps):
        for key, ops in targets.items():
            start = time.perf_counter()
            sess.run(ops, options=options)
            seconds[key].append(time.perf_counter() - start)
    return seconds


def time_sync(
    methods: Sequence[str],
    n: int,
    sizes: Sequence[int],
    *,
    steps: int = 3,
    seed: int = 0,
    timeout_ms: int = 120_000,
    trace: bool = False,
) -> list[dict[str, Any]]:
    """In a client task: time ``steps`` synchronisations of every method of ``methods`` over the
    first ``n`` workers, for gradients of every length in ``sizes`` (floats); and as many
    empty steps (method ``"none"``: each worker only reads its gradient, nothing crosses a
    link), what a step costs before any communication (the client's call to the master, the
    master's to every task, their answers).

    One graph and one session hold everything; ``time_steps`` runs the steps, taking turns.

    Returns one row per size and method (``methods``, then ``"none"``): ``method``, ``n``,
    ``floats``, ``bytes`` (``4 * floats``), ``seconds`` (one per step), ``median_s``. With
    ``trace=True``, after the timed steps one more step of every method and size runs traced,
    and its row gets ``transfers``: that step's transfer records (``timeline.step_records``,
    no compute records), which say when each tensor was ready and when it arrived.

    Example::

        (rows,) = cluster.run(time_sync, args=(METHODS, 3, [300, 300_000]), on="client").values()
        {(r["method"], r["bytes"]): r["median_s"] for r in rows}
    """
    import statistics

    import tensorflow as tf

    _check_steps(steps)
    for floats in sizes:
        for method in methods:
            check_sync_args(method, n, floats)
    targets: dict[tuple[int, str], list] = {}
    with tf.Graph().as_default() as graph:
        for floats in sizes:
            with tf.compat.v1.variable_scope(f"floats_{floats}"):
                grads = gradient_variables(tf, n, floats, seed)
            for method in methods:
                with tf.name_scope(f"{method}_{floats}"):
                    targets[floats, method] = [out.op for out in build_allreduce(tf, method, grads)]
            targets[floats, "none"] = [grad.op for grad in grads]
    with master_session(tf, graph) as sess:
        seconds = time_steps(tf, sess, targets, steps, timeout_ms)
        transfers: dict[tuple[int, str], list[dict[str, Any]]] = {}
        for key, ops in targets.items() if trace else ():
            records = timeline.step_records(_traced_metadata(tf, sess, ops, timeout_ms))
            transfers[key] = [r for r in records if r["kind"] == "transfer"]
    return [
        {
            "method": method,
            "n": n,
            "floats": floats,
            "bytes": 4 * floats,
            "seconds": taken,
            "median_s": statistics.median(taken),
            **({"transfers": transfers[floats, method]} if trace else {}),
        }
        for (floats, method), taken in seconds.items()
    ]


def mwms_allreduce(floats: int, *, seed: int = 0, repeats: int = 0) -> dict[str, Any]:
    """On every worker of ``LocalCluster(workers=n, start_servers=False)``: all-reduce (SUM) this
    worker's ``worker_gradient`` with ``MultiWorkerMirroredStrategy`` and the RING implementation.

    Creates the strategy first (before any op). Returns ``task``, ``num_replicas``,
    ``gradient`` (this worker's own vector), ``sum`` (the all-reduced vector) and
    ``seconds`` (one per repeat).

    Example::

        with dtfkit.LocalCluster(workers=4, start_servers=False) as c:
            c.run(mwms_allreduce, args=(1200,))["worker:0"]["sum"]
    """
    import tensorflow as tf

    ring = tf.distribute.experimental.CommunicationImplementation.RING
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(implementation=ring)
    )
    index = strategy.cluster_resolver.task_id
    mine = worker_gradient(tf, index, floats, seed)

    @tf.function
    def all_reduce():
        per_replica = strategy.run(lambda: tf.identity(mine))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    total = all_reduce().numpy()  # the first call also traces and sets up the collective
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        all_reduce().numpy()
        seconds.append(time.perf_counter() - start)
    return {
        "task": f"worker:{index}",
        "num_replicas": int(strategy.num_replicas_in_sync),
        "gradient": mine.numpy(),
        "sum": total,
        "seconds": seconds,
    }


# ------------------------------------------------------------- plain Python (no TensorFlow)
def bytes_by_task(transfers: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Bytes each task sent and received, from ``transfer_table`` rows (unknown sizes count 0).

    >>> bytes_by_task([{"from": "worker:0", "to": "ps:0", "bytes": 8}, {"from": "ps:0", "to": "worker:0", "bytes": 8}])
    {'ps:0': {'sent': 8, 'received': 8}, 'worker:0': {'sent': 8, 'received': 8}}
    """
    out: dict[str, dict[str, int]] = {}
    for row in transfers:
        size = int(row.get("bytes") or 0)
        out.setdefault(row["from"], {"sent": 0, "received": 0})["sent"] += size
        out.setdefault(row["to"], {"sent": 0, "received": 0})["received"] += size
    return dict(sorted(out.items()))


def run_schedule_check(
    schedule_fn: Callable[[int], dict[str, list[list[Send]]]], n: int, floats: int
) -> dict[str, Any]:
    """In a client task: build the ring from ``schedule_fn(n)`` and run it (``sync_run``).

    Example::

        cluster.run(run_schedule_check, args=(ring_schedule, 3, 1200), on="client")
    """
    return sync_run("ring", n, floats, schedule=schedule_fn(n))
