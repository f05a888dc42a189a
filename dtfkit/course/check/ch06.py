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


def _max_diff(a, b) -> float:
    return max(float(np.max(np.abs(p - q))) for p, q in zip(a, b, strict=True))


def _one_step(make_step, strategy, build, x, y, global_batch: int, offset: int) -> CheckResult | None:
    """One step of the answer on ``strategy`` against one single-device step; None when they agree."""
    import keras
    import tensorflow as tf

    n = strategy.num_replicas_in_sync
    xb, yb = x[offset : offset + global_batch], y[offset : offset + global_batch]
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

    setting = f"{n} replica(s), global batch {global_batch}"
    moved, want_moved = _max_diff(after, initial), _max_diff(want, initial)
    if moved < 1e-7:
        return failed(f"with {setting} the weights did not move", "the step must also apply the gradients")
    diff = _max_diff(after, want)
    if diff > 1e-5:
        return failed(
            f"with {setting}, after one step the weights differ from a single-device step on the same "
            f"{global_batch} examples by {diff:.1e}; the update was about {moved / want_moved:.2f}x the right size",
            "the replicas' gradients are summed (section 2): what must each replica divide its summed "
            "per-example loss by so that the sum is the mean over the whole batch? The check also "
            "uses other batch sizes and replica counts than the chapter's",
        )
    if abs(loss - float(want_loss)) > 1e-4:
        return failed(
            f"with {setting} the step returned {loss:.4f}, but the mean loss of the global batch is "
            f"{float(want_loss):.4f}",
            "each replica returns its part of the global batch's mean loss: how do those parts "
            "combine into one number?",
        )
    return None


@exercise("6.1", "Write the distributed step")
def distributed_step(make_step: Callable, *, hidden: bool = False) -> CheckResult:
    """One step of ``make_step(strategy, model, optimizer, global_batch)`` must equal one single-device
    step: on 2 replicas with global batches of 64 and 40 (and, hidden, on 1 replica with 24).

    Example::

        check.ch06.distributed_step(make_step)
    """
    tf, _, strategy, x, y, build = _setup()
    cases = [(strategy, 64), (strategy, 40)]
    if hidden:
        cases.append((tf.distribute.OneDeviceStrategy(strategy.extended.worker_devices[0]), 24))
    for i, (s, global_batch) in enumerate(cases):
        problem = _one_step(make_step, s, build, x, y, global_batch, offset=100 * i)
        if problem is not None:
            return problem
    return passed(
        "each distributed step gave the same weights and loss as one single-device step on the global "
        f"batch, for {len(cases)} replica/batch combinations"
    )


def _pipeline_problem(dataset_fn, tf, pipelines: int, global_batch: int, steps: int = 20) -> str | None:
    """Run ``dataset_fn`` as ``pipelines`` workers' pipelines (one replica each): what is wrong, or None."""
    seen = []
    want = global_batch // pipelines
    for pipeline in range(pipelines):
        ctx = tf.distribute.InputContext(
            num_input_pipelines=pipelines, input_pipeline_id=pipeline, num_replicas_in_sync=pipelines
        )
        ids_read: set[int] = set()
        for _, batch_ids in dataset_fn(ctx).take(steps):
            size = int(batch_ids.shape[0])
            if size != want:
                return (
                    f"as pipeline {pipeline} of {pipelines} (one replica each, global batch {global_batch}) it "
                    f"gave a batch of {size}, not {want}"
                )
            ids_read |= {int(i) for i in batch_ids.numpy().ravel()}
        seen.append(ids_read)
    for a in range(pipelines):
        for b in range(a + 1, pipelines):
            if seen[a] & seen[b]:
                return (
                    f"pipelines {a} and {b} of {pipelines} read {len(seen[a] & seen[b])} of the same examples "
                    f"in {steps} steps"
                )
    return None


@exercise("6.2", "An input pipeline per worker")
def input_pipeline(make_dataset_fn: Callable, *, hidden: bool = False) -> CheckResult:
    """``make_dataset_fn(x, y, global_batch)`` returns a ``dataset_fn(ctx)``: batches and shards must be
    right under the 2-replica strategy (global batches 64 and 48) and as the pipelines of 2 and 3
    workers (and, hidden, 4).

    Example::

        check.ch06.input_pipeline(make_dataset_fn)
    """
    tf, _, strategy, x, y, _ = _setup()
    ids = np.arange(len(x), dtype=np.int64)
    n = strategy.num_replicas_in_sync
    for global_batch in (64, 48):
        dataset_fn = make_dataset_fn(x, ids, global_batch)
        dist = strategy.distribute_datasets_from_function(dataset_fn)
        first = next(iter(dist))
        shapes = [tuple(v.shape) for v in strategy.experimental_local_results(first[0])]
        if shapes != [(global_batch // n, 64)] * n:
            return failed(
                f"with global batch {global_batch} the {n} replicas got batches of shapes {shapes}, "
                f"not {n} x ({global_batch // n}, 64)",
                "distribute_datasets_from_function does not split your batches: each pipeline must "
                "batch what one replica takes in a step, for any global batch and replica count",
            )
    for pipelines, global_batch in [(2, 64), (3, 48)] + ([(4, 64)] if hidden else []):
        problem = _pipeline_problem(make_dataset_fn(x, ids, global_batch), tf, pipelines, global_batch)
        if problem:
            return failed(
                problem,
                "with one pipeline per worker, each pipeline must read its own part of the data, and "
                "the ctx says how many pipelines there are and which one this is (section 1)",
            )
    return passed(
        "each replica got its per-replica batch, and the pipelines of 2 and 3 workers read disjoint shards"
    )
