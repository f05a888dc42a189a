"""Runs inside the tasks: chapter 7's TF2 training under ``MultiWorkerMirroredStrategy`` and
``ParameterServerStrategy``, the side-car evaluator and the ``TF_CONFIG`` readers.

TensorFlow only inside functions: the kernel imports this module to name what it sends.
"""

from __future__ import annotations

import json
import os
import socket
import time
from types import SimpleNamespace
from typing import Any

import numpy as np

import dtfkit
from dtfkit.datasets import load_digits, shard


def _eager_context_initialized() -> bool:
    """True once TensorFlow's eager context exists (after the first op ran)."""
    from tensorflow.python.eager import context

    return context.context()._context_handle is not None  # noqa: SLF001 - no public API


def _port_is_free(port: int) -> bool:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("", port))
        return True
    except OSError:
        return False
    finally:
        sock.close()


def startup_check() -> dict[str, Any]:
    """Describe this task as ``MultiWorkerMirroredStrategy`` will find it.

    Returns ``{"task": "worker:1", "tf_config_task": {"type": "worker", "index": 1},
    "port": 12345, "port_free": True, "tensorflow_imported": True,
    "eager_context_initialized": False}``. The strategy needs ``TF_CONFIG`` set, the
    port named there free (it binds it itself) and no op run yet in the process
    ("Collective ops must be configured at program startup"). Reading this does
    not initialize the context.
    """
    import sys

    config = read_tf_config()
    task = config["task"]
    address = config["cluster"][task["type"]][task["index"]]
    port = int(address.rsplit(":", 1)[1])
    imported = "tensorflow" in sys.modules
    return {
        "task": f"{task['type']}:{task['index']}",
        "tf_config_task": task,
        "port": port,
        "port_free": _port_is_free(port),
        "tensorflow_imported": imported,
        "eager_context_initialized": _eager_context_initialized() if imported else False,
    }


def read_tf_config() -> dict[str, Any]:
    """This task's ``TF_CONFIG``, parsed (``{"cluster": {...}, "task": {"type": ..., "index": ...}}``).

    Reads the environment only: no TensorFlow op runs, so it is safe before a
    ``MultiWorkerMirroredStrategy`` is created.
    """
    return json.loads(os.environ["TF_CONFIG"])


def _write_dir(checkpoint_dir: str, run: SimpleNamespace) -> str:
    """Where a worker saves, as TensorFlow's multi-worker tutorial does: the chief into
    ``checkpoint_dir``, the others into a folder of their own inside it."""
    return checkpoint_dir if run.chief else os.path.join(checkpoint_dir, f"tmp_{run.task.replace(':', '_')}")


def _mlp(keras, hidden: int, seed: int):
    init = keras.initializers.GlorotUniform(seed=seed)
    return keras.Sequential(
        [
            keras.Input(shape=(64,)),
            keras.layers.Dense(hidden, activation="relu", kernel_initializer=init),
            keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(seed=seed + 1)),
        ]
    )


def digits_dataset_fn(tf, x, y, global_batch_size: int, seed: int):
    """The ``dataset_fn`` of ``strategy.distribute_datasets_from_function``: each input pipeline
    reads its own shard of ``(x, y)``, shuffled, repeated, in per-replica batches.

    Example::

        dist_ds = strategy.distribute_datasets_from_function(digits_dataset_fn(tf, x, y, 64, seed=0))
    """

    def dataset_fn(input_context):
        xs, ys = shard(x, y, input_context.input_pipeline_id, input_context.num_input_pipelines)
        batch = input_context.get_per_replica_batch_size(global_batch_size)
        ds = tf.data.Dataset.from_tensor_slices((xs.astype("float32"), ys.astype("int64")))
        return ds.shuffle(len(xs), seed=seed).repeat().batch(batch, drop_remainder=True)

    return dataset_fn


def replica_step_fn(tf, model, optimizer, global_batch_size: int):
    """One replica's step for ``strategy.run``: the loss averaged over the *global* batch
    (``compute_average_loss``), so that summing the replicas' gradients gives the mean; returns
    ``(loss, examples in this replica's batch)``.

    Example::

        loss, count = strategy.run(replica_step_fn(tf, model, optimizer, 64), args=(next(iterator),))
    """

    def step_fn(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))  # noqa: B905 - autograph zip
        return loss, tf.shape(labels)[0]

    return step_fn


def _mwms_setup(
    tf, options, global_batch_size: int, learning_rate: float, hidden: int, seed: int
) -> SimpleNamespace:
    """``MultiWorkerMirroredStrategy`` with ``options`` (created first, before any op), the MLP and
    its optimizer in its scope, the training digits (``x``, ``y``), the distributed dataset and
    one replica's step."""
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    import keras

    resolver = strategy.cluster_resolver
    x, y = load_digits(split="train", seed=seed)
    with strategy.scope():
        model = _mlp(keras, hidden, seed)
        optimizer = keras.optimizers.SGD(learning_rate)
    return SimpleNamespace(
        strategy=strategy,
        resolver=resolver,
        task=f"{resolver.task_type}:{resolver.task_id}",
        chief=dtfkit.this_task().is_chief,
        model=model,
        optimizer=optimizer,
        x=x,
        dataset=strategy.distribute_datasets_from_function(
            digits_dataset_fn(tf, x, y, global_batch_size, seed)
        ),
        step_fn=replica_step_fn(tf, model, optimizer, global_batch_size),
    )


def _weights(model) -> list[np.ndarray]:
    return [np.asarray(v.numpy()) for v in model.trainable_variables]


def _test_accuracy(tf, model, seed: int) -> float:
    xt, yt = load_digits(split="test", seed=seed)
    logits = model(tf.constant(xt, tf.float32), training=False)
    return float(np.mean(np.argmax(np.asarray(logits), axis=1) == yt))


def train_multi_worker_mirrored(
    *,
    steps: int = 40,
    global_batch_size: int = 64,
    learning_rate: float = 0.1,
    hidden: int = 32,
    implementation: str = "RING",
    seed: int = 0,
    report_every: int = 1,
    checkpoint_dir: str | None = None,
    checkpoint_every: int = 0,
) -> dict[str, Any]:
    """Synchronous data-parallel training with ``MultiWorkerMirroredStrategy``; run
    on every worker of a ``LocalCluster(start_servers=False)``.

    Creates the strategy first (before any other op), with
    ``CommunicationOptions(implementation=...)`` (``"RING"``: gRPC ring all-reduce,
    the CPU choice; ``"NCCL"`` needs GPUs; ``"AUTO"``). Each worker reads its own
    shard of the digits (``input_context.input_pipeline_id``) in batches of
    ``global_batch_size / num_replicas_in_sync``; the per-example losses are
    averaged over the *global* batch (``tf.nn.compute_average_loss``), so the
    all-reduced (summed) gradients are the gradient of the global mean loss.

    Returns this worker's summary: ``task``, ``num_replicas``, ``communication``,
    ``losses`` (the all-reduced loss of every step, the same on every worker),
    ``first_loss``, ``last_loss``, ``examples_seen`` (by this worker), ``examples_read`` (the
    indices, in the whole training set, of the distinct examples this worker read), ``weights``
    (every trainable variable as a list of numpy arrays, to compare across
    workers) and ``test_accuracy``. Reports ``step``, ``loss`` every
    ``report_every`` steps.

    With ``checkpoint_dir``, every worker saves ``tf.train.Checkpoint(model=model)``
    every ``checkpoint_every`` steps (0: none in between) and after the last step, numbered by
    the step (``ckpt-100``), as TensorFlow's multi-worker tutorial does: every worker
    saves (saving may need the other workers), the chief into ``checkpoint_dir``,
    the others into a temporary folder inside it that they delete afterwards. The
    summary then also has ``checkpoints`` (the chief's checkpoint paths; ``[]`` on
    the other workers).
    """
    import tensorflow as tf

    impl = getattr(tf.distribute.experimental.CommunicationImplementation, implementation.upper())
    options = tf.distribute.experimental.CommunicationOptions(implementation=impl)
    run = _mwms_setup(tf, options, global_batch_size, learning_rate, hidden, seed)
    strategy, task, model = run.strategy, run.task, run.model

    @tf.function
    def train_step(iterator):
        batch = next(iterator)
        loss, count = strategy.run(run.step_fn, args=(batch,))
        return (
            strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None),
            strategy.experimental_local_results(count),
            strategy.experimental_local_results(batch[0]),
        )

    manager, write_dir, saved = None, None, []
    if checkpoint_dir:
        write_dir = _write_dir(checkpoint_dir, run)
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), write_dir, max_to_keep=None)

    # Which examples this worker read: each row it was given, found in the whole training set.
    row_index = {row.tobytes(): i for i, row in enumerate(run.x.astype("float32"))}
    iterator = iter(run.dataset)
    losses: list[float] = []
    seen = 0
    read: set[int] = set()
    for step in range(1, steps + 1):
        loss, counts, features = train_step(iterator)
        losses.append(float(loss))
        seen += int(sum(int(c) for c in counts))
        for local in features:
            read.update(row_index[row.tobytes()] for row in np.asarray(local))
        if report_every and step % report_every == 0:
            dtfkit.report(step=step, loss=losses[-1])
        if manager is not None and (step == steps or (checkpoint_every and step % checkpoint_every == 0)):
            saved.append(manager.save(checkpoint_number=step))
    if manager is not None and write_dir != checkpoint_dir:
        tf.io.gfile.rmtree(write_dir)
        saved = []

    return {
        "task": task,
        "num_replicas": int(strategy.num_replicas_in_sync),
        "communication": impl.name,
        "losses": losses,
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "examples_seen": seen,
        "examples_read": sorted(read),
        "weights": _weights(model),
        "test_accuracy": _test_accuracy(tf, model, seed),
        "checkpoints": saved,
    }


def sidecar_evaluate(
    *,
    checkpoint_dir: str,
    last_step: int,
    timeout: float = 120.0,
    hidden: int = 32,
    seed: int = 0,
) -> dict[str, Any]:
    """A side-car evaluator: run in the ``evaluator`` task while the workers train.

    Waits for each new checkpoint in ``checkpoint_dir`` (``tf.train.checkpoints_iterator``,
    which polls the folder's ``checkpoint`` file), restores it into a model built
    without any strategy, and evaluates it on the test split; stops after the
    checkpoint of ``last_step``, or when no new checkpoint came for ``timeout`` seconds.
    It only reads files: it joins no collective and no server, which is why
    TensorFlow leaves the evaluator out of the training cluster. A checkpoint
    written while the previous one was being evaluated may be skipped (the iterator
    yields the newest), as with ``tf.keras.utils.SidecarEvaluator`` of Keras 2.

    Returns ``task_type``, ``task_id`` and ``cluster_jobs`` as
    ``TFConfigClusterResolver`` sees them, ``evaluated`` (``[(step, test accuracy)]``),
    ``last_step_seen`` and ``weights`` (the restored trainable variables of the last
    checkpoint evaluated). Reports ``eval_step``, ``eval_accuracy`` per checkpoint.
    """
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    import keras

    model = _mlp(keras, hidden, seed)
    evaluated: list[tuple[int, float]] = []
    for path in tf.train.checkpoints_iterator(checkpoint_dir, timeout=timeout):
        # every variable of the model restored; the checkpoint's save_counter is not needed here
        tf.train.Checkpoint(model=model).read(path).assert_existing_objects_matched().expect_partial()
        step = int(path.rsplit("-", 1)[1])
        accuracy = _test_accuracy(tf, model, seed)
        evaluated.append((step, accuracy))
        dtfkit.report(eval_step=step, eval_accuracy=accuracy)
        if step >= last_step:
            break
    return {
        "task_type": resolver.task_type,
        "task_id": resolver.task_id,
        "cluster_jobs": sorted(resolver.cluster_spec().as_dict()),
        "evaluated": evaluated,
        "last_step_seen": evaluated[-1][0] if evaluated else None,
        "weights": _weights(model),
    }


def coordinator_resolver():
    """The ``ClusterResolver`` the coordinator in a dtfkit chief task needs.

    ``TFConfigClusterResolver()`` would name the chief's own ``TF_CONFIG`` address,
    but dtfkit's chief already runs a ``tf.distribute.Server`` there, and the
    strategy's ``connect_to_cluster`` starts a second one on that port: "Could not
    start gRPC server". So the chief job is left out of the spec here:
    ``connect_to_cluster(job_name="chief")`` then adds it on a free localhost port
    (TensorFlow's documented behaviour for a local job missing from the spec).
    """
    import tensorflow as tf

    config = read_tf_config()
    if config["task"]["type"] != "chief":
        raise RuntimeError(f"run the coordinator in the chief task, not in {config['task']['type']}")
    jobs = {job: hosts for job, hosts in config["cluster"].items() if job in ("worker", "ps")}
    return tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(jobs), rpc_layer="grpc")


def train_parameter_server(
    *,
    steps: int = 300,
    batch_size: int = 32,
    learning_rate: float = 0.1,
    hidden: int = 32,
    seed: int = 0,
    step_ms: float = 0.0,
    poll_secs: float = 0.05,
    rpc_timeout_check: bool = True,
) -> dict[str, Any]:
    """Asynchronous parameter-server training with a ``ClusterCoordinator``; run on
    the chief of ``LocalCluster(chief=1, workers=2, ps=1, env={"GRPC_FAIL_FAST":
    "use_caller"})`` (the workers and ps only serve).

    The chief builds ``ParameterServerStrategy`` from ``TF_CONFIG`` (through
    ``coordinator_resolver``, which leaves the chief's own address out), creates the
    model's variables on the ps (``strategy.scope()``), a per-worker dataset
    (``coordinator.create_per_worker_dataset``) and a ``tf.function`` step. It
    schedules ``steps`` steps at once (``coordinator.schedule`` returns at once with
    a ``RemoteValue``); until ``coordinator.done()`` it reports, every
    ``poll_secs``, ``step`` = how many step functions have run (a counter variable
    on the ps that every step increments); then it fetches every result.

    A worker killed meanwhile does not stop training: its pending functions are
    re-run on another worker (at-least-once, so ``executions`` may exceed
    ``steps``). ``step_ms`` > 0 makes each worker's input pipeline wait that long per
    batch (tf.data's ``sleep`` transformation, not exported publicly in TF 2.21):
    steps then take time without using CPU, so the throughput of 1 vs 2 workers
    shows even on 2 cores. ``rpc_timeout_check`` asserts ``GRPC_FAIL_FAST`` is set.

    Returns ``task``, ``scheduled``, ``completed`` (results fetched), ``executions``
    (the ps-side counter of step runs), ``seconds`` (from scheduling to the last
    result), ``losses`` (in scheduling order), ``first_loss``, ``last_loss``.
    """
    if rpc_timeout_check and os.environ.get("GRPC_FAIL_FAST") != "use_caller":
        raise RuntimeError('parameter-server training needs GRPC_FAIL_FAST="use_caller" on every task')
    import tensorflow as tf

    resolver = coordinator_resolver()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    import keras

    x, y = load_digits(split="train", seed=seed)
    with strategy.scope():
        model = _mlp(keras, hidden, seed)
        optimizer = keras.optimizers.SGD(learning_rate)
        executions = tf.Variable(0, dtype=tf.int64, trainable=False, name="executions")

    # The public tf.data.experimental namespace does not export it (TF 2.21).
    from tensorflow.python.data.experimental.ops.testing import sleep

    def dataset_fn():
        ds = tf.data.Dataset.from_tensor_slices((x.astype("float32"), y.astype("int64")))
        ds = ds.shuffle(len(x), seed=seed).repeat().batch(batch_size, drop_remainder=True)
        if step_ms:
            ds = ds.apply(sleep(int(step_ms * 1000)))
        return ds

    per_worker_ds = coordinator.create_per_worker_dataset(dataset_fn)
    per_worker_iter = iter(per_worker_ds)

    @tf.function
    def train_step(iterator):
        def replica_fn(features, labels):
            with tf.GradientTape() as tape:
                logits = model(features, training=True)
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
                )
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))  # noqa: B905 - autograph zip
            executions.assign_add(1)
            return loss

        features, labels = next(iterator)
        loss = strategy.run(replica_fn, args=(features, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)

    remote = [coordinator.schedule(train_step, args=(per_worker_iter,)) for _ in range(steps)]
    scheduled_at = time.time()
    # Watch progress by completion (the ps-side counter), not by fetch order: a
    # function moved off a failed worker is queued again and finishes late.
    while not coordinator.done():
        dtfkit.report(step=int(executions.numpy()), scheduled=steps)
        time.sleep(poll_secs)
    coordinator.join()
    losses = [float(value.fetch()) for value in remote]
    dtfkit.report(step=int(executions.numpy()), scheduled=steps, loss=losses[-1])
    return {
        "task": dtfkit.this_task().name,
        "scheduled": steps,
        "completed": len(losses),
        "seconds": time.time() - scheduled_at,
        "losses": losses,
        "executions": int(executions.numpy()),
        "first_loss": losses[0],
        "last_loss": losses[-1],
    }
