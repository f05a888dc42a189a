"""One task's process as its owner sees it (``TaskProcess``), and the frozen views of it
that front ends read (``TaskView``, ``ClusterView``, a call's ``TaskCall``).

A ``TaskProcess`` is mutable and belongs to the engine (``tasks.Tasks`` and
``events.Events`` change it); everything else gets a ``TaskView``, taken with one look at
the process, so its state and exit code agree.

Example::

    >>> view = runtime.task_view("worker:1")                     # doctest: +SKIP
    >>> view.name, view.status, view.alive, view.gen             # doctest: +SKIP
    ('worker:1', 'running', True, 2)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from dtfkit.engine.launchers.contract import TaskHandle
from dtfkit.engine.wire import dumps, protocol
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
    adopted: bool  # a warm pool process
    busy_with: int | None  # the id of the call it runs
    calls: int  # calls sent to this process
    script_code: int | None  # a lingering launched script's exit code
    output_closed: bool  # every line it printed is in the log book
    # Where its cold start went: ("spawn", wall s, CPU s), ("dtfkit imports", ...), ..., ("owner saw ready",
    # ...), each the wall-clock seconds since the step before and the task's CPU seconds in it ("spawn": the
    # interpreter's start); empty for a warm (adopted) process or before Ready.
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

    def __init__(self, task: TaskId, gen: int, handle: TaskHandle, port: int | None, *, stacks_file=None):
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
        self.output_closed = threading.Event()  # set once every line it printed is in the log book
        self.script_code: int | None = None  # a lingering launched script's exit code
        self.spawned_at: float | None = None  # time.monotonic() just before the launcher started it
        self.ready_phases: tuple[tuple[str, float, float], ...] = ()  # Ready's marks, then the owner's

    @property
    def pid(self) -> int:
        return self.handle.pid

    @property
    def identity(self) -> dict:
        return self.handle.identity

    @property
    def adopted(self) -> bool:
        return self.handle.adopted

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
            adopted=self.adopted,
            busy_with=self.busy_with,
            calls=self.calls,
            script_code=self.script_code,
            output_closed=self.output_closed.is_set(),
            start_phases=self._start_phases(),
        )

    def _start_phases(self) -> tuple[tuple[str, float, float], ...]:
        if self.adopted or self.spawned_at is None or not self.ready_phases:
            return ()
        steps, before, cpu_before = [], self.spawned_at, 0.0
        for name, at, cpu in self.ready_phases:
            steps.append(("spawn" if name == "interpreter" else name, at - before, cpu - cpu_before))
            before, cpu_before = at, cpu
        return tuple(steps)

    def send(self, message: tuple) -> None:
        if self.conn is None:
            raise TaskNotRunning(f"{self.task} is not connected yet")
        with self.send_lock:
            try:
                self.conn.send(message)
            except OSError as exc:
                raise TaskNotRunning(f"{self.task} cannot be reached ({exc}); it has {self.status}") from None

    def kill(self) -> None:
        """End the task and everything it started, as a crash would."""
        if self.handle.poll() is None:
            self.killed = True
            self.handle.kill()


class TaskCall:
    """One call in flight: its id, the processes it was sent to (a restarted task's successor is
    not one of them) and what they answered, which the events route here by call id
    (``deliver``). ``calls.RunHandle`` reads and does through its methods only; the runtime
    kills its tasks (``kill_call_tasks``) and stops its routing (``end_call``). It holds no
    reference to the engine's parts.

    Example::

        >>> call = runtime.begin_call([TaskId("worker", 0)], payload)    # doctest: +SKIP
        >>> call.answers().replies                                       # doctest: +SKIP
        {}
    """

    def __init__(self, call_id: int, procs: dict[TaskId, TaskProcess]):
        self._call_id = call_id
        self._procs = procs
        # What the tasks answered, as the events route it here by call id (deliver()).
        self._replies: dict[TaskId, protocol.Result | protocol.Error] = {}
        self._stacks: dict[TaskId, str] = {}
        self._flushed: set[TaskId] = set()  # tasks whose output of the call is all in

    @property
    def call_id(self) -> int:
        return self._call_id

    def deliver(
        self, task: TaskId, message: protocol.Result | protocol.Error | protocol.OutputDone | protocol.Stacks
    ) -> None:
        """Take one answer of ``task`` to this call (the events' routing calls it)."""
        if isinstance(message, protocol.OutputDone):
            self._flushed.add(task)
        elif isinstance(message, protocol.Stacks):
            self._stacks[task] = message.text
        else:
            self._replies[task] = message

    def answers(self) -> CallAnswers:
        """What the tasks answered so far (a frozen copy)."""
        return CallAnswers(
            MappingProxyType(dict(self._replies)),
            frozenset(self._flushed),
            MappingProxyType(dict(self._stacks)),
        )

    def view(self, task: TaskId) -> TaskView:
        return self._procs[task].view()

    def send(self, task: TaskId, message: tuple) -> None:
        self._procs[task].send(message)

    def release(self, task: TaskId) -> None:
        """The task is done with this call (answered, died or was killed)."""
        self._procs[task].busy_with = None

    def processes(self, tasks: Iterable[TaskId]) -> list[TaskProcess]:
        """The processes this call was sent to, of ``tasks`` (for the engine: ``ClusterRuntime.kill_call_tasks``)."""
        return [self._procs[t] for t in tasks]

    def wait_output(self, task: TaskId, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) until every line the task printed is in the log book."""
        return self._procs[task].output_closed.wait(timeout)

    def stopped(self, task: TaskId) -> bool:
        """Whether the process is stopped (state T: SIGSTOP, Ctrl-Z, a debugger)."""
        return self._procs[task].handle.stopped()

    def crash_stacks(self, task: TaskId) -> str:
        """faulthandler's stacks of a task that died of a signal (a crash, or TensorFlow's
        ``abort()`` on a failed check); ``""`` when it did not, or left none."""
        proc = self._procs[task]
        code = proc.handle.poll()
        return dumps.read_dump(proc.stacks_file) if code is not None and code < 0 else ""

    def stacks_by_abort(self, tasks: Iterable[TaskId], deadline: float) -> dict[TaskId, str]:
        """End ``tasks`` with SIGABRT, on which each writes its stacks from a C handler
        (``dumps``), and read them once it is gone (waiting until ``deadline`` at most).

        For tasks that cannot answer ``DumpStacks``: TensorFlow's C++ code holds the
        interpreter. Each one counts as killed; a task that cannot be aborted, or is
        not gone by the deadline, is left out."""
        aborted = []
        for task in tasks:
            proc = self._procs[task]
            if proc.handle.abort():
                proc.killed = True
                aborted.append(proc)
        found = {}
        for proc in aborted:
            if proc.handle.wait(max(0.0, deadline - time.monotonic())) is not None:
                text = dumps.read_dump(proc.stacks_file)
                if text:
                    found[proc.task] = text
        return found


@dataclass(frozen=True)
class CallAnswers:
    replies: Mapping[TaskId, protocol.Result | protocol.Error]
    flushed: frozenset[TaskId]  # tasks whose output of the call is all in
    stacks: Mapping[TaskId, str]
