"""The contract between the runtime and the place its tasks run: ``Launcher`` and ``TaskHandle``.

The runtime (``dtfkit.engine.runtime``) decides *what* runs: which tasks, with which
config, and it speaks the protocol (``dtfkit.engine.protocol``) with them. A launcher
decides *where and how* a task process runs, in the spirit of dask's
``ProcessInterface`` and ipyparallel's ``BaseLauncher``:

- ``prepare()`` sets up what the tasks share (a private network namespace, say) once;
- ``start(config, env, cwd)`` starts one task and returns a ``TaskHandle``: is it
  alive, its exit code, kill it, an identity for the state file, its output lines;
- ``control_address()`` says where the owner listens for its tasks to connect back;
- ``close()`` ends what ``prepare()`` made.

Launchers: ``dtfkit.engine.local.LocalLauncher`` (a fresh interpreter per task, its own
process group, a private namespace or the host network), ``dtfkit.engine.pool.PoolLauncher``
(adopts warm processes from a ``TaskPool``, else starts cold like the local one), and
``dtfkit.engine.fake.FakeLauncher`` (plain Python tasks without TensorFlow, for tests).

Example, a launcher of one's own (what the runtime calls, in order)::

    class MyLauncher(Launcher):
        def start(self, config, env, cwd):
            ...                                  # start `python -m dtfkit.engine.task_main`
            return MyHandle(...)                 # with env[CONFIG_ENV] = config.to_json()

    runtime = ClusterRuntime(layout, launcher=MyLauncher())
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any

from dtfkit.engine.protocol import TaskConfig


class StartAgain(Exception):
    """Raised by ``Launcher.spawned()`` when what the tasks share failed after they were
    spawned (an anchor started alongside them, say). The runtime ends those tasks, calls
    ``Launcher.recover(failure)`` (which raises, or prepares something else), and spawns
    them again."""


class TaskHandle(ABC):
    """One started task process, as its launcher sees it."""

    #: An identity the state file keeps, to recognise this process later (after a crash
    #: of the owner, ``dtfkit cleanup``): at least ``{"pid": ..., "started": ...}``.
    identity: dict[str, Any]
    #: A control connection that is already up (an adopted warm process), else None:
    #: the task connects back to ``Launcher.control_address()`` and says ``Hello``.
    connection: Any = None
    #: True for a process that was started ahead of need and adopted.
    adopted: bool = False

    @property
    @abstractmethod
    def pid(self) -> int:
        """The task's process id (on its machine)."""

    @abstractmethod
    def poll(self) -> int | None:
        """The exit code, or None while it runs."""

    @abstractmethod
    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the end, at most ``timeout`` seconds; the exit code, or None if still running."""

    @abstractmethod
    def kill(self) -> None:
        """End the task and everything it started, at once (SIGKILL, as a crash would)."""

    @abstractmethod
    def read_line(self) -> bytes:
        """The next line the task printed (stdout and stderr together); ``b""`` at the end."""

    def close_output(self) -> None:  # noqa: B027
        """Release the output stream once it is read to the end."""

    def stopped(self) -> bool:
        """True when the process is stopped (SIGSTOP, Ctrl-Z) and so cannot answer."""
        return False


class Launcher(ABC):
    """Starts the task processes of one cluster. One launcher per cluster."""

    #: True once ``prepare()`` gave the tasks a private network.
    isolated: bool = False
    #: What ``prepare()`` did about the network, for the cluster's repr.
    isolation_note: str = ""
    #: How the tasks started (warm or cold, and why), for the cluster's repr.
    note: str = ""

    def prepare(self, tasks: int, env: dict[str, str], cwd: str, *, gpus: int = 0) -> None:  # noqa: B027
        """Set up what the ``tasks`` tasks share, before the first ``start()``.

        ``env`` is the environment every task gets; ``gpus`` how many GPUs are visible
        (each task then needs its own ``CUDA_VISIBLE_DEVICES``).
        """

    def control_address(self, folder: str) -> str:
        """Where the owner listens for its tasks to connect back (a Unix socket in ``folder``)."""
        return os.path.join(folder, "control.sock")

    def host(self, task: str) -> str:
        """The host of ``task`` ("worker:1") in the ClusterSpec addresses (``host:port``).

        The same task gets the same host again when it restarts.
        """
        return "localhost"

    @abstractmethod
    def start(self, config: TaskConfig, env: dict[str, str], cwd: str) -> TaskHandle:
        """Start one task process running ``python -m dtfkit.engine.task_main`` with
        ``env`` plus ``CONFIG_ENV`` set to ``config.to_json()``, in ``cwd``."""

    def spawned(self) -> None:  # noqa: B027
        """Every task of a batch is spawned: wait for what they share to be ready (bounded).

        Raises ``StartAgain`` if it failed. Spawning before this lets the tasks' own
        start-up overlap whatever ``prepare()`` started.
        """

    def recover(self, failure: StartAgain) -> None:
        """After ``spawned()`` raised ``failure`` and the tasks were ended: raise a clear
        error, or prepare again so the tasks can be spawned once more."""
        raise failure

    def started(self) -> None:  # noqa: B027
        """Every task of the cluster's start is up (or the start failed): free what is left over."""

    def processes(self) -> list[dict[str, Any]]:
        """Identities of the launcher's own processes (for the state file)."""
        return []

    def pids(self) -> dict[str, int]:
        """Pids of the launcher's own processes, by role (e.g. ``{"netns": 1234}``)."""
        return {}

    def close(self) -> None:  # noqa: B027
        """End what ``prepare()`` made. The runtime has ended every task by then."""
