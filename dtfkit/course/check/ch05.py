"""Checks for chapter 5 (Keras with MirroredStrategy), run in the notebook's kernel.

They import TensorFlow (chapter 5 does already) and need ``dtfkit.course.devices.ensure_replicas(2)``
to have run first.

Example::

    from dtfkit.course import check
    check.ch05.scaling_rule(training_setup)
    check.ch05.model_in_scope(build_and_compile)
"""

from __future__ import annotations

from collections.abc import Callable

from dtfkit.course import classroom
from dtfkit.course.check._core import CheckResult, exercise, failed, passed


def _strategies():
    import tensorflow as tf

    import dtfkit.course.devices

    devices = dtfkit.course.devices.ensure_replicas(2)[:2]
    return tf.distribute.MirroredStrategy(devices), tf.distribute.OneDeviceStrategy(devices[0])


def _fit(strategy, model_fn, batch: int, lr: float | None = None) -> float:
    """Train for real under ``strategy``; returns the training loss of the last epoch."""
    import keras

    from dtfkit.course.datasets import load_digits

    x, y = load_digits(split="train")
    n = 512 if classroom.enabled() else len(x)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = model_fn()
        if lr is not None:
            model.compile(
                optimizer=keras.optimizers.SGD(lr, momentum=0.9),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
    history = model.fit(x[:n], y[:n], batch_size=batch, epochs=1, verbose=0)
    return float(history.history["loss"][-1])


def _mlp():
    import keras

    return keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)]
    )


@exercise("5.1", "The linear scaling rule")
def scaling_rule(training_setup: Callable, *, hidden: bool = False) -> CheckResult:
    """Ask ``training_setup(strategy, per_replica_batch=32, base_lr=0.05)`` for the global batch and rate.

    Example::

        check.ch05.scaling_rule(training_setup)
    """
    mirrored, one = _strategies()
    cases = [(mirrored, 32, 0.05)] + ([(one, 32, 0.05), (mirrored, 16, 0.1)] if hidden else [])
    for strategy, per_replica, base in cases:
        got = training_setup(strategy, per_replica_batch=per_replica, base_lr=base)
        if not isinstance(got, dict) or not {"global_batch", "learning_rate"} <= set(got):
            return failed(
                f"training_setup returned {got!r}", "return {'global_batch': ..., 'learning_rate': ...}"
            )
        n = strategy.num_replicas_in_sync
        batch, lr = int(got["global_batch"]), float(got["learning_rate"])
        if batch != per_replica * n:
            return failed(
                f"global batch {batch} with {n} replica(s): each replica would get {batch / n:g} examples, not "
                f"{per_replica}",
                "multiply the per-replica batch by strategy.num_replicas_in_sync",
            )
        if abs(lr - base * n) > 1e-9:
            return failed(
                f"learning rate {lr:g} for a global batch {n}x the single-replica one (base rate {base:g})",
                "the linear scaling rule multiplies the base rate by the number of replicas",
            )
    loss = _fit(mirrored, _mlp, batch, lr)
    if loss != loss:  # NaN
        return failed(
            "training with that batch and rate diverged (loss is NaN)", "is the rate far too large?"
        )
    return passed(
        "global batch and learning rate both scale with the 2 replicas, and the model trained with them"
    )


@exercise("5.2", "Build the model in the scope")
def model_in_scope(build_and_compile: Callable, *, hidden: bool = False) -> CheckResult:
    """Call ``build_and_compile(strategy)``; its variables must be mirrored on every replica, then train it.

    Example::

        check.ch05.model_in_scope(build_and_compile)
    """
    mirrored, _ = _strategies()
    model = build_and_compile(mirrored)
    if model is None or not hasattr(model, "trainable_variables"):
        return failed(f"build_and_compile returned {model!r}", "return the compiled Keras model")
    n = mirrored.num_replicas_in_sync
    for v in model.trainable_variables:
        inner = getattr(v, "value", v)
        copies = len(getattr(inner, "values", ()))
        if copies != n:
            return failed(
                f"{v.path} is a {type(inner).__name__} with {copies or 1} copy, not a MirroredVariable with {n}",
                "create the model inside `with strategy.scope():`",
            )
    if getattr(model, "optimizer", None) is None:
        return failed("the model was not compiled", "call model.compile(...) inside the scope too")
    opt_vars = [getattr(v, "value", v) for v in model.optimizer.variables]
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
        opt_vars = [getattr(v, "value", v) for v in model.optimizer.variables]
    stray = [type(v).__name__ for v in opt_vars if len(getattr(v, "values", ())) not in (0, n)]
    if stray:
        return failed("the optimizer's variables are not mirrored", "compile inside the scope")
    loss = _fit(mirrored, lambda: model, 32 * n)
    if loss != loss:
        return failed("training the model gave a NaN loss", "check the learning rate you compiled with")
    return passed(f"every variable is mirrored on the {n} replicas and model.fit trained the model")
