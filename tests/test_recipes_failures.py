"""``dtfkit.recipes.failures``: seven failures users report, each reproduced on a real
``LocalCluster`` (bounded by a timeout), and its fix run. What is checked is the
symptom's class (the exception type, or where the hang waits) and the fixed outcome,
never how long anything took."""

from __future__ import annotations

import json

import pytest
from conftest import share_cluster

import dtfkit
from dtfkit.errors import TaskFailed, TaskTimeout
from dtfkit.recipes import failures

# TensorFlow's C++ info lines (the coordination service's "Waiting for 1/2 tasks to connect").
CPP_INFO = {"TF_CPP_MIN_LOG_LEVEL": "0"}


# ----------------------------------------------------------------------- fast: no TensorFlow
def test_tensorflow_frames_reads_tracebacks_and_faulthandler_dumps():
    traceback = (
        '  File "/x/task_main.py", line 175, in _run_call\n'
        '  File "/v/site-packages/tensorflow/python/distribute/collective_all_reduce_strategy.py", '
        "line 187, in __init__\n"
        '  File "/v/site-packages/tensorflow/python/eager/context.py", line 745, in ensure_initialized\n'
    )
    assert failures.tensorflow_frames(traceback) == [
        ("tensorflow/python/distribute/collective_all_reduce_strategy.py", "__init__"),
        ("tensorflow/python/eager/context.py", "ensure_initialized"),
    ]
    dump = (
        "Thread 0x01 (most recent call first):\n"
        '  File "/v/site-packages/tensorflow/python/eager/context.py", line 745 in ensure_initialized\n'
        '  File "/v/site-packages/tensorflow/python/distribute/collective_all_reduce_strategy.py", '
        "line 187 in __init__\n"
        '  File "/x/task_main.py", line 449 in <module>\n'
    )
    assert failures.tensorflow_frames(dump)[-1] == (
        "tensorflow/python/eager/context.py",
        "ensure_initialized",
    )


def test_main_thread_dumps_keeps_the_main_thread_of_every_dump():
    text = (
        "Timeout (0:00:01.500000)!\n"
        "Thread 0x02 (most recent call first):\n"
        '  File "/x/task_main.py", line 48 in _watch\n'
        "\n"
        "Thread 0x01 (most recent call first):\n"
        '  File "/v/tensorflow/python/eager/context.py", line 745 in ensure_initialized\n'
        '  File "/x/task_main.py", line 449 in <module>\n'
        "Timeout (0:00:01.500000)!\n"
        "Thread 0x01 (most recent call first):\n"
        '  File "/v/tensorflow/python/training/server_lib.py", line 185 in join\n'
        '  File "/x/task_main.py", line 449 in <module>\n'
    )
    dumps = failures.main_thread_dumps(text)
    assert len(dumps) == 2
    assert "ensure_initialized" in dumps[0] and "join" in dumps[1]


def test_localhost_tf_config_keeps_the_ports_and_the_task(monkeypatch):
    config = {
        "cluster": {"worker": ["10.77.0.2:4001", "10.77.0.3:4002"]},
        "task": {"type": "worker", "index": 1},
    }
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    assert failures.localhost_tf_config() == {
        "cluster": {"worker": ["localhost:4001", "localhost:4002"]},
        "task": {"type": "worker", "index": 1},
    }


def test_every_case_cites_where_users_reported_it():
    drivers = {name[len("reproduce_") :] for name in dir(failures) if name.startswith("reproduce_")}
    fixes = {name[len("fix_") :] for name in dir(failures) if name.startswith("fix_")}
    assert drivers == fixes == set(failures.ISSUES)
    assert all("#" in issue for issue in failures.ISSUES.values())


# ------------------------------------------------------------ slow: real clusters, real failures
@pytest.fixture(scope="module")
def mwms_cluster():
    """Two workers, each in its own network namespace (a machine of its own), no servers."""
    cluster = dtfkit.LocalCluster(
        workers=2, start_servers=False, link="100mbit", env=CPP_INFO, progress=False, name=None
    )
    with share_cluster(cluster):
        yield cluster


@pytest.fixture(scope="module")
def ps_cluster():
    cluster = dtfkit.LocalCluster(
        chief=1, ps=1, workers=2, env={"GRPC_FAIL_FAST": "use_caller"}, progress=False, name=None
    )
    with share_cluster(cluster):
        yield cluster


@pytest.mark.slow
def test_strategy_after_an_op_fails_and_strategy_first_all_reduces(mwms_cluster):
    seen = failures.reproduce_collective_after_op(mwms_cluster)
    assert seen["symptom"] == "RuntimeError"
    assert seen["key_line"] == "RuntimeError: Collective ops must be configured at program startup"
    assert isinstance(seen["error"], TaskFailed)
    fixed = failures.fix_collective_after_op(mwms_cluster)
    assert fixed["sums"] == [3.0] and fixed["replicas"] == [2]
    assert fixed["workers"] == ["worker:0", "worker:1"]


@pytest.mark.slow
def test_a_worker_alone_waits_for_its_peer_in_the_strategy_constructor(mwms_cluster):
    seen = failures.reproduce_missing_worker(mwms_cluster)
    assert isinstance(seen["error"], TaskTimeout)
    assert seen["stuck"] == ["worker:0"]
    assert seen["symptom"] == "timed out in ensure_initialized"
    assert seen["where"] == {"worker:0": "ensure_initialized (tensorflow/python/eager/context.py)"}
    assert seen["key_line"] == "Waiting for 1/2 tasks to connect."
    assert seen["stragglers"] == ["/job:worker/replica:0/task:1"]
    assert mwms_cluster.status()["worker:0"] != "running"  # the timeout ended the stuck task
    fixed = failures.fix_missing_worker(mwms_cluster)
    assert fixed["sums"] == [3.0] and fixed["replicas"] == [2]


@pytest.mark.slow
def test_localhost_in_tf_config_hangs_both_machines_and_real_addresses_work(mwms_cluster):
    seen = failures.reproduce_localhost_config(mwms_cluster)
    assert seen["stuck"] == ["worker:0", "worker:1"]
    assert seen["symptom"] == "timed out in ensure_initialized"
    assert set(seen["where"]) == {"worker:0", "worker:1"}
    assert all(host.startswith("localhost:") for host in seen["config"]["worker"])
    assert all(host.startswith("10.77.") for host in seen["addresses"]["worker"])
    assert seen["key_line"] == "Waiting for 1/2 tasks to connect."
    fixed = failures.fix_localhost_config(mwms_cluster)
    assert fixed["sums"] == [3.0] and fixed["replicas"] == [2]
    assert fixed["addresses"] == mwms_cluster.cluster_spec


@pytest.mark.slow
def test_server_join_never_returns_and_a_done_queue_ends_the_ps(ps_cluster):
    seen = failures.reproduce_join_forever(ps_cluster)
    assert seen["symptom"] == "timed out in join"
    assert seen["stuck"] == ["ps:0"]
    assert seen["where"] == {"ps:0": "join (tensorflow/python/training/server_lib.py)"}
    fixed = failures.fix_join_forever(ps_cluster)
    assert fixed["ps_returned"] == ["ps:0"]
    assert fixed["tokens"] == fixed["said_done"] == ["chief:0", "worker:0", "worker:1"]


@pytest.mark.slow
def test_a_second_server_on_a_served_port_fails_and_port_0_starts(ps_cluster):
    seen = failures.reproduce_port_taken(ps_cluster)
    assert seen["symptom"] == "UnknownError"
    assert seen["key_line"] == "UnknownError: Could not start gRPC server"
    assert seen["grpc_line"].startswith("Failed to add port to server")
    fixed = failures.fix_port_taken(ps_cluster)
    assert fixed["started"] and fixed["other_port"]


@pytest.mark.slow
def test_training_retries_while_the_ps_is_dead_and_resumes_when_it_restarts(ps_cluster, tmp_path):
    seen = failures.reproduce_ps_died(ps_cluster, str(tmp_path))
    assert seen["symptom"] == "still running"
    # TensorFlow's own record (_RecoverableSession.run in monitored_session.py), not a rewrite
    assert seen["key_line"] == (
        "An error was raised. This may be due to a preemption in a connected worker or parameter server."
    )
    assert seen["log_line"].startswith("INFO:tensorflow:" + seen["key_line"])
    assert "The current session will be closed and a new session will be created." in seen["log_line"]
    assert "dtfkit, in short" not in ps_cluster.logs("worker:0")
    assert ps_cluster.status()["ps:0"] == "killed"
    fixed = failures.fix_ps_died(ps_cluster, seen)
    assert fixed["sessions"] == [2]  # every worker: the first session, and one after the ps came back
    assert fixed["restored"] >= 20  # the chief restored a checkpoint written before the kill
    assert fixed["finished"] == ["chief:0", "worker:0", "worker:1"]


@pytest.mark.slow
def test_keras_3_fit_under_parameter_server_strategy_fails_and_a_coordinator_loop_trains(ps_cluster):
    seen = failures.reproduce_keras_fit_ps(ps_cluster)
    assert seen["symptom"] == "ValueError" and seen["task"] == "chief:0"
    assert "ClusterCoordinator.create_per_worker_dataset" in seen["key_line"]
    fixed = failures.fix_keras_fit_ps(ps_cluster, steps=10)
    assert fixed["completed"] == fixed["scheduled"] == 10


def test_summary_line_says_the_symptom_or_the_fix():
    seen = {"case": "port_taken", "issue": "tensorflow/tensorflow#3517", "symptom": "UnknownError"}
    seen["key_line"] = "UnknownError: Could not start gRPC server"
    assert failures.summary_line(seen) == (
        "port_taken (tensorflow/tensorflow#3517): UnknownError: Could not start gRPC server"
    )
    hang = {
        "case": "join_forever",
        "issue": "#4713",
        "symptom": "timed out in join",
        "key_line": "TF_ServerJoin",
    }
    assert failures.summary_line(hang) == "join_forever (#4713): timed out in join — TF_ServerJoin"
    assert (
        failures.summary_line({"case": "port_taken", "fixed": "it started"})
        == "port_taken: fixed: it started"
    )


def test_source_without_docstring_keeps_the_code():
    text = failures.source_without_docstring(failures.op_then_strategy)
    assert text.startswith("def op_then_strategy() -> None:\n")
    assert "Collective ops" not in text and "tf.distribute.MultiWorkerMirroredStrategy()" in text
