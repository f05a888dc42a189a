"""Checks for chapter 3 (SyncReplicasOptimizer).

Example::

    from dtfkit.course import check
    check.ch03.backup_workers(sync_options)
    check.ch03.exit_grace(session_options)
"""

from __future__ import annotations

from collections.abc import Callable

import dtfkit
from dtfkit.course import classroom
from dtfkit.course.check._core import CheckResult, cluster, exercise, failed, passed
from dtfkit.recipes import sync


def _workers(n: int) -> list[str]:
    return [f"worker:{i}" for i in range(n)]


@exercise("3.1", "Backup workers")
def backup_workers(sync_options: Callable, *, hidden: bool = False) -> CheckResult:
    """Train 3 workers, worker:2 a straggler, with ``sync_options(num_workers=3, num_backups=1)``.

    Example::

        check.ch03.backup_workers(sync_options)
    """
    n, backups = 3, 1
    options = sync_options(num_workers=n, num_backups=backups)
    if not isinstance(options, dict) or "replicas_to_aggregate" not in options:
        return failed(
            f"sync_options returned {options!r}",
            "return a dict with replicas_to_aggregate and total_num_replicas",
        )
    # TensorFlow's default, not the kit's: left out, total_num_replicas is replicas_to_aggregate.
    options = {"total_num_replicas": options["replicas_to_aggregate"], **options}
    total = options["total_num_replicas"]
    steps = classroom.scaled(40, minimum=10)
    with cluster(ps=1, workers=n) as c:
        run = sync.run_sync(
            c, _workers(n), steps=steps, straggler_ms={"worker:2": 150}, timeout=180, **options
        )
    sizes = run.update_sizes()
    shares = run.shares()
    # An update averages every gradient accumulated when the chief takes it: at least R, sometimes more.
    if run.replicas_to_aggregate != n - backups:
        return failed(
            f"with replicas_to_aggregate={run.replicas_to_aggregate} the updates averaged {sorted(sizes)} gradients",
            f"with {n} workers and {backups} backup, an update should need only {n - backups} gradients",
        )
    if total != n:
        return failed(
            f"total_num_replicas={total} (left out, it defaults to replicas_to_aggregate), "
            f"but {n} workers push gradients",
            "total_num_replicas counts every worker, backups included (it sizes the token queue)",
        )
    # How much the straggler still got in depends on the machine's load: shown, not graded.
    return passed(
        f"each update needed only {n - backups} of the {n} workers' gradients: none waits for the slowest worker",
        f"this run: the straggler worker:2 supplied {shares.get('worker:2', 0):.0%} of the gradients used",
    )


@exercise("3.2", "No exit hang")
def exit_grace(session_options: Callable, *, hidden: bool = False) -> CheckResult:
    """Train 2 workers synchronously with ``session_options()``; the chief must exit within 10 s.

    Example::

        check.ch03.exit_grace(session_options)
    """
    options = session_options()
    if not isinstance(options, dict) or "stop_grace_period_secs" not in options:
        return failed(
            f"session_options returned {options!r}",
            "return the MonitoredTrainingSession option that bounds the chief's exit wait",
        )
    grace = float(options["stop_grace_period_secs"])
    with cluster(ps=1, workers=2) as c:
        try:
            run = sync.run_sync(
                c, _workers(2), steps=classroom.scaled(20, minimum=8), stop_grace_secs=grace, timeout=60
            )
        except dtfkit.TaskTimeout:
            return failed(
                f"worker:0 (the chief) was still closing its session 60 s after training began "
                f"(stop_grace_period_secs={grace:g})",
                "its queue runner waits stop_grace_period_secs for gradients that will never come: make it short",
            )
    lags = run.exit_lags()
    if lags["worker:0"] > 10:
        return failed(
            f"the chief took {lags['worker:0']:.0f} s to close its session after its last step",
            "its queue runner waits stop_grace_period_secs for gradients that will never come",
        )
    return passed("the chief closed its session within 10 s of its last step")
