"""Classroom mode: smaller steps and clusters, so that grading a notebook stays fast.

Classroom mode is on when ``DTFKIT_CLASSROOM`` is ``1`` (or ``true``/``yes``/``on``), or when
``NBGRADER_EXECUTION`` is set (nbgrader sets it while it autogrades). The exercise checks use
these helpers for every step count and cluster size, so a student copy grades in seconds.

Example::

    from dtfkit.course import classroom

    steps = classroom.scaled(200)           # 200, or 50 in classroom mode
    workers = classroom.size(3, classroom=2)  # 3, or 2 in classroom mode
    classroom.grade("submitted/02_between_graph_replication.ipynb")  # {"2.1": "✔ exercise 2.1 ...", ...}
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from dtfkit.i18n import LANGUAGE_CELL_ID

ENV = "DTFKIT_CLASSROOM"
FACTOR = 4
STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
"""What a student copy puts where a solution was (nbgrader's code stub); a check reports it as not attempted."""


def enabled() -> bool:
    """True in classroom mode (``DTFKIT_CLASSROOM=1``, or ``NBGRADER_EXECUTION`` set)."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def scaled(steps: int, *, minimum: int = 5) -> int:
    """``steps``, or a quarter of it (at least ``minimum``) in classroom mode.

    Example::

        train(steps=classroom.scaled(200))
    """
    if not enabled():
        return steps
    return max(min(steps, minimum), steps // FACTOR)


def size(n: int, *, classroom: int | None = None) -> int:
    """A cluster size: ``n``, or ``classroom`` (default: ``n``) in classroom mode.

    Example::

        LocalCluster(ps=1, workers=classroom.size(3, classroom=2))
    """
    if not enabled() or classroom is None:
        return n
    return classroom


def timeout(seconds: float) -> float:
    """A bound for a call: the same in both modes (a slow shared machine needs it whole)."""
    return float(seconds)


TAG = "dtfkit-exercise"
_CHECK_CELL = re.compile(r"^# check exercise (\d+\.\d+)")
_HEADLINE = re.compile(r"^[✔✘…] exercise .*$", re.M)


def in_the_exercises_section(cell: dict[str, Any]) -> bool:
    """True for a cell of the exercises section (tagged ``dtfkit-exercise``), and for a translated chapter's
    first cell, which sets the language its feedback is shown in (``dtfkit.i18n.LANGUAGE_CELL_ID``)."""
    return TAG in cell.get("metadata", {}).get("tags", []) or cell.get("id") == LANGUAGE_CELL_ID


def exercises_only(nb: dict[str, Any]) -> dict[str, Any]:
    """A notebook (nbformat JSON) cut down to its exercises section: the cells tagged ``dtfkit-exercise``,
    after the cell that sets a translated chapter's language (so its feedback stays in that language).

    The section runs alone: its first code cell imports what the checks need.
    """
    out = dict(nb)
    out["cells"] = [c for c in nb["cells"] if in_the_exercises_section(c)]
    return out


def grade(notebook: str | Path, *, timeout: float = 600, whole: bool = False) -> dict[str, str]:
    """Run a (student's) notebook's exercises in classroom mode; return ``{exercise: result line}``.

    Only the exercises section runs (``whole=True``: every cell), in a fresh kernel with
    ``DTFKIT_CLASSROOM=1``; a cell that raises does not stop the others. A check cell that did
    not show a result reports the error it raised instead.

    Example::

        python -c "from dtfkit.course import classroom; print(classroom.grade('submitted/02_between_graph_replication.ipynb'))"
    """
    import nbformat
    from nbclient import NotebookClient

    path = Path(notebook)
    raw = json.loads(path.read_text(encoding="utf-8"))
    node = nbformat.reads(json.dumps(raw if whole else exercises_only(raw)), as_version=4)
    client = NotebookClient(
        node, timeout=int(timeout), allow_errors=True, resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute(env={**os.environ, ENV: "1"})
    graded: dict[str, str] = {}
    for cell in node.cells:
        match = _CHECK_CELL.match(cell.source) if cell.cell_type == "code" else None
        if not match:
            continue
        texts, error = [], None
        for out in cell.get("outputs", []):
            texts.append(out.get("text", "") + out.get("data", {}).get("text/plain", ""))
            if out.get("output_type") == "error":
                error = f"error: {out['ename']}: {out['evalue']}"
        lines = _HEADLINE.findall("\n".join(texts))
        graded[match.group(1)] = lines[-1] if lines else (error or "no result shown")
    return graded
