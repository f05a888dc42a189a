"""Where clusters keep their files, and how leftovers of a crashed kernel are reaped.

Each cluster has a folder ``<base>/<cluster id>/`` holding its control socket, its
logs and, while it is open, ``state.json``: the owner's pid and the pid and start
time of every process it started. ``cleanup()`` (``python -m dtfkit cleanup``)
kills the processes of clusters whose owner is gone, and only those: a pid counts
only if its start time matches and its environment names the cluster.

Example::

    >>> from dtfkit.engine.platform import state
    >>> report = state.cleanup(dry_run=True)   # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psutil

from dtfkit.errors import DtfkitError

HOME_ENV = "DTFKIT_HOME"
CLUSTER_ENV = "DTFKIT_CLUSTER"
BASE_ENV = "DTFKIT_BASE"  # every task's environment names the base folder its cluster lives in
STATE_FILE = "state.json"
KEEP_CLOSED_FOLDERS = 20  # log folders of closed clusters kept (the newest); older ones go
# A Unix socket path holds at most 107 bytes; the longest one dtfkit makes is
# "<base>/<pid>-<8 hex>/control.sock" (a pid has at most 7 digits on Linux).
SOCKET_PATH_MAX = 107
_LONGEST_TAIL = len("/1234567-01234567/control.sock")


class UnsafeHomeError(DtfkitError):
    """The folder dtfkit keeps its clusters in is not a private folder of this user."""


def _default_base() -> str:
    """``$XDG_RUNTIME_DIR/dtfkit`` when that folder is this user's and private, else ``/tmp/dtfkit-<uid>``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        try:
            st = os.lstat(runtime)
        except OSError:
            st = None
        if (
            st is not None
            and stat.S_ISDIR(st.st_mode)
            and st.st_uid == os.getuid()
            and not st.st_mode & 0o077
            and len(runtime) + len("/dtfkit") + _LONGEST_TAIL <= SOCKET_PATH_MAX
        ):
            return os.path.join(runtime, "dtfkit")
    return os.path.join(tempfile.gettempdir(), f"dtfkit-{os.getuid()}")


def base_dir() -> str:
    """The folder that holds every cluster's files, checked to be this user's own.

    ``$DTFKIT_HOME`` if set, else ``$XDG_RUNTIME_DIR/dtfkit``, else ``/tmp/dtfkit-<uid>``.
    It is created private (0700); an existing one must be a real folder (not a
    symlink) owned by this user, and is made private if it is not. Anything else is
    refused: on a shared machine another user could have created it to make this
    user's programs write through their links or trust their state files.
    """
    explicit = os.environ.get(HOME_ENV)
    base = os.path.abspath(explicit) if explicit else _default_base()
    source = f"{HOME_ENV}={explicit}" if explicit else "the default folder"
    if len(base) + _LONGEST_TAIL > SOCKET_PATH_MAX:
        raise UnsafeHomeError(
            f"{source}: the path {base} is too long ({len(base)} bytes): the control socket inside it "
            f"would pass the {SOCKET_PATH_MAX}-byte limit of Unix socket paths. Next step: set "
            f"{HOME_ENV} to a short folder such as /tmp/dtfkit-{os.getuid()}."
        )
    parent = os.path.dirname(base)
    if explicit:
        os.makedirs(parent, mode=0o700, exist_ok=True)
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise UnsafeHomeError(
            f"cannot create the dtfkit folder {base} ({source}): {exc}. "
            f"Next step: set {HOME_ENV} to a folder you can write."
        ) from None
    _verify_private(base, source)
    return base


def _verify_private(base: str, source: str) -> None:
    fix = f"Next step: remove it if it is yours, or set {HOME_ENV} to a private folder of your own."
    st = os.lstat(base)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeHomeError(
            f"the dtfkit folder {base} ({source}) is a symbolic link: refused, as it could lead "
            f"this user's files anywhere. {fix}"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeHomeError(f"the dtfkit folder {base} ({source}) exists but is not a folder. {fix}")
    if st.st_uid != os.getuid():
        raise UnsafeHomeError(
            f"the dtfkit folder {base} ({source}) belongs to uid {st.st_uid}, not to you (uid "
            f"{os.getuid()}): refused, as its owner could make your clusters write through their "
            f"links or make 'dtfkit cleanup' kill your tasks. {fix}"
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(base, 0o700)  # ours: make it private (what others put in it is ignored)


def new_cluster_dir() -> tuple[str, str]:
    """A fresh, private folder for one cluster: (cluster id, path)."""
    base = base_dir()
    prune_closed(base)
    cluster_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    path = os.path.join(base, cluster_id)
    os.mkdir(path, 0o700)  # fails rather than reuse anything already there
    # A state file from the start: a folder without one counts as closed, and another
    # process of ours pruning closed folders must not take this one while it starts.
    write_state(path, cluster_id, [], "starting")
    return cluster_id, path


# A cluster's (or a zygote's) folder is named by its id, <owner pid>-<8 hex digits> (new_cluster_dir).
_CLUSTER_ID = re.compile(r"[0-9]+-[0-9a-z]{8}")


def _own_folders(base: str) -> Iterator[tuple[str, str]]:
    """``(name, path)`` of each real folder (not a link) in ``base`` that this user owns and that is
    named as dtfkit names a cluster's folder, by name: whatever else lives there is not dtfkit's to prune."""
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return
    uid = os.getuid()
    for name in names:
        if not _CLUSTER_ID.fullmatch(name):
            continue
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
            yield name, path


def prune_closed(base: str, keep: int = KEEP_CLOSED_FOLDERS) -> list[str]:
    """Remove the folders (logs) of closed clusters beyond the newest ``keep``; their names.

    A closed cluster's folder has no state file; the newest are kept so that recent
    logs stay readable, the rest would otherwise pile up until ``cleanup``.
    """
    closed = []
    for name, path in _own_folders(base):
        if os.path.lexists(os.path.join(path, STATE_FILE)):
            continue  # open (or its owner crashed: cleanup's business)
        try:
            closed.append((os.lstat(path).st_mtime, name))
        except OSError:
            continue
    closed.sort(reverse=True)
    removed = []
    for _, name in closed[keep:]:
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        removed.append(name)
    return removed


#: A process's identity as the state file keeps it (JSON): ``{"pid": ..., "started": ...}``,
#: and whatever a launcher adds (``"mark"``: the cluster id in its environment, when not the cluster's).
ProcessIdentity = dict[str, Any]


def process_identity(pid: int) -> ProcessIdentity:
    """Pid plus start time: together they name one process even after pid reuse."""
    try:
        return {"pid": pid, "started": psutil.Process(pid).create_time()}
    except psutil.Error:
        return {"pid": pid, "started": None}


def is_stopped(pid: int) -> bool:
    """True when process ``pid`` is stopped (SIGSTOP, Ctrl-Z, a tracer) and so cannot answer."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.Error:
        return False


def write_state(path: str, cluster_id: str, processes: list[ProcessIdentity], description: str) -> None:
    owner = process_identity(os.getpid())
    data = {
        "cluster": cluster_id,
        "owner": owner,
        "description": description,
        "processes": processes,
        "written": time.time(),
    }
    # A fresh name, created exclusively and never through a link; rename() replaces
    # a link at state.json itself rather than the file it points to.
    tmp = os.path.join(path, f"{STATE_FILE}.{os.getpid()}-{threading.get_ident()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
        fd = os.open(tmp, flags, 0o600)
    except FileExistsError:
        os.unlink(tmp)  # a leftover of ours (same pid and thread), or a planted link
        fd = os.open(tmp, flags, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, os.path.join(path, STATE_FILE))


def read_state(path: str) -> dict[str, Any] | None:
    """A cluster folder's state, or None unless it is a plain file owned by this user."""
    try:
        fd = os.open(os.path.join(path, STATE_FILE), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return None
        try:
            data = json.load(f)
        except ValueError:
            return None
    return data if isinstance(data, dict) else None


def remove_state(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(path, STATE_FILE))


def _same_process(ident: ProcessIdentity) -> psutil.Process | None:
    try:
        proc = psutil.Process(ident["pid"])
        if ident.get("started") is not None and abs(proc.create_time() - ident["started"]) > 0.01:
            return None
        return proc
    except psutil.Error:
        return None


def _belongs_to(proc: psutil.Process, cluster_id: str) -> bool:
    """True for a process of this user whose environment names ``cluster_id``."""
    try:
        return bool(proc.uids().real == os.getuid() and proc.environ().get(CLUSTER_ENV) == cluster_id)
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


def owner_alive(data: dict[str, Any]) -> bool:
    return _same_process(data.get("owner", {"pid": -1})) is not None


def _marked_processes() -> dict[str, list[psutil.Process]]:
    """This user's live processes whose environment names a cluster: {cluster id: processes}.

    Children inherit the environment, so this finds what a task started in a session
    of its own too (out of reach of the task's process group).
    """
    me, uid = os.getpid(), os.getuid()
    found: dict[str, list[psutil.Process]] = {}
    for proc in psutil.process_iter():
        try:
            if proc.pid == me or proc.uids().real != uid:
                continue
            env = proc.environ()
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.Error, OSError):
            continue
        cid = env.get(CLUSTER_ENV)
        if cid:
            found.setdefault(cid, []).append(proc)
    return found


def end_marked_processes(cluster_id: str, timeout: float = 5.0) -> list[int]:
    """Kill every process of this user whose environment names ``cluster_id``; their pids."""
    procs = _marked_processes().get(cluster_id, [])
    for proc in procs:
        _kill_tree(proc, wait=False)
    if procs:
        psutil.wait_procs(procs, timeout=timeout)
    return [p.pid for p in procs]


def _owner_pid_alive(cluster_id: str) -> bool:
    owner_pid = cluster_id.split("-")[0]
    return owner_pid.isdigit() and psutil.pid_exists(int(owner_pid))


def cleanup(*, everything: bool = False, dry_run: bool = False, keep_logs: bool = False) -> CleanupReport:
    """Kill the processes of clusters whose owner died; remove finished clusters' folders.

    ``everything=True`` also ends clusters whose owner is still running. Only what
    belongs to this user is read or touched: folders and state files owned by
    someone else, and links, are skipped.
    """
    report = CleanupReport()
    base = base_dir()
    orphaned: set[str] = set()
    known: set[str] = set()
    marked = _marked_processes()
    for cluster_id, path in _own_folders(base):
        known.add(cluster_id)
        data = read_state(path)
        if data is None:
            # Closed cleanly (or never got going): only logs are left, and perhaps
            # processes a task started in a session of its own.
            if _owner_pid_alive(cluster_id):
                continue
            orphaned.add(cluster_id)
            if not keep_logs and not dry_run:
                shutil.rmtree(path, ignore_errors=True)
                report.removed_dirs.append(cluster_id)
            continue
        if owner_alive(data) and not everything:
            report.live_clusters.append(cluster_id)
            continue
        orphaned.add(cluster_id)
        for ident in data.get("processes", []):
            if ident.get("remote"):
                # A task on another machine (a Ray node): its pid means nothing here. On a
                # simulated Ray cluster it is a local process, which the sweep below finds.
                continue
            proc = _same_process(ident)
            # "mark": a forked task whose /proc/PID/environ still names its zygote (see zygotes.py).
            if proc is not None and _belongs_to(proc, ident.get("mark") or cluster_id):
                report.killed.append((cluster_id, proc.pid))
                if not dry_run:
                    _kill_tree(proc)
        if not dry_run:
            if keep_logs:
                os.remove(os.path.join(path, STATE_FILE))
            else:
                shutil.rmtree(path, ignore_errors=True)
                report.removed_dirs.append(cluster_id)
    # Processes not (yet) in a state file: started after its last write, or by a task
    # in a session of its own; also those of clusters whose folder an earlier cleanup
    # removed, when their environment says they were started from this base folder.
    for cid, procs in marked.items():
        forgotten = cid not in known and not _owner_pid_alive(cid)
        for proc in procs:
            if (cid, proc.pid) in report.killed:
                continue
            if cid in orphaned or (forgotten and _env_of(proc).get(BASE_ENV) == base):
                report.killed.append((cid, proc.pid))
                if not dry_run:
                    _kill_tree(proc)
    return report


def _env_of(proc: psutil.Process) -> dict[str, str]:
    try:
        env: dict[str, str] = proc.environ()  # psutil ships no types
    except (psutil.Error, OSError):
        return {}
    return env


def _kill_tree(proc: psutil.Process, wait: bool = True) -> None:
    try:
        family = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        family = [proc]
    for p in family:
        with contextlib.suppress(psutil.Error):
            p.kill()
    if wait:
        psutil.wait_procs(family, timeout=5)
