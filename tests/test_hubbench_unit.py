"""The classroom bench's parts that need no hub (fast tier): what students run, the tables, bad input refused.

The real hub, real users and real students are in ``test_hub_class.py`` (full run) and the bench itself.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import REPO

from dtfkit.cli import main
from hubbench import users
from hubbench.bench import ClassResult, StudentResult, _port_collisions, _why_not_held, sizing, table
from hubbench.grading import Grade
from hubbench.limits import StudentGroup
from hubbench.workload import (
    READY_MARK,
    WRONG_ANSWER,
    answered,
    assignment_source,
    lesson_cells,
    solution_of,
)

CHAPTER = REPO / "notebooks" / "01_clusterspec_basics.ipynb"


def test_the_lesson_is_the_chapters_own_cells_up_to_its_first_check():
    cells = lesson_cells(CHAPTER)
    chapter = [
        "".join(c["source"]) for c in json.loads(CHAPTER.read_text())["cells"] if c["cell_type"] == "code"
    ]
    own = cells[:-2]
    assert own == chapter[chapter.index(own[0]) : chapter.index(own[0]) + len(own)]  # consecutive, unchanged
    assert any("dtfkit.LocalCluster(" in c for c in own) and own[-1].startswith("# NBVAL_CHECK_OUTPUT")
    assert READY_MARK in cells[-2] and cells[-1] == "cluster.close()"


def test_the_assignment_is_exercise_1_1_with_its_hidden_tests():
    source = assignment_source(CHAPTER)
    ids = [c["metadata"].get("nbgrader", {}).get("grade_id") for c in source["cells"]]
    assert [i for i in ids if i] == ["ex1_1_answer", "ex1_1_check"]
    check = "".join(next(c for c in source["cells"] if "ex1_1_check" in str(c["metadata"]))["source"])
    assert "### BEGIN HIDDEN TESTS" in check and ".require()" in check
    solution = solution_of(source)
    assert "### BEGIN SOLUTION" not in solution and "def build(tf, variables_on, compute_on)" in solution
    filled = answered(source, WRONG_ANSWER)
    answer = next(c for c in filled["cells"] if c["metadata"].get("nbgrader", {}).get("solution"))
    assert answer["source"] == WRONG_ANSWER and source["cells"] != filled["cells"]


def _row(name: str, **kw) -> StudentResult:
    defaults = dict(wrong_answer=False, first_cluster_s=10.0, checked_s=20.0, peak_pss=2**30, cpu_s=30.0)
    defaults.update(kw)
    return StudentResult(name, **defaults)


def test_the_table_and_the_sizing_come_from_the_rows():
    rows = [
        _row("a", server_s=3.0, first_cluster_s=10.0, checked_s=30.0, grade=Grade("a", 1.0, 1.0, 25.0)),
        _row(
            "b",
            server_s=5.0,
            first_cluster_s=20.0,
            checked_s=40.0,
            peak_pss=2 * 2**30,
            grade=Grade("b", 0.0, 1.0, 5.0),
        ),
    ]
    result = ClassResult(
        students=2, zygote=True, mem_limit="3G", rows=rows, machine_base=2**30, machine_peak=5 * 2**30
    )
    text = table([result])
    row = text.splitlines()[-1]
    assert row.startswith(
        "| 2 | on | 4.0 / 5.0 | 15.0 / 20.0 / 20.0 | 35.0 / 40.0 / 40.0 | 15 / 25 | 2.00 |"
    ), row
    assert "| 1.0 → 5.0 | 30 | 0 | 0 | 0 |" in row
    sized = sizing([result], class_sizes=(30, 100), burst_s=120.0)
    # 30 × 2 GiB + 1 GiB; 30 × 30 CPU s / 120 s = 7.5 -> 8 cores
    assert "| 30 | 61 | 8 |" in sized and "| 100 | 201 | 25 |" in sized
    assert sizing([ClassResult(1, False, "3G", rows=[_row("c")], stopped="memory: x")]).startswith(
        "no class held"
    )


def test_a_class_with_failures_is_not_held_and_says_why():
    ok = ClassResult(1, False, "3G", rows=[_row("a")], min_available=10 * 2**30)
    assert _why_not_held(ok) == ""
    oom = ClassResult(1, False, "3G", rows=[_row("a", oom_kills=2)], min_available=10 * 2**30)
    assert _why_not_held(oom).startswith("memory: a student's memory cap")
    slow = ClassResult(
        1, False, "3G", rows=[_row("a", failures=["lesson cell timeout: x"])], min_available=10 * 2**30
    )
    assert _why_not_held(slow).startswith("CPU:")
    left = ClassResult(
        1, False, "3G", rows=[_row("a")], min_available=10 * 2**30, leftovers=["user dtfk0000s1"]
    )
    assert _why_not_held(left) == "left behind: user dtfk0000s1"


def test_port_collisions_count_shared_ports_only_between_unisolated_clusters():
    same = {"ps": ["localhost:5000"], "worker": ["localhost:5001"]}
    isolated = [_row("a", isolated=True, addresses=same), _row("b", isolated=True, addresses=same)]
    assert _port_collisions(isolated) == 0
    host = [_row("a", isolated=False, addresses=same), _row("b", isolated=False, addresses=same)]
    assert _port_collisions(host) == 2
    error = [
        _row("a", isolated=True, failures=["lesson cell error: OSError: [Errno 98] Address already in use"])
    ]
    assert _port_collisions(error) == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["classroom-bench", "--students", "0"], "every class size is at least 1"),
        (["classroom-bench", "--students", "two"], "give class sizes as numbers"),
        (["classroom-bench", "--students", ""], "give class sizes as numbers"),
    ],
)
def test_the_bench_command_refuses_bad_sizes(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_the_bench_command_outside_a_checkout_says_where_the_bench_is(monkeypatch, capsys):
    """A student's ``pip install dtfkit`` has no hubbench/: the command says to run it from a checkout."""
    monkeypatch.setitem(sys.modules, "hubbench.__main__", None)  # None in sys.modules: the import fails
    assert main(["classroom-bench", "--students", "1"]) == 2
    err = capsys.readouterr().err
    assert "not part of the installed package" in err and "python3 -m hubbench" in err


def test_bench_accounts_are_never_confused_with_real_ones():
    with pytest.raises(ValueError, match="bench user prefixes start with 'dtfk'"):
        users.create("alice", 1)
    with pytest.raises(ValueError, match="role is 's'"):
        users.create("dtfk0000", 1, role="x")
    with pytest.raises(ValueError, match="refusing to remove 'root'"):
        users.remove(["root"], prefix="dtfk0000")
    with pytest.raises(ValueError, match="not a usable group name"):
        StudentGroup("../etc", memory_bytes=None, max_pids=None)


def test_an_account_belongs_to_a_live_run_only_while_the_process_that_made_it_runs():
    import os
    import subprocess
    import sys

    assert users._owner_alive(users._owner_mark())  # this process: alive
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(done.stdout)
    assert not users._owner_alive(
        f"dtfkit classroom bench, pid {dead_pid} started {users._start_time(os.getpid())}"
    )
    # the same pid, reused by another process later, has another start time
    assert not users._owner_alive(f"dtfkit classroom bench, pid {os.getpid()} started 1")
    assert not users._owner_alive("Alice Example,,,")  # not a bench account's comment at all


def test_stale_groups_of_accounts_that_are_gone_are_removed():
    from hubbench.bench import remove_stale_groups
    from hubbench.limits import available

    if not available()[0]:
        pytest.skip("no writable cgroups here (needs root)")
    gone = "dtfk0000s9"
    assert not users.exists(gone)
    group = StudentGroup(gone, memory_bytes=2**30, max_pids=64)
    group.create()
    assert all(folder.is_dir() for folder in group.folders())
    removed = remove_stale_groups()
    assert sorted(removed) == sorted(str(f) for f in group.folders())
    assert not any(folder.exists() for folder in group.folders())


def test_the_plot_reads_the_table_the_bench_writes(tmp_path):
    from hubbench.plot import draw, read_table

    rows = [
        _row("a", server_s=3.0, first_cluster_s=10.0, checked_s=30.0, peak_pss=int(1.5 * 2**30)),
        _row("b", server_s=5.0, first_cluster_s=20.0, checked_s=40.0, peak_pss=2**30),
    ]
    result = ClassResult(2, True, "4G", rows=rows, class_peak_pss=int(2.5 * 2**30), machine_peak=3 * 2**30)
    (tmp_path / "bench.md").write_text(table([result]) + "\n\nHeld: 2 student(s) at once\n")
    (parsed,) = read_table(tmp_path / "bench.md")
    assert parsed == {
        "students": 2,
        "zygote": "on",
        "first_p50": 15.0,
        "first_max": 20.0,
        "checked_p50": 35.0,
        "checked_max": 40.0,
        "pss_per_student": 1.5,
        "class_pss": 2.5,
        "machine_before": 0.0,
        "machine_peak": 3.0,
    }
    png = draw({"zygote on": [parsed]}, tmp_path / "bench.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "empty.md").write_text("no table here\n")
    with pytest.raises(ValueError, match="no classroom-bench table"):
        read_table(tmp_path / "empty.md")


def test_a_chinese_class_bench_writes_its_table_in_chinese_and_the_plot_reads_it(tmp_path):
    from dtfkit import i18n
    from hubbench.plot import read_table

    rows = [_row("a", server_s=3.0, first_cluster_s=10.0, checked_s=30.0, peak_pss=2**30)]
    result = ClassResult(1, False, "4G", rows=rows, class_peak_pss=2**30, machine_peak=2 * 2**30)
    i18n.set_language("zh_CN")
    try:
        text = table([result])
        sized = sizing([result])
    finally:
        i18n.set_language(None)
    head = text.splitlines()[0]
    assert "students" not in head and "学生" in head, head
    assert "From the class" not in sized and "GiB" in sized
    (tmp_path / "bench.md").write_text(text + "\n")
    (parsed,) = read_table(tmp_path / "bench.md")
    assert (parsed["students"], parsed["first_p50"], parsed["machine_peak"]) == (1, 10.0, 2.0)


def test_the_bench_runs_its_tools_from_its_own_environment(tmp_path, monkeypatch):
    """`sudo /venv/bin/python -m dtfkit classroom-bench` with the venv not activated: nbgrader's
    alembic is found beside the interpreter; where it is nowhere, preflight says what to install."""
    from hubbench import hub

    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    monkeypatch.setattr(hub.sys, "executable", str(venv_bin / "python"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert hub.tool_path().split(os.pathsep) == [str(venv_bin), "/usr/bin", "/bin"]
    (missing,) = hub.missing_tools()
    assert "alembic" in missing and f"{venv_bin / 'python'} -m pip install alembic" in missing
    alembic = venv_bin / "alembic"
    alembic.write_text("#!/bin/sh\n")
    alembic.chmod(0o755)
    assert hub.missing_tools() == []


def test_a_private_checkout_is_opened_for_listing_and_restored(tmp_path):
    """A checkout cloned into ``mktemp -d`` is 0700: students could traverse it (o+x) but Python could not
    read the folder to import dtfkit from it. ``listed`` folders get o+rx; everything is put back after."""
    from hubbench.hub import open_for_students, restore_modes

    root = tmp_path / "private"
    package = root / "hubbench"
    package.mkdir(parents=True)
    module = package / "hub.py"
    module.write_text("")
    root.chmod(0o700)
    changed = open_for_students([str(module)], listed=(str(root),))
    try:
        assert root.stat().st_mode & 0o007 == 0o005
        assert (root, 0o700) in [(type(root)(f), m) for f, m in changed]
    finally:
        restore_modes(changed)
    assert root.stat().st_mode & 0o777 == 0o700


def test_a_chinese_class_works_in_the_chinese_chapter_and_its_feedback_is_read():
    """classroom-bench --lang zh_CN: the lesson and exercise 1.1 come from notebooks/zh_CN, the assignment
    starts with the cell that sets the language, and the check's Chinese headline is read as passed/failed."""
    from hubbench import workload

    chapter = workload.chapter_path("zh_CN")
    assert chapter.parent.name == "zh_CN"
    chinese_lesson = workload.lesson_cells(chapter)
    assert 'dtfkit.set_language("zh_CN")' in chinese_lesson[0]  # the language first, then the same program
    from edition.code_units import skeleton

    assert [skeleton(c) for c in chinese_lesson[1:]] == [skeleton(c) for c in workload.lesson_cells()]
    source = workload.assignment_source(chapter)
    assert source["cells"][0]["id"] == "dtfkit-language"
    grade_ids = [
        c["metadata"]["nbgrader"]["grade_id"] for c in source["cells"] if "nbgrader" in c["metadata"]
    ]
    assert grade_ids == ["ex1_1_answer", "ex1_1_check"]
    assert any(c["cell_type"] == "markdown" and "练习 1.1" in "".join(c["source"]) for c in source["cells"])
    assert workload.check_outcome("✔ 练习 1.1（把变量放在 worker 上）通过：...") == "passed"
    assert workload.check_outcome("✘ exercise 1.1 (Variables on a worker) failed: ...") == "failed"
    assert workload.check_outcome("✔ exercise 1.10 (...) passed") == ""
    with pytest.raises(ValueError, match="no fr edition"):
        workload.chapter_path("fr")


def test_the_hub_passes_the_class_language_to_the_students_servers():
    config = (REPO / "hubbench" / "jupyterhub_config.py").read_text()
    assert 'c.Spawner.environment["DTFKIT_LANG"] = os.environ["DTFKIT_HUB_LANG"]' in config


def test_the_sampler_reads_a_real_process_through_psutil():
    """PSS is at most RSS (shared pages are split), the caller is among its user's processes, a gone pid is 0."""
    import os

    import psutil

    from hubbench import measure

    me = os.getpid()
    assert 0 < measure.pss_of(me) <= psutil.Process(me).memory_info().rss
    assert me in measure.pids_by_uid({os.getuid()})[os.getuid()]
    assert measure.threads_of(me) >= 1
    gone = psutil.Popen(["true"])
    gone.wait()
    assert measure.pss_of(gone.pid) == 0 and measure.threads_of(gone.pid) == 0
    info = measure.meminfo()
    assert 0 < info["MemAvailable"] <= info["MemTotal"]
