"""Checks for chapter 4 (MonitoredTrainingSession: hooks, the chief, checkpoints)."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from dtfkit.course import classroom
from dtfkit.course.check._core import CheckResult, Rng, cluster, exercise, failed, passed
from dtfkit.course.task_side.ch04 import (
    _train,
)
from dtfkit.i18n import N_, _


# ------------------------------------------------------------------ 4.1
class _Hook(SimpleNamespace):
    """What the stand-in ``tf`` of the quick check returns instead of a real hook."""


def _stand_in_tf() -> SimpleNamespace:
    """Just enough of ``tf`` to see which hooks ``make_hooks`` asks for, without TensorFlow."""

    def stop_at_step(num_steps=None, last_step=None):
        return _Hook(kind="stop", num_steps=num_steps, last_step=last_step)

    def nan_tensor(loss_tensor, fail_on_nan_loss=True):
        return _Hook(kind="nan", tensor=loss_tensor)

    train = SimpleNamespace(StopAtStepHook=stop_at_step, NanTensorHook=nan_tensor)
    return SimpleNamespace(compat=SimpleNamespace(v1=SimpleNamespace(train=train)))


def hidden_stop_cases(steps: int, rng: random.Random | None = None) -> tuple[int, tuple[int, int]]:
    """4.1's hidden variants for runs of about ``steps`` global steps, drawn from ``rng`` (by default
    seeded fresh every run): another last_step for the quick look, and the (start, last_step) of
    the hidden real run.

    Valid for every draw: ``StopAtStepHook(last_step=...)`` reads the shared global step after each
    step and stops the worker once it is at or past last_step, whatever the step training started
    from; of 2 asynchronous workers each has at most one step in flight when the other's hook sees
    last_step, so training ends in last .. last + 2 (what the check allows) for any start < last.
    The run trains between steps // 2 and steps + 7 global steps from a start in 0 .. steps // 2:
    the fixed run it replaces trained steps + 7 from 0, so it costs no more; a gap of at least
    steps // 2 (10 or more) leaves both workers steps to take after the barrier.

    >>> hidden_stop_cases(20, random.Random(1)) == hidden_stop_cases(20, random.Random(1))
    True
    """
    rng = rng if rng is not None else random.Random()
    start = rng.randint(0, steps // 2)
    return rng.randint(2, 500), (start, start + rng.randint(steps // 2, steps + 7))


def _quick_hooks_problem(make_hooks: Callable, last_steps: tuple[int, ...] = (37, 120)) -> CheckResult | None:
    """Call ``make_hooks`` with a stand-in ``tf``: a failed result for a clear mistake, else None.

    Inconclusive (None) when the answer uses anything else of ``tf`` (its own hook class, say):
    the real runs decide then.
    """
    loss = object()
    for last_step in last_steps:
        try:
            hooks = list(make_hooks(_stand_in_tf(), last_step, loss))
        except (AttributeError, TypeError):
            return None
        if not all(isinstance(h, _Hook) for h in hooks):
            return None
        stops = [h for h in hooks if h.kind == "stop"]
        if not stops:
            return failed(
                _("no hook stops training at a global step"), _("which hook ends a session at a given step?")
            )
        if any(h.last_step is None for h in stops):
            return failed(
                _(
                    "StopAtStepHook(num_steps=...) counts steps from the moment each worker's session starts: a run restored from a checkpoint, or two workers, go past last_step"
                ),
                _("StopAtStepHook has another argument, which counts the shared global step"),
            )
        if any(h.last_step != last_step for h in stops):
            return failed(
                _("for last_step={last_step} your StopAtStepHook stops at {last_steps}").format(
                    last_step=last_step,
                    last_steps=", ".join(str(h.last_step) for h in stops),
                ),
                _("stop at the last_step the function is given"),
            )
        nans = [h for h in hooks if h.kind == "nan"]
        if not nans:
            return failed(
                _("no hook stops training when the loss becomes NaN (the check makes it NaN in one run)"),
                _("tf.compat.v1.train has a hook that watches a tensor for NaN"),
            )
        if not any(h.tensor is loss for h in nans):
            return failed(
                _("your NaN hook does not watch the loss it is given"), _("pass it the loss argument")
            )
    return None


@exercise(
    "4.1", "Stop at a global step, or on NaN", reads=("tf", "last_step", None), varies=N_("other last steps")
)
def stop_hooks(make_hooks: Callable, *, hidden: bool = False, rng: Rng = None) -> CheckResult:
    """Train 2 workers with ``make_hooks(tf, last_step, loss)``: once from a global step that starts past 0
    (training must end at ``last_step``), once with the loss turning NaN mid-run (training must stop
    there); ``hidden`` adds another last_step to the quick look and a run with a start and a
    ``last_step`` drawn fresh (``hidden_stop_cases``; ``rng`` for tests).

    Example::

        check.ch04.stop_hooks(make_hooks)
    """
    steps = classroom.scaled(60, minimum=20)
    quick_last, hidden_run = hidden_stop_cases(steps, rng) if hidden else (None, None)
    problem = _quick_hooks_problem(make_hooks, (37, 120) + ((quick_last,) if quick_last else ()))
    if problem is not None:
        return problem
    stop_runs = [(steps // 2 + 3, steps)] + ([hidden_run] if hidden_run else [])
    nan_from = classroom.scaled(24, minimum=10)
    with cluster(ps=1, workers=2) as c:
        for k, (start, last) in enumerate(stop_runs):
            kw = {"run_name": f"ex41s{k}", "last_step": last, "start_step": start, "make_hooks": make_hooks}
            got = c.run(_train, kwargs=kw, timeout=120)
            final = max(r["final_step"] for r in got.values())
            locals_ = {t: r["local_steps"] for t, r in got.items()}
            if max(locals_.values()) >= 10 * last:
                return failed(
                    _("training never stopped by itself (the check cut it off)"),
                    _("which hook ends a session at a given global step?"),
                )
            if not last <= final <= last + 2:
                if start and final >= start + last - 1:
                    return failed(
                        _(
                            "training started at global step {start} (as after a restore) and ended at {final}, not at last_step={last}"
                        ).format(start=start, final=final, last=last),
                        _(
                            "a hook that counts steps from each session's start overshoots: stop on the global step"
                        ),
                    )
                if final > last and min(locals_.values()) >= last:
                    return failed(
                        _(
                            "each worker took {last} steps or more, so the global step reached {final}, not {last}"
                        ).format(last=last, final=final),
                        _("count the shared global step, not each worker's own steps"),
                    )
                return failed(
                    _("training ended at global step {final}, not {last}").format(final=final, last=last),
                    _("stop at last_step, the shared global step"),
                )
            if min(locals_.values()) == 0:
                idle = min(locals_, key=locals_.__getitem__)
                return failed(
                    _("{idle} never trained").format(idle=idle), _("both workers should share the steps")
                )
        kw = {"run_name": "ex41n", "last_step": nan_from + 40, "nan_from": nan_from, "make_hooks": make_hooks}
        got = c.run(_train, kwargs=kw, timeout=120)
    fed = [r["nan_fed"] for r in got.values() if r["nan_fed"] is not None]
    final = max(r["final_step"] for r in got.values())
    if not fed:
        return failed(_("the loss never became NaN: training stopped before the check could make it NaN"))
    first = min(fed)
    if final > first + 6:
        went_on = [t for t, r in got.items() if r["nan_fed"] is not None and not r["nan_stop"]]
        return failed(
            _(
                "the loss turned NaN at global step {first}, but training went on to global step {final}"
            ).format(first=first, final=final)
            + (_(" ({tasks} kept training)").format(tasks=", ".join(went_on)) if went_on else ""),
            _("a hook can watch the loss and stop the session when it is NaN"),
        )
    return passed(
        _(
            "training stopped at last_step={steps} though it started at global step {steps_2_3}, and stopped within a few steps of the loss turning NaN"
        ).format(steps=steps, steps_2_3=steps // 2 + 3)
    )


# ------------------------------------------------------------------ 4.2
def _wait_for_pause(c: Any, handle: Any, timeout: float = 150.0) -> dict[str, Any] | None:
    """The worker's ``paused`` event; None if its call ended without one (its error is raised)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return c.metrics.wait_for(lambda r: "paused" in r, timeout=1.0, since=handle.submitted)
        except TimeoutError:
            if handle.done():
                handle.result()  # raises the worker's error, if that is why it ended
                return None
            if time.monotonic() > deadline:
                raise


LOST_CASES = (3, 7, 12, 25)


def hidden_lost_cases(rng: random.Random | None = None) -> tuple[int, int]:
    """4.2's hidden variants, drawn from ``rng`` (by default seeded fresh every run): another
    max_lost_steps for the quick look (1 to 100), and the max_lost_steps of the second crash (2 to 8).

    Valid for every draw: with one worker each step adds exactly 1 to the global step, and the
    chief's ``CheckpointSaverHook`` saves when its session starts and then at every step at least
    ``save_checkpoint_steps`` past the last save (``basic_session_run_hooks.py``). The ps dies in
    the step that takes the global step to start + max_lost + 1, after its update and before its
    save: any interval of at most max_lost has saved at most max_lost steps before, any longer one
    only at start, so the rollback decides, for every max_lost >= 1, with no timing. Up to 8 the
    second run trains at most 14 global steps (the visible run, max_lost 6, trains 12; the fixed 4
    it replaces, 10).

    >>> hidden_lost_cases(random.Random(1)) == hidden_lost_cases(random.Random(1))
    True
    """
    rng = rng if rng is not None else random.Random()
    return rng.randint(1, 100), rng.randint(2, 8)


def _quick_options_problem(
    session_options: Callable, lost_cases: tuple[int, ...] = LOST_CASES
) -> CheckResult | None:
    """Read ``session_options(dir, max_lost_steps)`` for several values: a failed result or None."""
    for max_lost in lost_cases:
        options = session_options("/checkpoints/of/the/check", max_lost)
        where = f"session_options(checkpoint_dir, max_lost_steps={max_lost})"
        if not isinstance(options, dict):
            return failed(
                _("{where} returned {options!r}").format(where=where, options=options),
                _("return a dict of MonitoredTrainingSession arguments"),
            )
        if options.get("checkpoint_dir") is None:
            return failed(
                _("{where} gives no checkpoint_dir: the chief neither saves nor restores").format(
                    where=where
                ),
                _("MonitoredTrainingSession restores from and saves into its checkpoint_dir"),
            )
        if options.get("save_checkpoint_secs") is not None:
            return failed(
                _(
                    "{where} saves every {options_save_checkpoint_secs} seconds: how many steps that is depends on the machine's speed, so no number of seconds bounds the steps lost"
                ).format(where=where, options_save_checkpoint_secs=options["save_checkpoint_secs"]),
                _("count the interval in global steps (and turn the seconds off)"),
            )
        every = options.get("save_checkpoint_steps")
        if every is None:
            return failed(
                _(
                    "{where} leaves the interval to TensorFlow's default: a checkpoint every 600 seconds, however many steps that is"
                ).format(where=where),
                _("MonitoredTrainingSession can count the interval between checkpoints in global steps"),
            )
        # The chief's CheckpointSaverHook saves in after_run, once a step's update is on the ps
        # (basic_session_run_hooks.py): a ps that dies after the update of global step
        # last_save + every and before that save rolls back `every` steps, so every <= max_lost.
        if not isinstance(every, int) or every < 1 or every > max_lost:
            return failed(
                _(
                    "{where} saves every {every!r} global steps: a ps that dies at the worst moment would lose more than {max_lost} steps"
                ).format(where=where, every=every, max_lost=max_lost),
                _(
                    "the chief saves after a step's update has reached the ps: how many steps are on the ps, but not in the last checkpoint, at the worst moment?"
                ),
            )
    return None


@exercise(
    "4.2",
    "Lose at most max_lost_steps to a ps crash",
    reads=("checkpoint_dir", "max_lost_steps"),
    varies=N_("other folders and limits"),
)
def restore_after_ps_crash(
    session_options: Callable, *, hidden: bool = False, rng: Rng = None
) -> CheckResult:
    """Train 1 worker with ``session_options(checkpoint_dir, max_lost_steps)``, kill ps:0 mid-step (the
    model in its memory is gone), restart it: the chief must restore a checkpoint at most
    ``max_lost_steps`` steps old and train on. ``hidden`` reads the options for another
    ``max_lost_steps`` and crashes a second, restored run with another, both drawn fresh
    (``hidden_lost_cases``; ``rng`` for tests).

    One worker: each step adds 1 to the global step, so a step interval bounds the rollback. With
    several asynchronous workers none does: the chief's ``CheckpointSaverHook`` reads the global
    step only at the chief's own steps and saves at the first one at least ``save_steps`` past the
    last save, however far the others have taken it meanwhile.

    Example::

        check.ch04.restore_after_ps_crash(session_options)
    """
    quick_lost, second_lost = hidden_lost_cases(rng) if hidden else (None, None)
    problem = _quick_options_problem(session_options, LOST_CASES + ((quick_lost,) if quick_lost else ()))
    if problem is not None:
        return problem
    folder = tempfile.mkdtemp(prefix="dtfkit-ex42-")
    ckpt = os.path.join(folder, "ckpt")
    lines = []
    try:
        with cluster(ps=1, workers=1) as c:
            start = 0
            for k, max_lost in enumerate([6] + ([second_lost] if second_lost else [])):
                # One worker, so every step adds exactly 1 to the global step and the saves come
                # at start, start + every, ... (the hook's timer sees every global step). The ps
                # dies in the step that takes the global step to start + max_lost + 1, after its
                # update and before its save: an interval of max_lost + 1 or more has saved nothing
                # since `start` and rolls back max_lost + 1 steps; one of at most max_lost saved at
                # most max_lost steps before. No timing decides it.
                crash = start + max_lost + 1
                resume = os.path.join(folder, f"resume{k}")
                kw = {
                    "run_name": "ex42",
                    "last_step": crash + 5,
                    "options": dict(session_options(ckpt, max_lost)),
                    "pause_at": crash,
                    "resume_file": resume,
                }
                handle = c.submit(_train, kwargs=kw, timeout=180, on_error="wait")
                paused = _wait_for_pause(c, handle)
                if paused is None:
                    return failed(
                        _(
                            "worker:0 (the chief) stopped training before global step {crash}, where the check kills ps:0"
                        ).format(crash=crash),
                        _("return only checkpoint options: training should run until the check stops it"),
                    )
                c.kill("ps", 0)  # a crash: the model in ps:0's memory is gone, no final save
                c.restart("ps", 0)
                open(resume, "w").close()
                got = handle.result()["worker:0"]
                at, sessions = paused["paused"], got["sessions"]
                if sessions[0] != start:
                    return failed(
                        _(
                            "the run started at global step {sessions_0}, not at the last checkpoint's {start}"
                        ).format(sessions_0=sessions[0], start=start),
                        _("the chief restores from checkpoint_dir when a session starts"),
                    )
                if len(sessions) < 2:
                    return failed(
                        _(
                            "worker:0 (the chief) never created a new session after ps:0 was killed and restarted"
                        )
                    )
                back = sessions[1]
                if at - back > max_lost:
                    return failed(
                        _(
                            "ps:0 was killed at global step {at}; after its restart the chief went on from global step {back}: {at_back} steps lost, more than max_lost_steps={max_lost}"
                        ).format(at=at, back=back, at_back=at - back, max_lost=max_lost),
                        _("how often does the chief save, counted in global steps?"),
                    )
                lines.append(
                    _(
                        "max_lost_steps={max_lost}: ps:0 killed at global step {at}, training went on from {back}"
                    ).format(max_lost=max_lost, at=at, back=back)
                )
                start = got["final_step"]  # the chief saved at its clean end: the next run restores it
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return passed(
        _(
            "after ps:0 was killed mid-run and restarted, the chief restored a checkpoint no more than max_lost_steps old and trained on"
        ),
        *lines,
    )
