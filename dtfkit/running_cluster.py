"""``RunningCluster``: what every cluster does once its tasks run, whatever started them.

``LocalCluster`` (tasks on this machine) and ``RayCluster`` (tasks on Ray nodes) only turn
their arguments into a launcher and a runtime's settings (as dask's ``LocalCluster`` turns its
arguments into a spec for ``SpecCluster``); this class holds the rest, each method a hand-off to
the runtime (``dtfkit.engine.owner.runtime``) or to ``cluster_display``. Runs in the notebook kernel.

Example::

    class MyCluster(RunningCluster):
        def __init__(self, workers=2):
            layout = ClusterLayout.from_counts(workers=workers)
            self._start(layout, LauncherSpec(MyLauncher, {}), name=None, echo=None, settings=ClusterSettings())
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from dtfkit import cluster_display
from dtfkit.engine.launchers.contract import ForkStart, Launcher, LauncherDescription, LauncherSpec
from dtfkit.engine.owner.calls import RunHandle, pickled, run_call, submit_call
from dtfkit.engine.owner.metrics import MetricLog
from dtfkit.engine.owner.runtime import ClusterRuntime
from dtfkit.engine.owner.settings import ClusterSettings
from dtfkit.engine.platform.notebook import cell_key
from dtfkit.engine.wire.layout import ClusterLayout
from dtfkit.errors import DtfkitError
from dtfkit.i18n import _, joined
from dtfkit.log import note
from dtfkit.progress import start_display

# The open clusters by name (in a notebook: the cell that started them), so that running a cell
# again replaces the cluster it started instead of leaving it running.
_BY_NAME: dict[str, RunningCluster] = {}


class LogText(str):
    """A task's log: a plain ``str`` that shows as text, not as a quoted repr."""

    def __repr__(self) -> str:
        return str(self)

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))


def cluster_settings(
    *,
    start_servers: bool,
    gpus: str,
    env: dict[str, str] | None,
    setup: Callable[[], Any] | None,
    show_tf_logs: bool,
    start_timeout: float,
    progress: bool,
    max_tasks: int | None,
) -> ClusterSettings:
    """A cluster's arguments as the one settings object the runtime takes, checked here (``setup``
    pickled once, here).

    >>> cluster_settings(start_servers=False, gpus="none", env=None, setup=None, show_tf_logs=False,
    ...                  start_timeout=60.0, progress=False, max_tasks=None).mode
    'noserve'
    """
    return ClusterSettings(
        mode="serve" if start_servers else "noserve",
        gpus=gpus,
        env={} if env is None else env,
        show_tf_logs=show_tf_logs,
        start_timeout=start_timeout,
        progress=start_display(progress),
        setup_payload=None if setup is None else pickled(setup, (), {}),
        max_tasks=max_tasks,
    )


class RunningCluster:
    """The cluster interface shared by ``LocalCluster`` and ``RayCluster`` (see their docs)."""

    def _start(
        self,
        layout: ClusterLayout,
        chosen: Launcher | LauncherSpec,
        *,
        name: str | None,
        echo: Callable[[str, str], None] | None,
        settings: ClusterSettings,
        built: Launcher | None = None,
    ) -> None:
        """Replace the cluster of the same name, build the launcher and start the runtime.

        ``chosen``: a ``LauncherSpec`` (a closed cluster can start again from it) or a launcher
        of the caller's (it cannot). ``built``: the spec's launcher, if the caller built it
        already. ``settings``: how the tasks start (``ClusterSettings``, checked when made).
        """
        self.name = name if name is not None else cell_key()
        previous = _BY_NAME.get(self.name) if self.name else None
        if previous is not None and not previous.closed:
            previous.close()
            note(f"dtfkit: closed the cluster this cell started before ({previous.id})")
        self._launcher_spec: LauncherSpec | None = chosen if isinstance(chosen, LauncherSpec) else None
        if built is None:
            built = chosen.build() if isinstance(chosen, LauncherSpec) else chosen
        self._rt = ClusterRuntime(layout, settings, launcher=built, echo=echo)
        self._rt.start()
        if self.name:
            _BY_NAME[self.name] = self

    # ------------------------------------------------------------ properties
    @property
    def cluster_spec(self) -> dict[str, list[str]]:
        """The ClusterSpec dictionary every task was given."""
        return {job: list(hosts) for job, hosts in self._rt.tasks.snapshot().cluster.items()}

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
        return self._rt.tasks.describe_launcher().isolated

    @property
    def closed(self) -> bool:
        return self._rt.closed

    @property
    def serves(self) -> bool:
        """True when dtfkit started each task's TensorFlow server (``start_servers=True``)."""
        return self._rt.settings.serves

    @property
    def id(self) -> str:
        return self._rt.id

    @property
    def log_dir(self) -> str:
        return self._rt.output.logbook.directory or ""  # the runtime always has its logs folder

    def pids(self) -> dict[str, int]:
        """The pid of every process of the cluster."""
        return self._rt.tasks.pids()

    @property
    def echo(self) -> Callable[[str, str], None]:
        """Where the tasks' output goes: ``echo(task, line)``. Set it to send the output
        elsewhere (a widget's log, a list); ``None`` prints it in the waiting cell again."""
        return self._rt.output.echo

    @echo.setter
    def echo(self, echo: Callable[[str, str], None] | None) -> None:
        if echo is not None and not callable(echo):
            raise DtfkitError(f"echo must be a function echo(task, line) or None, not {echo!r}")
        self._rt.set_echo(echo)

    @property
    def start_note(self) -> str:
        """How the tasks started: forked from the task zygote, or fresh interpreters and why.

        Example::

            >>> cluster.start_note                                            # doctest: +SKIP
            'forked 3 of 3 task process(es) from the task zygote (TensorFlow imported once)'
        """
        return self._start_note_of(self._rt.tasks.describe_launcher())

    def status(self) -> dict[str, str]:
        """``{"worker:0": "running", "ps:0": "killed", ...}``."""
        return {view.name: view.status for view in self._rt.tasks.snapshot().tasks.values()}

    def address(self, task: str, index: int | None = None) -> str:
        """``"localhost:PORT"`` of a task (``"10.77.0.2:PORT"`` with ``link=``)."""
        view = self._rt.task_view(task, index)  # an unknown task is a clear error
        addresses = self._rt.tasks.snapshot().addresses
        if view.task not in addresses:
            raise DtfkitError(f"{view.task} has no address: it runs no server ({view.job} tasks do not)")
        return addresses[view.task]

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
                but runs no server (the separate client of Ye Hu's tutorial).
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
        return run_call(self._rt, fn, args, kwargs, on=on, timeout=timeout, on_error=on_error, grace=grace)

    def submit(
        self,
        fn: Callable[..., Any],
        args: Iterable[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        on: str | Iterable[str] = "workers",
        timeout: float | None = None,
        on_error: str = "interrupt",
        grace: float = 5.0,
    ) -> RunHandle:
        """Like ``run()``, but return a ``RunHandle`` at once instead of waiting.

        Example::

            handle = cluster.submit(train)
            cluster.metrics.wait_for(lambda row: row.get("step", 0) >= 50, timeout=60)
            cluster.kill("worker", 1)
            handle.result()
        """
        return submit_call(self._rt, fn, args, kwargs, on=on, timeout=timeout, on_error=on_error, grace=grace)

    # ------------------------------------------------------------- lifecycle
    def kill(self, task: str, index: int | None = None) -> None:
        """Kill one task with SIGKILL, as a crash would (for fault-injection lessons)."""
        self._rt.kill(task, index)

    def restart(self, task: str | None = None, index: int | None = None) -> None:
        """Start a task again on its old address; with no argument, every dead task."""
        self._rt.restart(task, index)

    def ensure_running(self, fresh: str | Iterable[str] | None = None) -> list[str]:
        """Bring every task back to running and idle; return the tasks started again.

        A task that is dead (killed, exited, or ended by a call's ``timeout``), still
        starting, or still busy with an earlier call (a cell interrupted while its call ran
        on, or a ``submit()`` whose result nobody collected: that call is lost) is started
        again on its old address, as ``restart()`` does. A closed cluster starts again as a
        whole, with the same settings and new addresses. When every task is running and
        idle it does nothing, so a notebook section that kills, restarts or closes tasks
        can begin with it and be run again. What it starts again, it prints.

        Args:
            fresh: tasks (as ``run(on=...)`` selects them) that must also be new processes:
                those that have run a call since they started are started again. For
                what TensorFlow sets up once per process, such as a ``ClusterCoordinator``
                in the chief or ``MultiWorkerMirroredStrategy``'s collectives.

        Example::

            cluster.kill("worker", 1)
            cluster.ensure_running()                # prints and returns ['worker:1']
            cluster.ensure_running()                # [] : nothing to do
            cluster.ensure_running(fresh="chief")   # ['chief:0'] once the chief has run a call
        """
        chosen = None if fresh is None else self._rt.layout.select(fresh)  # a bad selector fails first
        if self.closed:
            self._start_again()
            note(
                _("dtfkit: the cluster was closed; started it again ({id}, new addresses)").format(id=self.id)
            )
            return self.tasks
        stale = self._rt.ensure_running(chosen)
        if stale:
            states = joined(
                _("{task} ({state})").format(task=task, state=cluster_display.shown_state(state))
                for task, state in stale.items()
            )
            note(_("dtfkit: started again: {states}").format(states=states))
        return [task.name for task in stale]

    def _start_again(self) -> None:
        """Start a closed cluster anew: a new runtime with the settings it was made with."""
        if self._launcher_spec is None:
            raise DtfkitError(
                "this cluster is closed and ran on a launcher you passed (launcher=), which "
                "dtfkit cannot start again: start a new LocalCluster"
            )
        runtime = ClusterRuntime(
            self._rt.layout,
            self._rt.settings,
            launcher=self._launcher_spec.build(),
            echo=self._rt.output.echo,
        )
        runtime.start()  # if it fails, it closes itself and this cluster stays closed
        self._rt = runtime
        holder = _BY_NAME.get(self.name) if self.name else None
        if self.name and (holder is None or holder.closed):
            _BY_NAME[self.name] = self

    def close(self) -> None:
        """End every process of the cluster. Safe to call more than once."""
        self._rt.close()
        if self.name and _BY_NAME.get(self.name) is self:
            del _BY_NAME[self.name]

    def __enter__(self) -> RunningCluster:
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
        # An unknown task is a clear error.
        names = [self._rt.task_view(task, index).name] if task is not None else self.tasks
        out = []
        for name in names:
            lines = self._rt.output.logbook.lines(name, everything=everything, tail=tail)
            out += [f"[{name}] {line}" for line in lines] if len(names) > 1 else lines
        return LogText("\n".join(out))

    # ------------------------------------------------------------------ display (cluster_display.py)
    def _network_note(self, described: LauncherDescription) -> str:
        """The cluster's network, in words (the first line of its repr); RayCluster says its own."""
        return cluster_display.network_words(described)

    def _start_note_of(self, described: LauncherDescription) -> str:
        """How the tasks started (forked, or fresh interpreters and why); empty for other launchers."""
        return cluster_display.start_words(described.start) if isinstance(described.start, ForkStart) else ""

    def _display(self) -> cluster_display.ClusterFacts:
        described = self._rt.tasks.describe_launcher()
        return cluster_display.ClusterFacts(
            kind=type(self).__name__,
            id=self.id,
            closed=self.closed,
            described=described,
            network_note="closed" if self.closed else self._network_note(described),
            start_note="" if self.closed else self._start_note_of(described),
            snapshot=self._rt.tasks.snapshot(),
            dropped_note=self._rt.output.logbook.dropped_note(),
            log_dir=self._rt.output.logbook.directory or "",
        )

    def __repr__(self) -> str:
        return cluster_display.text(self._display())

    def _repr_html_(self) -> str:
        return cluster_display.html_box(self._display())
