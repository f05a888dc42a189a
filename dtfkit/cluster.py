"""``LocalCluster``: a multi-process TensorFlow cluster on this machine, driven from Python.

The notebook's own process never imports TensorFlow: every task is a fresh
interpreter running ``tf.distribute.Server``, and functions are shipped to the
tasks with cloudpickle.

Example::

    import dtfkit

    def where_am_i():
        ctx = dtfkit.this_task()
        return ctx.name, ctx.target

    with dtfkit.LocalCluster(ps=2, workers=2) as cluster:
        cluster                          # a table: tasks, addresses, pids, state
        cluster.run(where_am_i)          # {'worker:0': ('worker:0', 'grpc://...'), ...}
        print(cluster.logs("worker", 1))
"""

from __future__ import annotations

import html
import itertools
import time
from collections.abc import Callable, Iterable
from typing import Any

from dtfkit.errors import DtfkitError, TaskExited, TaskFailed, TaskNotRunning, TaskTimeout
from dtfkit.metrics import MetricLog
from dtfkit.runtime import ClusterRuntime, TaskProcess
from dtfkit.spec import ClusterLayout, TaskId

ERROR_POLICIES = ("interrupt", "wait")
STACK_DUMP_WAIT = 5.0

_BY_NAME: dict[str, LocalCluster] = {}


class LogText(str):
    """A task's log: a plain ``str`` that shows as text, not as a quoted repr."""

    def __repr__(self) -> str:
        return str(self)

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))


class LocalCluster:
    """Start ``ps``, ``workers``, ``chief`` and ``evaluator`` tasks, each its own process.

    Returns once every server is serving. Leave the ``with`` block (or call
    ``close()``) to end every process; a cluster started again by the same notebook
    cell replaces the old one.

    Args:
        ps, workers, chief, evaluator: how many tasks of each role.
        network: ``"auto"`` (default: a private network namespace when the OS allows,
            else the host network with a warning), ``"isolated"`` (required), or
            ``"host"`` (reachable from other machines: for multi-host lessons only).
        gpus: ``"auto"``, ``"share"`` or ``"none"`` (see ``dtfkit.gpu``).
        env: extra environment variables for every task (e.g. ``GRPC_FAIL_FAST``).
        start_servers: False starts the processes (TensorFlow imported, ``TF_CONFIG``
            set) without a server, for strategies that start their own
            (``MultiWorkerMirroredStrategy``).
        setup: a function each task runs after importing TensorFlow and before its
            server starts: the place to configure devices (logical CPUs/GPUs), which
            TensorFlow allows only before it initializes them. If it raises, start
            fails with ``ClusterStartError`` naming the task.
        show_tf_logs: show TensorFlow's C++ start-up messages too.
        start_timeout: seconds every task gets to come up.
        progress: show a progress bar while starting.
        name: a cluster started with the name of an open one replaces it. In a
            notebook the default name is the cell's id.

    Example::

        >>> with LocalCluster(ps=1, workers=2) as cluster:     # doctest: +SKIP
        ...     cluster.run(lambda: dtfkit.this_task().name)
        {'worker:0': 'worker:0', 'worker:1': 'worker:1'}
    """

    def __init__(
        self,
        ps: int = 0,
        workers: int = 2,
        chief: int = 0,
        evaluator: int = 0,
        *,
        network: str = "auto",
        gpus: str = "auto",
        env: dict[str, str] | None = None,
        start_servers: bool = True,
        setup: Callable[[], Any] | None = None,
        show_tf_logs: bool = False,
        start_timeout: float = 120.0,
        progress: bool = True,
        name: str | None = None,
    ):
        layout = ClusterLayout.from_counts(ps=ps, workers=workers, chief=chief, evaluator=evaluator)
        self.name = name if name is not None else _cell_key()
        previous = _BY_NAME.get(self.name) if self.name else None
        if previous is not None and not previous.closed:
            previous.close()
            print(f"dtfkit: closed the cluster this cell started before ({previous._rt.id})")
        self._calls = itertools.count(1)
        self._fn_name = ""
        self._rt = ClusterRuntime(
            layout,
            mode="serve" if start_servers else "noserve",
            network=network,
            gpus=gpus,
            env=env,
            show_tf_logs=show_tf_logs,
            start_timeout=start_timeout,
            progress=progress,
            setup_payload=None if setup is None else _pickle_call(setup, (), {}),
        )
        self._rt.start()
        if self.name:
            _BY_NAME[self.name] = self

    # ------------------------------------------------------------ properties
    @property
    def cluster_spec(self) -> dict[str, list[str]]:
        """The ClusterSpec dictionary every task was given."""
        return {job: list(hosts) for job, hosts in self._rt.cluster.items()}

    @property
    def tasks(self) -> list[str]:
        return [t.name for t in self._rt.layout.tasks]

    @property
    def metrics(self) -> MetricLog:
        """Events sent by ``dtfkit.report()`` in the tasks."""
        return self._rt.metrics

    @property
    def isolated(self) -> bool:
        """True when the cluster runs in its own network namespace."""
        return self._rt.isolated

    @property
    def closed(self) -> bool:
        return self._rt.closed

    @property
    def id(self) -> str:
        return self._rt.id

    @property
    def log_dir(self) -> str:
        return self._rt.logbook.directory

    def pids(self) -> dict[str, int]:
        """The pid of every process of the cluster."""
        return self._rt.pids()

    def status(self) -> dict[str, str]:
        """``{"worker:0": "running", "ps:0": "killed", ...}``."""
        return {p.task.name: p.status for p in self._rt.procs.values()}

    def address(self, task: str, index: int | None = None) -> str:
        """``"localhost:PORT"`` of a task."""
        return self._rt.addresses[TaskId.parse(task, index)]

    # ------------------------------------------------------------------ work
    def run(
        self,
        fn: Callable[..., Any],
        args: Iterable[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        on: str | Iterable[str] = "workers",
        timeout: float | None = None,
        on_error: str = "interrupt",
        grace: float = 5.0,
    ) -> dict[str, Any]:
        """Run ``fn(*args, **kwargs)`` in tasks and return ``{task name: return value}``.

        Args:
            on: ``"workers"`` (chief and workers: between-graph replication), ``"all"``,
                a role (``"ps"``), a task (``"worker:1"``), a list of tasks, or
                ``"client"``: a fresh client process that joins the cluster's network
                but runs no server (the seed tutorial's separate client).
            timeout: seconds before the call is abandoned. The stuck tasks' Python
                stacks are shown in the ``TaskTimeout`` error, then those tasks are
                killed (``restart()`` brings them back).
            on_error: what happens to the other tasks when one raises or dies.
                ``"interrupt"`` (default): they get ``KeyboardInterrupt`` at once (they
                would often wait forever for the failed peer), and any still running
                after ``grace`` seconds is killed. ``"wait"``: they run to the end
                (bounded by ``timeout``). Either way the first failure is raised as
                ``TaskFailed`` (or ``TaskExited``) naming the task, with its remote
                traceback and what became of the others.
            grace: seconds an interrupted task gets to return.

        Interrupting the cell (Ctrl-C / the stop button) interrupts the tasks the
        same way and re-raises ``KeyboardInterrupt``.

        Example::

            results = cluster.run(train, args=(0.01,), on="workers", timeout=60)
        """
        self._rt._check_open()
        if not callable(fn):
            raise DtfkitError(f"run() needs a function, not {type(fn).__name__}")
        if on_error not in ERROR_POLICIES:
            raise DtfkitError(f"on_error must be one of {', '.join(ERROR_POLICIES)}, not {on_error!r}")
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
            raise DtfkitError(f"timeout must be a positive number of seconds or None, not {timeout!r}")
        payload = _pickle_call(fn, tuple(args), dict(kwargs or {}))
        self._fn_name = getattr(fn, "__qualname__", "the function")
        call_id = next(self._calls)
        if on == "client":
            return self._run_client(call_id, payload, timeout, grace)
        tasks = self._rt.layout.select(on)
        procs = [self._rt.procs[t] for t in tasks]
        for proc in procs:
            if not proc.alive or not proc.ready:
                raise TaskNotRunning(
                    f"{proc.task} is {proc.status}: nothing was run. Start it again with "
                    f"cluster.restart('{proc.task}') or start a new cluster."
                )
        return self._execute(procs, call_id, payload, timeout, on_error, grace)

    def _run_client(self, call_id: int, payload: bytes, timeout: float | None, grace: float):
        rt = self._rt
        task = TaskId("client", next(rt._client_ids))
        try:
            rt._start_tasks([task], restart=True)
            return self._execute([rt.procs[task]], call_id, payload, timeout, "interrupt", grace)
        finally:
            proc = rt.procs.pop(task, None)
            if proc is not None:
                proc.kill()
                rt._reap([proc])

    def _execute(
        self,
        procs: list[TaskProcess],
        call_id: int,
        payload: bytes,
        timeout: float | None,
        on_error: str,
        grace: float,
    ) -> dict[str, Any]:
        import cloudpickle

        rt = self._rt
        pending = {p.task: p for p in procs}
        results: dict[TaskId, Any] = {}
        failures: list[tuple[TaskId, Exception]] = []
        notes: dict[TaskId, str] = {}
        for proc in procs:
            proc.send(("call", call_id, payload))
            proc.busy_with = call_id
        deadline = time.monotonic() + timeout if timeout else None
        grace_deadline: float | None = None

        def interrupt_pending(reason: str) -> float:
            for p in pending.values():
                try:
                    p.send(("interrupt", call_id))
                    notes[p.task] = f"{p.task} was interrupted ({reason})"
                except TaskNotRunning:
                    pass
            return time.monotonic() + grace

        def finish(proc: TaskProcess) -> None:
            pending.pop(proc.task, None)
            proc.busy_with = None

        try:
            with rt._live_output():
                while pending:
                    limits = [d for d in (deadline, grace_deadline) if d is not None]
                    event = rt._next_event(min(limits) if limits else None)
                    if event is None:
                        if grace_deadline is not None and time.monotonic() >= grace_deadline:
                            self._stop_stragglers(pending, notes, grace)
                            break
                        self._time_out(pending, call_id, timeout)
                    proc = rt._handle(event)
                    if proc is None or proc.task not in pending:
                        continue
                    failed = False
                    if event.kind == "msg" and event.payload[1:2] == (call_id,):
                        kind = event.payload[0]
                        if kind == "result":
                            try:
                                results[proc.task] = cloudpickle.loads(event.payload[2])
                            except Exception as exc:  # noqa: BLE001
                                failures.append(
                                    (
                                        proc.task,
                                        DtfkitError(
                                            f"{proc.task} returned a value the notebook cannot load: {exc}"
                                        ),
                                    )
                                )
                                failed = True
                            finish(proc)
                        elif kind == "error":
                            _, _, exc_type, message, tb = event.payload
                            failures.append((proc.task, (exc_type, message, tb)))
                            finish(proc)
                            failed = True
                    elif event.kind == "exit":
                        finish(proc)
                        rt._drain_logs(proc)
                        failures.append(
                            (
                                proc.task,
                                TaskExited(
                                    f"{proc.task} exited with code {event.payload} while running "
                                    f"{self._fn_name}; last log lines:\n{rt._tails([proc.task.name])}\n"
                                    f"Next step: fix the cause above, then cluster.restart('{proc.task}')."
                                ),
                            )
                        )
                        failed = True
                    if failed and pending and on_error == "interrupt" and grace_deadline is None:
                        grace_deadline = interrupt_pending(f"{failures[0][0]} failed")
        except KeyboardInterrupt:
            if pending:
                interrupt_pending("the cell was interrupted")
                self._await_stop(pending, call_id, grace, notes)
            raise
        if failures:
            raise self._failure(failures, notes)
        return {t.name: results[t] for t in (p.task for p in procs)}

    def _await_stop(self, pending: dict, call_id: int, grace: float, notes: dict) -> None:
        """After an interrupt: let tasks return within ``grace`` s, then kill the rest."""
        rt = self._rt
        end = time.monotonic() + grace
        while pending:
            event = rt._next_event(end)
            if event is None:
                break
            proc = rt._handle(event)
            if (
                proc is not None
                and proc.task in pending
                and (event.kind == "exit" or event.payload[1:2] == (call_id,))
            ):
                pending.pop(proc.task).busy_with = None
        self._stop_stragglers(pending, notes, grace)

    def _stop_stragglers(self, pending: dict, notes: dict, grace: float) -> None:
        for task, proc in list(pending.items()):
            proc.kill()
            notes[task] = (
                f"{task} was still running {grace:g} s after the interrupt and was killed; "
                f"cluster.restart('{task}') starts it again"
            )
        self._rt._reap(list(pending.values()))
        for proc in pending.values():
            proc.busy_with = None
        pending.clear()
        self._rt._write_state()

    def _time_out(self, pending: dict, call_id: int, timeout: float | None) -> None:
        rt = self._rt
        for proc in pending.values():
            try:
                proc.send(("dump_stacks", call_id))
            except TaskNotRunning:
                pass
        stacks: dict[TaskId, str] = {}
        end = time.monotonic() + STACK_DUMP_WAIT
        while len(stacks) < len(pending):
            event = rt._next_event(end)
            if event is None:
                break
            proc = rt._handle(event)
            if proc is not None and event.kind == "msg" and event.payload[0] == "stacks":
                stacks[proc.task] = event.payload[2]
        names = ", ".join(t.name for t in pending)
        text = [
            f"{names} did not return within {timeout:g} s. The stuck task(s) were killed; "
            "cluster.restart() starts them again. Where each one was:"
        ]
        for task in pending:
            text.append(f"--- {task} ---\n{stacks.get(task, '(no stack received)').rstrip()}")
        self._stop_stragglers(pending, {}, 0)
        raise TaskTimeout("\n".join(text))

    def _failure(self, failures: list, notes: dict) -> Exception:
        task, first = failures[0]
        later = {t: f for t, f in failures[1:]}
        others = []
        for t, note in notes.items():
            if t == task:
                continue
            failure = later.pop(t, None)
            stopped = isinstance(failure, tuple) and failure[0] == "KeyboardInterrupt"
            others.append(
                note + (" and stopped" if stopped else "" if failure is None else ", then failed too")
            )
        others += [f"{t} failed too" for t in later]
        other_text = "What happened to the other tasks: " + "; ".join(others) + "." if others else ""
        if isinstance(first, tuple):
            exc_type, message, tb = first
            return TaskFailed(task.name, exc_type, message, tb, other_text)
        if other_text:
            first.args = (f"{first.args[0]}\n{other_text}",)
        return first

    # ------------------------------------------------------------- lifecycle
    def kill(self, task: str, index: int | None = None) -> None:
        """Kill one task with SIGKILL, as a crash would (for fault-injection lessons)."""
        self._rt.kill(task, index)

    def restart(self, task: str | None = None, index: int | None = None) -> None:
        """Start a task again on its old address; with no argument, every dead task."""
        self._rt.restart(task, index)

    def close(self) -> None:
        """End every process of the cluster. Safe to call more than once."""
        self._rt.close()
        if self.name and _BY_NAME.get(self.name) is self:
            del _BY_NAME[self.name]

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ logs
    def logs(
        self,
        task: str | None = None,
        index: int | None = None,
        *,
        everything: bool = False,
        tail: int | None = None,
    ) -> LogText:
        """What a task printed (``logs("worker", 1)`` or ``logs("worker:1")``); all tasks
        when no task is given. ``everything=True`` includes TensorFlow's start-up noise."""
        names = [TaskId.parse(task, index).name] if task is not None else self.tasks
        if task is not None:
            self._rt.task_process(task, index)
        out = []
        for name in names:
            lines = self._rt.logbook.lines(name, everything=everything, tail=tail)
            out += [f"[{name}] {line}" for line in lines] if len(names) > 1 else lines
        return LogText("\n".join(out))

    # ------------------------------------------------------------------ repr
    def _rows(self) -> list[tuple[str, str, str, str, str]]:
        rows = []
        for task in self._rt.layout.tasks:
            proc = self._rt.procs.get(task)
            address = self._rt.addresses.get(task, "-") if task.serves else "(no server)"
            rows.append(
                (task.name, task.job, address, str(proc.pid) if proc else "-", proc.status if proc else "-")
            )
        return rows

    def __repr__(self) -> str:
        state = "closed" if self.closed else self._rt.isolation_note
        lines = [f"LocalCluster {self.id}: {_counts(self._rt.layout)}; {state}"]
        lines += [
            f"  {name:<12} {address:<18} pid {pid:<8} {status}"
            for name, _, address, pid, status in self._rows()
        ]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rt = self._rt
        warn = not rt.isolated and not self.closed
        note = html.escape("closed" if self.closed else rt.isolation_note)
        style = "color:#b00;font-weight:bold" if warn else "color:#060"
        head = "".join(
            f"<th style='text-align:left'>{h}</th>" for h in ("task", "role", "address", "pid", "state")
        )
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in self._rows()
        )
        return (
            f"<div><b>dtfkit.LocalCluster</b> <code>{html.escape(self.id)}</code> "
            f"— {html.escape(_counts(rt.layout))}<br>"
            f"<span style='{style}'>network: {note}</span>"
            f"<table><tr>{head}</tr>{body}</table>"
            f"<small>logs: <code>{html.escape(rt.logbook.directory or '')}</code></small></div>"
        )


def _counts(layout: ClusterLayout) -> str:
    counts = layout.counts()
    return ", ".join(f"{n} {job}" for job, n in counts.items())


def _pickle_call(fn: Callable, args: tuple, kwargs: dict) -> bytes:
    import cloudpickle

    try:
        return cloudpickle.dumps((fn, args, kwargs))
    except Exception as exc:  # noqa: BLE001 - pickling raises many types
        name = getattr(fn, "__qualname__", repr(fn))
        raise DtfkitError(
            f"cannot send {name} to the tasks: {type(exc).__name__}: {exc}. Functions and "
            "their arguments travel with cloudpickle; one that captures a lock, an open "
            "file, a socket or a TensorFlow object cannot. Create such things inside the function."
        ) from exc


def _cell_key() -> str | None:
    """The id of the notebook cell running now (JupyterLab and nbclient send it)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    kernel = getattr(shell, "kernel", None)
    if kernel is None:
        return None
    try:
        parent = kernel.get_parent("shell") if hasattr(kernel, "get_parent") else shell.parent_header
    except Exception:  # noqa: BLE001 - older ipykernels
        parent = getattr(shell, "parent_header", {})
    cell = (parent or {}).get("metadata", {}).get("cellId")
    return f"cell:{cell}" if cell else None
