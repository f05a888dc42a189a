"""Per-student memory, process and CPU accounting with Linux cgroups (runs as root, in the hub or the bench).

Each student's single-user server, and everything it starts (kernels, the task zygote, TensorFlow tasks), lives in
one group per controller: ``memory`` caps the student's memory (a student who fills it is killed by the
kernel's OOM killer inside that group only), ``pids`` caps their processes (a fork loop stops at the cap),
``cpuacct`` counts their CPU seconds, including processes that have already ended. cgroup v1 (one folder per
controller) and v2 (one folder, with ``memory.max`` and ``pids.max``) are both handled; where neither can be
written, :func:`available` says why and nothing is capped.

Example::

    group = StudentGroup("student1", memory_bytes=3 * 2**30, max_pids=4096)
    group.create()
    group.add(pid)                 # the server's pid, before it execs (see spawner.LimitedSpawner)
    group.usage().peak_bytes       # the most memory the student held
    group.remove()                 # kills what is left inside, then removes the folders
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PARENT = "dtfkit-hub"  # every student's groups sit under this folder, so one look finds them all
V1_CONTROLLERS = ("memory", "pids", "cpuacct")


def group_folders(name_prefix: str) -> list[Path]:
    """Every student group folder whose name starts with ``name_prefix``, in any controller, v1 or v2."""
    return sorted(
        p
        for p in [*ROOT.glob(f"{PARENT}/{name_prefix}*"), *ROOT.glob(f"*/{PARENT}/{name_prefix}*")]
        if p.is_dir()
    )


def kill_until_gone(alive: Callable[[], list[int]], what: str, timeout: float = 10.0) -> list[int]:
    """SIGKILL the pids ``alive()`` lists until it lists none (bounded); returns the pids it signalled."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout
    while left := alive():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} still holds {left} after {timeout} s of SIGKILL")
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.05)  # poll: the pids leave /proc and cgroup.procs only once their parents reap them
    return killed


@dataclass(frozen=True)
class Usage:
    """What one student's group has used so far."""

    memory_bytes: int  # now
    peak_bytes: int  # the most since the group was made (v1: max_usage_in_bytes; v2: memory.peak)
    cpu_seconds: float  # user + system, every process that ever ran in the group
    oom_kills: int  # processes the memory cap ended
    pids: int  # processes now
    pids_refused: int  # forks the pids cap refused


def _v2_root() -> Path | None:
    for candidate in (ROOT, ROOT / "unified"):
        controllers = candidate / "cgroup.controllers"
        if controllers.exists() and {"memory", "pids"} <= set(controllers.read_text().split()):
            return candidate
    return None


def _v1_ready() -> bool:
    return all((ROOT / c / "cgroup.procs").exists() for c in V1_CONTROLLERS)


def available() -> tuple[bool, str]:
    """(True, "v1" or "v2") when per-student groups can be made here, else (False, why)."""
    if os.geteuid() != 0:
        return False, "making cgroups needs root (run the hub and the bench as root)"
    if _v1_ready():
        probe = ROOT / "memory" / f"{PARENT}-probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
            return True, "v1"
        except OSError as err:
            return False, f"cannot make a memory cgroup under {ROOT / 'memory'}: {err}"
    v2 = _v2_root()
    if v2 is not None:
        return True, "v2"
    return False, f"no writable cgroup v1 memory/pids/cpuacct or v2 memory+pids controllers under {ROOT}"


class StudentGroup:
    """The cgroups of one student (see the module's docstring)."""

    def __init__(self, name: str, *, memory_bytes: int | None, max_pids: int | None) -> None:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"StudentGroup: {name!r} is not a usable group name (a user name, no '/')")
        self.name = name
        self.memory_bytes = memory_bytes
        self.max_pids = max_pids
        ok, kind = available()
        self.kind = kind if ok else None
        self.why_not = None if ok else kind

    # -------------------------------------------------------------- folders
    def folders(self) -> list[Path]:
        if self.kind == "v1":
            return [ROOT / c / PARENT / self.name for c in V1_CONTROLLERS]
        if self.kind == "v2":
            root = _v2_root()
            assert root is not None
            return [root / PARENT / self.name]
        return []

    def _file(self, controller: str, v1_name: str, v2_name: str) -> Path | None:
        if self.kind == "v1":
            return ROOT / controller / PARENT / self.name / v1_name
        if self.kind == "v2":
            return self.folders()[0] / v2_name
        return None

    def memory_limit_file(self) -> Path | None:
        """The file that holds the memory cap (v1 ``memory.limit_in_bytes``, v2 ``memory.max``)."""
        return self._file("memory", "memory.limit_in_bytes", "memory.max")

    def create(self) -> None:
        """Make the folders and write the caps; a no-op where cgroups are not available."""
        if self.kind == "v2":
            root = _v2_root()
            assert root is not None
            (root / PARENT).mkdir(exist_ok=True)
            (root / PARENT / "cgroup.subtree_control").write_text("+memory +pids +cpu\n")
        for folder in self.folders():
            folder.mkdir(parents=True, exist_ok=True)
        if self.memory_bytes is not None:
            limit = self._file("memory", "memory.limit_in_bytes", "memory.max")
            if limit is not None:
                limit.write_text(str(self.memory_bytes))
        if self.max_pids is not None:
            cap = self._file("pids", "pids.max", "pids.max")
            if cap is not None:
                cap.write_text(str(self.max_pids))

    def add(self, pid: int) -> None:
        """Move ``pid`` (and so everything it will start) into the student's groups."""
        for folder in self.folders():
            (folder / "cgroup.procs").write_text(str(pid))

    # -------------------------------------------------------------- reading
    def pids(self) -> list[int]:
        folders = self.folders()
        if not folders or not (folders[0] / "cgroup.procs").exists():
            return []
        return [int(p) for p in (folders[0] / "cgroup.procs").read_text().split()]

    def usage(self) -> Usage:
        def read(controller: str, v1_name: str, v2_name: str, default: str = "0") -> str:
            path = self._file(controller, v1_name, v2_name)
            try:
                return path.read_text() if path is not None else default
            except OSError:
                return default

        def field(text: str, key: str) -> int:
            for line in text.splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0] == key:
                    return int(parts[1])
            return 0

        if self.kind == "v2":
            cpu = field(read("cpu", "", "cpu.stat"), "usage_usec") / 1e6
            oom = field(read("memory", "", "memory.events"), "oom_kill")
            refused = field(read("pids", "", "pids.events"), "max")
        else:
            cpu = int(read("cpuacct", "cpuacct.usage", "") or 0) / 1e9
            oom = field(read("memory", "memory.oom_control", ""), "oom_kill")
            refused = field(read("pids", "pids.events", ""), "max")
        return Usage(
            memory_bytes=int(read("memory", "memory.usage_in_bytes", "memory.current") or 0),
            peak_bytes=int(read("memory", "memory.max_usage_in_bytes", "memory.peak") or 0),
            cpu_seconds=cpu,
            oom_kills=oom,
            pids=int(read("pids", "pids.current", "pids.current") or 0),
            pids_refused=refused,
        )

    # -------------------------------------------------------------- ending
    def kill_all(self, timeout: float = 10.0) -> list[int]:
        """SIGKILL every process still in the group, waiting (bounded) until the group is empty."""
        return kill_until_gone(self.pids, f"the cgroup of {self.name}", timeout)

    def remove(self) -> list[int]:
        """End what is left in the group (returns those pids), then remove its folders."""
        killed = self.kill_all() if self.kind else []
        for folder in self.folders():
            if folder.exists():
                folder.rmdir()
        return killed
