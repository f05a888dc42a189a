"""The lab's plots: one run's dashboard, and several runs overlaid (matplotlib, no pyplot state).

Every function draws on a given Axes or returns a new ``matplotlib.figure.Figure``
(built without pyplot, so it is safe in the panel's background thread and never shows
up twice in a notebook).

Example::

    fig = plots.dashboard(record)          # loss, timeline, throughput, staleness, shares
    fig = plots.compare([sync_run, async_run])
    fig.savefig("runs.png")
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from dtfkit import fonts
from dtfkit.engine.platform import notebook
from dtfkit.i18n import _, language
from dtfkit.recipes import analysis
from dtfkit.recipes.sync.kernel_side import FATE_COLORS

if TYPE_CHECKING:
    from dtfkit.lab.runner import RunRecord

STALENESS_COLORS = ["tab:green", "gold", "tab:orange", "tab:red"]  # 0, 1, 2, 3+


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    _show_as_png_in_ipython(Figure)
    fonts.draw_in_the_language(language())
    return Figure(figsize=(width, height), layout="constrained")


def _show_as_png_in_ipython(figure_class) -> None:
    """A Figure made without pyplot shows as text unless the inline backend is on: register
    a PNG formatter (the inline backend, when it starts, puts its own in its place)."""
    shell = notebook.shell()  # None outside IPython (it is never imported for this)
    if shell is None:
        return
    formatter = shell.display_formatter.formatters["image/png"]
    if figure_class not in formatter:  # IPython's BaseFormatter.__contains__: lookup_by_type finds it
        formatter.for_type(figure_class, lambda fig: png(fig, dpi=72))


def _t0(record: RunRecord) -> float:
    """Time zero of the plots: once every worker has made its first step (that first
    ``session.run`` sets the session up and would squeeze everything else)."""
    return record.steady_time()


def _rows(record: RunRecord) -> list[dict]:
    t0 = _t0(record)
    return [r for r in record.rows if r["time"] >= t0]


def plot_loss(record: RunRecord, ax, x: str = "step", label: str = "", **line) -> None:
    """Training loss per worker against the global step (``x="step"``) or wall time (``"time"``)."""
    t0 = _t0(record)
    for task in record.workers:
        rows = [r for r in _rows(record) if r["task"] == task]
        xs = [r["step"] if x == "step" else r["time"] - t0 for r in rows]
        ax.plot(xs, [r["loss"] for r in rows], label=f"{label}{task}", **line)
    ax.set_xlabel(_("global step") if x == "step" else _("wall time (s) from every worker's first step"))
    ax.set_ylabel(_("loss"))


def plot_timeline(record: RunRecord, ax) -> None:
    """One lane per worker, one bar per local step. Sync: coloured by the gradient's fate;
    async: by staleness (green 0, yellow 1, orange 2, red 3+)."""
    t0 = _t0(record)
    for lane, steps in enumerate(record.pushes().values()):
        for start, end, read, applied, fate in steps:
            if (end or start) < t0:
                continue
            if end is None:
                end = start + 0.002
            if fate in FATE_COLORS:
                color = FATE_COLORS[fate]
            else:
                stale = 0 if applied is None else analysis.staleness(read, applied)
                color = STALENESS_COLORS[min(stale, 3)]
            ax.broken_barh(
                [(start - t0, max(end - start, 0.002))],
                (lane - 0.35, 0.7),
                facecolors=color,
                edgecolor="white",
                linewidth=0.3,
            )
    ax.set_yticks(range(len(record.workers)), record.workers)
    ax.invert_yaxis()
    ax.set_xlabel(_("wall time (s)"))
    ax.set_title(_("step timeline"), fontsize="medium")


def zoomed_timeline(record: RunRecord, updates: int = 8, title: str = ""):
    """The step timeline of ``updates`` consecutive updates from the middle of the run, with
    a grey line at each update: close enough to see which steps end together (sync) or
    overlap (async). Returns a Figure."""
    times = record.update_times()
    fig = _figure(12, 0.9 + 0.5 * len(record.workers))
    ax = fig.subplots()
    plot_timeline(record, ax)
    if len(times) > updates:
        t0 = _t0(record)
        first = (len(times) - updates) // 2  # times[first] is when update first + 1 was done
        numbered = {i + 1: t for i, t in enumerate(times)}
        ax.set_xlim(*analysis.update_window(numbered, first + 2, first + updates + 1, origin=t0, pad=0.02))
        for t in times[first : first + updates + 1]:
            ax.axvline(t - t0, color="0.6", lw=0.8, zorder=0)
        ax.set_xlabel(
            _("wall time (s); grey lines: updates {first_1}–{first_updates_1}").format(
                first_1=first + 1, first_updates_1=first + updates + 1
            )
        )
    ax.set_title(
        title
        or _("run {number} — {record_settings_describe}: {updates} updates, zoomed in").format(
            number=record.number, record_settings_describe=record.settings.describe(), updates=updates
        )
    )
    return fig


def plot_throughput(record: RunRecord, ax, label: str = "", **line) -> None:
    """The global step against wall time: the slope is the throughput."""
    rows = sorted(_rows(record), key=lambda r: r["time"])
    if not rows:
        return
    t0 = _t0(record)
    ax.plot(
        [r["time"] - t0 for r in rows],
        np.maximum.accumulate([r["step"] for r in rows]),
        label=label or None,
        **line,
    )
    ax.set_xlabel(_("wall time (s) from every worker's first step"))
    ax.set_ylabel(_("global step"))
    rate = record.steps_per_sec()
    if not label and rate == rate:
        ax.set_title(_("throughput: {rate:.1f} steps/s").format(rate=rate), fontsize="medium")


def plot_staleness(record: RunRecord, ax, label: str = "", alpha: float = 1.0) -> None:
    """Histogram: how many updates landed between a step's read of the parameters and its write."""
    values = record.staleness()
    top = max(values + [3])
    weights = np.full(len(values), 1.0 / max(1, len(values)))
    ax.hist(
        values,
        bins=np.arange(-0.5, top + 1.5),
        weights=weights,
        alpha=alpha,
        label=label or None,
        rwidth=0.85,
    )
    ax.set_xlabel(_("staleness (updates in between)"))
    ax.set_ylabel(_("fraction of applied gradients"))
    if not label:
        ax.set_title(
            _("staleness: mean {mean:.2f}, max {most}").format(
                mean=record.mean_staleness(), most=record.max_staleness()
            ),
            fontsize="medium",
        )


def plot_shares(records: Sequence[RunRecord], ax) -> None:
    """Grouped bars: each worker's share of the applied updates, one group per run."""
    tasks = sorted({t for r in records for t in r.workers})
    width = 0.8 / max(1, len(tasks))
    for k, task in enumerate(tasks):
        xs = np.arange(len(records)) + (k - (len(tasks) - 1) / 2) * width
        ax.bar(xs, [r.shares().get(task, 0.0) for r in records], width=width, label=task)
    ax.set_xticks(
        range(len(records)),
        [_("run {number}").format(number=r.number) + f"\n{r.settings.mode}" for r in records],
    )
    ax.set_ylim(0, 1)
    ax.set_ylabel(_("share of updates"))
    ax.legend(fontsize="small")


def dashboard(record: RunRecord):
    """Loss vs step and vs time, the step timeline, throughput, staleness and shares."""
    fig = _figure(12, 6)
    axes = fig.subplots(2, 3)
    plot_loss(record, axes[0, 0], "step", marker=".", markersize=3, linewidth=0.8)
    axes[0, 0].legend(fontsize="small")
    plot_loss(record, axes[0, 1], "time", marker=".", markersize=3, linewidth=0.8)
    plot_timeline(record, axes[0, 2])
    plot_throughput(record, axes[1, 0])
    plot_staleness(record, axes[1, 1])
    plot_shares([record], axes[1, 2])
    fig.suptitle(
        _("run {number} — {what}").format(number=record.number, what=record.describe()), fontsize="large"
    )
    return fig


def compare(records: Sequence[RunRecord]):
    """Several runs overlaid: loss vs step and vs time, throughput, staleness, shares."""
    fig = _figure(12, 6)
    axes = fig.subplots(2, 3)
    for i, record in enumerate(records):
        name = _("run {number} ({settings})").format(
            number=record.number, settings=record.settings.describe()
        )
        color = f"C{i}"
        rows = sorted(_rows(record), key=lambda r: r["step"])
        t0 = _t0(record)
        axes[0, 0].plot(
            [r["step"] for r in rows], [r["loss"] for r in rows], ".", ms=3, color=color, label=name
        )
        rows = sorted(rows, key=lambda r: r["time"])
        axes[0, 1].plot([r["time"] - t0 for r in rows], [r["loss"] for r in rows], ".", ms=3, color=color)
        plot_throughput(record, axes[0, 2], label=name, color=color)
        plot_staleness(record, axes[1, 0], label=name, alpha=0.6)
    axes[0, 0].set(xlabel=_("global step"), ylabel=_("loss"), title=_("loss vs global step"))
    axes[0, 1].set(
        xlabel=_("wall time (s) from every worker's first step"),
        ylabel=_("loss"),
        title=_("loss vs wall time"),
    )
    axes[0, 2].set_title(_("throughput (slope)"))
    axes[1, 0].set_title(_("staleness"))
    axes[1, 0].legend(fontsize="small")
    axes[0, 0].legend(fontsize="small")
    plot_shares(records, axes[1, 1])
    axes[1, 1].set_title(_("share of updates per worker"))
    # Gradients per second, not steps per second: a sync update averages R gradients (or more).
    names = [f"{r.number}" for r in records]
    rates = [r.gradient_rates() for r in records]
    xs = np.arange(len(records))
    axes[1, 2].bar(xs - 0.2, [r["computed"] for r in rates], width=0.4, color="0.7", label=_("computed"))
    axes[1, 2].bar(
        xs + 0.2, [r["applied"] for r in rates], width=0.4, color=[f"C{i}" for i in xs], label=_("applied")
    )
    axes[1, 2].set_xticks(xs, names)
    axes[1, 2].set(xlabel=_("run"), ylabel=_("gradients/s"), title=_("gradients per second (all workers)"))
    axes[1, 2].legend(fontsize="small")
    return fig


def waiting(text: str):
    """A small figure saying what the lab is doing (before the first rows arrive)."""
    fig = _figure(12, 1.2)
    ax = fig.subplots()
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize="large")
    return fig


def png(fig, dpi: int = 80) -> bytes:
    """A Figure as PNG bytes (for an ``ipywidgets.Image``)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()
