"""Student copies of the instructor notebooks, and nbgrader source notebooks (``python -m dtfkit student-copies``).

They are made from a checkout's chapters by the instructor, so this lives beside the package students install.

Student copies: solutions become stubs, hidden checks go away. The markers are nbgrader's:

- in code cells, the lines from ``### BEGIN SOLUTION`` to ``### END SOLUTION`` become
  ``# YOUR CODE HERE`` + ``raise NotImplementedError()`` at the marker's indentation;
- in markdown cells, that region becomes ``YOUR ANSWER HERE``;
- the lines from ``### BEGIN HIDDEN TESTS`` to ``### END HIDDEN TESTS`` are removed;
- every output and execution count is cleared.

nbgrader's own preprocessors cut them (``ClearSolutions``, ``ClearHiddenTests``, ``ClearOutput``; nbgrader is
the ``[hub]`` extra's, imported only when a copy is written), once every marker is found alone on its line.

Example::

    from edition.student import write_student_copies
    write_student_copies("notebooks", "student")   # student/01_clusterspec_basics.ipynb, ...

or ``python -m dtfkit student-copies notebooks/ -o student/``.

nbgrader source notebooks (``write_nbgrader_source``, ``student-copies --format nbgrader``) keep
the solutions and hidden tests and add the cell metadata nbgrader grades by: each checked
exercise's answer cell (the cell with the solution region) becomes an autograded answer
(``exN_k_answer``) and its check cell (``# check exercise N.k``) an autograder test worth one
point (``exN_k_check``), whose hidden ``.require()`` fails a wrong answer. ``nbgrader
generate_assignment`` then writes the release version and ``nbgrader autograde`` grades
submissions (see ``docs/nbgrader.md``).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from dtfkit.course.classroom import STUB, TAG as EXERCISE_TAG, in_the_exercises_section
from dtfkit.errors import DtfkitError

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"


class MarkerError(DtfkitError):
    """A notebook's solution or hidden-test markers do not pair up."""


def _source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _nbgrader_steps() -> list[Any]:
    """nbgrader's ClearSolutions, ClearHiddenTests and ClearOutput, for notebooks without nbgrader's cell
    metadata (the instructor notebooks), with ``STUB`` for a code solution."""
    try:
        from nbgrader.preprocessors import ClearHiddenTests, ClearOutput, ClearSolutions
    except ImportError:
        raise DtfkitError(
            "student copies are cut by nbgrader's preprocessors, and nbgrader is not installed. Next step: "
            "python3 -m pip install 'dtfkit[hub]' (the classroom extra, which brings nbgrader)"
        ) from None
    return [
        ClearSolutions(code_stub={"python": "\n".join(STUB)}, enforce_metadata=False),
        ClearHiddenTests(enforce_metadata=False),
        ClearOutput(),
    ]


def student_notebook(nb: dict[str, Any], name: str = "notebook") -> dict[str, Any]:
    """The student version of a notebook (nbformat 4 JSON as a dict; a new one), cut by nbgrader's
    preprocessors once every marker stands alone on its line and pairs up (``MarkerError`` names the cell
    and line). Code cells lose their trailing newlines, as Jupyter saves them."""
    import nbformat

    steps = _nbgrader_steps()
    out = nbformat.from_dict({**nb, "cells": nb.get("cells", []), "metadata": nb.get("metadata", {})})
    for index, cell in enumerate(out.cells):
        cell.source, where = _source(cell), f"{name}, cell {index}"
        _exact_markers(cell.source, where)
        _region_bodies(cell.source, BEGIN_SOLUTION, END_SOLUTION, where)
        _region_bodies(cell.source, BEGIN_HIDDEN, END_HIDDEN, where)
    resources: dict[str, Any] = {}
    for step in steps:
        out, resources = step.preprocess(out, resources)
    for cell in out.cells:
        text = cell.source.rstrip("\n") if cell.cell_type == "code" else cell.source
        lines = text.split("\n")
        cell.source = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    return out


def count_markers(nb: dict[str, Any]) -> dict[str, int]:
    """How many solution and hidden-test regions a notebook holds."""
    text = "\n".join(_source(c) for c in nb.get("cells", []))
    lines = [line.strip() for line in text.split("\n")]
    return {"solutions": lines.count(BEGIN_SOLUTION), "hidden": lines.count(BEGIN_HIDDEN)}


def write_student_copies(source: str | Path, output: str | Path) -> list[Path]:
    """Write the student copy of every ``*.ipynb`` in ``source`` (a folder or one file) into ``output``.

    Returns the paths written. Raises ``MarkerError`` (naming the notebook, cell and line)
    when markers do not pair up; nothing is written for that notebook.

    Example::

        write_student_copies("notebooks", "student")
    """
    notebooks, output = _notebooks_in(source), Path(output)
    if output.resolve() in {p.parent.resolve() for p in notebooks}:
        raise DtfkitError(f"the output folder {output} holds the instructor notebooks: choose another one")
    # Every notebook is read and converted before anything is written or created.
    students = [(path, student_notebook(_read_notebook(path), path.name)) for path in notebooks]
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for path, student in students:
        target = output / path.name
        target.write_text(json.dumps(student, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(target)
    return written


def _notebooks_in(source: str | Path) -> list[Path]:
    """The notebook ``source`` names, or the ``*.ipynb`` files of the folder it names."""
    source = Path(source)
    if not source.exists():
        raise DtfkitError(f"{source} does not exist: give a folder of notebooks or one notebook")
    notebooks = [source] if source.is_file() else sorted(source.glob("*.ipynb"))
    if not notebooks:
        raise DtfkitError(f"no notebook (*.ipynb) in {source}")
    return notebooks


def _read_notebook(path: Path) -> dict[str, Any]:
    """A notebook's JSON; a clear error for anything that is not an nbformat 4 notebook."""
    if path.suffix != ".ipynb":
        raise DtfkitError(f"{path} is not a notebook (*.ipynb): nothing was written")
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise DtfkitError(f"cannot read {path}: {exc}; nothing was written") from None
    except ValueError as exc:
        raise DtfkitError(
            f"{path} is not valid JSON ({exc}); nothing was written. Next step: open and save it "
            "in Jupyter, or restore it from version control"
        ) from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise DtfkitError(f"{path} is JSON but not a notebook (no list of cells); nothing was written")
    if not all(isinstance(c, dict) for c in nb["cells"]):
        raise DtfkitError(f"{path}: a cell is not a JSON object; nothing was written")
    return nb


# ------------------------------------------------------------------ nbgrader source notebooks
NBGRADER_SCHEMA = 3
_CHECK_HEADER = re.compile(r"^# check exercise (\d+)\.(\d+)(?![\d.])")
_LOOKS_LIKE_CHECK = re.compile(r"^#\s*check\s+exercise\b", re.I)
# nbgrader finds its markers by substring ("BEGIN SOLUTION" anywhere in a line), so any line that
# holds one must be exactly our marker, or the two tools would cut different regions.
_NBGRADER_DELIMITERS = {
    "BEGIN SOLUTION": BEGIN_SOLUTION,
    "END SOLUTION": END_SOLUTION,
    "BEGIN HIDDEN TESTS": BEGIN_HIDDEN,
    "END HIDDEN TESTS": END_HIDDEN,
}


def _region_bodies(text: str, begin: str, end: str, where: str) -> list[str]:
    """The text inside each begin..end region; ``MarkerError`` (naming the line) when they do not pair up."""
    bodies: list[str] = []
    current: list[str] | None = None
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip() == begin:
            if current is not None:
                raise MarkerError(f"{where}, line {number}: {begin!r} inside another one (missing {end!r})")
            current = []
        elif line.strip() == end:
            if current is None:
                raise MarkerError(f"{where}, line {number}: {end!r} without {begin!r}")
            bodies.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    if current is not None:
        raise MarkerError(f"{where}: {begin!r} is never closed by {end!r}")
    return bodies


def _exact_markers(text: str, where: str) -> None:
    for number, line in enumerate(text.split("\n"), start=1):
        for word, marker in _NBGRADER_DELIMITERS.items():
            if word in line and line.strip() != marker:
                raise MarkerError(
                    f"{where}, line {number}: {line.strip()!r} holds {word!r} but is not the marker "
                    f"{marker!r} alone on its line; nbgrader would cut a region there. Next step: "
                    f"write the marker exactly, or reword the line"
                )


def _nbgrader_meta(grade_id: str, *, grade: bool, solution: bool, locked: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": locked,
        "schema_version": NBGRADER_SCHEMA,
        "solution": solution,
    }
    if grade:
        meta["points"] = 1
    return meta


def nbgrader_notebook(
    nb: dict[str, Any], name: str = "notebook", *, lock_others: bool = False, exercises_only: bool = False
) -> dict[str, Any]:
    """The nbgrader source version of an instructor notebook (nbformat 4 JSON as a dict; a new dict).

    Solutions and hidden tests stay. Each checked exercise N.k is an answer cell (a code cell
    with a ``### BEGIN SOLUTION`` region) followed by its check cell (a code cell starting
    ``# check exercise N.k`` whose hidden tests call ``.require()``); they get nbgrader's
    metadata as ``exN_k_answer`` (autograded answer) and ``exN_k_check`` (autograder test,
    1 point). ``lock_others=True`` marks every other cell read-only; ``exercises_only=True``
    keeps only the cells tagged ``dtfkit-exercise`` (the exercises section, which runs alone).
    Outputs are cleared and any older nbgrader metadata is replaced.

    Raises ``MarkerError`` naming the notebook and cell when markers do not pair up, a check
    cell has no answer cell or no hidden ``.require()``, an answer cell has no check cell, an
    exercise is checked twice, or the notebook checks no exercise.

    Example::

        source = nbgrader_notebook(json.load(open("notebooks/05_keras_mirrored_strategy.ipynb")))
        [c["metadata"]["nbgrader"]["grade_id"] for c in source["cells"] if "nbgrader" in c["metadata"]]
        # ['ex5_1_answer', 'ex5_1_check', 'ex5_2_answer', 'ex5_2_check']
    """
    out = copy.deepcopy(nb)
    indexed = list(enumerate(out.get("cells", [])))
    if exercises_only:
        indexed = [(i, c) for i, c in indexed if in_the_exercises_section(c)]
        if not indexed:
            raise MarkerError(
                f"{name}: no cell is tagged {EXERCISE_TAG!r}, so there is no exercises section to write. "
                "Next step: write the whole notebook (leave out the exercises-only option)"
            )
    pending: tuple[dict[str, Any], str] | None = None  # an answer cell waiting for its check cell
    exercises: dict[str, str] = {}
    locked_ids: set[str] = set()
    for index, cell in indexed:
        where = f"{name}, cell {index}" + (f" (id {cell['id']})" if cell.get("id") else "")
        text = _source(cell)
        _exact_markers(text, where)
        solutions = _region_bodies(text, BEGIN_SOLUTION, END_SOLUTION, where)
        hidden = _region_bodies(text, BEGIN_HIDDEN, END_HIDDEN, where)
        metadata = cell.setdefault("metadata", {})
        metadata.pop("nbgrader", None)
        metadata.pop("execution", None)  # timings of a run whose outputs are cleared
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        first = text.lstrip("\n").split("\n", 1)[0]
        header = _CHECK_HEADER.match(first) if cell.get("cell_type") == "code" else None
        if header is None and cell.get("cell_type") == "code" and _LOOKS_LIKE_CHECK.match(first):
            raise MarkerError(
                f"{where}: {first!r} looks like a check cell's first line but is not "
                "'# check exercise N.k' (for example '# check exercise 3.1'). Next step: fix the line"
            )
        if header:
            number = f"{header.group(1)}.{header.group(2)}"
            grade_id = f"ex{header.group(1)}_{header.group(2)}"
            if solutions:
                raise MarkerError(
                    f"{where}: the check cell of exercise {number} holds a solution region. Next step: "
                    "move the answer into its own cell just before the check cell"
                )
            if not any(".require(" in body for body in hidden):
                raise MarkerError(
                    f"{where}: the check cell of exercise {number} has no hidden test that fails a wrong "
                    "answer, so nbgrader would give every submission the point. Next step: end it with "
                    f"'{BEGIN_HIDDEN}', 'result.require()', '{END_HIDDEN}' before the line 'result'"
                )
            if number in exercises:
                raise MarkerError(
                    f"{where}: exercise {number} is checked a second time (first in {exercises[number]}). "
                    "Next step: renumber one of the check cells"
                )
            if pending is None:
                raise MarkerError(
                    f"{where}: the check cell of exercise {number} has no answer cell before it (a code cell "
                    f"with a '{BEGIN_SOLUTION}' ... '{END_SOLUTION}' region after the previous check cell)"
                )
            answer, _ = pending
            answer["metadata"]["nbgrader"] = _nbgrader_meta(
                f"{grade_id}_answer", grade=False, solution=True, locked=False
            )
            metadata["nbgrader"] = _nbgrader_meta(
                f"{grade_id}_check", grade=True, solution=False, locked=True
            )
            exercises[number] = where
            pending = None
        elif solutions:
            if cell.get("cell_type") != "code":
                raise MarkerError(
                    f"{where}: a solution region in a {cell.get('cell_type')} cell. nbgrader grades written "
                    "answers by hand, and this writer pairs only code answers with a check cell. Next step: "
                    "turn the answer into a code cell, or remove its markers from the nbgrader source"
                )
            if hidden:
                raise MarkerError(
                    f"{where}: an answer cell holds hidden tests. Next step: move them into the exercise's "
                    "check cell (the cell starting '# check exercise N.k' after it)"
                )
            if pending is not None:
                raise MarkerError(
                    f"{pending[1]}: this answer cell has no check cell before the next answer cell ({where}). "
                    "Next step: add its check cell ('# check exercise N.k') right after it, or merge the two "
                    "answer cells"
                )
            pending = (cell, where)
        elif hidden:
            raise MarkerError(
                f"{where}: hidden tests outside a check cell; nbgrader removes them from the release and "
                "never runs them. Next step: move them into the check cell ('# check exercise N.k') they belong to"
            )
        elif lock_others:
            locked_id = f"cell_{re.sub(r'[^A-Za-z0-9_-]', '_', str(cell.get('id') or index))}"
            # Cell ids should be unique, but a hand-edited notebook may repeat one.
            if locked_id in locked_ids:
                locked_id = f"{locked_id}_{index}"
            locked_ids.add(locked_id)
            metadata["nbgrader"] = _nbgrader_meta(locked_id, grade=False, solution=False, locked=True)
    if pending is not None:
        raise MarkerError(
            f"{pending[1]}: this answer cell has no check cell after it. Next step: add the exercise's check "
            "cell ('# check exercise N.k', with hidden tests that call result.require()) right after it"
        )
    if not exercises:
        raise MarkerError(
            f"{name}: no checked exercise (a code cell starting '# check exercise N.k' after an answer cell), "
            "so nbgrader would have nothing to grade. Next step: leave this notebook out"
        )
    out["cells"] = [cell for _, cell in indexed]
    return out


def write_nbgrader_source(
    source: str | Path, output: str | Path, *, lock_others: bool = False, exercises_only: bool = False
) -> list[Path]:
    """Write the nbgrader source version of every ``*.ipynb`` in ``source`` (a folder or one file).

    Each notebook becomes its own assignment, named after it: ``output/<stem>/<stem>.ipynb``.
    Give nbgrader's ``source`` folder as ``output``, then run ``nbgrader generate_assignment
    <stem>`` and, once students submitted, ``nbgrader autograde <stem>``. Options as in
    ``nbgrader_notebook``. Every notebook is checked before anything is written: a
    ``MarkerError`` (naming the notebook, cell and line) means nothing was written.

    Example::

        write_nbgrader_source("notebooks", "course/source", exercises_only=True)
        # course/source/05_keras_mirrored_strategy/05_keras_mirrored_strategy.ipynb, ...
    """
    notebooks, output = _notebooks_in(source), Path(output)
    converted = [
        (
            path,
            nbgrader_notebook(
                _read_notebook(path), path.name, lock_others=lock_others, exercises_only=exercises_only
            ),
        )
        for path in notebooks
    ]
    if output.resolve() in {p.parent.resolve() for p in notebooks}:
        raise DtfkitError(f"the output folder {output} holds the instructor notebooks: choose another one")
    written = []
    for path, notebook in converted:
        target = output / path.stem / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(target)
    return written
