"""Checks for chapter 4 (MonitoredTrainingSession: hooks, the chief, checkpoints).

Example::

    from dtfkit.course import check
    check.ch04.stop_hooks(make_hooks)
    check.ch04.restore_after_ps_restart(session_options)
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

import dtfkit
from dtfkit.course import classroom
from dtfkit.course.check._core import CheckResult, cluster, exercise, failed, passed
from dtfkit.course.datasets import load_digits, shard
from dtfkit.recipes.tf1 import (
    classifier,
    on_ps,
    peer_barrier,
    session_config,
    training_session,
    wait_for_chief_init,
    wait_for_peers,
)


def _train(
    *, steps: int, make_hooks: Callable | None = None, session_options: Callable | None = None, ckpt: str = ""
) -> dict[str, Any]:
    """Run in a worker: async training with the learner's hooks or session options."""
    import tensorflow as tf

    ctx = dtfkit.this_task()
    x, y = load_digits(split="train")
    x, y = shard(x, y, ctx.task_index, ctx.num_workers)
    rng = np.random.default_rng(ctx.task_index)
    tf.get_logger().setLevel("ERROR")
    with tf.Graph().as_default(), tf.compat.v1.variable_scope("ex4"):
        with on_ps(tf, ctx):
            images, labels, _, loss = classifier(tf, 32)
            global_step = tf.compat.v1.train.get_or_create_global_step()
            train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
                loss, global_step=global_step
            )
            barrier = peer_barrier(tf)
        if make_hooks is not None:
            hooks = list(make_hooks(tf, steps, loss))
        else:
            hooks = [tf.compat.v1.train.StopAtStepHook(last_step=steps)]
        options = dict(session_options(ckpt)) if session_options is not None else {}
        config = session_config(tf, ctx)
        if not ctx.is_chief:
            wait_for_chief_init(tf, ctx.target, config)
        local, first = 0, None
        with training_session(
            tf, ctx, hooks=hooks, config=config, stop_grace_period_secs=1, **options
        ) as sess:
            while not sess.should_stop() and local < 10 * steps:
                idx = rng.integers(0, len(x), 32)
                _, step = sess.run([train_op, global_step], {images: x[idx], labels: y[idx]})
                first = step - 1 if first is None else first
                local += 1
                if local == 1:
                    # An asynchronous chief can make every step before the other worker's session
                    # is even up on a busy machine: the barrier makes "both workers trained" hold
                    # whatever the load. Not strict: a worker whose hooks stopped it before its
                    # first step never arrives, and the others go on after the timeout.
                    wait_for_peers(
                        tf, ctx.target, config, barrier, ctx.num_workers, timeout=60.0, strict=False
                    )
        with tf.compat.v1.Session(ctx.target, config=config) as plain:
            final = int(plain.run(global_step))
    return {
        "local_steps": local,
        "first_step": first,
        "final_step": final,
        "hooks": [type(h).__name__ for h in hooks],
    }


@exercise("4.1", "Stop at a global step")
def stop_hooks(make_hooks: Callable, *, hidden: bool = False) -> CheckResult:
    """Train 2 workers with ``make_hooks(tf, last_step, loss)``; training must end at global step ``last_step``.

    Example::

        check.ch04.stop_hooks(make_hooks)
    """
    steps = classroom.scaled(60, minimum=20)
    with cluster(ps=1, workers=2) as c:
        got = c.run(_train, kwargs={"steps": steps, "make_hooks": make_hooks}, timeout=120)
    final = max(r["final_step"] for r in got.values())
    locals_ = {t: r["local_steps"] for t, r in got.items()}
    if final >= 10 * steps:
        return failed(
            "training never stopped by itself (the check cut it off)",
            "add tf.compat.v1.train.StopAtStepHook to the hooks you return",
        )
    if final >= 2 * steps - 2 and min(locals_.values()) >= steps:
        return failed(
            f"each worker took {steps} steps, so the global step reached {final}, not {steps}",
            "num_steps counts this worker's own steps; last_step counts the shared global step",
        )
    if not steps <= final <= steps + 2:
        return failed(
            f"training ended at global step {final}, not {steps}", "stop at last_step, the shared global step"
        )
    if min(locals_.values()) == 0:
        idle = min(locals_, key=locals_.get)
        return failed(f"{idle} never trained", "both workers should share the steps")
    return passed(f"both workers trained and stopped together at global step {steps}")


@exercise("4.2", "Restore after a ps restart")
def restore_after_ps_restart(session_options: Callable, *, hidden: bool = False) -> CheckResult:
    """Train with ``session_options(checkpoint_dir)``, kill and restart ps:0, train again: it must resume.

    Example::

        check.ch04.restore_after_ps_restart(session_options)
    """
    steps = classroom.scaled(40, minimum=20)
    ckpt = tempfile.mkdtemp(prefix="dtfkit-ex42-")
    try:
        with cluster(ps=1, workers=1) as c:
            kw = {"session_options": session_options, "ckpt": ckpt}
            c.run(_train, kwargs={"steps": steps, **kw}, timeout=120)
            c.kill("ps", 0)  # the model lived in ps:0's memory
            c.restart("ps", 0)
            again = c.run(_train, kwargs={"steps": 2 * steps, **kw}, timeout=120)["worker:0"]
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)
    start = again["first_step"]
    if start is None or start < steps // 2:
        return failed(
            f"after ps:0 restarted, worker:0 (the chief) started again from global step {start}: nothing was restored",
            "give MonitoredTrainingSession a checkpoint_dir (and save often enough) so the chief saves and restores",
        )
    return passed(
        "after ps:0 restarted, the chief restored the last checkpoint and training went on from there"
    )
