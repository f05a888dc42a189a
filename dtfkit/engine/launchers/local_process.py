"""Owner process: a task as a child process of the owner, the leader of its own process group.

Example::

    >>> handle = LocalProcess(spawn_task(config, env, config.cwd))   # doctest: +SKIP
    >>> handle.read_line()                                           # doctest: +SKIP
    b'...'
    >>> handle.kill()                                                # doctest: +SKIP
"""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import IO

from dtfkit.engine.launchers.contract import TaskHandle
from dtfkit.engine.platform import state
from dtfkit.engine.platform.groups import kill_group, spawn_group
from dtfkit.engine.wire.lines import read_line
from dtfkit.engine.wire.protocol import CONFIG_ENV, TaskConfig


class LocalProcess(TaskHandle):
    """A task running as a child process of this one (the leader of its own process group)."""

    def __init__(self, popen: subprocess.Popen[bytes], *, host: str = "localhost"):
        if popen.stdout is None:
            raise ValueError("a task's output is a pipe (spawn_task makes it)")
        self.popen = popen
        self.output: IO[bytes] = popen.stdout  # stdout and stderr together
        self.host = host
        self.identity = state.process_identity(popen.pid)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        kill_group(self.popen)

    def read_line(self) -> bytes:
        return read_line(self.output)

    def close_output(self) -> None:
        self.output.close()

    def abort(self) -> bool:
        if self.popen.poll() is not None:
            return False
        self.popen.send_signal(signal.SIGABRT)  # the leader only: kill() ends its group after
        return True

    def stopped(self) -> bool:
        return state.is_stopped(self.pid)


def spawn_task(
    config: TaskConfig, env: dict[str, str], cwd: str | None, pass_fds: tuple[int, ...] = ()
) -> subprocess.Popen[bytes]:
    """Start ``python -m dtfkit.engine.task.task_main`` for ``config``, leader of its own process group."""
    command = [sys.executable, "-m", "dtfkit.engine.task.task_main"]
    return spawn_group(command, {**env, CONFIG_ENV: config.to_json()}, cwd, pass_fds)
