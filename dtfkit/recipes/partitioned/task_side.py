"""Runs inside the tasks: one variable cut into partitions over the ps tasks (``partition_variable``).

TensorFlow only inside functions: the kernel imports this module to name what it sends.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import dtfkit
from dtfkit.recipes.placement import task_side as placement


def _read_of(graph: Any, tensor: str) -> str:
    """The variable a transferred tensor was read from ("" if it is no variable's read): the
    reads are named after the concat that joins them (``.../ConcatPartitions/concat/ReadVariableOp_1``),
    so the graph says which shard's handle each one reads."""
    try:
        op = graph.get_operation_by_name(tensor.split(":")[0])
    except (KeyError, ValueError):
        return ""
    return op.inputs[0].op.name if op.type == "ReadVariableOp" and op.inputs else ""


def partition_variable(
    floats: int, shards: int, *, seed: int = 0, timeout_ms: int = 120_000
) -> dict[str, Any]:
    """In a client task: a ``floats``-long float32 variable in ``shards`` pieces over the cluster's
    ps tasks (``fixed_size_partitioner`` + ``replica_device_setter``), read once on ``worker:0``.

    Returns plain data:

    - ``shards``: one row per shard, in order: ``shard``, ``variable`` (its name),
      ``shape``, ``asked`` (the task ``replica_device_setter`` assigned when the graph was
      built), ``task`` (where its variable op ran in the traced read; where a read of it ran
      if the trace has no row for the variable op), ``size_bytes``,
      ``sent_bytes`` (the bytes of its read that reached ``worker:0`` in the traced read),
    - ``sent_to_worker``: the bytes each task sent to ``worker:0`` in the traced read
      (``placement.transfer_table``),
    - ``correct``: the read equals the initial value, shard after shard.

    Example::

        (report,) = cluster.run(partition_variable, args=(1200, 3), on="client").values()
    """
    import tensorflow as tf

    for name, value in (("floats", floats), ("shards", shards)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, not {value!r}")
    if shards > floats:
        raise ValueError(f"{floats} floats cannot be cut into {shards} shards: pick shards <= floats")
    spec = dtfkit.this_task().cluster
    if not spec.get("ps"):
        raise ValueError(
            "a partitioned variable lives on ps tasks: start the cluster with LocalCluster(ps=2, ...)"
        )
    want = np.random.default_rng(seed).uniform(-1.0, 1.0, floats).astype(np.float32)
    jobs = {job: spec[job] for job in ("ps", "worker")}
    with tf.Graph().as_default() as graph:
        setter = tf.compat.v1.train.replica_device_setter(
            cluster=tf.train.ClusterSpec(jobs), worker_device="/job:worker/task:0"
        )
        with tf.compat.v1.device(setter):

            def initial(shape, dtype=None, partition_info=None):
                # get_variable calls this once per shard, with where the shard starts
                start = partition_info.var_offset[0] if partition_info is not None else 0
                return tf.constant(want[start : start + shape[0]], dtype=dtype)

            variable = tf.compat.v1.get_variable(
                "partitioned",
                initializer=initial,
                shape=[floats],
                dtype=tf.float32,
                partitioner=tf.compat.v1.fixed_size_partitioner(shards),
                use_resource=True,
            )
            read = tf.identity(tf.convert_to_tensor(variable), name="read_all")
        parts = list(variable)
        asked = {part.op.name: placement.short_task(part.op.device) for part in parts}
        target = "grpc://" + spec["worker"][0]
        with tf.compat.v1.Session(target, graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            traced = placement.trace_run(sess, read, graph=graph, timeout_ms=timeout_ms)
    ran = {row["op"]: row["task"] for row in traced["ops"] if row["op"] in asked}
    for row in traced["ops"]:  # no row for a variable op: where a read of it ran (it sits with it)
        owner = row["op"].split("/Read")[0]
        if row["type"] == "ReadVariableOp" and owner in asked:
            ran.setdefault(owner, row["task"])
    sent: dict[str, int] = {}
    by_shard: dict[str, int] = {}
    for row in traced["transfers"]:
        if row["kind"] == "edge" and row["to"] == "worker:0":
            sent[row["from"]] = sent.get(row["from"], 0) + int(row["bytes"] or 0)
            owner = _read_of(graph, row["tensor"])
            by_shard[owner] = by_shard.get(owner, 0) + int(row["bytes"] or 0)
    rows = [
        {
            "shard": i,
            "variable": part.op.name,
            "shape": part.shape.as_list(),
            "asked": asked[part.op.name],
            "task": ran.get(part.op.name, ""),
            "size_bytes": 4 * int(part.shape.num_elements()),
            "sent_bytes": by_shard.get(part.op.name, 0),
        }
        for i, part in enumerate(parts)
    ]
    return {
        "shards": rows,
        "sent_to_worker": dict(sorted(sent.items())),
        "correct": bool(np.array_equal(traced["value"], want)),
    }
