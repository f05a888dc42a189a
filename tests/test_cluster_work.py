"""Work on one shared, isolated cluster (1 ps + 2 workers, real TensorFlow servers):
task identity, selectors, the client, results, errors, timeouts, logs, metrics,
kill and restart. Tests that kill a task restart it; the ``cluster`` fixture heals
whatever a failed test left dead."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
import uuid

import numpy as np
import psutil
import pytest
from conftest import port_of, wait_gone, wait_until

import dtfkit
from dtfkit.errors import DtfkitError, TaskFailed, TaskNotRunning, TaskTimeout

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


# ----------------------------------------------------------- functions for tasks
def whoami():
    ctx = dtfkit.this_task()
    return {
        "name": ctx.name,
        "job": ctx.job_name,
        "index": ctx.task_index,
        "pid": os.getpid(),
        "cluster": ctx.cluster,
        "target": ctx.target,
        "tf_config": json.loads(os.environ["TF_CONFIG"]),
        "ctx_tf_config": ctx.tf_config,
        "is_chief": ctx.is_chief,
    }


def task_name():
    return dtfkit.this_task().name


def garbage_collector_state():
    import gc

    return {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}


def ps_variable_plus_two(master=None, name="v"):
    """Build a graph with a variable on ps:0 and an op on worker:0; run it through ``master``."""
    import tensorflow as tf

    ctx = dtfkit.this_task()
    master = master or ctx.target
    with tf.Graph().as_default():
        with tf.device("/job:ps/task:0"):
            v = tf.Variable(40.0, name=name)
        with tf.device("/job:worker/task:0"):
            out = v + 2.0
        with tf.compat.v1.Session(master) as sess:
            sess.run(v.initializer)
            return float(sess.run(out))


def on_worker_1_through_this_task():
    """An op placed on worker:1, run through this task's master."""
    import tensorflow as tf

    with tf.Graph().as_default():
        with tf.device("/job:worker/task:1"):
            a = tf.constant(40.0) + 1.0
        with tf.device("/job:ps/task:0"):
            b = a + 1.0
        with tf.compat.v1.Session(dtfkit.this_task().target) as sess:
            return float(sess.run(b))


def client_work():
    ctx = dtfkit.this_task()
    value = ps_variable_plus_two(master="grpc://" + ctx.cluster["worker"][0], name="client_v")
    return {
        "pid": os.getpid(),
        "name": ctx.name,
        "target": ctx.target,
        "has_server": ctx.server is not None,
        "value": value,
    }


def fail_in_worker_1():
    if dtfkit.this_task().name == "worker:1":
        raise ValueError("worker 1 gives up")
    threading.Event().wait()  # blocks for ever unless interrupted


def fail_in_worker_1_while_worker_0_waits_for_go(fifo, done_file):
    if dtfkit.this_task().name == "worker:1":
        raise ValueError("worker 1 gives up early")
    with open(fifo) as f:  # blocks until the test writes to the pipe
        word = f.read()
    with open(done_file, "w") as f:
        f.write(word)
    return word


def report_then_block():
    dtfkit.report(step=1, started=dtfkit.this_task().name)
    threading.Event().wait()


def stuck_forever():
    threading.Event().wait()  # STUCK-HERE


def make_tensors():
    import tensorflow as tf

    t = tf.constant([[1.0, 2.0], [3.0, 4.0]]) * 2
    return {"tensor": t, "nested": [tf.constant(7), (tf.constant("x"), 3)]}


def say(token, lines=1):
    name = dtfkit.this_task().name
    for k in range(lines):
        print(f"{name} says {token} #{k}")
    return token


def print_on_both_streams_at_once(n):
    # A thread writing stderr (as TensorFlow's queue runners do with their tracebacks)
    # while the main thread prints: the two share the task's one output pipe.
    def to_stderr():
        for k in range(n):
            print("E" * 40 + f" {k}", file=sys.stderr)

    thread = threading.Thread(target=to_stderr)
    thread.start()
    for k in range(n):
        print("O" * 40 + f" {k}")
    thread.join()


def exit_1_on_worker_1():
    if dtfkit.this_task().name == "worker:1":
        print("worker:1 leaves without a word to the owner")
        os._exit(1)
    return "stayed"


def report_many(n):
    start = time.perf_counter()
    for i in range(n):
        dtfkit.report(step=i, loss=1.0 / (i + 1), worker=dtfkit.this_task().task_index)
    return (time.perf_counter() - start) / n


# --------------------------------------------------------------------- processes
@pytest.mark.smoke  # in the fast tier too (tests/README.md)
def test_each_task_is_its_own_process_and_knows_its_identity(cluster):
    out = cluster.run(whoami, on="all", timeout=60)
    assert list(out) == ["ps:0", "worker:0", "worker:1"]
    pids = {name: info["pid"] for name, info in out.items()}
    assert len(set(pids.values())) == 3
    assert os.getpid() not in pids.values()
    assert pids == {k: v for k, v in cluster.pids().items() if k != "netns"}

    spec = cluster.cluster_spec
    assert set(spec) == {"ps", "worker"} and len(spec["ps"]) == 1 and len(spec["worker"]) == 2
    ports = [port_of(a) for hosts in spec.values() for a in hosts]
    assert len(set(ports)) == 3
    for name, info in out.items():
        job, index = name.split(":")
        assert (info["name"], info["job"], info["index"]) == (name, job, int(index))
        assert info["cluster"] == spec
        assert info["tf_config"] == {"cluster": spec, "task": {"type": job, "index": int(index)}}
        assert info["ctx_tf_config"] == info["tf_config"]
        assert info["target"] == "grpc://" + cluster.address(name)
    assert [out[n]["is_chief"] for n in out] == [False, True, False]

    text = repr(cluster)
    for name, pid in pids.items():
        assert name in text and str(pid) in text and cluster.address(name) in text
    assert "running" in text and cluster._repr_html_().count("<tr>") == 4


@pytest.mark.smoke  # in the fast tier too (tests/README.md)
def test_tasks_imported_tensorflow_with_the_collector_paused_and_left_it_on(cluster):
    # task_main pauses the cyclic garbage collector for the TensorFlow import and freezes what the
    # import made (benchmarks/RESULTS.md): the collector must be on again for the user's code, and
    # the import's half a million objects are in the permanent generation.
    for task, state in cluster.run(garbage_collector_state, on="all", timeout=60).items():
        assert state["enabled"], task
        assert state["frozen"] > 100_000, (task, state)


@pytest.mark.parametrize(
    "on, expected",
    [
        ("workers", ["worker:0", "worker:1"]),
        ("all", ["ps:0", "worker:0", "worker:1"]),
        ("ps", ["ps:0"]),
        ("worker", ["worker:0", "worker:1"]),
        ("worker:1", ["worker:1"]),
        (["worker:0"], ["worker:0"]),
        (["worker:1", "ps:0"], ["worker:1", "ps:0"]),
    ],
)
def test_run_returns_a_value_per_selected_task(cluster, on, expected):
    assert cluster.run(task_name, on=on, timeout=60) == {name: name for name in expected}


def test_run_passes_args_and_kwargs(cluster):
    out = cluster.run(
        lambda a, b=0: (dtfkit.this_task().name, a + b),
        args=(40,),
        kwargs={"b": 2},
        on="worker:0",
        timeout=60,
    )
    assert out == {"worker:0": ("worker:0", 42)}


@pytest.mark.timeout(180)
def test_client_is_a_separate_process_without_a_server(cluster):
    task_pids = set(cluster.pids().values())
    out = cluster.run(client_work, on="client", timeout=120)
    assert len(out) == 1
    ((name, info),) = out.items()
    assert name.startswith("client:") and info["name"] == name
    assert info["pid"] not in task_pids and info["pid"] != os.getpid()
    assert info["target"] is None and info["has_server"] is False
    assert info["value"] == 42.0
    # The client process is gone after the call, and the tasks were not touched.
    assert not psutil.pid_exists(info["pid"]) or wait_gone([psutil.Process(info["pid"])], 10) == []
    assert set(cluster.pids().values()) == task_pids
    assert "client" not in " ".join(cluster.status())


# ------------------------------------------------------------------------ results
def test_tensor_results_come_back_as_numpy(cluster):
    out = cluster.run(make_tensors, on="worker:0", timeout=60)["worker:0"]
    assert isinstance(out["tensor"], np.ndarray)
    np.testing.assert_array_equal(out["tensor"], [[2.0, 4.0], [6.0, 8.0]])
    seven, (x, three) = out["nested"]
    assert int(seven) == 7 and x == b"x" and three == 3
    assert "tensorflow" not in sys.modules


def test_unpicklable_function_fails_before_anything_runs(cluster, tmp_path):
    lock = threading.Lock()
    marker = tmp_path / "ran"

    def uses_a_lock():
        marker.write_text("the function ran")
        with lock:
            return 1

    with pytest.raises(DtfkitError, match="cannot send") as info:
        cluster.run(uses_a_lock, on="all")
    assert "lock" in str(info.value)
    with pytest.raises(DtfkitError, match="cannot send"):
        cluster.run(task_name, args=(threading.Lock(),))
    # Each task works through its calls in order: had the bad call been sent, it
    # would have run before this one returns.
    assert cluster.run(task_name, on="all", timeout=60) == {n: n for n in cluster.tasks}
    assert not marker.exists()


# ------------------------------------------------------------------------- errors
@pytest.mark.smoke  # in the fast tier too (tests/README.md)
def test_task_failure_names_the_task_and_interrupts_the_others(cluster):
    pids = cluster.pids()
    with pytest.raises(TaskFailed) as info:
        cluster.run(fail_in_worker_1, timeout=60)
    err = info.value
    assert err.task == "worker:1"
    assert err.exc_type == "ValueError"
    assert "worker 1 gives up" in str(err)
    assert "fail_in_worker_1" in err.remote_traceback
    assert "worker:0 was interrupted" in err.others
    # Interrupted, not killed: worker 0 returned and still serves.
    assert cluster.status() == {"ps:0": "running", "worker:0": "running", "worker:1": "running"}
    assert cluster.pids() == pids
    assert cluster.run(task_name, timeout=60) == {"worker:0": "worker:0", "worker:1": "worker:1"}


def _open_fifo_for_writing(path):
    try:
        return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENXIO: nobody reads it yet
        return None


def test_on_error_wait_lets_the_other_tasks_finish(cluster, tmp_path):
    fifo, done = tmp_path / "go", tmp_path / "worker0-done"
    os.mkfifo(fifo)
    handle = cluster.submit(
        fail_in_worker_1_while_worker_0_waits_for_go, args=(str(fifo), str(done)), on_error="wait", timeout=60
    )

    def worker_1_failed() -> bool:
        handle.done()  # lets the owner take in what the tasks sent
        return cluster.status()["worker:1"] == "running"

    assert wait_until(worker_1_failed, 30), cluster.status()
    # The owner has taken in worker:1's error; worker:0 must still be on its call.
    assert cluster.status()["worker:0"] == "busy"
    fds = []
    assert wait_until(lambda: fds.append(_open_fifo_for_writing(fifo)) or fds[-1] is not None, 30), (
        "worker:0 stopped waiting for the pipe: it was interrupted"
    )
    os.write(fds[-1], b"go")
    os.close(fds[-1])
    with pytest.raises(TaskFailed) as info:
        handle.result()
    assert info.value.task == "worker:1"
    assert "interrupted" not in str(info.value)
    assert done.read_text() == "go"


def test_timeout_shows_the_stuck_line_kills_the_task_and_restart_brings_it_back(cluster):
    address = cluster.address("worker:1")
    old = psutil.Process(cluster.pids()["worker:1"])
    with pytest.raises(TaskTimeout) as info:
        cluster.run(stuck_forever, on="worker:1", timeout=2)
    text = str(info.value)
    assert re.search(r"worker:1 did not return .*within 2 s", text)
    assert "stuck_forever" in text
    assert "threading.Event().wait()  # STUCK-HERE" in text
    assert cluster.status()["worker:1"] == "killed"
    assert wait_gone([old], 10) == []
    with pytest.raises(TaskNotRunning, match="worker:1 is killed"):
        cluster.run(task_name, on="worker:1")

    cluster.restart()
    assert cluster.status()["worker:1"] == "running"
    assert cluster.address("worker:1") == address
    assert cluster.run(task_name, on="worker:1", timeout=60) == {"worker:1": "worker:1"}


# ---------------------------------------------------------------------- lifecycle
def test_kill_during_a_call_then_restart_on_the_same_address(cluster):
    address = cluster.address("worker", 1)
    old = psutil.Process(cluster.pids()["worker:1"])
    since = time.time()
    handle = cluster.submit(report_then_block, timeout=60)
    cluster.metrics.wait_for(lambda r: r.get("started") == "worker:1" and r["time"] >= since, timeout=30)
    cluster.kill("worker", 1)
    with pytest.raises(dtfkit.TaskExited, match="worker:1 was killed") as info:
        handle.result()
    assert "worker:0 was interrupted" in str(info.value)
    assert cluster.status() == {"ps:0": "running", "worker:0": "running", "worker:1": "killed"}
    assert wait_gone([old], 10) == []
    with pytest.raises(TaskNotRunning):
        cluster.run(task_name, on="worker:1")
    with pytest.raises(TaskNotRunning):
        cluster.run(task_name, on="all")

    cluster.restart("worker", 1)
    assert cluster.status()["worker:1"] == "running"
    assert cluster.address("worker", 1) == address
    assert cluster.pids()["worker:1"] != old.pid
    assert cluster.run(task_name, on="worker:1", timeout=60) == {"worker:1": "worker:1"}
    # The other tasks reach it again at its old address.
    assert cluster.run(on_worker_1_through_this_task, on="worker:0", timeout=60) == {"worker:0": 42.0}


def test_a_task_that_exits_during_a_call_is_named_with_its_last_line(cluster, capsys):
    with pytest.raises(dtfkit.TaskExited) as info:
        cluster.run(exit_1_on_worker_1, on="worker:1", timeout=60)
    text = str(info.value)
    assert "worker:1 exited with code 1 while running exit_1_on_worker_1" in text
    assert "worker:1 leaves without a word to the owner" in text  # read before the verdict
    assert "cluster.restart('worker:1')" in text
    assert "[worker:1] worker:1 leaves without a word to the owner" in capsys.readouterr().out
    cluster.restart("worker", 1)
    assert cluster.run(task_name, on="worker:1", timeout=60) == {"worker:1": "worker:1"}


def test_restarted_ps_serves_a_session_again(cluster):
    assert cluster.run(ps_variable_plus_two, on="worker:0", timeout=60) == {"worker:0": 42.0}
    address, old = cluster.address("ps:0"), psutil.Process(cluster.pids()["ps:0"])
    cluster.restart("ps", 0)
    assert wait_gone([old], 10) == []
    assert cluster.address("ps:0") == address and cluster.status()["ps:0"] == "running"
    assert cluster.run(ps_variable_plus_two, on="worker:0", timeout=60) == {"worker:0": 42.0}


# ------------------------------------------------------------------------- output
def write_tensorflow_noise():
    """What TensorFlow's C++ side writes at start-up, written the same way (to fd 2, past Python). Which lines a
    real start-up prints depends on the CPU: the oneDNN notice only where oneDNN is on by default (AVX-512)."""
    os.write(2, b"I0000 00:00:1795589901.405284    6600 port.cc:153] oneDNN custom operations are on. x\n")
    os.write(
        2, b"I0000 00:00:1795589901.405284    6600 cpu_feature_guard.cc:227] This TensorFlow binary is x\n"
    )
    print("after the noise", flush=True)


def test_tensorflow_start_up_noise_is_hidden_unless_asked_for(cluster):
    cluster.run(write_tensorflow_noise, on="worker:0", timeout=60)
    for noise in ("oneDNN custom operations", "This TensorFlow binary is"):
        assert noise in cluster.logs("worker", 0, everything=True)
        assert noise not in cluster.logs("worker", 0)
        assert noise not in cluster.logs()
        with open(os.path.join(cluster.log_dir, "worker-0.log")) as f:
            assert noise in f.read()
    assert "after the noise" in cluster.logs("worker", 0)
    assert cluster.logs("worker:0", tail=1) == "after the noise"


def test_print_in_a_task_reaches_the_callers_stdout_logs_and_log_file(cluster, capsys):
    token = uuid.uuid4().hex[:8]
    assert cluster.run(say, args=(token,), on="worker:1", timeout=60) == {"worker:1": token}
    assert f"[worker:1] worker:1 says {token} #0" in capsys.readouterr().out.splitlines()
    assert f"worker:1 says {token} #0" in cluster.logs("worker", 1).splitlines()
    assert f"[worker:1] worker:1 says {token} #0" in cluster.logs().splitlines()
    assert token not in cluster.logs("worker", 0)
    with open(os.path.join(cluster.log_dir, "worker-1.log")) as f:
        assert f"worker:1 says {token} #0\n" in f.read()


def test_everything_a_task_prints_before_returning_is_shown_by_that_call(cluster, capsys):
    # A function that prints a lot and returns at once: the call must not return
    # before every line has been shown (and kept), or the lines end up lost or in
    # a later cell's output.
    n = 300
    for _ in range(3):
        token = uuid.uuid4().hex[:8]
        cluster.run(say, args=(token, n), timeout=60)
        shown = capsys.readouterr().out.splitlines()
        for name in ("worker:0", "worker:1"):
            got = sum(f"[{name}] {name} says {token} #{k}" in shown for k in range(n))
            assert got == n, f"the call returned having shown {got} of {name}'s {n} lines"
        kept = cluster.logs("worker", 1).splitlines()
        assert sum(f"worker:1 says {token} #{k}" in kept for k in range(n)) == n


def test_stdout_and_stderr_lines_written_at_once_stay_whole(cluster, capsys):
    n = 2000
    cluster.run(print_on_both_streams_at_once, args=(n,), on="worker:0", timeout=60)
    capsys.readouterr()
    with open(os.path.join(cluster.log_dir, "worker-0.log")) as f:
        lines = [line for line in f.read().splitlines() if "OOOO" in line or "EEEE" in line]
    whole = re.compile(r"^(O{40}|E{40}) \d+$")
    garbled = [line for line in lines if not whole.match(line)]
    assert garbled == [], f"{len(garbled)} lines mixed stdout and stderr, e.g. {garbled[:3]}"
    assert len(lines) == 2 * n


# ------------------------------------------------------------------------ metrics
def test_report_sends_metrics_with_task_names_and_times(cluster, capsys):
    since = time.time()
    cost = cluster.run(report_many, args=(1000,), timeout=120)
    until = time.time()
    for name in ("worker:0", "worker:1"):
        rows = cluster.metrics.rows(task=name, since=since)
        assert len(rows) == 1000
        assert [r["step"] for r in rows] == list(range(1000))
        assert all(r["task"] == name and since <= r["time"] <= until for r in rows)
        assert rows[999]["loss"] == pytest.approx(1 / 1000)
        assert rows[0]["worker"] == int(name[-1])
    xs, ys = cluster.metrics.series("loss", since=since)["worker:1"]
    assert xs[:3] == [0, 1, 2] and ys[0] == 1.0
    with capsys.disabled():
        print(
            "\n[dtfkit] report() cost per call: "
            + ", ".join(f"{name} {seconds * 1e6:.1f} us" for name, seconds in cost.items())
        )


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"on": "workerz:0"}, "unknown role 'workerz'"),
        ({"on": "gpu"}, "cannot name a task"),
        ({"on": "worker:2"}, "no task worker:2"),
        ({"on": ["worker:0", "worker:9"]}, "no task worker:9"),
        ({"on": "chief"}, "selects no task"),
        ({"on": []}, "selects no task"),
        ({"timeout": 0}, "timeout must be a positive number"),
        ({"timeout": -3}, "timeout must be a positive number"),
        ({"timeout": "5"}, "timeout must be a positive number"),
        ({"timeout": float("nan")}, "timeout must be a positive number"),
        ({"on_error": "ignore"}, "on_error must be one of"),
    ],
)
def test_bad_run_arguments_are_clear_errors(cluster, tmp_path, kwargs, message):
    marker = tmp_path / "ran"
    with pytest.raises(DtfkitError, match=message):
        cluster.run(lambda: marker.write_text("ran"), **kwargs)
    assert cluster.run(task_name, on="all", timeout=60) == {n: n for n in cluster.tasks}
    assert not marker.exists()


@pytest.mark.parametrize("grace", [-1, "5"])
def test_bad_grace_is_a_clear_error(cluster, grace):
    with pytest.raises(DtfkitError, match="grace"):
        cluster.run(task_name, grace=grace)


def test_other_bad_arguments(cluster):
    with pytest.raises(DtfkitError, match="needs a function"):
        cluster.run(42)
    with pytest.raises(DtfkitError, match="no task worker:7"):
        cluster.kill("worker", 7)
    with pytest.raises(DtfkitError, match="no task ps:3"):
        cluster.logs("ps", 3)
    with pytest.raises(DtfkitError, match="unknown role"):
        cluster.restart("master:0")
    assert set(cluster.status().values()) == {"running"}


def test_a_connection_without_the_cluster_key_is_refused_and_harmless(cluster):
    """The control socket authenticates each connection in its own thread: a stranger
    (or a stalled task) neither gets in nor holds up the cluster."""
    from multiprocessing import AuthenticationError
    from multiprocessing.connection import Client

    socket_path = cluster._rt.tasks.control_address
    with pytest.raises((AuthenticationError, EOFError, ConnectionError)):
        Client(socket_path, family="AF_UNIX", authkey=b"not the cluster's key").close()
    import socket as socket_module

    with socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM) as silent:
        silent.connect(socket_path)  # connects, then never answers the challenge
        assert cluster.run(lambda: 7, on="worker:0") == {"worker:0": 7}
        cluster.restart("worker:1")  # a new task connects while the silent one is pending
        assert cluster.run(lambda: 8, on="worker:1") == {"worker:1": 8}
