"""The contract between the runtime and the place its tasks run: ``Launcher`` and ``TaskHandle``.

The runtime (``dtfkit.engine.owner.runtime``) decides *what* runs: which tasks, with which
config, and it speaks the protocol (``dtfkit.engine.wire.protocol``) with them. A launcher
decides *where and how* a task process runs, in the spirit of dask's ``ProcessInterface`` and
ipyparallel's ``BaseLauncher``: ``start(config)`` returns a ``TaskHandle`` (everything a task
needs travels in ``config``, what the launcher adds for its task in ``config.launch``; what the
tasks share, a private network namespace say, is set up by the first ``start()``), ``describe()``
says what it did as facts (``LauncherDescription``), ``close()`` ends what it made.

Launchers: ``dtfkit.engine.launchers.local.LocalLauncher`` (each task forked from the owner's task
zygote, or a fresh interpreter) and ``dtfkit.engine.launchers.fake.FakeLauncher`` (plain Python
tasks without TensorFlow, for tests). A front end keeps a ``LauncherSpec`` (class and options) to
build the same launcher again when a closed cluster starts anew.

Example, a launcher of one's own::

    class MyLauncher(Launcher):
        def start(self, config):
            ...                                  # start `python -m dtfkit.engine.task.task_main`
            return MyHandle(...)                 # with config.env + {CONFIG_ENV: config.to_json()}

    runtime = ClusterRuntime(layout, launcher=MyLauncher())
"""

from __future__ import annotations

import dataclasses
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NoReturn, Protocol

from dtfkit.engine.wire.protocol import TaskConfig

#: ``LauncherDescription.network``: where the tasks' servers listen.
NETWORKS = (
    "pending",  # nothing started yet
    "namespace",  # one private network namespace for every task
    "links",  # each task its own namespace, joined by emulated links
    "host",  # the host network, asked for (network="host")
    "fallback",  # the host network, because no namespace could be made (``why``)
    "fake",  # FakeLauncher: no TensorFlow, no servers
    "ray",  # the network of a Ray cluster
)

_EMPTY: Mapping[str, NoReturn] = MappingProxyType({})  # empty: a default for a Mapping of any values


@dataclasses.dataclass(frozen=True)
class LauncherDescription:
    """What a launcher did, as facts (``Launcher.describe()``); the front end words them.

    Example::

        >>> d = LauncherDescription(network="namespace", namespace="net:[4026532598]")
        >>> d.isolated, d.network
        (True, 'namespace')
    """

    network: str = "pending"  # one of NETWORKS
    namespace: str = ""  # "namespace"/"links": the namespace's name ("net:[4026532598]")
    why: str = ""  # "fallback": why no namespace could be made
    #: How the tasks started, for the launcher's front end to word: ``ForkStart`` for
    #: local launchers, ``RayStart`` for Ray, else None.
    start: Any = None
    #: With emulated links: the plan ``{"default"|job|task: bits per second}`` (see
    #: ``dtfkit.engine.launchers.links.link_rate``); None without links.
    links: Mapping[str, int] | None = None
    #: With ``delay=``: the plan ``{"default"|job|task: seconds}`` (see
    #: ``dtfkit.engine.launchers.links.link_delay``); None without a delay.
    delays: Mapping[str, float] | None = None
    #: Tasks spread over several machines: ``{task: node id}``; None on one machine.
    nodes: Mapping[str, str] | None = None
    #: Identities of the launcher's own processes (for the state file).
    processes: tuple[Mapping[str, Any], ...] = ()
    #: Pids of the launcher's own processes, by role (``{"netns": 1234}``).
    pids: Mapping[str, int] = dataclasses.field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        if self.network not in NETWORKS:
            raise ValueError(f"unknown network {self.network!r}")

    @property
    def isolated(self) -> bool:
        """True when the tasks' servers are in a private network namespace."""
        return self.network in ("namespace", "links")


@dataclasses.dataclass(frozen=True)
class ForkStart:
    """How a local cluster's tasks started: ``forked`` of the ``started`` task processes were
    forked from the task zygote (TensorFlow imported once, ``dtfkit.engine.launchers.zygotes``),
    the others are fresh interpreters; ``why``: why those were not forked ("" when all were)."""

    forked: int = 0
    started: int = 0
    why: str = ""


@dataclasses.dataclass(frozen=True)
class LauncherSpec:
    """How to build a launcher: ``build`` (a class or factory) and its keyword options.

    A front end keeps one so that a closed cluster starts again on the same kind of
    launcher, with options checked once.

    Example::

        >>> from dtfkit.engine.launchers.fake import FakeLauncher
        >>> type(LauncherSpec(FakeLauncher).build()).__name__
        'FakeLauncher'
    """

    build_with: Callable[..., Launcher]
    options: Mapping[str, Any] = dataclasses.field(default_factory=lambda: _EMPTY)

    def build(self) -> Launcher:
        return self.build_with(**self.options)


class ControlConnection(Protocol):
    """A task's control connection as the owner uses it: a ``multiprocessing`` connection, or a
    relay that behaves like one (Ray's). Messages are the pickled NamedTuples of ``protocol``."""

    def send(self, obj: Any, /) -> None: ...

    def recv(self) -> Any: ...

    def fileno(self) -> int: ...

    def close(self) -> None: ...


class TaskHandle(ABC):
    """One started task process, as its launcher sees it."""

    #: An identity the state file keeps, to recognise this process later (after a crash
    #: of the owner, ``dtfkit cleanup``): at least ``{"pid": ..., "started": ...}``.
    identity: dict[str, Any]
    #: A control connection that is already up (a relay, as Ray's), else None:
    #: the task connects back to ``config.control`` and says ``Hello``.
    connection: ControlConnection | None = None
    #: The host of the task's address (``host:port``) in the ClusterSpec; a restarted
    #: task gets the same host again.
    host: str = "localhost"

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

    def abort(self) -> bool:
        """End the task with SIGABRT, on which it writes its stacks (``dumps``); False
        where that cannot be done (a task on another machine)."""
        return False


class ReportedExit:
    """For a handle that hears of its process's end instead of waiting for it (the process is not
    this one's child): ``exited(code)`` records it, ``poll()`` and ``wait()`` read it.

    Example::

        >>> class Handle(ReportedExit): pass
        >>> h = Handle(); h.poll(), h.exited(-9), h.wait(0)
        (None, None, -9)
    """

    _code: int | None = None
    _ended: threading.Event | None = None

    def _ended_event(self) -> threading.Event:
        if self._ended is None:
            self._ended = threading.Event()
        return self._ended

    def exited(self, code: int) -> None:
        self._code = code
        self._ended_event().set()

    def poll(self) -> int | None:
        return self._code

    def wait(self, timeout: float | None = None) -> int | None:
        self._ended_event().wait(timeout)
        return self._code


class Launcher(ABC):
    """Starts the task processes of one cluster. One launcher per cluster."""

    @abstractmethod
    def start(self, config: TaskConfig) -> TaskHandle:
        """Start one task process running ``python -m dtfkit.engine.task.task_main`` in
        ``config.cwd`` with ``config.env`` plus ``CONFIG_ENV`` set to the config's JSON.

        The first call sets up what the tasks share; raises ``ClusterStartError`` if
        that cannot be done (after any fallback the launcher has)."""

    def describe(self) -> LauncherDescription:
        """What this launcher did so far, as facts (see ``LauncherDescription``)."""
        return LauncherDescription(network="host")

    def started(self) -> None:  # noqa: B027
        """The cluster's start is over (every task serves, or the start failed)."""

    def close(self) -> None:  # noqa: B027
        """End what the launcher made. The runtime has ended every task by then."""
