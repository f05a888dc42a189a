"""Claims about TensorFlow, Keras or the operator point at the source they rest on (issue 40, item 4).

A markdown cell that says how TensorFlow behaves carries ``<!-- src: PATH QUALNAME -->`` naming the file (as
it lies in the installed package) and the function or class (``Context.list_physical_devices``). For a
Python file this test finds it among the installed packages and the name defined in it (read with ``ast``,
nothing imported): a TensorFlow upgrade that moves or removes it fails here, and the sentence is to be
checked again. A mark naming another language's file (``.go``, ``.cc``) is checked for its form only.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENGLISH = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CHAPTERS = ENGLISH + sorted((REPO / "notebooks" / "zh_CN").glob("[0-9][0-9]_*.ipynb"))
SRC_MARK = re.compile(r"<!--\s*src:\s*(\S+)\s+([A-Za-z_][\w.]*)\s*-->")


def marks_in(notebook: Path) -> list[tuple[int, str, str]]:
    """``(cell index, path, qualname)`` for every ``src`` mark in the notebook's markdown."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    found = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] == "markdown":
            for match in SRC_MARK.finditer("".join(cell["source"])):
                found.append((index, match.group(1), match.group(2)))
    return found


def installed(path: str) -> Path | None:
    """Where ``path`` (``tensorflow/python/eager/context.py``) lies among the installed packages,
    found on ``sys.path`` without importing anything."""
    for entry in sys.path:
        candidate = Path(entry or ".") / path
        if candidate.is_file():
            return candidate
    return None


def defines(source: str, qualname: str) -> bool:
    """True when ``source`` defines ``qualname`` (``f``, ``Class``, ``Class.method``) at its top level."""
    body = ast.parse(source).body
    for part in qualname.split("."):
        named = [
            node
            for node in body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == part
        ]
        if not named:
            return False
        body = named[-1].body if isinstance(named[-1], ast.ClassDef) else []
    return True


def problems(marks: list[tuple[int, str, str]]) -> list[str]:
    out = []
    for index, path, qualname in marks:
        if not path.endswith(".py"):
            continue
        where = installed(path)
        if where is None:
            out.append(f"cell {index}: {path} is in no installed package")
        elif not defines(where.read_text(encoding="utf-8"), qualname):
            out.append(f"cell {index}: {path} defines no {qualname}")
    return out


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: str(p.relative_to(REPO / "notebooks")))
def test_every_source_mark_names_code_that_exists(notebook):
    found = problems(marks_in(notebook))
    assert not found, (
        f"{notebook.name}: " + "; ".join(found) + " (a TensorFlow upgrade? check the sentence again)"
    )


def test_the_marks_are_there_and_the_check_can_fail():
    marks = [m for chapter in CHAPTERS for m in marks_in(chapter)]
    assert ("tensorflow/python/eager/context.py", "Context.list_physical_devices") in {
        (p, q) for _, p, q in marks
    }
    planted = [
        (1, "tensorflow/python/eager/context.py", "Context.list_no_such_devices"),
        (2, "tensorflow/python/eager/no_such_module.py", "anything"),
    ]
    assert problems(planted) == [
        "cell 1: tensorflow/python/eager/context.py defines no Context.list_no_such_devices",
        "cell 2: tensorflow/python/eager/no_such_module.py is in no installed package",
    ]


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: str(p.relative_to(REPO / "notebooks")))
def test_every_chapter_carries_a_source_mark(notebook):
    assert marks_in(notebook), (
        f"{notebook.name}: no <!-- src: PATH QUALNAME --> mark; every chapter says how TensorFlow, Keras or the "
        "operator behaves somewhere, and that sentence names the code it rests on"
    )


@pytest.mark.parametrize("english", ENGLISH, ids=lambda p: p.stem)
def test_the_chinese_chapter_carries_the_english_marks(english):
    """The Chinese chapter is built from catalogs: a mark the English gained and its translation lost (or the other
    way round) shows here as a different set of ``PATH QUALNAME``."""
    chinese = REPO / "notebooks" / "zh_CN" / english.name
    assert chinese.is_file(), f"no notebooks/zh_CN/{english.name}"
    ours = {(path, qualname) for _, path, qualname in marks_in(english)}
    theirs = {(path, qualname) for _, path, qualname in marks_in(chinese)}
    assert theirs == ours, (
        f"{english.name}: only in English {sorted(ours - theirs)}, only in Chinese {sorted(theirs - ours)}"
    )
