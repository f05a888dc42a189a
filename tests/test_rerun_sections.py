"""Sections of the chapters that kill, restart or close tasks can be run again.

``cluster.ensure_running()`` brings a cluster back to the state such a section starts from
(every task running and idle; a closed cluster started again). nbval runs each of those
sections twice in a row in the chapter's kernel, as a learner would, and requires both runs
to raise nothing and to print the committed checked sentences (tests/section_reruns.py).
"""

from __future__ import annotations

import subprocess
import sys
import threading

import psutil
import pytest
from conftest import REPO, share_cluster, subprocess_env, wait_gone
from notebook_sections import load
from section_reruns import AGAIN, RERUNS, rerun_spans

import dtfkit
from dtfkit.engine.launchers.fake import FakeLauncher
from dtfkit.errors import DtfkitError, TaskExited


# ------------------------------------------------------------- task functions
def name():
    return dtfkit.this_task().name


def block_here():
    threading.Event().wait()


# ------------------------------------------------------ ensure_running(): unit
@pytest.fixture
def fake_cluster():
    """A fresh cluster of plain Python tasks (no TensorFlow): up in a fraction of a second."""
    with dtfkit.LocalCluster(ps=1, workers=2, launcher=FakeLauncher(), progress=False, name=None) as cluster:
        with share_cluster(cluster):  # the tasks it starts again are its own, not leftovers
            yield cluster


@pytest.mark.timeout(60)
def test_a_cell_run_again_replaces_its_cluster_but_a_refused_one_leaves_it_open(capsys):
    first = dtfkit.LocalCluster(workers=1, launcher=FakeLauncher(), progress=False, name="cell-7")
    try:
        # Refused before anything starts (a delay needs servers): the cell's running cluster is kept.
        with pytest.raises(DtfkitError, match="delay"):
            dtfkit.LocalCluster(workers=1, delay="5ms", start_servers=False, progress=False, name="cell-7")
        assert not first.closed
        second = dtfkit.LocalCluster(workers=1, launcher=FakeLauncher(), progress=False, name="cell-7")
        try:
            assert first.closed and not second.closed
            assert f"closed the cluster this cell started before ({first.id})" in capsys.readouterr().out
        finally:
            second.close()
    finally:
        first.close()


def test_ensure_running_does_nothing_when_every_task_runs(fake_cluster, capsys):
    pids = fake_cluster.pids()
    assert fake_cluster.ensure_running() == []
    assert fake_cluster.pids() == pids
    assert "started again" not in capsys.readouterr().out


@pytest.mark.timeout(60)
def test_ensure_running_starts_dead_tasks_again_on_their_addresses(fake_cluster, capsys):
    addresses = {t: fake_cluster.address(t) for t in ("ps:0", "worker:1")}
    old = psutil.Process(fake_cluster.pids()["worker:1"])
    fake_cluster.kill("worker", 1)
    fake_cluster.kill("ps", 0)
    assert sorted(fake_cluster.ensure_running()) == ["ps:0", "worker:1"]
    assert "dtfkit: started again: ps:0 (killed), worker:1 (killed)" in capsys.readouterr().out
    assert set(fake_cluster.status().values()) == {"running"}
    assert {t: fake_cluster.address(t) for t in addresses} == addresses
    assert fake_cluster.pids()["worker:1"] != old.pid and wait_gone([old], 10) == []
    assert fake_cluster.run(name, on="all") == {
        "ps:0": "ps:0",
        "worker:0": "worker:0",
        "worker:1": "worker:1",
    }
    assert fake_cluster.ensure_running() == []


@pytest.mark.timeout(60)
def test_ensure_running_frees_a_task_busy_with_an_abandoned_call(fake_cluster):
    handle = fake_cluster.submit(block_here, on="worker:0")
    assert fake_cluster.status()["worker:0"] == "busy"
    old = psutil.Process(fake_cluster.pids()["worker:0"])
    assert fake_cluster.ensure_running() == ["worker:0"]
    assert fake_cluster.status() == {"ps:0": "running", "worker:0": "running", "worker:1": "running"}
    assert wait_gone([old], 10) == []
    assert fake_cluster.run(name) == {"worker:0": "worker:0", "worker:1": "worker:1"}
    with pytest.raises(TaskExited, match="started again since .*ensure_running"):
        handle.result()


@pytest.mark.timeout(60)
def test_ensure_running_fresh_starts_again_the_chosen_tasks_that_ran_a_call(fake_cluster, capsys):
    assert fake_cluster.ensure_running(fresh="worker:0") == []  # it has run nothing yet
    pids = fake_cluster.pids()
    assert fake_cluster.run(name) == {"worker:0": "worker:0", "worker:1": "worker:1"}
    assert fake_cluster.ensure_running(fresh="worker:0") == ["worker:0"]
    assert "dtfkit: started again: worker:0 (it ran a call before)" in capsys.readouterr().out
    now = fake_cluster.pids()
    assert now["worker:0"] != pids["worker:0"] and now["worker:1"] == pids["worker:1"]
    assert fake_cluster.ensure_running(fresh="worker:0") == []  # the new process has run nothing
    with pytest.raises(DtfkitError, match="no task worker:7"):
        fake_cluster.ensure_running(fresh="worker:7")


@pytest.mark.timeout(60)
def test_ensure_running_refuses_to_start_a_closed_cluster_on_a_launcher_it_was_given(fake_cluster):
    fake_cluster.close()
    with pytest.raises(DtfkitError, match="launcher you passed"):
        fake_cluster.ensure_running()
    assert fake_cluster.closed


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ensure_running_starts_a_closed_cluster_again_with_its_settings(capsys):
    with dtfkit.LocalCluster(workers=1, evaluator=1, progress=False, name=None) as cluster:
        first = cluster.id
        old = psutil.Process(cluster.pids()["worker:0"])
        cluster.close()
        with pytest.raises(DtfkitError, match="ensure_running"):
            cluster.run(name)
        assert cluster.ensure_running() == ["worker:0", "evaluator:0"]
        assert "dtfkit: the cluster was closed; started it again" in capsys.readouterr().out
        assert not cluster.closed and cluster.id != first and wait_gone([old], 10) == []
        assert cluster.status() == {"worker:0": "running", "evaluator:0": "running"}
        assert cluster.run(name, on="all") == {"worker:0": "worker:0", "evaluator:0": "evaluator:0"}
        assert cluster.ensure_running() == []
    assert cluster.closed


# ------------------------------------------------- the chapters' sections, twice
# nbval runs each stateful section twice in a row in the chapter's kernel (tests/section_reruns.py,
# wired in by tests/conftest.py) and compares both passes' checked cells with the committed
# outputs. These tests check that wiring: which cells run again, and where.
def _collected(*paths: str) -> list[str]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/conftest.py",
            *paths,
        ],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::Cell " in line]


def _expected_order(name: str, cells) -> list[str]:
    """Code cell numbers as nbval counts them, each stateful section's repeated after it."""
    numbers, number = {}, 0
    for index, cell in enumerate(cells):
        if cell["cell_type"] == "code":
            numbers[index] = number
            number += 1
    ends = {end: start for start, end in rerun_spans(name, cells)}
    order = []
    for index in range(len(cells) + 1):
        if index in ends:
            order += [f"Cell {numbers[i]}{AGAIN}" for i in range(ends[index], index) if i in numbers]
        if index in numbers:
            order.append(f"Cell {numbers[index]}")
    return order


@pytest.mark.timeout(180)
def test_nbval_runs_each_stateful_section_twice_right_after_it():
    paths = {prefix: load(prefix) for prefix in sorted(RERUNS)}
    collected = _collected(*(str(path.relative_to(REPO)) for path, _ in paths.values()))
    for path, raw in paths.values():
        got = [line.split("::", 1)[1] for line in collected if line.startswith(f"notebooks/{path.name}::")]
        expected = _expected_order(path.name, raw["cells"])
        assert any(name.endswith(AGAIN) for name in expected), f"{path.name}: nothing runs twice"
        assert got == expected, f"{path.name}: nbval's order differs from the sections' spans"


@pytest.mark.timeout(180)
def test_chapters_without_stateful_sections_run_once():
    collected = _collected("notebooks/05_keras_mirrored_strategy.ipynb")
    assert collected and not [line for line in collected if line.endswith(AGAIN)]


def test_a_rerun_span_may_not_reach_into_the_exercises(monkeypatch):
    path, raw = load("01_")
    monkeypatch.setitem(RERUNS, "01_", [("## 5.", "## Exercises")])
    with pytest.raises(ValueError, match="reaches into the exercises"):
        rerun_spans(path.name, raw["cells"])
    monkeypatch.setitem(RERUNS, "01_", [("## 4.", "## 5."), ("## 5.", None)])
    with pytest.raises(ValueError, match="overlap"):
        rerun_spans(path.name, raw["cells"])


def test_a_rerun_compares_with_the_committed_outputs_after_nbval_merged_the_first_passs():
    """nbval's coalesce_streams merges stream outputs into the first one in place: the second
    pass must still compare with the committed outputs, not with the first pass's merged copy."""
    import nbformat
    from nbval.plugin import coalesce_streams
    from section_reruns import _again

    class IPyNbCell:  # the name insert_reruns looks for; from_parent as pytest's nodes have it
        def __init__(self, **fields):
            self.__dict__.update(fields)

        @classmethod
        def from_parent(cls, parent, **fields):
            return cls(parent=parent, **fields)

    cell = nbformat.v4.new_code_cell("print('a'); print('b')")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="a"),
        nbformat.v4.new_output("stream", name="stdout", text="\nb\n"),
    ]
    first = IPyNbCell(parent=None, name="Cell 0", cell_num=0, cell=cell, options={})
    again = _again(first)
    coalesce_streams(first.cell.outputs)  # what nbval does to the reference in the first pass
    merged = coalesce_streams(again.cell.outputs)
    assert [output.text for output in merged] == ["a\nb\n"]
