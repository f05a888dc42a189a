"""Runs in the notebook kernel: ``run_sync`` (drives the run), ``SyncRun`` (the ledger read as a table, shares and
plots) and ``plot_shares``.

Never imports TensorFlow: what runs in the tasks is in ``task_side``.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from dtfkit import fonts
from dtfkit.errors import DtfkitError
from dtfkit.i18n import N_, _, language
from dtfkit.recipes import analysis
from dtfkit.recipes.sync.task_side import (
    read_sync_state,
    train_sync,
)

if TYPE_CHECKING:
    from dtfkit.running_cluster import RunningCluster

AGGREGATED, DROPPED, PENDING = "aggregated", "dropped", "pending"
FATE_COLORS = {AGGREGATED: "tab:green", DROPPED: "tab:red", PENDING: "tab:gray"}
# How each fate reads in a table or a legend (the data keeps the English words).
FATE_LABELS = {AGGREGATED: N_("aggregated"), DROPPED: N_("dropped"), PENDING: N_("pending")}


# --------------------------------------------------------------- in the notebook
def run_sync(
    cluster: RunningCluster, workers: list[str], *, timeout: float = 180.0, **kwargs: Any
) -> SyncRun:
    """Run ``train_sync`` on ``workers`` (chief first), read the ledger, return a ``SyncRun``.

    Keyword arguments go to ``train_sync``. Each call gets its own ``run_name``
    (variables, queues and accumulators never shared with another run).

    Example::

        run = run_sync(cluster, ["worker:0", "worker:1", "worker:2"], replicas_to_aggregate=2)
    """
    workers = list(workers)
    kwargs.setdefault("run_name", f"sync{uuid.uuid4().hex[:8]}")
    results = cluster.run(train_sync, kwargs={**kwargs, "workers": workers}, on=workers, timeout=timeout)
    info = results[workers[0]]["ledger_info"]
    state = cluster.run(read_sync_state, kwargs={"info": info}, on=workers[0], timeout=60)[workers[0]]
    return SyncRun(results, state)


class SyncRun:
    """One sync run, taken apart gradient by gradient (no TensorFlow needed).

    Attributes:
        workers: the tasks, chief first. ``replicas_to_aggregate``, ``total_num_replicas``.
        global_step: the final global step (= number of aggregated updates).
        gradients: one dict per pushed gradient: ``task``, ``index`` (its local step),
            ``tag`` (the global step it was computed for), ``start``/``end`` times,
            ``fate`` (``"aggregated"``, ``"dropped"`` or ``"pending"``) and, when
            aggregated, ``update`` (1-based: the update that used it) and ``n``
            (how many gradients that update averaged).
        pending_read: gradients the ledger's accumulator still held at the end, as read
            from the accumulator itself (``num_accumulated``).
        pushed_read: ``{task: gradients it pushed}``, as counted by TensorFlow on the ps
            (``train_sync``'s ``pushed`` variable, incremented in the step itself before the
            gradient goes to the accumulators): a count apart from the ledger and from the
            workers' Python records, so ``pushed == aggregated + dropped + pending`` can fail.

    What ``SyncReplicasOptimizer`` guarantees about the sizes (``update_sizes``), from its
    source (``tensorflow/python/training/sync_replicas_optimizer.py``) and the accumulator's
    (``tensorflow/core/kernels/conditional_accumulator_base.cc``): ``take_grad(R)`` waits
    until the accumulator holds at least R gradients, then averages *all* it holds. Update
    ``u + 1`` accepts only gradients computed for global step ``u``, and only the
    ``max(N, R)`` tokens of update ``u`` carry it, so update ``u + 1`` (``u >= 1``) averages
    between R and ``max(N, R)``: exactly R when ``R >= N``. Update 1 can average up to
    ``N + R`` (each worker's first gradient plus the R start-up tokens).
    """

    def __init__(self, results: dict[str, dict], state: dict[str, Any]):
        self.results = results
        info = next(r["ledger_info"] for r in results.values() if "ledger_info" in r)
        self.workers: list[str] = list(info["workers"])
        self.replicas_to_aggregate: int = info["replicas_to_aggregate"]
        self.total_num_replicas: int = info["total_num_replicas"]
        self.steps: int = info["steps"]
        self.global_step: int = state["global_step"]
        self.pending_read: int = state["pending"]
        self.pushed_read: dict[str, int] = dict(zip(self.workers, state["pushed"], strict=True))
        # The global step each token still in the queue carried when the run ended.
        self.tokens_left: list[int] = list(state.get("tokens_left", []))
        self.ledger = np.asarray(state["ledger"])
        lr = info["learning_rate"]
        self.gradients: list[dict[str, Any]] = []
        for rank, task in enumerate(self.workers):
            for i, (start, end, tag, token) in enumerate(results[task]["pushes"]):
                value = float(self.ledger[rank, i])
                g = {"task": task, "index": i, "tag": tag, "start": start, "end": end, "token": token}
                if abs(value) > 1e-3 * lr / max(1, self.replicas_to_aggregate):
                    g.update(fate=AGGREGATED, update=tag + 1, n=int(round(lr / abs(value))))
                elif tag >= self.global_step:
                    g["fate"] = PENDING  # accepted by the accumulator, never taken
                else:
                    g["fate"] = DROPPED  # computed for an older global step: silently discarded
                self.gradients.append(g)

    # ------------------------------------------------------------- counting
    def counts(self) -> dict[str, dict[str, int]]:
        """Per worker: ``local_steps`` (its completed steps, counted by the worker), ``pushed``
        (counted on the ps: ``pushed_read``), and the ledger's ``aggregated``, ``dropped``,
        ``pending`` (over every step the worker recorded, one cut short included)."""
        out: dict[str, dict[str, int]] = {}
        for task in self.workers:
            c = Counter(g["fate"] for g in self.gradients_of(task))
            out[task] = {
                "local_steps": self.results[task]["local_steps"],
                "pushed": self.pushed_read[task],
                **{fate: c[fate] for fate in (AGGREGATED, DROPPED, PENDING)},
            }
        return out

    def totals(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for row in self.counts().values():
            out.update(row)
        return dict(out)

    def updates(self) -> dict[int, list[str]]:
        """``{update number: [task of each gradient it averaged]}``, for every update."""
        out: dict[int, list[str]] = {u: [] for u in range(1, self.global_step + 1)}
        for g in self.gradients:
            if g["fate"] == AGGREGATED:
                out.setdefault(g["update"], []).append(g["task"])
        return out

    def gradients_of(self, task: str) -> list[dict[str, Any]]:
        """The gradients one worker pushed, in order."""
        return [g for g in self.gradients if g["task"] == task]

    def update_size_counts(self) -> dict[int, int]:
        """``{gradients averaged: number of updates}``, e.g. ``{2: 57, 3: 3}``."""
        return dict(sorted(Counter(len(tasks) for tasks in self.updates().values()).items()))

    def update_sizes(self, first: int = 1) -> set[int]:
        """The set of "how many gradients did an update average" over updates ``first`` to the
        last: ``{2}`` when each averaged exactly 2. Checks the two ways to count agree.

        Always at least R. ``first=2`` leaves out update 1, the only one that can average
        more than R when ``R >= N`` (see the class docstring)."""
        sizes = {len(tasks) for u, tasks in self.updates().items() if u >= first}
        updates = self.updates()
        for g in self.gradients:
            if g["fate"] == AGGREGATED and g["n"] != len(updates[g["update"]]):
                raise DtfkitError(
                    f"ledger inconsistent: {g['task']}'s gradient {g['index']} says its update averaged "
                    f"{g['n']}, but {len(updates[g['update']])} gradients were computed for update {g['update']}"
                )
        return sizes

    def shares(self, of: str = AGGREGATED) -> dict[str, float]:
        """Each worker's fraction of the aggregated gradients (``of="local_steps"``: of the steps)."""
        return analysis.shares({task: row[of] for task, row in self.counts().items()})

    def single_worker_updates(self) -> dict[str, int]:
        """How many updates averaged gradients of one worker only, per worker."""
        out = dict.fromkeys(self.workers, 0)
        for tasks in self.updates().values():
            if tasks and len(set(tasks)) == 1:
                out[tasks[0]] += 1
        return out

    def update_times(self) -> dict[int, float]:
        """When each update was seen done: the first moment a worker got its token."""
        out: dict[int, float] = {}
        for g in self.gradients:
            if g["token"] is not None and g["end"] is not None:
                out[g["token"]] = min(out.get(g["token"], g["end"]), g["end"])
        return out

    def median_update_interval(self) -> float:
        """Median seconds between consecutive updates."""
        times = np.sort(list(self.update_times().values()))
        return float(np.median(np.diff(times))) if len(times) > 1 else float("nan")

    def median_step_interval(self, task: str) -> float:
        """Median seconds between the starts of one worker's consecutive local steps,
        its first step left out (TensorFlow sets the step up during it). Compare it with
        ``median_update_interval()``: both are medians over the same run."""
        starts = np.sort([g["start"] for g in self.gradients_of(task) if g["index"] > 0])
        return float(np.median(np.diff(starts))) if len(starts) > 1 else float("nan")

    def tokens_handed_out(self) -> int:
        """Tokens the chief put into the token queue: ``replicas_to_aggregate`` at the start,
        then ``max(total_num_replicas, replicas_to_aggregate)`` per update. Each completed
        local step took one, so the workers' local steps can never add up to more."""
        per_update = max(self.total_num_replicas, self.replicas_to_aggregate)
        return self.replicas_to_aggregate + per_update * self.global_step

    def tokens_counted(self) -> dict[int, int]:
        """``{global step a token carried: how many such tokens}``, counted token by token: the
        tokens the workers' completed local steps took plus those left in the queue at the end.
        Every token the chief put into the queue is one of the two."""
        taken = [g["token"] for g in self.gradients if g["token"] is not None]
        return dict(sorted(Counter(taken + self.tokens_left).items()))

    def time_origin(self, skip_first: bool = True) -> float:
        """The wall time ``plot_timeline`` puts at x = 0 (the same ``skip_first``)."""
        return self._t0(skip_first)

    def update_window(self, first: int, last: int, skip_first: bool = True) -> tuple[float, float]:
        """The x range of ``plot_timeline`` (same origin) from just before update ``first``
        to just after update ``last``: ``ax.set_xlim(*run.update_window(20, 24))`` zooms in."""
        return analysis.update_window(self.update_times(), first, last, origin=self._t0(skip_first), pad=0.15)

    def exit_lags(self) -> dict[str, float]:
        """Per worker, seconds from its last step to its session being closed."""
        return {
            t: r["closed"] - r["last_step"] for t, r in self.results.items() if r["last_step"] is not None
        }

    def table(self) -> str:
        """The counts as a small text table."""
        head = (
            f"{_('worker'):<10}{_('local steps'):>12}{_(FATE_LABELS[AGGREGATED]):>12}"
            f"{_(FATE_LABELS[DROPPED]):>9}{_(FATE_LABELS[PENDING]):>9}{_('share'):>8}"
        )
        lines = [head]
        shares = self.shares()
        for task, row in self.counts().items():
            lines.append(
                f"{task:<10}{row['local_steps']:>12}{row[AGGREGATED]:>12}{row[DROPPED]:>9}"
                f"{row[PENDING]:>9}{shares[task]:>8.0%}"
            )
        t = self.totals()
        lines.append(
            f"{_('total'):<10}{t['local_steps']:>12}{t[AGGREGATED]:>12}{t[DROPPED]:>9}{t[PENDING]:>9}"
        )
        lines.append(
            _(
                "global step {step} x replicas_to_aggregate {r} = {product} (aggregated can only be more); "
                "the accumulator still held {pending}"
            ).format(
                step=self.global_step,
                r=self.replicas_to_aggregate,
                product=self.global_step * self.replicas_to_aggregate,
                pending=self.pending_read,
            )
        )
        return "\n".join(lines)

    # ---------------------------------------------------------------- plots
    def _t0(self, skip_first: bool = False) -> float:
        return min(g["start"] for g in self.gradients if not (skip_first and g["index"] == 0))

    def plot_timeline(
        self, ax=None, title: str | None = None, show_updates: bool = True, skip_first: bool = True
    ):
        """One lane per worker, one bar per local step (from sending the gradient until the
        token came back), coloured by the gradient's fate; grey lines mark updates.

        ``skip_first`` leaves out each worker's first step: TensorFlow sets the step up
        on the ps during it, which takes up to a second and would squeeze the rest."""
        from matplotlib.patches import Patch

        ax = _axes(ax, (9, 0.6 + 0.55 * len(self.workers)))
        t0 = self._t0(skip_first)
        if show_updates:
            for t in self.update_times().values():
                if t >= t0:
                    ax.axvline(t - t0, color="0.85", lw=0.6, zorder=0)
        for lane, task in enumerate(self.workers):
            for g in self.gradients_of(task):
                if skip_first and g["index"] == 0:
                    continue
                end = g["end"] if g["end"] is not None else g["start"] + 0.002
                ax.broken_barh(
                    [(g["start"] - t0, max(end - g["start"], 0.002))],
                    (lane - 0.35, 0.7),
                    facecolors=FATE_COLORS[g["fate"]],
                    edgecolor="white",
                    linewidth=0.3,
                )
        ax.set_yticks(range(len(self.workers)), self.workers)
        ax.invert_yaxis()
        ax.set_xlabel(
            _("wall time (s), from each worker's second step") if skip_first else _("wall time (s)")
        )
        handles = [Patch(color=c, label=_(FATE_LABELS[f])) for f, c in FATE_COLORS.items()]
        return _legend_and_title(ax, title, handles=handles)

    def plot_updates(self, ax=None, title: str | None = None):
        """For each update, a stacked bar: whose gradients it averaged."""
        ax = _axes(ax, (9, 2.2))
        updates = self.updates()
        xs = np.array(sorted(updates))
        bottom = np.zeros(len(xs))
        for task in self.workers:
            n = np.array([updates[u].count(task) for u in xs])
            ax.bar(xs, n, bottom=bottom, width=1.0, label=task, edgecolor="white", linewidth=0.3)
            bottom += n
        ax.set_xlabel(_("update (global step)"))
        ax.set_ylabel(_("gradients"))
        ax.set_yticks(range(int(bottom.max()) + 1 if len(bottom) else 1))
        return _legend_and_title(ax, title)


def _axes(ax: Any, figsize: tuple[float, float]) -> Any:
    """``ax``, or the axes of a new figure of ``figsize``; either drawn in the reader's language."""
    import matplotlib.pyplot as plt

    fonts.draw_in_the_language(language())
    return ax if ax is not None else plt.subplots(figsize=figsize)[1]


def _legend_and_title(ax: Any, title: str | None, **legend: Any) -> Any:
    """The legend right of ``ax`` (``legend``: more of its arguments), and ``title`` when given."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", **legend)
    if title:
        ax.set_title(title)
    return ax


def plot_shares(runs: dict[str, SyncRun], ax=None, of: str = AGGREGATED, title: str | None = None):
    """Grouped bars: each worker's share of the aggregated gradients, one group per run."""
    ax = _axes(ax, (7, 2.8))
    tasks = sorted({t for run in runs.values() for t in run.workers})
    width = 0.8 / max(1, len(tasks))
    for k, task in enumerate(tasks):
        values = [run.shares(of).get(task, 0.0) for run in runs.values()]
        xs = np.arange(len(runs)) + (k - (len(tasks) - 1) / 2) * width
        ax.bar(xs, values, width=width, label=task)
    ax.set_xticks(range(len(runs)), list(runs))
    ax.set_ylabel(
        _("share of aggregated gradients") if of == AGGREGATED else _("share of {of}").format(of=of)
    )
    ax.set_ylim(0, 1)
    return _legend_and_title(ax, title)


# ------------------------------------------------------------------ stack excerpts
_FRAME = re.compile(r'File ".*?([\w.]+\.py)", line \d+, in (\w+)')


def stack_excerpt(
    stacks: str,
    modules: tuple[str, ...] = (
        "monitored_session.py",
        "coordinator.py",
        "queue_runner_impl.py",
        "session.py",
    ),
) -> list[str]:
    """From one task's stacks (``TaskTimeout.stacks[task]``), the innermost frames of each
    thread that lie in ``modules``: ``["MainThread: coordinator.py join", ...]`` (no line
    numbers, so the lines are stable across runs).

    Example::

        except dtfkit.TaskTimeout as exc:
            sync.stack_excerpt(exc.stacks["worker:0"])
    """
    out = []
    for block in re.split(r"^Thread ", stacks, flags=re.M)[1:]:
        thread, _colon, frames = block.partition(":\n")
        hits = [f"{m.group(1)} {m.group(2)}" for m in _FRAME.finditer(frames) if m.group(1) in modules]
        if hits:
            kind = "QueueRunnerThread" if "QueueRunnerThread" in thread else thread.split("(")[0].strip()
            out.append(f"{kind}: " + " > ".join(hits[-3:]))
    return out
