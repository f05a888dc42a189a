"""Runs in the notebook kernel: placement tables by task, their text form and the timeline plot.

Never imports TensorFlow: what runs in the tasks is in ``task_side``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from dtfkit import fonts
from dtfkit.htmltable import html_table
from dtfkit.i18n import N_, _, language


# ------------------------------------------------------- plain Python (no TensorFlow)
def by_task(rows: Iterable[dict[str, Any]], key: str = "op") -> dict[str, list[Any]]:
    """Group one column of a table by task: ``{"ps:0": ["x", "y"], "worker:0": [...]}``.

    >>> by_task([{"op": "x", "task": "ps:0"}, {"op": "m", "task": "worker:0"}, {"op": "y", "task": "ps:0"}])
    {'ps:0': ['x', 'y'], 'worker:0': ['m']}
    """
    out: dict[str, list[Any]] = {}
    for row in rows:
        out.setdefault(row.get("task", ""), []).append(row[key])
    return dict(sorted(out.items()))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, (list, tuple)):
        return (
            ", ".join(str(v) for v in value) if value and not isinstance(value[0], int) else str(list(value))
        )
    return str(value)


def _columns(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None) -> list[str]:
    if columns is not None:
        return list(columns)
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    return list(seen)


# The column names the chapters' tables use, titled in the reader's language (other keys are shown as they are).
COLUMN_TITLES = (
    N_("op"),
    N_("type"),
    N_("kernel"),
    N_("task"),
    N_("device"),
    N_("phase"),
    N_("tensor"),
    N_("from"),
    N_("to"),
    N_("bytes"),
    N_("kind"),
    N_("variable"),
    N_("shape"),
    N_("sends"),
    N_("recvs"),
    N_("ops"),
    N_("forward"),
    N_("backward"),
    N_("update"),
    N_("method"),
    N_("sent MiB"),
    N_("received MiB"),
    N_("formula MiB"),
    N_("asked"),
    N_("busy"),
    N_("shard"),
    N_("transfers"),
)


def column_title(name: str) -> str:
    """A column's title as a table shows it: ``"bytes"`` → ``"字节数"`` in Chinese; an unknown key as it is."""
    return _(name) if name in COLUMN_TITLES else name


def format_table(rows: Iterable[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Rows as aligned plain text (``columns``: which keys, in which order; default all).

    >>> print(format_table([{"op": "x", "task": "ps:0"}, {"op": "MatMul", "task": "worker:0"}]))
    op      task
    ------  --------
    x       ps:0
    MatMul  worker:0
    """
    rows = list(rows)
    cols = _columns(rows, columns)
    cells = [[_cell(row.get(c, "")) for c in cols] for row in rows]
    titles = [column_title(c) for c in cols]
    widths = [max([len(t)] + [len(r[i]) for r in cells]) for i, t in enumerate(titles)]
    lines = ["  ".join(t.ljust(w) for t, w in zip(titles, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


class Table:
    """Show rows in a notebook: an HTML table in Jupyter, aligned text elsewhere.

    ``highlight`` colours the rows of each task (``{"worker:0": "#e8f0ff"}``); by
    default ps, worker and chief tasks get distinct pale colours.

    Example::

        placement.Table(traced["ops"], ["op", "type", "task"], title="where each op ran")
    """

    _PALETTE = ("#fff3d6", "#e3f0ff", "#e6f6e6", "#f6e6f6", "#eeeeee", "#ffe3e3")

    def __init__(
        self,
        rows: Iterable[dict[str, Any]],
        columns: Sequence[str] | None = None,
        *,
        title: str | None = None,
        highlight: dict[str, str] | None = None,
    ):
        self.rows = list(rows)
        self.columns = _columns(self.rows, columns)
        self.title = title
        if highlight is None:
            tasks = sorted({row.get("task", "") for row in self.rows} - {""})
            highlight = {t: self._PALETTE[i % len(self._PALETTE)] for i, t in enumerate(tasks)}
        self.highlight = highlight

    def __repr__(self) -> str:
        text = format_table(self.rows, self.columns)
        return f"{self.title}\n{text}" if self.title else text

    def _repr_html_(self) -> str:
        colours = [self.highlight.get(row.get("task", "")) for row in self.rows]
        return html_table(
            [column_title(c) for c in self.columns],
            [[_cell(row.get(c, "")) for c in self.columns] for row in self.rows],
            caption=self.title,
            row_styles=[f"background:{c}" if c else None for c in colours],
        )


def plot_timeline(
    rows: Iterable[dict[str, Any]],
    ax: Any = None,
    *,
    color_by: str | None = None,
    order: Sequence[str] | None = None,
    label_ops: Iterable[str] = (),
    title: str | None = None,
):
    """Draw ``op_table`` rows as a timeline: one lane per task, one bar per op.

    ``color_by`` names a column whose values colour the bars (with a legend), e.g. a
    ``"phase"`` you added, listed in the legend in ``order`` (default: as they first
    appear); by default each lane has its own colour. ``label_ops``
    names ops to write next to their bar. Uses matplotlib (imported here); returns
    the axes.

    Example::

        plot_timeline(traced["ops"], label_ops=["MatMul", "MatMul_1"])
        plot_timeline(rows, color_by="phase", order=["forward", "backward", "update"])
    """
    import matplotlib.pyplot as plt

    fonts.draw_in_the_language(language())  # the reader's language in the figure's words

    rows = list(rows)
    tasks = sorted({row["task"] for row in rows})
    if ax is None:
        ax = plt.subplots(figsize=(9, 0.8 + 0.55 * max(1, len(tasks))))[1]
    palette = plt.get_cmap("tab10")
    groups = list(dict.fromkeys(row.get(color_by, "") for row in rows)) if color_by else tasks
    if color_by and order is not None:
        groups = [g for g in order if g in groups] + [g for g in groups if g not in order]
    labels = set(label_ops)
    for row in rows:
        lane = tasks.index(row["task"])
        group = groups.index(row.get(color_by, "") if color_by else row["task"])
        width = max(row["duration_ms"], 0.005)
        ax.barh(
            lane,
            width,
            left=row["start_ms"],
            height=0.6,
            color=palette(group % 10),
            edgecolor="black",
            lw=0.3,
        )
        if row["op"] in labels:
            ax.annotate(
                row["op"],
                (row["start_ms"] + width, lane),
                xytext=(3, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
            )
    if color_by:
        from matplotlib.patches import Patch

        ax.legend(
            handles=[Patch(color=palette(i % 10), label=str(g)) for i, g in enumerate(groups)],
            loc="upper left",
            bbox_to_anchor=(1.0, 1.0),
            fontsize=8,
        )
    ax.set_yticks(range(len(tasks)), tasks)
    ax.set_ylim(len(tasks) - 0.5, -0.5)
    ax.set_xlabel(_("time since the first op of the step (ms)"))
    if title:
        ax.set_title(title)
    return ax
