"""Classroom mode, the exercise checks and the student copies (issue 7).

- The generator strips every solution and hidden check, and clears outputs.
- The instructor notebooks' committed outputs show every check passing (nbval executes
  those notebooks in CI, so the outputs are re-made there too).
- Each student copy's exercises section executes in classroom mode (nbclient, a real
  kernel) and every check says "not attempted yet", with no error, no hang and no
  process left behind (conftest's leak fixture).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import REPO, subprocess_env

from dtfkit.course import check, classroom
from dtfkit.course.check import _core
from dtfkit.errors import DtfkitError
from edition.student import MarkerError, count_markers, student_notebook, write_student_copies

NOTEBOOKS = REPO / "notebooks"
# chapter notebook -> the exercises it checks automatically (a new chapter: add its line here).
CHAPTERS = {
    "01_clusterspec_basics": ["1.1", "1.2"],
    "02_between_graph_replication": ["2.1", "2.2"],
    "03_sync_replicas_optimizer": ["3.1", "3.2"],
    "04_monitored_training_session": ["4.1", "4.2"],
    "05_keras_mirrored_strategy": ["5.1", "5.2"],
    "06_custom_training_loops": ["6.1", "6.2"],
    "07_multi_worker_and_parameter_server": ["7.1", "7.2"],
    "08_sync_async_lab": ["8.1", "8.2"],
    "09_ps_vs_ring_allreduce": ["9.1", "9.2"],
    "10_beyond_one_machine": ["10.1", "10.2"],
    "11_communication_up_close": ["11.1", "11.2"],
    "12_when_things_go_wrong": ["12.1", "12.2"],
    "13_predict_then_run": ["13.1", "13.2"],
}
CHECK_CELL = re.compile(r"^# check exercise (\d+\.\d+)")


def _load(name: str) -> dict:
    return json.loads((NOTEBOOKS / f"{name}.ipynb").read_text(encoding="utf-8"))


def _src(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _check_cells(nb: dict) -> dict[str, dict]:
    found = {}
    for cell in nb["cells"]:
        m = CHECK_CELL.match(_src(cell)) if cell["cell_type"] == "code" else None
        if m:
            found[m.group(1)] = cell
    return found


def _text_outputs(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if "text" in out:
            parts.append("".join(out["text"]))
        for key in ("text/plain", "text/html"):
            if key in out.get("data", {}):
                parts.append("".join(out["data"][key]))
        if out.get("output_type") == "error":
            parts.append(f"{out['ename']}: {out['evalue']}")
    return "\n".join(parts)


# ------------------------------------------------------------------ classroom mode
def test_classroom_mode_switches(monkeypatch):
    monkeypatch.delenv("DTFKIT_CLASSROOM", raising=False)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert not classroom.enabled() and classroom.scaled(200) == 200 and classroom.size(3, classroom=2) == 3
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert classroom.enabled() and classroom.scaled(200) == 50 and classroom.size(3, classroom=2) == 2
    monkeypatch.setenv("DTFKIT_CLASSROOM", "0")  # an explicit 0 wins over nbgrader
    assert not classroom.enabled()
    monkeypatch.setenv("DTFKIT_CLASSROOM", "1")
    assert classroom.scaled(12, minimum=5) == 5 and classroom.scaled(3) == 3


def test_stub_detection_and_results(monkeypatch):
    # Results recorded by other tests in this process (exercise 11.1, say) would sort after 9.9.
    monkeypatch.setattr(_core, "_RESULTS", [])

    def stub(tf, a):
        """doc"""
        # YOUR CODE HERE
        raise NotImplementedError()

    def answer(x):
        return x + 1

    assert _core.is_stub(stub) and not _core.is_stub(answer)

    @_core.exercise("9.9", "demo")
    def demo(fn, *, hidden=False):
        return _core.passed("ok") if fn(1) == 2 else _core.failed("wrong", "add one")

    assert demo(answer).passed and "✔ exercise 9.9 (demo) passed: ok" in str(demo(answer))
    assert demo(stub).status == _core.NOT_ATTEMPTED and "`stub`" in demo(stub).message
    wrong = demo(lambda x: x)
    assert not wrong and "add one" in str(wrong) and "<div" in wrong._repr_html_()
    broken = demo(lambda x: 1 / 0)  # an exception is feedback, never raised
    assert broken.status == _core.FAILED and "ZeroDivisionError" in broken.message
    with pytest.raises(AssertionError, match="exercise 9.9"):
        wrong.require()
    assert _core.summary().splitlines()[-1].startswith("✘ exercise 9.9")


def test_checks_import_without_tensorflow():
    # The notebook side of chapters 1-4, 7-9 never imports TensorFlow, checks included (5/6 import it when run);
    # nor nbgrader, which only writing student copies needs (a student's environment may not have it).
    modules = ", ".join(
        ["dtfkit.course.classroom", "edition.student"] + [f"dtfkit.course.check.ch0{i}" for i in range(1, 10)]
    )
    code = f"import json, sys, {modules}\nprint(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'nbgrader'))))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(), timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


# ---------------------------------------------------------------- the generator
@pytest.mark.parametrize("name", sorted(CHAPTERS))
def test_student_copy_strips_solutions_and_hidden_checks(name):
    nb = _load(name)
    markers = count_markers(nb)
    assert markers["solutions"] >= 2 and markers["solutions"] == len(CHAPTERS[name])
    assert sorted(_check_cells(nb)) == CHAPTERS[name]
    solution_lines = set()
    for cell in nb["cells"]:
        inside = False
        for line in _src(cell).splitlines():
            inside = (inside or "### BEGIN SOLUTION" in line) and "### END SOLUTION" not in line
            if inside and line.strip() and "###" not in line:
                solution_lines.add(line)
    student = student_notebook(nb, name)
    text = "\n".join(_src(c) for c in student["cells"])
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS", ".require()"):
        assert marker not in text, marker
    assert text.count("raise NotImplementedError()") == markers["solutions"]
    answers = [c for c in classroom.exercises_only(student)["cells"] if c["cell_type"] == "code"]
    code = {line for c in answers for line in _src(c).splitlines()}
    assert not (solution_lines & code), sorted(solution_lines & code)[:3]
    assert all(
        not c.get("outputs") and c.get("execution_count") is None
        for c in student["cells"]
        if c["cell_type"] == "code"
    )
    assert len(student["cells"]) == len(nb["cells"])


def test_unbalanced_markers_are_refused():
    cell = {
        "cell_type": "code",
        "metadata": {},
        "outputs": [],
        "execution_count": 1,
        "source": "def f():\n    ### BEGIN SOLUTION\n    return 1\n",
    }
    with pytest.raises(MarkerError, match="never closed"):
        student_notebook({"cells": [cell]}, "bad.ipynb")
    # nbgrader finds a marker anywhere in a line: a line that merely mentions one would be cut too.
    cell["source"] = "x = 1  # BEGIN SOLUTION goes here"
    with pytest.raises(MarkerError, match="line 1: .* alone on its line"):
        student_notebook({"cells": [cell]}, "bad.ipynb")


def test_student_copies_without_nbgrader_name_the_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "nbgrader.preprocessors", None)  # as if nbgrader were not installed
    with pytest.raises(DtfkitError, match=r"nbgrader is not installed.*'dtfkit\[hub\]'"):
        student_notebook({"cells": []}, "n.ipynb")


def test_cli_writes_student_copies(tmp_path):
    out = tmp_path / "student"
    proc = subprocess.run(
        [sys.executable, "-m", "dtfkit", "student-copies", str(NOTEBOOKS), "-o", str(out)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    written = sorted(p.name for p in out.glob("*.ipynb"))
    assert set(f"{n}.ipynb" for n in CHAPTERS) <= set(written)
    assert proc.stdout.count("wrote ") == len(written)
    again = subprocess.run(
        [sys.executable, "-m", "dtfkit", "student-copies", str(NOTEBOOKS), "-o", str(NOTEBOOKS)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 2 and "instructor notebooks" in again.stderr


# ---------------------------------------------------------- the instructor notebooks
@pytest.mark.parametrize("name", sorted(CHAPTERS))
def test_instructor_notebook_shows_every_check_passing(name):
    for number, cell in _check_cells(_load(name)).items():
        shown = _text_outputs(cell)
        assert f"✔ exercise {number} (" in shown and "passed" in shown, f"{name} {number}: {shown[:300]}"


# -------------------------------------------------------------- the student copies
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CHAPTERS))
def test_student_copy_checks_say_not_attempted(name, tmp_path, monkeypatch):
    # The kernel imports dtfkit from this checkout; grade() runs it in classroom mode.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    )
    (path,) = write_student_copies(NOTEBOOKS / f"{name}.ipynb", tmp_path)
    graded = classroom.grade(path, timeout=300)  # the exercises section, in a fresh kernel; bounded per cell
    assert sorted(graded) == CHAPTERS[name]
    for number, line in graded.items():
        assert line.startswith(f"… exercise {number} (") and "not attempted yet" in line, line
        assert "raise NotImplementedError()" in line


def test_grade_reports_errors_and_results(tmp_path, monkeypatch):
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    )
    tagged = {"tags": [classroom.TAG]}
    cells = [
        {
            "cell_type": "code",
            "metadata": tagged,
            "outputs": [],
            "execution_count": None,
            "source": "from dtfkit.course.check import _core\n\n@_core.exercise('9.1', 'demo')\n"
            "def demo(fn, *, hidden=False):\n    return _core.passed('ok') if fn() else _core.failed('no')",
        },
        {
            "cell_type": "code",
            "metadata": tagged,
            "outputs": [],
            "execution_count": None,
            "source": "# check exercise 9.1\ndemo(lambda: True)",
        },
        {
            "cell_type": "code",
            "metadata": tagged,
            "outputs": [],
            "execution_count": None,
            "source": "# check exercise 9.2\nundefined_answer",
        },
        {
            "cell_type": "code",
            "metadata": {},
            "outputs": [],
            "execution_count": None,
            "source": "raise SystemExit",
        },
    ]
    for i, cell in enumerate(cells):
        cell["id"] = f"c{i}"
    path = tmp_path / "submitted.ipynb"
    nb = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb), encoding="utf-8")
    graded = classroom.grade(path, timeout=120)
    assert graded == {
        "9.1": "✔ exercise 9.1 (demo) passed: ok",
        "9.2": "error: NameError: name 'undefined_answer' is not defined",
    }


def test_a_wrong_answer_gets_actionable_feedback(no_spawn):
    # The tutorial's config (no device filters) would make worker:1 hang once the chief has exited;
    # the check reads the filters first and says why, before starting anything.
    def session_config(tf, job_name, task_index):
        return tf.compat.v1.ConfigProto() if task_index >= 0 else None

    result = check.ch02.device_filters(session_config)
    assert result.status == _core.FAILED
    assert result.message.startswith("worker:0 gets no device filters"), result.message
    assert "device_filters" in result.hint


def test_chapter_9_checks_explain_wrong_answers_before_starting_a_cluster(no_spawn):
    # Wrong formulas and broken schedules are caught in plain Python: no cluster is started.
    floats = check.ch09.ps_bytes(lambda n, floats: n * floats)
    assert floats.status == _core.FAILED and "4 bytes" in floats.hint
    both_ways = check.ch09.ps_bytes(lambda n, floats: 2 * n * floats * 4)
    assert both_ways.status == _core.FAILED and "only what it receives" in both_ways.hint

    def broken_ring_schedule(n):  # the exercise's broken ring: left neighbour, right-going chunk indices
        left = [(i - 1) % n for i in range(n)]
        return {
            "reduce_scatter": [[(i, left[i], (i - s) % n) for i in range(n)] for s in range(n - 1)],
            "all_gather": [[(i, left[i], (i + 1 - s) % n) for i in range(n)] for s in range(n - 1)],
        }

    wrong_sum = check.ch09.ring(broken_ring_schedule)
    assert wrong_sum.status == _core.FAILED and "wrong value" in wrong_sum.message

    def skipping(n):  # the ring's chunks, each sent two places on (written out: ring_schedule is refused)
        chunk = {"reduce_scatter": lambda i, s: (i - s) % n, "all_gather": lambda i, s: (i + 1 - s) % n}
        return {
            phase: [[(i, (i + 2) % n, which(i, s)) for i in range(n)] for s in range(n - 1)]
            for phase, which in chunk.items()
        }

    not_a_ring = check.ch09.ring(skipping, hidden=True)  # 4 workers: i + 2 is no neighbour
    assert not_a_ring.status == _core.FAILED and "not a neighbour" in not_a_ring.message


def test_a_chinese_chapters_exercises_section_keeps_the_cell_that_sets_its_language():
    """grade() and nbgrader's exercises-only copies run the exercises section alone: in a Chinese chapter it must
    start with the cell that switches dtfkit's feedback to Chinese, or the learner is graded in English."""
    from dtfkit.i18n import LANGUAGE_CELL_ID

    chinese = json.loads(
        (REPO / "notebooks" / "zh_CN" / "03_sync_replicas_optimizer.ipynb").read_text("utf-8")
    )
    section = classroom.exercises_only(chinese)["cells"]
    assert section[0]["id"] == LANGUAGE_CELL_ID and 'set_language("zh_CN")' in "".join(section[0]["source"])
    assert all(classroom.TAG in c["metadata"].get("tags", []) for c in section[1:]) and len(section) > 3
    english = json.loads((REPO / "notebooks" / "03_sync_replicas_optimizer.ipynb").read_text("utf-8"))
    assert not any(c.get("id") == LANGUAGE_CELL_ID for c in classroom.exercises_only(english)["cells"])


def test_nbgrader_exercises_only_copies_of_a_chinese_chapter_set_the_language(tmp_path):
    from dtfkit.i18n import LANGUAGE_CELL_ID
    from edition.student import write_nbgrader_source

    write_nbgrader_source(
        REPO / "notebooks" / "zh_CN" / "03_sync_replicas_optimizer.ipynb", tmp_path, exercises_only=True
    )
    (written,) = tmp_path.rglob("*.ipynb")
    cells = json.loads(written.read_text("utf-8"))["cells"]
    assert cells[0]["id"] == LANGUAGE_CELL_ID
