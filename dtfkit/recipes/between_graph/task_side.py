"""Runs inside the tasks: chapter 2's worker (``tutorial_worker``), in-graph training, variable placement
(``place_variables``, ``GreedyByBytes``) and the traced sparse-versus-dense reads.

TensorFlow only inside functions: the kernel imports this module to name what it sends.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

import dtfkit
from dtfkit.datasets import load_digits, shard
from dtfkit.recipes.placement.task_side import kernel_of, short_task, trace_options
from dtfkit.recipes.tf1.task_side import (
    NUM_CLASSES,
    NUM_FEATURES,
    _sgd_model,
    accuracy_of,
    classifier,
    dense,
    on_ps,
    session_config,
    training_session,
)

UNEVEN_LAYERS = (NUM_FEATURES, 256, 256, 256, NUM_CLASSES)


# ----------------------------------------------------------------- placement
class StandInVariable(NamedTuple):
    """A variable op without TensorFlow: what a quick check hands a ``ps_strategy`` in place of a
    real ``Operation``. ``variable_bytes`` reads its ``nbytes``.

    Example::

        choose(StandInVariable("dense_1/kernel", "VarHandleOp", 64 * 256 * 4))
    """

    name: str
    type: str
    nbytes: int


def variable_bytes(op) -> int:
    """Bytes of the variable an ``Operation`` (or ``NodeDef``) creates, from its ``shape``
    and ``dtype`` attributes (what ``replica_device_setter`` hands a ``ps_strategy``).
    A ``StandInVariable`` gives its ``nbytes``."""
    if isinstance(op, StandInVariable):
        return op.nbytes
    from tensorflow.python.framework import dtypes, tensor_shape

    node_def = op if not hasattr(op, "node_def") else op.node_def
    if "shape" not in node_def.attr or "dtype" not in node_def.attr:
        return 0  # a hash table or another resource without a static size
    shape = tensor_shape.TensorShape(node_def.attr["shape"].shape)
    if not shape.is_fully_defined():
        return 0
    return int(shape.num_elements()) * dtypes.as_dtype(node_def.attr["dtype"].type).size


class GreedyByBytes:
    """A ``ps_strategy``: each variable goes to the ps task holding the fewest bytes so far.

    The TF1 ``GreedyLoadBalancingStrategy(num_tasks, byte_size_load_fn)`` idea, for
    TF 2.21 which no longer ships it. ``loads`` holds the bytes given to each ps.

    Example (in a task)::

        setter = tf.compat.v1.train.replica_device_setter(
            cluster=spec, ps_strategy=GreedyByBytes(num_ps))
    """

    def __init__(self, num_tasks: int, load_fn=variable_bytes):
        if num_tasks < 1:
            raise ValueError(f"num_tasks must be at least 1, not {num_tasks}")
        self.loads = [0] * num_tasks
        self._load_fn = load_fn

    def __call__(self, op) -> int:
        task = min(range(len(self.loads)), key=lambda i: (self.loads[i], i))
        self.loads[task] += self._load_fn(op)
        return task


def uneven_mlp(tf, x, layers: Sequence[int] = UNEVEN_LAYERS):
    """Dense ReLU layers of the given widths (input width first), the last one linear."""
    net = x
    for i, units in enumerate(layers[1:], start=1):
        last = i == len(layers) - 1
        net = dense(tf, net, units, f"dense_{i}", None if last else tf.nn.relu)
    return net


def place_variables(
    layers: Sequence[int] = UNEVEN_LAYERS,
    strategies: Iterable[str] = ("round-robin", "greedy"),
    global_step: bool = False,
):
    """Run in a task: build the model under ``replica_device_setter`` with each strategy.

    Returns ``{strategy: {"variables": [(name, shape, bytes, ps index)], "bytes_per_ps": [...]}}``.
    ``global_step=True`` adds the global step after the model, as the training recipes
    do. Only the graph is built; nothing runs.
    """
    import tensorflow as tf

    ctx = dtfkit.this_task()
    out = {}
    for name in strategies:
        if name not in ("round-robin", "greedy"):
            raise ValueError(f"unknown strategy {name!r}: use 'round-robin' or 'greedy'")
        strategy = GreedyByBytes(ctx.num_ps) if name == "greedy" else None
        with tf.Graph().as_default():
            setter = tf.compat.v1.train.replica_device_setter(
                cluster=ctx.cluster, worker_device="/job:worker/task:0", ps_strategy=strategy
            )
            with tf.compat.v1.device(setter):
                images = tf.compat.v1.placeholder(tf.float32, [None, layers[0]])
                uneven_mlp(tf, images, layers)
                if global_step:
                    tf.compat.v1.train.get_or_create_global_step()
            rows = []
            for v in tf.compat.v1.global_variables():
                spec = tf.DeviceSpec.from_string(v.device)
                size = int(np.prod(v.shape)) * v.dtype.size
                rows.append((v.op.name, tuple(int(d) for d in v.shape), size, int(spec.task)))
        loads = [0] * ctx.num_ps
        for _, _, size, task in rows:
            loads[task] += size
        out[name] = {"variables": rows, "bytes_per_ps": loads}
    return out


# --------------------------------------------- the tutorial's worker, as written
def tutorial_worker(
    *,
    steps: int = 200,
    device_filters: bool = False,
    batch_size: int = 32,
    learning_rate: float = 0.1,
    hidden: int = 64,
    run_name: str = "tutorial",
    seed: int = 0,
) -> dict[str, Any]:
    """Run in a worker: the between-graph worker of Ye Hu's tutorial, asynchronous.

    Unlike ``tf1.train_between_graph`` it does not poll for the chief's init: a
    non-chief goes straight into ``MonitoredTrainingSession``, like the tutorial's script.
    ``device_filters=False`` (the tutorial's default) makes the session need every task
    of the cluster. Trains until the global step reaches ``steps``; every call with
    the same ``run_name`` shares one model on the ps tasks.
    """
    import tensorflow as tf

    ctx = dtfkit.this_task()
    x, y = load_digits(split="train")
    x, y = shard(x, y, ctx.task_index, ctx.num_workers)
    rng = np.random.default_rng(seed * 1000 + ctx.task_index)
    tf.get_logger().setLevel("ERROR")
    with tf.Graph().as_default(), tf.compat.v1.variable_scope(run_name):
        with on_ps(tf, ctx):
            images, labels, _, global_step, train_op = _sgd_model(tf, hidden, learning_rate)
        local_steps = 0
        with training_session(
            tf,
            ctx,
            hooks=[tf.compat.v1.train.StopAtStepHook(last_step=steps)],
            config=session_config(tf, ctx, device_filters),
        ) as sess:
            while not sess.should_stop():
                idx = rng.integers(0, len(x), batch_size)
                _, step = sess.run([train_op, global_step], {images: x[idx], labels: y[idx]})
                local_steps += 1
                dtfkit.report(step=step)
        with tf.compat.v1.Session(ctx.target, config=session_config(tf, ctx, device_filters)) as plain:
            final = int(plain.run(global_step))
    return {"local_steps": local_steps, "global_step": final}


# ----------------------------------------------------------- in-graph replication
def train_in_graph(
    *,
    steps: int = 100,
    batch_size: int = 32,
    learning_rate: float = 0.1,
    hidden: int = 64,
    seed: int = 0,
    run_name: str | None = None,
) -> dict[str, Any]:
    """Run in the client (``on="client"``): in-graph replication.

    One graph, one session: the variables live on the ps tasks, one tower (a copy
    of the model) on each worker, each tower computes gradients on its own batch,
    the gradients are averaged next to each variable (on its ps) and applied once.
    Reports ``loss`` (the towers' mean) every step. Returns the number of towers,
    the tasks that ran a piece of one step (from the partition graphs the master
    sent out), the loss and the test accuracy.
    """
    import tensorflow as tf

    ctx = dtfkit.this_task()
    workers = ctx.num_workers
    x, y = load_digits(split="train")
    shards = [shard(x, y, i, workers) for i in range(workers)]
    x_test, y_test = load_digits(split="test")
    rng = np.random.default_rng(seed)
    tf.get_logger().setLevel("ERROR")
    with tf.Graph().as_default(), tf.compat.v1.variable_scope(run_name or f"in_graph{ctx.call_id}") as scope:
        opt = tf.compat.v1.train.GradientDescentOptimizer(learning_rate)
        towers, grads = [], []
        for i in range(workers):
            setter = tf.compat.v1.train.replica_device_setter(
                cluster=ctx.cluster, worker_device=f"/job:worker/task:{i}"
            )
            with tf.compat.v1.device(setter), tf.compat.v1.variable_scope(scope, reuse=i > 0):
                towers.append(classifier(tf, hidden, suffix=f"_{i}"))
                grads.append(opt.compute_gradients(towers[-1].loss))
        averaged = []
        for j, (_, var) in enumerate(grads[0]):
            with tf.compat.v1.colocate_with(var):  # average on the variable's ps
                averaged.append((tf.add_n([g[j][0] for g in grads]) / workers, var))
        train_op = opt.apply_gradients(averaged)
        mean_loss = tf.add_n([t.loss for t in towers]) / workers
        accuracy = accuracy_of(tf, towers[0])
        init = tf.compat.v1.global_variables_initializer()

        def feed():
            out = {}
            for tower, (xs, ys) in zip(towers, shards, strict=True):
                idx = rng.integers(0, len(xs), batch_size)
                out[tower.images], out[tower.labels] = xs[idx], ys[idx]
            return out

        master = "grpc://" + ctx.cluster["worker"][0]
        with tf.compat.v1.Session(master) as sess:
            sess.run(init)
            first = None
            for step in range(1, steps + 1):
                _, value = sess.run([train_op, mean_loss], feed())
                first = value if first is None else first
                dtfkit.report(step=step, loss=value)
            meta = tf.compat.v1.RunMetadata()
            partitions = tf.compat.v1.RunOptions(output_partition_graphs=True)
            sess.run(train_op, feed(), options=partitions, run_metadata=meta)
            acc = sess.run(accuracy, {towers[0].images: x_test, towers[0].labels: y_test})
    assert first is not None  # steps >= 1: the loop ran (with steps < 1 nothing was trained)
    return {
        "towers": workers,
        "devices": sorted({short_task(n.device) for g in meta.partition_graphs for n in g.node}),
        "first_loss": float(first),
        "loss": float(value),
        "accuracy": float(acc),
        "client_has_server": ctx.server is not None,
    }


# -------------------------------------------------------- sparse data on a ps
TRACES = 3  # traced runs per reader in sparse_vs_dense_read


def sparse_vs_dense_read(*, vocab: int = 100_000, dim: int = 32, batch_ids: int = 64, seed: int = 0):
    """Run in a worker: an embedding table on ``ps:0``, read two ways for the same rows.

    ``sparse``: ``tf.nn.embedding_lookup`` (a ``ResourceGather`` that runs on the ps),
    so only the rows the batch needs travel. ``dense``: the whole table is read and
    sent to the worker, which gathers the rows there. Bytes are measured from each
    run's trace (the ``RecvTensor`` entries of ``RunMetadata.step_stats``).
    """
    import tensorflow as tf

    ctx = dtfkit.this_task()
    worker = f"/job:{ctx.job_name}/task:{ctx.task_index}"
    ids = np.random.default_rng(seed).choice(vocab, size=batch_ids, replace=False)
    with tf.Graph().as_default():
        with tf.compat.v1.device("/job:ps/task:0"):
            table = tf.compat.v1.get_variable(
                f"embeddings{ctx.call_id}",
                [vocab, dim],
                initializer=tf.compat.v1.random_uniform_initializer(seed=seed),
            )
        with tf.compat.v1.device(worker):
            batch = tf.compat.v1.placeholder(tf.int64, [None])
            sparse = tf.nn.embedding_lookup(table, batch)
            dense = tf.gather(tf.identity(table), batch)
            readers = {"sparse": tf.reduce_sum(sparse, 1), "dense": tf.reduce_sum(dense, 1)}
        config = session_config(tf, ctx)
        out: dict[str, Any] = {
            "table_bytes": vocab * dim * table.dtype.size,
            "rows_bytes": batch_ids * dim * table.dtype.size,
            "ids_bytes": batch_ids * 8,
        }
        with tf.compat.v1.Session(ctx.target, config=config) as sess:
            sess.run(table.initializer)
            values = {}
            for name, fetch in readers.items():
                sess.run(fetch, {batch: ids})  # warm up: the first run also sets up the graph
                transfers: dict[tuple, dict[str, Any]] = {}
                ops: dict[str, list[str]] = {}
                # A remote task's step stats come back over RPC and now and then lack a
                # RecvTensor record: read a few traces of the same step and keep every edge seen.
                for attempt in range(TRACES):
                    meta = tf.compat.v1.RunMetadata()
                    start = time.perf_counter()
                    values[name] = sess.run(
                        fetch, {batch: ids}, options=trace_options(partition_graphs=False), run_metadata=meta
                    )
                    if attempt == 0:
                        out[f"{name}_seconds"] = time.perf_counter() - start
                    for moved in recv_bytes(meta.step_stats):
                        transfers[(moved["from"], moved["to"], moved["edge"])] = moved
                    traced = _ops_by_task(meta.step_stats)
                    if sum(map(len, traced.values())) > sum(map(len, ops.values())):
                        ops = traced
                out[f"{name}_transfers"] = list(transfers.values())
                out[f"{name}_ops"] = ops
        out["same_rows"] = bool(np.allclose(values["sparse"], values["dense"]))
    return out


def recv_bytes(step_stats) -> list[dict[str, Any]]:
    """The tensors one traced step moved between tasks: ``[{"to", "from", "bytes", "edge"}]``.

    Each ``RecvTensor`` entry of a ``StepStats`` sits on the receiving device; its
    label reads ``[8192B] [..Mb/s] edge_4_name from /job:ps/replica:0/task:0/... to /job:worker/...``.
    """
    moved = []
    for dev in step_stats.dev_stats:
        for node in dev.node_stats:
            if node.node_name != "RecvTensor" or not node.output:
                continue
            edge, _, route = node.timeline_label.split("] ")[-1].partition(" from ")
            source = route.partition(" to ")[0]
            moved.append(
                {
                    "to": short_task(dev.device),
                    "from": short_task(source),
                    "bytes": int(node.output[0].tensor_description.allocation_description.requested_bytes),
                    "edge": edge,
                }
            )
    return moved


def _ops_by_task(step_stats) -> dict[str, list[str]]:
    """The op types each task ran in one traced step (``RecvTensor`` and ``_SOURCE`` left out)."""
    ops: dict[str, list[str]] = {}
    for dev in step_stats.dev_stats:
        for node in dev.node_stats:
            kind = kernel_of(node.timeline_label)
            if kind and kind != "NoOp":
                ops.setdefault(short_task(dev.device), []).append(kind)
    return {task: sorted(set(kinds)) for task, kinds in ops.items()}
