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
from collections.abc import Callable, Iterable
from types import MappingProxyType
from typing import Any

from dtfkit.engine.launchers.contract import Launcher, LauncherDescription, LauncherSpec, PoolStart
from dtfkit.engine.owner.calls import ERROR_POLICIES, RunHandle
from dtfkit.engine.owner.metrics import MetricLog
from dtfkit.engine.owner.runtime import ClusterRuntime, check_task_count
from dtfkit.engine.platform.notebook import cell_key as _cell_key
from dtfkit.engine.wire.layout import ClusterLayout, TaskId
from dtfkit.engine.wire.sources import PickledCall, pickle_call
from dtfkit.errors import DtfkitError, TaskNotRunning
from dtfkit.htmltable import html_table
from dtfkit.progress import start_display
from dtfkit.shown import shown

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
        link: emulated network links, to make bandwidth visible (loopback is
            effectively infinitely fast). ``"100mbit"`` gives every task a network
            namespace and address (``10.77.x.y``) of its own, joined to the others by a
            link of that rate both ways (a token bucket on what it sends and on what it
            receives: a transfer between two tasks runs at the slower one's rate).
            Per job or per task: ``{"ps": "50mbit", "worker": "200mbit"}``,
            ``{"worker:1": "10mbit", "default": "1gbit"}``; a task no key names has no
            limit. A key naming no task or job of this cluster (``"worker:7"`` with two
            workers, ``"evaluator"`` without one, ``"worker:01"``) is refused. Rates as tc writes them (``kbit``, ``mbit``, ``gbit``), 8kbit to 10gbit.
            A restarted task keeps its address and link. Tasks with
            links never come from the warm pool. ``None`` (default): every task shares one
            namespace over loopback. Refused with ``network="host"`` or where network
            namespaces are unavailable.
        delay: a one-way delay on the links, to make latency visible: ``"20ms"`` holds
            every message between two tasks' TensorFlow servers 20 ms before it arrives
            (a request and its reply: 40 ms), on top of the time ``link`` takes to carry
            it; S bytes at rate r arrive ``delay + S/r`` after they were sent. Per job or
            per task as ``link``: ``{"ps": "50ms", "default": "5ms"}`` (a task no key
            names: 0); between two tasks the larger delay holds. Times as tc writes them
            (``us``, ``ms``, ``s``, no space), 0 to 10 s. Gives every task its own namespace
            like ``link`` (without a rate limit if ``link`` is None). The delay applies to
            the servers' traffic (the addresses in ``cluster_spec``; a relay in front of
            each server holds it, see ``dtfkit.engine.task.relay``), not to sockets of your
            own. A restarted task keeps its delay. Refused where ``link`` is, and with
            ``start_servers=False`` or ``launcher=``.
        gpus: ``"auto"``, ``"share"`` or ``"none"`` (see ``dtfkit.engine.platform.gpu_plan``).
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
        pool: take the tasks from a warm pool (processes that imported TensorFlow
            ahead of need, see ``dtfkit.engine.launchers.pool``). ``None`` (default): on in a Jupyter
            kernel, off elsewhere, as ``DTFKIT_POOL=0``/``1`` says if set. ``True``:
            the process-wide pool; ``False``: start every task cold; or a
            ``TaskPool``. ``cluster.pool_note`` says what happened.
        max_tasks: the most tasks this cluster may have. ``None`` (default): what the
            machine allows (``dtfkit.engine.owner.runtime.task_limit()``: available memory and CPU
            cores; ``DTFKIT_MAX_TASKS`` overrides it). A larger cluster fails at once,
            before any process starts.
        echo: where the tasks' output goes, ``echo(task, line)``; default: printed in
            the cell that waits (``[worker:0] ...``).
        launcher: where the tasks run (``dtfkit.engine.launchers.contract``); default: local
            processes, from the warm pool when there is one (see ``pool``).
            ``dtfkit.engine.launchers.fake.FakeLauncher()`` runs plain Python tasks without
            TensorFlow, for fast tests of your own.

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
        link: str | dict[str, str] | None = None,
        delay: str | dict[str, str] | None = None,
        gpus: str = "auto",
        env: dict[str, str] | None = None,
        start_servers: bool = True,
        setup: Callable[[], Any] | None = None,
        show_tf_logs: bool = False,
        start_timeout: float = 120.0,
        progress: bool = True,
        name: str | None = None,
        pool: bool | Any | None = None,
        max_tasks: int | None = None,
        echo: Callable[[str, str], None] | None = None,
        launcher: Launcher | None = None,
    ):
        layout = ClusterLayout.from_counts(ps=ps, workers=workers, chief=chief, evaluator=evaluator)
        check_task_count(len(layout.tasks), max_tasks)  # before anything starts, a pool included
        self.name = name if name is not None else _cell_key()
        previous = _BY_NAME.get(self.name) if self.name else None
        if previous is not None and not previous.closed:
            previous.close()
            print(f"dtfkit: closed the cluster this cell started before ({previous.id})")
        # What ensure_running() needs to start a closed cluster again (None: a launcher of yours).
        self._launcher_spec: LauncherSpec | None = None
        for option, given in (("link", link), ("delay", delay)):
            if launcher is not None and given is not None:
                raise DtfkitError(
                    f"{option}= is an option of the local launcher: pass "
                    f"LocalLauncher({option}=...) as launcher= instead"
                )
        if delay is not None and not start_servers:
            from dtfkit.engine.launchers.local import DELAY_REFUSED_MODES

            raise DtfkitError(DELAY_REFUSED_MODES["noserve"])
        if launcher is None:
            launcher = _local_spec(network, pool, link, len(layout.tasks), delay)
            _check_link_keys(launcher.options.get("link"), launcher.options.get("delay"), layout)
        if isinstance(launcher, LauncherSpec):
            self._launcher_spec = launcher
            launcher = launcher.build()
        elif not isinstance(launcher, Launcher):
            raise DtfkitError(
                f"launcher must be a dtfkit.engine.launchers.contract.Launcher, not {shown(launcher)}"
            )
        else:  # a LocalLauncher of yours: its link= and delay= must name tasks of this cluster too
            _check_link_keys(getattr(launcher, "links", None), getattr(launcher, "delays", None), layout)
        self._runtime_options = dict(
            mode="serve" if start_servers else "noserve",
            gpus=gpus,
            env=env,
            show_tf_logs=show_tf_logs,
            start_timeout=start_timeout,
            progress=start_display(progress),
            setup_payload=None if setup is None else _pickle_call(setup, (), {}),
            max_tasks=max_tasks,
        )
        self._rt = ClusterRuntime(layout, launcher=launcher, echo=echo, **self._runtime_options)
        self._rt.start()
        if self.name:
            _BY_NAME[self.name] = self

    # ------------------------------------------------------------ properties
    @property
    def cluster_spec(self) -> dict[str, list[str]]:
        """The ClusterSpec dictionary every task was given."""
        return {job: list(hosts) for job, hosts in self._rt.snapshot().cluster.items()}

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
    def serves(self) -> bool:
        """True when dtfkit started each task's TensorFlow server (``start_servers=True``)."""
        return self._runtime_options["mode"] == "serve"

    @property
    def id(self) -> str:
        return self._rt.id

    @property
    def log_dir(self) -> str:
        return self._rt.log_dir

    def pids(self) -> dict[str, int]:
        """The pid of every process of the cluster."""
        return self._rt.pids()

    @property
    def echo(self) -> Callable[[str, str], None]:
        """Where the tasks' output goes: ``echo(task, line)``. Set it to send the output
        elsewhere (a widget's log, a list); ``None`` prints it in the waiting cell again."""
        return self._rt.echo

    @echo.setter
    def echo(self, echo: Callable[[str, str], None] | None) -> None:
        if echo is not None and not callable(echo):
            raise DtfkitError(f"echo must be a function echo(task, line) or None, not {echo!r}")
        self._rt.set_echo(echo)

    @property
    def pool_note(self) -> str:
        """Whether the tasks came warm from a pool, or why they started cold."""
        return self._start_note_of(self._rt.launcher_description) or "no warm pool"

    @property
    def adopted(self) -> dict[str, bool]:
        """``{"worker:0": True, ...}``: which tasks were warm pool processes."""
        return {view.name: view.adopted for view in self._rt.snapshot().tasks.values()}

    def status(self) -> dict[str, str]:
        """``{"worker:0": "running", "ps:0": "killed", ...}``."""
        return {view.name: view.status for view in self._rt.snapshot().tasks.values()}

    def address(self, task: str, index: int | None = None) -> str:
        """``"localhost:PORT"`` of a task (``"10.77.0.2:PORT"`` with ``link=``)."""
        view = self._rt.task_view(task, index)  # an unknown task is a clear error
        addresses = self._rt.snapshot().addresses
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
        name = getattr(fn, "__qualname__", "the function")
        # Claimed before anything is sent: a refused call must not leave work in the tasks.
        with self._rt.waiting(f"run({name})"):
            handle = self.submit(fn, args, kwargs, on=on, timeout=timeout, on_error=on_error, grace=grace)
            return handle.result()

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
        rt = self._rt
        rt.check_open()
        if not callable(fn):
            raise DtfkitError(f"run() needs a function, not {type(fn).__name__}")
        if on_error not in ERROR_POLICIES:
            raise DtfkitError(f"on_error must be one of {', '.join(ERROR_POLICIES)}, not {on_error!r}")
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
            raise DtfkitError(f"timeout must be a positive number of seconds or None, not {timeout!r}")
        if not (isinstance(grace, (int, float)) and grace >= 0):
            raise DtfkitError(f"grace must be a number of seconds >= 0, not {grace!r}")
        payload = _pickle_call(fn, tuple(args), dict(kwargs or {}))
        name = getattr(fn, "__qualname__", "the function")
        options = {"timeout": timeout, "on_error": on_error, "grace": grace}
        if on == "client":
            return self._submit_client(payload, name, options)
        current = rt.snapshot().tasks
        views = [current[t] for t in rt.layout.select(on)]
        for view in views:
            if not view.alive or not view.ready:
                raise TaskNotRunning(
                    f"{view.task} is {view.status}: nothing was run. Start it again with "
                    f"cluster.restart('{view.task}') (cluster.ensure_running() starts every task "
                    "that is down) or start a new cluster."
                )
        return RunHandle(rt, [view.task for view in views], payload, name, **options)

    def _submit_client(self, payload: PickledCall, name: str, options: dict) -> RunHandle:
        rt = self._rt
        client = rt.start_client()
        try:
            return RunHandle(rt, [client], payload, name, on_finish=lambda: rt.remove_task(client), **options)
        except BaseException:
            rt.remove_task(client)
            raise

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
            print(f"dtfkit: the cluster was closed; started it again ({self.id}, new addresses)")
            return self.tasks
        stale = self._rt.ensure_running(chosen)
        if stale:
            states = ", ".join(f"{task} ({state})" for task, state in stale.items())
            print(f"dtfkit: started again: {states}")
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
            launcher=self._launcher_spec.build(),
            echo=self._rt.echo,
            **self._runtime_options,
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
            self._rt.task_view(task, index)  # an unknown task is a clear error
        out = []
        for name in names:
            lines = self._rt.log_lines(name, everything=everything, tail=tail)
            out += [f"[{name}] {line}" for line in lines] if len(names) > 1 else lines
        return LogText("\n".join(out))

    # ------------------------------------------------------------------ repr
    def _described(self) -> LauncherDescription:
        return self._rt.launcher_description

    def _links(self) -> bool:
        return self._described().links is not None

    def _node_of(self) -> Callable[[str], str] | None:
        """The node of a task (first 8 hex digits) when the tasks run on several machines (Ray), else None."""
        nodes = self._described().nodes
        if nodes is None:
            return None
        return lambda task: nodes[task][:8] if nodes.get(task) else "-"

    def _columns(self) -> tuple[str, ...]:
        node = ("node",) if self._node_of() else ()
        return ("task", "role", "address", *node, "pid", "state") + (("link",) if self._links() else ())

    def _rows(self) -> list[tuple[str, ...]]:
        """One row per task: name, role, address, (node,) pid, state (and link, with ``link=``)."""
        rows = []
        described = self._described()
        link_of = None if described.links is None else (lambda task: _link_words(described, task))
        node_of = self._node_of()
        now = self._rt.snapshot()
        for task in now.layout.tasks:
            proc = now.tasks.get(task)
            address = now.addresses.get(task, "-") if task.serves else "(no server)"
            node = (node_of(task.name),) if node_of else ()
            row = (
                task.name,
                task.job,
                address,
                *node,
                str(proc.pid) if proc else "-",
                proc.status if proc else "-",
            )
            rows.append(row + (link_of(task.name),) if link_of else row)
        return rows

    def __repr__(self) -> str:
        state = "closed" if self.closed else self._network_note(self._described())
        lines = [f"{type(self).__name__} {self.id}: {_counts(self._rt.layout)}; {state}"]
        start = self._start_note()
        if start:
            lines.append(f"  start: {start}")
        for row in self._rows():
            cells = dict(zip(self._columns(), row, strict=True))
            lines.append(
                f"  {cells['task']:<12} {cells['address']:<18} "
                + (f"node {cells['node']:<8} " if "node" in cells else "")
                + f"pid {cells['pid']:<8} {cells['state']}"
                + (f"  link {cells['link']}" if "link" in cells else "")
            )
        dropped = self._rt.dropped_note()
        if dropped:
            lines.append(f"  logs: {dropped}")
        return "\n".join(lines)

    def _start_note(self) -> str:
        """How the tasks started (warm from the pool, or cold and why); empty without a pool."""
        return "" if self.closed else self._start_note_of(self._described())

    @staticmethod
    def _network_note(described: LauncherDescription) -> str:
        """The cluster's network, in words (the first line of its repr)."""
        return _network_words(described)

    @staticmethod
    def _start_note_of(described: LauncherDescription) -> str:
        """How the tasks started (warm from the pool, or cold and why); empty without a pool."""
        return _pool_words(described.start) if isinstance(described.start, PoolStart) else ""

    def _repr_html_(self) -> str:
        rt = self._rt
        described = self._described()
        warn = not described.isolated and not self.closed
        note = html.escape("closed" if self.closed else self._network_note(described))
        style = "color:#b00;font-weight:bold" if warn else "color:#060"
        table = html_table(self._columns(), self._rows())
        start = self._start_note()
        start_line = f"<br><span>start: {html.escape(start)}</span>" if start else ""
        lost = rt.dropped_note()
        dropped = f"<br><span style='color:#b60'>{html.escape(lost)}</span>" if lost else ""
        return (
            f"<div><b>dtfkit.{type(self).__name__}</b> <code>{html.escape(self.id)}</code> "
            f"— {html.escape(_counts(rt.layout))}<br>"
            f"<span style='{style}'>network: {note}</span>{start_line}"
            f"{table}"
            f"<small>logs: <code>{html.escape(rt.log_dir or '')}</code>{dropped}</small></div>"
        )


def _network_words(described: LauncherDescription) -> str:
    """``LauncherDescription``'s network as the cluster's repr says it."""
    network = described.network
    if network == "namespace":
        return f"isolated network namespace {described.namespace}"
    if network == "links":
        return (
            f"isolated, emulated links: each task its own network namespace, bridged in {described.namespace}"
        )
    if network == "host":
        return "host network (opted out): servers reachable from other machines"
    if network == "fallback":
        return f"NOT isolated: {described.why}; servers reachable from other machines"
    if network == "fake":
        return "fake tasks (no TensorFlow): host network, no servers"
    return ""


def _pool_words(start: PoolStart) -> str:
    """How a local cluster's tasks started, with a pool to choose from."""
    if start.cold:
        return f"started cold: {start.cold}"
    words = f"adopted {start.adopted} warm process(es) from pool {start.pool}"
    if start.waited:
        words += f" ({start.waited} finished importing TensorFlow while the cluster started)"
    if start.lost:
        words += f"; {start.lost} did not get warm and started cold"
    return words


def _link_words(described: LauncherDescription, task: str) -> str:
    """``"100mbit"``, ``"no limit"``, ``"100mbit, delay 20ms"``: ``task``'s link, as the cluster
    table shows it."""
    from dtfkit.engine.launchers.local import link_delay, link_rate
    from dtfkit.engine.platform import netns

    rate = link_rate(described.links, task)
    words = netns.format_rate(rate) if rate else "no limit"
    if described.delays is not None:
        words += f", delay {netns.format_delay(link_delay(described.delays, task))}"
    return words


def _check_link_keys(links, delays, layout: ClusterLayout) -> None:
    """Refuse ``link=``/``delay=`` keys naming no task of ``layout``, before anything starts."""
    from dtfkit.engine.launchers.local import check_plan_tasks

    names = [task.name for task in layout.tasks]
    check_plan_tasks("link", links, names)
    check_plan_tasks("delay", delays, names)


def _local_spec(network: str, pool, link, tasks: int, delay=None) -> LauncherSpec:
    """How to build this cluster's local launcher, ``link=`` and ``delay=`` checked once (see
    ``_local_launcher``)."""
    from dtfkit.engine.launchers.local import plan_delays, plan_links

    options = {"network": network, "pool": pool, "link": plan_links(link), "tasks": tasks}
    if delay is not None:
        options["delay"] = plan_delays(delay)
    return LauncherSpec(_local_launcher, MappingProxyType(options))


def _local_launcher(network: str, pool, link=None, tasks: int = 0, delay=None) -> Launcher:
    """Local processes, adopted from a warm pool when one is used (see ``LocalCluster(pool=)``).

    With ``link=`` the tasks start cold (the launcher says why in ``describe().start``)."""
    from dtfkit.engine.launchers import pool as pools
    from dtfkit.engine.launchers import prewarm
    from dtfkit.engine.launchers.local import LocalLauncher

    chosen = pool  # what the caller passed: pool=False remembers "no pool" for the next kernel
    if pool is None:
        pool = pools.enabled_by_default()
    links = link is not None or delay is not None
    if links and (pool is True or isinstance(pool, pools.TaskPool)):
        # fails here, before any pool starts
        launcher = LocalLauncher(network, link, delay=delay, cold=pools.LINKS_COLD)
        # the next kernel of this notebook warms nothing
        prewarm.first_cluster(0, None, "", "link=" if link is not None else "delay=")
        return launcher
    if pool is True:
        pool = pools.default_pool()
    if pool is False:
        if chosen is False:
            prewarm.first_cluster(0, None, "", "pool=False")
        return LocalLauncher(network, link, delay=delay)
    if isinstance(pool, pools.TaskPool):
        return pools.PoolLauncher(pool, network, link, tasks=tasks, delay=delay)
    raise DtfkitError(
        f"pool must be True, False, None or a dtfkit.engine.launchers.pool.TaskPool, not {shown(pool)}"
    )


def _counts(layout: ClusterLayout) -> str:
    counts = layout.counts()
    return ", ".join(f"{n} {job}" for job, n in counts.items())


def _pickle_call(fn: Callable, args: tuple, kwargs: dict) -> PickledCall:
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
