"""Starting and ending clusters: readiness, start failures, close(), the context
manager, an owner killed by SIGKILL, Ctrl-C, and two owners at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import threading

import psutil
import pytest
from conftest import (
    LineReader,
    listening_ports,
    parse_json_line,
    port_of,
    processes_of,
    start_script,
    wait_gone,
    zygote_pids,
)

import dtfkit
from dtfkit.errors import ClusterStartError, DtfkitError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def ps_variable_through_own_target():
    """A variable on ps:0, read through this task's own server (needs every server up)."""
    import tensorflow as tf

    with tf.Graph().as_default():
        with tf.device("/job:ps/task:0"):
            v = tf.Variable(41.0, name="ready_v")
        with tf.device("/job:worker/task:0"):
            out = v + 1.0
        with tf.compat.v1.Session(dtfkit.this_task().target) as sess:
            sess.run(v.initializer)
            return float(sess.run(out))


def _children() -> set[tuple[int, float]]:
    """This process's descendants, less its task zygotes (they live as long as it does)."""
    out = set()
    own = zygote_pids()
    for p in psutil.Process().children(recursive=True):
        if p.pid in own:
            continue
        try:
            out.add((p.pid, p.create_time()))
        except psutil.Error:
            pass
    return out


# ------------------------------------------------------------ readiness and close
@pytest.mark.smoke  # in the fast tier too (tests/README.md)
def test_ready_on_return_and_the_with_block_ends_every_process():
    with dtfkit.LocalCluster(ps=1, workers=1, progress=False, name=None) as cluster:
        # Right after the constructor returns, every server listens (seen from
        # inside the cluster's network namespace) and serves a session.
        procs = processes_of(cluster.pids().values())
        ports = {port_of(a) for hosts in cluster.cluster_spec.values() for a in hosts}
        net = f"/proc/{cluster.pids()['netns']}/net" if cluster.isolated else "/proc/self/net"
        assert ports <= listening_ports(net)
        assert set(cluster.status().values()) == {"running"}
        assert cluster.run(ps_variable_through_own_target, timeout=60) == {"worker:0": 42.0}
        assert len(procs) == (3 if cluster.isolated else 2)
    # close() is synchronous: every process has ended when the block is left.
    assert [p.pid for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    assert cluster.closed
    cluster.close()  # idempotent
    cluster.close()
    assert set(cluster.status().values()) == {"killed"}
    assert "closed" in repr(cluster)
    with pytest.raises(DtfkitError, match="closed"):
        cluster.run(lambda: 1)
    with pytest.raises(DtfkitError, match="closed"):
        cluster.restart()


def test_an_exception_in_the_with_block_still_ends_every_process():
    procs = []
    with pytest.raises(RuntimeError, match="boom inside the with block"):
        with dtfkit.LocalCluster(workers=1, progress=False, name=None) as cluster:
            procs = processes_of(cluster.pids().values())
            raise RuntimeError("boom inside the with block")
    assert procs and cluster.closed
    assert [p.pid for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []


# ------------------------------------------------------------------ start failures
# A sitecustomize on PYTHONPATH runs first in every new interpreter: it lets one
# chosen task die at start-up, before it even connects to its owner.
SITECUSTOMIZE = textwrap.dedent(
    """
    import json, os, sys
    _task = json.loads(os.environ.get("DTFKIT_TASK") or "{}").get("task")
    if _task == "worker:1":
        print("simulated crash: worker:1 cannot start", flush=True)
        os._exit(3)
    """
)


def test_a_task_that_dies_while_starting_is_named_with_its_last_lines(tmp_path, monkeypatch):
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    monkeypatch.setenv("DTFKIT_ZYGOTE", "0")  # the fault is injected into a fresh interpreter's start
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    )
    before = _children()
    with pytest.raises(ClusterStartError) as info:
        dtfkit.LocalCluster(ps=1, workers=2, progress=False, name=None)
    text = str(info.value)
    assert "worker:1 exited with code 3 while starting" in text
    assert "[worker:1] simulated crash: worker:1 cannot start" in text
    # The failed start ended the processes it had started (close() is synchronous).
    assert _children() - before == set()


def setup_that_fails_in_worker_1():
    task = json.loads(os.environ["DTFKIT_TASK"])["task"]
    if task == "worker:1":
        raise RuntimeError("setup refused to configure worker:1")


def test_a_setup_function_that_raises_names_the_task(tmp_path):
    before = _children()
    with pytest.raises(ClusterStartError) as info:
        dtfkit.LocalCluster(workers=2, setup=setup_that_fails_in_worker_1, progress=False, name=None)
    text = str(info.value)
    assert "worker:1 failed while starting" in text
    assert "setup refused to configure worker:1" in text
    assert "setup_that_fails_in_worker_1" in text
    assert _children() - before == set()


@pytest.mark.timeout(120)
def test_start_timeout_names_the_late_tasks_and_ends_them():
    before = _children()
    with pytest.raises(ClusterStartError) as info:
        # 10 ms: less than any start takes, even forked from a ready zygote (0.1 s and more)
        dtfkit.LocalCluster(ps=1, workers=1, start_timeout=0.01, progress=False, name=None)
    text = str(info.value)
    assert "within" in text
    assert "worker:0" in text  # not started yet, or late (with ps:0)
    assert _children() - before == set()
    # The message gives the timeout that was asked for.
    assert "0.01 s" in text


# worker:1 connects to its owner's control socket but never completes the
# handshake (as a task that stalls or dies at exactly that moment would).
SITECUSTOMIZE_STALL = textwrap.dedent(
    """
    import json, os
    if json.loads(os.environ.get("DTFKIT_TASK") or "{}").get("task") == "worker:1":
        import multiprocessing.connection, socket, threading

        def _stalled_client(address, family=None, authkey=None):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(address)
            print("worker:1 connected and stalls in the handshake", flush=True)
            threading.Event().wait()

        multiprocessing.connection.Client = _stalled_client
    """
)


@pytest.mark.timeout(120)
def test_a_failed_start_returns_even_when_a_task_stalls_in_the_handshake(tmp_path, monkeypatch):
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE_STALL)
    monkeypatch.setenv("DTFKIT_ZYGOTE", "0")  # the fault is injected into a fresh interpreter's start
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    )
    before = _children()
    outcome: list[BaseException] = []

    def start() -> None:
        try:
            dtfkit.LocalCluster(workers=2, start_timeout=5, progress=False, name=None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)

    starter = threading.Thread(target=start, daemon=True)
    starter.start()
    starter.join(timeout=60)  # bounded: start_timeout is 5 s
    assert not starter.is_alive(), "LocalCluster() neither started nor failed within 60 s (close() hangs)"
    assert len(outcome) == 1 and isinstance(outcome[0], ClusterStartError), outcome
    assert "worker:1" in str(outcome[0]) and "within 5 s" in str(outcome[0])
    assert _children() - before == set()


# ------------------------------------------------------------ the owner goes away
OWNER_THEN_BLOCK = """
import json, sys, threading
import dtfkit

def start():
    global cluster
    cluster = dtfkit.LocalCluster(ps={ps}, workers=1, progress=False)

if {in_thread}:
    t = threading.Thread(target=start)
    t.start()
    t.join()
else:
    start()
print("PIDS " + json.dumps(cluster.pids()), flush=True)
sys.stdin.read()  # blocks until the test kills this process
"""


@pytest.mark.parametrize(
    "in_thread",
    [pytest.param(False, marks=pytest.mark.smoke), True],  # smoke: in the fast tier too (tests/README.md)
    ids=["main-thread", "other-thread"],
)
def test_owner_killed_with_sigkill_leaves_no_task(tmp_path, in_thread):
    code = OWNER_THEN_BLOCK.format(ps=0 if in_thread else 1, in_thread=in_thread)
    owner = start_script(tmp_path, code, stdin=subprocess.PIPE)
    try:
        reader = LineReader(owner)
        pids = json.loads(reader.expect(r"^PIDS ", timeout=120).string[5:])
        procs = processes_of(pids.values())
        assert len(procs) == len(pids) >= 2
        owner.send_signal(signal.SIGKILL)
        assert owner.wait(timeout=10) == -signal.SIGKILL
        alive = wait_gone(procs, 5)
        assert alive == [], f"tasks still alive 5 s after their owner was killed: {[p.pid for p in alive]}"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(timeout=10)


CTRL_C = """
import json, threading
import psutil
import dtfkit

def block():
    print("BLOCKING", flush=True)
    threading.Event().wait()

cluster = dtfkit.LocalCluster(workers=1, progress=False)
pids = cluster.pids()
procs = [psutil.Process(p) for p in pids.values()]
try:
    cluster.run(block)
except KeyboardInterrupt:
    print("KEYBOARDINTERRUPT", flush=True)
    status = cluster.status()
finally:
    cluster.close()
alive = [p.pid for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
print("AFTER " + json.dumps({"pids": pids, "status": status, "alive": alive}), flush=True)
"""


def test_ctrl_c_interrupts_the_call_and_close_ends_every_process(tmp_path):
    owner = start_script(tmp_path, CTRL_C)
    try:
        reader = LineReader(owner)
        reader.expect(r"^\[worker:0\] BLOCKING$", timeout=120)
        owner.send_signal(signal.SIGINT)
        assert owner.wait(timeout=60) == 0
        out = reader.rest(timeout=10)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(timeout=10)
    assert "KEYBOARDINTERRUPT" in out
    after = parse_json_line(out, "AFTER ")
    # Interrupted, not killed: the task was still running when the call ended.
    assert after["status"] == {"worker:0": "running"}
    assert after["alive"] == []
    assert wait_gone(processes_of(after["pids"].values()), 5) == []


# ---------------------------------------------------------- two owners at once
TWO_OWNERS = """
import json, sys
import dtfkit

def product_across_tasks():
    import tensorflow as tf
    with tf.Graph().as_default():
        with tf.device("/job:worker/task:1"):
            a = tf.constant(6)
        with tf.device("/job:worker/task:0"):
            b = a * 7
        with tf.compat.v1.Session(dtfkit.this_task().target) as sess:
            return int(sess.run(b))

with dtfkit.LocalCluster(workers=2, progress=False) as cluster:
    out = cluster.run(product_across_tasks, timeout=120)
    print("RESULT " + json.dumps({"out": out, "spec": cluster.cluster_spec, "pids": cluster.pids()}), flush=True)
"""


@pytest.mark.timeout(400)
def test_two_clusters_started_at_once_from_two_processes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    owners = [start_script(tmp_path / d, TWO_OWNERS) for d in ("a", "b")]
    outputs = []
    try:
        for owner in owners:
            out, _ = owner.communicate(timeout=300)
            outputs.append(out)
            assert owner.returncode == 0, out
    finally:
        for owner in owners:
            if owner.poll() is None:
                owner.kill()
                owner.wait(timeout=10)
    results = [parse_json_line(out, "RESULT ") for out in outputs]
    for result in results:
        assert result["out"] == {"worker:0": 42, "worker:1": 42}
    assert not set(results[0]["pids"].values()) & set(results[1]["pids"].values())
    for result in results:
        assert wait_gone(processes_of(result["pids"].values()), 5) == []
