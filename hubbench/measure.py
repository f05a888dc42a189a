"""Memory and CPU of a class while it runs (a sampling thread in the bench's process).

PSS (proportional set size) is what a student really costs the machine: the TensorFlow libraries that every
task maps are shared, and PSS splits each shared page between the processes that map it, so the students'
PSS adds up to what they hold together. psutil reads it (``memory_full_info().pss``, from
``/proc/<pid>/smaps_rollup``) for every process of each student's user, about twice a second; the peaks are
kept. CPU seconds come from the students' cgroups (every process that ever ran, ended ones too) where there
are cgroups, else from the live processes' CPU times (psutil).

Example::

    with Sampler({"dtfk1a2bs1": uid}) as sampler:
        ...                                  # the class runs
    sampler.peak_pss["dtfk1a2bs1"]           # bytes
    sampler.peak_machine_used                # bytes: MemTotal - MemAvailable at its highest
"""

from __future__ import annotations

import threading

import psutil


def pss_of(pid: int) -> int:
    """The process's PSS in bytes (0 if it has gone or cannot be read)."""
    try:
        return int(psutil.Process(pid).memory_full_info().pss)
    except (psutil.Error, OSError):
        return 0


def threads_of(pid: int) -> int:
    """The process's thread count (what a pids cgroup counts), 0 if it has gone."""
    try:
        return psutil.Process(pid).num_threads()
    except (psutil.Error, OSError):
        return 0


def pids_by_uid(uids: set[int]) -> dict[int, list[int]]:
    """The live processes of each real user id in ``uids``."""
    found: dict[int, list[int]] = {uid: [] for uid in uids}
    for process in psutil.process_iter(["uids"]):
        owner = process.info["uids"]
        if owner is not None and owner.real in found:
            found[owner.real].append(process.pid)
    return found


def meminfo() -> dict[str, int]:
    """The machine's memory in bytes, under /proc/meminfo's names (MemTotal, MemAvailable)."""
    memory = psutil.virtual_memory()
    return {"MemTotal": memory.total, "MemAvailable": memory.available}


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
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except (psutil.Error, OSError):
            continue
        total += times.user + times.system
    return total
