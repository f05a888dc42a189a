"""Code the lab runs inside the tasks (it imports TensorFlow there, never in the notebook).

Example (what ``Lab`` does after a run)::

    cluster.run(tasks.evaluate, kwargs={"run_name": "lab3", "hidden": 32, "global_step_first": True},
                on="worker:0")     # {'worker:0': {'loss': 0.61, 'accuracy': 0.83}}
"""

from __future__ import annotations

import re
from typing import Any

import dtfkit
from dtfkit.course.datasets import load_digits
from dtfkit.recipes import tf1


def evaluate(*, run_name: str, hidden: int, global_step_first: bool) -> dict[str, Any]:
    """Test-split loss and accuracy of the model a finished run left on the ps tasks.

    Builds the run's model again under the same names, container and device setter
    (``global_step_first``: the global step was created before the model, as
    ``train_between_graph(record_steps=True)`` does) and reads its variables without
    initializing anything.
    """
    import tensorflow as tf

    ctx = dtfkit.this_task()
    x, y = load_digits(split="test")
    container = re.sub(r"[^A-Za-z0-9.]", ".", run_name)
    tf.get_logger().setLevel("ERROR")
    with tf.Graph().as_default(), tf.compat.v1.container(container), tf.compat.v1.variable_scope(run_name):
        with tf1.on_ps(tf, ctx):
            if global_step_first:
                tf.compat.v1.train.get_or_create_global_step()
            model = tf1.classifier(tf, hidden)
            hits = tf.equal(tf.argmax(model.logits, 1), model.labels)
            accuracy = tf.reduce_mean(tf.cast(hits, tf.float32))
        with tf.compat.v1.Session(ctx.target, config=tf1.session_config(tf, ctx)) as sess:
            loss, acc = sess.run([model.loss, accuracy], {model.images: x, model.labels: y})
    return {"loss": float(loss), "accuracy": float(acc)}
