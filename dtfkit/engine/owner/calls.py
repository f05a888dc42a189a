"""One function call running in some tasks of a cluster: ``RunHandle``, the call's one object.

``cluster.run(...)`` is ``cluster.submit(...).result()``. Submitting returns at
once, so a notebook can kill or restart tasks while training runs (fault
injection), watch metrics arrive, or stop the run.

A ``RunHandle`` holds all of its call's state: the processes it was sent to (a
restarted task's successor is not one of them), what they answered (``events.Events``
routes each answer here by call id: ``deliver``), and what came of it. It works the
cluster's parts directly (``tasks``, ``events``, ``output`` of the ``ClusterRuntime``):
this module is the owner's side of a call, not a front end.

Example::

    handle = cluster.submit(train, kwargs={"steps": 1000})
    cluster.metrics.wait_for(lambda row: row.get("step", 0) >= 100, timeout=60)
    cluster.kill("worker", 1)             # a crash in the middle of training
    handle.result()                       # raises TaskExited naming worker:1
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dtfkit.engine.owner.events import CallAnswer
from dtfkit.engine.owner.output import OUTPUT_DRAIN_SECONDS
from dtfkit.engine.owner.process import TaskProcess
from dtfkit.engine.owner.runtime import CLOSED
from dtfkit.engine.wire import dumps, protocol
from dtfkit.engine.wire.layout import TaskId
from dtfkit.engine.wire.sources import PickledCall, pickle_call
from dtfkit.errors import DtfkitError, TaskExited, TaskFailed, TaskNotRunning, TaskTimeout
from dtfkit.i18n import N_, _, joined

if TYPE_CHECKING:
    from dtfkit.engine.owner.runtime import ClusterRuntime

ERROR_POLICIES = ("interrupt", "wait")
STACK_DUMP_WAIT = 5.0
NO_ANSWER_NOTE = N_(
    "(it could not answer: code outside Python, TensorFlow's C++ most often, held the interpreter; "
    "these stacks are faulthandler's, written as it was ended with SIGABRT)"
)


@dataclass(frozen=True, slots=True)
class Failure:
    """Why one task's part of a call failed: what the function raised there (``exc_type``, ``message``,
    ``traceback``: its ``Error`` reply), or, in ``error``, the owner's own error, raised as it is (the
    task died or was killed, or returned a value the notebook cannot load).

    Example::

        >>> Failure.raised(TaskId("worker", 1), protocol.Error(7, "ValueError", "bad", "Traceback ...")).stopped
        False
    """

    task: TaskId
    exc_type: str = ""
    message: str = ""
    traceback: str = ""
    error: Exception | None = None

    @classmethod
    def raised(cls, task: TaskId, reply: protocol.Error) -> Failure:
        """What the function raised in ``task``, as its ``Error`` reply says."""
        return cls(task, reply.exc_type, reply.message, reply.traceback)

    @property
    def stopped(self) -> bool:
        """The function was interrupted there (it raised ``KeyboardInterrupt``)."""
        return self.error is None and self.exc_type == "KeyboardInterrupt"

    def described(self) -> str:
        """One clause for the list of what happened to the other tasks of the call."""
        if self.error is None:
            return _("{task} raised {exc_type} too").format(task=self.task, exc_type=self.exc_type)
        return re.split("[;；\n]", str(self.error))[0]

    def as_error(self, others: str) -> Exception:
        """What ``result()`` raises when this is the call's first failure; ``others``: what happened to the
        other tasks (a paragraph of its own, or "")."""
        if self.error is None:
            headlines = (_("{task} raised {exc_type}: {message}"), _("--- remote traceback ({task}) ---"))
            return TaskFailed(self.task.name, self.exc_type, self.message, self.traceback, others, headlines)
        if others:
            self.error.args = (f"{self.error.args[0]}\n{others}",)
        return self.error


@dataclass(frozen=True, slots=True)
class Outcome:
    """What came of a finished call: every task's return value, or the error ``result()`` raises."""

    # {task name: return value}, in the order of the call's tasks
    values: dict[str, Any] = field(default_factory=dict)
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def result(self) -> dict[str, Any]:
        """The values, or raise the error."""
        if self.error is not None:
            raise self.error
        return self.values


class RunHandle:
    """A call in flight. ``result()`` waits for it (printing the tasks' output),
    ``done()`` tells without waiting, ``stop()`` interrupts it."""

    def __init__(
        self,
        runtime: ClusterRuntime,
        procs: list[TaskProcess],
        payload: PickledCall,
        fn_name: str,
        *,
        timeout: float | None,
        on_error: str,
        grace: float,
        on_finish: Callable[[], None] | None = None,
    ):
        self._tasks_part, self._events, self._output = runtime.tasks, runtime.events, runtime.output
        self.fn_name = fn_name
        self.tasks = [p.task.name for p in procs]
        self._order = [p.task for p in procs]
        self._procs: dict[TaskId, TaskProcess] = {p.task: p for p in procs}  # this call's processes
        self._pending: dict[TaskId, int] = {}  # task -> the generation the call runs in
        # What the tasks answered, as the events route it here (deliver()).
        self._replies: dict[TaskId, protocol.Result | protocol.Error] = {}
        self._stacks: dict[TaskId, str] = {}
        self._flushed: set[TaskId] = set()  # tasks whose output of the call is all in
        self._results: dict[TaskId, Any] = {}
        self._failures: list[Failure] = []
        self._notes: dict[TaskId, str] = {}
        self._reasons: dict[TaskId, str] = {}  # why each interrupted task was interrupted
        self._killed: set[TaskId] = set()  # killed after the grace period: their note says it all
        self._on_error = on_error
        self._grace = grace
        self._timeout = timeout
        self._on_finish = on_finish
        self._outcome: Outcome | None = None
        self.submitted = time.time()
        self._log_start = self._output.logbook.seq
        self._deadline = time.monotonic() + timeout if timeout else None
        self._grace_deadline: float | None = None
        for proc in procs:
            if proc.busy_with is not None:
                raise TaskNotRunning(
                    f"{proc.task} is still running an earlier call; wait for it (handle.result()) "
                    "or stop it (handle.stop()) first"
                )
        self.call_id = self._events.open_call(self)  # answers with this id come to deliver()
        for proc in self._procs.values():  # once per task, however often ``on`` named it
            proc.send(protocol.Call(self.call_id, payload.data, payload.sources))
            proc.call_started(self.call_id)
            self._pending[proc.task] = proc.gen

    def deliver(self, task: TaskId, message: CallAnswer) -> None:
        """Take one answer of ``task`` to this call (``events.Events`` routes it here by call id)."""
        if isinstance(message, protocol.OutputDone):
            self._flushed.add(task)
        elif isinstance(message, protocol.Stacks):
            self._stacks[task] = message.text
        else:
            self._replies[task] = message

    # ------------------------------------------------------------- public
    def done(self) -> bool:
        """True once every task has answered (or died). Never blocks."""
        if self._outcome is None:
            with self._events.waiting(f"{self.fn_name} (handle.done())"):
                self._events.drain()
                self._collect()
                if not self._pending:
                    self._finish()
        return self._outcome is not None

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        """Wait for every task and return ``{task name: return value}``.

        Raises ``TaskFailed``/``TaskExited`` for the first task that failed,
        ``TaskTimeout`` when the call's own timeout passes; with ``timeout`` here,
        a ``TimeoutError`` if the call is still running then (it keeps running).
        """
        if self._outcome is None:
            with self._events.waiting(f"{self.fn_name} (handle.result())"):
                self._wait(None if timeout is None else time.monotonic() + timeout)
        outcome = self._outcome
        assert outcome is not None  # _wait() ends with _finish(), or raises
        return outcome.result()

    def stop(self) -> None:
        """Interrupt the call in every task still running it; kill those that do not
        return within the grace period. ``result()`` then raises ``TaskFailed`` (``TaskExited``
        when a task had to be killed)."""
        if self._outcome is None and self._pending:
            with self._events.waiting(f"{self.fn_name} (handle.stop())"):
                self._interrupt("it was stopped")
                self._await_stop()
                self._finish()

    @property
    def elapsed(self) -> float:
        return time.time() - self.submitted

    def __repr__(self) -> str:
        state = "running" if self._outcome is None else "ok" if self._outcome.ok else "error"
        return f"<RunHandle {self.fn_name} on {', '.join(self.tasks)}: {state}>"

    # ------------------------------------------------------------ waiting
    def _wait(self, until: float | None) -> None:
        events = self._events
        try:
            with self._output.live_output(events.post_line, since=self._log_start):
                self._collect()

                def next_limit() -> float | None:
                    limits = [d for d in (self._deadline, self._grace_deadline, until) if d is not None]
                    return min(limits) if limits else None

                # Each pass waits until every task answered or the nearest limit passed.
                while not events.wait_until(lambda: not self._pending, next_limit, lambda _: self._collect()):
                    now = time.monotonic()
                    if self._grace_deadline is not None and now >= self._grace_deadline:
                        self._kill_pending()
                        break
                    if self._deadline is not None and now >= self._deadline:
                        self._time_out()
                    if until is not None and now >= until:
                        raise TimeoutError(
                            _("{function} is still running on {tasks}").format(
                                function=self.fn_name, tasks=", ".join(t.name for t in self._pending)
                            )
                        )
        except KeyboardInterrupt:
            if self._pending:
                self._interrupt("the cell was interrupted")
                self._await_stop()
            self._finish()
            raise
        self._finish()

    def _collect(self) -> None:
        """Move answers (routed here by the events) and deaths into results/failures."""
        import cloudpickle

        for task in list(self._pending):
            proc = self._procs[task]
            # A reply counts once the task's output up to it has been read too.
            reply = self._replies.get(task) if task in self._flushed else None
            if reply is not None:
                self._pending.pop(task)
                proc.call_ended()
                if isinstance(reply, protocol.Result):
                    try:
                        self._results[task] = cloudpickle.loads(reply.value)
                    except Exception as exc:  # noqa: BLE001
                        self._fail(
                            Failure(
                                task,
                                error=DtfkitError(
                                    _("{task} returned a value the notebook cannot load: {exc}").format(
                                        task=task, exc=exc
                                    )
                                ),
                            )
                        )
                else:
                    self._fail(Failure.raised(task, reply))
            elif not proc.alive:
                # Its last lines may still be in the pipe: they belong in this cell and in the message.
                proc.output_closed.wait(OUTPUT_DRAIN_SECONDS)
                self._pending.pop(task)
                proc.call_ended()
                if proc.killed:
                    text = _("{task} was killed while running {function}; {restart_hint}.").format(
                        task=task, function=self.fn_name, restart_hint=self._restart_hint(task)
                    )
                else:
                    # Only this call's lines: earlier calls' output would mislead.
                    crash = proc.crash_stacks()
                    since = self._output.last_lines([task.name], since=self._log_start)
                    text = (
                        _(
                            "{task} exited with code {code} while running {function}; its last lines during this call:"
                        ).format(task=task, code=proc.exit_code, function=self.fn_name)
                        + f"\n{since}\n"
                        + (
                            _("Where it was when it died (faulthandler's stacks):") + f"\n{crash}\n"
                            if crash
                            else ""
                        )
                        + _("Next step: fix the cause above; {restart_hint}.").format(
                            restart_hint=self._restart_hint(task)
                        )
                    )
                self._fail(Failure(task, error=TaskExited(text)))

    def _fail(self, failure: Failure) -> None:
        self._failures.append(failure)
        if self._pending and self._on_error == "interrupt" and self._grace_deadline is None:
            self._interrupt(_("{task} failed").format(task=self._failures[0].task))

    def _interrupt(self, reason: str) -> None:
        for task in self._pending:
            with contextlib.suppress(TaskNotRunning):
                self._procs[task].send(protocol.Interrupt(self.call_id))
                self._reasons[task] = reason
                self._notes[task] = _("{task} was interrupted ({reason})").format(task=task, reason=reason)
        self._grace_deadline = time.monotonic() + self._grace

    def _await_stop(self) -> None:
        """After an interrupt: let tasks return within the grace period, then kill the rest."""
        end = self._grace_deadline or time.monotonic()
        self._collect()
        self._events.wait_until(lambda: not self._pending, end, lambda _: self._collect())
        self._kill_pending()

    def _kill_pending(self) -> None:
        """Kill the tasks still running after the grace period; each counts as failed."""
        pending = list(self._pending)
        for task in pending:
            why = self._why_interrupted(task)
            note = _(
                "{task} was still running {seconds:g} s after the interrupt and was killed; {restart_hint}"
            ).format(task=task, seconds=self._grace, restart_hint=self._restart_hint(task))
            self._notes[task] = note
            self._killed.add(task)
            self._failures.append(Failure(task, error=TaskExited(f"{why}: {note}.")))
        # The processes this call was sent to, not a restarted successor.
        self._tasks_part.end_tasks([self._procs[task] for task in pending])
        for task in pending:
            self._procs[task].call_ended()
        self._pending.clear()

    def _restart_hint(self, task: TaskId) -> str:
        """How to get the task back; says so when it was started again since (restart())."""
        now = self._tasks_part.procs.get(task)
        if now is not None and now.gen != self._procs[task].gen and now.alive:
            return _("it has been started again since (by cluster.restart() or cluster.ensure_running())")
        return _("cluster.restart('{task}') starts it again").format(task=task)

    def _why_interrupted(self, task: TaskId) -> str:
        reason = self._reasons.get(task) or _("it was interrupted")
        return _("{function} on {task} was interrupted ({reason})").format(
            function=self.fn_name, task=task, reason=reason
        )

    def _time_out(self) -> None:
        for task in self._pending:
            with contextlib.suppress(TaskNotRunning):
                self._procs[task].send(protocol.DumpStacks(self.call_id))
        frozen = {task for task in self._pending if self._procs[task].handle.stopped()}
        end = time.monotonic() + STACK_DUMP_WAIT
        # A stopped process (state T) cannot answer: do not wait for its stack.
        self._events.wait_until(lambda: len(self._stacks) >= len(self._pending) - len(frozen), end)
        stacks = dict(self._stacks)
        # No answer: TensorFlow's C++ code holds the interpreter. faulthandler still can.
        silent = [self._procs[task] for task in self._pending if task not in stacks and task not in frozen]
        dumped = _stacks_by_abort(silent, time.monotonic() + STACK_DUMP_WAIT) if silent else {}
        for task, dump in dumped.items():
            stacks[task] = f"{_(NO_ANSWER_NOTE)}\n{dump}"
        names = ", ".join(t.name for t in self._pending)
        text = [
            _(
                "{names} did not return from {function} within {seconds:g} s. The stuck task(s) "
                "were killed; cluster.restart() starts them again. Where each one was:"
            ).format(names=names, function=self.fn_name, seconds=self._timeout)
        ]
        if frozen:
            text[0] = (
                _(
                    "{names}: process STOPPED (state T), not stuck in the function (someone sent it SIGSTOP "
                    "or Ctrl-Z; it was killed all the same). "
                ).format(names=", ".join(sorted(t.name for t in frozen)))
                + text[0]
            )
        where_by_task = {}
        for task in self._pending:
            if task in frozen:
                where = _(
                    "(its process was STOPPED (state T: SIGSTOP, Ctrl-Z or a debugger), so it could "
                    "not run at all; nothing in the function is to blame)"
                )
            else:
                where = stacks.get(task, _("(no stack received)")).rstrip()
            where_by_task[task.name] = where
            text.append(f"--- {task} ---\n{where}")
        self._kill_pending()
        error = TaskTimeout("\n".join(text), stacks=where_by_task, stopped=sorted(t.name for t in frozen))
        self._outcome = Outcome(error=error)
        self._cleanup()
        raise error

    def _finish(self) -> None:
        if self._outcome is not None:
            return
        if self._failures:
            self._outcome = Outcome(error=self._failure())
        else:
            self._outcome = Outcome({task.name: self._results[task] for task in self._order})
        self._cleanup()

    def _cleanup(self) -> None:
        self._events.close_call(self.call_id)
        if self._on_finish is not None:
            self._on_finish()

    def _failure(self) -> Exception:
        first = self._failures[0]
        later = {failure.task: failure for failure in self._failures[1:]}  # a task's last failure
        others = []
        for t, note in self._notes.items():
            if t == first.task:
                continue
            failure = later.pop(t, None)
            stopped = failure is not None and failure.stopped
            quiet = failure is None or t in self._killed
            others.append(note + (_(" and stopped") if stopped else "" if quiet else _(", then failed too")))
        others += [failure.described() for failure in later.values()]
        other_text = (
            _("What happened to the other tasks: {others}.").format(others=joined(others, clauses=True))
            if others
            else ""
        )
        return first.as_error(other_text)


def _stacks_by_abort(procs: list[TaskProcess], deadline: float) -> dict[TaskId, str]:
    """End ``procs`` with SIGABRT, on which each writes its stacks from a C handler
    (``dumps``), and read them once it is gone (waiting until ``deadline`` at most).

    For tasks that cannot answer ``DumpStacks``: TensorFlow's C++ code holds the
    interpreter. Each one counts as killed; a task that cannot be aborted, or is
    not gone by the deadline, is left out."""
    aborted = []
    for proc in procs:
        if proc.abort():
            aborted.append(proc)
    found = {}
    for proc in aborted:
        if proc.handle.wait(max(0.0, deadline - time.monotonic())) is not None:
            text = dumps.read_dump(proc.stacks_file)
            if text:
                found[proc.task] = text
    return found


def submit_call(
    rt: ClusterRuntime,
    fn: Callable[..., Any],
    args: Any,
    kwargs: dict[str, Any] | None,
    *,
    on: Any,
    timeout: float | None,
    on_error: str,
    grace: float,
) -> RunHandle:
    """``fn(*args, **kwargs)`` sent to the tasks ``on`` selects (every argument checked first), or to a
    fresh client process (``on="client"``); the handle of the call, at once.

    Example::

        >>> handle = submit_call(rt, train, (), {}, on="workers", timeout=None, on_error="interrupt", grace=5.0)  # doctest: +SKIP
    """
    if rt.tasks.closed:  # set by the runtime's close(), with its own flag
        raise DtfkitError(CLOSED)
    if not callable(fn):
        raise DtfkitError(f"run() needs a function, not {type(fn).__name__}")
    if on_error not in ERROR_POLICIES:
        raise DtfkitError(f"on_error must be one of {', '.join(ERROR_POLICIES)}, not {on_error!r}")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise DtfkitError(f"timeout must be a positive number of seconds or None, not {timeout!r}")
    if not (isinstance(grace, (int, float)) and grace >= 0):
        raise DtfkitError(f"grace must be a number of seconds >= 0, not {grace!r}")
    payload = pickled(fn, tuple(args), dict(kwargs or {}))
    name = getattr(fn, "__qualname__", "the function")
    if on == "client":
        client = rt.start_client()
        try:
            proc = rt.tasks.procs[client]
            return RunHandle(
                rt,
                [proc],
                payload,
                name,
                timeout=timeout,
                on_error=on_error,
                grace=grace,
                on_finish=lambda: rt.tasks.remove_task(client),
            )
        except BaseException:
            rt.tasks.remove_task(client)
            raise
    procs = [rt.tasks.procs[t] for t in rt.layout.select(on)]
    for proc in procs:
        if not proc.alive or not proc.ready:
            raise TaskNotRunning(
                f"{proc.task} is {proc.status}: nothing was run. Start it again with "
                f"cluster.restart('{proc.task}') (cluster.ensure_running() starts every task "
                "that is down) or start a new cluster."
            )
    return RunHandle(rt, procs, payload, name, timeout=timeout, on_error=on_error, grace=grace)


def run_call(
    rt: ClusterRuntime, fn: Callable[..., Any], args: Any, kwargs: dict[str, Any] | None, **options: Any
) -> dict[str, Any]:
    """``submit_call(...).result()``, with the cluster's events claimed before anything is sent:
    a call that another thread's wait refuses leaves no work in the tasks.

    Example::

        >>> run_call(rt, train, (), {}, on="workers", timeout=None, on_error="interrupt", grace=5.0)  # doctest: +SKIP
        {'worker:0': 0.93, 'worker:1': 0.93}
    """
    name = getattr(fn, "__qualname__", "the function")
    with rt.events.waiting(f"run({name})"):
        return submit_call(rt, fn, args, kwargs, **options).result()


def pickled(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> PickledCall:
    """``(fn, args, kwargs)`` pickled, with the source of its code for the tasks' tracebacks."""
    try:
        return pickle_call(fn, args, kwargs)
    except Exception as exc:  # noqa: BLE001 - pickling raises many types
        name = getattr(fn, "__qualname__", repr(fn))
        raise DtfkitError(
            f"cannot send {name} to the tasks: {type(exc).__name__}: {exc}. Functions and "
            "their arguments travel with cloudpickle; one that captures a lock, an open "
            "file, a socket or a TensorFlow object cannot. Create such things inside the function."
        ) from exc
