"""``dtfkit.recipes.fault``: checkpoints, restore on start and recovery from a ps restart,
on the shared 1 ps + 2 workers cluster (real TensorFlow servers), plus the log helpers."""

from __future__ import annotations

import logging
import os
import re
import time
import uuid

import pytest

from dtfkit.recipes import fault

# Real runs whose timing varies: tests/under_load.py runs them beside CPU burners.
pytestmark = pytest.mark.timing


# ------------------------------------------------------------------ no TensorFlow
class FakeUnavailable(Exception):
    """Shaped like a ``tf.errors.UnavailableError`` raised by a graph run."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


GRPC_MESSAGE = """Graph execution error:

=====================
UNAVAILABLE: From /job:worker/replica:0/task:1:
recvmsg:Connection reset by peer
Additional GRPC error information from remote target /job:ps/replica:0/task:0 while calling /tensorflow.WorkerService/RecvTensor:
:UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"recvmsg:Connection reset by peer"}
\t [[{{node fault/global_step/Read/ReadVariableOp_S73}}]]
====================="""


def test_error_gist_keeps_the_error_type_and_its_cause():
    assert (
        fault.error_gist(FakeUnavailable(GRPC_MESSAGE)) == "FakeUnavailable: recvmsg:Connection reset by peer"
    )
    assert fault.error_gist(FakeUnavailable("From /job:ps/replica:0/task:0:\nsendmsg: Broken pipe")) == (
        "FakeUnavailable: sendmsg: Broken pipe"
    )
    assert fault.error_gist(ValueError("")) == "ValueError"


def _record(msg: str, *args) -> logging.LogRecord:
    return logging.LogRecord("tensorflow", logging.INFO, __file__, 1, msg, args, None)


RECOVERY = (
    "An error was raised. This may be due to a preemption in a connected worker or parameter server. "
    "The current session will be closed and a new session will be created. Error: %s"
)


def test_tidy_log_never_changes_tensorflows_record_and_drops_noise(capsys):
    tidy = fault.task_side._TidyLog(log_checkpoints=False)
    recovery = _record(RECOVERY, FakeUnavailable(GRPC_MESSAGE))
    assert tidy.filter(recovery)
    assert recovery.getMessage() == RECOVERY % GRPC_MESSAGE  # TensorFlow's words, all of them
    assert capsys.readouterr().err == ""  # and nothing of dtfkit's beside them
    assert not tidy.filter(
        _record("From x.py:1: f (from y) is deprecated and will be removed in a future version.")
    )
    assert not tidy.filter(_record("Calling checkpoint listeners before saving checkpoint 20..."))
    assert not tidy.filter(_record("Saving checkpoints for 20 into /tmp/x/model.ckpt."))
    assert fault.task_side._TidyLog(log_checkpoints=True).filter(
        _record("Saving checkpoints for 20 into /tmp/x/model.ckpt.")
    )
    assert tidy.filter(_record("Restoring parameters from /tmp/x/model.ckpt-20"))


def test_the_recovery_gist_is_dtfkits_own_line_before_tensorflows_record(capsys):
    tidy = fault.task_side._TidyLog(log_checkpoints=True, recovery_gist=True)
    recovery = _record(RECOVERY, FakeUnavailable(GRPC_MESSAGE))
    assert tidy.filter(recovery)
    assert recovery.getMessage() == RECOVERY % GRPC_MESSAGE
    assert capsys.readouterr().err == (
        "dtfkit, in short: An error was raised: FakeUnavailable: recvmsg:Connection reset by peer\n"
    )
    during = _record("An error was raised while a session was being created. ... Error: %s", ValueError("x"))
    assert tidy.filter(during)
    assert "An error was raised while a session was being created: ValueError: x" in capsys.readouterr().err


# ------------------------------------------------------------- on a real cluster
def _latest_step(directory: str) -> int:
    text = open(os.path.join(directory, "checkpoint")).read()
    return int(re.search(r'model_checkpoint_path: ".*model\.ckpt-(\d+)"', text).group(1))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_chief_checkpoints_and_a_second_run_restores_them(cluster, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    name = f"fault_{uuid.uuid4().hex[:8]}"
    kw = dict(
        checkpoint_dir=ckpt, save_checkpoint_steps=10, save_summaries_steps=10, step_ms=10, run_name=name
    )
    since = time.time()
    first = cluster.run(
        fault.train_with_checkpoints, kwargs={**kw, "steps": 30, "log_every": 10}, timeout=120
    )
    rows = cluster.metrics.rows(since=since)

    assert all(summary["sessions"] == 1 for summary in first.values())
    assert first["worker:0"]["first_step"] == 0
    sessions = {r["task"]: r for r in rows if "session" in r}
    assert sessions["worker:0"]["restored"] == -1  # no checkpoint yet: the chief initialized
    assert "restored" not in sessions["worker:1"]
    assert {r["task"] for r in rows if "checkpoint" in r} == {"worker:0"}
    files = os.listdir(ckpt)
    last = _latest_step(ckpt)
    assert 30 <= last <= 33
    assert {"checkpoint", "graph.pbtxt", f"model.ckpt-{last}.index", f"model.ckpt-{last}.meta"} <= set(files)
    assert any(f.startswith("events.out.tfevents.") for f in files)
    assert "global_step = " in cluster.logs("worker", 1)  # LoggingTensorHook, every worker

    summaries = cluster.run(fault.read_scalars, args=(ckpt, "loss"), on="worker:0")["worker:0"]
    steps = [s for s, _ in summaries]
    assert steps and all(b - a >= 10 for a, b in zip(steps[:-1], steps[1:], strict=True))

    cluster.run(fault.forget_model, on="worker:0")  # the ps is empty: only the checkpoint remembers
    since = time.time()
    second = cluster.run(fault.train_with_checkpoints, kwargs={**kw, "steps": 50}, timeout=120)
    rows = cluster.metrics.rows(since=since)
    chief = next(r for r in rows if r["task"] == "worker:0" and "session" in r)
    assert chief["restored"] == last
    assert min(r["step"] for r in rows if "loss" in r) >= last
    assert all(summary["first_step"] >= last for summary in second.values())
    assert f"Restoring parameters from {os.path.join(ckpt, f'model.ckpt-{last}')}" in cluster.logs(
        "worker", 0
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_workers_recover_from_a_ps_restart_and_roll_back_to_the_checkpoint(cluster, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    stop = str(tmp_path / "STOP")
    kw = dict(
        checkpoint_dir=ckpt,
        stop_file=stop,
        save_checkpoint_steps=20,
        step_ms=10,
        log_checkpoints=False,
        run_name=f"fault_{uuid.uuid4().hex[:8]}",
    )
    metrics = cluster.metrics
    start = time.time()
    handle = cluster.submit(fault.train_with_checkpoints, kwargs=kw, on_error="wait", timeout=240)
    try:
        ck = metrics.wait_for(lambda r: r["time"] >= start and r.get("checkpoint", 0) >= 20, timeout=120)
        metrics.wait_for(
            lambda r: "loss" in r and r["time"] >= ck["time"] and r["step"] >= ck["step"] + 10, 60
        )
        cluster.kill("ps", 0)
        killed = time.time()
        before = [r["step"] for r in metrics.rows(since=start) if "loss" in r and r["time"] < killed]
        cluster.restart("ps", 0)
        back = {
            task: metrics.wait_for(
                lambda r, task=task: r["task"] == task and r["time"] >= killed and "session" in r, 120
            )
            for task in ("worker:0", "worker:1")
        }
        restored = back["worker:0"]["restored"]
        metrics.wait_for(lambda r: "loss" in r and r["time"] >= back["worker:1"]["time"], 60)
    finally:
        open(stop, "w").close()
    results = handle.result(timeout=120)

    checkpoints = {r["checkpoint"] for r in metrics.rows(since=start) if "checkpoint" in r}
    assert restored in checkpoints and restored < max(before)  # rolled back to a checkpoint
    after = [r["step"] for r in metrics.rows(since=back["worker:0"]["time"]) if "loss" in r]
    assert restored <= min(after) <= restored + 3
    assert [results[t]["sessions"] for t in ("worker:0", "worker:1")] == [2, 2]
    for task in ("worker:0", "worker:1"):
        assert re.search(r"An error was raised: (UnavailableError|AbortedError)", cluster.logs(task))


@pytest.mark.slow
def test_checkpoint_writers_put_a_save_on_each_ps_and_the_merge_on_the_last(cluster):
    # tensorflow/python/training/saver.py, _AddShardedSaveOpsForV2: the .index is merged on the
    # last device that holds variables, not on the chief.
    got = cluster.run(fault.checkpoint_writers, args=(3,), on="worker:0")["worker:0"]
    ps = [f"/job:ps/task:{i}/device:CPU:0" for i in range(3)]
    assert sorted(got["SaveV2"]) == ps
    assert got["MergeV2Checkpoints"] == [ps[-1]]
