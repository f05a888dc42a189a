"""Between-graph replicated training, TF1 style (graph mode, ``tf.compat.v1``), run in a task.

The recipe of Ye Hu's tutorial *分布式TensorFlow入门教程* (2018), with its pitfalls defused by default: each worker's
session only needs the ps tasks and itself (``device_filters``), the
``MonitoredTrainingSession`` grace period is short, and every step is reported
with ``dtfkit.report`` so the notebook can plot it.

Example::

    from dtfkit.recipes import tf1
    with dtfkit.LocalCluster(ps=2, workers=2) as cluster:
        results = cluster.run(tf1.train_between_graph, kwargs={"sync": True, "steps": 200})
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from typing import Any, NamedTuple

import numpy as np

import dtfkit
from dtfkit.course.datasets import load_digits, shard

NUM_FEATURES = 64
NUM_CLASSES = 10


def dense(tf, x, units: int, name: str, activation=None):
    """A fully connected layer from ``get_variable`` + ``matmul`` (``layers.dense`` is gone with Keras 3)."""
    with tf.compat.v1.variable_scope(name):
        w = tf.compat.v1.get_variable(
            "kernel", [int(x.shape[-1]), units], initializer=tf.compat.v1.glorot_uniform_initializer(seed=1)
        )
        b = tf.compat.v1.get_variable("bias", [units], initializer=tf.compat.v1.zeros_initializer())
        y = tf.matmul(x, w) + b
        return activation(y) if activation is not None else y


def mlp(tf, images, hidden: int):
    """The tutorial's classifier: two hidden ReLU layers and a linear output."""
    net = dense(tf, images, hidden, "dense_1", tf.nn.relu)
    net = dense(tf, net, hidden, "dense_2", tf.nn.relu)
    return dense(tf, net, NUM_CLASSES, "dense_3")


class Classifier(NamedTuple):
    """The digits classifier's graph: feed ``images`` and ``labels``, fetch ``loss``."""

    images: Any
    labels: Any
    logits: Any
    loss: Any


def classifier(tf, hidden: int, suffix: str = "") -> Classifier:
    """Placeholders, the MLP and its mean cross-entropy, in the current device scope.

    ``suffix`` names the placeholders apart when one graph holds several towers.
    """
    images = tf.compat.v1.placeholder(tf.float32, [None, NUM_FEATURES], name=f"images{suffix}")
    labels = tf.compat.v1.placeholder(tf.int64, [None], name=f"labels{suffix}")
    logits = mlp(tf, images, hidden)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    return Classifier(images, labels, logits, loss)


def on_ps(tf, ctx):
    """``replica_device_setter`` for this task: variables round-robin on the ps tasks,
    everything else on this task."""
    worker = f"/job:{ctx.job_name}/task:{ctx.task_index}"
    return tf.compat.v1.device(
        tf.compat.v1.train.replica_device_setter(worker_device=worker, cluster=ctx.cluster_spec())
    )


def training_session(tf, ctx, *, hooks: list, config, is_chief: bool | None = None, **options):
    """``MonitoredTrainingSession`` on this task's server, without the step-rate log
    lines and summary files the recipes do not use (``options`` override anything)."""
    options = {
        "log_step_count_steps": 0,
        "save_summaries_steps": None,
        "save_summaries_secs": None,
        **options,
    }
    chief = ctx.is_chief if is_chief is None else is_chief
    return tf.compat.v1.train.MonitoredTrainingSession(
        master=ctx.target, is_chief=chief, hooks=hooks, config=config, **options
    )


def session_config(tf, ctx, device_filters: bool = True):
    """Session config whose device filters keep a worker from waiting on its peers."""
    if not device_filters:
        return None
    return tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:{ctx.job_name}/task:{ctx.task_index}"])


def train_between_graph(
    *,
    sync: bool = False,
    steps: int = 300,
    batch_size: int = 32,
    learning_rate: float = 0.1,
    hidden: int = 64,
    optimizer: str = "sgd",
    replicas_to_aggregate: int | None = None,
    total_num_replicas: int | None = None,
    device_filters: bool = True,
    stop_grace_secs: float = 1.0,
    straggler_ms: dict[str, float] | None = None,
    checkpoint_dir: str | None = None,
    report_every: int = 1,
    seed: int = 0,
    run_name: str | None = None,
    record_steps: bool = False,
    start_barrier: bool = False,
    straggler_in_step: bool = False,
) -> dict[str, Any]:
    """Train the digits MLP between-graph in this worker; returns this worker's summary.

    ``straggler_ms`` slows named workers down (``{"worker:1": 50}``: 50 ms per step).
    Variables live on the ps tasks under ``run_name`` (default: one name per
    ``cluster.run`` call), so several runs on one cluster never share a model.
    The summary holds ``local_steps``, ``global_step``, ``loss``, ``accuracy`` (test
    split, read after training) and ``first_step``/``last_step`` wall times.

    ``record_steps=True`` also measures staleness: each step reads the global step
    before it reads the parameters (a control dependency), and reads it again once its
    own update is applied. The summary then has ``pushes``, one ``[start, end, read,
    applied]`` per local step, and each report carries ``read_step`` and ``start``;
    ``applied - read - 1`` counts the other updates that landed between this step's read
    of the global step and its read just after its own update: an upper bound on the
    step's staleness (an update that lands after the step read the global step but before
    its variables were fetched, or after its own increment but before the second read, is
    counted without having made the gradient stale). It also creates the global
    step before the model, so the variables land on other ps tasks than without it.

    ``start_barrier=True``: after its first step, each worker waits until every worker
    has made its first step (the first ``session.run`` sets the session up and can take
    a second; without the barrier a short async run is over before the others join).

    ``straggler_in_step=True`` (with ``record_steps``): a straggler's delay happens inside
    its step, after the forward pass has read the parameters and before the gradient is
    applied, as a slow computation would, so other workers' updates land meanwhile and
    its own update arrives stale.
    """
    import tensorflow as tf

    ctx = dtfkit.this_task()
    delay = (straggler_ms or {}).get(ctx.name, 0.0) / 1000.0
    workers = ctx.num_workers + (1 if "chief" in ctx.cluster else 0)
    x, y = load_digits(split="train")
    x, y = shard(x, y, worker_rank(ctx), workers)
    x_test, y_test = load_digits(split="test")
    rng = np.random.default_rng(seed * 1000 + worker_rank(ctx))

    tf.get_logger().setLevel("ERROR")  # TF1 deprecation notices teach nothing here
    graph = tf.Graph()
    name = run_name or f"run{ctx.call_id}"
    # SyncReplicasOptimizer's token queue is shared_name="sync_token_q" in every graph and
    # the chief closes it on exit: without a container per run, the next sync run on the
    # same ps fails with "FIFOQueue 'sync_token_q' is closed". Container names allow no "_".
    container = re.sub(r"[^A-Za-z0-9.]", ".", name)
    with graph.as_default(), tf.compat.v1.container(container), tf.compat.v1.variable_scope(name):
        with on_ps(tf, ctx):
            read_step = None
            if record_steps:
                global_step = tf.compat.v1.train.get_or_create_global_step()
                read_step = global_step.read_value()
                with tf.control_dependencies([read_step]):  # the parameters are read after it
                    images, labels, logits, loss = classifier(tf, hidden)
            else:
                images, labels, logits, loss = classifier(tf, hidden)
                global_step = tf.compat.v1.train.get_or_create_global_step()
            accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), labels), tf.float32))
            opt = (
                tf.compat.v1.train.AdamOptimizer(learning_rate)
                if optimizer == "adam"
                else tf.compat.v1.train.GradientDescentOptimizer(learning_rate)
            )
            hooks = [tf.compat.v1.train.StopAtStepHook(last_step=steps)]
            if sync:
                opt = tf.compat.v1.train.SyncReplicasOptimizer(
                    opt,
                    replicas_to_aggregate=replicas_to_aggregate or workers,
                    total_num_replicas=total_num_replicas or workers,
                )
                hooks.append(opt.make_session_run_hook(ctx.is_chief))
            slow_part = []
            if straggler_in_step and record_steps and delay:
                # The slow computation sits between reading the parameters (the forward
                # pass needs them) and writing the update: other workers' updates that
                # land meanwhile really make this gradient stale.
                slow_part = [tf.compat.v1.py_func(lambda _: _sleep(delay), [loss], tf.int64, stateful=True)]
            with tf.control_dependencies(slow_part):
                train_op = opt.minimize(loss, global_step=global_step)
            fetch_step = global_step
            if record_steps:
                with tf.control_dependencies([train_op]):
                    fetch_step = global_step.read_value()
                fetch_step = [fetch_step, read_step]
            if start_barrier:
                ready = tf.compat.v1.get_variable(
                    "ready", [], tf.int32, initializer=tf.compat.v1.zeros_initializer(), trainable=False
                )
                arrive = ready.assign_add(1)

        config = session_config(tf, ctx, device_filters)
        if not ctx.is_chief:
            wait_for_chief_init(tf, ctx.target, config)
        local_steps, step, value = 0, 0, float("nan")
        first_step = last_step = None
        pushes: list[list] = []
        with quiet_queue_runner_cancel(tf):
            with training_session(
                tf,
                ctx,
                hooks=hooks,
                config=config,
                checkpoint_dir=checkpoint_dir,
                stop_grace_period_secs=stop_grace_secs,
            ) as sess:
                while not sess.should_stop():
                    if start_barrier and local_steps == 1:
                        from dtfkit.recipes.sync import _barrier  # sync imports this module

                        _barrier(tf, ctx.target, config, arrive, ready, workers)
                    idx = rng.integers(0, len(x), batch_size)
                    if delay and not (straggler_in_step and record_steps):
                        time.sleep(delay)
                    before = time.time()
                    _, value, step = sess.run([train_op, loss, fetch_step], {images: x[idx], labels: y[idx]})
                    last_step = time.time()
                    first_step = first_step or before
                    local_steps += 1
                    extra = {}
                    if record_steps:
                        step, read = int(step[0]), int(step[1])
                        pushes.append([before, last_step, read, step])
                        extra = {"read_step": read, "start": before}
                    if report_every and local_steps % report_every == 0:
                        dtfkit.report(step=step, loss=value, local_step=local_steps, **extra)
            # The chief's queue-runner thread dies with CancelledError once the session has
            # closed; wait for it while that traceback is still hidden (it got printed otherwise).
            for thread in threading.enumerate():
                if thread.name.startswith("QueueRunnerThread"):
                    thread.join(5.0)
        with tf.compat.v1.Session(ctx.target, config=config) as plain:
            acc, final_step = plain.run([accuracy, global_step], {images: x_test, labels: y_test})
    summary = {
        "local_steps": local_steps,
        "global_step": int(final_step),
        "loss": float(value),
        "accuracy": float(acc),
        "first_step": first_step,
        "last_step": last_step,
        "done": time.time(),
    }
    if record_steps:
        summary["pushes"] = pushes
    return summary


def _sleep(seconds: float) -> np.int64:
    time.sleep(seconds)
    return np.int64(0)


def wait_for_chief_init(tf, target: str, config, timeout: float = 120.0, poll: float = 0.1) -> None:
    """Block until the chief has initialized every global variable (bounded).

    A non-chief ``MonitoredTrainingSession`` checks once, then sleeps 30 s
    (``SessionManager``'s ``recovery_wait_secs``) if the chief is not done yet;
    polling the ps here turns that half-minute stall into a fraction of a second.
    """
    pending = tf.compat.v1.report_uninitialized_variables(tf.compat.v1.global_variables())
    deadline = time.monotonic() + timeout
    with tf.compat.v1.Session(target, config=config) as sess:
        while len(sess.run(pending)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the chief did not initialize the variables within {timeout:g} s")
            time.sleep(poll)


@contextlib.contextmanager
def quiet_queue_runner_cancel(tf):
    """Closing a sync session cancels the chief's token queue runner mid-enqueue, and its
    thread dies with a CancelledError traceback that says nothing useful. Hide only that."""
    previous = threading.excepthook

    def hook(args):
        if not (issubclass(args.exc_type, tf.errors.CancelledError) and "QueueRunner" in str(args.thread)):
            previous(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous


def worker_rank(ctx) -> int:
    """0 for the chief (or worker 0), then the workers in order."""
    if "chief" in ctx.cluster:
        return 0 if ctx.job_name == "chief" else ctx.task_index + 1
    return ctx.task_index
