"""Runs inside the tasks: one way to train under one ``tf.distribute`` strategy, a few steps
(``train``), the strategy built the way its tutorial builds it.

TensorFlow only inside functions: the kernel imports this module to name what it sends.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from dtfkit.i18n import _

STRATEGIES = (
    "MirroredStrategy",
    "MultiWorkerMirroredStrategy",
    "ParameterServerStrategy",
    "CentralStorageStrategy",
    "OneDeviceStrategy",
)
TRAINERS = ("keras3_fit", "keras3_custom_loop", "tf_keras_fit", "tf_only_loop")
FEATURES = 8
LOCAL_REPLICAS = 2  # Mirrored and CentralStorage split this process's CPU in two logical devices


class NotInstalled(ImportError):
    """The package a trainer needs is not installed in the tasks (``tf_keras``)."""


def _data(seed: int, examples: int = 512) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(examples, FEATURES)).astype("float32")
    w = rng.normal(size=(FEATURES, 1)).astype("float32")
    return x, (x @ w + 0.5).astype("float32")


def _two_cpus(tf) -> list[str]:
    """Split the CPU in ``LOCAL_REPLICAS`` logical devices (before anything initialises TensorFlow)."""
    (cpu,) = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _replica in range(LOCAL_REPLICAS)]
    )
    return [f"/cpu:{i}" for i in range(LOCAL_REPLICAS)]


def _make_strategy(tf, name: str):
    if name == "OneDeviceStrategy":
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    if name == "MirroredStrategy":
        return tf.distribute.MirroredStrategy(_two_cpus(tf))
    if name == "CentralStorageStrategy":
        return tf.distribute.experimental.CentralStorageStrategy(_two_cpus(tf), parameter_device="/cpu:0")
    if name == "MultiWorkerMirroredStrategy":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "ParameterServerStrategy":
        from dtfkit.recipes.strategies_multi.task_side import coordinator_resolver

        return tf.distribute.ParameterServerStrategy(coordinator_resolver())
    raise ValueError(f"unknown strategy {name!r}: one of {', '.join(STRATEGIES)}")


def _keras(trainer: str):
    if trainer == "tf_keras_fit":
        try:
            import tf_keras
        except ImportError as error:
            raise NotInstalled(
                _(
                    "tf_keras is not installed in the tasks (pip install tf-keras: it needs the `tensorflow` package)"
                )
            ) from error
        return tf_keras
    import keras

    return keras


def train(
    strategy: str, trainer: str, *, steps: int = 40, global_batch: int = 16, seed: int = 0
) -> dict[str, Any]:
    """Train a linear model for ``steps`` steps of ``global_batch`` examples under ``strategy`` the
    way ``trainer`` names (one of ``TRAINERS``); run it where the strategy runs its loop: every
    worker for ``MultiWorkerMirroredStrategy``, the chief for ``ParameterServerStrategy``, the one
    task otherwise.

    Returns ``steps_run`` (counted by a ``tf.Variable.assign_add`` in every step, on the strategy's
    variable device: one op, no lost update), ``iterations`` (the optimizer's own step counter;
    ``None`` for the TF-only loop), ``loss_before`` and ``loss_after`` (the mean squared error on
    all the data, from the weights), ``replicas``, ``variable_device``, ``task`` and ``versions``.
    Any error propagates as TensorFlow or Keras raised it.

    Example::

        cluster.run(train, args=("ParameterServerStrategy", "keras3_custom_loop"), on="chief")
    """
    if trainer not in TRAINERS:
        raise ValueError(f"unknown trainer {trainer!r}: one of {', '.join(TRAINERS)}")
    if trainer == "tf_keras_fit":
        _keras(trainer)  # before TensorFlow builds anything: a missing package is said first
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    made = _make_strategy(tf, strategy)
    x, y = _data(seed)
    coordinator = (
        tf.distribute.coordinator.ClusterCoordinator(made) if strategy == "ParameterServerStrategy" else None
    )
    with made.scope():
        steps_run = tf.Variable(
            0,
            dtype=tf.int64,
            trainable=False,
            name="steps_run",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
    if trainer.endswith("_fit"):
        result = _fit(tf, _keras(trainer), made, x, y, steps, global_batch, steps_run)
    else:
        keras_model = trainer == "keras3_custom_loop"
        result = _custom_loop(
            tf, made, coordinator, x, y, steps, global_batch, steps_run, keras_model=keras_model
        )
    result.update(
        steps_run=int(steps_run.numpy()),
        replicas=int(made.num_replicas_in_sync),
        task=json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}),
        loss_before=_mse(x, y, result.pop("weights_before")),
        loss_after=_mse(x, y, result.pop("weights_after")),
        versions={"tensorflow": tf.__version__, "keras": keras.__version__},
    )
    return result


def _mse(x: np.ndarray, y: np.ndarray, weights: list[np.ndarray]) -> float:
    """The model's mean squared error on all the data, computed here from its weights (one rule for
    every trainer, whatever loss it reports)."""
    kernel, bias = weights
    return float(np.mean((x @ kernel + bias - y) ** 2))


def _device(variable) -> str:
    """Where a variable lives (a Keras 3 variable wraps the ``tf.Variable``)."""
    inner = getattr(variable, "value", variable)
    return str(getattr(variable if callable(inner) else inner, "device", ""))


def _fit(tf, keras, strategy, x, y, steps, global_batch, steps_run) -> dict[str, Any]:
    def counted_mse(labels, predictions):
        # Inside the train step, where the step runs (a batch-level callback would run in the
        # coordinator, and tf_keras refuses those under ParameterServerStrategy).
        steps_run.assign_add(1)
        return tf.reduce_mean(tf.square(predictions - labels), axis=-1)

    with strategy.scope():
        model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss=counted_mse)
    before = [np.asarray(w) for w in model.get_weights()]
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch)
    model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False)
    return {
        "iterations": int(model.optimizer.iterations.numpy()),
        "variable_device": _device(model.trainable_variables[0]),
        "weights_before": before,
        "weights_after": [np.asarray(w) for w in model.get_weights()],
    }


def _custom_loop(
    tf, strategy, coordinator, x, y, steps, global_batch, steps_run, *, keras_model
) -> dict[str, Any]:
    with strategy.scope():
        if keras_model:
            import keras

            model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(1)])
            optimizer = keras.optimizers.SGD(0.05)
            weights = model.trainable_variables
        else:
            # SUM: each replica's gradient is of its share of the global-batch mean (compute_average_loss),
            # so a mirrored variable applies the sum of the replicas' updates.
            total = tf.VariableAggregation.SUM
            weights = [
                tf.Variable(tf.zeros((FEATURES, 1)), aggregation=total, name="w"),
                tf.Variable(tf.zeros((1,)), aggregation=total, name="b"),
            ]

    def values() -> list[np.ndarray]:
        return [np.asarray(w.numpy()) for w in weights]

    before = values()

    def dataset_fn(input_context=None):
        batch = input_context.get_per_replica_batch_size(global_batch) if input_context else global_batch
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
        if input_context and input_context.num_input_pipelines > 1:
            dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return dataset.batch(batch)

    def replica_step(features, labels):
        with tf.GradientTape() as tape:
            if keras_model:
                predictions = model(features, training=True)
            else:
                predictions = features @ weights[0] + weights[1]
            per_example = tf.reduce_mean(tf.square(predictions - labels), axis=-1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, weights)
        if keras_model:
            optimizer.apply_gradients(zip(grads, weights))  # noqa: B905 - autograph zip
        else:
            for weight, grad in zip(weights, grads):  # noqa: B905 - autograph zip
                weight.assign_sub(0.05 * grad)
        steps_run.assign_add(1)
        return loss

    @tf.function
    def train_step(iterator):
        features, labels = next(iterator)
        per_replica = strategy.run(replica_step, args=(features, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    if coordinator is not None:
        iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
        remote = [coordinator.schedule(train_step, args=(iterator,)) for _step in range(steps)]
        coordinator.join()
        for value in remote:
            value.fetch()  # a step that failed raises here
    else:
        iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
        for _step in range(steps):
            train_step(iterator)
    return {
        "iterations": int(optimizer.iterations.numpy()) if keras_model else None,
        "variable_device": _device(weights[0]),
        "weights_before": before,
        "weights_after": values(),
    }
