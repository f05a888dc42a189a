"""Checks for chapter 5 (Keras with MirroredStrategy), run in the notebook's kernel.

They import TensorFlow (chapter 5 does already) and need ``dtfkit.course.devices.ensure_replicas(2)``
to have run first.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from dtfkit.course import classroom
from dtfkit.course.check._core import CheckResult, exercise, failed, passed
from dtfkit.i18n import _


def _strategies():
    """A 2-replica ``MirroredStrategy``, a 1-replica one (over the second device) and a ``OneDeviceStrategy``."""
    import tensorflow as tf

    import dtfkit.course.devices

    devices = dtfkit.course.devices.ensure_replicas(2)[:2]
    mirrored = tf.distribute.MirroredStrategy
    return mirrored(devices), mirrored(devices[1:]), tf.distribute.OneDeviceStrategy(devices[0])


class _StandInStrategy:
    """What an answer to 5.1 may read of a strategy with more replicas than this kernel has devices.

    ``ensure_replicas(2)`` fixed this kernel's devices at two, so a real 4-replica strategy cannot
    be built here; the rule only needs the replica count (``num_replicas_in_sync``, and the replica
    devices for an answer that counts them).
    """

    def __init__(self, replicas: int):
        self.num_replicas_in_sync = replicas
        devices = tuple(f"/device:CPU:{i}" for i in range(replicas))
        self.extended = SimpleNamespace(worker_devices=devices, parameter_devices=devices)

    def __repr__(self) -> str:
        return _("<a stand-in for a {num_replicas_in_sync}-replica strategy>").format(
            num_replicas_in_sync=self.num_replicas_in_sync
        )


def _describe_strategy(strategy) -> str:
    n = strategy.num_replicas_in_sync
    if isinstance(strategy, _StandInStrategy):
        return _("a {n}-replica strategy (a stand-in object: this kernel has only 2 devices)").format(n=n)
    return _("{__name__} ({n} replica(s))").format(__name__=type(strategy).__name__, n=n)


def _fit(strategy, model_fn, batch: int, lr: float | None = None) -> float:
    """Train for real under ``strategy``; returns the training loss of the last epoch."""
    import keras

    from dtfkit.datasets import load_digits

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


def _mirrored_by(v: Any, strategy: Any) -> bool:
    """True when ``v`` (a Keras or TF variable) is a distributed variable of ``strategy`` with one
    copy per replica: what TensorFlow makes of every variable created in ``strategy.scope()``."""
    inner = getattr(v, "value", v)
    owner: Any = getattr(inner, "distribute_strategy", None)  # a TensorFlow strategy, or None
    return owner is strategy and len(getattr(inner, "values", ())) == strategy.num_replicas_in_sync


def _describe(v) -> str:
    inner = getattr(v, "value", v)
    return f"{getattr(v, 'path', getattr(v, 'name', '?'))} ({type(inner).__name__})"


@exercise("5.1", "The linear scaling rule")
def scaling_rule(training_setup: Callable, *, hidden: bool = False) -> CheckResult:
    """Ask ``training_setup(strategy, per_replica_batch, base_lr)`` for the global batch and rate,
    with strategies of 1, 2 and 4 replicas (8 when ``hidden``) and several sizes (pure arithmetic
    first), then train with the 2-replica answer. A 1-replica ``MirroredStrategy`` and a stand-in
    for 4 replicas (this kernel has two devices) make an answer keyed on the strategy's class
    fail: only one that reads the strategy's replica count passes.

    Example::

        check.ch05.scaling_rule(training_setup)
    """
    # 2 replicas, then 1 replica of the same class (a MirroredStrategy over one of the devices),
    # 4 replicas (a stand-in) and 1 of another class: only the replica count decides.
    mirrored, mirrored_one, one = _strategies()
    cases = [
        (mirrored, 32, 0.05),
        (mirrored_one, 24, 0.02),
        (_StandInStrategy(4), 16, 0.01),
        (one, 48, 0.03),
    ]
    if hidden:
        rng = random.Random()  # a case drawn fresh every run: no list of cases to copy answers from
        drawn = (
            _StandInStrategy(rng.randint(3, 16)),
            rng.randrange(4, 129, 4),
            rng.choice([0.001, 0.01, 0.02, 0.1]),
        )
        cases += [(one, 32, 0.05), (mirrored, 16, 0.1), (_StandInStrategy(8), 8, 0.025), drawn]
    for strategy, per_replica, base in cases:
        got = training_setup(strategy, per_replica_batch=per_replica, base_lr=base)
        where = f"{_describe_strategy(strategy)}, per_replica_batch={per_replica}, base_lr={base:g}"
        if not isinstance(got, dict) or not {"global_batch", "learning_rate"} <= set(got):
            return failed(
                _("training_setup returned {got!r:.100} for {where}").format(got=got, where=where),
                _("return {'global_batch': ..., 'learning_rate': ...}"),
            )
        n = strategy.num_replicas_in_sync
        batch, lr = int(got["global_batch"]), float(got["learning_rate"])
        if batch != per_replica * n:
            return failed(
                _(
                    "global batch {batch} for {where}: each replica would get {batch_n:g} examples per step, not {per_replica}"
                ).format(batch=batch, where=where, batch_n=batch / n, per_replica=per_replica),
                _(
                    "model.fit splits the batch it is given across the replicas (section 3); the check passes strategies with 1, 2 and 4 replicas, of the same class or not: ask the strategy it is given how many replicas it runs"
                ),
            )
        if abs(lr - base * n) > 1e-9 * max(1.0, base * n):
            return failed(
                _("learning rate {lr:g} for {where}").format(lr=lr, where=where),
                _("section 3's rule ties the rate to how much larger the global batch is than one replica's"),
            )
    got = training_setup(mirrored, per_replica_batch=32, base_lr=0.05)
    batch, lr = int(got["global_batch"]), float(got["learning_rate"])
    loss = _fit(mirrored, _mlp, batch, lr)
    if loss != loss:  # NaN
        return failed(
            _("training with that batch and rate diverged (loss is NaN)"), _("is the rate far too large?")
        )
    return passed(
        _(
            "global batch and learning rate scaled right for {len_cases} strategy/size combinations, and the model trained with batch {batch} and rate {lr:g} on 2 replicas"
        ).format(len_cases=len(cases), batch=batch, lr=lr)
    )


@exercise("5.2", "Build the model in the scope")
def model_in_scope(build_and_compile: Callable, *, hidden: bool = False) -> CheckResult:
    """Call ``build_and_compile(strategy)`` for a 2-replica and a 1-replica ``MirroredStrategy``:
    every weight, the optimizer's step counter and its momentum slots must be mirrored by that
    strategy; then the 2-replica model trains with ``model.fit``.

    What is graded is what TensorFlow guarantees: a variable created in ``strategy.scope()`` is a
    distributed variable of that strategy, with one copy per replica. A Keras 3 optimizer creates
    its step counter when it is constructed and its slots (SGD's momentum, Adam's moments) from the
    same strategy when it is built: constructed outside the scope, its counter is an ordinary
    variable and its slots cannot be built under the strategy at all.

    Example::

        check.ch05.model_in_scope(build_and_compile)
    """
    mirrored, mirrored_one, _one = _strategies()
    cases = [mirrored, mirrored_one]
    models = []
    for strategy in cases:
        n = strategy.num_replicas_in_sync
        label = _("a {n}-replica MirroredStrategy").format(n=n)
        model = build_and_compile(strategy)
        if model is None or not hasattr(model, "trainable_variables"):
            return failed(
                _("build_and_compile returned {model!r:.80} for {label}").format(model=model, label=label),
                _("return the compiled Keras model"),
            )
        stray = [v for v in model.trainable_variables if not _mirrored_by(v, strategy)]
        if stray:
            return failed(
                _(
                    "with {label}, the weight {describe_stray_0} is not mirrored by the strategy you were given"
                ).format(label=label, describe_stray_0=_describe(stray[0])),
                _(
                    "a variable is mirrored only when it is created while that strategy is in charge (section 2); the check passes other strategies than the chapter's"
                ),
            )
        optimizer = getattr(model, "optimizer", None)
        if optimizer is None:
            return failed(
                _("with {label}, the model was not compiled").format(label=label),
                _("compile it before returning it"),
            )
        if not _mirrored_by(optimizer.iterations, strategy):
            return failed(
                _(
                    "with {label}, the optimizer's step counter {iterations} is not mirrored: the optimizer was created outside the strategy"
                ).format(label=label, iterations=_describe(optimizer.iterations)),
                _(
                    "an optimizer makes its variables, the momentum slots included, for the strategy that is in charge when the optimizer object is created"
                ),
            )
        if not optimizer.built:
            with strategy.scope():
                optimizer.build(model.trainable_variables)  # what model.fit does first
        slots = [v for v in optimizer.variables if "momentum" in v.path or "velocity" in v.path]
        if len(slots) < len(model.trainable_variables):
            return failed(
                _(
                    "with {label}, the optimizer keeps {len_slots} slot variable(s) for {trainable_count} weights"
                ).format(
                    label=label,
                    len_slots=len(slots),
                    trainable_count=len(model.trainable_variables),
                ),
                _("the exercise asks for SGD with momentum: it keeps one momentum slot per weight"),
            )
        stray = [v for v in optimizer.variables if not _mirrored_by(v, strategy)]
        if stray:
            return failed(
                _("with {label}, the optimizer variable {describe_stray_0} is not mirrored").format(
                    label=label, describe_stray_0=_describe(stray[0])
                ),
                _("every optimizer variable must be created under the strategy you were given"),
            )
        models.append(model)
    n = mirrored.num_replicas_in_sync
    loss = _fit(mirrored, lambda: models[0], 32 * n)
    if loss != loss:
        return failed(_("training the model gave a NaN loss"), _("check the learning rate you compiled with"))
    return passed(
        _(
            "with 2 replicas and with 1, every weight, the step counter and each momentum slot were mirrored by the strategy given, and model.fit trained the {n}-replica model"
        ).format(n=n)
    )
