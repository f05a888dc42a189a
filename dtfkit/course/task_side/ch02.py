"""Runs inside the tasks: what ``dtfkit.course.check.ch02`` runs on its clusters (see ``task_side``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import dtfkit
from dtfkit.recipes.between_graph.task_side import uneven_mlp
from dtfkit.recipes.tf1.task_side import classifier, on_ps, task_shard, training_session


def _worker(session_config: Callable, *, steps: int, run_name: str) -> dict[str, Any]:
    """Run in a worker: the tutorial's asynchronous between-graph worker, with the learner's session config."""
    import tensorflow as tf

    ctx = dtfkit.this_task()
    config = session_config(tf, ctx.job_name, ctx.task_index)
    filters = list(config.device_filters) if config is not None else []
    x, y, rng = task_shard(ctx)
    tf.get_logger().setLevel("ERROR")
    with tf.Graph().as_default(), tf.compat.v1.variable_scope(run_name):
        with on_ps(tf, ctx):
            images, labels, _, loss = classifier(tf, 32)
            global_step = tf.compat.v1.train.get_or_create_global_step()
            train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
                loss, global_step=global_step
            )
        local = 0
        hooks = [tf.compat.v1.train.StopAtStepHook(last_step=steps)]
        with training_session(tf, ctx, hooks=hooks, config=config) as sess:
            while not sess.should_stop():
                idx = rng.integers(0, len(x), 32)
                sess.run(train_op, {images: x[idx], labels: y[idx]})
                local += 1
    return {"local_steps": local, "filters": filters}


def _place(ps_strategy: Callable, layers: tuple[int, ...], num_ps: int) -> dict[str, Any]:
    """Run in a task: build ``layers`` under replica_device_setter with the learner's strategy, over
    the first ``num_ps`` ps tasks."""
    import tensorflow as tf

    ctx = dtfkit.this_task()
    spec = {**ctx.cluster, "ps": ctx.cluster["ps"][:num_ps]}
    with tf.Graph().as_default():
        setter = tf.compat.v1.train.replica_device_setter(
            cluster=spec,
            worker_device=f"/job:worker/task:{ctx.task_index}",
            ps_strategy=ps_strategy(num_ps),
        )
        with tf.compat.v1.device(setter):
            uneven_mlp(tf, tf.compat.v1.placeholder(tf.float32, [None, layers[0]]), layers)
        rows = []
        for v in tf.compat.v1.global_variables():
            spec = tf.DeviceSpec.from_string(v.device)
            rows.append((v.op.name, int(np.prod(v.shape)) * v.dtype.size, spec.job, spec.task))
    return {"variables": rows}
