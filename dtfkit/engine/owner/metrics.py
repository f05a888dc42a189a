"""Metric events sent by tasks with ``dtfkit.report(...)``, kept for tables and plots.

Example::

    >>> log = MetricLog()
    >>> log.add("worker:0", {"time": 1.0, "step": 1, "loss": 2.5})
    >>> log.add("worker:1", {"time": 1.1, "step": 2, "loss": 2.0})
    >>> [r["loss"] for r in log.rows(task="worker:1")]
    [2.0]
    >>> log.series("loss")["worker:0"]
    ([1], [2.5])
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from dtfkit.i18n import _


class MetricLog:
    """Thread-safe list of ``{"task", "time", "step", ...}`` events, oldest first."""

    def __init__(self) -> None:
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self.listeners: list[Callable[[dict[str, Any]], None]] = []

    def add(self, task: str, event: dict[str, Any]) -> None:
        row = {"task": task, **event}
        with self._lock:
            self._rows.append(row)
            self._arrived.notify_all()
        for listener in list(self.listeners):
            listener(row)

    def rows(self, task: str | None = None, since: float | None = None) -> list[dict[str, Any]]:
        """Events, optionally of one task and/or at or after a time (``time.time()``)."""
        with self._lock:
            rows = list(self._rows)
        if task is not None:
            rows = [r for r in rows if r["task"] == task]
        if since is not None:
            rows = [r for r in rows if r["time"] >= since]
        return rows

    def series(
        self, y: str, x: str = "step", since: float | None = None
    ) -> dict[str, tuple[list[Any], list[Any]]]:
        """Per task, the (x values, y values) of events that have both fields (what the tasks reported)."""
        out: dict[str, tuple[list[Any], list[Any]]] = {}
        for r in self.rows(since=since):
            if y in r and x in r:
                xs, ys = out.setdefault(r["task"], ([], []))
                xs.append(r[x])
                ys.append(r[y])
        return out

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float, since: float | None = None
    ) -> dict[str, Any]:
        """Block until an event satisfying ``predicate`` arrives (or has); return it.

        ``since`` (a ``time.time()`` value, e.g. ``handle.submitted``) ignores older
        events, so an earlier run's events cannot match. Raises ``TimeoutError``
        after ``timeout`` seconds. Example::

            handle = cluster.submit(train)
            cluster.metrics.wait_for(lambda row: row.get("step", 0) >= 100, 60, since=handle.submitted)
        """
        deadline = time.monotonic() + timeout
        seen = 0
        with self._arrived:
            while True:
                for row in self._rows[seen:]:
                    if (since is None or row["time"] >= since) and predicate(row):
                        return row
                seen = len(self._rows)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no metric event matched within {timeout:g} s ({seen} events seen)")
                self._arrived.wait(remaining)

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)

    def to_pandas(self) -> Any:  # a pandas.DataFrame (pandas is optional, and untyped here)
        """The events as a pandas DataFrame (needs pandas)."""
        import pandas as pd

        return pd.DataFrame(self.rows())

    def plot(self, y: str = "loss", x: str = "step", ax: Any = None, since: float | None = None) -> Any:
        """Plot ``y`` against ``x`` (``"step"``, or ``"time"`` for wall time), one line per task.

        ``ax``: the matplotlib ``Axes`` to draw on (a new figure's when None); returns it."""
        import matplotlib.pyplot as plt

        if ax is None:
            ax = plt.subplots(figsize=(6, 3.5))[1]
        data = self.series(y, x, since=since)
        if x == "time" and data:
            t0 = min(xs[0] for xs, _ in data.values())
            data = {k: ([v - t0 for v in xs], ys) for k, (xs, ys) in data.items()}
        for task, (xs, ys) in sorted(data.items()):
            ax.plot(xs, ys, label=task, marker="." if len(xs) < 50 else None)
        ax.set_xlabel(_("wall time (s)") if x == "time" else x)
        ax.set_ylabel(y)
        if data:
            ax.legend()
        return ax
