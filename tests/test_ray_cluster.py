"""``dtfkit.RayCluster`` and ``launch(ray=...)`` on a simulated 2-node Ray cluster (``-m ray``).

One simulated Ray cluster (a head and two nodes, about 0.6 GB and 10-20 s to start) is
shared by the module; the tests start their dtfkit clusters on it. Skipped when Ray is
not installed, except under ``CI=true``, where a missing Ray fails them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest
from conftest import (
    LineReader,
    cluster_processes,
    port_of,
    share_cluster,
    share_ray_cluster,
    subprocess_env,
    wait_gone,
    wait_until,
)

import dtfkit
from dtfkit.recipes import tutorial_script

if not os.environ.get("CI"):
    pytest.importorskip("ray", reason='Ray is an optional dependency: pip install "dtfkit[ray]"')
import ray  # noqa: E402

from dtfkit.ray.launcher import plan_placement  # noqa: E402
from dtfkit.ray.simulated import SimulatedRayCluster, connect  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]
ACTOR_TITLE = "ray::TaskActor"


def _actor_processes(sim) -> list[psutil.Process]:
    """The TaskActor worker processes alive in the simulated cluster (Ray titles them by class)."""
    out = []
    for proc in psutil.Process(sim.pid).children(recursive=True):
        try:
            if (proc.cmdline() or [""])[0].startswith(ACTOR_TITLE):
                out.append(proc)
        except psutil.Error:
            continue
    return out


def _task_listeners(ports) -> list[str]:
    """dtfkit task processes that still listen on any of ``ports`` (Ray's own processes pick
    random free ports too, so a freed port may be taken again by one of them)."""
    out = []
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status != psutil.CONN_LISTEN or conn.laddr.port not in set(ports) or conn.pid is None:
            continue
        try:
            cmd = " ".join(psutil.Process(conn.pid).cmdline())
        except psutil.Error:
            continue
        if "dtfkit.engine.task.task_main" in cmd:
            out.append(f"port {conn.laddr.port}: pid {conn.pid} {cmd}")
    return out


def _named_actors() -> list:
    return ray.util.list_named_actors(all_namespaces=True)


def _foreign_actors() -> list:
    """Named actors alive that are not the module cluster's."""
    return [a for a in _named_actors() if a["namespace"] != _MODULE_CLUSTER.get("namespace")]


@pytest.fixture(scope="module")
def sim():
    with share_ray_cluster(SimulatedRayCluster(nodes=2)) as simulated:
        connect(simulated.address)
        try:
            yield simulated
        finally:
            ray.shutdown()


_MODULE_CLUSTER: dict[
    str, str
] = {}  # "namespace": the Ray namespace of the module's RayCluster, once started


@pytest.fixture(autouse=True)
def no_actor_left(request):
    """After every test, the only dtfkit actors alive are the module cluster's (named, in its
    namespace), and every TaskActor process belongs to one of them."""
    yield
    if "sim" not in request.fixturenames:
        return
    sim = request.getfixturevalue("sim")

    assert wait_until(lambda: not _foreign_actors(), 30), _foreign_actors()
    assert wait_until(lambda: len(_actor_processes(sim)) == len(_named_actors()), 30), (
        _actor_processes(sim),
        _named_actors(),
    )


@pytest.fixture(scope="module")
def rc(sim):
    cluster = dtfkit.RayCluster(ps=1, workers=2, address=sim.address, progress=False, name=None)
    _MODULE_CLUSTER["namespace"] = cluster.launcher.namespace
    try:
        with share_cluster(cluster):  # its restarted tasks outlive the test that restarted them
            yield cluster
    finally:
        _MODULE_CLUSTER.clear()


@pytest.fixture
def cluster(rc):
    rc.ensure_running()
    return rc


# ------------------------------------------------------------- functions run in tasks
def where():
    ctx = dtfkit.this_task()
    return {"node": ctx.node, "pid": os.getpid(), "name": ctx.name}


def counter(op: str, n: int = 0):
    """A counter variable on ps:0, shared by every session that names it."""
    import tensorflow as tf

    ctx = dtfkit.this_task()
    with tf.Graph().as_default():
        with tf.device("/job:ps/task:0"):
            v = tf.Variable(0, name="ray_counter", dtype=tf.int64)
        with tf.device(f"/job:{ctx.job_name}/task:{ctx.task_index}"):
            add = v.assign_add(1)
        with tf.compat.v1.Session(ctx.target) as sess:
            if op == "init":
                sess.run(v.initializer)
            elif op == "add":
                return [int(sess.run(add)) for _ in range(n)]
            return int(sess.run(v))


def fail_on_worker_1():
    if dtfkit.this_task().name == "worker:1":
        raise ValueError("worker one refuses")
    return "ok"


def stuck_forever():
    import threading

    threading.Event().wait()  # STUCK-HERE


# ------------------------------------------------------------------------------ tests
def test_import_dtfkit_does_not_import_ray():
    code = "import sys, dtfkit; dtfkit.LocalCluster; dtfkit.RayCluster; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_launch_takes_a_ray_address_and_refuses_a_bad_one_before_starting(no_spawn):
    from dtfkit.cli import build_parser

    ns = build_parser().parse_args(["launch", "--ray", "simulated:3", "x.py", "--", "--a=1"])
    assert ns.ray == "simulated:3" and ns.script == "x.py"
    with pytest.raises(dtfkit.DtfkitError, match="number of simulated nodes"):
        dtfkit.launch(tutorial_script.PATH, ray="simulated:0")
    assert no_spawn == []


def test_plan_spread_pack_and_resources_are_deterministic():
    nodes = [
        {"id": "bbbb", "ip": "10.0.0.2", "free": {"CPU": 4, "GPU": 1}},
        {"id": "aaaa", "ip": "10.0.0.1", "free": {"CPU": 4}},
        {"id": "0000", "ip": "10.0.0.9", "free": {"CPU": 0}},  # a head without CPUs
    ]
    tasks = ["ps:0", "worker:0", "worker:1"]
    assert plan_placement(tasks, nodes, "spread", {}) == {
        "ps:0": "aaaa",
        "worker:0": "bbbb",
        "worker:1": "aaaa",
    }
    assert plan_placement(tasks, nodes, "pack", {}) == dict.fromkeys(tasks, "aaaa")
    assert plan_placement(tasks, nodes, "spread", {"worker:0": {"GPU": 1}})["worker:0"] == "bbbb"
    with pytest.raises(dtfkit.DtfkitError, match=r"worker:1 asks for \{'GPU': 1\}"):
        plan_placement(tasks, nodes, "spread", {"worker": {"GPU": 1}})


def test_spread_puts_the_workers_on_distinct_nodes_as_this_task_says(cluster, sim):
    seen = cluster.run(where, on="all", timeout=60)
    nodes = cluster.nodes()
    assert {task: info["node"] for task, info in seen.items()} == nodes
    assert nodes["worker:0"] != nodes["worker:1"]
    assert len(set(nodes.values())) == 2
    assert {t: info["pid"] for t, info in seen.items()} == {t: cluster.pids()[t] for t in seen}
    text = repr(cluster)
    assert text.startswith("RayCluster ") and f"node {nodes['worker:1']}" in text
    assert ">node</th>" in cluster._repr_html_() and "dtfkit.RayCluster" in cluster._repr_html_()


def test_cross_node_ps_training_sees_both_workers_updates(cluster):
    assert cluster.run(counter, args=("init",), on="worker:0", timeout=120) == {"worker:0": 0}
    seen = cluster.run(counter, args=("add", 10), timeout=120)
    # The value an assign_add returns is a separate read after the add (resource_variable_ops.py:
    # ``self._lazy_read(assign_add_op)``), not atomic with it: both workers may read the same value
    # when their adds interleave, so only these hold. Each worker's reads climb (its next add comes
    # after its last read), its k-th read counts at least its own k adds, and the last read of all
    # comes after the last add.
    assert sorted(seen) == ["worker:0", "worker:1"]
    for values in seen.values():
        assert len(values) == 10 and values == sorted(set(values))
        assert all(k + 1 <= v <= 20 for k, v in enumerate(values)), values
    assert max(v for values in seen.values() for v in values) == 20
    # Both workers' 10 adds landed on the one variable on ps:0.
    assert cluster.run(counter, args=("read",), timeout=60) == {"worker:0": 20, "worker:1": 20}


def test_a_failing_task_is_named_with_its_remote_traceback(cluster):
    with pytest.raises(dtfkit.TaskFailed) as info:
        cluster.run(fail_on_worker_1, timeout=60)
    assert info.value.task == "worker:1"
    text = str(info.value)
    assert "ValueError: worker one refuses" in text and "fail_on_worker_1" in text


def test_timeout_kills_the_task_and_restart_brings_it_back_on_its_node_and_port(cluster):
    node, address = cluster.nodes()["worker:1"], cluster.address("worker:1")
    old = psutil.Process(cluster.pids()["worker:1"])
    with pytest.raises(dtfkit.TaskTimeout) as info:
        cluster.run(stuck_forever, on="worker:1", timeout=3)
    assert "STUCK-HERE" in str(info.value)
    assert cluster.status()["worker:1"] == "killed"
    assert wait_gone([old], 20) == []
    cluster.restart("worker:1")
    assert cluster.status()["worker:1"] == "running"
    assert cluster.address("worker:1") == address and cluster.nodes()["worker:1"] == node
    assert cluster.run(where, on="worker:1", timeout=60)["worker:1"]["node"] == node


def test_kill_and_restart_keep_node_and_port_and_serve_again(cluster):
    before = cluster.nodes()
    address = cluster.address("ps:0")
    old = psutil.Process(cluster.pids()["ps:0"])
    cluster.kill("ps:0")
    assert cluster.status()["ps:0"] == "killed"
    assert wait_gone([old], 20) == []
    cluster.restart("ps:0")
    assert cluster.address("ps:0") == address and cluster.nodes() == before
    assert cluster.pids()["ps:0"] != old.pid
    cluster.run(counter, args=("init",), on="worker:0", timeout=120)
    assert cluster.run(counter, args=("add", 2), on="worker:1", timeout=120) == {"worker:1": [1, 2]}


def test_when_its_actor_dies_the_task_dies_and_the_table_says_so(cluster):
    task = psutil.Process(cluster.pids()["worker:1"])
    handle = cluster._rt.tasks.task_process("worker:1").handle
    ray.kill(handle.actor)
    assert wait_gone([task], 30) == []
    assert wait_until(lambda: cluster.status()["worker:1"] == "exited (-9)", 30), cluster.status()
    assert "the Ray actor that ran worker:1 ended" in cluster.logs("worker:1")
    assert cluster.ensure_running() == ["worker:1"]
    assert cluster.run(where, on="worker:1", timeout=60)["worker:1"]["name"] == "worker:1"


def test_pack_puts_every_task_on_one_node(sim):
    with dtfkit.RayCluster(workers=2, address=sim.address, placement="pack", progress=False, name=None) as c:
        seen = c.run(where, timeout=60)
        assert seen["worker:0"]["node"] == seen["worker:1"]["node"]
        assert set(c.nodes().values()) == {seen["worker:0"]["node"]}


def test_impossible_resources_fail_before_any_actor_starts(sim):
    with pytest.raises(dtfkit.DtfkitError, match=r"worker:0 asks for \{'GPU': 1\}.*Nothing was started"):
        dtfkit.RayCluster(workers=2, address=sim.address, resources={"worker": {"GPU": 1}}, name=None)
    assert _foreign_actors() == []


def test_close_leaves_no_actor_task_or_port(sim):
    before = {p.pid for p in _actor_processes(sim)}
    c = dtfkit.RayCluster(workers=2, address=sim.address, progress=False, name=None)
    tasks = [psutil.Process(pid) for pid in c.pids().values()]
    ports = [port_of(c.address(t)) for t in c.tasks]
    actors = [p for p in _actor_processes(sim) if p.pid not in before]
    assert len(actors) == 2 and len(_foreign_actors()) == 2
    c.close()
    assert wait_gone(tasks, 20) == []
    assert cluster_processes(c.id) == []
    assert _task_listeners(ports) == []
    assert _foreign_actors() == []
    assert wait_gone(actors, 30) == []


def test_launch_runs_the_tutorial_script_on_the_ray_nodes(sim):
    result = dtfkit.launch(
        tutorial_script.PATH,
        ps=1,
        workers=2,
        args=["--train_steps=40", "--log_every=10"],
        timeout=300,
        start_timeout=180,
        ray=sim.address,
    )
    assert result.ok, result.summary()
    assert result.exit_codes == {"ps:0": None, "worker:0": 0, "worker:1": 0}
    reports = tutorial_script.worker_reports(result)
    assert sum(r["local_steps"] for r in reports.values()) == max(r["global_step"] for r in reports.values())


DRIVER = textwrap.dedent(
    """
    import json, os, sys
    import dtfkit
    address = sys.argv[1] if len(sys.argv) > 1 else None
    c = dtfkit.RayCluster(workers=2, address=address, progress=False, name=None)
    launcher = c.launcher
    info = {
        "tasks": c.pids(),
        "ports": [int(c.address(t).rsplit(":", 1)[1]) for t in c.tasks],
        "supervisor": launcher.simulated.pid if launcher.simulated else None,
        "actors": [h.info()["actor_pid"] for h in launcher.handles],
    }
    print("READY " + json.dumps(info), flush=True)
    import threading
    threading.Event().wait()
    """
)


def _start_driver(tmp_path, *args: str) -> tuple[subprocess.Popen, dict]:
    import json

    path = tmp_path / "driver.py"
    path.write_text(DRIVER)
    proc = subprocess.Popen(
        [sys.executable, "-u", str(path), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=subprocess_env(),
        start_new_session=True,
    )
    reader = LineReader(proc)
    match = reader.expect(r"^READY (.*)$", timeout=240)
    return proc, json.loads(match.group(1))


def test_sigkill_of_a_driver_with_its_own_simulated_cluster_leaves_nothing(tmp_path, sim):
    proc, info = _start_driver(tmp_path)
    group = info["supervisor"]
    supervisor = psutil.Process(group)
    members = [supervisor, *supervisor.children(recursive=True)]
    members += [p for p in psutil.process_iter() if _pgid(p) == group and p not in members]
    tasks = [psutil.Process(pid) for pid in info["tasks"].values()]
    assert len(members) > 3 and len(tasks) == 2
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert wait_gone(members + tasks, 60) == []
    assert _task_listeners(info["ports"]) == []


def test_sigkill_of_a_driver_on_the_shared_cluster_ends_its_actors_and_tasks(tmp_path, sim, cluster):
    proc, info = _start_driver(tmp_path, sim.address)
    tasks = [psutil.Process(pid) for pid in info["tasks"].values()]
    actors = [psutil.Process(pid) for pid in info["actors"]]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert wait_gone(tasks + actors, 60) == []
    assert _task_listeners(info["ports"]) == []
    assert wait_until(lambda: len(_actor_processes(sim)) == 3, 30)  # the module cluster's own
    assert cluster.run(where, on="worker:0", timeout=60)["worker:0"]["name"] == "worker:0"


def _pgid(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except OSError:
        return None
