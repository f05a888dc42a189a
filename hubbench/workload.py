"""What each student of the bench runs: chapter 1's first cells, then exercise 1.1 (runs in the bench's process).

The lesson is the chapter's own code cells, read from the instructor notebook, from its imports to the first
check that every task got its ``TF_CONFIG`` (that cell runs a function on every task, so the first cluster is
up and answering when it ends), then one cell that prints where the cluster's tasks listen, and the chapter's
closing ``cluster.close()``. The exercise is 1.1 as nbgrader hands it out: the release of an assignment made
from the chapter's exercises section (the imports, 1.1's answer cell, 1.1's check cell), which the bench
fills with the chapter's solution, or with a wrong answer for the students told to get it wrong.

Example::

    lesson = lesson_cells(NOTEBOOKS / "01_clusterspec_basics.ipynb")
    source = assignment_source(NOTEBOOKS / "01_clusterspec_basics.ipynb")   # an nbgrader source notebook
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from dtfkit.i18n import LANGUAGE_CELL_ID
from edition.student import BEGIN_SOLUTION, END_SOLUTION, nbgrader_notebook

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
CHAPTER = "01_clusterspec_basics"
ASSIGNMENT = "class01"  # the nbgrader assignment's name
EXERCISE = "1.1"
READY_MARK = "dtfkit-bench: first cluster ready"
# Printed by the lesson's probe cell: the student's cluster, isolated or not, and its addresses.
PROBE = f"""import json as _json
from dtfkit.engine.platform import state as _state
_probe = {{"isolated": cluster.isolated, "addresses": cluster.cluster_spec, "pids": cluster.pids(),
          "runtime": _state.base_dir()}}
print("dtfkit-bench-cluster " + _json.dumps(_probe))
print({READY_MARK!r})"""
# A wrong answer that runs on the cluster: y is created where the sum runs, so the check's trace sees it there.
WRONG_ANSWER = '''def build(tf, variables_on, compute_on):
    """y on the wrong task: the check must see it on compute_on, not on variables_on."""
    with tf.compat.v1.device(variables_on):
        x = tf.compat.v1.get_variable("x", initializer=tf.fill([2, 2], 3.0))
    with tf.compat.v1.device(compute_on):
        y = tf.compat.v1.get_variable("y", initializer=tf.fill([2, 2], 4.0))
        return x + y
'''


def _src(cell: dict[str, Any]) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _chapter(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def chapter_path(lang: str | None = None) -> Path:
    """Chapter 1 in ``lang``'s edition (``notebooks/zh_CN/...``), the English one for None.

    Example::

        >>> chapter_path("zh_CN").parent.name
        'zh_CN'
    """
    path = NOTEBOOKS / (lang or "") / f"{CHAPTER}.ipynb"
    if not path.is_file():
        raise ValueError(f"there is no {lang} edition of chapter 1 ({path} does not exist)")
    return path


def lesson_cells(path: Path = NOTEBOOKS / f"{CHAPTER}.ipynb") -> list[str]:
    """The lesson's code, cell by cell (see the module's docstring)."""
    cells = [_src(c) for c in _chapter(path)["cells"] if c["cell_type"] == "code"]
    start = next(i for i, s in enumerate(cells) if "import dtfkit" in s)
    runs = next(i for i, s in enumerate(cells) if "def what_each_task_was_given" in s)
    checked = next(i for i in range(runs, len(cells)) if cells[i].startswith("# NBVAL_CHECK_OUTPUT"))
    if "cluster = dtfkit.LocalCluster(" not in "\n".join(cells[start:checked]):
        raise ValueError(f"{path.name}: the lesson's first cells no longer start a LocalCluster")
    return [*cells[start : checked + 1], PROBE, "cluster.close()"]


def assignment_source(path: Path = NOTEBOOKS / f"{CHAPTER}.ipynb") -> dict[str, Any]:
    """An nbgrader source notebook: the exercises section's imports and exercise 1.1 (answer and check)."""
    source = nbgrader_notebook(_chapter(path), path.name, exercises_only=True)
    prefix = "ex" + EXERCISE.replace(".", "_")
    kept = []
    for cell in source["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id", "")
        text = _src(cell)
        if (
            grade_id.startswith(prefix)
            or cell.get("id") == LANGUAGE_CELL_ID
            or (cell["cell_type"] == "code" and "from dtfkit.course import check" in text)
        ):
            kept.append(cell)
        elif cell["cell_type"] == "markdown" and re.match(
            rf"#+ *(Exercise|练习) {re.escape(EXERCISE)}\b", text
        ):
            kept.append(cell)
    if [c["metadata"].get("nbgrader", {}).get("grade_id") for c in kept if "nbgrader" in c["metadata"]] != [
        f"{prefix}_answer",
        f"{prefix}_check",
    ]:
        raise ValueError(f"{path.name}: exercise {EXERCISE}'s answer and check cells were not found in order")
    return {**source, "cells": kept}


def check_outcome(text: str) -> str:
    """ "passed", "failed" or "" from what exercise 1.1's check cell showed, in any edition: its first line
    starts with ✔ or ✘ and names the exercise (``exercise 1.1 (`` / ``练习 1.1（``; the HTML box's ``练习 1.1：``).

    Example::

        >>> check_outcome("✘ 练习 1.1（worker 上的变量）未通过：...")
        'failed'
        >>> check_outcome("✔ 练习 1.1：把变量放在 worker 上（通过）")  # the HTML box
        'passed'
    """
    found = re.search(rf"([✔✘]) (?:exercise|练习) {re.escape(EXERCISE)}[ （(：:]", text)
    return "" if found is None else "passed" if found.group(1) == "✔" else "failed"


def solution_of(source: dict[str, Any]) -> str:
    """The answer cell's solution, as a student would type it (the markers removed)."""
    answer = next(c for c in source["cells"] if c["metadata"].get("nbgrader", {}).get("solution"))
    lines = _src(answer).splitlines()
    return "\n".join(line for line in lines if line.strip() not in (BEGIN_SOLUTION, END_SOLUTION)) + "\n"


def answered(release: dict[str, Any], answer: str) -> dict[str, Any]:
    """The release notebook with its answer cell replaced by ``answer``."""
    nb = copy.deepcopy(release)
    for cell in nb["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("solution"):
            cell["source"] = answer
    return nb
