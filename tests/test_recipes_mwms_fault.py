"""``dtfkit.recipes.mwms_fault``: what a crashed, frozen or hung peer does to
MultiWorkerMirroredStrategy training, and the two ways back (a CheckpointManager in the custom
loop; PreemptionCheckpointHandler on SIGTERM). Real processes, real TensorFlow; every failure is
bounded by a call timeout or a collective timeout."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from conftest import share_cluster

import dtfkit
from dtfkit.engine.launchers.fake import FakeLauncher
from dtfkit.errors import TaskExited, TaskFailed, TaskTimeout
from dtfkit.recipes import mwms_fault as mf

K = 8  # the step after which a peer fails


# ----------------------------------------------------------------- fast: the plain helpers
def test_error_gist_finds_the_cause_after_the_node_lines():
    message = (
        "Graph execution error:\n\nDetected at node sgd_1/CollectiveReduceV2 defined at (most recent call last):\n"
        '  File "a.py", line 1, in <module>\n\n  File "b.py", line 2, in train_step\n\n'
        "Collective has timed out during execution.\n\t [[{{node sgd_1/CollectiveReduceV2}}]] [Op:__inference_x]"
    )
    assert mf.error_gist(message) == "Collective has timed out during execution."
    assert mf.error_gist("plain") == "plain"


def test_weights_digest_tells_bit_identical_weights_apart():
    a = [np.arange(4, dtype=np.float32), np.ones((2, 2), np.float32)]
    b = [w.copy() for w in a]
    assert mf.weights_digest(a) == mf.weights_digest(b)
    b[0][3] = np.nextafter(b[0][3], np.float32(10))
    assert mf.weights_digest(a) != mf.weights_digest(b)


def test_recovery_summary_counts_the_steps_lost_and_compares_the_restore_with_the_save():
    resumed = {
        t: {"resumed_from": 10, "first_step": 11, "steps_done": 30, "restored_digest": "abc"}
        for t in ("worker:0", "worker:1")
    }
    crashed = {"last_saved_step": 10, "saved_digests": {5: "old", 10: "abc"}}
    summary = mf.recovery_summary(12, crashed, resumed)
    assert summary == {
        "killed_at": 12,
        "last_saved_step": 10,
        "resumed_from": 10,
        "first_step": 11,
        "lost_steps": 2,
        "final_step": 30,
        "restored_as_saved": True,
    }
    # the check can fail: a worker that restored other weights (another checkpoint, or none) ...
    resumed["worker:1"] = {**resumed["worker:1"], "restored_digest": "old"}
    assert mf.recovery_summary(12, crashed, resumed)["restored_as_saved"] is False
    resumed["worker:1"] = {**resumed["worker:1"], "restored_digest": None}
    assert mf.recovery_summary(12, crashed, resumed)["restored_as_saved"] is False
    # ... and says so when the saving run's weights are unknown; the digests may come from reports
    assert mf.recovery_summary(12, {}, resumed)["restored_as_saved"] is None
    assert mf.recovery_summary(12, {}, resumed, saved_digests={10: "abc"})["restored_as_saved"] is False
    resumed["worker:1"] = {**resumed["worker:1"], "resumed_from": 5}
    with pytest.raises(ValueError, match="different steps"):
        mf.recovery_summary(12, {}, resumed)


def test_an_unknown_failure_is_refused_before_tensorflow_starts(tmp_path):
    with pytest.raises(ValueError, match="exit, freeze, hang"):
        mf.train_until_a_peer_fails(progress_dir=str(tmp_path), failure="crash")


# ------------------------------------------ fast: bad arguments refused before anything starts
TWO_WORKERS = {"worker": ["localhost:1", "localhost:2"]}


@pytest.fixture
def in_a_task(monkeypatch):
    """Run the recipes as if in worker:0 of a 2-worker cluster started with start_servers=False."""
    from dtfkit import taskapi

    def enter(cluster=TWO_WORKERS, server=None):
        context = taskapi.TaskContext("worker", 0, cluster, server=server)
        monkeypatch.setattr(taskapi.STATE, "context", context)

    enter()
    return enter


@pytest.mark.parametrize(
    ("fn", "kwargs", "named"),
    [
        (mf.train_until_a_peer_fails, {"failing_task": "worker:5"}, "failing_task names 'worker:5'"),
        (mf.train_until_a_peer_fails, {"fail_at": 30, "steps": 30}, "fail_at=30 is not before steps=30"),
        (mf.train_until_a_peer_fails, {"fail_at": 0}, "fail_at must be a whole number"),
        (mf.train_until_a_peer_fails, {"collective_timeout": 0}, "collective_timeout must be None or"),
        (mf.train_with_checkpoints, {"save_every": 0}, "save_every must be a whole number of at least 1"),
        (mf.train_with_checkpoints, {"die_at": 40, "steps": 30}, "die_at=40 is not before steps=30"),
        (
            mf.train_with_checkpoints,
            {"die_at": 3, "dying_tasks": ("chief:0",)},
            "dying_tasks names 'chief:0'",
        ),
        (mf.train_with_preemption_handler, {"signal_at": 29, "steps": 30}, "signal_at=29 leaves no step"),
        (
            mf.train_with_preemption_handler,
            {"signal_at": 3, "signal_task": "ps:0"},
            "signal_task names 'ps:0'",
        ),
    ],
)
def test_a_bad_argument_is_named_before_tensorflow_starts(in_a_task, tmp_path, fn, kwargs, named):
    folder = {"progress_dir" if fn is mf.train_until_a_peer_fails else "checkpoint_dir": str(tmp_path)}
    with pytest.raises(ValueError, match=re.escape(named)):
        fn(**folder, **kwargs)
    assert not os.listdir(tmp_path)  # nothing ran: no mark, no checkpoint


def test_a_task_with_dtfkits_server_is_told_to_start_without_one(in_a_task, tmp_path):
    in_a_task(server=object())
    with pytest.raises(ValueError, match="start_servers=False") as refused:
        mf.train_with_checkpoints(checkpoint_dir=str(tmp_path))
    assert "Could not start gRPC server" in str(refused.value) and "worker:0" in str(refused.value)


def test_a_single_worker_has_no_peer_to_fail(in_a_task, tmp_path):
    in_a_task(cluster={"worker": ["localhost:1"]})
    with pytest.raises(ValueError, match="at least 2"):
        mf.train_until_a_peer_fails(progress_dir=str(tmp_path), failing_task="worker:0")


class _NotACluster:
    """Records whether the driver started anything."""

    def __init__(self, spec):
        self.cluster_spec = spec
        self.started = []

    def ensure_running(self, **kwargs):
        self.started.append(kwargs)

    def run(self, *args, **kwargs):
        self.started.append(args)


@pytest.mark.parametrize(
    ("kwargs", "spec", "named"),
    [
        ({"attempts": 0}, TWO_WORKERS, "attempts must be a whole number of at least 1"),
        ({"fail_at": 20, "steps": 20}, TWO_WORKERS, "fail_at=20 is not before steps=20"),
        ({"collective_timeout": -1}, TWO_WORKERS, "collective_timeout must be a number of seconds"),
        ({}, {"worker": ["localhost:1"]}, "at least 2"),
    ],
)
def test_the_hung_peer_driver_refuses_bad_arguments_before_it_restarts_anything(kwargs, spec, named):
    cluster = _NotACluster(spec)
    with pytest.raises(ValueError, match=re.escape(named)):
        mf.hang_with_collective_timeout(cluster, **kwargs)
    assert cluster.started == []


# ------------------------------------------------------------- slow: 2 real workers
@pytest.fixture(scope="module")
def two_workers():
    cluster = dtfkit.LocalCluster(workers=2, start_servers=False, progress=False, name=None)
    with share_cluster(cluster):
        yield cluster


@pytest.fixture
def mwms(two_workers):
    """The module's 2 workers as new processes: one MultiWorkerMirroredStrategy per process."""
    two_workers.ensure_running(fresh="all")
    return two_workers


def submit_each(cluster, fn, timeout: float, **kwargs) -> dict:
    """One call per worker, so that the survivor's result stays readable when a peer dies."""
    return {t: cluster.submit(fn, kwargs=kwargs, on=t, timeout=timeout) for t in ("worker:0", "worker:1")}


def assert_died(handle) -> None:
    with pytest.raises(TaskExited, match=f"exited with code {mf.DIED_EXIT_CODE}"):
        handle.result()


@pytest.mark.slow
def test_a_crashed_peer_fails_the_survivors_next_step_at_once(mwms, tmp_path):
    for collective_timeout in (None, 30.0):  # the timeout plays no part: the dead peer's connection resets
        folder = tmp_path / str(collective_timeout)
        folder.mkdir()
        calls = submit_each(
            mwms,
            mf.train_until_a_peer_fails,
            timeout=120,
            progress_dir=str(folder),
            fail_at=K,
            steps=20,
            collective_timeout=collective_timeout,
        )
        survivor = calls["worker:0"].result()["worker:0"]
        assert_died(calls["worker:1"])
        assert survivor["steps_done"] == K
        assert survivor["error_class"] == "UnavailableError"
        assert survivor["error_message"].startswith("Collective ops is aborted by")
        mwms.ensure_running(fresh="all")


@pytest.mark.slow
def test_a_frozen_peer_is_noticed_by_the_coordination_service_heartbeat(mwms, tmp_path):
    results = mwms.run(
        mf.train_until_a_peer_fails,
        kwargs={"progress_dir": str(tmp_path), "fail_at": K, "steps": 20, "failure": "freeze"},
        timeout=120,
    )
    survivor, frozen = results["worker:0"], results["worker:1"]
    assert frozen == {
        "task": "worker:1",
        "steps_done": K,
        "error_class": None,
        "error_message": "",
        "frozen": True,
    }
    assert survivor["steps_done"] == K
    assert survivor["error_class"] == "UnavailableError"
    assert "stopped sending heartbeats" in survivor["error_message"]


@pytest.mark.slow
def test_a_hung_peer_blocks_the_survivor_until_the_call_times_out(mwms, tmp_path):
    handle = mwms.submit(
        mf.train_until_a_peer_fails,
        kwargs={"progress_dir": str(tmp_path), "fail_at": K, "steps": 20, "failure": "hang"},
        on_error="wait",
        timeout=45,
    )
    with pytest.raises(TaskTimeout) as stuck:
        handle.result()
    stacks = stuck.value.stacks
    assert set(stacks) == {"worker:0", "worker:1"}
    # the survivor is inside its training step (a collective that never completes) ...
    assert "run.train_step(run.iterator)" in stacks["worker:0"]
    assert "TFE_Py_Execute" in stacks["worker:0"]
    # ... after exactly K steps, and the hung peer is where the recipe parks it
    steps = [r["step"] for r in mwms.metrics.rows(task="worker:0", since=handle.submitted) if "step" in r]
    assert max(steps) == K
    assert "a hung worker" in stacks["worker:1"]


@pytest.mark.slow
def test_a_collective_timeout_turns_the_hang_into_deadline_exceeded(mwms):
    seen = mf.hang_with_collective_timeout(mwms, fail_at=K, steps=20, collective_timeout=3.0)
    # A crash of TensorFlow's while it aborts is run again, and only that: each one died of a signal.
    assert all("exited with code -" in crash for crash in seen["crashes"]), seen["crashes"]
    survivor, hung = seen["results"]["worker:0"], seen["results"]["worker:1"]
    assert hung["hung"] and hung["steps_done"] == K
    assert survivor["steps_done"] == K
    assert survivor["error_class"] == "DeadlineExceededError"
    assert survivor["error_message"] == "Collective has timed out during execution."


@pytest.mark.slow
def test_checkpoints_in_the_custom_loop_resume_after_a_crash(mwms, tmp_path):
    ckpt = str(tmp_path)
    calls = submit_each(
        mwms, mf.train_with_checkpoints, timeout=120, checkpoint_dir=ckpt, steps=30, save_every=5, die_at=12
    )
    crashed = calls["worker:0"].result()["worker:0"]
    assert_died(calls["worker:1"])
    assert crashed["steps_done"] == 12 and crashed["last_saved_step"] == 10
    assert crashed["error_class"] == "UnavailableError"
    mwms.ensure_running(fresh="all")
    resumed = mwms.run(
        mf.train_with_checkpoints, kwargs={"checkpoint_dir": ckpt, "steps": 30, "save_every": 5}, timeout=120
    )
    summary = mf.recovery_summary(12, crashed, resumed)
    assert summary == {
        "killed_at": 12,
        "last_saved_step": 10,
        "resumed_from": 10,
        "first_step": 11,
        "lost_steps": 2,
        "final_step": 30,
        "restored_as_saved": True,
    }
    assert crashed["saved_digests"][10] == resumed["worker:1"]["restored_digest"]
    assert not any(name.startswith("tmp_") for name in os.listdir(ckpt))  # worker:1 removed its own folder


@pytest.mark.slow
def test_preemption_handler_saves_at_the_agreed_step_and_loses_none(mwms, tmp_path):
    ckpt = str(tmp_path)
    preempted = mwms.run(
        mf.train_with_preemption_handler,
        kwargs={"checkpoint_dir": ckpt, "steps": 30, "signal_at": 12},
        timeout=120,
    )
    for task, result in preempted.items():
        # worker:1 got SIGTERM after step 12; every worker trained step 13, saved, and exited (sys.exit(42))
        assert result["exit_code"] == 42, task
        assert result["saved_step"] == result["steps_done"] == 13, task
    assert len({r["weights_digest"] for r in preempted.values()}) == 1
    mwms.ensure_running(fresh="all")
    resumed = mwms.run(
        mf.train_with_preemption_handler, kwargs={"checkpoint_dir": ckpt, "steps": 30}, timeout=120
    )
    for task, result in resumed.items():
        assert result["resumed_from"] == 13, task
        assert result["steps_done"] == 30 and result["exit_code"] is None, task
    assert len({r["weights_digest"] for r in resumed.values()}) == 1
    # The step count is the recipe's own variable (the handler's total_run_calls is deprecated); TensorFlow
    # still reads it when it saves, and its warning names that file by the path Python finds it by.
    for task in ("worker:0", "worker:1"):
        log = str(mwms.logs(task, everything=True))
        assert "mwms_fault.py" not in log, task
        assert re.search(r"WARNING:tensorflow:From tensorflow/python/\S+\.py:\d+: ", log), task
        assert not re.search(r"WARNING:tensorflow:From /", log), task


@pytest.mark.slow
def test_backup_and_restore_fit_fails_under_mwms_but_resumes_on_one_worker(mwms, tmp_path):
    tried = mwms.run(mf.try_fit_under_mwms, kwargs={"backup_dir": str(tmp_path / "mwms")}, timeout=120)
    for task, result in tried.items():
        assert not result["fit_ran"], task
        assert result["error_class"] == "ValueError", task  # keras-team/keras#20585
        assert "PerReplica" in result["error_message"], task
    mwms.ensure_running(fresh="all")
    single = mwms.run(
        mf.fit_with_backup_and_restore,
        kwargs={"backup_dir": str(tmp_path / "one")},
        on="worker:0",
        timeout=120,
    )["worker:0"]
    assert single == {
        "first_run_epochs": [1, 2],
        "second_run_epochs": [3, 4],
        "lost_epochs": 0,
        "backup_left": False,
    }


def test_a_crash_while_aborting_is_run_again_and_a_python_error_is_not(monkeypatch, tmp_path):
    marker = str(tmp_path / "crashed-once")

    def crash_once_on_worker_0(**kwargs):  # a stand-in: TensorFlow's crash is a SIGSEGV too
        import os
        import signal

        if dtfkit.this_task().name == "worker:0" and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGSEGV)
        return {"steps_done": kwargs["fail_at"]}

    monkeypatch.setattr(mf.kernel_side, "train_until_a_peer_fails", crash_once_on_worker_0)
    with dtfkit.LocalCluster(workers=2, launcher=FakeLauncher(), progress=False, name=None) as cluster:
        seen = mf.hang_with_collective_timeout(cluster, fail_at=3)
        assert seen["results"] == {"worker:0": {"steps_done": 3}, "worker:1": {"steps_done": 3}}
        [crash] = seen["crashes"]
        assert "worker:0 exited with code -11" in crash and "in crash_once_on_worker_0" in crash, crash
        monkeypatch.setattr(mf.kernel_side, "train_until_a_peer_fails", lambda **kwargs: 1 / 0)
        with pytest.raises(TaskFailed):
            mf.hang_with_collective_timeout(cluster)
