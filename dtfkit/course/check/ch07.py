"""Checks for chapter 7 (MultiWorkerMirroredStrategy and ParameterServerStrategy across processes).

Example::

    from dtfkit.course import check
    check.ch07.all_reduce(sum_over_workers)
    check.ch07.ps_counter(count_steps)
"""

from __future__ import annotations

from collections.abc import Callable

import dtfkit
from dtfkit.course import classroom
from dtfkit.course.check._core import CheckResult, cluster, exercise, failed, passed

_STARTUP = "configured at program startup"


@exercise("7.1", "All-reduce across processes")
def all_reduce(sum_over_workers: Callable, *, hidden: bool = False) -> CheckResult:
    """Run ``sum_over_workers()`` in every worker of a ``start_servers=False`` cluster.

    Each worker contributes ``task_index + 1``; every worker must return the sum.

    Example::

        check.ch07.all_reduce(sum_over_workers)
    """
    n = 3 if hidden else 2
    want = float(n * (n + 1) // 2)
    with cluster(workers=n, start_servers=False) as c:
        try:
            got = c.run(sum_over_workers, timeout=120)
        except dtfkit.TaskFailed as exc:
            if _STARTUP in exc.remote_message or _STARTUP in exc.remote_traceback:
                return failed(
                    f"{exc.task}: collective ops must be configured at program startup",
                    "create tf.distribute.MultiWorkerMirroredStrategy() before any other TensorFlow op",
                )
            raise
    wrong = {t: v for t, v in got.items() if not isinstance(v, (int, float)) or abs(float(v) - want) > 1e-6}
    if wrong:
        t, v = sorted(wrong.items())[0]
        own = float(dtfkit_task_index(t) + 1)
        if isinstance(v, (int, float)) and abs(float(v) - own) < 1e-6:
            return failed(
                f"{t} returned its own value {v:g}, not the sum {want:g} over the {n} workers",
                "reduce across replicas: strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)",
            )
        return failed(
            f"{t} returned {v!r}, not the sum {want:g} over the {n} workers",
            "each worker contributes task_index + 1 through strategy.run, then strategy.reduce(SUM)",
        )
    return passed(f"all {n} workers returned the same all-reduced sum {want:g}")


def dtfkit_task_index(task: str) -> int:
    return int(task.split(":")[1])


@exercise("7.2", "Schedule steps on a parameter server")
def ps_counter(count_steps: Callable, *, hidden: bool = False) -> CheckResult:
    """Run ``count_steps(steps)`` in the chief of chief + workers + 1 ps; the counter must live on the ps.

    Example::

        check.ch07.ps_counter(count_steps)
    """
    steps = classroom.scaled(40, minimum=10)
    workers = classroom.size(2, classroom=1)
    with cluster(chief=1, workers=workers, ps=1, env={"GRPC_FAIL_FAST": "use_caller"}) as c:
        got = c.run(count_steps, args=(steps,), on="chief:0", timeout=120)["chief:0"]
    if not isinstance(got, dict) or not {"count", "device"} <= set(got):
        return failed(f"count_steps returned {got!r}", "return {'count': ..., 'device': counter.device}")
    if "/job:ps" not in str(got["device"]):
        return failed(
            f"the counter lives on {got['device'] or 'the chief'}, not on the ps",
            "create the variable inside `with strategy.scope():`",
        )
    if int(got["count"]) != steps:
        return failed(
            f"the counter read {got['count']} after {steps} scheduled steps",
            "coordinator.schedule returns at once: call coordinator.join() before reading the counter",
        )
    return passed(f"{steps} scheduled steps ran on the workers and incremented the counter on ps:0")
