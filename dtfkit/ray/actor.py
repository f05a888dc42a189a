"""The Ray actor that runs one dtfkit task on its node and relays everything it says.

One ``TaskActor`` per task start. It listens on a Unix socket in a temporary folder
of its own, starts ``python -m dtfkit.engine.task.task_main`` (in a session of its own,
stdout and stderr on one pipe) with the cluster's config rewritten to that socket,
authenticates the task's connection (``control.first_message``, expecting
``Hello``) and relays its messages (``send``, and ``recv``, a long poll) and its output
(``read_lines``, a long poll). Each has a concurrency group of its own, so a long poll
on one channel never holds up another, and within a group calls run one at a time, in order.
The actor never imports TensorFlow. Its task dies with it: the task is started
from a thread that lives as long as the actor with ``PR_SET_PDEATHSIG``, and the
task's own watcher ends its process group on EOF of the control connection.

Example (what ``dtfkit.ray.launcher`` does)::

    >>> actor = TaskActor.options(scheduling_strategy=...).remote()          # doctest: +SKIP
    >>> info = ray.get(actor.start.remote(config_json, env, cwd, None))      # doctest: +SKIP
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import ray

from dtfkit.engine.launchers.local_process import spawn_task
from dtfkit.engine.platform import lifeline
from dtfkit.engine.platform.taskenv import PACKAGE_ROOT
from dtfkit.engine.wire import control, protocol
from dtfkit.engine.wire.lines import read_line
from dtfkit.engine.wire.protocol import TaskConfig

CONNECT_SECONDS = 120.0  # how long a send waits for the task to connect (it connects before importing TF)
ACCEPT_POLL = 0.5
MAX_BATCH = 512


def node_name(node_id: str) -> str:
    """The short name dtfkit shows for a Ray node: the first 8 hex digits of its id."""
    return node_id[:8]


# Ray's stub of ray.remote(...) lists no concurrency_groups=, which Ray takes for an actor class.
@ray.remote(concurrency_groups={"send": 1, "recv": 1, "output": 1, "admin": 2})  # type: ignore[call-overload]
class TaskActor:
    """Runs one task process on this node and relays its control messages and output."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="dtfk-ray-")  # short: a Unix socket lives in it
        self.socket_path = os.path.join(self.folder, "c.sock")
        self.popen: subprocess.Popen[bytes] | None = None
        self.conn: Connection | None = None
        self.connected = threading.Event()
        self.changed = threading.Condition()
        self.inbox: collections.deque[bytes] = collections.deque()
        self.eof = False
        self.lines: collections.deque[bytes] = collections.deque()
        self.code: int | None = None
        self.output_ended = False
        self.closed = False
        self.workdir = ""
        self.spawner = lifeline.Spawner.get()
        self.node_id = ray.get_runtime_context().get_node_id()

    # ---------------------------------------------------------------- start
    @ray.method(concurrency_group="admin")
    def start(
        self, config_json: str, env: dict[str, str], cwd: str, script: tuple[str, bytes] | None
    ) -> dict:
        """Start the task: ``env`` is added to this node's environment; ``script`` is
        ``(file name, content)`` of a launched script, written here. Returns ``info()``."""
        config = TaskConfig.from_json(config_json)
        changes: dict[str, Any] = {"control": self.socket_path}
        if script is not None:
            name, content = script
            path = os.path.join(self.folder, os.path.basename(name))
            with open(path, "wb") as f:
                f.write(content)
            changes["script"] = path
        config = dataclasses.replace(config, **changes)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.socket_path)
        sock.listen(4)
        sock.settimeout(ACCEPT_POLL)
        workdir = cwd if cwd and os.path.isdir(cwd) else self.folder
        self.workdir = workdir
        full_env = dict(os.environ)
        full_env.update(env)
        user_path = env.get("PYTHONPATH", "")
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, workdir, user_path) if p)
        full_env["DTFKIT_NODE"] = node_name(self.node_id)
        full_env = lifeline.with_lifeline(full_env, from_long_lived_thread=True)  # the spawner's thread
        popen: subprocess.Popen[bytes] = self.spawner.call(lambda: spawn_task(config, full_env, workdir))
        self.popen = popen
        authkey = bytes.fromhex(config.authkey)
        threading.Thread(
            target=self._accept, args=(sock, authkey, config.task, config.gen, popen), daemon=True
        ).start()
        threading.Thread(target=self._read_output, args=(popen,), daemon=True).start()
        return self.info()  # type: ignore[operator]  # ray.method's stub types the handle's info.remote()

    def _accept(
        self, sock: socket.socket, authkey: bytes, task: str, gen: int, popen: subprocess.Popen[bytes]
    ) -> None:
        """Take the task's connection (a foreign or unauthenticated one is dropped), then read it."""
        try:
            while not self.closed and popen.poll() is None:
                try:
                    peer, _ = sock.accept()
                except TimeoutError:
                    continue
                except OSError:
                    break
                peer.settimeout(None)
                conn = Connection(peer.detach())
                hello = control.first_message(conn, authkey, protocol.Hello)
                if hello is None or hello.task != task or hello.gen != gen:
                    if hello is not None:
                        conn.close()
                    continue
                self.conn = conn
                self.connected.set()
                break
        finally:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(self.socket_path)
                # Nothing else in it (no script, not the task's cwd): remove it now, so that an
                # actor killed without shutdown() (its driver died) leaves no folder behind.
                if self.workdir != self.folder:
                    os.rmdir(self.folder)
        if self.conn is None:
            self._eof()
            return
        while True:
            try:
                data = self.conn.recv_bytes()
            except (EOFError, OSError):
                break
            with self.changed:
                self.inbox.append(data)
                self.changed.notify_all()
        self._eof()

    def _eof(self) -> None:
        with self.changed:
            self.eof = True
            self.changed.notify_all()

    def _read_output(self, popen: subprocess.Popen[bytes]) -> None:
        stream = popen.stdout
        assert stream is not None  # spawn_task's pipe
        while True:
            try:
                line = read_line(stream)
            except (OSError, ValueError):
                break
            if not line:
                break
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()
        code = popen.wait()
        with self.changed:
            self.code = code
            self.output_ended = True
            self.changed.notify_all()

    # ------------------------------------------------------------- channels
    @ray.method(concurrency_group="send")
    def send(self, data: bytes, wait: float = CONNECT_SECONDS) -> None:
        """Send one pickled message to the task, waiting (at most ``wait`` s) for it to connect."""
        deadline = time.monotonic() + wait
        while not self.connected.wait(0.2):
            if self.eof or self.output_ended or time.monotonic() >= deadline:
                raise ConnectionError("the task is not connected (it exited, or has not connected in time)")
        conn = self.conn
        assert conn is not None  # set before self.connected
        try:
            conn.send_bytes(data)
        except OSError as exc:
            raise ConnectionError(f"the task's connection is closed ({exc})") from None

    @ray.method(concurrency_group="recv")
    def recv(self, timeout: float) -> tuple[list[bytes], bool]:
        """The messages the task sent (pickled, in order), waiting at most ``timeout`` s for one;
        and True once the connection has ended and nothing is left."""
        with self.changed:
            self.changed.wait_for(lambda: self.inbox or self.eof, timeout)
            batch = [self.inbox.popleft() for _ in range(min(len(self.inbox), MAX_BATCH))]
            return batch, self.eof and not self.inbox

    @ray.method(concurrency_group="output")
    def read_lines(self, timeout: float) -> tuple[list[bytes], int | None]:
        """The output lines since the last call, waiting at most ``timeout`` s for one; and the
        exit code once every line is out and the process exited (None before)."""
        with self.changed:
            self.changed.wait_for(lambda: self.lines or self.output_ended, timeout)
            batch = [self.lines.popleft() for _ in range(min(len(self.lines), MAX_BATCH))]
            done = self.output_ended and not self.lines
            return batch, self.code if done else None

    # ---------------------------------------------------------------- admin
    @ray.method(concurrency_group="admin")
    def kill(self) -> None:
        """SIGKILL the task's process group (as a crash would)."""
        if self.popen is not None and self.popen.poll() is None:
            lifeline.signal_group(self.popen.pid, signal.SIGKILL)

    @ray.method(concurrency_group="admin")
    def wait(self, timeout: float) -> int | None:
        """The task's exit code, waiting at most ``timeout`` s; None if it still runs."""
        if self.popen is None:
            return None
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    @ray.method(concurrency_group="admin")
    def info(self) -> dict:
        """Where the task runs: its pid and start time, the node's id, short name and address."""
        started = None
        pid = self.popen.pid if self.popen is not None else None
        if pid is not None:
            with contextlib.suppress(Exception):  # gone already, or psutil missing on the node
                import psutil

                started = psutil.Process(pid).create_time()
        return {
            "pid": pid,
            "started": started,
            "node_id": self.node_id,
            "node": node_name(self.node_id),
            "ip": ray.util.get_node_ip_address(),
            "actor_pid": os.getpid(),
        }

    @ray.method(concurrency_group="admin")
    def shutdown(self) -> None:
        """End the task (bounded) and remove this actor's folder; the owner then kills the actor."""
        self.closed = True
        self.kill()  # type: ignore[operator]  # ray.method's stub types the handle's kill.remote(), not the method
        if self.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(10)
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.close()
        shutil.rmtree(self.folder, ignore_errors=True)
