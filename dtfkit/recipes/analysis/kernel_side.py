"""Runs in the notebook kernel: what a run's metric rows and step records say (order, interleaving,
staleness, shares, pace), from results the tasks returned.

Never imports TensorFlow; this recipe has no task side: it works on what runs returned.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

ORDERS = ("time", "step")


# --------------------------------------------------------------- interleaving
def step_order(
    rows: Iterable[dict[str, Any]], tasks: Collection[str] | None = None, by: str = "time"
) -> list[str]:
    """The task of each training step (rows with a ``step``), in order of ``by``.

    ``by="time"``: when the step was reported; ``by="step"``: its global step (rows
    with the same global step, as in sync training, keep their time order). ``tasks``
    keeps only those tasks (None: every task).

    Example::

        >>> step_order([{"task": "w1", "time": 1, "step": 1}, {"task": "w0", "time": 2, "step": 0}], by="step")
        ['w0', 'w1']
    """
    if by not in ORDERS:
        raise ValueError(f"by must be one of {ORDERS}, not {by!r}")
    steps = [r for r in rows if "step" in r and (tasks is None or r["task"] in tasks)]
    steps.sort(key=lambda r: r["time"])
    if by == "step":
        steps.sort(key=lambda r: r["step"])  # stable: ties stay in time order
    return [r["task"] for r in steps]


def interleavings(
    rows: Iterable[dict[str, Any]], tasks: Collection[str] | None = None, by: str = "time"
) -> int:
    """How often consecutive steps switch from one task to another (0: the tasks never
    alternated). ``tasks`` and ``by`` as in ``step_order``.

    Example::

        >>> interleavings([{"task": t, "time": i, "step": i} for i, t in enumerate(["w0", "w0", "w1", "w0"])])
        2
    """
    order = step_order(rows, tasks, by)
    return sum(1 for a, b in zip(order, order[1:], strict=False) if a != b)


def interleaving_fraction(
    rows: Iterable[dict[str, Any]], tasks: Collection[str] | None = None, by: str = "time"
) -> float:
    """``interleavings`` over the number of consecutive pairs: 0.0 when each task's steps
    come in one block, about 0.5 for two tasks mixed at random, 1.0 when they strictly
    alternate (0.0 for fewer than two steps).

    Example::

        >>> interleaving_fraction([{"task": t, "time": i, "step": i} for i, t in enumerate("abba")])
        0.6666666666666666
    """
    order = step_order(rows, tasks, by)
    if len(order) < 2:
        return 0.0
    return sum(1 for a, b in zip(order, order[1:], strict=False) if a != b) / (len(order) - 1)


def overlap_seconds(rows: Iterable[dict[str, Any]], a: str = "worker:0", b: str = "worker:1") -> float:
    """Length of the wall-time window in which both ``a`` and ``b`` were stepping.

    Example::

        >>> overlap_seconds([{"task": "worker:0", "time": t, "step": 1} for t in (0, 2)]
        ...                 + [{"task": "worker:1", "time": t, "step": 1} for t in (1, 3)])
        1
    """
    times: dict[str, list[float]] = {a: [], b: []}
    for r in rows:
        if r["task"] in times and "step" in r:
            times[r["task"]].append(r["time"])
    if not times[a] or not times[b]:
        return 0.0
    return max(0.0, min(max(times[a]), max(times[b])) - max(min(times[a]), min(times[b])))


# ----------------------------------------------------------------- staleness
def staleness(read: int, applied: int) -> int:
    """Updates that landed between a step's read of the global step (``read``) and the
    global step its own update made (``applied``): ``applied - read - 1``, never below 0.

    Example::

        >>> staleness(read=4, applied=5), staleness(read=4, applied=8)
        (0, 3)
    """
    return max(0, applied - read - 1)


# -------------------------------------------------------------------- shares
def shares(counts: Mapping[str, float]) -> dict[str, float]:
    """Each key's fraction of the total (all 0.0 when the total is 0), in the same order.

    Example::

        >>> shares({"worker:0": 0, "worker:1": 0})
        {'worker:0': 0.0, 'worker:1': 0.0}
    """
    total = sum(counts.values()) or 1
    return {key: value / total for key, value in counts.items()}


def participation(updates: Sequence[Collection[str]], task: str, last: float = 0.5) -> float:
    """The fraction of the last ``last`` of ``updates`` (each: the tasks whose gradients
    it averaged, in update order) that include ``task`` (1.0: it was in every one).

    Example::

        >>> participation([["w0"], ["w0"], ["w0", "w1"], ["w0", "w1"]], "w1", last=0.5)
        1.0
    """
    tail = list(updates)[int(len(updates) * (1 - last)) :]
    return sum(1 for tasks in tail if task in tasks) / max(1, len(tail))


# ---------------------------------------------------------------------- pace
def steady_time(rows: Iterable[dict[str, Any]], default: float = 0.0) -> float:
    """When every task had reported at least once: the latest of the tasks' first rows
    (``default`` when there are none). A worker's first step sets its session up, so the
    pace is only worth reading from here on.

    Example::

        >>> steady_time([{"task": "w0", "time": 1.0}, {"task": "w1", "time": 1.5}, {"task": "w0", "time": 2.0}])
        1.5
    """
    firsts: dict[str, float] = {}
    for r in rows:
        firsts[r["task"]] = min(firsts.get(r["task"], r["time"]), r["time"])
    return max(firsts.values()) if firsts else default


def steps_per_sec(rows: Iterable[dict[str, Any]]) -> float:
    """Global steps per second from the moment every task had made its first step (NaN
    when there is no span to measure).

    Example::

        >>> steps_per_sec([{"task": "w0", "time": 0.0, "step": 1}, {"task": "w1", "time": 1.0, "step": 2},
        ...                {"task": "w0", "time": 3.0, "step": 8}])
        3.0
    """
    steps = sorted((r for r in rows if "step" in r), key=lambda r: r["time"])
    firsts: dict[str, dict] = {}
    for r in steps:
        firsts.setdefault(r["task"], r)
    if not firsts or len(steps) < 2:
        return float("nan")
    t0 = max(r["time"] for r in firsts.values())
    base = max(r["step"] for r in steps if r["time"] <= t0)
    span = steps[-1]["time"] - t0
    return (steps[-1]["step"] - base) / span if span > 0 else float("nan")


def update_interval(times: Iterable[float], last: float = 1.0, how: str = "median") -> float:
    """Seconds between consecutive update ``times`` over the last ``last`` of them: the
    ``"median"`` (the upper one of an even count) or the ``"mean"`` gap; NaN with fewer
    than two.

    Example::

        >>> update_interval([0.0, 1.0, 3.0, 4.0]), update_interval([0.0, 1.0, 3.0, 4.0], how="mean")
        (1.0, 1.3333333333333333)
    """
    ends = sorted(times)
    ends = ends[int(len(ends) * (1 - last)) :]
    gaps = sorted(b - a for a, b in zip(ends, ends[1:], strict=False))
    if not gaps:
        return float("nan")
    return gaps[len(gaps) // 2] if how == "median" else sum(gaps) / len(gaps)


def update_window(
    update_times: Mapping[int, float], first: int, last: int, origin: float = 0.0, pad: float = 0.15
) -> tuple[float, float]:
    """An x range (seconds from ``origin``) from just before update ``first`` (when update
    ``first - 1`` was done; ``origin`` for the first update) to just after update ``last``
    was done, widened by ``pad`` of its length on both sides. ``update_times`` maps an
    update's number (its global step, 1-based) to when it was done.

    Example::

        >>> update_window({1: 10.0, 2: 11.0, 3: 12.0}, 2, 3, origin=10.0, pad=0.5)
        (-1.0, 3.0)
    """
    lo = update_times[first - 1] if first > 1 else origin
    hi = update_times[last]
    margin = pad * (hi - lo)
    return lo - origin - margin, hi - origin + margin
