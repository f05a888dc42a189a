"""The call policy (interrupt, grace, timeout, stop, restart, a task dying mid-call),
on plain Python tasks without TensorFlow (``FakeLauncher``): real processes speaking the
real protocol, up in a fraction of a second, so each policy is tested in well under a
second. ``test_cluster_work.py`` covers the same ground on real TensorFlow servers."""

from __future__ import annotations

import os
import signal
import threading

import cloudpickle
import psutil
import pytest
from conftest import share_cluster, wait_gone, wait_until

import dtfkit
from dtfkit.engine.launchers.fake import FakeLauncher
from dtfkit.engine.wire import protocol
from dtfkit.errors import DtfkitError, TaskExited, TaskFailed, TaskNotRunning, TaskTimeout

pytestmark = pytest.mark.timeout(60)


# ------------------------------------------------------------- task functions
def name():
    return dtfkit.this_task().name


def fail_on_worker_1_others_block():
    if dtfkit.this_task().name == "worker:1":
        raise ValueError("worker 1 gives up")
    threading.Event().wait()  # interrupted by the policy


def ignore_interrupts_on_worker_0_fail_on_worker_1(gate: str):
    if dtfkit.this_task().name == "worker:1":
        while not os.path.exists(gate):  # fail only once worker:0 is deaf to interrupts
            threading.Event().wait(0.01)
        raise ValueError("worker 1 gives up")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a task deaf to interrupts: the grace period ends it
    open(gate, "w").close()
    threading.Event().wait()


def block_here():
    threading.Event().wait()  # BLOCKED-HERE


def exit_on_worker_1():
    if dtfkit.this_task().name == "worker:1":
        print("worker:1 leaves without a word")
        os._exit(7)
    return "stayed"


def print_then_return(n: int):
    for k in range(n):
        print(f"{dtfkit.this_task().name} line {k}")
    return n


def wait_for_file(path: str):
    while not os.path.exists(path):
        threading.Event().wait(0.01)
    return "went on"


# -------------------------------------------------------------------- fixture
@pytest.fixture(scope="module")
def fake_cluster():
    with dtfkit.LocalCluster(ps=1, workers=2, launcher=FakeLauncher(), progress=False, name=None) as cluster:
        with share_cluster(cluster):  # its restarted tasks are not a test's leftovers
            yield cluster


@pytest.fixture
def cluster(fake_cluster):
    if any(state != "running" for state in fake_cluster.status().values()):
        fake_cluster.restart()
    assert set(fake_cluster.status().values()) == {"running"}
    return fake_cluster


# ---------------------------------------------------------------------- tests
def test_fake_tasks_are_real_processes_without_tensorflow(cluster):
    assert cluster.run(name) == {"worker:0": "worker:0", "worker:1": "worker:1"}
    loaded = cluster.run(lambda: "tensorflow" in __import__("sys").modules, on="all")
    assert loaded == {"ps:0": False, "worker:0": False, "worker:1": False}
    assert len(set(cluster.pids().values())) == 3 and os.getpid() not in cluster.pids().values()
    assert "fake" in repr(cluster)


def test_a_failure_interrupts_the_others_which_keep_running(cluster):
    pids = cluster.pids()
    with pytest.raises(TaskFailed) as info:
        cluster.run(fail_on_worker_1_others_block, timeout=30)
    assert info.value.task == "worker:1" and info.value.exc_type == "ValueError"
    assert "worker:0 was interrupted (worker:1 failed) and stopped" in info.value.others
    assert cluster.pids() == pids  # interrupted, not killed
    assert cluster.run(name, on="worker:0") == {"worker:0": "worker:0"}


def test_a_task_that_swallows_the_interrupt_is_killed_after_the_grace(cluster, tmp_path):
    old = psutil.Process(cluster.pids()["worker:0"])
    gate = str(tmp_path / "in-loop")
    with pytest.raises(TaskFailed) as info:
        cluster.run(ignore_interrupts_on_worker_0_fail_on_worker_1, args=(gate,), grace=0.3, timeout=30)
    assert info.value.task == "worker:1"
    assert "worker:0 was still running 0.3 s after the interrupt and was killed" in info.value.others
    assert cluster.status()["worker:0"] == "killed"
    assert wait_gone([old], 10) == []
    with pytest.raises(TaskNotRunning, match="worker:0 is killed"):
        cluster.run(name, on="worker:0")


def test_on_error_wait_lets_the_others_finish(cluster, tmp_path):
    gate = tmp_path / "go"
    handle = cluster.submit(wait_for_file, args=(str(gate),), on="worker:0", on_error="wait", timeout=30)
    assert not handle.done()
    gate.write_text("go")
    assert handle.result() == {"worker:0": "went on"}


def test_a_timeout_kills_the_stuck_tasks_and_carries_their_stacks(cluster):
    address = cluster.address("worker:1")
    with pytest.raises(TaskTimeout) as info:
        cluster.run(block_here, on="worker:1", timeout=0.5)
    err = info.value
    assert list(err.stacks) == ["worker:1"] and err.stopped == []
    assert "threading.Event().wait()  # BLOCKED-HERE" in err.stacks["worker:1"]
    assert "within 0.5 s" in str(err) and "BLOCKED-HERE" in str(err)
    assert cluster.status()["worker:1"] == "killed"
    cluster.restart("worker:1")
    assert cluster.address("worker:1") == address  # the same address after a restart
    assert cluster.run(name, on="worker:1") == {"worker:1": "worker:1"}


def stuck_without_letting_go_of_the_interpreter():
    import re

    # The regex engine backtracks for ages in C without releasing the interpreter lock,
    # as TensorFlow's C++ does while MultiWorkerMirroredStrategy waits for a missing peer.
    return re.match(r"(a+)+$", "a" * 64 + "b")  # HOLDS-THE-LOCK


def test_a_task_that_cannot_answer_shows_faulthandlers_stacks(cluster, monkeypatch):
    from dtfkit.engine.owner import calls

    monkeypatch.setattr(calls, "STACK_DUMP_WAIT", 1.0)  # no Python thread of the task can run
    with pytest.raises(TaskTimeout) as info:
        cluster.run(stuck_without_letting_go_of_the_interpreter, on="worker:0", timeout=0.5)
    where = info.value.stacks["worker:0"]
    assert where.startswith(calls.NO_ANSWER_NOTE), where
    # Outermost call first, each with its line of code, as a task's own stack reads.
    lines = where.splitlines()
    call = next(i for i, line in enumerate(lines) if "in stuck_without_letting_go_of_the_interpreter" in line)
    assert lines[call + 1].strip().endswith("# HOLDS-THE-LOCK"), where
    # The engine's frames that ran the call (runpy, task_main) are left out, as from a Python traceback.
    assert "task_main.py" not in where and "runpy" not in where, where
    assert lines[call - 1].startswith("Thread 0x"), where  # the learner's function is the outermost frame
    assert "Thread dtfkit-control" not in where and where.count("Thread 0x") == 1, where  # plumbing left out
    assert cluster.status()["worker:0"] == "killed"
    assert "killed" in str(info.value) or "were killed" in str(info.value)


def abort_here():
    os.abort()  # as TensorFlow does on a failed check: SIGABRT, no Python exception


def test_a_task_that_crashes_shows_where_it_was(cluster):
    with pytest.raises(TaskExited) as info:
        cluster.run(abort_here, on="worker:1", timeout=30)
    text = str(info.value)
    assert "worker:1 exited with code -6 while running abort_here" in text, text
    where = text.split("Where it was when it died (faulthandler's stacks):\n", 1)[1]
    assert "in abort_here\n    os.abort()" in where, where
    assert "Next step:" in where


def test_a_stopped_process_is_named_as_stopped_not_stuck(cluster):
    handle = cluster.submit(block_here, on="worker:0", timeout=1.0)
    os.kill(cluster.pids()["worker:0"], 19)  # SIGSTOP: it cannot answer the stack request
    with pytest.raises(TaskTimeout) as info:
        handle.result()
    assert info.value.stopped == ["worker:0"]
    assert "STOPPED" in info.value.stacks["worker:0"]


def test_a_task_dying_mid_call_is_named_with_its_exit_code_and_last_line(cluster, capsys):
    with pytest.raises(TaskExited) as info:
        cluster.run(exit_on_worker_1, timeout=30)
    text = str(info.value)
    assert "worker:1 exited with code 7 while running exit_on_worker_1" in text
    assert "[worker:1] worker:1 leaves without a word" in text
    assert "cluster.restart('worker:1')" in text
    assert cluster.status()["worker:1"] == "exited (7)"


def test_stop_interrupts_a_running_call(cluster):
    handle = cluster.submit(block_here, on="workers", grace=5)
    handle.stop()
    with pytest.raises(TaskFailed, match="KeyboardInterrupt"):
        handle.result()
    assert set(cluster.status().values()) == {"running"}


def test_every_line_printed_before_the_return_is_shown_by_that_call(cluster, capsys):
    assert cluster.run(print_then_return, args=(50,), on="worker:1") == {"worker:1": 50}
    out = capsys.readouterr().out
    assert out.count("[worker:1] worker:1 line") == 50 and "line 49" in out


def test_kill_mid_call_then_restart(cluster):
    handle = cluster.submit(block_here, on="worker:1")
    cluster.kill("worker", 1)
    with pytest.raises(TaskExited, match="worker:1 was killed while running block_here"):
        handle.result()
    cluster.restart()
    assert cluster.run(name) == {"worker:0": "worker:0", "worker:1": "worker:1"}


def test_a_task_named_twice_is_sent_the_call_once(cluster):
    view = cluster._rt.task_view("worker:0")
    assert cluster.run(name, on=["worker:0", "worker:0"]) == {"worker:0": "worker:0"}
    assert cluster._rt.task_view("worker:0").calls == view.calls + 1


def test_a_late_reply_to_a_finished_call_is_dropped(cluster):
    """A reply for a call nobody waits for any more (its id closed) goes nowhere."""
    events = cluster._rt.events
    proc = cluster._rt.tasks.task_process("worker:0")
    handle = cluster.submit(name, on="worker:0")
    assert handle.result() == {"worker:0": "worker:0"}
    events.apply_message(proc, protocol.Result(handle.call_id, cloudpickle.dumps("late")))
    assert handle.result() == {"worker:0": "worker:0"}
    assert handle._replies[proc.task].value == cloudpickle.dumps("worker:0")

    class Inbox:  # while a call is open, the same message is routed: the check above can fail
        def __init__(self):
            self.got = []

        def deliver(self, task, message):
            self.got.append((task, message))

    inbox = Inbox()
    call_id = events.open_call(inbox)
    events.apply_message(proc, protocol.Result(call_id, b"early"))
    events.close_call(call_id)
    events.apply_message(proc, protocol.Result(call_id, b"late"))
    assert inbox.got == [(proc.task, protocol.Result(call_id, b"early"))]
    assert cluster.run(name, on="worker:0") == {"worker:0": "worker:0"}


def test_a_client_is_a_fresh_process_ended_after_its_call(cluster):
    before = set(cluster.pids().values())
    result = cluster.run(lambda: (dtfkit.this_task().name, os.getpid()), on="client")
    ((task, pid),) = result.values()
    assert task.startswith("client:") and pid not in before
    assert wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie", 10)


def test_a_second_waiting_thread_is_refused(cluster, tmp_path):
    gate = tmp_path / "gate"
    handle = cluster.submit(wait_for_file, args=(str(gate),), on="worker:0")
    waiter = threading.Thread(target=handle.result, daemon=True)
    waiter.start()
    try:
        assert wait_until(lambda: cluster._rt.events.waiting_for is not None, 10)
        with pytest.raises(DtfkitError, match="already waiting for wait_for_file"):
            cluster.run(name, on="worker:1")
    finally:
        gate.write_text("go")
        waiter.join(10)
    assert not waiter.is_alive()


def test_echo_sends_the_output_where_asked(cluster, capsys):
    seen: list[tuple[str, str]] = []
    cluster.echo = lambda task, line: seen.append((task, line))
    try:
        cluster.run(print_then_return, args=(2,), on="worker:0")
    finally:
        cluster.echo = None
    assert seen == [("worker:0", "worker:0 line 0"), ("worker:0", "worker:0 line 1")]
    assert "line" not in capsys.readouterr().out
    with pytest.raises(DtfkitError, match="echo must be a function"):
        cluster.echo = "stdout"


def test_a_task_counts_as_ready_only_once_what_it_printed_while_starting_is_in():
    # The task prints in `setup`, just before it says Ready, on another channel than its
    # output: the cluster is up only once those lines are in the log book (and its file).
    def announce():  # many lines: the reader of the output is still busy with them when Ready comes
        pid = __import__("os").getpid()
        for k in range(3000):
            print(f"setting up {k}")
        print("set up in pid", pid, flush=True)

    with dtfkit.LocalCluster(
        workers=2, launcher=FakeLauncher(), setup=announce, progress=False, name=None
    ) as cluster:
        for task, pid in cluster.pids().items():
            assert f"set up in pid {pid}" in str(cluster.logs(task, everything=True)), task
            log_file = os.path.join(cluster.log_dir, task.replace(":", "-") + ".log")
            with open(log_file) as f:
                assert f"set up in pid {pid}\n" in f.read(), task


def test_a_task_that_printed_nothing_has_an_empty_log_file():
    with dtfkit.LocalCluster(ps=1, workers=1, launcher=FakeLauncher(), progress=False, name=None) as cluster:
        files = {
            task: os.path.join(cluster.log_dir, task.replace(":", "-") + ".log") for task in cluster.tasks
        }
        assert {task: os.path.getsize(path) for task, path in files.items()} == {"ps:0": 0, "worker:0": 0}


def test_a_task_process_moves_through_its_lifecycle_and_refuses_other_moves():
    """Ready needs both halves, in either order; a call moves it to busy and back; a move its
    lifecycle does not allow raises; a repeated start-up message changes nothing."""
    from dtfkit.engine.launchers.contract import TaskHandle
    from dtfkit.engine.owner.process import Lifecycle, LifecycleError, TaskProcess
    from dtfkit.engine.wire.layout import TaskId

    class Alive(TaskHandle):
        identity: dict[str, int] = {}
        pid = 1

        def poll(self):
            return None

        def wait(self, timeout=None):
            return None

        def kill(self):
            pass

        def read_line(self):
            return b""

        def close_output(self):
            pass

    def said_ready(proc):
        proc.said_ready((("interpreter", 1.0, 0.5),))

    def startup_output_in(proc):
        proc.startup_output_in()

    for halves in ((said_ready, startup_output_in), (startup_output_in, said_ready)):
        proc = TaskProcess(TaskId("worker", 0), 1, Alive(), None)
        for half in halves:
            assert not proc.ready and proc.status == "starting"
            half(proc)
        assert proc.ready and proc.state is Lifecycle.IDLE and proc.status == "running"
    proc.startup_output_in()  # a stray start-up mark after it: nothing moves
    assert proc.state is Lifecycle.IDLE
    proc.call_started(7)
    assert (proc.busy_with, proc.calls, proc.status) == (7, 1, "busy")
    with pytest.raises(LifecycleError, match="worker:0 .generation 1. cannot go from BUSY to BUSY"):
        proc.call_started(8)
    proc.call_ended()
    assert (proc.busy_with, proc.state, proc.view().status) == (None, Lifecycle.IDLE, "running")
    failed = TaskProcess(TaskId("worker", 1), 2, Alive(), None)
    failed.start_failed("bind", "Traceback ...")
    assert (failed.state, failed.start_failed_at, failed.status) == (
        Lifecycle.START_FAILED,
        "bind",
        "starting",
    )
    with pytest.raises(LifecycleError):
        failed.call_started(9)
