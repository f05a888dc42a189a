"""Runs inside the tasks: the TF1 building blocks every between-graph recipe shares: the model, ``on_ps``, the
training session, barriers between peers, and ``train_between_graph`` itself.

TensorFlow only inside functions: the kernel imports this module to name what it sends.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from typing import Any, NamedTuple

import numpy as np

import dtfkit
from dtfkit.datasets import load_digits, shard

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


def _sgd_model(tf, hidden: int, learning_rate: float):
    """The digits MLP, its global step and its plain SGD train op, in the current graph and device
    scope: ``(images, labels, loss, global_step, train_op)``."""
    images, labels, _, loss = classifier(tf, hidden)
    global_step = tf.compat.v1.train.get_or_create_global_step()
    train_op = tf.compat.v1.train.GradientDescentOptimizer(learning_rate).minimize(
        loss, global_step=global_step
    )
    return images, labels, loss, global_step, train_op


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
    start_barrier: bool = False,
) -> dict[str, Any]:
    """Train the digits MLP between-graph in this worker; returns this worker's summary.

    ``straggler_ms`` slows named workers down (``{"worker:1": 50}``: 50 ms before each step).
    Variables live on the ps tasks under ``run_name`` (default: one name per
    ``cluster.run`` call), so several runs on one cluster never share a model.
    The summary holds ``local_steps``, ``global_step``, ``loss``, ``accuracy`` (test
    split, read after training) and ``first_step``/``last_step`` wall times.

    ``start_barrier=True``: after its first step, each worker waits until every worker
    has made its first step (the first ``session.run`` sets the session up and can take
    a second; without the barrier a short async run is over before the others join).
    The barrier's counter is one more variable, ``ready``, created after the global step.

    Example::

        cluster.run(train_between_graph, kwargs={"steps": 300, "start_barrier": True})
        # {'worker:0': {'local_steps': 151, 'global_step': 300, 'accuracy': 0.93, ...}, 'worker:1': {...}}
    """
    import tensorflow as tf

    ctx = dtfkit.this_task()
    delay = (straggler_ms or {}).get(ctx.name, 0.0) / 1000.0
    workers = num_replicas(ctx)
    x, y, rng = train_shard(ctx, seed)

    tf.get_logger().setLevel("ERROR")  # TF1 deprecation notices teach nothing here
    with run_scope(tf, run_name or f"run{ctx.call_id}"):
        with on_ps(tf, ctx):
            model = classifier(tf, hidden)
            global_step = tf.compat.v1.train.get_or_create_global_step()
            accuracy = accuracy_of(tf, model)
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
            train_op = opt.minimize(model.loss, global_step=global_step)
            barrier = peer_barrier(tf) if start_barrier else None

        config = session_config(tf, ctx, device_filters)
        if not ctx.is_chief:
            wait_for_chief_init(tf, ctx.target, config)
        local_steps, step, value = 0, 0, float("nan")
        first_step = last_step = None
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
                    if barrier is not None and local_steps == 1:
                        wait_for_peers(tf, ctx.target, config, barrier, workers)
                    idx = rng.integers(0, len(x), batch_size)
                    if delay:
                        time.sleep(delay)
                    before = time.time()
                    _, value, step = sess.run(
                        [train_op, model.loss, global_step], {model.images: x[idx], model.labels: y[idx]}
                    )
                    last_step = time.time()
                    first_step = first_step or before
                    local_steps += 1
                    if report_every and local_steps % report_every == 0:
                        dtfkit.report(step=step, loss=value, local_step=local_steps)
            join_queue_runner_threads(timeout=5.0)
        acc, final_step = read_test_accuracy(tf, ctx, config, model, accuracy, global_step)
    return {
        "local_steps": local_steps,
        "global_step": final_step,
        "loss": float(value),
        "accuracy": acc,
        "first_step": first_step,
        "last_step": last_step,
        "done": time.time(),
    }


# ------------------------------------------------------------ building blocks
def num_replicas(ctx) -> int:
    """The workers that train: every worker task, plus the chief task if there is one."""
    return ctx.num_workers + (1 if "chief" in ctx.cluster else 0)


def train_shard(ctx, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.random.Generator]:
    """This worker's shard of the digits training split and its batch sampler
    (``rng.integers(0, len(x), batch_size)``), seeded per worker."""
    rank = worker_rank(ctx)
    x, y = load_digits(split="train")
    x, y = shard(x, y, rank, num_replicas(ctx))
    return x, y, np.random.default_rng(seed * 1000 + rank)


def task_shard(ctx) -> tuple[np.ndarray, np.ndarray, np.random.Generator]:
    """This worker's shard of the digits training split by its task index among the workers,
    and a batch sampler seeded by that index (the exercise checks' workers; ``train_shard``
    ranks a chief in too).

    Example::

        x, y, rng = task_shard(dtfkit.this_task())
        idx = rng.integers(0, len(x), 32)
    """
    x, y = load_digits(split="train")
    x, y = shard(x, y, ctx.task_index, ctx.num_workers)
    return x, y, np.random.default_rng(ctx.task_index)


def container_name(run_name: str) -> str:
    """The resource container of a run: ``run_name`` with every character a container
    name does not allow (``_`` among them) made a ``.``."""
    return re.sub(r"[^A-Za-z0-9.]", ".", run_name)


@contextlib.contextmanager
def run_scope(tf, run_name: str):
    """A new graph (yielded) whose variables are named under ``run_name`` and live in the
    run's own resource container on the ps.

    ``SyncReplicasOptimizer``'s token queue is ``shared_name="sync_token_q"`` in every graph
    and the chief closes it on exit: without a container per run, the next sync run on the
    same ps fails with "FIFOQueue 'sync_token_q' is closed".

    Example::

        with run_scope(tf, "run3") as graph, on_ps(tf, ctx):
            model = classifier(tf, 64)      # variables run3/dense_1/kernel, ... in container "run3"
    """
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.container(container_name(run_name)):
        with tf.compat.v1.variable_scope(run_name):
            yield graph


def accuracy_of(tf, model: Classifier):
    """The fraction of ``model``'s predictions that match its ``labels`` (a scalar tensor)."""
    return tf.reduce_mean(tf.cast(tf.equal(tf.argmax(model.logits, 1), model.labels), tf.float32))


def read_test_accuracy(tf, ctx, config, model: Classifier, accuracy, global_step) -> tuple[float, int]:
    """After training: ``accuracy`` on the digits test split and the global step, read in
    a plain session (the training session has closed)."""
    x_test, y_test = load_digits(split="test")
    with tf.compat.v1.Session(ctx.target, config=config) as plain:
        acc, step = plain.run([accuracy, global_step], {model.images: x_test, model.labels: y_test})
    return float(acc), int(step)


class Barrier(NamedTuple):
    """A start barrier: ``ready`` counts the workers in (an int32 variable on a ps),
    ``arrive`` adds this one."""

    ready: Any
    arrive: Any


def peer_barrier(tf) -> Barrier:
    """Create the barrier's counter, ``ready`` (call it under ``on_ps``, in every worker's graph).

    Example::

        barrier = peer_barrier(tf)
        ...                              # after this worker's first step:
        wait_for_peers(tf, ctx.target, config, barrier, count=2)
    """
    ready = tf.compat.v1.get_variable(
        "ready", [], tf.int32, initializer=tf.compat.v1.zeros_initializer(), trainable=False
    )
    return Barrier(ready, ready.assign_add(1))


def wait_for_peers(
    tf, target: str | None, config, barrier: Barrier, count: int, timeout: float = 120.0, strict: bool = True
) -> bool:
    """Count this worker in, then wait until ``count`` workers are in; True once they are.

    A worker's first ``session.run`` sets the step up on the ps and can take a second on
    a busy machine: calling this after the first step makes the workers really train
    side by side. After ``timeout`` seconds it raises ``TimeoutError``, or with
    ``strict=False`` returns False and lets this worker go on (for a worker whose peers
    may legitimately never arrive, e.g. stopped by a hook before their first step).
    """
    with tf.compat.v1.Session(target, config=config) as plain:
        plain.run(barrier.arrive)
        deadline = time.monotonic() + timeout
        while plain.run(barrier.ready) < count:
            if time.monotonic() > deadline:
                if strict:
                    raise TimeoutError(f"not every worker started within {timeout:g} s")
                return False
            time.sleep(0.01)
    return True


def join_queue_runner_threads(timeout: float) -> None:
    """Wait (at most ``timeout`` s in all) for the queue-runner threads of a closed session.

    The chief's queue-runner thread dies with CancelledError once the session has closed;
    call this inside ``quiet_queue_runner_cancel`` so that traceback stays hidden."""
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if thread.name.startswith("QueueRunnerThread"):
            thread.join(max(0.0, deadline - time.monotonic()))


def wait_for_chief_init(tf, target: str | None, config, timeout: float = 120.0, poll: float = 0.1) -> None:
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
