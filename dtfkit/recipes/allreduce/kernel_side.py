"""Runs in the notebook kernel: the α–β simulation of the three synchronisations, the traced steps'
bytes per link, and the formulas the chapter's outputs are checked against.

Never imports TensorFlow: what runs in the tasks is in ``task_side``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dtfkit.recipes.allreduce.task_side import (
    ALGORITHMS,
    Send,
    _check_steps,
    check_sync_args,
    trace_sync,
    tree_parent,
)
from dtfkit.shown import shown

# What one synchronisation keeps in memory per worker, in gradients: its variable, its read,
# what it receives and its sum, and a little more (the ps method holds n gradients on the ps).
SYNC_COPIES = 5
# A trace is for reading: a few steps. More steps are a measurement (time_sync).
MAX_TRACED_STEPS = 1000
# A day: RunOptions.timeout_in_ms is an int64 of milliseconds, and no trace needs longer.
MAX_TIMEOUT = 86_400.0


def simulate(schedule: dict[str, list[list[Send]]], grads: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run a schedule on NumPy arrays (no TensorFlow): what every worker ends with.

    Reduce-scatter sends add to the receiver's chunk; all-gather sends replace it.

    >>> from dtfkit.recipes.allreduce.task_side import ring_schedule
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


def require_workers(spec: dict[str, list[str]], name: str, count: int, what: str = "") -> None:
    """Refuse a ClusterSpec with fewer than ``count`` workers, which the argument ``name`` asked for
    (``what``: how); the ``ValueError`` says how to get a cluster that fits.

    Example::

        >>> require_workers({"worker": ["localhost:1", "localhost:2"]}, "workers", 3)
        Traceback (most recent call last):
        ValueError: workers=3 but the cluster has 2: start one with dtfkit.LocalCluster(ps=1, workers=3), or pick workers <= 2
    """
    have = len(spec.get("worker", []))
    if have < count:
        raise ValueError(
            f"{name}={count}{what} but the cluster has {have}: start one with "
            f"dtfkit.LocalCluster(ps=1, workers={count}), or pick {name} <= {have}"
        )


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
    require_workers(spec, "n", n, f" synchronises {n} workers")
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


def expected_bytes(method: str, n: int, floats: int, itemsize: int = 4) -> dict[str, dict[str, int]]:
    """Bytes each task sends and receives in one synchronisation, from the formulas: the sums of
    ``expected_link_bytes`` over its links. ps: ``ps:0`` receives and sends ``n * size``, each worker
    ``size``. ring and sharded_ps: every worker ``2 (n - 1)`` chunks of ``size / n`` each way, in
    other messages. tree: ``size`` for each tree link a worker has (to its parent, to each child).

    >>> expected_bytes("ps", 2, 12)
    {'ps:0': {'sent': 96, 'received': 96}, 'worker:0': {'sent': 48, 'received': 48}, 'worker:1': {'sent': 48, 'received': 48}}
    >>> expected_bytes("ring", 4, 12)["worker:3"] == expected_bytes("sharded_ps", 4, 12)["worker:3"]
    True
    >>> expected_bytes("sharded_ps", 4, 12)["worker:3"]
    {'sent': 72, 'received': 72}
    >>> expected_bytes("tree", 5, 12)["worker:1"]    # its parent, worker 0, and its children 3 and 4
    {'sent': 144, 'received': 144}
    """
    links = expected_link_bytes(method, n, floats, itemsize)  # what each task sends is on its links
    tasks = (["ps:0"] if method == "ps" else []) + [f"worker:{i}" for i in range(n)]
    out = {task: {"sent": 0, "received": 0} for task in tasks}
    for (src, dst), size in links.items():
        out[src]["sent"] += size
        out[dst]["received"] += size
    return out


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
    if method == "tree":
        links = {(f"worker:{i}", f"worker:{tree_parent(i)}"): size for i in range(1, n)}
        links.update({(f"worker:{tree_parent(i)}", f"worker:{i}"): size for i in range(1, n)})
        return dict(sorted(links.items()))
    raise ValueError(f"method must be one of {ALGORITHMS}, not {method!r}")


def busiest_link(bytes_table: dict[str, dict[str, int]]) -> int:
    """The most bytes any task sent or received: what its link must carry.

    >>> busiest_link(expected_bytes("ps", 4, 12))
    192
    """
    return max(max(row["sent"], row["received"]) for row in bytes_table.values())
