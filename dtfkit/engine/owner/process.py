"""One task's process as its owner sees it (``TaskProcess``), and the frozen views of it
that front ends read (``TaskView``, ``ClusterView``).

A ``TaskProcess`` is mutable and belongs to the engine (``tasks.Tasks``,
``events.Events`` and the call it runs, ``calls.RunHandle``, change it); everything else gets a ``TaskView``, taken with one look at
the process, so its state and exit code agree.

Example::

    >>> view = runtime.task_view("worker:1")                     # doctest: +SKIP
    >>> view.name, view.status, view.alive, view.gen             # doctest: +SKIP
    ('worker:1', 'running', True, 2)
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from dtfkit.engine.launchers.contract import TaskHandle
from dtfkit.engine.wire import dumps
from dtfkit.engine.wire.layout import ClusterLayout, TaskId
from dtfkit.errors import TaskNotRunning


@dataclass(frozen=True)
class TaskView:
    """One task's process as it was when the view was taken (what front ends read).

    Example::

        >>> view = runtime.task_view("worker:1")                     # doctest: +SKIP
        >>> view.name, view.status, view.alive                       # doctest: +SKIP
        ('worker:1', 'running', True)
    """

    task: TaskId
    gen: int  # which start of the task this process is (one number per start, cluster-wide)
    pid: int
    status: str  # starting | running | busy | killed | exited (code)
    exit_code: int | None
    ready: bool
    killed: bool
    busy_with: int | None  # the id of the call it runs
    calls: int  # calls sent to this process
    script_code: int | None  # a lingering launched script's exit code
    output_closed: bool  # every line it printed is in the log book
    # Where its cold start went: ("spawn", wall s, CPU s), ("dtfkit imports", ...), ..., ("owner saw ready",
    # ...), each the wall-clock seconds since the step before and the task's CPU seconds in it ("spawn": the
    # interpreter's start, or the fork); empty before Ready.
    start_phases: tuple[tuple[str, float, float], ...] = ()

    @property
    def name(self) -> str:
        return self.task.name

    @property
    def job(self) -> str:
        return self.task.job

    @property
    def index(self) -> int:
        return self.task.index

    @property
    def alive(self) -> bool:
        return self.exit_code is None


@dataclass(frozen=True)
class ClusterView:
    """The cluster as it was when the view was taken: its tasks, addresses and ClusterSpec."""

    layout: ClusterLayout
    addresses: Mapping[TaskId, str]
    cluster: Mapping[str, tuple[str, ...]]
    tasks: Mapping[TaskId, TaskView]


class TaskProcess:
    """One task, as its owner sees it: a launcher's handle plus what the protocol said."""

    def __init__(
        self, task: TaskId, gen: int, handle: TaskHandle, port: int | None, *, stacks_file: str | None = None
    ) -> None:
        self.task = task
        self.stacks_file: str | None = stacks_file  # faulthandler's dump (dumps.py)
        self.gen = gen
        self.handle = handle
        self.port = port
        self.given_port = port  # a restart's old port (None: the task picked a free one)
        self.conn = handle.connection
        self.send_lock = threading.Lock()
        self.ready = False  # said Ready, and what it printed while starting is in the log book
        self.said_ready = False
        self.port_reported = False  # it bound its port (a restarted task is given its old one)
        self.startup_output_in = False
        self.busy_with: int | None = None
        self.calls = 0  # calls sent to this process (ensure_running(fresh=) starts a used one again)
        self.killed = False
        self.start_error: str | None = None
        self.start_failed_at: str | None = None  # StartFailed's stage ("bind": its port was taken)
        self.output_closed = threading.Event()  # set once every line it printed is in the log book
        self.script_code: int | None = None  # a lingering launched script's exit code
        self.spawned_at: float | None = None  # time.monotonic() just before the launcher started it
        self.ready_phases: tuple[tuple[str, float, float], ...] = ()  # Ready's marks, then the owner's

    @property
    def pid(self) -> int:
        return self.handle.pid

    @property
    def alive(self) -> bool:
        return self.handle.poll() is None

    @property
    def exit_code(self) -> int | None:
        return self.handle.poll()

    @property
    def status(self) -> str:
        return self._status(self.handle.poll())

    def _status(self, code: int | None) -> str:
        if code is None:
            if not self.ready:
                return "starting"
            return "busy" if self.busy_with is not None else "running"
        if self.killed:
            return "killed"
        return f"exited ({code})"

    def view(self) -> TaskView:
        """What it is now, frozen (one look at the process: its state and exit code agree)."""
        code = self.handle.poll()
        return TaskView(
            task=self.task,
            gen=self.gen,
            pid=self.pid,
            status=self._status(code),
            exit_code=code,
            ready=self.ready,
            killed=self.killed,
            busy_with=self.busy_with,
            calls=self.calls,
            script_code=self.script_code,
            output_closed=self.output_closed.is_set(),
            start_phases=self._start_phases(),
        )

    def _start_phases(self) -> tuple[tuple[str, float, float], ...]:
        if self.spawned_at is None or not self.ready_phases:
            return ()
        steps, before, cpu_before = [], self.spawned_at, 0.0
        for name, at, cpu in self.ready_phases:
            steps.append(("spawn" if name == "interpreter" else name, at - before, cpu - cpu_before))
            before, cpu_before = at, cpu
        return tuple(steps)

    def send(self, message: tuple[object, ...]) -> None:  # a NamedTuple of protocol
        if self.conn is None:
            raise TaskNotRunning(f"{self.task} is not connected yet")
        with self.send_lock:
            try:
                self.conn.send(message)
            except OSError as exc:
                raise TaskNotRunning(f"{self.task} cannot be reached ({exc}); it has {self.status}") from None

    def crash_stacks(self) -> str:
        """faulthandler's stacks if the process died of a signal (a crash, or TensorFlow's
        ``abort()`` on a failed check); ``""`` when it did not, or left none."""
        code = self.handle.poll()
        return dumps.read_dump(self.stacks_file) if code is not None and code < 0 else ""

    def kill(self) -> None:
        """End the task and everything it started, as a crash would."""
        if self.handle.poll() is None:
            self.killed = True
            self.handle.kill()
