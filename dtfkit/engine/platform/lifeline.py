"""Make a child process die with its owner, even when the owner is SIGKILLed.

Two mechanisms, because each has a gap: ``PR_SET_PDEATHSIG`` fires when the
*thread* that spawned us exits (so the owner only asks for it when spawning from
its main thread, see ``DTFKIT_PDEATHSIG``), and an EOF on the control connection
(handled by the task's watcher thread) fires when the owner's process is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Literal, NoReturn, TypeVar

_PR_SET_PDEATHSIG = 1
PDEATHSIG_ENV = "DTFKIT_PDEATHSIG"
OWNER_ENV = "DTFKIT_OWNER_PID"

T = TypeVar("T")


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent thread dies (Linux)."""
    if os.environ.get(PDEATHSIG_ENV) == "1" and sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    owner = os.environ.get(OWNER_ENV)
    # The owner may have died before prctl took effect: then nobody would signal us.
    if owner and os.getppid() != int(owner):
        os._exit(0)


def with_lifeline(env: Mapping[str, str], *, from_long_lived_thread: bool) -> dict[str, str]:
    """``env`` plus what makes a child die with this process.

    ``PR_SET_PDEATHSIG`` fires when the *thread* that started the child ends, so it is
    asked for only from a thread that lives as long as the process.

    Example::

        >>> with_lifeline({}, from_long_lived_thread=True)[PDEATHSIG_ENV]
        '1'
    """
    env = dict(env)
    env.pop(PDEATHSIG_ENV, None)
    env[OWNER_ENV] = str(os.getpid())
    if from_long_lived_thread:
        env[PDEATHSIG_ENV] = "1"
    return env


def with_lifeline_here(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a child started from the calling thread: ``with_lifeline``, with
    ``PR_SET_PDEATHSIG`` only when that thread is the main thread (it lives as long as the process).

    Example::

        >>> with_lifeline_here({})[OWNER_ENV] == str(os.getpid())
        True
    """
    main_thread = threading.current_thread() is threading.main_thread()
    return with_lifeline(env, from_long_lived_thread=main_thread)


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to process group ``pgid``; nothing if it is gone (or not ours)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def kill_group_and_leader(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads, and ``pid`` itself: a forked task leads no group
    until its ``setsid()``."""
    signal_group(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def end_own_process_group() -> NoReturn:
    """Kill this task and everything it started (each task leads its own session)."""
    try:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    finally:
        os._exit(1)


class Spawner:
    """One thread that starts child processes for as long as this process lives.

    ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child ends; this thread
    ends only with the process, so children started through it die with their owner even
    if it is SIGKILLed. The owner starts its task zygote here, and the Ray task actor its tasks.

    Example::

        proc = Spawner.get().call(lambda: subprocess.Popen([...]))
    """

    _instance: Spawner | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.jobs: queue.Queue[Callable[[], None]] = queue.Queue()
        threading.Thread(target=self._loop, name="dtfkit-spawner", daemon=True).start()

    @classmethod
    def get(cls) -> Spawner:
        """This process's spawner (started on first use)."""
        with cls._lock:
            if cls._instance is None:
                cls._instance = Spawner()
            return cls._instance

    def _loop(self) -> None:
        while True:
            self.jobs.get()()

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in the spawner's thread and return what it returns (or raise what it raised)."""
        done: queue.Queue[tuple[Literal[True], T] | tuple[Literal[False], BaseException]] = queue.Queue()

        def job() -> None:  # runs in the spawner's thread
            try:
                done.put((True, fn()))
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                done.put((False, exc))

        self.jobs.put(job)
        outcome = done.get()
        if outcome[0] is False:
            raise outcome[1]
        return outcome[1]
