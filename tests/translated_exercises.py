"""The translated chapters under nbval: one whole (chapter 1), and of every other only its exercises.

A translated chapter's lesson runs the English chapter's code line for line (``tests/test_translations.py``
holds the code identical), so executing it again would repeat the English run; what differs is what the
library says in the reader's language: the exercises' feedback. ``exercise_items`` keeps, of a translated
chapter other than those in ``WHOLE``, the cell that sets the language and the exercise cells that stand
alone: every name they read is bound in the exercises section (or is a builtin). A cell that reads a name
of the lesson (``cluster.close()`` at the end) belongs to the lesson's cluster, which never started here.

``tests/conftest.py`` calls it from ``pytest_collection_modifyitems``, after the reruns are inserted.

Example::

    $ python -m pytest --collect-only -q tests/conftest.py notebooks/zh_CN/03_sync_replicas_optimizer.ipynb
    notebooks/zh_CN/03_sync_replicas_optimizer.ipynb::Cell 0
    notebooks/zh_CN/03_sync_replicas_optimizer.ipynb::Cell 47
    ...
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from checked_cells import upstream_names
from notebook_sections import exercises_start, source
from section_reruns import english_cells

from dtfkit.i18n import LANGUAGE_CELL_ID

WHOLE = ("01_",)  # translated chapters executed from the first cell to the last
KERNEL_NAMES = {"get_ipython", "display"}  # what IPython gives every cell


def standalone_exercise_cells(cells: list[Any]) -> list[int]:
    """The indices of the exercise cells that run without the lesson before them: none reads a name
    that only the lesson binds."""
    start = exercises_start(cells)
    code = [(i, source(c)) for i, c in enumerate(cells[start:], start) if c["cell_type"] == "code"]
    from_the_lesson = upstream_names("\n".join(text for _i, text in code)) - KERNEL_NAMES
    return [i for i, text in code if not upstream_names(text) & from_the_lesson]


def exercise_items(items: list[Any]) -> list[Any]:
    """``items`` without the lesson cells of the translated chapters not in ``WHOLE``."""
    by_notebook: dict[Any, list[Any]] = defaultdict(list)
    for item in items:
        if type(item).__name__ == "IPyNbCell":
            by_notebook[item.parent].append(item)
    dropped: set[int] = set()
    for notebook, cells in by_notebook.items():
        path = notebook.path
        if path.parent.name == "notebooks" or path.name.startswith(WHOLE):
            continue
        all_cells = notebook.nb.cells
        # The exercises heading is translated: find the section by the English chapter's cells.
        keep = {id(all_cells[i]) for i in standalone_exercise_cells(english_cells(path, all_cells))}
        keep |= {id(c) for c in all_cells if c.get("id") == LANGUAGE_CELL_ID}
        position = {id(c): i for i, c in enumerate(all_cells)}
        for item in cells:
            original = all_cells[position[id(item.cell)]] if id(item.cell) in position else None
            if original is None or id(original) not in keep:
                dropped.add(id(item))
    return [item for item in items if id(item) not in dropped]
