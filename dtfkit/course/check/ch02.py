"""Checks for chapter 2 (between-graph replication)."""

from __future__ import annotations

import random
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import dtfkit
from dtfkit.course import classroom
from dtfkit.course.check._core import CheckResult, Rng, cluster, exercise, failed, passed
from dtfkit.course.task_side.ch02 import (
    _place,
    _worker,
)
from dtfkit.i18n import N_, _
from dtfkit.recipes.between_graph import UNEVEN_LAYERS, greedy_bytes, layer_variables


class _StandInConfig:
    """What the stand-in ``tf`` of the quick check builds instead of a ``ConfigProto``."""

    def __init__(self, device_filters: Any = (), **_: Any):
        self.device_filters = list(device_filters)


def _stand_in_tf() -> SimpleNamespace:
    return SimpleNamespace(compat=SimpleNamespace(v1=SimpleNamespace(ConfigProto=_StandInConfig)))


def _matches(device_filter: str, task: str) -> bool:
    """Whether a device filter (``/job:ps``, ``/job:worker/task:1``, ...) covers ``task`` (``worker:1``)."""
    job, index = task.split(":")
    fields = dict(p.split(":", 1) for p in device_filter.strip("/").split("/") if ":" in p)
    return fields.get("job", job) == job and fields.get("task", index) == index


def hidden_filters_case(rng: random.Random | None = None) -> tuple[int, list[str]]:
    """The hidden variant of 2.1, drawn from ``rng`` (by default seeded fresh every run): how many
    workers the quick look gives filters to, and the order in which worker:1 and worker:2 then train
    alone in the real run.

    Valid for every draw: a worker's filters must cover the ps and that worker and no other worker,
    whatever the number of workers (the reference's ``/job:ps`` + ``/job:worker/task:{i}`` does for
    any ``i``); and once the chief has exited, every non-chief worker with such filters trains alone,
    in any order, while one whose session waits for worker:0 hangs. The real run keeps the
    visible case's cluster (1 ps + 3 workers): no more processes.

    >>> hidden_filters_case(random.Random(1)) == hidden_filters_case(random.Random(1))
    True
    """
    rng = rng if rng is not None else random.Random()
    alone = ["worker:1", "worker:2"]
    rng.shuffle(alone)
    return rng.randint(5, 12), alone


def _quick_filters_problem(session_config: Callable, workers: int = 4) -> CheckResult | None:
    """The device filters of every worker of a 1 ps + ``workers`` cluster, read with a stand-in
    ``tf``: a failed result for a clear mistake, None otherwise (or when the answer uses more of ``tf``)."""
    tasks = ["ps:0"] + [f"worker:{i}" for i in range(workers)]
    for i in range(workers):
        me = f"worker:{i}"
        try:
            config = session_config(_stand_in_tf(), "worker", i)
            filters = [str(f) for f in (config.device_filters if config is not None else [])]
        except (AttributeError, TypeError):
            return None
        if not filters:
            return failed(
                _(
                    "{me} gets no device filters: its session needs every task of the cluster, so it waits for a worker that has exited"
                ).format(me=me),
                _("look at device_filters: which tasks does a worker's session really need?"),
            )
        seen = [t for t in tasks if any(_matches(f, t) for f in filters)]
        others = [t for t in seen if t.startswith("worker:") and t != me]
        if me not in seen:
            return failed(
                _(
                    "{me}'s device filters {filters} leave out {me} itself: its own ops have nowhere to run"
                ).format(me=me, filters=filters),
                _("each worker's filters must name that worker"),
            )
        if others:
            return failed(
                _(
                    "{me}'s device filters {filters} also cover {join_others}: its session would wait for them (the check tries {workers} workers)"
                ).format(me=me, filters=filters, join_others=_(", ").join(others), workers=workers),
                _("a worker's session should need no other worker"),
            )
        if "ps:0" not in seen:
            return failed(
                _("{me}'s device filters {filters} leave out the ps, where the variables live").format(
                    me=me, filters=filters
                ),
                _("keep the parameter servers in the filter"),
            )
    return None


@exercise("2.1", "Fix the non-chief hang", reads=("tf", None, "task_index"), varies=N_("other workers"))
def device_filters(session_config: Callable, *, hidden: bool = False, rng: Rng = None) -> CheckResult:
    """Read the filters ``session_config`` gives 4 workers; then, on 1 ps + 3 workers, train worker:0
    (the chief), stop it, and train worker:2 alone (``hidden``: the filters of 5 to 12 workers, then
    worker:1 and worker:2 alone in an order drawn fresh, see ``hidden_filters_case``; ``rng`` for tests).

    Example::

        check.ch02.device_filters(session_config)
    """
    workers, alone_tasks = hidden_filters_case(rng) if hidden else (4, ["worker:2"])
    problem = _quick_filters_problem(session_config)
    if problem is None and workers != 4:
        problem = _quick_filters_problem(session_config, workers)
    if problem is not None:
        return problem
    steps = classroom.scaled(40, minimum=10)
    with cluster(ps=1, workers=3) as c:
        chief = c.run(
            _worker,
            args=(session_config,),
            kwargs={"steps": steps, "run_name": "ex21"},
            on="worker:0",
            timeout=120,
        )["worker:0"]
        c.kill("worker", 0)  # the tutorial script's chief exits when its training is done
        for k, task in enumerate(alone_tasks, start=2):
            try:
                alone = c.run(
                    _worker,
                    args=(session_config,),
                    kwargs={"steps": k * steps, "run_name": "ex21"},
                    on=task,
                    timeout=45,  # a correct answer needs a few seconds, even on a loaded 2-core machine
                )[task]
            except dtfkit.TaskTimeout:
                return failed(
                    _(
                        "{task} never trained: its session waits for worker:0, which has exited (worker:0's device_filters were {chief_filters})"
                    ).format(task=task, chief_filters=chief["filters"] or _("not set")),
                    _("look at device_filters: which tasks does a worker's session really need?"),
                )
            filters = alone["filters"]
            if not any(_matches(f, "ps:0") for f in filters):
                return failed(
                    _("{task} trained but its filters {filters} leave out the ps").format(
                        task=task, filters=filters
                    ),
                    _("keep the ps in the filter"),
                )
            if alone["local_steps"] < 1:
                return failed(
                    _("{task} opened its session but took no step").format(task=task),
                    _("is StopAtStepHook's last_step reached?"),
                )
    return passed(  # the tasks sorted: the line does not depend on the hidden draw's order
        _(
            "{alone_tasks} trained alone after worker:0 had exited: a worker's session no longer waits for other workers"
        ).format(alone_tasks=_(" and ").join(sorted(alone_tasks)))
    )


# (layers, num_ps) the text never names, placed with stand-in variables before any cluster starts.
PLACE_CASES = (((64, 512, 16, 512, 10), 3), ((64, 300, 300, 40, 10), 4), ((64, 128, 1024, 10), 2))
HINT_BYTES = N_(
    "count bytes, not variables (bg.variable_bytes(op)): which ps should the next variable go to?"
)


def _balance_problem(loads: list[int], sizes: list[int], num_ps: int, case: str) -> CheckResult | None:
    best = max(greedy_bytes(sizes, num_ps))
    if max(loads) <= best * 1.05:
        return None
    shown = ", ".join(f"ps:{i} {b / 1e3:.0f} kB" for i, b in enumerate(loads))
    return failed(
        _(
            "{case}: the busiest ps holds {max_loads_1e3:.0f} kB, greedy-by-bytes manages {best_1e3:.0f} kB ({shown})"
        ).format(case=case, max_loads_1e3=max(loads) / 1e3, best_1e3=best / 1e3, shown=shown),
        _(HINT_BYTES),
    )


def _fresh_place_case(rng: random.Random, max_ps: int = 4) -> tuple[tuple[int, ...], int]:
    """A model and a number of ps drawn from ``rng``: no fixed list to place by hand."""
    hidden = tuple(rng.randint(8, 1024) for _ in range(rng.randint(2, 4)))
    return (64, *hidden, 10), rng.randint(2, max_ps)


def hidden_place_case(rng: random.Random | None = None) -> tuple[tuple[int, ...], int]:
    """The model and number of ps (2 or 3) that 2.2's hidden real run places, drawn from ``rng``
    (by default seeded fresh every run).

    Valid for every draw: the check compares the busiest ps with greedy-by-bytes over the sizes
    TensorFlow itself reports for the variables, in the order they were built (the order
    ``replica_device_setter`` asks the strategy in). Greedy's loads, as a multiset, do not depend on
    how ties are broken (tied ps are interchangeable), so a right answer meets the bound exactly for
    any widths. A wrong one (counting variables, round-robin) need not fail every draw: the visible
    and quick cases catch those; the draw is there so that no list of cases can be answered by hand.
    Only the graph is built, as before (kernels of at most 1024 x 1024 floats, 4 MB); at most 3 ps,
    as the fixed case had: no more processes.

    >>> hidden_place_case(random.Random(1)) == hidden_place_case(random.Random(1))
    True
    """
    return _fresh_place_case(rng if rng is not None else random.Random(), max_ps=3)


def _quick_placement_problem(ps_strategy: Callable, rng: random.Random | None = None) -> CheckResult | None:
    """Place stand-in variables of other models on other numbers of ps: a failed result or None."""
    fresh = _fresh_place_case(rng if rng is not None else random.Random())
    for layers, num_ps in (*PLACE_CASES, fresh):
        variables = layer_variables(layers)
        try:
            choose = ps_strategy(num_ps)
            tasks = [choose(v) for v in variables]
        except (AttributeError, TypeError):
            return None  # the answer reads more of the op than a stand-in has: the real run decides
        case = f"layers {list(layers)} on {num_ps} ps"
        if not all(isinstance(t, int) and 0 <= t < num_ps for t in tasks):
            return failed(
                _("{case}: ps_strategy chose {tasks_named}").format(
                    case=case, tasks_named=sorted(set(map(repr, tasks)))
                ),
                _("ps_strategy must return a ps task index (0 .. num_ps - 1)"),
            )
        loads = [0] * num_ps
        for v, t in zip(variables, tasks, strict=True):
            loads[t] += v.nbytes
        problem = _balance_problem(loads, [v.nbytes for v in variables], num_ps, case)
        if problem is not None:
            return problem
    return None


@exercise("2.2", "Place variables by bytes", allowed=("dtfkit.recipes.between_graph.variable_bytes",))
def greedy_placement(ps_strategy: Callable, *, hidden: bool = False, rng: Rng = None) -> CheckResult:
    """Place other models on 2 to 4 ps with ``ps_strategy(num_ps)`` (stand-in variables, one model
    drawn fresh), then the chapter's uneven model on 2 ps in a worker (``hidden``: another model on 2
    or 3 ps, drawn fresh, see ``hidden_place_case``; ``rng`` for tests); the busiest ps must hold no
    more bytes than greedy-by-bytes gives it.

    Example::

        check.ch02.greedy_placement(ps_strategy)
    """
    problem = _quick_placement_problem(ps_strategy, rng)
    if problem is not None:
        return problem
    cases = [(UNEVEN_LAYERS, 2)] + ([hidden_place_case(rng)] if hidden else [])
    with cluster(ps=max(n for _, n in cases), workers=1) as c:
        placed = [
            c.run(_place, args=(ps_strategy, layers, n), on="worker:0", timeout=120)["worker:0"]
            for layers, n in cases
        ]
    for (layers, num_ps), got in zip(cases, placed, strict=True):
        loads = [0] * num_ps
        for name, size, job, task in got["variables"]:
            if job != "ps" or task is None:
                return failed(
                    _("variable {name} was placed on /job:{job}, not on a ps").format(name=name, job=job),
                    _("ps_strategy must return a ps task index (0 .. num_ps - 1)"),
                )
            loads[task] += size
        sizes = [size for _, size, _, _ in got["variables"]]
        problem = _balance_problem(loads, sizes, num_ps, f"layers {list(layers)} on {num_ps} ps, in a worker")
        if problem is not None:
            return problem
    return passed(
        _(
            "in a worker and for other models on 2 to 4 ps, the busiest ps held no more than greedy-by-bytes gives it"
        )
    )
