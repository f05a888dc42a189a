"""Check for exercise 12.2 (chapter 12): choose how often all-reduce training saves.

The learner writes ``choose_save_every(max_lost_steps, seconds_per_step, seconds_per_save,
mean_seconds_between_failures) -> int``: the number of steps between checkpoints. Two things
decide it:

- the budget: a crash right after the step that a save would follow, before that save, rolls
  training back a whole interval, so the interval may not exceed ``max_lost_steps``;
- the cost: every save stalls all workers for ``seconds_per_save`` (a fraction
  ``seconds_per_save / (every * seconds_per_step)`` of the run), while a failure, which comes
  every ``mean_seconds_between_failures`` on average, costs half an interval of steps on average
  (a fraction ``every * seconds_per_step / (2 * mean_seconds_between_failures)``). Their sum is
  smallest near ``sqrt(2 * seconds_per_save * mean_seconds_between_failures) / seconds_per_step``
  steps (J. W. Young, "A first order approximation to the optimum checkpoint interval",
  CACM 17(9), 1974); within the budget, the best whole interval is the answer.

The check grades the answer on variants drawn fresh every run (``hidden``: more, and edge cases), accepting
any interval within the budget whose expected waste is within 5 % of the best one's, then runs the
interval it gives for one more case (a budget of ``REAL_RUN_BUDGET`` steps, graded by the run first and
only then by the formula, so an interval beyond that budget fails on what the run measured)
for real: 2 workers of ``MultiWorkerMirroredStrategy`` save every ``every`` steps and both die at
the worst moment (right before the save of step ``2 * every``); started again, training must
resume from step ``every`` (the step TensorFlow restores) with the weights the chief had when it
saved there (a digest it reported before dying, against one taken right after the restore in the
new processes): ``every`` steps lost, a whole interval, no more than the budget.

Example::

    from dtfkit.course.check import ch12_recovery
    ch12_recovery.check_12_2(choose_save_every)
"""

from __future__ import annotations

import math
import random
import secrets
import shutil
import tempfile
from collections.abc import Callable

from dtfkit.course.check._core import CheckResult, cluster, exercise, failed, passed
from dtfkit.errors import TaskExited
from dtfkit.i18n import N_, _

TOLERANCE = 0.05
"""An answer may waste up to 5 % more than the best interval (rounding either way near the optimum)."""

REAL_RUN_BUDGET = 4
"""The ``max_lost_steps`` of the real run: small, so the run stays short."""

REAL_RUN_LONGEST = 3 * REAL_RUN_BUDGET
"""The longest interval the real run tries (a longer one is graded without it: its run would be long)."""


def waste(
    every: int, seconds_per_step: float, seconds_per_save: float, mean_seconds_between_failures: float
) -> float:
    """The expected time lost to saving and to failures per second of training, saving every ``every`` steps.

    Example::

        waste(10, 0.5, 2.0, 3600.0)   # 2/5 + 5/7200 = 0.4007
    """
    interval = every * seconds_per_step
    return seconds_per_save / interval + interval / (2 * mean_seconds_between_failures)


def best_interval(
    max_lost_steps: int,
    seconds_per_step: float,
    seconds_per_save: float,
    mean_seconds_between_failures: float,
) -> int:
    """The whole interval in ``[1, max_lost_steps]`` with the least expected waste (the reference)."""
    young = math.sqrt(2 * seconds_per_save * mean_seconds_between_failures) / seconds_per_step
    candidates = {
        1,
        max_lost_steps,
        *(min(max_lost_steps, max(1, n)) for n in (math.floor(young), math.ceil(young))),
    }
    return min(
        candidates, key=lambda n: waste(n, seconds_per_step, seconds_per_save, mean_seconds_between_failures)
    )


Case = tuple[int, float, float, float]


def _case(rng: random.Random, young_steps: float, max_lost_steps: int) -> Case:
    """A case whose unconstrained optimum is ``young_steps`` steps, with failures at least 100 saves
    apart (the first-order model holds when a save is short next to the time between failures)."""
    step = rng.choice([0.1, 0.25, 0.5, 1.0, 2.0])
    save = round(rng.uniform(0.05, max(0.05, young_steps * step / 15)), 2)
    mtbf = round((young_steps * step) ** 2 / (2 * save), 1)
    return (max_lost_steps, step, save, mtbf)


def cases(seed: int, count: int) -> list[Case]:
    """Seeded variants: half where the budget binds (the optimum lies far beyond it), half where
    the optimum lies well inside it (at least 6 steps: rounding it either way stays within the
    tolerance)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        budget = rng.randint(8, 400)
        if i % 2 == 0:
            out.append(_case(rng, budget * rng.uniform(2.0, 20.0), budget))
        else:
            out.append(_case(rng, rng.uniform(6.0, budget / 2), budget))
    return out


def edge_cases() -> list[Case]:
    """A budget of one step; saves so cheap and failures so frequent that every step should save;
    an optimum beyond a small budget; one inside a large one."""
    return [
        (1, 0.5, 30.0, 86_400.0),
        (50, 1.0, 0.01, 2.0),
        (12, 0.5, 2.0, 720.0),  # sqrt(2 * 2 * 720) / 0.5 = 107 > 12: the budget binds
        (64, 0.25, 0.5, 80.0),  # sqrt(2 * 0.5 * 80) / 0.25 = 35.8: inside
    ]


def _describe(case: Case) -> str:
    budget, step, save, mtbf = case
    return (
        f"max_lost_steps={budget}, seconds_per_step={step:g}, seconds_per_save={save:g}, "
        f"mean_seconds_between_failures={mtbf:g}"
    )


def _grade(choose: Callable, case: Case) -> CheckResult | None:
    budget, step, save, mtbf = case
    got = choose(budget, step, save, mtbf)
    where = f"choose_save_every({_describe(case)})"
    if isinstance(got, bool) or not isinstance(got, int) or got < 1:
        return failed(
            _("{where} returned {got!r}").format(where=where, got=got),
            _("return a whole number of steps, at least 1"),
        )
    if got > budget:
        return failed(
            _(
                "{where} returned {got}: a crash at the worst moment would lose {got} steps, more than {budget}"
            ).format(where=where, got=got, budget=budget),
            _("where in an interval is the worst moment for a crash, and how many steps does it lose?"),
        )
    best = best_interval(budget, step, save, mtbf)
    mine, least = waste(got, step, save, mtbf), waste(best, step, save, mtbf)
    if mine <= least * (1 + TOLERANCE):
        return None
    if got < best:
        hint = _(
            "you save more often than this case needs: what fraction of the run do the saves take, and how much does each failure cost, on average, with your interval?"
        )
    else:
        hint = _(
            "failures come often here: on average a failure costs half an interval of steps; weigh that against the time the saves take"
        )
    return failed(
        _(
            "{where} returned {got}: saves and failures would add {mine:.1%} to the training time; a better interval within the budget adds {least:.1%}"
        ).format(where=where, got=got, mine=mine, least=least),
        hint,
    )


def _grade_lost_cause(every: object, case: Case) -> CheckResult:
    """The failed result of an interval the real run does not try, when ``_grade`` let it through
    (it cannot: an interval outside ``[1, REAL_RUN_LONGEST]`` is beyond this case's budget)."""
    return failed(
        _("{where} returned {got!r}").format(where=f"choose_save_every({_describe(case)})", got=every),
        _("return a whole number of steps, at least 1"),
    )


def _real_run(every: int) -> dict | CheckResult:
    """Both workers die right before the save of step ``2 * every``; start again. Returns
    ``recovery_summary``'s dict (``restored_as_saved`` compares the weights the new processes
    restored with the digest the chief reported when it saved) or a failed result."""
    import time

    from dtfkit.recipes import mwms_fault

    folder = tempfile.mkdtemp(prefix="dtfkit-ex122-")
    killed_at = 2 * every
    common = {"checkpoint_dir": folder, "steps": killed_at + 2, "save_every": every}
    try:
        with cluster(workers=2, start_servers=False) as c:
            started = time.time()
            try:
                c.run(
                    mwms_fault.train_with_checkpoints,
                    kwargs={
                        **common,
                        "die_at": killed_at,
                        "dying_tasks": ("worker:0", "worker:1"),
                        "die_before_save": True,
                    },
                    on_error="wait",
                    timeout=120,
                )
                return failed(
                    _("the workers trained to the end instead of dying at step {killed_at}").format(
                        killed_at=killed_at
                    ),
                    _("this is the check's fault, not yours: run it again"),
                )
            except TaskExited:
                pass  # both died, as planned
            # What the chief (worker:0) had when it saved, as it reported it before dying.
            saved = {
                r["saved"]: r["digest"] for r in c.metrics.rows("worker:0", since=started) if "digest" in r
            }
            c.ensure_running(fresh="all")
            resumed = c.run(mwms_fault.train_with_checkpoints, kwargs=common, timeout=120)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return mwms_fault.recovery_summary(killed_at, {}, resumed, saved_digests=saved)


@exercise(
    "12.2",
    "How often to save",
    reads=("max_lost_steps", "seconds_per_step", "seconds_per_save", "mean_seconds_between_failures"),
    varies=N_("budgets, step times, save times and failure rates"),
)
def check_12_2(choose_save_every: Callable, *, hidden: bool = False) -> CheckResult:
    """Grade ``choose_save_every(max_lost_steps, seconds_per_step, seconds_per_save,
    mean_seconds_between_failures) -> int`` on variants drawn fresh, then in one real run where both
    workers die right before a save.

    Example::

        check_12_2(choose_save_every)
    """
    seed = secrets.randbits(64)  # fresh every run: no fixed seeds a learner could enumerate
    variants = cases(seed, 10)
    if hidden:
        variants += cases(seed + 1, 20) + cases(seed + 2, 20) + edge_cases()
    for case in variants:
        problem = _grade(choose_save_every, case)
        if problem is not None:
            return problem
    real_case = _case(random.Random(seed), REAL_RUN_BUDGET * 5.0, REAL_RUN_BUDGET)  # the budget binds
    every = choose_save_every(*real_case)
    if isinstance(every, bool) or not isinstance(every, int) or not 1 <= every <= REAL_RUN_LONGEST:
        return _grade(choose_save_every, real_case) or _grade_lost_cause(every, real_case)
    # The real run is graded on what it measures (the step TensorFlow restored), before the interval's
    # cost: an answer that keeps the budget of the drawn cases but not this one's fails here, in the run.
    outcome = _real_run(every)
    if isinstance(outcome, CheckResult):
        return outcome
    killed_at, resumed_from, lost = outcome["killed_at"], outcome["resumed_from"], outcome["lost_steps"]
    # Measured, not derived from the answer: the step TensorFlow restored (the step variable read back
    # from the checkpoint) and the weights it restored, against what the dead chief reported at its save.
    if lost > REAL_RUN_BUDGET or outcome["first_step"] != resumed_from + 1:
        return failed(
            _(
                "both workers died right before the save of step {killed_at}; training resumed from step {resumed_from}: {lost} steps lost, more than max_lost_steps={REAL_RUN_BUDGET}"
            ).format(
                killed_at=killed_at, resumed_from=resumed_from, lost=lost, REAL_RUN_BUDGET=REAL_RUN_BUDGET
            ),
            _("how many steps lie between the last save and the worst moment for a crash?"),
        )
    if lost != every or not outcome["restored_as_saved"]:
        return failed(
            _(
                "saving every {every} steps, both workers died right before the save of step {killed_at}, but the new processes resumed from step {resumed_from} with weights that {match} those saved at step {every}"
            ).format(
                every=every,
                killed_at=killed_at,
                resumed_from=resumed_from,
                match=_("match") if outcome["restored_as_saved"] else _("do not match"),
            ),
            _(
                "this is not your answer's fault: the checkpoint was not restored as it was saved; run the check again, and if it fails again, report it with this message"
            ),
        )
    problem = _grade(choose_save_every, real_case)
    if problem is not None:
        return problem
    return passed(
        _(
            "your intervals keep within the loss budget at a cost near the least for {len_variants} cases; in a real run saving every {every} steps, both workers died right before the save of step {killed_at} and training resumed from step {resumed_from}, with the weights saved there bit for bit: {lost} steps lost, a whole interval (max_lost_steps={REAL_RUN_BUDGET})"
        ).format(
            len_variants=len(variants),
            every=every,
            killed_at=killed_at,
            resumed_from=resumed_from,
            lost=lost,
            REAL_RUN_BUDGET=REAL_RUN_BUDGET,
        )
    )
