"""The chapters' stateful sections run twice in a row under nbval, in the chapter's own kernel.

Every lesson section that kills, restarts or closes tasks (or whose cluster an earlier section
closed) must survive a learner running it again: ``cluster.ensure_running()`` brings a cluster
back to the state the section starts from. ``insert_reruns`` adds a second copy of each such
section's code cells right after the section's last cell, so nbval executes the section twice in
the kernel that runs the whole chapter, and compares the checked cells (``# NBVAL_CHECK_OUTPUT``)
of both passes with the committed outputs. Then the chapter goes on, from the state a learner who
ran the section twice is in. No chapter is executed an extra time for this.

``tests/conftest.py`` calls it from ``pytest_collection_modifyitems``, so it applies whenever that
conftest is loaded: with ``tests`` among the paths (``.ci/run`` gives ``tests notebooks``), or with
``tests/conftest.py`` named before one chapter.

Example::

    $ python -m pytest --collect-only -q tests/conftest.py notebooks/01_clusterspec_basics.ipynb | grep again
    notebooks/01_clusterspec_basics.ipynb::Cell 27 (again)
"""

from __future__ import annotations

import copy
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from notebook_sections import exercises_start, section_span

# chapter file-name prefix -> (first heading, last heading or None): the cells from the first
# heading to the end of the last one's section (default: the first one's) run twice in a row.
RERUNS: dict[str, list[tuple[str, str | None]]] = {
    "01_": [("## 5.", None)],  # kills worker:1, restarts it
    "02_": [("## 4.", None)],  # kills the chief; a timeout kills worker:1; restarts worker:1
    "03_": [("## 6.", None)],  # a timeout kills the chief
    # 1 and 2 fill the ps and the metric log, 2 trains on from checkpoint_dir, 3 kills and restarts every task
    "04_": [("## 1.", None), ("## 2.", None), ("## 3.", None)],
    # Part 1 closes its cluster (and begins by starting one); Part 2's section kills and restarts worker:1
    "07_": [("## Part 1", None), ("### Kill a worker", None)],
    "09_": [("## Part 2", "## Part 3")],  # Part 3 closes the cluster Part 2 needs
    "10_": [("## 3.", None)],  # kills worker:1 on its Ray node and restarts it there
    # each section starts its cluster, makes tasks fail (killed, timed out, SIGTERM) and closes it
    "12_": [("## 2.", None), ("## 3.", None), ("## 4.", None)],
}
AGAIN = " (again)"


def rerun_spans(name: str, cells: Sequence[Any]) -> list[tuple[int, int]]:
    """The ``(start, end)`` cell spans of the notebook ``name`` that run twice, in order.

    Raises ValueError when a span reaches into the exercises or two spans overlap: a section
    runs again only after the whole of it ran once.
    """
    prefixes = [p for p in RERUNS if name.startswith(p)]
    if not prefixes:
        return []
    spans = sorted(section_span(cells, first, last) for first, last in RERUNS[prefixes[0]])
    lesson_end = exercises_start(cells)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        if start < end:
            raise ValueError(f"{name}: sections that run twice overlap ({spans})")
    if spans and spans[-1][1] > lesson_end:
        raise ValueError(f"{name}: a section that runs twice reaches into the exercises")
    return spans


def insert_reruns(items: list[Any]) -> None:
    """Add, after each stateful section's cells, a second nbval item for each of its code cells."""
    by_notebook: dict[Any, list[int]] = defaultdict(list)
    for index, item in enumerate(items):
        if type(item).__name__ == "IPyNbCell":
            by_notebook[item.parent].append(index)
    inserts: list[tuple[int, list[Any]]] = []
    for notebook, indices in by_notebook.items():
        cells = notebook.nb.cells
        position = {id(cell): i for i, cell in enumerate(cells)}
        for start, end in rerun_spans(notebook.path.name, english_cells(notebook.path, cells)):
            section = [i for i in indices if start <= position[id(items[i].cell)] < end]
            if not section:
                raise ValueError(f"{notebook.path.name}: no code cell between cells {start} and {end}")
            copies = [_again(items[i]) for i in section]
            inserts.append((section[-1] + 1, copies))
    for at, copies in sorted(inserts, key=lambda insert: insert[0], reverse=True):
        items[at:at] = copies


def english_cells(path: Path, cells: Sequence[Any]) -> Sequence[Any]:
    """The cells whose headings name the sections, one for each of ``cells``: a translated chapter
    (``notebooks/zh_CN/``) has the English chapter's cells, by id, with its headings translated, after
    a first cell of its own that sets dtfkit's language (``tests/test_translations.py``)."""
    english = Path(path).parent.parent / Path(path).name
    if Path(path).parent.name == "notebooks" or not english.exists():
        return cells
    by_id = {c["id"]: c for c in json.loads(english.read_text(encoding="utf-8"))["cells"]}
    return [by_id.get(c.get("id"), c) for c in cells]


def _again(item: Any) -> Any:
    # A copy of the cell, not the cell: nbval's coalesce_streams merges a cell's stream outputs into
    # the first one in place, so a second item holding the same cell would compare against a
    # reference with its later streams doubled (chapter 12 failed so in a fresh-clone run).
    return type(item).from_parent(
        item.parent,
        name=item.name + AGAIN,
        cell_num=item.cell_num,
        cell=copy.deepcopy(item.cell),
        options=item.options,
    )
