"""Runs in the notebook kernel: the step records checked, laid out per task and per link, and plotted.

Never imports TensorFlow: what runs in the tasks is in ``task_side``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from dtfkit import fonts
from dtfkit.i18n import _, language
from dtfkit.recipes.timeline.task_side import (
    _is_count,
    _is_number,
    check_records,
)
from dtfkit.shown import shown


def tasks_of(records: Iterable[dict[str, Any]]) -> list[str]:
    """Every task the records name (computing, sending or receiving), ps first.

    >>> tasks_of([{"kind": "transfer", "from": "worker:1", "to": "ps:0"}, {"kind": "compute", "task": "worker:0"}])
    ['ps:0', 'worker:0', 'worker:1']
    """
    names = set()
    for r in check_records(records, steps=False):
        names.update([r["task"]] if r["kind"] == "compute" else [r["from"], r["to"]])

    def order(task: str) -> tuple:
        job, _colon, index = task.partition(":")
        return job != "ps", job, int(index) if index.isdigit() else -1

    return sorted(names, key=order)


def _busy(spans: Iterable[tuple[float, float]]) -> float:
    """How long at least one of the spans was under way (their union's length)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def step_layout(records: Iterable[dict[str, Any]], gap: float = 0.1) -> dict[int, tuple[float, float]]:
    """Where each step goes on one time axis: ``{step: (offset_us, span_us)}``.

    Each step's times start at its own origin; laid out one after another with a gap
    of ``gap`` times the longest step between them.

    >>> op = {"kind": "compute", "task": "ps:0", "start_us": 0}
    >>> step_layout([dict(op, step=0, end_us=50), dict(op, step=1, end_us=100)])
    {0: (0.0, 50.0), 1: (60.0, 100.0)}
    """
    if not _is_number(gap) or gap < 0:
        raise ValueError(f"gap must be a finite number >= 0 (times the longest step), not {shown(gap)}")
    spans: dict[int, float] = {}
    for r in check_records(records, times=True):
        spans[r["step"]] = max(spans.get(r["step"], 0.0), float(r["end_us"]))
    pause = gap * max(spans.values(), default=0.0)
    layout, offset = {}, 0.0
    for step in sorted(spans):
        layout[step] = (offset, spans[step])
        offset += spans[step] + pause
    return layout


def link_usage(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per step and link: ``transfers``, ``bytes``, ``busy_us`` (time with at least one
    transfer under way), ``span_us`` (the step's length) and ``busy`` (their ratio).

    >>> rows = link_usage([
    ...     {"step": 0, "kind": "compute", "task": "ps:0", "start_us": 0, "end_us": 100},
    ...     {"step": 0, "kind": "transfer", "from": "w", "to": "ps:0", "bytes": 8, "start_us": 10, "end_us": 30},
    ...     {"step": 0, "kind": "transfer", "from": "w", "to": "ps:0", "bytes": 8, "start_us": 20, "end_us": 40},
    ... ])
    >>> [(r["from"], r["to"], r["transfers"], r["bytes"], r["busy_us"], r["busy"]) for r in rows]
    [('w', 'ps:0', 2, 16, 30.0, 0.3)]
    """
    records = check_records(records, times=True, sizes=True)
    layout = step_layout(records)
    spans: dict[tuple[int, str, str], list[tuple[float, float]]] = {}
    sizes: dict[tuple[int, str, str], int] = {}
    for r in records:
        if r["kind"] == "transfer":
            key = (r["step"], r["from"], r["to"])
            spans.setdefault(key, []).append((float(r["start_us"]), float(r["end_us"])))
            sizes[key] = sizes.get(key, 0) + int(r["bytes"])
    rows = []
    for (step, src, dst), intervals in sorted(spans.items()):
        busy, span = _busy(intervals), layout[step][1]
        rows.append(
            {
                "step": step,
                "from": src,
                "to": dst,
                "transfers": len(intervals),
                "bytes": sizes[(step, src, dst)],
                "busy_us": busy,
                "span_us": span,
                "busy": busy / span if span else 0.0,
            }
        )
    return rows


_COMPUTE, _TRANSFER = "tab:blue", "tab:orange"


def _size(n: float) -> str:
    """Bytes for a label: ``_size(4800)`` is '4.7 KiB'."""
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def plot_timeline(records: Sequence[dict[str, Any]], *, step: int | None = None, title: str | None = None):
    """Gantt chart of traced steps: above, one row per task with its ops (blue, upper half) and the
    transfers it received (orange, lower half); below, one row per link with the transfers on
    it and how busy it was. Steps follow one another (``step_layout``); ``step`` draws one.

    Uses matplotlib (imported here). Returns ``(tasks_axes, links_axes)``; each bar's ``gid``
    is ``"compute"`` or ``"transfer"``.

    Example::

        tasks_ax, links_ax = plot_timeline(records, step=0, title="ring, N = 3")
    """
    records = check_records(records, times=True, sizes=True)
    if step is not None and not _is_count(step):
        raise ValueError(f"step must be None (every step) or a step number >= 0, not {shown(step)}")
    if title is not None and not isinstance(title, str):
        raise ValueError(f"title must be a string or None, not {shown(title)}")
    import matplotlib.pyplot as plt

    fonts.draw_in_the_language(language())  # the reader's language in the figure's words

    records = [r for r in records if step is None or r["step"] == step]
    if not records:
        raise ValueError(
            f"no records to draw (step={step!r}); trace a step first: allreduce.trace_steps(...)"
        )
    layout = step_layout(records)
    tasks = tasks_of(records)
    usage = link_usage(records)
    links = list(dict.fromkeys((u["from"], u["to"]) for u in usage))
    fig, (top, bottom) = plt.subplots(
        2,
        1,
        sharex=True,
        figsize=(10, 1.2 + 0.5 * (len(tasks) + len(links))),
        gridspec_kw={"height_ratios": [max(1, len(tasks)), max(1, len(links))]},
    )

    def ms(r: dict[str, Any]) -> tuple[float, float]:
        offset = layout[r["step"]][0]
        return (offset + r["start_us"]) / 1000.0, max(r["end_us"] - r["start_us"], 1.0) / 1000.0

    for lane, task in enumerate(tasks):
        ops = [ms(r) for r in records if r["kind"] == "compute" and r["task"] == task]
        received = [ms(r) for r in records if r["kind"] == "transfer" and r["to"] == task]
        top.broken_barh(ops, (lane - 0.4, 0.38), facecolors=_COMPUTE, gid="compute", alpha=0.8)
        top.broken_barh(received, (lane + 0.02, 0.38), facecolors=_TRANSFER, gid="transfer", alpha=0.8)
    top.set_yticks(range(len(tasks)), tasks)
    top.set_ylim(len(tasks) - 0.5, -0.5)
    from matplotlib.patches import Patch

    top.legend(
        handles=[
            Patch(color=_COMPUTE, label=_("compute (ops)")),
            Patch(color=_TRANSFER, label=_("transfer (received)")),
        ],
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=8,
    )
    for lane, link in enumerate(links):
        on_link = [ms(r) for r in records if r["kind"] == "transfer" and (r["from"], r["to"]) == link]
        bottom.broken_barh(on_link, (lane - 0.35, 0.7), facecolors=_TRANSFER, gid="transfer", alpha=0.6)
        mine = [u for u in usage if (u["from"], u["to"]) == link]
        per_step = sum(u["bytes"] for u in mine) / len(mine)
        bottom.annotate(
            _("{size} a step, busy {busy:.0%}").format(
                size=_size(per_step), busy=max(u["busy"] for u in mine)
            ),
            (1.0, lane),
            xycoords=("axes fraction", "data"),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    bottom.set_yticks(range(len(links)), [f"{a} → {b}" for a, b in links])
    bottom.set_ylim(len(links) - 0.5, -0.5)
    for s, (offset, span) in layout.items():
        for ax in (top, bottom):
            ax.axvspan(offset / 1000.0, (offset + span) / 1000.0, color="0.5", alpha=0.06, lw=0)
        top.annotate(_("step {s}").format(s=s), (offset / 1000.0, -0.5), va="bottom", fontsize=8)
    bottom.set_xlabel(
        _("time (ms); each step from its first op")
        if step is not None
        else _("time (ms); each step from its first op, steps in order")
    )
    top.set_title(title or _("compute and transfers per task"), pad=14)
    bottom.set_title(
        _("links: transfers under way; bytes a step, the largest share of a step with one under way"),
        fontsize=9,
    )
    fig.tight_layout()
    return top, bottom
