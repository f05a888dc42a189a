"""nbgrader reads the chapters (issue 14, point 6).

- The nbgrader source writer (``student-copies --format nbgrader``) gives every chapter's checked
  exercises nbgrader's metadata, which nbgrader's own validator accepts, and refuses, naming
  the notebook and cell, what nbgrader would grade wrongly (unpaired markers, an answer with no
  check, a check that never fails...).
- The round trip with the real ``nbgrader`` command on one chapter, in a temporary course
  folder: ``generate_assignment`` (stubs, no hidden test), then ``autograde`` of a solved and an
  unsolved submission of one student: full points, then none.

Chapter 5 is the round trip's chapter: its checks run in the kernel (no cluster), so its
exercises section grades in about 10 s in classroom mode, the fastest with chapter 6 (chapter 9
takes about 35 s, chapters 1 and 4 start clusters).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from conftest import REPO, subprocess_env
from nbformat import reads

from edition.student import MarkerError, nbgrader_notebook, write_nbgrader_source

if not os.environ.get("CI"):
    pytest.importorskip("nbgrader", reason="nbgrader is a test dependency: pip install -e '.[test]'")
from nbgrader.api import Gradebook  # noqa: E402
from nbgrader.nbgraderformat import MetadataValidator  # noqa: E402

NOTEBOOKS = REPO / "notebooks"
CHAPTER = "05_keras_mirrored_strategy"
EXERCISES = ["5_1", "5_2"]  # the chapter's checked exercises (as in test_classroom.CHAPTERS)
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION", "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")


def _src(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _graded(nb: dict) -> dict[str, dict]:
    """grade_id -> cell, for the cells with nbgrader metadata."""
    return {c["metadata"]["nbgrader"]["grade_id"]: c for c in nb["cells"] if "nbgrader" in c["metadata"]}


# ------------------------------------------------------------------------------ the writer
@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.stem)
def test_every_chapter_gets_metadata_nbgrader_accepts(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    before = copy.deepcopy(nb)
    source = nbgrader_notebook(nb, path.name, lock_others=True)
    assert nb == before  # the instructor notebook is not changed
    MetadataValidator().validate_nb(reads(json.dumps(source), as_version=4))
    chapter = int(path.stem.split("_")[0])
    checks = sorted(g for g in _graded(source) if g.endswith("_check"))
    assert checks and all(g.startswith(f"ex{chapter}_") for g in checks)
    for grade_id in checks:
        meta = _graded(source)[grade_id]["metadata"]["nbgrader"]
        assert meta == {
            "grade": True,
            "grade_id": grade_id,
            "locked": True,
            "points": 1,
            "schema_version": 3,
            "solution": False,
        }
        answer = _graded(source)[grade_id.replace("_check", "_answer")]
        assert answer["metadata"]["nbgrader"]["solution"] and not answer["metadata"]["nbgrader"]["grade"]
        assert "### BEGIN SOLUTION" in _src(answer)
        assert "### BEGIN HIDDEN TESTS" in _src(_graded(source)[grade_id])  # the hidden tests stay
    # lock_others: every cell is either an answer, a check or read-only; outputs are cleared.
    assert all("nbgrader" in c["metadata"] for c in source["cells"])
    unlocked = [g for g, c in _graded(source).items() if not c["metadata"]["nbgrader"]["locked"]]
    assert sorted(unlocked) == sorted(g.replace("_check", "_answer") for g in checks)
    assert len(source["cells"]) == len(nb["cells"])
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in source["cells"])


def test_exercises_only_keeps_the_tagged_section():
    nb = json.loads((NOTEBOOKS / f"{CHAPTER}.ipynb").read_text(encoding="utf-8"))
    source = nbgrader_notebook(nb, CHAPTER, exercises_only=True)
    assert all("dtfkit-exercise" in c["metadata"]["tags"] for c in source["cells"])
    assert 0 < len(source["cells"]) < len(nb["cells"])
    assert sorted(_graded(source)) == sorted(f"ex{e}_{k}" for e in EXERCISES for k in ("answer", "check"))
    assert not any(c["metadata"]["nbgrader"]["locked"] for g, c in _graded(source).items() if "answer" in g)


def _cell(source: str, cell_type: str = "code", **metadata) -> dict:
    cell = {"cell_type": cell_type, "metadata": metadata, "source": source}
    if cell_type == "code":
        cell.update(outputs=[], execution_count=None)
    return cell


ANSWER = "def f(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION"
CHECK = "# check exercise 9.1\nresult = check(f)\n### BEGIN HIDDEN TESTS\nresult.require()\n### END HIDDEN TESTS\nresult"


def test_a_well_formed_exercise_is_accepted():
    out = nbgrader_notebook({"cells": [_cell("intro", "markdown"), _cell(ANSWER), _cell(CHECK)]}, "t.ipynb")
    assert sorted(_graded(out)) == ["ex9_1_answer", "ex9_1_check"]
    assert "nbgrader" not in out["cells"][0]["metadata"]  # not locked unless asked
    twins = [dict(_cell("a", "markdown"), id="same"), dict(_cell("b", "markdown"), id="same")]
    locked = nbgrader_notebook({"cells": [*twins, _cell(ANSWER), _cell(CHECK)]}, "t.ipynb", lock_others=True)
    assert sorted(_graded(locked)) == ["cell_same", "cell_same_1", "ex9_1_answer", "ex9_1_check"]


@pytest.mark.parametrize(
    "cells, expected",
    [
        ([_cell("def f(x):\n    ### BEGIN SOLUTION\n    return 1"), _cell(CHECK)], "cell 0.*never closed"),
        ([_cell(ANSWER.replace("    ### BEGIN SOLUTION\n", "")), _cell(CHECK)], "cell 0, line 3.*without"),
        ([_cell(ANSWER), _cell(CHECK.replace("### END HIDDEN TESTS\n", ""))], "cell 1.*never closed"),
        ([_cell(ANSWER)], "cell 0: this answer cell has no check cell after it"),
        ([_cell(ANSWER), _cell(ANSWER), _cell(CHECK)], "cell 0: .*no check cell before the next answer cell"),
        ([_cell("x = 1"), _cell(CHECK)], "cell 1: the check cell of exercise 9.1 has no answer cell"),
        ([_cell(ANSWER), _cell("# check exercise 9.1\nresult = check(f)\nresult")], "never|no hidden test"),
        (
            [_cell(ANSWER), _cell(CHECK.replace("result.require()", "print(result)"))],
            "cell 1: .*no hidden test that fails",
        ),
        ([_cell(ANSWER), _cell(CHECK), _cell(ANSWER), _cell(CHECK)], "exercise 9.1 is checked a second time"),
        ([_cell(ANSWER), _cell("# check exercise 9\nresult")], "cell 1: .*looks like a check cell"),
        (
            [_cell(ANSWER.replace("def f(x):\n    ", ""), "markdown"), _cell(CHECK)],
            "solution region in a markdown",
        ),
        ([_cell("x = 1\n### BEGIN HIDDEN TESTS\nassert x\n### END HIDDEN TESTS")], "hidden tests outside"),
        (
            [_cell(ANSWER.replace("### END SOLUTION", "### END SOLUTION (done)")), _cell(CHECK)],
            "line 4.*alone",
        ),
        ([_cell("intro", "markdown")], "no checked exercise"),
    ],
    ids=[
        "unclosed-solution",
        "end-without-begin",
        "unclosed-hidden",
        "answer-without-check",
        "two-answers-one-check",
        "check-without-answer",
        "check-without-hidden-tests",
        "hidden-tests-that-never-fail",
        "duplicate-exercise",
        "malformed-check-header",
        "markdown-solution",
        "hidden-outside-check",
        "look-alike-marker",
        "no-exercise",
    ],
)
def test_what_nbgrader_would_grade_wrongly_is_refused(cells, expected):
    with pytest.raises(MarkerError, match=expected) as info:
        nbgrader_notebook({"cells": cells}, "broken.ipynb")
    assert str(info.value).startswith("broken.ipynb")


def test_exercises_only_needs_the_tag():
    with pytest.raises(MarkerError, match="no cell is tagged 'dtfkit-exercise'"):
        nbgrader_notebook({"cells": [_cell(ANSWER), _cell(CHECK)]}, "t.ipynb", exercises_only=True)


def test_nothing_is_written_when_one_notebook_is_broken(tmp_path):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    good = {"cells": [_cell(ANSWER), _cell(CHECK)], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (notebooks / "a.ipynb").write_text(json.dumps(good))
    (notebooks / "b.ipynb").write_text(json.dumps({**good, "cells": [_cell(ANSWER)]}))
    with pytest.raises(MarkerError, match="b.ipynb, cell 0"):
        write_nbgrader_source(notebooks, tmp_path / "source")
    assert not (tmp_path / "source").exists()
    (notebooks / "b.ipynb").unlink()
    assert write_nbgrader_source(notebooks, tmp_path / "source") == [tmp_path / "source" / "a" / "a.ipynb"]


# -------------------------------------------------------------------------- the round trip
def _nbgrader(course: Path, *args: str, timeout: float) -> str:
    """Run the real nbgrader command in the course folder; end it and its kernel if it overruns."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=course,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # The kernel nbgrader started runs in its own session: end it by pid, then nbgrader.
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"nbgrader {' '.join(args)} did not finish within {timeout} s:\n{out[-4000:]}")
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} exited with {proc.returncode}:\n{out[-4000:]}"
    return out


def _scores(course: Path, student: str) -> tuple[float, float, dict[str, float]]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        submission = gb.find_submission(CHAPTER, student)
        per_check = {e: gb.find_grade(f"ex{e}_check", CHAPTER, CHAPTER, student).score for e in EXERCISES}
        return submission.score, submission.max_score, per_check


def _autograded(course: Path, student: str) -> dict:
    path = course / "autograded" / student / CHAPTER / f"{CHAPTER}.ipynb"
    return json.loads(path.read_text(encoding="utf-8"))


def _outputs(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append("".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", "")))
        if out["output_type"] == "error":
            parts.append(f"{out['ename']}: {out['evalue']}")
    return "\n".join(parts)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_generate_and_autograde_a_solved_and_an_unsolved_submission(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"c.CourseDirectory.root = {str(course)!r}\n"
        "c.CourseDirectory.course_id = 'dtfkit'\n"
        "c.Execute.timeout = 300  # seconds per cell; nbgrader's default (30) is short for a busy hub\n"
    )
    (written,) = write_nbgrader_source(NOTEBOOKS / f"{CHAPTER}.ipynb", course / "source", exercises_only=True)
    source = json.loads(written.read_text(encoding="utf-8"))

    _nbgrader(course, "generate_assignment", CHAPTER, timeout=300)
    release_path = course / "release" / CHAPTER / f"{CHAPTER}.ipynb"
    release = json.loads(release_path.read_text(encoding="utf-8"))
    text = "\n".join(_src(c) for c in release["cells"])
    assert text.count("raise NotImplementedError()") == len(EXERCISES)
    for word in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS", ".require("):
        assert word not in text, word
    hidden_or_solution = set()
    for cell in source["cells"]:
        inside = False
        for line in _src(cell).splitlines():
            if line.strip() in MARKERS:
                inside = "BEGIN" in line
            elif inside and line.strip():
                hidden_or_solution.add(line.strip())
    assert hidden_or_solution and not hidden_or_solution & {line.strip() for line in text.splitlines()}
    assert sorted(_graded(release)) == sorted(_graded(source))
    assert all("checksum" in c["metadata"]["nbgrader"] for c in _graded(release).values())

    # Solved: the release with each answer cell holding the solution, as a student would type it.
    solved = copy.deepcopy(release)
    for grade_id, cell in _graded(solved).items():
        if grade_id.endswith("_answer"):
            answer = _src(_graded(source)[grade_id]).splitlines()
            cell["source"] = "\n".join(line for line in answer if line.strip() not in MARKERS)
    submitted = course / "submitted" / "alice" / CHAPTER
    submitted.mkdir(parents=True)
    (submitted / f"{CHAPTER}.ipynb").write_text(json.dumps(solved, indent=1))
    _nbgrader(course, "autograde", CHAPTER, timeout=600)
    score, max_score, per_check = _scores(course, "alice")
    checks = {g: c for g, c in _graded(_autograded(course, "alice")).items() if g.endswith("_check")}
    shown = {g: _outputs(c) for g, c in checks.items()}
    assert (score, max_score) == (len(EXERCISES), len(EXERCISES)), shown
    assert per_check == {e: 1.0 for e in EXERCISES}
    for e in EXERCISES:
        assert f"✔ exercise {e.replace('_', '.')} (" in shown[f"ex{e}_check"], shown

    # Unsolved: the release as handed out, resubmitted by the same student; autograde puts the
    # hidden tests back, and they fail the stubs.
    (submitted / f"{CHAPTER}.ipynb").write_text(release_path.read_text(encoding="utf-8"))
    _nbgrader(course, "autograde", CHAPTER, "--force", timeout=600)
    score, max_score, per_check = _scores(course, "alice")
    checks = {g: c for g, c in _graded(_autograded(course, "alice")).items() if g.endswith("_check")}
    shown = {g: _outputs(c) for g, c in checks.items()}
    assert (score, max_score) == (0, len(EXERCISES)), shown
    assert per_check == {e: 0.0 for e in EXERCISES}
    for e in EXERCISES:
        assert ".require()" in _src(checks[f"ex{e}_check"])
        assert "AssertionError" in shown[f"ex{e}_check"] and "not attempted yet" in shown[f"ex{e}_check"], (
            shown
        )
