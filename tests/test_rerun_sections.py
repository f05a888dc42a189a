"""Sections of the chapters that kill, restart or close tasks can be run again.

``cluster.ensure_running()`` brings a cluster back to the state such a section starts from
(every task running and idle; a closed cluster started again); the notebook tests run each
of those sections twice in a row in one kernel, as a learner would, and require the second
run to raise nothing and to print the same checked sentences.
"""

from __future__ import annotations

import threading

import psutil
import pytest
from conftest import share_cluster, wait_gone

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
