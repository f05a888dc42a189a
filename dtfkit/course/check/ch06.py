"""Checks for chapter 6 (custom training loops), run in the notebook's kernel."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

from dtfkit.course.check._core import CheckResult, Rng, exercise, failed, passed
from dtfkit.i18n import _


def _setup():
    import keras
    import tensorflow as tf

    import dtfkit.course.devices
    from dtfkit.datasets import load_digits

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

    setting = _("{n} replica(s), global batch {global_batch}").format(n=n, global_batch=global_batch)
    moved, want_moved = _max_diff(after, initial), _max_diff(want, initial)
    if moved < 1e-7:
        return failed(
            _("with {setting} the weights did not move").format(setting=setting),
            _("the step must also apply the gradients"),
        )
    diff = _max_diff(after, want)
    if diff > 1e-5:
        return failed(
            _(
                "with {setting}, after one step the weights differ from a single-device step on the same {global_batch} examples by {diff:.1e}; the update was about {moved_want_moved:.2f}x the right size"
            ).format(
                setting=setting, global_batch=global_batch, diff=diff, moved_want_moved=moved / want_moved
            ),
            _(
                "the replicas' gradients are summed (section 2): what must each replica divide its summed per-example loss by so that the sum is the mean over the whole batch? The check also uses other batch sizes and replica counts than the chapter's"
            ),
        )
    if abs(loss - float(want_loss)) > 1e-4:
        return failed(
            _(
                "with {setting} the step returned {loss:.4f}, but the mean loss of the global batch is {float_want_loss:.4f}"
            ).format(setting=setting, loss=loss, float_want_loss=float(want_loss)),
            _(
                "each replica returns its part of the global batch's mean loss: how do those parts combine into one number?"
            ),
        )
    return None


def hidden_step_batches(rng: random.Random | None = None) -> tuple[int, int]:
    """6.1's hidden global batches, drawn from ``rng`` (by default seeded fresh every run): one for
    1 replica (16 to 64) and an even one for 2 replicas (16 to 64).

    Valid for every draw: a right step divides each replica's summed loss by the global batch,
    so the replicas' summed gradients are the gradient of the whole batch's mean loss, the single-
    device step's, for any batch; an even batch splits into equal halves on 2 replicas, as the
    visible 64 and 40 do. Same sizes as the fixed 24, 40 and 64, so the float32 rounding the 1e-5
    tolerance allows for stays of the same order; 4 cases of at most 64 examples from offsets 0 to
    300 stay inside the 1,438 training examples.

    >>> hidden_step_batches(random.Random(1)) == hidden_step_batches(random.Random(1))
    True
    """
    rng = rng if rng is not None else random.Random()
    return rng.randint(16, 64), 2 * rng.randint(8, 32)


@exercise("6.1", "Write the distributed step")
def distributed_step(make_step: Callable, *, hidden: bool = False, rng: Rng = None) -> CheckResult:
    """One step of ``make_step(strategy, model, optimizer, global_batch)`` must equal one single-device
    step: on 2 replicas with global batches of 64 and 40 (and, hidden, on 1 replica and on 2 with
    global batches drawn fresh: ``hidden_step_batches``; ``rng`` for tests).

    Example::

        check.ch06.distributed_step(make_step)
    """
    tf, _keras, strategy, x, y, build = _setup()
    cases = [(strategy, 64), (strategy, 40)]
    if hidden:
        one, two = hidden_step_batches(rng)
        cases.append((tf.distribute.OneDeviceStrategy(strategy.extended.worker_devices[0]), one))
        cases.append((strategy, two))
    for i, (s, global_batch) in enumerate(cases):
        problem = _one_step(make_step, s, build, x, y, global_batch, offset=100 * i)
        if problem is not None:
            return problem
    return passed(
        _(
            "each distributed step gave the same weights and loss as one single-device step on the global batch, for {len_cases} replica/batch combinations"
        ).format(len_cases=len(cases))
    )


PIPELINE_STEPS = 20  # batches each pipeline is read for


def _pipeline_problem(
    dataset_fn, tf, pipelines: int, global_batch: int, steps: int = PIPELINE_STEPS
) -> str | None:
    """Run ``dataset_fn`` as ``pipelines`` workers' pipelines (one replica each): what is wrong, or None."""
    seen = []
    want = global_batch // pipelines
    for pipeline in range(pipelines):
        ctx = tf.distribute.InputContext(
            num_input_pipelines=pipelines, input_pipeline_id=pipeline, num_replicas_in_sync=pipelines
        )
        ids_read: set[int] = set()
        for _step, batch_ids in dataset_fn(ctx).take(steps):
            size = int(batch_ids.shape[0])
            if size != want:
                return _(
                    "as pipeline {pipeline} of {pipelines} (one replica each, global batch {global_batch}) it gave a batch of {size}, not {want}"
                ).format(
                    pipeline=pipeline, pipelines=pipelines, global_batch=global_batch, size=size, want=want
                )
            ids_read |= {int(i) for i in batch_ids.numpy().ravel()}
        seen.append(ids_read)
    for a in range(pipelines):
        for b in range(a + 1, pipelines):
            if seen[a] & seen[b]:
                return _(
                    "pipelines {a} and {b} of {pipelines} read {compared} of the same examples in {steps} steps"
                ).format(a=a, b=b, pipelines=pipelines, compared=len(seen[a] & seen[b]), steps=steps)
    return None


def hidden_pipeline_cases(examples: int, rng: random.Random | None = None) -> tuple[int, tuple[int, int]]:
    """6.2's hidden variants for a data set of ``examples`` rows, drawn from ``rng`` (by default
    seeded fresh every run): an even global batch for the 2-replica strategy (16 to 96), and a
    number of worker pipelines (2 to 5) with a global batch that is a multiple of it (8 or more
    examples per pipeline, at most what a shard holds for 20 batches, and at most 32).

    Valid for every draw: ``ctx.get_per_replica_batch_size`` divides the global batch by the
    replicas, exact for a multiple; sharding by ``input_pipeline_id`` gives disjoint shards for any
    number of pipelines; and no pipeline runs out of its shard within the 20 batches read, so an
    answer that reads its shard once (no ``repeat``) is judged the same on every draw, as on the
    fixed 4 pipelines of 16 it replaces. Only ``tf.data`` in the kernel runs: at most 5 x 20
    batches of at most 32 rows; no process starts.

    >>> hidden_pipeline_cases(1438, random.Random(1)) == hidden_pipeline_cases(1438, random.Random(1))
    True
    """
    rng = rng if rng is not None else random.Random()
    strategy_batch = 2 * rng.randint(8, 48)
    pipelines = rng.randint(2, 5)
    per_pipeline = rng.randint(8, min(32, examples // pipelines // PIPELINE_STEPS))
    return strategy_batch, (pipelines, pipelines * per_pipeline)


@exercise("6.2", "An input pipeline per worker")
def input_pipeline(make_dataset_fn: Callable, *, hidden: bool = False, rng: Rng = None) -> CheckResult:
    """``make_dataset_fn(x, y, global_batch)`` returns a ``dataset_fn(ctx)``: batches and shards must be
    right under the 2-replica strategy (global batches 64 and 48) and as the pipelines of 2 and 3
    workers (and, hidden, another global batch and another number of pipelines, drawn fresh:
    ``hidden_pipeline_cases``; ``rng`` for tests).

    Example::

        check.ch06.input_pipeline(make_dataset_fn)
    """
    tf, _keras, strategy, x, y, _build = _setup()
    ids = np.arange(len(x), dtype=np.int64)
    n = strategy.num_replicas_in_sync
    strategy_batch, pipeline_case = hidden_pipeline_cases(len(x), rng) if hidden else (None, None)
    for global_batch in (64, 48) + ((strategy_batch,) if strategy_batch else ()):
        dataset_fn = make_dataset_fn(x, ids, global_batch)
        dist = strategy.distribute_datasets_from_function(dataset_fn)
        first = next(iter(dist))
        shapes = [tuple(v.shape) for v in strategy.experimental_local_results(first[0])]
        if shapes != [(global_batch // n, 64)] * n:
            return failed(
                _(
                    "with global batch {global_batch} the {n} replicas got batches of shapes {shapes}, not {n} x ({global_batch_n}, 64)"
                ).format(global_batch=global_batch, n=n, shapes=shapes, global_batch_n=global_batch // n),
                _(
                    "distribute_datasets_from_function does not split your batches: each pipeline must batch what one replica takes in a step, for any global batch and replica count"
                ),
            )
    for pipelines, global_batch in [(2, 64), (3, 48)] + ([pipeline_case] if pipeline_case else []):
        problem = _pipeline_problem(make_dataset_fn(x, ids, global_batch), tf, pipelines, global_batch)
        if problem:
            return failed(
                problem,
                _(
                    "with one pipeline per worker, each pipeline must read its own part of the data, and the ctx says how many pipelines there are and which one this is (section 1)"
                ),
            )
    return passed(
        _("each replica got its per-replica batch, and the pipelines of 2 and 3 workers read disjoint shards")
    )
