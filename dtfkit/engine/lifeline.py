"""Make a child process die with its owner, even when the owner is SIGKILLed.

Two mechanisms, because each has a gap: ``PR_SET_PDEATHSIG`` fires when the
*thread* that spawned us exits (so the owner only asks for it when spawning from
its main thread, see ``DTFKIT_PDEATHSIG``), and an EOF on the control connection
(handled by the task's watcher thread) fires when the owner's process is gone.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
PDEATHSIG_ENV = "DTFKIT_PDEATHSIG"
OWNER_ENV = "DTFKIT_OWNER_PID"


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent thread dies (Linux)."""
    if os.environ.get(PDEATHSIG_ENV) == "1" and sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    owner = os.environ.get(OWNER_ENV)
    # The owner may have died before prctl took effect: then nobody would signal us.
    if owner and os.getppid() != int(owner):
        os._exit(0)


def end_own_process_group() -> None:
    """Kill this task and everything it started (each task leads its own session)."""
    try:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    finally:
        os._exit(1)
