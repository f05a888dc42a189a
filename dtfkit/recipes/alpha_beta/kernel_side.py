"""Runs in the notebook kernel: the α–β model's times, the crossover size, the fastest method, its fit
to measured times, and the plot.

Never imports TensorFlow; this recipe has no task side of its own: ``measure`` times the syncs on a cluster
with ``allreduce``'s task-side ``time_sync``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from dtfkit import fonts
from dtfkit.i18n import _, language
from dtfkit.recipes import allreduce
from dtfkit.recipes.allreduce import METHODS


def _check_model_args(method: str, n: int, alpha_s: float, beta_s_per_byte: float) -> None:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, not {method!r}")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n (how many workers synchronise) must be an integer >= 1, not {n!r}")
    for name, value in (("alpha_s", alpha_s), ("beta_s_per_byte", beta_s_per_byte)):
        if not _is_number(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def model_terms(method: str, n: int, alpha_s: float, beta_s_per_byte: float) -> tuple[float, float]:
    """The model as a line in ``S``: ``(fixed seconds, seconds per byte of gradient)``.

    >>> model_terms("ring", 3, 0.001, 1e-8)    # 4 rounds of α; 4 chunks of S/3 on every link
    (0.004, 1.3333333333333334e-08)
    """
    _check_model_args(method, n, alpha_s, beta_s_per_byte)
    if method == "ps":
        return 2 * alpha_s, 2 * n * beta_s_per_byte
    if n == 1:
        return 0.0, 0.0  # one worker, its own shard or ring: nothing crosses a link
    if method == "sharded_ps":
        return 2 * alpha_s, 2 * (n - 1) * beta_s_per_byte / n
    return 2 * (n - 1) * alpha_s, 2 * (n - 1) * beta_s_per_byte / n


def alpha_beta_time(method: str, n: int, size_bytes: float, alpha_s: float, beta_s_per_byte: float) -> float:
    """Seconds for one synchronisation of a ``size_bytes`` gradient over ``n`` workers (module docstring).

    >>> round(alpha_beta_time("ps", 3, 300_000, 0.001, 1e-8), 6)           # 2α + 2·n·S·β
    0.02
    >>> round(alpha_beta_time("sharded_ps", 3, 300_000, 0.001, 1e-8), 6)   # 2α + 2(n-1)·S·β/n
    0.006
    >>> round(alpha_beta_time("ring", 3, 300_000, 0.001, 1e-8), 6)         # 2(n-1)·(α + S·β/n)
    0.008
    """
    if not _is_number(size_bytes) or size_bytes < 0:
        raise ValueError(f"size_bytes must be a finite number >= 0, not {size_bytes!r}")
    fixed, per_byte = model_terms(method, n, alpha_s, beta_s_per_byte)
    return fixed + per_byte * size_bytes


def crossover_size(
    method_a: str, method_b: str, n: int, *, alpha_s: float, beta_s_per_byte: float
) -> float | None:
    """The gradient size (bytes) at which ``method_a`` and ``method_b`` take the same time, or
    ``None`` when they never swap for a size above 0 (one is never slower, or they coincide).

    Below it the method with fewer rounds is faster, above it the one with fewer bytes on
    the busiest link. For the ps and the ring:
    ``S* = n·(n - 2)·α / ((n² - n + 1)·β)``.

    >>> round(crossover_size("ps", "ring", 3, alpha_s=0.001, beta_s_per_byte=1e-8), 2)
    42857.14
    >>> crossover_size("sharded_ps", "ring", 3, alpha_s=0.001, beta_s_per_byte=1e-8) is None
    True
    """
    fixed_a, slope_a = model_terms(method_a, n, alpha_s, beta_s_per_byte)
    fixed_b, slope_b = model_terms(method_b, n, alpha_s, beta_s_per_byte)
    if slope_a == slope_b:
        return None
    size = (fixed_b - fixed_a) / (slope_a - slope_b)
    return size if size > 0 else None


def fastest(rows: Iterable[dict[str, Any]], key: str = "comm_s") -> dict[tuple[str, int], str]:
    """The fastest method for each (delay, size) of ``measure``'s rows, by ``key``.

    >>> fastest([
    ...     {"delay": "20ms", "bytes": 1200, "method": "ps", "comm_s": 0.06},
    ...     {"delay": "20ms", "bytes": 1200, "method": "ring", "comm_s": 0.10},
    ... ])
    {('20ms', 1200): 'ps'}
    """
    best: dict[tuple[str, int], tuple[float, str]] = {}
    for r in rows:
        where = (r["delay"], r["bytes"])
        if where not in best or r[key] < best[where][0]:
            best[where] = (r[key], r["method"])
    return {where: method for where, (_, method) in sorted(best.items())}


# ------------------------------------------------------------------------ measuring
def _check_measure_args(delays: Sequence[str], sizes: Sequence[int], n: int, link: str, steps: int) -> None:
    """Refuse bad input before any cluster starts, naming the bad value."""
    from dtfkit.engine.platform import netns

    if not isinstance(n, int) or isinstance(n, bool) or n < 2:
        raise ValueError(f"n (how many workers synchronise) must be an integer >= 2, not {n!r}")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, not {steps!r}")
    if isinstance(delays, str) or not delays:
        raise ValueError(f"delays must be a list of delays such as ['1ms', '20ms'], not {delays!r}")
    for delay in delays:
        netns.parse_delay(delay)  # ValueError naming the value
    if isinstance(sizes, str | int) or not sizes:
        raise ValueError(f"sizes must be a list of gradient sizes in bytes, not {sizes!r}")
    for size in sizes:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1 or size % (4 * n):
            raise ValueError(
                f"size {size!r} is not a whole number of float32 chunks: each size must be a positive "
                f"multiple of 4·n = {4 * n} bytes (n float32 chunks of equal length)"
            )
    netns.parse_rate(link)


def measure(
    delays: Sequence[str] = ("1ms", "20ms"),
    sizes: Sequence[int] = (1_200, 12_000, 120_000, 1_200_000),
    *,
    n: int = 3,
    link: str = "100mbit",
    methods: Sequence[str] = METHODS,
    steps: int = 3,
    timeout: float = 300.0,
    cluster_options: dict[str, Any] | None = None,
    trace: bool = False,
) -> list[dict[str, Any]]:
    """In the notebook: time every method on ``LocalCluster(ps=1, workers=n, link=link, delay=d)``
    for every ``d`` in ``delays`` (one cluster after another) and every gradient size in
    ``sizes`` (bytes); ``allreduce.time_sync`` runs the steps in a client task.

    Returns plain rows, one per delay, size and method: ``delay``, ``d_s``, ``link``,
    ``rate_bytes_per_s``, ``method``, ``n``, ``bytes``, ``seconds`` (each step),
    ``median_s``, ``empty_s`` (the median of the empty steps of that size: no transfer)
    and ``comm_s`` = ``median_s - empty_s``, the communication the model prices. With
    ``trace=True`` every row also has ``transfers``, the transfer records of one more step,
    traced after the timed ones (``allreduce.time_sync``), and ``comm_span_s``, the time from
    the first of its tensors being ready to the last one's arrival: at least the method's
    rounds × d, whatever the machine's load, since each round crosses a link that holds it for d.
    Bad arguments raise ``ValueError`` before anything starts. The defaults take about a
    minute on 2 cores (most of it the two clusters' starts).

    Example::

        rows = measure(delays=("1ms", "20ms"), sizes=(1_200, 1_200_000))
        fastest(rows)     # {('1ms', 1200): 'sharded_ps', ..., ('20ms', 1200000): 'ring'}
    """
    _check_measure_args(delays, sizes, n, link, steps)
    if not isinstance(trace, bool):
        raise ValueError(
            f"trace must be True (trace one more step per method and size) or False, not {trace!r}"
        )
    for method in methods:
        _check_model_args(method, n, 0.0, 0.0)
    out = []
    for delay in delays:
        runs = [(methods, n, [size // 4 for size in sizes])]
        for r in _communication_on(delay, link, n, runs, steps, timeout, cluster_options, trace):
            out.append({**r, **({"comm_span_s": comm_span_s(r["transfers"])} if trace else {})})
    return out


def _communication_on(
    delay: str,
    link: str,
    workers: int,
    runs: Iterable[tuple[Sequence[str], int, Sequence[int]]],
    steps: int,
    timeout: float,
    cluster_options: dict[str, Any] | None,
    trace: bool = False,
) -> list[dict[str, Any]]:
    """On ``LocalCluster(ps=1, workers=workers, link=link, delay=delay)``: ``allreduce.time_sync``
    of every ``(methods, n, floats)`` of ``runs`` in a client task, as ``communication`` rows."""
    import dtfkit

    options = {"progress": False, "name": None, **(cluster_options or {})}
    out = []
    with dtfkit.LocalCluster(ps=1, workers=workers, link=link, delay=delay, **options) as cluster:
        for methods, n, floats in runs:
            (rows,) = cluster.run(
                allreduce.time_sync,
                args=(tuple(methods), n, floats),
                kwargs={"steps": steps, "timeout_ms": int(1000 * timeout), "trace": trace},
                on="client",
                timeout=timeout,
            ).values()
            out += communication(rows, delay, link)
    return out


def communication(rows: Iterable[dict[str, Any]], delay: str, link: str) -> list[dict[str, Any]]:
    """``allreduce.time_sync``'s rows of one cluster (``link=link, delay=delay``) as communication:
    each method's row with ``delay``, ``d_s``, ``link``, ``rate_bytes_per_s``, ``empty_s`` (the
    median empty step of its size: the same calls, nothing crosses a link) and ``comm_s`` =
    ``median_s - empty_s``; the empty steps' own rows are left out.

    >>> rows = [{"method": "none", "bytes": 8, "median_s": 0.004}, {"method": "ring", "bytes": 8, "median_s": 0.01}]
    >>> [(r["method"], round(r["comm_s"], 6), r["d_s"]) for r in communication(rows, "1ms", "100mbit")]
    [('ring', 0.006, 0.001)]
    """
    from dtfkit.engine.platform import netns

    rows = list(rows)
    empty = {r["bytes"]: r["median_s"] for r in rows if r["method"] == "none"}
    where = {
        "delay": delay,
        "d_s": netns.parse_delay(delay),
        "link": link,
        "rate_bytes_per_s": netns.parse_rate(link) / 8,
    }
    return [
        {**where, **r, "empty_s": empty[r["bytes"]], "comm_s": r["median_s"] - empty[r["bytes"]]}
        for r in rows
        if r["method"] != "none"
    ]


def comm_span_s(transfers: Iterable[dict[str, Any]]) -> float:
    """Seconds from the first tensor being ready on its sender to the last one's arrival.

    >>> comm_span_s([{"ready_us": 100, "end_us": 20_100}, {"ready_us": 20_200, "end_us": 40_300}])
    0.0402
    """
    rows = list(transfers)
    if not rows:
        return 0.0
    return (max(r["end_us"] for r in rows) - min(r["ready_us"] for r in rows)) / 1e6


# ------------------------------------------------------------------------- the plot
_COLOURS = {"ps": "tab:red", "sharded_ps": "tab:green", "ring": "tab:blue", "tree": "tab:purple"}


def plot_alpha_beta(
    n: int,
    alpha_s: float,
    beta_s_per_byte: float,
    *,
    sizes: Collection[float] | None = None,
    measured: Iterable[dict[str, Any]] | None = None,
    key: str = "comm_s",
    methods: Sequence[str] = METHODS,
    ax: Any = None,
    title: str | None = None,
) -> Any:
    """Time per synchronisation against gradient size, both axes logarithmic: the model's line
    for each method, ``measured`` rows (``measure``'s, of one delay) as points in the same
    colour (by ``key``; rows at or below 0 cannot be drawn on a log axis and are counted in
    a note), and the ps/ring crossover as a dotted vertical line.

    Uses matplotlib (imported here). Returns the axes; each model line's ``gid`` is
    ``"model:<method>"``, each method's points ``"measured:<method>"``, the crossover's
    ``"crossover"``.

    Example::

        ax = plot_alpha_beta(3, 0.02, 8e-8, measured=[r for r in rows if r["delay"] == "20ms"])
    """
    import matplotlib.pyplot as plt

    fonts.draw_in_the_language(language())  # the reader's language in the figure's words
    import numpy as np

    for method in methods:
        _check_model_args(method, n, alpha_s, beta_s_per_byte)
    measured = list(measured or [])
    if sizes is None:
        known = [r["bytes"] for r in measured] or [1e3, 1e7]
        sizes = np.geomspace(min(known) / 3, max(known) * 3, 200)
    if ax is None:
        ax = plt.subplots(figsize=(7, 4.5))[1]
    for method in methods:
        colour = _COLOURS.get(method)
        times = [alpha_beta_time(method, n, s, alpha_s, beta_s_per_byte) for s in sizes]
        ax.plot(
            sizes,
            times,
            color=colour,
            label=_("{method} (model)").format(method=method),
            gid=f"model:{method}",
        )
        points = [(r["bytes"], r[key]) for r in measured if r["method"] == method and r[key] > 0]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.scatter(
                xs,
                ys,
                color=colour,
                marker="o",
                label=_("{method} (measured)").format(method=method),
                gid=f"measured:{method}",
            )
    if "ps" in methods and "ring" in methods:
        where = crossover_size("ps", "ring", n, alpha_s=alpha_s, beta_s_per_byte=beta_s_per_byte)
        if where is not None:
            ax.axvline(
                where,
                color="0.4",
                linestyle=":",
                gid="crossover",
                label=_("ps = ring at {where:,.0f} B").format(where=where),
            )
    hidden = sum(1 for r in measured if r["method"] in methods and r[key] <= 0)
    if hidden:
        ax.annotate(
            _("{hidden} measured point(s) at or below 0 s not drawn").format(hidden=hidden),
            (0.02, 0.02),
            xycoords="axes fraction",
            fontsize=8,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(_("gradient size S (bytes)"))
    ax.set_ylabel(_("time per synchronisation (s)"))
    rate = f", 1/β = {1e-6 / beta_s_per_byte:g} MB/s" if beta_s_per_byte else ""
    ax.set_title(
        title or _("α–β model, n = {n}, α = {ms:g} ms{rate}").format(n=n, ms=alpha_s * 1000, rate=rate)
    )
    ax.legend(fontsize=8)
    return ax
