"""The processes of one local cluster: start, watch, message, kill, restart, close.

``LocalCluster`` (function mode) and ``launch`` (script mode) are built on
``ClusterRuntime``. Everything the tasks say arrives as events on one queue that
the caller's thread waits on, so output is printed by the thread of the cell that
asked for the work and never lands in another cell.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import queue
import secrets
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Listener
from typing import Any

from dtfkit.engine import control, gpu_plan, lifeline, netns, state
from dtfkit.engine.layout import ClusterLayout, TaskId, cluster_dict, tf_config
from dtfkit.engine.logs import LogBook, parse_done_mark, read_line
from dtfkit.engine.metrics import MetricLog
from dtfkit.errors import ClusterStartError, DtfkitError, TaskNotRunning

NETWORK_MODES = ("auto", "isolated", "host")
TASK_MODES = ("serve", "noserve", "script", "client")
# The folder that holds the dtfkit package (dtfkit/engine/runtime.py is three levels down).
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


HOST_NETWORK_WARNING = (
    "dtfkit: network='host': every TensorFlow server of this cluster listens on every "
    "network interface of this machine without authentication (TensorFlow offers no way "
    "to bind one address), so anyone who can reach its ports can run operations in the "
    "tasks: read and write files as you, read the tasks' environment. Only the control "
    "channel (a private Unix socket with a secret key) is protected. Use it only on a "
    "trusted network or behind a firewall; the default network='auto' keeps the servers "
    "in a private network namespace."
)

_OPEN: set[ClusterRuntime] = set()
_OPEN_LOCK = threading.Lock()


@atexit.register
def _close_all_at_exit() -> None:
    for runtime in list(_OPEN):
        runtime.close()


@dataclass
class Event:
    kind: str  # hello | msg | exit | log
    task: str
    gen: int = 0
    payload: Any = None


class TaskProcess:
    """One task's OS process, as its owner sees it."""

    def __init__(self, task: TaskId, gen: int, popen: subprocess.Popen, port: int | None):
        self.task = task
        self.gen = gen
        self.popen = popen
        self.port = port
        self.conn = None
        self.send_lock = threading.Lock()
        self.ready = False
        self.busy_with: int | None = None
        self.killed = False
        self.start_error: str | None = None
        self.output_closed = threading.Event()  # set once every line it printed is in the log book
        self.identity = state.process_identity(popen.pid)
        self.adopted = False  # True: it came warm from a TaskPool
        self.script_code: int | None = None  # a lingering launched script's exit code

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def status(self) -> str:
        code = self.popen.poll()
        if code is None:
            if not self.ready:
                return "starting"
            return "busy" if self.busy_with is not None else "running"
        if self.killed:
            return "killed"
        return f"exited ({code})"

    def send(self, message) -> None:
        if self.conn is None:
            raise TaskNotRunning(f"{self.task} is not connected yet")
        with self.send_lock:
            try:
                self.conn.send(message)
            except OSError as exc:
                raise TaskNotRunning(f"{self.task} cannot be reached ({exc}); it has {self.status}") from None

    def kill(self) -> None:
        """SIGKILL the task and everything it started (it leads its own process group)."""
        if self.popen.returncode is None:
            self.killed = True
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


class ClusterRuntime:
    """Starts and owns the processes of one cluster. See ``LocalCluster`` for the public API."""

    def __init__(
        self,
        layout: ClusterLayout,
        *,
        mode: str = "serve",
        network: str = "auto",
        gpus: str = "auto",
        env: dict[str, str] | None = None,
        show_tf_logs: bool = False,
        start_timeout: float = 120.0,
        progress: bool = True,
        script: str | None = None,
        script_args: list[str] | None = None,
        linger: bool = False,
        echo: Callable[[str, str], None] | None = None,
        cwd: str | None = None,
        setup_payload: bytes | None = None,
        pool=None,
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
        if network not in NETWORK_MODES:
            raise DtfkitError(f"network must be one of {', '.join(NETWORK_MODES)}, not {network!r}")
        if not (isinstance(start_timeout, (int, float)) and start_timeout > 0):
            raise DtfkitError(f"start_timeout must be a positive number of seconds, not {start_timeout!r}")
        self.layout = layout
        self.mode = mode
        self.network_requested = network
        self.gpu_policy = gpus
        self.extra_env = _check_env(env)
        self.setup_payload = setup_payload
        self.show_tf_logs = show_tf_logs
        self.start_timeout = float(start_timeout)
        self.progress = progress
        self.script = script
        self.script_args = list(script_args or [])
        self.linger = linger
        self.cwd = cwd or os.getcwd()
        self.echo = echo or _print_line
        self.closed = False
        self.isolated = False
        self.isolation_note = ""
        self.namespace = ""
        self.procs: dict[TaskId, TaskProcess] = {}
        self.addresses: dict[TaskId, str] = {}
        self.cluster: dict[str, list[str]] = {}
        self.events: queue.Queue[Event] = queue.Queue()
        self.metrics = MetricLog()
        self.replies: dict[int, dict[TaskId, tuple]] = {}
        self.stacks: dict[int, dict[TaskId, str]] = {}
        self.flushed: dict[int, set[TaskId]] = {}  # call id -> tasks whose output of it is all in
        self.printed_seq = 0
        self.started_at = time.time()
        self._gens = itertools.count(1)
        self._client_ids = itertools.count(0)
        self._anchor: subprocess.Popen | None = None
        self.pool = pool  # a dtfkit.engine.pool.TaskPool to adopt warm processes from, or None
        self.pool_note = "" if pool is not None else "no warm pool"
        self._warm: list = []  # pool processes adopted but not yet given a task
        self._anchor_mark = ""  # the pool id in an adopted anchor's environment
        self._adopt_env: dict[str, str | None] = {}  # what adopted tasks must set (None: unset)
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
        self._socket_path = os.path.join(self.dir, "control.sock")
        # No authkey here: the handshake runs in each connection's own thread (see
        # _read_messages), so one stalled task cannot hold up the others' connections.
        self._listener = Listener(self._socket_path, family="AF_UNIX")
        with _OPEN_LOCK:
            _OPEN.add(self)
        self._spawn_thread(self._accept_loop, "dtfkit-accept")

    # ------------------------------------------------------------------ start
    def start(self) -> None:
        """Start every task and return once each one is serving (or raise)."""
        try:
            self._start_network()
            for attempt in range(1, START_ATTEMPTS + 1):
                try:
                    self._start_tasks(self.layout.tasks)
                    break
                except _PortTaken as exc:
                    if attempt == START_ATTEMPTS:
                        raise ClusterStartError(
                            f"{exc.task} could not bind its port {START_ATTEMPTS} times in a row "
                            "(another program took it between reservation and start); "
                            "try again, or use the default isolated network"
                        ) from None
                    for proc in self.procs.values():
                        proc.kill()
                    self._reap(list(self.procs.values()))
                    self.procs.clear()
            self._write_state()
        except BaseException:
            self.close()
            raise
        finally:
            for warm in self._warm:  # more warm processes than tasks: they cannot serve elsewhere
                _kill_warm(warm)
            self._warm = []
        if self.pool is not None:
            self.pool.fill()

    def _take_from_pool(self) -> bool:
        """Adopt the pool's warm namespace (anchor and warm processes), if this cluster can."""
        from dtfkit.engine.pool import IMPORT_TIME_ENV

        why = ""
        self.pool.expect(len(self.layout.tasks))
        warm_env = self.pool.warm_env()
        changed = _env_changes(warm_env or {}, self._base_env(), self.cwd)
        late = sorted(set(changed) & IMPORT_TIME_ENV)
        if self.network_requested == "host":
            why = "network='host' (the pool is for isolated clusters)"
        elif warm_env is None:
            why = "the warm pool was empty (it fills in the background)"
        elif late:
            why = f"{', '.join(late)} differs from the pool's, and TensorFlow reads it at import"
        elif self._n_gpus:
            why = "GPUs are visible (each task needs its own CUDA_VISIBLE_DEVICES before import)"
        if why:
            self.pool_note = f"started cold: {why}"
            return False
        space = self.pool.take(len(self.layout.tasks))
        if space is None:
            self.pool_note = "started cold: the warm pool was empty (it fills in the background)"
            return False
        self._anchor = space.anchor
        self._anchor_mark = self.pool.id
        self.namespace = space.namespace
        self.isolated = True
        self.isolation_note = f"isolated network namespace {self.namespace}"
        self._warm = list(space.procs)
        self._adopt_env = changed
        used = min(len(self._warm), len(self.layout.tasks))
        self.pool_note = f"adopted {used} warm process(es) from pool {self.pool.id}"
        return True

    def _start_network(self) -> None:
        if self.pool is not None and self._take_from_pool():
            return
        if self.network_requested == "host":
            self.isolation_note = "host network (opted out): servers reachable from other machines"
            warnings.warn(HOST_NETWORK_WARNING, stacklevel=4)
            return
        ok, why = netns.isolation_available()
        if not ok:
            if self.network_requested == "isolated":
                raise ClusterStartError(f"network='isolated' was asked for, but {why}")
            self.isolation_note = f"NOT isolated: {why}; servers reachable from other machines"
            warnings.warn(
                f"dtfkit: {why}. The cluster uses the host network: its TensorFlow servers "
                "listen on every interface without authentication. Use it only on a trusted network.",
                stacklevel=3,
            )
            return
        env = self._base_env()
        self._anchor = subprocess.Popen(
            [sys.executable, "-m", "dtfkit.engine.netns"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        line = _read_line(self._anchor.stdout, timeout=30)
        if not line.startswith("ready "):
            self._anchor.kill()
            raise ClusterStartError(
                f"the network namespace could not be created: {line or 'no answer in 30 s'}; "
                "pass network='host' to run without isolation"
            )
        self.namespace = line.split()[1]
        self.isolated = True
        self.isolation_note = f"isolated network namespace {self.namespace}"

    def _base_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop(lifeline.PDEATHSIG_ENV, None)
        user_path = self.extra_env.get("PYTHONPATH") or env.get("PYTHONPATH")
        env.update(self.extra_env)
        # Tasks must import dtfkit and the caller's own modules, whatever env= says.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, self.cwd, user_path) if p)
        env["PYTHONUNBUFFERED"] = "1"
        env[state.CLUSTER_ENV] = self.id
        env[state.BASE_ENV] = os.path.dirname(self.dir)
        env[lifeline.OWNER_ENV] = str(os.getpid())
        if threading.current_thread() is threading.main_thread():
            env[lifeline.PDEATHSIG_ENV] = "1"
        if not self.show_tf_logs and "TF_CPP_MIN_LOG_LEVEL" not in self.extra_env:
            env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        return env

    def _adopt(self, task: TaskId, warm) -> TaskProcess:
        """Make a warm pool process this cluster's ``task``: it then reports its port as a cold one would."""
        gen = next(self._gens)
        env = {**self._adopt_env, state.CLUSTER_ENV: self.id}
        adopt = {
            "task": task.name,
            "gen": gen,
            "mode": "client" if task.job == "client" else self.mode if task.serves else "noserve",
            "cwd": self.cwd,
            "env": env,
        }
        if self.mode == "script":
            adopt.update(mode="script", script=self.script, script_args=self.script_args, linger=self.linger)
        proc = TaskProcess(task, gen, warm.popen, None)
        proc.adopted = True
        proc.identity["mark"] = warm.mark  # its environment names the pool, not this cluster
        proc.conn = warm.conn
        self.procs[task] = proc
        self._conns.append(warm.conn)
        self._spawn_thread(lambda: self._read_output(proc), f"dtfkit-log-{task.name}")
        self._spawn_thread(lambda: self._read_adopted(warm.conn, task.name, gen), f"dtfkit-conn-{task.name}")
        proc.send(("adopt", adopt))
        return proc

    def _spawn(self, task: TaskId, port: int | None = None, mode: str | None = None) -> TaskProcess:
        if self._warm and port is None and mode is None:
            return self._adopt(task, self._warm.pop(0))
        gen = next(self._gens)
        mode = mode or self.mode
        cfg = {
            "task": task.name,
            "gen": gen,
            "mode": "client" if task.job == "client" else mode if task.serves else "noserve",
            "socket": self._socket_path,
            "authkey": self._authkey.hex(),
            "netns_pid": self._anchor.pid if self._anchor else None,
            "port": port,
        }
        if mode == "script":
            cfg.update(mode="script", script=self.script, script_args=self.script_args, linger=self.linger)
        env = self._base_env()
        env["DTFKIT_TASK"] = json.dumps(cfg)
        visible, growth = self._gpu_plan.get(task.name, ("", False))
        if self._n_gpus:
            env["CUDA_VISIBLE_DEVICES"] = visible
            if growth:
                env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
        popen = subprocess.Popen(
            [sys.executable, "-m", "dtfkit.engine.task_main"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.cwd,
            start_new_session=True,
        )
        proc = TaskProcess(task, gen, popen, port)
        self.procs[task] = proc
        self._spawn_thread(lambda: self._read_output(proc), f"dtfkit-log-{task.name}")
        return proc

    def _start_tasks(self, tasks: tuple[TaskId, ...] | list[TaskId], restart: bool = False) -> None:
        """Spawn ``tasks``, gather their ports, send the ClusterSpec, wait until all serve."""
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
        bar = _progress_bar(len(pending), f"starting {_describe(list(pending))}", self.progress)
        try:
            with self._live_output():
                if not restart:
                    self._wait(
                        lambda: all(p.port is not None for p in pending.values()),
                        deadline,
                        pending,
                        "report its port",
                    )
                    self.addresses = {
                        t: f"localhost:{p.port}" for t, p in pending.items() if p.port is not None
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
                    p.send(("spec", self.cluster, config, self.setup_payload))

                def all_ready() -> bool:
                    if bar is not None:
                        bar.n = sum(p.ready for p in pending.values())
                        bar.refresh()
                    return all(p.ready for p in pending.values())

                self._wait(all_ready, deadline, pending, "start serving")
        finally:
            if bar is not None:
                bar.close()

    # ----------------------------------------------------------------- events
    def _spawn_thread(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def _accept_loop(self) -> None:
        control.serve(self._listener, lambda: self.closed, self._read_messages, "dtfkit-conn")

    def _read_messages(self, conn) -> None:
        self._conns.append(conn)  # close() shuts it down, a stalled handshake's included
        hello = control.first_message(conn, self._authkey, "hello")
        if hello is None:
            return
        _, name, gen, _pid = hello
        self.events.put(Event("hello", name, gen, conn))
        self._read_adopted(conn, name, gen)

    def _read_adopted(self, conn, name: str, gen: int) -> None:
        """Turn what one task sends into events (the connection is authenticated already)."""
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return
            if message[0] == "metric":
                self.metrics.add(name, message[1])
            else:
                self.events.put(Event("msg", name, gen, message))

    def _read_output(self, proc: TaskProcess) -> None:
        name = proc.task.name
        stream = proc.popen.stdout
        while True:
            try:
                raw = read_line(stream)
            except (OSError, ValueError):  # the pipe was closed under us
                break
            if not raw:
                break
            try:
                self._take_line(proc, raw.decode("utf-8", errors="replace").rstrip("\n"))
            except Exception as exc:  # noqa: BLE001 - one odd line must not end the reader
                self.logbook.add(name, f"[dtfkit: could not take a line of output: {exc!r}]")
        proc.output_closed.set()
        stream.close()
        code = proc.popen.wait()
        self.events.put(Event("exit", name, proc.gen, code))

    def _take_line(self, proc: TaskProcess, text: str) -> None:
        name = proc.task.name
        done = parse_done_mark(text)
        if done is not None:
            before, kind, number = done
            if before:  # the call's last output had no newline
                self.logbook.add(name, before)
            self.events.put(Event("msg", name, proc.gen, (kind, number)))
            return
        # Progress bars redraw with carriage returns: keep the last state.
        self.logbook.add(name, text.split("\r")[-1] if "\r" in text else text)

    def _handle(self, event: Event) -> TaskProcess | None:
        """Apply an event to the task it concerns; returns that task (current generation only)."""
        if event.kind == "log":
            self._echo(event.gen, event.task, event.payload)
            return None
        proc = next((p for p in self.procs.values() if p.task.name == event.task), None)
        if proc is None or proc.gen != event.gen:
            return None
        if event.kind == "hello":
            proc.conn = event.payload
        elif event.kind == "msg":
            message = event.payload
            if message[0] == "port":
                proc.port = message[1]
            elif message[0] == "ready":
                proc.ready = True
            elif message[0] in ("result", "error"):
                self.replies.setdefault(message[1], {})[proc.task] = message
            elif message[0] == "script_done":
                proc.script_code = message[1]
            elif message[0] == "output_done":
                self.flushed.setdefault(message[1], set()).add(proc.task)
            elif message[0] == "stacks":
                self.stacks.setdefault(message[1], {})[proc.task] = message[2]
            elif message[0] == "start_failed":
                proc.start_error = message[2]
                if message[1] == "bind" and not self.isolated:
                    raise _PortTaken(proc.task.name)
        return proc

    def _next_event(self, deadline: float | None) -> Event | None:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def _wait(
        self,
        done: Callable[[], bool],
        deadline: float,
        watched: dict[TaskId, TaskProcess],
        what: str,
    ) -> None:
        """Handle events until ``done()``; a watched task dying or the deadline raises."""
        while not done():
            event = self._next_event(deadline)
            if event is None:
                late = [t.name for t, p in watched.items() if not p.ready]
                raise ClusterStartError(
                    f"{', '.join(late)} did not {what} within {self.start_timeout:g} s; "
                    f"last log lines:\n{self._tails(late)}\n"
                    "Next step: look at the log above; on a busy machine pass a larger start_timeout."
                )
            proc = self._handle(event)
            if proc is None or proc.task not in watched:
                continue
            if proc.start_error:
                raise ClusterStartError(
                    f"{proc.task} failed while starting:\n{proc.start_error.rstrip()}\n"
                    f"last log lines:\n{self._tails([proc.task.name])}"
                )
            if event.kind == "exit" and not (self.mode == "script" and proc.ready):
                # (A script that is already running may finish while its peers start.)
                self._drain_events()
                raise ClusterStartError(
                    f"{proc.task} exited with code {event.payload} while starting; last log lines:\n"
                    f"{self._tails([proc.task.name])}\n"
                    "Next step: fix the error shown above, then start the cluster again."
                )

    def _drain_events(self) -> None:
        # The exit event comes after the reader reached EOF, so every line is in.
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return
            self._handle(event)

    def _tails(self, names: list[str], since: int | None = None) -> str:
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
    def waiting(self, what: str):
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

    class _LiveOutput:
        """While the caller waits, print task output in the caller's thread (its cell).

        Lines that arrived after ``since`` while nobody was waiting are printed first.
        """

        def __init__(self, runtime: ClusterRuntime, since: int):
            self.runtime = runtime
            self.since = since

        def __enter__(self):
            rt = self.runtime
            rt.printed_seq = max(rt.printed_seq, self.since)
            rt.logbook.listener = lambda seq, task, line: rt.events.put(Event("log", task, seq, line))
            for seq, task, line in rt.logbook.since(rt.printed_seq):
                rt._echo(seq, task, line)

        def __exit__(self, *exc):
            rt = self.runtime
            rt.logbook.listener = None
            for seq, task, line in rt.logbook.since(rt.printed_seq):
                rt._echo(seq, task, line)

    def _live_output(self, since: int | None = None) -> _LiveOutput:
        return ClusterRuntime._LiveOutput(self, self.logbook.seq if since is None else since)

    def _echo(self, seq: int, task: str, line: str) -> None:
        if seq > self.printed_seq:
            self.printed_seq = seq
            self.echo(task, line)

    # -------------------------------------------------------------- lifecycle
    def task_process(self, task: str | TaskId, index: int | None = None) -> TaskProcess:
        task_id = TaskId.parse(task, index)
        if task_id not in self.procs:
            have = ", ".join(t.name for t in self.layout.tasks)
            raise DtfkitError(f"no task {task_id} in this cluster (it has {have})")
        return self.procs[task_id]

    def kill(self, task: str | TaskId, index: int | None = None) -> None:
        """Kill one task with SIGKILL, as a crash would (for fault-injection lessons)."""
        proc = self.task_process(task, index)
        proc.kill()
        self._reap([proc])
        self._write_state()

    def restart(self, task: str | TaskId | None = None, index: int | None = None) -> None:
        """Start a task again on its old address (all dead tasks when ``task`` is None)."""
        self._check_open()
        with self.waiting("restart()"):  # before anything is killed: a refusal changes nothing
            if task is None:
                targets = [t for t, p in self.procs.items() if not p.alive]
            else:
                targets = [self.task_process(task, index).task]
            for t in targets:
                old = self.procs[t]
                old.kill()
                self._reap([old])
            if targets:
                self._start_tasks(targets, restart=True)
                self._write_state()

    def _reap(self, procs: list[TaskProcess], timeout: float = 10.0) -> None:
        for proc in procs:
            try:
                proc.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass

    def _write_state(self) -> None:
        if self.closed:
            return
        processes = [p.identity for p in self.procs.values() if p.alive]
        if self._anchor is not None:
            anchor = state.process_identity(self._anchor.pid)
            if self._anchor_mark:
                anchor["mark"] = self._anchor_mark
            processes.append(anchor)
        state.write_state(self.dir, self.id, processes, _describe(list(self.layout.tasks)))

    def _check_open(self) -> None:
        if self.closed:
            raise DtfkitError("this cluster is closed; start a new one")

    def close(self) -> None:
        """End every process of the cluster. Safe to call more than once."""
        if self.closed:
            return
        self.closed = True
        procs = list(self.procs.values())
        for proc in procs:
            proc.kill()
        if self._anchor is not None:
            try:
                self._anchor.stdin.close()
            except OSError:
                pass
            self._anchor.kill()
        self._reap(procs)
        # What a task started in a session of its own escaped its process group; its
        # environment still names this cluster.
        state.end_marked_processes(self.id)
        if self._anchor is not None:
            self._anchor.wait(timeout=10)
            self._anchor.stdout.close()
        # Wake the accept loop so its thread ends. A bare connection, not Client():
        # the loop may have ended already (it stops after any accept once closed is
        # set), and Client() would then wait for a handshake for ever.
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(1.0)
                sock.connect(self._socket_path)
        except OSError:
            pass
        self._listener.close()
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

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def pids(self) -> dict[str, int]:
        """Pid of every task process (and of the namespace anchor, as ``"netns"``)."""
        out = {p.task.name: p.pid for p in self.procs.values()}
        if self._anchor is not None:
            out["netns"] = self._anchor.pid
        return out


def _env_changes(old: dict[str, str], new: dict[str, str], cwd: str) -> dict[str, str | None]:
    """What turns environment ``old`` into ``new`` (None: remove), ignoring per-process keys.

    PYTHONPATH counts without the cluster's working directory, which an adopted task
    puts on its sys.path itself.
    """
    skip = {state.CLUSTER_ENV, lifeline.PDEATHSIG_ENV, lifeline.OWNER_ENV, "DTFKIT_TASK", "PYTHONPATH"}
    out: dict[str, str | None] = {k: v for k, v in new.items() if k not in skip and old.get(k) != v}
    out.update({k: None for k in old if k not in skip and k not in new})
    paths_old = [p for p in old.get("PYTHONPATH", "").split(os.pathsep) if p and p != cwd]
    paths_new = [p for p in new.get("PYTHONPATH", "").split(os.pathsep) if p and p != cwd]
    if paths_old != paths_new:
        out["PYTHONPATH"] = new.get("PYTHONPATH", "")
    return out


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


def _kill_warm(warm) -> None:
    try:
        os.killpg(warm.popen.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    warm.popen.wait(timeout=10)
    warm.popen.stdout.close()
    warm.conn.close()


class _PortTaken(Exception):
    def __init__(self, task: str):
        super().__init__(task)
        self.task = task


def _port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def _describe(tasks: list[TaskId]) -> str:
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t.job] = counts.get(t.job, 0) + 1
    return " + ".join(f"{n} {job}" + ("s" if n > 1 and job == "worker" else "") for job, n in counts.items())


def _print_line(task: str, line: str) -> None:
    print(f"[{task}] {line}", flush=True)


def _read_line(stream, timeout: float) -> str:
    """One line from a pipe, waiting at most ``timeout`` seconds."""
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        return ""
    return stream.readline().decode("utf-8", errors="replace").strip()


def _progress_bar(total: int, desc: str, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="task", leave=False)
