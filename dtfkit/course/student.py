"""Student copies of the instructor notebooks: solutions become stubs, hidden checks go away.

The markers are nbgrader's, so ``nbgrader generate_assignment`` reads the same notebooks:

- in code cells, the lines from ``### BEGIN SOLUTION`` to ``### END SOLUTION`` become
  ``# YOUR CODE HERE`` + ``raise NotImplementedError()`` at the marker's indentation;
- in markdown cells, that region becomes ``YOUR ANSWER HERE``;
- the lines from ``### BEGIN HIDDEN TESTS`` to ``### END HIDDEN TESTS`` are removed;
- every output and execution count is cleared.

Example::

    from dtfkit.course.student import write_student_copies
    write_student_copies("notebooks", "student")   # student/01_clusterspec_basics.ipynb, ...

or ``python -m dtfkit student-copies notebooks/ -o student/``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from dtfkit.errors import DtfkitError

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")


class MarkerError(DtfkitError):
    """A notebook's solution or hidden-test markers do not pair up."""


def _source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _replace_regions(text: str, begin: str, end: str, replacement, where: str) -> tuple[str, int]:
    """Replace each begin..end block of lines (markers included) by ``replacement(indent)``."""
    out: list[str] = []
    inside: str | None = None
    count = 0
    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip()
        if stripped == begin:
            if inside is not None:
                raise MarkerError(f"{where}, line {number}: {begin!r} inside another one (missing {end!r})")
            inside = line[: len(line) - len(line.lstrip())]
            count += 1
            out.extend(replacement(inside))
        elif stripped == end:
            if inside is None:
                raise MarkerError(f"{where}, line {number}: {end!r} without {begin!r}")
            inside = None
        elif inside is None:
            out.append(line)
    if inside is not None:
        raise MarkerError(f"{where}: {begin!r} is never closed by {end!r}")
    return "\n".join(out), count


def student_cell(cell: dict[str, Any], where: str = "cell") -> dict[str, Any]:
    """The student version of one cell (a new dict; the input is not changed)."""
    cell = copy.deepcopy(cell)
    text = _source(cell)
    if cell.get("cell_type") == "code":
        text, _ = _replace_regions(
            text, BEGIN_SOLUTION, END_SOLUTION, lambda ind: [ind + s for s in STUB], where
        )
        text, _ = _replace_regions(text, BEGIN_HIDDEN, END_HIDDEN, lambda ind: [], where)
        text = text.rstrip("\n")
        cell["outputs"] = []
        cell["execution_count"] = None
    elif cell.get("cell_type") == "markdown":
        text, _ = _replace_regions(
            text, BEGIN_SOLUTION, END_SOLUTION, lambda ind: [ind + "YOUR ANSWER HERE"], where
        )
    lines = text.split("\n")
    cell["source"] = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    return cell


def student_notebook(nb: dict[str, Any], name: str = "notebook") -> dict[str, Any]:
    """The student version of a notebook (nbformat 4 JSON as a dict)."""
    out = copy.deepcopy(nb)
    out["cells"] = [student_cell(c, f"{name}, cell {i}") for i, c in enumerate(nb.get("cells", []))]
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
    source, output = Path(source), Path(output)
    if not source.exists():
        raise DtfkitError(f"{source} does not exist: give a folder of notebooks or one notebook")
    notebooks = [source] if source.is_file() else sorted(source.glob("*.ipynb"))
    if not notebooks:
        raise DtfkitError(f"no notebook (*.ipynb) in {source}")
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
