"""Checks for chapter 6 (custom training loops), run in the notebook's kernel.

Example::

    from dtfkit.course import check
    check.ch06.distributed_step(make_step)
    check.ch06.input_pipeline(make_dataset_fn)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dtfkit.course.check._core import CheckResult, exercise, failed, passed


def _setup():
    import keras
    import tensorflow as tf

    import dtfkit.course.devices
    from dtfkit.course.datasets import load_digits

    devices = dtfkit.course.devices.ensure_replicas(2)[:2]
    strategy = tf.distribute.MirroredStrategy(devices)
    x, y = load_digits(split="train")

    def build():
        keras.utils.set_random_seed(0)
        return keras.Sequential(
            [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)]
        )

    return tf, keras, strategy, x, y, build


@exercise("6.1", "Write the distributed step")
def distributed_step(make_step: Callable, *, hidden: bool = False) -> CheckResult:
    """One step of ``make_step(strategy, model, optimizer, global_batch)`` must equal one single-device step.

    Example::

        check.ch06.distributed_step(make_step)
    """
    tf, keras, strategy, x, y, build = _setup()
    global_batch = 32 * strategy.num_replicas_in_sync
    xb, yb = x[:global_batch], y[:global_batch]
    with strategy.scope():
        model = build()
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)
    initial = [w.copy() for w in model.get_weights()]
    step = make_step(strategy, model, optimizer, global_batch)
    dist = iter(
        strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices((xb, yb)).batch(global_batch)
        )
    )
    loss = float(step(next(dist)))
    after = model.get_weights()

    single = build()
    single.set_weights(initial)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with tf.GradientTape() as tape:
        want_loss = loss_fn(yb, single(xb, training=True))
    grads = tape.gradient(want_loss, single.trainable_variables)
    keras.optimizers.SGD(0.1).apply_gradients(zip(grads, single.trainable_variables, strict=True))
    want = single.get_weights()

    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(after, initial, strict=True))
    want_moved = max(float(np.max(np.abs(a - b))) for a, b in zip(want, initial, strict=True))
    if moved < 1e-7:
        return failed("the weights did not move", "apply the gradients inside the replica function")
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(after, want, strict=True))
    if diff > 1e-5:
        ratio = moved / want_moved
        hint = "average the per-example losses over the GLOBAL batch: tf.nn.compute_average_loss(..., global_batch_size=...)"
        return failed(
            f"after one step the weights differ from a single-device step on the same {global_batch} examples by "
            f"{diff:.1e}; the update was about {ratio:.2f}x the right size",
            hint,
        )
    if abs(loss - float(want_loss)) > 1e-4:
        return failed(
            f"the step returned {loss:.4f}, but the mean loss of the global batch is {float(want_loss):.4f}",
            "combine the replicas' losses with strategy.reduce(tf.distribute.ReduceOp.SUM, ..., axis=None)",
        )
    return passed(
        "one 2-replica step gave the same weights and loss as one single-device step on the global batch"
    )


@exercise("6.2", "An input pipeline per worker")
def input_pipeline(make_dataset_fn: Callable, *, hidden: bool = False) -> CheckResult:
    """``make_dataset_fn(x, y, global_batch)`` returns a ``dataset_fn(ctx)``: batches and shards must be right.

    Example::

        check.ch06.input_pipeline(make_dataset_fn)
    """
    tf, _, strategy, x, y, _ = _setup()
    global_batch = 64
    ids = np.arange(len(x), dtype=np.int64)
    dataset_fn = make_dataset_fn(x, ids, global_batch)
    dist = strategy.distribute_datasets_from_function(dataset_fn)
    first = next(iter(dist))
    shapes = [tuple(v.shape) for v in strategy.experimental_local_results(first[0])]
    n = strategy.num_replicas_in_sync
    if shapes != [(global_batch // n, 64)] * n:
        return failed(
            f"the replicas got batches of shapes {shapes}, not {n} x ({global_batch // n}, 64)",
            "batch each pipeline with ctx.get_per_replica_batch_size(global_batch)",
        )
    seen = []
    for pipeline in range(2):  # two workers, one replica each: what each would read in 20 steps
        ctx = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline, num_replicas_in_sync=2
        )
        ids_read: set[int] = set()
        for _, batch_ids in dataset_fn(ctx).take(20):
            ids_read |= {int(i) for i in batch_ids.numpy().ravel()}
        seen.append(ids_read)
    if seen[0] & seen[1]:
        return failed(
            f"pipelines 0 and 1 (two workers) read {len(seen[0] & seen[1])} of the same examples in 20 steps",
            "shard the dataset with ctx.num_input_pipelines and ctx.input_pipeline_id",
        )
    return passed("each replica got its per-replica batch, and two pipelines read disjoint shards")
