"""The processes of one cluster: ``Tasks`` starts, ends and restarts them.

Each start of a task is a new generation, so an event from an ended process is never taken
for one of its successor's. One ``reconcile(wanted, renew=...)`` brings the processes to what
is wanted: start, restart, ``ensure_running`` and client tasks all go through it. Every call
to the launcher is made here.

Example::

    >>> tasks.reconcile(list(tasks.procs), renew=[TaskId("worker", 1)])   # doctest: +SKIP
    [TaskId(job='worker', index=1)]
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import secrets
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from types import MappingProxyType

from dtfkit.engine.launchers.contract import Launcher, LauncherDescription
from dtfkit.engine.owner.events import Event, EventKind, Events
from dtfkit.engine.owner.output import NO_PROGRESS, Output
from dtfkit.engine.owner.process import ClusterView, TaskProcess
from dtfkit.engine.owner.settings import ClusterSettings
from dtfkit.engine.platform import state
from dtfkit.engine.wire import dumps, protocol
from dtfkit.engine.wire.layout import ClusterLayout, TaskId, cluster_dict, tf_config
from dtfkit.engine.wire.protocol import TaskConfig
from dtfkit.errors import ClusterStartError, DtfkitError

START_ATTEMPTS = 3


# How long a task that sent StartFailed may take to exit (it calls os._exit at once).
_EXIT_AFTER_START_ERROR = 10.0


class PortTaken(Exception):
    """A task could not bind the port reserved for it (another program took it)."""

    def __init__(self, task: str):
        super().__init__(task)
        self.task = task


class Tasks:
    """The processes of one cluster: spawn (through the launcher), watch, end, restart."""

    def __init__(
        self,
        layout: ClusterLayout,
        launcher: Launcher,
        *,
        settings: ClusterSettings,
        cluster_id: str,
        directory: str,
        task_env: Callable[[], dict[str, str]],
        cwd: str,
        gpu_plan: tuple[int, dict[str, tuple[str, bool]]],
        output: Output,
        events: Events,
    ):
        self.layout = layout
        self.launcher = launcher
        self.cluster_id = cluster_id
        self.directory = directory
        self.settings = settings
        self.task_env = task_env  # every task's environment (before per-task GPU settings)
        self.cwd = cwd
        self.n_gpus, self.gpu_plan = gpu_plan
        self.output = output
        self.events = events
        self.progress = settings.progress or NO_PROGRESS
        self.closed = False
        self.procs: dict[TaskId, TaskProcess] = {}
        self.addresses: dict[TaskId, str] = {}
        self.cluster: dict[str, list[str]] = {}
        self._gens = itertools.count(1)
        self._client_ids = itertools.count(0)
        self.authkey = secrets.token_bytes(16)
        self.control_address = os.path.join(directory, "control.sock")
        self.stacks_dir = os.path.join(directory, "stacks")
        os.makedirs(self.stacks_dir, mode=0o700, exist_ok=True)
        events.listen(self.control_address, self.authkey)

    # ------------------------------------------------------------------ views
    def describe_launcher(self) -> LauncherDescription:
        """What the launcher did so far, as facts (its only read: ``Launcher.describe()``)."""
        return self.launcher.describe()

    def snapshot(self) -> ClusterView:
        return ClusterView(
            self.layout,
            MappingProxyType(dict(self.addresses)),
            MappingProxyType({job: tuple(hosts) for job, hosts in self.cluster.items()}),
            MappingProxyType({t: p.view() for t, p in self.procs.items()}),
        )

    def task_process(self, task: str | TaskId, index: int | None = None) -> TaskProcess:
        task_id = TaskId.parse(task, index)
        if task_id not in self.procs:
            have = ", ".join(t.name for t in self.layout.tasks)
            raise DtfkitError(f"no task {task_id} in this cluster (it has {have})")
        return self.procs[task_id]

    def _bind_failed(self, proc: TaskProcess) -> None:
        """On a shared network another program may have taken the port: start everything again.
        A restart asks for its old port, which another process may hold on any network (in an
        isolated cluster, one of its own tasks): that is an error naming the port."""
        if proc.given_port is not None or not self.describe_launcher().isolated:
            raise PortTaken(proc.task.name)

    # ------------------------------------------------------------------ start
    def start(self) -> None:
        """Start every task of the layout and return once each one is serving (or raise)."""
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self.reconcile(self.layout.tasks, new_addresses=True)
                return
            except PortTaken as exc:
                if attempt == START_ATTEMPTS:
                    raise ClusterStartError(
                        f"{exc.task} could not bind its port {START_ATTEMPTS} times in a row "
                        "(another program took it between reservation and start); "
                        "try again, or use the default isolated network"
                    ) from None
                procs = list(self.procs.values())
                _end(procs)
                for proc in procs:  # so that none of their last lines shows up in a later wait
                    proc.output_closed.wait(timeout=10)
                self.procs.clear()

    def started(self) -> None:
        """Tell the launcher the start is over (succeeded or not)."""
        self.launcher.started()

    def reconcile(
        self, wanted: Iterable[TaskId], *, renew: Collection[TaskId] = (), new_addresses: bool = False
    ) -> list[TaskId]:
        """Bring the processes to ``wanted``; return the tasks started.

        Processes of tasks not in ``wanted`` are ended and forgotten. A wanted task with no
        process, or in ``renew`` (its old process is killed first), is started, on its old
        address, and waited for until it serves; then the state file is updated.
        ``new_addresses``: the started tasks report new ports and the ClusterSpec is made
        from them (a cluster's first start).
        """
        wanted = list(wanted)
        unwanted = [p for t, p in self.procs.items() if t not in wanted]
        for proc in unwanted:
            self.procs.pop(proc.task)
            self.events.forget(proc)
        if unwanted:
            self.end_tasks(unwanted)
        targets = [t for t in wanted if t not in self.procs or t in renew]
        for t in targets:
            old = self.procs.get(t)
            if old is not None:
                _end([old])
        if targets:
            self.start_tasks(targets, restart=not new_addresses)
            self.write_state()
        return targets

    def _config(self, task: TaskId, gen: int, port: int | None, env: dict[str, str]) -> TaskConfig:
        if task.job == "client":
            mode = "client"
        elif not task.serves:
            mode = "noserve"
        else:
            mode = self.settings.mode
        config = TaskConfig(
            task=task.name,
            gen=gen,
            mode=mode,
            control=self.control_address,
            authkey=self.authkey.hex(),
            port=port,
            cwd=self.cwd,
            stacks_file=dumps.stack_file(self.stacks_dir, task.name, gen),
            env=env,
        )
        if mode == "script":
            script = self.settings.script
            assert script is not None  # a cluster of mode "script" was given one
            config = dataclasses.replace(
                config, script=script.path, script_args=script.args, linger=script.linger
            )
        return config

    def _spawn(self, task: TaskId, port: int | None = None) -> TaskProcess:
        gen = next(self._gens)
        env = self.task_env()
        visible, growth = self.gpu_plan.get(task.name, ("", False))
        if self.n_gpus:
            env["CUDA_VISIBLE_DEVICES"] = visible
            if growth:
                env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
        config = self._config(task, gen, port, env)
        spawned_at = time.monotonic()
        handle = self.launcher.start(config)
        proc = TaskProcess(task, gen, handle, port, stacks_file=config.stacks_file, spawned_at=spawned_at)
        self.procs[task] = proc
        self.events.watch(proc)
        return proc

    def start_tasks(self, tasks: tuple[TaskId, ...] | list[TaskId], restart: bool = False) -> None:
        """Start ``tasks``, gather their ports, send the ClusterSpec, wait until all serve.

        ``restart=True``: the tasks keep the addresses they had (a client has none).
        """
        with self.events.waiting(f"the start of {describe(list(tasks))}"):
            self._start_tasks_now(tasks, restart)

    def _start_tasks_now(self, tasks: tuple[TaskId, ...] | list[TaskId], restart: bool) -> None:
        deadline = time.monotonic() + self.settings.start_timeout
        pending: dict[TaskId, TaskProcess] = {}
        for t in tasks:
            if time.monotonic() >= deadline:
                # Spawning counts: on a loaded machine starting processes alone can take long.
                raise ClusterStartError(
                    f"only {len(pending)} of {len(tasks)} tasks were started within "
                    f"{self.settings.start_timeout:g} s (spawning the processes took that long; the machine "
                    f"is busy); {t} and the rest were not started. Next step: start fewer tasks, "
                    "or pass a larger start_timeout."
                )
            pending[t] = self._spawn(t, port=_port_of(self.addresses[t]) if t in self.addresses else None)
        bar = self.progress([t.name for t in pending], f"starting {describe(list(pending))}")
        try:
            with self.output.folding_repeats(), self.output.live_output(self.events.post_line):
                if not restart:
                    self._wait(
                        lambda: all(p.port is not None for p in pending.values()),
                        deadline,
                        pending,
                        "report its port",
                    )
                    self.addresses = {
                        t: f"{p.handle.host}:{p.port}" for t, p in pending.items() if p.port is not None
                    }
                    self.cluster = cluster_dict(self.addresses)
                else:
                    # Its old port, once it says it bound it: a task that could not (another
                    # program took the port) says so instead, before it is sent anything.
                    self._wait(
                        lambda: all(
                            p.conn is not None and (p.port_reported or t.job == "client")
                            for t, p in pending.items()
                        ),
                        deadline,
                        pending,
                        "connect",
                    )
                for t, p in pending.items():
                    config = tf_config(self.cluster, t) if t.job != "client" else ""
                    p.send(protocol.Spec(self.cluster, config, *self._setup_fields()))

                def all_ready() -> bool:
                    bar.update(sum(p.ready for p in pending.values()))
                    return all(p.ready for p in pending.values())

                self._wait(all_ready, deadline, pending, "start serving")
            bar.done("restarted" if restart and any(t.job != "client" for t in pending) else "started")
        except PortTaken as exc:
            bar.failed(f"{exc.task} could not bind its port")
            if not restart:
                raise  # a first start: start() tries again on new ports
            # A restart keeps the old address, which another program took while the task was
            # down: no point in trying again. End the new processes so none stays "starting".
            _end(list(pending.values()))
            address = self.addresses.get(TaskId.parse(exc.task), "its old address")
            if self.describe_launcher().isolated:
                raise ClusterStartError(
                    f"{exc.task} could not be started again: another process in this cluster's own "
                    f"network holds its old address {address} (a socket a function opened on one of "
                    "its tasks, or a server one of them started, on that port). Next step: close that "
                    f"socket or restart the task that holds it, then call restart({exc.task!r}) again; "
                    "or close the cluster and start a new one (it picks free ports)."
                ) from None
            raise ClusterStartError(
                f"{exc.task} could not be started again: another program now holds its old address "
                f"{address} (on the host network ports are not reserved while a task is down). "
                "Next step: end that program and call restart() again, or close the cluster and start "
                "a new one (it picks free ports); the default isolated network avoids this."
            ) from None
        except KeyboardInterrupt:
            bar.failed("interrupted")
            raise
        except BaseException as exc:
            bar.failed(f"failed with {type(exc).__name__}")
            for proc in pending.values():
                if proc.start_error is not None:
                    # It said why and exits right after (os._exit): wait for that, so status() says
                    # "exited", not "starting".
                    proc.handle.wait(_EXIT_AFTER_START_ERROR)
            raise

    def _setup_fields(self) -> tuple[bytes | None, protocol.Sources | None]:
        """``Spec``'s setup payload and the source of its code."""
        setup = self.settings.setup_payload
        return (None, None) if setup is None else (setup.data, setup.sources)

    def _wait(
        self, done: Callable[[], bool], deadline: float, watched: dict[TaskId, TaskProcess], what: str
    ) -> None:
        """Handle events until ``done()``; a watched task dying or the deadline raises."""

        def check(event: Event) -> None:
            proc = self.events.current(event)
            if proc is None or proc.task not in watched:
                return
            # (A script that is already running may finish while its peers start.)
            exited = event.kind is EventKind.EXIT and not (self.settings.mode == "script" and proc.ready)
            if exited:
                self.events.drain()  # what it said last: why it failed, if it said
            if proc.start_failed_at == "bind":
                self._bind_failed(proc)
            if proc.start_error:
                raise ClusterStartError(
                    f"{proc.task} failed while starting:\n{proc.start_error.rstrip()}\n"
                    f"last log lines:\n{self.output.last_lines([proc.task.name])}"
                )
            if exited:
                raise ClusterStartError(
                    f"{proc.task} exited with code {event.payload} while starting; last log lines:\n"
                    f"{self.output.last_lines([proc.task.name])}\n"
                    "Next step: fix the error shown above, then start the cluster again."
                )

        if not self.events.wait_until(done, deadline, on_event=check):
            late = [t.name for t, p in watched.items() if not p.ready]
            raise ClusterStartError(
                f"{', '.join(late)} did not {what} within {self.settings.start_timeout:g} s; "
                f"last log lines:\n{self.output.last_lines(late)}\n"
                "Next step: look at the log above; on a busy machine pass a larger start_timeout."
            )

    # ------------------------------------------------------------- lifecycle
    def start_client(self) -> TaskId:
        """Start a fresh client task (no server, on the cluster's network); return it once ready."""
        task = TaskId("client", next(self._client_ids))
        try:
            self.reconcile([*self.procs, task])
        except BaseException:
            self.remove_task(task)
            raise
        return task

    def remove_task(self, task: TaskId) -> None:
        """End a task that is not part of the layout (a client) and forget it."""
        self.reconcile([t for t in self.procs if t != task])

    def end_tasks(self, procs: list[TaskProcess]) -> None:
        """Kill ``procs``, wait until they are gone (bounded) and update the state file."""
        _end(procs)
        self.write_state()

    def restart(self, task: TaskId | None) -> None:
        """Start a task again on its old address (all dead tasks when ``task`` is None)."""
        if task is None:
            targets = [t for t, p in self.procs.items() if not p.alive]
        else:
            targets = [task]
        self.reconcile(list(self.procs), renew=targets)

    def ensure_running(self, fresh: Collection[TaskId]) -> dict[TaskId, str]:
        """Start again the tasks of the layout that are not running and idle, and those of
        ``fresh`` that have run a call; returns ``{task: why}``."""
        stale = {}
        for task in self.layout.tasks:
            proc = self.procs.get(task)
            if proc is None or proc.status != "running":
                stale[task] = proc.status if proc is not None else "missing"
            elif task in fresh and proc.calls:
                stale[task] = "it ran a call before"
        wanted = [*self.layout.tasks, *(t for t in self.procs if t not in self.layout.tasks)]
        self.reconcile(wanted, renew=list(stale))
        return stale

    def write_state(self) -> None:
        if self.closed:
            return
        processes = [p.handle.identity for p in self.procs.values() if p.alive]
        processes += [dict(p) for p in self.describe_launcher().processes]
        state.write_state(self.directory, self.cluster_id, processes, describe(list(self.layout.tasks)))

    def close(self) -> None:
        """End every process, then the launcher (and what it shares: an anchor)."""
        self.closed = True
        _end(list(self.procs.values()))
        self.launcher.close()

    def pids(self) -> dict[str, int]:
        """Pid of every task process, and of the launcher's own (e.g. the namespace anchor, ``"netns"``)."""
        out = {p.task.name: p.pid for p in self.procs.values()}
        out.update(self.describe_launcher().pids)
        return out


def _end(procs: list[TaskProcess], timeout: float = 10.0) -> None:
    """Kill ``procs`` and wait (``timeout`` s each at most) until they are gone."""
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.handle.wait(timeout)


def _port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def describe(tasks: list[TaskId]) -> str:
    """``"1 ps + 2 workers"``."""
    counts = Counter(t.job for t in tasks)
    return " + ".join(f"{n} {job}" + ("s" if n > 1 and job == "worker" else "") for job, n in counts.items())
