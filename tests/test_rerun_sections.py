"""Sections of the chapters that kill, restart or close tasks can be run again.

``cluster.ensure_running()`` brings a cluster back to the state such a section starts from
(every task running and idle; a closed cluster started again); the notebook tests run each
of those sections twice in a row in one kernel, as a learner would, and require the second
run to raise nothing and to print the same checked sentences.
"""

from __future__ import annotations

import json
import threading

import psutil
import pytest
from conftest import share_cluster, subprocess_env, wait_gone
from notebook_sections import (
    CHECK_MARK,
    exercises_start,
    load,
    output_text,
    sanitize,
    sanitizer,
    section_span,
)

import dtfkit
from dtfkit.engine.fake import FakeLauncher
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
    with dtfkit.LocalCluster(workers=1, evaluator=1, progress=False, name=None, pool=False) as cluster:
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
# Every lesson section that kills, restarts or closes tasks (or whose cluster an earlier
# section closed), as (first heading, last heading): the cells from the first heading to
# the end of the last one's section are run once in order, then once more, in one kernel.
RERUNS: dict[str, list[tuple[str, str | None]]] = {
    "01_": [("## 5.", None)],  # kills worker:1, restarts it
    "02_": [("## 4.", None)],  # kills the chief; a timeout kills worker:1; restarts worker:1
    "03_": [("## 6.", None)],  # a timeout kills the chief
    # 1 and 2 fill the ps and the metric log, 2 trains on from checkpoint_dir, 3 kills and restarts every task
    "04_": [("## 1.", None), ("## 2.", None), ("## 3.", None)],
    # Part 1 closes its cluster (and begins by starting one); Part 2's section kills and restarts worker:1
    "07_": [("## Part 1", None), ("### Kill a worker", None)],
    "09_": [("## Part 2", "## Part 3")],  # Part 3 closes the cluster Part 2 needs
    "10_": [("## 3.", None)],  # kills worker:1 on its Ray node and restarts it there
}


def _run_cells(client, cells, indices) -> None:
    for index in indices:
        if cells[index].cell_type == "code":
            client.execute_cell(cells[index], index)


def _checked(cells, indices, rules) -> dict[int, str]:
    return {
        i: sanitize(output_text(cells[i]), rules)
        for i in indices
        if cells[i].cell_type == "code" and cells[i].source.startswith(CHECK_MARK)
    }


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("prefix", sorted(RERUNS))
def test_each_stateful_section_runs_twice_in_a_row(prefix):
    """No cell raises the second time, and the checked cells print the same sentences."""
    import nbformat
    from nbclient import NotebookClient

    path, raw = load(prefix)
    nb = nbformat.reads(json.dumps(raw), as_version=4)
    cells = nb.cells
    spans = sorted((section_span(cells, first, last) for first, last in RERUNS[prefix]), key=lambda s: s[1])
    assert spans[-1][1] <= exercises_start(cells)
    rules = sanitizer()
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    done, passed = 0, False
    with client.setup_kernel(env=subprocess_env()):
        try:
            for start, end in spans:
                _run_cells(client, cells, range(done, end))
                first = _checked(cells, range(start, end), rules)
                assert first, f"{path.name}: cells {start}-{end} have no {CHECK_MARK} cell to compare"
                # The same cell objects run again (nbclient applies display updates to its own
                # notebook's cells by index, so copies would receive outputs it cannot find).
                _run_cells(client, cells, range(start, end))
                second = _checked(cells, range(start, end), rules)
                for index, text in first.items():
                    assert second[index] == text, (
                        f"{path.name}: the checked cell {cells[index].id} printed other sentences when "
                        f"its section ran again:\n--- first\n{text}\n--- second\n{second[index]}"
                    )
                done = end
            passed = True
        finally:
            # Every cluster and warm pool of the kernel ends before the kernel does.
            cells.append(nbformat.v4.new_code_cell(_CLOSE_ALL))
            try:
                client.execute_cell(cells[-1], len(cells) - 1)
            except Exception:
                if passed:  # else the failure above is the one to see
                    raise


_CLOSE_ALL = """
from dtfkit.engine import pool as _pool, runtime as _runtime
_runtime._close_all_at_exit()
_pool._close_all_at_exit()
"""
