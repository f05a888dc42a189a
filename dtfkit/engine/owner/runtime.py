"""One local cluster: its tasks, their events and their output, composed: ``ClusterRuntime``.

``LocalCluster`` (function mode), ``launch`` (script mode) and ``RayCluster`` are built
on ``ClusterRuntime``. It is three parts with one job each:

- ``tasks.Tasks``: the processes (spawned through the launcher), their generations,
  ``reconcile()``, the state file;
- ``events.Events``: the control transport, the event queue, call routing, the one
  waiting thread (``waiting()``) and the one wait loop (``wait_until()``);
- ``output.Output``: the log book and the echo of task output in the waiting thread.

Everything the tasks say arrives as events on one queue that the caller's thread waits
on, so output is printed by the thread of the cell that asked for the work and never
lands in another cell.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from collections.abc import Collection

from dtfkit.engine.launchers.contract import Launcher
from dtfkit.engine.owner.events import CallAnswer, Event, Events
from dtfkit.engine.owner.metrics import MetricLog
from dtfkit.engine.owner.output import Echo, Output, StartProgress, print_line
from dtfkit.engine.owner.process import ClusterView, TaskView
from dtfkit.engine.owner.settings import ClusterSettings, Script
from dtfkit.engine.owner.tasks import Tasks
from dtfkit.engine.platform import gpu_plan, state
from dtfkit.engine.platform.admission import (  # noqa: F401 - part of this module's interface
    MAX_TASKS_ENV,
    TASK_MEMORY_BYTES,
    check_env,
    check_task_count,
    task_limit,
)
from dtfkit.engine.platform.taskenv import task_environment
from dtfkit.engine.wire import protocol
from dtfkit.engine.wire.layout import ClusterLayout, TaskId
from dtfkit.errors import DtfkitError, TaskNotRunning

__all__ = [
    "ClusterRuntime",
    "ClusterView",
    "Event",
    "Script",
    "StartProgress",
    "TaskView",
    "MAX_TASKS_ENV",
    "TASK_MEMORY_BYTES",
    "check_task_count",
    "print_line",
    "task_limit",
]

CLOSED = (
    "this cluster is closed; cluster.ensure_running() starts it again (new addresses), or start a new one"
)
_OPEN: set[ClusterRuntime] = set()
_OPEN_LOCK = threading.Lock()


class _StackInbox:
    """Where the answers to one ``DumpStacks`` round go (``ClusterRuntime.stacks``)."""

    def __init__(self) -> None:
        self.stacks: dict[TaskId, str] = {}

    def deliver(self, task: TaskId, message: CallAnswer) -> None:
        if isinstance(message, protocol.Stacks):
            self.stacks[task] = message.text


@atexit.register
def _close_all_at_exit() -> None:
    for runtime in list(_OPEN):
        runtime.close()


class ClusterRuntime:
    """Starts and owns the processes of one cluster. ``LocalCluster`` and ``launch`` are its faces.

    ``tasks``, ``events`` and ``output`` are its parts. It composes them and forwards nothing to
    them: its methods are what takes more than one part (start, restart, kill, a client task, the
    stacks). Front ends call those, read frozen views (``TaskView``, ``ClusterView``), and read the
    parts through the paths ``tests/test_runtime_surface.py`` allows (``tasks.snapshot()``,
    ``output.logbook.lines()``, ...); they write nothing of a part.

    Example::

        >>> runtime = ClusterRuntime(ClusterLayout.from_counts(workers=2), launcher=FakeLauncher())  # doctest: +SKIP
        >>> runtime.start()                                                       # doctest: +SKIP
        >>> runtime.task_view("worker:0").status                                  # doctest: +SKIP
        'running'
        >>> with runtime.events.waiting("my call"), runtime.live_output():        # doctest: +SKIP
        ...     runtime.events.wait_until(lambda: False, deadline=time.monotonic() + 5)
        False
        >>> runtime.close()                                                       # doctest: +SKIP
    """

    def __init__(
        self,
        layout: ClusterLayout,
        settings: ClusterSettings | None = None,
        *,
        launcher: Launcher | None = None,
        echo: Echo | None = None,
    ):
        settings = ClusterSettings() if settings is None else settings
        settings.admit(layout)  # the one place a cluster's size is refused, before anything starts
        if launcher is None:
            from dtfkit.engine.launchers.local import LocalLauncher

            launcher = LocalLauncher()
        self.launcher = launcher
        self.layout = layout
        self.settings = settings
        self.cwd = settings.cwd or os.getcwd()  # fixed now: a restarted task starts where the others did
        self.started_at = time.time()
        self.metrics = MetricLog()
        self._closed = False
        # Validated before anything is created on disk (an unknown policy raises).
        n_gpus = gpu_plan.count_gpus()  # may ask nvidia-smi: once per cluster, not per task
        plan = gpu_plan.plan_visible_devices([t.name for t in layout.tasks], n_gpus, settings.gpus)
        self.id, self.dir = state.new_cluster_dir()
        self.output = Output(os.path.join(self.dir, "logs"), echo, show_noise=settings.show_tf_logs)
        self.events = Events(self.id, self.output, self.metrics, lambda: self._closed)
        self.tasks = Tasks(
            layout,
            launcher,
            settings=settings,
            cluster_id=self.id,
            directory=self.dir,
            task_env=self.task_env,
            cwd=self.cwd,
            gpu_plan=(n_gpus, plan),
            output=self.output,
            events=self.events,
        )
        with _OPEN_LOCK:
            _OPEN.add(self)
        self.events.start_accepting()

    # ------------------------------------------------------------ properties
    @property
    def closed(self) -> bool:
        return self._closed

    def set_echo(self, echo: Echo | None) -> None:
        """Send the tasks' output to ``echo(task, line)`` (None: print it, ``print_line``)."""
        self.output.echo = echo or print_line

    # ------------------------------------------------------------------ views

    def task_view(self, task: str | TaskId, index: int | None = None) -> TaskView:
        """One task as it is now, frozen; an unknown task is a clear error."""
        return self.tasks.task_process(task, index).view()

    def task_env(self) -> dict[str, str]:
        """The environment every task of this cluster starts with (before per-task GPU settings)."""
        return task_environment(
            self.id,
            self.dir,
            extra=dict(self.settings.env),
            cwd=self.cwd,
            show_tf_logs=self.settings.show_tf_logs,
        )

    # ----------------------------------------------------------------- output

    def live_output(self, since: int | None = None) -> contextlib.AbstractContextManager[None]:
        """While the caller waits, echo task output in the caller's thread (its cell).

        Lines after number ``since`` (default: from now on) that arrived while nobody
        was waiting are echoed first; what is left when the block ends, last.
        """
        return self.output.live_output(self.events.post_line, since)

    # ----------------------------------------------------------------- events

    def stacks(self, tasks: Collection[TaskId], timeout: float = 5.0) -> dict[TaskId, str]:
        r"""What each of ``tasks`` is doing now: the Python stacks of its threads (the control thread
        left out), as its ``DumpStacks`` answer gives them. A task that does not answer within
        ``timeout`` (not running, or C++ code holding its interpreter) is left out. Call it from
        the thread that waits on the cluster (``launch()``'s supervisor).

        Example::

            >>> runtime.stacks([TaskId("worker", 1)])                       # doctest: +SKIP
            {TaskId('worker', 1): 'Thread MainThread:\n  File "script.py", line 9, in <module>\n ...'}
        """
        inbox = _StackInbox()
        call_id = self.events.open_call(inbox)
        try:
            asked = set()
            for task in tasks:
                proc = self.tasks.task_process(task)
                if not proc.alive:
                    continue
                try:
                    proc.send(protocol.DumpStacks(call_id))
                except TaskNotRunning:
                    continue
                asked.add(task)
            self.events.wait_until(lambda: asked <= set(inbox.stacks), time.monotonic() + timeout)
            return {task: text for task, text in inbox.stacks.items() if task in asked}
        finally:
            self.events.close_call(call_id)

    def wait_output(self, task: str | TaskId, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) until every line the task's current process printed
        is in the log book; True if so."""
        return self.tasks.task_process(task).output_closed.wait(timeout)

    # -------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start every task and return once each one is serving (or raise)."""
        try:
            self.tasks.start()
        except BaseException:
            self.tasks.started()
            self.close()
            raise
        self.tasks.started()

    def start_client(self) -> TaskId:
        """Start a fresh client task (no server, on the cluster's network) and return it once ready."""
        self.check_open()
        return self.tasks.start_client()

    def kill(self, task: str | TaskId, index: int | None = None) -> None:
        """Kill one task with SIGKILL, as a crash would (for fault-injection lessons)."""
        self.tasks.end_tasks([self.tasks.task_process(task, index)])

    def restart(self, task: str | TaskId | None = None, index: int | None = None) -> None:
        """Start a task again on its old address (all dead tasks when ``task`` is None)."""
        self.check_open()
        with self.events.waiting("restart()"):  # before anything is killed: a refusal changes nothing
            target = None if task is None else self.tasks.task_process(task, index).task
            self.tasks.restart(target)

    def ensure_running(self, fresh: Collection[TaskId] | None = None) -> dict[TaskId, str]:
        """Start again, on their old addresses, the tasks of the layout that are not running
        and idle, and those of ``fresh`` that have run a call; returns ``{task: why}``
        (empty: nothing to do)."""
        self.check_open()
        with self.events.waiting("ensure_running()"):
            self.events.drain()  # deaths, readiness and answers that arrived while nobody waited
            return self.tasks.ensure_running(set(fresh or ()))

    def check_open(self) -> None:
        """Raise if the cluster is closed."""
        if self._closed:
            raise DtfkitError(CLOSED)

    def close(self) -> None:
        """End every process of the cluster. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        self.tasks.close()
        # What a task started in a session of its own escaped its process group; its
        # environment still names this cluster.
        state.end_marked_processes(self.id)
        self.events.close()
        self.output.close()
        state.remove_state(self.dir)
        with _OPEN_LOCK:
            _OPEN.discard(self)

    def __enter__(self) -> ClusterRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
