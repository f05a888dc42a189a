"""The warm pool (``dtfkit.engine.launchers.pool``): clusters adopt processes that imported TensorFlow
ahead of need, the pool refills, it can be turned off, it leaves nothing behind
(after close, after its owner is SIGKILLed, and ``cleanup`` knows its processes), and
a cluster made of pool processes is as isolated as a cold one.

How much faster a warm start is gets measured in ``benchmarks/``, not asserted here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import (
    LineReader,
    listening_ports,
    port_of,
    processes_of,
    start_script,
    subprocess_env,
    wait_gone,
)

import dtfkit
from dtfkit.engine.launchers import pool
from dtfkit.engine.platform import netns, state
from dtfkit.errors import DtfkitError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

WARM_TIMEOUT = 180  # three TensorFlow imports at once on a busy 2-core machine


def task_facts():
    import sys as _sys

    ctx = dtfkit.this_task()
    return {
        "name": ctx.name,
        "pid": os.getpid(),
        "netns": os.readlink("/proc/self/ns/net"),
        "cluster_env": os.environ.get("DTFKIT_CLUSTER"),
        "tf_loaded": "tensorflow" in _sys.modules,
    }


def needs_isolation():
    ok, why = netns.isolation_available()
    if not ok:
        pytest.skip(f"the pool needs user namespaces: {why}")


@pytest.fixture
def warm_pool():
    """A pool of 3 with every process warm; closed (and checked) after the test."""
    needs_isolation()
    p = pool.TaskPool(size=3)
    try:
        assert p.wait_warm(3, timeout=WARM_TIMEOUT), f"the pool did not warm up: {p}"
        yield p
    finally:
        pids = [*p.pids()]
        p.close()
        alive = wait_gone(processes_of(pids), 10)
        assert alive == [], f"pool processes alive after close(): {[q.pid for q in alive]}"


def ports_of(cluster) -> set[int]:
    return {port_of(a) for hosts in cluster.cluster_spec.values() for a in hosts}


# ------------------------------------------------------------------- adoption
def test_a_cluster_adopts_the_warm_processes_as_its_tasks(warm_pool):
    pool_pids = set(warm_pool.pids())
    anchor_pid = warm_pool.pids()[0]
    with dtfkit.LocalCluster(ps=1, workers=2, pool=warm_pool, progress=False, name=None) as cluster:
        pids = cluster.pids()
        # The tasks are the very processes the pool started, and the pool's anchor
        # became the cluster's anchor.
        assert set(pids.values()) == pool_pids
        assert pids["netns"] == anchor_pid
        assert cluster.adopted == {"ps:0": True, "worker:0": True, "worker:1": True}
        assert "adopted 3 warm process(es)" in cluster.pool_note
        assert f"start: {cluster.pool_note}" in repr(cluster)
        assert "start: adopted 3 warm process(es)" in cluster._repr_html_()
        # They took their roles after adoption, serve, and run work like cold tasks.
        facts = cluster.run(task_facts, on="all", timeout=60)
        assert {n: f["name"] for n, f in facts.items()} == {n: n for n in cluster.tasks}
        assert {n: f["pid"] for n, f in facts.items()} == {n: pids[n] for n in cluster.tasks}
        assert all(f["cluster_env"] == cluster.id for f in facts.values())
        assert all(f["tf_loaded"] for f in facts.values())
        # The pool handed everything over: it refills a new namespace of its own.
        assert not pool_pids & set(warm_pool.pids())
    assert wait_gone(processes_of(pids.values()), 10) == []


def test_the_pool_refills_and_a_second_cluster_adopts_the_new_processes(warm_pool):
    first_pids = set(warm_pool.pids())
    with dtfkit.LocalCluster(ps=1, workers=2, pool=warm_pool, progress=False, name=None) as first:
        assert warm_pool.wait_warm(3, timeout=WARM_TIMEOUT), f"no refill: {warm_pool}"
        refilled = set(warm_pool.pids())
        assert refilled and not refilled & first_pids
        with dtfkit.LocalCluster(ps=1, workers=2, pool=warm_pool, progress=False, name=None) as second:
            assert set(second.pids().values()) == refilled
            assert all(second.adopted.values())
            assert second.run(lambda: dtfkit.this_task().name, timeout=60) == {
                "worker:0": "worker:0",
                "worker:1": "worker:1",
            }
        assert first.run(lambda: dtfkit.this_task().name, on="ps", timeout=60) == {"ps:0": "ps:0"}


def test_a_cluster_larger_than_the_pool_starts_the_rest_cold_in_the_same_namespace(warm_pool):
    with dtfkit.LocalCluster(ps=1, workers=3, pool=warm_pool, progress=False, name=None) as cluster:
        assert sum(cluster.adopted.values()) == 3
        assert cluster.adopted["worker:2"] is False
        spaces = {f["netns"] for f in cluster.run(task_facts, on="all", timeout=60).values()}
        assert spaces == {netns.namespace_id(cluster.pids()["netns"])}


# ------------------------------------------------------------- turning it off
def test_pool_false_starts_every_task_cold(warm_pool):
    warm = set(warm_pool.pids())
    with dtfkit.LocalCluster(workers=1, pool=False, progress=False, name=None) as cluster:
        assert cluster.adopted == {"worker:0": False}
        assert cluster.pool_note == "no warm pool"
        assert "start:" not in repr(cluster)
        assert not set(cluster.pids().values()) & warm
    assert set(warm_pool.pids()) == warm  # untouched


def test_a_cluster_that_sets_an_import_time_variable_starts_cold_and_says_why(warm_pool):
    warm = set(warm_pool.pids())
    env = {"TF_CPP_MIN_LOG_LEVEL": "1"}
    with dtfkit.LocalCluster(workers=1, pool=warm_pool, env=env, progress=False, name=None) as cluster:
        assert cluster.adopted == {"worker:0": False}
        assert "TF_CPP_MIN_LOG_LEVEL" in cluster.pool_note
        assert "start: started cold:" in repr(cluster)  # the repr says why it was slow
    assert set(warm_pool.pids()) == warm


def test_an_env_variable_read_at_run_time_reaches_adopted_tasks(warm_pool):
    env = {"GRPC_FAIL_FAST": "use_caller"}
    with dtfkit.LocalCluster(workers=1, pool=warm_pool, env=env, progress=False, name=None) as cluster:
        assert cluster.adopted == {"worker:0": True}
        assert cluster.run(lambda: os.environ.get("GRPC_FAIL_FAST"), timeout=60) == {"worker:0": "use_caller"}


def test_the_owner_environment_changed_after_warm_up_still_reaches_adopted_tasks(warm_pool, monkeypatch):
    monkeypatch.setenv("DTFKIT_POOL_TEST_VAR", "late")
    with dtfkit.LocalCluster(workers=1, pool=warm_pool, progress=False, name=None) as cluster:
        assert cluster.adopted == {"worker:0": True}
        got = cluster.run(lambda: os.environ.get("DTFKIT_POOL_TEST_VAR"), timeout=60)
        assert got == {"worker:0": "late"}


def test_an_import_time_variable_changed_after_warm_up_starts_cold(warm_pool, monkeypatch):
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    with dtfkit.LocalCluster(workers=1, pool=warm_pool, progress=False, name=None) as cluster:
        assert cluster.adopted == {"worker:0": False}
        assert "TF_ENABLE_ONEDNN_OPTS" in cluster.pool_note


@pytest.mark.parametrize(
    "value, expected", [("0", False), ("off", False), ("1", True), ("", False)], ids=repr
)
def test_dtfkit_pool_env_decides_outside_a_kernel(monkeypatch, value, expected):
    monkeypatch.setenv(pool.POOL_ENV, value)
    assert not pool.in_kernel()  # pytest is no kernel: off unless DTFKIT_POOL=1
    assert pool.enabled_by_default() is expected


def test_a_bad_pool_argument_fails_before_any_process_starts(no_spawn):
    with pytest.raises(DtfkitError, match="pool must be"):
        dtfkit.LocalCluster(workers=1, pool="yes", progress=False, name=None)
    assert no_spawn == []


def test_importing_the_pool_does_not_import_tensorflow():
    code = (
        "import sys, dtfkit, dtfkit.engine.launchers.pool, dtfkit.cluster; print('tensorflow' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(), timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------- no leaks
def test_cleanup_knows_the_pool_and_the_adopted_tasks(warm_pool):
    report = state.cleanup(everything=True, dry_run=True)
    assert {pid for cid, pid in report.killed if cid == warm_pool.id} == set(warm_pool.pids())
    with dtfkit.LocalCluster(workers=1, pool=warm_pool, progress=False, name=None) as cluster:
        report = state.cleanup(everything=True, dry_run=True)
        # Adopted tasks still carry the pool's id in their environment; cleanup
        # still recognises them as the cluster's.
        mine = {pid for cid, pid in report.killed if cid == cluster.id}
        assert mine == set(cluster.pids().values())


OWNER = """
import json, sys
import dtfkit
from dtfkit.engine.launchers.pool import TaskPool

pool = TaskPool(size=2)
assert pool.wait_warm(2, timeout=180), pool
cluster = dtfkit.LocalCluster(workers=1, pool=pool, progress=False, name=None)
assert cluster.adopted == {"worker:0": True}, cluster.pool_note
# The pool refills in the background; report whatever it has started by now too.
pool.wait_warm(1, timeout=180)
print("PIDS " + json.dumps({"cluster": list(cluster.pids().values()), "pool": pool.pids()}), flush=True)
sys.stdin.read()  # blocks until the test kills this process
"""


def test_owner_killed_with_sigkill_leaves_no_pool_process(tmp_path):
    needs_isolation()
    owner = start_script(tmp_path, OWNER, stdin=subprocess.PIPE)
    try:
        reader = LineReader(owner)
        pids = json.loads(reader.expect(r"^PIDS ", timeout=400).string[5:])
        procs = processes_of(pids["cluster"] + pids["pool"])
        assert len(pids["cluster"]) == 2 and len(pids["pool"]) >= 2  # anchor + task, anchor + warm
        owner.send_signal(signal.SIGKILL)
        assert owner.wait(timeout=10) == -signal.SIGKILL
        alive = wait_gone(procs, 5)
        assert alive == [], f"alive 5 s after their owner was killed: {[p.pid for p in alive]}"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(timeout=10)


# ------------------------------------------------------------------ isolation
def test_an_adopted_cluster_is_isolated_and_shares_its_namespace_with_nobody(warm_pool):
    mine = netns.namespace_id()
    with dtfkit.LocalCluster(ps=1, workers=2, pool=warm_pool, progress=False, name=None) as first:
        assert first.isolated and all(first.adopted.values())
        space = netns.namespace_id(first.pids()["netns"])
        assert space != mine
        assert {f["netns"] for f in first.run(task_facts, on="all", timeout=60).values()} == {space}
        # Its servers listen inside its namespace, not on the host.
        ports = ports_of(first)
        assert ports <= listening_ports(f"/proc/{first.pids()['netns']}/net")
        assert not ports & listening_ports()
        # The refilled pool lives in a namespace of its own, and so does the next cluster.
        assert warm_pool.wait_warm(3, timeout=WARM_TIMEOUT)
        refill_space = netns.namespace_id(warm_pool.pids()[0])
        assert refill_space not in (mine, space)
        with dtfkit.LocalCluster(workers=1, pool=warm_pool, progress=False, name=None) as second:
            assert netns.namespace_id(second.pids()["netns"]) == refill_space
            assert not ports_of(second) & listening_ports()
