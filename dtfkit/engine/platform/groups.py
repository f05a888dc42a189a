"""Owner process: start a command as the leader of a process group of its own, and end that group.

A kill then ends whatever the command started too (a task's helpers, a simulated pod's children).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess

from dtfkit.engine.platform import lifeline


def spawn_group(
    command: list[str], env: dict[str, str], cwd: str | None, pass_fds: tuple[int, ...] = ()
) -> subprocess.Popen[bytes]:
    """Start ``command`` as the leader of a new session and process group (so that
    ``kill_group`` ends all it starts), stdin closed, stdout and stderr on one pipe.

    Example::

        >>> import os
        >>> p = spawn_group(["sleep", "60"], dict(os.environ), None)
        >>> kill_group(p); p.returncode
        -9
    """
    return subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
        start_new_session=True,
        pass_fds=pass_fds,
    )


def kill_group(
    popen: subprocess.Popen[bytes], wait: float = 10.0, *, grace: float = 0.0, leftovers: bool = False
) -> None:
    """SIGKILL a process and its process group, then reap it (bounded by ``wait`` s).

    ``grace`` > 0: SIGTERM the group first and give it that long (a pod's deletion).
    ``leftovers``: SIGKILL the group even when its leader has exited already (what it
    started may live on); off by default, since an exited leader's pid may be reused.
    """
    if popen.poll() is None:
        if grace > 0:
            lifeline.signal_group(popen.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=grace)
        lifeline.signal_group(popen.pid, signal.SIGKILL)  # the leader's group, even if SIGTERM ended it
    elif leftovers:
        lifeline.signal_group(popen.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=wait)
