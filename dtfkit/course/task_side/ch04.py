"""Runs inside the tasks: what ``dtfkit.course.check.ch04`` runs on its clusters (see ``task_side``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import dtfkit
from dtfkit.recipes.tf1.task_side import (
    classifier,
    on_ps,
    peer_barrier,
    session_config,
    task_shard,
    training_session,
    wait_for_chief_init,
    wait_for_peers,
)


def _global_step(tf, start: int):
    """The global step, starting at ``start`` (as if training had been restored from a checkpoint)."""
    keys = tf.compat.v1.GraphKeys
    return tf.compat.v1.get_variable(
        "global_step",
        [],
        tf.int64,
        initializer=tf.compat.v1.constant_initializer(start),
        trainable=False,
        collections=[keys.GLOBAL_VARIABLES, keys.GLOBAL_STEP],
    )


def _train(
    *,
    run_name: str,
    last_step: int,
    start_step: int = 0,
    nan_from: int | None = None,
    make_hooks: Callable | None = None,
    options: dict[str, Any] | None = None,
    pause_at: int | None = None,
    resume_file: str = "",
) -> dict[str, Any]:
    """Run in a worker: async training with the learner's hooks or session options.

    ``start_step``: the global step's initial value. ``nan_from``: from the first step that reads
    a global step at or past it, this worker's loss is NaN (a NaN added to it). ``pause_at``
    (the chief only): in the middle of the step whose update takes the global step to it, after
    the update reached the ps and before any later hook of that step runs (the checkpoint saver
    among them), report ``paused`` and wait for ``resume_file`` (the check kills the parameter
    server meanwhile): the worst moment for a crash.
    """
    import tensorflow as tf

    ctx = dtfkit.this_task()
    x, y, rng = task_shard(ctx)
    tf.get_logger().setLevel("ERROR")
    with tf.Graph().as_default(), tf.compat.v1.variable_scope(run_name):
        with on_ps(tf, ctx):
            images, labels, _, loss = classifier(tf, 32)
            # Fed NaN from `nan_from` on: the loss the hooks watch turns NaN (the model stays finite).
            poison = tf.compat.v1.placeholder_with_default(tf.constant(0.0), [])
            loss = loss + poison
            global_step = _global_step(tf, start_step)
            train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
                loss, global_step=global_step
            )
            barrier = peer_barrier(tf)
        with tf.control_dependencies([train_op]):
            step_after = tf.identity(global_step)  # the global step once this step's update is in
        if make_hooks is not None:
            hooks = list(make_hooks(tf, last_step, loss))
        else:
            hooks = [tf.compat.v1.train.StopAtStepHook(last_step=last_step)]
        sessions: list[int] = []

        class SessionSteps(tf.compat.v1.train.SessionRunHook):
            def after_create_session(self, session, coord):  # again after every recovery
                sessions.append(int(session.run(global_step)))

        class PauseMidStep(tf.compat.v1.train.SessionRunHook):
            """A chief-only hook: MonitoredTrainingSession runs the chief-only hooks first, before
            the CheckpointSaverHook it makes from ``save_checkpoint_steps`` (monitored_session.py),
            so this ``after_run`` holds the step after its update and before any save."""

            def __init__(self, at: int):
                self.at: int | None = at

            def before_run(self, run_context):
                return tf.compat.v1.train.SessionRunArgs(step_after) if self.at is not None else None

            def after_run(self, run_context, run_values):
                if self.at is not None and int(run_values.results) >= self.at:
                    self.at = None
                    dtfkit.report(step=int(run_values.results), paused=int(run_values.results))
                    _wait_for_file(resume_file, timeout=120.0)

        config = session_config(tf, ctx)
        if not ctx.is_chief:
            wait_for_chief_init(tf, ctx.target, config)
        local, step, nan_fed, nan_stop = 0, start_step, None, False
        options = {"stop_grace_period_secs": 1, **(options or {})}
        if pause_at is not None:
            options["chief_only_hooks"] = [PauseMidStep(pause_at), *options.get("chief_only_hooks", [])]
        # TensorFlow sometimes reports a restarted ps as CANCELLED, which MonitoredSession does not
        # recover from (only ABORTED and UNAVAILABLE): the crash run then opens a new session, as a
        # restarted worker would, and the chief restores the newest checkpoint all the same.
        attempts = 3 if pause_at is not None else 1
        try:
            for attempt in range(attempts):
                try:
                    with training_session(
                        tf, ctx, hooks=[*hooks, SessionSteps()], config=config, **options
                    ) as sess:
                        while not sess.should_stop() and local < 10 * last_step:
                            idx = rng.integers(0, len(x), 32)
                            feed: dict[Any, object] = {images: x[idx], labels: y[idx]}  # placeholder: value
                            if nan_from is not None and step >= nan_from:
                                feed[poison] = float("nan")
                                nan_fed = step if nan_fed is None else nan_fed
                            step = int(sess.run(step_after, feed))
                            local += 1
                            if local == 1 and ctx.num_workers > 1:
                                # An asynchronous chief can make every step before the other worker's session
                                # is even up on a busy machine: the barrier makes "both workers trained" hold
                                # whatever the load. Not strict: a worker whose hooks stopped it early never
                                # arrives, and the others go on after the timeout.
                                wait_for_peers(
                                    tf,
                                    ctx.target,
                                    config,
                                    barrier,
                                    ctx.num_workers,
                                    timeout=60.0,
                                    strict=False,
                                )
                    break
                except tf.errors.CancelledError:
                    if attempt == attempts - 1:
                        raise
        except tf.compat.v1.train.NanLossDuringTrainingError:
            nan_stop = True
        with tf.compat.v1.Session(ctx.target, config=config) as plain:
            final = int(plain.run(global_step))
    return {
        "local_steps": local,
        "final_step": final,
        "sessions": sessions,
        "nan_fed": nan_fed,
        "nan_stop": nan_stop,
    }


def _wait_for_file(path: str, timeout: float) -> None:
    """Block until ``path`` exists (the check's signal), at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the check never signalled {path} within {timeout:g} s")
        time.sleep(0.02)
