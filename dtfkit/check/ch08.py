"""Checks for chapter 8 (the sync/async lab).

Example::

    from dtfkit import check
    check.ch08.backup_settings(backup_settings)
    check.ch08.staleness(staleness_of)
"""

from __future__ import annotations

from collections.abc import Callable

from dtfkit import classroom
from dtfkit.check._core import CheckResult, exercise, failed, passed
from dtfkit.lab import Lab

DELAY_MS = 150


@exercise("8.1", "A backup worker beats the straggler")
def backup_settings(backup_settings: Callable, *, hidden: bool = False) -> CheckResult:
    """Run the lab with ``backup_settings(workers=3, straggler_ms=150)`` (worker:2 straggles).

    Example::

        check.ch08.backup_settings(backup_settings)
    """
    settings = backup_settings(workers=3, straggler_ms=DELAY_MS)
    if not isinstance(settings, dict):
        return failed(f"backup_settings returned {settings!r}", "return a dict of Lab settings")
    if settings.get("mode") != "sync":
        return failed(
            f"mode={settings.get('mode')!r}: the question is about synchronous training",
            "set mode='sync'; backup workers are a SyncReplicasOptimizer feature",
        )
    settings = {**settings, "workers": 3, "straggler_ms": DELAY_MS, "ps": 1}
    with Lab(steps=classroom.scaled(30, minimum=12), run_timeout=classroom.timeout(180)) as lab:
        lab.echo = lambda task, line: None
        run = lab.run(**settings)
    sizes, waited = run.update_sizes(), run.participation("worker:2", last=0.5)
    if min(sizes) >= 3:
        return failed(
            f"every update averaged 3 gradients, and {waited:.0%} of the later ones waited for worker:2",
            "an update that needs every worker's gradient waits for the slowest: aggregate fewer than 3",
        )
    if min(sizes) != 2:
        return failed(
            f"some updates averaged only {min(sizes)} gradient(s)",
            "one backup worker: an update waits for 2 of the 3 gradients",
        )
    if waited >= 0.75:
        return failed(
            f"{waited:.0%} of the later updates still used a gradient of the straggler worker:2",
            "with replicas_to_aggregate=2 the two fast workers should fill most updates",
        )
    return passed("updates went ahead with 2 of the 3 gradients, most of them without the straggler worker:2")


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
    worst = max(pushes, key=lambda t: max(answer[t][1:] or [0]))
    if worst != "worker:1":
        return failed(
            f"the stalest updates came from {worst}, not the straggler worker:1",
            "look at the step records: was the straggler's delay inside its steps?",
        )
    return passed(
        "your staleness matches the lab's for every update; the straggler worker:1's were the stalest"
    )
