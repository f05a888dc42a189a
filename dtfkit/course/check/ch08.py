"""Checks for chapter 8 (the sync/async lab).

Example::

    from dtfkit.course import check
    check.ch08.backup_settings(backup_settings)
    check.ch08.staleness(staleness_of)
"""

from __future__ import annotations

from collections.abc import Callable

from dtfkit.course import classroom
from dtfkit.course.check._core import CheckResult, exercise, failed, passed
from dtfkit.lab import Lab

DELAY_MS = 150


def _sync_settings(backup_settings: Callable, workers: int) -> tuple[dict | None, CheckResult | None]:
    """The answer's settings for ``workers`` workers, or a failed result saying what is wrong."""
    settings = backup_settings(workers=workers, straggler_ms=DELAY_MS)
    if not isinstance(settings, dict):
        return None, failed(f"backup_settings returned {settings!r:.80}", "return a dict of Lab settings")
    if settings.get("mode") != "sync":
        return None, failed(
            f"mode={settings.get('mode')!r}: the question is about synchronous training",
            "set mode='sync'; backup workers are a SyncReplicasOptimizer feature",
        )
    aggregate = settings.get("replicas_to_aggregate") or workers  # Lab: 0 means "as many as workers"
    if aggregate >= workers:
        return None, failed(
            f"with {workers} workers your run aggregates {aggregate} gradients per update: one from "
            "every worker, so no worker is a backup",
            "an update that needs a gradient for every worker has to wait for the slowest one's; "
            "how many should it need with one backup worker?",
        )
    if aggregate != workers - 1:
        return None, failed(
            f"with {workers} workers your run aggregates {aggregate} gradient(s) per update: that is "
            f"{workers - aggregate} backup workers, not one",
            "one backup worker: the update goes ahead as soon as all but one of the gradients are in",
        )
    return settings, None


@exercise("8.1", "A backup worker beats the straggler")
def backup_settings(backup_settings: Callable, *, hidden: bool = False) -> CheckResult:
    """Check ``backup_settings(workers, straggler_ms)`` for 3 and 4 workers, then run the lab
    with 3 (worker:2 straggles) and check what ``SyncReplicasOptimizer`` guarantees.

    What is graded never depends on timing: the settings (one backup worker for any
    number of workers) and the run's ledger (every update averaged at least
    ``replicas_to_aggregate`` gradients). How many updates went ahead without the
    straggler is measured and shown, not graded: it depends on the machine's load.

    Example::

        check.ch08.backup_settings(backup_settings)
    """
    for workers in (4, 3):  # 4: a hard-coded answer for 3 workers fails
        settings, failure = _sync_settings(backup_settings, workers)
        if failure is not None:
            return failure
    settings = {**settings, "workers": 3, "straggler_ms": DELAY_MS, "ps": 1}
    with Lab(steps=classroom.scaled(30, minimum=12), run_timeout=classroom.timeout(180)) as lab:
        lab.echo = lambda task, line: None
        run = lab.run(**settings)
    sizes, aggregate = run.update_sizes(), run.settings.aggregate
    if min(sizes) < aggregate:
        return failed(
            f"some updates averaged only {min(sizes)} gradient(s), fewer than replicas_to_aggregate={aggregate}",
            "this should never happen: look at the lab's settings your function returned",
        )
    without = 1 - run.participation("worker:2", last=1.0)
    return passed(
        f"every update went ahead as soon as {aggregate} of the 3 gradients were in, so none had to wait "
        "for the straggler worker:2",
        f"measured on this machine: {without:.0%} of the updates were made without worker:2's gradient",
    )


@exercise("8.2", "Staleness from the step records")
def staleness(staleness_of: Callable, *, hidden: bool = False) -> CheckResult:
    """Run an async lab run (2 workers, worker:1 straggles) and compare ``staleness_of(pushes)``
    with what the lab measured.

    Example::

        check.ch08.staleness(staleness_of)
    """
    with Lab(steps=classroom.scaled(60, minimum=20), run_timeout=classroom.timeout(180)) as lab:
        lab.echo = lambda task, line: None
        run = lab.run(mode="async", workers=2, ps=1, straggler_ms=DELAY_MS)
    pushes = {t: [(s, e, r, a) for s, e, r, a, _ in steps] for t, steps in run.pushes().items()}
    answer = staleness_of(pushes)
    if not isinstance(answer, dict) or set(answer) != set(pushes):
        return failed(
            f"staleness_of returned {type(answer).__name__} {answer!r:.120}",
            f"return a dict with one list per worker: {sorted(pushes)}",
        )
    for task, steps in pushes.items():
        expected = [a - r - 1 for _, _, r, a in steps]
        got = list(answer[task])
        if got != expected:
            return failed(
                f"for {task} you gave {got[:6]}… but its steps say {expected[:6]}…",
                "a step read the global step `read` and its update made step `applied`: how many "
                "other updates landed in between?",
            )
    worst = {task: max(answer[task][1:] or [0]) for task in sorted(pushes)}
    return passed(
        "your staleness matches the lab's for every update",
        f"the largest staleness per worker in this run: {worst} (worker:1 is the straggler)",
    )
