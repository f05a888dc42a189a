"""Runs inside the tasks: what ``dtfkit.course.check.ch01`` runs on its clusters (see ``task_side``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dtfkit
from dtfkit.recipes.placement import task_side as placement


def _trace_builds(build: Callable, cases: tuple) -> list[dict[str, Any]]:
    """Run in the client: build the learner's graph for each case, run it once on worker:0's master, traced."""
    import tensorflow as tf

    ctx = dtfkit.this_task()
    out = []
    for variables_on, compute_on in cases:
        with tf.Graph().as_default() as graph:
            z = build(tf, variables_on, compute_on)
            with tf.compat.v1.Session("grpc://" + ctx.cluster["worker"][0]) as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                traced = placement.trace_run(sess, z, graph=graph)
            traced["variables"] = placement.variable_devices(graph)
            traced["z_op"] = z.op.name
        out.append(traced)
    return out


def _layer_work(graph: Any, kernel_names: list[str]) -> list[list[str]]:
    """For each kernel variable: the names of the forward MatMuls that read it.

    Grappler may fuse a forward MatMul with its bias and ReLU (the fused op takes another
    name), but the gradient ops of that MatMul are colocated with it and always run.
    """
    out = []
    for name in kernel_names:
        kernel = graph.get_operation_by_name(name)
        readers = [c for t in kernel.outputs for c in t.consumers()]
        readers += [
            c for r in readers if r.type in ("ReadVariableOp", "Identity") for c in r.outputs[0].consumers()
        ]
        out.append(
            sorted({r.name for r in readers if r.type == "MatMul" and not r.name.startswith("gradients/")})
        )
    return out


def _trace_layers(place_layers: Callable, cases: tuple) -> list[dict[str, Any]]:
    """Run in the client: one traced training step of the learner's model for each case."""
    import tensorflow as tf

    from dtfkit.datasets import load_digits

    ctx = dtfkit.this_task()
    x, y = load_digits(split="train")
    out = []
    for devices, units in cases:
        with tf.Graph().as_default() as graph:
            images = tf.compat.v1.placeholder(tf.float32, [None, 64])
            labels = tf.compat.v1.placeholder(tf.int64, [None])
            logits = place_layers(tf, images, list(devices), list(units))
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            )
            train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
                loss, colocate_gradients_with_ops=True
            )
            with tf.compat.v1.Session("grpc://" + ctx.cluster["worker"][0]) as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                traced = placement.trace_run(
                    sess, [train, loss], {images: x[:64], labels: y[:64]}, graph=graph
                )
            traced["variables"] = placement.variable_devices(graph)
            shapes = [[64 if i == 0 else units[i - 1], u] for i, u in enumerate(units)]
            kernels = [
                next((v["variable"] for v in traced["variables"] if v["shape"] == s), None) for s in shapes
            ]
            named = [k for k in kernels if k is not None]
            traced["layer_ops"] = _layer_work(graph, named) if len(named) == len(kernels) else None
        traced["value"] = float(traced["value"][1])
        out.append(traced)
    return out
