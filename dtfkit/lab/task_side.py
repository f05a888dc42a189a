"""Code the lab runs inside the tasks (it imports TensorFlow there, never in the notebook).

The chapters' recipe, ``tf1.train_between_graph``, teaches async training; the lab also
*records* it, step by step, with ``train_recorded``, built from the same parts
(``classifier``, ``on_ps``, ``training_session``, the start barrier...). A sync run
uses ``dtfkit.recipes.sync.train_sync``, whose gradient ledger already records it.

Example (what ``Lab`` does for an async run)::

    cluster.submit(task_side.train_recorded, kwargs={"steps": 60, "run_name": "lab3", "hidden": 32},
                   on=["worker:0", "worker:1"])   # {'worker:0': {'pushes': [[start, end, read, applied], ...], ...}}
    cluster.run(task_side.evaluate, kwargs={"run_name": "lab3", "hidden": 32, "global_step_first": True},
                on="worker:0")     # {'worker:0': {'loss': 0.61, 'accuracy': 0.83}}
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import dtfkit
from dtfkit.datasets import load_digits
from dtfkit.recipes.tf1 import task_side as tf1


def train_recorded(
    *,
    steps: int = 60,
    batch_size: int = 32,
    learning_rate: float = 0.1,
    hidden: int = 32,
    straggler_ms: dict[str, float] | None = None,
    run_name: str,
    stop_grace_secs: float = 1.0,
    report_every: int = 1,
    seed: int = 0,
) -> dict[str, Any]:
    """Async SGD between-graph in this worker, every step's staleness measured; returns
    ``tf1.train_between_graph``'s summary plus ``pushes``.

    What it adds to the recipe (``train_between_graph(start_barrier=True)``):

    - Each step reads the global step before it reads the parameters (a control
      dependency), and reads it again once its own update is applied. ``pushes`` holds one
      ``[start, end, read, applied]`` per local step, and each report carries ``read_step``
      and ``start``. ``applied - read - 1`` counts the other updates that landed between
      this step's read of the global step and its read just after its own update: an
      upper bound on the step's staleness (an update that lands after the step read the
      global step but before its variables were fetched, or after its own increment but
      before the second read, is counted without having made the gradient stale).
    - So that read comes first, the global step is created before the model: the
      variables land on other ps tasks than the recipe's (``evaluate(global_step_first=True)``
      builds the model the same way).
    - A straggler's delay (``straggler_ms``) happens inside its step, after the forward
      pass has read the parameters and before the gradient is applied, as a slow
      computation would, so other workers' updates land meanwhile and its own arrives stale.
    - The start barrier is always on: a short async run is otherwise over before the
      other workers' sessions are up.
    """
    import tensorflow as tf

    ctx = dtfkit.this_task()
    delay = (straggler_ms or {}).get(ctx.name, 0.0) / 1000.0
    workers = tf1.num_replicas(ctx)
    x, y, rng = tf1.train_shard(ctx, seed)

    tf.get_logger().setLevel("ERROR")
    with tf1.run_scope(tf, run_name):
        with tf1.on_ps(tf, ctx):
            global_step = tf.compat.v1.train.get_or_create_global_step()
            read_step = global_step.read_value()
            with tf.control_dependencies([read_step]):  # the parameters are read after it
                model = tf1.classifier(tf, hidden)
            accuracy = tf1.accuracy_of(tf, model)
            opt = tf.compat.v1.train.GradientDescentOptimizer(learning_rate)
            # The slow computation sits between reading the parameters (the forward pass
            # needs them) and writing the update: other workers' updates that land
            # meanwhile really make this gradient stale.
            slow = (
                [tf.compat.v1.py_func(lambda _: _sleep(delay), [model.loss], tf.int64, stateful=True)]
                if delay
                else []
            )
            with tf.control_dependencies(slow):
                train_op = opt.minimize(model.loss, global_step=global_step)
            with tf.control_dependencies([train_op]):
                applied_step = global_step.read_value()
            barrier = tf1.peer_barrier(tf)

        config = tf1.session_config(tf, ctx)
        if not ctx.is_chief:
            tf1.wait_for_chief_init(tf, ctx.target, config)
        hooks = [tf.compat.v1.train.StopAtStepHook(last_step=steps)]
        value = float("nan")
        pushes: list[list] = []
        with tf1.quiet_queue_runner_cancel(tf):
            with tf1.training_session(
                tf, ctx, hooks=hooks, config=config, stop_grace_period_secs=stop_grace_secs
            ) as sess:
                while not sess.should_stop():
                    if len(pushes) == 1:
                        tf1.wait_for_peers(tf, ctx.target, config, barrier, workers)
                    idx = rng.integers(0, len(x), batch_size)
                    start = time.time()
                    _, value, (applied, read) = sess.run(
                        [train_op, model.loss, [applied_step, read_step]],
                        {model.images: x[idx], model.labels: y[idx]},
                    )
                    end = time.time()
                    pushes.append([start, end, int(read), int(applied)])
                    if report_every and len(pushes) % report_every == 0:
                        dtfkit.report(
                            step=int(applied),
                            loss=value,
                            local_step=len(pushes),
                            read_step=int(read),
                            start=start,
                        )
            tf1.join_queue_runner_threads(timeout=5.0)
        acc, final_step = tf1.read_test_accuracy(tf, ctx, config, model, accuracy, global_step)
    return {
        "local_steps": len(pushes),
        "global_step": final_step,
        "loss": float(value),
        "accuracy": acc,
        "first_step": pushes[0][0] if pushes else None,
        "last_step": pushes[-1][1] if pushes else None,
        "done": time.time(),
        "pushes": pushes,
    }


def _sleep(seconds: float) -> np.int64:
    time.sleep(seconds)
    return np.int64(0)


def evaluate(*, run_name: str, hidden: int, global_step_first: bool) -> dict[str, Any]:
    """Test-split loss and accuracy of the model a finished run left on the ps tasks.

    Builds the run's model again under the same names, container and device setter
    (``global_step_first``: the global step was created before the model, as
    ``train_recorded`` does) and reads its variables without initializing anything.
    """
    import tensorflow as tf

    ctx = dtfkit.this_task()
    x, y = load_digits(split="test")
    tf.get_logger().setLevel("ERROR")
    with tf1.run_scope(tf, run_name):
        with tf1.on_ps(tf, ctx):
            if global_step_first:
                tf.compat.v1.train.get_or_create_global_step()
            model = tf1.classifier(tf, hidden)
            accuracy = tf1.accuracy_of(tf, model)
        with tf.compat.v1.Session(ctx.target, config=tf1.session_config(tf, ctx)) as sess:
            loss, acc = sess.run([model.loss, accuracy], {model.images: x, model.labels: y})
    return {"loss": float(loss), "accuracy": float(acc)}
