"""Synchronising gradients three ways: through a parameter server, through ``n`` ps shards, or
around a ring (chapter 9).

Each of the first ``n`` workers holds a gradient vector of ``floats`` float32 numbers (a
variable on that worker). Three graphs add them up so that every worker ends with the sum:

- ``build_ps``: every worker sends its gradient to ``ps:0``, the ps adds them, and every
  worker reads the sum back. The ps receives ``n`` gradients and sends ``n`` sums.
- ``build_sharded_ps``: the gradient is cut into ``n`` shards and shard ``i`` is added up on
  worker ``i``'s machine, which sends the summed shard back to every other worker: a
  parameter server partitioned over ``n`` ps tasks, one beside each worker. Every worker
  sends and receives ``2 (n - 1) / n`` of the gradient, as in the ring, in two rounds of
  messages instead of the ring's ``2 (n - 1)``.
- ``build_ring``: ring all-reduce (Patarasuk & Yuan 2009; Baidu's write-up; Horovod). The
  gradient is cut into ``n`` chunks. Reduce-scatter: ``n - 1`` steps in which every worker
  sends one chunk to its right neighbour, which adds it to its own copy; then every worker
  holds one chunk fully summed. All-gather: ``n - 1`` steps in which the summed chunks go
  round the ring. Every worker sends and receives ``2 (n - 1) / n`` of the gradient,
  whatever ``n`` is.

``ring_schedule(n)`` is the ring as plain Python (who sends which chunk to whom, step by
step); ``build_ring`` turns a schedule into ops placed with ``tf.device``. ``sync_run`` (in
a client task) builds either graph in one client graph, runs it through one session on
worker:0's master with a full trace, and returns the bytes every task sent and received
(from the ``_Send``/``_Recv`` pairs of the partition graphs, ``placement.transfer_table``),
whether every worker got the right sum, and optionally the time per synchronisation.
``expected_bytes`` gives the same table from the formulas, ``expected_link_bytes`` the bytes
on each link. ``trace_steps`` (in the notebook) traces a few synchronisations up close:
every op and every transfer with its bytes, start and end (``timeline``, ``chrome_trace``).
``time_sync`` (in a client task) times the methods side by side, for the α–β model
(``alpha_beta``). ``mwms_allreduce`` all-reduces the same vectors with
``MultiWorkerMirroredStrategy`` (RING) for comparison.

Example (in a notebook; TensorFlow runs only in the tasks)::

    import dtfkit
    from dtfkit.recipes import allreduce

    with dtfkit.LocalCluster(ps=1, workers=4) as cluster:
        (run,) = cluster.run(allreduce.sync_run, args=("ring", 4, 1200), on="client").values()
    run["correct"], run["bytes"]["worker:0"]          # True, {'sent': 7200, 'received': 7200}
    allreduce.expected_bytes("ring", 4, 1200)["worker:0"]   # the same, from the formula

Importing this module does not import TensorFlow.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

import dtfkit
from dtfkit.recipes import placement, timeline
from dtfkit.shown import shown

__all__ = [
    "METHODS",
    "build_ps",
    "build_ring",
    "build_sharded_ps",
    "busiest_link",
    "bytes_by_task",
    "check_sync_args",
    "expected_bytes",
    "expected_link_bytes",
    "mwms_allreduce",
    "ring_schedule",
    "run_schedule_check",
    "simulate",
    "sync_run",
    "sync_sweep",
    "time_sync",
    "trace_steps",
    "trace_sync",
    "worker_gradient",
]

METHODS = ("ps", "sharded_ps", "ring")
# The ps method sends a worker's whole gradient as one tensor, in one gRPC message, and
# TensorFlow's gRPC server takes messages up to int32 max bytes (grpc_server_lib.cc,
# builder.SetMaxMessageSize): 4-byte floats, less 1 MiB for the message's other fields.
MAX_FLOATS = (2**31 - 1 - 2**20) // 4
# What one synchronisation keeps in memory per worker, in gradients: its variable, its read,
# what it receives and its sum, and a little more (the ps method holds n gradients on the ps).
SYNC_COPIES = 5
# A trace is for reading: a few steps. More steps are a measurement (time_sync).
MAX_TRACED_STEPS = 1000
# A day: RunOptions.timeout_in_ms is an int64 of milliseconds, and no trace needs longer.
MAX_TIMEOUT = 86_400.0
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


def simulate(schedule: dict[str, list[list[Send]]], grads: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run a schedule on NumPy arrays (no TensorFlow): what every worker ends with.

    Reduce-scatter sends add to the receiver's chunk; all-gather sends replace it.

    >>> out = simulate(ring_schedule(3), [np.full(6, 1.0), np.full(6, 2.0), np.full(6, 4.0)])
    >>> [o.tolist() for o in out] == [[7.0] * 6] * 3
    True
    """
    n = len(grads)
    chunks = [list(np.array_split(np.asarray(g, dtype=np.float64), n)) for g in grads]
    for phase, combine in (("reduce_scatter", np.add), ("all_gather", lambda _, theirs: theirs)):
        for step in schedule[phase]:
            sent = [(dst, c, chunks[src][c]) for src, dst, c in step]  # every send of a step at once
            for dst, c, value in sent:
                chunks[dst][c] = combine(chunks[dst][c], value)
    return [np.concatenate(c) for c in chunks]


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

    ``servers`` defaults to ``devices``: shard ``j`` is served by worker ``j``'s own task, so
    what worker ``j`` sends to its shard never leaves its machine. That is how a partitioned
    variable is laid out in TensorFlow (``partitioned.partition_variable``): shard ``j`` goes to
    ps task ``j`` (``replica_device_setter`` and ``ParameterServerStrategy`` both place shards
    round robin), and the usual deployment runs ps task ``j`` on worker ``j``'s machine. In a
    dtfkit cluster with ``link=`` every task has a link of its own, so a separate ps task
    would add a link that the machine does not have; worker ``j``'s task stands for its
    machine. Each shard is ``build_ps`` on one slice of the gradients. With
    ``servers=["/job:ps/task:0", ...]`` the shards go to ps tasks of their own instead; then
    every worker's link carries all of its gradient each way (``S``), not ``2 (n - 1) / n`` of it.

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
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, not {shown(method)}")
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
    parts = 1 if method == "ps" else n  # the ring and the shards send 1/n of the gradient at once
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
        grads = _gradients(tf, n, floats, seed)
        outs = _build(tf, method, grads, schedule)
    return graph, grads, outs


def _devices(n: int) -> list[str]:
    return [f"/job:worker/task:{i}" for i in range(n)]


def _gradients(tf: Any, n: int, floats: int, seed: int) -> list:
    """In the default graph: a gradient variable on each of the first ``n`` workers; their reads."""
    grads = []
    for i, device in enumerate(_devices(n)):
        with tf.compat.v1.device(device):
            var = tf.compat.v1.get_variable(
                f"grad_{i}", initializer=worker_gradient(tf, i, floats, seed), use_resource=True
            )
            grads.append(var.read_value())
    return grads


def _build(tf: Any, method: str, grads: Sequence[Any], schedule: dict | None = None) -> list:
    """``method``'s graph over ``grads`` (one per worker, in worker order): each worker's sum."""
    devices = _devices(len(grads))
    if method == "ring":
        return build_ring(tf, grads, devices, schedule)
    if method == "sharded_ps":
        return build_sharded_ps(tf, grads, devices)
    return build_ps(tf, grads, devices)


@contextmanager
def _session(tf: Any, graph: Any, grappler: bool):
    """A session on worker:0's master with the variables initialised (Grappler off unless asked)."""
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

    ``method`` is ``"ring"``, ``"ps"`` (``ps:0``) or ``"sharded_ps"`` (shard ``i`` on worker
    ``i``, ``build_sharded_ps``); ``schedule`` replaces the ring's.
    Each worker's gradient is a variable on that worker (``worker_gradient``). The traced
    run fetches nothing (the sums stay on the workers), so every transfer is the method's.
    Grappler is off unless ``grappler``: then the transfers and bytes are the same, but some
    are named after other ops (it removes Identity ops, see ``_graph_config``).

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
    with _session(tf, graph, grappler) as sess:
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
    with _session(tf, graph, grappler=False) as sess:
        for step in range(steps):
            metadata = tf.compat.v1.RunMetadata()
            sess.run(targets, options=placement.trace_options(timeout_ms=timeout_ms), run_metadata=metadata)
            records += timeline.step_records(metadata, step)
    return records


def trace_steps(
    cluster: Any, method: str, n: int, floats: int, *, steps: int = 1, seed: int = 0, timeout: float = 300.0
) -> list[dict[str, Any]]:
    """In the notebook: trace ``steps`` synchronisations of ``floats`` float32 numbers over the first
    ``n`` workers of ``cluster`` (``"ps"`` through ``ps:0``, ``"sharded_ps"`` or ``"ring"``), in a
    client task.

    Returns plain records (``timeline.step_records``), for ``timeline.link_bytes``,
    ``timeline.plot_timeline`` and ``chrome_trace.write_chrome_trace``. Bad arguments, or a
    cluster without the tasks the method needs serving (too few, killed, exited, or
    ``start_servers=False``), raise ``ValueError`` before anything starts; so does a
    gradient over gRPC's 2 GiB message limit (``MAX_FLOATS``) or one whose synchronisation
    would not fit in half this machine's free memory (``SYNC_COPIES``). A task that dies
    during the trace is not checked for: the trace ends with TensorFlow's error or at ``timeout``.

    Example::

        records = trace_steps(cluster, "ring", 3, 1200, steps=2)
        timeline.link_bytes(records)[0] == expected_link_bytes("ring", 3, 1200)    # True
    """
    check_sync_args(method, n, floats)
    _check_steps(steps, MAX_TRACED_STEPS)
    _check_seed(seed)
    _check_timeout(timeout)
    _check_serving(cluster, method, n)
    _check_memory(n, floats)
    kwargs = {"steps": steps, "seed": seed, "timeout_ms": int(1000 * timeout)}
    (records,) = cluster.run(
        trace_sync, args=(method, n, floats), kwargs=kwargs, on="client", timeout=timeout
    ).values()
    return records


def _check_serving(cluster: Any, method: str, n: int) -> None:
    """Refuse a cluster without the tasks ``method`` needs, serving; ``ValueError`` naming what
    is missing (a trace would wait for it until its timeout)."""
    if not all(hasattr(cluster, name) for name in ("cluster_spec", "run", "status")):
        raise ValueError(
            f"cluster must be a running dtfkit cluster (dtfkit.LocalCluster(ps=1, workers=3)), "
            f"not {shown(cluster)}"
        )
    if getattr(cluster, "closed", False):
        raise ValueError("the cluster is closed: start one with dtfkit.LocalCluster(ps=1, workers=3)")
    spec = cluster.cluster_spec
    have = len(spec.get("worker", []))
    if have < n:
        raise ValueError(
            f"n={n} synchronises {n} workers but the cluster has {have}: "
            f"start one with dtfkit.LocalCluster(ps=1, workers={n}), or pick n <= {have}"
        )
    if method == "ps" and not spec.get("ps"):
        raise ValueError('method "ps" needs a ps task: start the cluster with dtfkit.LocalCluster(ps=1, ...)')
    if not getattr(cluster, "serves", True):
        raise ValueError(
            "the cluster runs no TensorFlow servers (start_servers=False), and the trace runs its "
            "graph on the workers' servers: start one with dtfkit.LocalCluster(ps=1, workers=3)"
        )
    status = cluster.status()
    needed = [f"worker:{i}" for i in range(n)] + (["ps:0"] if method == "ps" else [])
    down = {task: status.get(task, "missing") for task in needed}
    down = {task: state for task, state in down.items() if state not in ("running", "busy")}
    if down:
        words = ", ".join(f"{task} is {state}" for task, state in down.items())
        raise ValueError(
            f"the trace needs {', '.join(needed)} serving, and {words}: its graph would wait for "
            f"them until the timeout. Next step: cluster.restart() starts the stopped tasks again"
        )


def _check_seed(seed: int) -> None:
    if not isinstance(seed, int) or isinstance(seed, bool) or not -(2**63) <= seed < 2**63:
        raise ValueError(f"seed must be an integer (a 64-bit one: TensorFlow's seeds), not {shown(seed)}")


def _check_timeout(timeout: float) -> None:
    ok = isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
    if not ok or not 0 < timeout <= MAX_TIMEOUT:  # NaN fails the comparison too
        raise ValueError(
            f"timeout must be a number of seconds, more than 0 and at most {MAX_TIMEOUT:g} (a day), "
            f"not {shown(timeout)}"
        )


def _check_memory(n: int, floats: int) -> None:
    """Refuse a synchronisation that cannot fit in this machine's memory (all tasks share it)."""
    import psutil

    need = SYNC_COPIES * n * 4 * floats
    available = psutil.virtual_memory().available
    if need > available // 2:
        fits = max(n, available // 2 // (SYNC_COPIES * n * 4) // n * n)
        raise ValueError(
            f"floats={floats:,} over n={n} workers needs about {need / 2**30:.1f} GiB (each worker "
            f"holds about {SYNC_COPIES} copies of its {4 * floats:,}-byte gradient: its variable, its "
            f"read, what it receives, its sum), more than half of the {available / 2**30:.1f} GiB "
            f"this machine has free, and every task runs on this machine: pick floats <= {fits:,}"
        )


def _check_steps(steps: int, most: int | None = None) -> None:
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1 or (most and steps > most):
        upto = f" and at most {most} (a trace is for reading; time_sync measures many steps)" if most else ""
        raise ValueError(f"steps must be an integer >= 1{upto}, not {shown(steps)}")


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

    One graph and one session hold everything. Every step runs once untimed first (the
    master registers its pieces of the graph with the tasks then); the timed steps take
    turns (the first of every method and size, then the second, ...), so that a busy moment
    of the machine does not fall on one method alone.

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
                grads = _gradients(tf, n, floats, seed)
            for method in methods:
                with tf.name_scope(f"{method}_{floats}"):
                    targets[floats, method] = [out.op for out in _build(tf, method, grads)]
            targets[floats, "none"] = [grad.op for grad in grads]
    options = tf.compat.v1.RunOptions(timeout_in_ms=timeout_ms)
    seconds: dict[tuple[int, str], list[float]] = {key: [] for key in targets}
    with _session(tf, graph, grappler=False) as sess:
        for ops in targets.values():
            sess.run(ops, options=options)
        for _ in range(steps):
            for key, ops in targets.items():
                start = time.perf_counter()
                sess.run(ops, options=options)
                seconds[key].append(time.perf_counter() - start)
        transfers: dict[tuple[int, str], list[dict[str, Any]]] = {}
        for key, ops in targets.items() if trace else ():
            metadata = tf.compat.v1.RunMetadata()
            sess.run(ops, options=placement.trace_options(timeout_ms=timeout_ms), run_metadata=metadata)
            transfers[key] = [r for r in timeline.step_records(metadata) if r["kind"] == "transfer"]
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


def expected_bytes(method: str, n: int, floats: int, itemsize: int = 4) -> dict[str, dict[str, int]]:
    """Bytes each task sends and receives in one synchronisation, from the formulas.

    ps: every worker sends its gradient and receives the sum (``size`` each way); ``ps:0``
    receives and sends ``n * size``. ring: every worker sends and receives
    ``2 (n - 1)`` chunks of ``size / n``. sharded_ps: the same as the ring, in other
    messages: every worker sends its ``n - 1`` foreign slices and the ``n - 1`` copies of
    its summed shard, and receives as many.

    >>> expected_bytes("ps", 2, 12)
    {'ps:0': {'sent': 96, 'received': 96}, 'worker:0': {'sent': 48, 'received': 48}, 'worker:1': {'sent': 48, 'received': 48}}
    >>> expected_bytes("ring", 4, 12)["worker:3"] == expected_bytes("sharded_ps", 4, 12)["worker:3"]
    True
    >>> expected_bytes("sharded_ps", 4, 12)["worker:3"]
    {'sent': 72, 'received': 72}
    """
    size = floats * itemsize
    if method == "ps":
        out = {"ps:0": {"sent": n * size, "received": n * size}}
        out.update({f"worker:{i}": {"sent": size, "received": size} for i in range(n)})
        return out
    if method in ("ring", "sharded_ps"):
        per_worker = 2 * (n - 1) * (size // n)
        return {f"worker:{i}": {"sent": per_worker, "received": per_worker} for i in range(n)}
    raise ValueError(f"method must be one of {METHODS}, not {method!r}")


def expected_link_bytes(method: str, n: int, floats: int, itemsize: int = 4) -> dict[tuple[str, str], int]:
    """Bytes on each link (sender, receiver) in one synchronisation, from the formulas.

    ps: each worker sends ``size`` to ``ps:0`` and gets ``size`` back. ring: each worker
    sends its right neighbour ``2 (n - 1)`` chunks of ``size / n``. sharded_ps: every
    worker sends every other worker two slices of ``size / n``: its slice of the other's
    shard, and its own summed shard.

    >>> expected_link_bytes("ring", 3, 12)
    {('worker:0', 'worker:1'): 64, ('worker:1', 'worker:2'): 64, ('worker:2', 'worker:0'): 64}
    >>> expected_link_bytes("sharded_ps", 3, 12)[("worker:2", "worker:0")]
    32
    >>> expected_link_bytes("ps", 2, 12)[("ps:0", "worker:1")]
    48
    """
    size = floats * itemsize
    if method == "ps":
        links = {(f"worker:{i}", "ps:0"): size for i in range(n)}
        links.update({("ps:0", f"worker:{i}"): size for i in range(n)})
        return dict(sorted(links.items()))
    if method == "ring":
        per_link = 2 * (n - 1) * (size // n)
        return {(f"worker:{i}", f"worker:{(i + 1) % n}"): per_link for i in range(n) if per_link}
    if method == "sharded_ps":
        return {(f"worker:{i}", f"worker:{j}"): 2 * (size // n) for i in range(n) for j in range(n) if i != j}
    raise ValueError(f"method must be one of {METHODS}, not {method!r}")


def busiest_link(bytes_table: dict[str, dict[str, int]]) -> int:
    """The most bytes any task sent or received: what its link must carry.

    >>> busiest_link(expected_bytes("ps", 4, 12))
    192
    """
    return max(max(row["sent"], row["received"]) for row in bytes_table.values())


def run_schedule_check(
    schedule_fn: Callable[[int], dict[str, list[list[Send]]]], n: int, floats: int
) -> dict[str, Any]:
    """In a client task: build the ring from ``schedule_fn(n)`` and run it (``sync_run``).

    Example::

        cluster.run(run_schedule_check, args=(ring_schedule, 3, 1200), on="client")
    """
    return sync_run("ring", n, floats, schedule=schedule_fn(n))
