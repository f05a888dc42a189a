"""Runs inside the tasks: what ``dtfkit.course.check.ch07`` runs on its clusters (see ``task_side``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dtfkit


class _CollectiveWatch:
    """In a task, around the answer's call: records each collective all-reduce TensorFlow builds or
    runs there, with its group size (``seen``). TensorFlow's own strategies reach their all-reduces
    through ``tensorflow.python.ops.collective_ops``; the watch wraps its functions for the call and
    puts them back after. Its methods are called by TensorFlow under the answer: the guard allows
    them (a stand-in of the check's own chapter).

    Example::

        watch = _CollectiveWatch()
        with watch:
            total = answer(value)
        watch.seen                # [('all_reduce_v2', 3)] for a sum over 3 workers
    """

    NAMES = ("all_reduce", "all_reduce_v2", "all_reduce_v3")

    def __init__(self) -> None:
        self.seen: list[tuple[str, int | None]] = []
        self._originals: dict[str, Callable] = {}

    def __enter__(self) -> _CollectiveWatch:
        from tensorflow.python.ops import collective_ops

        for name in self.NAMES:
            original = getattr(collective_ops, name, None)
            if original is not None:
                self._originals[name] = original
                setattr(collective_ops, name, self._wrap(name, original))
        return self

    def __exit__(self, *exc: object) -> None:
        from tensorflow.python.ops import collective_ops

        for name, original in self._originals.items():
            setattr(collective_ops, name, original)

    def _wrap(self, name: str, original: Callable) -> Callable:
        def record(*args: Any, **kwargs: Any) -> Any:
            size = kwargs.get("group_size", args[1] if len(args) > 1 and name != "all_reduce_v3" else None)
            self.seen.append((name, size if isinstance(size, int) else None))
            return original(*args, **kwargs)

        return record


def sum_in_task(answer: Callable[[float], Any], values: dict[str, float]) -> dict[str, Any]:
    """Run in each worker: call ``answer`` with this task's value only, watching its all-reduces.

    The other workers' values are removed from ``values`` before the answer runs, so nothing the
    answer can reach holds them. Returns ``{"sum": what the answer returned, "all_reduces": [...]}``.

    Example::

        cluster.run(sum_in_task, args=(sum_over_workers, {"worker:0": 17.0, "worker:1": 4.0}))
    """
    mine = values[dtfkit.this_task().name]
    values.clear()
    with _CollectiveWatch() as watch:
        got = answer(mine)
    return {"sum": got, "all_reduces": watch.seen}


class _StepWatch:
    """In the chief, around the answer's call: records each function scheduled with
    ``ClusterCoordinator.schedule`` (its ``RemoteValue``, in ``scheduled``) and each variable
    created (in ``variables``). The coordinator runs a scheduled function on a worker, never in the
    chief; a ``RemoteValue`` that fetches without an error ran there. Its methods are called under
    the answer (by the answer's ``schedule`` calls and by TensorFlow's variable creation): the guard
    allows them (a stand-in of the check's own chapter).

    Example::

        with _StepWatch() as watch:
            report = answer(steps)
        len(watch.scheduled)      # steps, for an answer that schedules each step
    """

    def __init__(self) -> None:
        self.scheduled: list[Any] = []
        self.variables: list[Any] = []
        self._original: Callable | None = None
        self._scope: Any = None

    def __enter__(self) -> _StepWatch:
        import tensorflow as tf

        coordinator = tf.distribute.coordinator.ClusterCoordinator
        self._original = coordinator.schedule
        coordinator.schedule = self._wrap_schedule(self._original)
        self._scope = tf.variable_creator_scope(self._create)
        self._scope.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        import tensorflow as tf

        self._scope.__exit__(None, None, None)
        tf.distribute.coordinator.ClusterCoordinator.schedule = self._original

    def _wrap_schedule(self, original: Callable) -> Callable:
        def schedule(coordinator: Any, fn: Callable, args: Any = None, kwargs: Any = None) -> Any:
            remote = original(coordinator, fn, args=args, kwargs=kwargs)
            self.scheduled.append(remote)
            return remote

        return schedule

    def _create(self, next_creator: Callable, **kwargs: Any) -> Any:
        variable = next_creator(**kwargs)
        self.variables.append(variable)
        return variable


def _scalar(variable: Any) -> int | None:
    """A variable's value as a whole number, read now; None for anything else."""
    try:
        value = variable.read_value().numpy()
    except Exception:  # noqa: BLE001 - a variable that cannot be read here holds no count
        return None
    if getattr(value, "shape", None) != () or getattr(value.dtype, "kind", "") not in "iu":
        return None
    return int(value)


def count_in_chief(answer: Callable[[int], Any], steps: int) -> dict[str, Any]:
    """Run in the chief: call ``answer(steps)``, then report what the chief saw it do.

    Returns ``{"answer": what it returned, "scheduled": functions it scheduled, "ran": how many of
    them ran on a worker without an error, "on_ps": [(device, value) of each whole-number scalar
    variable it created on a parameter server, read after it returned]}``.

    Example::

        cluster.run(count_in_chief, args=(count_steps, 57), on="chief:0")
    """
    with _StepWatch() as watch:
        got = answer(steps)
    ran = 0
    for remote in watch.scheduled:
        try:
            remote.fetch()
        except Exception:  # noqa: BLE001 - a step that failed did not run to its end
            continue
        ran += 1
    on_ps = []
    for variable in watch.variables:
        device = str(getattr(variable, "device", ""))
        value = _scalar(variable) if "/job:ps" in device else None
        if value is not None:
            on_ps.append((device, value))
    return {"answer": got, "scheduled": len(watch.scheduled), "ran": ran, "on_ps": on_ps}
