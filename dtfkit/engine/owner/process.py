"""One task's process as its owner sees it (``TaskProcess``), and the frozen views of it
that front ends read (``TaskView``, ``ClusterView``).

A ``TaskProcess`` belongs to the engine; everything else gets a ``TaskView``, taken with one look at
the process, so its state and exit code agree.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from dtfkit.engine.launchers.contract import ControlConnection, TaskHandle
from dtfkit.engine.wire import dumps
from dtfkit.engine.wire.layout import ClusterLayout, TaskId
from dtfkit.errors import TaskNotRunning


@dataclass(frozen=True)
class TaskView:
    """One task's process as it was when the view was taken (what front ends read).

    Example::

        >>> view = runtime.task_view("worker:1")                     # doctest: +SKIP
        >>> view.name, view.status, view.alive, view.gen             # doctest: +SKIP
        ('worker:1', 'running', True, 2)
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


class Lifecycle(enum.Enum):
    """Where a task's process is in its life, as the owner learnt it from what the task said and from the
    calls it sent it. Whether the process is still there is its handle's to say (``TaskProcess.status``)."""

    STARTING = "starting"  # spawned: connecting, reserving its port, setting up, starting its server
    SAID_READY = "said ready"  # it said Ready; what it printed while starting is not all in the log book yet
    STARTUP_PRINTED = "startup printed"  # what it printed while starting is in; its Ready is not read yet
    START_FAILED = "start failed"  # it said StartFailed (why: start_error) and exits
    IDLE = "running"  # serving, and running no call
    BUSY = "busy"  # running the call busy_with


# Every move the lifecycle may make (TaskProcess._move refuses any other).
_MOVES: dict[Lifecycle, frozenset[Lifecycle]] = {
    Lifecycle.STARTING: frozenset({Lifecycle.SAID_READY, Lifecycle.STARTUP_PRINTED, Lifecycle.START_FAILED}),
    Lifecycle.SAID_READY: frozenset({Lifecycle.IDLE, Lifecycle.START_FAILED}),
    Lifecycle.STARTUP_PRINTED: frozenset({Lifecycle.IDLE, Lifecycle.START_FAILED}),
    Lifecycle.START_FAILED: frozenset(),
    Lifecycle.IDLE: frozenset({Lifecycle.BUSY}),
    Lifecycle.BUSY: frozenset({Lifecycle.IDLE}),
}
_STARTING = (Lifecycle.STARTING, Lifecycle.SAID_READY, Lifecycle.STARTUP_PRINTED)


class LifecycleError(RuntimeError):
    """A move the lifecycle does not allow was asked for: a mistake in dtfkit, not in the learner's code."""


class TaskProcess:
    """One task, as its owner sees it: a launcher's handle plus what the protocol said.

    Its state changes only through its methods, each a step of its ``Lifecycle`` or a fact the task
    reported: ``events.Events`` calls ``connected``, ``port_bound``, ``said_ready``, ``startup_output_in``,
    ``start_failed``, ``script_done`` and ``output_ended``; a call (``calls.RunHandle``) ``call_started``
    and ``call_ended``; whoever ends it ``kill`` or ``abort``. The rest is read-only.
    """

    def __init__(
        self,
        task: TaskId,
        gen: int,
        handle: TaskHandle,
        port: int | None,
        *,
        stacks_file: str | None = None,
        spawned_at: float | None = None,
    ) -> None:
        self.task = task
        self.stacks_file: str | None = stacks_file  # faulthandler's dump (dumps.py)
        self.gen = gen
        self.handle = handle
        self.given_port = port  # a restart's old port (None: the task picked a free one)
        self.spawned_at = spawned_at  # time.monotonic() just before the launcher started it
        self.send_lock = threading.Lock()
        self.output_closed = threading.Event()  # set once every line it printed is in the log book
        self._state = Lifecycle.STARTING
        self._call: int | None = None  # the call it runs (BUSY)
        self._port = port
        self._conn = handle.connection
        self._port_reported = False  # it bound its port (a restarted task is given its old one)
        self._calls = 0  # calls sent to this process (ensure_running(fresh=) starts a used one again)
        self._killed = False
        self._start_error: str | None = None
        self._start_failed_at: str | None = None  # StartFailed's stage ("bind": its port was taken)
        self._script_code: int | None = None  # a lingering launched script's exit code
        self._ready_phases: tuple[tuple[str, float, float], ...] = ()  # Ready's marks, then the owner's

    # ------------------------------------------------------------- the lifecycle
    @property
    def state(self) -> Lifecycle:
        return self._state

    def _move(self, to: Lifecycle) -> None:
        """The one place the lifecycle changes; a move ``_MOVES`` does not allow raises."""
        if to not in _MOVES[self._state]:
            raise LifecycleError(
                f"{self.task} (generation {self.gen}) cannot go from {self._state.name} to {to.name}"
            )
        self._state = to

    @property
    def ready(self) -> bool:
        """It said Ready, and what it printed while starting is in the log book."""
        return self._state in (Lifecycle.IDLE, Lifecycle.BUSY)

    @property
    def busy_with(self) -> int | None:
        """The id of the call it runs."""
        return self._call if self._state is Lifecycle.BUSY else None

    def said_ready(self, phases: tuple[tuple[str, float, float], ...]) -> None:
        """Its ``Ready`` (with the marks of its start's phases) is read."""
        # The owner's own step costs the task no CPU: it carries the task's last reading on.
        last_cpu = phases[-1][2] if phases else 0.0
        self._ready_phases = (*phases, ("owner saw ready", time.monotonic(), last_cpu))
        if self._state is Lifecycle.STARTING:
            self._move(Lifecycle.SAID_READY)
        elif self._state is Lifecycle.STARTUP_PRINTED:
            self._move(Lifecycle.IDLE)

    def startup_output_in(self) -> None:
        """Every line it printed while starting is in the log book (its start-up done mark is read)."""
        if self._state is Lifecycle.STARTING:
            self._move(Lifecycle.STARTUP_PRINTED)
        elif self._state is Lifecycle.SAID_READY:
            self._move(Lifecycle.IDLE)

    def start_failed(self, stage: str, traceback: str) -> None:
        """It said ``StartFailed``: why (``traceback``) and in which stage (``"bind"``: its port was taken)."""
        self._start_error, self._start_failed_at = traceback, stage
        if self._state in _STARTING:
            self._move(Lifecycle.START_FAILED)

    def call_started(self, call_id: int) -> None:
        """Call ``call_id`` was sent to it."""
        self._move(Lifecycle.BUSY)
        self._call = call_id
        self._calls += 1

    def call_ended(self) -> None:
        """The call it ran answered, or gave up on it (it died, or was killed)."""
        self._move(Lifecycle.IDLE)
        self._call = None

    # ------------------------------------------------------ what else it reported
    def connected(self, conn: ControlConnection) -> None:
        """Its control connection is up (its Hello is read)."""
        self._conn = conn

    def port_bound(self, port: int) -> None:
        """It reserved ``port`` (a restarted task, its old one)."""
        self._port, self._port_reported = port, True

    def script_done(self, code: int) -> None:
        """Its launched script ended with ``code`` (the task lingers, serving its peers)."""
        self._script_code = code

    def output_ended(self) -> None:
        """Every line it printed is in the log book (its output pipe is closed)."""
        self.output_closed.set()

    @property
    def conn(self) -> ControlConnection | None:
        return self._conn

    @property
    def port(self) -> int | None:
        return self._port

    @property
    def port_reported(self) -> bool:
        return self._port_reported

    @property
    def calls(self) -> int:
        return self._calls

    @property
    def killed(self) -> bool:
        """The owner ended it (``kill()``, or ``abort()`` for its stacks)."""
        return self._killed

    @property
    def start_error(self) -> str | None:
        return self._start_error

    @property
    def start_failed_at(self) -> str | None:
        return self._start_failed_at

    @property
    def script_code(self) -> int | None:
        return self._script_code

    # ---------------------------------------------------------- the process itself
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
            killed=self._killed,
            busy_with=self.busy_with,
            calls=self._calls,
            script_code=self._script_code,
            output_closed=self.output_closed.is_set(),
            start_phases=self._start_phases(),
        )

    def _start_phases(self) -> tuple[tuple[str, float, float], ...]:
        if self.spawned_at is None or not self._ready_phases:
            return ()
        steps, before, cpu_before = [], self.spawned_at, 0.0
        for name, at, cpu in self._ready_phases:
            steps.append(("spawn" if name == "interpreter" else name, at - before, cpu - cpu_before))
            before, cpu_before = at, cpu
        return tuple(steps)

    def send(self, message: tuple[object, ...]) -> None:  # a NamedTuple of protocol
        conn = self._conn
        if conn is None:
            raise TaskNotRunning(f"{self.task} is not connected yet")
        with self.send_lock:
            try:
                conn.send(message)
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
            self._killed = True
            self.handle.kill()

    def abort(self) -> bool:
        """End it with SIGABRT, on which it writes its stacks (``dumps``); False: its launcher cannot."""
        if not self.handle.abort():
            return False
        self._killed = True
        return True
