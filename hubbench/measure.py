"""Memory and CPU of a class while it runs (a sampling thread in the bench's process, reading ``/proc``).

PSS (proportional set size) is what a student really costs the machine: the TensorFlow libraries that every
task maps are shared, and PSS splits each shared page between the processes that map it, so the students'
PSS adds up to what they hold together. It is read from ``/proc/<pid>/smaps_rollup`` for every process of
each student's user, about twice a second; the peaks are kept. CPU seconds come from the students' cgroups
(every process that ever ran, ended ones too) where there are cgroups, else from the live processes' ``stat``.

Example::

    with Sampler({"dtfk1a2bs1": uid}) as sampler:
        ...                                  # the class runs
    sampler.peak_pss["dtfk1a2bs1"]           # bytes
    sampler.peak_machine_used                # bytes: MemTotal - MemAvailable at its highest
"""

from __future__ import annotations

import os
import threading


def pss_of(pid: int) -> int:
    """The process's PSS in bytes (0 if it has gone or cannot be read)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def threads_of(pid: int) -> int:
    """The process's thread count (what a pids cgroup counts), 0 if it has gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[17])
    except (OSError, IndexError, ValueError):
        return 0


def pids_by_uid(uids: set[int]) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {uid: [] for uid in uids}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                uid = os.stat(f"/proc/{entry}").st_uid
            except OSError:
                continue
            if uid in found:
                found[uid].append(int(entry))
    return found


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes."""
    values = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, rest = line.split(":", 1)
            values[key] = int(rest.split()[0]) * 1024
    return values


def machine_used() -> int:
    info = meminfo()
    return info["MemTotal"] - info["MemAvailable"]


class Sampler:
    """Samples every student's PSS and the machine's used memory until stopped (see the module's docstring)."""

    def __init__(self, uids: dict[str, int], interval: float = 0.5) -> None:
        self.uids = dict(uids)
        self.interval = interval
        self.peak_pss: dict[str, int] = {name: 0 for name in uids}
        self.peak_threads: dict[str, int] = {name: 0 for name in uids}  # what a pids cap counts
        self.peak_class_pss = 0  # the students' PSS summed, at its highest
        self.base_machine_used = machine_used()
        self.peak_machine_used = self.base_machine_used
        self.min_available = meminfo()["MemAvailable"]
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dtfkit-hubbench-sampler", daemon=True)

    def sample(self) -> None:
        by_uid = pids_by_uid(set(self.uids.values()))
        total = 0
        for name, uid in self.uids.items():
            pss = sum(pss_of(pid) for pid in by_uid[uid])
            self.peak_pss[name] = max(self.peak_pss[name], pss)
            self.peak_threads[name] = max(
                self.peak_threads[name], sum(threads_of(pid) for pid in by_uid[uid])
            )
            total += pss
        self.peak_class_pss = max(self.peak_class_pss, total)
        info = meminfo()
        self.peak_machine_used = max(self.peak_machine_used, info["MemTotal"] - info["MemAvailable"])
        self.min_available = min(self.min_available, info["MemAvailable"])
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> Sampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.sample()


def cpu_seconds_of(pids: list[int]) -> float:
    """User + system seconds of live processes (the fallback where there are no cgroups)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total
