"""Checks for chapter 2 (between-graph replication).

Example::

    from dtfkit.course import check
    check.ch02.device_filters(session_config)
    check.ch02.greedy_placement(ps_strategy)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import dtfkit
from dtfkit.course import classroom
from dtfkit.course.check._core import CheckResult, cluster, exercise, failed, passed
from dtfkit.course.datasets import load_digits, shard
from dtfkit.recipes.between_graph import UNEVEN_LAYERS, greedy_bytes, uneven_mlp
from dtfkit.recipes.tf1 import classifier, on_ps, training_session


def _worker(session_config: Callable, *, steps: int, run_name: str) -> dict[str, Any]:
    """Run in a worker: the tutorial's asynchronous between-graph worker, with the learner's session config."""
    import tensorflow as tf

    ctx = dtfkit.this_task()
    config = session_config(tf, ctx.job_name, ctx.task_index)
    filters = list(config.device_filters) if config is not None else []
    x, y = load_digits(split="train")
    x, y = shard(x, y, ctx.task_index, ctx.num_workers)
    rng = np.random.default_rng(ctx.task_index)
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


@exercise("2.1", "Fix the non-chief hang")
def device_filters(session_config: Callable, *, hidden: bool = False) -> CheckResult:
    """Train on worker:0 (the chief), stop it, then train on worker:1 with ``session_config``.

    Example::

        check.ch02.device_filters(session_config)
    """
    steps = classroom.scaled(40, minimum=10)
    with cluster(ps=1, workers=2) as c:
        chief = c.run(
            _worker,
            args=(session_config,),
            kwargs={"steps": steps, "run_name": "ex21"},
            on="worker:0",
            timeout=120,
        )["worker:0"]
        c.kill("worker", 0)  # the tutorial script's chief exits when its training is done
        try:
            alone = c.run(
                _worker,
                args=(session_config,),
                kwargs={"steps": 2 * steps, "run_name": "ex21"},
                on="worker:1",
                timeout=45,  # a correct answer needs a few seconds, even on a loaded 2-core machine
            )["worker:1"]
        except dtfkit.TaskTimeout:
            return failed(
                "worker:1 never trained: its session waits for worker:0, which has exited "
                f"(its device_filters were {chief['filters'] or 'not set'})",
                "look at device_filters: a worker's session must need only /job:ps and the worker itself",
            )
    filters = alone["filters"]
    if "/job:ps" not in filters:
        return failed(
            f"worker:1 trained but its filters {filters} leave out the ps", "keep '/job:ps' in the filter"
        )
    if alone["local_steps"] < 1:
        return failed(
            "worker:1 opened its session but took no step", "is StopAtStepHook's last_step reached?"
        )
    return passed(
        "worker:1 trained alone after worker:0 had exited: its session no longer waits for other workers"
    )


def _place(ps_strategy: Callable, layers: tuple[int, ...]) -> dict[str, Any]:
    """Run in a task: build ``layers`` under replica_device_setter with the learner's strategy."""
    import tensorflow as tf

    ctx = dtfkit.this_task()
    with tf.Graph().as_default():
        setter = tf.compat.v1.train.replica_device_setter(
            cluster=ctx.cluster,
            worker_device=f"/job:worker/task:{ctx.task_index}",
            ps_strategy=ps_strategy(ctx.num_ps),
        )
        with tf.compat.v1.device(setter):
            uneven_mlp(tf, tf.compat.v1.placeholder(tf.float32, [None, layers[0]]), layers)
        rows = []
        for v in tf.compat.v1.global_variables():
            spec = tf.DeviceSpec.from_string(v.device)
            rows.append((v.op.name, int(np.prod(v.shape)) * v.dtype.size, spec.job, spec.task))
    return {"variables": rows, "num_ps": ctx.num_ps}


@exercise("2.2", "Place variables by bytes")
def greedy_placement(ps_strategy: Callable, *, hidden: bool = False) -> CheckResult:
    """Place a model with uneven layers with ``ps_strategy(num_ps)``; the ps must hold balanced bytes.

    Example::

        check.ch02.greedy_placement(ps_strategy)
    """
    num_ps = 3 if hidden else 2
    layers = (64, 512, 16, 512, 10) if hidden else UNEVEN_LAYERS
    with cluster(ps=num_ps, workers=1) as c:
        got = c.run(_place, args=(ps_strategy, layers), on="worker:0", timeout=120)["worker:0"]
    loads = [0] * num_ps
    for name, size, job, task in got["variables"]:
        if job != "ps" or task is None:
            return failed(
                f"variable {name} was placed on /job:{job}, not on a ps",
                "ps_strategy must return a ps task index (0 .. num_ps - 1)",
            )
        loads[task] += size
    best = max(greedy_bytes([size for _, size, _, _ in got["variables"]], num_ps))
    shown = ", ".join(f"ps:{i} {b / 1e3:.0f} kB" for i, b in enumerate(loads))
    if max(loads) > best * 1.05:
        return failed(
            f"the busiest ps holds {max(loads) / 1e3:.0f} kB, greedy-by-bytes manages {best / 1e3:.0f} kB ({shown})",
            "count bytes, not variables: give each variable to the ps with the fewest bytes so far "
            "(bg.variable_bytes(op) gives a variable's size)",
        )
    return passed(
        f"{len(got['variables'])} variables over {num_ps} ps, the busiest holding no more than greedy's"
    )
