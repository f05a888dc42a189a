"""Runs in the notebook kernel: everything of the model (chapter 13), and ``measure``.

Never imports TensorFlow: ``measure`` times the algorithms with ``allreduce.time_sync`` in a client
task of one cluster per delay.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dtfkit import fonts
from dtfkit.i18n import _, language
from dtfkit.recipes.allreduce import ALGORITHMS, tree_parent
from dtfkit.recipes.alpha_beta.kernel_side import _COLOURS, _communication_on

#: What the fit finds, in this order; every one is in seconds (per round, per message, per byte).
PARAMS = ("alpha_s", "kappa_s", "mu_s", "beta_s_per_byte", "eta_s_per_byte", "gamma_s_per_byte")
#: The machine's CPU: every task of a dtfkit cluster runs on it, and it handles one message at a time.
MACHINE = ("cpu", "machine")
#: How a path's time is made: its counts of each parameter, of the link's delay d, and the seconds it
#: waits for a token bucket (known from the link's rate, not fitted).
TERMS = (*PARAMS, "d_s", "wait_s")


@dataclass(frozen=True)
class Step:
    """One node of an algorithm's graph: ``task`` sends ``nbytes`` to ``to``, or (``to`` None)
    adds up ``nbytes`` of its inputs; it starts when every step in ``after`` has ended."""

    task: str
    to: str | None
    nbytes: int
    after: tuple[int, ...] = ()


def _worker(i: int) -> str:
    return f"worker:{i}"


def steps(algorithm: str, n: int, size_bytes: int) -> list[Step]:
    """The messages and adds of one synchronisation of a ``size_bytes`` gradient over ``n`` workers,
    built as ``allreduce`` builds the graphs (``build_ps``, ``build_sharded_ps``, ``build_ring``,
    ``build_tree``). The bytes each task sends are ``allreduce.expected_bytes``'s.

    >>> [(s.task, s.to, s.nbytes) for s in steps("ps", 2, 800)]
    [('worker:0', 'ps:0', 800), ('worker:1', 'ps:0', 800), ('ps:0', None, 1600), ('ps:0', 'worker:0', 800), ('ps:0', 'worker:1', 800)]
    """
    _check_config(algorithm, n, size_bytes)
    out: list[Step] = []

    def add(step: Step) -> int:
        out.append(step)
        return len(out) - 1

    if algorithm == "ps":
        ins = [add(Step(_worker(i), "ps:0", size_bytes)) for i in range(n)]
        total = add(Step("ps:0", None, n * size_bytes, tuple(ins)))
        for i in range(n):
            add(Step("ps:0", _worker(i), size_bytes, (total,)))
    elif algorithm == "sharded_ps":
        chunk = size_bytes // n
        # In the order that lets every link send and receive at once (worker i to i + 1, then to
        # i + 2, ...): TCP shares a busy link among its flows, which ends at the same time.
        into: dict[int, list[int]] = {j: [] for j in range(n)}
        for off in range(1, n):
            for i in range(n):
                into[(i + off) % n].append(add(Step(_worker(i), _worker((i + off) % n), chunk)))
        summed = [add(Step(_worker(j), None, n * chunk, tuple(into[j]))) for j in range(n)]
        for off in range(1, n):
            for j in range(n):
                add(Step(_worker(j), _worker((j + off) % n), chunk, (summed[j],)))
    elif algorithm == "ring":
        chunk = size_bytes // n
        held: list[tuple[int, ...]] = [() for _ in range(n)]  # what worker i's next send waits for
        for _s in range(n - 1):  # reduce-scatter: send to the right, which adds it to its copy
            sends = [add(Step(_worker(i), _worker((i + 1) % n), chunk, held[i])) for i in range(n)]
            held = [(add(Step(_worker(i), None, 2 * chunk, (sends[(i - 1) % n],))),) for i in range(n)]
        for _s in range(n - 1):  # all-gather: pass the summed chunk on
            sends = [add(Step(_worker(i), _worker((i + 1) % n), chunk, held[i])) for i in range(n)]
            held = [(sends[(i - 1) % n],) for i in range(n)]
    else:  # tree
        up: dict[int, int] = {}
        root_sum: tuple[int, ...] = ()
        for i in reversed(range(n)):  # children before parents, as build_tree adds them
            kids = tuple(up[c] for c in (2 * i + 1, 2 * i + 2) if c < n)
            ready = (add(Step(_worker(i), None, (1 + len(kids)) * size_bytes, kids)),) if kids else ()
            parent = tree_parent(i)
            if parent is not None:
                up[i] = add(Step(_worker(i), _worker(parent), size_bytes, ready))
            else:
                root_sum = ready
        down: dict[int, tuple[int, ...]] = {0: root_sum}
        for i in range(1, n):  # parents before children
            parent = tree_parent(i)
            assert parent is not None  # only worker 0 has none
            down[i] = (add(Step(_worker(parent), _worker(i), size_bytes, down[parent])),)
    return out


def _check_config(algorithm: str, n: int, size_bytes: int) -> None:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, not {algorithm!r}")
    if not isinstance(n, int) or isinstance(n, bool) or not 2 <= n <= 64:
        raise ValueError(f"n (how many workers synchronise) must be an integer from 2 to 64, not {n!r}")
    if (
        not isinstance(size_bytes, int)
        or isinstance(size_bytes, bool)
        or size_bytes < 1
        or size_bytes % (4 * n)
    ):
        raise ValueError(
            f"size_bytes {size_bytes!r} is not n float32 chunks of equal length: pick a positive multiple "
            f"of 4·n = {4 * n}"
        )


@dataclass(frozen=True)
class Link:
    """What every task's link is set to: its one-way delay ``d_s``, its rate, and the token bucket's
    burst (bytes that pass at once after a pause: dtfkit's buckets hold 10 ms of traffic)."""

    d_s: float
    rate_bytes_per_s: float
    burst_bytes: float = 0.0

    @classmethod
    def of(cls, delay: str, link: str) -> Link:
        """The ``Link`` of ``LocalCluster(link=link, delay=delay)``.

        >>> Link.of("5ms", "1gbit")
        Link(d_s=0.005, rate_bytes_per_s=125000000.0, burst_bytes=1250000)
        """
        from dtfkit.engine.platform import netns

        rate = netns.parse_rate(link)
        return cls(netns.parse_delay(delay), rate / 8, netns.token_burst_bytes(rate))


@dataclass(frozen=True)
class Priced:
    """What ``price`` finds: the synchronisation's ``seconds``, and its critical path's ``counts``
    of each of ``TERMS`` (``seconds`` is their dot product with the parameters, d, and 1 for the
    seconds spent waiting for a token bucket)."""

    seconds: float
    counts: tuple[float, ...]


_Timed = tuple[float, tuple[float, ...]]  # a time, and the counts of the path that led to it


def _tick(seconds: float) -> float:
    """A time rounded to the picosecond, to order events: two events at the same time, one a rounding
    error later, keep their order (by index) when the parameters change by a rounding error."""
    return round(seconds, 12)


def _plus(timed: _Timed, *, at: Sequence[float], **more: float) -> _Timed:
    """``timed`` moved on by ``more`` (counts of TERMS by name); ``at`` holds what one count of each
    term costs (the parameters, d, and 1 for seconds), in TERMS order."""
    counts = list(timed[1])
    seconds = timed[0]
    for name, count in more.items():
        counts[TERMS.index(name)] += count
        seconds += count * at[TERMS.index(name)]
    return seconds, tuple(counts)


def _play(
    graph: Sequence[Step], params: Sequence[float] | np.ndarray, link: Link, *, tensorflow: bool = True
) -> Priced:
    """Play ``graph`` out on ``link``-s, one per task, and return the time of the synchronisation:
    each message and add costs what ``dtfkit.recipes.predict``'s docstring lists (the CPU, ``MACHINE``,
    then the links).

    With ``tensorflow`` (the default) the run is the one a TensorFlow session makes on the master of
    worker:0 (that docstring's last point): a receiver asks for each tensor when its piece
    starts, and the sender answers once the tensor is ready and the request has arrived; a task's
    piece ends when its last message has arrived. Less an empty step's ``2d``, that is the
    communication ``measure`` reports.
    Without ``tensorflow``: chapter 11's model (everything starts at once, nothing but ``α + d`` and
    the bytes costs; pass ``α = 0`` and ``β = 1/r``).

    >>> _play(steps("ring", 3, 1200), (0.001, 0.0, 0.0, 1e-6, 0.0, 0.0), Link(0.0, 1e6), tensorflow=False).seconds
    0.0056
    """
    at = (*params, link.d_s, 1.0)
    zero: _Timed = (0.0, (0.0,) * len(TERMS))
    d_late = _plus(zero, d_s=1, at=at) if tensorflow else zero
    starts = {task: zero if task == "worker:0" else d_late for s in graph for task in (s.task, s.to) if task}
    finish: list[_Timed] = [zero] * len(graph)
    free: dict[tuple[str, str], _Timed] = {}  # when a task's link (out or in) or its CPU is free next
    tokens: dict[tuple[str, str], tuple[float, float]] = {}  # a link end's bucket: (tokens, at time)
    waiting = [len(s.after) for s in graph]
    children: list[list[int]] = [[] for _ in graph]
    for i, s in enumerate(graph):
        for j in s.after:
            children[j].append(i)

    def ready_at(i: int) -> _Timed:
        s = graph[i]
        times = [finish[j] for j in s.after] + [starts[s.task]]
        if s.to is not None and tensorflow:
            times.append(_plus(starts[s.to], d_s=1, at=at))  # the receiver's request has arrived
        return max(times, key=lambda t: _tick(t[0]))

    heap: list[
        tuple[float, int, float, tuple[float, ...]]
    ] = []  # (the time to order by, step, its time, path)
    for i, s in enumerate(graph):
        if not s.after:
            ready, path = ready_at(i)
            heap.append((_tick(ready), i, ready, path))
    heapq.heapify(heap)
    ends: dict[str, _Timed] = {}
    while heap:
        _, i, ready, path = heapq.heappop(heap)
        s = graph[i]
        holds = [("out", s.task), ("in", s.to)] if s.to is not None else [("cpu", s.task)]
        start: _Timed = (ready, path)
        if s.to is not None:  # first the machine's CPU, which every task shares, then the links
            if MACHINE in free and _tick(free[MACHINE][0]) > _tick(start[0]):
                start = free[MACHINE]
            start = free[MACHINE] = _plus(start, mu_s=1, eta_s_per_byte=s.nbytes, at=at)
        for key in holds:  # a busy link or CPU: the path runs through whoever held it
            if key in free and _tick(free[key][0]) > _tick(start[0]):
                start = free[key]
        if s.to is not None:
            wait = 0.0
            if link.burst_bytes and tensorflow:
                for key in holds:
                    have, when = tokens.get(key, (link.burst_bytes, 0.0))
                    have = min(link.burst_bytes, have + (start[0] - when) * link.rate_bytes_per_s)
                    wait = max(wait, (s.nbytes - have) / link.rate_bytes_per_s)
            held = _plus(start, kappa_s=1, beta_s_per_byte=s.nbytes, wait_s=max(wait, 0.0), at=at)
            for key in holds:
                have, when = tokens.get(key, (link.burst_bytes, 0.0))
                have = min(link.burst_bytes, have + (held[0] - when) * link.rate_bytes_per_s)
                tokens[key] = (max(0.0, have - s.nbytes), held[0])
            end = _plus(held, alpha_s=1, d_s=1, at=at)
        else:
            held = end = _plus(start, gamma_s_per_byte=s.nbytes, at=at)
        for key in holds:
            free[key] = held
        finish[i] = end
        # A task's piece of the graph is done when its last add or arrival is; a send is done for
        # its sender as soon as the tensor is handed over (TensorFlow's _Send does not wait).
        for task, done in (
            (s.to or s.task, end),
            (s.task, max((finish[j] for j in s.after), default=starts[s.task])),
        ):
            if task not in ends or done[0] > ends[task][0]:
                ends[task] = done
        for child in children[i]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready, path = ready_at(child)
                heapq.heappush(heap, (_tick(ready), child, ready, path))
    if any(waiting):
        raise ValueError("an algorithm's graph has a cycle")
    if tensorflow:  # each remote piece's end reaches the master d later; an empty step takes 2d
        ends = {task: _plus(end, d_s=int(task != "worker:0"), at=at) for task, end in ends.items()}
    last = max(ends.values(), key=lambda t: t[0])
    if tensorflow:
        last = _plus(last, d_s=-2, at=at)
    return Priced(*last)


def price(graph: Sequence[Step], params: Sequence[float] | np.ndarray, link: Link) -> Priced:
    """The model's time for ``graph`` on ``link``: its latency and its bandwidth priced apart and
    added, as α–β adds them. The latency is how many ``d`` the run's critical path crosses when
    nothing else costs (``_play`` with every parameter 0); the rest is ``_play`` on an undelayed
    link. Played out together, a delay shifts when each task starts, and the one-message-at-a-time
    links then queue messages in an order TCP does not (TCP shares a busy link among its flows).

    >>> price(steps("ring", 4, 4800), (0.0,) * len(PARAMS), Link(0.001, 1e9)).counts[TERMS.index("d_s")]
    7.0
    """
    hops = _play(graph, (0.0,) * len(PARAMS), Link(1.0, math.inf)).counts[TERMS.index("d_s")]
    undelayed = _play(graph, params, Link(0.0, link.rate_bytes_per_s, link.burst_bytes))
    counts = list(undelayed.counts)
    counts[TERMS.index("d_s")] = hops
    return Priced(undelayed.seconds + hops * link.d_s, tuple(counts))


def predict(params: Sequence[float], algorithm: str, n: int, size_bytes: int, link: Link) -> float:
    """Seconds of communication the fitted model predicts for one synchronisation.

    >>> round(predict((0.0, 2e-4, 1.3e-4, 0.0, 1e-9, 0.0), "ps", 4, 1_200_000, Link.of("1ms", "1gbit")) * 1000, 1)
    63.3
    """
    return price(steps(algorithm, n, size_bytes), params, link).seconds


def plain_alpha_beta(algorithm: str, n: int, size_bytes: int, d_s: float, rate_bytes_per_s: float) -> float:
    """Chapter 11's model on the same graphs: α = d, β = 1/r, nothing else costs (no request's
    way, no cost per message, free adds, no token bucket). For ps, sharded ps and ring it is
    ``alpha_beta.alpha_beta_time``.

    >>> round(plain_alpha_beta("ring", 3, 300_000, 0.001, 1e8) * 1000, 3)
    8.0
    """
    graph = steps(algorithm, n, size_bytes)
    return _play(
        graph, (0.0, 0.0, 0.0, 1 / rate_bytes_per_s, 0.0, 0.0), Link(d_s, rate_bytes_per_s), tensorflow=False
    ).seconds


# ------------------------------------------------------------------------------- the fit
@dataclass(frozen=True)
class Fit:
    """The fitted ``params`` (``PARAMS`` order), their standard errors ``stderr``, and how many
    runs and rounds of refitting it took."""

    params: tuple[float, ...]
    stderr: tuple[float, ...]
    runs: int
    rounds: int

    def table(self) -> list[dict[str, Any]]:
        """One row per parameter: its name, value and standard error."""
        return [
            {"param": name, "value": value, "stderr": err}
            for name, value, err in zip(PARAMS, self.params, self.stderr, strict=True)
        ]


def _link(r: dict[str, Any]) -> Link:
    return Link.of(r["delay"], r["link"])


def design(
    rows: Iterable[dict[str, Any]], params: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The least-squares problem of ``fit`` at ``params``: one row per run, the critical path's
    counts of each parameter divided by the measured time, and what is left of the measured time
    once the path's known seconds (its d's and its waits for a token bucket) are taken off, divided
    by it too: a solution minimises the squared *relative* errors."""
    xs, ys = [], []
    for r in rows:
        priced = price(steps(r["method"], r["n"], r["bytes"]), params, _link(r))
        *counts, d_count, wait = priced.counts
        xs.append(np.array(counts) / r["comm_s"])
        ys.append((r["comm_s"] - d_count * r["d_s"] - wait) / r["comm_s"])
    return np.array(xs), np.array(ys)


def fit(
    rows: Sequence[dict[str, Any]],
    *,
    start: Sequence[float] = (1e-4, 1e-4, 1e-4, 1e-9, 1e-10, 1e-9),
    rounds: int = 20,
) -> Fit:
    """Least squares for ``PARAMS`` from measured runs (``measure``'s rows: ``method``, ``n``,
    ``bytes``, ``d_s``, ``comm_s``). Which path is critical depends on the parameters, so the fit
    prices every run at the current parameters, solves the linear problem of that pricing
    (``design``), and repeats until the paths stop changing, from three starts a decade apart; it
    keeps the costs whose own paths fit best. A parameter the data push below 0 is held at 0. The
    standard errors are the linear problem's (σ² (XᵀX)⁻¹, σ² from the residuals).

    Example::

        model = fit(rows)
        model.table()
    """
    rows = list(rows)
    if len(rows) <= len(PARAMS):
        raise ValueError(f"fit needs more runs than parameters ({len(PARAMS)}), not {len(rows)}")
    best: tuple[float, np.ndarray, int] | None = None
    for scale in (1.0, 10.0, 0.1):
        params = np.array(start, dtype=float) * scale
        for done in range(1, rounds + 1):
            x, y = design(rows, params)
            if done > 1:  # the last round's costs, priced on their own paths
                misfit = float(np.sum((y - x @ params) ** 2))
                if best is None or misfit < best[0]:
                    best = (misfit, params, done - 1)
            new = _nonnegative_lstsq(x, y)
            if np.allclose(new, params, rtol=1e-6, atol=1e-15):
                break
            params = new
    assert best is not None
    _misfit, params, done = best
    x, y = design(rows, params)
    residual = y - x @ params
    dof = max(1, len(y) - len(params))
    cov = float(residual @ residual) / dof * np.linalg.pinv(x.T @ x)
    return Fit(
        tuple(float(p) for p in params),
        tuple(float(math.sqrt(max(v, 0.0))) for v in np.diag(cov)),
        len(rows),
        done,
    )


def _nonnegative_lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0: drop the most negative and solve again."""
    free = list(range(x.shape[1]))
    while True:
        sol = np.zeros(x.shape[1])
        if free:
            sol[free] = np.linalg.lstsq(x[:, free], y, rcond=None)[0]
        negative = [i for i in free if sol[i] < 0]
        if not negative:
            return sol
        free.remove(min(negative, key=lambda i: sol[i]))


# --------------------------------------------------------------------------- measuring
def measure(
    delays: Sequence[str],
    ns: Sequence[int],
    sizes: Sequence[int],
    *,
    algorithms: Sequence[str] = ALGORITHMS,
    link: str = "1gbit",
    steps_per_run: int = 3,
    timeout: float = 300.0,
    cluster_options: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """In the notebook: time every algorithm for every ``n`` of ``ns`` and every size of ``sizes``
    (bytes) on ``LocalCluster(ps=1, workers=max(ns), link=link, delay=d)``, one cluster per delay;
    the first ``n`` workers synchronise (``allreduce.time_sync``, in a client task).

    Returns one row per run: ``delay``, ``d_s``, ``link``, ``rate_bytes_per_s``, ``method``,
    ``n``, ``bytes``, ``median_s``, ``empty_s`` (the same step with no transfer) and ``comm_s``
    = ``median_s - empty_s``.

    Example::

        rows = measure(["0ms", "5ms"], [2, 4], [1_200, 1_200_000])
    """
    from dtfkit.engine.platform import netns

    netns.parse_rate(link)  # a bad link or delay is refused before any cluster starts
    for d in delays:
        netns.parse_delay(d)
    for n in ns:
        for size in sizes:
            for algorithm in algorithms:
                _check_config(algorithm, n, size)
    runs = [(algorithms, n, [size // 4 for size in sizes]) for n in ns]
    return [
        row
        for delay in delays
        for row in _communication_on(delay, link, max(ns), runs, steps_per_run, timeout, cluster_options)
    ]


def errors(rows: Iterable[dict[str, Any]], fitted: Fit) -> list[dict[str, Any]]:
    """Each run with ``predicted_s`` (the fitted model), ``plain_s`` (α = d, β = 1/r) and both
    relative errors, ``(predicted - measured) / measured``."""
    out = []
    for r in rows:
        predicted = predict(fitted.params, r["method"], r["n"], r["bytes"], _link(r))
        plain = plain_alpha_beta(r["method"], r["n"], r["bytes"], r["d_s"], r["rate_bytes_per_s"])
        out.append(
            {
                **r,
                "predicted_s": predicted,
                "plain_s": plain,
                "error": (predicted - r["comm_s"]) / r["comm_s"],
                "plain_error": (plain - r["comm_s"]) / r["comm_s"],
            }
        )
    return out


def summary(errs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The median and 90th percentile of |relative error|, for the model and for plain α–β."""
    model = [abs(e["error"]) for e in errs]
    plain = [abs(e["plain_error"]) for e in errs]
    return {
        "runs": len(errs),
        "median": statistics.median(model),
        "p90": float(np.percentile(model, 90)),
        "plain_median": statistics.median(plain),
        "plain_p90": float(np.percentile(plain, 90)),
    }


def same_graph(a: str, b: str, n: int, size_bytes: int) -> bool:
    """Whether algorithms ``a`` and ``b`` send the same messages and make the same adds, each
    waiting for the same others, for ``n`` workers: then they are one program, and which of them
    measures faster is chance. For 2 workers the ring and the sharded ps are.

    >>> same_graph("ring", "sharded_ps", 2, 800), same_graph("ring", "sharded_ps", 3, 1200)
    (True, False)
    """
    return a == b or _shape(steps(a, n, size_bytes)) == _shape(steps(b, n, size_bytes))


def _shape(graph: Sequence[Step]) -> list[tuple]:
    memo: dict[int, tuple] = {}

    def shape(i: int) -> tuple:
        if i not in memo:
            s = graph[i]
            memo[i] = (s.task, s.to or "", s.nbytes, tuple(sorted(shape(j) for j in s.after)))
        return memo[i]

    return sorted(shape(i) for i in range(len(graph)))


def choices(errs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration (delay, n, bytes): the algorithm measured fastest, the one the model picks,
    whether the pick is right (the fastest, or the same program: ``same_graph``), and how much slower
    the pick measured than the fastest (0 when right)."""
    groups: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for e in errs:
        groups.setdefault((e["delay"], e["n"], e["bytes"]), []).append(e)
    out = []
    for (delay, n, size), runs in groups.items():
        measured = min(runs, key=lambda e: e["comm_s"])
        picked = min(runs, key=lambda e: e["predicted_s"])
        right = same_graph(picked["method"], measured["method"], n, size)
        out.append(
            {
                "delay": delay,
                "n": n,
                "bytes": size,
                "fastest": measured["method"],
                "picked": picked["method"],
                "right": right,
                "slower_by": 0.0 if right else picked["comm_s"] / measured["comm_s"] - 1,
            }
        )
    return out


# ------------------------------------------------------------------ what the model says to do
def bucket_steps(algorithm: str, n: int, tensor_bytes: Sequence[int], pack_bytes: int) -> list[Step]:
    """The graph of a many-tensor synchronisation in buckets (``task_side.packs``): one
    ``algorithm`` per bucket, side by side, as ``time_buckets`` runs them.

    >>> len(bucket_steps("ring", 2, [800] * 4, 1)), len(bucket_steps("ring", 2, [800] * 4, 0))
    (24, 6)
    """
    from dtfkit.recipes.predict.task_side import packs

    out: list[Step] = []
    for members in packs(tensor_bytes, pack_bytes):
        offset = len(out)
        for s in steps(algorithm, n, sum(tensor_bytes[j] for j in members)):
            out.append(Step(s.task, s.to, s.nbytes, tuple(j + offset for j in s.after)))
    return out


def fastest_by_size(
    params: Sequence[float], n: int, link: Link, sizes: Sequence[int], algorithms: Sequence[str] = ALGORITHMS
) -> list[tuple[int, str]]:
    """For each size, the algorithm the model prices lowest: ``[(size, algorithm), ...]``."""
    out = []
    for size in sizes:
        times = {a: price(steps(a, n, size), params, link).seconds for a in algorithms}
        out.append((size, min(times, key=times.__getitem__)))
    return out


def switch_points(picks: Sequence[tuple[int, str]]) -> list[tuple[int, str, str]]:
    """Where ``fastest_by_size``'s pick changes: ``(first size of the new pick, old, new)``.

    >>> switch_points([(1, "tree"), (10, "tree"), (100, "ring")])
    [(100, 'tree', 'ring')]
    """
    return [
        (size, before, after)
        for (_, before), (size, after) in zip(picks, picks[1:], strict=False)
        if before != after
    ]


# ------------------------------------------------------------------------------ the plots
def plot_predictions(errs: Sequence[dict[str, Any]], *, title: str = "") -> Any:
    """Predicted against measured communication, log-log, one colour per algorithm: the fitted
    model (filled) and plain α–β (hollow), with the line where they are equal."""
    import matplotlib.pyplot as plt

    fonts.draw_in_the_language(language())  # the reader's language in the figure's words
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    for algorithm in ALGORITHMS:
        mine = [e for e in errs if e["method"] == algorithm]
        if not mine:
            continue
        measured = [1000 * e["comm_s"] for e in mine]
        colour = _COLOURS[algorithm]
        ax.scatter(
            measured,
            [1000 * e["predicted_s"] for e in mine],
            s=22,
            color=colour,
            label=_("{algorithm}: model").format(algorithm=algorithm),
        )
        ax.scatter(
            measured,
            [max(1000 * e["plain_s"], 1e-3) for e in mine],
            s=22,
            facecolors="none",
            edgecolors=colour,
            label=_("{algorithm}: plain α–β").format(algorithm=algorithm),
        )
    lo = min(min(1000 * e["comm_s"], 1000 * e["predicted_s"]) for e in errs) / 2
    hi = max(max(1000 * e["comm_s"], 1000 * e["predicted_s"]) for e in errs) * 2
    ax.plot([lo, hi], [lo, hi], color="grey", lw=1)
    ax.fill_between(
        [lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.15, label=_("±10%")
    )
    ax.set(
        xscale="log",
        yscale="log",
        xlim=(lo, hi),
        ylim=(lo, hi),
        xlabel=_("measured (ms)"),
        ylabel=_("predicted (ms)"),
    )
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    return fig


def plot_by_size(
    params: Sequence[float], n: int, link: Link, sizes: Sequence[int], *, title: str = ""
) -> Any:
    """The model's time for every algorithm against the gradient's size (log-log)."""
    import matplotlib.pyplot as plt

    fonts.draw_in_the_language(language())
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for algorithm in ALGORITHMS:
        times = [1000 * price(steps(algorithm, n, size), params, link).seconds for size in sizes]
        ax.plot(sizes, times, color=_COLOURS[algorithm], label=algorithm)
    ax.set(
        xscale="log", yscale="log", xlabel=_("gradient size (bytes)"), ylabel=_("model: communication (ms)")
    )
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig
