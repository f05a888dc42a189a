"""One small HTML table builder for the kit's ``_repr_html_`` methods (no dependencies).

Every cell, header and caption is passed through ``html.escape``, so a value such as
``"<b>"`` shows as text. The table is plain HTML with inline styles: it renders the
same in Jupyter, VS Code and a static HTML export.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

CELL_STYLE = "text-align:left"


def html_table(
    header: Sequence[str],
    rows: Sequence[Sequence[Any]],
    caption: str | None = None,
    css_class: str | None = None,
    *,
    row_class: str | None = None,
    row_styles: Sequence[str | None] | None = None,
    cell_style: str = CELL_STYLE,
    table_style: str | None = None,
) -> str:
    """An HTML ``<table>``: one ``<thead>`` row of ``header``, one ``<tbody>`` row per entry of ``rows``.

    Args:
        header: the column titles.
        rows: the body rows; each cell is shown as ``str(cell)``.
        caption: a bold caption above the table, or None.
        css_class: the ``<table>``'s ``class`` (a hook for tests, browser checks and CSS).
        row_class: the ``class`` of every body ``<tr>`` (e.g. one row per finished run).
        row_styles: one inline style per body row (None or ``""``: none), e.g. a background.
        cell_style: the inline style of every ``<th>`` and ``<td>``.
        table_style: the ``<table>``'s inline style.

    Returns the HTML text; attributes are single-quoted.

    Example::

        >>> html_table(["op"], [["<b>"]], css_class="ops")
        "<table class='ops'><thead><tr><th style='text-align:left'>op</th></tr></thead><tbody><tr><td style='text-align:left'>&lt;b&gt;</td></tr></tbody></table>"
    """
    if row_styles is not None and len(row_styles) != len(rows):
        raise ValueError(f"row_styles has {len(row_styles)} entries for {len(rows)} rows")
    cell = f" style='{html.escape(cell_style)}'" if cell_style else ""
    head = "".join(f"<th{cell}>{html.escape(str(h))}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        attrs = _attr("class", row_class) + _attr("style", row_styles[i] if row_styles else None)
        cells = "".join(f"<td{cell}>{html.escape(str(c))}</td>" for c in row)
        body.append(f"<tr{attrs}>{cells}</tr>")
    top = f"<caption style='text-align:left'><b>{html.escape(caption)}</b></caption>" if caption else ""
    return (
        f"<table{_attr('class', css_class)}{_attr('style', table_style)}>{top}"
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def _attr(name: str, value: str | None) -> str:
    return f" {name}='{html.escape(value)}'" if value else ""
