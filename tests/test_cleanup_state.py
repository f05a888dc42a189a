"""``python -m dtfkit cleanup`` / ``dtfkit.cleanup()`` on hand-made state files.

A real crashed kernel cannot be reproduced reliably (its tasks die with it), so the
state is built by hand: plain Python processes stand in for tasks, and the state
file is written by a short-lived subprocess that then exits (a dead owner).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil
import pytest
from conftest import subprocess_env, wait_gone

from dtfkit.engine.platform import state

pytestmark = pytest.mark.timeout(120)


def _idle_process(cluster_id: str | None) -> subprocess.Popen:
    """A child process that waits for its stdin to close, optionally claiming a cluster."""
    env = subprocess_env()
    env.pop(state.CLUSTER_ENV, None)
    if cluster_id is not None:
        env[state.CLUSTER_ENV] = cluster_id
    return subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, env=env
    )


# The owner of a crashed notebook: starts the fake tasks (idle processes), writes the
# state file naming some of them, prints their pids and dies. Its tasks are orphans.
OWNER = r"""
import json, os, subprocess, sys
from dtfkit.engine.platform import state

path, cluster_id, layout = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
pids, listed = {}, []
for name, (env_cluster, in_state, shift) in layout.items():
    env = dict(os.environ)
    env.pop(state.CLUSTER_ENV, None)
    if env_cluster is not None:
        env[state.CLUSTER_ENV] = env_cluster
    p = subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait()"],
                         env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    pids[name] = p.pid
    if in_state:
        ident = state.process_identity(p.pid)
        ident["started"] += shift
        listed.append(ident)
state.write_state(path, cluster_id, listed, "fake cluster")
print(json.dumps(pids), flush=True)
"""


def _crashed_owner(path: str, cluster_id: str, layout: dict) -> tuple[int, dict[str, psutil.Process]]:
    out = subprocess.run(
        [sys.executable, "-c", OWNER, path, cluster_id, json.dumps(layout)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    pids = json.loads(out.stdout.strip().splitlines()[-1])
    procs = {name: psutil.Process(pid) for name, pid in pids.items()}
    with open(os.path.join(path, state.STATE_FILE)) as f:
        owner = json.load(f)["owner"]
    assert not state.owner_alive({"owner": owner})
    return owner["pid"], procs


def _end(procs) -> None:
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    wait_gone(procs, 10)


def test_cleanup_kills_only_orphaned_processes_of_the_cluster(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv(state.HOME_ENV, str(home))

    dead_id = "1-deadbeef"  # the folder's name; the owner recorded in state.json is what counts
    live_id = f"{os.getpid()}-1ea7e000"
    dead_dir, live_dir = home / dead_id, home / live_id
    dead_dir.mkdir()
    live_dir.mkdir()

    layout = {
        "victim": [dead_id, True, 0.0],  # listed, env names the cluster: killed
        "straggler": [dead_id, False, 0.0],  # started after the last state write: killed
        "stranger": [None, True, 0.0],  # listed pid, env does not name it: spared
        "reused": ["other-cluster", True, -1000.0],  # listed pid, other start time: spared
    }
    owner_pid, fake = _crashed_owner(str(dead_dir), dead_id, layout)
    live_task = _idle_process(live_id)  # its owner (this test) is alive: spared
    try:
        state.write_state(str(live_dir), live_id, [state.process_identity(live_task.pid)], "live")
        finished_dir = home / f"{owner_pid}-0ff1ce00"  # closed cleanly, owner gone: removed
        (finished_dir / "logs").mkdir(parents=True)

        dry = state.cleanup(dry_run=True)
        assert sorted(p for _, p in dry.killed) == sorted([fake["victim"].pid, fake["straggler"].pid])
        assert dry.live_clusters == [live_id]
        assert dead_dir.exists() and finished_dir.exists()

        out = subprocess.run(
            [sys.executable, "-m", "dtfkit", "cleanup"],
            env=subprocess_env(**{state.HOME_ENV: str(home)}),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert "killed 2 leftover process(es)" in out.stdout
        assert live_id in out.stdout

        assert wait_gone([fake["victim"], fake["straggler"]], 10) == []
        for name in ("stranger", "reused"):
            assert fake[name].is_running(), f"cleanup killed {name}, which is not a process of the cluster"
        assert live_task.poll() is None, "cleanup killed a task of a cluster whose owner is alive"
        assert not dead_dir.exists()
        assert not finished_dir.exists()
        assert (live_dir / state.STATE_FILE).exists()
    finally:
        _end(fake.values())
        live_task.stdin.close()
        live_task.wait(timeout=10)


def test_cleanup_keep_logs_keeps_the_folder(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv(state.HOME_ENV, str(home))
    cluster_id = "2-abcdef12"
    folder = home / cluster_id
    (folder / "logs").mkdir(parents=True)
    (folder / "logs" / "worker-0.log").write_text("hello\n")
    _, fake = _crashed_owner(str(folder), cluster_id, {"task": [cluster_id, True, 0.0]})
    try:
        report = state.cleanup(keep_logs=True)
        assert report.killed == [(cluster_id, fake["task"].pid)]
        assert wait_gone([fake["task"]], 10) == []
        assert (folder / "logs" / "worker-0.log").read_text() == "hello\n"
        assert not (folder / state.STATE_FILE).exists()
    finally:
        _end(fake.values())
