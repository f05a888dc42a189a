"""Checks for chapter 7 (MultiWorkerMirroredStrategy and ParameterServerStrategy across processes)."""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable
from typing import Any

import dtfkit
from dtfkit.course import classroom
from dtfkit.course.check._core import CheckResult, cluster, exercise, failed, passed
from dtfkit.course.task_side.ch07 import count_in_chief, sum_in_task
from dtfkit.i18n import _

_STARTUP = "configured at program startup"


def _draw_values(n: int) -> dict[str, float]:
    """``n`` distinct random whole numbers (exact in float32, so the sums are exact too)."""
    picked = random.Random().sample(range(1, 1000), n)
    return {f"worker:{i}": float(v) for i, v in enumerate(picked)}


def _takes_one(fn: Callable, what: str) -> CheckResult | None:
    """A failed result when ``fn`` cannot be called with one argument (checked before anything starts)."""
    try:
        inspect.signature(fn).bind(1)
    except TypeError:
        return failed(
            _("{__name__}{signature} cannot be called with one argument").format(
                __name__=fn.__name__, signature=inspect.signature(fn)
            ),
            _("it gets {what}").format(what=what),
        )
    except ValueError:  # no signature to read (a builtin): let the real call tell
        pass
    return None


def _as_number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _all_reduce_once(sum_over_workers: Callable, n: int) -> CheckResult | None:
    """One cluster of ``n`` workers with random values; None when every worker returned the sum."""
    values = _draw_values(n)
    want = sum(values.values())
    with cluster(workers=n, start_servers=False) as c:
        try:
            ran = c.run(sum_in_task, args=(sum_over_workers, values), timeout=120)
        except dtfkit.TaskFailed as exc:
            if _STARTUP in exc.remote_message or _STARTUP in exc.remote_traceback:
                return failed(
                    _(
                        "{task}: collective ops must be configured at program startup, but a TensorFlow op ran before the strategy was created"
                    ).format(task=exc.task),
                    _(
                        "Part 1's start-up rule: what must the task create before anything else touches TensorFlow?"
                    ),
                )
            raise
    got = {task: r["sum"] for task, r in ran.items()}
    for task in sorted(got):
        v = _as_number(got[task])
        if v is not None and abs(v - want) <= 1e-6 * want:
            if not any(size in (n, None) for _name, size in ran[task]["all_reduces"]):
                return failed(
                    _(
                        "{task} returned the sum, but no collective all-reduce over the {n} workers ran in it: the check watches TensorFlow's collective ops in every worker"
                    ).format(task=task, n=n),
                    _(
                        "each worker only knows its own value: the workers must combine their values with each other through TensorFlow (Part 1), not compute anything alone"
                    ),
                )
            continue
        mine = values[task]
        if v is not None and abs(v - mine) < 1e-6:
            return failed(
                _(
                    "{task} returned its own value {v:g}, not the sum {want:g} over the {n} workers (values {sorted_values_values})"
                ).format(task=task, v=v, want=want, n=n, sorted_values_values=sorted(values.values())),
                _(
                    "each worker only knows its own value: the workers must combine their values with each other (Part 1), not compute anything alone"
                ),
            )
        if v is not None and abs(v - want / n) <= 1e-6 * want:
            return failed(
                _(
                    "{task} returned {v:g}, the mean of the {n} workers' values, not their sum {want:g}"
                ).format(task=task, v=v, n=n, want=want),
                _("which reduction adds the replicas' values up?"),
            )
        return failed(
            _(
                "{task} returned {got_task!r:.80}, not the sum {want:g} of the {n} workers' values (each got a random value: {sorted_values_values})"
            ).format(
                task=task, got_task=got[task], want=want, n=n, sorted_values_values=sorted(values.values())
            ),
            _("every worker must return the same number: the sum of the values all workers were given"),
        )
    return None


@exercise("7.1", "All-reduce across processes")
def all_reduce(sum_over_workers: Callable, *, hidden: bool = False) -> CheckResult:
    """Run ``sum_over_workers(value)`` in every worker of a ``start_servers=False`` cluster.

    Each worker gets its own random value (and only its own); every worker must return the sum
    over all workers. The visible check uses 3 workers; ``hidden=True`` adds a run with 2.

    Example::

        check.ch07.all_reduce(sum_over_workers)
    """
    problem = _takes_one(sum_over_workers, _("one argument: the worker's own value"))
    if problem is not None:
        return problem
    counts = [3] + ([2] if hidden else [])
    for n in counts:
        problem = _all_reduce_once(sum_over_workers, n)
        if problem is not None:
            return problem
    sizes = _(" and ").join(str(n) for n in counts)
    return passed(
        _(
            "with {sizes} workers, each given only its own random value, every worker returned the all-reduced sum"
        ).format(sizes=sizes)
    )


def _ps_counter_once(count_steps: Callable, steps: int, workers: int) -> CheckResult | None:
    with cluster(chief=1, workers=workers, ps=1, env={"GRPC_FAIL_FAST": "use_caller"}) as c:
        seen = c.run(count_in_chief, args=(count_steps, steps), on="chief:0", timeout=120)["chief:0"]
    got = seen["answer"]
    if not isinstance(got, dict) or not {"count", "device"} <= set(got):
        return failed(
            _("chief:0: count_steps returned {got!r:.100}").format(got=got),
            _("return {'count': ..., 'device': counter.device}"),
        )
    if "/job:ps" not in str(got["device"]):
        return failed(
            _("chief:0: the counter lives on {device}, not on the ps").format(
                device=got["device"] or _("the chief")
            ),
            _(
                "a variable lands on a parameter server only when ParameterServerStrategy places it (Part 2): where did you create yours?"
            ),
        )
    if _as_number(got["count"]) != steps:
        return failed(
            _(
                "chief:0: the counter read {got_count} after {steps} scheduled steps (the check picks the number of steps at random)"
            ).format(got_count=got["count"], steps=steps),
            _(
                "use the `steps` argument, and read the counter only once every scheduled function has run: schedule only queues it (Part 2)"
            ),
        )
    # What the chief saw, not what the answer says: functions the coordinator ran on the workers, and
    # the variables created on the ps, read by the check after the answer returned.
    if seen["scheduled"] != steps or seen["ran"] != steps:
        return failed(
            _(
                "chief:0: for {steps} steps, {scheduled} functions were scheduled on the workers and {ran} of them ran there (the check watches the coordinator in the chief)"
            ).format(steps=steps, scheduled=seen["scheduled"], ran=seen["ran"]),
            _(
                "every step must be a function the coordinator hands to a worker (Part 2): a step called in the chief itself never reaches one"
            ),
        )
    if not any(value == steps for _device, value in seen["on_ps"]):
        return failed(
            _(
                "chief:0: after the answer returned, no variable it created on a parameter server held {steps} (the check read them: {on_ps})"
            ).format(steps=steps, on_ps=sorted(value for _device, value in seen["on_ps"]) or _("none")),
            _(
                "return the count you read from the counter the scheduled steps incremented, and that counter's own device"
            ),
        )
    return None


@exercise(
    "7.2",
    "Schedule steps on a parameter server",
    allowed=("dtfkit.recipes.strategies_multi.coordinator_resolver",),
)
def ps_counter(count_steps: Callable, *, hidden: bool = False) -> CheckResult:
    """Run ``count_steps(steps)`` in the chief of chief + workers + 1 ps, for a random number of
    steps; the counter must live on the ps and count every step. ``hidden=True`` adds a run
    with another number of steps and workers.

    Example::

        check.ch07.ps_counter(count_steps)
    """
    problem = _takes_one(count_steps, _("one argument: the number of steps to schedule"))
    if problem is not None:
        return problem
    rng = random.Random()
    low = classroom.scaled(40, minimum=10)
    runs = [(rng.randint(low + 1, 2 * low), classroom.size(2, classroom=1))]
    if hidden:
        runs.append((rng.randint(3, low - 1), 2))
    for steps, workers in runs:
        problem = _ps_counter_once(count_steps, steps, workers)
        if problem is not None:
            return problem
    done = _(" and ").join(
        (_("{s} steps on {w} workers") if w > 1 else _("{s} steps on {w} worker")).format(s=s, w=w)
        for s, w in runs
    )
    return passed(
        _("{done}: every scheduled step ran on a worker and incremented the counter on ps:0").format(
            done=done
        )
    )
