"""Where clusters keep their files, and how leftovers of a crashed kernel are reaped.

Each cluster has a folder ``<base>/<cluster id>/`` holding its control socket, its
logs and, while it is open, ``state.json``: the owner's pid and the pid and start
time of every process it started. ``cleanup()`` (``python -m dtfkit cleanup``)
kills the processes of clusters whose owner is gone, and only those: a pid counts
only if its start time matches and its environment names the cluster.

Example::

    >>> from dtfkit import state
    >>> report = state.cleanup(dry_run=True)   # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field

import psutil

HOME_ENV = "DTFKIT_HOME"
CLUSTER_ENV = "DTFKIT_CLUSTER"
STATE_FILE = "state.json"


def base_dir() -> str:
    """The folder that holds every cluster's files (short: Unix socket paths are limited)."""
    base = os.environ.get(HOME_ENV) or os.path.join(tempfile.gettempdir(), f"dtfkit-{os.getuid()}")
    os.makedirs(base, mode=0o700, exist_ok=True)
    return base


def new_cluster_dir() -> tuple[str, str]:
    """A fresh, private folder for one cluster: (cluster id, path)."""
    cluster_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    path = os.path.join(base_dir(), cluster_id)
    os.makedirs(path, mode=0o700)
    return cluster_id, path


def process_identity(pid: int) -> dict:
    """Pid plus start time: together they name one process even after pid reuse."""
    try:
        return {"pid": pid, "started": psutil.Process(pid).create_time()}
    except psutil.Error:
        return {"pid": pid, "started": None}


def write_state(path: str, cluster_id: str, processes: list[dict], description: str) -> None:
    owner = process_identity(os.getpid())
    data = {
        "cluster": cluster_id,
        "owner": owner,
        "description": description,
        "processes": processes,
        "written": time.time(),
    }
    tmp = os.path.join(path, STATE_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, os.path.join(path, STATE_FILE))


def remove_state(path: str) -> None:
    try:
        os.remove(os.path.join(path, STATE_FILE))
    except FileNotFoundError:
        pass


def _same_process(ident: dict) -> psutil.Process | None:
    try:
        proc = psutil.Process(ident["pid"])
        if ident.get("started") is not None and abs(proc.create_time() - ident["started"]) > 0.01:
            return None
        return proc
    except psutil.Error:
        return None


def _belongs_to(proc: psutil.Process, cluster_id: str) -> bool:
    try:
        return proc.environ().get(CLUSTER_ENV) == cluster_id
    except psutil.Error:
        return False


@dataclass
class CleanupReport:
    """What ``cleanup()`` found and did."""

    killed: list[tuple[str, int]] = field(default_factory=list)
    live_clusters: list[str] = field(default_factory=list)
    removed_dirs: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"killed {len(self.killed)} leftover process(es)"]
        lines += [f"  cluster {c}: pid {p}" for c, p in self.killed]
        if self.live_clusters:
            lines.append(f"left {len(self.live_clusters)} cluster(s) alone: their owner is running")
            lines += [f"  {c}" for c in self.live_clusters]
        lines.append(f"removed {len(self.removed_dirs)} folder(s) of finished clusters")
        return "\n".join(lines)


def owner_alive(data: dict) -> bool:
    return _same_process(data.get("owner", {"pid": -1})) is not None


def cleanup(*, everything: bool = False, dry_run: bool = False, keep_logs: bool = False) -> CleanupReport:
    """Kill the processes of clusters whose owner died; remove finished clusters' folders.

    ``everything=True`` also ends clusters whose owner is still running.
    """
    report = CleanupReport()
    base = base_dir()
    orphaned: set[str] = set()
    for cluster_id in sorted(os.listdir(base)):
        path = os.path.join(base, cluster_id)
        state_path = os.path.join(path, STATE_FILE)
        if not os.path.isdir(path):
            continue
        if not os.path.exists(state_path):
            # Closed cleanly (or never got going): only logs are left.
            owner_pid = cluster_id.split("-")[0]
            if (
                not keep_logs
                and not dry_run
                and not (owner_pid.isdigit() and psutil.pid_exists(int(owner_pid)))
            ):
                shutil.rmtree(path, ignore_errors=True)
                report.removed_dirs.append(cluster_id)
            elif owner_pid.isdigit() and not psutil.pid_exists(int(owner_pid)):
                orphaned.add(cluster_id)
            continue
        try:
            with open(state_path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        if owner_alive(data) and not everything:
            report.live_clusters.append(cluster_id)
            continue
        orphaned.add(cluster_id)
        for ident in data.get("processes", []):
            proc = _same_process(ident)
            # "mark": a process adopted from a warm pool names the pool in its environment.
            if proc is not None and _belongs_to(proc, ident.get("mark") or cluster_id):
                report.killed.append((cluster_id, proc.pid))
                if not dry_run:
                    _kill_tree(proc)
        if not dry_run:
            if keep_logs:
                os.remove(state_path)
            else:
                shutil.rmtree(path, ignore_errors=True)
                report.removed_dirs.append(cluster_id)
    # Processes started but not yet written to a state file when the owner died.
    for proc in psutil.process_iter(["pid"]):
        try:
            cid = proc.environ().get(CLUSTER_ENV)
        except psutil.Error:
            continue
        if cid and cid in orphaned and (cid, proc.pid) not in report.killed:
            report.killed.append((cid, proc.pid))
            if not dry_run:
                _kill_tree(proc)
    return report


def _kill_tree(proc: psutil.Process) -> None:
    try:
        family = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        family = [proc]
    for p in family:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(family, timeout=5)
