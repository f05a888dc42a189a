"""The processes of one local cluster: start, watch, message, kill, restart, close.

``LocalCluster`` (function mode) and ``launch`` (script mode) are built on
``ClusterRuntime``. Everything the tasks say arrives as events on one queue that
the caller's thread waits on, so output is printed by the thread of the cell that
asked for the work and never lands in another cell.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import itertools
import os
import queue
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Listener
from typing import Any

from dtfkit.engine import control, gpu_plan, protocol, state
from dtfkit.engine.launcher import Launcher, TaskHandle
from dtfkit.engine.layout import ClusterLayout, TaskId, cluster_dict, tf_config
from dtfkit.engine.logs import LogBook, RepeatFolder
from dtfkit.engine.metrics import MetricLog
from dtfkit.engine.protocol import TaskConfig
from dtfkit.engine.sources import PickledCall
from dtfkit.engine.taskenv import task_environment
from dtfkit.errors import ClusterStartError, DtfkitError, TaskNotRunning
from dtfkit.progress import Progress

TASK_MODES = ("serve", "noserve", "script")  # what the cluster's tasks do (a client task: "client")
START_ATTEMPTS = 3
LAST_LINES = 15
MAX_TASKS_ENV = "DTFKIT_MAX_TASKS"
# What one idle task costs: a Python interpreter that imported TensorFlow holds about
# 0.6 GB resident, of which about half is shared libraries (measured PSS ~0.3 GB).
TASK_MEMORY_BYTES = 300 * 1024 * 1024
TASKS_PER_CORE = 4
MIN_TASK_LIMIT = 8


def task_limit() -> tuple[int, str]:
    """How many tasks one cluster may have on this machine, and why.

    ``DTFKIT_MAX_TASKS`` if set; else the smaller of what the available memory holds
    (``TASK_MEMORY_BYTES`` each) and ``TASKS_PER_CORE`` per CPU core (at least
    ``MIN_TASK_LIMIT``).
    """
    raw = os.environ.get(MAX_TASKS_ENV)
    if raw:
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value < 1:
            raise DtfkitError(
                f"{MAX_TASKS_ENV}={raw!r} is not a positive whole number of tasks; unset it or fix it"
            )
        return value, f"{MAX_TASKS_ENV}={value}"
    import psutil

    cores = os.cpu_count() or 1
    by_cores = max(MIN_TASK_LIMIT, TASKS_PER_CORE * cores)
    available = psutil.virtual_memory().available
    by_memory = max(1, int(available // TASK_MEMORY_BYTES))
    if by_memory < by_cores:
        why = (
            f"{available / 2**30:.1f} GB of memory is available and each task "
            f"(a TensorFlow process) needs about {TASK_MEMORY_BYTES / 2**30:.1f} GB"
        )
        return by_memory, why
    return (
        by_cores,
        f"this machine has {cores} CPU core(s), and {TASKS_PER_CORE} tasks per core is the most it runs well",
    )


def check_task_count(n: int, max_tasks: int | None = None) -> None:
    """Refuse a cluster of ``n`` tasks beyond the machine's limit (``max_tasks`` overrides it)."""
    if max_tasks is not None:
        if isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1:
            raise DtfkitError(f"max_tasks must be a positive whole number or None, not {max_tasks!r}")
        return  # if n > max_tasks, the caller's own limit applies
    limit, why = task_limit()
    if n > limit:
        raise DtfkitError(
            f"a cluster of {n} tasks is more than this machine allows ({limit}): {why}. "
            "Every task is its own TensorFlow process, so too many can exhaust a shared "
            "machine. Next step: ask for fewer tasks (a typo in workers=?), or if you are sure, "
            f"raise the limit with max_tasks={n} or the {MAX_TASKS_ENV} environment variable."
        )


_OPEN: set[ClusterRuntime] = set()
_OPEN_LOCK = threading.Lock()


@atexit.register
def _close_all_at_exit() -> None:
    for runtime in list(_OPEN):
        runtime.close()


@dataclass
class Event:
    """Something that happened to a task, in the order the owner learnt of it."""

    kind: str  # hello (payload: its connection) | msg (a protocol message) | exit (code) | log (line)
    task: str
    gen: int = 0  # the task's generation (log: the line's number)
    payload: Any = None


@dataclass(frozen=True)
class Script:
    """What every task of a ``mode="script"`` cluster runs (see ``dtfkit.launch``)."""

    path: str
    args: tuple[str, ...] = ()
    linger: bool = False  # a finished worker keeps serving until the launcher ends the cluster


@dataclass
class CallInbox:
    """What the tasks answered to one call, as the runtime routes it (by call id)."""

    call_id: int
    replies: dict[TaskId, protocol.Result | protocol.Error] = field(default_factory=dict)
    stacks: dict[TaskId, str] = field(default_factory=dict)
    flushed: set[TaskId] = field(default_factory=set)  # tasks whose output of the call is all in


class TaskProcess:
    """One task, as its owner sees it: a launcher's handle plus what the protocol said."""

    def __init__(self, task: TaskId, gen: int, handle: TaskHandle, port: int | None):
        self.task = task
        self.gen = gen
        self.handle = handle
        self.port = port
        self.conn = handle.connection
        self.send_lock = threading.Lock()
        self.ready = False
        self.busy_with: int | None = None
        self.calls = 0  # calls sent to this process (ensure_running(fresh=) starts a used one again)
        self.killed = False
        self.start_error: str | None = None
        self.output_closed = threading.Event()  # set once every line it printed is in the log book
        self.script_code: int | None = None  # a lingering launched script's exit code

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
        code = self.handle.poll()
        if code is None:
            if not self.ready:
                return "starting"
            return "busy" if self.busy_with is not None else "running"
        if self.killed:
            return "killed"
        return f"exited ({code})"

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


class ClusterRuntime:
    """Starts and owns the processes of one cluster. ``LocalCluster`` and ``launch`` are its faces.

    Where the tasks run is the launcher's business (``dtfkit.engine.launcher``); what
    they say arrives as ``Event`` s on one queue, which the thread that waits (one at a
    time, see ``waiting()``) pumps with ``pump()``.

    Example::

        >>> runtime = ClusterRuntime(ClusterLayout.from_counts(workers=2), launcher=LocalLauncher())  # doctest: +SKIP
        >>> runtime.start()                                                       # doctest: +SKIP
        >>> with runtime.waiting("my call"), runtime.live_output():               # doctest: +SKIP
        ...     event = runtime.pump(deadline=time.monotonic() + 5)
        >>> runtime.close()                                                       # doctest: +SKIP
    """

    def __init__(
        self,
        layout: ClusterLayout,
        *,
        launcher: Launcher | None = None,
        mode: str = "serve",
        gpus: str = "auto",
        env: dict[str, str] | None = None,
        show_tf_logs: bool = False,
        start_timeout: float = 120.0,
        progress: bool = True,
        script: Script | None = None,
        echo: Callable[[str, str], None] | None = None,
        cwd: str | None = None,
        setup_payload: PickledCall | None = None,
        max_tasks: int | None = None,
    ):
        check_task_count(len(layout.tasks), max_tasks)
        if max_tasks is not None and len(layout.tasks) > max_tasks:
            raise DtfkitError(
                f"a cluster of {len(layout.tasks)} tasks is more than max_tasks={max_tasks} allows; "
                "ask for fewer tasks or raise max_tasks"
            )
        if mode not in TASK_MODES:
            raise DtfkitError(f"unknown task mode {mode!r}")
        if (mode == "script") != (script is not None):
            raise DtfkitError("mode='script' needs script=Script(...), and only it does")
        if not (isinstance(start_timeout, (int, float)) and start_timeout > 0):
            raise DtfkitError(f"start_timeout must be a positive number of seconds, not {start_timeout!r}")
        if launcher is None:
            from dtfkit.engine.local import LocalLauncher

            launcher = LocalLauncher()
        self.launcher = launcher
        self.layout = layout
        self.mode = mode
        self.gpu_policy = gpus
        self.extra_env = _check_env(env)
        self.setup_payload = setup_payload
        self.show_tf_logs = show_tf_logs
        self.start_timeout = float(start_timeout)
        self.progress = progress
        self.script = script  # mode="script": what every task runs (script, args, linger)
        self.cwd = cwd or os.getcwd()
        self.echo = echo or print_line
        self.closed = False
        self.procs: dict[TaskId, TaskProcess] = {}
        self.addresses: dict[TaskId, str] = {}
        self.cluster: dict[str, list[str]] = {}
        self.events: queue.Queue[Event] = queue.Queue()
        self.metrics = MetricLog()
        self.printed_seq = 0  # the number of the last log line echoed
        self._folder: RepeatFolder | None = None  # holds start-up chatter while tasks start
        self.started_at = time.time()
        self._calls: dict[int, CallInbox] = {}
        self._call_ids = itertools.count(1)
        self._gens = itertools.count(1)
        self._client_ids = itertools.count(0)
        self._threads: list[threading.Thread] = []
        self._conns: list = []
        self._wait_lock = threading.RLock()  # see waiting()
        self._wait_holder: tuple[str, str] | None = None
        # Validated before anything is created on disk (an unknown policy raises).
        self._n_gpus = gpu_plan.count_gpus()  # may ask nvidia-smi: once per cluster, not per task
        self._gpu_plan = gpu_plan.plan_visible_devices([t.name for t in layout.tasks], self._n_gpus, gpus)
        self.id, self.dir = state.new_cluster_dir()
        self.logbook = LogBook(os.path.join(self.dir, "logs"))
        self.logbook.show_noise = show_tf_logs
        self._authkey = secrets.token_bytes(16)
        self.control_address = os.path.join(self.dir, "control.sock")
        # No authkey here: the handshake runs in each connection's own thread (see
        # _read_messages), so one stalled task cannot hold up the others' connections.
        self._listener = Listener(self.control_address)
        with _OPEN_LOCK:
            _OPEN.add(self)
        self._spawn_thread(self._accept_loop, "dtfkit-accept")

    # ----------------------------------------------------------- properties
    @property
    def isolated(self) -> bool:
        return self.launcher.describe().isolated

    @property
    def waiting_for(self) -> str | None:
        """What the thread that waits on this cluster now waits for (None: nobody waits)."""
        holder = self._wait_holder
        return None if holder is None else holder[1]

    # ------------------------------------------------------------------ start
    def start(self) -> None:
        """Start every task and return once each one is serving (or raise)."""
        try:
            self._start_all_tasks()
            self._write_state()
        except BaseException:
            self.launcher.started()
            self.close()
            raise
        self.launcher.started()

    def _start_all_tasks(self) -> None:
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self.start_tasks(self.layout.tasks)
                return
            except _PortTaken as exc:
                if attempt == START_ATTEMPTS:
                    raise ClusterStartError(
                        f"{exc.task} could not bind its port {START_ATTEMPTS} times in a row "
                        "(another program took it between reservation and start); "
                        "try again, or use the default isolated network"
                    ) from None
                self._end_all_tasks()

    def _end_all_tasks(self) -> None:
        procs = list(self.procs.values())
        for proc in procs:
            proc.kill()
        self._reap(procs)
        for proc in procs:  # so that none of their last lines shows up in a later wait
            proc.output_closed.wait(timeout=10)
        self.procs.clear()

    def task_env(self) -> dict[str, str]:
        """The environment every task of this cluster starts with (before per-task GPU settings)."""
        return task_environment(
            self.id, self.dir, extra=self.extra_env, cwd=self.cwd, show_tf_logs=self.show_tf_logs
        )

    def _config(self, task: TaskId, gen: int, port: int | None, env: dict[str, str]) -> TaskConfig:
        if task.job == "client":
            mode = "client"
        elif not task.serves:
            mode = "noserve"
        else:
            mode = self.mode
        config = TaskConfig(
            task=task.name,
            gen=gen,
            mode=mode,
            control=self.control_address,
            authkey=self._authkey.hex(),
            port=port,
            cwd=self.cwd,
            env=env,
        )
        if mode == "script":
            script = self.script
            config = dataclasses.replace(
                config, script=script.path, script_args=script.args, linger=script.linger
            )
        return config

    def _spawn(self, task: TaskId, port: int | None = None) -> TaskProcess:
        gen = next(self._gens)
        env = self.task_env()
        visible, growth = self._gpu_plan.get(task.name, ("", False))
        if self._n_gpus:
            env["CUDA_VISIBLE_DEVICES"] = visible
            if growth:
                env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
        handle = self.launcher.start(self._config(task, gen, port, env))
        proc = TaskProcess(task, gen, handle, port)
        self.procs[task] = proc
        if handle.connection is not None:  # adopted: connected and greeted already
            self._conns.append(handle.connection)
            self.events.put(Event("hello", task.name, gen, handle.connection))
            self._spawn_thread(
                lambda: self._read_connection(handle.connection, task.name, gen), f"dtfkit-conn-{task.name}"
            )
        self._spawn_thread(lambda: self._read_output(proc), f"dtfkit-log-{task.name}")
        return proc

    def start_tasks(self, tasks: tuple[TaskId, ...] | list[TaskId], restart: bool = False) -> None:
        """Start ``tasks``, gather their ports, send the ClusterSpec, wait until all serve.

        ``restart=True``: the tasks keep the addresses they had (a client has none).
        """
        with self.waiting(f"the start of {_describe(list(tasks))}"):
            self._start_tasks_now(tasks, restart)

    def _start_tasks_now(self, tasks: tuple[TaskId, ...] | list[TaskId], restart: bool) -> None:
        deadline = time.monotonic() + self.start_timeout
        pending: dict[TaskId, TaskProcess] = {}
        for t in tasks:
            if time.monotonic() >= deadline:
                # Spawning counts: on a loaded machine starting processes alone can take long.
                raise ClusterStartError(
                    f"only {len(pending)} of {len(tasks)} tasks were started within "
                    f"{self.start_timeout:g} s (spawning the processes took that long; the machine "
                    f"is busy); {t} and the rest were not started. Next step: start fewer tasks, "
                    "or pass a larger start_timeout."
                )
            pending[t] = self._spawn(t, port=self.addresses.get(t) and _port_of(self.addresses[t]))
        bar = Progress(
            [t.name for t in pending], f"starting {_describe(list(pending))}", enabled=self.progress
        )
        try:
            with self.folding_repeats(), self.live_output():
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
                    self._wait(
                        lambda: all(
                            p.conn is not None and (p.port is not None or t.job == "client")
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
        except _PortTaken as exc:
            bar.failed(f"{exc.task} could not bind its port")
            raise
        except KeyboardInterrupt:
            bar.failed("interrupted")
            raise
        except BaseException as exc:
            bar.failed(f"failed with {type(exc).__name__}")
            raise

    def start_client(self) -> TaskProcess:
        """Start a fresh client task (no server, on the cluster's network) and return it once ready."""
        self.check_open()
        task = TaskId("client", next(self._client_ids))
        try:
            self.start_tasks([task], restart=True)
        except BaseException:
            self.remove_task(task)
            raise
        return self.procs[task]

    def remove_task(self, task: TaskId) -> None:
        """End a task that is not part of the layout (a client) and forget it."""
        proc = self.procs.pop(task, None)
        if proc is not None:
            self.end_tasks([proc])

    # ----------------------------------------------------------------- events
    def _spawn_thread(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def _accept_loop(self) -> None:
        control.serve(self._listener, lambda: self.closed, self._read_messages, "dtfkit-conn")

    def _read_messages(self, conn) -> None:
        self._conns.append(conn)  # close() shuts it down, a stalled handshake's included
        hello = control.first_message(conn, self._authkey, protocol.Hello)
        if hello is None:
            return
        self.events.put(Event("hello", hello.task, hello.gen, conn))
        self._read_connection(conn, hello.task, hello.gen)

    def _read_connection(self, conn, name: str, gen: int) -> None:
        """Turn what one task sends into events (the connection is authenticated already)."""
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return
            if isinstance(message, protocol.Metric):
                self.metrics.add(name, message.row)
            else:
                self.events.put(Event("msg", name, gen, message))

    def _read_output(self, proc: TaskProcess) -> None:
        name = proc.task.name
        while True:
            try:
                raw = proc.handle.read_line()
            except (OSError, ValueError):  # the stream was closed under us
                break
            if not raw:
                break
            try:
                self._take_line(proc, raw.decode("utf-8", errors="replace").rstrip("\n"))
            except Exception as exc:  # noqa: BLE001 - one odd line must not end the reader
                self.logbook.add(name, f"[dtfkit: could not take a line of output: {exc!r}]")
        proc.output_closed.set()
        proc.handle.close_output()
        code = proc.handle.wait()
        self.events.put(Event("exit", name, proc.gen, code))

    def _take_line(self, proc: TaskProcess, text: str) -> None:
        name = proc.task.name
        done = protocol.parse_done_mark(text)
        if done is not None:
            before, kind, number = done
            if before:  # the call's last output had no newline
                self.logbook.add(name, before)
            self.events.put(Event("msg", name, proc.gen, protocol.done_message(kind, number)))
            return
        # Progress bars redraw with carriage returns: keep the last state.
        self.logbook.add(name, text.split("\r")[-1] if "\r" in text else text)

    def _handle(self, event: Event) -> TaskProcess | None:
        """Apply an event to the task it concerns; returns that task (current generation only)."""
        if event.kind == "log":
            self._echo(event.gen, event.task, event.payload)
            return None
        proc = self._current(event)
        if proc is None:
            return None
        if event.kind == "hello":
            proc.conn = event.payload
        elif event.kind == "msg":
            self._apply(proc, event.payload)
        return proc

    def _apply(self, proc: TaskProcess, message: tuple) -> None:
        if isinstance(message, protocol.Port):
            proc.port = message.port
        elif isinstance(message, protocol.Ready):
            proc.ready = True
        elif isinstance(message, (protocol.Result, protocol.Error)):
            inbox = self._calls.get(message.call_id)
            if inbox is not None:  # else a call given up on: its late answer is dropped
                inbox.replies[proc.task] = message
        elif isinstance(message, protocol.OutputDone):
            inbox = self._calls.get(message.call_id)
            if inbox is not None:
                inbox.flushed.add(proc.task)
        elif isinstance(message, protocol.Stacks):
            inbox = self._calls.get(message.call_id)
            if inbox is not None:
                inbox.stacks[proc.task] = message.text
        elif isinstance(message, protocol.ScriptDone):
            proc.script_code = message.code
        elif isinstance(message, protocol.StartFailed):
            proc.start_error = message.traceback
            if message.stage == "bind" and not self.isolated:
                raise _PortTaken(proc.task.name)

    def pump(self, deadline: float | None) -> Event | None:
        """Wait for the next event until ``deadline`` (``time.monotonic()``; None: no bound),
        apply it, and return it; None once the deadline passed. Call it inside ``waiting()``."""
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            event = self.events.get(timeout=timeout)
        except queue.Empty:
            return None
        self._handle(event)
        return event

    def drain(self) -> None:
        """Apply every event already queued, without waiting."""
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return
            self._handle(event)

    def _setup_fields(self) -> tuple[bytes | None, protocol.Sources | None]:
        """``Spec``'s setup payload and the source of its code."""
        setup = self.setup_payload
        return (None, None) if setup is None else (setup.data, setup.sources)

    def _wait(
        self,
        done: Callable[[], bool],
        deadline: float,
        watched: dict[TaskId, TaskProcess],
        what: str,
    ) -> None:
        """Handle events until ``done()``; a watched task dying or the deadline raises."""
        while not done():
            event = self.pump(deadline)
            if event is None:
                late = [t.name for t, p in watched.items() if not p.ready]
                raise ClusterStartError(
                    f"{', '.join(late)} did not {what} within {self.start_timeout:g} s; "
                    f"last log lines:\n{self.last_lines(late)}\n"
                    "Next step: look at the log above; on a busy machine pass a larger start_timeout."
                )
            proc = self._current(event)
            if proc is None or proc.task not in watched:
                continue
            if proc.start_error:
                raise ClusterStartError(
                    f"{proc.task} failed while starting:\n{proc.start_error.rstrip()}\n"
                    f"last log lines:\n{self.last_lines([proc.task.name])}"
                )
            if event.kind == "exit" and not (self.mode == "script" and proc.ready):
                # (A script that is already running may finish while its peers start.)
                self.drain()
                raise ClusterStartError(
                    f"{proc.task} exited with code {event.payload} while starting; last log lines:\n"
                    f"{self.last_lines([proc.task.name])}\n"
                    "Next step: fix the error shown above, then start the cluster again."
                )

    def _current(self, event: Event) -> TaskProcess | None:
        """The task an event concerns, if it is from the task's current generation."""
        if event.kind == "log":
            return None
        proc = next((p for p in self.procs.values() if p.task.name == event.task), None)
        return proc if proc is not None and proc.gen == event.gen else None

    # ------------------------------------------------------------------ calls
    def open_call(self) -> CallInbox:
        """A new call id, and the inbox its answers are routed to until ``close_call()``."""
        inbox = CallInbox(next(self._call_ids))
        self._calls[inbox.call_id] = inbox
        return inbox

    def close_call(self, inbox: CallInbox) -> None:
        self._calls.pop(inbox.call_id, None)

    # ----------------------------------------------------------------- output
    def last_lines(self, names: list[str], since: int | None = None) -> str:
        """The last lines of each task (only those after line number ``since``, if given)."""
        parts = []
        for name in names:
            lines = self.logbook.lines(name, tail=LAST_LINES, since=since or 0)
            if lines:
                parts.append("\n".join(f"  [{name}] {line}" for line in lines))
            elif since is not None:
                parts.append(
                    f"  [{name}] (it printed nothing during this call; see {self.logbook.path(name)})"
                )
            else:
                parts.append(
                    f"  [{name}] (nothing besides TensorFlow's start-up messages; see {self.logbook.path(name)})"
                )
        return "\n".join(parts)

    @contextlib.contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """Claim the cluster's event queue for this thread while it waits for ``what``.

        One thread at a time: two threads waiting on the one queue would take each
        other's events, and one of them would wait for ever. A second thread is refused.
        """
        if not self._wait_lock.acquire(blocking=False):
            holder = self._wait_holder
            raise DtfkitError(
                f"cluster {self.id} is already waiting for {holder[1] if holder else 'something'} in "
                f"thread {holder[0] if holder else '?'!r}; dtfkit waits for one thing at a time per "
                f"cluster, so {what} cannot wait in thread {threading.current_thread().name!r} too. "
                "Next step: wait from the thread that is already waiting (handle.result()), one call "
                "after another, or start a separate cluster for this thread."
            )
        outer = self._wait_holder
        self._wait_holder = (threading.current_thread().name, what)
        try:
            yield
        finally:
            self._wait_holder = outer
            self._wait_lock.release()

    @contextlib.contextmanager
    def live_output(self, since: int | None = None) -> Iterator[None]:
        """While the caller waits, echo task output in the caller's thread (its cell).

        Lines after number ``since`` (default: from now on) that arrived while nobody
        was waiting are echoed first; what is left when the block ends, last.
        """
        self.printed_seq = max(self.printed_seq, self.logbook.seq if since is None else since)
        self.logbook.listener = lambda seq, task, line: self.events.put(Event("log", task, seq, line))
        for seq, task, line in self.logbook.since(self.printed_seq):
            self._echo(seq, task, line)
        try:
            yield
        finally:
            self.logbook.listener = None
            for seq, task, line in self.logbook.since(self.printed_seq):
                self._echo(seq, task, line)

    def _echo(self, seq: int, task: str, line: str) -> None:
        if seq > self.printed_seq:
            self.printed_seq = seq
            if self._folder is not None:
                self._folder.take(task, line)
            else:
                self.echo(task, line)

    @contextlib.contextmanager
    def folding_repeats(self) -> Iterator[None]:
        """While tasks start, hold TensorFlow's start-up chatter and echo each message
        once at the end (``logs.RepeatFolder``), not once per task.

        Enter it before ``live_output()``, so that the lines that block echoes last are held too.

        Example::

            >>> with runtime.folding_repeats(), runtime.live_output():  # doctest: +SKIP
            ...     runtime.pump(deadline=time.monotonic() + 5)
        """
        folder = RepeatFolder(self.echo)
        outer, self._folder = self._folder, folder
        try:
            yield
        finally:
            self._folder = outer
            folder.flush()

    # -------------------------------------------------------------- lifecycle
    def task_process(self, task: str | TaskId, index: int | None = None) -> TaskProcess:
        task_id = TaskId.parse(task, index)
        if task_id not in self.procs:
            have = ", ".join(t.name for t in self.layout.tasks)
            raise DtfkitError(f"no task {task_id} in this cluster (it has {have})")
        return self.procs[task_id]

    def kill(self, task: str | TaskId, index: int | None = None) -> None:
        """Kill one task with SIGKILL, as a crash would (for fault-injection lessons)."""
        self.end_tasks([self.task_process(task, index)])

    def end_tasks(self, procs: list[TaskProcess]) -> None:
        """Kill ``procs``, wait until they are gone (bounded) and update the state file."""
        for proc in procs:
            proc.kill()
        self._reap(procs)
        self._write_state()

    def restart(self, task: str | TaskId | None = None, index: int | None = None) -> None:
        """Start a task again on its old address (all dead tasks when ``task`` is None)."""
        self.check_open()
        with self.waiting("restart()"):  # before anything is killed: a refusal changes nothing
            if task is None:
                targets = [t for t, p in self.procs.items() if not p.alive]
            else:
                targets = [self.task_process(task, index).task]
            self._restart_now(targets)

    def ensure_running(self, fresh: list[TaskId] | None = None) -> dict[TaskId, str]:
        """Start again, on their old addresses, the tasks of the layout that are not running
        and idle, and those of ``fresh`` that have run a call; returns ``{task: why}``
        (empty: nothing to do)."""
        self.check_open()
        fresh = set(fresh or ())
        with self.waiting("ensure_running()"):
            self.drain()  # deaths, readiness and answers that arrived while nobody waited
            stale = {}
            for task in self.layout.tasks:
                proc = self.procs.get(task)
                if proc is None or proc.status != "running":
                    stale[task] = proc.status if proc is not None else "missing"
                elif task in fresh and proc.calls:
                    stale[task] = "it ran a call before"
            self._restart_now(list(stale))
        return stale

    def _restart_now(self, targets: list[TaskId]) -> None:
        """Kill ``targets`` (those still alive) and start them again; inside ``waiting()``."""
        for t in targets:
            old = self.procs.get(t)
            if old is not None:
                old.kill()
                self._reap([old])
        if targets:
            self.start_tasks(targets, restart=True)
            self._write_state()

    def _reap(self, procs: list[TaskProcess], timeout: float = 10.0) -> None:
        for proc in procs:
            proc.handle.wait(timeout)

    def _write_state(self) -> None:
        if self.closed:
            return
        processes = [p.identity for p in self.procs.values() if p.alive]
        processes += [dict(p) for p in self.launcher.describe().processes]
        state.write_state(self.dir, self.id, processes, _describe(list(self.layout.tasks)))

    def check_open(self) -> None:
        """Raise if the cluster is closed."""
        if self.closed:
            raise DtfkitError(
                "this cluster is closed; cluster.ensure_running() starts it again (new addresses), "
                "or start a new one"
            )

    def close(self) -> None:
        """End every process of the cluster. Safe to call more than once."""
        if self.closed:
            return
        self.closed = True
        procs = list(self.procs.values())
        for proc in procs:
            proc.kill()
        self._reap(procs)
        self.launcher.close()
        # What a task started in a session of its own escaped its process group; its
        # environment still names this cluster.
        state.end_marked_processes(self.id)
        control.stop_listening(self._listener, self.control_address)
        for conn in self._conns:  # ends reader threads, a stalled handshake's included
            try:
                # shutdown() wakes a thread blocked reading the socket; close() would not.
                with socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as dup:
                    dup.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)
        self.logbook.close()
        state.remove_state(self.dir)
        with _OPEN_LOCK:
            _OPEN.discard(self)

    def __enter__(self) -> ClusterRuntime:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def pids(self) -> dict[str, int]:
        """Pid of every task process, and of the launcher's own (e.g. the namespace anchor, ``"netns"``)."""
        out = {p.task.name: p.pid for p in self.procs.values()}
        out.update(self.launcher.describe().pids)
        return out


class _PortTaken(Exception):
    def __init__(self, task: str):
        super().__init__(task)
        self.task = task


def _port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def _check_env(env: dict[str, str] | None) -> dict[str, str]:
    """``env=`` as strings; refuse what would silently become a wrong value (None, objects)."""
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise DtfkitError(f"env must be a dict of variable names to strings, not {type(env).__name__}")
    out = {}
    for key, value in env.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise DtfkitError(f"env: {key!r} is not a valid environment variable name")
        if isinstance(value, bool) or not isinstance(value, (str, int, float, os.PathLike)):
            raise DtfkitError(
                f"env[{key!r}] is {value!r}: environment variables hold strings. Next step: pass a "
                "string (e.g. '1'), or leave the variable out to keep the notebook's value"
            )
        text = os.fspath(value) if isinstance(value, os.PathLike) else str(value)
        if "\0" in text:
            raise DtfkitError(
                f"env[{key!r}] contains a NUL character, which no environment variable can hold"
            )
        out[key] = text
    return out


def _describe(tasks: list[TaskId]) -> str:
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t.job] = counts.get(t.job, 0) + 1
    return " + ".join(f"{n} {job}" + ("s" if n > 1 and job == "worker" else "") for job, n in counts.items())


def print_line(task: str, line: str) -> None:
    """The default echo: ``[worker:0] line``, printed (in the cell that waits)."""
    print(f"[{task}] {line}", flush=True)
