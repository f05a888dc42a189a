"""Checks for chapter 1 (ClusterSpec basics: where each op runs).

Example::

    from dtfkit.course import check
    check.ch01.variables_on_worker(build)
    check.ch01.model_parallel(two_layers)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import dtfkit
from dtfkit.course.check._core import CheckResult, cluster, exercise, failed, passed
from dtfkit.recipes import placement


def _trace_build(build: Callable) -> dict[str, Any]:
    """Run in the client: build the learner's graph, run it once on worker:0's master, traced."""
    import tensorflow as tf

    ctx = dtfkit.this_task()
    with tf.Graph().as_default() as graph:
        z = build(tf)
        with tf.compat.v1.Session("grpc://" + ctx.cluster["worker"][0]) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            traced = placement.trace_run(sess, z, graph=graph)
        traced["variables"] = placement.variable_devices(graph)
        traced["z_op"] = z.op.name
    return traced


@exercise("1.1", "Variables on a worker")
def variables_on_worker(build: Callable, *, hidden: bool = False) -> CheckResult:
    """Run ``build(tf)`` (returns ``z``) on a 1 ps + 2 workers cluster from a separate client.

    Example::

        check.ch01.variables_on_worker(build)
    """
    with cluster(ps=1, workers=2) as c:
        (traced,) = c.run(_trace_build, args=(build,), on="client", timeout=120).values()
    value = np.asarray(traced["value"])
    if value.shape != (2, 2) or not np.allclose(value, 7.0):
        return failed(
            f"z came out as {value.tolist()}, not [[7, 7], [7, 7]]", "z = x + y with x all 3s and y all 4s"
        )
    wrong = [
        f"{v['variable']} on {v['task'] or 'no device'}"
        for v in traced["variables"]
        if v["task"] != "worker:1"
    ]
    if not traced["variables"] or wrong:
        return failed(
            f"the variables are not all on worker:1: {', '.join(wrong) or 'no variable created'}",
            "create x and y inside tf.compat.v1.device('/job:worker/task:1')",
        )
    ran = placement.by_task(traced["ops"])
    if ran.get("ps:0"):
        return failed(f"ps:0 still ran {sorted(ran['ps:0'])}", "nothing should be placed on /job:ps any more")
    z_task = next((r["task"] for r in traced["ops"] if r["op"] == traced["z_op"]), None)
    if z_task != "worker:0":
        return failed(
            f"z was computed on {z_task}, not worker:0",
            "put the add under tf.compat.v1.device('/job:worker/task:0')",
        )
    return passed("x and y lived on worker:1, z was computed on worker:0 and ps:0 ran nothing")


def _trace_model(two_layers: Callable) -> dict[str, Any]:
    """Run in the client: one traced training step of the learner's two-layer model."""
    import tensorflow as tf

    from dtfkit.course.datasets import load_digits

    ctx = dtfkit.this_task()
    x, y = load_digits(split="train")
    with tf.Graph().as_default() as graph:
        images = tf.compat.v1.placeholder(tf.float32, [None, 64])
        labels = tf.compat.v1.placeholder(tf.int64, [None])
        logits = two_layers(tf, images)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
            loss, colocate_gradients_with_ops=True
        )
        with tf.compat.v1.Session("grpc://" + ctx.cluster["worker"][0]) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            traced = placement.trace_run(sess, [train, loss], {images: x[:64], labels: y[:64]}, graph=graph)
        traced["variables"] = placement.variable_devices(graph)
    traced["value"] = float(traced["value"][1])
    return traced


@exercise("1.2", "Model parallelism")
def model_parallel(two_layers: Callable, *, hidden: bool = False) -> CheckResult:
    """Train one step of ``two_layers(tf, images)``: layer 1 on worker:0, layer 2 on worker:1.

    Example::

        check.ch01.model_parallel(two_layers)
    """
    with cluster(ps=1, workers=2) as c:
        (traced,) = c.run(_trace_model, args=(two_layers,), on="client", timeout=120).values()
    first = [v for v in traced["variables"] if v["shape"] and v["shape"][0] == 64]
    last = [v for v in traced["variables"] if v["shape"] and v["shape"][-1] == 10]
    if not first or not last:
        return failed("no 64 x H kernel or no H x 10 layer found", "two dense layers: 64 -> hidden -> 10")
    for layer, want, rows in (("first", "worker:0", first), ("second", "worker:1", last)):
        wrong = [f"{v['variable']} on {v['task'] or 'no device'}" for v in rows if v["task"] != want]
        if wrong:
            return failed(
                f"the {layer} layer's variables should be on {want}: {', '.join(wrong)}",
                f"build the {layer} layer inside tf.compat.v1.device('/job:{want.replace(':', '/task:')}')",
            )
    matmuls = placement.by_task([r for r in traced["ops"] if r["type"] == "MatMul"])
    missing = [t for t in ("worker:0", "worker:1") if not matmuls.get(t)]
    if missing:
        return failed(
            f"{' and '.join(missing)} ran no MatMul in the training step",
            "put each layer's matmul with its variables, not only the variables",
        )
    return passed("layer 1 trained on worker:0 and layer 2 on worker:1, each task running its own matmuls")
