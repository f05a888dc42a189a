"""Runs inside the tasks: the programs chapter 12's failures run in the tasks: the collectives, servers and
fits that go wrong, and the stack dumps a hanging task writes.

TensorFlow only inside functions: the kernel imports this module to name what it sends.
"""

from __future__ import annotations

import json
import os

import dtfkit

# faulthandler writes every task's Python stacks this often while a case may hang.
DUMP_EVERY = 1.5


# ---------------------------------------------------------------------------------------
# Functions that run in the tasks
# ---------------------------------------------------------------------------------------
_DUMP_FILES: list = []  # kept open: faulthandler writes to the file's descriptor later


def dump_stacks_every(path: str, seconds: float = DUMP_EVERY) -> None:
    """Write this process's Python stacks to ``path`` every ``seconds``, from a C thread.

    dtfkit asks a stuck task for its stacks through a Python thread, which needs the
    interpreter lock; a TensorFlow call that blocks in C++ without releasing it (the
    ``MultiWorkerMirroredStrategy`` constructor waiting for its peers) never lets that
    thread run. ``faulthandler``'s watchdog is a C thread and needs no lock.
    """
    import faulthandler

    out = open(path, "w")  # noqa: SIM115 - must outlive this call
    _DUMP_FILES.append(out)
    faulthandler.dump_traceback_later(seconds, repeat=True, file=out)


def op_then_strategy() -> None:
    """The notebook trap: run an op, then create ``MultiWorkerMirroredStrategy``.

    Raises ``RuntimeError: Collective ops must be configured at program startup``
    (``Context.configure_collective_ops`` in tensorflow/python/eager/context.py, called by
    ``CollectiveAllReduceExtended._initialize_multi_worker`` in
    tensorflow/python/distribute/collective_all_reduce_strategy.py: the eager context
    already exists, and collectives can only be configured before it does).
    """
    import tensorflow as tf

    # any op creates the eager context
    tf.constant([1.0, 2.0]) * 2.0
    tf.distribute.MultiWorkerMirroredStrategy()


def allreduce_ranks(*, stacks_file: str | None = None, timeout_seconds: float | None = None) -> dict:
    """Create ``MultiWorkerMirroredStrategy`` first (from ``TF_CONFIG``), then sum ``rank + 1``
    over every worker: ``{"task", "replicas", "sum", "cluster"}`` (2 workers: sum 3.0).

    ``stacks_file``: dump this task's stacks there every ``DUMP_EVERY`` s while it runs
    (``dump_stacks_every``). ``timeout_seconds``: ``CommunicationOptions(timeout_seconds=...)``
    for the all-reduce.
    """
    if stacks_file:
        dump_stacks_every(stacks_file)
    import tensorflow as tf

    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout_seconds)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    resolver = strategy.cluster_resolver
    rank = resolver.task_id

    @tf.function
    def total():
        value = strategy.run(lambda: tf.constant(float(rank + 1)))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

    result = float(total())
    if stacks_file:
        import faulthandler

        faulthandler.cancel_dump_traceback_later()
    return {
        "task": f"{resolver.task_type}:{rank}",
        "replicas": int(strategy.num_replicas_in_sync),
        "sum": result,
        "cluster": resolver.cluster_spec().as_dict(),
    }


def localhost_tf_config() -> dict:
    """This task's ``TF_CONFIG`` with every host replaced by ``localhost`` (the ports kept):
    what a script copied from a one-machine tutorial onto two machines says."""
    config = json.loads(os.environ["TF_CONFIG"])
    config["cluster"] = {
        job: ["localhost:" + address.rsplit(":", 1)[1] for address in hosts]
        for job, hosts in config["cluster"].items()
    }
    return config


def allreduce_with_localhost_config(*, stacks_file: str | None = None) -> dict:
    """``allreduce_ranks`` after setting ``TF_CONFIG`` to ``localhost_tf_config()``."""
    os.environ["TF_CONFIG"] = json.dumps(localhost_tf_config())
    return allreduce_ranks(stacks_file=stacks_file)


def serve_forever() -> None:
    """What the TF1 tutorials run on a ps: ``server.join()``, which returns only when the
    server stops, and a ``tf.distribute.Server`` has no public way to stop it
    (``Server.join`` in tensorflow/python/training/server_lib.py calls ``TF_ServerJoin``)."""
    dtfkit.this_task().server.join()


def _done_queue(tf, ctx, ps_index: int = 0):
    """A queue on a ps that every worker can reach by its shared name (tensorflow/ecosystem#19)."""
    with tf.compat.v1.device(f"/job:ps/task:{ps_index}"):
        return tf.queue.FIFOQueue(len(_trainers(ctx)), tf.int32, shared_name=f"done_queue{ps_index}")


def _trainers(ctx) -> list[str]:
    return [f"{job}:{i}" for job in ("chief", "worker") for i in range(len(ctx.cluster.get(job, ())))]


def serve_until_workers_done(timeout: float = 60.0) -> dict:
    """The ps side of a coordinated shutdown: serve until every worker (and the chief) has
    said it is done, by taking one token each from a queue on this ps, then return.

    Returns ``{"task", "tokens"}`` (the tasks that said they were done, in order)."""
    import tensorflow as tf

    ctx = dtfkit.this_task()
    with tf.Graph().as_default():
        queue = _done_queue(tf, ctx, ctx.task_index)
        take = queue.dequeue()
        options = tf.compat.v1.RunOptions(timeout_in_ms=int(timeout * 1000))
        with tf.compat.v1.Session(ctx.target) as sess:
            tokens = [int(sess.run(take, options=options)) for _ in _trainers(ctx)]
    names = _trainers(ctx)
    return {"task": ctx.name, "tokens": [names[t] for t in tokens]}


def say_done() -> str:
    """The worker side: put this task's token into every ps's done queue; returns the task."""
    import tensorflow as tf

    ctx = dtfkit.this_task()
    rank = _trainers(ctx).index(ctx.name)
    with tf.Graph().as_default():
        puts = [_done_queue(tf, ctx, ps).enqueue(tf.constant(rank)) for ps in range(ctx.num_ps)]
        with tf.compat.v1.Session(ctx.target) as sess:
            sess.run(puts)
    return ctx.name


def second_server() -> None:
    """Start another ``tf.distribute.Server`` for this task's own ``ClusterSpec`` entry: its
    port is served already (by dtfkit's server for this task).

    Raises ``UnknownError: Could not start gRPC server`` (``GrpcServer::Init`` in
    tensorflow/core/distributed_runtime/rpc/grpc_server_lib.cc, after gRPC's
    "Failed to add port to server" on stderr; TensorFlow 1.x said "Address already in use").
    """
    import tensorflow as tf

    ctx = dtfkit.this_task()
    tf.distribute.Server(ctx.cluster_spec(), job_name=ctx.job_name, task_index=ctx.task_index)


def server_on_a_free_port() -> dict:
    """The fix: let the OS choose the port (port 0): ``Server.create_local_server()``.
    Returns ``{"target", "port", "cluster_port"}`` (the new port and this task's own)."""
    import tensorflow as tf

    ctx = dtfkit.this_task()
    server = tf.distribute.Server.create_local_server()
    port = int(server.target.rsplit(":", 1)[1])
    assert ctx.target is not None  # this recipe's cluster starts servers: the task's own is on its port
    return {"target": server.target, "port": port, "cluster_port": int(ctx.target.rsplit(":", 1)[1])}


def keras_fit_under_ps() -> None:
    """Keras 3 ``model.fit`` with the model built in ``ParameterServerStrategy.scope()``.

    Keras 3 knows nothing of the strategy's ``ClusterCoordinator``: its TensorFlow
    trainer distributes the data with ``strategy.experimental_distribute_dataset``, and
    iterating that dataset outside a coordinator raises ``ValueError: To use this dataset,
    you need to pass this dataset to ClusterCoordinator.create_per_worker_dataset``
    (``__iter__`` of the parameter-server dataset in tensorflow/python/distribute/input_lib.py).
    Run on the chief of ``LocalCluster(chief=1, ps=1, workers=2, env={"GRPC_FAIL_FAST": "use_caller"})``.
    """
    import numpy as np
    import tensorflow as tf

    from dtfkit.recipes.strategies_multi.task_side import coordinator_resolver

    strategy = tf.distribute.ParameterServerStrategy(coordinator_resolver())
    import keras

    with strategy.scope():
        model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((32, 4), "float32")
    model.fit(x, x[:, :1], epochs=1, steps_per_epoch=2, verbose=0)


def _allreduce_with_localhost_config_in(files: dict[str, str]) -> dict:
    return allreduce_with_localhost_config(stacks_file=files[dtfkit.this_task().name])
