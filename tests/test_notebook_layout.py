"""Static checks of the chapters' layout (no kernel): slow cells say so before they run, and the
checked exercises are numbered apart from the open ones.

A code cell that took more than ``SLOW_SECONDS`` in the committed run must carry a notice such
as ``about 40 s on 2 cores``, either in its leading comment lines (``# about 40 s on 2 cores: ...``)
or in the last paragraph of the nearest markdown cell above it (``*The next cell takes about 40 s
on 2 cores.*``). The notices are written for cells over 15 s; the margin of 30 s keeps a
re-execution's noise from failing this test.
"""

from __future__ import annotations

import re

import pytest
from notebook_sections import chapters, duration, exercises_start, headings, load, source

SLOW_SECONDS = 30.0
NOTICE = re.compile(r"\babout \d+(?:[–-]\d+)? ?(?:s|seconds|min|minutes)\b[^\n]*?\bon 2 (?:CPU )?cores", re.I)
CHECKED = re.compile(r"^Exercise (\d+)\.(\S+) ")  # a level-3 heading: "### Exercise 3.1 — Backup workers"
OPEN_ITEM = re.compile(r"^- \*\*(\d+)\.(\w+)\b")  # a top-level item: "- **3.A — Placement ...**"
OPEN_REFERENCE = re.compile(r"\b[Oo]pen exercise (\d+)\.(\w+)\b")
CHECK_CELL = re.compile(r"^# check exercise (\d+)\.(\S+)")


def _chapter(path) -> int:
    return int(path.name[:2])


def _leading_comments(cell) -> str:
    lines = []
    for line in source(cell).splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines)


def _last_paragraph(cell) -> str:
    return re.split(r"\n\s*\n", source(cell).strip())[-1]


def _missing_notices(cells, indices) -> list[str]:
    missing = []
    for index in indices:
        cell = cells[index]
        seconds = duration(cell) if cell["cell_type"] == "code" else None
        if seconds is None or seconds <= SLOW_SECONDS:
            continue
        above = next(
            (cells[i] for i in range(index - 1, -1, -1) if cells[i]["cell_type"] == "markdown"), None
        )
        if NOTICE.search(_leading_comments(cell)) or (
            above is not None and NOTICE.search(_last_paragraph(above))
        ):
            continue
        first_line = source(cell).splitlines()[0] if source(cell) else ""
        missing.append(f"cell {cell.get('id')} ({seconds:.0f} s): {first_line[:60]}")
    return missing


@pytest.mark.parametrize("path", chapters(), ids=lambda p: p.name[:2])
def test_slow_lesson_cells_say_so_before_they_run(path):
    _, nb = load(path.name[:3])
    cells = nb["cells"]
    missing = _missing_notices(cells, range(exercises_start(cells)))
    assert not missing, (
        f"{path.name}: code cells that took more than {SLOW_SECONDS:g} s and do not say so (add "
        "'# about N s on 2 cores: ...' as their first line, or '*The next cell takes about N s on 2 "
        "cores.*' at the end of the markdown cell above):\n" + "\n".join(missing)
    )


def test_slow_exercise_cells_say_so_before_they_run():
    missing = []
    for path in chapters():
        _, nb = load(path.name[:3])
        cells = nb["cells"]
        missing += [
            f"{path.name}: {m}" for m in _missing_notices(cells, range(exercises_start(cells), len(cells)))
        ]
    assert not missing, "exercise cells that take long and do not say so:\n" + "\n".join(missing)


def _exercise_labels(path) -> tuple[list[str], list[str]]:
    """The checked exercises' numbers (``["1", "2"]``) and the open ones' labels (``["A", "B"]``)."""
    _, nb = load(path.name[:3])
    chapter = _chapter(path)
    checked, open_labels = [], []
    for cell in nb["cells"]:
        for level, text in headings(cell):
            match = CHECKED.match(text)
            if level == 3 and match:
                assert int(match.group(1)) == chapter, f"{path.name}: '### {text}' belongs to another chapter"
                checked.append(match.group(2))
        text = source(cell)
        marker = re.search(r"^### More exercises.*$", text, re.M)
        if cell["cell_type"] != "markdown" or not marker:
            continue
        for line in text[marker.end() :].splitlines():
            if line.startswith("- "):
                match = OPEN_ITEM.match(line)
                assert match, (
                    f"{path.name}: an open exercise without its label '**{chapter}.A**': {line[:60]}"
                )
                assert int(match.group(1)) == chapter, f"{path.name}: {line[:40]} belongs to another chapter"
                open_labels.append(match.group(2))
    return checked, open_labels


def test_checked_exercises_are_numbered_and_open_ones_lettered_apart():
    labels = {}
    for path in chapters():
        checked, open_labels = _exercise_labels(path)
        chapter = _chapter(path)
        assert checked == [str(k) for k in range(1, len(checked) + 1)], (
            f"{path.name}: the checked exercises are numbered {chapter}.1, {chapter}.2, ... in order, not {checked}"
        )
        letters = [chr(ord("A") + k) for k in range(len(open_labels))]
        assert open_labels == letters, (
            f"{path.name}: the open exercises are lettered {chapter}.A, {chapter}.B, ... in order "
            f"(apart from the checked {chapter}.1, {chapter}.2), not {open_labels}"
        )
        assert not set(checked) & set(open_labels)
        labels[chapter] = (set(checked), set(open_labels))
    for path in chapters():
        _, nb = load(path.name[:3])
        for cell in nb["cells"]:
            text = source(cell)
            match = CHECK_CELL.match(text) if cell["cell_type"] == "code" else None
            if match:
                assert (
                    int(match.group(1)) == _chapter(path) and match.group(2) in labels[_chapter(path)][0]
                ), (
                    f"{path.name}: '{match.group(0)}' has no '### Exercise {match.group(1)}.{match.group(2)}' heading"
                )
            if cell["cell_type"] == "markdown":
                for ref in OPEN_REFERENCE.finditer(text):
                    chapter, label = int(ref.group(1)), ref.group(2)
                    assert label in labels.get(chapter, ((), ()))[1], (
                        f"{path.name}: '{ref.group(0)}' names no open exercise of chapter {chapter}"
                    )
