"""Runs inside the tasks: the traced ``Session.run`` and the tables read from its ``RunMetadata``: ops,
transfers and partitions per task.

TensorFlow only inside functions: the kernel imports this module to name what it sends.
"""

from __future__ import annotations

import re
from typing import Any

# Ops the executor adds to every partition, and the RPC pseudo-op of a transfer.
_INTERNAL_OPS = ("_SOURCE", "_SINK", "RecvTensor")
_VARIABLE_OP_TYPES = ("VarHandleOp", "VariableV2", "Variable", "AutoReloadVariable")
_JOB = re.compile(r"/job:([^/]+)")
_TASK = re.compile(r"/task:(\d+)")
_REPLICA = re.compile(r"/replica:(\d+)")
# "[16B] [0.41Mb/s] edge_11_add/ReadVariableOp from /job:ps/... to /job:worker/..."
# The size is "[4800B]", or "[1.5MB]" from 0.1 MiB on (worker_cache_logger.cc).
_RECV_LABEL = re.compile(r"^\[([^\]]+)\].*?\b(edge_\d+_\S+) from (\S+) to (\S+)")
_EXACT_SIZE = re.compile(r"^(\d+)B$")


# --------------------------------------------------------------------- device names
def short_task(device: str) -> str:
    """The dtfkit name of the task in a device string; ``""`` when it names no job.

    >>> short_task("/job:ps/replica:0/task:0/device:CPU:0")
    'ps:0'
    >>> short_task("/job:worker/task:1")
    'worker:1'
    >>> short_task("/job:ps")
    'ps'
    >>> short_task("/device:CPU:0")
    ''
    """
    job = _JOB.search(device or "")
    if job is None:
        return ""
    task = _TASK.search(device)
    return f"{job.group(1)}:{task.group(1)}" if task else job.group(1)


def task_of(device: str) -> str:
    """The task part of a full device name, as TensorFlow writes it (no ``/device:...``).

    >>> task_of("/job:ps/replica:0/task:0/device:CPU:0")
    '/job:ps/replica:0/task:0'
    >>> task_of("/job:worker/task:1")
    '/job:worker/replica:0/task:1'
    """
    job = _JOB.search(device or "")
    if job is None:
        return ""
    replica = _REPLICA.search(device)
    task = _TASK.search(device)
    out = f"/job:{job.group(1)}/replica:{replica.group(1) if replica else 0}"
    return out + (f"/task:{task.group(1)}" if task else "")


# ------------------------------------------------------------------------- tracing
def trace_options(*, partition_graphs: bool = True, timeout_ms: int | None = None) -> Any:
    """``RunOptions`` with a full trace (and the partition graphs, unless told not to).

    ``timeout_ms`` bounds the run (``RunOptions.timeout_in_ms``)."""
    import tensorflow as tf

    options = tf.compat.v1.RunOptions(
        trace_level=tf.compat.v1.RunOptions.FULL_TRACE, output_partition_graphs=partition_graphs
    )
    if timeout_ms is not None:
        options.timeout_in_ms = int(timeout_ms)
    return options


def trace_run(
    sess: Any,
    fetches: Any,
    feed_dict: dict | None = None,
    *,
    graph: Any = None,
    include_internal: bool = False,
    timeout_ms: int | None = None,
) -> dict[str, Any]:
    """Run ``fetches`` once with a full trace; return the value and where everything ran.

    Returns a plain dict (safe to send back to the notebook):

    - ``"value"``: what ``sess.run`` returned (NumPy),
    - ``"ops"``: ``op_table`` rows, one per op executed, in the order they started,
    - ``"transfers"``: ``transfer_table`` rows, one per tensor sent between tasks,
    - ``"partitions"``: ``partition_table`` rows, one per piece the master cut the graph into.

    ``graph`` (default: the session's) gives each op its graph type.

    Example::

        traced = trace_run(sess, train_op, {images: x, labels: y})
        {row["op"]: row["task"] for row in traced["ops"]}
    """
    import tensorflow as tf

    metadata = tf.compat.v1.RunMetadata()
    value = sess.run(
        fetches, feed_dict=feed_dict, options=trace_options(timeout_ms=timeout_ms), run_metadata=metadata
    )
    graph = graph if graph is not None else getattr(sess, "graph", None)
    return {
        "value": value,
        "ops": op_table(metadata, graph, include_internal=include_internal),
        "transfers": transfer_table(metadata),
        "partitions": partition_table(metadata),
    }


def op_table(run_metadata: Any, graph: Any = None, *, include_internal: bool = False) -> list[dict[str, Any]]:
    """One row per executed op, from ``run_metadata.step_stats.dev_stats``, by start time.

    Each row: ``op`` (name), ``type`` (the graph's op type when ``graph`` knows the
    op, else the kernel's), ``kernel`` (what the executor ran, e.g. ``_MklMatMul``
    for a ``MatMul`` rewritten for oneDNN), ``task`` (``"worker:0"``), ``device``
    (``"/job:worker/replica:0/task:0/device:CPU:0"``), ``start_ms`` (from the first
    op of the step) and ``duration_ms``. ``_SOURCE``/``_SINK`` and the transfers'
    ``RecvTensor`` rows are left out unless ``include_internal``.

    Example::

        metadata = tf.compat.v1.RunMetadata()
        sess.run(z, options=trace_options(), run_metadata=metadata)
        op_table(metadata, sess.graph)
    """
    nodes = [
        (dev.device, node)
        for dev in run_metadata.step_stats.dev_stats
        for node in dev.node_stats
        if include_internal or node.node_name not in _INTERNAL_OPS
    ]
    if not nodes:
        return []
    t0 = min(node.all_start_micros for _, node in nodes)
    rows = []
    for device, node in sorted(nodes, key=lambda item: (item[1].all_start_micros, item[0])):
        kernel = kernel_of(node.timeline_label) or node.node_name
        rows.append(
            {
                "op": node.node_name,
                "type": _graph_type(graph, node.node_name) or kernel,
                "kernel": kernel,
                "task": short_task(device),
                "device": device,
                "start_ms": (node.all_start_micros - t0) / 1000.0,
                "duration_ms": node.all_end_rel_micros / 1000.0,
            }
        )
    return rows


def transfer_table(run_metadata: Any, *, nodes: bool = False) -> list[dict[str, Any]]:
    """One row per tensor that crossed from one task to another during the traced step.

    Each row: ``tensor`` (the op whose output travelled, or the fed/fetched tensor),
    ``kind`` (``"edge"`` between two pieces of the graph, ``"feed"`` from the
    client's side, ``"fetch"`` back to it), ``bytes`` (``None`` when the trace does
    not say), ``from`` and ``to`` (task names), ``from_device`` and ``to_device``.
    Moves between devices of one task are not listed. With ``nodes`` (and partition
    graphs), also ``edge`` (the rendezvous key's tensor name, as in ``recv_tensor_log``),
    ``send_node`` and ``recv_node``: the names of the ``_Send`` and ``_Recv`` ops the
    master added for it (``""`` where a partition has none); the receiver's ops name
    ``recv_node`` as their input (``timeline.step_records`` times transfers with them).

    The rows come from the ``_Send``/``_Recv`` pairs in the partition graphs (a run
    with ``output_partition_graphs``, as ``trace_options()`` asks): they are complete
    and the same on every run. Without partition graphs they come from ``recv_tensor_log``
    (best effort: transfers received by remote tasks may be missing).

    Example::

        [(r["tensor"], r["from"], r["to"]) for r in transfer_table(metadata)]
        # [('MatMul/ReadVariableOp', 'ps:0', 'worker:0'), ('add', 'worker:0', 'worker:1'), ...]
    """
    logged = recv_tensor_log(run_metadata)
    if not run_metadata.partition_graphs:
        rows = sorted(logged.values(), key=lambda row: (row["start_micros"], row["tensor"]))
        return [
            _transfer_row(r["tensor"], "edge", r["bytes"], r["from_device"], r["to_device"]) for r in rows
        ]
    stats = {node.node_name: node for dev in run_metadata.step_stats.dev_stats for node in dev.node_stats}
    starts = [node.all_start_micros for node in stats.values()]
    t0 = min(starts) if starts else 0
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    pairs: dict[tuple[str, str, str], dict[str, str]] = {}  # the _Send and _Recv op of each edge
    for graph_def in run_metadata.partition_graphs:
        for node in graph_def.node:
            if node.op not in _SEND_OPS + _RECV_OPS:
                continue
            src, dst = _attr(node, "send_device"), _attr(node, "recv_device")
            if not src or not dst or task_of(src) == task_of(dst):
                continue
            name = _attr(node, "tensor_name")
            side = "send_node" if node.op in _SEND_OPS else "recv_node"
            pairs.setdefault((name, src, dst), {"edge": name, "send_node": "", "recv_node": ""})[side] = (
                node.name
            )
            client = bool(node.attr["client_terminated"].b) if "client_terminated" in node.attr else False
            if node.op in _RECV_OPS and not client:
                continue  # the matching _Send describes this edge
            tensor = _EDGE_PREFIX.sub("", name)
            kind = "edge" if not client else ("feed" if node.op in _RECV_OPS else "fetch")
            source = node.input[0].split(":")[0] if node.input else ""
            size = None
            if source in stats:  # what the sending op produced: recorded by every task
                slot = int(node.input[0].split(":")[1]) if ":" in node.input[0] else 0
                outputs = {o.slot: o for o in stats[source].output}
                if slot in outputs:
                    size = (
                        int(outputs[slot].tensor_description.allocation_description.requested_bytes) or None
                    )
            if size is None:
                size = logged.get((tensor, short_task(src), short_task(dst)), {}).get("bytes")
            start = stats[source].all_start_micros - t0 if source in stats else -1
            found[(name, src, dst)] = dict(_transfer_row(tensor, kind, size, src, dst), _start=start)
    if nodes:
        for key, row in found.items():
            row.update(pairs[key])
    rows = sorted(found.values(), key=lambda row: (row.pop("_start"), row["tensor"]))
    return rows


_SEND_OPS = ("_Send", "_HostSend")
_RECV_OPS = ("_Recv", "_HostRecv")
_EDGE_PREFIX = re.compile(r"^edge_\d+_")


def _transfer_row(
    tensor: str, kind: str, size: int | None, from_device: str, to_device: str
) -> dict[str, Any]:
    return {
        "tensor": tensor,
        "kind": kind,
        "bytes": size,
        "from": short_task(from_device),
        "to": short_task(to_device),
        "from_device": from_device,
        "to_device": to_device,
    }


def _attr(node: Any, key: str) -> str:
    if key not in node.attr:
        return ""
    value = node.attr[key].s
    return value.decode() if isinstance(value, bytes) else str(value)


def recv_tensor_log(run_metadata: Any) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The ``RecvTensor`` records of a trace, by (tensor, from task, to task).

    Each is one gRPC ``RecvTensor`` call as the receiving task logged it: ``tensor``,
    ``edge`` (the rendezvous key's tensor name, ``edge_<id>_<tensor>``), ``bytes`` (``None``
    from 0.1 MiB on, which the log rounds to "[1.5MB]"), ``from_device``, ``to_device``, and ``start_micros``/``end_micros`` (when the call
    went out and when its answer arrived, on the receiver's clock). Best effort: the
    master switches RPC logging on in the remote tasks with a call it does not wait for
    (``MasterSession``'s ``SetRPCLogging``), so a remote task's first transfers of a step
    may be missing. The executor records no step stats for ``_Send``/``_Recv`` themselves.

    Example::

        {key: row["bytes"] for key, row in recv_tensor_log(metadata).items()}
    """
    out = {}
    for dev in run_metadata.step_stats.dev_stats:
        for node in dev.node_stats:
            if node.node_name != "RecvTensor":
                continue
            match = _RECV_LABEL.search(node.timeline_label)
            if match is None:
                continue
            size_label, edge, src, dst = match.groups()
            exact = _EXACT_SIZE.match(size_label)
            edge = edge.split(";")[0]
            tensor = _EDGE_PREFIX.sub("", edge)
            out[(tensor, short_task(src), short_task(dst))] = {
                "tensor": tensor,
                "edge": edge,
                "bytes": int(exact.group(1)) if exact else None,
                "from_device": src,
                "to_device": dst,
                "start_micros": node.all_start_micros,
                "end_micros": node.all_start_micros + node.all_end_rel_micros,
            }
    return out


def partition_table(run_metadata: Any) -> list[dict[str, Any]]:
    """The pieces the master cut the graph into: one row per partition (per device).

    Needs a run with ``output_partition_graphs`` (``trace_options()`` sets it). Each
    row: ``task``, ``device``, ``ops`` (the graph's own ops in that piece, by name),
    ``sends`` and ``recvs`` (how many ``_Send``/``_Recv`` ops the master added to
    move tensors between pieces).

    Example::

        {row["task"]: row["ops"] for row in partition_table(metadata)}
    """
    rows = []
    for graph_def in run_metadata.partition_graphs:
        devices = sorted({node.device for node in graph_def.node if node.device})
        device = devices[0] if devices else ""
        ops = sorted(node.name for node in graph_def.node if node.op not in _SEND_OPS + _RECV_OPS)
        rows.append(
            {
                "task": short_task(device),
                "device": device,
                "ops": ops,
                "sends": sum(node.op in _SEND_OPS for node in graph_def.node),
                "recvs": sum(node.op in _RECV_OPS for node in graph_def.node),
            }
        )
    rows.sort(key=lambda row: row["device"])
    return rows


def kernel_of(label: str) -> str:
    """The kernel a step-stats timeline label names (``""`` when the label names none).

    >>> kernel_of("MatMul_1 = _MklMatMul(add, MatMul_1/ReadVariableOp)")
    '_MklMatMul'
    >>> kernel_of("[16B] [0.41Mb/s] edge_11_add from /job:ps/task:0 to /job:worker/task:0")
    ''
    """
    _, sep, rest = label.partition(" = ")
    return rest.split("(", 1)[0].strip() if sep else ""


def _graph_type(graph: Any, name: str) -> str:
    if graph is None:
        return ""
    try:
        return graph.get_operation_by_name(name).type
    except (KeyError, ValueError, TypeError):
        return ""


# ----------------------------------------------------------------------- variables
def variable_devices(graph: Any = None) -> list[dict[str, Any]]:
    """Every variable of ``graph`` (default: the default graph) and the device it asked for.

    This is ``op.device``: what ``tf.device`` or ``replica_device_setter`` assigned
    when the graph was built, before any session ran. ``""`` means no device was
    asked for and the master will choose; a trace (``op_table``) shows where it
    actually ran. Each row: ``variable`` (name), ``shape``, ``dtype``, ``trainable``,
    ``device`` and ``task`` (``"ps:1"``).

    Example::

        with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(cluster=spec)):
            ...build the model...
        variable_devices()   # [{'variable': 'dense/kernel', ..., 'task': 'ps:0'}, ...]
    """
    import tensorflow as tf

    graph = graph if graph is not None else tf.compat.v1.get_default_graph()
    trainable = {v.op.name for v in graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)}
    rows = []
    for op in graph.get_operations():
        if op.type not in _VARIABLE_OP_TYPES:
            continue
        try:
            shape = tf.TensorShape(op.get_attr("shape")).as_list()
            dtype = tf.as_dtype(op.get_attr("dtype")).name
        except (ValueError, TypeError):
            shape, dtype = op.outputs[0].shape.as_list(), op.outputs[0].dtype.base_dtype.name
        rows.append(
            {
                "variable": op.name,
                "shape": shape,
                "dtype": dtype,
                "trainable": op.name in trainable,
                "device": op.device,
                "task": short_task(op.device),
            }
        )
    return rows
