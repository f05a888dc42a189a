"""The task zygote: tasks forked from a process that imported TensorFlow once (issue 39).

Fast: which variables choose a zygote, and the zygote's refusal to fork beside a thread it cannot
name. Slow: 200 tasks forked in a row (each up within its bound, beside CPU burners in
tests/under_load.py), a task's environment and randomness its own, a zygote per import-time
environment, the fall-back to fresh interpreters, and nothing left when the owner is SIGKILLed.
"""

from __future__ import annotations

import json
import os
import signal

import psutil
import pytest
from conftest import LineReader, start_script, wait_gone, zygote_pids

import dtfkit
from dtfkit.engine.launchers import zygotes


def test_only_variables_read_at_import_choose_the_zygote():
    base = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONHASHSEED": "0", "HOME": "/home/me"}
    key = zygotes.import_key(base)
    assert key == (("PYTHONHASHSEED", "0"), ("TF_CPP_MIN_LOG_LEVEL", "2"))
    # Read later, in the task: the same zygote serves.
    for later in (
        {"CUDA_VISIBLE_DEVICES": "0"},
        {"TF_CONFIG": "{}"},
        {"PYTHONPATH": "/x"},
        {"DTFKIT_CLUSTER": "1-a"},
    ):
        assert zygotes.import_key({**base, **later}) == key, later
    # Read at import: another zygote.
    for early in (
        {"TF_CPP_MIN_LOG_LEVEL": "0"},
        {"TF_ENABLE_ONEDNN_OPTS": "0"},
        {"OPENBLAS_NUM_THREADS": "1"},
    ):
        assert zygotes.import_key({**base, **early}) != key, early


KNOWN_THREADS = """
import json, threading
from dtfkit.engine.task import zygote
before = zygote.known_threads()
stop = threading.Event()
threading.Thread(target=stop.wait, name="a-helper-thread", daemon=True).start()
print("THREADS " + json.dumps([before, zygote.known_threads()]), flush=True)
"""


def test_the_zygote_refuses_to_fork_beside_a_thread_it_cannot_name(tmp_path):
    """In a fresh interpreter that imported what the zygote imports (NumPy; no TensorFlow here):
    every thread is named, and a thread started after is a reason not to fork."""
    proc = start_script(tmp_path, KNOWN_THREADS)
    try:
        line = LineReader(proc).expect(r"^THREADS ", timeout=60).string
    finally:
        proc.wait(30)
    (names, why), (_, why_after) = json.loads(line[len("THREADS ") :])
    assert why == "" and names[0].startswith("main ("), names
    assert all(n.startswith(("main (", "OpenBLAS worker (")) for n in names), names
    assert "a-helper-thread" in why_after, why_after


def test_off_means_fresh_interpreters(monkeypatch):
    monkeypatch.setenv(zygotes.ZYGOTE_ENV, "0")
    assert not zygotes.enabled()
    handle, why = zygotes.fork_task({}, None)
    assert handle is None and why == "DTFKIT_ZYGOTE=0"


def _parent_of(pid: int) -> int:
    return psutil.Process(pid).ppid()


@pytest.mark.slow
@pytest.mark.timing
def test_200_tasks_forked_in_a_row_each_come_up():
    """40 clusters of 1 ps + 4 workers, one after another: every task forked, up within its bound
    (the start's timeout), answering a call; no hang, no crash, nothing left."""
    seen: set[int] = set()
    for round_ in range(40):
        with dtfkit.LocalCluster(ps=1, workers=4, progress=False, start_timeout=120, name=None) as cluster:
            assert cluster.start_note.startswith("forked 5 of 5 "), (round_, cluster.start_note)
            pids = cluster.pids()
            answers = cluster.run(lambda: (os.getpid(), os.getppid()))
            zygote = {z.popen.pid for z in zygotes.live()}
            for task, (pid, parent) in answers.items():
                assert pid == pids[task] and parent in zygote, (round_, task, pid, parent, zygote)
            assert all(cluster.status()[t] == "running" for t in cluster.tasks), cluster.status()
            seen.update(pid for name, pid in pids.items() if name != "netns")
        assert wait_gone([psutil.Process(p) for p in seen if psutil.pid_exists(p)], 10) == []
    assert len(seen) == 200


@pytest.mark.slow
def test_a_forked_task_has_its_own_environment_folder_and_randomness(tmp_path):
    env = {"CUDA_VISIBLE_DEVICES": "", "MY_SETTING": "42"}
    with dtfkit.LocalCluster(workers=2, env=env, progress=False, name=None) as cluster:
        got = cluster.run(
            lambda: (
                os.environ.get("MY_SETTING"),
                os.environ["DTFKIT_CLUSTER"],
                psutil.Process().environ().get("DTFKIT_CLUSTER"),  # as cleanup reads it
                __import__("numpy").random.randint(2**31),
                __import__("random").getrandbits(31),
            )
        )
        assert cluster.start_note.startswith("forked 2 of 2 "), cluster.start_note
    for setting, cluster_env, proc_env, _, _ in got.values():
        assert setting == "42" and cluster_env == proc_env == cluster.id
    assert got["worker:0"][3:] != got["worker:1"][3:], got  # reseeded after the fork


@pytest.mark.slow
def test_a_variable_read_at_import_gets_a_zygote_of_its_own():
    with dtfkit.LocalCluster(workers=1, progress=False, name=None) as first:
        default = first.run(os.getppid)["worker:0"]
    with dtfkit.LocalCluster(
        workers=1, env={"TF_CPP_MIN_LOG_LEVEL": "1"}, progress=False, name=None
    ) as other:
        parent, level = other.run(lambda: (os.getppid(), os.environ["TF_CPP_MIN_LOG_LEVEL"]))["worker:0"]
    assert level == "1" and parent != default and {parent, default} <= zygote_pids()


@pytest.mark.slow
def test_without_the_zygote_tasks_are_fresh_interpreters(monkeypatch):
    monkeypatch.setenv(zygotes.ZYGOTE_ENV, "0")
    with dtfkit.LocalCluster(workers=1, progress=False, name=None) as cluster:
        parent = cluster.run(os.getppid)["worker:0"]
        note = cluster.start_note
    assert parent == os.getpid()
    assert note.startswith("forked 0 of 1 ") and "DTFKIT_ZYGOTE=0" in note, note


SIGKILLED_OWNER = """
import json, os, dtfkit
from dtfkit.engine.launchers import zygotes
cluster = dtfkit.LocalCluster(ps=1, workers=2, progress=False)
pids = [pid for name, pid in cluster.pids().items() if name != "netns"]
print("PIDS " + json.dumps({"tasks": pids, "zygotes": [z.popen.pid for z in zygotes.live()]}), flush=True)
import threading; threading.Event().wait()
"""


@pytest.mark.slow
def test_a_sigkilled_owner_leaves_no_zygote_and_no_task(tmp_path):
    proc = start_script(tmp_path, SIGKILLED_OWNER)
    try:
        line = LineReader(proc).expect(r"^PIDS ", timeout=180).string
        facts = json.loads(line[len("PIDS ") :])
        assert len(facts["tasks"]) == 3 and len(facts["zygotes"]) == 1, facts
        for pid in facts["tasks"]:
            assert _parent_of(pid) == facts["zygotes"][0]
        procs = [psutil.Process(p) for p in facts["tasks"] + facts["zygotes"]]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert wait_gone(procs, 15) == [], [p.pid for p in procs if p.is_running()]
